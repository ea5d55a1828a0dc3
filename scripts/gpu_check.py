#!/usr/bin/env python3
"""One command for the GPU machine: build, check and time the persistent kernel of saved profiles.

    python3 scripts/gpu_check.py PROFILE_DIR... [--builtin 5 300 4096] [--beats 300] [--warmup 50]
                                 [--check-beats 3] [--json results.json] [--bytecode]

For each profile (a directory written by `wavec compile`, or the tests' built-in program at the given
cohort sizes): build the cubin with nvcc (cached), run ``--check-beats`` beats with random frames and
random resets on the GPU and on the interpreter and compare, then time ``--warmup`` + ``--beats`` beats
and print one row: sessions, workers, tasks, registers/spills, p50/p99 beat latency (publish -> output
epoch), p50 round trip (frames in, beat, outputs back), max |cuda - interp|, and ``tvm``: the EWISE tasks
that run a generated (TVM TensorIR) body in this kernel, of all EWISE tasks. A profile compiled where
apache-tvm is installed carries those bodies in its kernel.cu; ``--bytecode`` regenerates the kernel
without them (every EWISE task then runs the bytecode interpreter), for an A/B of the same profile.

Needs numpy, cuda-bindings and nvcc; not xDSL. Works from a plain checkout: when `wavec` is not
installed, it maps the repository's top-level packages under the `wavec` name itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _import_wavec() -> None:
    """Makes `wavec.targets` and `wavec.frontends` (the builder the benches' models and peers use)
    importable from a checkout that was not pip-installed (setuptools' package-dir maps top-level `targets/`
    to `wavec.targets`, `frontends/` to `wavec.frontends`)."""
    try:
        import wavec.targets.cuda  # noqa: F401
        return
    except ImportError:
        pass
    sys.path.insert(0, str(ROOT))
    import wavec

    for sub in ("targets", "frontends"):
        name = f"wavec.{sub}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(
            name, ROOT / sub / "__init__.py", submodule_search_locations=[str(ROOT / sub)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        setattr(wavec, sub, module)
        spec.loader.exec_module(module)


FRAME_BYTES_BUDGET = 1 << 30  # host bytes of distinct timed frames; beyond it the beats cycle through them


def distinct_beats(beats: int, profile) -> int:
    """How many of ``beats`` beats of ``profile``'s frames (every session's float32 inputs) fit
    FRAME_BYTES_BUDGET: the timed beats cycle through that many (at least 1). Beyond the budget, making the
    frames would cost more device time than running them (16,384 Silero sessions: 38 MB a beat)."""
    frame_bytes = profile.sessions * sum(4 * int(np.prod(i["shape"])) for i in profile.meta["inputs"])
    return max(1, min(beats, FRAME_BYTES_BUDGET // max(1, frame_bytes)))


def random_inputs(profile, beats: int, seed: int, reset_rate: float = 0.1):
    rng = np.random.default_rng(seed)
    frames = {
        spec["name"]: rng.standard_normal((beats, profile.sessions, *spec["shape"]), dtype=np.float32)
        for spec in profile.meta["inputs"]
    }
    reset = rng.random((beats, profile.sessions)) < reset_rate
    reset[0] = True  # every session joins at the first beat
    return frames, reset


def max_abs_err(a: dict, b: dict) -> float:
    err = 0.0
    for k in b:
        d = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))
        if d.size:
            err = max(err, float(np.nanmax(d)) if not np.isnan(d).all() else float("nan"))
        if np.isnan(a[k]).sum() != np.isnan(b[k]).sum():
            err = float("nan")
    return err


def generated_ewise(profile, source: str) -> str:
    """``a/b``: EWISE tasks whose generated body is in ``source`` / all EWISE tasks."""
    from wavec.opcodes import Opcode, unpack_params

    present = {int(i) for i in re.findall(r"__device__ __forceinline__ void ewise_tvm_(\d+)\(", source)}
    rows = profile.payloads[profile.payloads["opcode"] == int(Opcode.EWISE)]
    hits = sum(unpack_params(profile.params, int(at)).body in present for at in rows["params"])
    return f"{hits}/{len(rows)}"


SAMPLE_ELEMS = 1 << 16  # per generated weight, head and tail, when the arena is too big to compare whole


def generated_bits_equal(session, profile) -> bool:
    """Whether the device's generated weights equal wavec.weights' host values bit for bit: the whole
    arena when it is small, else the first and last SAMPLE_ELEMS elements of every generated weight."""
    from wavec.weights import from_spec

    if int(profile.meta["arena_bytes"]["weights"]) <= 1 << 30:
        return bool(np.array_equal(session.read_weights(), profile.weights_arena()))
    for spec in profile.generated_weights:
        weight, n = from_spec(spec), int(spec["elems"])
        for start in {0, max(0, n - SAMPLE_ELEMS)}:
            stop = min(n, start + SAMPLE_ELEMS)
            got = session.read_weights(int(spec["offset"]) + 4 * start, 4 * (stop - start)).view(np.float32)
            if not np.array_equal(got.view(np.uint32), weight.flat_values(start, stop).view(np.uint32)):
                return False
    return True


def kernel_for(profile, bytecode: bool, constants: list[str] = ()) -> str:
    """The profile's kernel source; with ``bytecode``, regenerated without generated EWISE bodies;
    ``constants``: ``NAME=VALUE`` settings of the kernel's constexpr switches (codegen.with_constant)."""
    from wavec.targets.cuda import codegen, runtime

    source = codegen.generate_kernel({**profile.meta, "ewise_bodies": []}) if bytecode else runtime.kernel_source(profile)
    for setting in constants:
        name, _, value = setting.partition("=")
        source = codegen.with_constant(source, name, value)
    return source


def constant_setting(text: str) -> str:
    """argparse type of --set: NAME=VALUE, VALUE a C++ literal (true, false or an integer)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not re.fullmatch(r"true|false|-?\d+", value):
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE, VALUE true, false or an integer")
    return text


def check_profile(label: str, profile, args) -> dict:
    from wavec.targets.cuda import codegen, runtime
    from wavec.targets.cuda.build import build_cubin, build_report
    from wavec.targets.interp import run_beats as interp_run

    row = {"profile": label, "sessions": profile.sessions, "workers": int(profile.meta["workers"]),
           "tasks": int(len(profile.payloads))}
    t0 = time.perf_counter()
    source = kernel_for(profile, args.bytecode, args.set)
    row["tvm"] = generated_ewise(profile, source)
    cubin = build_cubin(source)
    row["build_s"] = round(time.perf_counter() - t0, 2)
    report = build_report(cubin)
    entry = report.find(f"Compiling entry function '{codegen.KERNEL_NAME}'")
    report = report[entry:] if entry >= 0 else report  # the persistent kernel's lines, not the fill kernel's
    regs = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    row["registers"] = int(regs.group(1)) if regs else None
    row["spill_bytes"] = int(spills.group(1)) + int(spills.group(2)) if spills else None
    row["stack_bytes"] = int(stack.group(1)) if stack else None

    if args.check_beats:  # 0: time only (a model too big for the interpreter)
        frames, reset = random_inputs(profile, args.check_beats, seed=1)
        got = runtime.run_beats(profile, frames, reset, cubin=cubin)
        t0 = time.perf_counter()
        want = interp_run(profile, frames, reset)
        row["interp_s"] = round(time.perf_counter() - t0, 2)
        row["max_abs_err"] = max_abs_err(got, want)

    n = args.warmup + args.beats
    distinct = distinct_beats(n, profile)
    frames, reset = random_inputs(profile, distinct, seed=2, reset_rate=0.01)
    trips = []
    with runtime.CudaSession(profile, cubin=cubin) as session:
        if profile.generated_weights:  # made on the device: the same bits as wavec.weights on the host?
            row["generated_bits_equal"] = generated_bits_equal(session, profile)
        for b in range(n):
            t = time.perf_counter_ns()
            session.beat({k: v[b % distinct] for k, v in frames.items()}, reset[b % distinct])
            trips.append((time.perf_counter_ns() - t) / 1e3)
        lat = np.array(session.latencies_us[args.warmup :])
    trips = np.array(trips[args.warmup :])
    row["beat_p50_us"] = round(float(np.percentile(lat, 50)), 2)
    row["beat_p99_us"] = round(float(np.percentile(lat, 99)), 2)
    row["beat_min_us"] = round(float(lat.min()), 2)
    row["trip_p50_us"] = round(float(np.percentile(trips, 50)), 2)
    row["ok"] = bool(row.get("max_abs_err", 0.0) <= args.tol and row.get("generated_bits_equal", True))
    return row


COLUMNS = [
    ("profile", "profile", 28), ("sessions", "sess", 6), ("workers", "wk", 4), ("tasks", "tasks", 7), ("tvm", "tvm", 11),
    ("registers", "regs", 5), ("spill_bytes", "spill", 6), ("beat_min_us", "min_us", 8),
    ("beat_p50_us", "p50_us", 8), ("beat_p99_us", "p99_us", 8), ("trip_p50_us", "trip_us", 8),
    ("max_abs_err", "max_err", 10), ("generated_bits_equal", "genbits", 7), ("ok", "ok", 4),
]


def print_row(row: dict | None) -> None:
    if row is None:
        print("  ".join(f"{title:>{w}}" for _, title, w in COLUMNS), flush=True)
        return
    cells = []
    for key, _, w in COLUMNS:
        v = row.get(key, "")
        if isinstance(v, float) and key == "max_abs_err":
            v = f"{v:.2e}"
        cells.append(f"{str(v)[-w:]:>{w}}")
    print("  ".join(cells), flush=True)


def builtin_jobs(sessions: list[int]) -> list:
    """(label, build) of the tests' built-in programs (tests/test_cuda.py's builders, without xDSL) at each cohort
    size: the four-opcode one, the matmul-prologue one, and its size without prologue for the tiled GEMM, W stored
    [k, n] and [n, k]. --builtin checks them here; scripts/prebuild_cubins.py --builtin builds their kernels."""
    if not sessions:
        return []
    sys.path.insert(0, str(ROOT / "tests"))
    from test_cuda import TILED, TILED_NK, build_prologue_profile, build_test_profile

    return ([(f"builtin:{n}", lambda n=n: build_test_profile(sessions=n)[0]) for n in sessions]
            + [(f"builtin-prologue:{n}", lambda n=n: build_prologue_profile(sessions=n)[0]) for n in sessions]
            + [(f"builtin-{name}:{n}", lambda n=n, dims=dims: build_prologue_profile(sessions=n, dims=dims)[0])
               for n in sessions for name, dims in (("tiled", TILED), ("tiled-nk", TILED_NK))])


def prebuild(jobs: list, args) -> dict:
    """Loads every profile and builds all their cubins at once (nvcc is single-threaded; the machine has
    many cores), so check_profile finds them in the build cache. {label: profile, or the exception}."""
    from wavec.targets.cuda.build import build_cubin

    profiles = {}
    for label, make in jobs:
        try:
            profiles[label] = make()
        except Exception as e:  # noqa: BLE001 - check_profile's loop reports it
            profiles[label] = e
    try:
        sources = [kernel_for(p, args.bytecode, args.set) for p in profiles.values()
                   if not isinstance(p, Exception)]
    except ValueError as e:  # a --set name the kernel does not have
        sys.exit(f"gpu_check: --set: {e}")
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for future in [pool.submit(build_cubin, src) for src in sources]:
            future.exception()  # a failed build fails again, with its message, in check_profile
    return profiles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="*", help="profile directories")
    ap.add_argument("--builtin", type=int, nargs="*", default=[], metavar="SESSIONS",
                    help="also check the tests' built-in programs at these cohort sizes (builtin_jobs)")
    ap.add_argument("--beats", type=int, default=300, help="timed beats (default 300)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed beats first (default 50)")
    ap.add_argument("--check-beats", type=int, default=3,
                    help="beats compared with the interpreter (default 3; 0 skips the comparison)")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |cuda - interp| that passes (default 1e-4)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--bytecode", action="store_true",
                    help="regenerate each kernel without its generated EWISE bodies (the bytecode interpreter runs them)")
    ap.add_argument("--set", type=constant_setting, action="append", default=[], metavar="NAME=VALUE",
                    help="set a constexpr switch of each kernel, for an A/B of a body variant (e.g. kConvUnroll=2)")
    args = ap.parse_args(argv)
    _import_wavec()
    from wavec.profile import load
    from wavec.targets.cuda import runtime

    if not runtime.gpu_available():
        print("gpu_check: no CUDA GPU with cuda-bindings on this machine", file=sys.stderr)
        return 2
    jobs = [(str(p), lambda p=p: load(p)) for p in args.profiles] + builtin_jobs(args.builtin)
    if not jobs:
        ap.error("give profile directories or --builtin SESSIONS")
    profiles = prebuild(jobs, args)
    rows, failed = [], 0
    print_row(None)
    for label, _ in jobs:
        try:
            profile = profiles[label]
            if isinstance(profile, Exception):
                raise profile
            row = check_profile(label, profile, args)
        except Exception as e:  # noqa: BLE001 - report and go on with the next profile
            traceback.print_exc()
            row = {"profile": label, "error": f"{type(e).__name__}: {e}", "ok": False}
        rows.append(row)
        failed += not row.get("ok")
        print_row(row)
        if "error" in row:
            print(f"    {row['error']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
