//! One plane's names for the protobuf trace: its event and stat names as `InternedData`
//! entries (interned per line, `intern`), and its XStats rendered as debug annotations with
//! the Chrome JSON's limits (strings cut at [`STR_CAP_BYTES`], at most [`ARGS_CAP_BYTES`]
//! of encoded annotations, the rest counted in `distprof_args_dropped`).

use super::super::chrome_args::{common_event_stats, event_metadata, event_stats, stat_fields, stat_metadata, IdTable, ARGS_CAP_BYTES, STR_CAP_BYTES};
use super::super::cursor::Cursor;
use super::super::protobuf::{self, read_varint, Field, WireError};
use super::super::rewrite::RewriteError;
use super::super::xspace_fields::*;
use super::annotations::{cut_text, put_annotation, Name, Value};
use super::fields::*;
use super::intern::{Entries, NameUse};

struct EventMeta {
    name_iid: u64,
    /// The metadata's stats as annotations, and the names they use.
    annotations: Vec<u8>,
    annotation_iids: Vec<u64>,
    dropped: u32,
}

struct StatMeta {
    name_iid: u64,
    /// The name as the value of a reference stat (cut).
    as_value: Vec<u8>,
}

/// One plane's interned names and stat renderings for the protobuf trace.
pub struct ProtoPlane {
    events: IdTable<EventMeta>,
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
            stats.insert(id, StatMeta { name_iid, as_value });
        }
        let mut events = Vec::new();
        for (id, n, meta_stats) in event_metadata(fields)? {
            events.push((id, entry(INTERNED_EVENT_NAMES, &cut_text(n, usize::MAX)), meta_stats));
        }
        let mut out = Self { events: IdTable::new(), stats, entries };
        for (id, name_iid, meta_stats) in events {
            let mut annotations = Vec::new();
            let mut annotation_iids = Vec::new();
            let mut dropped = 0;
            for s in meta_stats {
                dropped += out.push_stat(s, &mut Cursor::new(&mut annotations), 0, &mut annotation_iids);
            }
            out.events.insert(id, EventMeta { name_iid, annotations, annotation_iids, dropped });
        }
        Ok(out)
    }

    /// The `InternedData` entries of the plane's names, by iid.
    pub fn entries(&self) -> &Entries {
        &self.entries
    }

    /// The interned name of event metadata `id` (0, no name, when the plane lacks it).
    #[inline]
    pub fn name_iid(&self, id: i64) -> u64 {
        self.events.get(id).map_or(0, |m| m.name_iid)
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

    /// One XStat as an annotation: the common shape (an id, then one integer or a
    /// reference) read directly, anything else field by field.
    #[inline]
    fn render_stat(&self, stat: &[u8], out: &mut Cursor<'_>, names: &mut impl NameUse) -> Result<(), WireError> {
        let mut pos = 1;
        if stat.first() == Some(&0x08) {
            if let (Some(id), Some(&k)) = (read_varint(stat, &mut pos), stat.get(pos)) {
                if let Some(m) = self.stats.get(id as i64) {
                    let mut p = pos + 1;
                    let value = match k {
                        0x18 => read_varint(stat, &mut p).map(Value::Uint),
                        0x20 => read_varint(stat, &mut p).map(|v| Value::Int(v as i64)),
                        // A reference to another stat's name (an `hlo_op`), when there is one.
                        0x38 => read_varint(stat, &mut p).and_then(|r| self.stats.get(r as i64)).map(|r| Value::Text(&r.as_value)),
                        _ => None,
                    };
                    if let Some(v) = value.filter(|_| p == stat.len()) {
                        names.uses(m.name_iid, &self.entries);
                        put_annotation(out, Name::Iid(m.name_iid), v);
                        return Ok(());
                    }
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

    /// Puts the precomputed annotations of event metadata `meta`; returns the stats they
    /// left out.
    fn put_meta_annotations(&self, meta: i64, out: &mut Cursor<'_>, names: &mut impl NameUse) -> u32 {
        let Some(m) = self.events.get(meta) else { return 0 };
        out.put(&m.annotations);
        for &iid in &m.annotation_iids {
            names.uses(iid, &self.entries);
        }
        m.dropped
    }

    /// Appends the annotations of an event with metadata `meta` and XEvent fields `ev`
    /// (or only the run of them that holds its stats), reporting the names they use.
    pub fn write_annotations(&self, meta: i64, ev: &[u8], out: &mut Cursor<'_>, names: &mut impl NameUse) {
        let body = out.len();
        let mut dropped = self.put_meta_annotations(meta, out, names);
        if !common_event_stats(ev, |stat| dropped += self.push_stat(stat, out, body, names)) {
            // An unusual shape: every field the slow way.
            out.truncate(body);
            dropped = self.put_meta_annotations(meta, out, names);
            for stat in event_stats(ev) {
                dropped += self.push_stat(stat, out, body, names);
            }
        }
        if dropped > 0 {
            put_annotation(out, Name::Inline(b"distprof_args_dropped"), Value::Uint(u64::from(dropped)));
        }
    }
}
