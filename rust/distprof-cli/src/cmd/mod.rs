//! One module per subcommand; each has `Args` and `run(args)`.

pub mod bench;
pub mod config;
pub mod local;
pub mod merge;
pub mod report;
pub mod run;
pub mod simulate;
pub mod spelling;
pub mod validate;
pub mod xla;
