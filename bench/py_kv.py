#!/usr/bin/python3
"""bench/py_kv.py: the kv_compare workload through the Python binding, side
by side with the C++ kv_compare against the same cluster in the same run.

    bench/py_kv.py [--build DIR] [--block-sizes 16KiB,256KiB,2MiB]
                   [--threads 4] [--batch 32] [--seconds 3]
                   [--working-set 256MiB] [--repeat 1] [--shm] [--json FILE]
                   [--smoke]

Starts a local cluster (a coordinator and --nodes nodes of the build's
`meshpool`, over TCP; --shm lets them serve this host over shared memory),
then for each block size runs the C++ `kv_compare --systems meshpool` and
the same workload from Python: --threads threads, each repeating rounds of a
batched PUT of --batch blocks from a registered buffer (batch_put_from with
(address, length) pairs), then a batched GET of the same keys into another
registered buffer (batch_get_into), in lockstep. Every GET's length and the
stamps at both ends of each block are checked (outside the timed phases).
Prints blocks/s and GB/s for both and the Python / C++ ratio.

--smoke: tiny sizes and fractions of a second (CI runs it so a changed
default breaks CI, not the next measurement). Exit status 1 on any wrong
byte or failed call.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 16KiB, 2MiB)")
    return int(m.group(1)) * {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
                              "GiB": 1 << 30}[m.group(2)]


class Cluster:
    def __init__(self, binary: Path, nodes: int, capacity: str, shm: bool) -> None:
        self.procs = []
        coord = subprocess.Popen([str(binary), "coordinator", "--listen", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, text=True)
        self.procs.append(coord)
        self.address = coord.stdout.readline().split()[-1]
        for i in range(nodes):
            args = [str(binary), "node", "--coordinator", self.address, "--capacity",
                    capacity, "--node-id", f"bench-{i + 1}", "--transport", "tcp"]
            if not shm:
                args.append("--no-shm")
            self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait()


def wait_alive(meshpool, address: str, nodes: int) -> None:
    deadline = time.monotonic() + 30
    with meshpool.Client(address) as c:
        while sum(n.alive for n in c.status().nodes) < nodes:
            if time.monotonic() > deadline:
                sys.exit("py_kv: the nodes did not register")
            time.sleep(0.05)


def python_run(meshpool, address: str, block: int, threads: int, batch: int,
               seconds: float, working_set: int) -> dict:
    """The workload from Python; returns rates and rounds."""
    rounds_kept = max(2, working_set // (threads * batch * block))
    client = meshpool.Client(address, batch_threads=threads)
    barrier = threading.Barrier(threads + 1)
    failures: list = []
    put_time = [0.0]
    get_time = [0.0]
    stop = [False]
    rounds = [0]

    def worker(t: int) -> None:
        # As kv_compare's buffers: faulted in before timing (it maps them
        # MAP_POPULATE), the PUT buffer filled with varied bytes.
        put = np.random.default_rng(t).integers(0, 256, batch * block, dtype=np.uint8)
        get = np.ones(batch * block, dtype=np.uint8)
        with client.register_buffer(put) as pr, client.register_buffer(get) as gr:
            put_pairs = [(pr.address + i * block, block) for i in range(batch)]
            get_pairs = [(gr.address + i * block, block) for i in range(batch)]
            put_rows, get_rows = put.reshape(batch, block), get.reshape(batch, block)
            rnd = 0
            while True:
                barrier.wait()  # start of round (or stop)
                if stop[0]:
                    return
                keys = [f"pykv-{block}-{t}-{rnd % rounds_kept}-{i}" for i in range(batch)]
                stamps = (np.arange(batch, dtype=np.uint64) << np.uint64(32)) | np.uint64(
                    rnd & 0xFFFFFFFF) | np.uint64(t << 24)
                put_rows[:, :8] = stamps.view(np.uint8).reshape(batch, 8)
                put_rows[:, -8:] = stamps.view(np.uint8).reshape(batch, 8)
                barrier.wait()  # PUT phase
                r = client.batch_put_from(keys, put_pairs)
                barrier.wait()
                barrier.wait()  # GET phase
                g = client.batch_get_into(keys, get_pairs)
                barrier.wait()
                if any(x is not None for x in r) or any(x != block for x in g):
                    failures.append((t, rnd, [x for x in r + g if not isinstance(x, int)
                                              and x is not None][:1], g[:2]))
                elif not (np.array_equal(get_rows[:, :8], put_rows[:, :8]) and
                          np.array_equal(get_rows[:, -8:], put_rows[:, -8:])):
                    failures.append((t, rnd, "wrong stamps"))
                rnd += 1

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    start = time.monotonic()
    while True:
        barrier.wait()  # start of round
        if stop[0]:
            break
        barrier.wait()
        t0 = time.perf_counter()
        barrier.wait()
        put_time[0] += time.perf_counter() - t0
        barrier.wait()
        t0 = time.perf_counter()
        barrier.wait()
        get_time[0] += time.perf_counter() - t0
        rounds[0] += 1
        if time.monotonic() - start >= seconds or failures:
            stop[0] = True
    for th in pool:
        th.join()
    client.close()
    if failures:
        sys.exit(f"py_kv: wrong result in Python run: {failures[0]}")
    blocks = rounds[0] * threads * batch
    return {"rounds": rounds[0], "put_blocks_s": blocks / put_time[0],
            "get_blocks_s": blocks / get_time[0],
            "put_gb_s": blocks * block / put_time[0] / 1e9,
            "get_gb_s": blocks * block / get_time[0] / 1e9}


def cpp_run(kv_compare: Path, address: str, block: int, threads: int, batch: int,
            seconds: float, working_set: int, tmp: Path) -> dict:
    out = tmp / f"kv_compare_{block}.json"
    cmd = [str(kv_compare), "--systems", "meshpool", "--coordinator", address,
           "--block-sizes", str(block), "--threads", str(threads), "--batch", str(batch),
           "--seconds", str(seconds), "--working-set", str(working_set),
           "--memcpy-bytes", "1MiB", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"py_kv: kv_compare failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    rows = [r for r in json.loads(out.read_text())["results"] if r["system"] == "meshpool"]
    return rows[0]


def median_run(runs: list) -> dict:
    """Per rate, the median over repetitions."""
    out = {}
    for k in ("put_gb_s", "get_gb_s", "put_blocks_s", "get_blocks_s"):
        values = sorted(r[k] for r in runs)
        out[k] = values[len(values) // 2]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--block-sizes", default="16KiB,256KiB,2MiB")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--working-set", type=parse_size, default=parse_size("256MiB"))
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--capacity", default="2GiB")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each per block size, alternating which goes first; "
                         "the medians are compared")
    ap.add_argument("--shm", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.block_sizes, a.seconds, a.working_set = "16KiB,256KiB", 0.3, parse_size("16MiB")
        a.nodes, a.capacity, a.batch, a.repeat = 2, "128MiB", 8, 2
    build = Path(a.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import meshpool  # the build's package
    binary, kv_compare = build / "tools" / "meshpool", build / "bench" / "kv_compare"
    for p in (binary, kv_compare):
        if not os.access(p, os.X_OK):
            sys.exit(f"py_kv: {p} is missing: cmake --build {build} --target kv_compare")
    sizes = [parse_size(s) for s in a.block_sizes.split(",") if s]
    cluster = Cluster(binary, a.nodes, a.capacity, a.shm)
    rows = []
    try:
        wait_alive(meshpool, cluster.address, a.nodes)
        tmp = build / "py_kv"
        tmp.mkdir(exist_ok=True)
        for block in sizes:
            cpps, pys = [], []
            for rep in range(a.repeat):
                # Alternate which goes first, so neither always runs on a
                # cluster the other just warmed (or filled).
                order = ("cpp", "py") if rep % 2 == 0 else ("py", "cpp")
                for which in order:
                    if which == "cpp":
                        cpps.append(cpp_run(kv_compare, cluster.address, block, a.threads,
                                            a.batch, a.seconds, a.working_set, tmp))
                    else:
                        pys.append(python_run(meshpool, cluster.address, block, a.threads,
                                              a.batch, a.seconds, a.working_set))
            cpp, py = median_run(cpps), median_run(pys)
            rows.append({"block_bytes": block, "cpp": cpp, "python": py,
                         "cpp_runs": cpps, "python_runs": pys,
                         "put_ratio": py["put_gb_s"] / cpp["put_gb_s"],
                         "get_ratio": py["get_gb_s"] / cpp["get_gb_s"]})
    finally:
        cluster.stop()
    print(f"py_kv: {a.threads} threads, batch {a.batch}, {a.nodes} nodes over "
          f"{'tcp + same-host shm' if a.shm else 'tcp'}, {a.seconds} s per run, "
          f"median of {a.repeat}")
    print(f"{'block':>8} {'C++ put':>9} {'Py put':>9} {'ratio':>6} "
          f"{'C++ get':>9} {'Py get':>9} {'ratio':>6}   (GB/s)")
    for r in rows:
        print(f"{r['block_bytes'] >> 10:>6}Ki {r['cpp']['put_gb_s']:>9.3f} "
              f"{r['python']['put_gb_s']:>9.3f} {r['put_ratio']:>6.2f} "
              f"{r['cpp']['get_gb_s']:>9.3f} {r['python']['get_gb_s']:>9.3f} "
              f"{r['get_ratio']:>6.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
