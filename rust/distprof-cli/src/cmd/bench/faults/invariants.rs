//! The invariants every fault scenario must keep, judged from its measured result.

use super::ScenarioResult;

/// The invariants every scenario must keep; each failure says which and by how much.
pub(super) fn check(results: &[ScenarioResult], n: u32) -> Vec<String> {
    let mut v = Vec::new();
    let baseline_rss = results.iter().find(|r| r.name == "clean").map_or(0.0, |r| r.peak_rss_mib);
    for r in results {
        let name = r.name;
        if r.crashes != 0 {
            v.push(format!("{name}: {} node process(es) crashed", r.crashes));
        }
        if r.hangs != 0 {
            v.push(format!("{name}: {} node process(es) hung", r.hangs));
        }
        if r.windows_lost != 0 {
            v.push(format!("{name}: {} window(s) lost ({} written of {} expected)", r.windows_lost, r.windows_written, r.windows_expected));
        }
        if r.node_windows_within_bound != r.node_windows_estimated {
            v.push(format!(
                "{name}: {} of {} estimated node-windows outside their error bound",
                r.node_windows_estimated - r.node_windows_within_bound,
                r.node_windows_estimated
            ));
        }
        // Memory stays that of a clean run: no queue grows with the faults.
        if baseline_rss > 0.0 && r.peak_rss_mib > 2.0 * baseline_rss + 16.0 {
            v.push(format!("{name}: peak RSS {:.1} MiB against {:.1} MiB clean", r.peak_rss_mib, baseline_rss));
        }
        let drops = |k: &str| r.dropped.get(k).copied().unwrap_or(0);
        match name {
            "clean" if r.probes_lost != 0 || r.flagged_windows != 0 || !r.dropped.is_empty() => {
                v.push(format!("clean: {} probes lost, {} windows flagged, drops {:?}", r.probes_lost, r.flagged_windows, r.dropped));
            }
            "loss30" | "reorder_dup" | "spikes" => {
                if r.faults.is_empty() || r.node_windows_estimated < (n as usize - 1) * 4 {
                    v.push(format!("{name}: faults {:?}, {} node-windows estimated", r.faults, r.node_windows_estimated));
                }
                if name == "loss30" && r.windows_with_lost_probes == 0 {
                    v.push("loss30: no window shows lost probes".into());
                }
                // Every duplicate the relay made is dropped and counted once: as a
                // `duplicate` while its probe is live, as `stale_seq` after.
                let dups = r.faults.get("duplicated").copied().unwrap_or(0);
                if name == "reorder_dup" && (dups == 0 || drops("duplicate") + drops("stale_seq") != dups) {
                    v.push(format!(
                        "reorder_dup: relay duplicated {dups}, nodes dropped {} duplicate + {} stale_seq",
                        drops("duplicate"),
                        drops("stale_seq")
                    ));
                }
            }
            "blackhole" | "restart" => {
                // The victim's edges went down during the fault and came back after it.
                if r.flagged_windows == 0 || r.edges_went_down == 0 || r.edges_came_up == 0 {
                    v.push(format!(
                        "{name}: {} windows flagged, edges went down {} and came up {} times",
                        r.flagged_windows, r.edges_went_down, r.edges_came_up
                    ));
                }
                if name == "restart" && r.restarted_windows.is_none_or(|(a, b)| a == 0 || b == 0) {
                    v.push(format!("restart: windows of the restarted node before/after: {:?}", r.restarted_windows));
                }
            }
            "flood" => {
                let Some(f) = &r.flood else { continue };
                let t = |k: &str| r.dropped_at_target.get(k).copied().unwrap_or(0);
                // Sent straight to the node on loopback: each counted once, under its
                // reason; only a full socket buffer (the kernel's count) may lose some.
                let kernel = r.kernel_rcvbuf_drops.unwrap_or(0);
                let mut missed = 0;
                for (kind, sent, counted) in [
                    ("foreign_token", f.foreign_token, t("wrong_token")),
                    ("truncated", f.truncated, t("wrong_length")),
                    ("garbage", f.garbage, t("bad_magic")),
                    ("bad_version", f.bad_version, t("unsupported_version")),
                    ("replayed", f.replayed, t("stale_seq") + t("duplicate") + t("unexpected")),
                ] {
                    if counted > sent {
                        v.push(format!("flood: {sent} {kind} datagrams sent, {counted} counted by the node"));
                    }
                    missed += sent.saturating_sub(counted);
                }
                if missed > kernel {
                    v.push(format!("flood: {missed} datagrams neither counted by the node nor dropped by the kernel ({kernel})"));
                }
                if f.replayed == 0 {
                    v.push("flood: no genuine datagram was captured to replay".into());
                }
            }
            _ => {}
        }
    }
    v
}
