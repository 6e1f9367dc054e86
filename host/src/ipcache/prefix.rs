//! An IPv4 or IPv6 prefix, normalised (host bits cleared).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address and a prefix length, host bits cleared; a single address is a /32 or /128.
///
/// # Example
/// ```
/// let p: weft::ipcache::Prefix = "10.1.2.3/8".parse().unwrap();
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
        self.len == if self.addr.is_ipv4() { 32 } else { 128 }
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
}
