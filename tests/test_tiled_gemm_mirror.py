"""The tiled GEMM's index arithmetic (targets/cuda/codegen.py: tiled_gemm with ConvTileOps and MatmulTileOps,
on unless kTiledGemm is false), mirrored in numpy thread by thread: where each thread stages its values of a
chunk, what each operand gathers there, how the mma.sync m16n8k8 fragments read the staging (the PTX ISA's
layouts for .tf32), and where each accumulator is stored. The mirror sums in float64, so against the float64
reference (ONNX Conv, tests/test_interp.conv_ref; a numpy matmul) it agrees to rounding (1e-9 relative): a
mismatch is an index error in the arithmetic the CUDA body copies. The GPU check (scripts/gpu_check.py
--builtin, tests/test_cuda.py on a GPU) is what proves the body itself, 3xTF32 rounding included."""

from __future__ import annotations

import numpy as np
import pytest

from test_interp import conv_ref

TG_M = 64  # kTgM


def tg_k(threads: int) -> int:
    """kTgK: 64 k rows a chunk at 512 threads a block, 32 at the others."""
    return 64 if threads == 512 else 32


def gemm_smem_floats(threads: int) -> int:
    """kGemmSmemFloats: the larger of the tiled GEMM's staging (when the block tiles it) and the streaming
    GEMM's, threads x kSvRows (8)."""
    k_chunk = tg_k(threads)
    tiled = (TG_M + 16 * (threads // 32 // 4)) * (k_chunk + 4)
    fits = threads % 128 == 0 and threads <= 1024 and TG_M * k_chunk % threads == 0
    return max(tiled, threads * 8) if fits else threads * 8


class Geometry:
    """kTgWarps, kTgK, kTgN, kTgRowStep, kTgLoadsA, kTgLoadsB and the staging positions of a block of ``threads`` threads."""

    def __init__(self, threads: int):
        self.threads, self.warps, self.k_chunk = threads, threads // 32, tg_k(threads)
        self.n = 16 * (self.warps // 4)
        self.row_step = threads // self.k_chunk
        self.loads_a = TG_M * self.k_chunk // threads
        self.loads_b = self.n * self.k_chunk // threads
        tid = np.arange(threads)
        self.a_row = tid[:, None] // self.k_chunk + np.arange(self.loads_a)[None, :] * self.row_step  # tg_a_row(i)
        self.k = tid % self.k_chunk  # tg_k()

    def b_pos(self, along_k: bool) -> tuple[np.ndarray, np.ndarray]:
        """(column, k) of each thread's B values: tg_b_col / tg_b_k."""
        tid, i = np.arange(self.threads)[:, None], np.arange(self.loads_b)[None, :]
        if along_k:
            return tid // self.k_chunk + i * self.row_step, np.broadcast_to(tid % self.k_chunk, (self.threads, self.loads_b))
        return np.broadcast_to(tid % self.n, (self.threads, self.loads_b)), tid // self.n + i * (self.k_chunk // self.loads_b)


def staged(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The staging buffer the threads' stores fill; every slot written exactly once."""
    buf = np.full(shape, np.nan)
    hits = np.zeros(shape, int)
    np.add.at(hits, (rows.ravel(), cols.ravel()), 1)
    assert (hits == 1).all(), "the staging stores do not cover the chunk exactly once"
    buf[rows.ravel(), cols.ravel()] = values.ravel()
    return buf


# Where tg_products reads each fragment register from the staging, as (row, k) offsets from (g, q) for A
# (a_big[0..3]) and k offsets from q for B (b_big[0..1], the row being column g of the n8 tile) ...
CODE_A_READS = [(0, 0), (8, 0), (0, 4), (8, 4)]
CODE_B_READS = [0, 4]
# ... and where the PTX ISA puts each register in the m16n8k8 .tf32 tile ("Matrix Fragments for mma.m16n8k8"):
# a_i at (row, col) = (g, q) + PTX_A[i] of A (16 x 8), b_i at (row = k, col = n) = (q + PTX_B[i], g) of B.
PTX_A = [(0, 0), (8, 0), (0, 4), (8, 4)]
PTX_B = [0, 4]


def warp_products(As: np.ndarray, Bs: np.ndarray, wm: int, wn: int, acc: np.ndarray) -> None:
    """tg_products for one warp: acc[lane, nt, fragment] += the m16n8k8 products of its fragments."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    for k8 in range(0, As.shape[1], 8):
        a = np.zeros((16, 8))  # the A tile the registers assemble, placed as the PTX layout places them
        for (dr, dk), (pr, pc) in zip(CODE_A_READS, PTX_A):
            a[g + pr, q + pc] = As[wm + g + dr, k8 + q + dk]
        for nt in range(2):
            b = np.zeros((8, 8))  # B (k x n)
            for dk, pk in zip(CODE_B_READS, PTX_B):
                b[q + pk, g] = Bs[wn + nt * 8 + g, k8 + q + dk]
            d = a @ b
            acc[:, nt, 0] += d[g, 2 * q]
            acc[:, nt, 1] += d[g, 2 * q + 1]
            acc[:, nt, 2] += d[g + 8, 2 * q]
            acc[:, nt, 3] += d[g + 8, 2 * q + 1]


def tiled_gemm(geo: Geometry, ops, M: int, N: int, K: int) -> None:
    """tiled_gemm: every block of outputs, chunk by chunk, then each lane's stores."""
    b_col, b_k = geo.b_pos(ops.along_k)
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    for m0 in range(0, M, TG_M):
        for n0 in range(0, N, geo.n):
            acc = np.zeros((geo.warps, 32, 2, 4))
            for k0 in range(0, K, geo.k_chunk):
                a_vals, b_vals = ops.load(geo, m0, n0, k0, b_col, b_k)
                As = staged(geo.a_row, np.broadcast_to(geo.k[:, None], geo.a_row.shape), a_vals, (TG_M, geo.k_chunk))
                Bs = staged(b_col, b_k, b_vals, (geo.n, geo.k_chunk))
                for w in range(geo.warps):
                    warp_products(As, Bs, w % 4 * 16, w // 4 * 16, acc[w])
            for w in range(geo.warps):
                wm, wn = w % 4 * 16, w // 4 * 16
                for nt in range(2):
                    for c in range(2):
                        n = n0 + wn + nt * 8 + 2 * q + c
                        for row, frag in ((m0 + wm + g, c), (m0 + wm + g + 8, 2 + c)):
                            keep = (n < N) & (row < M)
                            ops.store(row[keep], n[keep], acc[w, keep, nt, frag])


class ConvOps:
    """ConvTileOps over x [sessions, c_in, L], w [c_out, c_in, KW]; out [sessions, c_out * T]."""

    along_k = True

    def __init__(self, x, w, bias, stride, pad, dil, s0, s1, u0, u1, out):
        self.x, self.bias, self.out = x.reshape(x.shape[0], -1), bias, out
        self.L, self.KW = x.shape[2], w.shape[2]
        self.T = out.shape[1] // w.shape[0]
        self.K = x.shape[1] * self.KW
        self.w = w.reshape(w.shape[0], -1).reshape(-1)[u0 * self.K:]  # the tile's first channel's weights
        self.stride, self.pad, self.dil, self.s0, self.u0 = stride, pad, dil, s0, u0
        self.M, self.U = (s1 - s0) * self.T, u1 - u0

    def load(self, geo, m0, n0, k0, b_col, b_k):
        m = m0 + geo.a_row
        k = np.broadcast_to((k0 + geo.k)[:, None], m.shape)
        pos = (m % self.T) * self.stride - self.pad + (k % self.KW) * self.dil
        ok = (m < self.M) & (k < self.K) & (pos >= 0) & (pos < self.L)
        a = np.zeros(m.shape)
        a[ok] = self.x[self.s0 + m[ok] // self.T, (k[ok] // self.KW) * self.L + pos[ok]]
        n, kb = n0 + b_col, k0 + b_k
        okb = (n < self.U) & (kb < self.K)
        b = np.zeros(n.shape)
        b[okb] = self.w[n[okb] * self.K + kb[okb]]
        return a, b

    def store(self, m, n, acc):
        s, t, o = self.s0 + m // self.T, m % self.T, self.u0 + n
        self.out[s, o * self.T + t] = acc + self.bias[o]


class MatmulOps:
    """MatmulTileOps for out[s, r, n] = sum_k a[s, r, k] b[k, n] over rows row0.. and columns col0..col1 of
    each session s0..s1; b stored [k, n] (read along n) or, with ``nk``, [n, k] (along k)."""

    def __init__(self, a, b, nk, s0, s1, row0, rows, col0, col1, out):
        self.a, self.out, self.K, self.N = a, out, a.shape[2], out.shape[2]
        self.bk, self.bn = (1, self.K) if nk else (self.N, 1)
        self.b = (np.ascontiguousarray(b.T) if nk else b).reshape(-1)[col0 * self.bn:]
        self.along_k = self.bk == 1
        self.s0, self.row0, self.rows, self.col0 = s0, row0, rows, col0
        self.M, self.cols = (s1 - s0) * rows, col1 - col0

    def load(self, geo, m0, n0, k0, b_col, b_k):
        m = m0 + geo.a_row
        k = np.broadcast_to((k0 + geo.k)[:, None], m.shape)
        ok = (m < self.M) & (k < self.K)
        a = np.zeros(m.shape)
        a[ok] = self.a[self.s0 + m[ok] // self.rows, self.row0 + m[ok] % self.rows, k[ok]]
        n, kb = n0 + b_col, k0 + b_k
        okb = (n < self.cols) & (kb < self.K)
        b = np.zeros(n.shape)
        b[okb] = self.b[kb[okb] * self.bk + n[okb] * self.bn]
        return a, b

    def store(self, m, n, acc):
        self.out[self.s0 + m // self.rows, self.row0 + m % self.rows, self.col0 + n] = acc


def tg_fits(threads: int) -> bool:
    """kTgFits: the block sizes the tiled GEMM runs at."""
    return threads % 128 == 0 and threads <= 1024 and (TG_M * tg_k(threads)) % threads == 0


@pytest.mark.parametrize("threads", range(32, 1025, 32))
def test_the_staging_covers_each_chunk_once_at_every_block_size_it_runs_at(threads):
    """Every size kTgFits admits stages each chunk exactly once; the multiples of 128 it refuses (384 threads,
    say) would skip rows of A, and take the lane-group bodies."""
    geo = Geometry(threads)
    stage_a = lambda: staged(geo.a_row, np.broadcast_to(geo.k[:, None], geo.a_row.shape),  # noqa: E731
                             np.zeros(geo.a_row.shape), (TG_M, geo.k_chunk))
    if not tg_fits(threads):
        if threads % 128 == 0:
            with pytest.raises(AssertionError, match="exactly once"):
                stage_a()
        return
    stage_a()
    for along_k in (True, False):
        col, k = geo.b_pos(along_k)
        staged(col, k, np.zeros(col.shape), (geo.n, geo.k_chunk))


@pytest.mark.parametrize("c_in, c_out, L, KW, stride, pad, sessions, tiles", [
    (1, 72, 640, 256, 128, 0, 20, [(0, 17, 0, 40), (0, 17, 40, 72), (17, 20, 0, 72)]),  # the STFT's shape, ragged tiles
    (129, 40, 4, 3, 1, 1, 33, [(0, 33, 0, 16), (0, 33, 16, 40)]),        # the first encoder conv
    (64, 24, 2, 3, 2, 1, 70, [(0, 70, 0, 24)]),                          # stride 2 over 2 positions
])
@pytest.mark.parametrize("threads", [512, 256])
def test_the_tiled_conv_arithmetic_matches_onnx_conv(c_in, c_out, L, KW, stride, pad, sessions, tiles, threads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((sessions, c_in, L))
    w = rng.standard_normal((c_out, c_in, KW)) / np.sqrt(c_in * KW)
    bias = rng.standard_normal(c_out)
    want = conv_ref(x, w, bias, (stride,), (pad, pad), (1,), 1)
    T = want.shape[2]
    got = np.full((sessions, c_out * T), np.nan)
    for s0, s1, u0, u1 in tiles:
        ops = ConvOps(x, w, bias, stride, pad, 1, s0, s1, u0, u1, got)
        tiled_gemm(Geometry(threads), ops, ops.M, ops.U, ops.K)
    np.testing.assert_allclose(got.reshape(sessions, c_out, T), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("nk", [False, True], ids=["b-kn", "b-nk"])
@pytest.mark.parametrize("tiles", [
    [(0, 70, 0, 1, 0, 40), (0, 70, 0, 1, 40, 130)],  # parts of one row (the LSTM's gates), ragged columns
    [(0, 33, 0, 3, 0, 130)],                         # whole rows: M = sessions x rows
])
def test_the_tiled_matmul_arithmetic_matches_numpy(nk, tiles):
    rng = np.random.default_rng(4)
    sessions, rows, K, N = 70, 3, 75, 130
    a = rng.standard_normal((sessions, rows, K))
    b = rng.standard_normal((K, N)) / np.sqrt(K)
    got = np.full((sessions, rows, N), np.nan)
    for s0, s1, row0, n_rows, col0, col1 in tiles:
        ops = MatmulOps(a, b, nk, s0, s1, row0, n_rows, col0, col1, got)
        tiled_gemm(Geometry(512), ops, ops.M, ops.cols, ops.K)
    want = a @ b
    for s0, s1, row0, n_rows, col0, col1 in tiles:
        part = np.s_[s0:s1, row0:row0 + n_rows, col0:col1]
        np.testing.assert_allclose(got[part], want[part], rtol=1e-9, atol=1e-12)
