"""The coordinator's durable state (`meshpool coordinator --state-dir`):
SIGKILLed and restarted on the same address, it keeps every acknowledged
region and model while the nodes keep serving."""

from __future__ import annotations

import os
import random
import struct
import json
import threading
import time

import pytest

import meshpool
import meshpool.weights as mw

from conftest import Cluster, wait_for



@pytest.fixture
def durable(tmp_path):
    c = Cluster(nodes=2, coordinator_args=["--state-dir", str(tmp_path / "state")])
    yield c
    c.stop()


def tiny_model(path):
    header = {"w": {"dtype": "U8", "shape": [4096], "data_offsets": [0, 4096]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(range(256)) * 16)


def test_restarted_coordinator_keeps_regions_models_and_ids(durable, tmp_path):
    model = tmp_path / "m.safetensors"
    tiny_model(model)
    with durable.client(op_timeout=5.0) as c:
        region = c.create_region("keep/a", 1 << 20, stripe_bytes=64 << 10)
        data = os.urandom(300_000)
        region.write(1234, data)
        c.create_region("keep/b", 4096)
        c.rename_region("keep/b", "keep/c")
        c.create_region("keep/gone", 4096)
        c.delete_region("keep/gone")
        mw.load(c, str(model), model="keep-model", progress=False)
        ids_before = {d.name: d for d in c.list_regions("keep/")}
        c.put("kv-key", b"kv-value")

    durable.kill_coordinator()
    durable.start_coordinator()
    durable.wait_alive(2)

    with durable.client(op_timeout=5.0) as c:
        assert sorted(d.name for d in c.list_regions("keep/")) == ["keep/a", "keep/c"]
        assert c.open_region("keep/a").read(1234, len(data)) == data
        with mw.safe_open(c, "keep-model") as f:
            assert f.get_tensor("w").tobytes() == bytes(range(256)) * 16
        fresh = c.create_region("keep/new", 4096)
        assert fresh.name == "keep/new"
        # The node kept its KV objects through the coordinator's restart.
        assert c.get("kv-key") == b"kv-value"
    assert set(ids_before) == {"keep/a", "keep/c"}


def test_every_acknowledged_create_survives_a_kill_at_a_random_moment(durable):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    rng = random.Random(seed)
    acknowledged = []
    stop = threading.Event()

    def creator():
        with durable.client(op_timeout=2.0, connect_timeout=2.0) as c:
            i = 0
            while not stop.is_set():
                name = f"race/{i}"
                try:
                    c.create_region(name, 4096)
                    acknowledged.append(name)
                except meshpool.Error:
                    pass  # the coordinator is down: not acknowledged
                i += 1

    t = threading.Thread(target=creator)
    t.start()
    time.sleep(0.3 + rng.random())
    durable.kill_coordinator()
    killed_after = len(acknowledged)
    stop.set()
    t.join()
    durable.start_coordinator()
    durable.wait_alive(2)
    with durable.client() as c:
        names = {d.name for d in c.list_regions("race/")}
    assert killed_after > 0, "no create finished before the kill"
    missing = [n for n in acknowledged if n not in names]
    assert missing == [], f"acknowledged but lost: {missing[:5]} (seed {seed})"


def test_a_durable_coordinator_frees_region_memory_its_table_does_not_know(tmp_path):
    # Regions made under a coordinator without durable state are unknown to
    # the durable one that replaces it: their slabs are what a crashed create
    # leaves behind, and reconciliation frees them.
    c = Cluster(nodes=2)
    try:
        with c.client() as client:
            client.create_region("orphan", 4 << 20, stripe_bytes=1 << 20)
            assert wait_for(lambda: sum(n.slabs_region for n in client.status().nodes) > 0)
        c.kill_coordinator()
        c.coordinator_args = ["--state-dir", str(tmp_path / "state"),
                              "--reconcile-every", "300ms"]
        c.start_coordinator()
        c.wait_alive(2)
        with c.client() as client:
            assert client.list_regions("") == []
            assert wait_for(lambda: sum(n.slabs_region for n in client.status().nodes) == 0), \
                "the orphaned region's slabs were not freed"
            # A region made now is kept.
            client.create_region("kept", 4096)
            time.sleep(1.0)
            assert sum(n.slabs_region for n in client.status().nodes) > 0
    finally:
        c.stop()
