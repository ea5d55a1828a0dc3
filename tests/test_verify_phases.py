"""The phase-level proof (wavec/verify_phases.py) on real programs and on the shapes it declines.

Its soundness against injected faults is tests/test_mutations.py's (both levels, tile and barrier
schedules). Here: every zoo model proves at both levels under both schedules, in one session's slot words
(no arena falls back to per-session words); a barrier schedule orders whole phases, so no pair of phases
needs a look at its tasks; a phase reading what another of its tasks wrote before it is left unproved at
phase level (and is a mixed read at task level); a view covering some sessions only is proved again in
per-session words, or left unproved when those are over the budget.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import mutations as mut  # noqa: E402
from builder_harness import barrier_pipeline  # noqa: E402
from profile_builder import ProfileBuilder  # noqa: E402
from test_verify import ewise, row_of, state_profile  # noqa: E402

from wavec import zoo  # noqa: E402
from wavec.errors import VerificationError, VerificationTooLarge  # noqa: E402
from wavec.verify import verify_profile  # noqa: E402

SESSIONS, WORKERS = 3, 4


@pytest.mark.parametrize("name", ["gru_stack", "lstm_stack", "transformer", "codec_decoder", "mamba_hybrid", "duplex"])
def test_every_zoo_model_proves_at_both_levels_in_slot_words(name):
    model = zoo.get(f"{name}:tiny")
    for schedule, pipeline in (("tile", None), ("barrier", barrier_pipeline(SESSIONS, WORKERS))):
        profile = model.compile(sessions=SESSIONS, workers=WORKERS, pipeline=pipeline)
        assert verify_profile(profile, level="task").level == "task"
        report = verify_profile(profile, level="phase")
        assert report.level == "phase" and report.conflicting_pairs > 0, (name, schedule)
        assert report.per_session_arenas == (), (name, schedule, report.summary())
        if schedule == "barrier":
            assert report.tile_pairs == 0, f"{name}: a barrier orders whole phases"


def own_output_profile():
    """u = x (12 elems), then one phase of two tiles on one worker, y' = 2 u[0:8] written to u[4:12]: the
    second tile reads u[4:8], which the first writes before it."""
    pb = ProfileBuilder(sessions=2, workers=1)
    x, u, y = pb.input("x", (12,)), pb.act("u", (12,)), pb.output("y", (8,))
    copied, doubled = pb.counter(), pb.counter()
    pb.task(ewise("%0", (12,), [(1,)]), [x], u, signal=copied)
    head, tail = replace(u, shape=(8,)), replace(u.at(4), shape=(8,))
    for elems in ((0, 4), (4, 8)):
        pb.task(ewise("mul(%0, 2.0)", (8,), [(1,)]), [head], tail, elems=elems, signal=doubled)
    pb.task(ewise("%0", (8,), [(1,)]), [tail], y, waits=[(doubled, 2)])
    return pb.build()


def test_a_phase_reading_its_own_output_is_left_unproved_at_phase_level():
    profile = own_output_profile()
    with pytest.raises(VerificationTooLarge, match="does not follow a phase reading its own output"):
        verify_profile(profile, level="phase")
    with pytest.raises(VerificationError, match="read a mix of two producers"):
        verify_profile(profile, level="task")


def test_phases_interleaved_in_program_order_are_left_unproved_at_phase_level():
    """A phase table (task id lists) putting tasks 0 and 2 in one phase, 1 in another: the phase level takes
    a phase's place in the program from its ids, so it does not judge this (correct) chain."""
    pb = ProfileBuilder(sessions=2, workers=1)
    x, u, v, y = pb.input("x", (4,)), pb.act("u", (4,)), pb.act("v", (4,)), pb.output("y", (4,))
    for src, dst in ((x, u), (u, v), (v, y)):
        pb.task(ewise("%0", (4,), [(1,)]), [src], dst)
    pb.meta_extra["phases"] = [{"name": "A+C", "tasks": [0, 2]}, {"name": "B", "tasks": [1]}]
    profile = pb.build()
    assert verify_profile(profile, level="task").level == "task"
    with pytest.raises(VerificationTooLarge, match="phases interleave in program order"):
        verify_profile(profile, level="phase")


def test_a_view_of_some_sessions_is_proved_in_per_session_words_within_the_budget():
    bad, _ = mut.drop_task(state_profile(), row=row_of(state_profile(), 3))  # h of sessions 2-3 not updated
    on_q = bad.payloads["wait_counter"] == 2
    bad.payloads["wait_count"][on_q] = 1
    with pytest.raises(VerificationError, match="read a mix of two producers"):
        verify_profile(bad, level="phase")
    with pytest.raises(VerificationTooLarge, match="cover the whole cohort"):
        verify_profile(bad, level="phase", max_incidences=1)
