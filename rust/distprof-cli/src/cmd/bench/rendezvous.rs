//! `distprof bench rendezvous`: time for many simulated nodes (threads) to agree on one run
//! context over the in-memory store. This measures the protocol's own cost (key traffic,
//! JSON, graph build, the master's sequential collection), not a network.

use anyhow::{bail, Context as _};
use distprof::config::Config;
use distprof::kv::MemoryStore;
use distprof::rendezvous::{digest, rendezvous};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Node threads only wait on condition variables and parse JSON: a small stack lets
/// thousands of them start quickly.
const NODE_STACK_BYTES: usize = 256 * 1024;

#[derive(clap::Args)]
pub struct Args {
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 1024)]
    nodes: u32,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Print a JSON object as the last line.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.nodes == 0 || args.repeat == 0 {
        bail!(
            "--nodes and --repeat must be at least 1 (got {} and {})",
            args.nodes,
            args.repeat
        );
    }
    let config = Config {
        rendezvous_timeout_ms: 120_000,
        ..Config::default()
    };
    let mut times_ms = Vec::new();
    for rep in 0..args.repeat {
        let (ms, digest) = agree_once(args.nodes, &config)?;
        println!(
            "run {}: {} nodes agreed on context {digest} in {ms:.1} ms",
            rep + 1,
            args.nodes
        );
        times_ms.push(ms);
    }
    times_ms.sort_by(f64::total_cmp);
    let median = times_ms[times_ms.len() / 2];
    println!(
        "median over {} runs: {median:.1} ms for {} nodes",
        args.repeat, args.nodes
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "nodes": args.nodes, "agree_ms": (median * 10.0).round() / 10.0 })
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts every node at once (after a barrier) on a fresh store; returns the wall time
/// until the last node holds the context, and the agreed context digest.
fn agree_once(nodes: u32, config: &Config) -> anyhow::Result<(f64, String)> {
    let store = Arc::new(MemoryStore::new());
    let barrier = Arc::new(Barrier::new(nodes as usize + 1));
    let mut handles = Vec::with_capacity(nodes as usize);
    for i in 0..nodes {
        let (store, barrier, config) = (store.clone(), barrier.clone(), config.clone());
        let h = std::thread::Builder::new()
            .stack_size(NODE_STACK_BYTES)
            .spawn(move || {
                let addr = SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 7000));
                barrier.wait();
                rendezvous(store.as_ref(), i, nodes, &config, addr, &format!("sim{i}"))
            })
            .context("starting a node thread")?;
        handles.push(h);
    }
    barrier.wait();
    let start = Instant::now();
    let mut contexts = Vec::with_capacity(nodes as usize);
    for (i, h) in handles.into_iter().enumerate() {
        let ctx = h
            .join()
            .map_err(|_| anyhow::anyhow!("node {i} panicked"))?
            .with_context(|| format!("node {i}"))?;
        contexts.push(ctx);
    }
    // Checked outside the timed region: the check is the benchmark's, not the protocol's.
    let elapsed: Duration = start.elapsed();
    if let Some(i) = contexts.iter().position(|c| c != &contexts[0]) {
        bail!(
            "node {i} agreed on context {} but node 0 on {}",
            digest::context_digest(&contexts[i]),
            digest::context_digest(&contexts[0])
        );
    }
    Ok((
        elapsed.as_secs_f64() * 1e3,
        digest::context_digest(&contexts[0]),
    ))
}
