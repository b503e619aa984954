//! Streams one node's XSpace onto the global timeline.
//!
//! Every event of every plane is mapped (device planes R -> S -> G, all others S -> G) and
//! re-encoded with its new offset and duration; all other bytes (names, metadata, stats) are
//! copied verbatim. One pass: each event is parsed once and mapped once per end; plane and
//! line lengths are patched afterwards (see `sink`), so memory stays at the input buffer plus
//! the output buffer.

use super::trace_out::{LineTrack, PlaneNames, TraceWriter};
use super::cursor::Cursor;
use super::line_map::{LineMapper, Mapper};
use super::sink::PatchWriter;
use super::timemap::{CorrectionPiece, NodeTimeMap};
use super::prescan::SpaceInfo;
use super::protobuf::{self, read_varint, Fields, WireError};
use super::xspace_fields::*;
use distprof::distprof_plane::{DISTPROF_APPLIED_PLANE, DISTPROF_PLANE};
use distprof::xplane::{XPlane, XStatValue, PROFILE_START_STAT, PROFILE_STOP_STAT, TASK_ENV_PLANE};
use prost::Message;
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

/// Fields of an event kept verbatim, collected in one parse (events have 2-6 fields).
const MAX_KEPT: usize = 8;

/// The one-byte key of a line's events (field 4, length-delimited).
const EVENT_KEY: u8 = ((LINE_EVENTS << 3) as u8) | protobuf::LEN;

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
    let mut chrome = match chrome {
        Some((pid, tid, ch, args)) => {
            let n = if display.is_empty() { line_name } else { display };
            let track = ch.thread(pid, tid, line_id, &String::from_utf8_lossy(n))?;
            Some((track, ch, args))
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
    let mut events = 0u64;
    let lm = LineMapper::new(m, base_ps, ref_ps);
    let mut f = Fields::new(line, base);
    let mut write = |ev: &[u8], out: &mut PatchWriter| -> Result<(), RewriteError> {
        // The event's place in its line, by which `--flows` finds its flow ids.
        let index = u32::try_from(events).unwrap_or(u32::MAX);
        events += 1;
        write_event(ev, &lm, out.buf(), chrome.as_mut().map(|(t, c, a)| (&*t, &mut **c, &**a)), new_ts_ns, index)?;
        Ok(out.maybe_flush()?)
    };
    loop {
        // The events (the bulk) one after the other, then whatever field follows them.
        while let Some(ev) = f.next_in_run(EVENT_KEY) {
            write(ev, out)?;
        }
        let Some(x) = f.next_field()? else { break };
        match x.number {
            LINE_TIMESTAMP | LINE_DURATION => {}
            LINE_EVENTS => write(x.bytes, out)?,
            _ => out.buf().extend_from_slice(x.raw),
        }
    }
    out.patch_len(at)?;
    if let Some((_, ch, _)) = chrome {
        ch.end_thread()?;
    }
    Ok((events, events))
}

/// What the fast path learned of an event: its metadata id, mapped offset and duration,
/// and where its stats lie (for the Chrome args, so they are not searched for again).
struct FastEvent {
    meta: i64,
    new_off: i64,
    new_dur: i64,
    /// The stats as one run of fields, or (rare: other fields between them) the whole event.
    stats: (usize, usize),
}

/// The common event shape (metadata id, offset, duration, stats), parsed in one tight loop
/// with kept bytes as at most 4 contiguous ranges. None for anything else (aggregated
/// events, unknown fields, malformed input): the general path handles those and reports errors.
#[inline(always)]
fn write_event_fast(ev: &[u8], lm: &LineMapper<'_, '_>, out: &mut Vec<u8>) -> Option<FastEvent> {
    let (mut off, mut dur, mut meta) = (0i64, 0i64, 0i64);
    let mut ranges = [(0usize, 0usize); 4];
    let mut nr = 0usize;
    let mut kept_len = 0usize;
    let mut pos = 0usize;
    // The stats' run [from, to); `split` when another field lies between two stats.
    let (mut stats_from, mut stats_to, mut split) = (0usize, 0usize, false);
    while pos < ev.len() {
        let start = pos;
        let key = ev[pos];
        pos += 1;
        match key {
            0x08 => meta = read_varint(ev, &mut pos)? as i64,
            0x10 => {
                off = read_varint(ev, &mut pos)? as i64;
                continue;
            }
            0x18 => {
                dur = read_varint(ev, &mut pos)? as i64;
                continue;
            }
            0x22 => {
                let len = read_varint(ev, &mut pos)? as usize;
                pos = pos.checked_add(len).filter(|&e| e <= ev.len())?;
                if stats_to == 0 {
                    stats_from = start;
                } else {
                    split |= stats_to != start;
                }
                stats_to = pos;
            }
            _ => return None,
        }
        // Kept field [start, pos): extend the last range when contiguous.
        if nr > 0 && ranges[nr - 1].1 == start {
            ranges[nr - 1].1 = pos;
        } else {
            if nr == ranges.len() {
                return None;
            }
            ranges[nr] = (start, pos);
            nr += 1;
        }
        kept_len += pos - start;
    }
    let (new_off, new_dur) = map_event(lm, off, dur);
    let mut out = Cursor::new(out);
    put_event_header(&mut out, kept_len, new_off, new_dur);
    for &(a, b) in &ranges[..nr] {
        out.put(&ev[a..b]);
    }
    put_event_times(&mut out, new_off, new_dur);
    let stats = if split { (0, ev.len()) } else { (stats_from, stats_to) };
    Some(FastEvent { meta, new_off, new_dur, stats })
}

/// The mapped offset and duration (ps, relative to the output line) of an event at `off`
/// lasting `dur` on its input line. The map is monotone, so the offset is >= 0 up to
/// rounding; the rounding is clamped away.
#[inline(always)]
fn map_event(lm: &LineMapper<'_, '_>, off: i64, dur: i64) -> (i64, i64) {
    let s = lm.rel(off);
    let e = lm.rel(off.saturating_add(dur));
    (s.max(0), e.saturating_sub(s).max(0))
}

/// The length header of a mapped event: its `kept_len` verbatim bytes and its new times.
#[inline(always)]
fn put_event_header(out: &mut Cursor<'_>, kept_len: usize, new_off: i64, new_dur: i64) {
    let len = kept_len
        + protobuf::int_field_len(EVENT_OFFSET, new_off)
        + protobuf::int_field_len(EVENT_DURATION, new_dur);
    protobuf::write_len_header(out, LINE_EVENTS, len);
}

/// A mapped event's new times, after its verbatim fields.
#[inline(always)]
fn put_event_times(out: &mut Cursor<'_>, new_off: i64, new_dur: i64) {
    protobuf::write_int_field(out, EVENT_OFFSET, new_off);
    protobuf::write_int_field(out, EVENT_DURATION, new_dur);
}

/// `ns` in ps plus `ps`, saturating: a corrupt line timestamp near the i64 range must give
/// a clamped time, not an overflow.
#[inline]
fn ns_plus_ps(ns: i64, ps: i64) -> i64 {
    ns.saturating_mul(1000).saturating_add(ps)
}

#[inline(always)]
fn write_event(
    ev: &[u8],
    lm: &LineMapper<'_, '_>,
    out: &mut Vec<u8>,
    chrome: Option<(&LineTrack, &mut TraceWriter, &PlaneNames)>,
    new_ts_ns: i64,
    index: u32,
) -> Result<(), RewriteError> {
    let mark = out.len();
    if let Some(e) = write_event_fast(ev, lm, out) {
        if let Some((track, ch, names)) = chrome {
            let stats = &ev[e.stats.0..e.stats.1];
            ch.slice(track, names, ns_plus_ps(new_ts_ns, e.new_off), e.new_dur, e.meta, stats, index)?;
        }
        return Ok(());
    }
    out.truncate(mark);
    let (mut off, mut dur, mut aggregated, mut meta) = (0i64, 0i64, false, 0i64);
    let mut kept: [&[u8]; MAX_KEPT] = [&[]; MAX_KEPT];
    let (mut nkept, mut kept_len) = (0usize, 0usize);
    let mut dur_raw: &[u8] = &[];
    let mut f = Fields::new(ev, 0);
    while let Some(x) = f.next_field()? {
        match x.number {
            EVENT_OFFSET => off = x.int as i64,
            EVENT_DURATION => {
                dur = x.int as i64;
                dur_raw = x.raw;
            }
            n => {
                if n == EVENT_NUM_OCCURRENCES {
                    aggregated = true;
                } else if n == 1 {
                    meta = x.int as i64;
                }
                if nkept < MAX_KEPT {
                    kept[nkept] = x.raw;
                }
                nkept += 1;
                kept_len += x.raw.len();
            }
        }
    }
    let put_kept = |out: &mut Vec<u8>| -> Result<(), WireError> {
        if nkept <= MAX_KEPT {
            for k in &kept[..nkept] {
                out.extend_from_slice(k);
            }
        } else {
            let mut f = Fields::new(ev, 0);
            while let Some(x) = f.next_field()? {
                if x.number != EVENT_OFFSET && x.number != EVENT_DURATION {
                    out.extend_from_slice(x.raw);
                }
            }
        }
        Ok(())
    };
    if aggregated {
        // No position to map: keep the event as it is.
        protobuf::put_len_header(out, LINE_EVENTS, kept_len + dur_raw.len());
        put_kept(out)?;
        out.extend_from_slice(dur_raw);
        return Ok(());
    }
    let (new_off, new_dur) = map_event(lm, off, dur);
    put_event_header(&mut Cursor::new(out), kept_len, new_off, new_dur);
    put_kept(out)?;
    put_event_times(&mut Cursor::new(out), new_off, new_dur);
    if let Some((track, ch, names)) = chrome {
        ch.slice(track, names, ns_plus_ps(new_ts_ns, new_off), new_dur, meta, ev, index)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
