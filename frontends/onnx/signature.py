"""The session signature of an ONNX graph: which inputs are frames, states or bound scalars, their
per-session shapes, and where the cohort (batch) axis sits in each.

The cohort axis is the symbolic dim (``dim_param``) that all symbolic inputs share (Silero: ``batch``
in input [batch, sequence] and state [2, batch, 128]). One session's view fixes it to 1 and records
its position as ``cohort_axis``. Every other symbolic dim must be bound by ``frames``, either by input
name (its one non-cohort symbolic dim, Silero: ``frames={"input": 576}``) or by dim name. A graph
with static shapes describes one session: cohort axis -1 everywhere. A node that reduces, slices,
concatenates or normalizes along the cohort dim is refused (`refuse_ops_across_sessions`): across a batch
it would mix sessions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from wavec.errors import UnsupportedModelError


@dataclass(frozen=True)
class Port:
    """A model input, state or output of one session: per-session shape and cohort axis (-1: none)."""

    name: str
    shape: tuple[int, ...]
    cohort_axis: int


@dataclass
class Signature:
    inputs: list[Port] = field(default_factory=list)
    states: list[tuple[Port, str]] = field(default_factory=list)  # (state input, the output it becomes)
    bound: dict[str, np.ndarray] = field(default_factory=dict)  # bound scalar inputs, their ONNX dtype
    cohort_dim: str | None = None
    dims: dict[str, int] = field(default_factory=dict)  # every symbolic dim's extent (cohort: 1)


def _dims(vi: onnx.ValueInfoProto) -> list[str | int | None]:
    """Declared dims: an int, a dim_param name, or None (unknown). Raises for a missing shape."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _elem_name(vi: onnx.ValueInfoProto) -> str:
    return helper.tensor_dtype_to_string(vi.type.tensor_type.elem_type).removeprefix("TensorProto.").lower()


def _bound_value(vi: onnx.ValueInfoProto, value, file: str) -> np.ndarray:
    """The constant a --bind folds in: a scalar (every declared dim 1 or symbolic) of the input's dtype."""
    name = vi.name
    dims = _dims(vi)
    if any(d != 1 for d in dims):
        shown = "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"
        raise UnsupportedModelError(
            f"{file}: --bind {name}={value}: input {name!r} has shape {shown}, not a scalar; only scalar inputs "
            "(shape [] or all 1s) can be bound. Feed it as a runtime input instead"
        )
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    except Exception as e:  # noqa: BLE001  (undefined or exotic element types)
        raise UnsupportedModelError(f"{file}: --bind {name}={value}: input {name!r} has an element type that cannot be bound") from e
    if dtype.kind not in "biuf":
        raise UnsupportedModelError(f"{file}: --bind {name}={value}: input {name!r} is {_elem_name(vi)}; only numeric scalars can be bound")
    try:
        number = float(value)
    except (TypeError, ValueError) as e:
        raise UnsupportedModelError(f"{file}: --bind {name}={value!r}: the value is not a number") from e
    if dtype.kind in "iub":
        if not number.is_integer():
            raise UnsupportedModelError(
                f"{file}: --bind {name}={value}: input {name!r} is {_elem_name(vi)}; give a whole number"
            )
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        if dtype.kind == "b" and number not in (0.0, 1.0):
            raise UnsupportedModelError(f"{file}: --bind {name}={value}: input {name!r} is bool; give 0 or 1")
        if info is not None and not info.min <= int(number) <= info.max:
            raise UnsupportedModelError(
                f"{file}: --bind {name}={value}: out of range for {_elem_name(vi)} ({info.min}..{info.max})"
            )
        number = int(number)
    return np.full([1] * len(dims), number, dtype=dtype)


def session_signature(
    graph: onnx.GraphProto,
    file: str,
    bindings: Mapping[str, float],
    frames: Mapping[str, int],
    states: Sequence[tuple[str, str]],
) -> Signature:
    """Classifies the graph inputs and fixes every per-session shape. Raises UnsupportedModelError for
    an unknown binding, a non-float32 runtime input, or a symbolic dim nothing binds."""
    weights = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in weights]
    by_name = {vi.name: vi for vi in inputs}
    state_of = dict(states)
    outputs = {vi.name for vi in graph.output}
    for name in bindings:
        if name not in by_name:
            raise UnsupportedModelError(
                f"{file}: --bind {name}: {name!r} is not a graph input; inputs are {sorted(by_name)}"
            )
    for name in state_of:
        if name not in by_name:
            raise UnsupportedModelError(
                f"{file}: --state {name}=...: {name!r} is not a graph input; inputs are {sorted(by_name)}"
            )
    for name in state_of:
        if name in bindings:
            raise UnsupportedModelError(f"{file}: input {name!r} is both bound (--bind) and a state (--state); choose one")
    for src, dst in states:
        if dst not in outputs:
            raise UnsupportedModelError(
                f"{file}: --state {src}={dst}: {dst!r} is not a graph output; outputs are {sorted(outputs)}"
            )
    dim_names = sorted({d for vi in inputs for d in _dims(vi) if isinstance(d, str)})
    for name, extent in frames.items():
        if name not in by_name and name not in dim_names:
            raise UnsupportedModelError(
                f"{file}: --frame {name}={extent}: {name!r} names neither a graph input nor a symbolic dim; "
                f"inputs are {sorted(by_name)}, symbolic dims {dim_names}"
            )
        if isinstance(extent, bool) or int(extent) != extent or int(extent) < 1:
            raise UnsupportedModelError(f"{file}: --frame {name}={extent}: a frame length must be a whole number >= 1")
        if name in bindings:
            raise UnsupportedModelError(f"{file}: input {name!r} is both bound (--bind) and framed (--frame); choose one")
    sig = Signature()
    for name, value in bindings.items():
        sig.bound[name] = _bound_value(by_name[name], value, file)

    runtime = [vi for vi in inputs if vi.name not in bindings]
    for vi in runtime:
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise UnsupportedModelError(
                f"{file}: input {vi.name!r} is {_elem_name(vi)}; runtime tensors must be float32. "
                f"Bind it with --bind {vi.name}=V (Python: bindings={{{vi.name!r}: V}}) if it is a scalar parameter, "
                "or export it as float32"
            )

    # Dims bound by name first; then the cohort dim is the one every symbolic input shares.
    sig.dims = {k: int(v) for k, v in frames.items() if k not in by_name}
    symbolic = [[d for d in _dims(vi) if isinstance(d, str) and d not in sig.dims] for vi in runtime]
    symbolic = [s for s in symbolic if s]
    if symbolic:
        shared = set(symbolic[0]).intersection(*symbolic[1:])
        # Several shared dims (one input [batch, sequence]): the outermost is the cohort.
        sig.cohort_dim = next((d for d in symbolic[0] if d in shared), None)
    if sig.cohort_dim is not None:
        sig.dims[sig.cohort_dim] = 1
    for name, extent in frames.items():
        if name not in by_name:
            continue
        free = [d for d in _dims(by_name[name]) if isinstance(d, str) and d not in sig.dims]
        if len(free) != 1:
            raise UnsupportedModelError(
                f"{file}: --frame {name}=N must fix exactly one symbolic dim of input {name!r}, which has {free}; "
                f"fix dims by name instead: --frame DIM=N (Python: frames={{'DIM': N}})"
            )
        sig.dims[free[0]] = int(extent)

    for vi in runtime:
        shape, axis = [], -1
        for i, d in enumerate(_dims(vi)):
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in sig.dims:
                shape.append(sig.dims[d])
                axis = i if d == sig.cohort_dim else axis
            else:
                what = f"dim {d!r}" if d else "an unknown dim"
                raise UnsupportedModelError(
                    f"{file}: input {vi.name!r} axis {i} is {what}, which is neither the cohort axis "
                    f"({sig.cohort_dim!r}) nor bound; fix its extent with --frame {vi.name}=N "
                    f"(Python: frames={{{vi.name!r}: N}})"
                )
        if not vi.type.tensor_type.HasField("shape"):
            raise UnsupportedModelError(f"{file}: input {vi.name!r} has no declared shape; export the model with shapes")
        port = Port(vi.name, tuple(shape), axis)
        if vi.name in state_of:
            sig.states.append((port, state_of[vi.name]))
        else:
            sig.inputs.append(port)
    return sig


def output_cohort_axis(model: onnx.ModelProto, sig: Signature, name: str, file: str) -> int:
    """Where the cohort dim sits in output ``name``: from its declared shape, else from ONNX shape
    inference. -1 when the model has no cohort dim."""
    if sig.cohort_dim is None:
        return -1
    for src, dst in ((p, d) for p, d in sig.states):
        if dst == name:
            return src.cohort_axis
    candidates = [vi for vi in model.graph.output if vi.name == name]
    for vi in candidates:
        if sig.cohort_dim in _dims(vi):
            return _dims(vi).index(sig.cohort_dim)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        for vi in [*inferred.graph.output, *inferred.graph.value_info]:
            if vi.name == name and sig.cohort_dim in _dims(vi):
                return _dims(vi).index(sig.cohort_dim)
    except Exception:  # noqa: BLE001  (inference is a best effort; the error below says what to do)
        pass
    raise UnsupportedModelError(
        f"{file}: cannot tell where the cohort dim {sig.cohort_dim!r} is in output {name!r}; "
        "declare the output's shape with that dim_param when exporting"
    )


# Ops that work along axes of their inputs (reduce, slice, concat, normalize over them): along the cohort
# dim they would mix sessions, which a session's view cannot express. Value: the default axes ("all":
# every axis; an int: that one axis; None: the op names its axes itself).
_ALONG_AXES = {
    "Concat": None, "Split": 0, "Gather": 0, "ArgMax": 0, "ArgMin": 0, "CumSum": None, "Slice": None,
    "Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "LayerNormalization": -1,
    **{op: "all" for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                            "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}
_SOFTMAX_LIKE = {"Softmax", "LogSoftmax", "Hardmax"}  # before opset 13: default axis 1, over every axis from it on
_TO_THE_END = 2**31 - 1  # a Slice end at least this takes every element left (exporters write INT64_MAX)


def _graphs(graph: onnx.GraphProto):
    """``graph`` and every subgraph of its nodes (If branches, Loop and Scan bodies), recursively."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from _graphs(sub)


def _constant_ints(graphs: list[onnx.GraphProto]) -> dict[str, list[int]]:
    """Integer initializers and Constant outputs (``value``, ``value_ints``, ``value_int``), by name: the
    axes, starts and ends inputs of Slice, Reduce and CumSum."""
    out: dict[str, list[int]] = {}
    for graph in graphs:
        out.update({t.name: numpy_helper.to_array(t).reshape(-1).tolist() for t in graph.initializer
                    if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)})
        for node in graph.node:
            if node.op_type != "Constant" or not node.attribute:
                continue
            attr = node.attribute[0]
            if attr.name == "value" and numpy_helper.to_array(attr.t).dtype.kind == "i":
                out[node.output[0]] = numpy_helper.to_array(attr.t).reshape(-1).tolist()
            elif attr.name in ("value_ints", "value_int"):
                out[node.output[0]] = list(attr.ints) if attr.name == "value_ints" else [attr.i]
    return out


def _node_axes(node: onnx.NodeProto, rank: int, consts: dict[str, list[int]], opset: int) -> list[int] | None:
    """The axes (0..rank-1) ``node`` works along, or None when they are not known statically."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    default = 1 if op in _SOFTMAX_LIKE and opset < 13 else _ALONG_AXES[op]
    axes_input = {"Slice": 3, "CumSum": 1}.get(op, 1 if op.startswith("Reduce") else None)
    if "axis" in attrs:
        axes = [attrs["axis"]]
    elif "axes" in attrs:
        axes = list(attrs["axes"])
    elif axes_input is not None and len(node.input) > axes_input and node.input[axes_input]:
        axes = consts.get(node.input[axes_input])
        if axes == [] and default == "all" and not attrs.get("noop_with_empty_axes"):
            axes = list(range(rank))  # an empty axes input reduces every axis
    elif op == "Slice":
        starts = attrs.get("starts") or (consts.get(node.input[1]) if len(node.input) > 1 else None)
        axes = None if starts is None else list(range(len(starts)))
    elif default == "all":
        axes = [] if attrs.get("noop_with_empty_axes") else list(range(rank))
    else:
        axes = None if default is None else [default]
    if axes is None:
        return None
    axes = [a + rank if a < 0 else a for a in axes]
    if op == "LayerNormalization" or (op in _SOFTMAX_LIKE and opset < 13):
        axes = list(range(min(axes), rank))
    return axes


def _whole_range(node: onnx.NodeProto, index: int, consts: dict[str, list[int]]) -> bool:
    """Whether entry ``index`` of a Slice's starts/ends/steps keeps the whole axis (start 0, to the end,
    step 1): a no-op along it."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    def entry(name, position, default):
        values = attrs.get(name) if name in attrs else (
            consts.get(node.input[position]) if len(node.input) > position and node.input[position] else default)
        return None if values is None or index >= len(values) else values[index]
    return (entry("starts", 1, None) == 0 and (entry("ends", 2, None) or 0) >= _TO_THE_END
            and entry("steps", 4, [1] * (index + 1)) == 1)


def _identity_along(node: onnx.NodeProto, position: int, consts: dict[str, list[int]]) -> bool:
    """Nodes that leave the cohort axis as it is: a one-input Concat, a one-output Split, a Slice keeping
    the whole axis (``position``: the axis's entry in the Slice's lists)."""
    if node.op_type == "Concat":
        return len(node.input) == 1
    if node.op_type == "Split":
        return len(node.output) == 1
    return node.op_type == "Slice" and _whole_range(node, position, consts)


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with ONNX shape inference's value_info (propagating shape data through Shape and Reshape
    where it can), or None when inference fails."""
    for data_prop in (True, False):
        try:
            return onnx.shape_inference.infer_shapes(model, data_prop=data_prop)
        except Exception:  # noqa: BLE001  (inference is a best effort)
            continue
    return None


def refuse_ops_across_sessions(model: onnx.ModelProto, sig: Signature, file: str) -> None:
    """Raises UnsupportedModelError for a node (in the graph or any subgraph) that reduces, slices,
    concatenates or normalizes along the cohort dim, where ONNX shape inference places it: across a batch
    it would mix sessions, while a session's view sees that dim as 1 and would silently compute something
    else. A best effort: a node whose shapes or axes inference cannot tell is not checked, and neither is
    an op that mixes the batch through other means (a Reshape merging it, a MatMul contracting it)."""
    if sig.cohort_dim is None:
        return
    inferred = _inferred(model)
    if inferred is None:
        return
    graphs = list(_graphs(inferred.graph))
    dims = {vi.name: _dims(vi) for g in graphs for vi in [*g.input, *g.value_info, *g.output]}
    consts = _constant_ints(graphs)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    for node in (n for g in graphs for n in g.node):
        if node.op_type not in _ALONG_AXES:
            continue
        data = node.input if node.op_type == "Concat" else node.input[:1]
        for name in data:
            shape = dims.get(name)
            if not shape:
                continue
            axes = _node_axes(node, len(shape), consts, opset) or []
            for position, axis in enumerate(axes):
                if 0 <= axis < len(shape) and shape[axis] == sig.cohort_dim and not _identity_along(node, position, consts):
                    raise UnsupportedModelError(
                        f"{file}: node {node.name or node.output[0]!r} ({node.op_type}) works along axis {axis} of "
                        f"{name!r}, the cohort dim {sig.cohort_dim!r}: across a batch it would mix sessions, and a "
                        "session alone sees that dim as 1. wavec compiles one session's computation: export the "
                        "model so that no op reduces, slices or concatenates along the batch dim (if "
                        f"{sig.cohort_dim!r} is not the batch of sessions, give its length with --frame "
                        f"{sig.cohort_dim}=LEN)"
                    )
