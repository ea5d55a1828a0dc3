"""The main job, end to end: compile the real Silero VAD for a cohort, serve the shipped speech through it
beat after beat, print each session's speech segments and the beat report.

    wavec demo --sessions 64             # cuda where a GPU is present, else interp

Sessions join at staggered beats (some rejoin mid-stream, which resets their state slot), each hearing the
recording from its own offset with its own noise (wavec.audio.cohort_schedule). The outputs are checked
against onnxruntime running the original model with the same per-session state when it is installed.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from wavec.errors import WavecError

SILERO = {"bindings": {"sr": 16000}, "frames": {"input": 576}, "states": [("state", "stateN")]}
COHORT_AXES = {"input": 0, "state": 1, "output": 0, "stateN": 1}


def pick_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        return "cuda" if int(err) == 0 else "interp"
    except Exception:  # no cuda-bindings or no driver: the CPU twin runs the same profile
        return "interp"


def _segments_line(probs: np.ndarray, joined_at: int) -> str:
    from wavec.audio import speech_segments

    segs = speech_segments(probs[joined_at:])
    offset = joined_at * 0.032
    return ", ".join(f"{a + offset:.2f}-{b + offset:.2f}s" for a, b in segs) or "no speech"


def _reference_error(model: Path, frames: np.ndarray, reset: np.ndarray, outputs: dict) -> float | None:
    try:
        from wavec.reference import onnx_stateful_reference
    except ImportError:
        return None
    try:
        ref = onnx_stateful_reference(model, {"input": frames}, reset, states=SILERO["states"],
                                      bindings=SILERO["bindings"], cohort_axes=COHORT_AXES)
    except ImportError:
        return None
    return max(float(np.abs(outputs[k] - ref[k]).max()) for k in ("output", "stateN"))


def run_demo(sessions: int = 64, beats: int = 0, backend: str = "auto", out_dir: str = "") -> int:
    import wavec
    from wavec.audio import cohort_schedule, read_wav, vad_frames
    from wavec.models import silero_vad_path
    from wavec.report import format_report

    if sessions < 1:
        raise WavecError(f"--sessions must be >= 1, got {sessions}")
    backend = pick_backend(backend)
    model = silero_vad_path()
    speech, _ = read_wav(Path(__file__).parent / "data" / "speech.wav")
    beats = beats or len(vad_frames(speech))
    t0 = time.perf_counter()
    profile = wavec.compile(model, sessions=sessions, **SILERO)
    compile_s = time.perf_counter() - t0
    target = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="wavec-demo-")) / "silero.profile"
    profile.save(target)
    print(f"compiled {model.name} for {sessions} sessions in {compile_s:.1f} s -> {target}")
    print(format_report(profile.report))

    frames, reset = cohort_schedule(sessions, beats, seed=0)
    t0 = time.perf_counter()
    latencies: list[float] = []
    options = {"latencies": latencies} if backend == "cuda" else {}
    outputs = profile.run({"input": frames}, backend=backend, reset=reset, **options)
    run_s = time.perf_counter() - t0
    probs = outputs["output"][:, :, 0]
    print(f"\nserved {beats} beats x {sessions} sessions on {backend} in {run_s:.1f} s")
    if latencies:
        lat = np.array(latencies)
        print(f"beat latency: p50 {np.percentile(lat, 50):.1f} us, p99 {np.percentile(lat, 99):.1f} us")
    for s in range(min(sessions, 8)):
        joins = np.flatnonzero(reset[:, s])
        joined = int(joins[-1]) if len(joins) else 0
        print(f"session {s:>3} (joined beat {joined:>3}): {_segments_line(probs[:, s], joined)}")
    if sessions > 8:
        print(f"... {sessions - 8} more sessions")
    err = _reference_error(model, frames, reset, outputs)
    if err is not None:
        print(f"max abs error vs onnxruntime (output, stateN): {err:.2e}")
    return 0
