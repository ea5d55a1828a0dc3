"""Issue 4's acceptance for the zoo: every model at ``tiny`` compiles (a few workers, a small cohort),
runs 50 beats on `interp` with sessions joining late and rejoining, and matches the float64 numpy
reference of its builder graph (frontends/builder/reference.py) for every session and beat.

Tolerance: max |interp - reference| / (1 + |reference|) <= 1e-4 (float32 kernels against float64). The
bf16-weight models (duplex by default, and one bf16 variant below) give the reference the same rounded
weights, so the same tolerance applies. The 1b / 11b duplex presets are built and lowered to wave IR
(no weight arrays allocated) and their parameter counts checked.
"""

from __future__ import annotations

import time

import pytest

from builder_harness import run_against_reference
from wavec import zoo
from wavec.dialects import wave
from wavec.zoo.duplex import parameter_breakdown

TOLERANCE = 1e-4
SESSIONS, BEATS, WORKERS = 3, 50, 4


@pytest.mark.parametrize("name", ["gru_stack", "lstm_stack", "transformer", "codec_decoder", "mamba_hybrid"])
def test_tiny_model_matches_reference(name):
    model = zoo.get(f"{name}:tiny")
    run_against_reference(model, sessions=SESSIONS, beats=BEATS, workers=WORKERS, tolerance=TOLERANCE)


def test_bf16_weights_match_reference_with_the_same_rounding():
    model = zoo.gru_stack("tiny", dtype="bf16", seed=3)
    assert all(d.value.precision == "bf16" for d in model.weights.values())
    run_against_reference(model, sessions=SESSIONS, beats=BEATS, workers=WORKERS, tolerance=TOLERANCE)


@pytest.mark.slow
def test_duplex_tiny_matches_reference():
    model = zoo.get("duplex:tiny")
    states = set(model.states)
    # Every sub-model keeps state across beats: encoder, backbone (Mamba2 + rings + feedback), TTS, codec.
    for prefix in ("enc.", "backbone.", "tts.", "codec.", "beat"):
        assert any(s.startswith(prefix) for s in states), prefix
    errors = run_against_reference(model, sessions=4, beats=BEATS, workers=WORKERS, tolerance=TOLERANCE)
    assert set(errors) == {"asr", "text_logits", "audio"}


def test_registry_names_and_errors():
    assert "duplex:11b" in zoo.names() and "gru_stack:tiny" in zoo.names()
    assert zoo.is_zoo_name("duplex:1b") and not zoo.is_zoo_name("model.onnx")
    with pytest.raises(zoo.WavecError, match="no zoo model 'nope'"):
        zoo.get("nope:tiny")
    with pytest.raises(zoo.WavecError, match="no preset 'huge'"):
        zoo.get("duplex:huge")


@pytest.mark.parametrize("preset, low, high", [("1b", 0.9e9, 1.1e9), ("11b", 10.5e9, 11.5e9)])
def test_large_duplex_builds_and_lowers_without_weight_arrays(preset, low, high):
    start = time.perf_counter()
    model = zoo.duplex(preset)
    count = model.parameter_count()
    assert low <= count <= high, f"{preset}: {count:.3e} parameters"
    parts = parameter_breakdown(model)
    assert parts["backbone"] > 0.6 * count  # the hybrid backbone dominates
    assert parts["backbone"] > parts["tts"] > parts["enc"] > parts["codec"] > parts["asr"]
    graph = model.lower()
    elapsed = time.perf_counter() - start
    # No weight is an array: every one is a seeded spec (or a small made-up constant like RoPE frequencies).
    arrays = {k: v for k, v in graph.weights.items() if hasattr(v, "nbytes") and not hasattr(v, "materialize")}
    assert sum(a.nbytes for a in arrays.values()) < 1 << 20, sorted(arrays)[:5]
    assert all(getattr(graph.weights[n], "precision", "bf16") == "bf16" for n in model.weights)
    ops = [op for op in graph.module.walk() if op.name.startswith("wave.")]
    assert sum(isinstance(op, wave.StateOp) for op in ops) == len(model.states)
    assert elapsed < 30, f"building and lowering {preset} took {elapsed:.1f} s"
