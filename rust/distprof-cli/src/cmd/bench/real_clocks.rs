//! `distprof bench accuracy`'s `real_clocks` (issue 29): today's estimator on clocks as
//! real clusters have them. Every named scenario (`distprof_sim::cluster::scenarios`) in
//! the simulator at 64 nodes on seeds no test uses, and those `distprof local` can emulate
//! in `local`; per scenario the p99 offset error, the share of node-windows whose truth is
//! within 2 sigma, and the flagged share; in the simulator also the same figures for the
//! online model (what each window's close knows, `estimate_window_with_history`, which
//! re-anchors as the run model does when the reference dies). Plus the uncertainty's
//! coverage over many real `local` runs of 3-6 nodes, and how many node-windows the
//! reference's death leaves without a model.
//!
//! The truth after the reference dies is its clock running on as it would have: the one
//! timeline continues the dead reference's (see docs/estimation.md).

use super::accuracy::{Acc, Fit, Row};
use super::local_runs::{local_json, pooled_local_row, LocalRun};
use distprof::clock::thread_cpu_s;
use distprof::estimate::{estimate_run_windows, estimate_window_with_history, EstimatorSettings, History};
use distprof_sim::cluster::scenarios::{LocalEmulation, NamedScenario, SCENARIOS};
use distprof_sim::cluster::{Cluster, Scenario, EPOCH_NS};
use serde::Serialize;

#[derive(clap::Args)]
pub struct RealClocksArgs {
    /// Skip `real_clocks` and the local coverage runs altogether.
    #[arg(long)]
    no_real_clocks: bool,
    /// Nodes of each simulated real-clock run (the figures of issue 29 are at 64).
    #[arg(long, default_value_t = 64)]
    real_clocks_nodes: u32,
    /// Simulated runs per named scenario, 64 nodes each, seeds `--real-clocks-first-seed`,
    /// +1, ... (0 skips the simulated part of `real_clocks`).
    #[arg(long, default_value_t = 4)]
    pub real_clocks_seeds: u64,
    /// First seed of the real-clock runs (simulated and local); no test uses 101 and up.
    #[arg(long, default_value_t = 101)]
    pub real_clocks_first_seed: u64,
    /// Only these named scenarios (comma-separated, as `distprof simulate --scenario`
    /// names them; empty: all). The summary keys then cover only these.
    #[arg(long, value_delimiter = ',')]
    pub real_clocks_scenarios: Vec<String>,
    /// One `distprof local` run of 4 nodes per scenario local can emulate, this long, s
    /// (0 skips them).
    #[arg(long, default_value_t = 20.0)]
    real_clocks_local_duration: f64,
    /// `local_coverage_2sigma`: `distprof local` runs (its defaults, 3, 4, 5, 6 nodes in
    /// turn, seeds 201, 202, ...) until this many node-windows are judged (0 skips them;
    /// ~40 s of real time per run, ~5 runs for 300).
    #[arg(long, default_value_t = 300)]
    local_coverage_node_windows: usize,
    /// Length of each of those runs, s.
    #[arg(long, default_value_t = 40.0)]
    local_coverage_duration: f64,
}

/// One scenario's figures from one source.
#[derive(Serialize, Clone)]
pub struct ScenarioFigures {
    pub scenario: &'static str,
    /// "simulation" or "local".
    pub source: &'static str,
    pub nodes: u32,
    pub seeds: Vec<u64>,
    /// The run model's figures (the row's top-level keys).
    #[serde(flatten)]
    pub model: ModelFigures,
    /// The online model's figures on the same runs (simulation only; None from local):
    /// each window as it closes, with only the past windows (no pieces' later
    /// neighbours; re-anchored as the run model is where the reference cannot place a
    /// node), as the JSONL's window knows it.
    pub online: Option<OnlineFigures>,
    pub asymmetry_per_hop_ns: f64,
    pub within_allowance: bool,
}

/// One model's p99 offset error, 2-sigma coverages and flagged share over one scenario's
/// runs.
#[derive(Serialize, Clone)]
pub struct ModelFigures {
    /// Node-windows judged (the reference's own excluded).
    pub node_windows: usize,
    pub p99_offset_err_ns: Option<f64>,
    pub coverage_2sigma: Option<f64>,
    /// Node-windows whose drift error is within twice the stated drift sigma, of those
    /// that state one.
    pub drift_coverage_2sigma: Option<f64>,
    pub flagged_fraction: f64,
    pub unreachable_node_windows: usize,
}

impl ModelFigures {
    fn of(row: &Row) -> ModelFigures {
        ModelFigures {
            node_windows: row.samples,
            p99_offset_err_ns: row.p99_offset_err_ns,
            coverage_2sigma: coverage(row.within_2_sigma, row.samples),
            drift_coverage_2sigma: coverage(row.drift_within_2_sigma, row.drift_uncertainty_known),
            flagged_fraction: row.flagged_fraction,
            unreachable_node_windows: row.unreachable_node_windows,
        }
    }

    /// One line of the bench's text output; `extra` ends it.
    fn print(&self, source: &str, scenario: &str, what: &str, extra: &str) {
        println!(
            "real clocks {:>10} {:>17}: {:>5} node-windows{what}, p99 offset error {:>12} ns, within 2 sigma {:>6} (drift {:>6}), flagged {:>5.3}, unreachable {}{extra}",
            source,
            scenario,
            self.node_windows,
            optional(self.p99_offset_err_ns, 1),
            optional(self.coverage_2sigma, 3),
            optional(self.drift_coverage_2sigma, 3),
            self.flagged_fraction,
            self.unreachable_node_windows
        );
    }
}

fn optional(x: Option<f64>, precision: usize) -> String {
    x.map_or("-".to_string(), |x| format!("{x:.precision$}"))
}

/// The online model's figures, and the wander it measured.
#[derive(Serialize, Clone)]
pub struct OnlineFigures {
    #[serde(flatten)]
    pub model: ModelFigures,
    /// The median over nodes and runs of the wander the online model measured by each
    /// run's end (ppb/sqrt(s) against the reference; `History::wander_q_ppb`).
    pub wander_q_ppb_p50: Option<f64>,
}

fn coverage(within: usize, of: usize) -> Option<f64> {
    (of > 0).then(|| within as f64 / of as f64)
}

/// What `real_clocks` adds to the JSON.
pub struct Figures {
    pub scenarios: Vec<ScenarioFigures>,
    pub min_coverage_2sigma: Option<f64>,
    pub max_coverage_2sigma: Option<f64>,
    /// The online model's minimum over the simulated scenarios within the allowance.
    pub online_min_coverage_2sigma: Option<f64>,
    pub disciplined_p99_offset_ns: Option<f64>,
    pub reference_failover_unreachable_fraction: Option<f64>,
    pub local_coverage: Option<LocalCoverage>,
}

impl Figures {
    /// The summary keys of `bench accuracy --json` that these figures give, and their
    /// goals. The reference failover's fraction is the dedicated failover runs' where they
    /// ran, else the `reference-dies` scenario's.
    pub fn summary(&self, failover: Option<&super::failover::FailoverFigures>) -> (serde_json::Value, serde_json::Value) {
        let keys = serde_json::json!({
            "real_clocks": self.scenarios,
            "real_clocks_min_coverage_2sigma": self.min_coverage_2sigma,
            "real_clocks_max_coverage_2sigma": self.max_coverage_2sigma,
            "real_clocks_online_min_coverage_2sigma": self.online_min_coverage_2sigma,
            "local_coverage_2sigma": self.local_coverage.as_ref().and_then(|c| c.coverage_2sigma()),
            "local_coverage_2sigma_within_allowance": self.local_coverage.as_ref().and_then(|c| c.within_allowance.coverage_2sigma()),
            "local_coverage": self.local_coverage,
            "disciplined_p99_offset_ns": self.disciplined_p99_offset_ns,
            "reference_failover": failover,
            "reference_failover_unreachable_fraction": failover.map(|f| f.unreachable_fraction).or(self.reference_failover_unreachable_fraction),
        });
        let goals = serde_json::json!({
            "real_clocks_min_coverage_2sigma": ">= 0.90 (over the scenarios within the asymmetry allowance)",
            "real_clocks_max_coverage_2sigma": "<= 0.99 (over every scenario)",
            "real_clocks_online_min_coverage_2sigma": ">= 0.90 (the online model, simulated scenarios within the allowance)",
            "local_coverage_2sigma": "0.90 - 0.98",
            "disciplined_p99_offset_ns": "<= 150",
            "reference_failover_unreachable_fraction": "0",
        });
        (keys, goals)
    }
}

/// The local coverage runs: each run's count, and all of them pooled.
#[derive(Serialize)]
pub struct LocalCoverage {
    /// Per run: nodes, node-windows judged, within 2 sigma, and those whose true path
    /// asymmetry to the reference exceeded the allowance (and were outside 2 sigma).
    pub runs: Vec<serde_json::Value>,
    pub pooled: Row,
    /// The node-windows whose true path asymmetry to the reference is within the
    /// allowance the uncertainty states (`cluster::path_asymmetry`): where its assumption
    /// held on this machine.
    pub within_allowance: AssumptionHeld,
}

impl LocalCoverage {
    pub fn coverage_2sigma(&self) -> Option<f64> {
        (self.pooled.samples > 0).then(|| self.pooled.within_2_sigma as f64 / self.pooled.samples as f64)
    }
}

/// Every flag of `real_clocks` that can be wrong, checked before any run starts.
pub fn check_args(args: &RealClocksArgs) -> anyhow::Result<()> {
    if !(2..=distprof_sim::cluster::MAX_NODES).contains(&args.real_clocks_nodes) {
        anyhow::bail!("--real-clocks-nodes {}: must be in 2..={}", args.real_clocks_nodes, distprof_sim::cluster::MAX_NODES);
    }
    for name in &args.real_clocks_scenarios {
        distprof_sim::cluster::scenarios::find(name).map_err(|e| anyhow::anyhow!("--real-clocks-scenarios: {e}"))?;
    }
    Ok(())
}

/// Node-windows of `local` runs whose true path asymmetry to the reference is within the
/// allowance their uncertainty states, and how many of them are within 2 sigma.
#[derive(Serialize, Default, Debug, PartialEq)]
pub struct AssumptionHeld {
    pub node_windows: usize,
    pub within_2_sigma: usize,
}

impl AssumptionHeld {
    /// Over the `node_windows` of `local --json` verdicts (each with its
    /// `asymmetry_allowance_ns`); a node-window whose asymmetry is unknown counts as within.
    pub fn of_runs(runs: &[serde_json::Value]) -> AssumptionHeld {
        let mut held = AssumptionHeld::default();
        for v in runs {
            let allowance_ns = v["asymmetry_allowance_ns"].as_f64().unwrap_or(f64::INFINITY);
            for nw in v["node_windows"].as_array().into_iter().flatten() {
                if nw["path_asymmetry_ns"].as_f64().is_some_and(|a| a.abs() > allowance_ns) {
                    continue;
                }
                let (Some(e), Some(s)) = (nw["error_ns"].as_f64(), nw["uncertainty_ns"].as_f64()) else { continue };
                held.node_windows += 1;
                held.within_2_sigma += (e.abs() <= 2.0 * s) as usize;
            }
        }
        held
    }

    pub fn coverage_2sigma(&self) -> Option<f64> {
        (self.node_windows > 0).then(|| self.within_2_sigma as f64 / self.node_windows as f64)
    }
}

/// The scenarios probed as `probing` is (its cadence, pair gap, window and out-degree; the
/// rest of it is the reference scenario's) with the estimator's `settings` (their
/// `asymmetry_allowance_ns` is the allowance the uncertainty states:
/// `real_clocks_min_coverage_2sigma` is over the scenarios within it). The local runs use
/// `distprof local`'s own configuration.
pub fn run(args: &RealClocksArgs, probing: &Scenario, settings: &EstimatorSettings) -> anyhow::Result<Figures> {
    let mut scenarios = Vec::new();
    let mut failover = None;
    if args.no_real_clocks {
        return Ok(Figures {
            scenarios,
            min_coverage_2sigma: None,
            max_coverage_2sigma: None,
            online_min_coverage_2sigma: None,
            disciplined_p99_offset_ns: None,
            reference_failover_unreachable_fraction: None,
            local_coverage: None,
        });
    }
    check_args(args)?;
    let chosen = |n: &&NamedScenario| args.real_clocks_scenarios.is_empty() || args.real_clocks_scenarios.iter().any(|s| s == n.name);
    if args.real_clocks_seeds > 0 {
        for named in SCENARIOS.iter().filter(chosen) {
            let (figures, unreachable) = simulate(named, args, probing, settings)?;
            print(&figures);
            if named.name == "reference-dies" {
                failover = unreachable;
            }
            scenarios.push(figures);
        }
    }
    if args.real_clocks_local_duration > 0.0 {
        for named in SCENARIOS.iter().filter(chosen).filter(|n| !matches!(n.local, LocalEmulation::Cannot(_) | LocalEmulation::Same)) {
            let figures = local(named, args, settings.asymmetry_allowance_ns)?;
            print(&figures);
            scenarios.push(figures);
        }
    }
    // The goal's floor holds where the uncertainty's assumption does; its ceiling (an
    // uncertainty so wide it says nothing) everywhere.
    let within: Vec<f64> = scenarios.iter().filter(|s| s.within_allowance).filter_map(|s| s.model.coverage_2sigma).collect();
    let all: Vec<f64> = scenarios.iter().filter_map(|s| s.model.coverage_2sigma).collect();
    let online_within = scenarios.iter().filter(|s| s.within_allowance).filter_map(|s| s.online.as_ref()?.model.coverage_2sigma);
    let online_min_coverage_2sigma = online_within.reduce(f64::min);
    let disciplined = scenarios.iter().find(|s| s.scenario == "disciplined" && s.source == "simulation");
    Ok(Figures {
        min_coverage_2sigma: within.iter().copied().reduce(f64::min),
        max_coverage_2sigma: all.iter().copied().reduce(f64::max),
        online_min_coverage_2sigma,
        disciplined_p99_offset_ns: disciplined.and_then(|s| s.model.p99_offset_err_ns),
        reference_failover_unreachable_fraction: failover,
        local_coverage: local_coverage(args)?,
        scenarios,
    })
}

fn print(f: &ScenarioFigures) {
    f.model.print(f.source, f.scenario, "", "");
    if let Some(o) = &f.online {
        o.model.print(f.source, f.scenario, " online", &format!(", wander {} ppb/sqrt(s)", optional(o.wander_q_ppb_p50, 1)));
    }
}

/// The scenario at `real_clocks_nodes` (64) nodes on `real_clocks_seeds` seeds, hull with network correction
/// as a run delivers it and as each window closes (the online model); for a scenario in which a node dies, also the share of the
/// surviving nodes' windows from its death on that have no model.
fn simulate(
    named: &NamedScenario,
    args: &RealClocksArgs,
    probing: &Scenario,
    settings: &EstimatorSettings,
) -> anyhow::Result<(ScenarioFigures, Option<f64>)> {
    let nodes = args.real_clocks_nodes;
    eprintln!("bench accuracy: real clocks, {} in the simulator, {} run(s) of {nodes} nodes", named.name, args.real_clocks_seeds);
    let seeds: Vec<u64> = (args.real_clocks_first_seed..args.real_clocks_first_seed + args.real_clocks_seeds).collect();
    let (mut acc, mut online, mut online_q) = (Acc::default(), Acc::default(), Vec::new());
    let (mut after_death, mut unreachable_after_death) = (0usize, 0usize);
    for &seed in &seeds {
        let c = Cluster::new(named.apply(Scenario { nodes, seed, ..probing.clone() }))
            .map_err(|e| anyhow::anyhow!("scenario {}: {e}", named.name))?;
        let mut history = History::default();
        for k in 0..c.num_windows() {
            let started = thread_cpu_s();
            let est = estimate_window_with_history(&c.records(k), &c.window_spec(k), settings, &mut history);
            online.add(&c, &est, (thread_cpu_s() - started) * 1e3);
        }
        online_q.extend(history.wander_q_ppb().into_iter().flatten());
        let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
        for (est, ms) in estimate_run_windows(inputs, settings) {
            acc.add(&c, &est, ms);
            if let Some(death) = c.scenario.death {
                // Every window that ends after the death: the dead node is silent in all or
                // part of it.
                let spec = c.window_spec(est.window_id);
                if (spec.end_local_ns - EPOCH_NS) as f64 > death.at_s * 1e9 {
                    let survivors = (0..).zip(&est.segments).filter(|(i, _)| *i != death.node);
                    for (_, seg) in survivors {
                        after_death += 1;
                        unreachable_after_death += seg.is_none() as usize;
                    }
                }
            }
        }
    }
    let unreachable = (after_death > 0).then(|| unreachable_after_death as f64 / after_death as f64);
    let row = acc.row(nodes, distprof::config::EstimatorKind::Hull, true, Fit::Run);
    let mut figures = figures(named, "simulation", &row, seeds, settings.asymmetry_allowance_ns);
    let online = online.row(nodes, distprof::config::EstimatorKind::Hull, true, Fit::Online);
    figures.online = Some(OnlineFigures { model: ModelFigures::of(&online), wander_q_ppb_p50: crate::stats::quantile(&mut online_q, 0.5) });
    Ok((figures, unreachable))
}

/// A scenario's figures from its row.
fn figures(named: &NamedScenario, source: &'static str, row: &Row, seeds: Vec<u64>, allowance_ns: f64) -> ScenarioFigures {
    ScenarioFigures {
        scenario: named.name,
        source,
        nodes: row.nodes,
        seeds,
        model: ModelFigures::of(row),
        online: None,
        asymmetry_per_hop_ns: named.asymmetry_per_hop_ns,
        within_allowance: named.asymmetry_per_hop_ns <= allowance_ns,
    }
}

/// One `distprof local --clock-scenario` run of 4 nodes with local's own relay defaults.
fn local(named: &NamedScenario, args: &RealClocksArgs, allowance_ns: f64) -> anyhow::Result<ScenarioFigures> {
    let run = LocalRun {
        nodes: 4,
        duration_s: args.real_clocks_local_duration,
        window_s: LOCAL_WINDOW_S,
        delay_us: 100.0,
        jitter_us: 0.0,
        extra: vec!["--clock-scenario".into(), named.name.into()],
    };
    let seed = args.real_clocks_first_seed;
    let row = pooled_local_row(run.nodes, &[local_json(&run, seed)?], "local");
    Ok(figures(named, "local", &row, vec![seed], allowance_ns))
}

/// `distprof local`'s own default window (`local::LOCAL_WINDOW_S`): the runs here are
/// local as anyone runs it.
const LOCAL_WINDOW_S: f64 = 2.0;
/// Node counts of the coverage runs, in turn.
const COVERAGE_NODES: [u32; 4] = [3, 4, 5, 6];
/// First seed of the coverage runs.
const COVERAGE_FIRST_SEED: u64 = 201;

/// Runs of `distprof local` with its defaults until `local_coverage_node_windows`
/// node-windows are judged.
fn local_coverage(args: &RealClocksArgs) -> anyhow::Result<Option<LocalCoverage>> {
    if args.local_coverage_node_windows == 0 {
        return Ok(None);
    }
    let (mut verdicts, mut runs, mut judged) = (Vec::new(), Vec::new(), 0);
    for (i, nodes) in COVERAGE_NODES.iter().cycle().enumerate() {
        if judged >= args.local_coverage_node_windows {
            break;
        }
        let run = LocalRun {
            nodes: *nodes,
            duration_s: args.local_coverage_duration,
            window_s: LOCAL_WINDOW_S,
            delay_us: 100.0,
            jitter_us: 0.0,
            extra: Vec::new(),
        };
        let v = local_json(&run, COVERAGE_FIRST_SEED + i as u64)?;
        let this = pooled_local_row(*nodes, std::slice::from_ref(&v), "local");
        if this.samples == 0 {
            anyhow::bail!("`distprof local` run {} ({nodes} nodes) judged no node-window; is --local-coverage-duration ({} s) at least two windows of {LOCAL_WINDOW_S} s?", i + 1, args.local_coverage_duration);
        }
        runs.push(serde_json::json!({
            "nodes": nodes,
            "node_windows": this.samples,
            "within_2_sigma": this.within_2_sigma,
            "asymmetric_node_windows": v["asymmetric_node_windows"],
            "asymmetric_misses": v["asymmetric_misses"],
        }));
        judged += this.samples;
        verdicts.push(v);
        eprintln!("bench accuracy: local coverage so far {judged} node-windows judged");
    }
    // `nodes` 0: the runs have 3 to 6 (each run's count is in `runs`).
    let pooled = pooled_local_row(0, &verdicts, "local_coverage");
    Ok(Some(LocalCoverage { runs, pooled, within_allowance: AssumptionHeld::of_runs(&verdicts) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pooled runs count every node-window of every run: coverage and p99 over all of them,
    /// the flagged share weighted by each run's node-windows.
    #[test]
    fn local_runs_pool_their_node_windows() {
        let run = |errors: &[(f64, f64)], flagged: f64| {
            let nws: Vec<_> = errors.iter().map(|(e, s)| serde_json::json!({"error_ns": e, "uncertainty_ns": s})).collect();
            serde_json::json!({"node_windows": nws, "samples": errors.len(), "flagged_fraction": flagged, "unreachable_node_windows": 1})
        };
        let runs = [run(&[(10.0, 10.0), (-30.0, 10.0), (5.0, 1.0)], 0.0), run(&[(-1.0, 1.0), (400.0, 100.0)], 0.5)];
        let row = pooled_local_row(4, &runs, "local");
        assert_eq!((row.samples, row.within_2_sigma, row.unreachable_node_windows), (5, 2, 2));
        assert_eq!(row.p99_offset_err_ns, Some(400.0));
        assert_eq!(row.p50_offset_err_ns, Some(10.0));
        assert!((row.flagged_fraction - 0.2).abs() < 1e-12, "{}", row.flagged_fraction);
        let coverage = LocalCoverage { runs: Vec::new(), pooled: row, within_allowance: AssumptionHeld::default() };
        assert_eq!(coverage.coverage_2sigma(), Some(0.4));
    }

    /// Only the node-windows whose true path asymmetry is within their run's allowance
    /// count; one without a known asymmetry counts.
    #[test]
    fn the_coverage_where_the_assumption_held_leaves_out_the_asymmetric_node_windows() {
        let nw = |e: f64, s: f64, a: Option<f64>| serde_json::json!({"error_ns": e, "uncertainty_ns": s, "path_asymmetry_ns": a});
        let runs = [
            serde_json::json!({"asymmetry_allowance_ns": 100.0, "node_windows": [nw(30.0, 40.0, Some(20.0)), nw(-250.0, 45.0, Some(-230.0)), nw(120.0, 45.0, Some(-90.0))]}),
            serde_json::json!({"asymmetry_allowance_ns": 1000.0, "node_windows": [nw(-250.0, 420.0, Some(-230.0)), nw(5.0, 40.0, None)]}),
        ];
        let held = AssumptionHeld::of_runs(&runs);
        assert_eq!(held, AssumptionHeld { node_windows: 4, within_2_sigma: 3 });
        assert_eq!(held.coverage_2sigma(), Some(0.75));
    }
}
