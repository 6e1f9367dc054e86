//! The workspace's crate graph is the architecture: each crate may depend only on the
//! crates its row allows (ARCHITECTURE.md, "Crates"), so that a lower crate never
//! names a higher one and an edit rebuilds only what depends on it. Read from the
//! manifests with `cargo metadata`. And every etcd key is spelled in one place, the
//! layout of `weft-model`.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Per crate, where its row limits them: the crates outside the workspace it may
/// depend on (normal and build dependencies; its tests may use more).
const ALLOWED: &[(&str, &[&str])] = &[
    // The wire values: serde and nothing of weft (regex: the label filter's patterns).
    (
        "weft-model",
        &["base64", "regex", "serde", "serde_json", "thiserror"],
    ),
    // etcd and nothing of weft's model.
    (
        "weft-kvstore",
        &[
            "etcd-client",
            "futures",
            "rustls",
            "thiserror",
            "tokio",
            "tonic",
            "tracing",
        ],
    ),
    // The node's plumbing: no etcd, no wire values.
    (
        "weft-sys",
        &[
            "ahash",
            "futures",
            "nix",
            "notify",
            "rtnetlink",
            "thiserror",
            "tokio",
            "tracing",
        ],
    ),
    // The hook moments as plain Rust: serde only.
    ("weft-hooks", &["serde"]),
    // The state stage: no etcd, no netlink, no BPF, no wasm.
    (
        "weft-state",
        &[
            "base64",
            "serde",
            "serde_json",
            "serde_yaml",
            "thiserror",
            "tokio",
            "tracing",
        ],
    ),
    // The cluster mesh: etcd through weft-kvstore only; no BPF, no wasm, no netlink.
    (
        "weft-clustermesh",
        &[
            "futures",
            "humantime",
            "serde",
            "serde_json",
            "serde_yaml",
            "thiserror",
            "tokio",
            "tokio-stream",
            "tracing",
        ],
    ),
    // The plugin host: wasmtime and the crypto of signatures; no etcd, no netlink, no
    // BPF, no Kubernetes.
    (
        "weft-plugins",
        &[
            "ed25519-dalek",
            "futures",
            "hex",
            "hmac",
            "nix",
            "semver",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "tokio",
            "toml",
            "tracing",
            "wasmtime",
            "wasmtime-wasi",
            "wasmtime-wasi-io",
        ],
    ),
    // The BPF datapath: aya and the kernel's interfaces; no etcd, no wasm, no
    // Kubernetes.
    (
        "weft-datapath",
        &["aya", "nix", "serde", "thiserror", "tracing"],
    ),
    // WireGuard: the device (kernel or the weft-wg helper), its peers and routes;
    // no etcd, no wasm, no BPF, no Kubernetes.
    (
        "weft-wireguard",
        &[
            "futures",
            "ipnet",
            "nix",
            "rtnetlink",
            "serde",
            "thiserror",
            "tokio",
            "tracing",
            "wireguard-control",
        ],
    ),
    // The endpoints: rtnetlink for their links, the mesh's crates for their waits and
    // identities, the datapath for their switch; no etcd client of its own, no wasm,
    // no Kubernetes.
    (
        "weft-endpoint",
        &[
            "futures",
            "hex",
            "humantime",
            "ipnet",
            "rtnetlink",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "tokio",
            "tracing",
        ],
    ),
    // The Kubernetes sources: kube-rs, and the state stage they write to.
    (
        "weft-k8s",
        &[
            "futures",
            "k8s-openapi",
            "kube",
            "serde",
            "serde_json",
            "thiserror",
            "tokio",
            "tracing",
        ],
    ),
    // The userspace device helper: boringtun, and the run directory it shares with
    // weft-wireguard.
    ("weft-wg", &["boringtun", "nix"]),
    // The test support: the test tools (etcd's client, an HTTP client, the WAT
    // compiler), never the agent's library.
    (
        "weft-testkit",
        &[
            "etcd-client",
            "http-body-util",
            "humantime",
            "hyper",
            "hyper-util",
            "libc",
            "nix",
            "serde",
            "serde_json",
            "serde_yaml",
            "tempfile",
            "tokio",
            "wat",
            "wit-component",
            "wit-parser",
        ],
    ),
    // The end-to-end tests: their library is empty.
    // The stand-in API server: nothing of weft, so that it serves the API's JSON and
    // not weft's idea of it.
    (
        "weft-kubeapi",
        &[
            "axum",
            "bytes",
            "futures",
            "humantime",
            "serde",
            "serde_json",
            "thiserror",
            "tokio",
            "tokio-stream",
            "tracing",
        ],
    ),
    ("weft-e2e", &[]),
];

/// The workspace crates each crate may depend on.
const WORKSPACE_EDGES: &[(&str, &[&str])] = &[
    ("weft-model", &[]),
    ("weft-kvstore", &[]),
    ("weft-sys", &[]),
    ("weft-hooks", &["weft-model"]),
    ("weft-state", &["weft-model", "weft-sys"]),
    (
        "weft-clustermesh",
        &["weft-model", "weft-kvstore", "weft-sys", "weft-hooks"],
    ),
    ("weft-plugins", &["weft-hooks", "weft-sys"]),
    ("weft-datapath", &["weft-state", "weft-sys"]),
    ("weft-wireguard", &["weft-model", "weft-state", "weft-sys"]),
    ("weft-wg", &["weft-wireguard"]),
    ("weft-k8s", &["weft-model", "weft-state"]),
    // The endpoints sit beside the datapath: a regeneration ends by switching the
    // endpoint into the node's datapath, so the switch names it (never the reverse).
    (
        "weft-endpoint",
        &[
            "weft-api",
            "weft-model",
            "weft-sys",
            "weft-hooks",
            "weft-state",
            "weft-clustermesh",
            "weft-datapath",
        ],
    ),
    (
        "weft-testkit",
        &[
            "weft-api",
            "weft-model",
            "weft-kvstore",
            "weft-sys",
            "weft-hooks",
            "weft-state",
            "weft-clustermesh",
            "weft-datapath",
            "weft-wireguard",
        ],
    ),
    ("weft-kubeapi", &[]),
    ("weft-e2e", &[]),
    ("weft-api", &[]),
    ("weft-cni", &["weft-api"]),
    (
        "weft",
        &[
            "weft-model",
            "weft-kvstore",
            "weft-sys",
            "weft-hooks",
            "weft-plugins",
            "weft-state",
            "weft-clustermesh",
            "weft-datapath",
            "weft-wireguard",
            "weft-endpoint",
            "weft-k8s",
            "weft-api",
        ],
    ),
];

/// What `cargo args` prints, offline, in this crate's directory.
fn cargo(args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn metadata() -> Value {
    serde_json::from_slice(&cargo(&["metadata", "--format-version", "1", "--no-deps"])).unwrap()
}

/// Each workspace crate's normal and build dependencies.
fn dependencies(meta: &Value) -> BTreeMap<String, BTreeSet<String>> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"] != "dev")
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

/// Every dependency a row does not allow, named.
fn violations(deps: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let workspace: BTreeSet<&str> = deps.keys().map(String::as_str).collect();
    let edges: BTreeMap<&str, &[&str]> = WORKSPACE_EDGES.iter().copied().collect();
    let mut found = Vec::new();
    for (name, its) in deps {
        let Some(allowed) = edges.get(name.as_str()) else {
            found.push(format!("{name} has no row in WORKSPACE_EDGES"));
            continue;
        };
        for d in its.iter().filter(|d| workspace.contains(d.as_str())) {
            if !allowed.contains(&d.as_str()) {
                found.push(format!(
                    "{name} depends on {d}, which its row does not allow"
                ));
            }
        }
    }
    // Outside the workspace, for the crates whose row lists them.
    for (name, allowed) in ALLOWED {
        let outside = deps[*name]
            .iter()
            .filter(|d| !workspace.contains(d.as_str()));
        for d in outside.filter(|d| !allowed.contains(&d.as_str())) {
            found.push(format!(
                "{name} depends on {d}, which its row does not allow"
            ));
        }
    }
    found
}

#[test]
fn every_crate_depends_only_on_what_its_row_allows() {
    let found = violations(&dependencies(&metadata()));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn control_an_edge_the_rows_do_not_allow_is_named() {
    let mut meta = metadata();
    let model = meta["packages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == "weft-model")
        .unwrap();
    model["dependencies"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "weft", "kind": null}));
    assert_eq!(
        violations(&dependencies(&meta)),
        ["weft-model depends on weft, which its row does not allow"]
    );
}

/// Where an etcd key may be spelled: the one layout. Integration tests (outside these
/// directories) spell keys as the established writer does, on purpose: they check the
/// layout from outside.
const LAYOUT_FILE: &str = "host/model/src/layout.rs";

/// The lines of `text` that spell an etcd key, outside comments and test modules.
fn spelled_keys(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if !code.starts_with("//") && code.contains("\"cilium/") {
            found.push((n + 1, line.trim().to_owned()));
        }
    }
    found
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_etcd_key_is_spelled_only_in_the_layout() {
    let meta = metadata();
    let root = std::path::PathBuf::from(meta["workspace_root"].as_str().unwrap());
    let mut files = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let dir = std::path::Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_owned();
        for sub in ["src", "benches"] {
            rust_files(&dir.join(sub), &mut files);
        }
    }
    assert!(files.iter().any(|f| f.ends_with(LAYOUT_FILE)));
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with(LAYOUT_FILE)) {
        for (n, line) in spelled_keys(&std::fs::read_to_string(f).unwrap()) {
            let at = f.strip_prefix(&root).unwrap_or(f).display();
            found.push(format!("{at}:{n}: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "etcd keys spelled outside {LAYOUT_FILE} (use weft_model::layout):\n{}",
        found.join("\n")
    );
}

#[test]
fn control_a_spelled_key_is_found_and_comments_and_tests_are_not() {
    let text =
        "// \"cilium/a\"\nlet k = \"cilium/state/x\";\n#[cfg(test)]\nlet t = \"cilium/y\";\n";
    assert_eq!(
        spelled_keys(text),
        [(2, "let k = \"cilium/state/x\";".to_owned())]
    );
}

/// What `weft`'s normal dependencies are with `features` (`cargo tree`, offline).
fn agent_dependencies(features: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["tree", "-p", "weft", "-e", "normal", "--prefix", "none"];
    args.extend(["--format", "{p}"]);
    args.extend(features);
    String::from_utf8_lossy(&cargo(&args))
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The lab's own crates: plotting and the terminal UI.
const LAB_ONLY: [&str; 2] = ["plotters", "crossterm"];

#[test]
fn the_images_weftd_links_no_lab() {
    let dockerfile = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/Dockerfile"),
    )
    .unwrap();
    let build = dockerfile
        .lines()
        .find(|l| l.contains("--bin weftd"))
        .expect("the Dockerfile builds weftd");
    assert!(
        build.contains("--no-default-features"),
        "the image's weftd is built with the lab: {build}"
    );
    let without = agent_dependencies(&["--no-default-features"]);
    for c in LAB_ONLY {
        assert!(
            !without.contains(c),
            "{c} is linked without the lab feature"
        );
    }
    // Control: with the default features (the lab) they are there, so the check sees them.
    let with = agent_dependencies(&[]);
    for c in LAB_ONLY {
        assert!(with.contains(c), "{c} not found even with the lab");
    }
}

/// The crates whose tests or benches use the agent's library (`weft`), from their
/// dev-dependencies: an edit to the agent relinks only these crates' tests.
fn testing_the_agent(meta: &Value) -> BTreeSet<String> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["kind"] == "dev" && d["name"] == "weft")
        })
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn no_other_crates_tests_link_the_agents_library() {
    // The end-to-end tests start weftd as a process; the support crate is below the
    // agent (its row holds that). So an edit to the agent relinks weft's own tests and
    // benches and nothing else's.
    assert_eq!(testing_the_agent(&metadata()), BTreeSet::new());
}

#[test]
fn control_a_test_crate_on_the_agents_library_is_named() {
    let mut meta = metadata();
    let e2e = meta["packages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == "weft-e2e")
        .unwrap();
    e2e["dependencies"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "weft", "kind": "dev"}));
    assert_eq!(
        testing_the_agent(&meta),
        BTreeSet::from(["weft-e2e".to_owned()])
    );
}
