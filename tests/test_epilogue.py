"""Epilogues (wave-fuse folds bias, activation and residual ewise ops into wave.matmul / wave.conv) through
the whole compiler and the interpreter, against float64 numpy on fresh random inputs, per session."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from wavec.driver import compile_graph
from wavec.frontends.onnx import import_onnx

SESSIONS = 3


def onnx_model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    """An opset-17 float32 model of ``nodes``: inputs and outputs as (name, shape), initializers by name."""
    graph = helper.make_graph(
        nodes,
        "epilogue",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, frames: dict[str, np.ndarray]):
    """Compiles for SESSIONS sessions and runs one beat; frames are [SESSIONS, ...] per input."""
    profile = compile_graph(import_onnx(model), sessions=SESSIONS, workers=4)
    outputs = profile.run({k: v[None] for k, v in frames.items()}, backend="interp",
                          reset=np.zeros((1, SESSIONS), bool))
    return profile, {k: v[0] for k, v in outputs.items()}


def _ops(model: onnx.ModelProto) -> list[str]:
    """The wave ops after wave-fuse, as text lines."""
    from wavec.driver import run_pipeline

    graph = import_onnx(model)
    run_pipeline(graph.module, "wave-fuse")
    return [line.strip() for line in str(graph.module).splitlines() if "wave." in line]


def _conv1d_ref(x, w, b, pad):
    """float64 ONNX Conv, 1-D, stride 1: x [C, L], w [O, C, K]."""
    xp = np.pad(x, ((0, 0), (pad, pad)))
    k = w.shape[2]
    length = xp.shape[1] - k + 1
    out = np.stack([np.einsum("ck,ock->o", xp[:, i : i + k], w) for i in range(length)], axis=1)
    return out + (b[:, None] if b is not None else 0.0)


def test_matmul_bias_relu_epilogue_matches_float64():
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((16, 24)), rng.standard_normal(24)
    model = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        [("x", [5, 16])], [("y", [5, 24])], {"w": w, "b": b},
    )
    ops = _ops(model)
    assert any("wave.matmul" in op and 'epilogue "relu(add(%0, %1))"' in op for op in ops), ops
    assert not any("wave.ewise" in op for op in ops), ops
    x = rng.standard_normal((SESSIONS, 5, 16)).astype(np.float32)
    profile, out = _run(model, {"x": x})
    assert [p["op"] for p in profile.meta["phases"]].count("wave.ewise") == 0
    want = np.maximum(x.astype(np.float64) @ w.astype(np.float32).astype(np.float64) + b.astype(np.float32), 0.0)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-5)
    assert (out["y"] == 0).any() and (out["y"] > 0).any()  # the relu did something


@pytest.mark.parametrize("bias", [True, False])
def test_conv_sigmoid_epilogue_matches_float64(bias):
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((6, 4, 3)), rng.standard_normal(6)
    model = onnx_model(
        [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], pads=[1, 1]),
         helper.make_node("Sigmoid", ["c"], ["y"])],
        [("x", [1, 4, 10])], [("y", [1, 6, 10])], {"w": w, **({"b": b} if bias else {})},
    )
    ops = _ops(model)
    assert any("wave.conv" in op and 'epilogue "sigmoid(%0)"()' in op for op in ops), ops
    x = rng.standard_normal((SESSIONS, 1, 4, 10)).astype(np.float32)
    _, out = _run(model, {"x": x})
    w32, b32 = w.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    for s in range(SESSIONS):
        acc = _conv1d_ref(x[s, 0].astype(np.float64), w32, b32 if bias else None, 1)
        np.testing.assert_allclose(out["y"][s, 0], 1.0 / (1.0 + np.exp(-acc)), rtol=1e-5, atol=1e-6)


def test_conv_residual_epilogue_reads_a_per_session_input():
    """A residual add of another runtime input: a per-session epilogue input (after wave-cohort)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 4, 3))
    model = onnx_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]), helper.make_node("Add", ["c", "r"], ["a"]),
         helper.make_node("Tanh", ["a"], ["y"])],
        [("x", [1, 4, 8]), ("r", [4, 1])], [("y", [1, 4, 8])], {"w": w},
    )
    ops = _ops(model)
    assert any("wave.conv" in op and 'epilogue "tanh(add(%0, %1))"(%1)' in op for op in ops), ops
    x = rng.standard_normal((SESSIONS, 1, 4, 8)).astype(np.float32)
    r = rng.standard_normal((SESSIONS, 4, 1)).astype(np.float32)
    _, out = _run(model, {"x": x, "r": r})
    w32 = w.astype(np.float32).astype(np.float64)
    for s in range(SESSIONS):
        acc = _conv1d_ref(x[s, 0].astype(np.float64), w32, None, 1) + r[s]
        np.testing.assert_allclose(out["y"][s, 0], np.tanh(acc), rtol=1e-5, atol=1e-6)


def test_epilogue_params_round_trip_and_footprint():
    from wavec.opcodes import (Epilogue, MatmulParams, compile_expr, footprint, n_task_inputs, parse_expr,
                               unpack_params)

    ep = Epilogue((2, 3), ((0, 1),), tuple(compile_expr(parse_expr("relu(add(%0, %1))"))))
    mm = MatmulParams((2, 3), 4, (3, 1), (4, 0, 1), (0, 1, 3), ep)
    assert unpack_params(mm.pack(), 0) == mm
    assert n_task_inputs(mm) == 3
    assert footprint(mm, 2, 1, 5, 3).tolist() == [1, 2, 0, 1]
    bare = MatmulParams((2, 3), 4, (3, 1), (4, 0, 1), (0, 1, 3))
    assert unpack_params(bare.pack(), 0) == bare and n_task_inputs(bare) == 2
    assert bare.pack()[-4:].tolist() == [0, 0, 0, -1]  # the identity epilogue: no extras, rank 0, no code, no body


@pytest.mark.gpu
def test_cuda_epilogues_match_the_interpreter():
    """The kernel's epilogue (lane 0 after the lane-group combine) computes what the interpreter does."""
    from wavec.targets.cuda import runtime

    if not runtime.gpu_available():
        pytest.skip("no CUDA GPU with cuda-bindings here")
    rng = np.random.default_rng(4)
    models = [
        (onnx_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                 helper.make_node("Relu", ["a"], ["y"])],
                [("x", [5, 16])], [("y", [5, 24])],
                {"w": rng.standard_normal((16, 24)), "b": rng.standard_normal(24)}), {"x": (5, 16)}),
        (onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1]), helper.make_node("Sigmoid", ["c"], ["y"])],
                [("x", [1, 4, 10])], [("y", [1, 6, 10])],
                {"w": rng.standard_normal((6, 4, 3)), "b": rng.standard_normal(6)}), {"x": (1, 4, 10)}),
        (onnx_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]), helper.make_node("Add", ["c", "r"], ["a"]),
                 helper.make_node("Tanh", ["a"], ["y"])],
                [("x", [1, 4, 8]), ("r", [4, 1])], [("y", [1, 4, 8])], {"w": rng.standard_normal((4, 4, 3))}),
         {"x": (1, 4, 8), "r": (4, 1)}),
    ]
    for model, shapes in models:
        profile = compile_graph(import_onnx(model), sessions=SESSIONS, workers=4)
        frames = {k: rng.standard_normal((2, SESSIONS, *s)).astype(np.float32) for k, s in shapes.items()}
        reset = np.zeros((2, SESSIONS), bool)
        got = profile.run(frames, backend="cuda", reset=reset)
        want = profile.run(frames, backend="interp", reset=reset)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)
