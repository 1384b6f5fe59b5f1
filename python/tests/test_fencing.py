"""A memory node cut off from the coordinator but not from its clients, with
real processes on loopback. The node reaches the coordinator only through a
TCP proxy this test controls; clients reach both directly. When the proxy is
cut, the coordinator declares the node dead and clients move on (its keys
read as misses and are written again elsewhere); when the proxy comes back,
the node learns it was declared dead, stops serving and exits, and no
client ever reads its stale values.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from typing import List, Optional

import meshpool
from conftest import BIN, Cluster


class Proxy:
    """Forwards 127.0.0.1:<port> to `target`; cut() drops the listener and
    every connection, heal() listens on the same port again."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.port = 0
        self.listener: Optional[socket.socket] = None
        self.conns: List[socket.socket] = []
        self.lock = threading.Lock()
        self.heal()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def heal(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.port = s.getsockname()[1]
        self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            if self.listener is not None:
                # shutdown() wakes the thread blocked in accept(); close()
                # alone would leave it accepting (Linux).
                try:
                    self.listener.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.listener.close()
                self.listener = None
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns = []

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_node_cut_off_from_the_coordinator_is_fenced_and_never_serves_stale() -> None:
    # node-1 talks to the coordinator directly; node-2 is started below,
    # through the proxy.
    cluster = Cluster(nodes=1, capacity="64MiB", node_args=["--no-shm"],
                      coordinator_args=["--heartbeat-interval", "200ms",
                                        "--dead-after", "1s"])
    proxy = Proxy(cluster.address)
    node2 = subprocess.Popen(
        [BIN, "node", "--coordinator", proxy.address, "--capacity", "64MiB",
         "--node-id", "node-2", "--transport", "tcp", "--no-huge-pages", "--no-shm"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cluster.procs.append(node2)
    try:
        cluster.wait_alive(2)
        keys = [f"fence-{i}" for i in range(64)]
        with cluster.client() as c:
            for k in keys:
                c.put(k, b"v1:" + k.encode())

            proxy.cut()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if not [n for n in c.status().nodes if n.node_id == "node-2"][0].alive:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("node-2 was never declared dead")
            assert node2.poll() is None, "node-2 should still run, unaware"

            # Clients moved on: node-2's keys are misses now, and get new
            # values on node-1.
            missing = []
            for k in keys:
                try:
                    assert c.get(k) == b"v1:" + k.encode()
                except meshpool.NotFound:
                    missing.append(k)
            # (64 keys over 2 nodes: some were on node-2.)
            assert missing, "node-2's keys should read as misses"
            for k in keys:
                c.put(k, b"v2:" + k.encode())

            # The partition heals: node-2's next heartbeat learns it was
            # declared dead; it stops serving and exits.
            proxy.heal()
            try:
                code = node2.wait(timeout=20)
            except subprocess.TimeoutExpired:
                raise AssertionError("node-2 kept running after the partition healed")
            assert code == 1
            err = node2.stderr.read()
            assert "declared this node dead" in err, err

            # Every read, from this client and a new one, is the new value.
            with cluster.client() as fresh:
                for k in keys:
                    assert c.get(k) == b"v2:" + k.encode(), k
                    assert fresh.get(k) == b"v2:" + k.encode(), k
    finally:
        proxy.cut()
        cluster.stop()
