//! The network panels: the probe graph with nodes on a circle and edges colored by health,
//! and the loop-closure residuals as a histogram.

use super::analysis::Analysis;
use super::input::{EdgeHealth, LoopResidual, ReportInput};
use super::svg::{fmt_ns, unit_for_ns, AxisSpec, Frame, PathData, Svg};
use distprof::context::NodeId;
use std::collections::BTreeMap;

/// Node labels are written up to this many nodes; beyond, tooltips carry the ids.
const LABEL_MAX_NODES: usize = 64;
/// Node tooltips up to this many nodes (each costs ~60 bytes).
const TOOLTIP_MAX_NODES: usize = 2048;
const HISTOGRAM_BINS: usize = 31;

/// The probe graph. Each directed edge bends to the right of its direction, so the two
/// directions of a pair are two distinct arcs.
pub fn graph(input: &ReportInput, analysis: &Analysis, size: f64) -> String {
    let mut ids: Vec<NodeId> = input.nodes.iter().map(|n| n.node).collect();
    for e in &input.edges {
        ids.push(e.src);
        ids.push(e.dst);
    }
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len().max(1);
    let c = size / 2.0;
    let r = size / 2.0 - if n <= LABEL_MAX_NODES { 30.0 } else { 12.0 };
    let pos: BTreeMap<NodeId, (f64, f64)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let a = std::f64::consts::TAU * i as f64 / n as f64 - std::f64::consts::FRAC_PI_2;
            (*id, (c + r * a.cos(), c + r * a.sin()))
        })
        .collect();

    let mut svg = Svg::new(size, size, "probe graph, edges colored by health");
    // Beyond a few dozen nodes the edges would cover the disc: thinner, fainter strokes.
    let dense = n > LABEL_MAX_NODES;
    if dense {
        svg.raw("<g class=\"dense\">");
    }
    // Ok edges first (faint), then degraded, then down on top: problems stay visible.
    for health in [EdgeHealth::Ok, EdgeHealth::Degraded, EdgeHealth::Down] {
        let mut d = PathData::new();
        for e in input.edges.iter().filter(|e| e.health == health) {
            let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(&e.src), pos.get(&e.dst)) else {
                continue;
            };
            let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
            // Right-hand normal of the direction, 12% of the length.
            let (dx, dy) = (x2 - x1, y2 - y1);
            let (qx, qy) = (mx - dy * 0.12, my + dx * 0.12);
            d.move_to(x1, y1);
            // A quadratic curve through three points, written as two line segments is
            // enough at this size and keeps PathData's command set small.
            d.line_to(
                (x1 + qx) / 2.0 * 0.5 + (qx + x2) / 2.0 * 0.5,
                (y1 + qy) / 2.0 * 0.5 + (qy + y2) / 2.0 * 0.5,
            );
            d.line_to(x2, y2);
        }
        svg.path(&d, &format!("class=\"edge {}\"", health.label()), None);
    }
    if dense {
        svg.raw("</g>");
    }
    let stats: BTreeMap<NodeId, _> = analysis.nodes.iter().map(|s| (s.node, s)).collect();
    let node_r = if n <= LABEL_MAX_NODES {
        7.0
    } else {
        (size / n as f64 * 0.9).clamp(1.5, 5.0)
    };
    for id in &ids {
        let (x, y) = pos[id];
        let s = stats.get(id);
        let class = match s {
            None => "node unknown",
            Some(s) if !s.reachable => "node unreach",
            Some(s) if s.flagged > 0 => "node flagged",
            Some(_) if *id == input.facts.reference_node => "node ref",
            Some(_) => "node ok",
        };
        let tip = (n <= TOOLTIP_MAX_NODES).then(|| match s {
            Some(s) if s.reachable => format!(
                "node {id}: max bound {}, {} of {} windows flagged",
                fmt_ns(s.max_bound_ns),
                s.flagged,
                s.windows
            ),
            Some(_) => format!("node {id}: unreachable"),
            None => format!("node {id}: not in the node list"),
        });
        svg.circle(x, y, node_r, &format!("class=\"{class}\""), tip.as_deref());
        if n <= LABEL_MAX_NODES {
            let (dx, dy) = (x - c, y - c);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            svg.text(
                x + dx / len * 18.0,
                y + dy / len * 18.0 + 4.0,
                &id.to_string(),
                "class=\"tick\" text-anchor=\"middle\"",
            );
        }
    }
    svg.finish()
}

/// Histogram of the loop residuals (signed), with the zero line.
pub fn residual_histogram(loops: &[LoopResidual], width: f64, height: f64) -> String {
    let values: Vec<f64> = loops
        .iter()
        .map(|l| l.residual_ns)
        .filter(|v| v.is_finite())
        .collect();
    let mut svg = Svg::new(width, height, "loop-closure residuals");
    if values.is_empty() {
        svg.text(
            width / 2.0,
            height / 2.0,
            "no loop residuals in the input",
            "class=\"tick\" text-anchor=\"middle\"",
        );
        return svg.finish();
    }
    let m = values.iter().fold(0.0f64, |a, v| a.max(v.abs())).max(1.0);
    let (lo, hi) = (-m * 1.02, m * 1.02);
    let bin_w = (hi - lo) / HISTOGRAM_BINS as f64;
    let mut counts = vec![0usize; HISTOGRAM_BINS];
    for v in &values {
        let b = ((v - lo) / bin_w) as usize;
        counts[b.min(HISTOGRAM_BINS - 1)] += 1;
    }
    let cmax = *counts.iter().max().unwrap_or(&1) as f64;
    let frame = Frame::new(width, height, (lo, hi), (0.0, cmax * 1.1));
    let (unit, div) = unit_for_ns(m);
    let title = format!("residual around the loop ({unit})");
    frame.draw_axes(
        &mut svg,
        &AxisSpec {
            title: &title,
            divisor: div,
        },
        &AxisSpec {
            title: "loops",
            divisor: 1.0,
        },
    );
    for (i, count) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let a = lo + i as f64 * bin_w;
        let x0 = frame.x.map(a);
        let x1 = frame.x.map(a + bin_w);
        let y = frame.y.map(*count as f64);
        let tip = format!(
            "{count} loops with residual in [{}, {})",
            fmt_ns(a),
            fmt_ns(a + bin_w)
        );
        svg.rect_titled(
            x0 + 0.5,
            y,
            x1 - x0 - 1.0,
            frame.bottom() - y,
            "class=\"bar\"",
            Some(&tip),
        );
    }
    let x0 = frame.x.map(0.0);
    svg.line(x0, frame.top, x0, frame.bottom(), "class=\"zero\"");
    svg.finish()
}
