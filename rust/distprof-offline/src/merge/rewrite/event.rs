//! A line's events copied onto the global timeline: every byte of an XEvent is kept but its
//! offset and duration, which are mapped (`LineMapper`) and written after the kept fields.
//! This is the bulk of the rewrite (a bench event is 25 bytes), so it has three paths, each
//! writing the same bytes for the events that the one before it also takes (tested):
//! - [`Canonical`]: the layout that every encoder of xplane.proto writes (metadata id,
//!   offset, duration, then the stats, each field once), read in that order;
//! - [`copy_fast`]: the same fields in any order, or without an offset;
//! - [`copy_general`]: aggregated events, other fields, malformed input (it reports errors).
//!
//! A run of events is written through one [`Cursor`], which holds the output's length from
//! event to event instead of taking the `Vec` and handing it back for every event; the
//! output is offered a flush every [`FLUSH_CHECK_BYTES`], not after every event.

use crate::merge::cursor::Cursor;
use crate::merge::line_map::LineMapper;
use crate::merge::protobuf::{self, read_varint, Fields, WireError};
use crate::merge::rewrite::RewriteError;
use crate::merge::sink::PatchWriter;
use crate::merge::trace_out::{LineTrack, PlaneNames, TraceWriter};
use crate::merge::xspace_fields::*;

/// The one-byte key of a line's events (field 4, length-delimited).
pub(super) const EVENT_KEY: u8 = ((LINE_EVENTS << 3) as u8) | protobuf::LEN;

/// Output bytes between two offers to flush: well within the slack that the output's
/// buffer keeps beyond a chunk (`direct_io`), so that it does not grow.
const FLUSH_CHECK_BYTES: usize = 64 << 10;

/// Fields of an event kept verbatim by the general path, collected in one parse (events
/// have 2-6 fields).
const MAX_KEPT: usize = 8;

/// Where a line's slices go in the Perfetto output: the line's track, the writer, and the
/// plane's names.
pub(super) struct LineTrace<'t> {
    pub track: LineTrack,
    pub writer: &'t mut TraceWriter,
    pub names: &'t PlaneNames,
}

/// One line being copied: its map, its output timestamp, its trace, and the events so far.
pub(super) struct LineCopy<'a, 'l, 'm, 't> {
    pub lm: &'a LineMapper<'l, 'm>,
    /// The output line's timestamp, ns from the origin (slices are placed from it).
    pub new_ts_ns: i64,
    pub trace: Option<LineTrace<'t>>,
    /// Events copied so far: the next one's place in its line, by which `--flows` finds
    /// its flow ids.
    pub events: u64,
}

/// What a fast path learned of an event: its metadata id, mapped offset and duration,
/// and where its stats lie (for the trace's args, so they are not searched for again).
struct Copied {
    meta: i64,
    new_off: i64,
    new_dur: i64,
    /// The stats as one run of fields, or (rare: other fields between them) the whole event.
    stats: (usize, usize),
}

impl LineCopy<'_, '_, '_, '_> {
    /// Copies the run of events at `f`'s position (fields with key [`EVENT_KEY`]) and stops
    /// at the first other field, which it leaves to `f`.
    pub fn run(&mut self, f: &mut Fields<'_>, out: &mut PatchWriter) -> Result<(), RewriteError> {
        loop {
            let mut c = Cursor::new(out.buf());
            let flush_at = c.len() + FLUSH_CHECK_BYTES;
            while c.len() < flush_at {
                let Some(ev) = f.next_in_run(EVENT_KEY) else {
                    drop(c);
                    return Ok(out.maybe_flush()?);
                };
                self.event(ev, &mut c)?;
            }
            drop(c);
            out.maybe_flush()?;
        }
    }

    /// Copies one event that is not in a run (its key spelt otherwise).
    pub fn one(&mut self, ev: &[u8], out: &mut PatchWriter) -> Result<(), RewriteError> {
        self.event(ev, &mut Cursor::new(out.buf()))?;
        Ok(out.maybe_flush()?)
    }

    #[inline(always)]
    fn event(&mut self, ev: &[u8], c: &mut Cursor<'_>) -> Result<(), RewriteError> {
        let index = u32::try_from(self.events).unwrap_or(u32::MAX);
        self.events += 1;
        let Some(e) = Canonical::parse(ev) else {
            return self.other_event(ev, c, index);
        };
        let (new_off, new_dur) = map_event(self.lm, e.off, e.dur);
        let stats = &ev[e.stats_from..];
        put_event_header(c, e.meta_end + stats.len(), new_off, new_dur);
        c.put(&ev[..e.meta_end]);
        c.put(stats);
        put_event_times(c, new_off, new_dur);
        if let Some(t) = &mut self.trace {
            t.writer.slice(&t.track, t.names, ns_plus_ps(self.new_ts_ns, new_off), new_dur, e.meta, stats, index)?;
        }
        Ok(())
    }

    /// An event in another layout than [`Canonical`]'s.
    #[inline(never)]
    fn other_event(&mut self, ev: &[u8], c: &mut Cursor<'_>, index: u32) -> Result<(), RewriteError> {
        let Some(e) = copy_fast(ev, self.lm, c) else {
            let (lm, trace, new_ts_ns) = (self.lm, &mut self.trace, self.new_ts_ns);
            return c.with_vec(|out| copy_general(ev, lm, out, trace.as_mut(), new_ts_ns, index));
        };
        if let Some(t) = &mut self.trace {
            let stats = &ev[e.stats.0..e.stats.1];
            t.writer.slice(&t.track, t.names, ns_plus_ps(self.new_ts_ns, e.new_off), e.new_dur, e.meta, stats, index)?;
        }
        Ok(())
    }
}

/// An event in the layout encoders write: metadata id (field 1), offset (2), duration (3,
/// absent when 0), then only stats (4), each field within the event. Its kept bytes are
/// two ranges: the metadata id `[0, meta_end)`, the stats `[stats_from, end)`.
struct Canonical {
    meta: i64,
    meta_end: usize,
    off: i64,
    dur: i64,
    stats_from: usize,
}

impl Canonical {
    /// None for any other event.
    #[inline(always)]
    fn parse(ev: &[u8]) -> Option<Self> {
        if ev.first() != Some(&0x08) {
            return None;
        }
        let mut pos = 1;
        let meta = read_varint(ev, &mut pos)? as i64;
        let meta_end = pos;
        if ev.get(pos) != Some(&0x10) {
            return None;
        }
        pos += 1;
        let off = read_varint(ev, &mut pos)? as i64;
        let mut dur = 0;
        if ev.get(pos) == Some(&0x18) {
            pos += 1;
            dur = read_varint(ev, &mut pos)? as i64;
        }
        let stats_from = pos;
        while pos < ev.len() {
            if ev[pos] != 0x22 {
                return None;
            }
            pos += 1;
            let len = read_varint(ev, &mut pos)? as usize;
            pos = pos.checked_add(len).filter(|&e| e <= ev.len())?;
        }
        Some(Self { meta, meta_end, off, dur, stats_from })
    }
}

/// The common event fields (metadata id, offset, duration, stats) in any order, parsed in
/// one loop with kept bytes as at most 4 contiguous ranges. None for anything else
/// (aggregated events, unknown fields, malformed input), before anything is written.
#[inline(always)]
fn copy_fast(ev: &[u8], lm: &LineMapper<'_, '_>, out: &mut Cursor<'_>) -> Option<Copied> {
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
    put_event_header(out, kept_len, new_off, new_dur);
    for &(a, b) in &ranges[..nr] {
        out.put(&ev[a..b]);
    }
    put_event_times(out, new_off, new_dur);
    let stats = if split { (0, ev.len()) } else { (stats_from, stats_to) };
    Some(Copied { meta, new_off, new_dur, stats })
}

/// Any event: each field read by [`Fields`], which reports malformed input; an aggregated
/// event (`num_occurrences`) has no position to map and is kept as it is.
fn copy_general(
    ev: &[u8],
    lm: &LineMapper<'_, '_>,
    out: &mut Vec<u8>,
    trace: Option<&mut LineTrace<'_>>,
    new_ts_ns: i64,
    index: u32,
) -> Result<(), RewriteError> {
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
                } else if n == EVENT_METADATA_ID {
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
    if let Some(t) = trace {
        t.writer.slice(&t.track, t.names, ns_plus_ps(new_ts_ns, new_off), new_dur, meta, ev, index)?;
    }
    Ok(())
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
    let len = kept_len + protobuf::int_field_len(EVENT_OFFSET, new_off) + protobuf::int_field_len(EVENT_DURATION, new_dur);
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
pub(super) fn ns_plus_ps(ns: i64, ps: i64) -> i64 {
    ns.saturating_mul(1000).saturating_add(ps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::line_map::Mapper;
    use crate::merge::timemap::{CorrectionPiece, NodeTimeMap};
    use distprof::model::NodeClockModel;
    use distprof::xplane::{XEvent, XEventData, XStat, XStatValue};
    use prost::Message;

    const T0_NS: i64 = 1_763_000_000_000_000_000;

    /// An event as prost writes it: metadata id, offset, duration, then the stats.
    fn event(meta: i64, off: i64, dur: i64, stats: usize, text: usize) -> Vec<u8> {
        let stats = (0..stats)
            .map(|i| XStat { metadata_id: i as i64 + 1, value: Some(XStatValue::StrValue("s".repeat(text + i))) })
            .collect();
        XEvent { metadata_id: meta, data: Some(XEventData::OffsetPs(off)), duration_ps: dur, stats }.encode_to_vec()
    }

    /// The bytes each path writes for `ev` (None where a path does not take it).
    fn paths(ev: &[u8], lm: &LineMapper<'_, '_>) -> [Option<Vec<u8>>; 3] {
        let mut canonical = Vec::new();
        let taken = Canonical::parse(ev).is_some();
        LineCopy { lm, new_ts_ns: 0, trace: None, events: 0 }.event(ev, &mut Cursor::new(&mut canonical)).unwrap();
        let mut fast = Vec::new();
        let fast_taken = copy_fast(ev, lm, &mut Cursor::new(&mut fast)).is_some();
        let mut general = Vec::new();
        copy_general(ev, lm, &mut general, None, 0, 0).unwrap();
        [taken.then_some(canonical), fast_taken.then_some(fast), Some(general)]
    }

    /// Every path writes the same bytes for the events it takes: the canonical layout with
    /// every length of varint and of stat, and other layouts (no offset field, stats
    /// first, a repeated field), each checked against prost's reading of the input and the
    /// map's times.
    #[test]
    fn the_three_paths_write_the_same_event() {
        let segments = crate::test_support::segments(T0_NS, 2_000_000_000, &[1_000_000.0, 1_020_000.0], 5_000.0, |_| (900.0, false));
        let map = NodeTimeMap::from_parts(&NodeClockModel { node: 1, reachable: true, segments }, None, false).unwrap();
        let m = Mapper { map: &map, device: false, profile_start_ns: T0_NS, cache: std::cell::Cell::new(CorrectionPiece::EMPTY) };
        let base_ps = (T0_NS as i128 + 1_000) * 1000;
        let lm = LineMapper::new(&m, base_ps, m.map_ps(base_ps).div_euclid(1000) * 1000);
        let mut canonical = 0;
        for meta in [1, 300] {
            for off in [1, 127, 128, 37_000_000_123, 1 << 40, 1 << 50] {
                for dur in [0, 1, 10_000_000, 1 << 45] {
                    for (stats, text) in [(0, 0), (1, 3), (2, 0), (3, 200)] {
                        let ev = event(meta, off, dur, stats, text);
                        let [c, f, g] = paths(&ev, &lm);
                        assert!(c.is_some(), "the canonical path takes {meta} {off} {dur} {stats}");
                        canonical += 1;
                        assert_eq!(c, f, "{meta} {off} {dur} {stats}");
                        assert_eq!(c, g, "{meta} {off} {dur} {stats}");
                        // What was written is the input with the map's times.
                        let out = c.unwrap();
                        let mut pos = 1;
                        let len = read_varint(&out, &mut pos).unwrap() as usize;
                        assert_eq!((out[0], pos + len), (EVENT_KEY, out.len()));
                        let (want, got) = (XEvent::decode(ev.as_slice()).unwrap(), XEvent::decode(&out[pos..]).unwrap());
                        assert_eq!((got.metadata_id, &got.stats), (want.metadata_id, &want.stats));
                        assert_eq!((got.offset_ps(), got.duration_ps), map_event(&lm, off, dur));
                    }
                }
            }
        }
        assert_eq!(canonical, 2 * 6 * 4 * 4);
        // Other layouts: no offset field, stats before the times, a repeated id.
        let no_offset = XEvent { metadata_id: 7, data: None, duration_ps: 9, stats: vec![] }.encode_to_vec();
        let mut stats_first = event(7, 0, 0, 2, 1)[4..].to_vec();
        stats_first.extend_from_slice(&event(7, 5_000_000, 9, 0, 0));
        let mut twice = event(7, 5_000_000, 9, 1, 1);
        twice.extend_from_slice(&[0x08, 0x09]);
        for ev in [no_offset, stats_first, twice] {
            let [c, f, g] = paths(&ev, &lm);
            assert!(c.is_none(), "{ev:?}");
            assert_eq!(f, g, "{ev:?}");
        }
    }
}
