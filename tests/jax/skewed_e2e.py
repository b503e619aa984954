"""End to end with stock JAX and clocks that really differ: distprof's Python package in N
JAX CPU processes, each under libfaketime with its own offset and drift.

Usage: python tests/jax/skewed_e2e.py OUT_DIR --distprof target/debug/distprof
       [--processes 4] [--steps 30] [--goal-us 50] [--max-error-us 100]

Each process runs `jax.distributed.initialize`, `distprof.jax.start()` and, inside
`distprof.jax.trace(...)`, `--steps` steps of two cross-process collectives (a jitted sum over
a sharded array: all-reduce; `process_allgather`: all-gather) over gloo. libfaketime shifts
CLOCK_REALTIME as libc reports it to the process (so both the profiler's stamps and
distprof's probe stamps); it does not reach the kernel's socket timestamps (SO_TIMESTAMPING
stamps are taken in the kernel on the real clock), so the processes force user-space probe
stamps (`XLA_DIST_PROF_TIMESTAMPING=user`), which are read through libc and are skewed.

The truth: each process samples (real, faked) clock pairs, reading the real clock with the
raw `clock_gettime` system call, which libfaketime does not intercept; a line through them is
the process's injected clock. Then, on the traces alone (no JSONL, no true model):
- `distprof validate` finds happens-before violations before correction and none after;
- `distprof merge` writes one timeline where the i-th occurrence of each collective overlaps
  on every process (checked here on the Chrome JSON), and XProf's conversion loads every
  merged `.xplane.pb`;
- each process's clock model in its distprof plane, evaluated over the profiled span, is
  compared with the injected clock: p99 and max error are printed against the goal
  (`--goal-us`) and must be within `--max-error-us`.
"""

import argparse
import ctypes
import glob
import json
import os
import socket
import subprocess
import sys
import threading

# Offsets (ms) and drifts (ppm) given to libfaketime; process 0 is the reference, so its
# clock is skewed too: the model must carry the difference, not the absolute skew.
SKEWS = [(+35.0, +20.0), (-25.0, -30.0), (+60.0, +45.0), (-50.0, +10.0)]
SYS_CLOCK_GETTIME = 228  # x86_64
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)


def real_ns():
    """CLOCK_REALTIME from the kernel, past libfaketime (which wraps libc's clock_gettime)."""
    ts = _Timespec()
    if _libc.syscall(SYS_CLOCK_GETTIME, 0, ctypes.byref(ts)) != 0:
        raise OSError(ctypes.get_errno(), "clock_gettime syscall")
    return ts.tv_sec * 1_000_000_000 + ts.tv_nsec


def truth_pair(best_of=7):
    """(real, faked) at one instant: the tightest of several bracketed reads."""
    import time

    best = None
    for _ in range(best_of):
        a = real_ns()
        f = time.time_ns()
        b = real_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2, f)
    return best[1], best[2]


def pause(seconds):
    # time.sleep fails under libfaketime with DONT_FAKE_MONOTONIC (EINVAL from its
    # clock_nanosleep wrapper); a timed wait on an event does not.
    threading.Event().wait(seconds)


def worker(rank, nprocs, port, out_dir, steps):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=nprocs, process_id=rank
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, PartitionSpec as P

    import distprof
    import distprof.jax

    truth = [truth_pair()]
    distprof.jax.start(strict=True)

    mesh = Mesh(np.array(jax.devices()), ("x",))

    @jax.jit
    def step(x):
        return jnp.sum(x * 2.0)  # over the sharded axis: a cross-process all-reduce

    local = np.full((jax.local_device_count(), 256), rank + 1.0, dtype=np.float32)
    x = multihost_utils.host_local_array_to_global_array(local, mesh, P("x"))
    step(x).block_until_ready()  # compile outside the trace
    multihost_utils.process_allgather(np.arange(4.0) + rank)

    for _ in range(2000):
        if distprof.status()["state"] != "pending":
            break
        pause(0.01)
    st = distprof.status()
    if st["state"] != "agreed":
        sys.exit(f"process {rank}: distprof did not agree: {st}")
    multihost_utils.sync_global_devices("distprof-e2e-before-trace")

    logdir = os.path.join(out_dir, f"node{rank}")
    with distprof.jax.trace(logdir, strict=True):
        for i in range(steps):
            truth.append(truth_pair())
            with jax.profiler.TraceAnnotation(f"distprof_step_{i}"):
                step(x).block_until_ready()
                multihost_utils.process_allgather(np.arange(4.0) + rank + i)
            # Different pauses per process, so that without correction the collectives
            # start at the skewed times only: the waiting is inside the collectives.
            pause(0.15 + 0.01 * rank)
    truth.append(truth_pair())
    st = distprof.status()
    if st.get("error"):
        sys.exit(f"process {rank}: distprof failed: {st['error']}")
    with open(os.path.join(out_dir, f"truth{rank}.json"), "w") as f:
        json.dump({"rank": rank, "pairs": truth}, f)
    distprof.stop()
    jax.distributed.shutdown()


def fit_line(pairs):
    """Least squares faked = a + b * (real - real0), returns (real0, a, b)."""
    r0 = pairs[0][0]
    xs = [(r - r0) for r, _ in pairs]
    ys = [(f - r0) for _, f in pairs]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    return r0, a, b


def residual_ns(pairs, line):
    r0, a, b = line
    return max(abs((f - r0) - (a + b * (r - r0))) for r, f in pairs)


def model_to_global(segments, local_ns):
    """The plane's model: the segment whose window holds `local_ns` (nearest otherwise)."""
    seg = min(
        segments,
        key=lambda s: 0
        if s["start_local_ns"] <= local_ns <= s["end_local_ns"]
        else min(abs(local_ns - s["start_local_ns"]), abs(local_ns - s["end_local_ns"])),
    )
    dt = local_ns - seg["mid_local_ns"]
    return local_ns - seg["offset_ns"] - seg["drift_ppb"] * 1e-9 * dt


def check_offsets(out_dir, nprocs, max_error_us, goal_us):
    """Estimated model (from each trace's distprof plane) against the injected clocks."""
    from distprof import _native

    lines, planes = {}, {}
    for k in range(nprocs):
        with open(os.path.join(out_dir, f"truth{k}.json")) as f:
            pairs = json.load(f)["pairs"]
        lines[k] = fit_line(pairs)
        res = residual_ns(pairs, lines[k])
        # A truth line that misfits its own samples would make the comparison meaningless.
        assert res < 20_000, f"process {k}: truth samples stray {res} ns from their line"
        (path,) = glob.glob(os.path.join(out_dir, f"node{k}", "plugins", "profile", "*", "*.xplane.pb"))
        with open(path, "rb") as f:
            (plane,) = json.loads(_native.distprof_planes(f.read()))
        planes[k] = plane
    ref = planes[0]["reference_node"]
    errors = []
    rows = []
    for k in range(nprocs):
        plane = planes[k]
        if k == ref:
            continue
        segs = plane["model"]["segments"]
        assert plane["model"]["reachable"] and segs, f"process {k}: no clock model in its plane"
        assert plane["timestamp_mode"] == "user", plane["timestamp_mode"]
        r0k, ak, bk = lines[k]
        r00, a0, b0 = lines[ref]
        start = min(s["start_local_ns"] for s in segs)
        end = max(s["end_local_ns"] for s in segs)
        errs = []
        for i in range(201):
            local = start + (end - start) * i // 200
            real = r0k + (local - r0k - ak) / bk  # invert process k's faked clock
            true_g = r00 + a0 + b0 * (real - r00)  # the reference's faked clock then
            errs.append(model_to_global(segs, local) - true_g)
        injected_offset_ms = (start - (r00 + a0 + b0 * (r0k + (start - r0k - ak) / bk - r00))) / 1e6
        rows.append((k, injected_offset_ms, (bk / b0 - 1) * 1e6, max(abs(e) for e in errs) / 1e3, len(segs)))
        errors.extend(abs(e) for e in errs)
    errors.sort()
    p99 = errors[min(len(errors) - 1, int(0.99 * len(errors)))] / 1e3
    worst = errors[-1] / 1e3
    print("estimated vs injected clock (reference = process %d):" % ref)
    for k, off, drift, mx, nseg in rows:
        print(f"  process {k}: injected offset {off:+9.3f} ms, drift {drift:+7.2f} ppm vs the reference; "
              f"model error max {mx:7.2f} us over {nseg} windows")
    print(f"offset error over {len(errors)} points: p99 {p99:.2f} us, max {worst:.2f} us "
          f"(goal <= {goal_us:g} us: {'met' if worst <= goal_us else 'NOT met'}; test limit {max_error_us:g} us)")
    assert worst <= max_error_us, f"max offset error {worst:.2f} us exceeds {max_error_us} us"
    return p99, worst


def check_merged(merged_dir, nprocs):
    """The i-th occurrence of every collective overlaps on all processes; XProf loads it."""
    doc = json.load(open(os.path.join(merged_dir, "merged.trace.json")))
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    host_pids = {pid for pid, n in names.items() if n.endswith("/host:CPU")}
    assert len(host_pids) == nprocs, names
    kinds = 0
    for op in ("all-reduce", "all-gather"):
        per = {pid: sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                           if e.get("ph") == "X" and e["pid"] == pid and e["name"] == op) for pid in host_pids}
        counts = {len(v) for v in per.values()}
        assert len(counts) == 1 and min(counts) > 0, f"{op}: occurrences per process {counts}"
        n = counts.pop()
        for i in range(n):
            start = max(v[i][0] for v in per.values())
            end = min(v[i][1] for v in per.values())
            assert start < end, f"{op} #{i} does not overlap across processes: start {start} end {end}"
        print(f"merged Chrome JSON: all {n} {op} occurrences overlap on the {nprocs} processes")
        kinds += 1
    from xprof.convert import raw_to_tool_data

    files = sorted(glob.glob(os.path.join(merged_dir, "plugins", "profile", "*", "*.xplane.pb")))
    assert len(files) == nprocs, files
    for path in files:
        data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
        events = json.loads(data)["traceEvents"]
        assert any(e.get("name") == "all-reduce" for e in events), path
    print(f"XProf trace_viewer loads all {len(files)} merged .xplane.pb files")


def validate(distprof_bin, inputs, *flags):
    out = subprocess.run([distprof_bin, "validate", "--json", *flags, *inputs], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"distprof validate failed: {out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--distprof", required=True, help="the distprof CLI binary")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    # The goal is 50 us; measured 21.5, 28.2 and 17.7 us (max over the profile) at load average
    # 16-18 on this 2-core machine type (README, "With stock JAX"). The assertion allows
    # twice the goal: the scheduling noise of user-space stamps on a shared machine varies
    # from run to run (345 us once with the stricter default purity tolerance).
    ap.add_argument("--goal-us", type=float, default=50.0)
    ap.add_argument("--max-error-us", type=float, default=100.0)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        worker(a.rank, a.processes, a.port, a.out_dir, a.steps)
        return
    assert 2 <= a.processes <= len(SKEWS), f"--processes must be 2..{len(SKEWS)}"
    os.makedirs(a.out_dir, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(a.processes):
        offset_ms, drift_ppm = SKEWS[r]
        # distprof's settings for this test, unless the caller's environment sets them.
        # A profile of a few seconds: 2 s windows (several per profile) at 200 exchanges/s
        # per edge. User-space stamps on a loaded 2-core machine rarely preserve the 50 us
        # gap of a coded pair within the default 2 us; 10 us admits a few more pairs.
        tuning = dict(
            XLA_PROBE_CADENCE_US="5000",
            XLA_PROBE_WINDOW_S="2",
            XLA_DIST_PROF_PURITY_ABS_TOLERANCE_NS="10000",
        )
        env = {**tuning, **os.environ}
        env.update(
            JAX_PLATFORMS="cpu",
            LD_PRELOAD=LIBFAKETIME,
            FAKETIME=f"{offset_ms / 1e3:+.6f} x{1 + drift_ppm * 1e-6:.8f}",
            # gRPC and gloo time their deadlines on CLOCK_MONOTONIC: keep it real.
            DONT_FAKE_MONOTONIC="1",
            XLA_DIST_PROF_TIMESTAMPING="user",
            XLA_DIST_PROF_INTERFACE="lo",
            XLA_DIST_PROF_OUTPUT_DIR=os.path.join(a.out_dir, f"distprof{r}"),
            XLA_DIST_PROF_RENDEZVOUS_TIMEOUT_MS="60000",
        )
        cmd = [sys.executable, __file__, a.out_dir, "--distprof", a.distprof,
               "--processes", str(a.processes), "--steps", str(a.steps),
               "--rank", str(r), "--port", str(port)]
        log = open(os.path.join(a.out_dir, f"process{r}.log"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        try:
            codes.append(p.wait(timeout=240))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
        log.close()
    if any(codes):
        for r in range(a.processes):
            print(f"--- process {r} log (tail)")
            print("".join(open(os.path.join(a.out_dir, f"process{r}.log")).readlines()[-15:]))
        sys.exit(f"skewed_e2e: worker exit codes {codes}")

    inputs = [os.path.join(a.out_dir, f"node{r}") for r in range(a.processes)]
    v = validate(a.distprof, inputs)
    print(f"distprof validate on the raw traces: {v['before']['violations']} of {v['before']['checked']} "
          f"occurrences violate happens-before uncorrected, {v['after']['violations']} after the models")
    assert v["before"]["violations"] > 0, "the injected skew produced no violation: the test proves nothing"
    assert v["after"]["violations"] == 0, v["after"]

    merged = os.path.join(a.out_dir, "merged")
    out = subprocess.run([a.distprof, "merge", *inputs, "--out", merged, "--chrome"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"distprof merge failed: {out.stderr}")
    # The merged planes are on one timeline already: checked as they are.
    vm = validate(a.distprof, [merged], "--allow-uncorrected")
    assert vm["before"]["violations"] == 0, f"merged output still has violations: {vm['before']}"
    print(f"distprof validate on the merged output: {vm['before']['violations']} violations")
    check_merged(merged, a.processes)
    check_offsets(a.out_dir, a.processes, a.max_error_us, a.goal_us)


if __name__ == "__main__":
    main()
