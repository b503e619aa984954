"""The plane the Python package appends is the XLA plugin's plane for the same inputs.

Usage: python rust/distprof-py/tests/plane_identity.py   (the wheel installed, jax present)

Two JAX CPU processes (gloo) start distprof, probe inside `distprof.jax.trace`, and append
their plane. Each process then checks its own `.xplane.pb`:
1. the file is the profiler's file with the plugin's export (`Plugin::on_trace_export`, the
   function XLA's hook calls) appended byte for byte, so it decodes as XLA's
   `MergeFromString` of the export would;
2. the distprof plane in the file is byte-identical to what the plugin's plane exporter
   (`distprof_plane_bytes`) writes for the contents read back from it (node, snapshots,
   probe statistics, model): the same inputs give the same plane;
3. the plane says what it is: tracer clock `host` (stock jaxlib has converted device events
   to the host clock already), the probe timestamp mode, a model for node 1.
"""

import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading


def worker(rank, port, out_dir):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=rank)
    import numpy as np
    from jax.experimental import multihost_utils

    import distprof
    import distprof.jax
    from distprof import _native, _xspace

    distprof.jax.start({"probe_window_s": 1.0, "probe_cadence_us": 10000, "interface": "lo"}, strict=True)
    st = json.loads(_native.wait_agreed(60.0))
    assert st["state"] == "agreed", st
    multihost_utils.sync_global_devices("identity-before-trace")

    appended = []
    real_append = _xspace.append

    def recording_append(path, planes):
        with open(path, "rb") as f:
            appended.append((path, f.read(), planes))
        real_append(path, planes)

    _xspace.append = recording_append
    logdir = os.path.join(out_dir, f"node{rank}")
    with distprof.jax.trace(logdir, strict=True):
        for i in range(8):
            multihost_utils.process_allgather(np.arange(4.0) + i)
            threading.Event().wait(0.3)
    assert len(appended) == 1, f"one .xplane.pb expected, got {[p for p, _, _ in appended]}"
    _staged, original, export = appended[0]
    # The plane was appended in this process's staging directory; the file is then linked
    # into the log directory under the profiler's name.
    published = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    assert len(published) == 1, f"one published .xplane.pb expected under {logdir}, got {published}"
    assert not [d for d in os.listdir(logdir) if d.startswith(".distprof-staging-")], os.listdir(logdir)
    with open(published[0], "rb") as f:
        final = f.read()

    # 1. The profiler's bytes, then the export, nothing else.
    assert final == original + export, "the file is not the profiler's file followed by the export"
    assert _native.distprof_planes(original) == "[]", "the profiler's file had a distprof plane already"

    # 2. The plane in the file is the plugin exporter's plane for the contents it carries.
    (in_file,) = _native.distprof_plane_bytes(final)
    (contents,) = json.loads(_native.distprof_planes(final))
    assert json.loads(_native.distprof_planes(export)) == [contents]
    assert _native.plugin_plane_bytes(final) == [in_file], "plane differs from the plugin's for its contents"

    # 3. What it says.
    assert contents["node"] == rank and contents["reference_node"] == 0, contents
    assert contents["tracer_clock"] == "host", contents["tracer_clock"]
    assert contents["timestamp_mode"] in ("kernel", "user"), contents["timestamp_mode"]
    assert len(contents["snapshots"]) >= 2
    # R is the host clock here, read between the two host reads that bracket it.
    assert all(abs(s["s_ns"] - s["r_ns"]) <= s["read_window_ns"] for s in contents["snapshots"]), contents["snapshots"]
    if rank == 1:
        assert contents["model"]["reachable"] and contents["model"]["segments"], contents["model"]
        assert any(p["pairs_used"] > 0 for p in contents["probe_stats"]), contents["probe_stats"]
    print(f"process {rank}: plane of {len(in_file)} bytes identical to the plugin's; "
          f"{len(contents['model']['segments'])} model windows, {len(contents['snapshots'])} snapshot pairs")
    distprof.stop()
    jax.distributed.shutdown()


def main():
    if len(sys.argv) == 4:
        worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_DIST_PROF_OUTPUT_DIR=os.path.join(out, "jsonl"))
        procs = [subprocess.Popen([sys.executable, __file__, str(r), str(port), out], env=env) for r in range(2)]
        codes = [p.wait(timeout=180) for p in procs]
    if any(codes):
        sys.exit(f"plane_identity: exit codes {codes}")
    print("plane_identity: passed")


if __name__ == "__main__":
    main()
