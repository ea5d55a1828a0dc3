"""The profile report: tasks, phases, arena bytes, FLOPs and bytes per phase, and the physical floor.

The floor (ARCHITECTURE.md): each phase ideally takes max(FLOPs / peak fp32 rate, bytes / HBM bandwidth);
the beat floor is the larger of the summed compute time, the summed memory time and the dependency chain
(phases here form one chain, so the chain is the sum of per-phase ideal times).
"""

from __future__ import annotations

import numpy as np

from wavec.analysis.cost import phase_cost
from wavec.profile import Profile


def _hw(name: str) -> dict | None:
    try:
        from wavec.hw import load_hw

        return load_hw(name)
    except Exception:  # the report still prints without a readable target file
        return None


def build_report(profile: Profile) -> dict:
    meta = profile.meta
    by_task = np.argsort(profile.payloads["task"], kind="stable")
    records = profile.payloads[by_task]
    phases, start = [], 0
    for phase in meta["phases"]:
        chunk = records[start : start + phase["tasks"]]
        start += phase["tasks"]
        flops, nbytes = phase_cost(chunk, profile.params)
        phases.append({**phase, "flops": flops, "bytes": nbytes})
    report = {
        "model": meta["model"],
        "sessions": meta["sessions"],
        "workers": meta["workers"],
        "tasks": int(len(profile.payloads)),
        "phases": phases,
        "grid_waits": sum(1 for p in phases[1:]),
        "arena_bytes": meta["arena_bytes"],
        "act_lower_bound_bytes": meta.get("act_lower_bound"),
        "flops_per_beat": sum(p["flops"] for p in phases),
        "bytes_per_beat": sum(p["bytes"] for p in phases),
    }
    hw = _hw(meta["hw"])
    if hw:
        peak, bw = float(hw["peak_flops_per_s"]["fp32"]), float(hw["hbm_bandwidth_bytes_per_s"])
        ideal = [max(p["flops"] / peak, p["bytes"] / bw) * 1e6 for p in phases]
        report["floor_us"] = {
            "compute": report["flops_per_beat"] / peak * 1e6,
            "memory": report["bytes_per_beat"] / bw * 1e6,
            "chain": sum(ideal),
            "beat": max(report["flops_per_beat"] / peak * 1e6, report["bytes_per_beat"] / bw * 1e6, sum(ideal)),
        }
    return report


def format_report(report: dict) -> str:
    lines = [
        f"model {report['model']}: {report['sessions']} sessions, {report['workers']} workers, "
        f"{report['tasks']} tasks in {len(report['phases'])} phases ({report['grid_waits']} grid-wide waits)",
        "arena bytes: " + ", ".join(f"{k} {v:,}" for k, v in report["arena_bytes"].items())
        + f" (activation lower bound {report['act_lower_bound_bytes']:,})",
        f"per beat: {report['flops_per_beat']:,} FLOPs, {report['bytes_per_beat']:,} bytes",
    ]
    if "floor_us" in report:
        f = report["floor_us"]
        lines.append(
            f"physical floor: {f['beat']:.2f} us (compute {f['compute']:.2f}, memory {f['memory']:.2f}, chain {f['chain']:.2f})"
        )
    lines.append(f"{'phase':<28}{'op':<20}{'tasks':>6}{'FLOPs':>14}{'bytes':>14}")
    for p in report["phases"]:
        lines.append(f"{p['name']:<28}{p['op']:<20}{p['tasks']:>6}{p['flops']:>14,}{p['bytes']:>14,}")
    return "\n".join(lines)
