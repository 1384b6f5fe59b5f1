#!/usr/bin/python3
"""bench/py_repair.py: re-replication after a node dies, beside a raw region
WRITE of the same bytes, in one run.

    bench/py_repair.py [--build DIR] [--size 1GiB] [--nodes 4] [--repeat 3]
                       [--json FILE] [--smoke]

Starts a local cluster (the build's `meshpool`: a coordinator that repairs
every 100 ms and declares a node dead after 600 ms of silence, --nodes
nodes over TCP, no shared memory). Each round:
  raw      a client writes the bytes the repair will copy into a one-copy
           region (Region.write from memory: the data path's WRITE speed);
  repair   a replicas=2 region of --size is written, one node holding a
           share of it is SIGKILLed, and the coordinator copies the lost
           copies to the others: node-side digests of source and target,
           READ from a survivor into the coordinator, WRITE to the new
           home, digests again. Its time is what the coordinator logs
           ("repaired ... in T"); `death to healthy` is from the SIGKILL
           until ListRegions says healthy (detection included).
The killed node is restarted (empty) before the next round. Prints GB/s
(medians), the ratio repair/raw, and the death-to-healthy times. --smoke:
16 MiB, one round; CI runs it. Exit status 1 on a wrong byte or a region
that never heals.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
REPAIRED = re.compile(r"region '([^']+)': repaired \(layout version \d+\) in (\S+)")
COPYING = re.compile(r"region '([^']+)': copying (\d+) lost stripe copies")


def parse_size(text: str) -> int:
    for unit, mult in SIZES.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * mult
    return int(text)


def parse_duration(text: str) -> float:
    """absl::FormatDuration output ("1.5s", "462.8ms", "1m2.5s") -> seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(h|ms|us|ns|m|s)", text):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3,
                                 "us": 1e-6, "ns": 1e-9}[unit]
    return total


class Cluster:
    def __init__(self, binary: Path, nodes: int, capacity: int) -> None:
        self.binary, self.capacity = binary, capacity
        self.coordinator = subprocess.Popen(
            [str(binary), "coordinator", "--listen", "127.0.0.1:0",
             "--heartbeat-interval", "100ms", "--dead-after", "600ms",
             "--repair-every", "100ms"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.address = self.coordinator.stdout.readline().split()[-1]
        # From the coordinator's log, per region: repair seconds, copies.
        self.repairs: dict = {}
        self.copies: dict = {}
        self.log_lock = threading.Lock()
        threading.Thread(target=self._read_log, daemon=True).start()
        self.nodes = [self.start_node(i) for i in range(nodes)]

    def _read_log(self) -> None:
        for line in self.coordinator.stderr:
            m = REPAIRED.search(line)
            c = COPYING.search(line)
            with self.log_lock:
                if m:
                    self.repairs[m.group(1)] = parse_duration(m.group(2))
                if c:
                    self.copies[c.group(1)] = int(c.group(2))

    def start_node(self, i: int) -> subprocess.Popen:
        return subprocess.Popen(
            [str(self.binary), "node", "--coordinator", self.address,
             "--capacity", f"{self.capacity >> 20}MiB", "--node-id",
             f"r-{i + 1}", "--transport", "tcp", "--no-shm", "--no-huge-pages"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        for p in [*self.nodes, self.coordinator]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*self.nodes, self.coordinator]:
            p.wait()


def await_alive(client, count: int) -> None:
    deadline = time.monotonic() + 30
    while sum(n.alive for n in client.status().nodes) < count:
        if time.monotonic() > deadline:
            sys.exit("py_repair: the nodes did not register")
        time.sleep(0.05)


def await_health(client, name: str, state: str, timeout: float = 300) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        regions = client.list_regions(name)
        if regions and regions[0].health.state == state:
            return time.monotonic()
        time.sleep(0.01)
    sys.exit(f"py_repair: {name} never became {state}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.size, a.repeat = "16MiB", 1
    size = parse_size(a.size)
    if a.nodes < 3:
        sys.exit("py_repair: --nodes must be at least 3 (2 copies + a new home)")
    build = Path(a.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import meshpool

    # Each node: its share of both copies, the repair's new copies and the
    # raw region, and again as much for the round before, whose deleted
    # regions' slabs are reclaimed only after a grace.
    capacity = max(64 << 20, 6 * size // a.nodes + (16 << 20))
    cluster = Cluster(build / "tools" / "meshpool", a.nodes, capacity)
    runs: dict = {"raw_gb_s": [], "repair_gb_s": [], "death_to_healthy_s": [],
                  "repair_s": [], "bytes_copied": []}
    try:
        with meshpool.Client(cluster.address) as client:
            await_alive(client, a.nodes)
            data = os.urandom(size)
            for rnd in range(a.repeat):
                name = f"bench/repair-{rnd}"
                region = client.create_region(name, size, replicas=2)
                region.write(0, data)
                victim = rnd % a.nodes
                killed = time.monotonic()
                cluster.nodes[victim].send_signal(signal.SIGKILL)
                cluster.nodes[victim].wait()
                await_health(client, name, "degraded")
                healed = await_health(client, name, "healthy")
                deadline = time.monotonic() + 10
                while name not in cluster.repairs and time.monotonic() < deadline:
                    time.sleep(0.01)
                with cluster.log_lock:
                    repair_s = cluster.repairs.get(name)
                if repair_s is None:
                    sys.exit("py_repair: the coordinator never logged the repair")
                with cluster.log_lock:
                    copies = cluster.copies[name]
                # Stripe copies of the region's stripe size (the last
                # stripe may be shorter: a negligible overcount).
                copied = min(copies * region.stripe_bytes, 2 * size)
                if region.read(0, size) != data:
                    sys.exit(f"py_repair: wrong bytes in {name} after the repair")
                # Raw WRITE of as many bytes, in the same cluster state.
                raw = client.create_region(f"bench/raw-{rnd}", copied)
                chunk = memoryview(data)[:copied]  # no copy
                t0 = time.perf_counter()
                raw.write(0, chunk)
                raw_s = time.perf_counter() - t0
                client.delete_region(f"bench/raw-{rnd}")
                client.delete_region(name)
                runs["raw_gb_s"].append(copied / raw_s / 1e9)
                runs["repair_gb_s"].append(copied / repair_s / 1e9)
                runs["repair_s"].append(repair_s)
                runs["death_to_healthy_s"].append(healed - killed)
                runs["bytes_copied"].append(copied)
                cluster.nodes[victim] = cluster.start_node(victim)
                await_alive(client, a.nodes)
    finally:
        cluster.stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    ratio = med["repair_gb_s"] / med["raw_gb_s"]
    print(f"py_repair: {size / 2**20:.0f} MiB replicas=2 region on {a.nodes} nodes "
          f"over tcp, one node SIGKILLed per round, median of {a.repeat}")
    print(f"  raw WRITE {med['raw_gb_s']:.3f} GB/s   repair {med['repair_gb_s']:.3f} GB/s"
          f"   ratio {ratio:.2f}   ({med['bytes_copied'] / 2**20:.0f} MiB copied "
          f"in {med['repair_s']:.2f} s)")
    print(f"  death to healthy {med['death_to_healthy_s']:.2f} s "
          f"(600 ms of it is --dead-after)")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, "runs": runs,
                                            "median": med, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
