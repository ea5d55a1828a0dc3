"""`wpk-schedule`: place every task on a worker and order the phases with counters.

The simplest correct schedule: phases run in program order; phase p signals counter p + 1 and every task
of phase p + 1 waits for all of phase p's tasks (target = tasks of p per beat, so counters never need a
reset). That is a grid-wide barrier per phase; tile-level dependencies come with the cost-model
scheduler. Tasks are dealt to workers round robin, continuing where the previous phase stopped, so
consecutive small phases land on different SMs. A worker runs its tasks in phase order, so every wait is
on an earlier phase and the program cannot deadlock. Counter 0 is the end-of-beat counter. A phase
without tasks (an empty tensor) is skipped: the next phase waits on the last phase that has tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wpk
from wavec.payload import BEAT_DONE_COUNTER


def phases_of(module: ModuleOp) -> list[wpk.PhaseOp]:
    return [op for op in module.ops if isinstance(op, wpk.PhaseOp)]


@dataclass(frozen=True)
class WpkSchedule(ModulePass):
    """Assigns tasks to workers round robin; each phase waits for the whole previous phase."""

    name = "wpk-schedule"
    workers: int = field(default=132, metadata={"help": "persistent blocks, one per SM"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.workers < 1:
            raise PassFailedException(f"wpk-schedule: workers must be >= 1, got {self.workers}")
        phases = phases_of(op)
        if not phases:
            raise PassFailedException("wpk-schedule: the module has no wpk.phase; run wave-to-wpk first")
        next_worker, per_worker = 0, [0] * self.workers
        previous: tuple[int, int] | None = None
        for index, phase in enumerate(phases):
            if not phase.tasks:  # an empty tensor's phase: waiting on it would order nothing
                continue
            signal = index + 1 + BEAT_DONE_COUNTER
            for task in phase.tasks:
                worker = next_worker % self.workers
                next_worker += 1
                task.set_schedule(worker, per_worker[worker], [previous] if previous else [], signal)
                per_worker[worker] += 1
            previous = (signal, len(phase.tasks))
        op.attributes["wpk.workers"] = IntegerAttr(self.workers, i64)
        op.attributes["wpk.counters"] = IntegerAttr(len(phases) + 1, i64)
