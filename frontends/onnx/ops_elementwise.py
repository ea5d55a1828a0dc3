"""Elementwise ONNX ops -> one ``wave.ewise`` each, as an expression of wavec/opcodes.py.

Templates use %0, %1, ... for the node's inputs in order; ``{alpha}``-style fields are filled from
attributes (with the ONNX defaults). Single-element constant operands become literals (builder.py).
"""

from __future__ import annotations

from functools import reduce

import numpy as np
from onnx import TensorProto

from wavec.frontends.onnx.builder import const_literal
from wavec.frontends.onnx.lowering import LowerCtx, Static, Value, lowering, static_only

UNARY_TEMPLATES = {
    "Neg": "neg(%0)",
    "Abs": "abs(%0)",
    "Relu": "relu(%0)",
    "Sigmoid": "sigmoid(%0)",
    "Tanh": "tanh(%0)",
    "Exp": "exp(%0)",
    "Log": "log(%0)",
    "Sqrt": "sqrt(%0)",
    "Reciprocal": "reciprocal(%0)",
    "Floor": "floor(%0)",
    "Ceil": "ceil(%0)",
    "Sin": "sin(%0)",
    "Cos": "cos(%0)",
    "Softplus": "softplus(%0)",
    "Sign": "sign(%0)",
    "Round": "round(%0)",
    "Softsign": "div(%0, add(1.0, abs(%0)))",
    "Mish": "mul(%0, tanh(softplus(%0)))",
}

# Templates with attributes: (template, defaults).
PARAM_TEMPLATES = {
    "LeakyRelu": ("select(lt(%0, 0.0), mul(%0, {alpha}), %0)", {"alpha": 0.01}),
    "Elu": ("select(lt(%0, 0.0), mul({alpha}, sub(exp(%0), 1.0)), %0)", {"alpha": 1.0}),
    "Selu": (
        "mul({gamma}, select(le(%0, 0.0), mul({alpha}, sub(exp(%0), 1.0)), %0))",
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    ),
    "Celu": ("add(max(0.0, %0), min(0.0, mul({alpha}, sub(exp(div(%0, {alpha})), 1.0))))", {"alpha": 1.0}),
    "ThresholdedRelu": ("select(gt(%0, {alpha}), %0, 0.0)", {"alpha": 1.0}),
    "HardSigmoid": ("max(0.0, min(1.0, add(mul({alpha}, %0), {beta})))", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": ("mul(%0, max(0.0, min(1.0, add(mul(0.16666667, %0), 0.5))))", {}),
}

BINARY_TEMPLATES = {
    "Add": "add(%0, %1)",
    "Sub": "sub(%0, %1)",
    "Mul": "mul(%0, %1)",
    "Div": "div(%0, %1)",
    "Pow": "pow(%0, %1)",
    "PRelu": "select(lt(%0, 0.0), mul(%0, %1), %0)",
}

VARIADIC = {"Max": "max", "Min": "min", "Sum": "add"}

COMPARISONS = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor")


def _literal(v: float) -> str:
    return str(const_literal(v))


@lowering(*UNARY_TEMPLATES, *BINARY_TEMPLATES)
def lower_template(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    op = ctx.node.op_type
    template = UNARY_TEMPLATES.get(op) or BINARY_TEMPLATES[op]
    return [ctx.b.ewise(template, inputs)]


@lowering(*PARAM_TEMPLATES)
def lower_param_template(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    template, defaults = PARAM_TEMPLATES[ctx.node.op_type]
    fields = {k: _literal(ctx.attr(k, v)) for k, v in defaults.items()}
    return [ctx.b.ewise(template.format(**fields), inputs[:1])]


@lowering(*VARIADIC, "Mean")
def lower_variadic(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Max/Min/Sum/Mean of n inputs: a left fold of the binary function in one expression."""
    fn = VARIADIC.get(ctx.node.op_type, "add")
    expr = reduce(lambda acc, i: f"{fn}({acc}, %{i})", range(1, len(inputs)), "%0")
    if ctx.node.op_type == "Mean":
        expr = f"div({expr}, {_literal(len(inputs))})"
    return [ctx.b.ewise(expr, inputs)]


@lowering("Clip")
def lower_clip(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """min(max(x, lo), hi); bounds are attributes before opset 11, optional inputs after."""
    x, args, expr = inputs[0], [inputs[0]], "%0"
    if ctx.opset < 11:
        bounds: list[Value | None] = [
            Static(np.float32(ctx.attr("min"))) if ctx.attr("min") is not None else None,
            Static(np.float32(ctx.attr("max"))) if ctx.attr("max") is not None else None,
        ]
    else:
        bounds = (list(inputs[1:]) + [None, None])[:2]
    for fn, bound in zip(("max", "min"), bounds):
        if bound is not None:
            args.append(bound)
            expr = f"{fn}({expr}, %{len(args) - 1})"
    return [ctx.b.ewise(expr, args) if len(args) > 1 else x]


@lowering("Where")
def lower_where(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    if not isinstance(inputs[0], Static):
        ctx.fail("the condition is a runtime (bool) tensor; only float32 tensors exist at runtime",
                 "Make the condition a constant, or express it with arithmetic on float32 tensors")
    return [ctx.b.ewise("select(%0, %1, %2)", inputs)]


@lowering("Cast", "CastLike")
def lower_cast(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    """Only float32 -> float32 exists at runtime. CastLike to a runtime tensor's type (float32) of a
    constant is a constant."""
    x = inputs[0]
    if ctx.node.op_type == "CastLike":
        if isinstance(x, Static):  # the target is the runtime (float32) operand
            return [Static(np.asarray(x.array, np.float32))]
        like = inputs[1]
        to = TensorProto.FLOAT if not isinstance(like, Static) or like.array.dtype == np.float32 else None
    else:
        to = ctx.attr("to")
    if to != TensorProto.FLOAT:
        ctx.fail("a cast of a runtime tensor to a type other than float32 is not supported",
                 "Runtime tensors are float32; keep the computation in float32")
    return [x]


@static_only(*COMPARISONS)
def lower_comparison(ctx: LowerCtx, inputs: list[Value | None]) -> list[Value]:
    ctx.fail("comparison or logic on runtime tensors is not supported; only static shape arithmetic folds",
             "Export the model with static shapes, or bind the inputs the comparison depends on")
