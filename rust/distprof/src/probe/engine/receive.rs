//! What the engine does with what its socket receives: each datagram checked and
//! counted, forward packets answered (this node as the probed peer), reverse packets
//! completing this node's own probes, and transmit stamps matched to the packets they
//! belong to (follow-ups carry them to the peer).

use super::{Answer, Engine, TxOwner, HAVE_ALL, STALE_SEQ_SPAN};
use crate::wire::{Packet, PacketKind, NO_STAMP};
use std::time::Instant;

impl Engine {
    /// Serves every queued datagram; returns how many there were.
    pub(super) fn receive_all(&mut self) -> std::io::Result<usize> {
        let mut total = 0;
        loop {
            let n = self.sock.recv_batch()?;
            total += n;
            for i in 0..n {
                let Some((decoded, r)) = self.sock.received(i).map(|(bytes, r)| (Packet::decode(bytes), r)) else {
                    continue;
                };
                if r.unstamped {
                    // The NIC did not stamp it: no stamp of another source stands in, so
                    // the probe it belongs to is lost (the socket counts these per window).
                    self.stats.packets_received += 1;
                    continue;
                }
                self.on_datagram(decoded, r.rx_real_ns);
            }
            // A short batch emptied the queue: what arrives later wakes the next poll.
            if n < crate::timestamp::RECV_BATCH {
                return Ok(total);
            }
        }
    }

    pub(super) fn on_datagram(&mut self, decoded: Result<Packet, crate::wire::Reject>, rx_real_ns: i64) {
        {
            self.stats.packets_received += 1;
            let pkt = match decoded {
                Ok(p) => p,
                Err(reason) => {
                    self.drop_packet(reason.name());
                    return;
                }
            };
            if pkt.session_token != self.p.session_token {
                self.drop_packet("wrong_token");
                return;
            }
            if pkt.dst != self.p.node {
                self.drop_packet("wrong_dst");
                return;
            }
            let rx_ns = self.p.clock.apply(rx_real_ns);
            match pkt.kind {
                PacketKind::Fwd1 | PacketKind::Fwd2 => self.on_forward(pkt, rx_ns),
                _ => self.on_reverse(pkt, rx_ns),
            }
        }
    }

    pub(super) fn drop_packet(&mut self, reason: &str) {
        self.stats.dropped += 1;
        self.acc.dropped(reason);
    }

    /// This node is the probed peer.
    pub(super) fn on_forward(&mut self, pkt: Packet, rx_ns: i64) {
        let prober = pkt.src;
        let Some(prober_index) = self.prober_index(prober) else {
            self.drop_packet("unexpected_prober");
            return;
        };
        let key = (prober, pkt.seq);
        let stale = |f: u32| f.wrapping_sub(pkt.seq) < STALE_SEQ_SPAN;
        if !self.answers.contains_key(&key) && self.expired_seq[prober_index].is_some_and(stale) {
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
            void: false,
        });
        if a.void {
            return;
        }
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

    /// This node is the prober: an answer to one of its probes.
    pub(super) fn on_reverse(&mut self, pkt: Packet, rx_ns: i64) {
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

    pub(super) fn maybe_complete(&mut self, e: usize, seq: u32) {
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

    pub(super) fn collect_tx_stamps(&mut self) -> std::io::Result<()> {
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
                        self.follow_ups.push((prober, seq, [t0, t1]));
                    }
                }
                // Stamps of follow-ups are not needed; ids of no known send should not occur.
                None => {}
            }
        }
        self.tx_buf = stamps;
        if !self.follow_ups.is_empty() {
            let follow_ups = std::mem::take(&mut self.follow_ups);
            for &(prober, seq, t) in &follow_ups {
                if let Some(addr) = self.prober_addr(prober) {
                    self.queue_packet(PacketKind::RevFollowUp, prober, seq, t, addr);
                }
            }
            self.send_packets();
            self.follow_ups = follow_ups;
            self.follow_ups.clear();
        }
        Ok(())
    }
}
