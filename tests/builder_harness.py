"""Shared by test_builder.py and test_zoo.py: run a builder Model on `interp` for a cohort whose sessions
join late (and some rejoin), and compare every output with the float64 numpy reference
(wavec/frontends/builder/reference.py) run with the same joins. Also the barrier-schedule pipeline the
verifier's tests compile with."""

from __future__ import annotations

import numpy as np

from wavec.frontends.builder.reference import Reference


def barrier_pipeline(sessions: int, workers: int) -> str:
    """The default pipeline with a barrier between phases (``wpk-schedule{granularity=phase}``), the schedule
    of programs too large for tile-level dependencies (duplex:1b and up)."""
    from wavec.driver import default_pipeline

    return default_pipeline(sessions, workers).replace("wpk-schedule{", "wpk-schedule{granularity=phase ")


def staggered_reset(sessions: int, beats: int) -> np.ndarray:
    """reset [beats, sessions]: session s joins at beat (5 s) mod (beats // 3) (session 0 at 0, the
    others late); odd sessions join again half-way through (their state goes back to its initial value)."""
    reset = np.zeros((beats, sessions), bool)
    spread = max(1, beats // 3)
    for s in range(sessions):
        join = (5 * s) % spread if s else 0
        reset[join, s] = True
        if s % 2 and join + beats // 2 < beats:
            reset[join + beats // 2, s] = True
    return reset


def fresh_inputs(model, beats: int, sessions: int, seed: int) -> dict[str, np.ndarray]:
    """Fresh normal random frames for every model input, [beats, sessions, *shape] (never zeros)."""
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=(beats, sessions, *d.shape)).astype(np.float32) for n, d in model.inputs.items()}


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / (1 + |want|): absolute near zero, relative for large values."""
    return float(np.max(np.abs(got.astype(np.float64) - want) / (1.0 + np.abs(want))))


def run_against_reference(model, *, sessions: int = 3, beats: int = 50, workers: int = 4, seed: int = 0,
                          tolerance: float = 1e-4, pipeline: str | None = None) -> dict[str, float]:
    """Compiles ``model`` (with ``pipeline``, a wavec-opt spec, else the default pipeline), runs ``beats`` beats
    on interp with staggered joins, checks each output's max_error <= tolerance against the reference (before a
    session's first join it holds its initial state in both), and returns the errors."""
    profile = model.compile(sessions=sessions, workers=workers, pipeline=pipeline)
    inputs = fresh_inputs(model, beats, sessions, seed)
    reset = staggered_reset(sessions, beats)
    got = profile.run(inputs, backend="interp", reset=reset, seed=seed)
    want = Reference(model).run(inputs, reset)
    assert set(got) == set(want) == set(model.outputs)
    errors = {}
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert np.all(np.isfinite(got[name])), name
        errors[name] = max_error(got[name], want[name])
        assert errors[name] <= tolerance, f"{model.name}.{name}: max error {errors[name]:.2e} > {tolerance:.0e}"
    return errors
