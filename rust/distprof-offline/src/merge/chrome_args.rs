//! What the Chrome JSON needs of one plane: each event metadata's name, rendered once as
//! `,"name":"..."`, and its stats; the stat metadata's names, so that an event's stats
//! become its `args` as XProf shows them (`hlo_op`, `hlo_module`, `correlation_id`, ...).
//!
//! An event's args are its metadata's stats, then its own, keyed by stat metadata name
//! (`stat<id>` when the plane has no such metadata). Values: integers as JSON integers,
//! doubles as numbers (null when not finite), strings escaped and cut at
//! [`STR_CAP_BYTES`], a reference stat as the string it names, bytes as `"<N bytes>"`.
//! The args of one event are capped at [`ARGS_CAP_BYTES`]: stats that would pass it are
//! left out and counted in `distprof_args_dropped`.

use super::chrome::{escape_lossy, put_f64, put_i64, put_u64};
use super::cursor::{written, Cursor};
use super::protobuf::{self, read_varint, Field, Fields, WireError};
use super::xspace_fields::*;
use std::collections::HashMap;

/// Largest rendered args object of one event, bytes between the braces (the dropped-stats
/// count may add up to 40 more).
pub const ARGS_CAP_BYTES: usize = 1024;
/// Longest string value kept, bytes (then `...`).
pub const STR_CAP_BYTES: usize = 256;

/// Ids below this are looked up in a vector (they are small and dense in practice).
const DENSE_IDS: i64 = 1 << 16;

/// Metadata by id: a vector for small ids, a map for the rest.
pub(super) struct IdTable<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<i64, T>,
}

impl<T> IdTable<T> {
    pub(super) fn new() -> Self {
        Self { dense: Vec::new(), sparse: HashMap::new() }
    }
    #[inline]
    pub(super) fn get(&self, id: i64) -> Option<&T> {
        if (0..DENSE_IDS).contains(&id) {
            self.dense.get(id as usize).and_then(Option::as_ref)
        } else {
            self.sparse.get(&id)
        }
    }
    pub(super) fn insert(&mut self, id: i64, v: T) {
        if (0..DENSE_IDS).contains(&id) {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize_with(i + 1, || None);
            }
            self.dense[i] = Some(v);
        } else {
            self.sparse.insert(id, v);
        }
    }
}

struct EventMeta {
    /// `,"name":"..."`.
    name_field: Vec<u8>,
    /// The metadata's stats rendered as args members, comma-separated.
    args: Vec<u8>,
    dropped: u32,
}

struct StatMeta {
    /// `"name":`.
    key: Vec<u8>,
    /// `"name"`: the value of a reference stat pointing here.
    as_value: Vec<u8>,
}

/// One plane's names and stat renderings for the Chrome JSON.
pub struct PlaneArgs {
    events: IdTable<EventMeta>,
    stats: IdTable<StatMeta>,
}

const NO_NAME: &[u8] = b",\"name\":\"\"";

impl PlaneArgs {
    /// From the plane's fields other than lines.
    pub fn new(fields: &[Field<'_>]) -> Result<Self, WireError> {
        let mut stats = IdTable::new();
        for (key, name) in stat_metadata(fields)? {
            let as_value = written(|c| {
                c.push(b'"');
                escape_lossy(name, STR_CAP_BYTES, c);
                c.push(b'"');
            });
            let mut key_bytes = as_value.clone();
            key_bytes.push(b':');
            stats.insert(key, StatMeta { key: key_bytes, as_value });
        }
        let mut out = Self { events: IdTable::new(), stats };
        for (key, n, meta_stats) in event_metadata(fields)? {
            let name_field = written(|c| {
                c.put(b",\"name\":\"");
                escape_lossy(n, usize::MAX, c);
                c.push(b'"');
            });
            let mut args = Vec::new();
            let mut dropped = 0;
            for s in meta_stats {
                dropped += out.push_stat(s, &mut Cursor::new(&mut args), 0);
            }
            out.events.insert(key, EventMeta { name_field, args, dropped });
        }
        Ok(out)
    }

    /// `,"name":"..."` of event metadata `id`.
    #[inline]
    pub fn name_field(&self, id: i64) -> &[u8] {
        self.events.get(id).map_or(NO_NAME, |m| &m.name_field)
    }

    /// Appends one stat as an args member (after a comma when `out` holds members since
    /// `body_start`) unless that passes the cap; returns 1 when it was left out.
    #[inline(always)]
    fn push_stat(&self, stat: &[u8], out: &mut Cursor<'_>, body_start: usize) -> u32 {
        let mark = out.len();
        if mark > body_start {
            out.push(b',');
        }
        if self.render_stat(stat, out).is_err() || out.len() - body_start > ARGS_CAP_BYTES {
            out.truncate(mark);
            return 1;
        }
        0
    }

    /// `"key":value` of one XStat.
    #[inline]
    fn render_stat(&self, stat: &[u8], out: &mut Cursor<'_>) -> Result<(), WireError> {
        if self.render_stat_fast(stat, out).is_some() {
            return Ok(());
        }
        self.render_stat_general(stat, out)
    }

    /// The common stat shape (an id, then one value) in one tight loop; None for anything
    /// else, which the general path renders (and reports when malformed).
    #[inline(always)]
    fn render_stat_fast(&self, stat: &[u8], out: &mut Cursor<'_>) -> Option<()> {
        let mut pos = 0;
        if stat.first() != Some(&0x08) {
            return None;
        }
        pos += 1;
        let id = read_varint(stat, &mut pos)? as i64;
        let key = *stat.get(pos)?;
        pos += 1;
        let mark = out.len();
        match self.stats.get(id) {
            Some(m) => out.put(&m.key),
            None => return None,
        }
        let done = match key {
            0x18 => read_varint(stat, &mut pos).map(|v| put_u64(out, v)),
            0x20 => read_varint(stat, &mut pos).map(|v| put_i64(out, v as i64)),
            0x38 => read_varint(stat, &mut pos).and_then(|v| self.stats.get(v as i64)).map(|m| out.put(&m.as_value)),
            0x2a => read_varint(stat, &mut pos).and_then(|len| {
                let end = pos.checked_add(len as usize).filter(|&e| e <= stat.len())?;
                out.push(b'"');
                escape_lossy(&stat[pos..end], STR_CAP_BYTES, out);
                out.push(b'"');
                pos = end;
                Some(())
            }),
            _ => None,
        };
        if done.is_none() || pos != stat.len() {
            out.truncate(mark);
            return None;
        }
        Some(())
    }

    #[inline(never)]
    fn render_stat_general(&self, stat: &[u8], out: &mut Cursor<'_>) -> Result<(), WireError> {
        let (id, value) = stat_fields(stat)?;
        match self.stats.get(id) {
            Some(m) => out.put(&m.key),
            None => {
                out.put(b"\"stat");
                put_i64(out, id);
                out.put(b"\":");
            }
        }
        match value {
            None => out.put(b"null"),
            Some(v) => match v.number {
                STAT_DOUBLE => put_f64(out, f64::from_bits(v.int)),
                STAT_UINT64 => put_u64(out, v.int),
                STAT_INT64 => put_i64(out, v.int as i64),
                STAT_STR => {
                    out.push(b'"');
                    escape_lossy(v.bytes, STR_CAP_BYTES, out);
                    out.push(b'"');
                }
                STAT_BYTES => {
                    out.put(b"\"<");
                    put_u64(out, v.bytes.len() as u64);
                    out.put(b" bytes>\"");
                }
                STAT_REF => match self.stats.get(v.int as i64) {
                    Some(m) => out.put(&m.as_value),
                    None => {
                        out.put(b"\"ref");
                        put_u64(out, v.int);
                        out.push(b'"');
                    }
                },
                _ => out.put(b"null"),
            },
        }
        Ok(())
    }

    /// Appends `,"args":{...}` for an event with metadata `meta` and encoded XEvent `ev`
    /// (or only the run of its fields that holds its stats: other fields are skipped),
    /// or nothing when it has no stats.
    #[inline(always)]
    pub fn write_args(&self, meta: i64, ev: &[u8], out: &mut Cursor<'_>) {
        let start = out.len();
        out.put(b",\"args\":{");
        let body = out.len();
        let mut dropped = 0u32;
        if let Some(m) = self.events.get(meta) {
            // Metadata stats are rare: most events have nothing to copy.
            if !m.args.is_empty() {
                out.put(&m.args);
            }
            dropped += m.dropped;
        }
        let general = !common_event_stats(ev, |stat| dropped += self.push_stat(stat, out, body));
        if general {
            dropped = self.write_args_general(meta, ev, out, body);
        }
        if dropped > 0 {
            if out.len() > body {
                out.push(b',');
            }
            out.put(b"\"distprof_args_dropped\":");
            put_u64(out, dropped as u64);
        }
        if out.len() == body {
            out.truncate(start);
        } else {
            out.push(b'}');
        }
    }

    /// The args body of an event of unusual shape, field by field (after the fast loop of
    /// [`Self::write_args`] gave up at `body`); returns the stats left out.
    #[cold]
    #[inline(never)]
    fn write_args_general(&self, meta: i64, ev: &[u8], out: &mut Cursor<'_>, body: usize) -> u32 {
        out.truncate(body);
        let mut dropped = self.events.get(meta).map_or(0, |m| {
            out.put(&m.args);
            m.dropped
        });
        for stat in event_stats(ev) {
            dropped += self.push_stat(stat, out, body);
        }
        dropped
    }
}

/// An XStat's metadata id and its value field (None when it has none).
pub(super) fn stat_fields(stat: &[u8]) -> Result<(i64, Option<Field<'_>>), WireError> {
    let (mut id, mut value) = (0i64, None);
    let mut f = Fields::new(stat, 0);
    while let Some(y) = f.next_field()? {
        if y.number == STAT_METADATA_ID {
            id = y.int as i64;
        } else {
            value = Some(y);
        }
    }
    Ok((id, value))
}

/// Hands each stat of an XEvent of the common shape to `f`, in one tight loop (metadata id,
/// offset, duration, occurrences as varints, stats as length-delimited); false at the first
/// field of any other shape (or a malformed one), which its caller then reads the general
/// way ([`event_stats`]), from the start.
#[inline(always)]
pub(super) fn common_event_stats(ev: &[u8], mut f: impl FnMut(&[u8])) -> bool {
    let mut pos = 0;
    while pos < ev.len() {
        let key = ev[pos];
        pos += 1;
        match key {
            0x08 | 0x10 | 0x18 | 0x28 => {
                if read_varint(ev, &mut pos).is_none() {
                    return false;
                }
            }
            0x22 => {
                let Some(end) = read_varint(ev, &mut pos).and_then(|l| pos.checked_add(l as usize)).filter(|&e| e <= ev.len()) else {
                    return false;
                };
                f(&ev[pos..end]);
                pos = end;
            }
            _ => return false,
        }
    }
    true
}

/// The stats of an encoded XEvent, up to the first field that does not parse.
pub(super) fn event_stats(ev: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut f = Fields::new(ev, 0);
    std::iter::from_fn(move || f.next_field().ok().flatten()).filter(|x| x.number == EVENT_STATS && x.wire_type == protobuf::LEN).map(|x| x.bytes)
}

/// The stat metadata of a plane (its fields other than lines): (id, name).
pub(super) fn stat_metadata<'a>(fields: &[Field<'a>]) -> Result<Vec<(i64, &'a [u8])>, WireError> {
    let mut out = Vec::new();
    for x in fields.iter().filter(|x| x.number == PLANE_STAT_METADATA && x.wire_type == protobuf::LEN) {
        // The map key is the id that XStat.metadata_id refers to.
        let (key, value) = map_entry(x.bytes)?;
        let mut name = &b""[..];
        let mut f = Fields::new(value, 0);
        while let Some(y) = f.next_field()? {
            if y.number == STAT_META_NAME {
                name = y.bytes;
            }
        }
        out.push((key, name));
    }
    Ok(out)
}

/// One event metadata: id, display name or else name, its stats.
pub(super) type EventMetadata<'a> = (i64, &'a [u8], Vec<&'a [u8]>);

/// The event metadata of a plane.
pub(super) fn event_metadata<'a>(fields: &[Field<'a>]) -> Result<Vec<EventMetadata<'a>>, WireError> {
    let mut out = Vec::new();
    for x in fields.iter().filter(|x| x.number == PLANE_EVENT_METADATA && x.wire_type == protobuf::LEN) {
        let (key, value) = map_entry(x.bytes)?;
        let (mut name, mut display) = (&b""[..], &b""[..]);
        let mut meta_stats = Vec::new();
        let mut f = Fields::new(value, 0);
        while let Some(y) = f.next_field()? {
            match y.number {
                EVENT_META_NAME => name = y.bytes,
                EVENT_META_DISPLAY_NAME => display = y.bytes,
                EVENT_META_STATS if y.wire_type == protobuf::LEN => meta_stats.push(y.bytes),
                _ => {}
            }
        }
        out.push((key, if display.is_empty() { name } else { display }, meta_stats));
    }
    Ok(out)
}

/// Key and value of a map entry (an int64 key, a message value).
pub(super) fn map_entry(entry: &[u8]) -> Result<(i64, &[u8]), WireError> {
    let (mut key, mut value) = (0i64, &b""[..]);
    let mut f = Fields::new(entry, 0);
    while let Some(y) = f.next_field()? {
        match y.number {
            MAP_KEY => key = y.int as i64,
            MAP_VALUE => value = y.bytes,
            _ => {}
        }
    }
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::protobuf::fields_of;
    use distprof::xplane::{XEvent, XEventData, XPlane, XStat, XStatValue};
    use prost::Message;

    #[test]
    fn stats_become_args_by_name_within_the_cap() {
        let mut p = XPlane::default();
        let op = p.intern_stat("hlo_op");
        let module = p.intern_stat("hlo_module");
        let corr = p.intern_stat("correlation_id");
        let flops = p.intern_stat("flops");
        let long = p.intern_stat("long_name");
        let target = p.intern_stat("all-reduce.1");
        let ev = p.intern_event("kernel");
        p.event_metadata.get_mut(&ev).unwrap().stats.push(XStat {
            metadata_id: module,
            value: Some(XStatValue::StrValue("jit_step".into())),
        });
        let event = |stats: Vec<XStat>| {
            XEvent { metadata_id: ev, data: Some(XEventData::OffsetPs(5)), duration_ps: 7, stats }.encode_to_vec()
        };
        let bytes = p.encode_to_vec();
        let fields = fields_of(&bytes);
        let args = PlaneArgs::new(&fields).unwrap();
        assert_eq!(args.name_field(ev), b",\"name\":\"kernel\"");
        let render = |e: &[u8]| {
            let mut out = Vec::new();
            args.write_args(ev, e, &mut Cursor::new(&mut out));
            let text = format!("{{\"x\":0{}}}", String::from_utf8(out).unwrap());
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["args"].clone()
        };
        let a = render(&event(vec![
            XStat { metadata_id: op, value: Some(XStatValue::RefValue(target as u64)) },
            XStat { metadata_id: corr, value: Some(XStatValue::Uint64Value(u64::MAX)) },
            XStat { metadata_id: flops, value: Some(XStatValue::DoubleValue(0.25)) },
            XStat { metadata_id: 999, value: Some(XStatValue::Int64Value(-3)) },
        ]));
        assert_eq!(a["hlo_module"], "jit_step");
        assert_eq!(a["hlo_op"], "all-reduce.1");
        assert_eq!(a["correlation_id"].as_u64(), Some(u64::MAX));
        assert_eq!(a["flops"].as_f64(), Some(0.25));
        assert_eq!(a["stat999"], -3);
        // Over the cap: long strings are cut, and stats beyond the cap are counted.
        let many: Vec<XStat> = (0..20)
            .map(|_| XStat { metadata_id: long, value: Some(XStatValue::StrValue("y".repeat(1000))) })
            .collect();
        let mut out = Vec::new();
        args.write_args(ev, &event(many.clone()), &mut Cursor::new(&mut out));
        assert!(out.len() <= ARGS_CAP_BYTES + 60, "{}", out.len());
        let a = render(&event(many));
        assert_eq!(a["long_name"].as_str().unwrap().len(), STR_CAP_BYTES + 3);
        assert_eq!(a["distprof_args_dropped"], 17);
        // No stats at all: no args.
        let bare = PlaneArgs::new(&[]).unwrap();
        let mut out = Vec::new();
        bare.write_args(1, &event(vec![]), &mut Cursor::new(&mut out));
        assert!(out.is_empty());
        assert_eq!(bare.name_field(1), NO_NAME);
    }
}
