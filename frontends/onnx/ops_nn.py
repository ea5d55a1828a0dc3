"""Contractions and convolutions: MatMul, Gemm -> wave.matmul (+ transpose, ewise epilogue);
Conv -> wave.conv with explicit pads; BatchNormalization (inference) -> one ewise; LayerNormalization ->
mean, deviation, sum of squares and one normalizing ewise (which wave-fuse may fold into a matmul's prologue).
"""

from __future__ import annotations

import numpy as np

from wavec.dialects import wave
from wavec.frontends.onnx.lowering import LowerCtx, Static, Value, lowering, shape


@lowering("MatMul")
def lower_matmul(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """numpy matmul; a 1-D operand gets a unit axis for wave.matmul (rank >= 2) that is dropped after."""
    a, b = inputs
    sa, sb = shape(a), shape(b)
    if not sa or not sb:
        ctx.fail("MatMul of a scalar is invalid")
    a2 = ctx.b.reshape(a, [1, *sa]) if len(sa) == 1 else a
    b2 = ctx.b.reshape(b, [*sb, 1]) if len(sb) == 1 else b
    y = ctx.b.matmul(a2, b2)
    out = list(shape(y))
    if len(sb) == 1:
        out.pop(-1)
    if len(sa) == 1:
        out.pop(-2 if len(sb) > 1 else -1)
    return [ctx.b.reshape(y, out)]


@lowering("Gemm")
def lower_gemm(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Y = alpha * A' B' + beta * C. Transposes of constants fold into new weights."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.attr("transA", 0):
        a = ctx.b.transpose(a, [1, 0])
    if ctx.attr("transB", 0):
        b = ctx.b.transpose(b, [1, 0])
    y = ctx.b.matmul(a, b)
    if alpha == 1.0 and (c is None or beta == 0.0):
        return [y]
    if c is None or beta == 0.0:
        return [ctx.b.ewise("mul(%0, %1)", [y, Static(np.float32(alpha))])]
    if isinstance(c, Static) and beta != 1.0:  # fold beta into the bias weight
        c, beta = Static(np.asarray(c.array, np.float32) * np.float32(beta)), 1.0
    return [ctx.b.ewise("add(mul(%0, %2), mul(%1, %3))", [y, c, Static(np.float32(alpha)), Static(np.float32(beta))],
                        np.broadcast_shapes(shape(y), shape(c)))]


def conv_pads(ctx: LowerCtx, in_sp, kernel, strides, dilations) -> list[int]:
    """Explicit [begin..., end...] pads from ``pads`` or ``auto_pad``."""
    nsp = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return [int(p) for p in (ctx.attr("pads") or [0] * (2 * nsp))]
    if auto == "VALID":
        return [0] * (2 * nsp)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.fail(f"auto_pad={auto!r} is not supported")
    begin, end = [], []
    for i in range(nsp):
        out = -(-in_sp[i] // max(strides[i], 1))  # a stride under 1 is reported by conv_fault
        total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sp[i], 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


@lowering("Conv")
def lower_conv(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    sw = shape(w)
    nsp = len(sw) - 2
    kernel = ctx.attr("kernel_shape") or sw[2:]
    if list(kernel) != list(sw[2:]):
        ctx.fail(f"kernel_shape {list(kernel)} disagrees with the weight shape {list(sw)}")
    strides = list(ctx.attr("strides") or [1] * nsp)
    dilations = list(ctx.attr("dilations") or [1] * nsp)
    in_sp = shape(x)[-nsp:]
    pads = conv_pads(ctx, in_sp, sw[2:], strides, dilations)
    # What onnxruntime refuses at load and the kernel would misread (a short bias read the next weight's values).
    fault = wave.conv_fault(shape(x), sw, None if bias is None else shape(bias), strides, pads, dilations,
                            int(ctx.attr("group", 1)))
    if fault:
        ctx.fail(fault, "ONNX Conv: W is [C_out, C_in / group, *kernel], the bias [C_out], strides and dilations "
                        "one value >= 1 per spatial axis, pads a begin and an end >= 0 for each")
    for i in range(nsp):
        padded = in_sp[i] + pads[i] + pads[nsp + i]
        span = (sw[2 + i] - 1) * dilations[i] + 1
        if padded < span:
            ctx.fail(
                f"spatial axis {i} of the input is {in_sp[i]} ({padded} padded), shorter than the dilated kernel ({span})",
                "Give a longer frame (--frame NAME=LEN) so every window fits",
            )
    return [ctx.b.conv(x, w, bias, strides, pads, dilations, int(ctx.attr("group", 1)))]


@lowering("BatchNormalization")
def lower_batchnorm(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Inference form: (x - mean) / sqrt(var + eps) * scale + bias, parameters along axis 1."""
    if ctx.attr("training_mode", 0) or len([o for o in ctx.node.output if o]) > 1:
        ctx.fail("training mode is not supported", "Export the model in eval mode")
    x, params = inputs[0], inputs[1:5]
    rank = len(shape(x))
    eps = float(ctx.attr("epsilon", 1e-5))
    per_channel = [ctx.b.reshape(p, [shape(p)[0]] + [1] * (rank - 2)) for p in params]
    expr = f"add(mul(div(sub(%0, %3), sqrt(add(%4, {float(np.float32(eps))!r}))), %1), %2)"
    return [ctx.b.ewise(expr, [x, *per_channel], shape(x))]


@lowering("LayerNormalization")
def lower_layernorm(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """(x - mean) * rsqrt(var + eps) * scale [+ bias] over the axes from ``axis`` on, in float32: the mean,
    d = x - mean (stored: the variance and the output both read it), the row sum of d * d, then one ewise
    per row for the reciprocal deviation and one for the output (wave-fuse joins them; when a matmul reads
    the output alone, the last becomes its prologue: d, the row sums and the scale fit its input slots).
    The optional Mean and InvStdDev outputs are the [..., 1, ..., 1] row values."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    sx = shape(x)
    rank = len(sx)
    axis = ctx.axis(int(ctx.attr("axis", -1)), rank)
    eps = float(np.float32(ctx.attr("epsilon", 1e-5)))
    axes = list(range(axis, rank))
    n = int(np.prod(sx[axis:], dtype=np.int64))
    b = ctx.b
    mean = b.reduce("mean", x, axes, True)
    d = b.ewise("sub(%0, %1)", [x, mean], sx)
    ssq = b.reduce("sumsquare", d, axes, True)
    inv_n = float(np.float32(1.0 / n)) if n else 0.0
    rstd = b.ewise(f"reciprocal(sqrt(add(mul(%0, {inv_n!r}), {eps!r})))", [ssq])
    if bias is None:
        y = b.ewise("mul(mul(%0, %1), %2)", [d, rstd, scale], sx)
    else:
        y = b.ewise("add(mul(mul(%0, %1), %2), %3)", [d, rstd, scale, bias], sx)
    wanted = [o for o in ctx.node.output]
    return [y, mean, rstd][: max(1, len(wanted))]
