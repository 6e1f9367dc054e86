//! The structs shared with the BPF programs, defined once on this side (the C side is
//! `bpf/include/weft/layout.h`). The tests below pin the same sizes and offsets as the
//! C header's static asserts, so a change on one side alone fails the build or a test.

#![allow(unsafe_code)] // `aya::Pod` impls: plain `repr(C)` data, every bit pattern valid.

use aya::maps::lpm_trie::Key;
use std::net::IpAddr;
use weft_state::ipcache::{Entry, Prefix};

/// `WEFT_FAMILY_IPV4`.
pub const FAMILY_IPV4: u8 = 1;
/// `WEFT_FAMILY_IPV6`.
pub const FAMILY_IPV6: u8 = 2;
/// `WEFT_IPCACHE_KEY_FIXED_BITS`: cluster id, pad and family precede the address.
pub const KEY_FIXED_BITS: u32 = 32;
/// `WEFT_ENDPOINT_FLAG_TUNNEL_V6`.
pub const FLAG_TUNNEL_V6: u8 = 0x01;
/// `WEFT_CONFIG_NODE_ENCRYPTION`.
pub const CONFIG_NODE_ENCRYPTION: u32 = 0x01;
/// `WEFT_IPCACHE_MAX_ENTRIES`.
pub const IPCACHE_MAX_ENTRIES: u32 = 512_000;

/// The ipcache key after its prefix length (`struct weft_ipcache_key` without
/// `prefixlen`, which aya's [`Key`] carries).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpcacheKeyData {
    /// Always 0: weft's ipcache is not split per cluster.
    pub cluster_id: u16,
    /// Zero.
    pub pad1: u8,
    /// [`FAMILY_IPV4`] or [`FAMILY_IPV6`].
    pub family: u8,
    /// The address: IPv4 in the first four bytes, network order.
    pub addr: [u8; 16],
}

// SAFETY: repr(C), only integers and byte arrays, no padding (2+1+1+16).
unsafe impl aya::Pod for IpcacheKeyData {}

/// `struct weft_ipcache_key`.
pub type IpcacheKey = Key<IpcacheKeyData>;

/// The map key of `prefix`.
///
/// ```
/// use weft_datapath::ipcache_key;
/// let key = ipcache_key(&"10.1.0.0/16".parse().unwrap());
/// assert_eq!(key.prefix_len(), 32 + 16);
/// ```
pub fn ipcache_key(prefix: &Prefix) -> IpcacheKey {
    let mut data = IpcacheKeyData::default();
    match prefix.addr() {
        IpAddr::V4(a) => {
            data.family = FAMILY_IPV4;
            data.addr[..4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            data.family = FAMILY_IPV6;
            data.addr = a.octets();
        }
    }
    Key::new(KEY_FIXED_BITS + u32::from(prefix.prefix_len()), data)
}

/// The prefix of a map key: [`ipcache_key`] read back. `None` for a key no weft
/// writes (an unknown family, a length beyond the family's).
///
/// ```
/// use weft_datapath::{ipcache_key, prefix_of};
/// let prefix = "fd00::/64".parse().unwrap();
/// assert_eq!(prefix_of(&ipcache_key(&prefix)), Some(prefix));
/// ```
pub fn prefix_of(key: &IpcacheKey) -> Option<Prefix> {
    let data = key.data();
    let len = u8::try_from(key.prefix_len().checked_sub(KEY_FIXED_BITS)?).ok()?;
    let addr = match data.family {
        FAMILY_IPV4 => IpAddr::from(<[u8; 4]>::try_from(&data.addr[..4]).ok()?),
        FAMILY_IPV6 => IpAddr::from(data.addr),
        _ => return None,
    };
    Prefix::new(addr, len)
}

/// `struct weft_remote_endpoint_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteEndpointInfo {
    /// The security identity.
    pub sec_identity: u32,
    /// The node to tunnel to: IPv4 in the first four bytes; zero for none.
    pub tunnel_endpoint: [u8; 16],
    /// Zero.
    pub pad: u16,
    /// The encryption key index, 0 for none.
    pub key: u8,
    /// [`FLAG_TUNNEL_V6`].
    pub flags: u8,
}

// SAFETY: repr(C), only integers and byte arrays, no padding (4+16+2+1+1).
unsafe impl aya::Pod for RemoteEndpointInfo {}

impl RemoteEndpointInfo {
    /// The node to tunnel to, as [`Entry::tunnel_endpoint`] had it.
    ///
    /// ```
    /// use weft_datapath::RemoteEndpointInfo;
    /// let mut v = RemoteEndpointInfo::default();
    /// assert_eq!(v.tunnel_endpoint(), None);
    /// v.tunnel_endpoint[..4].copy_from_slice(&[192, 0, 2, 1]);
    /// assert_eq!(v.tunnel_endpoint(), Some("192.0.2.1".parse().unwrap()));
    /// ```
    pub fn tunnel_endpoint(&self) -> Option<IpAddr> {
        if self.flags & FLAG_TUNNEL_V6 != 0 {
            Some(IpAddr::from(self.tunnel_endpoint))
        } else if self.tunnel_endpoint[..4] == [0; 4] {
            None
        } else {
            let v4: [u8; 4] = self.tunnel_endpoint[..4].try_into().expect("four bytes");
            Some(IpAddr::from(v4))
        }
    }
}

impl From<&Entry> for RemoteEndpointInfo {
    fn from(e: &Entry) -> Self {
        let mut v = RemoteEndpointInfo {
            sec_identity: e.identity,
            key: e.encrypt_key,
            ..Default::default()
        };
        match e.tunnel_endpoint {
            Some(IpAddr::V4(a)) => v.tunnel_endpoint[..4].copy_from_slice(&a.octets()),
            Some(IpAddr::V6(a)) => {
                v.tunnel_endpoint = a.octets();
                v.flags |= FLAG_TUNNEL_V6;
            }
            None => {}
        }
        v
    }
}

/// `WEFT_DIR_INGRESS`: to the endpoint.
pub const DIR_INGRESS: u8 = 0;
/// `WEFT_DIR_EGRESS`: from the endpoint.
pub const DIR_EGRESS: u8 = 1;
/// `WEFT_ENDPOINT_INGRESS_ENFORCED`.
pub const ENDPOINT_INGRESS_ENFORCED: u32 = 0x01;
/// `WEFT_ENDPOINT_EGRESS_ENFORCED`.
pub const ENDPOINT_EGRESS_ENFORCED: u32 = 0x02;

/// `struct weft_policy_key`: one allowed flow of an endpoint.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PolicyKey {
    /// The endpoint: its host side's ifindex.
    pub endpoint: u32,
    /// The peer's identity; 0 for any.
    pub identity: u32,
    /// The destination port, host order; 0 for any.
    pub dport: u16,
    /// The IP protocol; 0 for any.
    pub protocol: u8,
    /// [`DIR_INGRESS`] or [`DIR_EGRESS`].
    pub direction: u8,
}

// SAFETY: repr(C), integers only, no padding (4+4+2+1+1).
unsafe impl aya::Pod for PolicyKey {}

/// `struct weft_endpoint`: an endpoint, by its host side's ifindex.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointInfo {
    /// Its security identity.
    pub identity: u32,
    /// [`ENDPOINT_INGRESS_ENFORCED`], [`ENDPOINT_EGRESS_ENFORCED`].
    pub flags: u32,
}

// SAFETY: repr(C), two u32, no padding.
unsafe impl aya::Pod for EndpointInfo {}

/// `struct weft_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DatapathConfig {
    /// The WireGuard device's ifindex, in the native device's namespace; 0 = none.
    pub wg_ifindex: u32,
    /// [`CONFIG_NODE_ENCRYPTION`].
    pub flags: u32,
}

// SAFETY: repr(C), two u32, no padding.
unsafe impl aya::Pod for DatapathConfig {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The same numbers as the static asserts in `bpf/include/weft/layout.h`.
    #[test]
    fn layouts_match_the_c_header() {
        assert_eq!(size_of::<IpcacheKey>(), 24);
        assert_eq!(size_of::<IpcacheKeyData>(), 20);
        // In the C struct every field sits 4 bytes (prefixlen) further.
        assert_eq!(4 + offset_of!(IpcacheKeyData, cluster_id), 4);
        assert_eq!(4 + offset_of!(IpcacheKeyData, family), 7);
        assert_eq!(4 + offset_of!(IpcacheKeyData, addr), 8);
        assert_eq!(size_of::<RemoteEndpointInfo>(), 24);
        assert_eq!(offset_of!(RemoteEndpointInfo, tunnel_endpoint), 4);
        assert_eq!(offset_of!(RemoteEndpointInfo, key), 22);
        assert_eq!(offset_of!(RemoteEndpointInfo, flags), 23);
        assert_eq!(size_of::<DatapathConfig>(), 8);
        assert_eq!(offset_of!(DatapathConfig, flags), 4);
        assert_eq!(size_of::<PolicyKey>(), 12);
        assert_eq!(offset_of!(PolicyKey, dport), 8);
        assert_eq!(offset_of!(PolicyKey, direction), 11);
        assert_eq!(size_of::<EndpointInfo>(), 8);
    }

    #[test]
    fn the_c_header_says_the_same() {
        let header = include_str!("../../../bpf/include/weft/layout.h");
        for line in [
            "sizeof(struct weft_ipcache_key) == 24",
            "offsetof(struct weft_ipcache_key, cluster_id) == 4",
            "offsetof(struct weft_ipcache_key, family) == 7",
            "offsetof(struct weft_ipcache_key, ip4) == 8",
            "sizeof(struct weft_remote_endpoint_info) == 24",
            "offsetof(struct weft_remote_endpoint_info, tunnel_endpoint) == 4",
            "offsetof(struct weft_remote_endpoint_info, key) == 22",
            "offsetof(struct weft_remote_endpoint_info, flags) == 23",
            "sizeof(struct weft_config) == 8",
            "offsetof(struct weft_config, flags) == 4",
            "sizeof(struct weft_policy_key) == 12",
            "offsetof(struct weft_policy_key, dport) == 8",
            "offsetof(struct weft_policy_key, direction) == 11",
            "sizeof(struct weft_endpoint) == 8",
        ] {
            assert!(header.contains(line), "layout.h no longer asserts {line}");
        }
        for (name, value) in [
            ("WEFT_FAMILY_IPV4 1", FAMILY_IPV4 as u32),
            ("WEFT_FAMILY_IPV6 2", FAMILY_IPV6 as u32),
            ("WEFT_IPCACHE_KEY_FIXED_BITS 32", KEY_FIXED_BITS),
            ("WEFT_ENDPOINT_FLAG_TUNNEL_V6 0x01", FLAG_TUNNEL_V6 as u32),
            ("WEFT_CONFIG_NODE_ENCRYPTION 0x01", CONFIG_NODE_ENCRYPTION),
            ("WEFT_DIR_INGRESS 0", DIR_INGRESS as u32),
            ("WEFT_DIR_EGRESS 1", DIR_EGRESS as u32),
            (
                "WEFT_ENDPOINT_INGRESS_ENFORCED 0x01",
                ENDPOINT_INGRESS_ENFORCED,
            ),
            (
                "WEFT_ENDPOINT_EGRESS_ENFORCED 0x02",
                ENDPOINT_EGRESS_ENFORCED,
            ),
        ] {
            assert!(header.contains(name), "layout.h: {name} ({value})");
        }
    }

    #[test]
    fn keys_and_values_from_the_ipcache() {
        let key = ipcache_key(&"10.1.2.0/24".parse().unwrap());
        assert_eq!(key.prefix_len(), 56);
        assert_eq!(key.data().family, FAMILY_IPV4);
        assert_eq!(&key.data().addr[..4], &[10, 1, 2, 0]);
        let key = ipcache_key(&"fd00::1/128".parse().unwrap());
        assert_eq!((key.prefix_len(), key.data().family), (160, FAMILY_IPV6));
        let entry = Entry {
            identity: 70_000,
            tunnel_endpoint: Some("fd00::9".parse().unwrap()),
            encrypt_key: 0xFF,
            source: weft_state::ipcache::Source::ClusterMesh,
            k8s: None,
        };
        let v = RemoteEndpointInfo::from(&entry);
        assert_eq!(
            (v.sec_identity, v.key, v.flags),
            (70_000, 0xFF, FLAG_TUNNEL_V6)
        );
        assert_eq!(v.tunnel_endpoint(), entry.tunnel_endpoint);
    }

    proptest::proptest! {
        /// A key and a value read back from the map say what was written.
        #[test]
        fn keys_and_values_read_back(
            v4 in proptest::prelude::any::<[u8; 4]>(),
            v6 in proptest::prelude::any::<[u8; 16]>(),
            len in 0u8..=128,
            tunnel in proptest::option::of(proptest::prelude::any::<[u8; 4]>()),
        ) {
            for addr in [IpAddr::from(v4), IpAddr::from(v6)] {
                let len = if addr.is_ipv4() { len % 33 } else { len };
                let prefix = Prefix::new(addr, len).unwrap();
                proptest::prop_assert_eq!(prefix_of(&ipcache_key(&prefix)), Some(prefix));
            }
            // 0.0.0.0 is "no tunnel" in the map, as in the C side.
            let tunnel = tunnel.filter(|t| *t != [0; 4]).map(IpAddr::from);
            let entry = Entry {
                identity: 1,
                tunnel_endpoint: tunnel,
                encrypt_key: 0,
                source: weft_state::ipcache::Source::ClusterMesh,
                k8s: None,
            };
            proptest::prop_assert_eq!(RemoteEndpointInfo::from(&entry).tunnel_endpoint(), tunnel);
        }
    }
}
