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
