"""`wpk-arena`: give every buffer its byte offset in a fixed arena.

Weights, state, input and output buffers are packed one after another. Activation buffers share offsets
by liveness: a buffer is live from the phase that writes it to the last phase that reads it (a phase's
inputs and output are live together, so a task never overwrites what it reads), and first-fit placement
in order of decreasing size gives each an offset that no buffer live at the same time overlaps.
Per-session activations are laid out session-major: first-fit places one session's slice of each, and
every per-session activation gets the same session stride (that region's size), so recycled bytes of
session s only ever held session s's data; shared activations follow the N session regions. Every
offset is 16-byte aligned. The module gets `wpk.arena_bytes` (bytes per arena; input and output are one
half of their double buffer) and `wpk.act_lower_bound`, the largest total of buffers live at once.
Runs before `wpk-schedule`, which derives the tasks' dependencies (write-after-read on recycled offsets
included) from the placed offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wave, wpk
from wavec.dialects.wpk import ARENA_NAMES
from wavec.passes.wave_to_wpk import align
from wavec.passes.wpk_schedule import phases_of


def buffers_of(module: ModuleOp) -> dict[str, wpk.BufferOp]:
    return {op.buffer_name: op for op in module.ops if isinstance(op, wpk.BufferOp)}


def footprint_bytes(buf: wpk.BufferOp, sessions: int) -> int:
    return buf.stride * sessions if buf.stride else buf.nbytes


def live_ranges(module: ModuleOp) -> dict[str, tuple[int, int]]:
    """Activation buffer -> (first phase writing it, last phase reading it)."""
    ranges: dict[str, tuple[int, int]] = {}
    for index, phase in enumerate(phases_of(module)):
        for task in phase.tasks:
            for name in [*task.input_names, task.output.data]:
                first, last = ranges.get(name, (index, index))
                ranges[name] = (min(first, index), max(last, index))
    return ranges


def first_fit(sizes: dict[str, int], ranges: dict[str, tuple[int, int]]) -> dict[str, int]:
    placed: list[tuple[int, int, int, int]] = []  # offset, end, first, last
    offsets = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        first, last = ranges[name]
        clashes = sorted((o, e) for o, e, f, l in placed if f <= last and first <= l)
        offset = 0
        for o, e in clashes:
            if offset + sizes[name] <= o:
                break
            offset = max(offset, align(e))
        offsets[name] = offset
        placed.append((offset, offset + sizes[name], first, last))
    return offsets


def max_live(sizes: dict[str, int], ranges: dict[str, tuple[int, int]]) -> int:
    if not ranges:
        return 0
    phases = max(last for _, last in ranges.values()) + 1
    live = [0] * phases
    for name, size in sizes.items():
        first, last = ranges[name]
        for p in range(first, last + 1):
            live[p] += size
    return max(live)


@dataclass(frozen=True)
class WpkArena(ModulePass):
    """Assigns arena offsets: packed for weights, state and io; liveness-shared for activations."""

    name = "wpk-arena"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        n = wave.cohort_size(op)
        if n is None:
            raise PassFailedException("wpk-arena: the module has no wave.cohort attribute; run wave-cohort first")
        if any(t.worker is not None for phase in phases_of(op) for t in phase.tasks):
            raise PassFailedException(
                "wpk-arena: the tasks are already scheduled; run wpk-arena before wpk-schedule (the schedule's "
                "dependencies come from the placed offsets)"
            )
        buffers = buffers_of(op)
        ranges = live_ranges(op)
        sizes = {name: align(footprint_bytes(b, n)) for name, b in buffers.items()}
        totals = dict.fromkeys(ARENA_NAMES, 0)
        act = {name: sizes[name] for name, b in buffers.items() if b.arena.data == "act" and name in ranges}
        # Session-major: per-session activations share one session stride (the session region), so a
        # recycled offset only ever overlaps the same session's bytes of an older tensor and the
        # write-after-read dependencies it creates stay inside one session's tiles.
        per_session = {name: align(buffers[name].nbytes) for name in act if buffers[name].stride}
        offsets = first_fit(per_session, ranges)
        region = align(max((offsets[m] + per_session[m] for m in per_session), default=0))
        shared = {name: size for name, size in act.items() if name not in per_session}
        for name, off in first_fit(shared, ranges).items():
            offsets[name] = region * n + off
        for name in per_session:
            buffers[name].properties["session_stride"] = IntegerAttr(region, i64)
            sizes[name] = region * (n - 1) + per_session[name]
        for name, b in buffers.items():
            arena = b.arena.data
            if arena != "act":
                offsets[name] = totals[arena]
            if name in offsets:
                totals[arena] = max(totals[arena], offsets[name] + sizes[name])
                b.properties["offset"] = IntegerAttr(offsets[name], i64)
        op.attributes["wpk.arena_bytes"] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in totals.items()})
        op.attributes["wpk.act_lower_bound"] = IntegerAttr(max_live(act, ranges), i64)
