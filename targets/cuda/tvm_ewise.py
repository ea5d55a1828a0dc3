"""Generated CUDA tile bodies for EWISE expressions, from TVM TensorIR (apache-tvm 0.27, optional).

For each distinct (expression, rank, n_inputs, keep) of a profile's EWISE tasks (profile.json ``ewise_bodies``,
numbered by wpk-payload) this module builds one TensorIR PrimFunc over one task tile and lets TVM emit its
CUDA for sm_90; a text pass turns the kernel into a ``__device__`` function of the persistent kernel. A body
that keeps input k (``select(c, a, %k)``, input k being the output) stores only where c holds
(`ewise_primfunc`): where c holds one value a session (a reset's flag) or a row (a ring write's slot) it is
evaluated once a session or a row, not at every element.

The tile (the semantics of wavec.opcodes.EwiseParams, for the sessions of one payload):

    for w in [0, sessions * (end - begin)):          # a block-stride loop: only threadIdx.x is bound
        s, e = w / (end - begin), begin + w % (end - begin)
        idx = unravel(e, (dim0, ..., dim{r-1}))       # row-major over one session's iteration space
        out[s * out_sstride + sum_d idx[d] * out_stride{d}] = expr(in{k}[s * in{k}_sstride + sum_d idx[d] * in{k}_stride{d}])

Every buffer is a flat float32 view from its operand's first session of the tile, indexed through symbolic
strides in elements (0 broadcasts, negative reverses, ``*_sstride`` steps between sessions); shapes and
the element range are symbolic too, so one body serves every tile and every shape of its rank. With
``sessions = 1`` it is exactly one session's flat element range ``[begin, end)``.

Pitfalls this module handles (design/notes/tvm_probe.md): TVM orders a kernel's parameters by its own
rules (buffer names, alphabetically), so the call's argument order is read from the lowered device
PrimFunc; ``__launch_bounds__`` is only legal on a ``__global__`` function, so it is dropped; the buffers
are not ``tirx.noalias``: a ``__restrict__`` input could be loaded through the non-coherent cache, which
does not see what other blocks of the persistent kernel wrote earlier in the beat; unused CSE temporaries
are dropped (nvcc warns about them); ``CUDART_*`` constants become bit patterns (no math_constants.h).

TVM is imported lazily and only here; `available()` asks whether it is installed without importing it.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass

from wavec.errors import WavecError
from wavec.opcodes import BINARY, TERNARY, UNARY, Expr, kept_input, parse_expr

DEVICE_ARCH = "sm_90"
FUNC_NAME = "ewise_tile"  # the PrimFunc's global symbol; TVM names the kernel FUNC_NAME + "_kernel"
# Elements a thread loads before it stores any, in a tile of at least EWISE_BATCH x threads elements: one
# at a time, an SM keeps 512 threads x (inputs) x 4 bytes in flight, 8 KB for two inputs, a quarter of the
# ~32 KB that 4.2 TB/s over 132 SMs needs at ~1 us of latency (Little's law; duplex:1b's large EWISE
# phases moved 0.4-0.5 TB/s so, bench/RESULTS.md ninth run).
EWISE_BATCH = 4
# Threads that walk one row of a kept-input body whose condition holds one value a row (`flagged_rows`): a
# warp, so the condition's loads are one broadcast and its branch is uniform.
ROW_LANES = 32


def available() -> bool:
    """Whether apache-tvm is importable (asked without importing it: a check costs microseconds)."""
    try:
        return importlib.util.find_spec("tvm") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["tvm"] is None (import blocked)
        return False


def _names(expr: Expr) -> set[str]:
    if expr.kind != "call":
        return set()
    return {str(expr.value)}.union(*(_names(a) for a in expr.args))


def supports(expr: Expr) -> bool:
    """Whether this module can generate a body for ``expr``: TVM is installed and every function of the
    expression has a TensorIR form below."""
    return available() and _names(expr) <= set(_TIR_OPS)


# ---- expression -> TensorIR ---------------------------------------------------------------------------
# Each entry builds the TIR value of one wavec.opcodes function from its argument values, with the same
# semantics as the bytecode (the CUDA tables there, and numpy's in the interpreter).


def _tir_ops() -> dict:
    def f(v):
        from tvm.script import tirx as T

        return T.float32(v)

    def T():  # noqa: N802 - the module, imported when a body is built
        from tvm.script import tirx

        return tirx

    def flag(cond):
        return T().Select(cond, f(1.0), f(0.0))

    return {
        "neg": lambda a: a * f(-1.0),
        "abs": lambda a: T().fabs(a),
        "relu": lambda a: T().max(a, f(0.0)),
        "sigmoid": lambda a: T().sigmoid(a),
        "tanh": lambda a: T().tanh(a),
        "exp": lambda a: T().exp(a),
        "log": lambda a: T().log(a),
        "sqrt": lambda a: T().sqrt(a),
        "reciprocal": lambda a: f(1.0) / a,
        "floor": lambda a: T().floor(a),
        "ceil": lambda a: T().ceil(a),
        "sin": lambda a: T().sin(a),
        "cos": lambda a: T().cos(a),
        "softplus": lambda a: T().log1p(T().exp(a)),
        "sign": lambda a: T().Select(a > f(0.0), f(1.0), T().Select(a < f(0.0), f(-1.0), f(0.0))),
        "not": lambda a: flag(a == f(0.0)),
        "round": lambda a: T().nearbyint(a),  # half to even, like np.round and rintf
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "pow": lambda a, b: T().pow(a, b),
        "max": lambda a, b: T().max(a, b),
        "min": lambda a, b: T().min(a, b),
        "eq": lambda a, b: flag(a == b),
        "lt": lambda a, b: flag(a < b),
        "gt": lambda a, b: flag(a > b),
        "le": lambda a, b: flag(a <= b),
        "ge": lambda a, b: flag(a >= b),
        "fmod": lambda a, b: T().fmod(a, b),
        "select": lambda c, a, b: T().Select(c != f(0.0), a, b),
    }


_TIR_OPS = _tir_ops()
assert set(_TIR_OPS) == set(UNARY) | set(BINARY) | set(TERNARY), "a wavec.opcodes function has no TIR form"


def _tir_value(expr: Expr, loads: list):
    from tvm.script import tirx as T

    if expr.kind == "input":
        return loads[int(expr.value)]  # type: ignore[arg-type]
    if expr.kind == "const":
        return T.float32(float(expr.value))  # type: ignore[arg-type]
    return _TIR_OPS[str(expr.value)](*(_tir_value(a, loads) for a in expr.args))


def session_flag_input(expr: Expr, keep: int) -> int | None:
    """j when a kept-input body's condition is input j itself (a reset's flag): where j holds one value a
    session (no stride along an axis longer than 1, checked at run time) the body reads it once a session and
    walks only the flagged sessions' elements. None otherwise."""
    if keep >= 0 and expr.args[0].kind == "input":
        return int(expr.args[0].value)  # type: ignore[arg-type]
    return None


def ewise_primfunc(expr: Expr, rank: int, n_inputs: int, threads: int, bind_threads: bool = True, keep: int = -1):
    """The TensorIR PrimFunc of one EWISE tile of ``expr`` (see the module docstring for its parameters).
    ``bind_threads=False`` keeps the same loop nest with a serial outer loop, for the CPU (llvm) build.
    ``keep >= 0``: ``expr`` is ``select(c, a, %keep)`` and input ``keep`` is the output itself
    (wavec.opcodes.kept_input, wpk-payload): the body stores ``a`` where ``c`` holds and touches nothing
    else, so input ``keep`` is loaded only where ``c`` or ``a`` reads it (a reset or ring write then moves the
    bytes it changes, not the whole state)."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder.tirx import prim_func

    with IRBuilder() as ib:
        with prim_func():
            T.func_name(FUNC_NAME)
            T.func_attr({"global_symbol": FUNC_NAME})  # no tirx.noalias: see the module docstring
            handles = [T.arg(f"in{k}", T.handle()) for k in range(n_inputs)]
            out_handle = T.arg("out", T.handle())
            begin, end, sessions = (T.arg(n, T.int32()) for n in ("begin", "end", "sessions"))
            dims = [T.arg(f"dim{d}", T.int32()) for d in range(rank)]
            out_strides = [T.arg(f"out_stride{d}", T.int64()) for d in range(rank)]
            out_sstride = T.arg("out_sstride", T.int64())
            in_strides = [[T.arg(f"in{k}_stride{d}", T.int64()) for d in range(rank)] for k in range(n_inputs)]
            in_sstrides = [T.arg(f"in{k}_sstride", T.int64()) for k in range(n_inputs)]
            ins = []
            for k, h in enumerate(handles):
                buf = T.match_buffer(h, (T.int64(),), "float32", align=4)
                IRBuilder.name(f"in{k}", buf)
                ins.append(buf)
            out = T.match_buffer(out_handle, (T.int64(),), "float32", align=4)
            IRBuilder.name("out", out)
            n = end - begin
            read = expr.inputs() if keep < 0 else expr.args[0].inputs() | expr.args[1].inputs()
            cond_reads = expr.args[0].inputs() if keep >= 0 else set()

            def element_offsets(sess, e):
                """Session ``sess``'s element ``begin + e``: its offsets in each input and in the output."""
                rem = begin + e
                idx: list = [None] * rank
                for d in reversed(range(rank)):
                    idx[d] = T.Cast("int64", T.truncmod(rem, dims[d]) if d else rem)
                    rem = T.truncdiv(rem, dims[d])

                def at(strides, sstride):
                    off = sess * sstride
                    for d in range(rank):
                        off = off + idx[d] * strides[d]
                    return off

                return [at(in_strides[k], in_sstrides[k]) for k in range(n_inputs)], at(out_strides, out_sstride)

            def store(values, out_at, guarded: bool) -> None:
                """The element's value from its inputs' ``values`` stored (kept-input bodies: where the
                condition holds, unless ``guarded`` is False because the caller checked it)."""
                if keep < 0 or not guarded:
                    T.buffer_store(out, _tir_value(expr if keep < 0 else expr.args[1], values), [out_at])
                    return
                with T.If(_tir_value(expr.args[0], values) != T.float32(0.0)):
                    with T.Then():
                        T.buffer_store(out, _tir_value(expr.args[1], values), [out_at])

            def tile_element(sess, e, guarded: bool) -> None:
                in_at, out_at = element_offsets(sess, e)
                store([ins[k][in_at[k]] for k in range(n_inputs)], out_at, guarded)

            def batch_of_elements(places, guarded: bool) -> None:
                """EWISE_BATCH elements a thread, at ``places`` (session, element), all inside the tile: every
                load before the first store, so their round trips overlap (a loop of single elements
                waits for each: its store may alias the next element's loads, for all nvcc knows). A kept-input
                body here loads the value's inputs where its condition fails too (a ring write's new row: one
                row broadcast along the ring, cache hits); never input ``keep`` itself."""
                offsets = [element_offsets(sess, e) for sess, e in places]
                values = [[T.bind(ins[k][in_at[k]]) if k in read else None for k in range(n_inputs)]
                          for in_at, _ in offsets]
                for vals, (_, out_at) in zip(values, offsets):
                    store(vals, out_at, guarded)

            def elements(tx, count, place, guarded: bool, walkers: int = threads) -> None:
                """Elements 0 .. count - 1 of a walk by ``walkers`` threads (the block, or a row's lanes), ``tx``
                the thread's place among them, element w at ``place(w)`` (session, element): whole batches of
                EWISE_BATCH a thread first, then the rest one a thread."""
                batch = walkers * EWISE_BATCH
                with T.serial(T.truncdiv(count, batch)) as i:
                    batch_of_elements([place(i * batch + u * walkers + tx) for u in range(EWISE_BATCH)], guarded)
                done = T.truncdiv(count, batch) * batch
                with T.serial((count - done + (walkers - 1)) // walkers) as i:
                    w = done + i * walkers + tx
                    with T.If(w < count):
                        with T.Then():
                            tile_element(*place(w), guarded)

            def every_element(tx) -> None:
                elements(tx, sessions * n, lambda w: (T.Cast("int64", T.truncdiv(w, n)), T.truncmod(w, n)), True)

            def flagged_sessions(tx, j: int) -> None:
                """Only the sessions whose flag (input j, one value a session) is set: a reset with no
                session to reset loads one word a session and stores nothing."""
                with T.serial(sessions) as si:
                    sess = T.Cast("int64", si)
                    with T.If(ins[j][sess * in_sstrides[j]] != T.float32(0.0)):
                        with T.Then():
                            elements(tx, n, lambda e: (sess, e), False)

            def row_elements():
                """Elements of one row: the product of the dims after the first."""
                inner = dims[1]
                for d in range(2, rank):
                    inner = inner * dims[d]
                return inner

            def flagged_rows(tx) -> None:
                """Only the rows (index along axis 0) whose condition holds, in a tile of whole rows:
                ROW_LANES threads evaluate it once for each row and, where it holds, store the row. A ring
                write evaluates 1,024 conditions a session and stores one row, where the element walk
                evaluates the condition at every element of the cache."""
                inner = row_elements()
                rows = T.truncdiv(end - begin, inner)
                lanes = sessions * rows * ROW_LANES
                with T.serial((lanes + (threads - 1)) // threads) as i:
                    w = i * threads + tx
                    with T.If(w < lanes):
                        with T.Then():
                            sess = T.Cast("int64", T.truncdiv(w, rows * ROW_LANES))
                            first = T.truncmod(T.truncdiv(w, ROW_LANES), rows) * inner
                            in_at, _ = element_offsets(sess, first)
                            cond = _tir_value(expr.args[0], [ins[k][in_at[k]] if k in cond_reads else None
                                                             for k in range(n_inputs)])
                            with T.If(cond != T.float32(0.0)):
                                with T.Then():
                                    elements(T.truncmod(w, ROW_LANES), inner, lambda e: (sess, first + e), False,
                                             walkers=ROW_LANES)

            def constant_from(k, axis: int):
                """Input k holds one value along axes ``axis`` .. rank - 1: no stride along one of them longer
                than 1 (a broadcast axis of size 1 may have any stride). From axis 0: one value a session; from
                axis 1: one value a row."""
                holds = T.Or(in_strides[k][axis] == T.int64(0), dims[axis] == 1)
                for d in range(axis + 1, rank):
                    holds = T.And(holds, T.Or(in_strides[k][d] == T.int64(0), dims[d] == 1))
                return holds

            def rows_or_elements(tx) -> None:
                """`flagged_rows` where the tile is whole rows, the condition's inputs hold one value a row and a
                row fills the ROW_LANES threads that walk it; the element walk otherwise. wave-to-wpk tiles an
                update in place in whole rows (a tile's partial rows made TVM 0.27's RemoveNoOp fail a
                division check)."""
                if keep < 0 or rank < 2:
                    every_element(tx)
                    return
                inner = row_elements()
                by_rows = T.And(T.int32(ROW_LANES) <= inner,
                                T.And(T.truncmod(begin, inner) == 0, T.truncmod(end, inner) == 0))
                for k in sorted(cond_reads):
                    by_rows = T.And(by_rows, constant_from(k, 1))
                with T.If(by_rows):
                    with T.Then():
                        flagged_rows(tx)
                    with T.Else():
                        every_element(tx)

            flag = session_flag_input(expr, keep)
            outer = T.thread_binding(threads, thread="threadIdx.x") if bind_threads else T.serial(threads)
            with outer as tx:
                if flag is None:
                    rows_or_elements(tx)
                elif rank == 0:
                    flagged_sessions(tx, flag)
                else:
                    with T.If(constant_from(flag, 0)):
                        with T.Then():
                            flagged_sessions(tx, flag)
                        with T.Else():
                            rows_or_elements(tx)
    return ib.get()


# ---- TVM -> a __device__ function ------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceBody:
    """One generated body: ``params`` are the device function's parameters in TVM's order, each as
    (C declaration, logical name: in{k}, out, begin, end, sessions, dim{d}, out_stride{d}, out_sstride,
    in{k}_stride{d}, in{k}_sstride); ``source`` is the function with ``name`` as its name."""

    name: str
    params: tuple[tuple[str, str], ...]
    body: str

    def source(self, name: str, comment: str) -> str:
        decls = ",\n    ".join(decl for decl, _ in self.params)
        return f"{comment}\n__device__ __forceinline__ void {name}(\n    {decls}) {{\n{self.body}}}\n"


def _lower_for_cuda(func, threads: int):
    """(device PrimFunc, CUDA source) of ``func``, replaying tvm.tirx.build up to the device codegen."""
    import tvm
    from tvm.target import Target
    from tvm.tirx.build import codegen_build, split_host_device_mods

    target = Target({"kind": "cuda", "arch": DEVICE_ARCH, "max_num_threads": threads}).with_host(
        Target({"kind": "llvm"})
    )
    mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({FUNC_NAME: func}))
    pipeline, _finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    _host, devices = split_host_device_mods(pipeline(mod))
    if len(devices) != 1:
        raise WavecError(f"tvm_ewise: expected one CUDA device module, TVM made {len(devices)}")
    ((dev_target, dev_mod),) = devices.items()
    dev_mod = finalize_device()(dev_mod)
    kernels = list(dev_mod.functions.items())
    if len(kernels) != 1:
        raise WavecError(f"tvm_ewise: expected one kernel, TVM made {len(kernels)}")
    (gv, kernel), = kernels
    return gv.name_hint, kernel, codegen_build(dev_mod, dev_target).inspect_source()


_UNUSED_DECL = re.compile(r"^[ \t]*(?:int|int64_t|float|bool) (\w+) = [^;]*;\n", re.M)
_FORBIDDEN = re.compile(r"\b(blockIdx|gridDim|__shared__|__syncthreads|uint|uchar|ushort|half|__nv_bfloat16)\b")


def _drop_unused_decls(body: str) -> str:
    """Removes `T x = ...;` lines whose variable is never read (TVM's CSE leaves some behind)."""
    while True:
        for m in _UNUSED_DECL.finditer(body):
            if len(re.findall(rf"\b{m.group(1)}\b", body)) == 1:
                body = body[: m.start()] + body[m.end() :]
                break
        else:
            return body


def to_device_body(kernel_name: str, param_names: list[str], source: str, threads: int) -> DeviceBody:
    """The text pass: TVM's ``extern "C" __global__ void __launch_bounds__(N) NAME(params) {...}`` to the
    parts of a ``__device__`` function. Raises WavecError when the kernel is not a plain thread-only body."""
    head = re.compile(
        rf'extern "C" __global__ void __launch_bounds__\((\d+)\) {re.escape(kernel_name)}\(([^)]*)\) \{{\n'
    )
    defs = list(head.finditer(source))
    if len(defs) != 1:
        raise WavecError(f"tvm_ewise: {len(defs)} definitions of {kernel_name} in TVM's CUDA source, expected 1")
    m = defs[0]
    if int(m.group(1)) != threads:
        raise WavecError(f"tvm_ewise: {kernel_name} launches {m.group(1)} threads, the persistent kernel {threads}")
    decls = [d.strip().replace("__restrict__ ", "") for d in m.group(2).split(",")]
    if len(decls) != len(param_names) or any(not d.endswith(" " + n) for d, n in zip(decls, param_names)):
        raise WavecError(f"tvm_ewise: {kernel_name}'s signature {decls} disagrees with its device TIR {param_names}")
    body = source[m.end() :].rstrip()
    if not body.endswith("}"):
        raise WavecError(f"tvm_ewise: {kernel_name}'s body does not end the source")
    body = _drop_unused_decls(body[:-1].rstrip() + "\n")
    body = body.replace("CUDART_INF_F", "__int_as_float(0x7f800000)").replace("CUDART_NAN_F", "__int_as_float(0x7fffffff)")
    bad = _FORBIDDEN.search(body)
    if bad:
        raise WavecError(f"tvm_ewise: {kernel_name} uses {bad.group(1)!r}, which a persistent-kernel tile body may not")
    logical = [n.removesuffix("_ptr") if d.startswith("float*") else n for d, n in zip(decls, param_names)]
    return DeviceBody(kernel_name, tuple(zip(decls, logical)), body)


@functools.lru_cache(maxsize=None)
def device_body(expr_text: str, rank: int, n_inputs: int, threads: int, keep: int = -1) -> DeviceBody:
    """The generated body of one (expression, rank, n_inputs, keep), cached by its text for the process (a
    profile's bodies cost ~30 ms each in TVM, after TVM's ~0.8 s import). Raises WavecError for a ``keep``
    that is not the expression's kept input (wavec.opcodes.kept_input)."""
    expr = parse_expr(expr_text)
    if keep >= 0 and kept_input(expr) != keep:
        raise WavecError(f"tvm_ewise: {expr_text!r} is not select(c, a, %{keep}), so it cannot keep input {keep}")
    if not _names(expr) <= set(_TIR_OPS):
        raise WavecError(f"tvm_ewise: {expr_text!r} uses a function without a TensorIR form")
    used = expr.inputs()
    if used and max(used) >= n_inputs:
        raise WavecError(f"tvm_ewise: {expr_text!r} reads %{max(used)} but the tile has {n_inputs} inputs")
    name, kernel, source = _lower_for_cuda(ewise_primfunc(expr, rank, n_inputs, threads, keep=keep), threads)
    return to_device_body(name, [p.name for p in kernel.params], source, threads)


def generated_bodies(bodies: list[dict], threads: int) -> list[DeviceBody | str] | None:
    """The device bodies of profile.json's ``ewise_bodies`` (in index order), or None when TVM is not
    importable here (the kernel then runs every EWISE task through the bytecode interpreter). A body TVM
    fails on (it refuses to fold ``reciprocal(0.0)``, say) is the name of the error instead: its tasks run
    the bytecode interpreter."""
    if not bodies:
        return []
    try:
        import tvm  # noqa: F401
    except ImportError:
        return None
    out: list[DeviceBody | str] = []
    for b in bodies:
        try:
            out.append(device_body(b["expr"], int(b["rank"]), int(b["n_inputs"]), threads, int(b.get("keep", -1))))
        except Exception as e:  # noqa: BLE001 - TVM's internal errors have no common base; fall back
            out.append(type(e).__name__)
    return out


@functools.cache
def _llvm_fmod() -> None:
    """TVM 0.27's llvm backend has no lowering for tirx.fmod; the C library's fmodf is the exact one."""
    import tvm

    tvm.tirx.op.register_intrin_lowering(
        "tirx.fmod", target="llvm", f=lambda op: tvm.tirx.call_pure_extern("float32", "fmodf", *op.args), level=99
    )


def cpu_function(expr: Expr, rank: int, n_inputs: int, threads: int, keep: int = -1):
    """The same PrimFunc built for the llvm target (threadIdx.x as a serial loop): a callable taking
    ``(in0, ..., out, begin, end, sessions, dims..., out_strides..., out_sstride, in strides..., in sstrides...)``
    with tvm.runtime tensors for the buffers. For tests against wavec.opcodes.eval_expr."""
    import tvm

    _llvm_fmod()
    func = ewise_primfunc(expr, rank, n_inputs, threads, bind_threads=False, keep=keep)
    return tvm.compile(tvm.IRModule({FUNC_NAME: func}), target=tvm.target.Target({"kind": "llvm"}))[FUNC_NAME]


__all__ = ["available", "cpu_function", "device_body", "ewise_primfunc", "generated_bodies", "supports"]
