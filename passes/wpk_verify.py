"""`wpk-verify`: prove the final program race-free and its sessions isolated, from the payload bytes.

Builds the profile's tables from the module (wavec/emit.py) and runs the same check as `wavec verify DIR`
(wavec/verify.py): happens-before from counters and per-worker order; every conflicting pair of accesses
to overlapping arena bytes ordered; every read of an activation sees one producer's value; a task of
session slot s touches only slot s of each state. Fails with the first violation. Requires `wpk-payload`.

A program over the verifier's memory budget (``max-incidences``, wavec.verify) is not a violation: the
pass leaves it unproved, says so on stderr and in the module's ``wpk.verified`` (carried into the
profile's report), and the pipeline goes on. ``wpk.verified`` is the proof's summary otherwise.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.errors import VerificationTooLarge, WavecError
from wavec.verify import MAX_INCIDENCES


@dataclass(frozen=True)
class WpkVerify(ModulePass):
    """Checks the scheduled, placed, encoded program is race-free and session-isolated."""

    name = "wpk-verify"
    max_incidences: int = field(
        default=MAX_INCIDENCES,
        metadata={"help": "memory budget: word segments covered by all accesses, about 250 bytes each (0: no limit)"},
    )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from wavec.emit import PROGRAM_ATTRIBUTES, profile_from_module
        from wavec.verify import verify_profile

        if self.max_incidences < 0:
            raise PassFailedException(f"wpk-verify: max-incidences must be >= 0 (0: no limit), got {self.max_incidences}")
        missing = [a for a in PROGRAM_ATTRIBUTES if a not in op.attributes]
        if missing:
            raise PassFailedException(f"wpk-verify: the module has no {', '.join(missing)}; run wpk-arena, wpk-schedule "
                                      "and wpk-payload first (it proves the encoded program)")
        try:
            self._check_budget(op)
            summary = verify_profile(profile_from_module(op), self.max_incidences).summary()
        except VerificationTooLarge as e:
            summary = f"not verified: {e}"
            print(f"wpk-verify: warning: {summary}", file=sys.stderr)
        except WavecError as e:
            raise PassFailedException(f"wpk-verify: {e}") from e
        op.attributes["wpk.verified"] = StringAttr(summary)

    def _check_budget(self, op: ModuleOp) -> None:
        """The verifier's first check, from the tasks' payloads and parameter blocks alone: a program over
        the budget is refused before the profile's tables are built, as soon as the count passes it."""
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
