//! The engine's bookkeeping driven packet by packet, without its loop: what it answers,
//! what it drops and why, when a probe is complete, lost or pure, when an edge goes down
//! and comes back. (rust/distprof/tests/probe_engine.rs runs whole engines over UDP.)
use super::*;
use crate::config::TimestampMode;
use crate::estimate::purity::{gap_preserved, PurityTolerance};
use std::net::UdpSocket;

const TOKEN: u64 = 0x5eed;
/// Node 1's clock is 1 µs ahead of the real one.
const OFFSET_NS: i64 = 1_000;

/// The first seq of node 1's probes (the engine starts at the wall clock's milliseconds):
/// two below the wrap of u32, so that the tests cross it.
const FIRST_SEQ: u32 = u32::MAX - 1;

/// Node 1 of three: it probes node 0 and is probed by nodes 0 and 2.
fn engine() -> Engine {
    let sock = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), TimestampMode::User).unwrap();
    let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut e = Engine::new(
        EngineParams {
            node: 1,
            session_token: TOKEN,
            out_edges: vec![(0, nowhere)],
            probers: vec![(0, nowhere), (2, nowhere)],
            cadence: Duration::from_millis(40),
            pair_gap: Duration::from_micros(50),
            window: Duration::from_secs(1),
            down_after: Duration::from_millis(300),
            clock: VirtualClock { offset_ns: OFFSET_NS, ..VirtualClock::IDENTITY },
            purity: gap_preserved,
            purity_params: PurityTolerance { abs_ns: 1_000, rel: 0.0 },
        },
        sock,
    );
    e.first_seq = FIRST_SEQ;
    e.edges[0].next_seq = FIRST_SEQ;
    e
}

fn pkt(kind: PacketKind, src: NodeId, dst: NodeId, seq: u32, stamps_ns: [i64; 2]) -> Packet {
    Packet { kind, session_token: TOKEN, src, dst, seq, stamps_ns }
}

fn receive(e: &mut Engine, p: Packet, rx_real_ns: i64) {
    e.on_datagram(Ok(p), rx_real_ns);
}

fn dropped(w: &ClosedWindow) -> Vec<(&str, u64)> {
    w.dropped.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

#[test]
fn foreign_misaddressed_and_malformed_datagrams_are_dropped_by_reason() {
    let mut e = engine();
    e.on_datagram(Packet::decode(&[0u8; 3]), 0);
    receive(&mut e, Packet { session_token: TOKEN + 1, ..pkt(PacketKind::Fwd1, 0, 1, 1, [NO_STAMP; 2]) }, 0);
    receive(&mut e, pkt(PacketKind::Fwd1, 0, 2, 1, [NO_STAMP; 2]), 0);
    // Node 1 does not probe itself, so it expects no forward packet from node 1.
    receive(&mut e, pkt(PacketKind::Fwd1, 1, 1, 1, [NO_STAMP; 2]), 0);
    // Node 2 is probed by no one here: an answer from it is from no peer of ours.
    receive(&mut e, pkt(PacketKind::Rev1, 2, 1, 1, [NO_STAMP; 2]), 0);
    assert_eq!((e.stats.packets_received, e.stats.dropped), (5, 5));
    assert!(e.answers.is_empty() && e.to_answer.is_empty());
    let w = e.acc.close(0);
    assert_eq!(
        dropped(&w),
        [("unexpected_peer", 1), ("unexpected_prober", 1), ("wrong_dst", 1), ("wrong_length", 1), ("wrong_token", 1)]
    );
}

#[test]
fn a_forward_pair_in_either_order_is_answered_once_with_local_receive_stamps() {
    let mut e = engine();
    // The network reordered the pair: Fwd2 first.
    receive(&mut e, pkt(PacketKind::Fwd2, 0, 1, 7, [NO_STAMP; 2]), 2_000);
    assert!(e.to_answer.is_empty(), "half a pair is not answered");
    receive(&mut e, pkt(PacketKind::Fwd1, 0, 1, 7, [NO_STAMP; 2]), 5_000);
    assert_eq!(e.to_answer, [(0, 7, [5_000 + OFFSET_NS, 2_000 + OFFSET_NS])]);
    receive(&mut e, pkt(PacketKind::Fwd1, 0, 1, 7, [NO_STAMP; 2]), 6_000);
    assert_eq!(e.to_answer.len(), 1, "a duplicate is not answered again");
    // Node 2 probes node 1 too, with its own seqs.
    receive(&mut e, pkt(PacketKind::Fwd1, 2, 1, 7, [NO_STAMP; 2]), 7_000);
    receive(&mut e, pkt(PacketKind::Fwd2, 2, 1, 7, [NO_STAMP; 2]), 7_050);
    assert_eq!(e.to_answer[1], (2, 7, [7_000 + OFFSET_NS, 7_050 + OFFSET_NS]));
    assert_eq!(dropped(&e.acc.close(0)), [("duplicate", 1)]);
}

/// Sends probe `seq` on edge 0 as if both forward packets left at local 1,000 and 1,050 ns.
fn sent_probe(e: &mut Engine, seq: u32, started: Instant) {
    if seq_at_or_before(e.edges[0].next_seq, seq) {
        e.edges[0].next_seq = seq.wrapping_add(1);
    }
    e.probe_sent(0, seq, started, Some(seq.wrapping_mul(2)), Some(seq.wrapping_mul(2).wrapping_add(1)));
    let p = e.edges[0].inflight.get_mut(&seq).unwrap();
    p.rec.fwd_tx_ns = [1_000, 1_050];
    p.have |= 0b11;
}

/// The peer's answer: its receive stamps `fwd_rx`, reverse pair sent at `rev_tx`,
/// received here at real `rev_rx`.
fn answer(e: &mut Engine, seq: u32, fwd_rx: [i64; 2], rev_tx: [i64; 2], rev_rx: [i64; 2]) {
    receive(e, pkt(PacketKind::Rev1, 0, 1, seq, fwd_rx), rev_rx[0]);
    receive(e, pkt(PacketKind::Rev2, 0, 1, seq, [NO_STAMP; 2]), rev_rx[1]);
    receive(e, pkt(PacketKind::RevFollowUp, 0, 1, seq, rev_tx), 0);
}

#[test]
fn a_probe_completes_with_its_eight_stamps_and_purity_judges_its_gaps() {
    let mut e = engine();
    let seq = e.first_seq;
    sent_probe(&mut e, seq, Instant::now());
    answer(&mut e, seq, [5_000, 5_050], [7_000, 7_050], [9_000, 9_050]);
    // A second probe whose reverse pair arrived 5 µs apart though sent 50 ns apart.
    sent_probe(&mut e, seq.wrapping_add(1), Instant::now());
    answer(&mut e, seq.wrapping_add(1), [5_000, 5_050], [7_000, 7_050], [9_000, 14_000]);
    // A duplicate Rev1 of a completed probe is late: its seq is ours and done.
    receive(&mut e, pkt(PacketKind::Rev1, 0, 1, seq, [5_000, 5_050]), 0);
    assert_eq!((e.stats.probes_complete, e.stats.probes_lost), (2, 0));
    let w = e.acc.close(0);
    assert_eq!((w.edges[0].complete, w.edges[0].pure), (2, 1));
    let r = w.records[0];
    assert_eq!((r.src, r.dst, r.seq), (1, 0, seq));
    assert_eq!(r.fwd_tx_ns, [1_000, 1_050]);
    assert_eq!(r.fwd_rx_ns, [5_000, 5_050]);
    assert_eq!(r.rev_tx_ns, [7_000, 7_050]);
    assert_eq!(r.rev_rx_ns, [9_000 + OFFSET_NS, 9_050 + OFFSET_NS]);
    assert_eq!(dropped(&w), [("stale_seq", 1)]);
}

#[test]
fn answers_to_seqs_never_sent_are_unexpected_and_a_probe_without_peer_stamps_is_lost() {
    let mut e = engine();
    let seq = e.first_seq;
    receive(&mut e, pkt(PacketKind::Rev1, 0, 1, seq.wrapping_add(100), [1, 2]), 0);
    sent_probe(&mut e, seq, Instant::now());
    receive(&mut e, pkt(PacketKind::Rev1, 0, 1, seq, [5_000, 5_050]), 9_000);
    receive(&mut e, pkt(PacketKind::Rev1, 0, 1, seq, [5_000, 5_050]), 9_001);
    receive(&mut e, pkt(PacketKind::Rev2, 0, 1, seq, [NO_STAMP; 2]), 9_050);
    // The peer had no transmit stamps for its answer: the probe cannot be used.
    receive(&mut e, pkt(PacketKind::RevFollowUp, 0, 1, seq, [NO_STAMP; 2]), 0);
    assert_eq!((e.stats.probes_complete, e.stats.probes_lost), (0, 1));
    let w = e.acc.close(0);
    assert_eq!((w.edges[0].complete, w.edges[0].lost), (0, 1));
    assert_eq!(dropped(&w), [("duplicate", 1), ("unexpected", 1)]);
}

#[test]
fn a_probe_past_its_timeout_is_lost_and_a_silent_edge_goes_down_then_up() {
    let mut e = engine();
    let now = Instant::now();
    let seq = e.first_seq;
    sent_probe(&mut e, seq, now - Duration::from_secs(2));
    sent_probe(&mut e, seq.wrapping_add(1), now);
    e.edges[0].last_reply = now - Duration::from_millis(400);
    e.expire(now, true);
    assert_eq!(e.stats.probes_lost, 1);
    assert!(!e.edges[0].up, "400 ms of silence is over the 300 ms down_after");
    assert!(e.edges[0].inflight.contains_key(&(seq.wrapping_add(1))), "the young probe is kept");
    // Its transmit-stamp ids are forgotten with it.
    assert!(!e.tx_owner.contains_key(&seq.wrapping_mul(2)));
    // Any answer brings the edge back.
    receive(&mut e, pkt(PacketKind::Rev1, 0, 1, seq.wrapping_add(1), [5_000, 5_050]), 9_000);
    assert!(e.edges[0].up);
    let w = e.acc.close(0);
    assert_eq!((w.edges[0].lost, w.edges[0].went_down, w.edges[0].came_up, w.edges[0].up), (1, 1, 1, true));
    // After the last probe silence is expected: no edge goes down.
    let mut quiet = engine();
    quiet.edges[0].last_reply = now - Duration::from_secs(5);
    quiet.expire(now, false);
    assert!(quiet.edges[0].up);
}

#[test]
fn a_replay_of_an_expired_answer_is_stale_but_a_far_forged_seq_does_not_silence_the_prober() {
    let mut e = engine();
    receive(&mut e, pkt(PacketKind::Fwd1, 0, 1, 50, [NO_STAMP; 2]), 0);
    e.answers.get_mut(&(0, 50)).unwrap().started = Instant::now() - Duration::from_secs(2);
    e.expire(Instant::now(), true);
    assert_eq!(e.expired_seq[0], Some(50));
    receive(&mut e, pkt(PacketKind::Fwd1, 0, 1, 50, [NO_STAMP; 2]), 0);
    receive(&mut e, pkt(PacketKind::Fwd2, 0, 1, 49, [NO_STAMP; 2]), 0);
    assert!(e.answers.is_empty());
    // Newer seqs are answered, and so is one more than STALE_SEQ_SPAN below (taken as new).
    let far = 50u32.wrapping_sub(STALE_SEQ_SPAN);
    for seq in [51, far] {
        receive(&mut e, pkt(PacketKind::Fwd1, 0, 1, seq, [NO_STAMP; 2]), 0);
    }
    assert_eq!(e.answers.len(), 2);
    assert_eq!(dropped(&e.acc.close(0)), [("stale_seq", 2)]);
}

#[test]
fn seq_order_wraps_around() {
    assert!(seq_at_or_before(5, 5));
    assert!(seq_at_or_before(5, 6));
    assert!(!seq_at_or_before(6, 5));
    assert!(seq_at_or_before(u32::MAX, 0), "0 follows u32::MAX");
    assert!(!seq_at_or_before(0, u32::MAX));
}
