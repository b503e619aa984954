//! The run context: what one node knows of its run before the first probe is sent.
//!
//! Produced by the rendezvous, consumed by the probe engine. Immutable for the life of a
//! run. It is one node's slice of the run: the run-wide facts every node shares (session,
//! token, node count, reference, configuration digest, graph parameters) and this node's
//! own peers with their addresses, O(k) in size, never a list of every node.

use crate::topology::{build_probe_graph, ProbeGraph};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A node is one process (a PJRT task), numbered 0..num_nodes.
pub type NodeId = u32;

/// One node's published identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: NodeId,
    /// The bound address of the node's probe socket.
    pub probe_addr: SocketAddr,
    pub hostname: String,
}

/// The parameters every node derives its edges from (`topology::ProbeGraph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphParams {
    /// The configured out-degree (`probe_out_degree`), before clamping to the node count.
    pub out_degree: u32,
    pub seed: u64,
}

/// Everything a node needs to probe its peers for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunContext {
    /// Per-run id; every key-value key of the run lives under it.
    pub session_id: String,
    /// Random token carried by every probe packet; packets without it are dropped.
    pub session_token: u64,
    pub num_nodes: u32,
    pub reference_node: NodeId,
    /// Digest of the master's shared configuration; every node of the session has the
    /// same one.
    pub config_digest: String,
    /// The graph the edges come from; `None` when the edges were given explicitly (tests
    /// and simulations with their own graphs).
    pub graph: Option<GraphParams>,
    /// The node this context belongs to.
    pub node: NodeId,
    /// The peers this node probes, ascending: its edges in the graph, less any peer that
    /// did not take part (see `absent_peers`).
    pub out_edges: Vec<NodeId>,
    /// The peers that probe this node, ascending, likewise.
    pub in_edges: Vec<NodeId>,
    /// This node and every peer of `out_edges` and `in_edges`, ascending by id.
    pub nodes: Vec<NodeInfo>,
    /// Peers of this node in the graph that did not take part (never joined in time, or
    /// could not), ascending; their edges are left out above.
    #[serde(default)]
    pub absent_peers: Vec<NodeId>,
}

impl RunContext {
    /// The published identity of `node` if it is this node or one of its peers.
    pub fn info(&self, node: NodeId) -> Option<&NodeInfo> {
        self.nodes
            .binary_search_by_key(&node, |n| n.node)
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// This node's own published identity.
    pub fn me(&self) -> Option<&NodeInfo> {
        self.info(self.node)
    }

    /// The facts every node of the run shares, as one line of JSON: what the context
    /// digest covers, so that equal digests on all nodes mean they agreed.
    pub fn shared_json(&self) -> String {
        serde_json::json!({
            "session_id": self.session_id,
            "session_token": self.session_token,
            "num_nodes": self.num_nodes,
            "reference_node": self.reference_node,
            "config_digest": self.config_digest,
            "graph": self.graph,
        })
        .to_string()
    }

    /// The context of every node of a run agreed without a rendezvous (tests, benches,
    /// simulations): nodes numbered by their position in `nodes`, node 0 the reference, no
    /// configuration digest, the edges given in full. O(N·k); never used inside a job.
    pub fn without_rendezvous(
        session_id: &str,
        session_token: u64,
        nodes: &[NodeInfo],
        out_edges: &[Vec<NodeId>],
    ) -> Vec<RunContext> {
        let mut in_edges = vec![Vec::new(); nodes.len()];
        for (u, edges) in out_edges.iter().enumerate() {
            for &v in edges {
                if let Some(list) = in_edges.get_mut(v as usize) {
                    list.push(u as NodeId);
                }
            }
        }
        (0..nodes.len())
            .map(|i| {
                let out = out_edges.get(i).cloned().unwrap_or_default();
                let inn = std::mem::take(&mut in_edges[i]);
                let mut ids: Vec<NodeId> = out.iter().chain(&inn).copied().chain([i as NodeId]).collect();
                ids.sort_unstable();
                ids.dedup();
                RunContext {
                    session_id: session_id.to_string(),
                    session_token,
                    num_nodes: nodes.len() as u32,
                    reference_node: 0,
                    config_digest: String::new(),
                    graph: None,
                    node: i as NodeId,
                    out_edges: out,
                    in_edges: inn,
                    nodes: ids.iter().filter_map(|&p| nodes.get(p as usize).cloned()).collect(),
                    absent_peers: Vec::new(),
                }
            })
            .collect()
    }

    /// Like [`RunContext::without_rendezvous`] with the graph of (`graph`, N): what every
    /// node would have agreed on had all of `nodes` joined.
    pub fn all_from_graph(
        session_id: &str,
        session_token: u64,
        reference_node: NodeId,
        config_digest: &str,
        graph: GraphParams,
        nodes: &[NodeInfo],
    ) -> Vec<RunContext> {
        let n = nodes.len() as u32;
        let edges = build_probe_graph(n, graph.out_degree, graph.seed);
        let mut all = RunContext::without_rendezvous(session_id, session_token, nodes, &edges);
        for ctx in &mut all {
            ctx.reference_node = reference_node;
            ctx.config_digest = config_digest.to_string();
            ctx.graph = Some(graph);
        }
        all
    }

    /// The graph of this context's parameters, to evaluate other nodes' edges (offline
    /// tools); `None` for explicitly given edges.
    pub fn probe_graph(&self) -> Option<ProbeGraph> {
        self.graph
            .map(|g| ProbeGraph::new(self.num_nodes, g.out_degree, g.seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infos(n: u32) -> Vec<NodeInfo> {
        (0..n)
            .map(|i| NodeInfo { node: i, probe_addr: SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16)), hostname: format!("h{i}") })
            .collect()
    }

    #[test]
    fn each_node_gets_its_edges_its_probers_and_only_their_addresses() {
        let ctxs = RunContext::without_rendezvous("s", 5, &infos(4), &[vec![1], vec![2], vec![3], vec![0, 1]]);
        assert_eq!(ctxs[1].out_edges, vec![2]);
        assert_eq!(ctxs[1].in_edges, vec![0, 3]);
        let ids: Vec<NodeId> = ctxs[1].nodes.iter().map(|n| n.node).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
        assert_eq!(ctxs[0].nodes.iter().map(|n| n.node).collect::<Vec<_>>(), vec![0, 1, 3]);
        assert_eq!(ctxs[2].info(3).unwrap().hostname, "h3");
        assert!(ctxs[2].info(0).is_none(), "node 2 has nothing to do with node 0");
        assert_eq!(ctxs[2].me().unwrap().node, 2);
    }

    #[test]
    fn contexts_from_the_graph_match_the_graph_and_share_one_digest_line() {
        let graph = GraphParams { out_degree: 3, seed: 9 };
        let ctxs = RunContext::all_from_graph("s", 5, 2, "d", graph, &infos(40));
        let g = ProbeGraph::new(40, 3, 9);
        for c in &ctxs {
            assert_eq!(c.out_edges, g.out_edges(c.node));
            assert_eq!(c.in_edges, g.in_edges(c.node));
            assert_eq!(c.shared_json(), ctxs[0].shared_json());
        }
        assert!(ctxs[0].shared_json().contains("\"reference_node\":2"));
    }
}
