"""`wpk-schedule`: tile-level dependencies, counters and a cost-model list schedule onto the workers.

Runs after `wpk-arena`: dependencies come from the exact byte footprints of every task over the placed
arena offsets (wavec.opcodes.footprint per operand, replicated per session), in program order:
- read-after-write: a task waits for the last writer of every byte it reads;
- write-after-write: a task waits for the last writer of every byte it writes;
- write-after-read: a task waits for every reader of the bytes it overwrites since their last write
  (the activation arena recycles offsets; the state write-back overwrites slots earlier phases read).
Only the STATE, ACT and OUTPUT arenas are tracked: tasks never write WEIGHTS or INPUT.

Counters. Counter 0 is the end-of-beat counter. The tasks of one phase that cover one session range
form a *group*; each task signals its group's counter (``signal``) and, when someone waits on it, its
phase-wide counter (``signal_phase``, 0 = none; a phase of one group uses its group counter for both).
A consumer waits on the group counters holding the tasks it depends on (count = the group's tasks); a
wait already implied by another wait (transitively) or by the worker's earlier task is dropped. When
more than MAX_WAITS (3) remain (an elementwise op over 4 slices of the LSTM gates), a *carrier* (the
tasks of the latest of those groups, with a free wait slot) also waits on the earliest group, so waiting
on the carrier implies it; only when that fails are a phase's groups merged into its phase-wide counter
(a full-phase wait), the phase with most groups first.

With ``granularity=phase`` (the baseline) no footprint is intersected: a phase is one group with one
counter, and each task waits on the previous phase's, so the counters number the phases (duplex:11b at 56
sessions: 7,906, where session-range groups would need 382,150, beyond signal_phase's 16 bits).
``granularity=auto`` (the default) runs tile while the tasks touch at most ``max-tile-words`` tracked words
in all (``measured-max-tile-words`` with ``task-costs``; counted in closed form, wavec.opcodes.footprint_size)
and their groups fit the counters, else phase. Measured costs raise the limit because the tile schedule then
wins where it lost on the model's costs: Silero at 16,384 sessions (1.9e8 words), replayed under measured
costs, 1,403.3 us tile against 1,364.6 barrier when placed by the model, but 1,305 against 1,342 us p50 on the
H200 when placed by measured costs (65,536 sessions: 4,976 against 5,097; bench/RESULTS.md twenty-first run).
Otherwise phase: the word-level sweep costs time and memory in proportion to those words (Silero at 1,024
sessions touches 1.9e7; duplex:1b at one session 2.9e8, at 8 sessions 2.1e9). ``wpk.granularity`` says which
ran.

Worker assignment: static list scheduling. Each task costs ``overhead + max(FLOPs / (peak / SMs),
bytes / (bandwidth / SMs))`` microseconds (wavec.analysis.cost's counts; rates from the target, or the
``peak-flops`` / ``hbm-bandwidth`` options); the overhead is ``task-overhead-us``, or by default the
target's measured fixed cost of a task of its opcode (wavec.hw.task_overhead_us: on the H200 a one-session
MATMUL or CONV task takes microseconds whatever its work, so a short chain placed behind one costs more than a
handoff); a wait that crosses workers adds ``handoff-us``. With ``task-costs`` (a timeline file of the same program
traced on the GPU, wavec.analysis.measured_costs) each task is charged its phase's measured median body
times its modeled cost over the phase's median one, plus the measured gap between a worker's tasks; the
tasks are placed by these costs with the insertion policy at any cohort, and by the model's (as without the
file), and the pass keeps the placement that ends sooner when both are replayed under the measured costs. At
phase granularity the measured costs change only the modeled figures: a phase's tasks go longest first
either way, in the same order. Ready
tasks are taken by critical-path priority (longest cost path to the end of the beat) and placed on the
worker where they can start earliest (in a cohort of at most `insertion-max-sessions`, into an idle
stretch ahead of that worker's later tasks where one holds them: HEFT's insertion policy); a worker runs its
tasks in start-time order, and every wait points at tasks that finish before its task starts, so the program
cannot deadlock.
At phase granularity the phases run one after another, so each phase's tasks simply go longest first to
the worker free earliest (LPT), with no priorities over a wait graph.

Module attributes: ``wpk.workers``, ``wpk.counters``, and the modeled schedule: ``wpk.beat_us``
(makespan), ``wpk.task_us`` and ``wpk.handoff_us`` (the costs charged; ``wpk.measured_us``, the measured
ones, with ``task-costs``), ``wpk.critical_path_us``, ``wpk.worker_load_us`` ([min, mean, max] busy time per worker),
``wpk.waits`` (wait slots used) and ``wpk.phase_waits`` (grid-wide waits: on every task of a phase that spans
more than one session range).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr, f64, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.analysis.cost import flops_per_element
from wavec.analysis.task_parts import TaskParts
from wavec.dialects import wave, wpk
from wavec.opcodes import ELEM_BYTES, OUT, footprint, footprint_size
from wavec.payload import BEAT_DONE_COUNTER, MAX_WAITS
from wavec.progress import current as current_progress

TRACKED_ARENAS = ("state", "act", "output")  # the arenas tasks write; weights and input are read-only
MAX_COUNTERS = 0xFFFF  # signal_phase is a u16 (wavec.payload)


def phases_of(module: ModuleOp) -> list[wpk.PhaseOp]:
    return [op for op in module.ops if isinstance(op, wpk.PhaseOp)]


def _buffers(module: ModuleOp) -> dict[str, wpk.BufferOp]:
    return {op.buffer_name: op for op in module.ops if isinstance(op, wpk.BufferOp)}


_NO_WORDS = np.zeros(0, np.int64)


class _Task:
    """One task (a row of a `wpk.tasks` op) while the pass runs: 10^5 to 10^6 of them, hence slots."""

    __slots__ = ("op", "tile", "index", "phase", "group", "reads", "writes", "flops", "nbytes", "words", "cost",
                 "deps", "waits")

    def __init__(self, op: wpk.TasksOp, tile: tuple[int, int, int, int], index: int, phase: int):
        self.op = op  # the table holding the task
        self.tile = tile  # session begin, end, element begin, end
        self.index = index  # program order
        self.phase = phase
        self.group = -1  # global group id
        self.reads = self.writes = _NO_WORDS  # tracked words
        self.flops = self.nbytes = 0
        self.words = 0  # tracked words touched, counted when the words themselves are not listed
        self.cost = 0.0
        self.deps: set = set()  # direct conflicting earlier tasks
        self.waits: list = []  # counter units (see _Counter)

    @property
    def sessions(self) -> tuple[int, int]:
        return self.tile[:2]


@dataclass
class _Counter:
    phase: int
    tasks: list[int]  # signallers, program order indices
    whole_phase: bool  # all tasks of a phase of more than one group
    groups: int = 0  # bitset over group ordinals: its own group, or every group of its phase
    ordinal: int = -1  # a group counter's bit in ``groups``
    index: int = -1  # counter number once allocated


def _footprints(buffers: dict[str, wpk.BufferOp], bases: dict[str, int]):
    """A function filling a task's tracked read and write words (a global word space over TRACKED_ARENAS;
    a word two operands read may appear twice) and its FLOPs and bytes. The word arrays of a large cohort
    do not fit in memory all at once: `_dependencies` fills a phase's tasks, uses and drops them."""
    parts = TaskParts()
    rel_cache: dict = {}  # (part, operand, element range) -> distinct relative elements, or their count
    layout = {name: (buf.stride, buf.arena.data, buf.offset.value.data if buf.offset is not None else 0)
              for name, buf in buffers.items()}
    counted: dict = {}  # sizes only (nothing tracked): (part, sessions, element range) -> FLOPs, bytes, words

    def fill(t: _Task) -> None:
        part = parts.part(t.op)
        params = part.params
        s0, s1, e0, e1 = t.tile
        if not bases:
            hit = counted.get((id(part), s1 - s0, e0, e1))
            if hit is not None:
                t.flops, t.nbytes, t.words = hit
                return
        n_in = part.n_inputs
        reads, writes, nbytes, words = [], [], 0, 0
        for operand, name, elem_offset in part.slots:
            stride, arena, offset = layout[name]
            fkey = (part.words, operand, e0, e1)  # relative sets depend on the parameter block only
            if arena not in bases:  # untracked (the weights): only its bytes count
                size = rel_cache.get((None, *fkey))
                if size is None:
                    size = rel_cache[(None, *fkey)] = footprint_size(params, operand, e0, e1, n_in)
                nbytes += ELEM_BYTES * size * ((s1 - s0) if stride else 1)
                words += size * ((s1 - s0) if stride else 1) if arena in TRACKED_ARENAS else 0
                continue
            rel = rel_cache.get(fkey)
            if rel is None:
                rel = rel_cache[fkey] = np.unique(np.asarray(footprint(params, operand, e0, e1, n_in), np.int64))
            nbytes += ELEM_BYTES * len(rel) * ((s1 - s0) if stride else 1)
            if len(rel) == 0:
                continue
            start = bases[arena] + (offset // ELEM_BYTES) + elem_offset
            if stride and s1 - s0 > 1:
                w = (start + np.arange(s0, s1, dtype=np.int64) * (stride // ELEM_BYTES))[:, None] + rel[None, :]
                w = w.ravel()
            else:
                w = rel + (start + s0 * (stride // ELEM_BYTES))
            (writes if operand == OUT else reads).append(w)
        t.reads = (reads[0] if len(reads) == 1 else np.concatenate(reads)) if reads else _NO_WORDS
        t.writes = (writes[0] if len(writes) == 1 else np.concatenate(writes)) if writes else _NO_WORDS
        t.flops = (s1 - s0) * (e1 - e0) * flops_per_element(params)
        t.nbytes = nbytes
        t.words = words
        if not bases:
            counted[(id(part), s1 - s0, e0, e1)] = (t.flops, t.nbytes, t.words)

    return fill


def _dependencies(tasks: list[_Task], phases: list[list[int]], n_words: int, fill) -> None:
    """Direct RAW, WAW and WAR predecessors of every task, in program order; ``fill(task)`` gives a task
    its words (dropped again once its phase is done)."""
    last_writer = np.full(n_words, -1, np.int64)
    log_task = np.zeros(0, np.int64)  # reads since the last write of their word
    log_word = np.zeros(0, np.int64)
    for members in current_progress().iterate(phases, unit="phases"):
        for i in members:
            fill(tasks[i])
        order = np.argsort(log_word, kind="stable")
        sorted_words, sorted_tasks = log_word[order], log_task[order]
        for i in members:
            t = tasks[i]
            touched = np.concatenate([t.reads, t.writes])
            p = last_writer[touched]
            deps = set(np.unique(p[p >= 0]).tolist())
            if len(t.writes) and len(sorted_words):
                lo = np.searchsorted(sorted_words, t.writes, "left")
                hi = np.searchsorted(sorted_words, t.writes, "right")
                cnt = hi - lo
                if cnt.any():
                    total = int(cnt.sum())
                    idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
                    deps.update(np.unique(sorted_tasks[idx]).tolist())
            deps.discard(i)
            t.deps = deps
        written = np.zeros(n_words, bool)
        for i in members:
            written[tasks[i].writes] = True
            last_writer[tasks[i].writes] = i
        keep = ~written[log_word]
        new_t = [np.full(len(tasks[i].reads), i, np.int64) for i in members]
        new_w = [tasks[i].reads for i in members]
        nw = np.concatenate(new_w) if new_w else np.zeros(0, np.int64)
        nt = np.concatenate(new_t) if new_t else np.zeros(0, np.int64)
        fresh = ~written[nw]
        log_word = np.concatenate([log_word[keep], nw[fresh]])
        log_task = np.concatenate([log_task[keep], nt[fresh]])
        for i in members:
            tasks[i].reads = tasks[i].writes = _NO_WORDS


def _bits(indices) -> int:
    m = 0
    for i in indices:
        m |= 1 << i
    return m


class _CounterClosure:
    """Bitset of the groups whose tasks happen before a counter's wait passes: its signallers and what
    happens before them (through `anc`, each task's ancestors), memoized per counter in `memo`.

    Before worker assignment a task is ordered after others only through waits, and a wait covers whole
    groups (a group counter) or whole phases (all their groups), so every such set is a union of whole
    groups: one bit per group is exact, and G^2/8 bytes at most instead of n^2/8 (tiles of one group share
    a bit). Equal sets are interned (`intern`): tasks that wait on the same counters share one int."""

    def __init__(self, counters: list, anc: list[int]):
        self.counters, self.anc, self.memo, self.intern = counters, anc, {}, {}

    def __call__(self, c: int) -> int:
        hit = self.memo.get(c)
        if hit is None:
            hit = self.counters[c].groups
            seen = set()
            for s in self.counters[c].tasks:
                a = self.anc[s]
                if id(a) not in seen:  # interned: most signallers share their ancestors
                    seen.add(id(a))
                    hit |= a
            hit = self.memo[c] = self.intern.setdefault(hit, hit)
        return hit

    def shared(self, value: int) -> int:
        return self.intern.setdefault(value, value)


def _barrier_waits(tasks: list[_Task], phases: list[list[int]], phase_counter: dict[int, int]) -> None:
    """The baseline: each task waits on the whole previous phase that has tasks (its phase-wide counter),
    so every phase boundary is a grid-wide barrier and earlier phases are ordered transitively. No
    dependency sets: a phase of T tasks after one of T' would otherwise hold T x T' of them."""
    previous = None
    for p, members in enumerate(phases):
        for i in members:
            tasks[i].waits = [] if previous is None else [phase_counter[previous]]
        if members:
            previous = p


@dataclass(frozen=True)
class WpkSchedule(ModulePass):
    """Counter dependencies (tile-level from exact footprints, or a barrier per phase) and a critical-path list schedule."""

    name = "wpk-schedule"
    workers: int = field(default=132, metadata={"help": "persistent blocks, one per SM"})
    hw: str = field(default="h200", metadata={"help": "hardware target for the rates (a name or a YAML path)"})
    peak_flops: float = field(default=0.0, metadata={"help": "device fp32 FLOP/s (0: the target's)"})
    hbm_bandwidth: float = field(default=0.0, metadata={"help": "device HBM bytes/s (0: the target's)"})
    task_overhead_us: float = field(default=-1.0, metadata={"help": "fixed cost of one task (fetch, waits, signal); "
                                                                    "<0: the target's per opcode"})
    handoff_us: float = field(default=-1.0, metadata={"help": "latency of a wait across workers (<0: the target's)"})
    granularity: str = field(
        default="auto",
        metadata={"help": "tile: wait only for the tiles whose bytes a task touches; phase: every task waits for "
                          "the whole previous phase (a grid-wide barrier per op, the baseline); auto: tile up to "
                          "max-tile-words, else phase"},
    )
    max_tile_words: int = field(
        default=1 << 26,
        metadata={"help": "auto: the most tracked words (summed over tasks) whose dependencies tile derives"},
    )
    insertion_max_sessions: int = field(
        default=0,
        metadata={"help": "largest cohort whose tasks may go into a worker's idle stretch ahead of its later "
                          "tasks (HEFT's insertion policy; 0: never); with task-costs, the placement by measured costs "
                          "inserts at any cohort"},
    )
    measured_max_tile_words: int = field(
        default=1 << 30,
        metadata={"help": "auto with task-costs: the most tracked words whose dependencies tile derives (the tile "
                          "schedule pays at larger cohorts once its costs are measured; Silero at 65,536 sessions: "
                          "7.3e8 words, 10 GB and 95 s to schedule)"},
    )
    task_costs: str = field(
        default="",
        metadata={"help": "a timeline file (wavec run --backend cuda --timeline FILE.json) of this program: "
                          "charge each phase's tasks their measured body instead of the model's (\"\": the model; at "
                          "granularity=phase only the modeled figures change)"},
    )

    def _granularity(self, tasks: list[_Task], buffers: dict[str, wpk.BufferOp]) -> tuple[str, str]:
        """The granularity to run and, when auto chose it, why; fills every task's counts (FLOPs, bytes,
        tracked words) unless it is tile, whose dependency sweep fills them itself."""
        if self.granularity == "tile":
            return "tile", ""
        fill = _footprints(buffers, {})  # sizes only, in closed form: no word lists
        for t in tasks:
            fill(t)
        if self.granularity == "phase":
            return "phase", ""
        groups = len({(t.phase, t.sessions) for t in tasks}) + len({t.phase for t in tasks})
        words = sum(t.words for t in tasks)
        if groups >= MAX_COUNTERS:
            return "phase", f"auto: {groups:,} session-range counters, over {MAX_COUNTERS:,}"
        option, limit = (("measured-max-tile-words", self.measured_max_tile_words) if self.task_costs
                         else ("max-tile-words", self.max_tile_words))
        if words > limit:
            return "phase", f"auto: {words:,} tracked words touched, over {option} {limit:,}"
        return "tile", f"auto: {words:,} tracked words touched, within {option} {limit:,}"

    def _rates(self) -> tuple[float, float, float, dict[str, float]]:
        """(FLOP/s, bytes/s) of one SM, the cross-worker handoff in microseconds and each opcode's fixed task
        cost in microseconds."""
        peak, bw, handoff, sms = self.peak_flops, self.hbm_bandwidth, self.handoff_us, 0
        overhead = {op: self.task_overhead_us for op in wpk.OPCODE_NAMES}
        if peak <= 0 or bw <= 0 or handoff < 0 or self.task_overhead_us < 0:
            from wavec.hw import load_hw, task_overhead_us

            try:
                hw = load_hw(self.hw)
            except Exception as e:  # noqa: BLE001
                raise PassFailedException(f"wpk-schedule: {e}") from e
            sms = int(hw["sm_count"])
            peak = peak if peak > 0 else float(hw["peak_flops_per_s"]["fp32"])
            bw = bw if bw > 0 else float(hw["hbm_bandwidth_bytes_per_s"])
            if handoff < 0:
                handoff = float((hw.get("measured") or {}).get("flag_handoff_us", 1.1))
            if self.task_overhead_us < 0:
                overhead = task_overhead_us(hw)
        sms = sms or self.workers
        return peak / sms, bw / sms, handoff, overhead

    @staticmethod
    def _absorb(chosen: list[int], tasks: list[_Task], counters: list[_Counter], anc: list[int],
                closure: dict[int, int], close) -> list[int]:
        """More than MAX_WAITS counters for one task: let a *carrier* (the tasks of a later counter among
        them, with a free wait slot) also wait on an earlier one, so waiting on the carrier implies it.
        The carrier's tasks start no earlier than the absorbed counter's: a small delay of a producer
        instead of a whole-phase wait for the consumer. Returns the counters the task still waits on."""
        chosen = sorted(chosen, key=lambda c: -counters[c].phase)
        while len(chosen) > MAX_WAITS:
            for carrier in chosen:
                members = counters[carrier].tasks
                spare = MAX_WAITS - max(len(tasks[s].waits) for s in members)
                victims = [c for c in chosen if counters[c].phase < counters[carrier].phase]
                if spare > 0 and victims:
                    break
            else:
                return chosen
            victim = victims[-1]
            for s in members:
                tasks[s].waits.append(victim)
                anc[s] = close.shared(anc[s] | close(victim))
            closure.pop(carrier, None)
            chosen.remove(victim)
        return chosen

    def _measured_costs(self, tasks: list[_Task], phase_ops: list[wpk.PhaseOp], sessions: int):
        """The task-costs file's measurements (wavec.analysis.measured_costs.MeasuredCosts), checked against this
        program's cohort, workers and phases before the dependency sweep, which can take minutes."""
        from wavec.analysis.measured_costs import load_measured_costs
        from wavec.errors import WavecError

        counts: dict[str, int] = {}
        for t in tasks:
            name = phase_ops[t.phase].sym_name.data
            counts[name] = counts.get(name, 0) + 1
        try:
            measured = load_measured_costs(self.task_costs)
            measured.check_matches(sessions, self.workers, counts)
        except WavecError as e:
            raise PassFailedException(f"wpk-schedule: {e}") from e
        return measured

    @staticmethod
    def _charge_measured(tasks: list[_Task], phase_ops: list[wpk.PhaseOp], measured) -> dict:
        """Charges every task its phase's measured median body, scaled by its modeled cost within the phase
        (wavec.analysis.measured_costs), plus the measured gap between a worker's tasks; returns both (us) as
        ``{"task_gap_us": gap, "phases": {name: body}}``."""
        from wavec.analysis.measured_costs import charged_us

        names = [ph.sym_name.data for ph in phase_ops]
        phase = np.array([t.phase for t in tasks], np.int64)
        for t, cost in zip(tasks, charged_us([t.cost for t in tasks], phase, names, measured.body_us,
                                             measured.task_gap_us)):
            t.cost = float(cost)
        # A phase of no tasks (a zero-size tensor's) was never traced, so the file has only the others.
        return {"task_gap_us": measured.task_gap_us, "phases": {n: measured.body_us[n] for n in names if n in measured.body_us}}

    def _check_options(self) -> None:
        if self.granularity not in ("tile", "phase", "auto"):
            raise PassFailedException(f"wpk-schedule: granularity must be tile, phase or auto, got {self.granularity!r}")
        for option, value in (("max-tile-words", self.max_tile_words),
                              ("measured-max-tile-words", self.measured_max_tile_words)):
            if value < 0:
                raise PassFailedException(f"wpk-schedule: {option} must be >= 0, got {value}")
        if self.insertion_max_sessions < 0:
            raise PassFailedException(
                f"wpk-schedule: insertion-max-sessions must be >= 0 (0: never), got {self.insertion_max_sessions}")
        if not 1 <= self.workers <= 0x10000:
            raise PassFailedException(f"wpk-schedule: workers must be in [1, 65536] (a payload's worker is a u16), got {self.workers}")
        for option, value, zero in (("peak-flops", self.peak_flops, "the target's"),
                                    ("hbm-bandwidth", self.hbm_bandwidth, "the target's")):
            if value < 0:
                raise PassFailedException(f"wpk-schedule: {option} must be >= 0 (0: {zero}), got {value}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self._check_options()
        phase_ops = phases_of(op)
        if not phase_ops:
            raise PassFailedException("wpk-schedule: the module has no wpk.phase; run wave-to-wpk first")
        buffers = _buffers(op)
        used = {n for ph in phase_ops for t in ph.tasks for n in [*t.input_names, t.output.data]}
        if "wpk.arena_bytes" not in op.attributes or any(buffers[n].offset is None for n in used if n in buffers):
            raise PassFailedException(
                "wpk-schedule: buffers have no arena offsets; run wpk-arena first (dependencies come from the "
                "placed byte footprints)"
            )
        flop_rate, byte_rate, handoff, overhead = self._rates()
        arena_bytes = {k: v.value.data for k, v in op.attributes["wpk.arena_bytes"].data.items()}
        bases, total = {}, 0
        for a in TRACKED_ARENAS:
            bases[a] = total
            total += (arena_bytes.get(a, 0) + ELEM_BYTES - 1) // ELEM_BYTES
        tasks: list[_Task] = []
        phases: list[list[int]] = []
        for p, ph in enumerate(phase_ops):
            first = len(tasks)
            for table in ph.tasks:
                base = len(tasks)
                tasks.extend([_Task(table, tuple(tile), base + k, p) for k, tile in enumerate(table.tiles.tolist())])
            phases.append(list(range(first, len(tasks))))
        costs = self._measured_costs(tasks, phase_ops, wave.cohort_size(op) or 1) if self.task_costs else None
        granularity, why = self._granularity(tasks, buffers)
        if granularity == "tile":
            _dependencies(tasks, phases, total, _footprints(buffers, bases))
        for t in tasks:
            t.cost = overhead[t.op.opcode.data] + max(t.flops / flop_rate, t.nbytes / byte_rate) * 1e6
        model_cost = [t.cost for t in tasks]
        measured = self._charge_measured(tasks, phase_ops, costs) if costs is not None else None

        # ---- groups and their counters
        counters: list[_Counter] = []
        phase_counter: dict[int, int] = {}
        group_counters: list[list[int]] = []  # per phase: its group counter ids
        n_groups = 0  # group ordinals: the bits of _Counter.groups
        for p, members in enumerate(phases):
            by_range: dict[tuple[int, int], list[int]] = {}
            for i in members:  # behind barriers only whole phases are waited on: one group, one counter
                by_range.setdefault(tasks[i].sessions if granularity == "tile" else (0, 0), []).append(i)
            ids = []
            first_group = n_groups
            for rng in sorted(by_range):
                c = len(counters)
                counters.append(_Counter(p, by_range[rng], whole_phase=False, groups=1 << n_groups, ordinal=n_groups))
                n_groups += 1
                for i in by_range[rng]:
                    tasks[i].group = c
                ids.append(c)
            group_counters.append(ids)
            if len(ids) > 1:
                phase_counter[p] = len(counters)
                counters.append(_Counter(p, list(members), whole_phase=True,
                                         groups=((1 << (n_groups - first_group)) - 1) << first_group))
            elif ids:
                phase_counter[p] = ids[0]
        # ---- waits: the fewest counters that cover each task's dependencies (transitively)
        anc = [0] * len(tasks)  # bitset of the groups that happen before the task through its waits
        close = _CounterClosure(counters, anc)
        closure = close.memo
        if granularity == "phase":
            _barrier_waits(tasks, phases, phase_counter)
        for t in tasks:
            if not t.deps:
                continue
            need = _bits({counters[tasks[d].group].ordinal for d in t.deps})
            units = sorted({tasks[d].group for d in t.deps}, key=lambda c: -counters[c].phase)
            chosen = _cover(units, need, counters, close)
            chosen = self._absorb(chosen, tasks, counters, anc, closure, close)
            while len(chosen) > MAX_WAITS:
                per_phase: dict[int, int] = {}
                for c in chosen:
                    if not counters[c].whole_phase and phase_counter[counters[c].phase] != c:
                        per_phase[counters[c].phase] = per_phase.get(counters[c].phase, 0) + 1
                if not per_phase:
                    break
                merge = max(per_phase, key=lambda q: (per_phase[q], q))
                units = [c for c in chosen if counters[c].phase != merge] + [phase_counter[merge]]
                units.sort(key=lambda c: -counters[c].phase)
                chosen = _cover(units, need, counters, close)
                chosen = self._absorb(chosen, tasks, counters, anc, closure, close)
            if len(chosen) > MAX_WAITS:
                names = ", ".join(phase_ops[counters[c].phase].sym_name.data for c in chosen)
                raise PassFailedException(
                    f"wpk-schedule: a task of phase {phase_ops[t.phase].sym_name.data!r} depends on {len(chosen)} "
                    f"phases that do not order each other ({names}); a payload holds {MAX_WAITS} waits"
                )
            t.waits = chosen
            a = 0
            for c in chosen:
                a |= close(c)
            anc[t.index] = close.shared(a)

        if granularity == "phase":
            worker_of, position, finish, busy, critical = _barrier_list_schedule(tasks, phases, self.workers, handoff)
        else:
            insertion = (wave.cohort_size(op) or 1) <= self.insertion_max_sessions
            if measured is None:
                worker_of, position, finish, busy, critical = _list_schedule(
                    tasks, counters, phase_counter, self.workers, handoff, insertion)
            else:
                worker_of, position, finish, busy, critical = _best_measured_schedule(
                    tasks, counters, phase_counter, self.workers, handoff, insertion, model_cost)

        # ---- allocate counter numbers: group counters always (a task must signal), phase ones if waited
        waited = {c for t in tasks for c in t.waits}
        next_counter = BEAT_DONE_COUNTER + 1
        for c, info in enumerate(counters):
            if not info.whole_phase or c in waited:
                info.index = next_counter
                next_counter += 1
        n_waits = phase_waits = 0
        # A wait on every task of a phase whose tasks span more than one session range is grid-wide, whether
        # its counter is a phase counter (tile) or the phase's only group (phase granularity): the report's
        # grid_waits counts the same (wavec.report.wait_counts).
        spans_ranges = [len({tasks[i].sessions for i in members}) > 1 for members in phases]
        grid_wide = [len(info.tasks) == len(phases[info.phase]) and spans_ranges[info.phase] for info in counters]
        pairs, signal, signal_phase = [], [], []
        wait_pair = [(info.index, len(info.tasks)) for info in counters]
        for t in tasks:
            pc = phase_counter[t.phase]
            signal_phase.append(counters[pc].index if pc != t.group and pc in waited else 0)
            signal.append(counters[t.group].index)
            pairs.append([wait_pair[c] for c in t.waits])
            n_waits += len(t.waits)
            phase_waits += sum(1 for c in t.waits if grid_wide[c])
        start = 0
        for table in (table for ph in phase_ops for table in ph.tasks):
            rows = slice(start, start + table.count)
            table.set_schedule(worker_of[rows], position[rows], pairs[rows], signal[rows], signal_phase[rows])
            start = rows.stop
        if next_counter > MAX_COUNTERS:
            raise PassFailedException(
                f"wpk-schedule: {next_counter} counters; signal_phase holds at most {MAX_COUNTERS}: use granularity=phase"
            )
        beat = float(max(finish)) if finish else 0.0
        op.attributes["wpk.granularity"] = StringAttr(granularity)
        if why:
            op.attributes["wpk.granularity_why"] = StringAttr(why)
        op.attributes["wpk.workers"] = IntegerAttr(self.workers, i64)
        op.attributes["wpk.counters"] = IntegerAttr(next_counter, i64)
        op.attributes["wpk.beat_us"] = FloatAttr(round(beat, 3), f64)
        # The costs it charged, for the modeled timeline to replay the same model (wavec.analysis.timeline).
        op.attributes["wpk.task_us"] = DictionaryAttr({k: FloatAttr(v, f64) for k, v in sorted(overhead.items())})
        op.attributes["wpk.handoff_us"] = FloatAttr(handoff, f64)
        if measured is not None:
            op.attributes["wpk.measured_us"] = DictionaryAttr({
                "task_gap_us": FloatAttr(measured["task_gap_us"], f64),
                "phases": DictionaryAttr({k: FloatAttr(v, f64) for k, v in measured["phases"].items()})})
        op.attributes["wpk.critical_path_us"] = FloatAttr(round(critical, 3), f64)
        op.attributes["wpk.worker_load_us"] = ArrayAttr(
            [FloatAttr(round(float(v), 3), f64) for v in (busy.min(), busy.mean(), busy.max())]
        )
        op.attributes["wpk.waits"] = IntegerAttr(n_waits, i64)
        op.attributes["wpk.phase_waits"] = IntegerAttr(phase_waits, i64)


def _list_schedule(tasks: list[_Task], counters: list[_Counter], phase_counter: dict[int, int], workers: int,
                   handoff: float, insertion: bool):
    """granularity=tile: ready tasks by critical-path priority onto the worker where they start earliest
    (the module docstring), then the waits the worker order implies dropped. Returns (worker_of, position,
    finish, busy, critical path)."""
    # ---- critical-path priority (bottom level) over the wait graph
    waiters: dict[int, list[int]] = {}
    for t in tasks:
        for c in t.waits:
            waiters.setdefault(c, []).append(t.index)
    signals_of = [[t.group] + ([phase_counter[t.phase]] if phase_counter[t.phase] != t.group else []) for t in tasks]
    bottom = [0.0] * len(tasks)  # priority: cost to the end of the beat, handoffs included
    chain = [0.0] * len(tasks)  # the same without handoffs: the dependency chain's work
    counter_bottom: dict[int, tuple[float, float]] = {}
    for t in reversed(tasks):
        tail = tail_chain = 0.0
        for c in signals_of[t.index]:
            if c in waiters:
                if c not in counter_bottom:
                    counter_bottom[c] = (handoff + max(bottom[w] for w in waiters[c]),
                                         max(chain[w] for w in waiters[c]))
                tail = max(tail, counter_bottom[c][0])
                tail_chain = max(tail_chain, counter_bottom[c][1])
        bottom[t.index] = t.cost + tail
        chain[t.index] = t.cost + tail_chain
    critical = max(chain) if chain else 0.0

    # ---- list scheduling
    remaining = {c: len(counters[c].tasks) for c in waiters}
    counter_done: dict[int, float] = {}
    counter_worker: dict[int, int] = {}  # the one worker all of a counter's signallers ran on, or -1
    blocked = [len(t.waits) for t in tasks]
    ready = [(-bottom[t.index], t.index) for t in tasks if not t.waits]
    heapq.heapify(ready)
    free = np.zeros(workers)
    busy = np.zeros(workers)
    start_of = [0.0] * len(tasks)
    finish = [0.0] * len(tasks)
    worker_of = [0] * len(tasks)
    lists: list[list[int]] = [[] for _ in range(workers)]
    gaps = _Gaps(min((t.cost for t in tasks), default=0.0) if insertion else float("inf"))
    while ready:
        _, i = heapq.heappop(ready)
        t = tasks[i]
        at = np.zeros(workers)
        for c in t.waits:  # a wait on tasks of another worker costs a handoff, on its own worker not
            v = np.full(workers, counter_done[c] + handoff)
            if counter_worker[c] >= 0:
                v[counter_worker[c]] = counter_done[c]
            at = np.maximum(at, v)
        start = np.maximum(free, at)
        best = float(start.min())
        fits = np.flatnonzero(start == best)
        w = int(fits[np.argmax(free[fits])])  # among the earliest, the one idle the least
        gap = gaps.earliest(at, t.cost, best)
        if gap is not None:  # an idle stretch before a worker's later tasks fits it
            w, best = gap
            lists[w].insert(gaps.take(w, best, t.cost, start_of, lists[w]), i)
        else:
            if best > free[w]:
                gaps.add(w, float(free[w]), best)
            free[w] = best + t.cost
            lists[w].append(i)
        start_of[i] = best
        finish[i] = best + t.cost
        busy[w] += t.cost
        worker_of[i] = w
        for c in signals_of[i]:
            if c not in remaining:
                continue
            counter_done[c] = max(counter_done.get(c, 0.0), finish[i])
            counter_worker[c] = w if counter_worker.get(c, w) == w else -1
            remaining[c] -= 1
            if remaining[c] == 0:
                for j in waiters[c]:
                    blocked[j] -= 1
                    if blocked[j] == 0:
                        heapq.heappush(ready, (-bottom[j], j))
    if sum(map(len, lists)) != len(tasks):  # cannot happen: every wait points at an earlier phase
        raise PassFailedException("wpk-schedule: internal error: the dependency graph has a cycle")

    # ---- drop waits the worker order already implies, in start order: a task's producers finish before it
    # starts and its worker's earlier tasks start before it, so every task comes after all it follows
    sequence = sorted(range(len(tasks)), key=lambda i: (start_of[i], finish[i]))
    position = [0] * len(tasks)
    for w, rows in enumerate(lists):
        for k, i in enumerate(rows):
            position[i] = k
    _drop_implied_waits(tasks, counters, sequence, lists, worker_of, position, workers)
    return worker_of, position, finish, busy, critical


def _best_measured_schedule(tasks: list[_Task], counters: list[_Counter], phase_counter: dict[int, int],
                            workers: int, handoff: float, model_insertion: bool, model_cost: list[float]):
    """With measured costs (``t.cost``): two list schedules, one placing the tasks by the measured costs (with
    the insertion policy: the idle stretches it fills are measured ones) and one by the model's (as without
    them), each replayed under the measured costs (`_replay`); the one that ends sooner. List scheduling is a
    heuristic: under the measured costs the model's placement can end sooner (Silero at 64 sessions: 72.6
    against 76.6 us, bench/RESULTS.md twenty-first run). Returns what `_list_schedule` does, the finishes and
    loads replayed, the critical path the measured costs'."""
    measured_cost = [t.cost for t in tasks]
    waits = [list(t.waits) for t in tasks]
    best, critical = None, None
    for placing, insertion in ((measured_cost, True), (model_cost, model_insertion)):
        for t, cost, w in zip(tasks, placing, waits):
            t.cost, t.waits = cost, list(w)
        worker_of, position, _, _, path = _list_schedule(tasks, counters, phase_counter, workers, handoff, insertion)
        critical = path if critical is None else critical
        for t, cost in zip(tasks, measured_cost):
            t.cost = cost
        finish = _replay(tasks, counters, worker_of, position, workers, handoff)
        if best is None or max(finish, default=0.0) < max(best[2], default=0.0):
            best = (worker_of, position, finish, [t.waits for t in tasks])
    worker_of, position, finish, kept = best
    for t, w in zip(tasks, kept):
        t.waits = w
    busy = np.bincount(np.asarray(worker_of, np.int64), weights=measured_cost, minlength=workers)
    return worker_of, position, finish, busy, critical


def _replay(tasks: list[_Task], counters: list[_Counter], worker_of: list[int], position: list[int], workers: int,
            handoff: float) -> list[float]:
    """Each task's finish (us) when every worker runs its tasks in position order, each once its worker is free
    and the tasks of the counters it waits on have finished, plus a handoff where one of them ran on another
    worker: the beat the payloads encode, as wavec.analysis.timeline's model_timeline replays it."""
    lists: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(tasks)), key=lambda i: position[i]):
        lists[worker_of[i]].append(i)
    waited = {c for t in tasks for c in t.waits}
    left = {c: len(counters[c].tasks) for c in waited}
    member_of: dict[int, list[int]] = {}
    for c in waited:
        for i in counters[c].tasks:
            member_of.setdefault(i, []).append(c)
    done_at: dict[int, float] = {}
    finish = [0.0] * len(tasks)
    cursor, free = [0] * workers, [0.0] * workers
    progress = True
    while progress:
        progress = False
        for w, rows in enumerate(lists):
            while cursor[w] < len(rows):
                i = rows[cursor[w]]
                if any(left[c] for c in tasks[i].waits):
                    break
                start = free[w]
                for c in tasks[i].waits:
                    remote = any(worker_of[s] != w for s in counters[c].tasks)
                    start = max(start, done_at[c] + (handoff if remote else 0.0))
                finish[i] = free[w] = start + tasks[i].cost
                for c in member_of.get(i, ()):
                    left[c] -= 1
                    done_at[c] = max(done_at.get(c, 0.0), finish[i])
                cursor[w] += 1
                progress = True
    if any(cursor[w] < len(rows) for w, rows in enumerate(lists)):  # cannot happen: waits point at earlier starts
        raise PassFailedException("wpk-schedule: internal error: the schedule's waits never resolve")
    return finish


class _Gaps:
    """The idle stretches a list schedule leaves on its workers (a task placed later than its worker's last
    one finished), for the insertion policy of HEFT (Topcuoglu, Hariri and Wu, IEEE TPDS 13(3), 2002): a
    task that fits one, after its inputs are ready, goes there, ahead of that worker's later tasks, instead
    of after them. Without it a task of low priority whose inputs are ready at the beat's start (a session's
    state reset) went behind the whole convolution chain of the worker it landed on, and the LSTM matmul that
    reads it waited there. Stretches shorter than the cheapest task are never kept (none at all when
    ``shortest`` is infinite: the policy off).

    It trusts the cost model: a task whose real cost exceeds its stretch delays the worker's later tasks.
    Silero's beat p50 (H200, the same run, bench/RESULTS.md seventeenth run), without against with: 92.1 against
    89.7 us at 64 sessions (82.7 with wave-hoist), but 161.6 against 174.7 at 256, where the model charges the
    LSTM's matmul tiles ~6 us and they take ~23; so wpk-schedule's `insertion-max-sessions` (64 in the default
    pipeline) bounds the cohorts it runs for."""

    def __init__(self, shortest: float):
        self.shortest = shortest
        self.worker = np.zeros(0, np.int64)
        self.begin = np.zeros(0)
        self.end = np.zeros(0)

    def add(self, w: int, begin: float, end: float) -> None:
        if end - begin >= self.shortest and end > begin:
            self.worker = np.append(self.worker, w)
            self.begin = np.append(self.begin, begin)
            self.end = np.append(self.end, end)

    def earliest(self, ready: np.ndarray, cost: float, before: float) -> tuple[int, float] | None:
        """(worker, start) of the earliest stretch that holds ``cost`` after ``ready[worker]`` and starts
        strictly before ``before`` (the best start at a worker's end), or None."""
        if not len(self.worker):
            return None
        start = np.maximum(self.begin, ready[self.worker])
        # start < end: a task of no cost at a stretch's very end would land after the task that ends it
        ok = np.flatnonzero((start + cost <= self.end) & (start < self.end) & (start < before))
        if not len(ok):
            return None
        k = ok[np.argmin(start[ok])]
        return int(self.worker[k]), float(start[k])

    def take(self, w: int, start: float, cost: float, start_of: list[float], tasks_of_w: list[int]) -> int:
        """Fills [start, start + cost) of worker w's stretch that holds it, keeping what is left on either side;
        returns the list position the task takes (before w's first task that starts later)."""
        k = int(np.flatnonzero((self.worker == w) & (self.begin <= start) & (start + cost <= self.end))[0])
        begin, end = float(self.begin[k]), float(self.end[k])
        keep = np.arange(len(self.worker)) != k
        self.worker, self.begin, self.end = self.worker[keep], self.begin[keep], self.end[keep]
        self.add(w, begin, start)
        self.add(w, start + cost, end)
        return next((n for n, j in enumerate(tasks_of_w) if start_of[j] > start), len(tasks_of_w))


def _barrier_list_schedule(tasks: list[_Task], phases: list[list[int]], workers: int, handoff: float):
    """granularity=phase: a phase starts when the previous one has finished, plus a handoff (none on the
    worker that ran all of it); its tasks go longest first to the worker free earliest (LPT), so no
    priorities over a wait graph are needed. A task whose worker ran the whole previous phase before it
    drops its wait (worker order implies it). Returns (worker_of, position, finish, busy, critical path)."""
    n = len(tasks)
    worker_of, position, finish = [0] * n, [0] * n, [0.0] * n
    busy, length = np.zeros(workers), [0] * workers
    done = critical = 0.0
    alone, first = -1, True  # the worker that ran the whole previous phase (-1: several)
    for members in phases:
        if not members:
            continue
        ready = [(done + (0.0 if first or w == alone else handoff), w) for w in range(workers)]
        heapq.heapify(ready)
        used = set()
        for i in sorted(members, key=lambda i: -tasks[i].cost):
            at, w = heapq.heappop(ready)
            finish[i] = at + tasks[i].cost
            worker_of[i], position[i] = w, length[w]
            length[w] += 1
            busy[w] += tasks[i].cost
            used.add(w)
            heapq.heappush(ready, (finish[i], w))
            if w == alone:
                tasks[i].waits = []
        done = max(finish[i] for i in members)
        critical += max(tasks[i].cost for i in members)
        alone, first = (next(iter(used)) if len(used) == 1 else -1), False
    return worker_of, position, finish, busy, critical


def _drop_implied_waits(tasks: list[_Task], counters: list[_Counter], sequence: list[int], lists: list[list[int]],
                        worker_of: list[int], position: list[int], workers: int) -> None:
    """Drops the waits of each task (in schedule order) whose every signaller is already ordered before
    it by its worker's earlier task and its other waits.

    Ordering is tracked with vector clocks: ``clock[i, w]`` is the last position on worker w's list that
    happens before task i or is i (-1: none). The set of tasks before i is closed under worker order, so
    it is one prefix of every worker's list and the clock is exact; a counter's signallers are all before
    i iff, on every worker, the last of them sits at or below i's clock entry. n x workers int32."""
    clock = np.full((len(tasks), workers), -1, np.int32)  # inclusive: a task's own entry is its position
    none = np.full(workers, -1, np.int32)
    closed: dict[int, np.ndarray] = {}  # counter -> the max of its signallers' clocks
    last: dict[int, np.ndarray] = {}  # counter -> per worker, the last position of a signaller

    def close(c: int) -> np.ndarray:
        hit = closed.get(c)
        if hit is None:
            hit = closed[c] = clock[counters[c].tasks].max(axis=0)
        return hit

    def signallers(c: int) -> np.ndarray:
        hit = last.get(c)
        if hit is None:
            hit = none.copy()
            np.maximum.at(hit, np.asarray([worker_of[s] for s in counters[c].tasks]),
                          np.asarray([position[s] for s in counters[c].tasks], np.int32))
            last[c] = hit
        return hit

    for i in sequence:
        t = tasks[i]
        k = position[i]
        base = clock[lists[worker_of[i]][k - 1]] if k else none
        kept = list(t.waits)
        for c in list(kept):
            others = base
            for d in kept:
                if d != c:
                    others = np.maximum(others, close(d))
            # Only a wait whose every signaller is already ordered before the task goes: that keeps the
            # happens-before closure the wait selection relied on (dropping one that only covers the
            # task's own dependencies could break a later task's transitive cover).
            if (signallers(c) <= others).all():
                kept.remove(c)
        t.waits = kept
        row = clock[i]
        row[:] = base
        for c in kept:
            np.maximum(row, close(c), out=row)
        row[worker_of[i]] = k


def _cover(units: list[int], need: int, counters: list[_Counter], close) -> list[int]:
    """Greedy: the units (latest phase first) whose groups are needed and not already implied by the
    closure of the units taken so far; then drop any taken unit the others imply. ``need`` and the
    closures are bitsets over group ordinals (see _CounterClosure)."""
    chosen, covered = [], 0
    for c in units:
        if need & counters[c].groups & ~covered:
            chosen.append(c)
            covered |= close(c)
    for c in list(chosen):
        others = 0
        for d in chosen:
            if d != c:
                others |= close(d)
        if need & counters[c].groups & ~others == 0:
            chosen.remove(c)
    return chosen
