//! The probe engine over real UDP sockets on loopback, with hand-built run contexts.

mod support;

use distprof::clock::realtime_ns;
use distprof::config::{Config, TimestampMode};
use distprof::context::RunContext;
use distprof::jsonl;
use distprof::standalone::{run_node, NodeOptions};
use std::net::UdpSocket;
use std::time::Duration;
use support::true_theta_ns;

fn context(socks: &[UdpSocket], out_edges: Vec<Vec<u32>>) -> Vec<RunContext> {
    support::context("test", 0x1234_5678_9abc_def0, socks, out_edges)
}

use support::loopback_config as config;

/// Three nodes in a ring both ways, with virtual clocks: every probe completes, the
/// cadence and the pair gap are what the config says, and the offsets come out right.
#[test]
fn three_nodes_probe_at_the_configured_cadence_and_gap() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let socks: Vec<UdpSocket> = (0..3).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let ctx = context(&socks, vec![vec![1, 2], vec![2, 0], vec![0, 1]]);
    let start = realtime_ns() + 100_000_000;
    let clocks = support::three_clocks(start);
    let sums = support::run_nodes(&ctx, socks, &cfg, |i| {
        let mut opts = NodeOptions::new(Duration::from_millis(1600));
        opts.clock = clocks[i];
        opts.start_at_real_ns = Some(start);
        opts
    });
    for s in &sums {
        assert_eq!(s.timestamp_mode, distprof::timestamp::StampMode::Kernel);
        for e in &s.edges {
            // 1.6 s at 10 ms: 160 probes (the first at t = 0, the last before 1.6 s).
            assert!((159..=161).contains(&e.sent), "node {} -> {}: sent {}", s.node, e.dst, e.sent);
            assert_eq!(e.lost, 0, "node {} -> {}", s.node, e.dst);
            assert_eq!(e.complete, e.sent);
            assert!(e.up_at_end);
        }
        let file = jsonl::read(&s.jsonl_path).unwrap();
        assert!(!file.truncated_tail);
        assert_eq!(file.meta.node, s.node);
        // 3 full windows of 0.5 s and the partial last one.
        assert_eq!(file.windows.len(), 4, "node {}", s.node);
        let recs: Vec<_> = file.windows.iter().flat_map(|w| w.records.clone()).collect();
        for dst in &ctx[s.node as usize].out_edges {
            let mut edge: Vec<_> = recs.iter().filter(|r| r.dst == *dst).collect();
            edge.sort_by_key(|r| r.seq);
            // Cadence: spacing of consecutive first packets, in the node's own clock
            // (drift of tens of ppm is negligible here).
            let gaps: Vec<i64> = edge.windows(2).map(|w| w[1].fwd_tx_ns[0] - w[0].fwd_tx_ns[0]).collect();
            let mean_cadence = gaps.iter().sum::<i64>() as f64 / gaps.len() as f64;
            assert!((mean_cadence - 10_000_000.0).abs() < 50_000.0, "mean cadence {mean_cadence} ns");
            // Pair gap: transmit stamps of the two packets of a pair, both directions.
            let mut pair: Vec<i64> = edge.iter().map(|r| r.fwd_tx_ns[1] - r.fwd_tx_ns[0]).collect();
            pair.extend(edge.iter().map(|r| r.rev_tx_ns[1] - r.rev_tx_ns[0]));
            pair.sort();
            let median = pair[pair.len() / 2];
            eprintln!("pair gaps p10 {} p50 {} p90 {} fwd0 {:?}", pair[pair.len() / 10], median, pair[pair.len() * 9 / 10], &pair[..5]);
            // Never shorter than configured (the sleep starts after the first send); longer
            // by the wake-up and the second send, plus preemption on a shared 2-core VM.
            assert!(pair[0] >= 40_000, "a pair gap shorter than configured: {} ns", pair[0]);
            assert!(median <= 190_000, "median pair gap {median} ns for 40 us");
        }
    }
    // The online model: every window line carries the node's edge fits, and the last
    // fit of each edge is within its uncertainty of the true clocks.
    for s in &sums {
        let file = jsonl::read(&s.jsonl_path).unwrap();
        for w in &file.windows[..file.windows.len() - 1] {
            let m = w.model.as_ref().unwrap_or_else(|| panic!("node {} window {} has no model", s.node, w.window_id));
            assert_eq!(m.edges.len(), 2, "{m:?}");
            assert!(m.edges.iter().all(|e| e.theta_ns.is_some()), "{m:?}");
        }
        for e in &s.edges {
            let fit = e.fit.as_ref().unwrap();
            let mid = e.fit_mid_local_ns.unwrap();
            let truth = true_theta_ns(&clocks[s.node as usize], &clocks[e.dst as usize], mid);
            let err = fit.theta_ns.unwrap() - truth;
            let u = fit.uncertainty_ns.unwrap();
            eprintln!("{} -> {}: theta error {err:.0} ns, uncertainty {u:.0} ns", s.node, e.dst);
            assert!(err.abs() <= u, "{} -> {}: error {err} ns beyond the uncertainty {u} ns: {fit:?}", s.node, e.dst);
            // Loopback with kernel stamps, symmetric: tens of ns measured here.
            assert!(err.abs() < 5_000.0, "{} -> {}: error {err} ns", s.node, e.dst);
        }
    }
}

/// A peer that goes silent is marked down while the other edges go on; when it comes
/// back it is picked up again.
#[test]
fn silent_peer_goes_down_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let socks: Vec<UdpSocket> = (0..3).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let addr1 = socks[1].local_addr().unwrap();
    let ctx = context(&socks, vec![vec![1, 2], vec![0], vec![0]]);
    let mut socks = socks.into_iter();
    let (s0, s1, s2) = (socks.next().unwrap(), socks.next().unwrap(), socks.next().unwrap());
    let start = realtime_ns() + 50_000_000;
    let spawn = |node: u32, s: UdpSocket, start_ns: i64, ms: u64| {
        let (ctx, cfg) = (ctx[node as usize].clone(), cfg.clone());
        let mut opts = NodeOptions::new(Duration::from_millis(ms));
        opts.start_at_real_ns = Some(start_ns);
        std::thread::spawn(move || run_node(&ctx, node, s, &cfg, &opts).unwrap())
    };
    let h0 = spawn(0, s0, start, 3000);
    let h2 = spawn(2, s2, start, 3000);
    // Node 1 answers for 0.7 s, is gone for 0.9 s, then comes back until the end.
    spawn(1, s1, start, 700).join().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let s1 = UdpSocket::bind(addr1).unwrap();
    let back = spawn(1, s1, realtime_ns(), 1600);
    let sum0 = h0.join().unwrap();
    h2.join().unwrap();
    back.join().unwrap();
    let file = jsonl::read(&sum0.jsonl_path).unwrap();
    let to1: Vec<_> = file.windows.iter().map(|w| w.edges[0].clone()).collect();
    let to2: Vec<_> = file.windows.iter().map(|w| w.edges[1].clone()).collect();
    assert_eq!(to1.iter().map(|e| e.went_down).sum::<u32>(), 1, "{to1:?}");
    assert_eq!(to1.iter().map(|e| e.came_up).sum::<u32>(), 1, "{to1:?}");
    assert!(to1.iter().any(|e| !e.up), "some window closes with the edge down");
    assert!(to1.iter().map(|e| e.lost).sum::<u64>() > 30);
    // The last window with probes (the final one only drains answers) ends up.
    let last = to1.iter().rev().find(|e| e.sent > 0).unwrap();
    assert!(last.up && last.complete > 0 && last.lost == 0, "{last:?}");
    // The other edge never noticed.
    assert!(to2.iter().all(|e| e.up && e.went_down == 0));
    assert_eq!(to2.iter().map(|e| e.lost).sum::<u64>(), 0);
    assert!(to2.iter().map(|e| e.complete).sum::<u64>() >= 295);
}

/// Garbage, foreign sessions and misaddressed packets are dropped and counted by reason.
#[test]
fn bad_datagrams_are_dropped_and_counted() {
    use distprof::wire::{Packet, PacketKind};
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let socks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let ctx = context(&socks, vec![vec![1], vec![0]]);
    let target = socks[0].local_addr().unwrap();
    let s0 = socks.into_iter().next().unwrap();
    let (c, cf) = (ctx[0].clone(), cfg.clone());
    let h = std::thread::spawn(move || run_node(&c, 0, s0, &cf, &NodeOptions::new(Duration::from_millis(600))).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let evil = UdpSocket::bind("127.0.0.1:0").unwrap();
    let good = Packet { kind: PacketKind::Fwd1, session_token: ctx[0].session_token, src: 1, dst: 0, seq: 7, stamps_ns: [0, 0] };
    evil.send_to(b"hello", target).unwrap();
    let mut b = good.encode();
    b[0] = 0;
    evil.send_to(&b, target).unwrap();
    evil.send_to(&Packet { session_token: 1, ..good }.encode(), target).unwrap();
    evil.send_to(&Packet { dst: 5, ..good }.encode(), target).unwrap();
    evil.send_to(&Packet { kind: PacketKind::Rev1, seq: 999_999, ..good }.encode(), target).unwrap();
    let sum = h.join().unwrap();
    let file = jsonl::read(&sum.jsonl_path).unwrap();
    let mut dropped = std::collections::BTreeMap::<String, u64>::new();
    for w in &file.windows {
        for (k, v) in &w.dropped {
            *dropped.entry(k.clone()).or_default() += v;
        }
    }
    assert_eq!(dropped.get("wrong_length"), Some(&1), "{dropped:?}");
    assert_eq!(dropped.get("bad_magic"), Some(&1));
    assert_eq!(dropped.get("wrong_token"), Some(&1));
    assert_eq!(dropped.get("wrong_dst"), Some(&1));
    assert_eq!(dropped.get("unexpected"), Some(&1));
    // The run's summary carries the same counts, and their classes, for `local`'s table,
    // `--json` and the report.
    assert_eq!(sum.stats.dropped_by_reason, dropped);
    let classes = distprof::probe::DropCounts::from_reasons(&sum.stats.dropped_by_reason);
    assert_eq!((classes.foreign, classes.malformed), (3, 2), "{classes:?}");
}

/// User-space stamps, the fallback, run the same exchange and say so in the file.
#[test]
fn user_space_stamps_are_the_working_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config { timestamping: TimestampMode::User, ..config(dir.path()) };
    let socks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let ctx = context(&socks, vec![vec![1], vec![0]]);
    let handles: Vec<_> = socks
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let (ctx, cfg) = (ctx[i].clone(), cfg.clone());
            std::thread::spawn(move || run_node(&ctx, i as u32, s, &cfg, &NodeOptions::new(Duration::from_millis(600))).unwrap())
        })
        .collect();
    for h in handles {
        let s = h.join().unwrap();
        assert_eq!(s.timestamp_mode, distprof::timestamp::StampMode::User);
        // 60 probes are due in 600 ms; a loaded 2-core machine may start a node late.
        assert!(s.edges[0].complete >= 30 && s.edges[0].lost == 0, "{:?}", s.edges[0]);
        let f = jsonl::read(&s.jsonl_path).unwrap();
        assert_eq!(f.meta.timestamp_mode, distprof::timestamp::StampMode::User);
        assert_eq!(f.meta.stamp_error_bound_ns, 200_000);
        // Every window line carries the edge's model entry. User-space stamps are noisy
        // enough that a short loaded run may have no pure pairs, hence no line; a line
        // there is says: zero offset (two processes on one clock) within the user error.
        for w in &f.windows {
            let m = w.model.as_ref().expect("model");
            assert_eq!(m.edges[0].dst, s.edges[0].dst, "{m:?}");
        }
        if let Some(theta) = s.edges[0].fit.as_ref().and_then(|f| f.theta_ns) {
            assert!(theta.abs() < 200_000.0, "{theta}");
        }
        assert!(s.edges[0].min_round_trip_ns.unwrap() < 200_000);
    }
}
