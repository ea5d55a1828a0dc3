"""Issue 2's acceptance on the real Silero VAD: compile for a cohort, serve real speech with sessions
(re)joining at staggered beats, and match onnxruntime running the original model with the same
per-session state; `wavec verify` proves the saved profile and rejects corrupted ones.

Tolerance: max abs error <= 1e-4 on `output` and `stateN` (float32 kernel bodies vs float32 onnxruntime).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from wavec.audio import cohort_schedule
from wavec.cli import main as wavec_main
from wavec.models import silero_vad_path
from wavec.payload import PAYLOAD_DTYPE
from wavec.reference import onnx_stateful_reference

TOLERANCE = 1e-4
SESSIONS, BEATS = 64, 200
COMPILE_FLAGS = ["--bind", "sr=16000", "--frame", "input=576", "--state", "state=stateN"]
COHORT_AXES = {"input": 0, "state": 1, "output": 0, "stateN": 1}


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("silero") / "vad.profile"
    assert wavec_main(["compile", str(silero_vad_path()), "--sessions", str(SESSIONS), *COMPILE_FLAGS, "-o", str(out)]) == 0
    return out


@pytest.mark.slow
def test_interp_matches_onnxruntime_on_a_staggered_cohort(profile_dir, tmp_path):
    frames, reset = cohort_schedule(SESSIONS, BEATS, seed=11)
    assert reset.sum() > SESSIONS, "some sessions must rejoin mid-stream"
    assert len(np.unique(np.argmax(reset, axis=0))) > 10, "joins must be staggered"
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, input=frames, reset=reset)
    assert wavec_main(["run", str(profile_dir), "--backend", "interp", "--inputs", str(inputs), "-o", str(outputs)]) == 0
    want = onnx_stateful_reference(silero_vad_path(), {"input": frames}, reset, states=[("state", "stateN")],
                                   bindings={"sr": 16000}, cohort_axes=COHORT_AXES)
    with np.load(outputs) as got:
        assert got["output"].shape == (BEATS, SESSIONS, 1)
        assert got["stateN"].shape == (BEATS, SESSIONS, 2, 128)
        for name in ("output", "stateN"):
            err = float(np.abs(got[name] - want[name]).max())
            assert err <= TOLERANCE, f"{name}: max abs error {err:.2e}"
        # The speech is really there: some sessions hear speech at some beats, none everywhere.
        assert 0.05 < float((got["output"] > 0.5).mean()) < 0.95


def test_saved_profile_verifies_and_reports(profile_dir, capsys):
    assert wavec_main(["verify", str(profile_dir)]) == 0
    assert "verified" in capsys.readouterr().out
    assert wavec_main(["report", str(profile_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sessions"] == SESSIONS and report["tasks"] > 0
    assert report["flops_per_beat"] > 0 and report["floor_us"]["beat"] > 0
    assert report["arena_bytes"]["act"] >= report["act_lower_bound_bytes"]


def _corrupt(profile_dir, tmp_path, mutate) -> str:
    bad = tmp_path / "bad.profile"
    shutil.copytree(profile_dir, bad)
    records = np.fromfile(bad / "payloads.bin", PAYLOAD_DTYPE)
    mutate(records)
    records.tofile(bad / "payloads.bin")
    return str(bad)


def test_verify_rejects_a_dropped_dependency(profile_dir, tmp_path, capsys):
    """Dropping a wait the data needs is caught; a wait the verifier lets go must be truly redundant:
    the program gives the same outputs without it, whatever order the interpreter picks."""
    import wavec
    from wavec.errors import VerificationError
    from wavec.verify import verify_profile

    clean = wavec.compile(silero_vad_path(), sessions=4, bindings={"sr": 16000}, frames={"input": 576},
                          states=[("state", "stateN")])
    frames, reset = cohort_schedule(4, 2, seed=5)
    expected = clean.run({"input": frames}, reset=reset)
    waiting = np.flatnonzero(clean.payloads["n_waits"] > 0)
    caught, caught_row = 0, None
    for row in np.random.default_rng(0).choice(waiting, 12, replace=False):
        bad = wavec.Profile(dict(clean.meta), clean.payloads.copy(), clean.params, clean.weights)
        bad.payloads["n_waits"][row] = 0
        try:
            verify_profile(bad)
        except VerificationError:
            caught, caught_row = caught + 1, row
            continue
        for seed in range(3):
            got = bad.run({"input": frames}, reset=reset, seed=seed)
            assert all(np.array_equal(got[k], expected[k]) for k in expected), f"row {row}: accepted but wrong"
    assert caught >= 4, f"only {caught} of 12 dropped waits were caught"

    def drop_caught_wait(records):
        records["n_waits"][caught_row] = 0

    clean.save(tmp_path / "small.profile")
    assert wavec_main(["verify", _corrupt(tmp_path / "small.profile", tmp_path, drop_caught_wait)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("wavec: error:") and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_verify_rejects_a_moved_offset(profile_dir, tmp_path, capsys):
    def move_output(records):
        writers = np.flatnonzero((records["arenas"] >> 16 & 0xF) == 2)  # output operand in the act arena
        records["offset"][writers[len(writers) // 3], 4] += 16

    assert wavec_main(["verify", _corrupt(profile_dir, tmp_path, move_output)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("wavec: error:") and "Traceback" not in err


def test_payload_layout_json(capsys):
    assert wavec_main(["payload-layout", "--json"]) == 0
    layout = json.loads(capsys.readouterr().out)
    assert layout["bytes"] == 128
    end = max(f["offset"] + f["size"] for f in layout["fields"])
    assert end == 128


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compile", "missing.onnx", "--sessions", "4", "-o", "x"], "missing.onnx: no such model file"),
        (["run", "no-such-profile", "--inputs", "x.npz", "-o", "y.npz"], "not a wavec profile"),
        (["verify", "no-such-profile"], "not a wavec profile"),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys):
    assert wavec_main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_compile_rejects_a_bad_binding(capsys, tmp_path):
    assert wavec_main(["compile", str(silero_vad_path()), "--sessions", "2", "--bind", "sr", "-o", str(tmp_path / "p")]) == 1
    assert "--bind 'sr': expected NAME=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("wavec.targets.cuda.runtime", fromlist=["gpu_available"]).gpu_available(),
                    reason="no CUDA GPU with cuda-bindings here")
def test_cuda_matches_onnxruntime(profile_dir):
    import wavec

    profile = wavec.load(profile_dir)
    frames, reset = cohort_schedule(SESSIONS, 50, seed=12)
    got = profile.run({"input": frames}, backend="cuda", reset=reset)
    want = onnx_stateful_reference(silero_vad_path(), {"input": frames}, reset, states=[("state", "stateN")],
                                   bindings={"sr": 16000}, cohort_axes=COHORT_AXES)
    for name in ("output", "stateN"):
        assert float(np.abs(got[name] - want[name]).max()) <= TOLERANCE, name
