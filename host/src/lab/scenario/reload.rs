//! `plugin-reload`: the regeneration-policy plugin swapped under waiting endpoints.

use super::{freeze_and_restart, lab_for, regeneration, Steps, Verdict, FIRST};
use crate::lab::spec::{PodRef, Spec};
use crate::lab::LabError;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The version of plugin `name` an agent runs, and the refusals it reports for it.
async fn plugin_state(state_dir: &Path, name: &str) -> Option<(String, u64, Vec<String>)> {
    let plugins = crate::api::fetch_status(state_dir).await.ok()?.plugins?;
    let loaded = plugins.loaded.iter().find(|p| p.name == name)?;
    let refused = plugins
        .refused
        .iter()
        .filter(|r| r.manifest.ends_with(format!("{name}.toml")))
        .map(|r| r.error.clone())
        .collect();
    Some((loaded.version.clone(), loaded.failures, refused))
}

/// Runs `plugin-reload` on the lab in `dir`: cluster1's first agent restarts with
/// cluster2's etcd frozen, so its restored endpoints regenerate and wait; meanwhile
/// cluster1's `regeneration-policy` plugin is replaced by a new version. Expected: the
/// agent runs the new version, nothing fails, and every endpoint switches once cluster2
/// thaws. The control's new version is tampered with after signing: it is refused,
/// the running version keeps deciding, and the endpoints switch all the same. A good
/// version is installed after the control, so the lab's directory is whole again.
///
/// # Errors
/// [`LabError`] when the lab cannot run it.
pub async fn plugin_reload(
    dir: &Path,
    control: bool,
    out: &mut impl Write,
) -> Result<Verdict, LabError> {
    const PLUGIN: &str = "regeneration-policy";
    let mut state = lab_for(dir, "plugin-reload", 1)?;
    let spec = state.spec.clone();
    let node = FIRST;
    let state_dir = spec.node_dir(node).join("state");
    let steps = Steps(Instant::now());
    // Newer than any earlier run's: the clock in milliseconds.
    let new_version = |offset: u128| {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("0.2.{}", millis + offset)
    };
    let etcd = freeze_and_restart(&mut state, node)?;
    steps.say(
        out,
        format!(
            "cluster2's etcd frozen; the agent of {} restarted: its endpoints regenerate",
            Spec::node_name(node)
        ),
    );
    let pod = PodRef { node, pod: 1 };
    // Waiting in earnest: the policy has decided and cluster2 is among what it waits for.
    let waiting = regeneration(&spec, pod, Duration::from_secs(20), |r| {
        r.reason == "restore"
            && r.outcome.is_waiting()
            && r.waiting_for.iter().any(|c| c == "cluster2")
    })
    .await;
    let before = plugin_state(&state_dir, PLUGIN).await;
    let version = new_version(0);
    crate::lab::up::install_plugin_version(
        &spec,
        1,
        (PLUGIN, &version),
        "regeneration_policy",
        0,
        "",
        control,
    )?;
    steps.say(
        out,
        format!(
            "{PLUGIN} {version}{} put in place while the endpoints wait",
            if control {
                ", tampered with after signing"
            } else {
                ""
            }
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = plugin_state(&state_dir, PLUGIN).await;
        let settled = s.as_ref().is_some_and(|(v, _, refused)| {
            if control {
                !refused.is_empty()
            } else {
                *v == version
            }
        });
        if settled || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    etcd.thaw();
    steps.say(out, "cluster2's etcd thawed");
    let deadline = Instant::now() + Duration::from_secs(60);
    let switched = loop {
        let endpoints = crate::api::fetch_endpoints(&state_dir)
            .await
            .unwrap_or_default();
        let all = endpoints.len() == usize::from(spec.pods)
            && endpoints.iter().all(|e| {
                e.record
                    .regeneration
                    .as_ref()
                    .is_some_and(|r| r.reason != "create" && r.outcome.is_synced())
            });
        if all || Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if control {
        // The directory whole again: a good version after the refused one.
        let good = new_version(1);
        crate::lab::up::install_plugin_version(
            &spec,
            1,
            (PLUGIN, &good),
            "regeneration_policy",
            0,
            "",
            false,
        )?;
        steps.say(out, format!("{PLUGIN} {good} (good) put in place"));
    }
    let old = before.as_ref().map(|(v, ..)| v.clone()).unwrap_or_default();
    let (running, failures, refused) = after.unwrap_or_default();
    let passed = waiting.is_some()
        && switched
        && failures == 0
        && if control {
            running == old && !refused.is_empty()
        } else {
            running == version
        };
    let line = format!(
        "plugin-reload{}: {} — running {PLUGIN} {running} (was {old}), {failures} failures, {}; every endpoint synced and switched: {}",
        if control { " (control: tampered)" } else { "" },
        match (control, passed) {
            (false, true) => "PASS, swapped under waiting endpoints",
            (true, true) => "the tampered version was refused and the running one kept deciding, as expected",
            (_, false) => "FAIL",
        },
        if refused.is_empty() {
            "nothing refused".to_owned()
        } else {
            format!("refused: {}", refused.join("; "))
        },
        if switched { "yes" } else { "no" }
    );
    Ok(Verdict {
        passed,
        line,
        gap: None,
    })
}
