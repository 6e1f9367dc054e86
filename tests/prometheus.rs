//! The metrics as Prometheus and its tools read them: a live agent with two remote
//! clusters, one frozen so that the host endpoint's wait times out; `promtool check
//! metrics` (Debian's prometheus package) on its text exposition; content negotiation;
//! and a real Prometheus server scraping it every second, asked with PromQL whether
//! the first timeout shows in `increase()`. The control is a series that first appears
//! at 1 (as the agent's did before it initialised its series at 0), scraped by the
//! same Prometheus: no `increase()` at all.

use weft_testkit as support;

use serde_json::Value;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::agent::{cluster_config, Agent};
use support::http::{free_addr, get, get_accepting, sample, PROMETHEUS_ACCEPT};
use support::Etcd;

/// How long the host endpoint waits for remote state at start: the first timeout.
const SYNC_TIMEOUT: &str = "8s";

fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output().is_ok();
    if !found {
        eprintln!("SKIPPED: promtool is missing (Debian's prometheus package: make deps)");
    }
    found.then_some("promtool")
}

/// A Prometheus server scraping `targets` (job name, address) every second, on a
/// loopback port, with its data in a directory of its own; killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[(&str, SocketAddr)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let mut config =
            String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
        for (job, addr) in targets {
            config +=
                &format!("  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n");
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr = free_addr();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    /// An instant query's result vector (`[]` for no series).
    async fn query(&self, promql: &str) -> Option<Vec<Value>> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", promql)
            .finish();
        let (code, body) = get(self.addr, &format!("/api/v1/query?{q}")).await?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && v["status"] == "success")
            .then(|| v["data"]["result"].as_array().cloned())?
    }

    /// The value of a query with one series, once there is one.
    async fn value(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql).await?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Whether the target of `job` has been scraped and is up.
    async fn scraped(&self, job: &str) -> bool {
        self.value(&format!("up{{job=\"{job}\"}}")).await == Some(1.0)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- prometheus log ---\n{}",
                std::fs::read_to_string(self._dir.path().join("prometheus.log"))
                    .unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The control's target: an exposition whose counter appears only once it is 1, as
/// the agent's timeouts did before they were initialised at 0.
async fn late_counter(value: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let v = value.load(Ordering::SeqCst);
            async move {
                let mut text = String::from(
                    "# HELP late_total A counter that appears late.\n# TYPE late_total counter\n",
                );
                if v > 0 {
                    text += &format!("late_total {v}\n");
                }
                text
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[tokio::test]
async fn promtool_accepts_the_metrics_and_the_first_timeout_shows_in_increase() {
    let Some(promtool) = promtool() else {
        return;
    };
    let (e1, e2, e3) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    cluster_config("cluster3", 3, &e3, false);
    // cluster3 is frozen from the start: the host endpoint's wait times out.
    e3.pause();
    let metrics = free_addr();
    let late = Arc::new(AtomicU64::new(0));
    let late_addr = late_counter(late.clone()).await;
    let prometheus = Prometheus::start(&[("weft", metrics), ("late", late_addr)]);

    // The agent starts once Prometheus scrapes, so that a scrape comes before the
    // timeout; its mesh directory names both clusters before it starts.
    until("Prometheus answers", Duration::from_secs(60), || async {
        prometheus.query("up").await
    })
    .await;
    let agent = Agent::start_meshed(
        "cluster1",
        1,
        &e1,
        &[("cluster2", e2.url()), ("cluster3", e3.url())],
        &[
            "--prometheus-serve-addr".as_ref(),
            metrics.to_string().as_ref(),
            "--clustermesh-ip-identities-sync-timeout".as_ref(),
            SYNC_TIMEOUT.as_ref(),
        ],
    );

    let timeouts =
        r#"weft_remote_cluster_sync_timeouts_total{cluster="cluster3",waiter="host_endpoint"}"#;
    // Before the timeout: every cluster's series is there, at 0.
    let first = scrape_until(
        metrics,
        r#"weft_remote_cluster_ready{cluster="cluster2"}"#,
        |v| v == 1.0,
        Duration::from_secs(30),
    )
    .await;
    for (series, value) in [
        (timeouts, 0.0),
        (
            r#"weft_remote_cluster_sync_timeouts_total{cluster="cluster2",waiter="host_endpoint"}"#,
            0.0,
        ),
        (
            r#"weft_remote_cluster_refused_claims_total{cluster="cluster3"}"#,
            0.0,
        ),
        (
            r#"weft_sync_wait_duration_seconds_count{waiter="endpoint",result="timed_out"}"#,
            0.0,
        ),
        (
            r#"weft_remote_cluster_barrier_synced{cluster="cluster3",resource="identities"}"#,
            0.0,
        ),
    ] {
        assert_eq!(sample(&first, series), Some(value), "{series} in\n{first}");
    }
    // Prometheus has a sample of the timeouts at 0 before the timeout.
    let at_zero = format!("{timeouts} == 0");
    until(
        "Prometheus has the timeouts at 0 before the timeout",
        Duration::from_secs(30),
        || prometheus.value(&at_zero),
    )
    .await;

    // The timeout, and the first scrape after it.
    let text = scrape_until(metrics, timeouts, |v| v == 1.0, Duration::from_secs(60)).await;
    assert_eq!(
        sample(
            &text,
            r#"weft_remote_cluster_sync_timeouts_total{cluster="cluster2",waiter="host_endpoint"}"#
        ),
        Some(0.0),
        "cluster2 synced: its wait did not time out on it\n{text}"
    );
    let increase = format!("increase({timeouts}[1m])");
    // From the first scrape after it: the series had a sample at 0 before.
    until(
        "increase() of the timeouts in Prometheus",
        Duration::from_secs(30),
        || async { prometheus.value(&increase).await.filter(|v| *v > 0.0) },
    )
    .await;
    let waits = r#"increase(weft_sync_wait_duration_seconds_count{waiter="host_endpoint",result="timed_out"}[1m])"#;
    until(waits, Duration::from_secs(30), || async {
        prometheus.value(waits).await.filter(|v| *v > 0.0)
    })
    .await;

    // The control: a counter that first appears at 1 has no increase().
    until(
        "the late target is scraped",
        Duration::from_secs(30),
        || async { prometheus.scraped("late").await.then_some(()) },
    )
    .await;
    late.store(1, Ordering::SeqCst);
    // Three scrapes of it at 1, as many as the agent's timeouts had above.
    until(
        "Prometheus has late_total three times",
        Duration::from_secs(30),
        || async {
            prometheus
                .value("count_over_time(late_total[1m])")
                .await
                .filter(|n| *n >= 3.0)
        },
    )
    .await;
    let control = prometheus.query("increase(late_total[1m])").await.unwrap();
    let control = control
        .first()
        .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert_eq!(control, 0.0, "a series that appears at 1 shows no increase");

    // promtool on the text format; both formats on request.
    let (code, content_type, plain) =
        get_accepting(metrics, "/metrics", Some("text/plain; version=0.0.4"))
            .await
            .unwrap();
    assert_eq!(code, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(
        !plain.contains("# EOF") && !plain.contains("# UNIT"),
        "{plain}"
    );
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(plain.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{plain}"
    );
    // Every family has its HELP and TYPE, named as its samples are.
    for line in plain.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| plain.contains(&format!("# TYPE {f} histogram")))
            })
            .unwrap_or(name);
        assert!(
            plain.contains(&format!("# TYPE {family} ")),
            "no TYPE for {name}"
        );
        assert!(
            plain
                .lines()
                .any(|l| l.starts_with(&format!("# HELP {family} ")) && l.len() > family.len() + 8),
            "no HELP for {name}"
        );
    }
    let (_, content_type, open) = get_accepting(metrics, "/metrics", Some(PROMETHEUS_ACCEPT))
        .await
        .unwrap();
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(open.ends_with("# EOF\n"), "{open}");
    drop(agent);
}

/// Polls `check` every 100 ms until it gives `Some`, at most `limit`; panics naming
/// `what`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A scrape of the agent's `/metrics` once `series` has a value `ok` accepts.
async fn scrape_until(
    metrics: SocketAddr,
    series: &str,
    ok: impl Fn(f64) -> bool,
    limit: Duration,
) -> String {
    until(&format!("{series} as wanted"), limit, || async {
        let (code, text) = get(metrics, "/metrics").await?;
        (code == 200 && sample(&text, series).is_some_and(&ok)).then_some(text)
    })
    .await
}
