//! Lab benchmark: `weftd lab up` (release) to "every cluster synced, every pod switched,
//! the matrix measured", for 2 × 2 × 2 and 3 × 3 × 2, against a lab of one node (1 × 1
//! × 1: one etcd, one agent, one pod, no remote cluster) in the same run; then, on a
//! 2 × 2 × 2 lab, the `restart` scenario's longest stream gap against the same streams
//! with nothing happening for as long. Median of 3 rounds each; every lab is removed
//! with `lab down`. `cargo bench -p weft --bench lab` (root, BPF, /dev/net/tun).

use weft_testkit as support;

use std::process::Command;
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;

/// One `lab up` of `size` (clusters, nodes, pods): the time until it returned, and until
/// it said every agent was ready.
fn up(
    size: (u8, u8, u8),
    dir: &std::path::Path,
    plugins: &std::path::Path,
) -> (Duration, Duration) {
    let weftd = env!("CARGO_BIN_EXE_weftd");
    let name = format!("b{}", std::process::id() % 1000);
    let start = Instant::now();
    let out = Command::new(weftd)
        .args(["lab", "up", "--name", &name])
        .args(["--clusters", &size.0.to_string()])
        .args(["--nodes", &size.1.to_string()])
        .args(["--pods", &size.2.to_string()])
        .arg("--dir")
        .arg(dir)
        .arg("--plugins")
        .arg(plugins)
        .output()
        .unwrap();
    let took = start.elapsed();
    let _ = Command::new(weftd)
        .args(["lab", "down", "--name", &name])
        .arg("--dir")
        .arg(dir)
        .output();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lab up {size:?}:\n{text}");
    // "[  3.2s] every agent ready: ..."
    let ready = text
        .lines()
        .find(|l| l.contains("every agent ready"))
        .and_then(|l| l.trim_start_matches('[').split('s').next())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .expect("lab up says when every agent is ready");
    (took, ready)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn s(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn main() {
    if std::env::args().any(|a| a == "--list") || !support::wireguard_available("lab-bench") {
        return;
    }
    support::cni::binary();
    let plugins = support::plugin_wasm("regeneration_policy")
        .parent()
        .unwrap()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let sizes = [(1, 1, 1), (2, 2, 2), (3, 3, 2)];
    let mut results = Vec::new();
    for size in sizes {
        let (mut total, mut ready) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (t, r) = up(size, dir.path(), &plugins);
            total.push(t);
            ready.push(r);
        }
        results.push((size, median(total), median(ready)));
    }
    // The restart's gap against no restart, on one lab.
    let name = format!("g{}", std::process::id() % 1000);
    let weftd = env!("CARGO_BIN_EXE_weftd");
    let up = Command::new(weftd)
        .args(["lab", "up", "--name", &name, "--dir"])
        .arg(dir.path())
        .arg("--plugins")
        .arg(&plugins)
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stdout)
    );
    let lab = dir.path().join(&name);
    // Down even when a round fails: the state file lives in the temporary directory.
    struct Down<'a>(&'a str, &'a std::path::Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = Command::new(env!("CARGO_BIN_EXE_weftd"))
                .args(["lab", "down", "--name", self.0, "--dir"])
                .arg(self.1)
                .output();
        }
    }
    let down = Down(&name, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut restarts, mut idles) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let v = rt
            .block_on(weft::lab::scenario::restart(
                &lab,
                false,
                None,
                &mut std::io::sink(),
            ))
            .unwrap();
        assert!(v.passed, "{}", v.line);
        restarts.push(v.gap.unwrap());
        let idle = weft::lab::scenario::ETCD_PAUSE + Duration::from_secs(1);
        idles.push(
            rt.block_on(weft::lab::scenario::idle_gap(&lab, idle))
                .unwrap(),
        );
    }
    drop(down);

    let (_, base_total, base_ready) = results[0];
    println!("weftd lab up, median of {ROUNDS} rounds each");
    println!("| lab (clusters × nodes × pods) | every agent ready | with the matrix | baseline: 1 × 1 × 1 (same run) | ratio (with the matrix) |");
    println!("|---|---|---|---|---|");
    for ((c, n, p), total, ready) in &results[1..] {
        println!(
            "| {c} × {n} × {p} | {} | {} | ready {}, with the matrix {} | {:.2}× |",
            s(*ready),
            s(*total),
            s(base_ready),
            s(base_total),
            total.as_secs_f64() / base_total.as_secs_f64()
        );
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let (restart, idle) = (median(restarts), median(idles));
    println!();
    println!("| measure | longest stream gap | baseline (same run) | added by the restart |");
    println!("|---|---|---|---|");
    println!(
        "| restart scenario (2 × 2 × 2, 2 streams) | {} | the same streams, no restart: {} | {} |",
        ms(restart),
        ms(idle),
        ms(restart.saturating_sub(idle))
    );
}
