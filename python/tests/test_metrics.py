"""Metrics over HTTP with real processes on loopback: every node and the
coordinator serve Prometheus text on /metrics and a health check on
/healthz (--metrics-listen). Scraped during a workload, the node counters
only grow; once the workload's client has closed, they equal what
`meshpool stat --json` reports; the coordinator's page follows a node's
death and a region's health.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Dict, Tuple

import meshpool
from conftest import BIN, Cluster

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(url: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """name, sorted labels -> value; checks every line is well formed."""
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    typed = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("gauge", "counter"), line
            assert name not in typed, f"{name} typed twice"
            typed.add(name)
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"malformed sample line {line!r}"
        assert m.group(1) in typed, f"{m.group(1)} has no TYPE before it"
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def stat(address: str) -> dict:
    out = subprocess.run([BIN, "stat", "--json", "--coordinator", address],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def health(url: str) -> Tuple[int, str]:
    try:
        with urllib.request.urlopen(url.replace("/metrics", "/healthz"), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_match_stat_and_follow_the_cluster() -> None:
    cluster = Cluster(nodes=2, capacity="64MiB",
                      node_args=["--metrics-listen", "127.0.0.1:0"],
                      coordinator_args=["--metrics-listen", "127.0.0.1:0",
                                        "--heartbeat-interval", "200ms",
                                        "--dead-after", "1s"])
    try:
        line = cluster.coordinator.stdout.readline()
        assert line.startswith("meshpool coordinator metrics on "), line
        coordinator_url = line.split()[-1]
        nodes = {n["id"]: n["metrics"] for n in stat(cluster.address)["nodes"]}
        assert set(nodes) == {"node-1", "node-2"}
        assert all(u.startswith("http://127.0.0.1:") for u in nodes.values()), nodes
        for url in [coordinator_url, *nodes.values()]:
            assert health(url) == (200, "ok\n")
        # Made before the workload fills the pools with KV objects (a region
        # needs free whole slabs; on a slow machine the workload runs long).
        with cluster.client() as c:
            c.create_region("metrics/two", 4 << 20, stripe_bytes=1 << 20, replicas=2)

        # A workload on its own client; the nodes' pages scraped meanwhile.
        stop = threading.Event()

        def workload() -> None:
            with cluster.client() as c:
                i = 0
                while not stop.is_set():
                    c.put(f"m-{i}", os.urandom(1000 + i % 3000))
                    c.get(f"m-{i}")
                    try:
                        c.get(f"absent-{i}")
                    except meshpool.NotFound:
                        pass
                    i += 1

        t = threading.Thread(target=workload)
        t.start()
        seen = {node: 0.0 for node in nodes}
        deadline = time.monotonic() + 30
        while min(seen.values()) == 0 and time.monotonic() < deadline:
            for node, url in nodes.items():
                hits = value(scrape(url), "meshpool_node_client_hits_total", node=node)
                assert hits >= seen[node], "a counter went down"
                seen[node] = hits
            time.sleep(0.2)
        stop.set()
        t.join()
        assert min(seen.values()) > 0, f"clients never reported to every node: {seen}"

        # The client closed its sessions with its final counts: the pages
        # and `meshpool stat` agree exactly.
        reported = {n["id"]: n for n in stat(cluster.address)["nodes"]}
        for node, url in nodes.items():
            s = scrape(url)
            kv = reported[node]["kv"]
            for key in ("hits", "misses", "puts", "bytes_in", "bytes_out"):
                assert value(s, f"meshpool_node_client_{key}_total", node=node) == kv[key], \
                    (node, key)
            assert kv["hits"] > 0 and kv["misses"] > 0 and kv["puts"] > 0
            assert value(s, "meshpool_node_capacity_bytes", node=node) == \
                reported[node]["capacity_bytes"]
            assert value(s, "meshpool_node_pool_slabs", node=node) == \
                reported[node]["slabs_total"]
            assert value(s, "meshpool_node_slab_grants_total", node=node) > 0
            assert value(s, "meshpool_node_fenced", node=node) == 0
            assert 0 <= value(s, "meshpool_node_heartbeat_age_seconds", node=node) < 5

        # The coordinator: membership, regions and their health.
        s = scrape(coordinator_url)
        assert value(s, "meshpool_coordinator_leader") == 1
        assert value(s, "meshpool_coordinator_nodes", state="alive") == 2
        assert value(s, "meshpool_coordinator_regions", health="healthy") == 1
        assert value(s, "meshpool_coordinator_region_bytes") == 4 << 20
        assert 0 <= value(s, "meshpool_coordinator_node_heartbeat_age_seconds",
                          node="node-1") < 5
        cluster.kill_node(1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s = scrape(coordinator_url)
            if value(s, "meshpool_coordinator_nodes", state="dead") == 1:
                break
            time.sleep(0.1)
        assert value(s, "meshpool_coordinator_nodes", state="dead") == 1
        assert value(s, "meshpool_coordinator_node_alive", node="node-2") == 0
        # Two copies on two nodes, one dead and nowhere to copy to.
        assert value(s, "meshpool_coordinator_regions", health="degraded") == 1
        assert value(s, "meshpool_coordinator_region_stripes_degraded",
                     region="metrics/two") == 4
        assert value(s, "meshpool_coordinator_repair_failures_total") >= 0
    finally:
        cluster.stop()
