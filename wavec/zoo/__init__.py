"""The model zoo: builder programs of streaming models, each a function ``f(preset) -> Model``.

    wavec.zoo.get("duplex:tiny")            # by name, as `wavec compile duplex:11b` does
    wavec.zoo.transformer("tiny")           # or by function

Every model has a ``tiny`` preset (CI: compiles and runs 50 interp beats in seconds) and larger ones
(``names()`` lists them). Weights are seeded random (``seed=``), ``dtype="bf16"`` rounds them to bfloat16.
"""

from __future__ import annotations

from wavec.errors import WavecError
from wavec.zoo import codec, duplex as _duplex, mamba, recurrent, transformer as _transformer
from wavec.zoo.codec import codec_decoder
from wavec.zoo.duplex import duplex
from wavec.zoo.mamba import mamba_hybrid
from wavec.zoo.recurrent import gru_stack, lstm_stack
from wavec.zoo.transformer import transformer

MODELS = {
    "transformer": (transformer, _transformer.PRESETS),
    "mamba_hybrid": (mamba_hybrid, mamba.PRESETS),
    "gru_stack": (gru_stack, recurrent.PRESETS),
    "lstm_stack": (lstm_stack, recurrent.PRESETS),
    "codec_decoder": (codec_decoder, codec.PRESETS),
    "duplex": (duplex, _duplex.PRESETS),
}


def names() -> list[str]:
    """Every ``NAME:PRESET``."""
    return [f"{n}:{p}" for n, (_, presets) in MODELS.items() for p in presets]


def is_zoo_name(text: str) -> bool:
    name, sep, preset = text.partition(":")
    return bool(sep) and name in MODELS


def get(spec: str, **options):
    """The Model of ``NAME:PRESET`` (``options`` go to the zoo function: seed, dtype). Raises WavecError
    for an unknown name or preset."""
    name, _, preset = spec.partition(":")
    if name not in MODELS:
        raise WavecError(f"{spec!r}: no zoo model {name!r}; choose one of {', '.join(names())}")
    fn, presets = MODELS[name]
    preset = preset or "tiny"
    if preset not in presets:
        raise WavecError(f"{spec!r}: {name} has no preset {preset!r}; choose one of {', '.join(presets)}")
    return fn(preset, **options)


__all__ = ["codec_decoder", "duplex", "get", "gru_stack", "is_zoo_name", "lstm_stack", "mamba_hybrid", "names",
           "transformer"]
