"""Coordinator failover with real processes on loopback: three etcd members,
three coordinators sharing them (one leads, two stand by), three memory
nodes and a client given all three coordinator addresses. The leading
coordinator is SIGKILLed under client load: GETs, PUTs and region reads of
live nodes keep succeeding (zero errors on the data path), and the control
plane answers again within 5 s (the test prints how long). Then an etcd
member is killed and the control plane still works; the old leader, started
again, stands by. Last, the whole control plane (every etcd member and
every coordinator) is SIGKILLed at once: the data path keeps working, and
started again it has every region and node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import List

import pytest

import meshpool
from conftest import BIN

ETCD = "/usr/bin/etcd"


def free_ports(n: int) -> List[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Coordinator:
    """A `meshpool coordinator` process; `leading` is set once it prints
    that it listens as the leader (a standby prints "standing by" first)."""

    def __init__(self, port: int, etcd: str) -> None:
        self.port = port
        self.etcd = etcd
        self.start()

    def start(self) -> None:
        self.leading = threading.Event()
        self.led_at = 0.0
        self.proc = subprocess.Popen(
            [BIN, "coordinator", "--listen", f"127.0.0.1:{self.port}", "--etcd", self.etcd,
             "--heartbeat-interval", "200ms", "--repair-every", "200ms"],
            stdout=subprocess.PIPE, stderr=None, text=True)
        threading.Thread(target=self._watch, args=(self.proc, self.leading),
                         daemon=True).start()

    def _watch(self, proc: subprocess.Popen, leading: threading.Event) -> None:
        for line in proc.stdout:
            if "listening on" in line:
                self.led_at = time.monotonic()
                leading.set()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def test_leader_killed_under_load_then_an_etcd_member_then_everything(tmp_path) -> None:
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"{ETCD} is missing: install etcd-server (tools/setup.sh does)")
    procs: List[subprocess.Popen] = []
    coordinators: List[Coordinator] = []
    try:
        # Three etcd members.
        ports = free_ports(6)
        client_ports, peer_ports = ports[:3], ports[3:]
        cluster = ",".join(f"e{i}=http://127.0.0.1:{peer_ports[i]}" for i in range(3))

        def start_etcd(i: int) -> subprocess.Popen:
            url = f"http://127.0.0.1:{client_ports[i]}"
            peer = f"http://127.0.0.1:{peer_ports[i]}"
            # Started again on its data directory, a member rejoins (the
            # --initial-* flags only matter the first time).
            p = subprocess.Popen(
                [ETCD, "--name", f"e{i}", "--data-dir", str(tmp_path / f"e{i}"),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--logger", "zap", "--log-level", "error"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            return p

        etcds = [start_etcd(i) for i in range(3)]
        endpoints = ",".join(f"127.0.0.1:{p}" for p in client_ports)

        # Three coordinators: one leads.
        cports = free_ports(3)
        coordinators = [Coordinator(p, endpoints) for p in cports]
        deadline = time.monotonic() + 30
        while not any(c.leading.is_set() for c in coordinators):
            assert time.monotonic() < deadline, "no coordinator came to lead"
            time.sleep(0.05)
        time.sleep(0.5)
        leaders = [c for c in coordinators if c.leading.is_set()]
        assert len(leaders) == 1, "two coordinators lead at once"
        leader = leaders[0]
        addresses = ",".join(f"127.0.0.1:{p}" for p in cports)

        nodes = []
        for i in range(3):
            nodes.append(subprocess.Popen(
                [BIN, "node", "--coordinator", addresses, "--capacity", "64MiB",
                 "--node-id", f"node-{i + 1}", "--transport", "tcp", "--no-huge-pages",
                 "--no-shm"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs += nodes
        with meshpool.Client(addresses) as client:
            deadline = time.monotonic() + 30
            while sum(n.alive for n in client.status().nodes) < 3:
                assert time.monotonic() < deadline, "the nodes did not register"
                time.sleep(0.05)
            region = client.create_region("failover/r", 4 << 20, stripe_bytes=1 << 20,
                                          replicas=2)
            data = os.urandom(4 << 20)
            region.write(0, data)

            # Load on its own client: PUT, GET, region reads.
            stop = threading.Event()
            ops = [0]
            errors: list = []

            def load() -> None:
                with meshpool.Client(addresses) as c:
                    r = c.open_region("failover/r")
                    i = 0
                    while not stop.is_set():
                        try:
                            c.put(f"f-{i}", b"v" * 4096)
                            if c.get(f"f-{i}") != b"v" * 4096:
                                errors.append(f"wrong value for f-{i}")
                            if r.read(0, len(data)) != data:
                                errors.append("wrong region bytes")
                        except meshpool.Error as e:
                            errors.append(repr(e))
                        ops[0] += 1
                        i += 1

            worker = threading.Thread(target=load)
            worker.start()
            time.sleep(0.5)

            killed = time.monotonic()
            leader.kill()
            n = 0
            tried: List[str] = []
            while True:
                try:
                    client.create_region(f"failover/after-{n}", 1 << 20, stripe_bytes=1 << 20)
                    break
                except meshpool.Error as e:
                    n += 1
                    tried.append(f"{time.monotonic() - killed:.2f} s: {e!r}")
                    assert time.monotonic() - killed < 30, "no coordinator took over"
                    time.sleep(0.05)
            answered = time.monotonic() - killed
            time.sleep(1.0)  # the load keeps running on the new leader
            stop.set()
            worker.join()
            led = max(c.led_at for c in coordinators) - killed
            print(f"\nleader SIGKILLed: a standby led after {led:.2f} s, the control "
                  f"plane answered again after {answered:.2f} s; {ops[0]} data-path "
                  f"rounds, {len(errors)} errors; {len(tried)} control-plane attempts "
                  f"failed meanwhile, the last: {tried[-1:] or None}")
            assert errors == [], errors[:5]
            assert answered < 5.0, f"failover took {answered:.2f} s: {tried[-3:]}"
            new_leaders = [c for c in coordinators if c is not leader and c.leading.is_set()]
            assert len(new_leaders) == 1
            assert [r.name for r in client.list_regions("failover/r")] == ["failover/r"]
            assert all(n.alive for n in client.status().nodes), "a failover killed a node"

            # An etcd member dies: two of three still agree.
            etcds[0].send_signal(signal.SIGKILL)
            etcds[0].wait()
            deadline = time.monotonic() + 15
            while True:
                try:
                    client.create_region("failover/after-etcd", 1 << 20, stripe_bytes=1 << 20)
                    break
                except meshpool.Error as e:
                    assert time.monotonic() < deadline, \
                        f"the control plane stopped with one etcd member down: {e!r}"
                    time.sleep(0.1)
            assert client.get("f-0") == b"v" * 4096

            # The old leader, started again, stands by.
            leader.start()
            time.sleep(2.0)
            assert not leader.leading.is_set(), "two coordinators lead at once"
            assert leader.proc.poll() is None

            # The whole control plane dies at once: reads and writes of live
            # nodes carry on without it.
            for c in coordinators:
                if c.proc.poll() is None:
                    c.kill()
            for e in etcds:
                if e.poll() is None:
                    e.send_signal(signal.SIGKILL)
                    e.wait()
            for i in range(20):
                client.put(f"outage-{i}", b"o" * 1024)
                assert client.get(f"outage-{i}") == b"o" * 1024
            assert region.read(0, len(data)) == data

            # Started again, it has every region and every node.
            restarted = time.monotonic()
            etcds = [start_etcd(i) for i in range(3)]
            for c in coordinators:
                c.start()
            deadline = time.monotonic() + 30
            last = None
            while True:
                try:
                    names = [r.name for r in client.list_regions("failover/")]
                    last = f"{sum(n.alive for n in client.status().nodes)} nodes alive"
                    if last == "3 nodes alive":
                        break
                except meshpool.Error as e:
                    last = repr(e)
                assert time.monotonic() < deadline, \
                    f"the restarted control plane is not back: {last}"
                time.sleep(0.1)
            print(f"everything restarted: the control plane answered after "
                  f"{time.monotonic() - restarted:.2f} s")
            assert sum(c.leading.is_set() for c in coordinators) == 1
            assert "failover/r" in names and "failover/after-etcd" in names, names
            assert client.open_region("failover/r").read(0, len(data)) == data
            assert client.get("outage-0") == b"o" * 1024
            client.create_region("failover/after-restart", 1 << 20, stripe_bytes=1 << 20)
    finally:
        for c in coordinators:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*procs, *[c.proc for c in coordinators]]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp_path, ignore_errors=True)
