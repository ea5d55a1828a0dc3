"""A baseline for the activation arena: TVM Relax's StaticPlanBlockMemory on the same program.

The program is the one wpk-arena places: its phases in program order, each reading and writing named
buffers (profile.json ``phases[i].reads`` / ``writes``, from `phase_tensors`), with the per-cohort
float32 shapes of profile.json ``tensors``. `relax_plan_bytes` rebuilds it as a Relax function: one
``R.call_dps_packed`` per phase (inputs: what it reads; outputs: what it writes), activation buffers as
the intermediates, weights, state, reset and input buffers as parameters, and every state or output
value returned, so that Relax plans exactly the activations (it never plans a function's outputs). Then
ToNonDataflow, RemovePurityChecking, CallTIRRewrite and StaticPlanBlockMemory (notes/tvm_probe.md, 3a),
and the planned bytes are the sum of the ``R.memory.alloc_storage`` sizes: whole-tensor reuse of storage
tokens by size, with liveness in program order.

apache-tvm is optional (the ``tvm`` extra): without it `relax_plan_bytes` returns None. Nothing here
serializes TVM IR (that segfaults in apache-tvm 0.27).
"""

from __future__ import annotations

from wavec.opcodes import ELEM_BYTES

NOT_INSTALLED = "n/a (apache-tvm not installed)"


def phase_tensors(phases) -> list[dict]:
    """Per ``wpk.phase``: the sorted names of the buffers its tasks read and write."""
    out = []
    for phase in phases:
        reads = sorted({name for task in phase.tasks for name in task.input_names})
        writes = sorted({task.output.data for task in phase.tasks})
        out.append({"reads": reads, "writes": writes})
    return out


def tvm_available() -> bool:
    try:
        import tvm  # noqa: F401
        from tvm import relax  # noqa: F401
    except Exception:  # noqa: BLE001  (absent, or a broken install: no baseline either way)
        return False
    return True


def _shape(tensor: dict, sessions: int) -> tuple[int, ...]:
    elems = max(int(tensor["bytes"]) // ELEM_BYTES, 1)
    return (sessions, elems) if tensor.get("session_stride") else (elems,)


def relax_plan_bytes(phases: list[dict], tensors: list[dict], sessions: int) -> int | None:
    """Bytes of the storage tokens StaticPlanBlockMemory gives the activations of this program (None
    without apache-tvm). ``phases``: ``{"reads": [...], "writes": [...]}`` in program order; ``tensors``:
    ``{"name", "arena", "bytes", "session_stride"}`` (one session's bytes; a stride marks a per-session
    buffer, of shape [sessions, bytes / 4])."""
    if not tvm_available():
        return None
    import tvm
    from tvm import relax

    info = {t["name"]: t for t in tensors}
    ty = lambda name: relax.TensorType(_shape(info[name], sessions), "float32")  # noqa: E731
    is_act = lambda name: info[name]["arena"] == "act"  # noqa: E731
    params = {}
    for ph in phases:
        for name in ph["reads"]:
            if not is_act(name) and name not in params:
                params[name] = relax.Var(name.replace(".", "_"), ty(name))
    bb = relax.BlockBuilder()
    returned = []
    with bb.function("main", list(params.values())):
        with bb.dataflow():
            value = dict(params)
            for ph in phases:
                args = [value[name] for name in ph["reads"] if name in value]
                outs = ph["writes"]
                if not outs:  # a phase without tasks
                    continue
                call = relax.call_dps_packed("wavec.phase", args, [ty(n) for n in outs] if len(outs) > 1 else ty(outs[0]))
                result = bb.emit(call)
                for k, name in enumerate(outs):
                    v = result if len(outs) == 1 else bb.emit(relax.TupleGetItem(result, k))
                    value[name] = v
                    if not is_act(name):
                        returned.append(v)
            if not returned:  # a function returns something; an empty tuple plans the same
                returned = [value[name] for name in value if name in params][:1]
            gv = bb.emit_output(relax.Tuple(returned))
        bb.emit_func_output(gv)
    mod = tvm.transform.Sequential([
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        relax.transform.StaticPlanBlockMemory(),
    ])(bb.get())
    total = 0
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = getattr(binding.value, "op", None)
            if isinstance(op, tvm.ir.Op) and op.name == "relax.memory.alloc_storage":
                total += int(binding.value.args[0].values[0])
    return total
