//! A generation's ipcache read back from its pins, with or without an agent running:
//! what `weftd ipcache map` shows, and how the fault tests hold the maps to the
//! ipcache.

use super::layout::{prefix_of, IpcacheKey, IpcacheKeyData, RemoteEndpointInfo};
use super::{generations, Error, IPCACHE_HOSTS_MAP, IPCACHE_MAP};
use aya::maps::{HashMap, LpmTrie, Map, MapData};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::Path;
use weft_state::ipcache::Prefix;

/// A generation's ipcache maps, both of them, as one list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapDump {
    /// The generation read.
    pub generation: u64,
    /// Its entries, sorted by prefix (the hosts map's and the trie's together).
    pub entries: Vec<MapEntry>,
}

/// One entry of a generation's ipcache maps, in the ipcache's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapEntry {
    /// The prefix, `addr/len`.
    pub prefix: String,
    /// The security identity.
    pub identity: u32,
    /// The node to tunnel to.
    pub tunnel_endpoint: Option<IpAddr>,
    /// The encryption key index (0 = none).
    pub encrypt_key: u8,
}

/// Reads generation `generation` (the newest pinned under `root` when `None`).
///
/// ```no_run
/// let dump = weft_datapath::read_ipcache("/sys/fs/bpf/weft".as_ref(), None).unwrap();
/// for e in &dump.entries {
///     println!("{} {}", e.prefix, e.identity);
/// }
/// ```
///
/// # Errors
/// [`Error::NoGeneration`] when no such generation is pinned, [`Error::Map`] when a
/// map cannot be opened or read, [`Error::ForeignKey`] when it holds a key weft does
/// not write.
pub fn read_ipcache(root: &Path, generation: Option<u64>) -> Result<MapDump, Error> {
    let pinned = generations(root);
    let (generation, dir) = match generation {
        Some(g) => pinned.get_key_value(&g),
        None => pinned.last_key_value(),
    }
    .ok_or_else(|| Error::NoGeneration {
        root: root.into(),
        generation,
    })?;
    let map = |name: &str| format!("{}/{name}", dir.display());
    let map_err = |name: &str| {
        let map = map(name);
        move |source| Error::Map { map, source }
    };
    let open = |name: &str| {
        MapData::from_pin(dir.join(name))
            .and_then(Map::from_map_data)
            .map_err(map_err(name))
    };
    let mut entries = Vec::new();
    let hosts: HashMap<_, IpcacheKey, RemoteEndpointInfo> =
        HashMap::try_from(open(IPCACHE_HOSTS_MAP)?).map_err(map_err(IPCACHE_HOSTS_MAP))?;
    for item in hosts.iter() {
        let kv = item.map_err(map_err(IPCACHE_HOSTS_MAP))?;
        entries.push(entry(kv, || map(IPCACHE_HOSTS_MAP))?);
    }
    let prefixes: LpmTrie<_, IpcacheKeyData, RemoteEndpointInfo> =
        LpmTrie::try_from(open(IPCACHE_MAP)?).map_err(map_err(IPCACHE_MAP))?;
    for item in prefixes.iter() {
        let kv = item.map_err(map_err(IPCACHE_MAP))?;
        entries.push(entry(kv, || map(IPCACHE_MAP))?);
    }
    entries.sort_by_key(|(prefix, _)| *prefix);
    Ok(MapDump {
        generation: *generation,
        entries: entries.into_iter().map(|(_, e)| e).collect(),
    })
}

/// One map row in the ipcache's terms, with its prefix to sort by; a key weft never
/// writes is an error naming `map`.
fn entry(
    (key, info): (IpcacheKey, RemoteEndpointInfo),
    map: impl FnOnce() -> String,
) -> Result<(Prefix, MapEntry), Error> {
    let prefix = prefix_of(&key).ok_or_else(|| Error::ForeignKey {
        map: map(),
        family: key.data().family,
        prefix_len: key.prefix_len(),
    })?;
    let row = MapEntry {
        prefix: prefix.to_string(),
        identity: info.sec_identity,
        tunnel_endpoint: info.tunnel_endpoint(),
        encrypt_key: info.key,
    };
    Ok((prefix, row))
}

/// The human view of `weftd ipcache map`.
impl std::fmt::Display for MapDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dump = self;
        writeln!(
            f,
            "generation {}: {} entries\n{:<43} {:>10} {:<39} {:>3}",
            dump.generation,
            dump.entries.len(),
            "PREFIX",
            "IDENTITY",
            "TUNNEL ENDPOINT",
            "KEY"
        )?;
        for e in &dump.entries {
            let tunnel = e
                .tunnel_endpoint
                .map_or("-".to_owned(), |ip| ip.to_string());
            writeln!(
                f,
                "{:<43} {:>10} {:<39} {:>3}",
                e.prefix, e.identity, tunnel, e.encrypt_key
            )?;
        }
        Ok(())
    }
}
