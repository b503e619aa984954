"""Key-value clients in the one shape the Rust side calls: ``try_get(key) -> str | None``
and ``set(key, value)``, each returning at once (the waiting is done in Rust with the GIL
released; see rust/distprof-py/src/kv.rs)."""


class JaxKv:
    """JAX's coordination-service client (``jax._src.distributed.global_state.client``)."""

    def __init__(self, client):
        self._client = client

    def try_get(self, key):
        try:
            return self._client.key_value_try_get(key)
        except Exception as err:  # JaxRuntimeError; its text starts with the status code
            if str(err).startswith("NOT_FOUND"):
                return None
            raise

    def set(self, key, value):
        self._client.key_value_set(key, value)
