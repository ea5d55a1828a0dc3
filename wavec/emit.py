"""Profile emission: the final wpk module (after wpk-payload) to a `Profile` (wavec/profile.py).

The payload table is the tasks' `payload` words sorted by (worker, order); `worker_tasks` gives each
worker's row range; ``schedule`` carries wpk-schedule's modeled beat time, critical path, worker load and
wait counts. The weights arena image is assembled from the blob of named weights.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, ModuleOp

from wavec.dialects import wave, wpk
from wavec.errors import WavecError
from wavec.analysis.relax_memplan import phase_tensors
from wavec.passes.wpk_arena import buffers_of
from wavec.passes.wpk_payload import epilogue_body_table, ewise_body_table, params_table, payload_records, tasks_of
from wavec.passes.wpk_schedule import phases_of
from wavec.profile import FORMAT, Profile, param_extent
from wavec.weights import GeneratedWeight, stored_position, stored_size


def _attr_value(buf: wpk.BufferOp, key: str):
    attr = buf.attributes.get(key)
    if attr is None:
        return None
    if hasattr(attr, "get_values"):
        return [int(v) for v in attr.get_values()]
    if isinstance(attr, ArrayAttr):
        return [a.data for a in attr.data]
    if hasattr(attr, "value"):
        return attr.value.data
    return attr.data


def _offset(buf: wpk.BufferOp) -> int:
    return buf.offset.value.data  # type: ignore[union-attr]


def _binding(buf: wpk.BufferOp) -> dict:
    return {
        "name": _attr_value(buf, "model_name"),
        "shape": _attr_value(buf, "shape"),
        "offset": _offset(buf),
        "session_stride": buf.stride,
        "cohort_axis": _attr_value(buf, "cohort_axis"),
    }


def _states(buffers: dict[str, wpk.BufferOp]) -> list[dict]:
    states = []
    for buf in buffers.values():
        if buf.role.data == "state":
            entry = _binding(buf)
            entry["output"] = _attr_value(buf, "output") or None
            entry["init_offset"] = _offset(buffers[_attr_value(buf, "init")])
            states.append(entry)
    return states


def _tensor(name: str, buf: wpk.BufferOp) -> dict:
    """profile.json's ``tensors`` entry of a placed buffer; ``part_bytes``: [begin, end) byte ranges of a session's
    slot that other phases write than the rest (wave-to-wpk `_Lowering.mark_part`)."""
    entry = {"name": name, "arena": buf.arena.data, "offset": _offset(buf), "bytes": buf.nbytes,
             "session_stride": buf.stride}
    parts = _attr_value(buf, "part_bytes")
    if parts:
        entry["part_bytes"] = [parts[i : i + 2] for i in range(0, len(parts), 2)]
    return entry


def schedule_summary(module: ModuleOp) -> dict:
    """wpk-schedule's modeled facts (module attributes) for profile.json's ``schedule``: beat time and
    critical path (us), the task costs per opcode and the handoff it charged (us), the measured bodies it
    charged instead where it was given task costs (``measured_us``), per-worker load [min, mean, max] (us), wait slots used and full-phase waits; the
    granularities wpk-schedule and wpk-arena ran at, and wpk-verify's outcome."""
    attrs = module.attributes
    out: dict = {}
    for key, name in (("wpk.beat_us", "beat_us"), ("wpk.critical_path_us", "critical_path_us"),
                      ("wpk.handoff_us", "handoff_us")):
        if key in attrs:
            out[name] = float(attrs[key].value.data)
    if "wpk.task_us" in attrs:
        out["task_us"] = {k: float(v.value.data) for k, v in attrs["wpk.task_us"].data.items()}
    if "wpk.measured_us" in attrs:
        measured = attrs["wpk.measured_us"].data
        out["measured_us"] = {"task_gap_us": float(measured["task_gap_us"].value.data),
                              "phases": {k: float(v.value.data) for k, v in measured["phases"].data.items()}}
    if "wpk.worker_load_us" in attrs:
        out["worker_load_us"] = [float(a.value.data) for a in attrs["wpk.worker_load_us"].data]
    for key, name in (("wpk.waits", "waits"), ("wpk.phase_waits", "phase_waits")):
        if key in attrs:
            out[name] = int(attrs[key].value.data)
    for key, name in (("wpk.granularity", "granularity"), ("wpk.granularity_why", "granularity_why"),
                      ("wpk.arena_granularity", "arena_granularity"),
                      ("wpk.arena_granularity_why", "arena_granularity_why"), ("wpk.verified", "verified")):
        if key in attrs:
            out[name] = attrs[key].data
    return out


# The module attributes a complete program carries (wpk-arena, wpk-schedule), which emission reads.
PROGRAM_ATTRIBUTES = ("wpk.workers", "wpk.counters", "wpk.arena_bytes", "wpk.act_lower_bound")


def ordered_payloads(module: ModuleOp, workers: int) -> tuple[np.ndarray, list[list[int]]]:
    """Payload records grouped by worker in execution order, and each worker's [begin, end) rows."""
    tasks = tasks_of(module)
    if any(t.payload is None for t in tasks):
        raise WavecError("profile emission: some tasks have no payload; run wpk-payload first")
    records = payload_records(tasks)
    order = np.concatenate([t.column("order") for t in tasks]) if tasks else np.zeros(0, np.int64)  # not encoded
    records = records[np.lexsort((order, records["worker"]))]  # a copy: the profile owns it
    counts = np.bincount(records["worker"], minlength=workers)[:workers]
    ends = np.cumsum(counts)
    rows = [[int(e - c), int(e)] for c, e in zip(counts, ends)]
    return records, rows


def _blob_value(blob: dict, key: str, parts: list[str] | None, axis: int | None):
    """The blob's value of weight ``key``, or for stacked weights (wave-to-wpk `is_weight_concat`) its
    ``parts`` concatenated along ``axis`` (a generated part made here: such a weight is stored). Raises
    WavecError for a name the blob lacks."""
    for name in parts or [key]:
        if name not in blob:
            raise WavecError(f"profile emission: no data for weight {name!r}; the frontend's weight blob lacks it")
    if not parts:
        return blob[key]
    arrays = [v.materialize() if isinstance(v, GeneratedWeight) else np.asarray(v, np.float32)
              for v in (blob[name] for name in parts)]
    return np.concatenate(arrays, axis)


def stored_weights(
    buffers: dict[str, wpk.BufferOp], arena_bytes: int, blob: dict | None
) -> tuple[np.ndarray, list[dict]]:
    """weights.bin's bytes (uint8: the weights arena less its generated weights, wavec.weights.stored_ranges)
    and the ``generated_weights`` entries of profile.json. A blob value that is a
    wavec.weights.GeneratedWeight is only recorded: no byte of it is made, so compiling an 11-billion
    parameter model needs no memory for its weights."""
    weights = [b for b in buffers.values() if b.arena.data == "weights"]
    if blob is None:  # a read-only view of one zero byte: verification never reads weight values
        return np.broadcast_to(np.zeros(1, np.uint8), (arena_bytes,)), []
    values = {}
    for buf in weights:
        key = _attr_value(buf, "blob")
        value = values[buf.buffer_name] = _blob_value(blob, key, _attr_value(buf, "parts"), _attr_value(buf, "axis"))
        nbytes = value.nbytes if isinstance(value, GeneratedWeight) else np.asarray(value).size * 4
        if nbytes != buf.nbytes:
            raise WavecError(f"profile emission: weight {key!r} has {nbytes} bytes, its buffer {buf.nbytes}")
    generated = [{"name": _attr_value(b, "blob"), "offset": _offset(b), **values[b.buffer_name].spec()}
                 for b in weights if isinstance(values[b.buffer_name], GeneratedWeight)]
    stored = np.zeros(stored_size(arena_bytes, generated), np.uint8)
    for buf in weights:
        value = values[buf.buffer_name]
        if isinstance(value, GeneratedWeight):
            continue
        data = np.ascontiguousarray(value, np.float32).view(np.uint8).ravel()
        at = stored_position(arena_bytes, generated, _offset(buf))
        stored[at : at + len(data)] = data
    return stored, generated


def profile_from_module(
    module: ModuleOp,
    weights: dict[str, np.ndarray] | None = None,
    *,
    model: str = "model",
    hw: str = "h200",
    block_threads: int | None = None,
    l2_bytes: int | None = None,
    bindings: dict | None = None,
    kernel_source: str = "",
) -> Profile:
    """Builds the Profile of a fully lowered module. ``weights=None`` leaves the weights image zeroed, in
    no memory (enough for verification, which never reads weight values). ``block_threads``: the
    persistent block's size (the target's threads_per_block; None: the kernel generator's default);
    ``l2_bytes``: the target's L2 (None: unknown; the kernel then never prefetches weights)."""
    buffers = buffers_of(module)
    workers = module.attributes["wpk.workers"].value.data
    arena_bytes = {k: v.value.data for k, v in module.attributes["wpk.arena_bytes"].data.items()}
    payloads, rows = ordered_payloads(module, workers)
    params, where = params_table(tasks_of(module))
    by_role = lambda role: [b for b in buffers.values() if b.role.data == role]  # noqa: E731
    reset = by_role("reset")
    meta = {
        "format": FORMAT,
        "model": model,
        "sessions": wave.cohort_size(module),
        "workers": workers,
        "hw": hw,
        **({"block_threads": int(block_threads)} if block_threads else {}),
        **({"l2_bytes": int(l2_bytes)} if l2_bytes else {}),
        **param_extent(len(params), where.values()),
        "n_counters": module.attributes["wpk.counters"].value.data,
        "arena_bytes": arena_bytes,
        "act_lower_bound": module.attributes["wpk.act_lower_bound"].value.data,
        "worker_tasks": rows,
        "inputs": [_binding(b) for b in by_role("input")],
        "reset": {"offset": _offset(reset[0]), "session_stride": reset[0].stride} if reset else None,
        "outputs": [_binding(b) for b in by_role("output")],
        "states": _states(buffers),
        "tensors": [_tensor(n, b) for n, b in buffers.items() if b.offset is not None],
        "phases": [
            {"name": p.sym_name.data, "op": p.op.data, "tasks": p.task_count, **io}  # io: buffers read, written
            for p, io in zip(phases_of(module), phase_tensors(phases_of(module)))
        ],
        "bindings": bindings or {},
        "ewise_bodies": ewise_body_table(module),  # generated CUDA bodies of EWISE expressions (wpk-payload)
        "epilogue_bodies": epilogue_body_table(module),  # generated CUDA epilogues of MATMUL / CONV (wpk-payload)
    }
    schedule = schedule_summary(module)
    if schedule:
        meta["schedule"] = schedule
    fused = module.attributes.get("wave.fused_bytes_per_session")
    if fused is not None:
        meta["fusion_saved_bytes_per_session"] = fused.value.data
    stored, meta["generated_weights"] = stored_weights(buffers, arena_bytes["weights"], weights)
    return Profile(meta, payloads, params, stored, kernel_source)
