"""bench/conv.py's profiles (Silero's five convolutions as one-conv ONNX models) compile and compute what
onnxruntime computes: the interpreter on fresh random frames, float32, 1e-5 absolute. Its GPU run needs a
GPU and torch and is not run here; its argument errors come before any work."""

from __future__ import annotations

import numpy as np
import pytest

from bench_loader import load_bench

ort = pytest.importorskip("onnxruntime")


def _bench():
    return load_bench("conv")


@pytest.mark.parametrize("shape", ["stft", "enc2"])
def test_a_conv_profile_matches_onnxruntime(shape, tmp_path):
    import wavec

    bench = _bench()
    assert bench.main(["compile", "--out", str(tmp_path), "--sessions", "3", "--shapes", shape]) == 0
    profile = wavec.load(tmp_path / f"{shape}-3")
    c_in, length = bench.SHAPES[shape][0], bench.SHAPES[shape][2]
    frames = np.random.default_rng(9).standard_normal((2, 3, c_in, length)).astype(np.float32)
    got = profile.run({"x": frames}, backend="interp")["y"]
    runtime = ort.InferenceSession(str(tmp_path / f"{shape}.onnx"), providers=["CPUExecutionProvider"])
    for b in range(len(frames)):
        np.testing.assert_allclose(got[b], runtime.run(None, {"x": frames[b]})[0], rtol=0, atol=1e-5)


def test_a_bad_set_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _bench().main(["run", "--out", str(tmp_path), "--set", "kTiledGemm"])
    assert stop.value.code == 2 and "write NAME=VALUE" in capsys.readouterr().err
