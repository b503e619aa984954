//! `distprof._native`: the XLA plugin's node driven from Python instead of XLA's hooks.
//!
//! The same [`Plugin`] state machine and [`distprof::plugin::backend::EngineBackend`] that
//! the C++ hooks drive inside XLA run here; Python calls the hooks at the same moments
//! (client created = `distprof.jax.start`, trace start / stop / export around
//! `jax.profiler`), so the plane appended to the trace comes from the plugin's own export.
//!
//! Rules of this boundary, as in `distprof-ffi`: every entry runs inside `catch_unwind`
//! (a panic turns distprof off with one log line), and failures are reported through the
//! plugin (one log line, profiling off), never raised here; the Python side reads
//! [`status`] and raises only when the user asked for `strict=True`.

mod kv;

use distprof::config::Config;
use distprof::distprof_plane::{DistprofPlaneData, DISTPROF_PLANE};
use distprof::kv::{KvStore, Polling};
use distprof::plugin::{NodeState, Plugin, STATE_UNINIT};
use distprof::xplane::XSpace;
use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::AtomicU8;
use std::sync::Mutex;

/// The node this process runs, from `start` until `stop`.
struct Current {
    /// Leaked on purpose, one per `start`: the plugin's threads hold `&'static` to it, and a
    /// `stop` followed by a new `start` needs a plugin whose state is not "off for good".
    plugin: &'static Plugin,
    node: u32,
    num_nodes: u32,
    tracing: bool,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// The configuration the next plugin's loader returns (the loader is a plain `fn`, so the
/// value `start` computed is handed over here, under the `CURRENT` lock).
static PENDING_CONFIG: Mutex<Option<Result<Config, String>>> = Mutex::new(None);

fn take_pending_config() -> Result<Config, String> {
    PENDING_CONFIG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_else(|| Err("internal error: no configuration was handed to the plugin".into()))
}

fn current() -> std::sync::MutexGuard<'static, Option<Current>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `body`; a panic turns the current plugin off with one log line naming `hook`.
fn guarded<R>(hook: &str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(panic) => {
            start_logging(&Config::default().log_filter);
            let reason = format!(
                "internal error (panic: {}); the program continues without distributed profiling",
                distprof::plugin::panic_message(panic.as_ref())
            );
            match current().as_ref() {
                Some(c) => c.plugin.disable(hook, &reason),
                None => tracing::error!("distprof: {hook}: {reason}"),
            }
            fallback
        }
    }
}

fn start_logging(filter: &str) {
    distprof::logging::init_logging(filter);
}

/// The effective configuration: defaults < `XLA_DIST_PROF_CONFIG` < `config` (JSON object
/// text, named `label` in messages) < environment variables, as inside XLA but for the
/// `config` layer. Starts logging with its filter.
fn load_config(label: &str, text: &str) -> Result<Config, String> {
    let env = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    match distprof::config::load_with_text(Path::new(label), text, &env) {
        Ok(effective) => {
            start_logging(&effective.config.log_filter);
            let vars = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
            for warning in distprof::config::unknown_env_warnings(vars) {
                tracing::warn!("{warning}");
            }
            Ok(effective.config)
        }
        Err(errors) => {
            start_logging(&Config::default().log_filter);
            Err(errors.one_line())
        }
    }
}

/// Hook 1: starts node `node` of `num_nodes` (rendezvous on a background thread through
/// `kv`, an object with `try_get` and `set`; None for a one-node run). `config_json` is the
/// `config=` layer as a JSON object, `label` names it in messages. Returns at once; a
/// previous node of this process is stopped first.
#[pyfunction]
#[pyo3(signature = (node, num_nodes, kv, config_json, label))]
fn start(node: u32, num_nodes: u32, kv: Option<Py<PyAny>>, config_json: &str, label: &str) {
    guarded("start", (), || {
        let mut cur = current();
        if let Some(previous) = cur.take() {
            previous.plugin.stop();
        }
        *PENDING_CONFIG.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(load_config(label, config_json));
        let state: &'static AtomicU8 = Box::leak(Box::new(AtomicU8::new(STATE_UNINIT)));
        let plugin: &'static Plugin = Box::leak(Box::new(Plugin::new(state, take_pending_config)));
        let store: Option<Box<dyn KvStore>> =
            kv.map(|adapter| Box::new(Polling(kv::PyStore::new(adapter))) as _);
        *cur = Some(Current {
            plugin,
            node,
            num_nodes,
            tracing: false,
        });
        drop(cur);
        plugin.on_client_created(node, num_nodes, store);
    })
}

/// Hook 2, start: snapshot sampling (host clock as tracer clock) and the probe engine.
#[pyfunction]
fn trace_start() {
    guarded("trace start", (), || {
        let mut cur = current();
        if let Some(c) = cur.as_mut() {
            c.plugin.on_trace_start(None);
            c.tracing = !c.plugin.is_off();
        }
    })
}

/// Hook 2, stop: tells the probe threads to stop; never waits.
#[pyfunction]
fn trace_stop() {
    guarded("trace stop", (), || {
        let mut cur = current();
        if let Some(c) = cur.as_mut() {
            c.plugin.on_trace_stop();
            c.tracing = false;
        }
    })
}

/// Waits (GIL released) up to `timeout_s` for the last trace's probe threads to end, so
/// their last window is in the model; true when they did. The wait is here rather than in
/// Python: `time.sleep` fails under libfaketime (the end-to-end test's skewed clocks).
#[pyfunction]
fn wait_probes_finished(py: Python<'_>, timeout_s: f64) -> bool {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout_s.max(0.0));
    py.detach(|| {
        guarded("trace stop", true, || loop {
            let plugin = current().as_ref().map(|c| c.plugin);
            if plugin.is_none_or(|p| p.probes_finished()) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        })
    })
}

/// The plugin's export: a serialized XSpace holding only the distprof plane(s), to append to
/// the profiler's `.xplane.pb` (appending merges repeated fields, as XLA's `MergeFromString`).
/// Empty when there is nothing to add.
#[pyfunction]
fn export(py: Python<'_>) -> Py<PyBytes> {
    let bytes = guarded("trace export", Vec::new(), || {
        let plugin = current().as_ref().map(|c| c.plugin);
        plugin.map(|p| p.on_trace_export()).unwrap_or_default()
    });
    PyBytes::new(py, &bytes).unbind()
}

/// Stops the node: threads are told to end, the store is let go. Idempotent.
#[pyfunction]
fn stop() {
    guarded("stop", (), || {
        if let Some(c) = current().take() {
            c.plugin.stop();
        }
    })
}

/// Where the node stands, as a JSON object (see python/distprof/__init__.py `status`).
#[pyfunction]
fn status() -> String {
    guarded("status", String::from(r#"{"state": "error"}"#), || {
        let cur = current();
        let Some(c) = cur.as_ref() else {
            return serde_json::json!({ "enabled": false, "state": "stopped" }).to_string();
        };
        let mut out = serde_json::json!({
            "enabled": !c.plugin.is_off(),
            "node": c.node,
            "num_nodes": c.num_nodes,
            "tracing": c.tracing && !c.plugin.is_off(),
            "error": c.plugin.disabled_reason(),
        });
        let node_state = c.plugin.node_state(c.node).map(|s| s.to_json());
        let state = match (&node_state, c.plugin.disabled_reason()) {
            (_, Some(_)) => "failed".to_string(),
            (None, None) => "disabled".to_string(),
            (Some(s), None) => s["status"].as_str().unwrap_or("unknown").to_string(),
        };
        if let (Some(serde_json::Value::Object(fields)), Some(map)) =
            (node_state, out.as_object_mut())
        {
            for (k, v) in fields {
                if k != "status" {
                    map.insert(k, v);
                }
            }
        }
        out["state"] = serde_json::Value::String(state);
        out.to_string()
    })
}

/// Blocks (GIL released) until the node's rendezvous ends or `timeout_s` passes; returns
/// the status. For tests and for programs that want probing from the first trace.
#[pyfunction]
fn wait_agreed(py: Python<'_>, timeout_s: f64) -> String {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout_s.max(0.0));
    py.detach(|| loop {
        let pending = current()
            .as_ref()
            .is_some_and(|c| matches!(c.plugin.node_state(c.node), Some(NodeState::Pending)));
        if !pending || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    });
    status()
}

/// The text of the JSON config file at `path` (the `config=` argument of
/// `distprof.jax.start`, named `arg` in the fix), read through the same guarded reader as
/// the CLI and the XLA plugin: a FIFO, device, socket, directory or a file over
/// `distprof.config.MAX_CONFIG_BYTES` is refused by its type and size before any read.
/// Raises `ValueError` naming the path, the reason and the fix.
#[pyfunction]
fn read_config(py: Python<'_>, path: std::path::PathBuf, arg: &str) -> PyResult<String> {
    py.detach(|| {
        distprof::config::read_config_file(&path, distprof::config::NamedBy::Arg(arg))
    })
    .map_err(|errors| PyValueError::new_err(errors.to_string()))
}

/// One log line through distprof's logger (stderr, same format as the plugin's).
#[pyfunction]
fn log_error(message: &str) {
    start_logging(&Config::default().log_filter);
    tracing::error!(target: "distprof::python", "{message}");
}

/// The distprof planes of a serialized XSpace (a whole `.xplane.pb` or an export), as a JSON
/// list of plane contents (`DistprofPlaneData`).
#[pyfunction]
fn distprof_planes(data: &[u8]) -> PyResult<String> {
    let space = XSpace::decode(data)
        .map_err(|e| PyValueError::new_err(format!("not a valid XSpace: {e}")))?;
    let planes = space
        .planes
        .iter()
        .filter(|p| p.name == DISTPROF_PLANE)
        .map(|p| {
            DistprofPlaneData::from_xplane(p).map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .collect::<PyResult<Vec<_>>>()?;
    serde_json::to_string(&planes).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The serialized distprof planes (`XPlane` messages, as they are in the file) of a
/// serialized XSpace, for tests that compare bytes.
#[pyfunction]
fn distprof_plane_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Vec<Py<PyBytes>>> {
    let space = XSpace::decode(data)
        .map_err(|e| PyValueError::new_err(format!("not a valid XSpace: {e}")))?;
    Ok(space
        .planes
        .iter()
        .filter(|p| p.name == DISTPROF_PLANE)
        .map(|p| PyBytes::new(py, &p.encode_to_vec()).unbind())
        .collect())
}

/// For each distprof plane of a serialized XSpace: its contents read back
/// (`DistprofPlaneData::from_xplane`) and exported again by the plugin's plane exporter
/// (`distprof_plane_bytes`), serialized: what the XLA hook appends for those inputs.
#[pyfunction]
fn plugin_plane_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Vec<Py<PyBytes>>> {
    let space = XSpace::decode(data)
        .map_err(|e| PyValueError::new_err(format!("not a valid XSpace: {e}")))?;
    space
        .planes
        .iter()
        .filter(|p| p.name == DISTPROF_PLANE)
        .map(|p| {
            let contents = DistprofPlaneData::from_xplane(p)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(PyBytes::new(
                py,
                &distprof::distprof_plane::distprof_plane_bytes(&contents),
            )
            .unbind())
        })
        .collect()
}

/// Runs the `distprof` command (rust/distprof-cli, the same code as the binary) with
/// `argv` (program name first) and gives its exit status; the console script
/// (`distprof._cli`) exits with it. Children the command spawns run `relaunch` (the
/// interpreter with `-m distprof`) followed by their subcommand. A panic is reported by the
/// panic hook on stderr, as in the binary, and gives 101, the binary's status for it.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>, relaunch: Vec<std::ffi::OsString>) -> u8 {
    py.detach(|| {
        std::panic::catch_unwind(|| distprof_cli::exit_status(distprof_cli::main_relaunched_as(relaunch, argv)))
            .unwrap_or(101)
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(trace_start, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stop, m)?)?;
    m.add_function(wrap_pyfunction!(wait_probes_finished, m)?)?;
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add_function(wrap_pyfunction!(stop, m)?)?;
    m.add_function(wrap_pyfunction!(status, m)?)?;
    m.add_function(wrap_pyfunction!(wait_agreed, m)?)?;
    m.add_function(wrap_pyfunction!(log_error, m)?)?;
    m.add_function(wrap_pyfunction!(read_config, m)?)?;
    m.add_function(wrap_pyfunction!(distprof_planes, m)?)?;
    m.add_function(wrap_pyfunction!(distprof_plane_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(plugin_plane_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    Ok(())
}
