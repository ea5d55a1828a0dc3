"""The profile report: tasks, phases, arena bytes, FLOPs and bytes per phase, and the physical floor.

The floor (ARCHITECTURE.md): each phase ideally takes max(FLOPs / peak fp32 rate, bytes / HBM bandwidth);
the beat floor is the larger of the summed compute time, the summed memory time and the dependency chain
(counted here as if the phases formed one chain: the sum of per-phase ideal times). Beside it: wpk-schedule's
modeled beat time, critical path and worker load (profile.json ``schedule``), and the wait counts.

Activations (``activation``): the arena's peak beside the max-live lower bound at wpk-arena's granularity
and, on request (``compare_relax``, `wavec report --compare-relax`: importing apache-tvm takes about a
second), beside TVM Relax's StaticPlanBlockMemory on the same phases and shapes
(wavec.analysis.relax_memplan).
"""

from __future__ import annotations

import json
import math

import numpy as np

from wavec.analysis.cost import phase_cost
from wavec.errors import WavecError
from wavec.profile import Profile


def _hw(name: str) -> dict | None:
    try:
        from wavec.hw import load_hw

        return load_hw(name)
    except Exception:  # the report still prints without a readable target file
        return None


def wait_counts(profile: Profile) -> dict:
    """``waits``: wait slots used by all tasks; ``grid_waits``: those on a counter that every task of a
    phase of more than one session group signals (a whole-phase, grid-wide wait). Column-wise: duplex:11b
    has 791,614 records."""
    rec = profile.payloads
    n = len(rec)
    phase_of = np.full(n, -1, np.int64)
    phases = profile.meta.get("phases") or []
    sizes = np.array([int(p["tasks"]) for p in phases], np.int64)
    if sizes.sum() == n:  # task ids follow program order, phase by phase
        phase_of[np.argsort(rec["task"], kind="stable")] = np.repeat(np.arange(len(phases)), sizes)
    # Each phase's distinct session ranges (its groups).
    known = phase_of >= 0
    tiles = np.unique(np.stack([phase_of[known], rec["session_begin"][known], rec["session_end"][known]], 1), axis=0)
    groups = np.bincount(tiles[:, 0], minlength=len(phases))
    # Each counter's signallers (through either field): how many, and the phases they lie in.
    rows = np.concatenate([np.arange(n), np.flatnonzero(rec["signal_phase"])])
    counters = np.concatenate([rec["signal"], rec["signal_phase"][rec["signal_phase"] != 0]]).astype(np.int64)
    rows, counters = rows[counters != 0], counters[counters != 0]
    order = np.argsort(counters, kind="stable")
    counters, phase = counters[order], phase_of[rows[order]]
    ids, first, count = np.unique(counters, return_index=True, return_counts=True)
    whole = np.zeros(0, np.int64)
    if len(ids):
        low, high = np.minimum.reduceat(phase, first), np.maximum.reduceat(phase, first)
        one = (low == high) & (low >= 0)  # every signaller in one phase
        p = low[one]
        whole = ids[one][(count[one] == sizes[p]) & (groups[p] > 1)]
    used = np.arange(rec["wait_counter"].shape[1])[None, :] < rec["n_waits"][:, None].astype(np.int64)
    waited = rec["wait_counter"][used].astype(np.int64)
    return {"waits": int(used.sum()), "grid_waits": int(np.isin(waited, whole).sum())}


def ewise_bodies_report(profile: Profile) -> dict:
    """How many EWISE tasks run a generated (TVM) CUDA body and how many the kernel's bytecode interpreter;
    ``kept_bodies``: how many of the bodies store only where a select's condition holds (a state's reset, a
    ring cache written in place; profile.json ``keep``); ``note`` says why none is generated when EWISE tasks
    exist but no body does."""
    from wavec.opcodes import Opcode, unpack_params

    ewise = profile.payloads[profile.payloads["opcode"] == int(Opcode.EWISE)]
    blocks = {int(at) for at in ewise["params"]}
    generated = {at for at in blocks if unpack_params(profile.params, at).body >= 0}
    table = profile.meta.get("ewise_bodies") or []
    bodies = len(table)
    return {
        "bodies": bodies,
        "kept_bodies": sum(int(b.get("keep", -1)) >= 0 for b in table),
        "tasks": int(len(ewise)),
        "generated_tasks": int(sum(int(at) in generated for at in ewise["params"])),
        "note": ("apache-tvm was not importable at compile time; install it (pip install -e '.[tvm]') for TVM "
                 "TensorIR bodies") if len(ewise) and not bodies else None,
    }


def activation_report(meta: dict, compare_relax: bool = False) -> dict:
    """Activation arena peak, its max-live lower bound, and (``compare_relax``) TVM Relax's static plan
    of the same program; ``relax_note`` says why there is no Relax number."""
    peak, bound = int(meta["arena_bytes"]["act"]), meta.get("act_lower_bound")
    out = {
        "peak_bytes": peak,
        "lower_bound_bytes": bound,
        "peak_over_lower_bound": round(peak / bound, 4) if bound else None,
        "relax_static_plan_bytes": None,
        "peak_over_relax": None,
        "relax_note": "not computed (wavec report --compare-relax)",
    }
    if not compare_relax:
        return out
    from wavec.analysis.relax_memplan import NOT_INSTALLED, relax_plan_bytes, tvm_available

    phases = meta.get("phases") or []
    if not tvm_available():
        out["relax_note"] = NOT_INSTALLED
    elif not all("reads" in p and "writes" in p for p in phases):
        out["relax_note"] = "n/a (the profile lists no phase reads and writes; recompile it)"
    else:
        relax = relax_plan_bytes(phases, meta["tensors"], int(meta["sessions"]))
        out.update(relax_static_plan_bytes=relax, relax_note=None,
                   peak_over_relax=round(peak / relax, 4) if relax else None)
    return out


def build_report(profile: Profile, compare_relax: bool = False) -> dict:
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
        **wait_counts(profile),
        "arena_bytes": meta["arena_bytes"],
        "act_lower_bound_bytes": meta.get("act_lower_bound"),
        "activation": activation_report(meta, compare_relax),
        "ewise_bodies": ewise_bodies_report(profile),
        "flops_per_beat": sum(p["flops"] for p in phases),
        "bytes_per_beat": sum(p["bytes"] for p in phases),
        "fusion_saved_bytes_per_beat": meta.get("fusion_saved_bytes_per_session", 0) * meta["sessions"],
    }
    if meta.get("schedule"):
        report["schedule"] = dict(meta["schedule"])  # wpk-schedule's model: beat, critical path, load (us)
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


def activation_line(act: dict) -> str:
    bound = act["lower_bound_bytes"]
    line = f"activations: peak {act['peak_bytes']:,} B, max-live lower bound " + (
        f"{bound:,} B ({act['peak_over_lower_bound']:.2f}x)" if bound else "n/a")
    if act["relax_static_plan_bytes"] is None:
        return line + f"; TVM Relax StaticPlanBlockMemory {act['relax_note']}"
    return line + (f"; TVM Relax StaticPlanBlockMemory {act['relax_static_plan_bytes']:,} B "
                   f"(ours {act['peak_over_relax']:.2f}x)")


def _ewise_line(ew: dict | None) -> str:
    if not ew:
        return "EWISE bodies: n/a"
    if ew["note"]:
        return f"EWISE bodies: none generated ({ew['note']}); the bytecode interpreter runs all {ew['tasks']} EWISE tasks"
    kept = ew.get("kept_bodies", 0)
    kept_text = f", {kept} of them storing only where a select's condition holds (resets, ring writes in place)" if kept else ""
    return (f"EWISE bodies: {ew['bodies']} generated by TVM TensorIR{kept_text}, run by {ew['generated_tasks']} of "
            f"{ew['tasks']} EWISE tasks (the others: the bytecode interpreter)")


def _measure(value, what: str, where: str) -> float:
    """``value`` as a finite, non-negative float; a WavecError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WavecError(f"{where}: {what} is {json.dumps(value)[:40]}; it must be a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise WavecError(f"{where}: {what} is {value!r:.40}; it must be a finite number >= 0")
    return number


def with_timeline(report: dict, timeline, where: str) -> dict:
    """``report`` with what the GPU measured beside what the compiler modeled: ``timeline`` is the JSON that
    `wavec run --backend cuda --timeline` writes (``beats``: per traced beat span_us, busy_us, wait_us,
    wait_share, workers; ``last_beat_phases``: per phase its name, tasks, span_us, wait_us and, from timelines
    of the tenth run on, body_p50_us, its median task body). Adds ``measured`` (the beats' p50s, and ``by_op``:
    per op, its phases' spans summed and how many, most first) and, per phase, ``measured_span_us``,
    ``measured_wait_us`` and ``measured_body_p50_us`` (None where the timeline has none). Raises
    WavecError naming ``where`` when the file is not such a timeline, or was recorded from another program
    (other phases, task counts or workers)."""
    if not isinstance(timeline, dict) or not isinstance(timeline.get("beats"), list) \
            or not isinstance(timeline.get("last_beat_phases"), list):
        raise WavecError(f"{where}: not a timeline written by `wavec run --timeline` "
                         "(an object with lists `beats` and `last_beat_phases`)")
    beats, rows = timeline["beats"], timeline["last_beat_phases"]
    if not beats:
        raise WavecError(f"{where}: the timeline has no traced beats")
    columns = {}
    for key in ("span_us", "wait_us", "wait_share"):
        values = []
        for b, beat in enumerate(beats):
            if not isinstance(beat, dict):
                raise WavecError(f"{where}: beat {b} is not an object")
            values.append(_measure(beat.get(key), f"beat {b}'s {key}", where))
            if beat.get("workers", report["workers"]) != report["workers"]:
                raise WavecError(f"{where}: beat {b} ran {beat.get('workers')!r} workers; this profile has "
                                 f"{report['workers']}: record the timeline from this profile")
        columns[key] = values
    if any(share > 1 for share in columns["wait_share"]):
        raise WavecError(f"{where}: a beat's wait_share is over 1; it is a share of the workers' time")
    tasks = {p["name"]: p["tasks"] for p in report["phases"]}
    measured_phases = {}
    for r, row in enumerate(rows):
        name = row.get("phase") if isinstance(row, dict) else None
        if not isinstance(name, str):
            raise WavecError(f"{where}: phase row {r} has no phase name")
        if name in measured_phases:
            raise WavecError(f"{where}: phase {name!r} is listed twice")
        if name in tasks and row.get("tasks", tasks[name]) != tasks[name]:
            raise WavecError(f"{where}: phase {name!r} ran {row.get('tasks')!r} tasks; this profile's has "
                             f"{tasks[name]}: record the timeline from this profile")
        body = row.get("body_p50_us")
        measured_phases[name] = (_measure(row.get("span_us"), f"phase {name!r}'s span_us", where),
                                 _measure(row.get("wait_us"), f"phase {name!r}'s wait_us", where),
                                 None if body is None else _measure(body, f"phase {name!r}'s body_p50_us", where))
    missing, unknown = sorted(set(tasks) - set(measured_phases)), sorted(set(measured_phases) - set(tasks))
    if missing or unknown:
        raise WavecError(f"{where}: its phases are not this profile's (missing {missing[:3]}, unknown {unknown[:3]}); "
                         "record the timeline from this profile")
    phases = [{**p, "measured_span_us": measured_phases[p["name"]][0], "measured_wait_us": measured_phases[p["name"]][1],
               "measured_body_p50_us": measured_phases[p["name"]][2]} for p in report["phases"]]
    by_op: dict[str, dict] = {}
    for p in phases:
        entry = by_op.setdefault(p["op"], {"span_us": 0.0, "phases": 0})
        entry["span_us"] += p["measured_span_us"]
        entry["phases"] += 1
    measured = {"beats": len(beats), "span_us_p50": round(float(np.median(columns["span_us"])), 2),
                "wait_us_p50": round(float(np.median(columns["wait_us"])), 2),
                "wait_share_p50": round(float(np.median(columns["wait_share"])), 4),
                "by_op": {op: {"span_us": round(e["span_us"], 2), "phases": e["phases"]}
                          for op, e in sorted(by_op.items(), key=lambda item: -item[1]["span_us"])}}
    return {**report, "phases": phases, "measured": measured}


def heaviest_phases(phases: list[dict], top: int) -> list[dict]:
    """The ``top`` phases moving the most bytes (then FLOPs), heaviest first."""
    return sorted(phases, key=lambda p: (-p["bytes"], -p["flops"]))[:top]


def format_report(report: dict, top: int | None = None) -> str:
    """The report as text; ``top``: list only that many phases, those moving the most bytes (all: None)."""
    lines = [
        f"model {report['model']}: {report['sessions']} sessions, {report['workers']} workers, "
        f"{report['tasks']} tasks in {len(report['phases'])} phases ({report['waits']} waits, "
        f"{report['grid_waits']} of them on a whole phase)",
        "arena bytes: " + ", ".join(f"{k} {v:,}" for k, v in report["arena_bytes"].items()),
        activation_line(report["activation"]),
        _ewise_line(report.get("ewise_bodies")),
        f"per beat: {report['flops_per_beat']:,} FLOPs, {report['bytes_per_beat']:,} bytes "
        f"(fusion saved {report.get('fusion_saved_bytes_per_beat', 0):,} bytes)",
    ]
    if "floor_us" in report:
        f = report["floor_us"]
        lines.append(
            f"physical floor: {f['beat']:.2f} us (compute {f['compute']:.2f}, memory {f['memory']:.2f}, chain {f['chain']:.2f})"
        )
    if report.get("schedule"):
        sc = report["schedule"]
        load = sc.get("worker_load_us") or [0.0, 0.0, 0.0]
        lines.append(
            f"modeled beat: {sc.get('beat_us', 0.0):.2f} us (critical path {sc.get('critical_path_us', 0.0):.2f} us "
            f"without handoffs; worker load min/mean/max {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f} us)"
        )
        if "measured_us" in sc:
            m = sc["measured_us"]
            barrier = " (at phase granularity: the placement is the model's)" if sc.get("granularity") == "phase" else ""
            lines.append(f"charged costs: the measured bodies of {len(m['phases'])} phases (median a task, scaled "
                         f"by tile size), plus {m['task_gap_us']:g} us between a worker's tasks; a handoff "
                         f"{sc.get('handoff_us', 0.0):g} us (wpk-schedule task-costs){barrier}")
        elif "task_us" in sc:
            costs = ", ".join(f"{op} {us:g}" for op, us in sc["task_us"].items())
            lines.append(f"modeled costs: a task {costs} us, plus its FLOPs and bytes at the target's rates; a "
                         f"handoff {sc.get('handoff_us', 0.0):g} us (wpk-schedule; the target's measured.task_us, "
                         f"0.3 us where it has none)")
        if "granularity" in sc:
            why = lambda key: f" ({sc[key]})" if sc.get(key) else ""  # noqa: E731
            arena = sc.get("arena_granularity", "tile")
            recycled = "not recycled" if arena == "none" else f"recycled at {arena} granularity"
            lines.append(f"dependencies at {sc['granularity']} granularity{why('granularity_why')}, activations "
                         f"{recycled}{why('arena_granularity_why')}")
        lines.append(f"wpk-verify: {sc.get('verified', 'not run')}")
    measured = report.get("measured")
    if measured:
        lines.append(f"measured on the GPU ({measured['beats']} traced beats): beat span p50 {measured['span_us_p50']:.2f} us; "
                     f"workers waited p50 {measured['wait_us_p50']:.2f} us a beat, summed over tasks "
                     f"({100 * measured['wait_share_p50']:.1f}% of the workers' time)")
        lines.append("measured by op, its phases' spans summed: " + ", ".join(
            f"{op} {e['span_us']:,.1f} us ({e['phases']} phases)" for op, e in measured["by_op"].items()))
    phases = report["phases"]
    if top is not None:
        phases = heaviest_phases(phases, top)
        lines.append(f"the {len(phases)} of {len(report['phases'])} phases moving the most bytes:")
    name_width = max([28, *(len(p["name"]) + 2 for p in phases)])
    extra = f"{'span us':>12}{'body p50 us':>13}{'waited us':>12}" if measured else ""
    lines.append(f"{'phase':<{name_width}}{'op':<20}{'tasks':>6}{'FLOPs':>14}{'bytes':>14}{extra}")
    for p in phases:
        row = f"{p['name']:<{name_width}}{p['op']:<20}{p['tasks']:>6}{p['flops']:>14,}{p['bytes']:>14,}"
        if measured:
            body = p["measured_body_p50_us"]
            row += f"{p['measured_span_us']:>12.1f}{'-' if body is None else f'{body:.1f}':>13}{p['measured_wait_us']:>12.1f}"
        lines.append(row)
    return "\n".join(lines)
