//! One-way-delay points of each edge in one window.
//!
//! For edge src -> dst let theta(x) = S_dst - S_src as a function of x = S_src. A forward
//! packet gives y = rx(dst clock) - tx(src clock) = theta + forward delay, above the line;
//! a reverse packet gives y = tx(dst clock) - rx(src clock) = theta - reverse delay, below
//! it. x is measured from the window midpoint in the src clock, so the fitted intercept is
//! theta at the midpoint (the prototype measured x from an arbitrary record, which put
//! beta at an arbitrary instant). y is measured from `y_origin_ns`, the median forward y,
//! so that the fit works on small numbers.

use super::purity::{PairVerdict, PurityCounts, PurityTolerance};
use crate::context::NodeId;
use crate::record::ProbeRecord;
use std::collections::HashMap;

/// No real one-way delay or in-window clock change is this large; a point this far from
/// the edge's median is a corrupt record, and keeping it would wreck the fit. Also keeps
/// every value small enough that f64 holds it to well under a nanosecond.
const MAX_Y_SPREAD_NS: i64 = 10_000_000_000;
/// Reverse packets arrive a little after the window closes; records whose stamps fall
/// further than this outside the window belong to another window.
const WINDOW_SLACK_NS: i64 = 100_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Src-clock time minus the window midpoint.
    pub x_ns: f64,
    /// Clock difference plus (forward) or minus (reverse) the one-way delay, minus
    /// `EdgePoints::y_origin_ns`.
    pub y_ns: f64,
}

/// The first packet of each direction of one record, whatever its purity: the input of
/// the round-trip baselines (NTP, two-point).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    pub fwd: Point,
    pub rev: Point,
}

impl Probe {
    pub fn rtt_ns(&self) -> f64 {
        self.fwd.y_ns - self.rev.y_ns
    }
    /// The NTP offset of this probe: the midpoint of its forward and reverse points.
    pub fn mid(&self) -> Point {
        Point {
            x_ns: 0.5 * (self.fwd.x_ns + self.rev.x_ns),
            y_ns: 0.5 * (self.fwd.y_ns + self.rev.y_ns),
        }
    }
}

/// Everything one edge contributes to one window.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgePoints {
    pub src: NodeId,
    pub dst: NodeId,
    pub y_origin_ns: i64,
    /// Points of pure forward pairs, sorted by x.
    pub fwd: Vec<Point>,
    /// Points of pure reverse pairs, sorted by x.
    pub rev: Vec<Point>,
    /// Sorted by x of the forward packet.
    pub probes: Vec<Probe>,
    pub counts: PurityCounts,
    /// RMS of (received gap - sent gap) / 2 over pure pairs: an upper estimate of the
    /// timestamp noise, used by the bound.
    pub gap_noise_ns: f64,
}

/// Where the window lies: the same local-clock interval on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBounds {
    pub start_ns: i64,
    pub end_ns: i64,
}

impl WindowBounds {
    pub fn mid_ns(&self) -> i64 {
        self.start_ns + (self.end_ns - self.start_ns) / 2
    }
    fn contains(&self, t_ns: i64) -> bool {
        t_ns >= self.start_ns.saturating_sub(WINDOW_SLACK_NS)
            && t_ns <= self.end_ns.saturating_add(WINDOW_SLACK_NS)
    }
}

/// Groups one window's records by edge, turns each edge's into points and hands them to
/// `visit`, in (src, dst) order. One buffer is reused for all edges: a window of 4096
/// edges would otherwise hold ~80 MB of points at once. Never panics: bad records are
/// counted in the returned totals.
pub fn for_each_edge(
    records: &[ProbeRecord],
    num_nodes: u32,
    window: WindowBounds,
    tol: PurityTolerance,
    visit: impl FnMut(&EdgePoints),
) -> PurityCounts {
    for_each_edge_with(records, num_nodes, window, tol, true, visit)
}

/// As `for_each_edge`; with `want_probes` false `EdgePoints::probes` stays empty (only the
/// round-trip baselines read it; the hull path saves a push and a sort per record).
pub fn for_each_edge_with(
    records: &[ProbeRecord],
    num_nodes: u32,
    window: WindowBounds,
    tol: PurityTolerance,
    want_probes: bool,
    mut visit: impl FnMut(&EdgePoints),
) -> PurityCounts {
    let mut scratch: Vec<i64> = Vec::new();
    let mut total = PurityCounts::default();
    let mut buf = EdgePoints {
        src: 0,
        dst: 0,
        y_origin_ns: 0,
        fwd: Vec::new(),
        rev: Vec::new(),
        probes: Vec::new(),
        counts: PurityCounts::default(),
        gap_noise_ns: 0.0,
    };
    // Fast path: the probe engine writes each edge's records as one run in seq order; then
    // the runs are used in place, without grouping or copying.
    if let Some(mut runs) = contiguous_runs(records, num_nodes) {
        runs.sort_unstable_by_key(|r| r.0);
        for (key, lo, hi) in runs {
            let mut counts = PurityCounts::default();
            edge_points(key, &records[lo..hi], window, tol, want_probes, &mut counts, &mut buf, &mut scratch);
            total.add(&counts);
            visit(&buf);
        }
        return total;
    }
    let mut by_edge: HashMap<(NodeId, NodeId), Vec<&ProbeRecord>> = HashMap::new();
    // Records come in runs of one edge; remember the run's list to skip most lookups.
    let mut run: Option<((NodeId, NodeId), Vec<&ProbeRecord>)> = None;
    for r in records {
        if !valid_edge(r, num_nodes) {
            total.records += 1;
            total.misplaced += 1;
            continue;
        }
        let key = (r.src, r.dst);
        match &mut run {
            Some((k, list)) if *k == key => list.push(r),
            _ => {
                if let Some((k, list)) = run.take() {
                    merge_run(&mut by_edge, k, list);
                }
                let mut list = Vec::with_capacity(256);
                list.push(r);
                run = Some((key, list));
            }
        }
    }
    if let Some((k, list)) = run.take() {
        merge_run(&mut by_edge, k, list);
    }
    let mut keys: Vec<_> = by_edge.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let mut recs = by_edge.remove(&key).unwrap_or_default();
        recs.sort_by_key(|r| r.seq);
        let before = recs.len();
        recs.dedup_by_key(|r| r.seq);
        let duplicates = (before - recs.len()) as u64;
        let mut counts = PurityCounts { duplicates, records: duplicates, ..Default::default() };
        edge_points(key, &recs, window, tol, want_probes, &mut counts, &mut buf, &mut scratch);
        total.add(&counts);
        visit(&buf);
    }
    total
}

/// The points of every edge at once (tests and tools; the online path streams).
pub fn build_edges(
    records: &[ProbeRecord],
    num_nodes: u32,
    window: WindowBounds,
    tol: PurityTolerance,
) -> (Vec<EdgePoints>, PurityCounts) {
    let mut edges = Vec::new();
    let total = for_each_edge(records, num_nodes, window, tol, |e| edges.push(e.clone()));
    (edges, total)
}

fn valid_edge(r: &ProbeRecord, num_nodes: u32) -> bool {
    r.src != r.dst && r.src < num_nodes && r.dst < num_nodes
}

/// (edge, start, end) of each run when every valid edge's records form exactly one run
/// with strictly increasing seq (so no duplicates either); None otherwise.
/// (edge, start, end) of one run of records.
type Run = ((NodeId, NodeId), usize, usize);

fn contiguous_runs(records: &[ProbeRecord], num_nodes: u32) -> Option<Vec<Run>> {
    let mut runs: Vec<Run> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, r) in records.iter().enumerate() {
        if !valid_edge(r, num_nodes) {
            return None;
        }
        let key = (r.src, r.dst);
        match runs.last_mut() {
            Some((k, _, end)) if *k == key && records[*end - 1].seq < r.seq => *end = i + 1,
            _ => {
                if !seen.insert(key) {
                    return None;
                }
                runs.push((key, i, i + 1));
            }
        }
    }
    Some(runs)
}

fn merge_run<'a>(
    by_edge: &mut HashMap<(NodeId, NodeId), Vec<&'a ProbeRecord>>,
    key: (NodeId, NodeId),
    list: Vec<&'a ProbeRecord>,
) {
    match by_edge.get_mut(&key) {
        Some(existing) => existing.extend(list),
        None => {
            by_edge.insert(key, list);
        }
    }
}

// The buffers (counts, e, raw_y) are the caller's so that one allocation serves every edge.
#[allow(clippy::too_many_arguments)]
fn edge_points<R: std::borrow::Borrow<ProbeRecord>>(
    (src, dst): (NodeId, NodeId),
    recs: &[R],
    window: WindowBounds,
    tol: PurityTolerance,
    want_probes: bool,
    counts: &mut PurityCounts,
    e: &mut EdgePoints,
    raw_y: &mut Vec<i64>,
) {
    let mid = window.mid_ns();
    // The median forward y is the origin: robust against a few absurd records.
    raw_y.clear();
    raw_y.extend(recs.iter().map(|r| r.borrow()).filter_map(|r| r.fwd_rx_ns[0].checked_sub(r.fwd_tx_ns[0])));
    let half = raw_y.len() / 2;
    let y_origin_ns = if raw_y.is_empty() { 0 } else { *raw_y.select_nth_unstable(half).1 };
    let point = |x_abs: i64, later: i64, earlier: i64| -> Option<Point> {
        let y = later.checked_sub(earlier)?.checked_sub(y_origin_ns)?;
        if y.unsigned_abs() > MAX_Y_SPREAD_NS as u64 || !window.contains(x_abs) {
            return None;
        }
        Some(Point { x_ns: x_abs.checked_sub(mid)? as f64, y_ns: y as f64 })
    };
    e.src = src;
    e.dst = dst;
    e.y_origin_ns = y_origin_ns;
    e.fwd.clear();
    e.rev.clear();
    e.probes.clear();
    let (mut gap_sq_sum, mut gap_n) = (0.0f64, 0u64);
    for r in recs {
        let r: &ProbeRecord = r.borrow();
        counts.records += 1;
        if !window.contains(r.fwd_tx_ns[0]) {
            counts.misplaced += 1;
            continue;
        }
        let both = |a: Option<Point>, b: Option<Point>| Some([a?, b?]);
        let fwd = both(
            point(r.fwd_tx_ns[0], r.fwd_rx_ns[0], r.fwd_tx_ns[0]),
            point(r.fwd_tx_ns[1], r.fwd_rx_ns[1], r.fwd_tx_ns[1]),
        );
        let rev = both(
            point(r.rev_rx_ns[0], r.rev_tx_ns[0], r.rev_rx_ns[0]),
            point(r.rev_rx_ns[1], r.rev_tx_ns[1], r.rev_rx_ns[1]),
        );
        for (pts, tx, rx, is_fwd) in
            [(&fwd, r.fwd_tx_ns, r.fwd_rx_ns, true), (&rev, r.rev_tx_ns, r.rev_rx_ns, false)]
        {
            let verdict = match pts {
                None => PairVerdict::Invalid,
                Some(_) => tol.judge(tx, rx),
            };
            match (verdict, is_fwd) {
                (PairVerdict::Invalid, _) => counts.invalid_pairs += 1,
                (PairVerdict::Impure, true) => counts.fwd_impure += 1,
                (PairVerdict::Impure, false) => counts.rev_impure += 1,
                (PairVerdict::Pure, _) => {
                    let diff = ((rx[1] - rx[0]) - (tx[1] - tx[0])) as f64 / 2.0;
                    gap_sq_sum += diff * diff;
                    gap_n += 1;
                    let list = if is_fwd { &mut e.fwd } else { &mut e.rev };
                    if let Some(p) = pts {
                        list.extend_from_slice(p);
                    }
                    if is_fwd {
                        counts.fwd_pure += 1;
                    } else {
                        counts.rev_pure += 1;
                    }
                }
            }
        }
        if let (true, Some(f), Some(b)) = (want_probes, &fwd, &rev) {
            e.probes.push(Probe { fwd: f[0], rev: b[0] });
        }
    }
    // Records come in seq order, so these are nearly sorted and the sort is linear; the
    // check first skips even that in the usual case.
    let by_x = |a: &Point, b: &Point| a.x_ns.total_cmp(&b.x_ns);
    for v in [&mut e.fwd, &mut e.rev] {
        if !v.is_sorted_by(|a, b| by_x(a, b).is_le()) {
            v.sort_by(by_x);
        }
    }
    e.probes.sort_by(|a, b| a.fwd.x_ns.total_cmp(&b.fwd.x_ns));
    e.gap_noise_ns = if gap_n > 0 { (gap_sq_sum / gap_n as f64).sqrt() } else { 0.0 };
    e.counts = *counts;
}
