"""wave-to-wpk lowers a slice of a contiguous block as that block's offset, folds a slice read only by
elementwise ops into them (a strided view), and keeps any other slice as a copy phase. Checked on the interpreter against onnxruntime, fresh
random frames, float32 (tolerance 1e-6 absolute: the folded ops do the same float32 arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from wavec.driver import compile_graph  # noqa: E402
from wavec.frontends.onnx import import_onnx  # noqa: E402


def _ints(name: str, values: list[int]):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def views_model():
    """x [N, 8, 6]: y = x[:, :4, 1:] * x[:, 4:, 1:] + x[:, 7::-2, 1:] (three strided slices, each read by the
    fused ewise only), z = x[:, 4:, 1:] @ w (that slice is also a matmul's operand: a copy), and
    v = x[:, 2:6] @ w6 (rows 2..5 whole: a contiguous block, read in place)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 5])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4, 3])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 4, 3])
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [5, 3], rng.standard_normal(15).astype(np.float32))
    w6 = helper.make_tensor("w6", TensorProto.FLOAT, [6, 3], rng.standard_normal(18).astype(np.float32))
    inits = [w, w6, _ints("lo", [0, 1]), _ints("mid", [4, 6]), _ints("mid1", [4, 1]), _ints("hi", [8, 6]), _ints("axes", [1, 2]),
             _ints("top", [7, 1]), _ints("before_start", [-9, 6]), _ints("back2", [-2, 1]),
             _ints("r2", [2]), _ints("r6", [6]), _ints("axis", [1])]
    nodes = [
        helper.make_node("Slice", ["x", "lo", "mid", "axes"], ["re"]),
        helper.make_node("Slice", ["x", "mid1", "hi", "axes"], ["im"]),
        helper.make_node("Slice", ["x", "top", "before_start", "axes", "back2"], ["rev"]),  # rows 7, 5, 3, 1
        helper.make_node("Mul", ["re", "im"], ["p"]),
        helper.make_node("Add", ["p", "rev"], ["y"]),
        helper.make_node("MatMul", ["im", "w"], ["z"]),
        helper.make_node("Slice", ["x", "r2", "r6", "axis"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w6"], ["v"]),
    ]
    graph = helper.make_graph(nodes, "views", [x], [y, z, v], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_slices_read_by_elementwise_ops_alone_are_views():
    model = views_model()
    profile = compile_graph(import_onnx(model), sessions=3, workers=4)
    phases = [p["name"] for p in profile.meta["phases"]]
    # Of the five slices, only `im` is copied (a matmul reads it with the ewise): 1 slice phase, 2 matmuls.
    assert [name.split("_")[0] for name in phases if name.startswith(("slice", "matmul"))] == ["slice", "matmul", "matmul"]
    frames = np.random.default_rng(1).standard_normal((2, 3, 8, 6)).astype(np.float32)
    got = profile.run({"x": frames}, backend="interp")
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in range(len(frames)):
        want = dict(zip(("y", "z", "v"), runtime.run(None, {"x": frames[b]})))
        for name, value in want.items():
            np.testing.assert_allclose(got[name][b], value, rtol=0, atol=1e-6)
