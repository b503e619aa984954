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
            trace_format: Default::default(),
            allow_uncorrected: true,
            models: Vec::new(),
            models_origin: None,
            force: false,
            flows: false,
            pftrace_compression: Default::default(),
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
        trace_format: distprof_offline::merge::trace_out::TraceFormat::ChromeJson,
        allow_uncorrected: true,
        models: Vec::new(),
        models_origin: None,
        force: false,
        flows: false,
        pftrace_compression: Default::default(),
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
