"""wave-to-wpk's tiling of a weight MATMUL (weight_gemm_tiles): every output exactly once, column bounds on
GEMM_COLS, at most one wave of tiles, and the split of least bytes per tile among all session x column splits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wavec.opcodes import GEMM_COLS
from wavec.passes.wave_to_wpk import weight_gemm_tiles

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
