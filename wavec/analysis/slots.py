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


class SlotMap:
    """The slotting of ``arenas`` (the ones tasks both read and write) for ``accesses``, a verifier's list of
    task operands, which the map's methods take by index."""

    def __init__(self, meta: dict, accesses: list[Access], arenas: tuple[int, ...]):
        self.sessions = int(meta["sessions"])
        self.accesses = accesses
        fields = np.array([(a.arena, a.offset, a.stride, *a.sessions, int(a.run_begin[0]), int(a.run_end[-1]))
                           for a in accesses], np.int64).reshape(-1, 7)
        arena, offset, stride, sb, se, first, last = fields.T
        self.shift = np.zeros(len(accesses), np.int64)  # slot word = run element + shift (slotted arenas)
        self.regions: dict[int, list[Region] | None] = {}
        self.origins: dict[int, np.ndarray] = {}  # per slotted arena, its regions' origins (sorted)
        for a in arenas:
            idx = np.flatnonzero(arena == a)
            regions = self._disjoint(self._candidate_regions(a, meta, set(stride[idx].tolist())))
            if regions is not FLAT:
                shift = self._fit(regions, offset[idx], stride[idx], sb[idx], se[idx], first[idx], last[idx])
                if shift is None:
                    regions = FLAT
                else:
                    self.shift[idx] = shift
                    self.origins[a] = np.array([r.origin for r in regions], np.int64)
            self.regions[a] = regions

    def flatten(self, arena: int) -> None:
        """Makes ``arena`` flat (a caller that needs each session's words apart)."""
        self.regions[arena] = FLAT

    def slotted(self, arena: int) -> bool:
        return self.regions.get(arena) is not FLAT

    def words(self, idx: np.ndarray, arena: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Accesses ``idx`` of ``arena`` in its slot coordinates: word runs (begins, ends), the position in
        ``idx`` of each run's access, and each access's sessions [n, 2] (slotted: its own; flat: [0, 1),
        its runs then being its word intervals over all its sessions)."""
        accs = [self.accesses[i] for i in idx]
        if self.slotted(arena):
            counts = [len(a.run_begin) for a in accs]
            shift = np.repeat(self.shift[idx], counts)
            begins = np.concatenate([a.run_begin for a in accs]) + shift
            ends = np.concatenate([a.run_end for a in accs]) + shift
            sessions = np.array([a.sessions for a in accs], np.int64).reshape(-1, 2)
        else:
            parts = [a.word_intervals() for a in accs]
            counts = [len(p[0]) for p in parts]
            begins, ends = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            sessions = np.tile(np.array([0, 1], np.int64), (len(accs), 1))
        return begins, ends, np.repeat(np.arange(len(accs)), counts), sessions

    def covers(self, i: int, word: int) -> tuple[bool, int]:
        """Whether access ``i`` touches slot word ``word``, and its first session (flat: the session whose
        copy holds the word)."""
        acc = self.accesses[i]
        if self.slotted(acc.arena):
            w = word - int(self.shift[i])
            return bool(((acc.run_begin <= w) & (w < acc.run_end)).any()), acc.sessions[0]
        begins, ends = acc.word_intervals()
        hit = np.flatnonzero((begins <= word) & (word < ends))
        per_session = len(acc.run_begin)
        return len(hit) > 0, acc.sessions[0] + (int(hit[0]) // per_session if len(hit) and acc.stride else 0)

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
    def _candidate_regions(self, arena: int, meta: dict, strides: set[int]) -> list[Region] | None:
        if arena == Arena.ACT:
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

    def _fit(self, regions: list[Region], offset, stride, sb, se, first, last) -> np.ndarray | None:
        """Per access (arrays: byte offset and session stride, sessions [sb, se), first and last run element):
        the shift (words) from its runs to its slot words, or None when one access's sessions do not each
        stay inside their own slot of one region."""
        if not regions:
            return None if len(offset) else np.zeros(0, np.int64)
        origin = np.array([r.origin for r in regions], np.int64)
        period = np.array([r.period for r in regions], np.int64)
        size = np.array([r.size for r in regions], np.int64)
        base = offset + sb * stride
        lo, hi = base + ELEM_BYTES * first, base + ELEM_BYTES * last
        r = np.searchsorted(origin, lo, side="right") - 1
        ok = r >= 0
        r = np.maximum(r, 0)
        slot = origin[r] + sb * period[r]
        ok &= (slot <= lo) & (hi <= slot + size[r]) & ((se - sb <= 1) | (stride == period[r]))
        return (offset + sb * (stride - period[r])) // ELEM_BYTES if ok.all() else None
