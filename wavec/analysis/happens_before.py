"""Happens-before within one beat of a wavec program, from the payload table alone.

Within a beat, task A happens before task B when
- A precedes B in the same worker's list (``worker_tasks`` order), or
- B waits on counter c and A signals c: a wait ``counter[c] >= k * (b + 1)`` passes only once every one of
  the k signallers of c has finished this beat, provided exactly k tasks signal c (checked here: fewer
  never lets the wait pass, more lets it pass before all of them finish). A task signals up to two
  counters: ``signal`` and, when not 0, ``signal_phase``; it is a signaller of both,
and transitively. Counter 0 is the end-of-beat counter the workers increment; no task may wait on it or
signal it. Beats are separated by a full barrier, so this relation is all a verifier needs.

The closure is a vector clock per task: ``clock[b, w]`` is the last position on worker w's list that
happens before b or is b (-1: none). It is exact because the set of tasks before b is closed under worker
order (what precedes a predecessor on its worker precedes b too), so it is one prefix of every worker's
list; "a before b" is one lookup, ``clock[b, worker(a)] >= pos(a)``. It is built in one topological sweep
where a counter is a node whose clock is the elementwise max of its signallers' clocks: each task takes
the max of at most 1 + MAX_WAITS rows, n x workers int32 in all (141 MB at 267k tasks on 132 workers).

Raises `HappensBeforeError` (a VerificationError) for a wait nobody can satisfy, a wrong wait count, a
counter out of range, or a cycle (a deadlock), naming the tasks involved.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from wavec.errors import VerificationError
from wavec.payload import BEAT_DONE_COUNTER, MAX_WAITS


class HappensBeforeError(VerificationError):
    """The counters and worker order do not form a deadlock-free, well-counted schedule."""


@dataclass
class HappensBefore:
    """The transitive happens-before relation of one beat over payload rows ``0 .. n-1``."""

    n: int
    topo: np.ndarray  # rows in a topological order
    topo_pos: np.ndarray  # position of each row in ``topo``
    worker: np.ndarray  # int64 [n]: the worker whose list holds each row
    pos: np.ndarray  # int64 [n]: each row's position in its worker's list
    clock: np.ndarray  # int32 [n, workers]: the last position on each worker's list at or before the row (-1: none)
    edges: int  # direct edges: worker order plus (wait, signaller) pairs
    signallers: dict[int, np.ndarray]  # counter -> rows that signal it

    def before(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """Whether a happens before b (elementwise; a task is not before itself)."""
        a = np.asarray(a, np.int64)
        b = np.asarray(b, np.int64)
        return (self.clock[b, self.worker[a]] >= self.pos[a]) & (a != b)

    def ordered(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """Whether a and b are ordered either way."""
        return self.before(a, b) | self.before(b, a)


def build_happens_before(
    worker_rows: list[tuple[int, int]],
    signal: np.ndarray,
    wait_counter: np.ndarray,
    wait_count: np.ndarray,
    n_waits: np.ndarray,
    n_counters: int,
    name: Callable[[int], str] = lambda r: f"payload row {r}",
    signal_phase: np.ndarray | None = None,
) -> HappensBefore:
    """The relation for payload rows grouped by ``worker_rows`` ([begin, end) per worker, execution
    order). ``wait_counter``/``wait_count`` are [n, MAX_WAITS]; ``signal_phase`` (0: none) is each row's
    second signalled counter; ``name(row)`` describes a task in messages."""
    n = len(signal)
    signal = np.asarray(signal, np.int64)
    second = np.zeros(n, np.int64) if signal_phase is None else np.asarray(signal_phase, np.int64)
    # ---- counters: range, signallers, wait targets
    for r in range(n):
        c = int(signal[r])
        if c == BEAT_DONE_COUNTER:
            raise HappensBeforeError(
                f"{name(r)} signals counter 0, the end-of-beat counter the workers increment: the beat barrier "
                "would open before every worker is done. Give the task (or its phase) a counter of its own"
            )
        if c >= n_counters:
            raise HappensBeforeError(f"{name(r)} signals counter {c}, but the profile has n_counters = {n_counters}")
        c2 = int(second[r])
        if c2 >= n_counters or c2 < 0:
            raise HappensBeforeError(f"{name(r)} signals (signal_phase) counter {c2}, but the profile has n_counters = {n_counters}")
        if c2 == c:
            raise HappensBeforeError(
                f"{name(r)} signals counter {c} twice (signal and signal_phase): it would count as two tasks. "
                "Set signal_phase to 0"
            )
    rows = np.r_[np.arange(n, dtype=np.int64), np.flatnonzero(second != BEAT_DONE_COUNTER)]
    sig = np.r_[signal, second[second != BEAT_DONE_COUNTER]]
    order = np.argsort(sig, kind="stable")
    cs, starts = np.unique(sig[order], return_index=True)
    signallers = {int(c): np.sort(rows[order[s:e]]) for c, s, e in zip(cs, starts, np.r_[starts[1:], len(sig)])}
    waits: list[list[int]] = [[] for _ in range(n)]
    edges = 0
    for r in range(n):
        k_waits = int(n_waits[r])
        if k_waits > MAX_WAITS:
            raise HappensBeforeError(f"{name(r)} has n_waits = {k_waits}; a payload holds at most {MAX_WAITS}")
        for i in range(k_waits):
            c, k = int(wait_counter[r, i]), int(wait_count[r, i])
            if c == BEAT_DONE_COUNTER:
                raise HappensBeforeError(
                    f"{name(r)} waits on counter 0, the end-of-beat counter, inside the beat: it opens only when "
                    "every worker (this task's too) has finished the beat, so the wait deadlocks or is meaningless. "
                    "Wait on the producing phase's counter instead"
                )
            if c >= n_counters:
                raise HappensBeforeError(f"{name(r)} waits on counter {c}, but the profile has n_counters = {n_counters}")
            who = signallers.get(c)
            if who is None:
                raise HappensBeforeError(
                    f"{name(r)} waits on counter {c}, which no task signals: the wait never passes (deadlock). "
                    "Point the wait at the producer's signal counter"
                )
            if len(who) != k:
                listed = ", ".join(name(int(w)) for w in who[:4]) + (", ..." if len(who) > 4 else "")
                effect = (
                    "it never passes (deadlock)" if k > len(who)
                    else "it passes before all of them finish (a race)"
                )
                raise HappensBeforeError(
                    f"{name(r)} waits for {k} signals per beat on counter {c}, but {len(who)} tasks signal it "
                    f"({listed}): {effect}. Set wait_count to {len(who)}"
                )
            waits[r].append(c)
            edges += len(who)
    # ---- the graph: task nodes 0..n-1, counter nodes n + index
    counter_ids = sorted(signallers)
    cnode = {c: n + i for i, c in enumerate(counter_ids)}
    n_nodes = n + len(counter_ids)
    succ: list[list[int]] = [[] for _ in range(n_nodes)]
    indeg = np.zeros(n_nodes, np.int64)
    prev = np.full(n, -1, np.int64)
    worker = np.full(n, -1, np.int64)
    pos = np.zeros(n, np.int64)
    for w, (b, e) in enumerate(worker_rows):
        worker[b:e] = w
        pos[b:e] = np.arange(e - b)
        for r in range(b + 1, e):
            prev[r] = r - 1
            succ[r - 1].append(r)
            indeg[r] += 1
            edges += 1
    for r in range(n):
        for c in (int(signal[r]), int(second[r])):
            if c == BEAT_DONE_COUNTER:
                continue
            node = cnode[c]
            succ[r].append(node)
            indeg[node] += 1
        for c in waits[r]:
            succ[cnode[c]].append(r)
            indeg[r] += 1
    alone = np.flatnonzero(worker < 0)  # rows no worker lists (the verifier rejects them first): a list each
    worker[alone] = len(worker_rows) + np.arange(len(alone))
    # ---- Kahn's sweep, building the vector clocks as it goes
    width = max(len(worker_rows) + len(alone), 1)
    clock = np.full((n, width), -1, np.int32)
    cclock = np.full((len(counter_ids), width), -1, np.int32)
    ready = deque(int(v) for v in np.flatnonzero(indeg == 0))
    topo: list[int] = []
    remaining = indeg.copy()
    while ready:
        v = ready.popleft()
        if v < n:
            row = clock[v]
            if prev[v] >= 0:
                row[:] = clock[prev[v]]
            for c in waits[v]:
                np.maximum(row, cclock[cnode[c] - n], out=row)
            row[worker[v]] = pos[v]
            topo.append(v)
        else:
            cclock[v - n] = np.maximum.reduce(clock[signallers[counter_ids[v - n]]], axis=0)
        for w in succ[v]:
            remaining[w] -= 1
            if remaining[w] == 0:
                ready.append(w)
    if len(topo) < n:
        raise HappensBeforeError(_cycle_message(n, remaining, prev, waits, signallers, cnode, counter_ids, name))
    topo_arr = np.asarray(topo, np.int64)
    topo_pos = np.empty(n, np.int64)
    topo_pos[topo_arr] = np.arange(n)
    return HappensBefore(n, topo_arr, topo_pos, worker, pos, clock, edges, signallers)


def _cycle_message(n, remaining, prev, waits, signallers, cnode, counter_ids, name) -> str:
    """Walks predecessors among the nodes Kahn's sweep could not reach until one repeats: a cycle."""
    stuck = remaining > 0

    def preds(v: int) -> list[tuple[int, str]]:
        if v < n:
            out = []
            if prev[v] >= 0 and stuck[prev[v]]:
                out.append((int(prev[v]), "worker"))
            out += [(cnode[c], "wait") for c in waits[v] if stuck[cnode[c]]]
            return out
        return [(int(s), "signal") for s in signallers[counter_ids[v - n]] if stuck[s]]

    v = int(np.flatnonzero(stuck[:n])[0])
    seen: dict[int, int] = {}
    path: list[tuple[int, str]] = []
    while v not in seen:
        seen[v] = len(path)
        p, how = preds(v)[0]
        path.append((v, how))
        v = p
    cycle = path[seen[v]:]
    # cycle[i + 1] (wrapping) is the predecessor of cycle[i]; describe each task by what it waits behind.
    steps = []
    m = len(cycle)
    for i, (v, how) in enumerate(cycle):
        if v >= n:
            continue
        u = cycle[(i + 1) % m][0]
        if how == "worker":
            steps.append(f"{name(v)} runs after {name(u)} on the same worker")
        else:
            s = cycle[(i + 2) % m][0]
            steps.append(f"{name(v)} waits on counter {counter_ids[u - n]}, signalled by {name(s)}")
    tasks = [v for v, _ in cycle if v < n]
    return (
        f"deadlock: a cycle of {len(tasks)} tasks waits on itself: " + "; ".join(steps)
        + ". Remove the wait that points backwards or reorder the worker's list"
    )
