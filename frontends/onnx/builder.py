"""Emits wave ops into one block, folding every op whose operands are all compile-time constants.

A tensor during import is a ``Value``: either an ``SSAValue`` of a float32 wave tensor (a runtime value of
one session) or a ``Static`` (a numpy array known at compile time: an initializer, a Constant, shape
arithmetic, or anything computed from those). Builder methods accept both; when every operand is
static they compute the result with the numpy kernels of wavec.analysis.wave_eval and return a
``Static``, so constant subgraphs (Silero slicing and concatenating its LSTM weights) become one new
weight instead of runtime ops. A static operand of a runtime op becomes a ``wave.weight``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from wavec.analysis import wave_eval
from wavec.dialects import wave
from wavec.opcodes import Expr, eval_expr, parse_expr


@dataclass(eq=False)
class Static:
    """A compile-time tensor (any numpy dtype). ``weight`` is the name it has in the weight blob once
    an op reads it at runtime: the initializer's name, or one the builder makes up on first use."""

    array: np.ndarray
    weight: str | None = None
    hint: str = "const"  # the suffix of a made-up weight name ("<node>.<hint>")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)


Value = SSAValue | Static


def shape(v: Value) -> tuple[int, ...]:
    return v.shape if isinstance(v, Static) else wave.shape_of(v)


def const_literal(v: float) -> Expr:
    return Expr("const", float(np.float32(v)))


_IDENTITY_RIGHT = {"add": 0.0, "sub": 0.0, "mul": 1.0, "div": 1.0}
_IDENTITY_LEFT = {"add": 0.0, "mul": 1.0}


def simplify(expr: Expr) -> Expr:
    """Folds calls over literals and drops identities (x + 0, x * 1, x / 1): an absent bias or
    initial state enters as a literal 0 and should cost nothing. x * 0 stays (NaN and inf)."""
    if expr.kind != "call":
        return expr
    args = tuple(simplify(a) for a in expr.args)
    if all(a.kind == "const" for a in args):
        return const_literal(float(eval_expr(Expr("call", expr.value, args), [])))
    if len(args) == 2:
        a, b = args
        if b.kind == "const" and _IDENTITY_RIGHT.get(str(expr.value)) == b.value:
            return a
        if a.kind == "const" and _IDENTITY_LEFT.get(str(expr.value)) == a.value:
            return b
    return Expr("call", expr.value, args)


@dataclass
class Builder:
    """Appends wave ops to ``block``; ``weights`` collects the float32 arrays of every wave.weight.

    ``where`` names the ONNX node being lowered; made-up weight names start with it."""

    block: Block
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    where: str = "graph"
    _weight_values: dict[int, tuple[Static, SSAValue]] = field(default_factory=dict)  # id -> (kept alive, value)

    # -- operands -------------------------------------------------------------------------

    def append(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def fresh_weight_name(self, hint: str = "const") -> str:
        base = f"{self.where}.{hint}"
        name, i = base, 1
        while name in self.weights:
            name, i = f"{base}{i}", i + 1
        return name

    def operand(self, v: Value, hint: str = "const") -> SSAValue:
        """The SSA value of ``v``: a Static becomes (or reuses) a wave.weight of its float32 bytes."""
        if not isinstance(v, Static):
            return v
        if id(v) not in self._weight_values:
            if v.weight is None or v.weight in self.weights:
                v.weight = self.fresh_weight_name(v.hint if v.hint != "const" else hint)
            self.weights[v.weight] = np.ascontiguousarray(v.array, np.float32)
            self._weight_values[id(v)] = (v, self.append(wave.WeightOp(v.weight, v.shape)))
        return self._weight_values[id(v)][1]

    def _fold_or_emit(
        self, args: Sequence[Value], fold: Callable[..., np.ndarray], emit: Callable[..., Operation]
    ) -> Value:
        if all(isinstance(a, Static) for a in args):
            return Static(fold(*[np.asarray(a.array, np.float32) for a in args]))  # type: ignore[union-attr]
        return self.append(emit(*[self.operand(a) for a in args]))

    # -- compute ops ----------------------------------------------------------------------

    def ewise(self, expr: str | Expr, args: Sequence[Value], out_shape: Sequence[int] | None = None) -> Value:
        """``expr`` over ``args`` (broadcast). Single-element statics are inlined as literals, so
        ``Add(x, 0.5)`` is one op reading one tensor; what is left is renumbered %0, %1, ..."""
        tree = parse_expr(expr) if isinstance(expr, str) else expr
        if out_shape is None:
            out_shape = wave.broadcast_shapes([shape(a) for a in args])
            if out_shape is None:
                raise ValueError(f"shapes {[list(shape(a)) for a in args]} do not broadcast")
        mapping: dict[int, Expr] = {}
        kept: list[Value] = []
        for i, a in enumerate(args):
            if i not in tree.inputs():
                continue
            if isinstance(a, Static) and a.array.size == 1 and a.array.dtype.kind in "biuf":
                mapping[i] = const_literal(a.array.reshape(()).astype(np.float32))
            else:
                mapping[i] = Expr("input", len(kept))
                kept.append(a)
        tree = simplify(tree.substitute(mapping) if mapping else tree)
        if str(tree) == "%0" and shape(kept[0]) == tuple(out_shape):
            return kept[0]
        if not kept and tree.inputs() == set() and mapping:
            # Every operand was a literal: fold (a constant-fill with no operands at all stays an op).
            return Static(wave_eval.ewise(str(tree), [], out_shape))
        if kept and all(isinstance(a, Static) for a in kept):
            return Static(wave_eval.ewise(str(tree), [np.asarray(a.array, np.float32) for a in kept], out_shape))
        return self.append(wave.EwiseOp(str(tree), [self.operand(a) for a in kept], out_shape))

    def fill(self, value: float, out_shape: Sequence[int]) -> SSAValue:
        """A constant tensor made on the device (``wave.ewise "v" ()``): no weight bytes to read."""
        return self.append(wave.EwiseOp(str(const_literal(value)), [], out_shape))

    def matmul(self, a: Value, b: Value) -> Value:
        sa, sb = shape(a), shape(b)
        out = (*wave.broadcast_shapes([sa[:-2], sb[:-2]]), sa[-2], sb[-1])
        return self._fold_or_emit([a, b], wave_eval.matmul, lambda x, y: wave.MatmulOp(x, y, out))

    def conv(self, x: Value, w: Value, bias: Value | None, strides, pads, dilations, group: int) -> Value:
        sx, sw = shape(x), shape(w)
        nsp = len(sw) - 2
        sp = [wave.conv_out_size(sx[-nsp + i], sw[2 + i], strides[i], dilations[i], pads[i] + pads[nsp + i]) for i in range(nsp)]
        out = (*sx[: -nsp - 1], sw[0], *sp)
        args = [x, w] if bias is None else [x, w, bias]
        return self._fold_or_emit(
            args,
            lambda x_, w_, b_=None: wave_eval.conv(x_, w_, b_, strides, pads, dilations, group),
            lambda x_, w_, b_=None: wave.ConvOp(x_, w_, b_, out, strides, pads, dilations, group),
        )

    def reduce(self, kind: str, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
        sx = shape(x)
        axes = sorted(int(a) % len(sx) for a in axes) if sx else []
        out = [1 if i in axes else d for i, d in enumerate(sx) if keepdims or i not in axes]
        return self._fold_or_emit(
            [x],
            lambda a: wave_eval.reduce(kind, a, axes, keepdims),
            lambda a: wave.ReduceOp(kind, a, axes, keepdims, out),
        )

    def concat(self, xs: Sequence[Value], axis: int) -> Value:
        if len(xs) == 1:
            return xs[0]
        ref = shape(xs[0])
        axis %= len(ref)
        out = list(ref)
        out[axis] = sum(shape(v)[axis] for v in xs)
        if all(isinstance(v, Static) for v in xs):
            return Static(wave_eval.concat([v.array for v in xs], axis))  # type: ignore[union-attr]
        return self.append(wave.ConcatOp([self.operand(v) for v in xs], axis, out))

    def slice(self, x: Value, starts: Sequence[int], steps: Sequence[int], sizes: Sequence[int]) -> Value:
        """result[i] = x[starts + i * steps] per axis, ``sizes`` elements. Whole-tensor views are x itself."""
        sx = shape(x)
        if all(s == 0 and st == 1 and n == d for s, st, n, d in zip(starts, steps, sizes, sx)):
            return x
        if isinstance(x, Static):
            return Static(wave_eval.slice_(x.array, starts, steps, sizes).astype(x.array.dtype))
        return self.append(wave.SliceOp(x, starts, steps, sizes))

    def slice_axis(self, x: Value, axis: int, start: int, size: int, step: int = 1) -> Value:
        sx = shape(x)
        starts, steps, sizes = [0] * len(sx), [1] * len(sx), list(sx)
        starts[axis], steps[axis], sizes[axis] = start, step, size
        return self.slice(x, starts, steps, sizes)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = [int(p) for p in perm]
        if perm == sorted(perm):
            return x
        if isinstance(x, Static):
            return Static(np.ascontiguousarray(np.transpose(x.array, perm)))
        return self.append(wave.TransposeOp(x, perm))

    def reshape(self, x: Value, out_shape: Sequence[int]) -> Value:
        """A reshape of a reshape reads the original (row-major order is all a reshape keeps)."""
        out_shape = tuple(int(d) for d in out_shape)
        if isinstance(x, SSAValue) and isinstance(x.owner, wave.ReshapeOp):
            x = x.owner.x
        if shape(x) == out_shape:
            return x
        if isinstance(x, Static):
            return Static(x.array.reshape(out_shape), None)
        return self.append(wave.ReshapeOp(x, out_shape))

    def named(self, v: Value, hint: str) -> Value:
        """Gives a computed constant a readable weight name suffix (``<node>.W_t``)."""
        if isinstance(v, Static) and v.weight is None:
            v.hint = hint
        return v
