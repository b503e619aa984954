//! The distprof plane read back from its bytes: whole planes (model, snapshots, probe
//! statistics, edge fits) built with the one synthetic XSpace builder survive the encoding,
//! encode to the same bytes every time, and survive the profiler's line normalisation.
//! (The plane's own unit tests are in rust/distprof/src/distprof_plane.rs.)

use distprof::distprof_plane::{distprof_plane_bytes, DistprofPlaneData, ProbeEdgeStats, TracerStart};
use distprof::estimate::shared::SHARED_FITS_VERSION;
use distprof::estimate::{NodeWindowFits, SharedEdge, SharedLine};
use distprof::xplane::{XPlane, XSpace};
use distprof_testkit::synthetic_xspace::{linear_snapshots, plane_data, with_tracer, Windows};
use prost::Message;

/// Node 2 on a ROCm tracer clock: three 4 s windows (the last flagged), five snapshot pairs
/// of growing read windows, one edge's probe statistics and one window's edge fit.
fn sample() -> DistprofPlaneData {
    let t0 = 1_763_000_000_123_456_789;
    let windows = Windows {
        start_ns: t0,
        window_ns: 4_000_000_000,
        count: 3,
        bound_ns: 850.0,
        uncertainty_ns: 30.0,
    };
    let mut segments = windows.segments(|k, _| (1_234_567.25 + k as f64, -3_500.5));
    segments[2].flagged = true;
    // A piece that starts at a break inside its window: the plane keeps the mark.
    segments[1].break_at_start = true;
    let start = TracerStart {
        s_ns: t0,
        r_ns: 5_000_000_000,
    };
    let mut snapshots = linear_snapshots(start, 5, 100_000_000, 100_000_007, 60);
    for (k, s) in snapshots.iter_mut().enumerate() {
        s.read_window_ns += k as i64;
    }
    let mut data = with_tracer(plane_data(2, "gpu-node-2", segments), start, snapshots);
    data.session_id = "s-test-1".into();
    // Hardware stamps with a NIC clock mapping: the nested JSON stat round-trips too.
    data.timestamp_mode = "hardware".into();
    data.timestamps = Some(distprof::timestamp::TimestampQuality {
        mode: distprof::timestamp::StampMode::Hardware,
        stamp_error_bound_ns: 142,
        note: String::new(),
        nic_clock: Some(distprof::timestamp::NicClockInfo {
            source: "/dev/ptp1 (eth0) by PTP_SYS_OFFSET_PRECISE".into(),
            phc_index: Some(1),
            mapping: Some(distprof::nic_clock::MappingQuality {
                samples_taken: 1200,
                samples_used: 40,
                span_ns: 3_950_000_000,
                offset_ns: -37_000_012_345.5,
                drift_ppm: -19.9996,
                residual_rms_ns: 12.25,
                residual_max_ns: 31.0,
                bracket_max_ns: 0,
                error_bound_ns: 41.5,
                breaks: 1,
            }),
            mapping_error_max_ns: 41.5,
            stamped: 48_000,
            unstamped_dropped: 3,
            stamps_across_break: 10,
            switched_to_software: String::new(),
        }),
    });
    data.probe_stats = vec![ProbeEdgeStats {
        window_id: 1,
        peer: 0,
        pairs_used: 412,
        pairs_lost: 3,
        min_rtt_ns: 23_456,
    }];
    data.edge_fits = vec![NodeWindowFits {
        version: SHARED_FITS_VERSION,
        node: 2,
        window_id: 1,
        start_local_ns: t0 + 4_000_000_000,
        end_local_ns: t0 + 8_000_000_000,
        edges: vec![SharedEdge {
            dst: 0,
            counts: Default::default(),
            fit_error: None,
            line: Some(SharedLine {
                y_origin_ns: -1_234_000,
                gap_noise_ns: 12.5,
                slope: 3.5e-6,
                intercept_ns: 0.1 + 0.2,
                margin_ns: Some(1_500.75),
                sigma_ns: Some(42.25),
                all_packets: true,
                fwd_lower: vec![[-1.9e9, 20_000.0], [1.9e9, 20_100.5]],
                rev_upper: vec![[-1.8e9, -19_000.0], [1.95e9, -19_050.25]],
                // The breaks inside the window are found from these (`estimate::breaks`).
                slices: vec![[-7.25e9, 12.5, -7.0e9, -2.5], [0.25e9, -3.0, 0.75e9, -9.5]],
            }),
        }],
    }];
    data
}

#[test]
fn plane_round_trips_through_bytes() {
    let data = sample();
    let bytes = distprof_plane_bytes(&data);
    // The C++ side appends the plane to an XSpace; read it back from a whole space.
    let space = XSpace {
        planes: vec![XPlane::decode(bytes.as_slice()).unwrap()],
        ..Default::default()
    };
    let back = DistprofPlaneData::from_xplane(
        &XSpace::decode(space.encode_to_vec().as_slice())
            .unwrap()
            .planes[0],
    )
    .unwrap();
    assert_eq!(back, data);
}

/// The same contents give the same bytes, every time and after a round trip: the plane
/// the Python package appends can be compared byte for byte with the plugin's
/// (rust/distprof-py/tests/plane_identity.py relies on it).
#[test]
fn equal_contents_encode_to_equal_bytes() {
    let data = sample();
    let bytes = distprof_plane_bytes(&data);
    for _ in 0..8 {
        assert_eq!(distprof_plane_bytes(&data), bytes);
    }
    let back = DistprofPlaneData::from_xplane(&XPlane::decode(bytes.as_slice()).unwrap()).unwrap();
    assert_eq!(distprof_plane_bytes(&back), bytes);
}

/// The edge fits travel as JSON: every f64 of a hull must parse back to the same bits,
/// or the plane read back encodes to other bytes (serde_json's default float parser is
/// only best-effort; the workspace enables `float_roundtrip`).
#[test]
fn edge_fit_floats_survive_the_json() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut data = sample();
    let line = data.edge_fits[0].edges[0].line.as_mut().unwrap();
    line.fwd_lower = (0..2000).map(|_| [rng.gen_range(-7.5e9..7.5e9), rng.gen_range(-1e6..1e6)]).collect();
    line.slope = rng.gen_range(-1e-4..1e-4);
    let bytes = distprof_plane_bytes(&data);
    let back = DistprofPlaneData::from_xplane(&XPlane::decode(bytes.as_slice()).unwrap()).unwrap();
    assert_eq!(back.edge_fits, data.edge_fits);
    assert_eq!(distprof_plane_bytes(&back), bytes);
}

#[test]
fn survives_timestamp_normalisation() {
    let data = sample();
    let mut plane = data.to_xplane();
    for l in &mut plane.lines {
        l.timestamp_ns -= 1_763_000_000_000_000_000;
    }
    assert_eq!(DistprofPlaneData::from_xplane(&plane).unwrap(), data);
}
