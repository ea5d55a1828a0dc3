"""Hybrid Mamba2 / attention backbone (Nemotron-H style layer pattern): ``x`` [d] per beat through
Mamba2 mixers (carried conv context and SSM state), attention layers over KV rings and SwiGLU MLPs;
output ``logits`` [vocab]."""

from __future__ import annotations

from wavec.frontends.builder import Model
from wavec.zoo.blocks import AttnSizes, MambaSizes, dense, hybrid_stack, norm

PRESETS = {
    "tiny": dict(d=32, pattern="M*M-", mamba=MambaSizes(d_inner=64, heads=4, d_state=8),
                 attn=AttnSizes(heads=4, kv_heads=2, head_dim=8, capacity=8), ffn=64, vocab=40),
    "small": dict(d=256, pattern="M-M*M-M-", mamba=MambaSizes(d_inner=512, heads=8, d_state=32),
                  attn=AttnSizes(heads=8, kv_heads=2, head_dim=32, capacity=128), ffn=768, vocab=1024),
}


def mamba_hybrid(preset: str = "tiny", *, seed: int = 0, dtype: str = "fp32") -> Model:
    p = PRESETS[preset]
    m = Model(f"mamba_hybrid_{preset}", seed=seed)
    x = m.input("x", [p["d"]])
    x = hybrid_stack(m, x, "layers", p["d"], p["pattern"], p["mamba"], p["attn"], p["ffn"], m.beat(), {}, dtype)
    m.output("logits", dense(m, norm(m, x, "final", dtype), "head", p["d"], p["vocab"], dtype))
    return m
