//! A non-master node's part of the rendezvous: find the master's current session round,
//! join it if this node's configuration and node count match, and meet its peers
//! ([`super::meet`]), moving on should a newer round appear meanwhile.

use super::session::{join_key, round_key};
use super::values::{decode, encode, Announcement, Join, PROTOCOL_VERSION};
use super::{digest, first_free_round, meet, remaining, session, RendezvousError, PROGRESS_EVERY};
use crate::config::Config;
use crate::context::{NodeId, NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use std::time::{Duration, Instant};

/// A node waiting for an announcement wakes at least this often to look for a newer
/// round (a restarted master); the store wakes it at once when the awaited key is set.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);

pub(super) fn run(
    kv: &dyn KvStore,
    num_nodes: u32,
    config: &Config,
    me: &NodeInfo,
    started: Instant,
    deadline: Instant,
) -> Result<RunContext, RendezvousError> {
    let node = me.node;
    let my_digest = digest::config_digest(config);
    // Start at the newest round; older ones belong to earlier runs.
    let mut round = first_free_round(kv)?.saturating_sub(1);
    let mut stale_rounds_skipped = 0u32;
    let mut poll = POLL_MIN;
    let mut next_progress = started + PROGRESS_EVERY;
    loop {
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            tracing::info!(
                "rendezvous: node {node}: waiting for the master (node 0) to open a session (round {round}); \
                 {} s so far, up to {} s more",
                started.elapsed().as_secs(),
                remaining(deadline).as_secs()
            );
        }
        if remaining(deadline).is_zero() {
            return Err(RendezvousError::NoSession {
                node,
                waited_ms: started.elapsed().as_millis() as u64,
                detail: if stale_rounds_skipped > 0 {
                    format!(
                        " (round {round} awaited; {stale_rounds_skipped} earlier round(s) in the store belong to finished runs, \
                         or another process joined as node {node}: are two processes using the same rank?)"
                    )
                } else {
                    String::new()
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
        check_announcement(&key, &ann)?;
        // A newer round means a newer master: everything about this one is stale. So is a
        // round an earlier incarnation of this node joined (a finished run, or this process
        // restarted): its peers may have met that incarnation already.
        let newer = kv.try_get(&round_key(round + 1))?.is_some();
        if newer || (node < ann.num_nodes && kv.try_get(&join_key(&ann.session_id, node))?.is_some()) {
            round += 1;
            stale_rounds_skipped += 1;
            poll = POLL_MIN;
            continue;
        }
        let problem = node_problem(node, num_nodes, config, &my_digest, &ann);
        let nonce = session::random_u64();
        if node < ann.num_nodes {
            publish_join(kv, &ann, me, nonce, num_nodes, &my_digest, problem.as_ref().map(|p| p.to_string()))?;
        }
        if let Some(p) = problem {
            return Err(p);
        }
        match meet::meet(kv, &ann, me, nonce, started, deadline, Some(round))? {
            Some(ctx) => return Ok(ctx),
            None => {
                round += 1;
                stale_rounds_skipped += 1;
                poll = POLL_MIN;
            }
        }
    }
}

/// An announcement this version cannot use is an error naming its key.
fn check_announcement(key: &str, ann: &Announcement) -> Result<(), KvError> {
    let bad = |reason: String| KvError::Malformed { key: key.to_string(), reason };
    if ann.version != PROTOCOL_VERSION || !session::is_valid_session_id(&ann.session_id) {
        return Err(bad(format!(
            "announcement of version {} with session id `{}`; expected version {PROTOCOL_VERSION} and 32 hex digits \
             (every node must run the same distprof version)",
            ann.version, ann.session_id
        )));
    }
    if ann.session_token == 0 || ann.num_nodes == 0 || ann.reference_node >= ann.num_nodes {
        return Err(bad(format!(
            "session token {}, {} nodes, reference node {}: a token is non-zero and the reference one of the nodes",
            ann.session_token, ann.num_nodes, ann.reference_node
        )));
    }
    Ok(())
}

/// Publishes this node's join of the announced session; `num_nodes` is this node's own
/// count, which its peers compare.
pub(super) fn publish_join(
    kv: &dyn KvStore,
    ann: &Announcement,
    me: &NodeInfo,
    nonce: u64,
    num_nodes: u32,
    my_digest: &str,
    problem: Option<String>,
) -> Result<(), KvError> {
    let join = Join {
        session_id: ann.session_id.clone(),
        node: me.node,
        nonce,
        num_nodes,
        probe_addr: me.probe_addr,
        hostname: me.hostname.clone(),
        config_digest: my_digest.to_string(),
        problem,
    };
    kv.set(&join_key(&ann.session_id, me.node), &encode(&join))
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
