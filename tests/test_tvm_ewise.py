"""Generated EWISE bodies (wavec.targets.cuda.tvm_ewise): every fused expression of the real Silero profile
gets a TVM TensorIR body that nvcc compiles into kernel.cu with zero warnings; the same PrimFunc built for
the CPU matches wavec.opcodes.eval_expr on random inputs through broadcast, negative and session strides;
without TVM the compiler still works and every EWISE task runs the bytecode.

Tolerance: |tvm - eval_expr| <= 1e-6 * max(1, |eval_expr|) (inputs are of magnitude ~1: relative 1e-6,
except where a result cancels to near 0, where it is 1e-6 of the operands' scale).
"""

from __future__ import annotations

import dataclasses
import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from wavec.errors import WavecError
from wavec.opcodes import BINARY, TERNARY, UNARY, EwiseParams, Opcode, decode_expr, eval_expr, parse_expr, unpack_params
from wavec.targets.cuda import build, tvm_ewise
from wavec.targets.cuda.codegen import BLOCK_THREADS, generate_kernel

# apache-tvm is part of the `test` extra: without it these tests fail rather than skip what proves the bodies.
import tvm

NVCC = build.find_nvcc()


def _ewise_blocks(profile) -> list[EwiseParams]:
    rows = profile.payloads[profile.payloads["opcode"] == int(Opcode.EWISE)]
    return [unpack_params(profile.params, int(at)) for at in rows["params"]]


@pytest.fixture(scope="module")
def silero():
    import wavec.driver
    from wavec.frontends.onnx import import_onnx
    from wavec.models import silero_vad_path

    graph = import_onnx(silero_vad_path(), bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])
    return wavec.driver.compile_graph(graph, sessions=3, workers=8)


def _tiny_model() -> onnx.ModelProto:
    """sigmoid(x) * tanh(y) + z, z broadcast over rows: one fused EWISE op."""
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("x", "y"))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 8])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["sx"]),
        helper.make_node("Tanh", ["y"], ["ty"]),
        helper.make_node("Mul", ["sx", "ty"], ["m"]),
        helper.make_node("Add", ["m", "z"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "tiny_ewise", [x, y, z], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compile_tiny():
    import wavec.driver
    from wavec.frontends.onnx import import_onnx

    return wavec.driver.compile_graph(import_onnx(_tiny_model()), sessions=3, workers=4)


# ---- (a) the real Silero profile: every EWISE task runs a generated body, and kernel.cu compiles clean ----


def test_every_silero_ewise_task_runs_a_generated_body(silero):
    bodies = silero.meta["ewise_bodies"]
    blocks = _ewise_blocks(silero)
    assert blocks and all(p.body >= 0 for p in blocks)
    assert sorted({p.body for p in blocks}) == list(range(len(bodies)))
    fused = [b["expr"] for b in bodies if b["expr"].count("(") >= 3]  # chains wave-fuse made
    assert "add(mul(sigmoid(%1), %3), mul(sigmoid(%0), tanh(%2)))" in fused, fused  # the LSTM cell update
    for p in blocks:  # a block's index names its own expression, rank and input count
        entry = bodies[p.body]
        assert (parse_expr(entry["expr"]), entry["rank"], entry["n_inputs"]) == (
            decode_expr(p.code), len(p.shape), len(p.in_strides))
    from wavec.verify import verify_profile

    verify_profile(silero)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_silero_kernel_with_generated_bodies_compiles_without_warnings(silero, tmp_path):
    import subprocess

    src = silero.kernel_source
    assert src == generate_kernel(silero.meta), "kernel.cu must be deterministic"
    (tmp_path / "kernel.cu").write_text(src)
    proc = subprocess.run(  # tests/test_cuda.py's flags: build.py's plus -Werror all-warnings
        [NVCC, "-cubin", *build.ARCH_FLAGS, "-O3", "-lineinfo", "-std=c++17", "-Werror", "all-warnings",
         "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"), str(tmp_path / "kernel.cu")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    from test_cuda import MAX_SPILL_BYTES  # per block size, with why
    from wavec.targets.cuda.codegen import block_threads

    spills = re.search(r"wavec_persistent[\s\S]*?(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    assert spills and max(map(int, spills.groups())) <= MAX_SPILL_BYTES[block_threads(silero.meta)], proc.stderr


# ---- (c) what kernel.cu holds ----------------------------------------------------------------------------


def test_kernel_holds_the_generated_body_and_its_dispatch(silero):
    src = silero.kernel_source
    bodies = silero.meta["ewise_bodies"]
    cell = next(i for i, b in enumerate(bodies) if b["expr"] == "mul(sigmoid(%0), tanh(%1))")
    start = src.index(f"// EWISE body {cell}: mul(sigmoid(%0), tanh(%1))  (rank 2, 2 inputs)\n// from: ewise_")
    fn = src[start : src.index("\n}\n", start)]
    assert f"__device__ __forceinline__ void ewise_tvm_{cell}(" in fn
    assert "tanhf(" in fn and "expf(" in fn and "threadIdx.x" in fn
    for banned in ("__global__", "__launch_bounds__", "__restrict__", "blockIdx", "cse_v"):
        assert banned not in fn, banned
    case = src[src.index(f"    case {cell}:  // mul(sigmoid(%0), tanh(%1))") :]
    assert case.split("\n")[1].strip() == "if (rank != 2 || n_in != 2) return false;"
    assert f"ewise_tvm_{cell}(in[" in case.split("return true;")[0]
    assert "if (body >= 0 && run_generated_ewise(body, t, out, in, rank, n_in, shape, out_strides, in_strides)) return;" in src
    assert src.count("__launch_bounds__") == 1  # the persistent kernel's own


def test_call_arguments_follow_the_device_tir_order():
    """TVM orders kernel parameters its own way (alphabetically); the body's declared order is the lowered
    device PrimFunc's, and the call passes each logical argument at its place."""
    body = tvm_ewise.device_body("sub(%1, %0)", 2, 2, BLOCK_THREADS)
    names = [n for _, n in body.params]
    assert names[:3] == ["in0", "in1", "out"] and set(names) >= {"begin", "end", "sessions", "dim1", "in1_stride0"}
    meta = {"workers": 1, "sessions": 1, "n_counters": 1, "worker_tasks": [[0, 0]],
            "ewise_bodies": [{"expr": "sub(%1, %0)", "rank": 2, "n_inputs": 2, "phases": ["p (wave.ewise)"]}]}
    src = generate_kernel(meta)
    start = src.index("      ewise_tvm_0(")
    call = src[start : src.index("return true;", start)]
    args = [a.strip() for a in call.removeprefix("      ewise_tvm_0(").rsplit(")", 1)[0].split(",\n")]
    want = {"in0": "in[0].at(t.session_begin, 0)", "in1": "in[1].at(t.session_begin, 0)", "begin": "(int)t.elem_begin",
            "dim1": "(int)shape[1]", "in1_stride0": "in_strides[2]", "out_stride1": "out_strides[1]",
            "sessions": "(int)(t.session_end - t.session_begin)"}
    for name, arg in zip(names, args):
        if name in want:
            assert arg == want[name], (name, arg)


def test_a_body_tvm_cannot_build_falls_back_to_the_bytecode():
    meta = {"workers": 1, "sessions": 1, "n_counters": 1, "worker_tasks": [[0, 0]],
            "ewise_bodies": [{"expr": "add(%0, reciprocal(0.0))", "rank": 1, "n_inputs": 1, "phases": []},
                             {"expr": "relu(%0)", "rank": 1, "n_inputs": 1, "phases": ["p (wave.ewise)"]}]}
    src = generate_kernel(meta)
    assert "// EWISE body 0: add(%0, reciprocal(0.0)): not generated (TVM raised InternalError)" in src
    assert "ewise_tvm_0" not in src and "    case 1:  // relu(%0)" in src and "    case 0:  // add" not in src


# ---- (b) the same PrimFunc on the CPU against eval_expr ------------------------------------------------


def _all_functions_exprs() -> list[str]:
    """Expressions that together apply every function of wavec.opcodes."""
    un = list(UNARY)
    pairs = [f"add({a}(%0), {b}(%0))" for a, b in zip(un[0::2], un[1::2])] + ([f"{un[-1]}(%0)"] if len(un) % 2 else [])
    return pairs + [f"{n}(%0, %1)" for n in BINARY] + [f"{n}(%2, %0, %1)" for n in TERNARY]


def _aligned(values: np.ndarray) -> np.ndarray:
    """A copy of float32 ``values`` starting at a 64-byte boundary (DLPack import insists on it)."""
    raw = np.empty(values.size + 16, np.float32)
    shift = (-raw.ctypes.data % 64) // 4
    out = raw[shift : shift + values.size]
    out[:] = values
    return out


def _view(base: np.ndarray, mid: int):
    """A tvm tensor over base[mid:] (mid a multiple of 16), sharing memory: indices below 0 reach back."""
    return tvm.runtime.from_dlpack(base[mid:])


def _check_on_cpu(expr_text: str, rank: int, n_inputs: int, rng, keep: int = -1, per_session: tuple[int, ...] = (),
                  max_dim: int = 4, threads: int = BLOCK_THREADS, per_row: tuple[int, ...] = ()) -> None:
    """The CPU build of the body against eval_expr. ``keep >= 0``: the body keeping that input of a select
    (wpk-payload gives it to a task whose input is its own output): it must store the select's value where
    the condition holds and leave the other elements as they were, without reading input ``keep`` (here
    all NaN, apart from the output). Inputs in ``per_session`` hold one value a session (element strides 0),
    as a reset's flag does; inputs in ``per_row`` one value a row (strides 0 after axis 0), as a ring write's
    slot index and position do. Dims are drawn from 1 to ``max_dim``; ``threads``: the block the body is built for
    (a few make tiles of several EWISE_BATCH batches a thread)."""
    expr = parse_expr(expr_text)
    shape = tuple(int(d) for d in rng.integers(1, max_dim + 1, size=rank))
    n = int(np.prod(shape, dtype=np.int64))
    sessions = 3
    begin = int(rng.integers(0, n))
    end = int(rng.integers(begin + 1, n + 1))
    if per_row and rng.random() < 0.5:  # a tile of whole rows: the body's row walk
        row = n // shape[0]
        first = int(rng.integers(0, shape[0]))
        begin, end = first * row, int(rng.integers(first + 1, shape[0] + 1)) * row
    # Output: contiguous per session, sessions apart by n + 5 (gaps must stay untouched).
    out_strides = [int(s) for s in np.cumprod((1,) + shape[::-1])[:-1][::-1]]
    out_sstride = n + 5
    in_strides, in_sstrides, bases, mids = [], [], [], []
    for k in range(n_inputs):
        st = []
        for d in range(rank):
            kind = rng.integers(0, 3)  # 0: broadcast, 1: forward, 2: reversed
            # A per-session input may still have a stride along an axis of size 1 (wave-to-wpk gives its flag one).
            per = (k in per_session or k in per_row and d > 0) and shape[d] > 1
            st.append(0 if kind == 0 or per else int(rng.integers(1, 7)) * (1 if kind == 1 else -1))
        ss = int(rng.choice([0, 97, -97]))  # shared by sessions, or one slot per session either way
        reach = sum(abs(s) * (d - 1) for s, d in zip(st, shape)) + abs(ss) * (sessions - 1)
        mid = 16 * (reach // 16 + 1)
        base = rng.uniform(-2.0, 2.0, size=2 * mid + 16).astype(np.float32)
        if expr_text.startswith(("select", "not", "eq")):
            base[rng.random(base.size) < 0.3] = 0.0  # the zero / equal branches too
        if k == keep:
            base[:] = np.nan
        in_strides.append(st), in_sstrides.append(ss), bases.append(_aligned(base)), mids.append(mid)
    out_base = _aligned(np.full(sessions * out_sstride, 7.0, np.float32))

    fn = tvm_ewise.cpu_function(expr, rank, n_inputs, threads, keep=keep)
    fn(*[_view(b, m) for b, m in zip(bases, mids)], _view(out_base, 0), begin, end, sessions, *shape, *out_strides,
       out_sstride, *[s for st in in_strides for s in st], *in_sstrides)

    flat = np.arange(begin, end)
    idx = np.unravel_index(flat, shape) if rank else ()
    got, want = [], []
    for s in range(sessions):
        vals = []
        for k in range(n_inputs):
            off = mids[k] + s * in_sstrides[k] + sum(i * st for i, st in zip(idx, in_strides[k]))
            vals.append(bases[k][np.asarray(off, np.int64) + np.zeros(len(flat), np.int64)])
        if keep < 0:
            want.append(np.broadcast_to(eval_expr(expr, vals), (len(flat),)))
        else:
            cond, value = (np.broadcast_to(eval_expr(e, vals), (len(flat),)) for e in expr.args[:2])
            want.append(np.where(cond != 0, value, np.float32(7.0)))
        oo = s * out_sstride + sum(i * st for i, st in zip(idx, out_strides)) + np.zeros(len(flat), np.int64)
        got.append(out_base[oo])
        untouched = np.ones(out_sstride, bool)
        untouched[oo - s * out_sstride] = False
        assert (out_base[s * out_sstride : (s + 1) * out_sstride][untouched] == 7.0).all(), "wrote outside the tile"
    got, want = np.concatenate(got), np.concatenate(want)
    with np.errstate(invalid="ignore"):
        assert (np.isnan(got) == np.isnan(want)).all(), expr_text
        ok = np.isnan(want) | (got == want) | (np.abs(got - want) <= 1e-6 * np.maximum(1.0, np.abs(want)))
    assert ok.all(), f"{expr_text}: got {got[~ok][:4]} want {want[~ok][:4]}"


def test_silero_bodies_match_eval_expr_on_the_cpu(silero):
    rng = np.random.default_rng(3)
    for b in silero.meta["ewise_bodies"]:
        for _ in range(2):
            _check_on_cpu(b["expr"], int(b["rank"]), int(b["n_inputs"]), rng)


@pytest.mark.parametrize("rank", [0, 3])
def test_every_function_matches_eval_expr_on_the_cpu(rank):
    rng = np.random.default_rng(rank)
    for text in _all_functions_exprs():
        n_in = max(parse_expr(text).inputs()) + 1
        _check_on_cpu(text, rank, n_in, rng)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_thread_loads_a_batch_of_elements_before_it_stores_them(threads):
    """Tiles of EWISE_BATCH x threads elements and more take the batched loop, the rest the one-element loop
    after it: both parts, a kept input's, a reset's flagged sessions, and a tile of less than one batch
    against eval_expr."""
    rng = np.random.default_rng(threads)
    for text, n_in, keep, per_session in [("add(mul(%0, %1), mul(%2, %3))", 4, -1, ()), ("exp(sub(%0, %1))", 2, -1, ()),
                                          ("select(eq(%0, fmod(%1, 4.0)), %2, %3)", 4, 3, ()), ("%0", 1, -1, ()),
                                          ("select(%0, %1, %2)", 3, 2, (0,))]:
        for rank in (1, 3):
            for _ in range(3):
                _check_on_cpu(text, rank, n_in, rng, keep=keep, per_session=per_session, max_dim=6, threads=threads)


@pytest.mark.parametrize("expr_text, keep", [("select(%0, %1, %2)", 2),  # a state's reset
                                             ("select(eq(%0, fmod(%1, 4.0)), %2, %3)", 3)])  # a ring cache's write
def test_a_body_keeping_its_output_stores_only_where_the_condition_holds(expr_text, keep):
    """Through the element-wise path, and for a reset's flag (one value a session) the path that reads it
    once a session, some sessions flagged and some not (30% of the flags are 0); tiles of up to 24^3
    elements, so the block-stride loops go round more than once."""
    rng = np.random.default_rng(keep)
    for rank in (0, 1, 3):
        for per_session in ((), (0,)):
            for _ in range(3):
                _check_on_cpu(expr_text, rank, keep + 1, rng, keep=keep, per_session=per_session, max_dim=24)


@pytest.mark.parametrize("threads", [1, 3, BLOCK_THREADS])
def test_a_ring_write_stores_only_the_rows_whose_condition_holds(threads):
    """A ring write's condition, eq(iota, fmod(pos, C)), holds one value a row: in a tile of whole rows of
    at least ROW_LANES elements the body evaluates it once a row and stores only the rows where it holds
    (`flagged_rows`); tiles that start or end inside a row and shorter rows take the element walk. 30% of
    the slots equal the position, so several rows of a session may hold."""
    rng = np.random.default_rng(threads)
    for rank in (2, 3):
        for _ in range(8):
            _check_on_cpu("select(eq(%0, fmod(%1, 4.0)), %2, %3)", rank, 4, rng, keep=3, per_row=(0, 1), max_dim=40,
                          threads=threads)


def test_only_a_select_can_keep_an_input():
    with pytest.raises(WavecError, match="cannot keep input 1"):
        tvm_ewise.device_body("select(%0, %1, %2)", 2, 3, BLOCK_THREADS, keep=1)
    with pytest.raises(WavecError, match="cannot keep input 0"):
        tvm_ewise.device_body("add(%0, %1)", 2, 2, BLOCK_THREADS, keep=0)


# ---- without TVM ------------------------------------------------------------------------------------------


def test_without_tvm_every_ewise_task_runs_the_bytecode(monkeypatch):
    with_tvm = _compile_tiny()
    exprs = [b["expr"] for b in with_tvm.meta["ewise_bodies"]]
    assert exprs == ["add(mul(sigmoid(%1), tanh(%2)), %0)"]  # the fused op, which writes the output in place
    assert all(p.body >= 0 for p in _ewise_blocks(with_tvm))

    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` raises ImportError
    assert not tvm_ewise.available()
    profile = _compile_tiny()
    assert profile.meta["ewise_bodies"] == [] and all(p.body == -1 for p in _ewise_blocks(profile))
    assert "ewise_tvm_" not in profile.kernel_source
    assert "EWISE bodies: none generated (apache-tvm was not importable at compile time; install it" in (
        __import__("wavec.report", fromlist=["format_report"]).format_report(profile.report))
    # A kernel generated without TVM from a profile that numbered bodies falls back to the bytecode.
    src = generate_kernel(with_tvm.meta)
    assert "apache-tvm was not importable where this kernel was generated" in src and "ewise_tvm_0" not in src

    from wavec.verify import verify_profile

    verify_profile(profile)
    rng = np.random.default_rng(0)
    frames = {k: rng.normal(size=(1, 3, *s)).astype(np.float32) for k, s in (("x", (4, 8)), ("y", (4, 8)), ("z", (8,)))}
    reset = np.zeros((1, 3), bool)
    a = profile.run(frames, backend="interp", reset=reset)["out"]
    b = with_tvm.run(frames, backend="interp", reset=reset)["out"]
    np.testing.assert_array_equal(a, b)


def test_verifier_rejects_a_body_index_naming_another_expression(silero):
    from wavec.errors import VerificationError
    from wavec.verify import verify_profile

    rows = silero.payloads[silero.payloads["opcode"] == int(Opcode.EWISE)]
    at = int(rows["params"][0])
    p = unpack_params(silero.params, at)
    other = next(i for i, b in enumerate(silero.meta["ewise_bodies"]) if i != p.body)
    params = silero.params.copy()
    params[at + len(p.pack()) - 1] = other
    with pytest.raises(VerificationError, match=f"names generated body {other}"):
        verify_profile(dataclasses.replace(silero, params=params))
    params = params.copy()
    params[at + len(p.pack()) - 1] = len(silero.meta["ewise_bodies"])
    with pytest.raises(VerificationError, match="set the block's last word to -1"):
        verify_profile(dataclasses.replace(silero, params=params))


# ---- bodies that keep their output: a state's reset, a ring cache written in place ---------------------------


def _rows_running(profile, body: int) -> np.ndarray:
    rows = np.flatnonzero(profile.payloads["opcode"] == int(Opcode.EWISE))
    return np.array([r for r in rows if unpack_params(profile.params, int(profile.payloads["params"][r])).body == body])


def test_a_reset_keeps_its_state_and_the_verifier_holds_it_to_that(silero):
    """Silero's reset, select(reset, init, state) into the state, is the one body that keeps an input; the
    verifier refuses it for a task whose kept input is not its output (it would leave stale elements)."""
    from wavec.errors import VerificationError
    from wavec.opcodes import OUT
    from wavec.verify import verify_profile

    bodies = silero.meta["ewise_bodies"]
    assert [(b["expr"], b["keep"]) for b in bodies if b["keep"] >= 0] == [("select(%0, %1, %2)", 2)]
    reset = next(i for i, b in enumerate(bodies) if b["keep"] >= 0)
    assert bodies[reset]["phases"] == ["reset_state (wave.state)"]
    payloads = silero.payloads.copy()
    rows = _rows_running(silero, reset)
    assert len(rows) and (payloads["offset"][rows, 2] == payloads["offset"][rows, OUT]).all()
    payloads["offset"][rows, 2] += 4
    with pytest.raises(VerificationError, match="keeps input 2 .* is not its output element for element"):
        verify_profile(dataclasses.replace(silero, payloads=payloads))


def test_ring_caches_are_written_in_place_with_no_state_write():
    """transformer:tiny's K and V ring writes, select(eq(iota, fmod(pos, C)), new, cache), write the state's
    own buffer: their bodies keep the cache, and no state-write phase copies it back."""
    import wavec.driver
    from wavec import zoo
    from wavec.frontends.builder.lower import lower_model

    profile = wavec.driver.compile_graph(lower_model(zoo.get("transformer:tiny")), sessions=3, workers=4)
    ring = [b for b in profile.meta["ewise_bodies"] if b["keep"] == 3]
    assert len(ring) == 1 and ring[0]["expr"] == "select(eq(%0, fmod(%1, 8.0)), %2, %3)"
    names = [ph["name"] for ph in profile.meta["phases"]]
    assert not [n for n in names if n.startswith("state_write_") and ".kv." in n], names
    from wavec.report import format_report

    # Three: the ring write, and the resets of rank 1 (the beat counter) and rank 3 (the caches).
    assert "3 of them storing only where a select's condition holds" in format_report(profile.report)


def _state_update_chains():
    """Models whose state is updated by a chain of selects, each with a reader of the first version that
    forbids writing it over in place; and one that allows it (the reader comes first)."""
    from wavec.frontends.builder import Model

    def chain(name, reader):
        m = Model(name)
        s = m.state("s", [8])
        x, y = m.input("x", [8]), m.input("y", [8])
        c1 = m.where(m.ewise("gt", x, 0.0), x, s)
        early = m.exp(c1) if reader == "early" else None
        sum_c1 = m.sum(c1, 0) if reader == "sum" else None  # a real reduction: a buffer of its own
        iota = m.const(np.arange(8, dtype=np.float32))
        a = m.add(m.slice(c1, 0, 3, 4), 1.0) if reader == "slice" else y
        c2 = m.where(m.ewise("gt", y, 0.0) if reader != "slice" else m.ewise("ge", iota, 3.0), a, c1)
        m.state_write("s", c2)
        m.output("c2", c2)
        if reader == "output":
            m.output("c1", c1)
        elif reader == "late":
            m.output("r", m.exp(c1))
        elif reader == "early":
            m.output("r", early)
        elif reader == "sum":
            m.output("r", sum_c1)
        return m

    return {r: chain(f"chain_{r}", r) for r in ("output", "late", "slice", "early", "sum")}


@pytest.mark.parametrize("reader, in_place", [("output", False), ("late", False), ("slice", False), ("early", True),
                                              ("sum", True)])
def test_a_state_is_updated_in_place_only_when_no_later_reader_needs_the_old_version(reader, in_place):
    """An output or a later op reading the first version, or the second update reading it through a slice,
    keeps the first update out of the state's buffer (the lowering keeps block order, outputs come after the
    graph); a reader placed before the second update lets both write the state in place, also when it is a
    reduction whose result an output reads later (a reduction over more than size-1 axes is no view). The
    second update computes the new value in the state's slot either way (states-in-place: the first
    version's readers are not the state's), so no phase writes the state back. Each matches the float64
    reference."""
    from builder_harness import run_against_reference

    model = _state_update_chains()[reader]
    run_against_reference(model, sessions=2, beats=6, workers=3, tolerance=1e-6)
    phases = model.compile(sessions=2, workers=3).meta["phases"]
    writers = [ph["name"] for ph in phases if "s.s" in ph["writes"]]
    assert writers[0] == "reset_s" and len(writers) == (3 if in_place else 2), writers
    assert not [ph for ph in phases if ph["name"].startswith("state_write_")], phases
