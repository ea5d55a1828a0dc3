"""Where a beat's time went on the GPU, from the persistent kernel's per-task trace (numpy only).

A `CudaSession` opened with ``trace=True`` records, per payload row and beat, three %globaltimer stamps
(nanoseconds): when the task's worker began waiting for its inputs, when its body began, and when the body
ended (`CudaSession.read_trace`). From them:

- `beat_summary`: one beat's span (first wait to last body end, us), the workers' time in bodies (``busy_us``)
  and waiting on counters (``wait_us``), both summed over tasks, and ``wait_share``: waiting over the
  workers' whole time (workers x span);
- `phase_rows`: per phase, its span, its longest body and its tasks' summed wait (us);
- `Timeline.phase_costs`: per phase, the median of its tasks' median body over the traced beats, and the
  median gap between a worker's body end and its next task's wait (us): what wpk-schedule's ``task-costs``
  option charges (wavec.analysis.measured_costs).

`wavec run --backend cuda --timeline FILE.json` writes them for the beats it runs.
"""

from __future__ import annotations

import numpy as np

from wavec.analysis.timeline import phase_of_rows


def beat_summary(profile, trace: np.ndarray) -> dict:
    """One beat's totals from its trace (uint64 ``[payload rows, 3]``, ns): ``span_us``, ``busy_us``,
    ``wait_us`` (sums over tasks), ``wait_share`` (wait_us / (workers x span_us)) and ``workers``."""
    t = trace.astype(np.int64)
    span = (int(t[:, 2].max()) - int(t[:, 0].min())) / 1e3
    busy = float((t[:, 2] - t[:, 1]).sum()) / 1e3
    wait = float((t[:, 1] - t[:, 0]).sum()) / 1e3
    workers = int(profile.meta["workers"])
    return {"span_us": round(span, 2), "busy_us": round(busy, 2), "wait_us": round(wait, 2),
            "wait_share": round(wait / (workers * span), 4) if span > 0 else 0.0, "workers": workers}


def phase_rows(profile, trace: np.ndarray) -> list[dict]:
    """Per phase of one traced beat: ``start_us`` (its first body, from the beat's first wait), ``span_us``
    (first body start to last body end), ``body_max_us`` and ``body_p50_us`` (its longest and median task
    body) and ``wait_us`` (summed over its tasks)."""
    phase = phase_of_rows(profile)
    t = trace.astype(np.int64)
    t0 = int(t[:, 0].min())
    rows = []
    for index, info in enumerate(profile.meta["phases"]):
        mine = t[phase == index]
        if not len(mine):
            continue
        rows.append({
            "phase": info["name"], "tasks": int(len(mine)),
            "start_us": (int(mine[:, 1].min()) - t0) / 1e3,
            "span_us": (int(mine[:, 2].max()) - int(mine[:, 1].min())) / 1e3,
            "body_max_us": float((mine[:, 2] - mine[:, 1]).max()) / 1e3,
            "body_p50_us": float(np.median(mine[:, 2] - mine[:, 1])) / 1e3,
            "wait_us": float((mine[:, 1] - mine[:, 0]).sum()) / 1e3,
        })
    return rows


def task_gaps_us(profile, trace: np.ndarray) -> np.ndarray:
    """Per pair of consecutive tasks on a worker, from the first's body end to the second's wait (us): its
    signal and the next payload's fetch, which a body's stamps leave out."""
    t = trace.astype(np.int64)
    gaps = [t[b + 1:e, 0] - t[b:e - 1, 2] for b, e in profile.meta["worker_tasks"] if e - b > 1]
    return np.concatenate(gaps) / 1e3 if gaps else np.zeros(0)


class Timeline:
    """Collects, beat after beat, each traced beat's `beat_summary` (``beats``), the last one's `phase_rows`
    (``phases``) and what `phase_costs` aggregates; `run_beats` fills it when given as its ``timeline``
    option."""

    def __init__(self):
        self.beats: list[dict] = []
        self.phases: list[dict] = []
        self._bodies: dict[str, list[float]] = {}
        self._tasks: dict[str, int] = {}
        self._gaps: list[float] = []
        self._of: dict = {}

    def add(self, profile, trace: np.ndarray) -> None:
        self.beats.append({"beat": len(self.beats), **beat_summary(profile, trace)})
        self.phases = phase_rows(profile, trace)
        self._of = {"model": profile.meta["model"], "sessions": profile.sessions,
                    "workers": int(profile.meta["workers"])}
        for r in self.phases:
            self._bodies.setdefault(r["phase"], []).append(r["body_p50_us"])
            self._tasks[r["phase"]] = r["tasks"]
        gaps = task_gaps_us(profile, trace)
        if len(gaps):
            self._gaps.append(float(np.median(gaps)))

    def phase_costs(self) -> dict | None:
        """What the traced beats measured, for wpk-schedule's ``task-costs`` (wavec.analysis.measured_costs):
        the profile's model, sessions and workers, ``beats``, ``task_gap_us`` (the median over beats of the
        median gap between a worker's tasks) and per phase its ``tasks`` and ``body_p50_us`` (the median over
        beats of its tasks' median body), in microseconds; None before the first beat."""
        if not self.beats:
            return None
        return {**self._of, "beats": len(self.beats),
                "task_gap_us": round(float(np.median(self._gaps)), 3) if self._gaps else 0.0,
                "phases": {name: {"tasks": self._tasks[name], "body_p50_us": round(float(np.median(v)), 3)}
                           for name, v in self._bodies.items()}}

    def to_json(self) -> dict:
        return {"beats": self.beats, "last_beat_phases": self.phases, "phase_costs": self.phase_costs()}


def format_summary(beats: list[dict]) -> str:
    """One line over the traced beats: beat span and waiting, p50 and max."""
    span = np.array([b["span_us"] for b in beats])
    wait = np.array([b["wait_us"] for b in beats])
    share = np.array([b["wait_share"] for b in beats])
    return (f"{len(beats)} traced beats: span p50 {np.percentile(span, 50):.1f} us (max {span.max():.1f}); "
            f"workers waited p50 {np.percentile(wait, 50):.1f} us a beat, summed over tasks "
            f"({100 * np.percentile(share, 50):.1f}% of the workers' time)")


def format_phases(rows: list[dict], top: int = 8) -> str:
    """The ``top`` phases of the longest span, one line each."""
    lines = []
    for r in sorted(rows, key=lambda r: -r["span_us"])[:top]:
        lines.append(f"  {r['phase']:<24} tasks {r['tasks']:>6}  span {r['span_us']:>9.1f} us  "
                     f"longest body {r['body_max_us']:>8.1f} us  waited {r['wait_us']:>9.1f} us")
    return "\n".join(lines)
