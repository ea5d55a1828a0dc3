"""wave-to-wpk lowers a slice of a contiguous block as that block's offset, folds a slice read only by
elementwise ops and copies (concat, outputs) into them (a strided view), and keeps any other slice as a
copy phase; a reduction that gives its one element back is a rename too. Checked on the interpreter against onnxruntime, fresh
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
    v = x[:, 2:6] @ w6 (rows 2..5 whole: a contiguous block, read in place), and a reflection-pad-like
    c = concat(x, x[:, 7:3:-1]) with that reversed slice also an output e (concat and output read the view)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 5])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4, 3])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 4, 3])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 12, 6])
    e = helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 4, 6])
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [5, 3], rng.standard_normal(15).astype(np.float32))
    w6 = helper.make_tensor("w6", TensorProto.FLOAT, [6, 3], rng.standard_normal(18).astype(np.float32))
    inits = [w, w6, _ints("lo", [0, 1]), _ints("mid", [4, 6]), _ints("mid1", [4, 1]), _ints("hi", [8, 6]), _ints("axes", [1, 2]),
             _ints("top", [7, 1]), _ints("before_start", [-9, 6]), _ints("back2", [-2, 1]),
             _ints("r2", [2]), _ints("r6", [6]), _ints("axis", [1]), _ints("r7", [7]), _ints("r3", [3]),
             _ints("back1", [-1])]
    nodes = [
        helper.make_node("Slice", ["x", "lo", "mid", "axes"], ["re"]),
        helper.make_node("Slice", ["x", "mid1", "hi", "axes"], ["im"]),
        helper.make_node("Slice", ["x", "top", "before_start", "axes", "back2"], ["rev"]),  # rows 7, 5, 3, 1
        helper.make_node("Mul", ["re", "im"], ["p"]),
        helper.make_node("Add", ["p", "rev"], ["y"]),
        helper.make_node("MatMul", ["im", "w"], ["z"]),
        helper.make_node("Slice", ["x", "r2", "r6", "axis"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w6"], ["v"]),
        helper.make_node("Slice", ["x", "r7", "r3", "axis", "back1"], ["e"]),  # rows 7, 6, 5, 4
        helper.make_node("Concat", ["x", "e"], ["c"], axis=1),
    ]
    graph = helper.make_graph(nodes, "views", [x], [y, z, v, c, e], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_slices_read_by_elementwise_ops_alone_are_views():
    model = views_model()
    profile = compile_graph(import_onnx(model), sessions=3, workers=4)
    phases = [p["name"] for p in profile.meta["phases"]]
    # Of the six slices, only `im` is copied (a matmul reads it with the ewise): 1 slice phase, 2 matmuls.
    assert [name.split("_")[0] for name in phases if name.startswith(("slice", "matmul"))] == ["slice", "matmul", "matmul"]
    frames = np.random.default_rng(1).standard_normal((2, 3, 8, 6)).astype(np.float32)
    got = profile.run({"x": frames}, backend="interp")
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in range(len(frames)):
        want = dict(zip(("y", "z", "v", "c", "e"), runtime.run(None, {"x": frames[b]})))
        for name, value in want.items():
            np.testing.assert_allclose(got[name][b], value, rtol=0, atol=1e-6)


def _state_model(nodes, state_sizes: dict[str, int], inits=()):
    """x [N, 4] and states named in ``state_sizes`` ({name: width}, each ``name`` -> ``name + "N"``); y, the
    states' new values as outputs."""
    def vi(name, width):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", width])

    inputs = [vi("x", 4), *(vi(n, w) for n, w in state_sizes.items())]
    outputs = [vi("y", 4), *(vi(n + "N", w) for n, w in state_sizes.items())]
    graph = helper.make_graph(nodes, "states", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


STATE_CASES = {
    # a delay line: b's new value is a block of a's old one, which a's own write replaces
    "block of another state": ([helper.make_node("Concat", ["b", "x"], ["aN"], axis=1),
                                helper.make_node("Slice", ["a", "four", "eight", "axis"], ["bN"]),
                                helper.make_node("Add", ["b", "x"], ["y"])], {"a": 8, "b": 4}),
    # b takes a's old value whole, a a new one
    "another state whole": ([helper.make_node("Add", ["a", "x"], ["aN"]), helper.make_node("Identity", ["a"], ["bN"]),
                             helper.make_node("Mul", ["b", "x"], ["y"])], {"a": 4, "b": 4}),
    # a state reversed into itself: read through a view of its own slot
    "own state reversed": ([helper.make_node("Slice", ["h", "last", "before_first", "axis", "back"], ["hN"]),
                            helper.make_node("Add", ["h", "x"], ["y"])], {"h": 4}),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
def test_a_state_written_from_an_old_state_reads_it_before_any_write(case, tmp_path):
    """The state writes run after the graph, one after another: a new value that is (a view of) an old
    state is copied out during the graph, else a write earlier in that order would change what a later
    one reads. Four beats against onnxruntime, the states carried between them."""
    nodes, sizes = STATE_CASES[case]
    inits = [_ints("four", [4]), _ints("eight", [8]), _ints("axis", [1]), _ints("last", [-1]),
             _ints("before_first", [-5]), _ints("back", [-1])]
    model = _state_model(nodes, sizes, inits)
    path = tmp_path / "states.onnx"
    onnx.save(model, path)
    profile = compile_graph(import_onnx(path, states=[(n, n + "N") for n in sizes]), sessions=3, workers=4)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 4)).astype(np.float32)
    reset = np.zeros((4, 3), bool)
    reset[0] = True
    got = profile.run({"x": x}, backend="interp", reset=reset)
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    states = {n: np.zeros((3, w), np.float32) for n, w in sizes.items()}
    for b in range(len(x)):
        y, *new = runtime.run(["y", *(n + "N" for n in sizes)], {"x": x[b], **states})
        np.testing.assert_allclose(got["y"][b], y, rtol=0, atol=1e-6)
        states = dict(zip(sizes, new))


def test_a_reduction_over_unit_axes_is_a_rename_unless_it_changes_the_element():
    """mean over a size-1 axis gives its element back (no task); l2 gives its absolute value (a task)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 6]) for n in ("mean", "l2")]
    nodes = [helper.make_node("ReduceMean", ["x", "axis"], ["mean"], keepdims=0),
             helper.make_node("ReduceL2", ["x", "axis"], ["l2"], keepdims=0)]
    model = helper.make_model(helper.make_graph(nodes, "unit", [x], outs, [_ints("axis", [1])]),
                              opset_imports=[helper.make_opsetid("", 18)])
    profile = compile_graph(import_onnx(model), sessions=3, workers=4)
    assert [p["op"] for p in profile.meta["phases"] if p["op"] == "wave.reduce"] == ["wave.reduce"]  # the l2 alone
    frames = np.random.default_rng(4).standard_normal((2, 3, 1, 6)).astype(np.float32)
    got = profile.run({"x": frames}, backend="interp")
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in range(len(frames)):
        for name, value in zip(("mean", "l2"), runtime.run(None, {"x": frames[b]})):
            np.testing.assert_allclose(got[name][b], value, rtol=0, atol=1e-6)


def test_the_parts_of_a_concat_share_the_workers():
    """c = concat of 16 computed parts (x[:, 4i:4i+4] * (i + 1)) at 64 sessions over 132 workers: each part is
    tiled for 8 workers, 128 tasks in all (one wave), where tiling each for all 132 made 1,024 (duplex:1b's
    codec: 20,480 tasks of 96 floats at 64 sessions). Only the output reads c, so its copy is the concat. The
    values match onnxruntime."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 64])
    inits, nodes = [_ints("axis", [1])], []
    for i in range(16):
        inits += [_ints(f"lo{i}", [4 * i]), _ints(f"hi{i}", [4 * i + 4]),
                  helper.make_tensor(f"k{i}", TensorProto.FLOAT, [], [float(i + 1)])]
        nodes += [helper.make_node("Slice", ["x", f"lo{i}", f"hi{i}", "axis"], [f"s{i}"]),
                  helper.make_node("Mul", [f"s{i}", f"k{i}"], [f"p{i}"])]
    nodes.append(helper.make_node("Concat", [f"p{i}" for i in range(16)], ["c"], axis=1))
    model = helper.make_model(helper.make_graph(nodes, "parts", [x], [c], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    profile = compile_graph(import_onnx(model), sessions=64, workers=132)
    (concat,) = [p for p in profile.meta["phases"] if p["name"] == "output_c"]  # c's only reader: its copy
    assert concat["tasks"] == 128 and not [p for p in profile.meta["phases"] if p["op"] == "wave.concat"]
    frames = np.random.default_rng(2).standard_normal((2, 64, 64)).astype(np.float32)
    got = profile.run({"x": frames}, backend="interp")
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in range(len(frames)):
        for s in range(64):
            np.testing.assert_allclose(got["c"][b, s], runtime.run(None, {"x": frames[b, s:s + 1]})[0][0], rtol=0,
                                       atol=1e-6)
