"""`wpk-verify`: prove the final program race-free and its sessions isolated, from the payload bytes.

Builds the profile's tables from the module (wavec/emit.py) and runs the same check as `wavec verify DIR`
(wavec/verify.py): happens-before from counters and per-worker order; every conflicting pair of accesses
to overlapping arena bytes ordered; every read of an activation sees one producer's value; a task of
session slot s touches only slot s of each state. Fails with the first violation. Requires `wpk-payload`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.errors import WavecError


@dataclass(frozen=True)
class WpkVerify(ModulePass):
    """Checks the scheduled, placed, encoded program is race-free and session-isolated."""

    name = "wpk-verify"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from wavec.emit import profile_from_module
        from wavec.verify import verify_profile

        try:
            verify_profile(profile_from_module(op))
        except WavecError as e:
            raise PassFailedException(f"wpk-verify: {e}") from e
