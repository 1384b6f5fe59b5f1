"""Fixtures: real local meshpool clusters (a coordinator and memory nodes as
separate `meshpool` processes on loopback), as users run them.

MESHPOOL_BIN names the `meshpool` binary (CTest sets it; default: the
build tree's). Every cluster is stopped at the end of its test or module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

import meshpool

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("MESHPOOL_BIN", str(ROOT / "build" / "tools" / "meshpool"))


class Cluster:
    """A coordinator and `nodes` memory nodes; kill_node(i) SIGKILLs one."""

    def __init__(self, nodes: int = 2, capacity: str = "64MiB",
                 node_args: Optional[List[str]] = None,
                 coordinator_args: Optional[List[str]] = None) -> None:
        if not os.access(BIN, os.X_OK):
            raise RuntimeError(f"no meshpool binary at {BIN}: build the project "
                               "first, or set MESHPOOL_BIN")
        self.procs: List[subprocess.Popen] = []
        self.coordinator_args = list(coordinator_args or [])
        self.capacity = capacity
        self.node_args = list(node_args or [])
        self.address = "127.0.0.1:0"
        self.start_coordinator()
        self.nodes: List[subprocess.Popen] = []
        for _ in range(nodes):
            self.add_node()
        self.wait_alive(nodes)

    def add_node(self) -> None:
        """Starts one more memory node, node-<n> (wait_alive to see it)."""
        node = subprocess.Popen(
            [BIN, "node", "--coordinator", self.address, "--capacity",
             self.capacity, "--node-id", f"node-{len(self.nodes) + 1}",
             "--transport", "tcp", "--no-huge-pages", *self.node_args],
            stdout=subprocess.DEVNULL, stderr=None)
        self.procs.append(node)
        self.nodes.append(node)

    def start_coordinator(self) -> None:
        """Starts the coordinator (again: on the same address)."""
        coordinator = subprocess.Popen(
            [BIN, "coordinator", "--listen", self.address, *self.coordinator_args],
            stdout=subprocess.PIPE, stderr=None, text=True)
        self.procs.append(coordinator)
        self.coordinator = coordinator
        line = coordinator.stdout.readline()
        if ":" not in line:
            self.stop()
            raise RuntimeError(f"the coordinator did not start: {line!r}")
        self.address = line.split()[-1]

    def kill_coordinator(self) -> None:
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.wait()

    def wait_alive(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with meshpool.Client(self.address) as c:
            while True:
                alive = sum(n.alive for n in c.status().nodes)
                if alive >= count:
                    return
                for p in self.nodes:
                    if p.poll() is not None:
                        raise RuntimeError(f"a memory node exited ({p.returncode}) "
                                           "before registering")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {alive} of {count} nodes registered")
                time.sleep(0.05)

    def client(self, **options) -> meshpool.Client:
        return meshpool.Client(self.address, **options)

    def kill_node(self, i: int) -> None:
        self.nodes[i].send_signal(signal.SIGKILL)
        self.nodes[i].wait()

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Two nodes over TCP and same-host shared memory, shared by a module's
    tests (each test uses its own keys)."""
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[meshpool.Client]:
    with cluster.client() as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[Cluster]:
    """A cluster for one test (one that kills a node, say)."""
    c = Cluster()
    yield c
    c.stop()


def wait_for(predicate, timeout: float = 20.0) -> bool:
    """Polls predicate() every 50 ms until it is true (True) or `timeout`
    seconds pass (False); a meshpool.Error from it counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except meshpool.Error:
            pass
        time.sleep(0.05)
    return False
