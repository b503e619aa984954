//! Each edge's slices with the neighbour's own deviation taken out, so that what is left
//! is the node's own.
//!
//! An edge's residual is the difference of its two nodes' deviations from their lines.
//! When few clocks bend, the median over a node's edges leaves a neighbour's bend out. But
//! under a servo (chrony on every host) every clock kinks in most windows, each at its own
//! time: each of a node's edges carries a different neighbour's kink of up to ~2 ppm
//! (microseconds of bend over a window), and their median is a curve with kinks of its own
//! that misplaces the node's break by up to ~0.8 s (simulator, disciplined scenario, seeds
//! 1-4). So the deviations are solved for jointly, per slice: each node's is the median
//! over its edges of what the edge and the neighbour's current deviation say it is (a
//! Jacobi step), all of them less their median over the nodes (the deviations are known up
//! to a common curve; the pieces use a node's less the reference's, which takes it out).
//! A few steps suffice on the probe graphs' short diameters.
//!
//! What is taken out of an edge is the neighbour's deviation as a fitted curve (its line
//! plus its own kinks, searched as a node's breaks are), not its half-second medians: a
//! median of ~16 slices carries hundreds of ns of noise (each slice's extremes are the
//! lowest of ~12 probes through 20 us queues), and subtracted from an edge's slices it
//! moves every point that the piece's max-margin lines rest on. Simulator, disciplined
//! scenario, seeds 1-4, the breaks as before: pieces more than 150 ns off at their
//! midpoints 171 -> 99 of ~740, p95 of all samples 219 -> 192 ns. With the cleaner edges
//! a node's own smaller kinks are kept too (`ACCEPT_CHI2_CLEANED`).

use super::deviation::{line_fit, Deviation, ACCEPT_CHI2};
use super::{median, node_time, slice_count, NodeEdge, Slice, SLICE_NS};
use crate::estimate::window_fits::WindowFits;

/// Jacobi steps of the joint solve. Each step carries the deviations one hop further;
/// the simulator's probe graphs (out-degree 8) have diameters of 2-4 hops at 64-512 nodes.
const STEPS: usize = 6;

/// A neighbour's bin further than this from its fitted curve is taken out as it is, ns: there
/// the clock does what a line with two kinks cannot follow (an ntpd slew of 500 ppm moves
/// it 250 us per slice), and its noisy median is nearer the truth than the curve. Seven
/// bin sigmas of the disciplined scenario (~300 ns); a chrony kink the search missed bends
/// a clock by ~1 us at most within the window. Seeds 1-2 / 5-8: ntpd-slew p99 101 / 161 us
/// with it, 91 / 193 us with the bins everywhere; disciplined unchanged.
const MISFIT_NS: f64 = 2_000.0;

/// One of a node's edges with its slices, the neighbour's deviation taken out.
#[derive(Debug, Clone)]
pub(super) struct CleanEdge {
    pub edge: NodeEdge,
    pub slices: Vec<Slice>,
}

/// For every node, its edges (`raw`: as `node_edges` gives them, with their slices) with
/// each slice less the neighbour's own deviation there.
pub(super) fn clean_edges(fits: &WindowFits, raw: Vec<Vec<CleanEdge>>, window_ns: i64) -> Vec<Vec<CleanEdge>> {
    let n = raw.len();
    let half = window_ns as f64 / 2.0;
    let Some(count) = slice_count(window_ns) else {
        return raw;
    };
    let bin = |t: f64| {
        let k = ((t + half) / SLICE_NS as f64).floor();
        (k >= 0.0 && k < count as f64).then_some(k as usize)
    };
    // Per node and edge and slice: its bin in the node's clock, the neighbour, the
    // neighbour's bin in its own clock, and what the slice says of the node's deviation
    // when the neighbour's is zero.
    struct Sample {
        t: f64,
        bin: usize,
        other: usize,
        other_bin: Option<usize>,
        value: f64,
    }
    let samples: Vec<Vec<Sample>> = raw
        .iter()
        .map(|es| {
            es.iter()
                .flat_map(|CleanEdge { edge: e, slices }| {
                    let (src, dst) = fits.fitted[e.k].key;
                    let other = if e.sign > 0.0 { src } else { dst } as usize;
                    slices.iter().filter_map(move |s| {
                        let t = node_time(s, e.sign, e.shift_ns);
                        Some(Sample {
                            t,
                            bin: bin(t)?,
                            other,
                            other_bin: bin(node_time(s, -e.sign, e.shift_ns)),
                            value: e.sign * s.midpoint().y_ns,
                        })
                    })
                })
                .collect()
        })
        .collect();
    // A residual y is (dst's deviation) - (src's): the node's is sign * y + the other's.
    let mut deviation = vec![vec![0.0; count]; n];
    let mut per_bin: Vec<Vec<f64>> = vec![Vec::new(); count];
    let mut common = vec![0.0; count];
    for _ in 0..STEPS {
        let mut next = vec![vec![f64::NAN; count]; n];
        for (i, node_samples) in samples.iter().enumerate() {
            per_bin.iter_mut().for_each(Vec::clear);
            for s in node_samples {
                let other = s.other_bin.map_or(0.0, |b| deviation[s.other][b]);
                per_bin[s.bin].push(s.value + other);
            }
            for (b, v) in per_bin.iter_mut().enumerate().filter(|(_, v)| !v.is_empty()) {
                next[i][b] = median(v);
            }
        }
        for b in 0..count {
            let mut at: Vec<f64> = next.iter().map(|d| d[b]).filter(|v| v.is_finite()).collect();
            common[b] = if at.is_empty() { 0.0 } else { median(&mut at) };
            for d in next.iter_mut() {
                d[b] = if d[b].is_finite() { d[b] - common[b] } else { 0.0 };
            }
        }
        deviation = next;
    }
    // Each node's deviation as a curve: the search for its kinks (`deviation`) on what its
    // samples say with the neighbours' solved deviations, then the least-squares line
    // with those kinks (a line where it has none).
    let curves: Vec<Option<Deviation>> = samples
        .iter()
        .map(|node_samples| {
            let said: Vec<(f64, f64)> = node_samples
                .iter()
                .map(|s| (s.t, s.value + s.other_bin.map_or(0.0, |b| deviation[s.other][b]) - common[s.bin]))
                .collect();
            super::deviation(&said, window_ns, ACCEPT_CHI2).or_else(|| line_fit(&said, window_ns))
        })
        .collect();
    raw.into_iter()
        .map(|es| {
            es.into_iter()
                .map(|CleanEdge { edge, slices }| {
                    let (src, dst) = fits.fitted[edge.k].key;
                    let other = if edge.sign > 0.0 { src } else { dst } as usize;
                    let slices = slices
                        .into_iter()
                        .map(|s| {
                            // The neighbour's curve where it reads the slice; its bin's
                            // value where it has too few bins for a curve, or where the
                            // curve misses its bin by more than `MISFIT_NS`.
                            let at = node_time(&s, -edge.sign, edge.shift_ns);
                            let binned = bin(at).map(|b| deviation[other][b]);
                            let other_deviation = match (&curves[other], binned) {
                                (Some(curve), Some(v)) if (curve.at_ns(at) - v).abs() > MISFIT_NS => v,
                                (Some(curve), _) => curve.at_ns(at),
                                (None, v) => v.unwrap_or(0.0),
                            };
                            let shift = edge.sign * other_deviation;
                            let moved = |p: super::Point| super::Point { y_ns: p.y_ns + shift, ..p };
                            Slice { fwd: moved(s.fwd), rev: moved(s.rev) }
                        })
                        .collect();
                    CleanEdge { edge, slices }
                })
                .collect()
        })
        .collect()
}
