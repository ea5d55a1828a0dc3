"""`wpk-verify`: prove the final program race-free and its sessions isolated, from the payload bytes.

Builds the profile's tables from the module (wavec/emit.py) and runs the same check as `wavec verify DIR`
(wavec/verify.py): happens-before from counters and per-worker order; every conflicting pair of accesses
to overlapping arena bytes ordered; every read of an activation sees one producer's value; a task of
session slot s touches only slot s of each state. Fails with the first violation. Requires `wpk-payload`.

``level``: ``task`` proves every conflicting pair of tasks ordered, within the memory budget
``max-incidences``; ``phase`` proves it phase by phase, in one session's words (wavec/verify_phases.py:
duplex:1b at 176 sessions, 8.3e7 word intervals, in 28 s and 1.3 GB here); ``auto`` (the default) runs
the task level within the budget and the phase level above it. A program not proved (over the budget at
level ``task``, or a shape the phase-level proof does not follow) is not a violation: the pass says so on
stderr and in the module's ``wpk.verified`` (carried into the profile's report), and the pipeline goes on.
``wpk.verified`` is the proof's summary otherwise.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.errors import VerificationTooLarge, WavecError
from wavec.verify import LEVELS, MAX_INCIDENCES


@dataclass(frozen=True)
class WpkVerify(ModulePass):
    """Checks the scheduled, placed, encoded program is race-free and session-isolated."""

    name = "wpk-verify"
    max_incidences: int = field(
        default=MAX_INCIDENCES,
        metadata={"help": "the task-level proof's memory budget: word segments covered by all accesses, about 250 "
                          "bytes each (0: no limit)"},
    )
    level: str = field(default="auto", metadata={"help": "task, phase, or auto: task within max-incidences, phase above"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from wavec.emit import PROGRAM_ATTRIBUTES, profile_from_module
        from wavec.verify import verify_profile

        if self.max_incidences < 0:
            raise PassFailedException(f"wpk-verify: max-incidences must be >= 0 (0: no limit), got {self.max_incidences}")
        if self.level not in LEVELS:
            raise PassFailedException(f"wpk-verify: level must be one of {', '.join(LEVELS)}, got {self.level!r}")
        missing = [a for a in PROGRAM_ATTRIBUTES if a not in op.attributes]
        if missing:
            raise PassFailedException(f"wpk-verify: the module has no {', '.join(missing)}; run wpk-arena, wpk-schedule "
                                      "and wpk-payload first (it proves the encoded program)")
        try:
            if self.level == "task":
                self._check_budget(op)
            summary = verify_profile(profile_from_module(op), self.max_incidences, self.level).summary()
        except VerificationTooLarge as e:
            summary = f"not verified: {e}"
            print(f"wpk-verify: warning: {summary}", file=sys.stderr)
        except WavecError as e:
            raise PassFailedException(f"wpk-verify: {e}") from e
        op.attributes["wpk.verified"] = StringAttr(summary)

    def _check_budget(self, op: ModuleOp) -> None:
        """The task-level proof's first check, from the tasks' payloads and parameter blocks alone: a program
        over the budget is refused before the profile's tables are built, as soon as the count passes it."""
        from wavec.analysis.footprints import FootprintCache
        from wavec.opcodes import unpack_params
        from wavec.passes.wpk_payload import params_table, payload_records, tasks_of
        from wavec.verify import budget_message, count_intervals, param_blocks

        tasks = tasks_of(op)
        if not self.max_incidences or any(t.payload is None for t in tasks):
            return  # no budget, or no payloads yet: verify_profile reports the missing pass
        table, _ = params_table(tasks)  # as wpk-payload numbered the payloads' params words
        n = count_intervals(payload_records(tasks), param_blocks(table), FootprintCache(table, unpack_params),
                            self.max_incidences)
        if n > self.max_incidences:
            raise VerificationTooLarge(budget_message(sum(t.count for t in tasks), n, self.max_incidences, "at least"))
