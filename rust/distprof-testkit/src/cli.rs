//! Running the `distprof` binary from an integration test: one way to start it, and one way
//! to pick a free port for the nodes it spawns.

use std::path::PathBuf;
use std::process::Command;

/// The `distprof` binary built for the running test: cargo builds a package's binaries before
/// its integration tests and puts them one level above the test executable
/// (`target/<profile>/deps/<test>` next to `target/<profile>/distprof`). nextest also names
/// it in `NEXTEST_BIN_EXE_distprof` at run time, which wins when set.
pub fn distprof_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NEXTEST_BIN_EXE_distprof") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("distprof"))
        .expect("the test executable lies in target/<profile>/deps");
    assert!(
        bin.is_file(),
        "{} does not exist: build it with `cargo build -p distprof-cli` (cargo test and nextest \
         build it before the cli's integration tests)",
        bin.display()
    );
    bin
}

/// The binary with every distprof variable of the caller's environment removed (so it cannot
/// leak into a test) and logging at `warn`, so stderr holds only what a test asserts on.
pub fn distprof() -> Command {
    let mut cmd = Command::new(distprof_bin());
    for var in distprof::config::fields::all_env_vars() {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the listener that found it is closed
/// on return; a test that races another process for it fails loudly, not silently).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0")
        .port()
}
