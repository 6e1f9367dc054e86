// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The endpoint programs, on the host side of an endpoint's veth: `weft_from_endpoint`
 * (tc ingress: what the container sends) and `weft_to_endpoint` (tc egress: what it
 * receives). Each finds the peer's identity in the ipcache of the generation it was
 * loaded with and lets the packet through only if the endpoint's policy allows it, or
 * if it answers a flow the policy allowed. A peer the ipcache does not know counts as
 * `world`: a remote pod whose entry or identity has not arrived is dropped by a policy
 * that admits it by labels. That is what the regeneration wait prevents.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "weft/datapath.h"

/* Each generation has its own: not pinned by name. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct weft_policy_key);
	__type(value, __u8);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} weft_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct weft_endpoint);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} weft_endpoints SEC(".maps");

/* Flows the policy allowed; least recently used ones go first when it is full. Shared
 * by every generation (pinned by name): a switch to a new generation must not forget
 * the flows whose replies it lets in. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct weft_ct_key);
	__type(value, __u8);
	__uint(max_entries, 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} weft_ct SEC(".maps");

/* What the programs need of a packet. */
struct weft_flow {
	struct weft_ct_key ct; /* as seen on the wire */
	const struct weft_remote_endpoint_info *peer;
};

/* Parses the IPv4 or IPv6 header and the ports of TCP, UDP and SCTP. `peer_is_dst`:
 * the peer is the destination (egress) rather than the source (ingress). Returns 0 for
 * a packet the programs do not judge (not IP). */
static __always_inline int weft_parse(struct __sk_buff *skb, struct weft_flow *f, int peer_is_dst)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u8 protocol;
	void *l4;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip4 = (void *)(eth + 1);

		if ((void *)(ip4 + 1) > data_end)
			return 0;
		f->ct.family = WEFT_FAMILY_IPV4;
		__builtin_memcpy(f->ct.saddr, &ip4->saddr, 4);
		__builtin_memcpy(f->ct.daddr, &ip4->daddr, 4);
		protocol = ip4->protocol;
		l4 = (void *)ip4 + ip4->ihl * 4;
		f->peer = weft_ipcache_lookup4(peer_is_dst ? ip4->daddr : ip4->saddr);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		f->ct.family = WEFT_FAMILY_IPV6;
		__builtin_memcpy(f->ct.saddr, &ip6->saddr, 16);
		__builtin_memcpy(f->ct.daddr, &ip6->daddr, 16);
		/* Extension headers are not followed: the ports stay 0. */
		protocol = ip6->nexthdr;
		l4 = ip6 + 1;
		f->peer = weft_ipcache_lookup6(peer_is_dst ? &ip6->daddr : &ip6->saddr);
	} else {
		return 0;
	}
	f->ct.protocol = protocol;
	if (protocol == IPPROTO_TCP || protocol == IPPROTO_UDP || protocol == IPPROTO_SCTP) {
		__be16 *ports = l4;

		if ((void *)(ports + 2) > data_end)
			return 0;
		f->ct.sport = bpf_ntohs(ports[0]);
		f->ct.dport = bpf_ntohs(ports[1]);
	}
	return 1;
}

/* Whether `endpoint`'s policy allows `identity` on `dport`/`protocol` in `direction`:
 * an exact entry, or one for any port, any protocol or any identity. */
static __always_inline int weft_policy_allows(__u32 endpoint, __u32 identity, __u16 dport,
					      __u8 protocol, __u8 direction)
{
	struct weft_policy_key key = {
		.endpoint = endpoint,
		.direction = direction,
	};
	__u32 ids[2] = { identity, 0 };
	int i;

#pragma unroll
	for (i = 0; i < 2; i++) {
		key.identity = ids[i];
		key.dport = dport;
		key.protocol = protocol;
		if (bpf_map_lookup_elem(&weft_policy, &key))
			return 1;
		key.dport = 0;
		if (bpf_map_lookup_elem(&weft_policy, &key))
			return 1;
		key.protocol = 0;
		if (bpf_map_lookup_elem(&weft_policy, &key))
			return 1;
		key.dport = dport;
		if (bpf_map_lookup_elem(&weft_policy, &key))
			return 1;
	}
	return 0;
}

/* Whether the packet answers a flow allowed the other way: the reversed tuple. */
static __always_inline int weft_ct_reply(const struct weft_flow *f, __u32 endpoint)
{
	struct weft_ct_key rev;

	__builtin_memset(&rev, 0, sizeof(rev));
	rev.endpoint = endpoint;
	__builtin_memcpy(rev.saddr, f->ct.daddr, 16);
	__builtin_memcpy(rev.daddr, f->ct.saddr, 16);
	rev.sport = f->ct.dport;
	rev.dport = f->ct.sport;
	rev.protocol = f->ct.protocol;
	rev.family = f->ct.family;
	return bpf_map_lookup_elem(&weft_ct, &rev) != 0;
}

/* Judges a packet in `direction`. A direction the endpoint's policy enforces lets
 * through what it allows and the replies of flows that went the other way. Every flow
 * that passes and is not a reply is remembered, in the direction it went: its replies
 * then pass, and its own packets stay judged by the policy. Remembering only flows
 * whose replies need it would let a reply (an ACK, say) be remembered as a flow of its
 * own, and the packets it answers pass as its "replies", unjudged: a policy change, or
 * an endpoint switched to a generation without the peer's identity, would never reach
 * an established connection. */
static __always_inline int weft_judge(struct __sk_buff *skb, __u8 direction, __u32 this_flag,
				      __u32 other_flag)
{
	const struct weft_endpoint *ep;
	struct weft_flow f;
	__u32 endpoint = skb->ifindex;
	__u32 peer;
	__u8 one = 1;

	ep = bpf_map_lookup_elem(&weft_endpoints, &endpoint);
	/* An endpoint this generation does not know, or no policy: not judged. */
	if (!ep || !(ep->flags & (this_flag | other_flag)))
		return TC_ACT_OK;
	__builtin_memset(&f, 0, sizeof(f));
	if (!weft_parse(skb, &f, direction == WEFT_DIR_EGRESS))
		return TC_ACT_OK;
	f.ct.endpoint = endpoint;
	if (weft_ct_reply(&f, endpoint))
		return TC_ACT_OK;
	if (ep->flags & this_flag) {
		peer = f.peer ? f.peer->sec_identity : WEFT_ID_WORLD;
		if (!weft_policy_allows(endpoint, peer, f.ct.dport, f.ct.protocol, direction))
			return TC_ACT_SHOT;
	}
	/* A lookup costs less than an update: a known flow is not written again. */
	if (!bpf_map_lookup_elem(&weft_ct, &f.ct))
		bpf_map_update_elem(&weft_ct, &f.ct, &one, BPF_ANY);
	return TC_ACT_OK;
}

SEC("classifier")
int weft_from_endpoint(struct __sk_buff *skb)
{
	return weft_judge(skb, WEFT_DIR_EGRESS, WEFT_ENDPOINT_EGRESS_ENFORCED,
			  WEFT_ENDPOINT_INGRESS_ENFORCED);
}

SEC("classifier")
int weft_to_endpoint(struct __sk_buff *skb)
{
	return weft_judge(skb, WEFT_DIR_INGRESS, WEFT_ENDPOINT_INGRESS_ENFORCED,
			  WEFT_ENDPOINT_EGRESS_ENFORCED);
}
