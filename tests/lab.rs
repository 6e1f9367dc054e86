//! `weftd lab` as an operator runs it: `up` brings a mesh of clusters to "every
//! cluster synced, every pod switched" and measures the connectivity matrix with real
//! TCP (clients reach every other node's web pod, web pods are denied by the policy);
//! `status` shows it; `down` leaves no trace — also after `up` was killed half-way —
//! and never removes what the lab did not make; `soak` churns it with streams unbroken.
//! Needs root, BPF and /dev/net/tun.

use weft_testkit as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn weftd(args: &[&str], dir: &Path) -> Output {
    // weft-cni is looked for beside weftd.
    support::cni::binary();
    let plugins = support::plugin_wasm("regeneration_policy")
        .parent()
        .unwrap()
        .to_owned();
    let mut cmd = Command::new(support::bin::weftd());
    cmd.args(args).arg("--dir").arg(dir);
    if args.first() == Some(&"lab") && args.get(1) == Some(&"up") {
        cmd.arg("--plugins").arg(plugins);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Held by each test while its lab runs: labs side by side on two cores starve each
/// other's WireGuard handshakes, and a lab's own figures are what a test judges.
static ONE_LAB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_lab_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A lab name unique to this test process.
fn name(test: &str) -> String {
    format!("{test}{}", std::process::id() % 100)
}

/// What of lab `name` (in `dir`) is left on the machine.
fn traces(name: &str, dir: &Path) -> Vec<String> {
    let mut left = Vec::new();
    for e in std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!("{name}-")) {
            left.push(format!("namespace {n}"));
        }
    }
    let bpf = PathBuf::from(format!("/sys/fs/bpf/weft-lab-{name}"));
    if bpf.exists() {
        left.push(bpf.display().to_string());
    }
    for e in std::fs::read_dir("/var/run/wireguard")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!("{name}wg")) && n.ends_with(".sock") {
            left.push(format!("WireGuard socket {n}"));
        }
    }
    let marker = dir.to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(&marker) && !cmdline.contains("lab\0down") {
            left.push(format!("process {}", cmdline.replace('\0', " ")));
        }
    }
    if dir.join(name).exists() {
        left.push(format!("{}", dir.join(name).display()));
    }
    left
}

#[test]
fn a_lab_comes_up_with_its_matrix_and_goes_down_without_a_trace() {
    if !support::wireguard_available("lab") {
        return;
    }
    let _one = one_lab_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let name = name("lu");
    let up = weftd(
        &[
            "lab",
            "up",
            "--name",
            &name,
            "--clusters",
            "2",
            "--nodes",
            "2",
        ],
        dir.path(),
    );
    let out = text(&up);
    let down = || weftd(&["lab", "down", "--name", &name], dir.path());
    if !up.status.success() {
        let _ = down();
        panic!("lab up failed:\n{out}");
    }
    assert!(out.contains("every agent ready"), "{out}");
    assert!(
        out.contains("24 attempts: 12 reached, 12 denied by policy as expected, 0 not as expected"),
        "{out}"
    );
    let status = text(&weftd(&["lab", "status", "--name", &name], dir.path()));
    assert_eq!(status.matches(" running").count(), 6, "{status}");
    assert_eq!(status.matches("clusters synced 2/2").count(), 2, "{status}");
    let gone = down();
    assert!(gone.status.success(), "{}", text(&gone));
    assert_eq!(traces(&name, dir.path()), Vec::<String>::new());
}

#[test]
fn down_removes_what_a_killed_up_made_and_nothing_it_did_not_make() {
    if !support::wireguard_available("lab-crash") {
        return;
    }
    let _one = one_lab_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let name = name("lc");
    // `up` killed once its first agent runs.
    support::cni::binary();
    let plugins = support::plugin_wasm("regeneration_policy")
        .parent()
        .unwrap()
        .to_owned();
    let mut up = Command::new(support::bin::weftd())
        .args(["lab", "up", "--name", &name, "--nodes", "1", "--pods", "1"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--plugins")
        .arg(plugins)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let state = dir.path().join(&name).join("lab.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = std::fs::read_to_string(&state).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_default();
        let agent_runs = v["made"].as_array().is_some_and(|m| {
            m.iter()
                .any(|x| x["what"] == "weftd of c1n1" && x["pid"].as_i64() > Some(0))
        });
        if agent_runs {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "up made no agent within a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    up.kill().unwrap();
    up.wait().unwrap();
    assert!(
        !traces(&name, dir.path()).is_empty(),
        "the killed up left parts"
    );
    let gone = weftd(&["lab", "down", "--name", &name], dir.path());
    assert!(gone.status.success(), "{}", text(&gone));
    assert_eq!(traces(&name, dir.path()), Vec::<String>::new());

    // A namespace the lab would have made, made by someone else first: `up` stops
    // there, and `down` leaves it.
    let exact = format!("{name}-c1n1");
    support::netns::ip(&["netns", "add", &exact]);
    let failed = weftd(
        &["lab", "up", "--name", &name, "--nodes", "1", "--pods", "1"],
        dir.path(),
    );
    assert!(!failed.status.success());
    assert!(
        text(&failed).contains(&format!("namespace {exact}")),
        "{}",
        text(&failed)
    );
    let gone = weftd(&["lab", "down", "--name", &name], dir.path());
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(
        Path::new("/run/netns").join(&exact).exists(),
        "the namespace the lab did not make is still there"
    );
    support::netns::ip(&["netns", "del", &exact]);
    assert_eq!(traces(&name, dir.path()), Vec::<String>::new());
}

#[test]
fn the_scenarios_pass_and_their_controls_show_what_they_prevent() {
    if !support::wireguard_available("lab-restart") {
        return;
    }
    let _one = one_lab_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let name = name("lr");
    let up = weftd(&["lab", "up", "--name", &name, "--nodes", "1"], dir.path());
    let plot = dir.path().join("restart.svg");
    let plot_arg = plot.to_string_lossy().into_owned();
    // Each scenario and its control, in this order, on the same lab.
    let runs: [(&str, &[&str]); 10] = [
        ("restart", &["--plot", &plot_arg]),
        ("restart", &["--control"]),
        ("cluster-removed-mid-sync", &[]),
        ("cluster-removed-mid-sync", &["--control"]),
        ("vendor-callback", &[]),
        ("vendor-callback", &["--control"]),
        ("plugin-reload", &[]),
        ("plugin-reload", &["--control"]),
        ("etcd-restart", &[]),
        ("etcd-restart", &["--control"]),
    ];
    let outputs: Vec<Output> = if up.status.success() {
        runs.iter()
            .map(|(scenario, extra)| {
                let mut args = vec!["lab", "scenario", scenario, "--name", &name];
                args.extend_from_slice(extra);
                weftd(&args, dir.path())
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut outputs = outputs.into_iter();
    let (run, control, removal, kept) = (
        outputs.next(),
        outputs.next(),
        outputs.next(),
        outputs.next(),
    );
    let (callback, held, swapped, tampered) = (
        outputs.next(),
        outputs.next(),
        outputs.next(),
        outputs.next(),
    );
    let (restarted, removed) = (outputs.next(), outputs.next());
    let down = weftd(&["lab", "down", "--name", &name], dir.path());
    assert!(up.status.success(), "{}", text(&up));
    let (run, control) = (run.unwrap(), control.unwrap());
    let (r, c) = (text(&run), text(&control));
    assert!(run.status.success(), "{r}");
    assert!(
        r.contains("restart: PASS, nothing dropped — 1 streams, 0 errors"),
        "{r}"
    );
    assert!(
        r.contains("the restored client was waiting during the pause"),
        "{r}"
    );
    assert!(control.status.success(), "{c}");
    assert!(c.contains("disruption shown"), "{c}");
    assert!(
        c.contains("the restored client was proceeded during the pause"),
        "{c}"
    );
    let (removal, kept) = (removal.unwrap(), kept.unwrap());
    let (r, k) = (text(&removal), text(&kept));
    assert!(removal.status.success(), "{r}");
    assert!(r.contains("PASS, the waits ended at once"), "{r}");
    assert!(r.contains("synced (disconnected: cluster2)"), "{r}");
    assert!(kept.status.success(), "{k}");
    assert!(k.contains("still waiting"), "{k}");
    let (callback, held) = (callback.unwrap(), held.unwrap());
    let (v, h) = (text(&callback), text(&held));
    assert!(callback.status.success(), "{v}");
    assert!(
        v.contains(
            "thawed: identities 1 (barriers 1), nodes 1 (barriers 1); logged by cluster name: yes"
        ),
        "{v}"
    );
    let (swapped, tampered) = (swapped.unwrap(), tampered.unwrap());
    let (w, t) = (text(&swapped), text(&tampered));
    assert!(swapped.status.success(), "{w}");
    assert!(w.contains("PASS, swapped under waiting endpoints"), "{w}");
    assert!(w.contains("0 failures, nothing refused"), "{w}");
    assert!(tampered.status.success(), "{t}");
    assert!(
        t.contains("refused: plugin \"regeneration-policy\" refused: wrong digest"),
        "{t}"
    );
    assert!(t.contains("every endpoint synced and switched: yes"), "{t}");
    assert!(held.status.success(), "{h}");
    assert!(
        h.contains("frozen: identities 0 (barriers 0), nodes 0 (barriers 0)"),
        "{h}"
    );
    let (restarted, removed) = (restarted.unwrap(), removed.unwrap());
    let (e, x) = (text(&restarted), text(&removed));
    assert!(restarted.status.success(), "{e}");
    assert!(
        e.contains("etcd-restart: PASS, nothing drained, converged"),
        "{e}"
    );
    assert!(e.contains("drained 0 of"), "{e}");
    assert!(e.contains("written keys equal on every agent"), "{e}");
    assert!(removed.status.success(), "{x}");
    assert!(
        x.contains("drained and cut, as expected of a removal"),
        "{x}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    for moment in [
        "cluster2&apos;s etcd frozen",
        "agent restarted",
        "cluster2&apos;s etcd thawed",
        "cluster2&apos;s barriers released",
        "client endpoint switched",
    ] {
        assert!(svg.contains(moment), "the plot marks {moment:?}");
    }
    assert!(down.status.success(), "{}", text(&down));
    assert_eq!(traces(&name, dir.path()), Vec::<String>::new());
}

#[test]
fn a_short_soak_takes_every_churn_step_with_streams_unbroken_and_leaves_no_trace() {
    if !support::wireguard_available("lab-soak") {
        return;
    }
    let _one = one_lab_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let name = name("ls");
    let up = weftd(
        &[
            "lab",
            "up",
            "--name",
            &name,
            "--clusters",
            "3",
            "--nodes",
            "1",
        ],
        dir.path(),
    );
    let (plot, csv) = (dir.path().join("soak.svg"), dir.path().join("soak.csv"));
    let soak = up.status.success().then(|| {
        weftd(
            &[
                "lab",
                "soak",
                "--name",
                &name,
                "--duration",
                "35s",
                "--every",
                "2s",
                "--sample-every",
                "1s",
                "--plot",
                &plot.to_string_lossy(),
                "--csv",
                &csv.to_string_lossy(),
            ],
            dir.path(),
        )
    });
    let down = weftd(&["lab", "down", "--name", &name], dir.path());
    assert!(up.status.success(), "{}", text(&up));
    let soak = soak.unwrap();
    let s = text(&soak);
    assert!(soak.status.success(), "{s}");
    assert!(s.contains("soak: PASS"), "{s}");
    assert!(s.contains("streams: 0 errors"), "{s}");
    assert!(s.contains("flatness not judged (under 10 min)"), "{s}");
    assert!(s.contains("lab whole again"), "{s}");
    // Every step of the cycle, and what undoes it, ran at least once.
    for step in [
        "pod c1n1p3 added",
        "pod c1n1p3 deleted",
        "cluster2's etcd frozen",
        "cluster3 removed from every other cluster's mesh",
        "cluster3 put back into every other cluster's mesh",
        "the agent of c3n1 stopped",
        "the agent of c3n1 started",
        "regeneration-policy 0.3.",
    ] {
        assert!(s.contains(step), "{step:?} in\n{s}");
    }
    // Every agent sampled, with its runtime's tasks; c3n1 under two pids (restarted).
    let samples = std::fs::read_to_string(&csv).unwrap();
    for node in ["c1n1", "c2n1", "c3n1"] {
        let rows: Vec<&str> = samples
            .lines()
            .filter(|l| l.split(',').nth(1) == Some(node))
            .collect();
        assert!(rows.len() >= 10, "{node}: {rows:?}");
        assert!(
            rows.iter()
                .all(|r| r.split(',').nth(3).unwrap().parse::<u64>().unwrap() > 0),
            "{rows:?}"
        );
        assert!(rows.iter().any(|r| !r.ends_with(',')), "tasks of {node}");
    }
    let pids: std::collections::BTreeSet<&str> = samples
        .lines()
        .filter(|l| l.split(',').nth(1) == Some("c3n1"))
        .filter_map(|l| l.split(',').nth(2))
        .collect();
    assert!(pids.len() >= 2, "c3n1 restarted: {pids:?}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.contains("resident memory (MiB)"),
        "the plot's memory panel"
    );
    assert!(down.status.success(), "{}", text(&down));
    assert_eq!(traces(&name, dir.path()), Vec::<String>::new());
}
