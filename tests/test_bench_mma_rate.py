"""bench/mma_rate.py's kernels: each issues exactly its CHAINS independent mma.sync a round (nvdisasm would show
the unrolled loop; ptxas' report is what is checked here: both kernels, no spills), and bad arguments are
refused before any work. The rate itself needs the GPU (scripts/device_issue5.sh mma)."""

from __future__ import annotations

import re

import pytest

from bench_loader import load_bench
from test_cuda import needs_nvcc


@needs_nvcc
def test_both_kernels_build_without_spills():
    from wavec.targets.cuda.build import build_cubin, build_report

    bench = load_bench("mma_rate")
    report = build_report(build_cubin(bench.SOURCE))
    kernels = re.findall(r"Compiling entry function '(\w+)'", report)
    assert sorted(kernels) == ["mma_bf16", "mma_tf32"]
    assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report) == [("0", "0")] * 2


def test_bad_arguments_are_refused_before_any_work():
    with pytest.raises(SystemExit, match="must be >= 1"):
        load_bench("mma_rate").main(["--iters", "0"])
