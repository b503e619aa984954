//! One node's XSpace rewritten in memory, checked against the time map's own (i128,
//! uncached) functions: the streaming rewrite, with its line-relative i64 arithmetic and
//! cached pieces, must land every event where the map says, keep every other byte, and
//! renumber, rename and mark what it should. (Whole merges are tested in
//! rust/distprof-offline/tests/merge_jax.rs.)
use super::event::ns_plus_ps;
use super::*;
use crate::merge::protobuf::read_varint;
use crate::merge::line_map::round_i64;
use crate::merge::prescan::prescan;
use distprof::distprof_plane::{DistprofPlaneData, TracerStart};
use distprof::model::NodeClockModel;
use distprof::snapshot::SnapshotPair;
use distprof::xplane::{XEvent, XEventData, XLine, XSpace, XStat, HOST_THREADS_PLANE};
use std::io::{Read, Seek};

const T0_NS: i64 = 1_763_000_000_000_000_000;

fn task_env(stop_ns: i64) -> XPlane {
    let mut p = XPlane { name: TASK_ENV_PLANE.into(), ..Default::default() };
    for (name, v) in [(PROFILE_START_STAT, T0_NS), (PROFILE_STOP_STAT, stop_ns)] {
        let id = p.intern_stat(name);
        p.stats.push(XStat { metadata_id: id, value: Some(XStatValue::Uint64Value(v as u64)) });
    }
    p
}

/// A plane of two lines (relative timestamps 1 µs and 3 s) of 50 events each, 37 ms
/// apart, with a stat on each event; plane id 99 (renumbered by the rewrite).
fn events_plane(name: &str) -> XPlane {
    let mut p = XPlane { id: 99, name: name.into(), ..Default::default() };
    let k = p.intern_event("kernel");
    let corr = p.intern_stat("correlation_id");
    for (id, ts) in [(1, 1_000), (2, 3_000_000_000)] {
        p.lines.push(XLine {
            id,
            name: format!("stream {id}"),
            timestamp_ns: ts,
            duration_ps: 2_000_000_000_000,
            events: (0..50i64)
                .map(|i| XEvent {
                    metadata_id: k,
                    data: Some(XEventData::OffsetPs(i * 37_000_000_000 + 123)),
                    duration_ps: 10_000_000 + i,
                    stats: vec![XStat { metadata_id: corr, value: Some(XStatValue::Int64Value(i)) }],
                })
                .collect(),
            ..Default::default()
        });
    }
    p
}

/// Three 2 s windows whose offsets (1 ms, then 1.02 ms, then 0.99 ms) give the map
/// different slopes across the profile (at most 1.5e-5, between the last two midpoints).
fn model() -> NodeClockModel {
    let offsets = [1_000_000.0, 1_020_000.0, 990_000.0];
    let segments = crate::test_support::segments(T0_NS, 2_000_000_000, &offsets, 5_000.0, |_| (900.0, false));
    NodeClockModel { node: 3, reachable: true, segments }
}

/// Node 3's plane: the model and a GPU tracer clock R running 100 ppm fast, 5 s behind S.
fn plane_data() -> DistprofPlaneData {
    let start = TracerStart { s_ns: T0_NS, r_ns: T0_NS - 5_000_000_000 };
    DistprofPlaneData {
        session_id: String::new(),
        node: 3,
        reference_node: 0,
        hostname: "in-host".into(),
        timestamp_mode: "kernel".into(),
        timestamps: None,
        tracer_clock: "rocm".into(),
        tracer_start: Some(start),
        model: model(),
        snapshots: (0..80)
            .map(|k| SnapshotPair { s_ns: T0_NS + k * 100_000_000, r_ns: start.r_ns + k * 100_010_000, read_window_ns: 50 })
            .collect(),
        probe_stats: Vec::new(),
        edge_fits: Vec::new(),
    }
}

struct Rewritten {
    space: XSpace,
    stats: RewriteStats,
    next_plane_id: i64,
    next_device_id: i64,
}

fn rewrite(input: &XSpace, map: &NodeTimeMap, g0_ns: i64) -> Rewritten {
    let buf = input.encode_to_vec();
    let info = prescan(&buf).unwrap();
    let mut file = tempfile::tempfile().unwrap();
    let mut out = PatchWriter::new(file.try_clone().unwrap());
    let (mut next_plane_id, mut next_device_id) = (10, 1);
    let o = NodeOutput {
        node: 3,
        hostname: "node3.out",
        g0_ns,
        next_plane_id: &mut next_plane_id,
        next_device_id: &mut next_device_id,
        chrome: None,
        progress: &mut |_| {},
    };
    let stats = rewrite_space(&buf, &info, map, &mut out, o).unwrap();
    out.finish().unwrap();
    let mut bytes = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut bytes).unwrap();
    Rewritten { space: XSpace::decode(bytes.as_slice()).unwrap(), stats, next_plane_id, next_device_id }
}

/// Absolute start and end (ps) of every event of `plane`, line by line.
fn times(p: &XPlane, origin_ns: i64) -> Vec<(i128, i128)> {
    p.lines
        .iter()
        .flat_map(|l| {
            let base = (origin_ns as i128 + l.timestamp_ns as i128) * 1000;
            l.events.iter().map(move |e| {
                let s = base + e.offset_ps() as i128;
                (s, s + e.duration_ps as i128)
            })
        })
        .collect()
}

fn plane<'a>(s: &'a XSpace, name: &str) -> &'a XPlane {
    s.planes.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no plane {name}"))
}

#[test]
fn host_and_device_events_land_where_the_time_map_puts_them() {
    let data = plane_data();
    let input = XSpace {
        planes: vec![task_env(T0_NS + 6_000_000_000), events_plane(HOST_THREADS_PLANE), events_plane("/device:GPU:0"), data.to_xplane()],
        hostnames: vec!["in-host".into()],
        ..Default::default()
    };
    let map = NodeTimeMap::from_plane(&data, false).unwrap();
    let g0 = T0_NS - 2_000_000;
    let r = rewrite(&input, &map, g0);
    // The reference evaluates the correction at epoch ns rounded through f64 (steps of
    // 256 ns in this decade: timemap.rs `s_to_g_ps`), the rewrite at whole ns: they may
    // differ by 256 ns x the steepest slope (1.5e-5), 3.8 ps, plus a ps of rounding each.
    const TOL_PS: i128 = 6;
    assert_eq!(r.stats, RewriteStats { planes: 4, lines: 4, events: 200, device_events_without_fit: 0 });
    for (name, to_g) in [
        (HOST_THREADS_PLANE, &(|ps| map.host_to_g_ps(ps)) as &dyn Fn(i128) -> i128),
        ("/device:GPU:0", &|ps| map.device_to_g_ps(ps)),
    ] {
        let want: Vec<(i128, i128)> =
            times(plane(&input, name), T0_NS).iter().map(|&(s, e)| (to_g(s), to_g(e))).collect();
        let got = times(plane(&r.space, name), g0);
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g.0 - w.0).abs() <= TOL_PS && (g.1 - w.1).abs() <= TOL_PS, "{name} event {k}: {g:?} against {w:?}");
        }
    }
    // The map moved events by about a millisecond, and the device clock's 100 ppm over
    // seconds on top: the comparison above is not against the input.
    let host_in = times(plane(&input, HOST_THREADS_PLANE), T0_NS)[0].0;
    assert!((times(plane(&r.space, HOST_THREADS_PLANE), g0)[0].0 - (host_in - 1_000_000_000)).abs() < 100_000_000);
}

#[test]
fn everything_but_times_ids_and_names_is_kept_and_the_task_environment_moves_to_g() {
    let data = plane_data();
    let input = XSpace {
        planes: vec![task_env(T0_NS + 6_000_000_000), events_plane("/device:GPU:0"), events_plane(HOST_THREADS_PLANE), data.to_xplane()],
        hostnames: vec!["in-host".into()],
        warnings: vec!["kept".into()],
        ..Default::default()
    };
    let map = NodeTimeMap::from_plane(&data, false).unwrap();
    let g0 = T0_NS - 2_000_000;
    let r = rewrite(&input, &map, g0);
    assert_eq!(r.space.hostnames, ["node3.out"]);
    assert_eq!(r.space.warnings, ["kept"]);
    // Plane ids: device planes from next_device_id, the others from next_plane_id.
    let ids: Vec<(String, i64)> = r.space.planes.iter().map(|p| (p.name.clone(), p.id)).collect();
    assert_eq!(
        ids,
        [
            (TASK_ENV_PLANE.to_string(), 10),
            ("/device:GPU:0".to_string(), 1),
            (HOST_THREADS_PLANE.to_string(), 11),
            (DISTPROF_APPLIED_PLANE.to_string(), 12)
        ]
    );
    assert_eq!((r.next_plane_id, r.next_device_id), (13, 2));
    let (a, b) = (plane(&input, HOST_THREADS_PLANE), plane(&r.space, HOST_THREADS_PLANE));
    assert_eq!((&a.event_metadata, &a.stat_metadata), (&b.event_metadata, &b.stat_metadata));
    for (la, lb) in a.lines.iter().zip(&b.lines) {
        assert_eq!((la.id, &la.name), (lb.id, &lb.name));
        for (ea, eb) in la.events.iter().zip(&lb.events) {
            assert_eq!((ea.metadata_id, &ea.stats), (eb.metadata_id, &eb.stats));
        }
    }
    // The distprof plane is kept byte for byte but renamed: its model is applied.
    let applied = plane(&r.space, DISTPROF_APPLIED_PLANE);
    assert_eq!(DistprofPlaneData::from_xplane(applied).unwrap(), data);
    let env = plane(&r.space, TASK_ENV_PLANE);
    assert_eq!(env.stat_u64(PROFILE_START_STAT), Some(g0 as u64));
    let stop = map.host_to_g_ps((T0_NS + 6_000_000_000) as i128 * 1000).div_euclid(1000);
    assert_eq!(env.stat_u64(PROFILE_STOP_STAT), Some(stop as u64));
}

#[test]
fn aggregated_and_unusual_events_take_the_general_path_to_the_same_times() {
    let mut p = events_plane(HOST_THREADS_PLANE);
    p.lines.truncate(1);
    p.lines[0].events.truncate(2);
    let common = p.lines[0].events[1].clone();
    let aggregated_dur = p.lines[0].events[0].duration_ps;
    // Aggregated: no position, kept as it is.
    p.lines[0].events[0].data = Some(XEventData::NumOccurrences(7));
    // More stats than the fast path's four kept ranges allow: the general path.
    let mut busy = common.clone();
    busy.stats = (0..9).map(|i| XStat { metadata_id: 1, value: Some(XStatValue::Int64Value(i)) }).collect();
    busy.stats.insert(0, common.stats[0].clone());
    p.lines[0].events.push(busy.clone());
    let input = XSpace { planes: vec![task_env(T0_NS + 1_000_000_000), p], ..Default::default() };
    let map = NodeTimeMap::from_parts(&model(), None, false).unwrap();
    let r = rewrite(&input, &map, T0_NS - 2_000_000);
    let events = &plane(&r.space, HOST_THREADS_PLANE).lines[0].events;
    assert_eq!(events[0].data, Some(XEventData::NumOccurrences(7)));
    assert_eq!(events[0].duration_ps, aggregated_dur);
    assert_eq!((events[2].offset_ps(), events[2].duration_ps), (events[1].offset_ps(), events[1].duration_ps));
    assert_eq!(events[2].stats, busy.stats);
}

#[test]
fn a_trace_without_a_model_is_marked_uncorrected_and_keeps_its_times() {
    let input = XSpace {
        planes: vec![task_env(T0_NS + 6_000_000_000), events_plane(HOST_THREADS_PLANE)],
        hostnames: vec!["in-host".into()],
        ..Default::default()
    };
    let r = rewrite(&input, &NodeTimeMap::identity(), T0_NS);
    let marker = plane(&r.space, DISTPROF_APPLIED_PLANE);
    assert_eq!(marker.stat_u64("uncorrected"), Some(1));
    assert_eq!(times(plane(&r.space, HOST_THREADS_PLANE), T0_NS), times(plane(&input, HOST_THREADS_PLANE), T0_NS));
}

#[test]
fn the_composed_piece_agrees_with_both_maps_across_their_pieces() {
    // Host and device lines, walked in 1.3 ms steps over 6 s, cross the model's window
    // midpoints (S -> G pieces) and the snapshot pieces of R -> S (every 100 ms): the
    // composed line may differ from the exact path by its 2 ps, never pick another piece.
    let map = NodeTimeMap::from_plane(&plane_data(), false).unwrap();
    for device in [false, true] {
        let m = Mapper { map: &map, device, profile_start_ns: T0_NS, cache: std::cell::Cell::new(CorrectionPiece::EMPTY) };
        let exact = Mapper { map: &map, device, profile_start_ns: T0_NS, cache: std::cell::Cell::new(CorrectionPiece::EMPTY) };
        let base_ps = (T0_NS as i128 + 1_000) * 1000;
        let ref_ps = m.map_ps(base_ps).div_euclid(1000) * 1000;
        let (fast, slow) = (LineMapper::new(&m, base_ps, ref_ps), LineMapper::new(&exact, base_ps, ref_ps));
        let mut composed = 0;
        for k in 0..4_600i64 {
            let off = k * 1_300_000_000 + k % 7;
            let piece = fast.composed.get();
            composed += i32::from(piece.lo <= off && off < piece.hi);
            let got = fast.rel(off);
            let want = slow.rel_exact(off);
            assert!((got - want).abs() <= 2, "device {device}, offset {off} ps: {got} against {want}");
        }
        // Most offsets took the composed line (the pieces are long against the steps).
        assert!(composed > 4_000, "device {device}: {composed} of 4600 composed");
    }
}

#[test]
fn arithmetic_helpers_round_saturate_and_refuse_overlong_varints() {
    assert_eq!((round_i64(2.5), round_i64(-2.5), round_i64(2.4), round_i64(-0.4)), (3, -3, 2, 0));
    assert_eq!(ns_plus_ps(5, 7), 5_007);
    assert_eq!(ns_plus_ps(i64::MAX / 10, 1), i64::MAX);
    assert_eq!(ns_plus_ps(i64::MIN / 10, -1), i64::MIN);
    let mut pos = 0;
    assert_eq!(read_varint(&[0xac, 0x02], &mut pos), Some(300));
    assert_eq!(pos, 2);
    assert_eq!(read_varint(&[0x80, 0x80], &mut 0), None, "truncated");
    assert_eq!(read_varint(&[0xff; 11], &mut 0), None, "longer than 64 bits");
}
