//! The connectivity matrix, measured with real TCP: every pod connects to the serving
//! pod (pod 1, `app=web`) of every other node. The lab's policy admits clients only,
//! so a web pod's attempts are expected to be dropped.

use super::spec::{netns_path, NodeRef, PodRef, Spec, POD_PORT};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Who connected.
    pub from: PodRef,
    /// To the serving pod of this node.
    pub to: NodeRef,
    /// Whether the policy admits it.
    pub expected: bool,
    /// Whether the connection was accepted.
    pub reached: bool,
}

impl Cell {
    /// Whether what happened is what the policy says.
    pub fn as_expected(&self) -> bool {
        self.expected == self.reached
    }
}

/// Listens on the serving pods, connects from every pod to every other node's serving
/// pod (all at once, each bounded), and stops listening. `ips`: every pod's address.
///
/// # Errors
/// When a listener cannot be bound in a pod.
pub fn measure(spec: &Spec, ips: &BTreeMap<PodRef, IpAddr>) -> std::io::Result<Vec<Cell>> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut servers = Vec::new();
    for n in spec.nodes() {
        let web = PodRef { node: n, pod: 1 };
        let ns = netns_path(&spec.pod_netns(web));
        let listener = crate::netns::in_netns(Some(&ns), || {
            TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], POD_PORT)))
        })
        .map_err(std::io::Error::other)??;
        listener.set_nonblocking(true)?;
        let stop = stop.clone();
        servers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok(_) => {}
                    // Polled: the thread ends with the measurement.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }));
    }
    let mut attempts = Vec::new();
    for from in spec.pods() {
        for to in spec.nodes().filter(|n| *n != from.node) {
            let Some(ip) = ips.get(&PodRef { node: to, pod: 1 }).copied() else {
                continue;
            };
            let expected = Spec::pod_app(from) == "client";
            let ns = netns_path(&spec.pod_netns(from));
            attempts.push(std::thread::spawn(move || {
                let addr = SocketAddr::new(ip, POD_PORT);
                // An admitted flow may first wait for a WireGuard handshake: 3 s (TCP
                // retries its SYN after 1 s), and more tries, as a lost handshake
                // initiation is sent again only after WireGuard's REKEY_TIMEOUT (5 s,
                // plus jitter). A denied one needs no more than a second to show it is
                // dropped: the handshakes of the admitted ones run at the same time.
                let (tries, wait) = if expected {
                    (3, Duration::from_secs(3))
                } else {
                    (1, Duration::from_secs(1))
                };
                let reached = (0..tries).any(|_| {
                    crate::netns::in_netns(Some(&ns), || {
                        TcpStream::connect_timeout(&addr, wait).is_ok()
                    })
                    .unwrap_or(false)
                });
                Cell {
                    from,
                    to,
                    expected,
                    reached,
                }
            }));
        }
    }
    let cells = attempts.into_iter().filter_map(|t| t.join().ok()).collect();
    stop.store(true, Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
    Ok(cells)
}

/// The matrix as a table: a row per pod, a column per node.
pub fn render(spec: &Spec, cells: &[Cell]) -> String {
    let mut out = format!("{:<14}", "from \\ to");
    for n in spec.nodes() {
        out.push_str(&format!(" {:>7}", Spec::node_name(n)));
    }
    out.push('\n');
    for p in spec.pods() {
        out.push_str(&format!(
            "{:<14}",
            format!("{} {}", Spec::pod_name(p), Spec::pod_app(p))
        ));
        for n in spec.nodes() {
            let cell = cells.iter().find(|c| c.from == p && c.to == n);
            let text = match cell {
                None => "-",
                Some(c) if c.reached && c.expected => "ok",
                Some(c) if !c.reached && !c.expected => "denied",
                Some(c) if c.expected => "FAIL",
                Some(_) => "LEAK",
            };
            out.push_str(&format!(" {text:>7}"));
        }
        out.push('\n');
    }
    let wrong = cells.iter().filter(|c| !c.as_expected()).count();
    out.push_str(&format!(
        "{} attempts: {} reached, {} denied by policy as expected, {} not as expected\n",
        cells.len(),
        cells.iter().filter(|c| c.reached).count(),
        cells.iter().filter(|c| !c.reached && !c.expected).count(),
        wrong
    ));
    out
}
