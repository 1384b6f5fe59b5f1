"""The Client's KV calls, errors and bad input, against a real cluster."""

from __future__ import annotations

import os
import threading

import pytest

import meshpool


def test_put_get_delete_exists_with_str_and_bytes_keys(client):
    client.put("k-str", b"hello")
    assert client.get("k-str") == b"hello"
    assert client.get(b"k-str") == b"hello"  # str keys are their UTF-8 bytes
    client.put(b"\x00\xffbinary", bytearray(b"x" * 1000))
    assert client.get(b"\x00\xffbinary") == b"x" * 1000
    assert client.exists("k-str")
    client.delete("k-str")
    assert not client.exists("k-str")


def test_missing_key_raises_not_found_which_is_a_key_error(client):
    with pytest.raises(meshpool.NotFound) as e:
        client.get("never-written")
    assert isinstance(e.value, KeyError)
    assert isinstance(e.value, meshpool.Error)
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(KeyError):
        client.delete("never-written")


def test_get_into_fills_the_callers_buffer_and_returns_the_length(client):
    value = os.urandom(100_000)
    client.put("into", value)
    buf = bytearray(200_000)
    assert client.get_into("into", buf) == len(value)
    assert bytes(buf[: len(value)]) == value


def test_get_into_a_too_small_buffer_is_out_of_range_naming_the_size(client):
    client.put("big", b"z" * 5000)
    buf = bytearray(100)
    with pytest.raises(meshpool.OutOfRange, match="5000"):
        client.get_into("big", buf)
    assert buf == bytearray(100)  # nothing written


def test_bad_keys_and_values_raise_invalid_argument(client):
    with pytest.raises(meshpool.InvalidArgument, match="str or bytes"):
        client.put(42, b"v")
    with pytest.raises(meshpool.InvalidArgument):
        client.put("k", 3.5)
    with pytest.raises(meshpool.InvalidArgument, match="4096"):
        client.put("k" * 5000, b"v")
    with pytest.raises(meshpool.InvalidArgument, match="empty key"):
        client.get("")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        client.get_into("k", b"read-only bytes")
    with pytest.raises(meshpool.InvalidArgument, match="one buffer per key"):
        client.batch_put_from(["a", "b"], [b"1"])
    with pytest.raises(meshpool.InvalidArgument, match="sequence of keys"):
        client.batch_exists("abc")
    # The client still works.
    client.put("after-bad-input", b"ok")
    assert client.get("after-bad-input") == b"ok"


def test_busy_poll_out_of_bounds_is_invalid_argument_naming_it(cluster):
    with pytest.raises(meshpool.InvalidArgument, match="busy_poll"):
        cluster.client(busy_poll=1.0)
    with pytest.raises(meshpool.InvalidArgument, match="busy_poll"):
        cluster.client(busy_poll=-1e-6)
    with cluster.client(busy_poll=0.001) as c:
        c.put("polled", b"1")
        assert c.get("polled") == b"1"


def test_closed_client_raises_failed_precondition(cluster):
    c = cluster.client()
    c.put("closing", b"1")
    c.close()
    c.close()  # idempotent
    assert c.closed
    with pytest.raises(meshpool.FailedPrecondition, match="closed"):
        c.get("closing")
    with pytest.raises(meshpool.FailedPrecondition):
        c.batch_put_from_async(["x"], [b"1"])


def test_context_manager_closes(cluster):
    with cluster.client() as c:
        c.put("ctx", b"1")
    assert c.closed


def test_coordinator_from_environment(cluster, monkeypatch):
    monkeypatch.setenv("MESHPOOL_COORDINATOR", cluster.address)
    with meshpool.Client() as c:
        c.put("env", b"1")
    monkeypatch.delenv("MESHPOOL_COORDINATOR")
    with pytest.raises(meshpool.InvalidArgument, match="MESHPOOL_COORDINATOR"):
        meshpool.Client()


def test_unreachable_coordinator_is_unavailable():
    with pytest.raises(meshpool.Unavailable):
        meshpool.Client("127.0.0.1:1", connect_timeout=0.5)


def test_batch_calls_return_one_result_per_key(client):
    keys = [f"batch-{i}" for i in range(20)]
    values = [os.urandom(1000 + i) for i in range(20)]
    assert client.batch_put_from(keys, values) == [None] * 20
    outs = [bytearray(2000) for _ in keys]
    got = client.batch_get_into(keys + ["batch-missing"], outs + [bytearray(10)])
    assert got[:20] == [len(v) for v in values]
    assert isinstance(got[20], meshpool.NotFound)
    for o, v in zip(outs, values):
        assert bytes(o[: len(v)]) == v
    assert client.batch_exists(["batch-0", "batch-missing"]) == [True, False]


def test_threads_share_one_client(client):
    errors = []

    def work(t):
        try:
            for i in range(50):
                key = f"thread-{t}-{i}"
                value = f"{t}:{i}".encode() * 100
                client.put(key, value)
                if client.get(key) != value:
                    errors.append(key)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_status_lists_the_nodes(client):
    status = client.status()
    assert {n.node_id for n in status.nodes} == {"node-1", "node-2"}
    assert all(n.alive for n in status.nodes)
    assert status.epoch >= 1


def test_gil_is_released_while_a_call_waits():
    # A "coordinator" that accepts TCP connections and never answers: the
    # client's connect waits out its timeout. Another Python thread must run
    # meanwhile.
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    start = time.monotonic()
    try:
        with pytest.raises((meshpool.Unavailable, meshpool.DeadlineExceeded)):
            meshpool.Client(f"127.0.0.1:{port}", connect_timeout=1.0)
    finally:
        waited = time.monotonic() - start
        before = ticks
        stop.set()
        counter.join()
        listener.close()
    assert waited >= 0.5
    assert before >= 50, f"only {before} ticks in {waited:.2f} s: the GIL was held"
