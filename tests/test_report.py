"""The report's schedule facts: the modeled timeline replayed from the payloads alone agrees with the
model wpk-schedule planned with, and the Gantt picture is written as a PNG."""

from __future__ import annotations

import numpy as np
import pytest

import wavec
from wavec.analysis.timeline import model_timeline
from wavec.cli import main as wavec_main
from wavec.driver import default_pipeline
from wavec.hw import load_hw
from wavec.models import silero_vad_path


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    profile = wavec.compile(silero_vad_path(), sessions=8, bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")])
    return profile, profile.save(tmp_path_factory.mktemp("r") / "vad.profile")


def test_replayed_timeline_matches_the_schedulers_model(silero):
    profile, _ = silero
    timeline = model_timeline(profile, load_hw("h200"))
    assert timeline.beat_us == pytest.approx(profile.meta["schedule"]["beat_us"], abs=1e-3)  # meta keeps 3 decimals
    # Every task starts after its worker's previous task ends.
    for begin, end in profile.meta["worker_tasks"]:
        assert np.all(timeline.start_us[begin + 1 : end] >= timeline.end_us[begin : end - 1] - 1e-9)


def test_gantt_png(silero, tmp_path, capsys):
    _, directory = silero
    out = tmp_path / "schedule.png"
    assert wavec_main(["report", str(directory), "--gantt", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert "modeled beat" in capsys.readouterr().out


def test_gantt_wants_a_png_name(silero, tmp_path, capsys):
    _, directory = silero
    assert wavec_main(["report", str(directory), "--gantt", str(tmp_path / "schedule.svg")]) == 1
    assert "name the file *.png" in capsys.readouterr().err


def test_fusion_saving_is_what_the_unfused_program_moves_more(silero):
    """The saving wave-fuse records equals the difference the cost model measures between the fused and
    the unfused programs: two independent counts of the same bytes."""
    fused, _ = silero
    unfused = wavec.compile(silero_vad_path(), sessions=8, bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")],
                            pipeline="wave-expand-pow,wave-cohort{sessions=8},wave-to-wpk{workers=132},wpk-arena,"
                                     "wpk-schedule{workers=132},wpk-payload")
    saved = fused.report["fusion_saved_bytes_per_beat"]
    assert saved > 0
    assert unfused.report["bytes_per_beat"] - fused.report["bytes_per_beat"] == saved


def test_measured_task_costs_keep_short_tasks_off_a_busy_worker():
    """wpk-schedule charges each task its opcode's measured fixed cost (the target's measured.task_us). At
    one Silero session the decoder's CONV then takes microseconds, so the new state's output copy (ready before
    it) goes to other workers instead of queuing behind it, as it did at a flat 0.3 us."""
    from wavec.analysis.timeline import phase_of_rows

    def worker_of(profile, phase_name):
        names = [p["name"] for p in profile.meta["phases"]]
        rows = np.flatnonzero(phase_of_rows(profile) == names.index(phase_name))
        return {w for w, (b, e) in enumerate(profile.meta["worker_tasks"]) for r in rows if b <= r < e}

    kw = dict(sessions=1, bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])
    measured = wavec.compile(silero_vad_path(), **kw)
    flat = wavec.compile(silero_vad_path(), pipeline=default_pipeline(1, 132).replace(
        "wpk-schedule{", "wpk-schedule{task-overhead-us=0.3 "), **kw)
    decoder = [p["name"] for p in measured.meta["phases"] if p["op"] == "wave.conv"][-1]
    assert worker_of(measured, "output_stateN").isdisjoint(worker_of(measured, decoder))
    assert worker_of(flat, "output_stateN") & worker_of(flat, decoder)  # queued behind the CONV


@pytest.mark.parametrize("hw, pipeline_option", [("h100", ""), ("h200", "task-overhead-us=0.3 handoff-us=2.0 ")],
                         ids=["h100", "options"])
def test_the_modeled_timeline_replays_the_costs_the_schedule_charged(hw, pipeline_option):
    """The timeline charges what wpk-schedule charged (profile.json's schedule.task_us and handoff_us): the
    target's measured costs for any --hw (h100 measured none: the 0.3 us default), and the pass's options
    when given; the default pipeline hands wpk-schedule the target."""
    kw = dict(sessions=1, bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")], hw=hw)
    pipeline = default_pipeline(1, 132, hw).replace("wpk-schedule{", "wpk-schedule{" + pipeline_option)
    profile = wavec.compile(silero_vad_path(), pipeline=pipeline, **kw)
    schedule = profile.meta["schedule"]
    assert f"hw={hw}" in pipeline and schedule["task_us"]["conv"] == 0.3  # h200 measured 6.5
    assert model_timeline(profile, load_hw(hw)).beat_us == pytest.approx(schedule["beat_us"], abs=1e-3)


@pytest.mark.parametrize("granularity", ["tile", "phase"])
def test_the_schedule_and_the_report_count_the_same_grid_wide_waits(granularity):
    """profile.json's schedule.phase_waits (wpk-schedule) and the report's grid_waits (counted from the
    payloads alone) agree: at phase granularity every wait is on a whole phase (a trial found 0 against 488)."""
    from wavec.report import wait_counts

    pipeline = default_pipeline(4, 132).replace("wpk-schedule{", f"wpk-schedule{{granularity={granularity} ")
    profile = wavec.compile(silero_vad_path(), sessions=4, bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")], pipeline=pipeline)
    counts = wait_counts(profile)
    assert profile.meta["schedule"]["phase_waits"] == counts["grid_waits"]
    if granularity == "phase":
        assert counts["grid_waits"] > 0
