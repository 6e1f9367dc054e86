//! The lab as its agents see it: per node, from its agent's status and endpoint list;
//! per cluster, one line (nodes up, remote clusters synced, endpoints switched,
//! WireGuard peers and handshakes, pod routes). On a terminal the view is redrawn in
//! place ([`Redraw`]); elsewhere each change is a new block of plain lines.

use super::spec::{NodeRef, Spec};
use weft_api::endpoint::Outcome;

/// One node, as its agent reports it; `None` fields: the agent does not answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Whether the agent answered.
    pub up: bool,
    /// Remote clusters with all four barriers released.
    pub synced: usize,
    /// Remote clusters known.
    pub remotes: usize,
    /// Endpoints whose regeneration ended with the endpoint switched.
    pub switched: usize,
    /// Endpoints.
    pub endpoints: usize,
    /// WireGuard peers with a node.
    pub peers: usize,
    /// Of those, with a handshake.
    pub handshakes: usize,
    /// Pod routes through the device.
    pub routes: usize,
}

/// Reads node `n`'s agent.
pub async fn node(spec: &Spec, n: NodeRef) -> NodeView {
    let state_dir = spec.node_dir(n).join("state");
    let Ok(status) = crate::api::fetch_status(&state_dir).await else {
        return NodeView::default();
    };
    let endpoints = crate::api::fetch_endpoints(&state_dir)
        .await
        .unwrap_or_default();
    let wg = status.wireguard.unwrap_or_default();
    NodeView {
        up: true,
        synced: status
            .clusters
            .iter()
            .filter(|c| {
                c.synced.nodes && c.synced.ipcache && c.synced.identities && c.synced.services
            })
            .count(),
        remotes: status.clusters.len(),
        switched: endpoints
            .iter()
            .filter(|e| {
                e.record.regeneration.as_ref().is_some_and(|r| {
                    !r.outcome.is_waiting() && !matches!(r.outcome, Outcome::NotSwitched { .. })
                })
            })
            .count(),
        endpoints: endpoints.len(),
        peers: wg.peers.iter().filter(|p| p.node.is_some()).count(),
        handshakes: wg
            .peers
            .iter()
            .filter(|p| p.handshake_seconds_ago.is_some())
            .count(),
        routes: wg.routes.map_or(0, |r| r.installed.len()),
    }
}

/// Every node's view, by node.
pub async fn nodes(spec: &Spec) -> Vec<(NodeRef, NodeView)> {
    let mut out = Vec::new();
    for n in spec.nodes() {
        out.push((n, node(spec, n).await));
    }
    out
}

/// Whether every node is up with every remote cluster synced, all its pods switched,
/// a peer and a pod route for every other node.
pub fn ready(spec: &Spec, views: &[(NodeRef, NodeView)]) -> bool {
    let others = usize::from(spec.clusters) * usize::from(spec.nodes) - 1;
    views.iter().all(|(_, v)| {
        v.up && v.remotes == usize::from(spec.clusters) - 1
            && v.synced == v.remotes
            && v.endpoints == usize::from(spec.pods)
            && v.switched == v.endpoints
            && v.peers == others
            && v.routes == others
    })
}

/// One line per cluster.
pub fn render(spec: &Spec, views: &[(NodeRef, NodeView)]) -> String {
    let mut out = String::new();
    for c in 1..=spec.clusters {
        let of: Vec<&NodeView> = views
            .iter()
            .filter(|(n, _)| n.cluster == c)
            .map(|(_, v)| v)
            .collect();
        let sum = |f: fn(&NodeView) -> usize| of.iter().map(|v| f(v)).sum::<usize>();
        let nodes = of.len();
        let remote = usize::from(spec.clusters) - 1;
        let others = usize::from(spec.clusters) * usize::from(spec.nodes) - 1;
        out.push_str(&format!(
            "{:<9} agents {}/{nodes}  clusters synced {}/{}  endpoints switched {}/{}  peers {}/{} (handshakes {})  pod routes {}/{}\n",
            Spec::cluster_name(c),
            of.iter().filter(|v| v.up).count(),
            sum(|v| v.synced),
            remote * nodes,
            sum(|v| v.switched),
            usize::from(spec.pods) * nodes,
            sum(|v| v.peers),
            others * nodes,
            sum(|v| v.handshakes),
            sum(|v| v.routes),
            others * nodes,
        ));
    }
    out
}

/// A block of lines redrawn in place on a terminal: each draw moves the cursor back
/// over the previous one and clears it first (through `crossterm`).
///
/// # Example
/// ```
/// let mut out = Vec::new();
/// let mut view = weft::lab::view::Redraw::default();
/// view.draw(&mut out, "cluster1 …\ncluster2 …").unwrap();
/// view.draw(&mut out, "cluster1 ready\ncluster2 ready").unwrap();
/// assert!(String::from_utf8(out).unwrap().contains("\u{1b}[2A"));
/// ```
#[derive(Debug, Default)]
pub struct Redraw {
    /// Lines the last draw left on the screen.
    drawn: u16,
}

impl Redraw {
    /// Replaces the block drawn last with `block`.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn draw(&mut self, out: &mut dyn std::io::Write, block: &str) -> std::io::Result<()> {
        use crossterm::{cursor::MoveUp, terminal::Clear, terminal::ClearType, QueueableCommand};
        if self.drawn > 0 {
            out.queue(MoveUp(self.drawn))?;
        }
        out.queue(Clear(ClearType::FromCursorDown))?;
        let block = block.trim_end();
        writeln!(out, "{block}")?;
        out.flush()?;
        self.drawn = u16::try_from(block.lines().count()).unwrap_or(u16::MAX);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redraw_moves_back_over_the_lines_drawn_last_and_clears_them() {
        let mut out = Vec::new();
        let mut view = Redraw::default();
        view.draw(&mut out, "a\nb\nc\n").unwrap();
        let first = String::from_utf8(out.clone()).unwrap();
        assert_eq!(first, "\u{1b}[Ja\nb\nc\n", "nothing to move over at first");
        out.clear();
        view.draw(&mut out, "d").unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "\u{1b}[3A\u{1b}[Jd\n"
        );
        out.clear();
        view.draw(&mut out, "e").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "\u{1b}[1A\u{1b}[Je\n");
    }
}
