"""`wave-cohort`: give every per-session value the cohort axis, outermost.

Before: tensors are one session's (`tensor<1x576xf32>`). After: each value that depends on a session's
input or state has type `tensor<Nx...>` with the session axis first, whatever axis the model's own batched
layout used (that position stays in the ops' `cohort_axis` attribute for the runtime); values computed
from weights alone stay shared. Axis attributes move by one; a shared value that meets per-session ones
in a concat, or becomes an output or state, is broadcast to the cohort by an explicit `wave.ewise "%0"`.
The module gets `wave.cohort = N`. Weights keep their shapes: the cohort reads each weight once.
A matmul or conv whose own operands are shared but whose epilogue reads a per-session value is split back
into the shared op and a per-session `wave.ewise`; so is a matmul prologue over a shared `a` that reads a
per-session value (the bytes wave-fuse counted as saved are taken back from `wave.fused_bytes_per_session`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wave
from wavec.passes.wave_fuse import SAVED_ATTR


def _with_cohort(value: SSAValue, n: int):
    return wave.tensor((n, *wave.shape_of(value)))


def _shift_axes(op: Operation) -> None:
    """Moves the axis attributes of `op` past the new outermost cohort axis."""
    if isinstance(op, wave.ReduceOp):
        op.properties["axes"] = wave.i64_array([a + 1 for a in op.axes.get_values()])
    elif isinstance(op, wave.ConcatOp):
        op.properties["axis"] = IntegerAttr(op.axis.value.data + 1, i64)
    elif isinstance(op, wave.SliceOp):
        op.properties["starts"] = wave.i64_array([0, *op.starts.get_values()])
        op.properties["steps"] = wave.i64_array([1, *op.steps.get_values()])
    elif isinstance(op, wave.TransposeOp):
        op.properties["perm"] = wave.i64_array([0, *(p + 1 for p in op.perm.get_values())])


def _align_operand_ranks(node: Operation, per_session: set[SSAValue], first: int = 0, last: int | None = None,
                         rank: int | None = None) -> None:
    """A per-session operand (indices `first` to `last`, exclusive: a matmul's a and b, a matmul's or conv's
    epilogue inputs, or a matmul's prologue inputs) of lower rank than the result (or `rank`: a's, for a
    prologue's) gets unit axes after the cohort axis, so that numpy broadcasting still pairs its axes with the
    result's (`[N, 4]` beside `[N, 2, 4]` becomes `[N, 1, 4]`)."""
    rank = len(wave.shape_of(node.results[0])) if rank is None else rank
    for i, operand in enumerate(node.operands):
        if i < first or last is not None and i >= last:
            continue
        shape = wave.shape_of(operand)
        if operand in per_session and len(shape) < rank:
            reshape = wave.ReshapeOp(operand, (shape[0], *[1] * (rank - len(shape)), *shape[1:]))
            Rewriter.insert_op(reshape, InsertPoint.before(node))
            node.operands[i] = reshape.result
            per_session.add(reshape.result)


def _split_epilogue(node: Operation, per_session: set[SSAValue]) -> list[Operation] | None:
    """A matmul / conv whose own operands are all shared but whose epilogue reads a per-session value
    computes a shared value, then the per-session epilogue: the epilogue becomes a `wave.ewise` again."""
    n_extra = len(node.epilogue_inputs)
    own = list(node.operands[: len(node.operands) - n_extra])
    if not n_extra or any(v in per_session for v in own) or not any(v in per_session for v in node.epilogue_inputs):
        return None
    shape = wave.shape_of(node.result)
    if isinstance(node, wave.MatmulOp):
        prologue = node.prologue.data if node.prologue is not None else None
        bare = wave.MatmulOp(own[0], own[1], shape, prologue=prologue, prologue_inputs=list(node.prologue_inputs))
    else:
        bare = wave.ConvOp(own[0], own[1], node.bias, shape, node.strides.get_values(), node.pads.get_values(),
                           node.dilations.get_values(), node.group.value.data)
    epi = wave.EwiseOp(node.epilogue.data, [bare.result, *node.epilogue_inputs], shape)
    Rewriter.replace_op(node, [bare, epi])
    return [bare, epi]


def _split_prologue(node: wave.MatmulOp, per_session: set[SSAValue]) -> list[Operation] | None:
    """A matmul whose `a` is shared but whose prologue reads a per-session value reads a per-session a:
    the prologue becomes a `wave.ewise` again (its inputs broadcast to a's shape), computed per session."""
    extras = list(node.prologue_inputs)
    if node.a in per_session or not any(v in per_session for v in extras):
        return None
    a_shape = wave.shape_of(node.a)
    pro = wave.EwiseOp(node.prologue.data, [node.a, *extras], a_shape)
    epilogue = node.epilogue.data if node.epilogue is not None else None
    bare = wave.MatmulOp(pro.result, node.b, wave.shape_of(node.result), epilogue, list(node.epilogue_inputs))
    bare.attributes.update(node.attributes)
    Rewriter.replace_op(node, [pro, bare])
    return [pro, bare]


def _needs_cohort_operands(op: Operation) -> bool:
    return isinstance(op, (wave.ConcatOp, wave.OutputOp, wave.StateWriteOp))


@dataclass(frozen=True)
class WaveCohort(ModulePass):
    """Adds the cohort axis (sessions) outermost to every per-session value."""

    name = "wave-cohort"
    sessions: int = field(default=1, metadata={"help": "cohort capacity N: session slots served by one profile"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.sessions < 1:
            raise PassFailedException(f"wave-cohort: sessions must be >= 1, got {self.sessions}")
        if wave.cohort_size(op) is not None:
            raise PassFailedException(f"wave-cohort: the module already has {wave.COHORT_ATTR} = {wave.cohort_size(op)}")
        per_session: set[SSAValue] = set()
        unfused = 0  # bytes per session that wave-fuse counted as saved and a split stores again
        for node in list(wave.graph_block(op).ops):
            if isinstance(node, wave.MatmulOp):
                split = _split_prologue(node, per_session)
                if split:
                    unfused += 2 * 4 * math.prod(wave.shape_of(split[0].result))
                    self._visit(split[0], per_session)
                    node = split[1]
            if isinstance(node, (wave.MatmulOp, wave.ConvOp)):
                split = _split_epilogue(node, per_session)
                if split:
                    unfused += 2 * 4 * math.prod(wave.shape_of(split[0].result))
                    for part in split:
                        self._visit(part, per_session)
                    continue
            self._visit(node, per_session)
        op.attributes[wave.COHORT_ATTR] = IntegerAttr(self.sessions, i64)
        saved = op.attributes.get(SAVED_ATTR)
        if saved is not None and unfused:
            op.attributes[SAVED_ATTR] = IntegerAttr(max(0, saved.value.data - unfused), i64)

    def _visit(self, node: Operation, per_session: set[SSAValue]) -> None:
        if _needs_cohort_operands(node):
            self._broadcast_shared_operands(node, per_session)
        if isinstance(node, (wave.InputOp, wave.StateOp)) or any(v in per_session for v in node.operands):
            _shift_axes(node)
            for res in list(node.results):
                per_session.add(Rewriter.replace_value_with_new_type(res, _with_cohort(res, self.sessions)))
            if isinstance(node, wave.EwiseOp):
                _align_operand_ranks(node, per_session)
            elif isinstance(node, (wave.MatmulOp, wave.ConvOp)):
                if isinstance(node, wave.MatmulOp):
                    _align_operand_ranks(node, per_session, 0, 2)
                n_epi = len(node.epilogue_inputs)
                if n_epi:
                    _align_operand_ranks(node, per_session, len(node.operands) - n_epi)
                if isinstance(node, wave.MatmulOp) and len(node.prologue_inputs):
                    _align_operand_ranks(node, per_session, 2, 2 + len(node.prologue_inputs), len(wave.shape_of(node.a)))

    def _broadcast_shared_operands(self, node: Operation, per_session: set[SSAValue]) -> None:
        for i, operand in enumerate(node.operands):
            if operand in per_session:
                continue
            shape = (self.sessions, *wave.shape_of(operand))
            bcast = wave.EwiseOp("%0", [operand], shape)
            Rewriter.insert_op(bcast, InsertPoint.before(node))
            node.operands[i] = bcast.result
            per_session.add(bcast.result)
