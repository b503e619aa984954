//! A cluster of `distprof run` child processes on this machine: each node's config and
//! test-network files, the spawn, and a bounded wait that collects every node's report.
//! Used by `distprof local` and by the overhead and fault benches (the fault bench spawns
//! nodes one at a time with [`spawn_node`] under a watchdog of its own, which measures each
//! child's peak RSS and tells a crash from a kill).

use super::node_run::{SimSpec, WorkerReport};
use anyhow::Context as _;
use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::Config;
use distprof::context::NodeId;
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Time between spawning the children and their common start: enough for a process to
/// start and bind on a busy 2-core machine.
pub const START_DELAY: Duration = Duration::from_millis(1000);
/// Extra time a child gets beyond its duration before it is killed as hung.
pub const CHILD_GRACE: Duration = Duration::from_secs(10);

/// The real instant (epoch ns) at which nodes spawned now start together.
pub fn common_start_real_ns() -> i64 {
    realtime_ns() + START_DELAY.as_nanos() as i64
}

/// How a spawned node learns the others.
pub enum Meeting<'a> {
    /// A rendezvous through the store at this address, among this many nodes.
    Store { addr: SocketAddr, nodes: u32 },
    /// A context file written beforehand (no rendezvous): what the fault bench uses, so that
    /// a node restarted mid-run rejoins without a store.
    ContextFile(&'a Path),
}

/// Spawns node `node` as `distprof run` with the config and test-network files
/// [`write_node_files`] wrote, probing for `duration`; its stdout (the report) is piped.
pub fn spawn_node(node: NodeId, meeting: &Meeting, duration: Duration, cfg_path: &Path, sim_path: &Path) -> anyhow::Result<Child> {
    let mut cmd = crate::self_command()?;
    let program = std::path::PathBuf::from(cmd.get_program());
    cmd.args(["run", "--rank", &node.to_string()]);
    match meeting {
        Meeting::Store { addr, nodes } => {
            cmd.args(["--nodes", &nodes.to_string(), "--rendezvous", &addr.to_string(), "--bind", "127.0.0.1"]);
        }
        Meeting::ContextFile(path) => {
            cmd.arg("--context-file").arg(path);
        }
    }
    cmd.args(["--duration", &duration.as_secs_f64().to_string()])
        .arg("--config")
        .arg(cfg_path)
        .arg("--sim-file")
        .arg(sim_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting node {node} (`{} run`)", program.display()))
}

/// The report a node that ended cleanly printed as the last line of its stdout.
pub fn read_report(node: NodeId, child: &mut Child) -> anyhow::Result<WorkerReport> {
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        std::io::Read::read_to_string(&mut s, &mut out)?;
    }
    let last = out.trim().lines().last().unwrap_or("");
    serde_json::from_str(last).with_context(|| format!("node {node}: unreadable report `{}`", out.trim()))
}

/// Picks free loopback ports for the nodes (bound and released; the children bind them).
pub fn free_loopback_addrs(n: u32) -> anyhow::Result<Vec<SocketAddr>> {
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(socks.iter().map(|s| s.local_addr()).collect::<Result<_, _>>()?)
}

pub struct Cluster {
    pub children: Vec<(NodeId, Child)>,
    pub start_real_ns: i64,
}

/// Writes node `node`'s config and test-network files into `out_dir`, the ones
/// `distprof run --config FILE --sim-file FILE` reads, and returns their paths.
pub fn write_node_files(out_dir: &Path, node: NodeId, cfg: &Config, sim: &SimSpec) -> anyhow::Result<(PathBuf, PathBuf)> {
    let cfg_path = out_dir.join(format!("node{node}.config.json"));
    distprof::atomic_file::write(&cfg_path, serde_json::to_string_pretty(cfg)?.as_bytes()).with_context(|| format!("writing `{}`", cfg_path.display()))?;
    let sim_path = out_dir.join(format!("node{node}.sim.json"));
    distprof::atomic_file::write(&sim_path, serde_json::to_string(sim)?.as_bytes()).with_context(|| format!("writing `{}`", sim_path.display()))?;
    Ok((cfg_path, sim_path))
}

/// The clocks of a test network's nodes, indexed by node: the host clocks, and the
/// simulated NIC clocks where the nodes take hardware stamps from one.
#[derive(Clone, Copy)]
pub struct NodeClocks<'a> {
    pub host: &'a [VirtualClock],
    pub nic: Option<&'a [distprof::nic_clock::SimulatedNicClock]>,
}

/// Writes each node's config and test-network files and spawns one `distprof run` per node.
pub fn spawn_cluster(
    num_nodes: u32,
    addrs: &[SocketAddr],
    faces: Option<&[SocketAddr]>,
    config: &Config,
    clocks: NodeClocks<'_>,
    duration: Duration,
    out_dir: &Path,
) -> anyhow::Result<Cluster> {
    let store = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let meeting = Meeting::Store { addr: store, nodes: num_nodes };
    let start_real_ns = common_start_real_ns();
    let mut children = Vec::new();
    for node in 0..num_nodes {
        let cfg = Config { probe_port: addrs[node as usize].port(), ..config.clone() };
        let sim = SimSpec {
            clock: clocks.host[node as usize],
            faces: faces.map(<[_]>::to_vec),
            start_real_ns: Some(start_real_ns),
            nic_clock: clocks.nic.map(|n| n[node as usize]),
        };
        let (cfg_path, sim_path) = write_node_files(out_dir, node, &cfg, &sim)?;
        children.push((node, spawn_node(node, &meeting, duration, &cfg_path, &sim_path)?));
    }
    Ok(Cluster { children, start_real_ns })
}

/// Waits for every child (bounded), killing the ones that overrun; returns the reports of
/// those that finished cleanly.
pub fn wait_cluster(
    cluster: &mut Cluster,
    duration: Duration,
    kill: Option<(NodeId, Duration)>,
) -> anyhow::Result<HashMap<NodeId, WorkerReport>> {
    let t0 = Instant::now();
    let start_in = Duration::from_nanos((cluster.start_real_ns - realtime_ns()).max(0) as u64);
    let deadline = t0 + start_in + duration + CHILD_GRACE;
    let mut kill = kill.map(|(n, after)| (n, t0 + start_in + after));
    let mut reports = HashMap::new();
    let mut pending: Vec<usize> = (0..cluster.children.len()).collect();
    while !pending.is_empty() {
        if let Some((victim, at)) = kill {
            if Instant::now() >= at {
                if let Some((_, c)) = cluster.children.iter_mut().find(|(n, _)| *n == victim) {
                    eprintln!("distprof local: killing node {victim} (SIGKILL), as asked");
                    let _ = c.kill();
                }
                kill = None;
            }
        }
        let mut still = Vec::new();
        for &i in &pending {
            let (node, child) = &mut cluster.children[i];
            match child.try_wait()? {
                Some(status) => {
                    if status.success() {
                        reports.insert(*node, read_report(*node, child)?);
                    } else {
                        eprintln!("distprof local: node {node} ended with {status}");
                    }
                }
                None if Instant::now() > deadline => {
                    eprintln!("distprof local: node {node} overran its duration by {CHILD_GRACE:?}; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                }
                None => still.push(i),
            }
        }
        pending = still;
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(reports)
}
