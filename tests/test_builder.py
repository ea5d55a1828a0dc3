"""frontends/builder: the API, its errors (each naming the user's file:line, the op and what is wrong),
weight sources, and every op compiled and run on `interp` against the float64 numpy reference
(frontends/builder/reference.py) at small shapes, over a few beats with sessions joining late.

Tolerance: max |interp - reference| / (1 + |reference|) <= 1e-4 (float32 kernels against float64).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from builder_harness import run_against_reference
from wavec.cli import main as wavec_main
from wavec.driver import compile_graph
from wavec.dialects import wave
from wavec.errors import BuilderError, WavecError
from wavec.frontends.builder import Model, from_npz, from_onnx, from_safetensors
from wavec.opcodes import Arena, Opcode, unpack_params
from wavec.payload import operand_arena
from wavec.weights import RandomWeight, round_to_bf16

TOLERANCE = 1e-4


def here(offset: int = 1) -> str:
    """``test_builder.py:<line>`` of the caller's line plus ``offset``."""
    return f"test_builder.py:{sys._getframe(1).f_lineno + offset}"


def check(model: Model, beats: int = 8, sessions: int = 2) -> None:
    run_against_reference(model, sessions=sessions, beats=beats, workers=3, seed=1, tolerance=TOLERANCE)


# ---------------------------------------------------------------------------------------------
# API


def test_explicit_state_model_lowers_to_verified_wave_ir_with_seeded_weights():
    m = Model("acc", seed=7)
    x = m.input("x", [4])
    s = m.state("s", [4], init=0.5)
    w = m.weight("w", [4, 4])
    y = m.tanh(m.matmul(x, w) + s)
    m.state_write("s", y)
    m.output("y", y * 2.0)
    graph = m.lower()
    graph.module.verify()
    ops = {op.name for op in graph.module.walk()}
    assert {"wave.input", "wave.state", "wave.weight", "wave.matmul", "wave.state_write", "wave.output"} <= ops
    assert isinstance(graph.weights["w"], RandomWeight)  # a spec, never an array
    assert graph.weights["w"] == m.weights["w"].value
    assert m.parameter_count() == 16
    check(m)


def test_random_weights_depend_on_seed_and_name_only():
    a, b, c = Model(seed=1), Model(seed=1), Model(seed=2)
    wa, wb, wc = (mm.weight("w", [8, 8]) for mm in (a, b, c))
    va, vb, vc = (mm.weights["w"].value.materialize() for mm in (a, b, c))
    assert np.array_equal(va, vb) and not np.array_equal(va, vc)
    assert np.abs(va).max() <= 1 / np.sqrt(8)  # default scale 1/sqrt(fan_in)


def test_weight_sources(tmp_path):
    rng = np.random.default_rng(0)
    arr = rng.normal(size=(3, 5)).astype(np.float32)
    np.savez(tmp_path / "w.npz", proj=arr)
    from safetensors.numpy import save_file

    save_file({"proj": arr}, str(tmp_path / "w.safetensors"))
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph([helper.make_node("Identity", ["proj"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 5])],
                              [numpy_helper.from_array(arr, "proj")])
    onnx.save(helper.make_model(graph), str(tmp_path / "w.onnx"))
    m = Model()
    sources = {
        "a": arr, "proj": from_npz(tmp_path / "w.npz"), "c": from_safetensors(tmp_path / "w.safetensors", "proj"),
        "d": from_onnx(tmp_path / "w.onnx", "proj"),
    }
    for name, init in sources.items():
        m.weight(name, [3, 5], init=init)
        assert np.array_equal(m.weights[name].value, arr), name
    m.weight("e", [3, 5], "bf16", init=arr)
    assert np.array_equal(m.weights["e"].value, round_to_bf16(arr))
    m.weight("ones", [3], init="ones")
    assert np.array_equal(m.weights["ones"].value.materialize(), np.ones(3, np.float32))
    with pytest.raises(BuilderError, match=rf"{here()}: weight: 'f': .* has no tensor 'nope'"):
        m.weight("f", [3, 5], init=from_npz(tmp_path / "w.npz", "nope"))


def test_a_layer_run_twice_shares_weights_and_chains_carries():
    m = Model("twice")
    x = m.input("x", [3, 2])
    w = m.weight("w", [3, 3, 2])
    y1 = m.conv1d(x, w, name="c")
    y2 = m.conv1d(y1, m.weight("w", [3, 3, 2]), name="c")  # same weight, context chained
    m.output("y", y2)
    assert len(m.weights) == 1 and list(m.carries) == ["c.context"]
    assert m.carries["c.context"].value.node is y2.node
    check(m)
    with pytest.raises(BuilderError, match=rf"{here()}: weight: 'w' is declared again as \[3, 3\] fp32"):
        m.weight("w", [3, 3])


# ---------------------------------------------------------------------------------------------
# Errors point at the user's line


def test_shape_errors_name_the_line_and_the_op():
    m = Model()
    a, b = m.input("a", [3, 4]), m.input("b", [5, 2])
    with pytest.raises(BuilderError, match=rf"{here()}: matmul: contraction mismatch: \[3, 4\] @ \[5, 2\]"):
        m.matmul(a, b)
    with pytest.raises(BuilderError, match=rf"{here()}: add: shapes \[3, 4\] and \[5, 2\] do not broadcast"):
        a + b
    with pytest.raises(BuilderError, match=rf"{here()}: attention: 3 query heads are not a multiple of 2"):
        m.attention(m.input("q", [3, 4]), m.input("k", [6, 2, 4]), m.input("v", [6, 2, 4]))
    with pytest.raises(BuilderError, match=rf"{here()}: conv1d: w \[4, 2, 3\] with groups=1"):
        m.conv1d(a, m.weight("w", [4, 2, 3]), name="c")
    with pytest.raises(BuilderError, match=rf"{here()}: reshape: \[3, 4\] \(12 elements\) cannot become \[5\]"):
        m.reshape(a, [5])
    with pytest.raises(BuilderError, match=rf"{here()}: gru_cell: W is \[4, 9\], expected \[4, 6\]"):
        m.gru_cell(m.input("x", [4]), m.state("h", [2]), m.weight("W", [4, 9]), m.weight("R", [2, 6]), 0.0, 0.0)
    with pytest.raises(BuilderError, match=rf"{here()}: weight: 'i': init array has shape \[2\], the declaration says \[3\]"):
        m.weight("i", [3], init=np.zeros(2))


def test_dtype_errors():
    m = Model()
    with pytest.raises(BuilderError, match=rf"{here()}: weight: dtype 'fp16' is not supported here; use one of fp32, bf16"):
        m.weight("w", [2], "fp16")
    with pytest.raises(BuilderError, match=rf"{here()}: state: dtype 'bf16' is not supported here; use one of fp32"):
        m.state("s", [2], "bf16")
    with pytest.raises(BuilderError, match=rf"{here()}: input: dtype 'int8'"):
        m.input("x", [2], "int8")


def test_bf16_weights_make_matmuls_whose_b_is_tf32():
    """A bf16 weight lowers to wave.weight {dtype = "bf16"}; a MATMUL reading it (directly, or through the copy a
    transpose makes) carries b_tf32 = 1, so the tensor-core body skips b's split; an fp32 weight's and an
    activation's MATMULs carry 0. The values still run against the float64 reference."""
    m = Model("bf16", seed=3)
    x = m.input("x", [8])
    wb = m.weight("wb", [8, 8], "bf16")
    wt = m.weight("wt", [8, 8], "bf16")
    wf = m.weight("wf", [8, 8])
    h = m.matmul(m.matmul(m.matmul(x, wb), m.transpose(wt, [1, 0])), wf)
    m.output("y", m.matmul(m.reshape(h, [8, 1]), m.reshape(x, [1, 8])))
    graph = m.lower()
    dtypes = {op.sym: op.is_bf16 for op in graph.module.walk() if isinstance(op, wave.WeightOp)}
    assert dtypes == {"wb": True, "wt": True, "wf": False}
    profile = compile_graph(graph, sessions=2, workers=3)
    b_tf32 = {}  # b's tensor (its arena and offset) -> the word of the MATMULs reading it
    for r in profile.payloads:
        if int(r["opcode"]) == Opcode.MATMUL:
            b = (operand_arena(r, 1), int(r["offset"][1]))
            b_tf32.setdefault(b, set()).add(unpack_params(profile.params, int(r["params"])).b_tf32)
    weights = {(int(Arena.WEIGHTS), t["offset"]): t["name"] for t in profile.meta["tensors"] if t["arena"] == "weights"}
    named = sorted((weights.get(b, "activation"), sorted(words)) for b, words in b_tf32.items())
    # the activation h, wt's transposed copy (an activation too), wb, wf
    assert named == [("activation", [False]), ("activation", [True]), ("w.wb", [True]), ("w.wf", [False])]
    check(m)


def test_a_bf16_weight_whose_values_are_not_bf16_is_refused():
    """The promise is checked against the blob before the pipeline runs: the GEMMs would drop the low bits."""
    m = Model("lie", seed=3)
    x = m.input("x", [8])
    m.output("y", m.matmul(x, m.weight("w", [8, 8], "bf16", init=np.full((8, 8), 0.1, np.float32))))
    graph = m.lower()
    compile_graph(graph, sessions=1, workers=2)  # the builder rounded the array: it holds
    graph = m.lower()
    graph.weights["w"] = np.full((8, 8), 0.1, np.float32)
    with pytest.raises(WavecError, match="wave.weight 'w' is declared bf16, but its values are not all bfloat16 numbers"):
        compile_graph(graph, sessions=1, workers=2)


def test_state_errors():
    m = Model()
    x = m.input("x", [2])
    s = m.state("s", [2])
    with pytest.raises(BuilderError, match=rf"{here()}: state_write: state 'nope' was never declared"):
        m.state_write("nope", x)
    with pytest.raises(BuilderError, match=rf"{here()}: state_write: state 's' is \[2\], the value is \[3\]"):
        m.state_write("s", m.input("z", [3]))
    first = here()
    m.state_write(s, x + s)
    with pytest.raises(BuilderError, match=rf"{here()}: state_write: state 's' is written twice \(first at .*{first}\)"):
        m.state_write("s", x)
    declared = here()
    m.state("t", [2])
    m.output("y", x)
    with pytest.raises(BuilderError, match=rf"{declared}: state: state 't' is never written"):
        m.lower()
    with pytest.raises(BuilderError, match=rf"{here()}: state: name 's' is already declared"):
        m.state("s", [2])


# ---------------------------------------------------------------------------------------------
# Each op against the reference


def test_elementwise_functions():
    m = Model("ewise")
    a, b = m.input("a", [3, 4]), m.input("b", [4])
    pos = m.abs(a) + 0.5
    outs = {fn: m.ewise(fn, a) for fn in ("neg", "exp", "tanh", "sigmoid", "relu", "silu", "gelu", "softplus",
                                           "sin", "cos", "square", "abs")}
    outs.update({fn: m.ewise(fn, pos) for fn in ("log", "sqrt", "rsqrt")})
    outs.update({fn: m.ewise(fn, a, b) for fn in ("add", "sub", "mul", "maximum", "minimum", "lt", "le", "gt", "ge",
                                                   "swiglu")})
    outs["div"] = a / (m.abs(b) + 1.0)
    outs["pow"] = m.ewise("pow", pos, 1.5)
    outs["where"] = m.where(m.ewise("gt", a, 0.0), a, b * 3.0)
    outs["eq"] = m.ewise("eq", m.relu(a), 0.0)
    outs["scalar_left"] = 2.0 - a
    for fn, t in outs.items():
        m.output(fn, t)
    check(m)


def test_matmul_forms_and_reductions():
    m = Model("mm")
    v, x, y = m.input("v", [5]), m.input("x", [2, 3, 5]), m.input("y", [2, 5, 4])
    w = m.weight("w", [5, 4])
    m.output("vec", m.linear(v, w, m.weight("b", [4], scale=0.1)))
    m.output("batched", m.matmul(x, y))  # two runtime operands
    m.output("broadcast_rt", m.matmul(x, m.reshape(v, [5, 1])))  # runtime [5, 1] against batch [2]
    m.output("shared_left", m.matmul(m.weight("l", [3, 2]), m.reshape(m.slice(v, 0, 0, 2), [2, 1])))
    for kind in ("sum", "mean", "max", "min"):
        m.output(f"r_{kind}", m.reduce(kind, x, [0, 2], keepdims=kind == "mean"))
    check(m)


def test_softmax_norms_rope():
    m = Model("norms")
    x = m.input("x", [3, 8])
    m.output("softmax0", m.softmax(x, 0))
    m.output("softmax1", m.softmax(x * 4.0, -1))
    m.output("layer_norm", m.layer_norm(x, m.weight("g", [8]), m.weight("b", [8])))
    m.output("rms_norm", m.rms_norm(x, m.weight("g2", [8])))
    m.output("rope", m.rope(x, m.beat(), base=100.0))
    check(m, beats=12)


def test_shape_ops():
    m = Model("shapes")
    x, y = m.input("x", [2, 3, 4]), m.input("y", [2, 1, 4])
    m.output("concat", m.concat([x, y, x], 1))
    m.output("slice", m.slice(x, 2, 1, 4, 2))
    parts = m.split(x, [1, 2], axis=1)
    m.output("split", parts[1] * parts[0])
    m.output("reshape", m.reshape(x, [4, -1]))
    m.output("transpose", m.transpose(x, [2, 0, 1]))
    check(m)


def test_streaming_conv1d_with_dilation_groups_and_bias():
    m = Model("conv")
    x = m.input("x", [4, 3])
    y = m.conv1d(x, m.weight("w", [6, 2, 3]), m.weight("b", [6], scale=0.1), name="c1", dilation=2, groups=2)
    y = m.conv1d(m.silu(y), m.weight("w2", [2, 6, 1]), name="pointwise")  # kernel 1: no context
    m.output("y", y)
    assert set(m.carries) == {"c1.context"} and m.carries["c1.context"].shape == (4, 4)
    check(m, beats=10)


@pytest.mark.parametrize("kernel, stride", [(4, 2), (5, 2), (3, 3)])
def test_streaming_conv_transpose1d(kernel, stride):
    m = Model("convt")
    x = m.input("x", [3, 2])
    m.output("y", m.conv_transpose1d(x, m.weight("w", [3, 4, kernel]), m.weight("b", [4], scale=0.1),
                                     name="up", stride=stride))
    check(m, beats=10)


def test_recurrent_cells_batched():
    m = Model("cells")
    x = m.input("x", [2, 5])
    h, c, g = m.state("h", [2, 3]), m.state("c", [2, 3]), m.state("g", [3], init=0.25)
    h2, c2 = m.lstm_cell(x, h, c, m.weight("W", [5, 12]), m.weight("R", [3, 12]), m.weight("b", [12], scale=0.1))
    g2 = m.gru_cell(m.reshape(m.slice(x, 0, 1, 2), [5]), g,
                    m.weight("Wg", [5, 9]), m.weight("Rg", [3, 9]), m.weight("bw", [9]), m.weight("br", [9]))
    for name, v in (("h", h2), ("c", c2), ("g", g2)):
        m.state_write(name, v)
        m.output(name, v)
    check(m, beats=10)


def test_ssm_step():
    m = Model("ssm")
    x, dt_in, bc = m.input("x", [2, 3]), m.input("dt", [2]), m.input("bc", [8])
    h = m.carry("h", [2, 3, 4])
    a = m.neg(m.exp(m.weight("A_log", [2], scale=1.0)))
    b, c = m.split(bc, [4, 4])
    y, h.value = m.ssm_step(x, m.softplus(dt_in), a, b, c, m.weight("D", [2], scale=1.0), h.value)
    m.output("y", y)
    check(m, beats=10)


def test_kv_ring_attention_grouped_and_wrapping():
    m = Model("ring")
    q, k, v = m.input("q", [4, 6]), m.input("k", [2, 6]), m.input("v", [2, 6])
    pos = m.beat()
    ring = m.kv_ring("kv", capacity=5, heads=2, dim=6)
    keys, values = ring.write(m.rope(k, pos), v, pos)
    m.output("masked", m.attention(m.rope(q, pos), keys, values, pos))
    m.output("full", m.attention(q, keys, values, scale=0.1))
    check(m, beats=12)  # capacity 5 < 12 beats: the ring wraps


def test_cli_compiles_and_imports_a_zoo_model(tmp_path, capsys):
    assert wavec_main(["compile", "lstm_stack:tiny", "--sessions", "2", "-o", str(tmp_path / "p")]) == 0
    assert "2 sessions" in capsys.readouterr().out
    assert wavec_main(["import", "lstm_stack:tiny"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("// wave IR of lstm_stack_tiny (wavec builder)") and 'wave.state "lstm0.c"' in text
    assert wavec_main(["import", "lstm_stack:tiny", "--frame", "x=3"]) == 1
    assert "--frame applies to ONNX models only" in capsys.readouterr().err


def test_lowered_module_has_no_dead_ops():
    m = Model("dead")
    x = m.input("x", [4])
    m.matmul(x, m.weight("unused", [4, 4]))  # nothing reads it
    m.output("y", m.reshape(m.reshape(x, [2, 2]), [4]) * 3.0)
    graph = m.lower()
    assert "unused" not in graph.weights
    names = [op.name for op in graph.module.walk() if op.name.startswith("wave.")]
    assert names.count("wave.reshape") == 0 and "wave.matmul" not in names
    assert any(isinstance(op, wave.EwiseOp) for op in graph.module.walk())
