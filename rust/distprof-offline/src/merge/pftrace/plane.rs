//! One plane's names for the protobuf trace: its event and stat names as `InternedData`
//! entries (interned per line, `intern`), and its XStats rendered as debug annotations with
//! the Chrome JSON's limits (strings cut at [`STR_CAP_BYTES`], at most [`ARGS_CAP_BYTES`]
//! of encoded annotations, the rest counted in `distprof_args_dropped`).

use super::super::chrome_args::{common_event_stats, event_metadata, event_stats, stat_fields, stat_metadata, IdTable, ARGS_CAP_BYTES, STR_CAP_BYTES};
use super::super::cursor::Cursor;
use super::super::protobuf::{self, Field, WireError};
use super::super::rewrite::RewriteError;
use super::super::xspace_fields::*;
use super::annotations::{cut_text, put_annotation, Name, Value};
use super::fields::*;
use super::intern::{Entries, NameUse};

/// What every begin of an event with this metadata starts with, encoded once.
struct EventMeta {
    /// The TrackEvent's fields before the event's own stats: its type (a slice's begin),
    /// its interned name and the metadata's stats as annotations.
    head: Vec<u8>,
    /// Where the annotations start in `head`: the args cap counts from there.
    annotations_at: usize,
    /// The names `head` uses, in the order they are interned: the event's, then its
    /// annotations'.
    iids: Vec<u64>,
    /// The metadata's stats left out at the cap.
    dropped: u32,
}

impl EventMeta {
    /// The head of a begin named by iid `name_iid` (0: no name), before its annotations.
    fn begin(name_iid: u64) -> Self {
        let mut head = Vec::new();
        let mut c = Cursor::new(&mut head);
        put_varint_field(&mut c, EVENT_TYPE, TYPE_SLICE_BEGIN);
        put_varint_field(&mut c, EVENT_NAME_IID, name_iid);
        drop(c);
        let iids = if name_iid == 0 { Vec::new() } else { vec![name_iid] };
        Self { annotations_at: head.len(), head, iids, dropped: 0 }
    }
}

struct StatMeta {
    name_iid: u64,
    /// The name as the value of a reference stat (cut).
    as_value: Vec<u8>,
    /// `as_value` as a whole `DebugAnnotation.string_value` field, when it fits in an
    /// annotation of one-byte lengths (empty otherwise): what a reference to this stat
    /// copies (`render_stat`).
    as_value_field: Vec<u8>,
}

/// One plane's interned names and stat renderings for the protobuf trace.
pub struct ProtoPlane {
    events: IdTable<EventMeta>,
    /// The head of an event whose metadata the plane lacks: no name.
    unnamed: EventMeta,
    stats: IdTable<StatMeta>,
    /// By iid (from 1): the `InternedData` entry of each name.
    entries: Vec<Vec<u8>>,
}

impl ProtoPlane {
    /// From the plane's fields other than lines.
    pub fn new(fields: &[Field<'_>]) -> Result<Self, RewriteError> {
        let mut entries = vec![Vec::new()];
        let mut entry = |field: u32, name: &[u8]| {
            let iid = entries.len() as u64;
            let mut e = Vec::new();
            let mut c = Cursor::new(&mut e);
            let body = varint_field_len(INTERNED_IID, iid) + protobuf::len_field_len(INTERNED_NAME, name.len());
            protobuf::write_len_header(&mut c, field, body);
            put_varint_field(&mut c, INTERNED_IID, iid);
            put_bytes_field(&mut c, INTERNED_NAME, name);
            drop(c);
            entries.push(e);
            iid
        };
        let mut stats = IdTable::new();
        for (id, name) in stat_metadata(fields)? {
            let as_value = cut_text(name, STR_CAP_BYTES);
            let name_iid = entry(INTERNED_ANNOTATION_NAMES, &as_value);
            // Key, length, then the text: with the annotation's name, 4 bytes more.
            let as_value_field = if as_value.len() < 0x80 - 4 {
                let mut f = Vec::new();
                put_bytes_field(&mut Cursor::new(&mut f), ANNOTATION_STRING, &as_value);
                f
            } else {
                Vec::new()
            };
            stats.insert(id, StatMeta { name_iid, as_value, as_value_field });
        }
        let mut events = Vec::new();
        for (id, n, meta_stats) in event_metadata(fields)? {
            events.push((id, entry(INTERNED_EVENT_NAMES, &cut_text(n, usize::MAX)), meta_stats));
        }
        let mut out = Self { events: IdTable::new(), unnamed: EventMeta::begin(0), stats, entries };
        for (id, name_iid, meta_stats) in events {
            let mut meta = EventMeta::begin(name_iid);
            let mut c = Cursor::new(&mut meta.head);
            for s in meta_stats {
                meta.dropped += out.push_stat(s, &mut c, meta.annotations_at, &mut meta.iids);
            }
            drop(c);
            out.events.insert(id, meta);
        }
        Ok(out)
    }

    /// The `InternedData` entries of the plane's names, by iid.
    pub fn entries(&self) -> &Entries {
        &self.entries
    }

    /// Appends one stat as an annotation unless the annotations since `body_start` would
    /// pass the cap; returns 1 when it was left out.
    #[inline(always)]
    fn push_stat(&self, stat: &[u8], out: &mut Cursor<'_>, body_start: usize, names: &mut impl NameUse) -> u32 {
        let mark = out.len();
        if self.render_stat(stat, out, names).is_err() || out.len() - body_start > ARGS_CAP_BYTES {
            out.truncate(mark);
            return 1;
        }
        0
    }

    /// One XStat as an annotation. The common shapes, a one-byte stat id with iid below
    /// 128 and then one of:
    /// - an unsigned or signed integer (`08 id 18|20 varint`): copied, not decoded, since
    ///   `DebugAnnotation.uint_value` and `int_value` have the numbers (3, 4) and varint
    ///   of `XStat.uint64_value` and `int64_value`: the annotation is the stat with the
    ///   name's iid in place of its id;
    /// - a reference to another stat's name (an `hlo_op`, `08 id 38 ref`): that name's
    ///   string field, encoded once (`StatMeta::as_value_field`).
    ///
    /// Anything else is read field by field.
    #[inline]
    fn render_stat(&self, stat: &[u8], out: &mut Cursor<'_>, names: &mut impl NameUse) -> Result<(), WireError> {
        const ANNOTATION: u8 = key(EVENT_ANNOTATIONS, protobuf::LEN) as u8;
        const NAME_IID: u8 = key(ANNOTATION_NAME_IID, protobuf::VARINT) as u8;
        if let &[0x08, id @ 0..0x80, k, ref value @ ..] = stat {
            if let Some(m) = self.stats.get(i64::from(id)).filter(|m| m.name_iid < 0x80) {
                let copied = match (k, value) {
                    (0x18 | 0x20, _) if is_one_varint(value) => Some(&stat[2..]),
                    (0x38, &[r @ 0..0x80]) => self.stats.get(i64::from(r)).map(|r| &r.as_value_field[..]).filter(|f| !f.is_empty()),
                    _ => None,
                };
                if let Some(body) = copied {
                    names.uses(m.name_iid, &self.entries);
                    // The name's key and iid, then the value's key and bytes: under 128.
                    out.put_fixed([ANNOTATION, 2 + body.len() as u8, NAME_IID, m.name_iid as u8], 4);
                    out.put(body);
                    return Ok(());
                }
            }
        }
        self.render_stat_general(stat, out, names)
    }

    #[inline(never)]
    fn render_stat_general(&self, stat: &[u8], out: &mut Cursor<'_>, names: &mut impl NameUse) -> Result<(), WireError> {
        let (id, value) = stat_fields(stat)?;
        // A stat without a value, or a double that is not finite, is null in the Chrome
        // JSON, which Perfetto keeps as no value: it is left out here.
        let Some(v) = value else { return Ok(()) };
        let bytes_text;
        let ref_text;
        let value = match v.number {
            STAT_DOUBLE if f64::from_bits(v.int).is_finite() => Value::Double(f64::from_bits(v.int)),
            STAT_UINT64 => Value::Uint(v.int),
            STAT_INT64 => Value::Int(v.int as i64),
            STAT_STR => Value::Raw(v.bytes),
            STAT_BYTES => {
                bytes_text = format!("<{} bytes>", v.bytes.len());
                Value::Text(bytes_text.as_bytes())
            }
            STAT_REF => match self.stats.get(v.int as i64) {
                Some(m) => Value::Text(&m.as_value),
                None => {
                    ref_text = format!("ref{}", v.int);
                    Value::Text(ref_text.as_bytes())
                }
            },
            _ => return Ok(()),
        };
        let inline_name;
        let name = match self.stats.get(id) {
            Some(m) => {
                names.uses(m.name_iid, &self.entries);
                Name::Iid(m.name_iid)
            }
            None => {
                inline_name = format!("stat{id}");
                Name::Inline(inline_name.as_bytes())
            }
        };
        put_annotation(out, name, value);
        Ok(())
    }

    /// Appends the TrackEvent fields of the begin of an event with metadata `meta` and
    /// XEvent fields `ev` (or only the run of them that holds its stats): its type, name
    /// and annotations, reporting the names they use.
    #[inline]
    pub fn write_begin(&self, meta: i64, ev: &[u8], out: &mut Cursor<'_>, names: &mut impl NameUse) {
        let m = self.events.get(meta).unwrap_or(&self.unnamed);
        for &iid in &m.iids {
            names.uses(iid, &self.entries);
        }
        let start = out.len();
        out.put(&m.head);
        let body = start + m.annotations_at;
        let mut dropped = m.dropped;
        if !common_event_stats(ev, |stat| dropped += self.push_stat(stat, out, body, names)) {
            // An unusual shape: every field the slow way.
            out.truncate(start + m.head.len());
            dropped = m.dropped;
            for stat in event_stats(ev) {
                dropped += self.push_stat(stat, out, body, names);
            }
        }
        if dropped > 0 {
            put_annotation(out, Name::Inline(b"distprof_args_dropped"), Value::Uint(u64::from(dropped)));
        }
    }
}

/// Whether `b` is exactly one varint below 2^63 (at most 9 bytes): the value bytes of a
/// stat that its annotation copies.
#[inline(always)]
fn is_one_varint(b: &[u8]) -> bool {
    match b.split_last() {
        Some((&last, rest)) => last < 0x80 && rest.len() < 9 && rest.iter().all(|&x| x >= 0x80),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::protobuf::fields_of;
    use distprof::xplane::{XPlane, XStat, XStatValue};
    use prost::Message;

    #[test]
    fn copied_stats_are_the_annotations_that_decoding_writes() {
        let mut p = XPlane::default();
        let corr = p.intern_stat("correlation_id");
        let op = p.intern_stat("hlo_op");
        let short = p.intern_stat("all-reduce.1");
        // The longest name a reference copies (123 bytes), one byte more, and a long one.
        let names: Vec<i64> = [123, 124, 300].iter().map(|&n| p.intern_stat(&"x".repeat(n))).collect();
        // Stat ids past 127 (two-byte varints), names past iid 127: left to the general way.
        let far: Vec<i64> = (0..140).map(|k| p.intern_stat(&format!("s{k}"))).collect();
        let bytes = p.encode_to_vec();
        let fields = fields_of(&bytes);
        let plane = ProtoPlane::new(&fields).unwrap();
        let unknown = 100_000;
        let mut stats = Vec::new();
        for id in [corr, far[0], far[139], unknown] {
            for v in [0, 1, 127, 128, 300, 1 << 40, (1 << 63) - 1, 1 << 63, u64::MAX] {
                stats.push(XStat { metadata_id: id, value: Some(XStatValue::Uint64Value(v)) });
                stats.push(XStat { metadata_id: id, value: Some(XStatValue::Int64Value(v as i64)) });
            }
            for r in [short, names[0], names[1], names[2], far[139], unknown] {
                stats.push(XStat { metadata_id: id, value: Some(XStatValue::RefValue(r as u64)) });
            }
            stats.push(XStat { metadata_id: op, value: Some(XStatValue::StrValue("fusion".into())) });
        }
        for stat in &stats {
            let stat = stat.encode_to_vec();
            let (mut copied, mut decoded) = (Vec::new(), Vec::new());
            let (mut copied_names, mut decoded_names) = (Vec::<u64>::new(), Vec::<u64>::new());
            plane.render_stat(&stat, &mut Cursor::new(&mut copied), &mut copied_names).unwrap();
            plane.render_stat_general(&stat, &mut Cursor::new(&mut decoded), &mut decoded_names).unwrap();
            assert_eq!(copied, decoded, "{stat:02x?}");
            assert_eq!(copied_names, decoded_names, "{stat:02x?}");
        }
        // The copy itself: correlation_id = 300 is the stat's bytes after its id, behind the
        // annotation's key, length and name.
        let iid = plane.stats.get(corr).unwrap().name_iid as u8;
        let stat = XStat { metadata_id: corr, value: Some(XStatValue::Uint64Value(300)) }.encode_to_vec();
        assert_eq!(stat, [0x08, corr as u8, 0x18, 0xac, 0x02]);
        let mut out = Vec::new();
        plane.render_stat(&stat, &mut Cursor::new(&mut out), &mut Vec::new()).unwrap();
        assert_eq!(out, [0x22, 5, 0x08, iid, 0x18, 0xac, 0x02]);
    }
}
