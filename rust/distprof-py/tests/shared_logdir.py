"""A log directory shared by several JAX processes: each process changes only its own trace.

Usage: python rust/distprof-py/tests/shared_logdir.py --distprof target/debug/distprof
       (the wheel installed, jax present; root, for `unshare --uts`)

Two scenarios, each a real multi-process JAX job whose processes all call
`distprof.jax.trace(SHARED)` on one directory, with one profiler run name
(`ProfileOptions.session_id`), so every file lands in the same `plugins/profile/<run>/`:
- hosts: 3 processes, each in its own UTS namespace with its own host name (`unshare --uts`),
  as on three machines over NFS: three `<host>.xplane.pb` side by side;
- one-host: 2 processes with the same host name: JAX gives both the same file names. The
  second to finish must leave the first one's file alone, keep its own as
  `<host>.pid<PID>.xplane.pb`, and log one line that says to give each process its own
  directory; and already when the traces start, a process says that the other one of its
  host traces into the same directory.

Each process records, through a wrapper around `distprof._xspace.append` (the real function
still runs), the bytes its profiler wrote and the planes it appended. Asserted: every
`.xplane.pb` under the directory is byte for byte one process's profiler output followed by
that process's own planes and nothing else, each process's trace is there exactly once, no
staging directory is left, and `distprof merge` of the directory succeeds with every node.
"""

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

RUN = "shared-run"


def worker(rank, nprocs, port, shared, record):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nprocs, process_id=rank)
    import jax.numpy as jnp
    from jax._src import distributed

    import distprof
    import distprof.jax
    from distprof import _native, _xspace

    seen = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "traces": []}
    real_append = _xspace.append

    def recording_append(path, planes):
        with open(path, "rb") as f:
            written = f.read()
        copy = f"{record}.profiler{len(seen['traces'])}.xplane.pb"
        with open(copy, "wb") as f:
            f.write(written)
        seen["traces"].append({"profiler_copy": copy, "planes": planes.hex()})
        real_append(path, planes)

    _xspace.append = recording_append

    distprof.jax.start(strict=True)
    st = json.loads(_native.wait_agreed(60.0))
    if st["state"] != "agreed":
        sys.exit(f"process {rank}: distprof did not agree: {st}")
    step = jax.jit(lambda a: (a * 2.0).sum())
    step(jnp.arange(1000.0)).block_until_ready()
    options = jax.profiler.ProfileOptions()
    options.session_id = RUN
    barrier = distributed.global_state.client.wait_at_barrier
    barrier("shared-logdir-before-trace", 60_000)
    with distprof.jax.trace(shared, profiler_options=options):
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            step(jnp.arange(1000.0)).block_until_ready()
    barrier("shared-logdir-after-trace", 60_000)
    st = distprof.status()
    if st.get("error"):
        sys.exit(f"process {rank}: distprof failed: {st['error']}")
    seen["node"] = st["node"]
    with open(record, "w") as f:
        json.dump(seen, f)
    distprof.stop()
    jax.distributed.shutdown()


def run_job(name, hosts, out, distprof_bin):
    shared = os.path.join(out, name, "shared")
    os.makedirs(shared)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = len(hosts)
    procs = []
    for rank, host in enumerate(hosts):
        record = os.path.join(out, name, f"process{rank}.json")
        env = dict(
            os.environ,
            JAX_PLATFORMS="cpu",
            XLA_DIST_PROF_INTERFACE="lo",
            XLA_PROBE_CADENCE_US="5000",
            XLA_PROBE_WINDOW_S="1",
            XLA_DIST_PROF_OUTPUT_DIR=os.path.join(out, name, f"jsonl{rank}"),
            XLA_DIST_PROF_RENDEZVOUS_TIMEOUT_MS="60000",
        )
        cmd = [sys.executable, __file__, "--worker", str(rank), "--processes", str(n),
               "--port", str(port), "--shared", shared, "--record", record]
        # Its own UTS namespace: the host name JAX names its file after, and the one the
        # XSpace and the distprof plane carry; and its own /etc/hosts (a private mount
        # namespace), where that name resolves, as it does on a real host (gloo looks it up).
        hosts_file = os.path.join(out, name, f"hosts{rank}")
        with open(hosts_file, "w") as f:
            f.write(f"127.0.0.1 localhost\n127.0.0.1 {host}\n")
        cmd = ["unshare", "--uts", "--mount", "sh", "-c",
               'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"', host, hosts_file, *cmd]
        log = open(os.path.join(out, name, f"process{rank}.log"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        try:
            codes.append(p.wait(timeout=180))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
        log.close()
    logs = [open(os.path.join(out, name, f"process{r}.log")).read() for r in range(n)]
    if any(codes):
        for r, text in enumerate(logs):
            print(f"--- {name} process {r} log (tail)\n" + "".join(text.splitlines(True)[-20:]))
        sys.exit(f"{name}: worker exit codes {codes}")
    records = [json.load(open(os.path.join(out, name, f"process{r}.json"))) for r in range(n)]
    return shared, records, logs


def check_traces(name, shared, records):
    """Every .xplane.pb is one process's profiler bytes plus that process's planes."""
    from distprof import _native

    expected = {}
    for rec in records:
        assert len(rec["traces"]) == 1, f"{name}: process {rec['rank']} appended to {len(rec['traces'])} traces"
        t = rec["traces"][0]
        profiler = open(t["profiler_copy"], "rb").read()
        planes = bytes.fromhex(t["planes"])
        assert not json.loads(_native.distprof_planes(profiler)), \
            f"{name}: process {rec['rank']}'s profiler output already held a distprof plane"
        expected[rec["rank"]] = profiler + planes
    files = sorted(glob.glob(os.path.join(shared, "**", "*.xplane.pb"), recursive=True))
    found = {}
    for path in files:
        data = open(path, "rb").read()
        owners = [r for r, want in expected.items() if data == want]
        assert len(owners) == 1, (
            f"{name}: {path} ({len(data)} bytes) is not exactly one process's profiler output "
            f"plus its own plane: a process changed a trace it did not write")
        planes = json.loads(_native.distprof_planes(data))
        rec = records[owners[0]]
        assert [(p["node"], p["hostname"]) for p in planes] == [(rec["node"], rec["host"])], \
            f"{name}: {path}: planes {[(p['node'], p['hostname']) for p in planes]}"
        assert owners[0] not in found, f"{name}: process {owners[0]}'s trace is there twice"
        found[owners[0]] = path
    assert sorted(found) == sorted(expected), f"{name}: traces of processes {sorted(found)} of {sorted(expected)}"
    leftovers = [d for d in os.listdir(shared) if d.startswith(".distprof-staging-")]
    assert not leftovers, f"{name}: staging directories left behind: {leftovers}"
    return found


def merge(name, distprof_bin, shared, out, n):
    merged = os.path.join(out, name, "merged")
    done = subprocess.run([distprof_bin, "merge", shared, "--out", merged], capture_output=True, text=True)
    assert done.returncode == 0, f"{name}: distprof merge {shared} failed:\n{done.stderr}"
    outputs = glob.glob(os.path.join(merged, "plugins", "profile", "*", "*.xplane.pb"))
    assert len(outputs) == n, f"{name}: merge wrote {len(outputs)} traces for {n} nodes: {outputs}"
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--distprof", help="the distprof CLI binary")
    ap.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--processes", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shared", help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker >= 0:
        worker(a.worker, a.processes, a.port, a.shared, a.record)
        return
    if not a.distprof:
        ap.error("--distprof is required")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        sys.exit("shared_logdir: needs `unshare --uts --mount` as root (util-linux)")
    out = tempfile.mkdtemp(prefix="distprof-shared-logdir-")
    try:
        # Three hosts over one directory.
        start = time.monotonic()
        shared, records, _logs = run_job("hosts", ["host-a", "host-b", "host-c"], out, a.distprof)
        found = check_traces("hosts", shared, records)
        names = sorted(os.path.relpath(p, shared) for p in found.values())
        assert names == [f"plugins/profile/{RUN}/host-{c}.xplane.pb" for c in "abc"], names
        merge("hosts", a.distprof, shared, out, 3)
        print(f"3 hosts, one directory: {len(found)} traces, each the profiler's bytes plus its own "
              f"plane only; merge of the directory succeeded ({time.monotonic() - start:.1f} s)")

        # Two processes of one host over one directory.
        start = time.monotonic()
        shared, records, logs = run_job("one-host", ["same-host", "same-host"], out, a.distprof)
        found = check_traces("one-host", shared, records)
        names = sorted(os.path.basename(p) for p in found.values())
        by_pid = {rec["pid"]: rec["rank"] for rec in records}
        kept = [n for n in names if n != "same-host.xplane.pb"]
        assert "same-host.xplane.pb" in names and len(kept) == 1, names
        second_pid = int(kept[0].split(".pid")[1].split(".")[0])
        assert second_pid in by_pid, (kept, by_pid)
        second = by_pid[second_pid]
        lines = [line for line in logs[second].splitlines() if "was already written by another process" in line]
        assert len(lines) == 1 and "give each process its own directory" in lines[0], logs[second]
        first = 1 - second
        assert "already written" not in logs[first], logs[first]
        assert "same-host.xplane.pb was already written" in lines[0], lines[0]
        # Both traced at once: the later of the two to look saw the other's staging
        # directory and said so when its trace started.
        early = [r for r in (0, 1) if "is tracing into the same directory" in logs[r]]
        assert early, "neither process said at trace start that the other traces into its directory"
        merge("one-host", a.distprof, shared, out, 2)
        print(f"2 processes of one host, one directory: said at trace start by process(es) {early}; "
              f"the first's trace untouched, the second's kept as {kept[0]} with one line; merge "
              f"succeeded ({time.monotonic() - start:.1f} s)")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print("shared_logdir: passed")


if __name__ == "__main__":
    main()
