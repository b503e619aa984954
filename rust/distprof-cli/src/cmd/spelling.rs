//! One spelling per concept on the command line: `--duration` for a length of time in
//! seconds, `--out` for where output goes (a directory or a file, as the command says).
//! Spellings of earlier versions are still accepted, with a warning on stderr, by
//! rewriting them before the arguments are parsed.

use std::ffi::OsString;

/// (subcommand, old spelling, new spelling). The subcommand is the last command word
/// before the flag (`faults` for `distprof bench faults`).
const OLD_SPELLINGS: &[(&str, &str, &str)] = &[
    ("simulate", "--duration-s", "--duration"),
    ("local", "--output-dir", "--out"),
    ("faults", "--output-dir", "--out"),
];

/// `args` (the program name first) with every old spelling replaced by the new one; each
/// replacement is reported as a warning through `warn`.
pub fn modernize(args: Vec<OsString>, warn: &mut dyn FnMut(String)) -> Vec<OsString> {
    let mut command: Option<String> = None;
    let mut out = Vec::with_capacity(args.len());
    for (i, arg) in args.into_iter().enumerate() {
        let Some(text) = arg.to_str().map(str::to_owned) else {
            out.push(arg);
            continue;
        };
        if i > 0 && !text.starts_with('-') && OLD_SPELLINGS.iter().any(|(c, ..)| *c == text) && command.is_none() {
            command = Some(text.clone());
        } else if let Some(cmd) = &command {
            let (flag, value) = match text.split_once('=') {
                Some((f, v)) => (f, Some(v)),
                None => (text.as_str(), None),
            };
            if let Some((_, old, new)) = OLD_SPELLINGS.iter().find(|(c, old, _)| c == cmd && *old == flag) {
                warn(format!("`{old}` is now spelled `{new}` (`distprof {cmd} {new} ...`); the old spelling will be removed"));
                out.push(OsString::from(match value {
                    Some(v) => format!("{new}={v}"),
                    None => new.to_string(),
                }));
                continue;
            }
        }
        out.push(arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let mut warnings = Vec::new();
        let out = modernize(args.iter().map(OsString::from).collect(), &mut |w| warnings.push(w));
        (out.into_iter().map(|a| a.into_string().unwrap()).collect(), warnings)
    }

    #[test]
    fn old_spellings_become_new_ones_with_a_warning() {
        let (args, warnings) = run(&["distprof", "simulate", "--duration-s", "12", "--out", "d"]);
        assert_eq!(args, ["distprof", "simulate", "--duration", "12", "--out", "d"]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("`--duration-s` is now spelled `--duration`"), "{}", warnings[0]);
        let (args, _) = run(&["distprof", "local", "--output-dir=/tmp/x"]);
        assert_eq!(args, ["distprof", "local", "--out=/tmp/x"]);
        let (args, warnings) = run(&["distprof", "bench", "faults", "--output-dir", "x"]);
        assert_eq!((args[3].as_str(), warnings.len()), ("--out", 1));
    }

    #[test]
    fn new_spellings_and_other_commands_are_left_alone() {
        for line in [&["distprof", "simulate", "--duration", "12"][..], &["distprof", "run", "--duration-s", "3"]] {
            let (args, warnings) = run(line);
            assert_eq!(args, line, "{line:?}");
            assert!(warnings.is_empty());
        }
    }
}
