"""Writes real multi-process JAX CPU traces with cross-process collectives.

Usage: python tests/jax/make_traces.py OUT_DIR [--processes 2] [--steps 6]

Starts N processes on this machine (JAX_PLATFORMS=cpu, gloo collectives, jax.distributed
with a local coordinator). Each process profiles a few steps of a jitted cross-process
all-reduce and a `process_allgather`, with its own logdir, so it writes
OUT_DIR/node<r>/plugins/profile/<run>/<host>.xplane.pb. All processes share one real
clock, so the traces are mutually aligned: tests inject known skew afterwards.
"""

import argparse
import os
import socket
import subprocess
import sys


def worker(rank: int, nprocs: int, port: int, out_dir: str, steps: int) -> None:
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=nprocs, process_id=rank
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    @jax.jit
    def step(x):
        # A sum over the sharded axis is a cross-process all-reduce.
        return jnp.sum(x * 2.0)

    local = np.full((jax.local_device_count(), 256), rank + 1.0, dtype=np.float32)
    x = multihost_utils.host_local_array_to_global_array(local, mesh, P("x"))
    step(x).block_until_ready()  # compile outside the trace
    multihost_utils.process_allgather(np.arange(4.0) + rank)

    logdir = os.path.join(out_dir, f"node{rank}")
    jax.profiler.start_trace(logdir)
    for i in range(steps):
        with jax.profiler.TraceAnnotation(f"distprof_step_{i}"):
            step(x).block_until_ready()
            multihost_utils.process_allgather(np.arange(4.0) + rank + i)
    jax.profiler.stop_trace()
    jax.distributed.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        worker(a.rank, a.processes, a.port, a.out_dir, a.steps)
        return
    codes = launch(__file__, a.out_dir, a.processes, ["--steps", str(a.steps)])
    if any(codes):
        sys.exit(f"make_traces: worker exit codes {codes}")


def launch(script: str, out_dir: str, processes: int, args: list) -> list:
    """Runs `script OUT_DIR --processes N ARGS --rank r --port P` for every rank on one
    local coordinator port (JAX_PLATFORMS=cpu); the workers' exit codes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, script, out_dir, "--processes", str(processes), *args,
             "--rank", str(r), "--port", str(port)],
            env=env,
        )
        for r in range(processes)
    ]
    return [p.wait(timeout=300) for p in procs]

if __name__ == "__main__":
    main()
