"""Reductions -> wave.reduce; Softmax / LogSoftmax -> max, exp, sum as reduce + ewise.

Axes are an attribute before opset 18 (ReduceSum: 13) and an optional input after; no axes means
all axes unless ``noop_with_empty_axes`` is set.
"""

from __future__ import annotations

import numpy as np

from wavec.frontends.onnx.lowering import LowerCtx, Value, lowering, shape

REDUCE_KINDS = {
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
    "ReduceSumSquare": "sumsquare",
    "ReduceL1": "l1",
    "ReduceL2": "l2",
    "ReduceLogSumExp": "logsumexp",
    "ReduceLogSum": "sum",  # then log
}


@lowering(*REDUCE_KINDS)
def lower_reduce(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    op = ctx.node.op_type
    x, rank = inputs[0], len(shape(inputs[0]))
    axes_since_input = 13 if op == "ReduceSum" else 18
    if ctx.opset < axes_since_input:
        axes = ctx.attr("axes")
    else:
        axes = ctx.static_ints(inputs[1], "axes") if len(inputs) > 1 and inputs[1] is not None else None
    keepdims = bool(ctx.attr("keepdims", 1))
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    y = ctx.b.reduce(REDUCE_KINDS[op], x, [ctx.axis(a, rank) for a in axes], keepdims)
    return [ctx.b.ewise("log(%0)", [y]) if op == "ReduceLogSum" else y]


@lowering("Softmax", "LogSoftmax")
def lower_softmax(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Before opset 13 the input is coerced to 2-D at ``axis`` (default 1) and normalized over the
    flattened tail; from 13 over the single ``axis`` (default -1). Max-subtracted for range."""
    x, sx, b = inputs[0], shape(inputs[0]), ctx.b
    if ctx.opset < 13:
        axis = ctx.axis(ctx.attr("axis", 1), len(sx))
        x2 = b.reshape(x, [int(np.prod(sx[:axis], dtype=np.int64)), int(np.prod(sx[axis:], dtype=np.int64))])
        red = 1
    else:
        x2, red = x, ctx.axis(ctx.attr("axis", -1), len(sx))
    m = b.reduce("max", x2, [red], True)
    e = b.ewise("exp(sub(%0, %1))", [x2, m])
    s = b.reduce("sum", e, [red], True)
    if ctx.node.op_type == "Softmax":
        y = b.ewise("div(%0, %1)", [e, s])
    else:
        y = b.ewise("sub(sub(%0, %1), log(%2))", [x2, m, s])
    return [b.reshape(y, sx)]
