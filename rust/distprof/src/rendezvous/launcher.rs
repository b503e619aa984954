//! Rank, node count and rendezvous address from the launcher's environment, so that
//! `distprof run` needs no flags under the launchers clusters use.
//!
//! | launcher | rank | node count | rendezvous address |
//! |---|---|---|---|
//! | PJRT (Ray, torch_xla) | `PJRT_PROCESS_INDEX` | `PJRT_NUM_PROCESSES` | `PJRT_COORDINATOR_ADDRESS` |
//! | torchrun | `RANK` | `WORLD_SIZE` | `MASTER_ADDR`:`MASTER_PORT` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | (flag, or `MASTER_ADDR`/`MASTER_PORT`) |
//! | Slurm | `SLURM_PROCID` | `SLURM_NTASKS` | (flag, or `MASTER_ADDR`/`MASTER_PORT`) |
//!
//! Rank and count always come from the same launcher (the first in this order that sets
//! both), never one from each. The address is `PJRT_COORDINATOR_ADDRESS`, else
//! `MASTER_ADDR`:`MASTER_PORT`, which Slurm and MPI job scripts commonly export too.

/// (launcher name, rank variable, size variable), in order of precedence.
pub const LAUNCHERS: &[(&str, &str, &str)] = &[
    ("PJRT", "PJRT_PROCESS_INDEX", "PJRT_NUM_PROCESSES"),
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
];

/// What the environment says; each part may be absent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchEnv {
    /// (rank, node count, the launcher they came from).
    pub rank_and_size: Option<(u32, u32, &'static str)>,
    /// `HOST:PORT` and the variable(s) it came from.
    pub rendezvous: Option<(String, &'static str)>,
}

/// Reads the launcher variables through `get` (the process environment in production,
/// a map in tests). A variable that is set but not a number is an error naming it.
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Result<LaunchEnv, String> {
    let get = |k: &str| {
        get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let number = |k: &str, v: String| -> Result<u32, String> {
        v.parse::<u32>()
            .map_err(|_| format!("environment variable {k}=`{v}` is not a non-negative integer"))
    };
    let mut env = LaunchEnv::default();
    for &(name, rank_var, size_var) in LAUNCHERS {
        if let (Some(r), Some(s)) = (get(rank_var), get(size_var)) {
            env.rank_and_size = Some((number(rank_var, r)?, number(size_var, s)?, name));
            break;
        }
    }
    if let Some(a) = get("PJRT_COORDINATOR_ADDRESS") {
        env.rendezvous = Some((a, "PJRT_COORDINATOR_ADDRESS"));
    } else if let (Some(host), Some(port)) = (get("MASTER_ADDR"), get("MASTER_PORT")) {
        number("MASTER_PORT", port.clone())?;
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        env.rendezvous = Some((format!("{host}:{port}"), "MASTER_ADDR/MASTER_PORT"));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_is_recognized() {
        let e = detect(env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8")])).unwrap();
        assert_eq!(
            e,
            LaunchEnv {
                rank_and_size: Some((3, 8, "Slurm")),
                rendezvous: None
            }
        );
        let e = detect(env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(e.rank_and_size, Some((1, 2, "Open MPI")));
        let e = detect(env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "n1"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        assert_eq!(
            e,
            LaunchEnv {
                rank_and_size: Some((0, 4, "torchrun")),
                rendezvous: Some(("n1:29500".into(), "MASTER_ADDR/MASTER_PORT"))
            }
        );
        let e = detect(env(&[
            ("PJRT_PROCESS_INDEX", "2"),
            ("PJRT_NUM_PROCESSES", "16"),
            ("PJRT_COORDINATOR_ADDRESS", "10.0.0.1:1234"),
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "99"),
        ]))
        .unwrap();
        assert_eq!(
            e,
            LaunchEnv {
                rank_and_size: Some((2, 16, "PJRT")),
                rendezvous: Some(("10.0.0.1:1234".into(), "PJRT_COORDINATOR_ADDRESS"))
            }
        );
    }

    #[test]
    fn rank_and_size_never_mix_launchers_and_ipv6_hosts_are_bracketed() {
        // torchrun's RANK without WORLD_SIZE is ignored; Slurm's pair is used whole.
        let e = detect(env(&[
            ("RANK", "5"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "fd00::1"),
            ("MASTER_PORT", "7"),
        ]))
        .unwrap();
        assert_eq!(e.rank_and_size, Some((1, 2, "Slurm")));
        assert_eq!(e.rendezvous.unwrap().0, "[fd00::1]:7");
    }

    #[test]
    fn bad_numbers_name_the_variable() {
        let err = detect(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(err.contains("RANK=`x`"), "{err}");
        assert_eq!(detect(env(&[])).unwrap(), LaunchEnv::default());
    }
}
