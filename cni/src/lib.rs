//! `weft-cni`, called by a container runtime as the CNI specification says: the
//! operation and the container in `CNI_*` variables, the network configuration on
//! stdin, the result (or the specification's error JSON) on stdout, exit status 0 or
//! non-zero. It relays the operation to `weftd` over its local API, where the work is
//! done; it keeps only the specification's framing: version negotiation, the required
//! variables, and the result's layout for the negotiated version.
//!
//! The configuration may name the agent's socket (`"socket"`); the default is
//! `/var/run/weft/weftd.sock`. A sample, as a `.conflist`:
//!
//! ```json
//! {"cniVersion":"1.1.0","name":"weft","plugins":[{"type":"weft-cni"}]}
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;
use weft_api::cni::rscni_types::error::Error as SpecError;
use weft_api::cni::rscni_types::legacy;
use weft_api::cni::rscni_types::types::{CNIResultWithVersion, Cmd, NetConf};
use weft_api::cni::rscni_types::types::{ErrorResult, CNI_ARGS};
use weft_api::cni::rscni_types::types::{CNI_COMMAND, CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS};
use weft_api::cni::rscni_types::version::{PluginInfo, SpecVersion};
use weft_api::cni::{CniAnswer, CniCall, Command, Failure, ROUTE};

/// How long the runtime's call may wait on the agent: an ADD may wait for an
/// identity allocation in etcd.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What the plugin prints and exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// What goes to stdout.
    pub stdout: String,
    /// The exit status.
    pub status: i32,
}

impl Output {
    fn ok(stdout: String) -> Self {
        Self { stdout, status: 0 }
    }

    fn error(version: SpecVersion, error: &SpecError) -> Self {
        let json = serde_json::to_string(&ErrorResult::new(version, error))
            .expect("an error result serialises");
        Self {
            stdout: json,
            status: 1,
        }
    }
}

/// Carries out one invocation: `env` is the process environment, `stdin` what the
/// runtime wrote.
pub async fn run(env: &HashMap<String, String>, stdin: &[u8]) -> Output {
    let current = SpecVersion::CURRENT;
    let var = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    let cmd = match Cmd::from_str(var(CNI_COMMAND).as_deref().unwrap_or_default()) {
        Ok(cmd) => cmd,
        Err(e) => return Output::error(current, &e),
    };
    let info = PluginInfo::default();
    if cmd == Cmd::Version {
        return Output::ok(serde_json::to_string(&info).expect("plugin info serialises"));
    }
    let config: NetConf = match serde_json::from_slice(stdin) {
        Ok(c) => c,
        Err(e) => {
            return Output::error(
                current,
                &SpecError::FailedToDecode(format!("the network configuration on stdin: {e}")),
            )
        }
    };
    let version = match info.negotiate(&config, cmd) {
        Ok(v) => v,
        Err(e) => return Output::error(current, &e),
    };
    if let Err(e) = config.validate_name() {
        return Output::error(version, &e);
    }
    let call = match call(cmd, env, config) {
        Ok(c) => c,
        Err(e) => return Output::error(version, &e),
    };
    let socket = socket(&call.config);
    let client = weft_api::Client::new(socket).with_timeout(AGENT_TIMEOUT);
    let (status, body) = match client.post(ROUTE, &call).await {
        Ok(answer) => answer,
        Err(e) => {
            // No agent: an ADD is retried by the runtime; a STATUS says "not ready".
            let e = match cmd {
                Cmd::Status => SpecError::PluginNotAvailable(e.to_string()),
                _ => SpecError::TryAgainLater(e.to_string()),
            };
            return Output::error(version, &e);
        }
    };
    if !status.is_success() {
        let e = match serde_json::from_slice::<Failure>(&body) {
            Ok(f) => f.to_spec(),
            Err(_) => SpecError::Custom(
                999,
                format!("weftd answered {status}"),
                String::from_utf8_lossy(&body).into_owned(),
            ),
        };
        return Output::error(version, &e);
    }
    let answer: CniAnswer = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return Output::error(
                version,
                &SpecError::FailedToDecode(format!("weftd's answer: {e}")),
            )
        }
    };
    match (cmd, answer.result) {
        (Cmd::Add, Some(result)) if version.is_legacy() => Output::ok(
            serde_json::to_string(&legacy::CNIResult::new(version, result))
                .expect("a result serialises"),
        ),
        (Cmd::Add, Some(result)) => Output::ok(
            serde_json::to_string(&CNIResultWithVersion::new(version, result))
                .expect("a result serialises"),
        ),
        (Cmd::Add, None) => Output::error(
            version,
            &SpecError::FailedToDecode("weftd answered an ADD without a result".into()),
        ),
        _ => Output::ok(String::new()),
    }
}

/// The call to relay, with the variables the operation requires.
fn call(cmd: Cmd, env: &HashMap<String, String>, config: NetConf) -> Result<CniCall, SpecError> {
    let var = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    let (command, required): (Command, &[&str]) = match cmd {
        Cmd::Add => (Command::Add, &[CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME]),
        Cmd::Check => (Command::Check, &[CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME]),
        Cmd::Del => (Command::Del, &[CNI_CONTAINERID, CNI_IFNAME]),
        Cmd::Gc => (Command::Gc, &[]),
        Cmd::Status => (Command::Status, &[]),
        Cmd::Version => unreachable!("VERSION is answered before"),
    };
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| var(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(SpecError::missing_env(&missing));
    }
    Ok(CniCall {
        command,
        container_id: var(CNI_CONTAINERID).unwrap_or_default(),
        netns: var(CNI_NETNS),
        ifname: var(CNI_IFNAME).unwrap_or_default(),
        args: args(var(CNI_ARGS).as_deref().unwrap_or_default())?,
        config,
    })
}

/// `CNI_ARGS`: `K=V` pairs separated by `;`.
fn args(raw: &str) -> Result<Vec<(String, String)>, SpecError> {
    raw.split(';')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| {
                    SpecError::InvalidEnvValue(format!("CNI_ARGS: {pair:?} is not KEY=VALUE"))
                })
        })
        .collect()
}

/// The agent's socket: the configuration's `socket`, or the default.
fn socket(config: &NetConf) -> PathBuf {
    config
        .custom
        .get("socket")
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| weft_api::socket_path(weft_api::DEFAULT_STATE_DIR.as_ref()))
}
