"""distprof: one timeline for the traces of every process of a multi-node job.

The XLA plugin's node (rendezvous over the job's key-value store, UDP clock probes, the
clock model) running inside a stock JAX process; see ``distprof.jax`` for the entry points
and the repository's README ("With stock JAX") for what differs from the XLA build.
``distprof.ray`` merges the traces of a large job on a Ray cluster (docs/merge.md).

Nothing here raises into the training loop unless asked (``strict=True``): a failure is
one log line on stderr and profiling turns off.
"""

import atexit
import json

from . import _native

__version__ = _native.__version__

__all__ = ["DistprofError", "__version__", "status", "stop"]


class DistprofError(RuntimeError):
    """Raised instead of the one log line when the caller passed ``strict=True``."""


def stop():
    """Stops this process's node: probing ends, the key-value client is let go. Idempotent."""
    _native.stop()


def status():
    """Where this process's node stands, as a dict.

    Keys: ``state`` (``stopped`` before ``start`` and after ``stop``; ``disabled`` when the
    configuration turns distprof off; ``pending`` during the rendezvous; ``agreed``;
    ``failed``), ``enabled``, ``tracing``, ``node``, ``num_nodes``, ``error`` (the reason
    logged when it failed) and, once agreed, ``session_id``, ``context_digest``,
    ``reference_node``, ``elapsed_ms``.
    """
    return json.loads(_native.status())


# The node's rendezvous thread calls the job's key-value client through Python: let go of
# it before the interpreter shuts down.
atexit.register(_native.stop)
