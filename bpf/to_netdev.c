// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * to-netdev: tc egress on the node's native device. Traffic that must be encrypted is
 * redirected to the WireGuard device; WireGuard marks what it has encrypted, so the
 * second pass goes out untouched. Because the decision is here and not in ip rules,
 * pod→pod, host→host, pod→host and host→pod are covered alike, and no rule can be
 * deleted by accident to bypass encryption.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "weft/datapath.h"

/* Whether traffic from `src` to a destination with a key is encrypted. */
static __always_inline int weft_source_encrypts(const struct weft_remote_endpoint_info *src,
						const struct weft_config *cfg)
{
	__u32 id;

	/* A source the ipcache does not know is not of the cluster. */
	if (!src)
		return 0;
	id = src->sec_identity;
	/* The host's own traffic only with node encryption. */
	if (id == WEFT_ID_HOST)
		return cfg->flags & WEFT_CONFIG_NODE_ENCRYPTION;
	/* CIDR identities are outside the cluster. */
	if (id & WEFT_ID_LOCAL_SCOPE)
		return 0;
	/* Pods of any cluster, and the health endpoint, are always encrypted; world and
	 * remote nodes (traffic passing through) are not. */
	return id >= WEFT_ID_FIRST_WORKLOAD || id == WEFT_ID_HEALTH;
}

SEC("classifier")
int weft_to_netdev(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	const struct weft_remote_endpoint_info *src, *dst;
	const struct weft_config *cfg;
	struct ethhdr *eth = data;

	/* Already encrypted by WireGuard: out it goes. */
	if ((skb->mark & WEFT_MARK_WG_ENCRYPTED) == WEFT_MARK_WG_ENCRYPTED)
		return TC_ACT_OK;
	cfg = weft_config_get();
	if (!cfg || !cfg->wg_ifindex)
		return TC_ACT_OK;
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_OK;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip4 = (void *)(eth + 1);

		if ((void *)(ip4 + 1) > data_end)
			return TC_ACT_OK;
		dst = weft_ipcache_lookup4(ip4->daddr);
		if (!dst || !dst->key)
			return TC_ACT_OK;
		src = weft_ipcache_lookup4(ip4->saddr);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return TC_ACT_OK;
		dst = weft_ipcache_lookup6(&ip6->daddr);
		if (!dst || !dst->key)
			return TC_ACT_OK;
		src = weft_ipcache_lookup6(&ip6->saddr);
	} else {
		return TC_ACT_OK;
	}

	if (!weft_source_encrypts(src, cfg))
		return TC_ACT_OK;
	return bpf_redirect(cfg->wg_ifindex, 0);
}
