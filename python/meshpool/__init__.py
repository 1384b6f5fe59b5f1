"""meshpool: the memory of many machines as one store, from Python.

    import meshpool
    with meshpool.Client("127.0.0.1:7000") as client:
        client.put("key", b"value")
        assert client.get("key") == b"value"

See docs/python.md for the zero-copy, batched and asynchronous calls, the
KV-cache and region APIs, and the LMCache / SGLang connectors.
"""

from . import errors
from ._meshpool import (
    HARD_PIN,
    BlockKeyChain,
    ClusterStatus,
    KvStats,
    NodeStatus,
    RegisteredBuffer,
    Region,
    SessionStatus,
    block_keys,
)
from .client import Client
from .errors import *  # noqa: F401,F403  (one class per status code)

__version__ = "0.1.0"

__all__ = [
    "Client", "Region", "RegisteredBuffer", "BlockKeyChain", "block_keys",
    "HARD_PIN", "ClusterStatus", "NodeStatus", "SessionStatus", "KvStats",
    "errors",
] + errors.__all__
