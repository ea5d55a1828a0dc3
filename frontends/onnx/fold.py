"""Compile-time evaluation of ONNX nodes whose inputs are all constants, with onnx's own reference
evaluator: shape arithmetic (Shape -> Gather -> Concat -> Reshape in int64), weight preprocessing
(Slice / Concat of initializers), Constant, ConstantOfShape, and any other op over constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

# Ops whose value is not a function of their inputs: folding them would freeze one random draw.
NOT_FOLDABLE = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
     "If", "Loop", "Scan"}
)


def fold_node(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int) -> list[np.ndarray | None]:
    """Evaluates ``node`` on constant ``inputs`` (None for an omitted optional input). Returns one
    array per node output (None for an omitted output name). Raises whatever the evaluator raises."""
    evaluator = ReferenceEvaluator(node, opsets={"": opset})
    feeds = {name: np.asarray(v) for name, v in zip(node.input, inputs) if name}
    wanted = [o for o in node.output if o]
    results = dict(zip(wanted, evaluator.run(wanted, feeds)))
    return [np.asarray(results[o]) if o else None for o in node.output]


def static_shape_op(node: onnx.NodeProto, shape: Sequence[int]) -> np.ndarray:
    """Shape (with its start/end attributes) or Size of a tensor whose shape is known: int64."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(list(shape)[slice(start, end)], np.int64)
