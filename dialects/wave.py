"""The `wave` dialect: a streaming model's graph, one session's view of one beat.

Tensors are builtin float32 ranked tensors. Before `wave-cohort` they have per-session shapes; after it,
every activation and state value carries the cohort (session) axis outermost and the module has the
attribute ``wave.cohort = N``; weights keep their shapes (the cohort shares them).

Session semantics are first class:
- ``wave.input "x"``: this beat's frame of model input x;
- ``wave.weight "w"``: a tensor shared by the cohort; its bytes live outside the IR in a blob keyed by name;
- ``wave.state "h"``: the value of persistent state h at the start of the beat (initial value: blob "h");
- ``wave.state_write "h", %v``: the value h takes for the next beat (exactly one per state);
- ``wave.output "y", %v``: this beat's output y.
Compute ops follow numpy/ONNX semantics: ``wave.ewise`` (a float32 expression over broadcast inputs,
see wavec/opcodes.py), ``wave.matmul`` (numpy matmul, rank >= 2), ``wave.conv`` (ONNX Conv over NC +
spatial, extra leading axes are batch), ``wave.reduce``, ``wave.concat``, ``wave.slice``,
``wave.transpose``, ``wave.reshape``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    AttrSizedOperandSegments,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from wavec.opcodes import REDUCE_KINDS, parse_expr

F32Tensor = TensorType


def tensor(shape: Sequence[int]) -> TensorType:
    return TensorType(f32, list(shape))


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    typ = value.type if isinstance(value, SSAValue) else value
    assert isinstance(typ, TensorType)
    return tuple(typ.get_shape())


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def _check_f32_tensor(op: IRDLOperation, what: str, typ: Attribute) -> None:
    if not isinstance(typ, TensorType) or typ.get_element_type() != f32:
        raise VerifyException(f"{op.name}: {what} must be a float32 ranked tensor, got {typ}")
    if any(d < 0 for d in typ.get_shape()):
        raise VerifyException(f"{op.name}: {what} has a dynamic dimension; wave tensors are static")


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        return None


class _Named(IRDLOperation):
    """Session boundary ops: a property ``name`` that keys the model input, weight, state or output."""

    irdl_options = (ParsePropInAttrDict(),)

    @property
    def sym(self) -> str:
        return self.properties["name"].data  # type: ignore[union-attr]


@irdl_op_definition
class InputOp(_Named):
    name = "wave.input"
    sym_name = prop_def(StringAttr, prop_name="name")
    result = result_def(TensorType)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, shape: Sequence[int], attributes: dict | None = None):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[tensor(shape)], attributes=attributes)

    def verify_(self) -> None:
        _check_f32_tensor(self, "input", self.result.type)


@irdl_op_definition
class WeightOp(_Named):
    """A weight; ``dtype = "bf16"`` promises that every value is a bfloat16 number (computed as float32), which
    lets a tensor-core body use the values' bits as TF32 operands without splitting them."""

    name = "wave.weight"
    sym_name = prop_def(StringAttr, prop_name="name")
    value_dtype = opt_prop_def(StringAttr, prop_name="dtype")
    result = result_def(TensorType)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, shape: Sequence[int], dtype: str = "fp32"):
        props = {"name": StringAttr(name)}
        if dtype != "fp32":
            props["dtype"] = StringAttr(dtype)
        super().__init__(properties=props, result_types=[tensor(shape)])

    @property
    def is_bf16(self) -> bool:
        return self.value_dtype is not None and self.value_dtype.data == "bf16"

    def verify_(self) -> None:
        _check_f32_tensor(self, "weight", self.result.type)
        if self.value_dtype is not None and not self.is_bf16:
            raise VerifyException(f'wave.weight {self.sym!r}: dtype {self.value_dtype.data!r} is not "bf16"; '
                                  "omit it for float32 values")


@irdl_op_definition
class StateOp(_Named):
    name = "wave.state"
    sym_name = prop_def(StringAttr, prop_name="name")
    result = result_def(TensorType)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, shape: Sequence[int], attributes: dict | None = None):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[tensor(shape)], attributes=attributes)

    def verify_(self) -> None:
        _check_f32_tensor(self, "state", self.result.type)
        writes = [
            op for op in (self.parent_block().ops if self.parent_block() else [])
            if isinstance(op, StateWriteOp) and op.sym == self.sym
        ]
        if len(writes) != 1:
            raise VerifyException(f"wave.state {self.sym!r} must have exactly one wave.state_write, found {len(writes)}")
        if writes[0].value.type != self.result.type:
            raise VerifyException(
                f"wave.state_write {self.sym!r} writes {writes[0].value.type}, the state is {self.result.type}"
            )


@irdl_op_definition
class StateWriteOp(_Named):
    name = "wave.state_write"
    sym_name = prop_def(StringAttr, prop_name="name")
    value = operand_def(TensorType)
    assembly_format = "$name `,` $value attr-dict `:` type($value)"

    def __init__(self, name: str, value: SSAValue):
        super().__init__(properties={"name": StringAttr(name)}, operands=[value])


@irdl_op_definition
class OutputOp(_Named):
    name = "wave.output"
    sym_name = prop_def(StringAttr, prop_name="name")
    value = operand_def(TensorType)
    assembly_format = "$name `,` $value attr-dict `:` type($value)"

    def __init__(self, name: str, value: SSAValue, attributes: dict | None = None):
        super().__init__(properties={"name": StringAttr(name)}, operands=[value], attributes=attributes)

    def verify_(self) -> None:
        _check_f32_tensor(self, "output", self.value.type)


@irdl_op_definition
class EwiseOp(IRDLOperation):
    """``result = expr(%0, %1, ...)`` elementwise with numpy broadcasting to the result shape."""

    name = "wave.ewise"
    expr = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$expr `(` $inputs `)` attr-dict `:` functional-type($inputs, $result)"

    def __init__(self, expr: str, inputs: Sequence[SSAValue], shape: Sequence[int]):
        super().__init__(properties={"expr": StringAttr(expr)}, operands=[list(inputs)], result_types=[tensor(shape)])

    def verify_(self) -> None:
        try:
            expr = parse_expr(self.expr.data)
        except ValueError as e:
            raise VerifyException(f"wave.ewise: {e}") from e
        used = expr.inputs()
        if used and max(used) >= len(self.inputs):
            raise VerifyException(f"wave.ewise: expression uses %{max(used)} but the op has {len(self.inputs)} inputs")
        out = shape_of(self.result)
        shapes = [shape_of(v) for v in self.inputs]
        if broadcast_shapes([*shapes, out]) != out:
            raise VerifyException(f"wave.ewise: inputs {shapes} do not broadcast to the result shape {list(out)}")


def _check_attached_expr(op: IRDLOperation, what: str, text: StringAttr | None, n_inputs: int) -> bool:
    """Checks an op's ``what`` (epilogue or prologue) expression against its ``n_inputs`` extra inputs
    (``%1..``); False when the op has none (and no inputs for it)."""
    if text is None:
        if n_inputs:
            raise VerifyException(f"{op.name}: {what} inputs without a {what} expression")
        return False
    try:
        expr = parse_expr(text.data)
    except ValueError as e:
        raise VerifyException(f"{op.name}: {what}: {e}") from e
    used = expr.inputs()
    if used and max(used) > n_inputs:
        raise VerifyException(
            f"{op.name}: {what} uses %{max(used)} but the op has {n_inputs} {what} inputs (%1..%{n_inputs})"
        )
    return True


def _verify_epilogue(op: IRDLOperation) -> None:
    """An optional ``epilogue`` expression applied per output element: ``%0`` is the op's own value,
    ``%1..`` its ``epilogue_inputs`` (broadcast to the result shape, as wave.ewise's inputs are)."""
    extras = list(op.epilogue_inputs)
    if not _check_attached_expr(op, "epilogue", op.epilogue, len(extras)):
        return
    out = shape_of(op.result)
    shapes = [shape_of(v) for v in extras]
    if broadcast_shapes([*shapes, out]) != out:
        raise VerifyException(f"{op.name}: epilogue inputs {shapes} do not broadcast to the result shape {list(out)}")


def epilogue_text(op: IRDLOperation) -> str | None:
    """The op's epilogue expression, or None."""
    return op.epilogue.data if op.epilogue is not None else None


def _verify_prologue(op: "MatmulOp") -> None:
    """An optional ``prologue`` expression applied to each element of ``a`` as the matmul loads it: ``%0``
    is the element, ``%1..`` the ``prologue_inputs``. Each input broadcasts (right-aligned) to ``a``'s shape
    and varies along the row axes alone (all but the last: a per-row mean or reciprocal deviation) or
    along the last (k) axis alone (a per-feature scale or shift), never along both: a task reads it once per
    row or once per k, not once per element of ``a``."""
    extras = list(op.prologue_inputs)
    if not _check_attached_expr(op, "prologue", op.prologue, len(extras)):
        return
    sa = shape_of(op.a)
    for v in extras:
        s = shape_of(v)
        if broadcast_shapes([s, sa]) != sa:
            raise VerifyException(f"{op.name}: prologue input {list(s)} does not broadcast to a's shape {list(sa)}")
        if prologue_axis(s, sa) is None:
            raise VerifyException(
                f"{op.name}: prologue input {list(s)} varies along both the rows and the k axis of a {list(sa)}; "
                "a prologue input is per row (last axis 1) or per k (every other axis 1)"
            )


def prologue_axis(shape: Sequence[int], a_shape: Sequence[int]) -> str | None:
    """How an input of ``shape``, broadcast to a matmul's ``a_shape``, varies: "row" (not along k), "k"
    (along k alone), or None (along both). A constant-along-everything input counts as "row"."""
    pad = len(a_shape) - len(shape)
    varies = [size != 1 and a_shape[pad + i] != 1 for i, size in enumerate(shape)]
    along_k = bool(varies) and varies[-1]
    along_rows = any(varies[:-1])
    if along_k and along_rows:
        return None
    return "k" if along_k else "row"


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """numpy ``matmul(prologue(a), b)`` for operands of rank >= 2 (batch axes broadcast), then the optional
    ``epilogue`` (``wave-fuse`` folds a bias, an activation or a residual into it, and a norm's final
    normalizing step into the ``prologue``, which is applied to each element of ``a`` as it is read)."""

    name = "wave.matmul"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    prologue_inputs = var_operand_def(TensorType)
    epilogue_inputs = var_operand_def(TensorType)
    prologue = opt_prop_def(StringAttr)
    epilogue = opt_prop_def(StringAttr)
    result = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    # Custom form (the declarative format cannot type two variadic groups with one functional type):
    #   %a, %b [prologue "expr"(%p, ...)] [epilogue "expr"(%e, ...)] attr-dict : (types of all operands) -> type

    def __init__(self, a: SSAValue, b: SSAValue, shape: Sequence[int], epilogue: str | None = None,
                 epilogue_inputs: Sequence[SSAValue] = (), prologue: str | None = None,
                 prologue_inputs: Sequence[SSAValue] = ()):
        props = {"epilogue": StringAttr(epilogue)} if epilogue is not None else {}
        if prologue is not None:
            props["prologue"] = StringAttr(prologue)
        super().__init__(operands=[a, b, list(prologue_inputs), list(epilogue_inputs)], result_types=[tensor(shape)],
                         properties=props)

    @classmethod
    def parse(cls, parser: Parser) -> "MatmulOp":
        a = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        b = parser.parse_unresolved_operand()
        groups = {}
        for keyword in ("prologue", "epilogue"):
            if parser.parse_optional_keyword(keyword):
                expr = parser.parse_str_literal()
                groups[keyword] = (expr, parser.parse_comma_separated_list(
                    parser.Delimiter.PAREN, parser.parse_unresolved_operand))
        attrs = parser.parse_optional_attr_dict()
        props = {k: attrs.pop(k) for k in ("prologue", "epilogue") if k in attrs}
        parser.parse_punctuation(":")
        pos = parser.pos
        ftype = parser.parse_function_type()
        pro, epi = groups.get("prologue", (None, [])), groups.get("epilogue", (None, []))
        values = parser.resolve_operands([a, b, *pro[1], *epi[1]], ftype.inputs.data, pos)
        if len(ftype.outputs.data) != 1:
            parser.raise_error("wave.matmul has one result", pos)
        n_pro = len(pro[1])
        op = cls(values[0], values[1], shape_of(ftype.outputs.data[0]), epi[0], values[2 + n_pro :], pro[0],
                 values[2 : 2 + n_pro])
        op.properties.update(props)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.a)
        printer.print_string(", ")
        printer.print_operand(self.b)
        for keyword, expr, inputs in (("prologue", self.prologue, self.prologue_inputs),
                                      ("epilogue", self.epilogue, self.epilogue_inputs)):
            if expr is not None:
                printer.print_string(f" {keyword} ")
                printer.print_string_literal(expr.data)
                printer.print_string("(")
                printer.print_list(inputs, printer.print_operand)
                printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type([v.type for v in self.operands], [self.result.type])

    def verify_(self) -> None:
        _verify_epilogue(self)
        _verify_prologue(self)
        sa, sb, out = shape_of(self.a), shape_of(self.b), shape_of(self.result)
        if len(sa) < 2 or len(sb) < 2:
            raise VerifyException(f"wave.matmul: operands must have rank >= 2, got {list(sa)} and {list(sb)}")
        if sa[-1] != sb[-2]:
            raise VerifyException(f"wave.matmul: contraction mismatch {list(sa)} x {list(sb)}")
        batch = broadcast_shapes([sa[:-2], sb[:-2]])
        if batch is None or out != (*batch, sa[-2], sb[-1]):
            raise VerifyException(f"wave.matmul: {list(sa)} x {list(sb)} cannot give {list(out)}")


def conv_out_size(size: int, kernel: int, stride: int, dilation: int, pad_total: int) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


def conv_fault(sx, w_shape, bias_shape, strides, pads, dilations, group: int) -> str | None:
    """What makes a Conv of input shape ``sx``, weight ``w_shape`` (leading per-session axes allowed) and bias
    ``bias_shape`` (None: no bias) ill-formed, or None: ranks, strides and dilations >= 1, pads >= 0, channels
    against the group, one bias value per output channel. wave.conv's verifier and the ONNX frontend (which
    names the node) both ask this."""
    st, pd, dl = tuple(strides), tuple(pads), tuple(dilations)
    nsp = len(st)
    sw = tuple(w_shape)[-nsp - 2 :]
    if nsp < 1 or len(sx) < nsp + 1 or len(w_shape) < nsp + 2 or len(dl) != nsp or len(pd) != 2 * nsp:
        return f"inconsistent ranks x {list(sx)}, w {list(w_shape)}, strides {st}, pads {pd}"
    if min(st) < 1 or min(dl) < 1 or min(pd) < 0:
        return f"strides {list(st)} and dilations {list(dl)} must be >= 1, pads {list(pd)} >= 0"
    c_in = sx[-nsp - 1]
    if group < 1 or c_in != sw[1] * group or sw[0] % group:
        return f"channels x {c_in}, w {list(sw)}, group {group} do not match"
    if bias_shape is not None and tuple(bias_shape)[-1:] != (sw[0],):
        return f"bias must be [{sw[0]}], got {list(bias_shape)}"
    return None


@irdl_op_definition
class ConvOp(IRDLOperation):
    """ONNX Conv: x [..., C_in, *spatial], w [C_out, C_in/group, *kernel], optional bias [C_out];
    ``pads`` is [begin..., end...] per spatial axis. The number of spatial axes is len(strides); after
    `wave-cohort` a weight that is a per-session input carries the cohort axis in front."""

    name = "wave.conv"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    epilogue_inputs = var_operand_def(TensorType)
    epilogue = opt_prop_def(StringAttr)
    result = result_def(TensorType)
    strides = prop_def(DenseArrayBase)
    pads = prop_def(DenseArrayBase)
    dilations = prop_def(DenseArrayBase)
    group = prop_def(IntegerAttr)
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$x `,` $w (`bias` $bias^)? (`epilogue` $epilogue^ `(` $epilogue_inputs `)`)? attr-dict `:` type($x) `,` "
        "type($w) (`,` type($bias)^)? (`epilogue` `(` type($epilogue_inputs)^ `)`)? `->` type($result)"
    )

    def __init__(self, x, w, bias, shape, strides, pads, dilations, group: int, epilogue: str | None = None,
                 epilogue_inputs: Sequence[SSAValue] = ()):
        props = {
            "strides": i64_array(strides),
            "pads": i64_array(pads),
            "dilations": i64_array(dilations),
            "group": IntegerAttr(group, i64),
        }
        if epilogue is not None:
            props["epilogue"] = StringAttr(epilogue)
        super().__init__(
            operands=[x, w, [bias] if bias is not None else [], list(epilogue_inputs)],
            result_types=[tensor(shape)],
            properties=props,
        )

    def verify_(self) -> None:
        _verify_epilogue(self)
        sx, out = shape_of(self.x), shape_of(self.result)
        st, pd, dl = (tuple(a.get_values()) for a in (self.strides, self.pads, self.dilations))
        bias_shape = None if self.bias is None else shape_of(self.bias)
        fault = conv_fault(sx, shape_of(self.w), bias_shape, st, pd, dl, self.group.value.data)
        if fault:
            raise VerifyException(f"wave.conv: {fault}")
        nsp = len(st)
        sw = shape_of(self.w)[-nsp - 2 :]  # leading axes of w, if any, are per-session batch axes (cohort)
        sp = tuple(conv_out_size(sx[-nsp + i], sw[2 + i], st[i], dl[i], pd[i] + pd[nsp + i]) for i in range(nsp))
        if out != (*sx[: -nsp - 1], sw[0], *sp):
            raise VerifyException(f"wave.conv: result {list(out)} should be {[*sx[:-nsp - 1], sw[0], *sp]}")


@irdl_op_definition
class ReduceOp(IRDLOperation):
    name = "wave.reduce"
    kind = prop_def(StringAttr)
    x = operand_def(TensorType)
    result = result_def(TensorType)
    axes = prop_def(DenseArrayBase)
    keepdims = prop_def(BoolAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind $x attr-dict `:` functional-type($x, $result)"

    def __init__(self, kind: str, x: SSAValue, axes: Sequence[int], keepdims: bool, shape: Sequence[int]):
        super().__init__(
            operands=[x],
            result_types=[tensor(shape)],
            properties={"kind": StringAttr(kind), "axes": i64_array(axes), "keepdims": BoolAttr.from_bool(keepdims)},
        )

    def verify_(self) -> None:
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(f"wave.reduce: unknown kind {self.kind.data!r}; one of {', '.join(REDUCE_KINDS)}")
        sx, axes = shape_of(self.x), tuple(self.axes.get_values())
        if any(not 0 <= a < len(sx) for a in axes) or len(set(axes)) != len(axes):
            raise VerifyException(f"wave.reduce: axes {list(axes)} invalid for rank {len(sx)}")
        keep = self.keepdims.value.data
        want = tuple((1 if i in axes else d) for i, d in enumerate(sx) if keep or i not in axes)
        if shape_of(self.result) != want:
            raise VerifyException(f"wave.reduce: result {list(shape_of(self.result))} should be {list(want)}")


@irdl_op_definition
class ConcatOp(IRDLOperation):
    name = "wave.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $result)"

    def __init__(self, inputs: Sequence[SSAValue], axis: int, shape: Sequence[int]):
        super().__init__(operands=[list(inputs)], result_types=[tensor(shape)], properties={"axis": IntegerAttr(axis, i64)})

    def verify_(self) -> None:
        shapes, axis, out = [shape_of(v) for v in self.inputs], self.axis.value.data, shape_of(self.result)
        if not shapes or not 0 <= axis < len(out):
            raise VerifyException(f"wave.concat: axis {axis} invalid for rank {len(out)}")
        for s in shapes:
            if len(s) != len(out) or any(a != b for i, (a, b) in enumerate(zip(s, out)) if i != axis):
                raise VerifyException(f"wave.concat: input {list(s)} does not match result {list(out)} off axis {axis}")
        if sum(s[axis] for s in shapes) != out[axis]:
            raise VerifyException(f"wave.concat: inputs sum to {sum(s[axis] for s in shapes)} along axis {axis}, result has {out[axis]}")


@irdl_op_definition
class SliceOp(IRDLOperation):
    """result[i] = x[starts + i * steps] per axis; the result type gives the sizes. Steps may be negative."""

    name = "wave.slice"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    starts = prop_def(DenseArrayBase)
    steps = prop_def(DenseArrayBase)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$x attr-dict `:` functional-type($x, $result)"

    def __init__(self, x: SSAValue, starts: Sequence[int], steps: Sequence[int], shape: Sequence[int]):
        super().__init__(
            operands=[x], result_types=[tensor(shape)], properties={"starts": i64_array(starts), "steps": i64_array(steps)}
        )

    def verify_(self) -> None:
        sx, out = shape_of(self.x), shape_of(self.result)
        starts, steps = self.starts.get_values(), self.steps.get_values()
        if not len(sx) == len(out) == len(starts) == len(steps):
            raise VerifyException(f"wave.slice: rank mismatch between x {list(sx)}, result {list(out)}, starts, steps")
        for d, (size, n, s0, st) in enumerate(zip(sx, out, starts, steps)):
            last = s0 + (n - 1) * st
            if st == 0 or (n > 0 and not (0 <= s0 < size and 0 <= last < size)):
                raise VerifyException(f"wave.slice: axis {d} reads {s0}..{last} step {st} outside [0, {size})")


@irdl_op_definition
class TransposeOp(IRDLOperation):
    name = "wave.transpose"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(DenseArrayBase)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$x attr-dict `:` functional-type($x, $result)"

    def __init__(self, x: SSAValue, perm: Sequence[int]):
        shape = [shape_of(x)[p] for p in perm]
        super().__init__(operands=[x], result_types=[tensor(shape)], properties={"perm": i64_array(perm)})

    def verify_(self) -> None:
        sx, perm = shape_of(self.x), tuple(self.perm.get_values())
        if sorted(perm) != list(range(len(sx))):
            raise VerifyException(f"wave.transpose: perm {list(perm)} is not a permutation of rank {len(sx)}")
        if shape_of(self.result) != tuple(sx[p] for p in perm):
            raise VerifyException(f"wave.transpose: result {list(shape_of(self.result))} does not match perm {list(perm)}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Same elements in row-major order, new shape (Reshape, Flatten, Squeeze, Unsqueeze)."""

    name = "wave.reshape"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$x attr-dict `:` functional-type($x, $result)"

    def __init__(self, x: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[x], result_types=[tensor(shape)])

    def verify_(self) -> None:
        a, b = np.prod(shape_of(self.x), dtype=np.int64), np.prod(shape_of(self.result), dtype=np.int64)
        if a != b:
            raise VerifyException(f"wave.reshape: {list(shape_of(self.x))} ({a} elements) cannot become {list(shape_of(self.result))} ({b})")


def view_source(value: SSAValue, with_slices: bool = False):
    """The op (or block argument) whose result ``value`` views: read back through transposes and reshapes,
    which keep the values, and with ``with_slices`` slices, which keep some of them."""
    views = (TransposeOp, ReshapeOp, SliceOp) if with_slices else (TransposeOp, ReshapeOp)
    op = value.owner
    while isinstance(op, views):
        op = op.x.owner
    return op


def reshape_chain(value: SSAValue) -> tuple[SSAValue, list["ReshapeOp"]]:
    """The value that ``value`` is, read back through reshapes (which keep its elements in row-major order),
    and those reshapes from ``value`` back."""
    reshapes = []
    while isinstance(value.owner, ReshapeOp):
        reshapes.append(value.owner)
        value = value.owner.x
    return value, reshapes


def weight_source(value: SSAValue) -> WeightOp | None:
    """The `wave.weight` whose values ``value`` holds, read through transposes and reshapes (which keep
    them), or None when ``value`` is computed."""
    op = view_source(value)
    return op if isinstance(op, WeightOp) else None


COMPUTE_OPS = (EwiseOp, MatmulOp, ConvOp, ReduceOp, ConcatOp, SliceOp, TransposeOp, ReshapeOp)
BOUNDARY_OPS = (InputOp, WeightOp, StateOp, StateWriteOp, OutputOp)

Wave = Dialect("wave", [*BOUNDARY_OPS, *COMPUTE_OPS], [])


COHORT_ATTR = "wave.cohort"


def graph_block(module):
    """The block of the module's one `func.func` that holds the wave graph. Raises VerifyException if the
    module holds no function or several (wavec compiles one model per module), or the function more than one
    block (a wave graph has no control flow)."""
    from xdsl.dialects.func import FuncOp

    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    if len(funcs) != 1:
        raise VerifyException(f"expected one func.func holding the wave graph, found {len(funcs)}")
    blocks = list(funcs[0].body.blocks)
    if len(blocks) != 1:
        raise VerifyException(f"@{funcs[0].sym_name.data} has {len(blocks)} blocks; a wave graph is one block "
                              "(no control flow): put every op in the function's entry block")
    return blocks[0]


def cohort_size(module) -> int | None:
    """N if `wave-cohort` has run on the module, else None."""
    attr = module.attributes.get(COHORT_ATTR)
    return attr.value.data if attr is not None else None
