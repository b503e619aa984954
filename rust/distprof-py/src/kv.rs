//! The host's key-value store seen from Rust: a Python object with `try_get(key) -> str |
//! None` and `set(key, value)` (python/distprof/_kv.py adapts JAX's client to that shape).
//!
//! Each call attaches to the interpreter (takes the GIL) for that one call only; the waiting
//! between calls happens in [`distprof::kv::Polling`] with the GIL released, so a node
//! waiting for late peers never stalls the training loop's thread.

use distprof::kv::{KvError, TryStore, MAX_VALUE_BYTES};
use pyo3::prelude::*;

pub struct PyStore {
    adapter: Py<PyAny>,
}

impl PyStore {
    pub fn new(adapter: Py<PyAny>) -> Self {
        Self { adapter }
    }
}

/// The exception as one line: its type and message, which is what the log line shows.
fn describe(py: Python<'_>, call: &str, err: &PyErr) -> KvError {
    let kind = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "exception".into());
    KvError::Unavailable(format!(
        "the Python key-value client's {call} raised {kind}: {}",
        err.value(py)
    ))
}

impl TryStore for PyStore {
    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        Python::attach(|py| {
            let value = self
                .adapter
                .call_method1(py, "try_get", (key,))
                .map_err(|e| describe(py, "try_get", &e))?;
            if value.is_none(py) {
                return Ok(None);
            }
            let text: String = value.extract(py).map_err(|e: PyErr| KvError::Malformed {
                key: key.to_string(),
                reason: format!("the client returned a non-string value: {}", e.value(py)),
            })?;
            if text.len() > MAX_VALUE_BYTES {
                return Err(KvError::TooLarge {
                    key: key.into(),
                    len: text.len(),
                    limit: MAX_VALUE_BYTES,
                });
            }
            Ok(Some(text))
        })
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        distprof::kv::check_value_size(key, value.len())?;
        Python::attach(|py| {
            self.adapter
                .call_method1(py, "set", (key, value))
                .map(|_| ())
                .map_err(|e| describe(py, "set", &e))
        })
    }
}
