"""`wave-hoist`: move the ops that do not wait for the beat's inputs ahead of those that do.

An op is *early* when it is a wave op that computes a value and none of its operands depends on a
`wave.input`: it reads only state (the previous beat's), weights, or values computed from those alone. The
pass moves every early op in front of the first op that is not, keeping the order within each group;
`wave.output` and `wave.state_write` stay where they are (wave-to-wpk runs them after the graph anyway), and so
do ops of other dialects (terminators, ops with regions) and everything that reads them.

Why the order matters: the lowering keeps block order, so wave-to-wpk numbers the phases and wpk-arena
recycles activation slots in it. An early op that sits after the input's chain inherits a recycled slot, and
with it write-after-read waits on that chain, so it runs after the chain even though its operands were ready
at the beat's start. One-session Silero's LSTM computes H R^T from the state alone: placed last, it ran
after the encoder's four convolutions; placed first, wpk-schedule puts it on idle workers at the start, and
only the input's matmul stays on the chain (frontends/onnx/ops_rnn.py adds H R^T as that matmul's epilogue).
Hoisted values live from the beat's start to their use, so the activation arena may grow by their bytes.

It pays only where the input's chain leaves workers idle. Once wave-cohort has run, the pass leaves a cohort
of more than `max-sessions` as it is: Silero's beat p50 (H200, `scripts/silero_gpu.py`, the same run,
bench/RESULTS.md fifteenth run), hoisted against not, was 77.7 against 84.8 us at 4 sessions and 142.4
against 145.3 at 16, but 158.0 against 150.1 at 64 and 333.5 against 309.1 at 256: there the hoisted matmul's
tasks share workers with the chain's, and wpk-schedule's cost model, which charges such a tile under half of
its measured 17 us, orders them ahead of the chain's tasks. Before wave-cohort (a module of one session) it
always hoists. The default pipeline sets `max-sessions` to 64: with wpk-schedule's insertion policy (its
`insertion-max-sessions`), which puts the hoisted matmul's tiles into the chain's idle stretches, Silero at
64 sessions went from 89.7 to 82.7 us p50, but at 256 from 174.7 to 244.6 (bench/RESULTS.md seventeenth run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wave

_STAY = (wave.InputOp, wave.OutputOp, wave.StateWriteOp)  # inputs start the chain; sinks end it


def _movable(op: Operation) -> bool:
    """A wave op that computes a value: other dialects' ops (terminators, ops with regions, whose captured
    values are no operands) never move, and neither does anything that reads them."""
    return op.name.startswith("wave.") and not isinstance(op, _STAY) and not op.regions


def early_ops(block: Block) -> list[Operation]:
    """The block's early ops (the module docstring), in block order."""
    early: list[Operation] = []
    ready: set = set()
    for op in block.ops:
        if _movable(op) and all(v in ready for v in op.operands):
            early.append(op)
            ready.update(op.results)
    return early


def hoist(block: Block) -> None:
    """Moves the block's early ops that follow its first other op in front of that op."""
    chosen = {id(op) for op in early_ops(block)}
    ops = list(block.ops)
    first_late = next((i for i, op in enumerate(ops) if id(op) not in chosen), len(ops))
    behind = [op for op in ops[first_late + 1 :] if id(op) in chosen]
    for op in behind:
        op.detach()
        block.insert_op_before(op, ops[first_late])


@dataclass(frozen=True)
class WaveHoist(ModulePass):
    """Moves the ops that depend on no wave.input (state, weights and what only they compute) ahead of the
    ops that do, in each function's body, in a cohort of at most `max-sessions`."""

    name = "wave-hoist"
    max_sessions: int = field(default=16, metadata={"help": "largest cohort (wave-cohort's N) the pass reorders"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.max_sessions < 1:
            raise PassFailedException(f"wave-hoist: max-sessions must be >= 1, got {self.max_sessions}")
        for fn in op.walk():
            module = fn.parent_op()
            if isinstance(fn, func.FuncOp) and (wave.cohort_size(module) or 1) <= self.max_sessions:
                for block in fn.body.blocks:
                    hoist(block)
