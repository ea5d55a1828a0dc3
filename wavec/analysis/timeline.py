"""The modeled timeline of one beat, from a profile alone: when each task starts and ends on its worker.

It replays the schedule the payloads encode (each worker's task order, each task's counter waits) with
the cost model wpk-schedule uses: a task costs ``overhead_us + max(FLOPs / per-SM peak, bytes / per-SM
bandwidth)`` (wavec/analysis/cost.py counts; the per-SM rates are the target's peak over its SM count; the
overhead the task's opcode's; costs and handoff as wpk-schedule recorded them in profile.json's
``schedule``, else the target's, wavec.hw.task_overhead_us; where wpk-schedule charged measured bodies,
``schedule.measured_us``, each phase's tasks scaled to them as it did, wavec.analysis.measured_costs)
and a wait on tasks of another worker adds the cross-SM handoff (ARCHITECTURE.md's measured 1.1 us).
`gantt_png` draws it, workers by time, colored by phase (matplotlib).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.analysis.cost import flops_per_element
from wavec.analysis.measured_costs import charged_us
from wavec.hw import task_overhead_us
from wavec.opcodes import OUT, Opcode, footprint, unpack_params
from wavec.profile import Profile

@dataclass
class Timeline:
    start_us: np.ndarray  # per payload row
    end_us: np.ndarray
    worker: np.ndarray
    phase: np.ndarray  # index into profile.meta["phases"]

    @property
    def beat_us(self) -> float:
        return float(self.end_us.max()) if len(self.end_us) else 0.0


def task_cost_us(rec, params, flop_rate: float, byte_rate: float, overhead_us: float,
                 touched_cache: dict | None = None) -> float:
    """A task's modeled time on one SM (rates per SM, in FLOP/s and bytes/s)."""
    sessions = int(rec["session_end"]) - int(rec["session_begin"])
    begin, end, n_in = int(rec["elem_begin"]), int(rec["elem_end"]), int(rec["n_inputs"])
    flops = sessions * (end - begin) * flops_per_element(params)
    nbytes = 0
    cache = {} if touched_cache is None else touched_cache
    for k in [*range(n_in), OUT]:
        key = (int(rec["params"]), k, begin, end)
        if key not in cache:
            cache[key] = len(np.unique(footprint(params, k, begin, end, n_in)))
        nbytes += 4 * cache[key] * (sessions if int(rec["session_stride"][k]) else 1)
    return overhead_us + max(flops / flop_rate, nbytes / byte_rate) * 1e6


def phase_of_rows(profile: Profile) -> np.ndarray:
    counts = [p["tasks"] for p in profile.meta["phases"]]
    return np.repeat(np.arange(len(counts)), counts)[profile.payloads["task"]]


def model_timeline(profile: Profile, hw: dict) -> Timeline:
    """Replays one beat. Raises ValueError if the payloads cannot all run (a wait nobody satisfies)."""
    records = profile.payloads
    workers = int(profile.meta["workers"])
    sms = int(hw["sm_count"])
    flop_rate = float(hw["peak_flops_per_s"]["fp32"]) / sms
    byte_rate = float(hw["hbm_bandwidth_bytes_per_s"]) / sms
    charged = profile.meta.get("schedule") or {}  # what wpk-schedule charged, else the target's defaults
    handoff = float(charged.get("handoff_us", (hw.get("measured") or {}).get("flag_handoff_us", 1.1)))
    overhead = {**task_overhead_us(hw), **charged.get("task_us", {})}
    touched: dict = {}
    cost = np.array([task_cost_us(r, unpack_params(profile.params, int(r["params"])), flop_rate, byte_rate,
                                  overhead[Opcode(int(r["opcode"])).name.lower()], touched) for r in records])
    measured = charged.get("measured_us")
    if measured:
        names = [p["name"] for p in profile.meta["phases"]]
        cost = charged_us(cost, phase_of_rows(profile), names, measured["phases"], measured["task_gap_us"])
    worker = np.empty(len(records), np.int64)
    for w, (b, e) in enumerate(profile.meta["worker_tasks"]):
        worker[b:e] = w
    signallers: dict[int, list[int]] = {}
    for row, r in enumerate(records):
        for c in {int(r["signal"]), int(r["signal_phase"])} - {0}:
            signallers.setdefault(c, []).append(row)
    start, end = np.zeros(len(records)), np.full(len(records), np.nan)
    cursor = [b for b, _ in profile.meta["worker_tasks"]]
    free = np.zeros(workers)
    progress = True
    while progress:
        progress = False
        for w, (_, stop) in enumerate(profile.meta["worker_tasks"]):
            while cursor[w] < stop:
                row = cursor[w]
                r = records[row]
                ready = free[w]
                for i in range(int(r["n_waits"])):
                    rows = signallers.get(int(r["wait_counter"][i]), [])
                    if np.isnan(end[rows]).any():
                        break
                    remote = any(worker[s] != w for s in rows)
                    ready = max(ready, float(end[rows].max(initial=0.0)) + (handoff if remote else 0.0))
                else:
                    start[row], end[row] = ready, ready + cost[row]
                    free[w] = end[row]
                    cursor[w] += 1
                    progress = True
                    continue
                break
    if np.isnan(end).any():
        raise ValueError(f"{int(np.isnan(end).sum())} tasks never become ready: a wait nobody satisfies")
    return Timeline(start, end, worker, phase_of_rows(profile))


def gantt_png(profile: Profile, timeline: Timeline, path) -> None:
    """Workers (rows) by modeled time (us), one bar per task, colored by phase. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = profile.meta["phases"]
    colors = plt.get_cmap("tab20")(np.arange(len(phases)) % 20)
    workers = int(profile.meta["workers"])
    fig, ax = plt.subplots(figsize=(12, max(3.0, workers * 0.04 + 1.5)))
    for p in range(len(phases)):
        rows = np.flatnonzero(timeline.phase == p)
        if len(rows):
            ax.barh(timeline.worker[rows], timeline.end_us[rows] - timeline.start_us[rows], left=timeline.start_us[rows],
                    height=0.8, color=colors[p], label=phases[p]["name"] if len(phases) <= 40 else None)
    ax.set_xlabel("modeled time in the beat (us)")
    ax.set_ylabel("worker (SM)")
    ax.set_ylim(-1, workers)
    ax.invert_yaxis()
    ax.set_title(f"{profile.meta['model']}: {profile.sessions} sessions, {len(profile.payloads)} tasks, "
                 f"modeled beat {timeline.beat_us:.1f} us")
    if len(phases) <= 40:
        ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
