//! `distprof merge` on every core and in shards gives the bytes of the serial merge, and
//! its Chrome JSON keeps the rules Perfetto's JSON importer reads it by.
//!
//! [`check_chrome_json`] checks the documented rules of the JSON trace format as Perfetto
//! applies them, independently of the writer: pid and tid integers of 32 bits, known `ph`
//! types, metadata events with their args, non-negative `X` durations, `B`/`E` balanced and
//! `X` slices nested per thread, args objects, v1 flows bound as Perfetto binds them. It
//! runs on every output here; Perfetto's own trace processor (a WebAssembly build of 2021,
//! from the npm registry) reads merged JAX and GPU-like traces in `tests/steps/42-perfetto.sh`.

use distprof_testkit::cli::distprof;
use distprof_testkit::tree::files;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

fn jax_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/jax")
}

/// Synthetic traces of `nodes` nodes (with distprof planes) from the merge benchmark's
/// generator, in `<dir>/in`.
fn synthetic(dir: &Path, nodes: u32) -> PathBuf {
    let gen = distprof()
        .args(["bench", "merge", "--size-mb", "8", "--nodes", &nodes.to_string(), "--skip-baseline", "--no-chrome", "--repeat", "1", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    dir.join("in")
}

fn run(args: &[&std::ffi::OsStr]) -> Value {
    let out = distprof().arg("merge").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn parallel_and_sharded_merges_give_the_bytes_of_the_serial_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = synthetic(tmp.path(), 4);
    let serial = tmp.path().join("serial");
    let parallel = tmp.path().join("parallel");
    run(&[inputs.as_os_str(), os("--out"), serial.as_os_str(), os("--jobs"), os("1")]);
    let report = run(&[inputs.as_os_str(), os("--out"), parallel.as_os_str(), os("--jobs"), os("4")]);
    assert_eq!(report["nodes"].as_array().unwrap().len(), 4);
    let a = files(&serial);
    assert_eq!(a.len(), 5, "four traces and merged.pftrace: {:?}", a.keys().collect::<Vec<_>>());
    assert!(a.keys().any(|k| k.ends_with("merged.pftrace")));
    let b = files(&parallel);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(v == &b[k], "{} differs between --jobs 1 and --jobs 4", k.display());
    }

    // Two shards (one of them on two threads) and the join: the same bytes again.
    let (s1, s2, joined) = (tmp.path().join("s1"), tmp.path().join("s2"), tmp.path().join("joined"));
    run(&[inputs.as_os_str(), os("--out"), s1.as_os_str(), os("--nodes"), os("0-1"), os("--jobs"), os("1")]);
    run(&[inputs.as_os_str(), os("--out"), s2.as_os_str(), os("--nodes"), os("2-3"), os("--jobs"), os("2")]);
    // Either order of the shard directories.
    let j = run(&[os("--join"), s2.as_os_str(), s1.as_os_str(), os("--out"), joined.as_os_str()]);
    assert_eq!(j["nodes"].as_array().unwrap().len(), 4);
    let c = files(&joined);
    assert_eq!(a.keys().collect::<Vec<_>>(), c.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(v == &c[k], "{} differs between the whole merge and the joined shards", k.display());
    }

    // The solve step once (the traces' planes, not their events), then shards from its
    // plan that read only their own traces: the same bytes again.
    let plan = tmp.path().join("plan.json");
    let solved = run(&[os("--solve-only"), inputs.as_os_str(), os("--out"), plan.as_os_str()]);
    let (read, size) = (solved["bytes_read"].as_u64().unwrap(), solved["bytes_in"].as_u64().unwrap());
    assert!(read * 20 < size, "the solve step read {read} of {size} bytes");
    let (p1, p2, pjoined) = (tmp.path().join("p1"), tmp.path().join("p2"), tmp.path().join("pjoined"));
    run(&[os("--plan"), plan.as_os_str(), os("--nodes"), os("0-2"), os("--out"), p1.as_os_str()]);
    run(&[os("--plan"), plan.as_os_str(), os("--nodes"), os("3"), os("--out"), p2.as_os_str()]);
    run(&[os("--join"), p1.as_os_str(), p2.as_os_str(), os("--out"), pjoined.as_os_str()]);
    let p = files(&pjoined);
    assert_eq!(a.keys().collect::<Vec<_>>(), p.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(v == &p[k], "{} differs between the whole merge and the joined shards of the plan", k.display());
    }
    // The plan names the inputs and holds the models: neither is given again.
    for (extra, says) in [(inputs.as_os_str(), "give no inputs with --plan"), (os("--models=m.json"), "give --models/--run-dir to `distprof merge --solve-only`")] {
        let out = distprof().args(["merge", "--plan"]).arg(&plan).arg(extra).arg("--out").arg(tmp.path().join("p3")).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{}", String::from_utf8_lossy(&out.stderr));
    }

    // Joined into a shard's own directory: its node files stay, the others join them.
    run(&[os("--join"), s1.as_os_str(), s2.as_os_str(), os("--out"), s1.as_os_str()]);
    let d = files(&s1);
    for (k, v) in &a {
        assert!(Some(v) == d.get(k), "{} differs after a join into a shard directory", k.display());
    }

    // A join missing a shard, or with a shard twice, is refused by name.
    let missing = distprof().args(["merge", "--join"]).arg(&s1).arg("--out").arg(tmp.path().join("j2")).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no shard holds node(s) [2, 3]"), "{}", String::from_utf8_lossy(&missing.stderr));
    let twice = distprof().args(["merge", "--join"]).arg(&s1).arg(&s1).arg(&s2).arg("--out").arg(tmp.path().join("j3")).output().unwrap();
    assert!(String::from_utf8_lossy(&twice.stderr).contains("in two shards"), "{}", String::from_utf8_lossy(&twice.stderr));
}

#[test]
fn real_traces_without_planes_merge_the_same_on_every_thread_count() {
    // The JAX fixtures have no distprof plane: each node gets an added plane, which moves
    // the plane ids of the nodes after it.
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let fx = jax_fixtures();
    run(&[fx.as_os_str(), os("--out"), a.as_os_str(), os("--allow-uncorrected"), os("--jobs"), os("1")]);
    run(&[fx.as_os_str(), os("--out"), b.as_os_str(), os("--allow-uncorrected"), os("--jobs"), os("3")]);
    let (fa, fb) = (files(&a), files(&b));
    assert_eq!(fa.len(), 4);
    assert_eq!(fa, fb);
}

#[test]
fn flows_link_every_collective_occurrence_across_nodes_in_start_order() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = jax_fixtures();
    let (a, b, plain) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("plain"));
    run(&[fx.as_os_str(), os("--out"), a.as_os_str(), os("--allow-uncorrected"), os("--flows"), os("--jobs"), os("1"), os("--chrome")]);
    run(&[fx.as_os_str(), os("--out"), b.as_os_str(), os("--allow-uncorrected"), os("--flows"), os("--jobs"), os("3"), os("--chrome")]);
    let report = run(&[fx.as_os_str(), os("--out"), plain.as_os_str(), os("--allow-uncorrected"), os("--chrome")]);
    assert_eq!(files(&a), files(&b), "--flows gives the same bytes on every thread count");
    let text = std::fs::read_to_string(a.join("merged.trace.json")).unwrap();
    let checked = check_chrome_json(&text).unwrap();
    // One flow per occurrence that validate compares (seen on two participants or more),
    // on the merged outputs (the XSpace is the same with and without --flows).
    let run_dir = report["run_dir"].as_str().unwrap();
    let v = distprof().args(["validate", run_dir, "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&v.stdout).unwrap();
    let occurrences = v["after"]["checked"].as_u64().unwrap() as usize;
    assert!(occurrences >= 20, "{v}");
    assert_eq!(checked.flows, occurrences);
    // Without --flows there are none.
    let plain_text = std::fs::read_to_string(plain.join("merged.trace.json")).unwrap();
    assert_eq!(check_chrome_json(&plain_text).unwrap().flows, 0);
    assert!(!plain_text.contains("\"ph\":\"s\""));
    // Each flow goes from node to node in the order the occurrences started: its points,
    // in time order, lie on three distinct nodes' planes.
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut by_id: BTreeMap<u64, Vec<(f64, u64)>> = BTreeMap::new();
    for e in doc["traceEvents"].as_array().unwrap().iter().filter(|e| ["s", "t", "f"].contains(&e["ph"].as_str().unwrap())) {
        by_id.entry(e["id"].as_u64().unwrap()).or_default().push((e["ts"].as_f64().unwrap(), e["pid"].as_u64().unwrap()));
    }
    for (id, points) in &by_id {
        let pids: HashSet<u64> = points.iter().map(|p| p.1).collect();
        assert_eq!(pids.len(), 3, "flow {id}: {points:?}");
    }

    // The synthetic GPU-like traces (models, host and device planes, 4 nodes) too.
    let inputs = synthetic(tmp.path(), 4);
    let c = tmp.path().join("synthetic");
    run(&[inputs.as_os_str(), os("--out"), c.as_os_str(), os("--flows"), os("--chrome")]);
    let checked = check_chrome_json(&std::fs::read_to_string(c.join("merged.trace.json")).unwrap()).unwrap();
    assert!(checked.flows > 100, "{} flows", checked.flows);

    // merged.pftrace (the default) carries the same flows, as flow ids on the begins of the
    // slices they join: one id per flow of the Chrome JSON, on as many slices as it has
    // points, the same bytes on every thread count, and none without --flows.
    let (p1, p3, p0) = (tmp.path().join("p1"), tmp.path().join("p3"), tmp.path().join("p0"));
    run(&[fx.as_os_str(), os("--out"), p1.as_os_str(), os("--allow-uncorrected"), os("--flows"), os("--jobs"), os("1")]);
    run(&[fx.as_os_str(), os("--out"), p3.as_os_str(), os("--allow-uncorrected"), os("--flows"), os("--jobs"), os("3")]);
    run(&[fx.as_os_str(), os("--out"), p0.as_os_str(), os("--allow-uncorrected")]);
    assert_eq!(files(&p1), files(&p3), "--flows gives the same merged.pftrace on every thread count");
    let proto = pftrace_flow_points(&std::fs::read(p1.join("merged.pftrace")).unwrap());
    let mut proto_sizes: Vec<usize> = proto.values().copied().filter(|&n| n >= 2).collect();
    let mut json_sizes: Vec<usize> = by_id.values().map(Vec::len).collect();
    proto_sizes.sort_unstable();
    json_sizes.sort_unstable();
    assert_eq!(proto_sizes.len(), occurrences);
    assert_eq!(proto_sizes, json_sizes);
    assert!(pftrace_flow_points(&std::fs::read(p0.join("merged.pftrace")).unwrap()).is_empty());
    // The XSpace outputs do not depend on the flows.
    let xspace = |d: &Path| files(d).into_iter().filter(|(p, _)| p.to_string_lossy().ends_with(".xplane.pb")).collect::<Vec<_>>();
    assert_eq!(xspace(&p1), xspace(&p0));

    // A shard cannot link nodes it does not hold.
    let shard = distprof().args(["merge", "--nodes", "0-1", "--flows", "--out"]).arg(tmp.path().join("s")).arg(&inputs).output().unwrap();
    assert_eq!(shard.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&shard.stderr).contains("--flows"), "{}", String::from_utf8_lossy(&shard.stderr));
}

/// Points per flow id of a merged.pftrace: the `flow_ids` (TrackEvent field 36) of its
/// packets' track events, read as the format defines them (the packets of a
/// `compressed_packets`, field 50, inflated in its place).
fn pftrace_flow_points(bytes: &[u8]) -> BTreeMap<u64, usize> {
    use distprof_offline::merge::protobuf::Fields;
    let fields = |b| {
        let mut f = Fields::new(b, 0);
        let mut out = Vec::new();
        while let Some(x) = f.next_field().unwrap() {
            out.push(x);
        }
        out
    };
    let mut points = BTreeMap::new();
    for packet in fields(bytes).into_iter().filter(|p| p.number == 1) {
        for compressed in fields(packet.bytes).into_iter().filter(|f| f.number == 50) {
            let mut inflated = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(compressed.bytes), &mut inflated).unwrap();
            for (id, n) in pftrace_flow_points(&inflated) {
                *points.entry(id).or_insert(0) += n;
            }
        }
        for event in fields(packet.bytes).into_iter().filter(|f| f.number == 11) {
            for id in fields(event.bytes).into_iter().filter(|f| f.number == 36) {
                *points.entry(id.int).or_insert(0) += 1;
            }
        }
    }
    points
}

/// What the checker saw.
#[derive(Debug, Default)]
struct Checked {
    events: usize,
    /// (pid, tid) -> thread name.
    threads: HashMap<(u64, u64), String>,
    /// pid -> process name.
    processes: HashMap<u64, String>,
    /// Flows (v1 flow events), each bound at every point.
    flows: usize,
}

/// One point of a v1 flow: phase, pid, tid, ts in ns, whether it binds to the enclosing
/// slice.
type FlowPoint = (char, u64, u64, i64, bool);

/// Perfetto's JSON rules, checked on the whole document.
fn check_chrome_json(text: &str) -> Result<Checked, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if !text.starts_with("{\"traceEvents\"") {
        return Err("traceEvents must be the first key (Perfetto's trace processor of 2021 reads no event after any other key first)".into());
    }
    if doc.get("displayTimeUnit").is_some() {
        return Err("displayTimeUnit: Perfetto's trace processor of 2021 reads it as the unit of ts and dur (µs here)".into());
    }
    let events = doc["traceEvents"].as_array().ok_or("no traceEvents array")?;
    let id32 = |e: &Value, k: &str| -> Result<Option<u64>, String> {
        match &e[k] {
            Value::Null => Ok(None),
            v => {
                let n = v.as_u64().ok_or_else(|| format!("{k} is not a non-negative integer: {e}"))?;
                if n > u32::MAX as u64 {
                    return Err(format!("{k} {n} does not fit the 32 bits Perfetto reads: {e}"));
                }
                Ok(Some(n))
            }
        }
    };
    let mut c = Checked::default();
    let mut slices: HashMap<(u64, u64), Vec<(f64, f64)>> = HashMap::new();
    let mut open: HashMap<(u64, u64), usize> = HashMap::new();
    // Times are µs with ns decimals: compared in whole ns.
    let ns = |x: f64| (x * 1000.0).round() as i64;
    // v1 flows by (id, cat, name), as Perfetto's importer keys them.
    let mut flows: BTreeMap<(String, String, String), Vec<FlowPoint>> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().ok_or_else(|| format!("event without ph: {e}"))?;
        let pid = id32(e, "pid")?.ok_or_else(|| format!("event without pid: {e}"))?;
        let tid = id32(e, "tid")?;
        if !e["args"].is_null() && !e["args"].is_object() {
            return Err(format!("args must be an object: {e}"));
        }
        match ph {
            "M" => {
                let name = e["name"].as_str().ok_or("metadata without name")?;
                match name {
                    "process_name" | "thread_name" => {
                        let n = e["args"]["name"].as_str().ok_or_else(|| format!("{name} without args.name: {e}"))?;
                        if name == "process_name" {
                            if c.processes.insert(pid, n.into()).is_some() {
                                return Err(format!("pid {pid} named twice"));
                            }
                        } else {
                            let tid = tid.ok_or_else(|| format!("thread_name without tid: {e}"))?;
                            if c.threads.insert((pid, tid), n.into()).is_some() {
                                return Err(format!("thread ({pid}, {tid}) named twice: two lines on one track"));
                            }
                        }
                    }
                    "process_sort_index" | "thread_sort_index" => {
                        e["args"]["sort_index"].as_i64().ok_or_else(|| format!("{name} without an integer sort_index: {e}"))?;
                    }
                    other => return Err(format!("unknown metadata event {other}")),
                }
            }
            "X" | "B" | "E" => {
                let tid = tid.ok_or_else(|| format!("{ph} without tid: {e}"))?;
                let ts = e["ts"].as_f64().ok_or_else(|| format!("{ph} without numeric ts: {e}"))?;
                if ph != "E" && e["name"].as_str().is_none() {
                    return Err(format!("{ph} without name: {e}"));
                }
                match ph {
                    "X" => {
                        let dur = e["dur"].as_f64().ok_or_else(|| format!("X without numeric dur: {e}"))?;
                        if dur < 0.0 {
                            return Err(format!("negative dur: {e}"));
                        }
                        slices.entry((pid, tid)).or_default().push((ts, ts + dur));
                        c.events += 1;
                    }
                    "B" => *open.entry((pid, tid)).or_default() += 1,
                    _ => {
                        let n = open.entry((pid, tid)).or_default();
                        *n = n.checked_sub(1).ok_or_else(|| format!("E without B on ({pid}, {tid})"))?;
                    }
                }
            }
            "s" | "t" | "f" => {
                let tid = tid.ok_or_else(|| format!("flow event without tid: {e}"))?;
                let ts = e["ts"].as_f64().ok_or_else(|| format!("flow event without numeric ts: {e}"))?;
                let id = match &e["id"] {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.clone(),
                    _ => return Err(format!("flow event without id: {e}")),
                };
                let text = |k: &str| e[k].as_str().map(str::to_string).ok_or_else(|| format!("flow event without {k}: {e}"));
                let enclosing = ph != "f" || e["bp"] == "e";
                flows.entry((id, text("cat")?, text("name")?)).or_default().push((ph.chars().next().unwrap_or('?'), pid, tid, ns(ts), enclosing));
            }
            "i" | "I" | "C" => {}
            other => return Err(format!("ph `{other}` is not a trace event type Perfetto imports")),
        }
    }
    if let Some((k, _)) = open.iter().find(|(_, n)| **n > 0) {
        return Err(format!("B without E on {k:?}"));
    }
    // Slices of one thread must nest (Perfetto drops a slice that overlaps its parent's
    // end).
    for (k, v) in &mut slices {
        if !c.threads.contains_key(k) {
            return Err(format!("events on thread {k:?}, which has no thread_name"));
        }
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<i64> = Vec::new();
        for &(s, e) in v.iter() {
            let (s, e) = (ns(s), ns(e));
            while stack.last().is_some_and(|&end| end <= s) {
                stack.pop();
            }
            if let Some(&end) = stack.last() {
                if e > end {
                    return Err(format!("slice [{s}, {e}] ns on {k:?} overlaps its parent's end {end} ns"));
                }
            }
            stack.push(e);
        }
    }
    // Perfetto's importer takes events in time order and binds a flow's points to slices of
    // their thread: the start must come first and the end last, every `s`/`t` point (and
    // an `f` with `"bp":"e"`) must lie inside a slice, an `f` without it before one.
    for (key, points) in &mut flows {
        points.sort_by_key(|p| p.3);
        let phases: String = points.iter().map(|p| p.0).collect();
        let ordered = phases.starts_with('s') && phases.ends_with('f') && phases.len() >= 2 && phases[1..phases.len() - 1].chars().all(|p| p == 't');
        let tie = points.windows(2).any(|w| w[0].3 == w[1].3);
        if !ordered || tie {
            return Err(format!("flow {key:?}: points in time order are `{phases}`{}: the start must come first and alone", if tie { " with a tie" } else { "" }));
        }
        for &(ph, pid, tid, ts, enclosing) in points.iter() {
            let on = slices.get(&(pid, tid)).map(Vec::as_slice).unwrap_or(&[]);
            let bound = if enclosing {
                on.iter().any(|&(s, e)| ns(s) <= ts && ts <= ns(e))
            } else {
                on.iter().any(|&(s, _)| ns(s) >= ts)
            };
            if !bound {
                return Err(format!("flow {key:?}: its `{ph}` at {ts} ns on ({pid}, {tid}) has no slice to bind to"));
            }
        }
    }
    c.flows = flows.len();
    Ok(c)
}

/// The checker catches what it is there to catch.
#[test]
fn the_checker_refuses_what_perfetto_would_misdraw() {
    let doc = |events: &str| format!("{{\"traceEvents\":[{events}]}}");
    let named = r#"{"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{"name":"a"}}"#;
    assert!(check_chrome_json(&doc(&format!(r#"{named},{{"ph":"X","pid":1,"tid":1,"ts":1.0,"dur":2.0,"name":"x"}}"#))).is_ok());
    // A slice from 1 to 3 µs and a flow inside it, from its start to its end.
    let slice = r#"{"ph":"X","pid":1,"tid":1,"ts":1.0,"dur":2.0,"name":"x"}"#;
    let flow = r#"{"ph":"s","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n"},{"ph":"f","id":1,"pid":1,"tid":1,"ts":2.5,"cat":"c","name":"n","bp":"e"}"#;
    assert_eq!(check_chrome_json(&doc(&format!("{named},{slice},{flow}"))).map(|c| c.flows), Ok(1));
    for (bad, why) in [
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":-7111125260410667223,"ts":1,"dur":1,"name":"x"}}"#), "tid"),
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":4294967296,"ts":1,"dur":1,"name":"x"}}"#), "32 bits"),
        (format!(r#"{named},{named}"#), "named twice"),
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":1,"ts":1,"dur":-1,"name":"x"}}"#), "negative"),
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":2,"ts":1,"dur":1,"name":"x"}}"#), "no thread_name"),
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":1,"ts":1,"dur":5,"name":"x"}},{{"ph":"X","pid":1,"tid":1,"ts":2,"dur":5,"name":"y"}}"#), "overlaps"),
        (format!(r#"{named},{{"ph":"B","pid":1,"tid":1,"ts":1,"name":"x"}}"#), "B without E"),
        (format!(r#"{named},{{"ph":"X","pid":1,"tid":1,"ts":1,"dur":1,"name":"x","args":[1]}}"#), "object"),
        (format!(r#"{named},{{"ph":"Q","pid":1,"tid":1,"ts":1}}"#), "not a trace event type"),
        (format!(r#"{named},{x},{{"ph":"s","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n"}}"#, x = slice), "`s`"),
        (format!(r#"{named},{x},{{"ph":"s","id":1,"pid":1,"tid":1,"ts":2.5,"cat":"c","name":"n"}},{{"ph":"f","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n","bp":"e"}}"#, x = slice), "`fs`"),
        (format!(r#"{named},{x},{{"ph":"s","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n"}},{{"ph":"f","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n","bp":"e"}}"#, x = slice), "tie"),
        (format!(r#"{named},{x},{{"ph":"s","id":1,"pid":1,"tid":1,"ts":0.5,"cat":"c","name":"n"}},{{"ph":"f","id":1,"pid":1,"tid":1,"ts":2.5,"cat":"c","name":"n","bp":"e"}}"#, x = slice), "no slice to bind"),
        (format!(r#"{named},{x},{{"ph":"s","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"c","name":"n"}},{{"ph":"f","id":1,"pid":1,"tid":1,"ts":3.5,"cat":"c","name":"n"}}"#, x = slice), "no slice to bind"),
    ] {
        let err = check_chrome_json(&doc(&bad)).unwrap_err();
        assert!(err.contains(why), "{why}: {err}");
    }
    let with_unit = format!(r#"{{"traceEvents":[{named},{slice}],"displayTimeUnit":"ns"}}"#);
    assert!(check_chrome_json(&with_unit).unwrap_err().contains("displayTimeUnit"));
    let metadata_first = format!(r#"{{"metadata":{{}},"traceEvents":[{named},{slice}]}}"#);
    assert!(check_chrome_json(&metadata_first).unwrap_err().contains("first key"));
}

/// Stats of an event by name, as prost decodes them (independent of merge's renderer).
fn stats_by_name(plane: &distprof::xplane::XPlane, stats: &[distprof::xplane::XStat]) -> HashMap<String, Value> {
    use distprof::xplane::XStatValue::*;
    let name = |id: i64| plane.stat_metadata.get(&id).map(|m| m.name.clone()).unwrap_or_else(|| format!("stat{id}"));
    stats
        .iter()
        .map(|s| {
            let v = match &s.value {
                Some(Uint64Value(v)) => Value::from(*v),
                Some(Int64Value(v)) => Value::from(*v),
                Some(DoubleValue(v)) => Value::from(*v),
                Some(StrValue(v)) => Value::from(v.clone()),
                Some(RefValue(v)) => Value::from(name(*v as i64)),
                Some(BytesValue(b)) => Value::from(format!("<{} bytes>", b.len())),
                None => Value::Null,
            };
            (name(s.metadata_id), v)
        })
        .collect()
}

#[test]
fn chrome_json_has_32_bit_distinct_tids_per_line_and_the_events_stats_as_args() {
    use prost::Message;
    let tmp = tempfile::tempdir().unwrap();
    let synthetic_in = synthetic(&tmp.path().join("gen"), 2);
    for (name, inputs, extra) in [
        ("jax", jax_fixtures(), &["--allow-uncorrected"][..]),
        ("synthetic", synthetic_in, &[][..]),
    ] {
        let out = tmp.path().join(name);
        let mut args: Vec<&std::ffi::OsStr> = vec![inputs.as_os_str(), os("--out"), out.as_os_str(), os("--chrome")];
        args.extend(extra.iter().map(|s| os(s)));
        let report = run(&args);
        let text = std::fs::read_to_string(out.join("merged.trace.json")).unwrap();
        let checked = check_chrome_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let doc: Value = serde_json::from_str(&text).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        // Every line of every event plane is one named thread of its plane's process.
        let mut lines_total = 0;
        let mut with_args = 0;
        for n in report["nodes"].as_array().unwrap() {
            let bytes = std::fs::read(n["output"].as_str().unwrap()).unwrap();
            let space = distprof::xplane::XSpace::decode(bytes.as_slice()).unwrap();
            for plane in space.planes.iter().filter(|p| !p.name.starts_with("/host:distprof") && p.name != "Task Environment") {
                let pname = format!("node {} {} {}", n["node"], n["hostname"].as_str().unwrap(), plane.name);
                let pid = *checked.processes.iter().find(|(_, v)| **v == pname).unwrap_or_else(|| panic!("{name}: no process {pname}")).0;
                let tids: HashSet<u64> = checked.threads.keys().filter(|k| k.0 == pid).map(|k| k.1).collect();
                assert_eq!(tids.len(), plane.lines.len(), "{name}: {pname}: one distinct tid per line");
                lines_total += plane.lines.len();
                // The events of each line (up to 5000): their args hold the XEvent's stats (and
                // its metadata's) by name.
                for (i, line) in plane.lines.iter().enumerate() {
                    let tid = i as u64 + 1;
                    let json: Vec<&Value> = events
                        .iter()
                        .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == tid)
                        .take(5000)
                        .collect();
                    for (ev, j) in line.events.iter().zip(json) {
                        let meta = &plane.event_metadata[&ev.metadata_id];
                        let mut want = stats_by_name(plane, &meta.stats);
                        want.extend(stats_by_name(plane, &ev.stats));
                        let shown = if meta.display_name.is_empty() { &meta.name } else { &meta.display_name };
                        assert_eq!(j["name"].as_str().unwrap(), shown.as_str());
                        if want.is_empty() {
                            assert!(j["args"].is_null(), "{name}: {j}");
                            continue;
                        }
                        with_args += 1;
                        let got = j["args"].as_object().unwrap_or_else(|| panic!("{name}: no args on {j}"));
                        if got.contains_key("distprof_args_dropped") {
                            continue;
                        }
                        for (k, v) in &want {
                            let g = &got[k];
                            match v.as_str() {
                                // Long strings are cut to the documented cap.
                                Some(s) if s.len() > 256 => assert!(g.as_str().unwrap().ends_with("...")),
                                _ => assert_eq!(g, v, "{name}: stat {k} of {j}"),
                            }
                        }
                    }
                }
            }
        }
        assert!(lines_total >= 3, "{name}");
        assert!(with_args > 10, "{name}: only {with_args} events with args");
        assert!(checked.events > 1000, "{name}");
    }
    // The synthetic events carry hlo_op as a reference stat: resolved to its name.
    let text = std::fs::read_to_string(tmp.path().join("synthetic/merged.trace.json")).unwrap();
    assert!(text.contains("\"args\":{\"correlation_id\":7,\"hlo_op\":\"all-reduce.1\"}"), "{}", &text[..2000]);
}

#[test]
fn progress_meter_goes_to_stderr_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = jax_fixtures();
    let out = distprof()
        .arg("merge")
        .arg(&fx)
        .arg("--out")
        .arg(tmp.path().join("a"))
        .args(["--allow-uncorrected", "--json", "--progress"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MB/s, ETA"), "{err}");
    // stdout stays one JSON document.
    serde_json::from_slice::<Value>(&out.stdout).unwrap();
    let quiet = distprof().arg("merge").arg(&fx).arg("--out").arg(tmp.path().join("b")).args(["--allow-uncorrected", "--json"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("MB/s"));
}
