//! Which remote cluster holds which cluster ID.

use std::collections::BTreeMap;

/// Why a cluster ID was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Outside 1..=max.
    #[error("cluster ID {id} is outside 1..={max}")]
    OutOfRange {
        /// The ID announced.
        id: u32,
        /// The largest valid ID.
        max: u32,
    },
    /// The local cluster's own ID.
    #[error("cluster ID {id} is this cluster's own ID")]
    Own {
        /// The ID announced.
        id: u32,
    },
    /// Another remote cluster holds it.
    #[error("cluster ID {id} is already used by cluster {holder:?}")]
    Taken {
        /// The ID announced.
        id: u32,
        /// The cluster that holds it.
        holder: String,
    },
    /// The cluster announced another ID than the one it was accepted with.
    #[error(
        "cluster ID changed from {accepted} to {id}; remove and re-add the cluster to accept it"
    )]
    Changed {
        /// The ID announced now.
        id: u32,
        /// The ID it was accepted with.
        accepted: u32,
    },
}

/// The IDs held by remote clusters.
#[derive(Debug, Default)]
pub(crate) struct ClusterIds {
    own: u32,
    max: u32,
    holders: BTreeMap<u32, String>,
}

impl ClusterIds {
    pub fn new(own: u32, max: u32) -> Self {
        Self {
            own,
            max,
            holders: BTreeMap::new(),
        }
    }

    /// Reserves `id` for `cluster` (idempotent for the same pair).
    pub fn claim(&mut self, cluster: &str, id: u32) -> Result<(), IdError> {
        if id == 0 || id > self.max {
            return Err(IdError::OutOfRange { id, max: self.max });
        }
        if id == self.own {
            return Err(IdError::Own { id });
        }
        match self.holders.get(&id) {
            Some(holder) if holder != cluster => Err(IdError::Taken {
                id,
                holder: holder.clone(),
            }),
            _ => {
                self.holders.insert(id, cluster.to_owned());
                Ok(())
            }
        }
    }

    /// Frees whatever `cluster` holds.
    pub fn release(&mut self, cluster: &str) {
        self.holders.retain(|_, holder| holder != cluster);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims() {
        let mut ids = ClusterIds::new(1, 255);
        assert_eq!(
            ids.claim("a", 0),
            Err(IdError::OutOfRange { id: 0, max: 255 })
        );
        assert_eq!(
            ids.claim("a", 256),
            Err(IdError::OutOfRange { id: 256, max: 255 })
        );
        assert_eq!(ids.claim("a", 1), Err(IdError::Own { id: 1 }));
        ids.claim("a", 2).unwrap();
        ids.claim("a", 2).unwrap();
        assert!(matches!(ids.claim("b", 2), Err(IdError::Taken { .. })));
        ids.release("a");
        ids.claim("b", 2).unwrap();
    }
}
