//! Entry points for fuzzing: each takes arbitrary bytes, drives one parser of untrusted
//! input exactly as distprof does, and checks what the parser promises. They never panic
//! on any input; a panic here is a bug (libFuzzer reports it as a crash).
//!
//! Two callers share them, so that one definition of "the target" exists: the libFuzzer
//! targets in `fuzz/fuzz_targets/` (`cargo fuzz run <target>`, docs/fuzzing.md), and the
//! seeded property tests below, which replay the committed corpus plus mutations of it
//! under `cargo nextest` without libFuzzer.

use distprof::config::{self, fields, Config};
use distprof::context::{NodeInfo, RunContext};
use distprof::kv::tcp::frame::{self, FrameError};
use distprof::rendezvous::values::{self, Announcement, Envelope, Join};
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
/// the key (announcement, join, context), the rest is the value. A context that decodes
/// is checked the way a joining node checks it, against an announcement that matches it.
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
            }
        }
        1 => {
            if let Ok(join) = values::decode::<Join>("distprof/s/x/node/0", &text) {
                let again: Join =
                    values::decode("k", &values::encode(&join)).expect("an encoded join decodes");
                assert_eq!(again, join);
            }
        }
        _ => match values::decode::<Envelope>("distprof/s/x/context", &text) {
            Ok(Envelope::Ok { nonces, context }) => {
                let again: Envelope = values::decode(
                    "k",
                    &values::encode(&Envelope::Ok {
                        nonces,
                        context: context.clone(),
                    }),
                )
                .expect("an encoded context decodes");
                assert!(matches!(again, Envelope::Ok { context: c, .. } if c == context));
                check_context_as_each_node(&context);
            }
            Ok(Envelope::Abort { reason }) => {
                let _ = reason.len();
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        },
    }
}

/// Runs the joining node's consistency check on `context` as each node it lists (and as
/// one node it does not), and checks that an accepted context is safe to index.
fn check_context_as_each_node(context: &RunContext) {
    let ann = Announcement {
        version: values::PROTOCOL_VERSION,
        session_id: context.session_id.clone(),
        num_nodes: context.num_nodes,
        config_digest: context.config_digest.clone(),
        config: serde_json::Value::Null,
    };
    let stranger = NodeInfo {
        node: 0,
        probe_addr: "127.0.0.1:9".parse().expect("literal address"),
        hostname: "\u{0}stranger".into(),
    };
    // A joining node only checks contexts with its own index below num_nodes (the
    // rendezvous checks its arguments first); at most a few nodes keep the target fast.
    let mut candidates: Vec<NodeInfo> = context.nodes.iter().take(4).cloned().collect();
    if context.num_nodes > 0 {
        candidates.push(stranger);
    }
    for me in candidates.iter().filter(|me| me.node < context.num_nodes) {
        if distprof::rendezvous::check_context("k", context, &ann, me).is_ok() {
            let n = context.num_nodes as usize;
            assert_eq!(context.nodes.len(), n);
            assert_eq!(context.nodes[me.node as usize], *me);
            assert!((context.reference_node as usize) < n);
            for (i, peers) in context.out_edges.iter().enumerate() {
                assert!(i < n && peers.iter().all(|&p| (p as usize) < n));
            }
            let _ = distprof::rendezvous::digest::context_digest(context);
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
        allow_uncorrected: true,
        models: Vec::new(),
        models_origin: None,
        force: false,
        flows: true,
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
mod tests {
    //! Seeded property tests: every committed corpus file, then mutations of them (bit
    //! flips, byte insertions and deletions, splices, interesting integers) and random
    //! bytes, through the same entry points as the libFuzzer targets. Deterministic, and
    //! quick enough for every `cargo nextest` run.

    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::path::{Path, PathBuf};

    /// Mutated inputs per target; a debug build runs them in about a second.
    const CASES: usize = 3_000;

    fn corpus(target: &str) -> Vec<Vec<u8>> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus")
            .join(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files.iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut data = if seeds.is_empty() || rng.gen_ratio(1, 10) {
            (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect()
        } else {
            seeds[rng.gen_range(0..seeds.len())].clone()
        };
        for _ in 0..rng.gen_range(1..=4) {
            let len = data.len();
            match rng.gen_range(0..6) {
                0 if len > 0 => {
                    let i = rng.gen_range(0..len);
                    data[i] ^= 1 << rng.gen_range(0..8);
                }
                1 => {
                    let i = rng.gen_range(0..=len);
                    data.insert(i, rng.gen());
                }
                2 if len > 0 => {
                    let i = rng.gen_range(0..len);
                    let n = rng.gen_range(1..=(len - i).min(8));
                    data.drain(i..i + n);
                }
                3 if !seeds.is_empty() => {
                    // Splice: a prefix of this input, a suffix of another.
                    let other = &seeds[rng.gen_range(0..seeds.len())];
                    let cut = rng.gen_range(0..=len);
                    let from = rng.gen_range(0..=other.len());
                    data.truncate(cut);
                    data.extend_from_slice(&other[from..]);
                }
                4 if len >= 4 => {
                    // Integers that break length and range checks.
                    let values: [u32; 6] = [0, 1, 0x7f, 0xffff, 0x7fff_ffff, u32::MAX];
                    let i = rng.gen_range(0..=len - 4);
                    let v = values[rng.gen_range(0..values.len())];
                    data[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
                _ if len > 0 => {
                    // Digits and JSON punctuation, which text parsers branch on.
                    let alphabet = b"0123456789-+.eE\"{}[]:,ntf \\u";
                    let i = rng.gen_range(0..len);
                    data[i] = alphabet[rng.gen_range(0..alphabet.len())];
                }
                _ => data.push(rng.gen()),
            }
        }
        data
    }

    fn run(target: &str) {
        run_cases(target, CASES);
    }

    fn run_cases(target: &str, cases: usize) {
        let (_, entry) = TARGETS.iter().find(|(name, _)| *name == target).unwrap();
        let seeds = corpus(target);
        assert!(
            seeds.len() >= 5,
            "{target}: corpus has {} files",
            seeds.len()
        );
        for seed in &seeds {
            entry(seed);
        }
        let mut rng = StdRng::seed_from_u64(0x0d15_790f);
        for _ in 0..cases {
            entry(&mutate(&mut rng, &seeds));
        }
    }

    #[test]
    fn config_file_survives_corpus_and_mutations() {
        run("config_file");
    }

    #[test]
    fn config_env_survives_corpus_and_mutations() {
        run("config_env");
    }

    #[test]
    fn kv_frame_survives_corpus_and_mutations() {
        run("kv_frame");
    }

    #[test]
    fn rendezvous_values_survive_corpus_and_mutations() {
        run("rendezvous_values");
    }

    #[test]
    fn report_input_survives_corpus_and_mutations() {
        run("report_input");
    }

    #[test]
    fn xspace_survives_corpus_and_mutations() {
        // Each case writes a file and merges it twice: fewer cases keep the test quick.
        run_cases("xspace", CASES / 6);
    }

    #[test]
    fn wire_decode_survives_corpus_and_mutations() {
        run("wire_decode");
    }

    #[test]
    fn jsonl_survives_corpus_and_mutations() {
        run_cases("jsonl", CASES / 3);
    }

    #[test]
    fn xspace_seeds_merge() {
        // The seeds reach the deep paths only if they are valid: each merges with events,
        // except the empty one and the merge output, which are refused by name.
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in xspace_seeds() {
            let input = dir.path().join(name);
            std::fs::write(&input, &bytes).unwrap();
            let opts = distprof_offline::merge::MergeOptions {
                out_dir: dir.path().join(format!("{name}.out")),
                chrome: None,
                allow_uncorrected: true,
                models: Vec::new(),
                models_origin: None,
                force: false,
                flows: false,
            };
            let merged = distprof_offline::merge::merge(&[input], &opts, &mut |_| {});
            if bytes.is_empty() {
                assert!(matches!(merged, Err(distprof_offline::merge::MergeError::EmptyTrace { .. })), "{name}");
                continue;
            }
            if name == "already-merged.xplane.pb" {
                assert!(matches!(merged, Err(distprof_offline::merge::MergeError::OwnOutput { .. })), "{name}");
                continue;
            }
            let report = merged.unwrap_or_else(|e| panic!("{name}: {e}"));
            let events = report.nodes[0].events;
            assert!(events > 0, "{name}: {events} events");
        }
    }

    /// Found by the config_env target: a log filter with a blank before a non-ASCII
    /// character panicked inside tracing-subscriber's parser (validation and logging init
    /// both parse it). Now it is judged like the same filter without the blanks.
    #[test]
    fn regression_log_filter_with_blank_before_non_ascii() {
        // The input libFuzzer saved: XLA_DIST_PROF_LOG_FILTER (index 15) = "\x0b0\u{fffd}[...".
        config_env(b"\x0a\xd7\x0b\x30\x8b\x5b\xf1\x9a\x8b\x97");
        for (spaced, tight) in [
            (" [\u{e9}]", "[\u{e9}]"),
            ("info, \u{e9}=debug", "info,\u{e9}=debug"),
            ("\u{b}0\u{fffd}[x", "0\u{fffd}[x"),
        ] {
            assert_eq!(
                distprof::config::log_filter::parse_filter(spaced)
                    .map(|f| f.to_string())
                    .map_err(|e| e.to_string()),
                distprof::config::log_filter::parse_filter(tight)
                    .map(|f| f.to_string())
                    .map_err(|e| e.to_string()),
                "{spaced:?}"
            );
            let env = |value: &'static str| {
                move |var: &str| (var == "XLA_DIST_PROF_LOG_FILTER").then(|| value.to_string())
            };
            assert_eq!(
                config::load(&env(spaced)).is_ok(),
                config::load(&env(tight)).is_ok(),
                "{spaced:?}"
            );
        }
    }

    /// Found while fuzzing xspace: `prescan_file` trusted a field's length. A length near
    /// 2^64 became a negative seek that re-read the same field forever (an overflow panic
    /// with overflow checks), and a huge length on a plane it reads resized a buffer to it.
    /// Both are now "length past end of file".
    #[test]
    fn regression_prescan_file_refuses_lengths_past_the_end() {
        fn varint(mut v: u64, out: &mut Vec<u8>) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        let dir = tempfile::tempdir().unwrap();
        // A plane (field 1) whose 512 readable bytes name it "x"; the length, 2^64 - 11,
        // seeks back exactly to the field's key.
        let mut looping = vec![0x0a];
        varint(u64::MAX - 10, &mut looping);
        looping.extend_from_slice(&[0x12, 0x01, b'x']);
        looping.resize(1 + 10 + 512, 0);
        // A Task Environment plane (which prescan reads whole) claiming 1 TiB.
        let mut huge = vec![0x0a];
        varint(1 << 40, &mut huge);
        huge.push(0x12);
        huge.push(distprof::xplane::TASK_ENV_PLANE.len() as u8);
        huge.extend_from_slice(distprof::xplane::TASK_ENV_PLANE.as_bytes());
        // Reported at the end of the length varint: byte 11 (10-byte varint), byte 7 (6-byte).
        for (name, bytes, at) in [("looping", looping, 11), ("huge", huge, 7)] {
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            let err = distprof_offline::merge::prescan::prescan_file(&path)
                .unwrap()
                .unwrap_err();
            assert_eq!(err.what, "length past end of file", "{name}");
            assert_eq!(err.at, at, "{name}");
        }
    }

    /// Found by the config_env target in the CI run: a cadence far above its range (5.2e18 us)
    /// overflowed `20 * probe_cadence_us` in the window check's message. Now both the range
    /// error and the window error are reported.
    #[test]
    fn regression_huge_cadence_does_not_overflow_the_window_check() {
        let env =
            |var: &str| (var == "XLA_PROBE_CADENCE_US").then(|| "5199999999999999999".to_string());
        let errors = config::load(&env).unwrap_err().to_string();
        assert!(
            errors.contains("probe_cadence_us = 5199999999999999999 is above the maximum"),
            "{errors}"
        );
        assert!(errors.contains("holds only 0 probes"), "{errors}");
        assert!(
            errors.contains("raise probe_window_s to at least 104000000000000 or"),
            "{errors}"
        );
    }

    /// Replaces the seed's plane named `plane` by `edit(plane bytes)`, keeping the others.
    fn edit_plane(seed: &str, plane: &str, edit: impl Fn(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
        use distprof::xplane::XSpace;
        use prost::Message;
        let (_, bytes) = xspace_seeds()
            .into_iter()
            .find(|(n, _)| *n == seed)
            .unwrap();
        let space = XSpace::decode(bytes.as_slice()).unwrap();
        let mut out = Vec::new();
        for p in &space.planes {
            let mut body = p.encode_to_vec();
            if p.name == plane {
                body = edit(body);
            }
            distprof_offline::merge::protobuf::put_len_header(&mut out, 1, body.len());
            out.extend_from_slice(&body);
        }
        out
    }

    fn merge_once(
        dir: &Path,
        name: &str,
        bytes: &[u8],
    ) -> Result<distprof_offline::merge::MergeReport, distprof_offline::merge::MergeError> {
        let input = dir.join(format!("{name}.xplane.pb"));
        std::fs::write(&input, bytes).unwrap();
        let opts = distprof_offline::merge::MergeOptions {
            out_dir: dir.join(name),
            chrome: Some(dir.join(format!("{name}.trace.json"))),
            allow_uncorrected: true,
            models: Vec::new(),
            models_origin: None,
            force: false,
            flows: false,
        };
        distprof_offline::merge::merge(&[input], &opts, &mut |_| {})
    }

    /// Found by the xspace target: a distprof plane carrying a second name field was the
    /// distprof plane to prescan (first name) but a host plane to the rewrite (last name),
    /// so its output kept a distprof plane that no longer decoded. Both now read the first
    /// name: the output is recognised as a merge output, and merging it again is refused
    /// by name like any other merge output.
    #[test]
    fn regression_plane_with_two_names_is_recognised_as_merged() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = edit_plane(
            "host-with-model.xplane.pb",
            distprof::distprof_plane::DISTPROF_PLANE,
            |mut b| {
                b.push(0x12); // field 2 (name), length-delimited
                b.push(9);
                b.extend_from_slice(b"/host:CPU");
                b
            },
        );
        let first = merge_once(dir.path(), "first", &bytes).unwrap();
        let output = std::fs::read(&first.nodes[0].output).unwrap();
        let info = distprof_offline::merge::prescan::prescan(&output).unwrap();
        assert!(info.already_merged && info.distprof.is_none());
        let again = merge_once(dir.path(), "again", &output);
        assert!(matches!(again, Err(distprof_offline::merge::MergeError::OwnOutput { .. })), "{:?}", again.map(|r| r.nodes.len()));
        // As many events as the unedited trace.
        let plain = &xspace_seeds()
            .into_iter()
            .find(|(n, _)| *n == "host-with-model.xplane.pb")
            .unwrap()
            .1;
        let plain_first = merge_once(dir.path(), "plain", plain).unwrap();
        assert_eq!(first.nodes[0].events, plain_first.nodes[0].events);
    }

    /// Found by the xspace target (overflow checks on): a line timestamp near the i64 range
    /// overflowed converting ns to ps for the Chrome output, and a model with an offset near
    /// the f64 range overflowed the correction. Both now saturate; the merge completes.
    #[test]
    fn regression_extreme_times_and_models_do_not_overflow() {
        use distprof::xplane::{XLine, XPlane};
        use prost::Message;
        let dir = tempfile::tempdir().unwrap();
        let far_line = edit_plane(
            "host-with-model.xplane.pb",
            distprof::xplane::HOST_THREADS_PLANE,
            |b| {
                let mut p = XPlane::decode(b.as_slice()).unwrap();
                p.lines.push(XLine {
                    id: 9,
                    timestamp_ns: i64::MAX - 5,
                    ..p.lines[0].clone()
                });
                p.encode_to_vec()
            },
        );
        let report = merge_once(dir.path(), "far-line", &far_line).unwrap();
        assert_eq!(report.nodes[0].events, 6);
        let json = std::fs::read_to_string(dir.path().join("far-line.trace.json")).unwrap();
        assert!(json.contains("\"ph\":\"X\""));

        let (_, seed) = xspace_seeds()
            .into_iter()
            .find(|(n, _)| *n == "host-with-model.xplane.pb")
            .unwrap();
        let plane = distprof::xplane::XSpace::decode(seed.as_slice())
            .unwrap()
            .planes
            .into_iter()
            .find(|p| p.name == distprof::distprof_plane::DISTPROF_PLANE)
            .unwrap();
        let mut data = distprof::distprof_plane::DistprofPlaneData::from_xplane(&plane).unwrap();
        data.model.segments[0].offset_ns = 1e300;
        data.model.segments[1].drift_ppb = -1e300;
        let huge_model = edit_plane(
            "host-with-model.xplane.pb",
            distprof::distprof_plane::DISTPROF_PLANE,
            |_| data.to_xplane().encode_to_vec(),
        );
        merge_once(dir.path(), "huge-model", &huge_model).unwrap();

        // Found by libFuzzer afterwards: window midpoints at the ends of the i64 range
        // overflowed `s - x0` in the correction. Saturating now.
        data.model.segments[0].mid_local_ns = i64::MIN;
        data.model.segments[1].mid_local_ns = i64::MAX;
        let far_mids = edit_plane(
            "host-with-model.xplane.pb",
            distprof::distprof_plane::DISTPROF_PLANE,
            |_| data.to_xplane().encode_to_vec(),
        );
        merge_once(dir.path(), "far-mids", &far_mids).unwrap();
    }

    #[test]
    fn every_target_has_a_libfuzzer_target_and_a_corpus() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        for (name, _) in TARGETS {
            let src = root.join("fuzz_targets").join(format!("{name}.rs"));
            let text =
                std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            assert!(
                text.contains(&format!("distprof_testkit::fuzz::{name}(")),
                "{} does not call distprof_testkit::fuzz::{name}",
                src.display()
            );
            assert!(
                root.join("corpus").join(name).is_dir(),
                "no corpus for {name}"
            );
        }
    }
}
