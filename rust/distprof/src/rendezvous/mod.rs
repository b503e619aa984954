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
pub mod launcher;
pub mod session;
pub mod values;


use crate::config::Config;
use crate::context::{NodeId, NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use crate::topology::build_probe_graph;
use session::{ack_key, context_key, join_key, round_key};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use values::{decode, encode, Announcement, Envelope, Join, PROTOCOL_VERSION};

/// The master is always node 0: it is the process every launcher starts first and the
/// one that hosts XLA's coordination service and our TCP store.
pub const MASTER: NodeId = 0;

/// A waiting node wakes at least this often to look for a newer round (a restarted
/// master); the store wakes it at once when the awaited key is set.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);

/// While waiting, a node or the master logs where it stands this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// At most this much of the timeout is kept back by the master to tell the nodes why the
/// session failed.
const ABORT_MARGIN_MAX: Duration = Duration::from_secs(2);

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
        run_master(kv, num_nodes, config, me, deadline)?
    } else {
        run_node(kv, num_nodes, config, me, deadline)?
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

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The first round index with no announcement: the one the master opens.
fn first_free_round(kv: &dyn KvStore) -> Result<u64, KvError> {
    let mut r = 0;
    while kv.try_get(&round_key(r))?.is_some() {
        r += 1;
    }
    Ok(r)
}

fn run_master(
    kv: &dyn KvStore,
    num_nodes: u32,
    config: &Config,
    me: NodeInfo,
    deadline: Instant,
) -> Result<RunContext, RendezvousError> {
    let started = Instant::now();
    let round = first_free_round(kv)?;
    let session_id = session::new_session_id();
    let master_digest = digest::config_digest(config);
    let announcement = Announcement {
        version: PROTOCOL_VERSION,
        session_id: session_id.clone(),
        num_nodes,
        config_digest: master_digest.clone(),
        config: digest::shared_config_value(config),
    };
    kv.set(&round_key(round), &encode(&announcement))?;
    tracing::debug!("rendezvous: master opened round {round} as session {session_id}");

    let abort = |reason: String| {
        // Best effort: if the store is gone the nodes will time out instead.
        let _ = kv.set(
            &context_key(&session_id),
            &encode(&Envelope::Abort { reason }),
        );
    };

    // Stop waiting for joins a little before the nodes' own deadline so that the abort
    // naming the missing nodes reaches them before they give up on their own.
    let total = deadline.saturating_duration_since(started);
    let joins_deadline = deadline - (total / 10).min(ABORT_MARGIN_MAX);
    let mut nodes = vec![me];
    let mut nonces = vec![0u64];
    let mut next_progress = started + PROGRESS_EVERY;
    for n in 1..num_nodes {
        let key = join_key(&session_id, n);
        // In slices, to log progress while a late node is awaited.
        let got = loop {
            let slice = remaining(joins_deadline).min(next_progress.saturating_duration_since(Instant::now()));
            match kv.get(&key, slice) {
                Err(KvError::Timeout { .. }) if !remaining(joins_deadline).is_zero() => {
                    if Instant::now() >= next_progress {
                        next_progress += PROGRESS_EVERY;
                        tracing::info!(
                            "rendezvous: session {session_id}: {n} of {num_nodes} nodes joined after {} s; waiting for node {n} for up to {} s more",
                            started.elapsed().as_secs(),
                            remaining(joins_deadline).as_secs()
                        );
                    }
                }
                other => break other,
            }
        };
        let text = match got {
            Ok(t) => t,
            Err(KvError::Timeout { .. }) => {
                // Name every absent node, not just the first.
                let mut missing = vec![n];
                for m in n + 1..num_nodes {
                    if kv.try_get(&join_key(&session_id, m))?.is_none() {
                        missing.push(m);
                    }
                }
                let err = RendezvousError::NodesMissing {
                    session_id: session_id.clone(),
                    missing,
                    num_nodes,
                    waited_ms: started.elapsed().as_millis() as u64,
                };
                abort(err.to_string());
                return Err(err);
            }
            Err(e) => return Err(e.into()),
        };
        let join: Join = match decode(&key, &text) {
            Ok(j) => j,
            Err(e) => {
                abort(format!("node {n}'s join value is malformed: {e}"));
                return Err(e.into());
            }
        };
        if join.node != n || join.session_id != session_id {
            let e = KvError::Malformed {
                key,
                reason: format!(
                    "carries node {} of session {}, expected node {n} of session {session_id}",
                    join.node, join.session_id
                ),
            };
            abort(e.to_string());
            return Err(e.into());
        }
        if let Some(problem) = join.problem {
            let reason = format!("node {n} cannot take part: {problem}");
            abort(reason.clone());
            return Err(RendezvousError::Aborted { session_id, reason });
        }
        if join.config_digest != master_digest || join.num_nodes != num_nodes {
            // The node checks this itself and reports a `problem`; a node that does not
            // (an older version) is still caught here.
            let reason = format!(
                "node {n} has config digest {} and {} nodes, the master {master_digest} and {num_nodes}",
                join.config_digest, join.num_nodes
            );
            abort(reason.clone());
            return Err(RendezvousError::Aborted { session_id, reason });
        }
        nodes.push(NodeInfo {
            node: n,
            probe_addr: join.probe_addr,
            hostname: join.hostname,
        });
        nonces.push(join.nonce);
    }

    let context = RunContext {
        session_id: session_id.clone(),
        session_token: session::new_session_token(),
        num_nodes,
        reference_node: config.reference_node,
        nodes,
        out_edges: build_probe_graph(num_nodes, config.probe_out_degree, config.graph_seed),
        config_digest: master_digest,
    };
    kv.set(
        &context_key(&session_id),
        &encode(&Envelope::Ok {
            nonces,
            context: context.clone(),
        }),
    )?;
    Ok(context)
}

/// What a non-master node knows about the round it is looking at.
struct Joined {
    session_id: String,
    nonce: u64,
}

fn run_node(
    kv: &dyn KvStore,
    num_nodes: u32,
    config: &Config,
    me: NodeInfo,
    deadline: Instant,
) -> Result<RunContext, RendezvousError> {
    let started = Instant::now();
    let node = me.node;
    let my_digest = digest::config_digest(config);
    // Start at the newest round; older ones belong to earlier runs.
    let mut round = first_free_round(kv)?.saturating_sub(1);
    let mut joined: Option<Joined> = None;
    let mut stale_rounds_skipped = 0u32;
    let mut poll = POLL_MIN;
    let mut next_progress = started + PROGRESS_EVERY;
    loop {
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            let what = match &joined {
                Some(j) => format!("joined session {}, waiting for the master's run context", j.session_id),
                None => format!("waiting for the master (node 0) to open a session (round {round})"),
            };
            tracing::info!(
                "rendezvous: node {node}: {what}; {} s so far, up to {} s more",
                started.elapsed().as_secs(),
                remaining(deadline).as_secs()
            );
        }
        if remaining(deadline).is_zero() {
            let waited_ms = started.elapsed().as_millis() as u64;
            return Err(match joined {
                Some(j) => RendezvousError::NoContext {
                    node,
                    session_id: j.session_id,
                    waited_ms,
                },
                None => RendezvousError::NoSession {
                    node,
                    waited_ms,
                    detail: if stale_rounds_skipped > 0 {
                        format!(
                            " (round {round} awaited; {stale_rounds_skipped} earlier round(s) in the store belong to finished runs, \
                             or another process joined as node {node}: are two processes using the same rank?)"
                        )
                    } else {
                        String::new()
                    },
                },
            });
        }
        let slice = poll.min(remaining(deadline));
        poll = (poll * 2).min(POLL_MAX);

        let key = round_key(round);
        let text = match kv.get(&key, slice) {
            Ok(t) => t,
            Err(KvError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let ann: Announcement = decode(&key, &text)?;
        if ann.version != PROTOCOL_VERSION || !session::is_valid_session_id(&ann.session_id) {
            return Err(KvError::Malformed {
                key,
                reason: format!("announcement of version {} with session id `{}`; expected version {PROTOCOL_VERSION} and 32 hex digits", ann.version, ann.session_id),
            }
            .into());
        }
        // A newer round means a newer master: everything about this one is stale.
        if kv.try_get(&round_key(round + 1))?.is_some() {
            round += 1;
            joined = None;
            stale_rounds_skipped += 1;
            poll = POLL_MIN;
            continue;
        }
        let ctx_key = context_key(&ann.session_id);
        if joined
            .as_ref()
            .map(|j| j.session_id != ann.session_id)
            .unwrap_or(true)
        {
            // Not joined yet: a round already closed without us is a finished earlier run.
            if kv.try_get(&ctx_key)?.is_some() {
                round += 1;
                stale_rounds_skipped += 1;
                poll = POLL_MIN;
                continue;
            }
            let problem = node_problem(node, num_nodes, config, &my_digest, &ann);
            let nonce = session::random_u64();
            let join = Join {
                session_id: ann.session_id.clone(),
                node,
                nonce,
                num_nodes,
                probe_addr: me.probe_addr,
                hostname: me.hostname.clone(),
                config_digest: my_digest.clone(),
                problem: problem.as_ref().map(|p| p.to_string()),
            };
            if node < ann.num_nodes {
                kv.set(&join_key(&ann.session_id, node), &encode(&join))?;
            }
            if let Some(p) = problem {
                return Err(p);
            }
            joined = Some(Joined {
                session_id: ann.session_id.clone(),
                nonce,
            });
        }
        let text = match kv.get(&ctx_key, slice) {
            Ok(t) => t,
            Err(KvError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let my_nonce = joined.as_ref().map(|j| j.nonce).unwrap_or(0);
        match decode::<Envelope>(&ctx_key, &text)? {
            Envelope::Abort { reason } => {
                return Err(RendezvousError::Aborted {
                    session_id: ann.session_id,
                    reason,
                })
            }
            Envelope::Ok { nonces, context } => {
                if nonces.get(node as usize) != Some(&my_nonce) {
                    // Another incarnation of this node joined that round: stale.
                    round += 1;
                    joined = None;
                    stale_rounds_skipped += 1;
                    poll = POLL_MIN;
                    continue;
                }
                check_context(&ctx_key, &context, &ann, &me)?;
                if let Err(e) = kv.set(&ack_key(&context.session_id, node), "1") {
                    tracing::warn!(
                        "rendezvous: node {node} could not acknowledge the context: {e}"
                    );
                }
                return Ok(context);
            }
        }
    }
}

/// Why this node cannot join the announced session, if it cannot.
fn node_problem(
    node: NodeId,
    num_nodes: u32,
    config: &Config,
    my_digest: &str,
    ann: &Announcement,
) -> Option<RendezvousError> {
    if ann.num_nodes != num_nodes {
        return Some(RendezvousError::NodeCountMismatch {
            node,
            ours: num_nodes,
            master: ann.num_nodes,
        });
    }
    if ann.config_digest != my_digest {
        let mut fields = digest::config_diff(&ann.config, config);
        if fields.is_empty() {
            fields.push("(no field differs; the master's digest function differs: mixed distprof versions?)".into());
        }
        return Some(RendezvousError::ConfigMismatch {
            node,
            master_digest: ann.config_digest.clone(),
            node_digest: my_digest.to_string(),
            fields,
        });
    }
    None
}

/// The context must be internally consistent and list this node as it joined.
pub(crate) fn check_context(
    key: &str,
    ctx: &RunContext,
    ann: &Announcement,
    me: &NodeInfo,
) -> Result<(), KvError> {
    let n = ctx.num_nodes as usize;
    let bad = |reason: String| KvError::Malformed {
        key: key.to_string(),
        reason,
    };
    if ctx.session_id != ann.session_id || ctx.num_nodes != ann.num_nodes {
        return Err(bad(format!(
            "context of session {} for {} nodes, announced {} for {}",
            ctx.session_id, ctx.num_nodes, ann.session_id, ann.num_nodes
        )));
    }
    if ctx.nodes.len() != n || ctx.out_edges.len() != n {
        return Err(bad(format!(
            "{} node entries and {} edge lists for {n} nodes",
            ctx.nodes.len(),
            ctx.out_edges.len()
        )));
    }
    if let Some((i, info)) = ctx
        .nodes
        .iter()
        .enumerate()
        .find(|(i, info)| info.node as usize != *i)
    {
        return Err(bad(format!("entry {i} describes node {}", info.node)));
    }
    if ctx.out_edges.iter().flatten().any(|&d| d as usize >= n)
        || ctx.reference_node as usize >= n
        || ctx.session_token == 0
    {
        return Err(bad(
            "edge, reference node or session token out of range".into()
        ));
    }
    if ctx.nodes[me.node as usize] != *me {
        return Err(bad(format!(
            "lists this node as {:?}, it joined as {:?}",
            ctx.nodes[me.node as usize], me
        )));
    }
    Ok(())
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
