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
apply to the whole sum), and neither matmul has a prologue.

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
from wavec.opcodes import Expr, parse_expr


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


def _other_addends(text: str | None, *inputs: int) -> list[Expr] | None:
    """The addends of epilogue ``text`` besides ``inputs`` (each an addend exactly once and read nowhere else),
    or None when the epilogue is not such a sum. No epilogue is ``%0`` alone."""
    terms = _addends(parse_expr(text)) if text is not None else [Expr("input", 0)]
    alone = [t for t in terms if t.kind == "input" and t.value in inputs]
    others = [t for t in terms if t not in alone]
    if sorted(t.value for t in alone) != sorted(inputs) or any(t.inputs() & set(inputs) for t in others):
        return None
    return others


def _summed_matmul(outer: wave.MatmulOp) -> tuple[int, wave.MatmulOp] | None:
    """The epilogue input index ``i`` (``%i``) and the matmul it reads through reshapes, when ``outer``'s
    epilogue sums ``%0`` and ``%i`` as addends; the first such."""
    for i, value in enumerate(outer.epilogue_inputs, start=1):
        inner = wave.reshape_chain(value)[0].owner
        if isinstance(inner, wave.MatmulOp) and _other_addends(wave.epilogue_text(outer), 0, i) is not None:
            return i, inner
    return None


def inner_matmul(outer: wave.MatmulOp) -> tuple[int, wave.MatmulOp] | None:
    """The epilogue input index and the matmul whose result ``outer``'s epilogue adds, when the two stack (the
    module docstring), else None."""
    found = None if outer.prologue is not None else _summed_matmul(outer)
    if found is None:
        return None
    index, inner = found
    reshapes = wave.reshape_chain(outer.epilogue_inputs[index - 1])[1]
    chain = [inner, *reversed(reshapes), outer]
    if inner.prologue is not None or any(_sole_reader(op.result) is not reader for op, reader in zip(chain, chain[1:])):
        return None
    w_outer, w_inner = _weight(outer.b), _weight(inner.b)
    if w_outer is None or w_inner is None or w_outer.is_bf16 != w_inner.is_bf16:
        return None
    a_outer, a_inner = wave.shape_of(outer.a), wave.shape_of(inner.a)
    if (wave.shape_of(outer.b)[1] != wave.shape_of(inner.b)[1] or math.prod(a_outer[:-1]) != math.prod(a_inner[:-1])
            or wave.shape_of(outer.epilogue_inputs[index - 1]) != wave.shape_of(outer.result)):
        return None
    if not _epilogue_distributes(inner, wave.shape_of(outer.result)):
        return None
    return index, inner


def _epilogue_distributes(inner: wave.MatmulOp, out_shape: tuple[int, ...]) -> bool:
    """Whether the inner epilogue may apply to the whole sum: none, or ``%0`` plus addends that read inputs varying
    along the last (column) axis alone (biases). An input varying along a row axis is refused: the reshapes
    between the two matmuls may lay the rows out differently, so it would meet other rows."""
    others = _other_addends(wave.epilogue_text(inner), 0)
    return others is not None and all(
        all(d == 1 for d in wave.shape_of(v)[:-1]) and wave.shape_of(v)[-1] in (1, out_shape[-1])
        for v in inner.epilogue_inputs)


def _stacked_epilogue(outer: wave.MatmulOp, index: int, inner: wave.MatmulOp) -> tuple[str | None, list[SSAValue]]:
    """The stacked matmul's epilogue: ``%0`` (both products) plus the outer epilogue's other addends and the inner
    one's, each input renumbered into one list (outer's inputs but ``%index``, then inner's)."""
    outer_inputs = [v for i, v in enumerate(outer.epilogue_inputs, start=1) if i != index]
    outer_map = {0: Expr("input", 0), **{i: Expr("input", i if i < index else i - 1)
                                          for i in range(1, len(outer.epilogue_inputs) + 1) if i != index}}
    inner_map = {i: Expr("input", len(outer_inputs) + i) for i in range(1, len(inner.epilogue_inputs) + 1)}
    terms = [Expr("input", 0),
             *(t.substitute(outer_map) for t in _other_addends(wave.epilogue_text(outer), 0, index)),
             *(t.substitute(inner_map) for t in _other_addends(wave.epilogue_text(inner), 0))]
    if len(terms) == 1:
        return None, []
    return str(functools.reduce(lambda a, b: Expr("call", "add", (a, b)), terms)), [*outer_inputs, *inner.epilogue_inputs]


def stack(outer: wave.MatmulOp, index: int, inner: wave.MatmulOp) -> wave.MatmulOp:
    """Replaces ``outer`` and ``inner`` (read as ``outer``'s epilogue input ``%index``, through reshapes, which
    go too) with one matmul over [outer.a, inner.a] and [outer.b; inner.b], inserted where ``outer`` was;
    returns it."""
    a_shape = wave.shape_of(outer.a)
    k_outer, k_inner = a_shape[-1], wave.shape_of(inner.a)[-1]
    n = wave.shape_of(outer.b)[1]
    rows = (*a_shape[:-1], k_inner)
    inner_a = [] if wave.shape_of(inner.a) == rows else [wave.ReshapeOp(inner.a, rows)]
    a = wave.ConcatOp([outer.a, inner_a[0].result if inner_a else inner.a], len(a_shape) - 1,
                      (*a_shape[:-1], k_outer + k_inner))
    b = wave.ConcatOp([outer.b, inner.b], 0, (k_outer + k_inner, n))
    stacked = wave.MatmulOp(a.result, b.result, wave.shape_of(outer.result), *_stacked_epilogue(outer, index, inner))
    reshapes = wave.reshape_chain(outer.epilogue_inputs[index - 1])[1]  # from the outer's input back to the inner
    Rewriter.replace_op(outer, [*inner_a, a, b, stacked])
    for op in [*reshapes, inner]:
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
            found = inner_matmul(outer)
            if found is not None:
                stack(outer, *found)
