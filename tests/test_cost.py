"""The cost model (wavec/analysis/cost.py) against counts done by hand from the op's definition.

FLOPs: a multiply-add is 2, any other arithmetic instruction 1. Bytes: every element an operand touches,
once per session for per-session operands and once per phase for shared ones (weights).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser

from wavec.driver import run_pipeline
from wavec.emit import profile_from_module
from wavec.registry import make_context
from wavec.report import build_report

SESSIONS = 4


def phase_costs(body: str, workers: int = 3) -> dict[str, tuple[int, int]]:
    module = Parser(make_context(), f"func.func @m() {{\n{body}\nfunc.return\n}}").parse_module()
    run_pipeline(
        module,
        f"wave-cohort{{sessions={SESSIONS}}},wave-to-wpk{{workers={workers}}},wpk-arena,"
        f"wpk-schedule{{workers={workers}}},wpk-payload",
    )
    report = build_report(profile_from_module(module))
    return {p["name"].split("_")[0]: (p["flops"], p["bytes"]) for p in report["phases"]}


def test_matmul_reads_the_weight_once_per_cohort():
    costs = phase_costs(
        """
        %x = wave.input "x" : tensor<1x128xf32>
        %w = wave.weight "w" : tensor<128x512xf32>
        %y = wave.matmul %x, %w : (tensor<1x128xf32>, tensor<128x512xf32>) -> tensor<1x512xf32>
        wave.output "y", %y : tensor<1x512xf32>
        """
    )
    flops, nbytes = costs["matmul"]
    assert flops == SESSIONS * 2 * 128 * 512
    assert nbytes == 4 * (SESSIONS * 128 + 128 * 512 + SESSIONS * 512)


def test_conv_counts_taps_and_bias():
    # Silero's first encoder layer: 129 channels in, 128 out, kernel 3, pad 1, 4 positions.
    costs = phase_costs(
        """
        %x = wave.input "x" : tensor<129x4xf32>
        %w = wave.weight "w" : tensor<128x129x3xf32>
        %b = wave.weight "b" : tensor<128xf32>
        %y = wave.conv %x, %w bias %b {strides = array<i64: 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1>, group = 1 : i64} : tensor<129x4xf32>, tensor<128x129x3xf32>, tensor<128xf32> -> tensor<128x4xf32>
        wave.output "y", %y : tensor<128x4xf32>
        """
    )
    flops, nbytes = costs["conv"]
    assert flops == SESSIONS * (128 * 4) * (2 * 129 * 3 + 1)
    assert nbytes == 4 * (SESSIONS * 129 * 4 + 128 * 129 * 3 + 128 + SESSIONS * 128 * 4)


def test_elementwise_counts_instructions_not_operands():
    costs = phase_costs(
        """
        %x = wave.input "x" : tensor<4x8xf32>
        %b = wave.weight "b" : tensor<8xf32>
        %y = wave.ewise "sigmoid(add(%0, mul(%1, 2.0)))"(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
        wave.output "y", %y : tensor<4x8xf32>
        """
    )
    flops, nbytes = costs["ewise"]
    assert flops == SESSIONS * 32 * 3  # mul, add, sigmoid
    assert nbytes == 4 * (SESSIONS * 32 + 8 + SESSIONS * 32)


def test_reduce_and_copy():
    costs = phase_costs(
        """
        %x = wave.input "x" : tensor<6x10xf32>
        %m = wave.reduce "mean" %x {axes = array<i64: 1>, keepdims = false} : (tensor<6x10xf32>) -> tensor<6xf32>
        wave.output "m", %m : tensor<6xf32>
        wave.output "m2", %m : tensor<6xf32>
        """
    )
    # Two outputs read m, so it is copied to each (one output alone would be written in place).
    assert costs["reduce"] == (SESSIONS * 6 * 10, 4 * (SESSIONS * 60 + SESSIONS * 6))
    assert costs["output"] == (0, 4 * (SESSIONS * 6 * 2))


@pytest.mark.parametrize("workers", [1, 3, 16])
def test_costs_do_not_depend_on_tiling(workers):
    body = """
        %x = wave.input "x" : tensor<1x64xf32>
        %w = wave.weight "w" : tensor<64x300xf32>
        %y = wave.matmul %x, %w : (tensor<1x64xf32>, tensor<64x300xf32>) -> tensor<1x300xf32>
        wave.output "y", %y : tensor<1x300xf32>
        """
    assert phase_costs(body, workers)["matmul"] == phase_costs(body, 1)["matmul"]


def _enumerated_bytes(records, params_table) -> int:
    """Bytes of one phase by brute force: every task's footprint enumerated, per session, merged."""
    import numpy as np

    from wavec.opcodes import OUT, footprint, unpack_params
    from wavec.payload import operand_arena

    touched: dict = {}
    for rec in records:
        params = unpack_params(params_table, int(rec["params"]))
        sessions = np.arange(int(rec["session_begin"]), int(rec["session_end"]), dtype=np.int64)
        for k in [*range(int(rec["n_inputs"])), OUT]:
            elems = footprint(params, k, int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"]))
            stride = int(rec["session_stride"][k])
            if stride:
                elems = (sessions[:, None] * (1 << 32) + elems[None, :]).ravel()
            touched.setdefault((operand_arena(rec, k), int(rec["offset"][k]), stride), []).append(elems)
    return sum(4 * len(np.unique(np.concatenate(parts))) for parts in touched.values())


def _compiled(model: str):
    from wavec.driver import compile_graph

    if model == "silero":
        from wavec.frontends.onnx import import_onnx
        from wavec.models import silero_vad_path

        graph = import_onnx(silero_vad_path(), bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")])
    else:
        from wavec import zoo
        from wavec.frontends.builder.lower import lower_model

        graph = lower_model(zoo.get(model))
    return compile_graph(graph, sessions=3, workers=5)


@pytest.mark.parametrize("model", ["silero", "transformer:tiny", "mamba_hybrid:tiny", "codec_decoder:tiny"])
def test_closed_form_bytes_equal_enumeration(model):
    """phase_cost counts an operand's bytes in closed form from its whole-op view; brute force agrees."""
    from wavec.analysis.cost import phase_cost

    profile = _compiled(model)
    by_task = profile.payloads[np.argsort(profile.payloads["task"], kind="stable")]  # the table is in worker order
    start = 0
    for phase in profile.meta["phases"]:
        records = by_task[start : start + phase["tasks"]]
        start += phase["tasks"]
        assert phase_cost(records, profile.params)[1] == _enumerated_bytes(records, profile.params), phase["name"]


@pytest.mark.parametrize("model", ["silero", "transformer:tiny", "mamba_hybrid:tiny", "codec_decoder:tiny", "duplex:tiny"])
def test_footprint_size_counts_the_footprint(model):
    """wpk-schedule counts every operand's bytes with footprint_size (closed form for matmul and reduce
    operands and for one-to-one views); it equals the enumerated set's size."""
    from wavec.opcodes import OUT, footprint, footprint_size, unpack_params

    profile = _compiled(model)
    for rec in profile.payloads:
        params = unpack_params(profile.params, int(rec["params"]))
        e0, e1, n_in = int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"])
        for k in [*range(n_in), OUT]:
            assert footprint_size(params, k, e0, e1, n_in) == len(np.unique(footprint(params, k, e0, e1, n_in)))


def test_union_of_progressions_matches_enumeration():
    """footprint_size counts a matmul operand (rows x a k-long progression) by merging intervals; on fresh
    random rows, steps (negative, zero, positive) and lengths it equals the enumerated set's size."""
    from wavec.opcodes import _progressions_union_size

    rng = np.random.default_rng()
    for _ in range(500):
        starts = np.unique(rng.integers(-60, 300, int(rng.integers(1, 40))))
        step, count = int(rng.integers(-9, 10)), int(rng.integers(1, 25))
        points = starts[:, None] + step * np.arange(count)[None, :]
        assert _progressions_union_size(starts, step, count) == len(np.unique(points)), (starts, step, count)


def test_matmul_and_reduce_footprints_match_enumeration():
    """footprint() builds a matmul's and a reduction's operand sets from sorted parts (rows, the k or reduced
    view) without enumerating every (output, k) point; on fresh random shapes, strides (negative, zero,
    positive) and tiles it equals the set the points enumerate."""
    import itertools

    from wavec.opcodes import MatmulParams, ReduceParams, footprint

    rng = np.random.default_rng()
    for _ in range(200):
        shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 3))))
        k = int(rng.integers(1, 7))
        strides = lambda n: tuple(int(s) for s in rng.integers(-4, 6, n))  # noqa: E731
        mm = MatmulParams(shape, k, strides(len(shape)), strides(len(shape) + 1), strides(len(shape) + 1))
        n = int(np.prod(shape))
        e0 = int(rng.integers(0, n))
        e1 = int(rng.integers(e0 + 1, n + 1))
        points = list(itertools.islice(itertools.product(*map(range, shape)), e0, e1))
        for operand, st in ((0, mm.a_strides), (1, mm.b_strides)):
            want = {sum(i * s for i, s in zip(p, st)) + j * st[-1] for p in points for j in range(k)}
            assert footprint(mm, operand, e0, e1, 2).tolist() == sorted(want)
        rshape = tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(1, 3))))
        red = ReduceParams(0, shape, strides(len(shape)), strides(len(shape)), rshape, strides(len(rshape)))
        want = {sum(i * s for i, s in zip(p, red.in_strides)) + sum(i * s for i, s in zip(r, red.rstrides))
                for p in points for r in itertools.product(*map(range, rshape))}
        assert footprint(red, 0, e0, e1, 1).tolist() == sorted(want)
