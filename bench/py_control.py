#!/usr/bin/python3
"""bench/py_control.py: control-plane operations per second with the
coordinator's state in memory, in a state directory (--state-dir) and in
etcd (--etcd), side by side in one run.

    bench/py_control.py [--build DIR] [--seconds 5] [--repeat 3]
                        [--json FILE] [--smoke]

For each state it starts a local cluster (the build's `meshpool`: one
coordinator, 3 memory nodes over TCP; for etcd, one etcd member on
loopback first) and, from one client, creates and deletes 256 KiB regions
(one stripe, one copy) back to back for --seconds, timing creates and
deletes apart. A create is a stats round and an allocation round on the
nodes plus the state's writes (a new id, the region); a delete is the
state's write plus a free on the node. Prints medians of --repeat rounds
and each state's ratio to memory. --smoke: 1 s, one round; CI runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ETCD = "/usr/bin/etcd"
# One stripe in one slab: nodes have 1,024 slabs of 256 KiB each, enough
# for the creates of one reclamation grace (a deleted region's slab is
# reused only after it).
REGION_BYTES = 256 << 10


def free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_cluster(binary: Path, state: str, tmp: Path, procs: list) -> str:
    args = [str(binary), "coordinator", "--listen", "127.0.0.1:0"]
    if state == "file":
        args += ["--state-dir", str(tmp / "state")]
    elif state == "etcd":
        client, peer = free_ports(2)
        url, purl = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        procs.append(subprocess.Popen(
            [ETCD, "--name", "b1", "--data-dir", str(tmp / "etcd"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"b1={purl}", "--logger", "zap", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        args += ["--etcd", f"127.0.0.1:{client}"]
    coordinator = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
    procs.append(coordinator)
    address = coordinator.stdout.readline().split()[-1]
    for i in range(3):
        procs.append(subprocess.Popen(
            [str(binary), "node", "--coordinator", address, "--capacity", "256MiB",
             "--slab-size", "256KiB",
             "--node-id", f"c-{i + 1}", "--transport", "tcp", "--no-huge-pages", "--no-shm"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address


def stop(procs: list) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def measure(meshpool, address: str, seconds: float) -> tuple:
    """(creates/s, deletes/s) over `seconds` of create-delete pairs."""
    with meshpool.Client(address) as client:
        deadline = time.monotonic() + 30
        while sum(n.alive for n in client.status().nodes) < 3:
            if time.monotonic() > deadline:
                sys.exit("py_control: the nodes did not register")
            time.sleep(0.05)
        create_s = delete_s = 0.0
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            name = f"bench/ctl-{n}"
            t0 = time.perf_counter()
            client.create_region(name, REGION_BYTES, stripe_bytes=REGION_BYTES)
            t1 = time.perf_counter()
            client.delete_region(name)
            t2 = time.perf_counter()
            create_s += t1 - t0
            delete_s += t2 - t1
            n += 1
        return n / create_s, n / delete_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.seconds, a.repeat = 1, 1
    if not os.access(ETCD, os.X_OK):
        sys.exit(f"py_control: {ETCD} is missing: install etcd-server (tools/setup.sh does)")
    build = Path(a.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import meshpool

    states = ["memory", "file", "etcd"]
    runs: dict = {s: {"create": [], "delete": []} for s in states}
    for rnd in range(a.repeat):
        # Alternate the order, so no state always runs first.
        for state in (states if rnd % 2 == 0 else list(reversed(states))):
            procs: list = []
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    address = start_cluster(build / "tools" / "meshpool", state, Path(tmp), procs)
                    creates, deletes = measure(meshpool, address, a.seconds)
                finally:
                    stop(procs)
            runs[state]["create"].append(creates)
            runs[state]["delete"].append(deletes)
    med = {s: {op: sorted(v)[len(v) // 2] for op, v in ops.items()} for s, ops in runs.items()}
    print(f"py_control: 256 KiB regions created and deleted back to back from one client, "
          f"3 nodes over tcp, {a.seconds:g} s per round, median of {a.repeat}")
    for s in states:
        print(f"  {s:7s} create {med[s]['create']:8.1f}/s ({med[s]['create'] / med['memory']['create']:.2f}x)"
              f"   delete {med[s]['delete']:8.1f}/s ({med[s]['delete'] / med['memory']['delete']:.2f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, "runs": runs, "median": med},
                                           indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
