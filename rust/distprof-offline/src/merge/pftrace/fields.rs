//! The field numbers of Perfetto's trace protos that `merged.pftrace` uses, as published in
//! `protos/perfetto/trace/` (`trace_packet.proto`, `trace_packet_defaults.proto`,
//! `clock_snapshot.proto`, `track_event/track_event.proto`, `track_descriptor.proto`,
//! `process_descriptor.proto`, `thread_descriptor.proto`, `debug_annotation.proto`,
//! `interned_data/interned_data.proto`), and the few ways this encoder writes a field.

use super::super::cursor::Cursor;
use super::super::protobuf::{self, varint_len, write_varint};

// Trace, TracePacket.
pub const PACKET: u32 = 1; // Trace.packet
pub const CLOCK_SNAPSHOT: u32 = 6;
pub const TIMESTAMP: u32 = 8;
pub const SEQUENCE_ID: u32 = 10; // trusted_packet_sequence_id
pub const TRACK_EVENT: u32 = 11;
pub const INTERNED_DATA: u32 = 12;
pub const SEQUENCE_FLAGS: u32 = 13;
/// A zlib stream of `Trace.packet` fields (`compress`).
pub const COMPRESSED_PACKETS: u32 = 50;
pub const TRACE_PACKET_DEFAULTS: u32 = 59;
pub const TRACK_DESCRIPTOR: u32 = 60;
pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
/// A field no TracePacket uses, whose bytes pad a fragment to a whole block (readers skip
/// unknown fields).
pub const PADDING: u32 = 2047;
// TracePacketDefaults, TrackEventDefaults.
pub const DEFAULTS_CLOCK_ID: u32 = 58; // TracePacketDefaults.timestamp_clock_id
pub const DEFAULTS_TRACK_EVENT: u32 = 11; // TracePacketDefaults.track_event_defaults
pub const DEFAULTS_TRACK_UUID: u32 = 11; // TrackEventDefaults.track_uuid
// ClockSnapshot.clocks = 1: Clock { clock_id = 1, timestamp = 2, is_incremental = 3 }.
pub const SNAPSHOT_CLOCKS: u32 = 1;
pub const CLOCK_ID: u32 = 1;
pub const CLOCK_TIMESTAMP: u32 = 2;
pub const CLOCK_INCREMENTAL: u32 = 3;
/// The sequence-scoped clock (64-127 are) whose values are deltas from the packet before.
pub const INCREMENTAL_CLOCK: u64 = 64;
/// BOOTTIME, the clock the trace processor puts the trace on.
pub const BOOTTIME: u64 = 6;
// TrackDescriptor, ProcessDescriptor, ThreadDescriptor.
pub const TRACK_UUID: u32 = 1;
pub const TRACK_PROCESS: u32 = 3;
pub const TRACK_THREAD: u32 = 4;
pub const PROCESS_PID: u32 = 1;
pub const PROCESS_NAME: u32 = 6;
pub const THREAD_PID: u32 = 1;
pub const THREAD_TID: u32 = 2;
pub const THREAD_NAME: u32 = 5;
// TrackEvent.
pub const EVENT_ANNOTATIONS: u32 = 4;
pub const EVENT_TYPE: u32 = 9;
pub const EVENT_NAME_IID: u32 = 10;
/// Never written: every event is on its sequence's default track (`DEFAULTS_TRACK_UUID`).
#[cfg(test)]
pub const EVENT_TRACK_UUID: u32 = 11;
pub const EVENT_FLOW_IDS: u32 = 36;
pub const TYPE_SLICE_BEGIN: u64 = 1;
pub const TYPE_SLICE_END: u64 = 2;
// InternedData, EventName, DebugAnnotationName.
pub const INTERNED_EVENT_NAMES: u32 = 2;
pub const INTERNED_ANNOTATION_NAMES: u32 = 3;
pub const INTERNED_IID: u32 = 1;
pub const INTERNED_NAME: u32 = 2;
// DebugAnnotation.
pub const ANNOTATION_NAME_IID: u32 = 1;
pub const ANNOTATION_UINT: u32 = 3;
pub const ANNOTATION_INT: u32 = 4;
pub const ANNOTATION_DOUBLE: u32 = 5;
pub const ANNOTATION_STRING: u32 = 6;
pub const ANNOTATION_NAME: u32 = 10;

/// The key of field `number` with wire type `wire`.
pub const fn key(number: u32, wire: u8) -> u64 {
    ((number as u64) << 3) | wire as u64
}

#[inline(always)]
pub fn put_varint_field(c: &mut Cursor<'_>, number: u32, v: u64) {
    write_varint(c, key(number, protobuf::VARINT));
    write_varint(c, v);
}

#[inline(always)]
pub fn varint_field_len(number: u32, v: u64) -> usize {
    varint_len(key(number, protobuf::VARINT)) + varint_len(v)
}

pub fn put_bytes_field(c: &mut Cursor<'_>, number: u32, b: &[u8]) {
    protobuf::write_len_header(c, number, b.len());
    c.put(b);
}
