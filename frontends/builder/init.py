"""Where a builder weight's or state's values come from: ``init=`` of ``Model.weight`` / ``Model.state``.

- ``"random"`` (weights' default): a seeded ``wavec.weights.RandomWeight`` (uniform in [-scale, scale),
  scale ``1/sqrt(fan_in)`` unless given), never materialized by the frontend;
- ``"zeros"``, ``"ones"`` or a number: every element that value (states' default is ``"zeros"``);
- a numpy array of the declared shape;
- ``from_npz(path, key)``, ``from_safetensors(path, key)``, ``from_onnx(path, initializer)``: one tensor
  of a file (``key`` defaults to the weight's name); each file is read once per process.

A ``bf16`` weight's values are rounded to bfloat16 (``wavec.weights.round_to_bf16``) and computed as
float32; a random one rounds as it is generated (its spec's precision).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from wavec import weights as wweights

DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class FileTensor:
    """One tensor of a weights file; ``key`` None means the weight's own name."""

    kind: str  # "npz" | "safetensors" | "onnx"
    path: str
    key: str | None = None

    def load(self, name: str) -> np.ndarray:
        key = self.key or name
        table = _read_file(self.kind, os.path.abspath(self.path))
        if key not in table:
            near = ", ".join(sorted(table)[:8])
            raise KeyError(f"{self.path} has no tensor {key!r} (it holds {len(table)}: {near}{', ...' if len(table) > 8 else ''})")
        return np.asarray(table[key])


def from_npz(path: str | os.PathLike, key: str | None = None) -> FileTensor:
    return FileTensor("npz", str(path), key)


def from_safetensors(path: str | os.PathLike, key: str | None = None) -> FileTensor:
    return FileTensor("safetensors", str(path), key)


def from_onnx(path: str | os.PathLike, initializer: str | None = None) -> FileTensor:
    return FileTensor("onnx", str(path), initializer)


@functools.lru_cache(maxsize=8)
def _read_file(kind: str, path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such weights file")
    if kind == "npz":
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    if kind == "safetensors":
        from safetensors.numpy import load_file

        return load_file(path)
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def default_scale(shape: tuple[int, ...], fan_in: int | None) -> float:
    """1/sqrt(fan_in); fan_in defaults to the contracted extent: shape[0] of a [in, out] matrix, the
    product of all but the first axis of a conv kernel [out, in, k], 1 for a vector."""
    if fan_in is None:
        fan_in = shape[0] if len(shape) == 2 else (math.prod(shape[1:]) if len(shape) > 2 else 1)
    return 1.0 / math.sqrt(max(1, fan_in))


def resolve(init, name: str, shape: tuple[int, ...], dtype: str, seed: int, scale: float | None,
            fan_in: int | None):
    """The blob value of a weight or state: a RandomWeight / ConstantWeight spec or a float32 array.
    Raises ValueError (the Model turns it into a BuilderError at the user's line)."""
    if isinstance(init, str) and init == "random":
        s = default_scale(shape, fan_in) if scale is None else float(scale)
        return wweights.RandomWeight(shape, wweights.seed_for(seed, name), s, dtype)
    if isinstance(init, str) and init in ("zeros", "ones"):
        init = 0.0 if init == "zeros" else 1.0
    if isinstance(init, (int, float)) and not isinstance(init, bool):
        value = float(init if dtype == "fp32" else wweights.round_to_bf16(np.float32(init)).item())
        return wweights.ConstantWeight(shape, value)
    if isinstance(init, FileTensor):
        array = init.load(name)
    elif isinstance(init, np.ndarray):
        array = init
    else:
        raise ValueError(f"init {init!r} is not one of 'random', 'zeros', 'ones', a number, an array, "
                         f"from_npz/from_safetensors/from_onnx")
    if array.dtype.kind not in "fiub":
        raise ValueError(f"init array has dtype {array.dtype}; give float values")
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"init array has shape {list(array.shape)}, the declaration says {list(shape)}")
    array = np.ascontiguousarray(array, np.float32)
    return wweights.round_to_bf16(array) if dtype == "bf16" else array


def materialize(value) -> np.ndarray:
    """The float32 array of a blob value (a spec's values, or the array itself)."""
    return value.materialize() if hasattr(value, "materialize") else np.asarray(value, np.float32)
