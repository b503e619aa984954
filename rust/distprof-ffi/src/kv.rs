//! `distprof::kv::KvStore` over a C++ key-value store (XLA's, through `cc_hooks/kv_adapter.cc`).

use crate::ffi::KvHandle;
use distprof::kv::{KvError, KvStore, MAX_VALUE_BYTES};
use std::time::Duration;

// Mirrors cc_hooks/bridge_types.h.
const KV_OK: i32 = 0;
const KV_NOT_FOUND: i32 = 1;

pub struct CxxKv(cxx::UniquePtr<KvHandle>);

impl CxxKv {
    /// `handle` must not be null.
    pub fn new(handle: cxx::UniquePtr<KvHandle>) -> Self {
        Self(handle)
    }

    fn handle(&self) -> Result<&KvHandle, KvError> {
        self.0.as_ref().ok_or_else(|| KvError::Unavailable("null key-value store handle".into()))
    }
}

fn into_value(key: &str, bytes: Vec<u8>) -> Result<String, KvError> {
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(KvError::TooLarge { key: key.into(), len: bytes.len(), limit: MAX_VALUE_BYTES });
    }
    String::from_utf8(bytes)
        .map_err(|e| KvError::Malformed { key: key.into(), reason: format!("not UTF-8: {e}") })
}

fn unavailable(error: Vec<u8>) -> KvError {
    KvError::Unavailable(String::from_utf8_lossy(&error).into_owned())
}

impl KvStore for CxxKv {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let (mut value, mut error) = (Vec::new(), Vec::new());
        match self.handle()?.get(key, timeout_ms, &mut value, &mut error) {
            KV_OK => into_value(key, value),
            KV_NOT_FOUND => Err(KvError::Timeout { key: key.into(), timeout_ms }),
            _ => Err(unavailable(error)),
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        let (mut value, mut error) = (Vec::new(), Vec::new());
        match self.handle()?.try_get(key, &mut value, &mut error) {
            KV_OK => into_value(key, value).map(Some),
            KV_NOT_FOUND => Ok(None),
            _ => Err(unavailable(error)),
        }
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        let mut error = Vec::new();
        match self.handle()?.set(key, value, &mut error) {
            KV_OK => Ok(()),
            _ => Err(unavailable(error)),
        }
    }
}
