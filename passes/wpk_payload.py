"""`wpk-payload`: encode every scheduled, placed task as its 128-byte record.

Each `wpk.tasks` op gets `payload`, per task 32 int32 words laid out as wavec/payload.py defines: opcode, worker, waits,
signals (group and phase counters), tile, the word offset of its parameter block, and each operand's arena, byte offset and session
stride resolved from the buffers. Identical parameter blocks are stored once in the params table
(`params_table`), which the profile writer rebuilds with the same function. Task ids follow program order.

Before encoding, each EWISE block gets its generated-body index (the trailing `body` word of
wavec.opcodes.EwiseParams): the distinct (expression, rank, n_inputs, keep) of the EWISE tasks are numbered in
first-use order when the CUDA target can generate their bodies (TVM TensorIR,
wavec.targets.cuda.tvm_ewise), else every index is -1 and the kernel's bytecode interpreter runs them.
``keep`` is the input a ``select(c, a, %k)`` task reads from its own output (`task_kept_input`): its body
stores only where c holds, so a state's reset writes only the sessions it resets, and a ring cache's write
only its position.
`ewise_body_table` lists the numbered bodies for profile.json. The epilogues of MATMUL and CONV blocks
are numbered the same way, by their (expression, extra inputs) (the trailing `body` word of
wavec.opcodes.Epilogue): the kernel runs each as one generated case of a switch (`epilogue_body_table`,
profile.json ``epilogue_bodies``). Requires `wpk-schedule` and `wpk-arena`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from wavec.dialects import wpk
from wavec.dialects.wpk import ARENA_NAMES
from wavec.opcodes import OUT, ConvParams, EwiseParams, MatmulParams, Opcode, decode_expr, kept_input, unpack_params
from wavec.passes.wpk_arena import buffers_of
from wavec.passes.wpk_schedule import phases_of
from wavec.payload import PAYLOAD_DTYPE, pack_arenas


def tasks_of(module: ModuleOp) -> list[wpk.TasksOp]:
    """The module's `wpk.tasks` ops in program order (their rows, in order, are the tasks by id)."""
    return [t for phase in phases_of(module) for t in phase.tasks]


def payload_records(tasks: list[wpk.TasksOp]) -> np.ndarray:
    """The encoded payloads (the ops' `payload` properties) as PAYLOAD_DTYPE records, one per task in the
    given ops' order (read-only: a view of the joined bytes)."""
    return np.frombuffer(b"".join(t.payload.data.data for t in tasks), PAYLOAD_DTYPE)


def params_table(tasks: list[wpk.TasksOp]) -> tuple[np.ndarray, dict[tuple[int, ...], int]]:
    """The int64 parameter table and each distinct block's word offset in it, in first-use order."""
    where: dict[tuple[int, ...], int] = {}
    words: list[int] = []
    for task in tasks:
        block = task.param_words
        if block not in where:
            where[block] = len(words)
            words.extend(block)
    return np.array(words, np.int64), where


def task_kept_input(task: wpk.TasksOp, params: EwiseParams) -> int:
    """wavec.opcodes.kept_input of the task's expression when that input is the task's output itself (the same
    buffer, offset and strides, so element for element), else -1."""
    k = kept_input(decode_expr(params.code))
    if k < 0 or k >= len(params.in_strides):
        return -1
    same = (task.input_names[k] == task.output.data and task.operand_offsets[k] == task.output_offset.value.data
            and params.in_strides[k] == params.out_strides)
    return k if same else -1


def _ewise_key(params: EwiseParams, keep: int) -> tuple[str, int, int, int]:
    return str(decode_expr(params.code)), len(params.shape), len(params.in_strides), keep


def number_ewise_bodies(tasks: list[wpk.TasksOp]) -> int:
    """Writes each EWISE task's body index into its parameter block (see the module docstring); returns
    how many bodies were numbered."""
    from wavec.targets.cuda.tvm_ewise import supports

    index: dict[tuple[str, int, int, int], int] = {}
    numbered = 0
    renumbered: dict[tuple, object] = {}  # (block, keep) -> its numbered block's attribute, shared by the ops
    for task in tasks:
        if task.opcode.data != "ewise":
            continue
        block = task.param_words
        params = EwiseParams.unpack(np.asarray(block, np.int64), 0)
        keep = task_kept_input(task, params)
        attr = renumbered.get((block, keep))
        if attr is None:
            key = _ewise_key(params, keep)
            if key not in index:
                index[key] = numbered if supports(decode_expr(params.code)) else -1
                numbered += index[key] >= 0
            task.set_params(replace(params, body=index[key]).pack())
            attr = renumbered[(block, keep)] = task.params
        task.properties["params"] = attr
    return numbered


def _epilogue_key(params: MatmulParams | ConvParams) -> tuple[str, int] | None:
    ep = params.epilogue
    return (str(decode_expr(ep.code)), 1 + len(ep.strides)) if ep.code else None


def number_epilogue_bodies(tasks: list[wpk.TasksOp]) -> None:
    """Writes each MATMUL and CONV epilogue's generated-body index into its parameter block (the module
    docstring)."""
    index: dict[tuple[str, int], int] = {}
    renumbered: dict[tuple[int, ...], object] = {}  # block -> its numbered block's attribute, shared by the ops
    for task in tasks:
        if task.opcode.data not in ("matmul", "conv"):
            continue
        block = task.param_words
        attr = renumbered.get(block)
        if attr is None:
            params = unpack_params(np.asarray(block, np.int64), 0)
            key = _epilogue_key(params)
            if key is not None:
                body = index.setdefault(key, len(index))
                task.set_params(replace(params, epilogue=replace(params.epilogue, body=body)).pack())
            attr = renumbered[block] = task.params
        task.properties["params"] = attr


def _body_table(module: ModuleOp, opcodes: tuple[str, ...], entry_of, what: str) -> list[dict]:
    """A profile.json table of generated bodies: for each body index (in order), the fields ``entry_of(task)``
    gives with it (``(body, fields)``, body -1 for a task without one) and the phases (``name (op)``) whose tasks
    run it. ``entry_of`` reads one task of each distinct parameter block (like layers share their block)."""
    table: dict[int, dict] = {}
    decoded: dict[tuple[int, ...], tuple] = {}
    for phase in phases_of(module):
        for task in phase.tasks:
            if task.opcode.data not in opcodes:
                continue
            hit = decoded.get(task.param_words)
            if hit is None:
                hit = decoded[task.param_words] = entry_of(task)
            body, fields = hit
            if body < 0:
                continue
            entry = table.setdefault(body, {**fields, "phases": []})
            where = f"{phase.sym_name.data} ({phase.op.data})"
            if where not in entry["phases"]:
                entry["phases"].append(where)
    if sorted(table) != list(range(len(table))):
        raise PassFailedException(f"wpk-payload: {what} body indices {sorted(table)} are not 0..{len(table) - 1}")
    return [table[b] for b in range(len(table))]


def _epilogue_entry(task: wpk.TasksOp) -> tuple[int, dict | None]:
    params = unpack_params(np.asarray(task.param_words, np.int64), 0)
    key = _epilogue_key(params)
    return (params.epilogue.body, {"expr": key[0], "n_inputs": key[1]}) if key is not None else (-1, None)


def epilogue_body_table(module: ModuleOp) -> list[dict]:
    """profile.json's ``epilogue_bodies``: for each body index (in order), its expression text, input count
    (the accumulator and the extras) and the phases (``name (op)``) whose tasks run it."""
    return _body_table(module, ("matmul", "conv"), _epilogue_entry, "epilogue")


def _ewise_entry(task: wpk.TasksOp) -> tuple[int, dict | None]:
    params = EwiseParams.unpack(np.asarray(task.param_words, np.int64), 0)
    if params.body < 0:
        return -1, None
    expr, rank, n_in, keep = _ewise_key(params, task_kept_input(task, params))
    return params.body, {"expr": expr, "rank": rank, "n_inputs": n_in, "keep": keep}


def ewise_body_table(module: ModuleOp) -> list[dict]:
    """profile.json's ``ewise_bodies``: for each body index (in order), its expression text, rank, input
    count and kept input (-1: none; see the module docstring), and the phases (``name (op)``) whose tasks
    run it."""
    return _body_table(module, ("ewise",), _ewise_entry, "EWISE")


def operand_fields(task: wpk.TasksOp, buffers: dict[str, wpk.BufferOp]) -> tuple:
    """The fields every task of one op shares: opcode, input count, each operand slot's byte offset,
    session stride and arena (packed)."""
    slots = dict(enumerate(zip(task.input_names, task.operand_offsets)))
    slots[OUT] = (task.output.data, task.output_offset.value.data)
    offsets, strides, arenas = [0] * (OUT + 1), [0] * (OUT + 1), [0] * (OUT + 1)
    for k, (name, elem_offset) in slots.items():
        buf = buffers.get(name)
        if buf is None:
            raise PassFailedException(f"wpk-payload: {task.where()} uses buffer {name!r}, which no wpk.buffer declares")
        if buf.offset is None:
            raise PassFailedException(f"wpk-payload: buffer {name!r} has no offset; run wpk-arena first")
        offsets[k] = buf.offset.value.data + 4 * elem_offset
        strides[k] = buf.stride
        arenas[k] = ARENA_NAMES.index(buf.arena.data)
    return Opcode[task.opcode.data.upper()], len(task.input_names), offsets, strides, pack_arenas(arenas)


def encode_tasks(task: wpk.TasksOp, buffers: dict[str, wpk.BufferOp], where: dict, first_id: int) -> np.ndarray:
    """The payload records of the op's tasks, column by column (task ids from ``first_id``, in row order):
    the operand fields once, the tile and schedule fields from the op's columns."""
    if not task.scheduled:
        raise PassFailedException("wpk-payload: task has no worker; run wpk-schedule first")
    rec = np.zeros(task.count, PAYLOAD_DTYPE)

    def put(field: str, values) -> None:  # a value its field cannot hold is an error, never a wrapped number
        values = np.asarray(values, np.int64)
        info = np.iinfo(PAYLOAD_DTYPE[field].base)
        if values.size and (values.min() < info.min or values.max() > info.max):
            bad = values.min() if values.min() < info.min else values.max()
            raise PassFailedException(f"wpk-payload: {task.where()}: {field} {bad} does not fit the payload's "
                                      f"{PAYLOAD_DTYPE[field].base} field")
        rec[field] = values

    for name, value in zip(("opcode", "n_inputs", "offset", "session_stride", "arenas"), operand_fields(task, buffers)):
        put(name, value)
    put("params", where[task.param_words])
    for name in ("worker", "signal", "signal_phase", "n_waits"):
        put(name, task.column(name))
    tiles = task.tiles
    for j, name in enumerate(("session_begin", "session_end", "elem_begin", "elem_end")):
        put(name, tiles[:, j])
    waits = task.wait_table()
    put("wait_counter", waits[:, :, 0])
    put("wait_count", waits[:, :, 1])
    put("task", np.arange(first_id, first_id + task.count))
    return rec


@dataclass(frozen=True)
class WpkPayload(ModulePass):
    """Encodes each task's 128-byte payload record into its `payload` property."""

    name = "wpk-payload"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not phases_of(op):  # a lowered program of no tasks (zero-size tensors) still has its phases
            raise PassFailedException("wpk-payload: the module has no wpk.phase; run wave-to-wpk, wpk-arena and "
                                      "wpk-schedule first")
        buffers = buffers_of(op)
        tasks = tasks_of(op)
        number_ewise_bodies(tasks)
        number_epilogue_bodies(tasks)
        _, where = params_table(tasks)
        first_id = 0
        for task in tasks:
            task.set_payload(encode_tasks(task, buffers, where, first_id).view("<i4"))
            first_id += task.count
