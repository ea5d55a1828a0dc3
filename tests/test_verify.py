"""The verifier (wavec/verify.py) on tiny hand-built profiles: clean ones pass, each injected fault
(tests/mutations.py) fails with a message that names the right kind of violation."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import mutations as mut  # noqa: E402
from profile_builder import ProfileBuilder  # noqa: E402

from wavec.analysis.footprints import runs  # noqa: E402
from wavec.analysis.happens_before import HappensBeforeError, build_happens_before  # noqa: E402
from wavec.errors import VerificationError  # noqa: E402
from wavec.opcodes import OUT, EwiseParams, MatmulParams, compile_expr, parse_expr  # noqa: E402
from wavec.verify import main, verify_profile  # noqa: E402


def ewise(expr: str, shape: tuple[int, ...], in_strides: list[tuple[int, ...]]) -> EwiseParams:
    out = tuple(int(s) for s in np.cumprod((1, *shape[::-1]))[:-1][::-1])
    return EwiseParams(shape, out, tuple(in_strides), tuple(compile_expr(parse_expr(expr))))


def row_of(profile, task_id: int) -> int:
    return int(np.flatnonzero(profile.payloads["task"] == task_id)[0])


def chain_profile():
    """x -> A: t1 = relu(x) -> B: t2 = 2 t1 -> C: y = t1 + t2 and D: z = t2 @ W, over three workers.

    Task ids: A0 0 (w0, elems 0-4), A1 1 (w1, 4-8), B0 2 (w1, 0-4), B1 3 (w2, 4-8), C0 4 (w2, sessions 0-2),
    C1 5 (w0, sessions 2-4), D0 6 (w0, z elems 0-2), D1 7 (w1, 2-4)."""
    pb = ProfileBuilder(sessions=4, workers=3)
    x = pb.input("x", (8,))
    t1, t2 = pb.act("t1", (8,)), pb.act("t2", (8,))
    y, z = pb.output("y", (8,)), pb.output("z", (4,))
    w = pb.weight("W", np.arange(32, dtype=np.float32).reshape(8, 4))
    a, b, c, d = (pb.counter() for _ in range(4))
    relu = ewise("relu(%0)", (8,), [(1,)])
    pb.task(relu, [x], t1, worker=0, elems=(0, 4), signal=a)
    pb.task(relu, [x], t1, worker=1, elems=(4, 8), signal=a)
    dbl = ewise("mul(%0, 2.0)", (8,), [(1,)])
    pb.task(dbl, [t1], t2, worker=1, elems=(0, 4), waits=[(a, 2)], signal=b)
    pb.task(dbl, [t1], t2, worker=2, elems=(4, 8), waits=[(a, 2)], signal=b)
    add = ewise("add(%0, %1)", (8,), [(1,), (1,)])
    pb.task(add, [t1, t2], y, worker=2, sessions=(0, 2), waits=[(b, 2)], signal=c)
    pb.task(add, [t1, t2], y, worker=0, sessions=(2, 4), waits=[(b, 2)], signal=c)
    mm = MatmulParams((4,), 8, (1,), (0, 1), (1, 4))
    pb.task(mm, [t2, w], z, worker=0, elems=(0, 2), waits=[(b, 2)], signal=d)
    pb.task(mm, [t2, w], z, worker=1, elems=(2, 4), waits=[(b, 2)], signal=d)
    return pb.build()


def state_profile():
    """h' = tanh(select(reset, h0, h) + x); y = h'. P: u = select(...) (act), Q: h = tanh(u + x) (state,
    a write-after-read of P's read of h), R: y = h. Tiles split the sessions over two workers.

    Task ids: P0 0 (w0, s0-2), P1 1 (w1, s2-4), Q0 2 (w1, s0-2), Q1 3 (w0, s2-4), R0 4 (w0), R1 5 (w1)."""
    pb = ProfileBuilder(sessions=4, workers=2)
    x = pb.input("x", (4,))
    reset = pb.reset_flags()
    h, h0 = pb.state("h", np.ones(4, np.float32), output="y")
    u = pb.act("u", (4,))
    y = pb.output("y", (4,))
    p, q, r = (pb.counter() for _ in range(3))
    sel = ewise("select(%0, %1, %2)", (4,), [(0,), (1,), (1,)])
    pb.task(sel, [reset, h0, h], u, worker=0, sessions=(0, 2), signal=p)
    pb.task(sel, [reset, h0, h], u, worker=1, sessions=(2, 4), signal=p)
    upd = ewise("tanh(add(%0, %1))", (4,), [(1,), (1,)])
    pb.task(upd, [u, x], h, worker=1, sessions=(0, 2), waits=[(p, 2)], signal=q)
    pb.task(upd, [u, x], h, worker=0, sessions=(2, 4), waits=[(p, 2)], signal=q)
    cp = ewise("%0", (4,), [(1,)])
    pb.task(cp, [h], y, worker=0, waits=[(q, 2)], sessions=(0, 2), signal=r)
    pb.task(cp, [h], y, worker=1, waits=[(q, 2)], sessions=(2, 4), signal=r)
    return pb.build()


def rejects(profile, *words: str, phase_words: tuple[str, ...] | None = None) -> str:
    """Both proofs, task by task and phase by phase, reject ``profile`` with a message holding ``words``
    (at phase level ``phase_words`` where given: it may meet another violation first, or name the other
    task of a pair); returns the task level's."""
    msgs = []
    for level, want in (("task", words), ("phase", words if phase_words is None else phase_words)):
        with pytest.raises(VerificationError) as e:
            verify_profile(profile, level=level)
        msgs.append(str(e.value))
        for w in want:
            assert w in msgs[-1], f"{level} level: {w!r} not in: {msgs[-1]}"
    return msgs[0]


# ---- clean profiles -----------------------------------------------------------------------------


def test_chain_profile_verifies():
    report = verify_profile(chain_profile())
    assert report.tasks == 8
    assert report.conflicting_pairs > 0 and report.ordered == report.conflicting_pairs
    # worker order: 3 + 2 + 3 tasks -> 5 edges; waits: 6 tasks x 2 signallers -> 12 edges
    assert report.edges == 5 + 12


def test_state_profile_verifies():
    report = verify_profile(state_profile())
    assert report.tasks == 6 and report.ordered == report.conflicting_pairs


def test_state_profile_runs_on_interp_like_it_verifies():
    """Sanity: the hand-built state profile means what its docstring says (when the interpreter exists)."""
    pytest.importorskip("wavec.targets.interp.machine")
    prof = state_profile()
    x = np.random.default_rng(0).standard_normal((3, 4, 4)).astype(np.float32)
    reset = np.zeros((3, 4), bool)
    reset[1, 2] = True
    y = prof.run({"x": x}, reset=reset)["y"]
    h = np.ones((4, 4), np.float32)
    for b in range(3):
        h = np.where(reset[b][:, None], np.float32(1), h)
        h = np.tanh(h + x[b])
        np.testing.assert_allclose(y[b], h, rtol=1e-6)


def test_cli_main(tmp_path, capsys):
    good = chain_profile().save(tmp_path / "good")
    assert main(str(good)) == 0
    assert capsys.readouterr().out.startswith("verified: 8 tasks, 17 edges,")
    bad, _ = mut.drop_wait(chain_profile(), row=row_of(chain_profile(), 3))
    assert main(str(bad.save(tmp_path / "bad"))) == 1
    out = capsys.readouterr().out
    assert "race" in out and out.count("\n") == 1


# ---- injected faults: dependencies --------------------------------------------------------------


def test_dropped_wait_is_a_race():
    prof = chain_profile()
    bad, _ = mut.drop_wait(prof, row=row_of(prof, 3))  # B1 on w2 reads t1[4:8] from A1 on w1
    rejects(bad, "race (read-after-write)", "task 1 ", "task 3 ", "act arena", "tensor 't1'", "wait on counter 1")


def test_wrong_wait_counter_is_a_race():
    prof = chain_profile()
    bad, desc = mut.wrong_wait_counter(prof, row=row_of(prof, 7), counter=1)  # D1 waits on A's counter, not B's
    assert "counter 2 retargeted to counter 1" in desc
    rejects(bad, "race", "tensor 't2'", "task 3 ", "task 7 ")
    # D0 on w0 runs after C1, which waits on B: the same retargeting there is harmless (still ordered).
    verify_profile(mut.wrong_wait_counter(prof, row=row_of(prof, 6), counter=1)[0])


def test_wrong_wait_count():
    prof = chain_profile()
    bad, _ = mut.wrong_wait_count(prof, row=row_of(prof, 2))
    rejects(bad, "task 2 ", "waits for 3 signals per beat on counter 1, but 2 tasks signal it", "deadlock")
    bad, _ = mut.wrong_wait_count(prof, row=row_of(prof, 2), delta=-1)
    rejects(bad, "waits for 1 signals", "race")


def test_wait_on_unsignalled_counter():
    prof = chain_profile()
    bad, _ = mut.wait_unsignalled(prof, row=row_of(prof, 4))
    rejects(bad, "task 4 ", "which no task signals")


def test_signal_on_end_of_beat_counter():
    rejects(mut.signal_zero(chain_profile(), row=0)[0], "signals counter 0")


def test_deadlock_cycle():
    prof = chain_profile()
    bad, _ = mut.deadlock_cycle(prof, row=row_of(prof, 0))  # A0 now waits on B's counter
    msg = rejects(bad, "deadlock: a cycle of", "task 0 ", "waits on counter")
    assert "signalled by" in msg


def test_swapped_worker_order_deadlocks():
    prof = chain_profile()
    bad, _ = mut.swap_worker_order(prof, rng=np.random.default_rng(1))
    rejects(bad, "deadlock")


# ---- injected faults: tiles and offsets ---------------------------------------------------------


def test_overlapping_output_offset_in_one_phase_is_waw():
    prof = chain_profile()
    bad, _ = mut.shift_output_offset(prof, row=row_of(prof, 3))  # B1 writes t2[3:7] over B0's t2[3]
    rejects(bad, "task 2 ", "task 3 ", "two tasks of one phase", "write-after-write", "tensor 't2'")


def test_tile_overlap_off_by_one():
    prof = chain_profile()
    bad, _ = mut.tile_overlap(prof, row=row_of(prof, 0))  # A0 elems [0, 5) overlaps A1 [4, 8)
    rejects(bad, "task 0 ", "task 1 ", "write-after-write", "tensor 't1'")


def test_tile_gap_off_by_one():
    prof = chain_profile()
    bad, _ = mut.tile_gap(prof, row=row_of(prof, 1))  # A1 elems [5, 8): t1[4] never written
    rejects(bad, "no task writes those bytes earlier in the beat", "tensor 't1'", "byte 16")


def test_output_gap_is_reported():
    prof = chain_profile()
    bad, _ = mut.tile_gap(prof, row=row_of(prof, 7))  # D1 elems [3, 4): z[2] never written
    rejects(bad, "output 'z' of session 0", "is not written")


def test_tile_past_end():
    rejects(mut.tile_past_end(chain_profile(), row=row_of(chain_profile(), 1))[0], "outside the", "iteration space")


def test_session_overlap():
    prof = chain_profile()
    bad, _ = mut.session_overlap(prof, row=row_of(prof, 4))  # C0 sessions [0, 3) overlaps C1 [2, 4)
    rejects(bad, "task 4 ", "task 5 ", "write-after-write", "tensor 'y', session 2")


def test_output_moved_onto_live_tensor_mixes_producers():
    prof = chain_profile()
    bad, _ = mut.output_onto_input(prof, row=row_of(prof, 2))  # B0 writes 2*t1[0:4] into t1[0:4]
    # The phase level reads the phases in program order: C's read of t2, which B0 no longer writes, comes first.
    rejects(bad, "task 4 ", "read a mix of two producers", "task 2 ", "task 1 ", "tensor 't1'",
            phase_words=("task 4 ", "no task writes those bytes earlier in the beat", "tensor 't2'"))


def test_output_moved_onto_other_phase_tensor():
    prof = chain_profile()
    bad, _ = mut.output_onto_tensor(prof, row=row_of(prof, 3), target=row_of(prof, 1))
    rejects(bad)


def test_shrunk_session_stride():
    prof = chain_profile()
    bad, _ = mut.shrink_session_stride(prof, row=row_of(prof, 4))  # C0 writes all of y: sessions 0, 1 overlap
    rejects(bad, "task 4 ", "output of session 1", "not inside session 1's slot of one output tensor", "tensor 'y'")


def test_offset_out_of_arena():
    prof = chain_profile()
    rejects(mut.offset_out_of_arena(prof, row=row_of(prof, 4))[0], "outside the arena", "one half of the double buffer")


# ---- injected faults: arenas and sessions -------------------------------------------------------


def test_swapped_session_slot_breaks_state_isolation():
    prof = state_profile()
    bad, _ = mut.shift_session_slot(prof, row=row_of(prof, 2))  # Q0 writes h of session s into slot s + 1
    rejects(bad, "task 2 ", "session 0", "not inside slot 0", "slot 1 of state 'h'")


def test_state_read_from_other_slot():
    prof = state_profile()
    bad, _ = mut.swap_session_ranges(prof, row=row_of(prof, 1))  # P1 reads h of sessions 2, 3 from slots 4, 5
    rejects(bad, "task 1 ", "session 2", "not inside slot 2")


def test_write_into_input_arena():
    prof = state_profile()
    rejects(mut.write_input_arena(prof, row=row_of(prof, 0))[0], "task 0 ", "writes the input arena", "host owns it")


def test_write_into_weights_arena():
    rejects(mut.write_weights_arena(chain_profile(), row=0)[0], "writes the weights arena")


def test_dropped_state_update_task():
    prof = state_profile()
    bad, _ = mut.drop_task(prof, row=row_of(prof, 3))  # Q1 gone: waits on q now expect 2, get 1
    rejects(bad, "waits for 2 signals per beat")
    on_q = bad.payloads["wait_counter"] == 2  # R waits on Q's counter 2
    bad.payloads["wait_count"][on_q] = 1
    # R reads h of sessions 0-1 as Q wrote it this beat, of sessions 2-3 as the previous beat left it.
    rejects(bad, "task 4 ", "read a mix of two producers", "tensor 'h', session 2", "the previous beat's state",
            phase_words=("task 5 ", "read a mix of two producers", "tensor 'h', session 2", "the previous beat's state"))


def test_state_parts_computed_in_place_by_two_phases():
    """A state's new value computed in place in two parts (wave-to-wpk's states-in-place: Silero's h and c),
    each by a phase of its own after the reset: every byte ends with one final phase's value, so it verifies;
    a missing tile of one part leaves the reset's value there, and is rejected."""
    pb = ProfileBuilder(sessions=2, workers=2)
    reset = pb.reset_flags()
    h, h0 = pb.state("h", np.zeros(8, np.float32))
    x = pb.input("x", (8,))
    r, p, q = pb.counter(), pb.counter(), pb.counter()
    sel = ewise("select(%0, %1, %2)", (8,), [(0,), (1,), (1,)])
    for s in range(2):
        pb.task(sel, [reset, h0, h], h, worker=s, sessions=(s, s + 1), signal=r)  # tasks 0, 1
    for expr, at, counter in (("tanh(%0)", 0, p), ("exp(%0)", 4, q)):  # tasks 2, 3 and 4, 5
        part = ewise(expr, (4,), [(1,)])
        for s in range(2):
            pb.task(part, [x.at(at)], h.at(at), worker=s, sessions=(s, s + 1), waits=[(r, 2)], signal=counter)
    prof = pb.build()
    verify_profile(prof)
    bad, _ = mut.drop_task(prof, row=row_of(prof, 5))  # the second part of session 1
    rejects(bad, "state 'h' ends the beat with values from two phases", "session 1")


def test_state_final_value_from_one_phase():
    """A state reset in place at the start of the beat (as the compiler does) and updated at the end: a
    missing update tile leaves the reset's value as the final one for that slot."""
    pb = ProfileBuilder(sessions=2, workers=2)
    reset = pb.reset_flags()
    h, h0 = pb.state("h", np.zeros(4, np.float32))
    x = pb.input("x", (4,))
    u = pb.act("u", (4,))
    r, q, c = pb.counter(), pb.counter(), pb.counter()
    sel = ewise("select(%0, %1, %2)", (4,), [(0,), (1,), (1,)])
    for s in range(2):
        pb.task(sel, [reset, h0, h], h, worker=s, sessions=(s, s + 1), signal=r)  # in place
    add = ewise("add(%0, %1)", (4,), [(1,), (1,)])
    for s in range(2):
        pb.task(add, [h, x], u, worker=s, sessions=(s, s + 1), waits=[(r, 2)], signal=q)
    cp = ewise("%0", (4,), [(1,)])
    for s in range(2):
        pb.task(cp, [u], h, worker=s, sessions=(s, s + 1), waits=[(q, 2)], signal=c)
    prof = pb.build()
    verify_profile(prof)
    bad, _ = mut.drop_task(prof, row=row_of(prof, 5))  # the update of session 1
    rejects(bad, "state 'h' ends the beat with values from two phases", "session 1")


def test_in_place_only_as_identical_elementwise_view():
    prof = chain_profile()
    mm = row_of(prof, 6)  # D0: z = t2 @ W; make it write onto t2, which it reads whole
    bad = mut.copy_profile(prof)
    bad.payloads[mm]["offset"][OUT] = bad.payloads[mm]["offset"][0]
    bad.payloads[mm]["session_stride"][OUT] = bad.payloads[mm]["session_stride"][0]
    mut._set_arena(bad, mm, OUT, 2)
    rejects(bad, "task 6 ", "through a different view")


def test_wrong_operand_arena():
    prof = chain_profile()
    rejects(mut.wrong_operand_arena(prof, row=row_of(prof, 2), arena=1)[0], "state arena", "slot")
    rejects(mut.wrong_operand_arena(prof, row=row_of(prof, 2))[0], "output arena", "task 2 ")


def test_tile_reading_a_stale_tensor_is_not_a_sibling_tile():
    """B1 (t2 = 2 t1, elements 4-8) pointed at t2 instead of t1: it reads its own output in place, through
    an identical elementwise view, race-free; only its sibling tile B0, which reads t1, shows the fault:
    tiles of one op must read the same views."""
    prof = chain_profile()
    bad = mut.copy_profile(prof)
    r = row_of(prof, 3)
    bad.payloads[r]["offset"][0] = int(bad.payloads[row_of(prof, 6)]["offset"][0])  # t2's bytes, not t1's
    rejects(bad, "task 3 ", "task 2 ", "tiles of one op writing one output view", "input operand 0")


def test_input_read_of_another_session():
    prof = state_profile()
    bad = mut.copy_profile(prof)
    r = row_of(prof, 2)  # Q0 reads x of sessions 0, 1: make it read one element further (into session 1's frame)
    bad.payloads[r]["offset"][1] = int(bad.payloads[r]["offset"][1]) + 4
    for q in (row_of(prof, 3),):  # and its sibling alike, so only the isolation check can see it
        bad.payloads[q]["offset"][1] = int(bad.payloads[q]["offset"][1]) + 4
    rejects(bad, "input operand 1 of session", "reads input arena bytes", "frame of one input")


def copy_chain(sessions: int = 3):
    """u = relu(x), y = u, one worker: returns the builder, its tensors and the counter of u's phase."""
    pb = ProfileBuilder(sessions=sessions, workers=1)
    x, u, y = pb.input("x", (4,)), pb.act("u", (4,)), pb.output("y", (4,))
    done = pb.counter()
    pb.task(ewise("relu(%0)", (4,), [(1,)]), [x], u, signal=done)
    return pb, u, y, done


@pytest.mark.parametrize("view", ["stride 0", "next session"])
def test_act_read_of_another_session(view):
    """Every producer is in place, yet session s reads session 0's (stride 0) or session s + 1's activations:
    only session isolation in the act arena can see it (interp: session 1 returns session 0's y)."""
    pb, u, y, done = copy_chain()
    other = replace(u, session_stride=0) if view == "stride 0" else u.at(u.session_stride // 4)
    pb.task(ewise("%0", (4,), [(1,)]), [other], y, sessions=(0, 2), waits=[(done, 1)])
    pb.task(ewise("%0", (4,), [(1,)]), [u], y, sessions=(2, 3), waits=[(done, 1)])
    rejects(pb.build(), "input operand 0 of session", "not inside session", "slot of one act tensor")


@pytest.mark.parametrize("stride", [0, -1], ids=["stride 0", "sessions swapped"])
def test_an_arena_plan_that_shares_a_session_s_bytes(stride):
    """A tensors table that would let a task pass the act isolation check with another session's bytes: a
    tensor at u's session 1 of session stride 0 (the same bytes for every session), or of stride minus u's
    (its session 0 is u's session 1, its session 1 u's session 0)."""
    pb, u, y, done = copy_chain(sessions=2)
    pb.task(ewise("%0", (4,), [(1,)]), [u], y, waits=[(done, 1)])
    profile = pb.build()
    lax = {"name": "lax", "arena": "act", "bytes": 16, "offset": u.offset + u.session_stride,
           "session_stride": stride * u.session_stride}
    profile.meta["tensors"].append(lax)
    rejects(profile, "the arena plan gives act arena bytes", "two sessions' data would share bytes", "'lax'")


@pytest.mark.parametrize("entry", [{"offset": 1 << 63}, {"offset": "a"}, {"offset": ...}, {"session_stride": 1 << 62},
                                   {"offset": (1 << 63) - 32, "session_stride": -(1 << 63) + 16}, {"bytes": 1 << 20}],
                         ids=["offset 2^63", "offset text", "no offset", "stride 2^62", "wraps int64", "past the arena"])
def test_a_tensors_table_out_of_range_is_an_error(entry):
    """profile.json tensors entries are checked before the isolation checks read them: a value that wraps
    int64 had made a stride-0 read of another session's activations look inside its own slot."""
    pb, u, y, done = copy_chain(sessions=2)
    pb.task(ewise("%0", (4,), [(1,)]), [replace(u, session_stride=0)], y, waits=[(done, 1)])
    profile = pb.build()
    odd = {"name": "odd", "arena": "act", "bytes": 16, "offset": 0, "session_stride": 16, **entry}
    profile.meta["tensors"].append({k: v for k, v in odd.items() if v is not ...})  # ...: the key left out
    rejects(profile, "profile.json tensors[", "malformed (KeyError" if ... in entry.values() else "'odd'")


def test_a_recycled_buffer_overwritten_before_its_reader_reads_it():
    """A: b = relu(x); B: y1 = b; C: b = 2 x; D: y2 = b, with B waiting on C and C on A: every conflicting
    pair is ordered and every read has one producer, but B reads C's value (interp: y1 = 2 x). The program
    runs B's phase before C's."""
    pb = ProfileBuilder(sessions=2, workers=2)
    x, b = pb.input("x", (4,)), pb.act("b", (4,))
    y1, y2 = pb.output("y1", (4,)), pb.output("y2", (4,))
    a, bb, c, d = (pb.counter() for _ in range(4))
    copy = ewise("%0", (4,), [(1,)])
    pb.task(ewise("relu(%0)", (4,), [(1,)]), [x], b, worker=0, signal=a)
    pb.task(copy, [b], y1, worker=1, waits=[(c, 1)], signal=bb)
    pb.task(ewise("mul(%0, 2.0)", (4,), [(1,)]), [x], b, worker=0, waits=[(a, 1)], signal=c)
    pb.task(copy, [b], y2, worker=1, waits=[(c, 1)], signal=d)
    rejects(pb.build(), "task 2 ", "happens before task 1 ", "though its phase comes later in program order")


def shared_chain(source: str):
    """t = 2 * (W or session 0's x), once for the cohort into a shared act tensor (session stride 0); y = t
    for every session."""
    from wavec.opcodes import Arena

    pb = ProfileBuilder(sessions=3, workers=1)
    x, w = pb.input("x", (4,)), pb.weight("W", np.arange(4, dtype=np.float32))
    t, y = pb.tensor("t", Arena.ACT, (4,), shared=True), pb.output("y", (4,))
    done = pb.counter()
    pb.task(ewise("mul(%0, 2.0)", (4,), [(1,)]), [w if source == "weights" else x], t, sessions=(0, 1), signal=done)
    pb.task(ewise("%0", (4,), [(1,)]), [t], y, waits=[(done, 1)])
    return pb.build()


def test_a_tensor_shared_by_the_cohort_is_computed_from_weights():
    for level in ("task", "phase"):
        assert verify_profile(shared_chain("weights"), level=level).level == level
    rejects(shared_chain("input"), "task 0 ", "writes a tensor every session shares", "input arena bytes",
            "one session's data would reach every session")


def test_output_nobody_writes():
    """y is declared but no task touches the output arena at all."""
    pb, _, _, _ = copy_chain()
    rejects(pb.build(), "output 'y' of session 0", "is not written by any task in a beat")


def test_state_slot_beyond_4_tib_still_separates_views():
    """A state at byte 2^42: one task reads it and writes another state g, which a task on another worker
    writes too (an unordered write-after-write, whatever the arena's size)."""
    from profile_builder import Tensor, _binding
    from wavec.opcodes import Arena

    pb = ProfileBuilder(sessions=1, workers=2)
    x = pb.input("x", (4,))
    g, g0 = pb.state("g", np.zeros(4, np.float32))
    h = Tensor("h", Arena.STATE, 1 << 42, 16, (4,))
    pb.arena_bytes[Arena.STATE] = (1 << 42) + 16
    pb.states.append({**_binding(h), "output": None, "init_offset": g0.offset})
    pb.tensors.append({"name": "h", "arena": "state", "offset": h.offset, "bytes": 16, "session_stride": 16})
    pb.task(ewise("add(%0, %1)", (4,), [(1,), (1,)]), [h, x], h, worker=0)
    pb.task(ewise("%0", (4,), [(1,)]), [h], g, worker=0)
    pb.task(ewise("%0", (4,), [(1,)]), [x], g, worker=1)
    rejects(pb.build(), "race (write-after-write)", "tensor 'g'")


def test_offset_beyond_any_arena():
    prof = chain_profile()
    prof.payloads[row_of(prof, 2)]["offset"][0] = 1 << 63
    rejects(prof, "task 2 ", "operand 0 offset", "beyond any arena")


def test_params_pointer_inside_a_block():
    prof = chain_profile()
    bad = mut.copy_profile(prof)
    bad.payloads[0]["params"] = int(bad.payloads[0]["params"]) + 1
    rejects(bad, "is not the start of a parameter block")
    bad.payloads[0]["params"] = len(bad.params) + 5
    rejects(bad, "is not the start of a parameter block")


def test_every_mutation_is_caught_on_some_target():
    """Each injector, tried on every target row of a clean profile, is rejected at least once and never
    crashes the verifier with anything but VerificationError."""
    for name, inject in mut.MUTATIONS.items():
        caught = tried = 0
        for base in (chain_profile(), state_profile()):
            for row in range(len(base.payloads)):
                try:
                    bad, _ = inject(base, row=row)
                except mut.NotApplicable:
                    continue
                tried += 1
                try:
                    verify_profile(bad)
                except VerificationError:
                    caught += 1
        assert tried and caught, f"{name}: caught {caught} of {tried}"


# ---- the analyses on their own ------------------------------------------------------------------


def test_runs():
    b, e = runs(np.array([0, 1, 2, 5, 7, 8], np.int64))
    assert b.tolist() == [0, 5, 7] and e.tolist() == [3, 6, 9]


def test_happens_before_matches_brute_force_closure():
    rng = np.random.default_rng(3)
    n_workers, per = 4, 6
    n = n_workers * per
    # phases of 4 tasks (one per worker per step); step i waits on a random earlier step.
    signal = np.zeros(n, np.int64)
    wc = np.zeros((n, 3), np.int64)
    wk = np.zeros((n, 3), np.int64)
    nw = np.zeros(n, np.int64)
    rows = [(w * per, (w + 1) * per) for w in range(n_workers)]
    for w in range(n_workers):
        for i in range(per):
            r = w * per + i
            signal[r] = 1 + i
            if i > 0:
                dep = int(rng.integers(0, i))
                wc[r, 0], wk[r, 0], nw[r] = 1 + dep, n_workers, 1
    hb = build_happens_before(rows, signal, wc, wk, nw, per + 1)
    reach = np.zeros((n, n), bool)
    for b, e in rows:
        for r in range(b + 1, e):
            reach[r - 1, r] = True
    for r in range(n):
        for i in range(nw[r]):
            reach[signal == wc[r, i], r] = True
    for k in range(n):  # Floyd-Warshall
        reach |= reach[:, [k]] & reach[[k], :]
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert (hb.before(a.ravel(), b.ravel()).reshape(n, n) == reach).all()


def test_happens_before_self_wait_is_a_cycle():
    with pytest.raises(HappensBeforeError, match="deadlock"):
        build_happens_before([(0, 1)], np.array([1]), np.array([[1, 0, 0]]), np.array([[1, 0, 0]]), np.array([1]), 2)


# ---- scale --------------------------------------------------------------------------------------


def synthetic_profile(phases: int = 6, tiles: int = 8, sessions: int = 4, width: int = 32, workers: int = 5,
                      buffers: int = 3):
    """A deep stack of alternating dense matmul and elementwise phases, each cut into ``tiles`` element
    tiles over all sessions, round-robin over ``workers``, activations recycled over ``buffers`` act
    buffers (so write-after-read reuse is ordered only transitively). ``phases * tiles`` tasks."""
    pb = ProfileBuilder(sessions=sessions, workers=workers)
    x = pb.input("x", (width,))
    bufs = [pb.act(f"buf{i}", (width,)) for i in range(buffers)]
    w = pb.weight("W", np.eye(width, dtype=np.float32))
    y = pb.output("y", (width,))
    mm = MatmulParams((width,), width, (1,), (0, 1), (1, width))
    act = ewise("tanh(%0)", (width,), [(1,)])
    step = width // tiles
    prev, prev_counter, n = x, None, 0
    for i in range(phases):
        dst = y if i == phases - 1 else bufs[i % buffers]
        c = pb.counter()
        for j in range(tiles):
            waits = [(prev_counter, tiles)] if prev_counter else []
            params, ins = (mm, [prev, w]) if i % 2 == 0 else (act, [prev])
            pb.task(params, ins, dst, worker=n % workers, elems=(j * step, (j + 1) * step), waits=waits, signal=c)
            n += 1
        prev, prev_counter = dst, c
    return pb.build()


def test_synthetic_deep_profile_verifies():
    report = verify_profile(synthetic_profile())
    assert report.tasks == 48 and report.ordered == report.conflicting_pairs > 0
    bad, _ = mut.drop_wait(synthetic_profile(), row=row_of(synthetic_profile(), 8 * 3))  # first tile of phase 3
    rejects(bad, "race")
