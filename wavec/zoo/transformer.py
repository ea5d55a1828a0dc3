"""Streaming transformer decoder: one position per beat, attention over a KV ring of each layer.

Input ``x`` [d] (this beat's embedding); output ``logits`` [vocab]. The position is the session's beat
index; the ring keeps the last ``capacity`` positions (RoPE is applied before caching, so slots need
no order).
"""

from __future__ import annotations

from wavec.frontends.builder import Model
from wavec.zoo.blocks import AttnSizes, attention_layer, dense, mlp_layer, norm

PRESETS = {
    "tiny": dict(d=32, layers=2, attn=AttnSizes(heads=4, kv_heads=2, head_dim=8, capacity=8), ffn=64, vocab=40),
    "small": dict(d=256, layers=4, attn=AttnSizes(heads=8, kv_heads=2, head_dim=32, capacity=128), ffn=768, vocab=1024),
}


def transformer(preset: str = "tiny", *, seed: int = 0, dtype: str = "fp32") -> Model:
    p = PRESETS[preset]
    m = Model(f"transformer_{preset}", seed=seed)
    d = p["d"]
    x = m.input("x", [d])
    pos = m.beat()
    for i in range(p["layers"]):
        ring = m.kv_ring(f"layer{i}.kv", p["attn"].capacity, p["attn"].kv_heads, p["attn"].head_dim)
        x = attention_layer(m, x, f"layer{i}.attn", d, p["attn"], pos, ring, dtype)
        x = mlp_layer(m, x, f"layer{i}.mlp", d, p["ffn"], dtype)
    m.output("logits", dense(m, norm(m, x, "final", dtype), "head", d, p["vocab"], dtype))
    return m
