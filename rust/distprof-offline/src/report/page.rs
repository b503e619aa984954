//! The HTML page: summary on top, then network, nodes and edges; CSS inline, no network,
//! no script library. One inline statement records the load time for the tests.

use super::analysis::{Analysis, EdgeStats, NodeStats};
use super::edges::edge_plot;
use super::input::{EdgeHealth, ReportInput};
use super::network::{graph, residual_histogram};
use super::nodes::{heatmap, node_plot, HeatMeasure, HEATMAP_MAX_ROWS};
use super::svg::{escape, fmt_ns};
use super::Limits;
use std::fmt::Write;

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:0 16px 40px;color:#222;background:#fff}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ccc}
h3{font-size:14px;margin:12px 0 2px}
.missing{background:#fdecea;border:1px solid #c0392b;padding:6px 10px;margin:8px 0}
.synthetic{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px;margin:8px 0}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid #ccc;border-radius:6px;padding:8px 12px;min-width:150px}
.card b{display:block;font-size:18px}.card.bad{border-color:#c0392b;background:#fdecea}
.card small{color:#666}
.grid{display:flex;flex-wrap:wrap;gap:14px}.cell{flex:0 0 auto}
.cap{font-size:12px;color:#555;max-width:620px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}tr.bad td{background:#fdecea}tr.warn td{background:#fff6e0}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
.problems{color:#8a1f11}
.legend span{display:inline-block;margin-right:12px}.sw{display:inline-block;width:12px;height:12px;vertical-align:middle;margin-right:4px;border-radius:6px}
svg{display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .frame{fill:none;stroke:#999}svg .grid{stroke:#eee}svg .axis{font-size:12px;fill:#444}
svg .bad{fill:#c0392b;fill-opacity:.12}svg .warn{fill:#c0392b;font-size:13px}
svg .band{fill:#777;fill-opacity:.18}svg .band-unc{fill:#333;fill-opacity:.28}svg .band-bad{fill:#c0392b;fill-opacity:.25}
svg .fit{stroke:#111;stroke-width:1.5;fill:none}svg .drift{stroke:#2c7a3f;stroke-width:2;fill:none}
svg .limit{stroke:#c0392b;stroke-dasharray:4 3;fill:none;stroke-width:1}
svg .pts{fill:none;stroke-linecap:round}svg .fwd{stroke:#1f5fbf;stroke-width:3.2}svg .rev{stroke:#d35400;stroke-width:3.2}
svg .fwd-impure{stroke:#9db8e3;stroke-width:2.2}svg .rev-impure{stroke:#f0bb8f;stroke-width:2.2}
svg .edge{fill:none}svg .edge.ok{stroke:#4a8f5a;stroke-opacity:.35;stroke-width:1}
svg .edge.degraded{stroke:#e08e0b;stroke-width:2}svg .edge.down{stroke:#c0392b;stroke-width:2.2;stroke-dasharray:5 3}
svg .dense .edge.ok{stroke-opacity:.1;stroke-width:.5}svg .dense .edge.degraded{stroke-width:.7;stroke-opacity:.8}svg .dense .edge.down{stroke-width:.9;stroke-dasharray:3 2}
svg .node{stroke:#fff;stroke-width:1}svg .node.ok{fill:#4a8f5a}svg .node.ref{fill:#1f5fbf}
svg .node.flagged{fill:#e08e0b}svg .node.unreach,svg .node.unknown{fill:#c0392b}
svg .flag{stroke:#c0392b;stroke-width:1.2}svg .limitmark{fill:#000}svg .unreach{fill:#bbb}
svg .bar{fill:#5b6fa8}svg .zero{stroke:#c0392b}
"#;

fn card(out: &mut String, title: &str, value: &str, note: &str, bad: bool) {
    let _ = write!(
        out,
        "<div class=\"card{}\"><small>{}</small><b>{}</b><small>{}</small></div>",
        if bad { " bad" } else { "" },
        escape(title),
        escape(value),
        escape(note)
    );
}

/// A card's note about a time that may be unknown: `what` and the time, or `absent`.
fn ns_note(ns: Option<f64>, what: &str, absent: &str) -> String {
    ns.map_or(String::from(absent), |v| format!("{what} {}", fmt_ns(v)))
}

fn edge_list(edges: &[&EdgeStats], limit: usize) -> String {
    let mut s: Vec<String> = edges
        .iter()
        .take(limit)
        .map(|e| format!("{}→{}", e.src, e.dst))
        .collect();
    if edges.len() > limit {
        s.push(format!("and {} more", edges.len() - limit));
    }
    s.join(", ")
}

/// Closes a worst-first table of `rows` of `total` `what` (and its `<details>`), saying how
/// many were left out.
fn end_table(out: &mut String, rows: usize, total: usize, what: &str) {
    out.push_str("</table>");
    if rows < total {
        let _ = write!(out, "<p class=\"cap\">{} more {what} not listed.</p>", total - rows);
    }
    out.push_str("</details>");
}

fn summary(out: &mut String, input: &ReportInput, a: &Analysis) {
    let f = &input.facts;
    out.push_str("<h2 id=\"summary\">Summary</h2><div class=\"cards\">");
    match a.worst_reachable() {
        Some(w) => {
            card(
                out,
                "worst node",
                &format!("node {}", w.node),
                &format!("{} of {} windows flagged", w.flagged, w.windows),
                w.flagged > 0,
            );
            let over = f.bound_limit_ns.is_some_and(|l| w.max_bound_ns > l);
            let limit = ns_note(f.bound_limit_ns, "limit", "no limit given");
            card(
                out,
                "worst bound",
                &format!("± {}", fmt_ns(w.max_bound_ns)),
                &limit,
                over,
            );
        }
        None => card(
            out,
            "worst node",
            "none reachable",
            "no node has a clock model",
            true,
        ),
    }
    let unreachable: Vec<&NodeStats> = a.unreachable().collect();
    let names: Vec<String> = unreachable
        .iter()
        .take(8)
        .map(|n| n.node.to_string())
        .collect();
    card(
        out,
        "unreachable nodes",
        &unreachable.len().to_string(),
        &if unreachable.is_empty() {
            "all nodes have a model".to_string()
        } else {
            format!("nodes {}", names.join(", "))
        },
        !unreachable.is_empty(),
    );
    let limit = f.bound_limit_ns.map_or(String::from("the limit"), fmt_ns);
    let ulimit = f.uncertainty_limit_ns.map_or(String::from("the limit"), fmt_ns);
    // A segment is flagged on either number; say which limits, and how far over the bounds
    // of the flagged ones are, not only that they are.
    let flagged_note = if a.flagged_windows == 0 {
        format!("node windows with an uncertainty over {ulimit} or a bound over {limit}: none (the reference's not counted)")
    } else {
        let (lo, hi) = a.flagged_bound_range_ns;
        format!(
            "node windows with an uncertainty over {ulimit} or a bound over {limit}, their bounds {} … {} (the reference's not counted)",
            fmt_ns(lo),
            fmt_ns(hi)
        )
    };
    card(
        out,
        "flagged windows",
        &format!("{} / {}", a.flagged_windows, a.total_windows),
        &flagged_note,
        a.flagged_windows > 0,
    );
    if let Some(d) = &f.dropped {
        card(
            out,
            "dropped datagrams",
            &d.total().to_string(),
            &format!(
                "{} foreign (another run or node), {} malformed, {} late or duplicate",
                d.foreign, d.malformed, d.late_or_duplicate
            ),
            d.foreign + d.malformed > 0,
        );
    }
    for (health, title) in [(EdgeHealth::Degraded, "degraded edges"), (EdgeHealth::Down, "down edges")] {
        let edges: Vec<&EdgeStats> = a.edges_with(health).collect();
        card(
            out,
            title,
            &format!("{} / {}", edges.len(), a.edges.len()),
            &edge_list(&edges, 6),
            !edges.is_empty(),
        );
    }
    let mode = serde_json::to_value(f.timestamp_mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut mode_note = ns_note(f.timestamp_bound_ns, "contributes ±", "bound not stated");
    // Hardware stamps: how well the NIC clocks map to the host clocks (worst node).
    let nics: Vec<_> = f.timestamps.values().filter_map(|t| t.nic_clock.as_ref()).collect();
    if !nics.is_empty() {
        let worst_err = nics.iter().map(|n| n.mapping_error_max_ns).fold(0.0, f64::max);
        let worst_rms = nics.iter().filter_map(|n| n.mapping.as_ref()).map(|m| m.residual_rms_ns).fold(0.0, f64::max);
        let unstamped: u64 = nics.iter().map(|n| n.unstamped_dropped).sum();
        mode_note += &format!(
            "; NIC clocks of {} nodes mapped to host time: residual ≤ {} rms, error ≤ {}; {unstamped} unstamped packets dropped",
            nics.len(),
            fmt_ns(worst_rms),
            fmt_ns(worst_err)
        );
        let breaks: u64 = nics.iter().filter_map(|n| n.mapping.as_ref()).map(|m| m.breaks).sum();
        if breaks > 0 {
            let across: u64 = nics.iter().map(|n| n.stamps_across_break).sum();
            mode_note += &format!("; {breaks} clock breaks (steps, rate changes) detected, {across} stamps converted across one, with the break in their error");
        }
    }
    let switched: Vec<String> = f.timestamps.iter().filter(|(_, t)| t.nic_clock.as_ref().is_some_and(|n| !n.switched_to_software.is_empty())).map(|(n, _)| n.to_string()).collect();
    if !switched.is_empty() {
        mode_note += &format!("; nodes {} left hardware stamps (NIC clock failed)", switched.join(", "));
    }
    card(
        out,
        "timestamps",
        &mode,
        &mode_note,
        matches!(f.timestamp_mode, distprof::config::TimestampMode::User),
    );
    let est = f
        .estimator
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "not stated".to_string());
    card(
        out,
        "estimator",
        &est,
        &format!("reference node {}", f.reference_node),
        false,
    );
    out.push_str("</div>");
    let allowance = input.facts.asymmetry_allowance_ns.map_or(String::from("the configured allowance"), fmt_ns);
    out.push_str(&format!(
        "<p class=\"cap\">Bounds are the worst case: they cover timestamping and estimation error and any path asymmetry (one direction slower than the other), which two-way probes cannot see. The uncertainty (one sigma, the truth within two of it in ~95% of windows) assumes asymmetry within {} per hop and includes it (<code>asymmetry_allowance_ns</code>); an asymmetry that differs between edges breaks loop closure and grows it, and a node whose loops show more than the allowance is flagged.</p>",
        escape(&allowance)
    ));
    if !a.problems.is_empty() {
        let _ = write!(
            out,
            "<details class=\"problems\" open><summary>{} problem(s) in the input</summary><ul>",
            a.problems.len()
        );
        for p in a.problems.iter().take(50) {
            let _ = write!(out, "<li>{}</li>", escape(p));
        }
        if a.problems.len() > 50 {
            let _ = write!(out, "<li>and {} more</li>", a.problems.len() - 50);
        }
        out.push_str("</ul></details>");
    }
    let config =
        serde_json::to_string_pretty(&f.config).unwrap_or_else(|e| format!("(not printable: {e})"));
    let _ = write!(
        out,
        "<details><summary>configuration used</summary><pre>{}</pre></details>",
        escape(&config)
    );
}

fn network(out: &mut String, input: &ReportInput, a: &Analysis) {
    out.push_str("<h2 id=\"network\">Network</h2><div class=\"grid\"><div class=\"cell\" style=\"width:540px\">");
    out.push_str("<h3>Probe graph</h3>");
    out.push_str(&graph(input, a, 520.0));
    out.push_str("<p class=\"cap legend\"><span><i class=\"sw\" style=\"background:#4a8f5a\"></i>edge ok / node ok</span><span><i class=\"sw\" style=\"background:#e08e0b\"></i>degraded edge / node with flagged windows</span><span><i class=\"sw\" style=\"background:#c0392b\"></i>down edge (dashed) / unreachable node</span><span><i class=\"sw\" style=\"background:#1f5fbf\"></i>reference</span><br>Nodes on a circle by id, clockwise from the top. Each edge bends to the right of its direction (prober → peer), so both directions of a pair are visible.</p>");
    out.push_str("</div><div class=\"cell\" style=\"width:600px\"><h3>Loop-closure residuals</h3>");
    out.push_str(&residual_histogram(&input.loops, 580.0, 260.0));
    out.push_str("<p class=\"cap\">Sum of the estimated edge offsets around each cycle of the graph; zero for consistent estimates. A wide spread points at bad edges (a slow return path biases an edge by half the difference). A bias that is consistent around every loop, such as one node whose every path is asymmetric the same way, cannot show here.</p>");
    // The worst window of each cycle: one bad cycle would otherwise fill the table.
    let mut by_cycle: std::collections::BTreeMap<&[u32], &crate::report::LoopResidual> =
        std::collections::BTreeMap::new();
    for l in input.loops.iter().filter(|l| l.residual_ns.is_finite()) {
        let e = by_cycle.entry(l.nodes.as_slice()).or_insert(l);
        if l.residual_ns.abs() > e.residual_ns.abs() {
            *e = l;
        }
    }
    let mut worst: Vec<_> = by_cycle.into_values().collect();
    worst.sort_by(|x, y| y.residual_ns.abs().total_cmp(&x.residual_ns.abs()));
    if !worst.is_empty() {
        out.push_str("<table><tr><th class=\"l\">worst loops (worst window each)</th><th>window</th><th>residual</th></tr>");
        for l in worst.iter().take(10) {
            let cycle: Vec<String> = l.nodes.iter().map(|n| n.to_string()).collect();
            let _ = write!(
                out,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&cycle.join(" → ")),
                l.window_id.map_or("run".to_string(), |w| w.to_string()),
                escape(&fmt_ns(l.residual_ns))
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</div></div>");
}

fn nodes(out: &mut String, input: &ReportInput, a: &Analysis, limits: &Limits) {
    out.push_str("<h2 id=\"nodes\">Nodes</h2>");
    // Coloured by the uncertainty: the bound covers any path asymmetry and so is at least
    // half the smallest round trip however good the sync (tens of µs on a 10 µs network);
    // a ramp of it paints an excellent run red.
    out.push_str("<h3>Uncertainty of every node and window</h3>");
    out.push_str(&heatmap(
        &input.nodes,
        a,
        HeatMeasure::Uncertainty,
        input.facts.uncertainty_limit_ns,
        1240.0,
    ));
    out.push_str("<p class=\"cap\">One sigma of the offset under symmetric paths: the truth lies within two of it in ~95% of windows. The worst-case bound, which also covers any path asymmetry, is in each node's plot below.</p>");
    if a.nodes.len() > HEATMAP_MAX_ROWS {
        let _ = write!(
            out,
            "<p class=\"cap\">Showing the {HEATMAP_MAX_ROWS} worst of {} nodes.</p>",
            a.nodes.len()
        );
    }
    let k = limits.node_plots.min(a.nodes.len());
    let _ = write!(
        out,
        "<h3>Offset and drift against the reference: {}</h3><p class=\"cap\">Black: the offset estimate of each window (node clock minus reference, minus the run-wide straight-line trend given below each plot, so that µs bounds stay visible next to ms of drift), dark grey band: ± its calibrated uncertainty (symmetric paths), light grey band: ± its worst-case bound (any path asymmetry); the scale follows the estimate and its uncertainty, and a bound more than 4 times wider is clipped at the plot's edges, as the plot then notes. Red tint: flagged window, dashed red: the bound limit around the estimate. Green steps: drift. Hover a line for its numbers.</p><div class=\"grid\">",
        if k < a.nodes.len() { format!("the {k} worst of {} nodes", a.nodes.len()) } else { "every reachable node".to_string() }
    );
    let by_id: std::collections::BTreeMap<_, _> = input.nodes.iter().map(|n| (n.node, n)).collect();
    for s in a.nodes.iter().filter(|s| s.reachable).take(k) {
        let Some(model) = by_id.get(&s.node) else {
            continue;
        };
        let host = input
            .hostnames
            .get(&s.node)
            .map(|h| format!(" ({})", escape(h)))
            .unwrap_or_default();
        let plot = node_plot(model, a.t0_global_ns, 600.0, input.facts.bound_limit_ns);
        let _ = write!(
            out,
            "<div class=\"cell\"><h3>node {}{host}: max bound {}, {} of {} windows flagged</h3>{}<p class=\"cap\">Trend removed from the offset: {} at run start, {:.0} ppb.</p></div>",
            s.node,
            escape(&fmt_ns(s.max_bound_ns)),
            s.flagged,
            s.windows,
            plot.svg,
            escape(&fmt_ns(plot.trend_start_ns)),
            plot.trend_ppb
        );
    }
    out.push_str("</div>");
    let unreachable: Vec<String> = a.unreachable().map(|s| s.node.to_string()).collect();
    if !unreachable.is_empty() {
        let _ = write!(out, "<p class=\"problems\">Unreachable, no clock model (no path of usable edges to the reference): nodes {}.</p>", unreachable.join(", "));
    }
    let rows = a.nodes.len().min(limits.table_rows);
    let _ = write!(out, "<details{}><summary>all {} nodes, worst first</summary><table><tr><th>node</th><th class=\"l\">host</th><th>windows</th><th>flagged</th><th>max bound</th><th>first offset</th><th>last offset</th><th>drift min</th><th>drift max</th></tr>", if a.nodes.len() <= 16 { " open" } else { "" }, a.nodes.len());
    for s in a.nodes.iter().take(rows) {
        let class = if !s.reachable {
            " class=\"bad\""
        } else if s.flagged > 0 {
            " class=\"warn\""
        } else {
            ""
        };
        let host = input
            .hostnames
            .get(&s.node)
            .map(|h| escape(h))
            .unwrap_or_default();
        let bound = if s.reachable {
            fmt_ns(s.max_bound_ns)
        } else {
            "unreachable".to_string()
        };
        let ppb = |v: f64| {
            if v.is_finite() {
                format!("{v:.0} ppb")
            } else {
                "–".to_string()
            }
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td class=\"l\">{host}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.node,
            s.windows,
            s.flagged,
            escape(&bound),
            escape(&fmt_ns(s.first_offset_ns)),
            escape(&fmt_ns(s.last_offset_ns)),
            ppb(s.min_drift_ppb),
            ppb(s.max_drift_ppb)
        );
    }
    end_table(out, rows, a.nodes.len(), "nodes");
}

fn edges(out: &mut String, input: &ReportInput, a: &Analysis, limits: &Limits) {
    out.push_str("<h2 id=\"edges\">Edges</h2>");
    let with_data: Vec<&EdgeStats> = a
        .edges
        .iter()
        .filter(|s| s.points > 0 || s.windows > 0)
        .collect();
    let k = limits.edge_plots.min(with_data.len());
    let _ = write!(
        out,
        "<h3>One-way delays and fits: {}</h3><p class=\"cap legend\"><span><i class=\"sw\" style=\"background:#1f5fbf\"></i>forward (prober → peer), pure</span><span><i class=\"sw\" style=\"background:#9db8e3\"></i>forward, impure</span><span><i class=\"sw\" style=\"background:#d35400\"></i>reverse, pure</span><span><i class=\"sw\" style=\"background:#f0bb8f\"></i>reverse, impure</span><br>Each point is the peer's clock minus the prober's across one packet: forward points sit one delay above the clock difference, reverse points one delay below. Everything is drawn minus one straight line through the run's fits (given below each plot), which keeps each point's distance to its fit. Black: each window's max-margin line (the clock difference), grey band: ± its margin. Red tint: the clouds overlap (no separating line). Points are thinned to the lowest and highest per 2 px, which keeps the envelope the fit depends on; the 1% most extreme are drawn on the border.</p><div class=\"grid\">",
        if k < with_data.len() { format!("the {k} worst of {} edges with data", with_data.len()) } else { "every edge with data".to_string() }
    );
    for s in with_data.iter().take(k) {
        let e = &input.edges[s.index];
        let plot = edge_plot(e, 600.0, 240.0);
        let note = if e.health_note.is_empty() {
            String::new()
        } else {
            format!(" — {}", escape(&e.health_note))
        };
        let _ = write!(
            out,
            "<div class=\"cell\"><h3>edge {} → {}: {}{note}</h3>{}<p class=\"cap\">{} points ({} pure), {} drawn{}; {} windows, min margin {}. Trend removed: {} at the first probe, {:.0} ppb.</p></div>",
            e.src,
            e.dst,
            e.health.label(),
            plot.svg,
            s.points,
            s.pure_points,
            plot.drawn_points,
            if plot.clamped_points > 0 { format!(", {} on the border", plot.clamped_points) } else { String::new() },
            s.windows,
            escape(&fmt_ns(s.min_margin_ns)),
            escape(&fmt_ns(plot.trend_start_ns)),
            plot.trend_ppb
        );
    }
    out.push_str("</div>");
    let empty: Vec<&EdgeStats> = a
        .edges
        .iter()
        .filter(|s| s.points == 0 && s.windows == 0)
        .collect();
    if !empty.is_empty() {
        let _ = write!(
            out,
            "<p class=\"problems\">{} edge(s) delivered no probe: {}.</p>",
            empty.len(),
            escape(&edge_list(&empty, 40))
        );
    }
    let rows = a.edges.len().min(limits.table_rows);
    let _ = write!(out, "<details><summary>all {} edges, worst first</summary><table><tr><th>src</th><th>dst</th><th class=\"l\">health</th><th>points</th><th>pure</th><th>windows</th><th>overlapping</th><th>min margin</th><th class=\"l\">note</th></tr>", a.edges.len());
    for s in a.edges.iter().take(rows) {
        let class = match s.health {
            EdgeHealth::Down => " class=\"bad\"",
            EdgeHealth::Degraded => " class=\"warn\"",
            EdgeHealth::Ok => "",
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            s.src,
            s.dst,
            s.health.label(),
            s.points,
            s.pure_points,
            s.windows,
            s.overlapping_windows,
            escape(&fmt_ns(s.min_margin_ns)),
            escape(&input.edges[s.index].health_note)
        );
    }
    end_table(out, rows, a.edges.len(), "edges");
}

/// `no data from node(s) 1, 2 of the 3 nodes of the run`: the page and stderr say it alike.
pub fn missing_nodes_sentence(missing: &[distprof::context::NodeId], nodes: usize) -> String {
    let list: Vec<String> = missing.iter().map(|n| n.to_string()).collect();
    format!("no data from node(s) {} of the {} nodes of the run", list.join(", "), nodes)
}

pub fn page(input: &ReportInput, limits: &Limits) -> String {
    let a = Analysis::of(input);
    let mut out = String::with_capacity(1 << 20);
    let title = format!("distprof report: {}", input.facts.run_name);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let _ = write!(
        out,
        "<p class=\"cap\">{} nodes, {} edges, {} loops. <a href=\"#summary\">summary</a> · <a href=\"#network\">network</a> · <a href=\"#nodes\">nodes</a> · <a href=\"#edges\">edges</a></p>",
        input.nodes.len(),
        input.edges.len(),
        input.loops.len()
    );
    if !input.facts.nodes_without_data.is_empty() {
        let _ = write!(
            out,
            "<p class=\"missing\" id=\"missing\"><b>Partial run:</b> {}. Their probes and their peers' views of them are not in the input, so the network is solved from a part of its edges and loops: the offsets, drifts and bounds drawn may be wrong. Give the run directory with every node's JSONL.</p>",
            escape(&missing_nodes_sentence(&input.facts.nodes_without_data, input.nodes.len()))
        );
    }
    if !input.facts.reanchored.is_empty() {
        let _ = write!(
            out,
            "<p class=\"missing\" id=\"reanchored\"><b>Re-anchored:</b> the reference could not place every node in some windows; a surviving node stood in, carried onto the same timeline by its last segment, its uncertainty growing with the time since (docs/estimation.md, \"No single reference\"): {}.</p>",
            escape(&input.facts.reanchored.join("; "))
        );
    }
    if input.facts.synthetic {
        out.push_str("<p class=\"synthetic\">Synthetic input: generated by a seeded model, not measured. It shows what the panels look like.</p>");
    }
    summary(&mut out, input, &a);
    network(&mut out, input, &a);
    nodes(&mut out, input, &a, limits);
    edges(&mut out, input, &a, limits);
    // The page is complete without script; this one statement records when the browser
    // finished loading and laying it out, so tests can hold the page to its load budget.
    out.push_str("<p class=\"cap\" id=\"load\"></p><script>addEventListener('load',function(){document.body.getBoundingClientRect();var e=document.getElementById('load');e.dataset.loadMs=performance.now().toFixed(0);e.textContent='Rendered in '+e.dataset.loadMs+' ms.';});</script></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    //! The page of a small run with every kind of trouble: what it says about each node and
    //! edge, what it escapes, and what it leaves out under the limits. (Whole pages of
    //! generated runs are tested in rust/distprof-cli/tests/report_html.rs.)
    use super::*;
    use crate::report::input::{EdgeSeries, EdgeWindowFit, OwdPoint, RunFacts};
    use distprof::config::TimestampMode;
    use distprof::model::NodeClockModel;

    const T0: i64 = 1_763_000_000_000_000_000;

    fn model(node: u32, flagged: &[bool]) -> NodeClockModel {
        NodeClockModel {
            node,
            reachable: !flagged.is_empty(),
            segments: crate::test_support::segments(T0, 1_000_000_000, &vec![25_000.0 * node as f64; flagged.len()], 1_000.0, |w| {
                (if flagged[w] { 9_000.0 } else { 800.0 }, flagged[w])
            }),
        }
    }

    fn edge(src: u32, dst: u32, health: EdgeHealth, note: &str) -> EdgeSeries {
        let live = health != EdgeHealth::Down;
        EdgeSeries {
            src,
            dst,
            points: if live {
                (0..40)
                    .map(|i| OwdPoint { t_ns: T0 + i * 50_000_000, owd_ns: if i % 2 == 0 { 30_000 } else { -20_000 }, forward: i % 2 == 0, pure: i % 5 != 0 })
                    .collect()
            } else {
                Vec::new()
            },
            fits: if live {
                vec![EdgeWindowFit { window_id: 0, start_ns: T0, end_ns: T0 + 2_000_000_000, mid_ns: T0 + 1_000_000_000, offset_ns: 5_000.0, drift_ppb: 0.0, margin_ns: 25_000.0, sigma_ns: None }]
            } else {
                Vec::new()
            },
            health,
            health_note: note.into(),
        }
    }

    /// Node 0 the reference, node 1 with one flagged window of two, node 2 unreachable;
    /// edge 0->1 fine, 1->2 degraded, 2->0 silent.
    fn input(run_name: &str, synthetic: bool) -> ReportInput {
        ReportInput {
            facts: RunFacts {
                run_name: run_name.into(),
                reference_node: 0,
                timestamp_mode: TimestampMode::Kernel,
                timestamp_bound_ns: None,
                estimator: None,
                bound_limit_ns: Some(5_000.0),
                uncertainty_limit_ns: Some(1_000.0),
                asymmetry_allowance_ns: Some(100.0),
                config: serde_json::Value::Null,
                synthetic,
                dropped: None,
                timestamps: Default::default(),
                nodes_without_data: Vec::new(),
                reanchored: Vec::new(),
            },
            nodes: vec![model(0, &[false, false]), model(1, &[false, true]), model(2, &[])],
            hostnames: [(1, "gpu<1>".to_string())].into(),
            edges: vec![
                edge(0, 1, EdgeHealth::Ok, ""),
                edge(1, 2, EdgeHealth::Degraded, "no pure pair in 1 window"),
                edge(2, 0, EdgeHealth::Down, "silent & lost"),
            ],
            loops: Vec::new(),
        }
    }

    const ALL: Limits = Limits { node_plots: 12, edge_plots: 12, table_rows: 2_000 };

    #[test]
    fn names_every_troubled_node_and_edge() {
        let html = page(&input("run-7", false), &ALL);
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
        assert!(html.contains("<title>distprof report: run-7</title>"));
        assert!(html.contains("3 nodes, 3 edges, 0 loops."));
        assert!(html.contains("Unreachable, no clock model (no path of usable edges to the reference): nodes 2."), "{html}");
        assert!(html.contains("1 edge(s) delivered no probe: 2→0."));
        // Node rows: the unreachable one red, the one with a flagged window amber.
        assert!(html.contains("<tr class=\"bad\"><td>2</td><td class=\"l\"></td><td>0</td><td>0</td><td>unreachable</td>"), "{html}");
        assert!(html.contains("<tr class=\"warn\"><td>1</td><td class=\"l\">gpu&lt;1&gt;</td><td>2</td><td>1</td>"), "{html}");
        // Edge rows likewise, with their notes.
        assert!(html.contains("<tr class=\"bad\"><td>2</td><td>0</td><td class=\"l\">down</td>"));
        assert!(html.contains("<tr class=\"warn\"><td>1</td><td>2</td><td class=\"l\">degraded</td>"));
        assert!(html.contains("silent &amp; lost"));
        assert!(html.contains("every reachable node") && html.contains("every edge with data"));
        assert!(!html.contains("not listed") && !html.contains("Synthetic input"));
        // No script but the one load statement.
        assert_eq!(html.matches("<script").count(), 1);
    }

    #[test]
    fn escapes_what_the_run_names_and_says_when_it_is_synthetic() {
        let html = page(&input("<script>alert(1)</script>", true), &ALL);
        assert!(html.contains("distprof report: &lt;script&gt;alert(1)&lt;/script&gt;"));
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("<p class=\"synthetic\">Synthetic input"));
    }

    #[test]
    fn limits_cut_plots_and_tables_and_say_how_much_is_left_out() {
        let html = page(&input("run-7", false), &Limits { node_plots: 1, edge_plots: 1, table_rows: 1 });
        assert!(html.contains("the 1 worst of 3 nodes"), "{html}");
        assert!(html.contains("the 1 worst of 2 edges with data"), "{html}");
        assert!(html.contains("<p class=\"cap\">2 more nodes not listed.</p></details>"));
        assert!(html.contains("<p class=\"cap\">2 more edges not listed.</p></details>"));
        assert_eq!(html.matches("<div class=\"cell\"><h3>node ").count(), 1);
        assert_eq!(html.matches("<div class=\"cell\"><h3>edge ").count(), 1);
    }

    #[test]
    fn edge_list_stops_at_its_limit() {
        let a = Analysis::of(&input("run-7", false));
        let all: Vec<&EdgeStats> = a.edges.iter().collect();
        assert_eq!(edge_list(&all, 1).matches('→').count(), 1);
        assert!(edge_list(&all, 1).ends_with(", and 2 more"));
        assert_eq!(edge_list(&all, 5).matches(", ").count(), 2);
    }
}
