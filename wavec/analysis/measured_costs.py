"""Measured task costs: what each phase's tasks took on the GPU, for the static schedule to place them by.

wpk-schedule's cost model (``overhead + max(FLOPs / per-SM peak, bytes / per-SM bandwidth)``) is a floor, not
a forecast: on the H200 Silero's STFT tiles at 1,024 sessions take 34.9 us where it charges 15.8, its LSTM
matmul tiles 14.5 where it charges 7.3 (bench/RESULTS.md twenty-first run). A list schedule built on those
costs puts a task of low priority whose inputs are ready early (the LSTM's recurrent matmul, which reads only
the state) behind the whole convolution chain, and its insertion policy cannot be trusted with gaps the model
mismeasures. This module reads what a traced run measured, per phase, so the schedule can charge that
instead: profile-guided scheduling, as TVM's MetaSchedule and Ansor tune by measured records rather than a
model alone.

The measurements come from the file ``wavec run --backend cuda --timeline FILE.json`` writes: its
``phase_costs`` entry (`targets.cuda.timeline.Timeline.phase_costs`) holds the model, the cohort, the
workers, the median gap between a worker's tasks (its signal and next fetch, which the bodies' stamps leave
out) and, per phase, its task count and the median of its tasks' bodies over the traced beats (us).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wavec.errors import WavecError


@dataclass(frozen=True)
class MeasuredCosts:
    """Per phase name, the median body of its tasks (us), for a cohort of ``sessions`` on ``workers``; and
    ``task_gap_us``, what a task costs its worker beside its body (us)."""

    model: str
    sessions: int
    workers: int
    body_us: dict[str, float]
    tasks: dict[str, int]
    task_gap_us: float
    source: str

    def check_matches(self, sessions: int, workers: int, phases: dict[str, int]) -> None:
        """Raises WavecError unless these costs were measured for this cohort, these workers and exactly these
        phases (name -> task count): tiles, and so costs, change with each."""
        where = f"task costs {self.source}"
        if (self.sessions, self.workers) != (sessions, workers):
            raise WavecError(f"{where}: measured for a cohort of {self.sessions} on {self.workers} workers, but the "
                             f"program is for a cohort of {sessions} on {workers}; trace a profile of this cohort "
                             f"(wavec run --backend cuda --timeline FILE.json)")
        for name, count in phases.items():
            if name not in self.tasks:
                raise WavecError(f"{where}: no measurement of phase {name!r}; the file was traced from another "
                                 f"program (model {self.model!r}); trace this one")
            if self.tasks[name] != count:
                raise WavecError(f"{where}: phase {name!r} had {self.tasks[name]} tasks when traced, the program "
                                 f"has {count}; trace a profile compiled by this pipeline")
        extra = sorted(set(self.tasks) - set(phases))
        if extra:
            raise WavecError(f"{where}: phases {', '.join(map(repr, extra[:3]))} are not in the program; the file "
                             f"was traced from another program (model {self.model!r})")


MAX_BODY_US = 1e9  # a thousand seconds: past any beat; a larger value is no measurement


class _BadValue(ValueError):
    pass


def _whole(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _BadValue(f"{what} is {value!r}; it must be a whole number >= 0")
    return value


def _microseconds(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_BODY_US:
        raise _BadValue(f"{what} is {value!r} us; it must be a number of microseconds from 0 to {MAX_BODY_US:g}")
    return float(value)


def load_measured_costs(path: str | Path) -> MeasuredCosts:
    """The ``phase_costs`` of a timeline file (`wavec run --backend cuda --timeline`). Raises WavecError naming
    the file when it cannot be read or holds no valid ``phase_costs``."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise WavecError(f"task costs {path}: cannot read it ({e.strerror or e})") from e
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise WavecError(f"task costs {path}: not JSON ({e}); give the file `wavec run --backend cuda "
                         f"--timeline FILE.json` writes") from e
    costs = doc.get("phase_costs") if isinstance(doc, dict) else None
    if not isinstance(costs, dict):
        raise WavecError(f"task costs {path}: no 'phase_costs' entry; give the file `wavec run --backend cuda "
                         f"--timeline FILE.json` writes (of at least one traced beat)")
    try:
        phases = costs["phases"]
        body = {str(k): _microseconds(v["body_p50_us"], f"phase {k!r}'s body_p50_us") for k, v in phases.items()}
        tasks = {str(k): _whole(v["tasks"], f"phase {k!r}'s tasks") for k, v in phases.items()}
        gap = _microseconds(costs.get("task_gap_us", 0.0), "task_gap_us")
        measured = MeasuredCosts(str(costs["model"]), _whole(costs["sessions"], "sessions"),
                                 _whole(costs["workers"], "workers"), body, tasks, gap, str(path))
    except _BadValue as e:
        raise WavecError(f"task costs {path}: {e}") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise WavecError(f"task costs {path}: 'phase_costs' is malformed ({type(e).__name__}: {e}); it needs "
                         f"model, sessions, workers and phases {{name: {{tasks, body_p50_us}}}}") from e
    return measured


def scaled_to_measured(modeled: np.ndarray, phase: np.ndarray, body_us: np.ndarray) -> np.ndarray:
    """Each task's cost (us) when its phase's median task costs what was measured: ``modeled`` (per task) scaled
    by ``body_us[phase] / median(modeled over the phase)``, so a phase's smaller tiles (a remainder of
    sessions) stay cheaper in proportion. ``phase``: per task, an index into ``body_us``."""
    modeled = np.asarray(modeled, np.float64)
    out = np.empty_like(modeled)
    for p in np.unique(phase):
        mine = phase == p
        median = float(np.median(modeled[mine]))
        out[mine] = body_us[p] * (modeled[mine] / median if median > 0 else 1.0)
    return out


def charged_us(modeled, phase: np.ndarray, names: list[str], body_us: dict[str, float], gap_us: float) -> np.ndarray:
    """What a task is charged under measured costs (us), as wpk-schedule charges it and the modeled timeline
    replays it: `scaled_to_measured` to its phase's measured body (``body_us`` by phase name, ``names`` the
    phases in order, ``phase`` per task an index into them) plus the gap between a worker's tasks."""
    return scaled_to_measured(modeled, phase, np.array([body_us.get(n, 0.0) for n in names])) + gap_us
