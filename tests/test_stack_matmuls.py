"""wave-stack-matmuls on the real Silero VAD: in a cohort of at least the default pipeline's min-sessions, its
LSTM step is one matmul over [x, h] (one phase, not two), the encoder's last convolution writes x into the
stacked operand (the concat's phase copies only h), wpk-verify proves the program, and the interpreter matches
onnxruntime on staggered sessions.

Tolerance: max abs error <= 1e-4 on `output` and `stateN` (float32 bodies against float32 onnxruntime; the
stacked matmul sums its k in another order than the two matmuls did).

Beyond Silero, the builder's LSTM stack (whose cells sum x W, h R and the bias in one epilogue) stacked at every
cohort size matches its float64 numpy reference on fresh random frames with staggered joins: max |interp - ref|
/ (1 + |ref|) <= 1e-4, as tests/test_zoo.py holds the unstacked program.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import wavec
from builder_harness import run_against_reference
from wavec import zoo
from wavec.driver import default_pipeline
from wavec.audio import cohort_schedule
from wavec.targets.interp import run_beats
from wavec.models import silero_vad_path
from wavec.reference import onnx_stateful_reference
from wavec.verify import VerificationError, verify_profile

TOLERANCE = 1e-4
SESSIONS, WORKERS, BEATS = 72, 8, 12
SILERO = dict(bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])


@pytest.fixture(scope="module")
def profile():
    return wavec.compile(silero_vad_path(), sessions=SESSIONS, workers=WORKERS, **SILERO)


def test_silero_lstm_is_one_matmul_and_matches_onnxruntime(profile):
    phases = [p["name"] for p in profile.meta["phases"]]
    matmuls = [p for p in phases if p.startswith("matmul")]
    assert len(matmuls) == 1, phases
    stacked = next(p for p in profile.meta["phases"] if p["name"] == matmuls[0])
    assert any(w.startswith("w.concat0(") for w in stacked["reads"]), stacked
    parted = [t for t in profile.meta["tensors"] if t.get("part_bytes")]
    assert len(parted) == 1 and parted[0]["part_bytes"] == [[0, 512]], parted  # x: 128 floats of [x, h]
    frames, reset = cohort_schedule(SESSIONS, BEATS, seed=3)
    assert reset[1:].any(), "some sessions must rejoin mid-stream"
    got = run_beats(profile, {"input": frames}, reset)
    want = onnx_stateful_reference(silero_vad_path(), {"input": frames}, reset, states=[("state", "stateN")],
                                   bindings={"sr": 16000}, cohort_axes={"input": 0, "state": 1, "output": 0,
                                                                        "stateN": 1})
    for name in ("output", "stateN"):
        err = float(np.abs(got[name] - want[name]).max())
        assert err <= TOLERANCE, f"{name}: max abs error {err:.2e}"


def test_verify_takes_a_part_computed_in_place_as_a_read_of_its_own(profile):
    """The stacked matmul reads [x, h] through one view, x written by the convolution and h by the concat's
    copy. With the part declared (part_bytes), wpk-verify proves the program; without it, the same bytes read
    as one tensor that two phases produced, which the dataflow check rejects."""
    verify_profile(profile)
    undeclared = copy.deepcopy(profile)
    del next(t for t in undeclared.meta["tensors"] if t.get("part_bytes"))["part_bytes"]
    with pytest.raises(VerificationError, match="mix of two producers"):
        verify_profile(undeclared)


def test_builder_lstm_stack_stacked_matches_its_reference():
    sessions, workers = 3, 4
    model = zoo.get("lstm_stack:tiny")
    default = default_pipeline(sessions, workers)
    stacking = default.replace("wave-stack-matmuls{min-sessions=65}", "wave-stack-matmuls{min-sessions=1}")
    assert stacking != default
    matmuls = {spec: sum(p["name"].startswith("matmul") for p in model.compile(
        sessions=sessions, workers=workers, pipeline=spec).meta["phases"]) for spec in (default, stacking)}
    assert matmuls[stacking] == matmuls[default] - 2, matmuls  # one matmul fewer a layer, two layers
    run_against_reference(model, sessions=sessions, workers=workers, beats=40, tolerance=1e-4, pipeline=stacking)
