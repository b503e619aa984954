//! The writer's packets as a reader sees them: tracks, times, names, flows, compression.

use super::*;
use crate::merge::chrome_doc::ChromeDoc;
use crate::merge::protobuf::{fields_of, Fields};
use crate::merge::trace_out::TraceFormat;

/// The packets of `bytes`, each as its fields (number, value: varint or bytes), those
/// of a compressed packet inflated in its place as a reader does.
fn packets(bytes: &[u8]) -> Vec<Vec<(u32, u64, Vec<u8>)>> {
    let mut out = Vec::new();
    for fields in packets_stored(bytes) {
        match &fields[..] {
            [(COMPRESSED_PACKETS, _, deflated)] => out.extend(packets(&inflate(deflated))),
            _ => out.push(fields),
        }
    }
    out
}

/// The packets of `bytes` as they are stored: a compressed packet as one.
fn packets_stored(bytes: &[u8]) -> Vec<Vec<(u32, u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut f = Fields::new(bytes, 0);
    while let Some(p) = f.next_field().unwrap() {
        assert_eq!((p.number, p.wire_type), (PACKET, protobuf::LEN));
        let mut fields = Vec::new();
        let mut g = Fields::new(p.bytes, 0);
        while let Some(x) = g.next_field().unwrap() {
            fields.push((x.number, x.int, x.bytes.to_vec()));
        }
        out.push(fields);
    }
    out
}

fn inflate(deflated: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(deflated).read_to_end(&mut raw).unwrap();
    raw
}

fn get(fields: &[(u32, u64, Vec<u8>)], n: u32) -> Option<&(u32, u64, Vec<u8>)> {
    fields.iter().find(|f| f.0 == n)
}

#[test]
fn padding_brings_every_length_to_whole_blocks_with_packets_of_one_unknown_field() {
    for len in (0..2 * ALIGN).step_by(7).chain([1, 2, 3, 4, 5, ALIGN - 1, ALIGN + 1]) {
        let mut out = vec![0u8; 0];
        pad(&mut out, len);
        assert_eq!((len + out.len()) % ALIGN, 0, "{len}");
        for p in packets(&out) {
            assert!(p.iter().all(|f| f.0 == PADDING), "{len}: {p:?}");
        }
    }
}

#[test]
fn slices_nest_end_first_on_ties_with_times_as_deltas_on_each_line_s_default_track() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.pftrace");
    let doc = ChromeDoc::create(&path, Some(0), TraceFormat::Pftrace).unwrap();
    let region = doc.next_job(1, |_| 1_000).unwrap();
    let base_ns = 1_763_000_000_000_000_000;
    // Flow 7 on the first event of line 2 of the node's first event plane.
    let flows = NodeFlows::from_ids(vec![(0, 2, 0, 7)]);
    let mut w = ProtoWriter::new(region.writer, 5, base_ns).with_flows(flows);
    let pid = w.begin_process("node 0 h /device:GPU:0").unwrap();
    let plane = ProtoPlane::new(&[]).unwrap();
    w.thread(pid, 1, "stream 1").unwrap();
    // A [0, 10 ns] holding C [0, 0]; B [10, 20 ns] starts where A ends; D starts
    // before B (out of order): the clock is reset and D written whole.
    for (event, (ts_ps, dur_ps)) in (0..).zip([(0, 10_999), (0, 0), (10_000, 10_000), (5_000, 1_000)]) {
        w.slice(&plane, ts_ps, dur_ps, 1, &[], event).unwrap();
    }
    w.thread(pid, 2, "stream 2").unwrap();
    w.slice(&plane, -3_000, 2_000, 1, &[], 0).unwrap();
    doc.fragment_done(region.order, w.finish().unwrap());
    doc.commit().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() % ALIGN, 0);
    let ps = packets(&bytes);
    // Every packet but the padding is on the one sequence.
    assert!(ps.iter().filter(|p| p[0].0 != PADDING).all(|p| p[0] == (SEQUENCE_ID, SEQUENCE, vec![])));
    // The events in file order: (type, absolute ns from base, track uuid: the default
    // that the line's first packet sets as it clears the sequence's state).
    let mut clock = 0u64;
    let mut track = 0;
    let mut got = Vec::new();
    for p in &ps {
        if get(p, CLOCK_SNAPSHOT).is_some() {
            clock = 0;
        }
        if let Some(defaults) = get(p, TRACE_PACKET_DEFAULTS) {
            assert_eq!(get(p, SEQUENCE_FLAGS).unwrap().1, SEQ_INCREMENTAL_STATE_CLEARED);
            let mut f = Fields::new(&defaults.2, 0);
            while let Some(x) = f.next_field().unwrap() {
                match x.number {
                    DEFAULTS_CLOCK_ID => assert_eq!(x.int, INCREMENTAL_CLOCK),
                    DEFAULTS_TRACK_EVENT => {
                        let t = Fields::new(x.bytes, 0).next_field().unwrap().unwrap();
                        assert_eq!(t.number, DEFAULTS_TRACK_UUID);
                        track = t.int;
                    }
                    n => panic!("TracePacketDefaults field {n}"),
                }
            }
        }
        let Some(te) = get(p, TRACK_EVENT) else { continue };
        // The time is the packet's last field: the bytes around it then stay the same from
        // one packet to the next, for the compressor (`slice_end`).
        assert_eq!(p.last().unwrap().0, TIMESTAMP, "{p:?}");
        clock += get(p, TIMESTAMP).unwrap().1;
        let mut ty = 0;
        let uuid = track;
        let mut flows = Vec::new();
        let mut f = Fields::new(&te.2, 0);
        while let Some(x) = f.next_field().unwrap() {
            match x.number {
                EVENT_TYPE => ty = x.int,
                EVENT_TRACK_UUID => panic!("an event names its track"),
                EVENT_FLOW_IDS => flows.push(x.int),
                _ => {}
            }
        }
        got.push((ty, clock as i64 - base_ns, uuid, flows));
    }
    let (t1, t2) = (track_uuid(pid, 1), track_uuid(pid, 2));
    let b = |ts, t| (TYPE_SLICE_BEGIN, ts, t, vec![]);
    let e = |ts, t| (TYPE_SLICE_END, ts, t, vec![]);
    assert_eq!(
        got,
        vec![b(0, t1), b(0, t1), e(0, t1), e(10, t1), b(10, t1), e(20, t1), b(5, t1), e(6, t1), (TYPE_SLICE_BEGIN, -3, t2, vec![7]), e(-1, t2)]
    );
    // Uuids are one-to-one over (pid, tid), the process's (tid 0) included.
    let mut seen = std::collections::HashSet::new();
    for pid in 0..200 {
        for tid in 0..200 {
            assert!(seen.insert(track_uuid(pid, tid)), "({pid}, {tid})");
        }
    }
}

#[test]
fn deflated_runs_hold_the_plain_packets_in_their_order_across_runs_and_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let plane = ProtoPlane::new(&[]).unwrap();
    let write = |compression: PftraceCompression| {
        let path = tmp.path().join(format!("{compression:?}.pftrace"));
        let doc = ChromeDoc::create(&path, Some(0), TraceFormat::Pftrace).unwrap();
        let region = doc.next_job(1, |_| 1_000).unwrap();
        let mut w = ProtoWriter::new(region.writer, 1, 1_763_000_000_000_000_000).with_compression(compression);
        let pid = w.begin_process("p").unwrap();
        // Enough slices for several runs; a line starts every 7,000 slices, so that
        // runs end within lines.
        for k in 0..30_000i64 {
            if k % 7_000 == 0 {
                w.thread(pid, 1 + (k / 7_000) as u32, "line").unwrap();
            }
            w.slice(&plane, k * 1_337_000, (k % 97) * 10_000, 1 + k % 3, &[], (k % 7_000) as u32).unwrap();
        }
        doc.fragment_done(region.order, w.finish().unwrap());
        doc.commit().unwrap();
        std::fs::read(&path).unwrap()
    };
    let (deflated, plain) = (write(PftraceCompression::Deflate), write(PftraceCompression::None));
    assert_eq!(deflated.len() % ALIGN, 0);
    let compressed = packets_stored(&deflated).iter().filter(|p| matches!(&p[..], [(COMPRESSED_PACKETS, _, _)])).count();
    assert!(compressed >= 4, "{compressed} compressed packets");
    assert!(packets_stored(&plain).iter().all(|p| get(p, COMPRESSED_PACKETS).is_none()));
    // The padding that ends each fragment differs with its length; the rest is the same.
    let unpadded = |bytes: &[u8]| packets(bytes).into_iter().filter(|p| p[0].0 != PADDING).collect::<Vec<_>>();
    let (inflated, plain_packets) = (unpadded(&deflated), unpadded(&plain));
    assert_eq!(inflated.iter().filter(|p| get(p, TRACK_EVENT).is_some()).count(), 60_000);
    assert!(inflated == plain_packets, "the inflated packets differ from the plain ones");
    assert!(deflated.len() * 3 < plain.len(), "{} deflated, {} plain", deflated.len(), plain.len());
}

#[test]
fn each_line_interns_the_names_it_uses_in_the_packet_of_their_first_use() {
    use distprof::xplane::{XEvent, XEventData, XPlane, XStat, XStatValue};
    use prost::Message;
    let mut p = XPlane::default();
    let module = p.intern_stat("hlo_module");
    let corr = p.intern_stat("correlation_id");
    let _unused = p.intern_stat("never_used");
    let kernel = p.intern_event("kernel");
    let other = p.intern_event("other");
    p.event_metadata.get_mut(&kernel).unwrap().stats.push(XStat { metadata_id: module, value: Some(XStatValue::StrValue("jit_step".into())) });
    let bytes = p.encode_to_vec();
    let fields = fields_of(&bytes);
    let plane = ProtoPlane::new(&fields).unwrap();
    let event = |meta, corr_value: u64| {
        XEvent { metadata_id: meta, data: Some(XEventData::OffsetPs(0)), duration_ps: 0, stats: vec![XStat { metadata_id: corr, value: Some(XStatValue::Uint64Value(corr_value)) }] }.encode_to_vec()
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.pftrace");
    let doc = ChromeDoc::create(&path, Some(0), TraceFormat::Pftrace).unwrap();
    let region = doc.next_job(1, |_| 1_000).unwrap();
    let mut w = ProtoWriter::new(region.writer, 1, 0);
    let pid = w.begin_process("p").unwrap();
    for tid in 1..=2 {
        w.thread(pid, tid, "line").unwrap();
        for (k, meta) in [kernel, kernel, other].into_iter().enumerate() {
            w.slice(&plane, 1_000 * k as i64, 0, meta, &event(meta, 10 + k as u64), k as u32).unwrap();
        }
    }
    doc.fragment_done(region.order, w.finish().unwrap());
    doc.commit().unwrap();
    // Per begin: (names it interns, its name, its args), resolved as a reader would,
    // on the state that the line's first packet cleared.
    let mut interned = std::collections::HashMap::new();
    let mut got = Vec::new();
    for p in packets(&std::fs::read(&path).unwrap()) {
        if get(&p, SEQUENCE_FLAGS).is_some() {
            interned.clear();
        }
        let mut new = Vec::new();
        if let Some(data) = get(&p, INTERNED_DATA) {
            let mut f = Fields::new(&data.2, 0);
            while let Some(entry) = f.next_field().unwrap() {
                let (mut iid, mut name) = (0, String::new());
                let mut g = Fields::new(entry.bytes, 0);
                while let Some(x) = g.next_field().unwrap() {
                    match x.number {
                        INTERNED_IID => iid = x.int,
                        INTERNED_NAME => name = String::from_utf8(x.bytes.to_vec()).unwrap(),
                        n => panic!("EventName field {n}"),
                    }
                }
                assert!(interned.insert((entry.number, iid), name.clone()).is_none(), "{name} interned twice");
                new.push(name);
            }
        }
        let Some(te) = get(&p, TRACK_EVENT) else { continue };
        // Last after the interned names too.
        assert_eq!(p.last().unwrap().0, TIMESTAMP, "{p:?}");
        let mut f = Fields::new(&te.2, 0);
        let (mut name, mut args) = (None, Vec::new());
        while let Some(x) = f.next_field().unwrap() {
            match x.number {
                EVENT_NAME_IID => name = Some(interned[&(INTERNED_EVENT_NAMES, x.int)].clone()),
                EVENT_ANNOTATIONS => {
                    let mut g = Fields::new(x.bytes, 0);
                    let key = g.next_field().unwrap().unwrap();
                    assert_eq!(key.number, ANNOTATION_NAME_IID);
                    let value = g.next_field().unwrap().unwrap();
                    let value = if value.number == ANNOTATION_STRING { String::from_utf8(value.bytes.to_vec()).unwrap() } else { value.int.to_string() };
                    args.push(format!("{}={value}", interned[&(INTERNED_ANNOTATION_NAMES, key.int)]));
                }
                _ => {}
            }
        }
        if let Some(name) = name {
            got.push((new, name, args));
        }
    }
    let line = vec![
        (vec!["kernel", "hlo_module", "correlation_id"], "kernel", vec!["hlo_module=jit_step", "correlation_id=10"]),
        (vec![], "kernel", vec!["hlo_module=jit_step", "correlation_id=11"]),
        (vec!["other"], "other", vec!["correlation_id=12"]),
    ];
    let want: Vec<_> = [line.clone(), line]
        .concat()
        .into_iter()
        .map(|(new, name, args)| (new.into_iter().map(String::from).collect::<Vec<_>>(), name.to_string(), args.into_iter().map(String::from).collect::<Vec<_>>()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_begin_of_128_bytes_or_more_gets_the_longer_lengths_it_needs() {
    use distprof::xplane::{XEvent, XEventData, XPlane, XStat, XStatValue};
    use prost::Message;
    let mut p = XPlane::default();
    let text = p.intern_stat("text");
    let kernel = p.intern_event("kernel");
    let bytes = p.encode_to_vec();
    let fields = fields_of(&bytes);
    let plane = ProtoPlane::new(&fields).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.pftrace");
    let doc = ChromeDoc::create(&path, Some(0), TraceFormat::Pftrace).unwrap();
    let region = doc.next_job(1, |_| 1_000).unwrap();
    let mut w = ProtoWriter::new(region.writer, 1, 0).with_compression(PftraceCompression::None);
    let pid = w.begin_process("p").unwrap();
    w.thread(pid, 1, "line").unwrap();
    // String args of 10 to 250 bytes: packets on both sides of 128 bytes, and TrackEvents
    // too.
    let lengths = [10, 100, 110, 120, 121, 122, 123, 124, 125, 130, 250];
    for (k, &n) in lengths.iter().enumerate() {
        let value = "v".repeat(n);
        let ev = XEvent { metadata_id: kernel, data: Some(XEventData::OffsetPs(0)), duration_ps: 0, stats: vec![XStat { metadata_id: text, value: Some(XStatValue::StrValue(value)) }] }.encode_to_vec();
        w.slice(&plane, 1_000 * k as i64, 500, kernel, &ev, k as u32).unwrap();
    }
    doc.fragment_done(region.order, w.finish().unwrap());
    doc.commit().unwrap();
    let mut got = Vec::new();
    for p in packets(&std::fs::read(&path).unwrap()) {
        let Some(te) = get(&p, TRACK_EVENT) else { continue };
        assert_eq!(p.last().unwrap().0, TIMESTAMP, "{p:?}");
        let mut f = Fields::new(&te.2, 0);
        while let Some(x) = f.next_field().unwrap() {
            if x.number == EVENT_ANNOTATIONS {
                let mut g = Fields::new(x.bytes, 0);
                g.next_field().unwrap().unwrap();
                got.push(g.next_field().unwrap().unwrap().bytes.len());
            }
        }
    }
    assert_eq!(got, lengths);
}
