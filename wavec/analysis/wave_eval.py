"""A numpy evaluator of `wave` IR: the golden model for every later level.

``evaluate`` runs one beat of a ``func.func`` of wave ops with plain numpy float32, op by op in program
order, with the semantics documented in dialects/wave.py. It works on per-session IR and on IR that
carries the cohort axis (shapes come from the result types; numpy broadcasting does the rest).

The per-op kernels (``ewise``, ``conv``, ``reduce``, ``slice_``, ...) take numpy arrays and plain
parameters, so the ONNX frontend reuses them to fold wave ops whose operands are all constants.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from wavec.dialects import wave
from wavec.opcodes import eval_expr, parse_expr

F32 = np.float32


# --------------------------------------------------------------------------------------------
# Kernels: numpy arrays in, a float32 array out.


def ewise(expr: str, inputs: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """``expr`` (wavec/opcodes.py syntax) over float32 inputs broadcast to ``shape``."""
    value = eval_expr(parse_expr(expr), [np.asarray(x, F32) for x in inputs])
    return np.array(np.broadcast_to(np.asarray(value, F32), tuple(shape)), F32, order="C")  # rank 0 stays 0


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(F32), b.astype(F32)).astype(F32)


def conv(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    group: int,
) -> np.ndarray:
    """ONNX Conv. x [..., C_in, *spatial] (leading axes are batch), w [C_out, C_in/group, *kernel],
    bias [C_out] or None, pads [begin..., end...]. Returns [..., C_out, *out_spatial] float32."""
    nsp = w.ndim - 2
    lead = x.shape[: x.ndim - nsp - 1]
    c_in, sp = x.shape[-nsp - 1], x.shape[-nsp:]
    c_out, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    xb = x.reshape((-1, c_in, *sp)).astype(F32)
    xb = np.pad(xb, [(0, 0), (0, 0)] + [(pads[i], pads[nsp + i]) for i in range(nsp)])
    out_sp = [wave.conv_out_size(sp[i], kernel[i], strides[i], dilations[i], pads[i] + pads[nsp + i]) for i in range(nsp)]
    og = c_out // group
    # Sum over kernel positions of a strided window of x times that tap of w, group by group.
    xg = xb.reshape((xb.shape[0], group, cg, *xb.shape[2:]))
    wg = w.astype(F32).reshape((group, og, cg, *kernel))
    out = np.zeros((xb.shape[0], group, og, *out_sp), F32)
    for k in itertools.product(*(range(n) for n in kernel)):
        window = tuple(
            slice(k[i] * dilations[i], k[i] * dilations[i] + (out_sp[i] - 1) * strides[i] + 1, strides[i])
            for i in range(nsp)
        )
        xs = xg[(slice(None), slice(None), slice(None), *window)]  # [B, G, Cg, *out]
        tap = wg[(slice(None), slice(None), slice(None), *k)]  # [G, Og, Cg]
        out += np.einsum("bgc...,goc->bgo...", xs, tap).astype(F32)
    out = out.reshape((xb.shape[0], c_out, *out_sp))
    if bias is not None:
        out += bias.astype(F32).reshape((c_out,) + (1,) * nsp)
    return out.reshape((*lead, c_out, *out_sp)).astype(F32)


def reduce(kind: str, x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    """One of wavec.opcodes.REDUCE_KINDS over ``axes`` (non-negative); an empty reduction gives the identity."""
    ax = tuple(int(a) for a in axes)
    x = x.astype(F32)
    with np.errstate(all="ignore"):
        if kind == "sum":
            r = np.sum(x, axis=ax, keepdims=keepdims)
        elif kind == "mean":
            r = np.mean(x, axis=ax, keepdims=keepdims)
        elif kind == "max":
            r = np.max(x, axis=ax, keepdims=keepdims, initial=-np.inf)
        elif kind == "min":
            r = np.min(x, axis=ax, keepdims=keepdims, initial=np.inf)
        elif kind == "prod":
            r = np.prod(x, axis=ax, keepdims=keepdims)
        elif kind == "sumsquare":
            r = np.sum(x * x, axis=ax, keepdims=keepdims)
        elif kind == "l1":
            r = np.sum(np.abs(x), axis=ax, keepdims=keepdims)
        elif kind == "l2":
            r = np.sqrt(np.sum(x * x, axis=ax, keepdims=keepdims))
        elif kind == "logsumexp":
            m = np.max(x, axis=ax, keepdims=True, initial=-np.inf)
            m = np.where(np.isfinite(m), m, F32(0))
            r = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
            if not keepdims:
                r = np.squeeze(r, axis=ax)
        else:
            raise ValueError(f"unknown reduce kind {kind!r}")
    return np.asarray(r, F32)


def slice_(x: np.ndarray, starts: Sequence[int], steps: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """result[i] = x[starts + i * steps] per axis; ``shape`` gives the result's extents."""
    for axis, (s0, st, n) in enumerate(zip(starts, steps, shape)):
        x = np.take(x, s0 + st * np.arange(n, dtype=np.int64), axis=axis)
    return np.array(x, F32, order="C")


def concat(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
    return np.concatenate([np.asarray(x, F32) for x in xs], axis=axis)


def transpose(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    return np.array(np.transpose(x, tuple(perm)), F32, order="C")


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    return np.asarray(x, F32).reshape(tuple(shape))


# --------------------------------------------------------------------------------------------
# The beat: walk the function.


def _ints(attr) -> list[int]:
    return [int(v) for v in attr.get_values()]


def _compute(op: Operation, args: list[np.ndarray]) -> np.ndarray:
    """The value of one compute op given its operand values."""
    shape = wave.shape_of(op.results[0])
    if isinstance(op, wave.EwiseOp):
        return ewise(op.expr.data, args, shape)
    if isinstance(op, (wave.MatmulOp, wave.ConvOp)):
        n_extra = len(op.epilogue_inputs)
        own, extras = (args[: len(args) - n_extra], args[len(args) - n_extra :]) if n_extra else (args, [])
        if isinstance(op, wave.MatmulOp):
            a, b, pro_extras = own[0], own[1], own[2:]
            if op.prologue is not None:  # applied to each element of a as it is loaded
                a = ewise(op.prologue.data, [a, *pro_extras], a.shape)
            acc = matmul(a, b)
        else:
            bias = own[2] if len(own) > 2 else None
            acc = conv(own[0], own[1], bias, _ints(op.strides), _ints(op.pads), _ints(op.dilations), op.group.value.data)
        if op.epilogue is None:
            return acc
        return ewise(op.epilogue.data, [acc, *extras], shape)
    if isinstance(op, wave.ReduceOp):
        return reduce(op.kind.data, args[0], _ints(op.axes), op.keepdims.value.data)
    if isinstance(op, wave.ConcatOp):
        return concat(args, op.axis.value.data)
    if isinstance(op, wave.SliceOp):
        return slice_(args[0], _ints(op.starts), _ints(op.steps), shape)
    if isinstance(op, wave.TransposeOp):
        return transpose(args[0], _ints(op.perm))
    if isinstance(op, wave.ReshapeOp):
        return reshape(args[0], shape)
    raise ValueError(f"wave_eval: no numpy semantics for {op.name}")


def _body(func_or_module: func.FuncOp | ModuleOp) -> func.FuncOp:
    if isinstance(func_or_module, func.FuncOp):
        return func_or_module
    funcs = [op for op in func_or_module.walk() if isinstance(op, func.FuncOp)]
    if len(funcs) != 1:
        raise ValueError(f"wave_eval: expected one func.func in the module, found {len(funcs)}")
    return funcs[0]


def _fetch(table: Mapping[str, np.ndarray], what: str, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name not in table:
        raise KeyError(f"wave_eval: no value for {what} {name!r}")
    value = np.asarray(table[name], F32)
    if value.shape != shape:
        raise ValueError(f"wave_eval: {what} {name!r} has shape {list(value.shape)}, the IR expects {list(shape)}")
    return value


def evaluate(
    func_or_module: func.FuncOp | ModuleOp,
    inputs: Mapping[str, np.ndarray],
    states: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Runs one beat. ``inputs``, ``states``, ``weights`` are keyed by the names in wave.input,
    wave.state and wave.weight, with exactly the IR's shapes. Returns (outputs, new_states), float32,
    keyed by wave.output and wave.state_write names; a state that is not written keeps its value."""
    values: dict[SSAValue, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    new_states = {k: np.asarray(v, F32) for k, v in states.items()}
    for op in _body(func_or_module).body.block.ops:
        if isinstance(op, wave.InputOp):
            values[op.result] = _fetch(inputs, "input", op.sym, wave.shape_of(op.result))
        elif isinstance(op, wave.WeightOp):
            values[op.result] = _fetch(weights, "weight", op.sym, wave.shape_of(op.result))
        elif isinstance(op, wave.StateOp):
            values[op.result] = _fetch(states, "state", op.sym, wave.shape_of(op.result))
        elif isinstance(op, wave.StateWriteOp):
            new_states[op.sym] = values[op.value]
        elif isinstance(op, wave.OutputOp):
            outputs[op.sym] = values[op.value]
        elif isinstance(op, func.ReturnOp):
            break
        else:
            values[op.results[0]] = _compute(op, [values[v] for v in op.operands])
    return outputs, new_states
