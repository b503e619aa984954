//! `distprof bench accuracy` refuses bad scenario flags before simulating anything, naming
//! the flag, the value and what it accepts.

use distprof_testkit::cli::distprof;

fn accuracy(args: &[&str]) -> (bool, String, String) {
    let out = distprof()
        .args(["bench", "accuracy", "--local-nodes", "0"])
        .args(args)
        .output()
        .expect("running distprof");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_scenario_flags_are_named_and_nothing_runs() {
    for (args, named) in [
        (&["--nodes", "1"][..], "--nodes 1: each node count must be in 2..=16384"),
        (&["--nodes", "8", "--packet-jitter-ns=-5"][..], "--packet-jitter-ns -5: must be a number of ns >= 0"),
        (&["--nodes", "8", "--packet-jitter-ns", "NaN"][..], "--packet-jitter-ns NaN"),
    ] {
        let (ok, stdout, stderr) = accuracy(args);
        assert!(!ok, "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: stderr does not name the flag: {stderr}");
        assert!(!stdout.contains("simulation"), "{args:?}: rows were printed before the error: {stdout}");
    }
}
