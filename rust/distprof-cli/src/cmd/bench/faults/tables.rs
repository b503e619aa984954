//! The fault suite's tables: per network scenario, and per rendezvous (store) scenario.

use super::{ScenarioResult, MAX_BOUND_NS};

pub(super) fn print_table(results: &[ScenarioResult]) {
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}", v / 1e3));
    println!(
        "{:<12} {:>7} {:>6} {:>7} {:>5} {:>7} {:>4} {:>7} {:>5} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7}",
        "scenario", "packets", "faults", "crashes", "hangs", "windows", "lost", "down_w", "lossy", "rss_MiB", "p50_us", "p99_us", "bound_us", "in_bound", "flag%"
    );
    for r in results {
        println!(
            "{:<12} {:>7} {:>6} {:>7} {:>5} {:>7} {:>4} {:>7} {:>5} {:>7.1} {:>7} {:>7} {:>8} {:>8} {:>7.0}",
            r.name,
            r.relay_received,
            r.faults.values().sum::<u64>(),
            r.crashes,
            r.hangs,
            format!("{}/{}", r.windows_written, r.windows_expected),
            r.windows_lost,
            r.flagged_windows,
            r.windows_with_lost_probes,
            r.peak_rss_mib,
            us(r.p50_offset_error_ns),
            us(r.p99_offset_error_ns),
            us(r.bound_ns_p50),
            format!("{}/{}", r.node_windows_within_bound, r.node_windows_estimated),
            r.flagged_fraction * 100.0,
        );
    }
    println!(
        "columns: packets = datagrams into the relay; faults = injected (below by kind); windows = written/expected \
         by nodes that stayed up; down_w / lossy = node-windows with an edge down / with lost probes; \
         offset error vs truth over non-reference node-windows; in_bound = windows whose error <= bound; \
         flag% = windows the estimator flagged (bound > {} us)",
        MAX_BOUND_NS / 1000
    );
    for r in results {
        println!("{}: faults {:?}; drops {:?}", r.name, r.faults, r.dropped);
        if let Some(f) = &r.flood {
            println!(
                "{}: flood sent {:?}; counted at node 1 {:?}; kernel socket-buffer drops {:?}",
                r.name, f, r.dropped_at_target, r.kernel_rcvbuf_drops
            );
        }
    }
}

pub(super) fn print_store_table<'a>(rows: impl Iterator<Item = &'a super::super::store_faults::StoreScenario>) {
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    println!("\n{:<12} {:>5} {:>8} {:>7} {:>5} {:>8} {:>6} {:>9} {:>9} {:>9} {:>8}", "rendezvous", "ranks", "timeout", "crashes", "hangs", "failures", "agreed", "p50_ms", "max_ms", "late_ms", "flood");
    for r in rows {
        println!(
            "{:<12} {:>5} {:>8} {:>7} {:>5} {:>8} {:>6} {:>9} {:>9} {:>9} {:>8}",
            r.name,
            r.ranks,
            r.rendezvous_timeout_ms,
            r.crashes,
            r.hangs,
            r.failures,
            r.agreed,
            ms(r.time_to_agree_p50_ms),
            ms(r.time_to_agree_max_ms),
            ms(r.late_rank_time_to_agree_ms),
            ms(r.flood_connections_held)
        );
    }
}
