"""`wave-stack-matmuls`: one matmul over a stacked contraction instead of a matmul whose epilogue adds another.

After `wave-fuse`, an LSTM step is ``x W^T`` whose epilogue adds ``h R^T + b``, itself a matmul with a bias
epilogue (frontends/onnx/ops_rnn.py `_project`). Both products share their output, and the sum of two matmuls is
one matmul over their contractions side by side::

    x W + (h R + b)  ==  [x, h] [W; R] + b

so the pass rewrites

    %hr = wave.matmul %h, %r epilogue "add(%0, %1)"(%b)
    %g  = wave.matmul %x, %w epilogue "add(%0, %1)"(%hr)

into ``wave.concat`` of the two a's along k, ``wave.concat`` of the two weights along k (wave-to-wpk folds a
concat of weights into one weight of the profile, no phase), and one ``wave.matmul`` with the inner epilogue.
The builder's LSTM (frontends/builder/lower.py) sums the two products and the bias in the outer epilogue
(``add(add(%0, %1), %2)``); any outer epilogue that is a sum with ``%0`` and the inner result as addends stacks
the same way, its other addends kept. It applies when both b's are `wave.weight`s of the same dtype, the inner
matmul's result (through reshapes) is read by the outer's epilogue alone and as an addend of it, the inner
epilogue is absent or a sum of ``%0`` and addends whose inputs vary along the columns alone (biases: they then
apply to the whole sum), neither matmul has a prologue, and the stacked matmul reads no more inputs than a
task has slots (wavec.opcodes.MAX_INPUTS: a, b and its epilogue's).

Why it pays only for a large cohort: the inner matmul reads the previous beat's state alone, so in a small one
wave-hoist and wpk-schedule run it on idle workers at the beat's start, off the chain, and only the input's
matmul waits for the encoder. Once the cohort fills every worker, nothing is idle, and the two matmuls run one
after the other on the chain, each paying a GEMM task's fixed cost (Silero at 256 sessions: 13.1 and 13.4 us a
task for 32 x 32 tiles of K = 128, back to back, bench/RESULTS.md twenty-third run). Once wave-cohort has run,
the pass leaves a cohort of fewer than `min-sessions` as it is; before it (a module of one session) it stacks
only when `min-sessions` is 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wave
from wavec.opcodes import MAX_INPUTS, Expr, parse_expr


def _weight(value: SSAValue) -> wave.WeightOp | None:
    """The `wave.weight` that is ``value`` itself, a 2-D [K, N] matrix (the form a stacked k concatenates)."""
    op = value.owner
    return op if isinstance(op, wave.WeightOp) and len(wave.shape_of(value)) == 2 else None


def _sole_reader(value: SSAValue) -> Operation | None:
    users = [use.operation for use in value.uses]
    return users[0] if len(users) == 1 else None


def _addends(expr: Expr) -> list[Expr]:
    """The terms of ``expr`` read as a sum: ``add(add(%0, %1), %2)`` is [%0, %1, %2]."""
    if expr.kind == "call" and expr.value == "add":
        return [t for arg in expr.args for t in _addends(arg)]
    return [expr]


def _other_addends(terms: list[Expr], *inputs: int) -> list[Expr] | None:
    """The addends ``terms`` besides ``inputs`` (each an addend exactly once and read nowhere else), or None when
    they are not such a sum."""
    alone = [t for t in terms if t.kind == "input" and t.value in inputs]
    others = [t for t in terms if t not in alone]
    if sorted(t.value for t in alone) != sorted(inputs) or any(t.inputs() & set(inputs) for t in others):
        return None
    return others


def _epilogue_addends(op: wave.MatmulOp) -> list[Expr]:
    """The addends of ``op``'s epilogue; no epilogue is ``%0`` alone."""
    text = wave.epilogue_text(op)
    return _addends(parse_expr(text)) if text is not None else [Expr("input", 0)]


@dataclass(frozen=True)
class Stacking:
    """Two matmuls that stack: ``outer``'s epilogue input ``%index`` is ``inner``'s result through ``reshapes``
    (from the input back to the inner), and both epilogues' addends besides the products."""

    outer: wave.MatmulOp
    inner: wave.MatmulOp
    index: int
    reshapes: list[wave.ReshapeOp]
    outer_addends: list[Expr]
    inner_addends: list[Expr]

    def epilogue(self) -> tuple[str | None, list[SSAValue]]:
        """The stacked matmul's epilogue: ``%0`` (both products) plus both epilogues' other addends, over the
        outer's inputs but ``%index``, then the inner's, each value once (as wave-fuse's `_fused_operands`)."""
        outer_inputs = list(self.outer.epilogue_inputs)
        inputs = [v for i, v in enumerate(outer_inputs, start=1) if i != self.index]
        inputs += [v for v in self.inner.epilogue_inputs if v not in inputs]

        def renumber(values) -> dict[int, Expr]:
            return {i: Expr("input", 1 + inputs.index(v)) for i, v in enumerate(values, start=1) if v in inputs}

        terms = [Expr("input", 0), *(t.substitute(renumber(outer_inputs)) for t in self.outer_addends),
                 *(t.substitute(renumber(self.inner.epilogue_inputs)) for t in self.inner_addends)]
        if len(terms) == 1:
            return None, []
        return str(functools.reduce(lambda a, b: Expr("call", "add", (a, b)), terms)), inputs


def _summed_matmul(outer: wave.MatmulOp) -> Stacking | None:
    """The first epilogue input of ``outer`` that is a matmul's result (through reshapes), an addend of the
    epilogue beside ``%0``, from a matmul whose own epilogue is ``%0`` plus addends; as a Stacking."""
    terms = _epilogue_addends(outer)
    for index, value in enumerate(outer.epilogue_inputs, start=1):
        source, reshapes = wave.reshape_chain(value)
        others = _other_addends(terms, 0, index)
        if not isinstance(source.owner, wave.MatmulOp) or others is None:
            continue
        inner_others = _other_addends(_epilogue_addends(source.owner), 0)
        if inner_others is not None:
            return Stacking(outer, source.owner, index, reshapes, others, inner_others)
    return None


def stacking(outer: wave.MatmulOp) -> Stacking | None:
    """How ``outer`` stacks with the matmul its epilogue adds (the module docstring), or None when it does not."""
    found = None if outer.prologue is not None else _summed_matmul(outer)
    if found is None or found.inner.prologue is not None:
        return None
    inner = found.inner
    chain = [inner, *reversed(found.reshapes), outer]
    if any(_sole_reader(op.result) is not reader for op, reader in zip(chain, chain[1:])):
        return None
    w_outer, w_inner = _weight(outer.b), _weight(inner.b)
    if w_outer is None or w_inner is None or w_outer.is_bf16 != w_inner.is_bf16:
        return None
    a_outer, a_inner = wave.shape_of(outer.a), wave.shape_of(inner.a)
    out_shape = wave.shape_of(outer.result)
    if (wave.shape_of(outer.b)[1] != wave.shape_of(inner.b)[1] or math.prod(a_outer[:-1]) != math.prod(a_inner[:-1])
            or wave.shape_of(outer.epilogue_inputs[found.index - 1]) != out_shape):
        return None
    if not all(_varies_along_columns_alone(v, out_shape) for v in inner.epilogue_inputs):
        return None
    if 2 + len(found.epilogue()[1]) > MAX_INPUTS:  # a, b and the epilogue's inputs: a task's input slots
        return None
    return found


def _varies_along_columns_alone(value: SSAValue, out_shape: tuple[int, ...]) -> bool:
    """Whether an inner epilogue input is a bias, which may then apply to the whole sum. An input varying along a
    row axis is refused: the reshapes between the two matmuls may lay the rows out differently, so it would meet
    other rows."""
    shape = wave.shape_of(value)
    return all(d == 1 for d in shape[:-1]) and shape[-1] in (1, out_shape[-1])


def stack(found: Stacking) -> wave.MatmulOp:
    """Replaces the outer and inner matmuls of ``found`` (and the reshapes between) with one matmul over
    [outer.a, inner.a] and [outer.b; inner.b], inserted where the outer was; returns it."""
    outer, inner = found.outer, found.inner
    a_shape = wave.shape_of(outer.a)
    k_outer, k_inner = a_shape[-1], wave.shape_of(inner.a)[-1]
    n = wave.shape_of(outer.b)[1]
    rows = (*a_shape[:-1], k_inner)
    inner_a = [] if wave.shape_of(inner.a) == rows else [wave.ReshapeOp(inner.a, rows)]
    a = wave.ConcatOp([outer.a, inner_a[0].result if inner_a else inner.a], len(a_shape) - 1,
                      (*a_shape[:-1], k_outer + k_inner))
    b = wave.ConcatOp([outer.b, inner.b], 0, (k_outer + k_inner, n))
    stacked = wave.MatmulOp(a.result, b.result, wave.shape_of(outer.result), *found.epilogue())
    Rewriter.replace_op(outer, [*inner_a, a, b, stacked])
    for op in [*found.reshapes, inner]:
        Rewriter.erase_op(op)
    return stacked


@dataclass(frozen=True)
class WaveStackMatmuls(ModulePass):
    """Rewrites a matmul whose epilogue adds another matmul's result into one matmul over both contractions
    stacked (the module docstring), in a cohort of at least `min-sessions`."""

    name = "wave-stack-matmuls"
    min_sessions: int = field(default=1, metadata={"help": "smallest cohort (wave-cohort's N) the pass rewrites"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.min_sessions < 1:
            raise PassFailedException(f"wave-stack-matmuls: min-sessions must be >= 1, got {self.min_sessions}")
        if (wave.cohort_size(op) or 1) < self.min_sessions:
            return
        for outer in [o for o in op.walk() if isinstance(o, wave.MatmulOp)]:
            found = stacking(outer)
            if found is not None:
                stack(found)
