//! Builds a [`ReportInput`] from a run directory: every node's `probe_windows_node<id>.jsonl`
//! (docs/jsonl.md), estimated again offline by [`crate::run_dir_estimate`] (records re-binned
//! into the reference's windows, configured estimator, drift history, network solve), plus
//! what only the page needs: every record's one-way-delay points, the edge fits, edge health
//! from the prober's window stats, and triangle loop residuals.

use super::input::{
    owd_points, EdgeHealth, EdgeSeries, EdgeWindowFit, ReportInput, RunFacts,
};
use distprof::config::TimestampMode;
use distprof::context::NodeId;
use distprof::estimate::purity::{PairVerdict, PurityTolerance};
use crate::run_dir_estimate::{estimate_run, read_run_dir, RunDirError, RunFile};
use distprof::timestamp::StampMode;
use distprof::window::EdgeWindowStats;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An edge whose path dropped more than this share of its datagrams is degraded: the probes
/// that got through may still be fine, but a person should know the path drops packets.
/// Per datagram, not per probe: a probe is four datagrams and is lost with any of them, so
/// 1% datagram loss loses ~4% of the probes, and a per-probe limit of 5% made an eighth of
/// the edges of a simulated 64-node run with 1% loss "degraded" by chance alone.
pub const MAX_LOSS_SHARE: f64 = 0.05;
/// Datagrams per probe: a coded pair each way.
const DATAGRAMS_PER_PROBE: i32 = 4;
/// Triangles listed per run at most: enough for the histogram, bounded for large runs.
const MAX_LOOPS: usize = 20_000;

/// What loading found besides the input: things a person should hear about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadNotes {
    /// Files whose last line was cut short (the node died while writing it); that window
    /// is skipped.
    pub truncated_tails: Vec<PathBuf>,
    /// Windows estimated.
    pub windows: usize,
    /// Records read, over all files.
    pub records: usize,
    /// Records whose prober stamp fell outside every common window (not drawn).
    pub records_outside: usize,
}

/// Reads every node's JSONL in `dir` and estimates the run. See the module doc.
pub fn from_run_dir(dir: &Path) -> Result<ReportInput, RunDirError> {
    from_run_dir_with_notes(dir).map(|(input, _)| input)
}

pub fn from_run_dir_with_notes(dir: &Path) -> Result<(ReportInput, LoadNotes), RunDirError> {
    let files = read_run_dir(dir)?;
    let mut notes = LoadNotes::default();
    for f in &files {
        if f.file.truncated_tail {
            tracing::warn!(file = %f.path.display(), "last line cut short (node died while writing); that window is skipped");
            notes.truncated_tails.push(f.path.clone());
        }
        notes.records += f.file.windows.iter().map(|w| w.records.len()).sum::<usize>();
    }
    let run = estimate_run(&files)?;
    notes.windows = run.windows.len();
    notes.records_outside = run.records_outside;
    let tol = PurityTolerance {
        abs_ns: run.config.purity_abs_tolerance_ns,
        rel: run.config.purity_rel_tolerance,
    };
    let mut edges: BTreeMap<(NodeId, NodeId), EdgeSeries> = BTreeMap::new();
    let mut fitted: BTreeMap<(NodeId, NodeId, u64), f64> = BTreeMap::new();
    // Per edge, the estimated windows holding its records: the fits to expect (the
    // prober's own windows are binned differently and may count one more or less).
    let mut windows_with_records: BTreeMap<(NodeId, NodeId), usize> = BTreeMap::new();
    for f in &files {
        for &dst in &f.file.meta.out_edges {
            edges
                .entry((f.file.meta.node, dst))
                .or_insert_with(|| empty_edge(f.file.meta.node, dst));
        }
    }
    for w in &run.windows {
        let (wid, start_ns, end_ns) = (w.spec.window_id, w.spec.start_local_ns, w.spec.end_local_ns);
        let mid_ns = start_ns + (end_ns.max(start_ns) - start_ns) / 2;
        let mut in_this_window: Vec<(NodeId, NodeId)> = w.records.iter().map(|r| (r.src, r.dst)).collect();
        in_this_window.sort_unstable();
        in_this_window.dedup();
        for key in in_this_window {
            *windows_with_records.entry(key).or_default() += 1;
        }
        for r in &w.records {
            let fwd_pure = tol.judge(r.fwd_tx_ns, r.fwd_rx_ns) == PairVerdict::Pure;
            let rev_pure = tol.judge(r.rev_tx_ns, r.rev_rx_ns) == PairVerdict::Pure;
            let e = edges
                .entry((r.src, r.dst))
                .or_insert_with(|| empty_edge(r.src, r.dst));
            e.points.extend(owd_points(r, fwd_pure, rev_pure));
        }
        for er in &w.estimate.edges {
            let (Some(theta_ns), Some(rate_ppb)) = (er.theta_ns, er.theta_rate_ppb) else {
                continue;
            };
            // theta holds at S_src = M, an instant that differs per node by its offset
            // (up to seconds); moved to the common instant G = M (see estimate::network)
            // the thetas of a loop can be summed. Without it a 50 ppm rate over a 1 s
            // offset shows as a 50 us loop error that the estimate does not have.
            if let Some(Some(src_seg)) = w.estimate.segments.get(er.src as usize) {
                fitted.insert((er.src, er.dst, wid), theta_ns + rate_ppb * 1e-9 * src_seg.offset_ns);
            }
            let e = edges
                .entry((er.src, er.dst))
                .or_insert_with(|| empty_edge(er.src, er.dst));
            e.fits.push(EdgeWindowFit {
                window_id: wid,
                start_ns,
                end_ns,
                mid_ns,
                offset_ns: theta_ns,
                drift_ppb: rate_ppb,
                // No finite margin: the clouds overlap, which the page shows as unreliable.
                margin_ns: er.margin_ns.unwrap_or(f64::NAN),
                sigma_ns: er.sigma_ns,
            });
        }
    }

    // Health from the window stats the prober wrote, plus what the fits show.
    let mut stats: BTreeMap<(NodeId, NodeId), Vec<&EdgeWindowStats>> = BTreeMap::new();
    for f in &files {
        for w in &f.file.windows {
            for s in &w.edges {
                stats.entry((s.src, s.dst)).or_default().push(s);
            }
        }
    }
    for (key, e) in edges.iter_mut() {
        let expected_fits = windows_with_records.get(key).copied().unwrap_or(0);
        let (health, note) = edge_health(
            e,
            stats.get(key).map(Vec::as_slice).unwrap_or(&[]),
            expected_fits,
            run.config.max_uncertainty_ns as f64,
        );
        e.health = health;
        e.health_note = note;
    }

    let (timestamp_mode, timestamp_bound_ns) = worst_stamp_mode(&files);
    let mut dropped_by_reason = BTreeMap::new();
    for w in files.iter().flat_map(|f| &f.file.windows) {
        distprof::probe::drops::add_reasons(&mut dropped_by_reason, &w.dropped);
    }
    let input = ReportInput {
        facts: RunFacts {
            run_name: format!("{} ({})", files[0].file.meta.session_id, dir.display()),
            reference_node: run.reference,
            timestamp_mode,
            timestamp_bound_ns: Some(timestamp_bound_ns as f64),
            estimator: Some(run.config.estimator),
            bound_limit_ns: Some(run.config.max_bound_ns as f64),
            uncertainty_limit_ns: Some(run.config.max_uncertainty_ns as f64),
            asymmetry_allowance_ns: Some(run.asymmetry_allowance_ns),
            config: serde_json::to_value(&run.config).unwrap_or(serde_json::Value::Null),
            synthetic: false,
            dropped: Some(distprof::probe::DropCounts::from_reasons(&dropped_by_reason)),
            timestamps: files.iter().map(|f| (f.file.meta.node, f.file.timestamps())).collect(),
            nodes_without_data: (0..run.num_nodes).filter(|n| !files.iter().any(|f| f.file.meta.node == *n)).collect(),
            reanchored: distprof::estimate::failover::describe(
                &run.windows.iter().flat_map(|w| w.estimate.anchors.iter().copied()).collect::<Vec<_>>(),
                run.reference,
            ),
        },
        nodes: run.models(),
        hostnames: BTreeMap::new(),
        edges: edges.into_values().collect(),
        loops: super::loops::triangle_residuals(&fitted, MAX_LOOPS),
    };
    Ok((input, notes))
}

fn empty_edge(src: NodeId, dst: NodeId) -> EdgeSeries {
    EdgeSeries {
        src,
        dst,
        points: Vec::new(),
        fits: Vec::new(),
        health: EdgeHealth::Down,
        health_note: String::new(),
    }
}

/// Down when the edge completed no probe; degraded when it went down, its path lost more
/// than [`MAX_LOSS_SHARE`] of its datagrams, or its fits show a fault
/// ([`EdgeSeries::assess_health`]: a window without a separating line or without a fit, or
/// a fit looser than `uncertainty_limit_ns` allows); else ok. How many probes were pure is
/// not judged here: with every packet's point a queued path can still fit tightly.
fn edge_health(
    e: &EdgeSeries,
    stats: &[&EdgeWindowStats],
    expected_fits: usize,
    uncertainty_limit_ns: f64,
) -> (EdgeHealth, String) {
    let sent: u64 = stats.iter().map(|s| s.sent).sum();
    let complete: u64 = stats.iter().map(|s| s.complete).sum();
    let lost: u64 = stats.iter().map(|s| s.lost).sum();
    let windows_down = stats.iter().filter(|s| !s.up || s.went_down > 0).count();
    if complete == 0 && e.points.is_empty() {
        return (
            EdgeHealth::Down,
            format!(
                "no probe delivered in {} window(s): sent {sent}, lost {lost}",
                stats.len()
            ),
        );
    }
    let mut notes = Vec::new();
    if windows_down > 0 {
        notes.push(format!("down in {windows_down} of {} windows", stats.len()));
    }
    let datagram_loss = if sent > 0 {
        1.0 - (1.0 - (lost as f64 / sent as f64).clamp(0.0, 1.0)).powf(1.0 / DATAGRAMS_PER_PROBE as f64)
    } else {
        0.0
    };
    if datagram_loss > MAX_LOSS_SHARE {
        notes.push(format!("lost {lost} of {sent} probes (~{:.0}% of datagrams)", datagram_loss * 100.0));
    }
    let (h, fit_note) = e.assess_health(Some(expected_fits), Some(uncertainty_limit_ns));
    if h != EdgeHealth::Ok {
        notes.push(fit_note);
    }
    if notes.is_empty() {
        (EdgeHealth::Ok, String::new())
    } else {
        (EdgeHealth::Degraded, notes.join("; "))
    }
}

/// The weakest timestamping of any node (the page states one mode), and its error bound.
fn worst_stamp_mode(files: &[RunFile]) -> (TimestampMode, i64) {
    let rank = |m: StampMode| match m {
        StampMode::Hardware => 0,
        StampMode::Kernel => 1,
        StampMode::User => 2,
    };
    let worst = files
        .iter()
        .map(|f| f.file.meta.timestamp_mode)
        .max_by_key(|m| rank(*m))
        .unwrap_or(StampMode::User);
    // The windows' figures included: a NIC clock mapping's error, a switch to software.
    let bound = files
        .iter()
        .map(|f| f.file.timestamps().stamp_error_bound_ns)
        .max()
        .unwrap_or(worst.stamp_error_bound_ns());
    let mode = match worst {
        StampMode::Hardware => TimestampMode::Hardware,
        StampMode::Kernel => TimestampMode::Kernel,
        StampMode::User => TimestampMode::User,
    };
    (mode, bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::LoopResidual;
    use crate::report::input::OwdPoint;

    fn stat(sent: u64, complete: u64, pure: u64, lost: u64, up: bool) -> EdgeWindowStats {
        EdgeWindowStats {
            src: 0,
            dst: 1,
            sent,
            complete,
            pure,
            lost,
            up,
            went_down: 0,
            came_up: 0,
        }
    }

    fn edge(points: usize, fits: usize) -> EdgeSeries {
        let mut e = empty_edge(0, 1);
        e.points = vec![
            OwdPoint {
                t_ns: 0,
                owd_ns: 0,
                forward: true,
                pure: true
            };
            points
        ];
        e.fits = (0..fits as u64)
            .map(|w| EdgeWindowFit {
                window_id: w,
                start_ns: 0,
                end_ns: 2,
                mid_ns: 1,
                offset_ns: 0.0,
                drift_ppb: 0.0,
                margin_ns: 5.0,
                sigma_ns: Some(100.0),
            })
            .collect();
        e
    }

    #[test]
    fn health_comes_from_the_window_stats_and_the_fits() {
        let (h, note) = edge_health(
            &empty_edge(0, 1),
            &[&stat(10, 0, 0, 10, false), &stat(10, 0, 0, 10, false)],
            0,
            1000.0,
        );
        assert_eq!(
            (h, note.as_str()),
            (
                EdgeHealth::Down,
                "no probe delivered in 2 window(s): sent 20, lost 20"
            )
        );
        let ok = [stat(100, 100, 90, 0, true), stat(100, 99, 95, 1, true)];
        assert_eq!(
            edge_health(&edge(398, 2), &ok.iter().collect::<Vec<_>>(), 2, 1000.0),
            (EdgeHealth::Ok, String::new())
        );
        let bad = [stat(100, 80, 10, 20, true), stat(100, 50, 5, 50, false)];
        let (h, note) = edge_health(&edge(260, 1), &bad.iter().collect::<Vec<_>>(), 2, 1000.0);
        assert_eq!(h, EdgeHealth::Degraded);
        assert_eq!(note, "down in 1 of 2 windows; lost 70 of 200 probes (~10% of datagrams); 1 of 2 windows fitted");
        // Few pure probes with tight fits is fine; a fit looser than the limit is not.
        let queued = [stat(100, 100, 10, 0, true)];
        assert_eq!(edge_health(&edge(200, 1), &queued.iter().collect::<Vec<_>>(), 1, 1000.0), (EdgeHealth::Ok, String::new()));
        let mut loose = edge(200, 1);
        loose.fits[0].sigma_ns = Some(800.0);
        assert_eq!(
            edge_health(&loose, &queued.iter().collect::<Vec<_>>(), 1, 1000.0).1,
            "1 window(s) with a loose fit (2 sigma up to 1600 ns, limit 1000 ns)"
        );
        // 1% of datagrams lost: ~4% of the probes, and the edge is fine.
        let lossy = [stat(1500, 1440, 1400, 60, true)];
        assert_eq!(edge_health(&edge(2880, 1), &lossy.iter().collect::<Vec<_>>(), 1, 1000.0), (EdgeHealth::Ok, String::new()));
        let lossier = [stat(1500, 1100, 1000, 400, true)];
        assert_eq!(edge_health(&edge(2200, 1), &lossier.iter().collect::<Vec<_>>(), 1, 1000.0).0, EdgeHealth::Degraded);
    }

    #[test]
    fn triangles_sum_edge_offsets_with_reversed_edges_negated() {
        // 0->1: +100, 2->1: +30 (so 1->2 is -30), 0->2: +90 => 100 - 30 - 90 = -20.
        let fitted = BTreeMap::from([
            ((0, 1, 0), 100.0),
            ((2, 1, 0), 30.0),
            ((0, 2, 0), 90.0),
            ((0, 1, 1), 1.0),
        ]);
        let loops = crate::report::loops::triangle_residuals(&fitted, MAX_LOOPS);
        assert_eq!(
            loops,
            vec![LoopResidual {
                nodes: vec![0, 1, 2],
                window_id: Some(0),
                residual_ns: -20.0
            }]
        );
    }
}
