"""Generated weights (wavec/weights.py): the generator's values, a profile that stores none of their bytes,
the interpreter running it exactly like the materialized model, and the CUDA runtime generating them on
the device (its launches checked against a fake driver here; the bits on a real GPU in scripts/gpu_check.py)."""

from __future__ import annotations

import ctypes
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_cuda import FakeDriver
from wavec.driver import compile_graph
from wavec.errors import ProfileError
from wavec.frontends.onnx import import_onnx
from wavec.profile import load
from wavec.targets.cuda import codegen, runtime
from wavec.weights import (ConstantWeight, RandomWeight, from_spec, holds_bf16, read_arena, round_to_bf16,
                           seed_for)

SESSIONS, BEATS = 3, 4


def test_uniform_values_are_in_range_and_depend_on_seed_only():
    a = RandomWeight((64, 33), seed=7, scale=0.5).materialize()
    assert a.dtype == np.float32 and a.shape == (64, 33)
    assert -0.5 <= a.min() and a.max() < 0.5 and abs(float(a.mean())) < 0.02
    np.testing.assert_array_equal(a, RandomWeight((64, 33), seed=7, scale=0.5).materialize())
    assert not np.array_equal(a, RandomWeight((64, 33), seed=8, scale=0.5).materialize())
    # The flat index is the generator's counter: a reshaped weight has the same values.
    np.testing.assert_array_equal(a.ravel(), RandomWeight((64 * 33,), seed=7, scale=0.5).materialize())


def test_first_values_follow_the_documented_formula():
    def lowbias32(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)

    key = lowbias32(12345)
    want = [np.float32(np.float32((lowbias32(i ^ key) >> 8) * 2.0**-23 - 1.0) * np.float32(0.125)) for i in range(5)]
    np.testing.assert_array_equal(RandomWeight((5,), 12345, 0.125).materialize(), want)


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -2.5e-3, np.inf], np.float32)
    want = np.array([1.0, 1.0, 1.0 + 2**-6, 1.0, -2.5e-3, np.inf], np.float32)
    got = round_to_bf16(x)
    np.testing.assert_array_equal(got[[0, 1, 2, 3, 5]], want[[0, 1, 2, 3, 5]])
    assert got.view(np.uint32)[4] & 0xFFFF == 0 and abs(got[4] - want[4]) <= 2**-8 * abs(want[4])
    b = RandomWeight((1000,), 3, 1.0, "bf16").materialize()
    assert not (b.view(np.uint32) & 0xFFFF).any()


def test_bf16_rounding_makes_nan_a_bf16_number():
    """A NaN becomes its sign's quiet NaN, low 16 bits zero (a payload in the low bits alone would be an
    infinity to the tensor cores, which read a b_tf32 MATMUL's weight bits unsplit)."""
    nans = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    got = round_to_bf16(nans).view(np.uint32)
    assert got.tolist() == [0x7FC00000, 0xFFC00000, 0x7FC00000, 0x7FC00000]


def test_holds_bf16_reads_arrays_and_generated_specs():
    """What compile_graph checks a wave.weight {dtype = "bf16"} against: every value a bfloat16 number."""
    assert holds_bf16(round_to_bf16(np.linspace(-3, 3, 50, dtype=np.float32)))
    assert not holds_bf16(np.array([1.0, 0.1], np.float32))
    assert holds_bf16(RandomWeight((4,), 1, 1.0, "bf16")) and not holds_bf16(RandomWeight((4,), 1, 1.0))
    assert holds_bf16(ConstantWeight((4,), 0.5)) and not holds_bf16(ConstantWeight((4,), 0.1))


def test_seed_for_is_stable_and_name_dependent():
    assert seed_for(0, "w") == seed_for(0, "w") != seed_for(0, "v") != seed_for(1, "v")
    # CRC-32 of the name, not Python's hash (salted per process).
    assert seed_for(3, "layers.0.attn.q") == (3 * 0x9E3779B1 + zlib.crc32(b"layers.0.attn.q")) % 2**32


@pytest.mark.parametrize("bad", [dict(shape=(0, 3)), dict(seed=-1), dict(scale=0.0), dict(precision="fp8")])
def test_bad_specs_are_rejected(bad):
    args = {"shape": (2, 3), "seed": 1, "scale": 1.0, "precision": "fp32", **bad}
    with pytest.raises(ValueError, match="RandomWeight"):
        RandomWeight(**args)


def _rnn_model() -> tuple:
    """hN = tanh(x W + h U + b); y = hN V: three weights and one state of a small recurrence."""
    rng = np.random.default_rng(5)
    inits = {"W": rng.standard_normal((8, 16)), "U": rng.standard_normal((16, 16)), "b": rng.standard_normal(16),
             "V": rng.standard_normal((16, 4))}
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("MatMul", ["h", "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["s"]), helper.make_node("Add", ["s", "b"], ["p"]),
        helper.make_node("Tanh", ["p"], ["hN"]), helper.make_node("MatMul", ["hN", "V"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("hN", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graph(generated: bool):
    graph = import_onnx(_rnn_model(), states=[("h", "hN")])
    if generated:
        for name in ("W", "U", "V"):
            graph.weights[name] = RandomWeight(graph.weights[name].shape, seed_for(9, name), 0.3, "bf16")
        graph.weights["h"] = ConstantWeight(graph.weights["h"].shape, 0.25)
    else:
        for name in ("W", "U", "V"):
            graph.weights[name] = RandomWeight(graph.weights[name].shape, seed_for(9, name), 0.3, "bf16").materialize()
        graph.weights["h"] = np.full(graph.weights["h"].shape, 0.25, np.float32)
    return graph


@pytest.fixture(scope="module")
def profiles():
    return (compile_graph(_graph(True), sessions=SESSIONS, workers=3),
            compile_graph(_graph(False), sessions=SESSIONS, workers=3))


def _stream(profile):
    rng = np.random.default_rng(11)
    frames = {"x": rng.standard_normal((BEATS, SESSIONS, 8)).astype(np.float32)}
    reset = np.zeros((BEATS, SESSIONS), bool)
    reset[2, 1] = True  # a rejoin: the state slot goes back to the generated initial value
    return frames, reset


def test_generated_weights_are_recorded_not_stored(profiles, tmp_path):
    generated, stored = profiles
    specs = {g["name"]: g for g in generated.meta["generated_weights"]}
    assert set(specs) == {"W", "U", "V", "h"} and specs["h"]["kind"] == "constant"
    assert specs["W"]["precision"] == "bf16" and specs["W"]["elems"] == 8 * 16
    generated.save(tmp_path / "g")
    stored.save(tmp_path / "s")
    saved = (tmp_path / "g" / "weights.bin").stat().st_size
    assert saved == (tmp_path / "s" / "weights.bin").stat().st_size - sum(4 * g["elems"] for g in specs.values())
    back = load(tmp_path / "g")
    np.testing.assert_array_equal(back.weights_arena(), stored.weights_arena())


def test_the_profile_holds_no_generated_byte(profiles):
    """In memory too, a profile keeps weights.bin's bytes only; any arena range reads back as the kernel sees it."""
    generated, stored = profiles
    arena = generated.arena_bytes("weights")
    assert len(generated.weights) == arena - sum(4 * g["elems"] for g in generated.generated_weights)
    whole = stored.weights_arena()
    rng = np.random.default_rng(5)
    for offset, nbytes in [(0, arena), *[(int(o), int(n)) for o, n in zip(rng.integers(0, arena, 20), rng.integers(1, 300, 20))]]:
        np.testing.assert_array_equal(read_arena(generated.weights, arena, generated.generated_weights, offset, nbytes),
                                      whole[offset : offset + nbytes])


def test_interp_runs_generated_exactly_like_materialized(profiles):
    generated, stored = profiles
    frames, reset = _stream(generated)
    a = generated.run(frames, backend="interp", reset=reset)
    b = stored.run(frames, backend="interp", reset=reset)
    for name in ("y", "hN"):
        np.testing.assert_array_equal(a[name], b[name])


def test_damaged_generated_weights_are_clear_errors(profiles, tmp_path):
    generated, _ = profiles
    generated.save(tmp_path / "g")
    path = tmp_path / "g" / "weights.bin"
    path.write_bytes(path.read_bytes() + b"\0" * 4)
    with pytest.raises(ProfileError, match="weights.bin: has .* bytes; the weights arena less its generated weights"):
        load(tmp_path / "g")
    generated.save(tmp_path / "h")
    meta_path = tmp_path / "h" / "profile.json"
    meta_path.write_text(meta_path.read_text().replace('"kind": "uniform"', '"kind": "gaussian"', 1))
    with pytest.raises(ProfileError, match="generated_weights.*unknown kind 'gaussian'"):
        load(tmp_path / "h")


class FillingDriver(FakeDriver):
    """The fake driver, plus the fill kernel: decodes its arguments and writes wavec.weights' values."""

    def __init__(self, profile):
        super().__init__(profile)
        self.fills: list[tuple] = []

    def cuModuleGetFunction(self, module, name):
        if name == codegen.FILL_KERNEL_NAME.encode():
            return self.ok, "fill"
        return super().cuModuleGetFunction(module, name)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert f == "fill" and bx == codegen.BLOCK_THREADS
        ptrs = (ctypes.c_void_p * 7).from_address(ctypes.addressof(params))
        kinds = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32, ctypes.c_float, ctypes.c_int, ctypes.c_float)
        dst, elems, kind, seed, scale, bf16, value = (k.from_address(p).value for k, p in zip(kinds, ptrs))
        self.fills.append((kind, elems))
        if kind == codegen.FILL_KINDS["uniform"]:
            values = from_spec({"kind": "uniform", "elems": elems, "seed": seed, "scale": scale,
                                "precision": "bf16" if bf16 else "fp32"}).materialize()
        else:
            values = np.full(elems, value, np.float32)
        ctypes.memmove(dst, values.ctypes.data, values.nbytes)
        return (self.ok,)


def _cuda_matches_interp(profile, monkeypatch, tmp_path) -> "FillingDriver":
    """Runs ``profile`` on the runtime over the filling fake driver; its outputs must equal the interpreter's
    bit for bit. Returns the driver (its fills)."""
    fake = FillingDriver(profile)
    monkeypatch.setattr(runtime, "_cu", fake)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    frames, reset = _stream(profile)
    got = runtime.run_beats(profile, frames, reset, cubin=cubin)
    want = profile.run(frames, backend="interp", reset=reset)
    for name in ("y", "hN"):
        np.testing.assert_array_equal(got[name], want[name])
    return fake


def test_cuda_runtime_generates_on_device_and_matches_interp(profiles, monkeypatch, tmp_path):
    generated, _ = profiles
    fake = _cuda_matches_interp(generated, monkeypatch, tmp_path)
    assert sorted(fake.fills) == sorted((codegen.FILL_KINDS[g["kind"]], g["elems"])
                                        for g in generated.meta["generated_weights"])


def test_cuda_runtime_uploads_each_stored_range_from_its_place_in_weights_bin(monkeypatch, tmp_path):
    """W and V generated, U and b stored: weights.bin holds two ranges that generated weights separate, and
    the runtime must upload each from its own position (wavec.weights.stored_spans)."""
    from wavec.weights import stored_spans

    graph = import_onnx(_rnn_model(), states=[("h", "hN")])
    for name in ("W", "V"):
        graph.weights[name] = RandomWeight(graph.weights[name].shape, seed_for(9, name), 0.3, "bf16")
    mixed = compile_graph(graph, sessions=SESSIONS, workers=3)
    spans = stored_spans(mixed.arena_bytes("weights"), mixed.generated_weights)
    assert len(spans) >= 2 and spans[-1][2] > 0  # a later range starts past weights.bin's first byte
    _cuda_matches_interp(mixed, monkeypatch, tmp_path)
