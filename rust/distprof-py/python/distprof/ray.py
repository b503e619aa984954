"""``distprof merge`` fanned out over a Ray cluster: one Ray task per shard of nodes.

    import distprof.ray
    report = distprof.ray.merge(["/shared/logdir"], "/shared/merged", address="auto", shard_size=128)

What runs where (docs/merge.md, "On a Ray cluster"):

1. here, once: ``distprof merge --solve-only`` over every trace. It reads each trace's
   distprof plane and skips its events, solves the clock models network-wide, fixes the
   global origin and every node's ids, and writes that plan;
2. on the cluster, one Ray task per shard of ``shard_size`` consecutive nodes:
   ``distprof merge --plan PLAN --nodes A-B``, which reads only its own nodes' traces;
3. here, once: ``distprof merge --join`` of the shards (hard links where the file system
   allows them, so the node traces are not copied again).

The result is byte for byte the output of ``distprof merge`` of every trace on one
machine. Every host must see the traces and the directory of ``out`` at the same paths (a
shared file system) and have the ``distprof`` binary (``distprof=``: a path, or a name on
the workers' PATH). The workers need Ray and that binary, not this package: the task is
sent to them by value.

All or nothing: everything is written into a temporary directory beside ``out``, which
takes its place at the end; on any failure that directory is removed and the error names
the shard and its stderr.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import DistprofError

__all__ = ["merge"]

# How much of a command's stderr an error quotes: its end, where distprof's message is.
STDERR_TAIL_CHARS = 4000
# distprof merge's progress lines on stderr start so; errors quote the other lines.
PROGRESS_PREFIX = "distprof merge: "
# Created in the work directory when a shard fails; the shards still running see it and
# stop (see _shard_task: why not ray.cancel). Polled this often.
STOP_FILE = "STOP"
STOP_POLL_S = 0.2


def _stderr_message(stderr):
    """The lines of a failed command's stderr that are not progress (all if none are)."""
    lines = [line for line in stderr.splitlines() if not line.startswith(PROGRESS_PREFIX)]
    return ("\n".join(lines) if lines else stderr)[-STDERR_TAIL_CHARS:].strip()


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise DistprofError(
            "distprof.ray needs Ray, which is not installed: pip install ray "
            "(on this machine and every worker of the cluster)"
        ) from e
    return ray


def _run(cmd, what, timeout_s):
    """Runs a distprof command here; its JSON report, or DistprofError naming ``what``."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise DistprofError(
            f"{what}: cannot run {cmd[0]!r} ({e.strerror}); install the distprof CLI "
            "(cargo install --path rust/distprof-cli) or pass distprof='/path/to/distprof'"
        ) from e
    except subprocess.TimeoutExpired as e:
        raise DistprofError(f"{what}: still running after {timeout_s} s (timeout_s); stopped") from e
    if done.returncode != 0:
        raise DistprofError(f"{what} failed (exit {done.returncode}): {_stderr_message(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _shards(node_ids, shard_size):
    """Consecutive runs of ``shard_size`` node ids, as ``--nodes`` ranges ``A-B``."""
    ids = sorted(node_ids)
    return [f"{chunk[0]}-{chunk[-1]}" for chunk in (ids[i : i + shard_size] for i in range(0, len(ids), shard_size))]


def _shard_task(distprof, plan, nodes, out, jobs, timeout_s):
    """One shard, on a Ray worker: ``distprof merge --plan ... --nodes ...``. Never
    raises: the driver reports failures with the shard's name. The driver stops the
    shards still running by creating ``STOP`` beside their output directories (on the
    shared file system), not by ``ray.cancel``: a cancel that races with the task's
    completion crashes the driver's Ray core worker (ray-project/ray#54846, seen with Ray
    2.60 here). The task polls for the file and kills the merge it started."""
    import socket
    import subprocess
    import time

    import ray

    start = time.monotonic()
    cmd = [distprof, "merge", "--plan", plan, "--nodes", nodes, "--out", out, "--jobs", str(jobs), "--json"]
    where = {"nodes": nodes, "host": socket.gethostname(), "ray_node_id": ray.get_runtime_context().get_node_id()}
    stop = os.path.join(os.path.dirname(out), STOP_FILE)
    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError as e:
        return {**where, "ok": False, "error": f"cannot run {distprof!r} on this worker ({e.strerror}); put the distprof CLI on the workers' PATH or pass distprof='/path/to/distprof'"}
    while True:
        try:
            _, stderr = child.communicate(timeout=STOP_POLL_S)
            break
        except subprocess.TimeoutExpired:
            stopped = os.path.exists(stop)
            late = timeout_s is not None and time.monotonic() - start > timeout_s
            if stopped or late:
                child.kill()
                child.communicate()
                why = "stopped: another shard failed" if stopped else f"still running after {timeout_s} s (timeout_s); stopped"
                return {**where, "ok": False, "error": why}
    if child.returncode != 0:
        return {**where, "ok": False, "error": f"exit {child.returncode}: {_stderr_message(stderr)}"}
    return {**where, "ok": True, "seconds": round(time.monotonic() - start, 3)}


def merge(
    traces,
    out,
    *,
    address=None,
    shard_size=64,
    distprof="distprof",
    chrome=True,
    models=None,
    run_dir=None,
    allow_uncorrected=False,
    force=False,
    num_cpus=1,
    ray_options=None,
    timeout_s=None,
):
    """Merges ``traces`` into the directory ``out`` on a Ray cluster, shard by shard.

    ``traces``: the per-node ``.xplane.pb`` files, or directories holding them (as
    ``distprof merge`` takes them). ``out`` must not exist yet (or be an empty directory).
    ``address``: the cluster, as for ``ray.init`` (``"auto"``, ``"ray://host:10001"``;
    None: ``RAY_ADDRESS`` or a local Ray); ignored when Ray is already initialised here.
    ``shard_size``: nodes per task. ``distprof``: the CLI, by path or by name on every
    host's PATH. ``chrome``: also write the Perfetto output (``out/merged.pftrace``, Perfetto's protobuf format).
    ``models``, ``run_dir``, ``allow_uncorrected``, ``force``: as ``distprof merge``'s
    flags, given to the solve step. ``num_cpus``: CPUs per task, also its ``--jobs``.
    ``ray_options``: more options for each task (``.options(**ray_options)``; the default
    spreads the tasks over the nodes). ``timeout_s``: limit of each distprof command.

    Returns a dict: ``out``, ``run_dir``, ``chrome``, ``nodes`` (count), ``bytes_in``,
    ``bytes_out``, ``solve`` (bytes the solve step read and the traces' size) and
    ``shards`` (per shard: ``nodes``, ``host``, ``ray_node_id``, ``seconds``), ``seconds``.
    Raises DistprofError naming the failing step or shard with its stderr; ``out`` is then
    left as it was and nothing else remains.
    """
    ray = _import_ray()
    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    traces = [os.path.abspath(os.fspath(t)) for t in traces]
    if not traces:
        raise DistprofError("distprof.ray.merge: no traces given; pass the per-node .xplane.pb files or the directories holding them")
    if int(shard_size) < 1:
        raise DistprofError(f"distprof.ray.merge: shard_size={shard_size!r}; give at least 1 node per shard")
    out = os.path.abspath(os.fspath(out))
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise DistprofError(f"distprof.ray.merge: {out} exists and is not an empty directory; choose a new output directory (the result replaces it whole)")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise DistprofError(f"distprof.ray.merge: {parent}, the directory of out, does not exist; create it (on the shared file system) first")
    # A name is looked up on each host's PATH; a path is made absolute for the workers.
    exe = os.fspath(distprof)
    if os.sep in exe:
        exe = os.path.abspath(exe)
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.distprof-ray-", dir=parent)
    refs = []
    we_started_ray = False
    try:
        plan = os.path.join(work, "plan.json")
        solve = [exe, "merge", "--solve-only", *traces, "--out", plan, "--json"]
        for flag, value in (("--models", models), ("--run-dir", run_dir)):
            if value is not None:
                solve += [flag, os.path.abspath(os.fspath(value))]
        solve += ["--allow-uncorrected"] * bool(allow_uncorrected) + ["--force"] * bool(force)
        solved = _run(solve, "the solve step (distprof merge --solve-only)", timeout_s)
        with open(plan, encoding="utf-8") as f:
            node_ids = [n["node"] for n in json.load(f)["nodes"]]
        shards = _shards(node_ids, int(shard_size))

        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as e:
                raise DistprofError(f"cannot reach the Ray cluster at address={address!r} ({e}); start one (ray start --head) or pass its address") from e
            we_started_ray = True
        # Sent by value: the workers need Ray and the distprof binary, not this package.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        task = ray.remote(_shard_task).options(num_cpus=num_cpus, scheduling_strategy="SPREAD", **(ray_options or {}))
        shard_dirs = [os.path.join(work, f"shard{i:05d}") for i in range(len(shards))]
        refs = [task.remote(exe, plan, nodes, d, max(1, int(num_cpus)), timeout_s) for nodes, d in zip(shards, shard_dirs)]
        shard_of = dict(zip(refs, shards))
        results = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                r = ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - the task could not run (its worker died, Ray failed): named by shard
                raise DistprofError(f"shard --nodes {shard_of[ready[0]]}: its Ray task failed: {e}") from e
            results[r["nodes"]] = r
            if not r["ok"]:
                raise DistprofError(
                    f"shard --nodes {r['nodes']} failed on {r['host']} (Ray node {r['ray_node_id'][:12]}): {r['error']}"
                )
        refs = []

        merged = os.path.join(work, "merged")
        join = [exe, "merge", "--join", *shard_dirs, "--out", merged, "--json"] + ([] if chrome else ["--no-chrome"])
        joined = _run(join, "the join (distprof merge --join)", timeout_s)
        os.rename(merged, out)  # replaces an empty directory, as checked above
    except BaseException:
        _settle(ray, refs, work)
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        if we_started_ray:
            ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)

    def moved(path):
        return None if path is None else os.path.join(out, os.path.relpath(path, merged))

    return {
        "out": out,
        "run_dir": moved(joined["run_dir"]),
        "chrome": moved(joined["chrome"]),
        "nodes": len(joined["nodes"]),
        "bytes_in": joined["bytes_in"],
        "bytes_out": joined["bytes_out"],
        "solve": {"bytes_read": solved["bytes_read"], "bytes_in": solved["bytes_in"], "seconds": solved["seconds"]},
        "shards": [{k: results[s][k] for k in ("nodes", "host", "ray_node_id", "seconds")} for s in shards],
        "seconds": round(time.monotonic() - started, 3),
    }


def _settle(ray, refs, work):
    """Stops the shards still running (each kills its merge when it sees ``STOP`` in the
    work directory) and waits for them, so that none writes into the directory being
    removed."""
    if refs:
        try:
            open(os.path.join(work, STOP_FILE), "w").close()
        except OSError:
            pass  # the work directory is gone: nothing of it is left to write into
    for ref in refs:
        try:
            ray.get(ref)
        except Exception:  # noqa: BLE001 - failed: it has stopped, which is all we wait for
            pass
