"""`wpk-arena`: give every buffer its byte offset in a fixed arena.

Weights, state, input and output buffers are packed one after another. Activation buffers share offsets
by liveness (wavec.analysis.liveness), at the `granularity` option's grain:
- `op`: a buffer is live, whole, from the phase that writes it to the last phase that reads it;
- `tile`: each 4-byte word is live from the first phase whose task footprints touch it to the
  last one, so the slices of a buffer that different phases consume (an STFT's real and imaginary
  halves) are recycled one by one, and words no task touches are never live;
- `none`: every activation keeps bytes of its own for the whole beat: nothing is recycled, so no task
  waits for the readers of the bytes it writes (write-after-read);
- `auto` (default): `none` while the activations of the whole cohort, each in bytes of its own, total at most
  `max-dedicated-bytes` (default 0: never); else `tile` while one session's activation buffers hold at
  most `max-tile-words` words (its word liveness takes 16 bytes a word: 1 GiB at the default 2^26), else
  `op` (duplex:1b holds 4.0e7 words a session; duplex:11b 4.4e8, and tile liveness ran out of 23 GB on
  it). The module's `wpk.arena_granularity` says which one ran.
Why `none`: recycling saves nothing that matters in a small arena, and its write-after-read waits are
dependencies the program did not have. In one-session Silero (8.7 KB recycled), the LSTM head's
convolution wrote bytes the state's concat still read, so it waited for the concat, which the schedule
then ran first, ahead of the convolution's own input, on the worker both wanted (bench/RESULTS.md,
seventeenth run). The default pipeline sets `max-dedicated-bytes` to 4 MiB.
A phase's inputs and output are always live together, so a task never overwrites what a task of its own
phase reads. First-fit placement gives each buffer the lowest offset at which none of its live segments
overlaps, in bytes and in phases, a segment already placed; it runs in three orders (decreasing size,
first live phase, decreasing size x lifetime) and, at tile granularity, also over two safe coarser
livenesses (alignment padding live with a buffer's tail; whole buffers), keeping the smallest arena, so
`tile` is never worse than `op`.
Per-session activations are laid out session-major: first-fit places one session's slice of each, and
every per-session activation gets the same session stride (that region's size), so recycled bytes of
session s only ever held session s's data; shared activations follow the N session regions. Every
offset is 16-byte aligned. The module gets `wpk.arena_bytes` (bytes per arena; input and output are one
half of their double buffer) and `wpk.act_lower_bound`, the largest total of activation bytes live at
once at the same granularity (no placement does better; at tile granularity it counts live words only,
so on tiny tensors the 16-byte alignment alone can put the arena a few percent above it).
Runs before `wpk-schedule`, which derives the tasks' dependencies (write-after-read on recycled offsets
included, word by word) from the placed offsets; `wpk-verify` proves the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.analysis.liveness import (
    GRANULARITIES, Segment, live_ranges, max_live, op_segments, padded_tails, tile_segments,
)
from wavec.dialects import wave, wpk
from wavec.dialects.wpk import ARENA_NAMES
from wavec.opcodes import ELEM_BYTES
from wavec.passes.wave_to_wpk import ALIGN, align
from wavec.passes.wpk_schedule import phases_of


def buffers_of(module: ModuleOp) -> dict[str, wpk.BufferOp]:
    return {op.buffer_name: op for op in module.ops if isinstance(op, wpk.BufferOp)}


def footprint_bytes(buf: wpk.BufferOp, sessions: int) -> int:
    return buf.stride * sessions if buf.stride else buf.nbytes


def first_fit(segments: dict[str, list[Segment]], order: list[str]) -> dict[str, int]:
    """Offsets, buffer by buffer in `order`: the lowest 16-byte aligned offset at which none of a buffer's
    live segments overlaps a placed one in both bytes and phases."""
    placed = np.zeros((0, 4), np.int64)  # absolute begin, end, first, last
    offsets = {}
    for name in order:
        segs = np.array([s for s in segments[name] if s[1] > s[0]], np.int64).reshape(-1, 4)
        # segment r at offset c clashes with a placed q alive in a common phase iff lo < c < hi
        meet = (placed[:, None, 2] <= segs[None, :, 3]) & (segs[None, :, 2] <= placed[:, None, 3])
        qi, ri = np.nonzero(meet)
        lo = placed[qi, 0] - segs[ri, 1]
        hi = placed[qi, 1] - segs[ri, 0]
        offsets[name] = c = _lowest_free(lo, hi)
        placed = np.vstack([placed, segs + np.array([c, c, 0, 0])])
    return offsets


def _lowest_free(lo: np.ndarray, hi: np.ndarray) -> int:
    """The lowest candidate offset (0, or an aligned end of a clash interval) inside no open interval
    (lo, hi): each interval blocks a run of the sorted candidates, marked with a difference array, so
    32,000 buffers of duplex:1b place in O(n log n) each instead of one scan per candidate. The largest
    candidate is past every interval, so one is always free."""
    ends = hi[hi > 0]
    candidates = np.unique(np.concatenate([[0], (ends + ALIGN - 1) // ALIGN * ALIGN]))
    first = np.searchsorted(candidates, lo, "right")  # the first candidate above lo
    stop = np.searchsorted(candidates, hi, "left")  # the first candidate at or above hi
    blocks = first < stop
    cover = np.zeros(len(candidates) + 1, np.int64)
    np.add.at(cover, first[blocks], 1)
    np.add.at(cover, stop[blocks], -1)
    return int(candidates[np.flatnonzero(np.cumsum(cover)[:-1] == 0)[0]])


def place(candidates: list[dict[str, list[Segment]]], sizes: dict[str, int]) -> dict[str, int]:
    """First-fit of each candidate liveness (every one safe: a superset of the true one) in three orders:
    decreasing size, first live phase, and decreasing size x lifetime (the buffers that block the most of
    the byte-time plane first); keeps the offsets of the smallest extent (the first on a tie)."""
    best, extent = {}, None
    for segments in candidates:
        start = {name: min((s[2] for s in segments[name]), default=0) for name in sizes}
        stop = {name: max((s[3] for s in segments[name]), default=0) for name in sizes}
        for key in (lambda n: (-sizes[n], start[n], n), lambda n: (start[n], -sizes[n], n),
                    lambda n: (-sizes[n] * (stop[n] - start[n] + 1), start[n], n)):
            offsets = first_fit(segments, sorted(sizes, key=key))
            end = max((offsets[n] + sizes[n] for n in sizes), default=0)
            if extent is None or end < extent:
                best, extent = offsets, end
    return best


@dataclass(frozen=True)
class WpkArena(ModulePass):
    """Assigns arena offsets: packed for weights, state and io; liveness-shared for activations."""

    name = "wpk-arena"
    granularity: str = field(
        default="auto",
        metadata={"help": "tile: recycle activation bytes word by word, after the last phase whose tasks touch "
                          "them; op: recycle whole buffers after their last reading phase; none: recycle nothing; "
                          "auto: none up to max-dedicated-bytes, else tile up to max-tile-words, else op"},
    )
    max_tile_words: int = field(
        default=1 << 26,
        metadata={"help": "auto: the most activation words of one session that tile liveness tracks"},
    )
    max_dedicated_bytes: int = field(
        default=0,
        metadata={"help": "auto: none (nothing recycled) while the cohort's activations, each in bytes of its "
                          "own, total at most this many bytes"},
    )

    def _granularity(self, words: int, dedicated: int) -> tuple[str, str]:
        """The granularity to run and, when auto chose it, why (``words``: one session's activation words;
        ``dedicated``: the cohort's activation bytes, nothing recycled)."""
        if self.granularity != "auto":
            return self.granularity, ""
        if self.max_dedicated_bytes > 0 and dedicated <= self.max_dedicated_bytes:
            return "none", (f"auto: {dedicated:,} activation bytes unrecycled, within max-dedicated-bytes "
                            f"{self.max_dedicated_bytes:,}")
        within = words <= self.max_tile_words
        return ("tile" if within else "op"), (
            f"auto: {words:,} activation words a session, {'within' if within else 'over'} max-tile-words "
            f"{self.max_tile_words:,}"
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        n = wave.cohort_size(op)
        if n is None:
            raise PassFailedException("wpk-arena: the module has no wave.cohort attribute; run wave-cohort first")
        if self.max_tile_words < 0:
            raise PassFailedException(f"wpk-arena: max-tile-words must be >= 0, got {self.max_tile_words}")
        if self.max_dedicated_bytes < 0:
            raise PassFailedException(f"wpk-arena: max-dedicated-bytes must be >= 0, got {self.max_dedicated_bytes}")
        if self.granularity not in ("none", *GRANULARITIES, "auto"):
            raise PassFailedException(
                f"wpk-arena: granularity must be none, op, tile or auto, got {self.granularity!r}")
        phases = phases_of(op)
        if not phases:
            raise PassFailedException("wpk-arena: the module has no wpk.phase; run wave-to-wpk first")
        if any(t.worker is not None for phase in phases for t in phase.tasks):
            raise PassFailedException(
                "wpk-arena: the tasks are already scheduled; run wpk-arena before wpk-schedule (the schedule's "
                "dependencies come from the placed offsets)"
            )
        buffers = buffers_of(op)
        ranges = live_ranges(phases)
        sizes = {name: align(footprint_bytes(b, n)) for name, b in buffers.items()}
        totals = dict.fromkeys(ARENA_NAMES, 0)
        act = {name: sizes[name] for name, b in buffers.items() if b.arena.data == "act" and name in ranges}
        # Session-major: per-session activations share one session stride (the session region), so a
        # recycled offset only ever overlaps the same session's bytes of an older tensor and the
        # write-after-read dependencies it creates stay inside one session's tiles.
        per_session = {name: align(buffers[name].nbytes) for name in act if buffers[name].stride}
        shared = {name: size for name, size in act.items() if name not in per_session}
        whole = op_segments({**per_session, **shared}, ranges)
        words = {name: buffers[name].nbytes // ELEM_BYTES for name in act}
        dedicated = sum(per_session.values()) * n + sum(shared.values())
        granularity, why = self._granularity(sum(words.values()), dedicated)
        candidates = [whole]  # op granularity: whole buffers
        if granularity == "none":  # every buffer live all beat: first-fit packs them one after another
            candidates = [{name: [(0, size, 0, len(phases))] for name, size in {**per_session, **shared}.items()}]
        if granularity == "tile":
            exact = tile_segments(phases, words)
            padded = padded_tails(exact, {name: (buffers[name].nbytes, align(buffers[name].nbytes)) for name in act})
            # Word liveness places best; with the alignment padding live too, or whole buffers, the same
            # orders sometimes place better still: all are safe, the smallest wins (never worse than op).
            candidates = [exact, padded, whole]
        # At tile granularity the words alone (a segment may sit in another's padding); unrecycled, what op
        # granularity's recycling would reach.
        bound = whole if granularity == "none" else candidates[0]
        offsets = place(candidates, per_session)
        region = align(max((offsets[m] + per_session[m] for m in per_session), default=0))
        for name, off in place(candidates, shared).items():
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
        op.attributes["wpk.arena_granularity"] = StringAttr(granularity)
        if why:
            op.attributes["wpk.arena_granularity_why"] = StringAttr(why)
        op.attributes["wpk.arena_bytes"] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in totals.items()})
        op.attributes["wpk.act_lower_bound"] = IntegerAttr(
            max_live(bound, {name: n for name in per_session}), i64
        )
