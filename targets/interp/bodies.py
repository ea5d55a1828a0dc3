"""Opcode bodies of the CPU interpreter: what one task computes, vectorised over its sessions and elements.

Each body reads its operands from the arenas (float32 views) through the operand's per-session base
element and the strided view wavec/opcodes.py documents, and writes its output slice back. Nothing but
the arenas is read, so a body sees exactly the bytes earlier tasks wrote.

Numerics: elementwise bodies run in float32 (wavec.opcodes.run_bytecode, as the CUDA body does).
MATMUL, CONV and every REDUCE kind except max/min accumulate in float64 (products of float32 values are
exact there) and round once to float32 at the end; max/min are exact in either. A MATMUL prologue runs in
float32 on each element of a (as the CUDA body does) before the products.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.errors import RuntimeBackendError
from wavec.opcodes import (
    n_task_inputs,
    OUT,
    REDUCE_KINDS,
    Arena,
    ConvParams,
    EwiseParams,
    MatmulParams,
    Opcode,
    Params,
    ReduceParams,
    contiguous_strides,
    run_bytecode,
    view_offsets,
)

# Elements gathered at once ([sessions, elements, reduction]); larger tiles are processed in element chunks.
GATHER_BUDGET = 1 << 22


@dataclass(frozen=True)
class Operand:
    """One operand of a task: its arena and the first float32 element of each of the task's sessions."""

    slot: int
    arena: Arena
    base: np.ndarray  # int64 [sessions]


@dataclass(frozen=True)
class TaskPlan:
    """A payload record decoded once: what the scheduler and the bodies need, in Python types."""

    row: int
    task: int
    worker: int
    opcode: Opcode
    params: Params
    sessions: tuple[int, int]
    elems: tuple[int, int]
    inputs: tuple[Operand, ...]
    out: Operand
    waits: tuple[tuple[int, int], ...]  # (counter, signals per beat)
    signal: int
    signal_phase: int = 0  # a second counter the task increments (its phase's), 0 = none

    @property
    def n_sessions(self) -> int:
        return self.sessions[1] - self.sessions[0]

    def describe(self) -> str:
        return f"task {self.task} (row {self.row}, worker {self.worker}, {self.opcode.name})"


def run_task(plan: TaskPlan, mem: dict[Arena, np.ndarray]) -> None:
    """Executes one task against ``mem`` (this beat's float32 view of each arena)."""
    if plan.elems[0] >= plan.elems[1] or plan.sessions[0] >= plan.sessions[1]:
        return
    _BODIES[plan.opcode](plan, plan.params, mem)


# --------------------------------------------------------------------------------------------
# Reading and writing strided operand views, with bounds checks (numpy would wrap negative indices).


def _indices(plan: TaskPlan, op: Operand, rel: np.ndarray, mem: dict[Arena, np.ndarray]) -> np.ndarray:
    """Absolute element indices ``[sessions, *rel.shape]`` of operand ``op``; raises if any leaves the arena."""
    idx = op.base.reshape((-1,) + (1,) * rel.ndim) + rel[None]
    if idx.size:
        lo, hi, size = int(idx.min()), int(idx.max()), mem[op.arena].size
        if lo < 0 or hi >= size:
            what = "output" if op.slot == OUT else f"input {op.slot}"
            raise RuntimeBackendError(
                f"{plan.describe()}: {what} touches bytes [{lo * 4}, {(hi + 1) * 4}) of the "
                f"{op.arena.name.lower()} arena, which has {size * 4} bytes; the payload's offset, "
                "session_stride or view strides are wrong"
            )
    return idx


def _read(plan: TaskPlan, op: Operand, rel: np.ndarray, mem: dict[Arena, np.ndarray]) -> np.ndarray:
    return mem[op.arena][_indices(plan, op, rel, mem)]


def _write(plan: TaskPlan, rel: np.ndarray, values: np.ndarray, mem: dict[Arena, np.ndarray]) -> None:
    op = plan.out
    if op.arena in (Arena.WEIGHTS, Arena.INPUT):
        raise RuntimeBackendError(
            f"{plan.describe()}: writes its output into the read-only {op.arena.name.lower()} arena"
        )
    idx = _indices(plan, op, rel, mem)
    mem[op.arena][idx] = np.broadcast_to(np.asarray(values, np.float32), idx.shape)


def _chunks(begin: int, end: int, per_elem: int, sessions: int):
    """Splits the element range so that one gather holds about GATHER_BUDGET values."""
    step = max(1, GATHER_BUDGET // max(1, per_elem * sessions))
    for lo in range(begin, end, step):
        yield lo, min(end, lo + step)


# --------------------------------------------------------------------------------------------
# The bodies.


def _ewise(plan: TaskPlan, p: EwiseParams, mem: dict[Arena, np.ndarray]) -> None:
    eb, ee = plan.elems
    ins = [_read(plan, op, view_offsets(p.shape, st, eb, ee), mem) for op, st in zip(plan.inputs, p.in_strides)]
    result = run_bytecode(list(p.code), ins)
    _write(plan, view_offsets(p.shape, p.out_strides, eb, ee), result, mem)


def _epilogue(plan: TaskPlan, p: MatmulParams | ConvParams, lo: int, hi: int, acc, mem: dict[Arena, np.ndarray]):
    """Applies the task's epilogue (if any) to float32 ``acc`` ([sessions, hi - lo] or a scalar) of the
    output elements ``[lo, hi)``, reading the extra inputs from the arenas."""
    ep = p.epilogue
    if not ep.code:
        return acc
    extras = [
        _read(plan, op, view_offsets(ep.shape, st, lo, hi), mem)
        for op, st in zip(plan.inputs[p.epilogue_slot :], ep.strides)
    ]
    acc = np.broadcast_to(np.asarray(acc, np.float32), (plan.n_sessions, hi - lo))
    return run_bytecode(list(ep.code), [acc, *extras])


def prologue_rel(p: MatmulParams, lo: int, hi: int) -> list[np.ndarray]:
    """Relative element offsets ``[hi - lo, K]`` of each prologue extra for output elements ``[lo, hi)``."""
    ks = np.arange(p.k, dtype=np.int64)
    return [view_offsets(p.shape, st[:-1], lo, hi)[:, None] + ks[None, :] * st[-1] for st in p.prologue.strides]


def _prologue(plan: TaskPlan, p: MatmulParams, lo: int, hi: int, a: np.ndarray, mem: dict[Arena, np.ndarray]):
    """Applies the task's prologue (if any) to float32 ``a`` ([sessions, hi - lo, K]) of the output elements
    ``[lo, hi)`` in float32, reading the extra inputs (slots 2..) from the arenas."""
    pro = p.prologue
    if not pro.code:
        return a
    extras = [_read(plan, op, rel, mem) for op, rel in zip(plan.inputs[2:], prologue_rel(p, lo, hi))]
    return np.broadcast_to(run_bytecode(list(pro.code), [a, *extras]), a.shape)


def _matmul(plan: TaskPlan, p: MatmulParams, mem: dict[Arena, np.ndarray]) -> None:
    a_op, b_op = plan.inputs[:2]
    ks = np.arange(p.k, dtype=np.int64)
    for lo, hi in _chunks(*plan.elems, p.k, plan.n_sessions):
        out_rel = view_offsets(p.shape, p.out_strides, lo, hi)
        if p.k == 0:
            _write(plan, out_rel, _epilogue(plan, p, lo, hi, np.float32(0), mem), mem)
            continue
        a_rel = view_offsets(p.shape, p.a_strides[:-1], lo, hi)[:, None] + ks[None, :] * p.a_strides[-1]
        b_rel = view_offsets(p.shape, p.b_strides[:-1], lo, hi)[:, None] + ks[None, :] * p.b_strides[-1]
        a = _prologue(plan, p, lo, hi, _read(plan, a_op, a_rel, mem), mem).astype(np.float64)
        b = _read(plan, b_op, b_rel, mem).astype(np.float64)
        acc = np.einsum("sek,sek->se", a, b).astype(np.float32)
        _write(plan, out_rel, _epilogue(plan, p, lo, hi, acc, mem), mem)


def conv_gather(p: ConvParams, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """im2col for output elements [lo, hi) of one session: (output channel of each element, valid taps
    [E, R], x element per tap [E, R] (0 where padding), w element per tap [E, R]), R = (c_in/group) x kernel."""
    cg, og = p.c_in // p.group, p.c_out // p.group
    kernel_size = int(np.prod(p.kernel, dtype=np.int64))
    in_strides = contiguous_strides((p.batch, p.c_in, *p.in_sp))
    red = np.unravel_index(np.arange(cg * kernel_size, dtype=np.int64), (cg, *p.kernel))  # (c, k_1..k_nsp)
    out_idx = np.unravel_index(np.arange(lo, hi, dtype=np.int64), p.shape)  # (n, o, y_1..y_nsp)
    n, o = out_idx[0][:, None], out_idx[1][:, None]
    x_rel = n * in_strides[0] + ((o // og) * cg + red[0][None, :]) * in_strides[1]
    valid = np.ones(x_rel.shape, bool)
    for i in range(len(p.in_sp)):
        pos = out_idx[2 + i][:, None] * p.stride[i] + red[1 + i][None, :] * p.dilation[i] - p.pad_begin[i]
        valid &= (pos >= 0) & (pos < p.in_sp[i])
        x_rel = x_rel + pos * in_strides[2 + i]
    x_rel = np.where(valid, x_rel, 0)  # element 0 of the session's x exists; its value is masked by `valid`
    w_rel = o * (cg * kernel_size) + np.arange(cg * kernel_size, dtype=np.int64)[None, :]
    return out_idx[1], valid, x_rel, w_rel


def check_groups(plan: TaskPlan, p: ConvParams) -> None:
    if p.group <= 0 or p.c_in % p.group or p.c_out % p.group:
        raise RuntimeBackendError(
            f"{plan.describe()}: group {p.group} does not divide c_in {p.c_in} and c_out {p.c_out}"
        )


def _conv(plan: TaskPlan, p: ConvParams, mem: dict[Arena, np.ndarray]) -> None:
    check_groups(plan, p)
    x_op, w_op = plan.inputs[0], plan.inputs[1]
    taps = (p.c_in // p.group) * int(np.prod(p.kernel, dtype=np.int64))
    bias = None
    if p.has_bias:
        o_all = np.arange(p.c_out, dtype=np.int64)
        bias = _read(plan, plan.inputs[2], o_all, mem).astype(np.float64)  # [S, c_out]
    for lo, hi in _chunks(*plan.elems, taps, plan.n_sessions):
        o_of, valid, x_rel, w_rel = conv_gather(p, lo, hi)
        x = np.where(valid[None], _read(plan, x_op, x_rel, mem), np.float32(0)).astype(np.float64)
        w = _read(plan, w_op, w_rel, mem).astype(np.float64)
        acc = np.einsum("ser,ser->se", x, w)
        if bias is not None:
            acc = acc + bias[:, o_of]
        _write(plan, np.arange(lo, hi, dtype=np.int64), _epilogue(plan, p, lo, hi, acc.astype(np.float32), mem), mem)


REDUCE_IDENTITY = {
    "sum": 0.0,
    "mean": 0.0,
    "max": -np.inf,
    "min": np.inf,
    "prod": 1.0,
    "sumsquare": 0.0,
    "l1": 0.0,
    "l2": 0.0,
    "logsumexp": -np.inf,
}


def _reduce_values(kind: str, v: np.ndarray) -> np.ndarray:
    """Reduces the last axis of float64 ``v`` (not empty)."""
    if kind == "sum":
        return v.sum(-1)
    if kind == "mean":
        return v.sum(-1) / v.shape[-1]
    if kind == "max":
        return v.max(-1)
    if kind == "min":
        return v.min(-1)
    if kind == "prod":
        return v.prod(-1)
    if kind == "sumsquare":
        return (v * v).sum(-1)
    if kind == "l1":
        return np.abs(v).sum(-1)
    if kind == "l2":
        return np.sqrt((v * v).sum(-1))
    m = v.max(-1)
    shift = np.where(np.isfinite(m), m, 0.0)
    return shift + np.log(np.exp(v - shift[..., None]).sum(-1))


def _reduce(plan: TaskPlan, p: ReduceParams, mem: dict[Arena, np.ndarray]) -> None:
    if not 0 <= p.kind < len(REDUCE_KINDS):
        raise RuntimeBackendError(f"{plan.describe()}: reduce kind {p.kind} is not one of {REDUCE_KINDS}")
    kind = REDUCE_KINDS[p.kind]
    r = int(np.prod(p.rshape, dtype=np.int64))
    red_rel = view_offsets(p.rshape, p.rstrides, 0, r)
    for lo, hi in _chunks(*plan.elems, r, plan.n_sessions):
        out_rel = view_offsets(p.shape, p.out_strides, lo, hi)
        if r == 0:
            _write(plan, out_rel, np.float32(REDUCE_IDENTITY[kind]), mem)
            continue
        in_rel = view_offsets(p.shape, p.in_strides, lo, hi)[:, None] + red_rel[None, :]
        v = _read(plan, plan.inputs[0], in_rel, mem).astype(np.float64)
        with np.errstate(all="ignore"):
            _write(plan, out_rel, _reduce_values(kind, v).astype(np.float32), mem)


_BODIES = {Opcode.EWISE: _ewise, Opcode.MATMUL: _matmul, Opcode.CONV: _conv, Opcode.REDUCE: _reduce}


def expected_inputs(params: Params) -> int:
    """How many input operand slots a task of these parameters reads (prologue and epilogue extras included)."""
    return n_task_inputs(params)
