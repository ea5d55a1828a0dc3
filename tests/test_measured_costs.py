"""Scheduling by measured task costs (wpk-schedule's ``task-costs``, `wavec compile --task-costs`): the traced
timeline's per-phase costs (targets/cuda/timeline.py), how wavec.analysis.measured_costs reads and checks them,
and what the schedule does with them. The traces here are synthetic (a GPU's would do the same): every body of
a phase given one length, so what the schedule charges is known."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from test_schedule_insertion import lit_case
from xdsl.parser import Parser

import wavec
from wavec.analysis.measured_costs import load_measured_costs, scaled_to_measured
from wavec.analysis.timeline import model_timeline, phase_of_rows
from wavec.cli import main as wavec_main
from wavec.driver import default_pipeline, run_pipeline, with_task_costs
from wavec.errors import WavecError
from wavec.hw import load_hw
from wavec.models import silero_vad_path
from wavec.registry import make_context
from wavec.targets.cuda.timeline import Timeline, task_gaps_us

SILERO = dict(bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])
GAP_NS = 400


def synthetic_trace(profile, body_ns: dict[str, int], rng) -> np.ndarray:
    """A trace (uint64 [rows, 3], ns) in which each worker runs its tasks back to back, GAP_NS apart, each
    waiting a random while and then running its phase's ``body_ns`` (the model's names)."""
    names = [p["name"] for p in profile.meta["phases"]]
    phase = phase_of_rows(profile)
    trace = np.zeros((len(profile.payloads), 3), np.uint64)
    for begin, end in profile.meta["worker_tasks"]:
        now = 1_000
        for row in range(begin, end):
            wait = int(rng.integers(0, 3_000))
            trace[row] = (now, now + wait, now + wait + body_ns[names[phase[row]]])
            now += wait + body_ns[names[phase[row]]] + GAP_NS
    return trace


def traced_costs(profile, body_ns: dict[str, int], path, beats: int = 3):
    timeline = Timeline()
    rng = np.random.default_rng(5)
    for _ in range(beats):
        timeline.add(profile, synthetic_trace(profile, body_ns, rng))
    path.write_text(json.dumps(timeline.to_json()))
    return path


@pytest.fixture(scope="module")
def silero_8(tmp_path_factory):
    """Silero at 8 sessions by the model, and a timeline that measures its STFT 40 us a task and every other
    phase 3 us."""
    profile = wavec.compile(silero_vad_path(), sessions=8, **SILERO)
    stft = next(p["name"] for p in profile.meta["phases"] if p["op"] == "wave.conv")
    body = {p["name"]: 3_000 for p in profile.meta["phases"]} | {stft: 40_000}
    return profile, stft, traced_costs(profile, body, tmp_path_factory.mktemp("t") / "timeline.json")


def test_the_timeline_records_each_phases_median_body_and_the_gap_between_tasks(silero_8):
    profile, stft, path = silero_8
    costs = json.loads(path.read_text())["phase_costs"]
    assert (costs["model"], costs["sessions"], costs["workers"], costs["beats"]) == ("silero_vad_16k_op15", 8, 132, 3)
    assert costs["task_gap_us"] == pytest.approx(GAP_NS / 1e3)
    assert costs["phases"][stft]["body_p50_us"] == 40.0
    assert {p["name"]: p["tasks"] for p in profile.meta["phases"]} == {k: v["tasks"] for k, v in costs["phases"].items()}
    assert {v["body_p50_us"] for k, v in costs["phases"].items() if k != stft} == {3.0}


def test_the_gaps_are_between_a_workers_consecutive_tasks_only(silero_8):
    profile, _, _ = silero_8
    trace = synthetic_trace(profile, {p["name"]: 1_000 for p in profile.meta["phases"]}, np.random.default_rng(1))
    gaps = task_gaps_us(profile, trace)
    assert len(gaps) == sum(e - b - 1 for b, e in profile.meta["worker_tasks"] if e - b > 1)
    assert np.allclose(gaps, GAP_NS / 1e3)  # not the first task's wait, nor across workers


def test_the_schedule_charges_the_measured_costs_and_records_them(silero_8, tmp_path):
    profile, stft, path = silero_8
    measured = wavec.compile(silero_vad_path(), sessions=8, task_costs=path, **SILERO)
    schedule = measured.meta["schedule"]
    assert schedule["measured_us"]["phases"][stft] == 40.0
    assert schedule["measured_us"]["task_gap_us"] == pytest.approx(GAP_NS / 1e3)
    # Every output depends on the STFT: measured 37 us shorter, the beat is about that much shorter too.
    short = traced_costs(profile, {p["name"]: 3_000 for p in profile.meta["phases"]}, tmp_path / "short.json")
    shorter = wavec.compile(silero_vad_path(), sessions=8, task_costs=short, **SILERO).meta["schedule"]
    assert 30.0 < schedule["beat_us"] - shorter["beat_us"] <= 37.0 + 1e-3
    assert schedule["critical_path_us"] - shorter["critical_path_us"] == pytest.approx(37.0, abs=1e-3)
    # The modeled timeline replays the charged costs from the profile alone.
    assert model_timeline(measured, load_hw("h200")).beat_us == pytest.approx(schedule["beat_us"], abs=1e-3)


def test_measured_costs_never_schedule_worse_than_the_models_placement_under_them(silero_8):
    """Of the measured placement and the model's, the pass keeps the one that ends sooner under the measured
    costs; so the model's own profile, replayed under those costs, never ends sooner."""
    profile, _, path = silero_8
    measured = wavec.compile(silero_vad_path(), sessions=8, task_costs=path, **SILERO)
    replayed = wavec.Profile(meta={**profile.meta, "schedule": {**profile.meta["schedule"],
                                                                 "measured_us": measured.meta["schedule"]["measured_us"]}},
                             payloads=profile.payloads, params=profile.params, weights=profile.weights)
    assert measured.meta["schedule"]["beat_us"] <= model_timeline(replayed, load_hw("h200")).beat_us + 1e-3


def test_each_task_is_scaled_by_its_modeled_share_of_its_phase():
    modeled = np.array([2.0, 2.0, 1.0, 5.0, 10.0])
    phase = np.array([0, 0, 0, 1, 1])
    got = scaled_to_measured(modeled, phase, np.array([8.0, 3.0]))
    assert got.tolist() == [8.0, 8.0, 4.0, 2.0, 4.0]  # the median task of a phase costs what was measured


def write(tmp_path, doc) -> str:
    path = tmp_path / "timeline.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


GOOD = {"model": "m", "sessions": 2, "workers": 4, "task_gap_us": 0.5,
        "phases": {"a": {"tasks": 3, "body_p50_us": 1.5}}}


@pytest.mark.parametrize("doc, message", [
    ("{", "not JSON"),
    ("[" * 200_000, "not JSON"),
    ({"beats": []}, "no 'phase_costs' entry"),
    ({"phase_costs": None}, "no 'phase_costs' entry"),
    ({"phase_costs": {**GOOD, "phases": {"a": {"tasks": 3}}}}, "'phase_costs' is malformed"),
    ({"phase_costs": {k: v for k, v in GOOD.items() if k != "workers"}}, "'phase_costs' is malformed"),
    ({"phase_costs": {**GOOD, "phases": {"a": {"tasks": 3, "body_p50_us": -1.0}}}},
     "phase 'a''s body_p50_us is -1.0 us; it must be a number of microseconds from 0 to 1e+09"),
    ({"phase_costs": {**GOOD, "phases": {"a": {"tasks": 3, "body_p50_us": 10 ** 400}}}}, "phase 'a''s body_p50_us is"),
    ('{"phase_costs": {"model": "m", "sessions": 1e400, "workers": 4, "phases": {}}}',
     "sessions is inf; it must be a whole number"),
    ({"phase_costs": {**GOOD, "phases": {"a": {"tasks": True, "body_p50_us": 1.0}}}},
     "phase 'a''s tasks is True; it must be a whole number"),
    ({"phase_costs": {**GOOD, "sessions": "2"}}, "sessions is '2'"),
    ({"phase_costs": {**GOOD, "task_gap_us": float("nan")}}, "task_gap_us is nan us"),
], ids=["json", "deep", "no-costs", "null-costs", "no-body", "no-workers", "negative", "huge", "inf-sessions",
        "bool-tasks", "text-sessions", "nan-gap"])
def test_a_bad_timeline_file_is_refused_by_name(tmp_path, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(WavecError) as e:
        load_measured_costs(path)
    assert message in str(e.value) and f"task costs {path}: " in str(e.value)


def test_a_missing_timeline_file_is_refused(tmp_path):
    with pytest.raises(WavecError, match="cannot read it"):
        load_measured_costs(tmp_path / "none.json")


@pytest.mark.parametrize("sessions, workers, phases, message", [
    (3, 4, {"a": 3}, "measured for a cohort of 2 on 4 workers, but the program is for a cohort of 3 on 4"),
    (2, 4, {"a": 3, "b": 1}, "no measurement of phase 'b'"),
    (2, 4, {"a": 2}, "phase 'a' had 3 tasks when traced, the program has 2"),
    (2, 4, {}, "phases 'a' are not in the program"),
], ids=["cohort", "missing-phase", "tasks", "extra-phase"])
def test_costs_of_another_program_are_refused(tmp_path, sessions, workers, phases, message):
    costs = load_measured_costs(write(tmp_path, {"phase_costs": GOOD}))
    with pytest.raises(WavecError, match="task costs .*: " + message.replace("(", r"\(")):
        costs.check_matches(sessions, workers, phases)


def test_task_costs_go_to_the_pipelines_wpk_schedule_once(tmp_path):
    path = write(tmp_path, {"phase_costs": GOOD})
    spec = with_task_costs(default_pipeline(2, 4), path)
    assert f'wpk-schedule{{task-costs="{path}" workers=4' in spec
    with pytest.raises(WavecError, match="sets task-costs already"):
        with_task_costs(spec, path)
    with pytest.raises(WavecError, match="has no wpk-schedule"):
        with_task_costs("wave-cohort{sessions=2},wave-to-wpk", path)
    with pytest.raises(WavecError, match="traced from model 'm', but this is 'silero'"):
        with_task_costs(default_pipeline(2, 4), path, "silero")


@pytest.mark.parametrize("name", ["42", 'a"b\\c.json'], ids=["a-number", "quote-and-backslash"])
def test_any_file_name_reaches_the_pass_as_it_is(tmp_path, name):
    """The spec quotes the path and escapes what xDSL's lexer would read as escapes, so the pass opens the very
    file: here one traced for another cohort, which the pass refuses by its name."""
    path = tmp_path / name
    path.write_text(json.dumps({"phase_costs": GOOD}))
    module = Parser(make_context(), lit_case("reset_in_a_gap")).parse_module()
    spec = with_task_costs("wave-to-wpk{workers=2},wpk-arena,wpk-schedule{workers=2}", path)
    with pytest.raises(WavecError, match=f"wpk-schedule: task costs {re.escape(str(path))}: measured for a cohort of 2"):
        run_pipeline(module, spec)


def test_compile_refuses_costs_of_another_cohort_and_writes_nothing(silero_8, tmp_path, capsys):
    _, _, path = silero_8
    out = tmp_path / "vad.profile"
    code = wavec_main(["compile", str(silero_vad_path()), "--sessions", "4", "--bind", "sr=16000", "--frame",
                       "input=576", "--state", "state=stateN", "--task-costs", str(path), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert f"task costs {path}: measured for a cohort of 8 on 132 workers" in err and "Traceback" not in err


def test_the_report_says_the_schedule_charged_measured_costs(silero_8, tmp_path, capsys):
    _, stft, path = silero_8
    out = tmp_path / "vad.profile"
    assert wavec_main(["compile", str(silero_vad_path()), "--sessions", "8", "--bind", "sr=16000", "--frame",
                       "input=576", "--state", "state=stateN", "--task-costs", str(path), "-o", str(out)]) == 0
    assert wavec_main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "charged costs: the measured bodies of 15 phases" in text and "plus 0.4 us between a worker's tasks" in text


def test_at_phase_granularity_measured_costs_change_only_the_modeled_figures(silero_8):
    """Behind a barrier per phase, each phase's tasks go longest first to the worker free earliest: scaling a
    phase's costs by one factor and adding one gap keeps that order, so the payloads are the model's."""
    profile, _, path = silero_8
    pipeline = default_pipeline(8, 132).replace("wpk-schedule{", "wpk-schedule{granularity=phase ")
    model = wavec.compile(silero_vad_path(), sessions=8, pipeline=pipeline, **SILERO)
    measured = wavec.compile(silero_vad_path(), sessions=8, pipeline=pipeline, task_costs=path, **SILERO)
    assert measured.payloads.tobytes() == model.payloads.tobytes()
    assert measured.meta["schedule"]["beat_us"] != model.meta["schedule"]["beat_us"]


@pytest.mark.parametrize("options, granularity", [
    ("max-tile-words=1", "tile"),  # measured costs: auto's limit is measured-max-tile-words (2^30)
    ("max-tile-words=1 measured-max-tile-words=1", "phase"),
], ids=["measured-limit", "both-low"])
def test_with_measured_costs_auto_derives_tiles_up_to_its_own_limit(silero_8, options, granularity):
    profile, _, path = silero_8
    pipeline = default_pipeline(8, 132).replace("wpk-schedule{", f"wpk-schedule{{{options} ")
    model = wavec.compile(silero_vad_path(), sessions=8, pipeline=pipeline, **SILERO)
    measured = wavec.compile(silero_vad_path(), sessions=8, pipeline=pipeline, task_costs=path, **SILERO)
    assert model.meta["schedule"]["granularity"] == "phase"
    assert measured.meta["schedule"]["granularity"] == granularity
    limit = "measured-max-tile-words 1,073,741,824" if granularity == "tile" else "measured-max-tile-words 1"
    assert limit in measured.meta["schedule"]["granularity_why"]


EMPTY_PHASE = """builtin.module attributes {wave.cohort = 1 : i64} {
  func.func @empty_phase() {
    %x = wave.input "x" : tensor<1x8xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<1x8xf32>) -> tensor<1x8xf32>
    %z = wave.input "z" : tensor<1x0xf32>
    %e = wave.ewise "exp(%0)"(%z) : (tensor<1x0xf32>) -> tensor<1x0xf32>
    wave.output "y", %y : tensor<1x8xf32>
    wave.output "e", %e : tensor<1x0xf32>
    func.return
  }
}"""


def test_a_phase_of_no_tasks_needs_no_measurement(tmp_path):
    """A zero-size tensor's phase has no task, so a trace never times it: the costs of the other phases do."""
    costs = {"model": "empty_phase", "sessions": 1, "workers": 2, "task_gap_us": 0.0,
             "phases": {"ewise_1": {"tasks": 1, "body_p50_us": 2.0}, "output_y": {"tasks": 1, "body_p50_us": 3.0}}}
    module = Parser(make_context(), EMPTY_PHASE).parse_module()
    run_pipeline(module, with_task_costs("wave-to-wpk{workers=2 outputs-in-place=false},wpk-arena,wpk-schedule{workers=2}",
                                         write(tmp_path, {"phase_costs": costs})))
    measured = module.attributes["wpk.measured_us"].data["phases"].data
    assert {k: v.value.data for k, v in measured.items()} == {"ewise_1": 2.0, "output_y": 3.0}
    assert module.attributes["wpk.beat_us"].value.data == pytest.approx(5.0)  # one after the other, no gap
