//! Meeting one's peers, the part of the rendezvous every node runs (the master too): from
//! the announced graph parameters a node computes its own out- and in-edges, reads the
//! joins of just those peers, echoes each peer's nonce back, and waits for its peers'
//! echoes of its own nonce. A peer is met once both have happened; nothing here depends
//! on the node count, only on the out-degree.

use super::session::{echo_key, join_key, round_key};
use super::values::{decode, encode, Announcement, Echo, Join};
use super::{remaining, RendezvousError, PROGRESS_EVERY};
use crate::context::{NodeId, NodeInfo, RunContext};
use crate::kv::{KvError, KvStore};
use crate::topology::ProbeGraph;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A node blocks on one awaited key at a time, for this long at first, doubling while
/// nothing arrives: a set of that key wakes it at once, the others are picked up in turn
/// (every awaited key is needed anyway, so waiting on one that comes late costs nothing
/// unless its peer is dead). Long enough that 16,384 node threads on two cores, most of
/// them not scheduled within tens of milliseconds, do not time out and poll again for
/// nothing: at 20 ms a node made up to 3 times the store calls in `bench rendezvous`.
const SLICE_MIN: Duration = Duration::from_millis(100);
/// The longest single wait, which bounds how late a node notices a newer round.
const SLICE_MAX: Duration = Duration::from_secs(1);

/// What a node awaits from peer `peers[i]`.
#[derive(Clone, Copy)]
enum Awaited {
    Join(usize),
    Echo(usize),
}

struct Peer {
    id: NodeId,
    info: Option<NodeInfo>,
    echoed: bool,
    /// Why the peer cannot take part, once known.
    gone: Option<String>,
}

impl Peer {
    fn met(&self) -> bool {
        self.info.is_some() && self.echoed && self.gone.is_none()
    }
}

/// Meets this node's peers in the announced session. Returns `None` when `watch_round`
/// is given and round `watch_round + 1` appears meanwhile (a newer master: this round is
/// stale).
pub(super) fn meet(
    kv: &dyn KvStore,
    ann: &Announcement,
    me: &NodeInfo,
    nonce: u64,
    started: Instant,
    deadline: Instant,
    watch_round: Option<u64>,
) -> Result<Option<RunContext>, RendezvousError> {
    let node = me.node;
    let sid = &ann.session_id;
    let graph = ProbeGraph::new(ann.num_nodes, ann.graph.out_degree, ann.graph.seed);
    let (out_edges, in_edges) = (graph.out_edges(node), graph.in_edges(node));
    let mut ids: Vec<NodeId> = out_edges.iter().chain(&in_edges).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut peers: Vec<Peer> = ids.iter().map(|&id| Peer { id, info: None, echoed: false, gone: None }).collect();
    let mut queue: VecDeque<Awaited> = (0..peers.len()).map(Awaited::Join).chain((0..peers.len()).map(Awaited::Echo)).collect();
    let mut slice = SLICE_MIN;
    let mut next_progress = started + PROGRESS_EVERY;
    while let Some(awaited) = queue.pop_front() {
        let (i, key) = match awaited {
            Awaited::Join(i) => (i, join_key(sid, peers[i].id)),
            Awaited::Echo(i) => (i, echo_key(sid, peers[i].id, node)),
        };
        if peers[i].gone.is_some() {
            continue;
        }
        let past_deadline = remaining(deadline).is_zero();
        // Past the deadline every key still awaited gets one last look, without waiting.
        let got = if past_deadline { kv.try_get(&key)?.ok_or(KvError::Timeout { key: key.clone(), timeout_ms: 0 }) } else { kv.get(&key, slice.min(remaining(deadline))) };
        match got {
            Ok(text) => {
                slice = SLICE_MIN;
                let peer = &mut peers[i];
                match awaited {
                    Awaited::Join(_) => on_join(kv, ann, node, peer, &key, &text)?,
                    Awaited::Echo(_) => on_echo(ann, node, nonce, peer, &key, &text)?,
                }
            }
            Err(KvError::Timeout { .. }) => {
                if past_deadline {
                    continue;
                }
                queue.push_back(awaited);
                slice = (slice * 2).min(SLICE_MAX);
                if let Some(r) = watch_round {
                    if kv.try_get(&round_key(r + 1))?.is_some() {
                        tracing::info!("rendezvous: node {node}: round {} opened while session {sid} was met; moving on", r + 1);
                        return Ok(None);
                    }
                }
                if Instant::now() >= next_progress {
                    next_progress += PROGRESS_EVERY;
                    let waiting: Vec<NodeId> = peers.iter().filter(|p| p.gone.is_none() && !p.met()).map(|p| p.id).collect();
                    tracing::info!(
                        "rendezvous: node {node}: session {sid}: met {} of {} peers after {} s; waiting for {waiting:?} for up to {} s more",
                        peers.iter().filter(|p| p.met()).count(),
                        peers.len(),
                        started.elapsed().as_secs(),
                        remaining(deadline).as_secs()
                    );
                }
            }
            Err(e) => return Err(e.into()),
        }
    }

    let met: Vec<&Peer> = peers.iter().filter(|p| p.met()).collect();
    let absent: Vec<NodeId> = peers.iter().filter(|p| !p.met()).map(|p| p.id).collect();
    let waited_ms = started.elapsed().as_millis() as u64;
    if met.is_empty() && !peers.is_empty() {
        return Err(RendezvousError::NoPeers { node, session_id: sid.clone(), missing: absent, waited_ms });
    }
    if !absent.is_empty() {
        let silent: Vec<NodeId> = peers.iter().filter(|p| !p.met() && p.gone.is_none()).map(|p| p.id).collect();
        tracing::warn!(
            "rendezvous: node {node}: session {sid}: going on without peer(s) {absent:?} of {}: {silent:?} did not join \
             and confirm within {waited_ms} ms, the others could not take part (logged above); their edges are left out",
            peers.len()
        );
    }
    let is_met = |p: &NodeId| met.iter().any(|m| m.id == *p);
    let mut nodes: Vec<NodeInfo> = met.iter().filter_map(|p| p.info.clone()).chain([me.clone()]).collect();
    nodes.sort_by_key(|n| n.node);
    Ok(Some(RunContext {
        session_id: sid.clone(),
        session_token: ann.session_token,
        num_nodes: ann.num_nodes,
        reference_node: ann.reference_node,
        config_digest: ann.config_digest.clone(),
        graph: Some(ann.graph),
        node,
        out_edges: out_edges.into_iter().filter(is_met).collect(),
        in_edges: in_edges.into_iter().filter(is_met).collect(),
        nodes,
        absent_peers: absent,
    }))
}

/// A peer's join: checked, then echoed. A join that does not fit drops only that peer.
fn on_join(kv: &dyn KvStore, ann: &Announcement, node: NodeId, peer: &mut Peer, key: &str, text: &str) -> Result<(), KvError> {
    let p = peer.id;
    let join: Join = match decode(key, text) {
        Ok(j) => j,
        Err(e) => return Ok(drop_peer(node, peer, e.to_string())),
    };
    let why = if join.session_id != ann.session_id || join.node != p {
        Some(format!("its join `{key}` carries node {} of session {}", join.node, join.session_id))
    } else if let Some(problem) = &join.problem {
        Some(format!("it cannot take part: {problem}"))
    } else if join.num_nodes != ann.num_nodes || join.config_digest != ann.config_digest {
        // Such a node reports a `problem` itself; one that does not (another version) is
        // still caught here.
        Some(format!(
            "it has config digest {} and {} nodes, the session {} and {}",
            join.config_digest, join.num_nodes, ann.config_digest, ann.num_nodes
        ))
    } else {
        None
    };
    if let Some(why) = why {
        drop_peer(node, peer, why);
        return Ok(());
    }
    let echo = Echo { session_id: ann.session_id.clone(), from: node, to: p, nonce: join.nonce };
    kv.set(&echo_key(&ann.session_id, node, p), &encode(&echo))?;
    peer.info = Some(NodeInfo { node: p, probe_addr: join.probe_addr, hostname: join.hostname });
    Ok(())
}

/// A peer's echo of this node's nonce: the peer read this very join.
fn on_echo(ann: &Announcement, node: NodeId, nonce: u64, peer: &mut Peer, key: &str, text: &str) -> Result<(), RendezvousError> {
    let echo: Echo = match decode(key, text) {
        Ok(e) => e,
        Err(e) => return Ok(drop_peer(node, peer, e.to_string())),
    };
    if echo.session_id != ann.session_id || echo.from != peer.id || echo.to != node {
        drop_peer(node, peer, format!("its echo `{key}` is from node {} to node {} of session {}", echo.from, echo.to, echo.session_id));
        return Ok(());
    }
    if echo.nonce != nonce {
        return Err(RendezvousError::DuplicateNode { node, peer: peer.id, session_id: ann.session_id.clone() });
    }
    peer.echoed = true;
    Ok(())
}

fn drop_peer(node: NodeId, peer: &mut Peer, why: String) {
    tracing::warn!("rendezvous: node {node}: going on without peer {}: {why}", peer.id);
    peer.gone = Some(why);
}
