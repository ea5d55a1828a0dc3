"""`wavec`: compile a model to a profile, run it, report it, verify it.

    wavec compile MODEL.onnx|NAME:PRESET --sessions N [--hw h200] [--workers W] [--bind NAME=VALUE]... [--frame NAME=LEN]...
                  [--state IN=OUT]... [--pipeline SPEC|FILE.yaml] [--task-costs TIMELINE.json]
                  [--print-ir-after-all] [--print-ir-after PASS]... -o DIR
    wavec import MODEL.onnx|NAME:PRESET [--bind NAME=VALUE]... [--frame NAME=LEN]... [--state IN=OUT]... [-o MODEL.mlir]
    wavec run DIR --backend interp|cuda --inputs IN.npz -o OUT.npz [--timeline FILE.json]
    wavec report DIR [--json] [--top N] [--gantt FILE.png] [--compare-relax] [--timeline FILE.json]
    wavec verify DIR
    wavec payload-layout [--json]
    wavec demo [--sessions N] [--beats N] [--backend interp|cuda|auto] [-o DIR]
    wavec serve --profile DIR --beat-ms D --inputs IN.npz [--schedule SESSIONS.json] [--beats N]
                [--deadline-ms D] [--backend interp|cuda] [--outputs OUT.npz] [--fetch NAME]... -o RECORDS.jsonl

NAME:PRESET (not an existing file) names a model of wavec.zoo, e.g. duplex:11b or gru_stack:tiny.

Every user error prints one line `wavec: error: ...` and exits 1; no tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import zipfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from wavec.errors import WavecError


def _pairs(values: list[str], flag: str, metavar: str = "NAME=VALUE") -> list[tuple[str, str]]:
    """``NAME=VALUE`` flags as pairs; a repeated name must repeat the same value."""
    pairs: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for v in values:
        name, sep, rest = v.partition("=")
        name, rest = name.strip(), rest.strip()
        if not sep or not name or not rest:
            raise WavecError(f"{flag} {v!r}: expected {metavar}")
        if name in seen:
            if seen[name] != rest:
                raise WavecError(f"{flag} {name}: given twice with different values ({seen[name]!r} and {rest!r}); give it once")
            continue
        seen[name] = rest
        pairs.append((name, rest))
    return pairs


def _number(text: str, flag: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise WavecError(f"{flag} {name}={text}: {text!r} is not a number") from e
    if not math.isfinite(value):
        raise WavecError(f"{flag} {name}={text}: the value must be finite")
    return int(value) if value.is_integer() else value


def _frame(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise WavecError(f"--frame {name}={text}: {text!r} is not a whole number; give a frame length >= 1") from e
    if value < 1:
        raise WavecError(f"--frame {name}={text}: a frame length must be >= 1")
    return value


def _frontend_options(args) -> dict:
    bindings = {k: _number(v, "--bind", k) for k, v in _pairs(args.bind, "--bind")}
    frames = {k: _frame(v, k) for k, v in _pairs(args.frame, "--frame", "NAME=LEN")}
    states = _pairs(args.state, "--state", "IN=OUT")
    outs = [out for _, out in states]
    for out in outs:
        if outs.count(out) > 1:
            raise WavecError(f"--state: output {out!r} is paired with two state inputs; pair each output once")
    return {"bindings": bindings, "frames": frames, "states": states}


def _check_model(path: str) -> None:
    if not path.strip():
        raise WavecError("empty model path; give the .onnx file to compile")
    p = Path(path)
    if p.is_dir():
        raise WavecError(f"{path}: is a directory; give the .onnx model file")
    if not p.exists():
        raise WavecError(f"{path}: no such model file")
    if not p.is_file():
        raise WavecError(f"{path}: not a regular file; give the .onnx model file")


def _check_output_file(path: str, flag: str = "-o") -> Path:
    """The target of an output file, checked before any work: not empty, not a directory, in an
    existing directory."""
    if not path.strip():
        raise WavecError(f"{flag}: empty output path; name the file to write")
    target = Path(path)
    if target.is_dir():
        raise WavecError(f"{flag} {path}: is a directory; name a file to write")
    parent = target.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a directory"
        raise WavecError(f"{flag} {path}: the folder {str(parent)!r} {what}; create it or choose another path")
    return target


def write_atomically(path: Path, write, binary: bool = True) -> Path:
    """Calls ``write(handle)`` on a temporary sibling of ``path``, then renames it over ``path``: the
    file is either wholly written or untouched. Raises WavecError for an unwritable target."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise WavecError(f"{path}: cannot write ({e.strerror or type(e).__name__}); choose a writable path") from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _zoo_model(args):
    """The zoo Model when ``args.model`` is ``NAME:PRESET`` of wavec.zoo and not an existing file, else None.
    ONNX-only flags (--bind, --frame, --state) are refused for it."""
    if Path(args.model).exists():
        return None
    from wavec import zoo

    if not zoo.is_zoo_name(args.model):
        name, sep, _ = args.model.partition(":")
        if sep and not name.endswith(".onnx"):
            zoo.get(args.model)  # raises: no zoo model NAME, with the list
        if name in zoo.MODELS:
            raise WavecError(f"{args.model}: no such model file; for the zoo model give a preset, e.g. {name}:tiny "
                             f"({', '.join(n for n in zoo.names() if n.startswith(name + ':'))})")
        return None
    given = [flag for flag, values in (("--bind", args.bind), ("--frame", args.frame), ("--state", args.state)) if values]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise WavecError(f"{args.model}: {', '.join(given)} {verb} to ONNX models only; a zoo model declares its inputs and states")
    return zoo.get(args.model)


def cmd_compile(args) -> int:
    from wavec.driver import compile as compile_model
    from wavec.driver import compile_graph

    zoo_model = _zoo_model(args)
    if zoo_model is None:
        options = _frontend_options(args)
        _check_model(args.model)
    if not args.output.strip():
        raise WavecError("-o: empty output path; name the profile directory to write, e.g. -o vad.profile")
    from wavec.profile import check_save_target

    check_save_target(Path(args.output), "profile")  # before compiling: fail fast on a target we would refuse
    dumps = {"*"} if args.print_ir_after_all else set(args.print_ir_after)
    from wavec import progress

    with progress.using(progress.for_cli(args.progress)) as shown:
        if zoo_model is not None:
            with shown.stage("build"):
                graph = zoo_model.lower()
            profile = compile_graph(graph, sessions=args.sessions, hw=args.hw, pipeline=args.pipeline,
                                    print_ir_after=dumps, workers=args.workers, task_costs=args.task_costs)
        else:
            profile = compile_model(args.model, sessions=args.sessions, hw=args.hw, pipeline=args.pipeline,
                                    print_ir_after=dumps, workers=args.workers, task_costs=args.task_costs,
                                    **options)
        with shown.stage("save"):
            out = profile.save(args.output)
    print(f"wrote {out}: {len(profile.payloads)} tasks, {len(profile.meta['phases'])} phases, "
          f"{profile.sessions} sessions")
    return 0


def cmd_import(args) -> int:
    zoo_model = _zoo_model(args)
    if zoo_model is not None:
        from wavec.frontends.builder.lower import ir_text

        target = _check_output_file(args.output) if args.output is not None else None
        text, what = ir_text(zoo_model), f"wave IR of {args.model} (weights not included)"
    else:
        from wavec.frontends.onnx import import_onnx

        options = _frontend_options(args)
        _check_model(args.model)
        target = _check_output_file(args.output) if args.output is not None else None
        graph = import_onnx(args.model, **options)
        n_weights = len(graph.weights)
        n_bytes = sum(int(w.size) * 4 for w in graph.weights.values())
        header = (
            f"// wave IR of {Path(args.model).name} (wavec import): one session, one beat. Weights are not included: "
            f"the {n_weights} wave.weight ops ({n_bytes:,} bytes) name them only; compile the .onnx to get a runnable profile.\n"
        )
        text = header + str(graph.module) + "\n"
        what = f"wave IR of {Path(args.model).name} ({n_weights} weights not included)"
    if target is None:
        sys.stdout.write(text)
    else:
        write_atomically(target, lambda f: f.write(text), binary=False)
        print(f"wrote {target}: {what}", file=sys.stderr)
    return 0


def _read_json(path: str, flag: str, what: str = "JSON file"):
    """The JSON document in ``path`` (a file, a pipe or a device), or a WavecError naming ``flag``, ``what``
    it should be and what is wrong with it."""
    if not path.strip():
        raise WavecError(f"{flag}: empty path; give the {what}")
    p = Path(path)
    if p.is_dir():
        raise WavecError(f"{flag} {path}: is a directory; {flag} takes a {what}")
    try:
        text = p.read_text()
    except FileNotFoundError as e:
        raise WavecError(f"{flag} {path}: no such {what}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise WavecError(f"{flag} {path}: cannot be read ({' '.join(str(e).split()) or type(e).__name__})") from e
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, and integers past Python's digit limit
        raise WavecError(f"{flag} {path}: not valid JSON ({' '.join(str(e).split())[:200] or type(e).__name__})") from e


def _read_inputs(path: str) -> dict:
    import zipfile

    import numpy as np

    p = Path(path)
    if not path.strip():
        raise WavecError("--inputs: empty path; give the .npz of inputs")
    if p.is_dir():
        raise WavecError(f"{path}: is a directory; --inputs takes an .npz file")
    if not p.is_file():
        raise WavecError(f"{path}: no such inputs file")
    fix = "write it with numpy.savez(path, input=frames[, reset=flags])"
    with open(p, "rb") as f:
        magic = f.read(6)
    if not magic.startswith((b"PK\x03\x04", b"\x93NUMPY")):  # neither a zip (.npz) nor an .npy: numpy would try pickle
        raise WavecError(f"{path}: not an .npz archive (it does not begin as a zip file); {fix}")
    try:
        data = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise WavecError(f"{path}: not a readable .npz archive ({' '.join(str(e).split()) or type(e).__name__}); {fix}") from e
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise WavecError(f"{path}: holds a single array, not an .npz archive of named arrays; {fix}")
    arrays = {}
    with data:
        for k in data.files:
            try:
                arrays[k] = data[k]
            except ValueError as e:
                if "allow_pickle" in str(e):
                    raise WavecError(f"{path}: array {k!r} holds Python objects; inputs must be float arrays") from e
                raise WavecError(f"{path}: array {k!r} cannot be read ({' '.join(str(e).split())}); {fix}") from e
            except (OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
                raise WavecError(f"{path}: array {k!r} cannot be read, the file is damaged or truncated ({type(e).__name__}); {fix}") from e
    return arrays


def cmd_run(args) -> int:
    import numpy as np

    from wavec.errors import RuntimeBackendError
    from wavec.profile import check_inputs, load

    if args.timeline is not None and args.backend != "cuda":
        raise WavecError("--timeline: the per-task timeline is the GPU's clock; run with --backend cuda")
    profile = load(args.profile)
    target = _check_output_file(args.output)
    if target.exists() and not zipfile.is_zipfile(target):  # an npz is a zip: never written over another kind
        raise WavecError(f"-o {args.output}: exists and is not an .npz archive; remove it or choose another name")
    timeline_file = _check_output_file(args.timeline, "--timeline") if args.timeline is not None else None
    if timeline_file is not None and timeline_file.resolve() == target.resolve():
        raise WavecError(f"--timeline {args.timeline}: is the -o file too; name another file for the timeline")
    arrays = _read_inputs(args.inputs)
    reset = arrays.pop("reset", None)
    try:
        check_inputs(profile, arrays, reset)
    except RuntimeBackendError as e:
        raise RuntimeBackendError(f"{args.inputs}: {e}") from e
    options = {}
    if timeline_file is not None:
        from wavec.targets.cuda.timeline import Timeline

        options["timeline"] = Timeline()
    outputs = profile.run(arrays, backend=args.backend, reset=reset, **options)
    write_atomically(target, lambda f: np.savez(f, **outputs))
    beats = next(iter(outputs.values())).shape[0] if outputs else 0
    print(f"wrote {target}: {', '.join(outputs)} for {beats} beats x {profile.sessions} sessions ({args.backend})")
    if timeline_file is not None:
        _write_timeline(options["timeline"], timeline_file)
    return 0


def _write_timeline(timeline, target: Path) -> None:
    from wavec.targets.cuda.timeline import format_phases, format_summary

    write_atomically(target, lambda f: f.write(json.dumps(timeline.to_json(), indent=1)), binary=False)
    if timeline.beats:
        print(format_summary(timeline.beats))
        print("longest phases of the last beat:")
        print(format_phases(timeline.phases))
    print(f"wrote {target}: per beat span, busy and waiting time; the last beat's phases "
          f"(`wavec report PROFILE --timeline {target}` puts them beside the model)")


def cmd_report(args) -> int:
    if args.top is not None and args.top < 1:
        raise WavecError(f"--top {args.top}: list at least 1 phase")
    from wavec.profile import load
    from wavec.report import build_report, format_report, heaviest_phases, with_timeline

    profile = load(args.profile)
    if args.gantt:  # a bad --gantt fails before the report is printed
        check_gantt_target(Path(args.gantt))
    report = build_report(profile, compare_relax=args.compare_relax)  # from the payloads: a stale report.json cannot mislead
    if args.timeline is not None:
        report = with_timeline(report, _read_json(args.timeline, "--timeline", "timeline file (.json)"), args.timeline)
    if args.json and args.top is not None:
        report = {**report, "phases": heaviest_phases(report["phases"], args.top), "phases_total": len(report["phases"])}
    print(json.dumps(report, indent=1) if args.json else format_report(report, args.top))
    if args.gantt:
        write_gantt(profile, Path(args.gantt))
    return 0


def check_gantt_target(path: Path) -> None:
    """Raises WavecError when the Gantt chart cannot be written to ``path``."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise WavecError("--gantt needs matplotlib: python3 -m pip install matplotlib") from e
    if path.suffix.lower() != ".png":
        raise WavecError(f"--gantt {path}: the picture is a PNG; name the file *.png")
    if not path.parent.is_dir():
        raise WavecError(f"--gantt {path}: folder {path.parent} does not exist")


def write_gantt(profile, path: Path) -> None:
    from wavec.analysis.timeline import gantt_png, model_timeline
    from wavec.hw import load_hw

    check_gantt_target(path)
    try:
        timeline = model_timeline(profile, load_hw(profile.meta["hw"]))
    except ValueError as e:
        raise WavecError(f"--gantt: {e}; run `wavec verify` on the profile") from e
    write_atomically(path, lambda f: gantt_png(profile, timeline, f), binary=True)
    print(f"wrote {path}: modeled beat {timeline.beat_us:.1f} us over {profile.meta['workers']} workers")


def cmd_verify(args) -> int:
    from wavec.errors import VerificationTooLarge
    from wavec.profile import load
    from wavec.verify import verify_profile

    if args.max_incidences < 0:
        raise WavecError(f"--max-incidences must be >= 0 (0: no limit), got {args.max_incidences}")
    try:
        report = verify_profile(load(args.profile), max_incidences=args.max_incidences, level=args.level)
    except VerificationTooLarge as e:
        print(f"wavec: {args.profile}: not verified: {' '.join(str(e).split())}", file=sys.stderr)
        return 3
    print(f"{args.profile}: {report.summary()}")
    return 0


def cmd_payload_layout(args) -> int:
    from wavec.payload import PAYLOAD_BYTES, layout

    fields = layout()
    if args.json:
        print(json.dumps({"bytes": PAYLOAD_BYTES, "fields": fields}, indent=1))
    else:
        for f in fields:
            print(f"{f['offset']:>4} {f['size']:>3}  {f['type']:<12} {f['name']:<16} {f['meaning']}")
    return 0


def cmd_demo(args) -> int:
    from wavec.demo import run_demo

    return run_demo(sessions=args.sessions, beats=args.beats, backend=args.backend, out_dir=args.output)


def _milliseconds(text: str, flag: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise WavecError(f"{flag} {text}: not a number; give the {what} in milliseconds, e.g. {flag} 32") from e
    if not (math.isfinite(value) and value > 0):
        raise WavecError(f"{flag} {text}: the {what} must be a positive number of milliseconds")
    return value


def cmd_serve(args) -> int:
    import numpy as np

    from wavec.errors import RuntimeBackendError
    from wavec.profile import check_inputs, load
    from wavec.serve import check_fetch, parse_schedule, serve

    beat_ms = _milliseconds(args.beat_ms, "--beat-ms", "beat period")
    deadline_ms = _milliseconds(args.deadline_ms, "--deadline-ms", "deadline") if args.deadline_ms is not None else None
    if args.beats is not None and args.beats < 1:
        raise WavecError(f"--beats {args.beats}: serve at least one beat")
    profile = load(args.profile)
    check_fetch(profile, args.fetch)
    target = _check_output_file(args.output)
    out_npz = _check_output_file(args.outputs, "--outputs") if args.outputs is not None else None
    if out_npz is not None and out_npz.resolve() == target.resolve():
        raise WavecError(f"--outputs {args.outputs}: is also the records file (-o); choose two names")
    arrays = _read_inputs(args.inputs)
    reset = arrays.pop("reset", None)
    try:
        frames, _ = check_inputs(profile, arrays, reset)
    except RuntimeBackendError as e:
        raise RuntimeBackendError(f"{args.inputs}: {e}") from e
    recorded = next(iter(frames.values())).shape[0] if frames else 0
    if args.beats is not None and args.beats > recorded:
        raise WavecError(f"--beats {args.beats}: {args.inputs} holds {recorded} beats")
    schedule, late = (None, [])
    if args.schedule is not None:
        if reset is not None:
            raise WavecError(f"{args.inputs}: has reset flags and --schedule {args.schedule} says who joins when; "
                             "give admissions in the schedule only")
        schedule, late = parse_schedule(_read_json(args.schedule, "--schedule", "schedule file (.json)"),
                                        profile.sessions, args.schedule)
    result = serve(profile, arrays, beat_ms, schedule=schedule, late_frames=late, beats=args.beats,
                   backend=args.backend, deadline_ms=deadline_ms, reset=reset, fetch=args.fetch)
    write_atomically(target, result.write_jsonl, binary=False)
    if out_npz is not None:
        try:
            write_atomically(out_npz, lambda f: np.savez(f, **result.outputs))
        except BaseException:
            target.unlink(missing_ok=True)  # both files or neither
            raise
    print(f"wrote {target}: {len(result.start_us)} beats x {profile.sessions} sessions of records"
          + (f", {out_npz}: outputs" if out_npz is not None else ""))
    print(result.format_summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from wavec.verify import LEVELS, MAX_INCIDENCES

    parser = argparse.ArgumentParser(prog="wavec", description="Compile a streaming model into one persistent GPU kernel.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile an ONNX model (or a zoo model NAME:PRESET) into a profile directory")
    p.add_argument("model", help="an .onnx file, or a zoo model NAME:PRESET (e.g. duplex:1b)")
    p.add_argument("--sessions", type=int, required=True, help="cohort capacity (session slots)")
    p.add_argument("--hw", default="h200", help="hardware target: a name (h200) or a YAML path")
    p.add_argument("--workers", type=int, help="persistent blocks (one an SM) the tiles are cut for and scheduled on "
                   "(default: the target's SM count; the pipelines' ${workers})")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE", help="fold a scalar input to a constant")
    p.add_argument("--frame", action="append", default=[], metavar="NAME=LEN", help="frame length of an input's symbolic dim")
    p.add_argument("--state", action="append", default=[], metavar="IN=OUT", help="pair a state input with its output")
    p.add_argument("--pipeline", help="pass pipeline instead of the default: a wavec-opt spec or a YAML file "
                   "(see wavec/pipelines/default.yaml)")
    p.add_argument("--task-costs", metavar="TIMELINE.json",
                   help="schedule by measured task costs: the --timeline file of `wavec run --backend cuda` on a "
                        "profile of this model, cohort and pipeline (wpk-schedule's task-costs)")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                   help="print the IR after this pass (stderr); repeatable")
    p.add_argument("-o", "--output", required=True, help="profile directory to write")
    p.add_argument("--progress", action="store_true",
                   help="show each stage's time and a progress bar on stderr (default: only when stderr is a terminal)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("import", help="print the frontend's wave IR of an ONNX model or a zoo model NAME:PRESET "
                       "(for wavec-opt; weights not included)")
    p.add_argument("model", help="an .onnx file, or a zoo model NAME:PRESET (e.g. duplex:1b)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE", help="fold a scalar input to a constant")
    p.add_argument("--frame", action="append", default=[], metavar="NAME=LEN", help="frame length of an input's symbolic dim")
    p.add_argument("--state", action="append", default=[], metavar="IN=OUT", help="pair a state input with its output")
    p.add_argument("-o", "--output", help=".mlir file to write (default: standard output)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("run", help="run beats of a profile")
    p.add_argument("profile")
    p.add_argument("--backend", choices=("interp", "cuda"), default="interp")
    p.add_argument("--inputs", required=True, help="npz: each input [beats, sessions, *frame], optional reset [beats, sessions]")
    p.add_argument("-o", "--output", required=True, help="npz to write: each output [beats, sessions, *shape]")
    p.add_argument("--timeline", metavar="FILE.json",
                   help="cuda: run the kernel traced and write, per beat, its span and the time workers spent "
                        "in bodies and waiting for inputs (us), and the last beat's phases")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="print a profile's report")
    p.add_argument("profile")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--gantt", metavar="FILE.png", help="also draw the modeled schedule: workers x time (matplotlib)")
    p.add_argument("--top", type=int, metavar="N", help="list only the N phases moving the most bytes, heaviest first "
                                                       "(with --json too: phases_total says how many there are)")
    p.add_argument("--compare-relax", action="store_true",
                   help="also plan the activations with TVM Relax's StaticPlanBlockMemory (needs apache-tvm)")
    p.add_argument("--timeline", metavar="FILE.json",
                   help="what `wavec run --backend cuda --timeline` measured for this profile: each phase's span and "
                        "waiting beside the modeled bytes and FLOPs, and the beats' p50s")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("verify", help="prove a profile race-free and its sessions isolated (exit 1: a violation, "
                                      "3: not proved: too large for the budget, or beyond the phase-level proof)")
    p.add_argument("profile")
    p.add_argument("--max-incidences", type=int, default=MAX_INCIDENCES,
                   help=f"the task-level proof's memory budget: word segments covered by all accesses, about 250 "
                        f"bytes each (default {MAX_INCIDENCES:,}; 0: no limit)")
    p.add_argument("--level", choices=LEVELS, default="auto",
                   help="task: every conflicting pair of tasks, within the budget; phase: phase by phase in one "
                        "session's words (wavec/verify_phases.py), for programs over it; auto (default): task within "
                        "the budget, phase above")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("payload-layout", help="print the 128-byte task record layout")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_payload_layout)

    p = sub.add_parser("demo", help="compile Silero VAD for a cohort and serve the shipped speech through it")
    p.add_argument("--sessions", type=int, default=64, help="cohort size: sessions served at once (default 64)")
    p.add_argument("--beats", type=int, default=0, help="beats to serve (0: the whole recording)")
    p.add_argument("--backend", choices=("interp", "cuda", "auto"), default="auto",
                   help="cuda: the persistent kernel on the GPU; interp: the CPU interpreter of the same payloads; "
                        "auto (default): cuda where a GPU is usable, else interp")
    p.add_argument("-o", "--output", default="", help="where to keep the profile (default: a temporary folder)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("serve", help="serve a cohort from recorded inputs on a fixed beat clock; write per-session, "
                       "per-beat records (wavec/serve.py)")
    p.add_argument("--profile", required=True, metavar="DIR", help="the compiled profile directory")
    p.add_argument("--beat-ms", required=True, metavar="D", help="beat period in milliseconds (beat b starts at b x D)")
    p.add_argument("--inputs", required=True, metavar="IN.npz",
                   help="npz: each input [beats, sessions, *frame], optional reset [beats, sessions] (as wavec run)")
    p.add_argument("--schedule", metavar="SESSIONS.json", help="who joins and leaves when, and which frames arrive late "
                   "(default: every slot from beat 0; see wavec.serve.parse_schedule)")
    p.add_argument("--beats", type=int, help="beats to serve (default: all recorded)")
    p.add_argument("--deadline-ms", metavar="D", help="deadline after each beat's start (default: the beat period)")
    p.add_argument("--backend", choices=("interp", "cuda"), default="interp")
    p.add_argument("--outputs", metavar="OUT.npz", help="also write the outputs [beats, sessions, *shape] (NaN where idle)")
    p.add_argument("--fetch", action="append", metavar="NAME",
                   help="an output to send back every beat (repeatable; default all). A state's update output "
                        "need not come back: the state stays on the device")
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl", help="records to write (JSON Lines)")
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except WavecError as e:
        print(f"wavec: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `wavec report ... | head`: the reader left; stop quietly
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt:
        return 130


def quiet_broken_pipe() -> None:
    """After a BrokenPipeError on stdout: point stdout at /dev/null so the interpreter's final flush
    does not complain again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
