//! The offline estimate of a finished run: every node's `probe_windows_node<id>.jsonl`
//! (docs/jsonl.md) of a run directory, the records re-binned into common windows and
//! estimated window by window with the configured estimator, a drift fit centred on each
//! window (`estimate::Smoother`) and the network-wide solve (docs/estimation.md).
//!
//! `distprof report --run-dir`, `distprof merge/validate --run-dir` and the verdict of
//! `distprof local` all go through [`estimate_run`], so they agree on every number.
//!
//! Why re-bin: every node closes its windows on its own clock, so window `k` of two nodes is
//! not the same interval of local time (their clocks are milliseconds apart), while the
//! estimator assumes it is. Each record is therefore assigned by the prober's first forward
//! stamp to one common window list, exactly as the cluster simulator assigns records. The
//! common windows are the reference node's (the instant the network solve is anchored to);
//! a window id the reference has no line for (it died, or its file is gone) takes the span
//! of the other nodes' windows of that id, starting no earlier than the previous window's end.
//!
//! Why not read the files' `model` fields: a node's online model only knows its own edges;
//! the network solve needs every edge of a window at once.

use distprof::config::Config;
use distprof::context::NodeId;
use distprof::estimate::{add_stamp_mapping_errors, estimate_run_windows, EstimatorSettings, ModelBuilder, WindowEstimate, WindowSpec};
use distprof::jsonl::{self, NodeFile};
use distprof::model::NodeClockModel;
use distprof::record::ProbeRecord;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A record this close before the first common window or after the last one still goes to
/// it: a node whose clock is ahead of the reference's stamps its last probes after the
/// reference's last window ended in local terms, though not in real time. The estimator
/// accepts points as far outside a window (`estimate::points`, `WINDOW_SLACK_NS`).
pub const EDGE_SLACK_NS: i64 = 100_000_000;
/// Node ids above this are refused: a corrupt meta line must not make us allocate per id.
pub const MAX_NODE_ID: NodeId = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot list the run directory `{dir}`: {source}; pass the output_dir of a run (it holds probe_windows_node<id>.jsonl files)")]
    ReadDir { dir: PathBuf, source: std::io::Error },
    #[error("`{dir}` holds no probe_windows_node<id>.jsonl file; pass the output_dir of a `distprof run`, `distprof local` or `distprof simulate --out` run")]
    NoFiles { dir: PathBuf },
    /// The message names the file and the line (see `jsonl::read`).
    #[error("{message}; fix or remove that file to estimate the others")]
    BadFile { path: PathBuf, message: String },
    #[error("`{path}`: its meta line says node {meta_node}, but the file name says node {name_node}; the file was renamed or copied from another run")]
    NodeMismatch { path: PathBuf, meta_node: NodeId, name_node: NodeId },
    #[error("`{path}` is from session `{other}` but `{first_path}` from session `{first}`; keep one run's files per directory")]
    MixedSessions { path: PathBuf, other: String, first_path: PathBuf, first: String },
    #[error("`{path}`: node id {node} is beyond the supported {MAX_NODE_ID}; the meta line is corrupt")]
    NodeIdTooLarge { path: PathBuf, node: NodeId },
}

/// One node's file and where it was read from.
#[derive(Debug, Clone)]
pub struct RunFile {
    pub path: PathBuf,
    pub file: NodeFile,
}

/// One common window, estimated.
#[derive(Debug, Clone)]
pub struct EstimatedWindow {
    pub spec: WindowSpec,
    /// Every node's records whose prober stamp fell in this window.
    pub records: Vec<ProbeRecord>,
    pub estimate: WindowEstimate,
    /// Thread CPU time of the estimate (all edges, network, bounds): what "on one core"
    /// means on a machine shared with other work.
    pub estimate_cpu_ms: f64,
}

/// A run estimated offline.
#[derive(Debug, Clone)]
pub struct RunEstimate {
    pub reference: NodeId,
    /// One past the largest node id any file names.
    pub num_nodes: u32,
    /// The effective configuration of the reference node's file (else the first file's):
    /// the estimator, purity tolerances and `max_bound_ns` used here.
    pub config: Config,
    /// The asymmetry per hop every uncertainty here assumes, ns: the configured one, else
    /// the default of the weakest timestamp mode any node stamped in
    /// ([`allowance_of_stamps`]).
    pub asymmetry_allowance_ns: f64,
    pub windows: Vec<EstimatedWindow>,
    /// Records whose prober stamp fell outside every common window.
    pub records_outside: usize,
}

impl RunEstimate {
    /// Every node's piecewise clock model, one segment per window it was reached in.
    pub fn models(&self) -> Vec<NodeClockModel> {
        let mut builder = ModelBuilder::new(self.num_nodes);
        for w in &self.windows {
            builder.push(&w.estimate);
        }
        builder.finish()
    }
}

/// Reads every `probe_windows_node<id>.jsonl` of `dir`, sorted by node id, and checks that
/// they belong together (one session, file names matching the meta lines).
pub fn read_run_dir(dir: &Path) -> Result<Vec<RunFile>, RunDirError> {
    let read_dir_err = |source| RunDirError::ReadDir { dir: dir.to_path_buf(), source };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_err)? {
        let entry = entry.map_err(read_dir_err)?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("probe_windows_node"))
            .and_then(|n| n.strip_suffix(".jsonl"))
            .and_then(|n| n.parse::<NodeId>().ok())
        else {
            continue;
        };
        paths.push((id, entry.path()));
    }
    if paths.is_empty() {
        return Err(RunDirError::NoFiles { dir: dir.to_path_buf() });
    }
    paths.sort();
    let mut files: Vec<RunFile> = Vec::with_capacity(paths.len());
    for (id, path) in paths {
        let file = jsonl::read(&path).map_err(|message| RunDirError::BadFile { path: path.clone(), message })?;
        if file.meta.node != id {
            return Err(RunDirError::NodeMismatch { path, meta_node: file.meta.node, name_node: id });
        }
        if let Some(first) = files.first() {
            if first.file.meta.session_id != file.meta.session_id {
                return Err(RunDirError::MixedSessions {
                    path,
                    other: file.meta.session_id.clone(),
                    first_path: first.path.clone(),
                    first: first.file.meta.session_id.clone(),
                });
            }
        }
        files.push(RunFile { path, file });
    }
    Ok(files)
}

/// Reads `dir` and estimates the run: the models `merge --run-dir` applies.
pub fn models_of_run_dir(dir: &Path) -> Result<Vec<NodeClockModel>, RunDirError> {
    let files = read_run_dir(dir)?;
    Ok(estimate_run(&files)?.models())
}

/// Re-bins every file's records into the common windows and estimates them in order. See
/// the module doc. `files` must not be empty (`read_run_dir` guarantees it); with none,
/// the run has no window.
pub fn estimate_run(files: &[RunFile]) -> Result<RunEstimate, RunDirError> {
    let Some(first) = files.first() else {
        return Ok(RunEstimate {
            reference: 0,
            num_nodes: 1,
            config: Config::default(),
            asymmetry_allowance_ns: Config::default().effective_asymmetry_allowance_ns() as f64,
            windows: Vec::new(),
            records_outside: 0,
        });
    };
    let reference = first.file.meta.reference_node;
    let config = files.iter().find(|f| f.file.meta.node == reference).unwrap_or(first).file.meta.config.clone();
    let settings = EstimatorSettings { asymmetry_allowance_ns: allowance_of_stamps(&config, files), ..EstimatorSettings::from_config(&config) };
    let num_nodes = num_nodes(files, reference)?;
    let bounds = common_windows(files, reference);

    let mut binned: Vec<Vec<ProbeRecord>> = vec![Vec::new(); bounds.len()];
    let mut records_outside = 0;
    for r in files.iter().flat_map(|f| &f.file.windows).flat_map(|w| &w.records) {
        let t = r.fwd_tx_ns[0];
        let k = bounds.partition_point(|&(_, s, _)| s <= t);
        let last = bounds.len().wrapping_sub(1);
        match k.checked_sub(1) {
            Some(k) if t < bounds[k].2 => binned[k].push(*r),
            Some(k) if k == last && t < bounds[k].2.saturating_add(EDGE_SLACK_NS) => binned[k].push(*r),
            None if !bounds.is_empty() && t >= bounds[0].1.saturating_sub(EDGE_SLACK_NS) => binned[0].push(*r),
            _ => records_outside += 1,
        }
    }

    // Each window's drift fit is centred on it (`estimate::Smoother`).
    let specs: Vec<WindowSpec> = bounds
        .into_iter()
        .map(|(window_id, start_local_ns, end_local_ns)| WindowSpec { window_id, start_local_ns, end_local_ns, num_nodes, reference })
        .collect();
    let estimates = estimate_run_windows(binned.iter().zip(specs.iter().copied()), &settings);
    let mapping_errors = nic_mapping_errors(files);
    let windows = specs
        .into_iter()
        .zip(binned)
        .zip(estimates)
        .map(|((spec, records), (mut estimate, estimate_cpu_ms))| {
            let error_of = |node: NodeId| mapping_errors.get(&(spec.window_id, node)).copied().unwrap_or(0.0);
            add_stamp_mapping_errors(&mut estimate, reference, &settings, error_of);
            EstimatedWindow { spec, records, estimate, estimate_cpu_ms }
        })
        .collect();
    Ok(RunEstimate { reference, num_nodes, config, asymmetry_allowance_ns: settings.asymmetry_allowance_ns, windows, records_outside })
}

/// The allowance the run's uncertainties state: `config`'s when set, else the largest of
/// the timestamp modes the nodes actually stamped in (a mid-run switch from hardware to
/// kernel stamps included). The configuration alone says `auto`, which assumes kernel
/// stamps; a node that stamped in user space has the user mode's asymmetry.
pub fn allowance_of_stamps(config: &Config, files: &[RunFile]) -> f64 {
    let by_mode = files.iter().map(|f| f.file.timestamps().mode.asymmetry_allowance_ns(config)).max();
    by_mode.unwrap_or_else(|| config.effective_asymmetry_allowance_ns()) as f64
}

/// Per (window id, node): the error the node's hardware stamp mapping states over that
/// window (`NicClockInfo::mapping_error_max_ns`), for the nodes with hardware stamps.
fn nic_mapping_errors(files: &[RunFile]) -> BTreeMap<(u64, NodeId), f64> {
    let mut out = BTreeMap::new();
    for f in files {
        for w in &f.file.windows {
            if let Some(nic) = &w.nic_clock {
                out.insert((w.window_id, f.file.meta.node), nic.mapping_error_max_ns);
            }
        }
    }
    out
}

/// One past the largest id any file names (its own, its peers', the reference).
fn num_nodes(files: &[RunFile], reference: NodeId) -> Result<u32, RunDirError> {
    let mut largest = reference;
    for f in files {
        for &id in std::iter::once(&f.file.meta.node).chain(&f.file.meta.out_edges) {
            if id > MAX_NODE_ID {
                return Err(RunDirError::NodeIdTooLarge { path: f.path.clone(), node: id });
            }
            largest = largest.max(id);
        }
    }
    Ok(largest + 1)
}

/// `(window_id, start, end)` of every window id any file has, sorted and non-overlapping:
/// the reference's bounds, else the span of the other nodes' windows of that id.
fn common_windows(files: &[RunFile], reference: NodeId) -> Vec<(u64, i64, i64)> {
    // Per window id: the reference's bounds, and the earliest start and latest end of any node's.
    type Spans = (Option<(i64, i64)>, i64, i64);
    let mut by_id: BTreeMap<u64, Spans> = BTreeMap::new();
    for f in files {
        for w in &f.file.windows {
            let e = by_id.entry(w.window_id).or_insert((None, i64::MAX, i64::MIN));
            if f.file.meta.node == reference {
                e.0 = Some((w.start_local_ns, w.end_local_ns));
            }
            e.1 = e.1.min(w.start_local_ns);
            e.2 = e.2.max(w.end_local_ns);
        }
    }
    let mut out: Vec<(u64, i64, i64)> = Vec::with_capacity(by_id.len());
    for (id, (own, lo, hi)) in by_id {
        let (mut start, end) = own.unwrap_or((lo, hi));
        if let Some(&(_, _, prev_end)) = out.last() {
            start = start.max(prev_end);
        }
        // A window that the clamp emptied (its span lies inside the previous one) gets no
        // records; it is kept so window ids stay those of the files.
        let end = end.max(start);
        out.push((id, start, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use distprof::jsonl::{Meta, FORMAT_VERSION};
    use distprof::timestamp::StampMode;
    use distprof::window::ClosedWindow;

    fn file(node: NodeId, windows: &[(u64, i64, i64)], records: &[ProbeRecord]) -> RunFile {
        let meta = Meta {
            meta: true,
            format_version: FORMAT_VERSION,
            node,
            session_id: "s".into(),
            session_token: 1,
            reference_node: 0,
            timestamp_mode: StampMode::Kernel,
            stamp_error_bound_ns: 1_000,
            timestamp_note: String::new(),
            nic_clock: None,
            virtual_clock: None,
            out_edges: vec![(node + 1) % 2],
            start_local_ns: windows.first().map_or(0, |w| w.1),
            config: Config::default(),
        };
        let windows = windows
            .iter()
            .map(|&(window_id, start_local_ns, end_local_ns)| ClosedWindow {
                node,
                window_id,
                start_local_ns,
                end_local_ns,
                edges: Vec::new(),
                answered: BTreeMap::new(),
                dropped: BTreeMap::new(),
                records: records.to_vec(),
                model: None,
                nic_clock: None,
            })
            .collect();
        RunFile { path: PathBuf::from(jsonl::file_name(node)), file: NodeFile { meta, windows, truncated_tail: false } }
    }

    fn rec(src: NodeId, t: i64) -> ProbeRecord {
        ProbeRecord {
            src,
            dst: 1 - src,
            seq: 0,
            fwd_tx_ns: [t, t + 50],
            fwd_rx_ns: [t + 10, t + 60],
            rev_tx_ns: [t + 20, t + 70],
            rev_rx_ns: [t + 30, t + 80],
        }
    }

    #[test]
    fn records_go_to_the_reference_window_of_their_prober_stamp() {
        // Node 1's windows are 300 units later than the reference's; its record at 1_050
        // lies in its own window 0 but in the reference's window 1. Records just outside
        // the first or last window go to it; one further out than the slack is left out.
        let f0 = file(0, &[(0, 0, 1_000), (1, 1_000, 2_000)], &[]);
        let mut f1 = file(1, &[(0, 300, 1_300), (1, 1_300, 2_300)], &[]);
        f1.file.windows[0].records = vec![rec(1, 100), rec(1, 1_050), rec(1, -EDGE_SLACK_NS)];
        f1.file.windows[1].records = vec![rec(1, 2_100), rec(1, 2_000 + EDGE_SLACK_NS)];
        let run = estimate_run(&[f0, f1]).unwrap();
        let spans: Vec<_> = run.windows.iter().map(|w| (w.spec.start_local_ns, w.spec.end_local_ns, w.records.len())).collect();
        assert_eq!(spans, vec![(0, 1_000, 2), (1_000, 2_000, 2)]);
        assert_eq!(run.records_outside, 1);
        assert_eq!(run.num_nodes, 2);
    }

    /// Two nodes, node 1 3 us ahead; 20 us each way plus some queueing, both directions
    /// probed over 1.5 s.
    fn two_node_records() -> Vec<ProbeRecord> {
        let stamp = |node: NodeId, real: i64| real + if node == 1 { 3_000 } else { 0 };
        let mut records = Vec::new();
        for k in 0..300i64 {
            for src in [0, 1] {
                let dst = 1 - src;
                let t = k * 5_000_000 + src as i64 * 1_000_000;
                let q = |i: i64| 20_000 + (i * 7919 + k * 104_729) % 3_000;
                let back = t + 200_000;
                records.push(ProbeRecord {
                    src,
                    dst,
                    seq: k as u32,
                    fwd_tx_ns: [stamp(src, t), stamp(src, t + 40_000)],
                    fwd_rx_ns: [stamp(dst, t + q(1)), stamp(dst, t + 40_000 + q(1))],
                    rev_tx_ns: [stamp(dst, back), stamp(dst, back + 40_000)],
                    rev_rx_ns: [stamp(src, back + q(2)), stamp(src, back + 40_000 + q(2))],
                });
            }
        }
        records
    }

    /// Node 1 stamps in hardware, its mapping stating 2 us over the window: its segment's
    /// bound grows by that and its sigma covers it at two sigma (`stamp_mapping`).
    #[test]
    fn a_node_s_nic_mapping_error_widens_its_segment() {
        let records = two_node_records();
        let files = |nic: bool| {
            let window = [(0u64, 0i64, 1_500_000_000i64)];
            let own = |n: NodeId| records.iter().filter(|r| r.src == n).copied().collect::<Vec<_>>();
            let mut f1 = file(1, &window, &own(1));
            if nic {
                f1.file.windows[0].nic_clock = Some(distprof::timestamp::NicClockInfo { mapping_error_max_ns: 2_000.0, ..Default::default() });
            }
            vec![file(0, &window, &own(0)), f1]
        };
        let seg = |nic: bool| estimate_run(&files(nic)).unwrap().windows[0].estimate.segments[1].unwrap();
        let (kernel, hardware) = (seg(false), seg(true));
        assert!((kernel.offset_ns - 3_000.0).abs() < 100.0, "{kernel:?}");
        assert_eq!(hardware.offset_ns, kernel.offset_ns);
        assert!((hardware.bound_ns - kernel.bound_ns - 2_000.0).abs() < 1e-6, "{hardware:?} vs {kernel:?}");
        assert!(hardware.uncertainty_ns >= 1_000.0 && hardware.flagged, "{hardware:?}");
    }

    #[test]
    fn windows_the_reference_lacks_take_the_span_of_the_others() {
        let f0 = file(0, &[(0, 0, 1_000)], &[]);
        let f1 = file(1, &[(0, 300, 1_300), (1, 1_300, 2_300)], &[]);
        let w = common_windows(&[f0, f1], 0);
        // Window 1: node 1's span, clamped to start where the reference's window 0 ended
        // only if it overlapped (it does not here).
        assert_eq!(w, vec![(0, 0, 1_000), (1, 1_300, 2_300)]);
        let f0 = file(0, &[(0, 0, 1_000)], &[]);
        let f1 = file(1, &[(1, 800, 1_800)], &[]);
        assert_eq!(common_windows(&[f0, f1], 0), vec![(0, 0, 1_000), (1, 1_000, 1_800)]);
    }

    #[test]
    fn a_corrupt_node_id_is_refused_with_its_file() {
        let mut f = file(0, &[(0, 0, 1_000)], &[]);
        f.file.meta.out_edges = vec![MAX_NODE_ID + 1];
        let err = estimate_run(&[f]).unwrap_err().to_string();
        assert!(err.contains("probe_windows_node0.jsonl") && err.contains(&(MAX_NODE_ID + 1).to_string()), "{err}");
    }

    /// The allowance follows the stamps the nodes took, not the mode the configuration
    /// asked for: under `auto`, a node that fell back to user-space stamps makes every
    /// uncertainty assume the user mode's 1 us per hop; a configured allowance wins.
    #[test]
    fn the_allowance_is_that_of_the_weakest_mode_stamped_in() {
        let records = two_node_records();
        let window = [(0u64, 0i64, 1_500_000_000i64)];
        let files = |mode_1: StampMode, configured_ns: u64| {
            let own = |n: NodeId| records.iter().filter(|r| r.src == n).copied().collect::<Vec<_>>();
            let mut fs = vec![file(0, &window, &own(0)), file(1, &window, &own(1))];
            fs[1].file.meta.timestamp_mode = mode_1;
            for f in &mut fs {
                f.file.meta.config.asymmetry_allowance_ns = configured_ns;
            }
            fs
        };
        let run = |mode_1, configured_ns| estimate_run(&files(mode_1, configured_ns)).unwrap();
        let (kernel, user, configured) = (run(StampMode::Kernel, 0), run(StampMode::User, 0), run(StampMode::User, 250));
        assert_eq!(kernel.config.timestamping, distprof::config::TimestampMode::Auto);
        assert_eq!((kernel.asymmetry_allowance_ns, user.asymmetry_allowance_ns, configured.asymmetry_allowance_ns), (100.0, 1_000.0, 250.0));
        let sigma = |r: &RunEstimate| r.windows[0].estimate.segments[1].unwrap().uncertainty_ns;
        // The allowance's share is A / sqrt(6) in quadrature with the statistical part.
        assert!(sigma(&kernel) >= 100.0 / 6f64.sqrt() && sigma(&kernel) < 1_000.0 / 6f64.sqrt(), "{}", sigma(&kernel));
        assert!(sigma(&user) >= 1_000.0 / 6f64.sqrt(), "{}", sigma(&user));
        assert!(sigma(&configured) >= 250.0 / 6f64.sqrt() && sigma(&configured) < sigma(&user), "{}", sigma(&configured));
    }
}
