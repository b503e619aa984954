//! `distprof report` end to end: the real binary writes the page, headless Chromium (Debian's
//! `chromium`, installed by tests/setup/50-chromium.sh) renders it.

use distprof_testkit::cli::distprof;
use distprof_sim::cluster::{Cluster, Scenario};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The page must stay small enough to mail and to open on a laptop.
const MAX_REPORT_BYTES: usize = 5 * 1024 * 1024;
/// From navigation start to the load event, layout included, as the page measures it.
const MAX_LOAD_MS: u64 = 2_000;
/// Upper bound on one Chromium run; on a loaded 2-core machine a start takes 1-3 s.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file());
    found.expect(
        "`chromium` is not on PATH: run tests/setup/50-chromium.sh (apt-get install -y chromium)",
    )
}

/// Runs a command, killing it after `timeout`; returns its output.
fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    // Read stdout on a thread: --dump-dom output can exceed the pipe buffer.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).ok();
        buf
    });
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let stdout = reader.join().unwrap();
            let mut stderr = Vec::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_end(&mut e, &mut stderr).ok();
            }
            return Output {
                status,
                stdout,
                stderr,
            };
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Headless Chromium with the flags that keep it off the network, in a fresh profile.
fn chromium_cmd(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]);
    c.arg(format!("--user-data-dir={}", profile.display()));
    c
}

fn write_report(args: &[&str], out: &Path) -> String {
    let output = run_with_timeout(
        distprof()
            .arg("report")
            .args(args)
            .arg("--out")
            .arg(out),
        Duration::from_secs(120),
    );
    assert!(
        output.status.success(),
        "distprof report failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The command prints the path it wrote, and nothing else, on stdout.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        out.display().to_string()
    );
    std::fs::read_to_string(out).expect("report written")
}

/// The page as Chromium's DOM after the load event, and the wall time of the whole run.
fn dump_dom(page: &Path, profile: &Path) -> (String, Duration) {
    let start = Instant::now();
    let out = run_with_timeout(
        chromium_cmd(profile)
            .arg("--dump-dom")
            .arg(format!("file://{}", page.display())),
        CHROMIUM_TIMEOUT,
    );
    let wall = start.elapsed();
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), wall)
}

fn load_ms(dom: &str) -> u64 {
    let key = "data-load-ms=\"";
    let at = dom
        .find(key)
        .expect("the page recorded no load time: did the load event fire?")
        + key.len();
    dom[at..]
        .split('"')
        .next()
        .unwrap()
        .parse()
        .expect("load time is a number")
}

struct Screenshot {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

fn screenshot(page: &Path, profile: &Path, png_path: &Path, w: u32, h: u32) -> Screenshot {
    let out = run_with_timeout(
        chromium_cmd(profile)
            .arg(format!("--screenshot={}", png_path.display()))
            .arg(format!("--window-size={w},{h}"))
            .arg(format!("file://{}", page.display())),
        CHROMIUM_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).expect("screenshot written"),
    ));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("png size")];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Screenshot {
        width: info.width,
        height: info.height,
        rgb,
    }
}

fn near(p: [u8; 3], c: [u8; 3], tol: i32) -> bool {
    (0..3).all(|i| (p[i] as i32 - c[i] as i32).abs() <= tol)
}

#[test]
fn report_from_json_input_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    // The input of a simulated 8-node run, as `report --run-dir` would build it.
    let mut scenario = Scenario::reference();
    scenario.nodes = 8;
    scenario.duration_s = 8.0;
    // Two windows to draw (the default window is 15 s).
    scenario.window_s = 4.0;
    scenario.seed = 3;
    let run_dir = tempfile::tempdir().unwrap();
    Cluster::new(scenario)
        .unwrap()
        .write_run_dir(run_dir.path(), &distprof::config::Config::default(), &mut |_, _| {})
        .unwrap();
    let input = distprof_offline::report::load::from_run_dir(run_dir.path()).unwrap();
    let json = dir.path().join("input.json");
    std::fs::write(&json, serde_json::to_vec(&input).unwrap()).unwrap();
    let page = dir.path().join("report.html");
    let html = write_report(&["--input", json.to_str().unwrap()], &page);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "temporary file left behind: {leftovers:?}"
    );

    // The SVGs are in the file and Chromium parsed them into the DOM: graph, histogram,
    // heatmap, one plot per node (8, all reachable) and per edge with data (capped at 12).
    let svgs = html.matches("<svg ").count();
    assert_eq!(svgs, 3 + 8 + 12);
    let profile = tempfile::tempdir().unwrap();
    let (dom, _) = dump_dom(&page, profile.path());
    assert_eq!(dom.matches("<svg ").count(), svgs);
    assert!(dom.contains("Rendered in "));

    let profile = tempfile::tempdir().unwrap();
    let shot = screenshot(
        &page,
        profile.path(),
        &dir.path().join("shot.png"),
        1280,
        1600,
    );
    assert_eq!((shot.width, shot.height), (1280, 1600));
    let total = shot.rgb.len();
    let non_white = shot
        .rgb
        .iter()
        .filter(|p| !near(**p, [255, 255, 255], 8))
        .count();
    assert!(
        non_white * 100 > total * 5,
        "screenshot nearly blank: {non_white} of {total} pixels drawn"
    );
    // The probe graph drew its nodes: blue for the reference, orange for nodes with flagged
    // windows (the simulated bounds, tens of µs, exceed the 10 µs limit), green if ok.
    let count = |c: [u8; 3]| shot.rgb.iter().filter(|p| near(**p, c, 24)).count();
    let (blue, orange, green) = (count([0x1f, 0x5f, 0xbf]), count([0xe0, 0x8e, 0x0b]), count([0x4a, 0x8f, 0x5a]));
    assert!(
        blue > 20 && orange + green > 200,
        "no graph nodes in the screenshot ({blue} blue, {orange} orange, {green} green pixels)"
    );
    let mut colors: Vec<[u8; 3]> = shot.rgb.clone();
    colors.sort_unstable();
    colors.dedup();
    assert!(colors.len() > 50, "only {} distinct colors", colors.len());
}

/// Issue 8's budget on a real 64-node run: `distprof simulate --out` writes the run
/// directory (one JSONL per node, as `distprof run` writes it), `distprof report --run-dir`
/// estimates it offline and draws it. Three 4 s windows keep the test short while every
/// panel is drawn from real records: 512 edges, ~150,000 probes, 26 MB of JSONL.
#[test]
fn report_of_a_64_node_simulated_run_is_small_and_opens_fast() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run64");
    let started = Instant::now();
    let sim = run_with_timeout(
        distprof()
            .args(["simulate", "--nodes", "64", "--duration", "12", "--window-s", "4", "--seed", "7", "--json", "--out"])
            .arg(&run_dir),
        Duration::from_secs(300),
    );
    assert!(sim.status.success(), "distprof simulate failed: {}", String::from_utf8_lossy(&sim.stderr));
    let simulate_wall = started.elapsed();
    let summary: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("simulate --json prints one JSON object");
    assert_eq!((summary["files"].as_u64(), summary["windows"].as_u64()), (Some(64), Some(3)), "{summary}");
    // 512 edges x 3 windows x 100 probe slots, ~4 % lost (1 % per packet).
    let records = summary["records"].as_u64().unwrap();
    assert!((140_000..=152_000).contains(&records), "{records} records");
    assert!(String::from_utf8_lossy(&sim.stderr).contains("node files written"), "no progress printed");

    let page = dir.path().join("report64.html");
    let started = Instant::now();
    let html = write_report(&["--run-dir", run_dir.to_str().unwrap()], &page);
    let report_wall = started.elapsed();
    assert!(
        html.len() < MAX_REPORT_BYTES,
        "64-node report is {} bytes",
        html.len()
    );
    assert!(html.contains("64 nodes, 512 edges"));
    assert!(!html.contains("Synthetic input"));
    // Every node has a model; the reference's windows are not counted as flagged or not.
    assert!(html.contains("all nodes have a model"));
    assert!(html.contains("/ 189</b>"), "flagged windows are counted over 63 nodes x 3 windows");

    // A trivial page first: the browser's own start-up, to tell it apart from our page.
    let blank = dir.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><title>blank</title><p>blank</p>").unwrap();
    let profile = tempfile::tempdir().unwrap();
    let (_, blank_wall) = dump_dom(&blank, profile.path());
    // The page measures itself (navigation start to load event, forced layout): the
    // number the budget is about. Best of three: other engineers share the two cores.
    let mut best_ms = u64::MAX;
    let mut walls = Vec::new();
    for _ in 0..3 {
        let profile = tempfile::tempdir().unwrap();
        let (dom, wall) = dump_dom(&page, profile.path());
        best_ms = best_ms.min(load_ms(&dom));
        walls.push(wall);
        if best_ms < MAX_LOAD_MS / 4 {
            break;
        }
    }
    eprintln!(
        "64-node simulated run: simulate {simulate_wall:?}, report {report_wall:?}; page {} bytes, load {best_ms} ms in page; chromium --dump-dom wall {walls:?} (blank page {blank_wall:?})",
        html.len()
    );
    assert!(
        best_ms < MAX_LOAD_MS,
        "the 64-node report took {best_ms} ms to load"
    );
}

#[test]
fn bad_input_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    // `distprof report --input FILE`: exit code 2 and its stderr.
    let report_input = |input: &std::path::Path| {
        let out = run_with_timeout(
            distprof().args(["report", "--input"]).arg(input).arg("--out").arg(dir.path().join("r.html")),
            Duration::from_secs(60),
        );
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = report_input(&dir.path().join("nope.json"));
    assert!(
        err.contains("nope.json") && err.contains("--input"),
        "{err}"
    );

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"facts\": {\"run_name\": 3}}").unwrap();
    let err = report_input(&bad);
    assert!(
        err.contains("bad.json") && err.contains("line 1") && err.contains("docs/report.md"),
        "{err}"
    );
    assert!(!dir.path().join("r.html").exists());
}
