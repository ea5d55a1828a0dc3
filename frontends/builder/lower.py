"""Builder record -> `wave` dialect: each high-level node becomes a few wave ops.

Only the existing wave ops are used (ewise, matmul, conv, reduce, concat, slice, transpose, reshape),
through the ONNX frontend's ``Builder`` (frontends/onnx/builder.py: constants fold, a small constant
operand becomes a literal or a ``wave.weight``). How the high-level ops map:
- softmax: max, exp(x - max), sum, divide; layer/rms norm: reduce then one ewise;
- rope: two ewise over the halves computing cos/sin(pos * inv_freq) in place, then a concat;
- conv1d: concat(context, x) -> wave.conv (no padding) -> new context = the tail slice;
- conv_transpose1d: x^T @ w as [T, C_out*K], then overlap-add of the K/stride shifted blocks plus the
  carried tail; the first T*stride positions are the output, the rest the next tail;
- lstm/gru cells: x W and h R as wave.matmul, the gates as ewise over slices;
- ssm_step: decay and input terms as ewise with broadcasting, y = h' @ c as a batched matmul;
- ring_write: select(eq(iota, fmod(pos, C)), new, cache); attention: q K^T per kv head group as a
  batched matmul of two runtime operands, a mask select(le(iota, pos), s, -1e30), softmax, @ V.
Weights keep their specs (wavec.weights.RandomWeight, ConstantWeight) in the blob; nothing is
materialized here: the interpreter and the CUDA runtime generate them where they run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region

from wavec.dialects import wave
from wavec.errors import BuilderError
from wavec.frontends.builder.model import Model, Node, Tensor
from wavec.frontends.onnx.builder import Builder, Static, Value, shape

NEG_INF = -1e30  # a masked attention score: exp(NEG_INF - max) is exactly 0 in float32

WAVE_EXPR = {
    "add": "add(%0, %1)", "sub": "sub(%0, %1)", "mul": "mul(%0, %1)", "div": "div(%0, %1)",
    "maximum": "max(%0, %1)", "minimum": "min(%0, %1)", "pow": "pow(%0, %1)",
    "lt": "lt(%0, %1)", "le": "le(%0, %1)", "gt": "gt(%0, %1)", "ge": "ge(%0, %1)", "eq": "eq(%0, %1)",
    "swiglu": "mul(mul(%0, sigmoid(%0)), %1)",
    "neg": "neg(%0)", "abs": "abs(%0)", "exp": "exp(%0)", "log": "log(%0)", "sqrt": "sqrt(%0)",
    "rsqrt": "reciprocal(sqrt(%0))", "square": "mul(%0, %0)", "tanh": "tanh(%0)", "sigmoid": "sigmoid(%0)",
    "relu": "relu(%0)", "silu": "mul(%0, sigmoid(%0))",
    "gelu": "mul(mul(0.5, %0), add(1.0, tanh(mul(0.7978845608028654, add(%0, mul(0.044715, mul(%0, mul(%0, %0))))))))",
    "softplus": "softplus(%0)", "sin": "sin(%0)", "cos": "cos(%0)",
    "where": "select(%0, %1, %2)",
}


@dataclass
class BuiltGraph:
    """What wavec.driver.compile_graph takes."""

    module: ModuleOp
    weights: dict  # name -> float32 array or a wavec.weights spec
    name: str
    bindings: dict


def _zeros(*shape: int) -> Static:
    """Overlap-add padding as a compile-time constant: a wave.weight, not an activation every beat
    recomputes (a shared activation would sit outside the session-major arena regions)."""
    return Static(np.zeros(shape, np.float32), hint="zeros")


def _drop_dead_ops(block: Block) -> None:
    """Removes compute ops and weights nothing reads (reshapes a later reshape bypassed). Inputs and
    states stay: they are the session's interface."""
    keep = (wave.OutputOp, wave.StateWriteOp, wave.InputOp, wave.StateOp, func.ReturnOp)
    for op in reversed(list(block.ops)):
        if not isinstance(op, keep) and all(not r.uses for r in op.results):
            block.erase_op(op)


def _live_nodes(model: Model) -> set[int]:
    roots = [t for t, _ in model.outputs.values()] + [t for t, _ in model.state_writes.values()]
    live: set[int] = set()
    stack = [t.node for t in roots]
    while stack:
        n = stack.pop()
        if n.id in live:
            continue
        live.add(n.id)
        stack.extend(t.node for t in n.inputs)
    return live


class _Lowering:
    def __init__(self, model: Model):
        self.model = model
        self.b = Builder(Block())
        self.values: dict[tuple[int, int], Value] = {}
        self.constants: dict[str, Static] = {}  # made-up constants by name, one wave.weight each
        # Reserve every declared name so made-up constant names never take one.
        for name in [*model.weights, *model.states]:
            self.b.weights[name] = None

    def constant(self, name: str, make) -> Static:
        """The shared constant ``name`` (``make()`` gives its float32 array on first use)."""
        if name not in self.constants:
            self.constants[name] = Static(np.asarray(make(), np.float32), weight=name)
        return self.constants[name]

    def iota(self, n: int, rank: int) -> Static:
        """[0, 1, ..., n-1] along the first of ``rank`` axes."""
        return self.constant(f"const.iota{n}" + "x1" * (rank - 1),
                             lambda: np.arange(n).reshape((n,) + (1,) * (rank - 1)))

    def v(self, t: Tensor) -> Value:
        return self.values[(t.node.id, t.index)]

    def run(self) -> BuiltGraph:
        m = self.model
        live = _live_nodes(m)
        for node in m.nodes:
            if node.id not in live and node.kind not in ("input", "state"):
                continue
            self.b.where = f"{node.kind}{node.id}"
            try:
                outs = getattr(self, f"lower_{node.kind}")(node, [self.v(t) for t in node.inputs], node.attrs)
            except BuilderError:
                raise
            except Exception as e:  # noqa: BLE001  (name the user's line of the node that broke)
                raise BuilderError(f"{node.where}: {node.kind}: lowering to wave failed ({type(e).__name__}: {e})") from e
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for i, (o, want) in enumerate(zip(outs, node.shapes)):
                assert shape(o) == want, f"{node.kind}: lowered to {shape(o)}, recorded {want}"
                self.values[(node.id, i)] = o
        b = self.b
        b.where = "output"
        for name, (t, _) in m.state_writes.items():
            b.append(wave.StateWriteOp(name, b.operand(self.v(t), hint=name)))
        for name, (t, _) in m.outputs.items():
            b.append(wave.OutputOp(name, b.operand(self.v(t), hint=name)))
        b.append(func.ReturnOp())
        _drop_dead_ops(b.block)
        used = {op.sym for op in b.block.ops if isinstance(op, (wave.WeightOp, wave.StateOp))}
        weights = {k: v for k, v in b.weights.items() if v is not None and k in used}
        module = ModuleOp([func.FuncOp(m.name, ([], []), Region([b.block]))])
        return BuiltGraph(module, weights, m.name, {})

    # -- sources ---------------------------------------------------------------------------------

    def lower_input(self, node: Node, ins, attrs):
        return self.b.append(wave.InputOp(attrs["name"], node.shapes[0]))

    def lower_weight(self, node: Node, ins, attrs):
        name = attrs["name"]
        decl = self.model.weights[name]
        self.b.weights[name] = decl.value
        return self.b.append(wave.WeightOp(name, node.shapes[0], decl.dtype))

    def lower_state(self, node: Node, ins, attrs):
        name = attrs["name"]
        self.b.weights[name] = self.model.states[name].value
        return self.b.append(wave.StateOp(name, node.shapes[0]))

    def lower_const(self, node: Node, ins, attrs):
        return Static(attrs["value"], hint="const")

    # -- generic ops -----------------------------------------------------------------------------

    def lower_ewise(self, node: Node, ins, attrs):
        return self.b.ewise(WAVE_EXPR[attrs["fn"]], ins, node.shapes[0])

    def lower_matmul(self, node: Node, ins, attrs):
        b = self.b
        a, w = ins
        sa, sw = shape(a), shape(w)
        if len(sa) == 1:
            a = b.reshape(a, (1, sa[0]))
        # Two runtime operands get the same rank, so the cohort axis lines up with the batch axes.
        ra, rw = len(shape(a)), len(shape(w))
        if not isinstance(a, Static) and not isinstance(w, Static) and ra != rw:
            if ra < rw:
                a = b.reshape(a, (1,) * (rw - ra) + shape(a))
            else:
                w = b.reshape(w, (1,) * (ra - rw) + shape(w))
        return b.reshape(b.matmul(a, w), node.shapes[0])

    def lower_reduce(self, node: Node, ins, attrs):
        return self.b.reduce(attrs["kind"], ins[0], attrs["axes"], attrs["keepdims"])

    def softmax(self, x: Value, axis: int) -> Value:
        b = self.b
        mx = b.reduce("max", x, [axis], True)
        e = b.ewise("exp(sub(%0, %1))", [x, mx])
        return b.ewise("div(%0, %1)", [e, b.reduce("sum", e, [axis], True)])

    def lower_softmax(self, node: Node, ins, attrs):
        return self.softmax(ins[0], attrs["axis"])

    def lower_layer_norm(self, node: Node, ins, attrs):
        b = self.b
        x, g, beta = ins
        d = shape(x)[-1]
        xc = b.ewise("sub(%0, %1)", [x, b.reduce("mean", x, [-1], True)])
        ss = b.reduce("sumsquare", xc, [-1], True)
        expr = f"add(mul(mul(%0, reciprocal(sqrt(add(mul(%1, {1.0 / d!r}), {attrs['eps']!r})))), %2), %3)"
        return b.ewise(expr, [xc, ss, g, beta])

    def lower_rms_norm(self, node: Node, ins, attrs):
        b = self.b
        x, g = ins
        d = shape(x)[-1]
        ss = b.reduce("sumsquare", x, [-1], True)
        return b.ewise(f"mul(mul(%0, reciprocal(sqrt(add(mul(%1, {1.0 / d!r}), {attrs['eps']!r})))), %2)", [x, ss, g])

    def lower_rope(self, node: Node, ins, attrs):
        b = self.b
        x, pos = ins
        s = shape(x)
        half = s[-1] // 2
        inv = self.constant(f"const.rope{s[-1]}_base{attrs['base']:g}",
                            lambda: attrs["base"] ** (-np.arange(half, dtype=np.float64) * 2.0 / s[-1]))
        x1 = b.slice_axis(x, len(s) - 1, 0, half)
        x2 = b.slice_axis(x, len(s) - 1, half, half)
        y1 = b.ewise("sub(mul(%0, cos(mul(%2, %3))), mul(%1, sin(mul(%2, %3))))", [x1, x2, pos, inv])
        y2 = b.ewise("add(mul(%1, cos(mul(%2, %3))), mul(%0, sin(mul(%2, %3))))", [x1, x2, pos, inv])
        return b.concat([y1, y2], len(s) - 1)

    def lower_concat(self, node: Node, ins, attrs):
        return self.b.concat(ins, attrs["axis"])

    def lower_slice(self, node: Node, ins, attrs):
        return self.b.slice_axis(ins[0], attrs["axis"], attrs["start"], node.shapes[0][attrs["axis"]], attrs["step"])

    def lower_reshape(self, node: Node, ins, attrs):
        return self.b.reshape(ins[0], node.shapes[0])

    def lower_transpose(self, node: Node, ins, attrs):
        return self.b.transpose(ins[0], attrs["perm"])

    # -- streaming and sequence ops --------------------------------------------------------------

    def lower_conv1d(self, node: Node, ins, attrs):
        b = self.b
        x, w = ins[0], ins[1]
        bias = ins[2] if attrs["bias"] else None
        if not attrs.get("context"):
            return b.conv(x, w, bias, [1], [0, 0], [attrs["dilation"]], attrs["groups"])
        ctx = ins[-1]
        n_ctx, t = shape(ctx)[1], shape(x)[1]
        full = b.concat([ctx, x], 1)
        y = b.conv(full, w, bias, [1], [0, 0], [attrs["dilation"]], attrs["groups"])
        return [y, b.slice_axis(full, 1, t, n_ctx)]

    def lower_conv_transpose1d(self, node: Node, ins, attrs):
        b = self.b
        x, w = ins[0], ins[1]
        bias = ins[2] if attrs["bias"] else None
        c_in, t = shape(x)
        _, c_out, k = shape(w)
        stride = attrs["stride"]
        m = -(-k // stride)  # blocks of `stride` positions each frame touches
        contrib = b.matmul(b.transpose(x, [1, 0]), b.reshape(w, (c_in, c_out * k)))  # [T, C_out*K]
        contrib = b.reshape(contrib, (t, c_out, k))
        if m * stride != k:
            contrib = b.concat([contrib, _zeros(t, c_out, m * stride - k)], 2)
        blocks = b.reshape(b.transpose(b.reshape(contrib, (t, c_out, m, stride)), [1, 2, 0, 3]), (c_out, m, t * stride))
        if k == m * stride and (m > 1 or not attrs.get("tail")):
            return self._overlap_add_chunks(blocks, ins[-1] if attrs.get("tail") else None, bias, t, m, stride)
        span = (t + m - 1) * stride
        full = None
        for j in range(m):
            part = b.reshape(b.slice_axis(blocks, 1, j, 1), (c_out, t * stride))
            pieces = ([_zeros(c_out, j * stride)] if j else []) + [part]
            if m - 1 - j:
                pieces.append(_zeros(c_out, (m - 1 - j) * stride))
            shifted = b.concat(pieces, 1)
            full = shifted if full is None else b.ewise("add(%0, %1)", [full, shifted])
        tail_len = k - stride
        if attrs.get("tail"):
            tail = ins[-1]
            full = b.ewise("add(%0, %1)", [full, b.concat([tail, _zeros(c_out, span - tail_len)], 1)])
        y = b.slice_axis(full, 1, 0, t * stride)
        if bias is not None:
            y = b.ewise("add(%0, %1)", [y, b.reshape(bias, (c_out, 1))])
        if not attrs.get("tail"):
            return y
        return [y, b.slice_axis(full, 1, t * stride, tail_len)]

    def _overlap_add_chunks(self, blocks: Value, tail: Value | None, bias: Value | None, t: int, m: int,
                            stride: int):
        """Overlap-add of ``blocks`` [C, m, t*stride] (block j lands ``j * stride`` later) and the carried
        ``tail`` [C, (m-1)*stride], one ``stride``-wide output chunk at a time: every term is a slice of
        this beat's tensors, so no zero padding is materialized. Returns y [C, t*stride] (plus the bias),
        and the next tail when one is carried."""
        b = self.b
        c_out = shape(blocks)[0]
        parts = [b.reshape(b.slice_axis(blocks, 1, j, 1), (c_out, t * stride)) for j in range(m)]
        chunks = []
        for c in range(t + m - 1):
            terms = [b.slice_axis(parts[j], 1, (c - j) * stride, stride) for j in range(m) if 0 <= c - j < t]
            if tail is not None and c < m - 1:
                terms.append(b.slice_axis(tail, 1, c * stride, stride))
            chunk = terms[0]
            for term in terms[1:]:
                chunk = b.ewise("add(%0, %1)", [chunk, term])
            chunks.append(chunk)
        y = b.concat(chunks[:t], 1) if t > 1 else chunks[0]
        if bias is not None:
            y = b.ewise("add(%0, %1)", [y, b.reshape(bias, (c_out, 1))])
        if tail is None:
            return y
        rest = chunks[t:]
        return [y, b.concat(rest, 1) if len(rest) > 1 else rest[0]]

    def _rows(self, v: Value) -> Value:
        """A [I] vector as a [1, I] row (cells and projections work on rows)."""
        s = shape(v)
        return self.b.reshape(v, (1, s[0])) if len(s) == 1 else v

    def lower_lstm_cell(self, node: Node, ins, attrs):
        b = self.b
        x, h, c, w, r, bias = ins
        hidden = shape(h)[-1]
        gates = b.ewise("add(add(%0, %1), %2)", [b.matmul(self._rows(x), w), b.matmul(self._rows(h), r), bias])
        i, f, g, o = (b.slice_axis(gates, 1, k * hidden, hidden) for k in range(4))
        c2 = b.ewise("add(mul(sigmoid(%0), %1), mul(sigmoid(%2), tanh(%3)))", [f, b.reshape(c, shape(i)), i, g])
        h2 = b.ewise("mul(sigmoid(%0), tanh(%1))", [o, c2])
        return [b.reshape(h2, node.shapes[0]), b.reshape(c2, node.shapes[1])]

    def lower_gru_cell(self, node: Node, ins, attrs):
        b = self.b
        x, h, w, r, bw, br = ins
        hidden = shape(h)[-1]
        xw = b.ewise("add(%0, %1)", [b.matmul(self._rows(x), w), bw])
        hr = b.ewise("add(%0, %1)", [b.matmul(self._rows(h), r), br])
        xr, xz, xn = (b.slice_axis(xw, 1, k * hidden, hidden) for k in range(3))
        hr_, hz, hn = (b.slice_axis(hr, 1, k * hidden, hidden) for k in range(3))
        n = b.ewise("tanh(add(%0, mul(sigmoid(add(%1, %2)), %3)))", [xn, xr, hr_, hn])
        h2 = b.ewise("add(mul(sub(1.0, sigmoid(add(%0, %1))), %2), mul(sigmoid(add(%0, %1)), %3))",
                     [xz, hz, n, b.reshape(h, shape(n))])
        return b.reshape(h2, node.shapes[0])

    def lower_ssm_step(self, node: Node, ins, attrs):
        b = self.b
        x, dt, a, bb, c, d, h = ins
        nh, p = shape(x)
        n = shape(h)[2]
        dt3 = b.reshape(dt, (nh, 1, 1))
        decay = b.ewise("exp(mul(%0, %1))", [dt3, b.reshape(a, (nh, 1, 1))])
        dtx = b.ewise("mul(%0, %1)", [dt3, b.reshape(x, (nh, p, 1))])
        h2 = b.ewise("add(mul(%0, %1), mul(%2, %3))", [decay, h, dtx, b.reshape(bb, (1, 1, n))])
        c3 = b.reshape(c, (1, n, 1))
        yc = b.reshape(b.matmul(h2, c3), (nh, p))
        y = b.ewise("add(%0, mul(%1, %2))", [yc, b.reshape(d, (nh, 1)), x])
        return [y, h2]

    def lower_ring_write(self, node: Node, ins, attrs):
        cache, new, pos = ins
        s = shape(cache)
        iota = self.iota(s[0], len(s))
        return self.b.ewise(f"select(eq(%0, fmod(%1, {float(s[0])!r})), %2, %3)", [iota, pos, new, cache], s)

    def lower_attention(self, node: Node, ins, attrs):
        b = self.b
        q, k, v = ins[:3]
        hq, dim = shape(q)
        cap, hkv, _ = shape(k)
        g = hq // hkv
        q3 = b.reshape(q, (hkv, g, dim))
        scores = b.matmul(q3, b.transpose(k, [1, 2, 0]))  # [Hkv, g, C]
        if attrs["masked"]:
            iota = self.iota(cap, 1)
            scores = b.ewise(f"select(le(%1, %2), mul(%0, {attrs['scale']!r}), {NEG_INF!r})", [scores, iota, ins[3]])
        else:
            scores = b.ewise(f"mul(%0, {attrs['scale']!r})", [scores])
        p = self.softmax(scores, 2)
        out = b.matmul(p, b.transpose(v, [1, 0, 2]))  # [Hkv, g, D]
        return b.reshape(out, (hq, dim))


def lower_model(model: Model) -> BuiltGraph:
    """The model's wave IR (one session, one beat) and weight blob. Raises BuilderError."""
    model.finish()
    graph = _Lowering(model).run()
    graph.module.verify()
    return graph


def ir_text(model: Model) -> str:
    """The wave IR as text, with a header line saying weights are not included."""
    graph = lower_model(model)
    n = model.parameter_count()
    return (f"// wave IR of {model.name} (wavec builder): one session, one beat. Weights are not included: "
            f"{len(model.weights)} weights ({n:,} parameters) are named only.\n" + str(graph.module) + "\n")

