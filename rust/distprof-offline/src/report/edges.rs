//! The edge panel: one edge's one-way-delay clouds over the run with each window's fitted
//! line and margin band.
//!
//! Forward points (src -> dst) lie above the line, reverse points below it (see
//! `input.rs` for the sign convention). A window whose clouds overlap (negative margin) is
//! tinted red: no line separates them and its offset is not trustworthy.
//!
//! Relative drift of tens of ppm moves the clock difference by hundreds of µs over a run,
//! against delays of tens of µs; so every y value (points, lines, bands) is drawn minus
//! one straight line through the separating window fits of the run (median drift and
//! intercept, so a clock step does not tilt it; the caption gives it).
//! Subtracting the same line from everything keeps every point's vertical distance to its
//! fit, which is what the margins are made of.

use super::downsample::min_max_per_bucket;
use super::input::{EdgeSeries, OwdPoint};
use distprof::model::ns_between;
use super::nodes::trend;
use super::svg::{fmt_ns, Frame, PathData, Svg};

/// Pixel width of one time bucket when downsampling: two points (min, max) per 2 px is
/// as much as a screen can show.
const PX_PER_BUCKET: f64 = 2.0;
/// Share of points left out of the vertical range on each side: queueing outliers would
/// squash the clouds' edges, which is where the fit lives. They are drawn on the border.
const Y_TRIM_QUANTILE: f64 = 0.01;

/// What the plot shows besides the SVG, for its caption.
pub struct EdgePlot {
    pub svg: String,
    pub drawn_points: usize,
    pub clamped_points: usize,
    /// The line removed from every y value: value at the edge's first probe, slope.
    pub trend_start_ns: f64,
    pub trend_ppb: f64,
}

pub fn edge_plot(edge: &EdgeSeries, width: f64, height: f64) -> EdgePlot {
    let fits: Vec<_> = edge
        .fits
        .iter()
        .filter(|f| {
            [f.offset_ns, f.drift_ppb, f.margin_ns]
                .iter()
                .all(|v| v.is_finite())
        })
        .copied()
        .collect();
    let t0 = edge
        .points
        .iter()
        .map(|p| p.t_ns)
        .chain(fits.iter().map(|f| f.start_ns))
        .min()
        .unwrap_or(0);
    let t1 = edge
        .points
        .iter()
        .map(|p| p.t_ns)
        .chain(fits.iter().map(|f| f.end_ns))
        .max()
        .unwrap_or(t0 + 1);

    let mids: Vec<(f64, f64, f64)> = fits
        .iter()
        .filter(|f| f.margin_ns >= 0.0)
        .map(|f| (ns_between(t0, f.mid_ns), f.offset_ns, f.drift_ppb * 1e-9))
        .collect();
    let (ta, tb) = trend(&mids);
    let detrend = |t: i64, y: f64| y - (ta + tb * ns_between(t0, t));

    // Vertical range: trimmed quantiles of the points, widened to every line and band.
    let mut owd: Vec<f64> = edge
        .points
        .iter()
        .map(|p| detrend(p.t_ns, p.owd_ns as f64))
        .collect();
    owd.sort_unstable_by(f64::total_cmp);
    let q = |f: f64| owd[((owd.len() - 1) as f64 * f).round() as usize];
    let (mut lo, mut hi) = if owd.is_empty() {
        (f64::INFINITY, f64::NEG_INFINITY)
    } else {
        (q(Y_TRIM_QUANTILE), q(1.0 - Y_TRIM_QUANTILE))
    };
    for f in &fits {
        for t in [f.start_ns, f.end_ns] {
            let y = detrend(t, f.line_ns(t));
            let m = f.margin_ns.abs();
            lo = lo.min(y - m);
            hi = hi.max(y + m);
        }
    }
    if !(lo.is_finite() && hi.is_finite()) {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.06).max(1.0);
    let (lo, hi) = (lo - pad, hi + pad);

    let mut svg = Svg::new(
        width,
        height,
        &format!("edge {} -> {}: one-way delays and fits", edge.src, edge.dst),
    );
    let frame = Frame::new(width, height, (0.0, ns_between(t0, t1)), (lo, hi));
    let rel = |t: i64| ns_between(t0, t);

    // Overlapping windows first, under everything.
    for f in fits.iter().filter(|f| f.margin_ns < 0.0) {
        let x0 = frame.x.map(rel(f.start_ns));
        let x1 = frame.x.map(rel(f.end_ns));
        frame.band(&mut svg, x0, x1, "class=\"bad\"");
    }
    frame.draw_time_axes(&mut svg, "time since the edge's first probe, src clock (s)", "dst − src − trend", hi - lo);

    // Margin bands and lines.
    for f in &fits {
        let (a, b) = (f.start_ns, f.end_ns);
        let (xa, xb) = (frame.x.map(rel(a)), frame.x.map(rel(b)));
        let m = f.margin_ns.abs();
        let (ya, yb) = (detrend(a, f.line_ns(a)), detrend(b, f.line_ns(b)));
        let mut band = PathData::new();
        band.move_to(xa, frame.y.map_clamped(ya + m));
        band.line_to(xb, frame.y.map_clamped(yb + m));
        band.line_to(xb, frame.y.map_clamped(yb - m));
        band.line_to(xa, frame.y.map_clamped(ya - m));
        band.close();
        svg.path(
            &band,
            if f.margin_ns < 0.0 {
                "class=\"band-bad\""
            } else {
                "class=\"band\""
            },
            None,
        );
        let mut line = PathData::new();
        line.move_to(xa, frame.y.map_clamped(ya));
        line.line_to(xb, frame.y.map_clamped(yb));
        let tip = format!(
            "window {}: offset {} at midpoint, drift {:.0} ppb, margin {}",
            f.window_id,
            fmt_ns(f.offset_ns),
            f.drift_ppb,
            fmt_ns(f.margin_ns)
        );
        svg.path(&line, "class=\"fit\"", Some(&tip));
    }

    // Points, each class downsampled on its own so each keeps its extremes; impure under pure.
    let buckets = (frame.width / PX_PER_BUCKET).max(1.0) as usize;
    let mut drawn_points = 0;
    let mut clamped_points = 0;
    for (forward, pure, class) in [
        (true, false, "fwd-impure"),
        (false, false, "rev-impure"),
        (true, true, "fwd"),
        (false, true, "rev"),
    ] {
        let series: Vec<OwdPoint> = edge
            .points
            .iter()
            .filter(|p| p.forward == forward && p.pure == pure)
            .copied()
            .collect();
        let kept = min_max_per_bucket(&series, buckets);
        let mut d = PathData::new();
        for p in &kept {
            let y = detrend(p.t_ns, p.owd_ns as f64);
            if y < lo || y > hi {
                clamped_points += 1;
            }
            d.dot(frame.x.map(rel(p.t_ns)), frame.y.map_clamped(y));
        }
        drawn_points += kept.len();
        svg.path(&d, &format!("class=\"pts {class}\""), None);
    }
    EdgePlot {
        svg: svg.finish(),
        drawn_points,
        clamped_points,
        trend_start_ns: ta,
        trend_ppb: tb * 1e9,
    }
}
