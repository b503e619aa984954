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

/// Longest a probe may take from its first packet to its follow-up before it counts as
/// lost; capped by the liveness timeout so that a lost probe is decided before its edge
/// is declared down.
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the node keeps answering after its own last probe, so that peers stopping a
/// few milliseconds later still complete theirs.
const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// Upper bound on one sleep: housekeeping (timeouts, liveness) runs at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// How long to wait after a wake-up by a datagram before reading, so that the rest of its
/// burst is served in the same wake-up (kernel and hardware stamps only).
const BURST_LINGER: Duration = Duration::from_micros(500);
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
    /// Address of every node of the run (indexed by node id), for answers.
    pub addrs: Vec<SocketAddr>,
    /// `expected_probers[n]` is true when node n probes this node.
    pub expected_probers: Vec<bool>,
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
    /// The parameters of `node` in an agreed run: its peers and their addresses from the
    /// context, timing and purity from the configuration.
    pub fn for_node(
        ctx: &RunContext,
        node: NodeId,
        config: &Config,
        clock: VirtualClock,
        purity: PurityFn,
    ) -> EngineParams {
        let peers = &ctx.out_edges[node as usize];
        EngineParams {
            node,
            session_token: ctx.session_token,
            out_edges: peers.iter().map(|&p| (p, ctx.nodes[p as usize].probe_addr)).collect(),
            addrs: ctx.nodes.iter().map(|n| n.probe_addr).collect(),
            expected_probers: (0..ctx.num_nodes)
                .map(|i| ctx.out_edges[i as usize].contains(&node))
                .collect(),
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
    /// Per prober, the newest seq whose answer has expired: a forward packet at or below
    /// it with no live answer is a replay (or later than any use), never answered.
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
}

impl Engine {
    pub fn new(p: EngineParams, sock: StampedSocket) -> Engine {
        let now = Instant::now();
        let n_nodes = p.addrs.len();
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
        let probe_timeout = MAX_PROBE_TIMEOUT.min(p.down_after / 2).max(Duration::from_millis(10));
        Engine {
            p,
            sock,
            edges,
            answers: HashMap::new(),
            expired_seq: vec![None; n_nodes],
            first_seq,
            tx_owner: HashMap::new(),
            acc,
            probe_timeout,
            stats: EngineStats::default(),
            tx_buf: Vec::new(),
            to_answer: Vec::new(),
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
        let mut buf = [0u8; 2048];
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) && now < stop_at {
                stop_at = now;
                end_at = now + DRAIN_GRACE;
            }
            if now >= end_at {
                break;
            }
            if now < stop_at {
                let due: Vec<usize> = (0..self.edges.len()).filter(|&e| self.edges[e].next_probe <= now).collect();
                if !due.is_empty() {
                    self.send_probes(&due);
                }
                for e in due {
                    let edge = &mut self.edges[e];
                    edge.next_probe += self.p.cadence;
                    if edge.next_probe + MAX_CATCH_UP < Instant::now() {
                        edge.next_probe = Instant::now() + self.p.cadence;
                    }
                }
            }
            self.receive_all(&mut buf)?;
            self.answer_batch();
            self.collect_tx_stamps()?;
            self.expire(Instant::now(), Instant::now() < stop_at);
            if Instant::now() >= next_window {
                let w = self.acc.close(self.local_now_ns());
                on_window(w)?;
                self.stats.windows += 1;
                next_window += self.p.window;
            }
            let mut deadline = next_window.min(end_at).min(Instant::now() + MAX_SLEEP);
            if Instant::now() < stop_at {
                for e in &self.edges {
                    deadline = deadline.min(e.next_probe);
                }
            }
            let now = Instant::now();
            if deadline > now && self.sock.wait(deadline - now)? && self.sock.mode() != StampMode::User {
                // Woken by a datagram: the rest of its burst (the second packet of a pair,
                // the follow-up, other peers' probes of the same tick) is a few hundred us
                // behind. Kernel stamps do not care when we read, so linger and serve the
                // whole burst in one wake-up. User-space stamps do care: no linger there.
                sleep_until((Instant::now() + BURST_LINGER).min(deadline));
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
        let w = self.acc.close(self.local_now_ns());
        on_window(w)?;
        self.stats.windows += 1;
        self.stats.per_edge_sent = self.edges.iter().map(|e| (e.peer, e.sent)).collect();
        Ok(self.stats)
    }

    fn send(&mut self, kind: PacketKind, dst: NodeId, seq: u32, stamps_ns: [i64; 2], to: SocketAddr) -> Option<u32> {
        let pkt = Packet { kind, session_token: self.p.session_token, src: self.p.node, dst, seq, stamps_ns };
        match self.sock.send_to(&pkt.encode(), to) {
            Ok(id) => {
                self.stats.packets_sent += 1;
                Some(id)
            }
            Err(e) => {
                // A full send buffer or an unreachable peer: this probe fails, the next runs.
                tracing::debug!(node = self.p.node, dst, "send to {to} failed: {e}");
                None
            }
        }
    }

    /// Sends one probe on each edge in `due`: every first packet, one pair gap, every
    /// second packet. One wake-up and one gap sleep per tick, whatever the degree.
    fn send_probes(&mut self, due: &[usize]) {
        let mut firsts = Vec::with_capacity(due.len());
        for &e in due {
            let (peer, addr, seq) = {
                let edge = &mut self.edges[e];
                let seq = edge.next_seq;
                edge.next_seq = edge.next_seq.wrapping_add(1);
                edge.sent += 1;
                (edge.peer, edge.addr, seq)
            };
            self.acc.sent(e);
            self.stats.probes_sent += 1;
            let id0 = self.send(PacketKind::Fwd1, peer, seq, [NO_STAMP; 2], addr);
            firsts.push((e, peer, addr, seq, id0, Instant::now()));
        }
        // The gap runs from the end of the last first send, so the kernel stamps of every
        // pair are never closer than `pair_gap` (a first stamp is taken inside its send).
        sleep_until(Instant::now() + self.p.pair_gap);
        for (e, peer, addr, seq, id0, started) in firsts {
            let id1 = self.send(PacketKind::Fwd2, peer, seq, [NO_STAMP; 2], addr);
            let rec = ProbeRecord {
                src: self.p.node,
                dst: peer,
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
                continue;
            };
            self.tx_owner.insert(id0, TxOwner::Fwd { edge: e, seq, idx: 0 });
            self.tx_owner.insert(id1, TxOwner::Fwd { edge: e, seq, idx: 1 });
            self.edges[e].inflight.insert(seq, Pending { started, rec, have: 0, tx_ids: [id0, id1] });
        }
    }

    fn receive_all(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        while let Some(r) = self.sock.try_recv(buf)? {
            self.stats.packets_received += 1;
            let pkt = match Packet::decode(&buf[..r.len]) {
                Ok(p) => p,
                Err(reason) => {
                    self.drop_packet(reason.name());
                    continue;
                }
            };
            if pkt.session_token != self.p.session_token {
                self.drop_packet("wrong_token");
                continue;
            }
            if pkt.dst != self.p.node {
                self.drop_packet("wrong_dst");
                continue;
            }
            let rx_ns = self.p.clock.apply(r.rx_real_ns);
            match pkt.kind {
                PacketKind::Fwd1 | PacketKind::Fwd2 => self.on_forward(pkt, rx_ns),
                _ => self.on_reverse(pkt, rx_ns),
            }
        }
        Ok(())
    }

    fn drop_packet(&mut self, reason: &str) {
        self.stats.dropped += 1;
        self.acc.dropped(reason);
    }

    /// This node is the probed peer.
    fn on_forward(&mut self, pkt: Packet, rx_ns: i64) {
        let prober = pkt.src;
        if !self.p.expected_probers.get(prober as usize).copied().unwrap_or(false) {
            self.drop_packet("unexpected_prober");
            return;
        }
        let key = (prober, pkt.seq);
        let stale = |f: u32| f.wrapping_sub(pkt.seq) < STALE_SEQ_SPAN;
        if !self.answers.contains_key(&key) && self.expired_seq[prober as usize].is_some_and(stale) {
            self.drop_packet("stale_seq");
            return;
        }
        let idx = if pkt.kind == PacketKind::Fwd1 { 0 } else { 1 };
        // Either packet may arrive first: the network may reorder a pair.
        let a = self.answers.entry(key).or_insert_with(|| Answer {
            started: Instant::now(),
            fwd_rx: [None; 2],
            rev_tx: [None; 2],
            tx_ids: [u32::MAX; 2],
            replied: false,
        });
        if a.fwd_rx[idx].is_some() {
            self.drop_packet("duplicate");
            return;
        }
        a.fwd_rx[idx] = Some(rx_ns);
        if let [Some(rx0), Some(rx1)] = a.fwd_rx {
            a.replied = true;
            self.to_answer.push((prober, pkt.seq, [rx0, rx1]));
        }
    }

    /// Answers every forward pair completed in this pass: every Rev1, one pair gap,
    /// every Rev2 (like `send_probes`). Answering a little later costs no accuracy: all
    /// stamps are taken by the kernel, and the round trip excludes the turnaround.
    fn answer_batch(&mut self) {
        if self.to_answer.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.to_answer);
        let mut firsts = Vec::with_capacity(batch.len());
        for &(prober, seq, fwd_rx) in &batch {
            let to = self.p.addrs[prober as usize];
            firsts.push(self.send(PacketKind::Rev1, prober, seq, fwd_rx, to));
        }
        sleep_until(Instant::now() + self.p.pair_gap);
        for (&(prober, seq, _), id0) in batch.iter().zip(firsts) {
            let to = self.p.addrs[prober as usize];
            let id1 = self.send(PacketKind::Rev2, prober, seq, [NO_STAMP; 2], to);
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
        self.to_answer = batch;
        self.to_answer.clear();
    }

    /// This node is the prober: an answer to one of its probes.
    fn on_reverse(&mut self, pkt: Packet, rx_ns: i64) {
        let Some(e) = self.edges.iter().position(|e| e.peer == pkt.src) else {
            self.drop_packet("unexpected_peer");
            return;
        };
        let sent = self.edges[e].next_seq.wrapping_sub(self.first_seq);
        let Some(p) = self.edges[e].inflight.get_mut(&pkt.seq) else {
            // A seq this node sent and is done with: late (already given up), duplicated
            // after completion, or replayed. Any other: forged, or for an earlier run.
            let ours = pkt.seq.wrapping_sub(self.first_seq) < sent;
            self.drop_packet(if ours { "stale_seq" } else { "unexpected" });
            return;
        };
        let bit = match pkt.kind {
            PacketKind::Rev1 => 2,
            PacketKind::Rev2 => 3,
            _ => 4,
        };
        if p.have & (1 << bit) != 0 {
            self.drop_packet("duplicate");
            return;
        }
        match pkt.kind {
            PacketKind::Rev1 => {
                p.rec.fwd_rx_ns = pkt.stamps_ns;
                p.rec.rev_rx_ns[0] = rx_ns;
                p.have |= 1 << 2;
            }
            PacketKind::Rev2 => {
                p.rec.rev_rx_ns[1] = rx_ns;
                p.have |= 1 << 3;
            }
            _ => {
                p.rec.rev_tx_ns = pkt.stamps_ns;
                p.have |= 1 << 4;
            }
        }
        let edge = &mut self.edges[e];
        edge.last_reply = Instant::now();
        if !edge.up {
            edge.up = true;
            tracing::info!(node = self.p.node, peer = edge.peer, "edge up again");
            self.acc.set_up(e, true);
        }
        self.maybe_complete(e, pkt.seq);
    }

    fn maybe_complete(&mut self, e: usize, seq: u32) {
        let done = matches!(self.edges[e].inflight.get(&seq), Some(p) if p.have == HAVE_ALL);
        if !done {
            return;
        }
        let p = self.edges[e].inflight.remove(&seq).expect("checked above");
        let stamps_sane = p.rec.fwd_rx_ns.iter().chain(p.rec.rev_tx_ns.iter()).all(|&s| s != NO_STAMP);
        if !stamps_sane {
            self.acc.lost(e);
            self.stats.probes_lost += 1;
            return;
        }
        let pure = (self.p.purity)(&p.rec, &self.p.purity_params);
        self.acc.complete(e, p.rec, pure);
        self.stats.probes_complete += 1;
    }

    fn collect_tx_stamps(&mut self) -> std::io::Result<()> {
        let mut stamps = std::mem::take(&mut self.tx_buf);
        stamps.clear();
        self.sock.drain_tx_stamps(&mut stamps);
        for &(id, real_ns) in &stamps {
            let local_ns = self.p.clock.apply(real_ns);
            match self.tx_owner.remove(&id) {
                Some(TxOwner::Fwd { edge, seq, idx }) => {
                    if let Some(p) = self.edges[edge].inflight.get_mut(&seq) {
                        p.rec.fwd_tx_ns[idx] = local_ns;
                        p.have |= 1 << idx;
                        self.maybe_complete(edge, seq);
                    }
                }
                Some(TxOwner::Rev { prober, seq, idx }) => {
                    let Some(a) = self.answers.get_mut(&(prober, seq)) else { continue };
                    a.rev_tx[idx] = Some(local_ns);
                    if let [Some(t0), Some(t1)] = a.rev_tx {
                        // The entry stays until it expires, so that a late duplicate of
                        // this probe is recognised as one.
                        let to = self.p.addrs[prober as usize];
                        self.send(PacketKind::RevFollowUp, prober, seq, [t0, t1], to);
                    }
                }
                // Stamps of follow-ups are not needed; ids of no known send should not occur.
                None => {}
            }
        }
        self.tx_buf = stamps;
        Ok(())
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
        self.answers.retain(|&(prober, seq), a| {
            let keep = now.duration_since(a.started) < timeout;
            if !keep {
                if a.replied {
                    tx_owner.remove(&a.tx_ids[0]);
                    tx_owner.remove(&a.tx_ids[1]);
                }
                // Newest wins; one far from the last (a forged seq, either way) is
                // replaced by the next real one instead of hiding it for good.
                if let Some(f) = expired_seq.get_mut(prober as usize) {
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
