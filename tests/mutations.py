"""Fault injectors for profiles: each one breaks one thing a correct schedule must get right.

Every injector has the signature ``inject(profile, rng=None, row=None) -> (mutated, description)``: it
works on a deep copy (the argument is left alone), picks its target payload row with ``rng`` among the
rows where the fault applies (or takes ``row``), and raises `NotApplicable` when the profile has no such
row. The verifier must reject every mutant; a few kinds can, on some targets, produce an equivalent
program (for instance a wait retargeted to a counter whose signallers already follow the producer), so a
mutation test over real profiles should try several targets per kind and count the ones caught.

`MUTATIONS` maps a kind name to its injector.
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from wavec.opcodes import OUT, Arena, unpack_params
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
    for ph in p.meta.get("phases") or []:
        if isinstance(ph.get("tasks"), list):
            ph["tasks"] = [t for t in ph["tasks"] if t != tid]
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
