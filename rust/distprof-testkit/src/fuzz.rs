//! Entry points for fuzzing: each takes arbitrary bytes, drives one parser of untrusted
//! input exactly as distprof does, and checks what the parser promises. They never panic
//! on any input; a panic here is a bug (libFuzzer reports it as a crash).
//!
//! Two callers share them, so that one definition of "the target" exists: the libFuzzer
//! targets in `fuzz/fuzz_targets/` (`cargo fuzz run <target>`, docs/fuzzing.md), and the
//! seeded property tests below, which replay the committed corpus plus mutations of it
//! under `cargo nextest` without libFuzzer.

use distprof::config::{self, fields, Config};
use distprof::kv::tcp::frame::{self, FrameError};
use distprof::rendezvous::values::{self, Announcement, Echo, Join};
use distprof::topology::ProbeGraph;
use distprof_offline::report::{self, ReportInput};
use std::path::Path;

/// The entry point of one target: any bytes in, a panic only on a bug.
pub type Target = fn(&[u8]);

/// Every fuzz target by name (the names of `fuzz/fuzz_targets/*.rs` and of the corpus
/// directories `fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("config_file", config_file),
    ("config_env", config_env),
    ("kv_frame", kv_frame),
    ("rendezvous_values", rendezvous_values),
    ("report_input", report_input),
    ("xspace", xspace),
    ("wire_decode", wire_decode),
    ("jsonl", jsonl),
];

/// The JSON configuration file (`XLA_DIST_PROF_CONFIG`, `distprof config check`).
/// Bytes that are not UTF-8 are read lossily: the file reader itself refuses them earlier
/// with an I/O error, so the parser only ever sees text.
pub fn config_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match config::check_text(Path::new("fuzz.json"), &text) {
        Ok(config) => accepted_config_round_trips(&config),
        Err(errors) => {
            // Every refusal says what and how to fix it.
            assert!(!errors.is_empty());
            for e in errors.iter() {
                assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// The environment layer: each line is one variable, its first byte picking which of the
/// configuration's variables (modulo their count), the rest its value. The config-file
/// variable is never set (it would make the target read arbitrary paths).
pub fn config_env(data: &[u8]) {
    let vars: Vec<&str> = fields::FIELDS.iter().map(|f| f.env).collect();
    let mut env: Vec<(&str, String)> = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Some((&pick, value)) = line.split_first() else {
            continue;
        };
        let var = vars[pick as usize % vars.len()];
        // A variable set twice keeps its last value, as in a real environment.
        env.retain(|(v, _)| *v != var);
        env.push((var, String::from_utf8_lossy(value).into_owned()));
    }
    let lookup = |name: &str| {
        env.iter()
            .find(|(v, _)| *v == name)
            .map(|(_, value)| value.clone())
    };
    match config::load(&lookup) {
        Ok(effective) => {
            // Every field has a source, and a variable that was set is the source of its field.
            assert_eq!(effective.sources.len(), fields::FIELDS.len());
            for (var, _) in &env {
                let spec = fields::by_env(var).expect("var comes from the table");
                assert_eq!(
                    effective.sources[spec.name],
                    config::ValueSource::Env(var.to_string())
                );
            }
            accepted_config_round_trips(&effective.config);
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in errors.iter() {
                assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// A configuration the loader accepted, written out as a file, is accepted again and
/// equal, except that a float may move by its last digit through the JSON text.
fn accepted_config_round_trips(config: &Config) {
    let text = serde_json::to_string(&config.to_json_map()).expect("a map serializes");
    let again = config::check_text(Path::new("roundtrip.json"), &text)
        .unwrap_or_else(|e| panic!("accepted config {text} refused as a file: {e}"));
    for field in config.diff_fields(&again) {
        let kind = fields::by_name(&field).map(|f| f.kind);
        assert!(
            matches!(kind, Some(fields::FieldKind::Float { .. })),
            "field {field} changed through a file round trip: {text}"
        );
    }
}

/// The TCP key-value store's frames, read as a stream the way the server (requests) and the
/// client (replies) read a connection. A decoded frame re-encodes to exactly the bytes it
/// was read from: the format has one encoding per message.
pub fn kv_frame(data: &[u8]) {
    let Some((&which, stream)) = data.split_first() else {
        return;
    };
    let mut rest = stream;
    // At most as many frames as bytes: every frame consumes at least five.
    while !rest.is_empty() {
        let before = rest;
        let mut encoded = Vec::new();
        let outcome = if which & 1 == 0 {
            match frame::read_request(&mut rest) {
                Ok(Some(req)) => Ok(frame::write_request(&mut encoded, &req)),
                Ok(None) => break,
                Err(e) => Err(e),
            }
        } else {
            frame::read_response(&mut rest).map(|resp| frame::write_response(&mut encoded, &resp))
        };
        match outcome {
            Ok(written) => {
                written.expect("writing to a Vec cannot fail");
                let consumed = &before[..before.len() - rest.len()];
                assert_eq!(encoded, consumed, "re-encoding differs from the frame read");
            }
            // A refused frame ends the connection, as in the server and the client.
            Err(FrameError::Malformed(m)) => {
                assert!(!m.is_empty());
                break;
            }
            Err(FrameError::Io(_)) => break,
        }
    }
}

/// The JSON values the rendezvous reads from the key-value store: the first byte picks
/// the key (announcement, join, echo), the rest is the value. What decodes must encode
/// back to itself, and a node must be able to derive its edges from any announcement
/// that decodes.
pub fn rendezvous_values(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 3 {
        0 => {
            if let Ok(ann) = values::decode::<Announcement>("distprof/round/0", &text) {
                // A node compares the master's shared config with its own.
                let _ = distprof::rendezvous::digest::config_diff(&ann.config, &Config::default());
                let again: Announcement = values::decode("distprof/round/0", &values::encode(&ann))
                    .expect("an encoded announcement decodes");
                assert_eq!(again.session_id, ann.session_id);
                // Every node evaluates its own edges from the parameters, whatever they are.
                let graph = ProbeGraph::new(ann.num_nodes, ann.graph.out_degree, ann.graph.seed);
                for node in [0, ann.num_nodes / 2, ann.num_nodes.saturating_sub(1)] {
                    let out = graph.out_edges(node);
                    assert!(out.iter().all(|&p| p < ann.num_nodes && p != node));
                    let probers = graph.in_edges(node);
                    assert!(probers.iter().all(|&p| p < ann.num_nodes && p != node));
                }
            }
        }
        1 => {
            if let Ok(join) = values::decode::<Join>("distprof/s/x/node/0", &text) {
                let again: Join =
                    values::decode("k", &values::encode(&join)).expect("an encoded join decodes");
                assert_eq!(again, join);
            }
        }
        _ => {
            if let Ok(echo) = values::decode::<Echo>("distprof/s/x/echo/0/1", &text) {
                let again: Echo = values::decode("k", &values::encode(&echo)).expect("an encoded echo decodes");
                assert_eq!(again, echo);
            }
        }
    }
}

/// The report input (`distprof report --input FILE.json`): parsed as the command parses it,
/// then rendered. Rendering must finish on anything that parses and give one HTML page.
pub fn report_input(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(input) = serde_json::from_str::<ReportInput>(text) else {
        return;
    };
    let page = report::render(&input);
    assert!(
        page.starts_with("<!DOCTYPE html>"),
        "page starts {:?}",
        &page[..page.len().min(40)]
    );
}

/// One probe datagram (`wire::Packet::decode`, what the probe socket does with every
/// datagram it receives): never panics, and whatever it accepts re-encodes to the same bytes.
pub fn wire_decode(data: &[u8]) {
    if let Ok(p) = distprof::wire::Packet::decode(data) {
        assert_eq!(&p.encode()[..], data);
    }
}

/// A node's probe JSONL file, as `distprof local` and `distprof report` read it: written to
/// a file and read with `jsonl::read`. Accepted windows written back by `JsonlWriter` read
/// back equal.
pub fn jsonl(data: &[u8]) {
    let dir = std::env::temp_dir().join(format!("distprof-fuzz-jsonl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir is writable");
    let path = dir.join("input.jsonl");
    std::fs::write(&path, data).expect("temp dir is writable");
    match distprof::jsonl::read(&path) {
        Ok(file) => {
            let out = dir.join("out");
            let mut w =
                distprof::jsonl::JsonlWriter::create(&out, &file.meta).expect("temp dir is writable");
            for window in &file.windows {
                w.write_window(window).expect("temp dir is writable");
            }
            let again = distprof::jsonl::read(w.path()).expect("a written file reads back");
            assert_eq!(again.windows, file.windows);
            assert!(!again.truncated_tail);
        }
        Err(message) => assert!(
            message.contains("input.jsonl"),
            "error does not name the file: {message}"
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node's XSpace (`.xplane.pb`) as `distprof merge` reads it: written to a file and merged
/// for real (prescan, distprof plane, clock map, rewrite, Chrome JSON with `--flows`, whose
/// pass reads the merged output back) with `--allow-uncorrected`, so that traces without a
/// model are merged too. A merge output is recognised as one and refused by name.
pub fn xspace(data: &[u8]) {
    let _ = distprof_offline::merge::prescan::prescan(data);
    let dir = std::env::temp_dir().join(format!("distprof-fuzz-xspace-{}", std::process::id()));
    // A leftover from an earlier input would become a second input.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir is writable");
    let input = dir.join("node.xplane.pb");
    std::fs::write(&input, data).expect("temp dir is writable");
    let opts = |out: &str| distprof_offline::merge::MergeOptions {
        out_dir: dir.join(out),
        chrome: Some(dir.join(format!("{out}.trace.json"))),
        trace_format: distprof_offline::merge::trace_out::TraceFormat::ChromeJson,
        allow_uncorrected: true,
        models: Vec::new(),
        models_origin: None,
        force: false,
        flows: true,
        pftrace_compression: Default::default(),
    };
    let first = distprof_offline::merge::merge(std::slice::from_ref(&input), &opts("out"), &mut |_| {});
    if let Ok(report) = first {
        assert_eq!(report.nodes.len(), 1);
        let output = report.nodes[0].output.clone();
        // A merge output is recognised as one and refused by name: merging it again would
        // show its hosts twice.
        let again = distprof_offline::merge::merge(&[output], &opts("again"), &mut |_| {});
        assert!(
            matches!(again, Err(distprof_offline::merge::MergeError::OwnOutput { .. })),
            "a merge output merged again, or failed otherwise: {:?}",
            again.map(|r| r.nodes.len())
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Small XSpaces for the `xspace` corpus (`cargo run -p distprof-testkit --example fuzz_seeds`
/// writes them): host, device and distprof planes in the shapes merge handles.
pub fn xspace_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use crate::synthetic_xspace::{
        all_reduce_plane, linear_snapshots, plane_data as node_plane, task_env_plane, with_tracer,
        xspace_bytes, Windows,
    };
    use distprof::distprof_plane::{DistprofPlaneData, ProbeEdgeStats, TracerStart};
    use distprof::model::NodeClockModel;
    use distprof::xplane::{XPlane, HOST_THREADS_PLANE};

    const START_NS: i64 = 1_790_000_000_000_000_000;
    let task_env = || task_env_plane(1, START_NS, START_NS + 2_000_000_000);
    let events_plane = |id: i64, name: &str, line_ts_ns: i64| {
        all_reduce_plane(id, name, line_ts_ns, 3, 250_000_000, 100_000_000)
    };
    let plane_data = |tracer: bool| -> DistprofPlaneData {
        let windows = Windows {
            start_ns: START_NS,
            window_ns: 1_000_000_000,
            count: 2,
            bound_ns: 900.0,
            uncertainty_ns: 40.0,
        };
        let mut segments = windows.segments(|w, _| (37_000_123.0 + w as f64 * 40.0, 40_000.0));
        segments[1].flagged = true;
        let mut data = node_plane(1, "gpu-host-1", segments);
        if tracer {
            let start = TracerStart {
                s_ns: START_NS,
                r_ns: 5_000_000_000,
            };
            data = with_tracer(data, start, linear_snapshots(start, 4, 500_000_000, 500_000_025, 300));
        }
        data.probe_stats = vec![ProbeEdgeStats {
            window_id: 0,
            peer: 0,
            pairs_used: 90,
            pairs_lost: 2,
            min_rtt_ns: 24_000,
        }];
        data
    };
    let space = |planes: Vec<XPlane>| xspace_bytes(planes, "gpu-host-1");
    let mut unreachable = plane_data(false);
    unreachable.model = NodeClockModel {
        node: 1,
        reachable: false,
        segments: Vec::new(),
    };
    let mut applied = plane_data(false).to_xplane();
    applied.name = distprof::distprof_plane::DISTPROF_APPLIED_PLANE.into();
    vec![
        ("empty.xplane.pb", Vec::new()),
        (
            "host-only-no-model.xplane.pb",
            space(vec![task_env(), events_plane(2, HOST_THREADS_PLANE, 1_000)]),
        ),
        (
            "host-with-model.xplane.pb",
            space(vec![
                task_env(),
                events_plane(2, HOST_THREADS_PLANE, 1_000),
                plane_data(false).to_xplane(),
            ]),
        ),
        (
            "gpu-with-tracer-fit.xplane.pb",
            space(vec![
                task_env(),
                events_plane(2, HOST_THREADS_PLANE, 1_000),
                events_plane(3, "/device:GPU:0", 2_000),
                plane_data(true).to_xplane(),
            ]),
        ),
        (
            "unreachable-node.xplane.pb",
            space(vec![
                task_env(),
                events_plane(2, HOST_THREADS_PLANE, 0),
                unreachable.to_xplane(),
            ]),
        ),
        (
            "already-merged.xplane.pb",
            space(vec![events_plane(2, HOST_THREADS_PLANE, 5), applied]),
        ),
        // Absolute line timestamps (no Task Environment), as some collectors write them.
        (
            "absolute-times.xplane.pb",
            space(vec![
                events_plane(2, HOST_THREADS_PLANE, START_NS),
                plane_data(false).to_xplane(),
            ]),
        ),
    ]
}

#[cfg(test)]
mod tests;
