"""`wavec`: compile a model to a profile, run it, report it, verify it.

    wavec compile MODEL.onnx --sessions N [--hw h200] [--bind NAME=VALUE]... [--frame NAME=LEN]...
                  [--state IN=OUT]... [--pipeline SPEC] -o DIR
    wavec run DIR --backend interp|cuda --inputs IN.npz -o OUT.npz
    wavec report DIR [--json]
    wavec verify DIR
    wavec payload-layout [--json]
    wavec demo [--sessions N] [--backend interp|cuda]

Every user error prints one line `wavec: error: ...` and exits 1; no tracebacks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from wavec.errors import WavecError


def _pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for v in values:
        name, sep, rest = v.partition("=")
        if not sep or not name or not rest:
            raise WavecError(f"{flag} {v!r}: expected NAME=VALUE")
        pairs.append((name, rest))
    return pairs


def _number(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise WavecError(f"{flag}: {text!r} is not a number") from e
    return int(value) if value.is_integer() else value


def cmd_compile(args) -> int:
    from wavec.driver import compile as compile_model

    bindings = {k: _number(v, "--bind") for k, v in _pairs(args.bind, "--bind")}
    frames = {k: int(_number(v, "--frame")) for k, v in _pairs(args.frame, "--frame")}
    states = _pairs(args.state, "--state")
    if not Path(args.model).is_file():
        raise WavecError(f"{args.model}: no such model file")
    profile = compile_model(
        args.model, sessions=args.sessions, hw=args.hw, bindings=bindings, frames=frames, states=states,
        pipeline=args.pipeline,
    )
    out = profile.save(args.output)
    print(f"wrote {out}: {len(profile.payloads)} tasks, {len(profile.meta['phases'])} phases, "
          f"{profile.sessions} sessions")
    return 0


def cmd_run(args) -> int:
    import numpy as np

    from wavec.profile import load

    profile = load(args.profile)
    if not Path(args.inputs).is_file():
        raise WavecError(f"{args.inputs}: no such inputs file")
    with np.load(args.inputs) as data:
        arrays = {k: data[k] for k in data.files}
    reset = arrays.pop("reset", None)
    outputs = profile.run(arrays, backend=args.backend, reset=reset)
    np.savez(args.output, **outputs)
    beats = next(iter(outputs.values())).shape[0] if outputs else 0
    print(f"wrote {args.output}: {', '.join(outputs)} for {beats} beats x {profile.sessions} sessions ({args.backend})")
    return 0


def cmd_report(args) -> int:
    from wavec.profile import load
    from wavec.report import build_report, format_report

    profile = load(args.profile)
    report = profile.report or build_report(profile)
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    return 0


def cmd_verify(args) -> int:
    from wavec.profile import load
    from wavec.verify import verify_profile

    report = verify_profile(load(args.profile))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wavec", description="Compile a streaming model into one persistent GPU kernel.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile an ONNX model into a profile directory")
    p.add_argument("model")
    p.add_argument("--sessions", type=int, required=True, help="cohort capacity (session slots)")
    p.add_argument("--hw", default="h200", help="hardware target: a name (h200) or a YAML path")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE", help="fold a scalar input to a constant")
    p.add_argument("--frame", action="append", default=[], metavar="NAME=LEN", help="frame length of an input's symbolic dim")
    p.add_argument("--state", action="append", default=[], metavar="IN=OUT", help="pair a state input with its output")
    p.add_argument("--pipeline", help="pass pipeline (wavec-opt syntax) instead of the default")
    p.add_argument("-o", "--output", required=True, help="profile directory to write")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run beats of a profile")
    p.add_argument("profile")
    p.add_argument("--backend", choices=("interp", "cuda"), default="interp")
    p.add_argument("--inputs", required=True, help="npz: each input [beats, sessions, *frame], optional reset [beats, sessions]")
    p.add_argument("-o", "--output", required=True, help="npz to write: each output [beats, sessions, *shape]")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="print a profile's report")
    p.add_argument("profile")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("verify", help="prove a profile race-free and its sessions isolated")
    p.add_argument("profile")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("payload-layout", help="print the 128-byte task record layout")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_payload_layout)

    p = sub.add_parser("demo", help="compile Silero VAD for a cohort and serve the shipped speech through it")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--beats", type=int, default=0, help="beats to serve (0: the whole recording)")
    p.add_argument("--backend", choices=("interp", "cuda", "auto"), default="auto")
    p.add_argument("-o", "--output", default="", help="where to keep the profile (default: a temporary folder)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WavecError as e:
        print(f"wavec: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
