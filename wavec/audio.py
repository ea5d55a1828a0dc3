"""Audio helpers for the streaming VAD demo and tests: WAV reading, Silero's beat framing, segment hysteresis,
and a synthetic cohort workload. numpy and the standard library only.

The shipped clip ``wavec/data/speech.wav`` (16 kHz mono 16-bit, about 10.8 s: three espeak-ng sentences,
silence, a -35 dBFS noise floor and one louder noise-only stretch) has its ground truth in
``wavec/data/speech.json``; ``scripts/make_speech.py`` regenerates both.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from wavec.errors import WavecError

DATA_DIR = Path(__file__).resolve().parent / "data"
SPEECH_WAV = DATA_DIR / "speech.wav"
SPEECH_TRUTH = DATA_DIR / "speech.json"

CHUNK = 512  # new samples per 32 ms beat at 16 kHz
CONTEXT = 64  # samples carried over from the previous chunk
FRAME = CHUNK + CONTEXT


def read_wav(path, rate: int | None = 16000, channels: int = 1) -> tuple[np.ndarray, int]:
    """Reads a PCM WAV file as float32 samples in [-1, 1] and its sample rate.

    ``rate`` (None accepts any) and ``channels`` are what the caller needs; a file that differs raises
    :class:`WavecError` naming the file, what is wrong and how to convert it. Mono files give a 1-D array,
    others [samples, channels]. 8-, 16-, 24- and 32-bit integer PCM are accepted.
    """
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as w:
            n_ch, width, fr, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except FileNotFoundError:
        raise WavecError(f"{path}: no such file; pass the path of a 16 kHz mono WAV file") from None
    except (wave.Error, EOFError) as e:
        raise WavecError(f"{path}: not a PCM WAV file ({e}); convert it, e.g. "
                         f"`sox {path.name} -r 16000 -c 1 -b 16 out.wav`") from None
    if rate is not None and fr != rate:
        raise WavecError(f"{path}: sample rate is {fr} Hz, {rate} Hz is needed; resample it, e.g. "
                         f"`sox {path.name} -r {rate} out.wav`")
    if n_ch != channels:
        raise WavecError(f"{path}: has {n_ch} channel(s), {channels} needed; mix it down, e.g. "
                         f"`sox {path.name} -c {channels} out.wav`")
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = (np.frombuffer(raw, "<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    else:  # pragma: no cover - the wave module rejects other widths itself
        raise WavecError(f"{path}: {8 * width}-bit samples are not supported; convert to 16-bit PCM")
    if n_ch > 1:
        x = x.reshape(-1, n_ch)
    return np.ascontiguousarray(x), fr


def vad_frames(samples: np.ndarray, chunk: int = CHUNK, context: int = CONTEXT) -> np.ndarray:
    """Silero's streaming framing: float32 [beats, context + chunk].

    Beat b's frame is the last ``context`` samples of chunk b-1 (zeros for b = 0) followed by the ``chunk`` new
    samples of chunk b; the tail chunk is padded with zeros to full length. This is what silero-vad 6.2.3's
    ``OnnxWrapper.__call__`` (silero_vad/utils_vad.py) builds: ``self._context`` starts as
    ``torch.zeros(batch_size, context_size)`` after ``reset_states``, the model input is
    ``torch.cat([self._context, x], dim=1)``, and afterwards ``self._context = x[..., -context_size:]`` of
    that concatenation (i.e. the chunk's own tail, as chunk > context); ``get_speech_timestamps`` feeds it
    consecutive 512-sample chunks (256 at 8 kHz, context 32), padding the last one with
    ``torch.nn.functional.pad``.
    """
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise WavecError(f"vad_frames: expects mono samples (1-D), got shape {x.shape}; mix channels down first")
    if context > chunk:
        raise WavecError(f"vad_frames: context {context} exceeds chunk {chunk}; Silero uses 64 and 512")
    beats = -(-len(x) // chunk)
    padded = np.zeros(context + beats * chunk, np.float32)
    padded[context:context + len(x)] = x
    idx = np.arange(beats)[:, None] * chunk + np.arange(context + chunk)[None, :]
    return padded[idx]


def speech_segments(probs, threshold: float = 0.5, beat_ms: float = 32, min_speech_ms: float = 250,
                    min_silence_ms: float = 100, neg_threshold: float | None = None) -> list[tuple[float, float]]:
    """Speech segments in seconds from per-beat speech probabilities, by hysteresis.

    A simplified ``get_speech_timestamps_from_probs`` of silero-vad 6.2.3 (silero_vad/utils_vad.py): speech
    starts at the first beat with ``p >= threshold``; while in speech, the first beat with
    ``p < neg_threshold`` (default ``max(threshold - 0.15, 0.01)``) marks a tentative end, cancelled by a beat
    back at ``p >= threshold``, and confirmed once the quiet lasts ``min_silence_ms``; segments not longer
    than ``min_speech_ms`` are dropped; speech still open at the end runs to the end. Times are beat starts
    (beat i begins at ``i * beat_ms``). Left out: ``max_speech_duration_s`` splitting and ``speech_pad_ms``
    padding.
    """
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    segments: list[tuple[float, float]] = []
    triggered = False
    start = 0.0
    temp_end: float | None = None
    for i, prob in enumerate(p):
        t = i * beat_ms
        if prob >= threshold:
            temp_end = None
            if not triggered:
                triggered, start = True, t
                continue
        if triggered and prob < neg_threshold:
            if temp_end is None:
                temp_end = t
            if t - temp_end < min_silence_ms:
                continue
            if temp_end - start > min_speech_ms:
                segments.append((start / 1000.0, temp_end / 1000.0))
            triggered, temp_end = False, None
    end = len(p) * beat_ms
    if triggered and end - start > min_speech_ms:
        segments.append((start / 1000.0, end / 1000.0))
    return segments


def _noise(rng: np.random.Generator, n: int, dbfs: float) -> np.ndarray:
    return (rng.standard_normal(n) * 10 ** (dbfs / 20)).astype(np.float32)


def cohort_schedule(n_sessions: int, n_beats: int, seed: int = 0, wav=None) -> tuple[np.ndarray, np.ndarray]:
    """A test and demo workload for a cohort: (frames float32 [beats, sessions, 576], reset bool [beats, sessions]).

    Session s joins at beat ``(3 * s) % max(1, n_beats // 3)`` (session 0 at beat 0); every third session
    (s % 3 == 1) joins again at ``join + n_beats // 2`` when that is inside the run. ``reset[b, s]`` is True
    exactly at s's join beats. Before its first join a session's frames are its own white noise at -60 dBFS
    (low, never zeros). From each join on, it streams the speech clip (``wav``, default the shipped
    speech.wav) looped, starting at a staggered sample offset, at a per-session gain in [0.5, 1], plus its own
    white noise at -45 dBFS; a join starts a new stream (new offset), framed like a fresh Silero session (zero
    context at the join beat, exactly like ``OnnxWrapper.reset_states``).
    """
    if n_sessions < 1 or n_beats < 1:
        raise WavecError(f"cohort_schedule: needs n_sessions >= 1 and n_beats >= 1, got {n_sessions}, {n_beats}")
    speech, _ = read_wav(SPEECH_WAV if wav is None else wav)
    rng = np.random.default_rng(seed)
    frames = np.empty((n_beats, n_sessions, FRAME), np.float32)
    reset = np.zeros((n_beats, n_sessions), bool)
    spread = max(1, n_beats // 3)
    for s in range(n_sessions):
        joins = [(3 * s) % spread]
        if s % 3 == 1 and joins[0] + n_beats // 2 < n_beats and n_beats // 2 > 0:
            joins.append(joins[0] + n_beats // 2)
        reset[joins, s] = True
        j0 = joins[0]
        if j0:
            pre = _noise(rng, CONTEXT + j0 * CHUNK, -60.0)
            frames[:j0, s] = vad_frames(pre[CONTEXT:])
            frames[0, s, :CONTEXT] = pre[:CONTEXT]
        bounds = joins + [n_beats]
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            n = (b - a) * CHUNK
            offset = (s * 7919 * CHUNK // 3 + k * 104729 + s * 97) % len(speech)
            idx = (offset + np.arange(n)) % len(speech)
            gain = rng.uniform(0.5, 1.0)
            stream = speech[idx] * np.float32(gain) + _noise(rng, n, -45.0)
            frames[a:b, s] = vad_frames(stream)
    return frames, reset
