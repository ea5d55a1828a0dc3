"""The compiler driver: model in, `Profile` out.

    profile = wavec.compile("silero_vad.onnx", sessions=64, bindings={"sr": 16000},
                            frames={"input": 576}, states=[("state", "stateN")])

The default pipeline is `default_pipeline(sessions, workers)`; any `wavec-opt` pipeline string works.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys

from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException

from wavec.errors import WavecError
from wavec.hw import load_hw
from wavec.profile import Profile
from wavec.progress import current as current_progress
from wavec.registry import check_pass_options, get_all_passes, make_context


def default_pipeline(sessions: int, workers: int, hw: str = "h200") -> str:
    """The spec of wavec/pipelines/default.yaml for this cohort and target (``hw``: a target name or YAML
    path, whose rates and task costs wpk-schedule models)."""
    from wavec.pipeline import default_pipeline_text, spec_from_yaml

    return spec_from_yaml(default_pipeline_text(), {"sessions": sessions, "workers": workers, "hw": hw},
                          "default pipeline")


# The passes a pipeline needs for a runnable profile, in order (wave-fuse and wpk-verify are the
# optimization and the proof: a pipeline may leave them out, `wavec verify` checks the profile later).
# wpk-arena runs before wpk-schedule: the schedule's dependencies come from the placed byte footprints.
REQUIRED_PASSES = ("wave-cohort", "wave-to-wpk", "wpk-arena", "wpk-schedule", "wpk-payload")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def parse_pipeline(spec: str) -> PassPipeline:
    """Parses a wavec-opt pipeline spec. Raises WavecError (one line) for a malformed spec, an unknown
    pass or a bad pass option."""
    if not spec.strip():
        raise WavecError(f"--pipeline {spec!r}: empty pipeline; give passes as in wavec-opt -p, or leave --pipeline out")
    try:
        check_pass_options(spec)
        return PassPipeline.parse_spec(get_all_passes(), spec)
    except (Exception, ArgSpecParseError) as e:  # ArgSpecParseError derives from BaseException alone
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        # xDSL's spec errors carry a caret excerpt; keep the message and the position.
        message = lines[-1].strip() if len(lines) > 1 else _one_line(e)
        where = next((ln.strip() for ln in lines if ln.startswith("pass-pipeline:")), "")
        at = f" (at {where.removeprefix('pass-pipeline:')})" if where else ""
        raise WavecError(f"--pipeline {spec!r}: {message}{at}; see `wavec-opt --list-passes`") from e


def ir_dump_callback(print_ir_after: set[str], stream=None):
    """A PassPipeline callback printing the module after each pass named in `print_ir_after` ("*": all),
    with mlir-opt's banner, to `stream` (stderr by default)."""
    from xdsl.printer import Printer

    def callback(previous, module, _next) -> None:
        if previous is not None and ("*" in print_ir_after or previous.name in print_ir_after):
            out = stream or sys.stderr
            out.write(f"// -----// IR Dump After {previous.name} //----- //\n")
            Printer(stream=out).print_op(module)
            out.write("\n\n")

    return callback


def run_pipeline(module, spec: str, print_ir_after: set[str] | None = None) -> None:
    """Applies a pipeline in process, printing the IR after the passes named in `print_ir_after`.
    Raises WavecError naming the pass that failed and why."""
    ctx = make_context()
    pipeline = parse_pipeline(spec)
    if print_ir_after:
        unknown = print_ir_after - {p.name for p in pipeline.passes} - {"*"}
        if unknown:
            raise WavecError(f"--print-ir-after {', '.join(sorted(unknown))}: not in the pipeline {spec!r}")
        pipeline = PassPipeline(pipeline.passes, ir_dump_callback(print_ir_after))
    try:
        _apply_with_progress(pipeline, ctx, module)
        with current_progress().stage("verify-ir"):
            module.verify()
    except DiagnosticException as e:
        raise WavecError(str(e).strip().splitlines()[0] if str(e).strip() else repr(e)) from e
    except WavecError:
        raise
    except Exception as e:  # noqa: BLE001  (a pass run out of order trips over missing attributes)
        raise WavecError(
            f"pipeline {spec!r} failed ({type(e).__name__}: {_one_line(e)}); passes must run in the default order: "
            f"{', '.join(['wave-fuse', *REQUIRED_PASSES, 'wpk-verify'])}"
        ) from e


def _apply_with_progress(pipeline: PassPipeline, ctx, module) -> None:
    """PassPipeline.apply, each pass inside a progress stage (wavec.progress) named as the pass."""
    callback = pipeline.callback
    if callback is not None:
        callback(None, module, pipeline.passes[0] if pipeline.passes else None)
    for i, p in enumerate(pipeline.passes):
        with current_progress().stage(p.name):
            p.apply(ctx, module)
        if callback is not None:
            callback(p, module, pipeline.passes[i + 1] if i + 1 < len(pipeline.passes) else None)


def check_pipeline_agrees(spec: str, sessions: int, hw: str, sm_count: int) -> None:
    """A pipeline's wave-cohort{sessions=K} must agree with --sessions, its wpk-schedule{hw=...} with --hw
    (profile.json records one target), and its wpk-schedule{workers=W} fit the target's ``sm_count`` (the
    persistent kernel's cooperative launch needs every block resident, one per SM), and the workers that
    wave-to-wpk cuts tiles for those that wpk-schedule runs them on (each its option's value or default), where
    the pipeline has both."""
    passes = parse_pipeline(spec).passes
    workers = {p.name: p.workers for p in passes if p.name in ("wave-to-wpk", "wpk-schedule")}
    if len(workers) == 2 and workers["wave-to-wpk"] != workers["wpk-schedule"]:
        raise WavecError(f"--pipeline: wave-to-wpk{{workers={workers['wave-to-wpk']}}} cuts tiles for other workers than "
                         f"wpk-schedule{{workers={workers['wpk-schedule']}}} runs them on; give both the same workers")
    for p in passes:
        if p.name == "wpk-schedule" and p.workers > sm_count:
            raise WavecError(f"--pipeline: wpk-schedule{{workers={p.workers}}} is more workers than --hw {hw}'s "
                             f"{sm_count} SMs; the persistent kernel runs one block per SM, so give at most {sm_count}")
        k = getattr(p, "sessions", None)
        if p.name == "wave-cohort" and k is not None and int(k) != sessions:
            raise WavecError(
                f"--pipeline: wave-cohort{{sessions={k}}} disagrees with --sessions {sessions}; make them the same"
            )
        if p.name == "wpk-schedule" and p.hw != hw:
            raise WavecError(f"--pipeline: wpk-schedule{{hw={p.hw}}} disagrees with --hw {hw}; make them the same "
                             f"(or leave hw out: --hw fills it in)")


def with_schedule_target(spec: str, hw: str) -> str:
    """``spec`` with ``hw`` as wpk-schedule's target where the pipeline names none: the schedule then models
    the target the profile is compiled for."""
    from wavec.pipeline import option_text

    return spec if _schedule_sets(spec, "hw") else _with_schedule_option(spec, "hw", option_text(hw))


def with_task_costs(spec: str, task_costs: str | os.PathLike, model: str | None = None) -> str:
    """``spec`` with wpk-schedule charging the measured costs of ``task_costs`` (a `wavec run --backend cuda
    --timeline` file, wavec.analysis.measured_costs). Raises WavecError when the file holds no valid costs, was
    traced from another ``model`` (a name, when given), the pipeline has no wpk-schedule, or it sets task-costs
    already."""
    from wavec.analysis.measured_costs import load_measured_costs
    from wavec.pipeline import quoted

    measured = load_measured_costs(task_costs)
    if model is not None and measured.model != model:
        raise WavecError(f"--task-costs {task_costs}: traced from model {measured.model!r}, but this is {model!r}; "
                         "trace a profile of this model")
    if not re.search(r"wpk-schedule(?=[{,]|$)", spec):
        raise WavecError(f"--task-costs {task_costs}: the pipeline has no wpk-schedule to charge them")
    if _schedule_sets(spec, "task-costs"):
        raise WavecError(f"--task-costs {task_costs}: the pipeline's wpk-schedule sets task-costs already; give "
                         "them once")
    return _with_schedule_option(spec, "task-costs", quoted(os.fspath(task_costs)))


def _schedule_sets(spec: str, option: str) -> bool:
    return re.search(rf"wpk-schedule\{{[^}}]*\b{re.escape(option)}=", spec) is not None


def _with_schedule_option(spec: str, option: str, text: str) -> str:
    """``spec`` with ``option=text`` (``text`` as the spec writes it) first among wpk-schedule's options."""
    setting = f"{option}={text}"
    spec = re.sub(r"wpk-schedule\{", lambda _: f"wpk-schedule{{{setting} ", spec)
    return re.sub(r"wpk-schedule(?=,|$)", lambda _: f"wpk-schedule{{{setting}}}", spec)


def check_complete(module, spec: str) -> None:
    """The pipeline must have produced a complete program: cohort, schedule, arenas and payloads.
    Raises WavecError naming the missing passes."""
    from wavec.dialects import wave
    from wavec.emit import PROGRAM_ATTRIBUTES
    from wavec.passes.wpk_payload import tasks_of

    named = {p.name for p in parse_pipeline(spec).passes}
    missing = [p for p in REQUIRED_PASSES if p not in named]
    try:
        tasks = tasks_of(module)
    except Exception:  # noqa: BLE001  (no wpk program at all)
        tasks = None
    complete = (
        wave.cohort_size(module) is not None
        and all(a in module.attributes for a in PROGRAM_ATTRIBUTES)
        and tasks is not None
        and all(t.payload is not None for t in tasks)
    )
    if complete:
        return
    if missing:
        raise WavecError(
            f"--pipeline {spec!r} does not produce a complete program: missing {', '.join(missing)}; "
            f"the default pipeline is {default_pipeline(1, 1).replace('=1', '=N')!r}"
        )
    raise WavecError(
        f"--pipeline {spec!r} does not produce a complete program (no payloads after it); "
        f"run the passes in the default order: {', '.join(['wave-fuse', *REQUIRED_PASSES, 'wpk-verify'])}"
    )


def compile(  # noqa: A001 - the public verb of the package
    model: str | os.PathLike,
    *,
    sessions: int,
    hw: str = "h200",
    bindings: dict[str, float] | None = None,
    frames: dict[str, int] | None = None,
    states: list[tuple[str, str]] | None = None,
    pipeline: str | None = None,
    print_ir_after: set[str] | None = None,
    workers: int | None = None,
    task_costs: str | os.PathLike | None = None,
) -> Profile:
    """Compiles an ONNX model for a cohort of `sessions` on target `hw` (a name or a YAML path), its tiles cut
    for and scheduled on `workers` persistent blocks (default: the target's SM count; see `compile_graph`,
    which also says what `task_costs` does).
    `pipeline` is a wavec-opt spec or a YAML pipeline file; `print_ir_after` names passes ("*": every
    pass) after which the IR is printed to stderr. Raises WavecError (UnsupportedModelError for the
    model, VerificationError for a bad schedule)."""
    from wavec.frontends.onnx import import_onnx

    graph = import_onnx(model, bindings=bindings or {}, frames=frames or {}, states=states or [])
    return compile_graph(graph, sessions=sessions, hw=hw, pipeline=pipeline, print_ir_after=print_ir_after,
                         workers=workers, task_costs=task_costs)


def compile_graph(graph, *, sessions: int, hw: str = "h200", pipeline: str | None = None, workers: int | None = None,
                  print_ir_after: set[str] | None = None, task_costs: str | os.PathLike | None = None) -> Profile:
    """Runs the pass pipeline on an imported graph (wavec.frontends.onnx.ImportedGraph or any object with
    `module`, `weights`, `name` and `bindings`) and emits the profile. ``workers`` overrides the target's
    SM count (tests use a few workers to keep profiles small); it must be 1 to that count, since the
    persistent kernel runs one block per SM. ``task_costs``: a timeline file of a traced run of the same
    program (`wavec run --backend cuda --timeline`), whose measured task bodies wpk-schedule charges instead of
    its model's (`with_task_costs`). Raises WavecError otherwise."""
    from wavec.pipeline import pipeline_spec

    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise WavecError(f"--sessions must be a whole number >= 1, got {sessions!r}")
    target = load_hw(hw)
    sm_count = int(target["sm_count"])
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= sm_count):
        raise WavecError(f"--workers must be a whole number from 1 to --hw {hw}'s {sm_count} SMs (the persistent "
                         f"kernel runs one block per SM), got {workers!r}")
    workers = workers or sm_count
    if pipeline is None:
        spec = default_pipeline(sessions, workers, hw)
    else:
        spec = with_schedule_target(pipeline_spec(pipeline, {"sessions": sessions, "workers": workers, "hw": hw}), hw)
        check_pipeline_agrees(spec, sessions, hw, sm_count)
    if task_costs is not None:
        spec = with_task_costs(spec, task_costs, graph.name)
    check_bf16_weights(graph.module, graph.weights)
    with collector_paused():
        run_pipeline(graph.module, spec, print_ir_after)
        check_complete(graph.module, spec)
        return finish_profile(graph.module, graph.weights, graph.name, target, graph.bindings)


def check_bf16_weights(module, weights: dict) -> None:
    """Raises WavecError for a ``wave.weight {dtype = "bf16"}`` whose blob value holds a number bfloat16 cannot:
    the tensor-core GEMMs would read its bits unsplit (the MATMUL's b_tf32) and drop its low 13."""
    from wavec.dialects import wave
    from wavec.weights import holds_bf16

    for op in module.walk():
        if isinstance(op, wave.WeightOp) and op.is_bf16 and op.sym in weights and not holds_bf16(weights[op.sym]):
            raise WavecError(f"wave.weight {op.sym!r} is declared bf16, but its values are not all bfloat16 numbers; "
                             "round them (wavec.weights.round_to_bf16) or drop its dtype")


@contextlib.contextmanager
def collector_paused():
    """Pauses CPython's cyclic garbage collector while a program compiles: a large cohort holds 10^6 live
    objects, and each collection rescans them, though compiling makes almost no garbage cycles
    (wpk-schedule on duplex:11b at 56 sessions: 22 s with it, 14 s without; bench/RESULTS.md)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def finish_profile(module, weights, name: str, target: dict, bindings: dict) -> Profile:
    """Emits the profile of a lowered module for ``target`` (wavec.hw.load_hw's dict): tables, the
    kernel source (one block of the target's ``threads_per_block`` per worker) and the report."""
    from wavec.emit import profile_from_module
    from wavec.report import build_report
    from wavec.targets.cuda.codegen import generate_kernel

    progress = current_progress()
    with progress.stage("emit"):
        profile = profile_from_module(module, weights, model=name, hw=target["name"],
                                      block_threads=target["threads_per_block"], l2_bytes=target.get("l2_bytes"),
                                      bindings=bindings)
    with progress.stage("codegen"):
        profile.kernel_source = generate_kernel(profile.meta)
    with progress.stage("report"):
        profile.report = build_report(profile)
    return profile
