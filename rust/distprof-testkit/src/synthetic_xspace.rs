//! The one builder of synthetic node traces (`.xplane.pb` XSpaces) with known clocks: the
//! `Task Environment` plane, the distprof plane's contents (a model of equal windows, a
//! tracer start with linear snapshot pairs), event planes, and a streaming writer for inputs
//! too large to hold in memory.
//!
//! Used by the fuzz seeds (`fuzz::xspace_seeds`), the merge tests
//! (rust/distprof-offline/tests/merge_jax.rs), the distprof plane's tests
//! (rust/distprof/tests/distprof_plane.rs) and `distprof bench merge`, which writes its input
//! with [`write_gpu_profile`]: the same node and target size give the same bytes.

use distprof::context::NodeId;
use distprof::distprof_plane::{distprof_plane_bytes, DistprofPlaneData, TracerStart};
use distprof::estimate::shared::SHARED_FITS_VERSION;
use distprof::estimate::{NodeWindowFits, SharedEdge, SharedLine};
use distprof::model::{ClockSegment, NodeClockModel};
use distprof::snapshot::SnapshotPair;
use distprof::xplane::{
    XEvent, XEventData, XLine, XPlane, XSpace, XStat, XStatValue, HOST_THREADS_PLANE,
    PROFILE_START_STAT, PROFILE_STOP_STAT, TASK_ENV_PLANE,
};
use prost::Message;
use std::io::Write;
use std::path::Path;

/// The `Task Environment` plane: the profile's start and stop (epoch ns), to which the
/// profiler normalises line timestamps on disk.
pub fn task_env_plane(id: i64, start_ns: i64, stop_ns: i64) -> XPlane {
    let mut p = XPlane {
        id,
        name: TASK_ENV_PLANE.into(),
        ..Default::default()
    };
    for (name, v) in [(PROFILE_START_STAT, start_ns), (PROFILE_STOP_STAT, stop_ns)] {
        let id = p.intern_stat(name);
        p.stats.push(XStat {
            metadata_id: id,
            value: Some(XStatValue::Uint64Value(v as u64)),
        });
    }
    p
}

/// Equal, back-to-back windows of a clock model.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// Host-clock start of window 0, ns.
    pub start_ns: i64,
    pub window_ns: i64,
    pub count: u64,
    pub bound_ns: f64,
    pub uncertainty_ns: f64,
}

impl Windows {
    /// One segment per window, none flagged; `offset_drift(window_id, mid_local_ns)` gives the
    /// window's (offset ns, drift ppb) at its midpoint.
    pub fn segments(&self, offset_drift: impl Fn(u64, i64) -> (f64, f64)) -> Vec<ClockSegment> {
        (0..self.count)
            .map(|w| {
                let start = self.start_ns + w as i64 * self.window_ns;
                let mid = start + self.window_ns / 2;
                let (offset_ns, drift_ppb) = offset_drift(w, mid);
                ClockSegment {
                    window_id: w,
                    start_local_ns: start,
                    end_local_ns: start + self.window_ns,
                    mid_local_ns: mid,
                    offset_ns,
                    drift_ppb,
                    bound_ns: self.bound_ns,
                    uncertainty_ns: self.uncertainty_ns,
                    drift_uncertainty_ppb: 5.0,
                    flagged: false,
                    break_at_start: false,
                }
            })
            .collect()
    }
}

/// `count` (S, R) snapshot pairs from `start`, S advancing `s_step_ns` and R `r_step_ns` a
/// pair: a tracer clock at a constant rate against the host clock.
pub fn linear_snapshots(
    start: TracerStart,
    count: i64,
    s_step_ns: i64,
    r_step_ns: i64,
    read_window_ns: i64,
) -> Vec<SnapshotPair> {
    (0..count)
        .map(|k| SnapshotPair {
            s_ns: start.s_ns + k * s_step_ns,
            r_ns: start.r_ns + k * r_step_ns,
            read_window_ns,
        })
        .collect()
}

/// A reachable node's distprof plane on the host clock (no tracer, no snapshots, no probe
/// statistics, no edge fits, reference node 0, kernel timestamps): the fields a test does
/// not set are the ones it does not look at.
pub fn plane_data(node: NodeId, hostname: &str, segments: Vec<ClockSegment>) -> DistprofPlaneData {
    DistprofPlaneData {
        session_id: String::new(),
        node,
        reference_node: 0,
        hostname: hostname.into(),
        timestamp_mode: "kernel".into(),
        timestamps: None,
        tracer_clock: "host".into(),
        tracer_start: None,
        model: NodeClockModel {
            node,
            reachable: true,
            segments,
        },
        snapshots: Vec::new(),
        probe_stats: Vec::new(),
        edge_fits: Vec::new(),
    }
}

/// Node `src`'s edge fits of one window `[start_local_ns, end_local_ns)`, as its distprof
/// plane carries them: one edge per `(dst, theta_ns)`, a flat line at `theta_ns` (the
/// offset of `dst` from `src`) with both hulls 1 us either side of it.
pub fn flat_edge_fits(src: NodeId, window_id: u64, start_local_ns: i64, end_local_ns: i64, edges: &[(NodeId, f64)]) -> NodeWindowFits {
    let half_ns = (end_local_ns - start_local_ns) as f64 / 2.0;
    NodeWindowFits {
        version: SHARED_FITS_VERSION,
        node: src,
        window_id,
        start_local_ns,
        end_local_ns,
        edges: edges
            .iter()
            .map(|&(dst, theta)| SharedEdge {
                dst,
                counts: Default::default(),
                fit_error: None,
                line: Some(SharedLine {
                    y_origin_ns: 0,
                    gap_noise_ns: 0.0,
                    slope: 0.0,
                    intercept_ns: theta,
                    margin_ns: Some(1_000.0),
                    sigma_ns: Some(100.0),
                    all_packets: false,
                    fwd_lower: vec![[-half_ns, theta + 1_000.0], [half_ns, theta + 1_000.0]],
                    rev_upper: vec![[-half_ns, theta - 1_000.0], [half_ns, theta - 1_000.0]],
                    slices: Vec::new(),
                }),
            })
            .collect(),
    }
}

/// The same plane for a node whose device events are on a GPU tracer clock R: the
/// collector's start pair and the snapshot pairs that map R to S.
pub fn with_tracer(
    data: DistprofPlaneData,
    start: TracerStart,
    snapshots: Vec<SnapshotPair>,
) -> DistprofPlaneData {
    DistprofPlaneData {
        tracer_clock: "rocm".into(),
        tracer_start: Some(start),
        snapshots,
        ..data
    }
}

/// A string stat of an event.
pub fn str_stat(metadata_id: i64, value: &str) -> XStat {
    XStat {
        metadata_id,
        value: Some(XStatValue::StrValue(value.into())),
    }
}

/// An event at `offset_ps` from its line's timestamp.
pub fn event(metadata_id: i64, offset_ps: i64, duration_ps: i64, stats: Vec<XStat>) -> XEvent {
    XEvent {
        metadata_id,
        data: Some(XEventData::OffsetPs(offset_ps)),
        duration_ps,
        stats,
    }
}

/// A plane of one line `Stream #1` at `line_ts_ns` holding `count` `all-reduce` events
/// (tagged `hlo_op`), `spacing_ps` apart, each `duration_ps` long.
pub fn all_reduce_plane(
    id: i64,
    name: &str,
    line_ts_ns: i64,
    count: i64,
    spacing_ps: i64,
    duration_ps: i64,
) -> XPlane {
    let mut p = XPlane {
        id,
        name: name.into(),
        ..Default::default()
    };
    let op = p.intern_event("all-reduce");
    let stat = p.intern_stat("hlo_op");
    p.lines.push(XLine {
        id: 1,
        name: "Stream #1".into(),
        timestamp_ns: line_ts_ns,
        events: (0..count)
            .map(|k| event(op, k * spacing_ps, duration_ps, vec![str_stat(stat, "all-reduce")]))
            .collect(),
        ..Default::default()
    });
    p
}

/// A whole XSpace's bytes: the planes and one host name.
pub fn xspace_bytes(planes: Vec<XPlane>, hostname: &str) -> Vec<u8> {
    XSpace {
        planes,
        hostnames: vec![hostname.into()],
        ..Default::default()
    }
    .encode_to_vec()
}

/// Writes an XSpace plane by plane (field 1 of `XSpace`, length-delimited), so that an input
/// of gigabytes never sits in memory whole; [`XSpaceWriter::finish`] adds the host name.
pub struct XSpaceWriter<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> XSpaceWriter<W> {
    pub fn new(out: W) -> Self {
        Self { out, written: 0 }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn plane(&mut self, p: &XPlane) -> std::io::Result<()> {
        let body = p.encode_to_vec();
        let mut head = Vec::new();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut head);
        prost::encoding::encode_varint(body.len() as u64, &mut head);
        self.out.write_all(&head)?;
        self.out.write_all(&body)?;
        self.written += (head.len() + body.len()) as u64;
        Ok(())
    }

    /// Writes the host name (field 4) and flushes; returns the bytes written in all.
    pub fn finish(mut self, hostname: &str) -> std::io::Result<u64> {
        let mut tail = Vec::new();
        prost::encoding::string::encode(4, &hostname.to_string(), &mut tail);
        self.out.write_all(&tail)?;
        self.out.flush()?;
        Ok(self.written + tail.len() as u64)
    }
}

/// Profile start of [`write_gpu_profile`]'s traces, epoch ns.
pub const GPU_PROFILE_T0_NS: i64 = 1_763_000_000_000_000_000;

/// Writes node `node`'s synthetic GPU profile of about `target` bytes to `path` and returns
/// its size: alternating `/host:CPU` and `/device:GPU:k` planes of lines of 20,000 events
/// (with stats), a 60 s `Task Environment`, and a distprof plane with a drifting model of 15
/// windows of 4 s (offset 1 ms per node id), a tracer start and 600 snapshot pairs, so that
/// merge takes both the S -> G and the R -> S -> G paths. Deterministic: the same node and
/// target give the same bytes.
pub fn write_gpu_profile(path: &Path, node: NodeId, target: u64) -> std::io::Result<u64> {
    let mut w = XSpaceWriter::new(std::io::BufWriter::new(std::fs::File::create(path)?));
    let events_per_line = 20_000usize;
    let mut line_no = 0i64;
    // Planes of about 16 MB keep the generator's own memory modest. At least one line of
    // events whatever the target: merge refuses a trace without events.
    while line_no == 0 || w.written() + 1_000_000 < target {
        let device = line_no % 2 == 1;
        let mut p = XPlane {
            name: if device {
                format!("/device:GPU:{}", line_no / 2)
            } else {
                HOST_THREADS_PLANE.into()
            },
            ..Default::default()
        };
        let kernel = p.intern_event(if device {
            "ncclDevKernel_AllReduce_Sum_f32"
        } else {
            "ThunkExecutor::Execute"
        });
        let other = p.intern_event(if device { "fusion.123" } else { "PjitFunction(step)" });
        let corr = p.intern_stat("correlation_id");
        let op = p.intern_stat("hlo_op");
        let op_name = p.intern_stat("all-reduce.1");
        let mut plane_bytes = 0u64;
        while p.lines.is_empty()
            || (plane_bytes < 16_000_000 && w.written() + plane_bytes + 1_000_000 < target)
        {
            let mut l = XLine {
                id: line_no,
                name: format!("stream {line_no}"),
                timestamp_ns: 1_000 + line_no,
                ..Default::default()
            };
            let mut t_ps = 0i64;
            for i in 0..events_per_line {
                let dur = 1_000_000 + (i as i64 * 7919 % 5_000_000);
                let mut stats = vec![XStat {
                    metadata_id: corr,
                    value: Some(XStatValue::Uint64Value(i as u64 * 31 + 7)),
                }];
                if i % 4 == 0 {
                    stats.push(XStat {
                        metadata_id: op,
                        value: Some(XStatValue::RefValue(op_name as u64)),
                    });
                }
                l.events.push(event(if i % 4 == 0 { kernel } else { other }, t_ps, dur, stats));
                t_ps += dur + 500_000;
            }
            plane_bytes += l.encoded_len() as u64 + 4;
            p.lines.push(l);
            line_no += 1;
        }
        w.plane(&p)?;
        line_no += 1;
    }
    w.plane(&task_env_plane(0, GPU_PROFILE_T0_NS, GPU_PROFILE_T0_NS + 60_000_000_000))?;
    let windows = Windows {
        start_ns: GPU_PROFILE_T0_NS,
        window_ns: 4_000_000_000,
        count: 15,
        bound_ns: 900.0,
        uncertainty_ns: 40.0,
    };
    let segments = windows.segments(|j, _| (1_000_000.0 * node as f64 + 30.0 * j as f64, 7_500.0));
    let start = TracerStart {
        s_ns: GPU_PROFILE_T0_NS,
        r_ns: 9_000_000_000,
    };
    let hostname = format!("bench{node}");
    let data = with_tracer(
        plane_data(node, &hostname, segments),
        start,
        linear_snapshots(start, 600, 100_000_000, 100_000_003, 60),
    );
    let plane = XPlane::decode(distprof_plane_bytes(&data).as_slice())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    w.plane(&plane)?;
    w.finish(&hostname)
}
