//! `distprof bench accuracy`: offset and drift error of every estimator, with and without
//! network correction, in simulation at N = 8, 64 and 512 (the reference scenario of
//! issue 5 with the node count changed), plus the real `distprof local` run.
//! Offset error is measured at every window midpoint against the true offset, drift error
//! against the true mean drift over the window; the reference node itself is excluded
//! (its error is zero by definition).

use super::super::simulate::{quantile, thread_cpu_s};
use distprof::config::EstimatorKind;
use distprof::estimate::{estimate_window_with_history, EstimatorSettings, History, NetworkMode};
use distprof_sim::cluster::{Cluster, Scenario};
use anyhow::Context as _;
use std::io::Write;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// Node counts to simulate.
    #[arg(long, value_delimiter = ',', default_values_t = vec![8u32, 64, 512])]
    nodes: Vec<u32>,
    /// Simulation seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// linfa-svm fits take ~0.1-1 s per edge-window: it runs only at node counts up to
    /// this and on this many windows.
    #[arg(long, default_value_t = 8)]
    svm_max_nodes: u32,
    #[arg(long, default_value_t = 1)]
    svm_windows: u64,
    /// Probe interval per edge, µs (default: the configuration default).
    #[arg(long)]
    cadence_us: Option<u64>,
    /// Estimation window, s (default: the configuration default).
    #[arg(long)]
    window_s: Option<f64>,
    /// Span of the hull's drift fit, s (default: the estimator default).
    #[arg(long)]
    drift_span_s: Option<f64>,
    /// Only these estimators (default: all).
    #[arg(long, value_delimiter = ',', value_parser = parse_estimator)]
    estimators: Vec<EstimatorKind>,
    /// The real `distprof local` run: node processes (0 skips it).
    #[arg(long, default_value_t = 4)]
    local_nodes: u32,
    /// Its duration, s (at the default 15 s window: 4 full windows).
    #[arg(long, default_value_t = 62.0)]
    local_duration: f64,
    /// Its relay jitter: mean exponential queueing per datagram, µs (on a 100 µs one-way
    /// delay each way).
    #[arg(long, default_value_t = 20.0)]
    local_jitter_us: f64,
}

fn parse_estimator(s: &str) -> Result<EstimatorKind, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("unknown estimator `{s}`; use one of {}", distprof::config::fields::ESTIMATORS.join(", ")))
}

#[derive(serde::Serialize, Clone)]
pub struct Row {
    pub source: String,
    pub nodes: u32,
    pub estimator: EstimatorKind,
    pub network_correction: bool,
    pub windows: u64,
    pub samples: usize,
    pub p50_offset_err_ns: Option<f64>,
    pub p99_offset_err_ns: Option<f64>,
    pub p50_drift_err_ppb: Option<f64>,
    pub p99_drift_err_ppb: Option<f64>,
    /// The same p99s without the first `history_windows` windows, whose drift fit
    /// has less history (start-up); reported next to, never instead of, the full figures.
    pub warm_p99_offset_err_ns: Option<f64>,
    pub warm_p99_drift_err_ppb: Option<f64>,
    /// Median thread CPU time of one window's estimate (all edges, network solve, bounds).
    pub estimate_ms_p50: f64,
    /// Share of segments whose bound exceeded the limit, and the median bound.
    pub flagged_fraction: f64,
    pub bound_ns_p50: Option<f64>,
    pub rejected_edges: usize,
    pub unreachable_node_windows: usize,
}

const ESTIMATORS: [EstimatorKind; 4] = [EstimatorKind::Hull, EstimatorKind::Svm, EstimatorKind::Ntp, EstimatorKind::TwoPoint];

#[derive(Default)]
struct Acc {
    off: Vec<f64>,
    drift: Vec<f64>,
    warm_off: Vec<f64>,
    warm_drift: Vec<f64>,
    ms: Vec<f64>,
    bounds: Vec<f64>,
    flagged: usize,
    segments: usize,
    rejected: usize,
    unreachable: usize,
    windows: u64,
}

fn simulate_rows(scenario: &Scenario, args: &Args) -> anyhow::Result<Vec<Row>> {
    let cluster = Cluster::new(scenario.clone()).map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
    let combos: Vec<(EstimatorKind, bool)> = ESTIMATORS
        .iter()
        .filter(|k| args.estimators.is_empty() || args.estimators.contains(k))
        .flat_map(|&k| [(k, true), (k, false)])
        .collect();
    let mut acc: Vec<Acc> = combos.iter().map(|_| Acc::default()).collect();
    let mut histories: Vec<History> = combos.iter().map(|_| History::default()).collect();
    for k in 0..cluster.num_windows() {
        let records = cluster.records(k);
        let spec = cluster.window_spec(k);
        let truth: Vec<_> = (0..scenario.nodes).map(|i| cluster.truth(i, k)).collect();
        for (ci, &(kind, wls)) in combos.iter().enumerate() {
            if kind == EstimatorKind::Svm && (scenario.nodes > args.svm_max_nodes || k >= args.svm_windows) {
                continue;
            }
            let settings = EstimatorSettings {
                estimator: kind,
                network: if wls { NetworkMode::Wls } else { NetworkMode::Tree },
                drift_span_s: args.drift_span_s.unwrap_or(EstimatorSettings::default().drift_span_s),
                ..EstimatorSettings::default()
            };
            let started = thread_cpu_s();
            let est = estimate_window_with_history(&records, &spec, &settings, &mut histories[ci]);
            let a = &mut acc[ci];
            a.ms.push((thread_cpu_s() - started) * 1e3);
            a.windows += 1;
            a.rejected += est.rejected_edges().len();
            a.unreachable += est.unreachable.len();
            for (i, seg) in est.segments.iter().enumerate() {
                if i as u32 == cluster.reference() {
                    continue;
                }
                if let Some(s) = seg {
                    let (eo, ed) = ((s.offset_ns - truth[i].offset_ns).abs(), (s.drift_ppb - truth[i].drift_ppb).abs());
                    a.off.push(eo);
                    a.drift.push(ed);
                    if k >= settings.history_windows(spec.end_local_ns - spec.start_local_ns) as u64 {
                        a.warm_off.push(eo);
                        a.warm_drift.push(ed);
                    }
                    a.bounds.push(s.bound_ns);
                    a.segments += 1;
                    a.flagged += s.flagged as usize;
                }
            }
        }
    }
    Ok(combos
        .iter()
        .zip(acc)
        .filter(|(_, a)| a.windows > 0)
        .map(|(&(kind, wls), mut a)| Row {
            source: "simulation".into(),
            nodes: scenario.nodes,
            estimator: kind,
            network_correction: wls,
            windows: a.windows,
            samples: a.off.len(),
            p50_offset_err_ns: quantile(&mut a.off, 0.5),
            p99_offset_err_ns: quantile(&mut a.off, 0.99),
            p50_drift_err_ppb: quantile(&mut a.drift, 0.5),
            p99_drift_err_ppb: quantile(&mut a.drift, 0.99),
            warm_p99_offset_err_ns: quantile(&mut a.warm_off, 0.99),
            warm_p99_drift_err_ppb: quantile(&mut a.warm_drift, 0.99),
            estimate_ms_p50: quantile(&mut a.ms, 0.5).unwrap_or(0.0),
            flagged_fraction: a.flagged as f64 / a.segments.max(1) as f64,
            bound_ns_p50: quantile(&mut a.bounds, 0.5),
            rejected_edges: a.rejected,
            unreachable_node_windows: a.unreachable,
        })
        .collect())
}

/// The real `distprof local` run with relay jitter: this very binary is spawned as
/// `distprof local --json` (real processes, real UDP through the relay, real files), and
/// its verdict (the default estimator with network correction against the true virtual
/// clocks at every full window's midpoint) becomes the row.
fn local_rows(args: &Args) -> anyhow::Result<Vec<Row>> {
    if args.local_nodes == 0 {
        return Ok(Vec::new());
    }
    let exe = std::env::current_exe().context("locating the distprof binary")?;
    let dir = std::env::temp_dir().join(format!("distprof-bench-accuracy-{}", std::process::id()));
    let out = std::process::Command::new(&exe)
        .args(["local", "--json", "--seed", &args.seed.to_string()])
        .args(["--nodes", &args.local_nodes.to_string()])
        .args(["--duration", &args.local_duration.to_string()])
        .args(["--jitter-us", &args.local_jitter_us.to_string()])
        // The default window and cadence, as in the simulated reference scenario.
        .args(["--window-s", &args.window_s.unwrap_or(distprof::config::Config::default().probe_window_s).to_string()])
        .arg("--output-dir")
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running `{} local`", exe.display()));
    // The run's files are scratch: remove them whatever happened.
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!("`distprof local` failed ({}): {}", out.status, text.trim());
    }
    let last = text.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(last).with_context(|| format!("`distprof local --json`: last line is not JSON: `{last}`"))?;
    let f = |k: &str| v[k].as_f64();
    let estimator: EstimatorKind = serde_json::from_value(v["estimator"].clone()).unwrap_or(EstimatorKind::Hull);
    Ok(vec![Row {
        source: "local".into(),
        nodes: args.local_nodes,
        estimator,
        network_correction: v["network_correction"].as_bool().unwrap_or(true),
        windows: v["full_windows"].as_u64().unwrap_or(0),
        samples: v["samples"].as_u64().unwrap_or(0) as usize,
        p50_offset_err_ns: f("p50_offset_error_ns"),
        p99_offset_err_ns: f("p99_offset_error_ns"),
        p50_drift_err_ppb: f("p50_drift_error_ppb"),
        p99_drift_err_ppb: f("p99_drift_error_ppb"),
        warm_p99_offset_err_ns: None,
        warm_p99_drift_err_ppb: None,
        estimate_ms_p50: f("estimate_ms_p50").unwrap_or(0.0),
        flagged_fraction: f("flagged_fraction").unwrap_or(0.0),
        bound_ns_p50: f("bound_ns_p50"),
        rejected_edges: v["rejected_edges"].as_array().map_or(0, Vec::len),
        unreachable_node_windows: v["unreachable_node_windows"].as_u64().unwrap_or(0) as usize,
    }])
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(bad) = args.nodes.iter().find(|&&n| !(2..=distprof_sim::cluster::MAX_NODES).contains(&n)) {
        anyhow::bail!("--nodes {bad}: each node count must be in 2..={}", distprof_sim::cluster::MAX_NODES);
    }
    let mut reference = Scenario { seed: args.seed, ..Scenario::reference() };
    reference.cadence_us = args.cadence_us.unwrap_or(reference.cadence_us);
    reference.window_s = args.window_s.unwrap_or(reference.window_s);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>10} {:>5} {:>9} {:>4} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>6}",
        "source", "nodes", "estimator", "net", "off_p50", "off_p99", "drift_p50", "drift_p99", "est_ms", "bound50", "flag%"
    )?;
    let mut rows = Vec::new();
    for &n in &args.nodes {
        let scenario = Scenario { nodes: n, ..reference.clone() };
        for r in simulate_rows(&scenario, &args)? {
            print_row(&mut out, &r)?;
            rows.push(r);
        }
    }
    for r in local_rows(&args)? {
        print_row(&mut out, &r)?;
        rows.push(r);
    }
    let find = |source: &str, n: Option<u32>| {
        rows.iter().find(|r| {
            r.source == source && n.is_none_or(|n| r.nodes == n) && r.estimator == EstimatorKind::Hull && r.network_correction
        })
    };
    let summary = serde_json::json!({
        "rows": rows,
        "scenario": reference,
        "sim64_p99_offset_ns": find("simulation", Some(64)).and_then(|r| r.p99_offset_err_ns),
        "sim64_p99_drift_ppb": find("simulation", Some(64)).and_then(|r| r.p99_drift_err_ppb),
        "estimate512_ms": find("simulation", Some(512)).map(|r| r.estimate_ms_p50),
        "sim64_warm_p99_offset_ns": find("simulation", Some(64)).and_then(|r| r.warm_p99_offset_err_ns),
        "sim64_warm_p99_drift_ppb": find("simulation", Some(64)).and_then(|r| r.warm_p99_drift_err_ppb),
        "local_p99_offset_ns": find("local", None).and_then(|r| r.p99_offset_err_ns),
        "note": format!(
            "headline: hull with network correction; estimate512_ms: one window, 512 nodes with out-degree 8 \
             (16 edges per node counting both ends), thread CPU time, median over windows; hull drift \
             over the current and the past windows within the drift span (warm_*: windows with full history); svm only at N <= {} and \
             on {} window(s) (0.1-1 s per edge fit); local run: {} `distprof local` processes for {} s through the relay, \
             100 us one way plus exponential jitter of mean {} us, offset error at every full window's midpoint",
            args.svm_max_nodes, args.svm_windows, args.local_nodes, args.local_duration, args.local_jitter_us
        ),
    });
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&summary)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(out: &mut impl Write, r: &Row) -> std::io::Result<()> {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    writeln!(
        out,
        "{:>10} {:>5} {:>9} {:>4} {:>8} {:>8} {:>9} {:>9} {:>8.2} {:>8} {:>6.1}",
        r.source,
        r.nodes,
        format!("{:?}", r.estimator).to_lowercase(),
        if r.network_correction { "wls" } else { "tree" },
        f(r.p50_offset_err_ns),
        f(r.p99_offset_err_ns),
        f(r.p50_drift_err_ppb),
        f(r.p99_drift_err_ppb),
        r.estimate_ms_p50,
        f(r.bound_ns_p50),
        r.flagged_fraction * 100.0
    )
}
