//! Replayed and forged packets with the right session token, at a real engine: replays of
//! genuine packets are never answered nor used, each counted once as `stale_seq`; one
//! forged probe far ahead in sequence is answered (it looks new) but does not make the
//! prober's real probes look stale.

use distprof::clock::realtime_ns;
use distprof::config::Config;
use distprof::context::{NodeInfo, RunContext};
use distprof::jsonl;
use distprof::standalone::{run_node, NodeOptions};
use distprof::wire::{Packet, PacketKind, NO_STAMP};
use distprof_sim::relay::{route_through, Relay, RelayConfig, RelayEndpoint};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::time::Duration;

fn sleep_until_real(t_ns: i64) {
    let wait = t_ns - realtime_ns();
    if wait > 0 {
        std::thread::sleep(Duration::from_nanos(wait as u64));
    }
}

fn dropped(path: &std::path::Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for w in jsonl::read(path).unwrap().windows {
        for (k, v) in w.dropped {
            *out.entry(k).or_default() += v;
        }
    }
    out
}

#[test]
fn replays_are_dropped_as_stale_and_a_forged_far_seq_does_not_block_real_probes() {
    let socks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    let endpoints = (0..2)
        .map(|i| RelayEndpoint { node: i, face: UdpSocket::bind("127.0.0.1:0").unwrap(), node_addr: addrs[i as usize] })
        .collect();
    let relay = Relay::start(endpoints, RelayConfig::clean(100.0)).unwrap();
    let token = 0x5EC0_7E57;
    let ctx = RunContext::without_rendezvous(
        "replay",
        token,
        &(0..2).map(|i| NodeInfo { node: i, probe_addr: addrs[i as usize], hostname: "h".into() }).collect::<Vec<_>>(),
        &[vec![1], vec![0]],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        enabled: true,
        probe_window_s: 0.5,
        probe_cadence_us: 20_000,
        handshake_timeout_ms: 300,
        output_dir: dir.path().to_string_lossy().into_owned(),
        ..Config::default()
    };
    let start = realtime_ns() + 100_000_000;
    let handles: Vec<_> = socks
        .into_iter()
        .enumerate()
        .map(|(i, sock)| {
            let c = route_through(&ctx[i], relay.faces());
            let cfg = cfg.clone();
            let mut opts = NodeOptions::new(Duration::from_millis(2000));
            opts.start_at_real_ns = Some(start);
            std::thread::spawn(move || run_node(&c, i as u32, sock, &cfg, &opts).unwrap())
        })
        .collect();
    let evil = UdpSocket::bind("127.0.0.1:0").unwrap();
    // At 0.5 s: one forged probe "from node 1" 2^30 seqs ahead of node 1's real ones.
    sleep_until_real(start + 500_000_000);
    let ahead = ((realtime_ns() / 1_000_000) as u32).wrapping_add(1 << 30);
    for kind in [PacketKind::Fwd1, PacketKind::Fwd2] {
        let p = Packet { kind, session_token: token, src: 1, dst: 0, seq: ahead, stamps_ns: [NO_STAMP; 2] };
        evil.send_to(&p.encode(), addrs[0]).unwrap();
    }
    // At 1.0 s (its answer long expired): the genuine packets node 0 got first, again.
    sleep_until_real(start + 1_000_000_000);
    let replays = relay.captured(0);
    assert!(replays.len() >= 30, "{} captured", replays.len());
    for r in &replays {
        evil.send_to(r, addrs[0]).unwrap();
    }
    let sums: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    relay.stop();

    // Node 1's real probes went on being answered: none lost after the forged one.
    assert_eq!(sums[1].edges[0].lost, 0, "{:?}", sums[1].edges[0]);
    assert!(sums[1].edges[0].complete >= 90, "{:?}", sums[1].edges[0]);
    let d0 = dropped(&sums[0].jsonl_path);
    let d1 = dropped(&sums[1].jsonl_path);
    // Every replay dropped once at node 0; the forged probe was answered, and node 1
    // dropped the 3 answers to a probe it never sent.
    assert_eq!(d0.get("stale_seq").copied().unwrap_or(0), replays.len() as u64, "{d0:?}");
    assert_eq!(d0.values().sum::<u64>(), replays.len() as u64, "{d0:?}");
    assert_eq!(d1, BTreeMap::from([("unexpected".to_string(), 3)]), "{d1:?}");
    // No replayed packet entered a record: each (src, seq) once, and node 0's records are
    // all of seqs it sent during this run.
    let f0 = jsonl::read(&sums[0].jsonl_path).unwrap();
    let mut seqs: Vec<u32> = f0.windows.iter().flat_map(|w| w.records.iter().map(|r| r.seq)).collect();
    let n = seqs.len();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), n);
    assert!(n as u64 == sums[0].edges[0].complete && sums[0].edges[0].lost == 0, "{:?}", sums[0].edges[0]);
}
