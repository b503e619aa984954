//! A real link failure between two hosts (network namespaces joined by a veth pair, no
//! relay): the link goes down mid-run and comes back. Both nodes keep running, every window
//! is written, the edge is marked down during the outage and up after it, the lost probes
//! are counted, and the clocks are recovered afterwards. Root only (CI runs as root).

use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::{Config, TimestampMode};
use distprof::context::{NodeInfo, RunContext};
use distprof::jsonl;
use distprof::standalone::{run_node, NodeOptions};
use distprof_sim::netns::{is_root, veth, Netns};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

fn sleep_until_real(t_ns: i64) {
    let wait = t_ns - realtime_ns();
    if wait > 0 {
        std::thread::sleep(Duration::from_nanos(wait as u64));
    }
}

fn link(ns: &Netns, dev: &str, state: &str) {
    let out = Command::new("ip").args(["-n", ns.name(), "link", "set", dev, state]).output().unwrap();
    assert!(out.status.success(), "ip link set {dev} {state}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn link_down_mid_run_takes_the_edge_down_and_back_up() {
    assert!(is_root(), "this test builds network namespaces and must run as root (as CI does)");
    let tag = std::process::id() % 100_000;
    let a = Netns::create(&format!("dpfA{tag}")).unwrap();
    let b = Netns::create(&format!("dpfB{tag}")).unwrap();
    veth(&a, "dpfa0", "10.78.1.1/24", &b, "dpfb0", "10.78.1.2/24").unwrap();
    let sock_a = a.run(|| UdpSocket::bind("10.78.1.1:7200")).unwrap().unwrap();
    let sock_b = b.run(|| UdpSocket::bind("10.78.1.2:7200")).unwrap().unwrap();
    let ctx = RunContext::without_rendezvous(
        "netns-faults",
        4242,
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
        probe_cadence_us: 20_000,
        handshake_timeout_ms: 300,
        timestamping: TimestampMode::Kernel,
        output_dir: dir.path().to_string_lossy().into_owned(),
        ..Config::default()
    };
    let start = realtime_ns() + 200_000_000;
    let clocks = [
        VirtualClock { epoch_real_ns: start, ..VirtualClock::IDENTITY },
        VirtualClock { offset_ns: -2_000_000, drift_ppb: -15_000.0, wander_ns: 0.0, epoch_real_ns: start },
    ];
    let handles: Vec<_> = [(0u32, sock_a), (1, sock_b)]
        .into_iter()
        .map(|(node, sock)| {
            let (ctx, cfg) = (ctx[node as usize].clone(), cfg.clone());
            let mut opts = NodeOptions::new(Duration::from_secs(3));
            opts.clock = clocks[node as usize];
            opts.start_at_real_ns = Some(start);
            std::thread::spawn(move || run_node(&ctx, node, sock, &cfg, &opts).unwrap())
        })
        .collect();
    // The cable is pulled from 1.0 s to 1.8 s.
    // Under load `ip` runs late, so the outage is what the clock says around the two
    // commands: at least from the end of `down` to the start of `up`, at most from the
    // start of `down` to the end of `up`.
    sleep_until_real(start + 1_000_000_000);
    let down_called = realtime_ns();
    link(&a, "dpfa0", "down");
    let down_done = realtime_ns();
    sleep_until_real(start + 1_800_000_000);
    let up_called = realtime_ns();
    link(&a, "dpfa0", "up");
    let up_done = realtime_ns();
    let probes_in = |ns: i64| ns / 20_000_000;
    let (least_lost, most_lost) = (probes_in(up_called - down_done), probes_in(up_done - down_called));
    let sums: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    for s in &sums {
        let e = &s.edges[0];
        eprintln!("node {}: sent {} complete {} lost {} up at end {}", s.node, e.sent, e.complete, e.lost, e.up_at_end);
        // 3 s at 20 ms; the ~0.8 s outage (~40 probes) lost, the rest complete. The
        // margins: probes in flight when the link went down or came back (15 below) and
        // the handshakes that time out after it is back (20 above).
        assert!(e.sent >= 140, "node {}: {e:?}", s.node);
        assert!((least_lost - 15..=most_lost + 20).contains(&(e.lost as i64)), "node {}: lost {} for an outage of {least_lost}-{most_lost} probes: {e:?}", s.node, e.lost);
        assert!(e.complete >= e.sent - 60, "node {}: {e:?}", s.node);
        assert!(e.up_at_end, "node {}: {e:?}", s.node);
        let f = jsonl::read(&s.jsonl_path).unwrap();
        // Every window written, ids without a gap: 3 s of 0.5 s windows and the last.
        assert!(f.windows.len() >= 7, "node {}: {} windows", s.node, f.windows.len());
        assert!(f.windows.iter().enumerate().all(|(i, w)| w.window_id == i as u64));
        let edge: Vec<_> = f.windows.iter().map(|w| w.edges[0].clone()).collect();
        assert_eq!(edge.iter().map(|e| e.went_down).sum::<u32>(), 1, "node {}: {edge:?}", s.node);
        assert_eq!(edge.iter().map(|e| e.came_up).sum::<u32>(), 1, "node {}: {edge:?}", s.node);
        // Before the outage and after it, windows complete probes again.
        assert!(edge[0].complete > 0 && edge[edge.len() - 2].complete > 0, "node {}: {edge:?}", s.node);
    }
    // After the outage the online fit finds the peer's clock again: node 1 seen from node
    // 0 at the last fit's midpoint, against the truth (a symmetric veth: a few us).
    let (src, dst) = (&clocks[0], &clocks[1]);
    let mid = sums[0].edges[0].fit_mid_local_ns.unwrap();
    let t = src.invert_rel_ns((mid - src.epoch_real_ns) as f64);
    let truth = (dst.epoch_real_ns - mid) as f64 + dst.read_rel_ns(t + (src.epoch_real_ns - dst.epoch_real_ns) as f64);
    let est = sums[0].edges[0].fit.as_ref().unwrap().theta_ns.unwrap();
    assert!(sums[0].edges[0].fit_window_id.unwrap() >= 4, "{:?}", sums[0].edges[0]);
    eprintln!("offset of node 1 seen from node 0 after the outage: error {:.0} ns", est - truth);
    assert!((est - truth).abs() < 50_000.0, "est {est} truth {truth}");
}
