//! Data safety under `kill -9`, at many seeded random moments:
//! - probing nodes (`distprof run`, 4 real processes over loopback): after every kill, each
//!   node's JSONL file is absent (killed before it existed) or readable by
//!   `distprof::jsonl::read`: its meta line whole, every closed window parses, window ids
//!   run 0, 1, 2, ... without a gap, and every window the node announced as written (its
//!   debug log line, printed after the write returned) is there; at most a cut-off last
//!   line, which the reader reports;
//! - `distprof merge` (whole-file outputs): after every kill, every `.xplane.pb` and the
//!   Chrome JSON in the output is a whole file (decodes / parses): the previous complete
//!   output or the new complete one, never a prefix.
//!
//! Each test prints one `FIGURE` line with its counts (kills, windows checked, windows
//! lost, torn lines) for the README's "Failure behaviour" section.
//! `DISTPROF_KILL_SEED` changes the seed (default 9).

use distprof_testkit::cli::{distprof, free_port};
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Prints a figure line and keeps it for `tests/steps/90-failure-figures.sh`, which shows
/// it in CI (a passing test's output is not shown).
fn record_figure(test: &str, line: String) {
    eprintln!("{line}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("failure-figures");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{test}.txt")), format!("{line}\n")).unwrap();
}

fn seed() -> u64 {
    std::env::var("DISTPROF_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(9)
}

/// splitmix64: a seeded, dependency-free source of kill moments.
struct Rng(u64);
impl Rng {
    fn seeded() -> Self {
        Rng(seed())
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = (hi - lo).as_micros() as u64;
        lo + Duration::from_micros(self.next() % span.max(1))
    }
}

/// SIGKILL, if the child still runs; true when this call killed it.
fn kill9(child: &mut Child) -> bool {
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    true
}

#[derive(Default, Debug)]
struct Counts {
    kills: u32,
    files: u32,
    files_absent: u32,
    windows_checked: u64,
    windows_lost: u64,
    /// Windows the killed nodes had announced as written before their kill.
    windows_announced: u64,
    torn_lines: u32,
}

/// The windows a node announced as written on stderr (`window written` at debug level,
/// logged after the write returned): the ones a kill must not take away.
fn windows_announced(stderr: &Path) -> u64 {
    let text = std::fs::read_to_string(stderr).unwrap_or_default();
    text.lines().filter(|l| l.contains("window written")).count() as u64
}

/// One node's file after its process was killed (`announced` holds the windows it said it
/// had written; `None` if it ended by itself); every problem is a lost window: a line that
/// does not parse, a gap in the window ids, or fewer windows than announced.
fn check_node_file(path: &Path, node: u32, announced: Option<u64>, counts: &mut Counts) {
    if !path.exists() {
        counts.files_absent += 1;
        return;
    }
    counts.files += 1;
    match distprof::jsonl::read(path) {
        Ok(f) => {
            assert_eq!(f.meta.node, node, "{}", path.display());
            counts.windows_checked += f.windows.len() as u64;
            counts.torn_lines += u32::from(f.truncated_tail);
            if let Some(announced) = announced {
                counts.windows_announced += announced;
                let missing = announced.saturating_sub(f.windows.len() as u64);
                if missing > 0 {
                    eprintln!("{}: {} windows, but the node had announced {announced}", path.display(), f.windows.len());
                }
                counts.windows_lost += missing;
            }
            for (i, w) in f.windows.iter().enumerate() {
                if w.window_id != i as u64 || w.node != node {
                    counts.windows_lost += 1;
                    eprintln!("{}: line {} holds window {} of node {}, want window {i} of node {node}", path.display(), i + 2, w.window_id, w.node);
                }
            }
        }
        Err(e) => {
            counts.windows_lost += 1;
            eprintln!("unreadable after kill -9: {e}");
        }
    }
}

#[test]
fn kill9_of_probing_nodes_never_loses_a_closed_window() {
    const ROUNDS: u32 = 6;
    const NODES: u32 = 4;
    let mut rng = Rng::seeded();
    let mut counts = Counts::default();
    let started = Instant::now();
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = dir.path().join("config.json");
        // Short windows at a fast cadence: many window lines (each ~10-20 KB) per second,
        // so kills land during writes as well as between them.
        std::fs::write(
            &cfg,
            serde_json::json!({
                "output_dir": out,
                "probe_window_s": 0.1,
                "probe_cadence_us": 2000,
            })
            .to_string(),
        )
        .unwrap();
        let store = format!("127.0.0.1:{}", free_port());
        let mut children: Vec<(u32, Child, Duration)> = (0..NODES)
            .map(|rank| {
                let child = distprof()
                    .args(["run", "--rank", &rank.to_string(), "--nodes", &NODES.to_string()])
                    .args(["--rendezvous", &store, "--bind", "127.0.0.1", "--duration", "5"])
                    .args(["--rendezvous-timeout-ms", "5000"])
                    .arg("--config")
                    .arg(&cfg)
                    .env("XLA_DIST_PROF_LOG", "warn,distprof::jsonl=debug")
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.path().join(format!("node{rank}.stderr"))).unwrap())
                    .spawn()
                    .unwrap();
                // Most kills after the rendezvous (~0.1-0.3 s), some during it.
                let at = rng.between(Duration::from_millis(150), Duration::from_millis(2500));
                (rank, child, at)
            })
            .collect();
        let t0 = Instant::now();
        children.sort_by_key(|c| c.2);
        let mut killed = vec![false; NODES as usize];
        for (rank, child, at) in &mut children {
            std::thread::sleep(at.saturating_sub(t0.elapsed()));
            if kill9(child) {
                counts.kills += 1;
                killed[*rank as usize] = true;
            } else {
                eprintln!("round {round}: node {rank} had already ended before its kill at {at:?}");
            }
        }
        for rank in 0..NODES {
            let path = out.join(distprof::jsonl::file_name(rank));
            let announced = killed[rank as usize].then(|| windows_announced(&dir.path().join(format!("node{rank}.stderr"))));
            check_node_file(&path, rank, announced, &mut counts);
        }
    }
    record_figure(
        "kill9_probing_nodes",
        format!(
        "FIGURE kill9 probing nodes (seed {}): kills={} files={} files_absent={} windows_checked={} windows_announced_before_kill={} windows_lost={} torn_lines={} ({:.1} s)",
        seed(),
        counts.kills,
        counts.files,
        counts.files_absent,
        counts.windows_checked,
        counts.windows_announced,
        counts.windows_lost,
        counts.torn_lines,
        started.elapsed().as_secs_f64()
    ));
    assert_eq!(counts.windows_lost, 0, "{counts:?}");
    assert!(counts.kills >= ROUNDS * NODES * 3 / 4, "too few kills landed: {counts:?}");
    assert!(counts.windows_checked >= 100, "the kills came too early to test anything: {counts:?}");
    assert!(counts.windows_announced >= 100, "no node announced its windows (log filter?): {counts:?}");
}

/// Whether `bytes` are a Perfetto `Trace`: packets (field 1, length-delimited) that end
/// exactly at its end.
fn whole_packets(bytes: &[u8]) -> bool {
    let varint = |pos: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *bytes.get(*pos)?;
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    };
    let mut pos = 0;
    while pos < bytes.len() {
        if varint(&mut pos) != Some(0x0a) {
            return false;
        }
        match varint(&mut pos) {
            Some(len) if pos as u64 + len <= bytes.len() as u64 => pos += len as usize,
            _ => return false,
        }
    }
    true
}

/// Every visible output of a merge is whole: each `.xplane.pb` decodes, the Chrome JSON
/// parses, merged.pftrace is whole packets. Returns (whole files, hidden temporary files left by the kill).
fn check_merge_output(out: &Path) -> (u32, u32) {
    let (mut whole, mut temps) = (0, 0);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() { stack.push(p) } else { files.push(p) }
        }
    }
    for p in files {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') && name.contains(".tmp-") {
            temps += 1;
        } else if name.ends_with(".xplane.pb") {
            let bytes = std::fs::read(&p).unwrap();
            distprof::xplane::XSpace::decode(bytes.as_slice())
                .unwrap_or_else(|e| panic!("{} is not a whole XSpace after kill -9: {e}", p.display()));
            whole += 1;
        } else if name.ends_with(".json") {
            let text = std::fs::read_to_string(&p).unwrap();
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{} is not whole JSON after kill -9: {e}", p.display()));
            whole += 1;
        } else if name.ends_with(".pftrace") {
            let bytes = std::fs::read(&p).unwrap();
            assert!(whole_packets(&bytes), "{} is not whole TracePackets after kill -9", p.display());
            whole += 1;
        } else {
            panic!("unexpected file in the merge output: {}", p.display());
        }
    }
    (whole, temps)
}

#[test]
fn kill9_of_merge_never_leaves_a_partial_output() {
    const KILLS: u32 = 10;
    let dir = tempfile::tempdir().unwrap();
    // Synthetic per-node traces (with distprof planes) from the merge benchmark.
    let gen = distprof()
        .args(["bench", "merge", "--size-mb", "3", "--nodes", "2", "--skip-baseline", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    let inputs: Vec<PathBuf> = (0..2).map(|k| dir.path().join(format!("in/node{k}.xplane.pb"))).collect();
    let out = dir.path().join("merged");
    let merge = || {
        let mut c = distprof();
        c.arg("merge").args(&inputs).arg("--out").arg(&out).stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    // A complete merge first: its outputs are the "old" files each killed merge replaces.
    let t = Instant::now();
    assert!(merge().status().unwrap().success());
    let full = t.elapsed();
    let (whole, _) = check_merge_output(&out);
    assert_eq!(whole, 3, "two traces and the Chrome JSON");

    let mut rng = Rng::seeded();
    let (mut kills, mut temps_left) = (0, 0);
    for _ in 0..KILLS {
        let mut child = merge().spawn().unwrap();
        std::thread::sleep(rng.between(Duration::from_millis(5), full));
        kills += u32::from(kill9(&mut child));
        let (whole, temps) = check_merge_output(&out);
        assert_eq!(whole, 3, "an output vanished");
        temps_left = temps;
    }
    // The next merge succeeds and removes the temporaries the killed ones left.
    assert!(merge().status().unwrap().success());
    assert_eq!(check_merge_output(&out), (3, 0));
    record_figure(
        "kill9_merge",
        format!(
            "FIGURE kill9 merge (seed {}): kills={kills} of {KILLS} (merge takes {:.2} s) partial_outputs=0 temporaries_left_by_kills={temps_left} (removed by the next merge)",
            seed(),
            full.as_secs_f64()
        ),
    );
    assert!(kills >= KILLS / 2, "most kills must land while the merge runs: {kills}");
}
