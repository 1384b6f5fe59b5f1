"""Regions, the KV-cache calls, a node killed mid-batch, and two engine
processes sharing blocks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import meshpool
from conftest import Cluster, wait_for


def test_region_create_write_read_atomics_rename_delete(client):
    r = client.create_region("py/region-a", 1 << 20, stripe_bytes=64 << 10)
    assert (r.name, r.size, r.stripe_bytes, r.replicas) == ("py/region-a", 1 << 20, 64 << 10, 1)
    data = os.urandom(200_000)
    r.write(1000, data)
    assert r.read(1000, len(data)) == data
    out = np.zeros(len(data), dtype=np.uint8)
    r.read_into(1000, out)
    assert out.tobytes() == data
    r.verify(1000, data)
    assert r.compare_and_swap(0, 0, 7) == 0
    assert r.compare_and_swap(0, 0, 9) == 7  # lost: returns what it found
    assert r.fetch_add(8, 5) == 0
    assert r.fetch_add(8, 5) == 5
    with pytest.raises(meshpool.OutOfRange):
        r.read(1 << 20, 1)
    with pytest.raises(meshpool.AlreadyExists):
        client.create_region("py/region-a", 4096)
    names = [d.name for d in client.list_regions("py/")]
    assert names == ["py/region-a"]
    client.rename_region("py/region-a", "py/region-b")
    again = client.open_region("py/region-b")
    assert again.read(1000, 10) == data[:10]
    client.delete_region("py/region-b")
    with pytest.raises(meshpool.NotFound):
        client.open_region("py/region-b")


def test_replicated_region_survives_and_atomics_refuse(client):
    r = client.create_region("py/replicated", 256 << 10, stripe_bytes=64 << 10, replicas=2)
    r.write(0, b"abc")
    assert r.read(0, 3) == b"abc"
    with pytest.raises(meshpool.FailedPrecondition):
        r.fetch_add(0, 1)
    client.delete_region("py/replicated")


def test_region_calls_after_close_raise(cluster):
    c = cluster.client()
    r = c.create_region("py/closing", 4096)
    c.close()
    with pytest.raises(meshpool.FailedPrecondition):
        r.read(0, 1)
    with cluster.client() as c2:
        c2.delete_region("py/closing")


def test_block_keys_chain_and_prefix_match_with_pins(client):
    tokens = list(range(1000, 1000 + 16 * 6 + 5))
    keys = meshpool.block_keys(tokens, model="llama-test", block_tokens=16)
    assert len(keys) == 6
    chain = meshpool.BlockKeyChain("llama-test", block_tokens=16)
    assert chain.append(tokens[:20]) == keys[:1]
    chain.append(np.array(tokens[20:], dtype=np.int32))
    assert chain.keys == keys and chain.pending_tokens == 5
    assert meshpool.block_keys(tokens, model="other", block_tokens=16) != keys
    with pytest.raises(meshpool.InvalidArgument):
        meshpool.BlockKeyChain("", block_tokens=16)

    blocks = [os.urandom(16 << 10) for _ in range(4)]
    assert client.batch_put_from(keys[:4], blocks) == [None] * 4
    assert client.prefix_match(keys) == 4
    assert client.prefix_match([keys[0], "absent", keys[2]]) == 1
    assert client.prefix_match(keys, pin_ttl=meshpool.HARD_PIN) == 4
    assert client.unpin(keys[:4]) == [None] * 4
    assert client.pin(keys[:2], ttl=30) == [None, None]
    results = client.pin(keys[4:5])
    assert isinstance(results[0], meshpool.NotFound)
    assert client.unpin(keys[:2]) == [None, None]
    with pytest.raises(meshpool.InvalidArgument, match="ttl"):
        client.pin(keys[:1], ttl=-1)
    stats = client.kv_statistics()
    assert stats.total.puts >= 4
    assert stats.total.pins >= 6
    assert set(stats.per_node) <= {"node-1", "node-2"}


def test_node_killed_mid_batch_gives_per_key_errors_and_no_wrong_bytes():
    # Over TCP only: a same-host client keeps a dead node's shared memory
    # mapped and may still (correctly) read its keys until the map changes.
    # A short failure detector, so the map changes soon after the kill.
    fresh_cluster = Cluster(node_args=["--no-shm"],
                            coordinator_args=["--dead-after", "1s",
                                              "--heartbeat-interval", "200ms"])
    try:
        _killed_mid_batch(fresh_cluster)
    finally:
        fresh_cluster.stop()


def _killed_mid_batch(fresh_cluster):
    with fresh_cluster.client(op_timeout=2.0) as c:
        n, size = 64, 32 << 10
        keys = [f"kill-{i}" for i in range(n)]
        values = [os.urandom(size) for _ in range(n)]
        assert c.batch_put_from(keys, values) == [None] * n
        outs = [bytearray(size) for _ in range(n)]
        future = c.batch_get_into_async(keys, outs)
        fresh_cluster.kill_node(0)
        results = future.result(timeout=60)
        for _ in range(3):  # and after the kill, synchronously
            results2 = c.batch_get_into(keys, [bytearray(size) for _ in range(n)])
        for r, r2 in zip(results, results2):
            assert isinstance(r, (int, meshpool.Error))
            assert isinstance(r2, (int, meshpool.Error))
        for i, r in enumerate(results):
            if isinstance(r, int):
                assert bytes(outs[i]) == values[i], f"wrong bytes for {keys[i]}"
        failed = [r for r in results2 if isinstance(r, meshpool.Error)]
        assert failed, "a dead node's keys should fail"
        assert all(isinstance(r, (meshpool.Unavailable, meshpool.NotFound))
                   for r in failed), failed
        # Once the map says the node died, its keys live on the survivor,
        # which serves them. (Before, a key whose home is the dead node
        # fails Unavailable: "retry once the cluster map updates".)
        assert wait_for(lambda: sum(n.alive for n in c.status().nodes) == 1)
        c.put("after-kill", b"alive")
        assert c.get("after-kill") == b"alive"


ENGINE = textwrap.dedent("""
    import sys, meshpool
    address, role = sys.argv[1], sys.argv[2]
    keys = meshpool.block_keys(list(range(64)), model="shared", block_tokens=16)
    with meshpool.Client(address) as c:
        if role == "writer":
            assert c.batch_put_from(keys, [bytes([i]) * 4096 for i in range(4)]) == [None] * 4
        else:
            assert c.prefix_match(keys) == 4
            outs = [bytearray(4096) for _ in keys]
            assert c.batch_get_into(keys, outs) == [4096] * 4
            assert [bytes(o) for o in outs] == [bytes([i]) * 4096 for i in range(4)]
    print("ok", role)
""")


def test_two_engine_processes_share_blocks(cluster):
    env = dict(os.environ)
    for role in ("writer", "reader"):
        done = subprocess.run([sys.executable, "-c", ENGINE, cluster.address, role],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"ok {role}"
