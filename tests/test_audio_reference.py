"""wavec.audio framing and segments, and the onnxruntime cohort reference, on the real Silero VAD model."""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest

from wavec.audio import SPEECH_TRUTH, SPEECH_WAV, cohort_schedule, read_wav, speech_segments, vad_frames
from wavec.errors import WavecError

ort = pytest.importorskip("onnxruntime")

from wavec.reference import onnx_stateful_reference  # noqa: E402

SILERO_STATES = [("state", "stateN")]
SILERO_BINDINGS = {"sr": 16000}
SILERO_AXES = {"input": 0, "state": 1, "output": 0, "stateN": 1}


@pytest.fixture(scope="module")
def silero():
    from wavec.models import silero_vad_path

    try:
        return silero_vad_path()
    except WavecError as e:  # no network and no cache: say why instead of failing obscurely
        pytest.skip(str(e))


def run_silero(model, frames, reset):
    return onnx_stateful_reference(model, {"input": frames}, reset, SILERO_STATES, SILERO_BINDINGS, SILERO_AXES)


def wrapper_frames(x, chunk=512, context_size=64):
    """silero-vad 6.2.3 OnnxWrapper.__call__ + get_speech_timestamps, the torch ops replaced by numpy 1:1."""
    out = []
    ctx = np.zeros((1, 0), np.float32)  # reset_states(): self._context = torch.zeros(0)
    for start in range(0, len(x), chunk):  # get_speech_timestamps' loop
        c = x[start:start + chunk]
        if len(c) < chunk:
            c = np.pad(c, (0, chunk - len(c)))
        c = c[None, :]
        if not ctx.size:
            ctx = np.zeros((1, context_size), np.float32)
        xx = np.concatenate([ctx, c], axis=1)  # torch.cat([self._context, x], dim=1)
        out.append(xx[0])
        ctx = xx[..., -context_size:]  # self._context = x[..., -context_size:]
    return np.stack(out)


def test_read_wav_shipped_clip():
    x, rate = read_wav(SPEECH_WAV)
    truth = json.loads(SPEECH_TRUTH.read_text())
    assert rate == 16000 and x.dtype == np.float32 and x.ndim == 1
    assert len(x) == truth["samples"] and np.abs(x).max() <= 1.0
    assert SPEECH_WAV.stat().st_size < 400_000


def test_read_wav_wrong_rate_and_channels(tmp_path):
    p = tmp_path / "stereo8k.wav"
    with wave.open(str(p), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(np.zeros(1600, "<i2").tobytes())
    with pytest.raises(WavecError, match=r"stereo8k\.wav.*8000 Hz.*16000 Hz.*sox"):
        read_wav(p)
    with pytest.raises(WavecError, match=r"2 channel.*1 needed"):
        read_wav(p, rate=8000)
    x, rate = read_wav(p, rate=None, channels=2)
    assert x.shape == (800, 2) and rate == 8000


@pytest.mark.parametrize("n", [1, 63, 512, 513, 1000, 5 * 512])
def test_vad_frames_match_silero_wrapper(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    f = vad_frames(x)
    assert f.shape == (-(-n // 512), 576) and f.dtype == np.float32
    np.testing.assert_array_equal(f, wrapper_frames(x))
    assert not f[0, :64].any()


def test_speech_segments_hysteresis():
    p = np.zeros(60)
    p[5:20] = 0.9  # 15 beats = 480 ms of speech
    p[20:22] = 0.2  # below neg_threshold (0.35) for 64 ms < min_silence 100 ms: bridged
    p[22:30] = 0.9
    p[40:45] = 0.9  # 160 ms: too short, dropped
    p[55:] = 0.9  # open at the end, 160 ms: dropped
    assert speech_segments(p) == [(5 * 0.032, 30 * 0.032)]
    p[55:] = 0.0
    p[50:] = 0.9  # 320 ms open at the end: kept, ends at the end
    assert speech_segments(p)[-1] == (50 * 0.032, 60 * 0.032)


def test_silero_finds_the_shipped_speech(silero):
    truth = json.loads(SPEECH_TRUTH.read_text())
    x, _ = read_wav(SPEECH_WAV)
    frames = vad_frames(x)[:, None]
    out = run_silero(silero, frames, np.zeros(frames.shape[:2], bool))
    assert out["output"].shape == (len(frames), 1, 1) and out["stateN"].shape == (len(frames), 1, 2, 128)
    probs = out["output"][:, 0, 0]
    found = speech_segments(probs)
    assert len(found) == len(truth["speech"]), (found, truth["speech"])
    for (s, e), (ts, te) in zip(found, truth["speech"]):
        assert abs(s - ts) <= 0.1, (found, truth["speech"])  # onset within ~3 beats
        assert te - 0.1 <= e <= te + 0.3, (found, truth["speech"])  # Silero's decay runs a few beats late
    # nothing but speech: no detection inside a no-speech stretch (away from the speech edges)
    for a, b in truth["no_speech"]:
        for s, e in found:
            assert e <= a + 0.3 or s >= b - 0.1, ((s, e), (a, b))
    la, lb = truth["loud_noise"]
    beats = np.arange(len(probs)) * 0.032
    assert probs[(beats >= la) & (beats + 0.032 <= lb)].max() < 0.5


@pytest.fixture(scope="module")
def cohort8(silero):
    frames, reset = cohort_schedule(8, 120, seed=3)
    return frames, reset, run_silero(silero, frames, reset)


def test_cohort_schedule_shape_and_resets():
    frames, reset = cohort_schedule(8, 120, seed=3)
    assert frames.shape == (120, 8, 576) and frames.dtype == np.float32
    assert reset.shape == (120, 8) and reset.dtype == bool
    assert (reset.sum(axis=0) >= 1).all() and (reset.sum(axis=0) == 2).any()
    assert len({int(np.argmax(reset[:, s])) for s in range(8)}) == 8  # staggered joins
    assert (np.abs(frames).max(axis=2) > 0).all()  # never an all-zero frame
    again, _ = cohort_schedule(8, 120, seed=3)
    np.testing.assert_array_equal(frames, again)


def test_batched_equals_sessions_alone(silero, cohort8):
    frames, reset, batched = cohort8
    for s in range(frames.shape[1]):
        alone = run_silero(silero, frames[:, s:s + 1], reset[:, s:s + 1])
        for name in ("output", "stateN"):
            err = np.abs(batched[name][:, s] - alone[name][:, 0]).max()
            assert err <= 1e-5, (name, s, err)


def test_reset_equals_fresh_session(silero, cohort8):
    frames, reset, batched = cohort8
    rejoin = [(int(np.nonzero(reset[:, s])[0][-1]), s) for s in range(frames.shape[1]) if reset[:, s].sum() == 2]
    assert rejoin
    for b, s in rejoin:
        fresh = run_silero(silero, frames[b:, s:s + 1], np.zeros((len(frames) - b, 1), bool))
        for name in ("output", "stateN"):
            err = np.abs(batched[name][b:, s] - fresh[name][:, 0]).max()
            assert err <= 1e-5, (name, b, s, err)
        # and the reset mattered: without it the session's outputs differ
        no_reset = reset[:, s:s + 1].copy()
        no_reset[b] = False
        carried = run_silero(silero, frames[:, s:s + 1], no_reset)
        assert np.abs(carried["stateN"][b, 0] - fresh["stateN"][0, 0]).max() > 1e-3


def test_reference_generic_errors(silero):
    frames = np.zeros((2, 1, 576), np.float32)
    with pytest.raises(WavecError, match="neither frames, bindings nor states"):
        onnx_stateful_reference(silero, {"input": frames}, np.zeros((2, 1), bool), SILERO_STATES, {}, SILERO_AXES)
    with pytest.raises(WavecError, match="no input 'audio'"):
        onnx_stateful_reference(silero, {"audio": frames}, np.zeros((2, 1), bool), SILERO_STATES,
                                SILERO_BINDINGS, SILERO_AXES)


def test_model_cache_env_and_digest(silero, tmp_path, monkeypatch):
    import shutil

    from wavec import models

    shutil.copy(silero, tmp_path / silero.name)
    monkeypatch.setenv("WAVEC_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_download_wheel", lambda dest: pytest.fail("a valid cached file was fetched again"))
    assert models.silero_vad_path() == tmp_path / silero.name
    (tmp_path / silero.name).write_bytes(b"not the model")  # a stale file is fetched again, never returned

    def offline(dest):
        raise WavecError("offline")

    monkeypatch.setattr(models, "_download_wheel", offline)
    with pytest.raises(WavecError, match="offline"):
        models.silero_vad_path()
