"""The interpreter's machine: arenas, counters, and the beat loop that runs the payload table.

It runs the exact bytes the GPU runs (payloads.bin, params.bin, weights.bin, the arena offsets) but in a
random order that respects only the declared dependencies: a worker's tasks run in its list order, and a
task starts in beat b only once ``counter[wait_counter[i]] >= wait_count[i] * (b + 1)`` for each wait,
and when it finishes increments ``counter[signal]`` and, unless 0, ``counter[signal_phase]``
(wavec/payload.py). Which ready worker goes next is drawn from ``np.random.default_rng(seed)``, so a
missing wait shows up as a wrong result for some seeds, and a wait nobody can satisfy as a deadlock error.

Beats run one after the other: every task of beat b finishes before any task of beat b + 1 starts.
State reset is the program's job: the runtime only writes the reset flags into the input arena.
"""

from __future__ import annotations

import itertools
from heapq import heappop, heappush

import numpy as np

from wavec.errors import RuntimeBackendError
from wavec.opcodes import DOUBLE_BUFFERED, MAX_INPUTS, OUT, Arena, Opcode, unpack_params
from wavec.payload import BEAT_DONE_COUNTER, MAX_WAITS, operand_arena
from wavec.profile import Profile

from .bodies import Operand, TaskPlan, expected_inputs
from .prepare import TaskCache, prepare_task

ARENA_NAMES = {a: a.name.lower() for a in Arena}


def _f32_elems(nbytes: int) -> int:
    return -(-nbytes // 4)


def _aligned(value: int, what: str) -> int:
    if value % 4:
        raise RuntimeBackendError(f"{what} is {value} bytes, not a multiple of 4 (float32)")
    return value // 4


def plan_tasks(profile: Profile) -> list[TaskPlan]:
    """Decodes every payload record. Raises RuntimeBackendError naming the first malformed one."""
    sessions = profile.sessions
    n_counters = int(profile.meta["n_counters"])
    plans = []
    for row, rec in enumerate(profile.payloads):
        where = f"payload row {row} (task {int(rec['task'])})"
        try:
            opcode = Opcode(int(rec["opcode"]))
            params = unpack_params(profile.params, int(rec["params"]))
        except ValueError as e:
            raise RuntimeBackendError(f"{where}: {e}") from e
        if int(profile.params[int(rec["params"])]) != opcode:
            raise RuntimeBackendError(f"{where}: opcode {opcode.name} but its parameter block is another opcode's")
        sb, se = int(rec["session_begin"]), int(rec["session_end"])
        eb, ee = int(rec["elem_begin"]), int(rec["elem_end"])
        if not (0 <= sb <= se <= sessions):
            raise RuntimeBackendError(f"{where}: sessions [{sb}, {se}) outside the cohort of {sessions}")
        if not (0 <= eb <= ee <= params.n_elems):
            raise RuntimeBackendError(f"{where}: elements [{eb}, {ee}) outside the {params.n_elems} of its shape")
        n_inputs = int(rec["n_inputs"])
        if n_inputs > MAX_INPUTS or n_inputs != expected_inputs(params):
            raise RuntimeBackendError(
                f"{where}: n_inputs {n_inputs}, but its {opcode.name} parameters read {expected_inputs(params)}"
            )
        s = np.arange(sb, se, dtype=np.int64)

        def operand(k: int) -> Operand:
            arena_id = operand_arena(rec, k)
            try:
                arena = Arena(arena_id)
            except ValueError as e:
                raise RuntimeBackendError(f"{where}: operand {k} names arena {arena_id}, not a wavec arena") from e
            off = _aligned(int(rec["offset"][k]), f"{where}: operand {k} offset")
            stride = _aligned(int(rec["session_stride"][k]), f"{where}: operand {k} session_stride")
            return Operand(k, arena, off + s * stride)

        n_waits = int(rec["n_waits"])
        if n_waits > MAX_WAITS:
            raise RuntimeBackendError(f"{where}: n_waits {n_waits} > {MAX_WAITS}")
        waits = tuple((int(rec["wait_counter"][i]), int(rec["wait_count"][i])) for i in range(n_waits))
        signal = int(rec["signal"])
        signal_phase = int(rec["signal_phase"])
        for c in [signal, signal_phase, *(c for c, _ in waits)]:
            if c >= n_counters:
                raise RuntimeBackendError(f"{where}: counter {c} but the profile has n_counters = {n_counters}")
        plans.append(
            TaskPlan(
                row=row,
                task=int(rec["task"]),
                worker=int(rec["worker"]),
                opcode=opcode,
                params=params,
                sessions=(sb, se),
                elems=(eb, ee),
                inputs=tuple(operand(k) for k in range(n_inputs)),
                out=operand(OUT),
                waits=waits,
                signal=signal,
                signal_phase=signal_phase,
            )
        )
    return plans


class Interpreter:
    """Arenas and counters of one running profile; ``run_beat`` executes one beat.

    ``arenas[a]`` is a uint8 array per arena, except INPUT and OUTPUT which are a pair of halves
    (beat b uses half b % 2). ``counters`` holds the counter values (Python ints). ``order`` records the
    rows executed in the last beat, in execution order."""

    def __init__(self, profile: Profile, seed: int = 0):
        self.profile = profile
        self.meta = profile.meta
        self.rng = np.random.default_rng(seed)
        self.plans = plan_tasks(profile)
        self.worker_rows = [(int(b), int(e)) for b, e in self.meta["worker_tasks"]]
        self._check_workers()
        self._ends = [e for _, e in self.worker_rows]
        self._waits = [plan.waits for plan in self.plans]
        self._signals = [(plan.signal, plan.signal_phase) if plan.signal_phase else (plan.signal,) for plan in self.plans]
        self._kernels: list = [None] * len(self.plans)  # prepare_task's runner per row, made on first run
        self._cache = TaskCache()
        self.counters = [0] * int(self.meta["n_counters"])
        self.beat = 0
        self.order: list[int] = []
        sizes = {a: int(self.meta["arena_bytes"].get(ARENA_NAMES[a], 0)) for a in Arena if a != Arena.WEIGHTS}
        self.arena_bytes = sizes
        self.arenas: dict[Arena, object] = {}
        arena = profile.weights_arena()
        weights = np.zeros(_f32_elems(len(arena)) * 4, np.uint8)
        weights[: len(arena)] = arena
        weights.flags.writeable = False
        self.arenas[Arena.WEIGHTS] = weights
        for a, n in sizes.items():
            make = lambda: np.zeros(_f32_elems(n) * 4, np.uint8)  # noqa: E731
            self.arenas[a] = (make(), make()) if a in DOUBLE_BUFFERED else make()
        self._init_states()

    # ---------------------------------------------------------------------------------------------
    def _check_workers(self) -> None:
        owner = np.full(len(self.plans), -1)
        for w, (b, e) in enumerate(self.worker_rows):
            if not 0 <= b <= e <= len(self.plans):
                raise RuntimeBackendError(f"worker_tasks[{w}] = [{b}, {e}) is outside the {len(self.plans)} payloads")
            if (owner[b:e] >= 0).any():
                raise RuntimeBackendError(f"worker_tasks[{w}] = [{b}, {e}) overlaps another worker's rows")
            owner[b:e] = w
            for plan in self.plans[b:e]:
                if plan.worker != w:
                    raise RuntimeBackendError(f"{plan.describe()} sits in worker {w}'s rows of worker_tasks")
        if (owner < 0).any():
            row = int(np.flatnonzero(owner < 0)[0])
            raise RuntimeBackendError(f"payload row {row} belongs to no worker in worker_tasks: it would never run")

    def _init_states(self) -> None:
        weights, state = self.arenas[Arena.WEIGHTS], self.arenas[Arena.STATE]
        for spec in self.meta.get("states", []):
            nbytes = 4 * int(np.prod(spec["shape"], dtype=np.int64))
            init = int(spec["init_offset"])
            if init + nbytes > self.profile.arena_bytes("weights"):
                raise RuntimeBackendError(f"state {spec['name']!r}: initial value beyond the weights arena")
            for s in range(self.profile.sessions):
                at = int(spec["offset"]) + s * int(spec["session_stride"])
                if at + nbytes > self.arena_bytes[Arena.STATE]:
                    raise RuntimeBackendError(f"state {spec['name']!r}: slot {s} beyond the state arena")
                state[at : at + nbytes] = weights[init : init + nbytes]

    def memory(self, beat: int) -> dict[Arena, np.ndarray]:
        """float32 views of every arena as beat ``beat`` sees them (its halves of INPUT and OUTPUT)."""
        mem = {}
        for a, buf in self.arenas.items():
            if a in DOUBLE_BUFFERED:
                buf = buf[beat % 2]
            mem[a] = buf.view(np.float32)[: self.arena_bytes.get(a, len(buf)) // 4]
        return mem

    # ---------------------------------------------------------------------------------------------
    def _bind(self, mem: dict[Arena, np.ndarray], arena: Arena, spec: dict, what: str) -> np.ndarray:
        """Element indices [sessions, elems] of a per-session binding (input, output, reset flag)."""
        n = int(np.prod(spec.get("shape", ()), dtype=np.int64))
        off = _aligned(int(spec["offset"]), f"{what} offset")
        stride = _aligned(int(spec["session_stride"]), f"{what} session_stride")
        idx = off + np.arange(self.profile.sessions, dtype=np.int64)[:, None] * stride + np.arange(n)[None, :]
        if idx.size and idx.max() >= mem[arena].size:
            raise RuntimeBackendError(f"{what} lies beyond the {ARENA_NAMES[arena]} arena")
        return idx

    def write_inputs(self, frames: dict[str, np.ndarray], reset: np.ndarray) -> None:
        """Writes one beat's frames (``[sessions, *shape]`` each) and reset flags into this beat's input half."""
        mem = self.memory(self.beat)
        for spec in self.meta["inputs"]:
            idx = self._bind(mem, Arena.INPUT, spec, f"input {spec['name']!r}")
            mem[Arena.INPUT][idx] = np.asarray(frames[spec["name"]], np.float32).reshape(idx.shape)
        if "reset" in self.meta and self.meta["reset"] is not None:
            idx = self._bind(mem, Arena.INPUT, self.meta["reset"], "reset flags")
            mem[Arena.INPUT][idx] = np.asarray(reset, np.float32).reshape(idx.shape)

    def read_outputs(self) -> dict[str, np.ndarray]:
        """Reads every output of the last beat run, as ``[sessions, *shape]`` float32."""
        mem = self.memory(self.beat - 1)
        out = {}
        for spec in self.meta["outputs"]:
            idx = self._bind(mem, Arena.OUTPUT, spec, f"output {spec['name']!r}")
            out[spec["name"]] = mem[Arena.OUTPUT][idx].reshape(self.profile.sessions, *spec["shape"]).copy()
        return out

    # ---------------------------------------------------------------------------------------------
    def _blocker(self, plan: TaskPlan) -> int | None:
        """The first counter ``plan`` still waits on in this beat, or None when it may run."""
        for counter, count in plan.waits:
            if self.counters[counter] < count * (self.beat + 1):
                return counter
        return None

    def run_beat(self) -> None:
        """Runs every task of the current beat once, in a random dependency-respecting order.

        A blocked worker sits in a min-heap per counter, keyed by the value it needs and then by when it
        blocked, and is woken only once the counter reaches that value; woken workers are reconsidered in
        the order they blocked, so the ready list (and with it the seeded order) is the one a rescan of
        every waiter on each signal would give."""
        b = self.beat
        mem = self.memory(b)
        mult = b + 1
        ends = self._ends
        waits = self._waits
        signals = self._signals
        plans = self.plans
        kernels = self._kernels
        counters = self.counters
        rng = self.rng
        head = [begin for begin, _ in self.worker_rows]
        ready: list[int] = []  # workers whose next task may run
        waiting: dict[int, list[tuple[int, int, int]]] = {}  # counter -> heap of (needed value, seq, worker)
        self.order = order = []
        seq = itertools.count()

        def consider(w: int, woken_on: int = -1, woken_seq: int = -1) -> None:
            h = head[w]
            if h == ends[w]:
                counters[BEAT_DONE_COUNTER] += 1
                wake(BEAT_DONE_COUNTER)
                return
            for counter, count in waits[h]:
                need = count * mult
                if counters[counter] < need:
                    heap = waiting.get(counter)
                    if heap is None:
                        heap = waiting[counter] = []
                    # Blocked again on the counter it was woken by: it keeps its place among that
                    # counter's waiters, as a rescan would leave it.
                    s = woken_seq if counter == woken_on else next(seq)
                    heappush(heap, (need, s, w))
                    return
            ready.append(w)

        def wake(counter: int) -> None:
            heap = waiting.get(counter)
            if not heap:
                return
            value = counters[counter]
            if heap[0][0] > value:
                return
            woken = []
            while heap and heap[0][0] <= value:
                _, s, w = heappop(heap)
                woken.append((s, w))
            woken.sort()
            for s, w in woken:
                consider(w, counter, s)

        for w in range(len(self.worker_rows)):
            consider(w)
        while ready:
            i = int(rng.integers(len(ready)))
            ready[i], ready[-1] = ready[-1], ready[i]
            w = ready.pop()
            row = head[w]
            run = kernels[row]
            if run is None:
                run = kernels[row] = prepare_task(plans[row], mem, self._cache)
            run(mem)
            order.append(row)
            head[w] = row + 1
            for signal in signals[row]:
                counters[signal] += 1
            for signal in signals[row]:
                wake(signal)
            consider(w)
        if any(waiting.values()):
            raise RuntimeBackendError(self._deadlock_message(head))
        self.beat += 1

    def _deadlock_message(self, head: list[int]) -> str:
        stuck = []
        left = 0
        for w, (_, end) in enumerate(self.worker_rows):
            if head[w] == end:
                continue
            left += end - head[w]
            plan = self.plans[head[w]]
            waits = ", ".join(
                f"counter {c} = {self.counters[c]} (needs {n * (self.beat + 1)})"
                for c, n in plan.waits
                if self.counters[c] < n * (self.beat + 1)
            )
            stuck.append(f"{plan.describe()} waits on {waits}")
        shown = "; ".join(stuck[:8]) + (f"; and {len(stuck) - 8} more workers" if len(stuck) > 8 else "")
        return (
            f"deadlock in beat {self.beat}: no task can run and {left} tasks remain. {shown}. "
            "A waited counter is signalled by too few tasks before the waiter (check wait_count and signal, "
            "and that no waited-on task sits behind the waiter in its worker's list)"
        )


def run_beats(
    profile: Profile, frames: dict[str, np.ndarray], reset: np.ndarray, seed: int = 0
) -> dict[str, np.ndarray]:
    """Runs ``beats`` beats of ``profile`` on the CPU (see the module docstring). ``frames[name]`` is
    float32 ``[beats, sessions, *shape]``, ``reset`` bool ``[beats, sessions]``. Returns every output as
    float32 ``[beats, sessions, *shape]``. Raises RuntimeBackendError on a deadlock or a malformed profile."""
    machine = Interpreter(profile, seed)
    beats = int(np.asarray(reset).shape[0])
    outputs: dict[str, list[np.ndarray]] = {spec["name"]: [] for spec in profile.meta["outputs"]}
    for b in range(beats):
        machine.write_inputs({name: f[b] for name, f in frames.items()}, np.asarray(reset)[b])
        machine.run_beat()
        for name, value in machine.read_outputs().items():
            outputs[name].append(value)
    return {
        spec["name"]: np.stack(outputs[spec["name"]]).astype(np.float32, copy=False)
        if beats
        else np.zeros((0, profile.sessions, *spec["shape"]), np.float32)
        for spec in profile.meta["outputs"]
    }
