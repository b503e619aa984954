#!/usr/bin/env python3
"""Checks a merged trace (`distprof merge`: Perfetto's protobuf `merged.pftrace`, or the
Chrome JSON of `--chrome`) against what Perfetto's own trace processor makes of it: the
tracks, slices, times, args and flows that the UI would draw.

    check_merged.py ENGINE_DIR MERGED.pftrace|MERGED.json
    check_merged.py ENGINE_DIR --same JSON PFTRACE
    check_merged.py ENGINE_DIR --self-test

ENGINE_DIR holds Perfetto's WebAssembly trace processor (tests/setup/55-perfetto-ui.sh),
driven by tests/perfetto/trace_processor.js. Every expectation is read from the trace
itself, independently of distprof: a protobuf trace by pftrace.py (its packets, tracks,
interned names, incremental clock, slice begins and ends, annotations and flow ids, as the
format defines them), a JSON one with Python's json module. For a JSON trace:

- every pid named by `process_name` is one process of Perfetto's with that name, every
  (pid, tid) named by `thread_name` one thread with that name, and every `X` event one
  slice on its thread's track, at its time to the ns with its duration (to the ns, or 1 ns
  short where Perfetto v20 truncates it) and name: nothing folded onto another track,
  dropped or moved;
- every slice carries its event's args;
- every step of every v1 flow (`s`, `t`..., `f`) is one link in Perfetto's flow table,
  from the slice enclosing one point to the slice enclosing the next;
- Perfetto counted no import error.

For a protobuf trace the same holds of its process and thread tracks, its slices (begin
and end, at their ns exactly), their debug annotations and its flows: the slices whose
begins carry one flow id, in time order, each linked to the next in Perfetto's flow table.

With --same, the two outputs of one input (merged once with --chrome, once without) must
give Perfetto the same processes, threads, slices (JSON times plus its
baseTimeNanoseconds), args and flow links, compared table to table.

With --self-test it checks the checker against the same parser on small documents: one
as merge writes them passes; the layouts merge avoids fail, each for its reason (raw
64-bit XLine ids as tids fold two lines onto one track, `displayTimeUnit` "ns" puts every
event 1000 times early, a key before `traceEvents` hides every event, a flow end without
`"bp":"e"` binds to no slice); and a small protobuf trace as merge writes it passes, while
the same with the packet defaults set again at every line without clearing the sequence's
state fails (v20.1 then resolves no interned name), and so does an interned string value
(`string_value_iid`, newer than v20.1, which drops the value); a flow id on the begins of three slices gives two links, but not as the
newer fixed64 `flow_ids` (field 47), which v20.1 does not read; the trace as merge writes
it, its packets deflated in two `compressed_packets` cut within a line, passes, while the
same gzipped as two gzip members fails (v20.1 reads only the first member).
"""
import argparse
import bisect
import collections
import gzip
import json
import os
import subprocess
import sys
import tempfile
import zlib

import pftrace

HERE = os.path.dirname(os.path.abspath(__file__))


def query(engine, trace, *sql):
    """Runs the queries on `trace` in Perfetto's trace processor; one result per query."""
    proc = subprocess.run(
        ["node", os.path.join(HERE, "trace_processor.js"), engine, trace, *sql],
        capture_output=True, text=True, timeout=600)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [r["error"] for r in results if "error" in r]
    if proc.returncode != 0 or errors or len(results) != len(sql):
        sys.exit(f"{trace}: Perfetto's trace processor failed (exit {proc.returncode}): "
                 f"{errors or proc.stderr[-2000:]}")
    return [r["rows"] for r in results]


def ns(us):
    """A JSON µs value (three decimals, as merge writes them) in ns."""
    return round(us * 1000)


def expected(doc):
    events = doc["traceEvents"]
    # Named tracks: ("thread", pid, tid) and ("process", pid).
    names = {("thread", e["pid"], e["tid"]) if e["name"] == "thread_name" else ("process", e["pid"]): e["args"]["name"]
             for e in events if e.get("ph") == "M" and e.get("name") in ("thread_name", "process_name")}
    slices = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            args = {k: v for k, v in e.get("args", {}).items() if v is not None}
            slices[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["dur"]), e["name"], args))
    return names, slices, flow_links(events, slices)


def flow_links(events, slices):
    """Each step of each v1 flow (keyed by id, category and name, its points in time order)
    as Perfetto binds it: from the slice enclosing one point to the slice enclosing the
    next (merge marks every end `"bp":"e"`, enclosing too). A slice is (pid, tid, ts)."""
    starts = {key: sorted((ts, ts + dur) for ts, dur, _, _ in v) for key, v in slices.items()}

    def enclosing(pid, tid, ts):
        spans = starts.get((pid, tid), [])
        i = bisect.bisect_right(spans, (ts, float("inf")))
        # The latest-starting slice that still contains ts is the deepest one; a point lies
        # in a collective's slice, within a few slices of the last one to start before it.
        for start, end in reversed(spans[max(0, i - 64):i]):
            if start <= ts <= end:
                return (pid, tid, start)
        return None

    flows = collections.defaultdict(list)
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            flows[(e["id"], e["cat"], e["name"])].append((ns(e["ts"]), e["pid"], e["tid"]))
    links = collections.Counter()
    for points in flows.values():
        bound = [enclosing(pid, tid, ts) for ts, pid, tid in sorted(points)]
        links.update(zip(bound, bound[1:]))
    return links


def perfetto_view(engine, trace, arg_prefix="args."):
    threads, processes, slices, args, flows, errors = query(
        engine, trace,
        "select p.pid, t.tid, t.name from thread t join process p using(upid) where p.pid is not null",
        "select pid, name from process",
        "select p.pid, t.tid, s.ts, s.dur, s.name, s.arg_set_id, s.id from slice s "
        "join thread_track tt on s.track_id = tt.id join thread t using(utid) join process p using(upid)",
        f"select arg_set_id, key, int_value, string_value, real_value from args where key glob '{arg_prefix}*'",
        "select slice_out, slice_in from flow",
        "select name, idx, value from stats where severity in ('error', 'data_losses') and value > 0")
    by_set = collections.defaultdict(dict)
    for set_id, key, i, s, r in args:
        values = [v for v in (i, s, r) if v is not None]
        by_set[set_id][key[len(arg_prefix):]] = values[0] if values else None
    tp_slices = collections.defaultdict(list)
    # A flow's ends as flow_links gives them: (pid, tid, ts) of the slice, by slice id.
    where = {}
    for pid, tid, ts, dur, name, set_id, slice_id in slices:
        tp_slices[(pid, tid)].append((ts, dur, name, by_set.get(set_id, {})))
        where[slice_id] = (pid, tid, ts)
    names = {("thread", p, t): n for p, t, n in threads} | {("process", p): n for p, n in processes}
    links = collections.Counter((where.get(out), where.get(into)) for out, into in flows)
    return names, tp_slices, links, errors


def same_value(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    return a == b


def expected_pftrace(path):
    names, slices, flows = pftrace.read(path)
    links = collections.Counter()
    for _, points in flows:
        links.update(zip(points, points[1:]))
    return names, slices, links


def problems(engine, path):
    """What Perfetto's trace processor draws differently from what the trace at `path` says."""
    proto = path.endswith(".pftrace")
    if proto:
        want_names, want_slices, want_links = expected_pftrace(path)
    else:
        with open(path) as f:
            want_names, want_slices, want_links = expected(json.load(f))
    names, slices, links, errors = perfetto_view(engine, path, "debug." if proto else "args.")
    # A JSON dur goes through a double and can lose its last ns; a protobuf time cannot.
    dur_slack = 0 if proto else 1
    found = []
    if errors:
        found.append(f"Perfetto counted import errors: {errors}")
    for key, name in want_names.items():
        if names.get(key) != name:
            found.append(f"{key[0]} {key[1:]}: Perfetto has {names.get(key)!r}, the JSON names it {name!r}")
    for key in sorted(set(want_slices) | set(slices)):
        want = sorted(want_slices.get(key, []), key=lambda s: (s[0], s[2]))
        got = sorted(slices.get(key, []), key=lambda s: (s[0], s[2]))
        if len(want) != len(got):
            found.append(f"thread {key}: {len(got)} slices in Perfetto, {len(want)} in the trace")
            continue
        for w, g in zip(want, got):
            # ts is exact (v20 parses its decimal text); dur goes through a double and is
            # truncated there, so 4.028 µs can read as 4027 ns.
            if w[0] != g[0] or w[2] != g[2] or not 0 <= w[1] - g[1] <= dur_slack:
                found.append(f"thread {key}: {w[:3]} in the trace is {g[:3]} in Perfetto")
                break
            if w[3].keys() != g[3].keys() or not all(same_value(w[3][k], g[3][k]) for k in w[3]):
                found.append(f"thread {key}: args {w[3]} are {g[3]} in Perfetto")
                break
    if links != want_links:
        wrong = list((links - want_links).elements())[:3]
        missing = list((want_links - links).elements())[:3]
        found.append(f"{sum(links.values())} flow links in Perfetto, {sum(want_links.values())} in the trace; "
                     f"links not in the trace {wrong}, links Perfetto lacks {missing}")
    return found, (len(want_names), sum(len(v) for v in want_slices.values()), len(want_slices),
                   sum(1 for v in want_slices.values() for s in v if s[3]), sum(links.values()))


def check(engine, path):
    found, (named, n, tracks, with_args, links) = problems(engine, path)
    if found:
        sys.exit(f"{path}: Perfetto does not draw what the trace says:\n  " + "\n  ".join(found[:20]))
    print(f"Perfetto trace processor: {path}: {named} named processes and threads, {n} slices on {tracks} "
          f"tracks at their times, {with_args} with their args, {links} flow links")


def same(engine, json_path, proto_path):
    """The Chrome JSON and the protobuf trace of one input, as Perfetto reads each."""
    with open(json_path) as f:
        base = json.load(f)["metadata"]["baseTimeNanoseconds"]
    jn, js, jl, je = perfetto_view(engine, json_path, "args.")
    pn, ps, pl, pe = perfetto_view(engine, proto_path, "debug.")
    found = [f"{p}: Perfetto counted import errors: {e}" for p, e in ((json_path, je), (proto_path, pe)) if e]
    shift = lambda where: where and (where[0], where[1], where[2] + base)
    js = {k: sorted((ts + base, dur, name, args) for ts, dur, name, args in v) for k, v in js.items()}
    ps = {k: sorted(v) for k, v in ps.items()}
    jl = collections.Counter({(shift(a), shift(b)): n for (a, b), n in jl.items()})
    # Perfetto names the threads and processes it creates for the pids of the JSON alone.
    jn = {k: v for k, v in jn.items() if v is not None}
    pn = {k: v for k, v in pn.items() if v is not None}
    if jn != pn:
        found.append(f"names differ: JSON only {sorted(set(jn.items()) - set(pn.items()))[:5]}, "
                     f"protobuf only {sorted(set(pn.items()) - set(jn.items()))[:5]}")
    for key in sorted(set(js) | set(ps)):
        a, b = js.get(key, []), ps.get(key, [])
        if len(a) != len(b):
            found.append(f"thread {key}: {len(a)} slices from the JSON, {len(b)} from the protobuf trace")
            continue
        for x, y in zip(a, b):
            # The JSON's dur may lose its last ns in a double (see problems()).
            if x[0] != y[0] or x[2] != y[2] or not 0 <= y[1] - x[1] <= 1 or x[3].keys() != y[3].keys() \
                    or not all(same_value(x[3][k], y[3][k]) for k in x[3]):
                found.append(f"thread {key}: JSON {x} is {y} in the protobuf trace")
                break
    if jl != pl:
        found.append(f"flow links: {sum(jl.values())} from the JSON, {sum(pl.values())} from the protobuf trace")
    if found:
        sys.exit(f"{json_path} and {proto_path} differ in Perfetto:\n  " + "\n  ".join(found[:20]))
    print(f"Perfetto trace processor: {json_path} and {proto_path}: the same {len(pn)} named processes and "
          f"threads, {sum(len(v) for v in ps.values())} slices with their args, {sum(pl.values())} flow links")


def proto_doc(layout="merge", flow_field=36):
    """A small protobuf trace as merge writes it (one sequence, started afresh at every line
    with the packet defaults: clock 64, incremental, reset per line, and the line's track;
    names interned in the packet of their first use on the line; flow 9 on the begins of the
    slices at 10, 15 and 20 ns), or with the flow in `flow_field`, or in a layout that v20.1
    reads wrongly: `defaults_again` sets the defaults again at a line without clearing the
    sequence's state (v20.1 then resolves no name interned before), `string_iid` interns the
    string value of an annotation (`string_value_iid` 17, `debug_annotation_string_values`
    29: newer than v20.1, which drops the value)."""
    def varint(v):
        out = bytearray()
        while True:
            b, v = v & 0x7F, v >> 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def num(n, v):
        return varint(n << 3) + varint(v)

    def msg(n, *parts):
        body = b"".join(parts)
        return varint(n << 3 | 2) + varint(len(body)) + body

    seq = num(10, 3)
    snapshot = msg(6, msg(1, num(1, 64), num(2, 0), num(3, 1)), msg(1, num(1, 6), num(2, 0)))
    base = 1_763_000_000_000_000_000
    names = [msg(2, num(1, 1), msg(2, b"all-reduce")), msg(3, num(1, 2), msg(2, b"hlo_op"))]
    value = msg(6, b"all-reduce.1")
    if layout == "string_iid":
        names.append(msg(29, num(1, 3), msg(2, b"all-reduce.1")))
        value = num(17, 3)
    out = [msg(1, seq, msg(60, num(1, 100), msg(3, num(1, 1), msg(6, b"node 0"))))]
    if layout == "defaults_again":
        out.append(msg(1, seq, num(13, 1), msg(59, num(58, 64)), msg(12, *names)))
    for tid, slices in ((1, [(10, 20), (20, 30)]), (2, [(15, 18)])):
        uuid = 100 + tid
        line_defaults = msg(59, num(58, 64), msg(11, num(11, uuid)))
        thread = msg(60, num(1, uuid), msg(4, num(1, 1), num(2, tid), msg(5, b"stream %d" % tid)))
        out.append(msg(1, seq, line_defaults, thread) if layout == "defaults_again" else msg(1, seq, num(13, 1), line_defaults, thread))
        out.append(msg(1, seq, snapshot))
        clock = 0
        interned = layout == "defaults_again"
        points = sorted([(e, 0, 2, None) for b, e in slices] + [(b, 1, 1, e) for b, e in slices])
        for ts, _, kind, _ in points:
            event = num(9, kind)
            extra = b""
            if kind == 1:
                event += num(10, 1) + msg(4, num(1, 2), value)
                if ts in (10, 15, 20):
                    event += num(36, 9) if flow_field == 36 else varint(47 << 3 | 1) + (9).to_bytes(8, "little")
                if not interned:
                    extra, interned = msg(12, *names), True
            out.append(msg(1, seq, num(8, base + ts - clock), msg(11, event), extra))
            clock = base + ts
    return b"".join(out)


def repacked(trace, how):
    """`trace` (plain packets of `proto_doc`) cut in two runs after its first slice's begin
    (so that the second run uses the names, track and clock state the first set), each run
    deflated into one `compressed_packets` packet (field 50) as merge writes them
    (`how` "compressed_packets"), or each gzipped and the two gzip members concatenated
    (`how` "gzip members", as workers gzipping their fragments would write the file)."""
    packets = [bytes(v) for _, _, v in pftrace.fields(trace)]
    cut = 4  # the process, the first line, the clock snapshot, the first begin
    runs = [b"".join(pftrace.field_bytes(1, p) for p in packets[:cut]),
            b"".join(pftrace.field_bytes(1, p) for p in packets[cut:])]
    if how == "gzip members":
        return b"".join(gzip.compress(r, 1) for r in runs)
    return b"".join(pftrace.field_bytes(1, pftrace.field_bytes(50, zlib.compress(r, 1))) for r in runs)


def self_test(engine):
    """The checker passes merge's layout and fails each layout merge avoids, for its reason."""
    # Two lines of one plane; the XLine ids are those of the JAX fixtures' host threads.
    lines = [(1, -7111125260410667223, "python"), (2, 3366187396752577046, "worker")]

    def doc(tid_of, head="", unit=None, end_binding={"bp": "e"}):
        events = []
        for k, (small, raw, name) in enumerate(lines):
            tid = tid_of(small, raw)
            events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                           "args": {"name": name, "xline_id": raw}})
            events.append({"ph": "X", "pid": 1, "tid": tid, "ts": 10.5 + k, "dur": 2.25,
                           "name": f"op{k}", "args": {"hlo_op": f"all-reduce.{k}", "correlation_id": 7 + k}})
            # A flow from inside op0 to inside op1, as --flows links collectives.
            events.append({"ph": "f" if k else "s", "id": 1, "pid": 1, "tid": tid, "ts": 11.5 + k,
                           "cat": "collective", "name": "all-reduce", **(end_binding if k else {})})
        body = json.dumps({"traceEvents": events, "metadata": {"baseTimeNanoseconds": 1}})
        if unit:
            body = '{"displayTimeUnit":"%s",' % unit + body[1:]
        return head + body if not head else '{' + head + body[1:]

    cases = [
        ("small tids, traceEvents first, no displayTimeUnit (as merge writes)", doc(lambda s, r: s), None),
        ("raw 64-bit XLine ids as tids", doc(lambda s, r: r), "slices in Perfetto"),
        ('displayTimeUnit "ns" over µs values', doc(lambda s, r: s, unit="ns"), "in Perfetto"),
        ("metadata before traceEvents", doc(lambda s, r: s, head='"metadata":{"a":1},'), "slices in Perfetto"),
        ('a flow end without "bp":"e"', doc(lambda s, r: s, end_binding={}), "flow links"),
    ]
    cases = [(what, "doc.json", text.encode(), expect) for what, text, expect in cases] + [
        ("protobuf trace as merge writes it", "doc.pftrace", proto_doc(), None),
        ("protobuf trace with the packet defaults set again per line without a clear", "doc.pftrace", proto_doc("defaults_again"), "in Perfetto"),
        ("protobuf trace with an interned string value (string_value_iid)", "doc.pftrace", proto_doc("string_iid"), "args"),
        ("protobuf trace with its flow ids in field 47 (fixed64)", "doc.pftrace", proto_doc(flow_field=47), "flow links"),
        ("protobuf trace deflated in two runs of compressed_packets, cut within a line (as merge writes it)",
         "doc.pftrace", repacked(proto_doc(), "compressed_packets"), None),
        ("protobuf trace gzipped as two gzip members", "doc.pftrace", repacked(proto_doc(), "gzip members"),
         "slices in Perfetto"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for what, name, data, expect in cases:
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            found, _ = problems(engine, path)
            if expect is None and found:
                sys.exit(f"self-test: {what}: the checker refuses it: {found}")
            if expect is not None and not any(expect in p for p in found):
                sys.exit(f"self-test: {what}: the checker lets it pass ({found})")
            print(f"Perfetto trace processor, self-test: {what}: "
                  + ("passes" if expect is None else "refused: " + next(p for p in found if expect in p)))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("engine", help="directory of engine_bundle.js and trace_processor.wasm")
    ap.add_argument("merged", nargs="?", help="a merged.pftrace or merged.trace.json written by distprof merge")
    ap.add_argument("--self-test", action="store_true", help="check the checker on small documents")
    ap.add_argument("--same", nargs=2, metavar=("JSON", "PFTRACE"), help="compare the two outputs of one input")
    a = ap.parse_args()
    if a.same:
        same(a.engine, *a.same)
    elif a.self_test:
        self_test(a.engine)
    elif a.merged:
        check(a.engine, a.merged)
    else:
        ap.error("give a merged.pftrace or merged.trace.json, --same JSON PFTRACE, or --self-test")


if __name__ == "__main__":
    main()
