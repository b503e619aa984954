//! Two nodes in separate network namespaces probe each other through a relay in a third
//! namespace (root only; CI runs as root):
//!
//! ```text
//!  dpA (node 0) 10.77.1.1 ==veth== 10.77.1.2 dpR (relay) 10.77.2.2 ==veth== 10.77.2.1 dpB (node 1)
//! ```

use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::{Config, TimestampMode};
use distprof::context::{NodeInfo, RunContext};
use distprof::standalone::{run_node, NodeOptions};
use distprof::timestamp::StampMode;
use distprof_sim::netns::{is_root, veth, Netns};
use distprof_sim::relay::{route_through, PathModel, Relay, RelayConfig, RelayEndpoint};
use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::Duration;

#[test]
fn two_namespaced_hosts_probe_through_a_relay_namespace() {
    assert!(is_root(), "this test builds network namespaces and must run as root (as CI does)");
    let tag = std::process::id() % 100_000;
    let a = Netns::create(&format!("dpA{tag}")).unwrap();
    let r = Netns::create(&format!("dpR{tag}")).unwrap();
    let b = Netns::create(&format!("dpB{tag}")).unwrap();
    veth(&a, "dpa0", "10.77.1.1/24", &r, "dpr0", "10.77.1.2/24").unwrap();
    veth(&b, "dpb0", "10.77.2.1/24", &r, "dpr1", "10.77.2.2/24").unwrap();

    let sock_a = a.run(|| UdpSocket::bind("10.77.1.1:7000")).unwrap().unwrap();
    let sock_b = b.run(|| UdpSocket::bind("10.77.2.1:7000")).unwrap().unwrap();
    // Node 0's face is where node 1 sends (on node 1's side of the relay), and back.
    let face0 = r.run(|| UdpSocket::bind("10.77.2.2:7100")).unwrap().unwrap();
    let face1 = r.run(|| UdpSocket::bind("10.77.1.2:7101")).unwrap().unwrap();
    // 200 us one way, 600 us back: the two-way probe cannot see the asymmetry and must
    // be off by exactly half of it.
    let mut relay_cfg = RelayConfig::clean(200.0);
    relay_cfg.paths.insert((1, 0), PathModel::fixed(600.0));
    let relay = Relay::start(
        vec![
            RelayEndpoint { node: 0, face: face0, node_addr: sock_a.local_addr().unwrap() },
            RelayEndpoint { node: 1, face: face1, node_addr: sock_b.local_addr().unwrap() },
        ],
        relay_cfg,
    )
    .unwrap();

    let ctx = RunContext::without_rendezvous(
        "netns",
        42,
        &[
            NodeInfo { node: 0, probe_addr: sock_a.local_addr().unwrap(), hostname: a.name().into() },
            NodeInfo { node: 1, probe_addr: sock_b.local_addr().unwrap(), hostname: b.name().into() },
        ],
        &[vec![1], vec![0]],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        enabled: true,
        probe_window_s: 0.5,
        probe_cadence_us: 10_000,
        timestamping: TimestampMode::Kernel,
        output_dir: dir.path().to_string_lossy().into_owned(),
        ..Config::default()
    };
    let start = realtime_ns() + 100_000_000;
    let clocks = [
        VirtualClock { epoch_real_ns: start, ..VirtualClock::IDENTITY },
        VirtualClock { offset_ns: 2_000_000, drift_ppb: 20_000.0, wander_ns: 0.0, epoch_real_ns: start },
    ];
    let mut handles = HashMap::new();
    for (node, sock) in [(0u32, sock_a), (1, sock_b)] {
        let c = route_through(&ctx[node as usize], relay.faces());
        let cfg = cfg.clone();
        let mut opts = NodeOptions::new(Duration::from_millis(1500));
        opts.clock = clocks[node as usize];
        opts.start_at_real_ns = Some(start);
        handles.insert(node, std::thread::spawn(move || run_node(&c, node, sock, &cfg, &opts).unwrap()));
    }
    let s0 = handles.remove(&0).unwrap().join().unwrap();
    let s1 = handles.remove(&1).unwrap().join().unwrap();
    let stats = relay.stop();
    assert_eq!(stats.unknown_source, 0);
    for s in [&s0, &s1] {
        assert_eq!(s.timestamp_mode, StampMode::Kernel);
        let e = &s.edges[0];
        assert!(e.sent >= 148, "node {} sent {}", s.node, e.sent);
        assert_eq!(e.lost, 0, "node {}", s.node);
        // Round trip 800 us plus the relay's own wake-ups.
        let rtt = e.min_round_trip_ns.unwrap();
        assert!((800_000..1_200_000).contains(&rtt), "node {} min rtt {rtt}", s.node);
    }
    // Node 1 seen from node 0 by the online edge fit at its last window's midpoint: truth
    // minus half the asymmetry (600 - 200) / 2, which two-way probes cannot see.
    let theta_at = |src: &VirtualClock, dst: &VirtualClock, mid: i64| {
        let t = src.invert_rel_ns((mid - src.epoch_real_ns) as f64);
        (dst.epoch_real_ns - mid) as f64 + dst.read_rel_ns(t + (src.epoch_real_ns - dst.epoch_real_ns) as f64)
    };
    let (f0, f1) = (s0.edges[0].fit.as_ref().unwrap(), s1.edges[0].fit.as_ref().unwrap());
    let truth = theta_at(&clocks[0], &clocks[1], s0.edges[0].fit_mid_local_ns.unwrap());
    let est = f0.theta_ns.unwrap();
    assert!((est - (truth - 200_000.0)).abs() < 80_000.0, "est {est} truth {truth}");
    let truth_back = theta_at(&clocks[1], &clocks[0], s1.edges[0].fit_mid_local_ns.unwrap());
    let est_back = f1.theta_ns.unwrap();
    assert!((est_back - (truth_back + 200_000.0)).abs() < 80_000.0, "est {est_back} truth {truth_back}");
    drop((a, r, b));
    for n in ["dpA", "dpR", "dpB"] {
        assert!(!std::path::Path::new(&format!("/var/run/netns/{n}{tag}")).exists(), "{n}{tag} not cleaned up");
    }
}
