//! The values the rendezvous writes to the store (JSON), and their parsing: a value that
//! does not parse is a `Malformed` error naming its key.

use crate::context::{NodeId, RunContext};
use crate::kv::KvError;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::net::SocketAddr;

/// Version of the rendezvous values; a node refuses an announcement of another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// Written by the master to `distprof/round/<r>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Announcement {
    pub version: u32,
    pub session_id: String,
    pub num_nodes: u32,
    pub config_digest: String,
    /// The master's shared configuration, so a node that differs can name the fields.
    pub config: serde_json::Value,
}

/// Written by node i to `distprof/s/<session>/node/<i>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    pub session_id: String,
    pub node: NodeId,
    /// Random per rendezvous call; echoed in the context so the node can tell its own
    /// join from one an earlier incarnation of it wrote.
    pub nonce: u64,
    pub num_nodes: u32,
    pub probe_addr: SocketAddr,
    pub hostname: String,
    pub config_digest: String,
    /// Set when the node already knows it cannot take part (config or node-count
    /// mismatch); the master then aborts the session for everyone at once.
    pub problem: Option<String>,
}

/// Written last by the master to `distprof/s/<session>/context`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Envelope {
    Ok {
        /// `nonces[i]` is node i's join nonce (0 for the master).
        nonces: Vec<u64>,
        context: RunContext,
    },
    Abort {
        reason: String,
    },
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
