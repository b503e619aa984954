//! A non-master node's side of the rendezvous: find the master's current session round,
//! join it if this node's configuration and node count match, and wait (bounded) for the
//! run context, checked against what this node joined with.

use super::session::{ack_key, context_key, join_key, round_key};
use super::values::{decode, encode, Announcement, Envelope, Join, PROTOCOL_VERSION};
use super::{digest, session, first_free_round, remaining, RendezvousError, PROGRESS_EVERY};
use crate::config::Config;
use crate::context::{NodeId, NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use std::time::{Duration, Instant};

/// A waiting node wakes at least this often to look for a newer round (a restarted
/// master); the store wakes it at once when the awaited key is set.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);

/// What a non-master node knows about the round it is looking at.
struct Joined {
    session_id: String,
    nonce: u64,
}

pub(super) fn run(
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
pub fn check_context(
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
