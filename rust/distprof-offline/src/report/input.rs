//! What the report draws: one self-contained value, independent of how it was loaded.
//!
//! The loaders (per-node JSONL, estimator output) map their data onto these types; the
//! renderer never reads a file. Every timestamp is in nanoseconds; the clock it belongs to is
//! named on each field.
//!
//! One-way-delay points of an edge `src -> dst` (src is the prober), built by
//! [`owd_points`] from a [`ProbeRecord`]:
//! - forward: `owd_ns = fwd_rx - fwd_tx` (dst's clock minus src's clock), at `t_ns = fwd_tx`;
//! - reverse: `owd_ns = rev_tx - rev_rx` (dst's clock minus src's clock, so the sign is
//!   flipped against the real delay), at `t_ns = rev_rx`.
//!
//! Both are "dst's clock minus src's clock" at an instant of src's clock, so with theta the
//! clock difference `dst - src` and d the real delay a forward point sits at `theta + d`
//! (above the line) and a reverse point at `theta - d` (below it). The max-margin fit of a
//! window is the line between the two clouds: `offset_ns` is theta at the window midpoint,
//! `margin_ns` half the vertical gap. With the node models of the estimator
//! (`offset` = node ahead of the reference), theta = `offset_dst - offset_src`.

use distprof::config::{EstimatorKind, TimestampMode};
use distprof::context::NodeId;
use distprof::model::{ns_between, NodeClockModel};
use distprof::record::ProbeRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything one report shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportInput {
    pub facts: RunFacts,
    /// One model per node, reachable or not.
    pub nodes: Vec<NodeClockModel>,
    /// Host name per node, where known.
    #[serde(default)]
    pub hostnames: BTreeMap<NodeId, String>,
    /// Every edge of the probe graph, including edges that never delivered a probe
    /// (empty `points`, health `down`): the network panel draws the graph from this list.
    pub edges: Vec<EdgeSeries>,
    /// Loop-closure residuals of the network-wide solve.
    #[serde(default)]
    pub loops: Vec<LoopResidual>,
}

/// Facts about the run shown in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    /// A name for the run (session id, directory...), shown as the title.
    pub run_name: String,
    pub reference_node: NodeId,
    /// The timestamping mode actually in force (not the requested one).
    pub timestamp_mode: TimestampMode,
    /// The error the timestamping mode contributes, when known.
    #[serde(default)]
    pub timestamp_bound_ns: Option<f64>,
    #[serde(default)]
    pub estimator: Option<EstimatorKind>,
    /// The bound above which a segment is flagged, when known (drawn as a rule).
    #[serde(default)]
    pub bound_limit_ns: Option<f64>,
    /// The uncertainty above which a segment is flagged, when known (marked on the
    /// heatmap's ramp).
    #[serde(default)]
    pub uncertainty_limit_ns: Option<f64>,
    /// The path and stamping asymmetry per hop the uncertainty assumes and includes
    /// (`Config::effective_asymmetry_allowance_ns`), when known.
    #[serde(default)]
    pub asymmetry_allowance_ns: Option<f64>,
    /// The effective configuration, as JSON (printed verbatim).
    #[serde(default)]
    pub config: serde_json::Value,
    /// True when the input was generated, not measured: the page says so on top.
    #[serde(default)]
    pub synthetic: bool,
    /// Datagrams the nodes dropped over the run, by class, when known: foreign and
    /// malformed ones mean someone else is sending to the probe ports.
    #[serde(default)]
    pub dropped: Option<distprof::probe::DropCounts>,
    /// Each node's timestamping in detail (worst stamp error, for hardware stamps the NIC
    /// clock and its mapping to the host clock), when known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timestamps: BTreeMap<NodeId, distprof::timestamp::TimestampQuality>,
    /// Nodes of the run (named as a node, peer or reference by some node's JSONL) whose
    /// own data is missing: the page, and `report` on stderr, say so, since the network is
    /// then solved from a part of its edges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes_without_data: Vec<NodeId>,
    /// The windows the reference could not place and the node that stood in for it, one
    /// line per stretch (`estimate::failover::describe`): the page says so on top.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reanchored: Vec<String>,
}

/// One directed probe edge `src -> dst` over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeSeries {
    pub src: NodeId,
    pub dst: NodeId,
    /// All points, any order; the renderer sorts and downsamples.
    pub points: Vec<OwdPoint>,
    /// One fit per window, any order.
    pub fits: Vec<EdgeWindowFit>,
    pub health: EdgeHealth,
    /// Why the edge is degraded or down, for a person ("no pure pair in 3 windows").
    #[serde(default)]
    pub health_note: String,
}

/// One one-way-delay point (see the module doc for the sign convention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwdPoint {
    /// When, in src's host clock.
    pub t_ns: i64,
    /// dst's clock minus src's clock across the packet.
    pub owd_ns: i64,
    /// Forward (src -> dst) or reverse (dst -> src) packet.
    pub forward: bool,
    /// The coded pair passed the purity test (no queueing between its two packets).
    pub pure: bool,
}

/// The max-margin line of one edge in one window, in src's clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EdgeWindowFit {
    pub window_id: u64,
    pub start_ns: i64,
    pub end_ns: i64,
    pub mid_ns: i64,
    /// dst's clock minus src's clock at `mid_ns`.
    pub offset_ns: f64,
    /// How fast dst gains on src, parts per billion.
    pub drift_ppb: f64,
    /// Half the vertical gap between the forward and reverse clouds around the line;
    /// negative when no line separates them (the fit is then unreliable).
    pub margin_ns: f64,
    /// The estimator's calibrated sigma of `offset_ns` under symmetric paths
    /// (`estimate::uncertainty::edge_sigma_ns`), when the loader knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma_ns: Option<f64>,
}

impl EdgeWindowFit {
    /// The line's value at `t_ns` (src's clock).
    pub fn line_ns(&self, t_ns: i64) -> f64 {
        self.offset_ns + self.drift_ppb * 1e-9 * ns_between(self.mid_ns, t_ns)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeHealth {
    /// Probes flow and every window has a separating fit.
    Ok,
    /// Probes flow but some windows lack pure pairs or a separating line.
    Degraded,
    /// No usable probe in the run (silent peer, loss, timeout).
    Down,
}

impl EdgeHealth {
    pub fn label(self) -> &'static str {
        match self {
            EdgeHealth::Ok => "ok",
            EdgeHealth::Degraded => "degraded",
            EdgeHealth::Down => "down",
        }
    }
}

/// The residual of one cycle of the probe graph: the sum of the edge offsets around it,
/// which is zero for perfect estimates (path asymmetry does not show here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopResidual {
    /// The cycle, first node not repeated at the end.
    pub nodes: Vec<NodeId>,
    /// The window, or `None` for a residual over the whole run.
    #[serde(default)]
    pub window_id: Option<u64>,
    pub residual_ns: f64,
}

/// Without a sigma per fit (older or synthetic inputs), an edge whose share of pure points
/// is below this is degraded: most pairs met a queue, so few points are left near the line.
pub const MIN_PURE_SHARE: f64 = 0.5;

impl EdgeSeries {
    /// The health of this edge judged from its own points and fits: down without a point;
    /// degraded when a window has no separating line, when fewer windows were fitted than
    /// `windows_in_run`, or when the fit is too loose to be trusted; else ok. The note says
    /// which.
    ///
    /// Loose means the fit's own 2 sigma passes `uncertainty_limit_ns` (the limit at which
    /// a node's segment is flagged) in some window: the edge alone would flag the nodes
    /// that rest on it. Queueing as such is not a fault: with every packet's point the fit
    /// can be tight though few pairs are pure, and the sigma says so. Only when no fit
    /// carries a sigma does the share of pure points (below [`MIN_PURE_SHARE`]) stand in.
    pub fn assess_health(&self, windows_in_run: Option<usize>, uncertainty_limit_ns: Option<f64>) -> (EdgeHealth, String) {
        if self.points.is_empty() && self.fits.is_empty() {
            return (EdgeHealth::Down, "no probe delivered".to_string());
        }
        let mut notes = Vec::new();
        // A NaN margin is no separating line either.
        let overlapping = self
            .fits
            .iter()
            .filter(|f| f.margin_ns < 0.0 || f.margin_ns.is_nan())
            .count();
        if overlapping > 0 {
            notes.push(format!("{overlapping} window(s) without a separating line"));
        }
        if let Some(expected) = windows_in_run.filter(|w| self.fits.len() < *w) {
            notes.push(format!("{} of {expected} windows fitted", self.fits.len()));
        }
        let sigmas: Vec<f64> = self.fits.iter().filter_map(|f| f.sigma_ns).filter(|s| s.is_finite()).collect();
        if !sigmas.is_empty() {
            if let Some(limit) = uncertainty_limit_ns {
                let loose = sigmas.iter().filter(|s| 2.0 * **s > limit).count();
                if loose > 0 {
                    let worst = sigmas.iter().copied().fold(0.0, f64::max);
                    notes.push(format!(
                        "{loose} window(s) with a loose fit (2 sigma up to {:.0} ns, limit {limit:.0} ns)",
                        2.0 * worst
                    ));
                }
            }
        } else {
            let pure = self.points.iter().filter(|p| p.pure).count();
            let share = pure as f64 / self.points.len().max(1) as f64;
            if !self.points.is_empty() && share < MIN_PURE_SHARE {
                notes.push(format!("only {:.0}% of pairs pure (queueing)", share * 100.0));
            }
        }
        if notes.is_empty() {
            (EdgeHealth::Ok, String::new())
        } else {
            (EdgeHealth::Degraded, notes.join("; "))
        }
    }
}

/// The two one-way-delay points of one coded exchange, from the first packet of each pair.
/// `fwd_pure` / `rev_pure` are the estimator's purity verdicts for the two pairs; when a
/// loader has none, `estimate::purity::PurityTolerance::judge` is the coded-probe test.
pub fn owd_points(record: &ProbeRecord, fwd_pure: bool, rev_pure: bool) -> [OwdPoint; 2] {
    [
        OwdPoint {
            t_ns: record.fwd_tx_ns[0],
            owd_ns: record.fwd_rx_ns[0] - record.fwd_tx_ns[0],
            forward: true,
            pure: fwd_pure,
        },
        OwdPoint {
            t_ns: record.rev_rx_ns[0],
            owd_ns: record.rev_tx_ns[0] - record.rev_rx_ns[0],
            forward: false,
            pure: rev_pure,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owd_points_straddle_the_clock_difference() {
        // dst is 1_000 ns ahead of src; 300 ns each way.
        let theta = 1_000;
        let d = 300;
        let rec = ProbeRecord {
            src: 0,
            dst: 1,
            seq: 7,
            fwd_tx_ns: [10_000, 10_050],
            fwd_rx_ns: [10_000 + d + theta, 10_050 + d + theta],
            rev_tx_ns: [20_000 + theta, 20_050 + theta],
            rev_rx_ns: [20_000 + d, 20_050 + d],
        };
        let [f, r] = owd_points(&rec, true, false);
        assert_eq!(
            (f.t_ns, f.owd_ns, f.forward, f.pure),
            (10_000, theta + d, true, true)
        );
        assert_eq!(
            (r.t_ns, r.owd_ns, r.forward, r.pure),
            (20_000 + d, theta - d, false, false)
        );
    }

    #[test]
    fn health_is_judged_from_points_and_fits() {
        let fit = |w: u64, margin_ns: f64| EdgeWindowFit {
            window_id: w,
            start_ns: 0,
            end_ns: 10,
            mid_ns: 5,
            offset_ns: 0.0,
            drift_ppb: 0.0,
            margin_ns,
            sigma_ns: None,
        };
        let pt = |pure: bool| OwdPoint {
            t_ns: 1,
            owd_ns: 1,
            forward: true,
            pure,
        };
        let mut e = EdgeSeries {
            src: 0,
            dst: 1,
            points: Vec::new(),
            fits: Vec::new(),
            health: EdgeHealth::Ok,
            health_note: String::new(),
        };
        assert_eq!(e.assess_health(Some(2), None).0, EdgeHealth::Down);
        e.points = vec![pt(true), pt(true), pt(false)];
        e.fits = vec![fit(0, 10.0), fit(1, 12.0)];
        assert_eq!(e.assess_health(Some(2), None), (EdgeHealth::Ok, String::new()));
        e.fits[1].margin_ns = -3.0;
        assert_eq!(
            e.assess_health(Some(3), None),
            (
                EdgeHealth::Degraded,
                "1 window(s) without a separating line; 2 of 3 windows fitted".to_string()
            )
        );
        e.fits[1].margin_ns = f64::NAN;
        assert_eq!(e.assess_health(None, None).0, EdgeHealth::Degraded);
        e.fits[1].margin_ns = 5.0;
        e.points = vec![pt(true), pt(false), pt(false)];
        assert_eq!(
            e.assess_health(None, None),
            (
                EdgeHealth::Degraded,
                "only 33% of pairs pure (queueing)".to_string()
            )
        );
        // With sigmas the fits judge, not the share of pure pairs: tight fits are ok...
        e.fits[0].sigma_ns = Some(120.0);
        e.fits[1].sigma_ns = Some(300.0);
        assert_eq!(e.assess_health(None, Some(1000.0)), (EdgeHealth::Ok, String::new()));
        // ... and a fit whose 2 sigma passes the limit is not.
        e.fits[1].sigma_ns = Some(700.0);
        assert_eq!(
            e.assess_health(None, Some(1000.0)),
            (
                EdgeHealth::Degraded,
                "1 window(s) with a loose fit (2 sigma up to 1400 ns, limit 1000 ns)".to_string()
            )
        );
    }
}
