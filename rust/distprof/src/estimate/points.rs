//! One-way-delay points of each edge in one window.
//!
//! For edge src -> dst let theta(x) = S_dst - S_src as a function of x = S_src. A forward
//! packet gives y = rx(dst clock) - tx(src clock) = theta + forward delay, above the line;
//! a reverse packet gives y = tx(dst clock) - rx(src clock) = theta - reverse delay, below
//! it. x is measured from the window midpoint in the src clock, so the fitted intercept is
//! theta at the midpoint (the prototype measured x from an arbitrary record, which put
//! beta at an arbitrary instant). y is measured from `y_origin_ns`, a median forward y,
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
/// Records whose forward y give an edge's y origin (see `edge_points`).
const ORIGIN_SAMPLE: usize = 31;

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
    /// Points of every packet of every valid forward / reverse pair, pure or not, sorted
    /// by x: a packet that queued more than its pair partner still gives a valid
    /// constraint (its delay is never below the path's minimum). `fit` uses them when they
    /// give the smaller uncertainty (see `fit::fit_edge`).
    pub fwd_all: Vec<Point>,
    pub rev_all: Vec<Point>,
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
    /// The stamps that belong to the window: its interval widened by the slack.
    fn with_slack(&self) -> (i64, i64) {
        (self.start_ns.saturating_sub(WINDOW_SLACK_NS), self.end_ns.saturating_add(WINDOW_SLACK_NS))
    }
}

/// Groups one window's records by edge, turns each edge's into points and maps them with
/// `f`; the results come in (src, dst) order. One buffer is reused for all edges: a
/// window of 4096 edges would otherwise hold ~80 MB of points at once. With `want_probes`
/// false `EdgePoints::probes` stays empty (only the round-trip baselines read it; the hull
/// path saves a push and a sort per record). Never panics: bad records are counted in the
/// returned totals.
///
/// The probe engine of a standalone node writes each edge's records as one run in seq
/// order. Such a run is used where it lies, right after the scan that found it, while it
/// is in cache (a window of 512 nodes is ~120 MB of records: reading them all once to
/// group them and again to use them cost twice the memory traffic). The records of an
/// edge that come in several runs, or out of seq order, are gathered and used once the
/// scan is done, sorted by seq and without duplicates; `f` may then have seen that edge's
/// first run already, and its result for it is dropped.
pub fn map_edges<T>(
    records: &[ProbeRecord],
    num_nodes: u32,
    window: WindowBounds,
    tol: PurityTolerance,
    want_probes: bool,
    mut f: impl FnMut(&EdgePoints) -> T,
) -> (Vec<T>, PurityCounts) {
    let mut scratch: Vec<i64> = Vec::new();
    let mut buf = EdgePoints {
        src: 0,
        dst: 0,
        y_origin_ns: 0,
        fwd: Vec::new(),
        rev: Vec::new(),
        fwd_all: Vec::new(),
        rev_all: Vec::new(),
        probes: Vec::new(),
        counts: PurityCounts::default(),
        gap_noise_ns: 0.0,
    };
    let rules = PointRules { window, tol, want_probes };
    let mut edge = |key, recs: &[&ProbeRecord], mut counts: PurityCounts| {
        edge_points(key, recs, rules, &mut counts, &mut buf, &mut scratch);
        (f(&buf), counts)
    };
    // Records of no valid edge: counted, nothing else.
    let mut misplaced = PurityCounts::default();
    // Every edge in order of its first record: its result (None while or once its records
    // are scattered) and where its first run lies.
    type Slot<T> = ((NodeId, NodeId), Option<(T, PurityCounts)>, std::ops::Range<usize>);
    let mut edges: Vec<Slot<T>> = Vec::new();
    let mut slot_of: HashMap<(NodeId, NodeId), usize> = HashMap::new();
    // Edges whose records are not one run in seq order: all their records so far.
    let mut scattered: HashMap<(NodeId, NodeId), Vec<&ProbeRecord>> = HashMap::new();
    let mut run: Vec<&ProbeRecord> = Vec::with_capacity(512);
    let mut start = 0;
    while let Some(first) = records.get(start) {
        if !valid_edge(first, num_nodes) {
            misplaced.records += 1;
            misplaced.misplaced += 1;
            start += 1;
            continue;
        }
        let key = (first.src, first.dst);
        run.clear();
        run.extend(records[start..].iter().take_while(|r| (r.src, r.dst) == key));
        let here = start..start + run.len();
        start = here.end;
        if let Some(list) = scattered.get_mut(&key) {
            list.extend_from_slice(&run);
        } else if let Some(&i) = slot_of.get(&key) {
            // A second run: the first one's result goes.
            edges[i].1 = None;
            scattered.insert(key, records[edges[i].2.clone()].iter().chain(run.iter().copied()).collect());
        } else {
            slot_of.insert(key, edges.len());
            if run.windows(2).all(|w| w[0].seq < w[1].seq) {
                edges.push((key, Some(edge(key, &run, PurityCounts::default())), here));
            } else {
                edges.push((key, None, here));
                scattered.insert(key, run.clone());
            }
        }
    }
    for (key, mut recs) in scattered {
        recs.sort_by_key(|r| r.seq);
        let before = recs.len();
        recs.dedup_by_key(|r| r.seq);
        let duplicates = (before - recs.len()) as u64;
        edges[slot_of[&key]].1 = Some(edge(key, &recs, PurityCounts { duplicates, records: duplicates, ..Default::default() }));
    }
    if !edges.is_sorted_by_key(|slot| slot.0) {
        edges.sort_unstable_by_key(|slot| slot.0);
    }
    let mut total = misplaced;
    let out = edges
        .into_iter()
        .filter_map(|(_, result, _)| result)
        .map(|(value, counts)| {
            total.add(&counts);
            value
        })
        .collect();
    (out, total)
}

fn valid_edge(r: &ProbeRecord, num_nodes: u32) -> bool {
    r.src != r.dst && r.src < num_nodes && r.dst < num_nodes
}

/// What turns a window's records into points: the same for every edge.
#[derive(Clone, Copy)]
struct PointRules {
    window: WindowBounds,
    tol: PurityTolerance,
    want_probes: bool,
}

// The buffers (counts, e, raw_y) are the caller's so that one allocation serves every edge.
fn edge_points(
    key: (NodeId, NodeId),
    recs: &[&ProbeRecord],
    rules: PointRules,
    counts: &mut PurityCounts,
    e: &mut EdgePoints,
    raw_y: &mut Vec<i64>,
) {
    // The origin: the median forward y of a sample spread over the edge's records, robust
    // against a minority of absurd records like the median of all, without a pass over
    // them (this runs once per edge and window on every record: it is the hot path).
    let forward_y = |r: &&ProbeRecord| r.fwd_rx_ns[0].checked_sub(r.fwd_tx_ns[0]);
    let median = |raw_y: &mut Vec<i64>| match raw_y.len() {
        0 => 0,
        n => *raw_y.select_nth_unstable(n / 2).1,
    };
    raw_y.clear();
    let step = recs.len().div_ceil(ORIGIN_SAMPLE).max(1);
    raw_y.extend(recs.iter().step_by(step).filter_map(forward_y));
    let sampled = median(raw_y);
    let before = *counts;
    fill_points(key, recs, sampled, rules, counts, e);
    if counts.invalid_pairs - before.invalid_pairs > counts.usable() - before.usable() {
        // Most pairs were garbage against the sample's origin: absurd records where the
        // sample happened to look (e.g. every k-th). The median of all decides.
        raw_y.clear();
        raw_y.extend(recs.iter().filter_map(forward_y));
        let all = median(raw_y);
        if all != sampled {
            *counts = before;
            fill_points(key, recs, all, rules, counts, e);
        }
    }
}

/// The points, probes and counts of one edge's records with y measured from `y_origin_ns`.
fn fill_points(
    (src, dst): (NodeId, NodeId),
    recs: &[&ProbeRecord],
    y_origin_ns: i64,
    PointRules { window, tol, want_probes }: PointRules,
    counts: &mut PurityCounts,
    e: &mut EdgePoints,
) {
    let mid = window.mid_ns();
    let (lo, hi) = window.with_slack();
    // One direction's two points: x the stamps on the src clock, y = later - earlier.
    // None if a stamp is garbage (out of the window, overflowing, absurdly far).
    let pair_points = |x: [i64; 2], later: [i64; 2], earlier: [i64; 2]| -> Option<[Point; 2]> {
        let one = |i: usize| {
            let y = later[i].checked_sub(earlier[i])?.checked_sub(y_origin_ns)?;
            if y.unsigned_abs() > MAX_Y_SPREAD_NS as u64 || x[i] < lo || x[i] > hi {
                return None;
            }
            Some(Point { x_ns: x[i].checked_sub(mid)? as f64, y_ns: y as f64 })
        };
        Some([one(0)?, one(1)?])
    };
    let (mut gap_sq_sum, mut gap_n) = (0.0f64, 0u64);
    // Judges one direction's pair: its points go to `all` unless the pair is invalid, and
    // to `kept` if it is pure.
    let mut keep = |points: Option<[Point; 2]>, tx: [i64; 2], rx: [i64; 2], kept: &mut Vec<Point>, all: &mut Vec<Point>| {
        let Some(points) = points else { return PairVerdict::Invalid };
        let verdict = tol.judge(tx, rx);
        if verdict != PairVerdict::Invalid {
            all.extend_from_slice(&points);
        }
        if verdict == PairVerdict::Pure {
            // judge has checked that both gaps are positive and do not overflow.
            let diff = ((rx[1] - rx[0]) - (tx[1] - tx[0])) as f64 / 2.0;
            gap_sq_sum += diff * diff;
            gap_n += 1;
            kept.extend_from_slice(&points);
        }
        verdict
    };
    e.src = src;
    e.dst = dst;
    e.y_origin_ns = y_origin_ns;
    e.fwd.clear();
    e.rev.clear();
    e.fwd_all.clear();
    e.rev_all.clear();
    e.probes.clear();
    for r in recs {
        counts.records += 1;
        if r.fwd_tx_ns[0] < lo || r.fwd_tx_ns[0] > hi {
            counts.misplaced += 1;
            continue;
        }
        let fwd = pair_points(r.fwd_tx_ns, r.fwd_rx_ns, r.fwd_tx_ns);
        let rev = pair_points(r.rev_rx_ns, r.rev_tx_ns, r.rev_rx_ns);
        match keep(fwd, r.fwd_tx_ns, r.fwd_rx_ns, &mut e.fwd, &mut e.fwd_all) {
            PairVerdict::Pure => counts.fwd_pure += 1,
            PairVerdict::Impure => counts.fwd_impure += 1,
            PairVerdict::Invalid => counts.invalid_pairs += 1,
        }
        match keep(rev, r.rev_tx_ns, r.rev_rx_ns, &mut e.rev, &mut e.rev_all) {
            PairVerdict::Pure => counts.rev_pure += 1,
            PairVerdict::Impure => counts.rev_impure += 1,
            PairVerdict::Invalid => counts.invalid_pairs += 1,
        }
        if let (true, Some(f), Some(b)) = (want_probes, fwd, rev) {
            e.probes.push(Probe { fwd: f[0], rev: b[0] });
        }
    }
    // Records come in seq order, so these are nearly sorted and the sort is linear; the
    // check first skips even that in the usual case.
    // x comes from an i64, so it is never NaN and `<=` orders it.
    let by_x = |a: &Point, b: &Point| a.x_ns.total_cmp(&b.x_ns);
    for v in [&mut e.fwd, &mut e.rev, &mut e.fwd_all, &mut e.rev_all] {
        if !v.is_sorted_by(|a, b| a.x_ns <= b.x_ns) {
            v.sort_by(by_x);
        }
    }
    e.probes.sort_by(|a, b| a.fwd.x_ns.total_cmp(&b.fwd.x_ns));
    e.gap_noise_ns = if gap_n > 0 { (gap_sq_sum / gap_n as f64).sqrt() } else { 0.0 };
    e.counts = *counts;
}
