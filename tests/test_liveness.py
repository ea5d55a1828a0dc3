"""wavec.analysis.liveness: word runs become segments, merging only lengthens lives, and max_live sums
what is live together."""

from __future__ import annotations

import numpy as np

from wavec.analysis import liveness
from wavec.analysis.liveness import max_live, op_segments, padded_tails


def test_runs_split_where_the_live_range_changes_and_skip_untouched_words():
    first = np.array([0, 0, 1, 1, 2**62, 3])
    last = np.array([2, 2, 2, 2, -1, 3])
    assert liveness._runs(first, last) == [(0, 8, 0, 2), (8, 16, 1, 2), (20, 24, 3, 3)]


def test_too_many_runs_merge_into_chunks_that_cover_them(monkeypatch):
    monkeypatch.setattr(liveness, "MAX_SEGMENTS", 2)
    first = np.array([0, 1, 2, 3])
    last = np.array([4, 1, 5, 3])
    assert liveness._runs(first, last) == [(0, 8, 0, 4), (8, 16, 2, 5)]


def test_max_live_scales_per_session_buffers_and_pads_tails():
    segments = {"a": [(0, 8, 0, 1), (8, 12, 0, 3)], "b": [(0, 16, 2, 3)]}
    assert max_live(segments) == 20  # phase 2 or 3: a's tail (4) and b (16)
    assert max_live(segments, {"b": 4}) == 68
    assert padded_tails(segments, {"a": (12, 16), "b": (16, 16)})["a"] == [(0, 8, 0, 1), (8, 16, 0, 3)]
    assert op_segments({"a": 16}, {"a": (0, 3)}) == {"a": [(0, 16, 0, 3)]}


def test_first_fit_takes_the_lowest_offset_no_clash_interval_contains():
    """wpk-arena's first fit places a buffer at the lowest candidate (0 or an aligned clash end) inside no
    open clash interval (lo, hi); the marked search equals scanning the candidates one by one, on fresh
    random intervals."""
    from wavec.passes.wave_to_wpk import align
    from wavec.passes.wpk_arena import _lowest_free

    rng = np.random.default_rng()
    for _ in range(1000):
        n = int(rng.integers(0, 30))
        lo = rng.integers(-500, 500, n)
        hi = lo + rng.integers(1, 300, n)
        scan = next(c for c in sorted({0, *(align(int(h)) for h in hi if h > 0)}) if not np.any((lo < c) & (c < hi)))
        assert _lowest_free(lo, hi) == scan
