"""Registered buffers, (address, length) pairs, NumPy and torch, and the
asynchronous batches with their event fd."""

from __future__ import annotations

import mmap
import os
import select

import numpy as np
import pytest

import meshpool
from meshpool import _meshpool

NUMPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                np.uint32, np.int64, np.uint64, np.float16, np.float32,
                np.float64, np.complex64, np.complex128]


def random_array(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                       dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip_of_every_dtype(client, dtype):
    a = random_array(dtype, (64, 33), seed=hash(np.dtype(dtype).name) & 0xFFFF)
    client.put(f"np-{np.dtype(dtype).name}", a)
    out = np.empty_like(a)
    assert client.get_into(f"np-{np.dtype(dtype).name}", out) == a.nbytes
    assert out.tobytes() == a.tobytes()


def test_torch_round_trip_of_every_dtype(client):
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
              torch.int64, torch.float16, torch.bfloat16, torch.float32,
              torch.float64, torch.complex64]
    for i, dtype in enumerate(dtypes):
        raw = torch.randint(0, 256, (4096,), dtype=torch.uint8)
        t = raw.view(dtype) if dtype != torch.bool else raw % 2 == 1
        client.put(f"torch-{i}", t)
        out = torch.empty_like(t)
        assert client.get_into(f"torch-{i}", out) == t.numel() * t.element_size()
        assert torch.equal(out.view(torch.uint8) if dtype != torch.bool else out,
                           t.view(torch.uint8) if dtype != torch.bool else t), dtype


def test_non_contiguous_and_read_only_arrays_are_refused(client):
    a = np.zeros((64, 64), dtype=np.float32)
    with pytest.raises(meshpool.InvalidArgument, match="ascontiguousarray"):
        client.get_into("k", a[:, ::2])
    ro = np.zeros(100, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(meshpool.InvalidArgument, match="read-only"):
        client.get_into("k", ro)
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    with pytest.raises(meshpool.InvalidArgument, match="contiguous"):
        client.get_into("k", torch.zeros(8, 8).t())


def test_zero_copy_calls_add_no_binding_copy_and_land_in_the_callers_memory(client):
    arena = np.zeros(8 << 20, dtype=np.uint8)
    reg = client.register_buffer(arena)
    assert reg.address == arena.ctypes.data and reg.length == arena.nbytes
    n, size = 16, 256 << 10
    src = [random_array(np.uint8, (size,), seed=i) for i in range(n)]
    for i, s in enumerate(src):
        arena[i * size:(i + 1) * size] = s
    pairs = [(reg.address + i * size, size) for i in range(n)]
    keys = [f"zc-{i}" for i in range(n)]
    before = _meshpool._binding_copied_bytes()
    assert client.batch_put_from(keys, pairs) == [None] * n
    dst = arena[n * size:]
    dst[:] = 0
    out_pairs = [(reg.address + (n + i) * size, size) for i in range(n)]
    assert client.batch_get_into(keys, out_pairs) == [size] * n
    views = [np.zeros(size, dtype=np.uint8) for _ in range(n)]
    assert client.batch_get_into(keys, views) == [size] * n
    assert client.get_into(keys[0], views[0]) == size
    assert _meshpool._binding_copied_bytes() == before  # the binding copied nothing
    for i in range(n):
        assert np.array_equal(dst[i * size:(i + 1) * size], src[i])
        assert np.array_equal(views[i], src[i])
    client.get(keys[0])  # get() builds a bytes object: counted
    assert _meshpool._binding_copied_bytes() == before + size
    reg.close()


def test_pairs_outside_registered_memory_are_refused(client):
    arena = bytearray(1 << 20)
    with client.register_buffer(arena) as reg:
        with pytest.raises(meshpool.InvalidArgument, match="register"):
            client.batch_put_from(["p"], [(reg.address + (1 << 20) - 10, 20)])
        with pytest.raises(meshpool.InvalidArgument, match="register"):
            client.batch_get_into(["p"], [(12345, 10)])
        with pytest.raises(meshpool.InvalidArgument, match="two ints"):
            client.batch_get_into(["p"], [("a", 10)])
        with pytest.raises(meshpool.InvalidArgument, match="overlaps"):
            client.register_buffer(memoryview(arena)[100:200])
    # Closed: its range is no longer accepted.
    with pytest.raises(meshpool.InvalidArgument, match="register"):
        client.batch_put_from(["p"], [(reg.address, 10)])


def test_register_mmap_and_torch_tensor(client):
    m = mmap.mmap(-1, 1 << 20)
    reg = client.register_buffer(m)
    m[:5] = b"hello"
    assert client.batch_put_from(["mm"], [(reg.address, 5)]) == [None]
    assert client.get("mm") == b"hello"
    reg.close()
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    t = torch.zeros(1 << 18, dtype=torch.float32)
    with client.register_buffer(t) as treg:
        assert treg.address == t.data_ptr()
        assert client.batch_get_into(["mm"], [(treg.address, 5)]) == [5]
    assert bytes(t.view(torch.uint8)[:5].tolist()) == b"hello"


def test_async_batches_complete_futures_and_the_event_fd(client):
    n, size = 32, 16 << 10
    values = [os.urandom(size) for _ in range(n)]
    keys = [f"async-{i}" for i in range(n)]
    put = client.batch_put_from_async(keys, values)
    assert put.result(timeout=30) == [None] * n
    outs = [bytearray(size) for _ in range(n)]
    get = client.batch_get_into_async(keys + ["async-missing"],
                                      outs + [bytearray(1)])
    results = get.result(timeout=30)
    assert results[:n] == [size] * n
    assert isinstance(results[n], meshpool.NotFound)
    assert [bytes(o) for o in outs] == values
    readable, _, _ = select.select([client.event_fd], [], [], 10)
    assert readable == [client.event_fd]
    drained = client.drain_completions()
    assert drained == [put, get]
    assert client.drain_completions() == []
    readable, _, _ = select.select([client.event_fd], [], [], 0)
    assert readable == []


def test_close_waits_for_async_batches(cluster):
    c = cluster.client()
    futures = [c.batch_put_from_async([f"closing-{i}"], [os.urandom(4096)])
               for i in range(20)]
    c.close()
    assert all(f.done() for f in futures)
    assert all(f.result() == [None] for f in futures)


def test_close_from_a_done_callback_is_refused(client):
    import threading
    import time

    seen = []

    def callback(future):
        if threading.current_thread() is threading.main_thread():
            return  # the batch was done before the callback was added
        try:
            client.close()
        except meshpool.FailedPrecondition as e:
            seen.append(e)

    for attempt in range(20):  # until a callback runs on the completion thread
        future = client.batch_put_from_async([f"cb-close-{attempt}"], [os.urandom(1 << 20)])
        future.add_done_callback(callback)
        future.result(timeout=30)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline and not future.done():
            time.sleep(0.01)
        time.sleep(0.05)
        if seen:
            break
    assert seen, "no done-callback ran on the completion thread in 20 tries"
    assert "done-callback" in str(seen[0])
    assert not client.closed


def test_a_done_callback_calling_the_client_during_close_gets_closed_not_a_deadlock(cluster):
    import threading
    import time

    for attempt in range(20):
        c = cluster.client()
        seen = []

        def callback(future, c=c):
            if threading.current_thread() is threading.main_thread():
                return  # done before the callback was added: try again
            time.sleep(0.2)  # close() is waiting for this batch by now
            try:
                c.exists("anything")
                seen.append("answered")
            except meshpool.FailedPrecondition as e:
                seen.append(e)

        future = c.batch_put_from_async([f"cb-during-close-{attempt}"], [os.urandom(4 << 20)])
        future.add_done_callback(callback)
        started = time.monotonic()
        c.close()  # must not wait forever on the callback's call
        assert time.monotonic() - started < 30
        if seen:
            break
    assert seen, "no done-callback ran on the completion thread in 20 tries"
    assert isinstance(seen[0], meshpool.FailedPrecondition), seen[0]
