"""`wave-expand-pow`: replace `pow` by a small integer or one-half exponent with multiplies or a root.

`pow(x, 2.0)` becomes `mul(x, x)` and `pow(x, 0.5)` becomes `sqrt(x)`: a GPU's `powf` is a log, a
multiply and an exp (tens of instructions, and not exact for negative bases with integer exponents), a
multiply is one. Exponents 1 .. `max-exponent` expand into a product; any other exponent is left alone.
Silero VAD's STFT magnitude `sqrt(pow(re, 2) + pow(im, 2))` is the motivating case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from wavec.dialects import wave
from wavec.opcodes import Expr, parse_expr


def expand_pow(expr: Expr, max_exponent: int) -> Expr:
    """`expr` with every expandable `pow(base, constant)` rewritten, innermost first."""
    if expr.kind != "call":
        return expr
    args = tuple(expand_pow(a, max_exponent) for a in expr.args)
    base, exponent = (args + (None, None))[:2]
    if expr.value == "pow" and exponent.kind == "const":
        e = float(exponent.value)
        if e == 0.5:
            return Expr("call", "sqrt", (base,))
        if e.is_integer() and 1 <= e <= max_exponent:
            product = base
            for _ in range(int(e) - 1):
                product = Expr("call", "mul", (product, base))
            return product
    return Expr("call", expr.value, args)


class ExpandPow(RewritePattern):
    def __init__(self, max_exponent: int):
        self.max_exponent = max_exponent

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: wave.EwiseOp, rewriter: PatternRewriter) -> None:
        expanded = str(expand_pow(parse_expr(op.expr.data), self.max_exponent))
        if expanded != op.expr.data:
            op.properties["expr"] = StringAttr(expanded)
            rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class WaveExpandPow(ModulePass):
    """Rewrites pow with a small integer or 0.5 exponent into multiplies or sqrt."""

    name = "wave-expand-pow"
    max_exponent: int = field(default=4, metadata={"help": "largest integer exponent expanded into multiplies"})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandPow(self.max_exponent), apply_recursively=False).rewrite_module(op)
