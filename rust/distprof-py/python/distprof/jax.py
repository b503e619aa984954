"""distprof for stock JAX: no rebuilt jaxlib, the same node as the XLA plugin.

    jax.distributed.initialize(...)
    distprof.jax.start()                  # rendezvous + probe socket, on a Rust thread
    with distprof.jax.trace("/tmp/prof"):  # jax.profiler.trace + the distprof plane
        train_steps()
    # then, on the traces of all processes:  distprof merge /tmp/prof --out merged

A process changes only the trace it wrote, so one log directory may be shared by every host
(``trace`` below). Processes of one host should each get their own directory
(``f"/tmp/prof/{jax.process_index()}"``): JAX gives them the same file names.

Same configuration as inside XLA (``XLA_DIST_PROF_*`` variables, ``XLA_DIST_PROF_CONFIG``
file, ``schema/``); ``config=`` (a dict, or the path of a JSON file) is one more layer,
between the file and the variables. ``enabled`` defaults to true here: calling ``start`` is
the switch (``XLA_ENABLE_DISTRIBUTED_PROFILING=0`` still turns it off).

Errors never raise into the training loop unless ``strict=True``: one log line on stderr,
and profiling is off for the rest of the process (``distprof.status()["error"]`` says why).
"""

import contextlib
import json
import os
import shutil
import socket

from . import DistprofError, _kv, _native, _xspace

__all__ = ["start", "trace"]

# How long trace() waits, after the profiler wrote its files, for the probe threads to close
# their last window (they notice the stop within the engine's poll interval and fit in
# milliseconds); past this the plane holds the windows closed so far, as XLA's export does.
PROBES_FINISH_TIMEOUT_S = 5.0

# Where `config=` appears in messages when it is a dict.
CONFIG_LABEL = "distprof.jax.start(config=...)"
# How the fix of an unreadable `config=` path names the argument.
CONFIG_PATH_ARG = "distprof.jax.start(config=PATH)"


def _fail(message, strict, *, profiling_off=True):
    """Raises when strict, else the one log line."""
    if strict:
        raise DistprofError(message)
    _native.log_error(f"distprof disabled: {message}" if profiling_off else f"distprof: {message}")


def _config_layer(config):
    """The ``config=`` layer as (JSON text, label), with ``enabled`` true unless it says."""
    if config is None:
        return json.dumps({"enabled": True}), CONFIG_LABEL
    if isinstance(config, dict):
        layer = {"enabled": True, **config}
        return json.dumps(layer), CONFIG_LABEL
    if isinstance(config, (str, os.PathLike)):
        path = os.fsdecode(config)
        # distprof's guarded reader: a FIFO, device or oversized file is refused by its type
        # and size before any read (ValueError naming the path, the reason and the fix).
        text = _native.read_config(path, CONFIG_PATH_ARG)
        try:
            layer = json.loads(text)
        except ValueError:
            # Left to distprof's parser, whose message names the line and the fix.
            return text, path
        if isinstance(layer, dict):
            layer.setdefault("enabled", True)
            text = json.dumps(layer)
        return text, path
    raise TypeError(
        f"config must be None, a dict or the path of a JSON file, not {type(config).__name__}"
    )


def start(config=None, *, strict=False):
    """Starts this process's node after ``jax.distributed.initialize()``.

    Returns at once: the rendezvous (over JAX's key-value store) and the probe socket are set
    up on a background thread; the first ``trace`` after they finish probes. Calling it again
    restarts the node with the new configuration.
    """
    try:
        from jax._src import distributed

        state = distributed.global_state
        client = state.client
        if client is None:
            raise DistprofError(
                "jax.distributed.initialize() has not been called in this process "
                "(jax._src.distributed.global_state.client is None); call it before "
                "distprof.jax.start()"
            )
        text, label = _config_layer(config)
        _native.start(state.process_id, state.num_processes, _kv.JaxKv(client), text, label)
    except Exception as err:  # noqa: BLE001 - the training loop must go on
        _native.stop()
        _fail(f"distprof.jax.start: {err}", strict)
        return
    st = json.loads(_native.status())
    if strict and st.get("state") == "failed":
        raise DistprofError(st.get("error"))


@contextlib.contextmanager
def trace(log_dir, *, strict=False, **profiler_kwargs):
    """``jax.profiler.trace(log_dir, ...)`` that also probes while the profile runs and adds
    the distprof plane to the trace this process's profiler wrote.

    Only this process's own files are ever changed: the profiler writes into a directory of
    this process's own under ``log_dir``, the plane is appended there, and the files are
    then linked into ``log_dir`` under the profiler's names, never over a file that exists.
    A shared ``log_dir`` (NFS, one directory for every host) is fine. Two processes of one
    host in one ``log_dir`` get the same file names from JAX: the second one's files are
    kept as ``<host>.pid<PID>...`` and a log line says to give each process its own
    directory. Without ``start()`` this is ``jax.profiler.trace`` as it is.

    A failure of the profiler or of distprof is one log line (or ``DistprofError`` when
    ``strict``); an exception of the body propagates as it is.
    """
    import jax

    log_dir = os.fspath(log_dir)
    st = json.loads(_native.status())
    if strict and st.get("error"):
        # The node failed on its own thread since start(): strict callers hear it here.
        raise DistprofError(st["error"])
    running = st.get("enabled", False)
    staging = None
    profiling = False
    try:
        if running:
            if "://" in log_dir:
                raise DistprofError(
                    f"{log_dir} is a URL; distprof adds its plane to traces on a filesystem path "
                    "only: trace into a local or mounted directory and copy the files afterwards"
                )
            staging = _xspace.stage(log_dir)
            others = _xspace.others_tracing(log_dir)
            if others:
                _native.log_error(
                    f"distprof: distprof.jax.trace({log_dir!r}): process {others[0]} of this host "
                    f"({socket.gethostname()}) is tracing into the same directory; JAX gives the "
                    "processes of one host the same file names, so one of the traces will be kept "
                    "under another name: give each process its own directory, e.g. "
                    f"trace(f\"{log_dir}/process{{jax.process_index()}}\")")
            _native.trace_start()
        jax.profiler.start_trace(staging or log_dir, **profiler_kwargs)
        profiling = True
    except Exception as err:  # noqa: BLE001
        _native.trace_stop()
        _remove_staging(staging)
        _fail(f"distprof.jax.trace({log_dir!r}): the profiler cannot write its trace there: {err}; "
              "this trace has no profile", strict, profiling_off=False)
    try:
        yield
    finally:
        if profiling:
            _finish(jax, log_dir, staging, strict)


def _remove_staging(staging):
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)


def _finish(jax, log_dir, staging, strict):
    try:
        jax.profiler.stop_trace()
    except Exception as err:  # noqa: BLE001
        _native.trace_stop()
        _remove_staging(staging)
        _fail(f"distprof.jax.trace({log_dir!r}): the profiler did not write its trace: {err}; this trace has no profile",
              strict, profiling_off=False)
        return
    if staging is None:
        return
    _native.trace_stop()
    plane_error = None
    try:
        _add_plane(log_dir, staging, strict)
    except Exception as err:  # noqa: BLE001 - the trace is published without the plane
        plane_error = err
    try:
        _published, taken = _xspace.publish(staging, log_dir)
    except Exception as err:  # noqa: BLE001
        _native.stop()
        _fail(f"distprof.jax.trace({log_dir!r}): cannot move this process's trace from {staging} "
              f"into the log directory: {err}", strict)
        return
    if plane_error is not None:
        _native.stop()
        _fail(f"distprof.jax.trace({log_dir!r}): cannot add the distprof plane: {plane_error}", strict)
        return
    if taken:
        # The .xplane.pb first: the file merge reads.
        wanted, kept = next((t for t in taken if t[0].endswith(_xspace.SUFFIX)), taken[0])
        _fail(f"distprof.jax.trace({log_dir!r}): {wanted} was already written by another process "
              f"(processes of one host in one log directory get the same file names from JAX); "
              f"it was left as it is and this process's trace is kept as {kept}"
              + (f" ({len(taken)} files in all)" if len(taken) > 1 else "")
              + "; give each process its own directory, e.g. "
              f"trace(f\"{log_dir}/process{{jax.process_index()}}\")", strict, profiling_off=False)


def _add_plane(log_dir, staging, strict):
    """Appends this process's distprof plane to the trace its profiler wrote into
    ``staging`` (a directory no other process writes)."""
    _native.wait_probes_finished(PROBES_FINISH_TIMEOUT_S)
    planes = _native.export()
    if not planes:
        st = json.loads(_native.status())
        if strict and st.get("error"):
            raise DistprofError(st["error"])
        return
    written = _xspace.traces(staging)
    if not written:
        raise DistprofError(f"the profiler wrote no {_xspace.SUFFIX} for {log_dir}")
    for path in written:
        _xspace.append(path, planes)
