"""Generates the persistent kernel (``kernel.cu``) of one profile.

The source is deterministic byte for byte for a given profile.json: the Payload struct comes from
wavec.payload.cuda_struct(), the elementwise function tables from the UNARY / BINARY / TERNARY dicts of
wavec.opcodes (same order, same C expressions, so the two cannot drift), and every number that depends on
the profile is a named ``constexpr`` with a comment.

Protocol between this kernel and the host runtime (targets/cuda/runtime.py), version ``PROTOCOL``:

- ``host_flags`` (mapped pinned host memory, written by the host): ``[0]`` the input epoch (beat b's inputs
  are in device memory once it reads b+1), ``[1]`` stop (non-zero ends the kernel at the next beat boundary,
  or inside any wait).
- ``out_epoch`` (mapped pinned host memory, written by the kernel): ``[0]`` the output epoch (b+1 once
  every output of beat b is in device memory), ``[1..7]`` the first error the kernel hit (see ``kErr*``).
- ``counters``: the profile's ``n_counters`` task counters followed by ``EXTRA_COUNTERS`` words the kernel
  keeps for itself (the epoch and stop mirrors); all zero before the launch.

State reset is the program's job, as in the interpreter: the runtime writes the reset flags into the input
arena and the compiled tasks read them. The runtime initializes every state slot once, before the launch.
A task whose ``signal`` is counter 0 (the end-of-beat counter) signals nothing; a task whose
``signal_phase`` is not 0 also increments that counter (its phase-wide counter), each with a release.

Only block 0 polls host memory; it mirrors the epoch into device memory for the other blocks, so an idle
cohort costs one PCIe poller rather than one per SM.
"""

from __future__ import annotations

import re
from string import Template

from wavec.opcodes import (BINARY, COLUMN_GEMM_BLOCKS, COLUMN_GEMM_ROWS, GEMM_COLS, MAX_INPUTS, OUT, REDUCE_KINDS,
                           TERNARY, UNARY, Arena, Expr, Insn, Opcode, f32_bits, parse_expr)
from wavec.payload import BEAT_DONE_COUNTER, MAX_WAITS, N_OPERANDS, cuda_struct

PROTOCOL = 8  # 2: the kernel takes the optional per-task trace buffer; 3: a task signals signal_phase too;
# 4: MATMUL and CONV parameter blocks end with an epilogue (wavec.opcodes.Epilogue); 5: a MATMUL block has a
# prologue (wavec.opcodes.Prologue) before its epilogue; 6: an EWISE block ends with its generated-body index;
# 7: the kernel is launched with gemm_smem_bytes of dynamic shared memory; 8: an epilogue ends with its
# generated-body index
PROTOCOL_MARKER = f"// wavec-cuda-protocol: {PROTOCOL}"
KERNEL_NAME = "wavec_persistent"
GEMM_SMEM_SYMBOL = "wavec_gemm_smem_bytes"  # the kernel's dynamic shared memory, in bytes, as it needs it
FILL_KERNEL_NAME = "wavec_fill_weights"
FILL_KINDS = {"uniform": 0, "constant": 1}  # wavec.weights spec kinds -> the fill kernel's `kind`
BLOCK_THREADS = 256  # a target without threads_per_block, profiles that predate it; the fill kernel's block
STACK_DEPTH = 16  # elementwise bytecode stack (wavec.opcodes.compile_expr promises at most 16)
EXTRA_COUNTERS = 2  # epoch mirror, stop mirror
HOST_FLAG_WORDS = 4
OUT_EPOCH_WORDS = 8

# host_flags / out_epoch word indices (the runtime imports these).
HOST_INPUT_EPOCH, HOST_STOP = 0, 1
OUT_EPOCH, OUT_ERROR, OUT_ERROR_TASK, OUT_ERROR_COUNTER, OUT_ERROR_SEEN, OUT_ERROR_TARGET, OUT_ERROR_BEAT, OUT_ERROR_WORKER = range(8)
ERRORS = {
    1: "a counter wait timed out (deadlock, or a producer that never signals)",
    2: "a payload has an unknown opcode",
    3: "an elementwise program (an EWISE task's, a MATMUL prologue or a MATMUL / CONV epilogue) is malformed or overflowed its 16-deep stack",
    4: "a reduce task has an unknown kind",
    5: "the runtime passed input/output half sizes other than the profile's (seen = input, target = output)",
    6: "a payload's session range passes the cohort (seen = session_end, target = sessions)",
}


def _c_name(text: object) -> str:
    """A name made safe for a C comment or string literal (the profile's names are user text)."""
    return re.sub(r"[^A-Za-z0-9_.:/+-]", "_", str(text))


def total_counters(meta: dict) -> int:
    """uint32 words the runtime allocates for ``counters``: the profile's plus the kernel's own."""
    return int(meta["n_counters"]) + EXTRA_COUNTERS


def _c_float_fn(table: dict, params: str, name: str, doc: str) -> str:
    args = ", ".join(f"float {p}" for p in params)
    lines = [f"// {doc}", f"__device__ __forceinline__ float {name}(unsigned code, {args}) {{", "  switch (code) {"]
    for code, (fn, (_np, c_expr)) in enumerate(table.items()):
        lines.append(f"    case {code}: return {c_expr};  // {fn}")
    lines.append("    default: return __int_as_float(0x7fffffff);  // unknown code: NaN")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _c_comment(text: object) -> str:
    """Text made safe for a one-line // comment (no newline, no line-continuing backslash)."""
    return re.sub(r"[^A-Za-z0-9_.:/+%,()<> -]", "_", str(text))


def _c_expr(expr: Expr) -> str:
    """An elementwise expression as CUDA C over ``v[i]`` (input ``%i``), through the kernel's function tables
    with constant codes: inlined, each folds to its one operation."""
    if expr.kind == "input":
        return f"v[{int(expr.value)}]"
    if expr.kind == "const":
        return f"__int_as_float({f32_bits(float(expr.value)):#010x})"
    args = ", ".join(_c_expr(a) for a in expr.args)
    name = str(expr.value)
    for table, fn in ((UNARY, "unary_op"), (BINARY, "binary_op"), (TERNARY, "ternary_op")):
        if name in table:
            return f"{fn}({list(table).index(name)}u, {args})"
    raise ValueError(f"epilogue function {name!r} is not in wavec.opcodes' tables")


def epilogue_generated_source(meta: dict) -> str:
    """``generated_epilogue``: each profile.json ``epilogue_bodies`` entry (numbered by wpk-payload) as one
    case of a switch, so an epilogue costs its operations, not the bytecode interpreter's loop (one-session
    Silero's CONV and MATMUL tasks spent about 1 us each in it: clock64 probes, bench/RESULTS.md fifteenth run).
    An unknown index sets the error flag and gives NaN, as malformed bytecode does. Inlined into its two
    callers (Epilogue::apply_code and Epilogue::evaluate_call), so the values stay in registers: called, they
    went through the stack."""
    lines = ["// ---- Generated epilogues (profile.json epilogue_bodies, numbered by wpk-payload) ----------------------",
             "__device__ __forceinline__ float generated_epilogue(long long body, const float (&v)[kMaxInputs], bool& error) {",
             "  switch (body) {"]
    for index, entry in enumerate(meta.get("epilogue_bodies") or []):
        lines.append(f"    case {index}:  // {_c_comment(entry['expr'])}; from {_c_comment(', '.join(entry.get('phases', [])))}")
        lines.append(f"      return {_c_expr(parse_expr(entry['expr']))};")
    lines += ["    default:", "      error = true;", "      return __int_as_float(0x7fffffff);", "  }", "}"]
    return "\n".join(lines)


def ewise_generated_source(meta: dict) -> str:
    """The generated EWISE bodies of profile.json ``ewise_bodies`` (TVM TensorIR -> CUDA, see
    wavec.targets.cuda.tvm_ewise) and ``run_generated_ewise``, which calls body ``body`` over a task's tile
    (its sessions and elements) and returns false when this kernel has no such body for the block's rank
    and input count: the bytecode interpreter then runs the task."""
    from wavec.targets.cuda.tvm_ewise import generated_bodies

    table = list(meta.get("ewise_bodies") or [])
    bodies = generated_bodies(table, block_threads(meta))
    lines = ["// ---- Generated EWISE bodies (wavec.targets.cuda.tvm_ewise: TVM TensorIR -> CUDA, sm_90) --------------"]
    if bodies is None:
        lines.append(f"// apache-tvm was not importable where this kernel was generated: the {len(table)} bodies of")
        lines.append("// profile.json ewise_bodies are absent, and every EWISE task runs the bytecode interpreter.")
        bodies = []
    elif not bodies:
        lines.append("// none: the profile numbered no EWISE bodies (no EWISE tasks, or no TVM at compile time).")
    cases = []
    for index, (entry, body) in enumerate(zip(table, bodies)):
        rank, n_in = int(entry["rank"]), int(entry["n_inputs"])
        if isinstance(body, str):  # TVM failed on it: the bytecode interpreter runs its tasks
            lines.append(f"// EWISE body {index}: {_c_comment(entry['expr'])}: not generated (TVM raised "
                         f"{_c_comment(body)}); the bytecode interpreter runs its tasks.")
            continue
        keep = int(entry.get("keep", -1))
        kept = f"; stores only where the condition holds, input {keep} being the output" if keep >= 0 else ""
        comment = (
            f"// EWISE body {index}: {_c_comment(entry['expr'])}  (rank {rank}, {n_in} inputs{kept})\n"
            f"// from: {_c_comment(', '.join(entry.get('phases', [])))}"
        )
        lines.append(body.source(f"ewise_tvm_{index}", comment))
        args = []
        for _decl, name in body.params:
            arg = {
                "out": "out.at(t.session_begin, 0)",
                "begin": "(int)t.elem_begin",
                "end": "(int)t.elem_end",
                "sessions": "(int)(t.session_end - t.session_begin)",
                "out_sstride": "(long long)(out.sstride / sizeof(float))",
            }.get(name)
            if arg is None:
                m = re.fullmatch(r"in(\d+)(?:_(sstride|stride(\d+)))?|dim(\d+)|out_stride(\d+)", name)
                if m is None:
                    raise ValueError(f"ewise body {index}: unknown parameter {name!r}")
                k, what, d, dim, od = m.groups()
                if dim is not None:
                    arg = f"(int)shape[{dim}]"
                elif od is not None:
                    arg = f"out_strides[{od}]"
                elif what is None:
                    arg = f"in[{k}].at(t.session_begin, 0)"
                elif what == "sstride":
                    arg = f"(long long)(in[{k}].sstride / sizeof(float))"
                else:
                    arg = f"in_strides[{int(k) * rank + int(d)}]"
            args.append(arg)
        call = (",\n" + " " * len(f"      ewise_tvm_{index}(")).join(args)
        cases.append(
            f"    case {index}:  // {_c_comment(entry['expr'])}\n"
            f"      if (rank != {rank} || n_in != {n_in}) return false;\n"
            f"      ewise_tvm_{index}({call});\n"
            f"      return true;"
        )
    lines.append(
        "// Runs generated body `body` (the EWISE block's last word) over the task's tile; false when there is none\n"
        "// for the block's rank and input count, and the bytecode interpreter runs the task.\n"
        "__device__ __forceinline__ bool run_generated_ewise(long long body, const Payload& t, const OperandView& out,\n"
        "                                                    const OperandView* in, int rank, int n_in, const long long* shape,\n"
        "                                                    const long long* out_strides, const long long* in_strides) {\n"
        "  switch (body) {\n" + "".join(c + "\n" for c in cases) + "    default:\n      return false;\n  }\n}"
    )
    return "\n".join(lines)


def with_constant(source: str, name: str, value: str) -> str:
    """``source`` (a generated kernel) with its ``constexpr bool|int|unsigned NAME`` set to ``value``: the A/B
    switch of a body variant (scripts/gpu_check.py --set). Raises ValueError when the kernel has no such
    constant."""
    pattern = re.compile(rf"constexpr (bool|int|unsigned) {re.escape(name)} = [^;]+;")
    out, n = pattern.subn(lambda m: f"constexpr {m.group(1)} {name} = {value};", source, count=1)
    if n != 1:
        raise ValueError(f"the kernel has no constexpr bool, int or unsigned named {name!r}")
    return out


def block_threads(profile_meta: dict) -> int:
    """Threads per persistent block: profile.json's ``block_threads`` (the target's ``threads_per_block``,
    targets/hw/*.yaml), BLOCK_THREADS for profiles that predate it. The kernel's __launch_bounds__ carry it
    and the runtime launches with what the built function reports."""
    return int(profile_meta.get("block_threads", BLOCK_THREADS))


def prefetch_weights(profile_meta: dict) -> bool:
    """Whether the kernel prefetches a task's weight slice into L2 while the task waits (kPrefetchWeights):
    when the weights outgrow the target's L2 (profile.json's ``l2_bytes``), so every beat reads them from
    HBM. Measured on the H200 (bench/RESULTS.md, sixth run), p50 with / without: 8 chained 2048 x 2048
    linears (134 MB) 484.1 / 576.3 us at 8 sessions, 2,593.7 / 2,829.1 at 64, 208.6 / 197.1 at 1; Silero
    (1.2 MB, resident in L2) 109.3 / 98.4 us at 1 session, 159.2 / 152.0 at 64."""
    l2 = int(profile_meta.get("l2_bytes", 0))
    return l2 > 0 and int(profile_meta.get("arena_bytes", {}).get("weights", 0)) > l2


TILED_GEMM_STAGES = 4  # kTgStages: chunks the tiled GEMM stages at once


def tiled_gemm_stage_floats(threads: int, warps_m: int, fm: int = 1, fn: int = 2, k: int | None = None) -> int:
    """Floats of one stage of the tiled GEMM's block of ``warps_m`` warps along m, each ``fm`` x ``fn`` m16n8
    fragments, over chunks of ``k`` (default kTgK) (TgBlock::kStageFloats): A [kM, kLd] and B [kN, kLd] or
    [k, kN + 8], kM = 16 fm warps_m, kN = 8 fn (threads / 32 // warps_m), kLd = k + 4."""
    k = k or (64 if threads == 512 else 32)
    m, n, ld = 16 * fm * warps_m, 8 * fn * (threads // 32 // warps_m), k + 4
    return m * ld + max(n * ld, k * (n + 8))


def tiled_gemm_block_floats(threads: int, warps_m: int, fm: int = 1, fn: int = 2, k: int | None = None) -> int:
    """Floats of the tiled GEMM's block of outputs, kM x kN (its outputs as tg_store_staged stages them); ``k``,
    the chunk, does not size it (taken so that one block's arguments serve both this and the stage's size)."""
    return 16 * fm * warps_m * 8 * fn * (threads // 32 // warps_m)


TALL_WARPS_M = 5  # TgTall: the 80 x 48 block the kernel runs at 512 threads
BIG_BLOCK = dict(warps_m=4, fm=2, fn=2, k=32)  # TgBig: the 128 x 64 block of 32 x 16 warp tiles at 512 threads


def gemm_smem_bytes(threads: int) -> int:
    """Bytes of dynamic shared memory the kernel of ``threads``-thread blocks needs (it exports the number as
    GEMM_SMEM_SYMBOL, which the runtime launches with): the GEMM bodies' buffer (kGemmSmemFloats), the tiled
    GEMM's TILED_GEMM_STAGES stages of its largest block (64 x kTgN, and at 512 threads the 80 x 48 TgTall and
    the 128 x 64 TgBig) and its largest block of outputs (tg_store_staged), or the streaming GEMMs' threads x 8
    floats, the larger. The kernel's static_assert checks this number against its own geometry, so the two
    cannot drift. 512 threads: 4 x 9,024 floats (TgTall's stages) + 8,192 (TgBig's outputs), 177,152 bytes;
    with the kernel's 43,440 bytes of static shared memory (ptxas, Silero), 220,592 of the H200's 232,448 a
    block (227 KB: CUDA C++ Programming Guide, compute capability 9.0)."""
    tg_k = 64 if threads == 512 else 32
    fits = threads % 128 == 0 and threads <= 1024 and 64 * tg_k % threads == 0
    blocks = [dict(warps_m=4)] + ([dict(warps_m=TALL_WARPS_M), BIG_BLOCK] if threads == 512 else [])
    stage = max(tiled_gemm_stage_floats(threads, **b) for b in blocks)
    outputs = max(tiled_gemm_block_floats(threads, **b) for b in blocks)
    streaming = threads * 8
    return 4 * (max(TILED_GEMM_STAGES * stage + outputs, streaming) if fits else streaming)


MAX_PARAM_WINDOW = 512  # int64 words of a task's parameter block the kernel stages in shared memory (4 KB)


def param_window(profile_meta: dict) -> int:
    """Words of each task's parameter block the kernel copies into shared memory while the task waits
    (kParamWindow): profile.json's ``param_window`` (its longest block) when at most MAX_PARAM_WINDOW, else 0
    (the bodies read params.bin in global memory). Why: a task's wait ends with an acquire, which on sm_90
    invalidates the SM's L1 (CCTL.IVALL), so each parameter word the body reads, and each word that word's
    address depends on, is another L2 round trip; Silero's one-session beat is a chain of such tasks
    (bench/RESULTS.md, seventh run)."""
    window = int(profile_meta.get("param_window", 0))
    return window if 0 < window <= MAX_PARAM_WINDOW and "param_words" in profile_meta else 0


def generate_kernel(profile_meta: dict) -> str:
    """The CUDA C source of the persistent kernel for ``profile_meta`` (profile.json's content)."""
    meta = profile_meta
    arena = {a.name.lower(): int(meta.get("arena_bytes", {}).get(a.name.lower(), 0)) for a in Arena}
    subs = {
        "protocol_marker": PROTOCOL_MARKER,
        "model": _c_name(meta.get("model", "?")),
        "hw": _c_name(meta.get("hw", "?")),
        "payload_struct": cuda_struct(),
        "workers": int(meta["workers"]),
        "sessions": int(meta["sessions"]),
        "n_tasks": sum(int(e) - int(b) for b, e in meta.get("worker_tasks", [])),
        "n_counters": int(meta["n_counters"]),
        "extra_counters": EXTRA_COUNTERS,
        "block_threads": block_threads(meta),
        "stack_depth": STACK_DEPTH,
        "max_inputs": MAX_INPUTS,
        "prefetch_weights": "true" if prefetch_weights(meta) else "false",
        "param_window": param_window(meta),
        "param_words": int(meta.get("param_words", 0)),
        "gemm_cols": GEMM_COLS,
        "column_gemm_rows": COLUMN_GEMM_ROWS,
        "column_gemm_blocks": COLUMN_GEMM_BLOCKS,
        "tg_stages": TILED_GEMM_STAGES,
        **{f"tg_big_{name}": value for name, value in BIG_BLOCK.items()},
        "gemm_smem_floats": gemm_smem_bytes(block_threads(meta)) // 4,
        "gemm_smem_symbol": GEMM_SMEM_SYMBOL,
        "out_slot": OUT,
        "n_operands": N_OPERANDS,
        "max_waits": MAX_WAITS,
        "beat_done_counter": BEAT_DONE_COUNTER,
        "arena_weights": int(Arena.WEIGHTS),
        "arena_state": int(Arena.STATE),
        "arena_act": int(Arena.ACT),
        "arena_input": int(Arena.INPUT),
        "arena_output": int(Arena.OUTPUT),
        "bytes_weights": arena["weights"],
        "bytes_state": arena["state"],
        "bytes_act": arena["act"],
        "bytes_input": arena["input"],
        "bytes_output": arena["output"],
        "op_ewise": int(Opcode.EWISE),
        "op_matmul": int(Opcode.MATMUL),
        "op_conv": int(Opcode.CONV),
        "op_reduce": int(Opcode.REDUCE),
        "insn_input": int(Insn.INPUT),
        "insn_const": int(Insn.CONST),
        "insn_unary": int(Insn.UNARY),
        "insn_binary": int(Insn.BINARY),
        "insn_ternary": int(Insn.TERNARY),
        "reduce_consts": "\n".join(
            f"constexpr int kReduce_{k} = {i};" for i, k in enumerate(REDUCE_KINDS)
        ),
        "n_reduce_kinds": len(REDUCE_KINDS),
        "reduce_cases": "\n".join(
            f"    case kReduce_{k}: reduce_tile<kReduce_{k}>(t, p, arena_base); break;" for k in REDUCE_KINDS
        ),
        "last_reduce": REDUCE_KINDS[-1],
        "host_input_epoch": HOST_INPUT_EPOCH,
        "host_stop": HOST_STOP,
        "unary_fn": _c_float_fn(UNARY, "a", "unary_op", "wavec.opcodes.UNARY, in its order"),
        "binary_fn": _c_float_fn(BINARY, "ab", "binary_op", "wavec.opcodes.BINARY, in its order: a = second from top"),
        "ternary_fn": _c_float_fn(TERNARY, "cab", "ternary_op", "wavec.opcodes.TERNARY, in its order: c pushed first"),
        "kernel_name": KERNEL_NAME,
        "ewise_generated": ewise_generated_source(meta),
        "epilogue_bodies": epilogue_generated_source(meta),
        "fill_kernel_name": FILL_KERNEL_NAME,
        "fill_uniform": FILL_KINDS["uniform"],
    }
    return _TEMPLATE.substitute(subs)


_TEMPLATE = Template(
    r"""// kernel.cu: the persistent kernel of one wavec profile. Generated by wavec.targets.cuda.codegen; do not edit.
$protocol_marker
// model: $model   hw: $hw   sessions: $sessions   workers: $workers   tasks: $n_tasks
//
// One block per SM, resident for the whole process. Every beat, each block runs its static list of tasks
// (worker_tasks[blockIdx.x]); a task waits until counter[wait_counter[i]] >= wait_count[i] * (beat + 1)
// (acquire), runs its body with every thread of the block, then increments counter[signal] and, unless 0,
// counter[signal_phase] (release).
// Counters only grow; comparisons are wrap-safe, so a process may run for 2^32 beats and beyond.
#include <stdint.h>
#include <type_traits>

$payload_struct

namespace wavec {

// ---- Profile constants (profile.json) ---------------------------------------------------------------
constexpr unsigned kWorkers = $workers;          // blocks in the grid, one per SM ("workers")
constexpr unsigned kSessions = $sessions;        // cohort capacity N ("sessions")
constexpr unsigned kProfileCounters = $n_counters;  // task counters the schedule uses ("n_counters")
// Arena sizes in bytes ("arena_bytes"): weights $bytes_weights, state $bytes_state, activations $bytes_act.
constexpr unsigned long long kInputHalfBytes = $bytes_input;    // one half of the double-buffered input arena
constexpr unsigned long long kOutputHalfBytes = $bytes_output;  // one half of the double-buffered output arena

// ---- Kernel configuration -------------------------------------------------------------------------
constexpr unsigned kBlockThreads = $block_threads;  // threads per block (the runtime launches with this)
constexpr int kStackDepth = $stack_depth;          // elementwise bytecode stack depth
constexpr unsigned kBeatDoneCounter = $beat_done_counter;  // every worker adds 1 per beat
constexpr unsigned kEpochMirror = kProfileCounters + 0;  // block 0 copies host_flags[input epoch] here
constexpr unsigned kStopMirror = kProfileCounters + 1;   // block 0 copies host_flags[stop] here
constexpr unsigned kTotalCounters = kProfileCounters + $extra_counters;  // words the runtime allocates
constexpr int kParamWindow = $param_window;  // words of a task's parameter block staged in shared memory (0: none)
constexpr long long kParamWords = $param_words;  // params.bin's length in words ("param_words")
constexpr int kTraceWords = 3;  // optional trace, per payload row: wait begins, body begins, body ends (ns)
constexpr unsigned kMaxBackoffNs = 256;              // __nanosleep cap while spinning on device counters
constexpr unsigned kHostPollMaxBackoffNs = 512;      // cap while block 0 polls host memory (PCIe)
constexpr unsigned kStopCheckPolls = 64;             // polls between two reads of the host stop flag
constexpr unsigned long long kWaitTimeoutNs = 10000000000ull;  // a counter wait this long is a deadlock

// ---- Contract constants (wavec/opcodes.py, wavec/payload.py) --------------------------------------
constexpr int kMaxInputs = $max_inputs;   // input operand slots 0..kMaxInputs-1
constexpr int kOutSlot = $out_slot;       // the output operand slot
constexpr int kOperands = $n_operands;
constexpr int kMaxWaits = $max_waits;
constexpr unsigned kArenaWeights = $arena_weights, kArenaState = $arena_state, kArenaAct = $arena_act,
                   kArenaInput = $arena_input, kArenaOutput = $arena_output;
constexpr unsigned kOpEwise = $op_ewise, kOpMatmul = $op_matmul, kOpConv = $op_conv, kOpReduce = $op_reduce;
constexpr unsigned kInsnInput = $insn_input, kInsnConst = $insn_const, kInsnUnary = $insn_unary,
                   kInsnBinary = $insn_binary, kInsnTernary = $insn_ternary;
$reduce_consts
constexpr int kReduceKinds = $n_reduce_kinds;
static_assert(kReduce_$last_reduce + 1 == kReduceKinds, "REDUCE_KINDS table is incomplete");

// ---- Host protocol ----------------------------------------------------------------------------------
constexpr int kHostInputEpoch = $host_input_epoch;  // host_flags[]: input epoch published by the host
constexpr int kHostStop = $host_stop;               // host_flags[]: non-zero asks the kernel to return
constexpr int kOutEpoch = 0;        // out_epoch[]: beat + 1 once the beat's outputs are in device memory
constexpr int kOutError = 1;        // out_epoch[1..7]: the first error (code, task, counter, seen, target, beat, worker)
constexpr unsigned kErrWaitTimeout = 1, kErrBadOpcode = 2, kErrStack = 3, kErrReduceKind = 4, kErrArenaSize = 5,
                   kErrSessions = 6;

// ---- Memory-model helpers -------------------------------------------------------------------------
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_acquire_sys(const volatile unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Counters and epochs grow monotonically modulo 2^32: "reached" is a wrap-safe >=.
__device__ __forceinline__ bool reached(unsigned value, unsigned target) { return (int)(value - target) >= 0; }

// Claimed by the first error; device memory, since atomics on mapped host memory are not portable.
__device__ unsigned g_error_claimed = 0;

// Records the first error the kernel hits into out_epoch[1..7] (mapped host memory): the details first,
// the code (which the host polls) last.
__device__ void record_error(unsigned* out_epoch, unsigned code, unsigned task, unsigned counter, unsigned seen,
                             unsigned target, unsigned beat) {
  if (atomicCAS(&g_error_claimed, 0u, 1u) == 0u) {
    volatile unsigned* e = out_epoch;
    e[kOutError + 1] = task;
    e[kOutError + 2] = counter;
    e[kOutError + 3] = seen;
    e[kOutError + 4] = target;
    e[kOutError + 5] = beat;
    e[kOutError + 6] = blockIdx.x;
    __threadfence_system();
    st_release_sys(&out_epoch[kOutError], code);
  }
}

enum WaitResult : int { kReached = 0, kStopped = 1, kFailed = 2 };

// Spins (one thread) until *word reaches target. Every kStopCheckPolls polls it reads the stop flag:
// the host's own (over PCIe) when it is already polling host memory, else block 0's device-memory
// mirror of it, since a host read from a device-counter wait costs tens of microseconds per wait.
// With `timeout`, records kErrWaitTimeout after kWaitTimeoutNs.
template <bool kSystemScope>
__device__ int spin_until(const unsigned* word, unsigned target, const volatile unsigned* host_flags,
                          const unsigned* stop_mirror, unsigned* out_epoch, bool timeout, unsigned task,
                          unsigned counter, unsigned beat) {
  unsigned v = kSystemScope ? ld_acquire_sys(word) : ld_acquire_gpu(word);
  if (reached(v, target)) return kReached;
  const unsigned max_ns = kSystemScope ? kHostPollMaxBackoffNs : kMaxBackoffNs;
  const unsigned long long start = global_timer_ns();
  unsigned ns = 16;
  for (unsigned polls = 1;; ++polls) {
    __nanosleep(ns);
    ns = ns < max_ns ? 2 * ns : max_ns;
    v = kSystemScope ? ld_acquire_sys(word) : ld_acquire_gpu(word);
    if (reached(v, target)) return kReached;
    if (polls % kStopCheckPolls == 0) {
      const unsigned stop = kSystemScope ? ld_acquire_sys(&host_flags[kHostStop]) : ld_acquire_gpu(stop_mirror);
      if (stop != 0u) return kStopped;
      if (timeout && global_timer_ns() - start > kWaitTimeoutNs) {
        record_error(out_epoch, kErrWaitTimeout, task, counter, v, target, beat);
        return kFailed;
      }
    }
  }
}

// ---- Elementwise function tables (generated from wavec/opcodes.py) ---------------------------------
$unary_fn

$binary_fn

$ternary_fn

// ---- Task bodies ------------------------------------------------------------------------------------
// Each thread takes (session, element) pairs of the task's tile, strided by blockDim.x.
struct TileCursor {
  unsigned s, e;            // current session and element offset inside [elem_begin, elem_end)
  unsigned n, ds, de;       // elements per session; the stride split into sessions and elements
  __device__ TileCursor(const Payload& t) {
    n = t.elem_end - t.elem_begin;
    s = t.session_begin + threadIdx.x / n;
    e = threadIdx.x % n;
    ds = blockDim.x / n;
    de = blockDim.x % n;
  }
  __device__ __forceinline__ void next() {
    s += ds;
    e += de;
    if (e >= n) {
      e -= n;
      ++s;
    }
  }
};

struct OperandView {
  char* base;          // session 0 of the operand
  unsigned long long sstride;  // bytes between sessions
  __device__ __forceinline__ float* at(unsigned s, long long elem) const {
    return reinterpret_cast<float*>(base + s * sstride) + elem;
  }
};

__device__ __forceinline__ OperandView operand(const Payload& t, char* const* arena_base, int k) {
  const unsigned arena = (t.arenas >> (4 * k)) & 0xFu;
  return OperandView{arena_base[arena] + t.offset[k], t.session_stride[k]};
}

// The elementwise stack machine: runs `n_code` instructions (insn = kind << 40 | code << 32 | arg) over
// the input values `in` (INPUT k pushes in[k]); sets `error` and gives NaN on a malformed program.
__device__ __noinline__ float run_code(const long long* __restrict__ code, long long n_code, const float* in,
                                          bool& error) {
  float stack[kStackDepth];
  int sp = 0;
  for (long long pc = 0; pc < n_code; ++pc) {
    const unsigned long long w = (unsigned long long)code[pc];
    const unsigned kind = (unsigned)(w >> 40), op = (unsigned)(w >> 32) & 0xFFu, arg = (unsigned)w;
    const int pops = kind == kInsnUnary ? 1 : kind == kInsnBinary ? 2 : kind == kInsnTernary ? 3 : 0;
    if (sp < pops || sp - pops + 1 > kStackDepth) {
      error = true;
      return __int_as_float(0x7fffffff);
    }
    if (kind == kInsnInput) {
      if (arg >= (unsigned)kMaxInputs) {
        error = true;
        return __int_as_float(0x7fffffff);
      }
      stack[sp++] = in[arg];
    } else if (kind == kInsnConst) {
      stack[sp++] = __uint_as_float(arg);
    } else if (kind == kInsnUnary) {
      stack[sp - 1] = unary_op(op, stack[sp - 1]);
    } else if (kind == kInsnBinary) {
      const float b = stack[--sp];
      stack[sp - 1] = binary_op(op, stack[sp - 1], b);
    } else if (kind == kInsnTernary) {
      const float b = stack[--sp];
      const float a = stack[--sp];
      stack[sp - 1] = ternary_op(op, stack[sp - 1], a, b);
    } else {
      error = true;
      return __int_as_float(0x7fffffff);
    }
  }
  if (sp != 1) {
    error = true;
    return __int_as_float(0x7fffffff);
  }
  return stack[0];
}

$epilogue_bodies

// A MATMUL / CONV epilogue (wavec.opcodes.Epilogue): words n_extra, rank, shape[rank],
// strides[n_extra][rank], n_code, code[n_code], body, read from `ep`. Extra input k is operand slot first + k.
// A body >= 0 runs generated_epilogue, else the bytecode interpreter runs the code.
struct Epilogue {
  int n_extra, rank, first;
  const long long* shape;
  const long long* strides;
  long long n_code, body;
  const long long* code;
  OperandView extra[kMaxInputs - 1];
  Epilogue() = default;  // trivial, so the block's copy may be __shared__ (task_epilogue)
  __device__ Epilogue(const Payload& t, char* const* arena_base, const long long* ep, int first_slot) {
    n_extra = (int)ep[0];
    rank = (int)ep[1];
    first = first_slot;
    shape = ep + 2;
    strides = shape + rank;
    n_code = strides[n_extra * rank];
    code = strides + n_extra * rank + 1;
    body = code[n_code];
#pragma unroll
    for (int k = 0; k < kMaxInputs - 1; ++k)
      extra[k] = k < n_extra && first + k < kMaxInputs ? operand(t, arena_base, first + k) : OperandView{nullptr, 0};
  }
  // The stored value of session s's flat output element e whose accumulated value is acc. The identity is
  // decided inline (a call per output costs a small tile's stores more than its loads).
  __device__ __forceinline__ float apply(float acc, unsigned s, long long e, bool& error) const {
    return n_code == 0 ? acc : apply_code(acc, s, e, error);
  }
  __device__ __noinline__ float apply_code(float acc, unsigned s, long long e, bool& error) const {
    long long off[kMaxInputs - 1];
    if (!offsets(e, off)) {
      error = true;
      return __int_as_float(0x7fffffff);
    }
    float v[kMaxInputs] = {acc, first_extra(s, off, 0, off)};  // i = 0: the element itself, whatever the step
    other_extras(s, off, 0, off, v);
    return evaluate(v, error);
  }
  // Each extra's offset at session element e: e's index along each dim times the extra's stride there. False
  // when the words name more extras than the task has slots. A session's elements are counted in 32 bits (the
  // payload's elem_begin / elem_end), so e's index along each dim is too: 64-bit division is a library call.
  __device__ bool offsets(long long e, long long (&off)[kMaxInputs - 1]) const {
#pragma unroll
    for (int k = 0; k < kMaxInputs - 1; ++k) off[k] = 0;
    if (n_extra > kMaxInputs - 1 || first + n_extra > kMaxInputs) return false;
    if (n_extra == 0) return true;
    unsigned rem = (unsigned)e;
    #pragma unroll 1
    for (int d = rank - 1; d >= 0; --d) {
      const unsigned dim = (unsigned)shape[d], i = rem % dim;
      rem /= dim;
#pragma unroll
      for (int k = 0; k < kMaxInputs - 1; ++k)
        if (k < n_extra) off[k] += (long long)i * strides[k * rank + d];
    }
    return true;
  }
  // Each extra's stride along dim d of the output (0 past rank): the step from one output to the next along it.
  __device__ void dim_strides(int d, long long (&step)[kMaxInputs - 1]) const {
#pragma unroll
    for (int k = 0; k < kMaxInputs - 1; ++k) step[k] = k < n_extra && d >= 0 && d < rank ? strides[k * rank + d] : 0;
  }
  // Extra 0's value for the output i steps (`step`, dim_strides') past the element whose offsets are `off`
  // (offsets'); 0 without one. Loaded apart from the output's evaluation (finish), so that a tile loads all of
  // its outputs' before it evaluates any and their round trips overlap: evaluated one by one, each output
  // waited for its load. Only extra 0 (a bias, a residual: the epilogues' usual one), which keeps a thread's
  // eight outputs' values in registers; finish loads the others.
  __device__ __forceinline__ float first_extra(unsigned s, const long long (&off)[kMaxInputs - 1], unsigned i,
                                               const long long (&step)[kMaxInputs - 1]) const {
    return n_code != 0 && n_extra > 0 ? *extra[0].at(s, off[0] + i * step[0]) : 0.0f;
  }
  __device__ __forceinline__ void other_extras(unsigned s, const long long (&off)[kMaxInputs - 1], unsigned i,
                                               const long long (&step)[kMaxInputs - 1], float (&v)[kMaxInputs]) const {
#pragma unroll
    for (int k = 1; k < kMaxInputs - 1; ++k) v[k + 1] = k < n_extra ? *extra[k].at(s, off[k] + i * step[k]) : 0.0f;
  }
  // The stored value of that output, whose accumulated value is `acc` and extra 0's value `x0` (first_extra's);
  // the identity inline, as apply's.
  // kInline: the generated bodies' switch inline (generated_epilogue), not a call an output.
  template <bool kInline = false>
  __device__ __forceinline__ float finish(float acc, float x0, unsigned s, const long long (&off)[kMaxInputs - 1],
                                          unsigned i, const long long (&step)[kMaxInputs - 1], bool& error) const {
    if (n_code == 0) return acc;
    float v[kMaxInputs] = {acc, x0};
    other_extras(s, off, i, step, v);
    if constexpr (kInline) return evaluate(v, error);
    return evaluate_call(v[0], v[1], v[2], v[3], error);
  }
  // The values as arguments, not an array: an array passed by reference to a call lives in local memory.
  __device__ __noinline__ float evaluate_call(float v0, float v1, float v2, float v3, bool& error) const {
    static_assert(kMaxInputs == 4, "evaluate_call takes one argument per input slot");
    const float v[kMaxInputs] = {v0, v1, v2, v3};
    return evaluate(v, error);
  }
  __device__ __forceinline__ float evaluate(const float (&v)[kMaxInputs], bool& error) const {
    if (body >= 0) return generated_epilogue(body, v, error);
    // run_code reads its inputs through a pointer: a copy of its own keeps `v` out of local memory (a call
    // per output, whose stack stores and reloads were L2 round trips: bench/RESULTS.md sixteenth run).
    float in[kMaxInputs];
#pragma unroll
    for (int k = 0; k < kMaxInputs; ++k) in[k] = v[k];
    return run_code(code, n_code, in, error);
  }
};

// An output's accumulated value (a CONV's bias added) and its epilogue's extra 0 (Epilogue::first_extra).
struct EpilogueIn {
  float acc, x0;
};

// A MATMUL prologue (wavec.opcodes.Prologue): words n_extra, strides[n_extra][rank + 1], n_code, code[n_code],
// read from `pr`; applied to each element of a as it is loaded. Extra input j is operand slot 2 + j, read
// at its strides over the output's dims and k (a per-row extra has k stride 0, a per-k one zeros elsewhere).
constexpr int kMaxPrologueExtras = kMaxInputs - 2;  // a and b take two of the task's input slots
struct Prologue {
  int n_extra;
  const long long* strides;
  long long n_code;
  const long long* code;
  const long long* end;  // the first word after the prologue: the epilogue
  OperandView extra[kMaxPrologueExtras];
  Prologue() = default;  // trivial, so the block's copy may be __shared__ (task_prologue)
  __device__ Prologue(const Payload& t, char* const* arena_base, const long long* pr, int rank) {
    n_extra = (int)pr[0];
    const int n = valid() ? n_extra : 0;  // a malformed count is reported by the caller, never read past
    strides = pr + 1;
    n_code = strides[n * (rank + 1)];
    code = strides + n * (rank + 1) + 1;
    end = code + n_code;
#pragma unroll
    for (int j = 0; j < kMaxPrologueExtras; ++j)
      extra[j] = j < n_extra ? operand(t, arena_base, 2 + j) : OperandView{nullptr, 0};
  }
  __device__ __forceinline__ bool valid() const { return n_extra >= 0 && n_extra <= kMaxPrologueExtras; }
};

// The task's epilogue and prologue, one copy a block in shared memory, built by thread 0 (block_copy). The
// bodies pass them by reference to functions they do not inline, so a copy of each thread's own lived in local
// memory: 512 threads' copies did not stay in the L1 beside the GEMM staging's shared memory, and every field
// read was an L2 round trip (Epilogue::apply_code: ~3,100 cycles an output of Silero's LSTM matmul at 1,024
// sessions, 25,100 of its 62,700; clock64 probes, bench/RESULTS.md sixteenth run). Every thread of the block
// calls block_copy (a barrier): the bodies run one task at a time, and the worker loop's barrier after each
// task keeps the next task's copy from overwriting one still read.
__shared__ Epilogue task_epilogue;
__shared__ Prologue task_prologue;
template <class T, class... Args>
__device__ __forceinline__ const T& block_copy(T& slot, const Args&... args) {
  if (threadIdx.x == 0) slot = T(args...);
  __syncthreads();
  return slot;
}

// One output's view of the prologue's extras: where each starts for this output, and its k stride.
struct PrologueRow {
  const float* base[kMaxPrologueExtras];
  long long k_stride[kMaxPrologueExtras];
  // The value of a[idx, k] after the prologue: `a` is the element as loaded.
  __device__ __forceinline__ float apply(const Prologue& pro, float a, long long k, bool& error) const {
    float vals[kMaxInputs] = {};
    vals[0] = a;
#pragma unroll
    for (int j = 0; j < kMaxPrologueExtras; ++j)
      if (j < pro.n_extra) vals[j + 1] = base[j][k * k_stride[j]];
    return run_code(pro.code, pro.n_code, vals, error);
  }
};

$ewise_generated

// EWISE: out[idx] = expr(in_0[idx], ...). Words: EWISE, rank, shape[rank], out_strides[rank], n_in,
// in_strides[n_in][rank], n_code, code[n_code], body; insn = kind << 40 | code << 32 | arg. A task whose
// body (>= 0) is generated runs it; the bytecode interpreter runs the others. Every body is a function of its
// own (not inlined): the persistent loop keeps its registers, where inlined bodies had made it spill around
// every call (4 KB of spill loads in duplex:1b's kernel).
__device__ __noinline__ void ewise_body(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                           unsigned* out_epoch, unsigned beat) {
  const int rank = (int)p[1];
  const long long* shape = p + 2;
  const long long* out_strides = shape + rank;
  const int n_in = (int)out_strides[rank];
  const long long* in_strides = out_strides + rank + 1;
  const long long n_code = in_strides[n_in * rank];
  const long long* code = in_strides + n_in * rank + 1;
  const OperandView out = operand(t, arena_base, kOutSlot);
  OperandView in[kMaxInputs];
#pragma unroll
  for (int k = 0; k < kMaxInputs; ++k) in[k] = k < n_in ? operand(t, arena_base, k) : OperandView{nullptr, 0};
  const long long body = code[n_code];  // wavec.opcodes.EwiseParams.body; -1: no generated body
  if (body >= 0 && run_generated_ewise(body, t, out, in, rank, n_in, shape, out_strides, in_strides)) return;
  bool stack_error = false;
  for (TileCursor c(t); c.s < t.session_end; c.next()) {
    long long out_off = 0, in_off[kMaxInputs] = {0, 0, 0, 0};
    unsigned rem = t.elem_begin + c.e;
    #pragma unroll 1
    for (int d = rank - 1; d >= 0; --d) {
      const unsigned dim = (unsigned)shape[d];
      const long long i = rem % dim;
      rem /= dim;
      out_off += i * out_strides[d];
#pragma unroll
      for (int k = 0; k < kMaxInputs; ++k)
        if (k < n_in) in_off[k] += i * in_strides[k * rank + d];
    }
    float vals[kMaxInputs];
#pragma unroll
    for (int k = 0; k < kMaxInputs; ++k) vals[k] = k < n_in ? *in[k].at(c.s, in_off[k]) : 0.0f;
    *out.at(c.s, out_off) = run_code(code, n_code, vals, stack_error);
  }
  if (stack_error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
}

// Threads per output for `outputs` outputs: the largest power of two, at most `most`, whose groups all fit
// the block (lane groups, reductions, and the GEMM body's choice between them).
__device__ __forceinline__ unsigned lanes_for(unsigned outputs, unsigned most) {
  unsigned lanes = 1;
  while (lanes < most && 2 * lanes * outputs <= blockDim.x) lanes *= 2;
  return lanes;
}

// Dot-product bodies (MATMUL, CONV) give each output a group of `lanes` threads that split the
// reduction and combine it with warp shuffles, so a tile with fewer outputs than threads still keeps
// every thread loading: a reduction's loads are what a beat waits on (one thread walking K = 387 taps
// alone costs ~387 dependent memory round trips). Groups of one warp advance in lock step (uniform
// trip count), so the shuffles see every lane.
struct LaneGroups {
  unsigned lanes, lane, group, groups, outputs, per_session;
  // `session_blocks`: how many blocks of sessions the tile's outputs are counted over, instead of its
  // sessions (CONV: ceil(sessions / kConvSessions), a group computing one element of a whole block).
  __device__ LaneGroups(const Payload& t, unsigned session_blocks = 0) {
    per_session = t.elem_end - t.elem_begin;
    outputs = (session_blocks ? session_blocks : t.session_end - t.session_begin) * per_session;
    lanes = lanes_for(outputs, 32);
    const unsigned shift = __ffs(lanes) - 1;  // lanes is a power of two: no division
    lane = threadIdx.x & (lanes - 1);
    group = threadIdx.x >> shift;
    groups = blockDim.x >> shift;
  }
  __device__ __forceinline__ float combine(float v) const {
    for (unsigned off = lanes / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off, lanes);
    return v;
  }
};

// MATMUL: out[idx] = epilogue(sum_k prologue(a[idx, k]) * b[idx, k]). Words: MATMUL, rank, shape[rank], K,
// b_tf32, out_strides[rank], a_strides[rank + 1], b_strides[rank + 1] (the last stride is k's), prologue,
// epilogue. Inputs: a, b, the prologue's extras, the epilogue's extras. MatmulWords finds them in `p`.
struct MatmulWords {
  int rank;
  const long long *shape, *out_strides, *a_strides, *b_strides;
  long long K;
  __device__ __forceinline__ explicit MatmulWords(const long long* p)
      : rank((int)p[1]), shape(p + 2), out_strides(shape + rank + 2), a_strides(out_strides + rank),
        b_strides(a_strides + rank + 1), K(shape[rank]) {}
  __device__ __forceinline__ const long long* prologue() const { return b_strides + rank + 1; }
};

constexpr int kMatmulLoads = 8;  // a lane's products loaded ahead of their FMAs (a multiple of 4)

__device__ __noinline__ void matmul_body(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                            unsigned* out_epoch, unsigned beat) {
  const MatmulWords words(p);
  const int rank = words.rank;
  const long long* shape = words.shape;
  const long long K = words.K;
  const long long* out_strides = words.out_strides;
  const long long* a_strides = words.a_strides;
  const long long* b_strides = words.b_strides;
  const long long ak = a_strides[rank], bk = b_strides[rank];
  const OperandView out = operand(t, arena_base, kOutSlot);
  const OperandView a = operand(t, arena_base, 0);
  const OperandView b = operand(t, arena_base, 1);
  const Prologue& pro = block_copy(task_prologue, t, arena_base, words.prologue(), rank);
  if (!pro.valid()) {
    if (threadIdx.x == 0) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
    return;
  }
  const Epilogue& ep = block_copy(task_epilogue, t, arena_base, pro.end, 2 + pro.n_extra);
  bool ep_error = false;
  const LaneGroups g(t);
  for (unsigned base = 0; base < g.outputs; base += g.groups) {
    const unsigned o = base + g.group;
    const bool active = o < g.outputs;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    long long out_off = 0;
    unsigned s = 0, e = 0;
    if (active) {
      s = t.session_begin + o / g.per_session;
      e = t.elem_begin + o % g.per_session;
      long long a_off = 0, b_off = 0, x_off[kMaxPrologueExtras] = {};
      unsigned rem = t.elem_begin + o % g.per_session;
      #pragma unroll 1
      for (int d = rank - 1; d >= 0; --d) {
        const unsigned dim = (unsigned)shape[d];
        const long long i = rem % dim;
        rem /= dim;
        out_off += i * out_strides[d];
        a_off += i * a_strides[d];
        b_off += i * b_strides[d];
#pragma unroll
        for (int j = 0; j < kMaxPrologueExtras; ++j)
          if (j < pro.n_extra) x_off[j] += i * pro.strides[j * (rank + 1) + d];
      }
      const float* pa = a.at(s, a_off);
      const float* pb = b.at(s, b_off);
      const long long step = g.lanes;
      long long k = g.lane;
      if (pro.n_code == 0) {
        // kMatmulLoads products' loads in flight per thread: each round of them is a memory round trip.
        for (; k + (kMatmulLoads - 1) * step < K; k += kMatmulLoads * step) {
#pragma unroll
          for (int u = 0; u < kMatmulLoads; u += 4) {
            acc0 = fmaf(pa[(k + u * step) * ak], pb[(k + u * step) * bk], acc0);
            acc1 = fmaf(pa[(k + (u + 1) * step) * ak], pb[(k + (u + 1) * step) * bk], acc1);
            acc2 = fmaf(pa[(k + (u + 2) * step) * ak], pb[(k + (u + 2) * step) * bk], acc2);
            acc3 = fmaf(pa[(k + (u + 3) * step) * ak], pb[(k + (u + 3) * step) * bk], acc3);
          }
        }
        for (; k < K; k += step) acc0 = fmaf(pa[k * ak], pb[k * bk], acc0);
      } else {
        // A prologue: each element of a is normalized (or scaled) as it is loaded, in registers; the
        // normalized a is never stored.
        PrologueRow row;
#pragma unroll
        for (int j = 0; j < kMaxPrologueExtras; ++j) {
          row.base[j] = j < pro.n_extra ? pro.extra[j].at(s, x_off[j]) : nullptr;
          row.k_stride[j] = j < pro.n_extra ? pro.strides[j * (rank + 1) + rank] : 0;
        }
        for (; k + step < K; k += 2 * step) {
          acc0 = fmaf(row.apply(pro, pa[k * ak], k, ep_error), pb[k * bk], acc0);
          acc1 = fmaf(row.apply(pro, pa[(k + step) * ak], k + step, ep_error), pb[(k + step) * bk], acc1);
        }
        if (k < K) acc0 = fmaf(row.apply(pro, pa[k * ak], k, ep_error), pb[k * bk], acc0);
      }
    }
    const float sum = g.combine((acc0 + acc1) + (acc2 + acc3));
    if (active && g.lane == 0) *out.at(s, out_off) = ep.apply(sum, s, e, ep_error);
  }
  if (ep_error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
}

// The offset of flat element e of `shape` under `strides`. A session's elements are counted in 32 bits (the
// payload's elem_begin / elem_end), so e's index along each dim is too: a 64-bit division is a library call
// whose dependent chain costs about as much as a memory round trip, once per dim.
__device__ __noinline__ long long strided_offset(unsigned e, int rank, const long long* shape,
                                                 const long long* strides) {
  long long off = 0;
  #pragma unroll 1
  for (int d = rank - 1; d >= 0; --d) {
    const unsigned dim = (unsigned)shape[d];
    off += (long long)(e % dim) * strides[d];
    e /= dim;
  }
  return off;
}

// ---- The tiled GEMM (tensor cores) ------------------------------------------------------------------
// A MATMUL or CONV task whose weight the cohort shares is, over its tile, one GEMM: rows m (a session, and
// the row or time step inside it), columns n (output features or channels), k the reduction. Blocks of
// outputs (TgBlock) step over k in chunks staged in shared memory by cp.async, kTgStages - 1 chunks in flight
// while the products of one run; each warp computes its part with mma.sync m16n8k8 on TF32 operands, three
// products per step ("3xTF32": x = big + small, both rounded to TF32, and
// a b ~ a_big b_big + a_big b_small + a_small b_big, about fp32's accuracy: CUTLASS's 3xTF32 GEMM; Ootomo &
// Yokota, IJHPCA 2022). Off (kTiledGemm = false), the lane-group bodies run every MATMUL and CONV.
constexpr bool kTiledGemm = true;
// kTgK: a chunk of 64 k rows at 512 threads, 32 at the others (bench/gemm.py, 2 x 8192^2 at 64 sessions:
// 947 -> 892 us when the chunk's loads went through registers; bench/RESULTS.md ninth run).
constexpr int kTgM = 64, kTgK = kBlockThreads == 512 ? 64 : 32;
// kTgStages: chunks staged at once (codegen.TILED_GEMM_STAGES).
constexpr int kTgStages = $tg_stages;
constexpr int kTgWarps = (int)kBlockThreads / 32, kTgWarpsM = kTgM / 16, kTgN = 16 * (kTgWarps / kTgWarpsM);

// A block of the tiled GEMM: WM warps along m by kTgWarps / WM along n, each computing FM x FN fragments of
// m16n8 (16 FM x 8 FN outputs; warps past WM x kWarpsN only copy), over chunks of K k rows. TgBlock<kTgWarpsM>
// is the kTgM x kTgN block of 16 x 16 warp tiles; TgBlock<5> (80 x 48 at 512 threads, 15 of the 16 warps
// computing) takes the tiles it runs in fewer blocks (tall_blocks_are_fewer: 65 to 80 rows in one pass where
// kTgM-row blocks take two, each streaming the tile's weights again; duplex:1b's largest GEMMs over a cohort of
// 132 to 160 sessions, halved); TgBig (128 x 64 of 32 x 16 warp tiles, chunks of 32) the tiles it computes
// with no more padding (big_blocks_pay): a warp reads 2 fragments of A and 2 of B a step for 4 products, where
// the 16 x 16 tile reads 1 and 2 for 2, so a product costs 3/4 of the shared-memory reads and splits, and each
// weight is staged once for 128 rows (32 x 32 warp tiles, half the reads, spilled 340 bytes a thread in the
// tiled CONV: 64 accumulators beside the walk's state, ptxas). kLd = K + 4 pitches the staged rows of A and
// of k-contiguous B (fragment reads on banks 4g + q, 32 distinct; k-contiguous copies 16-byte aligned); B's
// staged rows are kN of kLd floats when k-contiguous, K of kLdN when n-contiguous; kLdN = kN + 8 puts the
// fragment reads on banks 8q + g (kN 64) or 24q + g (kN 48), 32 distinct either way.
template <int WM, int FM = 1, int FN = 2, int K = kTgK>
struct TgBlock {
  static constexpr int kWarpsM = WM, kWarpsN = kTgWarps / WM, kFM = FM, kFN = FN;
  static constexpr int kWarpRows = 16 * FM, kWarpCols = 8 * FN;
  static constexpr int kM = kWarpRows * WM, kN = kWarpCols * kWarpsN, kK = K;
  static constexpr int kLd = K + 4, kLdN = kN + 8;
  static constexpr int kStageFloats = kM * kLd + (kN * kLd > kK * kLdN ? kN * kLd : kK * kLdN);
  template <bool kAlongK>
  static constexpr int kLdB = kAlongK ? kLd : kLdN;  // the pitch of B's staged rows (n's, or k's)
  template <bool kAlongK>
  static __device__ __forceinline__ unsigned b_offset(unsigned n, unsigned k) {
    return kAlongK ? n * kLdB<kAlongK> + k : k * kLdB<kAlongK> + n;
  }
};
using TgWide = TgBlock<kTgWarpsM>;
using TgTall = TgBlock<5>;
using TgBig = TgBlock<$tg_big_warps_m, $tg_big_fm, $tg_big_fn, $tg_big_k>;  // codegen.BIG_BLOCK
constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }

// How the block's threads copy a chunk of kRows rows of kUsed contiguous floats (A: kM rows of k; B: kN rows
// of k when it is k-contiguous, K rows of n when n-contiguous), W floats a copy (4: one 16-byte cp.async;
// 1: one float): consecutive threads take consecutive W-float pieces of a row of kLen >= kUsed (a power of
// two, so the pieces of a row divide the block's threads), so the reads coalesce and the shared-memory stores
// are consecutive; copy i of thread t is at row t / (kLen / W) + i * kRowStep, and made only inside the chunk
// (copies(i): kExact, a walk that tiles it exactly, makes every copy).
template <int W, int kRows, int kUsed, int kLen = pow2_at_least(kUsed)>
struct TgWalk {
  static constexpr int kPerRow = kLen / W, kRowStep = kPerRow ? (int)kBlockThreads / kPerRow : 0;
  static constexpr int kCopies = kRowStep ? (kRows + kRowStep - 1) / kRowStep : 0;
  static constexpr bool kExact = kUsed == kLen && kCopies * kRowStep == kRows;
  static constexpr bool kCovers = kPerRow >= 1 && kUsed % W == 0 && (int)kBlockThreads % kPerRow == 0 && kCopies >= 1;
  static __device__ __forceinline__ unsigned row(int i) { return threadIdx.x / kPerRow + i * kRowStep; }
  static __device__ __forceinline__ unsigned col() { return threadIdx.x % kPerRow * W; }
  static __device__ __forceinline__ bool copies(int i) { return kExact || (row(i) < kRows && col() < kUsed); }
};
template <int W, class Block = TgWide>
using TgWalkA = TgWalk<W, Block::kM, Block::kK>;
template <int W, bool kAlongK, class Block = TgWide>  // B's walk: rows n of k (k-contiguous), else rows k of n
using TgWalkB = TgWalk<W, kAlongK ? Block::kN : Block::kK, kAlongK ? Block::kK : Block::kN>;
// Blocks of 128, 256, 512 or 1,024 threads tile the kTgM x kTgN outputs in warps of 16 x 16 and copy whole
// chunks one float a copy (384 threads, say, would leave rows of A uncopied); kTgVec: and 4 floats a copy.
template <int W, class Block = TgWide>
constexpr bool tg_walks_cover() {
  return TgWalkA<W, Block>::kCovers && TgWalkB<W, true, Block>::kCovers && TgWalkB<W, false, Block>::kCovers;
}
template <int W, class Block = TgWide>
constexpr bool tg_walks_exact() {
  return tg_walks_cover<W, Block>() && TgWalkA<W, Block>::kExact && TgWalkB<W, true, Block>::kExact &&
         TgWalkB<W, false, Block>::kExact;
}
constexpr bool kTgFits = kBlockThreads % 128 == 0 && kBlockThreads <= 1024 && tg_walks_exact<1>();
constexpr bool kTgVec = kTgFits && tg_walks_cover<4>();
// The tall block runs at the measured 512 threads, its tiles' copies 16 bytes wide (tile_copies_vectorize).
// Switch: kTgTallRows = false leaves 65- to 80-row tiles to two passes of TgWide.
constexpr bool kTgTallRows = true;
constexpr bool kTgTallFits = kTgVec && kBlockThreads == 512 && tg_walks_cover<4, TgTall>();
constexpr bool kTgTall = kTgTallRows && kTgTallFits;
// The big block runs at 512 threads (the tiled CONV's where its A rows are whole sessions apart: conv_tiled).
// Switch: kTgBig = false leaves every tile to TgWide and TgTall.
constexpr bool kTgBig = true;
// Switch: kTgStagedStores = false stores each warp's outputs from its fragments' registers (tg_store_fragments).
// Switch: kTgInlineEpilogue = false evaluates each output's generated epilogue body in a call (evaluate_call).
// Both on, Silero p50 at 4,096 sessions 459 -> 445 us, 16,384 1,412 -> 1,393; staged alone 454 / 1,418; inline
// alone 483 / 1,567 (its 16 unrolled outputs a thread each inlining the bodies' switch; bench/RESULTS.md
// twentieth run).
constexpr bool kTgStagedStores = true;
constexpr bool kTgInlineEpilogue = true;
constexpr bool kTgBigFits = kTgVec && kBlockThreads == 512 && tg_walks_exact<1, TgBig>() && tg_walks_exact<4, TgBig>();
constexpr bool kTgBigOn = kTgBig && kTgBigFits;

// x as the sum of two TF32 values (their low 13 mantissa bits zero): big, x rounded to TF32, and small, the
// exact rest x - big rounded too, both to nearest even (cvt.rn: one F2FP in SASS; cvt.rna, ties away, is
// three, and made the splits a third of the streaming GEMM's instructions, nvdisasm). |x - big - small| <=
// 2^-23 |x|, unbiased (tests/test_mma_stream_mirror.py). Unlike fp32 products, an infinite operand, or a
// finite one rounding past the largest float, gives NaN: the rest is NaN or infinite, and so is every cross
// term it meets. No model here reaches such values. Splitting by integer adds and a mask instead (CUTLASS's
// round_half_ulp_truncate, the mma truncating small's low bits) was 1-3% slower (bench/RESULTS.md
// twenty-first run): the F2FPs are not what limits the products.
__device__ __forceinline__ void tf32_split(float x, unsigned& big, unsigned& small) {
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(small) : "f"(x - __uint_as_float(big)));
}

// d += a b over one m16n8k8 step (PTX ISA, "Matrix Fragments for mma.m16n8k8" .tf32: a row-major, b
// column-major, fp32 accumulators).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" :
               "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) :
               "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A B fragment's two values for mma_3xtf32: split (big + small), or with kBTf32 (b's values are TF32 numbers:
// a MATMUL's b_tf32) used as they are, their small parts zero and never read.
template <bool kBTf32>
struct BFragment {
  unsigned big[2], small[2];
  __device__ __forceinline__ BFragment(float b0, float b1) {
    if constexpr (kBTf32) {
      big[0] = __float_as_uint(b0);
      big[1] = __float_as_uint(b1);
    } else {
      tf32_split(b0, big[0], small[0]);
      tf32_split(b1, big[1], small[1]);
    }
  }
};

// d += a b over one m16n8k8 step in 3xTF32, a given as its split (a_big + a_small) and b as a BFragment;
// a_big x b_small is skipped for kBTf32's. The small terms first: they are added before the large one rounds.
template <bool kBTf32>
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const unsigned (&a_big)[4], const unsigned (&a_small)[4],
                                           const BFragment<kBTf32>& b) {
  mma_tf32(d, a_small, b.big);
  if constexpr (!kBTf32) mma_tf32(d, a_big, b.small);
  mma_tf32(d, a_big, b.big);
}
template <bool kBTf32>
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const unsigned (&a_big)[4], const unsigned (&a_small)[4],
                                           float b0, float b1) {
  mma_3xtf32<kBTf32>(d, a_big, a_small, BFragment<kBTf32>(b0, b1));
}

// The largest of a block's property `of` (a function of the block) over the blocks the kernel runs: TgWide,
// and TgTall and TgBig where they fit.
template <class Of>
constexpr int tg_largest(Of of) {
  const int wide = of(TgWide{}), tall = kTgTallFits ? of(TgTall{}) : 0, big = kTgBigFits ? of(TgBig{}) : 0;
  return wide > tall ? (wide > big ? wide : big) : (tall > big ? tall : big);
}
// The tiled GEMM's staging: kTgStages chunks, each A[kM][kLd] then B, stored as it lies in memory:
// [kN][kLd] when k-contiguous, [kK][kLdN] when n-contiguous (TgBlock), for the largest block the kernel runs.
constexpr int tg_stages_floats() { return kTgStages * tg_largest([](auto b) { return decltype(b)::kStageFloats; }); }
// The tiled GEMM's outputs staged by warp (tg_store_staged): each computing warp's kWarpRows x kWarpCols, the
// block's kM x kN, for the largest block the kernel runs; after the stages.
constexpr int tg_out_floats() { return tg_largest([](auto b) { return decltype(b)::kM * decltype(b)::kN; }); }

// The GEMM bodies' shared memory, one buffer for every kind of task that uses it: the tiled GEMM's stages or
// the streaming GEMMs' (kSvSmemFloats). Dynamic shared memory, past the 48 KB a static array may take: the
// runtime reads $gemm_smem_symbol from the module and launches with that many bytes (codegen.gemm_smem_bytes
// computes the number substituted here; the assert holds it to what this code needs).
constexpr int kSvRows = 8;  // streaming GEMM: rows of A a pass keeps accumulators for
constexpr int kSvSmemFloats = (int)kBlockThreads * kSvRows;
constexpr int kGemmSmemFloats = $gemm_smem_floats;
static_assert(kGemmSmemFloats == (kTgFits && tg_stages_floats() + tg_out_floats() > kSvSmemFloats
                                      ? tg_stages_floats() + tg_out_floats() : kSvSmemFloats),
              "codegen.gemm_smem_bytes disagrees with the GEMM bodies' staging");
static_assert(kTgStages >= 2, "the tiled GEMM copies at least one chunk ahead");
extern "C" __device__ const unsigned $gemm_smem_symbol = kGemmSmemFloats * sizeof(float);
__device__ __forceinline__ float* gemm_smem() {
  extern __shared__ __align__(16) float wavec_gemm_smem[];
  return wavec_gemm_smem;
}
constexpr int kTgOutOffset = tg_stages_floats();  // floats: the stages first
__device__ __forceinline__ float* tg_out_smem() { return gemm_smem() + kTgOutOffset; }

// cp.async (sm_80 on): a 4- or 16-byte copy from global to shared memory that holds no register in flight.
// The source's floats past CopySource::floats are written 0 and not read (src-size, as CUTLASS's
// cp_async_zfill); a copy of none reads nothing, so its address (up to a chunk past the operand's rows or k)
// is never dereferenced. Each thread closes one group a chunk (cp_async_commit) and waits until
// at most N of its groups are in flight.
struct CopySource {
  const float* at;
  unsigned floats;  // of the copy's W, those inside the operand (the rest are 0)
};
// A 16-byte copy goes to L2 only (.cg); a 4-byte one cannot (.ca only).
template <int W>
__device__ __forceinline__ void cp_async(float* dst, CopySource src) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  if constexpr (W == 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src.at), "r"(4 * src.floats) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(to), "l"(src.at), "r"(4 * src.floats) : "memory");
}
// The floats of a W-float piece at `at` of a row of `len` that lie inside it.
template <int W>
__device__ __forceinline__ unsigned floats_inside(unsigned at, unsigned len) {
  return at >= len ? 0u : len - at >= W ? (unsigned)W : len - at;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// The warp's products of one staged chunk into acc[m16 tile][n8 tile][fragment] (rows wm.., columns wn..);
// kBTf32 as mma_3xtf32's, kAlongK as TgBlock::b_offset's. Each fragment of B is split once for the warp's kFM
// m16 tiles.
template <bool kBTf32, bool kAlongK, class Block>
__device__ __forceinline__ void tg_products(const float* stage, unsigned wm, unsigned wn,
                                            float (&acc)[Block::kFM][Block::kFN][4]) {
  constexpr int kLd = Block::kLd, FM = Block::kFM, FN = Block::kFN;
  const float* Bs = stage + Block::kM * kLd;
  const unsigned g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
#pragma unroll
  for (int k8 = 0; k8 < Block::kK; k8 += 8) {
    unsigned a_big[FM][4], a_small[FM][4];
#pragma unroll
    for (int mt = 0; mt < FM; ++mt) {  // PTX order: (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)
      const float* a = stage + (wm + 16 * mt + g) * kLd + k8 + q;
      tf32_split(a[0], a_big[mt][0], a_small[mt][0]);
      tf32_split(a[8 * kLd], a_big[mt][1], a_small[mt][1]);
      tf32_split(a[4], a_big[mt][2], a_small[mt][2]);
      tf32_split(a[8 * kLd + 4], a_big[mt][3], a_small[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < FN; ++nt) {
      const unsigned n = wn + nt * 8 + g;
      const BFragment<kBTf32> b(Bs[Block::template b_offset<kAlongK>(n, k8 + q)],
                                Bs[Block::template b_offset<kAlongK>(n, k8 + q + 4)]);
#pragma unroll
      for (int mt = 0; mt < FM; ++mt) mma_3xtf32<kBTf32>(acc[mt][nt], a_big[mt], a_small[mt], b);
    }
  }
}

// Where a walk of the tiled GEMM's steps stands: chunk c of the block of outputs at (m0, n0). Blocks go along
// n, then m. `advance` moves to the next step and says whether it began a new row of blocks.
struct TgCursor {
  unsigned m0, n0, c;
  template <class Block>
  __device__ __forceinline__ bool advance(unsigned N, unsigned chunks) {
    if (++c < chunks) return false;
    c = 0;
    n0 += Block::kN;
    if (n0 < N) return false;
    n0 = 0;
    m0 += Block::kM;
    return true;
  }
};

// The Rows (Ops::row's) of the block row being stored, row m0 + i at i: computed once a block row by kM threads
// (tg_fill_rows), where each warp had computed its 2 FM rows at each block's store, a chain of dependent loads
// of the payload's shape and strides a row (L2 round trips: a task's acquire invalidates the L1). Silero at
// 16,384 sessions 1,557 -> 1,405 us, its LSTM matmuls 175 -> 139 us a task (bench/RESULTS.md twentieth run).
// One buffer for every Ops and block, as gemm_smem.
constexpr int kTgRowBytes = 64;
__shared__ __align__(16) unsigned char tg_row_table[tg_largest([](auto b) { return decltype(b)::kM; }) * kTgRowBytes];
template <class Row>
__device__ __forceinline__ Row* tg_rows() {
  static_assert(sizeof(Row) <= kTgRowBytes && alignof(Row) <= 16, "a tiled GEMM's Row outgrew tg_rows' slots");
  return reinterpret_cast<Row*>(tg_row_table);
}
template <class Block, class Ops>
__device__ __forceinline__ void tg_fill_rows(const Ops& ops, unsigned m0, bool& error) {
  if (threadIdx.x < (unsigned)Block::kM) tg_rows<typename Ops::Row>()[threadIdx.x] = ops.row(m0 + threadIdx.x, error);
}

// The warp's outputs of the block at (m0, n0) from its fragments' registers (kTgStagedStores = false), its m16
// tiles' rows in turn: fragment c0, c1 of tile (mt, nt) at row m0 + wm + 16 mt + g, columns 2q, 2q + 1 of the
// n8 tile; c2, c3 at the row 8 below. A row pair's epilogue inputs are all loaded before any is evaluated, so
// that their round trips overlap.
template <class Ops, int FM, int FN>
__device__ __forceinline__ void tg_store_fragments(const Ops& ops, unsigned n0, unsigned wm, unsigned wn, unsigned N,
                                                   const float (&acc)[FM][FN][4], bool& error) {
  const unsigned g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
  const unsigned n_first = n0 + wn + 2 * q;  // column n_first + 8 nt + c
  const typename Ops::Row* table = tg_rows<typename Ops::Row>();
#pragma unroll
  for (int mt = 0; mt < FM; ++mt) {
    const unsigned i = wm + 16 * mt + g;
    const typename Ops::Row* rows[2] = {table + i, table + i + 8};  // read where used: copied, they spilled
    EpilogueIn in[FN][2][2];
#pragma unroll
    for (int nt = 0; nt < FN; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          in[nt][c][h] = n_first + 8 * nt + c < N ? ops.gather(*rows[h], n_first + 8 * nt + c, acc[mt][nt][2 * h + c])
                                                  : EpilogueIn{acc[mt][nt][2 * h + c], 0.0f};
#pragma unroll
    for (int nt = 0; nt < FN; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (n_first + 8 * nt + c < N) ops.put(*rows[h], n_first + 8 * nt + c, in[nt][c][h], error);
  }
}

// The warp's outputs of the block at (m0, n0) through shared memory: its fragments written to its
// kWarpRows x kWarpCols of tg_out_smem, then read back a row's consecutive columns a lane group (kCols lanes
// a row), 4 rows an iteration of a loop not unrolled: where a row's columns are contiguous (a MATMUL's), each
// gather and store of the warp covers whole 32-byte sectors (from fragments, 8 rows of 4 columns 2 apart; a
// tiled CONV's columns are channels, T floats apart, and its rows' steps contiguous), and the loop's code is 4
// outputs', not 4 FM FN unrolled (with the epilogue inline, Silero's tiled_matmul<false, 4, true> 7,604 -> 5,912 SASS lines; a
// probe cutting the epilogue's call and gathers took its LSTM matmul at 16,384 sessions from 139 to 92 us,
// bench/RESULTS.md twentieth run). The staged columns are swizzled (c ^ 8 on every other pair of rows) so that
// neither the fragments' 8-byte writes nor the rows' reads share a bank. A warp's staging is rewritten only at
// its next block's store, past the next step's barrier.
template <class Ops, int FM, int FN>
__device__ __forceinline__ void tg_store_staged(const Ops& ops, unsigned n0, unsigned wm, unsigned wn, unsigned N,
                                                const float (&acc)[FM][FN][4], bool& error) {
  constexpr int kRows = 16 * FM, kCols = 8 * FN, kPass = 32 / kCols, kUnroll = 4;  // kPass: rows a pass of the warp
  // The swizzle keeps a value in its row, and the banks distinct, for 16 columns (every block's FN = 2) only.
  static_assert(kCols == 16 && kRows % (kUnroll * kPass) == 0, "tg_store_staged: a warp tile of 16 columns");
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float* const tile = tg_out_smem() + threadIdx.x / 32 * (kRows * kCols);
  auto at = [](unsigned r, unsigned c) { return r * kCols + (c ^ (r >> 1 & 1) * 8); };
#pragma unroll
  for (int mt = 0; mt < FM; ++mt)
#pragma unroll
    for (int nt = 0; nt < FN; ++nt) {
      const unsigned r = 16 * mt + g, c = 8 * nt + 2 * q;
      *reinterpret_cast<float2*>(tile + at(r, c)) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(tile + at(r + 8, c)) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
  __syncwarp();
  const unsigned c = lane % kCols, n = n0 + wn + c;
  const typename Ops::Row* const rows = tg_rows<typename Ops::Row>() + wm;
  if (n >= N) return;
#pragma unroll 1
  for (unsigned r = lane / kCols; r < (unsigned)kRows; r += kUnroll * kPass) {
    EpilogueIn in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) in[u] = ops.gather(rows[r + u * kPass], n, tile[at(r + u * kPass, c)]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) ops.put(rows[r + u * kPass], n, in[u], error);
  }
}

template <class Ops, int FM, int FN>
__device__ __forceinline__ void tg_store(const Ops& ops, unsigned n0, unsigned wm, unsigned wn, unsigned N,
                                         const float (&acc)[FM][FN][4], bool& error) {
  if constexpr (kTgStagedStores) tg_store_staged(ops, n0, wm, wn, N, acc, error);
  else tg_store_fragments(ops, n0, wm, wn, N, acc, error);
}

// The GEMM of one task's tile: out(m, n) = sum_k A(m, k) B(k, n) for m < M, n < N, k < K, through `ops`:
//   ops.start_rows(m0)                      this thread's A rows of the blocks at m0 (TgWalkA's rows);
//   ops.a_source(i, k0), ops.b_source(i, n0, k0)  where this thread's copy i of A and of B of the chunk at k0
//                                           reads (CopySource: the floats inside the operand, the rest 0);
//   ops.row(m, error) -> Ops::Row           where row m's outputs go (tg_rows: once a block row);
//   ops.gather(row, n, sum) -> EpilogueIn, ops.put(row, n, in, error)  the output's bias and epilogue input
//                                           loaded, then its value stored.
// Ops::Block is the block's shape (TgBlock), Ops::kBAlongK which way B lies (TgWalkB, TgBlock::b_offset),
// Ops::kVec the floats a copy; kBTf32, that B's values are TF32 numbers (tg_products). The tile is one stream
// of steps, a chunk of one block each, and chunks are copied kTgStages - 1 steps ahead across the blocks'
// bounds, so that a block's first chunks land while the block before computes and stores (Silero's LSTM
// matmuls have 2 chunks a block: each block had waited for its first). A chunk of duplex:1b's 32,000-column
// head took 2.45 us one chunk ahead in registers, ~1.7 us staged, where its instructions issue in ~0.6 us and
// its mma run in ~0.44 at the measured mma.sync rate (bench/mma_rate.py; bench/RESULTS.md twelfth run). Every
// thread of the block calls it.
template <bool kBTf32, class Ops>
__device__ void tiled_gemm(Ops& ops, unsigned M, unsigned N, unsigned K, bool& error) {
  constexpr bool kAlongK = Ops::kBAlongK;
  constexpr int W = Ops::kVec;
  using Block = typename Ops::Block;
  using WalkA = TgWalkA<W, Block>;
  using WalkB = TgWalkB<W, kAlongK, Block>;
  float* const smem = gemm_smem();
  const unsigned warp = threadIdx.x / 32;
  const unsigned wm = warp % Block::kWarpsM * Block::kWarpRows, wn = warp / Block::kWarpsM * Block::kWarpCols;
  const bool computes = warp < (unsigned)(Block::kWarpsM * Block::kWarpsN);
  const unsigned chunks = K ? (K + Block::kK - 1) / Block::kK : 1;  // K = 0: one chunk of zeros, each output epilogue(0)
  const unsigned steps = (M + Block::kM - 1) / Block::kM * ((N + Block::kN - 1) / Block::kN) * chunks;
  // Copies step j's chunk (`load`'s) into stage j % kTgStages, nothing past the last step, and closes the group,
  // one a step, so that cp_async_wait<kTgStages - 2> at step j means j has landed; then moves `load` on.
  TgCursor load{0, 0, 0};
  ops.start_rows(0);
  auto stage = [&](unsigned j) {
    if (j < steps) {
      float* As = smem + j % kTgStages * Block::kStageFloats;
      float* Bs = As + Block::kM * Block::kLd;
      const unsigned k0 = load.c * Block::kK;
#pragma unroll
      for (int i = 0; i < WalkA::kCopies; ++i)
        if (WalkA::copies(i)) cp_async<W>(As + WalkA::row(i) * Block::kLd + WalkA::col(), ops.a_source(i, k0));
#pragma unroll
      for (int i = 0; i < WalkB::kCopies; ++i)
        if (WalkB::copies(i))
          cp_async<W>(Bs + WalkB::row(i) * Block::template kLdB<kAlongK> + WalkB::col(), ops.b_source(i, load.n0, k0));
      if (load.template advance<Block>(N, chunks)) ops.start_rows(load.m0);
    }
    cp_async_commit();
  };
  float acc[Block::kFM][Block::kFN][4] = {};
  TgCursor at{0, 0, 0};
#pragma unroll 1
  for (unsigned j = 0; j + 1 < kTgStages; ++j) stage(j);
#pragma unroll 1
  for (unsigned j = 0; j < steps; ++j) {
    cp_async_wait<kTgStages - 2>();
    __syncthreads();  // step j is staged by every thread, and every warp is done with step j - 1's stage and rows
    stage(j + kTgStages - 1);
    // A block row's rows, at its first step: read at its blocks' last steps, past the next step's barrier.
    if (at.n0 == 0 && at.c == 0) {
      tg_fill_rows<Block>(ops, at.m0, error);
      if (chunks == 1) __syncthreads();
    }
    // A chunk's products are summed by the tensor cores from zero, and the partial sum added to acc in fp32
    // (round to nearest): their accumulator truncates (Fasi et al., PeerJ CS 7:e330, 2021), a bias that
    // grows with each step it keeps (DeepSeek-V3 report, arXiv 2412.19437, 3.3.2: "promotion" to CUDA
    // cores). Across a 2048-deep chain of 8 linears, 8.8e-5 relative error accumulating in the tensor
    // cores against the lane-group body's 1.0e-6 (bench/gemm.py, bench/RESULTS.md seventh run).
    // A warp whose outputs all lie past the tile's edge sums nothing: its products would be of zero-filled
    // copies, stored nowhere (the STFT's 258 channels leave 2 in their fifth block of 64: 3 of its 4 warp
    // columns idle).
    float part[Block::kFM][Block::kFN][4] = {};
    if (computes && at.m0 + wm < M && at.n0 + wn < N)
      tg_products<kBTf32, kAlongK, Block>(smem + j % kTgStages * Block::kStageFloats, wm, wn, part);
#pragma unroll
    for (int mt = 0; mt < Block::kFM; ++mt)
#pragma unroll
      for (int nt = 0; nt < Block::kFN; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] += part[mt][nt][i];
    if (at.c + 1 == chunks) {  // the block's last chunk: its outputs, while the next blocks' chunks land
      if (computes) tg_store(ops, at.n0, wm, wn, N, acc, error);
#pragma unroll
      for (int mt = 0; mt < Block::kFM; ++mt)
#pragma unroll
        for (int nt = 0; nt < Block::kFN; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    }
    at.template advance<Block>(N, chunks);
  }
  __syncthreads();  // the stages are free for the block's next task
}

// A MATMUL tile whose b is one matrix for all of the tile's rows: b shared by the cohort (session stride 0) or
// the tile of one session; the same batch of b for each of the tile's rows; a, and the prologue's extras if any,
// not varying along n; the tile part of one output row or whole rows. Rows m = (session, row), columns the
// tile's; A(m, k) = prologue(a[row's offset + k * ak]), B(k, n) = b[k * bk + n * bn]. single_b_tile reads the
// task's words into it, or returns false.
struct MatmulTile {
  struct Row {
    unsigned s;
    long long off;  // the row's first output of the tile: its offset in out
    long long extra_off[kMaxInputs - 1];  // and the epilogue's extras' offsets there (Epilogue::offsets)
    bool valid;
  };
  int rank;
  const long long *shape, *out_strides, *a_strides;
  long long ak, bk, bn, on;  // on: out's stride along the columns (read once a tile, not from the words an output)
  unsigned N, row0, rows, col0, session_begin, M, K, n_cols;
  OperandView a, out;
  const float* pb;  // b at (k = 0, the tile's first column)
  const long long* prologue;  // the task's prologue words
  bool has_prologue;          // not the identity
  bool b_tf32;                // every value of b is a TF32 number (the MATMUL's b_tf32 word)
  unsigned b_rows;            // consecutive rows m that read one matrix of b: M, or a block of a one-session tile
  OperandView b;
  const long long* b_strides;

  // Row m's outputs. The extras' offsets are computed once a row, not once an output (with the loads gathered
  // ahead, Silero's LSTM matmuls at 16,384 sessions took 181 us a task, not 228: bench/RESULTS.md eighteenth
  // run). An epilogue naming more extras than the task has slots sets `error`, and its rows store nothing.
  __device__ __forceinline__ Row row(unsigned m, const Epilogue& ep, bool& error) const {
    Row r{};
    if (m >= M) return r;
    const unsigned i = row0 + m % rows;
    r.s = session_begin + m / rows;
    r.off = strided_offset(i * N, rank, shape, out_strides) + col0 * on;
    r.valid = ep.n_code == 0 || ep.offsets((long long)i * N + col0, r.extra_off);
    error |= !r.valid;
    return r;
  }
  __device__ __forceinline__ const float* a_row(unsigned m) const {
    return a.at(session_begin + m / rows, strided_offset((row0 + m % rows) * N, rank, shape, a_strides));
  }
  // The matrix of b that row m reads, at (k = 0, the tile's first column).
  __device__ __forceinline__ const float* b_matrix(unsigned m) const {
    return b.at(session_begin + m / rows, strided_offset((row0 + m % rows) * N, rank, shape, b_strides) + col0 * bn);
  }
  // Row m's view of the prologue's extras (which single_b_tile has checked do not vary along n).
  __device__ PrologueRow prologue_row(const Prologue& pro, unsigned m) const {
    PrologueRow row;
    const unsigned s = session_begin + m / rows, r = row0 + m % rows;
#pragma unroll
    for (int j = 0; j < kMaxPrologueExtras; ++j) {
      const long long* strides = pro.strides + j * (rank + 1);
      row.base[j] = j < pro.n_extra ? pro.extra[j].at(s, strided_offset(r * N, rank, shape, strides)) : nullptr;
      row.k_stride[j] = j < pro.n_extra ? strides[rank] : 0;
    }
    return row;
  }
  // Output (r, column n)'s epilogue inputs (`step`: column_steps'), then its stored value: apart, so that a
  // body loads all of a thread's outputs' inputs before it evaluates any.
  __device__ __forceinline__ EpilogueIn gather(const Epilogue& ep, const Row& r, unsigned n, float sum,
                                               const long long (&step)[kMaxInputs - 1]) const {
    return {sum, r.valid ? ep.first_extra(r.s, r.extra_off, n, step) : 0.0f};
  }
  template <bool kInline = false>
  __device__ __forceinline__ void put(const Epilogue& ep, const Row& r, unsigned n, EpilogueIn in,
                                      const long long (&step)[kMaxInputs - 1], bool& error) const {
    if (r.valid)
      *out.at(r.s, r.off + n * on) = ep.template finish<kInline>(in.acc, in.x0, r.s, r.extra_off, n, step, error);
  }
  __device__ __forceinline__ void store(const Epilogue& ep, const Row& r, unsigned n, float sum, bool& error) const {
    long long step[kMaxInputs - 1];
    column_steps(ep, step);
    put(ep, r, n, gather(ep, r, n, sum, step), step, error);
  }
  // The extras' strides from one column of a row to the next: along the epilogue's last dim, the output's.
  static __device__ __forceinline__ void column_steps(const Epilogue& ep, long long (&step)[kMaxInputs - 1]) {
    ep.dim_strides(ep.rank - 1, step);
  }
};

// The block's one copy of the task's tile, built by thread 0 (as task_epilogue, and for its reason: the GEMM
// bodies read it through a reference).
__shared__ MatmulTile task_tile;

// `ep_words`: where the task's epilogue starts (after its empty prologue). A one-session tile of whole rows that
// read several matrices of b, a block of rows each (tile.b_rows < M), is read too: only the column GEMM takes it.
__device__ bool single_b_tile(const Payload& t, const long long* p, char* const* arena_base, MatmulTile& tile,
                              const long long*& ep_words) {
  const MatmulWords words(p);
  const int rank = words.rank;
  const long long* shape = words.shape;
  const long long* out_strides = words.out_strides;
  const long long* a_strides = words.a_strides;
  const long long* b_strides = words.b_strides;
  const unsigned N = (unsigned)shape[rank - 1];
  const long long K = words.K;
  const bool one_session = t.session_end - t.session_begin == 1;
  if ((t.session_stride[1] != 0 && !one_session) || a_strides[rank - 1] != 0 || K >= (1LL << 31)) return false;
  const Prologue pro(t, arena_base, words.prologue(), rank);
  if (!pro.valid()) return false;
  #pragma unroll 1
  for (int j = 0; j < pro.n_extra; ++j)
    if (pro.strides[j * (rank + 1) + rank - 1] != 0) return false;
  const unsigned row0 = t.elem_begin / N, rows = (t.elem_end - 1) / N - row0 + 1;
  unsigned col0 = t.elem_begin % N, col1 = (t.elem_end - 1) % N + 1;
  const long long M = (long long)(t.session_end - t.session_begin) * rows;
  if (M >= (1LL << 31)) return false;
  unsigned b_rows = (unsigned)M;
  if (rows > 1) {
    // Whole rows that read one matrix: the dims b varies along are constant over them, the rows within one
    // block of the dims after the last such dim (wave-to-wpk's row_tiles cuts tiles so); or, in a one-session
    // tile, whole such blocks (its column_tiles).
    if (t.elem_begin % N || t.elem_end % N) return false;
    unsigned block = 1;
    int d = rank - 2;
    #pragma unroll 1
    for (; d >= 0 && b_strides[d] == 0; --d) block *= (unsigned)shape[d];
    if (d >= 0 && row0 / block != (row0 + rows - 1) / block) {
      if (!one_session || row0 % block || rows % block) return false;
      b_rows = block;
    }
    col0 = 0;
    col1 = N;
  }
  tile = MatmulTile{rank, shape, out_strides, a_strides, a_strides[rank], b_strides[rank], b_strides[rank - 1],
                    out_strides[rank - 1], N, row0, rows, col0, t.session_begin, (unsigned)M, (unsigned)K, col1 - col0,
                    operand(t, arena_base, 0), operand(t, arena_base, kOutSlot),
                    operand(t, arena_base, 1).at(t.session_begin, strided_offset(row0 * N, rank, shape, b_strides) +
                                                                    col0 * b_strides[rank - 1]),
                    b_strides + rank + 1, pro.n_extra != 0 || pro.n_code != 0, shape[rank + 1] != 0, b_rows,
                    operand(t, arena_base, 1), b_strides};
  ep_words = pro.end;
  return true;
}

// The tiled MATMUL: tiled_gemm's operations over a MatmulTile.
template <class TBlock, bool kAlongK, int W>
struct MatmulTileOps {
  using Block = TBlock;
  static constexpr bool kBAlongK = kAlongK;
  static constexpr int kVec = W;
  using Row = MatmulTile::Row;
  using WalkA = TgWalkA<W, Block>;
  using WalkB = TgWalkB<W, kAlongK, Block>;
  const MatmulTile& tile;
  const Epilogue& ep;
  long long step[kMaxInputs - 1];     // the extras' strides along the output's columns (column_steps)
  const float* arow[WalkA::kCopies];  // this thread's A rows at k = 0 (row 0's past M, never read)
  unsigned rows_in;                   // bit i: A row i lies inside the tile

  __device__ MatmulTileOps(const MatmulTile& t, const Epilogue& e) : tile(t), ep(e), rows_in(0) {
    MatmulTile::column_steps(ep, step);
  }
  __device__ __forceinline__ Row row(unsigned m, bool& error) const { return tile.row(m, ep, error); }
  __device__ __forceinline__ void start_rows(unsigned m0) {
    rows_in = 0;
#pragma unroll
    for (int i = 0; i < WalkA::kCopies; ++i) {
      const unsigned m = m0 + WalkA::row(i);
      arow[i] = tile.a_row(m < tile.M ? m : 0);
      rows_in |= (unsigned)(m < tile.M) << i;
    }
  }
  __device__ __forceinline__ CopySource a_source(int i, unsigned k0) const {
    const unsigned k = k0 + WalkA::col();
    return {arow[i] + k * tile.ak, rows_in >> i & 1 ? floats_inside<W>(k, tile.K) : 0u};
  }
  // Copy i lies i row steps of the walk past copy 0.
  __device__ __forceinline__ CopySource b_source(int i, unsigned n0, unsigned k0) const {
    const unsigned row0 = WalkB::row(0), col = WalkB::col(), step = i * WalkB::kRowStep;
    const unsigned n_first = n0 + (kAlongK ? row0 : col), k_first = k0 + (kAlongK ? col : row0);
    const float* first = tile.pb + (long long)k_first * tile.bk + (long long)n_first * tile.bn;
    if (kAlongK)
      return {first + step * tile.bn, n_first + step < tile.n_cols ? floats_inside<W>(k_first, tile.K) : 0u};
    return {first + step * tile.bk, k_first + step < tile.K ? floats_inside<W>(n_first, tile.n_cols) : 0u};
  }
  __device__ __forceinline__ EpilogueIn gather(const Row& r, unsigned n, float sum) const {
    return tile.gather(ep, r, n, sum, step);
  }
  __device__ __forceinline__ void put(const Row& r, unsigned n, EpilogueIn in, bool& error) const {
    tile.put<kTgInlineEpilogue>(ep, r, n, in, step, error);
  }
};

// Whether every copy of the tile's chunks may move 16 bytes: A and B contiguous along the walks' rows, and
// every row's start 16-byte aligned (the bases, A's session stride and the strides of its row dims).
__device__ __forceinline__ bool tile_copies_vectorize(const MatmulTile& tile) {
  if (!kTgVec || tile.ak != 1) return false;
  if (tile.bk == 1 ? tile.bn % 4 != 0 : tile.bn != 1 || tile.bk % 4 != 0) return false;
  if (reinterpret_cast<uintptr_t>(tile.pb) % 16 || reinterpret_cast<uintptr_t>(tile.a.base) % 16 || tile.a.sstride % 16)
    return false;
  #pragma unroll 1
  for (int d = 0; d + 1 < tile.rank; ++d)
    if (tile.a_strides[d] % 4) return false;
  return true;
}

// The blocks Block's tiled GEMM runs for an M x N tile (each streams its columns' weights once).
template <class Block>
__device__ __forceinline__ unsigned tg_blocks(unsigned M, unsigned N) {
  return (M + Block::kM - 1) / Block::kM * ((N + Block::kN - 1) / Block::kN);
}
// Whether TgTall runs an M x N tile in fewer blocks than TgWide: duplex:1b's 72 x 88 tiles at 144 sessions in
// 2, not 4 (its beat 87.1 -> 82.8 ms); a tie goes to TgWide (72 x 64 tiles of 4,096-wide linears: 854 us on
// TgWide, 930 on TgTall's 2 blocks, bench/gemm.py; bench/RESULTS.md fourteenth run).
__device__ __forceinline__ bool tall_blocks_are_fewer(unsigned M, unsigned N) {
  return kTgTall && tg_blocks<TgTall>(M, N) < tg_blocks<TgWide>(M, N);
}
// The outputs Block's blocks compute for an M x N tile, their padding included.
template <class Block>
__device__ __forceinline__ unsigned long long tg_outputs(unsigned M, unsigned N) {
  return (unsigned long long)tg_blocks<Block>(M, N) * (Block::kM * Block::kN);
}
// Whether TgBig runs an M x N tile: its blocks compute no more outputs than TgWide's, nor than TgTall's where
// the tile could take TgTall (`tall`: a MATMUL's 16-byte copies) and its blocks are fewer (duplex:1b's 72 x 88
// tiles stay on TgTall). Silero at 4,096 sessions: its LSTM matmuls' 125 x 128 tiles and its STFT's 128 x 258.
__device__ __forceinline__ bool big_blocks_pay(unsigned M, unsigned N, bool tall) {
  const unsigned long long big = tg_outputs<TgBig>(M, N);
  return kTgBigOn && big <= tg_outputs<TgWide>(M, N) &&
         (!(tall && tall_blocks_are_fewer(M, N)) || big <= tg_outputs<TgTall>(M, N));
}

// Not inlined: each of the six has the kernel's register budget to itself (inlined in matmul_gemm_body, their
// spills summed to 2,424 bytes of reloads, ptxas). The tall block's choice is made in here too: made in
// matmul_gemm_body, as four more calls, it raised the spills of the bodies beside them (the tensor-core
// streaming GEMM's 36 -> 52 bytes, ptxas).
template <bool kAlongK, int W, bool kBTf32>
__device__ __noinline__ void tiled_matmul(const MatmulTile& tile, const Epilogue& ep, bool& error) {
  auto run = [&](auto block) {
    MatmulTileOps<decltype(block), kAlongK, W> ops(tile, ep);
    tiled_gemm<kBTf32>(ops, tile.M, tile.n_cols, tile.K, error);
  };
  if constexpr (kTgBigOn)
    if (big_blocks_pay(tile.M, tile.n_cols, W == 4)) return run(TgBig{});
  if constexpr (W == 4 && kTgTall)
    if (tall_blocks_are_fewer(tile.M, tile.n_cols)) return run(TgTall{});
  run(TgWide{});
}

// ---- The weight-streaming GEMM (small M) -----------------------------------------------------------
// A MATMUL tile of too few rows for the tiled GEMM, whose b is one matrix for all its rows stored
// n-contiguous (b[k, n], bn = 1: ONNX MatMul's [K, N] initializer, a ring cache's [slot, dim]), is bound by
// reading that matrix once: its time is those bytes over the SM's share of memory bandwidth when enough of
// them are in flight (by Little's law, 4.2 TB/s / 132 SMs x ~1 us of latency: ~32 KB a SM). Each thread owns
// kVec consecutive columns (one 16-byte load a k row when they are aligned, else one column) and every R-th
// k row, R = the slices the block's threads make: step i of a pass reads row i * R + slice, and each of a
// thread's kSvDepth load registers takes its row kSvDepth steps ahead as soon as its products are issued.
// A's rows (kSvRows a pass) are staged in shared memory, k-major, in chunks of KC rows; each thread loads its
// share of the next chunk into registers while the current one is used, so no step waits at a chunk's edge.
// The slices' partial sums are added in a fixed order (lanes by shuffles, then warps through shared memory),
// so every run gives the same bits. Off (kStreamGemm = false), the lane-group body runs these tiles.
constexpr bool kStreamGemm = true;
constexpr int kSvDepth = 4;  // steps of b loads a thread has in flight
constexpr int kGemmCols = $gemm_cols;  // a thread's columns: one float4 of a b row (wavec.opcodes.GEMM_COLS, the
                                      // multiple wave-to-wpk cuts weight tiles on)
static_assert(kGemmCols == 4, "a thread's columns are one 16-byte load");

// Which threads own which columns: lanes take Qp column vectors (a power of two from kSvDepth to 32) and
// 32 / Qp slices of k; warps split into G groups of Wg, one per Qp vectors. Warps past G * Wg, and lanes past
// the tile's Q vectors, idle (they still join every barrier and shuffle). Qp >= kSvDepth keeps
// R <= blockDim / kSvDepth, so a chunk of A holds a whole number of kSvDepth steps.
static_assert(kSvDepth >= 1 && kSvDepth <= 32 && (kSvDepth & (kSvDepth - 1)) == 0, "kSvDepth: a power of two");
struct StreamLayout {
  unsigned Qp, G, Wg, R, slice, q;
  bool active;
  __device__ explicit StreamLayout(unsigned Q) {
    Qp = kSvDepth;
    while (Qp < Q && Qp < 32) Qp *= 2;
    G = (Q + Qp - 1) / Qp;
    Wg = blockDim.x / 32 / G;
    R = Wg * (32 / Qp);
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    q = warp % G * Qp + lane % Qp;
    active = warp < G * Wg && q < Q;
    slice = active ? warp / G * (32 / Qp) + lane / Qp : 0;  // an idle thread reads slice 0's staging
  }
};

template <int kVec>
struct Vec {
  float v[kVec];
};

// b's kVec columns at `at`, not kept in L1 (nothing else of the tile reads them). A coherent load: b may be
// state the beat writes (a ring cache).
template <int kVec>
__device__ __forceinline__ Vec<kVec> load_columns(const float* at) {
  Vec<kVec> r;
  if constexpr (kVec == kGemmCols) {
    asm volatile("ld.global.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.v[0]), "=f"(r.v[1]),
                 "=f"(r.v[2]), "=f"(r.v[3]) : "l"(at));
  } else {
    asm volatile("ld.global.L1::no_allocate.f32 %0, [%1];" : "=f"(r.v[0]) : "l"(at));
  }
  return r;
}

// A's loads: coherent (A is written earlier in the beat) from a pointer the compiler cannot prove global;
// volatile, so none moves across the barriers around it.
__device__ __forceinline__ float ld_global(const float* at) {
  float v;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(at));
  return v;
}

// `pro`: the tile's prologue when kPrologue. A separate instantiation: its calls to the bytecode interpreter
// had cost the plain one's loop its registers (bench/gemm.py's 8192-wide chain: 0.42 of the measured HBM
// bandwidth sharing one function, 0.52 apart; bench/RESULTS.md eighth run).
template <int kVec, bool kPrologue>
__device__ __noinline__ void stream_gemm(const MatmulTile& tile, const Prologue& pro, const Epilogue& ep, bool& error) {
  float* smem = gemm_smem();
  __shared__ const float* arow[kSvRows];
  __shared__ PrologueRow prow[kSvRows];  // the rows' views of the prologue's extras (kPrologue)
  __shared__ MatmulTile::Row orow[kSvRows];  // where the rows' outputs go
  // The loops' sizes in registers: read through `tile` (the caller's stack), each b and A load waited on a
  // local-memory load of K or ak first (nvdisasm), since a store through `error` might alias them.
  const unsigned K = tile.K, n_cols = tile.n_cols;
  const long long ak = tile.ak;
  const StreamLayout L(n_cols / kVec);
  const unsigned ncolp = L.G * L.Qp * kVec;  // the columns the layout covers, past n_cols included
  const unsigned spc = blockDim.x / L.R / kSvDepth * kSvDepth, KC = spc * L.R;  // a chunk: spc steps, KC k rows
  const unsigned steps = (K + L.R - 1) / L.R;
  const float* wb = tile.pb + L.slice * tile.bk + L.q * kVec;  // this thread's first columns
  const long long wstep = (long long)L.R * tile.bk;
  // This thread stages A(m0 + sm, k) of each chunk at k = the chunk's first + sk + u * s_stride, u < kSvRows.
  const unsigned sm = threadIdx.x % kSvRows, sk = threadIdx.x / kSvRows, s_stride = blockDim.x / kSvRows;
  for (unsigned m0 = 0; m0 < tile.M; m0 += kSvRows) {
    const unsigned rows = min((unsigned)kSvRows, tile.M - m0);
    __syncthreads();  // the previous pass is done with arow and the staging
    if (threadIdx.x < rows) {
      arow[threadIdx.x] = tile.a_row(m0 + threadIdx.x);
      orow[threadIdx.x] = tile.row(m0 + threadIdx.x, ep, error);
    }
    if (kPrologue && threadIdx.x < rows) prow[threadIdx.x] = tile.prologue_row(pro, m0 + threadIdx.x);
    __syncthreads();
    const float* my_a = sm < rows ? arow[sm] : nullptr;
    auto load_step = [&](unsigned i) {
      return L.active && i < steps && i * L.R + L.slice < K ? load_columns<kVec>(wb + i * wstep) : Vec<kVec>{};
    };
    float acc[kSvRows][kVec] = {};
    Vec<kVec> b[kSvDepth];
#pragma unroll
    for (unsigned j = 0; j < kSvDepth; ++j) b[j] = load_step(j);
    // This thread's share of the chunk of A^T (k-major: a k row's kSvRows values adjacent) at step c0, loaded
    // a chunk ahead of its staging.
    float a[kSvRows];
    auto load_a = [&](unsigned c0) {
#pragma unroll
      for (unsigned u = 0; u < kSvRows; ++u) {
        const unsigned k = c0 * L.R + sk + u * s_stride;
        a[u] = my_a && c0 < steps && sk + u * s_stride < KC && k < K ? ld_global(my_a + k * ak) : 0.0f;
      }
      if (kPrologue && my_a) {  // a prologue (a norm's scale, softmax's division) applies once per staged value
#pragma unroll
        for (unsigned u = 0; u < kSvRows; ++u) {
          const unsigned k = c0 * L.R + sk + u * s_stride;
          if (c0 < steps && sk + u * s_stride < KC && k < K) a[u] = prow[sm].apply(pro, a[u], k, error);
        }
      }
    };
    load_a(0);
    for (unsigned c0 = 0; c0 < steps; c0 += spc) {
      __syncthreads();  // the previous chunk's products are done
#pragma unroll
      for (unsigned u = 0; u < kSvRows; ++u)
        if (sk + u * s_stride < KC) smem[(sk + u * s_stride) * kSvRows + sm] = a[u];
      __syncthreads();
      load_a(c0 + spc);
      const unsigned c1 = min(c0 + spc, steps);
      for (unsigned i0 = c0; i0 < c1; i0 += kSvDepth) {
#pragma unroll
        for (unsigned j = 0; j < kSvDepth; ++j) {
          const unsigned i = i0 + j;
          const float* as = smem + ((i - c0) * L.R + L.slice) * kSvRows;
          if (i < c1) {
#pragma unroll
            for (unsigned r = 0; r < kSvRows; ++r)
#pragma unroll
              for (int v = 0; v < kVec; ++v) acc[r][v] = fmaf(as[r], b[j].v[v], acc[r][v]);
          }
          b[j] = load_step(i + kSvDepth);
        }
      }
    }
    // The slices of a warp that share columns: lanes Qp apart.
    for (unsigned off = L.Qp; off < 32; off *= 2)
#pragma unroll
      for (unsigned m = 0; m < kSvRows; ++m)
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[m][v] += __shfl_xor_sync(0xffffffffu, acc[m][v], off);
    // Then the warps' sums, in warp order, for as many rows a round as the staging holds.
    const unsigned round = max(1u, kSvSmemFloats / (L.Wg * ncolp));
    const unsigned slot = threadIdx.x / 32 / L.G, col = L.q * kVec;
    for (unsigned r0 = 0; r0 < rows; r0 += round) {
      __syncthreads();
      if (L.active && threadIdx.x % 32 < L.Qp) {
#pragma unroll
        for (unsigned m = 0; m < kSvRows; ++m)
          if (m >= r0 && m < r0 + round)
#pragma unroll
            for (int v = 0; v < kVec; ++v) smem[(slot * round + (m - r0)) * ncolp + col + v] = acc[m][v];
      }
      __syncthreads();
      const unsigned n_out = min(round, rows - r0) * n_cols;
      for (unsigned i = threadIdx.x; i < n_out; i += blockDim.x) {
        const unsigned m = i / n_cols, n = i % n_cols;
        float sum = 0.0f;
        for (unsigned w = 0; w < L.Wg; ++w) sum += smem[(w * round + m) * ncolp + n];
        tile.store(ep, orow[r0 + m], n, sum, error);
      }
    }
  }
  __syncthreads();  // the staging is free for the block's next task
}

// ---- The column GEMM (b k-contiguous, a few rows) -------------------------------------------------------
// A MATMUL tile whose b is k-contiguous (bk = 1) in 16-byte pieces, at most kColRows rows reading each matrix of
// b: attention's scores reading a ring cache [C, H, D] as K^T [H, D, C] in place (a column, a slot, being D
// contiguous floats; a one-session tile may hold several heads, up to kColBlocks), and a matrix-vector product
// over a per-session matrix lowered as its transpose (a Mamba2 readout y = h @ c as c^T h^T, a column being a
// row of h; wave-to-wpk transposed_matvec). Each thread takes (matrix, column) pairs in turn; for each it loads
// kColChunk of the column's k values at once (16-byte loads, all in flight) and multiplies them with the
// matrix's rows of A, staged in shared memory and read as broadcasts, so the column is read once for all of
// them. Before it, K^T was copied so that the streaming GEMM could take it: duplex:1b's decoder scores at 144
// sessions took 5.4 ms a beat and their copies 4.6 ms; read in place here, 5.6 ms (the beat 83.4 -> 78.9 ms;
// bench/RESULTS.md fourteenth run). Each output sums its products in k order, so every run gives the same bits.
// Switch: kColumnGemm = false leaves these tiles to the lane-group body.
constexpr bool kColumnGemm = true;
constexpr unsigned kColRows = $column_gemm_rows;      // rows a matrix of b: wavec.opcodes.COLUMN_GEMM_ROWS
constexpr unsigned kColBlocks = $column_gemm_blocks;  // matrices a tile: wavec.opcodes.COLUMN_GEMM_BLOCKS
constexpr int kColChunk = 64;  // k values a thread has in flight: 16 loads of 16 bytes

// Whether the column GEMM takes the tile: no prologue, at most kColRows rows a matrix of b and kColBlocks
// matrices, b k-contiguous with every column's start 16-byte aligned, and the rows of A fit the staging.
__device__ __forceinline__ bool column_gemm_takes(const MatmulTile& tile) {
  if (!kColumnGemm || tile.has_prologue || tile.b_rows > kColRows || tile.M > kColRows * kColBlocks ||
      tile.bk != 1 || tile.K % 4 || tile.bn % 4 || reinterpret_cast<uintptr_t>(tile.pb) % 16 ||
      tile.M * tile.K > (unsigned)kGemmSmemFloats)
    return false;
  #pragma unroll 1
  for (int d = 0; d + 1 < tile.rank; ++d)  // the other matrices' starts
    if (tile.b_strides[d] % 4) return false;
  return tile.b.sstride % 16 == 0;
}

// Threads take (matrix, column) pairs j = threadIdx.x, + blockDim.x, ... of the tile's M / b_rows matrices.
__device__ __noinline__ void column_gemm(const MatmulTile& tile, const Epilogue& ep, bool& error) {
  float* as = gemm_smem();  // A, M rows of K
  __shared__ const float* arow[kColRows * kColBlocks];
  __shared__ MatmulTile::Row orow[kColRows * kColBlocks];
  __shared__ const float* bmat[kColBlocks];
  const unsigned M = tile.M, K = tile.K, n_cols = tile.n_cols, rb = tile.b_rows, pairs = M / rb * n_cols;
  const long long ak = tile.ak, bn = tile.bn;
  for (unsigned m = threadIdx.x; m < M; m += blockDim.x) {
    arow[m] = tile.a_row(m);
    orow[m] = tile.row(m, ep, error);
    if (m % rb == 0) bmat[m / rb] = tile.b_matrix(m);
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < M * K; i += blockDim.x) as[i] = ld_global(arow[i / K] + (i % K) * ak);
  __syncthreads();
  for (unsigned j = threadIdx.x; j < pairs; j += blockDim.x) {
    const unsigned m0 = j / n_cols * rb, n = j % n_cols;
    const float4* col = reinterpret_cast<const float4*>(bmat[m0 / rb] + n * bn);
    float acc[kColRows] = {};
    for (unsigned k0 = 0; k0 < K; k0 += kColChunk) {
      float4 v[kColChunk / 4];
#pragma unroll
      for (int i = 0; i < kColChunk / 4; ++i)
        v[i] = k0 + 4 * i < K ? col[k0 / 4 + i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (unsigned r = 0; r < kColRows; ++r) {
        if (r >= rb) break;
        const float* am = as + (m0 + r) * K + k0;
#pragma unroll
        for (int i = 0; i < kColChunk / 4; ++i) {
          if (k0 + 4 * i >= K) break;
          acc[r] = fmaf(am[4 * i], v[i].x, acc[r]);
          acc[r] = fmaf(am[4 * i + 1], v[i].y, acc[r]);
          acc[r] = fmaf(am[4 * i + 2], v[i].z, acc[r]);
          acc[r] = fmaf(am[4 * i + 3], v[i].w, acc[r]);
        }
      }
    }
#pragma unroll
    for (unsigned r = 0; r < kColRows; ++r)
      if (r < rb) tile.store(ep, orow[m0 + r], n, acc[r], error);
  }
  __syncthreads();  // the staging is free for the block's next task
}

// ---- The weight-streaming GEMM on tensor cores (a cohort's rows) ------------------------------------------
// A tile of more than kSvRows rows and at most kMmaStreamRows, b n-contiguous in 16-byte column vectors, no
// prologue. The streaming GEMM's narrow pass keeps accumulators for 8 rows and streams b once per 8 rows;
// here a block takes up to 64 rows a pass (kMmaPassGroups of 16), each warp 16 of them by 32 columns in
// mma.sync m16n8k8 fragments (3xTF32, as the tiled GEMM, each step's products added to the accumulators in
// fp32). Warps split the tile's columns into G groups of 32, each group into the pass's H row groups of 16,
// and each row group's k into Wg slices of k8 steps (step i of slice s: k = 8 (s + i Wg)); a warp loads its
// own A and b values, kMmaDepth steps ahead, with no barrier and no staging (the row groups' b loads meet in
// L2; 48 rows in one pass, not 32 + 16 in two: duplex:1b at 96 sessions, bench/RESULTS.md tenth run). Inside a
// step, logical k (q, q + 4) of the PTX fragments is stored k (2q, 2q + 1), and column 4c + t of the group
// is n8 tile t's column c, so lane g's b values are one float4 at column 4g of each of two k rows. The
// slices' parts are added in a fixed tree (slice s takes s + span's, span = 1, 2, 4, ...) through the GEMM
// staging buffer, so every run gives the same bits. Switch: kMmaStreamRows = 0 leaves these tiles to the
// tiled GEMM and the narrow pass. 48: a tile of 49 to 64 rows fills at least 77% of the tiled GEMM's block,
// which then runs it faster (bench/gemm.py, 8 chained 2048^2 bf16 linears at 256 sessions, tiles of 64 rows:
// 783.6 us here, 494.2 on the tiled GEMM; bench/RESULTS.md twelfth run), while at 48 rows (duplex:1b at 96
// sessions) the tiled GEMM was no faster (77.9 against 76.7 ms a beat).
constexpr unsigned kMmaStreamRows = 48;
// kTgMinRows: the fewest rows a MATMUL tile takes the tiled GEMM with: those past the tensor-core streaming
// GEMM's, up to a whole block (kTgM; with that GEMM off, kMmaStreamRows = 0, a block too).
constexpr unsigned kTgMinRows =
    kMmaStreamRows > (unsigned)kSvRows && kMmaStreamRows < (unsigned)kTgM ? kMmaStreamRows + 1 : (unsigned)kTgM;
// kTgFewRows: a tile the narrow pass would take, of more rows than it keeps (kSvRows) and fewer than kTgMinRows,
// b in 16-byte column vectors, whose k is too short for the tensor-core streaming GEMM (MmaStreamLayout::fits)
// takes the tiled GEMM, a block partly empty, instead of the narrow pass's kSvRows rows a pass. Silero's LSTM matmuls at 256 sessions (32 rows x 32
// columns, K = 128) took 24.7 us a task in four passes, 14.8 in one block; the beat 163.6 -> 143.2 us
// (bench/RESULTS.md eighteenth run).
constexpr bool kTgFewRows = true;
constexpr int kMmaDepth = 4;  // steps of loads a warp has in flight: 4 x 8 warps' distinct 1 KB of b, 32 KB a SM
constexpr int kMmaPassGroups = 4, kMmaCols = 32, kMmaPart = 16 * kMmaCols;  // a warp's part: 16 rows x 32 columns
// Each block starts its slices' walk over k at a step of its own (the block's index times 5, wrapped), so the
// SMs of a phase, all reading the same A, spread their first reads over its lines instead of all asking L2
// for the same ones at once. Any start gives the same bits run after run: a task's worker is fixed (the
// same rows in another tile, or another profile's, may differ in their last bits).
constexpr bool kMmaRotate = true;

struct MmaStreamLayout {
  unsigned G, H, Wg, group, rows, slice, slots;
  bool active;
  __device__ MmaStreamLayout(unsigned n_cols, unsigned M) {
    G = (n_cols + kMmaCols - 1) / kMmaCols;
    H = min((M + 15) / 16, (unsigned)kMmaPassGroups);
    Wg = blockDim.x / 32 / max(G * H, 1u);
    const unsigned warp = threadIdx.x / 32;
    group = warp % G;
    rows = warp / G % H;  // the warp's row group of a pass
    slice = warp / (G * H);
    active = slice < Wg;
    slots = (Wg + 1) / 2;  // parts handed over at the tree's first level, the most at once
  }
  // Whether every column and row group has a warp, the tree's parts fit the staging buffer, and k is long: at
  // least 512, and 2 kMmaDepth steps a slice. Silero's LSTM at 1,024 sessions (tiles of 64 rows, K = 128) took
  // 87 us a phase in slices of 4 steps, 43 us on the tiled GEMM (bench/RESULTS.md tenth run).
  __device__ bool fits(unsigned K) const {
    return G >= 1 && Wg >= 1 && G * H * slots * kMmaPart <= (unsigned)kGemmSmemFloats && K >= 512 &&
           (K + 7) / 8 >= 2 * kMmaDepth * Wg;
  }
};

// One step's values of a lane: A rows (g, g + 8) at k (2q, 2q + 1), and b rows (2q, 2q + 1) at its columns.
struct MmaStep {
  float a[2][2];  // [row g, g + 8][k 2q, 2q + 1]
  float4 b[2];    // [k 2q, 2q + 1]
};

// kBTf32: b's values are TF32 numbers (tile.b_tf32; bf16 weights: every value of duplex:1b's), so each n8
// tile takes 2 products a step, not 3, and b is not split (mma_3xtf32).
template <bool kBTf32>
__device__ __noinline__ void mma_stream_gemm(const MatmulTile& tile, const Epilogue& ep, bool& error) {
  const MmaStreamLayout L(tile.n_cols, tile.M);
  const unsigned K = tile.K, n_cols = tile.n_cols, steps = (K + 7) / 8, Wg = L.Wg, slice = L.slice;
  const long long ak = tile.ak, bk = tile.bk;
  const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned col = L.group * kMmaCols + 4 * g;  // this lane's b columns: col .. col + 3
  const bool has_cols = L.active && col < n_cols;
  const float* wb = tile.pb + col;
  const unsigned my_steps = L.active && slice < steps ? (steps - slice + Wg - 1) / Wg : 0;
  float* buf = gemm_smem();
  const unsigned rot = kMmaRotate && my_steps ? blockIdx.x * 5u % my_steps : 0;
  for (unsigned m0 = 0; m0 < tile.M; m0 += 16 * L.H) {
    const unsigned row0 = m0 + 16 * L.rows + g;  // this lane's rows: row0, row0 + 8
    const float* arow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) arow[h] = L.active && row0 + 8 * h < tile.M ? tile.a_row(row0 + 8 * h) : nullptr;
    auto load = [&](unsigned i, MmaStep& v) {  // the step this warp walks i-th (rotated by rot)
      const bool in = i < my_steps;
      const unsigned r = i + rot >= my_steps ? i + rot - my_steps : i + rot;
      const unsigned k0 = 8 * (slice + r * Wg) + 2 * q;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const bool k_in = in && k0 + kk < K;
#pragma unroll
        for (int h = 0; h < 2; ++h) v.a[h][kk] = k_in && arow[h] ? ld_global(arow[h] + (k0 + kk) * ak) : 0.0f;
        if (k_in && has_cols) {
          const Vec<kGemmCols> b = load_columns<kGemmCols>(wb + (k0 + kk) * bk);
          v.b[kk] = make_float4(b.v[0], b.v[1], b.v[2], b.v[3]);
        } else {
          v.b[kk] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
    };
    float acc[4][4] = {};  // [n8 tile][fragment]
    MmaStep v[kMmaDepth];
#pragma unroll
    for (int j = 0; j < kMmaDepth; ++j) load(j, v[j]);
    for (unsigned i0 = 0; i0 < my_steps; i0 += kMmaDepth) {
#pragma unroll
      for (int j = 0; j < kMmaDepth; ++j) {
        if (i0 + j < my_steps) {
          unsigned a_big[4], a_small[4];  // PTX order: (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)
          tf32_split(v[j].a[0][0], a_big[0], a_small[0]);
          tf32_split(v[j].a[1][0], a_big[1], a_small[1]);
          tf32_split(v[j].a[0][1], a_big[2], a_small[2]);
          tf32_split(v[j].a[1][1], a_big[3], a_small[3]);
          const float b0[4] = {v[j].b[0].x, v[j].b[0].y, v[j].b[0].z, v[j].b[0].w};
          const float b1[4] = {v[j].b[1].x, v[j].b[1].y, v[j].b[1].z, v[j].b[1].w};
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            float part[4] = {};
            mma_3xtf32<kBTf32>(part, a_big, a_small, b0[nt], b1[nt]);
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[nt][c] += part[c];
          }
        }
        load(i0 + j + kMmaDepth, v[j]);
      }
    }
    // The slices' parts, added in a fixed tree: at each level slice s + span hands its part to slice s.
    for (unsigned span = 1; span < Wg; span *= 2) {
      float* part = buf + ((L.group * L.H + L.rows) * L.slots + slice / (2 * span)) * kMmaPart;
      __syncthreads();
      if (L.active && slice % (2 * span) == span) {
#pragma unroll
        for (int r = 0; r < 16; ++r) part[r * 32 + lane] = acc[r / 4][r % 4];
      }
      __syncthreads();
      if (L.active && slice % (2 * span) == 0 && slice + span < Wg) {
#pragma unroll
        for (int r = 0; r < 16; ++r) acc[r / 4][r % 4] += part[r * 32 + lane];
      }
    }
    // Slice 0 stores its part's sums. Fragment c of n8 tile nt: row g (+ 8 for c >= 2), column 4 (2q + c % 2) + nt
    // of the group.
    auto column = [&](int nt, int c) { return L.group * kMmaCols + 4 * (2 * q + c) + nt; };
    if (L.active && slice == 0) {
      long long step[kMaxInputs - 1];
      MatmulTile::column_steps(ep, step);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const MatmulTile::Row r = tile.row(row0 + 8 * h, ep, error);
        EpilogueIn in[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            in[nt][c] = column(nt, c) < n_cols ? tile.gather(ep, r, column(nt, c), acc[nt][2 * h + c], step)
                                               : EpilogueIn{acc[nt][2 * h + c], 0.0f};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (column(nt, c) < n_cols) tile.put(ep, r, column(nt, c), in[nt][c], step, error);
      }
    }
    __syncthreads();  // the tree's buffer is free for the next pass
  }
}

// Whether a GEMM body could take the task, from its words without the tile's decode (whose divisions and
// strided offsets cost a one-session tile about 3.5 us to decline, clock64 probes of one-session Silero,
// bench/RESULTS.md fifteenth run): the tiled GEMM wants kTgMinRows rows, the streaming GEMMs a K of 16 loads
// a lane, the column GEMM a k-contiguous b. A tile's rows times columns are its sessions times elements. The
// first two rules are matmul_gemm_body's own (rows_to_tile, k_to_stream); column_gemm_takes requires bk == 1.
__device__ __forceinline__ bool rows_to_tile(unsigned long long rows) { return rows >= kTgMinRows; }
__device__ __forceinline__ bool k_to_stream(long long K, unsigned outputs) { return K >= 16LL * lanes_for(outputs, 32); }

__device__ __forceinline__ bool gemm_body_may_take(const Payload& t, const long long* __restrict__ p) {
  const MatmulWords words(p);
  const unsigned N = (unsigned)words.shape[words.rank - 1], sessions = t.session_end - t.session_begin;
  const unsigned rows = (t.elem_end - 1) / N - t.elem_begin / N + 1;
  return words.b_strides[words.rank] == 1 || rows_to_tile((unsigned long long)sessions * rows) ||
         k_to_stream(words.K, sessions * (t.elem_end - t.elem_begin));
}

// Runs the task on a GEMM body and returns true: the column GEMM for a tile it takes (column_gemm_takes), the
// tensor-core streaming GEMM for a tile it takes (mma_stream_gemm: 9 to kMmaStreamRows rows, or up to kTgM
// that the tiled GEMM declines; b n-contiguous in column vectors, long k, no prologue), else the tiled GEMM for
// a tile of at least kTgMinRows rows (or kTgFewRows') and a quarter of a block's columns, else the streaming
// GEMM's narrow pass when b is n-contiguous (at most 32 column vectors a warp); or returns false with nothing
// done (the lane-group body's tiles).
__device__ __noinline__ bool matmul_gemm_body(const Payload& t, const long long* __restrict__ p,
                                              char* const* arena_base, unsigned* out_epoch, unsigned beat) {
  __shared__ bool single_b;
  __shared__ const long long* ep_words;
  if (threadIdx.x == 0) single_b = single_b_tile(t, p, arena_base, task_tile, ep_words);
  __syncthreads();
  if (!single_b) return false;
  const MatmulTile& tile = task_tile;
  if (column_gemm_takes(tile)) {
    const Epilogue& ep = block_copy(task_epilogue, t, arena_base, ep_words, 2);
    bool error = false;
    column_gemm(tile, ep, error);
    if (error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
    return true;
  }
  if (tile.b_rows < tile.M) return false;  // several matrices of b: the column GEMM's tiles only
  const bool tiles = kTiledGemm && kTgFits && !tile.has_prologue && tile.n_cols >= kTgN / 4;
  const bool vec4 = tile.n_cols % kGemmCols == 0 && tile.bk % kGemmCols == 0 &&
                    reinterpret_cast<uintptr_t>(tile.pb) % (kGemmCols * sizeof(float)) == 0;
  // The streaming GEMM costs a tile ~10 us whatever its size (one-session Silero, K = 128 x 32 columns: a printf
  // probe of its phases, bench/RESULTS.md eighth run), where lane groups cost ~2 us plus a memory round trip
  // for every 4 loads a lane makes along K: it takes the tiles whose lanes would make 16 loads or more, in at
  // most kTgM / kSvRows passes (a 2,048-row mat-vec of duplex:1b's state took 1 ms in 256 passes).
  const bool stream = kStreamGemm && tile.bn == 1 && (vec4 ? tile.n_cols / kGemmCols : tile.n_cols) <= 32 * (blockDim.x / 32) &&
                      tile.M <= kTgM && k_to_stream(tile.K, tile.M * tile.n_cols);
  // The tensor-core streaming GEMM takes a cohort's rows up to kMmaStreamRows, and the larger tiles (up to
  // kTgM rows: `stream`) the tiled GEMM declines, which would otherwise take the narrow pass (8 rows a pass,
  // no tensor cores).
  const bool mma_fits = stream && vec4 && !tile.has_prologue && tile.M > kSvRows &&
                        MmaStreamLayout(tile.n_cols, tile.M).fits(tile.K);
  const bool tiled = tiles && (rows_to_tile(tile.M) || (kTgFewRows && stream && vec4 && tile.M > kSvRows && !mma_fits));
  const bool mma_rows = tile.M <= kMmaStreamRows || (kMmaStreamRows > 0 && !tiled);
  const bool mma_stream = mma_fits && mma_rows;
  if (!tiled && !stream) return false;
  const Prologue& pro = block_copy(task_prologue, t, arena_base, tile.prologue, tile.rank);
  const Epilogue& ep = block_copy(task_epilogue, t, arena_base, ep_words, 2 + pro.n_extra);
  bool error = false;
  if (mma_stream) {
    if (tile.b_tf32) mma_stream_gemm<true>(tile, ep, error);
    else mma_stream_gemm<false>(tile, ep, error);
  } else if (tiled && tile_copies_vectorize(tile)) {
    if (tile.bk == 1 && tile.b_tf32) tiled_matmul<true, 4, true>(tile, ep, error);
    else if (tile.bk == 1) tiled_matmul<true, 4, false>(tile, ep, error);
    else if (tile.b_tf32) tiled_matmul<false, 4, true>(tile, ep, error);
    else tiled_matmul<false, 4, false>(tile, ep, error);
  } else if (tiled) {  // b split even when it is TF32: the same bits (its small part is 0), one body fewer
    if (tile.bk == 1) tiled_matmul<true, 1, false>(tile, ep, error);
    else tiled_matmul<false, 1, false>(tile, ep, error);
  } else if (tile.has_prologue) {
    if (vec4) stream_gemm<kGemmCols, true>(tile, pro, ep, error);
    else stream_gemm<1, true>(tile, pro, ep, error);
  } else {
    if (vec4) stream_gemm<kGemmCols, false>(tile, pro, ep, error);
    else stream_gemm<1, false>(tile, pro, ep, error);
  }
  if (error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
  return true;
}

// CONV (ONNX, NC + spatial, contiguous): out[n, o, y] = epilogue(bias[o] + sum x[n, g*Cg + c, y*s + k*d - p] w[o, c, k]).
// Words: CONV, nsp, batch, c_in, c_out, group, has_bias, in_sp[nsp], out_sp[nsp], kernel[nsp], stride[nsp],
// pad_begin[nsp], dilation[nsp], epilogue. Inputs: x, w, bias (when has_bias), the epilogue's extras.
// Out-of-range reads are 0. The reduction runs over j = (c, k) flattened.
// conv_tap_offset: the element offset of tap j for an output whose input origin is `origin`, or -1 when the
// tap falls outside the input (it contributes nothing).
__device__ __forceinline__ long long conv_tap_offset(unsigned j, unsigned k_total, int nsp, const long long* in_sp,
                                                    const long long* kernel, const long long* dilation,
                                                    const long long* origin, long long in_total) {
  const unsigned c = j / k_total, kk = j % k_total;
  long long in_off = 0, in_step = 1;
  unsigned rem = kk;
  #pragma unroll 1
  for (int d = nsp - 1; d >= 0; --d) {
    const unsigned kd = rem % (unsigned)kernel[d];
    rem /= (unsigned)kernel[d];
    const long long pos = origin[d] + kd * dilation[d];
    if (pos < 0 || pos >= in_sp[d]) return -1;
    in_off += pos * in_step;
    in_step *= in_sp[d];
  }
  return c * in_total + in_off;
}

constexpr int kMaxConvSpatial = 3;  // conv bodies keep one output's input origin in registers

// Sessions a lane group computes together when the weights are shared by the cohort: each weight load
// then serves kConvSessions outputs (one x load each) instead of one, and their FMAs are independent.
// Measured on Silero (bench/RESULTS.md): 1,024 sessions 1,851 -> 927 us a beat, 16,384 sessions 26.9 ->
// 11.1 ms; a group of a tile of fewer sessions repeats its first session's loads (1 session: 99.6 -> 108.6
// us; a per-count variant and a predicated one measured slower).
constexpr int kConvSessions = 4;
constexpr int kConvUnroll = 4;  // taps a lane loads ahead of their FMAs (1-D convs)
constexpr int kConvUnrollOne = 8;  // the same for a group of one session (two loads a tap, not five)
constexpr bool kConvChannelWalk = true;  // short kernels walk channels (conv1d_channels), else conv1d_taps

// One lane's share of a 1-D CONV output's taps (the reduction over j = (channel c, tap k) flattened, a
// lane taking j = lane, lane + lanes, ...), for kRows sessions whose x rows are xs floats apart (rows past
// `ns` read row 0's, in bounds and not stored). (c, k) advance without a division: a step of `lanes` taps
// is dc channels and dk taps. kUnroll taps' loads are issued before their FMAs (a lane's taps are otherwise
// one dependent memory round trip each, which is a small cohort's whole beat); taps past the end are
// predicated off, so the last round is one round too. Offsets within a session's input are 32-bit (the
// payload's element range is). The loop is issue-bound, not memory-bound: a group of one session loaded
// four rows (kConvSessions) of the same x, 250 instructions a round of 16 FMAs (nvdisasm), ~1,200 cycles a
// round (clock64 probes of one-session Silero; bench/RESULTS.md seventeenth run).
template <int kRows, int kUnroll>
__device__ __forceinline__ void conv1d_taps(float (&acc)[kConvSessions], const float* __restrict__ px, long long xs,
                                            const float* __restrict__ pw, unsigned ns, unsigned lane,
                                            unsigned lanes, unsigned taps, unsigned K, int L, int origin, int dil) {
  unsigned j = lane, c = j / K, k = j % K;
  const unsigned dc = lanes / K, dk = lanes % K;
  const float* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = px + (r < (int)ns ? r : 0) * xs;
  for (; j < taps; j += kUnroll * lanes) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int pos = origin + (int)k * dil;
      const bool inside = j + u * lanes < taps && pos >= 0 && pos < L;
      const int at = (int)(c * (unsigned)L) + pos;
      const float wv = inside ? pw[j + u * lanes] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = fmaf(inside ? rows[r][at] : 0.0f, wv, acc[r]);
      k += dk;
      c += dc;
      if (k >= K) {
        k -= K;
        ++c;
      }
    }
  }
}

// A lane's share of a 1-D CONV output whose kernel has kK taps (2 to kConvShortTaps) at unit dilation:
// channels c = lane, lane + lanes, ... with all kK taps each. A tap's input position, and whether it lies
// inside the input, are the same for every channel, so they are computed once, not per tap as in
// conv1d_taps; a channel is kK contiguous weights and, per session row, kK contiguous inputs, loaded at
// immediate offsets from one address each. Silero's encoder convs (kK = 3) at 64 sessions: conv1d_taps spent
// ~17,800 cycles a task on 387 taps, 13 instructions an FMA (clock64 probes, nvdisasm; bench/RESULTS.md
// seventeenth run). About 32 loads are in flight a round.
constexpr int kConvShortTaps = 7;
template <int kRows, int kK>
__device__ __forceinline__ void conv1d_channels(float (&acc)[kConvSessions], const float* __restrict__ px,
                                                long long xs, const float* __restrict__ pw, unsigned ns,
                                                unsigned lane, unsigned lanes, unsigned channels, int L, int origin) {
  constexpr int kUnroll = 32 / (kK * (kRows + 1)) > 1 ? 32 / (kK * (kRows + 1)) : 1;
  bool inside[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) inside[k] = origin + k >= 0 && origin + k < L;
  const float* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = px + (r < (int)ns ? r : 0) * xs + origin;
  for (unsigned c = lane; c < channels; c += kUnroll * lanes) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      // A load whose tap lies outside the input or whose channel is past the last is predicated off: its
      // address is never dereferenced, so none is clamped.
      const unsigned cu = c + u * lanes;
      const bool live = cu < channels;
      const float* w = pw + cu * kK;
      const unsigned at = cu * (unsigned)L;
      float wv[kK];
#pragma unroll
      for (int k = 0; k < kK; ++k) wv[k] = live && inside[k] ? w[k] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float* x = rows[r] + at;
#pragma unroll
        for (int k = 0; k < kK; ++k) acc[r] = fmaf(live && inside[k] ? x[k] : 0.0f, wv[k], acc[r]);
      }
    }
  }
}

// conv1d_channels for a kernel of K taps when 2 <= K <= kConvShortTaps (returns false otherwise).
template <int kRows, int kK = 2>
__device__ __forceinline__ bool conv1d_short(float (&acc)[kConvSessions], const float* __restrict__ px, long long xs,
                                             const float* __restrict__ pw, unsigned ns, unsigned lane, unsigned lanes,
                                             unsigned channels, unsigned K, int L, int origin) {
  if constexpr (kK > kConvShortTaps) {
    return false;
  } else {
    if (K != kK) return conv1d_short<kRows, kK + 1>(acc, px, xs, pw, ns, lane, lanes, channels, K, L, origin);
    conv1d_channels<kRows, kK>(acc, px, xs, pw, ns, lane, lanes, channels, L, origin);
    return true;
  }
}

// Where a thread's copies of the tiled CONV's A read x: copy i's row m = m0 + WalkA::row(i) is session m / T's
// time step m % T, whose window starts at (m % T) * stride - pad. kWholeSessions: T divides the walk's row
// step, so the copies' rows are whole sessions apart in the same time step: one pointer, one window start and
// a session step, where the general case holds a pointer and a start a copy (a one-float walk's 8 copies: 24
// registers, which beside TgBig's accumulators spilled).
template <class WalkA, bool kWholeSessions>
struct ConvRowsA {
  const float* xrow[WalkA::kCopies];  // the rows' sessions' x (the first session's past M, never read)
  int pos0[WalkA::kCopies];
  __device__ __forceinline__ void start(OperandView x, unsigned s0, unsigned M, unsigned T, int stride, int pad,
                                        unsigned m0) {
#pragma unroll
    for (int i = 0; i < WalkA::kCopies; ++i) {
      const unsigned m = m0 + WalkA::row(i);
      xrow[i] = x.at(s0 + (m < M ? m / T : 0), 0);
      pos0[i] = (int)(m % T) * stride - pad;
    }
  }
  __device__ __forceinline__ const float* row(int i) const { return xrow[i]; }
  __device__ __forceinline__ int window(int i) const { return pos0[i]; }
};
template <class WalkA>
struct ConvRowsA<WalkA, true> {
  const float* x0;  // copy 0's session's x
  long long step;   // floats from one copy's session to the next's
  int pos0;
  __device__ __forceinline__ void start(OperandView x, unsigned s0, unsigned M, unsigned T, int stride, int pad,
                                        unsigned m0) {
    const unsigned m = m0 + WalkA::row(0);
    x0 = x.at(s0 + m / T, 0);  // past M only with every copy's row past it: never read
    step = (long long)(WalkA::kRowStep / T) * (long long)(x.sstride / sizeof(float));
    pos0 = (int)(m % T) * stride - pad;
  }
  __device__ __forceinline__ const float* row(int i) const { return x0 + i * step; }
  __device__ __forceinline__ int window(int) const { return pos0; }
};

// The tiled CONV: a 1-D, ungrouped, single-image CONV whose weights the cohort shares, over a tile of whole
// channels, as a GEMM (tiled_gemm): rows m = (session, t), columns the tile's channels, k = (input channel,
// tap); A(m, k) is gathered from x (0 outside the padded input), B(k, n) is the weight w[channel, k]. W: the
// floats a copy moves, 4 where conv_copies_vectorize holds (every 4-float piece of k is 4 taps of one channel,
// contiguous in x and wholly inside or outside it: an STFT's frames), else 1.
template <int W, class TBlock, bool kWholeSessions>
struct ConvTileOps {
  using Block = TBlock;
  static constexpr bool kBAlongK = true;  // a channel's weights are contiguous in k
  static constexpr int kVec = W;
  using WalkA = TgWalkA<W, Block>;
  using WalkB = TgWalkB<W, true, Block>;
  struct Row {
    unsigned s, t;
    long long extra_off[kMaxInputs - 1];  // the epilogue's extras' offsets at the row's first channel (Epilogue::offsets)
    // and their steps to the next channel: along dim rank - 2 of the epilogue's shape, the output's [..., C, T]
    // (its leading dims are 1: conv_tiles_as_gemm takes one image)
    long long step[kMaxInputs - 1];
    bool valid;
  };
  unsigned session_begin, M, T, L, KW, K, u0, channels;
  int stride, pad, dil;
  bool has_bias;
  OperandView x, out, bias;
  const float* w;  // the tile's first channel's weights
  const Epilogue& ep;
  ConvRowsA<WalkA, kWholeSessions> rows_a;  // this thread's A rows
  unsigned rows_in;                         // bit i: A row i lies inside the tile

  // An epilogue naming more extras than the task has slots sets `error`, and its rows store nothing.
  __device__ __forceinline__ Row row(unsigned m, bool& error) const {
    Row r{};
    if (m >= M) return r;
    r = Row{session_begin + m / T, m % T, {}, {}, true};
    r.valid = ep.n_code == 0 || ep.offsets((long long)u0 * T + r.t, r.extra_off);
    ep.dim_strides(ep.rank - 2, r.step);
    error |= !r.valid;
    return r;
  }
  __device__ __forceinline__ void start_rows(unsigned m0) {
    rows_a.start(x, session_begin, M, T, stride, pad, m0);
    rows_in = 0;
#pragma unroll
    for (int i = 0; i < WalkA::kCopies; ++i) rows_in |= (unsigned)(m0 + WalkA::row(i) < M) << i;
  }
  // k's input channel and tap are the same for each copy i of a chunk: computed outside the copy's predicate,
  // one division a chunk (under it, each copy repeated the quotient's fix-up, nvdisasm). Outside the padded
  // input the copy reads nothing (CopySource), so its address is not clamped.
  __device__ __forceinline__ CopySource a_source(int i, unsigned k0) const {
    const unsigned k = k0 + WalkA::col(), channel = k / KW, tap = k - channel * KW;
    const int pos = rows_a.window(i) + (int)tap * dil;
    const bool valid = (rows_in >> i & 1) && k < K && pos >= 0 && pos < (int)L;
    return {rows_a.row(i) + (int)(channel * L) + pos, valid ? (unsigned)W : 0u};
  }
  __device__ __forceinline__ CopySource b_source(int i, unsigned n0, unsigned k0) const {
    const unsigned n = n0 + WalkB::row(i), k = k0 + WalkB::col();
    return {w + (size_t)n * K + k, n < channels && k < K ? (unsigned)W : 0u};
  }
  __device__ __forceinline__ EpilogueIn gather(const Row& r, unsigned n, float sum) const {
    if (!r.valid) return {sum, 0.0f};
    return {has_bias ? sum + *bias.at(r.s, u0 + n) : sum, ep.first_extra(r.s, r.extra_off, n, r.step)};
  }
  __device__ __forceinline__ void put(const Row& r, unsigned n, EpilogueIn in, bool& error) const {
    if (!r.valid) return;
    *out.at(r.s, (long long)(u0 + n) * T + r.t) =
        ep.template finish<kTgInlineEpilogue>(in.acc, in.x0, r.s, r.extra_off, n, r.step, error);
  }
};

// Whether the task is of the tiled CONV's form and fills at least a quarter of a block (else conv_body's lane
// groups do better). Inlined in run_task: a call only to decline cost a one-session tile ~700 cycles
// (printf probe, bench/RESULTS.md eighth run).
// Every index of the tile fits 32 bits: a session's output elements do (the payload's fields are 32-bit), its
// rows and input elements are checked.
__device__ __forceinline__ bool conv_tiles_as_gemm(const Payload& t, const long long* __restrict__ p) {
  const long long T = p[8], rows = (long long)(t.session_end - t.session_begin) * T;
  return p[1] == 1 && p[2] == 1 && p[5] == 1 && t.session_stride[1] == 0 && rows >= kTgM && rows < (1LL << 31) &&
         p[3] * p[7] < (1LL << 31) && t.elem_begin % T == 0 && t.elem_end % T == 0 &&
         (t.elem_end - t.elem_begin) / T >= kTgN / 4;
}

// Whether the tiled CONV's copies may move 16 bytes: taps contiguous (dilation 1) in whole pieces of 4 (the
// kernel's width, the stride, the padding and the input's length multiples of 4, so a piece lies wholly inside x
// or wholly in its padding), and x's sessions and the weights 16-byte aligned.
__device__ __forceinline__ bool conv_copies_vectorize(const long long* __restrict__ p, OperandView x, const float* w) {
  return kTgVec && p[12] == 1 && p[9] % 4 == 0 && p[10] % 4 == 0 && p[11] % 4 == 0 && p[7] % 4 == 0 &&
         reinterpret_cast<uintptr_t>(x.base) % 16 == 0 && x.sstride % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// The tiled CONV of a task conv_tiles_as_gemm takes, W floats a copy: on TgBig where it pays and the copies'
// rows are whole sessions apart (ConvRowsA: with a pointer and a window a copy, a one-float walk's 8 beside
// TgBig's 32 accumulators spilled 340 bytes a thread, ptxas), else on TgWide. Not inlined: each width has the
// kernel's register budget to itself (inlined side by side, their spill loads 60 -> 128 bytes, ptxas).
template <int W>
__device__ __noinline__ void conv_tiled(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                                        const Epilogue& ep, OperandView x, const float* w, unsigned u0, bool& error) {
  const long long has_bias = p[6];
  const unsigned c_in = (unsigned)p[3], L = (unsigned)p[7], T = (unsigned)p[8], KW = (unsigned)p[9];
  const unsigned M = (t.session_end - t.session_begin) * T, U = (t.elem_end - t.elem_begin) / T, K = c_in * KW;
  auto run = [&](auto block, auto whole_sessions) {
    ConvTileOps<W, decltype(block), decltype(whole_sessions)::value> ops{
        t.session_begin, M, T, L, KW, K, u0, U, (int)p[10], (int)p[11], (int)p[12], has_bias != 0, x,
        operand(t, arena_base, kOutSlot), has_bias ? operand(t, arena_base, 2) : OperandView{nullptr, 0}, w, ep, {}, 0};
    tiled_gemm<false>(ops, M, U, K, error);
  };
  auto whole_sessions = [&](auto block) { return TgWalkA<W, decltype(block)>::kRowStep % T == 0; };
  if constexpr (kTgBigOn)
    if (whole_sessions(TgBig{}) && big_blocks_pay(M, U, false)) return run(TgBig{}, std::true_type{});
  if (whole_sessions(TgWide{})) return run(TgWide{}, std::true_type{});
  run(TgWide{}, std::false_type{});
}

__device__ __noinline__ void conv_tiled_body(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                                             unsigned* out_epoch, unsigned beat) {
  const Epilogue& ep = block_copy(task_epilogue, t, arena_base, p + 13, p[6] ? 3 : 2);
  const OperandView x = operand(t, arena_base, 0);
  const unsigned u0 = t.elem_begin / (unsigned)p[8];  // the tile's first channel
  const float* w = operand(t, arena_base, 1).at(0, 0) + (size_t)u0 * (unsigned)(p[3] * p[9]);
  bool error = false;
  if (conv_copies_vectorize(p, x, w)) conv_tiled<4>(t, p, arena_base, ep, x, w, u0, error);
  else conv_tiled<1>(t, p, arena_base, ep, x, w, u0, error);
  if (error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
}

// Not inlined: the kernel's register budget (128 at 512 threads) then holds per body, not summed.
__device__ __noinline__ void conv_body(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                                       unsigned* out_epoch, unsigned beat) {
  const int nsp = (int)p[1];
  // A session's elements, input and output, and its weights' taps fit 32 bits (the payload's element
  // range is 32-bit): 32-bit divisions, not 64-bit library calls.
  const unsigned c_in = (unsigned)p[3], c_out = (unsigned)p[4], group = (unsigned)p[5];
  const long long has_bias = p[6];
  const long long* in_sp = p + 7;
  const long long* out_sp = in_sp + nsp;
  const long long* kernel = out_sp + nsp;
  const long long* stride = kernel + nsp;
  const long long* pad = stride + nsp;
  const long long* dilation = pad + nsp;
  unsigned in_total = 1, out_total = 1, k_total = 1;
  #pragma unroll 1
  for (int d = 0; d < nsp; ++d) {
    in_total *= (unsigned)in_sp[d];
    out_total *= (unsigned)out_sp[d];
    k_total *= (unsigned)kernel[d];
  }
  const unsigned cg = c_in / group, og = c_out / group, taps = cg * k_total;
  const OperandView out = operand(t, arena_base, kOutSlot);
  const OperandView x = operand(t, arena_base, 0);
  const OperandView w = operand(t, arena_base, 1);
  const OperandView bias = has_bias ? operand(t, arena_base, 2) : OperandView{nullptr, 0};
  const Epilogue& ep = block_copy(task_epilogue, t, arena_base, dilation + nsp, has_bias ? 3 : 2);
  bool ep_error = false;
  const unsigned n_sess = t.session_end - t.session_begin;
  const unsigned block = w.sstride == 0 ? kConvSessions : 1;  // per-session weights: one session a group
  // A one-session tile combined its three unused sessions' partials too: 0.5 us of its 6.5 (clock64 probes,
  // bench/RESULTS.md fifteenth run).
  const unsigned tile_block = min(block, n_sess);
  const LaneGroups g(t, (n_sess + block - 1) / block);
  for (unsigned base = 0; base < g.outputs; base += g.groups) {
    const unsigned o_idx = base + g.group;
    const bool active = o_idx < g.outputs;
    float acc[kConvSessions] = {};
    unsigned s0 = 0, ns = 0, e = 0, o = 0;
    if (active) {
      s0 = t.session_begin + (o_idx / g.per_session) * block;
      ns = min(block, t.session_end - s0);
      e = t.elem_begin + o_idx % g.per_session;
      const unsigned n = e / (c_out * out_total);
      o = (e / out_total) % c_out;
      long long origin[kMaxConvSpatial];
      unsigned rem_y = e % out_total;
#pragma unroll
      for (int d = kMaxConvSpatial - 1; d >= 0; --d) {
        if (d < nsp) {
          const unsigned dim = (unsigned)out_sp[d];
          origin[d] = (long long)(rem_y % dim) * stride[d] - pad[d];
          rem_y /= dim;
        }
      }
      const float* px = x.at(s0, ((long long)n * c_in + (o / og) * cg) * in_total);
      // Session r's x is px + r * xs; rows past the tile's last session read session s0's (in bounds, not
      // written).
      const long long xs = (long long)(x.sstride / sizeof(float));
      const float* pw = w.at(s0, (long long)o * cg * k_total);
      if (nsp == 1) {
        // 1-D (every streaming audio conv); consecutive lanes read consecutive weights.
        const int L = (int)in_sp[0], origin0 = (int)origin[0], dil = (int)dilation[0];
        // A short kernel at unit dilation walks channels when there are enough to give every lane one
        // (kConvChannelWalk).
        const bool by_channel = kConvChannelWalk && dil == 1 && cg >= g.lanes;
        if (tile_block == 1) {
          if (!by_channel || !conv1d_short<1>(acc, px, xs, pw, ns, g.lane, g.lanes, cg, k_total, L, origin0))
            conv1d_taps<1, kConvUnrollOne>(acc, px, xs, pw, ns, g.lane, g.lanes, taps, k_total, L, origin0, dil);
        } else if (!by_channel ||
                   !conv1d_short<kConvSessions>(acc, px, xs, pw, ns, g.lane, g.lanes, cg, k_total, L, origin0)) {
          conv1d_taps<kConvSessions, kConvUnroll>(acc, px, xs, pw, ns, g.lane, g.lanes, taps, k_total, L, origin0, dil);
        }
      } else {
        for (unsigned j = g.lane; j < taps; j += g.lanes) {
          const long long at = conv_tap_offset(j, (unsigned)k_total, nsp, in_sp, kernel, dilation, origin, in_total);
          if (at < 0) continue;
          const float wv = pw[j];
#pragma unroll
          for (int r = 0; r < kConvSessions; ++r) acc[r] = fmaf(px[(r < (int)ns ? r : 0) * xs + at], wv, acc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kConvSessions; ++r) {
      if (r >= (int)tile_block) break;  // uniform over the block: every group's ns is at most tile_block
      float sum = g.combine(acc[r]);
      if (active && g.lane == 0 && r < (int)ns) {
        const unsigned s = s0 + r;
        if (has_bias) sum += *bias.at(s, o);
        *out.at(s, e) = ep.apply(sum, s, e, ep_error);
      }
    }
  }
  if (ep_error) record_error(out_epoch, kErrStack, t.task, 0, 0, 0, beat);
}

// A reduction's running value: `kKind` indexes wavec.opcodes.REDUCE_KINDS. logsumexp keeps the largest value
// seen (a) and the sum of exp(x - a) (b), rescaled when a grows (the one-pass "online" form: Milakov &
// Gimelshein, arXiv 1805.02867); the others keep theirs in a. merge() combines two lanes' partials.
template <int kKind>
struct Partial {
  float a, b;
  __device__ static Partial identity() {
    if constexpr (kKind == kReduce_max || kKind == kReduce_logsumexp) return {-__int_as_float(0x7f800000), 0.0f};
    if constexpr (kKind == kReduce_min) return {__int_as_float(0x7f800000), 0.0f};
    if constexpr (kKind == kReduce_prod) return {1.0f, 0.0f};
    return {0.0f, 0.0f};
  }
  __device__ void add(float v) {
    if constexpr (kKind == kReduce_logsumexp) merge({v, 1.0f});
    else if constexpr (kKind == kReduce_max) a = isnan(a) || isnan(v) ? a + v : fmaxf(a, v);  // NaN stays, as numpy's
    else if constexpr (kKind == kReduce_min) a = isnan(a) || isnan(v) ? a + v : fminf(a, v);
    else if constexpr (kKind == kReduce_prod) a *= v;
    else if constexpr (kKind == kReduce_sumsquare || kKind == kReduce_l2) a = fmaf(v, v, a);
    else if constexpr (kKind == kReduce_l1) a += fabsf(v);
    else a += v;
  }
  __device__ void merge(const Partial& o) {
    if constexpr (kKind == kReduce_logsumexp) {
      if (isnan(a) || isnan(o.a)) {  // NaN propagates (fmaxf would drop it)
        a = __int_as_float(0x7fffffff);
        b = 1.0f;
        return;
      }
      const float m = fmaxf(a, o.a);
      if (isfinite(m)) b = (isfinite(a) ? b * expf(a - m) : 0.0f) + (isfinite(o.a) ? o.b * expf(o.a - m) : 0.0f);
      else if (m > 0.0f) b = 1.0f;  // +inf dominates; all -inf leaves b at 0
      a = m;
    } else if constexpr (kKind == kReduce_max || kKind == kReduce_min || kKind == kReduce_prod) {
      Partial p = *this;
      p.add(o.a);  // max, min and prod combine partials as they combine values
      a = p.a;
    } else {
      a += o.a;
    }
  }
  __device__ float result(long long n) const {
    if constexpr (kKind == kReduce_logsumexp) return isfinite(a) ? a + logf(b) : a;
    if constexpr (kKind == kReduce_mean) return n > 0 ? a / (float)n : 0.0f;
    if constexpr (kKind == kReduce_l2) return sqrtf(a);
    return a;
  }
  __device__ void shuffle_merge(unsigned off, unsigned width) {
    merge({__shfl_down_sync(0xffffffffu, a, off, width), __shfl_down_sync(0xffffffffu, b, off, width)});
  }
};

// REDUCE: out[idx] = reduce_j in[idx, j]. Words: REDUCE, kind, rank, shape[rank], out_strides[rank],
// in_strides[rank], rrank, rshape[rrank], rstrides[rrank]. An empty reduction gives the kind's identity.
// Each output gets a group of `lanes` threads (a power of two, up to the whole block, so a tile of a few
// outputs, a norm's sum of squares or a vocabulary's max, still has every thread loading); a lane reduces
// every lanes-th value, and the group merges its lanes' partials in a fixed order (shuffles inside a warp,
// then the group's warps through shared memory), so every run gives the same bits.
template <int kKind>
__device__ void reduce_tile(const Payload& t, const long long* __restrict__ p, char* const* arena_base) {
  __shared__ Partial<kKind> warp_partial[32];
  const int rank = (int)p[2];
  const long long* shape = p + 3;
  const long long* out_strides = shape + rank;
  const long long* in_strides = out_strides + rank;
  const int rrank = (int)in_strides[rank];
  const long long* rshape = in_strides + rank + 1;
  const long long* rstrides = rshape + rrank;
  long long r_total = 1;
  #pragma unroll 1
  for (int d = 0; d < rrank; ++d) r_total *= rshape[d];
  const OperandView out = operand(t, arena_base, kOutSlot);
  const OperandView in = operand(t, arena_base, 0);
  const unsigned per_session = t.elem_end - t.elem_begin;
  const unsigned outputs = (t.session_end - t.session_begin) * per_session;
  const unsigned lanes = lanes_for(outputs, blockDim.x);
  const unsigned lane = threadIdx.x % lanes, groups = blockDim.x / lanes, width = min(lanes, 32u);
  for (unsigned base = 0; base < outputs; base += groups) {
    const unsigned o = base + threadIdx.x / lanes;
    Partial<kKind> acc = Partial<kKind>::identity();
    unsigned s = 0;
    long long out_off = 0;
    if (o < outputs) {
      s = t.session_begin + o / per_session;
      const unsigned e = t.elem_begin + o % per_session;
      out_off = strided_offset(e, rank, shape, out_strides);
      const float* row = in.at(s, strided_offset(e, rank, shape, in_strides));
      if (rrank == 1) {
        const long long step = rstrides[0];
        #pragma unroll 4
        for (long long j = lane; j < r_total; j += lanes) acc.add(row[j * step]);
      } else {
        for (long long j = lane; j < r_total; j += lanes) acc.add(row[strided_offset((unsigned)j, rrank, rshape, rstrides)]);
      }
    }
    for (unsigned off = width / 2; off > 0; off /= 2) acc.shuffle_merge(off, width);
    if (lanes > 32) {
      __syncthreads();  // the previous round's partials are read
      if (threadIdx.x % 32 == 0) warp_partial[threadIdx.x / 32] = acc;
      __syncthreads();
      if (lane == 0)
        for (unsigned w = 1; w < lanes / 32; ++w) acc.merge(warp_partial[threadIdx.x / 32 + w]);
    }
    if (o < outputs && lane == 0) *out.at(s, out_off) = acc.result(r_total);
  }
}

__device__ __noinline__ void reduce_body(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                            unsigned* out_epoch, unsigned beat) {
  switch ((int)p[1]) {
$reduce_cases
    default:
      if (threadIdx.x == 0) record_error(out_epoch, kErrReduceKind, t.task, 0, (unsigned)p[1], 0, beat);
  }
}

// L2 prefetch of a task's shared weights (kPrefetchWeights: on when the weights outgrow L2, codegen's
// prefetch_weights): the whole block issues it before thread 0 waits for the task's inputs, so the weight
// slice streams from HBM while the producers finish instead of after. It covers operand 1 of a MATMUL (b)
// or CONV (w) that lives in the weights arena and is shared by the cohort, up to kPrefetchMaxBytes a task
// (132 workers x 256 KB stay within the H200's 60 MB L2). A prefetch never faults and changes no value.
constexpr bool kPrefetchWeights = $prefetch_weights;
constexpr long long kPrefetchMaxBytes = 256 << 10;
constexpr long long kL2LineBytes = 128;

// Every L2 line of `segs` segments of `seg_bytes` bytes, `seg_stride` bytes apart from `base`, within
// kPrefetchMaxBytes (the first segments, and the first lines of each).
__device__ __forceinline__ void prefetch_l2(const char* base, long long segs, long long seg_stride, long long seg_bytes) {
  if (segs <= 0 || seg_bytes <= 0) return;
  const long long lines = min(seg_bytes / kL2LineBytes + 2, kPrefetchMaxBytes / kL2LineBytes);  // +2: unaligned ends
  segs = min(segs, max(1LL, kPrefetchMaxBytes / (lines * kL2LineBytes)));
  for (long long i = threadIdx.x; i < segs * lines; i += blockDim.x) {
    const long long seg = i / lines, at = min((i % lines) * kL2LineBytes, seg_bytes - 1);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + seg * seg_stride + at));
  }
}

__device__ __forceinline__ void prefetch_task_weights(const Payload& t, const long long* __restrict__ p,
                                                      char* const* arena_base) {
  if (((t.arenas >> 4) & 0xFu) != kArenaWeights || t.session_stride[1] != 0 || t.elem_begin >= t.elem_end) return;
  const char* w = arena_base[kArenaWeights] + t.offset[1];
  if (t.opcode == kOpMatmul) {
    // b[k, n] at b_strides[rank - 1] * n + b_strides[rank] * k (elements); one matrix for every output row.
    const MatmulWords words(p);
    const int rank = words.rank;
    const long long* b_strides = words.b_strides;
    #pragma unroll 1
    for (int d = 0; d < rank - 1; ++d)
      if (b_strides[d] != 0) return;
    const long long N = words.shape[rank - 1], K = words.K, bn = b_strides[rank - 1], bk = b_strides[rank];
    long long n0 = t.elem_begin % N, n1 = (t.elem_end - 1) % N + 1;
    if ((t.elem_end - 1) / N != t.elem_begin / N) n0 = 0, n1 = N;  // whole rows: every column
    if (bn <= bk) prefetch_l2(w + 4 * n0 * bn, K, 4 * bk, 4 * ((n1 - n0 - 1) * bn + 1));
    else prefetch_l2(w + 4 * n0 * bn, n1 - n0, 4 * bn, 4 * ((K - 1) * bk + 1));
  } else if (t.opcode == kOpConv) {
    // w[o, c, taps] contiguous: the tile's output channels' rows.
    const int nsp = (int)p[1];
    const long long c_in = p[3], c_out = p[4], group = p[5];
    long long T = 1, taps = 1;
    #pragma unroll 1
    for (int d = 0; d < nsp; ++d) T *= p[7 + nsp + d], taps *= p[7 + 2 * nsp + d];
    const long long row = c_in / group * taps;
    long long o0 = t.elem_begin / T % c_out, o1 = (t.elem_end - 1) / T % c_out + 1;
    if ((t.elem_end - 1) / (T * c_out) != t.elem_begin / (T * c_out) || o1 <= o0) o0 = 0, o1 = c_out;
    prefetch_l2(w + 4 * o0 * row, 1, 0, 4 * (o1 - o0) * row);
  }
}

// The persistent loop's staging of a worker's next task into shared memory (cp.async; the caller commits and
// waits). The payload is 128 bytes, 16 a thread; the parameter block kParamWindow words (none when 0: the
// bodies then read params.bin), 8 bytes a thread.
__device__ __forceinline__ void stage_payload(Payload* dst, const Payload* __restrict__ payloads, int i) {
  static_assert(sizeof(Payload) % 16 == 0, "the payload is copied in 16-byte pieces");
  if (threadIdx.x < sizeof(Payload) / 16) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(reinterpret_cast<char*>(dst) + 16 * threadIdx.x);
    const char* from = reinterpret_cast<const char*>(payloads + i) + 16 * threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from) : "memory");
  }
}
__device__ __forceinline__ void stage_params(long long* dst, const long long* __restrict__ params, long long first) {
  for (long long w = threadIdx.x; w < kParamWindow && first + w < kParamWords; w += blockDim.x) {
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst + w);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(to), "l"(params + first + w) : "memory");
  }
}

// `p`: the task's parameter block (in shared memory when staged).
__device__ void run_task(const Payload& t, const long long* __restrict__ p, char* const* arena_base,
                         unsigned* out_epoch, unsigned beat) {
  if (t.elem_begin >= t.elem_end || t.session_begin >= t.session_end) return;
  if (t.session_end > kSessions) {
    if (threadIdx.x == 0) record_error(out_epoch, kErrSessions, t.task, 0, t.session_end, kSessions, beat);
    return;
  }
  switch (t.opcode) {
    case kOpEwise: ewise_body(t, p, arena_base, out_epoch, beat); break;
    case kOpMatmul:
      if ((kTiledGemm || kStreamGemm) && gemm_body_may_take(t, p) && matmul_gemm_body(t, p, arena_base, out_epoch, beat))
        break;
      matmul_body(t, p, arena_base, out_epoch, beat);
      break;
    case kOpConv:
      if (p[1] > kMaxConvSpatial) {
        if (threadIdx.x == 0) record_error(out_epoch, kErrBadOpcode, t.task, 0, t.opcode, (unsigned)p[1], beat);
        return;
      }
      if (kTiledGemm && kTgFits && conv_tiles_as_gemm(t, p)) conv_tiled_body(t, p, arena_base, out_epoch, beat);
      else conv_body(t, p, arena_base, out_epoch, beat);
      break;
    case kOpReduce: reduce_body(t, p, arena_base, out_epoch, beat); break;
    default:
      if (threadIdx.x == 0) record_error(out_epoch, kErrBadOpcode, t.task, 0, t.opcode, 0, beat);
  }
}

}  // namespace wavec

using namespace wavec;

static_assert(sizeof(int2) == 8, "worker_tasks rows are two int32");

// The persistent kernel: launched once (cooperatively, grid = kWorkers, block = kBlockThreads); returns
// when the host sets host_flags[kHostStop] or after recording an error.
extern "C" __global__ void __launch_bounds__(kBlockThreads, 1)
$kernel_name(const Payload* __restrict__ payloads, const int2* __restrict__ worker_tasks,
                 const long long* __restrict__ params, char* weights, char* state, char* act, char* input,
                 char* output, unsigned* counters, volatile unsigned* host_flags, unsigned* out_epoch,
                 unsigned long long input_half_bytes, unsigned long long output_half_bytes,
                 unsigned long long* __restrict__ trace) {
  // The worker's task j (counting over beats) has its payload in task_ring[j % 4], staged two tasks ahead, and
  // its parameter block in param_ring[j % 2], staged a task ahead (stage_payload, stage_params): when task j
  // starts, both have landed, and the next two tasks' copies are in flight while it runs. Task j's payload
  // stays until task j + 2 starts, so the releasing warp reads task j's signal after the barrier that ends it,
  // while warp 0 stages task j + 3's; nothing of the task is held in registers across its body, whose calls
  // would spill it (and the reload after the body would be an L2 round trip).
  __shared__ __align__(16) Payload task_ring[4];
  __shared__ long long param_ring[2][kParamWindow > 0 ? kParamWindow : 1];
  __shared__ char* arena_base[kOperands];
  __shared__ int control;     // WaitResult of thread 0's last wait, for the whole block
  const int2 range = worker_tasks[blockIdx.x];
  static_assert(kTotalCounters == kStopMirror + 1, "the runtime allocates kTotalCounters counters");
  if (blockIdx.x == 0 && threadIdx.x == 0 &&
      (input_half_bytes != kInputHalfBytes || output_half_bytes != kOutputHalfBytes))
    record_error(out_epoch, kErrArenaSize, ~0u, 0, (unsigned)input_half_bytes, (unsigned)output_half_bytes, 0);

  // The beat number lives in shared memory (thread 0 advances it after the beat's last barrier): a register
  // of the scheduler loop, it was spilled across the bodies' calls, and each reload after a task's wait read
  // local memory, which the wait's acquire had emptied from the L1.
  __shared__ unsigned shared_beat;
  if (threadIdx.x == 0) shared_beat = 0;
  const unsigned n_tasks = (unsigned)(range.y - range.x);
  if (n_tasks > 0) {
    stage_payload(&task_ring[0], payloads, range.x);
    stage_payload(&task_ring[1], payloads, range.x + 1u % n_tasks);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    stage_params(param_ring[0], params, task_ring[0].params);
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  for (;;) {
    const unsigned& beat = shared_beat;
    // ---- Beat start: inputs published, previous beat done everywhere -----------------------------
    if (threadIdx.x == 0) {
      int r;
      if (blockIdx.x == 0) {
        // The previous beat's end first: it is done long before the host publishes the next inputs (the host
        // waits for its outputs), so the epoch's arrival is followed by the mirror's store, not by an L2 round
        // trip to the beat-done counter as well.
        r = spin_until<false>(&counters[kBeatDoneCounter], kWorkers * beat, host_flags, &counters[kStopMirror],
                              out_epoch, true, ~0u, kBeatDoneCounter, beat);
        if (r == kReached)
          r = spin_until<true>(const_cast<const unsigned*>(&host_flags[kHostInputEpoch]), beat + 1, host_flags,
                               &counters[kStopMirror], out_epoch, false, ~0u, ~0u, beat);
        if (r == kReached) {
          st_release_gpu(&counters[kEpochMirror], beat + 1);
        } else {
          st_release_gpu(&counters[kStopMirror], 1u);
        }
      } else {
        // Wait for block 0's mirror (it implies the previous beat is done everywhere) or its stop.
        r = kReached;
        unsigned ns = 16;
        for (unsigned polls = 1; !reached(ld_acquire_gpu(&counters[kEpochMirror]), beat + 1); ++polls) {
          if (ld_acquire_gpu(&counters[kStopMirror]) != 0u) {
            r = kStopped;
            break;
          }
          __nanosleep(ns);
          ns = ns < kMaxBackoffNs ? 2 * ns : kMaxBackoffNs;
        }
      }
      control = r;
      arena_base[kArenaWeights] = weights;
      arena_base[kArenaState] = state;
      arena_base[kArenaAct] = act;
      arena_base[kArenaInput] = input + (beat & 1u) * input_half_bytes;
      arena_base[kArenaOutput] = output + (beat & 1u) * output_half_bytes;
    }
    __syncthreads();
    if (control != kReached) return;

    // ---- The worker's tasks, in order ------------------------------------------------------------
    for (int i = range.x; i < range.y; ++i) {
      // Task i's payload and parameters are in shared memory already (task_ring, param_ring: staged while the
      // tasks before it ran), so a worker goes from one task's release to the next one's wait without a memory
      // round trip. Loaded here instead, the payload and then its parameters cost two: 1.0-1.25 us from a body's
      // end to the next task's wait (traces of Silero at 1 to 256 sessions, bench/RESULTS.md seventeenth run).
      const unsigned k = (unsigned)(i - range.x), j = beat * n_tasks + k;  // j mod 4 (the product may wrap)
      const Payload& task = task_ring[j % 4u];
      stage_payload(&task_ring[(j + 2u) % 4u], payloads, range.x + (k + 2u) % n_tasks);
      stage_params(param_ring[(j + 1u) % 2u], params, task_ring[(j + 1u) % 4u].params);
      cp_async_commit();  // lands while the body runs; a body's own cp.async waits count it as done first
      const long long* p = kParamWindow > 0 ? param_ring[j % 2u] : params + task.params;
      if (kPrefetchWeights) prefetch_task_weights(task, params + task.params, arena_base);
      if (threadIdx.x == 0) {
        if (trace) trace[kTraceWords * i + 0] = global_timer_ns();
        int r = kReached;
        for (int w = 0; w < (int)task.n_waits && w < kMaxWaits && r == kReached; ++w)
          r = spin_until<false>(&counters[task.wait_counter[w]], task.wait_count[w] * (beat + 1), host_flags,
                                &counters[kStopMirror],
                                out_epoch, true, task.task, task.wait_counter[w], beat);
        control = r;
      }
      __syncthreads();
      if (control != kReached) {
        cp_async_wait<0>();  // no copy outlives the block
        return;
      }
      if (trace && threadIdx.x == 0) trace[kTraceWords * i + 1] = global_timer_ns();
      run_task(task, p, arena_base, out_epoch, beat);
      cp_async_wait<0>();  // the next tasks' copies, issued before the wait
      __syncthreads();
      if (trace && threadIdx.x == 0) trace[kTraceWords * i + 2] = global_timer_ns();
      // The release orders the block's writes, which __syncthreads ordered before it (CUTLASS's arrive_inc:
      // __syncthreads, then a release by one thread). A fence.sc before it cost one-session Silero 5 us a beat
      // (117 -> 112 us, 64 sessions 185 -> 181, 1,024 472 -> 465; bench/RESULTS.md ninth run). The last warp
      // releases, so that thread 0 goes on to the next task's wait while the release's fence drains the stores.
      if (threadIdx.x == blockDim.x - 32) {
        const Payload& done = task_ring[(beat * n_tasks + (unsigned)(i - range.x)) % 4u];
        if (done.signal != kBeatDoneCounter) {
          red_release_gpu(&counters[done.signal], 1u);
          if (done.signal_phase != 0u) red_release_gpu(&counters[done.signal_phase], 1u);
        }
      }
    }

    // ---- Beat end: the last block to finish publishes the output epoch to the host ---------------
    __syncthreads();  // the block's shared control words are rewritten at the next beat's start
    if (threadIdx.x == 0) {
      // No fences: the atomic's release orders the block's writes, which the barrier above ordered before it
      // (as a task's release does), and the epoch's system-scope release those of every block, whose
      // releases the atomic acquired.
      const unsigned prev = atom_add_acq_rel_gpu(&counters[kBeatDoneCounter], 1u);
      if (prev == kWorkers * (beat + 1) - 1) st_release_sys(&out_epoch[kOutEpoch], beat + 1);
      ++shared_beat;  // every thread is past its reads of this beat's number (the barrier above)
    }
  }
}

// Generated weights (wavec/weights.py, which documents the generator): run once at load, before the
// persistent kernel, for each profile.json `generated_weights` entry. Element i of a uniform weight is
// float32(u * scale) with u = (h >> 8) * 2^-23 - 1 and h = lowbias32(i ^ lowbias32(seed)), rounded to
// bfloat16 (nearest, ties to even) when `bf16`; the explicit _rn operations keep nvcc from contracting
// them into an fma, so the bits equal numpy's.
__device__ __forceinline__ unsigned lowbias32(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

extern "C" __global__ void $fill_kernel_name(float* __restrict__ dst, unsigned long long elems, int kind,
                                          unsigned seed, float scale, int bf16, float value) {
  const unsigned key = lowbias32(seed);
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < elems; i += step) {
    float v = value;
    if (kind == $fill_uniform) {
      const unsigned h = lowbias32((unsigned)i ^ key);
      const float u = __fsub_rn(__fmul_rn((float)(h >> 8), 1.1920928955078125e-07f), 1.0f);
      v = __fmul_rn(u, scale);
      if (bf16 && !isnan(v)) {
        const unsigned b = __float_as_uint(v);
        v = __uint_as_float((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
      }
    }
    dst[i] = v;
  }
}
"""
)
