"""Liveness of activation buffers within one beat, at op or at tile granularity.

Time is the phase index (program order). A *segment* ``(begin, end, first, last)`` says that bytes
``[begin, end)`` of a buffer (relative to its start; to one session's slice for a per-session buffer) are
live from phase ``first`` to phase ``last``, both included: a phase's inputs and its output are live
together, so no task of a phase overwrites what another task of it reads.

- ``op``: one segment per buffer, its whole (16-byte aligned) size from the first phase that touches it to
  the last one.
- ``tile``: each 4-byte word is live from the first phase whose tasks touch it (wavec.opcodes.footprint of
  every task operand, the exact sets wpk-schedule and wpk-verify use) to the last such phase; runs of
  words with the same range form the segments, and words no task touches are never live. A buffer whose
  slices are consumed by different phases (the real and imaginary halves of an STFT, the four LSTM gates)
  frees each slice after its own last reader. More than MAX_SEGMENTS runs are merged into that many
  chunks (each the union of its runs' ranges), which only lengthens lives.

The footprint of a task is the same relative set for every session it covers, so one session's segments
stand for all of them (the union over a phase's tasks: a superset for any one session, hence safe).
"""

from __future__ import annotations

import numpy as np

from wavec.analysis.task_parts import TaskParts
from wavec.opcodes import ELEM_BYTES, footprint

GRANULARITIES = ("op", "tile")
MAX_SEGMENTS = 64  # per buffer; more runs are merged into this many chunks

Segment = tuple[int, int, int, int]  # begin byte, end byte, first phase, last phase


def live_ranges(phases) -> dict[str, tuple[int, int]]:
    """Buffer name -> (first phase touching it, last phase touching it), over ``wpk.phase`` ops."""
    ranges: dict[str, tuple[int, int]] = {}
    parts = TaskParts()
    for index, phase in enumerate(phases):
        for part in {id(p): p for p in map(parts.part, phase.tasks)}.values():
            for _, name, _ in part.slots:
                first, last = ranges.get(name, (index, index))
                ranges[name] = (min(first, index), max(last, index))
    return ranges


def op_segments(sizes: dict[str, int], ranges: dict[str, tuple[int, int]]) -> dict[str, list[Segment]]:
    return {name: [(0, size, *ranges[name])] for name, size in sizes.items()}


def tile_segments(phases, words: dict[str, int], parts: TaskParts | None = None) -> dict[str, list[Segment]]:
    """Buffer name (those in ``words``: name -> 4-byte words per session slice) -> its live segments."""
    never = np.iinfo(np.int64).max
    first = {name: np.full(n, never, np.int64) for name, n in words.items()}
    last = {name: np.full(n, -1, np.int64) for name, n in words.items()}
    parts = parts or TaskParts()
    rel_cache: dict = {}
    for index, phase in enumerate(phases):
        # The tiles of an op differ in sessions and elements; one session stands for all, so each
        # distinct (operand properties, element range) of the phase counts once.
        seen: set = set()
        touched: dict[str, list[np.ndarray]] = {}
        for table in phase.tasks:
            part = parts.part(table)
            for e0, e1 in {(e0, e1) for e0, e1 in table.tiles[:, 2:].tolist()}:
                if (id(part), e0, e1) not in seen:
                    seen.add((id(part), e0, e1))
                    _touch(touched, part, e0, e1, words, rel_cache)
        for name, ws in touched.items():  # phases come in order: the first toucher sets first, the last last
            w = np.concatenate(ws)
            first[name][w] = np.minimum(first[name][w], index)
            last[name][w] = index
    return {name: _runs(first[name], last[name]) for name in words}


def _touch(touched: dict[str, list[np.ndarray]], part, e0: int, e1: int, words: dict[str, int], rel_cache: dict) -> None:
    """Appends to ``touched`` the words of one session's slice that the tile [e0, e1) of ``part`` touches
    in each buffer of ``words``."""
    for operand, name, elem_offset in part.slots:
        if name not in words:
            continue
        fkey = (id(part), operand, e0, e1)
        w = rel_cache.get(fkey)
        if w is None:
            rkey = (part.words, operand, e0, e1)  # the relative set: the same for every layer alike
            rel = rel_cache.get(rkey)
            if rel is None:
                rel = rel_cache[rkey] = np.unique(np.asarray(footprint(part.params, operand, e0, e1, part.n_inputs), np.int64))
            w = rel + elem_offset
            w = rel_cache[fkey] = w[(w >= 0) & (w < words[name])]
        touched.setdefault(name, []).append(w)


def padded_tails(segments: dict[str, list[Segment]], ends: dict[str, tuple[int, int]]) -> dict[str, list[Segment]]:
    """The segments with the one that ends at a buffer's last byte (``ends[name][0]``) extended to its
    aligned end (``ends[name][1]``): alignment padding live with it, as at op granularity."""
    return {
        name: [(b, ends[name][1] if e == ends[name][0] else e, f, l) for b, e, f, l in segs]
        for name, segs in segments.items()
    }


def _runs(first: np.ndarray, last: np.ndarray) -> list[Segment]:
    touched = last >= 0
    if not touched.any():
        return []
    idx = np.flatnonzero(touched)
    f, l = first[idx], last[idx]
    cut = np.flatnonzero((np.diff(idx) != 1) | (np.diff(f) != 0) | (np.diff(l) != 0)) + 1
    starts = np.r_[0, cut]
    ends = np.r_[cut, len(idx)]
    runs = [(int(idx[a]), int(idx[b - 1]) + 1, int(f[a]), int(l[a])) for a, b in zip(starts, ends)]
    if len(runs) > MAX_SEGMENTS:  # merge into MAX_SEGMENTS chunks of consecutive runs
        chunks = np.array_split(np.arange(len(runs)), MAX_SEGMENTS)
        runs = [(runs[c[0]][0], runs[c[-1]][1], min(runs[i][2] for i in c), max(runs[i][3] for i in c)) for c in chunks]
    return [(b * ELEM_BYTES, e * ELEM_BYTES, f, l) for b, e, f, l in runs]


def max_live(segments: dict[str, list[Segment]], scale: dict[str, int] | None = None) -> int:
    """The largest total of live bytes over the phases (each buffer's bytes times ``scale[name]``, its
    session count, default 1): no placement of these segments needs less."""
    events: dict[int, int] = {}
    for name, segs in segments.items():
        k = (scale or {}).get(name, 1)
        for begin, end, first, last in segs:
            events[first] = events.get(first, 0) + (end - begin) * k
            events[last + 1] = events.get(last + 1, 0) - (end - begin) * k
    live = peak = 0
    for t in sorted(events):
        live += events[t]
        peak = max(peak, live)
    return peak
