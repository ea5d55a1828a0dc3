"""The tensor-core streaming GEMM's index arithmetic (targets/cuda/codegen.py: MmaStreamLayout and
mma_stream_gemm, run by matmul_gemm_body for tiles of more than kSvRows and at most kMmaStreamRows rows, and
of up to 64 that the tiled GEMM declines),
mirrored in numpy warp by warp and lane by lane: which A and b values each lane loads at each step of its
slice (k stored (2q, 2q + 1) for the fragments' logical (q, q + 4), column 4c + t of a group as n8 tile t's
column c), how the PTX ISA's m16n8k8 .tf32 layouts place them (test_tiled_gemm_mirror.PTX_A / PTX_B), the
fixed tree that adds the slices' parts through the staging buffer (every slot written before it is read,
within the buffer), and where each fragment is stored. The mirror sums in float64, so against a float64
product it agrees to rounding: a mismatch is an index error the CUDA body copies. The GPU check
(scripts/gpu_check.py --builtin; bench/gemm.py against numpy) proves the body itself, 3xTF32 included."""

from __future__ import annotations

import numpy as np
import pytest

from test_tiled_gemm_mirror import PTX_A, PTX_B, gemm_smem_floats
from wavec.weights import round_to_bf16

PASS_GROUPS, COLS, DEPTH = 4, 32, 4  # kMmaPassGroups, kMmaCols, kMmaDepth
PART = 16 * COLS  # kMmaPart


class Layout:
    """MmaStreamLayout for a tile of ``M`` rows and ``n_cols`` columns over a block of ``threads`` threads,
    per warp."""

    def __init__(self, n_cols: int, M: int, threads: int):
        self.g_count = -(-n_cols // COLS)
        self.h = min(-(-M // 16), PASS_GROUPS)
        self.wg = threads // 32 // (self.g_count * self.h)
        warp = np.arange(threads // 32)
        self.group, self.rows = warp % self.g_count, warp // self.g_count % self.h
        self.slice = warp // (self.g_count * self.h)
        self.active = self.slice < self.wg
        self.slots = (self.wg + 1) // 2

    def fits(self, threads: int, K: int) -> bool:
        return (self.wg >= 1 and self.g_count * self.h * self.slots * PART <= gemm_smem_floats(threads)
                and K >= 512 and -(-K // 8) >= 2 * DEPTH * self.wg)


def mma_stream_gemm(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """mma_stream_gemm of a [M, K] by b [K, n_cols], as the block computes it (float64 sums)."""
    M, K = a.shape
    n_cols = b.shape[1]
    L = Layout(n_cols, M, threads)
    assert L.fits(threads, K)
    steps = -(-K // 8)
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    out = np.full((M, n_cols), np.nan)
    loaded = np.zeros((M, K), int)  # A values each pass's lanes load (once a column group)
    for m0 in range(0, M, 16 * L.h):
        acc = np.zeros((len(L.active), 32, 4, 4))  # [warp, lane, n8 tile, fragment]
        loaded[:] = 0
        for w in np.flatnonzero(L.active):
            rows = m0 + 16 * L.rows[w] + g  # this lane's rows: rows, rows + 8
            col = L.group[w] * COLS + 4 * g
            my_steps = -(-(steps - L.slice[w]) // L.wg) if L.slice[w] < steps else 0
            for i in range(my_steps):
                k0 = 8 * (L.slice[w] + i * L.wg) + 2 * q
                av = np.zeros((32, 2, 2))  # [lane][row g, g + 8][k 2q, 2q + 1]
                bv = np.zeros((32, 2, 4))  # [lane][k 2q, 2q + 1][its four columns]
                for kk in range(2):
                    k = k0 + kk
                    for h in range(2):
                        ok = (k < K) & (rows + 8 * h < M)
                        av[ok, h, kk] = a[rows[ok] + 8 * h, k[ok]]
                        np.add.at(loaded, (rows[ok] + 8 * h, k[ok]), 1)
                    okb = (k < K) & (col < n_cols)
                    bv[okb, kk] = b[k[okb][:, None], col[okb][:, None] + np.arange(4)[None, :]]
                a_regs = [av[:, 0, 0], av[:, 1, 0], av[:, 0, 1], av[:, 1, 1]]  # the code's a_big[0..3]
                tile_a = np.zeros((16, 8))
                for reg, (pr, pc) in zip(a_regs, PTX_A):
                    tile_a[g + pr, q + pc] = reg
                for nt in range(4):
                    tile_b = np.zeros((8, 8))  # B (logical k x n)
                    for kk, pk in enumerate(PTX_B):
                        tile_b[q + pk, g] = bv[:, kk, nt]
                    d = tile_a @ tile_b
                    acc[w, :, nt] += np.stack([d[g, 2 * q], d[g, 2 * q + 1], d[g + 8, 2 * q], d[g + 8, 2 * q + 1]], 1)
        assert (loaded[m0:m0 + 16 * L.h] == L.g_count).all(), "a pass does not load each A value once a group"
        buf = np.full(L.g_count * L.h * L.slots * PART, np.nan)
        span = 1
        while span < L.wg:
            for w in np.flatnonzero(L.active & (L.slice % (2 * span) == span)):
                at = ((L.group[w] * L.h + L.rows[w]) * L.slots + L.slice[w] // (2 * span)) * PART
                r = np.arange(16)
                buf[at + r[:, None] * 32 + lane[None, :]] = acc[w, :, r // 4, r % 4]  # [r, lane]
            for w in np.flatnonzero(L.active & (L.slice % (2 * span) == 0) & (L.slice + span < L.wg)):
                at = ((L.group[w] * L.h + L.rows[w]) * L.slots + L.slice[w] // (2 * span)) * PART
                r = np.arange(16)
                part = buf[at + r[:, None] * 32 + lane[None, :]]
                assert not np.isnan(part).any(), "a slice reads a part no slice wrote"
                acc[w, :, r // 4, r % 4] += part
            span *= 2
        for w in np.flatnonzero(L.active & (L.slice == 0)):
            rows = m0 + 16 * L.rows[w] + g
            for h in range(2):
                for nt in range(4):
                    for c in range(2):
                        n = L.group[w] * COLS + 4 * (2 * q + c) + nt
                        keep = (n < n_cols) & (rows + 8 * h < M)
                        assert np.isnan(out[rows[keep] + 8 * h, n[keep]]).all(), "an output stored twice"
                        out[rows[keep] + 8 * h, n[keep]] = acc[w, keep, nt, 2 * h + c]
    return out


CASES = [  # (M, K, n_cols, threads): what they stand for
    (32, 4096, 32, 512),   # duplex:1b's output projections in tiles of 32 sessions
    (64, 2048, 44, 512),   # 64 rows (the tiled GEMM's since the twelfth run): four row groups, two column groups
    (64, 2048, 16, 512),   # half of each lane group's columns idle
    (20, 1100, 64, 512),   # rows and k of no round size: a partial row group, a partial last step
    (9, 1030, 128, 512),   # four column groups of four slices, a partial last step
    (40, 1000, 128, 512),  # 4 column x 3 row groups: one slice each, no tree, 4 warps idle
    (17, 1100, 36, 1024),  # 1,024 threads: 8 slices a row group
    (33, 520, 12, 128),    # 128 threads: one slice, three row groups
]


@pytest.mark.parametrize("M, K, n_cols, threads", CASES)
def test_the_tensor_core_streaming_gemm_computes_the_product(M, K, n_cols, threads):
    rng = np.random.default_rng(M * 131 + K)
    a = rng.normal(size=(M, K))
    b = rng.normal(size=(K, n_cols))
    got = mma_stream_gemm(a, b, threads)
    assert not np.isnan(got).any(), "an output is never stored"
    np.testing.assert_allclose(got, a @ b, rtol=1e-9, atol=1e-9 * np.sqrt(K))


def test_a_block_takes_only_the_tiles_it_streams_and_can_reduce():
    """32 rows and three groups of 32 columns at 512 threads make slices of two warps (16 / 6 warps a row
    group): 3 x 2 x 1 parts of 512 floats fit; 64 rows and five column groups make 20 row x column groups, more
    than the 16 warps; 48 column groups too. K is at least 512 and 2 x kMmaDepth steps a slice: Silero's LSTM
    tiles at 1,024 sessions (64 rows, 64 columns, K = 128) stay on the tiled GEMM; duplex:1b's encoder tiles at
    96 sessions (24 rows, 24 columns, K = 768: 8 slices of 12 steps) take it."""
    assert Layout(96, 32, 512).fits(512, 4096)
    assert not Layout(160, 64, 512).fits(512, 4096) and Layout(160, 32, 512).fits(512, 4096)
    assert not Layout(32 * 48, 32, 512).fits(512, 4096)
    assert not Layout(64, 64, 512).fits(512, 128) and Layout(24, 24, 512).fits(512, 768)
    assert not Layout(24, 64, 512).fits(512, 504) and Layout(24, 64, 512).fits(512, 512)


def tf32_rn(x: np.ndarray) -> np.ndarray:
    """cvt.rn.tf32.f32 on float32 ``x``: the nearest value with 10 mantissa bits, ties to even."""
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def test_the_tf32_split_keeps_23_bits_without_bias():
    """tf32_split: big = x rounded to TF32, small = the exact rest rounded too, both to nearest even. big + small
    is within 2^-23 of x, relative, and the errors average out (truncating either part, one instruction
    too, would give 2^-22 and pull every product toward zero)."""
    rng = np.random.default_rng(11)
    x = (rng.normal(size=200_000) * np.exp2(rng.integers(-30, 30, size=200_000))).astype(np.float32)
    big = tf32_rn(x)
    rest = (x - big).astype(np.float32)
    assert (rest.astype(np.float64) == x.astype(np.float64) - big.astype(np.float64)).all(), "x - big is exact"
    small = tf32_rn(rest)
    for v in (big, small):
        assert (v.view(np.uint32) & np.uint32(0x1FFF) == 0).all(), "a TF32 value"
    err = (big.astype(np.float64) + small - x) / x.astype(np.float64)  # < 0: toward zero
    assert np.abs(err).max() <= 2.0 ** -23
    assert abs(err.mean()) < 2.0 ** -23 / 100


def test_a_bf16_value_is_its_own_tf32():
    """A MATMUL's b_tf32 (a bf16 weight's b): its values' bits are the TF32 operands unsplit, and the product the
    tensor-core bodies then skip, a_big x b_small, is zero: tf32_split of a bf16 value gives big = x, small = 0.
    A float32 value with more mantissa bits does not split so."""
    rng = np.random.default_rng(12)
    x = round_to_bf16((rng.normal(size=100_000) * np.exp2(rng.integers(-30, 30, size=100_000))).astype(np.float32))
    assert (tf32_rn(x) == x).all() and ((x - tf32_rn(x)) == 0).all()
    y = rng.normal(size=1000).astype(np.float32)
    assert (tf32_rn(y) != y).mean() > 0.99
