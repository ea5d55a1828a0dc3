"""Layers the zoo models share, written with the builder API (one session, one step).

Each takes the Model, its input, a name prefix for its weights and states, and its sizes. Weights are
random (seeded by the model's seed and their names) in ``dtype`` ("fp32" or "bf16"); norm gains start
at one; per-layer state is a carry, so a model that runs a layer twice in one beat chains it.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavec.frontends.builder import Model, Tensor
from wavec.frontends.builder.model import KVRing


def dense(m: Model, x: Tensor, name: str, d_in: int, d_out: int, dtype: str = "fp32", bias: bool = False) -> Tensor:
    """x @ W (+ b): W [d_in, d_out]."""
    y = m.matmul(x, m.weight(f"{name}.w", [d_in, d_out], dtype))
    return m.add(y, m.weight(f"{name}.b", [d_out], dtype, scale=0.1)) if bias else y


def norm(m: Model, x: Tensor, name: str, dtype: str = "fp32") -> Tensor:
    return m.rms_norm(x, m.weight(f"{name}.g", [x.shape[-1]], dtype, init="ones"))


@dataclass(frozen=True)
class AttnSizes:
    heads: int
    kv_heads: int
    head_dim: int
    capacity: int


def attention_layer(m: Model, x: Tensor, name: str, d: int, s: AttnSizes, pos: Tensor, ring: KVRing,
                    dtype: str = "fp32") -> Tensor:
    """Pre-norm self-attention of one position over a KV ring (RoPE on q and k): x + attn(norm(x))."""
    h = norm(m, x, f"{name}.norm", dtype)
    q = m.reshape(dense(m, h, f"{name}.q", d, s.heads * s.head_dim, dtype), [s.heads, s.head_dim])
    k = m.reshape(dense(m, h, f"{name}.k", d, s.kv_heads * s.head_dim, dtype), [s.kv_heads, s.head_dim])
    v = m.reshape(dense(m, h, f"{name}.v", d, s.kv_heads * s.head_dim, dtype), [s.kv_heads, s.head_dim])
    q, k = m.rope(q, pos), m.rope(k, pos)
    keys, values = ring.write(k, v, pos)
    o = m.reshape(m.attention(q, keys, values, pos), [s.heads * s.head_dim])
    return m.add(x, dense(m, o, f"{name}.o", s.heads * s.head_dim, d, dtype))


def mlp_layer(m: Model, x: Tensor, name: str, d: int, ffn: int, dtype: str = "fp32") -> Tensor:
    """Pre-norm SwiGLU feed-forward: x + W_down (silu(h W_gate) * h W_up)."""
    h = norm(m, x, f"{name}.norm", dtype)
    g = dense(m, h, f"{name}.gate", d, ffn, dtype)
    u = dense(m, h, f"{name}.up", d, ffn, dtype)
    return m.add(x, dense(m, m.swiglu(g, u), f"{name}.down", ffn, d, dtype))


@dataclass(frozen=True)
class MambaSizes:
    d_inner: int
    heads: int
    d_state: int
    conv: int = 4

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.heads


def mamba2_layer(m: Model, x: Tensor, name: str, d: int, s: MambaSizes, dtype: str = "fp32") -> Tensor:
    """Pre-norm Mamba2 mixer (one B/C group), one step: in_proj to (z, xBC, dt); causal depthwise conv on
    xBC with its carried context; SSM step with its carried state; gated RMS norm; out_proj."""
    c = s.d_inner + 2 * s.d_state
    h = norm(m, x, f"{name}.norm", dtype)
    zxbcdt = dense(m, h, f"{name}.in", d, s.d_inner + c + s.heads, dtype)
    z, xbc, dt = m.split(zxbcdt, [s.d_inner, c, s.heads])
    conv_w = m.weight(f"{name}.conv.w", [c, 1, s.conv], dtype)
    conv_b = m.weight(f"{name}.conv.b", [c], dtype, scale=0.1)
    xbc = m.silu(m.reshape(m.conv1d(m.reshape(xbc, [c, 1]), conv_w, conv_b, name=f"{name}.conv", groups=c), [c]))
    xs, bb, cc = m.split(xbc, [s.d_inner, s.d_state, s.d_state])
    dt = m.softplus(m.add(dt, m.weight(f"{name}.dt_bias", [s.heads], dtype, scale=0.5)))
    a = m.neg(m.exp(m.weight(f"{name}.A_log", [s.heads], dtype, scale=1.0)))
    ssm = m.carry(f"{name}.ssm", [s.heads, s.head_dim, s.d_state])
    y, ssm.value = m.ssm_step(m.reshape(xs, [s.heads, s.head_dim]), dt, a, bb, cc,
                              m.weight(f"{name}.D", [s.heads], dtype, scale=1.0), ssm.value)
    y = m.mul(m.reshape(y, [s.d_inner]), m.silu(z))
    y = norm(m, y, f"{name}.gnorm", dtype)
    return m.add(x, dense(m, y, f"{name}.out", s.d_inner, d, dtype))


def hybrid_stack(m: Model, x: Tensor, name: str, d: int, pattern: str, mamba: MambaSizes, attn: AttnSizes,
                 ffn: int, pos: Tensor, rings: dict, dtype: str = "fp32") -> Tensor:
    """Layers by ``pattern``: ``M`` Mamba2, ``*`` attention (ring ``rings[i]``, made on first use), ``-``
    SwiGLU MLP (Nemotron-H's notation)."""
    for i, kind in enumerate(pattern):
        lname = f"{name}.{i}"
        if kind == "M":
            x = mamba2_layer(m, x, lname, d, mamba, dtype)
        elif kind == "*":
            if i not in rings:
                rings[i] = m.kv_ring(f"{lname}.kv", attn.capacity, attn.kv_heads, attn.head_dim)
            x = attention_layer(m, x, lname, d, attn, pos, rings[i], dtype)
        elif kind == "-":
            x = mlp_layer(m, x, lname, d, ffn, dtype)
        else:
            raise ValueError(f"layer pattern {pattern!r}: unknown layer {kind!r} (M, *, -)")
    return x


@dataclass(frozen=True)
class CodecSizes:
    latent: int
    channels: tuple[int, ...]  # channels[0] after the input conv, channels[i+1] after upsample stage i
    strides: tuple[int, ...]
    frames: int  # latent frames per call


def codec_stack(m: Model, latent: Tensor, name: str, s: CodecSizes, dtype: str = "fp32") -> Tensor:
    """Causal conv decoder: conv(k=7) -> per stage: silu, transposed conv (K = 2 stride), a residual unit
    (dilated conv k=3, silu, conv k=1) -> silu, conv(k=7) to one channel, tanh. [latent, T] -> [1, T prod(strides)]."""
    ch = s.channels
    y = m.conv1d(latent, m.weight(f"{name}.in.w", [ch[0], s.latent, 7], dtype),
                 m.weight(f"{name}.in.b", [ch[0]], dtype, scale=0.1), name=f"{name}.in")
    for i, stride in enumerate(s.strides):
        c_in, c_out = ch[i], ch[i + 1]
        y = m.conv_transpose1d(m.silu(y), m.weight(f"{name}.up{i}.w", [c_in, c_out, 2 * stride], dtype, fan_in=c_in * 2),
                               m.weight(f"{name}.up{i}.b", [c_out], dtype, scale=0.1), name=f"{name}.up{i}", stride=stride)
        r = m.conv1d(m.silu(y), m.weight(f"{name}.res{i}.w1", [c_out, c_out, 3], dtype), name=f"{name}.res{i}.c1",
                     dilation=i + 1)
        r = m.conv1d(m.silu(r), m.weight(f"{name}.res{i}.w2", [c_out, c_out, 1], dtype), name=f"{name}.res{i}.c2")
        y = m.add(y, r)
    y = m.conv1d(m.silu(y), m.weight(f"{name}.out.w", [1, ch[-1], 7], dtype), name=f"{name}.out")
    return m.tanh(y)
