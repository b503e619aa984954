//! Streaming writer of Perfetto's own trace format (`merged.pftrace`): a `Trace` message,
//! that is a run of `TracePacket`s (field 1 of `Trace`), written straight from the rewrite
//! pass as the Chrome JSON is (`chrome`), into the same document layout (`chrome_doc`).
//! The field numbers are those of Perfetto's published protos (`fields`); the encoder is
//! written here, field by field.
//!
//! What a merged trace holds, kept within what Perfetto's trace processor of 2021 (v20.1,
//! `tests/perfetto`) reads, in as few bytes as that format allows (a slice costs two
//! packets, since v20.1 knows no complete event with a duration in ns):
//! - one packet sequence ([`SEQUENCE`]) for the whole trace, started afresh at every line:
//!   the line's first packet clears the sequence's incremental state and sets its defaults,
//!   the incremental clock ([`INCREMENTAL_CLOCK`]) for every timestamp and the line's track
//!   for every event (`TrackEventDefaults.track_uuid`), so that no event names its track.
//!   The trace processor reads the state in file order, so lines never share it, whichever
//!   node or shard wrote them, and the id is the shortest varint. (A sequence per line would
//!   do the same with longer ids; v20.1 loses the names interned before defaults that
//!   change without a clear, which a clear per line avoids.)
//! - a process track per (node, plane), pid as in the Chrome JSON, and a thread track per
//!   XLine, tid its place in the plane (1, 2, ...), with the names of the Chrome JSON. Track
//!   uuids are 64-bit, the Cantor pairing of (pid, tid) ([`track_uuid`]), one-to-one;
//! - every XEvent as a `TYPE_SLICE_BEGIN` and a `TYPE_SLICE_END` packet, the ends emitted
//!   innermost first so that slices that end and begin at the same ns nest as in the XLine.
//!   Times are ns on G (epoch), exact to the ns (the Chrome JSON's `ts` plus its
//!   `baseTimeNanoseconds`), each written as its distance from the packet before on the
//!   incremental clock, which a `ClockSnapshot` sets to 0 = BOOTTIME 0 (the trace's clock)
//!   at the start of every line and before any time that goes back within one. The time
//!   is a packet's last field, so that the bytes that never change from one packet to the
//!   next stand together for the compressor (`slice_end`);
//! - the event's name and the names of its annotations interned on the line that uses
//!   them, in the packet of their first use (`intern`); its stats as debug annotations
//!   (`plane`). String values are written whole: v20.1 reads no interned string value
//!   (`DebugAnnotation.string_value_iid` is newer), checked with its trace processor;
//! - flows (`--flows`) as `flow_ids` on the begins of the slices they join (`flows`): field
//!   36, the one v20.1 reads (`flow_ids_old` in today's proto, which reads it still; the
//!   newer fixed64 field 47 is unknown to v20.1). The trace processor begins a flow at the
//!   first slice of an id in time and steps it at each later one, a link from the slice
//!   before: what the Chrome JSON's `s`, `t`..., `f` draw. No slice carries
//!   `terminating_flow_ids` (42): which participant comes last is known only once every node
//!   is merged, and a flow left open adds no link.
//!
//! No packet sets `SEQ_NEEDS_INCREMENTAL_STATE`: the state is valid from the line's first
//! packet on, and v20.1 reads the packets as well without the flag.
//!
//! By default the packets are then deflated in runs, each run one `compressed_packets`
//! packet (`compress`), by the worker that wrote them; `PftraceCompression::None` leaves
//! them plain. The state above is read in file order through the runs as without them.

mod annotations;
mod compress;
mod fields;
mod intern;
mod plane;

use super::cursor::Cursor;
use super::direct_io::{DirectWriter, Part, ALIGN};
use super::flows::{FlowCursor, NodeFlows};
use super::protobuf::{self, varint_len, write_varint};
use compress::PacketRuns;
use fields::*;
use intern::LineNames;
pub use compress::PftraceCompression;
pub use fields::INCREMENTAL_CLOCK;
pub use plane::ProtoPlane;
use std::io;

/// The uuid of thread `tid` of process `pid`, or of the process itself with `tid` 0 (lines
/// count from 1): the Cantor pairing `(pid + tid)(pid + tid + 1)/2 + tid`, one-to-one, so
/// that no two tracks share a uuid. Wraps past 2^64, i.e. when pid + tid passes 2^32.
pub fn track_uuid(pid: u64, tid: u32) -> u64 {
    let s = pid.wrapping_add(u64::from(tid));
    (s.wrapping_mul(s.wrapping_add(1)) / 2).wrapping_add(u64::from(tid))
}

/// The `trusted_packet_sequence_id` of every packet: one byte.
pub const SEQUENCE: u64 = 1;

/// Writes one fragment: the packets of one node's planes.
pub struct ProtoWriter {
    out: DirectWriter,
    /// Where the fragment starts in its file.
    start: u64,
    next_pid: u64,
    /// The origin (epoch ns on G) that event times are relative to.
    base_ns: i64,
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
    /// The names interned on the current line.
    names: LineNames,
    /// A packet being encoded (its length precedes it): the rare packets (`packet`).
    scratch: Vec<u8>,
    /// Where the packets gather in runs, to be deflated (`PftraceCompression::Deflate`)
    /// or written as they are.
    runs: PacketRuns,
    pub events: u64,
    /// Packets written.
    pub records: u64,
}

impl ProtoWriter {
    /// A fragment, written from `out`'s position on, whose first process gets pid
    /// `first_pid`; event times are relative to `base_ns`.
    pub fn new(out: DirectWriter, first_pid: u64, base_ns: i64) -> Self {
        Self {
            start: out.pos(),
            out,
            next_pid: first_pid,
            base_ns,
            first_pid,
            flows: None,
            flow_cursor: FlowCursor::default(),
            open: Vec::new(),
            last_start: i64::MIN,
            clock_ns: 0,
            names: LineNames::new(),
            scratch: Vec::new(),
            runs: PacketRuns::new(PftraceCompression::default()),
            events: 0,
            records: 0,
        }
    }

    /// Puts the flow ids of `flows` on the begins of the node's collectives (`--flows`).
    pub fn with_flows(mut self, flows: NodeFlows) -> Self {
        self.flows = Some(flows);
        self
    }

    /// Stores the packets as `compression` says (deflated by default).
    pub fn with_compression(mut self, compression: PftraceCompression) -> Self {
        self.runs = PacketRuns::new(compression);
        self
    }

    /// After each packet: once the run is full, moves it to the output (deflated or
    /// plain) and writes the output's chunk if there is one.
    #[inline(always)]
    fn packet_done(&mut self) -> io::Result<()> {
        if !self.runs.is_full() {
            return Ok(());
        }
        self.runs.flush(self.out.buf())?;
        self.out.maybe_flush()
    }

    /// Appends one packet: the sequence id, then what `body` writes.
    fn packet(&mut self, body: impl FnOnce(&mut Cursor<'_>)) -> io::Result<()> {
        self.records += 1;
        let mut inner = std::mem::take(&mut self.scratch);
        inner.clear();
        let mut c = Cursor::new(&mut inner);
        put_varint_field(&mut c, SEQUENCE_ID, SEQUENCE);
        body(&mut c);
        drop(c);
        let mut c = Cursor::new(self.runs.buf());
        protobuf::write_len_header(&mut c, PACKET, inner.len());
        c.put(&inner);
        drop(c);
        self.scratch = inner;
        self.packet_done()
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
        let descriptor = track_descriptor(track_uuid(pid, 0), TRACK_PROCESS, &process);
        self.packet(|c| c.put(&descriptor))?;
        Ok(pid)
    }

    /// Declares thread track `tid` of process `pid` (a line) and makes it the track of the
    /// slices that follow, until [`Self::end_thread`]: the packet that declares it starts
    /// the sequence afresh with the track and the incremental clock as its defaults.
    pub fn thread(&mut self, pid: u64, tid: u32, name: &str) -> io::Result<()> {
        self.end_thread()?;
        let uuid = track_uuid(pid, tid);
        let mut thread = Vec::new();
        let mut c = Cursor::new(&mut thread);
        put_varint_field(&mut c, THREAD_PID, pid);
        put_varint_field(&mut c, THREAD_TID, u64::from(tid));
        put_bytes_field(&mut c, THREAD_NAME, name.as_bytes());
        drop(c);
        let descriptor = track_descriptor(uuid, TRACK_THREAD, &thread);
        let mut defaults = Vec::new();
        let mut c = Cursor::new(&mut defaults);
        put_varint_field(&mut c, DEFAULTS_CLOCK_ID, INCREMENTAL_CLOCK);
        protobuf::write_len_header(&mut c, DEFAULTS_TRACK_EVENT, varint_field_len(DEFAULTS_TRACK_UUID, uuid));
        put_varint_field(&mut c, DEFAULTS_TRACK_UUID, uuid);
        drop(c);
        self.packet(|c| {
            put_varint_field(c, SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            put_bytes_field(c, TRACE_PACKET_DEFAULTS, &defaults);
            c.put(&descriptor);
        })?;
        self.names.next_line();
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

    /// The end of a slice: a time and a type; the track is the sequence's default. Written
    /// as two moves (the fixed bytes, then the time): an end is every other packet of the
    /// trace.
    #[inline]
    fn slice_end(&mut self, end_ns: i64) -> io::Result<()> {
        let ts = self.delta(end_ns)?;
        // Packet { sequence id, TrackEvent { type }, timestamp }: under 128 bytes, and every
        // key, the sequence id and the type one byte each. The time goes last (a reader
        // takes fields in any order): the bytes of consecutive packets that never change
        // then form one run, which the compressor takes as one match.
        let packet_len = 2 + 4 + 1 + varint_len(ts);
        const { assert!(key(TRACK_EVENT, protobuf::LEN) < 0x80 && SEQUENCE < 0x80 && TYPE_SLICE_END < 0x80) };
        self.records += 1;
        let mut c = Cursor::new(self.runs.buf());
        c.put_fixed(
            [
                key(PACKET, protobuf::LEN) as u8,
                packet_len as u8,
                key(SEQUENCE_ID, protobuf::VARINT) as u8,
                SEQUENCE as u8,
                key(TRACK_EVENT, protobuf::LEN) as u8,
                2,
                key(EVENT_TYPE, protobuf::VARINT) as u8,
                TYPE_SLICE_END as u8,
                key(TIMESTAMP, protobuf::VARINT) as u8,
            ],
            9,
        );
        write_varint(&mut c, ts);
        drop(c);
        self.packet_done()
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
        let ts = self.delta(start_ns)?;
        self.records += 1;
        // Packet { sequence id, TrackEvent { type, name, args, flows }, interned names,
        // timestamp }, written where it goes, each length one byte to be set once known
        // (`set_begin_lengths`): no copy of the event, no second pass for its length.
        let buf = self.runs.buf();
        let at = buf.len();
        let mut c = Cursor::new(buf);
        c.put_fixed([key(PACKET, protobuf::LEN) as u8, 0, key(SEQUENCE_ID, protobuf::VARINT) as u8, SEQUENCE as u8, key(TRACK_EVENT, protobuf::LEN) as u8, 0], BEGIN_HEADER);
        plane.write_begin(meta, ev, &mut c, &mut self.names);
        if let Some(f) = &self.flows {
            for &(_, _, _, id) in f.of(&mut self.flow_cursor, index) {
                put_varint_field(&mut c, EVENT_FLOW_IDS, id);
            }
        }
        let event_len = c.len() - at - BEGIN_HEADER;
        self.names.put_pending(&mut c);
        // The time last, as in an end (`slice_end`).
        c.push(key(TIMESTAMP, protobuf::VARINT) as u8);
        write_varint(&mut c, ts);
        drop(c);
        set_begin_lengths(self.runs.buf(), at, event_len);
        self.packet_done()
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
        self.runs.flush(self.out.buf())?;
        let len = (self.out.pos() - self.start) as usize;
        pad(self.out.buf(), len);
        self.out.finish_region(self.start)
    }
}

/// The bytes of a begin before its TrackEvent's fields: the packet's key and length, the
/// sequence id, the TrackEvent's key and length.
const BEGIN_HEADER: usize = 6;

/// Sets the lengths of the begin written from `at` on, whose TrackEvent holds `event_len`
/// bytes: in the one byte left for each, or, for a packet of 128 bytes or more (many or
/// long args, names interned), by writing the header again with the varints it needs.
#[inline(always)]
fn set_begin_lengths(buf: &mut Vec<u8>, at: usize, event_len: usize) {
    let packet_len = buf.len() - at - 2;
    if packet_len < 0x80 {
        buf[at + 1] = packet_len as u8;
        buf[at + BEGIN_HEADER - 1] = event_len as u8;
    } else {
        set_long_begin_lengths(buf, at, event_len);
    }
}

#[cold]
#[inline(never)]
fn set_long_begin_lengths(buf: &mut Vec<u8>, at: usize, event_len: usize) {
    let rest = buf.len() - at - BEGIN_HEADER;
    let inner = varint_field_len(SEQUENCE_ID, SEQUENCE) + protobuf::len_field_len(TRACK_EVENT, event_len) + (rest - event_len);
    let mut header = Vec::new();
    let mut c = Cursor::new(&mut header);
    protobuf::write_len_header(&mut c, PACKET, inner);
    put_varint_field(&mut c, SEQUENCE_ID, SEQUENCE);
    protobuf::write_len_header(&mut c, TRACK_EVENT, event_len);
    drop(c);
    buf.splice(at..at + BEGIN_HEADER, header);
}

/// A TrackDescriptor field: `uuid`, and `descriptor` as its field `kind`.
fn track_descriptor(uuid: u64, kind: u32, descriptor: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut c = Cursor::new(&mut out);
    protobuf::write_len_header(&mut c, TRACK_DESCRIPTOR, varint_field_len(TRACK_UUID, uuid) + protobuf::len_field_len(kind, descriptor.len()));
    put_varint_field(&mut c, TRACK_UUID, uuid);
    put_bytes_field(&mut c, kind, descriptor);
    drop(c);
    out
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
mod tests;
