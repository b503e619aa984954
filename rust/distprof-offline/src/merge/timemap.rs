//! One node's map from trace time to the global timeline: R -> S (snapshot fit) for device
//! planes, S -> G (clock model) for everything.
//!
//! S -> G uses the model's correction `c(S) = offset + drift * (S - mid)` (G = S - c) and,
//! between two windows' midpoints, interpolates the correction linearly from one midpoint
//! to the next. Where the clock breaks inside a window (a piece with `break_at_start`, a
//! step or a frequency change found by `estimate::breaks`) each side keeps its own piece's
//! line up to the break: interpolating across a 1 s step would smear it over seconds. That keeps the map continuous and monotone, so events keep their order and
//! nesting on every line; before the first and after the last midpoint the nearest window's
//! own drift extrapolates. Absolute times are in ps as i128 (epoch ps overflow i64); only
//! corrections, which are small, pass through f64.

use distprof::distprof_plane::{DistprofPlaneData, TracerStart};
use distprof::model::{ns_between, ClockSegment, NodeClockModel};
use distprof::snapshot::SnapshotFit;

/// Why a node cannot be placed on the global timeline.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("node {node}: the clock model says it is unreachable from the reference (no probe path); pass --allow-uncorrected to merge it uncorrected")]
    Unreachable { node: u32 },
    #[error("node {node}: the clock model has no windows; pass --allow-uncorrected to merge it uncorrected")]
    Empty { node: u32 },
}

/// S -> G for one node.
#[derive(Debug, Clone)]
pub struct GlobalMap {
    segments: Vec<ClockSegment>,
}

impl GlobalMap {
    /// The identity: used for uncorrected nodes and the "before" side of validate.
    pub fn identity() -> Self {
        Self {
            segments: Vec::new(),
        }
    }

    pub fn new(segments: &[ClockSegment]) -> Self {
        let mut segments = segments.to_vec();
        segments.sort_by_key(|s| s.mid_local_ns);
        Self { segments }
    }

    /// The linear piece of the correction that holds at host time `s_ns`.
    pub fn piece(&self, s_ns: i64) -> CorrectionPiece {
        let segs = &self.segments;
        if segs.is_empty() {
            return CorrectionPiece {
                lo_ns: i64::MIN,
                hi_ns: i64::MAX,
                x0_ns: 0,
                c0_ns: 0.0,
                slope: 0.0,
            };
        }
        let i = segs.partition_point(|g| g.mid_local_ns <= s_ns);
        if i == 0 || i == segs.len() {
            // Outside the midpoints the nearest window's own drift extrapolates.
            let g = &segs[if i == 0 { 0 } else { segs.len() - 1 }];
            let (lo_ns, hi_ns) = if i == 0 {
                (i64::MIN, g.mid_local_ns)
            } else {
                (g.mid_local_ns, i64::MAX)
            };
            return CorrectionPiece {
                lo_ns,
                hi_ns,
                x0_ns: g.mid_local_ns,
                c0_ns: g.offset_ns,
                slope: g.drift_ppb * 1e-9,
            };
        }
        let (a, b) = (&segs[i - 1], &segs[i]);
        if b.break_at_start {
            // The clock breaks at b's start: each side on its own piece's line.
            let (g, lo_ns, hi_ns) =
                if s_ns < b.start_local_ns { (a, a.mid_local_ns, b.start_local_ns) } else { (b, b.start_local_ns, b.mid_local_ns) };
            return CorrectionPiece { lo_ns, hi_ns, x0_ns: g.mid_local_ns, c0_ns: g.offset_ns, slope: g.drift_ppb * 1e-9 };
        }
        let slope = (b.offset_ns - a.offset_ns) / b.mid_local_ns.saturating_sub(a.mid_local_ns).max(1) as f64;
        CorrectionPiece {
            lo_ns: a.mid_local_ns,
            hi_ns: b.mid_local_ns,
            x0_ns: a.mid_local_ns,
            c0_ns: a.offset_ns,
            slope,
        }
    }

    /// Correction c(S) in ns at host time `s_ns`.
    pub fn correction_ns(&self, s_ns: i64) -> f64 {
        self.piece(s_ns).at(s_ns)
    }

    /// The correction's uncertainty (one sigma) at host time `s_ns`, ns: it grows with the
    /// distance from the nearest midpoint. Between two midpoints the interpolation is as
    /// good as the two ends (their sigmas weighted as the line weights them) plus what the
    /// rate can do in between (the drift's sigma over the distance to the nearer end);
    /// outside them, the nearest window's line extrapolated (`ClockSegment::uncertainty_at_ns`).
    /// 0 without segments (an uncorrected node states none); `f64::MAX` when a segment's is
    /// unknown.
    pub fn uncertainty_ns(&self, s_ns: i64) -> f64 {
        let segs = &self.segments;
        let (Some(first), Some(last)) = (segs.first(), segs.last()) else { return 0.0 };
        let i = segs.partition_point(|g| g.mid_local_ns <= s_ns);
        if i == 0 {
            return first.uncertainty_at_ns(s_ns);
        }
        if i == segs.len() {
            return last.uncertainty_at_ns(s_ns);
        }
        let (a, b) = (&segs[i - 1], &segs[i]);
        if b.break_at_start {
            return if s_ns < b.start_local_ns { a.uncertainty_at_ns(s_ns) } else { b.uncertainty_at_ns(s_ns) };
        }
        if a.uncertainty_ns == f64::MAX || b.uncertainty_ns == f64::MAX {
            return f64::MAX;
        }
        let span = ns_between(a.mid_local_ns, b.mid_local_ns).max(1.0);
        let w = ns_between(a.mid_local_ns, s_ns) / span;
        let ends = (1.0 - w) * a.uncertainty_ns + w * b.uncertainty_ns;
        let nearer = if w <= 0.5 { a } else { b };
        let between = nearer.drift_sigma_ppb() * 1e-9 * ns_between(a.mid_local_ns, s_ns).min(ns_between(s_ns, b.mid_local_ns));
        ends.hypot(between)
    }

    /// The largest uncertainty over the host-time span `[lo, hi]`, ns: at its ends or
    /// halfway between two midpoints inside it, or either side of a break (the only local
    /// maxima of `uncertainty_ns`).
    pub fn max_uncertainty_ns(&self, lo_ns: i64, hi_ns: i64) -> f64 {
        // In i128: a corrupt model's midpoints may lie near the i64 limits.
        let halfway = self.segments.windows(2).map(|p| ((p[0].mid_local_ns as i128 + p[1].mid_local_ns as i128) / 2) as i64);
        let breaks = self.segments.iter().filter(|s| s.break_at_start).flat_map(|s| [s.start_local_ns.saturating_sub(1), s.start_local_ns]);
        [lo_ns, hi_ns]
            .into_iter()
            .chain(halfway.chain(breaks).filter(|&t| lo_ns <= t && t <= hi_ns))
            .map(|t| self.uncertainty_ns(t))
            .fold(0.0, f64::max)
    }

    /// Error bound in ns at host time `s_ns`: the larger bound of the windows it lies between.
    pub fn bound_ns(&self, s_ns: i64) -> f64 {
        let segs = &self.segments;
        if segs.is_empty() {
            return 0.0;
        }
        let i = segs.partition_point(|g| g.mid_local_ns <= s_ns);
        let a = &segs[i.saturating_sub(1)];
        let b = &segs[i.min(segs.len() - 1)];
        a.bound_ns.max(b.bound_ns)
    }

    pub fn s_to_g_ps(&self, s_ps: i128) -> i128 {
        if self.segments.is_empty() {
            return s_ps;
        }
        // Only the correction depends on s, and it changes by at most drift x 256 ns over
        // an f64's rounding of epoch ns: exact enough, and avoids an i128 division per event.
        let s_ns = approx_ns(s_ps);
        // Saturating: a garbage model (offsets near the f64 range) must not overflow.
        s_ps.saturating_sub((self.correction_ns(s_ns) * 1000.0).round() as i128)
    }

    /// [`Self::s_to_g_ps`] with a caller-held piece cache.
    #[inline]
    pub fn s_to_g_ps_cached(&self, s_ps: i128, cache: &std::cell::Cell<CorrectionPiece>) -> i128 {
        let s_ns = approx_ns(s_ps);
        let mut p = cache.get();
        if !p.contains(s_ns) {
            p = self.piece(s_ns);
            cache.set(p);
        }
        s_ps.saturating_sub((p.at(s_ns) * 1000.0).round() as i128)
    }
}

/// One linear piece of the correction: `c(S) = c0 + slope * (S - x0)` for S in [lo, hi).
/// Events of a line are close together, so callers cache the piece and skip the lookup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorrectionPiece {
    pub lo_ns: i64,
    pub hi_ns: i64,
    pub x0_ns: i64,
    pub c0_ns: f64,
    pub slope: f64,
}

impl CorrectionPiece {
    /// A piece that holds nowhere, to start a cache.
    pub const EMPTY: Self = Self {
        lo_ns: 1,
        hi_ns: 0,
        x0_ns: 0,
        c0_ns: 0.0,
        slope: 0.0,
    };

    #[inline]
    pub fn contains(&self, s_ns: i64) -> bool {
        self.lo_ns <= s_ns && s_ns < self.hi_ns
    }

    #[inline]
    pub fn at(&self, s_ns: i64) -> f64 {
        // Exact for real times, no overflow for a corrupt midpoint near i64::MIN/MAX. The
        // i64 difference converts in one instruction (the same value as through i128, which
        // takes a library call per event); only an overflowing one goes the long way.
        let d = match s_ns.checked_sub(self.x0_ns) {
            Some(d) => d as f64,
            None => ns_between(self.x0_ns, s_ns),
        };
        self.c0_ns + self.slope * d
    }
}

/// ps -> ns to within an f64 ulp (256 ns at epoch scale); for choosing windows and computing
/// corrections, never for the mapped time itself.
#[inline]
pub fn approx_ns(ps: i128) -> i64 {
    (ps as f64 * 1e-3) as i64
}

/// R -> S for one node's device planes: device times on disk are `R - r0 + s0` with the
/// collector's start pair (r0, s0); recover R and apply the snapshot fit.
#[derive(Debug, Clone)]
pub struct DeviceMap {
    pub start: TracerStart,
    pub fit: SnapshotFit,
}

impl DeviceMap {
    pub fn disk_to_s_ps(&self, disk_ps: i128) -> i128 {
        let r_ps = disk_ps - (self.start.s_ns as i128 - self.start.r_ns as i128) * 1000;
        self.fit.r_to_s_ps(r_ps)
    }
}

/// Everything needed to move one node's events onto G.
#[derive(Debug, Clone)]
pub struct NodeTimeMap {
    pub global: GlobalMap,
    /// None when the node recorded no tracer start pair or no snapshots: device planes are
    /// then taken to be in S already (as the collector's single start pair puts them).
    pub device: Option<DeviceMap>,
}

impl NodeTimeMap {
    pub fn identity() -> Self {
        Self {
            global: GlobalMap::identity(),
            device: None,
        }
    }

    /// Builds the map from a node's distprof plane. `allow_uncorrected` turns a node without
    /// a usable model into an identity map instead of an error.
    pub fn from_plane(data: &DistprofPlaneData, allow_uncorrected: bool) -> Result<Self, MapError> {
        Self::from_parts(&data.model, Some(data), allow_uncorrected)
    }

    /// Builds the map from a clock model (from the plane or given separately) and, when
    /// present, the plane's tracer start pair and snapshot pairs.
    pub fn from_parts(
        model: &NodeClockModel,
        data: Option<&DistprofPlaneData>,
        allow_uncorrected: bool,
    ) -> Result<Self, MapError> {
        let node = model.node;
        let global = if !model.reachable {
            if !allow_uncorrected {
                return Err(MapError::Unreachable { node });
            }
            GlobalMap::identity()
        } else if model.segments.is_empty() {
            if !allow_uncorrected {
                return Err(MapError::Empty { node });
            }
            GlobalMap::identity()
        } else {
            GlobalMap::new(&model.segments)
        };
        let device = match data.map(|d| (d.tracer_start, SnapshotFit::fit(&d.snapshots))) {
            Some((Some(start), Some(fit))) => Some(DeviceMap { start, fit }),
            _ => None,
        };
        Ok(Self { global, device })
    }

    pub fn host_to_g_ps(&self, s_ps: i128) -> i128 {
        self.global.s_to_g_ps(s_ps)
    }

    pub fn host_to_g_ps_cached(
        &self,
        s_ps: i128,
        cache: &std::cell::Cell<CorrectionPiece>,
    ) -> i128 {
        self.global.s_to_g_ps_cached(s_ps, cache)
    }

    pub fn device_to_g_ps_cached(
        &self,
        disk_ps: i128,
        cache: &std::cell::Cell<CorrectionPiece>,
    ) -> i128 {
        match &self.device {
            Some(d) => self.global.s_to_g_ps_cached(d.disk_to_s_ps(disk_ps), cache),
            None => self.global.s_to_g_ps_cached(disk_ps, cache),
        }
    }

    pub fn device_to_g_ps(&self, disk_ps: i128) -> i128 {
        match &self.device {
            Some(d) => self.global.s_to_g_ps(d.disk_to_s_ps(disk_ps)),
            None => self.global.s_to_g_ps(disk_ps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(k: i64, offset_ns: f64, drift_ppb: f64) -> ClockSegment {
        let start = 1_000_000_000_000 + k * 4_000_000_000;
        ClockSegment {
            window_id: k as u64,
            start_local_ns: start,
            end_local_ns: start + 4_000_000_000,
            mid_local_ns: start + 2_000_000_000,
            offset_ns,
            drift_ppb,
            bound_ns: 100.0 * (k + 1) as f64,
            uncertainty_ns: 10.0,
            drift_uncertainty_ppb: 5.0,
            flagged: false,
            break_at_start: false,
        }
    }

    /// Window 1's clock steps +1 s at S = b (a `date -s`): the estimate gives it two
    /// pieces, the second with `break_at_start`. An event just before b is corrected by
    /// the first piece's own line and one at b by the second's, exactly (no interpolation
    /// smears the step over the seconds between the pieces' midpoints); the uncertainty
    /// is each piece's own; and past the pieces the map interpolates to window 2 as ever.
    #[test]
    fn an_event_on_each_side_of_a_break_takes_its_own_piece() {
        let w1 = seg(1, 0.0, 0.0);
        let b = w1.start_local_ns + 1_500_000_000;
        let before = ClockSegment { end_local_ns: b, mid_local_ns: (w1.start_local_ns + b) / 2, offset_ns: 2_000.0, drift_ppb: 300.0, ..w1 };
        let after = ClockSegment {
            start_local_ns: b,
            mid_local_ns: (b + w1.end_local_ns) / 2,
            offset_ns: 1e9 + 2_000.0,
            drift_ppb: -700.0,
            uncertainty_ns: 40.0,
            break_at_start: true,
            ..w1
        };
        let w2 = seg(2, 1e9 + 1_000.0, 0.0);
        let map = GlobalMap::new(&[seg(0, 2_000.0, 0.0), before, after, w2]);
        for (s, piece) in [(b - 1, &before), (b, &after), (b + 1, &after), (before.mid_local_ns, &before), (after.mid_local_ns, &after)] {
            let want = piece.correction_ns(s);
            assert!((map.correction_ns(s) - want).abs() < 1e-6, "at {s}: {} vs {want}", map.correction_ns(s));
            let cached = std::cell::Cell::new(CorrectionPiece::EMPTY);
            assert_eq!(map.s_to_g_ps_cached(s as i128 * 1000, &cached), map.s_to_g_ps(s as i128 * 1000));
            assert_eq!(map.uncertainty_ns(s), piece.uncertainty_at_ns(s));
        }
        // The step is kept whole: 1 s between one nanosecond and the next.
        let jump = map.correction_ns(b) - map.correction_ns(b - 1);
        assert!((jump - (after.correction_ns(b) - before.correction_ns(b - 1))).abs() < 1e-3 && jump > 0.999e9, "{jump}");
        // Between the second piece's midpoint and window 2's the usual interpolation.
        let halfway = (after.mid_local_ns + w2.mid_local_ns) / 2;
        assert!((map.correction_ns(halfway) - 0.5 * (after.offset_ns + w2.offset_ns)).abs() < 1e-3);
        // Either side of the break is where the uncertainty is largest over the span.
        assert!(map.max_uncertainty_ns(before.mid_local_ns, after.mid_local_ns) >= map.uncertainty_ns(b));
    }

    #[test]
    fn continuous_linear_truth_is_reproduced_exactly() {
        // Truth: S = G + 5 ms + 20 ppm * (G - g0); windows carry it at their midpoints.
        let drift_ppb = 20_000.0;
        let g0 = 1_000_000_000_000i64;
        let segs: Vec<_> = (0..3)
            .map(|k| {
                // The model is given at S midpoints: solve the truth for G there.
                let d = drift_ppb * 1e-9;
                let mid = 1_000_000_000_000 + k * 4_000_000_000 + 2_000_000_000;
                let x = ((mid - g0) as f64 - 5_000_000.0) / (1.0 + d);
                seg(k, (mid - g0) as f64 - x, d / (1.0 + d) * 1e9)
            })
            .collect();
        let map = GlobalMap::new(&segs);
        for g in [
            g0 - 1_000_000_000,
            g0,
            g0 + 3_100_000_000,
            g0 + 7_000_000_123,
            g0 + 13_000_000_000,
        ] {
            let s = g as f64 + 5_000_000.0 + drift_ppb * 1e-9 * (g - g0) as f64;
            let s_ps = (s * 1000.0).round() as i128;
            let back = map.s_to_g_ps(s_ps);
            let err_ps = back - g as i128 * 1000;
            assert!(err_ps.abs() <= 5, "g={g}: error {err_ps} ps");
        }
        assert_eq!(map.bound_ns(1_000_000_000_000 + 4_000_000_000), 200.0);
    }

    #[test]
    fn map_is_monotone_across_window_jumps() {
        let map = GlobalMap::new(&[
            seg(0, 0.0, 0.0),
            seg(1, 1_000_000.0, -50_000.0),
            seg(2, -3_000.0, 0.0),
        ]);
        let mut prev = i128::MIN;
        for t in (0..16_000).map(|k| (1_000_000_000_000i64 + k * 1_000_000) as i128 * 1000) {
            let g = map.s_to_g_ps(t);
            assert!(g > prev, "not monotone at {t}");
            prev = g;
        }
    }

    /// An event's uncertainty is its window's at a midpoint, grows with the distance from
    /// the midpoints between them (at most halfway) and without limit beyond the last, at
    /// the drift's sigma (20 ppb unstated): 4 s windows, sigma 10 ns each.
    #[test]
    fn uncertainty_grows_with_interpolation_and_extrapolation() {
        let map = GlobalMap::new(&[seg(0, 0.0, 0.0), seg(1, 0.0, 0.0), seg(2, 0.0, 0.0)]);
        let mid = |k: i64| 1_000_000_000_000 + k * 4_000_000_000 + 2_000_000_000;
        let drift_sigma = distprof::model::UNSTATED_DRIFT_SIGMA_PPB * 1e-9;
        assert!((map.uncertainty_ns(mid(1)) - 10.0).abs() < 1e-9);
        // Halfway between two midpoints: 2 s of the drift's sigma (40 ns) on top of 10 ns.
        let halfway = map.uncertainty_ns(mid(1) + 2_000_000_000);
        assert!((halfway - 10f64.hypot(drift_sigma * 2e9)).abs() < 1e-6, "{halfway}");
        // 30 s past the last midpoint: 600 ns, and more the further out.
        let out = map.uncertainty_ns(mid(2) + 30_000_000_000);
        assert!((out - 10f64.hypot(drift_sigma * 30e9)).abs() < 1e-6, "{out}");
        assert!(map.uncertainty_ns(mid(2) + 60_000_000_000) > 2.0 * map.uncertainty_ns(mid(2) + 20_000_000_000));
        assert!(map.uncertainty_ns(mid(0) - 10_000_000_000) > 100.0);
        // The span's worst: its far end outside, else halfway between midpoints inside.
        assert_eq!(map.max_uncertainty_ns(mid(0), mid(2) + 30_000_000_000), out);
        assert_eq!(map.max_uncertainty_ns(mid(0), mid(2)), halfway);
        // Unknown stays unknown; no model states none.
        let unknown = GlobalMap::new(&[ClockSegment { uncertainty_ns: f64::MAX, ..seg(0, 0.0, 0.0) }, seg(1, 0.0, 0.0)]);
        assert_eq!(unknown.uncertainty_ns(mid(0) + 1_000), f64::MAX);
        assert_eq!(GlobalMap::identity().uncertainty_ns(0), 0.0);
    }
}
