"""meshpool.weights: load safetensors, read tensors and rows back with the
safetensors-shaped safe_open, into NumPy arrays and torch tensors."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

import meshpool
import meshpool.weights as mw
from meshpool import _meshpool


def write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, shape, raw bytes)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def sample_tensors(seed):
    rng = np.random.default_rng(seed)
    arrays = {
        "embed.weight": ("F32", rng.standard_normal((300, 64)).astype(np.float32)),
        "layer.0.attn": ("F16", rng.standard_normal((128, 32)).astype(np.float16)),
        "layer.0.ids": ("I64", rng.integers(-2**40, 2**40, size=(77,), dtype=np.int64)),
        "mask": ("BOOL", rng.integers(0, 2, size=(5, 9)).astype(np.bool_)),
        "bytes": ("U8", rng.integers(0, 256, size=(3 << 20,), dtype=np.uint8)),
        "scale": ("F32", np.array(1.5, dtype=np.float32)),
    }
    bf16 = rng.integers(0, 2**16, size=(64, 8), dtype=np.uint16)
    tensors = {n: (d, a.shape, a.tobytes()) for n, (d, a) in arrays.items()}
    tensors["lm_head.bf16"] = ("BF16", bf16.shape, bf16.tobytes())
    return arrays, bf16, tensors


@pytest.fixture(scope="module")
def model(cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "model.safetensors"
    arrays, bf16, tensors = sample_tensors(seed=7)
    write_safetensors(path, tensors)
    with cluster.client() as c:
        info = mw.load(c, str(path), model="py/test-model", stripe_bytes=1 << 20,
                       progress=False)
    assert info.tensors == len(tensors) and info.files == ["model.safetensors"]
    return arrays, bf16, path


def test_numpy_get_tensor_and_slices_match_the_file(client, model):
    arrays, _, _ = model
    with mw.safe_open(client, "py/test-model", framework="np") as f:
        assert set(f.keys()) == set(arrays) | {"lm_head.bf16"}
        assert f.metadata()["meshpool.model"] == "py/test-model"
        before = _meshpool._binding_copied_bytes()
        for name, (_, a) in arrays.items():
            got = f.get_tensor(name)
            assert got.dtype == a.dtype and got.shape == a.shape, name
            assert np.array_equal(got, a), name
        rows = f.get_slice("embed.weight")[10:42]
        assert np.array_equal(rows, arrays["embed.weight"][1][10:42])
        assert np.array_equal(f.get_slice("embed.weight")[-1], arrays["embed.weight"][1][-1])
        assert f.get_slice("embed.weight")[5:5].shape == (0, 64)
        assert f.get_slice("embed.weight").get_shape() == [300, 64]
        assert _meshpool._binding_copied_bytes() == before  # read in place
        with pytest.raises(meshpool.Unimplemented, match="framework='pt'"):
            f.get_tensor("lm_head.bf16")
        with pytest.raises(meshpool.NotFound):
            f.get_tensor("no.such.tensor")
        with pytest.raises(meshpool.InvalidArgument, match="step"):
            f.get_slice("embed.weight")[0:10:2]


def test_torch_get_tensor_including_bf16_with_verify(client, model):
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    arrays, bf16, _ = model
    with mw.safe_open(client, "py/test-model", framework="pt", verify=True) as f:
        t = f.get_tensor("embed.weight")
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        assert np.array_equal(t.numpy(), arrays["embed.weight"][1])
        b = f.get_tensor("lm_head.bf16")
        assert b.dtype == torch.bfloat16
        assert np.array_equal(b.view(torch.int16).numpy().view(np.uint16), bf16)
        rows = f.get_slice("layer.0.attn")[100:128]
        assert np.array_equal(rows.numpy(), arrays["layer.0.attn"][1][100:128])


def test_list_replace_remove_and_progress(client, model, tmp_path, monkeypatch):
    _, _, path = model
    assert "py/test-model" in [m.name for m in mw.list_models(client)]
    with pytest.raises(meshpool.AlreadyExists):
        mw.load(client, str(path), model="py/test-model", progress=False)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    mw.load(client, str(path), model="py/second", replace=True)  # bar: stderr is a tty
    assert "py/second [" in term.getvalue() and term.getvalue().endswith("\n")
    mw.remove_model(client, "py/second")
    with pytest.raises(meshpool.NotFound):
        mw.safe_open(client, "py/second")


def test_malformed_file_is_invalid_argument_naming_it(client, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(meshpool.InvalidArgument, match="bad.safetensors"):
        mw.load(client, str(bad), model="py/bad", progress=False)
    with pytest.raises(meshpool.NotFound):
        mw.load(client, str(tmp_path / "missing.safetensors"), model="py/bad", progress=False)
    assert "py/bad" not in [m.name for m in mw.list_models(client)]
