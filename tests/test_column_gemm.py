"""The column GEMM's two lowerings (wave-to-wpk), through the whole compiler and the interpreter against a
float64 numpy reference on fresh random inputs, per session: attention's K^T read in place from a cache
[C, H, D] (no transpose phase; b k-contiguous), and a matrix-vector product over a per-session matrix lowered
as its transpose (b^T a^T, inputs swapped). The CUDA body itself is checked on the GPU (scripts/gpu_check.py
on the zoo, bench/RESULTS.md fourteenth run); here the parameter blocks it reads must describe the same
product. fp32 against float64: 1e-5 relative."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from test_epilogue import onnx_model
from wavec.driver import compile_graph
from wavec.frontends.onnx import import_onnx
from wavec.opcodes import MatmulParams, Opcode

SESSIONS, WORKERS = 3, 4


def _run(model, frames: dict[str, np.ndarray]):
    profile = compile_graph(import_onnx(model), sessions=SESSIONS, workers=WORKERS)
    got = profile.run({k: v[None] for k, v in frames.items()}, backend="interp", reset=np.zeros((1, SESSIONS), bool))
    return profile, {k: v[0] for k, v in got.items()}


def _matmul_params(profile) -> list[MatmulParams]:
    payloads = profile.payloads[np.argsort(profile.payloads["task"])]
    starts = np.cumsum([0] + [q["tasks"] for q in profile.meta["phases"]])
    return [MatmulParams.unpack(profile.params, int(payloads[starts[i]]["params"]))
            for i, q in enumerate(profile.meta["phases"]) if q["op"] == "wave.matmul"]


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _scores(seed: int, q_shape: list[int], k_shape: list[int], perm: list[int]):
    """s = q @ Transpose(k, perm) a session, on fresh unit-normal q and k: (profile, s, s in float64 numpy)."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((SESSIONS, *q_shape)), rng.standard_normal((SESSIONS, *k_shape))
    want = np.stack([q[i] @ k[i].transpose(perm) for i in range(SESSIONS)])
    model = onnx_model([helper.make_node("Transpose", ["k"], ["kt"], perm=perm),
                        helper.make_node("MatMul", ["q", "kt"], ["s"])],
                       [("q", q_shape), ("k", k_shape)], [("s", list(want.shape[1:]))], {})
    profile, got = _run(model, {"q": q.astype(np.float32), "k": k.astype(np.float32)})
    return profile, got["s"], want


def _copies_k(profile) -> bool:
    return any(p["op"] == "wave.transpose" for p in profile.meta["phases"])


@pytest.mark.parametrize("c, h, heads_a_tile", [(256, 2, 1), (128, 12, 12)])
def test_k_transpose_is_read_in_place_and_the_scores_match_numpy(c, h, heads_a_tile):
    """q [H, 1, 64] against a cache [C, H, 64] read as [H, 64, C], no copy phase: the scores' b runs along k
    with stride 1 and across slots H x 64 apart. Heads of 64 KB (C = 256) take a tile each; 32 KB heads (C =
    128, H = 12: the encoder's shape) a tile of all of a session's heads (3 sessions on 4 workers)."""
    profile, got, want = _scores(11 + h, [h, 1, 64], [c, h, 64], [1, 2, 0])
    assert not _copies_k(profile)
    (params,) = _matmul_params(profile)
    assert params.b_strides[-2:] == (h * 64, 1)
    tiles = profile.payloads[profile.payloads["opcode"] == int(Opcode.MATMUL)]
    spans = {(int(t["session_end"]) - int(t["session_begin"]), int(t["elem_end"]) - int(t["elem_begin"])) for t in tiles}
    assert spans == {(1, heads_a_tile * c)}
    _close(got, want)


@pytest.mark.parametrize("rows, in_place", [(8, True), (9, False)])
def test_a_k_transpose_broadcast_over_query_rows_is_read_in_place_for_at_most_8(rows, in_place):
    """q [rows, 1, 64] against one K^T [1, 64, 256] a session (broadcast over q's batch axis): rows query rows
    read each matrix, so 8 read it in place and 9 keep the copy."""
    profile, got, want = _scores(14, [rows, 1, 64], [256, 1, 64], [1, 2, 0])
    assert in_place == (not _copies_k(profile))
    _close(got, want)


def test_a_k_transpose_of_lower_rank_than_q_keeps_its_copy():
    """K^T [64, 256] of lower rank than q [4, 1, 64]: wave-cohort gives it a unit axis after the cohort axis (a
    reshape, which the in-place rule does not look through), so it is copied, and the scores are right."""
    profile, got, want = _scores(15, [4, 1, 64], [256, 64], [1, 0])
    assert _copies_k(profile)
    _close(got, want)


@pytest.mark.parametrize("rows, transposed", [(64, True), (16, False)])
def test_a_matvec_over_a_per_session_matrix_of_64_kb_runs_as_its_transpose(rows, transposed):
    """y = h @ c, h [4, rows, 64] a session, c [1, 64, 1]: at 64 KB (rows 64) lowered as c^T h^T over 4 x rows
    columns, h read as b k-contiguous (strides 64, 1) and c as a, one row; under it (rows 16, 16 KB) h stays a
    and c b."""
    rng = np.random.default_rng(12 + rows)
    model = onnx_model([helper.make_node("MatMul", ["h", "c"], ["y"])],
                       [("h", [4, rows, 64]), ("c", [1, 64, 1])], [("y", [4, rows, 1])], {})
    h, c = rng.standard_normal((SESSIONS, 4, rows, 64)), rng.standard_normal((SESSIONS, 1, 64, 1))
    profile, got = _run(model, {"h": h.astype(np.float32), "c": c.astype(np.float32)})
    (params,) = _matmul_params(profile)
    if transposed:
        assert (params.shape, params.b_strides, params.a_strides) == ((1, 4 * rows), (0, 64, 1), (0, 0, 1))
    else:
        assert params.shape == (4, rows, 1)
    _close(got["y"], h @ c)
