"""Model weights in a meshpool cluster, from Python.

Load safetensors files once; then any worker reads the tensors, or the rows
of one, it needs — straight into the memory of the array it gets back::

    import meshpool, meshpool.weights as mw
    with meshpool.Client() as client:
        mw.load(client, "model.safetensors.index.json", model="llama-3-8b")
        with mw.safe_open(client, "llama-3-8b", framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)              # torch.Tensor
            rows = f.get_slice("lm_head.weight")[0:4096]

``safe_open`` is shaped like ``safetensors.safe_open`` (``keys()``,
``metadata()``, ``get_tensor``, ``get_slice(name)[a:b]`` over the first
dimension), so code written for local files changes one line.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _meshpool
from .client import Client
from .errors import InvalidArgument, Unimplemented

__all__ = ["load", "safe_open", "list_models", "remove_model"]

Paths = Union[str, Sequence[str]]


class _ProgressBar:
    """One line on a terminal, redrawn at most ten times a second."""

    def __init__(self, model: str, stream: Any) -> None:
        self.model, self.stream, self.last = model, stream, 0.0

    def __call__(self, done: int, total: int, files_done: int, files_total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        width = 30
        filled = width * done // total if total else width
        self.stream.write(
            f"\r{self.model} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done / 2**30:.2f}/{total / 2**30:.2f} GiB, files {files_done}/{files_total}")
        if done >= total and files_done >= files_total:
            self.stream.write("\n")
        self.stream.flush()


def load(client: Client, paths: Paths, *, model: str, replace: bool = False,
         stripe_bytes: int = 0, replicas: int = 1, parallel_files: int = 4,
         progress: Optional[bool] = None) -> Any:
    """Loads safetensors files (or a sharded model's
    ``model.safetensors.index.json``) as ``model``; returns the model's info
    (name, region, tensors, tensor_bytes, files, loaded).

    The model appears only once every byte is written and verified on the
    nodes. ``replace=True`` swaps a loaded model atomically (AlreadyExists
    otherwise). ``progress``: a bar on stderr; default when stderr is a
    terminal. Errors name the file, tensor and reason (InvalidArgument for
    malformed files, NotFound for a missing one).
    """
    if isinstance(paths, str):
        paths = [paths]
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _ProgressBar(model, sys.stderr) if progress else None
    return _meshpool._load_safetensors(client, model, list(paths), replace,
                                       stripe_bytes, replicas, parallel_files, bar)


def list_models(client: Client) -> List[Any]:
    """Loaded models, sorted by name."""
    return _meshpool._list_models(client)


def remove_model(client: Client, model: str) -> None:
    """Deletes a model (and any interrupted load's staging region)."""
    _meshpool._remove_model(client, model)


# safetensors dtype names -> (NumPy dtype name, torch dtype attribute).
_DTYPES: Dict[str, tuple] = {
    "BOOL": ("bool", "bool"), "U8": ("uint8", "uint8"), "I8": ("int8", "int8"),
    "I16": ("int16", "int16"), "U16": ("uint16", None), "F16": ("float16", "float16"),
    "BF16": (None, "bfloat16"), "I32": ("int32", "int32"), "U32": ("uint32", None),
    "F32": ("float32", "float32"), "I64": ("int64", "int64"), "U64": ("uint64", None),
    "F64": ("float64", "float64"), "F8_E4M3": (None, "float8_e4m3fn"),
    "F8_E5M2": (None, "float8_e5m2"),
}


class _Slice:
    """``get_slice(name)``: rows of the first dimension, read on indexing."""

    def __init__(self, f: "safe_open", info: Any) -> None:
        self._f, self._info = f, info

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        return self._info.dtype

    def __getitem__(self, index: Any) -> Any:
        rows = self._info.shape[0] if self._info.shape else 1
        if isinstance(index, tuple):
            if len(index) != 1:
                raise InvalidArgument("meshpool slices the first dimension only: "
                                      "index with [a:b], then slice the result")
            index = index[0]
        if isinstance(index, int):
            begin = index + rows if index < 0 else index
            out = self._f._read(self._info, begin, begin + 1)
            return out[0]
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise InvalidArgument("meshpool slices the first dimension with a "
                                  "step of 1: use [a:b]")
        begin, end, _ = index.indices(rows)
        return self._f._read(self._info, begin, max(begin, end))


class safe_open:  # noqa: N801 - named like safetensors.safe_open
    """A loaded model, read like ``safetensors.safe_open``.

    ``framework`` is ``"np"`` (NumPy arrays) or ``"pt"`` (CPU torch tensors;
    ``device`` must be ``"cpu"``). ``verify=True`` checks every read against
    the digests recorded at load time (DataLoss on a mismatch).
    """

    def __init__(self, client: Client, model: str, framework: str = "np",
                 device: str = "cpu", verify: bool = False) -> None:
        if framework not in ("np", "numpy", "pt", "torch"):
            raise InvalidArgument(f"framework {framework!r}: use 'np' or 'pt'")
        if device != "cpu":
            raise InvalidArgument("meshpool reads into host memory: device='cpu' "
                                  "(move tensors to a GPU afterwards)")
        self._torch = framework in ("pt", "torch")
        if self._torch:
            import torch
            self._lib = torch
        else:
            import numpy
            self._lib = numpy
        self._verify = verify
        self._store = _meshpool._WeightStore.open(client, model)
        self._tensors = {t.name: t for t in self._store.tensors()}

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def keys(self) -> List[str]:
        """Tensor names, in the order they lie in the model."""
        return list(self._tensors)

    def metadata(self) -> Dict[str, str]:
        """What meshpool recorded of the model (safetensors files' own
        ``__metadata__`` is not kept)."""
        info = self._store.info
        return {"meshpool.model": info.name, "meshpool.files": ",".join(info.files),
                "meshpool.tensor_bytes": str(info.tensor_bytes)}

    def get_tensor(self, name: str) -> Any:
        """The whole tensor, read straight into the returned array."""
        info = self._info(name)
        out = self._empty(info, list(info.shape))
        self._store.read_into(name, out, self._verify)
        return out

    def get_slice(self, name: str) -> _Slice:
        """A lazy view: index it with [a:b] over the first dimension."""
        return _Slice(self, self._info(name))

    # ---- internals -------------------------------------------------------------

    def _info(self, name: str) -> Any:
        try:
            return self._tensors[name]
        except KeyError:
            from .errors import NotFound
            raise NotFound(f"no tensor {name!r} in this model") from None

    def _read(self, info: Any, begin: int, end: int) -> Any:
        if not info.shape:
            raise InvalidArgument(f"{info.name} is a scalar: use get_tensor")
        out = self._empty(info, [end - begin] + list(info.shape[1:]))
        if end > begin:
            self._store.read_rows_into(info.name, begin, end, out, self._verify)
        return out

    def _empty(self, info: Any, shape: List[int]) -> Any:
        np_name, pt_name = _DTYPES.get(info.dtype, (None, None))
        if self._torch:
            dtype = getattr(self._lib, pt_name, None) if pt_name else None
            if dtype is None:
                raise Unimplemented(f"{info.name}: dtype {info.dtype} has no torch dtype "
                                    f"in torch {self._lib.__version__}")
            return self._lib.empty(shape, dtype=dtype)
        if np_name is None:
            raise Unimplemented(f"{info.name}: dtype {info.dtype} has no NumPy dtype; "
                                "use framework='pt'")
        return self._lib.empty(shape, dtype=np_name)

