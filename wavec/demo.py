"""The main job, end to end: compile the real Silero VAD for a cohort, serve the shipped speech through it
beat after beat, print each session's speech segments and the beat report.

    wavec demo --sessions 64             # cuda where a GPU is present, else interp

Sessions join at staggered beats (some rejoin mid-stream, which resets their state slot), each hearing the
recording from its own offset with its own noise (wavec.audio.cohort_schedule). The outputs are checked
against onnxruntime running the original model with the same per-session state when it is installed.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from wavec.errors import WavecError

SILERO = {"bindings": {"sr": 16000}, "frames": {"input": 576}, "states": [("state", "stateN")]}
COHORT_AXES = {"input": 0, "state": 1, "output": 0, "stateN": 1}


def cuda_available() -> tuple[bool, str]:
    """(usable, why not): cuda-bindings importable and a driver with a device."""
    try:
        from cuda.bindings import driver
    except Exception as e:  # noqa: BLE001  (no cuda-bindings, or a broken install)
        return False, f"cuda-bindings is not importable ({type(e).__name__})"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False, f"cuInit failed ({err})"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count < 1:
            return False, "no CUDA device"
    except Exception as e:  # noqa: BLE001
        return False, f"the CUDA driver is unusable ({type(e).__name__})"
    return True, ""


def pick_backend(requested: str) -> str:
    """``auto``: cuda where a GPU is usable, else interp. ``cuda`` without a GPU is an error, raised
    before anything is compiled."""
    if requested not in ("auto", "cuda", "interp"):
        raise WavecError(f"--backend {requested!r}: choose interp, cuda or auto")
    if requested == "interp":
        return requested
    ok, why = cuda_available()
    if requested == "cuda" and not ok:
        raise WavecError(f"--backend cuda: {why}; use --backend interp (the CPU twin) or auto")
    return "cuda" if ok else "interp"


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
    from wavec.audio import read_wav, vad_frames
    from wavec.models import silero_vad_path
    from wavec.report import format_report

    if sessions < 1:
        raise WavecError(f"--sessions must be >= 1, got {sessions}")
    if beats < 0:
        raise WavecError(f"--beats must be >= 0 (0: the whole recording), got {beats}")
    backend = pick_backend(backend)
    if out_dir is not None and out_dir != "":
        from wavec.profile import check_save_target

        check_save_target(Path(out_dir), "profile")
    model = silero_vad_path()
    speech, _ = read_wav(Path(__file__).parent / "data" / "speech.wav")
    recording = len(vad_frames(speech))
    beats = beats or recording
    loops = f", the {recording * 0.032:.1f} s recording looped" if beats > recording else ""
    print(f"serving {beats} beats ({beats * 0.032:.1f} s of audio{loops}) to {sessions} sessions on {backend}")
    t0 = time.perf_counter()
    profile = wavec.compile(model, sessions=sessions, **SILERO)
    compile_s = time.perf_counter() - t0
    with contextlib.ExitStack() as stack:
        if out_dir:
            target = profile.save(out_dir)
            where = str(target)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="wavec-demo-"))
            target = profile.save(Path(tmp) / "silero.profile")
            where = "a temporary folder, removed at exit; keep it with -o DIR"
        print(f"compiled {model.name} for {sessions} sessions in {compile_s:.1f} s -> {where}")
        print(format_report(profile.report))
        return _serve(profile, model, sessions, beats, backend)


def _serve(profile, model: Path, sessions: int, beats: int, backend: str) -> int:
    from wavec.audio import cohort_schedule

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
