"""The profiler's files of one trace, kept apart from every other process's until they hold
the distprof plane, then published into the log directory without touching another file.

Log directories are often shared (NFS, one ``/tmp/prof`` for every process of a host), and
JAX names its files by the host and the second the trace stopped
(``plugins/profile/<run>/<hostname>.xplane.pb``), so a file in the log directory says
nothing reliable about which process wrote it. ``trace()`` therefore points the profiler at
a directory that only this process writes (``stage``), appends the plane there, where every
``.xplane.pb`` is this process's own, and ``publish`` links each file to the same relative
path under the log directory. ``os.link`` (or, where a filesystem has no hard links, an
``O_EXCL`` create) fails when the name exists: the check and the write are one atomic step,
so no lock is needed, and a file another process wrote is never replaced or changed.

An XSpace's ``planes`` field is repeated, so a serialized XSpace holding only the distprof
plane, appended to a finished ``.xplane.pb``, gives a valid XSpace with one more plane: the
same result as the plugin's ``MergeFromString`` inside XLA.
"""

import os
import shutil
import socket
import tempfile

SUFFIX = ".xplane.pb"
# Hidden, so that `distprof merge /tmp/prof/*` and TensorBoard skip a directory left behind
# by a process that died while profiling.
STAGING_PREFIX = ".distprof-staging-"


def stage(log_dir):
    """A new directory under ``log_dir`` that only this process writes: the profiler's
    ``log_dir`` for one trace."""
    os.makedirs(log_dir, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=log_dir)


def others_tracing(log_dir):
    """Ids of the live processes of this host that are tracing into ``log_dir`` now (their
    staging directories are there): JAX will give their files the same names as ours."""
    mine = f"{STAGING_PREFIX}{socket.gethostname()}-"
    pids = set()
    for name in os.listdir(log_dir):
        if not name.startswith(mine):
            continue
        pid = name[len(mine):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)  # left behind by a process that died, or live?
        except ProcessLookupError:
            continue
        except PermissionError:
            pass  # live, another user's
        pids.add(int(pid))
    return sorted(pids)


def traces(staging):
    """The ``.xplane.pb`` files the profiler wrote into ``staging`` (one per trace)."""
    return sorted(p for p in _files(staging) if p.endswith(SUFFIX))


def append(path, planes):
    """Appends the serialized planes to ``path``; on failure the file is cut back to its
    original length, so it is never left half-written."""
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        try:
            f.write(planes)
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            f.truncate(size)
            raise


def publish(staging, log_dir):
    """Moves every file of ``staging`` to its relative path under ``log_dir``, never over an
    existing file, then removes ``staging``. Returns ``(published, taken)``: the paths
    written, and ``(wanted, kept_as)`` for each name another file already held, where this
    process's file went instead (the host name followed by ``.pid<PID>``)."""
    published, taken = [], []
    for src in _files(staging):
        rel = os.path.relpath(src, staging)
        wanted = os.path.join(log_dir, rel)
        os.makedirs(os.path.dirname(wanted), exist_ok=True)
        if _place(src, wanted):
            published.append(wanted)
            continue
        kept = _own_name(wanted)
        if not _place(src, kept):
            raise FileExistsError(f"both {wanted} and {kept} exist; this process's trace stays in {staging}")
        published.append(kept)
        taken.append((wanted, kept))
    shutil.rmtree(staging)
    return published, taken


def _files(root):
    return [os.path.join(d, name) for d, _dirs, names in os.walk(root) for name in names]


def _place(src, dst):
    """Gives ``src`` the name ``dst`` unless ``dst`` exists (then False); atomic."""
    try:
        os.link(src, dst)
        return True
    except FileExistsError:
        return False
    except OSError:
        pass  # no hard links here (some FUSE and object-store mounts): copy, exclusively
    try:
        out = open(dst, "xb")
    except FileExistsError:
        return False
    try:
        with out, open(src, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(dst)  # this process created it just now
        raise
    return True


def _own_name(path):
    """``path`` with this process's id after the host name the profiler put first:
    ``vm.xplane.pb`` -> ``vm.pid123.xplane.pb``."""
    d, name = os.path.split(path)
    host = socket.gethostname()
    tag = f".pid{os.getpid()}"
    if name.startswith(host + "."):
        return os.path.join(d, host + tag + name[len(host):])
    return os.path.join(d, tag[1:] + "." + name)
