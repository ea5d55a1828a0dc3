"""The weight prefetch's address arithmetic (targets/cuda/codegen.py, prefetch_task_weights and prefetch_l2),
mirrored in numpy: on real profiles, the L2 lines a task prefetches cover every line of its shared weight
that its body reads (a MATMUL's: wavec.opcodes.footprint, the verifier's read set; a CONV's: the
interpreter's gather, targets/interp/bodies.conv_gather), and never leave the span of those reads. Tasks whose slice passes the prefetch budget are checked only for the second. A prefetch
cannot change a value; the GPU check (scripts/gpu_check.py) proves the kernel still computes the same."""

from __future__ import annotations

import numpy as np
import pytest

import wavec
from wavec import zoo
from wavec.driver import compile_graph
from wavec.frontends.builder.lower import lower_model
from wavec.models import silero_vad_path
from wavec.opcodes import Arena, ConvParams, MatmulParams, footprint, unpack_params
from wavec.payload import operand_arena
from wavec.targets.interp.bodies import conv_gather

MAX_BYTES, LINE, THREADS = 256 << 10, 128, 512  # kPrefetchMaxBytes, kL2LineBytes, a block's threads
SILERO = dict(bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])


def prefetch_l2(base: int, segs: int, seg_stride: int, seg_bytes: int) -> np.ndarray:
    """The byte addresses prefetch_l2 issues (every thread's, in any order)."""
    if segs <= 0 or seg_bytes <= 0:
        return np.zeros(0, np.int64)
    lines = min(seg_bytes // LINE + 2, MAX_BYTES // LINE)
    segs = min(segs, max(1, MAX_BYTES // (lines * LINE)))
    i = np.arange(segs * lines, dtype=np.int64)
    return base + (i // lines) * seg_stride + np.minimum((i % lines) * LINE, seg_bytes - 1)


def prefetched(rec, p) -> np.ndarray | None:
    """prefetch_task_weights' addresses (bytes from the weights arena's start), or None when it issues none."""
    eb, ee = int(rec["elem_begin"]), int(rec["elem_end"])
    if operand_arena(rec, 1) != Arena.WEIGHTS or int(rec["session_stride"][1]) != 0 or eb >= ee:
        return None
    w = int(rec["offset"][1])
    if isinstance(p, MatmulParams):
        rank = len(p.shape)
        if any(p.b_strides[:rank - 1]):
            return None
        n, k, bn, bk = p.shape[-1], p.k, p.b_strides[rank - 1], p.b_strides[rank]
        n0, n1 = eb % n, (ee - 1) % n + 1
        if (ee - 1) // n != eb // n:
            n0, n1 = 0, n
        if bn <= bk:
            return prefetch_l2(w + 4 * n0 * bn, k, 4 * bk, 4 * ((n1 - n0 - 1) * bn + 1))
        return prefetch_l2(w + 4 * n0 * bn, n1 - n0, 4 * bn, 4 * ((k - 1) * bk + 1))
    if isinstance(p, ConvParams):
        t, taps = int(np.prod(p.out_sp)), int(np.prod(p.kernel))
        row = p.c_in // p.group * taps
        o0, o1 = eb // t % p.c_out, (ee - 1) // t % p.c_out + 1
        if (ee - 1) // (t * p.c_out) != eb // (t * p.c_out) or o1 <= o0:
            o0, o1 = 0, p.c_out
        return prefetch_l2(w + 4 * o0 * row, 1, 0, 4 * (o1 - o0) * row)
    return None


def weight_reads(rec, p) -> np.ndarray:
    """Element offsets of operand 1 (the weight) that the task's body reads."""
    eb, ee = int(rec["elem_begin"]), int(rec["elem_end"])
    if isinstance(p, ConvParams):
        return conv_gather(p, eb, ee)[3].ravel()
    return footprint(p, 1, eb, ee, int(rec["n_inputs"]))


@pytest.fixture(scope="module", params=["silero-1", "silero-64", "lstm_stack-8", "transformer-8"])
def profile(request):
    name, sessions = request.param.rsplit("-", 1)
    if name == "silero":
        return wavec.compile(silero_vad_path(), sessions=int(sessions), **SILERO)
    return compile_graph(lower_model(zoo.get(f"{name}:tiny")), sessions=int(sessions))


def test_prefetch_covers_every_weight_line_a_task_reads(profile):
    checked = over_budget = 0
    for rec in profile.payloads:
        p = unpack_params(profile.params, int(rec["params"]))
        addrs = prefetched(rec, p)
        if addrs is None:
            continue
        read = int(rec["offset"][1]) + 4 * weight_reads(rec, p)
        assert addrs.min() >= read.min() and addrs.max() <= read.max() + 3, f"task {int(rec['task'])} prefetches outside its reads"
        wanted = np.unique(read // LINE)
        if wanted.size * LINE > MAX_BYTES // 2:  # past the budget the prefetch is a prefix, by design
            over_budget += 1
            continue
        missing = np.setdiff1d(wanted, np.unique(addrs // LINE))
        assert missing.size == 0, f"task {int(rec['task'])} ({type(p).__name__}) misses {missing.size} of {wanted.size} lines"
        checked += 1
    assert checked > 0
