//! `weftd lab down`: removes what the state file records, last made first, and only
//! that: a process only while its command line names the lab, a namespace only by the
//! name the lab gave it. Works on a lab whose `up` crashed half-way.

use super::netns;
use super::process;
use super::state::{LabState, Made};
use std::time::Duration;

/// What `down` did, one line per part.
pub fn down(state: &LabState) -> Vec<String> {
    let marker = state.spec.dir.to_string_lossy().into_owned();
    let mut done = Vec::new();
    for made in state.made.iter().rev() {
        match made {
            Made::Process { what, pid } => {
                if process::stop(*pid, &marker, Duration::from_secs(5)) {
                    done.push(format!("stopped {what} (pid {pid})"));
                }
            }
            Made::WireGuard { device } => {
                let device_of_lab = crate::wireguard::WireGuardDevice::named(device)
                    .ok()
                    .filter(|d| d.get().is_ok());
                if let Some(d) = device_of_lab {
                    d.stop();
                    done.push(format!("stopped WireGuard device {device}"));
                }
            }
            Made::Bpf { path } => {
                if path.exists() {
                    crate::datapath::Datapath::remove_all(path);
                    done.push(format!("removed {}", path.display()));
                }
            }
            Made::Netns { name } => {
                if super::spec::netns_path(name).exists() {
                    netns::delete(name);
                    done.push(format!("removed namespace {name}"));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&state.spec.dir);
    done.push(format!("removed {}", state.spec.dir.display()));
    done
}
