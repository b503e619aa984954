//! `distprof config` through the real binary: exit codes, every problem listed with its
//! location, precedence visible in `config show`, logs on stderr only.

use distprof_testkit::cli::distprof;
use distprof::config::fields;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("running distprof");
    (
        status.code().expect("exited normally"),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn presets_check_clean() {
    let dir = repo_root().join("examples/configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4);
    let (code, stdout, stderr) = run(distprof().arg("config").arg("check").args(&files));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for f in &files {
        assert!(stdout.contains(&format!("{}: ok", f.display())), "{stdout}");
    }
}

#[test]
fn three_mistakes_give_three_located_errors_and_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = write(
        tmp.path(),
        "bad.json",
        r#"{
            "description": "three different mistakes",
            "probe_cadance_us": 30000,
            "enabled": "yes",
            "probe_out_degree": 0
        }"#,
    );
    let good = repo_root().join("examples/configs/low-overhead.json");
    let (code, stdout, stderr) = run(distprof().args(["config", "check"]).arg(&bad).arg(&good));
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let b = bad.display();
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{b}: ")))
        .collect();
    assert_eq!(problems.len(), 3, "{stdout}");
    // Unknown key, with the suggestion.
    assert!(
        problems[0].starts_with(&format!("{b}: $.probe_cadance_us: unknown key")),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].contains("did you mean `probe_cadence_us`?"),
        "{}",
        problems[0]
    );
    // Wrong type, naming the value and the fix.
    assert_eq!(problems[1], format!("{b}: $.enabled: \"yes\" is a string, not a boolean; fix: write true or false (no quotes)"));
    // Out of range, with the allowed range.
    assert!(
        problems[2].starts_with(&format!(
            "{b}: $.probe_out_degree: probe_out_degree = 0 is below the minimum 1"
        )),
        "{}",
        problems[2]
    );
    assert!(
        problems[2].ends_with("fix: set probe_out_degree to an integer in 1..=64"),
        "{}",
        problems[2]
    );
    // The good file is still judged, and judged good.
    assert!(
        stdout.contains(&format!("{}: ok", good.display())),
        "{stdout}"
    );
    assert!(
        stderr.contains("3 problem(s) in 1 of 2 file(s)"),
        "{stderr}"
    );
}

#[test]
fn unreadable_and_malformed_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = write(tmp.path(), "broken.json", "{\"enabled\": true,\n}");
    let missing = tmp.path().join("missing.json");
    let (code, stdout, _) = run(distprof()
        .args(["config", "check"])
        .arg(&broken)
        .arg(&missing));
    assert_eq!(code, 1);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "{}: not valid JSON: trailing comma at line 2 column 1",
            broken.display()
        )),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with(&format!(
            "{}: cannot read {}",
            missing.display(),
            missing.display()
        )),
        "{}",
        lines[1]
    );
}

#[test]
fn malformed_variable_is_named() {
    let (code, stdout, stderr) = run(distprof()
        .args(["config", "show"])
        .env("XLA_PROBE_CADENCE_US", "fast"));
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.is_empty(),
        "nothing on stdout when invalid: {stdout}"
    );
    assert!(
        stderr.contains("environment variable XLA_PROBE_CADENCE_US: \"fast\" is not a whole number; fix: set an integer in 1000..=10000000"),
        "{stderr}"
    );
    assert!(
        stderr.contains("distributed profiling would stay off"),
        "{stderr}"
    );

    let (code, _, stderr) = run(distprof()
        .args(["config", "show"])
        .env("XLA_ENABLE_DISTRIBUTED_PROFILING", "maybe"));
    assert_eq!(code, 1);
    assert!(
        stderr.contains(
            "environment variable XLA_ENABLE_DISTRIBUTED_PROFILING: \"maybe\" is not a boolean"
        ),
        "{stderr}"
    );
}

/// Parses the `config show` table into (field -> (value, source)).
fn parse_table(stdout: &str) -> std::collections::BTreeMap<String, (String, String)> {
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["field", "value", "source"]);
    lines
        .map(|l| {
            // Columns are separated by at least two spaces; no value here contains two.
            let cols: Vec<&str> = l
                .split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            assert_eq!(cols.len(), 3, "{l}");
            (
                cols[0].to_string(),
                (cols[1].to_string(), cols[2].to_string()),
            )
        })
        .collect()
}

#[test]
fn show_demonstrates_precedence() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(
        tmp.path(),
        "my.json",
        r#"{"probe_cadence_us": 30000, "probe_window_s": 8, "estimator": "ntp"}"#,
    );
    let (code, stdout, stderr) = run(distprof()
        .args(["config", "show"])
        .env("XLA_DIST_PROF_CONFIG", &file)
        .env("XLA_PROBE_CADENCE_US", "50000")
        .env("XLA_DIST_PROF_PROBE_PORT", "9000"));
    assert_eq!(code, 0, "{stderr}");
    let table = parse_table(&stdout);
    assert_eq!(table.len(), fields::FIELDS.len());
    let from_file = format!("file {}", file.display());
    // env beats file
    assert_eq!(
        table["probe_cadence_us"],
        ("50000".into(), "env XLA_PROBE_CADENCE_US".into())
    );
    // file beats default
    assert_eq!(table["probe_window_s"], ("8.0".into(), from_file.clone()));
    assert_eq!(table["estimator"], ("\"ntp\"".into(), from_file));
    // env alone
    assert_eq!(
        table["probe_port"],
        ("9000".into(), "env XLA_DIST_PROF_PROBE_PORT".into())
    );
    // untouched
    assert_eq!(table["packet_spacing_us"], ("50".into(), "default".into()));
    assert_eq!(table["enabled"], ("false".into(), "default".into()));

    // The JSON form says the same.
    let (code, stdout, _) = run(distprof()
        .args(["config", "show", "--json"])
        .env("XLA_DIST_PROF_CONFIG", &file)
        .env("XLA_PROBE_CADENCE_US", "50000"));
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["config"]["probe_cadence_us"], 50000);
    assert_eq!(doc["config"]["probe_window_s"], 8.0);
    assert_eq!(
        doc["sources"]["probe_cadence_us"],
        "env XLA_PROBE_CADENCE_US"
    );
    assert_eq!(
        doc["sources"]["probe_window_s"],
        format!("file {}", file.display())
    );
    assert_eq!(doc["sources"]["graph_seed"], "default");
    assert_eq!(doc["digest"].as_str().unwrap().len(), 32);
}

#[test]
fn logs_go_to_stderr_never_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "my.json", r#"{"enabled": true}"#);
    let (code, stdout, stderr) = run(distprof()
        .args(["config", "show", "--json"])
        .env("XLA_DIST_PROF_CONFIG", &file)
        .env("XLA_DIST_PROF_LOG", "debug")
        .env("XLA_PROBE_CADENCE_MS", "1"));
    assert_eq!(code, 0, "{stderr}");
    // stdout is exactly one JSON document: no log line slipped in.
    serde_json::from_str::<serde_json::Value>(&stdout).unwrap();
    assert!(stderr.contains("reading config file"), "{stderr}");
    assert!(
        stderr.contains("did you mean XLA_PROBE_CADENCE_US?"),
        "{stderr}"
    );
    assert!(!stdout.contains("DEBUG") && !stdout.contains("WARN"));
}

#[test]
fn schema_command_prints_the_checked_in_schema() {
    let (code, stdout, _) = run(distprof().args(["config", "schema"]));
    assert_eq!(code, 0);
    let on_disk =
        std::fs::read_to_string(repo_root().join("schema/distprof-config.schema.json")).unwrap();
    assert_eq!(stdout, on_disk);
    let schema: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(schema["properties"]["probe_cadence_us"]["minimum"], 1000);
}

#[test]
fn check_without_files_is_a_usage_error() {
    let (code, _, stderr) = run(distprof().args(["config", "check"]));
    assert_eq!(code, 2);
    assert!(
        stderr.contains("FILE") || stderr.contains("<FILES>"),
        "{stderr}"
    );
}

/// Paths that are not config files: each must be a named error at once, never a read that
/// blocks (a FIFO without a writer) or runs without end (`/dev/zero`).
fn hostile_config_paths(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let fifo = dir.join("config.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let big = dir.join("big.json");
    // Sparse: 100 MB long without writing 100 MB.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 * 1024 * 1024)
        .unwrap();
    vec![
        (fifo, "is a FIFO (named pipe), not a regular file"),
        (PathBuf::from("/dev/zero"), "is a device, not a regular file"),
        (dir.to_path_buf(), "is a directory, not a regular file"),
        (big, "is 104857600 bytes, over the 1048576-byte limit"),
    ]
}

/// Runs `cmd`, killing it after `limit` so a regression fails instead of hanging the suite.
fn run_within(cmd: &mut Command, limit: std::time::Duration) -> (i32, String, String, std::time::Duration) {
    use std::io::Read;
    let start = std::time::Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running distprof");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("distprof ran for over {limit:?}: {cmd:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code().expect("exited normally"), out, err, elapsed)
}

#[test]
fn fifo_device_directory_and_huge_file_are_named_errors_within_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    // Generous against a hang (the bug blocked forever), tight against the 1 s goal below.
    let kill_after = std::time::Duration::from_secs(10);
    let goal = std::time::Duration::from_secs(1);
    for (path, problem) in hostile_config_paths(tmp.path()) {
        // `distprof config check FILE`.
        let (code, stdout, _, took) =
            run_within(distprof().args(["config", "check"]).arg(&path), kill_after);
        assert_eq!(code, 1, "{}: {stdout}", path.display());
        assert!(stdout.contains(&format!("{} {problem}", path.display())), "{stdout}");
        assert!(stdout.contains("fix: give the path of"), "{stdout}");
        assert!(took < goal, "config check {}: {took:?}", path.display());
        // The environment variable, as `distprof run` and the XLA plugin read it.
        let (code, _, stderr, took) = run_within(
            distprof()
                .args(["config", "show"])
                .env("XLA_DIST_PROF_CONFIG", &path),
            kill_after,
        );
        assert_ne!(code, 0, "{}", path.display());
        assert!(
            stderr.contains(&format!("environment variable XLA_DIST_PROF_CONFIG: {} {problem}", path.display())),
            "{stderr}"
        );
        assert!(stderr.contains("fix: point XLA_DIST_PROF_CONFIG at"), "{stderr}");
        assert!(took < goal, "config show {}: {took:?}", path.display());
        // `distprof run --config FILE` fails on the file before it binds or waits.
        let (code, _, stderr, took) = run_within(
            distprof()
                .args(["run", "--rank", "0", "--nodes", "1", "--rendezvous-only", "--config"])
                .arg(&path),
            kill_after,
        );
        assert_ne!(code, 0, "{}", path.display());
        assert!(stderr.contains(&format!("{} {problem}", path.display())), "{stderr}");
        // Blamed on the flag the user gave, not on the variable they did not set.
        assert!(stderr.contains("fix: give --config the path of"), "{stderr}");
        assert!(!stderr.contains("XLA_DIST_PROF_CONFIG"), "{stderr}");
        assert!(took < goal, "run --config {}: {took:?}", path.display());
    }
}
