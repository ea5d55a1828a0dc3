"""wpk-schedule's insertion policy (HEFT's, `insertion-max-sessions`) on the case lit/passes/wpk-schedule.mlir
tells: a state reset, ready at the beat's start but taken last by priority, fills the idle stretch each worker
spends waiting for the other's matmul tile instead of running at the end of the beat. The lit case checks
where it goes (its worker order); this checks what that is worth in the modeled beat: the reset's own cost,
the target's fixed EWISE cost plus a few nanoseconds for its 4 elements."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.parser import Parser

from wavec.driver import run_pipeline
from wavec.hw import load_hw
from wavec.registry import make_context

LIT = Path(__file__).resolve().parent.parent / "lit" / "passes" / "wpk-schedule.mlir"


def lit_case(function: str) -> str:
    """The split-input case of the lit file that defines ``function`` (the module the lit case checks)."""
    (case,) = [c for c in LIT.read_text().split("// -----") if f"@{function}()" in c]
    return case


def modeled_beat_us(insertion_max_sessions: int) -> float:
    module = Parser(make_context(), lit_case("reset_in_a_gap")).parse_module()
    run_pipeline(module, "wave-to-wpk{workers=2 min-tile-flops=1 min-tile-elems=1 states-in-place=false},wpk-arena,"
                         f"wpk-schedule{{workers=2 handoff-us=5.0 insertion-max-sessions={insertion_max_sessions}}}")
    return module.attributes["wpk.beat_us"].value.data


def test_an_inserted_reset_leaves_the_beat_by_its_own_cost():
    ewise_us = load_hw("h200")["measured"]["task_us"]["ewise"]
    saved = modeled_beat_us(0) - modeled_beat_us(1)
    assert saved == pytest.approx(ewise_us, abs=0.01)
    assert saved > ewise_us  # and its bytes' few nanoseconds
