"""ONNX's own node conformance cases (onnx.backend.test) through the whole compiler and the interpreter.

Every case whose ops are all in the frontend's lowering table runs: the model is imported (static
shapes: one session, cohort axis -1), compiled for a cohort of two sessions, run for one beat on the interpreter (both slots), and compared with the case's expected
outputs. Non-float inputs of a case (axes, shapes, pads, indices, bool conditions) are what real
exports carry as constants, so they become initializers here; float inputs stay runtime inputs.
Cases that use what the frontend rejects (integer or float64 tensors at runtime, unsupported
attributes) are listed in EXPECTED_UNSUPPORTED and must raise UnsupportedModelError.

``run_case`` is the one place that evaluates; switch it to another backend to test that backend.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from wavec.driver import compile_graph
from wavec.errors import UnsupportedModelError
from wavec.frontends.onnx import import_onnx
from wavec.frontends.onnx.lowering import LOWERINGS

RTOL = ATOL = 1e-5
# Unrolled recurrences accumulate float32 rounding over steps: compare them a little looser.
LOOSE = {"LSTM": 1e-4, "GRU": 1e-4, "RNN": 1e-4}

# Cases that must be rejected, by reason (each raises UnsupportedModelError). Generated from a run, then read.
# "_expanded" cases are ONNX function bodies: Clip's uses Less/Where on runtime data, for instance.
NON_FLOAT32 = """
    test_add_int16 test_add_int8 test_add_uint16 test_add_uint32 test_add_uint64 test_add_uint8 test_and2d
    test_and3d test_and4d test_and_bcast3v1d test_and_bcast3v2d test_and_bcast4v2d test_and_bcast4v3d
    test_and_bcast4v4d test_cast_DOUBLE_to_FLOAT16 test_cast_FLOAT16_to_DOUBLE test_cast_FLOAT16_to_FLOAT4E2M1
    test_cast_FLOAT16_to_FLOAT8E4M3FN test_cast_FLOAT16_to_FLOAT8E4M3FNUZ test_cast_FLOAT16_to_FLOAT8E5M2
    test_cast_FLOAT16_to_FLOAT8E5M2FNUZ test_cast_FLOAT16_to_INT2 test_cast_FLOAT16_to_INT4
    test_cast_FLOAT16_to_UINT2 test_cast_FLOAT16_to_UINT4 test_cast_FLOAT4E2M1_to_FLOAT16
    test_cast_FLOAT8E4M3FNUZ_to_FLOAT16 test_cast_FLOAT8E4M3FN_to_FLOAT16 test_cast_FLOAT8E5M2FNUZ_to_FLOAT16
    test_cast_FLOAT8E5M2_to_FLOAT16 test_cast_FLOAT_to_BFLOAT16 test_cast_FLOAT_to_DOUBLE
    test_cast_FLOAT_to_FLOAT16 test_cast_FLOAT_to_FLOAT4E2M1 test_cast_FLOAT_to_FLOAT8E4M3FN
    test_cast_FLOAT_to_FLOAT8E4M3FNUZ test_cast_FLOAT_to_FLOAT8E5M2 test_cast_FLOAT_to_FLOAT8E5M2FNUZ
    test_cast_FLOAT_to_INT2 test_cast_FLOAT_to_INT4 test_cast_FLOAT_to_UINT2 test_cast_FLOAT_to_UINT4
    test_cast_INT2_to_FLOAT16 test_cast_INT2_to_INT8 test_cast_INT4_to_FLOAT16 test_cast_INT4_to_INT8
    test_cast_UINT2_to_FLOAT16 test_cast_UINT2_to_UINT8 test_cast_UINT4_to_FLOAT16 test_cast_UINT4_to_UINT8
    test_cast_e8m0_FLOAT16_to_FLOAT8E8M0 test_cast_e8m0_FLOAT8E8M0_to_FLOAT16 test_cast_e8m0_FLOAT_to_FLOAT8E8M0
    test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
    test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2 test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
    test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ
    test_cast_no_saturate_FLOAT_to_FLOAT8E5M2 test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ
    test_castlike_DOUBLE_to_FLOAT16 test_castlike_DOUBLE_to_FLOAT16_expanded test_castlike_FLOAT16_to_DOUBLE
    test_castlike_FLOAT16_to_DOUBLE_expanded test_castlike_FLOAT16_to_FLOAT4E2M1
    test_castlike_FLOAT16_to_FLOAT4E2M1_expanded test_castlike_FLOAT16_to_FLOAT8E4M3FN
    test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded
    test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded test_castlike_FLOAT16_to_FLOAT8E5M2
    test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded
    test_castlike_FLOAT16_to_FLOAT8E5M2_expanded test_castlike_FLOAT16_to_INT2
    test_castlike_FLOAT16_to_INT2_expanded test_castlike_FLOAT16_to_INT4 test_castlike_FLOAT16_to_INT4_expanded
    test_castlike_FLOAT16_to_UINT2 test_castlike_FLOAT16_to_UINT2_expanded test_castlike_FLOAT16_to_UINT4
    test_castlike_FLOAT16_to_UINT4_expanded test_castlike_FLOAT4E2M1_to_FLOAT16
    test_castlike_FLOAT4E2M1_to_FLOAT16_expanded test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16
    test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded test_castlike_FLOAT8E4M3FN_to_FLOAT16
    test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16
    test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded test_castlike_FLOAT8E5M2_to_FLOAT16
    test_castlike_FLOAT8E5M2_to_FLOAT16_expanded test_castlike_FLOAT_to_BFLOAT16
    test_castlike_FLOAT_to_BFLOAT16_expanded test_castlike_FLOAT_to_DOUBLE
    test_castlike_FLOAT_to_DOUBLE_expanded test_castlike_FLOAT_to_FLOAT16
    test_castlike_FLOAT_to_FLOAT16_expanded test_castlike_FLOAT_to_FLOAT4E2M1
    test_castlike_FLOAT_to_FLOAT4E2M1_expanded test_castlike_FLOAT_to_FLOAT8E4M3FN
    test_castlike_FLOAT_to_FLOAT8E4M3FNUZ test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded
    test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded test_castlike_FLOAT_to_FLOAT8E5M2
    test_castlike_FLOAT_to_FLOAT8E5M2FNUZ test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded
    test_castlike_FLOAT_to_FLOAT8E5M2_expanded test_castlike_FLOAT_to_INT2 test_castlike_FLOAT_to_INT2_expanded
    test_castlike_FLOAT_to_INT4 test_castlike_FLOAT_to_INT4_expanded test_castlike_FLOAT_to_UINT2
    test_castlike_FLOAT_to_UINT2_expanded test_castlike_FLOAT_to_UINT4 test_castlike_FLOAT_to_UINT4_expanded
    test_castlike_INT2_to_FLOAT16 test_castlike_INT2_to_FLOAT16_expanded test_castlike_INT2_to_INT8
    test_castlike_INT2_to_INT8_expanded test_castlike_INT4_to_FLOAT16 test_castlike_INT4_to_FLOAT16_expanded
    test_castlike_INT4_to_INT8 test_castlike_INT4_to_INT8_expanded test_castlike_UINT2_to_FLOAT16
    test_castlike_UINT2_to_FLOAT16_expanded test_castlike_UINT2_to_UINT8 test_castlike_UINT2_to_UINT8_expanded
    test_castlike_UINT4_to_FLOAT16 test_castlike_UINT4_to_FLOAT16_expanded test_castlike_UINT4_to_UINT8
    test_castlike_UINT4_to_UINT8_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded
    test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN
    test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded
    test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2
    test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded
    test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded test_celu_bfloat16 test_celu_bfloat16_expanded
    test_celu_float16 test_celu_float16_expanded test_clip_default_int8_inbounds test_clip_default_int8_max
    test_clip_default_int8_max_expanded test_clip_default_int8_min test_clip_default_int8_min_expanded
    test_div_int16 test_div_int32_trunc test_div_int8 test_div_uint16 test_div_uint32 test_div_uint64
    test_div_uint8 test_edge_pad test_equal test_equal_bcast test_equal_int16 test_equal_int8 test_equal_string
    test_equal_string_broadcast test_equal_uint16 test_equal_uint32 test_equal_uint64 test_equal_uint8
    test_greater_equal_int16 test_greater_equal_int16_expanded test_greater_equal_int8
    test_greater_equal_int8_expanded test_greater_equal_uint16 test_greater_equal_uint16_expanded
    test_greater_equal_uint32 test_greater_equal_uint32_expanded test_greater_equal_uint64
    test_greater_equal_uint64_expanded test_greater_equal_uint8 test_greater_equal_uint8_expanded
    test_greater_int16 test_greater_int8 test_greater_uint16 test_greater_uint32 test_greater_uint64
    test_greater_uint8 test_less_equal_int16 test_less_equal_int16_expanded test_less_equal_int8
    test_less_equal_int8_expanded test_less_equal_uint16 test_less_equal_uint16_expanded test_less_equal_uint32
    test_less_equal_uint32_expanded test_less_equal_uint64 test_less_equal_uint64_expanded test_less_equal_uint8
    test_less_equal_uint8_expanded test_less_int16 test_less_int8 test_less_uint16 test_less_uint32
    test_less_uint64 test_less_uint8 test_max_float16 test_max_float64 test_max_int16 test_max_int32
    test_max_int64 test_max_int8 test_max_uint16 test_max_uint32 test_max_uint64 test_max_uint8 test_min_float16
    test_min_float64 test_min_int16 test_min_int32 test_min_int64 test_min_int8 test_min_uint16 test_min_uint32
    test_min_uint64 test_min_uint8 test_mul_int16 test_mul_int8 test_mul_uint16 test_mul_uint32 test_mul_uint64
    test_mul_uint8 test_not_2d test_not_3d test_not_4d test_or2d test_or3d test_or4d test_or_bcast3v1d
    test_or_bcast3v2d test_or_bcast4v2d test_or_bcast4v3d test_or_bcast4v4d test_pow_types_int32_float32
    test_pow_types_int32_int32 test_pow_types_int64_float32 test_pow_types_int64_int64
    test_reduce_log_sum_exp_default_axes_keepdims_example
    test_reduce_log_sum_exp_default_axes_keepdims_example_expanded
    test_reduce_log_sum_exp_default_axes_keepdims_random
    test_reduce_log_sum_exp_default_axes_keepdims_random_expanded
    test_reduce_log_sum_exp_do_not_keepdims_example test_reduce_log_sum_exp_do_not_keepdims_example_expanded
    test_reduce_log_sum_exp_do_not_keepdims_random test_reduce_log_sum_exp_do_not_keepdims_random_expanded
    test_reduce_log_sum_exp_empty_set_expanded test_reduce_log_sum_exp_keepdims_example
    test_reduce_log_sum_exp_keepdims_example_expanded test_reduce_log_sum_exp_keepdims_random
    test_reduce_log_sum_exp_keepdims_random_expanded test_reduce_log_sum_exp_negative_axes_keepdims_example
    test_reduce_log_sum_exp_negative_axes_keepdims_example_expanded
    test_reduce_log_sum_exp_negative_axes_keepdims_random
    test_reduce_log_sum_exp_negative_axes_keepdims_random_expanded test_reduce_max_bool_inputs
    test_reduce_max_empty_set_bool test_reduce_min_bool_inputs test_reflect_pad test_sub_int16 test_sub_int8
    test_sub_uint16 test_sub_uint32 test_sub_uint64 test_sub_uint8 test_where_long_example test_wrap_pad
    test_xor2d test_xor3d test_xor4d test_xor_bcast3v1d test_xor_bcast3v2d test_xor_bcast4v2d test_xor_bcast4v3d
    test_xor_bcast4v4d
""".split()
RUNTIME_COMPARISON = """
    test_clip_default_max_expanded test_clip_default_min_expanded test_clip_example_expanded test_clip_expanded
    test_clip_inbounds_expanded test_clip_min_greater_than_max_expanded test_clip_outbounds_expanded
    test_clip_splitbounds_expanded test_elu_default_expanded_ver18 test_elu_example_expanded_ver18
    test_elu_expanded_ver18 test_greater test_greater_bcast test_greater_equal test_greater_equal_bcast
    test_greater_equal_bcast_expanded test_greater_equal_expanded test_leakyrelu_default_expanded
    test_leakyrelu_example_expanded test_leakyrelu_expanded test_less test_less_bcast test_less_equal
    test_less_equal_bcast test_less_equal_bcast_expanded test_less_equal_expanded test_prelu_broadcast_expanded
    test_prelu_example_expanded test_selu_default_expanded_ver18 test_selu_example_expanded_ver18
    test_selu_expanded_ver18 test_shrink_hard_expanded_ver18 test_shrink_soft_expanded_ver18
    test_thresholdedrelu_default_expanded_ver18 test_thresholdedrelu_example_expanded_ver18
    test_thresholdedrelu_expanded_ver18
""".split()
TRAINING_MODE = """
    test_batchnorm_epsilon_training_mode test_batchnorm_example_training_mode
""".split()
EXPECTED_UNSUPPORTED: dict[str, str] = {
    **dict.fromkeys(NON_FLOAT32, 'a runtime tensor (input, cast result or output) is not float32'),
    **dict.fromkeys(RUNTIME_COMPARISON, 'comparison or logic on runtime tensors (only static shape arithmetic folds)'),
    **dict.fromkeys(TRAINING_MODE, 'BatchNormalization in training mode'),
}


def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    accepted = set(LOWERINGS) | {"Constant", "Identity"}
    keep = []
    for case in cases:
        if case.model is None:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        if ops <= accepted and ops & set(LOWERINGS):
            keep.append(case)
    return sorted(keep, key=lambda c: c.name)


CASES = _cases()


def _static_inputs_as_initializers(model: onnx.ModelProto, inputs: list) -> tuple[onnx.ModelProto, dict]:
    """Moves parameter inputs (a non-float32 type no output has: axes, shapes, pads, conditions,
    exotic source types of a Cast) into the graph as initializers. Float32 inputs stay runtime
    inputs, and so do other data inputs (an int32 Add), which the frontend must reject.
    Returns the model and the runtime feeds."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    out_types = {vi.type.tensor_type.elem_type for vi in model.graph.output}
    feeds = {}
    keep = []
    for vi, value in zip(list(model.graph.input), inputs):
        elem = vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.FLOAT or elem in out_types:
            keep.append(vi)
            feeds[vi.name] = _as_array(value)
            continue
        tensor = _as_tensor_proto(value)
        tensor.name = vi.name
        model.graph.initializer.append(tensor)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, feeds


def _as_tensor_proto(value) -> onnx.TensorProto:
    """Exotic dtypes (float8, int4, bfloat16) come as a TensorProto, possibly wrapped in an object array."""
    if isinstance(value, np.ndarray) and value.dtype == object and value.size == 1 and isinstance(value.flat[0], onnx.TensorProto):
        value = value.flat[0]
    if isinstance(value, onnx.TensorProto):
        return onnx.TensorProto.FromString(value.SerializeToString())
    return numpy_helper.from_array(np.asarray(value))


def _as_array(value) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype == object and value.size == 1 and isinstance(value.flat[0], onnx.TensorProto):
        value = value.flat[0]
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


SESSIONS = 2  # the case's one session, served twice in a cohort: both slots must give the expected outputs


def run_case(graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One beat through the whole compiler (every pass, wpk-verify included) and the interpreter, which
    runs the payload bytes over the real arena offsets; the only evaluation call in this file."""
    profile = compile_graph(graph, sessions=SESSIONS, workers=4)
    frames = {name: np.broadcast_to(np.asarray(v, np.float32), (1, SESSIONS, *np.shape(v))) for name, v in feeds.items()}
    outputs = profile.run(frames, backend="interp", reset=np.zeros((1, SESSIONS), bool))
    for name, value in outputs.items():
        np.testing.assert_array_equal(value[0, 0], value[0, 1], err_msg=f"{name}: the two session slots differ")
    return {name: value[0, 0] for name, value in outputs.items()}


def _marks(case):
    if case.name in EXPECTED_UNSUPPORTED:
        return [pytest.mark.xfail(raises=UnsupportedModelError, strict=True, reason=EXPECTED_UNSUPPORTED[case.name])]
    return []


RESULTS: collections.Counter = collections.Counter()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=_marks(c)) for c in CASES])
def test_node_case(case):
    op = case.model.graph.node[-1].op_type
    inputs, expected = case.data_sets[0]
    model, feeds = _static_inputs_as_initializers(case.model, inputs)
    try:
        graph = import_onnx(model)
    except UnsupportedModelError:
        RESULTS[(op, "xfail")] += 1
        raise
    graph.module.verify()
    outputs = run_case(graph, feeds)
    tol = LOOSE.get(op, RTOL)
    for vi, want in zip(case.model.graph.output, expected):
        got, want = outputs[vi.name], _as_array(want)
        assert got.shape == want.shape, vi.name
        np.testing.assert_allclose(got, want, rtol=tol, atol=max(tol, ATOL), err_msg=vi.name)
    RESULTS[(op, "pass")] += 1


def test_conformance_summary(capsys):
    """Prints pass/xfail counts per op (run with -s to see it), and checks the table is not stale."""
    assert not set(EXPECTED_UNSUPPORTED) - {c.name for c in CASES}, "EXPECTED_UNSUPPORTED names a case that is not collected"
    if RESULTS:
        ops = sorted({op for op, _ in RESULTS})
        with capsys.disabled():
            print("\nONNX node conformance through frontends/onnx (pass / xfail):")
            for op in ops:
                print(f"  {op:20s} {RESULTS[(op, 'pass')]:3d} / {RESULTS[(op, 'xfail')]:3d}")
