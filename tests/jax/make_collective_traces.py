"""Writes small real JAX CPU traces whose collectives are named the way XLA names them.

Usage: python tests/jax/make_collective_traces.py OUT_DIR --job pmap|shard_map [--processes 2] [--steps 3]

Starts N processes on this machine (JAX_PLATFORMS=cpu, gloo collectives, jax.distributed
with a local coordinator), one CPU device each. Each process profiles a few steps of one
job into its own logdir, OUT_DIR/node<r>/plugins/profile/<run>/<host>.xplane.pb:

- `pmap`: a pmap whose body calls `psum` (XLA names the op `psum.<n>`, an all-reduce),
  `all_gather`, `psum_scatter` (reduce-scatter), `all_to_all` and `ppermute`
  (collective-permute).
- `shard_map`: a jit of a shard_map over a one-axis mesh whose body calls `all_gather`,
  `psum`, `psum_scatter`, `all_to_all` and `ppermute`.

All processes share one real clock, so the traces are mutually aligned: tests inject known
skew afterwards.
"""

import argparse
import os
import sys

from make_traces import launch


def worker(rank: int, nprocs: int, port: int, out_dir: str, steps: int, job: str) -> None:
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=nprocs, process_id=rank
    )
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, PartitionSpec as P

    n = jax.device_count()
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(x):
        # x: this device's block, shape (n, 4).
        s = lax.psum(x, "x")
        g = lax.all_gather(x, "x")
        r = lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True)
        a = lax.all_to_all(x, "x", 0, 0, tiled=True)
        p = lax.ppermute(x, "x", perm)
        # One value per device, shape (1,): shard_map concatenates it along the mesh axis.
        return (s.sum() + g.sum() + r.sum() + a.sum() + p.sum()).reshape(1)

    if job == "pmap":
        step = jax.pmap(body, axis_name="x")
        x = np.full((jax.local_device_count(), n, 4), rank + 1.0, dtype=np.float32)
    else:
        from jax.experimental.shard_map import shard_map

        mesh = Mesh(np.array(jax.devices()), ("x",))
        step = jax.jit(shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        local = np.full((jax.local_device_count() * n, 4), rank + 1.0, dtype=np.float32)
        x = multihost_utils.host_local_array_to_global_array(local, mesh, P("x"))

    jax.block_until_ready(step(x))  # compile outside the trace
    logdir = os.path.join(out_dir, f"node{rank}")
    jax.profiler.start_trace(logdir)
    for _ in range(steps):
        jax.block_until_ready(step(x))
    jax.profiler.stop_trace()
    jax.distributed.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--job", choices=["pmap", "shard_map"], required=True)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        worker(a.rank, a.processes, a.port, a.out_dir, a.steps, a.job)
        return
    codes = launch(__file__, a.out_dir, a.processes, ["--job", a.job, "--steps", str(a.steps)])
    if any(codes):
        sys.exit(f"make_collective_traces: worker exit codes {codes}")

if __name__ == "__main__":
    main()
