"""``duplex``: a full-duplex voice pipeline in one graph, in the spirit of NVIDIA's Nemotron VoiceChat.

Five models share one beat, two model steps per beat, every sub-model's state persisting across beats:

    mel [n_mel, 2*sub] --audio encoder--> 2 frames --+--> recognition head --> asr [2, asr_vocab]
                                                     +--> hybrid Mamba2/attention backbone (step 0, step 1)
                                                            --> text_logits [2, vocab]
                                                            --> TTS transformer (step 0, step 1; attention
                                                                over a cache growing with the beat index)
                                                            --> codec latents [latent, 2]
                                                            --> codec decoder --> audio [1, 2*prod(strides)]

The encoder subsamples the beat's mel frames by ``sub`` with a causal conv and a frame-stacking
projection, then runs its attention + MLP layers per step. Step s of beat b is position 2b + s of every
KV ring (encoder, backbone, TTS). The backbone hears the encoder frame plus its own previous text
distribution (softmax of the previous step's logits through the text embedding), so its two steps in a
beat chain through that carry as they do through the Mamba2 states, conv contexts and rings.
Weights are bf16 (rounded, computed as float32) by default; all state is float32.

Presets: ``tiny`` (CI), ``1b`` and ``11b`` (about 1e9 and 11e9 parameters; the 11b's proportions follow
the real system: a Nemotron-Nano-9B-like hybrid backbone dominating, a FastConformer-sized encoder, a
TTS transformer around a billion, a small codec decoder and recognition head). ``parameter_breakdown``
gives the count per sub-model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from wavec.frontends.builder import Model
from wavec.zoo.blocks import (
    AttnSizes,
    CodecSizes,
    MambaSizes,
    attention_layer,
    codec_stack,
    dense,
    hybrid_stack,
    mlp_layer,
    norm,
)

STEPS = 2  # model steps per beat


@dataclass(frozen=True)
class DuplexSizes:
    n_mel: int
    sub: int  # mel frames per encoder frame
    d_enc: int
    enc_layers: int
    enc_attn: AttnSizes
    enc_ffn: int
    asr_vocab: int
    d: int
    pattern: str
    mamba: MambaSizes
    attn: AttnSizes
    ffn: int
    vocab: int
    d_tts: int
    tts_layers: int
    tts_attn: AttnSizes
    tts_ffn: int
    codec: CodecSizes


def _nemotron_pattern(mamba: int, attn: int, mlp: int) -> str:
    """A Nemotron-H-like layer string: Mamba2 and MLP layers alternating, attention spread evenly."""
    body = []
    for i in range(max(mamba, mlp)):
        if i < mamba:
            body.append("M")
        if i < mlp:
            body.append("-")
    step = len(body) // (attn + 1)
    for k in range(attn, 0, -1):
        body.insert(k * step, "*")
    return "".join(body)


PRESETS = {
    "tiny": DuplexSizes(
        n_mel=8, sub=2, d_enc=16, enc_layers=1, enc_attn=AttnSizes(2, 1, 8, 8), enc_ffn=32, asr_vocab=16,
        d=32, pattern="M*-", mamba=MambaSizes(d_inner=64, heads=4, d_state=8),
        attn=AttnSizes(4, 2, 8, 8), ffn=64, vocab=32,
        d_tts=24, tts_layers=1, tts_attn=AttnSizes(2, 1, 12, 16), tts_ffn=48,
        codec=CodecSizes(latent=8, channels=(16, 8, 8), strides=(2, 3), frames=STEPS),
    ),
    "1b": DuplexSizes(
        n_mel=80, sub=4, d_enc=768, enc_layers=12, enc_attn=AttnSizes(12, 12, 64, 128), enc_ffn=3072, asr_vocab=1024,
        d=2048, pattern=_nemotron_pattern(9, 2, 9), mamba=MambaSizes(d_inner=4096, heads=64, d_state=64),
        attn=AttnSizes(16, 4, 128, 1024), ffn=5632, vocab=32000,
        d_tts=1024, tts_layers=12, tts_attn=AttnSizes(16, 4, 64, 512), tts_ffn=2816,
        codec=CodecSizes(latent=128, channels=(512, 256, 128, 64, 32), strides=(8, 5, 4, 3), frames=STEPS),
    ),
    "11b": DuplexSizes(
        n_mel=80, sub=8, d_enc=1024, enc_layers=40, enc_attn=AttnSizes(16, 16, 64, 256), enc_ffn=4096,
        asr_vocab=1024,
        d=4480, pattern=_nemotron_pattern(27, 4, 25), mamba=MambaSizes(d_inner=8960, heads=128, d_state=128),
        attn=AttnSizes(40, 8, 128, 2048), ffn=13056, vocab=131072,
        d_tts=2048, tts_layers=24, tts_attn=AttnSizes(16, 8, 128, 1024), tts_ffn=6144,
        codec=CodecSizes(latent=512, channels=(1536, 768, 384, 192, 96), strides=(8, 5, 4, 3), frames=STEPS),
    ),
}


def duplex(preset: str = "tiny", *, seed: int = 0, dtype: str = "bf16") -> Model:
    s = PRESETS[preset]
    m = Model(f"duplex_{preset}", seed=seed)
    mel = m.input("mel", [s.n_mel, STEPS * s.sub])
    beat = m.beat()

    # Audio encoder, part shared by both steps: causal conv, then stack `sub` frames into one.
    e = m.silu(m.conv1d(mel, m.weight("enc.conv.w", [s.d_enc, s.n_mel, 3], dtype),
                        m.weight("enc.conv.b", [s.d_enc], dtype, scale=0.1), name="enc.conv"))
    e = m.reshape(m.transpose(e, [1, 0]), [STEPS, s.sub * s.d_enc])
    e = dense(m, e, "enc.sub", s.sub * s.d_enc, s.d_enc, dtype)  # [STEPS, d_enc]

    enc_rings, backbone_rings, tts_rings = {}, {}, {}
    prev_text = m.carry("backbone.prev_text", [s.vocab])
    asr, text, latents = [], [], []
    for step in range(STEPS):
        pos = m.add(m.mul(beat, float(STEPS)), float(step))
        # Encoder layers for this frame.
        x = m.reshape(m.slice(e, 0, step, step + 1), [s.d_enc])
        for i in range(s.enc_layers):
            if i not in enc_rings:
                enc_rings[i] = m.kv_ring(f"enc.{i}.kv", s.enc_attn.capacity, s.enc_attn.kv_heads, s.enc_attn.head_dim)
            x = attention_layer(m, x, f"enc.{i}.attn", s.d_enc, s.enc_attn, pos, enc_rings[i], dtype)
            x = mlp_layer(m, x, f"enc.{i}.mlp", s.d_enc, s.enc_ffn, dtype)
        x = norm(m, x, "enc.final", dtype)
        # Recognition head: the user's speech as text.
        asr.append(m.reshape(m.softmax(dense(m, x, "asr.head", s.d_enc, s.asr_vocab, dtype, bias=True)), [1, s.asr_vocab]))
        # Backbone: the heard frame plus what it said last step.
        said = m.matmul(m.softmax(prev_text.value), m.weight("backbone.embed", [s.vocab, s.d], dtype, scale=1.0))
        h = m.add(dense(m, x, "backbone.adapter", s.d_enc, s.d, dtype), said)
        h = hybrid_stack(m, h, "backbone", s.d, s.pattern, s.mamba, s.attn, s.ffn, pos, backbone_rings, dtype)
        h = norm(m, h, "backbone.final", dtype)
        logits = dense(m, h, "backbone.head", s.d, s.vocab, dtype)
        prev_text.value = logits
        text.append(m.reshape(logits, [1, s.vocab]))
        # Text-to-speech transformer: one codec frame per step.
        t = dense(m, h, "tts.in", s.d, s.d_tts, dtype)
        for i in range(s.tts_layers):
            if i not in tts_rings:
                tts_rings[i] = m.kv_ring(f"tts.{i}.kv", s.tts_attn.capacity, s.tts_attn.kv_heads, s.tts_attn.head_dim)
            t = attention_layer(m, t, f"tts.{i}.attn", s.d_tts, s.tts_attn, pos, tts_rings[i], dtype)
            t = mlp_layer(m, t, f"tts.{i}.mlp", s.d_tts, s.tts_ffn, dtype)
        lat = dense(m, norm(m, t, "tts.final", dtype), "tts.out", s.d_tts, s.codec.latent, dtype)
        latents.append(m.reshape(lat, [s.codec.latent, 1]))

    m.output("asr", m.concat(asr, 0))
    m.output("text_logits", m.concat(text, 0))
    m.output("audio", codec_stack(m, m.concat(latents, 1), "codec", s.codec, dtype))
    return m


def parameter_breakdown(model: Model) -> dict[str, int]:
    """Parameters per sub-model (the weight name's first component: enc, asr, backbone, tts, codec)."""
    out: dict[str, int] = defaultdict(int)
    for name, decl in model.weights.items():
        n = 1
        for dim in decl.shape:
            n *= dim
        out[name.split(".")[0]] += n
    return dict(out)
