//! A real etcd process per test.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An etcd on free loopback ports with its own data directory; killed on drop.
pub struct Etcd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub client_port: u16,
    peer_port: u16,
    /// Serve clients over TLS with client-certificate authentication.
    pub tls: Option<super::Pki>,
    /// How the last etcd that exited early ended.
    last_exit: Option<std::process::ExitStatus>,
}

/// A free loopback port below the kernel's ephemeral range (32768+), so that no
/// outgoing connection can take it between this check and etcd binding it.
fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(0);
        let port = 20_000 + (h.finish() % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// etcd's directory: on tmpfs (`/dev/shm`) where there is one, so that a build
/// directory filling the disk cannot stop etcd (it preallocates 64 MiB of WAL and,
/// with the disk full, exits without a word); the disk otherwise.
fn data_parent() -> tempfile::TempDir {
    let mut b = tempfile::Builder::new();
    b.prefix("weft-test-etcd");
    b.tempdir_in("/dev/shm")
        .or_else(|_| b.tempdir())
        .expect("a directory for etcd's data")
}

/// The free space where `dir` lives, as df(1) prints it: an etcd that exits without
/// a word has most often found the disk full.
fn free_space(dir: &std::path::Path) -> String {
    Command::new("df")
        .arg("-h")
        .arg(dir)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace('\n', " | ")
        })
        .unwrap_or_else(|e| format!("df failed: {e}"))
}

impl Etcd {
    /// Starts etcd and waits until it answers.
    pub async fn start() -> Etcd {
        Self::start_with(None).await
    }

    /// Starts etcd serving clients over TLS, requiring client certificates of `pki`.
    pub async fn start_tls(pki: super::Pki) -> Etcd {
        Self::start_with(Some(pki)).await
    }

    async fn start_with(tls: Option<super::Pki>) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            dir: data_parent(),
            client_port: free_port(),
            peer_port: free_port(),
            tls,
            last_exit: None,
        };
        // Another process may still take a port first: start over on new ones.
        for _ in 0..5 {
            if etcd.spawn().await {
                return etcd;
            }
            etcd.kill();
            (etcd.client_port, etcd.peer_port) = (free_port(), free_port());
        }
        panic!(
            "etcd did not start in 5 attempts ({}; {}): {}",
            etcd.exit_status(),
            free_space(etcd.dir.path()),
            etcd.log()
        );
    }

    /// How the last etcd process ended, for a failure message.
    fn exit_status(&mut self) -> String {
        self.last_exit
            .map_or_else(|| "still running".to_string(), |s| format!("etcd {s}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts etcd on the current ports; `false` when it exited before answering.
    async fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new("etcd");
        if let Some(pki) = &self.tls {
            cmd.arg("--cert-file").arg(pki.path("server.crt"));
            cmd.arg("--key-file").arg(pki.path("server.key"));
            cmd.arg("--trusted-ca-file").arg(pki.path("ca.crt"));
            cmd.arg("--client-cert-auth");
        }
        let child = cmd
            .arg("--name")
            .arg(format!("weft-test-{}", self.client_port))
            .arg("--data-dir")
            .arg(self.data_dir())
            .args([
                "--listen-client-urls",
                &self.url(),
                "--advertise-client-urls",
                &self.url(),
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("weft-test-{}={peer}", self.client_port))
            .args(["--log-level", "error", "--logger", "zap"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd must be installed (Debian etcd-server); run `make deps`");
        self.child = Some(child);
        self.wait_ready().await
    }

    /// Waits until etcd answers; `false` when it exited first (a port was taken).
    async fn wait_ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let child = self.child.as_mut().expect("etcd spawned");
            if let Some(status) = child.try_wait().unwrap() {
                self.last_exit = Some(status);
                return false;
            }
            if let Ok(mut c) = etcd_client::Client::connect([self.url()], self.options()).await {
                if tokio::time::timeout(Duration::from_secs(1), c.get("x", None))
                    .await
                    .is_ok_and(|r| r.is_ok())
                {
                    return true;
                }
            }
            if tokio::time::Instant::now() > deadline {
                panic!("etcd on {} did not start:\n{}", self.url(), self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The CPU time etcd has used so far (user and system), from `/proc`.
    #[allow(dead_code)] // the benches' measure
    pub fn cpu_time(&self) -> std::time::Duration {
        self.child
            .as_ref()
            .map_or(std::time::Duration::ZERO, |c| super::cpu_time(c.id()))
    }

    /// Kills etcd (SIGKILL); its data stays.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts etcd again on the same ports and data.
    pub async fn restart(&mut self) {
        self.kill();
        self.respawn().await;
    }

    /// Starts etcd on the same ports: they are outside the ephemeral range, so after
    /// a kill only a slow socket release can hold them; try a few times.
    async fn respawn(&mut self) {
        for _ in 0..5 {
            if self.spawn().await {
                return;
            }
            self.kill();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "etcd did not restart on {} ({}; {}): {}",
            self.url(),
            self.exit_status(),
            free_space(self.dir.path()),
            self.log()
        );
    }

    /// Starts etcd again on the same ports with empty data (a lost etcd).
    pub async fn restart_empty(&mut self) {
        self.kill();
        std::fs::remove_dir_all(self.data_dir()).unwrap();
        self.respawn().await;
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("etcd running").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Freezes etcd (SIGSTOP): connections stay open but nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws etcd (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn options(&self) -> Option<etcd_client::ConnectOptions> {
        self.tls.as_ref().map(|pki| pki.client_options())
    }

    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.url()], self.options())
            .await
            .unwrap()
    }

    pub async fn put(&self, key: &str, value: &str) {
        self.client().await.put(key, value, None).await.unwrap();
    }

    /// The value at `key` as JSON (a string when it is not JSON), or `None`.
    pub async fn get_json(&self, key: &str) -> Option<serde_json::Value> {
        let resp = self.client().await.get(key, None).await.unwrap();
        resp.kvs().first().map(|kv| {
            let v = kv.value_str().unwrap();
            serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_owned()))
        })
    }

    pub async fn delete(&self, key: &str) {
        self.client().await.delete(key, None).await.unwrap();
    }

    /// Reads every key under each of `prefixes` with etcd-client alone, 256 a page at
    /// one revision per prefix: the baseline the sync benchmarks measure against. The
    /// keys read.
    pub async fn raw_read(&self, prefixes: &[String]) -> usize {
        let mut c = self.client().await;
        let mut n = 0;
        for prefix in prefixes {
            let end = weft_kvstore::prefix_range_end(prefix);
            let mut key = prefix.as_bytes().to_vec();
            let mut rev = 0;
            loop {
                let mut o = etcd_client::GetOptions::new()
                    .with_range(end.clone())
                    .with_limit(256);
                if rev > 0 {
                    o = o.with_revision(rev);
                }
                let r = c.get(key.clone(), Some(o)).await.unwrap();
                rev = r.header().unwrap().revision();
                n += r.kvs().len();
                match r.kvs().last() {
                    Some(last) if r.more() => {
                        key = last.key().to_vec();
                        key.push(0);
                    }
                    _ => break,
                }
            }
        }
        n
    }

    /// Writes many keys, 100 per transaction.
    pub async fn put_all(&self, kv: &[(String, String)]) {
        let mut c = self.client().await;
        for chunk in kv.chunks(100) {
            let ops: Vec<etcd_client::TxnOp> = chunk
                .iter()
                .map(|(k, v)| etcd_client::TxnOp::put(k.as_str(), v.as_str(), None))
                .collect();
            c.txn(etcd_client::Txn::new().and_then(ops)).await.unwrap();
        }
    }

    /// Writes `(key, value)` pairs given as string slices.
    pub async fn put_pairs(&self, kv: &[(&str, &str)]) {
        let kv: Vec<(String, String)> = kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.put_all(&kv).await;
    }

    /// Compacts at the current revision.
    pub async fn compact(&self) -> i64 {
        let mut c = self.client().await;
        let rev = c.get("x", None).await.unwrap().header().unwrap().revision();
        c.compact(
            rev,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
        rev
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused etcd would not die of SIGKILL before SIGCONT on every kernel;
            // continue it first.
            self.resume();
        }
        self.kill();
    }
}
