"""The durable coordinator (`meshpool coordinator --state-dir`) under chaos:
SIGKILLed at random moments, several rounds, while several clients create,
rename, delete and write regions and load and remove models. Restarted from
its state directory each time, it must keep every acknowledged change, show
no half-made region, and leak no slab (reconciliation frees the memory of
creates and deletes the kill cut short).

Each client thread keeps a model of what it was told: an operation that
returned is acknowledged; one that raised meshpool.Error is uncertain (it
may or may not have happened), so both outcomes stay allowed. Threads only
rename, delete and write their own regions (names never reused), so every
thread's expected state is well defined whatever the interleaving.

The seed is printed (MESHPOOL_CHAOS_SEED=N replays the random choices; the
threads' interleaving and the kill's exact moment still vary from run to run).
"""

from __future__ import annotations

import json
import os
import random
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import numpy as np
import pytest

import meshpool
import meshpool.weights as mw

from conftest import Cluster

# Small slabs, so that many regions fit and each stripe of a region made with
# stripe_bytes == SLAB (the default when the slab is below 4 MiB, or given
# explicitly) is exactly one slab: the table then implies each region's slab
# count exactly, whatever the placement (see check_no_slab_leak).
SLAB = 64 << 10
NODES = 3
THREADS = 4
# Kill rounds: at least MIN_ROUNDS, and on until the state log has been
# compacted into a snapshot at least once (every 4096 changes), so that
# restarts from a snapshot and its log are covered too; MAX_ROUNDS at most.
MIN_ROUNDS = 3
MAX_ROUNDS = 8
MAX_LIVE_REGIONS = 10  # per thread; past it a thread deletes
TENSOR = bytes(range(256)) * 16  # the tiny model's tensor "w"


def tiny_model(path: Path) -> None:
    """A safetensors file with one 4 KiB U8 tensor "w" (as in
    test_coordinator_state.py)."""
    header = {"w": {"dtype": "U8", "shape": [len(TENSOR)],
                    "data_offsets": [0, len(TENSOR)]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + TENSOR)


def stripes_of(size: int, stripe_bytes: int) -> int:
    return -(-size // stripe_bytes)


@dataclass
class RegionModel:
    """What a thread knows of one region: its shape and the bytes it should
    hold where `known` is 1 (zeros from the create, then acknowledged
    writes; a write that raised makes its range unknown)."""

    size: int
    stripe_bytes: int
    replicas: int
    data: bytearray = field(default_factory=bytearray)
    known: bytearray = field(default_factory=bytearray)

    @staticmethod
    def fresh(size: int, stripe_bytes: int, replicas: int) -> "RegionModel":
        return RegionModel(size, stripe_bytes, replicas, bytearray(size),
                           bytearray(b"\x01") * size)

    def mismatch(self, actual: bytes) -> Optional[str]:
        """None when `actual` (the whole region) agrees where known."""
        if len(actual) != self.size:
            return f"read {len(actual)} bytes of {self.size}"
        got = np.frombuffer(actual, dtype=np.uint8)
        want = np.frombuffer(bytes(self.data), dtype=np.uint8)
        mask = np.frombuffer(bytes(self.known), dtype=np.uint8).astype(bool)
        bad = np.flatnonzero((got != want) & mask)
        if bad.size == 0:
            return None
        at = int(bad[0])
        return (f"{bad.size} known byte(s) differ, first at offset {at}: "
                f"got {got[at]}, expected {want[at]}")


@dataclass
class Uncertain:
    """An operation that raised: `names` may hold `model`'s region. With
    `exactly_one` (a rename) the region is under exactly one of them;
    otherwise (create, delete) under at most one."""

    op: str
    names: Tuple[str, ...]
    model: RegionModel
    exactly_one: bool


class Worker:
    """One client thread: random operations on its own regions and models,
    and the record of what was acknowledged."""

    def __init__(self, index: int, address: str, seed: int, model_file: Path,
                 stop: threading.Event) -> None:
        self.index = index
        self.prefix = f"chaos{index}/"
        self.model_prefix = f"chaos{index}-m"
        self.address = address
        self.rng = random.Random(seed * 1000 + index)
        self.model_file = model_file
        self.stop = stop
        self.counter = 0
        self.confirmed: Dict[str, RegionModel] = {}
        self.handles: Dict[str, meshpool.Region] = {}
        self.gone: Set[str] = set()
        self.uncertain: List[Uncertain] = []
        self.models: Set[str] = set()            # loaded, acknowledged
        self.models_gone: Set[str] = set()       # removed, acknowledged
        self.models_maybe: Set[str] = set()      # load or removal raised
        self.staging_allowed: Set[str] = set()   # a load raised: may leave staging
        self.acked: Dict[str, int] = {}
        self.failed: Dict[str, int] = {}
        self.problems: List[str] = []            # wrong reads seen while running
        self.crash: Optional[BaseException] = None
        self.thread = threading.Thread(target=self.run, name=f"chaos-{index}")

    def new_name(self) -> str:
        self.counter += 1
        return f"{self.prefix}r{self.counter}"

    def ok(self, op: str) -> None:
        self.acked[op] = self.acked.get(op, 0) + 1

    def fail(self, op: str) -> None:
        self.failed[op] = self.failed.get(op, 0) + 1

    # ---- operations -------------------------------------------------------

    def create(self, c: meshpool.Client) -> None:
        name = self.new_name()
        if self.rng.random() < 0.5:
            size = self.rng.randint(1, SLAB)                 # one stripe
        else:
            size = self.rng.randint(SLAB + 1, 4 * SLAB)      # 2-4 stripes
        stripe_arg = self.rng.choice([0, SLAB])  # 0: the default, = SLAB here
        replicas = 2 if self.rng.random() < 0.3 else 1
        model = RegionModel.fresh(size, SLAB, replicas)
        try:
            region = c.create_region(name, size, stripe_bytes=stripe_arg,
                                     replicas=replicas)
        except meshpool.Error:
            self.uncertain.append(Uncertain("create", (name,), model, False))
            self.fail("create")
            return
        self.confirmed[name] = model
        self.handles[name] = region
        self.ok("create")

    def delete(self, c: meshpool.Client) -> None:
        name = self.rng.choice(sorted(self.confirmed))
        model = self.confirmed.pop(name)
        self.handles.pop(name, None)
        try:
            c.delete_region(name)
        except meshpool.Error:
            self.uncertain.append(Uncertain("delete", (name,), model, False))
            self.fail("delete")
            return
        self.gone.add(name)
        self.ok("delete")

    def rename(self, c: meshpool.Client) -> None:
        src = self.rng.choice(sorted(self.confirmed))
        dst = self.new_name()
        model = self.confirmed.pop(src)
        self.handles.pop(src, None)
        try:
            c.rename_region(src, dst)
        except meshpool.Error:
            self.uncertain.append(Uncertain("rename", (src, dst), model, True))
            self.fail("rename")
            return
        self.gone.add(src)
        self.confirmed[dst] = model
        self.ok("rename")

    def handle(self, c: meshpool.Client, name: str) -> meshpool.Region:
        region = self.handles.get(name)
        if region is None:
            region = c.open_region(name)
            self.handles[name] = region
        return region

    def write(self, c: meshpool.Client) -> None:
        name = self.rng.choice(sorted(self.confirmed))
        model = self.confirmed[name]
        offset = self.rng.randrange(model.size)
        length = self.rng.randint(1, min(4096, model.size - offset))
        data = self.rng.randbytes(length)
        try:
            region = self.handle(c, name)
        except meshpool.Error:
            self.fail("open")  # nothing changed
            return
        try:
            region.write(offset, data)
        except meshpool.Error:
            model.known[offset:offset + length] = bytes(length)
            self.fail("write")
            return
        model.data[offset:offset + length] = data
        model.known[offset:offset + length] = b"\x01" * length
        self.ok("write")

    def read(self, c: meshpool.Client) -> None:
        name = self.rng.choice(sorted(self.confirmed))
        model = self.confirmed[name]
        try:
            actual = self.handle(c, name).read(0, model.size)
        except meshpool.Error:
            self.fail("read")
            return
        wrong = model.mismatch(actual)
        if wrong is not None:
            self.problems.append(f"while running, region {name!r}: {wrong}")
        self.ok("read")

    def load(self, c: meshpool.Client) -> None:
        self.counter += 1
        model = f"{self.model_prefix}{self.counter}"
        try:
            mw.load(c, str(self.model_file), model=model, progress=False)
        except meshpool.Error:
            self.models_maybe.add(model)
            self.staging_allowed.add(model)
            self.fail("load")
            return
        self.models.add(model)
        self.ok("load")

    def remove_model(self, c: meshpool.Client) -> None:
        model = self.rng.choice(sorted(self.models))
        self.models.discard(model)
        try:
            mw.remove_model(c, model)
        except meshpool.Error:
            self.models_maybe.add(model)
            self.fail("remove_model")
            return
        self.models_gone.add(model)
        self.ok("remove_model")

    def step(self, c: meshpool.Client) -> None:
        live = len(self.confirmed)
        r = self.rng.random()
        if live == 0 or (r < 0.30 and live < MAX_LIVE_REGIONS):
            self.create(c)
        elif r < 0.45 or live >= MAX_LIVE_REGIONS:
            self.delete(c)
        elif r < 0.60:
            self.rename(c)
        elif r < 0.78:
            self.write(c)
        elif r < 0.86:
            self.read(c)
        elif r < 0.95 or not self.models:
            self.load(c)
        else:
            self.remove_model(c)

    def run(self) -> None:
        try:
            with meshpool.Client(self.address, op_timeout=2.0,
                                 connect_timeout=2.0) as c:
                while not self.stop.is_set():
                    failed_before = sum(self.failed.values())
                    self.step(c)
                    # Back off a little while the coordinator is down.
                    if sum(self.failed.values()) != failed_before:
                        time.sleep(0.05)
                self.handles.clear()
        except BaseException as e:  # reported by the test
            self.crash = e


@pytest.fixture
def chaos_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(nodes=NODES, node_args=["--slab-size", f"{SLAB // 1024}KiB"],
                coordinator_args=["--state-dir", str(tmp_path / "state"),
                                  "--reconcile-every", "300ms"])
    yield c
    c.stop()


def listing(c: meshpool.Client) -> Dict[str, object]:
    return {d.name: d for d in c.list_regions("")}


def state_generation(state_dir: Path) -> int:
    """The generation of the state log (state.log.<generation>; it goes up
    by one at each compaction into state.snapshot)."""
    logs = [int(p.name.rsplit(".", 1)[1]) for p in state_dir.glob("state.log.*")
            if p.name.rsplit(".", 1)[1].isdigit()]
    return max(logs, default=0)


def check_no_slab_leak(c: meshpool.Client, seed: int, timeout: float = 15.0) -> str:
    """Waits until the nodes' region slabs are what the table implies.

    ListRegions leaves out the extents' slab lists, and nothing else exposes
    how many stripe copies each node holds; but with stripe_bytes == slab
    bytes every stripe copy is one slab, so a region holds exactly
    stripes * replicas slabs (its total over nodes is exact). Per node, a
    one-stripe region puts exactly one slab on each node it lists (its
    copies are on distinct nodes); a multi-stripe one puts between 1 and
    `stripes` slabs on each node it lists (one copy of a stripe per node at
    most). So the total must match exactly, and each node lie in its bounds.
    """
    deadline = time.monotonic() + timeout
    while True:
        regions = c.list_regions("")
        expected_total = 0
        low: Dict[str, int] = {}
        high: Dict[str, int] = {}
        for d in regions:
            assert d.stripe_bytes == SLAB, (
                f"seed {seed}: region {d.name!r} has stripes of {d.stripe_bytes} "
                f"bytes, not the slab size {SLAB}: the slab check needs them equal")
            stripes = stripes_of(d.size, d.stripe_bytes)
            expected_total += stripes * d.replicas
            for node in d.nodes:
                low[node] = low.get(node, 0) + 1
                high[node] = high.get(node, 0) + stripes
        nodes = {n.node_id: n.slabs_region for n in c.status().nodes}
        total = sum(nodes.values())
        out_of_bounds = {n: (count, low.get(n, 0), high.get(n, 0))
                         for n, count in nodes.items()
                         if not low.get(n, 0) <= count <= high.get(n, 0)}
        if total == expected_total and not out_of_bounds:
            return (f"{len(regions)} regions, {total} region slabs "
                    f"{dict(sorted(nodes.items()))}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"seed {seed}: slab leak: the nodes hold {total} region slabs "
                f"{dict(sorted(nodes.items()))}, the table's {len(regions)} regions "
                f"imply {expected_total}; nodes outside their bounds "
                f"(count, low, high): {out_of_bounds}; still so after {timeout}s "
                f"of reconciliation")
        time.sleep(0.1)


def check_acknowledged_state(c: meshpool.Client, workers: List[Worker],
                             seed: int) -> Tuple[int, int]:
    """Checks every thread's acknowledged and uncertain changes against the
    table, reads every listed region and model whole; returns (regions,
    models) seen."""
    listed = listing(c)
    errors: List[str] = []
    accounted: Set[str] = set()

    def same_shape(name: str, model: RegionModel) -> None:
        d = listed[name]
        if (d.size, d.stripe_bytes, d.replicas) != (model.size, model.stripe_bytes,
                                                    model.replicas):
            errors.append(
                f"region {name!r} is (size, stripe_bytes, replicas) = "
                f"{(d.size, d.stripe_bytes, d.replicas)}, acknowledged as "
                f"{(model.size, model.stripe_bytes, model.replicas)}")

    def same_bytes(name: str, model: RegionModel) -> None:
        try:
            actual = c.open_region(name).read(0, model.size)
        except meshpool.Error as e:
            errors.append(f"region {name!r} is listed but cannot be read whole: {e!r}")
            return
        wrong = model.mismatch(actual)
        if wrong is not None:
            errors.append(f"region {name!r}: {wrong}")

    for w in workers:
        errors.extend(w.problems)
        for name, model in w.confirmed.items():
            accounted.add(name)
            if name not in listed:
                errors.append(f"region {name!r} (thread {w.index}) was acknowledged "
                              "as existing and is gone")
                continue
            same_shape(name, model)
            same_bytes(name, model)
        for name in w.gone:
            accounted.add(name)
            if name in listed:
                errors.append(f"region {name!r} (thread {w.index}) was acknowledged "
                              "as deleted or renamed away and is listed")
        for u in w.uncertain:
            accounted.update(u.names)
            present = [n for n in u.names if n in listed]
            if u.exactly_one and len(present) != 1:
                errors.append(f"an interrupted rename {u.names[0]!r} -> {u.names[1]!r} "
                              f"(thread {w.index}) left the region under {present}, "
                              "not exactly one of the two names")
            for name in present:
                same_shape(name, u.model)
                same_bytes(name, u.model)

    # Models: the model region "weights/<model>" and staging regions
    # "weights-loading/<model>#<id>" of loads that raised.
    models = sorted(name[len("weights/"):] for name in listed
                    if name.startswith("weights/"))
    try:
        named = [m.name for m in mw.list_models(c)]
        if named != models:
            errors.append(f"list_models gives {named}, the model regions are {models}")
    except meshpool.Error as e:
        errors.append(f"list_models fails: {e!r}")
    for w in workers:
        for m in w.models:
            if m not in models:
                errors.append(f"model {m!r} (thread {w.index}) was acknowledged as "
                              "loaded and is not listed")
        for m in w.models_gone:
            if m in models or f"weights/{m}" in listed:
                errors.append(f"model {m!r} (thread {w.index}) was acknowledged as "
                              "removed and is still there")
        known = w.models | w.models_gone | w.models_maybe
        for name in listed:
            if name.startswith("weights/"):
                model = name[len("weights/"):]
                if model.startswith(w.model_prefix):
                    accounted.add(name)
                    if model not in w.models and model not in w.models_maybe:
                        errors.append(f"model region {name!r} (thread {w.index}) "
                                      "is listed but its model is neither loaded (as "
                                      "acknowledged) nor uncertain")
            elif name.startswith("weights-loading/"):
                model = name[len("weights-loading/"):].split("#", 1)[0]
                if model.startswith(w.model_prefix):
                    accounted.add(name)
                    if model not in w.staging_allowed:
                        why = ("every load of that model was acknowledged"
                               if model in known else "no load of that model was made")
                        errors.append(f"staging region {name!r} (thread {w.index}) "
                                      f"is listed but {why}")
    for m in models:
        try:
            with mw.safe_open(c, m, verify=True) as f:
                got = f.get_tensor("w").tobytes()
            if got != TENSOR:
                errors.append(f"model {m!r}: tensor 'w' reads wrong bytes")
        except meshpool.Error as e:
            errors.append(f"model {m!r} is listed but cannot be read: {e!r}")

    # No half-made region: every listed region opens and reads whole (those
    # with a model were also compared above).
    for name, d in listed.items():
        if name not in accounted:
            errors.append(f"region {name!r} is listed and no thread made it "
                          "(not even uncertainly)")
        try:
            c.open_region(name).read(0, d.size)
        except meshpool.Error as e:
            errors.append(f"region {name!r} is listed but cannot be read whole: {e!r}")

    assert not errors, (f"seed {seed}: {len(errors)} problem(s):\n  "
                        + "\n  ".join(errors[:30]))
    return len(listed), len(models)


def test_coordinator_sigkilled_amid_region_and_weight_ops_keeps_acknowledged_state(
        chaos_cluster: Cluster, tmp_path: Path) -> None:
    seed = int(os.environ.get("MESHPOOL_CHAOS_SEED")
               or int.from_bytes(os.urandom(4), "little"))
    print(f"\nseed={seed} (MESHPOOL_CHAOS_SEED={seed} replays the choices)")
    rng = random.Random(seed)
    model_file = tmp_path / "tiny.safetensors"
    tiny_model(model_file)
    cluster = chaos_cluster
    state_dir = tmp_path / "state"
    started = time.monotonic()

    stop = threading.Event()
    workers = [Worker(i, cluster.address, seed, model_file, stop)
               for i in range(THREADS)]
    for w in workers:
        w.thread.start()
    try:
        for round_no in range(1, MAX_ROUNDS + 1):
            t0 = time.monotonic()
            time.sleep(0.4 + 1.2 * rng.random())       # clients run
            cluster.kill_coordinator()
            t_kill = time.monotonic()
            time.sleep(0.2 + 0.6 * rng.random())       # clients run into the outage
            cluster.start_coordinator()
            cluster.wait_alive(NODES)
            t_up = time.monotonic()
            generation = state_generation(state_dir)
            print(f"round {round_no}: killed after {t_kill - t0:.2f}s, down "
                  f"{t_up - t_kill:.2f}s, state generation {generation}")
            if round_no >= MIN_ROUNDS and generation >= 1:
                break
        time.sleep(0.5 + rng.random())                 # clients run on after the last
    finally:
        stop.set()
        for w in workers:
            w.thread.join(timeout=60)
    exited = {f"node-{i + 1}": p.returncode for i, p in enumerate(cluster.nodes)
              if p.poll() is not None}
    assert not exited, (f"seed {seed}: memory nodes exited during the chaos "
                        f"(exit status; negative: signal): {exited}")
    for w in workers:
        assert not w.thread.is_alive(), f"seed {seed}: client thread {w.index} hung"
        if w.crash is not None:
            raise AssertionError(f"seed {seed}: client thread {w.index} crashed: "
                                 f"{w.crash!r}") from w.crash
    acked: Dict[str, int] = {}
    failed: Dict[str, int] = {}
    for w in workers:
        for k, v in w.acked.items():
            acked[k] = acked.get(k, 0) + v
        for k, v in w.failed.items():
            failed[k] = failed.get(k, 0) + v
    print(f"acknowledged: {dict(sorted(acked.items()))}")
    print(f"raised (uncertain): {dict(sorted(failed.items()))}; "
          f"{sum(len(w.uncertain) for w in workers)} uncertain region changes, "
          f"{sum(len(w.models_maybe) for w in workers)} uncertain models")
    assert acked.get("create", 0) > 0 and acked.get("load", 0) > 0, \
        f"seed {seed}: too little was acknowledged to check anything: {acked}"

    with cluster.client(op_timeout=5.0) as c:
        regions, models = check_acknowledged_state(c, workers, seed)
        print(f"table after the last restart: {regions} regions, {models} models")
        slabs = check_no_slab_leak(c, seed)
        print(f"no slab leak: {slabs}")
        before = sorted((d.name, d.size, d.replicas, tuple(d.nodes))
                        for d in c.list_regions(""))

    # Quiet now: one more SIGKILL and restart must give back the same table.
    cluster.kill_coordinator()
    cluster.start_coordinator()
    cluster.wait_alive(NODES)
    with cluster.client(op_timeout=5.0) as c:
        after = sorted((d.name, d.size, d.replicas, tuple(d.nodes))
                       for d in c.list_regions(""))
        assert after == before, (
            f"seed {seed}: a restart with no change in flight changed the table: "
            f"lost {sorted(set(before) - set(after))[:5]}, "
            f"gained {sorted(set(after) - set(before))[:5]}")
        check_acknowledged_state(c, workers, seed)
        check_no_slab_leak(c, seed)
    print(f"total {time.monotonic() - started:.1f}s")
