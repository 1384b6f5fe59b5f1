"""meshpool.Client: a connection to a meshpool cluster."""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Optional

from . import _meshpool
from .errors import InvalidArgument

# Clients still open at interpreter exit are closed first, so that no
# client thread completes a batch into a finalizing interpreter.
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_open_clients):
        client.close()


class Client(_meshpool._Client):
    """A client of one meshpool cluster, safe to share between threads.

    ``coordinator`` is the coordinator's ``HOST:PORT``; when omitted, the
    ``MESHPOOL_COORDINATOR`` environment variable is used (as the CLI does;
    ``meshpool up`` prints it). Options (keywords): ``op_timeout`` and
    ``connect_timeout`` in seconds, ``batch_threads``, ``max_verify_retries``,
    ``rdma_devices`` (list of device names), ``gid_index``,
    ``pins_per_node`` (the pins this client may hold at once on each node;
    0, the default, takes the node's default table size), ``busy_poll``
    (seconds a thread waiting on a verbs or uc node polls before it sleeps,
    0 to 0.01; default 20e-6).

    Values move with one-sided RDMA (or TCP / shared memory) straight
    between your buffers and the nodes' memory; the GIL is released while a
    call waits. Use as a context manager, or call ``close()``.
    """

    def __init__(self, coordinator: Optional[str] = None, **options: Any) -> None:
        if coordinator is None:
            coordinator = os.environ.get("MESHPOOL_COORDINATOR")
        if not coordinator:
            raise InvalidArgument(
                "no coordinator given: pass meshpool.Client('HOST:PORT') or set "
                "MESHPOOL_COORDINATOR (`meshpool up` prints it)")
        super().__init__(coordinator, **options)
        _open_clients.add(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch {self.map_epoch}"
        return f"<meshpool.Client {state}>"
