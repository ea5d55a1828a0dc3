"""Prepared tasks: each task's index arithmetic done once, so a beat only gathers, computes and scatters.

A task runs every beat with the same tile, operands and arena offsets, so everything but the arena
contents is fixed: `prepare_task` computes, once, the element indices of every operand (exactly as the
reference bodies in bodies.py do, with the same bounds checks and error messages) and returns a closure
``run(mem)`` that reads the operands from this beat's arenas, computes, and writes the output back.
The results are bit-identical to bodies.run_task:

- EWISE and REDUCE gather with the cached indices (a contiguous operand is sliced, not gathered) and run
  the same numpy operations (the bytecode is turned into one Python function once per distinct program).
- A MATMUL with a prologue gathers a and the prologue's extras with cached indices, runs the prologue
  program in float32 and then the reference's products (it takes neither the rectangles nor the weight cache
  for a).
- MATMUL and CONV split the tile into rectangles ``rows x cols`` of the output (rows of the matmul's m or
  the conv's output channels, columns of n or output positions) within which one operand depends only on
  the row and the other only on the column, checked on the indices themselves. Each rectangle is one
  ``einsum('ir,jr->ij', rows, cols)`` over contiguous float64 rows, which computes each output element
  with the same sum-of-products loop over the contiguous reduction axis as the reference's
  ``einsum('ser,ser->se')`` over gathered copies. A tile that does not split into a few rectangles
  gathers like the reference does, with cached indices.
- Rows read from the WEIGHTS arena (read-only; the machine rejects writes to it) are converted to
  float64 once per interpreter and shared between tasks.

Cached indices are int32 where the gathered window fits; a task whose cached data would exceed
`TASK_CACHE_ELEMS` elements, or an interpreter past `CACHE_BYTES` in all, runs the reference body instead.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from wavec.errors import RuntimeBackendError
from wavec.opcodes import (
    BINARY,
    REDUCE_KINDS,
    TERNARY,
    UNARY,
    Arena,
    ConvParams,
    EwiseParams,
    Insn,
    MatmulParams,
    Opcode,
    ReduceParams,
    _BINARY_NP,
    _TERNARY_NP,
    _UNARY_NP,
    bits_f32,
    decode_insn,
    view_offsets,
)

from .bodies import (
    _BODIES,
    REDUCE_IDENTITY,
    TaskPlan,
    _chunks,
    _indices,
    _reduce_values,
    conv_gather,
    prologue_rel,
)

TASK_CACHE_ELEMS = 1 << 22  # cached index / weight elements per task
CACHE_BYTES = 1 << 30  # cached bytes per interpreter
MAX_RECTS = 8  # rectangles per session of a MATMUL / CONV tile before it falls back to gathers

Runner = Callable[[dict], None]
_F32 = np.float32
_F64 = np.float64


class TaskCache:
    """Data shared by the prepared tasks of one interpreter: float64 copies of weight rows, and the bytes
    cached so far (to stay under CACHE_BYTES)."""

    def __init__(self, limit: int = CACHE_BYTES):
        self.limit = limit
        self.bytes = 0
        self.weights: dict[tuple, np.ndarray] = {}
        self.rel: dict[tuple, tuple] = {}  # conv tiles' relative indices, shared by the sessions' tasks

    def reserve(self, nbytes: int) -> bool:
        if self.bytes + nbytes > self.limit:
            return False
        self.bytes += nbytes
        return True


def _noop(mem: dict) -> None:
    return None


def prepare_task(plan: TaskPlan, mem: dict[Arena, np.ndarray], cache: TaskCache | None = None) -> Runner:
    """Checks ``plan`` against the arena sizes of ``mem`` (raising what bodies.run_task raises) and returns
    ``run(mem)``, which executes the task against any beat's arenas of the same sizes."""
    if plan.elems[0] >= plan.elems[1] or plan.sessions[0] >= plan.sessions[1]:
        return _noop
    cache = cache if cache is not None else TaskCache()
    prep = _PREPARE[plan.opcode]
    runner = prep(plan, plan.params, mem, cache)
    if runner is None:  # too large or unusual to cache: the reference body, every beat
        body = _BODIES[plan.opcode]
        params = plan.params
        return lambda m: body(plan, params, m)
    return runner


# --------------------------------------------------------------------------------------------
# Gathers and scatters with cached indices.


def _window(idx: np.ndarray) -> tuple[int, int, np.ndarray | None]:
    """(lo, hi, local): ``idx`` (absolute, checked) as a window ``[lo, hi)`` of its arena and indices into
    that window (int32 where they fit), or None as ``local`` when the window, reshaped, is ``idx``."""
    if idx.size == 0:
        return 0, 0, np.zeros(idx.shape, np.int32)
    lo, hi = int(idx.min()), int(idx.max()) + 1
    local = idx - lo
    if hi - lo == idx.size and np.array_equal(local.ravel(), np.arange(idx.size)):
        return lo, hi, None
    return lo, hi, local.astype(np.int32 if hi - lo < 2**31 else np.int64)


class _Read:
    """Reads ``mem[arena][idx]`` (shape ``idx.shape``, float32) for a fixed index array."""

    __slots__ = ("arena", "lo", "hi", "local", "shape", "copy")

    def __init__(self, arena: Arena, idx: np.ndarray):
        self.arena = arena
        self.lo, self.hi, self.local = _window(idx)
        self.shape = idx.shape
        self.copy = False  # set when the output overlaps the window: never hand out a view of it

    @property
    def cached(self) -> int:
        return 0 if self.local is None else self.local.size

    def __call__(self, mem: dict) -> np.ndarray:
        v = mem[self.arena][self.lo : self.hi]
        if self.local is None:
            v = v.reshape(self.shape)
            return v.copy() if self.copy else v
        return v.take(self.local)

    def overlaps(self, other: "_Read") -> bool:
        return self.arena == other.arena and self.lo < other.hi and other.lo < self.hi


def _f64_rows(arena: Arena, idx: np.ndarray, mem: dict, cache: TaskCache) -> Callable[[dict], np.ndarray] | None:
    """A getter of ``mem[arena][idx].astype(float64)``: a shared constant for the WEIGHTS arena."""
    if arena != Arena.WEIGHTS:
        r = _Read(arena, idx)
        return lambda m: r(m).astype(_F64)
    key = (tuple(idx.shape), int(idx.min()) if idx.size else 0, idx.tobytes())
    rows = cache.weights.get(key)
    if rows is None:
        if not cache.reserve(idx.size * 8):
            return None
        rows = cache.weights[key] = mem[arena][idx].astype(_F64)
        rows.flags.writeable = False
    return lambda m: rows


class _Write:
    """Writes float32 values (broadcast to ``idx.shape``) to ``mem[arena][idx]``."""

    __slots__ = ("arena", "lo", "hi", "local", "shape")

    def __init__(self, arena: Arena, idx: np.ndarray):
        self.arena = arena
        self.lo, self.hi, self.local = _window(idx)
        self.shape = idx.shape

    @property
    def cached(self) -> int:
        return 0 if self.local is None else self.local.size

    def __call__(self, mem: dict, values) -> None:
        values = np.asarray(values, _F32)
        dst = mem[self.arena][self.lo : self.hi]
        if self.local is None:
            dst.reshape(self.shape)[...] = values
        else:
            dst[self.local] = np.broadcast_to(values, self.shape)

    def overlaps(self, r: _Read) -> bool:
        return self.arena == r.arena and self.lo < r.hi and r.lo < self.hi


class _EpilogueWrite:
    """A _Write that first applies a MATMUL / CONV epilogue: reads the extra inputs of the chunk's elements
    (cached indices) and runs the epilogue program on (accumulator, extras), as bodies._epilogue does."""

    __slots__ = ("write", "program", "reads", "shape")

    def __init__(self, write: _Write, program: Callable, reads: list[_Read], shape: tuple[int, int]):
        self.write, self.program, self.reads, self.shape = write, program, reads, shape
        for r in reads:
            r.copy = write.overlaps(r)

    @property
    def cached(self) -> int:
        return self.write.cached + sum(r.cached for r in self.reads)

    def overlaps(self, r: _Read) -> bool:
        return self.write.overlaps(r)

    def __call__(self, mem: dict, values) -> None:
        acc = np.broadcast_to(np.asarray(values, _F32), self.shape)
        extras = [r(mem) for r in self.reads]
        with np.errstate(all="ignore"):
            result = self.program([acc, *extras])
        self.write(mem, result)


def _out_epilogue(plan: TaskPlan, p, lo: int, hi: int, rel: np.ndarray, mem: dict):
    """The output write of elements ``[lo, hi)`` of a MATMUL / CONV task, through its epilogue if it has
    one; False when the epilogue's program is malformed (the reference body then runs, and raises)."""
    ep = p.epilogue
    if not ep.code:
        return _out(plan, rel, mem)
    program = compile_program(ep.code)
    if program is None:
        return False
    reads = [  # bounds-checked before the output, in the reference's order
        _Read(op.arena, _indices(plan, op, view_offsets(ep.shape, st, lo, hi), mem))
        for op, st in zip(plan.inputs[p.epilogue_slot :], ep.strides)
    ]
    return _EpilogueWrite(_out(plan, rel, mem), program, reads, (plan.n_sessions, hi - lo))


def _check_writable(plan: TaskPlan) -> None:
    op = plan.out
    if op.arena in (Arena.WEIGHTS, Arena.INPUT):
        raise RuntimeBackendError(
            f"{plan.describe()}: writes its output into the read-only {op.arena.name.lower()} arena"
        )


def _out(plan: TaskPlan, rel: np.ndarray, mem: dict) -> _Write:
    """The checks of bodies._write (read-only arena, then bounds), once."""
    _check_writable(plan)
    return _Write(plan.out.arena, _indices(plan, plan.out, rel, mem))


# --------------------------------------------------------------------------------------------
# Elementwise programs: bytecode -> one Python function, computing exactly what run_bytecode does.

_PROGRAMS: dict[tuple[int, ...], Callable | None] = {}


def compile_program(code: tuple[int, ...]) -> Callable | None:
    """``fn(inputs)`` equal to ``run_bytecode(code, inputs)`` for float32 array inputs (without its errstate:
    the caller holds one), or None when the program is malformed (run_bytecode then raises as before)."""
    code = tuple(int(w) for w in code)
    if code in _PROGRAMS:
        return _PROGRAMS[code]
    env: dict[str, object] = {"asarray": np.asarray, "f32": _F32}
    lines, stack, n = [], [], 0
    try:
        for word in code:
            kind, op, arg = decode_insn(word)
            dst = f"s{n}"
            n += 1
            if kind == Insn.INPUT:
                lines.append(f"{dst} = asarray(ins[{arg}], f32)")
            elif kind == Insn.CONST:
                env[f"k{n}"] = _F32(bits_f32(arg))
                lines.append(f"{dst} = k{n}")
            elif kind == Insn.UNARY:
                if op >= len(UNARY):
                    raise ValueError(op)
                env[f"u{op}"] = _UNARY_NP[op]
                lines.append(f"{dst} = asarray(u{op}({stack.pop()}), f32)")
            elif kind == Insn.BINARY:
                if op >= len(BINARY):
                    raise ValueError(op)
                b, a = stack.pop(), stack.pop()
                env[f"b{op}"] = _BINARY_NP[op]
                lines.append(f"{dst} = asarray(b{op}({a}, {b}), f32)")
            else:
                if op >= len(TERNARY):
                    raise ValueError(op)
                b, a, c = stack.pop(), stack.pop(), stack.pop()
                env[f"t{op}"] = _TERNARY_NP[op]
                lines.append(f"{dst} = asarray(t{op}({c}, {a}, {b}), f32)")
            stack.append(dst)
        if len(stack) != 1:
            raise ValueError("stack")
    except (ValueError, IndexError):
        _PROGRAMS[code] = None
        return None
    body = "\n    ".join(lines + [f"return {stack[0]}"])
    exec(f"def program(ins):\n    {body}\n", env)  # noqa: S102 - generated from decoded opcodes only
    fn = env["program"]
    _PROGRAMS[code] = fn  # type: ignore[assignment]
    return fn  # type: ignore[return-value]


def _prep_ewise(plan: TaskPlan, p: EwiseParams, mem: dict, cache: TaskCache) -> Runner | None:
    program = compile_program(p.code)
    if program is None:
        return None
    eb, ee = plan.elems
    reads = [
        _Read(op.arena, _indices(plan, op, view_offsets(p.shape, st, eb, ee), mem))
        for op, st in zip(plan.inputs, p.in_strides)
    ]
    write = _out(plan, view_offsets(p.shape, p.out_strides, eb, ee), mem)
    for r in reads:
        r.copy = write.overlaps(r)
    if not _fits(cache, [*reads, write], 4):
        return None

    if len(reads) == 1:
        (r0,) = reads

        def run1(m: dict) -> None:
            with np.errstate(all="ignore"):
                result = program([r0(m)])
            write(m, result)

        return run1

    def run(m: dict) -> None:
        ins = [r(m) for r in reads]
        with np.errstate(all="ignore"):
            result = program(ins)
        write(m, result)

    return run


def _fits(cache: TaskCache, parts, itemsize: int, extra: int = 0) -> bool:
    n = sum(x.cached for x in parts) + extra
    return n <= TASK_CACHE_ELEMS and cache.reserve(n * itemsize)


# --------------------------------------------------------------------------------------------
# REDUCE: cached gathers per chunk, then the reference's reduction.


def _prep_reduce(plan: TaskPlan, p: ReduceParams, mem: dict, cache: TaskCache) -> Runner | None:
    if not 0 <= p.kind < len(REDUCE_KINDS):
        return None  # the reference body raises
    kind = REDUCE_KINDS[p.kind]
    r = int(np.prod(p.rshape, dtype=np.int64))
    red_rel = view_offsets(p.rshape, p.rstrides, 0, r)
    steps: list[tuple[_Read | None, _Write]] = []
    for lo, hi in _chunks(*plan.elems, r, plan.n_sessions):
        out_rel = view_offsets(p.shape, p.out_strides, lo, hi)
        if r == 0:
            steps.append((None, _out(plan, out_rel, mem)))
            continue
        in_rel = view_offsets(p.shape, p.in_strides, lo, hi)[:, None] + red_rel[None, :]
        read = _Read(plan.inputs[0].arena, _indices(plan, plan.inputs[0], in_rel, mem))
        steps.append((read, _out(plan, out_rel, mem)))
    if len(steps) > 1 and any(rd is not None and w.overlaps(rd) for rd, _ in steps for _, w in steps):
        return None  # chunks read what earlier chunks wrote: keep the reference's interleaving
    if not _fits(cache, [x for s in steps for x in s if x is not None], 4):
        return None
    identity = _F32(REDUCE_IDENTITY[kind])

    def run(m: dict) -> None:
        for read, write in steps:
            if read is None:
                write(m, identity)
                continue
            v = read(m).astype(_F64)
            with np.errstate(all="ignore"):
                write(m, _reduce_values(kind, v).astype(_F32))

    return run


# --------------------------------------------------------------------------------------------
# MATMUL and CONV: out[s, e] = sum_r lhs[s, e, r] * rhs[s, e, r], as rectangles or as gathers.


def _rects(lo: int, hi: int, cols: int, period: int) -> list[tuple[int, int, int, int]]:
    """Splits the flat range [lo, hi) of a ``[rows, cols]`` grid into rectangles (row_lo, row_hi, col_lo,
    col_hi) in flat order, none crossing a multiple of ``period`` rows. Each covers a contiguous range."""
    out = []
    q, c = divmod(lo, cols)
    qe, ce = divmod(hi, cols)
    if q == qe:
        return [(q, q + 1, c, ce)] if ce > c else []
    if c:
        out.append((q, q + 1, c, cols))
        q += 1
    while q < qe:
        nxt = min(qe, (q // period + 1) * period)
        out.append((q, nxt, 0, cols))
        q = nxt
    if ce:
        out.append((qe, qe + 1, 0, ce))
    return out


def _split(idx: np.ndarray, f0: int, nr: int, nc: int, by_row: bool) -> np.ndarray | None:
    """For the rectangle of ``nr x nc`` elements from flat ``f0`` of one session's ``idx [E, R]``: the
    ``[nr, R]`` (by_row) or ``[nc, R]`` indices, when ``idx`` depends on the row (column) alone there."""
    block = idx[f0 : f0 + nr * nc].reshape(nr, nc, *idx.shape[1:])
    first = block[:, :1] if by_row else block[:1]
    if not np.array_equal(block, np.broadcast_to(first, block.shape)):
        return None
    return np.ascontiguousarray(first[:, 0] if by_row else first[0])


class _Rows:
    """float64 ``[n, R]`` rows of an operand: gathered per beat, or a shared copy of weights. ``valid`` (a
    mask, for conv padding) zeroes the masked reads, as the reference does."""

    def __init__(self, arena: Arena, idx: np.ndarray, valid: np.ndarray | None, mem: dict, cache: TaskCache):
        self.get = None
        self.cached = 0
        if valid is not None and valid.all():
            valid = None
        if arena == Arena.WEIGHTS:
            if valid is None:
                got = _f64_rows(arena, idx, mem, cache)
            else:
                key = ("masked", tuple(idx.shape), idx.tobytes(), valid.tobytes())
                rows = cache.weights.get(key)
                if rows is None and cache.reserve(idx.size * 8):
                    rows = cache.weights[key] = np.where(valid, mem[arena][idx], _F32(0)).astype(_F64)
                got = None if rows is None else (lambda m, rows=rows: rows)
            self.get = got
            return
        if valid is None:
            r = _Read(arena, idx)
            self.cached = r.cached
            self.get = lambda m: r(m).astype(_F64)
            return
        lo, hi, _ = _window(idx[valid])
        local = np.where(valid, idx - lo, hi - lo).astype(np.int32 if hi - lo + 1 < 2**31 else np.int64)
        self.cached = local.size
        n = hi - lo

        def get(m: dict) -> np.ndarray:
            pad = np.empty(n + 1, _F64)
            pad[:n] = m[arena][lo:hi]
            pad[n] = 0.0
            return pad.take(local)

        self.get = get


def _rect_plan(plan, mem, cache, chunk_idx, lhs_arena, rhs_arena, rows_are_lhs, cols, period, row_of):
    """Rectangles of one tile. ``chunk_idx``: per session, (lhs [E, R], lhs valid or None, rhs [E, R]) of
    the whole tile (one chunk). ``rows_are_lhs``: whether the lhs depends on the row (conv: the weights,
    which is rhs, does). Returns [(session, f0, f1, row getter, col getter, row ids)] or None."""
    eb, ee = plan.elems
    rects = _rects(eb, ee, cols, period)
    if len(rects) > MAX_RECTS:
        return None
    ops = []
    cached = 0
    for s, (lhs, lvalid, rhs) in enumerate(chunk_idx):
        for q0, q1, c0, c1 in rects:
            nr, nc = q1 - q0, c1 - c0
            f0 = q0 * cols + c0 - eb
            row_op, col_op = (lhs, rhs) if rows_are_lhs else (rhs, lhs)
            row_arena, col_arena = (lhs_arena, rhs_arena) if rows_are_lhs else (rhs_arena, lhs_arena)
            ri = _split(row_op, f0, nr, nc, True)
            ci = _split(col_op, f0, nr, nc, False)
            if ri is None or ci is None:
                return None
            rv = cv = None
            if lvalid is not None:
                v = _split(lvalid, f0, nr, nc, rows_are_lhs)
                if v is None:
                    return None
                rv, cv = (v, None) if rows_are_lhs else (None, v)
            rg, cg = _Rows(row_arena, ri, rv, mem, cache), _Rows(col_arena, ci, cv, mem, cache)
            if rg.get is None or cg.get is None:
                return None
            cached += rg.cached + cg.cached
            ops.append((s, f0, f0 + nr * nc, nr, nc, rg.get, cg.get, row_of[q0:q1] if row_of is not None else None))
    if not _fits(cache, [], 4, cached):
        return None
    return ops


def _mm_runner(n_sessions: int, n_elems: int, ops, bias, write: _Write) -> Runner:
    einsum = np.einsum

    def run(m: dict) -> None:
        acc = np.empty((n_sessions, n_elems), _F64)
        b = bias(m) if bias is not None else None
        for s, f0, f1, nr, nc, rows, cols, row_ids in ops:
            res = einsum("ir,jr->ij", rows(m), cols(m))
            if b is not None:
                res = res + b[s, row_ids][:, None]
            acc[s, f0:f1] = res.reshape(-1)
        write(m, acc.astype(_F32))

    return run


def _prep_matmul(plan: TaskPlan, p: MatmulParams, mem: dict, cache: TaskCache) -> Runner | None:
    a_op, b_op = plan.inputs[:2]
    ks = np.arange(p.k, dtype=np.int64)
    chunks, pro_chunks = [], []
    for lo, hi in _chunks(*plan.elems, p.k, plan.n_sessions):
        out_rel = view_offsets(p.shape, p.out_strides, lo, hi)
        if p.k == 0:
            write = _out_epilogue(plan, p, lo, hi, out_rel, mem)
            if write is False:
                return None
            chunks.append((None, None, write))
            continue
        a_rel = view_offsets(p.shape, p.a_strides[:-1], lo, hi)[:, None] + ks[None, :] * p.a_strides[-1]
        b_rel = view_offsets(p.shape, p.b_strides[:-1], lo, hi)[:, None] + ks[None, :] * p.b_strides[-1]
        a_idx = _indices(plan, a_op, a_rel, mem)
        pro_idx = [_indices(plan, op, rel, mem) for op, rel in zip(plan.inputs[2:], prologue_rel(p, lo, hi))]
        b_idx = _indices(plan, b_op, b_rel, mem)
        write = _out_epilogue(plan, p, lo, hi, out_rel, mem)
        if write is False:
            return None
        chunks.append((a_idx, b_idx, write))
        pro_chunks.append(pro_idx)
    if p.k == 0:
        if not _fits(cache, [w for _, _, w in chunks], 4):
            return None
        zero = _F32(0)
        writes = [w for _, _, w in chunks]

        def run0(m: dict) -> None:
            for w in writes:
                w(m, zero)

        return run0
    if p.prologue.code:
        return _prologue_dot(plan, p, mem, cache, chunks, pro_chunks)
    if len(chunks) == 1 and len(p.shape) >= 2:
        a_idx, b_idx, write = chunks[0]
        if not (write.overlaps(_Read(a_op.arena, a_idx)) or write.overlaps(_Read(b_op.arena, b_idx))):
            n = p.shape[-1]
            m_rows = p.shape[-2]
            ops = _rect_plan(plan, mem, cache, [(a_idx[s], None, b_idx[s]) for s in range(plan.n_sessions)],
                             a_op.arena, b_op.arena, True, n, m_rows, None)
            if ops is not None and _fits(cache, [write], 4):
                return _mm_runner(plan.n_sessions, plan.elems[1] - plan.elems[0], ops, None, write)
    return _gather_dot(
        plan, mem, cache, [(a_op.arena, a_idx, None, b_op.arena, b_idx, w, None) for a_idx, b_idx, w in chunks], None
    )


def _prologue_dot(plan: TaskPlan, p: MatmulParams, mem: dict, cache: TaskCache, chunks, pro_chunks) -> Runner | None:
    """A MATMUL with a prologue, the reference's way with cached indices: per chunk, gather a and the
    prologue's extras [S, E, K], run the prologue program in float32, then the float64 products."""
    program = compile_program(p.prologue.code)
    if program is None:
        return None  # the reference body raises
    a_op, b_op = plan.inputs[:2]
    steps, total = [], 0
    for (a_idx, b_idx, write), pro_idx in zip(chunks, pro_chunks):
        a_read = _Read(a_op.arena, a_idx)
        extras = [_Read(op.arena, idx) for op, idx in zip(plan.inputs[2:], pro_idx)]
        b_read = _Read(b_op.arena, b_idx)
        if len(chunks) > 1 and any(write.overlaps(r) for r in (a_read, *extras, b_read)):
            return None  # later chunks would read what earlier ones wrote: keep the reference's order
        if b_op.arena == Arena.WEIGHTS:
            b_get = _f64_rows(b_op.arena, b_idx, mem, cache)
            if b_get is None:
                return None
        else:
            b_get = (lambda r: lambda m: r(m).astype(_F64))(b_read)
            total += b_read.cached
        total += a_read.cached + sum(r.cached for r in extras)
        steps.append((a_read, extras, b_get, write))
    if not _fits(cache, [s[3] for s in steps], 4, total):
        return None
    einsum = np.einsum

    def run(m: dict) -> None:
        for a_read, extras, b_get, write in steps:
            a = a_read(m)
            with np.errstate(all="ignore"):
                lhs = np.broadcast_to(program([a, *[r(m) for r in extras]]), a.shape).astype(_F64)
            write(m, einsum("ser,ser->se", lhs, b_get(m)).astype(_F32))

    return run


def _gather_dot(plan, mem, cache, chunks, bias) -> Runner | None:
    """The reference's way, with cached indices: per chunk, gather [S, E, R] of both operands, einsum,
    add the bias, round and write. ``chunks``: (lhs arena, lhs idx, lhs valid [E, R] or None, rhs arena,
    rhs idx, write, output channel of each element (for the bias) or None)."""
    steps = []
    total = 0
    for la, li, lv, ra, ri, write, o_of in chunks:
        getters = []
        for arena, idx, valid in ((la, li, lv), (ra, ri, None)):
            r = _Read(arena, idx)
            if len(chunks) > 1 and write.overlaps(r):
                return None  # later chunks would read what earlier ones wrote: keep the reference's order
            if arena == Arena.WEIGHTS and valid is None:
                get = _f64_rows(arena, idx, mem, cache)
                if get is None:
                    return None
            elif valid is None:
                get = (lambda r: lambda m: r(m).astype(_F64))(r)
                total += r.cached
            else:
                get = (lambda r, v: lambda m: np.where(v, r(m), _F32(0)).astype(_F64))(r, valid[None])
                total += r.cached + valid.size
            getters.append(get)
        steps.append((getters[0], getters[1], write, o_of))
    if not _fits(cache, [s[2] for s in steps], 4, total):
        return None
    einsum = np.einsum

    def run(m: dict) -> None:
        b = bias(m) if bias is not None else None
        for lhs, rhs, write, o_of in steps:
            acc = einsum("ser,ser->se", lhs(m), rhs(m))
            if b is not None:
                acc = acc + b[:, o_of]
            write(m, acc.astype(_F32))

    return run


def _prep_conv(plan: TaskPlan, p: ConvParams, mem: dict, cache: TaskCache) -> Runner | None:
    if p.group <= 0 or p.c_in % p.group or p.c_out % p.group:
        return None  # the reference body raises
    x_op, w_op = plan.inputs[0], plan.inputs[1]
    taps = (p.c_in // p.group) * int(np.prod(p.kernel, dtype=np.int64))
    bias_idx = None
    if p.has_bias:
        bias_idx = _indices(plan, plan.inputs[2], np.arange(p.c_out, dtype=np.int64), mem)
    chunks = []
    for lo, hi in _chunks(*plan.elems, taps, plan.n_sessions):
        key = ("conv", p, lo, hi)
        rel = cache.rel.get(key)  # the same for every session's task of this tile
        if rel is None:
            rel = conv_gather(p, lo, hi)
            if cache.reserve(sum(a.nbytes for a in rel)):
                cache.rel[key] = rel
        o_of, valid, x_rel, w_rel = rel
        x_idx = _indices(plan, x_op, x_rel, mem)
        w_idx = _indices(plan, w_op, w_rel, mem)
        write = _out_epilogue(plan, p, lo, hi, np.arange(lo, hi, dtype=np.int64), mem)
        if write is False:
            return None
        chunks.append((x_op.arena, x_idx, valid, w_op.arena, w_idx, write, o_of))
    bias = None
    if bias_idx is not None:
        bias = _f64_rows(plan.inputs[2].arena, bias_idx, mem, cache)
        if bias is None:
            return None
    if len(chunks) == 1:
        _, x_idx, valid, _, w_idx, write, _ = chunks[0]
        if not (write.overlaps(_Read(x_op.arena, x_idx)) or write.overlaps(_Read(w_op.arena, w_idx))):
            sp = int(np.prod(p.out_sp, dtype=np.int64))
            row_ch = np.arange(p.batch * p.c_out, dtype=np.int64) % p.c_out  # channel of each (n, o) row
            ops = _rect_plan(plan, mem, cache, [(x_idx[s], valid, w_idx[s]) for s in range(plan.n_sessions)],
                             x_op.arena, w_op.arena, False, sp, p.c_out // p.group, row_ch)
            if ops is not None and _fits(cache, [write], 4):
                return _mm_runner(plan.n_sessions, plan.elems[1] - plan.elems[0], ops, bias, write)
    return _gather_dot(plan, mem, cache, chunks, bias)


_PREPARE = {Opcode.EWISE: _prep_ewise, Opcode.MATMUL: _prep_matmul, Opcode.CONV: _prep_conv, Opcode.REDUCE: _prep_reduce}
