//! The node panels: one node's offset and drift against the reference over the run with
//! the error bound as a band, and a heatmap of every node's bound per window.

use super::analysis::Analysis;
use super::svg::{fmt_ns, unit_for_ns, AxisSpec, Frame, PathData, Scale, Svg};
use distprof::model::{ClockSegment, NodeClockModel};
use std::collections::BTreeMap;

/// The heatmap gets at most this many columns; more windows are merged (worst bound of the
/// group) so a long run stays one screen wide.
const HEATMAP_MAX_COLUMNS: usize = 90;
/// And at most this many rows (worst nodes first beyond it); a row is never under 3 px.
pub const HEATMAP_MAX_ROWS: usize = 400;

/// A segment's calibrated uncertainty, 0 when unknown (older files: `f64::MAX`).
fn uncertainty(s: &ClockSegment) -> f64 {
    if s.uncertainty_ns.is_finite() && s.uncertainty_ns < s.bound_ns.max(0.0) * 1e3 && s.uncertainty_ns < 1e15 {
        s.uncertainty_ns.max(0.0)
    } else {
        0.0
    }
}

fn finite_segment(s: &ClockSegment) -> bool {
    [s.offset_ns, s.drift_ppb, s.bound_ns]
        .iter()
        .all(|v| v.is_finite())
}

/// The offset plot is scaled to the estimate and its calibrated uncertainty; a worst-case
/// bound band wider than this many times that span is clipped at the plot's edges (and
/// the plot says so). Drawn whole, a bound of ~100 µs (half a round trip: path asymmetry
/// cannot be seen) flattens estimates that move by tens of ns into one line.
const BOUND_CLIP_FACTOR: f64 = 4.0;
/// The offset plot spans at least this much, ns: below it the ticks would show noise of
/// the float format, not of the estimate.
const MIN_OFFSET_SPAN_NS: f64 = 10.0;

/// A node plot and the trend taken out of its offset.
pub struct NodePlot {
    pub svg: String,
    /// The largest worst-case bound when it was clipped at the plot's edges, ns.
    pub bound_clipped_ns: Option<f64>,
    /// The run-wide straight line removed from the offsets: value at the run start and slope.
    pub trend_start_ns: f64,
    pub trend_ppb: f64,
}

/// A straight line through windows `(x, y, slope per unit x)`: the median of the windows'
/// own slopes, and the median intercept for it. Medians, so that one broken window or a
/// clock step does not tilt the line the whole plot is drawn against. Returns the value at
/// x = 0 and the slope.
pub(super) fn trend(windows: &[(f64, f64, f64)]) -> (f64, f64) {
    fn median(mut v: Vec<f64>) -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_unstable_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
    let b = median(windows.iter().map(|w| w.2).collect());
    let a = median(windows.iter().map(|w| w.1 - b * w.0).collect());
    (a, b)
}

/// Offset (top) and drift (bottom) of one node on the global timeline, seconds since
/// `t0_global_ns`. Drift of tens of ppm moves the offset by hundreds of µs over a run,
/// which would flatten µs bounds into a line, so the top plot shows the offset minus its
/// run-wide straight-line trend (see [`trend`]; given in the caption): bands, steps and wander stay visible.
/// Flagged windows are tinted; the dashed lines are the bound limit around the estimate.
pub fn node_plot(
    model: &NodeClockModel,
    t0_global_ns: f64,
    width: f64,
    bound_limit_ns: Option<f64>,
) -> NodePlot {
    let segs: Vec<&ClockSegment> = model
        .segments
        .iter()
        .filter(|s| finite_segment(s))
        .collect();
    let x_of = |s: &ClockSegment, local: i64| s.to_global_ns(local) - t0_global_ns;
    let mids: Vec<(f64, f64, f64)> = segs
        .iter()
        .map(|s| (x_of(s, s.mid_local_ns), s.offset_ns, s.drift_ppb * 1e-9))
        .collect();
    let (ta, tb) = trend(&mids);
    let offset_at = |s: &ClockSegment, local: i64| {
        s.correction_ns(local)
            - (ta + tb * x_of(s, local))
    };

    let mut x_lo = f64::INFINITY;
    let mut x_hi = f64::NEG_INFINITY;
    // The estimate ± its calibrated uncertainty, and ± its worst-case bound.
    let (mut u_lo, mut u_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut b_lo, mut b_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut d_lo = f64::INFINITY;
    let mut d_hi = f64::NEG_INFINITY;
    for s in &segs {
        for t in [s.start_local_ns, s.end_local_ns] {
            x_lo = x_lo.min(x_of(s, t));
            x_hi = x_hi.max(x_of(s, t));
            u_lo = u_lo.min(offset_at(s, t) - uncertainty(s));
            u_hi = u_hi.max(offset_at(s, t) + uncertainty(s));
            b_lo = b_lo.min(offset_at(s, t) - s.bound_ns);
            b_hi = b_hi.max(offset_at(s, t) + s.bound_ns);
        }
        d_lo = d_lo.min(s.drift_ppb);
        d_hi = d_hi.max(s.drift_ppb);
    }
    if u_hi - u_lo < MIN_OFFSET_SPAN_NS {
        let mid = (u_lo + u_hi) / 2.0;
        (u_lo, u_hi) = (mid - MIN_OFFSET_SPAN_NS / 2.0, mid + MIN_OFFSET_SPAN_NS / 2.0);
    }
    let clip = b_hi - b_lo > BOUND_CLIP_FACTOR * (u_hi - u_lo);
    let (y_lo, y_hi) = if clip { (u_lo, u_hi) } else { (b_lo, b_hi) };
    let bound_clipped_ns = clip.then(|| segs.iter().map(|s| s.bound_ns).fold(0.0, f64::max));
    let pad = ((y_hi - y_lo) * 0.08).max(1.0);
    let dpad = ((d_hi - d_lo) * 0.15).max(1.0);

    let (h_off, h_drift) = (180.0, 110.0);
    let mut svg = Svg::new(
        width,
        h_off + h_drift,
        &format!(
            "node {}: offset and drift against the reference",
            model.node
        ),
    );
    let mut off = Frame::new(width, h_off, (x_lo, x_hi), (y_lo - pad, y_hi + pad));
    let mut drift = Frame::new(width, h_drift, (x_lo, x_hi), (d_lo - dpad, d_hi + dpad));
    drift.top += h_off;
    drift.y = Scale::new(drift.y.d0, drift.y.d1, drift.top + drift.height, drift.top);
    let (dtitle, ddiv) = if (d_hi - d_lo).abs().max(d_hi.abs()) >= 10_000.0 {
        ("drift (ppm)", 1e3)
    } else {
        ("drift (ppb)", 1.0)
    };
    // Room for the longer tick labels of the two plots (drift in ppm: `19.7682`) beside
    // their titles; both plots keep one time axis.
    let left = off.left_for_y_labels(unit_for_ns(y_hi - y_lo).1).max(drift.left_for_y_labels(ddiv));
    off.set_left(left);
    drift.set_left(left);

    if segs.is_empty() {
        svg.text(
            width / 2.0,
            h_off / 2.0,
            "unreachable: no path of usable edges to the reference",
            "class=\"warn\" text-anchor=\"middle\"",
        );
        return NodePlot {
            svg: svg.finish(),
            bound_clipped_ns: None,
            trend_start_ns: f64::NAN,
            trend_ppb: f64::NAN,
        };
    }

    for s in segs.iter().filter(|s| s.flagged) {
        let (a, b) = (
            off.x.map(x_of(s, s.start_local_ns)),
            off.x.map(x_of(s, s.end_local_ns)),
        );
        off.band(&mut svg, a, b, "class=\"bad\"");
        drift.band(&mut svg, a, b, "class=\"bad\"");
    }
    off.draw_time_axes(&mut svg, "", "offset − trend", y_hi - y_lo);
    drift.draw_axes(
        &mut svg,
        &AxisSpec {
            title: "time since run start, reference clock (s)",
            divisor: 1e9,
        },
        &AxisSpec {
            title: dtitle,
            divisor: ddiv,
        },
    );

    if let Some(limit) = bound_limit_ns.filter(|l| l.is_finite()) {
        // The limit is a half-width: show it around each segment's line as dashed edges.
        let mut d = PathData::new();
        for s in &segs {
            for sign in [1.0, -1.0] {
                d.move_to(
                    off.x.map(x_of(s, s.start_local_ns)),
                    off.y
                        .map_clamped(offset_at(s, s.start_local_ns) + sign * limit),
                );
                d.line_to(
                    off.x.map(x_of(s, s.end_local_ns)),
                    off.y
                        .map_clamped(offset_at(s, s.end_local_ns) + sign * limit),
                );
            }
        }
        svg.path(&d, "class=\"limit\"", None);
    }
    for s in &segs {
        let (a, b) = (s.start_local_ns, s.end_local_ns);
        let (xa, xb) = (off.x.map(x_of(s, a)), off.x.map(x_of(s, b)));
        // The bound (clamped: it may run past the plot) and the uncertainty inside it.
        for (half, class) in [(s.bound_ns, if s.flagged { "class=\"band-bad\"" } else { "class=\"band\"" }), (uncertainty(s), "class=\"band-unc\"")] {
            if half <= 0.0 {
                continue;
            }
            let mut band = PathData::new();
            band.move_to(xa, off.y.map_clamped(offset_at(s, a) + half));
            band.line_to(xb, off.y.map_clamped(offset_at(s, b) + half));
            band.line_to(xb, off.y.map_clamped(offset_at(s, b) - half));
            band.line_to(xa, off.y.map_clamped(offset_at(s, a) - half));
            band.close();
            svg.path(&band, class, None);
        }
        let mut line = PathData::new();
        line.move_to(xa, off.y.map(offset_at(s, a)));
        line.line_to(xb, off.y.map(offset_at(s, b)));
        let tip = format!(
            "window {}: offset {} at its midpoint, uncertainty {}, bound ± {}, drift {:.0} ppb{}",
            s.window_id,
            fmt_ns(s.offset_ns),
            fmt_ns(uncertainty(s)),
            fmt_ns(s.bound_ns),
            s.drift_ppb,
            if s.flagged { ", FLAGGED" } else { "" }
        );
        svg.path(&line, "class=\"fit\"", Some(&tip));
        let mut step = PathData::new();
        step.move_to(xa, drift.y.map(s.drift_ppb));
        step.line_to(xb, drift.y.map(s.drift_ppb));
        svg.path(&step, "class=\"drift\"", None);
    }
    if let Some(b) = bound_clipped_ns {
        svg.text(
            off.right() - 4.0,
            off.top + 12.0,
            &format!("bound ± {} runs past this scale (clipped at the edges)", fmt_ns(b)),
            "class=\"tick\" text-anchor=\"end\"",
        );
    }
    NodePlot {
        svg: svg.finish(),
        bound_clipped_ns,
        trend_start_ns: ta,
        trend_ppb: tb * 1e9,
    }
}

/// A sequential color for `v` in [0, 1]: pale yellow (small bound) to dark red.
fn heat_color(v: f64) -> String {
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(255.0, 128.0),
        lerp(245.0, 0.0),
        lerp(200.0, 38.0)
    )
}

/// What a heatmap cell shows of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeatMeasure {
    /// The calibrated uncertainty (symmetric paths): what says how good the sync is, so
    /// the page colours by it.
    Uncertainty,
    /// The worst-case bound (any path asymmetry): at least half the smallest round trip,
    /// however good the sync.
    Bound,
}

impl HeatMeasure {
    fn of(self, s: &distprof::model::ClockSegment) -> f64 {
        match self {
            HeatMeasure::Uncertainty => s.uncertainty_ns,
            HeatMeasure::Bound => s.bound_ns,
        }
    }
    fn name(self) -> &'static str {
        match self {
            HeatMeasure::Uncertainty => "uncertainty",
            HeatMeasure::Bound => "bound",
        }
    }
}

/// Every node's `measure` per window as colored cells, nodes by id (the worst
/// `HEATMAP_MAX_ROWS` when there are more), windows by id.
pub fn heatmap(
    nodes: &[NodeClockModel],
    analysis: &Analysis,
    measure: HeatMeasure,
    limit_ns: Option<f64>,
    width: f64,
) -> String {
    let name = measure.name();
    let mut window_ids: Vec<u64> = nodes
        .iter()
        .flat_map(|n| n.segments.iter().map(|s| s.window_id))
        .collect();
    window_ids.sort_unstable();
    window_ids.dedup();
    let group = window_ids.len().div_ceil(HEATMAP_MAX_COLUMNS).max(1);
    let column_of: BTreeMap<u64, usize> = window_ids
        .iter()
        .enumerate()
        .map(|(i, w)| (*w, i / group))
        .collect();
    let columns = window_ids.len().div_ceil(group).max(1);

    let shown: Vec<u32> = {
        let mut ids: Vec<u32> = analysis
            .nodes
            .iter()
            .take(HEATMAP_MAX_ROWS)
            .map(|n| n.node)
            .collect();
        ids.sort_unstable();
        ids
    };
    let by_id: BTreeMap<u32, &NodeClockModel> = nodes.iter().map(|n| (n.node, n)).collect();
    let bounds = nodes
        .iter()
        .flat_map(|n| n.segments.iter().map(|s| measure.of(s)))
        // f64::MAX stands for "none" in the JSON.
        .filter(|b| b.is_finite() && *b > 0.0 && *b < f64::MAX);
    let (bmin, bmax) = bounds.fold((f64::INFINITY, 0.0f64), |(lo, hi), b| {
        (lo.min(b), hi.max(b))
    });
    // Linear from zero to the flag limit when there is one and no bound exceeds it (so color
    // reads as "how close to flagged"), else to the largest bound: when windows exceed the
    // limit (every window of a local run through the relay does), a ramp ending at the limit
    // would paint them all the same darkest red and hide which are worst.
    let limit_ns = limit_ns.filter(|l| l.is_finite() && *l > 0.0);
    let top_ns = limit_ns.map_or(bmax, |l| l.max(bmax)).max(1.0);
    let norm = |b: f64| b / top_ns;

    let row_h = (520.0 / shown.len().max(1) as f64).clamp(3.0, 14.0);
    let (left, top) = (56.0, 18.0);
    let cell_w = ((width - left - 10.0) / columns as f64).max(1.0);
    let height = top + row_h * shown.len() as f64 + 44.0;
    let mut svg = Svg::new(width, height, &format!("{name} per node and window"));
    let group_note = if group > 1 {
        format!(" (columns merge {group} windows: worst {name} shown)")
    } else {
        String::new()
    };
    svg.text(
        left,
        12.0,
        &format!("windows →{group_note}"),
        "class=\"tick\"",
    );
    let label_every = (12.0 / row_h).ceil() as usize;
    for (row, id) in shown.iter().enumerate() {
        let y = top + row as f64 * row_h;
        if row % label_every == 0 {
            svg.text(
                left - 4.0,
                y + row_h.min(12.0) - 1.0,
                &format!("node {id}"),
                "class=\"tick\" text-anchor=\"end\"",
            );
        }
        let Some(model) = by_id.get(id) else { continue };
        if model.segments.is_empty() || !model.reachable {
            svg.rect(
                left,
                y,
                cell_w * columns as f64,
                row_h - 0.5,
                "class=\"unreach\"",
            );
            continue;
        }
        let mut cells: Vec<Option<(f64, bool, u64)>> = vec![None; columns];
        for s in &model.segments {
            let c = column_of[&s.window_id];
            let b = if measure.of(s).is_finite() && measure.of(s) < f64::MAX {
                measure.of(s)
            } else {
                f64::INFINITY
            };
            let cell = cells[c].get_or_insert((b, s.flagged, s.window_id));
            if b > cell.0 {
                *cell = (b, cell.1 || s.flagged, s.window_id);
            }
            cell.1 |= s.flagged;
        }
        for (c, cell) in cells.iter().enumerate() {
            let Some((b, flagged, w)) = cell else {
                continue;
            };
            let x = left + c as f64 * cell_w;
            let mut attrs = format!("fill=\"{}\"", heat_color(norm(*b)));
            if *flagged {
                attrs.push_str(" class=\"flag\"");
            }
            // Per-cell tooltips only while they stay cheap.
            let tip = (shown.len() * columns <= 4000)
                .then(|| format!("node {id}, window {w}: {name} {}", fmt_ns(*b)));
            svg.rect_titled(x, y, cell_w - 0.5, row_h - 0.5, &attrs, tip.as_deref());
        }
    }
    // Legend: the color ramp with its end values.
    let ly = top + row_h * shown.len() as f64 + 14.0;
    for i in 0..20 {
        svg.rect(
            left + i as f64 * 8.0,
            ly,
            8.0,
            10.0,
            &format!("fill=\"{}\"", heat_color(i as f64 / 19.0)),
        );
    }
    let limit_note = match limit_ns {
        Some(l) if l >= top_ns => format!("{} (the flag limit); darkest: at or over it", fmt_ns(l)),
        Some(l) => {
            // Where the limit falls on the ramp: everything right of the mark is flagged.
            let x = left + 160.0 * (l / top_ns);
            svg.rect(x - 1.0, ly - 3.0, 2.0, 16.0, "class=\"limitmark\"");
            format!("{} (the largest {name}); the black mark is the flag limit, {}", fmt_ns(top_ns), fmt_ns(l))
        }
        None => fmt_ns(top_ns),
    };
    svg.text(left + 166.0, ly + 9.0, &format!(
            "{name} 0 … {limit_note}; red outline: flagged; grey: unreachable. In the run: {} … {}",
            fmt_ns(bmin),
            fmt_ns(bmax)
        ), "class=\"tick\"");
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten 1-s windows of a node 19.77 ppm fast whose estimates wander by ±40 ns, each with
    /// an uncertainty of 30 ns and a worst-case bound of `bound_ns`.
    fn model(bound_ns: f64) -> NodeClockModel {
        let segments = (0..10)
            .map(|i: i64| {
                let start = 1_000_000_000_000 + i * 1_000_000_000;
                ClockSegment {
                    window_id: i as u64,
                    start_local_ns: start,
                    end_local_ns: start + 1_000_000_000,
                    mid_local_ns: start + 500_000_000,
                    offset_ns: 5e6 + 19_770.0 * i as f64 + if i % 2 == 0 { 40.0 } else { -40.0 },
                    drift_ppb: 19_770.0 + (i % 3) as f64 * 0.4,
                    bound_ns,
                    uncertainty_ns: 30.0,
                    drift_uncertainty_ppb: 5.0,
                    flagged: false,
                break_at_start: false,
                }
            })
            .collect();
        NodeClockModel { node: 1, reachable: true, segments }
    }

    /// The pixel y of every `fit` line's ends: how much of the plot the estimate uses.
    fn fit_extent(svg: &str) -> f64 {
        let ys: Vec<f64> = svg
            .split("<path d=\"")
            .skip(1)
            .filter(|p| p.split('"').nth(2).is_some_and(|c| c == "fit"))
            .flat_map(|p| p.split('"').next().unwrap().split(['M', 'L']).filter_map(|xy| xy.trim().split(' ').nth(1).and_then(|y| y.trim().parse::<f64>().ok())).collect::<Vec<_>>())
            .collect();
        ys.iter().copied().fold(f64::NEG_INFINITY, f64::max) - ys.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Issue 28: a 106 µs bound against estimates that move by 80 ns drew every offset plot
    /// as a flat line. Now the scale follows the estimate and its uncertainty (ns), the
    /// bound is clipped at the edges and the plot says so; a bound that fits is drawn whole.
    #[test]
    fn a_wide_bound_is_clipped_and_the_estimate_keeps_the_plot() {
        let plot = node_plot(&model(106_000.0), 1e12, 600.0, None);
        assert_eq!(plot.bound_clipped_ns, Some(106_000.0));
        assert!(plot.svg.contains("offset − trend (ns)"), "{}", plot.svg);
        assert!(plot.svg.contains("bound ± 106 µs runs past this scale"), "{}", plot.svg);
        // The 80 ns wander spans most of the 180 px plot's 136 px (it was under 1 px).
        assert!(fit_extent(&plot.svg) > 60.0, "{}", fit_extent(&plot.svg));
        let fits = node_plot(&model(60.0), 1e12, 600.0, None);
        assert_eq!(fits.bound_clipped_ns, None);
        assert!(!fits.svg.contains("runs past"));
    }

    /// Issue 28: the drift axis's tick labels (ppm with four decimals) ran into its title.
    /// Every right-aligned y tick label must end before the frame and start right of the
    /// rotated title (12 px text centred at x = 12, so its right edge is at most 19 px), at
    /// 6.5 px per character of 11 px text.
    #[test]
    fn y_tick_labels_clear_the_axis_titles() {
        let plot = node_plot(&model(106_000.0), 1e12, 600.0, None);
        let left: f64 = plot.svg.split("<rect x=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        let labels: Vec<(f64, String)> = plot
            .svg
            .split("<text x=\"")
            .skip(1)
            // Right-aligned tick labels; the clipping note (right-aligned at the plot's right) is not one.
            .filter(|t| t.contains("text-anchor=\"end\"") && t.contains("class=\"tick\"") && !t.contains("runs past"))
            .map(|t| (t.split('"').next().unwrap().parse().unwrap(), t.split('>').nth(1).unwrap().split('<').next().unwrap().to_string()))
            .collect();
        assert!(labels.iter().any(|(_, l)| l.starts_with("19.77")), "drift in ppm: {labels:?}");
        for (x, label) in &labels {
            assert!(*x <= left, "{label} at {x}, frame at {left}");
            let start = x - 6.5 * label.chars().count() as f64;
            assert!(start >= 19.0, "`{label}` starts at {start:.1} px, under the title");
        }
    }

    #[test]
    fn trend_ignores_a_step_and_a_broken_window() {
        // y = 100 + 2x, windows at x = 0..10, a step of +1000 from x = 6 on, window 3 wild.
        let w: Vec<(f64, f64, f64)> = (0..10)
            .map(|i| {
                let x = i as f64;
                let step = if i >= 6 { 1000.0 } else { 0.0 };
                let slope = if i == 3 { 500.0 } else { 2.0 };
                (x, 100.0 + 2.0 * x + step, slope)
            })
            .collect();
        let (a, b) = trend(&w);
        assert_eq!(b, 2.0);
        assert_eq!(a, 100.0);
        assert_eq!(trend(&[]), (0.0, 0.0));
    }
}
