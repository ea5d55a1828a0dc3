"""Cost of a task from its payload and parameter block: FLOPs and HBM bytes (numpy only).

FLOPs count a multiply-add as 2 and every other arithmetic instruction as 1. Bytes count each element
an operand touches once per session for per-session operands and once per phase for shared ones
(weights are read once per cohort per beat, ARCHITECTURE.md "Physical floor").
"""

from __future__ import annotations

import math

import numpy as np

from wavec.opcodes import (
    MAX_INPUTS,
    OUT,
    ConvParams,
    EwiseParams,
    Insn,
    MatmulParams,
    decode_insn,
    distinct_offsets,
    footprint,
    footprint_view,
    unpack_params,
    view_offsets,
)


def _code_flops(code) -> int:
    return sum(1 for w in code if decode_insn(w)[0] not in (Insn.INPUT, Insn.CONST))


def flops_per_element(params) -> int:
    if isinstance(params, EwiseParams):
        return _code_flops(params.code)
    if isinstance(params, MatmulParams):
        # A prologue runs on every element of a that an output reads: K times per output element.
        return params.k * (2 + _code_flops(params.prologue.code)) + _code_flops(params.epilogue.code)
    if isinstance(params, ConvParams):
        return 2 * (params.c_in // params.group) * math.prod(params.kernel) + params.has_bias + _code_flops(params.epilogue.code)
    return math.prod(params.rshape)


def phase_cost(records: np.ndarray, params_table: np.ndarray) -> tuple[int, int]:
    """(FLOPs, bytes) of the tasks of one phase for one beat of the whole cohort. An element two tiles
    read (a matmul row split over output tiles) counts once: the op's traffic, whatever its tiling."""
    ats = records["params"].astype(np.int64)
    points = ((records["session_end"].astype(np.int64) - records["session_begin"])
              * (records["elem_end"].astype(np.int64) - records["elem_begin"]))
    params_at = {int(at): unpack_params(params_table, int(at)) for at in np.unique(ats)}
    flops = sum(int(points[ats == at].sum()) * flops_per_element(params) for at, params in params_at.items())
    # Every (record, operand slot) in use, grouped by the location it names: (arena, offset, session stride).
    slots = [np.flatnonzero(records["n_inputs"] > k) if k != OUT else np.arange(len(records))
             for k in [*range(MAX_INPUTS), OUT]]
    rows = np.concatenate(slots)
    ks = np.concatenate([np.full(len(r), k, np.int64) for k, r in zip([*range(MAX_INPUTS), OUT], slots)])
    keys = np.stack([(records["arenas"][rows].astype(np.int64) >> (4 * ks)) & 0xF,
                     records["offset"][rows, ks].astype(np.int64),
                     records["session_stride"][rows, ks].astype(np.int64)], axis=1)
    locations, where = np.unique(keys, axis=0, return_inverse=True)
    order = np.argsort(where.ravel(), kind="stable")
    bounds = np.searchsorted(where.ravel()[order], np.arange(len(locations) + 1))
    nbytes = 0
    for g, location in enumerate(locations):
        users = order[bounds[g] : bounds[g + 1]]
        nbytes += 4 * _distinct_touched(records, rows[users], ks[users], ats, params_at, location[2] != 0)
    return flops, nbytes


def _distinct_touched(records: np.ndarray, rows: np.ndarray, ks: np.ndarray, ats: np.ndarray, params_at: dict,
                      per_session: bool) -> int:
    """Distinct elements that records ``rows`` (through operand slots ``ks``; ``ats``: every record's params
    offset) touch in one operand location, over the cohort. When one parameter block's tiles cover its
    whole iteration space (the usual phase), that is the operand's whole-op footprint (closed form);
    several blocks covering the same sessions merge their whole-op sets once per session; anything else
    enumerates every tile's footprint."""
    blocks = np.stack([ats[rows], ks], axis=1)
    by_block = {(int(at), int(k)): rows[(blocks[:, 0] == at) & (blocks[:, 1] == k)] for at, k in np.unique(blocks, axis=0)}
    covered = {_covered_sessions(records[tiles], params_at[at].n_elems) for (at, _), tiles in by_block.items()}
    if len(covered) == 1 and None not in covered:  # every block covers the same whole sessions
        first, last = covered.pop()
        scale = last - first if per_session else 1
        if len(by_block) == 1:
            (at, k), = by_block
            return distinct_offsets(*footprint_view(params_at[at], k)) * scale
        views = list(dict.fromkeys(footprint_view(params_at[at], k) for at, k in by_block))  # several ops' parts
        spans = sorted(_span(*view) for view in views)
        if all(a[1] < b[0] for a, b in zip(spans, spans[1:])):  # apart in memory: their sets do not meet
            return sum(distinct_offsets(*view) for view in views) * scale
        offsets = [view_offsets(shape, strides, 0, int(np.prod(shape, dtype=np.int64))) for shape, strides in views]
        return len(np.unique(np.concatenate(offsets))) * scale
    parts = []
    for row, at, k in zip(rows.tolist(), ats[rows].tolist(), ks.tolist()):
        rec = records[row]
        elems = footprint(params_at[at], k, int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"]))
        if per_session:  # one row per session; shared operands count once for the cohort
            sessions = np.arange(int(rec["session_begin"]), int(rec["session_end"]), dtype=np.int64)
            elems = (sessions[:, None] * (1 << 32) + elems[None, :]).ravel()
        parts.append(elems)
    return len(np.unique(np.concatenate(parts)))


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """The lowest and highest element offset a strided view touches."""
    low = sum(min(0, (d - 1) * st) for d, st in zip(shape, strides) if d > 0)
    high = sum(max(0, (d - 1) * st) for d, st in zip(shape, strides) if d > 0)
    return low, high


def _covered_sessions(tiles: np.ndarray, n_elems: int) -> tuple[int, int] | None:
    """The sessions ``[first, last)`` whose every element ``[0, n_elems)`` the tile records ``tiles`` cover
    (tiles of one phase never overlap), or None when they leave a hole."""
    sb, se = tiles["session_begin"].astype(np.int64), tiles["session_end"].astype(np.int64)
    first, last = int(sb.min()), int(se.max())
    area = int(((se - sb) * (tiles["elem_end"].astype(np.int64) - tiles["elem_begin"])).sum())
    return (first, last) if area == (last - first) * n_elems else None
