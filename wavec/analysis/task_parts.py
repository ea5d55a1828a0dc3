"""Decoded `wpk.tasks` operand properties, read once per distinct attribute set.

Every task of a `wpk.tasks` op shares its operand properties, and the ops of like layers share equal
values, so a pass that walks thousands of ops decodes each distinct set once: a `Part` (opcode, operand
slots, parameter words and the decoded block). A module parsed from text has its own attribute objects
per op; the results are the same, only less shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.opcodes import OUT, Params, unpack_params


@dataclass(frozen=True)
class Part:
    """What the tasks of one `wpk.tasks` op share."""

    opcode: str
    slots: tuple[tuple[int, str, int], ...]  # (operand: input slot or OUT, buffer name, element offset)
    words: tuple[int, ...]  # the parameter block
    params: Params
    n_inputs: int


class TaskParts:
    """`part(op)`, memoized by the identity of the op's operand property attributes (the memo keeps the
    attributes alive, so an id is never reused while it is in the memo)."""

    def __init__(self) -> None:
        self._parts: dict[tuple, tuple[tuple, Part]] = {}
        self._by_value: dict[tuple, Part] = {}

    def part(self, op) -> Part:
        p = op.properties
        attrs = (p["params"], p["inputs"], p["input_offsets"], p["output"], p["output_offset"], p["opcode"])
        key = tuple(map(id, attrs))
        hit = self._parts.get(key)
        if hit is not None:
            return hit[1]
        words = tuple(attrs[0].get_values())
        names = [a.data for a in attrs[1].data]
        offsets = attrs[2].get_values()
        value = (words, tuple(names), tuple(offsets), attrs[3].data, attrs[4].value.data, attrs[5].data)
        part = self._by_value.get(value)
        if part is None:
            slots = tuple((k, n, int(o)) for k, (n, o) in enumerate(zip(names, offsets)))
            slots += ((OUT, attrs[3].data, int(attrs[4].value.data)),)
            params = unpack_params(np.array(words, np.int64), 0) if words else None
            part = self._by_value[value] = Part(attrs[5].data, slots, words, params, len(names))
        self._parts[key] = (attrs, part)
        return part
