"""bench/bodies.py without a GPU: every body model compiles (the `compile` command) and its profile, run by
the interpreter, matches the float64 reference within the bench's own tolerance on fresh random frames; the
GPU run (`bench/bodies.py run`) applies the same check to the kernel."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench_loader import load_bench

bodies = load_bench("bodies")


@pytest.mark.parametrize("name", list(bodies.BODIES))
def test_each_body_compiles_and_matches_the_reference_on_the_interpreter(name, tmp_path):
    args = argparse.Namespace(out=tmp_path, bodies=[name], sessions=[3])
    bodies.compile_profiles(args)
    import wavec

    profile = wavec.load(tmp_path / f"{name}-3")
    err = bodies.check_error(bodies.body_model(name), profile, np.random.default_rng(11), backend="interp")
    assert err <= bodies.TOLERANCE, f"{name}: {err:.2e}"
