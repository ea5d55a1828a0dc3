"""The verifier's checks 4 to 7 at phase level, for programs whose task-level proof (wavec/verify.py) is over
its memory budget: duplex:1b at 176 sessions has 8.3e7 word intervals, four times the budget's incidences.

It proves a property from which checks 4 and 5 follow, and then checks the program's dataflow once per
phase instead of once per task:

A. **Tiles apart.** Within a phase, no two tasks write a common byte, and no task reads a byte another task
   of its phase writes unless happens-before puts the read first; a task reads what it writes only through
   its output's own elementwise view (as at task level).
B. **Phases in program order.** Every two tasks of different phases that touch a common byte, one writing,
   are ordered by happens-before, the task of the phase earlier in program order first (phases are ranked
   by their lowest task id: ids follow program order, wavec.emit).

Under A and B every conflicting pair is ordered (check 4), and the last writer of a byte that a phase reads
is the last phase before it in program order that writes the byte. So the dataflow (check 5: a fresh byte
read was written earlier in the beat; one view reads one producer), coverage (6) and final values (7) are
checked on phases: one access per (phase, operand view), its words the union of its tiles'.

Cost. Everything is in slot words (wavec.analysis.slots): in a slotted arena one session's words stand for
all sessions', so duplex:1b at 176 sessions has 3.0e5 phase-level word runs where its tasks have 8.3e7
word intervals. B is proved per pair of phases that share a byte, from the vector clocks: all of P's
tasks happen before all of Q's when, on every worker, the least clock over Q's tasks reaches P's last
task there (a barrier schedule, every phase waiting on the one before it). A pair not so ordered (a
tile-level schedule, or a broken one) is checked task by task, on the two phases' accesses alone, with the
task-level algorithm (`_Verifier.races`), and then for the direction of each conflicting pair.

Not proved here, so left unproved (VerificationTooLarge: not a violation): a task reading what another task
of its own phase wrote before it, and an operand view of a phase that covers a word in some of the cohort's
sessions only. No program wavec compiles has either (Silero, the zoo and duplex:1b were checked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from wavec.analysis.footprints import Access, AccessGroups, access_groups, concat_ranges
from wavec.analysis.happens_before import HappensBefore
from wavec.analysis.slots import SlotMap
from wavec.errors import VerificationError, VerificationTooLarge
from wavec.opcodes import ELEM_BYTES, Arena

if TYPE_CHECKING:
    from wavec.verify import _Verifier

PAIR_CHUNK = 1 << 16  # phase pairs whose clocks are compared at once (x workers bytes)


class PhaseProof:
    """Checks 4 to 7 of ``verifier`` at phase level (see the module docstring), over its accesses (checks 1
    to 3 done) and its happens-before relation ``hb``."""

    def __init__(self, verifier: _Verifier, hb: HappensBefore, shared: tuple[int, ...]):
        self.v = verifier
        self.hb = hb
        self.accesses = accesses = verifier.accesses
        self.shared = shared
        self.slots = SlotMap(verifier.meta, accesses, shared)
        self.rank = self._phase_ranks()
        self.n_phases = int(self.rank.max()) + 1 if len(self.rank) else 0
        self.acc_task, self.acc_write = verifier.acc_task, verifier.acc_write
        self.acc_arena = np.array([a.arena for a in accesses], np.int64)
        self.acc_rank = self.rank[self.acc_task]
        mine = np.flatnonzero(np.isin(self.acc_arena, shared))
        mine = mine[np.argsort(self.acc_rank[mine], kind="stable")]
        starts = np.searchsorted(self.acc_rank[mine], np.arange(self.n_phases + 1))
        self.phase_accesses = [mine[a:b] for a, b in zip(starts[:-1], starts[1:])]
        self.min_clock, self.last_pos = self._phase_clocks()

    def _phase_ranks(self) -> np.ndarray:
        """Per payload row: its phase's rank in program order (`_Verifier.phase_rank`), which the proof
        needs to be well defined."""
        if self.v.phases_interleave:
            raise VerificationTooLarge(
                "the phases interleave in program order (task ids): the phase-level proof takes a phase's place "
                "in the program from its tasks' ids, which wavec.emit numbers phase after phase; verify at task "
                "level (`wavec verify --level task`)"
            )
        return self.v.phase_rank

    def _phase_clocks(self) -> tuple[np.ndarray, np.ndarray]:
        """Per phase and worker: the least clock over the phase's tasks, and the position of its last task
        there (-1: none)."""
        hb = self.hb
        rows = np.argsort(self.rank, kind="stable")
        starts = np.searchsorted(self.rank[rows], np.arange(self.n_phases))
        min_clock = np.minimum.reduceat(hb.clock[rows], starts, axis=0) if len(rows) else hb.clock[:0]
        last_pos = np.full(min_clock.shape, -1, np.int32)
        np.maximum.at(last_pos, (self.rank, hb.worker), hb.pos.astype(np.int32))
        return min_clock, last_pos

    def all_before(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per pair: whether every task of phase (rank) a happens before every task of phase b."""
        out = np.zeros(len(a), bool)
        for i in range(0, len(a), PAIR_CHUNK):
            sl = slice(i, i + PAIR_CHUNK)
            out[sl] = (self.min_clock[b[sl]] >= self.last_pos[a[sl]]).all(axis=1)
        return out

    # ---- driver ----------------------------------------------------------------------------------
    def run(self) -> tuple[int, int, list[int]]:
        """Raises the first violation (checks in the task-level order: races, dataflow, coverage, final
        values); returns (phase pairs proved in program order, how many of them tile by tile, the arenas
        proved in per-session words). An arena in which a phase's view covers some sessions only (a tile
        missing, or moved) is proved again flat, where each session's words are its own, when its word
        intervals fit the verifier's budget."""
        while True:
            try:
                pairs, tile_pairs = self._prove()
                return pairs, tile_pairs, [a for a in self.shared if not self.slots.slotted(a)]
            except _PartialView as e:
                words = sum(len(a.run_begin) * (a.n_sessions if a.stride else 1)
                            for a in self.accesses if a.arena == e.arena)
                if self.v.max_incidences and words > self.v.max_incidences:
                    raise VerificationTooLarge(
                        f"{e}: the phase-level proof needs each view of a phase to cover the whole cohort, or the "
                        f"arena's {words:,} word intervals within the budget of {self.v.max_incidences:,}; verify "
                        "at task level (`wavec verify --level task`) on a machine with the memory"
                    ) from None
                self.slots.flatten(e.arena)

    def _prove(self) -> tuple[int, int]:
        collected = {arena: _PhaseViews() for arena in self.shared}
        for rank, accs in enumerate(self.phase_accesses):
            for arena in self.shared:
                idx = accs[self.acc_arena[accs] == arena]
                if len(idx):
                    self.within_phase(arena, rank, idx, collected[arena])
        flows = {arena: _PhaseFlow(arena, self.n_phases, views.done())
                 for arena, views in collected.items() if views.done().n}
        pairs = np.unique(np.concatenate([f.pairs for f in flows.values()] or [np.zeros(0, np.int64)]))
        tile_pairs = self.phases_in_order(pairs)
        for arena, flow in flows.items():
            self.dataflow(arena, flow)
        for arena in (Arena.OUTPUT, Arena.STATE):  # an arena nobody touches still owes its bindings' bytes
            views = flows[arena].views if arena in flows else collected[arena].done()
            written = views.write[views.which] if views.n else np.zeros(0, bool)
            self.v.check_coverage(arena, [(views.begins[written], views.ends[written])], self.binding_slot_words)
        for arena in (Arena.STATE, Arena.OUTPUT):
            if arena in flows:
                self.final_values(arena, flows[arena])
        return len(pairs), tile_pairs

    def binding_slot_words(self, arena: int, spec: dict) -> np.ndarray:
        return self.slots.slot_starts(arena, int(spec["offset"]), int(spec["session_stride"]))

    # ---- A: tiles apart, and each view's phase-level words ------------------------------------------
    def within_phase(self, arena: int, rank: int, idx: np.ndarray, out: _PhaseViews) -> None:
        """Checks A on phase ``rank``'s accesses ``idx`` of ``arena`` and adds its views to ``out``."""
        begins, ends, local, sessions = self.slots.words(idx, arena)
        width = (self.slots.sessions if self.slots.slotted(arena) else 1) + 1
        g = access_groups(begins, ends, local, len(idx))
        tiles = _Tiles(arena, idx, self.acc_task[idx], self.acc_write[idx], g, sessions[:, 0], sessions[:, 1], width)
        self.writes_apart(tiles)
        self.reads_before_writes(tiles)
        views = np.unique(np.array([(a.operand, a.offset, a.stride) for a in (self.accesses[i] for i in idx)], np.int64),
                          axis=0, return_inverse=True)[1].ravel()
        self.whole_cohort(tiles, views)
        out.add(rank, idx, views, begins, ends, local, self.accesses)

    def writes_apart(self, t: _Tiles) -> None:
        """No word written by two tasks of the phase, or by one task in two of its sessions."""
        g = t.g
        twice = np.flatnonzero((g.member_count > 1) & t.write[g.member_acc])
        if len(twice):
            i = int(twice[0])
            raise VerificationError(
                f"{self.v.name(t.row(g.member_acc[i]))} writes {self.where(t.arena, t.g, g.member_group[i], 0)} in two of its "
                "sessions: its output session_stride is smaller than one session's footprint (write-after-write)"
            )
        clash = np.flatnonzero(t.w_begin[1:] < np.maximum.accumulate(t.w_end)[:-1]) + 1
        if len(clash):
            i = int(clash[0])
            j = int(np.flatnonzero((t.w_group[:i] == t.w_group[i]) & (t.w_end[:i] > t.w_begin[i]))[0])
            a, b = t.w_acc[j], t.w_acc[i]
            raise VerificationError(
                f"{self.v.name(t.row(a))} and {self.v.name(t.row(b))}, two tasks of one phase, both write "
                f"{self.where(t.arena, t.g, t.w_group[i], max(t.sb[a], t.sb[b]))} (write-after-write): each element must be "
                "produced by exactly one task of its phase; fix the tile bounds or output offsets"
            )

    def reads_before_writes(self, t: _Tiles) -> None:
        """A task reading words of the phase's output: through its own output's view if it writes them,
        else before the task that does."""
        g, width = t.g, t.width
        read = ~t.write[g.member_acc]
        rg, ra = g.member_group[read], g.member_acc[read]
        lo = np.searchsorted(t.w_end, rg * width + t.sb[ra], side="right")
        hi = np.searchsorted(t.w_begin, rg * width + t.se[ra], side="left")
        writer = t.w_acc[concat_ranges(lo, hi)]
        if not len(writer):
            return
        keep = np.maximum(hi - lo, 0)
        reader, grp = np.repeat(ra, keep), np.repeat(rg, keep)
        r_row, w_row = t.rows[reader], t.rows[writer]
        for i in np.flatnonzero(r_row == w_row):
            if not self.v.same_view_as_output(self.accesses[int(t.idx[reader[i]])]):
                raise VerificationError(
                    f"{self.v.name(int(r_row[i]))} reads {self.where(t.arena, t.g, grp[i], t.sb[reader[i]])} through input operand "
                    f"{self.accesses[int(t.idx[reader[i]])].operand} and also writes them through a different view "
                    "(its output): threads of one task would race on them (in place is safe only for an elementwise "
                    "op whose input view is its output view). Give the output bytes of its own"
                )
        other = np.flatnonzero(r_row != w_row)
        for i in other[~self.hb.before(r_row[other], w_row[other])]:
            r, w = int(r_row[i]), int(w_row[i])
            span = self.span(t.arena, t.g, grp[i], max(t.sb[reader[i]], t.sb[writer[i]]))
            if self.hb.before(w, r):
                raise VerificationTooLarge(
                    f"{self.v.name(r)} reads {self.v.where(t.arena, *span)}, which {self.v.short(w)} of its own phase "
                    "writes before it: the phase-level proof does not follow a phase reading its own output; verify at "
                    "task level (`wavec verify --level task`) on a machine with the memory"
                )
            self.v.raise_race(t.arena, *span, r, w, {w})

    def whole_cohort(self, t: _Tiles, views: np.ndarray) -> None:
        """Each view of the phase covers, on every word it touches, all the cohort's sessions: one phase-level
        access then stands for every session."""
        g, width = t.g, t.width
        if width == 2:
            return
        block = views[g.member_acc] * len(g.rep) + g.member_group
        o = np.lexsort((t.sb[g.member_acc], block))
        blk, b, e = block[o], t.sb[g.member_acc[o]], t.se[g.member_acc[o]]
        reach = np.maximum.accumulate(blk * width + e)
        first = np.r_[True, blk[1:] != blk[:-1]]
        last = np.r_[first[1:], True]
        gap = np.where(first, b != 0, blk * width + b > np.r_[0, reach[:-1]])
        bad = np.flatnonzero(gap | (last & (reach != blk * width + width - 1)))
        if len(bad):
            i = int(bad[0])
            acc = self.accesses[int(t.idx[g.member_acc[o[i]]])]
            raise _PartialView(t.arena, f"phase {self.v.phase_label(acc.row)} touches {self.where(t.arena, t.g, blk[i] % len(g.rep), 0)} "
                               f"through operand {acc.operand} in some of the cohort's {width - 1} sessions only")

    # ---- B: phases in program order -----------------------------------------------------------------
    def phases_in_order(self, pairs: np.ndarray) -> int:
        """B for the phase pairs ``pairs`` (a * n_phases + b, a before b in program order, sharing a word one
        of them writes): each proved from the clocks, or else tile by tile. Returns how many tile by tile."""
        n = max(self.n_phases, 1)
        a, b = pairs // n, pairs % n
        slow = np.flatnonzero(~self.all_before(a, b))
        for i in slow:
            self.tile_by_tile(int(a[i]), int(b[i]))
        return len(slow)

    def tile_by_tile(self, a: int, b: int) -> None:
        """B for phases a (earlier) and b, task by task: the task-level race check on their accesses alone,
        then the direction of each conflicting pair."""
        both = np.concatenate([self.phase_accesses[a], self.phase_accesses[b]])
        for arena in self.shared:
            idx = both[self.acc_arena[both] == arena]
            if not len(idx):
                continue
            parts = [self.accesses[i].word_intervals() for i in idx]
            g = access_groups(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                              np.repeat(idx, [len(p[0]) for p in parts]), len(self.accesses))
            self.v.races(arena, g, self.hb, self.acc_task, self.acc_write)
            self.in_program_order(arena, g, a)

    def in_program_order(self, arena: int, g: AccessGroups, a: int) -> None:
        """No task of the later phase happens before a task of phase ``a`` it shares a word of ``g`` with, one
        of them writing (such pairs are ordered, so the topological order tells which comes first)."""
        mg, ma = g.member_group, g.member_acc
        pos = self.hb.topo_pos[self.acc_task[ma]]
        early, w = self.acc_rank[ma] == a, self.acc_write[ma]
        for then_mask, first_mask in ((early & w, ~early), (early, ~early & w)):
            last_then = np.full(len(g.rep), -1, np.int64)
            np.maximum.at(last_then, mg[then_mask], pos[then_mask])
            behind = np.flatnonzero(first_mask & (pos < last_then[mg]))
            if len(behind):
                i = int(behind[0])
                grp = int(mg[i])
                then = int(self.acc_task[ma[then_mask & (mg == grp)][np.argmax(pos[then_mask & (mg == grp)])]])
                self.v.raise_out_of_order(arena, *g.byte_range(int(g.rep[grp])), int(self.acc_task[ma[i]]), then)

    # ---- 5 and 7 on the phases' views -------------------------------------------------------------
    def dataflow(self, arena: int, flow: _PhaseFlow) -> None:
        """Check 5 on the phase-level reads: a fresh word read has a source, and a view reads one source per
        part of its tensor."""
        g, views, rg, rv, source = flow.g, flow.views, flow.read_group, flow.read_view, flow.source
        if arena in (Arena.ACT, Arena.OUTPUT) and (source < 0).any():
            i = int(np.flatnonzero(source < 0)[0])
            row, session = self.witness(flow, rg[i], rv[i])
            raise VerificationError(
                f"{self.v.name(row)} reads {self.where(arena, g, rg[i], session)} through input operand "
                f"{int(views.operand[rv[i]])}, but no task writes those bytes earlier in the beat (they hold another "
                "tensor or garbage): a wait is missing, a tile leaves a gap, or the operand offset is wrong"
            )
        src = np.where(source < 0, self.v.CARRIED, source)
        part = self.v.part_of(arena, g.points[g.rep[rg]] * ELEM_BYTES)
        key = rv * (int(part.max(initial=0)) + 1) + part  # one key per (view, part of its tensor)
        o = np.lexsort((src, key))
        mixed = np.flatnonzero((key[o][1:] == key[o][:-1]) & (src[o][1:] != src[o][:-1]))
        if not len(mixed):
            return
        i, j = int(o[mixed[0]]), int(o[mixed[0] + 1])
        (row_i, s_i), (row_j, s_j) = self.witness(flow, rg[i], rv[i]), self.witness(flow, rg[j], rv[j])

        def source_name(k: int) -> str:
            if src[k] == self.v.CARRIED:
                return "the previous beat's state (nothing wrote it yet this beat)"
            return self.v.name(self.writer(flow, rg[k], int(src[k])))

        raise VerificationError(
            f"{self.v.name(row_i)} and its phase read a mix of two producers through input operand "
            f"{int(views.operand[rv[i]])}: {self.where(arena, g, rg[i], s_i)} (read by {self.v.short(row_i)}) "
            f"was last written by {source_name(i)}, but {self.where(arena, g, rg[j], s_j)} (read by "
            f"{self.v.short(row_j)}) by {source_name(j)}: an output offset (or the arena plan) puts one tensor where "
            "another is read, or a tile of the producer is missing"
        )

    def final_values(self, arena: int, flow: _PhaseFlow) -> None:
        self.v.check_final_values(arena, flow.g, flow.final, flow.views.rank, flow.views.write,
                                  lambda grp: self.v.name(self.writer(flow, grp, int(flow.final[grp]))),
                                  self.binding_slot_words)

    # ---- naming ----------------------------------------------------------------------------------
    def witness(self, flow: _PhaseFlow, group: int, view: int) -> tuple[int, int]:
        """(row, session) of a task whose access through phase-level view ``view`` covers ``group``'s words."""
        return self._covering(flow, group, int(flow.views.rank[view]), flow.views.key[view], None)

    def writer(self, flow: _PhaseFlow, group: int, rank: int) -> int:
        """The row of phase ``rank``'s task that writes ``group``'s words."""
        return self._covering(flow, group, rank, None, True)[0]

    def _covering(self, flow: _PhaseFlow, group: int, rank: int, key: tuple | None, write: bool | None) -> tuple[int, int]:
        word = int(flow.g.points[flow.g.rep[group]])
        for i in self.phase_accesses[rank]:
            acc = self.accesses[i]
            if acc.arena != flow.arena or (write is not None and acc.write != write):
                continue
            if key is not None and (acc.operand, acc.offset, acc.stride) != key:
                continue
            hit, session = self.slots.covers(int(i), word)
            if hit:
                return acc.row, session
        raise AssertionError(f"no access of phase {rank} covers slot word {word}")  # views are their accesses' union

    def span(self, arena: int, g: AccessGroups, group: int, session: int) -> tuple[int, int]:
        """Arena bytes of session ``session``'s copy of the first word segment of ``g``'s group ``group``."""
        return self.slots.arena_bytes(arena, *g.byte_range(int(g.rep[group])), int(session))

    def where(self, arena: int, g: AccessGroups, group: int, session: int) -> str:
        return self.v.where(arena, *self.span(arena, g, group, session))


class _PartialView(Exception):
    """A view of a phase covers some of the cohort's sessions only, in a slotted ``arena``."""

    def __init__(self, arena: int, message: str):
        super().__init__(message)
        self.arena = arena


class _Tiles:
    """One phase's accesses ``idx`` of one arena (``rows``: their tasks, ``write``: which write), grouped by
    slot word segments (``g``), and its writes sorted by (group, first session): ``w_acc`` (local access),
    ``w_group``, and the keys ``w_begin``/``w_end`` = group * width + session bounds, which order the writes
    of a group by session and keep groups apart."""

    def __init__(self, arena: int, idx: np.ndarray, rows: np.ndarray, write: np.ndarray, g: AccessGroups,
                 sb: np.ndarray, se: np.ndarray, width: int):
        self.arena, self.idx, self.rows, self.write, self.g = arena, idx, rows, write, g
        self.sb, self.se, self.width = sb, se, width
        w = write[g.member_acc]
        o = np.lexsort((sb[g.member_acc[w]], g.member_group[w]))
        self.w_group, self.w_acc = g.member_group[w][o], g.member_acc[w][o]
        self.w_begin = self.w_group * width + sb[self.w_acc]
        self.w_end = self.w_group * width + se[self.w_acc]

    def row(self, local: int) -> int:
        return int(self.rows[local])


class _PhaseViews:
    """The phase-level accesses of one arena: one per (phase, operand view), its words the union of its
    tasks' slot words, collected phase after phase."""

    def __init__(self):
        self._parts: list[tuple] = []
        self._done: _PhaseViews | None = None

    def add(self, rank: int, idx: np.ndarray, views: np.ndarray, begins: np.ndarray, ends: np.ndarray,
            local: np.ndarray, accesses: list[Access]) -> None:
        view = views[local]
        o = np.lexsort((begins, view))
        view, b, e = view[o], begins[o], ends[o]
        # Each view's runs merged apart from the others': its words lifted past every word of the views before.
        scale = int(e.max()) + 1
        if int(view.max()) * scale >= 1 << 62:
            raise VerificationTooLarge(f"slot words up to {scale:,}: beyond the phase-level proof's arithmetic")
        shift = view * scale
        reach = np.maximum.accumulate(e + shift)
        new = np.r_[True, b[1:] + shift[1:] > reach[:-1]]
        end = reach[np.r_[np.flatnonzero(new)[1:] - 1, len(b) - 1]] - shift[new]
        first = {int(v): accesses[int(idx[np.flatnonzero(views == v)[0]])] for v in np.unique(views)}
        meta = [(rank, a.write, a.operand, (a.operand, a.offset, a.stride)) for _, a in sorted(first.items())]
        self._parts.append((view[new], b[new], end, meta))

    def done(self) -> _PhaseViews:
        """The collected views as arrays: ``which`` (view id per word run), ``begins``/``ends``, ``n`` views,
        and per view ``rank``, ``write``, ``operand``, ``key`` (operand, offset, session stride)."""
        if self._done is not None:
            return self._done
        base, which, begins, ends, meta = 0, [], [], [], []
        for view, b, e, m in self._parts:
            which.append(view + base)
            begins.append(b)
            ends.append(e)
            meta += m
            base += len(m)
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        out = _PhaseViews()
        out.which, out.begins, out.ends, out.n = cat(which), cat(begins), cat(ends), base
        out.rank = np.array([m[0] for m in meta], np.int64)
        out.write = np.array([m[1] for m in meta], bool)
        out.operand = np.array([m[2] for m in meta], np.int64)
        out.key = [m[3] for m in meta]
        self._parts = []
        self._done = out
        return out


class _PhaseFlow:
    """The phase-level dataflow of one arena: groups ``g`` of its views' words; per read (``read_group``,
    ``read_view``) the phase it reads (``source``, -1: none before it); per group the last phase writing it
    (``final``, -1: none); and the phase pairs B must prove (``pairs``: a * n_phases + b)."""

    def __init__(self, arena: int, n_phases: int, views: _PhaseViews):
        self.arena, self.views = arena, views
        self.g = g = access_groups(views.begins, views.ends, views.which, views.n)
        n = max(n_phases, 1)
        mg, ma = g.member_group, g.member_acc
        w = views.write[ma]
        writers = np.unique(mg[w] * n + views.rank[ma[w]])  # (group, writing phase), in program order per group
        self.read_group, self.read_view = rg, rv = mg[~w], ma[~w]
        key = rg * n + views.rank[rv]
        p = np.searchsorted(writers, key, side="left") - 1  # the last writer before the reader's phase
        q = np.searchsorted(writers, key, side="right")  # the first after it (its own write excluded)
        prev = np.where(p >= 0, writers[np.maximum(p, 0)] if len(writers) else -1, -1)
        nxt = np.where(q < len(writers), writers[np.minimum(q, len(writers) - 1)] if len(writers) else -1, -1)
        has_prev, has_next = (prev >= 0) & (prev // n == rg), (nxt >= 0) & (nxt // n == rg)
        self.source = np.where(has_prev, prev % n, -1)
        same = writers[1:] // n == writers[:-1] // n
        self.pairs = np.concatenate([
            (writers[:-1][same] % n) * n + writers[1:][same] % n,  # consecutive writers
            (prev[has_prev] % n) * n + views.rank[rv][has_prev],  # the writer before a reader, and the reader
            views.rank[rv][has_next] * n + nxt[has_next] % n,  # the reader, and the writer after it
        ])
        self.final = np.full(len(g.rep), -1, np.int64)
        if len(writers):
            last = np.r_[~same, True]
            self.final[writers[last] // n] = writers[last] % n
