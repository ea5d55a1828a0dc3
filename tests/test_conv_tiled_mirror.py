"""The tiled CONV body's index arithmetic (targets/cuda/codegen.py, conv_tiled_body, on unless
kConvTiled is false), mirrored step for step in numpy: its gather of A, its weight staging, its blocks and its
output addressing, over Silero's conv shapes and ragged tiles, against the float64 ONNX reference
(tests/test_interp.conv_ref). Tolerance 1e-5 absolute on values of magnitude ~10 (float32 sums in the
mirror's order). A mismatch here is a bug in the arithmetic the CUDA body copies; the GPU check
(scripts/gpu_check.py against the interpreter) is what proves the body itself."""

from __future__ import annotations

import numpy as np
import pytest

from test_interp import conv_ref

CT_M, CT_N, CT_K = 64, 64, 16  # kCtM, kCtN, kCtK


def tiled_conv_tile(x, w, bias, stride, pad, dil, s0, s1, u0, u1, out):
    """One task's tile, as conv_tiled_body computes it: x [sessions, c_in, L], w [c_out, c_in, KW], out
    [sessions, c_out * T] (a session's flat output elements e = o * T + t)."""
    c_in, L = x.shape[1], x.shape[2]
    KW, T = w.shape[2], out.shape[1] // w.shape[0]
    M, U, K = (s1 - s0) * T, u1 - u0, c_in * KW
    xs, wflat = x.reshape(x.shape[0], -1), w.reshape(w.shape[0], -1)
    wbase = wflat[u0:].reshape(-1)
    for m0 in range(0, M, CT_M):
        for j0 in range(0, U, CT_N):
            acc = np.zeros((CT_M, CT_N), np.float32)
            for k0 in range(0, K, CT_K):
                As = np.zeros((CT_K, CT_M), np.float32)
                for i in range(CT_M * CT_K):
                    kk, m, k = i // CT_M, m0 + i % CT_M, k0 + i // CT_M
                    if m < M and k < K:
                        pos = (m % T) * stride + (k % KW) * dil - pad
                        if 0 <= pos < L:
                            As[kk, i % CT_M] = xs[s0 + m // T, (k // KW) * L + pos]
                Bs = np.zeros((CT_N, CT_K + 1), np.float32)  # channel-major, padded
                for i in range(CT_N * CT_K):
                    jj, kk = i // CT_K, i % CT_K
                    j, k = j0 + jj, k0 + kk
                    if j < U and k < K:
                        Bs[jj, kk] = wbase[j * K + k]
                acc += As.T @ Bs[:, :CT_K].T
            for mm in range(CT_M):
                m = m0 + mm
                if m >= M:
                    continue
                for jj in range(CT_N):
                    j = j0 + jj
                    if j >= U:
                        continue
                    o = u0 + j
                    out[s0 + m // T, o * T + m % T] = acc[mm, jj] + bias[o]


@pytest.mark.parametrize("c_in, c_out, L, KW, stride, pad, sessions, tiles", [
    (1, 72, 640, 256, 128, 0, 20, [(0, 17, 0, 40), (0, 17, 40, 72), (17, 20, 0, 72)]),  # the STFT's shape, ragged tiles
    (129, 40, 4, 3, 1, 1, 33, [(0, 33, 0, 16), (0, 33, 16, 40)]),        # the first encoder conv
    (64, 24, 2, 3, 2, 1, 70, [(0, 70, 0, 24)]),                          # stride 2 over 2 positions
])
def test_the_tiled_arithmetic_matches_onnx_conv(c_in, c_out, L, KW, stride, pad, sessions, tiles):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((sessions, c_in, L)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, KW)) / np.sqrt(c_in * KW)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    want = conv_ref(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64), (stride,), (pad, pad), (1,), 1)
    T = want.shape[2]
    got = np.full((sessions, c_out * T), np.nan, np.float32)
    for s0, s1, u0, u1 in tiles:
        tiled_conv_tile(x, w, bias, stride, pad, 1, s0, s1, u0, u1, got)
    np.testing.assert_allclose(got.reshape(sessions, c_out, T), want, rtol=0, atol=1e-5)
