"""The table of ONNX op lowerings and the context each lowering gets.

A lowering is a small function ``(ctx, inputs) -> outputs`` registered for one or more op types with
``@lowering("Add", ...)``. ``inputs`` are the node's inputs as builder Values (None for an omitted
optional input); it returns one Value (or None) per node output. Lowerings are only called when at
least one input is a runtime tensor: nodes over constants alone are folded before (fold.py).
The ops_*.py modules fill the table when imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import onnx
from onnx import helper

from wavec.errors import UnsupportedModelError
from wavec.frontends.onnx.builder import Builder, Static, Value, shape

Lowering = Callable[["LowerCtx", list[Value | None]], Sequence[Value | None]]
LOWERINGS: dict[str, Lowering] = {}
# Ops registered only to explain themselves: they fold over constants (shape arithmetic) but have no
# runtime form (comparisons and logic: runtime tensors are float32). Listed apart in error messages.
STATIC_ONLY: set[str] = set()


def static_only(*op_types: str) -> Callable[[Lowering], Lowering]:
    """Registers a lowering that rejects the op on runtime tensors (it only folds when static)."""
    STATIC_ONLY.update(op_types)
    return lowering(*op_types)


def lowering(*op_types: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op_type in op_types:
            LOWERINGS[op_type] = fn
        return fn

    return register


def node_error(file: str, node: onnx.NodeProto, opset: int, what: str, fix: str = "") -> UnsupportedModelError:
    """One line: where (file, node, op type, opset), what is wrong, what to do."""
    name = node.name or (node.output[0] if node.output else "?")
    text = f"{file}: node '{name}' ({node.op_type}, opset {opset}): {what}"
    if fix:
        text += f". {fix}"
    return UnsupportedModelError(" ".join(text.split()))


@dataclass
class LowerCtx:
    node: onnx.NodeProto
    opset: int
    file: str
    b: Builder

    def fail(self, what: str, fix: str = "") -> NoReturn:
        raise node_error(self.file, self.node, self.opset, what, fix)

    def attr(self, name: str, default=None):
        for a in self.node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def reject_attrs(self, **unsupported) -> None:
        """Fails when an attribute is present with a value other than its supported one."""
        for name, ok in unsupported.items():
            value = self.attr(name, ok)
            if value != ok:
                self.fail(f"attribute {name}={value!r} is not supported (only {ok!r})")

    def static(self, v: Value | None, what: str) -> np.ndarray:
        """The compile-time value of an input the lowering needs as a constant (axes, shapes, pads)."""
        if v is None:
            self.fail(f"{what} is missing")
        if not isinstance(v, Static):
            self.fail(
                f"{what} is a runtime tensor; it must be known at compile time",
                "Export the model with it as a constant or initializer, or bind the input it comes from",
            )
        return v.array

    def static_ints(self, v: Value | None, what: str) -> list[int]:
        return [int(x) for x in np.asarray(self.static(v, what)).reshape(-1)]

    def axis(self, a: int, rank: int) -> int:
        if not -rank <= a < max(rank, 1):
            self.fail(f"axis {a} is out of range for rank {rank}")
        return a % rank if rank else 0


__all__ = ["LOWERINGS", "STATIC_ONLY", "LowerCtx", "Static", "Value", "lowering", "node_error", "shape", "static_only"]
