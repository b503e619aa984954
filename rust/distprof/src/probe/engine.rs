//! The probe engine of one node: scheduler, responder and window keeper on one thread.

use super::purity::{PurityFn, PurityParams};
use crate::clock::VirtualClock;
use crate::config::Config;
use crate::context::RunContext;
use crate::context::NodeId;
use crate::record::ProbeRecord;
use crate::timestamp::{precise_timer_slack, sleep_until, StampMode, StampedSocket};
use crate::window::{ClosedWindow, WindowAccumulator};
use crate::wire::{Packet, PacketKind, NO_STAMP, PACKET_LEN};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod receive;

/// Longest a probe may take from its first packet to its follow-up before it counts as
/// lost; capped by the liveness timeout so that a lost probe is decided before its edge
/// is declared down.
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the node keeps answering after its own last probe, so that peers stopping a
/// few milliseconds later still complete theirs.
const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// Upper bound on one sleep: housekeeping (timeouts, liveness) runs at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Datagrams in one pass beyond which the node waits on its socket rather than sleeping
/// until its next pass: a tick at the default out-degree brings about 40.
const FLOOD_PER_PASS: usize = 4 * crate::timestamp::RECV_BATCH;
/// Span over which the datagram rate is judged when leaving the flooded state.
const FLOOD_WINDOW: Duration = Duration::from_secs(1);
/// A stall up to this long (a busy machine) is caught up, one probe per edge per loop
/// pass, so that the rate stays the configured one; after a longer one (a stopped process)
/// the schedule is reset instead of bursting out the backlog.
const MAX_CATCH_UP: Duration = Duration::from_secs(1);
/// How far below the newest expired seq of a prober a forward packet counts as stale (a
/// replay): 2^20 probes, over 17 min at the fastest cadence. Farther is taken as new, so
/// that one forged packet far ahead cannot silence the prober's real probes for good.
const STALE_SEQ_SPAN: u32 = 1 << 20;
/// UDP (8) + IPv4 (20) header bytes on top of every probe datagram, for bandwidth figures.
pub const UDP_IPV4_OVERHEAD_BYTES: u64 = 28;

/// What the engine needs; built from a `RunContext` by `standalone`.
#[derive(Debug, Clone)]
pub struct EngineParams {
    pub node: NodeId,
    pub session_token: u64,
    /// Peers this node probes, with the address to reach each.
    pub out_edges: Vec<(NodeId, SocketAddr)>,
    /// Peers that probe this node, ascending by id, with the address answers go to: O(k),
    /// whatever the node count.
    pub probers: Vec<(NodeId, SocketAddr)>,
    pub cadence: Duration,
    pub pair_gap: Duration,
    pub window: Duration,
    /// Silence after which an out-edge is marked down.
    pub down_after: Duration,
    pub clock: VirtualClock,
    pub purity: PurityFn,
    pub purity_params: PurityParams,
}

impl EngineParams {
    /// The parameters of the context's node in an agreed run: its peers and their
    /// addresses from the context (a peer without an address is left out: the context
    /// checks keep that from happening), timing and purity from the configuration.
    pub fn for_node(
        ctx: &RunContext,
        config: &Config,
        clock: VirtualClock,
        purity: PurityFn,
    ) -> EngineParams {
        let with_addr = |peers: &[NodeId]| -> Vec<(NodeId, SocketAddr)> {
            peers.iter().filter_map(|&p| Some((p, ctx.info(p)?.probe_addr))).collect()
        };
        let mut probers = with_addr(&ctx.in_edges);
        probers.sort_unstable_by_key(|p| p.0);
        EngineParams {
            node: ctx.node,
            session_token: ctx.session_token,
            out_edges: with_addr(&ctx.out_edges),
            probers,
            cadence: Duration::from_micros(config.probe_cadence_us),
            pair_gap: Duration::from_micros(config.packet_spacing_us),
            window: Duration::from_secs_f64(config.probe_window_s),
            down_after: Duration::from_millis(config.handshake_timeout_ms),
            clock,
            purity,
            purity_params: PurityParams::from_config(config),
        }
    }
}

/// Totals over the whole run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineStats {
    pub windows: u64,
    pub probes_sent: u64,
    pub probes_complete: u64,
    pub probes_lost: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub dropped: u64,
    /// Dropped datagrams per reason over the run (the JSONL has them per window).
    #[serde(default)]
    pub dropped_by_reason: std::collections::BTreeMap<String, u64>,
    /// Per-window pair gaps are in the records; this is the measured probe count per edge.
    pub per_edge_sent: Vec<(NodeId, u64)>,
}

struct Pending {
    started: Instant,
    rec: ProbeRecord,
    /// Bits: 0, 1 = forward transmit stamps (own error queue); 2 = Rev1 seen (peer's
    /// forward receive stamps and our rev_rx0); 3 = Rev2 seen (rev_rx1); 4 = follow-up seen
    /// (peer's reverse transmit stamps).
    have: u8,
    tx_ids: [u32; 2],
}
const HAVE_ALL: u8 = 0b1_1111;

struct OutEdge {
    peer: NodeId,
    addr: SocketAddr,
    next_probe: Instant,
    next_seq: u32,
    inflight: HashMap<u32, Pending>,
    last_reply: Instant,
    up: bool,
    sent: u64,
}

/// A probe this node is answering.
struct Answer {
    started: Instant,
    fwd_rx: [Option<i64>; 2],
    rev_tx: [Option<i64>; 2],
    tx_ids: [u32; 2],
    replied: bool,
    /// Begun with stamps of a source this node no longer uses (see `stamp_source_switched`):
    /// never answered or followed up.
    void: bool,
}

#[derive(Clone, Copy)]
enum TxOwner {
    Fwd { edge: usize, seq: u32, idx: usize },
    Rev { prober: NodeId, seq: u32, idx: usize },
}

pub struct Engine {
    p: EngineParams,
    sock: StampedSocket,
    edges: Vec<OutEdge>,
    answers: HashMap<(NodeId, u32), Answer>,
    /// Per prober (in the order of `p.probers`), the newest seq whose answer has expired:
    /// a forward packet at or below it with no live answer is a replay (or later than any
    /// use), never answered.
    expired_seq: Vec<Option<u32>>,
    /// The first seq this node sent on every edge: [first_seq, next_seq) were its own.
    first_seq: u32,
    tx_owner: HashMap<u32, TxOwner>,
    acc: WindowAccumulator,
    probe_timeout: Duration,
    stats: EngineStats,
    tx_buf: Vec<(u32, i64)>,
    /// Forward pairs complete in this pass, answered together by `answer_batch`.
    to_answer: Vec<(NodeId, u32, [i64; 2])>,
    /// Follow-ups due from the transmit stamps of this pass, sent together.
    follow_ups: Vec<(NodeId, u32, [i64; 2])>,
    /// Scratch of `send_packets`: encoded datagrams and the stamp id of each.
    out_pkts: Vec<([u8; PACKET_LEN], SocketAddr)>,
    out_ids: Vec<Option<u32>>,
    /// Scratch of a tick: the edges due, and each one's first send.
    due: Vec<usize>,
    firsts: Vec<(usize, u32, Option<u32>, Instant)>,
    first_ids: Vec<Option<u32>>,
    answer_ids: Vec<Option<u32>>,
    /// When `expire` next runs: its scans cost more than the rest of a pass, and losses
    /// and liveness need no finer grain than a tenth of the probe timeout.
    next_expire: Instant,
    /// Longest time between two passes, so that answers and follow-ups leave in good time
    /// when the node's own ticks are rare or over: the cadence, and at most an eighth of
    /// the probe timeout (peers give up on a probe after it) or `MAX_SLEEP`.
    serve_every: Duration,
    /// Whether the node is flooded (see `FLOOD_PER_PASS`), and the datagrams counted
    /// since the current judging window began.
    flooded: bool,
    flood_count: usize,
    flood_window_end: Instant,
}

impl Engine {
    /// Index of `node` in `p.probers`, if it probes this node.
    fn prober_index(&self, node: NodeId) -> Option<usize> {
        self.p.probers.binary_search_by_key(&node, |p| p.0).ok()
    }

    /// Where answers to prober `node` go.
    fn prober_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.prober_index(node).map(|i| self.p.probers[i].1)
    }

    pub fn new(p: EngineParams, sock: StampedSocket) -> Engine {
        let now = Instant::now();
        // Sequence numbers start at the wall clock's milliseconds, so that a node restarted
        // within the same run continues above every seq it used before (at most one probe
        // per edge per ms, the cadence's minimum): its peers, which drop old seqs as
        // replays, and the estimator, which keeps one record per seq, tell the two runs'
        // probes apart. Like any u32 counter it wraps, every 49.7 days.
        let first_seq = (crate::clock::realtime_ns() / 1_000_000) as u32;
        // All edges share one phase: their probes leave in one batch per tick (see
        // `send_probes`), which costs one wake-up instead of one per edge.
        let edges = p
            .out_edges
            .iter()
            .map(|&(peer, addr)| OutEdge {
                peer,
                addr,
                next_probe: now,
                next_seq: first_seq,
                inflight: HashMap::new(),
                last_reply: now,
                up: true,
                sent: 0,
            })
            .collect();
        let peers: Vec<NodeId> = p.out_edges.iter().map(|e| e.0).collect();
        let acc = WindowAccumulator::new(p.node, &peers, p.clock.apply(crate::clock::realtime_ns()));
        let p_cadence = p.cadence;
        let n_probers = p.probers.len();
        let probe_timeout = MAX_PROBE_TIMEOUT.min(p.down_after / 2).max(Duration::from_millis(10));
        Engine {
            p,
            sock,
            edges,
            answers: HashMap::new(),
            expired_seq: vec![None; n_probers],
            first_seq,
            tx_owner: HashMap::new(),
            acc,
            probe_timeout,
            stats: EngineStats::default(),
            tx_buf: Vec::new(),
            to_answer: Vec::new(),
            follow_ups: Vec::new(),
            out_pkts: Vec::new(),
            out_ids: Vec::new(),
            due: Vec::new(),
            firsts: Vec::new(),
            first_ids: Vec::new(),
            answer_ids: Vec::new(),
            next_expire: now,
            flooded: false,
            flood_count: 0,
            flood_window_end: now + FLOOD_WINDOW,
            serve_every: p_cadence.min(probe_timeout / 8).min(MAX_SLEEP),
        }
    }

    fn local_now_ns(&self) -> i64 {
        self.p.clock.apply(crate::clock::realtime_ns())
    }

    /// Probes until `stop_at` (or until `stop` is set), keeps answering for a short grace
    /// period, hands every closed window to `on_window` (which records it: a write error
    /// ends the run), and returns the totals. Every wait is bounded.
    pub fn run(
        mut self,
        stop_at: Instant,
        stop: &AtomicBool,
        on_window: &mut dyn FnMut(ClosedWindow) -> std::io::Result<()>,
    ) -> std::io::Result<EngineStats> {
        precise_timer_slack();
        let start = Instant::now();
        let mut next_window = start + self.p.window;
        let mut stop_at = stop_at;
        let mut end_at = stop_at + DRAIN_GRACE;
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) && now < stop_at {
                stop_at = now;
                end_at = now + DRAIN_GRACE;
            }
            if now >= end_at {
                break;
            }
            // The NIC clock mapping is refreshed before any stamp of this pass is converted.
            self.sock.maintain_clock();
            if let Some(why) = self.sock.take_switch() {
                self.stamp_source_switched(&why);
            }
            // Everything queued since the last pass first, so that its answers leave with
            // this pass's probes.
            let received = self.receive_all()?;
            let mut due = std::mem::take(&mut self.due);
            due.clear();
            if now < stop_at {
                due.extend((0..self.edges.len()).filter(|&e| self.edges[e].next_probe <= now));
            }
            self.send_pairs(&due);
            for &e in &due {
                let edge = &mut self.edges[e];
                edge.next_probe += self.p.cadence;
                if edge.next_probe + MAX_CATCH_UP < Instant::now() {
                    edge.next_probe = Instant::now() + self.p.cadence;
                }
            }
            self.due = due;
            self.collect_tx_stamps()?;
            let now = Instant::now();
            if now >= self.next_expire {
                self.expire(now, now < stop_at);
                self.next_expire = now + self.probe_timeout / 10;
            }
            if Instant::now() >= next_window {
                let mut w = self.acc.close(self.local_now_ns());
                w.nic_clock = self.sock.window_nic_clock();
                self.note_drops(&w);
                on_window(w)?;
                self.stats.windows += 1;
                next_window += self.p.window;
            }
            let now = Instant::now();
            let mut deadline = next_window.min(end_at).min(now + self.serve_every);
            if now < stop_at {
                for e in &self.edges {
                    deadline = deadline.min(e.next_probe);
                }
            }
            if deadline <= now {
                continue;
            }
            // Flooded: switched on at once, off only after a second at the normal rate.
            self.flood_count += received;
            if received >= FLOOD_PER_PASS {
                self.flooded = true;
            }
            if now >= self.flood_window_end {
                let per_s = self.flood_count as f64 / FLOOD_WINDOW.as_secs_f64();
                self.flooded = per_s * self.serve_every.as_secs_f64() >= FLOOD_PER_PASS as f64;
                self.flood_count = 0;
                self.flood_window_end = now + FLOOD_WINDOW;
            }
            if self.sock.mode() == StampMode::User || self.flooded {
                // User-space stamps are taken when a datagram is read: wake on arrival.
                // So under a flood (far more datagrams than the node's peers send), which
                // would otherwise fill the socket buffer between passes and crowd out the
                // genuine probes.
                self.sock.wait(deadline - now)?;
            } else {
                // Kernel and hardware stamps do not care when a datagram is read, so the
                // node sleeps through arrivals and serves them all at its own next pass
                // (its next tick at the latest): one wake-up per tick instead of several,
                // and a sender wakes nobody. Asleep in nanosleep rather than in poll,
                // the node is no waiter on its socket, so a peer's send does not wake it.
                sleep_until(deadline);
            }
        }
        // Probes still unanswered now will never be: count them in the last window.
        for e in 0..self.edges.len() {
            let n = self.edges[e].inflight.len();
            for _ in 0..n {
                self.acc.lost(e);
            }
            self.stats.probes_lost += n as u64;
            self.edges[e].inflight.clear();
        }
        let mut w = self.acc.close(self.local_now_ns());
        w.nic_clock = self.sock.window_nic_clock();
        self.note_drops(&w);
        on_window(w)?;
        self.stats.windows += 1;
        self.stats.per_edge_sent = self.edges.iter().map(|e| (e.peer, e.sent)).collect();
        Ok(self.stats)
    }

    /// Queues one packet of this node for the next `send_packets`.
    fn queue_packet(&mut self, kind: PacketKind, dst: NodeId, seq: u32, stamps_ns: [i64; 2], to: SocketAddr) {
        let pkt = Packet { kind, session_token: self.p.session_token, src: self.p.node, dst, seq, stamps_ns };
        self.out_pkts.push((pkt.encode(), to));
    }

    /// Sends the queued packets in one batch; leaves in `out_ids` the transmit-stamp id of
    /// each, `None` where the send failed.
    fn send_packets(&mut self) {
        self.out_ids.clear();
        self.sock.send_batch(&self.out_pkts, &mut self.out_ids);
        // A full send buffer or an unreachable peer fails that probe; the next runs.
        self.stats.packets_sent += self.out_ids.iter().filter(|id| id.is_some()).count() as u64;
        self.out_pkts.clear();
    }

    /// Sends one probe on each edge in `due` and answers every forward pair completed
    /// since the last call, in batches a pair gap apart: every `Fwd1`; every `Fwd2` with
    /// every `Rev1`; every `Rev2` (with no probes due: `Rev1`s, then `Rev2`s). Each pair's
    /// two packets sit at the same place of consecutive batches, so a pair's gap grows by
    /// the wake-up and one batch's length at most, whatever the degree. Answering a little
    /// later costs no accuracy: all stamps are taken by the kernel, and the round trip
    /// excludes the turnaround.
    fn send_pairs(&mut self, due: &[usize]) {
        let answers = std::mem::take(&mut self.to_answer);
        if due.is_empty() && answers.is_empty() {
            self.to_answer = answers;
            return;
        }
        let mut firsts = std::mem::take(&mut self.firsts);
        firsts.clear();
        for &e in due {
            let edge = &mut self.edges[e];
            let seq = edge.next_seq;
            edge.next_seq = edge.next_seq.wrapping_add(1);
            edge.sent += 1;
            self.acc.sent(e);
            self.stats.probes_sent += 1;
            firsts.push((e, seq, None, Instant::now()));
            self.queue_packet(PacketKind::Fwd1, self.edges[e].peer, seq, [NO_STAMP; 2], self.edges[e].addr);
        }
        let probes = !firsts.is_empty();
        let queue_rev = |engine: &mut Engine, kind: PacketKind| {
            for &(prober, seq, fwd_rx) in &answers {
                let stamps = if kind == PacketKind::Rev1 { fwd_rx } else { [NO_STAMP; 2] };
                if let Some(addr) = engine.prober_addr(prober) {
                    engine.queue_packet(kind, prober, seq, stamps, addr);
                }
            }
        };
        if !probes {
            queue_rev(self, PacketKind::Rev1);
        }
        self.send_packets();
        let mut first_ids = std::mem::take(&mut self.first_ids);
        first_ids.clear();
        first_ids.extend_from_slice(&self.out_ids);
        // The gap runs from the end of the last first send, so the kernel stamps of every
        // pair are never closer than `pair_gap` (a first stamp is taken inside its send).
        sleep_until(Instant::now() + self.p.pair_gap);
        for &(e, seq, ..) in &firsts {
            self.queue_packet(PacketKind::Fwd2, self.edges[e].peer, seq, [NO_STAMP; 2], self.edges[e].addr);
        }
        queue_rev(self, if probes { PacketKind::Rev1 } else { PacketKind::Rev2 });
        self.send_packets();
        let n = firsts.len();
        // Ids of the answers' Rev1 and Rev2, in `answer_ids` and `out_ids` from `n` on.
        let mut answer_ids = std::mem::take(&mut self.answer_ids);
        answer_ids.clear();
        if probes && !answers.is_empty() {
            answer_ids.extend_from_slice(&self.out_ids[n..]);
            first_ids.extend_from_slice(&self.out_ids[..n]);
            sleep_until(Instant::now() + self.p.pair_gap);
            queue_rev(self, PacketKind::Rev2);
            self.send_packets();
            // Probes: ids in first_ids[..n] (Fwd1) and first_ids[n..2n] (Fwd2).
            for (k, &(e, seq, _, started)) in firsts.iter().enumerate() {
                self.probe_sent(e, seq, started, first_ids[k], first_ids[n + k]);
            }
            for (k, &(prober, seq, _)) in answers.iter().enumerate() {
                self.answer_sent(prober, seq, answer_ids[k], self.out_ids[k]);
            }
        } else if probes {
            for (k, &(e, seq, _, started)) in firsts.iter().enumerate() {
                self.probe_sent(e, seq, started, first_ids[k], self.out_ids[k]);
            }
        } else {
            for (k, &(prober, seq, _)) in answers.iter().enumerate() {
                self.answer_sent(prober, seq, first_ids[k], self.out_ids[k]);
            }
        }
        self.firsts = firsts;
        self.first_ids = first_ids;
        self.answer_ids = answer_ids;
        self.to_answer = answers;
        self.to_answer.clear();
    }

    /// Bookkeeping of a probe whose two forward packets were sent (or failed: `None`).
    fn probe_sent(&mut self, e: usize, seq: u32, started: Instant, id0: Option<u32>, id1: Option<u32>) {
        let rec = ProbeRecord {
            src: self.p.node,
            dst: self.edges[e].peer,
            seq,
            fwd_tx_ns: [NO_STAMP; 2],
            fwd_rx_ns: [NO_STAMP; 2],
            rev_tx_ns: [NO_STAMP; 2],
            rev_rx_ns: [NO_STAMP; 2],
        };
        let (Some(id0), Some(id1)) = (id0, id1) else {
            // Counted as sent and lost at once: the probe never fully left.
            self.acc.lost(e);
            self.stats.probes_lost += 1;
            return;
        };
        self.tx_owner.insert(id0, TxOwner::Fwd { edge: e, seq, idx: 0 });
        self.tx_owner.insert(id1, TxOwner::Fwd { edge: e, seq, idx: 1 });
        self.edges[e].inflight.insert(seq, Pending { started, rec, have: 0, tx_ids: [id0, id1] });
    }

    /// Bookkeeping of an answer whose two reverse packets were sent (or failed: `None`).
    fn answer_sent(&mut self, prober: NodeId, seq: u32, id0: Option<u32>, id1: Option<u32>) {
        self.acc.answered(prober);
        let key = (prober, seq);
        if let (Some(id0), Some(id1), Some(a)) = (id0, id1, self.answers.get_mut(&key)) {
            a.tx_ids = [id0, id1];
            self.tx_owner.insert(id0, TxOwner::Rev { prober, seq, idx: 0 });
            self.tx_owner.insert(id1, TxOwner::Rev { prober, seq, idx: 1 });
        } else {
            self.answers.remove(&key);
        }
    }

    /// The socket left hardware stamps (the NIC clock failed): every probe and answer begun
    /// with hardware stamps is given up, so that no record holds stamps of both sources.
    fn stamp_source_switched(&mut self, why: &str) {
        let mut lost = 0;
        for e in 0..self.edges.len() {
            let n = self.edges[e].inflight.len();
            for _ in 0..n {
                self.acc.lost(e);
            }
            lost += n;
            self.edges[e].inflight.clear();
        }
        self.stats.probes_lost += lost as u64;
        for a in self.answers.values_mut() {
            a.void = true;
        }
        // No follow-up carries a stamp taken before the switch.
        self.tx_owner.clear();
        tracing::warn!(node = self.p.node, "{why}: {lost} probes in flight given up");
    }

    /// Adds a closed window's drops to the run's and logs a window that dropped many: a
    /// flood of foreign or malformed datagrams must show up in the log, not only in the JSONL.
    fn note_drops(&mut self, w: &crate::window::ClosedWindow) {
        super::drops::add_reasons(&mut self.stats.dropped_by_reason, &w.dropped);
        let counts = super::DropCounts::from_reasons(&w.dropped);
        if counts.total() > super::drops::DROP_LOG_THRESHOLD {
            tracing::warn!(
                node = self.p.node,
                window = w.window_id,
                "dropped {} datagrams in one window: {} foreign (another run or node), {} malformed, {} late or duplicate; by reason {:?}",
                counts.total(),
                counts.foreign,
                counts.malformed,
                counts.late_or_duplicate,
                w.dropped
            );
        }
    }

    /// Gives up on probes and answers older than the probe timeout, and marks silent
    /// edges down.
    /// Liveness is only judged while probing: after the last probe silence is expected.
    fn expire(&mut self, now: Instant, probing: bool) {
        let timeout = self.probe_timeout;
        for e in 0..self.edges.len() {
            let edge = &mut self.edges[e];
            let before = edge.inflight.len();
            let tx_owner = &mut self.tx_owner;
            edge.inflight.retain(|_, p| {
                let keep = now.duration_since(p.started) < timeout;
                if !keep {
                    tx_owner.remove(&p.tx_ids[0]);
                    tx_owner.remove(&p.tx_ids[1]);
                }
                keep
            });
            let lost = before - edge.inflight.len();
            for _ in 0..lost {
                self.acc.lost(e);
            }
            self.stats.probes_lost += lost as u64;
            let edge = &mut self.edges[e];
            if probing && edge.up && now.duration_since(edge.last_reply) >= self.p.down_after {
                edge.up = false;
                tracing::warn!(
                    node = self.p.node,
                    peer = edge.peer,
                    "no reply for {} ms: edge marked down, still probing",
                    self.p.down_after.as_millis()
                );
                self.acc.set_up(e, false);
            }
        }
        let tx_owner = &mut self.tx_owner;
        let expired_seq = &mut self.expired_seq;
        let probers = &self.p.probers;
        self.answers.retain(|&(prober, seq), a| {
            let keep = now.duration_since(a.started) < timeout;
            if !keep {
                if a.replied {
                    tx_owner.remove(&a.tx_ids[0]);
                    tx_owner.remove(&a.tx_ids[1]);
                }
                // Newest wins; one far from the last (a forged seq, either way) is
                // replaced by the next real one instead of hiding it for good.
                let i = probers.binary_search_by_key(&prober, |p| p.0).ok();
                if let Some(f) = i.and_then(|i| expired_seq.get_mut(i)) {
                    if f.is_none_or(|f| seq_at_or_before(f, seq) || f.wrapping_sub(seq) >= STALE_SEQ_SPAN) {
                        *f = Some(seq);
                    }
                }
            }
            keep
        });
    }
}

/// Whether `a` is `b` or comes before it, in the wrapping order of u32 sequence numbers.
fn seq_at_or_before(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

/// Bytes one probe puts on the wire: 5 datagrams with UDP/IPv4 headers.
pub const PROBE_WIRE_BYTES: u64 = 5 * (PACKET_LEN as u64 + UDP_IPV4_OVERHEAD_BYTES);

#[cfg(test)]
mod tests;
