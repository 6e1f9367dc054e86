//! An IPv4 or IPv6 prefix, normalised (host bits cleared).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address and a prefix length, host bits cleared; a single address is a /32 or /128.
///
/// # Example
/// ```
/// let p: weft_model::Prefix = "10.1.2.3/8".parse().unwrap();
/// assert_eq!(p.to_string(), "10.0.0.0/8");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// A prefix that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an IP address or prefix")]
pub struct PrefixError {
    /// What was given.
    pub input: String,
}

impl Prefix {
    /// `addr/len`, host bits cleared; `None` when `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        let addr = match addr {
            IpAddr::V4(a) if len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) if len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
            _ => return None,
        };
        Some(Prefix { addr, len })
    }

    /// The single address `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Prefix {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Prefix { addr, len }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether this is a single address.
    pub fn is_host(&self) -> bool {
        self.len == self.max_len()
    }

    fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// Whether every address of `other` is in this prefix (a prefix contains itself).
    pub fn contains(&self, other: &Prefix) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.len <= other.len
            && Prefix::new(other.addr, self.len) == Some(*self)
    }

    /// Whether the two prefixes share an address: one contains the other.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.contains(other) || other.contains(self)
    }

    /// The range, in `Prefix` order, of the prefixes whose network address lies in
    /// this one: every prefix this one contains is in it, and whatever else is in it
    /// contains this one.
    pub fn address_range(&self) -> std::ops::RangeInclusive<Prefix> {
        let last = match self.addr {
            IpAddr::V4(a) => {
                let host = u32::MAX.checked_shr(u32::from(self.len)).unwrap_or(0);
                IpAddr::V4((u32::from(a) | host).into())
            }
            IpAddr::V6(a) => {
                let host = u128::MAX.checked_shr(u32::from(self.len)).unwrap_or(0);
                IpAddr::V6((u128::from(a) | host).into())
            }
        };
        let first = Prefix {
            addr: self.addr,
            len: 0,
        };
        first..=Prefix::host(last)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PrefixError {
            input: s.to_owned(),
        };
        match s.split_once('/') {
            None => s.parse().map(Prefix::host).map_err(|_| err()),
            Some((a, l)) => {
                let addr: IpAddr = a.parse().map_err(|_| err())?;
                let len: u8 = l.parse().map_err(|_| err())?;
                Prefix::new(addr, len).ok_or_else(err)
            }
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_and_normalising() {
        assert_eq!(
            "10.0.0.1".parse::<Prefix>().unwrap().to_string(),
            "10.0.0.1/32"
        );
        assert_eq!(
            "10.255.1.1/16".parse::<Prefix>().unwrap().to_string(),
            "10.255.0.0/16"
        );
        assert_eq!("0.0.0.0/0".parse::<Prefix>().unwrap().prefix_len(), 0);
        assert_eq!(
            "f00d::1/64".parse::<Prefix>().unwrap().to_string(),
            "f00d::/64"
        );
        assert!("f00d::1".parse::<Prefix>().unwrap().is_host());
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("nope".parse::<Prefix>().is_err());
    }

    #[test]
    fn containment_and_overlap() {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        assert!(p("10.0.0.0/8").contains(&p("10.1.2.3")));
        assert!(p("10.0.0.0/8").contains(&p("10.0.0.0/8")));
        assert!(!p("10.1.2.3").contains(&p("10.0.0.0/8")));
        assert!(p("10.1.2.3").overlaps(&p("10.0.0.0/8")));
        assert!(!p("10.0.0.0/8").overlaps(&p("11.0.0.0/8")));
        assert!(p("0.0.0.0/0").contains(&p("192.0.2.1")));
        assert!(
            !p("0.0.0.0/0").contains(&p("f00d::1")),
            "the families never overlap"
        );
        assert!(p("::/0").contains(&p("f00d::1")));
        let r = p("10.1.2.0/24").address_range();
        assert!(r.contains(&p("10.1.2.255")) && r.contains(&p("10.1.2.128/25")));
        assert!(!r.contains(&p("10.1.3.0")) && !r.contains(&p("10.1.1.255")));
        assert_eq!(p("0.0.0.0/0").address_range().end(), &p("255.255.255.255"));
    }
}
