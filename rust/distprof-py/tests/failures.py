"""Failures of distprof never stop the JAX program: one log line each, profiling off.

Usage: python rust/distprof-py/tests/failures.py   (the wheel installed, jax present)

Each scenario is a JAX CPU program of its own that hits one failure, then keeps computing
(a jitted function, a profiled step, a collective where there are several processes) and
prints DONE. The test asserts exit code 0, DONE, and exactly one stderr line that mentions
distprof, naming the cause; and that with `strict=True` the same failure raises
`distprof.DistprofError` instead.

- kv: two processes whose JAX key-value client raises on every call (a coordinator gone):
  the rendezvous fails on distprof's thread;
- no-init: `distprof.jax.start()` without `jax.distributed.initialize()`;
- trace-dir: `distprof.jax.trace()` into a directory that cannot be created (its parent is
  a file), so the profiler cannot write its trace.

And `start(config=PATH)` with paths that are not config files (a FIFO with no writer,
`/dev/zero`, a 200 MB file): each is refused by distprof's guarded reader, by type and size
before any read, with the reason in the message, in under a second and without the memory
growing (ru_maxrss before and after).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile

PROGRAM = r'''
import os, sys, threading
import jax, jax.numpy as jnp
import numpy as np
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
scenario, rank, nprocs, port, tmp, strict = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "strict"
import distprof, distprof.jax
if scenario != "no-init":
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nprocs, process_id=rank)
if scenario == "kv":
    from jax._src import distributed
    class Unreachable:
        """JAX's client after its coordinator went away: every call raises."""
        def __getattr__(self, name):
            def call(*args, **kwargs):
                raise RuntimeError("UNAVAILABLE: failed to connect to the coordination service")
            return call
    real_client = distributed.global_state.client
    distributed.global_state.client = Unreachable()
try:
    distprof.jax.start({"rendezvous_timeout_ms": 5000}, strict=strict)
except distprof.DistprofError as err:
    print("RAISED", err, flush=True)
    sys.exit(0)
# The rendezvous runs on distprof's thread: wait until it has agreed or given up.
from distprof import _native
st = _native.wait_agreed(30.0)
if scenario == "kv":
    distributed.global_state.client = real_client
    assert '"failed"' in st, st
logdir = os.path.join(tmp, "not-a-dir", "trace") if scenario == "trace-dir" else os.path.join(tmp, f"trace{rank}")
if scenario == "trace-dir":
    open(os.path.join(tmp, "not-a-dir"), "w").close()
try:
    with distprof.jax.trace(logdir, strict=strict):
        y = jax.jit(lambda a: (a * 2.0).sum())(jnp.arange(1000.0))
        y.block_until_ready()
except distprof.DistprofError as err:
    print("RAISED", err, flush=True)
    sys.exit(0)
if nprocs > 1:
    from jax.experimental import multihost_utils
    total = multihost_utils.process_allgather(np.array([rank + 1.0])).sum()
    assert total == nprocs * (nprocs + 1) / 2, total
assert float(jax.jit(lambda a: a.sum())(jnp.ones(10))) == 10.0
assert distprof.status()["enabled"] is False or scenario == "trace-dir", distprof.status()
print("DONE", flush=True)
if nprocs > 1:
    jax.distributed.shutdown()
'''

# What the one line must name, per scenario.
CAUSES = {
    "kv": "UNAVAILABLE: failed to connect to the coordination service",
    "no-init": "jax.distributed.initialize() has not been called",
    "trace-dir": "the profiler cannot write its trace there",
}
PROCESSES = {"kv": 2, "no-init": 1, "trace-dir": 1}


def run(scenario, strict):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = PROCESSES[scenario]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_DIST_PROF_OUTPUT_DIR=os.path.join(tmp, "jsonl"))
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", PROGRAM, scenario, str(r), str(n), str(port), tmp,
                 "strict" if strict else "lenient"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for r in range(n)
        ]
        results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    for r, ((out, err), code) in enumerate(results):
        where = f"{scenario} ({'strict' if strict else 'lenient'}), process {r}"
        # distprof's warnings and errors (its info lines, "enabled", "stopped", are not failures).
        lines = [line for line in err.splitlines()
                 if "distprof" in line.lower() and (" ERROR " in line or " WARN " in line)]
        if strict:
            assert code == 0 and "RAISED" in out, f"{where}: expected DistprofError\n{out}\n{err}"
            assert CAUSES[scenario] in out, f"{where}: the error does not name the cause: {out}"
            continue
        assert code == 0 and "DONE" in out, f"{where}: the program did not finish (exit {code})\n{out}\n{err}"
        assert len(lines) == 1, f"{where}: expected one distprof log line, got {len(lines)}:\n" + "\n".join(lines)
        assert CAUSES[scenario] in lines[0], f"{where}: the line does not name the cause: {lines[0]}"
        print(f"{where}: ran on; one line: {lines[0][:160]}")


CONFIG_PROGRAM = r'''
import json, os, resource, sys, time
import jax
jax.config.update("jax_platforms", "cpu")
port, paths = sys.argv[1], json.loads(sys.argv[2])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)
import distprof, distprof.jax
for path in paths:
    for strict in (True, False):
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.monotonic()
        try:
            distprof.jax.start(config=path, strict=strict)
            outcome = "returned"
        except distprof.DistprofError as err:
            outcome = str(err)
        took = time.monotonic() - start
        growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        print(json.dumps({"path": path, "strict": strict, "outcome": outcome, "took_s": took,
                          "maxrss_growth_kb": growth_kb, "status": distprof.status()}), flush=True)
jax.distributed.shutdown()
'''

# What each hostile `config=` path must be refused as.
CONFIG_PROBLEMS = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "/dev/zero": "is a device, not a regular file",
    "big": "is 209715200 bytes, over the 1048576-byte limit of a config file",
}
CONFIG_MAX_SECONDS = 1.0
CONFIG_MAX_RSS_GROWTH_KB = 16 * 1024  # reading the 200 MB file would add 200 MB


def config_paths():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "config.fifo")
        os.mkfifo(fifo)
        big = os.path.join(tmp, "big.json")
        with open(big, "wb") as f:
            f.truncate(200 * 1024 * 1024)  # sparse: 200 MB long, nothing written
        paths = {"fifo": fifo, "/dev/zero": "/dev/zero", "big": big}
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_DIST_PROF_OUTPUT_DIR=os.path.join(tmp, "jsonl"))
        proc = subprocess.Popen([sys.executable, "-c", CONFIG_PROGRAM, str(port), json.dumps(list(paths.values()))],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Generous against a hang (the bug blocked on the FIFO for good), not the goal.
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"start(config=...) hung on a hostile path:\n{out}\n{err[-3000:]}")
    assert proc.returncode == 0, f"config program exit {proc.returncode}\n{out}\n{err[-3000:]}"
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(results) == 2 * len(paths), out
    logged = [line for line in err.splitlines() if " ERROR " in line and "distprof" in line]
    for key, path in paths.items():
        problem = f"{path} {CONFIG_PROBLEMS[key]}"
        strict, lenient = [r for r in results if r["path"] == path]
        assert problem in strict["outcome"], f"start(config={path!r}, strict=True): {strict['outcome']}"
        assert "fix: give distprof.jax.start(config=PATH) the path of" in strict["outcome"], strict["outcome"]
        assert lenient["outcome"] == "returned" and lenient["status"]["enabled"] is False, lenient
        assert any(problem in line for line in logged), f"no log line names {problem!r}:\n" + "\n".join(logged)
        for r in (strict, lenient):
            assert r["took_s"] < CONFIG_MAX_SECONDS, f"start(config={path!r}) took {r['took_s']:.3f} s"
            assert r["maxrss_growth_kb"] < CONFIG_MAX_RSS_GROWTH_KB, \
                f"start(config={path!r}) grew the peak RSS by {r['maxrss_growth_kb']} kB"
        worst = max(strict["took_s"], lenient["took_s"])
        growth = max(strict["maxrss_growth_kb"], lenient["maxrss_growth_kb"])
        print(f"start(config={key}): refused in {worst * 1e3:.1f} ms, peak RSS +{growth} kB: {strict['outcome'][:110]}")


def main():
    for scenario in ("no-init", "trace-dir", "kv"):
        run(scenario, strict=False)
        run(scenario, strict=True)
    config_paths()
    print("failures: passed")


if __name__ == "__main__":
    main()
