"""The weight-streaming GEMM's index arithmetic (targets/cuda/codegen.py: StreamLayout and stream_gemm, run by
matmul_gemm_body unless kStreamGemm is false), mirrored in numpy thread by thread: which columns and k rows
each thread loads in each chunk, where A's chunk is staged, how the lanes' and warps' partial sums are added,
and every shared-memory index against the buffer's size. The mirror accumulates in float32 in the kernel's
order, so against a float64 reference it agrees to fp32 rounding; a coverage or bounds failure is an index
error the CUDA body copies. The GPU check (scripts/gpu_check.py --builtin; tests/test_cuda.py on a GPU) is what
proves the body itself."""

from __future__ import annotations

import numpy as np
import pytest

SV_ROWS, SV_DEPTH = 8, 4  # kSvRows, kSvDepth


class Layout:
    """StreamLayout for Q column vectors over a block of ``threads`` threads."""

    def __init__(self, q_vectors: int, threads: int, depth: int = SV_DEPTH):
        self.qp = depth
        while self.qp < q_vectors and self.qp < 32:
            self.qp *= 2
        self.g = -(-q_vectors // self.qp)
        self.wg = threads // 32 // self.g
        self.r = self.wg * (32 // self.qp)
        tid = np.arange(threads)
        warp, lane = tid // 32, tid % 32
        self.slice = warp // self.g * (32 // self.qp) + lane // self.qp
        self.q = warp % self.g * self.qp + lane % self.qp
        self.active = (warp < self.g * self.wg) & (self.q < q_vectors)
        self.slice = np.where(self.active, self.slice, 0)  # an idle thread reads slice 0's staging
        self.warp, self.lane = warp, lane


def stream_gemm(a: np.ndarray, b: np.ndarray, vec: int, threads: int, depth: int = SV_DEPTH) -> np.ndarray:
    """stream_gemm<vec> of a [M, K] by b [K, n_cols], as the block computes it (float32), with kSvDepth = depth."""
    M, K = a.shape
    n_cols = b.shape[1]
    smem_floats = threads * SV_ROWS  # kSvSmemFloats
    L = Layout(n_cols // vec, threads, depth)
    ncolp = L.g * L.qp * vec
    assert L.active.any() and (L.slice < L.r).all() and L.r <= threads // 4
    out = np.full((M, n_cols), np.nan, np.float32)
    cols = L.q[:, None] * vec + np.arange(vec)[None, :]  # [threads, vec]
    spc = threads // L.r // depth * depth  # steps a chunk of A covers
    kc = spc * L.r
    assert spc >= depth and SV_ROWS * kc <= smem_floats
    steps = -(-K // L.r)
    tid = np.arange(threads)
    sm, sk, s_stride = tid % SV_ROWS, tid // SV_ROWS, threads // SV_ROWS
    for m0 in range(0, M, SV_ROWS):
        rows = min(SV_ROWS, M - m0)
        acc = np.zeros((threads, SV_ROWS, vec), np.float32)
        covered = np.zeros((K, n_cols), int)
        for c0 in range(0, steps, spc):
            staging = np.full(SV_ROWS * kc, np.nan, np.float32)
            for u in range(SV_ROWS):  # each thread's staged values: A(m0 + sm, c0 * R + sk + u * s_stride)
                kk = sk + u * s_stride
                k = c0 * L.r + kk
                slot = (kk * SV_ROWS + sm)[kk < kc]
                assert np.isnan(staging[slot]).all()
                inside = (sm < rows) & (k < K)
                staging[kk[kk < kc] * SV_ROWS + sm[kk < kc]] = np.where(
                    inside, a[np.minimum(m0 + sm, M - 1), np.minimum(k, K - 1)], 0)[kk < kc]
            assert not np.isnan(staging).any(), "the staging stores do not cover the chunk"
            for i in range(c0, min(c0 + spc, steps)):
                k = i * L.r + L.slice
                valid = L.active & (k < K)
                bv = np.zeros((threads, vec), np.float32)
                bv[valid] = b[k[valid][:, None], cols[valid]]
                np.add.at(covered, (np.repeat(k[valid], vec), cols[valid].ravel()), 1)
                at = ((i - c0) * L.r + L.slice)[:, None] * SV_ROWS + np.arange(SV_ROWS)[None, :]
                assert at.max() < SV_ROWS * kc
                acc = (acc + staging[at][:, :, None] * bv[:, None, :]).astype(np.float32)
        assert (covered == 1).all(), "a pass does not load each (k, column) exactly once"
        off = L.qp
        while off < 32:  # __shfl_xor_sync over the lanes sharing columns
            acc = (acc + acc[(L.warp * 32 + (L.lane ^ off))]).astype(np.float32)
            off *= 2
        round_ = max(1, smem_floats // (L.wg * ncolp))
        slot = L.warp // L.g
        for r0 in range(0, rows, round_):
            part = np.full(smem_floats, np.nan, np.float32)
            writers = np.flatnonzero(L.active & (L.lane < L.qp))
            for t in writers:
                for m in range(r0, min(r0 + round_, rows)):
                    at = (slot[t] * round_ + (m - r0)) * ncolp + cols[t]
                    assert at.max() < smem_floats and np.isnan(part[at]).all()
                    part[at] = acc[t, m]
            for i in range(min(round_, rows - r0) * n_cols):
                m, n = divmod(i, n_cols)
                total = np.float32(0)
                for w in range(L.wg):
                    total = np.float32(total + part[(w * round_ + m) * ncolp + n])
                out[m0 + r0 + m, n] = total
    return out


CASES = [  # (M, K, n_cols, vec, threads): what they stand for
    (1, 128, 32, 4, 512),     # Silero's LSTM gates at one session (a 32-column tile)
    (4, 768, 12, 4, 512),     # duplex:1b's attention projections, 4 sessions a tile
    (8, 2048, 16, 4, 512),    # bench/gemm.py at 8 sessions
    (10, 1100, 256, 4, 512),  # tests/test_cuda.py TILED: two whole rows of 5 sessions (two passes, two groups)
    (5, 1100, 126, 1, 512),   # TILED's unaligned 126 columns: one column a thread, four groups
    (300, 64, 2, 1, 512),     # TILED's 2-column tile at 300 sessions: 38 passes, half the lanes idle
    (8, 2048, 244, 4, 512),   # duplex:1b's vocabulary projection: two warp groups, 8 slices, 4 chunks
    (3, 70, 2048, 4, 512),    # the widest tile taken: 512 vectors, one warp a group
    (6, 300, 40, 4, 1024),    # 1,024 threads
    (2, 50, 8, 4, 128),       # 128 threads
    (3, 90, 20, 4, 64),       # 64 threads (a target's threads_per_block may be any multiple of 32)
    (5, 70, 12, 1, 32),       # 32 threads: one warp
]


@pytest.mark.parametrize("depth", [SV_DEPTH, 8], ids=["kSvDepth", "depth8"])
@pytest.mark.parametrize("M, K, n_cols, vec, threads", CASES)
def test_the_streaming_gemm_computes_the_product(M, K, n_cols, vec, threads, depth):
    """At the kernel's kSvDepth, and at 8 (bench/gemm.py --set kSvDepth=8)."""
    rng = np.random.default_rng(M * 7919 + K)
    a = rng.normal(size=(M, K)).astype(np.float32)
    b = (rng.normal(size=(K, n_cols)) / np.sqrt(K)).astype(np.float32)
    got = stream_gemm(a, b, vec, threads, depth)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # float32 sums of K unit-variance terms, in the kernel's order: a few ulps of sqrt(K)-sized partials.
    assert np.max(np.abs(got - want)) <= 1e-5 * np.sqrt(K)


def test_the_layout_refuses_nothing_it_takes():
    """matmul_stream_body takes tiles of at most 32 column vectors a warp: each such tile has every warp group
    at least one warp, so no vector is left without a thread."""
    for threads in (128, 256, 512, 1024):
        for q in range(1, 32 * threads // 32 + 1):
            L = Layout(q, threads)
            assert L.wg >= 1
            assert set(L.q[L.active]) == set(range(q))
