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


def flops_per_element(params) -> int:
    if isinstance(params, EwiseParams):
        return sum(1 for w in params.code if decode_insn(w)[0] not in (Insn.INPUT, Insn.CONST))
    if isinstance(params, MatmulParams):
        return 2 * params.k
    if isinstance(params, ConvParams):
        return 2 * (params.c_in // params.group) * math.prod(params.kernel) + params.has_bias
    return math.prod(params.rshape)


def task_flops(rec, params) -> int:
    sessions = int(rec["session_end"]) - int(rec["session_begin"])
    elems = int(rec["elem_end"]) - int(rec["elem_begin"])
    return sessions * elems * flops_per_element(params)


def phase_cost(records: np.ndarray, params_table: np.ndarray) -> tuple[int, int]:
    """(FLOPs, bytes) of the tasks of one phase for one beat of the whole cohort."""
    flops, nbytes = 0, 0
    shared: dict[tuple[int, int], set] = {}
    for rec in records:
        params = unpack_params(params_table, int(rec["params"]))
        flops += task_flops(rec, params)
        sessions = int(rec["session_end"]) - int(rec["session_begin"])
        for k in [*range(int(rec["n_inputs"])), OUT]:
            touched = footprint(params, k, int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"]))
            if int(rec["session_stride"][k]):
                nbytes += 4 * len(touched) * sessions
            else:
                key = (operand_arena(rec, k), int(rec["offset"][k]))
                shared.setdefault(key, set()).update(touched.tolist())
    return flops, nbytes + 4 * sum(len(s) for s in shared.values())
