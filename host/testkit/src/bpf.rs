//! A datapath under a bpffs directory of its own, with the ipcache writing into it, for
//! the tests that run its programs on synthetic packets.

use std::path::PathBuf;
use std::sync::Arc;
use weft_datapath::{Datapath, MapWriter};
use weft_state::ipcache::{Fact, IpCache, Owner, Prefix, Source};

/// The datapath, its ipcache and the writer between them; removed on drop.
pub struct Bpf {
    pub root: PathBuf,
    pub dp: Datapath,
    pub ipcache: IpCache,
    pub writer: Arc<MapWriter>,
}

impl Bpf {
    /// `None` (said loudly) without root or a bpffs.
    pub fn start(name: &str) -> Option<Bpf> {
        if !super::bpf_available(name) {
            return None;
        }
        let root = PathBuf::from(format!(
            "/sys/fs/bpf/weft-test-{}-{name}",
            std::process::id()
        ));
        Datapath::remove_all(&root);
        let dp = match Datapath::open(&root) {
            Ok(dp) => dp,
            Err(e) => panic!("the datapath does not load on this kernel: {e}"),
        };
        let ipcache = IpCache::default();
        let writer = MapWriter::start(dp.ipcache_map());
        ipcache.add_listener(writer.clone());
        Some(Bpf {
            root,
            dp,
            ipcache,
            writer,
        })
    }

    /// States `prefix` with `identity` and encryption key `key` (tunnelled to
    /// 192.0.2.9), and waits until the map has it.
    pub fn put(&self, prefix: &str, identity: u32, key: u8) {
        let fact = Fact {
            identity: Some(identity),
            tunnel_peer: Some("192.0.2.9".parse().unwrap()),
            encrypt_key: key,
            ..Fact::default()
        };
        let prefix: Prefix = prefix.parse().unwrap();
        self.ipcache.upsert(
            prefix,
            Owner::new(Source::ClusterMesh, prefix.to_string()),
            fact,
        );
        self.writer.flush();
    }
}

impl Drop for Bpf {
    fn drop(&mut self) {
        Datapath::remove_all(&self.root);
    }
}
