"""wave-expand-pow keeps every value the graph computes (checked with the numpy evaluator on fresh random
inputs) and removes the pow calls it promises to. This file is also the guide's pytest step
(docs/writing-a-pass.md)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser

from wavec.analysis.wave_eval import evaluate
from wavec.passes.wave_expand_pow import WaveExpandPow
from wavec.registry import make_context

GRAPH = """
func.func @m() {
  %x = wave.input "x" : tensor<64xf32>
  %y = wave.ewise "add(pow(%0, 2.0), mul(pow(%0, 3.0), pow(abs(%0), 0.5)))"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  wave.output "y", %y : tensor<64xf32>
  func.return
}
"""


@pytest.mark.parametrize("max_exponent", [1, 2, 4])
def test_expansion_preserves_values(max_exponent):
    ctx = make_context()
    before, after = (Parser(ctx, GRAPH).parse_module() for _ in range(2))
    WaveExpandPow(max_exponent=max_exponent).apply(ctx, after)
    after.verify()
    x = np.random.default_rng(max_exponent).normal(size=64).astype(np.float32)
    want, _ = evaluate(before, {"x": x}, {}, {})
    got, _ = evaluate(after, {"x": x}, {}, {})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)
    assert ("pow(%0, 3.0)" in str(after)) == (max_exponent < 3)
    assert "pow(abs(%0), 0.5)" not in str(after)
