//! Downsampling of point clouds that keeps what the fits depend on.
//!
//! The max-margin line of a window is decided by the extreme points only: the lowest
//! forward and the highest reverse one-way delays (the convex hulls). Averaging or random
//! sampling would hide exactly those points, so each time bucket keeps its minimum and its
//! maximum point: the drawn cloud has the same envelope as the full one.

use super::input::OwdPoint;

/// Keeps, for each of `buckets` equal time buckets over the points' time span, the point
/// with the lowest and the point with the highest `owd_ns` (one point when they coincide).
/// The result is sorted by time; at most `2 * buckets` points. Input in any order.
pub fn min_max_per_bucket(points: &[OwdPoint], buckets: usize) -> Vec<OwdPoint> {
    if points.len() <= 2 * buckets || buckets == 0 {
        let mut all = points.to_vec();
        all.sort_by_key(|p| p.t_ns);
        return all;
    }
    let t0 = points.iter().map(|p| p.t_ns).min().unwrap_or(0);
    let t1 = points.iter().map(|p| p.t_ns).max().unwrap_or(0);
    // i128: spans of a whole epoch times a bucket count overflow i64.
    let span = t1 as i128 - t0 as i128 + 1;
    let mut slots: Vec<Option<(OwdPoint, OwdPoint)>> = vec![None; buckets];
    for p in points {
        let b = (((p.t_ns as i128 - t0 as i128) * buckets as i128) / span) as usize;
        let slot = &mut slots[b.min(buckets - 1)];
        match slot {
            None => *slot = Some((*p, *p)),
            Some((lo, hi)) => {
                if p.owd_ns < lo.owd_ns {
                    *lo = *p;
                }
                if p.owd_ns > hi.owd_ns {
                    *hi = *p;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(2 * buckets);
    for (lo, hi) in slots.into_iter().flatten() {
        if lo == hi {
            out.push(lo);
        } else if lo.t_ns <= hi.t_ns {
            out.push(lo);
            out.push(hi);
        } else {
            out.push(hi);
            out.push(lo);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn cloud(n: usize, seed: u64) -> Vec<OwdPoint> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| OwdPoint {
                t_ns: rng.gen_range(0..4_000_000_000),
                owd_ns: 10_000 + (-(rng.gen::<f64>().max(1e-12)).ln() * 20_000.0) as i64,
                forward: true,
                pure: true,
            })
            .collect()
    }

    #[test]
    fn keeps_every_buckets_extremes() {
        let points = cloud(20_000, 3);
        let buckets = 100;
        let kept = min_max_per_bucket(&points, buckets);
        assert!(
            kept.len() <= 2 * buckets && kept.len() >= buckets,
            "{}",
            kept.len()
        );
        assert!(kept.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        // Recompute each bucket's extremes independently and find them in the output.
        let t0 = points.iter().map(|p| p.t_ns).min().unwrap();
        let t1 = points.iter().map(|p| p.t_ns).max().unwrap();
        let span = (t1 - t0) as i128 + 1;
        for b in 0..buckets {
            let in_b: Vec<_> = points
                .iter()
                .filter(|p| (((p.t_ns - t0) as i128 * buckets as i128) / span) as usize == b)
                .collect();
            let min = in_b.iter().map(|p| p.owd_ns).min().unwrap();
            let max = in_b.iter().map(|p| p.owd_ns).max().unwrap();
            assert!(
                kept.iter().any(|p| p.owd_ns == min && in_b.contains(&p)),
                "bucket {b} min"
            );
            assert!(
                kept.iter().any(|p| p.owd_ns == max && in_b.contains(&p)),
                "bucket {b} max"
            );
        }
        // The global extremes, which decide the hull, survive.
        let gmin = points.iter().map(|p| p.owd_ns).min().unwrap();
        let gmax = points.iter().map(|p| p.owd_ns).max().unwrap();
        assert_eq!(kept.iter().map(|p| p.owd_ns).min().unwrap(), gmin);
        assert_eq!(kept.iter().map(|p| p.owd_ns).max().unwrap(), gmax);
    }

    #[test]
    fn small_inputs_pass_through_sorted() {
        let points = cloud(50, 4);
        let kept = min_max_per_bucket(&points, 100);
        assert_eq!(kept.len(), 50);
        assert!(kept.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        assert!(min_max_per_bucket(&[], 10).is_empty());
    }
}
