#!/usr/bin/python3
"""bench/py_weights.py: safe_open(...).get_tensor over every tensor of a
generated model, beside ReadTensor into one reused buffer, in one run.

    bench/py_weights.py [--build DIR] [--model-size 2GiB] [--repeat 3]
                        [--json FILE] [--smoke]

Starts a local cluster (the build's `meshpool`, 3 nodes over TCP), writes a
safetensors file of --model-size in tensors of 1 to 4 MiB, loads it with
meshpool.weights.load, then reads every tensor --repeat times both ways,
alternating which goes first:
  get_tensor  safe_open(framework="np").get_tensor(name): a new array per
              tensor, read straight into its memory (what a user calls);
  ReadTensor  the C++ WeightStore::ReadTensor through the binding's thinnest
              call, into one buffer allocated and faulted in beforehand
              (C++ ReadTensor plus one Python call per tensor).
Prints GB/s (medians) and the ratio. The gap is what a fresh array costs:
allocation and first-touch page faults. --smoke: a 24 MiB model, CI runs
it. Exit status 1 on a wrong byte.
"""

from __future__ import annotations

import argparse
import json
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    for unit, mult in SIZES.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * mult
    return int(text)


def write_model(path: Path, total: int, seed: int) -> dict:
    """Tensors of 1..4 MiB (F32, 2-D) until `total` bytes; returns
    name -> (offset in file data, length)."""
    rng = np.random.default_rng(seed)
    header, layout, offset, i = {}, {}, 0, 0
    while offset < total:
        rows = int(rng.integers(256, 1025))  # rows of 4 KiB: 1..4 MiB
        length = rows * 4096
        name = f"layers.{i}.weight"
        header[name] = {"dtype": "F32", "shape": [rows, 1024],
                        "data_offsets": [offset, offset + length]}
        layout[name] = (offset, length)
        offset += length
        i += 1
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    chunk = rng.integers(0, 2**32, size=(8 << 20) // 4, dtype=np.uint32).tobytes()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = offset
        while left > 0:
            f.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
    return layout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--model-size", default="2GiB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.model_size, a.repeat = "24MiB", 2
    total = parse_size(a.model_size)
    build = Path(a.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import meshpool
    import meshpool.weights as mw
    from meshpool import _meshpool

    binary = build / "tools" / "meshpool"
    capacity = max(256 << 20, total) // (1 << 20)
    procs = [subprocess.Popen([str(binary), "coordinator", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, text=True)]
    address = procs[0].stdout.readline().split()[-1]
    for i in range(3):
        procs.append(subprocess.Popen(
            [str(binary), "node", "--coordinator", address, "--capacity",
             f"{capacity}MiB", "--node-id", f"w-{i + 1}", "--transport", "tcp", "--no-shm"],
            stdout=subprocess.DEVNULL))
    try:
        with meshpool.Client(address) as client:
            deadline = time.monotonic() + 30
            while sum(n.alive for n in client.status().nodes) < 3:
                if time.monotonic() > deadline:
                    sys.exit("py_weights: the nodes did not register")
                time.sleep(0.05)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "model.safetensors"
                layout = write_model(path, total, seed=11)
                t0 = time.perf_counter()
                mw.load(client, str(path), model="bench/py-weights", progress=False)
                load_s = time.perf_counter() - t0
                names = list(layout)
                f = mw.safe_open(client, "bench/py-weights", framework="np")
                store = _meshpool._WeightStore.open(client, "bench/py-weights")
                biggest = max(length for _, length in layout.values())
                reused = np.ones(biggest, dtype=np.uint8)  # faulted in
                runs = {"get_tensor": [], "ReadTensor": []}

                def via_get_tensor():
                    for n in names:
                        f.get_tensor(n)

                def via_read_tensor():
                    for n in names:
                        store.read_into(n, reused)

                for rep in range(a.repeat):
                    order = [("get_tensor", via_get_tensor), ("ReadTensor", via_read_tensor)]
                    if rep % 2:
                        order.reverse()
                    for label, fn in order:
                        t0 = time.perf_counter()
                        fn()
                        runs[label].append(layout_bytes(layout) / (time.perf_counter() - t0) / 1e9)
                # Correctness: the first and last tensors against the file.
                with open(path, "rb") as fh:
                    (hlen,) = struct.unpack("<Q", fh.read(8))
                    for n in (names[0], names[-1]):
                        off, length = layout[n]
                        fh.seek(8 + hlen + off)
                        if f.get_tensor(n).tobytes() != fh.read(length):
                            sys.exit(f"py_weights: wrong bytes in {n}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
    med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    ratio = med["get_tensor"] / med["ReadTensor"]
    print(f"py_weights: {len(names)} tensors, {layout_bytes(layout) / 2**30:.2f} GiB, "
          f"3 nodes over tcp, load {load_s:.1f} s, median of {a.repeat}")
    print(f"  get_tensor {med['get_tensor']:.3f} GB/s   ReadTensor {med['ReadTensor']:.3f} GB/s"
          f"   ratio {ratio:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": sys.argv, "runs": runs,
                                            "median_gb_s": med, "ratio": ratio}, indent=2))
    return 0


def layout_bytes(layout: dict) -> int:
    return sum(length for _, length in layout.values())


if __name__ == "__main__":
    sys.exit(main())
