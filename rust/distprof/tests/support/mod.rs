//! What the loopback tests of real nodes share: a run context over their sockets and the
//! exact truth of an edge between two virtual clocks.

#![allow(dead_code)] // each test binary uses its own part

use distprof::clock::VirtualClock;
use distprof::config::Config;
use distprof::context::{NodeInfo, RunContext};
use distprof::standalone::{run_node, NodeOptions, NodeSummary};
use std::net::UdpSocket;

/// The configuration of the loopback tests: 10 ms cadence, 40 us pairs, 0.5 s windows,
/// kernel stamps, files in `dir`.
pub fn loopback_config(dir: &std::path::Path) -> Config {
    Config {
        enabled: true,
        probe_cadence_us: 10_000,
        packet_spacing_us: 40,
        probe_window_s: 0.5,
        handshake_timeout_ms: 300,
        timestamping: distprof::config::TimestampMode::Kernel,
        output_dir: dir.to_string_lossy().into_owned(),
        ..Config::default()
    }
}

/// Every node's context of a run without rendezvous over `socks` (node i at socket i)
/// with the given edges.
pub fn context(session: &str, token: u64, socks: &[UdpSocket], out_edges: Vec<Vec<u32>>) -> Vec<RunContext> {
    let nodes: Vec<NodeInfo> = socks
        .iter()
        .enumerate()
        .map(|(i, s)| NodeInfo { node: i as u32, probe_addr: s.local_addr().unwrap(), hostname: "localhost".into() })
        .collect();
    RunContext::without_rendezvous(session, token, &nodes, &out_edges)
}

/// theta = S_dst - S_src at the instant the src clock reads `mid_local_ns`, exactly.
pub fn true_theta_ns(src: &VirtualClock, dst: &VirtualClock, mid_local_ns: i64) -> f64 {
    let t_src = src.invert_rel_ns((mid_local_ns - src.epoch_real_ns) as f64);
    let s_dst = dst.read_rel_ns(t_src + (src.epoch_real_ns - dst.epoch_real_ns) as f64);
    (dst.epoch_real_ns - mid_local_ns) as f64 + s_dst
}

/// Three host clocks of a test network: the reference, +1.5 ms at -12.5 ppm, -0.7 ms at
/// +30 ppm, drift counted from `start`.
pub fn three_clocks(start: i64) -> [VirtualClock; 3] {
    [
        VirtualClock { epoch_real_ns: start, ..VirtualClock::IDENTITY },
        VirtualClock { offset_ns: 1_500_000, drift_ppb: -12_500.0, wander_ns: 0.0, epoch_real_ns: start },
        VirtualClock { offset_ns: -700_000, drift_ppb: 30_000.0, wander_ns: 0.0, epoch_real_ns: start },
    ]
}

/// Runs node i with context `ctxs[i]` on socket i with `opts(i)`, one thread each, and
/// returns their summaries in node order.
pub fn run_nodes(ctxs: &[RunContext], socks: Vec<UdpSocket>, cfg: &Config, opts: impl Fn(usize) -> NodeOptions) -> Vec<NodeSummary> {
    let handles: Vec<_> = socks
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let (ctx, cfg, opts) = (ctxs[i].clone(), cfg.clone(), opts(i));
            std::thread::spawn(move || run_node(&ctx, i as u32, s, &cfg, &opts).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
