//! The simulator's named clock scenarios as a command-line value: `simulate --scenario`
//! runs one, `local --clock-scenario` emulates what real processes can of it. One parser,
//! so both commands list the same names with the same descriptions.

use distprof_sim::cluster::scenarios;

/// The named scenarios as clap's possible values, each with its description for `--help`.
pub fn clock_scenarios() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        scenarios::SCENARIOS.iter().map(|s| clap::builder::PossibleValue::new(s.name).help(s.what)),
    )
}
