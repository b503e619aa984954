//! Streams one node's XSpace onto the global timeline.
//!
//! Every event of every plane is mapped (device planes R -> S -> G, all others S -> G) and
//! re-encoded with its new offset and duration; all other bytes (names, metadata, stats) are
//! copied verbatim. One pass: each event is parsed once and mapped once per end; plane and
//! line lengths are patched afterwards (see `sink`), so memory stays at the input buffer plus
//! the output buffer.

use super::trace_out::{PlaneNames, TraceWriter};
use super::line_map::{LineMapper, Mapper};
use super::sink::PatchWriter;
use super::timemap::{CorrectionPiece, NodeTimeMap};
use super::prescan::SpaceInfo;
use super::protobuf::{self, Fields, WireError};
use super::xspace_fields::*;
use distprof::distprof_plane::{DISTPROF_APPLIED_PLANE, DISTPROF_PLANE};
use distprof::xplane::{XPlane, XStatValue, PROFILE_START_STAT, PROFILE_STOP_STAT, TASK_ENV_PLANE};
use prost::Message;
use event::{LineCopy, LineTrace, EVENT_KEY};
use std::io;



#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("writing output: {0}")]
    Io(#[from] io::Error),
}


/// Counts of one node's rewrite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewriteStats {
    pub planes: u64,
    pub lines: u64,
    pub events: u64,
    /// Device events mapped without an R -> S fit (no tracer start pair or no snapshots).
    pub device_events_without_fit: u64,
}

/// Where one node's output goes and what it is called.
pub struct NodeOutput<'a> {
    pub node: u32,
    /// Host name written into the XSpace (distinct per node).
    pub hostname: &'a str,
    /// Global timeline origin, epoch ns in G: output line timestamps are relative to it.
    pub g0_ns: i64,
    /// Next free plane id; incremented per plane so ids are unique across nodes.
    pub next_plane_id: &'a mut i64,
    /// Next free device plane id (device ids become trace pids, keep them small).
    pub next_device_id: &'a mut i64,
    /// The Perfetto output's writer (protobuf or Chrome JSON).
    pub chrome: Option<&'a mut TraceWriter>,
    /// Called with the input bytes done, about every [`PROGRESS_BYTES`].
    pub progress: &'a mut dyn FnMut(usize),
}

/// Input bytes between two progress calls.
pub const PROGRESS_BYTES: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Host,
    Device,
    /// Copied verbatim except its id and name: the distprof plane keeps the node's raw model.
    Verbatim,
    TaskEnv,
}


/// Rewrites one XSpace from `buf` into `out`. Returns the counts.
pub fn rewrite_space(
    buf: &[u8],
    info: &SpaceInfo,
    map: &NodeTimeMap,
    out: &mut PatchWriter,
    mut o: NodeOutput<'_>,
) -> Result<RewriteStats, RewriteError> {
    let mut stats = RewriteStats::default();
    let mut f = Fields::new(buf, 0);
    let mut next_report = PROGRESS_BYTES;
    while let Some(x) = f.next_field()? {
        let done = f.offset_of(x.raw) + x.raw.len();
        if done >= next_report {
            (o.progress)(done);
            next_report = done + PROGRESS_BYTES;
        }
        match (x.number, x.wire_type) {
            (SPACE_PLANES, protobuf::LEN) => rewrite_plane(
                x.bytes,
                f.offset_of(x.bytes),
                info,
                map,
                out,
                &mut o,
                &mut stats,
            )?,
            (SPACE_HOSTNAMES, _) => {}
            _ => out.buf().extend_from_slice(x.raw),
        }
        out.maybe_flush()?;
    }
    if info.distprof.is_none() && !info.already_merged {
        // Mark the output as merged even without a model, so later merges and validate
        // take its times as they are; the stat says no correction was applied.
        let mut p = XPlane {
            id: *o.next_plane_id,
            name: DISTPROF_APPLIED_PLANE.into(),
            ..Default::default()
        };
        *o.next_plane_id += 1;
        let id = p.intern_stat("uncorrected");
        p.stats.push(distprof::xplane::XStat {
            metadata_id: id,
            value: Some(XStatValue::Uint64Value(1)),
        });
        let body = p.encode_to_vec();
        protobuf::put_len_header(out.buf(), SPACE_PLANES, body.len());
        out.buf().extend_from_slice(&body);
    }
    protobuf::put_len_header(out.buf(), SPACE_HOSTNAMES, o.hostname.len());
    out.buf().extend_from_slice(o.hostname.as_bytes());
    Ok(stats)
}

fn rewrite_plane(
    plane: &[u8],
    base: usize,
    info: &SpaceInfo,
    map: &NodeTimeMap,
    out: &mut PatchWriter,
    o: &mut NodeOutput<'_>,
    stats: &mut RewriteStats,
) -> Result<(), RewriteError> {
    let mut fields = Vec::new();
    let mut f = Fields::new(plane, base);
    let mut name: Option<&[u8]> = None;
    while let Some(x) = f.next_field()? {
        // The first name, as `plane_name` (prescan) reads it: a corrupt plane with two
        // names must get the same kind in both passes.
        if x.number == PLANE_NAME && x.wire_type == protobuf::LEN && name.is_none() {
            name = Some(x.bytes);
        }
        // Lines are the bulk; they are walked in place below, not collected.
        if x.number != PLANE_LINES {
            fields.push(x);
        }
    }
    let name = name.unwrap_or(b"");
    let kind = if name == TASK_ENV_PLANE.as_bytes() {
        Kind::TaskEnv
    } else if name == DISTPROF_PLANE.as_bytes() || name == DISTPROF_APPLIED_PLANE.as_bytes() {
        // A merge output's applied plane is the model a merge already used: copied as it
        // is, like the plane it came from, never mapped a second time.
        Kind::Verbatim
    } else if super::prescan::is_device_plane(name) {
        Kind::Device
    } else {
        Kind::Host
    };
    let new_id = if kind == Kind::Device {
        *o.next_device_id += 1;
        *o.next_device_id - 1
    } else {
        *o.next_plane_id += 1;
        *o.next_plane_id - 1
    };
    stats.planes += 1;

    if kind == Kind::TaskEnv {
        let mut p = XPlane::decode(plane).map_err(|_| WireError {
            at: base,
            what: "undecodable Task Environment plane",
        })?;
        p.id = new_id;
        let start = p.intern_stat(PROFILE_START_STAT);
        let stop = p.intern_stat(PROFILE_STOP_STAT);
        let g_stop = info
            .profile_stop_ns
            .map(|s| (map.host_to_g_ps(s as i128 * 1000).div_euclid(1000)) as u64);
        for s in &mut p.stats {
            if s.metadata_id == start {
                s.value = Some(XStatValue::Uint64Value(o.g0_ns as u64));
            } else if s.metadata_id == stop {
                if let Some(v) = g_stop {
                    s.value = Some(XStatValue::Uint64Value(v));
                }
            }
        }
        let body = p.encode_to_vec();
        protobuf::put_len_header(out.buf(), SPACE_PLANES, body.len());
        out.buf().extend_from_slice(&body);
        return Ok(());
    }

    let mapper = Mapper {
        map,
        device: kind == Kind::Device,
        profile_start_ns: info.profile_start_ns.unwrap_or(0),
        cache: std::cell::Cell::new(CorrectionPiece::EMPTY),
    };
    let mut chrome = None;
    if kind != Kind::Verbatim {
        if let Some(ch) = o.chrome.as_deref_mut() {
            let process = format!("node {} {} {}", o.node, o.hostname, String::from_utf8_lossy(name));
            let (pid, names) = ch.begin_plane(&process, &fields)?;
            chrome = Some((pid, ch, names));
        }
    }

    protobuf::put_key(out.buf(), SPACE_PLANES, protobuf::LEN);
    let at = out.placeholder();
    protobuf::put_int_field(out.buf(), PLANE_ID, new_id);
    let mut f = Fields::new(plane, base);
    // Chrome thread id of the next line: its place in the plane, from 1. XLine ids are
    // 64-bit (often hashes) and Perfetto reads a JSON tid as 32 bits, which would fold
    // several lines onto one track.
    let mut tid = 0u32;
    while let Some(x) = f.next_field()? {
        match x.number {
            PLANE_ID => {}
            PLANE_NAME if kind == Kind::Verbatim => {
                protobuf::put_len_header(out.buf(), PLANE_NAME, DISTPROF_APPLIED_PLANE.len());
                out.buf()
                    .extend_from_slice(DISTPROF_APPLIED_PLANE.as_bytes());
            }
            PLANE_LINES if kind != Kind::Verbatim => {
                tid = tid.saturating_add(1);
                let ch = chrome.as_mut().map(|(p, c, n)| (*p, tid, &mut **c, &*n));
                let (events, without_fit) =
                    write_line(x.bytes, f.offset_of(x.bytes), &mapper, o.g0_ns, out, ch)?;
                stats.lines += 1;
                stats.events += events;
                if kind == Kind::Device && map.device.is_none() {
                    stats.device_events_without_fit += without_fit;
                }
            }
            _ => out.buf().extend_from_slice(x.raw),
        }
        out.maybe_flush()?;
    }
    out.patch_len(at)?;
    Ok(())
}

/// Writes one line; returns (events written, events mapped).
fn write_line(
    line: &[u8],
    base: usize,
    m: &Mapper<'_>,
    g0_ns: i64,
    out: &mut PatchWriter,
    chrome: Option<(u64, u32, &mut TraceWriter, &PlaneNames)>,
) -> Result<(u64, u64), RewriteError> {
    let (mut ts, mut dur, mut line_id, mut line_name, mut display) =
        (0i64, 0i64, 0i64, &b""[..], &b""[..]);
    let mut f = Fields::new(line, base);
    loop {
        // The events are the bulk and are read in the second pass.
        f.skip_run(EVENT_KEY);
        let Some(x) = f.next_field()? else { break };
        match x.number {
            LINE_TIMESTAMP => ts = x.int as i64,
            LINE_DURATION => dur = x.int as i64,
            LINE_ID => line_id = x.int as i64,
            LINE_NAME => line_name = x.bytes,
            LINE_DISPLAY_NAME => display = x.bytes,
            _ => {}
        }
    }
    let trace = match chrome {
        Some((pid, tid, writer, names)) => {
            let n = if display.is_empty() { line_name } else { display };
            let track = writer.thread(pid, tid, line_id, &String::from_utf8_lossy(n))?;
            Some(LineTrace { track, writer, names })
        }
        None => None,
    };
    let base_ps = m.line_base_ns(ts) as i128 * 1000;
    let mapped_base = m.map_ps(base_ps);
    let new_ts_ns = (mapped_base.div_euclid(1000) as i64).saturating_sub(g0_ns);
    let ref_ps = (g0_ns as i128 + new_ts_ns as i128) * 1000;
    let new_dur_ps = if dur > 0 {
        (m.map_ps(base_ps + dur as i128) - mapped_base) as i64
    } else {
        0
    };

    protobuf::put_key(out.buf(), PLANE_LINES, protobuf::LEN);
    let at = out.placeholder();
    protobuf::put_int_field(out.buf(), LINE_TIMESTAMP, new_ts_ns);
    protobuf::put_int_field(out.buf(), LINE_DURATION, new_dur_ps);
    let lm = LineMapper::new(m, base_ps, ref_ps);
    let mut copy = LineCopy { lm: &lm, new_ts_ns, trace, events: 0 };
    let mut f = Fields::new(line, base);
    loop {
        // The events (the bulk) one after the other, then whatever field follows them.
        copy.run(&mut f, out)?;
        let Some(x) = f.next_field()? else { break };
        match x.number {
            LINE_TIMESTAMP | LINE_DURATION => {}
            LINE_EVENTS => copy.one(x.bytes, out)?,
            _ => out.buf().extend_from_slice(x.raw),
        }
    }
    out.patch_len(at)?;
    if let Some(t) = copy.trace {
        t.writer.end_thread()?;
    }
    let events = copy.events;
    Ok((events, events))
}

mod event;
#[cfg(test)]
mod tests;
