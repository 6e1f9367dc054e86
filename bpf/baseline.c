// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Baselines the datapath benchmark measures against: the empty classifier, and the
 * floor of one ipcache lookup (parse the packet, look up its destination, pass).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "weft/datapath.h"

SEC("classifier")
int weft_baseline(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("classifier")
int weft_one_lookup(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip4 = (void *)(eth + 1);

	if ((void *)(ip4 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	return weft_ipcache_lookup4(ip4->daddr) ? TC_ACT_OK : TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
