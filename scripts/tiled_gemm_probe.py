#!/usr/bin/env python3
"""Where the tiled GEMM's time goes, on the GPU: each profile's kernel again with parts of `tiled_gemm` cut out
(its outputs then wrong, its times right), the phases' task bodies from the kernel's per-task trace.

    python3 scripts/tiled_gemm_probe.py PROFILE_DIR... [--beats 8] [--json OUT.json]

Variants (CUTS, text replacements in the generated kernel, each of which must occur exactly once):
``base``; ``-products`` (no fragment reads, splits or mma); ``-stores`` (no block stores; ptxas then drops the
products as well, since nothing reads them: an mma that is ``asm volatile`` in CUDA C is not so in SASS);
``-copies`` (no cp.async: the products read whatever the stages hold); ``-all``; and the store path's parts:
``-evaluate`` (every epilogue evaluated inline as add(%0, %1), Silero's LSTM epilogue, whatever its body),
``-gathers`` (no epilogue input or CONV bias loaded), ``-writes`` (each output's value kept, not stored),
``-eval-gath``. ``--variants`` picks some (base is always run). Prints, per profile, the
median beat span (us) of each variant and, for the base's 8 longest phases, span / body p50 / body max (us)
under each variant; bench/RESULTS.md nineteenth run has a table. The first 2 of ``--beats`` traced beats are
warm-up. Needs numpy, cuda-bindings and nvcc (the GPU machine, 16 builds at once); not xDSL.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import _import_wavec, kernel_for, random_inputs  # noqa: E402  (maps the checkout's packages)

WARMUP_BEATS = 2
CUTS = {
    "stores": [("      if (computes) tg_store(ops, at.n0, wm, wn, N, acc, error);",
                "      if (false) tg_store(ops, at.n0, wm, wn, N, acc, error);")],
    "products": [("    if (computes && at.m0 + wm < M && at.n0 + wn < N)\n      tg_products<kBTf32, kAlongK, Block>(",
                  "    if (false)\n      tg_products<kBTf32, kAlongK, Block>(")],
    "copies": [("        if (WalkA::copies(i)) cp_async<W>(As", "        if (false) cp_async<W>(As"),
               ("        if (WalkB::copies(i))\n          cp_async<W>(Bs", "        if (false)\n          cp_async<W>(Bs")],
}
CUTS.update({
    "evaluate": [("    if constexpr (kInline) return evaluate(v, error);\n    return evaluate_call(v[0], v[1], v[2], v[3], error);",
                  "    return v[0] + v[1];")],
    "gathers": [("    return {sum, r.valid ? ep.first_extra(r.s, r.extra_off, n, step) : 0.0f};", "    return {sum, 0.0f};"),
                ("    return {has_bias ? sum + *bias.at(r.s, u0 + n) : sum, ep.first_extra(r.s, r.extra_off, n, r.step)};",
                 "    return {sum, 0.0f};")],
    "writes": [("      *out.at(r.s, r.off + n * on) = ep.template finish<kInline>(in.acc, in.x0, r.s, r.extra_off, n, step, error);",
                "      { const float v = ep.template finish<kInline>(in.acc, in.x0, r.s, r.extra_off, n, step, error);\n"
                "        if (v == 1.2345e-30f) *out.at(r.s, r.off + n * on) = v; }"),
               ("    *out.at(r.s, (long long)(u0 + n) * T + r.t) =\n"
                "        ep.template finish<kTgInlineEpilogue>(in.acc, in.x0, r.s, r.extra_off, n, r.step, error);",
                "    { const float v = ep.template finish<kTgInlineEpilogue>(in.acc, in.x0, r.s, r.extra_off, n, r.step, error);\n"
                "      if (v == 1.2345e-30f) *out.at(r.s, (long long)(u0 + n) * T + r.t) = v; }")],
})
VARIANTS = {"base": [], "-products": ["products"], "-stores": ["stores"], "-copies": ["copies"],
            "-all": ["stores", "products", "copies"], "-evaluate": ["evaluate"], "-gathers": ["gathers"],
            "-writes": ["writes"], "-eval-gath": ["evaluate", "gathers"]}


def variant_source(source: str, cuts: list[str]) -> str:
    """``source`` with the CUTS of ``cuts`` made; ValueError when the kernel's text no longer has one."""
    for cut in cuts:
        for old, new in CUTS[cut]:
            if source.count(old) != 1:
                raise ValueError(f"tiled_gemm_probe: cut {cut!r} expects one {old.strip()!r} in the kernel, "
                                 f"found {source.count(old)}: update CUTS to the kernel's tiled_gemm")
            source = source.replace(old, new)
    return source


def traced_phases(profile, cubin, beats: int) -> tuple[float, dict]:
    """(median beat span, {phase: median [span, body p50, body max]}) over the traced beats past the warm-up."""
    from wavec.targets.cuda import runtime
    from wavec.targets.cuda.timeline import beat_summary, phase_rows

    frames, reset = random_inputs(profile, beats, seed=3, reset_rate=0.01)
    spans, phases = [], {}
    with runtime.CudaSession(profile, cubin=cubin, trace=True) as session:
        for b in range(beats):
            session.beat({k: v[b] for k, v in frames.items()}, reset[b])
            if b < WARMUP_BEATS:
                continue
            trace = session.read_trace()
            spans.append(beat_summary(profile, trace)["span_us"])
            for r in phase_rows(profile, trace):
                phases.setdefault(r["phase"], []).append((r["span_us"], r["body_p50_us"], r["body_max_us"]))
    return float(np.median(spans)), {p: np.median(v, axis=0).round(1).tolist() for p, v in phases.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--beats", type=int, default=8, help=f"traced beats a variant, the first {WARMUP_BEATS} untimed")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", nargs="+", choices=[v for v in VARIANTS if v != "base"], default=None,
                    help="the cut variants to run beside base (default: all)")
    args = ap.parse_args(argv)
    if args.beats <= WARMUP_BEATS:
        ap.error(f"--beats must be over {WARMUP_BEATS}")
    _import_wavec()
    import wavec
    from wavec.targets.cuda.build import build_cubin

    jobs = []
    for directory in args.profiles:
        profile = wavec.load(directory)
        base = kernel_for(profile, False)
        try:
            jobs += [(directory, profile, name, variant_source(base, cuts)) for name, cuts in VARIANTS.items()
                     if name == "base" or args.variants is None or name in args.variants]
        except ValueError as e:
            sys.exit(str(e))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        cubins = list(pool.map(lambda job: build_cubin(job[3]), jobs))
    print(f"built {len(jobs)} kernels in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for (directory, profile, name, _), cubin in zip(jobs, cubins):
        span, phases = traced_phases(profile, cubin, args.beats)
        rows.append({"profile": str(directory), "variant": name, "span_us": span, "phases": phases})
    print("phase: span / body p50 / body max (us), per variant")
    for directory in map(str, args.profiles):
        mine = [r for r in rows if r["profile"] == directory]
        print(f"{directory}: beat span " + "  ".join(f"{r['variant']} {r['span_us']:.0f}" for r in mine))
        base = mine[0]["phases"]
        for phase in sorted(base, key=lambda p: -base[p][0])[:8]:
            cells = [f"{r['variant']:>9} " + "/".join(f"{x:.1f}" for x in r["phases"].get(phase, [0, 0, 0]))
                     for r in mine]
            print(f"  {phase:<22}" + " | ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
