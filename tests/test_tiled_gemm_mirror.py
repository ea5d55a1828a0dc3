"""The tiled GEMM's index arithmetic (targets/cuda/codegen.py: tiled_gemm with ConvTileOps and MatmulTileOps,
on unless kTiledGemm is false), mirrored in numpy thread by thread: how the block's copies walk each chunk
(TgWalk, one float or four a copy), where they land in a stage (tg_b_offset's two layouts of B), what each
copy reads and how much of it lies inside the operand (CopySource, floats_inside), how the mma.sync m16n8k8
fragments read the stage (the PTX ISA's layouts for .tf32), and where each accumulator is stored, with the
epilogue's extra read at its row's offsets plus a column's stride (Epilogue::offsets, dim_strides). The mirror
sums in float64, so against the float64 reference (ONNX Conv, tests/test_interp.conv_ref; a numpy matmul) it
agrees to rounding (1e-9 relative): a mismatch is an index error in the arithmetic the CUDA body copies. The
GPU check (scripts/gpu_check.py --builtin, tests/test_cuda.py on a GPU) is what proves the body itself,
cp.async and 3xTF32 rounding included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_interp import conv_ref
from wavec.targets.cuda import codegen
from wavec.targets.cuda.codegen import (BIG_BLOCK, TALL_WARPS_M, TILED_GEMM_STAGES, gemm_smem_bytes,
                                        tiled_gemm_stage_floats)


def tg_k(threads: int) -> int:
    """kTgK: 64 k rows a chunk at 512 threads a block, 32 at the others."""
    return 64 if threads == 512 else 32


def gemm_smem_floats(threads: int) -> int:
    """kGemmSmemFloats, as the runtime launches the kernel with it (the kernel asserts the same number)."""
    return gemm_smem_bytes(threads) // 4


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Walk:
    """TgWalk<W, rows, used>: rows of ``used`` floats walked as rows of ``length`` (the power of two at least
    ``used``): copy i of thread t at (row t // (length / W) + i * row_step, col (t % (length / W)) * W), made
    where ``made`` (TgWalk::copies: inside the chunk); ``covers``: the copies fit the block (TgWalk::kCovers),
    ``exact``: and tile the chunk exactly (TgWalk::kExact)."""

    def __init__(self, threads: int, w: int, rows: int, used: int):
        length = pow2_at_least(used)
        self.w, self.per_row = w, length // w
        self.row_step = threads // self.per_row if self.per_row else 0
        self.copies = -(-rows // self.row_step) if self.row_step else 0
        self.covers = self.per_row >= 1 and used % w == 0 and threads % self.per_row == 0 and self.copies >= 1
        self.exact = self.covers and used == length and self.copies * self.row_step == rows
        if not self.covers:
            return
        tid = np.arange(threads)
        self.row = tid[:, None] // self.per_row + np.arange(max(self.copies, 1))[None, :] * self.row_step  # [thread, i]
        self.col = np.broadcast_to((tid % self.per_row * w)[:, None], self.row.shape)
        self.made = (self.row < rows) & (self.col < used)


class Geometry:
    """The block's tiling at ``threads`` threads, ``w`` floats a copy, ``warps_m`` warps along m, each ``fm`` x
    ``fn`` m16n8 fragments, over chunks of ``k`` (TgBlock<warps_m, fm, fn, k>: 4 is TgWide, TALL_WARPS_M TgTall,
    BIG_BLOCK TgBig): kM, kN, kK, the stage's layout (kLd, kLdN, kStageFloats), the warps that compute, and the
    three walks (A; B k-contiguous; B n-contiguous)."""

    def __init__(self, threads: int, w: int = 1, warps_m: int = 4, fm: int = 1, fn: int = 2, k: int | None = None):
        self.threads, self.w, self.warps, self.k_chunk = threads, w, threads // 32, k or tg_k(threads)
        self.warps_m, self.fm, self.fn = warps_m, fm, fn
        self.m, self.n = 16 * fm * warps_m, 8 * fn * (self.warps // warps_m)
        self.computing = warps_m * (self.warps // warps_m)
        self.ld, self.ld_n = self.k_chunk + 4, self.n + 8
        self.b_floats = max(self.n * self.ld, self.k_chunk * self.ld_n)
        self.stage_floats = self.m * self.ld + self.b_floats
        self.walk_a = Walk(threads, w, self.m, self.k_chunk)
        self.walk_b = {True: Walk(threads, w, self.n, self.k_chunk), False: Walk(threads, w, self.k_chunk, self.n)}

    @property
    def big(self) -> bool:
        return (self.warps_m, self.fm, self.fn, self.k_chunk) == tuple(BIG_BLOCK[x] for x in ("warps_m", "fm", "fn", "k"))

    def warp_origin(self, warp: int) -> tuple[int, int]:
        """(wm, wn): the warp's first row and column in the block."""
        return warp % self.warps_m * 16 * self.fm, warp // self.warps_m * 8 * self.fn

    def b_offset(self, along_k: bool, n, k):
        """tg_b_offset: B (n, k) in its part of the stage."""
        return n * self.ld + k if along_k else k * self.ld_n + n

    def fits(self) -> bool:
        """kTgFits (w = 1: TgWide's walks tile each chunk exactly), kTgVec (w = 4, with kTgFits), for TgTall
        kTgTallFits (512 threads, w = 4, its walks fit the block) or, for TgBig, kTgBigFits (512 threads, its
        walks of one float and of four tile each chunk exactly, kTgVec)."""
        walks = (self.walk_a, self.walk_b[True], self.walk_b[False])
        if self.big:
            both = [Geometry(self.threads, width, **BIG_BLOCK) for width in (1, 4)]
            return (self.threads == 512 and all(wk.exact for g in both for wk in (g.walk_a, *g.walk_b.values()))
                    and Geometry(self.threads, 4).fits())
        if self.warps_m != 4:
            return (self.threads == 512 and self.w == 4 and all(wk.covers for wk in walks)
                    and Geometry(self.threads, 4).fits())
        return (self.threads % 128 == 0 and self.threads <= 1024 and all(wk.exact for wk in walks)
                and (self.w == 1 or Geometry(self.threads).fits()))


def floats_inside(at, length: int, w: int):
    """floats_inside<W>: of a W-float piece at ``at`` of a row of ``length``, the floats inside it."""
    return np.clip(length - np.asarray(at), 0, w)


def stage_chunk(geo: Geometry, ops, m0: int, n0: int, k0: int):
    """The stage's A [kM, kTgK] and B [kN, kTgK] (logical (row, k) and (n, k)) after every thread's copies
    that are made (TgWalk::copies), checking that each lands inside the stage, 16-byte aligned when it moves 4
    floats, and that every slot is written exactly once."""
    stage = np.full(geo.stage_floats, np.nan)
    hits = np.zeros(geo.stage_floats, int)

    def land(offsets, sources, made):
        at, floats, operand = sources
        offsets, at, floats = (np.broadcast_to(x, made.shape)[made] for x in (offsets, at, floats))
        for j in range(geo.w):
            dst = offsets + j
            assert (dst >= 0).all() and (dst < geo.stage_floats).all()
            np.add.at(hits, dst.ravel(), 1)
            inside = j < floats
            stage[dst[inside]] = operand[at[inside] + j]
            stage[dst[~inside]] = 0.0
        if geo.w == 4:  # ptxas folds the zero-fill count into an unaligned source's low bits: it must not be
            assert (offsets % 4 == 0).all(), "a 16-byte copy lands unaligned"
            assert (at[floats > 0] % 4 == 0).all(), "a 16-byte copy reads an unaligned source"

    wa, wb = geo.walk_a, geo.walk_b[ops.along_k]
    land(wa.row * geo.ld + wa.col, ops.a_sources(geo, m0, k0), wa.made)
    b_base = geo.m * geo.ld
    b_off = wb.row * (geo.ld if ops.along_k else geo.ld_n) + wb.col
    assert (b_off[wb.made] + geo.w <= geo.b_floats).all()
    land(b_base + b_off, ops.b_sources(geo, n0, k0), wb.made)
    a_slots = (np.arange(geo.m)[:, None] * geo.ld + np.arange(geo.k_chunk)[None, :])
    n_idx, k_idx = np.meshgrid(np.arange(geo.n), np.arange(geo.k_chunk), indexing="ij")
    b_slots = b_base + geo.b_offset(ops.along_k, n_idx, k_idx)
    assert (hits[a_slots] == 1).all() and (hits[b_slots] == 1).all(), "the copies do not cover the chunk exactly once"
    assert hits.sum() == a_slots.size + b_slots.size, "a copy lands outside the chunk's slots"
    return stage[a_slots], stage[b_slots]


# Where tg_products reads each fragment register from the staging, as (row, k) offsets from (g, q) for A
# (a_big[0..3]) and k offsets from q for B (b_big[0..1], the row being column g of the n8 tile) ...
CODE_A_READS = [(0, 0), (8, 0), (0, 4), (8, 4)]
CODE_B_READS = [0, 4]
# ... and where the PTX ISA puts each register in the m16n8k8 .tf32 tile ("Matrix Fragments for mma.m16n8k8"):
# a_i at (row, col) = (g, q) + PTX_A[i] of A (16 x 8), b_i at (row = k, col = n) = (q + PTX_B[i], g) of B.
PTX_A = [(0, 0), (8, 0), (0, 4), (8, 4)]
PTX_B = [0, 4]


def warp_products(As: np.ndarray, Bs: np.ndarray, wm: int, wn: int, acc: np.ndarray) -> None:
    """tg_products for one warp: acc[lane, mt, nt, fragment] += the m16n8k8 products of its fragments."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    fm, fn = acc.shape[1:3]
    for k8 in range(0, As.shape[1], 8):
        for mt in range(fm):
            a = np.zeros((16, 8))  # the A tile the registers assemble, placed as the PTX layout places them
            for (dr, dk), (pr, pc) in zip(CODE_A_READS, PTX_A):
                a[g + pr, q + pc] = As[wm + 16 * mt + g + dr, k8 + q + dk]
            for nt in range(fn):
                b = np.zeros((8, 8))  # B (k x n)
                for dk, pk in zip(CODE_B_READS, PTX_B):
                    b[q + pk, g] = Bs[wn + nt * 8 + g, k8 + q + dk]
                d = a @ b
                acc[:, mt, nt, 0] += d[g, 2 * q]
                acc[:, mt, nt, 1] += d[g, 2 * q + 1]
                acc[:, mt, nt, 2] += d[g + 8, 2 * q]
                acc[:, mt, nt, 3] += d[g + 8, 2 * q + 1]


class Cursor:
    """TgCursor: chunk c of the block at (m0, n0); `advance` moves to the next step (blocks along n, then m) and
    says whether it began a new row of blocks."""

    def __init__(self, geo: Geometry, N: int, chunks: int):
        self.geo, self.N, self.chunks = geo, N, chunks
        self.m0 = self.n0 = self.c = 0

    def advance(self) -> bool:
        self.c += 1
        if self.c < self.chunks:
            return False
        self.c, self.n0 = 0, self.n0 + self.geo.n
        if self.n0 < self.N:
            return False
        self.n0, self.m0 = 0, self.m0 + self.geo.m
        return True


class RowTable:
    """tg_rows: the Rows of one block row, row m0 + i at slot i, filled by tg_fill_rows (kM threads) at the block
    row's first step and read at its blocks' last steps, with the kernel's barriers as events in program order: a
    fill must follow a barrier past every read of the rows it replaces, a read a barrier past the fill."""

    def __init__(self, slots: int):
        self.rows = np.full(slots, -1)
        self.filled, self.read_since_barrier, self.barrier_since_fill = False, False, False

    def barrier(self) -> None:
        self.read_since_barrier, self.barrier_since_fill = False, True

    def fill(self, m0: int) -> None:
        assert not self.read_since_barrier, "rows refilled before every warp stored with them"
        self.rows[:] = m0 + np.arange(len(self.rows))
        self.filled, self.barrier_since_fill = True, False

    def read(self, i: np.ndarray) -> np.ndarray:
        assert self.filled and self.barrier_since_fill, "rows read before every thread filled them"
        self.read_since_barrier = True
        return self.rows[i]


def tiled_gemm(geo: Geometry, ops, M: int, N: int, K: int) -> None:
    """tiled_gemm: one stream of steps over the blocks and their chunks, each step's chunk staged
    TILED_GEMM_STAGES - 1 steps ahead by the loader's cursor (A's rows those of the last start_rows, called when
    the loader begins a row of blocks), products by the compute cursor, and a block's stores at its last chunk."""
    chunks = -(-K // geo.k_chunk) if K else 1  # K = 0: one chunk of zeros
    steps = -(-M // geo.m) * -(-N // geo.n) * chunks
    load, at = Cursor(geo, N, chunks), Cursor(geo, N, chunks)
    rows_m0 = 0  # ops.start_rows(0)
    staged = {}

    def stage(j):
        nonlocal rows_m0
        if j < steps:
            staged[j % TILED_GEMM_STAGES] = stage_chunk(geo, ops, rows_m0, load.n0, load.c * geo.k_chunk)
            if load.advance():
                rows_m0 = load.m0

    for j in range(TILED_GEMM_STAGES - 1):
        stage(j)
    acc = np.zeros((geo.warps, 32, geo.fm, geo.fn, 4))
    rows = RowTable(geo.m)
    for j in range(steps):
        rows.barrier()  # the step's __syncthreads
        As, Bs = staged[j % TILED_GEMM_STAGES]  # read before the copy into the stage TILED_GEMM_STAGES - 1 ahead
        stage(j + TILED_GEMM_STAGES - 1)
        if at.n0 == 0 and at.c == 0:
            rows.fill(at.m0)
            if chunks == 1:
                rows.barrier()
        for w in range(geo.computing):
            warp_products(As, Bs, *geo.warp_origin(w), acc[w])
        if at.c + 1 == chunks:
            store_block(geo, ops, rows, at.n0, M, N, acc)
            acc[:] = 0
        at.advance()


def fragment_outputs(geo: Geometry, acc: np.ndarray):
    """Each warp's outputs as its fragments hold them (tg_store_fragments): (warp, row, column within the warp
    tile, value) for fragment c0, c1 of (mt, nt) at row 16 mt + g, columns 8 nt + 2q + c; c2, c3 8 rows below."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    for w in range(geo.computing):
        for mt in range(geo.fm):
            for nt in range(geo.fn):
                for c in range(2):
                    for row, frag in ((16 * mt + g, c), (16 * mt + g + 8, 2 + c)):
                        yield w, row, 8 * nt + 2 * q + c, acc[w, :, mt, nt, frag]


def staged_at(geo: Geometry, r, c):
    """tg_store_staged's `at`: the warp tile's (row, column) in its staging, columns swizzled (c ^ 8) on every
    other pair of rows."""
    return r * 8 * geo.fn + (c ^ (r >> 1 & 1) * 8)


STAGED_UNROLL = 4  # tg_store_staged's kUnroll


def staged_reads(geo: Geometry):
    """tg_store_staged's loop: per iteration and unrolled output u, each lane's (row, column) of the warp tile:
    kCols = 8 fn lanes a row, kPass = 32 / kCols rows a pass, rows r + u kPass from r = lane / kCols."""
    cols = 8 * geo.fn
    passes = 32 // cols
    lane = np.arange(32)
    for r0 in range(0, 16 * geo.fm, STAGED_UNROLL * passes):
        for u in range(STAGED_UNROLL):
            yield r0 + lane // cols + u * passes, lane % cols


def store_block(geo: Geometry, ops, rows: RowTable, n0: int, M: int, N: int, acc: np.ndarray) -> None:
    """tg_store (tg_store_staged): every computing warp writes its fragments to its part of the block's one
    staging (tg_out_smem + warp x kRows x kCols, staged_at) before any reads back (so that parts overlapping
    would show), then reads it in the loop's order (staged_reads), each output stored at the row the table holds
    at slot wm + its row (RowTable)."""
    tile = 16 * geo.fm * 8 * geo.fn
    staging = np.full(geo.m * geo.n, np.nan)  # tg_out_floats() for this block
    for warp, row, col, value in fragment_outputs(geo, acc):
        staging[warp * tile + staged_at(geo, row, col)] = value
    for w in range(geo.computing):
        wm, wn = geo.warp_origin(w)
        for row, col in staged_reads(geo):
            m, n = rows.read(wm + row), n0 + wn + col
            keep = (n < N) & (m < M)
            ops.store(m[keep], n[keep], staging[w * tile + staged_at(geo, row, col)][keep])


def epilogue_offsets(e: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Epilogue::offsets for one extra: flat element e of the epilogue's iteration space ``shape`` (the output's,
    one session) as e's index along each dim times the extra's stride there."""
    off, rem = np.zeros_like(e), e.copy()
    for dim, stride in zip(shape[::-1], strides[::-1]):
        off += rem % dim * stride
        rem //= dim
    return off


class Extra:
    """An epilogue's extra 0 (a residual r added to the accumulated value) over the epilogue's ``shape`` at
    ``strides`` into ``values`` (one session's floats each, [sessions, n])."""

    def __init__(self, values: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]):
        self.values, self.shape, self.strides = values, shape, strides

    def row_offsets(self, e: np.ndarray) -> np.ndarray:
        """Row::extra_off: the extra's offset at each row's first output (Epilogue::offsets)."""
        return epilogue_offsets(e, self.shape, self.strides)

    def step(self, dim: int) -> int:
        """Epilogue::dim_strides: the extra's stride along ``dim`` of the epilogue's shape."""
        return self.strides[dim] if 0 <= dim < len(self.shape) else 0


class ConvOps:
    """ConvTileOps<W> over x [sessions, c_in, L], w [c_out, c_in, KW]; out [sessions, c_out * T]; W = 4 where
    conv_copies_vectorize holds (``vectorizes``), given the geometry's width. ``extra``: the epilogue's residual,
    its shape the output's [..., C, T] of any rank (leading dims 1), stepped from one channel to the next along
    dim rank - 2 (ConvTileOps::Row::step). A's rows as ConvRowsA reads them: where T divides the walk's row
    step (``whole_sessions``), copy 0's session and window and a session step a copy, else each copy's own."""

    along_k = True

    def __init__(self, x, w, bias, stride, pad, dil, s0, s1, u0, u1, out, extra: Extra | None = None):
        self.x, self.bias, self.out, self.extra = x.reshape(x.shape[0], -1), bias, out, extra
        self.L, self.KW = x.shape[2], w.shape[2]
        self.T = out.shape[1] // w.shape[0]
        self.K = x.shape[1] * self.KW
        self.w = w.reshape(w.shape[0], -1).reshape(-1)[u0 * self.K:]  # the tile's first channel's weights
        self.stride, self.pad, self.dil, self.s0, self.u0 = stride, pad, dil, s0, u0
        self.M, self.U = (s1 - s0) * self.T, u1 - u0

    def vectorizes(self) -> bool:
        """conv_copies_vectorize (the arrays here are 16-byte aligned, x's sessions c_in x L floats apart)."""
        return (self.dil == 1 and self.KW % 4 == 0 and self.stride % 4 == 0 and self.pad % 4 == 0
                and self.L % 4 == 0 and self.x.shape[1] % 4 == 0 and (self.u0 * self.K) % 4 == 0)

    def a_sources(self, geo, m0, k0):
        """(flat index into x, floats inside, x) of every thread's A copies: a_source. k's channel and tap are
        its division by KW; outside the padded input the copy reads nothing and its address is not clamped."""
        wa = geo.walk_a
        m, k = m0 + wa.row, k0 + wa.col
        channel, tap = k // self.KW, k % self.KW
        whole_sessions = wa.row_step % self.T == 0
        session_floats = self.x.shape[1]
        if whole_sessions:
            m_first = m[:, :1]
            window = m_first % self.T * self.stride - self.pad
            row = ((self.s0 + m_first // self.T) * session_floats
                   + np.arange(wa.copies)[None, :] * (wa.row_step // self.T * session_floats))
        else:
            window = m % self.T * self.stride - self.pad
            row = (self.s0 + np.where(m < self.M, m // self.T, 0)) * session_floats
        pos = window + tap * self.dil
        valid = (m < self.M) & (k < self.K) & (pos >= 0) & (pos < self.L)
        return row + channel * self.L + pos, np.where(valid, geo.w, 0), self.x.reshape(-1)

    def b_sources(self, geo, n0, k0):
        wb = geo.walk_b[True]
        n, k = n0 + wb.row, k0 + wb.col
        return n * self.K + k, np.where((n < self.U) & (k < self.K), geo.w, 0), self.w

    def store(self, m, n, acc):
        s, t, o = self.s0 + m // self.T, m % self.T, self.u0 + n
        value = acc + self.bias[o]
        if self.extra is not None:
            rank = len(self.extra.shape)
            off = self.extra.row_offsets(self.u0 * self.T + t) + n * self.extra.step(rank - 2)
            value = value + self.extra.values[s, off]
        self.out[s, o * self.T + t] = value


class MatmulOps:
    """MatmulTileOps for out[s, r, n] = sum_k a[s, r, k] b[k, n] over rows row0.. and columns col0..col1 of
    each session s0..s1. a's rows lie ``lda`` floats apart; b is stored [k, n] (read along n) or, with
    ``nk``, [n, k] (along k), its rows ``ldb`` apart. ``extra``: the epilogue's residual over the output's
    shape [rows, N]."""

    def __init__(self, a, b, nk, s0, s1, row0, rows, col0, col1, out, lda=None, ldb=None, session_pad=0,
                 extra: Extra | None = None):
        self.extra = extra
        sessions, n_rows, self.K = a.shape
        self.N = out.shape[2]
        self.lda = lda or self.K
        self.sstride = n_rows * self.lda + session_pad  # floats between sessions' a
        self.a = np.full((sessions, self.sstride), np.nan)  # a copy reading the padding spoils the sum
        self.a[:, :n_rows * self.lda] = np.pad(a, ((0, 0), (0, 0), (0, self.lda - self.K)),
                                               constant_values=np.nan).reshape(sessions, -1)
        self.a = self.a.reshape(-1)
        stored = np.ascontiguousarray(b.T) if nk else b
        ldb = ldb or stored.shape[1]
        self.b = np.full((stored.shape[0], ldb), np.nan)
        self.b[:, :stored.shape[1]] = stored
        self.bk, self.bn = (1, ldb) if nk else (ldb, 1)
        self.pb = col0 * self.bn  # b at (k = 0, the tile's first column)
        self.b = self.b.reshape(-1)
        self.along_k, self.out, self.n_rows = nk, out, n_rows
        self.s0, self.row0, self.rows, self.col0 = s0, row0, rows, col0
        self.M, self.cols = (s1 - s0) * rows, col1 - col0

    def vectorizes(self) -> bool:
        """tile_copies_vectorize (a is k-contiguous here, and the arrays 16-byte aligned)."""
        b_ok = self.bn % 4 == 0 if self.bk == 1 else self.bn == 1 and self.bk % 4 == 0
        return b_ok and self.pb % 4 == 0 and self.lda % 4 == 0 and self.sstride % 4 == 0

    def a_sources(self, geo, m0, k0):
        wa = geo.walk_a
        m, k = m0 + wa.row, k0 + wa.col
        mm = np.where(m < self.M, m, 0)
        row = (self.s0 + mm // self.rows) * self.sstride + (self.row0 + mm % self.rows) * self.lda
        return row + k, np.where(m < self.M, floats_inside(k, self.K, geo.w), 0), self.a

    def b_sources(self, geo, n0, k0):
        """b_source: copy i at copy 0's address plus i row steps."""
        wb = geo.walk_b[self.along_k]
        step = np.arange(wb.copies)[None, :] * wb.row_step
        row0, col = wb.row[:, :1], wb.col
        n_first = n0 + (row0 if self.along_k else col)
        k_first = k0 + (col if self.along_k else row0)
        first = self.pb + k_first * self.bk + n_first * self.bn
        if self.along_k:
            return (first + step * self.bn, np.where(n_first + step < self.cols, floats_inside(k_first, self.K, geo.w), 0),
                    self.b)
        return first + step * self.bk, np.where(k_first + step < self.K, floats_inside(n_first, self.cols, geo.w), 0), self.b

    def store(self, m, n, acc):
        s, row = self.s0 + m // self.rows, self.row0 + m % self.rows
        value = acc
        if self.extra is not None:  # stepped from one column to the next along the last dim (column_steps)
            off = self.extra.row_offsets(row * self.N + self.col0) + n * self.extra.step(len(self.extra.shape) - 1)
            value = value + self.extra.values[s, off]
        self.out[s, row, self.col0 + n] = value


@pytest.mark.parametrize("w", [1, 4])
@pytest.mark.parametrize("threads", range(32, 1025, 32))
def test_the_walks_cover_each_chunk_once_at_every_block_size_they_run_at(threads, w):
    """Every block size kTgFits (one float a copy) or kTgVec (four) admits copies each chunk of A and of B,
    either way B lies, exactly once; 128, 256 and 512 threads take both, 1,024 only single floats (two
    threads a 16-byte copy of A would leave half of them idle), and the other sizes neither."""
    geo = Geometry(threads, w)
    assert geo.fits() == (threads in ((128, 256, 512, 1024) if w == 1 else (128, 256, 512)))
    if not geo.fits():
        return
    assert_walks_cover_each_chunk_once(geo)


def assert_walks_cover_each_chunk_once(geo: Geometry) -> None:
    for walk, rows, length in ((geo.walk_a, geo.m, geo.k_chunk), (geo.walk_b[True], geo.n, geo.k_chunk),
                               (geo.walk_b[False], geo.k_chunk, geo.n)):
        hits = np.zeros((rows, length), int)
        for j in range(geo.w):
            np.add.at(hits, (walk.row[walk.made], walk.col[walk.made] + j), 1)
        assert (hits == 1).all()


def test_the_tall_block_runs_at_512_threads_and_its_walks_cover_each_chunk_once():
    """TgTall (80 x 48, 15 of 16 warps computing) at 512 threads and 16-byte copies: its walks pass the rows
    and columns past the chunk (A's rows 80 to 95, B's columns 48 to 63) and copy the rest exactly once; no
    other block size or copy width runs it."""
    geo = Geometry(512, 4, TALL_WARPS_M)
    assert (geo.m, geo.n, geo.computing) == (80, 48, 15) and geo.fits()
    assert not geo.walk_a.exact and not geo.walk_b[False].exact
    assert_walks_cover_each_chunk_once(geo)
    assert not any(Geometry(t, w, TALL_WARPS_M).fits() for t, w in ((512, 1), (256, 4), (1024, 4), (128, 4)))


@pytest.mark.parametrize("w", [1, 4])
def test_the_big_block_runs_at_512_threads_and_its_walks_cover_each_chunk_once(w):
    """TgBig (128 x 64 of 32 x 16 warp tiles, chunks of 32, every warp computing) at 512 threads, one float or
    four a copy: its walks tile each chunk exactly."""
    geo = Geometry(512, w, **BIG_BLOCK)
    assert (geo.m, geo.n, geo.k_chunk, geo.computing) == (128, 64, 32, 16) and geo.fits()
    assert_walks_cover_each_chunk_once(geo)


@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 5, 9, 32])
def test_the_stage_ring_never_overwrites_a_chunk_before_every_warp_is_done_with_it(chunks):
    """tiled_gemm's stream of steps (``chunks`` here: a chunk of one block each, the blocks' bounds no
    different): steps 0 .. kTgStages - 2 are copied first; at step c a thread waits until at most kTgStages - 2
    of its groups (one a step) are in flight, the block meets at the barrier, the thread copies step
    c + kTgStages - 1 into its stage, and the warps read step c's. Every chunk has landed when read, and a stage
    is copied into only after the barrier that follows every read of the chunk before it; after the closing
    barrier no copy is in flight."""
    stages = TILED_GEMM_STAGES
    in_stage, groups = {}, []  # stage -> chunk it holds; every committed group, oldest first (None: empty)
    last_read = {}  # chunk -> the barrier count after which it was last read
    barriers = 0

    def copy(c):
        if c < chunks:
            slot = c % stages
            if slot in in_stage:  # the chunk there was read, and a barrier has passed since
                held = in_stage[slot]
                assert held in last_read and last_read[held] < barriers, f"chunk {c} overwrites chunk {held} in use"
            in_stage[slot] = c
        groups.append(c if c < chunks else None)

    for c in range(stages - 1):
        copy(c)
    for c in range(chunks):
        landed = groups[:len(groups) - (stages - 2)]  # wait_group<kTgStages - 2>
        barriers += 1
        copy(c + stages - 1)
        assert c in landed and in_stage[c % stages] == c, f"chunk {c} read before it landed"
        last_read[c] = barriers
    assert all(g is None for g in groups[len(groups) - (stages - 2):]), "a copy in flight after the last chunk"


@pytest.mark.parametrize("threads, block", [(512, {}), (256, {}), (512, {"warps_m": TALL_WARPS_M}), (512, BIG_BLOCK)],
                         ids=["wide-512", "wide-256", "tall", "big"])
def test_the_fragment_reads_hit_32_distinct_banks(threads, block):
    """tg_products' reads of A and of B in both layouts: each register's read by the warp's 32 lanes hits
    every bank once, for every computing warp, fragment and k8 step (the pitches kLd and kLdN are chosen for
    it)."""
    geo = Geometry(threads, 4, **block)
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    for warp in range(geo.computing):
        wm, wn = geo.warp_origin(warp)
        for k8 in range(0, geo.k_chunk, 8):
            for mt in range(geo.fm):
                for dr, dk in CODE_A_READS:
                    assert len(set(((wm + 16 * mt + g + dr) * geo.ld + k8 + q + dk) % 32)) == 32
            for along_k in (True, False):
                for nt in range(geo.fn):
                    for dk in CODE_B_READS:
                        assert len(set(geo.b_offset(along_k, wn + nt * 8 + g, k8 + q + dk) % 32)) == 32


@pytest.mark.parametrize("threads", [128, 256, 512, 384, 1024])
def test_the_launch_gives_the_kernel_its_staging(threads):
    """codegen.gemm_smem_bytes (the launch's dynamic shared memory) against this mirror's stages and staged
    outputs: the stages of the largest block where the tiled GEMM runs (TgTall's at 512 threads) and the
    largest block's outputs (TgBig's), else the streaming GEMMs' threads x 8 floats; with static shared memory
    at its 48 KB limit, within the H200's 227 KB a block."""
    blocks = [g for g in (Geometry(threads), Geometry(threads, 4, TALL_WARPS_M), Geometry(threads, 4, **BIG_BLOCK))
              if g.fits()]
    stage = max((g.stage_floats for g in blocks), default=0)
    outputs = max((g.m * g.n for g in blocks), default=0)
    assert all(g.stage_floats == tiled_gemm_stage_floats(threads, g.warps_m, g.fm, g.fn, g.k_chunk) for g in blocks)
    tiled = TILED_GEMM_STAGES * stage + outputs
    want = max(tiled, threads * 8) if Geometry(threads).fits() else threads * 8
    assert gemm_smem_floats(threads) == want
    assert 4 * want + 48 * 1024 <= 227 * 1024


@pytest.mark.parametrize("block", [dict(warps_m=4), dict(warps_m=TALL_WARPS_M), BIG_BLOCK], ids=["wide", "tall", "big"])
def test_staged_stores_store_each_fragment_once_without_bank_conflicts(block):
    """tg_store_staged against the fragments: every output of a warp's tile read back once, with its own value;
    each half-warp's 8-byte fragment writes on 32 distinct banks, each of the loop's reads on 32."""
    geo = Geometry(512, 4, **block)
    acc = np.random.default_rng(5).standard_normal((geo.warps, 32, geo.fm, geo.fn, 4))
    staging = {}
    for warp, row, col, value in fragment_outputs(geo, acc):
        if warp == 0:
            for lane in range(32):
                staging[int(staged_at(geo, row[lane], col[lane]))] = ((int(row[lane]), int(col[lane])), value[lane])
    assert len(staging) == 16 * geo.fm * 8 * geo.fn
    read = [((int(r), int(c)), staging[int(staged_at(geo, r, c))]) for rows, cols in staged_reads(geo)
            for r, c in zip(rows, cols)]
    assert sorted(where for where, _ in read) == sorted(where for where, _ in staging.values())
    assert all(where == held[0] for where, held in read)
    for _, row, col, _ in (f for f in fragment_outputs(geo, acc) if f[0] == 0 and f[2][0] % 2 == 0):
        for half in (slice(0, 16), slice(16, 32)):
            words = staged_at(geo, row[half], col[half])
            assert len({int(w + d) % 32 for w in words for d in (0, 1)}) == 32
    for rows, cols in staged_reads(geo):
        assert len({int(w) % 32 for w in staged_at(geo, rows, cols)}) == 32



CONV_SHAPES = [  # c_in, c_out, L, KW, stride, pad, sessions, tiles (s0, s1, u0, u1)
    (1, 72, 640, 256, 128, 0, 20, [(0, 17, 0, 40), (0, 17, 40, 72), (17, 20, 0, 72)]),  # the STFT's shape, ragged tiles
    (129, 40, 4, 3, 1, 1, 33, [(0, 33, 0, 16), (0, 33, 16, 40)]),        # the first encoder conv
    (64, 24, 2, 3, 2, 1, 70, [(0, 70, 0, 24)]),                          # stride 2 over 2 positions
    (4, 36, 64, 8, 4, 4, 21, [(0, 21, 0, 20), (0, 21, 20, 36)]),        # taps in pieces of 4, padded (conv-frames')
    (1, 72, 640, 256, 128, 0, 40, [(0, 40, 0, 72)]),                     # the STFT's over two rows of TgBig's blocks
    (129, 40, 4, 3, 1, 1, 70, [(0, 3, 0, 40), (3, 70, 0, 40)]),          # from session 3: three rows of TgBig's
]


def conv_case(c_in, c_out, L, KW, stride, pad, sessions, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((sessions, c_in, L))
    w = rng.standard_normal((c_out, c_in, KW)) / np.sqrt(c_in * KW)
    bias = rng.standard_normal(c_out)
    return x, w, bias, conv_ref(x, w, bias, (stride,), (pad, pad), (1,), 1)


@pytest.mark.parametrize("c_in, c_out, L, KW, stride, pad, sessions, tiles", CONV_SHAPES)
@pytest.mark.parametrize("threads", [512, 256])
def test_the_tiled_conv_arithmetic_matches_onnx_conv(c_in, c_out, L, KW, stride, pad, sessions, tiles, threads):
    """One float a copy, and four where conv_copies_vectorize holds (the STFT's shape and conv-frames': each
    4-float piece of k lies wholly inside x or wholly in its padding, stage_chunk checks their alignment); A's
    rows whole sessions apart (T of 1 and 4) or not (conv-frames' 17)."""
    x, w, bias, want = conv_case(c_in, c_out, L, KW, stride, pad, sessions)
    T = want.shape[2]
    widths = [1, 4] if ConvOps(x, w, bias, stride, pad, 1, 0, 1, 0, 1, np.zeros((1, c_out * T))).vectorizes() else [1]
    assert (len(widths) == 2) == (KW % 4 == 0)
    blocks = [Geometry(threads, width) for width in widths]
    if threads == 512 and Geometry(threads, 1, **BIG_BLOCK).walk_a.row_step % T == 0:  # conv_tiled's TgBig rule
        blocks += [Geometry(threads, width, **BIG_BLOCK) for width in widths]
    for geo in blocks:
        got = np.full((sessions, c_out * T), np.nan)
        for s0, s1, u0, u1 in tiles:
            ops = ConvOps(x, w, bias, stride, pad, 1, s0, s1, u0, u1, got)
            tiled_gemm(geo, ops, ops.M, ops.U, ops.K)
        np.testing.assert_allclose(got.reshape(sessions, c_out, T), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("lead", [0, 1, 2], ids=["C,T", "1,C,T", "1,1,C,T"])
@pytest.mark.parametrize("transposed", [False, True], ids=["r[C,T]", "r[T,C]"])
def test_a_tiled_conv_epilogue_reads_its_residual_at_every_rank(lead, transposed):
    """The epilogue's residual over the conv output's shape [..., C, T] (the builder's conv1d has no batch axis:
    rank 2), stored channel-major or transposed: each row's offsets once (Epilogue::offsets) and one channel's
    stride a column (dim rank - 2) read it where the old per-output divisions did."""
    c_in, c_out, L, KW, stride, pad, sessions = 4, 36, 64, 8, 4, 4, 21
    x, w, bias, conv = conv_case(c_in, c_out, L, KW, stride, pad, sessions, seed=5)
    T = conv.shape[2]
    r = np.random.default_rng(6).standard_normal((sessions, c_out, T))
    stored = np.swapaxes(r, 1, 2) if transposed else r
    strides = (1, c_out) if transposed else (T, 1)
    extra = Extra(np.ascontiguousarray(stored).reshape(sessions, -1), (1,) * lead + (c_out, T), (0,) * lead + strides)
    for geo in (Geometry(512, 1), Geometry(512, 4)):  # T = 17: conv_tiled's TgBig wants whole sessions a row step
        got = np.full((sessions, c_out * T), np.nan)
        for s0, s1, u0, u1 in [(0, 21, 0, 20), (0, 21, 20, 36)]:
            ops = ConvOps(x, w, bias, stride, pad, 1, s0, s1, u0, u1, got, extra)
            tiled_gemm(geo, ops, ops.M, ops.U, ops.K)
        np.testing.assert_allclose(got.reshape(sessions, c_out, T), conv + r, rtol=1e-9, atol=1e-12)


def test_a_tiled_matmul_epilogue_reads_its_residual_along_the_row():
    """An extra over the output's [rows, N], stored transposed ([N, rows]), for tiles that are parts of one row
    (col0 > 0) and whole rows: the row's offsets once, then one column's stride (the last dim's) a column."""
    rng = np.random.default_rng(7)
    sessions, rows, K, N = 70, 3, 75, 130
    a = rng.standard_normal((sessions, rows, K))
    b = rng.standard_normal((K, N)) / np.sqrt(K)
    r = rng.standard_normal((sessions, rows, N))
    extra = Extra(np.ascontiguousarray(np.swapaxes(r, 1, 2)).reshape(sessions, -1), (rows, N), (1, rows))
    got = np.full((sessions, rows, N), np.nan)
    for s0, s1, row0, n_rows, col0, col1 in [(0, 70, 1, 1, 0, 40), (0, 70, 1, 1, 40, 130), (0, 33, 0, 3, 0, 130)]:
        ops = MatmulOps(a, b, False, s0, s1, row0, n_rows, col0, col1, got, session_pad=3, extra=extra)
        tiled_gemm(Geometry(512), ops, ops.M, ops.cols, ops.K)
    want = a @ b + r
    np.testing.assert_allclose(got[:70, 1], want[:70, 1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[:33], want[:33], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("threads, w, block", [(512, 1, {}), (512, 4, {}), (256, 4, {}), (128, 4, {}), (1024, 1, {}),
                                               (512, 4, {"warps_m": TALL_WARPS_M}), (512, 1, BIG_BLOCK),
                                               (512, 4, BIG_BLOCK)],
                         ids=["wide-512-1", "wide-512-4", "wide-256", "wide-128", "wide-1024", "tall", "big-1", "big-4"])
@pytest.mark.parametrize("nk", [False, True], ids=["b-kn", "b-nk"])
@pytest.mark.parametrize("tiles", [
    [(0, 70, 0, 1, 0, 40), (0, 70, 0, 1, 40, 130)],  # parts of one row (the LSTM's gates), ragged columns
    [(0, 33, 0, 3, 0, 130)],                         # whole rows: M = sessions x rows
    [(3, 70, 0, 3, 0, 130)],                         # 201 rows from session 3: two rows of TgBig's blocks
])
def test_the_tiled_matmul_arithmetic_matches_numpy(nk, tiles, threads, w, block):
    """K = 75 and 130 columns: a 16-byte copy's last piece of a row is partly outside (floats_inside), so the
    rows are padded to a multiple of 4 floats, and the sessions' a apart by a padded stride, as the kernel's
    alignment check asks."""
    rng = np.random.default_rng(4)
    sessions, rows, K, N = 70, 3, 75, 130
    a = rng.standard_normal((sessions, rows, K))
    b = rng.standard_normal((K, N)) / np.sqrt(K)
    got = np.full((sessions, rows, N), np.nan)
    pad = {"lda": 76, "ldb": 76 if nk else 132, "session_pad": 8} if w == 4 else {"session_pad": 3}
    geo = Geometry(threads, w, **block)
    assert geo.fits()
    for s0, s1, row0, n_rows, col0, col1 in tiles:
        ops = MatmulOps(a, b, nk, s0, s1, row0, n_rows, col0, col1, got, **pad)
        assert ops.vectorizes() == (w == 4)
        tiled_gemm(geo, ops, ops.M, ops.cols, ops.K)
    want = a @ b
    for s0, s1, row0, n_rows, col0, col1 in tiles:
        part = np.s_[s0:s1, row0:row0 + n_rows, col0:col1]
        np.testing.assert_allclose(got[part], want[part], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("block", [{}, BIG_BLOCK], ids=["wide", "big"])
def test_a_tiled_matmul_of_no_k_stores_its_epilogue_of_zero(block):
    """K = 0 (a MATMUL over an empty reduction, which wave-to-wpk keeps when its output is not empty): one chunk
    of zeros, so that every output is still stored, as the interpreter stores it (here a residual epilogue's
    input alone)."""
    rng = np.random.default_rng(8)
    sessions, rows, N = 70, 1, 40
    r = rng.standard_normal((sessions, rows, N))
    extra = Extra(r.reshape(sessions, -1), (rows, N), (N, 1))
    got = np.full((sessions, rows, N), np.nan)
    ops = MatmulOps(np.zeros((sessions, rows, 0)), np.zeros((0, N)), False, 0, sessions, 0, 1, 0, N, got, extra=extra)
    tiled_gemm(Geometry(512, 1, **block), ops, ops.M, ops.cols, ops.K)
    np.testing.assert_array_equal(got, r)


def test_the_mirror_models_the_kernels_own_text():
    """The lines of the kernel this mirror's RowTable, store_block, staged_at, staged_reads and STAGED_UNROLL
    model, in the kernel's order: a kernel that drops the one-chunk barrier, moves the fill, changes the
    swizzle, the unroll or a warp's staging offset fails here, not only on the GPU."""
    kernel = Path(codegen.__file__).read_text()
    in_order = [
        "__syncthreads();  // step j is staged by every thread",
        "if (at.n0 == 0 && at.c == 0) {",
        "tg_fill_rows<Block>(ops, at.m0, error);",
        "if (chunks == 1) __syncthreads();",
        "if (at.c + 1 == chunks) {",
        "if (computes) tg_store(ops, at.n0, wm, wn, N, acc, error);",
    ]
    at = [kernel.find(line) for line in in_order]
    assert -1 not in at and at == sorted(at), dict(zip(in_order, at))
    for line in (
        "tg_rows<typename Ops::Row>()[threadIdx.x] = ops.row(m0 + threadIdx.x, error);",
        f"kPass = 32 / kCols, kUnroll = {STAGED_UNROLL};",
        "float* const tile = tg_out_smem() + threadIdx.x / 32 * (kRows * kCols);",
        "auto at = [](unsigned r, unsigned c) { return r * kCols + (c ^ (r >> 1 & 1) * 8); };",
        "const typename Ops::Row* const rows = tg_rows<typename Ops::Row>() + wm;",
        "for (unsigned r = lane / kCols; r < (unsigned)kRows; r += kUnroll * kPass) {",
        "in[u] = ops.gather(rows[r + u * kPass], n, tile[at(r + u * kPass, c)]);",
    ):
        assert kernel.count(line) == 1, line
