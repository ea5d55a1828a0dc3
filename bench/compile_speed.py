"""Compile speed: per-stage wall time and peak memory of `wavec compile` for zoo models.

    python3 bench/compile_speed.py                              # duplex:1b and duplex:11b, 56 sessions
    python3 bench/compile_speed.py duplex:tiny --sessions 8 --progress
    python3 bench/compile_speed.py duplex:1b --markdown         # a table row block for bench/RESULTS.md
    python3 bench/compile_speed.py duplex:11b --pipeline 'wave-expand-pow,wave-fuse,wave-cohort{sessions=56},
        wave-to-wpk{workers=132},wpk-arena{granularity=op},wpk-schedule{granularity=phase workers=132},wpk-payload'

Each model compiles in a fresh process (peak RSS is per process): build (zoo model to wave IR), every pass
of the default pipeline, the IR verifier, emit, codegen, report and save, as `wavec compile NAME --sessions
N -o DIR` runs them (wavec.progress records the stages). Prints one line per stage (seconds, the
process's peak RSS after it) and a summary: phases, tasks, total seconds, peak RSS. A benchmark, not a
test: nothing here fails on a slow run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def measure(model: str, sessions: int, show: bool, pipeline: str | None = None) -> dict:
    """Compiles ``model`` in this process (``pipeline``: a spec or YAML file, default the default one) and
    returns its stage timings and counts."""
    from wavec import progress, zoo
    from wavec.driver import compile_graph

    with tempfile.TemporaryDirectory() as tmp, progress.using(progress.Progress(sys.stderr if show else None)) as p:
        t0 = time.perf_counter()
        with p.stage("build"):
            graph = zoo.get(model).lower()
        profile = compile_graph(graph, sessions=sessions, pipeline=pipeline)
        with p.stage("save"):
            profile.save(os.path.join(tmp, "profile"))
        total = time.perf_counter() - t0
    return {
        "model": model,
        "sessions": sessions,
        "pipeline": pipeline or "default",
        "phases": len(profile.meta["phases"]),
        "tasks": int(len(profile.payloads)),
        "seconds": total,
        "peak_rss_mb": progress.peak_rss_mb(),
        "stages": [[s.name, s.seconds, s.peak_rss_mb] for s in p.timings],
        "report": {k: profile.report.get(k) for k in ("flops_per_beat", "bytes_per_beat", "floor_us")},
    }


def run_child(model: str, sessions: int, show: bool, pipeline: str | None) -> dict:
    cmd = [sys.executable, __file__, model, "--sessions", str(sessions), "--child"] + (["--progress"] if show else [])
    cmd += ["--pipeline", pipeline] if pipeline else []
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_result(r: dict) -> None:
    print(f"{r['model']} at {r['sessions']} sessions ({r['pipeline']} pipeline): {r['phases']:,} phases, {r['tasks']:,} tasks, "
          f"{r['seconds']:.1f} s, peak RSS {r['peak_rss_mb']:,.0f} MiB")
    for name, seconds, rss in r["stages"]:
        print(f"  {name:<16}{seconds:9.2f} s{rss:10,.0f} MiB")
    rep = r["report"]
    floor = (rep.get("floor_us") or {}).get("beat")
    print(f"  report: {rep['flops_per_beat']:,} FLOPs, {rep['bytes_per_beat']:,} bytes per beat"
          + (f", floor {floor:.1f} us" if floor is not None else ""))


def markdown(results: list[dict]) -> str:
    stages = []
    for r in results:
        stages += [s[0] for s in r["stages"] if s[0] not in stages]
    head = ["model", "sessions", "phases", "tasks", "total s", "peak RSS MiB", *stages]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for r in results:
        by = {s[0]: s[1] for s in r["stages"]}
        cells = [r["model"], str(r["sessions"]), f"{r['phases']:,}", f"{r['tasks']:,}", f"{r['seconds']:.1f}",
                 f"{r['peak_rss_mb']:,.0f}", *(f"{by[s]:.2f}" if s in by else "" for s in stages)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["duplex:1b", "duplex:11b"], help="zoo NAME:PRESET (default: duplex:1b duplex:11b)")
    ap.add_argument("--sessions", type=int, default=56)
    ap.add_argument("--progress", action="store_true", help="show each stage and progress bars on stderr")
    ap.add_argument("--pipeline", help="a pipeline spec or YAML file instead of the default pipeline (as `wavec compile --pipeline`)")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table (for bench/RESULTS.md)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.models[0], args.sessions, args.progress, args.pipeline)))
        return 0
    results = []
    for model in args.models:
        r = run_child(model, args.sessions, args.progress, args.pipeline)
        print_result(r)
        results.append(r)
    if args.markdown:
        print()
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
