//! The `distprof` binary: the command line of this process, run by the library (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    distprof_cli::main(std::env::args_os().collect())
}
