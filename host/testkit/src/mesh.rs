//! A cluster mesh driven by a temporary config directory.

use super::Recorder;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weft_clustermesh::{
    self as clustermesh, ClusterMesh, ClusterStatus, Counts, Resource, SyncCallbacks,
};

/// A mesh whose own cluster is `own` with ID 1, following a temp config dir.
pub struct Lab {
    pub mesh: ClusterMesh,
    pub dir: tempfile::TempDir,
    pub recorder: Arc<Recorder>,
    /// Per resource: how many times its "synced" callback ran, and the count it saw.
    pub callbacks: Arc<[AtomicUsize; 4]>,
    pub seen_counts: Arc<std::sync::Mutex<Vec<(Resource, String, usize)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Lab {
    pub fn start(page_size: u32) -> Lab {
        Self::start_with(page_size, SyncCallbacks::default())
    }

    /// [`Lab::start`] with `cbs` run besides the lab's own counting callbacks.
    pub fn start_with(page_size: u32, mut cbs: SyncCallbacks) -> Lab {
        let recorder = Recorder::new();
        let callbacks: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
        let seen_counts = Arc::new(std::sync::Mutex::new(Vec::new()));
        for r in Resource::ALL {
            let (calls, seen) = (callbacks.clone(), seen_counts.clone());
            cbs = cbs.on(r, move |r, info| {
                calls[r.index()].fetch_add(1, Ordering::SeqCst);
                let c = info.counts;
                let n = [c.nodes, c.ipcache, c.identities, c.services][r.index()];
                seen.lock().unwrap().push((r, info.name.clone(), n));
            });
        }
        let config = clustermesh::Config {
            cluster_name: "local".into(),
            cluster_id: 1,
            kvstore: weft_kvstore::Config {
                page_size,
                keep_alive: (Duration::from_secs(1), Duration::from_secs(2)),
                ..weft_kvstore::Config::default().unlimited()
            },
            cluster_config_timeout: Duration::from_secs(2),
            retry: (Duration::from_millis(50), Duration::from_millis(500)),
            ..clustermesh::Config::default()
        };
        let mesh = ClusterMesh::new(config, recorder.clone(), cbs);
        let dir = tempfile::tempdir().unwrap();
        let m = mesh.clone();
        let path = dir.path().to_owned();
        let task = tokio::spawn(async move { m.run_config_dir(path).await });
        Lab {
            mesh,
            dir,
            recorder,
            callbacks,
            seen_counts,
            task,
        }
    }

    pub fn add(&self, cluster: &str, url: &str) {
        super::write_config_file(self.dir.path(), cluster, url);
    }

    pub fn remove(&self, cluster: &str) {
        std::fs::remove_file(self.dir.path().join(cluster)).unwrap();
    }

    pub fn status_of(&self, cluster: &str) -> Option<ClusterStatus> {
        self.mesh.status().into_iter().find(|c| c.name == cluster)
    }

    /// Waits until `cluster`'s status satisfies `f`.
    pub async fn until(
        &self,
        what: &str,
        cluster: &str,
        f: impl Fn(&ClusterStatus) -> bool,
    ) -> ClusterStatus {
        super::eventually(what, Duration::from_secs(30), || {
            self.status_of(cluster).filter(|s| f(s))
        })
        .await
    }

    /// Waits until `cluster`'s last error mentions `needle`.
    pub async fn until_error(&self, cluster: &str, needle: &str) -> ClusterStatus {
        let what = format!("{cluster}: an error mentioning {needle:?}");
        self.until(&what, cluster, |s| {
            s.last_error.as_deref().is_some_and(|e| e.contains(needle))
        })
        .await
    }

    pub fn calls(&self, r: Resource) -> usize {
        self.callbacks[r.index()].load(Ordering::SeqCst)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Per-resource counts as a tuple (nodes, ipcache, identities, services).
pub fn counts(s: &ClusterStatus) -> (usize, usize, usize, usize) {
    let Counts {
        nodes,
        ipcache,
        identities,
        services,
    } = s.counts;
    (nodes, ipcache, identities, services)
}
