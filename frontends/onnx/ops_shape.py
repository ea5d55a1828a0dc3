"""Data movement ONNX ops on runtime tensors -> wave.concat / slice / transpose / reshape (and an
ewise "%0" for broadcasts). Every shape, axis, index and pad must be a compile-time constant.
"""

from __future__ import annotations

import numpy as np

from wavec.frontends.onnx.lowering import LowerCtx, Static, Value, lowering, shape


def _axes_arg(ctx: LowerCtx, inputs: list[Value | None], index: int, since: int) -> list[int] | None:
    """Axes from the attribute (opset < ``since``) or from input ``index`` (opset >= ``since``)."""
    if ctx.opset < since:
        axes = ctx.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    v = inputs[index] if len(inputs) > index else None
    return None if v is None else ctx.static_ints(v, "axes")


@lowering("Concat")
def lower_concat(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    xs = [v for v in inputs if v is not None and 0 not in shape(v)]
    rank = len(shape(inputs[0]))
    return [ctx.b.concat(xs, ctx.axis(ctx.attr("axis"), rank))]


@lowering("Slice")
def lower_slice(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    x = inputs[0]
    sx = shape(x)
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        starts, ends = ctx.static_ints(inputs[1], "starts"), ctx.static_ints(inputs[2], "ends")
        axes = ctx.static_ints(inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else None
        steps = ctx.static_ints(inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None else None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    begin, step, size = [0] * len(sx), [1] * len(sx), list(sx)
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = ctx.axis(a, len(sx))
        if st == 0:
            ctx.fail("a slice step of 0 is invalid")
        # ONNX clamps starts/ends exactly as Python slices do.
        picked = range(*slice(int(s), int(e), int(st)).indices(sx[a]))
        begin[a], step[a], size[a] = (picked.start if len(picked) else 0), int(st), len(picked)
    return [ctx.b.slice(x, begin, step, size)]


@lowering("Transpose")
def lower_transpose(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    rank = len(shape(inputs[0]))
    perm = ctx.attr("perm") or list(reversed(range(rank)))
    return [ctx.b.transpose(inputs[0], perm)]


@lowering("Reshape")
def lower_reshape(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    x, sx = inputs[0], shape(inputs[0])
    target = ctx.attr("shape") if ctx.opset < 5 else ctx.static_ints(inputs[1], "shape")
    allowzero = ctx.attr("allowzero", 0)
    out = [sx[i] if d == 0 and not allowzero else int(d) for i, d in enumerate(target)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = int(np.prod(sx, dtype=np.int64)) // max(known, 1)
    if int(np.prod(out, dtype=np.int64)) != int(np.prod(sx, dtype=np.int64)):
        ctx.fail(f"cannot reshape {list(sx)} to {list(target)}")
    return [ctx.b.reshape(x, out)]


@lowering("Flatten")
def lower_flatten(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    sx = shape(inputs[0])
    axis = ctx.attr("axis", 1)
    axis = axis + len(sx) if axis < 0 else axis
    outer = int(np.prod(sx[:axis], dtype=np.int64))
    return [ctx.b.reshape(inputs[0], [outer, int(np.prod(sx[axis:], dtype=np.int64))])]


@lowering("Squeeze")
def lower_squeeze(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    sx = shape(inputs[0])
    axes = _axes_arg(ctx, inputs, 1, since=13)
    drop = {ctx.axis(a, len(sx)) for a in axes} if axes is not None else {i for i, d in enumerate(sx) if d == 1}
    return [ctx.b.reshape(inputs[0], [d for i, d in enumerate(sx) if i not in drop])]


@lowering("Unsqueeze")
def lower_unsqueeze(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    sx = shape(inputs[0])
    axes = _axes_arg(ctx, inputs, 1, since=13) or []
    rank = len(sx) + len(axes)
    new = {ctx.axis(a, rank) for a in axes}
    dims = iter(sx)
    return [ctx.b.reshape(inputs[0], [1 if i in new else next(dims) for i in range(rank)])]


@lowering("Expand")
def lower_expand(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    target = ctx.static_ints(inputs[1], "shape")
    out = np.broadcast_shapes(shape(inputs[0]), tuple(target))
    return [ctx.b.ewise("%0", inputs[:1], out)]


@lowering("Split")
def lower_split(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    x, sx = inputs[0], shape(inputs[0])
    axis = ctx.axis(ctx.attr("axis", 0), len(sx))
    n_out = len(ctx.node.output)
    if ctx.opset < 13:
        sizes = ctx.attr("split")
    else:
        sizes = ctx.static_ints(inputs[1], "split") if len(inputs) > 1 and inputs[1] is not None else None
    if sizes is None:
        # Equal parts; since opset 18 the last one may be smaller.
        part = -(-sx[axis] // n_out)
        sizes = [min(part, sx[axis] - i * part) for i in range(n_out)]
    outs, start = [], 0
    for n in sizes:
        outs.append(ctx.b.slice_axis(x, axis, start, int(n)))
        start += int(n)
    return outs


@lowering("Gather")
def lower_gather(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Gather with constant indices: one slice per index, concatenated, reshaped to the index shape."""
    x, sx = inputs[0], shape(inputs[0])
    idx = np.asarray(ctx.static(inputs[1], "indices")).astype(np.int64)
    axis = ctx.axis(ctx.attr("axis", 0), len(sx))
    flat = [int(i) % sx[axis] for i in idx.reshape(-1)]
    parts = [ctx.b.slice_axis(x, axis, i, 1) for i in flat]
    picked = ctx.b.concat(parts, axis) if parts else None
    if picked is None:
        ctx.fail("an empty Gather is not supported")
    return [ctx.b.reshape(picked, [*sx[:axis], *idx.shape, *sx[axis + 1:]])]


@lowering("Pad")
def lower_pad(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Pads axis by axis: a negative pad crops (slice); constant pads concatenate a device-side fill,
    reflect pads a reversed slice (negative step), edge pads a broadcast of the edge slice."""
    x, b = inputs[0], ctx.b
    rank = len(shape(x))
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.fail(f"pad mode {mode!r} is not supported (constant, reflect, edge)")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), ctx.attr("value", 0.0)
        axes = list(range(rank))
    else:
        pads = ctx.static_ints(inputs[1], "pads")
        value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else 0.0
        if isinstance(value, Static):
            value = float(value.array.reshape(-1)[0]) if value.array.size else 0.0
        axes_in = inputs[3] if len(inputs) > 3 else None
        axes = [ctx.axis(a, rank) for a in ctx.static_ints(axes_in, "axes")] if axes_in is not None else list(range(rank))
    n = len(axes)
    for k, axis in enumerate(axes):
        before, after = int(pads[k]), int(pads[n + k])
        size = shape(x)[axis]
        if before < 0 or after < 0:  # crop first
            lo, hi = max(-before, 0), max(-after, 0)
            x = b.slice_axis(x, axis, lo, size - lo - hi)
            size = shape(x)[axis]
            before, after = max(before, 0), max(after, 0)
        if before == after == 0:
            continue
        if mode == "reflect" and (before >= size or after >= size):
            ctx.fail(f"reflect pad {before}/{after} needs more than {size} elements along axis {axis}")

        def side(count: int, at_start: bool) -> Value:
            part_shape = list(shape(x))
            part_shape[axis] = count
            if mode == "constant":
                if isinstance(value, float):
                    return b.fill(value, part_shape)
                return b.ewise("%0", [b.reshape(value, [1] * rank) if shape(value) else value], part_shape)
            if mode == "edge":
                edge = b.slice_axis(x, axis, 0 if at_start else size - 1, 1)
                return b.ewise("%0", [edge], part_shape)
            # reflect: x[count], ..., x[1] before; x[size-2], ..., x[size-1-count] after.
            return b.slice_axis(x, axis, count if at_start else size - 2, count, step=-1)

        parts = ([side(before, True)] if before else []) + [x] + ([side(after, False)] if after else [])
        x = b.concat(parts, axis)
    return [x]
