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
"""

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
    "trace-dir": "the profiler did not write its trace",
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


def main():
    for scenario in ("no-init", "trace-dir", "kv"):
        run(scenario, strict=False)
        run(scenario, strict=True)
    print("failures: passed")


if __name__ == "__main__":
    main()
