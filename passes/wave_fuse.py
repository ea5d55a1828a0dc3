"""`wave-fuse`: fold chains of elementwise ops into one `wave.ewise`, and into matmul / conv epilogues and
matmul prologues.

A `wave.ewise` whose result has exactly one use, and that use is another `wave.ewise`, is substituted into
its user's expression: `sqrt(%0)` of `add(%0, %1)` becomes `sqrt(add(%0, %1))`, saving the intermediate's
write and re-read. Right-aligned broadcasting composes, so the fused op broadcasts the producer's inputs to
the user's shape directly. A producer with any other use (a state write, an output, a second reader) is
kept; a fusion that would exceed `max-inputs` (at most the task's input slots, wavec.opcodes.MAX_INPUTS)
is skipped.

Epilogues: a `wave.ewise` that reads the result of a `wave.matmul` or `wave.conv` with no other use, and
whose result has the producer's shape, is folded into the producer as its `epilogue` (bias, activation,
residual): `relu(add(%0, %1))(%mm, %bias)` becomes `wave.matmul ... epilogue "relu(add(%0, %1))"(%bias)`,
where `%0` is the accumulated value and the user's other inputs become the producer's epilogue inputs. An
existing epilogue composes. The fused op's inputs (the producer's own plus the extras) stay within
`max-inputs`; a producer read twice, or written to state or output, keeps its value and is not fused.

Prologues: a `wave.ewise` whose result is the `a` of a `wave.matmul` against a weight and has no other use
(the final normalizing step of a layer or RMS norm, `mul(mul(%0, rsqrt(%1)), %2)(%x, %ms, %g)`) is folded
into the matmul as its `prologue`, applied to each element of `a` as the matmul loads it, so the normalized
tensor is never stored. A weight's GEMM bodies apply it once per element of a; a matmul of two computed
operands (attention's P @ V, its P a softmax) may run on the lane-group body, which applies it once per
output column: duplex:1b's encoder P @ V took 4.5 ms a beat at 96 sessions with its softmax as prologue, its
P is [12, 128] floats a session. One input that varies along a's rows and k becomes the new `a` (`%0`), the
others the prologue inputs, each of which must vary along a's rows alone (a per-row mean or deviation) or
along k alone (a per-feature scale or shift). An existing prologue composes. The matmul's own operands, the
prologue's and the epilogue's inputs together stay within `max-inputs`, so a layer norm with both a scale
and a shift (mean, deviation, scale, shift: four extras) is not fused; RMS norm, or a layer norm whose `x -
mean` is stored for its variance, fits (deviation and scale).

Recomputation, after the fusions above: an elementwise producer that its user reads through reshapes, or
that other ops read too, is computed again inside the user when the producer's inputs are small
(`recompute-max-bytes` a session) and the user's other inputs do not wait for the producer: the user then
no longer waits a phase for it (Silero's LSTM: relu(h) computed from the cell's o and c, while h itself is
kept for the state). Through reshapes, every producer input must have the producer's shape.

The module records `wave.fused_bytes_per_session`: the HBM bytes one session's beat no longer moves
(each fused intermediate was written once and read once); the report scales it by the cohort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wave
from wavec.opcodes import MAX_INPUTS, Expr, kept_input, parse_expr


def _fused_operands(user: wave.EwiseOp, index: int, inputs) -> list:
    """The fused op's operands: the user's but its input ``index``, then the producer's ``inputs`` it lacks."""
    operands = [v for i, v in enumerate(user.inputs) if i != index]
    for v in inputs:
        if v not in operands:
            operands.append(v)
    return operands


def _fused(user: wave.EwiseOp, index: int, producer: wave.EwiseOp, inputs: list[SSAValue]) -> wave.EwiseOp:
    """The user with its input ``index`` replaced by the producer's expression over ``inputs`` (the producer's
    own inputs, or views of them, in its order)."""
    operands = _fused_operands(user, index, inputs)
    user_map = {i: Expr("input", operands.index(v)) for i, v in enumerate(user.inputs) if i != index}
    producer_map = {i: Expr("input", operands.index(v)) for i, v in enumerate(inputs)}
    inner = parse_expr(producer.expr.data).substitute(producer_map)
    expr = parse_expr(user.expr.data).substitute({**user_map, index: inner})
    return wave.EwiseOp(str(expr), operands, wave.shape_of(user.result))


def intermediate_bytes(value) -> int:
    """HBM bytes a fusion saves: the intermediate was written once and read once (float32)."""
    return 2 * 4 * math.prod(wave.shape_of(value))


class _Fusion(RewritePattern):
    """A fusion pattern: bounded by `max_inputs`; appends the bytes each fusion saves to `saved`."""

    def __init__(self, max_inputs: int, saved: list[int]):
        self.max_inputs = max_inputs
        self.saved = saved


class FuseElementwiseProducer(_Fusion):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, user: wave.EwiseOp, rewriter: PatternRewriter) -> None:
        for index, operand in enumerate(user.inputs):
            producer = operand.owner
            if not isinstance(producer, wave.EwiseOp) or not operand.has_one_use():
                continue
            if len(_fused_operands(user, index, producer.inputs)) > self.max_inputs:
                continue
            fused = _fused(user, index, producer, list(producer.inputs))
            self.saved.append(intermediate_bytes(producer.result))
            rewriter.replace(user, fused)
            rewriter.erase(producer)
            return


def _through_reshapes(value: SSAValue) -> tuple[wave.EwiseOp | None, list[wave.ReshapeOp]]:
    """The elementwise op whose result ``value`` is, read through reshapes (`wave.reshape_chain`), and those
    reshapes; (None, []) when ``value`` is something else."""
    source, reshapes = wave.reshape_chain(value)
    return (source.owner, reshapes) if isinstance(source.owner, wave.EwiseOp) else (None, [])


def _depends_on(value: SSAValue, op: Operation, order: dict[Operation, int]) -> bool:
    """Whether ``value`` is computed from ``op``'s result. ``order``: the block's ops numbered in SSA order (an
    op numbered before ``op`` cannot read it, so the walk stops there; an op made since, unnumbered, is
    walked through). xDSL's is_before_in_block walks the block at each call: duplex:11b's wave-fuse took
    6 min 40 s with it, 15 s without recomputation."""
    seen, todo, first = set(), [value], order.get(op, -1)
    while todo:
        owner = todo.pop().owner
        if owner is op:
            return True
        if isinstance(owner, Operation) and owner not in seen and order.get(owner, first + 1) > first:
            seen.add(owner)
            todo.extend(owner.operands)
    return False


def _bytes_per_session(values) -> int:
    return sum(4 * math.prod(wave.shape_of(v)) for v in values)


class RecomputeElementwiseProducer(_Fusion):
    """Folds an elementwise producer into an elementwise user that reads it through reshapes, or that shares
    it with other readers (recomputation: the producer stays for them, and the user computes the value again
    from the producer's inputs instead of waiting for it). Recomputed only where the producer's distinct
    inputs are at most `max_bytes` (a session's, before wave-cohort; weights counted), where a phase's handoff
    (about 1 us, ARCHITECTURE.md) costs more than reading them again; where the user's other inputs are not
    computed from the producer (a softmax's division waits for the sum of the exponentials either way); and
    where the producer reads no state and is no ``select(c, a, %k)``: wave-to-wpk may update a state in place
    only while nothing else reads it (`updates_state_in_place`), and the state's write waits for every reader
    of the old value (a payload holds 3 waits). Reshapes left unread are erased. Silero's LSTM: relu(h) of h =
    mul(sigmoid(o), tanh(c)), h also the state's, becomes relu(mul(sigmoid(o), tanh(c))), one phase off the
    output's chain. Through reshapes every input of the producer must have its shape (each is reshaped as the
    value was); broadcasting ones stay unfused."""

    def __init__(self, max_inputs: int, saved: list[int], max_bytes: int, order: dict[Operation, int]):
        super().__init__(max_inputs, saved)
        self.max_bytes = max_bytes
        self.order = order

    def _may_recompute(self, producer: wave.EwiseOp, others: list[SSAValue]) -> bool:
        return (0 < self.max_bytes and _bytes_per_session(set(producer.inputs)) <= self.max_bytes
                and not any(_depends_on(v, producer, self.order) for v in others)
                and kept_input(parse_expr(producer.expr.data)) < 0
                and not any(isinstance(wave.view_source(v, with_slices=True), wave.StateOp) for v in producer.inputs))

    @op_type_rewrite_pattern
    def match_and_rewrite(self, user: wave.EwiseOp, rewriter: PatternRewriter) -> None:
        for index, operand in enumerate(user.inputs):
            producer, reshapes = _through_reshapes(operand)
            if producer is None or (not reshapes and operand.has_one_use()):
                continue  # FuseElementwiseProducer's
            shared = not all(v.has_one_use() for v in [producer.result, *(r.result for r in reshapes)])
            others = [v for i, v in enumerate(user.inputs) if i != index]
            if shared and not self._may_recompute(producer, others):
                continue
            shape = wave.shape_of(operand)
            if reshapes and any(wave.shape_of(v) != wave.shape_of(producer.result) for v in producer.inputs):
                continue
            fresh = list(dict.fromkeys(producer.inputs))
            read_again = fresh if reshapes else [v for v in fresh if v not in others]  # the views are new values
            if len(others) + len(read_again) > self.max_inputs:
                continue
            views = [wave.ReshapeOp(v, shape) for v in fresh] if reshapes else []
            value_of = {v: view.result for v, view in zip(fresh, views)} if reshapes else {v: v for v in fresh}
            fused = _fused(user, index, producer, [value_of[v] for v in producer.inputs])
            for op in [*views, fused]:
                self.order[op] = self.order.get(user, len(self.order))
            rewriter.replace(user, [*views, fused], [fused.result])
            for r in reshapes:  # the reshapes only this user read
                if r.result.uses:
                    break
                rewriter.erase(r)
            if producer.result.uses:  # recomputed: the user reads the producer's inputs, not its result
                self.saved.append(_bytes_per_session([operand]) - _bytes_per_session(read_again))
            else:
                self.saved.append(intermediate_bytes(producer.result))
                rewriter.erase(producer)
            return


def _own_operands(op: wave.MatmulOp | wave.ConvOp) -> list:
    """The operands before the epilogue's inputs (a matmul's prologue inputs included)."""
    n_extra = len(op.epilogue_inputs)
    return list(op.operands[: len(op.operands) - n_extra])


def _text(attr) -> str | None:
    return attr.data if attr is not None else None


class FuseEpilogue(_Fusion):
    """Folds a single-use matmul / conv result's elementwise user into the producer as its epilogue."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, user: wave.EwiseOp, rewriter: PatternRewriter) -> None:
        for index, operand in enumerate(user.inputs):
            producer = operand.owner
            if not isinstance(producer, (wave.MatmulOp, wave.ConvOp)) or not operand.has_one_use():
                continue
            if wave.shape_of(user.result) != wave.shape_of(producer.result):
                continue
            own = _own_operands(producer)
            extras = list(producer.epilogue_inputs)
            for i, v in enumerate(user.inputs):
                if i != index and v not in extras:
                    extras.append(v)
            if len(own) + len(extras) > self.max_inputs:
                continue
            # %0 is the accumulator; the producer's epilogue (if any) keeps its %k, the user's inputs map after.
            inner = parse_expr(producer.epilogue.data) if producer.epilogue is not None else Expr("input", 0)
            user_map = {i: Expr("input", 1 + extras.index(v)) for i, v in enumerate(user.inputs) if i != index}
            expr = parse_expr(user.expr.data).substitute({**user_map, index: inner})
            shape = wave.shape_of(producer.result)
            if isinstance(producer, wave.MatmulOp):
                fused = wave.MatmulOp(own[0], own[1], shape, str(expr), extras, _text(producer.prologue),
                                      list(producer.prologue_inputs))
            else:
                fused = wave.ConvOp(own[0], own[1], producer.bias, shape, producer.strides.get_values(),
                                    producer.pads.get_values(), producer.dilations.get_values(),
                                    producer.group.value.data, str(expr), extras)
            fused.attributes.update(producer.attributes)
            # The fused op takes the user's place: every extra input dominates the user.
            self.saved.append(intermediate_bytes(producer.result))
            rewriter.replace(user, fused)
            rewriter.erase(producer)
            return


def _prologue_base(producer: wave.EwiseOp, a_shape: tuple[int, ...]) -> SSAValue | None:
    """The input of `producer` that becomes the matmul's new ``a`` (%0 of the prologue): the one input that
    varies along both the rows and k of ``a`` (the norm's x or x - mean), or, when every input is a legal
    prologue input (a single row), the first of a's exact shape. None when no input or two qualify."""
    full = [v for v in producer.inputs if wave.shape_of(v) == a_shape]
    both = {v for v in producer.inputs if wave.prologue_axis(wave.shape_of(v), a_shape) is None}
    if len(both) > 1 or (both and not set(full) >= both):
        return None
    if both:
        return next(iter(both))
    return full[0] if full else None


class FusePrologue(_Fusion):
    """Folds the single-use elementwise producer of a matmul's ``a`` (a norm's final normalizing step) into
    the matmul as its prologue: ``a' = prologue(a, extras...)``, each extra per row of a or per k."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, mm: wave.MatmulOp, rewriter: PatternRewriter) -> None:
        producer = mm.a.owner
        if not isinstance(producer, wave.EwiseOp) or not mm.a.has_one_use() or wave.weight_source(mm.b) is None:
            return
        a_shape = wave.shape_of(mm.a)
        base = _prologue_base(producer, a_shape)
        if base is None:
            return
        extras = list(mm.prologue_inputs)
        for v in producer.inputs:
            if v is not base and v not in extras:
                extras.append(v)
        if 2 + len(extras) + len(mm.epilogue_inputs) > self.max_inputs:
            return
        # The producer's expression over (base = %0, extras = %1..); an existing prologue reads it as its %0.
        slot = {v: Expr("input", 0 if v is base else 1 + extras.index(v)) for v in producer.inputs}
        inner = parse_expr(producer.expr.data).substitute({i: slot[v] for i, v in enumerate(producer.inputs)})
        expr = inner
        if mm.prologue is not None:
            keep = {j + 1: Expr("input", j + 1) for j in range(len(mm.prologue_inputs))}
            expr = parse_expr(mm.prologue.data).substitute({0: inner, **keep})
        fused = wave.MatmulOp(base, mm.b, wave.shape_of(mm.result), _text(mm.epilogue), list(mm.epilogue_inputs),
                              str(expr), extras)
        fused.attributes.update(mm.attributes)
        self.saved.append(intermediate_bytes(producer.result))
        rewriter.replace(mm, fused)
        rewriter.erase(producer)


SAVED_ATTR = "wave.fused_bytes_per_session"
# Recompute a shared producer whose inputs are at most 4 KB a session: Silero's LSTM cell (1 KB) is; a
# transformer's [T, d] activations (duplex:1b's 96 KB) are not, where reading them again costs bandwidth.
RECOMPUTE_MAX_BYTES = 4096


@dataclass(frozen=True)
class WaveFuse(ModulePass):
    """Fuses single-use elementwise producers into their elementwise users, elementwise users of
    single-use matmul / conv results into those ops as epilogues, and the single-use elementwise producer
    of a matmul's a (a norm's normalizing step) into the matmul as its prologue; then recomputes small
    shared elementwise producers in the users that would otherwise wait a phase for them."""

    name = "wave-fuse"
    max_inputs: int = field(
        default=MAX_INPUTS, metadata={"help": f"most inputs of a fused op (a task reads at most {MAX_INPUTS})"}
    )
    prologues: bool = field(
        default=True, metadata={"help": "fold a norm's normalizing ewise into the matmul that reads it (prologue)"}
    )
    recompute_max_bytes: int = field(
        default=RECOMPUTE_MAX_BYTES,
        metadata={"help": "recompute a shared elementwise producer in a user when its inputs are at most this many "
                          "bytes (a session's, before wave-cohort; 0: never)"},
    )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not 1 <= self.max_inputs <= MAX_INPUTS:
            raise PassFailedException(f"wave-fuse: max-inputs must be between 1 and {MAX_INPUTS}, got {self.max_inputs}")
        if self.recompute_max_bytes < 0:
            raise PassFailedException(f"wave-fuse: recompute-max-bytes must be 0 or more, got {self.recompute_max_bytes}")
        saved: list[int] = []
        fusions = [FuseElementwiseProducer(self.max_inputs, saved), FuseEpilogue(self.max_inputs, saved),
                   *([FusePrologue(self.max_inputs, saved)] if self.prologues else [])]
        # Recomputation last: folding a shared producer into its users first could take from a matmul the
        # prologue it would get (a layer norm's normalizing ewise reading x and its mean again, not x - mean).
        PatternRewriteWalker(GreedyRewritePatternApplier(fusions, dce_enabled=False),
                             apply_recursively=True).rewrite_module(op)
        order = {node: i for i, node in enumerate(op.walk())}
        recompute = RecomputeElementwiseProducer(self.max_inputs, saved, self.recompute_max_bytes, order)
        PatternRewriteWalker(GreedyRewritePatternApplier([recompute, *fusions], dce_enabled=False),
                             apply_recursively=True).rewrite_module(op)
        per_session = sum(saved) // (wave.cohort_size(op) or 1)
        previous = op.attributes.get(SAVED_ATTR)
        total = per_session + (previous.value.data if previous is not None else 0)
        op.attributes[SAVED_ATTR] = IntegerAttr(total, i64)
