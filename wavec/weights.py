"""Generated weights: known by a seed or a fill value, made where they are used, never stored in a profile.

A model of billions of parameters compiles without materializing a byte of them: its weights are
``RandomWeight`` specs (shape, seed, scale, precision) and its zero-initialized caches ``ConstantWeight``
specs. A frontend puts them in its weights dict in place of arrays; the emitter records each one's
arena offset and spec in profile.json (``generated_weights``) and leaves its bytes out of weights.bin.
The CPU interpreter and the numpy references call ``materialize``; the CUDA runtime generates the same
bits on the device at load (``wavec_fill_weights`` in the generated kernel.cu).

The generator is counter-based, one 32-bit hash per element (no sequential state, so any thread can
produce any element): ``h = lowbias32(index ^ lowbias32(seed))`` with Chris Wellons' lowbias32
(https://nullprogram.com/blog/2018/07/31/, the 0x7feb352d / 0x846ca68b variant). The top 24 bits give
``u = (h >> 8) * 2**-23 - 1``, exact in float32 and uniform in [-1, 1); the value is ``float32(u * scale)``
(one float32 rounding, the same on CPU and GPU), then rounded to bfloat16 (nearest, ties to even) when
``precision == "bf16"``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

PRECISIONS = ("fp32", "bf16")

# Elements generated per numpy step: bounds the temporary uint32/float32 arrays to a few tens of MB.
_CHUNK = 1 << 22


def _lowbias32(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), returned as float32. A NaN becomes the
    quiet NaN of its sign (0x7FC00000): a bf16 number too, so a MATMUL may pass its bits to the tensor cores
    unsplit (b_tf32), where a payload in the low bits alone would read as infinity."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    rounded = np.where(np.isnan(values), (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000), rounded)
    return rounded.astype(np.uint32).view(np.float32)


def seed_for(model_seed: int, name: str) -> int:
    """A weight's 32-bit seed from the model's seed and the weight's name (CRC-32 of the name: stable
    across Python runs, unlike ``hash``)."""
    return (int(model_seed) * 0x9E3779B1 + zlib.crc32(name.encode())) & 0xFFFFFFFF


@dataclass(frozen=True)
class _Generated:
    """A float32 tensor of ``shape`` made from a spec (the shape is checked and made a tuple of ints)."""

    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 1 for d in self.shape):
            raise ValueError(f"{type(self).__name__}: shape {self.shape} has a dimension < 1")

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return 4 * self.size


@dataclass(frozen=True)
class RandomWeight(_Generated):
    """A float32 tensor of ``shape`` uniform in [-scale, scale), from ``seed`` (see the module docstring).

    ``precision`` "bf16" rounds every value to bfloat16 (the model's weights are bf16 numbers; they are
    stored and computed as float32). Raises ValueError for a bad shape, seed, scale or precision."""

    seed: int
    scale: float
    precision: str = "fp32"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size >= 2**32:
            raise ValueError(f"RandomWeight: {self.size} elements; the generator indexes at most 2**32 - 1")
        if not 0 <= int(self.seed) < 2**32:
            raise ValueError(f"RandomWeight: seed {self.seed} is not a 32-bit unsigned integer")
        if not np.isfinite(self.scale) or self.scale <= 0:
            raise ValueError(f"RandomWeight: scale {self.scale} must be a positive finite number")
        if self.precision not in PRECISIONS:
            raise ValueError(f"RandomWeight: precision {self.precision!r} is not one of {PRECISIONS}")

    def spec(self) -> dict:
        """The JSON form kept in profile.json (``name`` and ``offset`` are added by the emitter)."""
        return {"kind": "uniform", "elems": self.size, "seed": int(self.seed),
                "scale": float(np.float32(self.scale)), "precision": self.precision}

    def materialize(self) -> np.ndarray:
        """The float32 array, bit-identical to what the device generates."""
        return self.flat_values(0, self.size).reshape(self.shape)

    def flat_values(self, start: int, stop: int) -> np.ndarray:
        """Flat elements ``[start, stop)`` (float32), without generating the others."""
        out = np.empty(stop - start, np.float32)
        key = _lowbias32(np.array([self.seed], np.uint32))[0]
        scale = np.float32(self.scale)
        for at in range(start, stop, _CHUNK):
            index = np.arange(at, min(at + _CHUNK, stop), dtype=np.uint32)
            h = _lowbias32(index ^ key)
            u = (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-23) - np.float32(1.0)
            out[at - start : at - start + len(index)] = u * scale
        return round_to_bf16(out) if self.precision == "bf16" else out


@dataclass(frozen=True)
class ConstantWeight(_Generated):
    """A float32 tensor of ``shape`` with every element ``value`` (a zeroed KV cache's initial value)."""

    value: float = 0.0

    def spec(self) -> dict:
        return {"kind": "constant", "elems": self.size, "value": float(np.float32(self.value))}

    def materialize(self) -> np.ndarray:
        return np.full(self.shape, np.float32(self.value), np.float32)

    def flat_values(self, start: int, stop: int) -> np.ndarray:
        return np.full(stop - start, np.float32(self.value), np.float32)


def holds_bf16(value) -> bool:
    """Whether every value of a weight blob entry (an array, a RandomWeight or a ConstantWeight) is a
    bfloat16 number: a float32 whose low 16 bits are zero."""
    if isinstance(value, RandomWeight):
        return value.precision == "bf16"
    values = np.float32(value.value) if isinstance(value, ConstantWeight) else value
    return not (np.ascontiguousarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFF)).any()


GeneratedWeight = RandomWeight | ConstantWeight


def from_spec(spec: dict) -> GeneratedWeight:
    """The weight of one profile.json ``generated_weights`` entry (flat: shape ``(elems,)``).
    Raises ValueError for an unknown kind or bad fields."""
    kind = spec.get("kind")
    if kind == "uniform":
        return RandomWeight((spec["elems"],), spec["seed"], spec["scale"], spec["precision"])
    if kind == "constant":
        return ConstantWeight((spec["elems"],), spec["value"])
    raise ValueError(f"generated weight {spec.get('name', '?')!r}: unknown kind {kind!r} (uniform, constant)")


def stored_ranges(arena_bytes: int, generated: list[dict]) -> list[tuple[int, int]]:
    """The byte ranges ``[begin, end)`` of the weights arena that weights.bin stores: all but the
    generated weights', in order. weights.bin is their concatenation."""
    ranges, at = [], 0
    for spec in sorted(generated, key=lambda g: int(g["offset"])):
        begin = int(spec["offset"])
        if begin > at:
            ranges.append((at, begin))
        at = max(at, begin + 4 * int(spec["elems"]))
    if at < arena_bytes:
        ranges.append((at, arena_bytes))
    return ranges


def stored_spans(arena_bytes: int, generated: list[dict]) -> list[tuple[int, int, int]]:
    """``stored_ranges`` with where each one starts in weights.bin: ``(begin, end, position)``."""
    spans, at = [], 0
    for b, e in stored_ranges(arena_bytes, generated):
        spans.append((b, e, at))
        at += e - b
    return spans


def stored_size(arena_bytes: int, generated: list[dict]) -> int:
    """Bytes of weights.bin: the weights arena less its generated weights."""
    return sum(e - b for b, e in stored_ranges(arena_bytes, generated))


def stored_position(arena_bytes: int, generated: list[dict], offset: int) -> int:
    """Where arena byte ``offset`` (in a stored range) lies in weights.bin. Raises ValueError when a
    generated weight holds it."""
    for b, e, at in stored_spans(arena_bytes, generated):
        if b <= offset < e:
            return at + offset - b
    raise ValueError(f"weights arena byte {offset} belongs to a generated weight, not to weights.bin")


def unpack_stored(stored: np.ndarray, arena_bytes: int, generated: list[dict]) -> np.ndarray:
    """The arena image (uint8, generated weights left zero) from weights.bin's bytes. Raises ValueError
    when the sizes disagree."""
    check_stored(stored, arena_bytes, generated)
    image = np.zeros(arena_bytes, np.uint8)
    for b, e, at in stored_spans(arena_bytes, generated):
        image[b:e] = stored[at : at + e - b]
    return image


def check_stored(stored: np.ndarray, arena_bytes: int, generated: list[dict]) -> None:
    """Raises ValueError when weights.bin's ``stored`` bytes are not the arena less its generated weights."""
    expected = stored_size(arena_bytes, generated)
    if len(stored) != expected:
        raise ValueError(f"has {len(stored)} bytes; the weights arena less its generated weights is {expected}")


def fill_generated(image: np.ndarray, generated: list[dict]) -> None:
    """Writes every generated weight's values into the arena ``image`` (uint8) in place."""
    for spec in generated:
        values = from_spec(spec).materialize().view(np.uint8).ravel()
        image[int(spec["offset"]) : int(spec["offset"]) + len(values)] = values


def read_arena(stored: np.ndarray, arena_bytes: int, generated: list[dict], offset: int, nbytes: int) -> np.ndarray:
    """Bytes ``[offset, offset + nbytes)`` of the weights arena as the kernel sees them (uint8), from
    weights.bin's ``stored`` bytes with the generated weights that overlap the range materialized (a
    state's initial value may be a ConstantWeight). Bytes past the arena are absent."""
    end = min(offset + nbytes, arena_bytes)
    out = np.zeros(max(0, end - offset), np.uint8)
    for b, e, at in stored_spans(arena_bytes, generated):
        lo, hi = max(b, offset), min(e, end)
        if lo < hi:
            out[lo - offset : hi - offset] = stored[at + lo - b : at + hi - b]
    for spec in generated:
        begin, stop = int(spec["offset"]), int(spec["offset"]) + 4 * int(spec["elems"])
        lo, hi = max(begin, offset), min(stop, end)
        if lo < hi:
            first, last = (lo - begin) // 4, (hi - begin + 3) // 4
            values = from_spec(spec).flat_values(first, last).view(np.uint8)
            out[lo - offset : hi - offset] = values[lo - begin - 4 * first : hi - begin - 4 * first]
    return out
