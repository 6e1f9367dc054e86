//! The endpoint programs' maps in a generation: which endpoints it knows (by their host
//! side's ifindex) with their enforcement, and each one's allowed flows, written from
//! the endpoint's computed policy ([`weft_state::policy::EndpointPolicy`]).

use super::layout::{
    EndpointInfo, PolicyKey, DIR_EGRESS, DIR_INGRESS, ENDPOINT_EGRESS_ENFORCED,
    ENDPOINT_INGRESS_ENFORCED,
};
use super::Error;
use aya::maps::{HashMap, MapData};
use std::collections::BTreeSet;
use weft_state::policy::{Allow, EndpointPolicy};

/// The endpoint program on the host side's tc ingress: what the container sends.
pub const FROM_ENDPOINT: &str = "weft_from_endpoint";
/// The endpoint program on the host side's tc egress: what the container receives.
pub const TO_ENDPOINT: &str = "weft_to_endpoint";
/// Generation maps of the endpoint programs.
pub(super) const POLICY_MAP: &str = "weft_policy";
pub(super) const ENDPOINTS_MAP: &str = "weft_endpoints";

/// The most policy entries one endpoint may have: port ranges are written port by
/// port, and a policy that would need more is refused, not truncated.
pub const MAX_POLICY_ENTRIES: usize = 16_384;

/// A generation's endpoint maps.
pub(super) struct EndpointMaps {
    pub(super) endpoints: HashMap<MapData, u32, EndpointInfo>,
    pub(super) policy: HashMap<MapData, PolicyKey, u8>,
}

/// The map entries of endpoint `ifindex` (identity `identity`) under `policy`.
///
/// # Errors
/// [`Error::PolicyTooLarge`] when the policy needs more than [`MAX_POLICY_ENTRIES`].
pub fn policy_entries(
    ifindex: u32,
    identity: u32,
    policy: &EndpointPolicy,
) -> Result<(EndpointInfo, BTreeSet<PolicyKey>), Error> {
    let mut flags = 0;
    if policy.ingress_enforced {
        flags |= ENDPOINT_INGRESS_ENFORCED;
    }
    if policy.egress_enforced {
        flags |= ENDPOINT_EGRESS_ENFORCED;
    }
    let mut keys = BTreeSet::new();
    let mut add = |allows: &BTreeSet<Allow>, direction: u8| -> Result<(), Error> {
        for a in allows {
            let ports = if a.first == 0 {
                0..=0
            } else {
                a.first..=a.last
            };
            for dport in ports {
                keys.insert(PolicyKey {
                    endpoint: ifindex,
                    identity: a.identity,
                    dport,
                    protocol: a.protocol,
                    direction,
                });
                if keys.len() > MAX_POLICY_ENTRIES {
                    return Err(Error::PolicyTooLarge {
                        ifindex,
                        max: MAX_POLICY_ENTRIES,
                    });
                }
            }
        }
        Ok(())
    };
    add(&policy.ingress, DIR_INGRESS)?;
    add(&policy.egress, DIR_EGRESS)?;
    Ok((EndpointInfo { identity, flags }, keys))
}

impl EndpointMaps {
    /// Replaces endpoint `ifindex`'s entries with `info` and `keys`: the new entries
    /// first, then the stale ones removed, so no packet meets an empty policy.
    pub(super) fn set(
        &mut self,
        ifindex: u32,
        info: EndpointInfo,
        keys: &BTreeSet<PolicyKey>,
    ) -> Result<(), Error> {
        for k in keys {
            self.policy.insert(k, 1, 0).map_err(|source| Error::Map {
                map: POLICY_MAP.into(),
                source,
            })?;
        }
        let stale: Vec<PolicyKey> = self
            .policy
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.endpoint == ifindex && !keys.contains(k))
            .collect();
        for k in stale {
            let _ = self.policy.remove(&k);
        }
        self.endpoints
            .insert(ifindex, info, 0)
            .map_err(|source| Error::Map {
                map: ENDPOINTS_MAP.into(),
                source,
            })
    }

    /// Forgets endpoint `ifindex`.
    pub(super) fn remove(&mut self, ifindex: u32) {
        let _ = self.endpoints.remove(&ifindex);
        let mine: Vec<PolicyKey> = self
            .policy
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.endpoint == ifindex)
            .collect();
        for k in mine {
            let _ = self.policy.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_written_port_by_port_and_any_port_as_zero() {
        let policy = EndpointPolicy {
            ingress_enforced: true,
            egress_enforced: false,
            ingress: [
                Allow {
                    identity: 70_000,
                    protocol: 6,
                    first: 8000,
                    last: 8002,
                },
                Allow {
                    identity: 1,
                    protocol: 0,
                    first: 0,
                    last: u16::MAX,
                },
            ]
            .into(),
            egress: BTreeSet::new(),
            selected_by: vec![],
        };
        let (info, keys) = policy_entries(7, 65_800, &policy).unwrap();
        assert_eq!(
            info,
            EndpointInfo {
                identity: 65_800,
                flags: ENDPOINT_INGRESS_ENFORCED
            }
        );
        let ports: Vec<(u32, u16)> = keys.iter().map(|k| (k.identity, k.dport)).collect();
        assert_eq!(
            ports,
            [(1, 0), (70_000, 8000), (70_000, 8001), (70_000, 8002)]
        );
        assert!(keys
            .iter()
            .all(|k| k.endpoint == 7 && k.direction == DIR_INGRESS));

        let wide = EndpointPolicy {
            ingress_enforced: true,
            ingress: [Allow {
                identity: 5,
                protocol: 6,
                first: 1,
                last: 60_000,
            }]
            .into(),
            ..EndpointPolicy::default()
        };
        let e = policy_entries(7, 1, &wide).unwrap_err();
        assert!(e.to_string().contains("16384"), "{e}");
    }
}
