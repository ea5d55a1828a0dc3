"""`wave-to-wpk`: lower the cohort-batched wave graph to buffers, phases and tiled tasks.

Every wave value gets a location: a `wpk.buffer` (inputs and the reset flags in the input arena, outputs in
the output arena, states in the state arena, weights and state initial values in the weights arena,
everything else in the activation arena) plus an element offset; `wave.reshape` only renames a location.
Each compute op becomes one `wpk.phase` of tasks; a task is one tile: a range of sessions times a range of
one session's output elements, sized so that an op spreads over `workers` tasks when its work allows
(never tiles under `min-tile-elems` elements or `min-tile-flops` FLOPs per session, so a copy stays
whole while a convolution's few outputs of hundreds of taps each spread over many SMs). Data movement (slice, transpose, concat, broadcast, copies)
becomes EWISE tasks over strided views, so the four opcodes of wavec/opcodes.py cover every op; a concat that
only outputs and state writes read is no phase of its own, each of them copying its parts (`folds_into_copies`;
option `concats-into-copies`). A slice that
selects a contiguous block, or that only elementwise ops and copies (concat, outputs, state writes) read,
is no task at all: the block's offset, or the strided view those ops read through; neither is a sum,
mean, max, min, product or log-sum-exp over axes of size 1 (a reshape), nor a transpose read only as
MATMULs' b with its columns still contiguous (`folds_into_matmuls`).
The program is: one phase resetting each state's slots whose reset flag is set, the graph's phases in
order, the output copies (none for an output that its op writes in place: with `outputs-in-place`, the
default, an op whose result nothing but one model output reads, through reshapes and unit reductions,
writes the output buffer itself), then the state writes (after every read of the old state; a new value that is
itself an old state is copied out during the graph, since the writes run one after another). A
``select(c, a, state)`` whose state nothing else reads and whose result is written back to that state (a ring
cache's write, once per model step) writes the state's own buffer when every reader of the version it
overwrites comes before it (`updates_state_in_place`): its state write is no copy, and with the reset's
``select(reset, init, state)`` it runs a body that stores only where c holds (wpk-payload). Any other
elementwise op computing a state's new value, or one part of it that a concat only outputs and the state's
write read, writes the state's slot itself when every other reader of the old value comes before it and it
reads the old value only where it writes (`states-in-place`; `_Lowering.state_in_place`): that part needs no
write-back. A concat of weights alone (`wave-stack-matmuls`' stacked k) is one weight of its own, whose bytes
profile emission concatenates from the blob (`is_weight_concat`): no phase. A value that only one concat reads
(a matmul's stacked a) is computed into its part of the concat's buffer when that part is contiguous
(`_Lowering.concat_in_place`; option `concats-in-place`): the concat then copies only its other parts.
Requires `wave-cohort` first (the module's `wave.cohort` attribute gives N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from wavec.analysis.cost import flops_per_element
from wavec.dialects import wave, wpk
from wavec.opcodes import (
    COLUMN_GEMM_BLOCKS,
    COLUMN_GEMM_ROWS,
    GEMM_COLS,
    MAX_INPUTS,
    REDUCE_KINDS,
    Expr,
    ConvParams,
    EwiseParams,
    NO_EPILOGUE,
    NO_PROLOGUE,
    Epilogue,
    Prologue,
    MatmulParams,
    ReduceParams,
    compile_expr,
    contiguous_strides,
    decode_expr,
    kept_input,
    parse_expr,
)

ALIGN = 16  # bytes: every session slot and buffer starts 16-byte aligned for vector access


def align(nbytes: int, to: int = ALIGN) -> int:
    return (nbytes + to - 1) // to * to


@dataclass(frozen=True)
class Loc:
    """Where a value lives: buffer, element offset inside one session's slice, and the value's full type
    shape (cohort axis first when `per_session`); ``view``: its element strides over that shape when its
    elements are not contiguous from the offset (a slice or transpose read in place, a concat's part of
    its output), None when they are."""

    buffer: str
    offset: int
    shape: tuple[int, ...]
    per_session: bool
    view: tuple[int, ...] | None = None

    @property
    def session_shape(self) -> tuple[int, ...]:
        return self.shape[1:] if self.per_session else self.shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides over the full shape; 0 along the cohort axis (sessions are a slot apart)."""
        if self.view is not None:
            return self.view
        own = contiguous_strides(self.session_shape)
        return ((0,) + own) if self.per_session else own


def broadcast_strides(loc: Loc, full: tuple[int, ...], per_session: bool) -> tuple[int, ...]:
    """Element strides that read `loc` broadcast (right-aligned) to the iteration shape `full`, with the
    cohort axis dropped when the iteration is per session."""
    own = loc.strides
    pad = len(full) - len(loc.shape)
    strides = []
    for d, size in enumerate(full):
        j = d - pad
        strides.append(0 if j < 0 or loc.shape[j] == 1 and size != 1 else own[j])
    return tuple(strides[1:] if per_session else strides)


# The smallest matrix of a per-session b (bytes) whose rows get tiles of their own for the streaming GEMM when
# the MATMUL has no prologue: the GEMM costs a tile ~15 us whatever its size, so duplex:1b's encoder scores
# (one head's q against its 128 x 64 keys, 32 KB) ran 1,152 tiles of 15 us a phase at 96 sessions, 4.0 ms a
# beat, and 1.3 ms as 384 lane-group tiles. With a prologue (P @ V's softmax, before wave-fuse stopped fusing
# it) lane groups were slower: 4.5 -> 6.4 ms. Sending the TTS's 128 KB matrices to lane groups too made the
# beat at 128 sessions 76.1 -> 105.4 ms (bench/RESULTS.md thirteenth run).
STREAM_MIN_B_BYTES = 65536


def tile_sizes(sessions: int, elems: int, workers: int, min_elems: int) -> tuple[int, int]:
    """(sessions, elements) per tile of `tiles`: sessions split first, elements (never below `min_elems` per
    tile) only when the cohort alone cannot fill the workers, into the number of pieces a session whose
    tiles end soonest: ceil(tiles / workers) waves of 1/pieces of a session's elements each. Up to
    ceil(workers / sessions) pieces, the most of those that tie (64 sessions over 132 workers: 2 pieces, 128
    tiles in one wave, not 3 pieces' 192 in two); up to 4 times as many where that ends 10% sooner still (96
    sessions: 4 pieces, 384 tiles in 3 waves of a quarter each, not 2 waves of halves)."""
    s_chunks = min(sessions, workers)
    s_per = math.ceil(sessions / s_chunks)
    s_chunks = math.ceil(sessions / s_per)
    if s_chunks >= workers:
        return s_per, elems
    fair = math.ceil(workers / s_chunks)
    allowed = max(1, elems // max(min_elems, 1))

    def end(e: int) -> float:  # when the last tile ends, in a session's work
        return math.ceil(s_chunks * e / workers) / e

    e_chunks = min(range(1, min(fair, allowed) + 1), key=lambda e: (end(e), -e))
    sooner = [e for e in range(fair + 1, min(4 * fair, allowed) + 1) if end(e) < 0.9 * end(e_chunks)]
    if sooner:
        e_chunks = min(sooner, key=lambda e: (end(e), e))
    return s_per, math.ceil(elems / e_chunks)


def tiles(sessions: int, elems: int, workers: int, min_elems: int, row: int = 1) -> list[tuple[int, int, int, int]]:
    """(s0, s1, e0, e1) tiles covering sessions x elems, of `tile_sizes`, their element ranges whole multiples of
    `row` elements (but the last)."""
    s_per, e_per = tile_sizes(sessions, elems, workers, min_elems)
    e_per = -(-e_per // row) * row
    return [
        (s, min(s + s_per, sessions), e, min(e + e_per, elems))
        for s in range(0, sessions, s_per)
        for e in range(0, elems, e_per)
    ]


def selects_rows(params: EwiseParams) -> bool:
    """Whether an EWISE ``select(c, a, %k)`` chooses whole rows (axis 0, longer than 1): c's inputs hold one
    value a row. Written in place (a ring write of a [slots, heads, dim] cache), its body then evaluates c
    once a row and stores only the rows where it holds, in a tile of whole rows (targets/cuda/tvm_ewise.py
    flagged_rows), so its tiles are cut on rows."""
    expr = decode_expr(params.code)
    if kept_input(expr) < 0 or len(params.shape) < 2 or params.shape[0] == 1:
        return False
    return all(params.in_strides[k][d] == 0 or params.shape[d] == 1
               for k in expr.args[0].inputs() for d in range(1, len(params.shape)))


def per_session_b_tiles(sessions: int, rows: int, cols: int, k: int, workers: int, min_elems: int,
                        row_block: int, has_prologue: bool, k_contiguous: bool) -> list[tuple[int, int, int, int]]:
    """Tiles of a MATMUL whose b is per session: `row_tiles` (one session a tile, the only tiles the GEMM bodies
    take with a per-session b) when the streaming GEMM is worth its cost (one matrix of b holds
    STREAM_MIN_B_BYTES or more, or a prologue) or b is ``k_contiguous`` (the column GEMM's form; its small
    matrices, several a tile, in `column_tiles`), else `tiles`, whose fewer tiles the lane-group body runs. A
    cohort of more sessions than workers gets one-session tiles too: at 136 sessions on 132 workers, tiles of
    two sessions sent duplex:1b's decoder attention to lane groups, 192 ms a beat (bench/RESULTS.md thirteenth
    run)."""
    small = k * cols * 4 < STREAM_MIN_B_BYTES
    if k_contiguous and small and not has_prologue and row_block <= COLUMN_GEMM_ROWS and rows > row_block:
        return column_tiles(sessions, rows, cols, workers, row_block)
    if has_prologue or k_contiguous or not small:
        return row_tiles(sessions, rows, cols, workers, min_elems, row_block)
    return tiles(sessions, rows * cols, workers, min_elems)


def column_tiles(sessions: int, rows: int, cols: int, workers: int, row_block: int) -> list[tuple[int, int, int, int]]:
    """Tiles of a MATMUL whose b is per session, k-contiguous and in small matrices (under STREAM_MIN_B_BYTES),
    for the column GEMM: one session and whole matrices of b (``row_block`` rows each) a tile, up to
    COLUMN_GEMM_BLOCKS, a session's matrices cut into as many pieces as the workers have for it (at most one
    wave). duplex:1b's encoder heads (32 KB) at 144 sessions: one tile of 12 heads a session, where one head a
    tile cost ~12 us each (bench/RESULTS.md fourteenth run)."""
    blocks = rows // row_block
    pieces = max(1, min(blocks, workers // sessions), math.ceil(blocks / COLUMN_GEMM_BLOCKS))
    per = math.ceil(blocks / pieces)
    return [(s, s + 1, b * row_block * cols, min(b + per, blocks) * row_block * cols)
            for s in range(sessions) for b in range(0, blocks, per)]


def rows_per_b(params: MatmulParams) -> int:
    """How many consecutive output rows of a MATMUL read the same matrix of b: the product of the output's
    row dims after the last one b has a non-zero stride along (all rows when there is none)."""
    row_dims = params.shape[:-1]
    varying = [d for d, stride in enumerate(params.b_strides[:len(row_dims)]) if stride != 0]
    return math.prod(row_dims[varying[-1] + 1:]) if varying else math.prod(row_dims)


def row_tiles(sessions: int, rows: int, cols: int, workers: int, min_elems: int,
              row_block: int) -> list[tuple[int, int, int, int]]:
    """Tiles of a MATMUL's rows x cols outputs per session, as many as `tiles` makes but at most one wave, each
    whole rows or a part of one row (columns on GEMM_COLS): the form the kernel's GEMM bodies take
    (targets/cuda/codegen.py single_b_tile), so a MATMUL whose b is per session (a ring cache) streams it
    through the weight-streaming GEMM instead of the lane-group body. One session a tile, however many sessions
    the workers have. ``row_block``: how many consecutive rows read one matrix of b (a ring cache's rows of one
    head); whole-row tiles never cross such a block, which can take more than one wave."""
    e_per = tile_sizes(sessions, rows * cols, workers, min_elems)[1]
    pieces = max(1, min(math.ceil(rows * cols / e_per), workers // sessions))  # a session's tiles, one wave at most
    if pieces <= rows:
        r_per = min(math.ceil(rows / pieces), row_block)
        return [(s, s + 1, r * cols, min(r + r_per, b + row_block, rows) * cols)
                for s in range(sessions) for b in range(0, rows, row_block)
                for r in range(b, min(b + row_block, rows), r_per)]
    c_per = GEMM_COLS * math.ceil(cols / (pieces // rows) / GEMM_COLS)  # 16-byte column vectors when cols allow
    return [(s, s + 1, r * cols + c, r * cols + min(c + c_per, cols))
            for s in range(sessions) for r in range(rows) for c in range(0, cols, c_per)]


def _shared_weight_split(sessions: int, units: int, min_units: int, groups: int, workers: int,
                         unit_bytes: int, session_bytes: int, out_bytes: int) -> tuple[int, int]:
    """(sessions, units) per tile for an op whose weights the cohort shares, its output split into ``groups``
    independent rows of ``units`` units each. A tile of s sessions and u units reads ``u * unit_bytes`` of
    weights and ``s * session_bytes`` of its sessions' inputs and writes ``s * u * out_bytes``; the split
    minimizes waves x bytes per tile (waves = ceil(tiles / workers)), then the tile count. Splitting only
    sessions reads the whole weight once per tile; splitting only units reads every session's input once
    per tile; the best split balances the two."""
    best = None
    for s_chunks in range(1, min(sessions, workers) + 1):
        s_per = math.ceil(sessions / s_chunks)
        n_s = math.ceil(sessions / s_per)
        u_chunks = max(1, min(units // min_units, workers // (n_s * groups)))
        u_per = math.ceil(units / u_chunks)
        n_tiles = n_s * groups * math.ceil(units / u_per)
        cost = (math.ceil(n_tiles / workers) * (u_per * unit_bytes + s_per * session_bytes + s_per * u_per * out_bytes),
                n_tiles)
        if best is None or cost < best[0]:
            best = (cost, s_per, u_per)
    return best[1], best[2]


def weight_gemm_tiles(sessions: int, rows: int, cols: int, k: int, workers: int,
                      min_cols: int) -> list[tuple[int, int, int, int]]:
    """(s0, s1, e0, e1) tiles of a MATMUL whose b is one weight shared by the cohort: each tile is a range of
    sessions times a column range of one output row (columns in multiples of GEMM_COLS, never under
    ``min_cols``), so a task reads its K x columns weight slice once for all its sessions
    (`_shared_weight_split`: a unit is GEMM_COLS columns, 4·K·GEMM_COLS bytes of weight; a session reads
    its row of a, 4·K bytes). Rows beyond the workers fall back to whole rows."""
    if rows > workers:
        return [(s0, s1, r0 * cols, r1 * cols) for s0, s1, r0, r1 in tiles(sessions, rows, workers, 1)]
    units = math.ceil(cols / GEMM_COLS)
    s_per, u_per = _shared_weight_split(sessions, units, max(1, math.ceil(min_cols / GEMM_COLS)), rows, workers,
                                        4 * k * GEMM_COLS, 4 * k, 4 * GEMM_COLS)
    c_per = u_per * GEMM_COLS
    return [
        (s, min(s + s_per, sessions), r * cols + c, r * cols + min(c + c_per, cols))
        for s in range(0, sessions, s_per)
        for r in range(rows)
        for c in range(0, cols, c_per)
    ]


# The tiled GEMM (targets/cuda/codegen.py tiled_gemm, conv_tiles_as_gemm) takes a tile of a 1-D, ungrouped,
# single-image CONV whose weights the cohort shares when it has at least TILED_GEMM_ROWS rows (sessions x output
# steps) and TILED_GEMM_MIN_COLS channels. It runs blocks of TILED_GEMM_ROWS x TILED_GEMM_COLS outputs (kTgM x
# kTgN at 512 threads), each walking k = (input channel, tap) in chunks of TILED_GEMM_K. Rates from clock64
# probes of Silero at 64 and 1,024 sessions (bench/RESULTS.md sixteenth run): a block's chunk ~3,400 cycles
# whatever its columns, ~4 cycles an output for the epilogue and store, ~5,500 a task besides (its decode and
# setup); conv_body's lane groups ~4 FMAs a cycle an SM (2.9 to 6.0 over Silero's five convolutions).
TILED_GEMM_ROWS, TILED_GEMM_COLS, TILED_GEMM_K, TILED_GEMM_MIN_COLS = 64, 64, 64, 16
TILED_CHUNK_CYCLES, TILED_OUTPUT_CYCLES, TILED_TASK_CYCLES, LANE_CONV_FMAS_PER_CYCLE = 3400, 4, 5500, 4


def tiled_conv_split(sessions: int, params: ConvParams, workers: int) -> tuple[float, int, int] | None:
    """(modeled cycles of the busiest worker, sessions, channels) per tile for the tiled CONV (rows: sessions x
    output steps; columns: output channels; k: input channels x taps); None for a CONV of another form or when
    no tile reaches TILED_GEMM_ROWS rows and TILED_GEMM_MIN_COLS channels. Tiles are whole blocks of rows (s_per
    x steps at most a multiple of TILED_GEMM_ROWS); the split minimizes waves x (TILED_TASK_CYCLES + blocks x
    chunks x TILED_CHUNK_CYCLES + outputs x TILED_OUTPUT_CYCLES), then the tile count."""
    if params.batch != 1 or params.group != 1 or len(params.out_sp) != 1:
        return None
    (steps,), cols = params.out_sp, params.c_out
    if sessions * steps < TILED_GEMM_ROWS or cols < TILED_GEMM_MIN_COLS:
        return None
    chunks = math.ceil(params.c_in * params.kernel[0] / TILED_GEMM_K)
    best = None
    for m_blocks in range(1, 5):
        s_per = min(sessions, TILED_GEMM_ROWS * m_blocks // steps)
        if s_per * steps < TILED_GEMM_ROWS:
            continue
        n_s = math.ceil(sessions / s_per)
        for pieces in range(1, cols // TILED_GEMM_MIN_COLS + 1):
            c_per = math.ceil(cols / pieces)
            n_tiles = n_s * math.ceil(cols / c_per)
            blocks = math.ceil(s_per * steps / TILED_GEMM_ROWS) * math.ceil(c_per / TILED_GEMM_COLS)
            tile = TILED_TASK_CYCLES + blocks * chunks * TILED_CHUNK_CYCLES + s_per * steps * c_per * TILED_OUTPUT_CYCLES
            key = (math.ceil(n_tiles / workers) * tile, n_tiles)
            if best is None or key < best[0]:
                best = (key, s_per, c_per)
    return None if best is None else (best[0][0], best[1], best[2])


def lane_conv_cycles(sessions: int, params: ConvParams, workers: int, s_per: int, u_per: int) -> float:
    """Modeled cycles of the busiest worker for conv_body's lane groups over tiles of `s_per` sessions x `u_per`
    channels."""
    n_tiles = math.ceil(sessions / s_per) * math.ceil(params.batch * params.c_out / u_per)
    taps = params.c_in // params.group * math.prod(params.kernel)
    fmas = s_per * u_per * math.prod(params.out_sp) * taps
    return math.ceil(n_tiles / workers) * fmas / LANE_CONV_FMAS_PER_CYCLE


def weight_conv_tiles(sessions: int, params: ConvParams, workers: int, min_elems: int) -> list[tuple[int, int, int, int]]:
    """(s0, s1, e0, e1) tiles of a CONV whose weights the cohort shares: a range of sessions times whole
    output channels (a unit is one channel of one image: its ``prod(out_sp)`` outputs and its
    4·(c_in / group)·prod(kernel) weight bytes; a session reads its group's input, 4·(c_in / group)·prod(in_sp)
    bytes), split by `_shared_weight_split`; or, where the model says the tiled CONV ends sooner than the lane
    groups over that split, by `tiled_conv_split` (Silero at 1,024 sessions: its three lane-group convolutions
    took 150,000 cycles on the chain, clock64 probes, bench/RESULTS.md sixteenth run). Before the weight split,
    a cohort of fewer sessions than workers got one session a tile, each reading its channels' weights for
    that session alone."""
    per_channel = math.prod(params.out_sp)
    units = params.batch * params.c_out
    cg = params.c_in // params.group
    s_per, u_per = _shared_weight_split(
        sessions, units, max(1, math.ceil(min_elems / per_channel)), 1, workers,
        4 * cg * math.prod(params.kernel), 4 * cg * math.prod(params.in_sp), 4 * per_channel)
    tiled = tiled_conv_split(sessions, params, workers)
    if tiled is not None and tiled[0] < lane_conv_cycles(sessions, params, workers, s_per, u_per):
        s_per, u_per = tiled[1:]
    e_per, elems = u_per * per_channel, units * per_channel
    return [(s, min(s + s_per, sessions), e, min(e + e_per, elems))
            for s in range(0, sessions, s_per) for e in range(0, elems, e_per)]


def _user_shape(shape: tuple[int, ...], cohort_axis: int) -> list[int]:
    """One session's shape as the runtime shows it: the model's size-1 cohort axis dropped."""
    return [d for i, d in enumerate(shape) if i != cohort_axis] if cohort_axis >= 0 else list(shape)


@dataclass
class _Lowering:
    n: int
    workers: int
    min_elems: int
    min_work: int
    outputs_in_place: bool
    concats_into_copies: bool
    states_in_place: bool
    concats_in_place: bool
    outputs_computed: set[Operation] = field(default_factory=set)
    destinations: dict[SSAValue, Loc] = field(default_factory=dict)  # a concat's buffer, placed by an input's op
    states: dict[str, SSAValue] = field(default_factory=dict)  # state name -> its wave.state value (the old one)
    states_computed: set[SSAValue] = field(default_factory=set)
    copied_concats: dict[SSAValue, tuple[list[Loc], int]] = field(default_factory=dict)
    buffers: dict[str, wpk.BufferOp] = field(default_factory=dict)
    locs: dict[SSAValue, Loc] = field(default_factory=dict)
    phases: list[wpk.PhaseOp] = field(default_factory=list)
    resets: list[wpk.PhaseOp] = field(default_factory=list)
    outputs: list[wpk.PhaseOp] = field(default_factory=list)
    state_writes: list[wpk.PhaseOp] = field(default_factory=list)

    # ---- buffers -------------------------------------------------------------------------------
    def buffer(self, name: str, arena: str, role: str, full_shape, per_session: bool, **attrs) -> Loc:
        nbytes = 4 * max(1, math.prod(full_shape[1:] if per_session else full_shape))
        stride = align(nbytes) if per_session else 0
        attributes = {k: _attr(v) for k, v in attrs.items()}
        if name in self.buffers:
            raise PassFailedException(f"wave-to-wpk: two values named {name!r}; names of inputs, weights, states and outputs must be unique")
        self.buffers[name] = wpk.BufferOp(name, arena, role, nbytes, stride, attributes)
        return Loc(name, 0, tuple(full_shape), per_session)

    def act(self, value: SSAValue) -> Loc:
        per_session = any(self.locs[v].per_session for v in value.owner.operands)
        return self.act_buffer(wave.shape_of(value), per_session)

    def output_buffer(self, op: wave.OutputOp) -> Loc:
        shape = wave.shape_of(op.value)
        axis = _cohort_axis(op)
        return self.buffer(f"out.{op.sym}", "output", "output", shape, True, model_name=op.sym,
                           shape=_user_shape(shape[1:], axis), cohort_axis=axis)

    def output_in_place(self, value: SSAValue) -> Loc | None:
        """Where the op computing ``value`` writes it when that is a model output's buffer (`sole_output`): a
        per-session value nothing else reads. Its output phase, a copy one handoff after the op, is then not
        needed (one-session Silero: 1.7 us of a 45 us beat, bench/RESULTS.md twenty-second run)."""
        output = sole_output(value) if self.outputs_in_place else None
        if output is None or not any(self.locs[v].per_session for v in value.owner.operands):
            return None
        dst = self.output_buffer(output)
        self.outputs_computed.add(output)
        return Loc(dst.buffer, 0, wave.shape_of(value), True)

    def state_in_place(self, op: Operation) -> Loc | None:
        """Where an elementwise ``op`` writes its result when that is (a part of) a state's new value
        (`_state_destination`): the state's own slot, when every other reader of the state's old value runs
        before ``op`` and ``op`` reads the old value only where it writes, element for element
        (`_may_write_state_early`); wpk-schedule's write-after-read waits then order the old value's reads
        before the write. Its state write, a copy one handoff after the op, is then not needed (Silero's new
        [h, c]: the copy phase ended the beat, bench/RESULTS.md twenty-third run)."""
        if not self.states_in_place or not isinstance(op, wave.EwiseOp):
            return None
        found = _state_destination(op.result)
        if found is None or not any(self.locs[v].per_session for v in op.operands):
            return None
        write, concat = found
        if write.sym not in self.states or concat is not None and not self.concats_into_copies:
            return None  # an undeclared state (refused at its write); a concat phase would copy the parts out
        whole = Loc(state_buffer_name(write.sym), 0, wave.shape_of(write.value), True)
        if concat is None:
            block = whole
        else:
            part = _concat_part_views(concat, whole)[_reshape_source_index(concat, op.result)]
            block = as_block(part)
        if block is None:
            return None
        dst = Loc(block.buffer, block.offset, wave.shape_of(op.result), True)
        if not _may_write_state_early(op, self.states[write.sym], dst, self):
            return None
        self.states_computed.add(op.result)
        return dst

    def concat_in_place(self, op: Operation) -> Loc | None:
        """Where ``op`` writes its result when one concat alone reads it, once, through reshapes, and its part
        of the concat is contiguous: that part of the concat's buffer, placed now (the concat's phase then
        copies only its other parts). Silero's stacked LSTM matmul reads [x, h]: the encoder's last
        convolution writes x there, and h, the old state, is copied in beside it off the chain. Not for a
        concat that folds into copies or that an output or a state write reads (they place it themselves)."""
        users = _users_through_reshapes(op.result)
        if not self.concats_in_place or len(users) != 1 or not isinstance(users[0], wave.ConcatOp):
            return None
        concat = users[0]
        readers = _users_through_reshapes(concat.result)
        sources = [wave.reshape_chain(v)[0] for v in concat.operands]
        if (sources.count(op.result) != 1 or not readers
                or any(isinstance(r, (wave.OutputOp, wave.StateWriteOp)) for r in readers)
                or not any(self.locs[v].per_session for v in op.operands)):
            return None
        shape = wave.shape_of(concat.result)
        block = as_block(_concat_part_views(concat, Loc("", 0, shape, True))[sources.index(op.result)])
        if block is None:
            return None
        if concat.result not in self.destinations:
            self.destinations[concat.result] = self.act_buffer(shape, True)
        name = self.destinations[concat.result].buffer
        self.mark_part(name, block.offset, math.prod(block.session_shape))
        return Loc(name, block.offset, wave.shape_of(op.result), True)

    def mark_part(self, name: str, offset: int, elems: int) -> None:
        """Records on buffer ``name`` that its elements [offset, offset + elems) of each session are a part that
        another phase than the rest writes (``part_bytes``: byte ranges in a session's slot): wpk-verify's dataflow
        check then takes a view's bytes there and elsewhere as two reads, each of one producer."""
        buf = self.buffers[name]
        ranges = list(buf.attributes["part_bytes"].get_values()) if "part_bytes" in buf.attributes else []
        buf.attributes["part_bytes"] = wave.i64_array([*ranges, 4 * offset, 4 * (offset + elems)])

    def stacked_weight(self, op: wave.ConcatOp) -> Loc:
        """The one weight a concat of weights is (`is_weight_concat`): a weights-arena buffer whose ``parts``
        profile emission concatenates along ``axis``."""
        syms = [v.owner.sym for v in op.operands]
        axis = op.axis.value.data
        name = f"concat{axis}({', '.join(syms)})"
        return self.buffer(f"w.{name}", "weights", "weight", wave.shape_of(op.result), False, blob=name,
                           parts=syms, axis=axis)

    def act_buffer(self, shape, per_session: bool) -> Loc:
        return self.buffer(f"t{len(self.buffers)}", "act", "act", shape, per_session)

    def reset_flags(self, rank: int) -> Loc:
        """The per-session reset flag, shaped to broadcast against a rank-`rank` cohort value."""
        if "reset" not in self.buffers:
            self.buffer("reset", "input", "reset", (self.n,), True)
        return Loc("reset", 0, (self.n, *[1] * (rank - 1)), True)

    def loc(self, value: SSAValue, user: Operation) -> Loc:
        if value not in self.locs:
            raise PassFailedException(f"wave-to-wpk: {user.name} uses a value before its definition")
        return self.locs[value]

    # ---- tasks ---------------------------------------------------------------------------------
    def phase(self, name: str, op: str, parts: list[tuple[object, list[Loc], Loc]]) -> wpk.PhaseOp:
        """One phase; each part is (params, input locations, output location) tiled over the cohort. The parts
        share the workers: each is tiled for its share of them, so a phase of many small parts (duplex:1b's
        codec concatenates 320 rows of 96 floats) makes about one wave of tiles, not a wave per part (20,480
        tasks at 64 sessions)."""
        tasks = []
        workers = max(1, self.workers // max(1, len(parts)))
        for params, ins, out in parts:
            words = params.pack()
            opcode = type(params).__name__.removesuffix("Params").lower()
            sessions = self.n if out.per_session else 1
            if params.n_elems == 0:  # an empty tensor: nothing to compute, no task
                continue
            min_elems = max(self.min_elems, self.min_work // max(1, flops_per_element(params)))
            tasks.append(wpk.TasksOp(opcode, [(i.buffer, i.offset) for i in ins], (out.buffer, out.offset), words,
                                     self.tiles(params, ins, out, sessions, min_elems, workers)))
        return wpk.PhaseOp(name, op, tasks)

    def tiles(self, params, ins: list[Loc], out: Loc, sessions: int, min_elems: int,
              workers: int) -> list[tuple[int, int, int, int]]:
        if isinstance(params, MatmulParams):
            cols = params.shape[-1]
            rows = params.n_elems // cols
            if not ins[1].per_session:
                return weight_gemm_tiles(sessions, rows, cols, params.k, workers, min_elems)
            n_stride, k_stride = params.b_strides[-2:]
            return per_session_b_tiles(sessions, rows, cols, params.k, workers, min_elems, rows_per_b(params),
                                       params.prologue != NO_PROLOGUE, k_stride == 1 != n_stride)
        if isinstance(params, ConvParams) and not ins[1].per_session:
            return weight_conv_tiles(sessions, params, workers, min_elems)
        if isinstance(params, EwiseParams) and out in ins and selects_rows(params):
            return tiles(sessions, params.n_elems, workers, min_elems, row=params.n_elems // params.shape[0])
        return tiles(sessions, params.n_elems, workers, min_elems)

    def ewise_part(self, expr: str, ins: list[Loc], out: Loc, shape: tuple[int, ...]) -> tuple:
        """EWISE over iteration shape `shape` (full, cohort axis first when `out` is per session)."""
        ps = out.per_session
        params = EwiseParams(
            shape=shape[1:] if ps else shape,
            out_strides=broadcast_strides(out, shape, ps),
            in_strides=tuple(broadcast_strides(i, shape, ps) for i in ins),
            code=tuple(compile_expr(parse_expr(expr))),
        )
        return params, ins, out

    def copy_part(self, src: Loc, dst: Loc) -> tuple:
        return self.ewise_part("%0", [src], dst, dst.shape)

    def copy_parts(self, value: SSAValue, reader: Operation, dst: Loc) -> list[tuple]:
        """``reader``'s copy of ``value`` to ``dst``: one part, or a part per input of a concat that folds into
        its copies (`folds_into_copies`)."""
        if value in self.copied_concats:
            ins, axis = self.copied_concats[value]
            return _concat_parts(self, ins, axis, dst)
        return [self.copy_part(self.loc(value, reader), dst)]


def _attr(value):
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if value and all(isinstance(v, str) for v in value):
        return ArrayAttr([StringAttr(v) for v in value])
    return wave.i64_array(value)


def _source_name(op: Operation, index: int) -> str:
    base = op.name.removeprefix("wave.")
    return f"{base}_{index}"


# ---- per-op lowering ------------------------------------------------------------------------------


def _epilogue(op: wave.MatmulOp | wave.ConvOp, extras: list[Loc], out: Loc) -> Epilogue:
    """The op's epilogue over the output's session shape (the extras broadcast to the result like a
    wave.ewise's inputs), or the identity."""
    if op.epilogue is None:
        return NO_EPILOGUE
    full = wave.shape_of(op.result)
    ps = out.per_session
    return Epilogue(
        shape=out.session_shape,
        strides=tuple(broadcast_strides(e, full, ps) for e in extras),
        code=tuple(compile_expr(parse_expr(op.epilogue.data))),
    )


def _prologue(op: wave.MatmulOp, a: Loc, extras: list[Loc], out: Loc) -> Prologue:
    """The matmul's prologue, each extra read like ``a`` (strides over the output's dims and k), or the
    identity. An extra broadcasts to a's shape (the verifier of wave.matmul checks it), so its strides over
    a's own axes place it; a's batch axes then align with the output's as a's own strides do."""
    if op.prologue is None:
        return NO_PROLOGUE
    full = wave.shape_of(op.result)
    ps = out.per_session
    strides = []
    for e in extras:
        # e broadcast to a's full shape (cohort axis included when a has one), read as if it were a.
        over_a = broadcast_strides(e, a.shape, False)
        strides.append(_matmul_operand_strides(over_a, a.shape, full, ps, "a"))
    return Prologue(strides=tuple(strides), code=tuple(compile_expr(parse_expr(op.prologue.data))))


def _matmul_operand_strides(own: tuple[int, ...], shape: tuple[int, ...], full: tuple[int, ...], ps: bool,
                            role: str) -> tuple[int, ...]:
    """Strides over the output's dims and k of a matmul operand of full shape ``shape`` whose own element
    strides are ``own`` (0 along the cohort axis), for an output of full shape ``full``; the cohort axis
    dropped when the iteration is per session (``ps``)."""
    batch_full, batch_own = full[:-2], shape[:-2]
    pad = len(batch_full) - len(batch_own)
    strides = [
        0 if d - pad < 0 or batch_own[d - pad] == 1 and size != 1 else own[d - pad]
        for d, size in enumerate(batch_full)
    ]
    if role == "a":
        strides += [own[-2], 0, own[-1]]
    else:
        strides += [0, own[-1], own[-2]]
    return tuple(strides[1:] if ps else strides)


def _is_bf16_weight(value: SSAValue) -> bool:
    """Whether ``value`` is a bf16 weight's, read through transposes and reshapes (which keep its values)."""
    weight = wave.weight_source(value)
    return weight is not None and weight.is_bf16


def transposed_matvec(params: MatmulParams) -> MatmulParams | None:
    """A matrix-vector product out[r] = sum_k a[r, k] b[k] (one column, no prologue or epilogue) over a matrix
    whose rows are k-contiguous and evenly strided, of STREAM_MIN_B_BYTES or more, with the same b for every
    row, as its transpose out^T = b^T a^T: one row of b^T against a^T's k-contiguous columns, the column GEMM's
    form (each thread reads a row of a 16 bytes a load, all in flight). Inputs swap: (b, a). On the lane-group
    body each row had a thread reading four loads at a time: duplex:1b's Mamba2 readouts (y = h @ c over a 1 MB
    state a session) took 45 us a two-session tile, 3.6 ms a beat at 144 sessions (bench/RESULTS.md fourteenth
    run). None when the product is not of that form."""
    rank = len(params.shape)
    rows = params.shape[:-1]
    if (params.shape[-1] != 1 or params.prologue != NO_PROLOGUE or params.epilogue != NO_EPILOGUE
            or params.a_strides[rank] != 1 or any(params.b_strides[:rank - 1])):
        return None
    row_stride = params.a_strides[rank - 2]
    expected = row_stride
    for d in range(rank - 2, -1, -1):
        if rows[d] != 1 and params.a_strides[d] != expected:
            return None
        expected *= rows[d]
    n_rows = math.prod(rows)
    if row_stride % GEMM_COLS or params.k % GEMM_COLS or 4 * n_rows * params.k < STREAM_MIN_B_BYTES:
        return None
    return MatmulParams(shape=(1, n_rows), k=params.k, out_strides=(n_rows, 1),
                        a_strides=(0, 0, params.b_strides[rank]), b_strides=(0, row_stride, 1))


def _lower_matmul(lw: _Lowering, op: wave.MatmulOp, ins: list[Loc], out: Loc) -> tuple:
    a, b = ins[:2]
    n_pro = len(op.prologue_inputs)
    pro_extras, extras = ins[2 : 2 + n_pro], ins[2 + n_pro :]
    full = wave.shape_of(op.result)
    ps = out.per_session
    k = wave.shape_of(op.a)[-1]

    def operand_strides(loc: Loc, role: str) -> tuple[int, ...]:
        return _matmul_operand_strides(loc.strides, loc.shape, full, ps, role)

    params = MatmulParams(
        shape=out.session_shape,
        k=k,
        out_strides=contiguous_strides(out.session_shape),
        a_strides=operand_strides(a, "a"),
        b_strides=operand_strides(b, "b"),
        epilogue=_epilogue(op, extras, out),
        prologue=_prologue(op, a, pro_extras, out),
        b_tf32=_is_bf16_weight(op.b),
    )
    transposed = transposed_matvec(params) if a.per_session else None
    if transposed is not None:
        return transposed, [b, a], out
    return params, [a, b, *pro_extras, *extras], out


def _lower_conv(lw: _Lowering, op: wave.ConvOp, ins: list[Loc], out: Loc) -> tuple:
    n_extra = len(op.epilogue_inputs)
    ins, extras = (ins[: len(ins) - n_extra], ins[len(ins) - n_extra :]) if n_extra else (ins, [])
    sw = ins[1].session_shape
    nsp = len(op.strides.get_values())
    xs, os_ = ins[0].session_shape, out.session_shape
    pads = tuple(op.pads.get_values())
    params = ConvParams(
        batch=math.prod(xs[: -nsp - 1]),
        c_in=xs[-nsp - 1],
        c_out=sw[0],
        group=op.group.value.data,
        has_bias=int(op.bias is not None),
        in_sp=tuple(xs[-nsp:]),
        out_sp=tuple(os_[-nsp:]),
        kernel=tuple(sw[2:]),
        stride=tuple(op.strides.get_values()),
        pad_begin=pads[:nsp],
        dilation=tuple(op.dilations.get_values()),
        epilogue=_epilogue(op, extras, out),
    )
    return params, [*ins, *extras], out


def _lower_reduce(lw: _Lowering, op: wave.ReduceOp, x: Loc, out: Loc) -> tuple:
    axes = tuple(op.axes.get_values())
    keep = op.keepdims.value.data
    own = x.strides
    kept = [d for d in range(len(x.shape)) if keep or d not in axes]
    in_strides = [0 if d in axes else own[d] for d in kept]
    ps = out.per_session
    params = ReduceParams(
        kind=REDUCE_KINDS.index(op.kind.data),
        shape=out.session_shape,
        out_strides=contiguous_strides(out.session_shape),
        in_strides=tuple(in_strides[1:] if ps else in_strides),
        rshape=tuple(x.shape[a] for a in axes),
        rstrides=tuple(own[a] for a in axes),
    )
    return params, [x], out


def _part_views(shapes: list[tuple[int, ...]], axis: int, out: Loc) -> list[Loc]:
    """Each concat input's part of the concat's location ``out``: a view of out's buffer at its strides."""
    views, start = [], 0
    for shape in shapes:
        views.append(Loc(out.buffer, out.offset + start * out.strides[axis],
                         (*out.shape[:axis], shape[axis], *out.shape[axis + 1 :]), out.per_session, out.strides))
        start += shape[axis]
    return views


def _concat_part_views(op: wave.ConcatOp, out: Loc) -> list[Loc]:
    """`_part_views` of a concat's inputs."""
    return _part_views([wave.shape_of(v) for v in op.operands], op.axis.value.data, out)


def _concat_parts(lw: _Lowering, ins: list[Loc], axis: int, out: Loc) -> list[tuple]:
    """The copies of each concat input into its part of ``out``; none for an input already there (a part of a
    state's new value computed in place, `_Lowering.state_in_place`)."""
    return [lw.copy_part(loc, dst) for loc, dst in zip(ins, _part_views([i.shape for i in ins], axis, out))
            if loc.view is not None or as_block(dst) is None or (loc.buffer, loc.offset) != (dst.buffer, dst.offset)]


def folds_into_copies(op: wave.ConcatOp, ins: list[Loc], lw: "_Lowering") -> bool:
    """A concat read only by model outputs and state writes is no phase: each of those copies the concat's
    inputs into its parts itself (Silero's new state [h, c], its output and its write-back: one phase and one
    handoff fewer before the beat ends; bench/RESULTS.md twenty-second run). Not when an input is (a view of)
    a state, the state writes running one after another after the graph, which might write over it first;
    unless the input is a part of the new value computed in its state slot already (`_Lowering.state_in_place`)."""
    users = [use.operation for use in op.result.uses]
    return (bool(users) and all(isinstance(u, (wave.OutputOp, wave.StateWriteOp)) for u in users)
            and all(lw.buffers[loc.buffer].arena.data != "state" or wave.reshape_chain(v)[0] in lw.states_computed
                    for v, loc in zip(op.operands, ins)))


def is_weight_concat(op: Operation) -> bool:
    """A concat of `wave.weight`s alone: a weight of the profile, its bytes concatenated at emission."""
    return isinstance(op, wave.ConcatOp) and all(isinstance(v.owner, wave.WeightOp) for v in op.operands)


def _reshape_source_index(concat: wave.ConcatOp, value: SSAValue) -> int:
    """The index of the concat input that is ``value`` read through reshapes."""
    return next(i for i, v in enumerate(concat.operands) if wave.reshape_chain(v)[0] is value)


def state_buffer_name(sym: str) -> str:
    """The wpk.buffer of state ``sym``'s slots."""
    return f"s.{sym}"


def _users_through_reshapes(value: SSAValue) -> list[Operation]:
    """The ops that read ``value``, or a reshape of it (the reshapes themselves not counted)."""
    users = []
    for use in value.uses:
        user = use.operation
        users += _users_through_reshapes(user.result) if isinstance(user, wave.ReshapeOp) else [user]
    return users


def _state_destination(value: SSAValue) -> tuple[wave.StateWriteOp, wave.ConcatOp | None] | None:
    """The state write that stores ``value`` (read through reshapes): (the write, None) when it writes value
    itself, (the write, the concat) when value is one input of a concat that only outputs and that one state
    write read (Silero's [h, c]). None when value is stored by no state write, or in more than one place."""
    found = []
    for user in _users_through_reshapes(value):
        if isinstance(user, wave.StateWriteOp):
            found.append((user, None))
        elif isinstance(user, wave.ConcatOp):
            readers = _users_through_reshapes(user.result)
            writes = [r for r in readers if isinstance(r, wave.StateWriteOp)]
            if (len(writes) == 1 and writes[0].value is user.result
                    and all(isinstance(r, wave.OutputOp) for r in readers if r is not writes[0])):
                found.append((writes[0], user))
            else:
                return None
    return found[0] if len(found) == 1 else None


def _may_write_state_early(op: wave.EwiseOp, old: SSAValue, dst: Loc, lw: _Lowering) -> bool:
    """Whether ``op`` may store its result at ``dst``, in the slot of the state whose old value is ``old``,
    during the graph: every reader of the old value but ``op`` comes before it (`_read_before`), and ``op``
    reads the old value only at ``dst`` itself, in the result's shape (element for element: no tile reads
    what another writes). Conservative: a read of old elements outside ``dst`` is refused too."""
    if not _read_before(old, op):
        return False
    for v in op.operands:
        loc = lw.locs[v]
        if wave.reshape_chain(v)[0] in lw.states_computed:  # a part of the new value, not the old
            continue
        if loc.buffer == dst.buffer and (wave.shape_of(v) != wave.shape_of(op.result) or loc.view is not None
                                         or loc.offset != dst.offset):
            return False
    return True


def slice_view(op: wave.SliceOp, x: Loc) -> Loc:
    """The slice of ``x`` as a strided view of x's buffer: no copy."""
    starts, steps = op.starts.get_values(), op.steps.get_values()
    offset = sum(s0 * s for s0, s in zip(starts, x.strides))
    view = tuple(s * st for s, st in zip(x.strides, steps))
    return Loc(x.buffer, x.offset + offset, wave.shape_of(op.result), x.per_session, view)


def as_block(view: Loc) -> Loc | None:
    """``view`` as a contiguous location (a block of its buffer at an offset: any op reads it, like a
    reshape's), or None when its elements are not laid out contiguously."""
    block = Loc(view.buffer, view.offset, view.shape, view.per_session)
    first = 1 if view.per_session else 0  # the cohort axis: sessions are a slot apart either way
    if all(a == b for a, b, size in zip(view.strides[first:], block.strides[first:], view.shape[first:]) if size > 1):
        return block
    return None


# Users whose tasks are EWISE over strided views (elementwise ops; concat, output and state-write copies)
# or that compose views (a slice of a slice): they read a slice through its view as well as through a copy.
VIEW_READERS = (wave.EwiseOp, wave.ConcatOp, wave.OutputOp, wave.StateWriteOp, wave.SliceOp)


def folds_into_users(op: wave.SliceOp) -> bool:
    """A slice read only by VIEW_READERS is lowered as a view they read through, not as a copy phase: one
    phase and one handoff fewer (Silero's STFT magnitude reads the two halves of the conv's output; its
    LSTM cell, the four gates of one matmul; its reflection pad, the reversed frame edge)."""
    return all(isinstance(use.operation, VIEW_READERS) for use in op.result.uses)


def transpose_view(op: wave.TransposeOp, x: Loc) -> Loc:
    """The transpose of ``x`` as a strided view of x's buffer."""
    return Loc(x.buffer, x.offset, wave.shape_of(op.result), x.per_session,
               tuple(x.strides[p] for p in op.perm.get_values()))


def rows_per_b_matrix(op: wave.MatmulOp) -> int:
    """How many rows of one session's output of the matmul read one matrix of its per-session b: its rows (the
    result's second-to-last dim) times the batch dims after the last one b is not broadcast along (wave-level
    `rows_per_b`). Both lead with the cohort axis, which is set aside before b's batch dims are aligned on the
    output's from the right."""
    out, b = wave.shape_of(op.result)[1:], wave.shape_of(op.operands[1])[1:]
    batch_b = (1,) * (len(out) - len(b)) + tuple(b[:-2])
    rows = out[-2]
    for size, b_size in zip(reversed(out[:-2]), reversed(batch_b)):
        if b_size != 1:
            break
        rows *= size
    return rows


def folds_into_matmuls(op: wave.TransposeOp, view: Loc) -> bool:
    """A transpose read only as MATMULs' b is lowered as its ``view`` (transpose_view), not as a copy phase,
    when the GEMM bodies read that view well:
    - b's columns contiguous (last stride 1): the streaming GEMM's form. Attention's V, a ring cache [C, H, D]
      read as [H, C, D], is one: duplex:1b copied each V cache whole every beat for it;
    - b per session with its k contiguous (second-to-last stride 1), read by matmuls of at most
      COLUMN_GEMM_ROWS rows a matrix: the column GEMM's form (`per_session_b_tiles`). Attention's K, the cache
      read as [H, D, C] with columns H x D apart, is one: its copies took duplex:1b 7.4 ms a beat at 144
      sessions (bench/RESULTS.md fourteenth run)."""
    users = list(op.result.uses)
    if not all(isinstance(use.operation, wave.MatmulOp) and use.index == 1 for use in users):
        return False
    if view.strides[-1] == 1:
        return True
    return (view.per_session and view.strides[-2] == 1
            and all(rows_per_b_matrix(use.operation) <= COLUMN_GEMM_ROWS for use in users))


def _widest_subtree(expr: Expr) -> Expr | None:
    """The largest call in `expr` that reads between 2 and MAX_INPUTS distinct inputs."""
    best = None
    stack = [expr]
    while stack:
        node = stack.pop()
        if node.kind != "call":
            continue
        used = node.inputs()
        if 2 <= len(used) <= MAX_INPUTS and (best is None or len(used) > len(best.inputs())):
            best = node
        stack.extend(node.args)
    return best


def _replace_subtree(expr: Expr, target: Expr, leaf: Expr) -> Expr:
    if expr is target:
        return leaf
    if expr.kind != "call":
        return expr
    return Expr("call", expr.value, tuple(_replace_subtree(a, target, leaf) for a in expr.args))


def split_wide_ewise(op: wave.EwiseOp) -> list[wave.EwiseOp]:
    """A task has MAX_INPUTS input slots: an expression over more inputs is computed in several ewise ops,
    innermost subtrees first. Returns the ops that replace `op`, in order (the last gives its result)."""
    expr, operands, ops = parse_expr(op.expr.data), list(op.inputs), []
    while len(expr.inputs()) > MAX_INPUTS:
        sub = _widest_subtree(expr)
        used = sorted(sub.inputs())
        shape = wave.broadcast_shapes([wave.shape_of(operands[i]) for i in used])
        part = wave.EwiseOp(str(sub.substitute({i: Expr("input", k) for k, i in enumerate(used)})),
                            [operands[i] for i in used], shape)
        ops.append(part)
        operands.append(part.result)
        expr = _replace_subtree(expr, sub, Expr("input", len(operands) - 1))
    live = sorted(expr.inputs())
    final = wave.EwiseOp(str(expr.substitute({i: Expr("input", k) for k, i in enumerate(live)})),
                         [operands[i] for i in live], wave.shape_of(op.result))
    return [*ops, final]


# Reductions that give their one element back: over axes of size 1 they are a reshape (a rename, no task).
IDENTITY_ON_ONE = ("sum", "mean", "max", "min", "prod", "logsumexp")


def is_unit_reduction(op: wave.ReduceOp) -> bool:
    """Silero's last op is a mean over its decoder's one output frame."""
    shape = wave.shape_of(op.x)
    return op.kind.data in IDENTITY_ON_ONE and all(shape[a] == 1 for a in op.axes.get_values())


def sole_output(value: SSAValue) -> wave.OutputOp | None:
    """The model output that is ``value``, read through reshapes and unit reductions (the same elements in the
    same order), when nothing else reads it or those views; else None."""
    use = value.get_unique_use()
    if use is None:
        return None
    user = use.operation
    if isinstance(user, wave.OutputOp):
        return user
    if isinstance(user, wave.ReshapeOp) or isinstance(user, wave.ReduceOp) and is_unit_reduction(user):
        return sole_output(user.result)
    return None


def _kept_operand(op: Operation) -> SSAValue | None:
    """The operand an EWISE ``select(c, a, %k)`` keeps where c is 0 (wavec.opcodes.kept_input), when the result
    has its shape; None otherwise."""
    if not isinstance(op, wave.EwiseOp):
        return None
    k = kept_input(parse_expr(op.expr.data))
    if k < 0 or wave.shape_of(op.operands[k]) != wave.shape_of(op.result):
        return None
    return op.operands[k]


def _is_view(op: Operation) -> bool:
    """Whether ``op`` may be lowered as a view of its input's buffer (`_lower_op`): a reshape, a reduction over
    axes of size 1, a slice or a transpose (one that folds into its users; taken as a view either way)."""
    return (isinstance(op, (wave.ReshapeOp, wave.SliceOp, wave.TransposeOp))
            or isinstance(op, wave.ReduceOp) and is_unit_reduction(op))


def _buffer_readers(value: SSAValue) -> list[Operation]:
    """The ops that read ``value``'s buffer: its users, and the users of any view of it (`_is_view`)."""
    readers = []
    for use in value.uses:
        readers.append(use.operation)
        if _is_view(use.operation):
            readers += _buffer_readers(use.operation.result)
    return readers


def _read_before(value: SSAValue, writer: Operation) -> bool:
    """Whether every reader of ``value``'s buffer (`_buffer_readers`) but ``writer`` is a compute op placed
    before ``writer``: outputs and state writes are lowered after the graph, so they would read what
    ``writer`` stores over it."""
    return all(reader is writer or not isinstance(reader, (wave.OutputOp, wave.StateWriteOp))
               and reader.is_before_in_block(writer) for reader in _buffer_readers(value))


def _may_write_over(version: SSAValue, update: Operation) -> bool:
    """Whether ``update`` (an in-place select keeping ``version``) may write over ``version``'s buffer: every
    other reader of it comes before the update (`_read_before`), and the update reads it only element for
    element, as its kept input (through another view it would read elements other tiles write)."""
    if not _read_before(version, update):
        return False
    if any(_is_view(reader) and reader.result in update.operands for reader in _buffer_readers(version)):
        return False
    return [v for v in update.operands if v is version] == [version]


def updates_state_in_place(op: Operation) -> SSAValue | None:
    """The state whose buffer an EWISE ``select(c, a, %k)`` may write in place, element for element. Input k is
    a state nothing else reads, or an earlier such update of it, and the chain of updates ends in the state's
    write (a ring cache's write, ``select(eq(iota, fmod(pos, C)), new, cache)``, once per model step). Each
    update must be allowed to write over the version it keeps (`_may_write_over`): the lowering keeps block
    order, so the readers of a version run before the next update only if they come before it. None
    otherwise."""
    kept = _kept_operand(op)
    if kept is None or not _may_write_over(kept, op):
        return None
    if isinstance(kept.owner, wave.StateOp):
        state = kept if kept.has_one_use() else None
    else:
        updaters = [u.operation for u in kept.uses if _kept_operand(u.operation) is kept]
        state = updates_state_in_place(kept.owner) if updaters == [op] else None
    if state is None:
        return None
    value = op.result
    while True:
        users = [u.operation for u in value.uses]
        if any(isinstance(u, wave.StateWriteOp) and u.sym == state.owner.sym for u in users):
            return state
        updaters = [u for u in users if _kept_operand(u) is value]
        if len(updaters) != 1 or not _may_write_over(value, updaters[0]):
            return None
        value = updaters[0].result


def _lower_op(lw: _Lowering, op: Operation, index: int) -> None:
    if isinstance(op, wave.ReshapeOp) or isinstance(op, wave.ReduceOp) and is_unit_reduction(op):
        src = lw.loc(op.x, op)
        lw.locs[op.result] = Loc(src.buffer, src.offset, wave.shape_of(op.result), src.per_session)
        return
    if isinstance(op, wave.SliceOp):
        view = slice_view(op, lw.loc(op.x, op))
        block = as_block(view)
        if block is not None or folds_into_users(op):
            lw.locs[op.result] = block or view
            return
    if isinstance(op, wave.TransposeOp):
        view = transpose_view(op, lw.loc(op.x, op))
        if folds_into_matmuls(op, view):
            lw.locs[op.result] = view
            return
    if is_weight_concat(op):
        lw.locs[op.result] = lw.stacked_weight(op)
        return
    ins = [lw.loc(v, op) for v in op.operands]
    if isinstance(op, wave.ConcatOp) and lw.concats_into_copies and folds_into_copies(op, ins, lw):
        lw.copied_concats[op.result] = (ins, op.axis.value.data)
        return
    state = updates_state_in_place(op)
    if state is not None:
        out = lw.loc(state, op)
    else:
        out = (lw.destinations.get(op.result) or lw.output_in_place(op.result) or lw.state_in_place(op)
               or lw.concat_in_place(op) or lw.act(op.result))
    lw.locs[op.result] = out
    name = _source_name(op, index)
    if isinstance(op, wave.EwiseOp):
        parts = [lw.ewise_part(op.expr.data, ins, out, out.shape)]
        if len(ins) > MAX_INPUTS:
            raise PassFailedException(f"wave-to-wpk: wave.ewise has {len(ins)} inputs, a task takes {MAX_INPUTS}")
    elif isinstance(op, wave.MatmulOp):
        parts = [_lower_matmul(lw, op, ins, out)]
    elif isinstance(op, wave.ConvOp):
        parts = [_lower_conv(lw, op, ins, out)]
    elif isinstance(op, wave.ReduceOp):
        parts = [_lower_reduce(lw, op, ins[0], out)]
    elif isinstance(op, wave.ConcatOp):
        parts = _concat_parts(lw, ins, op.axis.value.data, out)
        if not parts:  # every input computed in its part (`_Lowering.concat_in_place`)
            return
    elif isinstance(op, wave.SliceOp):
        parts = [lw.copy_part(slice_view(op, ins[0]), out)]
    elif isinstance(op, wave.TransposeOp):
        parts = [lw.copy_part(transpose_view(op, ins[0]), out)]
    else:
        raise PassFailedException(f"wave-to-wpk: no lowering for {op.name}")
    if isinstance(op, (wave.MatmulOp, wave.ConvOp)) and len(parts[0][1]) > MAX_INPUTS:
        raise PassFailedException(
            f"wave-to-wpk: {op.name} with its prologue and epilogue reads {len(parts[0][1])} inputs, a task takes {MAX_INPUTS}"
        )
    lw.phases.append(lw.phase(name, op.name, parts))


def _lower_boundary(lw: _Lowering, op: Operation, paired_outputs: dict[str, str]) -> bool:
    """Inputs, weights, states, outputs and state writes; returns False for a compute op."""
    if isinstance(op, wave.InputOp):
        shape = wave.shape_of(op.result)
        axis = _cohort_axis(op)
        lw.locs[op.result] = lw.buffer(f"in.{op.sym}", "input", "input", shape, True, model_name=op.sym,
                                       shape=_user_shape(shape[1:], axis), cohort_axis=axis)
    elif isinstance(op, wave.WeightOp):
        users = [use.operation for use in op.result.uses]
        if not users or not all(is_weight_concat(u) for u in users):  # else only a part of stacked weights: no bytes
            lw.locs[op.result] = lw.buffer(f"w.{op.sym}", "weights", "weight", wave.shape_of(op.result), False,
                                           blob=op.sym)
    elif isinstance(op, wave.StateOp):
        shape = wave.shape_of(op.result)
        axis = _cohort_axis(op)
        init = lw.buffer(f"init.{op.sym}", "weights", "weight", shape[1:], False, blob=op.sym)
        state = lw.buffer(state_buffer_name(op.sym), "state", "state", shape, True, model_name=op.sym, init=init.buffer,
                          shape=_user_shape(shape[1:], axis), cohort_axis=axis,
                          output=paired_outputs.get(op.sym, ""))
        lw.locs[op.result] = state
        lw.states[op.sym] = op.result
        reset = lw.reset_flags(len(shape))
        lw.resets.append(lw.phase(f"reset_{op.sym}", "wave.state", [lw.ewise_part("select(%0, %1, %2)", [reset, init, state], state, state.shape)]))
    elif isinstance(op, wave.OutputOp):
        if op in lw.outputs_computed:  # in place (_Lowering.output_in_place)
            return True
        lw.outputs.append(lw.phase(f"output_{op.sym}", op.name, lw.copy_parts(op.value, op, lw.output_buffer(op))))
    elif isinstance(op, wave.StateWriteOp):
        if state_buffer_name(op.sym) not in lw.buffers:
            raise PassFailedException(f"wave-to-wpk: wave.state_write {op.sym!r} writes no state: declare it with "
                                      f"wave.state {op.sym!r} first")
        dst = lw.buffers[state_buffer_name(op.sym)]
        dst_loc = Loc(dst.buffer_name, 0, wave.shape_of(op.value), True)
        if op.value in lw.copied_concats:
            parts = lw.copy_parts(op.value, op, dst_loc)
            if parts:  # none when every part was computed in its slot
                lw.state_writes.append(lw.phase(f"state_write_{op.sym}", op.name, parts))
            return True
        src = lw.loc(op.value, op)
        if src == dst_loc:
            return True
        if lw.buffers[src.buffer].arena.data == "state":
            # The new value is (a view of) an old state, its own or another's: the state writes run after
            # the graph, one after another, so copy it out during the graph, before any of them writes over it.
            held = lw.act_buffer(wave.shape_of(op.value), per_session=True)
            lw.phases.append(lw.phase(f"state_hold_{op.sym}", op.name, [lw.copy_part(src, held)]))
            src = held
        lw.state_writes.append(lw.phase(f"state_write_{op.sym}", op.name, [lw.copy_part(src, dst_loc)]))
    else:
        return False
    return True


def _cohort_axis(op: Operation) -> int:
    attr = op.attributes.get("cohort_axis")
    return attr.value.data if attr is not None else -1


def _paired_outputs(block) -> dict[str, str]:
    """state name -> the model output that reports the same value (Silero's stateN for state)."""
    pairs = {}
    for op in block.ops:
        if isinstance(op, wave.StateWriteOp):
            for use in op.value.uses:
                if isinstance(use.operation, wave.OutputOp):
                    pairs[op.sym] = use.operation.sym
    return pairs


@dataclass(frozen=True)
class WaveToWpk(ModulePass):
    """Lowers the cohort-batched wave graph to wpk buffers, phases and tiled tasks; an op that only an output
    reads writes that output, an elementwise op computing a state's new value writes the state, and a concat
    that only outputs and state writes read is their copies."""

    name = "wave-to-wpk"
    workers: int = field(default=132, metadata={"help": "workers (one block per SM) an op's tiles should fill"})
    min_tile_elems: int = field(default=8, metadata={"help": "smallest tile, in output elements per session"})
    min_tile_flops: int = field(
        default=8192, metadata={"help": "smallest tile, in FLOPs per session (cheap ops get longer tiles)"}
    )
    outputs_in_place: bool = field(
        default=True, metadata={"help": "an op whose result is only a model output writes the output buffer (no copy)"}
    )
    concats_into_copies: bool = field(
        default=True, metadata={"help": "a concat that only outputs and state writes read is their copies (no phase)"}
    )
    states_in_place: bool = field(
        default=True, metadata={"help": "an elementwise op computing (a part of) a state's new value writes the "
                                        "state's slot when the old value's readers come before it (no copy)"}
    )

    concats_in_place: bool = field(
        default=True, metadata={"help": "a value only one concat reads is computed into its part of the concat's "
                                        "buffer when that part is contiguous (no copy)"}
    )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        n = wave.cohort_size(op)
        if n is None:
            raise PassFailedException("wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first")
        for option, value, least in (("workers", self.workers, 1), ("min-tile-elems", self.min_tile_elems, 1),
                                     ("min-tile-flops", self.min_tile_flops, 0)):
            if value < least:
                raise PassFailedException(f"wave-to-wpk: {option} must be >= {least}, got {value}")
        block = wave.graph_block(op)
        lw = _Lowering(n, self.workers, self.min_tile_elems, self.min_tile_flops, self.outputs_in_place,
                       self.concats_into_copies, self.states_in_place, self.concats_in_place)
        pairs = _paired_outputs(block)
        for node in list(block.ops):
            if isinstance(node, wave.EwiseOp) and len(node.inputs) > MAX_INPUTS:
                Rewriter.replace_op(node, split_wide_ewise(node))
        for index, node in enumerate(block.ops):
            if node.name == "func.return" or _lower_boundary(lw, node, pairs):
                continue
            _lower_op(lw, node, index)
        op.body.block.erase_op(block.parent_op())
        program = [*lw.buffers.values(), *lw.resets, *lw.phases, *lw.outputs, *lw.state_writes]
        op.body.block.add_ops(program)
        op.attributes["wpk.workers"] = IntegerAttr(self.workers, i64)
