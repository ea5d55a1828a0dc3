"""The `wpk` dialect: the persistent kernel's program after cohort batching and tiling.

- ``wpk.buffer "name" {arena, bytes, session_stride, role, ...}``: an arena slice. ``bytes`` is one
  session's size (the whole size for shared buffers, whose ``session_stride`` is 0); ``offset`` is set by
  `wpk-arena`. ``role`` says what the bytes are: input, output, state, weight, act, reset.
- ``wpk.phase "name" attributes {op = "wave.OP"} { wpk.tasks ... }``: the tasks of one wave op, in
  program order.
- ``wpk.tasks "opcode" {...}``: a table of tasks, each one tile of one op part for a slice of the cohort.
  Shared by every row: ``inputs`` (buffer names), ``input_offsets`` (extra element offsets into them),
  ``output`` / ``output_offset`` and ``params`` (the parameter block, wavec/opcodes.py). One entry per
  row: ``sessions`` and ``elems`` (a [begin, end) pair each). `wpk-schedule` adds the columns
  ``worker``, ``order``, ``signal`` (the task's group counter), ``signal_phase`` (its phase-wide counter,
  0 = none), ``n_waits`` and ``waits`` (the rows' (counter, count) pairs, concatenated): all of them or
  none. Every array is ``array<i64: ...>`` but ``payload``, which `wpk-payload` adds: each task's
  128-byte record as 32 ``i32`` words. The verifier holds each schedule value to its payload field
  (wavec.payload.FIELDS: worker and signal_phase in [0, 65535], signal and wait counters u32, at most
  MAX_WAITS waits, each count >= 1) and names the op in its errors (opcode, output, phase). One op per
  part, not per task: a cohort of 10^5 tasks is a few thousand ops (xDSL creates and verifies an op in
  about 90 us).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, DenseArrayBase, IntegerAttr, IntegerType, StringAttr, i32, i64
from xdsl.ir import Dialect, Region
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from wavec.opcodes import OUT, Arena, Opcode, unpack_params
from wavec.payload import BEAT_DONE_COUNTER, MAX_WAITS, PAYLOAD_DTYPE

ARENA_NAMES = tuple(a.name.lower() for a in Arena)
ROLES = ("input", "output", "state", "weight", "act", "reset")
OPCODE_NAMES = tuple(o.name.lower() for o in Opcode)


_STRUCT_CODES = {64: "q", 32: "i"}


@functools.lru_cache(maxsize=1 << 16)
def _unpack(raw: bytes, code: str) -> tuple[int, ...]:
    return struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw)


def _ints(attr: DenseArrayBase | None) -> tuple[int, ...]:
    """The integers of a small dense array (operand offsets, a parameter block), decoded once per distinct
    byte string: the ops of a large cohort share a few, and every pass and verify() reads them again
    (DenseArrayBase.get_values decodes element by element)."""
    return _unpack(attr.data.data, _STRUCT_CODES[attr.elt_type.width.data]) if attr is not None else ()


def _i64s(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase(i64, BytesAttr(struct.pack(f"<{len(values)}q", *values)))


def _array(attr: DenseArrayBase) -> np.ndarray:
    """A dense array's values as an int64 numpy column: a read-only view of the attribute's bytes when they
    are int64, a copy otherwise."""
    return np.frombuffer(attr.data.data, "<i8" if attr.elt_type.width.data == 64 else "<i4").astype(np.int64, copy=False)


def _column(values) -> DenseArrayBase:
    return DenseArrayBase(i64, BytesAttr(np.ascontiguousarray(values, "<i8").tobytes()))


@irdl_op_definition
class BufferOp(IRDLOperation):
    name = "wpk.buffer"
    sym_name = prop_def(StringAttr)
    arena = prop_def(StringAttr)
    role = prop_def(StringAttr)
    bytes = prop_def(IntegerAttr)
    session_stride = prop_def(IntegerAttr)
    offset = opt_prop_def(IntegerAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$sym_name attr-dict"

    def __init__(self, name: str, arena: str, role: str, nbytes: int, session_stride: int, attributes=None):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "arena": StringAttr(arena),
                "role": StringAttr(role),
                "bytes": IntegerAttr(nbytes, i64),
                "session_stride": IntegerAttr(session_stride, i64),
            },
            attributes=attributes,
        )

    @property
    def buffer_name(self) -> str:
        return self.sym_name.data

    @property
    def nbytes(self) -> int:
        return self.bytes.value.data

    @property
    def stride(self) -> int:
        return self.session_stride.value.data

    def verify_(self) -> None:
        if self.arena.data not in ARENA_NAMES:
            raise VerifyException(f"wpk.buffer {self.buffer_name!r}: unknown arena {self.arena.data!r}; one of {ARENA_NAMES}")
        if self.role.data not in ROLES:
            raise VerifyException(f"wpk.buffer {self.buffer_name!r}: unknown role {self.role.data!r}; one of {ROLES}")
        if self.nbytes <= 0 or self.nbytes % 4:
            raise VerifyException(f"wpk.buffer {self.buffer_name!r}: size {self.nbytes} must be a positive multiple of 4 bytes")
        if self.stride and self.stride < self.nbytes:
            raise VerifyException(
                f"wpk.buffer {self.buffer_name!r}: session stride {self.stride} < size {self.nbytes}: sessions would overlap"
            )
        if self.offset is not None and self.offset.value.data % 16:
            raise VerifyException(f"wpk.buffer {self.buffer_name!r}: offset {self.offset.value.data} is not 16-byte aligned")


@irdl_op_definition
class PhaseOp(IRDLOperation):
    name = "wpk.phase"
    sym_name = prop_def(StringAttr)
    op = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$sym_name attr-dict-with-keyword $body"

    def __init__(self, name: str, op: str, tasks: Sequence[IRDLOperation]):
        super().__init__(
            properties={"sym_name": StringAttr(name), "op": StringAttr(op)},
            regions=[Region(_block(tasks))],
        )

    @property
    def tasks(self) -> list["TasksOp"]:
        """The phase's `wpk.tasks` ops (each a table of tasks), in program order."""
        return [t for t in self.body.block.ops if isinstance(t, TasksOp)]

    @property
    def task_count(self) -> int:
        return sum(t.count for t in self.tasks)

    def verify_(self) -> None:
        for op in self.body.block.ops:
            if not isinstance(op, TasksOp):
                raise VerifyException(f"wpk.phase {self.sym_name.data!r} may hold only wpk.tasks, found {op.name}")


def _block(ops):
    from xdsl.ir import Block

    return Block(list(ops))


_I64_PROPERTIES = ("input_offsets", "params", "sessions", "elems", "worker", "order", "signal", "signal_phase",
                   "n_waits", "waits")
_SCHEDULE_COLUMNS = ("worker", "order", "signal", "signal_phase", "n_waits", "waits")
# Each per-task schedule column's range: its payload field's (order is not encoded). signal starts past
# counter 0, which ends the beat and only workers signal; a payload holds at most MAX_WAITS waits.
_COLUMN_RANGES = {
    "worker": (0, int(np.iinfo(PAYLOAD_DTYPE["worker"]).max)),
    "order": (0, int(np.iinfo(np.int64).max)),
    "signal": (BEAT_DONE_COUNTER + 1, int(np.iinfo(PAYLOAD_DTYPE["signal"]).max)),
    "signal_phase": (0, int(np.iinfo(PAYLOAD_DTYPE["signal_phase"]).max)),
    "n_waits": (0, MAX_WAITS),
}
_WAIT_MAX = int(np.iinfo(PAYLOAD_DTYPE["wait_counter"].base).max)


@irdl_op_definition
class TasksOp(IRDLOperation):
    """The tasks of one tiled op part: one row per task, a tile of [session, element) ranges. Every row
    shares the operand properties; the per-task properties are dense columns, so a cohort of 10^5 tasks
    costs one op per part, not one per task (xDSL creates and verifies an op in about 90 us)."""

    name = "wpk.tasks"
    opcode = prop_def(StringAttr)
    inputs = prop_def(ArrayAttr)
    input_offsets = prop_def(DenseArrayBase)
    output = prop_def(StringAttr)
    output_offset = prop_def(IntegerAttr)
    params = prop_def(DenseArrayBase)
    sessions = prop_def(DenseArrayBase)
    elems = prop_def(DenseArrayBase)
    worker = opt_prop_def(DenseArrayBase)
    order = opt_prop_def(DenseArrayBase)
    signal = opt_prop_def(DenseArrayBase)
    signal_phase = opt_prop_def(DenseArrayBase)
    n_waits = opt_prop_def(DenseArrayBase)
    waits = opt_prop_def(DenseArrayBase)
    payload = opt_prop_def(DenseArrayBase)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$opcode attr-dict"

    def __init__(self, opcode: str, inputs: Sequence[tuple[str, int]], output: tuple[str, int], params: Sequence[int],
                 tiles: Sequence[tuple[int, int, int, int]]):
        """``tiles``: one (session begin, session end, element begin, element end) per task."""
        t = np.asarray(tiles, np.int64).reshape(-1, 4)
        super().__init__(properties={**TasksOp.operand_properties(opcode, inputs, output, params),
                                     "sessions": _column(t[:, 0:2]), "elems": _column(t[:, 2:4])})

    @staticmethod
    def operand_properties(opcode: str, inputs: Sequence[tuple[str, int]], output: tuple[str, int],
                           params: Sequence[int]) -> dict:
        """The properties every task of the op shares (all but the columns)."""
        return {
            "opcode": StringAttr(opcode),
            "inputs": ArrayAttr([StringAttr(n) for n, _ in inputs]),
            "input_offsets": _i64s([o for _, o in inputs]),
            "output": StringAttr(output[0]),
            "output_offset": IntegerAttr(output[1], i64),
            "params": _i64s(params),
        }

    # Accessors that give plain Python values or numpy columns, so passes read like the record they build.
    @property
    def count(self) -> int:
        """Tasks (rows) in the op."""
        return len(_array(self.sessions)) // 2

    @property
    def input_names(self) -> list[str]:
        return [a.data for a in self.inputs.data]  # type: ignore[union-attr]

    @property
    def operand_offsets(self) -> tuple[int, ...]:
        return _ints(self.input_offsets)

    @property
    def param_words(self) -> tuple[int, ...]:
        return _ints(self.params)

    @property
    def tiles(self) -> np.ndarray:
        """(count, 4) int64: session begin, session end, element begin, element end of each task."""
        return np.concatenate([_array(self.sessions).reshape(-1, 2), _array(self.elems).reshape(-1, 2)], axis=1)

    @property
    def scheduled(self) -> bool:
        return self.worker is not None

    def column(self, name: str) -> np.ndarray:
        """A schedule column (worker, order, signal, signal_phase, n_waits) as int64, one entry per task."""
        return _array(self.properties[name])

    def wait_table(self) -> np.ndarray:
        """(count, MAX_WAITS, 2) int64: each task's (counter, count) pairs, unused slots zero."""
        n_waits = self.column("n_waits")
        table = np.zeros((self.count, MAX_WAITS, 2), np.int64)
        rows = np.repeat(np.arange(self.count), n_waits)
        slots = np.arange(len(rows)) - np.repeat(np.cumsum(n_waits) - n_waits, n_waits)
        table[rows, slots] = _array(self.waits).reshape(-1, 2)
        return table

    def set_schedule(self, worker: Sequence[int], order: Sequence[int], waits: Sequence[Sequence[tuple[int, int]]],
                     signal: Sequence[int], signal_phase: Sequence[int]) -> None:
        """One entry per task: its worker, its place in that worker's list, its (counter, count) waits,
        its group counter and its phase-wide counter (0: none). Drops an encoded payload: it encoded the
        schedule this replaces."""
        self.properties.pop("payload", None)
        self.properties["worker"] = _column(worker)
        self.properties["order"] = _column(order)
        self.properties["n_waits"] = _column([len(w) for w in waits])
        self.properties["waits"] = _column([x for w in waits for pair in w for x in pair])
        self.properties["signal"] = _column(signal)
        self.properties["signal_phase"] = _column(signal_phase)

    def set_params(self, words: Sequence[int]) -> None:
        self.properties["params"] = _i64s(words)

    def set_payload(self, words: np.ndarray) -> None:
        """(count, 32) int32: each task's 128-byte record."""
        self.properties["payload"] = DenseArrayBase(i32, BytesAttr(np.ascontiguousarray(words, "<i4").tobytes()))

    def where(self) -> str:
        """The op as an error names it: opcode, output buffer and phase."""
        phase = self.parent_op()
        in_phase = f" in phase {phase.sym_name.data!r}" if isinstance(phase, PhaseOp) else ""
        return f"wpk.tasks {self.opcode.data!r} writing {self.output.data!r}{in_phase}"

    def verify_(self) -> None:
        try:  # the checks say what is wrong; the op they name once, here
            self._verify_types()
            _verified_once((self.opcode, self.inputs, self.input_offsets, self.params), self._verify_operands)
            _verified_once((self.sessions, self.elems), self._verify_tiles)
            self._verify_schedule()
            if self.payload is not None and len(self.payload.data.data) != 128 * self.count:
                raise VerifyException(f"payload must be 32 int32 words (128 bytes) per task, for {self.count} tasks")
        except VerifyException as e:
            raise VerifyException(f"{self.where()}: {e}") from None

    def _verify_types(self) -> None:
        for name, width in (*((n, 64) for n in _I64_PROPERTIES), ("payload", 32)):
            attr = self.properties.get(name)
            if attr is not None and (not isinstance(attr.elt_type, IntegerType) or attr.elt_type.width.data != width):
                raise VerifyException(f"{name} must be an array<i{width}: ...>, got array<{attr.elt_type}>")
        if not all(isinstance(a, StringAttr) for a in self.inputs.data):
            raise VerifyException("inputs must be buffer names (strings)")

    def _verify_schedule(self) -> None:
        """The schedule columns: all or none, one entry per task (waits: one pair per wait), each within
        its payload field (wavec.payload.FIELDS)."""
        present = [name for name in _SCHEDULE_COLUMNS if self.properties.get(name) is not None]
        if not present:
            return
        if len(present) != len(_SCHEDULE_COLUMNS):
            missing = [name for name in _SCHEDULE_COLUMNS if name not in present]
            raise VerifyException(f"a schedule sets {', '.join(_SCHEDULE_COLUMNS)}; {', '.join(missing)} missing")
        n = self.count
        for name in _SCHEDULE_COLUMNS[:-1]:
            values = self.column(name)
            if len(values) != n:
                raise VerifyException(f"{name} has {len(values)} entries for {n} tasks")
            low, high = _COLUMN_RANGES[name]
            bad = np.flatnonzero((values < low) | (values > high))
            if len(bad):
                raise VerifyException(f"{name} of task {bad[0]} is {values[bad[0]]}; it must be in [{low}, {high}]")
        waits = _array(self.waits).reshape(-1, 2) if len(_array(self.waits)) % 2 == 0 else None
        if waits is None or len(waits) != int(self.column("n_waits").sum()):
            raise VerifyException("waits must hold one (counter, count) pair per wait n_waits counts")
        if len(waits) and (((waits < 0) | (waits > _WAIT_MAX)).any() or (waits[:, 1] < 1).any()):
            raise VerifyException("a wait's counter and count must be u32 values, its count >= 1")

    def _verify_operands(self) -> None:
        if self.opcode.data not in OPCODE_NAMES:
            raise VerifyException(f"unknown opcode {self.opcode.data!r}; one of {OPCODE_NAMES}")
        if len(self.input_names) != len(self.operand_offsets) or len(self.input_names) > OUT:
            raise VerifyException(f"{len(self.input_names)} inputs with {len(self.operand_offsets)} offsets (at most {OUT})")
        if not self.param_words or self.param_words[0] != Opcode[self.opcode.data.upper()]:
            raise VerifyException(f"params block is not a {self.opcode.data} block")
        try:
            params = unpack_params(np.asarray(self.param_words, np.int64), 0)
            decodes = np.array_equal(params.pack(), self.param_words)
        except (ValueError, IndexError, OverflowError):
            decodes = False
        if not decodes:
            raise VerifyException(f"params block ({len(self.param_words)} words) does not decode as the "
                                  f"{self.opcode.data} opcode's block (wavec.opcodes)")

    def _verify_tiles(self) -> None:
        for what in ("sessions", "elems"):
            rng = _array(self.properties[what])
            if len(rng) == 0 or len(rng) % 2 or len(rng) != len(_array(self.sessions)):
                raise VerifyException(f"{what} must hold one [begin, end) pair per task, got {len(rng)} numbers")
            pairs = rng.reshape(-1, 2)
            bad = np.flatnonzero((pairs[:, 0] < 0) | (pairs[:, 0] >= pairs[:, 1]))
            if len(bad):
                raise VerifyException(
                    f"{what} must be non-empty [begin, end) ranges; task {bad[0]} has {pairs[bad[0]].tolist()}")


# Attribute combinations a task verifier has accepted, by identity. The tiles of one op share their
# attributes, so a module of 10^5 tasks checks each combination once; the entries keep the attributes
# alive, so an id is not reused while it is here.
_VERIFIED: dict[tuple[int, ...], tuple] = {}


def _verified_once(attrs: tuple, check) -> None:
    key = tuple(map(id, attrs))
    if key in _VERIFIED:
        return
    check()
    if len(_VERIFIED) > 1 << 20:
        _VERIFIED.clear()
    _VERIFIED[key] = attrs


Wpk = Dialect("wpk", [BufferOp, PhaseOp, TasksOp], [])
