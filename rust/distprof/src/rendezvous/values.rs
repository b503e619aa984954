//! The values the rendezvous writes to the store (JSON), and their parsing: a value that
//! does not parse is a `Malformed` error naming its key.

use crate::context::{GraphParams, NodeId};
use crate::kv::KvError;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::net::SocketAddr;

/// Version of the rendezvous values; a node refuses an announcement of another version.
/// Version 2: per-node joins read by peers only, echoes instead of one context value.
pub const PROTOCOL_VERSION: u32 = 2;

/// Written by the master to `distprof/round/<r>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Announcement {
    pub version: u32,
    pub session_id: String,
    /// Carried by every probe packet of the run.
    pub session_token: u64,
    pub num_nodes: u32,
    pub reference_node: NodeId,
    pub config_digest: String,
    /// The master's shared configuration, so a node that differs can name the fields.
    pub config: serde_json::Value,
    /// Every node derives its own edges from these and `num_nodes`.
    pub graph: GraphParams,
}

/// Written by node i to `distprof/s/<session>/node/<i>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    pub session_id: String,
    pub node: NodeId,
    /// Random per rendezvous call; each peer echoes it, so the node can tell that the
    /// peer read this join and not one an earlier incarnation of it wrote.
    pub nonce: u64,
    pub num_nodes: u32,
    pub probe_addr: SocketAddr,
    pub hostname: String,
    pub config_digest: String,
    /// Set when the node already knows it cannot take part (config or node-count
    /// mismatch); its peers then go on without it at once, naming it and the reason.
    pub problem: Option<String>,
}

/// Written by node `from` to `distprof/s/<session>/echo/<from>/<to>` once it has read
/// node `to`'s join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Echo {
    pub session_id: String,
    pub from: NodeId,
    pub to: NodeId,
    /// The nonce of the join `from` read.
    pub nonce: u64,
}

pub fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("rendezvous values serialize")
}

pub fn decode<T: DeserializeOwned>(key: &str, text: &str) -> Result<T, KvError> {
    serde_json::from_str(text).map_err(|e| {
        let mut shown: String = text.chars().take(80).collect();
        if shown.len() < text.len() {
            shown.push('…');
        }
        KvError::Malformed {
            key: key.to_string(),
            reason: format!("{e} (value starts `{shown}`)"),
        }
    })
}
