#!/usr/bin/env python3
"""Silero VAD on the GPU: check the compiled profiles against onnxruntime and time their beats.

    python3 scripts/silero_gpu.py PROFILE_DIR... [--check-beats 200] [--beats 1000] [--warmup 100]
                                  [--json OUT.json] [--timeline-dir DIR] [--bytecode]

For each profile (compiled on a machine with xDSL by `wavec compile ... -o DIR` or
`python3 scripts/silero_profiles.py`): build the kernel with nvcc, serve `--check-beats` beats of the
shipped speech (wavec.audio.cohort_schedule: staggered joins and rejoins, per-session noise) through
`--backend cuda`, run the original ONNX model in onnxruntime on the same frames with the same per-session
state (wavec.reference), and report the max abs error of `output` and `stateN`; then time
`--warmup` + `--beats` beats and print beat latency p50/p99 (host publishes the input epoch -> host
sees the output epoch, microseconds); finally run `--trace-beats` beats with the kernel's per-task
timeline on and print the slowest phases of the last one (``--timeline-dir``: and write the timeline, whose
measured task costs `wavec compile --task-costs` schedules by). Column ``tvm``: the EWISE tasks that run a
generated TVM TensorIR body in the kernel (compile the profiles where apache-tvm is installed), of all
EWISE tasks; ``--bytecode`` regenerates each kernel without those bodies, for an A/B of one profile.
Needs numpy, onnxruntime, cuda-bindings and nvcc; not xDSL.
The model file comes from $WAVEC_CACHE (wavec.models), since the GPU machine reaches no registry.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import _import_wavec, generated_ewise, kernel_for  # noqa: E402  (maps the checkout's packages under `wavec`)

TOLERANCE = 1e-4  # float32 kernel vs float32 onnxruntime, max abs error (issue 2's acceptance)


def check_and_time(directory: Path, args) -> dict:
    import wavec
    from wavec.audio import cohort_schedule
    from wavec.models import silero_vad_path
    from wavec.reference import onnx_stateful_reference
    from wavec.targets.cuda import runtime
    from wavec.targets.cuda.build import build_cubin
    from wavec.targets.cuda.timeline import Timeline

    profile = wavec.load(directory)
    n = profile.sessions
    source = kernel_for(profile, args.bytecode)
    cubin = build_cubin(source)
    frames, reset = cohort_schedule(n, args.check_beats, seed=7)
    got = profile.run({"input": frames}, backend="cuda", reset=reset, cubin=cubin)
    want = onnx_stateful_reference(
        silero_vad_path(), {"input": frames}, reset, states=[("state", "stateN")], bindings={"sr": 16000},
        cohort_axes={"input": 0, "state": 1, "output": 0, "stateN": 1},
    )
    errors = {k: float(np.abs(got[k] - want[k]).max()) for k in ("output", "stateN")}

    total = args.warmup + args.beats
    frames, reset = cohort_schedule(n, total, seed=8)
    with runtime.CudaSession(profile, cubin=cubin) as session:
        t0 = time.perf_counter()
        for b in range(total):
            session.beat({"input": frames[b]}, reset[b])
        wall = time.perf_counter() - t0
        lat = np.array(session.latencies_us[args.warmup :])
    timeline = Timeline()
    with runtime.CudaSession(profile, cubin=cubin, trace=True) as session:
        for b in range(args.trace_beats):
            session.beat({"input": frames[b]}, reset[b])
            timeline.add(profile, session.read_trace())
    if args.timeline_dir is not None:
        args.timeline_dir.mkdir(parents=True, exist_ok=True)
        (args.timeline_dir / f"{directory.name}.json").write_text(json.dumps(timeline.to_json(), indent=1))
    return {
        "timeline": timeline.phases,
        "phase_costs": timeline.phase_costs(),
        "profile": str(directory),
        "sessions": n,
        "tasks": int(len(profile.payloads)),
        "phases": len(profile.meta["phases"]),
        "tvm": generated_ewise(profile, source),
        "err_output": errors["output"],
        "err_stateN": errors["stateN"],
        "ok": max(errors.values()) <= TOLERANCE,
        "beat_p50_us": float(np.percentile(lat, 50)),
        "beat_p99_us": float(np.percentile(lat, 99)),
        "beat_max_us": float(lat.max()),
        "host_beats_per_s": total / wall,
    }


def print_timeline(row: dict, top: int = 8) -> None:
    from wavec.targets.cuda.timeline import format_phases

    total = sum(r["span_us"] for r in row["timeline"])
    print(f"  {row['sessions']} sessions: phases sum {total:.1f} us; slowest:")
    print(format_phases(row["timeline"], top))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--check-beats", type=int, default=200)
    ap.add_argument("--beats", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--trace-beats", type=int, default=20, help="beats run with the per-task timeline on")
    ap.add_argument("--timeline-dir", type=Path, help="write each profile's timeline (`wavec run --timeline`'s "
                    "format, with the phase costs `wavec compile --task-costs` takes) to DIR/PROFILE_NAME.json")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--bytecode", action="store_true", help="kernels without their generated EWISE bodies")
    args = ap.parse_args(argv)
    _import_wavec()
    rows = []
    for directory in args.profiles:
        try:
            rows.append(check_and_time(directory, args))
        except Exception as e:  # one broken profile should not hide the others' figures
            rows.append({"profile": str(directory), "ok": False, "error": f"{type(e).__name__}: {e}"})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"{'sessions':>8} {'tasks':>6} {'tvm':>7} {'err_output':>11} {'err_stateN':>11} {'p50_us':>8} {'p99_us':>8} {'max_us':>8}  ok")
    for r in rows:
        if "error" in r:
            print(f"{r['profile']}: {r['error']}")
            continue
        print(f"{r['sessions']:>8} {r['tasks']:>6} {r['tvm']:>7} {r['err_output']:>11.2e} {r['err_stateN']:>11.2e} "
              f"{r['beat_p50_us']:>8.1f} {r['beat_p99_us']:>8.1f} {r['beat_max_us']:>8.1f}  {r['ok']}")
    for r in rows:
        if "timeline" in r:
            print_timeline(r)
    passed = sum(1 for r in rows if r.get("ok"))
    print(f"{passed} passed, {len(rows) - passed} failed")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
