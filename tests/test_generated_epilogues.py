"""Generated epilogues: wpk-payload numbers each MATMUL / CONV epilogue by its (expression, input count), the
kernel runs each as one case of `generated_epilogue` instead of the bytecode interpreter, and the verifier
holds every index to its expression. The GPU checks (scripts/gpu_check.py, tests/test_cuda.py) compare the
generated code's results with the interpreter's."""

from __future__ import annotations

import dataclasses

import pytest

from wavec.errors import VerificationError
from wavec.opcodes import ConvParams, MatmulParams, Opcode, decode_expr, parse_expr, unpack_params
from wavec.targets.cuda import build
from wavec.targets.cuda.codegen import _c_expr, epilogue_generated_source, generate_kernel
from wavec.verify import verify_profile


@pytest.fixture(scope="module")
def silero():
    import wavec.driver
    from wavec.frontends.onnx import import_onnx
    from wavec.models import silero_vad_path

    graph = import_onnx(silero_vad_path(), bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])
    return wavec.driver.compile_graph(graph, sessions=3, workers=8)


def _dot_rows(profile):
    ops = (int(Opcode.MATMUL), int(Opcode.CONV))
    return [r for r in range(len(profile.payloads)) if int(profile.payloads["opcode"][r]) in ops]


def _params(profile, row: int) -> MatmulParams | ConvParams:
    return unpack_params(profile.params, int(profile.payloads["params"][row]))


def test_every_silero_epilogue_names_the_body_of_its_expression(silero):
    bodies = silero.meta["epilogue_bodies"]
    assert sorted((b["expr"], b["n_inputs"]) for b in bodies) == [("add(%0, %1)", 2), ("relu(%0)", 1), ("sigmoid(%0)", 1)]
    seen = set()
    for r in _dot_rows(silero):
        ep = _params(silero, r).epilogue
        if not ep.code:
            assert ep.body == -1
            continue
        assert (bodies[ep.body]["expr"], bodies[ep.body]["n_inputs"]) == (str(decode_expr(ep.code)), 1 + len(ep.strides))
        seen.add(ep.body)
    assert seen == set(range(len(bodies)))


def test_verifier_rejects_an_epilogue_index_naming_another_expression(silero):
    row = next(r for r in _dot_rows(silero) if _params(silero, r).epilogue.body >= 0)
    at = int(silero.payloads["params"][row])
    p = _params(silero, row)
    last = at + len(p.pack()) - 1  # the epilogue's body word ends the block
    other = next(i for i in range(len(silero.meta["epilogue_bodies"])) if i != p.epilogue.body)
    params = silero.params.copy()
    params[last] = other
    with pytest.raises(VerificationError, match=f"names generated body {other}"):
        verify_profile(dataclasses.replace(silero, params=params))
    params[last] = len(silero.meta["epilogue_bodies"])
    with pytest.raises(VerificationError, match="set the epilogue's last word to -1"):
        verify_profile(dataclasses.replace(silero, params=params))


def test_an_expression_becomes_the_kernels_function_tables_with_constant_codes():
    from wavec.opcodes import BINARY, TERNARY, UNARY

    code = _c_expr(parse_expr("select(%0, mul(%1, 2.0), tanh(%2))"))
    assert code == (f"ternary_op({list(TERNARY).index('select')}u, v[0], binary_op({list(BINARY).index('mul')}u, v[1], "
                    f"__int_as_float(0x40000000)), unary_op({list(UNARY).index('tanh')}u, v[2]))")
    source = epilogue_generated_source({"epilogue_bodies": [{"expr": "relu(%0)", "n_inputs": 1, "phases": ["conv_1 (wave.conv)"]}]})
    assert "case 0:" in source and f"unary_op({list(UNARY).index('relu')}u, v[0])" in source and "case 1:" not in source


@pytest.mark.skipif(build.find_nvcc() is None, reason="needs nvcc")
def test_the_kernel_with_generated_epilogues_compiles(silero):
    source = generate_kernel(silero.meta)
    # the function itself, one case an expression (the kernel's other switches have cases of their own)
    generated = epilogue_generated_source(silero.meta)
    assert generated in source
    assert generated.count("\n    case ") == len(silero.meta["epilogue_bodies"]) > 0
    cubin = build.build_cubin(source)
    # generated_epilogue is inlined into its one caller, which ptxas compiles as a function of its own
    assert "Epilogue10apply_code" in build.build_report(cubin)
