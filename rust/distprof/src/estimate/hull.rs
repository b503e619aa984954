//! The exact max-margin line between forward and reverse points.
//!
//! Every forward point lies above the true line and every reverse point below it (up to
//! timestamp noise). The line y = a + b x that maximizes the smallest vertical distance
//! t to both sets only touches the lower convex hull of the forward points and the upper
//! convex hull of the reverse points. For a slope b the best margin is
//! g(b) = (min_F(y - b x) - max_R(y - b x)) / 2, a concave piecewise-linear function whose
//! kinks are the slopes of the hull edges, so the optimum is at one of those slopes: a
//! binary search over them gives the same line as the linear program
//! max t s.t. y_f >= a + b x_f + t, y_r <= a + b x_r - t, in O(N log N) (O(N) when the
//! points come sorted, as they do). When noise makes the sets overlap t is negative and
//! the line is the one that least violates the separation.

use super::points::Point;

/// A fitted line, y = intercept + slope * x, x and y as in `points`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub slope: f64,
    pub intercept_ns: f64,
}

impl Line {
    pub fn at(&self, x_ns: f64) -> f64 {
        self.intercept_ns + self.slope * x_ns
    }

    /// The line through `a` and `b`, when `b` lies right of `a` (the two-point baselines,
    /// `ntp` and `two_point`); else too few points to pin it.
    pub fn through(a: Point, b: Point) -> Result<Line, FitError> {
        if b.x_ns > a.x_ns {
            let slope = (b.y_ns - a.y_ns) / (b.x_ns - a.x_ns);
            Ok(Line { slope, intercept_ns: a.y_ns - slope * a.x_ns })
        } else {
            Err(FitError::TooFewPoints)
        }
    }
}

/// Why an edge has no line this window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitError {
    /// Fewer than two pure points in a direction.
    TooFewPoints,
    /// The points do not pin the slope (all at one x, or one direction entirely before
    /// the other).
    Degenerate,
    /// The reference estimator failed or is not compiled in.
    Solver,
}

/// The two hulls the fit and the bound use.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hulls {
    /// Lower convex hull of the forward points, by increasing x.
    pub fwd_lower: Vec<Point>,
    /// Upper convex hull of the reverse points, by increasing x.
    pub rev_upper: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HullFit {
    pub line: Line,
    /// Smallest vertical distance of any point to the line (negative: the sets overlap).
    pub margin_ns: f64,
    pub hulls: Hulls,
}

fn cross(o: Point, a: Point, b: Point) -> f64 {
    (a.x_ns - o.x_ns) * (b.y_ns - o.y_ns) - (a.y_ns - o.y_ns) * (b.x_ns - o.x_ns)
}

/// Points per bucket of the pre-filter (see `candidates`).
const FILTER_BUCKET: usize = 16;
/// Absolute room for rounding in the pre-filter's interpolation (see `candidates`).
const FILTER_ROUNDING_NS: f64 = 1e-3;

/// Andrew's monotone chain: the lower hull of points sorted by x, into `h`.
fn monotone_chain(sorted: impl IntoIterator<Item = Point>, h: &mut Vec<Point>) {
    h.clear();
    for q in sorted {
        // Of points sharing an x only the lowest matters.
        if let Some(last) = h.last() {
            if last.x_ns == q.x_ns {
                if q.y_ns >= last.y_ns {
                    continue;
                }
                h.pop();
            }
        }
        while h.len() >= 2 && cross(h[h.len() - 2], h[h.len() - 1], q) <= 0.0 {
            h.pop();
        }
        h.push(q);
    }
}

/// Walks a lower hull (x strictly increasing, at least two vertices) by increasing x.
struct HullCursor<'a> {
    hull: &'a [Point],
    /// slopes[i]: of the segment hull[i]..hull[i + 1].
    slopes: Vec<f64>,
}

impl<'a> HullCursor<'a> {
    fn new(hull: &'a [Point]) -> Self {
        let slopes = hull.windows(2).map(|w| (w[1].y_ns - w[0].y_ns) / (w[1].x_ns - w[0].x_ns)).collect();
        Self { hull, slopes }
    }

    /// The hull's value at `x_ns`; `seg` is the segment of the last x asked for, which
    /// must not be larger than `x_ns`.
    fn at(&self, seg: &mut usize, x_ns: f64) -> f64 {
        while *seg + 1 < self.slopes.len() && self.hull[*seg + 1].x_ns < x_ns {
            *seg += 1;
        }
        let a = self.hull[*seg];
        a.y_ns + self.slopes[*seg] * (x_ns - a.x_ns)
    }
}

/// The points that can be vertices of the lower hull (after the sign flip `LOWER` picks),
/// in order. A point strictly above a segment between two of the points, inside its x
/// range, lies inside the hull and is no vertex. So: take the lowest point of every bucket
/// of `FILTER_BUCKET` points and the two end points, build their lower hull (a few dozen
/// points), and keep only the points on or below it. One-way delays sit mostly far above
/// their minimum (queueing), so whole buckets lie above it: a bucket whose lowest point is
/// above the coarse hull's highest value over the bucket's x range (at one of its ends,
/// the hull being convex) is skipped without looking at its points. The monotone chain (a
/// branchy pop-or-not per point) then runs on a few dozen survivors. Exact: the hull of
/// the survivors is the hull of all points.
///
/// The filter works on the points sheared by the edge's rough slope (y - s x): a shear
/// keeps which points are hull vertices, and it levels the drift (up to 50 ppm, i.e. 16 µs
/// over a bucket's 0.3 s, as much as the queueing) so that "lowest in the bucket" and the
/// skip test mean something.
fn candidates<const LOWER: bool>(sorted: &[Point], out: &mut Vec<Point>) {
    out.clear();
    let flip = |p: &Point| Point { x_ns: p.x_ns, y_ns: if LOWER { p.y_ns } else { -p.y_ns } };
    let n = sorted.len();
    if n <= 2 * FILTER_BUCKET {
        out.extend(sorted.iter().map(flip));
        return;
    }
    // x from the first point in the shear: absolute x times a steep slope could overflow.
    let x0 = sorted[0].x_ns;
    let lowest_of = |bucket: &[Point], s: f64| {
        let sheared_y = |p: &Point| flip(p).y_ns - s * (p.x_ns - x0);
        // Index and value, not the point: two selects a compiler makes branch-free (which
        // point of a bucket is lowest is random, so a branch would mispredict).
        let (mut best, mut best_y) = (0, sheared_y(&bucket[0]));
        for (i, p) in bucket.iter().enumerate().skip(1) {
            let y = sheared_y(p);
            let lower = y < best_y;
            best = if lower { i } else { best };
            best_y = if lower { y } else { best_y };
        }
        Point { x_ns: bucket[best].x_ns, y_ns: best_y }
    };
    // The rough slope: from the first bucket's lowest point to the last one's.
    let (first, last) = (lowest_of(&sorted[..FILTER_BUCKET], 0.0), lowest_of(&sorted[n - FILTER_BUCKET..], 0.0));
    let s = match (last.y_ns - first.y_ns) / (last.x_ns - first.x_ns) {
        s if s.is_finite() => s,
        _ => 0.0,
    };
    let sheared = |p: &Point| Point { x_ns: p.x_ns, y_ns: flip(p).y_ns - s * (p.x_ns - x0) };
    let lowest: Vec<Point> = sorted.chunks(FILTER_BUCKET).map(|b| lowest_of(b, s)).collect();
    let mut coarse = Vec::with_capacity(64);
    let ends = [sheared(&sorted[0]), sheared(&sorted[n - 1])];
    monotone_chain(std::iter::once(ends[0]).chain(lowest.iter().copied()).chain(std::iter::once(ends[1])), &mut coarse);
    if coarse.len() < 2 {
        // Every point at one x.
        out.extend(sorted.iter().map(flip));
        return;
    }
    // Keep what is on or below the coarse hull, with room for the rounding of the shear
    // and the interpolation (a few ulps of the largest value; keeping a point too many is
    // harmless).
    let largest_y = coarse.iter().map(|p| p.y_ns.abs()).fold(0.0, f64::max);
    let room = FILTER_ROUNDING_NS + 1e-12 * (largest_y + s.abs() * (sorted[n - 1].x_ns - x0));
    if !room.is_finite() {
        // Values beyond what f64 arithmetic on them keeps exact enough: no filter.
        out.extend(sorted.iter().map(flip));
        return;
    }
    let cursor = HullCursor::new(&coarse);
    let mut seg = 0;
    for (bucket, low) in sorted.chunks(FILTER_BUCKET).zip(&lowest) {
        let at_start = cursor.at(&mut seg, bucket[0].x_ns);
        let at_end = cursor.at(&mut { seg }, bucket[bucket.len() - 1].x_ns);
        if low.y_ns > at_start.max(at_end) + room {
            continue;
        }
        let mut inside = seg;
        for p in bucket {
            if sheared(p).y_ns <= cursor.at(&mut inside, p.x_ns) + room {
                out.push(flip(p));
            }
        }
    }
}

/// The lower hull (after the sign flip `LOWER` picks) of points sorted by x: the monotone
/// chain over the pre-filter's survivors. A const so each side compiles to its own
/// branch-free loops: this is the hot path of a window.
fn chain<const LOWER: bool>(sorted: &[Point]) -> Vec<Point> {
    let mut cand = Vec::new();
    candidates::<LOWER>(sorted, &mut cand);
    let mut h: Vec<Point> = Vec::with_capacity(cand.len().min(64));
    monotone_chain(cand, &mut h);
    if !LOWER {
        // The upper hull of (x, y) is the lower hull of (x, -y).
        h.iter_mut().for_each(|p| p.y_ns = -p.y_ns);
    }
    h
}

pub fn lower_hull(sorted: &[Point]) -> Vec<Point> {
    chain::<true>(sorted)
}

pub fn upper_hull(sorted: &[Point]) -> Vec<Point> {
    chain::<false>(sorted)
}

/// Piecewise-linear value of a hull chain at x; None outside its x range.
pub fn eval_chain(chain: &[Point], x_ns: f64) -> Option<f64> {
    let first = chain.first()?;
    let last = chain.last()?;
    if x_ns < first.x_ns || x_ns > last.x_ns {
        return None;
    }
    if chain.len() == 1 {
        return Some(first.y_ns);
    }
    let i = chain.partition_point(|p| p.x_ns <= x_ns).clamp(1, chain.len() - 1);
    let (a, b) = (chain[i - 1], chain[i]);
    Some(a.y_ns + (b.y_ns - a.y_ns) * (x_ns - a.x_ns) / (b.x_ns - a.x_ns))
}

impl Hulls {
    pub fn of(fwd_sorted: &[Point], rev_sorted: &[Point]) -> Self {
        Self { fwd_lower: lower_hull(fwd_sorted), rev_upper: upper_hull(rev_sorted) }
    }

    /// (min over forward of y - b x, max over reverse of y - b x) for slope b.
    fn support(&self, b: f64) -> (f64, f64) {
        let lo = self.fwd_lower.iter().map(|p| p.y_ns - b * p.x_ns).fold(f64::INFINITY, f64::min);
        let hi = self.rev_upper.iter().map(|p| p.y_ns - b * p.x_ns).fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    }

    /// The max-margin line among the lines of slope `b`: midway between the two supports.
    /// None when a hull is empty or a value is not finite.
    pub fn line_at_slope(&self, b: f64) -> Option<Line> {
        let (min_f, max_r) = self.support(b);
        let line = Line { slope: b, intercept_ns: 0.5 * (min_f + max_r) };
        (line.intercept_ns.is_finite() && line.slope.is_finite()).then_some(line)
    }

    /// How far the two hulls cross along slope b, ns (0 when they do not): the forward
    /// points that lie below the reverse ones. Delays are never negative, so on an edge
    /// with consistent stamps they never do; a stamp that moved mid-window (a PHC step, a
    /// clock step the line fits across) makes them.
    pub fn overlap_ns(&self, b: f64) -> f64 {
        (-self.gap(b)).max(0.0)
    }

    fn gap(&self, b: f64) -> f64 {
        let (lo, hi) = self.support(b);
        lo - hi
    }
}

/// Fits the max-margin line. `fwd` and `rev` must be sorted by x (as `points` gives them).
pub fn fit(fwd: &[Point], rev: &[Point]) -> Result<HullFit, FitError> {
    if fwd.len() < 2 || rev.len() < 2 {
        return Err(FitError::TooFewPoints);
    }
    if fwd.iter().chain(rev).any(|p| !p.x_ns.is_finite() || !p.y_ns.is_finite()) {
        return Err(FitError::Degenerate);
    }
    let hulls = Hulls::of(fwd, rev);
    let (f0, f1) = (hulls.fwd_lower[0].x_ns, hulls.fwd_lower[hulls.fwd_lower.len() - 1].x_ns);
    let (r0, r1) = (hulls.rev_upper[0].x_ns, hulls.rev_upper[hulls.rev_upper.len() - 1].x_ns);
    // g(b) grows without bound for b -> +inf unless some reverse point is left of some
    // forward point, and for b -> -inf unless some reverse point is right of one.
    if !(r0 < f1 && r1 > f0) {
        return Err(FitError::Degenerate);
    }
    let mut slopes: Vec<f64> = hulls
        .fwd_lower
        .windows(2)
        .chain(hulls.rev_upper.windows(2))
        .map(|w| (w[1].y_ns - w[0].y_ns) / (w[1].x_ns - w[0].x_ns))
        .filter(|s| s.is_finite())
        .collect();
    if slopes.is_empty() {
        return Err(FitError::Degenerate);
    }
    slopes.sort_by(f64::total_cmp);
    // g is concave in b, so g(slopes[k]) is unimodal in k: find the first k with
    // g(slopes[k]) >= g(slopes[k + 1]).
    let (mut lo, mut hi) = (0usize, slopes.len() - 1);
    while lo < hi {
        let m = (lo + hi) / 2;
        if hulls.gap(slopes[m]) >= hulls.gap(slopes[m + 1]) {
            hi = m;
        } else {
            lo = m + 1;
        }
    }
    let b = slopes[lo];
    let (min_f, max_r) = hulls.support(b);
    let line = Line { slope: b, intercept_ns: 0.5 * (min_f + max_r) };
    Ok(HullFit { line, margin_ns: 0.5 * (min_f - max_r), hulls })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, f64)]) -> Vec<Point> {
        v.iter().map(|&(x_ns, y_ns)| Point { x_ns, y_ns }).collect()
    }

    #[test]
    fn exact_on_a_hand_made_case() {
        // True line y = 100 + 0.001 x; forward 10 above at the ends, reverse 10 below in
        // the middle: the max-margin line is the true one with margin 10.
        let fwd = pts(&[(-1000.0, 99.0 + 10.0), (0.0, 100.0 + 30.0), (1000.0, 101.0 + 10.0)]);
        let rev = pts(&[(-500.0, 99.5 - 50.0), (500.0, 100.5 - 10.0), (900.0, 100.9 - 40.0)]);
        let f = fit(&fwd, &rev).expect("fit");
        // The optimum: slope pinned by the two forward end points and the reverse point
        // at 500.
        assert!((f.line.slope - 0.001).abs() < 1e-12, "{f:?}");
        assert!((f.line.intercept_ns - 100.0).abs() < 1e-9, "{f:?}");
        assert!((f.margin_ns - 10.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn degenerate_inputs_are_errors() {
        let two = pts(&[(0.0, 1.0), (1.0, 1.0)]);
        assert_eq!(fit(&two[..1], &two).unwrap_err(), FitError::TooFewPoints);
        let left = pts(&[(-2.0, 0.0), (-1.0, 0.0)]);
        let right = pts(&[(1.0, 5.0), (2.0, 5.0)]);
        assert_eq!(fit(&right, &left).unwrap_err(), FitError::Degenerate);
        let same_x = pts(&[(0.0, 5.0), (0.0, 6.0)]);
        let same_x_r = pts(&[(0.0, 1.0), (0.0, 2.0)]);
        assert_eq!(fit(&same_x, &same_x_r).unwrap_err(), FitError::Degenerate);
    }

    /// The plain monotone chain, without the pre-filter.
    fn reference_lower(sorted: &[Point]) -> Vec<Point> {
        let mut h = Vec::new();
        monotone_chain(sorted.iter().copied(), &mut h);
        h
    }

    #[test]
    fn the_pre_filter_keeps_the_exact_hull() {
        // Delay-like clouds (exponential excess over a sloped line, a few repeated x and
        // collinear runs, outliers) of many sizes: the filtered hull equals the plain one.
        let mut noise = crate::estimate::test_noise::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut unit = move || noise.unit();
        for n in [3usize, 17, 33, 34, 100, 401, 2000] {
            for round in 0..20 {
                let mut v: Vec<Point> = (0..n)
                    .map(|i| {
                        // Collinear runs with exact (integer) arithmetic: with rounding,
                        // "collinear" is not a well-defined predicate.
                        if round % 7 == 0 {
                            let x = (i / 2) as f64;
                            return Point { x_ns: x, y_ns: 3.0 * x + if i % 3 == 0 { 1.0 } else { 0.0 } };
                        }
                        let x = if round % 5 == 0 { (i / 3) as f64 } else { i as f64 * 10.0 + unit() * 5.0 };
                        let excess = -20_000.0 * (1.0 - unit()).ln();
                        // Slopes the filter's shear must level, either sign; an absurd
                        // low point at an end that skews the rough slope.
                        let slope = [0.001, -40.0, 300.0][round % 3];
                        let outlier = if round % 4 == 1 && i == 0 { -1e7 } else { 0.0 };
                        Point { x_ns: x, y_ns: slope * x + excess + outlier }
                    })
                    .collect();
                v.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
                assert_eq!(lower_hull(&v), reference_lower(&v), "n = {n}, round {round}");
                let flipped: Vec<Point> = v.iter().map(|p| Point { x_ns: p.x_ns, y_ns: -p.y_ns }).collect();
                let mut want = reference_lower(&flipped);
                want.iter_mut().for_each(|p| p.y_ns = -p.y_ns);
                assert_eq!(upper_hull(&v), want, "n = {n}, round {round} (upper)");
            }
        }
    }

    #[test]
    fn the_pre_filter_survives_slopes_that_overflow_a_shear() {
        // A rough slope of ~1e298 at x ~ 1e10: sheared values would overflow to infinity.
        let v: Vec<Point> =
            (0..40).map(|i| Point { x_ns: 1e10 + i as f64, y_ns: if i < 24 { 0.0 } else { 1e300 } }).collect();
        assert_eq!(lower_hull(&v), reference_lower(&v));
        let flipped: Vec<Point> = v.iter().map(|p| Point { x_ns: p.x_ns, y_ns: -p.y_ns }).collect();
        let mut want = reference_lower(&flipped);
        want.iter_mut().for_each(|p| p.y_ns = -p.y_ns);
        assert_eq!(upper_hull(&v), want);
        let rev: Vec<Point> = (0..40).map(|i| Point { x_ns: 1e10 + i as f64, y_ns: -1.0 }).collect();
        assert!(fit(&v, &rev).is_ok());
    }

    #[test]
    fn hull_value_interpolates() {
        let c = pts(&[(0.0, 0.0), (10.0, 10.0), (20.0, 0.0)]);
        assert_eq!(eval_chain(&c, 5.0), Some(5.0));
        assert_eq!(eval_chain(&c, 20.0), Some(0.0));
        assert_eq!(eval_chain(&c, 21.0), None);
    }
}
