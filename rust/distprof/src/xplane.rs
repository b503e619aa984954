//! The XSpace/XPlane protobuf messages (package `tensorflow.profiler`), written by hand.
//!
//! No crate ships `xplane.proto`, so the seven messages are declared here with the field
//! numbers of `tsl/profiler/protobuf/xplane.proto`. Unknown
//! fields are dropped on decode; every field XProf reads is declared.

use std::collections::BTreeMap;

/// One host's (one process's) profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XSpace {
    #[prost(message, repeated, tag = "1")]
    pub planes: Vec<XPlane>,
    #[prost(string, repeated, tag = "2")]
    pub errors: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub warnings: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub hostnames: Vec<String>,
}

/// One source of events (host threads, one device, metadata).
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlane {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<XLine>,
    // Ordered maps: the same plane always encodes to the same bytes (a hash map's order
    // differs between instances), so outputs are reproducible and comparable byte for byte.
    #[prost(btree_map = "int64, message", tag = "4")]
    pub event_metadata: BTreeMap<i64, XEventMetadata>,
    #[prost(btree_map = "int64, message", tag = "5")]
    pub stat_metadata: BTreeMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

/// One timeline (a thread, a stream). Event start = `timestamp_ns` + `offset_ps` / 1000.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XLine {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "10")]
    pub display_id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "11")]
    pub display_name: String,
    #[prost(int64, tag = "3")]
    pub timestamp_ns: i64,
    #[prost(int64, tag = "9")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub events: Vec<XEvent>,
}

/// `offset_ps` or `num_occurrences` (aggregated events only).
#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub enum XEventData {
    #[prost(int64, tag = "2")]
    OffsetPs(i64),
    #[prost(int64, tag = "5")]
    NumOccurrences(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEvent {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(oneof = "XEventData", tags = "2, 5")]
    pub data: Option<XEventData>,
    #[prost(int64, tag = "3")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub stats: Vec<XStat>,
}

impl XEvent {
    /// Offset from the line's `timestamp_ns`; aggregated events have none and read as 0.
    pub fn offset_ps(&self) -> i64 {
        match self.data {
            Some(XEventData::OffsetPs(v)) => v,
            _ => 0,
        }
    }
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum XStatValue {
    #[prost(double, tag = "2")]
    DoubleValue(f64),
    #[prost(uint64, tag = "3")]
    Uint64Value(u64),
    #[prost(int64, tag = "4")]
    Int64Value(i64),
    #[prost(string, tag = "5")]
    StrValue(String),
    #[prost(bytes, tag = "6")]
    BytesValue(Vec<u8>),
    /// Id of an `XStatMetadata` whose `name` is the string value.
    #[prost(uint64, tag = "7")]
    RefValue(u64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStat {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(oneof = "XStatValue", tags = "2, 3, 4, 5, 6, 7")]
    pub value: Option<XStatValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEventMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub display_name: String,
    #[prost(bytes = "vec", tag = "3")]
    pub metadata: Vec<u8>,
    #[prost(message, repeated, tag = "5")]
    pub stats: Vec<XStat>,
    #[prost(int64, repeated, tag = "6")]
    pub child_id: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStatMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub description: String,
}

/// Well-known plane names (`xla/tsl/profiler/utils/xplane_schema.cc`).
pub const HOST_THREADS_PLANE: &str = "/host:CPU";
pub const TASK_ENV_PLANE: &str = "Task Environment";
pub const GPU_PLANE_PREFIX: &str = "/device:GPU:";
/// `Task Environment` stats holding the profile start/stop in epoch ns; line timestamps on
/// disk are relative to `profile_start_time`.
pub const PROFILE_START_STAT: &str = "profile_start_time";
pub const PROFILE_STOP_STAT: &str = "profile_stop_time";

impl XPlane {
    /// Id of the stat metadata named `name`, if the plane declares one.
    pub fn stat_id(&self, name: &str) -> Option<i64> {
        self.stat_metadata
            .values()
            .find(|m| m.name == name)
            .map(|m| m.id)
    }

    /// Plane-level stat `name` as an integer, if present.
    pub fn stat_u64(&self, name: &str) -> Option<u64> {
        let id = self.stat_id(name)?;
        self.stats
            .iter()
            .find(|s| s.metadata_id == id)
            .and_then(|s| match s.value {
                Some(XStatValue::Uint64Value(v)) => Some(v),
                Some(XStatValue::Int64Value(v)) => u64::try_from(v).ok(),
                _ => None,
            })
    }

    /// Returns the id of stat metadata `name`, adding it when missing.
    pub fn intern_stat(&mut self, name: &str) -> i64 {
        if let Some(id) = self.stat_id(name) {
            return id;
        }
        let id = self.stat_metadata.keys().copied().max().unwrap_or(0) + 1;
        self.stat_metadata.insert(
            id,
            XStatMetadata {
                id,
                name: name.to_string(),
                description: String::new(),
            },
        );
        id
    }

    /// Returns the id of event metadata `name`, adding it when missing.
    pub fn intern_event(&mut self, name: &str) -> i64 {
        if let Some(m) = self.event_metadata.values().find(|m| m.name == name) {
            return m.id;
        }
        let id = self.event_metadata.keys().copied().max().unwrap_or(0) + 1;
        self.event_metadata.insert(
            id,
            XEventMetadata {
                id,
                name: name.to_string(),
                ..Default::default()
            },
        );
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn round_trips_every_field() {
        let mut plane = XPlane {
            id: 7,
            name: "/device:GPU:0".into(),
            ..Default::default()
        };
        let sid = plane.intern_stat("correlation_id");
        let eid = plane.intern_event("kernel");
        plane.lines.push(XLine {
            id: 3,
            display_id: 4,
            name: "stream".into(),
            display_name: "Stream #3".into(),
            timestamp_ns: -12,
            duration_ps: 99,
            events: vec![
                XEvent {
                    metadata_id: eid,
                    data: Some(XEventData::OffsetPs(1_500)),
                    duration_ps: 2_000,
                    stats: vec![XStat {
                        metadata_id: sid,
                        value: Some(XStatValue::RefValue(sid as u64)),
                    }],
                },
                XEvent {
                    metadata_id: eid,
                    data: Some(XEventData::NumOccurrences(5)),
                    duration_ps: 1,
                    stats: vec![],
                },
            ],
        });
        plane.stats.push(XStat {
            metadata_id: sid,
            value: Some(XStatValue::DoubleValue(-0.5)),
        });
        let space = XSpace {
            planes: vec![plane],
            errors: vec!["e".into()],
            warnings: vec!["w".into()],
            hostnames: vec!["h".into()],
        };
        let bytes = space.encode_to_vec();
        let back = XSpace::decode(bytes.as_slice()).expect("decode");
        assert_eq!(back, space);
        assert_eq!(back.planes[0].lines[0].events[0].offset_ps(), 1_500);
        assert_eq!(back.planes[0].lines[0].events[1].offset_ps(), 0);
    }
}
