"""Prologues (wave-fuse folds a layer norm's or RMS norm's normalizing ewise into the matmul that reads it):
through the whole compiler and the interpreter against onnxruntime on fresh random inputs, per session;
the parameter block, its footprints, the verifier, the golden evaluator and the CUDA kernel's build."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from test_epilogue import onnx_model
from wavec.driver import compile_graph, default_pipeline
from wavec.frontends.onnx import import_onnx

SESSIONS = 3
WORKERS = 4
T, D, H = 5, 16, 12  # rows per session, features (k), matmul outputs


def layer_norm_model(rng, bias: bool = False, rows: int = T) -> onnx.ModelProto:
    """LayerNormalization (opset 17, last axis) then MatMul."""
    inits = {"g": rng.standard_normal(D), "w": rng.standard_normal((D, H))}
    if bias:
        inits["b"] = rng.standard_normal(D)
    ln = helper.make_node("LayerNormalization", ["x", "g", "b"] if bias else ["x", "g"], ["n"], epsilon=1e-5)
    return onnx_model([ln, helper.make_node("MatMul", ["n", "w"], ["y"])], [("x", [rows, D])], [("y", [rows, H])], inits)


def rms_norm_model(rng, rows: int = T) -> onnx.ModelProto:
    """RMS norm as exporters decompose it: Pow, ReduceMean, Add, Sqrt, Div, Mul; then MatMul."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["xn"]),
        helper.make_node("Mul", ["xn", "g"], ["n"]),
        helper.make_node("MatMul", ["n", "w"], ["y"]),
    ]
    inits = {"g": rng.standard_normal(D), "w": rng.standard_normal((D, H)), "two": np.array(2.0), "eps": np.array(1e-6)}
    return onnx_model(nodes, [("x", [rows, D])], [("y", [rows, H])], inits)


def _compile(model: onnx.ModelProto, prologues: bool = True):
    pipeline = default_pipeline(SESSIONS, WORKERS)
    if not prologues:
        pipeline = pipeline.replace("wave-fuse,", "wave-fuse{prologues=false},")
    return compile_graph(import_onnx(model), sessions=SESSIONS, workers=WORKERS, pipeline=pipeline)


def _fused_ops(model: onnx.ModelProto) -> list[str]:
    from wavec.driver import run_pipeline

    graph = import_onnx(model)
    run_pipeline(graph.module, "wave-expand-pow,wave-fuse")
    return [line.strip() for line in str(graph.module).splitlines() if "wave." in line]


def _check_against_onnxruntime(model: onnx.ModelProto, profile, rng, beats: int = 2) -> None:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = (rng.standard_normal((beats, SESSIONS, *shape)) * 3 + 1).astype(np.float32)
    got = profile.run({"x": x}, backend="interp", reset=np.zeros((beats, SESSIONS), bool))["y"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.stack([np.stack([sess.run(None, {"x": x[b, s]})[0] for s in range(SESSIONS)]) for b in range(beats)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_norm_prologue_matches_onnxruntime(norm):
    rng = np.random.default_rng(7)
    model = layer_norm_model(rng) if norm == "layer" else rms_norm_model(rng)
    ops = _fused_ops(model)
    matmuls = [op for op in ops if "wave.matmul" in op]
    assert len(matmuls) == 1 and " prologue " in matmuls[0], ops
    profile = _compile(model)
    unfused = _compile(model, prologues=False)
    phases = [p["op"] for p in profile.meta["phases"]]
    assert len(phases) == len(unfused.meta["phases"]) - 1, (phases, unfused.meta["phases"])
    assert phases.count("wave.ewise") == [p["op"] for p in unfused.meta["phases"]].count("wave.ewise") - 1
    # The normalized [T, D] tensor is written and read no more (and, with the RMS norm's, its [T, 1] deviation).
    saved = profile.meta["fusion_saved_bytes_per_session"] - unfused.meta["fusion_saved_bytes_per_session"]
    assert saved == 2 * 4 * T * D
    # Two independent counts of the same bytes: the cost model's traffic of the two programs differs by it.
    assert unfused.report["bytes_per_beat"] - profile.report["bytes_per_beat"] == SESSIONS * saved
    _check_against_onnxruntime(model, profile, rng)


def test_layer_norm_with_shift_stays_unfused_and_correct():
    """mean-deviation, row sums, scale and shift with a and b: five slots, more than a task has."""
    rng = np.random.default_rng(8)
    model = layer_norm_model(rng, bias=True)
    assert not any(" prologue " in op for op in _fused_ops(model))
    _check_against_onnxruntime(model, _compile(model), rng)


def test_single_row_rms_norm_picks_x_as_a():
    """One row per session (a streaming frame): every input of the normalizing ewise varies along k alone,
    so a is the input of a's exact shape."""
    rng = np.random.default_rng(9)
    model = rms_norm_model(rng, rows=1)
    ops = _fused_ops(model)
    x = next(op.split(" = ")[0] for op in ops if 'wave.input "x"' in op)
    assert any(" prologue " in op and f"wave.matmul {x}, " in op for op in ops), ops
    _check_against_onnxruntime(model, _compile(model), rng)


def test_prologue_on_shared_a_with_per_session_input_is_split_by_cohort():
    """a = weight * per-session scale: wave-fuse folds the scale into a prologue; wave-cohort, which keeps
    weights shared, turns it back into a per-session ewise (the matmul then reads a per-session a)."""
    rng = np.random.default_rng(10)
    w1, w2 = rng.standard_normal((4, 8)), rng.standard_normal((8, 3))
    model = onnx_model(
        [helper.make_node("Mul", ["w1", "r"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["y"])],
        [("r", [4, 1])], [("y", [4, 3])], {"w1": w1, "w2": w2},
    )
    assert any(" prologue " in op for op in _fused_ops(model))
    profile = _compile(model)
    ops = [p["op"] for p in profile.meta["phases"]]
    assert ops.count("wave.ewise") == 1 and ops.count("wave.matmul") == 1, ops
    assert profile.meta["fusion_saved_bytes_per_session"] == 0  # the split stores a again
    r = rng.standard_normal((1, SESSIONS, 4, 1)).astype(np.float32)
    got = profile.run({"r": r}, backend="interp", reset=np.zeros((1, SESSIONS), bool))["y"][0]
    want = (w1.astype(np.float32)[None] * r[0]).astype(np.float64) @ w2.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_wave_eval_evaluates_the_prologue():
    """The golden evaluator gives the fused graph the unfused graph's values."""
    from wavec.analysis.wave_eval import evaluate
    from wavec.driver import run_pipeline

    rng = np.random.default_rng(11)
    model = rms_norm_model(rng)
    plain, fused = import_onnx(model), import_onnx(model)
    run_pipeline(fused.module, "wave-expand-pow,wave-fuse")
    assert " prologue " in str(fused.module)
    weights = {k: np.asarray(v, np.float32) for k, v in plain.weights.items()}
    x = {"x": rng.standard_normal((T, D)).astype(np.float32)}
    want, _ = evaluate(plain.module, x, {}, weights)
    got, _ = evaluate(fused.module, x, {}, weights)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_prologue_params_round_trip_and_footprint():
    from wavec.opcodes import (Epilogue, MatmulParams, Prologue, compile_expr, footprint, n_task_inputs,
                               parse_expr, unpack_params)

    # out [2, 3], K = 4; prologue extras: per row (stride 1 along m), per k (stride 1 along k).
    pro = Prologue(((1, 0, 0), (0, 0, 1)), tuple(compile_expr(parse_expr("mul(mul(%0, %1), %2)"))))
    mm = MatmulParams((2, 3), 4, (3, 1), (4, 0, 1), (0, 1, 3), prologue=pro)
    assert unpack_params(mm.pack(), 0) == mm
    assert n_task_inputs(mm) == 4 and mm.epilogue_slot == 4
    assert footprint(mm, 2, 2, 5, 4).tolist() == [0, 1]  # rows 0 and 1 of the per-row extra
    assert footprint(mm, 3, 2, 5, 4).tolist() == [0, 1, 2, 3]  # every k of the per-k extra
    # One prologue extra and one epilogue extra: the epilogue's follows the prologue's (slot 3).
    pro1 = Prologue(((1, 0, 0),), tuple(compile_expr(parse_expr("mul(%0, %1)"))))
    ep = Epilogue((2, 3), ((0, 1),), tuple(compile_expr(parse_expr("add(%0, %1)"))))
    mm = MatmulParams((2, 3), 4, (3, 1), (4, 0, 1), (0, 1, 3), ep, pro1)
    assert unpack_params(mm.pack(), 0) == mm and n_task_inputs(mm) == 4 and mm.epilogue_slot == 3
    assert footprint(mm, 2, 2, 5, 4).tolist() == [0, 1]
    assert footprint(mm, 3, 2, 5, 4).tolist() == [2, 0, 1]  # the epilogue's extra, per output element
    bare = MatmulParams((2, 3), 4, (3, 1), (4, 0, 1), (0, 1, 3))
    assert bare.pack()[-6:].tolist() == [0, 0, 0, 0, 0, -1]  # identity prologue (2 words), identity epilogue (4)
    assert unpack_params(bare.pack(), 0) == bare and n_task_inputs(bare) == 2


def test_interp_reference_and_prepared_bodies_agree():
    """The prepared runner (targets/interp/prepare.py) and the reference body compute the same bits."""
    from wavec.targets.interp.bodies import run_task
    from wavec.targets.interp.machine import Interpreter
    from wavec.targets.interp.prepare import TaskCache, prepare_task

    rng = np.random.default_rng(12)
    profile = _compile(layer_norm_model(rng))
    interp = Interpreter(profile)
    interp.write_inputs({"x": rng.standard_normal((SESSIONS, T, D)).astype(np.float32)}, np.zeros(SESSIONS, bool))
    interp.run_beat()
    plans = [p for p in interp.plans if p.opcode.name == "MATMUL"]
    assert plans and all(not p.params.prologue.identity for p in plans)
    for plan in plans:
        prepared = {a: m.copy() for a, m in interp.memory(0).items()}
        ref = {a: m.copy() for a, m in interp.memory(0).items()}
        for m in (prepared, ref):
            m[plan.out.arena][:] = np.nan  # both must write every output element
        prepare_task(plan, prepared, TaskCache())(prepared)
        run_task(plan, ref)
        for a in ref:
            assert np.array_equal(prepared[a], ref[a], equal_nan=True), a


def test_prologue_kernel_compiles_without_warnings(tmp_path):
    """The generated kernel.cu of a prologue profile builds for sm_90a with -Werror, no spills."""
    import re

    from test_cuda import NVCC, ptxas_compile
    from wavec.targets.cuda.codegen import generate_kernel

    if NVCC is None:
        pytest.skip("nvcc not installed")
    profile = _compile(rms_norm_model(np.random.default_rng(13)))
    src = generate_kernel(profile.meta)
    assert "struct Prologue" in src and "PrologueRow" in src
    report = ptxas_compile(tmp_path, src)
    assert "warning" not in report.lower(), report
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert spills and spills.groups() == ("0", "0"), report


def test_verifier_catches_faults_in_a_prologue_profile():
    """Every fault kind of tests/mutations.py on a layer-norm prologue profile, and a moved or restrided
    per-row prologue input (slot 2 or 3 of a MATMUL task, in the activation arena): all rejected."""
    import mutations as mut

    from wavec.errors import VerificationError
    from wavec.opcodes import Arena, Opcode
    from wavec.payload import operand_arena
    from wavec.verify import verify_profile

    profile = _compile(layer_norm_model(np.random.default_rng(14)))
    verify_profile(profile)
    oracle, rng = mut.Oracle(profile), np.random.default_rng(0)
    caught = 0
    for kind in mut.KINDS:
        faults, _ = mut.pick_faults(profile, oracle, kind, 2, rng)
        for _target, mutant, desc, *_ in faults:
            with pytest.raises(VerificationError):
                verify_profile(mutant)
            caught += 1
    assert caught >= 40
    rows = [(r, k) for r, rec in enumerate(profile.payloads) if int(rec["opcode"]) == Opcode.MATMUL
            for k in (2, 3) if k < int(rec["n_inputs"]) and operand_arena(rec, k) == Arena.ACT]
    assert rows, "the row sums of squares should be a prologue input in the activation arena"
    for r, k in rows:
        for field, delta in (("offset", 4), ("offset", 16), ("session_stride", 16)):
            mutant = mut.copy_profile(profile)
            mutant.payloads[r][field][k] += delta
            with pytest.raises(VerificationError):
                verify_profile(mutant)
