//! The simulated run as the run directory a real run writes: one
//! `probe_windows_node<id>.jsonl` per node through the core's own writer
//! (`distprof::jsonl::JsonlWriter`, docs/jsonl.md), with the window statistics and the
//! online model (`NodeEdgeEstimator`) the probe engine puts in every window line, and the
//! true clocks in a side file, [`TRUTH_FILE`], so that a test can compare whatever
//! `distprof report --run-dir` or `merge --run-dir` estimate with the truth.
//!
//! What a node's file holds, as the engine's: the records of the probes it sent (prober
//! side), assigned to its windows by its first forward stamp; per out-edge `sent` (probe
//! slots of the window), `complete`, `pure` (the engine's purity test), `lost`
//! (`sent - complete`: a probe with any lost packet never completes); `answered`, the
//! probes of its in-edges that completed in the prober's window. The simulated network
//! neither duplicates nor corrupts datagrams and never stays silent long enough to take an
//! edge down, so `dropped` is empty and every edge stays up. A node that dies
//! (`Scenario::death`) writes the windows that closed before its death and no more, as a
//! killed process loses its open window.

use super::{Cluster, EdgeParams, Truth};
use distprof::config::Config;
use distprof::context::NodeId;
use distprof::estimate::node_edges::NodeEdgeEstimator;
use distprof::estimate::EstimatorSettings;
use distprof::jsonl::{JsonlWriter, Meta, FORMAT_VERSION};
use distprof::probe::purity::gap_preserved;
use distprof::estimate::purity::PurityTolerance;
use distprof::timestamp::StampMode;
use distprof::window::{ClosedWindow, EdgeWindowStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

/// The side file with the true clocks, next to the node files.
pub const TRUTH_FILE: &str = "sim_truth.json";

/// `sim_truth.json`: every node's true clock against the reference in every window, in the
/// conventions of `distprof::model` (offset = S_i - G at the node's window midpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthFile {
    pub reference_node: NodeId,
    /// The scenario that generated the run (`Scenario` fields).
    pub scenario: serde_json::Value,
    pub nodes: Vec<NodeTruth>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeTruth {
    pub node: NodeId,
    pub windows: Vec<WindowTruth>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowTruth {
    pub window_id: u64,
    /// The node's window, in its own clock (the same local interval on every node).
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub offset_ns: f64,
    pub drift_ppb: f64,
}

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunDirSummary {
    pub files: usize,
    pub windows: u64,
    pub records: u64,
    pub bytes: u64,
}

impl Cluster {
    /// The session id a simulated run's files carry.
    pub fn session_id(&self) -> String {
        format!("sim-{}n-seed{}", self.scenario.nodes, self.scenario.seed)
    }

    /// The effective configuration of the simulated nodes: `base` with the scenario's
    /// cadence, gap, window, degree and reference, and `output_dir` = `dir`.
    pub fn node_config(&self, base: &Config, dir: &Path) -> Config {
        let s = &self.scenario;
        Config {
            probe_cadence_us: s.cadence_us,
            packet_spacing_us: s.gap_us,
            probe_window_s: s.window_s,
            probe_out_degree: s.out_degree,
            graph_seed: s.seed,
            reference_node: self.reference,
            output_dir: dir.display().to_string(),
            ..base.clone()
        }
    }

    /// Writes every node's JSONL and [`TRUTH_FILE`] into `dir` (created if missing).
    /// `progress(nodes_done, nodes)` is called after each node's file is complete.
    /// Memory stays at one node-window of records: files are written node by node.
    pub fn write_run_dir(
        &self,
        dir: &Path,
        base: &Config,
        progress: &mut dyn FnMut(u32, u32),
    ) -> io::Result<RunDirSummary> {
        let config = self.node_config(base, dir);
        let settings = EstimatorSettings::from_config(&config);
        let purity = PurityTolerance::from_config(&config);
        let n = self.scenario.nodes;
        let mut summary = RunDirSummary { windows: self.num_windows(), ..Default::default() };
        for node in 0..n {
            let meta = Meta {
                meta: true,
                format_version: FORMAT_VERSION,
                node,
                session_id: self.session_id(),
                session_token: self.scenario.seed,
                reference_node: self.reference,
                timestamp_mode: StampMode::Kernel,
                stamp_error_bound_ns: StampMode::Kernel.stamp_error_bound_ns(),
                timestamp_note: format!(
                    "simulated by `distprof simulate`: Gaussian stamp noise, sigma {} ns",
                    self.scenario.timestamp_sigma_ns
                ),
                nic_clock: None,
                virtual_clock: None,
                out_edges: self.graph[node as usize].clone(),
                start_local_ns: self.window_spec(0).start_local_ns,
                config: config.clone(),
            };
            let mut writer = JsonlWriter::create(dir, &meta)?;
            let mut online = NodeEdgeEstimator::new(node, n, settings);
            let out: Vec<&EdgeParams> = self.graph[node as usize]
                .iter()
                .filter_map(|&dst| self.edges.iter().find(|e| e.src == node && e.dst == dst))
                .collect();
            let inbound: Vec<&EdgeParams> = self.edges.iter().filter(|e| e.dst == node).collect();
            let death_ns = self.scenario.death.filter(|d| d.node == node).map(|d| d.at_s * 1e9);
            for k in 0..self.num_windows() {
                let spec = self.window_spec(k);
                let closes_at = self.clocks[node as usize].invert_last((spec.end_local_ns - super::EPOCH_NS) as f64);
                if death_ns.is_some_and(|d| closes_at > d) {
                    break;
                }
                let mut records = Vec::new();
                let mut edges = Vec::with_capacity(out.len());
                for e in &out {
                    let before = records.len();
                    self.edge_records(e, k, &mut records);
                    let mine = &records[before..];
                    let complete = mine.len() as u64;
                    let sent = self.probes_sent(e, k).max(complete);
                    edges.push(EdgeWindowStats {
                        src: node,
                        dst: e.dst,
                        sent,
                        complete,
                        pure: mine.iter().filter(|r| gap_preserved(r, &purity)).count() as u64,
                        lost: sent - complete,
                        up: true,
                        went_down: 0,
                        came_up: 0,
                    });
                }
                let mut answered = BTreeMap::new();
                let mut theirs = Vec::new();
                for e in &inbound {
                    theirs.clear();
                    self.edge_records(e, k, &mut theirs);
                    if !theirs.is_empty() {
                        answered.insert(e.src, theirs.len() as u64);
                    }
                }
                summary.records += records.len() as u64;
                let mut w = ClosedWindow {
                    node,
                    window_id: k,
                    start_local_ns: spec.start_local_ns,
                    end_local_ns: spec.end_local_ns,
                    edges,
                    answered,
                    dropped: BTreeMap::new(),
                    records,
                    model: None,
                    nic_clock: None,
                };
                // The online model, as `standalone::run_node` writes it into the line.
                w.model = Some(online.window(&w));
                writer.write_window(&w)?;
            }
            summary.bytes += std::fs::metadata(writer.path())?.len();
            summary.files += 1;
            progress(node + 1, n);
        }
        let truth = self.truth_file();
        let bytes = serde_json::to_vec(&truth).map_err(io::Error::other)?;
        write_whole(&dir.join(TRUTH_FILE), &bytes)?;
        Ok(summary)
    }

    /// The true clock of every node in every window.
    pub fn truth_file(&self) -> TruthFile {
        let nodes = (0..self.scenario.nodes)
            .map(|node| NodeTruth {
                node,
                windows: (0..self.num_windows())
                    .map(|k| {
                        let spec = self.window_spec(k);
                        let Truth { offset_ns, drift_ppb } = self.truth(node, k);
                        WindowTruth {
                            window_id: k,
                            start_local_ns: spec.start_local_ns,
                            end_local_ns: spec.end_local_ns,
                            offset_ns,
                            drift_ppb,
                        }
                    })
                    .collect(),
            })
            .collect();
        TruthFile {
            reference_node: self.reference,
            scenario: serde_json::to_value(&self.scenario).unwrap_or(serde_json::Value::Null),
            nodes,
        }
    }

    /// Probe slots of edge `e` whose send time falls in the prober's window k: the same
    /// cadence grid `edge_records` walks, without drawing the network.
    fn probes_sent(&self, e: &EdgeParams, k: u64) -> u64 {
        let spec = self.window_spec(k);
        let clock = &self.clocks[e.src as usize];
        let cadence = self.scenario.cadence_us as f64 * 1e3;
        let t_start = clock.invert_first((spec.start_local_ns - super::EPOCH_NS) as f64);
        let t_end = clock.invert_last((spec.end_local_ns - super::EPOCH_NS) as f64);
        let first = ((t_start - e.phase_ns) / cadence).ceil();
        let past_last = ((t_end - e.phase_ns) / cadence).ceil();
        (past_last - first).max(0.0) as u64
    }
}

/// Writes a whole file so that a reader sees either nothing or all of it.
fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Reads a [`TRUTH_FILE`].
pub fn read_truth(path: &Path) -> Result<TruthFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("`{}` is not a distprof simulate truth file: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::Scenario;
    use super::*;
    use distprof::estimate::estimate_run_windows;
    use distprof_offline::run_dir_estimate::{estimate_run, read_run_dir};

    fn small() -> Cluster {
        let mut s = Scenario::reference();
        s.nodes = 6;
        s.out_degree = 3;
        s.duration_s = 12.0;
        s.window_s = 4.0;
        s.seed = 11;
        Cluster::new(s).expect("scenario")
    }

    /// A node that dies writes the windows that closed before its death only.
    #[test]
    fn a_dead_node_writes_no_window_after_its_death() {
        let mut s = small().scenario;
        s.duration_s = 16.0;
        s.death = Some(super::super::NodeDeath { node: 0, at_s: 9.0 });
        let c = Cluster::new(s).expect("scenario");
        let dir = tempfile::tempdir().unwrap();
        c.write_run_dir(dir.path(), &Config::default(), &mut |_, _| {}).unwrap();
        let files = read_run_dir(dir.path()).unwrap();
        let windows = |node: u32| files.iter().find(|f| f.file.meta.node == node).map(|f| f.file.windows.len());
        // Windows of 4 s from t ~ 0 (node 0's offset is within +-1 s): 0 and 1 close before 9 s.
        assert_eq!(windows(0), Some(2));
        assert_eq!(windows(1), Some(4));
    }

    #[test]
    fn the_run_directory_is_the_real_format_and_estimates_like_the_simulator() {
        let c = small();
        let dir = tempfile::tempdir().unwrap();
        let mut calls = Vec::new();
        let summary = c.write_run_dir(dir.path(), &Config::default(), &mut |d, n| calls.push((d, n))).unwrap();
        assert_eq!(calls, (1..=6).map(|d| (d, 6)).collect::<Vec<_>>());
        assert_eq!((summary.files, summary.windows), (6, 3));

        let files = read_run_dir(dir.path()).unwrap();
        assert_eq!(files.len(), 6);
        let mut records = 0;
        for f in &files {
            let node = f.file.meta.node;
            assert_eq!(f.file.meta.out_edges, c.graph[node as usize]);
            assert_eq!(f.file.windows.len(), 3);
            for w in &f.file.windows {
                records += w.records.len() as u64;
                assert!(w.records.iter().all(|r| r.src == node));
                // 4 s at 40 ms per edge: 100 slots; 1 % loss per packet loses ~4 %.
                for e in &w.edges {
                    assert!((99..=101).contains(&e.sent), "{e:?}");
                    assert!(e.complete <= e.sent && e.complete >= 85, "{e:?}");
                    assert_eq!(e.lost, e.sent - e.complete);
                    assert!(e.pure <= e.complete && e.pure >= e.complete / 2, "{e:?}");
                }
                let model = w.model.as_ref().expect("online model written");
                assert_eq!(model.edges.len(), 3, "{model:?}");
                assert!(model.edges[0].theta_ns.is_some(), "{model:?}");
                // Every in-edge answered about as many probes as it completed.
                let in_edges = c.graph.iter().filter(|o| o.contains(&node)).count();
                assert_eq!(w.answered.len(), in_edges);
            }
        }
        assert_eq!(records, summary.records);

        // The offline estimate of the files is, window by window, the simulator's own
        // in-memory estimate: the files carry every record, binned the same way.
        let run = estimate_run(&files).unwrap();
        assert_eq!(run.records_outside, 0);
        let settings = EstimatorSettings::from_config(&run.config);
        let mem = estimate_run_windows((0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k))), &settings);
        assert_eq!(run.windows.len(), mem.len());
        for (k, (w, (mem, _))) in run.windows.iter().zip(&mem).enumerate() {
            assert_eq!(w.spec, c.window_spec(k as u64));
            assert_eq!(w.estimate.segments, mem.segments, "window {k}");
        }

        // The truth file agrees with the cluster, and the estimate is within its bound of it.
        let truth = read_truth(&dir.path().join(TRUTH_FILE)).unwrap();
        // serde_json's float parsing may differ from the written value in the last bit.
        for (got, want) in truth.nodes.iter().flat_map(|n| &n.windows).zip(c.truth_file().nodes.iter().flat_map(|n| &n.windows)) {
            assert_eq!((got.window_id, got.start_local_ns, got.end_local_ns), (want.window_id, want.start_local_ns, want.end_local_ns));
            assert!((got.offset_ns - want.offset_ns).abs() < 1e-6 && (got.drift_ppb - want.drift_ppb).abs() < 1e-9, "{got:?} {want:?}");
        }
        let mut checked = 0;
        for m in run.models() {
            for s in &m.segments {
                let t = truth.nodes[m.node as usize].windows[s.window_id as usize];
                assert!((s.offset_ns - t.offset_ns).abs() <= s.bound_ns, "node {} {s:?} vs {t:?}", m.node);
                checked += 1;
            }
        }
        assert_eq!(checked, 6 * 3);
    }
}
