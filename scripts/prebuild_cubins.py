#!/usr/bin/env python3
"""Builds each profile's kernel here, into the nvcc build cache the GPU machine will read, so its device
time goes to running, not compiling (about 10 s of nvcc per kernel).

    WAVEC_CUBIN_CACHE=.device/cubin python3 scripts/prebuild_cubins.py .device/vad-1 .device/zoo-duplex ... [--set NAME=VALUE]
                                                                        [--regenerate] [--builtin 5 72]

The kernel is the one `scripts/gpu_check.py` and the benches build (the profile's kernel.cu, its generated
EWISE bodies included), so the cache key matches there as long as nvcc's version does (cuda 13.0.88 on
both, 2026-11). Prints per profile: seconds, the cubin, and ptxas' registers and spills. ``--regenerate``
first rewrites each profile's kernel.cu from this checkout's codegen (its profile.json unchanged), so profiles
compiled before a kernel change run the changed kernel without recompiling their model; it assumes the payload
format (wavec.payload, wavec.opcodes) did not change, and needs apache-tvm when the profile has generated EWISE
bodies. A kernel.cu of an older protocol (codegen.PROTOCOL) is regenerated so, --regenerate or not: the GPU
machine would otherwise regenerate it itself, without apache-tvm, so without its generated bodies, and build
a kernel this cache does not hold (the twelfth run lost a device call to it). ``--builtin SESSIONS...`` also
builds the kernels of `scripts/gpu_check.py --builtin`'s programs (tests/test_cuda.py's: eight kernels for two
cohort sizes, whose nvcc time the GPU machine would otherwise spend).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpu_check import _import_wavec, constant_setting  # scripts/ is this script's own folder, first on sys.path

ROOT = Path(__file__).resolve().parent.parent


def build(directory: Path, constants: list[str] = (), regenerate: bool = False) -> str:
    from gpu_check import kernel_for

    from wavec.profile import load
    from wavec.targets.cuda import build as nvcc
    from wavec.targets.cuda.codegen import PROTOCOL_MARKER, generate_kernel

    t0 = time.perf_counter()
    profile = load(directory)
    stale = PROTOCOL_MARKER not in (profile.kernel_source or "")
    if regenerate or stale:
        source = generate_kernel(profile.meta)
        lost = "apache-tvm was not importable"
        if lost in source and lost not in profile.kernel_source:
            why = "--regenerate" if regenerate else "its kernel.cu is missing or of an older protocol, so"
            raise SystemExit(f"scripts/prebuild_cubins.py: {why}: {directory}'s kernel has generated EWISE bodies "
                             "and this machine's apache-tvm cannot regenerate them; run it where apache-tvm imports")
        profile.kernel_source = source
        (directory / "kernel.cu").write_text(source)
    cubin = nvcc.build_cubin(kernel_for(profile, False, constants=constants))
    spills = re.findall(r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                        r"(\d+) bytes spill loads", nvcc.build_report(cubin))
    report = ", ".join(f"{name} {stores}/{loads}" for name, stores, loads in spills if stores != "0" or loads != "0")
    note = " (kernel.cu regenerated: it was missing or spoke an older protocol)" if stale and not regenerate else ""
    return (f"{directory}: {time.perf_counter() - t0:.1f} s, {cubin.name}{note}; spill bytes (stores/loads): "
            f"{report or 'none'}")


def build_builtin(label: str, make, constants: list[str] = ()) -> str:
    """The kernel of one of gpu_check.py's built-in programs (gpu_check.builtin_jobs), as it builds it."""
    from gpu_check import kernel_for

    from wavec.targets.cuda import build as nvcc

    t0 = time.perf_counter()
    cubin = nvcc.build_cubin(kernel_for(make(), False, constants=constants))
    return f"{label}: {time.perf_counter() - t0:.1f} s, {cubin.name}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="*", type=Path)
    ap.add_argument("--builtin", type=int, nargs="*", default=[], metavar="SESSIONS",
                    help="also build the kernels of gpu_check.py --builtin's programs at these cohort sizes")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc builds")
    ap.add_argument("--set", type=constant_setting, action="append", default=[], metavar="NAME=VALUE",
                    help="build the kernels with this constexpr switch set, as gpu_check.py --set runs them")
    ap.add_argument("--regenerate", action="store_true",
                    help="rewrite each profile's kernel.cu from the current codegen before building it")
    args = ap.parse_args(argv)
    if not os.environ.get("WAVEC_CUBIN_CACHE"):
        sys.exit("scripts/prebuild_cubins.py: set WAVEC_CUBIN_CACHE to the carried folder (e.g. .device/cubin)")
    sys.path.insert(0, str(ROOT / "scripts"))
    _import_wavec()  # a checkout that was not pip-installed: the GPU machine's, building there on its cores
    profiles = [p for p in args.profiles if (p / "profile.json").is_file()]
    for skipped in sorted(set(args.profiles) - set(profiles)):
        print(f"{skipped}: skipped, not a profile (no profile.json)", flush=True)
    if not profiles and not args.builtin:
        ap.error("give profile directories or --builtin SESSIONS")
    from gpu_check import builtin_jobs

    builtins = builtin_jobs(args.builtin)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        try:
            for line in pool.map(lambda p: build(p, args.set, args.regenerate), profiles):
                print(line, flush=True)
            for line in pool.map(lambda job: build_builtin(*job, args.set), builtins):
                print(line, flush=True)
        except ValueError as e:  # a --set name the kernel does not have
            sys.exit(f"scripts/prebuild_cubins.py: --set: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
