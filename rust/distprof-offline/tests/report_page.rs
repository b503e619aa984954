//! The report page rendered from seeded inputs with known pathologies
//! (`distprof_testkit::synthetic_report`): every panel present, user text escaped, hostile
//! values rendered without NaN, large runs kept small.

mod page_tests {
    use distprof_testkit::synthetic_report::{synthetic_input, SyntheticSpec};
    use distprof_offline::report::*;
    use distprof::config::TimestampMode;
    use distprof::model::{ClockSegment, NodeClockModel};

    /// No `NaN` or `inf` token anywhere in the page (a word that merely contains the
    /// letters, such as "interface", is fine).
    pub(super) fn assert_no_non_finite(html: &str) {
        let bytes = html.as_bytes();
        for bad in ["NaN", "inf"] {
            for (at, _) in html.match_indices(bad) {
                let before = at
                    .checked_sub(1)
                    .map(|i| bytes[i].is_ascii_alphabetic())
                    .unwrap_or(false);
                let after = bytes
                    .get(at + bad.len())
                    .is_some_and(|b| b.is_ascii_alphabetic() && *b != b'i');
                let word_inf = html[at..].starts_with("infinity");
                if !before && (!after || word_inf) {
                    let ctx = &html[at.saturating_sub(120)..(at + 40).min(html.len())];
                    panic!("non-finite number in the page: …{ctx}…");
                }
            }
        }
    }

    fn empty_input() -> ReportInput {
        ReportInput {
            facts: RunFacts {
                run_name: "empty".into(),
                reference_node: 0,
                timestamp_mode: TimestampMode::User,
                timestamp_bound_ns: None,
                estimator: None,
                bound_limit_ns: None,
                uncertainty_limit_ns: None,
                asymmetry_allowance_ns: None,
                config: serde_json::Value::Null,
                synthetic: false,
                dropped: None,
                timestamps: Default::default(),
                nodes_without_data: Vec::new(),
                reanchored: Vec::new(),
            },
            nodes: Vec::new(),
            hostnames: Default::default(),
            edges: Vec::new(),
            loops: Vec::new(),
        }
    }

    #[test]
    fn synthetic_page_has_every_panel() {
        let input = synthetic_input(&SyntheticSpec::new(12, 5));
        let html = render(&input);
        assert_no_non_finite(&html);
        // 1 graph + 1 histogram + 1 heatmap + 11 reachable node plots + 12 edge plots.
        assert_eq!(html.matches("<svg ").count(), 3 + 11 + 12, "svg count");
        assert_eq!(
            html.matches("<svg ").count(),
            html.matches("</svg>").count()
        );
        for needle in [
            "worst node",
            "worst bound",
            "degraded edges",
            "down edges",
            "flagged windows",
            "kernel",
            "hull",
            "Synthetic input",
            "probe_window_s",
        ] {
            assert!(html.contains(needle), "missing {needle}");
        }
        // The stepping node is the worst reachable node, and is named in the summary.
        let a = analysis::Analysis::of(&input);
        let worst = a.worst_reachable().unwrap();
        assert_eq!(worst.flagged, 1);
        assert!(html.contains(&format!("<b>node {}</b>", worst.node)));
    }

    #[test]
    fn user_text_is_escaped() {
        let mut input = synthetic_input(&SyntheticSpec::new(3, 1));
        input.facts.run_name = "<script>alert(1)</script>".into();
        input
            .hostnames
            .insert(1, "<img src=x onerror=alert(2)>".into());
        input.edges[0].health_note = "\"quoted\" & <b>".into();
        input.facts.config = serde_json::json!({"output_dir": "</pre><script>x</script>"});
        let html = render(&input);
        // The only script is the page's own load-time statement.
        assert_eq!(html.matches("<script>").count(), 1);
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&quot;quoted&quot; &amp; &lt;b&gt;"));
    }

    #[test]
    fn non_finite_and_inconsistent_input_renders_without_nan_and_is_reported() {
        let mut input = synthetic_input(&SyntheticSpec::new(4, 2));
        input.nodes[1].segments[0].offset_ns = f64::NAN;
        input.nodes[2].segments[1].bound_ns = f64::INFINITY;
        input.edges[0].fits[0].margin_ns = f64::NAN;
        input.edges[1].fits[0].drift_ppb = f64::NEG_INFINITY;
        input.edges[2].dst = 99;
        input.loops.push(LoopResidual {
            nodes: vec![0, 1, 2],
            window_id: None,
            residual_ns: f64::NAN,
        });
        let html = render(&input);
        assert_no_non_finite(&html);
        assert!(html.contains("node 1 window 0: non-finite offset, drift or bound"));
        assert!(html.contains("names node 99, which has no entry"));
    }

    #[test]
    fn empty_and_degenerate_inputs_render() {
        let html = render(&empty_input());
        assert_no_non_finite(&html);
        assert!(html.contains("none reachable"));
        assert!(html.contains("no loop residuals in the input"));
        // One node, one window, a zero bound, no edges: every scale is degenerate.
        let mut one = empty_input();
        one.nodes.push(NodeClockModel {
            node: 0,
            reachable: true,
            segments: vec![ClockSegment {
                window_id: 0,
                start_local_ns: 5,
                end_local_ns: 5,
                mid_local_ns: 5,
                offset_ns: 0.0,
                drift_ppb: 0.0,
                bound_ns: 0.0,
                uncertainty_ns: 0.0,
                drift_uncertainty_ppb: 5.0,
                flagged: false,
                break_at_start: false,
            }],
        });
        let html = render(&one);
        assert_no_non_finite(&html);
        assert_eq!(html.matches("<svg ").count(), 4);
    }

    #[test]
    fn flagged_windows_are_counted_without_the_reference_and_named_with_their_bounds() {
        let seg = |w: u64, bound_ns: f64, flagged: bool| ClockSegment {
            window_id: w,
            start_local_ns: w as i64 * 1_000,
            end_local_ns: (w as i64 + 1) * 1_000,
            mid_local_ns: w as i64 * 1_000 + 500,
            offset_ns: 0.0,
            drift_ppb: 0.0,
            bound_ns,
            uncertainty_ns: bound_ns / 100.0,
            drift_uncertainty_ppb: 5.0,
                break_at_start: false,
            flagged,
        };
        let mut input = empty_input();
        input.facts.bound_limit_ns = Some(10_000.0);
        input.facts.uncertainty_limit_ns = Some(100.0);
        input.nodes = vec![
            NodeClockModel { node: 0, reachable: true, segments: (0..3).map(|w| seg(w, 0.0, false)).collect() },
            NodeClockModel {
                node: 1,
                reachable: true,
                segments: vec![seg(0, 12_000.0, true), seg(1, 8_000.0, false), seg(2, 35_000.0, true)],
            },
            NodeClockModel { node: 2, reachable: true, segments: (0..3).map(|w| seg(w, 9_000.0, false)).collect() },
            NodeClockModel { node: 3, reachable: false, segments: Vec::new() },
        ];
        let a = analysis::Analysis::of(&input);
        assert_eq!((a.flagged_windows, a.total_windows), (2, 6));
        assert_eq!(a.flagged_bound_range_ns, (12_000.0, 35_000.0));
        let html = render(&input);
        assert!(html.contains("<b>2 / 6</b>"), "summary count");
        assert!(
            html.contains("uncertainty over 100 ns or a bound over 10.0 µs, their bounds 12.0 µs … 35.0 µs"),
            "summary names the limits and the flagged bounds"
        );
        // Each flagged window is outlined in the heatmap.
        assert_eq!(html.matches("class=\"flag\"").count(), 2);
        // The heatmap colours by uncertainty; over the limit, its ramp runs to the largest
        // uncertainty, the limit marked.
        assert!(html.contains("uncertainty 0 … 350 ns (the largest uncertainty); the black mark is the flag limit, 100 ns"), "{html}");
        assert_eq!(html.matches("class=\"limitmark\"").count(), 1);
        input.nodes[1].segments.iter_mut().for_each(|s| s.flagged = false);
        let html = render(&input);
        assert!(html.contains("<b>0 / 6</b>") && html.contains("a bound over 10.0 µs: none"), "no flags");
    }

    #[test]
    fn large_runs_stay_small() {
        // 150 nodes, long run: plots capped, heatmap columns merged, tables capped.
        let mut spec = SyntheticSpec::new(150, 9);
        spec.out_degree = 4;
        spec.windows = 91;
        spec.probes_per_window = 2;
        let input = synthetic_input(&spec);
        let html = render_with(
            &input,
            &Limits {
                node_plots: 6,
                edge_plots: 6,
                table_rows: 50,
            },
        );
        assert_no_non_finite(&html);
        assert_eq!(html.matches("<svg ").count(), 3 + 6 + 6);
        assert!(html.contains("columns merge 2 windows"));
        assert!(html.contains("100 more nodes not listed"));
        assert!(html.len() < 3_000_000, "{} bytes", html.len());
    }
}

mod hostile_input_tests {
    use distprof_testkit::synthetic_report::{synthetic_input, SyntheticSpec};
    use distprof_offline::report::*;

    #[test]
    fn extreme_timestamps_render_without_panic_or_nan() {
        let mut input = synthetic_input(&SyntheticSpec::new(4, 8));
        let seg = &mut input.nodes[1].segments[0];
        seg.start_local_ns = i64::MAX;
        seg.mid_local_ns = i64::MIN;
        seg.end_local_ns = i64::MIN;
        seg.offset_ns = f64::MAX;
        input.edges[0].points.push(OwdPoint {
            t_ns: i64::MIN,
            owd_ns: i64::MAX,
            forward: true,
            pure: true,
        });
        input.edges[0].points.push(OwdPoint {
            t_ns: i64::MAX,
            owd_ns: i64::MIN,
            forward: false,
            pure: true,
        });
        input.edges[0].fits[0].mid_ns = i64::MIN;
        input.edges[0].fits[0].drift_ppb = 1e300;
        let html = render(&input);
        super::page_tests::assert_no_non_finite(&html);
        assert!(html.contains("ends before it starts"));
    }
}
