"""Recurrent ONNX ops (LSTM, GRU, RNN) unrolled over their (static) time steps into wave ops.

Per direction: the input projection of all steps is one wave.matmul X [seq, batch, I] x W^T [I, G*H]
(W^T and the summed biases fold into new weights when W and B are constants); each step adds
H_{t-1} R^T (one wave.matmul), slices the gates and applies the cell equations as a couple of
wave.ewise ops. An absent initial state is a literal 0 in those expressions, so step 0 has no
recurrent matmul. Gate orders follow ONNX: LSTM i, o, f, c; GRU z, r, h.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from wavec.frontends.onnx.builder import Builder
from wavec.frontends.onnx.lowering import LowerCtx, Static, Value, lowering, shape

ZERO = Static(np.float32(0.0))

# Activations without parameters, as expression wrappers around "{}".
ACTIVATIONS = {
    "Sigmoid": "sigmoid({})",
    "Tanh": "tanh({})",
    "Relu": "relu({})",
    "Softsign": "div({0}, add(1.0, abs({0})))",
    "Softplus": "softplus({})",
}


def _activations(ctx: LowerCtx, defaults: list[str], directions: int) -> list[list[Callable[[str], str]]]:
    names = ctx.attr("activations") or defaults * directions
    names = [n.decode() if isinstance(n, bytes) else n for n in names]
    if ctx.attr("activation_alpha") or ctx.attr("activation_beta"):
        ctx.fail("activation_alpha/activation_beta are not supported", f"Use activations among {sorted(ACTIVATIONS)}")
    clip = ctx.attr("clip")
    wrappers = []
    for n in names:
        if n not in ACTIVATIONS:
            ctx.fail(f"activation {n!r} is not supported (only {', '.join(sorted(ACTIVATIONS))})")
        template = ACTIVATIONS[n]
        if clip is None:
            wrappers.append(lambda e, t=template: t.format(e))
        else:
            c = float(np.float32(clip))
            wrappers.append(lambda e, t=template, c=c: t.format(f"min(max({e}, {-c!r}), {c!r})"))
    per = len(defaults)
    if len(wrappers) != per * directions:
        ctx.fail(f"expected {per * directions} activations, got {len(wrappers)}")
    return [wrappers[d * per : (d + 1) * per] for d in range(directions)]


def _common(ctx: LowerCtx, inputs: list[Value | None], gates: int, defaults: list[str]):
    """Validates the shared attributes and returns (x [seq, batch, I], directions, hidden, activations,
    initial_h per direction or None, layout)."""
    direction = ctx.attr("direction", "forward")
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        ctx.fail(f"direction {direction!r} is not supported")
    if ctx.attr("input_forget", 0):
        ctx.fail("input_forget=1 (coupled input and forget gates) is not supported")
    layout = ctx.attr("layout", 0)
    x = inputs[0]
    if layout:
        x = ctx.b.transpose(x, [1, 0, 2])
    seq, batch, _ = shape(x)
    seq_lens = inputs[4] if len(inputs) > 4 else None
    if seq_lens is not None:
        lens = ctx.static_ints(seq_lens, "sequence_lens")
        if any(n != seq for n in lens):
            ctx.fail("sequence_lens shorter than the sequence are not supported", "Pad every sequence to the same length")
    hidden = shape(inputs[1])[1] // gates
    acts = _activations(ctx, defaults, len(dirs))
    return x, dirs, hidden, acts, layout, batch


def _per_direction(b: Builder, v: Value | None, d: int, layout: int, batch: int, hidden: int) -> Value:
    """initial_h / initial_c of direction d as [batch, H]; an absent one is the literal 0."""
    if v is None:
        return ZERO
    if layout:
        return b.reshape(b.slice_axis(v, 1, d, 1), [batch, hidden])
    return b.reshape(b.slice_axis(v, 0, d, 1), [batch, hidden])


def _weight_t(b: Builder, w: Value, d: int, name: str) -> Value:
    """W[d]^T: [rows, cols] of direction d, transposed (folds for constants)."""
    s = shape(w)
    return b.named(b.transpose(b.reshape(b.slice_axis(w, 0, d, 1), s[1:]), [1, 0]), f"{name}{d}_t")


def _project(b: Builder, x: Value, w: Value, biases: list[Value], d: int, recurrent: Value | None = None) -> Value:
    """X W[d]^T + sum of biases: the input side of every step at once, [seq, batch, G*H]. With ``recurrent``
    (a one-step sequence's H_0 R^T, [batch, G*H]) it is added too, after the biases: fusion then makes the sum
    the input matmul's epilogue, and the recurrent matmul, which reads only the initial state, no longer
    waits for X (one-session Silero: one matmul phase fewer between its encoder and its cell)."""
    bias = b.named(b.ewise("add(%0, %1)", biases), f"bias{d}")
    if recurrent is not None:
        bias = b.ewise("add(%0, %1)", [recurrent, bias])
    return b.ewise("add(%0, %1)", [b.matmul(x, _weight_t(b, w, d, "W")), bias])


def _step_input(b: Builder, xw: Value, t: int) -> Value:
    s = shape(xw)
    return b.reshape(b.slice_axis(xw, 0, t, 1), s[1:])


def _gate(b: Builder, v: Value, k: int, hidden: int) -> Value:
    return b.slice_axis(v, len(shape(v)) - 1, k * hidden, hidden)


def _stack_outputs(ctx: LowerCtx, ys: list[list[Value]], finals: list[list[Value]], layout: int) -> list[Value | None]:
    """Y [seq, dirs, batch, H] and one [dirs, batch, H] per final state (layout 1: batch first)."""
    b = ctx.b
    per_dir = []
    for steps in ys:
        per_dir.append(b.concat([b.reshape(h, [1, 1, *shape(h)]) for h in steps], 0))
    y = b.concat(per_dir, 1)
    outs: list[Value | None] = [b.transpose(y, [2, 0, 1, 3]) if layout else y]
    for states in finals:
        s = b.concat([b.reshape(h, [1, *shape(h)]) for h in states], 0)
        outs.append(b.transpose(s, [1, 0, 2]) if layout else s)
    return outs[: len(ctx.node.output)]


def _bias_slices(b: Builder, bias: Value | None, d: int, gates: int, hidden: int) -> tuple[Value, Value]:
    """(Wb, Rb) of direction d, each [G*H]; zeros literal when there is no bias."""
    if bias is None:
        return ZERO, ZERO
    row = b.reshape(b.slice_axis(bias, 0, d, 1), [2 * gates * hidden])
    return b.slice_axis(row, 0, 0, gates * hidden), b.slice_axis(row, 0, gates * hidden, gates * hidden)


@lowering("LSTM")
def lower_lstm(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value | None]:
    inputs = inputs + [None] * (8 - len(inputs))
    x, dirs, hidden, acts, layout, batch = _common(ctx, inputs, 4, ["Sigmoid", "Tanh", "Tanh"])
    w, r, bias, _, h0, c0, peep = inputs[1:8]
    b = ctx.b
    seq = shape(x)[0]
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):
        f, g, hact = acts[d]
        rt = _weight_t(b, r, d, "R")
        h = _per_direction(b, h0, d, layout, batch, hidden)
        recurrent = b.matmul(h, rt) if seq == 1 and h is not ZERO else None
        xw = _project(b, x, w, list(_bias_slices(b, bias, d, 4, hidden)), d, recurrent)
        c = _per_direction(b, c0, d, layout, batch, hidden)
        # Without peepholes the p * C terms are left out (a literal 0 * C would keep NaN semantics).
        if peep is None:
            pi = po = pf = ZERO
        else:
            prow = b.reshape(b.slice_axis(peep, 0, d, 1), [3 * hidden])
            pi, po, pf = (b.slice_axis(prow, 0, k * hidden, hidden) for k in range(3))
        steps: list[Value] = [ZERO] * seq
        for t in (reversed(range(seq)) if reverse else range(seq)):
            gates = _step_input(b, xw, t)
            if h is not ZERO and recurrent is None:
                gates = b.ewise("add(%0, %1)", [gates, b.matmul(h, rt)])
            gi, go, gf, gc = (_gate(b, gates, k, hidden) for k in range(4))
            # C_t = f(gf + pf C) C + f(gi + pi C) g(gc); H_t = f(go + po C_t) h(C_t).
            pre_i, pre_f, pre_o = ("%0", "%1", "%0") if peep is None else (
                "add(%0, mul(%4, %3))", "add(%1, mul(%5, %3))", "add(%0, mul(%2, %1))")
            c = b.ewise(
                f"add(mul({f(pre_f)}, %3), mul({f(pre_i)}, {g('%2')}))", [gi, gf, gc, c, pi, pf], (batch, hidden)
            )
            h = b.ewise(f"mul({f(pre_o)}, {hact('%1')})", [go, c, po], (batch, hidden))
            steps[t] = h
        ys.append(steps)
        hs.append(h)
        cs.append(c)
    return _stack_outputs(ctx, ys, [hs, cs], layout)


@lowering("GRU")
def lower_gru(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value | None]:
    inputs = inputs + [None] * (6 - len(inputs))
    x, dirs, hidden, acts, layout, batch = _common(ctx, inputs, 3, ["Sigmoid", "Tanh"])
    w, r, bias, _, h0 = inputs[1:6]
    before_reset = bool(ctx.attr("linear_before_reset", 0))
    b = ctx.b
    seq = shape(x)[0]
    ys, hs = [], []
    for d, reverse in enumerate(dirs):
        f, g = acts[d]
        wb, rb = _bias_slices(b, bias, d, 3, hidden)
        # z and r take both biases on the input side; Rbh stays with the recurrent term of the h gate.
        rb_zr = ZERO if rb is ZERO else b.concat([b.slice_axis(rb, 0, 0, 2 * hidden), Static(np.zeros(hidden, np.float32))], 0)
        rbh = ZERO if rb is ZERO else b.named(b.slice_axis(rb, 0, 2 * hidden, hidden), f"Rbh{d}")
        xw = _project(b, x, w, [wb, rb_zr], d)
        rt = _weight_t(b, r, d, "R")  # [H, 3H]
        rt_h = b.slice_axis(rt, 1, 2 * hidden, hidden)
        h = _per_direction(b, h0, d, layout, batch, hidden)
        steps: list[Value] = [ZERO] * seq
        for t in (reversed(range(seq)) if reverse else range(seq)):
            xt = _step_input(b, xw, t)
            xz, xr, xh = (_gate(b, xt, k, hidden) for k in range(3))
            hr_all = ZERO if h is ZERO else b.matmul(h, rt)
            hz, hr, hh = (ZERO, ZERO, ZERO) if h is ZERO else tuple(_gate(b, hr_all, k, hidden) for k in range(3))
            z = b.ewise(f("add(%0, %1)"), [xz, hz], (batch, hidden))
            rg = b.ewise(f("add(%0, %1)"), [xr, hr], (batch, hidden))
            if before_reset:
                cand = b.ewise(g("add(%0, mul(%1, add(%2, %3)))"), [xh, rg, hh, rbh], (batch, hidden))
            else:
                rh = ZERO if h is ZERO else b.matmul(b.ewise("mul(%0, %1)", [rg, h]), rt_h)
                cand = b.ewise(g("add(add(%0, %1), %2)"), [xh, rh, rbh], (batch, hidden))
            h = b.ewise("add(mul(sub(1.0, %0), %1), mul(%0, %2))", [z, cand, h], (batch, hidden))
            steps[t] = h
        ys.append(steps)
        hs.append(h)
    return _stack_outputs(ctx, ys, [hs], layout)


@lowering("RNN")
def lower_rnn(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value | None]:
    inputs = inputs + [None] * (6 - len(inputs))
    x, dirs, hidden, acts, layout, batch = _common(ctx, inputs, 1, ["Tanh"])
    w, r, bias, _, h0 = inputs[1:6]
    b = ctx.b
    seq = shape(x)[0]
    ys, hs = [], []
    for d, reverse in enumerate(dirs):
        (f,) = acts[d]
        xw = _project(b, x, w, list(_bias_slices(b, bias, d, 1, hidden)), d)
        rt = _weight_t(b, r, d, "R")
        h = _per_direction(b, h0, d, layout, batch, hidden)
        steps: list[Value] = [ZERO] * seq
        for t in (reversed(range(seq)) if reverse else range(seq)):
            xt = _step_input(b, xw, t)
            h = b.ewise(f("%0"), [xt], (batch, hidden)) if h is ZERO else b.ewise(f("add(%0, %1)"), [xt, b.matmul(h, rt)])
            steps[t] = h
        ys.append(steps)
        hs.append(h)
    return _stack_outputs(ctx, ys, [hs], layout)
