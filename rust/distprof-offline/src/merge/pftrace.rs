//! Streaming writer of Perfetto's own trace format (`merged.pftrace`): a `Trace` message,
//! that is a run of `TracePacket`s (field 1 of `Trace`), written straight from the rewrite
//! pass as the Chrome JSON is (`chrome`), into the same document layout (`chrome_doc`).
//!
//! Field numbers are those of Perfetto's published protos (`protos/perfetto/trace/`:
//! `trace_packet.proto`, `track_event/track_event.proto`, `track_descriptor.proto`,
//! `process_descriptor.proto`, `thread_descriptor.proto`, `debug_annotation.proto`,
//! `interned_data/interned_data.proto`); the encoder is written here, field by field.
//!
//! What a merged trace holds, kept within what Perfetto's trace processor of 2021 (v20.1,
//! `tests/perfetto`) reads:
//! - one packet sequence per node (`trusted_packet_sequence_id` = the node's first pid, the
//!   same in one merge and in a join of shards): its first packet clears the incremental
//!   state (so the names interned on it are the node's own) and sets the sequence's default
//!   clock to an incremental one;
//! - a process track per (node, plane), pid as in the Chrome JSON, and a thread track per
//!   XLine, tid its place in the plane (1, 2, ...), with the names of the Chrome JSON. Track
//!   uuids are 64-bit, the Cantor pairing of (pid, tid) ([`track_uuid`]): one-to-one, and a
//!   varint of 2 or 3 bytes for the pids and tids of most merges;
//! - every XEvent as a `TYPE_SLICE_BEGIN` and a `TYPE_SLICE_END` packet (v20.1 knows no
//!   complete event with a duration), the ends emitted innermost first so that slices that
//!   end and begin at the same ns nest as in the XLine. Times are ns on G (epoch), exact to
//!   the ns (the Chrome JSON's `ts` plus its `baseTimeNanoseconds`), each written as its
//!   distance from the packet before on the sequence's incremental clock
//!   ([`INCREMENTAL_CLOCK`]), which a `ClockSnapshot` sets to 0 = BOOTTIME 0 (the trace's
//!   clock) at the start of every line and before any time that goes back within one;
//! - the event's name interned (`InternedData.event_names`) once per plane, and its stats
//!   as debug annotations whose names are interned too (`debug_annotation_names`), with the
//!   Chrome JSON's limits (strings cut at [`STR_CAP_BYTES`], at most [`ARGS_CAP_BYTES`] of
//!   encoded annotations, the rest counted in `distprof_args_dropped`);
//! - flows (`--flows`) as `flow_ids` on the begins of the slices they join (`flows`): field
//!   36, the one v20.1 reads (`flow_ids_old` in today's proto, which reads it still; the
//!   newer fixed64 field 47 is unknown to v20.1). The trace processor begins a flow at the
//!   first slice of an id in time and steps it at each later one, a link from the slice
//!   before: what the Chrome JSON's `s`, `t`..., `f` draw. No slice carries
//!   `terminating_flow_ids` (42): which participant comes last is known only once every node
//!   is merged, and a flow left open adds no link.
//!
//! Not used, because v20.1 mishandles it: `TrackEventDefaults.track_uuid` per line. The
//! defaults can be set once per sequence only: v20.1 resolves no interned name of a packet
//! after the defaults changed (checked with its trace processor), so every event names its
//! track. And no packet sets `SEQ_NEEDS_INCREMENTAL_STATE`: the state is valid from the
//! sequence's first packet on, and v20.1 reads the packets as well without the flag.

use super::chrome_args::{common_event_stats, event_metadata, event_stats, stat_fields, stat_metadata, IdTable, ARGS_CAP_BYTES, STR_CAP_BYTES};
use super::cursor::Cursor;
use super::flows::{FlowCursor, NodeFlows};
use super::direct_io::{DirectWriter, Part, ALIGN};
use super::protobuf::{self, read_varint, varint_len, write_varint, Field, WireError};
use super::rewrite::RewriteError;
use super::xspace_fields::*;
use std::io;

// TracePacket.
const PACKET: u32 = 1; // Trace.packet
const TIMESTAMP: u32 = 8;
const SEQUENCE_ID: u32 = 10; // trusted_packet_sequence_id
const TRACK_EVENT: u32 = 11;
const INTERNED_DATA: u32 = 12;
const SEQUENCE_FLAGS: u32 = 13;
const CLOCK_SNAPSHOT: u32 = 6;
const TRACE_PACKET_DEFAULTS: u32 = 59;
const DEFAULTS_CLOCK_ID: u32 = 58; // TracePacketDefaults.timestamp_clock_id
const TRACK_DESCRIPTOR: u32 = 60;
// ClockSnapshot.clocks = 1: Clock { clock_id = 1, timestamp = 2, is_incremental = 3 }.
const SNAPSHOT_CLOCKS: u32 = 1;
const CLOCK_ID: u32 = 1;
const CLOCK_TIMESTAMP: u32 = 2;
const CLOCK_INCREMENTAL: u32 = 3;
/// The sequence-scoped clock (64-127 are) whose values are deltas from the packet before.
pub const INCREMENTAL_CLOCK: u64 = 64;
/// BOOTTIME, the clock the trace processor puts the trace on.
const BOOTTIME: u64 = 6;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
/// A field no TracePacket uses, whose bytes pad a fragment to a whole block (readers skip
/// unknown fields).
const PADDING: u32 = 2047;
// TrackDescriptor, ProcessDescriptor, ThreadDescriptor.
const TRACK_UUID: u32 = 1;
const TRACK_PROCESS: u32 = 3;
const TRACK_THREAD: u32 = 4;
const PROCESS_PID: u32 = 1;
const PROCESS_NAME: u32 = 6;
const THREAD_PID: u32 = 1;
const THREAD_TID: u32 = 2;
const THREAD_NAME: u32 = 5;
// TrackEvent.
const EVENT_ANNOTATIONS: u32 = 4;
const EVENT_TYPE: u32 = 9;
const EVENT_NAME_IID: u32 = 10;
const EVENT_TRACK_UUID: u32 = 11;
const EVENT_FLOW_IDS: u32 = 36;
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
// InternedData, EventName, DebugAnnotationName.
const INTERNED_EVENT_NAMES: u32 = 2;
const INTERNED_ANNOTATION_NAMES: u32 = 3;
const INTERNED_IID: u32 = 1;
const INTERNED_NAME: u32 = 2;
// DebugAnnotation.
const ANNOTATION_NAME_IID: u32 = 1;
const ANNOTATION_UINT: u32 = 3;
const ANNOTATION_INT: u32 = 4;
const ANNOTATION_DOUBLE: u32 = 5;
const ANNOTATION_STRING: u32 = 6;
const ANNOTATION_NAME: u32 = 10;

/// The key of field `number` with wire type `wire`.
const fn key(number: u32, wire: u8) -> u64 {
    ((number as u64) << 3) | wire as u64
}

/// The uuid of thread `tid` of process `pid`, or of the process itself with `tid` 0 (lines
/// count from 1): the Cantor pairing `(pid + tid)(pid + tid + 1)/2 + tid`, one-to-one, so
/// that no two tracks share a uuid, and small for small ids (a short varint in every
/// event). Wraps past 2^64, i.e. when pid + tid passes 2^32.
pub fn track_uuid(pid: u64, tid: u32) -> u64 {
    let s = pid.wrapping_add(u64::from(tid));
    (s.wrapping_mul(s.wrapping_add(1)) / 2).wrapping_add(u64::from(tid))
}

#[inline(always)]
fn put_varint_field(c: &mut Cursor<'_>, number: u32, v: u64) {
    write_varint(c, key(number, protobuf::VARINT));
    write_varint(c, v);
}

#[inline(always)]
fn varint_field_len(number: u32, v: u64) -> usize {
    varint_len(key(number, protobuf::VARINT)) + varint_len(v)
}

fn put_bytes_field(c: &mut Cursor<'_>, number: u32, b: &[u8]) {
    protobuf::write_len_header(c, number, b.len());
    c.put(b);
}

/// A string value of an annotation: `text` (lossy UTF-8), cut as the Chrome JSON cuts it.
fn cut_text(text: &[u8], cap: usize) -> Vec<u8> {
    let s = String::from_utf8_lossy(text);
    if s.len() <= cap {
        return s.into_owned().into_bytes();
    }
    let mut end = cap;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut v = s[..end].as_bytes().to_vec();
    v.extend_from_slice(b"...");
    v
}

/// The value of one debug annotation.
enum Value<'a> {
    Uint(u64),
    Int(i64),
    Double(f64),
    /// Valid UTF-8 within the cap.
    Text(&'a [u8]),
    /// Text to be made valid and cut.
    Raw(&'a [u8]),
}

/// The annotation's name: interned, or inline (a stat without metadata).
enum Name<'a> {
    Iid(u64),
    Inline(&'a [u8]),
}

/// Appends `DebugAnnotation` (field 4 of TrackEvent) `name` = `value`.
fn put_annotation(c: &mut Cursor<'_>, name: Name<'_>, value: Value<'_>) {
    let owned;
    let value = match value {
        Value::Raw(b) if b.len() <= STR_CAP_BYTES && std::str::from_utf8(b).is_ok() => Value::Text(b),
        Value::Raw(b) => {
            owned = cut_text(b, STR_CAP_BYTES);
            Value::Text(&owned)
        }
        v => v,
    };
    let name_len = match name {
        Name::Iid(iid) => varint_field_len(ANNOTATION_NAME_IID, iid),
        Name::Inline(n) => protobuf::len_field_len(ANNOTATION_NAME, n.len()),
    };
    let value_len = match value {
        Value::Uint(v) => varint_field_len(ANNOTATION_UINT, v),
        Value::Int(v) => varint_field_len(ANNOTATION_INT, v as u64),
        Value::Double(_) => 9,
        Value::Text(t) | Value::Raw(t) => protobuf::len_field_len(ANNOTATION_STRING, t.len()),
    };
    protobuf::write_len_header(c, EVENT_ANNOTATIONS, name_len + value_len);
    match name {
        Name::Iid(iid) => put_varint_field(c, ANNOTATION_NAME_IID, iid),
        Name::Inline(n) => put_bytes_field(c, ANNOTATION_NAME, n),
    }
    match value {
        Value::Uint(v) => put_varint_field(c, ANNOTATION_UINT, v),
        Value::Int(v) => put_varint_field(c, ANNOTATION_INT, v as u64),
        Value::Double(v) => {
            write_varint(c, key(ANNOTATION_DOUBLE, protobuf::FIXED64));
            c.put_fixed(v.to_le_bytes(), 8);
        }
        Value::Text(t) | Value::Raw(t) => put_bytes_field(c, ANNOTATION_STRING, t),
    }
}

struct EventMeta {
    name_iid: u64,
    /// The metadata's stats as annotations.
    annotations: Vec<u8>,
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
}

impl ProtoPlane {
    /// From the plane's fields other than lines; interns its names on `w`'s sequence.
    pub fn new(fields: &[Field<'_>], w: &mut ProtoWriter) -> Result<Self, RewriteError> {
        let mut interned = Vec::new();
        let mut c = Cursor::new(&mut interned);
        let entry = |c: &mut Cursor<'_>, field: u32, iid: u64, name: &[u8]| {
            let body = varint_field_len(INTERNED_IID, iid) + protobuf::len_field_len(INTERNED_NAME, name.len());
            protobuf::write_len_header(c, field, body);
            put_varint_field(c, INTERNED_IID, iid);
            put_bytes_field(c, INTERNED_NAME, name);
        };
        let mut stats = IdTable::new();
        for (id, name) in stat_metadata(fields)? {
            let as_value = cut_text(name, STR_CAP_BYTES);
            let name_iid = w.next_iid();
            entry(&mut c, INTERNED_ANNOTATION_NAMES, name_iid, &as_value);
            stats.insert(id, StatMeta { name_iid, as_value });
        }
        let mut out = Self { events: IdTable::new(), stats };
        for (id, n, meta_stats) in event_metadata(fields)? {
            let name_iid = w.next_iid();
            entry(&mut c, INTERNED_EVENT_NAMES, name_iid, &cut_text(n, usize::MAX));
            let mut annotations = Vec::new();
            let mut dropped = 0;
            for s in meta_stats {
                dropped += out.push_stat(s, &mut Cursor::new(&mut annotations), 0);
            }
            out.events.insert(id, EventMeta { name_iid, annotations, dropped });
        }
        drop(c);
        if !interned.is_empty() {
            w.packet(|c| put_bytes_field(c, INTERNED_DATA, &interned))?;
        }
        Ok(out)
    }

    /// The interned name of event metadata `id` (0, no name, when the plane lacks it).
    #[inline]
    fn name_iid(&self, id: i64) -> u64 {
        self.events.get(id).map_or(0, |m| m.name_iid)
    }

    /// Appends one stat as an annotation unless the annotations since `body_start` would
    /// pass the cap; returns 1 when it was left out.
    #[inline(always)]
    fn push_stat(&self, stat: &[u8], out: &mut Cursor<'_>, body_start: usize) -> u32 {
        let mark = out.len();
        if self.render_stat(stat, out).is_err() || out.len() - body_start > ARGS_CAP_BYTES {
            out.truncate(mark);
            return 1;
        }
        0
    }

    /// One XStat as an annotation: the common shape (an id, then one varint or string
    /// value) read directly, anything else field by field.
    #[inline]
    fn render_stat(&self, stat: &[u8], out: &mut Cursor<'_>) -> Result<(), WireError> {
        let mut pos = 1;
        if stat.first() == Some(&0x08) {
            if let (Some(id), Some(&k)) = (read_varint(stat, &mut pos), stat.get(pos)) {
                if let Some(m) = self.stats.get(id as i64) {
                    let mut p = pos + 1;
                    let name = Name::Iid(m.name_iid);
                    let value = match k {
                        0x18 => read_varint(stat, &mut p).map(Value::Uint),
                        0x20 => read_varint(stat, &mut p).map(|v| Value::Int(v as i64)),
                        _ => None,
                    };
                    if let Some(v) = value.filter(|_| p == stat.len()) {
                        put_annotation(out, name, v);
                        return Ok(());
                    }
                }
            }
        }
        self.render_stat_general(stat, out)
    }

    #[inline(never)]
    fn render_stat_general(&self, stat: &[u8], out: &mut Cursor<'_>) -> Result<(), WireError> {
        let (id, value) = stat_fields(stat)?;
        let inline_name;
        let name = match self.stats.get(id) {
            Some(m) => Name::Iid(m.name_iid),
            None => {
                inline_name = format!("stat{id}");
                Name::Inline(inline_name.as_bytes())
            }
        };
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
        put_annotation(out, name, value);
        Ok(())
    }

    /// Appends the annotations of an event with metadata `meta` and XEvent fields `ev`
    /// (or only the run of them that holds its stats).
    fn write_annotations(&self, meta: i64, ev: &[u8], out: &mut Cursor<'_>) {
        let body = out.len();
        let mut dropped = self.events.get(meta).map_or(0, |m| {
            out.put(&m.annotations);
            m.dropped
        });
        if !common_event_stats(ev, |stat| dropped += self.push_stat(stat, out, body)) {
            // An unusual shape: every field the slow way.
            out.truncate(body);
            dropped = self.events.get(meta).map_or(0, |m| {
                out.put(&m.annotations);
                m.dropped
            });
            for stat in event_stats(ev) {
                dropped += self.push_stat(stat, out, body);
            }
        }
        if dropped > 0 {
            put_annotation(out, Name::Inline(b"distprof_args_dropped"), Value::Uint(u64::from(dropped)));
        }
    }
}

/// Writes one fragment: the packets of one node's planes, on one packet sequence.
pub struct ProtoWriter {
    out: DirectWriter,
    /// Where the fragment starts in its file.
    start: u64,
    next_pid: u64,
    sequence: u64,
    /// The origin (epoch ns on G) that event times are relative to.
    base_ns: i64,
    next_iid: u64,
    /// The thread track being written.
    track: u64,
    /// The node's first pid: a pid less it is the plane's place among the node's event planes.
    first_pid: u64,
    /// The collectives' flow ids (`--flows`), and where the current track is among them:
    /// (plane, line).
    flows: Option<NodeFlows>,
    flow_cursor: FlowCursor,
    /// End (ns) of every open slice of the track, innermost last.
    open: Vec<i64>,
    /// Start of the last slice begun on the track, ns.
    last_start: i64,
    /// The incremental clock's value: the last time written, epoch ns.
    clock_ns: u64,
    /// The TrackEvent being encoded (its length precedes it).
    scratch: Vec<u8>,
    pub events: u64,
    /// Packets written.
    pub records: u64,
}

impl ProtoWriter {
    /// A fragment, written from `out`'s position on, on packet sequence `sequence` (> 0;
    /// distinct per fragment), whose first process gets pid `first_pid`; event times are
    /// relative to `base_ns`.
    pub fn new(out: DirectWriter, first_pid: u64, sequence: u32, base_ns: i64) -> Self {
        Self {
            start: out.pos(),
            out,
            next_pid: first_pid,
            sequence: u64::from(sequence.max(1)),
            base_ns,
            next_iid: 1,
            track: 0,
            first_pid,
            flows: None,
            flow_cursor: FlowCursor::default(),
            open: Vec::new(),
            last_start: i64::MIN,
            clock_ns: 0,
            scratch: Vec::new(),
            events: 0,
            records: 0,
        }
    }

    /// Puts the flow ids of `flows` on the begins of the node's collectives (`--flows`).
    pub fn with_flows(mut self, flows: NodeFlows) -> Self {
        self.flows = Some(flows);
        self
    }

    fn next_iid(&mut self) -> u64 {
        let iid = self.next_iid;
        self.next_iid += 1;
        iid
    }

    /// Appends one packet: the sequence id, then what `body` writes. The fragment's first
    /// packet clears the sequence's incremental state and sets its default clock.
    fn packet(&mut self, body: impl FnOnce(&mut Cursor<'_>)) -> io::Result<()> {
        if self.records == 0 {
            let mut defaults = Vec::new();
            put_varint_field(&mut Cursor::new(&mut defaults), DEFAULTS_CLOCK_ID, INCREMENTAL_CLOCK);
            self.packet_unchecked(|c| {
                put_varint_field(c, SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
                put_bytes_field(c, TRACE_PACKET_DEFAULTS, &defaults);
            })?;
        }
        self.packet_unchecked(body)
    }

    fn packet_unchecked(&mut self, body: impl FnOnce(&mut Cursor<'_>)) -> io::Result<()> {
        self.records += 1;
        let mut inner = std::mem::take(&mut self.scratch);
        inner.clear();
        let mut c = Cursor::new(&mut inner);
        put_varint_field(&mut c, SEQUENCE_ID, self.sequence);
        body(&mut c);
        drop(c);
        let mut c = Cursor::new(self.out.buf());
        protobuf::write_len_header(&mut c, PACKET, inner.len());
        c.put(&inner);
        drop(c);
        self.scratch = inner;
        self.out.maybe_flush()
    }

    /// Declares a process track (one node's plane) and returns its pid.
    pub fn begin_process(&mut self, name: &str) -> io::Result<u64> {
        let pid = self.next_pid;
        self.next_pid += 1;
        let mut process = Vec::new();
        let mut c = Cursor::new(&mut process);
        put_varint_field(&mut c, PROCESS_PID, pid);
        put_bytes_field(&mut c, PROCESS_NAME, name.as_bytes());
        drop(c);
        self.track_descriptor(track_uuid(pid, 0), TRACK_PROCESS, &process)?;
        Ok(pid)
    }

    /// A TrackDescriptor packet: `uuid`, and `descriptor` as its field `kind`.
    fn track_descriptor(&mut self, uuid: u64, kind: u32, descriptor: &[u8]) -> io::Result<()> {
        self.packet(|c| {
            protobuf::write_len_header(c, TRACK_DESCRIPTOR, varint_field_len(TRACK_UUID, uuid) + protobuf::len_field_len(kind, descriptor.len()));
            put_varint_field(c, TRACK_UUID, uuid);
            put_bytes_field(c, kind, descriptor);
        })
    }

    /// Declares thread track `tid` of process `pid` (a line) and makes it the track of the
    /// slices that follow, until [`Self::end_thread`].
    pub fn thread(&mut self, pid: u64, tid: u32, name: &str) -> io::Result<()> {
        self.end_thread()?;
        let uuid = track_uuid(pid, tid);
        let mut thread = Vec::new();
        let mut c = Cursor::new(&mut thread);
        put_varint_field(&mut c, THREAD_PID, pid);
        put_varint_field(&mut c, THREAD_TID, u64::from(tid));
        put_bytes_field(&mut c, THREAD_NAME, name.as_bytes());
        drop(c);
        self.track_descriptor(uuid, TRACK_THREAD, &thread)?;
        self.track = uuid;
        if let Some(f) = &self.flows {
            self.flow_cursor = f.line(u32::try_from(pid - self.first_pid).unwrap_or(u32::MAX), tid);
        }
        self.last_start = i64::MIN;
        self.reset_clock()
    }

    /// Sets the incremental clock to 0 (= BOOTTIME 0): the next time is written whole.
    fn reset_clock(&mut self) -> io::Result<()> {
        self.clock_ns = 0;
        let mut clocks = Vec::new();
        let mut c = Cursor::new(&mut clocks);
        for (id, incremental) in [(INCREMENTAL_CLOCK, true), (BOOTTIME, false)] {
            let len = varint_field_len(CLOCK_ID, id) + varint_field_len(CLOCK_TIMESTAMP, 0) + if incremental { varint_field_len(CLOCK_INCREMENTAL, 1) } else { 0 };
            protobuf::write_len_header(&mut c, SNAPSHOT_CLOCKS, len);
            put_varint_field(&mut c, CLOCK_ID, id);
            put_varint_field(&mut c, CLOCK_TIMESTAMP, 0);
            if incremental {
                put_varint_field(&mut c, CLOCK_INCREMENTAL, 1);
            }
        }
        drop(c);
        self.packet(|c| put_bytes_field(c, CLOCK_SNAPSHOT, &clocks))
    }

    /// The value of the timestamp field for time `rel_ns` from the origin: its distance
    /// from the time before (after a clock reset when it lies before it).
    #[inline(always)]
    fn delta(&mut self, rel_ns: i64) -> io::Result<u64> {
        let at = self.base_ns.saturating_add(rel_ns).max(0) as u64;
        if at < self.clock_ns {
            self.reset_clock()?;
        }
        let d = at - self.clock_ns;
        self.clock_ns = at;
        Ok(d)
    }

    /// Ends the slices still open on the current track.
    pub fn end_thread(&mut self) -> io::Result<()> {
        while let Some(end) = self.open.pop() {
            self.slice_end(end)?;
        }
        Ok(())
    }

    fn slice_end(&mut self, end_ns: i64) -> io::Result<()> {
        let track = self.track;
        let ts = self.delta(end_ns)?;
        self.packet(|c| {
            put_varint_field(c, TIMESTAMP, ts);
            let body = varint_field_len(EVENT_TYPE, TYPE_SLICE_END) + varint_field_len(EVENT_TRACK_UUID, track);
            protobuf::write_len_header(c, TRACK_EVENT, body);
            put_varint_field(c, EVENT_TYPE, TYPE_SLICE_END);
            put_varint_field(c, EVENT_TRACK_UUID, track);
        })
    }

    /// One slice on the current track: `ts_ps` from the origin, floored to ns as in the
    /// Chrome JSON, lasting `dur_ps` (floored), named and annotated from `plane` (event
    /// metadata `meta`, XEvent fields `ev`); `index` is its place among its line's events
    /// (from 0), by which its flow ids are found.
    #[inline]
    pub fn slice(&mut self, plane: &ProtoPlane, ts_ps: i64, dur_ps: i64, meta: i64, ev: &[u8], index: u32) -> io::Result<()> {
        self.events += 1;
        let start_ns = ts_ps.div_euclid(1000);
        let end_ns = start_ns.saturating_add(dur_ps.max(0) / 1000);
        if start_ns < self.last_start {
            // Out of order in its line: what is open cannot enclose it in the order written.
            self.end_thread()?;
        }
        self.last_start = start_ns;
        while let Some(&end) = self.open.last() {
            if end > start_ns {
                break;
            }
            self.open.pop();
            self.slice_end(end)?;
        }
        self.open.push(end_ns);
        // The TrackEvent, after room for its length (moved down when it is not 2 bytes).
        let track = self.track;
        let ts = self.delta(start_ns)?;
        let mut event = std::mem::take(&mut self.scratch);
        event.clear();
        let mut c = Cursor::new(&mut event);
        put_varint_field(&mut c, EVENT_TYPE, TYPE_SLICE_BEGIN);
        put_varint_field(&mut c, EVENT_TRACK_UUID, track);
        put_varint_field(&mut c, EVENT_NAME_IID, plane.name_iid(meta));
        plane.write_annotations(meta, ev, &mut c);
        if let Some(f) = &self.flows {
            for &(_, _, _, id) in f.of(&mut self.flow_cursor, index) {
                put_varint_field(&mut c, EVENT_FLOW_IDS, id);
            }
        }
        drop(c);
        self.records += 1;
        let seq = self.sequence;
        let packet_len = varint_field_len(SEQUENCE_ID, seq)
            + varint_field_len(TIMESTAMP, ts)
            + protobuf::len_field_len(TRACK_EVENT, event.len());
        let mut c = Cursor::new(self.out.buf());
        protobuf::write_len_header(&mut c, PACKET, packet_len);
        put_varint_field(&mut c, SEQUENCE_ID, seq);
        put_varint_field(&mut c, TIMESTAMP, ts);
        protobuf::write_len_header(&mut c, TRACK_EVENT, event.len());
        c.put(&event);
        drop(c);
        self.scratch = event;
        self.out.maybe_flush()
    }

    /// The next free pid.
    pub fn next_pid(&self) -> u64 {
        self.next_pid
    }

    /// Ends the fragment: pads it to a whole number of blocks with a packet that readers
    /// skip (the layout of `chrome_doc`) and writes it; returns its bytes in its region and
    /// what overflowed it.
    pub fn finish(mut self) -> io::Result<(Part, Option<Part>)> {
        self.end_thread()?;
        let len = (self.out.pos() - self.start) as usize;
        pad(self.out.buf(), len);
        self.out.finish_region(self.start)
    }
}

/// Appends to `out` packets that bring `len` bytes to a multiple of [`ALIGN`]: packets
/// holding field [`PADDING`] with zeros, each 5 to 120 bytes (a gap under 5 bytes takes a
/// block more).
pub fn pad(out: &mut Vec<u8>, len: usize) {
    let mut n = len.next_multiple_of(ALIGN) - len;
    if n == 0 {
        return;
    }
    if n < 5 {
        n += ALIGN;
    }
    while n > 0 {
        // One-byte lengths throughout: packet = key, length, then the payload: the
        // field's two-byte key, its length and its zeros.
        let size = if n <= 120 { n } else { 60 };
        n -= size;
        let payload = size - 2;
        let zeros = payload - 3;
        let mut c = Cursor::new(out);
        protobuf::write_len_header(&mut c, PACKET, payload);
        protobuf::write_len_header(&mut c, PADDING, zeros);
        drop(c);
        out.resize(out.len() + zeros, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::chrome_doc::ChromeDoc;
    use crate::merge::protobuf::Fields;
    use crate::merge::trace_out::TraceFormat;

    /// The packets of `bytes`, each as its fields (number, value: varint or bytes).
    fn packets(bytes: &[u8]) -> Vec<Vec<(u32, u64, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut f = Fields::new(bytes, 0);
        while let Some(p) = f.next_field().unwrap() {
            assert_eq!((p.number, p.wire_type), (PACKET, protobuf::LEN));
            let mut fields = Vec::new();
            let mut g = Fields::new(p.bytes, 0);
            while let Some(x) = g.next_field().unwrap() {
                fields.push((x.number, x.int, x.bytes.to_vec()));
            }
            out.push(fields);
        }
        out
    }

    fn get(fields: &[(u32, u64, Vec<u8>)], n: u32) -> Option<&(u32, u64, Vec<u8>)> {
        fields.iter().find(|f| f.0 == n)
    }

    #[test]
    fn padding_brings_every_length_to_whole_blocks_with_packets_of_one_unknown_field() {
        for len in (0..2 * ALIGN).step_by(7).chain([1, 2, 3, 4, 5, ALIGN - 1, ALIGN + 1]) {
            let mut out = vec![0u8; 0];
            pad(&mut out, len);
            assert_eq!((len + out.len()) % ALIGN, 0, "{len}");
            for p in packets(&out) {
                assert!(p.iter().all(|f| f.0 == PADDING), "{len}: {p:?}");
            }
        }
    }

    #[test]
    fn slices_nest_end_first_on_ties_with_times_as_deltas_on_one_sequence() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.pftrace");
        let doc = ChromeDoc::create(&path, Some(0), TraceFormat::Pftrace).unwrap();
        let region = doc.next_job(1, |_| 1_000).unwrap();
        let base_ns = 1_763_000_000_000_000_000;
        // Flow 7 on the first event of line 2 of the node's first event plane.
        let flows = NodeFlows::from_ids(vec![(0, 2, 0, 7)]);
        let mut w = ProtoWriter::new(region.writer, 5, 5, base_ns).with_flows(flows);
        let pid = w.begin_process("node 0 h /device:GPU:0").unwrap();
        let plane = ProtoPlane { events: IdTable::new(), stats: IdTable::new() };
        w.thread(pid, 1, "stream 1").unwrap();
        // A [0, 10 ns] holding C [0, 0]; B [10, 20 ns] starts where A ends; D starts
        // before B (out of order): the clock is reset and D written whole.
        for (event, (ts_ps, dur_ps)) in (0..).zip([(0, 10_999), (0, 0), (10_000, 10_000), (5_000, 1_000)]) {
            w.slice(&plane, ts_ps, dur_ps, 1, &[], event).unwrap();
        }
        w.thread(pid, 2, "stream 2").unwrap();
        w.slice(&plane, -3_000, 2_000, 1, &[], 0).unwrap();
        doc.fragment_done(region.order, w.finish().unwrap());
        doc.commit().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() % ALIGN, 0);
        let ps = packets(&bytes);
        // Every packet but the padding is on sequence 5; the first clears its state.
        assert!(ps.iter().filter(|p| p[0].0 != PADDING).all(|p| p[0] == (SEQUENCE_ID, 5, vec![])));
        assert_eq!(get(&ps[0], SEQUENCE_FLAGS).unwrap().1, SEQ_INCREMENTAL_STATE_CLEARED);
        // The events in file order: (type, absolute ns from base, track uuid).
        let mut clock = 0u64;
        let mut got = Vec::new();
        for p in &ps {
            if get(p, CLOCK_SNAPSHOT).is_some() {
                clock = 0;
            }
            let Some(te) = get(p, TRACK_EVENT) else { continue };
            clock += get(p, TIMESTAMP).unwrap().1;
            let mut ty = 0;
            let mut uuid = 0;
            let mut flows = Vec::new();
            let mut f = Fields::new(&te.2, 0);
            while let Some(x) = f.next_field().unwrap() {
                match x.number {
                    EVENT_TYPE => ty = x.int,
                    EVENT_TRACK_UUID => uuid = x.int,
                    EVENT_FLOW_IDS => flows.push(x.int),
                    _ => {}
                }
            }
            got.push((ty, clock as i64 - base_ns, uuid, flows));
        }
        let (t1, t2) = (track_uuid(pid, 1), track_uuid(pid, 2));
        let b = |ts, t| (TYPE_SLICE_BEGIN, ts, t, vec![]);
        let e = |ts, t| (TYPE_SLICE_END, ts, t, vec![]);
        assert_eq!(
            got,
            vec![b(0, t1), b(0, t1), e(0, t1), e(10, t1), b(10, t1), e(20, t1), b(5, t1), e(6, t1), (TYPE_SLICE_BEGIN, -3, t2, vec![7]), e(-1, t2)]
        );
        // Uuids are one-to-one over (pid, tid), the process's (tid 0) included.
        let mut seen = std::collections::HashSet::new();
        for pid in 0..200 {
            for tid in 0..200 {
                assert!(seen.insert(track_uuid(pid, tid)), "({pid}, {tid})");
            }
        }
    }
}
