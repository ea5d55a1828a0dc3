"""The profile verifier: a proof that a compiled profile is race-free and session-isolated, or the first
violation, reasoning only from payloads.bin, params.bin and profile.json (numpy only, no xDSL).

Checks, in this order (the first failing one raises `VerificationError` naming the tasks, their phase,
the arena, the byte range, the kind of conflict and what to do):
1. structure: ``worker_tasks`` partitions the payload rows and agrees with each record's worker; task ids
   are unique; each task's params word starts one of the blocks params.bin is packed of, and the block
   matches the opcode and ``n_inputs``; an EWISE block's generated-body index is -1 or names the
   ``ewise_bodies`` entry of its own expression, rank and input count, one that keeps input k (stores
   only where a select's condition holds) only for a task whose input k is its output; tiles lie inside the cohort
   and the iteration space; operand arenas exist; offsets and session strides are multiples of 4; the
   input, output and state bindings lie inside their arenas and do not overlap each other; profile.json's
   phases place every task in one phase; profile.json ``tensors`` (the arena plan) is well formed, inside
   the arenas, and gives no byte of the ACT or OUTPUT arena to two sessions (or to one session and the
   tensors all sessions share).
2. happens-before (wavec.analysis.happens_before): every wait has exactly ``wait_count`` signallers, no
   task waits on or signals the end-of-beat counter 0, and worker order plus waits form no cycle.
3. footprints (wavec.analysis.footprints): every byte an operand touches lies inside its arena (INPUT and
   OUTPUT: inside one half); nothing writes the WEIGHTS or INPUT arena (read-only / owned by the host);
   an operand in the STATE arena touches, for each session s of its task, only slot s of one state; no
   task writes one byte twice (two sessions or two output elements onto one byte); session s of a task
   reads, in the INPUT arena, only session s's frame of one input or its reset flag, and touches, in the
   ACT and OUTPUT arenas, only session s's slot of one tensor of the arena plan or a tensor every session
   shares (session stride 0), which only the weights and shared tensors feed. Then uniform tiles:
   the tasks of one phase that write one output view run equal parameters and read the same input
   views (tiles of one op differ only in their bounds), so a tile cannot read a stale tensor, another
   arena or another session stride that its siblings do not.
4. races: every two tasks that touch a common byte, at least one writing, are ordered by happens-before
   (checked in linear time per distinct access set: its writers form a chain, every other task sits
   between two consecutive writers), and in program order: a task of a later phase never happens before
   one of an earlier phase it conflicts with (a recycled buffer overwritten before its reader read it);
   no byte is written by two tasks of one phase; a task reads bytes it writes only through an identical
   elementwise view (else its own threads race).
5. dataflow: every ACT or OUTPUT byte a task reads was written earlier in the same beat; and for each
   view one phase reads (operand k at one offset and session stride: one tensor, across the phase's
   session and element tiles) the last writers of everything read belong to one phase (a STATE byte not yet
   written this beat counts as one source: the previous beat's value). Two sources mean an offset puts
   one tensor where another is read, or a producer tile is missing.
6. coverage: every byte of every output and of every state slot is written each beat.
7. final values: every byte of a state (all slots) or an output ends the beat with the value of a phase whose
   every write there is final (one write-back phase, or the in-place parts of the new value).
Beats are separated by a full barrier (counter 0), so state carried from beat b to b + 1 and the two
halves of the double-buffered input and output need no further ordering.

Budget and levels. Checks 4 and 5, task by task, cost memory in proportion to the *incidences*: the
elementary word segments that each access's word intervals cover, summed (about 250 bytes each at their
peak): duplex:1b at one session has 9.2e7 (it ran out of 23 GB), Silero at 1,024 sessions 3.5e5. Above
``max_incidences`` (default 2e7, some 5 GB) level "auto" proves checks 4 to 7 phase by phase instead
(wavec/verify_phases.py: tiles of a phase apart, phases that share bytes ordered in program order, the
dataflow on phases in one session's words); level "task" raises `VerificationTooLarge` before allocating
them, naming the count.

A phase is a named group of tasks from ``meta["phases"]``: its ``tasks`` are a list of task ids, or a count
(as wavec.emit writes: task ids follow program order, so phase i holds the next ``tasks`` ids); the table
must place every task in exactly one phase (check 1). A profile that lists no phases (a hand-built one)
groups the tasks that signal one phase-wide counter (``signal_phase``), or one ``signal`` counter when they
have none. Program order ranks phases by their lowest task id.
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from wavec.analysis.footprints import (
    Access,
    AccessGroups,
    FootprintCache,
    access_groups,
    concat_ranges,
    expected_inputs,
    segment_incidences,
)
from wavec.analysis.happens_before import HappensBefore, build_happens_before
from wavec.errors import VerificationError, VerificationTooLarge, WavecError
from wavec.opcodes import (ELEM_BYTES, MAX_INPUTS, OUT, Arena, ConvParams, Epilogue, EwiseParams, MatmulParams, Opcode,
                           decode_expr, kept_input, unpack_params)
from wavec.payload import operand_arena
from wavec.profile import Profile

ARENA_NAMES = {int(a): a.name.lower() for a in Arena}
ARENA_ID = {name: a for a, name in ARENA_NAMES.items()}
MAX_ARENA_BYTES = 1 << 48  # offsets and strides beyond it are corrupt (and would overflow int64 footprints)
SHARED_ARENAS = (Arena.STATE, Arena.ACT, Arena.OUTPUT)  # arenas tasks both read and write
FRESH_ARENAS = (Arena.ACT, Arena.OUTPUT)  # bytes that hold nothing at the start of a beat


@dataclass
class VerifyReport:
    """What the verifier proved: counts over the whole profile, and how long it took."""

    tasks: int
    edges: int  # direct happens-before edges (worker order + one per (wait, signaller))
    conflicting_pairs: int  # distinct task pairs that touch a common byte, at least one writing
    ordered: int  # of those, ordered by happens-before (all of them when verify returns)
    pairs_exact: bool = True  # False: too many to enumerate; the counts are the sum over access sets (a bound)
    accesses: int = 0  # (task, operand) footprints
    intervals: int = 0  # word intervals over all sessions (task level)
    seconds: float = 0.0
    level: str = "task"  # "phase": conflicting_pairs counts phase pairs (wavec.verify_phases)
    tile_pairs: int = 0  # phase level: of those phase pairs, the ones proved task by task
    per_session_arenas: tuple[str, ...] = ()  # phase level: arenas proved in every session's words, not one's

    def summary(self) -> str:
        if self.level == "phase":
            words = f"; {', '.join(self.per_session_arenas)} in per-session words" if self.per_session_arenas else ""
            return (
                f"verified at phase level: {self.tasks} tasks, {self.edges} edges, {self.conflicting_pairs} phase "
                f"pair{'' if self.conflicting_pairs == 1 else 's'} sharing bytes ordered in program order "
                f"({self.tile_pairs} tile by tile{words})"
            )
        bound = "" if self.pairs_exact else " (at most; counted per access set)"
        return (
            f"verified: {self.tasks} tasks, {self.edges} edges, {self.conflicting_pairs} conflicting pairs ordered{bound}"
        )


MAX_INCIDENCES = 20_000_000
LEVELS = ("auto", "task", "phase")


def verify_profile(profile: Profile, max_incidences: int = MAX_INCIDENCES, level: str = "auto") -> VerifyReport:
    """Proves ``profile`` race-free and session-isolated, or raises VerificationError naming the first
    violation (see the module docstring for the checks and their order). ``level``: "task" proves checks 4
    to 7 task by task and raises VerificationTooLarge when that would need more than ``max_incidences`` (0:
    no limit); "phase" proves them phase by phase (wavec.verify_phases), which raises VerificationTooLarge
    for the few programs it cannot follow; "auto" runs the task level within the budget, the phase level
    above it."""
    if level not in LEVELS:
        raise WavecError(f"verify level must be one of {', '.join(LEVELS)}, got {level!r}")
    return _Verifier(profile, max_incidences, level).run()


def main(profile_dir: str) -> int:
    """`python3 -m wavec.verify DIR`: prints the summary line, or the violation on one line; returns the
    exit code (1: a violation, 3: too large to verify)."""
    from wavec.profile import load

    try:
        report = verify_profile(load(profile_dir))
    except VerificationTooLarge as e:
        print(f"{profile_dir}: not verified: {e}")
        return 3
    except WavecError as e:
        print(f"{profile_dir}: {type(e).__name__}: {e}".replace("\n", " "))
        return 1
    print(report.summary())
    return 0


def param_blocks(words: np.ndarray) -> dict:
    """params.bin is a sequence of parameter blocks, packed one after the other: word offset -> the decoded
    block, for every block that decodes and packs back to the same words. A task must point at one of them
    (a pointer into the middle of a block decodes garbage, or never ends)."""
    blocks, at = {}, 0
    while at < len(words):
        try:
            params = unpack_params(words, at)
            packed = np.asarray(params.pack(), np.int64)
        except (ValueError, IndexError, OverflowError):
            break
        if len(packed) == 0 or not np.array_equal(words[at : at + len(packed)], packed):
            break
        blocks[at] = params
        at += len(packed)
    return blocks


def count_intervals(rec: np.ndarray, blocks: dict, cache: FootprintCache, stop_above: int = 0) -> int:
    """The word intervals of all accesses of payload rows ``rec`` to the shared arenas, which the
    incidences are at least, from the footprint runs of each distinct tile (``cache`` keeps them for the
    checks after): a program over the budget is refused before the per-task checks. Counting stops once
    the total passes ``stop_above`` (0: never), the budget it is compared with: duplex:11b at 56
    sessions has 1.5e8 intervals, and counting them all took 12 s. ``blocks``: `param_blocks` of the
    params table. Rows whose parameters are malformed count nothing here; the structure check reports
    them."""
    strided = ((rec["session_stride"] != 0) * (1 << np.arange(rec["session_stride"].shape[1]))).sum(axis=1)
    shared = {int(a) for a in SHARED_ARENAS}

    def tile_intervals(params, at, n_in, eb, ee, arenas, bits) -> tuple[int, int]:
        """(intervals per session of the strided operands, intervals of the unstrided ones) of one tile."""
        if params is None or n_in > MAX_INPUTS or n_in != expected_inputs(params) or not 0 <= eb <= ee <= params.n_elems:
            return 0, 0
        per_session = once = 0
        for k in [*range(n_in), OUT]:
            if (arenas >> (4 * k)) & 0xF in shared:
                runs = len(cache.runs(at, params, k, eb, ee, n_in)[0])
                if bits >> k & 1:
                    per_session += runs
                else:
                    once += runs
        return per_session, once

    per_tile: dict[tuple, tuple[int, int]] = {}
    total = 0
    for at, n_in, eb, ee, arenas, bits, sb, se in zip(
        *(rec[f].tolist() for f in ("params", "n_inputs", "elem_begin", "elem_end", "arenas")),
        strided.tolist(), rec["session_begin"].tolist(), rec["session_end"].tolist(),
    ):
        key = (at, n_in, eb, ee, arenas, bits)
        counts = per_tile.get(key)
        if counts is None:
            counts = per_tile[key] = tile_intervals(blocks.get(at), at, n_in, eb, ee, arenas, bits)
        total += counts[0] * max(se - sb, 0) + counts[1]
        if stop_above and total > stop_above:
            break
    return total


@functools.lru_cache(maxsize=4096)
def decoded(code: tuple[int, ...]):
    """decode_expr, once per distinct bytecode (tasks of a phase share their parameter block's)."""
    return decode_expr(code)


def budget_message(tasks: int, incidences: int, budget: int, bound: str = "") -> str:
    """Why a program is not verified: ``incidences`` (at least, with ``bound``) over ``budget``."""
    return (
        f"{tasks} tasks touch {bound + ' ' if bound else ''}{incidences:,} word segments of the state, act and "
        f"output arenas (counted per access), over the verifier's budget of {budget:,} (about 250 bytes each): "
        "verify a smaller cohort of the same model, or raise the budget (`wavec verify --max-incidences N`, "
        "wpk-verify{max-incidences=N}; 0 for none) on a machine with the memory"
    )


# ------------------------------------------------------------------------------------------------


class _Verifier:
    def __init__(self, profile: Profile, max_incidences: int = MAX_INCIDENCES, level: str = "auto"):
        self.p = profile
        self.max_incidences = max_incidences
        self.level = level
        self.meta = profile.meta
        self.rec = profile.payloads
        self.n = len(self.rec)
        self.sessions = int(self.meta["sessions"])
        self.arena_bytes = {int(a): int(self.meta["arena_bytes"].get(ARENA_NAMES[int(a)], 0)) for a in Arena}
        self.task_id = self.rec["task"].astype(np.int64)
        self.signal = self.rec["signal"].astype(np.int64)
        self.params: list = [None] * self.n
        self.fp_cache = FootprintCache(profile.params, unpack_params)
        self._phase_name: dict[int, str] = {}
        self.phase = self._phases()

    # ---- naming --------------------------------------------------------------------------------
    def _phases(self) -> np.ndarray:
        """Phase key of each row: its index in profile.json ``phases``, which must then place every task in
        exactly one phase; or, for a profile that lists no phases, the counter its tasks signal."""
        phases = self.meta.get("phases") or []
        if not phases:
            sp = self.rec["signal_phase"].astype(np.int64)
            return np.where(sp != 0, sp, self.signal) + (1 << 40)  # keys never collide with meta phase indices
        by_id = {int(t): r for r, t in enumerate(self.task_id)}
        ids = np.sort(self.task_id)
        key = np.full(self.n, -1, np.int64)
        try:
            counted = [int(ph["tasks"]) if isinstance(ph["tasks"], int) else None for ph in phases]
            if all(c is not None for c in counted) and sum(counted) != self.n:
                raise VerificationError(
                    f"profile.json's phases count {sum(counted)} tasks but the payload table has {self.n}: a task was "
                    "added or dropped after the program was emitted; compile the profile again"
                )
            start = 0
            for i, (ph, count) in enumerate(zip(phases, counted)):
                label = f"{ph.get('name', i)}" + (f" ({ph['op']})" if ph.get("op") else "")
                if count is not None:  # a count: the phase's tasks are the next ids in program (task id) order
                    members = ids[start : start + count].tolist()
                    start += count
                else:
                    members = ph["tasks"]
                for t in members:
                    r = by_id[int(t)]
                    if key[r] >= 0:
                        raise VerificationError(f"profile.json's phases list task {int(t)} in two phases")
                    key[r] = i
                    self._phase_name[r] = label
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise VerificationError(f"profile.json's phases are malformed ({type(e).__name__}: {e}): each phase "
                                    "needs its tasks, as a count or a list of task ids of the payload table") from e
        if (key < 0).any():
            raise VerificationError(
                f"profile.json's phases leave task {int(self.task_id[np.flatnonzero(key < 0)[0]])} in no phase: "
                "each task belongs to exactly one phase"
            )
        return key

    def name(self, r: int) -> str:
        rec = self.rec[r]
        try:
            op = Opcode(int(rec["opcode"])).name
        except ValueError:
            op = f"opcode {int(rec['opcode'])}"
        return f"task {int(rec['task'])} ({op}, phase {self.phase_label(r)}, worker {int(rec['worker'])}, row {r})"

    def phase_label(self, r: int) -> str:
        """The name (and op) of row ``r``'s phase, or its counter when profile.json names no phases."""
        rec = self.rec[r]
        return self._phase_name.get(r, f"signal counter {int(rec['signal_phase']) or int(rec['signal'])}")

    def short(self, r: int) -> str:
        return f"task {int(self.rec[r]['task'])}"

    def where(self, arena: int, b0: int, b1: int) -> str:
        """``act arena bytes [b0, b1) (tensor 't', session 2, byte 16)``: the tensor and slot holding b0."""
        notes = []
        for t in self.meta.get("tensors", []):
            if t.get("arena") != ARENA_NAMES.get(arena):
                continue
            off, nbytes, stride = int(t["offset"]), int(t["bytes"]), int(t.get("session_stride", 0))
            rel = b0 - off
            if rel < 0:
                continue
            s, inner = divmod(rel, stride) if stride else (0, rel)
            if s < self.sessions and inner < nbytes:  # recycled bytes: every tensor planned there, up to 3
                notes.append(f"tensor {t['name']!r}" + (f", session {s}" if stride else "") + f", byte {inner}")
                if len(notes) == 3:
                    break
        text = f"{ARENA_NAMES.get(arena, arena)} arena bytes [{b0}, {b1})"
        if arena in (Arena.INPUT, Arena.OUTPUT):
            text += " of the beat's half"
        return text + (f" ({' or '.join(notes)})" if notes else "")

    # ---- 1. structure --------------------------------------------------------------------------
    def structure(self) -> None:
        n = self.n
        rows = [(int(b), int(e)) for b, e in self.meta["worker_tasks"]]
        if len(rows) != int(self.meta.get("workers", len(rows))):
            raise VerificationError(
                f"worker_tasks has {len(rows)} rows but the profile has {self.meta['workers']} workers"
            )
        owner = np.full(n, -1, np.int64)
        for w, (b, e) in enumerate(rows):
            if not 0 <= b <= e <= n:
                raise VerificationError(f"worker_tasks[{w}] = [{b}, {e}) lies outside the {n} payload rows")
            if (owner[b:e] >= 0).any():
                raise VerificationError(f"worker_tasks[{w}] = [{b}, {e}) overlaps another worker's rows")
            owner[b:e] = w
            bad = np.flatnonzero(self.rec["worker"][b:e] != w)
            if len(bad):
                raise VerificationError(f"{self.name(b + int(bad[0]))} sits in worker {w}'s rows of worker_tasks")
        if (owner < 0).any():
            raise VerificationError(f"{self.name(int(np.flatnonzero(owner < 0)[0]))} belongs to no worker: it never runs")
        self.worker_rows = rows
        blocks = self.param_blocks
        ids, first, counts = np.unique(self.task_id, return_index=True, return_counts=True)
        if (counts > 1).any():
            t = int(ids[counts > 1][0])
            dup = np.flatnonzero(self.task_id == t)
            raise VerificationError(f"task id {t} is used by payload rows {dup.tolist()}: task ids must be unique")
        fields = ("params", "opcode", "n_inputs", "session_begin", "session_end", "elem_begin", "elem_end", "offset",
                  "session_stride", "arenas")
        for r, (at, opcode, n_in, sb, se, eb, ee, offset, stride, arenas) in enumerate(
            zip(*(self.rec[f].tolist() for f in fields))
        ):
            params = blocks.get(at)
            if params is None:
                raise VerificationError(
                    f"{self.name(r)}: params word {at} is not the start of a parameter block of "
                    f"params.bin (its {len(blocks)} blocks start at words {sorted(blocks)[:8]}"
                    f"{', ...' if len(blocks) > 8 else ''}): point the task at its block"
                )
            if opcode != int(self.p.params[at]):
                raise VerificationError(f"{self.name(r)}: its parameter block at word {at} is another opcode's")
            self.params[r] = params
            if isinstance(params, EwiseParams) and params.body != -1:
                self.ewise_body(r, params)
            if isinstance(params, (MatmulParams, ConvParams)) and params.epilogue.body != -1:
                self.epilogue_body(r, params.epilogue)
            if n_in > MAX_INPUTS or n_in != expected_inputs(params):
                raise VerificationError(f"{self.name(r)}: n_inputs = {n_in} but its parameters read {expected_inputs(params)}")
            if not 0 <= sb <= se <= self.sessions:
                raise VerificationError(f"{self.name(r)}: sessions [{sb}, {se}) outside the cohort of {self.sessions}")
            if not 0 <= eb <= ee <= params.n_elems:
                raise VerificationError(
                    f"{self.name(r)}: tile elements [{eb}, {ee}) outside the {params.n_elems} of its iteration space "
                    f"{list(params.shape)}: fix the tile bounds"
                )
            for k in [*range(n_in), OUT]:
                a = (arenas >> (4 * k)) & 0xF
                if a not in ARENA_NAMES:
                    raise VerificationError(f"{self.name(r)}: operand {k} names arena {a}, not a wavec arena")
                for f, value in (("offset", offset[k]), ("session_stride", stride[k])):
                    if value % ELEM_BYTES:
                        raise VerificationError(
                            f"{self.name(r)}: operand {k} {f} = {value} bytes is not a multiple of 4 (float32)"
                        )
                    if abs(value) >= MAX_ARENA_BYTES:
                        raise VerificationError(
                            f"{self.name(r)}: operand {k} {f} = {value} bytes lies beyond any arena (they are below "
                            f"2^{MAX_ARENA_BYTES.bit_length() - 1} bytes): fix the operand's {f}"
                        )
        self.bindings()
        self.plan  # noqa: B018 - checks the arena plan's table before anything reads it
        for arena in (Arena.ACT, Arena.OUTPUT):
            self.plan_isolates_sessions(arena)

    def ewise_body(self, r: int, params: EwiseParams) -> None:
        """The CUDA kernel runs generated body ``params.body`` instead of the block's code: it must be an
        entry of profile.json ``ewise_bodies`` with the block's expression, rank and input count; one that
        keeps input k (stores only where the select's condition holds) is only for a task whose input k is
        its output, element for element, since it leaves the other elements as they were."""
        bodies = self.meta.get("ewise_bodies") or []
        b = params.body
        if not 0 <= b < len(bodies):
            raise VerificationError(
                f"{self.name(r)}: its EWISE block names generated body {b}, but profile.json lists "
                f"{len(bodies)} ewise_bodies: set the block's last word to -1 (bytecode) or to its body's index"
            )
        try:
            mine = str(decoded(params.code))
        except ValueError as e:
            raise VerificationError(f"{self.name(r)}: its EWISE bytecode is malformed ({e})") from e
        entry = bodies[b]
        want = (str(entry.get("expr")), int(entry.get("rank", -1)), int(entry.get("n_inputs", -1)))
        if (mine, len(params.shape), len(params.in_strides)) != want:
            raise VerificationError(
                f"{self.name(r)}: its EWISE block computes {mine!r} (rank {len(params.shape)}, "
                f"{len(params.in_strides)} inputs) but names generated body {b}, {want[0]!r} (rank {want[1]}, "
                f"{want[2]} inputs): the kernel would run another expression; renumber the bodies (wpk-payload)"
            )
        keep = int(entry.get("keep", -1))
        if keep >= 0:
            rec = self.rec[r]
            same = kept_input(decoded(params.code)) == keep and keep < len(params.in_strides) and all(
                int(rec[f][keep]) == int(rec[f][OUT]) for f in ("offset", "session_stride")
            ) and operand_arena(rec, keep) == operand_arena(rec, OUT) and params.in_strides[keep] == params.out_strides
            if not same:
                raise VerificationError(
                    f"{self.name(r)}: it names generated body {b}, which keeps input {keep} (stores only where "
                    f"{mine!r}'s condition holds), but its input {keep} is not its output element for element: "
                    "the other elements would keep stale values; renumber the bodies (wpk-payload)"
                )

    def epilogue_body(self, r: int, ep: Epilogue) -> None:
        """The CUDA kernel runs generated epilogue ``ep.body`` instead of the epilogue's code: it must be an entry
        of profile.json ``epilogue_bodies`` with the epilogue's expression and input count."""
        bodies = self.meta.get("epilogue_bodies") or []
        b = ep.body
        if not 0 <= b < len(bodies):
            raise VerificationError(
                f"{self.name(r)}: its epilogue names generated body {b}, but profile.json lists {len(bodies)} "
                "epilogue_bodies: set the epilogue's last word to -1 (bytecode) or to its body's index"
            )
        try:
            mine = (str(decoded(ep.code)), 1 + len(ep.strides))
        except ValueError as e:
            raise VerificationError(f"{self.name(r)}: its epilogue bytecode is malformed ({e})") from e
        want = (str(bodies[b].get("expr")), int(bodies[b].get("n_inputs", -1)))
        if mine != want:
            raise VerificationError(
                f"{self.name(r)}: its epilogue computes {mine[0]!r} ({mine[1]} inputs) but names generated body {b}, "
                f"{want[0]!r} ({want[1]} inputs): the kernel would run another expression; renumber the bodies "
                "(wpk-payload)"
            )

    def uniform_tiles(self) -> None:
        """Tiles of one op differ only in their bounds: the tasks of one phase that write one output view
        (arena, offset, session stride) run equal parameters and read the same input views. A task
        reading another tensor, another arena or another session stride than its sibling tiles reads
        bytes its op does not read, even where those bytes hold a consistent (stale) value."""
        n_inputs, offset, stride, arenas = (self.rec[f].tolist() for f in ("n_inputs", "offset", "session_stride", "arenas"))
        view = lambda r, k: ((arenas[r] >> (4 * k)) & 0xF, offset[r][k], stride[r][k])  # noqa: E731
        first: dict[tuple, int] = {}
        for r, phase in enumerate(self.phase.tolist()):
            q = first.setdefault((phase, *view(r, OUT)), r)
            if q == r:
                continue
            n_in = n_inputs[r]
            what = None
            if self.params[r] != self.params[q] or n_in != n_inputs[q]:
                what = "runs another parameter block" if n_in == n_inputs[q] else "reads another number of inputs"
            else:
                for k in range(n_in):
                    mine, theirs = view(r, k), view(q, k)
                    if mine != theirs:
                        what = (
                            f"reads input operand {k} as {ARENA_NAMES.get(mine[0], mine[0])} arena offset {mine[1]}, "
                            f"session stride {mine[2]}, where {self.short(q)} reads it as "
                            f"{ARENA_NAMES.get(theirs[0], theirs[0])} arena offset {theirs[1]}, session stride {theirs[2]}"
                        )
                        break
            if what:
                raise VerificationError(
                    f"{self.name(r)} and {self.name(q)} are tiles of one op writing one output view, but {self.short(r)} "
                    f"{what}: tiles of one op may differ only in their session and element bounds. Fix the operand's "
                    "offset, session stride, arena or the task's parameter block"
                )

    @functools.cached_property
    def param_blocks(self) -> dict:
        return param_blocks(self.p.params)

    def bindings(self) -> None:
        """Inputs, reset flags, outputs and state slots: inside their arenas, pairwise disjoint per arena."""
        spans: dict[int, list[tuple[int, int, str]]] = {int(a): [] for a in Arena}

        def add(arena: Arena, spec: dict, what: str) -> None:
            nbytes = ELEM_BYTES * int(np.prod(spec.get("shape", ()), dtype=np.int64))
            off, stride = int(spec["offset"]), int(spec["session_stride"])
            if max(abs(off), abs(stride)) >= MAX_ARENA_BYTES:
                raise VerificationError(f"{what}: offset {off} or session stride {stride} bytes lies beyond any arena")
            for s in range(self.sessions):
                b = off + s * stride
                if b < 0 or b + nbytes > self.arena_bytes[int(arena)]:
                    raise VerificationError(
                        f"{what} session {s} occupies bytes [{b}, {b + nbytes}), outside the {ARENA_NAMES[int(arena)]} "
                        f"arena of {self.arena_bytes[int(arena)]} bytes"
                    )
                spans[int(arena)].append((b, b + nbytes, f"{what} session {s}"))

        for spec in self.meta.get("inputs", []):
            add(Arena.INPUT, spec, f"input {spec['name']!r}")
        if self.meta.get("reset"):
            add(Arena.INPUT, self.meta["reset"], "the reset flag")
        for spec in self.meta.get("outputs", []):
            add(Arena.OUTPUT, spec, f"output {spec['name']!r}")
        for spec in self.meta.get("states", []):
            add(Arena.STATE, spec, f"state {spec['name']!r}")
        for arena, items in spans.items():
            items = sorted(i for i in items if i[1] > i[0])
            for (b0, e0, w0), (b1, e1, w1) in zip(items, items[1:]):
                if b1 < e0:
                    raise VerificationError(
                        f"{w0} and {w1} overlap in {ARENA_NAMES[arena]} arena bytes [{b1}, {min(e0, e1)}): "
                        "bindings must be disjoint; fix the arena plan"
                    )

    @functools.cached_property
    def plan(self) -> dict[str, tuple[np.ndarray, list[str]]]:
        """profile.json ``tensors`` (the arena plan), checked and read once: per arena name, [offset, session
        stride, bytes] rows (int64) and the tensors' names. Every entry names an arena, has integer offset,
        session stride and bytes, puts every session's slot inside its arena, and declares parts
        (``part_bytes``) inside a slot; else VerificationError (a table that wraps int64 could make a
        session's slot look like another's)."""
        rows: dict[str, list] = {name: [] for name in ARENA_NAMES.values()}
        names: dict[str, list[str]] = {name: [] for name in ARENA_NAMES.values()}
        last = self.sessions - 1
        for i, t in enumerate(self.meta.get("tensors") or []):
            try:
                arena, name = t["arena"], str(t["name"])
                off, stride, nbytes = (t[k] for k in ("offset", "session_stride", "bytes"))
                numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (off, stride, nbytes))
                parts = [tuple(p) for p in t.get("part_bytes") or []]
            except (KeyError, TypeError, ValueError) as e:
                raise VerificationError(f"profile.json tensors[{i}] is malformed ({type(e).__name__}: {e}): each "
                                        "tensor needs a name, an arena, and integer offset, session_stride and bytes") from e
            if arena not in rows or not numbers or nbytes < 0 or max(abs(off), abs(stride)) >= MAX_ARENA_BYTES:
                raise VerificationError(
                    f"profile.json tensors[{i}] ({name!r}): arena {arena!r}, offset {off!r}, session stride {stride!r}, "
                    f"bytes {nbytes!r}: the arena must be one of {', '.join(rows)}, the numbers integers, bytes >= 0 "
                    f"and offsets and strides below 2^{MAX_ARENA_BYTES.bit_length() - 1}"
                )
            lo, hi = min(off, off + last * stride), max(off, off + last * stride) + nbytes
            if nbytes and (lo < 0 or hi > self.arena_bytes[ARENA_ID[arena]]):
                raise VerificationError(
                    f"profile.json tensors[{i}] ({name!r}): its slots span {arena} arena bytes [{lo}, {hi}), outside the "
                    f"arena of {self.arena_bytes[ARENA_ID[arena]]} bytes: fix the arena plan"
                )
            if not all(len(p) == 2 and all(isinstance(b, int) for b in p) and 0 <= p[0] <= p[1] <= max(nbytes, stride)
                       for p in parts):
                raise VerificationError(f"profile.json tensors[{i}] ({name!r}): part_bytes {parts} do not lie inside "
                                        "one session's slot")
            rows[arena].append((off, stride, nbytes))
            names[arena].append(name)
        return {a: (np.array(rows[a], np.int64).reshape(-1, 3), names[a]) for a in rows}

    def plan_isolates_sessions(self, arena: int) -> None:
        """No byte of the arena plan (profile.json ``tensors`` in ``arena``) belongs to two sessions: slot s of
        one tensor may share bytes with slot s of another (recycling within a session), never with a slot of
        another session; a tensor every session shares (session stride 0) may share bytes with other shared
        ones only. `check_session_slots` then holds every task of session s to bytes of session s and shared
        bytes. One sweep over the slots in address order: the first slot to overlap one of another owner
        overlaps the farthest-reaching slot before it, which is of that other owner."""
        name = ARENA_NAMES[arena]
        table, named = self.plan[name]
        named = [n for n, nbytes in zip(named, table[:, 2]) if nbytes > 0]
        table = table[table[:, 2] > 0]
        if not len(table) or self.sessions < 2:
            return
        tensor = np.repeat(np.arange(len(table)), self.sessions)
        session = np.where(table[tensor, 1] == 0, -1, np.tile(np.arange(self.sessions, dtype=np.int64), len(table)))
        begin = table[tensor, 0] + session * table[tensor, 1]
        end = begin + table[tensor, 2]
        o = np.lexsort((end, begin))
        begin, end, session, tensor = begin[o], end[o], session[o], tensor[o]
        reach = np.maximum.accumulate(end)
        farthest = np.maximum.accumulate(np.where(end == reach, np.arange(len(end)), 0))
        bad = np.flatnonzero((begin[1:] < reach[:-1]) & (session[farthest[:-1]] != session[1:])) + 1
        if len(bad):
            i, j = int(bad[0]), int(farthest[bad[0] - 1])
            owner = lambda k: "every session (shared)" if session[k] < 0 else f"session {int(session[k])}"  # noqa: E731
            raise VerificationError(
                f"the arena plan gives {name} arena bytes [{int(begin[i])}, {min(int(end[i]), int(end[j]))}) to "
                f"{owner(i)} of tensor {named[tensor[i]]!r} and to {owner(j)} of tensor {named[tensor[j]]!r} "
                "(profile.json tensors): two sessions' data would share bytes. Give every session's slot bytes of "
                "its own (offsets, session strides)"
            )

    # ---- 3. footprints -------------------------------------------------------------------------
    def footprints(self) -> list[Access]:
        cache = self.fp_cache
        out: list[Access] = []
        fields = ("params", "n_inputs", "session_begin", "session_end", "elem_begin", "elem_end", "offset",
                  "session_stride", "arenas")
        for r, (at, n_in, sb, se, eb, ee, offset, stride, arenas) in enumerate(zip(*(self.rec[f].tolist() for f in fields))):
            params = self.params[r]
            for k in [*range(n_in), OUT]:
                arena = (arenas >> (4 * k)) & 0xF
                rb, re_, dups = cache.runs(at, params, k, eb, ee, n_in, hull=arena not in SHARED_ARENAS and k != OUT)
                acc = Access(r, k, arena, k == OUT, offset[k], stride[k], (sb, se), rb, re_, dups)
                if acc.empty:
                    continue
                self.check_access(acc)
                out.append(acc)
        self.check_session_slots(Arena.STATE, [a for a in out if a.arena == Arena.STATE])
        self.check_session_slots(Arena.INPUT, [a for a in out if a.arena == Arena.INPUT and not a.write])
        shared = {id(a) for arena in (Arena.ACT, Arena.OUTPUT)
                  for a in self.check_session_slots(arena, [a for a in out if a.arena == arena])}
        self.check_shared_producers(out, shared)
        return out

    def check_shared_producers(self, accesses: list[Access], shared: set[int]) -> None:
        """A cohort-shared tensor (session stride 0: every session reads it) is computed from shared data
        only: a task writing one reads the weights arena or other shared tensors, never a session's input,
        state or activations (which would hand one session's data to every session). ``shared``: the ids of
        the act and output accesses inside shared tensors."""
        producers = {a.row for a in accesses if a.write and id(a) in shared}
        for a in accesses:
            if a.row in producers and not a.write and a.arena != Arena.WEIGHTS and id(a) not in shared:
                raise VerificationError(
                    f"{self.name(a.row)} writes a tensor every session shares (session stride 0) but reads "
                    f"{ARENA_NAMES[a.arena]} arena bytes of its sessions through input operand {a.operand}: one "
                    "session's data would reach every session. Compute the shared tensor from weights and shared "
                    "tensors only, or give it a slot per session"
                )

    @functools.cached_property
    def binding_table(self) -> dict[int, np.ndarray]:
        """[offset, session stride, bytes] rows (int64) of the state bindings, and of the input bindings and
        the reset flag: the slots `check_session_slots` holds those arenas' accesses to."""
        def table(specs: list[dict]) -> np.ndarray:
            return np.array([(int(t["offset"]), int(t["session_stride"]),
                              ELEM_BYTES * int(np.prod(t.get("shape", ()), dtype=np.int64))) for t in specs],
                            np.int64).reshape(-1, 3)
        inputs = [*self.meta.get("inputs", []), *([self.meta["reset"]] if self.meta.get("reset") else [])]
        return {Arena.STATE: table(self.meta.get("states", [])), Arena.INPUT: table(inputs)}

    def check_session_slots(self, arena: int, accesses: list[Access]) -> list[Access]:
        """Session isolation: session s of a task touches only session s's slot of one entry of its arena's
        table (STATE: a state binding; INPUT, reads: an input's frame or the reset flag; ACT and OUTPUT: a
        tensor of the arena plan, profile.json ``tensors``, or a tensor every session shares, session stride
        0: a value computed from weights alone, `check_shared_producers`). Without it session s could read
        another session's state, audio or activations with every producer in place. Checked for all accesses
        of the arena at once (duplex:1b has 2,246 act tensors); returns those inside shared tensors."""
        if not accesses:
            return []
        table = self.binding_table[arena] if arena in (Arena.STATE, Arena.INPUT) else self.plan[ARENA_NAMES[arena]][0]
        counts = [a.n_sessions for a in accesses]
        which = np.repeat(np.arange(len(accesses)), counts)
        session = concat_ranges([a.sessions[0] for a in accesses], [a.sessions[1] for a in accesses])
        first = np.array([a.offset + ELEM_BYTES * int(a.run_begin[0]) for a in accesses], np.int64)[which]
        size = np.array([ELEM_BYTES * int(a.run_end[-1] - a.run_begin[0]) for a in accesses], np.int64)[which]
        lo = first + session * np.array([a.stride for a in accesses], np.int64)[which]
        inside = np.zeros(len(lo), bool)
        in_shared = np.zeros(len(lo), bool)
        for stride in np.unique(table[:, 1]):
            off, nbytes = table[table[:, 1] == stride, 0], table[table[:, 1] == stride, 2]
            o = np.argsort(off)
            off, reach = off[o], np.maximum.accumulate((off + nbytes)[o])  # the farthest end of entries at or before
            at = lo - session * stride  # where session s's bytes sit in session 0's layout
            i = np.searchsorted(off, at, side="right") - 1
            hit = (i >= 0) & (reach[np.maximum(i, 0)] >= at + size)
            inside |= hit
            in_shared |= hit if stride == 0 else False
        bad = np.flatnonzero(~inside)
        if len(bad):
            acc, s, b0 = accesses[int(which[bad[0]])], int(session[bad[0]]), int(lo[bad[0]])
            raise VerificationError(self.slot_violation(arena, acc, s, b0, b0 + int(size[bad[0]])))
        return [a for a, all_shared in zip(accesses, np.logical_and.reduceat(in_shared, np.cumsum([0, *counts[:-1]])))
                if all_shared]

    def slot_violation(self, arena: int, acc: Access, s: int, b0: int, b1: int) -> str:
        """Why ``acc``'s session ``s``, touching arena bytes [b0, b1), breaks `check_session_slots`."""
        what = "output" if acc.operand == OUT else f"input operand {acc.operand}"
        if arena == Arena.STATE:
            return (
                f"{self.name(acc.row)}: {what} of session {s} touches state arena bytes [{b0}, {b1}), which is not "
                f"inside slot {s} of one state ({self.slot_owner(b0)}): a task of session s may touch only slot s. "
                "Fix the operand's offset (session 0's slot) or session stride (the state's)"
            )
        if arena == Arena.INPUT:
            return (
                f"{self.name(acc.row)}: {what} of session {s} reads {self.where(arena, b0, b1)}, which is not inside "
                f"session {s}'s frame of one input or its reset flag: a task of session s may read only session s's "
                "input. Fix the operand's offset, session stride or tile bounds"
            )
        name = ARENA_NAMES[arena]
        return (
            f"{self.name(acc.row)}: {what} of session {s} touches {self.where(arena, b0, b1)}, which is not inside "
            f"session {s}'s slot of one {name} tensor of the arena plan (profile.json tensors): a task of session s "
            "may touch only session s's bytes. Fix the operand's offset or session stride"
        )

    def check_budget(self, incidences: int, bound: str = "") -> None:
        if self.max_incidences and incidences > self.max_incidences:
            raise VerificationTooLarge(budget_message(self.n, incidences, self.max_incidences, bound))

    def check_access(self, acc: Access) -> None:
        r, k, arena = acc.row, acc.operand, acc.arena
        what = "output" if k == OUT else f"input operand {k}"
        an = ARENA_NAMES[arena]
        if acc.write and arena == Arena.INPUT:
            raise VerificationError(
                f"{self.name(r)} writes the input arena ({self.where(arena, *map(int, (x[0] for x in acc.byte_extent())))}): "
                "the host owns it (frames and reset flags); write to the act or output arena instead"
            )
        if acc.write and arena == Arena.WEIGHTS:
            raise VerificationError(
                f"{self.name(r)} writes the weights arena, which is read-only and shared by the cohort; "
                "write to the act, state or output arena instead"
            )
        if acc.write and acc.duplicates:
            raise VerificationError(
                f"{self.name(r)}: its output view maps {acc.duplicates} iteration points onto elements another point "
                "already writes (a zero or overlapping out stride): one byte written twice per session"
            )
        if acc.write and acc.stride == 0 and acc.n_sessions > 1:
            lo, hi = acc.byte_extent()
            raise VerificationError(
                f"{self.name(r)} writes {self.where(arena, int(lo[0]), int(hi[0]))} with session_stride 0 for "
                f"{acc.n_sessions} sessions: every session writes the same bytes (write-after-write). "
                "Give the output a per-session stride"
            )
        if arena == Arena.STATE:
            return  # inside a state's slot, which lies inside the arena (check_session_slots, bindings)
        size = self.arena_bytes[arena]
        shifts = (acc.sessions[0] * acc.stride, (acc.sessions[1] - 1) * acc.stride)  # the extreme sessions' bases
        first, last = acc.offset + ELEM_BYTES * int(acc.run_begin[0]), acc.offset + ELEM_BYTES * int(acc.run_end[-1])
        if first + min(shifts) < 0 or last + max(shifts) > size:
            lo, hi = acc.byte_extent()
            bad = np.flatnonzero((lo < 0) | (hi > size))
            s = acc.sessions[0] + int(bad[0])
            raise VerificationError(
                f"{self.name(r)}: {what} of session {s} touches {an} arena bytes [{int(lo[bad[0]])}, {int(hi[bad[0]])}), "
                f"outside the arena of {size} bytes" + (" (one half of the double buffer)" if arena in (Arena.INPUT, Arena.OUTPUT) else "")
                + ": fix the operand's offset, session stride or tile bounds"
            )

    def slot_owner(self, byte: int) -> str:
        for spec in self.meta.get("states", []):
            nbytes = ELEM_BYTES * int(np.prod(spec["shape"], dtype=np.int64))
            off, stride = int(spec["offset"]), int(spec["session_stride"])
            for s in range(self.sessions):
                if off + s * stride <= byte < off + s * stride + nbytes:
                    return f"byte {byte} is in slot {s} of state {spec['name']!r}"
        return f"byte {byte} is in no state slot"

    # ---- 4/5. races and dataflow ---------------------------------------------------------------
    def races_and_dataflow(self, hb: HappensBefore) -> tuple[int, bool, int]:
        """Checks 4 and 5 on ``self.accesses``. Returns (conflicting pairs, whether that count is exact, word
        intervals)."""
        accesses, acc_task, acc_write, acc_op = self.accesses, self.acc_task, self.acc_write, self.acc_op
        self.acc_phase = self.phase[acc_task]  # per access, for check 7
        total_intervals = total_incidences = 0
        scans = []
        for arena in SHARED_ARENAS:
            idx = [i for i, a in enumerate(accesses) if a.arena == arena]
            if not idx:
                continue
            parts = [accesses[i].word_intervals() for i in idx]
            begins = np.concatenate([p[0] for p in parts])
            ends = np.concatenate([p[1] for p in parts])
            which = np.repeat(np.asarray(idx, np.int64), [len(p[0]) for p in parts])
            total_intervals += len(begins)
            total_incidences += segment_incidences(begins, ends)
            self.check_budget(total_incidences)
            g = access_groups(begins, ends, which, len(accesses))
            twice = np.flatnonzero((g.member_count > 1) & acc_write[g.member_acc])
            if len(twice):
                i = twice[np.argmin(self.task_id[acc_task[g.member_acc[twice]]])]
                a, seg = int(g.member_acc[i]), int(g.rep[g.member_group[i]])
                raise VerificationError(
                    f"{self.name(int(acc_task[a]))} writes {self.where(arena, *g.byte_range(seg))} in two of its sessions: "
                    "its output session_stride is smaller than one session's footprint (write-after-write)"
                )
            scans.append((arena, g, self.races(arena, g, hb, acc_task, acc_write)))
        for arena, g, (r_acc, r_grp, r_last, _, _) in scans:
            self.dataflow(arena, g, r_acc, r_grp, r_last, acc_task, acc_op)
        self.final_writers = {arena: (g, final) for arena, g, (_, _, _, _, final) in scans}
        return (*self.count_pairs([scan[2][3] for scan in scans]), total_intervals)

    @functools.cached_property
    def acc_op(self) -> np.ndarray:
        """Per access of ``self.accesses``: its operand slot (OUT for the output)."""
        return np.array([a.operand for a in self.accesses], np.int64)

    @functools.cached_property
    def acc_task(self) -> np.ndarray:
        """Per access of ``self.accesses``: its task's payload row."""
        return np.array([a.row for a in self.accesses], np.int64)

    @functools.cached_property
    def acc_write(self) -> np.ndarray:
        """Per access of ``self.accesses``: whether it writes (the output operand)."""
        return np.array([a.write for a in self.accesses], bool)

    @functools.cached_property
    def in_place_ok(self) -> np.ndarray:
        """Per access of ``self.accesses``: `same_view_as_output`."""
        return np.array([self.same_view_as_output(a) for a in self.accesses], bool)

    def same_view_as_output(self, acc: Access) -> bool:
        """An elementwise input that reads exactly the bytes its own output writes, element by element:
        the one way a task may read and write the same bytes (each element is read before it is written)."""
        if acc.write or not isinstance(self.params[acc.row], EwiseParams):
            return False
        rec = self.rec[acc.row]
        params = self.params[acc.row]
        return (
            operand_arena(rec, acc.operand) == operand_arena(rec, OUT)
            and int(rec["offset"][acc.operand]) == int(rec["offset"][OUT])
            and int(rec["session_stride"][acc.operand]) == int(rec["session_stride"][OUT])
            and tuple(params.in_strides[acc.operand]) == tuple(params.out_strides)
        )

    PAIR_BUDGET = 8_000_000  # enumerate conflicting pairs (to count distinct ones) up to this many

    def count_pairs(self, group_sets: list[list[tuple[np.ndarray, np.ndarray]]]) -> tuple[int, bool]:
        """Distinct conflicting task pairs, or (over PAIR_BUDGET) the sum over access sets, an upper bound."""
        sets = [gs for per_arena in group_sets for gs in per_arena]
        total = sum(len(w) * len(t) for w, t in sets)
        if total > self.PAIR_BUDGET:
            return sum(len(w) * len(t) - len(w) - len(w) * (len(w) - 1) // 2 for w, t in sets), False
        keys = []
        for w, t in sets:
            a, b = np.repeat(w, len(t)), np.tile(t, len(w))
            keep = a != b
            keys.append(np.minimum(a, b)[keep] * self.n + np.maximum(a, b)[keep])
        if not keys:
            return 0, True
        k = np.sort(np.concatenate(keys))
        return int(len(k) and 1 + np.count_nonzero(k[1:] != k[:-1])), True

    def races(self, arena: int, g, hb: HappensBefore, acc_task: np.ndarray, acc_write: np.ndarray):
        """Check 4 on one arena, linear in each access set: the set's writers, sorted by a topological
        order, must form a happens-before chain, and every other task must fall between two consecutive
        writers (after the one before it, before the one after it); by transitivity that orders every
        conflicting pair, and it is also necessary. Returns, for check 5, each read access's last writer
        per group (-1: none before it), and the (writers, tasks) of each access set for counting."""
        chk_a, chk_b, chk_g = [], [], []
        r_acc, r_grp, r_last, sets = [], [], [], []
        final = np.full(len(g.rep), -1, np.int64)  # the last writer of each group in the beat
        pos = hb.topo_pos

        def check(a: np.ndarray, b: np.ndarray, grp: int) -> None:  # a must happen before b
            chk_a.append(a)
            chk_b.append(b)
            chk_g.append(np.full(len(a), grp))

        for grp in range(len(g.rep)):
            accs = g.members(grp)
            w_mask = acc_write[accs]
            writers = np.unique(acc_task[accs[w_mask]])
            writers = writers[np.argsort(pos[writers])]
            reads = accs[~w_mask]
            if len(reads):
                p = np.searchsorted(pos[writers], pos[acc_task[reads]])
                # side="left": a task that reads and writes these bytes reads before its own write.
                last = np.where(p > 0, writers[np.maximum(p - 1, 0)] if len(writers) else -1, -1)
                r_acc.append(reads)
                r_grp.append(np.full(len(reads), grp))
                r_last.append(last)
            if len(writers) == 0:
                continue
            final[grp] = writers[-1]
            both = np.intersect1d(writers, acc_task[reads])
            if len(both):  # a task reads bytes it writes: only as an identical elementwise view
                bad = reads[np.isin(acc_task[reads], both) & ~self.in_place_ok[reads]]
                if len(bad):
                    a = int(bad[np.argmin(self.task_id[acc_task[bad]])])
                    raise VerificationError(
                        f"{self.name(int(acc_task[a]))} reads {self.where(arena, *g.byte_range(int(g.rep[grp])))} through "
                        f"input operand {int(self.acc_op[a])} and also writes them through a different view (its output): "
                        "threads of one task would race on them (in place is safe only for an elementwise op whose "
                        "input view is its output view). Give the output bytes of its own"
                    )
            tasks = np.unique(acc_task[accs])
            if len(tasks) < 2:
                continue
            sets.append((writers, tasks))
            if len(writers) > 1:
                ph = self.phase[writers]
                u, c = np.unique(ph, return_counts=True)
                if (c > 1).any():
                    two = np.sort(writers[ph == u[c > 1][0]])[:2]
                    raise VerificationError(
                        f"{self.name(int(two[0]))} and {self.name(int(two[1]))}, two tasks of one phase, both write "
                        f"{self.where(arena, *g.byte_range(int(g.rep[grp])))} (write-after-write): each element must be "
                        "produced by exactly one task of its phase; fix the tile bounds or output offsets"
                    )
                check(writers[:-1], writers[1:], grp)
            others = np.setdiff1d(tasks, writers, assume_unique=True)
            if len(others):
                p = np.searchsorted(pos[writers], pos[others])
                after = p > 0
                check(writers[p[after] - 1], others[after], grp)
                before = p < len(writers)
                check(others[before], writers[p[before]], grp)
        if chk_a:
            a, b = np.concatenate(chk_a), np.concatenate(chk_b)
            grp_of = np.concatenate(chk_g)
            bad = np.flatnonzero(~hb.before(a, b))
            if len(bad):
                lo = np.minimum(self.task_id[a[bad]], self.task_id[b[bad]])
                hi = np.maximum(self.task_id[a[bad]], self.task_id[b[bad]])
                i = bad[np.lexsort((hi, lo))[0]]
                self.race_error(arena, g, hb, int(a[i]), int(b[i]), int(grp_of[i]), acc_task, acc_write)
            # Ordered, and by transitivity along each chain in program order if every checked pair is.
            back = np.flatnonzero(self.phase_rank[a] > self.phase_rank[b]) if not self.phases_interleave else a[:0]
            if len(back):
                i = int(back[0])
                self.raise_out_of_order(arena, *g.byte_range(int(g.rep[grp_of[i]])), int(a[i]), int(b[i]))
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        return cat(r_acc), cat(r_grp), cat(r_last), sets, final

    def race_error(self, arena, g, hb, first: int, then: int, grp: int, acc_task, acc_write):
        """Raises for the unordered pair (first, then), first earlier in the topological order."""
        accs = g.members(grp)
        wrote = set(acc_task[accs[acc_write[accs]]].tolist())
        self.raise_race(arena, *g.byte_range(int(g.rep[grp])), first, then, wrote)

    def raise_race(self, arena: int, b0: int, b1: int, first: int, then: int, wrote: set) -> None:
        """Raises for tasks ``first`` and ``then`` (rows), neither before the other, touching arena bytes
        [b0, b1); ``wrote``: which of them write those bytes."""
        ra, rb = sorted((first, then), key=lambda r: int(self.task_id[r]))
        if first in wrote and then in wrote:
            kind, verbs = "write-after-write", "both write them"
        else:
            w, rd = (first, then) if first in wrote else (then, first)
            kind = "read-after-write" if w == first else "write-after-read"
            verbs = f"{self.short(w)} writes them and {self.short(rd)} reads them"
        raise VerificationError(
            f"race ({kind}) on {self.where(arena, b0, b1)}: {self.name(ra)} and "
            f"{self.name(rb)}: {verbs}, and neither happens before the other. Make {self.short(then)} wait on "
            f"counter {int(self.signal[first])} (signalled by {self.short(first)}), or give them disjoint bytes"
        )

    @functools.cached_property
    def phase_rank(self) -> np.ndarray:
        """Per payload row: its phase's rank in program order. Phases are ordered by their lowest task id:
        wavec.emit numbers tasks in program order, phase after phase."""
        keys, inverse = np.unique(self.phase, return_inverse=True)
        first = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first, inverse.ravel(), self.task_id)
        rank = np.empty(len(keys), np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(keys))
        return rank[inverse.ravel()]

    @functools.cached_property
    def phases_interleave(self) -> bool:
        """Whether some phase's task ids are not contiguous in program order (a hand-written phase table):
        then `phase_rank` does not say which of two tasks the program runs first."""
        return bool((np.diff(self.phase_rank[np.argsort(self.task_id)]) < 0).any())

    def raise_out_of_order(self, arena: int, b0: int, b1: int, first: int, then: int) -> None:
        """Raises for rows ``first`` and ``then``, touching arena bytes [b0, b1) (one writing), where ``first``
        happens before ``then`` although the program runs ``then``'s phase first."""
        raise VerificationError(
            f"{self.name(first)} happens before {self.name(then)}, though its phase comes later in program order, "
            f"and both touch {self.where(arena, b0, b1)}, one writing: the beat would not compute what the "
            f"program does. Make {self.short(first)} wait on counter {int(self.signal[then])} (signalled by "
            f"{self.short(then)}), or fix the worker order"
        )

    CARRIED = -2  # pseudo-phase of a state byte nobody wrote yet this beat: the previous beat's value

    def dataflow(self, arena: int, g, acc, grp, last, acc_task, acc_op) -> None:
        """Check 5. Reads of ACT and OUTPUT bytes see a write from earlier this beat; and for every
        view one phase reads, the last writers of everything its tasks read belong to one phase (a
        state byte not yet written this beat counts as one more source: the previous beat's value)."""
        if not len(acc):
            return
        fresh = arena in FRESH_ARENAS
        task = acc_task[acc]
        ph = np.where(last >= 0, self.phase[np.maximum(last, 0)], -1 if fresh else self.CARRIED)
        op = acc_op[acc]
        tid = self.task_id[task]
        span = lambda i: self.where(arena, *g.byte_range(int(g.rep[grp[i]])))  # noqa: E731
        self.mixed_sources(arena, g, grp, last, task, op, tid, ph)
        if fresh and (ph == -1).any():
            cand = np.flatnonzero(ph == -1)
            i = int(cand[np.lexsort((op[cand], tid[cand]))[0]])
            raise VerificationError(
                f"{self.name(int(task[i]))} reads {span(i)} through input operand {int(op[i])}, but no task writes "
                "those bytes earlier in the beat (they hold another tensor or garbage): a wait is missing, a tile "
                "leaves a gap, or the operand offset is wrong"
            )

    def part_of(self, arena: int, at: np.ndarray) -> np.ndarray:
        """Per arena byte ``at``: 0, or 1 + the index of the declared part (profile.json tensors' ``part_bytes``, a
        concat's input computed in place) of a session's slot it lies in. Recycled bytes of another tensor
        there are split the same way, which only makes the mixed-sources check look at smaller views."""
        part = np.zeros(len(at), np.int64)
        for t in self.meta.get("tensors", []):
            if t.get("arena") != ARENA_NAMES.get(arena) or not t.get("part_bytes"):
                continue
            stride = int(t["session_stride"]) or int(t["bytes"])
            rel = at - int(t["offset"])
            inside = (rel >= 0) & (rel < stride * (self.sessions if t["session_stride"] else 1))
            pos = rel % stride
            for j, (b0, b1) in enumerate(t["part_bytes"]):
                part[inside & (pos >= b0) & (pos < b1)] = j + 1
        return part

    def mixed_sources(self, arena, g, grp, last, task, op, tid, ph) -> None:
        """Raises when the tasks of one phase reading one view (operand, offset, session stride, and the part of
        the tensor's slot: `part_of`) read bytes whose last writers span two phases."""
        written = ph != -1  # unwritten fresh bytes are reported afterwards, as such
        if not written.any():
            return
        grp, last, task, op, tid, ph = grp[written], last[written], task[written], op[written], tid[written], ph[written]
        span = lambda i: self.where(arena, *g.byte_range(int(g.rep[grp[i]])))  # noqa: E731
        # One view: the tasks of one phase reading operand k at one (arena, offset, session stride) read
        # one tensor, tile by tile (a concat reads its inputs through distinct offsets, so distinct views).
        rec = self.rec[task]
        k_off = rec["offset"][np.arange(len(task)), op].astype(np.int64)
        k_str = rec["session_stride"][np.arange(len(task)), op].astype(np.int64)
        part = self.part_of(arena, g.points[g.rep[grp]] * ELEM_BYTES)
        view = np.stack([self.phase[task], op, k_off, k_str, part], axis=1)
        _, kid = np.unique(view, axis=0, return_inverse=True)
        kid = kid.ravel()
        o = np.lexsort((tid, ph, kid))
        kid_o, ph_o = kid[o], ph[o]
        diff = np.flatnonzero((kid_o[1:] == kid_o[:-1]) & (ph_o[1:] != ph_o[:-1])) + 1
        if not len(diff):
            return
        # The violating (phase, operand) with the lowest task id; within it, the lowest task id per source.
        bad_kids = np.unique(kid_o[diff])
        rows = np.flatnonzero(np.isin(kid, bad_kids))
        k = kid[rows[np.argmin(tid[rows])]]
        rows = np.flatnonzero(kid == k)
        rows = rows[np.lexsort((tid[rows],))]
        i = int(rows[0])
        j = int(rows[np.flatnonzero(ph[rows] != ph[i])[0]])
        src = lambda r: (  # noqa: E731
            "the previous beat's state (nothing wrote it yet this beat)" if ph[r] == self.CARRIED else self.name(int(last[r]))
        )
        raise VerificationError(
            f"{self.name(int(task[i]))} and its phase read a mix of two producers through input operand {int(op[i])}: "
            f"{span(i)} (read by {self.short(int(task[i]))}) was last written by {src(i)}, but {span(j)} (read by "
            f"{self.short(int(task[j]))}) by {src(j)}: an output offset (or the arena plan) puts one tensor where "
            "another is read, or a tile of the producer is missing"
        )

    # ---- 7. final writers ----------------------------------------------------------------------
    def final_values(self) -> None:
        """Every byte of a state (all slots) or an output ends the beat with the value of a phase that is the
        last writer of all it writes there: one phase (a state's write-back), or several, each computing its
        part of the new value in place (wave-to-wpk's states-in-place: Silero's h and c). A phase overwritten
        in some of its bytes and not in others (the state's reset where a tile of the update is missing)
        leaves a gap in the final write. Runs after `races_and_dataflow` (its final writers and accesses)."""
        for arena in (Arena.STATE, Arena.OUTPUT):
            if arena not in self.final_writers:
                continue
            g, final = self.final_writers[arena]
            final_phase = np.where(final >= 0, self.phase[np.maximum(final, 0)], -1)
            self.check_final_values(arena, g, final_phase, self.acc_phase, self.acc_write,
                                    lambda grp: self.name(int(final[grp])), self.binding_words)

    def binding_words(self, arena: int, spec: dict) -> np.ndarray:
        """The first word of each session's copy of a binding (``spec``: profile.json's)."""
        return (int(spec["offset"]) + np.arange(self.sessions, dtype=np.int64) * int(spec["session_stride"])) // 4

    def check_final_values(self, arena: int, g: AccessGroups, final_phase: np.ndarray, acc_phase: np.ndarray,
                           acc_write: np.ndarray, final_writer: Callable[[int], str],
                           binding_words: Callable[[int, dict], np.ndarray]) -> None:
        """`final_values` over the access groups ``g`` of ``arena``: ``final_phase`` per group (-1: none),
        ``acc_phase`` and ``acc_write`` per access of ``g``, ``final_writer(group)`` names the task whose
        value a group keeps, ``binding_words(arena, spec)`` gives where each copy of a binding starts in
        ``g``'s words."""
        what, key = ("state", "states") if arena == Arena.STATE else ("output", "outputs")
        for spec in self.meta.get(key, []):
            nbytes = ELEM_BYTES * int(np.prod(spec["shape"], dtype=np.int64))
            if nbytes == 0:
                continue
            start = binding_words(arena, spec)
            lo = np.searchsorted(g.points, start, side="right") - 1
            hi = np.searchsorted(g.points, start + nbytes // 4, side="left")
            seg = concat_ranges(lo, hi)
            seg = seg[(seg >= 0) & (seg < len(g.group_of_seg))]
            groups = np.unique(g.group_of_seg[seg])
            groups = groups[groups >= 0]
            groups = groups[final_phase[groups] != -1]
            if not len(groups) or (final_phase[groups] == final_phase[groups[0]]).all():
                continue
            lo, hi = np.searchsorted(g.member_group, groups), np.searchsorted(g.member_group, groups + 1)
            acc = g.member_acc[concat_ranges(lo, hi)]
            writer_phase = acc_phase[acc]
            of_group = np.repeat(final_phase[groups], hi - lo)
            bad = np.flatnonzero(acc_write[acc] & np.isin(writer_phase, final_phase[groups]) & (writer_phase != of_group))
            if len(bad):
                i = int(bad[0])
                over = int(np.repeat(groups, hi - lo)[i])  # the group of membership i
                kept = int(groups[np.flatnonzero(final_phase[groups] == writer_phase[i])[0]])
                raise VerificationError(
                    f"{what} {spec['name']!r} ends the beat with values from two phases: "
                    f"{self.where(arena, *g.byte_range(int(g.rep[kept])))} keeps the value of {final_writer(kept)}, "
                    f"but {self.where(arena, *g.byte_range(int(g.rep[over])))}, which its phase also wrote, was written "
                    f"again by {final_writer(over)}: a task of the {what}'s final write is missing or its tile "
                    "bounds leave a gap"
                )

    # ---- 6. coverage ---------------------------------------------------------------------------
    def coverage(self) -> None:
        for arena in (Arena.OUTPUT, Arena.STATE):
            parts = [a.word_intervals() for a in self.accesses if a.write and a.arena == arena]
            self.check_coverage(arena, parts, self.binding_words)

    def check_coverage(self, arena: int, parts: list[tuple[np.ndarray, np.ndarray]],
                       binding_words: Callable[[int, dict], np.ndarray]) -> None:
        """Every copy of every binding of ``arena`` (its outputs or states) lies inside the union of the
        written word intervals ``parts``; ``binding_words(arena, spec)`` gives where each copy starts in
        the words of ``parts``."""
        what, key = ("output", "outputs") if arena == Arena.OUTPUT else ("state", "states")
        b = np.concatenate([np.zeros(0, np.int64), *(p[0] for p in parts)]) * ELEM_BYTES
        e = np.concatenate([np.zeros(0, np.int64), *(p[1] for p in parts)]) * ELEM_BYTES
        o = np.argsort(b, kind="stable")
        b, e = b[o], np.maximum.accumulate(e[o]) if len(e) else e
        new = np.r_[True, b[1:] > e[:-1]][: len(b)]
        mb = b[new]
        me = e[np.r_[np.flatnonzero(new)[1:] - 1, len(e) - 1]] if len(e) else e
        for spec in self.meta.get(key, []):
            nbytes = ELEM_BYTES * int(np.prod(spec["shape"], dtype=np.int64))
            if nbytes == 0:
                continue
            start = binding_words(arena, spec) * ELEM_BYTES
            i = np.searchsorted(mb, start, side="right") - 1
            cov_end = me[np.maximum(i, 0)] if len(me) else start
            covered = np.maximum(np.where(i >= 0, cov_end, start), start)
            bad = np.flatnonzero(covered < start + nbytes)
            if len(bad):
                s = int(bad[0])
                gap0 = int(covered[s])
                nxt = np.searchsorted(mb, gap0, side="right")
                gap1 = min(int(mb[nxt]) if nxt < len(mb) else 1 << 62, int(start[s]) + nbytes)
                raise VerificationError(
                    f"{what} {spec['name']!r} of session {s}: {self.where(arena, gap0, gap1)} is not written by any "
                    f"task in a beat ({'the runtime would read stale bytes' if arena == Arena.OUTPUT else 'the state would not advance'}): "
                    "a tile is missing or its bounds leave a gap"
                )

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> VerifyReport:
        t0 = time.perf_counter()
        over = self.level == "phase" or self.over_budget()
        self.structure()
        rec = self.rec
        hb = build_happens_before(
            self.worker_rows, self.signal, rec["wait_counter"].astype(np.int64), rec["wait_count"].astype(np.int64),
            rec["n_waits"].astype(np.int64), int(self.meta["n_counters"]), self.name,
            rec["signal_phase"].astype(np.int64),
        )
        self.accesses = self.footprints()
        self.uniform_tiles()
        if not over:
            try:
                pairs, exact, intervals = self.races_and_dataflow(hb)
            except VerificationTooLarge:
                if self.level == "task":
                    raise
                over = True  # more incidences than the intervals promised: prove it phase by phase
        if over:
            from wavec.verify_phases import PhaseProof

            pairs, tile_pairs, per_session = PhaseProof(self, hb, SHARED_ARENAS).run()
            return VerifyReport(
                tasks=self.n, edges=hb.edges, conflicting_pairs=pairs, ordered=pairs, pairs_exact=True,
                accesses=len(self.accesses), seconds=time.perf_counter() - t0, level="phase", tile_pairs=tile_pairs,
                per_session_arenas=tuple(ARENA_NAMES[a] for a in per_session),
            )
        self.coverage()
        self.final_values()
        return VerifyReport(
            tasks=self.n, edges=hb.edges, conflicting_pairs=pairs, ordered=pairs, pairs_exact=exact,
            accesses=len(self.accesses), intervals=intervals, seconds=time.perf_counter() - t0,
        )

    def over_budget(self) -> bool:
        """Whether the task-level proof needs more than ``max_incidences`` (at least its word intervals),
        counted before anything is allocated per task; at level "task" that is raised as VerificationTooLarge."""
        if not self.max_incidences:
            return False
        n = count_intervals(self.rec, self.param_blocks, self.fp_cache, self.max_incidences)
        if n <= self.max_incidences:
            return False
        if self.level == "task":
            raise VerificationTooLarge(budget_message(self.n, n, self.max_incidences, "at least"))
        return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1]))
