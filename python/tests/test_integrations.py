"""The engine connectors, driven by harnesses that make each engine's calls
in the engine's order against a real local cluster.

THE ENGINES THEMSELVES ARE NOT RUN: LMCache and SGLang cannot be installed
on these machines (only Debian's packages are reachable). Each harness is
written from the pinned release's interface (named in the connector's
docstring): how the engine loads the plug-in, what it passes, what it
expects back.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import select
import sys
import types
from abc import ABC, abstractmethod

import pytest

import meshpool

print("NOTE: engine harnesses only; LMCache and SGLang themselves are not run",
      file=sys.stderr)


# ---- LMCache 0.5.x, multiprocess mode, L2 "native_plugin" adapter ------------

NATIVE_METHODS = ("event_fd", "submit_batch_get", "submit_batch_set",
                  "submit_batch_exists", "drain_completions", "close")


def load_native_plugin(config):
    """LMCache's native_plugin loading: import module_path, call class_name
    with adapter_params as keywords, check the contract's methods."""
    module = importlib.import_module(config["module_path"])
    connector = getattr(module, config["class_name"])(**config["adapter_params"])
    missing = [m for m in NATIVE_METHODS if not callable(getattr(connector, m, None))]
    if missing:
        connector.close()
        raise TypeError(f"native plugin lacks {missing}")
    assert callable(getattr(connector, "submit_batch_delete", None))
    return connector


class Demux:
    """LMCache's demux thread, inline: waits on event_fd and routes
    completions by operation id."""

    def __init__(self, connector):
        self.c = connector
        self.results = {}

    def wait(self, op, timeout=30.0):
        while op not in self.results:
            readable, _, _ = select.select([self.c.event_fd()], [], [], timeout)
            assert readable, f"operation {op} never completed"
            for op_id, ok, error, per_key in self.c.drain_completions():
                self.results[op_id] = (ok, error, per_key)
        return self.results.pop(op)


def lmcache_key(model, kv_rank, chunk_hash):
    # The bridge's key string: model@kv_rank(08x)@chunk_hash.hex()
    return f"{model}@{kv_rank:08x}@{chunk_hash.hex()}"


def test_lmcache_native_plugin_store_lookup_load_evict(cluster):
    connector = load_native_plugin({
        "type": "native_plugin",
        "module_path": "meshpool.integrations.lmcache",
        "class_name": "MeshpoolL2Connector",
        "adapter_params": {"coordinator": cluster.address, "op_timeout": 5.0},
    })
    demux = Demux(connector)
    chunk = 64 << 10  # an L1 object
    keys = [lmcache_key("llama", 0x10001, os.urandom(16)) for _ in range(8)]
    l1 = [memoryview(bytearray(os.urandom(chunk))) for _ in keys]

    # Store: after vLLM wrote L1, the StoreController submits every key.
    ok, error, per_key = demux.wait(connector.submit_batch_set(keys[:6], l1[:6]))
    assert (ok, error, per_key) == (True, "", None)

    # Lookup: exists bitmap; LMCache keeps the contiguous prefix.
    ok, _, present = demux.wait(connector.submit_batch_exists(keys))
    assert ok and present == [True] * 6 + [False] * 2
    prefix = present.index(False)

    # Load: into freshly reserved L1 buffers of the stored size.
    buffers = [memoryview(bytearray(chunk)) for _ in range(prefix)]
    ok, error, _ = demux.wait(connector.submit_batch_get(keys[:prefix], buffers))
    assert ok, error
    assert [bytes(b) for b in buffers] == [bytes(v) for v in l1[:prefix]]

    # A batch with a missing key, or a buffer of the wrong size, fails whole.
    ok, error, _ = demux.wait(connector.submit_batch_get(
        keys[5:7], [memoryview(bytearray(chunk)) for _ in range(2)]))
    assert not ok and error
    ok, error, _ = demux.wait(connector.submit_batch_get(
        keys[:1], [memoryview(bytearray(chunk + 1))]))
    assert not ok and "bytes" in error

    # Several operations in flight at once, drained together.
    ops = [connector.submit_batch_exists(keys[i:i + 1]) for i in range(8)]
    assert [demux.wait(op)[2] for op in ops] == [[i < 6] for i in range(8)]

    # Eviction deletes.
    ok, _, _ = demux.wait(connector.submit_batch_delete(keys[:2] + keys[7:]))
    assert ok
    _, _, present = demux.wait(connector.submit_batch_exists(keys[:3]))
    assert present == [False, False, True]
    connector.close()
    connector.close()
    with pytest.raises(meshpool.FailedPrecondition):
        connector.submit_batch_exists(keys)


# ---- SGLang 0.5.x HiCache, dynamic storage backend ---------------------------


def install_fake_sglang(monkeypatch):
    """The parts of SGLang a dynamic backend touches: HiCacheStorage (the
    base the factory checks) and HiCacheStorageConfig, as in
    sglang/srt/mem_cache/hicache_storage.py."""

    class HiCacheStorage(ABC):
        @abstractmethod
        def get(self, key, target_location=None, target_sizes=None): ...

        @abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None): ...

        @abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None): ...

        @abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...

        @abstractmethod
        def exists(self, key): ...

        def batch_exists(self, keys, extra_info=None):
            for i, k in enumerate(keys):
                if not self.exists(k):
                    return i
            return len(keys)

        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

    @dataclasses.dataclass
    class HiCacheStorageConfig:
        tp_rank: int
        tp_size: int
        is_mla_model: bool
        is_page_first_layout: bool
        model_name: str
        extra_config: dict = None
        pp_rank: int = 0
        pp_size: int = 1

    module = types.ModuleType("sglang.srt.mem_cache.hicache_storage")
    module.HiCacheStorage = HiCacheStorage
    module.HiCacheStorageConfig = HiCacheStorageConfig
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.delitem(sys.modules, "meshpool.integrations.sglang", raising=False)
    return module


def create_dynamic_backend(extra_config, storage_config, base):
    """StorageBackendFactory._create_dynamic_backend: import, check the base
    class, construct with (storage_config, kwargs dict)."""
    for k in ("backend_name", "module_path", "class_name"):
        assert k in extra_config
    cls = getattr(importlib.import_module(extra_config["module_path"]),
                  extra_config["class_name"])
    if not issubclass(cls, base):
        raise TypeError(f"{cls} is not a HiCacheStorage")
    return cls(storage_config, {})


class PageFirstMhaPool:
    """A host KV pool laid out page_first for an MHA model: per page, K then
    V, each layers * page_size * heads * head_dim elements."""

    def __init__(self, torch, pages, page_size=4, layers=2, heads=2, head_dim=32):
        self.page_size = page_size
        self.part = layers * page_size * heads * head_dim  # elements
        self.kv_buffer = torch.zeros(pages * 2 * self.part, dtype=torch.float16)

    def get_page_buffer_meta(self, host_indices):
        ptrs, sizes = [], []
        base, item = self.kv_buffer.data_ptr(), self.kv_buffer.element_size()
        for start in host_indices[:: self.page_size].tolist():
            page = start // self.page_size
            for kv in range(2):
                ptrs.append(base + (page * 2 + kv) * self.part * item)
                sizes.append(self.part * item)
        return ptrs, sizes

    def page(self, page):
        return self.kv_buffer[page * 2 * self.part:(page + 1) * 2 * self.part]


def test_sglang_backend_lookup_prefetch_backup_zero_copy(cluster, monkeypatch):
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    fake = install_fake_sglang(monkeypatch)
    extra = {"backend_name": "meshpool", "module_path": "meshpool.integrations.sglang",
             "class_name": "MeshpoolHiCacheStorage", "interface_v1": 1,
             "coordinator": cluster.address}

    def rank(r, pages=16):
        cfg = fake.HiCacheStorageConfig(tp_rank=r, tp_size=2, is_mla_model=False,
                                        is_page_first_layout=True, model_name="qwen",
                                        extra_config=dict(extra))
        backend = create_dynamic_backend(extra, cfg, fake.HiCacheStorage)
        pool = PageFirstMhaPool(torch, pages)
        backend.register_mem_pool_host(pool)
        return backend, pool

    b0, pool0 = rank(0)
    b1, pool1 = rank(1)
    hashes = [os.urandom(32).hex() for _ in range(6)]
    # Write-back after prefill: pages 0..3 of rank 0's pool hold the KV.
    pool0.kv_buffer.copy_(torch.randn(pool0.kv_buffer.numel()).half())
    host = torch.arange(0, 4 * pool0.page_size)
    assert b0.batch_set_v1(hashes[:4], host) == [True] * 4
    # The same hashes from rank 1 are another slice: not visible to it.
    assert b0.batch_exists(hashes) == 4
    assert b1.batch_exists(hashes) == 0
    # Prefetch into other slots (pages 8..11) of a fresh pool for rank 0.
    b0b, pool0b = rank(0)
    hit = b0b.batch_exists(hashes)
    assert hit == 4
    target = torch.arange(8 * pool0b.page_size, (8 + hit) * pool0b.page_size)
    assert b0b.batch_get_v1(hashes[:hit], target) == [True] * hit
    for i in range(hit):
        assert torch.equal(pool0b.page(8 + i), pool0.page(i))
    # A missing page reads False (the controller counts up to it).
    assert b0b.batch_get_v1(hashes[3:5], torch.arange(0, 2 * pool0b.page_size)) == [True, False]
    # The copying interface (without interface_v1).
    page = torch.randn(512).half()
    assert b1.set("copy-page", page)
    out = torch.zeros_like(page)
    assert b1.get("copy-page", out) is out and torch.equal(out, page)
    assert b1.batch_set(["c1", "c2"], [page, page + 1])
    outs = [torch.zeros_like(page), torch.zeros_like(page)]
    got = b1.batch_get(["c1", "c2", "c3"], outs + [torch.zeros_like(page)])
    assert got[0] is outs[0] and got[2] is None and torch.equal(outs[1], page + 1)
    assert b1.get("absent", torch.zeros_like(page)) is None
    for b in (b0, b1, b0b):
        b.close()


def test_sglang_mla_ranks_share_pages(cluster, monkeypatch):
    fake = install_fake_sglang(monkeypatch)
    extra = {"backend_name": "meshpool", "module_path": "meshpool.integrations.sglang",
             "class_name": "MeshpoolHiCacheStorage", "coordinator": cluster.address}
    backends = [create_dynamic_backend(extra, fake.HiCacheStorageConfig(
        tp_rank=r, tp_size=2, is_mla_model=True, is_page_first_layout=True,
        model_name="deepseek", extra_config=dict(extra)), fake.HiCacheStorage) for r in (0, 1)]
    assert backends[0].set("mla-page", b"x" * 4096)  # only rank 0 writes
    assert backends[1].exists("mla-page")            # every rank reads
    for b in backends:
        b.close()
