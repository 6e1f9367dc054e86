//! Wake-ups for a watched directory: an inotify event (other than the accesses of our
//! own reads) or a periodic rescan, whichever comes first.

use notify::Watcher as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// Tells a directory's reader when to read it again.
///
/// ```no_run
/// # async fn f() {
/// let mut wake = weft_sys::dirwatch::DirWake::new("/etc/weft/plugins".into(), std::time::Duration::from_secs(2));
/// loop {
///     wake.arm(); // before reading, so a change during the read is not missed
///     // ... read the directory ...
///     wake.changed().await;
/// }
/// # }
/// ```
pub struct DirWake {
    dir: PathBuf,
    rescan: Duration,
    watcher: Option<notify::RecommendedWatcher>,
    tx: mpsc::UnboundedSender<()>,
    rx: mpsc::UnboundedReceiver<()>,
    /// The reader's loop turns at least every rescan: `/healthz` watches it.
    beat: crate::health::Beat,
}

impl DirWake {
    /// Watches `dir` (which may not exist yet), rescanning every `rescan` regardless:
    /// a directory created later, or replaced by a mount, is only seen by a scan.
    pub fn new(dir: PathBuf, rescan: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let beat =
            crate::health::Beat::register(format!("the reader of {}", dir.display()), rescan);
        Self {
            dir,
            rescan,
            watcher: None,
            tx,
            rx,
            beat,
        }
    }

    /// Starts the inotify watch if it is not running (the directory may have appeared).
    pub fn arm(&mut self) {
        self.beat.beat();
        if self.watcher.is_none() {
            self.watcher = start_notify(&self.dir, self.tx.clone());
        }
    }

    /// Waits for a change notification or the rescan period, then drains the
    /// notifications that came in a burst.
    pub async fn changed(&mut self) {
        tokio::select! {
            _ = self.rx.recv() => {}
            _ = tokio::time::sleep(self.rescan) => {}
        }
        while self.rx.try_recv().is_ok() {}
        self.beat.beat();
    }
}

fn start_notify(dir: &Path, wake: mpsc::UnboundedSender<()>) -> Option<notify::RecommendedWatcher> {
    let mut w = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files during a rescan produces open/access events: waking on
        // those would rescan forever.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = wake.send(());
        }
    })
    .ok()?;
    w.watch(dir, notify::RecursiveMode::NonRecursive).ok()?;
    Some(w)
}
