"""Session slots: arena coordinates in which one session's words stand for every session's.

A cohort's arenas repeat one session's layout: an activation tensor sits at the same place in every
session's block of the ACT arena (one session stride for all of them, wpk-arena), a state's or an
output's slot s at ``offset + s * session_stride`` (profile.json ``states`` / ``outputs``). When every
task operand touching an arena, for each session s of its task, stays inside slot s of one *region*, the
arena is **slotted**: an operand is then its session range and its words in session 0's slot (the *slot
words*), the same for every session of the task. Two operands touch a common word if and only if their
session ranges meet and their slot words meet. The verifier's phase-level proof reasons in slot words:
Silero at 1,024 sessions or duplex:1b at 176 have one session's worth of word segments, not a cohort's.

An arena that is not slotted (an operand in no session's slot, two strides over one region) is **flat**:
every operand is one pseudo-session (range [0, 1)) whose words are its word intervals over all of its
sessions, the verifier's task-level coordinates.

Regions: STATE, one per state binding; OUTPUT, one per output binding; ACT, one of period and size the
session stride, when every operand touching the arena has that stride. Regions are built from the
bindings and the payloads alone and checked disjoint, so a wrong table can make an arena flat but never
make two operands that share a word look apart.

numpy only: `wavec verify` runs where the compiler is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.analysis.footprints import Access
from wavec.opcodes import ELEM_BYTES, Arena

FLAT = None  # an arena's regions when it is not slotted


@dataclass(frozen=True)
class Region:
    """Slot s of a region is bytes [origin + s * period, origin + s * period + size) of its arena."""

    origin: int
    period: int
    size: int


@dataclass
class SlotWords:
    """One operand in slot coordinates: sessions [begin, end) and [begins, ends) words in session 0's slot
    (slotted arena), or the pseudo-session [0, 1) and the operand's words over all its sessions (flat)."""

    sessions: tuple[int, int]
    begins: np.ndarray
    ends: np.ndarray


class SlotMap:
    """The slotting of the arenas tasks both read and write, for a cohort of ``sessions``."""

    def __init__(self, meta: dict, accesses: list[Access], arenas: tuple[int, ...]):
        self.sessions = int(meta["sessions"])
        self.regions: dict[int, list[Region] | None] = {}
        self.origins: dict[int, np.ndarray] = {}  # per slotted arena, its regions' origins (sorted)
        for arena in arenas:
            mine = [a for a in accesses if a.arena == arena]
            self.regions[arena] = self._disjoint(self._candidate_regions(arena, meta, mine))
            if self.regions[arena] is not FLAT:
                self.origins[arena] = np.array([r.origin for r in self.regions[arena]], np.int64)
                if not all(self._fits(arena, a) is not None for a in mine):
                    self.regions[arena] = FLAT

    def flatten(self, arena: int) -> None:
        """Makes ``arena`` flat (a caller that needs each session's words apart)."""
        self.regions[arena] = FLAT

    def slotted(self, arena: int) -> bool:
        return self.regions.get(arena) is not FLAT

    def project(self, acc: Access) -> SlotWords:
        """``acc`` in its arena's slot coordinates (the arena must be one the map was built for)."""
        regions = self.regions[acc.arena]
        if regions is FLAT:
            begins, ends = acc.word_intervals()
            return SlotWords((0, 1), begins, ends)
        shift = self._fits(acc.arena, acc)
        return SlotWords(acc.sessions, acc.run_begin + shift, acc.run_end + shift)

    def arena_bytes(self, arena: int, b0: int, b1: int, session: int) -> tuple[int, int]:
        """Session ``session``'s copy, in arena bytes, of slot bytes [b0, b1) (the same bytes when flat)."""
        regions = self.regions[arena]
        if regions is FLAT:
            return b0, b1
        r = regions[int(np.searchsorted(self.origins[arena], b0, side="right")) - 1]
        return b0 + session * r.period, b1 + session * r.period

    def slot_starts(self, arena: int, offset: int, stride: int) -> np.ndarray:
        """The first word of each session's copy of a binding at ``offset`` (bytes, session 0) with
        ``stride``, in the arena's slot coordinates: session 0's alone when slotted (it stands for all)."""
        n = 1 if self.slotted(arena) else self.sessions
        return (offset + np.arange(n, dtype=np.int64) * stride) // ELEM_BYTES

    # ---- building --------------------------------------------------------------------------------
    def _candidate_regions(self, arena: int, meta: dict, mine: list[Access]) -> list[Region] | None:
        if arena == Arena.ACT:
            strides = {a.stride for a in mine}
            if len(strides) != 1 or 0 in strides:
                return FLAT
            (period,) = strides
            return [Region(0, period, period)]
        key = {Arena.STATE: "states", Arena.OUTPUT: "outputs"}.get(Arena(arena))
        if key is None:
            return FLAT
        return [
            Region(int(s["offset"]), int(s["session_stride"]), ELEM_BYTES * int(np.prod(s["shape"], dtype=np.int64)))
            for s in meta.get(key, [])
        ]

    def _disjoint(self, regions: list[Region] | None) -> list[Region] | None:
        """``regions`` sorted by origin when no two slots (of one region or of two) share a byte, else FLAT."""
        if regions is FLAT:
            return FLAT
        regions = sorted((r for r in regions if r.size > 0), key=lambda r: r.origin)
        n = self.sessions
        if any(r.size > r.period and n > 1 for r in regions) or any(r.period < 0 or r.origin < 0 for r in regions):
            return FLAT
        ends = np.maximum.accumulate([r.origin + (n - 1) * r.period + r.size for r in regions] or [0])
        if any(r.origin < int(e) for r, e in zip(regions[1:], ends)):
            return FLAT  # interleaved slots of two regions: slotting them would need a finer map
        return regions

    def _fits(self, arena: int, acc: Access) -> int | None:
        """The shift (words) from ``acc``'s runs to its slot words, or None when its sessions do not each
        stay inside their own slot of one region."""
        regions = self.regions[arena]
        sb, se = acc.sessions
        first = acc.offset + sb * acc.stride + ELEM_BYTES * int(acc.run_begin[0])
        last = acc.offset + sb * acc.stride + ELEM_BYTES * int(acc.run_end[-1])
        i = int(np.searchsorted(self.origins[arena], first, side="right")) - 1
        if i < 0:
            return None
        r = regions[i]
        slot = r.origin + sb * r.period
        if not (slot <= first and last <= slot + r.size) or (se - sb > 1 and acc.stride != r.period):
            return None
        return (acc.offset + sb * (acc.stride - r.period)) // ELEM_BYTES
