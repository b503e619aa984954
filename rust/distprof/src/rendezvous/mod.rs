//! Rendezvous: all nodes agree, for this run only, on who probes whom at which address.
//!
//! Each node has bound its probe socket already and publishes the bound address; the
//! master (node 0) opens a session (see [`session`] for the key layout and how stale
//! runs are recognized), collects every node's join, builds the probe graph
//! ([`crate::topology`]) and publishes the whole [`RunContext`] as one value, written
//! last. The others wait for it with a bounded timeout. Nothing is assigned centrally
//! (ports are whatever each node bound), so nothing overflows at large N.
//!
//! Every wait is bounded by `config.rendezvous_timeout_ms` from the call's start, and
//! every failure is a [`RendezvousError`] that says what was missing and what to check.

pub mod address;
pub mod digest;
mod follower;
pub mod launcher;
mod master;
pub mod session;
pub mod values;

pub use follower::check_context;


use crate::config::Config;
use crate::context::{NodeId, NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use session::{ack_key, round_key};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The master is always node 0: it is the process every launcher starts first and the
/// one that hosts XLA's coordination service and our TCP store.
pub const MASTER: NodeId = 0;

/// While waiting, a node or the master logs where it stands this often.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RendezvousError {
    /// Not marked as the error's source: the message already includes the store's, and
    /// error chains would print it twice.
    #[error("rendezvous: {0}")]
    Kv(KvError),
    #[error("rendezvous: {0}")]
    InvalidArgument(String),
    #[error(
        "rendezvous: node {node}: the master (node 0) opened no session within {waited_ms} ms{detail}; \
         start node 0 with the same rendezvous address, or raise `rendezvous_timeout_ms`"
    )]
    NoSession {
        node: NodeId,
        waited_ms: u64,
        detail: String,
    },
    #[error(
        "rendezvous: session {session_id}: node(s) {missing:?} of {num_nodes} did not join within {waited_ms} ms; \
         check that they were started with the same rendezvous address and node count"
    )]
    NodesMissing {
        session_id: String,
        missing: Vec<NodeId>,
        num_nodes: u32,
        waited_ms: u64,
    },
    #[error(
        "rendezvous: node {node} joined session {session_id}, but the master (node 0) published no run context \
         within {waited_ms} ms: it died, or it is waiting for a node that never arrived (see node 0's log)"
    )]
    NoContext {
        node: NodeId,
        session_id: String,
        waited_ms: u64,
    },
    #[error(
        "rendezvous: node {node}'s configuration differs from the master's (digest {node_digest}, master {master_digest}) in: {}; \
         give every node the same configuration",
        fields.join("; ")
    )]
    ConfigMismatch {
        node: NodeId,
        master_digest: String,
        node_digest: String,
        fields: Vec<String>,
    },
    #[error("rendezvous: node {node} was started for {ours} nodes, the master for {master}; start every node with the same node count")]
    NodeCountMismatch {
        node: NodeId,
        ours: u32,
        master: u32,
    },
    #[error("rendezvous: session {session_id} aborted by the master: {reason}")]
    Aborted { session_id: String, reason: String },
}

impl From<KvError> for RendezvousError {
    fn from(e: KvError) -> Self {
        RendezvousError::Kv(e)
    }
}

/// Runs the rendezvous for `node` of `num_nodes`, whose probe socket is bound at
/// `probe_addr`. Returns the run context every node of the session received.
pub fn rendezvous(
    kv: &dyn KvStore,
    node: NodeId,
    num_nodes: u32,
    config: &Config,
    probe_addr: SocketAddr,
    hostname: &str,
) -> Result<RunContext, RendezvousError> {
    check_arguments(node, num_nodes, config)?;
    let deadline = Instant::now() + Duration::from_millis(config.rendezvous_timeout_ms);
    let me = NodeInfo {
        node,
        probe_addr,
        hostname: hostname.to_string(),
    };
    let ctx = if node == MASTER {
        master::run(kv, num_nodes, config, me, deadline)?
    } else {
        follower::run(kv, num_nodes, config, me, deadline)?
    };
    // No context digest here: hashing the whole context on every node costs O(N) each,
    // and the caller prints it where it is wanted.
    tracing::info!(
        "rendezvous: node {node}/{num_nodes} agreed on session {}",
        ctx.session_id
    );
    Ok(ctx)
}

fn check_arguments(node: NodeId, num_nodes: u32, config: &Config) -> Result<(), RendezvousError> {
    if num_nodes == 0 {
        return Err(RendezvousError::InvalidArgument(
            "node count is 0; a run has at least one node".into(),
        ));
    }
    if node >= num_nodes {
        return Err(RendezvousError::InvalidArgument(format!(
            "node id {node} is out of range for {num_nodes} nodes; ids run from 0 to {}",
            num_nodes - 1
        )));
    }
    if config.reference_node >= num_nodes {
        return Err(RendezvousError::InvalidArgument(format!(
            "config `reference_node` = {} but the run has {num_nodes} nodes; choose a node id below {num_nodes}",
            config.reference_node
        )));
    }
    if config.rendezvous_timeout_ms == 0 {
        return Err(RendezvousError::InvalidArgument(
            "config `rendezvous_timeout_ms` = 0; give the nodes time to meet, e.g. 120000".into(),
        ));
    }
    Ok(())
}

pub(super) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The first round index with no announcement: the one the master opens.
pub(super) fn first_free_round(kv: &dyn KvStore) -> Result<u64, KvError> {
    let mut r = 0;
    while kv.try_get(&round_key(r))?.is_some() {
        r += 1;
    }
    Ok(r)
}

/// Every node of a one-process run (`distprof local`, simulations): runs the real protocol
/// with one thread per node on a fresh in-memory store, node i publishing
/// `probe_addrs[i]`. Returns the contexts in node order (all equal on success) or the
/// first node's error.
pub fn rendezvous_local(
    config: &Config,
    probe_addrs: &[SocketAddr],
    hostname: &str,
) -> Result<Vec<RunContext>, RendezvousError> {
    let num_nodes = u32::try_from(probe_addrs.len()).map_err(|_| {
        RendezvousError::InvalidArgument(format!(
            "{} nodes is more than a run can have",
            probe_addrs.len()
        ))
    })?;
    let store = crate::kv::MemoryStore::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = probe_addrs
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let store = &store;
                scope.spawn(move || {
                    rendezvous(store, i as NodeId, num_nodes, config, addr, hostname)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RendezvousError::InvalidArgument(
                        "internal error: a node thread panicked".into(),
                    ))
                })
            })
            .collect()
    })
}

/// For a master that hosts the store itself (standalone runs): waits until every other
/// node has acknowledged the context, so the store is not shut down under a node that
/// has not read it yet. Returns the nodes that did not acknowledge in time.
pub fn wait_for_acks(kv: &dyn KvStore, ctx: &RunContext, timeout: Duration) -> Vec<NodeId> {
    let deadline = Instant::now() + timeout;
    let mut missing = Vec::new();
    for n in 1..ctx.num_nodes {
        if kv
            .get(&ack_key(&ctx.session_id, n), remaining(deadline))
            .is_err()
        {
            missing.push(n);
        }
    }
    missing
}
