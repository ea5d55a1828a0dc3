"""Causal convolutional codec decoder (in the spirit of EnCodec / Mimi decoders): ``latent``
[latent, frames] per beat -> ``audio`` [1, frames * prod(strides)], every convolution streaming with
its own carried context and every transposed convolution with its carried overlap."""

from __future__ import annotations

from wavec.frontends.builder import Model
from wavec.zoo.blocks import CodecSizes, codec_stack

PRESETS = {
    "tiny": CodecSizes(latent=8, channels=(16, 8, 8), strides=(2, 3), frames=2),
    "small": CodecSizes(latent=64, channels=(256, 128, 64, 32), strides=(4, 5, 6), frames=2),
}


def codec_decoder(preset: str = "tiny", *, seed: int = 0, dtype: str = "fp32") -> Model:
    s = PRESETS[preset]
    m = Model(f"codec_decoder_{preset}", seed=seed)
    m.output("audio", codec_stack(m, m.input("latent", [s.latent, s.frames]), "codec", s, dtype))
    return m
