"""`distprof.ray.merge` on a real local Ray cluster gives the bytes of `distprof merge`.

Usage (as root, in a network and PID namespace of its own; tests/steps/62-ray.sh):
    unshare --net --pid --fork --mount-proc python rust/distprof-py/tests/ray_merge.py \
        WORK_DIR --distprof target/debug/distprof

Ray binds its services to the host's own address unless that is all there is: in a
network namespace with nothing but loopback, the whole cluster stays on 127.0.0.1. The
cluster is a head (`ray start --head --num-cpus 0`: it schedules, as Ray advises for
large clusters, and runs no task) and a second node (`ray start --address`) with this
machine's 2 CPUs, each `ray start` in a process group of its own; both are stopped at the end whatever happens
(and the PID namespace ends anything left when this script exits). Its processes cannot
import the `distprof` package (a stand-in that refuses comes first on their PYTHONPATH):
the shard task reaches the workers by value, and they need only Ray and the binary.

Checks, each against a merge of the same traces on one machine:
- 6 synthetic GPU-like nodes (`distprof bench merge`'s generator) in shards of 2: 3 Ray
  tasks, all run by the second node; every output file byte-identical;
- the 3 real JAX traces (no distprof plane: `allow_uncorrected=True`) in shards of 1,
  into an empty directory that exists;
- a shard that fails (a trace whose events are damaged: the solve step, which reads only
  its planes, passes; the shard's merge does not) raises an error naming the shard and
  the trace, and leaves neither `out` nor its temporary directory;
- an output directory that is not empty, and Ray missing, are refused with the fix.
Prints the time of each part.
"""

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import distprof.ray
from distprof import DistprofError

PORT = 26379
# Small enough for 2 shared cores: 100 MB of object store per Ray node (the tasks pass only
# small dicts), no dashboard. The second node has the CPUs (2 shards at a time).
RAY_NODE_ARGS = ["--object-store-memory", "100000000", "--disable-usage-stats"]
WORKER_CPUS = 2
START_TIMEOUT_S = 90
COMMAND_TIMEOUT_S = 300


def tree(root):
    """Every file under root: relative path -> bytes."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def assert_same_tree(a, b, what):
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb), f"{what}: files differ: {sorted(ta)} vs {sorted(tb)}"
    for k in ta:
        assert ta[k] == tb[k], f"{what}: {k} differs between distprof merge and distprof.ray.merge"
    return len(ta), sum(len(v) for v in ta.values())


class Cluster:
    """A head and a second Ray node on this machine, each `ray start --block` in its own
    process group, stopped by group."""

    def __init__(self, work):
        self.work = work
        self.procs = []
        self.ray = os.path.join(os.path.dirname(sys.executable), "ray")
        self.address = f"127.0.0.1:{PORT}"

    def _start(self, name, args):
        shadow = os.path.join(self.work, "no-distprof")
        os.makedirs(os.path.join(shadow, "distprof"), exist_ok=True)
        with open(os.path.join(shadow, "distprof", "__init__.py"), "w") as f:
            f.write("raise ImportError('the distprof package is not installed on this Ray worker')\n")
        env = {**os.environ, "PYTHONPATH": shadow}
        log = open(os.path.join(self.work, f"ray-{name}.log"), "w")
        p = subprocess.Popen([self.ray, "start", "--block", *args, *RAY_NODE_ARGS], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append((name, p))

    def start(self):
        env_tmp = os.path.join(self.work, "ray-tmp")
        self._start("head", ["--head", "--num-cpus", "0", "--port", str(PORT), "--include-dashboard", "false", "--temp-dir", env_tmp])
        self._wait_nodes(1)
        self._start("worker", ["--address", self.address, "--num-cpus", str(WORKER_CPUS)])
        self._wait_nodes(2)

    def worker_node_id(self):
        """The Ray node id of the second node (the one with CPUs)."""
        import ray

        ray.init(address=self.address, log_to_driver=False)
        try:
            return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU") == WORKER_CPUS][0]
        finally:
            ray.shutdown()

    def _wait_nodes(self, n):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"ray {name} exited ({p.returncode}); see {self.work}/ray-{name}.log")
            st = subprocess.run([self.ray, "status", "--address", self.address], capture_output=True, text=True)
            if st.returncode == 0 and st.stdout.count("node_") >= n:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Ray cluster did not reach {n} node(s) within {START_TIMEOUT_S} s; see {self.work}/ray-*.log")

    def stop(self):
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            for _, p in self.procs:
                if p.poll() is None or sig == signal.SIGKILL:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and any(p.poll() is None for _, p in self.procs):
                time.sleep(0.2)


def damage_events(path):
    """Overwrites bytes in the middle of the trace, inside its largest (event) plane: the
    prescan, which reads plane heads only, does not see it; the merge of its events does."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--distprof", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    exe = os.path.abspath(args.distprof)
    os.makedirs(work, exist_ok=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    timings = {}

    def timed(name, f):
        t = time.monotonic()
        r = f()
        timings[name] = round(time.monotonic() - t, 2)
        return r

    def one_machine(inputs, out, *flags):
        subprocess.run([exe, "merge", *inputs, "--out", out, *flags], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)

    gen = os.path.join(work, "gen")
    timed("generate 6 synthetic nodes", lambda: subprocess.run(
        [exe, "bench", "merge", "--size-mb", "12", "--nodes", "6", "--skip-baseline", "--no-chrome", "--repeat", "1", "--jobs", "1", "--dir", gen],
        check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S))
    synthetic = os.path.join(gen, "in")
    jax = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "jax")
    timed("merge on one machine", lambda: (one_machine([synthetic], os.path.join(work, "ref")),
                                            one_machine([jax], os.path.join(work, "ref-jax"), "--allow-uncorrected")))

    cluster = Cluster(work)
    try:
        timed("ray cluster start (head + 1 node)", cluster.start)
        opts = dict(address=cluster.address, distprof=exe, timeout_s=COMMAND_TIMEOUT_S)

        out = os.path.join(work, "ray-out")
        report = timed("distprof.ray.merge, 6 nodes, 3 shards", lambda: distprof.ray.merge([synthetic], out, shard_size=2, **opts))
        files, size = assert_same_tree(os.path.join(work, "ref"), out, "6 synthetic nodes")
        shards = report["shards"]
        assert [s["nodes"] for s in shards] == ["0-1", "2-3", "4-5"], shards
        ray_nodes = {s["ray_node_id"] for s in shards}
        assert ray_nodes == {cluster.worker_node_id()}, f"the shards did not run on the second Ray node: {shards}"
        assert report["nodes"] == 6 and report["run_dir"].startswith(out + os.sep), report
        solve = report["solve"]
        assert solve["bytes_read"] * 20 < solve["bytes_in"], solve
        print(f"6 nodes through Ray: {files} files, {size / 1e6:.1f} MB, byte-identical to distprof merge; "
              f"shards run by the second Ray node; the solve step read {solve['bytes_read'] / 6 / 1e3:.1f} kB per trace "
              f"of {solve['bytes_in'] / 6 / 1e6:.2f} MB")

        out_jax = os.path.join(work, "ray-out-jax")
        os.mkdir(out_jax)  # an empty directory is replaced
        timed("distprof.ray.merge, 3 JAX traces, 3 shards", lambda: distprof.ray.merge([jax], out_jax, shard_size=1, allow_uncorrected=True, **opts))
        files, _ = assert_same_tree(os.path.join(work, "ref-jax"), out_jax, "3 JAX traces")
        print(f"3 JAX traces through Ray: {files} files, byte-identical to distprof merge --allow-uncorrected")

        damaged = os.path.join(work, "damaged")
        shutil.copytree(synthetic, damaged)
        damage_events(os.path.join(damaged, "node4.xplane.pb"))
        out_bad = os.path.join(work, "ray-out-bad")
        try:
            timed("a failing shard", lambda: distprof.ray.merge([damaged], out_bad, shard_size=2, **opts))
            raise AssertionError("a merge with a damaged trace succeeded")
        except DistprofError as e:
            msg = str(e)
            assert "shard --nodes 4-5 failed" in msg and "node4.xplane.pb: not a valid XSpace" in msg and "loaded node" not in msg, msg
        left = [p for p in os.listdir(work) if p.startswith(".ray-out-bad")]
        assert not os.path.exists(out_bad) and not left, f"a failed merge left {out_bad} or {left}"
        print(f"a damaged trace: the error names the shard and the trace, nothing is left ({msg.splitlines()[0][:160]})")

        try:
            distprof.ray.merge([synthetic], out, **opts)
            raise AssertionError("a merge into a non-empty directory succeeded")
        except DistprofError as e:
            assert "not an empty directory" in str(e), e
    finally:
        timed("ray cluster stop", cluster.stop)

    no_ray = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['ray'] = None\nimport distprof.ray\ndistprof.ray.merge(['x'], 'y')"],
        capture_output=True, text=True, timeout=60)
    assert no_ray.returncode != 0 and "pip install ray" in no_ray.stderr, no_ray.stderr
    print("without Ray: DistprofError says pip install ray")
    for name, secs in timings.items():
        print(f"  {secs:6.2f} s  {name}")
    print("ray_merge: passed")


if __name__ == "__main__":
    main()
