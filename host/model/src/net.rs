//! Go's `net.IP` / `net.IPNet` JSON forms.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::IpAddr;

/// Go's `*net.IPNet` as JSON: `{"IP":"10.0.0.0","Mask":"////AA=="}`, the mask in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNet {
    /// The network address.
    #[serde(rename = "IP")]
    pub ip: IpAddr,
    /// The mask bytes (4 for IPv4, 16 for IPv6).
    #[serde(rename = "Mask", with = "mask")]
    pub mask: Vec<u8>,
}

impl IpNet {
    /// The prefix length, or `None` when the mask is not contiguous or has the wrong size.
    pub fn prefix_len(&self) -> Option<u8> {
        prefix_len(&self.mask, &self.ip)
    }
}

/// The prefix length of a contiguous `mask` that fits `ip`'s family.
pub fn prefix_len(mask: &[u8], ip: &IpAddr) -> Option<u8> {
    let expected = if ip.is_ipv4() { 4 } else { 16 };
    if mask.len() != expected {
        return None;
    }
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let contiguous = mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
        .skip(ones as usize)
        .all(|bit| bit == 0);
    contiguous.then_some(ones as u8)
}

/// `Mask` as base64 bytes (Go's `[]byte`), `null` for none.
pub mod mask {
    use super::*;

    /// Serializes the mask as base64.
    pub fn serialize<S: Serializer>(mask: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(mask))
    }

    /// Deserializes a base64 mask.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }

    /// The same for an optional mask (`null` when absent).
    pub mod option {
        use super::*;

        /// Serializes `None` as `null`.
        pub fn serialize<S: Serializer>(mask: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            match mask {
                Some(m) => super::serialize(m, s),
                None => s.serialize_none(),
            }
        }

        /// Deserializes `null` as `None`.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map(Some)
                    .map_err(serde::de::Error::custom),
            }
        }
    }
}

/// Go's `net.IP` text form where the empty string (or `null`) means "no address".
pub mod opt_ip {
    use super::*;

    /// Serializes `None` as `""`, as Go does for a nil `net.IP`.
    pub fn serialize<S: Serializer>(ip: &Option<IpAddr>, s: S) -> Result<S::Ok, S::Error> {
        match ip {
            Some(ip) => s.collect_str(ip),
            None => s.serialize_str(""),
        }
    }

    /// Accepts `""`, `null` or an address.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_len_of_masks() {
        let v4: IpAddr = "10.0.0.0".parse().unwrap();
        assert_eq!(prefix_len(&[255, 255, 255, 0], &v4), Some(24));
        assert_eq!(prefix_len(&[0, 0, 0, 0], &v4), Some(0));
        assert_eq!(prefix_len(&[255, 0, 255, 0], &v4), None);
        assert_eq!(prefix_len(&[255; 16], &v4), None);
        let v6: IpAddr = "f00d::".parse().unwrap();
        assert_eq!(prefix_len(&[255; 16], &v6), Some(128));
    }
}
