//! The few XPlane messages the plugin writes, wire-compatible with
//! `tsl/profiler/protobuf/xplane.pb` (field numbers from `xplane.proto`; `optional` scalars
//! have the same encoding as the members of `XStat.value`'s oneof). The bytes travel to the
//! C++ export hook, which merges them into XLA's `XSpace`.

use prost::Message;
use std::collections::HashMap;

#[derive(Clone, PartialEq, Message)]
pub struct XSpace {
    #[prost(message, repeated, tag = "1")]
    pub planes: Vec<XPlane>,
}

#[derive(Clone, PartialEq, Message)]
pub struct XPlane {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

#[derive(Clone, PartialEq, Message)]
pub struct XStatMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct XStat {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(uint64, optional, tag = "3")]
    pub uint64_value: Option<u64>,
    #[prost(string, optional, tag = "5")]
    pub str_value: Option<String>,
}

/// Plane ids only need to be unique within one XSpace; XLA's own planes use small
/// ids, so ours start far above them.
const PLANE_ID_BASE: i64 = 0x6470_0000;

pub struct PlaneBuilder(XPlane);

impl PlaneBuilder {
    pub fn new(node: u32, name: &str) -> Self {
        Self(XPlane { id: PLANE_ID_BASE + i64::from(node), name: name.to_string(), ..XPlane::default() })
    }

    fn metadata_id(&mut self, name: &str) -> i64 {
        // Id 0 is reserved by XLA's XPlaneBuilder; ids are dense from 1.
        let id = self.0.stat_metadata.len() as i64 + 1;
        self.0.stat_metadata.insert(id, XStatMetadata { id, name: name.to_string() });
        id
    }

    pub fn uint(&mut self, name: &str, value: u64) {
        let metadata_id = self.metadata_id(name);
        self.0.stats.push(XStat { metadata_id, uint64_value: Some(value), str_value: None });
    }

    pub fn str(&mut self, name: &str, value: &str) {
        let metadata_id = self.metadata_id(name);
        self.0.stats.push(XStat { metadata_id, uint64_value: None, str_value: Some(value.to_string()) });
    }

    pub fn finish(self) -> XPlane {
        self.0
    }
}

pub fn encode(space: &XSpace) -> Vec<u8> {
    space.encode_to_vec()
}
