//! The distprof plane: what a node's XSpace carries so that the trace can be merged later.
//!
//! The export hook appends one plane named [`DISTPROF_PLANE`] to the node's XSpace: the
//! node's own clock model per window with its bounds (solved from its own edges only,
//! `plugin::node_windows`; the network's is merge's), the (S, R) snapshot pairs, probe statistics per edge and
//! window, the timestamp mode in force, the run's session id, and the node's own edge fits
//! per window (`estimate::shared`), from which `distprof merge` solves the whole network
//! when it holds every node's trace. Every value is a stat (int64 absolute ns where it
//! is a time), never only an event position, because the profiler may normalise line
//! timestamps after the plane is added. Events are still placed at their host times so the
//! plane reads sensibly in a viewer.
//!
//! C++ side: `distprof_plane_bytes` returns one serialized `tensorflow.profiler.XPlane`; the
//! hook appends it with `space->add_planes()->ParseFromString(bytes)`.

use crate::context::NodeId;
use crate::estimate::NodeWindowFits;
use crate::model::{ClockSegment, NodeClockModel};
use crate::snapshot::SnapshotPair;
use crate::xplane::{XEvent, XEventData, XLine, XPlane, XStat, XStatValue};
use prost::Message;
use serde::{Deserialize, Serialize};

/// Name of the plane; starts with `/host:` like XLA's own auxiliary planes.
pub const DISTPROF_PLANE: &str = "/host:distprof";
/// The name merge gives the plane in its outputs: the events there are already on G, and the
/// plane is kept as a record of the model that was applied.
pub const DISTPROF_APPLIED_PLANE: &str = "/host:distprof-applied";
/// Bumped when the plane's layout changes incompatibly; readers reject newer versions.
pub const FORMAT_VERSION: u64 = 1;

const LINE_MODEL: i64 = 1;
const LINE_SNAPSHOTS: i64 = 2;
const LINE_PROBES: i64 = 3;
const LINE_FITS: i64 = 4;

/// Probe statistics of one edge over one window, as seen by the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeEdgeStats {
    pub window_id: u64,
    pub peer: NodeId,
    /// Coded exchanges that passed the purity test and entered the fit.
    pub pairs_used: u64,
    /// Exchanges sent in this window that got no complete answer.
    pub pairs_lost: u64,
    /// Smallest round trip of the window, ns.
    pub min_rtt_ns: i64,
}

/// The (host clock, tracer clock) pair the device collector normalised its planes with:
/// device event times on disk are `R - r_ns + s_ns`, so merge recovers R from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracerStart {
    pub s_ns: i64,
    pub r_ns: i64,
}

/// Everything the distprof plane holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistprofPlaneData {
    /// The run's session id from the rendezvous (empty when the node never agreed, and in
    /// planes written before it was recorded): ties the trace to its run's other files.
    pub session_id: String,
    pub node: NodeId,
    pub reference_node: NodeId,
    pub hostname: String,
    /// The probe timestamp mode in force (`hardware`, `kernel`, `user`), from the probe engine.
    pub timestamp_mode: String,
    /// The timestamping in detail: worst stamp error, note, and for hardware stamps the NIC
    /// clock and its mapping to the host clock (absent in planes written before it existed).
    #[serde(default)]
    pub timestamps: Option<crate::timestamp::TimestampQuality>,
    /// Which clock R is: `rocm` (the GPU tracer clock) or `host` (standalone, R = S).
    pub tracer_clock: String,
    pub tracer_start: Option<TracerStart>,
    pub model: NodeClockModel,
    pub snapshots: Vec<SnapshotPair>,
    pub probe_stats: Vec<ProbeEdgeStats>,
    /// This node's edge fits, one entry per window: final (drift fit over the neighbouring
    /// windows) where the export came late enough, else the window's own fits.
    pub edge_fits: Vec<NodeWindowFits>,
}

/// Why a plane could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    #[error(
        "distprof plane: stat `{0}` is missing; the plane was not written by distprof's exporter"
    )]
    Missing(&'static str),
    #[error("distprof plane: format version {0} is newer than this distprof reads ({FORMAT_VERSION}); upgrade distprof")]
    Version(u64),
}

/// Serialized `XPlane` for the C++ export hook to append to the node's XSpace.
pub fn distprof_plane_bytes(data: &DistprofPlaneData) -> Vec<u8> {
    data.to_xplane().encode_to_vec()
}

/// Stat names, in one place so writer and reader cannot disagree.
mod stat {
    pub const VERSION: &str = "distprof_format_version";
    pub const SESSION: &str = "session_id";
    pub const FITS: &str = "edge_fits_json";
    pub const NODE: &str = "node_id";
    pub const REFERENCE: &str = "reference_node";
    pub const HOSTNAME: &str = "hostname";
    pub const TS_MODE: &str = "timestamp_mode";
    pub const TIMESTAMPS: &str = "timestamps_json";
    pub const TRACER_CLOCK: &str = "tracer_clock";
    pub const REACHABLE: &str = "reachable";
    pub const TRACER_START_S: &str = "tracer_start_s_ns";
    pub const TRACER_START_R: &str = "tracer_start_r_ns";
    pub const WINDOW: &str = "window_id";
    pub const START: &str = "start_local_ns";
    pub const END: &str = "end_local_ns";
    pub const MID: &str = "mid_local_ns";
    pub const OFFSET: &str = "offset_ns";
    pub const DRIFT: &str = "drift_ppb";
    pub const BOUND: &str = "bound_ns";
    pub const UNCERTAINTY: &str = "uncertainty_ns";
    pub const DRIFT_UNCERTAINTY: &str = "drift_uncertainty_ppb";
    /// 1 on a piece that starts at a break of the clock inside its window (absent: 0).
    pub const BREAK_AT_START: &str = "break_at_start";
    pub const FLAGGED: &str = "flagged";
    pub const S: &str = "s_ns";
    pub const R: &str = "r_ns";
    pub const READ_WINDOW: &str = "read_window_ns";
    pub const PEER: &str = "peer";
    pub const USED: &str = "pairs_used";
    pub const LOST: &str = "pairs_lost";
    pub const RTT: &str = "min_rtt_ns";
}

fn int(id: i64, v: i64) -> XStat {
    XStat {
        metadata_id: id,
        value: Some(XStatValue::Int64Value(v)),
    }
}
fn uint(id: i64, v: u64) -> XStat {
    XStat {
        metadata_id: id,
        value: Some(XStatValue::Uint64Value(v)),
    }
}
fn dbl(id: i64, v: f64) -> XStat {
    XStat {
        metadata_id: id,
        value: Some(XStatValue::DoubleValue(v)),
    }
}
fn text(id: i64, v: &str) -> XStat {
    XStat {
        metadata_id: id,
        value: Some(XStatValue::StrValue(v.to_string())),
    }
}

/// Adds line `id` (`name`) to the plane: one event `event` per entry, placed at the entry's
/// host time and duration (ns) relative to the line's first, holding the entry's stats.
fn push_line(p: &mut XPlane, id: i64, name: &str, event: &str, events: Vec<(i64, i64, Vec<XStat>)>) {
    let metadata_id = p.intern_event(event);
    let timestamp_ns = events.first().map(|e| e.0).unwrap_or(0);
    let events = events
        .into_iter()
        .map(|(t_ns, dur_ns, stats)| XEvent {
            metadata_id,
            data: Some(XEventData::OffsetPs((t_ns - timestamp_ns).saturating_mul(1000))),
            duration_ps: dur_ns.max(0).saturating_mul(1000),
            stats,
        })
        .collect();
    p.lines.push(XLine { id, display_id: id, name: name.into(), timestamp_ns, events, ..Default::default() });
}

impl DistprofPlaneData {
    pub fn to_xplane(&self) -> XPlane {
        let mut p = XPlane {
            name: DISTPROF_PLANE.to_string(),
            ..Default::default()
        };
        let mut s = |name: &str| p.intern_stat(name);
        let ids = [
            s(stat::VERSION),
            s(stat::NODE),
            s(stat::REFERENCE),
            s(stat::HOSTNAME),
            s(stat::TS_MODE),
            s(stat::TRACER_CLOCK),
            s(stat::REACHABLE),
            s(stat::TRACER_START_S),
            s(stat::TRACER_START_R),
        ];
        let mut stats = vec![
            uint(ids[0], FORMAT_VERSION),
            uint(ids[1], self.node as u64),
            uint(ids[2], self.reference_node as u64),
            text(ids[3], &self.hostname),
            text(ids[4], &self.timestamp_mode),
            text(ids[5], &self.tracer_clock),
            uint(ids[6], self.model.reachable as u64),
        ];
        if let Some(t) = self.tracer_start {
            stats.push(int(ids[7], t.s_ns));
            stats.push(int(ids[8], t.r_ns));
        }
        if !self.session_id.is_empty() {
            stats.push(text(p.intern_stat(stat::SESSION), &self.session_id));
        }
        // As JSON text: the NIC clock part is optional and nested.
        if let Some(json) = self.timestamps.as_ref().and_then(|t| serde_json::to_string(t).ok()) {
            stats.push(text(p.intern_stat(stat::TIMESTAMPS), &json));
        }
        p.stats = stats;

        let (w, st, en, mi, of, dr, bo, un, fl) = (
            p.intern_stat(stat::WINDOW),
            p.intern_stat(stat::START),
            p.intern_stat(stat::END),
            p.intern_stat(stat::MID),
            p.intern_stat(stat::OFFSET),
            p.intern_stat(stat::DRIFT),
            p.intern_stat(stat::BOUND),
            p.intern_stat(stat::UNCERTAINTY),
            p.intern_stat(stat::FLAGGED),
        );
        let du = p.intern_stat(stat::DRIFT_UNCERTAINTY);
        let ba = p.intern_stat(stat::BREAK_AT_START);
        let events = self.model.segments.iter().map(|g| {
            let mut stats = vec![
                uint(w, g.window_id),
                int(st, g.start_local_ns),
                int(en, g.end_local_ns),
                int(mi, g.mid_local_ns),
                dbl(of, g.offset_ns),
                dbl(dr, g.drift_ppb),
                dbl(bo, g.bound_ns),
                dbl(un, g.uncertainty_ns),
                dbl(du, g.drift_uncertainty_ppb),
                uint(fl, g.flagged as u64),
            ];
            // Only on pieces: a plane of whole windows stays as it was.
            if g.break_at_start {
                stats.push(uint(ba, 1));
            }
            (g.start_local_ns, g.end_local_ns - g.start_local_ns, stats)
        });
        push_line(&mut p, LINE_MODEL, "Clock model", "clock window", events.collect());

        let (sid, rid, wid) = (
            p.intern_stat(stat::S),
            p.intern_stat(stat::R),
            p.intern_stat(stat::READ_WINDOW),
        );
        let events = self.snapshots.iter().map(|q| {
            let stats = vec![int(sid, q.s_ns), int(rid, q.r_ns), int(wid, q.read_window_ns)];
            (q.s_ns, q.read_window_ns, stats)
        });
        push_line(&mut p, LINE_SNAPSHOTS, "Snapshot pairs", "snapshot", events.collect());

        let (peer, used, lost, rtt) = (
            p.intern_stat(stat::PEER),
            p.intern_stat(stat::USED),
            p.intern_stat(stat::LOST),
            p.intern_stat(stat::RTT),
        );
        let mut events: Vec<_> = self
            .probe_stats
            .iter()
            .map(|e| {
                let at = self
                    .model
                    .segments
                    .iter()
                    .find(|g| g.window_id == e.window_id)
                    .map(|g| g.start_local_ns);
                let stats = vec![
                    uint(w, e.window_id),
                    uint(peer, e.peer as u64),
                    uint(used, e.pairs_used),
                    uint(lost, e.pairs_lost),
                    int(rtt, e.min_rtt_ns),
                ];
                (at.unwrap_or(0), 0, stats)
            })
            .collect();
        events.sort_by_key(|e| e.0);
        push_line(&mut p, LINE_PROBES, "Probe statistics", "edge window", events);

        // One event per window, the fits as JSON text (hull vertices are variable-length
        // lists, which XStats do not hold).
        let fid = p.intern_stat(stat::FITS);
        let events = self.edge_fits.iter().filter_map(|f| {
            let json = serde_json::to_string(f).ok()?;
            Some((f.start_local_ns, f.end_local_ns - f.start_local_ns, vec![text(fid, &json)]))
        });
        push_line(&mut p, LINE_FITS, "Edge fits", "edge fits", events.collect());
        p
    }

    /// Reads a plane written by [`Self::to_xplane`] (after any timestamp normalisation).
    pub fn from_xplane(p: &XPlane) -> Result<Self, PlaneError> {
        let ids = StatIds::new(p);
        let plane_stat = |name: &'static str| ids.find(&p.stats, name);
        let version = plane_stat(stat::VERSION)
            .and_then(as_u64)
            .ok_or(PlaneError::Missing(stat::VERSION))?;
        if version > FORMAT_VERSION {
            return Err(PlaneError::Version(version));
        }
        let node = plane_stat(stat::NODE)
            .and_then(as_u64)
            .ok_or(PlaneError::Missing(stat::NODE))? as NodeId;
        let reference_node = plane_stat(stat::REFERENCE)
            .and_then(as_u64)
            .ok_or(PlaneError::Missing(stat::REFERENCE))? as NodeId;
        let reachable = plane_stat(stat::REACHABLE)
            .and_then(as_u64)
            .ok_or(PlaneError::Missing(stat::REACHABLE))?
            != 0;
        let tracer_start = match (
            plane_stat(stat::TRACER_START_S).and_then(as_i64),
            plane_stat(stat::TRACER_START_R).and_then(as_i64),
        ) {
            (Some(s_ns), Some(r_ns)) => Some(TracerStart { s_ns, r_ns }),
            _ => None,
        };
        let line = |id: i64| {
            p.lines
                .iter()
                .find(|l| l.id == id)
                .map(|l| l.events.as_slice())
                .unwrap_or(&[])
        };
        let mut segments = Vec::new();
        for e in line(LINE_MODEL) {
            let g = |n: &'static str| ids.find(&e.stats, n).ok_or(PlaneError::Missing(n));
            segments.push(ClockSegment {
                window_id: as_u64(g(stat::WINDOW)?).ok_or(PlaneError::Missing(stat::WINDOW))?,
                start_local_ns: as_i64(g(stat::START)?).ok_or(PlaneError::Missing(stat::START))?,
                end_local_ns: as_i64(g(stat::END)?).ok_or(PlaneError::Missing(stat::END))?,
                mid_local_ns: as_i64(g(stat::MID)?).ok_or(PlaneError::Missing(stat::MID))?,
                offset_ns: as_f64(g(stat::OFFSET)?).ok_or(PlaneError::Missing(stat::OFFSET))?,
                drift_ppb: as_f64(g(stat::DRIFT)?).ok_or(PlaneError::Missing(stat::DRIFT))?,
                bound_ns: as_f64(g(stat::BOUND)?).ok_or(PlaneError::Missing(stat::BOUND))?,
                // Planes written before the uncertainty existed: unknown.
                uncertainty_ns: g(stat::UNCERTAINTY).ok().and_then(as_f64).unwrap_or(f64::MAX),
                drift_uncertainty_ppb: g(stat::DRIFT_UNCERTAINTY).ok().and_then(as_f64).unwrap_or(f64::MAX),
                flagged: as_u64(g(stat::FLAGGED)?).ok_or(PlaneError::Missing(stat::FLAGGED))? != 0,
                break_at_start: g(stat::BREAK_AT_START).ok().and_then(as_u64).is_some_and(|v| v != 0),
            });
        }
        segments.sort_by_key(|g| g.start_local_ns);
        let mut snapshots = Vec::new();
        for e in line(LINE_SNAPSHOTS) {
            let g = |n: &'static str| {
                ids.find(&e.stats, n)
                    .and_then(as_i64)
                    .ok_or(PlaneError::Missing(n))
            };
            snapshots.push(SnapshotPair {
                s_ns: g(stat::S)?,
                r_ns: g(stat::R)?,
                read_window_ns: g(stat::READ_WINDOW)?,
            });
        }
        let mut probe_stats = Vec::new();
        for e in line(LINE_PROBES) {
            let g = |n: &'static str| {
                ids.find(&e.stats, n)
                    .and_then(as_i64)
                    .ok_or(PlaneError::Missing(n))
            };
            probe_stats.push(ProbeEdgeStats {
                window_id: g(stat::WINDOW)? as u64,
                peer: g(stat::PEER)? as NodeId,
                pairs_used: g(stat::USED)? as u64,
                pairs_lost: g(stat::LOST)? as u64,
                min_rtt_ns: g(stat::RTT)?,
            });
        }
        // The fits are an optional input of merge's network solve: a damaged entry is left
        // out (and said), never a reason to refuse the trace.
        let mut edge_fits = Vec::new();
        for e in line(LINE_FITS) {
            let parsed = match ids.find(&e.stats, stat::FITS) {
                Some(XStatValue::StrValue(json)) => serde_json::from_str::<NodeWindowFits>(json).ok(),
                _ => None,
            };
            match parsed {
                Some(f) if f.node == node && f.is_sane() => edge_fits.push(f),
                _ => tracing::warn!("distprof plane of node {node}: an edge fit is damaged; left out of the network solve"),
            }
        }
        let text_stat = |n: &'static str| match plane_stat(n) {
            Some(XStatValue::StrValue(s)) => s.clone(),
            _ => String::new(),
        };
        Ok(Self {
            session_id: text_stat(stat::SESSION),
            node,
            reference_node,
            hostname: text_stat(stat::HOSTNAME),
            timestamp_mode: text_stat(stat::TS_MODE),
            // A damaged entry is only a missing description, never a reason to refuse the trace.
            timestamps: serde_json::from_str(&text_stat(stat::TIMESTAMPS)).ok(),
            tracer_clock: text_stat(stat::TRACER_CLOCK),
            tracer_start,
            model: NodeClockModel {
                node,
                reachable,
                segments,
            },
            snapshots,
            probe_stats,
            edge_fits,
        })
    }
}

/// Stat metadata name -> id of one plane.
struct StatIds<'a> {
    plane: &'a XPlane,
}
impl<'a> StatIds<'a> {
    fn new(plane: &'a XPlane) -> Self {
        Self { plane }
    }
    fn find<'s>(&self, stats: &'s [XStat], name: &str) -> Option<&'s XStatValue> {
        let id = self.plane.stat_id(name)?;
        stats
            .iter()
            .find(|s| s.metadata_id == id)
            .and_then(|s| s.value.as_ref())
    }
}

fn as_u64(v: &XStatValue) -> Option<u64> {
    match *v {
        XStatValue::Uint64Value(x) => Some(x),
        XStatValue::Int64Value(x) => u64::try_from(x).ok(),
        _ => None,
    }
}
fn as_i64(v: &XStatValue) -> Option<i64> {
    match *v {
        XStatValue::Int64Value(x) => Some(x),
        XStatValue::Uint64Value(x) => i64::try_from(x).ok(),
        _ => None,
    }
}
fn as_f64(v: &XStatValue) -> Option<f64> {
    match *v {
        XStatValue::DoubleValue(x) => Some(x),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    // Round trips of whole planes live in rust/distprof/tests/distprof_plane.rs, built with
    // the one synthetic XSpace builder (distprof-testkit).
    use super::*;

    #[test]
    fn rejects_a_plane_without_version() {
        let plane = XPlane {
            name: DISTPROF_PLANE.into(),
            ..Default::default()
        };
        let err = DistprofPlaneData::from_xplane(&plane)
            .unwrap_err()
            .to_string();
        assert!(err.contains("distprof_format_version"), "{err}");
    }
}
