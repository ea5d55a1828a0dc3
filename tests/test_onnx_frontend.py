"""frontends/onnx on the real Silero VAD: the IR it gives (folded, verified, session boundaries with
their cohort axes) and its numerics over a stream of beats against onnxruntime on the original
model; plus the errors a user gets for what the frontend rejects."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from wavec.analysis import wave_eval
from wavec.dialects import wave
from wavec.errors import UnsupportedModelError
from wavec.frontends.onnx import import_onnx
from wavec.models import silero_vad_path

FRAME = 576  # 512 new samples + 64 of context at 16 kHz
BEATS = 20


@pytest.fixture(scope="module")
def silero_path():
    return silero_vad_path()


@pytest.fixture(scope="module")
def silero(silero_path):
    return import_onnx(silero_path, bindings={"sr": 16000}, frames={"input": FRAME}, states=[("state", "stateN")])


def _ops(graph):
    return [op for op in graph.module.walk() if op.name.startswith("wave.")]


def test_silero_ir_is_folded_and_verifies(silero):
    silero.module.verify()
    names = {op.name for op in silero.module.walk()}
    assert names <= {"builtin.module", "func.func", "func.return"} | {op.name for op in wave.Wave.operations}
    assert silero.name == "silero_vad_16k_op15" and silero.bindings == {"sr": 16000}
    # No trace of the static shape machinery or the control flow the export carries.
    text = str(silero.module)
    for leftover in ("If", "Shape", "Equal", "Gather", "onnx"):
        assert leftover not in text


def test_silero_session_boundaries(silero):
    ops = _ops(silero)
    by_kind = lambda cls: {op.sym: op for op in ops if isinstance(op, cls)}  # noqa: E731
    (inp,) = by_kind(wave.InputOp).values()
    (state,) = by_kind(wave.StateOp).values()
    outs = by_kind(wave.OutputOp)
    assert inp.sym == "input" and wave.shape_of(inp.result) == (1, FRAME)
    assert inp.attributes["cohort_axis"].value.data == 0
    assert state.sym == "state" and wave.shape_of(state.result) == (2, 1, 128)
    assert state.attributes["cohort_axis"].value.data == 1
    assert set(outs) == {"output", "stateN"}
    assert wave.shape_of(outs["output"].value) == (1, 1) and outs["output"].attributes["cohort_axis"].value.data == 0
    assert outs["stateN"].attributes["cohort_axis"].value.data == 1
    (write,) = by_kind(wave.StateWriteOp).values()
    assert write.value is outs["stateN"].value
    # Weights: float32, each referenced by exactly one wave.weight; the state starts at zero.
    weight_ops = by_kind(wave.WeightOp)
    assert set(silero.weights) == set(weight_ops) | {"state"}
    assert all(w.dtype == np.float32 for w in silero.weights.values())
    for name, op in weight_ops.items():
        assert silero.weights[name].shape == wave.shape_of(op.result)
    assert not silero.weights["state"].any()


def test_silero_matches_onnxruntime_over_beats(silero, silero_path):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(silero_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1234)
    state = silero.weights["state"].copy()
    ref_state = state.copy()
    worst = {"output": 0.0, "stateN": 0.0}
    for _ in range(BEATS):
        frame = rng.uniform(-0.5, 0.5, (1, FRAME)).astype(np.float32)
        outputs, new_states = wave_eval.evaluate(silero.module, {"input": frame}, {"state": state}, silero.weights)
        ref_out, ref_state = session.run(
            ["output", "stateN"], {"input": frame, "state": ref_state, "sr": np.array(16000, np.int64)}
        )
        worst["output"] = max(worst["output"], float(np.abs(outputs["output"] - ref_out).max()))
        worst["stateN"] = max(worst["stateN"], float(np.abs(outputs["stateN"] - ref_state).max()))
        np.testing.assert_array_equal(new_states["state"], outputs["stateN"])
        state = new_states["state"]
    assert worst["output"] <= 1e-4 and worst["stateN"] <= 1e-4, worst


# --------------------------------------------------------------------------------------------
# Errors: one line, naming the file, the node, the op type and opset, and what to do.


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_op_is_one_clear_line(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model([helper.make_node("Det", ["x"], ["y"], name="det0")], [x], [y])
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError) as err:
        import_onnx(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("tiny.onnx: node 'det0' (Det, opset 17):") and "Supported runtime ops" in msg


def test_runtime_comparison_is_rejected_with_a_fix():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, None)
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    model = _model([helper.make_node("Equal", ["x", "zero"], ["y"], name="eq")], [x], [y], initializers=[zero])
    with pytest.raises(UnsupportedModelError, match=r"tiny.onnx: node 'eq' \(Equal, opset 17\): comparison .* Export"):
        import_onnx(model)


def test_unbound_symbolic_dim_is_rejected():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time"])
    s2 = helper.make_tensor_value_info("s2", TensorProto.FLOAT, ["batch", 4])
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["s"], ["s2"])], [x, s], [y, s2]
    )
    with pytest.raises(UnsupportedModelError) as err:
        import_onnx(model, states=[("s", "s2")])
    msg = str(err.value)
    assert "\n" not in msg and "'x'" in msg and "'time'" in msg and "frames={'x': N}" in msg
    # Bound, it imports: batch is the cohort axis, time is the frame length.
    graph = import_onnx(model, frames={"x": 16}, states=[("s", "s2")])
    graph.module.verify()
    (inp,) = [op for op in _ops(graph) if isinstance(op, wave.InputOp)]
    assert wave.shape_of(inp.result) == (1, 16) and inp.attributes["cohort_axis"].value.data == 0


def test_runtime_int_input_must_be_bound():
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [4])
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [x], [y])
    with pytest.raises(UnsupportedModelError, match=r"input 'x' is int64; runtime tensors must be float32"):
        import_onnx(model)


def test_static_model_has_no_cohort_axis_and_folds_constants():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [
        helper.make_node("Mul", ["w", "w"], ["w2"]),  # over constants: folds into a new weight
        helper.make_node("Add", ["x", "w2"], ["y"], name="add"),
    ]
    graph = import_onnx(_model(nodes, [x], [y], initializers=[w]))
    graph.module.verify()
    ops = _ops(graph)
    assert [op.name for op in ops] == ["wave.input", "wave.weight", "wave.ewise", "wave.output"]
    assert ops[0].attributes["cohort_axis"].value.data == -1
    (weight,) = [op for op in ops if isinstance(op, wave.WeightOp)]
    np.testing.assert_array_equal(graph.weights[weight.sym], [1.0, 4.0, 9.0])


# --------------------------------------------------------------------------------------------
# Numerics the conformance suite leaves out (its reflect/edge pads are int32, its RNNs forward).


def _compare_with_reference(model, feeds, rtol=1e-5, atol=1e-5, reference="onnxruntime"):
    """wave_eval of the import against onnxruntime (or onnx's reference evaluator, for what
    onnxruntime lacks: batch-first recurrences)."""
    graph = import_onnx(model)
    graph.module.verify()
    outputs, _ = wave_eval.evaluate(graph.module, feeds, {}, graph.weights)
    if reference == "onnxruntime":
        ort = pytest.importorskip("onnxruntime")
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    else:
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(model).run(None, feeds)
    for vi, w in zip(model.graph.output, want):
        np.testing.assert_allclose(outputs[vi.name], w, rtol=rtol, atol=atol, err_msg=vi.name)
    return graph


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 0], [0, -1, 2, 3]])
def test_pad_modes_match_reference(mode, pads):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper_from([*pads], "pads", np.int64), numpy_helper_from(0.25, "value", np.float32)]
    node = helper.make_node("Pad", ["x", "pads", "value"] if mode == "constant" else ["x", "pads"], ["y"], mode=mode)
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)}
    graph = _compare_with_reference(_model([node], [x], [y], opset=18, initializers=inits), feeds)
    if mode == "constant":  # the fill is made on the device, not read from a weight
        assert any(isinstance(op, wave.EwiseOp) and not op.inputs for op in _ops(graph))


def numpy_helper_from(value, name, dtype):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value, dtype), name)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_bidirectional_recurrences_match_reference(op, layout):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    seq, batch, inp, hid = 3, 2, 5, 4
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.5, 0.5, (2, gates * hid, inp)).astype(np.float32)
    r = rng.uniform(-0.5, 0.5, (2, gates * hid, hid)).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, (2, 2 * gates * hid)).astype(np.float32)
    x_shape = [seq, batch, inp] if layout == 0 else [batch, seq, inp]
    h_shape = [2, batch, hid] if layout == 0 else [batch, 2, hid]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    h0 = helper.make_tensor_value_info("h0", TensorProto.FLOAT, h_shape)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h")]
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    node = helper.make_node(op, ["x", "w", "r", "b", "", "h0"], ["y", "y_h"], hidden_size=hid,
                            direction="bidirectional", layout=layout, **extra)
    inits = [numpy_helper_from(w, "w", np.float32), numpy_helper_from(r, "r", np.float32),
             numpy_helper_from(bias, "b", np.float32)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "h0": rng.standard_normal(h_shape).astype(np.float32)}
    model = _model([node], [x, h0], outs, opset=14, initializers=inits)
    _compare_with_reference(model, feeds, rtol=1e-4, atol=1e-5, reference="onnx" if layout else "onnxruntime")


def _reads(value, source) -> bool:
    """Whether ``value`` is computed from ``source`` (through any chain of ops)."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v is source:
            return True
        if id(v) not in seen and hasattr(v, "owner") and hasattr(v.owner, "operands"):
            seen.add(id(v))
            todo.extend(v.owner.operands)
    return False


@pytest.mark.parametrize("bias", [True, False])
def test_one_step_lstm_runs_its_recurrent_matmul_off_the_input_chain(bias):
    """A one-step LSTM from a given state (Silero's decoder): H0 R^T reads only the state, so the input's
    matmul adds it as its epilogue, and X waits for one matmul, not two. Checked against onnxruntime."""
    from xdsl.context import Context

    from wavec.passes.wave_fuse import WaveFuse

    batch, inp, hid = 2, 5, 4
    rng = np.random.default_rng(11)
    inits = [numpy_helper_from(rng.uniform(-0.5, 0.5, (1, 4 * hid, inp)), "w", np.float32),
             numpy_helper_from(rng.uniform(-0.5, 0.5, (1, 4 * hid, hid)), "r", np.float32)]
    if bias:
        inits.append(numpy_helper_from(rng.uniform(-0.5, 0.5, (1, 8 * hid)), "b", np.float32))
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
           for n, s in (("x", [1, batch, inp]), ("h0", [1, batch, hid]), ("c0", [1, batch, hid]))]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y_h", "y_c")]
    node = helper.make_node("LSTM", ["x", "w", "r", "b" if bias else "", "", "h0", "c0"], ["", "y_h", "y_c"],
                            hidden_size=hid)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in
             (("x", (1, batch, inp)), ("h0", (1, batch, hid)), ("c0", (1, batch, hid)))}
    graph = _compare_with_reference(_model([node], ins, outs, opset=14, initializers=inits), feeds, rtol=1e-5)
    WaveFuse().apply(Context(), graph.module)
    x = next(op.result for op in _ops(graph) if isinstance(op, wave.InputOp) and op.sym == "x")
    matmuls = [op for op in _ops(graph) if isinstance(op, wave.MatmulOp)]
    assert len(matmuls) == 2
    (on_x,) = [m for m in matmuls if _reads(m.a, x)]
    (recurrent,) = [m for m in matmuls if m is not on_x]
    assert not _reads(recurrent.result, x)
    assert [v.owner for v in on_x.epilogue_inputs] == [recurrent]


def _batch_model(node, extra_inits=(), out_shape=("N", 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
    return _model([node], [x], [y], initializers=list(extra_inits))


def _i64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


@pytest.mark.parametrize("node, inits, out_shape", [
    (helper.make_node("ReduceSum", ["x", "ax0"], ["y"], name="sum_sessions"), [_i64("ax0", [0])], (1, 4)),
    (helper.make_node("Slice", ["x", "s", "e", "ax0", "st"], ["y"], name="reverse_sessions"),
     [_i64("s", [-1]), _i64("e", [-(2 ** 62)]), _i64("ax0", [0]), _i64("st", [-1])], ("N", 4)),
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=0, name="stack_sessions"), [], ("M", 4)),
    (helper.make_node("Softmax", ["x"], ["y"], axis=-2, name="softmax_sessions"), [], ("N", 4)),
])
def test_an_op_across_the_batch_dim_is_refused(node, inits, out_shape):
    """With a batch of sessions these mix them (onnxruntime sums, reverses, stacks or normalizes across the
    batch); a session alone sees the dim as 1. Refused by name, not imported as something else."""
    with pytest.raises(UnsupportedModelError, match=rf"node '{node.name}' \({node.op_type}\) works along axis 0 .*cohort dim 'N'"):
        import_onnx(_batch_model(node, inits, out_shape))


def _nodes_model(nodes, inits=(), out_shape=("N", 4), opset=17, x_shape=("N", 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
    return _model(nodes, [x], [y], opset=opset, initializers=list(inits))


def _in_if_branch(node):
    """``node`` inside the then-branch of an If on a constant, as Silero's compute sits in If on `sr`."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    branch = lambda n: helper.make_graph([n], "branch", [], [y])  # noqa: E731
    other = helper.make_node("Identity", ["x"], ["y"])
    return [helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
            helper.make_node("If", ["cond"], ["y"], then_branch=branch(node), else_branch=branch(other), name="if")]


MIXING = {  # name: (nodes, initializers, output shape, opset, input shape)
    "reduce in an If branch": (_in_if_branch(helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], name="mean_n")),
                               [], ("N", 4), 13, ("N", 4)),
    "reverse after a Shape-driven Reshape": ([helper.make_node("Shape", ["x"], ["shp"]),
                                              helper.make_node("Reshape", ["x", "shp"], ["r"]),
                                              helper.make_node("Slice", ["r", "s", "e", "ax0", "st"], ["y"], name="rev")],
                                             [_i64("s", [-1]), _i64("e", [-(2 ** 62)]), _i64("ax0", [0]), _i64("st", [-1])],
                                             ("N", 4), 17, ("N", 4)),
    "opset-11 softmax from axis 1": ([helper.make_node("Softmax", ["x"], ["y"], name="sm")], [], (3, "N", 5), 11, (3, "N", 5)),
    "axes from Constant value_ints": ([helper.make_node("Constant", [], ["ax"], value_ints=[0]),
                                       helper.make_node("ReduceSum", ["x", "ax"], ["y"], name="sum_n")], [], (1, 4), 17, ("N", 4)),
    "empty axes reduce every axis": ([helper.make_node("ReduceMean", ["x", "none"], ["y"], name="mean_all")],
                                     [helper.make_tensor("none", TensorProto.INT64, [0], [])], (1, 1), 18, ("N", 4)),
    "concat after a constant": ([helper.make_node("Concat", ["c", "x"], ["y"], axis=0, name="cat")],
                                [helper.make_tensor("c", TensorProto.FLOAT, [1, 4], [0.0] * 4)], ("M", 4), 17, ("N", 4)),
}


@pytest.mark.parametrize("case", list(MIXING))
def test_mixing_the_batch_is_refused_where_inference_places_it(case):
    nodes, inits, out_shape, opset, x_shape = MIXING[case]
    with pytest.raises(UnsupportedModelError, match="cohort dim 'N'"):
        import_onnx(_nodes_model(nodes, inits, out_shape, opset, x_shape))


NO_OPS_ALONG_THE_BATCH = {
    "a whole-range slice": ([helper.make_node("Slice", ["x", "s", "e", "ax"], ["y"])],
                            [_i64("s", [0, 1]), _i64("e", [2 ** 63 - 1, 2 ** 63 - 1]), _i64("ax", [0, 1])], ("N", 3)),
    "a one-input concat": ([helper.make_node("Concat", ["x"], ["y"], axis=0)], [], ("N", 4)),
    "a one-output split": ([helper.make_node("Split", ["x"], ["y"], axis=0, num_outputs=1)], [], ("N", 4)),
}


@pytest.mark.parametrize("case", list(NO_OPS_ALONG_THE_BATCH))
def test_a_node_that_keeps_the_batch_whole_is_imported(case):
    nodes, inits, out_shape = NO_OPS_ALONG_THE_BATCH[case]
    import_onnx(_nodes_model(nodes, inits, out_shape, 18)).module.verify()


def test_an_op_along_other_axes_is_imported():
    node = helper.make_node("ReduceSum", ["x", "ax1"], ["y"], keepdims=1)
    graph = import_onnx(_batch_model(node, [_i64("ax1", [1])], ("N", 1)))
    graph.module.verify()
