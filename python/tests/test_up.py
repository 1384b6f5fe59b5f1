"""`meshpool up` as a user runs it: a node that dies is reported and the
cluster serves on (or, with --restart-nodes, the node comes back); a
coordinator that dies comes back from its state; with --coordinators 3, a
local etcd and three coordinators, killing the leader shows a failover."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

import meshpool
from conftest import BIN


def start_up(*extra):
    up = subprocess.Popen([BIN, "up", "--nodes", "2", "--port", "0", "--capacity", "64MiB",
                           "--transport", "tcp", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = []
    for _ in range(20):  # the nodes' own lines, then the banner
        line = up.stdout.readline()
        seen.append(line)
        m = re.search(r"meshpool cluster up: coordinator (\S+),", line)
        if m:
            return up, m.group(1)
    up.kill()
    pytest.fail(f"meshpool up printed {seen!r}")


def read_until(up, needle):
    """The first line of up's output containing `needle`."""
    for _ in range(50):
        line = up.stdout.readline()
        if needle in line or not line:
            return line
    return ""


def node_pid(address, node_id):
    out = subprocess.run(["pgrep", "-f", f"node --coordinator {address} .*--node-id {node_id}"],
                         capture_output=True, text=True).stdout.split()
    assert len(out) == 1, f"pgrep found {out}"
    return int(out[0])


def node_states(address):
    with meshpool.Client(address) as c:
        return {n.node_id: n.alive for n in c.status().nodes}


def node_address(address, node_id):
    with meshpool.Client(address) as c:
        return {n.node_id: (n.alive, n.transport_address) for n in c.status().nodes}[node_id]


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("restart", [False, True], ids=["serves-on", "restart-nodes"])
def test_up_survives_a_dead_node(restart):
    up, address = start_up(*(["--restart-nodes"] if restart else []))
    try:
        with meshpool.Client(address) as c:
            c.put("before", b"1")
        victim = node_pid(address, "node-2")
        _, old_transport = node_address(address, "node-2")
        os.kill(victim, signal.SIGKILL)
        line = read_until(up, f"(pid {victim})")
        assert "node-2" in line, line
        assert up.poll() is None, "meshpool up stopped with its node"
        if restart:
            assert "restarted as pid" in line, line
            assert wait_for(lambda: node_pid(address, "node-2") != victim)
            assert wait_for(lambda: node_address(address, "node-2")[0] and
                            node_address(address, "node-2")[1] != old_transport), \
                "the restarted node did not register"
        else:
            assert "serves on without it" in line, line
            assert wait_for(lambda: node_states(address).get("node-2") is False, 30), \
                "the dead node was never declared dead"
            assert node_states(address)["node-1"] is True
        with meshpool.Client(address) as c:  # the cluster still serves
            c.put("after", b"2")
            assert c.get("after") == b"2"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=30)


def test_up_restarts_a_dead_coordinator_from_its_state():
    up, address = start_up()
    state_dir = None
    try:
        line = read_until(up, "coordinator state in ")
        m = re.search(r"coordinator state in (\S+), removed at exit", line)
        assert m, line
        state_dir = m.group(1)
        assert os.path.isdir(state_dir)
        with meshpool.Client(address) as c:
            c.put("kept", b"value")
            c.create_region("up/kept", 1 << 20, stripe_bytes=64 << 10, replicas=2)
        out = subprocess.run(["pgrep", "-f", f"coordinator --listen .*--state-dir {state_dir}"],
                             capture_output=True, text=True).stdout.split()
        assert len(out) == 1, f"pgrep found {out}"
        os.kill(int(out[0]), signal.SIGKILL)
        line = read_until(up, "restarted from its state")
        assert re.search(r"the coordinator on \S+ ended \(signal 9\)", line), line
        assert up.poll() is None, "meshpool up stopped with its coordinator"

        def served():
            try:
                with meshpool.Client(address) as c:
                    return (c.get("kept") == b"value" and
                            [r.name for r in c.list_regions("up/")] == ["up/kept"] and
                            all(n.alive for n in c.status().nodes))
            except meshpool.Error:
                return False
        assert wait_for(served, 30), "the restarted coordinator lost its state"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=30)
    assert state_dir and not os.path.exists(state_dir), "the state directory was left behind"


def coordinator_pids(up_pid):
    """The `meshpool coordinator` children of `meshpool up`, oldest first."""
    out = subprocess.run(["pgrep", "-P", str(up_pid), "-f", "coordinator --listen"],
                         capture_output=True, text=True).stdout.split()
    return sorted(int(p) for p in out)


def test_up_with_three_coordinators_fails_over_when_the_leader_dies():
    if not os.access("/usr/bin/etcd", os.X_OK):
        pytest.fail("/usr/bin/etcd is missing: install etcd-server (tools/setup.sh does)")
    up, address = start_up("--coordinators", "3")
    try:
        assert len(address.split(",")) == 3, address
        line = read_until(up, "coordinators on the etcd at")
        assert "3 coordinators on the etcd at 127.0.0.1:" in line, line
        data = os.urandom(1 << 20)
        with meshpool.Client(address) as c:
            c.put("kept", b"value")
            c.create_region("up/r", 1 << 20, stripe_bytes=64 << 10, replicas=2).write(0, data)
        pids = coordinator_pids(up.pid)
        assert len(pids) == 3, pids
        # The first started leads (the others found it leading).
        os.kill(pids[0], signal.SIGKILL)
        killed = time.monotonic()

        def created():
            try:
                with meshpool.Client(address) as c:
                    c.create_region("up/after", 1 << 20)
                return True
            except meshpool.Error:
                return False
        assert wait_for(created, 10), "no coordinator took over"
        print(f"\nleader killed: the control plane answered after "
              f"{time.monotonic() - killed:.2f} s")
        line = read_until(up, "restarted on etcd")
        assert re.search(r"the coordinator on \S+ ended \(signal 9\)", line), line
        assert up.poll() is None, "meshpool up stopped with its coordinator"
        assert len(coordinator_pids(up.pid)) == 3, "the dead coordinator was not started again"
        with meshpool.Client(address) as c:
            assert c.get("kept") == b"value"
            assert c.open_region("up/r").read(0, len(data)) == data
            assert sorted(r.name for r in c.list_regions("up/")) == ["up/after", "up/r"]
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
    leftover = subprocess.run(["pgrep", "-P", str(up.pid)], capture_output=True,
                              text=True).stdout.split()
    assert leftover == [], f"children of meshpool up outlived it: {leftover}"
