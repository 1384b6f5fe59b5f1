"""Re-replication with real processes on loopback: a memory node SIGKILLed
under continuous reads of a replicas=2 region. No read fails or returns wrong
bytes; the coordinator copies the lost stripe copies to the surviving nodes
(the region goes degraded, then healthy: the test prints how long); after
that another node can die and every byte is still there.

The data path is TCP (--no-shm): a same-host client keeps a dead node's
shared memory mapped, which would hide the failover this test is about.
"""

from __future__ import annotations

import os
import threading
import time

import meshpool
from conftest import Cluster

MIB = 1 << 20


def await_health(client: meshpool.Client, name: str, state: str,
                 timeout: float = 60.0) -> float:
    start = time.monotonic()
    seen = None
    while time.monotonic() - start < timeout:
        regions = client.list_regions(name)
        if regions:
            seen = regions[0].health
            if seen.state == state:
                return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"{name} never became {state}; last health: {seen}")


def test_killed_node_copies_come_back_while_reads_never_fail() -> None:
    cluster = Cluster(nodes=3, capacity="64MiB", node_args=["--no-shm"],
                      coordinator_args=["--heartbeat-interval", "200ms",
                                        "--dead-after", "1s",
                                        "--repair-every", "200ms"])
    try:
        size = 24 * MIB + 4321
        data = os.urandom(size)
        with cluster.client() as client:
            region = client.create_region("repair/model", size,
                                          stripe_bytes=MIB, replicas=2)
            region.write(0, data)
            assert sorted(client.list_regions("repair/")[0].nodes) == [
                "node-1", "node-2", "node-3"]
            assert client.list_regions("repair/")[0].health.state == "healthy"

            stop = threading.Event()
            reads = [0, 0]
            failures: list = []

            def reader(slot: int) -> None:
                with cluster.client() as own:
                    r = own.open_region("repair/model")
                    out = bytearray(size)
                    while not stop.is_set():
                        try:
                            r.read_into(0, out)
                            if out != data:
                                failures.append("wrong bytes")
                        except meshpool.Error as e:  # any failure counts
                            failures.append(repr(e))
                        reads[slot] += 1

            threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            time.sleep(0.3)
            killed_at = time.monotonic()
            cluster.kill_node(0)
            degraded = await_health(client, "repair/model", "degraded")
            healthy = await_health(client, "repair/model", "healthy")
            restored = time.monotonic() - killed_at
            time.sleep(0.5)  # keep reading on the repaired layout
            stop.set()
            for t in threads:
                t.join()
            print(f"\nnode-1 SIGKILLed under reads of a {size / MIB:.0f} MiB "
                  f"replicas=2 region: declared dead after {degraded:.2f} s, "
                  f"lost copies restored {healthy:.2f} s later "
                  f"({restored:.2f} s from the kill); {sum(reads)} whole-region "
                  f"reads, {len(failures)} failed")
            assert failures == [], failures[:5]
            assert sum(reads) > 0
            assert restored < 30, "the lost copies took too long to restore"
            after = client.list_regions("repair/")[0]
            assert "node-1" not in after.nodes

            # The new copies are real: node-2 may die too and the one
            # survivor holds every stripe — through the old handle (it
            # fetched the repaired layout) and a new client.
            cluster.kill_node(1)
            await_health(client, "repair/model", "degraded")
            assert region.read(0, size) == data
            with cluster.client() as other:
                assert other.open_region("repair/model").read(0, size) == data
            # With one live node, a second copy has nowhere to go.
            time.sleep(0.6)
            health = client.list_regions("repair/")[0].health
            assert health.state == "degraded"
            assert "node" in health.repair_error, health
    finally:
        cluster.stop()


def test_stat_and_weights_ls_show_region_health() -> None:
    import json
    import subprocess
    from conftest import BIN
    cluster = Cluster(nodes=2, capacity="32MiB",
                      coordinator_args=["--heartbeat-interval", "200ms",
                                        "--dead-after", "1s", "--no-repair"])
    try:
        with cluster.client() as client:
            client.create_region("stat/one", 4 * MIB, stripe_bytes=MIB)
            client.create_region("stat/two", 4 * MIB, stripe_bytes=MIB, replicas=2)

            def stat() -> dict:
                out = subprocess.run([BIN, "stat", "--json", "--coordinator",
                                      cluster.address], check=True,
                                     capture_output=True, text=True).stdout
                return {r["name"]: r for r in json.loads(out)["regions"]}

            regions = stat()
            assert regions["stat/one"]["health"] == "healthy"
            assert regions["stat/two"]["replicas"] == 2
            cluster.kill_node(0)
            await_health(client, "stat/two", "degraded")
            regions = stat()
            assert regions["stat/two"]["health"] == "degraded"
            assert regions["stat/two"]["stripes_degraded"] > 0
            # --no-repair: nothing is copied; a single-copy region lost its
            # stripes on the dead node.
            assert regions["stat/one"]["health"] == "lost"
            assert regions["stat/one"]["stripes_lost"] > 0
            table = subprocess.run([BIN, "stat", "--coordinator", cluster.address],
                                   check=True, capture_output=True, text=True).stdout
            assert "stripes lost a copy" in table, table
            assert "have no copy left" in table, table
    finally:
        cluster.stop()
