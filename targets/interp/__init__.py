"""interp: the CPU interpreter of a compiled profile (numpy only, no xDSL).

It executes the same payload bytes, parameter table, weights image and arena offsets the CUDA kernel does,
in a random order that respects only the declared dependencies (per-worker order and counter waits), so
CI can prove a schedule, an arena plan and the payloads correct without a GPU. See machine.py for the
beat loop and bodies.py for what each opcode computes.
"""

from .bodies import run_task
from .machine import Interpreter, plan_tasks, run_beats

__all__ = ["Interpreter", "plan_tasks", "run_beats", "run_task"]
