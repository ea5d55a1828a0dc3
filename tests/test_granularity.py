"""The default pipeline sizes its granularity to the program (wpk-arena and wpk-schedule ``auto``), and
wpk-verify works within a memory budget.

Over the tile budgets a program gets whole-buffer liveness and a barrier per phase; it is still proved
race-free, and it computes what the tile-granular program computes, bit for bit (the same bodies in the
same order per element, other offsets and waits). Over the task-level proof's budget the program is proved
phase by phase; at level `task` the pass leaves it unproved and says so, and `wavec verify` exits 3.
"""

from __future__ import annotations

import numpy as np
import pytest

from builder_harness import fresh_inputs, staggered_reset
from wavec import zoo
from wavec.cli import main as cli_main
from wavec.errors import VerificationTooLarge
from wavec.verify import verify_profile

MODEL, SESSIONS, WORKERS, BEATS = "duplex:tiny", 3, 4, 6


def pipeline(arena: str = "", schedule: str = "", verify: str = "") -> str:
    return (f"wave-expand-pow,wave-fuse,wave-cohort{{sessions={SESSIONS}}},wave-to-wpk{{workers={WORKERS}}},"
            f"wpk-arena{arena},wpk-schedule{{workers={WORKERS}{schedule}}},wpk-payload,wpk-verify{verify}")


@pytest.fixture(scope="module")
def model():
    return zoo.get(MODEL)


@pytest.fixture(scope="module")
def tile_profile(model):
    return model.compile(sessions=SESSIONS, workers=WORKERS)


@pytest.fixture(scope="module")
def coarse_profile(model):
    return model.compile(sessions=SESSIONS, workers=WORKERS,
                         pipeline=pipeline("{max-tile-words=1}", " max-tile-words=1"))


def test_small_program_gets_tile_dependencies_unrecycled_activations_and_a_proof(tile_profile):
    schedule = tile_profile.meta["schedule"]
    assert (schedule["granularity"], schedule["arena_granularity"]) == ("tile", "none")
    assert "within max-tile-words 67,108,864" in schedule["granularity_why"]
    assert "within max-dedicated-bytes 4,194,304" in schedule["arena_granularity_why"]
    assert schedule["verified"].startswith(f"verified: {len(tile_profile.payloads)} tasks")


def test_activations_over_the_dedicated_budget_are_recycled_word_by_word(model, tile_profile):
    recycled = model.compile(sessions=SESSIONS, workers=WORKERS, pipeline=pipeline("{max-dedicated-bytes=1024}"))
    assert recycled.meta["schedule"]["arena_granularity"] == "tile"
    assert recycled.meta["arena_bytes"]["act"] < tile_profile.meta["arena_bytes"]["act"]


def test_over_the_tile_budgets_a_barrier_per_phase_and_whole_buffers(coarse_profile):
    schedule = coarse_profile.meta["schedule"]
    assert (schedule["granularity"], schedule["arena_granularity"]) == ("phase", "op")
    assert schedule["granularity_why"].endswith("over max-tile-words 1")
    assert schedule["arena_granularity_why"].endswith("over max-tile-words 1")
    assert schedule["verified"].startswith("verified:")
    assert coarse_profile.meta["n_counters"] == len(coarse_profile.meta["phases"]) + 1  # one per phase, and 0


def test_both_granularities_compute_the_same_bits(model, tile_profile, coarse_profile):
    inputs = fresh_inputs(model, BEATS, SESSIONS, seed=5)
    reset = staggered_reset(SESSIONS, BEATS)
    tile = tile_profile.run(inputs, backend="interp", reset=reset, seed=5)
    coarse = coarse_profile.run(inputs, backend="interp", reset=reset, seed=5)
    for name in model.outputs:
        assert np.array_equal(tile[name], coarse[name]), name


def test_over_the_budget_the_proof_is_phase_by_phase(tile_profile, tmp_path, capsys):
    """Over the task-level budget `auto` proves the program phase by phase; at level `task` it is left
    unproved, which is not a violation (`wavec verify` exits 3)."""
    with pytest.raises(VerificationTooLarge, match="over the verifier's budget of 1 "):
        verify_profile(tile_profile, max_incidences=1, level="task")
    assert verify_profile(tile_profile, max_incidences=1).level == "phase"
    tile_profile.save(tmp_path / "p")
    assert cli_main(["verify", str(tmp_path / "p"), "--max-incidences", "1", "--level", "task"]) == 3
    assert "not verified" in capsys.readouterr().err
    assert cli_main(["verify", str(tmp_path / "p"), "--max-incidences", "1"]) == 0
    assert "verified at phase level:" in capsys.readouterr().out
    assert cli_main(["verify", str(tmp_path / "p"), "--max-incidences", "0"]) == 0
    assert "verified:" in capsys.readouterr().out
    assert cli_main(["verify", str(tmp_path / "p"), "--max-incidences", "-1"]) == 1
    assert "--max-incidences must be >= 0" in capsys.readouterr().err


def test_wpk_verify_over_budget_proves_phase_by_phase_or_warns_at_task_level(model, capfd):
    profile = model.compile(sessions=SESSIONS, workers=WORKERS, pipeline=pipeline(verify="{max-incidences=1}"))
    assert profile.meta["schedule"]["verified"].startswith("verified at phase level:")
    profile = model.compile(sessions=SESSIONS, workers=WORKERS, pipeline=pipeline(verify="{max-incidences=1 level=task}"))
    assert profile.meta["schedule"]["verified"].startswith("not verified:")
    assert "wpk-verify: warning: not verified" in capfd.readouterr().err


@pytest.mark.parametrize("options", [{"arena": "{max-tile-words=-1}"}, {"schedule": " max-tile-words=-1"},
                                     {"verify": "{max-incidences=-1}"}])
def test_negative_budgets_are_refused(model, options):
    from wavec.errors import WavecError

    with pytest.raises(WavecError, match="must be >= 0"):
        model.compile(sessions=SESSIONS, workers=WORKERS, pipeline=pipeline(**options))
