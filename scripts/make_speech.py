"""Regenerates wavec/data/speech.wav and its ground truth wavec/data/speech.json.

Command (from the repository root; needs Debian's ``espeak-ng`` and ``sox`` on PATH, numpy)::

    python scripts/make_speech.py

Options: ``--out wavec/data/speech.wav`` (the JSON is written beside it with the suffix ``.json``),
``--seed 20240611``.

What it builds (16 kHz, mono, 16-bit PCM, about 10.8 s):
three English sentences synthesized by espeak-ng with three different voices, placed on a timeline with
stretches of silence between them; a pink-noise floor at about -35 dBFS under the whole file; and one louder
stretch (about 1.4 s of white plus pink noise at about -22 dBFS) that contains no speech. Speech is normalized
to a -6 dBFS peak before mixing.

The JSON records, in seconds: ``speech`` (each sentence's voiced extent, found as the first and last 10 ms
block of the clean synthesized sentence whose RMS is within 40 dB of its peak block), ``loud_noise`` (the
no-speech noisy stretch) and ``no_speech`` (every stretch outside ``speech``), plus the voices, texts, seed,
and tool versions.

Deterministic: espeak-ng and sox (run with ``-D``, no dither) are deterministic for a given version, and the
noise comes from ``numpy.random.default_rng(seed)``; a different espeak-ng version can move the sentence ends by
a few milliseconds, which the JSON then records.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import wave
from pathlib import Path

import numpy as np

RATE = 16000
SEED = 20240611

# (start second on the timeline, espeak-ng voice, words per minute, text)
SENTENCES = [
    (0.80, "en-us", 165, "Please turn on the lights in the kitchen."),
    (3.60, "en-gb+f3", 160, "The weather will be sunny tomorrow afternoon."),
    (8.40, "en-us+m3", 170, "Send the report before noon."),
]
LOUD_NOISE = (6.40, 7.80)  # seconds, no speech inside
TOTAL_S = 10.8
FLOOR_DBFS = -35.0
LOUD_DBFS = -22.0
SPEECH_PEAK_DBFS = -6.0


def synthesize(voice: str, wpm: int, text: str) -> np.ndarray:
    """espeak-ng -> sox: float32 samples at 16 kHz."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text],
                         check=True, capture_output=True).stdout
    raw = subprocess.run(["sox", "-D", "-t", "wav", "-", "-t", "raw", "-e", "floating-point", "-b", "32",
                          "-c", "1", "-r", str(RATE), "-"], input=wav, check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def voiced_extent(x: np.ndarray) -> tuple[int, int]:
    """First and last sample of the 10 ms blocks whose RMS is within 40 dB of the loudest block."""
    block = RATE // 100
    n = len(x) // block
    rms = np.sqrt(np.mean(x[: n * block].reshape(n, block) ** 2, axis=1) + 1e-20)
    loud = np.nonzero(rms >= rms.max() * 10 ** (-40 / 20))[0]
    return int(loud[0] * block), int((loud[-1] + 1) * block)


def pink(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-RMS 1/f noise, shaped in the frequency domain."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(len(spec), dtype=np.float64)
    f[0] = 1.0
    spec /= np.sqrt(f)
    spec[0] = 0.0
    y = np.fft.irfft(spec, n)
    return y / np.sqrt(np.mean(y**2))


def tool_version(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout or out.stderr).strip().splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "wavec" / "data" / "speech.wav"))
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    n_total = int(round(TOTAL_S * RATE))
    mix = np.zeros(n_total)
    speech = []
    for start_s, voice, wpm, text in SENTENCES:
        x = synthesize(voice, wpm, text)
        a, b = voiced_extent(x)
        x = x[a:b] * (10 ** (SPEECH_PEAK_DBFS / 20) / np.max(np.abs(x[a:b])))
        s0 = int(round(start_s * RATE))
        if s0 + len(x) > n_total:
            raise SystemExit(f"sentence {text!r} ends past {TOTAL_S} s; move it earlier")
        if speech and s0 < speech[-1]["end_sample"] + RATE // 2:
            raise SystemExit(f"sentence {text!r} starts less than 0.5 s after the previous one")
        mix[s0 : s0 + len(x)] += x
        speech.append({"start_sample": s0, "end_sample": s0 + len(x), "voice": voice, "wpm": wpm, "text": text})

    mix += pink(rng, n_total) * 10 ** (FLOOR_DBFS / 20)
    l0, l1 = (int(round(t * RATE)) for t in LOUD_NOISE)
    if any(seg["start_sample"] < l1 and seg["end_sample"] > l0 for seg in speech):
        raise SystemExit("the loud noise stretch overlaps speech")
    ramp = np.minimum(1.0, np.minimum(np.arange(l1 - l0), np.arange(l1 - l0)[::-1]) / (0.02 * RATE))
    loud = (rng.standard_normal(l1 - l0) + pink(rng, l1 - l0)) / np.sqrt(2.0)
    mix[l0:l1] += loud * ramp * 10 ** (LOUD_DBFS / 20)

    pcm = np.clip(np.round(mix * 32767.0), -32768, 32767).astype("<i2")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())

    seg_s = [[round(s["start_sample"] / RATE, 4), round(s["end_sample"] / RATE, 4)] for s in speech]
    edges = [0.0] + [t for seg in seg_s for t in seg] + [round(n_total / RATE, 4)]
    no_speech = [[edges[i], edges[i + 1]] for i in range(0, len(edges), 2) if edges[i + 1] > edges[i]]
    truth = {
        "file": out.name,
        "sample_rate": RATE,
        "samples": n_total,
        "duration_s": round(n_total / RATE, 4),
        "speech": seg_s,
        "no_speech": no_speech,
        "loud_noise": list(LOUD_NOISE),
        "noise_floor_dbfs": FLOOR_DBFS,
        "loud_noise_dbfs": LOUD_DBFS,
        "speech_peak_dbfs": SPEECH_PEAK_DBFS,
        "sentences": [{k: s[k] for k in ("voice", "wpm", "text")} for s in speech],
        "seed": args.seed,
        "generator": "scripts/make_speech.py",
        "tools": {"espeak-ng": tool_version(["espeak-ng", "--version"]), "sox": tool_version(["sox", "--version"])},
    }
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in truth.items())
    out.with_suffix(".json").write_text("{\n" + body + "\n}\n")
    print(f"wrote {out} ({out.stat().st_size} bytes) and {out.with_suffix('.json').name}: speech {seg_s}")


if __name__ == "__main__":
    main()
