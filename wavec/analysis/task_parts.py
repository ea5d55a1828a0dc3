"""Decoded `wpk.task` properties, read once per distinct attribute and shared by the tiles of an op.

The tiles of one op share every property but ``sessions`` and ``elems`` (wave-to-wpk builds them so), and
attributes are immutable, so a pass that walks hundreds of thousands of tasks reads each distinct
attribute object once: a `Part` (opcode, operand slots, parameter words and the decoded block) per
distinct set of operand properties, and the tile bounds per distinct pair of range attributes. A module
parsed from text has its own attribute objects per task; the results are the same, only less shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wavec.opcodes import OUT, Params, unpack_params


@dataclass(frozen=True)
class Part:
    """What the tiles of one op share."""

    opcode: str
    slots: tuple[tuple[int, str, int], ...]  # (operand: input slot or OUT, buffer name, element offset)
    words: tuple[int, ...]  # the parameter block
    params: Params
    n_inputs: int


class TaskParts:
    """`part(task)` and `bounds(task)`, memoized by the identity of the task's property attributes (the
    memo keeps the attributes alive, so an id is never reused while it is in the memo)."""

    def __init__(self) -> None:
        self._parts: dict[tuple, tuple[tuple, Part]] = {}
        self._by_value: dict[tuple, Part] = {}
        self._bounds: dict[tuple, tuple[tuple, tuple[int, int, int, int]]] = {}

    def part(self, task) -> Part:
        p = task.properties
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

    def bounds(self, task) -> tuple[int, int, int, int]:
        """(first session, end session, first element, end element) of the task's tile."""
        p = task.properties
        attrs = (p["sessions"], p["elems"])
        key = (id(attrs[0]), id(attrs[1]))
        hit = self._bounds.get(key)
        if hit is None:
            s0, s1 = attrs[0].get_values()
            e0, e1 = attrs[1].get_values()
            hit = self._bounds[key] = (attrs, (s0, s1, e0, e1))
        return hit[1]
