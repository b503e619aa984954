//! One line's events onto the global timeline: a node's two maps (device R -> S, then
//! S -> G) as the rewrite applies them to every event, in i64 ps relative to the line, with
//! the pieces cached per line and composed into one linear map per stretch of the line.

use super::timemap::{CorrectionPiece, NodeTimeMap};
use distprof::snapshot::RPiece;

/// Line timestamps below this are relative to `profile_start_time` (normalised on disk);
/// above it they are absolute epoch ns. 1e17 ns is 1973: no real profile starts earlier,
/// and no profile lasts 3 years.
const RELATIVE_LIMIT_NS: i64 = 100_000_000_000_000_000;

/// A node's maps as one plane's events need them (device or host).
pub(super) struct Mapper<'a> {
    pub map: &'a NodeTimeMap,
    pub device: bool,
    pub profile_start_ns: i64,
    pub cache: std::cell::Cell<CorrectionPiece>,
}

impl Mapper<'_> {
    pub fn line_base_ns(&self, ts_ns: i64) -> i64 {
        if ts_ns < RELATIVE_LIMIT_NS {
            ts_ns.saturating_add(self.profile_start_ns)
        } else {
            ts_ns
        }
    }
    #[inline]
    pub fn map_ps(&self, abs_ps: i128) -> i128 {
        if self.device {
            self.map.device_to_g_ps_cached(abs_ps, &self.cache)
        } else {
            self.map.host_to_g_ps_cached(abs_ps, &self.cache)
        }
    }
}

/// f64 -> nearest i64 (ties away from zero, like `f64::round`) without a libm call.
#[inline(always)]
pub(super) fn round_i64(x: f64) -> i64 {
    (x + 0.5f64.copysign(x)) as i64
}

/// Maps the events of one line in i64 ps relative to the line's output reference: the i128
/// epoch arithmetic happens once per line and once per change of linear piece, not per event.
pub(super) struct LineMapper<'a, 'm> {
    m: &'a Mapper<'m>,
    ref_ns: i64,
    /// Host: S - ref of the line base, ps.
    k_ps: i64,
    /// Device with a fit: R of the line base, ps, and its ns floor.
    r_base_ps: i128,
    r_base_ns: i64,
    ref_ps: i128,
    /// Cached R piece with its line-relative constants (s0 - ref, r_base - r0).
    rp: std::cell::Cell<(RPiece, i64, i64)>,
    fit: Option<&'a distprof::snapshot::SnapshotFit>,
    /// Both maps of the stretch of the line where neither changes piece, as one line.
    pub(super) composed: std::cell::Cell<ComposedPiece>,
}

/// The R -> S and S -> G pieces of one stretch of a line composed into one linear map of
/// the event offset: `rel(off) = at0 + slope * off` for `off` in [lo, hi) ps. One multiply
/// and one range check per event instead of two piece lookups and their i64/f64 steps.
/// It agrees with [`LineMapper::rel_exact`] within 2 ps: that rounds twice and evaluates
/// the correction at whole ns (slope x 1 ns, under 0.2 ps at any real drift); the range
/// keeps [`COMPOSED_MARGIN_PS`] from either piece's ends, where the exact path decides.
#[derive(Clone, Copy)]
pub(super) struct ComposedPiece {
    pub lo: i64,
    pub hi: i64,
    at0: f64,
    slope: f64,
}

impl ComposedPiece {
    const EMPTY: Self = Self { lo: 1, hi: 0, at0: 0.0, slope: 1.0 };
}

/// Offsets this close to a piece's end are mapped by the exact path, which picks the piece
/// by the same integer steps as before (a composed range's ends are computed through f64).
const COMPOSED_MARGIN_PS: f64 = 4_000.0;

impl<'a, 'm> LineMapper<'a, 'm> {
    pub fn new(m: &'a Mapper<'m>, base_ps: i128, ref_ps: i128) -> Self {
        let dev = if m.device {
            m.map.device.as_ref()
        } else {
            None
        };
        let r_base_ps = match dev {
            Some(d) => base_ps - (d.start.s_ns as i128 - d.start.r_ns as i128) * 1000,
            None => 0,
        };
        Self {
            m,
            ref_ns: (ref_ps / 1000) as i64,
            k_ps: (base_ps - ref_ps) as i64,
            r_base_ps,
            r_base_ns: r_base_ps.div_euclid(1000) as i64,
            ref_ps,
            rp: std::cell::Cell::new((RPiece::EMPTY, 0, 0)),
            fit: dev.map(|d| &d.fit),
            composed: std::cell::Cell::new(ComposedPiece::EMPTY),
        }
    }

    /// Mapped time of the event at `off_ps` after the line base, minus the reference, ps.
    #[inline(always)]
    pub fn rel(&self, off_ps: i64) -> i64 {
        let c = self.composed.get();
        if c.lo <= off_ps && off_ps < c.hi {
            let x = c.at0 + c.slope * off_ps as f64;
            // SAFETY: a composed piece holds only where |at0| < 2^52, 0.5 < slope < 2 and
            // |offset| <= 2^52 (`rel_exact`), so x is finite and |x| < 2^54: within i64.
            // (`round_i64`'s conversion checks for NaN and the i64 range on every event.)
            return unsafe { (x + 0.5f64.copysign(x)).to_int_unchecked::<i64>() };
        }
        self.rel_exact(off_ps)
    }

    /// [`Self::rel`] through the two maps' own pieces (saturating throughout); caches them
    /// and their composition for the offsets around.
    #[inline(never)]
    pub(super) fn rel_exact(&self, off_ps: i64) -> i64 {
        // R -> S on this piece as `s_rel = base + slope * off`, and the offsets it holds for.
        let (s_rel, base, slope, lo, hi) = match self.fit {
            Some(fit) => {
                // Saturating throughout: corrupt offsets or models near the i64 range must
                // give clamped times, not an overflow.
                let r_ns = self.r_base_ns.saturating_add(off_ps.div_euclid(1000));
                let (mut p, mut a, mut b) = self.rp.get();
                if !p.contains(r_ns) {
                    p = fit.piece(r_ns);
                    a = (p.s0_ps - self.ref_ps) as i64;
                    b = (self.r_base_ps - p.r0_ps) as i64;
                    self.rp.set((p, a, b));
                }
                let s_rel = a.saturating_add(round_i64(p.slope * b.saturating_add(off_ps) as f64));
                // Differences of epoch-sized ns in i64 first: through f64 they would lose 256 ns.
                let ps_of = |r_ns: i64| r_ns.saturating_sub(self.r_base_ns) as f64 * 1000.0;
                (s_rel, a as f64 + p.slope * b as f64, p.slope, ps_of(p.lo_ns), ps_of(p.hi_ns))
            }
            None => (self.k_ps.saturating_add(off_ps), self.k_ps as f64, 1.0, f64::MIN, f64::MAX),
        };
        let s_ns = self.ref_ns.saturating_add(s_rel.div_euclid(1000));
        let mut c = self.m.cache.get();
        if !c.contains(s_ns) {
            c = self.m.map.global.piece(s_ns);
            self.m.cache.set(c);
        }
        // S -> G on this piece, in the same terms: G - ref = S - ref - 1000 c(S) with
        // c(S) = c0 + slope_c (S - x0), S = ref + s_rel / 1000.
        let k = 1.0 - c.slope;
        let ref_from_x0 = self.ref_ns.checked_sub(c.x0_ns).map_or(f64::INFINITY, |d| d as f64);
        let at0 = base * k - 1000.0 * (c.c0_ns + c.slope * ref_from_x0);
        let off_of = |s_ns: i64| (s_ns.saturating_sub(self.ref_ns) as f64 * 1000.0 - base) / slope;
        let lo = lo.max(off_of(c.lo_ns)) + COMPOSED_MARGIN_PS;
        let hi = hi.min(off_of(c.hi_ns)) - COMPOSED_MARGIN_PS;
        // Only where f64 holds every value exactly enough: |offsets| and |times| < 2^52 ps
        // (over an hour); a corrupt or extreme map stays on the saturating path.
        const SANE: f64 = (1u64 << 52) as f64;
        let composed = ComposedPiece {
            lo: lo.max(-SANE) as i64,
            hi: hi.min(SANE) as i64,
            at0,
            slope: slope * k,
        };
        let sane = at0.abs() < SANE && (0.5..2.0).contains(&composed.slope) && slope > 0.0;
        self.composed.set(if sane { composed } else { ComposedPiece::EMPTY });
        s_rel.saturating_sub(round_i64(c.at(s_ns) * 1000.0))
    }
}
