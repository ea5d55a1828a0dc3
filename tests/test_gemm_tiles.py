"""wave-to-wpk's tiling of a weight MATMUL (weight_gemm_tiles): every output exactly once, column bounds on
GEMM_COLS, at most one wave of tiles, and the split of least bytes per tile among all session x column splits;
of a MATMUL whose b is per session (row_tiles): whole rows or a part of one row, one wave; and of a weight CONV
(weight_conv_tiles): whole channels, several sessions a tile when the cohort is small, and tiles the tiled
GEMM takes when the cohort fills its rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wavec.opcodes import GEMM_COLS, ConvParams
from wavec.passes.wave_to_wpk import (STREAM_MIN_B_BYTES, TILED_GEMM_MIN_COLS, TILED_GEMM_ROWS, lane_conv_cycles,
                                      per_session_b_tiles, row_tiles, rows_per_b, tiled_conv_split, tiles,
                                      weight_conv_tiles, weight_gemm_tiles)

CASES = [  # sessions, rows, cols, k, workers, min_cols
    (1, 1, 2048, 2048, 132, 8),
    (8, 1, 2048, 2048, 132, 8),
    (56, 1, 5632, 2048, 132, 8),
    (1024, 1, 2048, 2048, 132, 8),
    (64, 1, 512, 128, 132, 8),
    (3, 4, 96, 64, 5, 8),
    (7, 1, 10, 16, 4, 8),
    (4, 200, 64, 64, 132, 8),
]


def tile_bytes(tile, k):
    s0, s1, e0, e1 = tile
    return 4 * (k * ((e1 - e0) + (s1 - s0)) + (s1 - s0) * (e1 - e0))


@pytest.mark.parametrize("sessions, rows, cols, k, workers, min_cols", CASES)
def test_tiles_cover_every_output_once(sessions, rows, cols, k, workers, min_cols):
    seen = np.zeros((sessions, rows * cols), np.int64)
    for s0, s1, e0, e1 in weight_gemm_tiles(sessions, rows, cols, k, workers, min_cols):
        seen[s0:s1, e0:e1] += 1
        if rows <= workers:  # a tile stays inside one row, its columns on GEMM_COLS
            assert e0 // cols == (e1 - 1) // cols
            assert (e0 % cols) % GEMM_COLS == 0 and (e1 % cols == 0 or (e1 % cols) % GEMM_COLS == 0)
    assert (seen == 1).all()


@pytest.mark.parametrize("sessions, rows, cols, k, workers, min_cols", [c for c in CASES if c[1] <= c[4]])
def test_the_split_reads_the_fewest_bytes(sessions, rows, cols, k, workers, min_cols):
    """Against every even split of sessions and GEMM_COLS-aligned columns that fits one wave."""
    got = weight_gemm_tiles(sessions, rows, cols, k, workers, min_cols)
    assert len(got) <= workers
    units = math.ceil(cols / GEMM_COLS)
    best = math.inf
    for s_per in range(1, sessions + 1):
        for c_units in range(1, units + 1):
            c_per = c_units * GEMM_COLS
            n_tiles = math.ceil(sessions / s_per) * rows * math.ceil(cols / c_per)
            if n_tiles <= workers and (c_per >= min_cols or c_per >= cols):
                best = min(best, 4 * (k * (min(c_per, cols) + s_per) + s_per * min(c_per, cols)))
    assert max(tile_bytes(t, k) for t in got) <= best * 1.10  # ceil rounding of an even split: within 10%


def test_one_session_splits_columns_and_a_large_cohort_balances():
    one = weight_gemm_tiles(1, 1, 2048, 2048, 132, 8)
    assert {t[:2] for t in one} == {(0, 1)} and len(one) == 128  # 16 columns each: the weight read once
    big = weight_gemm_tiles(1024, 1, 2048, 2048, 132, 8)
    s_per, c_per = big[0][1] - big[0][0], big[0][3] - big[0][2]
    assert 1 < s_per < 1024 and 16 < c_per < 2048  # neither extreme


def conv(c_in, c_out, length, k, stride=1, batch=1, group=1):
    out = (length + 2 * (k // 2) - k) // stride + 1
    return ConvParams(batch=batch, c_in=c_in, c_out=c_out, group=group, has_bias=1, in_sp=(length,), out_sp=(out,),
                      kernel=(k,), stride=(stride,), pad_begin=(k // 2,), dilation=(1,))


CONV_CASES = [  # sessions, params (Silero's STFT and first encoder conv, a batched and a grouped one), workers
    (1, conv(1, 258, 640, 256, stride=128), 132),
    (64, conv(1, 258, 640, 256, stride=128), 132),
    (64, conv(129, 128, 4, 3), 132),
    (1024, conv(129, 128, 4, 3), 132),
    (16384, conv(129, 128, 4, 3), 132),
    (5, conv(8, 6, 10, 3, batch=2), 7),
    (9, conv(8, 8, 12, 3, group=4), 16),
]


def conv_bytes(tile, params):
    """What the tiling's model says a CONV tile moves: its channels' weights, its sessions' input, its output."""
    s0, s1, e0, e1 = tile
    cg, per_channel = params.c_in // params.group, math.prod(params.out_sp)
    channels = math.ceil((e1 - e0) / per_channel)
    return 4 * (channels * cg * math.prod(params.kernel) + (s1 - s0) * cg * math.prod(params.in_sp) + (s1 - s0) * (e1 - e0))


@pytest.mark.parametrize("sessions, params, workers", CONV_CASES)
def test_conv_tiles_cover_every_output_once_in_whole_channels(sessions, params, workers):
    per_channel = math.prod(params.out_sp)
    seen = np.zeros((sessions, params.n_elems), np.int64)
    for s0, s1, e0, e1 in weight_conv_tiles(sessions, params, workers, 8):
        seen[s0:s1, e0:e1] += 1
        assert e0 % per_channel == 0 and (e1 % per_channel == 0 or e1 == params.n_elems)
    assert (seen == 1).all()


@pytest.mark.parametrize("sessions, params, workers", [c for c in CONV_CASES if 1 < c[0] < c[2]])
def test_a_small_cohort_shares_each_weight_read_among_sessions(sessions, params, workers):
    """Fewer sessions than workers: the session-first split gave every tile one session, each reading its
    channels' weights alone; the weight split moves fewer bytes per wave and puts several sessions in a tile."""
    got = weight_conv_tiles(sessions, params, workers, 8)
    old = tiles(sessions, params.n_elems, workers, 8)
    assert {t[1] - t[0] for t in old} == {1}
    assert max(t[1] - t[0] for t in got) > 1

    def per_wave(ts):
        return math.ceil(len(ts) / workers) * max(conv_bytes(t, params) for t in ts)

    assert per_wave(got) < per_wave(old)


def silero_conv(c_in, c_out, length, k, stride, pad):
    out = (length + 2 * pad - k) // stride + 1
    return ConvParams(batch=1, c_in=c_in, c_out=c_out, group=1, has_bias=1, in_sp=(length,), out_sp=(out,),
                      kernel=(k,), stride=(stride,), pad_begin=(pad,), dilation=(1,))


SILERO_CONVS = {  # Silero VAD 16 kHz's STFT and encoder (c_in, c_out, input steps, kernel, stride, pad)
    "stft": silero_conv(1, 258, 640, 256, 128, 0), "enc0": silero_conv(129, 128, 4, 3, 1, 1),
    "enc1": silero_conv(128, 64, 4, 3, 2, 1), "enc2": silero_conv(64, 64, 2, 3, 2, 1),
    "enc3": silero_conv(64, 128, 1, 3, 1, 1),
}


# (sessions, channels) a tile of Silero's convolutions at 1,024 sessions in the profiles the H200 ran (call 4 and
# 6 of bench/RESULTS.md's sixteenth run: 272.5 -> 221.2 us a beat against the byte-balanced split's tiles).
SILERO_1024_TILES = {"stft": (16, 129), "enc0": (16, 64), "enc1": (32, 16), "enc2": (64, 16), "enc3": (64, 16)}


@pytest.mark.parametrize("name", SILERO_CONVS)
def test_a_large_cohort_cuts_silero_convolutions_for_the_tiled_gemm(name):
    """At 1,024 sessions every tile but the last channels' has TILED_GEMM_ROWS rows or more and at least
    TILED_GEMM_MIN_COLS channels, the form conv_tiles_as_gemm takes: the split tiled_conv_split models, and
    the one the H200 measured."""
    params = SILERO_CONVS[name]
    (steps,) = params.out_sp
    _, s_per, u_per = tiled_conv_split(1024, params, 132)
    assert s_per * steps >= TILED_GEMM_ROWS and u_per >= TILED_GEMM_MIN_COLS
    got = weight_conv_tiles(1024, params, 132, 8)
    shapes = {(s1 - s0, (e1 - e0) // steps) for s0, s1, e0, e1 in got if e1 < params.n_elems}
    assert shapes == {(s_per, u_per)}
    assert shapes == {SILERO_1024_TILES[name]}
    assert all(rows * steps >= TILED_GEMM_ROWS and cols >= TILED_GEMM_MIN_COLS for rows, cols in shapes)


def test_a_cohort_too_small_for_the_tiled_gemm_has_no_tiled_split():
    """Fewer rows than a block (one session of the STFT's 4 steps, 8 sessions of enc3's 1), or a grouped CONV."""
    assert tiled_conv_split(1, SILERO_CONVS["stft"], 132) is None
    assert tiled_conv_split(8, SILERO_CONVS["enc3"], 132) is None
    assert tiled_conv_split(64, conv(8, 8, 12, 3, group=4), 132) is None


def test_the_tiled_split_is_taken_only_where_the_model_says_it_ends_sooner():
    """At 64 sessions (probes, bench/RESULTS.md sixteenth run: the STFT's lane groups 39,000 cycles a tile,
    enc0's 25,000): the STFT's tiled split models less than the lane groups over 6 sessions x 22 channels and is
    taken; enc0's models more than over 8 sessions x 8 channels, which it keeps."""
    stft, enc0 = SILERO_CONVS["stft"], SILERO_CONVS["enc0"]
    tiled = tiled_conv_split(64, stft, 132)
    assert tiled[0] < lane_conv_cycles(64, stft, 132, 6, 22)
    assert weight_conv_tiles(64, stft, 132, 8)[0][1] == tiled[1]
    assert tiled_conv_split(64, enc0, 132)[0] > lane_conv_cycles(64, enc0, 132, 8, 8)
    assert {s1 - s0 for s0, s1, _, _ in weight_conv_tiles(64, enc0, 132, 8)} == {8}


ROW_CASES = [  # sessions, rows, cols, workers, row_block: duplex:1b's ring attention at 8 and 64 sessions
    # (scores: 16 rows of 512 slots; context: 4 heads x 4 queries of 128 dims, one V per head), ...
    (8, 16, 512, 132, 4), (8, 16, 64, 132, 4), (64, 16, 128, 132, 4), (1, 12, 128, 132, 12), (64, 16, 64, 132, 16),
    (3, 5, 7, 4, 5), (200, 2, 3, 132, 1), (1, 1, 5, 132, 1),
]


@pytest.mark.parametrize("sessions, rows, cols, workers, row_block", ROW_CASES)
def test_row_tiles_are_whole_rows_or_part_of_one(sessions, rows, cols, workers, row_block):
    """Every output once; each tile whole rows of one block of row_block rows (they read one matrix of b) or
    columns of one row (on GEMM_COLS); no more tiles than the unaligned split, which crossed rows (duplex:1b's
    61-element tiles of 64-wide rows), unless blocks force more."""
    got = row_tiles(sessions, rows, cols, workers, 8, row_block)
    seen = np.zeros((sessions, rows * cols), np.int64)
    for s0, s1, e0, e1 in got:
        seen[s0:s1, e0:e1] += 1
        if e0 % cols == 0 and e1 % cols == 0:
            assert e0 // cols // row_block == (e1 // cols - 1) // row_block
        else:
            assert e0 // cols == (e1 - 1) // cols and (e0 % cols) % GEMM_COLS == 0
    assert (seen == 1).all()
    assert {s1 - s0 for s0, s1, _, _ in got} == {1}
    blocks = math.ceil(rows / row_block) * sessions
    assert len(got) <= max(len(tiles(sessions, rows * cols, workers, 8)), blocks)


def test_rows_per_b_counts_the_rows_after_bs_last_batch_dim():
    """duplex:1b's attention context: out [head 4, query 4, dim 128] of V [head, slot, dim] (b strides 131072,
    0 over the output's row dims): the 4 queries of a head read one V."""
    from wavec.opcodes import Epilogue, MatmulParams

    def params(b_strides):
        return MatmulParams((4, 4, 128), 1024, (512, 128, 1), (4096, 1024, 0, 1), b_strides, Epilogue((4, 4, 128), (), ()))

    assert rows_per_b(params((131072, 0, 1, 128))) == 4
    assert rows_per_b(params((0, 0, 1, 128))) == 16
    assert rows_per_b(params((0, 131072, 1, 128))) == 1


@pytest.mark.parametrize("sessions", [8, 132, 136, 1024])
def test_per_session_b_tiles_are_one_session_and_whole_rows_of_one_head(sessions):
    """duplex:1b's ring attention context (16 rows of 128, 4 a head, K = 1,024): tiles of one session and whole
    rows of one head, the only tiles the GEMM bodies take with a per-session b, also past one session a worker
    (136 sessions on 132 workers had got tiles of two, which sent it to the lane-group body)."""
    got = per_session_b_tiles(sessions, 16, 128, 1024, 132, 8, 4, False, False)
    seen = np.zeros((sessions, 16 * 128), np.int64)
    for s0, s1, e0, e1 in got:
        seen[s0:s1, e0:e1] += 1
    assert (seen == 1).all()
    assert {s1 - s0 for s0, s1, _, _ in got} == {1}
    assert all(e0 % 128 == 0 and e1 % 128 == 0 and e0 // 512 == (e1 - 1) // 512 for _, _, e0, e1 in got)


@pytest.mark.parametrize("sessions, heads_a_tile", [(144, 12), (96, 12), (64, 6), (8, 1)])
def test_the_column_gemm_takes_whole_small_heads_of_one_session_a_tile(sessions, heads_a_tile):
    """duplex:1b's encoder scores read K^T in place (b k-contiguous, 12 heads of one row, 64 x 128 floats a
    head: under STREAM_MIN_B_BYTES): tiles of one session and whole heads, as many pieces of a session as the
    workers have for it (at most one wave): 144 and 96 sessions one tile of 12 heads each, 64 two of 6, 8
    twelve of one."""
    got = per_session_b_tiles(sessions, 12, 128, 64, 132, 8, 1, False, True)
    seen = np.zeros((sessions, 12 * 128), np.int64)
    for s0, s1, e0, e1 in got:
        seen[s0:s1, e0:e1] += 1
        assert s1 - s0 == 1 and e0 % 128 == 0 and e1 - e0 == heads_a_tile * 128
    assert (seen == 1).all()


@pytest.mark.parametrize("k, cols, has_prologue, rows_cut", [(64, 128, False, False),  # encoder scores: 32 KB
                                                             (128, 64, True, True),  # with a prologue
                                                             (64, 512, False, True)])  # decoder scores: 128 KB
def test_the_streaming_gemm_takes_a_small_per_session_b_only_with_a_prologue(k, cols, has_prologue, rows_cut):
    """duplex:1b's encoder attention at 96 sessions (12 heads of one row each) on a copied K^T: the scores' b
    matrices (64 x 128 floats) are under STREAM_MIN_B_BYTES, so their tiles are the lane-group body's flat ranges
    across heads, not 12 one-row tiles a session; with a prologue (which the streaming GEMM applies once per
    staged value, lane groups once per output) the same matrices keep one-row tiles, and so do larger
    matrices."""
    assert 64 * 128 * 4 < STREAM_MIN_B_BYTES <= 64 * 512 * 4
    got = per_session_b_tiles(96, 12, cols, k, 132, 8, 1, has_prologue, False)
    one_row = all(e1 - e0 <= cols and e0 // cols == (e1 - 1) // cols for _, _, e0, e1 in got)
    assert one_row == rows_cut
    if not rows_cut:
        assert got == tiles(96, 12 * cols, 132, 8)


@pytest.mark.parametrize("sessions, pieces, waves", [(1, 132, 1), (3, 44, 1), (8, 16, 1), (64, 2, 1), (96, 4, 3),
                                                     (100, 5, 4), (1024, 2, 2)])
def test_a_session_is_cut_into_the_pieces_that_end_soonest(sessions, pieces, waves):
    """tiles over 132 workers: 8 sessions make 16 pieces each (128 tiles, one wave), not 17 (136 tiles: a
    second wave of 4); 64 make 2 (128 tiles), not 3 (192, two waves); where waves tie, the more pieces; 96
    make 4 (3 waves of quarters: 0.75 of a session's time), not 2 (2 waves of halves: all of it); 1,024 (8 a
    tile) gain nothing from more."""
    got = tiles(sessions, 1 << 20, 132, 8)
    assert len({(e0, e1) for _, _, e0, e1 in got}) == pieces
    assert math.ceil(len(got) / 132) == waves


RING_WRITE = "select(eq(%0, fmod(%1, 8.0)), %2, %3)"


@pytest.mark.parametrize("shape, iota_strides, by_rows", [
    ((8, 4, 16), (1, 0, 0), True),  # the builder's [slots, heads, dim] cache: a ring row is one slot
    ((1, 8, 64), (0, 1, 0), False),  # an ONNX-style [1, slots, dim] cache: axis 0 is a batch of one
    ((4, 8, 16), (0, 1, 0), False),  # a [heads, slots, dim] cache: the slot is axis 1
])
def test_a_ring_write_is_tiled_on_rows_only_where_its_body_walks_rows(shape, iota_strides, by_rows):
    """selects_rows: the slot condition must hold one value along everything after axis 0 (and axis 0 be
    longer than 1) for the body's row walk; otherwise the write keeps even tiles (a [1, C, D] cache had got one
    tile a session, a [H, C, D] one whole heads)."""
    from wavec.opcodes import EwiseParams, compile_expr, contiguous_strides, parse_expr
    from wavec.passes.wave_to_wpk import selects_rows

    full = contiguous_strides(shape)
    params = EwiseParams(shape, full, (iota_strides, (0,) * 3, (0,) + full[1:], full),
                         tuple(compile_expr(parse_expr(RING_WRITE))))
    assert selects_rows(params) == by_rows
    plain = EwiseParams(shape, full, (iota_strides, (0,) * 3, (0,) + full[1:]),
                        tuple(compile_expr(parse_expr("add(%0, %2)"))))
    assert not selects_rows(plain)
