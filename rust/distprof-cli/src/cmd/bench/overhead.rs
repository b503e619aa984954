//! `distprof bench overhead`: CPU and bandwidth of a real probe run at the default
//! cadence. Node processes probe each other directly over loopback (no relay, whose own
//! CPU would otherwise be on the bill); each measures the CPU time (getrusage, user +
//! system) of its probe engine over the engine's wall time, and counts its datagrams.
//! Bytes include the UDP (8) and IPv4 (20) headers.
//!
//! Then the cost of sharing edge fits (`plugin::fit_exchange`), per node and window: one
//! node of the simulated reference scenario (64 nodes, out-degree 8) runs the plugin's
//! exchange on its own final fits against an in-memory store that holds every other
//! node's fits, as the plugin's store would; its thread CPU time (encoding, store calls,
//! parsing everyone's fits, the network solve), the bytes it sets and reads, and the store
//! calls, divided by the windows.

use crate::cluster::spawn::{spawn_cluster, wait_cluster, NodeClocks};
use anyhow::bail;
use distprof::clock::VirtualClock;
use distprof::config::Config;
use distprof::probe::engine::UDP_IPV4_OVERHEAD_BYTES;
use distprof::wire::PACKET_LEN;
use std::net::UdpSocket;
use std::process::ExitCode;
use std::time::Duration;

/// Goals from the project brief: at most 1% of one core per node, and at most 0.05% of a
/// 10 GbE link per edge.
const CPU_GOAL_PERCENT: f64 = 1.0;
const BYTES_GOAL_PER_S: f64 = 625_000.0;

#[derive(clap::Args)]
pub struct Args {
    /// Number of node processes (default: the configuration's out-degree plus one, 9 for
    /// the defaults, so that every node probes as many peers as the configuration says).
    #[arg(long)]
    nodes: Option<u32>,
    /// Configuration file to measure, e.g. a preset of examples/configs/ (default: the
    /// built-in defaults).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Seconds of probing.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let base = match &args.config {
        Some(path) => distprof::config::check_file(path).map_err(|e| anyhow::anyhow!("--config `{}`:\n{e}", path.display()))?,
        None => Config::default(),
    };
    let n = args.nodes.unwrap_or(base.probe_out_degree + 1);
    if !(2..=32).contains(&n) {
        bail!("--nodes {n}: use 2 to 32 node processes");
    }
    if !(args.duration.is_finite() && (1.0..=600.0).contains(&args.duration)) {
        bail!("--duration {}: use 1 to 600 seconds", args.duration);
    }
    let out_dir = std::env::temp_dir().join(format!("distprof-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    let config = Config { enabled: true, output_dir: out_dir.to_string_lossy().into_owned(), ..base };
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    let addrs: Vec<_> = socks.iter().map(|s| s.local_addr()).collect::<Result<_, _>>()?;
    drop(socks);
    // The probe graph of the rendezvous: every node probes min(out-degree, n - 1) peers.
    let edges = n as usize * config.probe_out_degree.min(n - 1) as usize;
    let clocks = vec![VirtualClock::IDENTITY; n as usize];
    let duration = Duration::from_secs_f64(args.duration);
    eprintln!(
        "bench overhead: {n} nodes, {edges} edges, cadence {} us, gap {} us, {:.0} s on loopback",
        config.probe_cadence_us, config.packet_spacing_us, args.duration
    );
    let mut cluster = spawn_cluster(n, &addrs, None, &config, NodeClocks { host: &clocks, nic: None }, duration, &out_dir)?;
    let reports = wait_cluster(&mut cluster, duration, None)?;
    if reports.len() != n as usize {
        bail!("only {} of {n} nodes finished; see the messages above", reports.len());
    }
    let mut cpu = Vec::new();
    let mut bytes = 0u64;
    let mut wall_s = 0.0f64;
    for r in reports.values() {
        cpu.push(r.cpu_ns as f64 / r.wall_ns as f64 * 100.0);
        bytes += r.summary.stats.packets_sent * (PACKET_LEN as u64 + UDP_IPV4_OVERHEAD_BYTES);
        wall_s = wall_s.max(r.wall_ns as f64 / 1e9);
        eprintln!(
            "  node {}: cpu {:.3}% of a core, {} packets sent, {} received, mode {:?}",
            r.summary.node,
            r.cpu_ns as f64 / r.wall_ns as f64 * 100.0,
            r.summary.stats.packets_sent,
            r.summary.stats.packets_received,
            r.summary.timestamp_mode
        );
    }
    let cpu_mean = cpu.iter().sum::<f64>() / cpu.len() as f64;
    // Both directions of an edge's probes (5 datagrams) are charged to the edge.
    let bytes_per_s_per_edge = bytes as f64 / wall_s / edges as f64;
    let _ = std::fs::remove_dir_all(&out_dir);
    println!("cpu per node: {cpu_mean:.3}% of one core (goal <= {CPU_GOAL_PERCENT}%)");
    println!(
        "bandwidth per edge: {bytes_per_s_per_edge:.0} bytes/s = {:.4}% of 10 GbE (goal <= {BYTES_GOAL_PER_S} bytes/s = 0.05%)",
        bytes_per_s_per_edge / 1.25e9 * 100.0
    );
    let sharing = fit_sharing(64)?;
    println!(
        "fit sharing at {} nodes: {:.2} ms CPU per node and window ({:.3}% of a core at {} s windows), \
         {:.0} bytes set and {:.0} read per node and window, {:.0} store calls",
        sharing.nodes,
        sharing.cpu_ms_per_window,
        sharing.cpu_ms_per_window / (sharing.window_s * 1e3) * 100.0,
        sharing.window_s,
        sharing.bytes_set_per_window,
        sharing.bytes_got_per_window,
        sharing.calls_per_window
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "fit_sharing": sharing,
                "cpu_percent_per_node": cpu_mean,
                "bytes_per_s_per_edge": bytes_per_s_per_edge,
                "nodes": n,
                "edges": edges,
                "out_degree": config.probe_out_degree.min(n - 1),
                "probe_cadence_us": config.probe_cadence_us,
                "duration_s": args.duration,
                "config": args.config.as_ref().map(|p| p.display().to_string()),
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct Sharing {
    nodes: u32,
    window_s: f64,
    windows: u64,
    cpu_ms_per_window: f64,
    bytes_set_per_window: f64,
    bytes_got_per_window: f64,
    calls_per_window: f64,
}

/// The fit exchange of node 1 of the simulated reference scenario at `nodes` nodes.
fn fit_sharing(nodes: u32) -> anyhow::Result<Sharing> {
    use distprof::context::{NodeInfo, RunContext};
    use distprof::estimate::{fit_window, EstimatorSettings, Smoother};
    use distprof::kv::{KvStore, MemoryStore};
    use distprof::plugin::fit_exchange::{fits_key, end_key, Exchange, ExchangeState};
    use distprof::plugin::lease::KvLease;
    use distprof_sim::cluster::{Cluster, Scenario};
    use std::sync::{Arc, Mutex};
    let c = Cluster::new(Scenario { nodes, ..Scenario::reference() }).map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
    let settings = EstimatorSettings::default();
    let window_ns = (c.scenario.window_s * 1e9) as i64;
    let finals = |node: u32| {
        let mut s = Smoother::new(settings, window_ns);
        let mut out = Vec::new();
        for k in 0..c.num_windows() {
            out.extend(s.push_fits(fit_window(&c.records_of(node, k), &c.window_spec(k), &settings)));
        }
        out.extend(s.finish_fits());
        out
    };
    let me = 1;
    let infos: Vec<NodeInfo> =
        (0..nodes).map(|node| NodeInfo { node, probe_addr: "127.0.0.1:1".parse().expect("literal"), hostname: format!("sim{node}") }).collect();
    let ctx = RunContext::without_rendezvous("bench", 1, &infos, &c.graph).swap_remove(me as usize);
    let store: Arc<dyn KvStore> = Arc::new(MemoryStore::new());
    for node in (0..nodes).filter(|&n| n != me) {
        let mut last = None;
        for f in finals(node) {
            let part = f.share(node);
            store.set(&fits_key(&ctx.session_id, 0, part.window_id, node), &serde_json::to_string(&part)?)?;
            last = Some(part.window_id);
        }
        store.set(&end_key(&ctx.session_id, 0, node), &last.map_or("none".into(), |l| l.to_string()))?;
    }
    let state = Arc::new(Mutex::new(ExchangeState::default()));
    let exchange = Exchange {
        node: me,
        ctx: Arc::new(ctx),
        trace: 0,
        kv: Some(Arc::new(KvLease::from_shared(store, std::time::Instant::now() + Duration::from_secs(600)))),
        settings,
        window: Duration::from_secs_f64(c.scenario.window_s),
        state: Arc::clone(&state),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    for f in finals(me) {
        tx.send(f)?;
    }
    drop(tx);
    let segments = exchange.run(rx);
    let st = state.lock().map_err(|_| anyhow::anyhow!("exchange state poisoned"))?.clone();
    if st.windows_complete != c.num_windows() || segments.len() as u64 != c.num_windows() {
        bail!("fit sharing: {} of {} windows complete, {} segments", st.windows_complete, c.num_windows(), segments.len());
    }
    let w = c.num_windows().max(1) as f64;
    Ok(Sharing {
        nodes,
        window_s: c.scenario.window_s,
        windows: c.num_windows(),
        cpu_ms_per_window: st.stats.cpu_ms / w,
        bytes_set_per_window: st.stats.bytes_set as f64 / w,
        bytes_got_per_window: st.stats.bytes_got as f64 / w,
        calls_per_window: (st.stats.values_set + st.stats.gets) as f64 / w,
    })
}
