"""wavec/serve.py and `wavec serve`: a cohort served on a fixed beat clock from recorded inputs.

The serve path is numerically `Profile.run` on the frames actually used (silence where a frame missed its
beat) with resets at the admit beats; late frames are flagged; a generous clock has nothing late and a clock
faster than the compute has every beat late. The cuda backend's publish-ahead path runs against the fake
driver of test_cuda.py (no GPU needed), and, marked ``gpu``, on the real kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import wavec
from wavec.cli import main as wavec_main
from wavec.errors import WavecError
from wavec.serve import (
    IDLE,
    REAL,
    SUBSTITUTED,
    BeatClock,
    CudaBackend,
    Feed,
    Server,
    SessionSchedule,
    check_fetch,
    copy_silencing,
    parse_schedule,
    serve,
)
from wavec.targets.cuda import runtime

needs_gpu = pytest.mark.skipif(not runtime.gpu_available(), reason="no CUDA GPU with cuda-bindings here")

BEATS = 12
# slot 0 stays; slot 1 joins late (3), drops (6) and rejoins (8); slot 2 drops at 5; slot 3 joins at 2
SCHEDULE = {
    "sessions": [
        [{"join": 0}],
        [{"join": 3, "leave": 6}, {"join": 8}],
        [{"join": 0, "leave": 5}],
        [{"join": 2}],
    ],
    "late_frames": [
        {"beat": 1, "session": 0, "delay_us": 500},
        {"beat": 4, "session": 1, "delay_us": 2000},
        {"beat": 8, "session": 1, "delay_us": 10},  # the rejoin beat's frame is late too
        {"beat": 9, "session": 3, "delay_us": 0.5},
        {"beat": 6, "session": 1, "delay_us": 100},  # idle then: stays idle
        {"beat": 7, "session": 0, "delay_us": -300},  # early: real
    ],
}
LATE = {(1, 0), (4, 1), (8, 1), (9, 3)}


CARRIED = Path(__file__).resolve().parent.parent / ".device" / "serve-gru_stack-4"


@pytest.fixture(scope="module")
def profile():
    """gru_stack:tiny for 4 sessions on 4 workers: compiled here, or, where xDSL is missing (the GPU machine),
    loaded from .device/serve-gru_stack-4 (scripts/device_profiles.py writes it)."""
    try:
        from wavec.driver import compile_graph
    except ImportError:
        if not CARRIED.is_dir():
            pytest.skip(f"no xDSL to compile the profile and no {CARRIED}: run scripts/device_profiles.py where xDSL is")
        return wavec.load(CARRIED)
    from wavec import zoo
    from wavec.frontends.builder.lower import lower_model

    return compile_graph(lower_model(zoo.get("gru_stack:tiny")), sessions=4, workers=4)


def recorded(profile, beats=BEATS, seed=7):
    rng = np.random.default_rng(seed)
    return {spec["name"]: (rng.standard_normal((beats, profile.sessions, *spec["shape"])) + 0.5).astype(np.float32)
            for spec in profile.meta["inputs"]}


def expected_masks():
    active = np.zeros((BEATS, 4), bool)
    active[:, 0] = True
    active[3:6, 1] = active[8:, 1] = True
    active[:5, 2] = True
    active[2:, 3] = True
    admitted = np.zeros((BEATS, 4), bool)
    for b, s in [(0, 0), (3, 1), (8, 1), (0, 2), (2, 3)]:
        admitted[b, s] = True
    return active, admitted


def reference(profile, frames, status, admitted, backend="interp"):
    """`Profile.run` on the frames the server used, resetting at the admit beats only."""
    keep = status == REAL
    used = {k: np.where(keep.reshape(keep.shape + (1,) * (v.ndim - 2)), v, 0).astype(np.float32)
            for k, v in frames.items()}
    return profile.run(used, backend=backend, reset=admitted)


# -- the serve path is Profile.run on the frames used ----------------------------------------------------


def test_serve_equals_run_on_the_frames_used_with_admits_drops_and_late_frames(profile):
    frames = recorded(profile)
    schedule, late = parse_schedule(SCHEDULE, profile.sessions, "schedule")
    result = serve(profile, frames, beat_ms=0.001, schedule=schedule, late_frames=late)
    active, admitted = expected_masks()
    want_status = np.where(active, REAL, IDLE)
    for b, s in LATE:
        want_status[b, s] = SUBSTITUTED
    np.testing.assert_array_equal(result.input_status, want_status)
    np.testing.assert_array_equal(result.admitted, admitted)
    dropped = np.zeros_like(admitted)
    dropped[6, 1] = dropped[5, 2] = True
    np.testing.assert_array_equal(result.dropped, dropped)

    want = reference(profile, frames, result.input_status, admitted)
    for name, got in result.outputs.items():
        np.testing.assert_array_equal(got[active], want[name][active])
        assert np.isnan(got[~active]).all()  # idle slots' outputs are not delivered
    # the substitution mattered: with the recorded frame instead, beat 1 of slot 0 would differ
    plain = profile.run(frames, reset=admitted)
    assert not np.array_equal(plain["y"][1, 0], result.outputs["y"][1, 0])
    assert np.array_equal(plain["y"][0, 0], result.outputs["y"][0, 0])


def test_reset_flags_of_wavec_run_inputs_mean_rejoin(profile):
    frames = recorded(profile, beats=5)
    reset = np.zeros((5, 4), bool)
    reset[2, 1] = reset[3, 3] = True
    result = serve(profile, frames, beat_ms=0.001, reset=reset)
    assert (result.input_status == REAL).all()
    want = profile.run(frames, reset=reset)
    np.testing.assert_array_equal(result.outputs["y"], want["y"])
    assert result.admitted[2, 1] and result.admitted[3, 3] and result.admitted[0].all()
    assert not result.dropped.any()


# -- the clock -------------------------------------------------------------------------------------------


def test_generous_clock_has_nothing_late(profile):
    result = serve(profile, recorded(profile, beats=4), beat_ms=150)
    assert not result.late.any(), result.lateness_us
    assert (result.lateness_us < 0).all()
    assert (result.published_us >= result.start_us).all()
    np.testing.assert_allclose(result.start_us, 150e3 * np.arange(4))
    np.testing.assert_allclose(result.deadline_us, 150e3 * np.arange(1, 5))
    assert (result.compute_us > 0).all()
    assert result.summary()["late_beats"] == 0


def test_clock_faster_than_compute_has_every_beat_late(profile):
    result = serve(profile, recorded(profile, beats=6), beat_ms=0.002, deadline_ms=0.001)
    assert result.late.all() and (result.lateness_us > 0).all()
    np.testing.assert_allclose(result.deadline_us - result.start_us, 1.0)
    s = result.summary()
    assert s["late_beats"] == 6 and s["late_outputs"] == 24 and s["substituted_frames"] == 0
    assert s["compute_us"]["max"] >= s["compute_us"]["p99"] >= s["compute_us"]["p50"] > 0
    # late beats still run in order, each after the previous finished (interp is synchronous)
    assert (result.published_us[1:] >= result.done_us[:-1]).all()


def test_beat_clock():
    clock = BeatClock(32000.0, deadline_us=20000.0)
    assert (clock.start_us(3), clock.deadline_us(3)) == (96000.0, 116000.0)
    assert BeatClock(500.0).deadline_us(0) == 500.0
    clock.start()
    clock.sleep_until(2000.0)
    assert 2000.0 <= clock.now_us() < 50000.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(WavecError, match="positive"):
            BeatClock(bad)


@pytest.mark.parametrize("doc, message", [
    ([], "\"sessions\" list"),
    ({"sessions": [[{"join": 0}]] * 5}, "5 sessions; the profile has 4"),
    ({"sessions": [[{"join": 3, "leave": 3}]]}, "leave 3 is not after join 3"),
    ({"sessions": [[{"join": 0, "leave": 5}, {"join": 4}]]}, "before the previous span has left"),
    ({"sessions": [[{"join": 0}, {"join": 9}]]}, "before the previous span has left"),
    ({"sessions": [[{"join": -1}]]}, "join is -1"),
    ({"sessions": [[{"start": 0}]]}, "expected {\"join\": B}"),
    ({"sessions": [], "late_frames": [{"beat": 0, "session": 4, "delay_us": 1}]}, "slots 0..3"),
    ({"sessions": [], "late_frames": [{"beat": 0, "session": 0}]}, "expected {\"beat\""),
    ({"sessions": [], "late": []}, "unknown key 'late'"),
])
def test_schedule_errors_name_the_entry(doc, message):
    with pytest.raises(WavecError, match="^sched.json") as e:
        parse_schedule(doc, 4, "sched.json")
    assert message in str(e.value)


def test_import_needs_numpy_alone():
    code = ("import sys, wavec.serve, wavec.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cuda', 'xdsl')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the cuda backend's publish-ahead path against test_cuda's fake driver ----------------------------------


def fake_cuda(monkeypatch, tmp_path, sessions: int):
    """test_cuda's built-in program for ``sessions`` sessions on its fake driver (a host thread plays the
    kernel): (profile, driver, cubin path)."""
    from test_cuda import FakeDriver, build_test_profile

    small, _ = build_test_profile(sessions=sessions)
    fake = FakeDriver(small)
    monkeypatch.setattr(runtime, "_cu", fake)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    return small, fake, cubin


def test_cuda_backend_publishes_ahead_against_a_fake_driver(monkeypatch, tmp_path):
    pytest.importorskip("wavec.targets.interp")
    from test_cuda import random_run

    small, fake, cubin = fake_cuda(monkeypatch, tmp_path, 5)
    frames, _ = random_run(small, 8)
    schedule = SessionSchedule([[(0, None)], [(2, 5), (6, None)], [(0, 3)], [], [(1, None)]])
    feed = Feed.with_late_frames(frames, [(3, 0, 50.0), (6, 1, 1.0)])
    backend = CudaBackend(small, cubin=cubin, timeout_s=20)
    staged_in_place = []
    publish = backend.session.publish

    def spy(frames, reset=None):
        staged_in_place.append(all(frames[k] is v for k, v in backend.session._input_views.items()))
        publish(frames, reset)

    monkeypatch.setattr(backend.session, "publish", spy)
    try:
        result = Server(small, BeatClock(1.0), backend).run(feed, schedule)
    finally:
        backend.close()
    assert staged_in_place == [True] * 8  # the server gathered every beat straight into the pinned staging
    assert not fake.kernel.is_alive()
    active, admitted, _ = schedule.masks(8)
    want = reference(small, frames, result.input_status, admitted)
    for name, got in result.outputs.items():
        np.testing.assert_array_equal(got[active], want[name][active])
    assert result.input_status[3, 0] == SUBSTITUTED and result.input_status[6, 1] == SUBSTITUTED
    assert result.late.all()
    # some beat went in while the one before still ran: the host wrote b+1's half during b
    assert (result.published_us[1:] < result.done_us[:-1]).any()
    assert len(backend.session.latencies_us) == 8 and min(backend.session.latencies_us) > 0


def test_cuda_backend_fetches_only_the_named_outputs_bytes(monkeypatch, tmp_path):
    """A server that fetches one output copies that output's span of the output half back, not the rest
    (a state's update stays on the device), and delivers it as the full fetch does."""
    pytest.importorskip("wavec.targets.interp")
    from test_cuda import random_run

    small, fake, cubin = fake_cuda(monkeypatch, tmp_path, 5)
    frames, _ = random_run(small, 4)
    copied = []
    dtoh = fake.cuMemcpyDtoHAsync
    monkeypatch.setattr(fake, "cuMemcpyDtoHAsync", lambda dst, src, n, stream: (copied.append(n), dtoh(dst, src, n, stream))[1])
    results = {}
    for fetch in (None, ["lse"]):
        backend = CudaBackend(small, cubin=cubin, timeout_s=20)
        try:
            results[str(fetch)] = Server(small, BeatClock(1.0), backend, fetch).run(Feed(frames), SessionSchedule.always(5))
        finally:
            backend.close()
    every, one = results["None"], results["['lse']"]
    assert list(one.outputs) == ["lse"] and len(every.outputs) == len(small.meta["outputs"]) > 1
    np.testing.assert_array_equal(one.outputs["lse"], every.outputs["lse"])
    lse = next(o for o in small.meta["outputs"] if o["name"] == "lse")
    assert (lse["shape"], lse["session_stride"]) == ([4], 16)  # the built-in program's layout, by hand:
    assert copied[4:] == [4 * 16 + 16] * 4  # 4 session strides to the last session's row, then its 4 floats
    assert copied[0] > copied[4]
    for fetch, message in ((["nope"], "--fetch 'nope': not an output"), ("lse", "not one string"),
                           ([], "no output named"), ([1], "--fetch 1: not an output")):
        with pytest.raises(WavecError, match=message):
            Server(small, BeatClock(1.0), None, fetch)
    assert check_fetch(small, iter(["lse", "out"])) == ["out", "lse"]  # read once, in the profile's order


def test_cuda_session_refuses_to_publish_two_beats_ahead(monkeypatch, tmp_path):
    from test_cuda import random_run

    small, fake, cubin = fake_cuda(monkeypatch, tmp_path, 2)
    fake._kernel = lambda: None  # a kernel that never finishes a beat
    frames, _ = random_run(small, 3)
    session = runtime.CudaSession(small, cubin=cubin, timeout_s=1)
    try:
        session.publish({k: v[0] for k, v in frames.items()})
        session.publish({k: v[1] for k, v in frames.items()})
        assert not session.ready()
        with pytest.raises(WavecError, match="cannot be published before beat 0 is collected"):
            session.publish({k: v[2] for k, v in frames.items()})
    finally:
        session._launched = False  # the fake kernel has returned already
        session.close()


def test_cuda_session_passes_no_reset_at_beat_0(monkeypatch, tmp_path):
    """Beat 0's reset flags are moot (every slot starts at its initial state, uploaded at load) and reach the
    kernel as zeros; later beats' flags reach it as given. test_cuda_backend_publishes_ahead_against_a_fake_driver
    checks the outputs with a slot admitted at beat 0 against the reference."""
    from test_cuda import random_run

    small, fake, cubin = fake_cuda(monkeypatch, tmp_path, 3)
    frames, _ = random_run(small, 2)
    flags = np.array([True, False, True])
    with runtime.CudaSession(small, cubin=cubin, timeout_s=20) as session:
        session.publish({k: v[0] for k, v in frames.items()}, flags)
        assert (session._reset_view == 0).all()
        session.collect()
        session.publish({k: v[1] for k, v in frames.items()}, flags)
        assert (session._reset_view == flags).all()
        session.collect()


# -- the command ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(profile, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    profile.save(root / "g.profile")
    np.savez(root / "in.npz", **recorded(profile))
    (root / "sessions.json").write_text(json.dumps(SCHEDULE))
    return root


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wavec: error: "), err
    return lines[0]


def test_cli_serve_writes_the_records(served, tmp_path, capsys, profile):
    out, npz = tmp_path / "records.jsonl", tmp_path / "out.npz"
    args = ["serve", "--profile", str(served / "g.profile"), "--beat-ms", "0.001", "--inputs", str(served / "in.npz"),
            "--schedule", str(served / "sessions.json"), "--outputs", str(npz), "-o", str(out)]
    assert wavec_main(args) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}:" in printed and "12 late beats, 4 substituted frames" in printed
    records = [json.loads(line) for line in out.read_text().splitlines()]
    header, summary = records[0], records[-1]
    assert header["record"] == "serve" and header["format"] == "wavec-serve-records/1"
    assert (header["beats"], header["sessions"], header["beat_us"], header["outputs"]) == (12, 4, 1.0, ["y"])
    beats = [r for r in records if r["record"] == "beat"]
    rows = [r for r in records if r["record"] == "session"]
    assert [r["beat"] for r in beats] == list(range(12)) and len(rows) == 48
    assert all(r["late"] and r["lateness_us"] > 0 for r in beats)
    assert beats[8]["admitted"] == [1] and beats[6]["dropped"] == [1] and beats[5]["dropped"] == [2]
    subst = {(r["beat"], r["session"]) for r in rows if r["input"] == "substituted"}
    assert subst == LATE
    idle = [r for r in rows if r["input"] == "idle"]
    assert all(r["output"] == "idle" and r["lateness_us"] is None for r in idle)
    assert all(r["output"] == "late" for r in rows if r["input"] != "idle")
    assert summary["record"] == "summary" and summary["substituted_frames"] == 4 and summary["late_beats"] == 12
    active, admitted = expected_masks()
    status = np.where(active, REAL, IDLE)
    for b, s in LATE:
        status[b, s] = SUBSTITUTED
    got = np.load(npz)["y"]
    np.testing.assert_array_equal(got[active], reference(profile, recorded(profile), status, admitted)["y"][active])
    assert np.isnan(got[~active]).all()


@pytest.mark.parametrize("change, message", [
    ({"--beat-ms": "0"}, "--beat-ms 0: the beat period must be a positive number"),
    ({"--beat-ms": "-5"}, "--beat-ms -5: the beat period must be a positive number"),
    ({"--beat-ms": "fast"}, "--beat-ms fast: not a number"),
    ({"--beat-ms": "nan"}, "must be a positive number"),
    ({"--deadline-ms": "0"}, "--deadline-ms 0: the deadline must be"),
    ({"--inputs": "missing.npz"}, "missing.npz: no such inputs file"),
    ({"--inputs": "bad_shape.npz"}, "bad_shape.npz: input 'x' has shape [12, 4, 5]; expected [beats, 4, 16]"),
    ({"--inputs": "with_reset.npz"}, "has reset flags and --schedule"),
    ({"--profile": "nowhere"}, "nowhere: not a wavec profile"),
    ({"--schedule": "missing.json"}, "missing.json: no such schedule file"),
    ({"--schedule": "bad.json"}, "bad.json: not valid JSON"),
    ({"--schedule": "overlap.json"}, "overlap.json: sessions[0][1]: joins at 2 before the previous span has left"),
    ({"--beats": "13"}, "--beats 13: "),
    ({"--beats": "0"}, "--beats 0: serve at least one beat"),
    ({"-o": "nodir/records.jsonl"}, "does not exist"),
    ({"--outputs": "records.jsonl"}, "is also the records file"),
    ({"--fetch": "stateN"}, "--fetch 'stateN': not an output of the profile; its outputs are y"),
    ({"--fetch": ""}, "--fetch '': not an output of the profile"),
])
def test_cli_serve_errors_are_one_line_and_write_nothing(served, tmp_path, capsys, monkeypatch, profile, change, message):
    monkeypatch.chdir(tmp_path)
    frames = recorded(profile)
    np.savez("bad_shape.npz", x=frames["x"][..., :5])
    np.savez("with_reset.npz", x=frames["x"], reset=np.zeros((12, 4), bool))
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "overlap.json").write_text(json.dumps({"sessions": [[{"join": 0}, {"join": 2}]]}))
    opts = {"--profile": str(served / "g.profile"), "--beat-ms": "5", "--inputs": str(served / "in.npz"),
            "--schedule": str(served / "sessions.json"), "-o": "records.jsonl"}
    opts.update(change)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert wavec_main(["serve", *[x for kv in opts.items() for x in kv]]) == 1
    assert message in _error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no records, no temporary leftovers


# -- on the GPU -----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_cuda_serve_equals_interp_run_on_the_frames_used(profile):
    frames = recorded(profile)
    schedule, late = parse_schedule(SCHEDULE, profile.sessions, "schedule")
    active, admitted = expected_masks()
    fast = serve(profile, frames, beat_ms=0.001, schedule=schedule, late_frames=late, backend="cuda")
    want = reference(profile, frames, fast.input_status, admitted)
    for name, got in fast.outputs.items():
        np.testing.assert_allclose(got[active], want[name][active], rtol=1e-4, atol=1e-4)
        assert np.isnan(got[~active]).all()
    assert {(int(b), int(s)) for b, s in zip(*np.nonzero(fast.input_status == SUBSTITUTED))} == LATE
    assert fast.late.all() and (fast.lateness_us > 0).all()
    calm = serve(profile, frames, beat_ms=20, schedule=schedule, late_frames=late, backend="cuda")
    assert not calm.late.any(), calm.lateness_us
    for name, got in calm.outputs.items():
        np.testing.assert_array_equal(got[active], fast.outputs[name][active])


@pytest.mark.parametrize("sessions, chunk_bytes", [(1, 4), (7, 4), (64, 4 << 20), (1000, 1000)])
def test_gather_split_over_threads_copies_and_silences_every_row(sessions, chunk_bytes):
    rng = np.random.default_rng(sessions)
    source = rng.standard_normal((sessions, 3, 5), dtype=np.float32)
    silent = rng.random(sessions) < 0.3
    frame = np.full_like(source, np.nan)
    copy_silencing(frame, source, silent, chunk_bytes=chunk_bytes)
    np.testing.assert_array_equal(frame[~silent], source[~silent])
    assert not frame[silent].any()


def test_cli_serve_leaves_neither_file_when_the_outputs_write_fails(served, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    args = ["serve", "--profile", str(served / "g.profile"), "--beat-ms", "5", "--inputs", str(served / "in.npz"),
            "--outputs", "out.npz", "-o", "records.jsonl"]
    assert wavec_main(args) == 1
    assert "No space left on device" in _error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("source_shape, silent, message", [
    ((4, 3), np.array([0, 1, 0, 1]), None),  # 0/1 flags are flags, not row indices
    ((3,), np.zeros(4, bool), "must match the frame"),
    ((4, 3), np.zeros(3, bool), "must match the frame"),
])
def test_copy_silencing_reads_flags_and_refuses_mismatched_shapes(source_shape, silent, message):
    frame = np.full((4, 3), np.nan, np.float32)
    source = np.arange(np.prod(source_shape), dtype=np.float32).reshape(source_shape) + 1
    if message:
        with pytest.raises(ValueError, match=message):
            copy_silencing(frame, source, silent)
        return
    copy_silencing(frame, source, silent, chunk_bytes=1)
    np.testing.assert_array_equal(frame[[0, 2]], source[[0, 2]])
    assert not frame[[1, 3]].any()
