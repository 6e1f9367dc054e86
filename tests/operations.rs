//! Operating weft from the outside: a running agent against real etcd, scraped on
//! `--prometheus-serve-addr` as Prometheus would and probed on `--health-addr` as a
//! kubelet would.

use weft_testkit as support;

use std::net::SocketAddr;
use std::time::Duration;
use support::agent::{cluster_config, Agent};
use support::http::{free_addr, get, get_accepting, sample, PROMETHEUS_ACCEPT};
use support::{eventually, Etcd};

/// Scrapes (once the agent answers) until `series` has a value `ok` accepts, at most
/// 30 s.
async fn scrape_until(addr: SocketAddr, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // As Prometheus asks: OpenMetrics.
        let text = match get_accepting(addr, "/metrics", Some(PROMETHEUS_ACCEPT)).await {
            Some((code, _, text)) => {
                assert_eq!(code, 200, "{text}");
                text
            }
            None => String::new(),
        };
        if sample(&text, series).is_some_and(&ok) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} never as expected:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GETs `path` until the answer is one `ok` accepts, at most 30 s.
async fn get_until(
    addr: SocketAddr,
    path: &str,
    ok: impl Fn(&(u16, String)) -> bool,
) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = get(addr, path).await;
        if let Some(a) = answer.filter(|a| ok(a)) {
            return a;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} on {addr} never as expected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_scrape_shows_each_remote_cluster_its_barriers_entries_waits_and_reconnects() {
    let (e1, mut e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    // cluster2 has a node (its agent's) and one value no agent could have written.
    let _a2 = Agent::start("cluster2", 2, &e2);
    e2.put("cilium/state/ip/v1/default/10.2.0.9", "not json")
        .await;
    let metrics = free_addr();
    let a1 = Agent::start_with(
        "cluster1",
        1,
        &e1,
        &[
            "--prometheus-serve-addr".as_ref(),
            metrics.to_string().as_ref(),
        ],
    );
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());

    let text = scrape_until(
        metrics,
        r#"weft_remote_cluster_ready{cluster="cluster2"}"#,
        |v| v == 1.0,
    )
    .await;
    let text = if sample(
        &text,
        r#"weft_remote_cluster_entries{cluster="cluster2",resource="nodes"}"#,
    ) == Some(1.0)
    {
        text
    } else {
        scrape_until(
            metrics,
            r#"weft_remote_cluster_entries{cluster="cluster2",resource="nodes"}"#,
            |v| v == 1.0,
        )
        .await
    };
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text");
    for (series, value) in [
        (r#"weft_remote_cluster_connected{cluster="cluster2"}"#, 1.0),
        (
            r#"weft_remote_cluster_barrier_synced{cluster="cluster2",resource="nodes"}"#,
            1.0,
        ),
        (
            r#"weft_remote_cluster_barrier_synced{cluster="cluster2",resource="services"}"#,
            1.0,
        ),
        (
            r#"weft_remote_cluster_malformed_values_total{cluster="cluster2"}"#,
            1.0,
        ),
        (
            r#"weft_remote_cluster_reconnects_total{cluster="cluster2"}"#,
            0.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    for family in [
        "# TYPE weft_remote_cluster_malformed_values counter",
        "# TYPE weft_remote_cluster_synced_after_seconds gauge",
        "# UNIT weft_remote_cluster_synced_after_seconds seconds",
        "# TYPE weft_sync_wait_duration_seconds histogram",
    ] {
        assert!(text.contains(family), "{family} in\n{text}");
    }
    let after = sample(
        &text,
        r#"weft_remote_cluster_synced_after_seconds{cluster="cluster2",resource="ipcache"}"#,
    )
    .expect("the time to sync");
    assert!(after > 0.0 && after < 30.0, "{after}");
    // ipcache entries by source: what the agent lists, counted.
    let rows = a1.json(&["ipcache", "list"]).unwrap();
    let clustermesh = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "clustermesh")
        .count();
    assert!(clustermesh > 0);
    assert_eq!(
        sample(&text, r#"weft_ipcache_entries{source="clustermesh"}"#),
        Some(clustermesh as f64),
        "{text}"
    );
    // The host endpoint waited for cluster2 at start, and it synced.
    assert_eq!(
        sample(
            &text,
            r#"weft_sync_wait_duration_seconds_count{waiter="host_endpoint",result="synced"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"weft_sync_wait_duration_seconds_bucket{le="+Inf",waiter="host_endpoint",result="synced"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"weft_remote_cluster_last_failure_timestamp_seconds{cluster="cluster2"}"#
        ),
        None,
        "no failure yet"
    );

    // cluster2's etcd goes away and comes back: one reconnect, and when it failed.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    e2.restart().await;
    let text = scrape_until(
        metrics,
        r#"weft_remote_cluster_reconnects_total{cluster="cluster2"}"#,
        |v| v >= 1.0,
    )
    .await;
    let failed = sample(
        &text,
        r#"weft_remote_cluster_last_failure_timestamp_seconds{cluster="cluster2"}"#,
    )
    .expect("the failure's time");
    assert!(failed >= before.floor(), "{failed} vs {before}");
    let text = scrape_until(
        metrics,
        r#"weft_remote_cluster_connected{cluster="cluster2"}"#,
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        sample(
            &text,
            r#"weft_remote_cluster_entries{cluster="cluster2",resource="nodes"}"#
        ),
        Some(1.0),
        "nothing drained by the restart"
    );
}

#[tokio::test]
async fn health_follows_the_loops_and_readiness_the_local_state_not_remote_clusters() {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    // cluster2 never answers: frozen before the agent starts.
    e2.pause();
    let health = free_addr();
    let a1 = Agent::start_with(
        "cluster1",
        1,
        &e1,
        &["--health-addr".as_ref(), health.to_string().as_ref()],
    );
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());
    let ready = get_until(health, "/readyz", |(code, _)| *code == 200).await;
    assert_eq!(ready.1, "ok\n");
    let status = a1.status_json().unwrap();
    assert_eq!(
        status["clusters"][0]["ready"], false,
        "ready while the remote cluster is not: {status}"
    );
    assert_eq!(get(health, "/healthz").await, Some((200, "ok\n".into())));
    e2.resume();

    // The control: an agent whose local etcd does not answer is alive but not ready,
    // and says why.
    let mut dead = Etcd::start().await;
    dead.kill();
    let health2 = free_addr();
    let _a3 = Agent::start_with(
        "cluster3",
        3,
        &dead,
        &["--health-addr".as_ref(), health2.to_string().as_ref()],
    );
    let not_ready = get_until(health2, "/readyz", |_| true).await;
    assert_eq!(
        not_ready,
        (503, "not ready: local state synced\n".into()),
        "without its local etcd"
    );
    assert_eq!(get(health2, "/healthz").await, Some((200, "ok\n".into())));
}

/// Also: the state directory the agent makes is its owner's alone (0700), whatever
/// the umask.
#[tokio::test]
async fn an_address_in_use_stops_the_agent_naming_the_flag() {
    let e1 = Etcd::start().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = std::process::Command::new(support::bin::weftd())
        .args([
            "run",
            "--kvstore-endpoints",
            &e1.url(),
            "--prometheus-serve-addr",
            &addr,
        ])
        .args(["--health-addr", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&state).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the state directory's mode");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("--prometheus-serve-addr on {addr}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn status_wait_exits_once_every_remote_cluster_is_ready_and_names_what_is_pending() {
    let (e1, e2) = (Etcd::start().await, Etcd::start().await);
    cluster_config("cluster1", 1, &e1, false);
    cluster_config("cluster2", 2, &e2, false);
    let _a2 = Agent::start("cluster2", 2, &e2);
    e2.pause();
    let a1 = Agent::start("cluster1", 1, &e1);
    support::write_config_file(a1.mesh_dir.path(), "cluster2", &e2.url());
    eventually("the agent knows cluster2", Duration::from_secs(30), || {
        a1.status_json()
            .filter(|s| s["clusters"][0]["name"] == "cluster2")
    })
    .await;
    let wait = |timeout: &str| {
        let state = a1.state.path().to_owned();
        let timeout = timeout.to_owned();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(support::bin::weftd())
                .args(["status", "--wait", "--timeout", &timeout, "--state-dir"])
                .arg(state)
                .output()
                .unwrap()
        })
    };
    let out = wait("2s").await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cluster2 is frozen");
    assert!(stderr.contains("not ready after 2s"), "{stderr}");
    assert!(
        stderr.contains("cluster2: nodes, ipcache, identities, services pending"),
        "{stderr}"
    );
    e2.resume();
    let out = wait("30s").await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("cluster2 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains(" yes       yes   synced "), "{row}");
    assert!(stdout.contains("ipcache by source: "), "{stdout}");

    // No agent there: it says so, after the timeout.
    let nowhere = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(support::bin::weftd())
        .args(["status", "--wait", "--timeout", "1s", "--state-dir"])
        .arg(nowhere.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("the agent does not answer"), "{stderr}");
}
