//! An edge's slope over several windows. One window's extreme points pin the slope only
//! to tens of ppb (their timestamp noise over a lever of a few seconds); the same
//! max-margin fit over the hulls of neighbouring windows has a longer lever. The hull of
//! a union is the hull of the union of hulls, so each window's few dozen hull vertices
//! are all a neighbour needs to keep. The offset stays this window's own: the max-margin
//! line of this window's hulls at the longer fit's slope.
//!
//! The online path (`online::History`) can only look back; `Smoother` looks both ways,
//! which centres the span on the window and so follows a wandering rate better.

use super::hull::{self, Line};
use super::window_fits::WindowFits;
use super::points::Point;
use super::settings::EstimatorSettings;
use crate::config::EstimatorKind;

/// Every hull line of `fits` refit over its own and the `neighbours`' hulls of the same
/// edge, in `fits`' edge order; None where the line stays (other estimators, edges no
/// neighbour has, a degenerate fit). Apply with `WindowFits::set_lines`.
pub fn long_lines(fits: &WindowFits, neighbours: &[&WindowFits], settings: &EstimatorSettings) -> Vec<Option<Line>> {
    if settings.estimator != EstimatorKind::Hull || neighbours.is_empty() {
        return vec![None; fits.fitted.len()];
    }
    let mid_ns = fits.mid_ns();
    fits.fitted
        .iter()
        .map(|f| {
            let mut fwd = f.line.hulls.fwd_lower.clone();
            let mut rev = f.line.hulls.rev_upper.clone();
            let mut found = false;
            for n in neighbours {
                let Some(other) = n.edge(f.key) else { continue };
                // Into this window's frame: x from this midpoint, y from this origin.
                let (Some(dx), Some(dy)) =
                    (n.mid_ns().checked_sub(mid_ns), other.y_origin_ns.checked_sub(f.y_origin_ns))
                else {
                    continue;
                };
                let shift = |p: &Point| Point { x_ns: p.x_ns + dx as f64, y_ns: p.y_ns + dy as f64 };
                fwd.extend(other.line.hulls.fwd_lower.iter().map(shift));
                rev.extend(other.line.hulls.rev_upper.iter().map(shift));
                found = true;
            }
            if !found {
                return None;
            }
            fwd.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            rev.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            let slope = hull::fit(&fwd, &rev).ok()?.line.slope;
            f.line.hulls.line_at_slope(slope)
        })
        .collect()
}
