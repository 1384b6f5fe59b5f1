"""meshpool as SGLang's HiCache L3 storage backend.

Pinned release: SGLang 0.5.x (the ``HiCacheStorage`` contract of
``python/sglang/srt/mem_cache/hicache_storage.py`` as of 0.5.10, with the
zero-copy ``batch_get_v1`` / ``batch_set_v1``). Loaded by SGLang's dynamic
backend option, with no change to SGLang::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-mem-layout page_first \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "meshpool",
            "module_path": "meshpool.integrations.sglang",
            "class_name": "MeshpoolHiCacheStorage", "interface_v1": 1,
            "coordinator": "10.0.0.1:7070"}'

``coordinator`` defaults to ``$MESHPOOL_COORDINATOR``; ``op_timeout`` and
``batch_threads`` pass to the client. With ``"interface_v1": 1`` SGLang
calls the zero-copy forms: the host KV pool (``mem_pool_host.kv_buffer``) is
registered with meshpool once, and each page's buffers (K and V for MHA,
one for MLA) move straight between it and the nodes. Without it, SGLang
uses the copying ``batch_get`` / ``batch_set`` on flat page tensors.

Keys: SGLang's page hashes cover tokens only and every tensor-parallel rank
sends the same ones, so each key is namespaced with the model and, except
for MLA models (whose ranks hold the same cache; only rank 0 writes), the
rank: ``sglang/<model>/tp<rank>of<size>/<hash>/<part>``.

Not tested against SGLang itself (it cannot be installed here): see
python/tests/test_integrations.py for the harness that makes its calls.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import meshpool

try:  # The real base class when SGLang is installed (its factory checks it).
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except ImportError:  # Importable for docs and tests without SGLang.
    _Base = object  # type: ignore[misc,assignment]

_log = logging.getLogger(__name__)


class MeshpoolHiCacheStorage(_Base):  # type: ignore[misc,valid-type]
    """A HiCacheStorage over a meshpool cluster."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        options = {k: extra[k] for k in ("op_timeout", "batch_threads") if k in extra}
        self.client = meshpool.Client(extra.get("coordinator"), **options)
        model = getattr(storage_config, "model_name", None) or "model"
        if getattr(storage_config, "is_mla_model", False):
            rank = "mla"
        else:
            rank = (f"tp{storage_config.tp_rank}of{storage_config.tp_size}"
                    f"pp{getattr(storage_config, 'pp_rank', 0)}"
                    f"of{getattr(storage_config, 'pp_size', 1)}")
        self.prefix = f"sglang/{model}/{rank}/"
        self.mem_pool_host = None
        self._registration = None

    # ---- zero-copy (interface_v1) ----------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Registers the host KV pool's memory for zero-copy transfers."""
        self.mem_pool_host = mem_pool_host
        buffer = getattr(mem_pool_host, "kv_buffer", None)
        if buffer is not None:
            self._registration = self.client.register_buffer(buffer)

    def _parts(self, keys: List[str], host_indices: Any):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys):
            raise meshpool.InvalidArgument(
                f"{len(ptrs)} page buffers for {len(keys)} keys: expected a "
                "multiple (K and V per page for MHA, one per page for MLA)")
        per = len(ptrs) // len(keys)
        names = [f"{self.prefix}{k}/{j}" for k in keys for j in range(per)]
        return names, list(zip(ptrs, sizes)), per

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Reads each page's buffers in place; True per page fully read."""
        names, pairs, per = self._parts(keys, host_indices)
        got = self.client.batch_get_into(names, pairs)
        ok = [r == size for r, (_, size) in zip(got, pairs)]
        return [all(ok[i * per:(i + 1) * per]) for i in range(len(keys))]

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Stores each page's buffers; True per page fully stored."""
        names, pairs, per = self._parts(keys, host_indices)
        done = self.client.batch_put_from(names, pairs)
        ok = [r is None for r in done]
        return [all(ok[i * per:(i + 1) * per]) for i in range(len(keys))]

    # ---- lookup ------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading pages are stored (every part of each)."""
        if not keys:
            return 0
        per = self._parts_per_page()
        names = [f"{self.prefix}{k}/{j}" for k in keys for j in range(per)]
        try:
            return self.client.prefix_match(names) // per
        except meshpool.Error as e:  # a lookup failure is a miss, not a crash
            _log.warning("meshpool lookup failed: %s", e)
            return 0

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def _parts_per_page(self) -> int:
        # The copying interface stores a page as one value; the zero-copy one
        # as the pool's buffers per page (K and V for MHA).
        pool = self.mem_pool_host
        if pool is None or not hasattr(pool, "get_page_buffer_meta"):
            return 1
        page = getattr(pool, "page_size", 1)
        ptrs, _ = pool.get_page_buffer_meta(_first_page_indices(page))
        return max(1, len(ptrs))

    # ---- the copying interface -------------------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """Fills target_location (a flat CPU page tensor) and returns it, or
        None when the page is absent."""
        try:
            n = self.client.get_into(f"{self.prefix}{key}/0", target_location)
        except meshpool.Error:
            return None
        return target_location if n == _nbytes(target_location) else None

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        names = [f"{self.prefix}{k}/0" for k in keys]
        got = self.client.batch_get_into(names, list(target_locations))
        return [t if r == _nbytes(t) else None for r, t in zip(got, target_locations)]

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        try:
            self.client.put(f"{self.prefix}{key}/0", value)
        except meshpool.Error as e:
            _log.warning("meshpool set failed: %s", e)
            return False
        return True

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        names = [f"{self.prefix}{k}/0" for k in keys]
        return all(r is None for r in self.client.batch_put_from(names, list(values)))

    # ---- housekeeping --------------------------------------------------------------

    def clear(self) -> None:
        """Not supported: a pool shared by many engines is not cleared by one
        (keys age out by eviction)."""
        _log.info("meshpool: clear() ignored; the shared pool evicts by itself")

    def get_stats(self) -> Any:
        return self.client.kv_statistics().total

    def close(self) -> None:
        if self._registration is not None:
            self._registration.close()
        self.client.close()


def _first_page_indices(page_size: int) -> Any:
    try:
        import torch
        return torch.arange(page_size, dtype=torch.int64)
    except ImportError:
        return list(range(page_size))


def _nbytes(t: Any) -> int:
    if hasattr(t, "element_size"):
        return t.numel() * t.element_size()
    return memoryview(t).nbytes
