/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Maps, marks and identities shared by weft's programs. */
#ifndef WEFT_DATAPATH_H
#define WEFT_DATAPATH_H

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include "weft/layout.h"

/* skb->mark: WireGuard sets these bits on what it has encrypted (mask test). */
#define WEFT_MARK_WG_ENCRYPTED 0x1E00

/* Reserved identities (see host/src/identity). */
#define WEFT_ID_HOST 1
#define WEFT_ID_WORLD 2
#define WEFT_ID_HEALTH 4
#define WEFT_ID_REMOTE_NODE 6
#define WEFT_ID_KUBE_APISERVER 7
/* Identities from here up are workloads (pods) of some cluster... */
#define WEFT_ID_FIRST_WORKLOAD 256
/* ...unless they carry the local scope bit (CIDR identities of this node). */
#define WEFT_ID_LOCAL_SCOPE (1U << 24)

#define WEFT_IPCACHE_MAX_ENTRIES 512000

/*
 * The ipcache, in two maps with the same key and value. Host prefixes (/32, /128),
 * nearly all of a cluster's entries, are in a hash map: an exact match is always the
 * longest one, and a hash lookup does not walk a trie as deep as the number of
 * entries. Every other prefix is in the LPM trie, which stays small and shallow.
 * Neither is pinned by name: every generation has its own pair, and the agent pins
 * them in the generation's directory.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct weft_ipcache_key);
	__type(value, struct weft_remote_endpoint_info);
	__uint(max_entries, WEFT_IPCACHE_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} weft_ipcache_hosts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct weft_ipcache_key);
	__type(value, struct weft_remote_endpoint_info);
	__uint(max_entries, WEFT_IPCACHE_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} weft_ipcache SEC(".maps");

/* One entry, shared by every generation (pinned by name). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct weft_config);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} weft_config SEC(".maps");

static __always_inline const struct weft_config *weft_config_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&weft_config, &zero);
}

/* The longest match for `key` (a full-length key): the host entry, else the trie. */
static __always_inline const struct weft_remote_endpoint_info *
weft_ipcache_lookup(const struct weft_ipcache_key *key)
{
	const struct weft_remote_endpoint_info *info;

	info = bpf_map_lookup_elem(&weft_ipcache_hosts, key);
	if (info)
		return info;
	return bpf_map_lookup_elem(&weft_ipcache, key);
}

static __always_inline const struct weft_remote_endpoint_info *weft_ipcache_lookup4(__u32 addr)
{
	struct weft_ipcache_key key;

	/* Every byte counts in a hash key: an initializer naming one union member does
	 * not zero the rest of the union. */
	__builtin_memset(&key, 0, sizeof(key));
	key.prefixlen = WEFT_IPCACHE_KEY_FIXED_BITS + 32;
	key.family = WEFT_FAMILY_IPV4;
	key.ip4 = addr;
	return weft_ipcache_lookup(&key);
}

static __always_inline const struct weft_remote_endpoint_info *
weft_ipcache_lookup6(const struct in6_addr *addr)
{
	struct weft_ipcache_key key;

	__builtin_memset(&key, 0, sizeof(key));
	key.prefixlen = WEFT_IPCACHE_KEY_FIXED_BITS + 128;
	key.family = WEFT_FAMILY_IPV6;
	__builtin_memcpy(key.ip6, addr, 16);
	return weft_ipcache_lookup(&key);
}

#endif
