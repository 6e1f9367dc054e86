//! Addresses for endpoints from the node's pod CIDRs, one per family, remembered in the
//! state directory so that an agent restart (or a crash mid-ADD) neither hands an
//! address out twice nor forgets one.
//!
//! An allocation belongs to an owner (the endpoint's key). Allocating again for the
//! same owner returns the same address: an ADD retried after a crash reuses what the
//! first attempt took. The file is rewritten whole (temporary file, fsync, rename) on
//! every change.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What allocating can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every address of the CIDR is taken.
    #[error("pod CIDR {cidr} has no free address ({used} in use)")]
    Exhausted {
        /// The CIDR.
        cidr: IpNet,
        /// Addresses in use.
        used: usize,
    },
    /// The state directory or a state file cannot be made, read or written.
    #[error("IPAM state {}", path.display())]
    State {
        /// The directory or file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A state file is not the allocations weft writes.
    #[error("IPAM state {} is not JSON of allocations", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
}

/// The allocations of one CIDR, as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Pool {
    cidr: Option<IpNet>,
    /// Address → owner.
    owners: BTreeMap<IpAddr, String>,
}

/// A persistent allocator over the node's pod CIDRs (IPv4, and IPv6 when the node has
/// one).
#[derive(Debug)]
pub struct Ipam {
    pools: Vec<(IpNet, PathBuf, Pool)>,
}

impl Ipam {
    /// Opens (or starts) the allocations of `cidrs` in `dir`. A stored allocation
    /// outside its CIDR (the node's CIDR changed) is dropped, with a warning.
    ///
    /// # Errors
    /// [`Error::State`] when a state file exists but cannot be read, [`Error::Corrupt`]
    /// when it holds no allocations.
    pub fn open(dir: &Path, cidrs: &[IpNet]) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::State {
            path: dir.into(),
            source,
        })?;
        let mut pools = Vec::new();
        for cidr in cidrs {
            let cidr = cidr.trunc();
            let family = if cidr.addr().is_ipv4() {
                "ipv4"
            } else {
                "ipv6"
            };
            let path = dir.join(format!("{family}.json"));
            let mut pool: Pool = match std::fs::read(&path) {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| Error::Corrupt {
                    path: path.clone(),
                    source,
                })?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Pool::default(),
                Err(source) => return Err(Error::State { path, source }),
            };
            pool.owners.retain(|ip, owner| {
                let keep = cidr.contains(ip);
                if !keep {
                    tracing::warn!(%ip, owner, %cidr, "stored address outside the pod CIDR dropped");
                }
                keep
            });
            pool.cidr = Some(cidr);
            pools.push((cidr, path, pool));
        }
        Ok(Self { pools })
    }

    /// The CIDRs allocated from.
    pub fn cidrs(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.pools.iter().map(|(c, _, _)| *c)
    }

    /// The gateway of `cidr`'s endpoints: its first address, never handed out.
    pub fn gateway(cidr: &IpNet) -> IpAddr {
        nth(cidr, 1)
    }

    /// One address per CIDR for `owner`: the ones it already has, or new ones.
    ///
    /// # Errors
    /// [`Error::Exhausted`] when a CIDR is full (nothing is taken then),
    /// [`Error::State`] when the allocation cannot be stored.
    pub fn allocate(&mut self, owner: &str) -> Result<Vec<IpAddr>, Error> {
        let mut picked = Vec::new();
        for (cidr, _, pool) in &self.pools {
            if let Some(ip) = pool
                .owners
                .iter()
                .find(|(_, o)| *o == owner)
                .map(|(ip, _)| *ip)
            {
                picked.push(ip);
                continue;
            }
            let ip = free(cidr, pool).ok_or(Error::Exhausted {
                cidr: *cidr,
                used: pool.owners.len(),
            })?;
            picked.push(ip);
        }
        for ((_, path, pool), ip) in self.pools.iter_mut().zip(&picked) {
            if pool.owners.get(ip).map(String::as_str) != Some(owner) {
                pool.owners.insert(*ip, owner.to_owned());
                store(path, pool)?;
            }
        }
        Ok(picked)
    }

    /// Frees what `owner` holds; nothing when it holds nothing.
    ///
    /// # Errors
    /// [`Error::State`] when the change cannot be stored.
    pub fn release(&mut self, owner: &str) -> Result<(), Error> {
        for (_, path, pool) in &mut self.pools {
            let before = pool.owners.len();
            pool.owners.retain(|_, o| o != owner);
            if pool.owners.len() != before {
                store(path, pool)?;
            }
        }
        Ok(())
    }

    /// Every owner holding an address.
    pub fn owners(&self) -> std::collections::BTreeSet<String> {
        self.pools
            .iter()
            .flat_map(|(_, _, p)| p.owners.values().cloned())
            .collect()
    }

    /// The addresses `owner` holds.
    pub fn addresses(&self, owner: &str) -> Vec<IpAddr> {
        self.pools
            .iter()
            .flat_map(|(_, _, p)| p.owners.iter().filter(|(_, o)| *o == owner))
            .map(|(ip, _)| *ip)
            .collect()
    }
}

/// The first free host address of `cidr`: neither the network address, the gateway,
/// nor (IPv4) the broadcast address. IPv6 pools are searched among their first 2^16
/// addresses: plenty for a node, and bounded.
fn free(cidr: &IpNet, pool: &Pool) -> Option<IpAddr> {
    let host_bits = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
    let size: u128 = if host_bits >= 16 {
        1 << 16
    } else {
        1 << host_bits
    };
    let last = if cidr.addr().is_ipv4() {
        size - 1
    } else {
        size
    };
    (2..last)
        .map(|i| nth(cidr, i))
        .find(|ip| !pool.owners.contains_key(ip))
}

/// The `i`th address of `cidr`.
fn nth(cidr: &IpNet, i: u128) -> IpAddr {
    match cidr.network() {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a).wrapping_add(i as u32)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a).wrapping_add(i)).into()),
    }
}

fn store(path: &Path, pool: &Pool) -> Result<(), Error> {
    let bytes = serde_json::to_vec_pretty(pool).expect("a pool serialises");
    weft_sys::fsutil::write_atomically(path, &bytes, 0o600).map_err(|source| Error::State {
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cidrs(v4: &str, v6: Option<&str>) -> Vec<IpNet> {
        std::iter::once(v4)
            .chain(v6)
            .map(|c| c.parse().unwrap())
            .collect()
    }

    #[test]
    fn an_owner_keeps_its_addresses_across_calls_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let c = cidrs("10.1.0.0/24", Some("fd00:1::/64"));
        let mut ipam = Ipam::open(dir.path(), &c).unwrap();
        let a = ipam.allocate("pod-a/eth0").unwrap();
        assert_eq!(
            a,
            vec![
                "10.1.0.2".parse::<IpAddr>().unwrap(),
                "fd00:1::2".parse().unwrap()
            ]
        );
        assert_eq!(ipam.allocate("pod-a/eth0").unwrap(), a, "idempotent");
        let b = ipam.allocate("pod-b/eth0").unwrap();
        assert_ne!(a, b);
        drop(ipam);
        let mut ipam = Ipam::open(dir.path(), &c).unwrap();
        assert_eq!(ipam.allocate("pod-b/eth0").unwrap(), b, "remembered");
        assert_eq!(ipam.addresses("pod-a/eth0"), a);
        ipam.release("pod-a/eth0").unwrap();
        assert_eq!(ipam.allocate("pod-c/eth0").unwrap(), a, "freed and reused");
    }

    #[test]
    fn a_full_cidr_is_named_and_takes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // /29: 8 addresses, minus network, gateway and broadcast: 5.
        let mut ipam = Ipam::open(dir.path(), &cidrs("10.1.0.0/29", Some("fd00::/64"))).unwrap();
        for i in 0..5 {
            ipam.allocate(&format!("p{i}")).unwrap();
        }
        let e = ipam.allocate("p5").unwrap_err();
        assert!(e.to_string().contains("10.1.0.0/29"), "{e}");
        assert!(
            ipam.addresses("p5").is_empty(),
            "no IPv6 address taken either"
        );
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ipv4.json"), "{not json").unwrap();
        let e = Ipam::open(dir.path(), &cidrs("10.1.0.0/24", None)).unwrap_err();
        assert!(e.to_string().contains("ipv4.json"), "{e}");
    }

    proptest! {
        /// Whatever the sequence of allocations and releases, no address is held by two
        /// owners, none is the network, gateway or broadcast address, and a reopened
        /// allocator agrees with the one that wrote the state.
        #[test]
        fn addresses_are_unique_and_survive_a_reopen(
            ops in proptest::collection::vec((0u8..12, any::<bool>()), 1..60)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let c = cidrs("10.9.0.0/28", None);
            let mut ipam = Ipam::open(dir.path(), &c).unwrap();
            for (owner, add) in ops {
                let owner = format!("o{owner}");
                if add {
                    let _ = ipam.allocate(&owner);
                } else {
                    ipam.release(&owner).unwrap();
                }
            }
            let mut seen = std::collections::BTreeSet::new();
            for owner in ipam.owners() {
                for ip in ipam.addresses(&owner) {
                    prop_assert!(seen.insert(ip), "{ip} held twice");
                    let s = ip.to_string();
                    prop_assert!(!["10.9.0.0", "10.9.0.1", "10.9.0.15"].contains(&s.as_str()));
                }
            }
            let reopened = Ipam::open(dir.path(), &c).unwrap();
            prop_assert_eq!(reopened.owners(), ipam.owners());
            for owner in ipam.owners() {
                prop_assert_eq!(reopened.addresses(&owner), ipam.addresses(&owner));
            }
        }
    }
}
