"""The compiler driver: model in, `Profile` out.

    profile = wavec.compile("silero_vad.onnx", sessions=64, bindings={"sr": 16000},
                            frames={"input": 576}, states=[("state", "stateN")])

The default pipeline is `default_pipeline(sessions, workers)`; any `wavec-opt` pipeline string works.
"""

from __future__ import annotations

import os

from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import DiagnosticException

from wavec.errors import WavecError
from wavec.hw import load_hw
from wavec.profile import Profile
from wavec.registry import get_all_passes, make_context


def default_pipeline(sessions: int, workers: int) -> str:
    return (
        f"wave-fuse,wave-cohort{{sessions={sessions}}},wave-to-wpk{{workers={workers}}},"
        f"wpk-schedule{{workers={workers}}},wpk-arena,wpk-payload,wpk-verify"
    )


def run_pipeline(module, spec: str) -> None:
    """Applies a pipeline in process. Raises WavecError naming the pass that failed and why."""
    ctx = make_context()
    try:
        pipeline = PassPipeline.parse_spec(get_all_passes(), spec)
    except (ValueError, BaseException) as e:  # ArgSpecParseError derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise WavecError(f"pipeline {spec!r}: {e}") from e
    try:
        pipeline.apply(ctx, module)
        module.verify()
    except DiagnosticException as e:
        raise WavecError(str(e).strip().splitlines()[0] if str(e).strip() else repr(e)) from e


def compile(  # noqa: A001 - the public verb of the package
    model: str | os.PathLike,
    *,
    sessions: int,
    hw: str = "h200",
    bindings: dict[str, float] | None = None,
    frames: dict[str, int] | None = None,
    states: list[tuple[str, str]] | None = None,
    pipeline: str | None = None,
) -> Profile:
    """Compiles an ONNX model for a cohort of `sessions` on target `hw` (a name or a YAML path).
    Raises WavecError (UnsupportedModelError for the model, VerificationError for a bad schedule)."""
    from wavec.frontends.onnx import import_onnx

    graph = import_onnx(model, bindings=bindings or {}, frames=frames or {}, states=states or [])
    return compile_graph(graph, sessions=sessions, hw=hw, pipeline=pipeline)


def compile_graph(graph, *, sessions: int, hw: str = "h200", pipeline: str | None = None, workers: int | None = None) -> Profile:
    """Runs the pass pipeline on an imported graph (wavec.frontends.onnx.ImportedGraph or any object with
    `module`, `weights`, `name` and `bindings`) and emits the profile. ``workers`` overrides the target's
    SM count (tests use a few workers to keep profiles small)."""
    if sessions < 1:
        raise WavecError(f"--sessions must be >= 1, got {sessions}")
    target = load_hw(hw)
    spec = pipeline or default_pipeline(sessions, workers or int(target["sm_count"]))
    run_pipeline(graph.module, spec)
    return finish_profile(graph.module, graph.weights, graph.name, target["name"], graph.bindings)


def finish_profile(module, weights, name: str, hw: str, bindings: dict) -> Profile:
    from wavec.emit import profile_from_module
    from wavec.report import build_report
    from wavec.targets.cuda.codegen import generate_kernel

    profile = profile_from_module(module, weights, model=name, hw=hw, bindings=bindings)
    profile.kernel_source = generate_kernel(profile.meta)
    profile.report = build_report(profile)
    return profile
