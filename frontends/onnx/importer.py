"""ONNX -> wave: walks the graph once, in order, and turns it into one session's view of one beat.

Each ONNX name maps to a builder Value. A node whose inputs are all compile-time constants is folded
(fold.py); an ``If`` on a constant condition is replaced by its taken branch, walked in a nested
scope so names from outer graphs resolve; Identity aliases; Shape and Size of a runtime tensor read
its static shape. Every other node goes through its lowering in the LOWERINGS table (ops_*.py).
Then graph outputs and state pairs become wave.output / wave.state_write, and ops nothing reads
are dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, Region

from wavec.dialects import wave
from wavec.errors import UnsupportedModelError
from wavec.frontends.onnx import ops_elementwise, ops_nn, ops_reduce, ops_rnn, ops_shape  # noqa: F401 (fill LOWERINGS)
from wavec.frontends.onnx.builder import Builder, Static, Value, shape
from wavec.frontends.onnx.fold import NOT_FOLDABLE, fold_node, static_shape_op
from wavec.frontends.onnx.lowering import LOWERINGS, STATIC_ONLY, LowerCtx, node_error
from wavec.frontends.onnx.signature import output_cohort_axis, refuse_ops_across_sessions, session_signature

# Ops that only describe training or layout and pass their (first) input through at inference.
ALIASES = frozenset({"Identity"})


@dataclass
class ImportedGraph:
    module: ModuleOp  # builtin.module { func.func @<name>() { wave ops ...; func.return } }
    weights: dict[str, np.ndarray]  # float32, keyed by wave.weight / wave.state name
    name: str  # model name (file stem)
    bindings: dict[str, float]  # the scalar inputs folded in as constants


class Scope:
    """ONNX names visible in one graph; a branch of an If sees its parents' names."""

    def __init__(self, parent: "Scope | None" = None):
        self.values: dict[str, Value] = {}
        self.parent = parent

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        return None


def _cohort_attr(axis: int) -> dict:
    return {"cohort_axis": IntegerAttr(axis, i64)}


class _Importer:
    def __init__(self, model: onnx.ModelProto, file: str):
        self.model = model
        self.file = file
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.b = Builder(Block())

    def error(self, node: onnx.NodeProto, what: str, fix: str = "") -> UnsupportedModelError:
        return node_error(self.file, node, self.opset, what, fix)

    def walk(self, graph: onnx.GraphProto, scope: Scope) -> None:
        for t in graph.initializer:
            scope.values[t.name] = Static(numpy_helper.to_array(t), t.name)
        for node in graph.node:
            self.visit(node, scope)

    def visit(self, node: onnx.NodeProto, scope: Scope) -> None:
        if node.domain not in ("", "ai.onnx"):
            raise self.error(node, f"domain {node.domain!r} is not supported", "Export with standard ONNX ops only")
        inputs: list[Value | None] = []
        for name in node.input:
            value = scope.lookup(name) if name else None
            if name and value is None:
                raise self.error(node, f"input {name!r} is not defined before this node")
            inputs.append(value)
        present = [v for v in inputs if v is not None]
        op = node.op_type
        self.b.where = node.name or (node.output[0] if node.output else op)
        try:
            outputs = self.lower(node, inputs, present, scope)
        except UnsupportedModelError:
            raise
        except Exception as e:  # noqa: BLE001  (an assumption of a lowering broke: name the node)
            raise self.error(
                node,
                f"cannot lower this node ({type(e).__name__}: {e})",
                "Check its input shapes (--frame, --bind) against what the op allows, or report it with the model",
            ) from e

        for name, value in zip(node.output, outputs):
            if name:
                scope.values[name] = value

    def lower(self, node: onnx.NodeProto, inputs: list[Value | None], present: list[Value], scope: Scope) -> list[Value | None]:
        op = node.op_type
        if op == "If":
            return self.inline_if(node, inputs[0], scope)
        if op in ALIASES:
            return [inputs[0]]
        if op in ("Shape", "Size") and inputs[0] is not None:
            return [Static(static_shape_op(node, shape(inputs[0])))]
        if all(isinstance(v, Static) for v in present) and op not in NOT_FOLDABLE:
            try:
                folded = fold_node(node, [v.array if isinstance(v, Static) else None for v in inputs], self.opset)
            except Exception as e:  # noqa: BLE001  (the reference evaluator raises many types)
                raise self.error(node, f"constant folding failed ({type(e).__name__}: {e})") from e
            return [Static(a) if a is not None else None for a in folded]
        if op in LOWERINGS:  # (a STATIC_ONLY op's lowering says why it cannot run and what to do)
            return list(LOWERINGS[op](LowerCtx(node, self.opset, self.file, self.b), inputs))
        runtime = sorted(set(LOWERINGS) - STATIC_ONLY)
        raise self.error(
            node,
            "this op is not supported on runtime tensors",
            f"Supported runtime ops: {', '.join(runtime)}. Folded when static (over constants only): "
            f"{', '.join(sorted(STATIC_ONLY))}, and any other op whose inputs are all constants",
        )

    def inline_if(self, node: onnx.NodeProto, cond: Value | None, scope: Scope) -> list[Value | None]:
        if not isinstance(cond, Static):
            raise self.error(
                node,
                "the condition depends on runtime data; only an If on a constant condition is inlined",
                "Bind the inputs the condition depends on, or export without data-dependent control flow",
            )
        branch_name = "then_branch" if bool(np.asarray(cond.array).reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == branch_name)
        inner = Scope(scope)
        self.walk(branch, inner)
        return [inner.lookup(o.name) for o in branch.output]


def _load(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str, str]:
    """The model proto, its file name for messages, and its name. Raises UnsupportedModelError for a
    path that is not a readable ONNX model."""
    if isinstance(model, onnx.ModelProto):
        name = model.graph.name or "model"
        return model, f"{name}.onnx", name
    path = Path(model)
    if str(model).strip() == "":
        raise UnsupportedModelError("empty model path; give the .onnx file")
    if path.is_dir():
        raise UnsupportedModelError(f"{path}: is a directory; give the .onnx model file")
    if not path.is_file():
        raise UnsupportedModelError(f"{path}: no such model file")
    fix = "export it again (torch.onnx.export) or check the download"
    if path.suffix == ".mlir":
        fix = "this frontend reads ONNX models (or a zoo NAME:PRESET); run wave IR through wavec-opt"
    if path.stat().st_size == 0:
        raise UnsupportedModelError(f"{path}: not a valid ONNX model (the file is empty); {fix}")
    try:
        proto = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001  (protobuf decode errors, missing external data, ...)
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise UnsupportedModelError(f"{path}: not a valid ONNX model ({reason[:200]}); {fix}") from e
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise UnsupportedModelError(f"{path}: not a valid ONNX model (no graph or IR version); {fix}")
    return proto, path.name, path.stem


def _check_graph(graph: onnx.GraphProto, file: str) -> None:
    if not graph.output:
        raise UnsupportedModelError(f"{file}: the graph has no outputs; there is nothing to compute. Export the model with its outputs")
    if not graph.node:
        raise UnsupportedModelError(f"{file}: the graph has no nodes; there is nothing to compile. Export the model with its computation")


def _drop_dead_ops(block: Block, weights: dict[str, np.ndarray]) -> None:
    """Removes compute ops and weights nothing reads (unused LSTM sequence outputs, dead branches).
    Inputs and states stay: they are the session's interface."""
    keep = (wave.OutputOp, wave.StateWriteOp, wave.InputOp, wave.StateOp, func.ReturnOp)
    for op in reversed(list(block.ops)):
        if not isinstance(op, keep) and all(not r.uses for r in op.results):
            if isinstance(op, wave.WeightOp):
                weights.pop(op.sym, None)
            block.erase_op(op)


def import_onnx(
    model: str | os.PathLike | onnx.ModelProto,
    *,
    bindings: Mapping[str, float] = {},
    frames: Mapping[str, int] = {},
    states: Sequence[tuple[str, str]] = [],
) -> ImportedGraph:
    """Imports an ONNX model as one session's view of one beat (see the module docstring).

    ``bindings`` folds scalar inputs in as constants (Silero: ``{"sr": 16000}``); ``frames`` fixes
    the extent of symbolic non-cohort dims (``{"input": 576}``); ``states`` pairs a state input with
    the output holding its next value (``[("state", "stateN")]``). Raises UnsupportedModelError."""
    proto, file, name = _load(model)
    _check_graph(proto.graph, file)
    sig = session_signature(proto.graph, file, bindings, frames, states)
    refuse_ops_across_sessions(proto, sig, file)
    imp = _Importer(proto, file)
    b, top = imp.b, Scope()
    for port in sig.inputs:
        top.values[port.name] = b.append(wave.InputOp(port.name, port.shape, _cohort_attr(port.cohort_axis)))
    for port, _ in sig.states:
        top.values[port.name] = b.append(wave.StateOp(port.name, port.shape, _cohort_attr(port.cohort_axis)))
        b.weights[port.name] = np.zeros(port.shape, np.float32)
    for key, array in sig.bound.items():
        top.values[key] = Static(array)

    imp.walk(proto.graph, top)

    b.where = "output"
    state_out = {dst: port for port, dst in sig.states}
    for vi in proto.graph.output:
        value = top.lookup(vi.name)
        if isinstance(value, Static) and value.array.dtype != np.float32:
            raise UnsupportedModelError(
                f"{file}: output {vi.name!r} is a constant of dtype {value.array.dtype}; outputs must be float32"
            )
        axis = output_cohort_axis(proto, sig, vi.name, file)
        ssa = b.operand(value, hint=vi.name)
        if vi.name in state_out:
            port = state_out[vi.name]
            if shape(ssa) != port.shape:
                raise UnsupportedModelError(
                    f"{file}: state {port.name!r} is {list(port.shape)} but its next value {vi.name!r} is {list(shape(ssa))}"
                )
            b.append(wave.StateWriteOp(port.name, ssa))
        b.append(wave.OutputOp(vi.name, ssa, _cohort_attr(axis)))
    b.append(func.ReturnOp())
    _drop_dead_ops(b.block, b.weights)

    fn = func.FuncOp(name, ([], []), Region([b.block]))
    module = ModuleOp([fn])
    return ImportedGraph(module=module, weights=b.weights, name=name, bindings=dict(bindings))
