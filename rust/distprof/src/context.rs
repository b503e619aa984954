//! The run context: what every node agrees on before the first probe is sent.
//!
//! Produced by the rendezvous (one value written last by the master), consumed by the
//! probe engine. Immutable for the life of a run.

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

/// Everything a node needs to probe its peers for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunContext {
    /// Per-run id; every key-value key of the run lives under it.
    pub session_id: String,
    /// Random token carried by every probe packet; packets without it are dropped.
    pub session_token: u64,
    pub num_nodes: u32,
    pub reference_node: NodeId,
    /// Indexed by node id.
    pub nodes: Vec<NodeInfo>,
    /// `out_edges[i]` lists the peers node i probes.
    pub out_edges: Vec<Vec<NodeId>>,
    /// Digest of the master's effective configuration; a node whose own digest differs
    /// is told which fields differ.
    pub config_digest: String,
}

impl RunContext {
    /// A context agreed without a rendezvous (tests, and runs whose context is given in a
    /// file): nodes numbered by their position in `nodes`, node 0 the reference, no
    /// configuration digest to compare.
    pub fn without_rendezvous(
        session_id: &str,
        session_token: u64,
        nodes: Vec<NodeInfo>,
        out_edges: Vec<Vec<NodeId>>,
    ) -> RunContext {
        RunContext {
            session_id: session_id.to_string(),
            session_token,
            num_nodes: nodes.len() as u32,
            reference_node: 0,
            nodes,
            out_edges,
            config_digest: String::new(),
        }
    }
}
