//! The master's side of the rendezvous (node 0): open a fresh session round, collect every
//! node's join, build the probe graph and publish the whole run context, written last.

use super::session::{context_key, join_key, round_key};
use super::values::{decode, encode, Announcement, Envelope, Join, PROTOCOL_VERSION};
use super::{digest, first_free_round, remaining, session, RendezvousError, PROGRESS_EVERY};
use crate::config::Config;
use crate::context::{NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use crate::topology::build_probe_graph;
use std::time::{Duration, Instant};

/// At most this much of the timeout is kept back by the master to tell the nodes why the
/// session failed.
const ABORT_MARGIN_MAX: Duration = Duration::from_secs(2);

pub(super) fn run(
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
