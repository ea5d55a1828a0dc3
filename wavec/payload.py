"""The 128-byte task payload, defined once. The numpy dtype and the CUDA struct are both generated from
`FIELDS`; the CUDA side checks `sizeof(Payload) == 128` with a static_assert.

A task waits, before it starts in beat b (counted from 0 in the kernel's launch), until
``counter[wait_counter[i]] >= wait_count[i] * (b + 1)`` for each i < n_waits, and after it finishes
increments ``counter[signal]`` (its group's counter: the tasks of its phase covering its session range)
and, when ``signal_phase`` is not 0, ``counter[signal_phase]`` (its phase-wide counter). A waiter on a
counter waits for every task that signals it, through either field. Counters only grow, so they never
need a reset between beats (Mirage MPK's event counters, ARCHITECTURE.md). Counter 0 is the end-of-beat counter every worker
increments once per beat.
"""

from __future__ import annotations

import numpy as np

MAX_WAITS = 3
N_OPERANDS = 5
PAYLOAD_BYTES = 128
BEAT_DONE_COUNTER = 0

# (name, numpy base type, count, meaning). Order is the byte layout; every field is naturally aligned.
FIELDS: tuple[tuple[str, str, int, str], ...] = (
    ("opcode", "u2", 1, "wavec.opcodes.Opcode"),
    ("signal_phase", "u2", 1, "second counter incremented when the task is done (phase-wide), 0 = none"),
    ("worker", "u2", 1, "the block (SM) that runs the task"),
    ("n_waits", "u2", 1, "how many wait slots are used"),
    ("task", "u4", 1, "task id, unique in the profile"),
    ("signal", "u4", 1, "counter incremented when the task is done (the task's group)"),
    ("wait_counter", "u4", MAX_WAITS, "counters waited on"),
    ("wait_count", "u4", MAX_WAITS, "signals per beat expected on each waited counter"),
    ("session_begin", "u4", 1, "first session slot of the tile"),
    ("session_end", "u4", 1, "one past the last session slot"),
    ("elem_begin", "u4", 1, "first flat output element of the tile, per session"),
    ("elem_end", "u4", 1, "one past the last output element"),
    ("params", "u4", 1, "word offset of the parameter block in params.bin"),
    ("n_inputs", "u1", 1, "input operands in slots 0..n_inputs-1; the output is slot 4"),
    ("pad", "u1", 3, "zero"),
    ("offset", "u8", N_OPERANDS, "byte offset of each operand in its arena (session 0)"),
    ("session_stride", "u4", N_OPERANDS, "bytes between consecutive sessions of each operand (0: shared)"),
    ("arenas", "u4", 1, "arena id of operand k in bits 4k..4k+3 (wavec.opcodes.Arena)"),
)

_C_TYPES = {"u1": "uint8_t", "u2": "uint16_t", "u4": "uint32_t", "u8": "uint64_t"}

PAYLOAD_DTYPE = np.dtype([(name, "<" + t, (n,)) if n > 1 else (name, "<" + t) for name, t, n, _ in FIELDS])
assert PAYLOAD_DTYPE.itemsize == PAYLOAD_BYTES, PAYLOAD_DTYPE.itemsize


def pack_arenas(arenas: list[int]) -> int:
    word = 0
    for k, a in enumerate(arenas):
        word |= (int(a) & 0xF) << (4 * k)
    return word


def operand_arena(record: np.void | np.ndarray, k: int) -> int:
    return (int(record["arenas"]) >> (4 * k)) & 0xF


def layout() -> list[dict]:
    """Field names, byte offsets and sizes, as `wavec payload-layout --json` prints them."""
    return [
        {
            "name": name,
            "offset": PAYLOAD_DTYPE.fields[name][1],
            "size": PAYLOAD_DTYPE.fields[name][0].itemsize,
            "type": _C_TYPES[t] + (f"[{n}]" if n > 1 else ""),
            "meaning": meaning,
        }
        for name, t, n, meaning in FIELDS
    ]


def cuda_struct() -> str:
    """The C declaration of the record, generated from FIELDS."""
    lines = ["struct __align__(16) Payload {"]
    for name, t, n, meaning in FIELDS:
        suffix = f"[{n}]" if n > 1 else ""
        lines.append(f"  {_C_TYPES[t]} {name}{suffix};  // {meaning}")
    lines.append("};")
    lines.append(f'static_assert(sizeof(Payload) == {PAYLOAD_BYTES}, "payload layout drifted from wavec/payload.py");')
    return "\n".join(lines)
