"""targets/cuda: the generated kernel (deterministic, tables from wavec/opcodes.py, compiles for sm_90a
with zero warnings and no spills), the nvcc build cache, the runtime's errors without a GPU, and, marked
``gpu``, the kernel against the interpreter and a numpy reference on a profile that exercises all four
opcodes, split tiles, cross-worker waits, state across beats with reset, and double-buffered io."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profile_builder import ProfileBuilder, conv_params
from wavec.errors import RuntimeBackendError
from wavec.opcodes import (
    BINARY,
    REDUCE_KINDS,
    TERNARY,
    UNARY,
    Epilogue,
    EwiseParams,
    MatmulParams,
    Prologue,
    ReduceParams,
    compile_expr,
    contiguous_strides,
    parse_expr,
)
from wavec.payload import cuda_struct
from wavec.targets.cuda import build, codegen, runtime
from wavec.targets.cuda.codegen import generate_kernel

NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
needs_gpu = pytest.mark.skipif(not runtime.gpu_available(), reason="no CUDA GPU with cuda-bindings here")

CONV = dict(x_shape=(1, 2, 10), w_shape=(4, 1, 3), stride=(2,), pads=(1, 1), group=2, has_bias=True)


def code(text: str) -> tuple[int, ...]:
    return tuple(compile_expr(parse_expr(text)))


def ewise(shape, n_in: int, text: str, in_strides=None) -> EwiseParams:
    st = contiguous_strides(tuple(shape))
    return EwiseParams(tuple(shape), st, tuple(in_strides or (st,) * n_in), code(text))


def build_test_profile(sessions: int = 5, workers: int = 3, seed: int = 0):
    """A small stateful program touching every opcode; `reference` computes the same in numpy.

    Per session and beat: hr = reset ? h0 : h;  a = tanh(x + 0.5 hr);  m = a @ W (two tiles, two workers);
    c = conv1d(y) (grouped, strided, padded, bias; two tiles);  lse[o] = logsumexp_t c[o, t];
    mean = mean(m) (rank-0 output, 2-d reduced view);  l2 = |c|_2;  h <- 0.9 hr + 0.1 a;
    out = sigmoid(m) + sqrt(|m|);  h_out = h.
    """
    rng = np.random.default_rng(seed)
    pb = ProfileBuilder(sessions=sessions, workers=workers, model="cuda-test")
    x = pb.input("x", (8,))
    y = pb.input("y", CONV["x_shape"])
    reset = pb.reset_flags()
    h0 = rng.normal(size=8).astype(np.float32)
    h, h_init = pb.state("h", h0, output="h_out")
    weights = {
        "h0": h0,
        "W": rng.normal(size=(8, 6)).astype(np.float32),
        "Wc": rng.normal(size=CONV["w_shape"]).astype(np.float32),
        "bc": rng.normal(size=(4,)).astype(np.float32),
    }
    w_mm, w_conv, b_conv = (pb.weight(k, weights[k]) for k in ("W", "Wc", "bc"))
    hr = pb.act("hr", (8,))
    a = pb.act("a", (8,))
    m = pb.act("m", (6,))
    cv = pb.act("c", (1, 4, 5))
    out = pb.output("out", (6,))
    lse = pb.output("lse", (4,))
    mean = pb.output("mean", ())
    l2 = pb.output("l2", (1,))
    h_out = pb.output("h_out", (8,))

    # worker 0: reset select, a, state update, h_out
    pb.task(ewise((8,), 3, "select(%0, %1, %2)", [(0,), (1,), (1,)]), [reset, h_init, h], hr, worker=0)
    done_a = pb.task(ewise((8,), 2, "tanh(add(%0, mul(%1, 0.5)))"), [x, hr], a, worker=0)
    # matmul: out[n] = sum_k a[k] W[k, n], tiles on workers 1 and 2
    mm = MatmulParams((6,), 8, (1,), (0, 1), (1, 6))
    done_m = pb.counter()
    pb.task(mm, [a, w_mm], m, worker=1, elems=(0, 3), waits=[(done_a, 1)], signal=done_m)
    pb.task(mm, [a, w_mm], m, worker=2, elems=(3, 6), waits=[(done_a, 1)], signal=done_m)
    # conv: two tiles (worker 2 then worker 1), no waits
    cp = conv_params(CONV["x_shape"], CONV["w_shape"], stride=CONV["stride"], pads=CONV["pads"],
                     group=CONV["group"], has_bias=CONV["has_bias"])
    done_c = pb.counter()
    pb.task(cp, [y, w_conv, b_conv], cv, worker=2, elems=(0, 10), signal=done_c)
    pb.task(cp, [y, w_conv, b_conv], cv, worker=1, elems=(10, 20), signal=done_c)
    # reductions
    kind = REDUCE_KINDS.index
    pb.task(ReduceParams(kind("logsumexp"), (4,), (1,), (5,), (5,), (1,)), [cv], lse, worker=1,
            waits=[(done_c, 2)])
    pb.task(ReduceParams(kind("mean"), (), (), (), (2, 3), (3, 1)), [m], mean, worker=2, waits=[(done_m, 2)])
    pb.task(ReduceParams(kind("l2"), (1,), (1,), (0,), (4, 5), (5, 1)), [cv], l2, worker=1, waits=[(done_c, 2)])
    # worker 0 again: state update after its own reads, then the outputs
    pb.task(ewise((8,), 2, "add(mul(%0, 0.9), mul(%1, 0.1))"), [hr, a], h, worker=0)
    pb.task(ewise((8,), 1, "%0"), [h], h_out, worker=0)
    pb.task(ewise((6,), 1, "add(sigmoid(%0), sqrt(abs(%0)))"), [m], out, worker=0, waits=[(done_m, 2)])
    return pb.build(), weights


PROLOGUE = dict(rows=3, k=40, n=6, eps=1e-5, tiles=[(0, 7), (7, 13), (13, 18)], prologue=True, w_nk=False)
# The same program at the size of a weight-streaming matmul (W is 1.1 MB): part of row 0 (M = sessions), two
# unaligned parts of it (126 columns; 2, too few for the tiled GEMM), rows 1-2 whole (M = 2 x sessions);
# K = 1100 is 35 chunks of the tiled GEMM. A prologue keeps every tile on the lane-group body.
LARGE = dict(rows=3, k=1100, n=256, eps=1e-5, tiles=[(0, 128), (128, 254), (254, 256), (256, 768)], prologue=True,
             w_nk=False)
# LARGE without the prologue: at 300 sessions every tile but the 2-column one (lane groups: 300 rows) takes the
# tiled GEMM (kTiledGemm), its weight read along n; at 5 sessions every tile takes the streaming GEMM
# (kStreamGemm: one aligned, one unaligned, two rows of M = 10), as LARGE's do with their prologue; TILED_NK
# stores W as [n, k], read along k (the streaming GEMM declines it: lane groups).
TILED = {**LARGE, "prologue": False}
TILED_NK = {**TILED, "w_nk": True}


def build_prologue_profile(sessions: int = 5, workers: int = 3, seed: int = 0, dims: dict = PROLOGUE):
    """An RMS norm folded into the matmul that reads it (a MATMUL prologue, wavec.opcodes.Prologue), as
    wave-fuse produces it; `prologue_reference` computes the same in numpy.

    Per session and beat: ss[t] = sum_k x[t, k]^2 (REDUCE);  y = tanh(prologue(x) @ W) with
    prologue(x)[t, k] = x[t, k] * rsqrt(ss[t] / K + eps) * g[k] (a per-row and a per-k extra: all four input
    slots), the matmul in ``dims["tiles"]`` on the workers in turn (PROLOGUE: K = 40 splits over lanes, odd
    tails included; LARGE, TILED: see there). Without ``dims["prologue"]``, y = tanh(x @ W); with
    ``dims["w_nk"]`` the weight is stored transposed ([n, k]).
    """
    rows, k, n, eps = dims["rows"], dims["k"], dims["n"], dims["eps"]
    rng = np.random.default_rng(seed)
    pb = ProfileBuilder(sessions=sessions, workers=workers, model="cuda-prologue")
    x = pb.input("x", (rows, k))
    weights = {"W": (rng.normal(size=(k, n)) / np.sqrt(k)).astype(np.float32),  # unit-variance sums at any K
               "g": rng.normal(size=(k,)).astype(np.float32)}
    w = pb.weight("W", np.ascontiguousarray(weights["W"].T) if dims["w_nk"] else weights["W"])
    y = pb.output("y", (rows, n))
    epilogue = Epilogue((rows, n), (), code("tanh(%0)"))
    b_strides = (0, k, 1) if dims["w_nk"] else (0, 1, n)
    if dims["prologue"]:
        g = pb.weight("g", weights["g"])
        ss = pb.act("ss", (rows,))
        done_ss = pb.task(ReduceParams(REDUCE_KINDS.index("sumsquare"), (rows,), (1,), (k,), (k,), (1,)), [x], ss,
                          worker=0)
        pro = Prologue(strides=((1, 0, 0), (0, 0, 1)),  # ss per row t; g per k
                       code=code(f"mul(mul(%0, reciprocal(sqrt(add(mul(%1, {1.0 / k!r}), {eps!r})))), %2)"))
        mm, inputs, waits = MatmulParams((rows, n), k, (n, 1), (k, 0, 1), b_strides, epilogue, pro), [x, w, ss, g], [(done_ss, 1)]
    else:
        mm, inputs, waits = MatmulParams((rows, n), k, (n, 1), (k, 0, 1), b_strides, epilogue), [x, w], []
    done = pb.counter()
    for i, (e0, e1) in enumerate(dims["tiles"]):
        pb.task(mm, inputs, y, worker=i % workers, elems=(e0, e1), waits=waits, signal=done)
    return pb.build(), weights


def prologue_reference(weights: dict, frames: dict, dims: dict = PROLOGUE) -> dict[str, np.ndarray]:
    """The prologue program of ``dims`` in float64 numpy."""
    x = frames["x"].astype(np.float64)  # [beats, sessions, rows, k]
    if dims["prologue"]:
        x = x / np.sqrt((x * x).mean(-1, keepdims=True) + dims["eps"]) * weights["g"].astype(np.float64)
    return {"y": np.tanh(x @ weights["W"].astype(np.float64))}


def reference(weights: dict, frames: dict, reset: np.ndarray) -> dict[str, np.ndarray]:
    """The test program in float64 numpy."""
    beats, sessions = reset.shape
    h = np.tile(weights["h0"].astype(np.float64), (sessions, 1))
    W, Wc, bc = (weights[k].astype(np.float64) for k in ("W", "Wc", "bc"))
    outs: dict[str, list] = {k: [] for k in ("out", "lse", "mean", "l2", "h_out")}
    for b in range(beats):
        x = frames["x"][b].astype(np.float64)
        y = frames["y"][b].astype(np.float64)[:, 0]  # [S, 2, 10]
        hr = np.where(reset[b][:, None], weights["h0"][None, :].astype(np.float64), h)
        a = np.tanh(x + 0.5 * hr)
        m = a @ W
        yp = np.pad(y, ((0, 0), (0, 0), (1, 1)))
        c = np.zeros((sessions, 4, 5))
        for o in range(4):
            g = o // 2
            for t in range(5):
                c[:, o, t] = (yp[:, g, 2 * t : 2 * t + 3] * Wc[o, 0][None, :]).sum(-1) + bc[o]
        mx = c.max(-1, keepdims=True)
        outs["lse"].append(mx[..., 0] + np.log(np.exp(c - mx).sum(-1)))
        outs["mean"].append(m.mean(-1))
        outs["l2"].append(np.sqrt((c.reshape(sessions, -1) ** 2).sum(-1))[:, None])
        h = 0.9 * hr + 0.1 * a
        outs["h_out"].append(h)
        outs["out"].append(1 / (1 + np.exp(-m)) + np.sqrt(np.abs(m)))
    return {k: np.stack(v) for k, v in outs.items()}


def random_run(profile, beats: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    frames = {
        spec["name"]: rng.normal(size=(beats, profile.sessions, *spec["shape"])).astype(np.float32)
        for spec in profile.meta["inputs"]
    }
    reset = rng.random((beats, profile.sessions)) < 0.2
    return frames, reset


def max_err(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(got[k].astype(np.float64) - want[k]), initial=0.0)) for k in want)


# ---------------------------------------------------------------------------------------------
# Generated source


def test_kernel_is_deterministic_and_carries_the_payload_struct():
    profile, _ = build_test_profile()
    src = generate_kernel(profile.meta)
    assert src == generate_kernel(dict(profile.meta))
    assert cuda_struct() in src
    assert codegen.PROTOCOL_MARKER in src
    assert f"constexpr unsigned kWorkers = {profile.meta['workers']};" in src
    assert f"constexpr unsigned kProfileCounters = {profile.meta['n_counters']};" in src


@pytest.mark.parametrize(
    "fn, table", [("unary_op", UNARY), ("binary_op", BINARY), ("ternary_op", TERNARY)]
)
def test_function_tables_follow_opcodes_order(fn, table):
    src = generate_kernel(build_test_profile()[0].meta)
    body = src[src.index(f"float {fn}(") :]
    body = body[: body.index("\n}\n")]
    cases = re.findall(r"case (\d+): return (.*);  // (\w+)", body)
    assert [(int(i), expr, name) for i, expr, name in cases] == [
        (i, c_expr, name) for i, (name, (_np, c_expr)) in enumerate(table.items())
    ]


def test_reduce_switch_covers_every_kind_in_order():
    src = generate_kernel(build_test_profile()[0].meta)
    assert re.findall(r"constexpr int kReduce_(\w+) = (\d+);", src) == [(k, str(i)) for i, k in enumerate(REDUCE_KINDS)]
    for k in REDUCE_KINDS:
        assert f"case kReduce_{k}: reduce_tile<kReduce_{k}>" in src


def test_profile_names_cannot_break_the_source():
    profile, _ = build_test_profile()
    meta = {**profile.meta, "model": 'evil */ "\n#error x'}
    src = generate_kernel(meta)
    assert "\n#error" not in src and '"\n' not in src


def ptxas_compile(tmp_path, src: str) -> str:
    (tmp_path / "kernel.cu").write_text(src)
    proc = subprocess.run(
        [NVCC, "-cubin", *build.ARCH_FLAGS, "-O3", "-lineinfo", "-std=c++17", "-Werror", "all-warnings",
         "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"), str(tmp_path / "kernel.cu")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


# Spill bytes (stores or loads, per function) each shipped target's block size may cost: none at 256
# threads (255 registers). At the H200's 512 (128 registers), which measured 1.5x faster than 256 threads
# (bench/RESULTS.md), the seventh run's kernel spilled up to 1,768 bytes of loads (the tiled GEMM's epilogues)
# and 1,388 in the persistent function. The eighth run made every body a function of its own and calls one
# copy of the bytecode interpreter, the epilogue and the offset arithmetic: the kernel's code went from
# 1,011 KB to ~300 KB, the persistent function (the scheduler loop) spills under 150 bytes (inlined bodies had
# made duplex:1b's spill 4 KB around its calls), and the most is matmul_gemm_body's tiled epilogues (~600
# bytes of loads; its k loop has none, nvdisasm). The eleventh run's third tiled GEMM (b of TF32 values) took
# them to 1,080. The twelfth run's cp.async staging put each tiled GEMM in a function of its own
# (tiled_matmul): the 16-byte ones spill nothing, the most is now stream_gemm's prologue case (160 bytes) and
# the persistent function (144). More would mean a body grew.
MAX_SPILL_BYTES = {256: 12, 512: 400}
# The functions ptxas compiles apart (the kernel's entry points and what they call without inlining it).
NOT_INLINED = ("wavec_fill_weights", "wavec_persistent", "ewise_body", "matmul_body", "matmul_gemm_body",
               "stream_gemmILi1ELb0", "stream_gemmILi1ELb1", "stream_gemmILi4ELb0", "stream_gemmILi4ELb1",
               "mma_stream_gemmILb0", "mma_stream_gemmILb1", "column_gemm",
               "conv_body", "conv_tiled_body", "conv_tiledILi1", "conv_tiledILi4", "reduce_body", "run_code",
               "Epilogue10apply_code", "Epilogue13evaluate_call",
               "strided_offset", *(f"tiled_matmulILb{along_k}ELi{vec}ELb{tf32}" for along_k in (0, 1)
                                   for vec, tf32 in ((4, 0), (4, 1), (1, 0))))


@needs_nvcc
@pytest.mark.parametrize("target, prefetch", [("h100", False), ("h200", False), ("h200", True)])
def test_kernel_compiles_for_sm90a_without_warnings_or_spills(tmp_path, target, prefetch):
    """The kernel at each shipped target's block size, and with the weight prefetch on (kPrefetchWeights:
    weights past an ``l2_bytes`` of 4)."""
    from wavec.hw import load_hw

    threads = int(load_hw(target)["threads_per_block"])
    meta = {**build_test_profile()[0].meta, "block_threads": threads, **({"l2_bytes": 4} if prefetch else {})}
    report = ptxas_compile(tmp_path, generate_kernel(meta))
    assert "warning" not in report.lower(), report
    functions = re.findall(r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                           r"(\d+) bytes spill loads", report)
    assert sorted(next(n for n in NOT_INLINED if n in name) for name, _, _ in functions) == sorted(NOT_INLINED), report
    assert max(int(b) for _, *pair in functions for b in pair) <= MAX_SPILL_BYTES[threads], report
    persistent = report[report.index(f"Compiling entry function '{codegen.KERNEL_NAME}'"):]
    regs = int(re.search(r"Used (\d+) registers", persistent).group(1))
    assert regs <= 65536 // threads, report  # __launch_bounds__(threads, 1): one block per SM


def test_weights_are_prefetched_only_when_they_outgrow_l2():
    """prefetch_weights: on for weights larger than the target's L2 (bench/gemm.py's 134 MB at 60 MB), off
    for Silero's 1.2 MB and for profiles without ``l2_bytes``; wavec.compile records the target's L2."""
    from wavec.hw import load_hw

    l2 = int(load_hw("h200")["l2_bytes"])
    assert codegen.prefetch_weights({"l2_bytes": l2, "arena_bytes": {"weights": 134217728}})
    assert not codegen.prefetch_weights({"l2_bytes": l2, "arena_bytes": {"weights": 1_200_000}})
    assert not codegen.prefetch_weights({"arena_bytes": {"weights": 134217728}})
    meta = build_test_profile()[0].meta
    assert "constexpr bool kPrefetchWeights = false;" in generate_kernel(meta)
    assert "constexpr bool kPrefetchWeights = true;" in generate_kernel({**meta, "l2_bytes": 4})


def test_compiled_profiles_carry_their_targets_l2():
    import wavec
    from wavec.hw import load_hw
    from wavec.models import silero_vad_path

    profile = wavec.compile(silero_vad_path(), sessions=1, bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")])
    assert profile.meta["l2_bytes"] == load_hw("h200")["l2_bytes"]
    assert "constexpr bool kPrefetchWeights = false;" in profile.kernel_source


# ---------------------------------------------------------------------------------------------
# Build cache and errors


@needs_nvcc
def test_build_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEC_CUBIN_CACHE", str(tmp_path))
    src = generate_kernel(build_test_profile()[0].meta)
    first = build.build_cubin(src)
    assert first.is_file() and first.stat().st_size > 0
    assert "registers" in build.build_report(first)

    def no_nvcc(*a, **k):
        raise AssertionError("a cached build ran nvcc")

    monkeypatch.setattr(build, "compile_source", no_nvcc)
    assert build.build_cubin(src) == first
    other = build_test_profile(sessions=7)[0]
    monkeypatch.undo()
    monkeypatch.setenv("WAVEC_CUBIN_CACHE", str(tmp_path))
    assert build.build_cubin(generate_kernel(other.meta)) != first


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    with pytest.raises(RuntimeBackendError, match="nvcc not found"):
        build.build_cubin("__global__ void k() {}")


@needs_nvcc
def test_nvcc_failure_shows_its_message(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEC_CUBIN_CACHE", str(tmp_path))
    with pytest.raises(RuntimeBackendError, match=r"nvcc failed.*(?s:.*)undefined_thing"):
        build.build_cubin("__global__ void k() { undefined_thing(); }")


def test_import_needs_numpy_alone():
    code_ = "import sys, wavec.targets.cuda; print(sorted(m for m in sys.modules if m.split('.')[0] in ('cuda', 'xdsl')))"
    out = subprocess.run([sys.executable, "-c", code_], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(runtime.gpu_available(), reason="checks the error path of a machine without a GPU")
def test_without_gpu_run_beats_raises_backend_error():
    profile, _ = build_test_profile()
    frames, reset = random_run(profile, 1)
    with pytest.raises(RuntimeBackendError):
        profile.run(frames, backend="cuda", reset=reset)


def test_test_program_matches_reference_on_interp():
    """The profile the GPU tests use is right: the interpreter agrees with the numpy reference."""
    interp = pytest.importorskip("wavec.targets.interp")
    profile, weights = build_test_profile()
    frames, reset = random_run(profile, 4)
    got = interp.run_beats(profile, frames, reset)
    assert max_err(got, reference(weights, frames, reset)) <= 1e-4


# ---------------------------------------------------------------------------------------------
# On the GPU


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("sessions", [5, 300])  # 300 > blockDim: a thread's pairs span sessions
def test_cuda_matches_interp_and_reference(sessions):
    from wavec.targets.interp import run_beats as interp_run

    profile, weights = build_test_profile(sessions=sessions)
    frames, reset = random_run(profile, 6)
    got = profile.run(frames, backend="cuda", reset=reset)
    want = interp_run(profile, frames, reset)
    assert max_err(got, {k: v.astype(np.float64) for k, v in want.items()}) <= 1e-4
    assert max_err(got, reference(weights, frames, reset)) <= 1e-4


@pytest.mark.parametrize("dims", [PROLOGUE, LARGE, TILED, TILED_NK], ids=["prologue", "large", "tiled", "tiled-nk"])
def test_prologue_profile_interp_matches_reference(dims):
    """The hand-built prologue programs on the interpreter (what the GPU test below compares against)."""
    from wavec.targets.interp import run_beats as interp_run
    from wavec.verify import verify_profile

    profile, weights = build_prologue_profile(dims=dims)
    verify_profile(profile)
    frames, reset = random_run(profile, 2)
    assert max_err(interp_run(profile, frames, reset), prologue_reference(weights, frames, dims)) <= 1e-5


@pytest.mark.parametrize("switch", ["kTiledGemm", "kStreamGemm", "kTgFewRows"])
def test_the_gemm_bodies_are_on_by_default(switch):
    """Kernels are generated with the tiled and the streaming GEMM on, and the tiled GEMM taking the narrow
    pass's tiles of 9 to 48 rows and a short k; `--set NAME=false` (codegen.with_constant) is the baseline an A/B
    of each runs against."""
    profile, _ = build_prologue_profile(dims=TILED)
    source = codegen.generate_kernel(profile.meta)
    assert f"constexpr bool {switch} = true;" in source
    assert f"constexpr bool {switch} = false;" in codegen.with_constant(source, switch, "false")


def test_a_kernel_switch_is_set_by_name_and_an_unknown_one_refused():
    """codegen.with_constant, the A/B switch of scripts/gpu_check.py --set."""
    import argparse

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from gpu_check import constant_setting

    profile, _ = build_test_profile()
    source = codegen.generate_kernel(profile.meta)
    assert "constexpr int kConvUnroll = 4;" in source
    assert "constexpr int kConvUnroll = 2;" in codegen.with_constant(source, "kConvUnroll", "2")
    assert "constexpr unsigned kMaxBackoffNs = 64;" in codegen.with_constant(source, "kMaxBackoffNs", "64")
    with pytest.raises(ValueError, match="kNoSuchSwitch"):
        codegen.with_constant(source, "kNoSuchSwitch", "true")
    assert constant_setting("kConvUnroll=2") == "kConvUnroll=2"
    for bad in ("kTiledGemm", "kTiledGemm=maybe", "2x=true"):
        with pytest.raises(argparse.ArgumentTypeError):
            constant_setting(bad)


def test_the_tiled_gemm_probe_cuts_each_part_out_of_the_kernel_once():
    """scripts/tiled_gemm_probe.py's variants apply to the generated kernel (each cut's text occurs once, and
    is gone after it), and a kernel whose text has moved on is refused with the cut's name."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from tiled_gemm_probe import CUTS, VARIANTS, variant_source

    source = codegen.generate_kernel(build_test_profile()[0].meta)
    for name, cuts in VARIANTS.items():
        cut = variant_source(source, cuts)
        assert (cut == source) == (not cuts), name
        assert all(old not in cut and new in cut for c in cuts for old, new in CUTS[c])
    with pytest.raises(ValueError, match="'stores'"):
        variant_source(source.replace("tg_store(ops, at.n0", "tg_store(ops, at.n_0"), ["stores"])


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dims, switches", [(PROLOGUE, ()), (LARGE, ()), (TILED, ()), (TILED_NK, ()),
                                            (TILED, ("kTiledGemm",)), (TILED, ("kTiledGemm", "kStreamGemm"))],
                         ids=["prologue", "large", "tiled", "tiled-nk", "stream", "lane-groups"])
@pytest.mark.parametrize("sessions", [5, 72, 300])
def test_cuda_prologue_matches_interp_and_reference(sessions, dims, switches):
    """TILED and LARGE at 5 sessions run the streaming GEMM, TILED_NK the column GEMM (b k-contiguous, 5 rows);
    at 72 sessions TILED's and TILED_NK's first tile (72 x 128, copies 16 bytes wide) runs the tiled GEMM's
    tall block (3 blocks of 80 x 48, not 4 of 64 x 64); ``switches`` turned off leave the streaming GEMM every
    tile it takes ("stream"), or give them all to the lane-group body."""
    from wavec.targets.interp import run_beats as interp_run

    profile, weights = build_prologue_profile(sessions=sessions, dims=dims)
    frames, reset = random_run(profile, 3)
    source = codegen.generate_kernel(profile.meta)
    for switch in switches:
        source = codegen.with_constant(source, switch, "false")
    cubin = build.build_cubin(source)
    got = runtime.run_beats(profile, frames, reset, cubin=cubin)
    want = interp_run(profile, frames, reset)
    # fp32 sums over K = 1100 of unit-variance terms: the H200 measured 1.4e-6 on the tiled GEMM, and 1.9e-5
    # when its tensor cores accumulated every chunk (their truncation, codegen's tiled_gemm); 1e-4 with the
    # prologue's rsqrt.
    tol = 1e-4 if dims["prologue"] else 5e-6
    assert max_err(got, {k: v.astype(np.float64) for k, v in want.items()}) <= tol
    assert max_err(got, prologue_reference(weights, frames, dims)) <= tol


@pytest.mark.gpu
@needs_gpu
def test_session_serves_beats_and_records_latency():
    """Odd beats collect views of the pinned staging (copy=False, what the server stores from), even ones copies."""
    profile, weights = build_test_profile()
    frames, reset = random_run(profile, 20)
    ref = reference(weights, frames, reset)
    with runtime.CudaSession(profile) as s:
        for b in range(20):
            if b % 2:
                s.publish({k: v[b] for k, v in frames.items()}, reset[b])
                out = s.collect(copy=False)
            else:
                out = s.beat({k: v[b] for k, v in frames.items()}, reset[b])
            assert max_err({k: out[k][None] for k in out}, {k: ref[k][b : b + 1] for k in ref}) <= 1e-4
        assert len(s.latencies_us) == 20 and all(t > 0 for t in s.latencies_us)


@pytest.mark.gpu
@needs_gpu
def test_deadlock_is_reported_not_hung():
    pb = ProfileBuilder(sessions=2, workers=2)
    x = pb.input("x", (4,))
    yv = pb.output("y", (4,))
    never = pb.counter()
    pb.task(ewise((4,), 1, "%0"), [x], yv, worker=1, waits=[(never, 1)])
    profile = pb.build()
    src = generate_kernel(profile.meta).replace(
        "kWaitTimeoutNs = 10000000000ull", "kWaitTimeoutNs = 200000000ull"
    )
    profile.kernel_source = src
    frames = {"x": np.zeros((1, 2, 4), np.float32)}
    with pytest.raises(RuntimeBackendError, match="timed out"):
        runtime.run_beats(profile, frames, np.zeros((1, 2), bool), timeout_s=10)


# ---------------------------------------------------------------------------------------------
# The runtime's host side against a fake driver (no GPU needed): device pointers are host addresses,
# and a thread plays the kernel by running the interpreter over the "device" arenas, speaking the same
# flag protocol. Checks allocation sizes, state initialization, staging, the epoch handshake, the
# double-buffer halves and the kernel argument block.


class FakeDriver:
    import enum as _enum

    class CUresult(_enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_NOT_READY = 600

    class CUdevice_attribute:  # noqa: N801 - the driver's name
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = "major"
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = "minor"
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = "sms"
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = "coop"

    class CUstream_flags:  # noqa: N801
        CU_STREAM_NON_BLOCKING = 1

    class CUfunction_attribute:  # noqa: N801
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = "max_threads"
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max_dynamic_smem"

    CU_MEMHOSTALLOC_PORTABLE = 1
    CU_MEMHOSTALLOC_DEVICEMAP = 2

    def __init__(self, profile):
        self.profile = profile
        self.buffers: dict[int, np.ndarray] = {}
        self.kernel = None
        self.args = None
        self.ok = self.CUresult.CUDA_SUCCESS

    def _buf(self, n: int) -> int:
        arr = np.zeros(-(-n // 16) * 16 + 16, np.uint8)
        self.buffers[arr.ctypes.data] = arr
        return arr.ctypes.data

    def cuGetErrorName(self, err):
        return self.ok, err.name.encode()

    def cuInit(self, flags):
        return (self.ok,)

    def cuDeviceGetCount(self):
        return self.ok, 1

    def cuDeviceGet(self, ordinal):
        return self.ok, ordinal

    def cuDeviceGetAttribute(self, attr, dev):
        return self.ok, {"major": 9, "minor": 0, "sms": 132, "coop": 1}[attr]

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.ok, "ctx"

    def cuCtxSetCurrent(self, ctx):
        return (self.ok,)

    def cuModuleLoadData(self, image):
        return self.ok, "module"

    def cuModuleGetFunction(self, module, name):
        assert name == codegen.KERNEL_NAME.encode()
        return self.ok, "function"

    def cuFuncGetAttribute(self, attribute, f):
        assert attribute == "max_threads" and f == "function"
        return self.ok, codegen.block_threads(self.profile.meta)  # the kernel's __launch_bounds__

    def cuModuleGetGlobal(self, module, name):
        """The module's dynamic shared memory, as a cubin built with other stages would export it: not this
        checkout's codegen.gemm_smem_bytes, so a launch with that number shows."""
        import ctypes

        assert module == "module" and name == codegen.GEMM_SMEM_SYMBOL.encode()
        ptr = self._buf(4)
        self.exported_smem = codegen.gemm_smem_bytes(codegen.block_threads(self.profile.meta)) // 2 + 16
        ctypes.c_uint32.from_address(ptr).value = self.exported_smem
        return self.ok, ptr, 4

    def cuFuncSetAttribute(self, f, attribute, value):
        assert attribute == "max_dynamic_smem" and f == "function"
        self.dynamic_smem = value
        return (self.ok,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, f, threads, smem):
        assert threads == codegen.block_threads(self.profile.meta) and smem == self.dynamic_smem
        return self.ok, 1

    def cuMemAlloc(self, n):
        return self.ok, self._buf(n)

    def cuMemsetD8(self, ptr, value, n):
        import ctypes

        ctypes.memset(int(ptr), value, n)
        return (self.ok,)

    def cuMemcpyHtoD(self, dst, src, n):
        import ctypes

        ctypes.memmove(int(dst), int(src), n)
        return (self.ok,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        return self.cuMemcpyHtoD(dst, src, n)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        return self.cuMemcpyHtoD(dst, src, n)

    def cuMemcpyDtoH(self, dst, src, n):
        return self.cuMemcpyHtoD(dst, src, n)

    def cuMemHostAlloc(self, n, flags):
        return self.ok, self._buf(n)

    def cuMemHostGetDevicePointer(self, ptr, flags):
        return self.ok, ptr

    def cuStreamCreate(self, flags):
        return self.ok, object()

    def cuStreamSynchronize(self, stream):
        return (self.ok,)

    def cuCtxSynchronize(self):
        return (self.ok,)

    def cuStreamQuery(self, stream):
        running = self.kernel is not None and self.kernel.is_alive()
        return (self.CUresult.CUDA_ERROR_NOT_READY if running else self.ok,)

    def cuLaunchCooperativeKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params):
        import ctypes
        import threading

        threads = codegen.block_threads(self.profile.meta)
        assert (gx, gy, gz, bx, by, bz, smem) == (self.profile.meta["workers"], 1, 1, threads, 1, 1, self.dynamic_smem)
        assert smem == self.exported_smem != codegen.gemm_smem_bytes(threads)  # the module's number, not codegen's
        ptrs = (ctypes.c_void_p * 14).from_address(params)
        self.args = [ctypes.c_uint64.from_address(p).value for p in ptrs]
        self.kernel = threading.Thread(target=self._kernel, daemon=True)
        self.kernel.start()
        return (self.ok,)

    def _kernel(self):
        import ctypes
        import time as _time

        from wavec.opcodes import Arena
        from wavec.targets.interp import Interpreter

        (_pl, _wt, _pa, weights, state, act, inp, out, _ctr, flags_p, epoch_p, in_half, out_half, trace_p) = self.args
        ab = self.profile.meta["arena_bytes"]

        def view(addr, n):
            return np.ctypeslib.as_array((ctypes.c_uint8 * (-(-n // 4) * 4)).from_address(addr))

        machine = Interpreter(self.profile, seed=3)
        machine.arenas[Arena.WEIGHTS] = view(weights, ab["weights"])
        machine.arenas[Arena.STATE] = view(state, ab["state"])
        machine.arenas[Arena.ACT] = view(act, ab["act"])
        machine.arenas[Arena.INPUT] = (view(inp, in_half), view(inp + in_half, in_half))
        machine.arenas[Arena.OUTPUT] = (view(out, out_half), view(out + out_half, out_half))
        flags = np.ctypeslib.as_array((ctypes.c_uint32 * 4).from_address(flags_p))
        epoch = np.ctypeslib.as_array((ctypes.c_uint32 * 8).from_address(epoch_p))
        beat = 0
        while True:
            while flags[codegen.HOST_INPUT_EPOCH] < beat + 1 and not flags[codegen.HOST_STOP]:
                _time.sleep(1e-4)
            if flags[codegen.HOST_STOP]:
                return
            machine.run_beat()
            if trace_p:  # the stamps of a kernel whose every task waits 1 us per wait slot and runs 2 us
                rows = len(self.profile.payloads)
                stamps = np.ctypeslib.as_array((ctypes.c_uint64 * (3 * rows)).from_address(trace_p)).reshape(rows, 3)
                stamps[:, 0] = _time.perf_counter_ns()
                stamps[:, 1] = stamps[:, 0] + 1000 * self.profile.payloads["n_waits"]
                stamps[:, 2] = stamps[:, 1] + 2000
            beat += 1
            epoch[codegen.OUT_EPOCH] = beat

    def __getattr__(self, name):  # frees, destroys, unloads, releases
        if name.startswith("cu"):
            return lambda *a: (self.ok,)
        raise AttributeError(name)


@pytest.mark.parametrize("sessions, threads", [(5, None), (33, 512)])
def test_runtime_protocol_against_a_fake_driver(monkeypatch, tmp_path, sessions, threads):
    """The runtime's launch protocol against a driver whose kernel is the interpreter; ``threads``: the
    profile's block size (a target's threads_per_block), which the launch must use (FakeDriver asserts)."""
    interp = pytest.importorskip("wavec.targets.interp")
    profile, weights = build_test_profile(sessions=sessions)
    if threads:
        profile.meta["block_threads"] = threads
        assert f"kBlockThreads = {threads};" in codegen.generate_kernel(profile.meta)
    fake = FakeDriver(profile)
    monkeypatch.setattr(runtime, "_cu", fake)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    frames, reset = random_run(profile, 5)
    lat: list[float] = []
    got = runtime.run_beats(profile, frames, reset, cubin=cubin, latencies=lat)
    assert max_err(got, {k: v.astype(np.float64) for k, v in interp.run_beats(profile, frames, reset).items()}) == 0
    assert max_err(got, reference(weights, frames, reset)) <= 1e-4
    assert len(lat) == 5
    assert fake.args[11:] == [profile.meta["arena_bytes"]["input"], profile.meta["arena_bytes"]["output"], 0]  # no trace
    assert not fake.kernel.is_alive()  # close() set the stop flag and the "kernel" returned


def test_timeline_of_a_fake_kernel_run(monkeypatch, tmp_path):
    """run_beats' ``timeline`` option runs the kernel traced and reads every beat's stamps back (the fake
    kernel stamps 1 us of waiting per wait slot and 2 us of body per task)."""
    pytest.importorskip("wavec.targets.interp")
    from wavec.targets.cuda.timeline import Timeline

    profile, _ = build_test_profile(sessions=5)
    profile.meta["phases"] = [{"name": "every task", "tasks": len(profile.payloads)}]  # the hand-built program has none
    fake = FakeDriver(profile)
    monkeypatch.setattr(runtime, "_cu", fake)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    frames, reset = random_run(profile, 3)
    timeline = Timeline()
    runtime.run_beats(profile, frames, reset, cubin=cubin, timeline=timeline)
    assert fake.args[13] != 0  # the kernel got a trace buffer
    rows = len(profile.payloads)
    assert [b["beat"] for b in timeline.beats] == [0, 1, 2]
    for beat in timeline.beats:
        assert beat["busy_us"] == 2.0 * rows
        assert beat["wait_us"] == 1.0 * int(profile.payloads["n_waits"].sum())
    assert sum(p["tasks"] for p in timeline.phases) == rows


def test_timeline_sums_by_hand():
    """Three tasks of two phases on 2 workers, stamps in ns (wait begins, body begins, body ends)."""
    from types import SimpleNamespace

    from wavec.targets.cuda.timeline import beat_summary, phase_rows

    payloads = np.zeros(3, [("task", "<u4")])
    payloads["task"] = [0, 2, 1]  # rows in worker order; tasks 0 and 1 are phase a's, 2 is b's
    profile = SimpleNamespace(payloads=payloads, meta={"workers": 2, "phases": [{"name": "a", "tasks": 2},
                                                                                 {"name": "b", "tasks": 1}]})
    trace = np.array([[0, 1000, 3000], [500, 4000, 6000], [200, 200, 2200]], np.uint64)
    assert beat_summary(profile, trace) == {"span_us": 6.0, "busy_us": 6.0, "wait_us": 4.5, "wait_share": 0.375,
                                            "workers": 2}
    a, b = phase_rows(profile, trace)
    assert a == {"phase": "a", "tasks": 2, "start_us": 0.2, "span_us": 2.8, "body_max_us": 2.0, "body_p50_us": 2.0,
                 "wait_us": 1.0}
    assert b == {"phase": "b", "tasks": 1, "start_us": 4.0, "span_us": 2.0, "body_max_us": 2.0, "body_p50_us": 2.0,
                 "wait_us": 3.5}


def test_runtime_reports_a_kernel_error(monkeypatch, tmp_path):
    pytest.importorskip("wavec.targets.interp")
    profile, _ = build_test_profile()
    fake = FakeDriver(profile)

    def failing_kernel():
        import ctypes

        epoch = np.ctypeslib.as_array((ctypes.c_uint32 * 8).from_address(fake.args[10]))
        epoch[codegen.OUT_ERROR : codegen.OUT_ERROR + 7] = [1, 7, 3, 0, 2, 0, 1]

    fake._kernel = failing_kernel
    monkeypatch.setattr(runtime, "_cu", fake)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    frames, reset = random_run(profile, 1)
    with pytest.raises(RuntimeBackendError, match=r"timed out .*\(task 7, counter 3, seen 0, target 2"):
        runtime.run_beats(profile, frames, reset, cubin=cubin, timeout_s=5)
