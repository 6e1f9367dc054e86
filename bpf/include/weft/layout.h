/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The structs weft's BPF programs share with the agent. Each is defined once here and
 * once in host/datapath/src/layout.rs; the static asserts below and the Rust tests
 * there pin both to the same sizes and offsets.
 */
#ifndef WEFT_LAYOUT_H
#define WEFT_LAYOUT_H

#include <linux/types.h>
#include <stddef.h>

#define WEFT_FAMILY_IPV4 1
#define WEFT_FAMILY_IPV6 2

/* Bits of the key before the address: cluster_id, pad, family. */
#define WEFT_IPCACHE_KEY_FIXED_BITS 32

/* The ipcache map's key: an LPM trie key whose prefix length counts the fixed 32 bits
 * (cluster id, pad, family) plus the address bits. */
struct weft_ipcache_key {
	__u32 prefixlen;
	__u16 cluster_id;
	__u8 pad1;
	__u8 family;
	union {
		__u32 ip4;
		__u8 ip6[16];
	};
};

#define WEFT_ENDPOINT_FLAG_TUNNEL_V6 0x01

/* What the ipcache knows of a prefix. */
struct weft_remote_endpoint_info {
	__u32 sec_identity;
	union {
		__u32 ip4;
		__u8 ip6[16];
	} tunnel_endpoint;
	__u16 pad;
	__u8 key;   /* encryption key index, 0 = none */
	__u8 flags; /* WEFT_ENDPOINT_FLAG_* */
};

#define WEFT_CONFIG_NODE_ENCRYPTION 0x01

/* Set by the agent: where to redirect, and how. */
struct weft_config {
	__u32 wg_ifindex; /* 0 = no WireGuard device: nothing is redirected */
	__u32 flags;      /* WEFT_CONFIG_* */
};

/* Directions of a policy entry, seen from the endpoint. */
#define WEFT_DIR_INGRESS 0 /* to the endpoint */
#define WEFT_DIR_EGRESS 1  /* from the endpoint */

/* An allowed flow of one endpoint: the peer's identity (0: any), the destination port
 * in host order (0: any) and the IP protocol (0: any), in one direction. An endpoint is
 * named by the ifindex of its host side, where its programs run. */
struct weft_policy_key {
	__u32 endpoint;
	__u32 identity;
	__u16 dport;
	__u8 protocol;
	__u8 direction;
};

#define WEFT_ENDPOINT_INGRESS_ENFORCED 0x01
#define WEFT_ENDPOINT_EGRESS_ENFORCED 0x02

/* An endpoint, by the ifindex of its host side. */
struct weft_endpoint {
	__u32 identity;
	__u32 flags; /* WEFT_ENDPOINT_*_ENFORCED */
};

/* A flow the policy allowed, as it left or entered the endpoint; its replies match
 * the reversed tuple. Addresses as in the packet (IPv4 in the first four bytes). */
struct weft_ct_key {
	__u32 endpoint;
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u8 protocol;
	__u8 family;
	__u16 pad;
};

_Static_assert(sizeof(struct weft_ipcache_key) == 24, "ipcache key size");
_Static_assert(sizeof(struct weft_policy_key) == 12, "policy key size");
_Static_assert(offsetof(struct weft_policy_key, dport) == 8, "policy dport");
_Static_assert(offsetof(struct weft_policy_key, direction) == 11, "policy direction");
_Static_assert(sizeof(struct weft_endpoint) == 8, "endpoint size");
_Static_assert(sizeof(struct weft_ct_key) == 44, "ct key size");
_Static_assert(offsetof(struct weft_ct_key, sport) == 36, "ct sport");
_Static_assert(offsetof(struct weft_ct_key, family) == 41, "ct family");
_Static_assert(offsetof(struct weft_ipcache_key, cluster_id) == 4, "cluster_id");
_Static_assert(offsetof(struct weft_ipcache_key, family) == 7, "family");
_Static_assert(offsetof(struct weft_ipcache_key, ip4) == 8, "address");
_Static_assert(sizeof(struct weft_remote_endpoint_info) == 24, "ipcache value size");
_Static_assert(offsetof(struct weft_remote_endpoint_info, tunnel_endpoint) == 4, "tunnel");
_Static_assert(offsetof(struct weft_remote_endpoint_info, key) == 22, "key");
_Static_assert(offsetof(struct weft_remote_endpoint_info, flags) == 23, "flags");
_Static_assert(sizeof(struct weft_config) == 8, "config size");
_Static_assert(offsetof(struct weft_config, flags) == 4, "config flags");

#endif
