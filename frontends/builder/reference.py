"""The independent reference: a builder Model evaluated node by node in float64 numpy, per session.

Every op is written here from its definition (the docstrings in model.py), not through the wave IR or
wavec.analysis.wave_eval: softmax is exp(x - max) / sum, attention loops over query heads and the
populated slots, a transposed convolution scatters each frame's taps, a causal convolution sums taps
over [context, x]. Weights are the same float32 values the compiler uses (random specs materialized,
bf16 ones rounded), promoted to float64.

    ref = Reference(model)
    outputs = ref.run({"x": frames}, reset)   # frames [beats, sessions, *shape]; reset [beats, sessions]
"""

from __future__ import annotations

import math

import numpy as np

from wavec.frontends.builder import init as winit
from wavec.frontends.builder.model import Model, Node

F64 = np.float64


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


EWISE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
    "lt": lambda a, b: (a < b).astype(F64), "le": lambda a, b: (a <= b).astype(F64),
    "gt": lambda a, b: (a > b).astype(F64), "ge": lambda a, b: (a >= b).astype(F64),
    "eq": lambda a, b: (a == b).astype(F64),
    "swiglu": lambda a, b: a * _sigmoid(a) * b,
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda a: 1.0 / np.sqrt(a), "square": np.square, "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda a: np.maximum(a, 0.0), "silu": lambda a: a * _sigmoid(a),
    "gelu": lambda a: 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3))),
    "softplus": lambda a: np.logaddexp(0.0, a), "sin": np.sin, "cos": np.cos,
    "where": lambda c, a, b: np.where(c != 0, a, b),
}


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def conv1d_causal(full: np.ndarray, w: np.ndarray, bias, dilation: int, groups: int, t: int) -> np.ndarray:
    """y[o, i] = bias[o] + sum_{c in o's group, k} w[o, c, k] full[c, i + k*dilation], i < t."""
    c_out, cg, k = w.shape
    og = c_out // groups
    y = np.zeros((c_out, t))
    for o in range(c_out):
        grp = o // og
        for kk in range(k):
            y[o] += w[o, :, kk] @ full[grp * cg:(grp + 1) * cg, kk * dilation: kk * dilation + t]
    return y if bias is None else y + bias[:, None]


class Reference:
    def __init__(self, model: Model):
        model.finish()
        self.model = model
        self.weights = {n: winit.materialize(d.value).astype(F64) for n, d in model.weights.items()}
        self.initial = {n: winit.materialize(d.value).astype(F64) for n, d in model.states.items()}

    def beat(self, frame: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> tuple[dict, dict]:
        """One session, one beat: (outputs, next state)."""
        vals: dict[tuple[int, int], np.ndarray] = {}
        for node in self.model.nodes:
            args = [vals[(t.node.id, t.index)] for t in node.inputs]
            outs = getattr(self, f"op_{node.kind}")(node, args, node.attrs, frame, state)
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for i, o in enumerate(outs):
                o = np.asarray(o, F64)
                assert o.shape == node.shapes[i], f"reference {node.kind} at {node.where}: {o.shape} != {node.shapes[i]}"
                vals[(node.id, i)] = o
        outputs = {n: vals[(t.node.id, t.index)] for n, (t, _) in self.model.outputs.items()}
        new_state = {n: vals[(t.node.id, t.index)] for n, (t, _) in self.model.state_writes.items()}
        return outputs, new_state

    def run(self, inputs: dict[str, np.ndarray], reset: np.ndarray) -> dict[str, np.ndarray]:
        """Beats x sessions: ``inputs[name]`` [beats, sessions, *shape]; ``reset[b, s]`` puts session s
        back to the initial state before beat b (every session starts there at beat 0).
        Returns each output [beats, sessions, *shape] float64."""
        beats, sessions = reset.shape
        states = [dict(self.initial) for _ in range(sessions)]
        result = {n: np.zeros((beats, sessions, *t.shape)) for n, (t, _) in self.model.outputs.items()}
        for bt in range(beats):
            for s in range(sessions):
                if reset[bt, s]:
                    states[s] = dict(self.initial)
                frame = {n: np.asarray(v[bt, s], F64) for n, v in inputs.items()}
                outs, states[s] = self.beat(frame, states[s])
                for n, o in outs.items():
                    result[n][bt, s] = o
        return result

    # -- sources ----------------------------------------------------------------------------------

    def op_input(self, node: Node, args, attrs, frame, state):
        return frame[attrs["name"]]

    def op_weight(self, node: Node, args, attrs, frame, state):
        return self.weights[attrs["name"]]

    def op_state(self, node: Node, args, attrs, frame, state):
        return state[attrs["name"]]

    def op_const(self, node: Node, args, attrs, frame, state):
        return attrs["value"].astype(F64)

    # -- generic ----------------------------------------------------------------------------------

    def op_ewise(self, node: Node, args, attrs, frame, state):
        with np.errstate(all="ignore"):
            return np.broadcast_to(EWISE[attrs["fn"]](*args), node.shapes[0])

    def op_matmul(self, node: Node, args, attrs, frame, state):
        return np.matmul(*args)

    def op_reduce(self, node: Node, args, attrs, frame, state):
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[attrs["kind"]]
        return fn(args[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"])

    def op_softmax(self, node: Node, args, attrs, frame, state):
        return softmax(args[0], attrs["axis"])

    def op_layer_norm(self, node: Node, args, attrs, frame, state):
        x, g, b = args
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + attrs["eps"]) * g + b

    def op_rms_norm(self, node: Node, args, attrs, frame, state):
        x, g = args
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + attrs["eps"]) * g

    def op_rope(self, node: Node, args, attrs, frame, state):
        x, pos = args
        d = x.shape[-1]
        freq = attrs["base"] ** (-2.0 * np.arange(d // 2) / d)
        angle = pos[0] * freq
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)], -1)

    def op_concat(self, node: Node, args, attrs, frame, state):
        return np.concatenate(args, attrs["axis"])

    def op_slice(self, node: Node, args, attrs, frame, state):
        index = [slice(None)] * args[0].ndim
        n = node.shapes[0][attrs["axis"]]
        index[attrs["axis"]] = slice(attrs["start"], attrs["start"] + n * attrs["step"], attrs["step"])
        return args[0][tuple(index)]

    def op_reshape(self, node: Node, args, attrs, frame, state):
        return args[0].reshape(node.shapes[0])

    def op_transpose(self, node: Node, args, attrs, frame, state):
        return np.transpose(args[0], attrs["perm"])

    # -- streaming and sequence ---------------------------------------------------------------------

    def op_conv1d(self, node: Node, args, attrs, frame, state):
        x, w = args[0], args[1]
        bias = args[2] if attrs["bias"] else None
        t = x.shape[1]
        if not attrs.get("context"):
            return conv1d_causal(x, w, bias, attrs["dilation"], attrs["groups"], t)
        full = np.concatenate([args[-1], x], 1)
        y = conv1d_causal(full, w, bias, attrs["dilation"], attrs["groups"], t)
        return [y, full[:, full.shape[1] - args[-1].shape[1]:]]

    def op_conv_transpose1d(self, node: Node, args, attrs, frame, state):
        x, w = args[0], args[1]
        c_in, t = x.shape
        _, c_out, k = w.shape
        s = attrs["stride"]
        out = np.zeros((c_out, t * s + k - s))
        for f in range(t):
            for kk in range(k):
                out[:, f * s + kk] += w[:, :, kk].T @ x[:, f]
        if attrs.get("tail"):
            out[:, : k - s] += args[-1]
        y = out[:, : t * s]
        if attrs["bias"]:
            y = y + args[2][:, None]
        return [y, out[:, t * s:]] if attrs.get("tail") else y

    def op_lstm_cell(self, node: Node, args, attrs, frame, state):
        x, h, c, w, r, b = args
        n = h.shape[-1]
        z = x @ w + h @ r + b
        i, f, g, o = (z[..., k * n:(k + 1) * n] for k in range(4))
        c2 = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return [_sigmoid(o) * np.tanh(c2), c2]

    def op_gru_cell(self, node: Node, args, attrs, frame, state):
        x, h, w, r, bw, br = args
        n = h.shape[-1]
        xw, hr = x @ w + bw, h @ r + br
        rg = _sigmoid(xw[..., :n] + hr[..., :n])
        zg = _sigmoid(xw[..., n:2 * n] + hr[..., n:2 * n])
        cand = np.tanh(xw[..., 2 * n:] + rg * hr[..., 2 * n:])
        return (1.0 - zg) * cand + zg * h

    def op_ssm_step(self, node: Node, args, attrs, frame, state):
        x, dt, a, b, c, d, h = args
        h2 = np.exp(dt * a)[:, None, None] * h + np.einsum("hp,n->hpn", dt[:, None] * x, b)
        return [np.einsum("hpn,n->hp", h2, c) + d[:, None] * x, h2]

    def op_ring_write(self, node: Node, args, attrs, frame, state):
        cache, new, pos = args
        out = cache.copy()
        out[int(round(pos[0])) % cache.shape[0]] = new
        return out

    def op_attention(self, node: Node, args, attrs, frame, state):
        q, k, v = args[:3]
        hq, _ = q.shape
        cap, hkv, _ = k.shape
        slots = np.arange(cap) if not attrs["masked"] else np.arange(min(cap, int(round(args[3][0])) + 1))
        out = np.zeros_like(q)
        for i in range(hq):
            kv = i // (hq // hkv)
            s = attrs["scale"] * (k[slots, kv] @ q[i])
            out[i] = softmax(s, 0) @ v[slots, kv]
        return out
