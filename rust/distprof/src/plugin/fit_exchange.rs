//! Every node's model is the network's: nodes share their final edge fits of each window
//! through the host's key-value store (the one the rendezvous used), and each node solves
//! the whole network from everyone's fits (`estimate::shared`).
//!
//! One thread per node and trace (`distprof-fits-<node>`), so that no store call ever
//! delays the probe engine. It receives the node's own final fits of each window (after the
//! drift fit over the neighbouring windows), sets them under
//! `distprof/s/<session>/fits/<trace>/<window>/<node>` and polls with `TryGet` for the
//! other nodes' fits of every window it still misses. A window whose fits are all in is
//! solved at once; one still incomplete [`GIVE_UP_WINDOWS`] window lengths later, or when the
//! trace's exchange ends ([`FINAL_WAIT`] after the node's last window), is solved from the
//! fits that did arrive (the nodes they reach get a segment, the others none, as offline).
//!
//! The store has no Delete: a trace leaves one value per node and window (a few kB; see
//! docs/estimation.md for the sizes). Keys live under the run's session, so another run
//! never reads them. The trace index (0, 1, ... per process) tells a process's traces apart;
//! every process of a job counts its traces alike.

use super::lease::KvLease;
use crate::clock::thread_cpu_s;
use crate::context::{NodeId, RunContext};
use crate::estimate::WindowFits;
use crate::estimate::{solve, EstimatorSettings, NodeWindowFits, WindowEstimate};
use crate::kv::KvStore;
use crate::model::ClockSegment;
use crate::rendezvous::session::KEY_PREFIX;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the missing fits of pending windows are asked for.
const POLL: Duration = Duration::from_millis(200);
/// After the node's own last window, how long it waits for the others' last fits before
/// it solves with what it has: nodes stop within the profiler's stop of each other. Every
/// fit that arrives restarts the wait (a busy host delivers late, not never), up to
/// [`FINAL_WAIT_MAX`] in all.
pub const FINAL_WAIT: Duration = Duration::from_secs(10);
pub const FINAL_WAIT_MAX: Duration = Duration::from_secs(60);
/// A window still missing fits this many window lengths (at least [`FINAL_WAIT`]) after
/// the node's own fits of it is solved with the fits in: a node that hangs must not hold
/// back every later window.
const GIVE_UP_WINDOWS: u32 = 3;

/// The store key of `node`'s fits of `window` in trace `trace` of session `session_id`.
pub fn fits_key(session_id: &str, trace: u32, window: u64, node: NodeId) -> String {
    format!("{KEY_PREFIX}/s/{session_id}/fits/{trace}/{window}/{node}")
}

/// The store key of `node`'s last window in trace `trace`, set when it stops probing: the
/// others then stop waiting for its fits of later windows (nodes start and stop a few ms
/// apart, so one closes a window more than another).
pub fn end_key(session_id: &str, trace: u32, node: NodeId) -> String {
    format!("{KEY_PREFIX}/s/{session_id}/fits/{trace}/end/{node}")
}

/// What the exchange has produced so far, read by the export hook.
#[derive(Debug, Default, Clone)]
pub struct ExchangeState {
    /// This node's network-wide segments, one per solved window it is reachable in.
    pub segments: Vec<ClockSegment>,
    /// Windows solved (complete or given up on).
    pub windows_solved: u64,
    /// Windows solved from the fits of every node that closed them.
    pub windows_complete: u64,
    /// Windows solved without some node's fits, and whose.
    pub incomplete: Vec<(u64, Vec<NodeId>)>,
    pub stats: ExchangeStats,
    /// The exchange ended (the model file is written).
    pub finished: bool,
}

/// The cost of sharing, for `distprof bench overhead` and the plane.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ExchangeStats {
    pub values_set: u64,
    pub bytes_set: u64,
    pub gets: u64,
    pub bytes_got: u64,
    /// Thread CPU time of the exchange (encoding, store calls, network solves), ms.
    pub cpu_ms: f64,
}

/// One node's side of the exchange for one trace.
pub struct Exchange {
    pub node: NodeId,
    pub ctx: Arc<RunContext>,
    pub trace: u32,
    /// None for a one-node run (nothing to share) or when the node holds no store.
    pub kv: Option<Arc<KvLease>>,
    pub settings: EstimatorSettings,
    /// The probe window's length.
    pub window: Duration,
    pub state: Arc<Mutex<ExchangeState>>,
}

impl Exchange {
    /// Runs until `own` is closed and the last windows are solved; returns the node's
    /// segments. `own` carries the node's final fits, window by window.
    pub fn run(self, own: Receiver<WindowFits>) -> Vec<ClockSegment> {
        let n = self.ctx.num_nodes;
        // Pending windows: the parts in so far, by node.
        let mut pending: BTreeMap<u64, BTreeMap<NodeId, NodeWindowFits>> = BTreeMap::new();
        // When the node's own fits of each pending window arrived.
        let mut since: BTreeMap<u64, Instant> = BTreeMap::new();
        // Never sooner than the wait at the end: fits come late when a node is busy.
        let give_up = (self.window * GIVE_UP_WINDOWS).max(FINAL_WAIT);
        let mut last_own: Option<u64> = None;
        let mut final_deadline: Option<Instant> = None;
        let mut final_end: Option<Instant> = None;
        // Nodes that stopped, with their last window (None: it closed none).
        let mut ended: BTreeMap<NodeId, Option<u64>> = BTreeMap::new();
        loop {
            let wait = final_deadline.map_or(POLL, |d| d.saturating_duration_since(Instant::now()).min(POLL));
            match own.recv_timeout(wait) {
                Ok(fits) => {
                    let started = thread_cpu_s();
                    let part = fits.share(self.node);
                    self.publish(&part);
                    last_own = Some(part.window_id);
                    since.insert(part.window_id, Instant::now());
                    pending.entry(part.window_id).or_default().insert(self.node, part);
                    self.add_cpu(started);
                    // Drain whatever else is queued before polling.
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    if final_deadline.is_none() {
                        final_deadline = Some(Instant::now() + FINAL_WAIT);
                        final_end = Some(Instant::now() + FINAL_WAIT_MAX);
                        self.publish_end(last_own);
                        ended.insert(self.node, last_own);
                    }
                }
            }
            let started = thread_cpu_s();
            if self.poll(&mut pending, &mut ended) {
                if let (Some(d), Some(end)) = (final_deadline.as_mut(), final_end) {
                    *d = (Instant::now() + FINAL_WAIT).min(end);
                }
            }
            let done_by_time = final_deadline.is_some_and(|d| Instant::now() >= d);
            // Node `o` owes window `w` no fits once it ended before it.
            let owes = |o: NodeId, w: u64| !matches!(ended.get(&o), Some(last) if last.is_none_or(|l| l < w));
            let ready: Vec<(u64, bool)> = pending
                .iter()
                .filter_map(|(&w, parts)| {
                    let complete = (0..n).all(|o| parts.contains_key(&o) || !owes(o, w));
                    // Once probing stopped, the end's own deadline rules.
                    let late = done_by_time
                        || (final_deadline.is_none() && since.get(&w).is_some_and(|t| t.elapsed() >= give_up));
                    (complete || late).then_some((w, complete))
                })
                .collect();
            for (w, complete) in ready {
                since.remove(&w);
                if let Some(parts) = pending.remove(&w) {
                    self.solve_window(w, &parts, complete);
                }
            }
            self.add_cpu(started);
            if final_deadline.is_some() && pending.is_empty() {
                break;
            }
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.finished = true;
        s.segments.clone()
    }

    fn add_cpu(&self, started: f64) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stats.cpu_ms += (thread_cpu_s() - started) * 1e3;
    }

    fn publish(&self, part: &NodeWindowFits) {
        let Some(kv) = self.kv.as_ref().filter(|_| self.ctx.num_nodes > 1) else { return };
        let Ok(text) = serde_json::to_string(part) else { return };
        let key = fits_key(&self.ctx.session_id, self.trace, part.window_id, self.node);
        match kv.set(&key, &text) {
            Ok(()) => {
                let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
                s.stats.values_set += 1;
                s.stats.bytes_set += text.len() as u64;
            }
            Err(e) => tracing::warn!(node = self.node, "distprof: cannot share the fits of window {}: {e}", part.window_id),
        }
    }

    fn publish_end(&self, last: Option<u64>) {
        let Some(kv) = self.kv.as_ref().filter(|_| self.ctx.num_nodes > 1) else { return };
        let text = last.map_or("none".to_string(), |l| l.to_string());
        if let Err(e) = kv.set(&end_key(&self.ctx.session_id, self.trace, self.node), &text) {
            tracing::warn!(node = self.node, "distprof: cannot tell the others that probing ended: {e}");
        }
    }

    /// Asks the store for every part still missing, and whether its node ended; true when
    /// something new came in.
    fn poll(&self, pending: &mut BTreeMap<u64, BTreeMap<NodeId, NodeWindowFits>>, ended: &mut BTreeMap<NodeId, Option<u64>>) -> bool {
        let Some(kv) = &self.kv else { return false };
        let mut news = false;
        let (mut gets, mut bytes) = (0, 0);
        let mut asked_end = std::collections::BTreeSet::new();
        for (&w, parts) in pending.iter_mut() {
            let missing: Vec<NodeId> = (0..self.ctx.num_nodes).filter(|o| !parts.contains_key(o)).collect();
            for other in missing {
                if ended.get(&other).is_some_and(|last| last.is_none_or(|l| l < w)) {
                    continue;
                }
                if !ended.contains_key(&other) && asked_end.insert(other) {
                    gets += 1;
                    if let Ok(Some(text)) = kv.try_get(&end_key(&self.ctx.session_id, self.trace, other)) {
                        let last = text.parse::<u64>().ok();
                        ended.insert(other, last);
                        news = true;
                        if last.is_none_or(|l| l < w) {
                            continue;
                        }
                    }
                }
                let key = fits_key(&self.ctx.session_id, self.trace, w, other);
                gets += 1;
                match kv.try_get(&key) {
                    Ok(Some(text)) => {
                        bytes += text.len() as u64;
                        match serde_json::from_str::<NodeWindowFits>(&text) {
                            Ok(p) if p.node == other && p.window_id == w && p.is_sane() => {
                                parts.insert(other, p);
                                news = true;
                            }
                            _ => tracing::warn!(node = self.node, "distprof: store value `{key}` is not a window's edge fits; left out"),
                        }
                    }
                    Ok(None) => {}
                    // A store that fails now is retried at the next poll; the window is
                    // solved with what is in when its time is up.
                    Err(e) => {
                        tracing::debug!(node = self.node, "distprof: fit exchange: {e}");
                        break;
                    }
                }
            }
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.stats.gets += gets;
        s.stats.bytes_got += bytes;
        news
    }

    fn solve_window(&self, window: u64, parts: &BTreeMap<NodeId, NodeWindowFits>, complete: bool) {
        let refs: Vec<&NodeWindowFits> = parts.values().collect();
        let missing: Vec<NodeId> = (0..self.ctx.num_nodes).filter(|o| !parts.contains_key(o)).collect();
        if !complete {
            tracing::info!(node = self.node, "distprof: window {window} solved without the fits of node(s) {missing:?}");
        }
        let estimate: Option<WindowEstimate> = WindowFits::from_shared(&refs, self.ctx.num_nodes, self.ctx.reference_node)
            .map(|fits| solve(&fits, &self.settings));
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.windows_solved += 1;
        s.windows_complete += complete as u64;
        if !complete {
            s.incomplete.push((window, missing));
        }
        if let Some(seg) = estimate.and_then(|e| e.segments.get(self.node as usize).copied().flatten()) {
            let at = s.segments.partition_point(|x| x.window_id < seg.window_id);
            s.segments.insert(at, seg);
        }
    }
}
