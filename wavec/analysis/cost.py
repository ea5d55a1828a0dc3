"""Cost of a task from its payload and parameter block: FLOPs and HBM bytes (numpy only).

FLOPs count a multiply-add as 2 and every other arithmetic instruction as 1. Bytes count each element
an operand touches once per session for per-session operands and once per phase for shared ones
(weights are read once per cohort per beat, ARCHITECTURE.md "Physical floor").
"""

from __future__ import annotations

import math

import numpy as np

from wavec.opcodes import OUT, ConvParams, EwiseParams, Insn, MatmulParams, decode_insn, footprint, unpack_params
from wavec.payload import operand_arena


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


def task_flops(rec, params) -> int:
    sessions = int(rec["session_end"]) - int(rec["session_begin"])
    elems = int(rec["elem_end"]) - int(rec["elem_begin"])
    return sessions * elems * flops_per_element(params)


def phase_cost(records: np.ndarray, params_table: np.ndarray) -> tuple[int, int]:
    """(FLOPs, bytes) of the tasks of one phase for one beat of the whole cohort. An element two tiles
    read (a matmul row split over output tiles) counts once: the op's traffic, whatever its tiling."""
    flops = 0
    touched: dict[tuple[int, int, int], list[np.ndarray]] = {}
    for rec in records:
        params = unpack_params(params_table, int(rec["params"]))
        flops += task_flops(rec, params)
        sessions = np.arange(int(rec["session_begin"]), int(rec["session_end"]), dtype=np.int64)
        for k in [*range(int(rec["n_inputs"])), OUT]:
            elems = footprint(params, k, int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"]))
            stride = int(rec["session_stride"][k])
            key = (operand_arena(rec, k), int(rec["offset"][k]), stride)
            if stride:  # one row per session; shared operands count once for the cohort
                elems = (sessions[:, None] * (1 << 32) + elems[None, :]).ravel()
            touched.setdefault(key, []).append(elems)
    nbytes = sum(4 * len(np.unique(np.concatenate(parts))) for parts in touched.values())
    return flops, nbytes
