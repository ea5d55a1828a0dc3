"""PyTorch peers of builder models (wavec.zoo, frontends/builder): the same Model, batched over the cohort.

`TorchStep` evaluates a builder Model's nodes on a cohort at once, every per-session value carrying a leading
session axis S and every weight shared (no S axis), each op from its definition in model.py as
frontends/builder/reference.py writes it for one session in float64 numpy. It is the peer a user would write
instead of wavec: PyTorch eager (cuBLAS, cuDNN) over the whole cohort, one call per op, or the same step
captured once in a CUDA graph (`BuilderPeerBackend`, the serving backend bench/density.py drives, as
bench/silero_peers.TorchPeerBackend is for Silero). fp32 with TF32 off, as the kernel computes.

    step = TorchStep(model, sessions, device="cuda")
    outputs = step.beat({"x": frames}, reset)   # frames [S, *shape]; reset bool [S]; outputs {name: [S, *shape]}

tests/test_builder_peers.py checks it against the float64 reference on every zoo model's tiny preset
(needs torch; skipped without it).
"""

from __future__ import annotations

import math
import time

import numpy as np


def _torch():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


_DEVICE_TENSORS: dict = {}  # (model, device) -> weights, initial states, constants: made once per process


_GENERATE_CHUNK = 1 << 24  # elements a generation step makes: 128 MB an int64 temporary


def _mul32(x, c: int):
    """x * c modulo 2**32 for int64 tensors of values below 2**32: the product by c's 16-bit halves, each
    below 2**48, so no int64 product overflows."""
    return (((x * (c >> 16)) & 0xFFFF) << 16) + x * (c & 0xFFFF) & 0xFFFFFFFF


def _lowbias32(torch, x):
    """wavec.weights' 32-bit hash on int64 tensors of values below 2**32."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def random_weight(torch, spec, device: str):
    """A wavec.weights.RandomWeight made on ``device`` by its own counter-based generator: the bits
    ``spec.materialize()`` gives (tests/test_builder_peers.py), without drawing 11e9 values in numpy and
    copying 44 GB over PCIe for duplex:11b."""
    key = int(_lowbias32(torch, torch.tensor([spec.seed], dtype=torch.int64))[0])
    scale = float(np.float32(spec.scale))
    out = torch.empty(spec.size, dtype=torch.float32, device=device)
    for at in range(0, spec.size, _GENERATE_CHUNK):
        index = torch.arange(at, min(at + _GENERATE_CHUNK, spec.size), dtype=torch.int64, device=device)
        u = (_lowbias32(torch, index ^ key) >> 8).to(torch.float32) * 2.0**-23 - 1.0  # exact in float32
        out[at : at + len(index)] = u * scale
    if spec.precision == "bf16":  # round to nearest even (no NaN among these values)
        out = out.to(torch.bfloat16).to(torch.float32)
    return out.view(spec.shape)


def _device_tensors(model, device: str):
    """The model's weights and initial states (float32, as the compiler materializes them: random specs
    drawn, on the device (`random_weight`), bf16 ones rounded) and its constants, on ``device``; made once
    per model and device, since a 1e9-parameter model takes gigabytes each time."""
    from wavec.frontends.builder import init as winit
    from wavec.weights import RandomWeight

    key = (id(model), device)
    if key not in _DEVICE_TENSORS:
        torch = _torch()

        def as_t(value):
            if isinstance(value, RandomWeight):
                return random_weight(torch, value, device)
            return torch.as_tensor(np.asarray(winit.materialize(value), np.float32), device=device)

        _DEVICE_TENSORS[key] = (
            model,  # held so its id is not reused
            {n: as_t(d.value) for n, d in model.weights.items()},
            {n: as_t(d.value) for n, d in model.states.items()},
            {node.id: as_t(node.attrs["value"]) for node in model.nodes if node.kind == "const"},
        )
    return _DEVICE_TENSORS[key][1:]


class _Value:
    """A node result: ``t`` is [S, *shape] when ``batched`` (one row per session), else [*shape] (shared)."""

    __slots__ = ("t", "batched")

    def __init__(self, t, batched: bool):
        self.t, self.batched = t, batched


class TorchStep:
    """One beat of ``model`` for ``sessions`` sessions on ``device``, state kept on the device.

    ``beat(frames, reset)``: frames ``{input: [S, *shape]}`` (numpy or tensors), reset bool ``[S]`` (the session
    restarts from the initial state first); returns ``{output: tensor [S, *shape]}`` on the device."""

    def __init__(self, model, sessions: int, device: str = "cpu"):
        torch = self.torch = _torch()
        model.finish()
        self.model, self.S, self.device = model, sessions, device
        self.weights, self.initial, self.consts = _device_tensors(model, device)
        self.state = {n: v.expand(sessions, *v.shape).clone() for n, v in self.initial.items()}
        self.frames = {n: torch.zeros((sessions, *d.shape), device=device) for n, d in model.inputs.items()}
        self.keep = torch.ones(sessions, dtype=torch.bool, device=device)

    # -- the beat --------------------------------------------------------------------------------------

    def beat(self, frames: dict, reset) -> dict:
        torch = self.torch
        for name, value in frames.items():
            self.frames[name].copy_(torch.as_tensor(value))
        self.keep.copy_(torch.as_tensor(~np.asarray(reset, bool)))
        with torch.inference_mode():
            return self.step()

    def step(self) -> dict:
        """Resets the sessions ``self.keep`` drops, then runs the graph on ``self.frames`` and ``self.state``
        (updated in place); allocates nothing it keeps, so a CUDA graph can capture it."""
        for name, init in self.initial.items():
            self.state[name].copy_(self.torch.where(self.keep.view(-1, *[1] * init.dim()), self.state[name], init))
        vals = {}
        for node in self.model.nodes:
            args = [vals[(t.node.id, t.index)] for t in node.inputs]
            outs = getattr(self, f"op_{node.kind}")(node, args, node.attrs)
            for i, o in enumerate(outs if isinstance(outs, (list, tuple)) else [outs]):
                vals[(node.id, i)] = o
        # Copies first: a value may be a view of a state (a reshape or slice of it) that a write replaces.
        outputs = {n: self._batched(vals[(t.node.id, t.index)]).clone() for n, (t, _) in self.model.outputs.items()}
        writes = {n: self._batched(vals[(t.node.id, t.index)]).clone() for n, (t, _) in self.model.state_writes.items()}
        for n, value in writes.items():
            self.state[n].copy_(value)
        return outputs

    # -- helpers ---------------------------------------------------------------------------------------

    def _batched(self, v: _Value):
        return v.t if v.batched else v.t.expand(self.S, *v.t.shape)

    def _aligned(self, v: _Value, rank: int):
        """``v``'s tensor broadcastable against [S, *shape of ``rank`` dims]: 1-dims after S when batched."""
        if not v.batched:
            return v.t
        return v.t.reshape(self.S, *[1] * (rank - (v.t.dim() - 1)), *v.t.shape[1:])

    @staticmethod
    def _axis(axis: int, v: _Value) -> int:
        rank = v.t.dim() - v.batched
        return axis % rank + v.batched if rank else 0

    def _rows_times(self, x: _Value, w: _Value):
        """Per session x @ w (a cell's gates), as op_matmul: the weight shared or per session."""
        return self._batched(self.op_matmul(None, [x, w], {}))

    def _conv(self, fn, x, w: _Value, groups: int, **options):
        """``fn`` (F.conv1d or F.conv_transpose1d) of x [S, C, L] with w shared, or per session [S, ...]: then
        the sessions become groups of one convolution over [1, S*C, L]."""
        if not w.batched:
            return fn(x, w.t, groups=groups, **options)
        y = fn(x.reshape(1, -1, x.shape[-1]), w.t.reshape(-1, *w.t.shape[2:]), groups=self.S * groups, **options)
        return y.reshape(self.S, -1, y.shape[-1])

    def _bias(self, b: _Value):
        """A conv bias [C] (or [S, C]) broadcastable against [S, C, T]."""
        return b.t[..., None]

    def _out(self, t, *args: _Value) -> _Value:
        return _Value(t, any(a.batched for a in args))

    # -- sources ---------------------------------------------------------------------------------------

    def op_input(self, node, args, attrs):
        return _Value(self.frames[attrs["name"]], True)

    def op_weight(self, node, args, attrs):
        return _Value(self.weights[attrs["name"]], False)

    def op_state(self, node, args, attrs):
        return _Value(self.state[attrs["name"]], True)

    def op_const(self, node, args, attrs):
        return _Value(self.consts[node.id], False)  # on the device already: a graph capture copies nothing

    # -- generic ---------------------------------------------------------------------------------------

    def op_ewise(self, node, args, attrs):
        torch = self.torch
        rank = len(node.shapes[0])
        t = [self._aligned(a, rank) for a in args]
        sig = torch.sigmoid
        fn = {
            "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
            "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow,
            "lt": lambda a, b: (a < b).float(), "le": lambda a, b: (a <= b).float(),
            "gt": lambda a, b: (a > b).float(), "ge": lambda a, b: (a >= b).float(),
            "eq": lambda a, b: (a == b).float(), "swiglu": lambda a, b: a * sig(a) * b,
            "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
            "rsqrt": torch.rsqrt, "square": torch.square, "tanh": torch.tanh, "sigmoid": sig,
            "relu": torch.relu, "silu": lambda a: a * sig(a),
            "gelu": lambda a: 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3))),
            "softplus": lambda a: torch.logaddexp(torch.zeros_like(a), a), "sin": torch.sin, "cos": torch.cos,
            "where": lambda c, a, b: torch.where(c != 0, a, b),
        }[attrs["fn"]]
        out = self._out(fn(*t), *args)
        shape = (self.S, *node.shapes[0]) if out.batched else node.shapes[0]
        return _Value(out.t.expand(shape), out.batched)

    def op_matmul(self, node, args, attrs):
        a, b = args
        ra, rb = a.t.dim() - a.batched, b.t.dim() - b.batched
        ta, tb = a.t, b.t
        if ra == 1:
            ta, ra = ta.unsqueeze(-2), 2
        if rb == 1:
            tb, rb = tb.unsqueeze(-1), 2
        rank = max(ra, rb)
        ta = self._aligned(_Value(ta, a.batched), rank)
        tb = self._aligned(_Value(tb, b.batched), rank)
        out = self.torch.matmul(ta, tb)
        if a.t.dim() - a.batched == 1:
            out = out.squeeze(-2)
        if b.t.dim() - b.batched == 1:
            out = out.squeeze(-1)
        return self._out(out, a, b)

    def op_reduce(self, node, args, attrs):
        (x,) = args
        if not attrs["axes"]:  # numpy reduces nothing; torch would reduce every axis
            return x
        axes = tuple(self._axis(a, x) for a in attrs["axes"])
        kind = attrs["kind"]
        if kind in ("max", "min"):
            t = x.t.amax(dim=axes, keepdim=attrs["keepdims"]) if kind == "max" else x.t.amin(dim=axes, keepdim=attrs["keepdims"])
        else:
            t = (x.t.sum if kind == "sum" else x.t.mean)(dim=axes, keepdim=attrs["keepdims"])
        return _Value(t, x.batched)

    def op_softmax(self, node, args, attrs):
        (x,) = args
        return _Value(self.torch.softmax(x.t, dim=self._axis(attrs["axis"], x)), x.batched)

    def op_layer_norm(self, node, args, attrs):
        x, g, b = (self._aligned(v, len(node.shapes[0])) for v in args)
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self._out((x - mu) / self.torch.sqrt(var + attrs["eps"]) * g + b, *args)

    def op_rms_norm(self, node, args, attrs):
        x, g = (self._aligned(v, len(node.shapes[0])) for v in args)
        return self._out(x / self.torch.sqrt((x * x).mean(-1, keepdim=True) + attrs["eps"]) * g, *args)

    def op_rope(self, node, args, attrs):
        torch = self.torch
        x, pos = args
        d = x.t.shape[-1]
        freq = attrs["base"] ** (-2.0 * torch.arange(d // 2, device=self.device, dtype=torch.float64) / d)
        p = pos.t[..., 0] if pos.batched else pos.t[0]
        angle = (p.double().reshape(-1, *[1] * len(node.shapes[0])) if pos.batched else p.double()) * freq
        cos, sin = torch.cos(angle).float(), torch.sin(angle).float()
        x1, x2 = x.t[..., : d // 2], x.t[..., d // 2:]
        return self._out(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1), x, pos)

    def op_concat(self, node, args, attrs):
        if not any(a.batched for a in args):
            return _Value(self.torch.cat([a.t for a in args], attrs["axis"]), False)
        axis = attrs["axis"] % len(node.shapes[0]) + 1
        return _Value(self.torch.cat([self._batched(a) for a in args], axis), True)

    def op_slice(self, node, args, attrs):
        (x,) = args
        axis = self._axis(attrs["axis"], x)
        n = node.shapes[0][attrs["axis"]]
        index = [slice(None)] * x.t.dim()
        index[axis] = slice(attrs["start"], attrs["start"] + n * attrs["step"], attrs["step"])
        return _Value(x.t[tuple(index)], x.batched)

    def op_reshape(self, node, args, attrs):
        (x,) = args
        return _Value(x.t.reshape((self.S, *node.shapes[0]) if x.batched else node.shapes[0]), x.batched)

    def op_transpose(self, node, args, attrs):
        (x,) = args
        perm = [p + x.batched for p in attrs["perm"]]
        return _Value(x.t.permute([0, *perm] if x.batched else perm), x.batched)

    # -- streaming and sequence ------------------------------------------------------------------------

    def op_conv1d(self, node, args, attrs):
        F = self.torch.nn.functional
        x, w = self._batched(args[0]), args[1]
        t, k, dil = x.shape[-1], w.t.shape[-1], attrs["dilation"]
        if not attrs.get("context"):  # the reference reads no tap past the frame: k == 1 or zero taps
            full, kept = F.pad(x, (0, dil * (k - 1))), None
        else:
            full = self.torch.cat([self._batched(args[-1]), x], -1)
            kept = _Value(full[..., full.shape[-1] - args[-1].t.shape[-1]:], True)
        y = self._conv(F.conv1d, full, w, attrs["groups"], dilation=dil)[..., :t]
        if attrs["bias"]:
            y = y + self._bias(args[2])
        return _Value(y, True) if kept is None else [_Value(y, True), kept]

    def op_conv_transpose1d(self, node, args, attrs):
        F = self.torch.nn.functional
        x, w = self._batched(args[0]), args[1]
        t, s, k = x.shape[-1], attrs["stride"], w.t.shape[-1]
        out = self._conv(F.conv_transpose1d, x, w, 1, stride=s)
        if attrs.get("tail"):
            out = self.torch.cat([out[..., : k - s] + self._batched(args[-1]), out[..., k - s:]], -1)
        y = out[..., : t * s]
        if attrs["bias"]:
            y = y + self._bias(args[2])
        return [_Value(y, True), _Value(out[..., t * s:], True)] if attrs.get("tail") else _Value(y, True)

    def op_lstm_cell(self, node, args, attrs):
        torch = self.torch
        x, h, c, w, r, b = args
        n = h.t.shape[-1]
        z = self._rows_times(x, w) + self._rows_times(h, r) + self._aligned(b, len(node.shapes[0]))
        i, f, g, o = (z[..., k * n:(k + 1) * n] for k in range(4))
        c2 = torch.sigmoid(f) * self._batched(c) + torch.sigmoid(i) * torch.tanh(g)
        return [_Value(torch.sigmoid(o) * torch.tanh(c2), True), _Value(c2, True)]

    def op_gru_cell(self, node, args, attrs):
        torch = self.torch
        x, h, w, r, bw, br = args
        n = h.t.shape[-1]
        rank = len(node.shapes[0])
        xw = self._rows_times(x, w) + self._aligned(bw, rank)
        hr = self._rows_times(h, r) + self._aligned(br, rank)
        rg = torch.sigmoid(xw[..., :n] + hr[..., :n])
        zg = torch.sigmoid(xw[..., n:2 * n] + hr[..., n:2 * n])
        cand = torch.tanh(xw[..., 2 * n:] + rg * hr[..., 2 * n:])
        return _Value((1.0 - zg) * cand + zg * self._batched(h), True)

    def op_ssm_step(self, node, args, attrs):
        torch = self.torch
        x, dt, a, b, c, d, h = (self._batched(v) for v in args)
        h2 = torch.exp(dt * a)[..., None, None] * h + torch.einsum("shp,sn->shpn", dt[..., None] * x, b)
        return [_Value(torch.einsum("shpn,sn->shp", h2, c) + d[..., None] * x, True), _Value(h2, True)]

    def op_ring_write(self, node, args, attrs):
        cache, new, pos = (self._batched(v) for v in args)
        slot = self.torch.round(pos[:, 0]).long() % cache.shape[1]
        out = cache.clone()
        out[self.torch.arange(self.S, device=self.device), slot] = new
        return _Value(out, True)

    def op_attention(self, node, args, attrs):
        torch = self.torch
        q, k, v = (self._batched(a) for a in args[:3])
        hq, hkv, cap = q.shape[1], k.shape[2], k.shape[1]
        k, v = k.repeat_interleave(hq // hkv, dim=2), v.repeat_interleave(hq // hkv, dim=2)
        scores = attrs["scale"] * torch.einsum("schd,shd->shc", k, q)
        if attrs["masked"]:
            filled = torch.round(self._batched(args[3])[:, 0]).long() + 1  # slots [0, min(cap, pos + 1))
            scores = scores.masked_fill(torch.arange(cap, device=self.device) >= filled[:, None, None], float("-inf"))
        return _Value(torch.einsum("shc,schd->shd", torch.softmax(scores, -1), v), True)


def capture_graph(torch, step, warmups: int, restart):
    """(a CUDA graph of ``step()``, the outputs it writes): ``warmups`` calls on a side stream first, so the
    libraries pick their kernels (and TorchScript's profiling executor settles) outside the capture, then
    ``restart()`` puts the state back, then one capture. Replaying the graph reruns ``step``."""
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmups):
                step()
        torch.cuda.current_stream().wait_stream(side)
        restart()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
    return graph, out


class BuilderPeerBackend:
    """`TorchStep` as a wavec.serve backend (``graph``: the step captured once in a CUDA graph and replayed),
    synchronous like bench/silero_peers.TorchPeerBackend: `publish` copies the frames (already gathered into
    `input_buffers`, pinned) and reset flags to the device, runs the step, and copies the outputs a client
    is owed back (``outputs``; default all); ``last_compute_us`` is that wall time, the deadline's view."""

    ahead = 0

    def __init__(self, model, sessions: int, graph: bool, device: str = "cuda", outputs: list[str] | None = None):
        torch = self.torch = _torch()
        self.name = "graph" if graph else "batched"
        self.step = TorchStep(model, sessions, device)
        pinned = device != "cpu"
        self.host_in = {n: torch.zeros(t.shape, pin_memory=pinned) for n, t in self.step.frames.items()}
        self.keep_host = torch.ones(sessions, dtype=torch.bool, pin_memory=pinned)
        self.names = list(outputs or model.outputs)
        self.out = None
        self.graph = self._capture() if graph else None
        self.out_host = {n: torch.zeros((sessions, *model.outputs[n][0].shape), pin_memory=pinned) for n in self.names}
        self.last_compute_us = 0.0

    def _capture(self):
        def restart():
            for name, init in self.step.initial.items():
                self.step.state[name].copy_(init.expand_as(self.step.state[name]))

        graph, self.out = capture_graph(self.torch, self.step.step, 1, restart)
        return graph

    def input_buffers(self) -> dict[str, np.ndarray]:
        """The pinned host frame buffers `publish` copies to the device (as CudaSession.input_views)."""
        return {n: t.numpy() for n, t in self.host_in.items()}

    def publish(self, frames: dict[str, np.ndarray], reset: np.ndarray) -> None:
        torch = self.torch
        t = time.perf_counter_ns()
        with torch.inference_mode():
            for name, host in self.host_in.items():
                if frames[name] is not host.numpy() and not np.shares_memory(frames[name], host.numpy()):
                    host.numpy()[...] = frames[name]
                self.step.frames[name].copy_(host, non_blocking=True)
            self.keep_host.numpy()[...] = ~np.asarray(reset, bool)
            self.step.keep.copy_(self.keep_host, non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
                out = self.out
            else:
                out = self.step.step()
            for name in self.names:
                self.out_host[name].copy_(out[name], non_blocking=True)
            if self.step.device != "cpu":
                torch.cuda.current_stream().synchronize()
        self.last_compute_us = (time.perf_counter_ns() - t) / 1e3

    def ready(self) -> bool:
        return True

    def collect(self, names=None) -> dict[str, np.ndarray]:
        """Views of the pinned host outputs, valid until the next publish: this backend takes no beat ahead
        (``ahead`` 0), so the server stores them before it publishes again."""
        return {n: self.out_host[n].numpy() for n in (names or self.names)}

    def close(self) -> None:
        """Drops the cohort's tensors and graph and hands torch's cached blocks back to the driver, so the
        next system of a density run (wavec: 60 GB for duplex:11b at 16 sessions) can allocate them; the
        shared weights stay (`_device_tensors`)."""
        self.step = self.graph = self.out = None
        if self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()
