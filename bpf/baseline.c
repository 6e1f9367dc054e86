// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The empty classifier: the baseline the datapath benchmark measures against. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("classifier")
int weft_baseline(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
