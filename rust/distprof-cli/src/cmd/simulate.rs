//! `distprof simulate`: the real estimation code on N simulated nodes. Prints, per node and
//! window, the true and estimated offset and drift, the error and the bound; `--json`
//! prints one JSON object as the last line. With `--out DIR` it writes the run directory a
//! real run writes instead (one JSONL per node, the true clocks in `sim_truth.json`), for
//! `distprof report --run-dir DIR` and `distprof merge --run-dir DIR`.

use crate::stats::quantile;
use distprof::clock::thread_cpu_s;
use anyhow::Context;
use distprof::config::{Config, EstimatorKind};
use distprof::estimate::{estimate_run_windows, estimate_window, EstimatorSettings, NetworkMode};
use distprof_sim::cluster::{scenarios, Cluster, Scenario};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The clocks and stamps to simulate, by name (issue 29's real clocks; the others are
    /// the reference scenario with one thing changed).
    #[arg(long, default_value = "reference", value_parser = crate::scenario_arg::clock_scenarios())]
    scenario: String,
    /// Number of simulated nodes (2..=16384).
    #[arg(long, default_value_t = 64)]
    nodes: u32,
    /// Seed of the simulation; the same seed gives the same output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated run length in seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Peers each node probes.
    #[arg(long, default_value_t = 8)]
    out_degree: u32,
    /// Per-edge path asymmetry, uniform in +- this many ns (0: symmetric paths).
    #[arg(long, default_value_t = 0.0)]
    asymmetry_ns: f64,
    /// Probe interval per edge, µs (default: the configuration default).
    #[arg(long)]
    cadence_us: Option<u64>,
    /// Estimation window, s (default: the configuration default).
    #[arg(long)]
    window_s: Option<f64>,
    /// Estimator: hull, svm, ntp or two_point.
    #[arg(long, default_value = "hull")]
    estimator: String,
    /// Per-edge estimates only (spanning tree), no network correction.
    #[arg(long)]
    no_network: bool,
    /// Each window on its own (no drift fit over the neighbouring windows).
    #[arg(long)]
    no_history: bool,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// Write the run directory a real run writes (probe_windows_node<id>.jsonl per node and
    /// the true clocks in sim_truth.json) into DIR instead of estimating in memory; then
    /// `distprof report --run-dir DIR`.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["no_network", "no_history"])]
    out: Option<PathBuf>,
}

pub fn parse_estimator(s: &str) -> anyhow::Result<EstimatorKind> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .with_context(|| format!("--estimator {s:?}: expected one of hull, svm, ntp, two_point"))
}

#[derive(serde::Serialize)]
struct NodeRow {
    window: u64,
    node: u32,
    true_offset_ns: f64,
    est_offset_ns: Option<f64>,
    offset_err_ns: Option<f64>,
    true_drift_ppb: f64,
    est_drift_ppb: Option<f64>,
    drift_err_ppb: Option<f64>,
    bound_ns: Option<f64>,
    flagged: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut scenario = Scenario::reference();
    scenario.nodes = args.nodes;
    scenario.seed = args.seed;
    scenario.duration_s = args.duration;
    scenario.out_degree = args.out_degree;
    scenario.cadence_us = args.cadence_us.unwrap_or(scenario.cadence_us);
    scenario.window_s = args.window_s.unwrap_or(scenario.window_s);
    let named = scenarios::find(&args.scenario).map_err(|e| anyhow::anyhow!("--scenario: {e}"))?;
    let mut scenario = named.apply(scenario);
    scenario.asymmetry_max_ns = args.asymmetry_ns;
    let cluster = Cluster::new(scenario).map_err(|e| anyhow::anyhow!("bad simulation arguments: {e}"))?;
    let config = Config { estimator: parse_estimator(&args.estimator)?, ..Config::default() };
    if let Some(dir) = &args.out {
        return write_run_dir(&cluster, &config, dir, args.json);
    }
    let mut settings = EstimatorSettings::from_config(&config);
    if args.no_network {
        settings.network = NetworkMode::Tree;
    }
    let mut rows = Vec::new();
    let mut rejected = Vec::new();
    let mut unreachable = Vec::new();
    let mut estimate_ms = Vec::new();
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "window node  true_offset_ns   est_offset_ns  err_ns  true_drift_ppb  est_drift_ppb  err_ppb  bound_ns flag")?;
    }
    let windows = (0..cluster.num_windows()).map(|k| (cluster.records(k), cluster.window_spec(k)));
    let estimates: Vec<_> = if args.no_history {
        windows
            .map(|(records, spec)| {
                let started = thread_cpu_s();
                let est = estimate_window(&records, &spec, &settings);
                (est, (thread_cpu_s() - started) * 1e3)
            })
            .collect()
    } else {
        estimate_run_windows(windows, &settings)
    };
    for (k, (est, ms)) in (0..).zip(estimates) {
        estimate_ms.push(ms);
        for (a, b) in est.rejected_edges() {
            rejected.push(serde_json::json!({"window": k, "src": a, "dst": b}));
        }
        for &n in &est.unreachable {
            unreachable.push(serde_json::json!({"window": k, "node": n}));
        }
        for node in 0..cluster.scenario.nodes {
            let truth = cluster.truth(node, k);
            let seg = est.segments[node as usize];
            let row = NodeRow {
                window: k,
                node,
                true_offset_ns: truth.offset_ns,
                est_offset_ns: seg.map(|s| s.offset_ns),
                offset_err_ns: seg.map(|s| s.offset_ns - truth.offset_ns),
                true_drift_ppb: truth.drift_ppb,
                est_drift_ppb: seg.map(|s| s.drift_ppb),
                drift_err_ppb: seg.map(|s| s.drift_ppb - truth.drift_ppb),
                bound_ns: seg.map(|s| s.bound_ns),
                flagged: seg.is_none_or(|s| s.flagged),
            };
            if !args.json {
                let f = |v: Option<f64>, w: usize, p: usize| v.map_or(format!("{:>w$}", "-"), |v| format!("{v:>w$.p$}"));
                writeln!(
                    out,
                    "{:>6} {:>4} {:>15.1} {} {} {:>15.3} {} {} {} {}",
                    k,
                    node,
                    row.true_offset_ns,
                    f(row.est_offset_ns, 15, 1),
                    f(row.offset_err_ns, 7, 1),
                    row.true_drift_ppb,
                    f(row.est_drift_ppb, 14, 3),
                    f(row.drift_err_ppb, 8, 2),
                    f(row.bound_ns, 9, 0),
                    if row.flagged { "!" } else { "" }
                )?;
            }
            rows.push(row);
        }
    }
    let mut off: Vec<f64> = rows.iter().filter(|r| r.node != cluster.reference()).filter_map(|r| r.offset_err_ns.map(f64::abs)).collect();
    let mut dr: Vec<f64> = rows.iter().filter(|r| r.node != cluster.reference()).filter_map(|r| r.drift_err_ppb.map(f64::abs)).collect();
    let summary = serde_json::json!({
        "scenario": cluster.scenario,
        "clock_scenario": named.name,
        "estimator": args.estimator,
        "network_correction": !args.no_network,
        "p50_offset_err_ns": quantile(&mut off, 0.5),
        "p99_offset_err_ns": quantile(&mut off, 0.99),
        "p50_drift_err_ppb": quantile(&mut dr, 0.5),
        "p99_drift_err_ppb": quantile(&mut dr, 0.99),
        "mean_estimate_cpu_ms": estimate_ms.iter().sum::<f64>() / estimate_ms.len().max(1) as f64,
        "rejected_edges": &rejected,
        "unreachable": &unreachable,
    });
    if args.json {
        let mut full = summary;
        full["nodes"] = serde_json::to_value(&rows)?;
        writeln!(out, "{}", serde_json::to_string(&full)?)?;
    } else {
        // Plain text without `--json`: the figures a person reads, one line each.
        let ns = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.1}"));
        let sc = &cluster.scenario;
        writeln!(
            out,
            "scenario {}: {} nodes, out-degree {}, {} windows of {} s, estimator {}{}",
            named.name,
            sc.nodes,
            sc.out_degree,
            cluster.num_windows(),
            sc.window_s,
            args.estimator,
            if args.no_network { ", no network correction" } else { "" }
        )?;
        writeln!(out, "offset error: p50 {} ns, p99 {} ns", ns(&summary["p50_offset_err_ns"]), ns(&summary["p99_offset_err_ns"]))?;
        writeln!(out, "drift error: p50 {} ppb, p99 {} ppb", ns(&summary["p50_drift_err_ppb"]), ns(&summary["p99_drift_err_ppb"]))?;
        writeln!(out, "estimate: {} ms of CPU per window (mean)", ns(&summary["mean_estimate_cpu_ms"]))?;
        writeln!(out, "rejected edges: {}, unreachable node-windows: {}", rejected.len(), unreachable.len())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Seconds between two progress lines on stderr.
const PROGRESS_EVERY_S: f64 = 2.0;

/// `--out DIR`: the simulated run as files, with a progress line every few seconds.
fn write_run_dir(cluster: &Cluster, config: &Config, dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let mut last_print = 0.0;
    let s = &cluster.scenario;
    eprintln!(
        "distprof simulate: {} nodes, {} window(s) of {} s, writing {}",
        s.nodes,
        cluster.num_windows(),
        s.window_s,
        dir.display()
    );
    let summary = cluster
        .write_run_dir(dir, config, &mut |done, total| {
            let t = started.elapsed().as_secs_f64();
            if t - last_print >= PROGRESS_EVERY_S && done < total {
                last_print = t;
                eprintln!("distprof simulate: {done}/{total} node files written ({t:.1} s)");
            }
        })
        .with_context(|| {
            format!("--out {}: cannot write the run directory; check that it is a writable directory", dir.display())
        })?;
    let secs = started.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({
            "run_dir": dir,
            "truth": dir.join(distprof_sim::cluster::TRUTH_FILE),
            "files": summary.files,
            "windows": summary.windows,
            "records": summary.records,
            "bytes": summary.bytes,
            "seconds": secs,
            "scenario": s,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "wrote {} node files ({} windows, {} records, {:.1} MB) and {} in {secs:.1} s to {}",
            summary.files,
            summary.windows,
            summary.records,
            summary.bytes as f64 / 1e6,
            distprof_sim::cluster::TRUTH_FILE,
            dir.display()
        )?;
        writeln!(out, "next: distprof report --run-dir {}", dir.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

