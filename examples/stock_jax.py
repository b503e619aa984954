#!/usr/bin/env python3
"""One process of a multi-process JAX job traced with distprof (README, "With stock JAX").

Each process of the job runs this script with its own process id:

    python stock_jax.py --coordinator HOST:PORT --num-processes N --process-id I --logdir prof

It joins the job (`jax.distributed.initialize`), starts distprof's node
(`distprof.jax.start`), and runs a few steps of two cross-process collectives (an
all-reduce and an all-gather) inside `distprof.jax.trace(<logdir>/<process id>)`: one log
directory per process, so that processes of one host never write the same file names.
Afterwards `distprof merge <logdir>/* --out merged` puts the traces on one timeline.

To try it on one machine, `--spawn N` starts N such processes here (JAX on the CPU, its
collectives over gloo, the coordinator on a free loopback port) and exits with the first
failing process's status.
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(n, args):
    """Runs processes 0..n-1 of the job on this host; returns the first nonzero status."""
    # A directory that holds an earlier run's trace would give merge two runs to refuse.
    old = [d for d in (os.path.join(args.logdir, str(i)) for i in range(n)) if os.path.exists(d)]
    if old:
        print(f"stock_jax.py: {', '.join(old)} already exist(s), from an earlier run; remove "
              f"them or give another --logdir", file=sys.stderr)
        return 2
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--cpu",
                          "--coordinator", coordinator, "--num-processes", str(n),
                          "--process-id", str(i), "--logdir", args.logdir,
                          "--steps", str(args.steps)])
        for i in range(n)
    ]
    codes = [p.wait() for p in procs]
    bad = [(i, c) for i, c in enumerate(codes) if c != 0]
    for i, c in bad:
        print(f"stock_jax.py: process {i} exited with status {c}", file=sys.stderr)
    return bad[0][1] if bad else 0


def run(args):
    import jax

    if args.cpu:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator,
                               num_processes=args.num_processes, process_id=args.process_id)
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, PartitionSpec as P

    import distprof
    import distprof.jax

    distprof.jax.start()  # rendezvous + probe socket on a Rust thread

    mesh = Mesh(np.array(jax.devices()), ("x",))

    @jax.jit
    def total(x):
        return jnp.sum(x)  # over an axis sharded across processes: an all-reduce

    rank = jax.process_index()
    local = np.full((jax.local_device_count(), 256), rank + 1.0, dtype=np.float32)
    x = multihost_utils.host_local_array_to_global_array(local, mesh, P("x"))
    total(x).block_until_ready()  # compile before the trace
    # Let the rendezvous finish, so that the trace holds probes from its first step.
    deadline = time.monotonic() + 30
    while distprof.status()["state"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.05)

    logdir = os.path.join(args.logdir, str(rank))
    with distprof.jax.trace(logdir):  # jax.profiler.trace + the distprof plane
        for i in range(args.steps):
            total(x).block_until_ready()
            multihost_utils.process_allgather(np.arange(4.0) + rank + i)  # an all-gather
            time.sleep(0.1)
    status = distprof.status()
    print(f"process {rank}: distprof {status['state']}, trace in {logdir}", flush=True)
    distprof.stop()
    jax.distributed.shutdown()
    # A node that did not agree wrote no clock model: merge would refuse its trace.
    return 0 if status["state"] == "agreed" and not status.get("error") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spawn", type=int, metavar="N",
                    help="start N processes of the job on this host (CPU, gloo) and wait for them")
    ap.add_argument("--coordinator", help="HOST:PORT of process 0 (jax.distributed.initialize)")
    ap.add_argument("--num-processes", type=int)
    ap.add_argument("--process-id", type=int)
    ap.add_argument("--logdir", default="prof",
                    help="each process traces into LOGDIR/<process id> (default: prof)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--cpu", action="store_true", help="JAX on the CPU, collectives over gloo")
    args = ap.parse_args()
    if args.spawn:
        return spawn(args.spawn, args)
    missing = [f for f in ("coordinator", "num_processes", "process_id") if getattr(args, f) is None]
    if missing:
        ap.error("one process of a job needs --" + ", --".join(m.replace("_", "-") for m in missing)
                 + " (or --spawn N to start N processes on this host)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
