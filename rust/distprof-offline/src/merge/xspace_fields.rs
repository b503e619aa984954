//! Field numbers of tsl/profiler/protobuf/xplane.proto that merge reads or rewrites
//! without decoding messages (the streaming rewrite, docs/merge.md).


// Field numbers of xplane.proto.
pub const SPACE_PLANES: u32 = 1;
pub const SPACE_HOSTNAMES: u32 = 4;
pub const PLANE_ID: u32 = 1;
pub const PLANE_NAME: u32 = 2;
pub const PLANE_LINES: u32 = 3;
pub const PLANE_EVENT_METADATA: u32 = 4;
pub const LINE_ID: u32 = 1;
pub const LINE_NAME: u32 = 2;
pub const LINE_DISPLAY_NAME: u32 = 11;
pub const LINE_TIMESTAMP: u32 = 3;
pub const LINE_DURATION: u32 = 9;
pub const LINE_EVENTS: u32 = 4;
pub const EVENT_OFFSET: u32 = 2;
pub const EVENT_DURATION: u32 = 3;
pub const EVENT_NUM_OCCURRENCES: u32 = 5;
pub const PLANE_STAT_METADATA: u32 = 5;
pub const EVENT_METADATA_ID: u32 = 1;
pub const EVENT_STATS: u32 = 4;
pub const EVENT_META_NAME: u32 = 2;
pub const EVENT_META_DISPLAY_NAME: u32 = 4;
pub const EVENT_META_STATS: u32 = 5;
pub const STAT_META_NAME: u32 = 2;
pub const STAT_METADATA_ID: u32 = 1;
pub const STAT_DOUBLE: u32 = 2;
pub const STAT_UINT64: u32 = 3;
pub const STAT_INT64: u32 = 4;
pub const STAT_STR: u32 = 5;
pub const STAT_BYTES: u32 = 6;
pub const STAT_REF: u32 = 7;
/// Entries of a protobuf map: key and value.
pub const MAP_KEY: u32 = 1;
pub const MAP_VALUE: u32 = 2;
