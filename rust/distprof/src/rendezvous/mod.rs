//! Rendezvous: all nodes agree, for this run only, on who probes whom at which address.
//!
//! Each node has bound its probe socket already. The master (node 0) opens a session
//! with a small announcement (see [`session`] for the key layout and how stale runs are
//! recognized): session id and token, node count, configuration digest and the graph
//! parameters. Every node then publishes its own join (address, hostname, nonce) under
//! its own key, computes its own out- and in-edges from the graph parameters
//! ([`crate::topology::ProbeGraph`]), reads the joins of just those peers and echoes
//! each one's nonce, and waits for its peers' echoes of its own ([`meet`]). What a node
//! reads, writes and computes is O(k) for out-degree k, whatever the node count; nobody
//! reads every join, and there is no value every node reads but the announcement. Nothing
//! is assigned centrally (ports are whatever each node bound), so nothing overflows at
//! large N.
//!
//! Every wait is bounded by `config.rendezvous_timeout_ms` from the call's start. A peer
//! that does not take part costs a node only that peer's edges: at the deadline the node
//! goes on with the peers it met and names the others in one log line. Every failure is
//! a [`RendezvousError`] that says what was missing and what to check.

pub mod address;
pub mod digest;
mod follower;
pub mod launcher;
mod master;
mod meet;
pub mod session;
pub mod values;


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
        "rendezvous: node {node} joined session {session_id}, but none of its peers {missing:?} joined and confirmed \
         within {waited_ms} ms; start them with the same rendezvous address and node count (their logs say why they \
         did not join), or raise `rendezvous_timeout_ms`"
    )]
    NoPeers {
        node: NodeId,
        session_id: String,
        missing: Vec<NodeId>,
        waited_ms: u64,
    },
    #[error(
        "rendezvous: node {node}: peer {peer} read another process's join as node {node} in session {session_id}: \
         two processes were started with rank {node}; give every process its own rank"
    )]
    DuplicateNode {
        node: NodeId,
        peer: NodeId,
        session_id: String,
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
}

impl From<KvError> for RendezvousError {
    fn from(e: KvError) -> Self {
        RendezvousError::Kv(e)
    }
}

/// Runs the rendezvous for `node` of `num_nodes`, whose probe socket is bound at
/// `probe_addr`. Returns this node's run context: the session every node agreed on and
/// this node's own peers.
pub fn rendezvous(
    kv: &dyn KvStore,
    node: NodeId,
    num_nodes: u32,
    config: &Config,
    probe_addr: SocketAddr,
    hostname: &str,
) -> Result<RunContext, RendezvousError> {
    check_arguments(node, num_nodes, config)?;
    let started = Instant::now();
    let deadline = started + Duration::from_millis(config.rendezvous_timeout_ms);
    let me = NodeInfo {
        node,
        probe_addr,
        hostname: hostname.to_string(),
    };
    let ctx = if node == MASTER {
        let ann = master::open_round(kv, num_nodes, config)?;
        let nonce = session::random_u64();
        follower::publish_join(kv, &ann, &me, nonce, num_nodes, &digest::config_digest(config), None)?;
        meet::meet(kv, &ann, &me, nonce, started, deadline, None)?
            .expect("the master watches no newer round")
    } else {
        follower::run(kv, num_nodes, config, &me, started, deadline)?
    };
    if node != MASTER {
        // For a master that hosts the store (standalone runs): it stops serving only once
        // every node is done with it.
        if let Err(e) = kv.set(&ack_key(&ctx.session_id, node), "1") {
            tracing::warn!("rendezvous: node {node} could not acknowledge the end of its rendezvous: {e}");
        }
    }
    tracing::info!(
        "rendezvous: node {node}/{num_nodes} agreed on session {} with {} peer(s) in {} ms",
        ctx.session_id,
        ctx.nodes.len().saturating_sub(1),
        started.elapsed().as_millis()
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
/// `probe_addrs[i]`. Returns each node's context in node order, or the first node's
/// error.
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
/// node has finished its rendezvous, so the store is not shut down under a node that
/// still needs it. Returns the nodes that did not finish in time. This reads one key per
/// node, O(N): it belongs to the standalone tool whose rank 0 serves the store, never to
/// a node inside a job (XLA's store outlives the rendezvous; nothing waits for acks there).
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
