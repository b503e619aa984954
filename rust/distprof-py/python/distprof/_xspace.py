"""The profiler's ``.xplane.pb`` files: which ones a trace wrote, and appending planes.

An XSpace's ``planes`` field is repeated, so a serialized XSpace holding only the distprof
plane, appended to a finished ``.xplane.pb``, gives a valid XSpace with one more plane: the
same result as the plugin's ``MergeFromString`` inside XLA.
"""

import os

SUFFIX = ".xplane.pb"


def snapshot(log_dir):
    """``{path: (mtime_ns, size)}`` of every ``.xplane.pb`` under ``log_dir``."""
    seen = {}
    for root, _dirs, files in os.walk(log_dir):
        for name in files:
            if name.endswith(SUFFIX):
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                seen[path] = (st.st_mtime_ns, st.st_size)
    return seen


def written_since(log_dir, before):
    """The ``.xplane.pb`` files under ``log_dir`` that are new or changed since ``before``."""
    return sorted(p for p, sig in snapshot(log_dir).items() if before.get(p) != sig)


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
