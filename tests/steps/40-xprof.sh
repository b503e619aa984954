#!/usr/bin/env bash
# Merged output loads through XProf's own conversion, and the Chrome JSON puts the real JAX
# collectives back in happens-before order. The Rust test shifts the real JAX fixtures by
# known clocks, merges them back and leaves its outputs in $out; XProf (from PyPI, installed
# by tests/setup/30-python.sh) then converts every merged .xplane.pb with
# xspace_to_tool_data(..., "trace_viewer"), and Python checks the Chrome JSON independently.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/py312/bin/python
if [ ! -x "$py" ]; then echo "40-xprof: run tests/setup/30-python.sh first" >&2; exit 1; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
DISTPROF_MERGE_TEST_OUT="$out" cargo nextest run -p distprof-offline --test merge_jax --no-fail-fast >/dev/null
"$py" - "$out" <<'PY' 2> "$out/xprof.log" || { tail -20 "$out/xprof.log"; exit 1; }
import glob, json, sys
from xprof.convert import raw_to_tool_data

out = sys.argv[1]
files = sorted(glob.glob(f"{out}/*.xplane.pb"))
assert len(files) == 3, files
for path in files:
    data, content_type = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    assert data, f"XProf returned nothing for {path}"
    events = json.loads(data)["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    ar = [e for e in events if e.get("name") == "all-reduce" and e.get("ph") == "X" and e["pid"] == 701]
    assert len(ar) == 10, (path, len(ar))
    if "node1." in path:
        gpu = [pid for pid, name in procs.items() if name.startswith("/device:GPU:")]
        assert len(gpu) == 1, procs
        assert sum(1 for e in events if e.get("pid") == gpu[0] and e.get("ph") == "X") == 10
    print(f"XProf trace_viewer: {path.split('/')[-1]}: {len(events)} events, processes {sorted(procs.values())}")

# Independent check of the alignment in the Chrome JSON: the i-th occurrence of each
# collective overlaps on every node's host plane.
doc = json.load(open(f"{out}/merged.trace.json"))
assert "displayTimeUnit" not in doc  # older Perfetto would take it as the unit of ts
names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
host_pids = {pid for pid, n in names.items() if n.endswith("/host:CPU")}
assert len(host_pids) == 3, names
for op in ("all-reduce", "all-gather"):
    per = {pid: sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                       if e.get("ph") == "X" and e["pid"] == pid and e["name"] == op) for pid in host_pids}
    n = min(len(v) for v in per.values())
    assert n == 10, {p: len(v) for p, v in per.items()}
    for i in range(n):
        start = max(v[i][0] for v in per.values())
        end = min(v[i][1] for v in per.values())
        assert start < end, f"{op} #{i} does not overlap across nodes: start {start} end {end}"
print("Chrome JSON: every all-reduce and all-gather overlaps across the 3 nodes")
PY
