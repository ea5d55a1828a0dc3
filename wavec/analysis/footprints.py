"""Footprints: which arena words every operand of every task touches in one beat, as intervals.

A task's operand ``k`` of session ``s`` touches bytes ``offset[k] + s * session_stride[k] + 4 * e`` of its
arena for every element offset ``e`` of ``wavec.opcodes.footprint`` (the same relative set for every session).
This analysis computes that set once per (task, operand), compresses it into runs of consecutive elements,
and replicates the runs per session: one interval of 4-byte words per (task, operand, session, run).

`access_groups` then cuts an arena into elementary segments (maximal word ranges that the same accesses
cover) and groups segments by their set of (task, reads or writes): the verifier checks one representative
segment per distinct set instead of every word. Words, not bytes, are the unit: every operand offset and
session stride is a multiple of 4 (the verifier checks that first).

numpy only, no xDSL: `wavec verify` runs where the compiler is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.opcodes import ELEM_BYTES, Params, footprint, footprint_hull, n_task_inputs


def expected_inputs(params: Params) -> int:
    """How many input operand slots a task of these parameters reads (an epilogue's extras included)."""
    return n_task_inputs(params)


def runs(elems: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[begin, end) runs of consecutive values of a sorted, duplicate-free int64 array."""
    if len(elems) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cut = np.flatnonzero(np.diff(elems) != 1) + 1
    begins = elems[np.r_[0, cut]]
    ends = elems[np.r_[cut - 1, len(elems) - 1]] + 1
    return begins, ends


@dataclass
class Access:
    """One operand of one task: its arena, direction, per-session placement, and relative element runs."""

    row: int  # payload row of the task
    operand: int  # input slot 0..3, or OUT (4)
    arena: int
    write: bool
    offset: int  # bytes, session 0
    stride: int  # bytes between sessions
    sessions: tuple[int, int]
    run_begin: np.ndarray  # relative elements, int64
    run_end: np.ndarray
    duplicates: int  # iteration points that hit an element another point of the same session already hit

    @property
    def n_sessions(self) -> int:
        return self.sessions[1] - self.sessions[0]

    @property
    def empty(self) -> bool:
        return self.n_sessions <= 0 or len(self.run_begin) == 0

    def byte_extent(self) -> tuple[np.ndarray, np.ndarray]:
        """Per session of the task: [first byte, one past the last byte] it touches (int64 arrays)."""
        s = np.arange(*self.sessions, dtype=np.int64)
        base = self.offset + s * self.stride
        return base + ELEM_BYTES * int(self.run_begin[0]), base + ELEM_BYTES * int(self.run_end[-1])

    def word_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """[begin, end) word intervals over all the task's sessions; one session's copy when the stride is 0."""
        n = 1 if self.stride == 0 else self.n_sessions
        s = np.arange(self.sessions[0], self.sessions[0] + n, dtype=np.int64)
        base = (self.offset + s * self.stride) // ELEM_BYTES
        return (base[:, None] + self.run_begin[None, :]).ravel(), (base[:, None] + self.run_end[None, :]).ravel()


class FootprintCache:
    """Relative footprints, computed once per distinct (params block, operand, element range, n_inputs)."""

    def __init__(self, params_table: np.ndarray, unpack):
        self.table = params_table
        self.unpack = unpack
        self._fp: dict[tuple[int, int, int, int, int, bool], tuple[np.ndarray, np.ndarray, int]] = {}

    def runs(self, params_at: int, params: Params, operand: int, begin: int, end: int, n_inputs: int,
             hull: bool = False):
        """(run begins, run ends, repeated points) of the footprint; with ``hull``, one run from its least to
        its greatest element and no count of repeats (all a read-only arena's checks need)."""
        key = (params_at, operand, begin, end, n_inputs, hull)
        hit = self._fp.get(key)
        if hit is None and hull:
            extent = footprint_hull(params, operand, begin, end)
            hit = self._fp[key] = (np.zeros(0, np.int64),) * 2 + (0,) if extent is None else (
                np.array([extent[0]], np.int64), np.array([extent[1] + 1], np.int64), 0)
        if hit is None:
            elems = np.asarray(footprint(params, operand, begin, end, n_inputs), np.int64)
            uniq = elems
            if len(elems) > 1 and not (np.diff(elems) > 0).all():  # footprint() often is sorted already
                uniq = np.sort(elems)
                uniq = uniq[np.r_[True, uniq[1:] != uniq[:-1]]]
            rb, re = runs(uniq)
            hit = (rb, re, len(elems) - len(uniq))
            self._fp[key] = hit
        return hit


@dataclass
class AccessGroups:
    """Elementary segments of one arena and the distinct access multisets over them.

    ``points``: sorted segment boundaries (words); segment j is [points[j], points[j+1]).
    ``group_of_seg``: the id of the multiset of accesses covering each segment (-1 where none does); two
    segments share a group when the same accesses, the same number of times, cover them.
    ``rep``: one representative segment per group. ``member_group``/``member_acc``/``member_count``: each
    group's accesses (sorted by group, then access) and how many of the access's intervals cover the
    group (more than 1: the access touches those words in two of its sessions)."""

    points: np.ndarray
    group_of_seg: np.ndarray
    rep: np.ndarray
    member_group: np.ndarray
    member_acc: np.ndarray
    member_count: np.ndarray

    def members(self, group: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.member_group, [group, group + 1])
        return self.member_acc[lo:hi]

    def byte_range(self, segment: int) -> tuple[int, int]:
        return int(self.points[segment]) * ELEM_BYTES, int(self.points[segment + 1]) * ELEM_BYTES


def segment_incidences(begins: np.ndarray, ends: np.ndarray) -> int:
    """How many (interval, elementary segment) pairs `access_groups` would cover: the size its member
    lists grow with, counted in O(intervals log intervals) before anything is allocated per segment."""
    keep = ends > begins
    points = np.unique(np.concatenate([begins[keep], ends[keep]]))
    return int((np.searchsorted(points, ends[keep]) - np.searchsorted(points, begins[keep])).sum())


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])`` (int64; nothing where b <= a), without
    a Python loop."""
    lo = np.asarray(lo, np.int64)
    cnt = np.maximum(np.asarray(hi, np.int64) - lo, 0)
    return np.repeat(lo, cnt) + (np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt))


def access_groups(begins: np.ndarray, ends: np.ndarray, acc_of_interval: np.ndarray, n_acc: int) -> AccessGroups:
    """Groups the word intervals of one arena (see the module docstring) without expanding them per
    segment: a segment's multiset of covering accesses is hashed as a prefix sum over interval ends
    (three independent sums: two random 64-bit keys per access, and the count), so the cost is
    O(intervals log intervals + sum of group sizes)."""
    keep = ends > begins
    begins, ends, acc = begins[keep], ends[keep], acc_of_interval[keep]
    empty = np.zeros(0, np.int64)
    if len(begins) == 0:
        return AccessGroups(empty, empty, empty, empty, empty, empty)
    points = np.unique(np.concatenate([begins, ends]))
    lo = np.searchsorted(points, begins)
    hi = np.searchsorted(points, ends)
    rng = np.random.default_rng(0x5EED)
    keys = []
    with np.errstate(over="ignore"):
        for r in (rng.integers(0, 2**63, n_acc, dtype=np.int64).astype(np.uint64),
                  rng.integers(0, 2**63, n_acc, dtype=np.int64).astype(np.uint64),
                  np.ones(n_acc, np.uint64)):
            d = np.zeros(len(points), np.uint64)
            np.add.at(d, lo, r[acc])
            np.subtract.at(d, hi, r[acc])
            keys.append(np.cumsum(d)[:-1])
    count = keys[2].astype(np.int64)
    used = np.flatnonzero(count > 0)
    group_of_seg = np.full(len(points) - 1, -1, np.int64)
    stacked = np.stack([k[used] for k in keys], axis=1)
    _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    group_of_seg[used] = inverse.ravel()
    rep = used[first]
    # Members: the intervals that cover each representative segment.
    order = np.argsort(rep)
    rep_sorted = rep[order]
    a = np.searchsorted(rep_sorted, lo)
    b = np.searchsorted(rep_sorted, hi)
    which = np.repeat(np.arange(len(a)), b - a)
    grp = order[concat_ranges(a, b)]
    pair = np.unique(grp * n_acc + acc[which], return_counts=True)
    return AccessGroups(points, group_of_seg, rep, pair[0] // n_acc, pair[0] % n_acc, pair[1])
