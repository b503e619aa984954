#!/usr/bin/env python3
"""Writes the hand-made seed inputs of every fuzz target to corpus/<target>/.

The fuzzer grows the corpus from them; `cargo fuzz cmin` then keeps a small set that covers
the same code, which is what fuzz/corpus/ commits. Re-run only to rebuild seeds from scratch.
"""
import json, os, struct, shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "configs")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# config_file: the presets, and each kind of mistake the loader names.
for name in sorted(os.listdir(CONFIGS)):
    with open(os.path.join(CONFIGS, name), "rb") as f:
        write("config_file", name, f.read())
for i, text in enumerate([
    '{}',
    '{"enabled": true, "probe_cadence_us": 20000, "probe_window_s": 2.5}',
    '{"probe_cadance_us": 100, "probe_port": "8000", "estimator": "hul"}',
    '{"enabled": true, "enabled": false}',
    '{"probe_cadence_us": -1, "packet_spacing_us": 1e30, "probe_window_s": null}',
    '{"timestamping": "kernel", "estimator": "svm", "interface": "eth0", "output_dir": "/tmp/x"}',
    '{"reference_node": 4294967295, "probe_out_degree": 0, "graph_seed": 18446744073709551615}',
    '{"purity_rel_tolerance": 0.0, "purity_abs_tolerance_ns": 0, "max_bound_ns": 1}',
    '{"log_filter": "distprof=debug,warn", "snapshot_best_of": 1, "$schema": 3}',
    '[1, 2]',
    '{"enabled": true,}',
]):
    write("config_file", f"case-{i:02}.json", text)

# config_env: one variable per line, its first byte the index in the field table.
FIELDS = ["enabled", "probe_cadence_us", "probe_window_s", "packet_spacing_us",
          "snapshot_period_ms", "output_dir", "reference_node", "probe_out_degree",
          "graph_seed", "interface", "probe_port", "timestamping", "estimator",
          "handshake_timeout_ms", "rendezvous_timeout_ms", "log_filter",
          "purity_abs_tolerance_ns", "purity_rel_tolerance", "max_bound_ns",
          "snapshot_best_of"]


def env(**values):
    return b"\n".join(bytes([FIELDS.index(k)]) + v.encode() for k, v in values.items())


for i, data in enumerate([
    env(enabled="1", probe_cadence_us="50000"),
    env(enabled="yes", probe_window_s=" 2.5 ", timestamping="Kernel", estimator="two_point"),
    env(probe_cadence_us="-5", packet_spacing_us="1.5", probe_port="70000"),
    env(probe_window_s="inf", purity_rel_tolerance="nan", max_bound_ns=""),
    env(reference_node="99999999999999999999", graph_seed="18446744073709551615"),
    env(output_dir="", interface="eth0", log_filter="info,distprof=trace"),
    env(enabled="maybe", estimator="svn", snapshot_best_of="0"),
    env(handshake_timeout_ms="1", rendezvous_timeout_ms="0", snapshot_period_ms="1000000"),
]):
    write("config_env", f"case-{i:02}", data)

# kv_frame: first byte 0 = a stream of requests, 1 = a stream of replies.
def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def frame(body):
    return struct.pack("<I", len(body)) + body


requests = {
    "hello": frame(b"\x01DPKV" + struct.pack("<H", 1)),
    "get": frame(b"\x02" + s("distprof/round/0") + struct.pack("<Q", 5000)),
    "try_get": frame(b"\x03" + s("distprof/s/abc/node/3")),
    "set": frame(b"\x04" + s("distprof/s/abc/context") + s('{"ok": "välue"}')),
    "bad_magic": frame(b"\x01XXXX\x01\x00"),
    "huge_len": b"\xff\xff\xff\x7f\x02",
    "truncated_key": frame(b"\x02" + struct.pack("<I", 100) + b"abc"),
    "bad_utf8": frame(b"\x03" + struct.pack("<I", 2) + b"\xc3\x28"),
}
write("kv_frame", "req-session", b"\x00" + requests["hello"] + requests["set"] + requests["get"] + requests["try_get"])
for name, data in requests.items():
    write("kv_frame", f"req-{name}", b"\x00" + data)
replies = [frame(b"\x80"), frame(b"\x81" + s("value ✓")), frame(b"\x82"), frame(b"\x83"),
           frame(b"\x84" + s("key too long")), frame(b"\x99")]
write("kv_frame", "resp-all", b"\x01" + b"".join(replies[:5]))
for i, r in enumerate(replies):
    write("kv_frame", f"resp-{i}", b"\x01" + r)

# rendezvous_values: first byte 0 = announcement, 1 = join, 2 = echo.
sid = "0123456789abcdef0123456789abcdef"
ann = {"version": 2, "session_id": sid, "session_token": 12345, "num_nodes": 2,
       "reference_node": 0, "config_digest": "ab12",
       "config": {"probe_cadence_us": 40000, "probe_window_s": 4.0, "estimator": "hull"},
       "graph": {"out_degree": 8, "seed": 1}}
join = {"session_id": sid, "node": 1, "nonce": 77, "num_nodes": 2,
        "probe_addr": "10.0.0.2:40001", "hostname": "gpu-2", "config_digest": "ab12",
        "problem": None}
echo = {"session_id": sid, "from": 0, "to": 1, "nonce": 77}
vals = {
    "ann": (0, ann),
    "ann-large": (0, dict(ann, num_nodes=4000000000, graph={"out_degree": 64, "seed": 18446744073709551615})),
    "ann-dense": (0, dict(ann, num_nodes=500, graph={"out_degree": 64, "seed": 3})),
    "join": (1, join),
    "join-problem": (1, dict(join, problem="config differs: probe_out_degree")),
    "join-v6": (1, dict(join, probe_addr="[fe80::1]:40001")),
    "echo": (2, echo),
    "echo-wrong-nonce": (2, dict(echo, nonce=78)),
}
for name, (k, v) in vals.items():
    write("rendezvous_values", name, bytes([k]) + json.dumps(v).encode())
write("rendezvous_values", "ann-extra-key", b"\x00" + json.dumps(dict(ann, extra=1)).encode())

# report_input: the documented example and variations of it.
seg = {"window_id": 0, "start_local_ns": 0, "end_local_ns": 4000000000,
       "mid_local_ns": 2000000000, "offset_ns": 2350000.0, "drift_ppb": -5470.0,
       "bound_ns": 14000.0, "flagged": False}
fit = {"window_id": 0, "start_ns": 0, "end_ns": 4000000000, "mid_ns": 2000000000,
       "offset_ns": 2350000.0, "drift_ppb": -5470.0, "margin_ns": 12000.0}
facts = {"run_name": "session 3f2a", "reference_node": 0, "timestamp_mode": "kernel",
         "timestamp_bound_ns": 1000.0, "estimator": "hull", "bound_limit_ns": 40000.0,
         "config": {"probe_cadence_us": 40000}, "synthetic": False}
points = [{"t_ns": 1000 + 40000000 * i, "owd_ns": 2362000 + (-1) ** i * 12000 + 37 * i,
           "forward": i % 2 == 0, "pure": i % 3 != 0} for i in range(12)]
doc = {"facts": facts,
       "nodes": [{"node": 0, "reachable": True, "segments": []},
                 {"node": 1, "reachable": True, "segments": [seg, dict(seg, window_id=1, start_local_ns=4000000000, end_local_ns=8000000000, mid_local_ns=6000000000, flagged=True, bound_ns=90000.0)]}],
       "hostnames": {"1": "gpu-host-1"},
       "edges": [{"src": 0, "dst": 1, "health": "ok", "health_note": "", "points": points,
                  "fits": [fit, dict(fit, window_id=1, start_ns=4000000000, end_ns=8000000000, mid_ns=6000000000, margin_ns=-300.0)]},
                 {"src": 1, "dst": 0, "health": "down", "health_note": "silent", "points": [], "fits": []}],
       "loops": [{"nodes": [0, 1, 2], "window_id": 0, "residual_ns": 180.0},
                 {"nodes": [0, 1], "window_id": None, "residual_ns": -12.5}]}
write("report_input", "example.json", json.dumps(doc, indent=1))
three = json.loads(json.dumps(doc))
three["nodes"].append({"node": 2, "reachable": False, "segments": []})
three["edges"].append({"src": 2, "dst": 7, "health": "degraded", "health_note": "unknown peer", "points": points[:3], "fits": []})
three["facts"]["reference_node"] = 2
write("report_input", "three-nodes.json", json.dumps(three))
empty = {"facts": dict(facts, estimator=None, bound_limit_ns=None, timestamp_bound_ns=None, synthetic=True), "nodes": [], "edges": []}
write("report_input", "empty.json", json.dumps(empty))
extreme = json.loads(json.dumps(doc))
extreme["edges"][0]["points"] = [{"t_ns": -9223372036854775808, "owd_ns": 9223372036854775807, "forward": True, "pure": True},
                                 {"t_ns": 9223372036854775807, "owd_ns": -9223372036854775808, "forward": False, "pure": True}]
extreme["edges"][0]["fits"][0].update(start_ns=9223372036854775807, end_ns=-9223372036854775808, drift_ppb=1e308, offset_ns=-1e308)
extreme["nodes"][1]["segments"][0].update(end_local_ns=-9223372036854775808, drift_ppb=1e300, bound_ns=-1.0)
write("report_input", "extreme.json", json.dumps(extreme))
many = json.loads(json.dumps(doc))
many["nodes"] = [{"node": n, "reachable": True, "segments": [dict(seg, window_id=w, start_local_ns=w * 4000000000, end_local_ns=(w + 1) * 4000000000, mid_local_ns=w * 4000000000 + 2000000000) for w in range(3)]} for n in range(6)]
many["edges"] = [{"src": a, "dst": (a + 1) % 6, "health": "ok", "health_note": "", "points": points[:4], "fits": [fit]} for a in range(6)]
write("report_input", "six-nodes.json", json.dumps(many))

# wire_decode: probe datagrams (48 bytes), valid of every kind and each kind of reject.
def packet(kind, token=0x1234_5678_9abc_def0, src=0, dst=1, seq=7, s0=-(2**63), s1=-(2**63),
           magic=b"DPRB", version=1, reserved=0):
    return (magic + bytes([version, kind]) + struct.pack("<H", reserved) + struct.pack("<Q", token)
            + struct.pack("<III", src, dst, seq) + b"\0\0\0\0" + struct.pack("<qq", s0, s1))


for kind in range(1, 6):
    write("wire_decode", f"kind-{kind}", packet(kind, s0=1_790_000_000_000_000_000, s1=1_790_000_000_000_050_000))
write("wire_decode", "bad-magic", packet(1, magic=b"XXXX"))
write("wire_decode", "bad-version", packet(1, version=9))
write("wire_decode", "bad-kind", packet(9))
write("wire_decode", "reserved", packet(1, reserved=1))
write("wire_decode", "short", packet(1)[:47])

# jsonl: a meta line and window lines as the probe engine writes them.
with open(os.path.join(CONFIGS, "default.json")) as f:
    config = {k: v for k, v in json.load(f).items() if k not in ("$schema", "description")}
config["output_dir"] = "/tmp/xla_dist_prof"
meta = {"meta": True, "format_version": 1, "node": 0, "session_id": sid, "session_token": 12345,
        "reference_node": 0, "timestamp_mode": "kernel", "stamp_error_bound_ns": 1000,
        "out_edges": [1, 2], "start_local_ns": 1_790_000_000_000_000_000, "config": config}
T = 1_790_000_000_000_000_000


def record(dst, seq, t, off=37_000, d=12_000):
    fwd_tx = [t, t + 50_000]
    fwd_rx = [t + d + off, t + 50_000 + d + off]
    rev_tx = [t + 2 * d + off, t + 2 * d + 50_000 + off]
    rev_rx = [t + 3 * d, t + 3 * d + 50_000]
    return [0, dst, seq] + fwd_tx + fwd_rx + rev_tx + rev_rx


def window(w, nrec=3):
    start = T + w * 4_000_000_000
    return {"node": 0, "window_id": w, "start_local_ns": start, "end_local_ns": start + 4_000_000_000,
            "edges": [{"src": 0, "dst": d, "sent": nrec, "complete": nrec, "pure": nrec - 1, "lost": 0,
                       "up": True, "went_down": 0, "came_up": 0} for d in (1, 2)],
            "answered": {"1": 3}, "dropped": {"wrong_token": 1},
            "records": [record(d, k, start + k * 40_000_000) for d in (1, 2) for k in range(nrec)]}


lines = [json.dumps(meta)] + [json.dumps(window(w)) for w in range(3)]
write("jsonl", "three-windows.jsonl", "\n".join(lines) + "\n")
write("jsonl", "meta-only.jsonl", lines[0] + "\n")
write("jsonl", "cut-tail.jsonl", "\n".join(lines[:2]) + "\n" + lines[2][:57])
vmeta = dict(meta, virtual_clock={"offset_ns": -5000, "drift_ppb": 12.5, "wander_ns": 300.0, "epoch_real_ns": T},
             timestamp_mode="user", timestamp_note="hardware timestamping unavailable")
write("jsonl", "virtual-clock.jsonl", json.dumps(vmeta) + "\n" + json.dumps(dict(window(0, 1), model={"offset_ns": 1.5})) + "\n")
write("jsonl", "empty.jsonl", "")
write("jsonl", "bad-line.jsonl", lines[0] + "\n{\"node\": 0}\n" + lines[1] + "\n")
