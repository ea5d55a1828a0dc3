"""The `wpk` dialect: the persistent kernel's program after cohort batching and tiling.

- ``wpk.buffer "name" {arena, bytes, session_stride, role, ...}``: an arena slice. ``bytes`` is one
  session's size (the whole size for shared buffers, whose ``session_stride`` is 0); ``offset`` is set by
  `wpk-arena`. ``role`` says what the bytes are: input, output, state, weight, act, reset.
- ``wpk.phase "name" {op} { wpk.task ... }``: the tasks of one wave op, in program order.
- ``wpk.task "opcode" {...}``: one tile of one op for a slice of the cohort: ``inputs`` (buffer names),
  ``input_offsets`` (extra element offsets into them), ``output`` / ``output_offset``, ``sessions`` and
  ``elems`` ([begin, end) ranges), ``params`` (the parameter block, wavec/opcodes.py). `wpk-schedule`
  adds ``worker``, ``order``, ``waits`` (pairs counter, count), ``signal`` (the task's group counter) and
  ``signal_phase`` (its phase-wide counter, 0 = none); `wpk-payload` adds
  ``payload``, the task's 128-byte record as 32 int32 words.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, DenseArrayBase, IntegerAttr, StringAttr, i32, i64
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

from wavec.opcodes import OUT, Arena, Opcode
from wavec.payload import MAX_WAITS

ARENA_NAMES = tuple(a.name.lower() for a in Arena)
ROLES = ("input", "output", "state", "weight", "act", "reset")
OPCODE_NAMES = tuple(o.name.lower() for o in Opcode)


_STRUCT_CODES = {64: "q", 32: "i"}


@functools.lru_cache(maxsize=1 << 16)
def _unpack(raw: bytes, code: str) -> tuple[int, ...]:
    return struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw)


def _ints(attr: DenseArrayBase | None) -> tuple[int, ...]:
    """The integers of a dense array, decoded once per distinct byte string: the hundreds of thousands of
    tasks of a large cohort share a few attributes, and every pass and verify() reads them again
    (DenseArrayBase.get_values decodes element by element)."""
    return _unpack(attr.data.data, _STRUCT_CODES[attr.elt_type.width.data]) if attr is not None else ()


def _i64s(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase(i64, BytesAttr(struct.pack(f"<{len(values)}q", *values)))


# Attributes are immutable: the few distinct small ones (tile bounds, worker numbers, counters) are made
# once and shared by the hundreds of thousands of tasks of a large cohort.
_SMALL: dict = {}


def _shared(kind: str, value):
    key = (kind, value)
    attr = _SMALL.get(key)
    if attr is None:
        if len(_SMALL) > 1 << 20:
            _SMALL.clear()
        attr = _SMALL[key] = IntegerAttr(value, i64) if kind == "int" else _i64s(value)
    return attr


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
    def tasks(self) -> list["TaskOp"]:
        return [t for t in self.body.block.ops if isinstance(t, TaskOp)]

    def verify_(self) -> None:
        for op in self.body.block.ops:
            if not isinstance(op, TaskOp):
                raise VerifyException(f"wpk.phase {self.sym_name.data!r} may hold only wpk.task, found {op.name}")


def _block(ops):
    from xdsl.ir import Block

    return Block(list(ops))


@irdl_op_definition
class TaskOp(IRDLOperation):
    name = "wpk.task"
    opcode = prop_def(StringAttr)
    inputs = prop_def(ArrayAttr)
    input_offsets = prop_def(DenseArrayBase)
    output = prop_def(StringAttr)
    output_offset = prop_def(IntegerAttr)
    sessions = prop_def(DenseArrayBase)
    elems = prop_def(DenseArrayBase)
    params = prop_def(DenseArrayBase)
    worker = opt_prop_def(IntegerAttr)
    order = opt_prop_def(IntegerAttr)
    waits = opt_prop_def(DenseArrayBase)
    signal = opt_prop_def(IntegerAttr)
    signal_phase = opt_prop_def(IntegerAttr)
    payload = opt_prop_def(DenseArrayBase)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$opcode attr-dict"

    def __init__(self, opcode: str, inputs: Sequence[tuple[str, int]], output: tuple[str, int],
                 sessions: tuple[int, int], elems: tuple[int, int], params: Sequence[int]):
        super().__init__(properties={**TaskOp.operand_properties(opcode, inputs, output, params),
                                     "sessions": _i64s(sessions), "elems": _i64s(elems)})

    @staticmethod
    def operand_properties(opcode: str, inputs: Sequence[tuple[str, int]], output: tuple[str, int],
                           params: Sequence[int]) -> dict:
        """The properties every tile of one op shares (all but ``sessions`` and ``elems``)."""
        return {
            "opcode": StringAttr(opcode),
            "inputs": ArrayAttr([StringAttr(n) for n, _ in inputs]),
            "input_offsets": _i64s([o for _, o in inputs]),
            "output": StringAttr(output[0]),
            "output_offset": IntegerAttr(output[1], i64),
            "params": _i64s(params),
        }

    @classmethod
    def tile(cls, shared: dict, sessions: tuple[int, int], elems: tuple[int, int]) -> "TaskOp":
        """One tile of an op whose other properties are ``shared`` (``operand_properties``): the attributes
        are shared, not copied, so a phase of many tiles costs one small op per tile (no re-verification
        here: the module's verify() checks every task)."""
        return cls.create(properties={**shared, "sessions": _shared("i64s", sessions), "elems": _shared("i64s", elems)})

    # Accessors that give plain Python values, so passes read like the record they build.
    @property
    def input_names(self) -> list[str]:
        return [a.data for a in self.inputs.data]  # type: ignore[union-attr]

    @property
    def operand_offsets(self) -> tuple[int, ...]:
        return _ints(self.input_offsets)

    @property
    def session_range(self) -> tuple[int, int]:
        return _ints(self.sessions)  # type: ignore[return-value]

    @property
    def elem_range(self) -> tuple[int, int]:
        return _ints(self.elems)  # type: ignore[return-value]

    @property
    def param_words(self) -> tuple[int, ...]:
        return _ints(self.params)

    @property
    def wait_words(self) -> tuple[int, ...]:
        """counter, count, counter, count, ... (the payload's order)."""
        return _ints(self.waits)

    @property
    def wait_pairs(self) -> list[tuple[int, int]]:
        w = self.wait_words
        return list(zip(w[0::2], w[1::2]))

    def set_schedule(self, worker: int, order: int, waits: Sequence[tuple[int, int]], signal: int,
                     signal_phase: int = 0) -> None:
        self.properties["worker"] = _shared("int", int(worker))
        self.properties["order"] = _shared("int", int(order))
        self.properties["waits"] = _shared("i64s", tuple(int(x) for pair in waits for x in pair))
        self.properties["signal"] = _shared("int", int(signal))
        self.properties["signal_phase"] = _shared("int", int(signal_phase))

    @property
    def signals(self) -> list[int]:
        """The counters the task increments when done (``signal``, then ``signal_phase`` when set)."""
        out = [self.signal.value.data] if self.signal is not None else []
        if self.signal_phase is not None and self.signal_phase.value.data:
            out.append(self.signal_phase.value.data)
        return out

    def set_params(self, words: Sequence[int]) -> None:
        self.properties["params"] = _i64s(words)

    def set_payload(self, words: Sequence[int]) -> None:
        self.properties["payload"] = DenseArrayBase(i32, BytesAttr(np.asarray(words, "<i4").tobytes()))

    def verify_(self) -> None:
        _verified_once((self.opcode, self.inputs, self.input_offsets, self.params), self._verify_operands)
        _verified_once((self.sessions, self.elems), self._verify_tile)
        if self.waits is not None:
            _verified_once((self.waits,), self._verify_waits)
        if self.signal_phase is not None and not 0 <= self.signal_phase.value.data <= 0xFFFF:
            raise VerifyException("wpk.task: signal_phase must be a counter in [0, 65535] (0: none)")
        if self.payload is not None and len(self.payload.data.data) != 128:
            raise VerifyException("wpk.task: payload must be 32 int32 words (128 bytes)")

    def _verify_operands(self) -> None:
        if self.opcode.data not in OPCODE_NAMES:
            raise VerifyException(f"wpk.task: unknown opcode {self.opcode.data!r}; one of {OPCODE_NAMES}")
        if len(self.input_names) != len(self.operand_offsets) or len(self.input_names) > OUT:
            raise VerifyException(f"wpk.task: {len(self.input_names)} inputs with {len(self.operand_offsets)} offsets (at most {OUT})")
        if self.param_words and self.param_words[0] != Opcode[self.opcode.data.upper()]:
            raise VerifyException(f"wpk.task: params block is not a {self.opcode.data} block")

    def _verify_tile(self) -> None:
        for what, rng in (("sessions", self.session_range), ("elems", self.elem_range)):
            if len(rng) != 2 or not 0 <= rng[0] < rng[1]:
                raise VerifyException(f"wpk.task: {what} must be a non-empty [begin, end) range, got {list(rng)}")

    def _verify_waits(self) -> None:
        if len(self.wait_words) % 2 or len(self.wait_pairs) > MAX_WAITS:
            raise VerifyException(f"wpk.task: waits must be at most {MAX_WAITS} (counter, count) pairs")


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


Wpk = Dialect("wpk", [BufferOp, PhaseOp, TaskOp], [])
