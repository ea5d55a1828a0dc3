"""Fault injectors for profiles: each one breaks one thing a correct schedule must get right.

Every injector has the signature ``inject(profile, rng=None, row=None) -> (mutated, description)``: it
works on a deep copy (the argument is left alone), picks its target payload row with ``rng`` among the
rows where the fault applies (or takes ``row``), and raises `NotApplicable` when the profile has no such
row. The verifier must reject every mutant; a few kinds can, on some targets, produce an equivalent
program (for instance a wait retargeted to a counter whose signallers already follow the producer), so a
mutation test over real profiles should try several targets per kind and count the ones caught.

`MUTATIONS` maps a kind name to its injector. `KINDS` (at the end) is the mutation test's registry on
compiled profiles: each kind enumerates its candidate targets and builds one mutant per target, and
`pick_faults` keeps only genuine faults, as decided by `Oracle`, a brute-force reference independent of
the verifier (see the comment above it).
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from wavec.opcodes import OUT, Arena, footprint, unpack_params
from wavec.payload import MAX_WAITS, operand_arena, pack_arenas
from wavec.profile import Profile


class NotApplicable(Exception):
    """The profile has no row this fault can be injected into."""


def copy_profile(profile: Profile) -> Profile:
    return Profile(
        meta=copy.deepcopy(profile.meta),
        payloads=profile.payloads.copy(),
        params=profile.params.copy(),
        weights=profile.weights.copy(),
        kernel_source=profile.kernel_source,
        report=copy.deepcopy(profile.report),
    )


# ---- helpers ------------------------------------------------------------------------------------


def _pick(candidates: list[int], rng, row: int | None, kind: str) -> int:
    if row is not None:
        if row not in candidates:
            raise NotApplicable(f"{kind}: row {row} is not a target (targets: {candidates[:10]})")
        return row
    if not candidates:
        raise NotApplicable(f"{kind}: no target row in this profile")
    rng = rng if rng is not None else np.random.default_rng(0)
    return int(candidates[int(rng.integers(len(candidates)))])


def _tid(p: Profile, r: int) -> int:
    return int(p.payloads[r]["task"])


def _signallers(p: Profile) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r, c in enumerate(p.payloads["signal"]):
        out.setdefault(int(c), []).append(r)
    return out


def _waiters(p: Profile) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r, rec in enumerate(p.payloads):
        for i in range(int(rec["n_waits"])):
            out.setdefault(int(rec["wait_counter"][i]), []).append(r)
    return out


def _arena(p: Profile, r: int, k: int) -> int:
    return operand_arena(p.payloads[r], k)


def _set_arena(p: Profile, r: int, k: int, arena: int) -> None:
    rec = p.payloads[r]
    arenas = [operand_arena(rec, j) for j in range(OUT + 1)]
    arenas[k] = arena
    rec["arenas"] = pack_arenas(arenas)


def _n_elems(p: Profile, r: int) -> int:
    return unpack_params(p.params, int(p.payloads[r]["params"])).n_elems


def _writes(p: Profile, r: int, arenas=(Arena.ACT, Arena.OUTPUT, Arena.STATE)) -> bool:
    return _arena(p, r, OUT) in [int(a) for a in arenas]


def _remove_wait(rec, i: int) -> None:
    n = int(rec["n_waits"])
    for j in range(i, n - 1):
        rec["wait_counter"][j] = rec["wait_counter"][j + 1]
        rec["wait_count"][j] = rec["wait_count"][j + 1]
    rec["wait_counter"][n - 1] = 0
    rec["wait_count"][n - 1] = 0
    rec["n_waits"] = n - 1


# ---- dependencies -------------------------------------------------------------------------------


def drop_wait(profile, rng=None, row=None):
    p = copy_profile(profile)
    r = _pick([r for r in range(len(p.payloads)) if p.payloads[r]["n_waits"] > 0], rng, row, "drop_wait")
    rec = p.payloads[r]
    c = int(rec["wait_counter"][0])
    _remove_wait(rec, 0)
    return p, f"task {_tid(p, r)}: dropped its wait on counter {c}"


def wrong_wait_counter(profile, rng=None, row=None, counter: int | None = None):
    """Retargets a wait to ``counter`` or another signalled counter, with the same number of signallers
    when one exists (so the count still matches and only the ordering is wrong)."""
    p = copy_profile(profile)
    sig = _signallers(p)
    cands = [r for r in range(len(p.payloads)) if p.payloads[r]["n_waits"] > 0 and len(sig) > 1]
    r = _pick(cands, rng, row, "wrong_wait_counter")
    rec = p.payloads[r]
    c, k = int(rec["wait_counter"][0]), int(rec["wait_count"][0])
    mine = {int(rec["wait_counter"][i]) for i in range(int(rec["n_waits"]))} | {int(rec["signal"])}
    others = [o for o in sorted(sig) if o not in mine and o != 0]
    same = [o for o in others if len(sig[o]) == k]
    pool = same or others
    if not pool:
        raise NotApplicable("wrong_wait_counter: no other signalled counter")
    new = counter if counter is not None else pool[int((rng or np.random.default_rng(0)).integers(len(pool)))]
    rec["wait_counter"][0] = new
    return p, f"task {_tid(p, r)}: wait on counter {c} retargeted to counter {new}"


def wrong_wait_count(profile, rng=None, row=None, delta: int = 1):
    p = copy_profile(profile)
    r = _pick([r for r in range(len(p.payloads)) if p.payloads[r]["n_waits"] > 0], rng, row, "wrong_wait_count")
    rec = p.payloads[r]
    k = int(rec["wait_count"][0])
    rec["wait_count"][0] = max(k + delta, 0)
    return p, f"task {_tid(p, r)}: wait count on counter {int(rec['wait_counter'][0])} changed {k} -> {k + delta}"


def wait_unsignalled(profile, rng=None, row=None):
    p = copy_profile(profile)
    sig = _signallers(p)
    unused = [c for c in range(1, int(p.meta["n_counters"])) if c not in sig]
    if not unused:
        p.meta["n_counters"] = int(p.meta["n_counters"]) + 1
        unused = [int(p.meta["n_counters"]) - 1]
    r = _pick([r for r in range(len(p.payloads)) if p.payloads[r]["n_waits"] > 0], rng, row, "wait_unsignalled")
    p.payloads[r]["wait_counter"][0] = unused[0]
    return p, f"task {_tid(p, r)}: waits on counter {unused[0]}, which nobody signals"


def signal_zero(profile, rng=None, row=None):
    p = copy_profile(profile)
    r = _pick(list(range(len(p.payloads))), rng, row, "signal_zero")
    old = int(p.payloads[r]["signal"])
    p.payloads[r]["signal"] = 0
    return p, f"task {_tid(p, r)}: signals the end-of-beat counter 0 instead of counter {old}"


def deadlock_cycle(profile, rng=None, row=None):
    """Makes a producer wait on the counter of one of its consumers."""
    p = copy_profile(profile)
    sig, wait = _signallers(p), _waiters(p)
    cands = [r for r in range(len(p.payloads)) if int(p.payloads[r]["signal"]) in wait]
    r = _pick(cands, rng, row, "deadlock_cycle")
    rec = p.payloads[r]
    consumer = wait[int(rec["signal"])][0]
    c = int(p.payloads[consumer]["signal"])
    i = min(int(rec["n_waits"]), MAX_WAITS - 1)
    rec["wait_counter"][i] = c
    rec["wait_count"][i] = len(sig[c])
    rec["n_waits"] = i + 1
    return p, f"task {_tid(p, r)}: now waits on counter {c} of its consumer task {_tid(p, consumer)} (a cycle)"


def swap_worker_order(profile, rng=None, row=None):
    """Swaps a task with the next one on its worker when the next one waits (directly) on it: a deadlock."""
    p = copy_profile(profile)
    cands = []
    for b, e in p.meta["worker_tasks"]:
        for r in range(int(b), int(e) - 1):
            nxt = p.payloads[r + 1]
            if int(p.payloads[r]["signal"]) in [int(nxt["wait_counter"][i]) for i in range(int(nxt["n_waits"]))]:
                cands.append(r)
    r = _pick(cands, rng, row, "swap_worker_order")
    a, b = p.payloads[r].copy(), p.payloads[r + 1].copy()
    p.payloads[r], p.payloads[r + 1] = b, a
    return p, f"tasks {int(a['task'])} and {int(b['task'])} swapped on worker {int(a['worker'])}"


def drop_task(profile, rng=None, row=None):
    """Deletes one payload row (and fixes worker_tasks): its elements are never produced."""
    p = copy_profile(profile)
    r = _pick(list(range(len(p.payloads))), rng, row, "drop_task")
    tid = _tid(p, r)
    p.payloads = np.delete(p.payloads, r)
    p.meta["worker_tasks"] = [[b - (b > r), e - (e > r)] for b, e in p.meta["worker_tasks"]]
    before = int(np.count_nonzero(profile.payloads["task"] < tid))  # phases counting tasks hold them in id order
    for ph in p.meta.get("phases") or []:
        if isinstance(ph.get("tasks"), list):
            ph["tasks"] = [t for t in ph["tasks"] if t != tid]
        elif 0 <= before < ph["tasks"]:
            ph["tasks"] -= 1  # the phase that held it: the table stays consistent, the dataflow must tell
        before -= ph["tasks"] if isinstance(ph.get("tasks"), int) else 0
    return p, f"task {tid} deleted"


# ---- tiles and offsets --------------------------------------------------------------------------


def shift_output_offset(profile, rng=None, row=None, delta: int = -4):
    """Moves a task's output by one element: it overlaps its neighbour tile's bytes (write-after-write)."""
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if _writes(p, r) and int(p.payloads[r]["offset"][OUT]) + delta >= 0]
    r = _pick(cands, rng, row, "shift_output_offset")
    p.payloads[r]["offset"][OUT] = int(p.payloads[r]["offset"][OUT]) + delta
    return p, f"task {_tid(p, r)}: output offset moved by {delta} bytes"


def tile_overlap(profile, rng=None, row=None):
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if _writes(p, r) and int(p.payloads[r]["elem_end"]) < _n_elems(p, r)]
    r = _pick(cands, rng, row, "tile_overlap")
    p.payloads[r]["elem_end"] = int(p.payloads[r]["elem_end"]) + 1
    return p, f"task {_tid(p, r)}: elem_end one too far (overlaps the next tile)"


def tile_gap(profile, rng=None, row=None):
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if _writes(p, r) and int(p.payloads[r]["elem_end"]) - int(p.payloads[r]["elem_begin"]) > 1]
    r = _pick(cands, rng, row, "tile_gap")
    p.payloads[r]["elem_begin"] = int(p.payloads[r]["elem_begin"]) + 1
    return p, f"task {_tid(p, r)}: elem_begin one too far (leaves a gap)"


def tile_past_end(profile, rng=None, row=None):
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if int(p.payloads[r]["elem_end"]) == _n_elems(p, r)]
    r = _pick(cands, rng, row, "tile_past_end")
    p.payloads[r]["elem_end"] = int(p.payloads[r]["elem_end"]) + 1
    return p, f"task {_tid(p, r)}: elem_end past the iteration space"


def session_overlap(profile, rng=None, row=None):
    """Extends a task's session range into the next task's sessions."""
    p = copy_profile(profile)
    n = int(p.meta["sessions"])
    cands = [r for r in range(len(p.payloads)) if _writes(p, r) and int(p.payloads[r]["session_end"]) < n]
    r = _pick(cands, rng, row, "session_overlap")
    p.payloads[r]["session_end"] = int(p.payloads[r]["session_end"]) + 1
    return p, f"task {_tid(p, r)}: session_end one too far"


def output_onto_input(profile, rng=None, row=None):
    """Moves a task's output onto the tensor its first ACT input reads (a live tensor other tasks read)."""
    p = copy_profile(profile)
    cands = [
        r for r in range(len(p.payloads))
        if _arena(p, r, OUT) == Arena.ACT and any(_arena(p, r, k) == Arena.ACT for k in range(int(p.payloads[r]["n_inputs"])))
    ]
    r = _pick(cands, rng, row, "output_onto_input")
    rec = p.payloads[r]
    k = next(k for k in range(int(rec["n_inputs"])) if _arena(p, r, k) == Arena.ACT)
    rec["offset"][OUT] = rec["offset"][k]
    rec["session_stride"][OUT] = rec["session_stride"][k]
    return p, f"task {_tid(p, r)}: output offset moved onto its input operand {k}'s bytes"


def output_onto_tensor(profile, rng=None, row=None, target: int | None = None):
    """Moves a task's output offset onto the output offset of task ``target`` (default: a task of
    another phase writing the same arena)."""
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if _arena(p, r, OUT) == Arena.ACT]
    r = _pick(cands, rng, row, "output_onto_tensor")
    rec = p.payloads[r]
    if target is None:
        others = [t for t in cands if int(p.payloads[t]["signal"]) != int(rec["signal"])]
        if not others:
            raise NotApplicable("output_onto_tensor: no other phase writes the act arena")
        target = others[int((rng or np.random.default_rng(0)).integers(len(others)))]
    rec["offset"][OUT] = p.payloads[target]["offset"][OUT]
    rec["session_stride"][OUT] = p.payloads[target]["session_stride"][OUT]
    return p, f"task {_tid(p, r)}: output moved onto task {_tid(p, target)}'s output bytes"


def shrink_session_stride(profile, rng=None, row=None):
    p = copy_profile(profile)
    cands = [
        r for r in range(len(p.payloads))
        if _writes(p, r) and int(p.payloads[r]["session_stride"][OUT]) >= 4
        and int(p.payloads[r]["session_end"]) - int(p.payloads[r]["session_begin"]) > 1
    ]
    r = _pick(cands, rng, row, "shrink_session_stride")
    rec = p.payloads[r]
    old = int(rec["session_stride"][OUT])
    rec["session_stride"][OUT] = old - 4
    return p, f"task {_tid(p, r)}: output session_stride {old} -> {old - 4}"


def offset_out_of_arena(profile, rng=None, row=None):
    p = copy_profile(profile)
    r = _pick(list(range(len(p.payloads))), rng, row, "offset_out_of_arena")
    rec = p.payloads[r]
    arena = Arena(_arena(p, r, OUT))
    rec["offset"][OUT] = int(rec["offset"][OUT]) + int(p.meta["arena_bytes"][arena.name.lower()])
    return p, f"task {_tid(p, r)}: output offset moved past the end of the {arena.name.lower()} arena"


# ---- arenas and sessions ------------------------------------------------------------------------


def shift_session_slot(profile, rng=None, row=None):
    """A state operand of session s points at slot s + 1 (its offset moves by one session stride)."""
    p = copy_profile(profile)
    cands = [
        (r, k) for r in range(len(p.payloads)) for k in [*range(int(p.payloads[r]["n_inputs"])), OUT]
        if _arena(p, r, k) == Arena.STATE and int(p.payloads[r]["session_stride"][k]) > 0
    ]
    r = _pick(sorted({r for r, _ in cands}), rng, row, "shift_session_slot")
    k = next(k for rr, k in cands if rr == r)
    rec = p.payloads[r]
    rec["offset"][k] = int(rec["offset"][k]) + int(rec["session_stride"][k])
    return p, f"task {_tid(p, r)}: state operand {k} of session s moved onto slot s + 1"


def swap_session_ranges(profile, rng=None, row=None):
    """Gives a state-touching task another task's session range while keeping its slot offsets, for two
    tasks whose state operands differ by their first session's slot."""
    p = copy_profile(profile)
    cands = [
        r for r in range(len(p.payloads))
        if any(_arena(p, r, k) == Arena.STATE for k in [*range(int(p.payloads[r]["n_inputs"])), OUT])
        and int(p.payloads[r]["session_begin"]) > 0
    ]
    r = _pick(cands, rng, row, "swap_session_ranges")
    rec = p.payloads[r]
    for k in [*range(int(rec["n_inputs"])), OUT]:
        if _arena(p, r, k) == Arena.STATE:
            rec["offset"][k] = int(rec["offset"][k]) + int(rec["session_begin"]) * int(rec["session_stride"][k])
    return p, f"task {_tid(p, r)}: state offsets point at slot session_begin for session 0 (slots shifted)"


def write_input_arena(profile, rng=None, row=None):
    p = copy_profile(profile)
    r = _pick([r for r in range(len(p.payloads)) if _writes(p, r)], rng, row, "write_input_arena")
    _set_arena(p, r, OUT, Arena.INPUT)
    p.payloads[r]["offset"][OUT] = 0
    p.payloads[r]["session_stride"][OUT] = int(p.meta["inputs"][0]["session_stride"]) if p.meta.get("inputs") else 0
    return p, f"task {_tid(p, r)}: output redirected into the input arena"


def write_weights_arena(profile, rng=None, row=None):
    p = copy_profile(profile)
    r = _pick([r for r in range(len(p.payloads)) if _writes(p, r)], rng, row, "write_weights_arena")
    _set_arena(p, r, OUT, Arena.WEIGHTS)
    p.payloads[r]["offset"][OUT] = 0
    p.payloads[r]["session_stride"][OUT] = 0
    return p, f"task {_tid(p, r)}: output redirected into the weights arena"


def wrong_operand_arena(profile, rng=None, row=None, arena: int = Arena.OUTPUT):
    """An ACT input operand read from another arena (default OUTPUT) at the same offset. (Into STATE it can
    land exactly on the session's own slot of a state: a wrong but race-free program no byte-level check
    can tell from the right one.)"""
    p = copy_profile(profile)
    cands = [r for r in range(len(p.payloads)) if int(p.payloads[r]["n_inputs"]) > 0 and _arena(p, r, 0) == Arena.ACT]
    r = _pick(cands, rng, row, "wrong_operand_arena")
    _set_arena(p, r, 0, arena)
    return p, f"task {_tid(p, r)}: input operand 0 reads the {Arena(arena).name.lower()} arena instead of act"


MUTATIONS: dict[str, Callable] = {
    f.__name__: f
    for f in (
        drop_wait, wrong_wait_counter, wrong_wait_count, wait_unsignalled, signal_zero, deadlock_cycle,
        swap_worker_order, drop_task, shift_output_offset, tile_overlap, tile_gap, tile_past_end, session_overlap,
        output_onto_input, output_onto_tensor, shrink_session_stride, offset_out_of_arena, shift_session_slot,
        swap_session_ranges, write_input_arena, write_weights_arena, wrong_operand_arena,
    )
}


# =================================================================================================
# Fault kinds for the mutation test on compiled profiles (tests/test_mutations.py)
# =================================================================================================
#
# A *kind* enumerates every place one fault can go in a profile (its candidate targets) and builds the
# mutant for one target. Some kinds can build a harmless mutant on some targets: a dropped wait that
# another wait (or the worker order) implies, a wait retargeted to a counter whose signallers are
# ordered after the producer anyway, a worker-order swap of two independent tasks. The mutation test
# must only count genuine faults, so `pick_faults` asks an `Oracle` (below) about each candidate and
# skips the harmless ones; tests/test_mutations.py then runs a sample of the skipped ones on the
# interpreter to show that they really compute what the clean profile computes.
#
# The oracle shares no code with wavec/verify.py or wavec/analysis: it recomputes every task's byte
# footprint by brute force (wavec.opcodes.footprint, the opcode semantics the runtime uses) and the
# happens-before relation with Python-int bitsets, and calls a mutant harmless only when
# - every task runs the same opcode and parameter block and touches exactly the bytes it touched in the
#   clean profile (same arena, same direction),
# - the waits are well formed (every waited counter has exactly wait_count signallers, counter 0 is
#   neither waited on nor signalled, no cycle), and
# - every pair of tasks that conflict in the clean profile (a common byte, one writing) is still ordered
#   in the clean direction (so every read sees the same write, and every final value is the same).
# That is sufficient for the mutant to compute bit-identical results; anything else counts as a fault.
# (A kind must not build mutants that touch other bytes yet compute the same values: see the comment of
# params_other_block for the one such case and why it is excluded.)

SHARED = (int(Arena.STATE), int(Arena.ACT), int(Arena.OUTPUT))


def phase_index(p: Profile) -> np.ndarray:
    """Program-order phase of each payload row (meta ``phases`` counts over task ids, as wavec.emit writes)."""
    tid = p.payloads["task"].astype(np.int64)
    phases = p.meta.get("phases") or []
    counts = [int(ph["tasks"]) for ph in phases if isinstance(ph.get("tasks"), int)]
    out = np.full(len(tid), -1, np.int64)
    if len(counts) == len(phases) and sum(counts) == len(tid):
        bounds = np.cumsum(counts)
        rank = np.argsort(np.argsort(tid))
        out = np.searchsorted(bounds, rank, side="right")
    return out


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    if len(x) < 2 or (np.diff(x) > 0).all():
        return x
    return np.unique(x)


_BLOCKS: dict[bytes, dict] = {}


def _blocks(words: np.ndarray) -> dict:
    """Word offset -> decoded block, for the consecutive blocks params.bin is packed of (wavec.emit and
    the profile builder pack them one after the other)."""
    key = words.tobytes()
    if key not in _BLOCKS:
        out, at = {}, 0
        while at < len(words):
            params = unpack_params(words, at)
            out[at] = params
            at += len(params.pack())
        _BLOCKS[key] = out
    return _BLOCKS[key]


def record_footprint(p: Profile, rec) -> tuple:
    """Sorted tuple of (arena, write, words) over the record's operands, ``words`` the bytes of a sorted
    int64 array of the absolute 4-byte words of its arena it touches (every session of the task). Raises
    on a malformed record."""
    at = int(rec["params"])
    blocks = _blocks(p.params)
    if at not in blocks:
        raise ValueError("the params word is not the start of a parameter block")
    if int(p.params[at]) != int(rec["opcode"]):
        raise ValueError("the parameter block is another opcode's")  # the runtime refuses it too
    params = blocks[at]
    n_in = int(rec["n_inputs"])
    sb, se, eb, ee = (int(rec[f]) for f in ("session_begin", "session_end", "elem_begin", "elem_end"))
    if not (0 <= sb <= se <= p.sessions and 0 <= eb <= ee <= params.n_elems):
        raise ValueError("tile outside its iteration space or the cohort")
    if params.n_elems > 1 << 24 or int(getattr(params, "k", 0)) > 1 << 20:
        raise ValueError("implausible parameter block")
    parts = []
    for k in [*range(n_in), OUT]:
        elems = _sorted_unique(np.asarray(footprint(params, k, eb, ee, n_in), np.int64))
        stride = int(rec["session_stride"][k])
        s = np.arange(sb, se if stride else min(se, sb + 1), dtype=np.int64)
        w = ((int(rec["offset"][k]) + s * stride)[:, None] // 4 + elems[None, :]).ravel()
        parts.append((operand_arena(rec, k), k == OUT, _sorted_unique(w).tobytes()))
    return tuple(sorted(parts))


def task_footprints(p: Profile) -> dict[int, tuple]:
    """task id -> `record_footprint` of its record."""
    return {int(rec["task"]): record_footprint(p, rec) for rec in p.payloads}


class ScheduleError(Exception):
    pass


def closure(p: Profile) -> list[int]:
    """Happens-before as Python-int bitsets over payload rows: bit a of ``incl[b]`` is set when a == b or
    a runs before b in the beat. Raises ScheduleError for a malformed wait or signal, or a cycle."""
    rec = p.payloads
    n = len(rec)
    signal, second = rec["signal"].tolist(), rec["signal_phase"].tolist()
    n_counters = int(p.meta["n_counters"])
    sig: dict[int, list[int]] = {}
    for r in range(n):
        if signal[r] == 0:
            raise ScheduleError(f"row {r} signals the end-of-beat counter")
        if signal[r] == second[r]:
            raise ScheduleError(f"row {r} signals counter {signal[r]} twice")
        for c in (signal[r], second[r]):
            if c:
                if c >= n_counters:
                    raise ScheduleError(f"row {r} signals counter {c} out of range")
                sig.setdefault(c, []).append(r)
    n_waits, wc, wk = rec["n_waits"].tolist(), rec["wait_counter"].tolist(), rec["wait_count"].tolist()
    waits: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        if n_waits[r] > MAX_WAITS:
            raise ScheduleError(f"row {r}: too many waits")
        for i in range(n_waits[r]):
            c, k = wc[r][i], wk[r][i]
            if c == 0 or c not in sig or len(sig[c]) != k:
                raise ScheduleError(f"row {r} waits for {k} signals on counter {c}, which has {len(sig.get(c, []))}")
            waits[r].append(c)
    prev = [-1] * n
    owner = [-1] * n
    for w, (b, e) in enumerate(p.meta["worker_tasks"]):
        for r in range(int(b), int(e)):
            owner[r] = w
            if r > int(b):
                prev[r] = r - 1
    if owner != rec["worker"].tolist():
        raise ScheduleError("worker_tasks does not match the records")
    # Kahn over task nodes 0..n-1 and counter nodes n + c
    succ: dict[int, list[int]] = {}
    indeg = [0] * n
    cdeg = {c: len(v) for c, v in sig.items()}
    for r in range(n):
        if prev[r] >= 0:
            succ.setdefault(prev[r], []).append(r)
            indeg[r] += 1
        for c in waits[r]:
            succ.setdefault(n + c, []).append(r)
            indeg[r] += 1
        for c in (signal[r], second[r]):
            if c:
                succ.setdefault(r, []).append(n + c)
    incl: list[int] = [0] * n
    cval: dict[int, int] = {}
    ready = [r for r in range(n) if indeg[r] == 0]
    done = 0
    while ready:
        v = ready.pop()
        if v < n:
            acc = 1 << v
            if prev[v] >= 0:
                acc |= incl[prev[v]]
            for c in waits[v]:
                acc |= cval[c]
            incl[v] = acc
            done += 1
        else:
            acc = 0
            for s in sig[v - n]:
                acc |= incl[s]
            cval[v - n] = acc
        for w in succ.get(v, ()):
            if w < n:
                indeg[w] -= 1
                if indeg[w] == 0:
                    ready.append(w)
            else:
                cdeg[w - n] -= 1
                if cdeg[w - n] == 0:
                    ready.append(w)
    if done < n:
        raise ScheduleError("cycle: some tasks wait on each other")
    return incl


def _fp_key(rec) -> tuple:
    return (int(rec["params"]), int(rec["n_inputs"]), int(rec["session_begin"]), int(rec["session_end"]),
            int(rec["elem_begin"]), int(rec["elem_end"]), tuple(rec["offset"].tolist()),
            tuple(rec["session_stride"].tolist()), int(rec["arenas"]))


class Oracle:
    """Brute-force reference for one clean profile (see the section comment): `fault(mutant)` returns
    why the mutant is a genuine fault, or None when it provably computes what the clean profile does."""

    def __init__(self, profile: Profile):
        self.p = profile
        self._cache: dict[tuple, tuple] = {}
        self.fp = self.footprints(profile)
        self.phase = phase_index(profile)
        self.tid = profile.payloads["task"].astype(np.int64)
        n = len(self.tid)
        incl = closure(profile)
        # every (arena word, row, write) access of the shared arenas, sorted by word
        keys, rows, wr = [], [], []
        for r, t in enumerate(self.tid.tolist()):
            for arena, write, words in self.fp[t]:
                words = np.frombuffer(words, np.int64)
                if arena in SHARED and len(words):
                    keys.append((arena << 40) + words)
                    rows.append(np.full(len(words), r, np.int64))
                    wr.append(np.full(len(words), write))
        keys, rows, wr = np.concatenate(keys), np.concatenate(rows), np.concatenate(wr)
        o = np.lexsort((rows, keys))
        self.keys, self.rows, self.wr = keys[o], rows[o], wr[o]
        # conflicting pairs: every writer of a word with every other task touching it
        lo = np.searchsorted(self.keys, self.keys[self.wr], "left")
        hi = np.searchsorted(self.keys, self.keys[self.wr], "right")
        cnt = hi - lo
        a = np.repeat(self.rows[self.wr], cnt)
        b = self.rows[np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))]
        keep = a != b
        pair = np.unique(np.minimum(a, b)[keep] * n + np.maximum(a, b)[keep])
        directed = []
        for x, y in zip((pair // n).tolist(), (pair % n).tolist()):
            if (incl[y] >> x) & 1:
                directed.append((int(self.tid[x]), int(self.tid[y])))
            elif (incl[x] >> y) & 1:
                directed.append((int(self.tid[y]), int(self.tid[x])))
            else:
                raise AssertionError(f"the clean profile races: rows {x} and {y}")
        self.pairs = directed

    def footprints(self, p: Profile) -> dict[int, tuple]:
        out = {}
        for rec in p.payloads:
            key = _fp_key(rec)
            fp = self._cache.get(key)
            if fp is None:
                fp = self._cache[key] = record_footprint(p, rec)
            out[int(rec["task"])] = fp
        return out

    def who(self, arena: int, words) -> tuple[np.ndarray, np.ndarray]:
        """(writer rows, reader rows) of any of ``words`` of ``arena`` in the clean profile."""
        k = (int(arena) << 40) + np.asarray(words, np.int64)
        lo, hi = np.searchsorted(self.keys, k, "left"), np.searchsorted(self.keys, k, "right")
        idx = np.concatenate([np.arange(x, y) for x, y in zip(lo, hi)] + [np.zeros(0, np.int64)]).astype(np.int64)
        return np.unique(self.rows[idx[self.wr[idx]]]), np.unique(self.rows[idx[~self.wr[idx]]])

    def fault(self, mutant: Profile) -> str | None:
        p = self.p
        if not np.array_equal(mutant.params, p.params) or mutant.meta.get("tensors") != p.meta.get("tensors"):
            return "params or meta changed"
        try:
            fp = self.footprints(mutant)
        except Exception as e:  # noqa: BLE001 - a record the runtime cannot even decode
            return f"malformed record: {e}"
        if fp != self.fp:
            return "a task touches other bytes than in the clean profile"
        clean = {int(r["task"]): (int(r["params"]), int(r["opcode"])) for r in p.payloads}
        for rec in mutant.payloads:  # the same opcode and parameter block for each task
            if clean[int(rec["task"])] != (int(rec["params"]), int(rec["opcode"])):
                return "a task runs other parameters"
        try:
            incl = closure(mutant)
        except ScheduleError as e:
            return f"schedule: {e}"
        row_of = {int(t): r for r, t in enumerate(mutant.payloads["task"].tolist())}
        for a, b in self.pairs:
            if not (incl[row_of[b]] >> row_of[a]) & 1:
                return f"conflicting tasks {a} -> {b} no longer ordered"
        return None


# ---- kinds ---------------------------------------------------------------------------------------


def _rows(p: Profile):
    return range(len(p.payloads))


def _ops(rec):
    return [*range(int(rec["n_inputs"])), OUT]


def _mutate(profile: Profile, fn) -> Profile:
    q = copy_profile(profile)
    fn(q)
    return q


def _wait_slots(p: Profile):
    return [(r, i) for r in _rows(p) for i in range(int(p.payloads[r]["n_waits"]))]


def _k_drop_wait(p, o):
    return _wait_slots(p)


def _a_drop_wait(p, t):
    r, i = t
    return _mutate(p, lambda q: _remove_wait(q.payloads[r], i)), f"task {_tid(p, r)}: wait slot {i} dropped"


def _k_wrong_wait_counter(p, o):
    # Only counters with as many signallers as the wait expects: the count still matches, so only the
    # ordering is wrong (retargeting to a counter whose signallers follow the producer is harmless: the
    # oracle skips it).
    sig = {}
    for r, rec in enumerate(p.payloads):
        for c in (int(rec["signal"]), int(rec["signal_phase"])):
            if c:
                sig.setdefault(c, []).append(r)
    out = []
    for r, i in _wait_slots(p):
        rec = p.payloads[r]
        mine = {int(rec["wait_counter"][j]) for j in range(int(rec["n_waits"]))} | {int(rec["signal"]), int(rec["signal_phase"])}
        out += [(r, i, c) for c in sorted(sig) if c not in mine and len(sig[c]) == int(rec["wait_count"][i])]
    return out


def _a_wrong_wait_counter(p, t):
    r, i, c = t

    def f(q):
        q.payloads[r]["wait_counter"][i] = c
    return _mutate(p, f), f"task {_tid(p, r)}: wait slot {i} retargeted to counter {c}"


def _a_wait_count(delta):
    def apply(p, t):
        r, i = t

        def f(q):
            q.payloads[r]["wait_count"][i] = int(q.payloads[r]["wait_count"][i]) + delta
        return _mutate(p, f), f"task {_tid(p, r)}: wait count of slot {i} {delta:+d}"
    return apply


def _k_wait_count_low(p, o):
    return [(r, i) for r, i in _wait_slots(p) if int(p.payloads[r]["wait_count"][i]) >= 1]


def _a_wait_unsignalled(p, t):
    r, i = t

    def f(q):
        q.meta["n_counters"] = int(q.meta["n_counters"]) + 1
        q.payloads[r]["wait_counter"][i] = int(q.meta["n_counters"]) - 1
    return _mutate(p, f), f"task {_tid(p, r)}: wait slot {i} on a counter nobody signals"


def _k_extra_signal(p, o):
    # A second signal onto a counter somebody waits on: its waiters now count one signal too many.
    waited = sorted({int(p.payloads[r]["wait_counter"][i]) for r, i in _wait_slots(p)})
    return [(r, c) for r in _rows(p) if int(p.payloads[r]["signal_phase"]) == 0
            for c in waited if c != int(p.payloads[r]["signal"])]


def _a_extra_signal(p, t):
    r, c = t

    def f(q):
        q.payloads[r]["signal_phase"] = c
    return _mutate(p, f), f"task {_tid(p, r)}: also signals counter {c}"


def _k_missing_signal(p, o):
    # Only tasks whose counter somebody waits on (an unwaited group counter missing a signal is harmless).
    waited = {int(p.payloads[r]["wait_counter"][i]) for r, i in _wait_slots(p)}
    out = []
    for r, rec in enumerate(p.payloads):
        if int(rec["signal"]) in waited:
            out.append((r, "signal"))
        if int(rec["signal_phase"]) in waited:
            out.append((r, "signal_phase"))
    return out


def _a_missing_signal(p, t):
    r, field = t

    def f(q):
        if field == "signal":  # a fresh counter nobody waits on: the old one misses this task's signal
            q.meta["n_counters"] = int(q.meta["n_counters"]) + 1
            q.payloads[r]["signal"] = int(q.meta["n_counters"]) - 1
        else:
            q.payloads[r]["signal_phase"] = 0
    return _mutate(p, f), f"task {_tid(p, r)}: no longer signals its {field} counter"


def _legacy(fn, **kw):
    def apply(p, r):
        return fn(p, row=r, **kw)
    return apply


def _legacy_targets(fn, **kw):
    """Every row: the legacy injector raises NotApplicable for a row that is not its target."""
    return lambda p, o: list(_rows(p))


def _k_swap_adjacent(p, o):
    # Any two neighbours on one worker; swapping two independent tasks is harmless (the oracle skips it),
    # swapping a producer and a consumer ordered only by the worker list breaks that dependency.
    return [r for b, e in p.meta["worker_tasks"] for r in range(int(b), int(e) - 1)]


def _a_swap_adjacent(p, r):
    def f(q):
        a, b = q.payloads[r].copy(), q.payloads[r + 1].copy()
        q.payloads[r], q.payloads[r + 1] = b, a
    return _mutate(p, f), f"tasks {_tid(p, r)} and {_tid(p, r + 1)} swapped on their worker"


def _move_row(q: Profile, r: int, worker: int, pos: int) -> None:
    """Moves payload row r to position ``pos`` of ``worker``'s list (rows and worker_tasks updated)."""
    rows = [list(range(int(b), int(e))) for b, e in q.meta["worker_tasks"]]
    for lst in rows:
        if r in lst:
            lst.remove(r)
    rows[worker].insert(pos, r)
    order = [x for lst in rows for x in lst]
    new = q.payloads[order].copy()
    new["worker"] = np.repeat(np.arange(len(rows)), [len(lst) for lst in rows])
    q.payloads = new
    bounds = np.cumsum([0] + [len(lst) for lst in rows])
    q.meta["worker_tasks"] = [[int(bounds[w]), int(bounds[w + 1])] for w in range(len(rows))]


def _k_state_write_first(p, o):
    # A task that writes a state slot (its write-back, or the in-place reset), moved to the front of the
    # worker of a task that reads the same slot later in program order, its waits dropped: it now
    # overwrites the slot before that reader reads the previous beat's value (write-after-read).
    out = []
    for r, rec in enumerate(p.payloads):
        if operand_arena(rec, OUT) != Arena.STATE:
            continue
        words = np.frombuffer(next(w for a, wr, w in o.fp[int(rec["task"])] if wr), np.int64)
        readers = [x for x in o.who(Arena.STATE, words)[1].tolist() if x != r and o.phase[x] < o.phase[r]]
        out += [(r, int(p.payloads[x]["worker"])) for x in readers]
    return sorted(set(out))


def _a_state_write_first(p, t):
    r, w = t

    def f(q):
        rec = q.payloads[r]
        while int(rec["n_waits"]):
            _remove_wait(rec, 0)
        _move_row(q, r, w, 0)
    return _mutate(p, f), f"task {_tid(p, r)} (a state write) moved to the front of worker {w}, waits dropped"


def _k_output_overlap_in_phase(p, o):
    # The output moved by one element onto bytes another task of the same phase writes.
    out = []
    for r, rec in enumerate(p.payloads):
        if operand_arena(rec, OUT) not in SHARED:
            continue
        words = np.frombuffer(next(w for a, wr, w in o.fp[int(rec["task"])] if wr), np.int64)
        for d in (-1, 1):
            if int(rec["offset"][OUT]) + 4 * d < 0:
                continue
            writers = o.who(operand_arena(rec, OUT), words + d)[0]
            hit = any(x != r and o.phase[x] == o.phase[r] for x in writers.tolist())
            if hit:
                out.append((r, 4 * d))
    return out


def _a_offset(k_of, field="offset"):
    def apply(p, t):
        r, k, delta = t if len(t) == 3 else (t[0], k_of, t[1])

        def f(q):
            q.payloads[r][field][k] = int(q.payloads[r][field][k]) + delta
        return _mutate(p, f), f"task {_tid(p, r)}: operand {k} {field} {delta:+d} bytes"
    return apply


def _k_tile(p, o, what):
    out = []
    n = p.sessions
    for r, rec in enumerate(p.payloads):
        if operand_arena(rec, OUT) not in SHARED:
            continue
        sb, se, eb, ee = (int(rec[f]) for f in ("session_begin", "session_end", "elem_begin", "elem_end"))
        ne = _n_elems(p, r)
        if what == "elem_overlap":  # grows into a neighbour tile (only where a neighbour exists)
            out += [(r, "elem_end", 1)] if ee < ne else []
            out += [(r, "elem_begin", -1)] if eb > 0 else []
        elif what == "elem_gap":
            out += [(r, "elem_end", -1), (r, "elem_begin", 1)] if ee > eb else []
        elif what == "session_overlap":
            out += [(r, "session_end", 1)] if se < n else []
            out += [(r, "session_begin", -1)] if sb > 0 else []
        elif what == "session_gap":
            out += [(r, "session_end", -1), (r, "session_begin", 1)] if se > sb else []
    return out


def _a_tile(p, t):
    r, field, delta = t

    def f(q):
        q.payloads[r][field] = int(q.payloads[r][field]) + delta
    return _mutate(p, f), f"task {_tid(p, r)}: {field} {delta:+d}"


def _act_views(p: Profile):
    """(offset, session_stride) of every ACT tensor of the tensor table."""
    return sorted({(int(t["offset"]), int(t["session_stride"])) for t in p.meta["tensors"] if t["arena"] == "act"})


def _k_output_onto_live(p, o):
    # The output of an ACT-writing task moved onto another act tensor that is live across the task's
    # phase: written by an earlier phase and read by a later one.
    out = []
    for r, rec in enumerate(p.payloads):
        if operand_arena(rec, OUT) != Arena.ACT:
            continue
        own = (int(rec["offset"][OUT]), int(rec["session_stride"][OUT]))
        for view in _act_views(p):
            if view == own:
                continue
            live = False
            for s in range(p.sessions):
                writers, readers = o.who(Arena.ACT, [(view[0] + s * view[1]) // 4])
                if (o.phase[writers] < o.phase[r]).any() and (o.phase[readers] > o.phase[r]).any():
                    live = True
                    break
            if live:
                out.append((r, view))
    return out


def _a_view(k_of):
    def apply(p, t):
        r, view = t[0], t[-1]
        k = k_of if len(t) == 2 else t[1]

        def f(q):
            q.payloads[r]["offset"][k], q.payloads[r]["session_stride"][k] = view
        return _mutate(p, f), f"task {_tid(p, r)}: operand {k} moved onto the act tensor at {view}"
    return apply


def _k_input_moved(p, o):
    # An ACT input moved by one element or onto another act tensor of the tensor table.
    out = []
    for r, rec in enumerate(p.payloads):
        for k in range(int(rec["n_inputs"])):
            if operand_arena(rec, k) != Arena.ACT:
                continue
            own = (int(rec["offset"][k]), int(rec["session_stride"][k]))
            out += [(r, k, v) for v in _act_views(p) if v != own]
    return out


def _k_input_shift(p, o):
    return [(r, k, d) for r, rec in enumerate(p.payloads) for k in range(int(rec["n_inputs"]))
            if operand_arena(rec, k) in SHARED + (int(Arena.INPUT),) for d in (-4, 4) if int(rec["offset"][k]) + d >= 0]


def _k_stride(p, o, inputs: bool):
    # A session stride off by one element, for a task of more than one session (with one session the
    # stride is never used: harmless, not a target).
    out = []
    for r, rec in enumerate(p.payloads):
        if int(rec["session_end"]) < 2:  # only session 0: the stride is never used
            continue
        ks = range(int(rec["n_inputs"])) if inputs else [OUT]
        out += [(r, k, d) for k in ks if int(rec["session_stride"][k]) > 0 for d in (-4, 4)]
    return out


def _k_slot(p, o):
    # A state operand of session s pointed at slot s + d of the same state (d = 1 .. sessions - 1). (A
    # slot below s is not expressible: the offset is session 0's slot, an unsigned number.)
    out = []
    for r, rec in enumerate(p.payloads):
        for k in _ops(rec):
            stride = int(rec["session_stride"][k])
            if operand_arena(rec, k) == Arena.STATE and stride:
                out += [(r, k, d * stride) for d in range(1, p.sessions)]
    return out


def _k_arena(p, o):
    # Every operand into every other arena id, and one id that names no arena.
    return [(r, k, a) for r, rec in enumerate(p.payloads) for k in _ops(rec)
            for a in [*map(int, Arena), 9] if a != operand_arena(rec, k)]


def _a_arena(p, t):
    r, k, a = t

    def f(q):
        _set_arena(q, r, k, a)
    return _mutate(p, f), f"task {_tid(p, r)}: operand {k} in arena {a}"


def _params_blocks(p: Profile) -> list[int]:
    return sorted({int(x) for x in p.payloads["params"]})


def _k_params_other(p, o):
    return [(r, b) for r in _rows(p) for b in _params_blocks(p) if b != int(p.payloads[r]["params"])]


def _a_params(p, t):
    # Another task's parameter block. Only blocks that change what the task touches or its opcode: a
    # block of the same opcode and footprint but another expression computes other values race-free, a
    # value fault no byte-level proof can see (out of the verifier's scope), so it is not a target.
    r, b = t
    rec = p.payloads[r].copy()
    rec["params"] = b
    try:
        same = int(p.params[b]) == int(rec["opcode"]) and record_footprint(p, rec) == record_footprint(p, p.payloads[r])
    except Exception:  # noqa: BLE001 - a block that does not decode for this task: a target
        same = False
    if same:
        raise NotApplicable("params_other_block: same opcode and footprint (a value change, not a race)")

    def f(q):
        q.payloads[r]["params"] = b
    return _mutate(p, f), f"task {_tid(p, r)}: params word {b}"


def _k_params_mid(p, o):
    return [(r, d) for r in _rows(p) for d in (1, 2, 3)]


def _a_params_mid(p, t):
    r, d = t

    def f(q):
        q.payloads[r]["params"] = int(q.payloads[r]["params"]) + d
    return _mutate(p, f), f"task {_tid(p, r)}: params word +{d} (inside its block)"


def _k_n_inputs(p, o):
    return [(r, d) for r, rec in enumerate(p.payloads) for d in (-1, 1) if 0 <= int(rec["n_inputs"]) + d <= 4]


def _a_n_inputs(p, t):
    r, d = t

    def f(q):
        q.payloads[r]["n_inputs"] = int(q.payloads[r]["n_inputs"]) + d
    return _mutate(p, f), f"task {_tid(p, r)}: n_inputs {d:+d}"


def _k_other_half(p, o, arena):
    # The operand moved by one half of the double buffer: it reads next beat's input frame (written by
    # the host while this beat runs) or writes the output half the host is reading.
    size = int(p.meta["arena_bytes"][Arena(arena).name.lower()])
    return [(r, k, size) for r, rec in enumerate(p.payloads) for k in _ops(rec) if operand_arena(rec, k) == arena]


def _k_write_arena(p, o):
    return [r for r in _rows(p) if operand_arena(p.payloads[r], OUT) in SHARED]



# name -> (candidate targets(profile, oracle), apply(profile, target) -> (mutant, description))
KINDS: dict[str, tuple[Callable, Callable]] = {
    # dependencies
    "drop_wait": (_k_drop_wait, _a_drop_wait),
    "wrong_wait_counter": (_k_wrong_wait_counter, _a_wrong_wait_counter),
    "wait_count_too_low": (_k_wait_count_low, _a_wait_count(-1)),
    "wait_count_too_high": (lambda p, o: _wait_slots(p), _a_wait_count(+1)),
    "wait_unsignalled": (lambda p, o: _wait_slots(p), _a_wait_unsignalled),
    "extra_signal": (_k_extra_signal, _a_extra_signal),
    "missing_signal": (_k_missing_signal, _a_missing_signal),
    "signal_zero": (_legacy_targets(signal_zero), _legacy(signal_zero)),
    "deadlock_cycle": (_legacy_targets(deadlock_cycle), _legacy(deadlock_cycle)),
    "worker_swap_deadlock": (_legacy_targets(swap_worker_order), _legacy(swap_worker_order)),
    "worker_swap_breaks_dependency": (_k_swap_adjacent, _a_swap_adjacent),
    "drop_task": (_legacy_targets(drop_task), _legacy(drop_task)),
    "state_write_before_reader": (_k_state_write_first, _a_state_write_first),
    # tiles and offsets
    "output_overlap_in_phase": (_k_output_overlap_in_phase, _a_offset(OUT)),
    "output_onto_live_tensor": (_k_output_onto_live, _a_view(OUT)),
    "output_onto_own_input": (_legacy_targets(output_onto_input), _legacy(output_onto_input)),
    "input_onto_other_tensor": (_k_input_moved, _a_view(None)),
    "input_offset_shift": (_k_input_shift, _a_offset(None)),
    "elem_tile_overlap": (lambda p, o: _k_tile(p, o, "elem_overlap"), _a_tile),
    "elem_tile_gap": (lambda p, o: _k_tile(p, o, "elem_gap"), _a_tile),
    "session_tile_overlap": (lambda p, o: _k_tile(p, o, "session_overlap"), _a_tile),
    "session_tile_gap": (lambda p, o: _k_tile(p, o, "session_gap"), _a_tile),
    "tile_past_end": (_legacy_targets(tile_past_end), _legacy(tile_past_end)),
    "output_session_stride": (lambda p, o: _k_stride(p, o, False), _a_offset(None, "session_stride")),
    "input_session_stride": (lambda p, o: _k_stride(p, o, True), _a_offset(None, "session_stride")),
    "offset_out_of_arena": (_legacy_targets(offset_out_of_arena), _legacy(offset_out_of_arena)),
    # arenas, sessions, double buffers, records
    "state_slot_other_session": (_k_slot, _a_offset(None)),
    "state_slot_shift_sessions": (_legacy_targets(swap_session_ranges), _legacy(swap_session_ranges)),
    "write_input_arena": (_legacy_targets(write_input_arena), _legacy(write_input_arena)),
    "write_weights_arena": (_legacy_targets(write_weights_arena), _legacy(write_weights_arena)),
    "wrong_arena_id": (_k_arena, _a_arena),
    "input_other_half": (lambda p, o: _k_other_half(p, o, int(Arena.INPUT)), _a_offset(None)),
    "output_other_half": (lambda p, o: _k_other_half(p, o, int(Arena.OUTPUT)), _a_offset(None)),
    "params_other_block": (_k_params_other, _a_params),
    "params_inside_block": (_k_params_mid, _a_params_mid),
    "n_inputs_wrong": (_k_n_inputs, _a_n_inputs),
}


def pick_faults(profile: Profile, oracle: Oracle, kind: str, n: int, rng, max_tries: int = 400,
                keep_harmless: int = 3):
    """Up to ``n`` genuine faults of ``kind``: candidates in a seeded random order, each mutant checked by
    the oracle. Returns (faults, harmless): lists of (target, mutant, description[, why]); ``harmless``
    keeps up to ``keep_harmless`` skipped candidates (for the interpreter to confirm)."""
    cands, apply = KINDS[kind]
    targets = cands(profile, oracle)
    faults, harmless = [], []
    for j in rng.permutation(len(targets))[:max_tries]:
        t = targets[int(j)]
        try:
            mutant, desc = apply(profile, t)
        except NotApplicable:
            continue
        why = oracle.fault(mutant)
        if why is None:
            if len(harmless) < keep_harmless:
                harmless.append((t, mutant, desc))
            continue
        faults.append((t, mutant, desc, why))
        if len(faults) == n:
            break
    return faults, harmless
