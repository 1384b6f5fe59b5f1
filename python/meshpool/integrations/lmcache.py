"""meshpool as LMCache's L2 store: a "native plugin" L2 adapter.

Pinned release: LMCache 0.5.x (checked against 0.5.6's interface as
documented in ``docs/source/developer_guide/extending_lmcache/
native_connectors.rst`` and ``lmcache/v1/distributed/l2_adapters/
native_plugin_l2_adapter.py``). LMCache loads it in multiprocess mode, the
server vLLM's LMCache MP connector talks to::

    lmcache server ... --l2-adapter '{"type": "native_plugin",
        "module_path": "meshpool.integrations.lmcache",
        "class_name": "MeshpoolL2Connector",
        "adapter_params": {"coordinator": "10.0.0.1:7070"}}'

``adapter_params`` become the constructor's keywords: ``coordinator``
(default: ``$MESHPOOL_COORDINATOR``) and any ``meshpool.Client`` option
(``op_timeout``, ``batch_threads``...).

The contract: every ``submit_batch_*`` returns an operation id at once;
``event_fd()`` becomes readable when operations completed;
``drain_completions()`` returns ``(id, ok, error, per_key)`` for each, where
``per_key`` is a list of bools for exists and None for get / set / delete
(LMCache uses batch-level ``ok`` for those). Gets write each value into the
memoryview LMCache gives (its pre-sized L1 buffer); a key that is absent,
or whose value does not fill its buffer exactly, fails the batch. Submission
and draining are thread-safe (LMCache submits from its store and prefetch
controllers while its demux thread drains).

Not tested against LMCache itself (it cannot be installed here): see
python/tests/test_integrations.py for the harness that makes its calls.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import os
import threading
from typing import Any, Deque, List, Optional, Sequence, Tuple

import meshpool

Completion = Tuple[int, bool, str, Optional[List[bool]]]


class MeshpoolL2Connector:
    """An LMCache L2 adapter backed by a meshpool cluster."""

    def __init__(self, coordinator: Optional[str] = None, **client_options: Any) -> None:
        self._client = meshpool.Client(coordinator, **client_options)
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._done: Deque[Completion] = collections.deque()
        # exists and delete have no asynchronous form in the client: a small
        # pool runs them (the GIL is released inside).
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="meshpool-lmcache")
        self._closed = False

    # ---- the native-plugin contract ----------------------------------------

    def event_fd(self) -> int:
        """Readable while completions are waiting for drain_completions()."""
        return self._fd

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Reads keys[i] into memoryviews[i]; ok when every key filled its
        buffer exactly."""
        sizes = [len(m) if m.itemsize == 1 else m.nbytes for m in memoryviews]
        op = self._next()
        future = self._client.batch_get_into_async(list(keys), list(memoryviews))
        future.add_done_callback(lambda f: self._finish_get(op, f, sizes))
        return op

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Stores memoryviews[i] under keys[i]; ok when every key was stored."""
        op = self._next()
        future = self._client.batch_put_from_async(list(keys), list(memoryviews))
        future.add_done_callback(lambda f: self._finish_set(op, f))
        return op

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        """Per-key presence (per_key is a list of bools)."""
        op = self._next()
        keys = list(keys)

        def run() -> None:
            try:
                found = self._client.batch_exists(keys)
            except meshpool.Error as e:
                return self._complete((op, False, str(e), None))
            errors = [r for r in found if isinstance(r, meshpool.Error)]
            # An unreachable node's key is reported absent: LMCache treats a
            # miss as "recompute", which is what a lost node means.
            self._complete((op, True, str(errors[0]) if errors else "",
                            [r is True for r in found]))

        self._pool.submit(run)
        return op

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        """Removes keys (absent ones count as removed)."""
        op = self._next()
        keys = list(keys)

        def run() -> None:
            failed = ""
            for k in keys:
                try:
                    self._client.delete(k)
                except meshpool.NotFound:
                    pass
                except meshpool.Error as e:
                    failed = failed or f"{k}: {e}"
            self._complete((op, not failed, failed, None))

        self._pool.submit(run)
        return op

    def drain_completions(self) -> List[Completion]:
        """Every operation completed since the last call, oldest first."""
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        with self._lock:
            out = list(self._done)
            self._done.clear()
        return out

    def close(self) -> None:
        """Waits for operations in flight, then disconnects. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self._client.close()  # waits for async batches (their callbacks run)
        os.close(self._fd)

    # ---- internals ---------------------------------------------------------

    def _next(self) -> int:
        if self._closed:
            raise meshpool.FailedPrecondition("the connector is closed")
        return next(self._ids)

    def _complete(self, completion: Completion) -> None:
        with self._lock:
            self._done.append(completion)
        os.eventfd_write(self._fd, 1)

    def _finish_get(self, op: int, future: concurrent.futures.Future, sizes: List[int]) -> None:
        results = future.result()
        for r, size in zip(results, sizes):
            if isinstance(r, meshpool.Error):
                return self._complete((op, False, str(r), None))
            if r != size:
                return self._complete(
                    (op, False, f"stored value is {r} bytes, the buffer {size}", None))
        self._complete((op, True, "", None))

    def _finish_set(self, op: int, future: concurrent.futures.Future) -> None:
        errors = [r for r in future.result() if r is not None]
        self._complete((op, not errors, str(errors[0]) if errors else "", None))
