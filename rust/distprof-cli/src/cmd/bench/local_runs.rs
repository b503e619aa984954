//! Real `distprof local` runs for the accuracy benches: this very binary spawned as
//! `distprof local --json` (real processes, real UDP through the relay, real files), and
//! their verdicts against the true virtual clocks pooled into one `Row`.

use super::accuracy::{Fit, Row};
use crate::stats::quantile;
use anyhow::Context as _;
use distprof::config::EstimatorKind;

/// A `distprof local` run's parameters.
pub(super) struct LocalRun {
    pub nodes: u32,
    pub duration_s: f64,
    pub window_s: f64,
    pub delay_us: f64,
    pub jitter_us: f64,
    /// More flags of `distprof local`.
    pub extra: Vec<String>,
}

/// The runs on every seed, their node-windows pooled into one row.
pub(super) fn local_row(run: &LocalRun, seeds: &[u64], source: &str) -> anyhow::Result<Row> {
    let runs = seeds.iter().map(|&seed| local_json(run, seed)).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(pooled_local_row(run.nodes, &runs, source))
}

/// `distprof local --json` verdicts pooled into one row: every node-window of every run
/// (each judged against its true virtual clocks), the flagged share weighted by them.
pub(super) fn pooled_local_row(nodes: u32, runs: &[serde_json::Value], source: &str) -> Row {
    let nws: Vec<&serde_json::Value> = runs.iter().flat_map(|v| v["node_windows"].as_array().into_iter().flatten()).collect();
    let col = |k: &str| -> Vec<f64> { nws.iter().filter_map(|nw| nw[k].as_f64()).collect() };
    let (mut off, mut drift) = (col("error_ns"), col("drift_error_ppb"));
    off.iter_mut().chain(drift.iter_mut()).for_each(|x| *x = x.abs());
    let (mut bounds, mut sigmas) = (col("bound_ns"), col("uncertainty_ns"));
    let mut ratios: Vec<f64> = off.iter().zip(&sigmas).map(|(e, s)| s / e.max(1e-3)).collect();
    let within_2_sigma = off.iter().zip(&sigmas).filter(|(e, s)| **e <= 2.0 * **s).count();
    let sum = |k: &str| runs.iter().map(|v| v[k].as_u64().unwrap_or(0)).sum::<u64>();
    let samples = sum("samples") as usize;
    let flagged: f64 = runs.iter().map(|v| v["flagged_fraction"].as_f64().unwrap_or(0.0) * v["samples"].as_f64().unwrap_or(0.0)).sum();
    let mut ms: Vec<f64> = runs.iter().filter_map(|v| v["estimate_ms_p50"].as_f64()).collect();
    let first = runs.first().cloned().unwrap_or_default();
    Row {
        source: source.into(),
        nodes,
        estimator: serde_json::from_value(first["estimator"].clone()).unwrap_or(EstimatorKind::Hull),
        network_correction: first["network_correction"].as_bool().unwrap_or(true),
        fit: Fit::Run,
        windows: sum("full_windows"),
        samples,
        p50_offset_err_ns: quantile(&mut off, 0.5),
        p99_offset_err_ns: quantile(&mut off, 0.99),
        p50_drift_err_ppb: quantile(&mut drift, 0.5),
        p99_drift_err_ppb: quantile(&mut drift, 0.99),
        estimate_ms_p50: quantile(&mut ms, 0.5).unwrap_or(0.0),
        flagged_fraction: flagged / samples.max(1) as f64,
        bound_ns_p50: quantile(&mut bounds, 0.5),
        uncertainty_ns_p50: quantile(&mut sigmas, 0.5),
        within_2_sigma,
        // local's JSON states no drift uncertainty per node-window: not judged here.
        drift_within_2_sigma: 0,
        drift_uncertainty_known: 0,
        uncertainty_to_error_ratio_p50: quantile(&mut ratios, 0.5),
        rejected_edges: runs.iter().map(|v| v["rejected_edges"].as_array().map_or(0, Vec::len)).sum(),
        unreachable_node_windows: sum("unreachable_node_windows") as usize,
    }
}

/// One real `distprof local --json` run (this very binary, real processes over the
/// relay) and its last line, the verdict against the true virtual clocks.
pub(super) fn local_json(run: &LocalRun, seed: u64) -> anyhow::Result<serde_json::Value> {
    eprintln!(
        "bench accuracy: real `distprof local` run, {} nodes for {} s ({} us one way, jitter {} us{}), seed {seed}",
        run.nodes,
        run.duration_s,
        run.delay_us,
        run.jitter_us,
        if run.extra.is_empty() { String::new() } else { format!(", {}", run.extra.join(" ")) }
    );
    let dir = std::env::temp_dir().join(format!("distprof-bench-accuracy-{}", std::process::id()));
    let mut cmd = crate::self_command()?;
    let program = std::path::PathBuf::from(cmd.get_program());
    let out = cmd
        .args(["local", "--json", "--seed", &seed.to_string()])
        .args(["--nodes", &run.nodes.to_string()])
        .args(["--duration", &run.duration_s.to_string()])
        .args(["--delay-us", &run.delay_us.to_string()])
        .args(["--jitter-us", &run.jitter_us.to_string()])
        .args(["--window-s", &run.window_s.to_string()])
        .args(&run.extra)
        .arg("--out")
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running `{} local`", program.display()));
    // The run's files are scratch: remove them whatever happened.
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!("`distprof local` failed ({}): {}", out.status, text.trim());
    }
    let last = text.lines().last().unwrap_or("");
    serde_json::from_str(last).with_context(|| format!("`distprof local --json`: last line is not JSON: `{last}`"))
}

