/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The structs weft's BPF programs share with the agent. Each is defined once here and
 * once in host/src/datapath/layout.rs; the static asserts below and the Rust tests
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

_Static_assert(sizeof(struct weft_ipcache_key) == 24, "ipcache key size");
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
