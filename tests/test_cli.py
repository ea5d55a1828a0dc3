"""The command line and the profile format against bad input: every user error is one line naming the
file, node or op, what is wrong and what to do; nothing half-written is left behind; nothing the user
did not ask to replace is touched. Tiny ONNX models keep these fast; the real Silero model checks the
frontend's node errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import wavec
from wavec.cli import main as wavec_main
from wavec.errors import ProfileError, UnsupportedModelError, WavecError
from wavec.frontends.onnx import import_onnx
from wavec.models import silero_vad_path
from wavec.opt import main as opt_main
from wavec.profile import FORMAT, load, validate_meta

SILERO_FLAGS = ["--bind", "sr=16000", "--frame", "input=576", "--state", "state=stateN"]


# -- helpers ------------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tiny(tmp_path: Path) -> Path:
    """x [batch, time] -> y = relu(x) * 2; s [batch, 4] -> s2 = s + 1 (a state)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time"])
    s2 = helper.make_tensor_value_info("s2", TensorProto.FLOAT, ["batch", 4])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "two"], ["y"], name="mul"),
        helper.make_node("Add", ["s", "one"], ["s2"], name="add"),
    ]
    path = tmp_path / "tiny.onnx"
    onnx.save(_model(nodes, [x, s], [y, s2], [two, one]), path)
    return path


TINY_FLAGS = ["--frame", "x=8", "--state", "s=s2"]


def _hw(tmp_path: Path, sm_count=2, extra: str = "") -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(
        f"name: small\nsm_count: {sm_count}\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s:\n  fp32: 1.0e+13\n{extra}"
    )
    return path


def _error(capsys) -> str:
    """The one stderr line of a failed command."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wavec: error: "), err
    return lines[0]


def _compile_tiny(tmp_path: Path, out: Path, *extra: str) -> int:
    return wavec_main(["compile", str(_tiny(tmp_path)), "--sessions", "2", "--hw", str(_hw(tmp_path)),
                       *TINY_FLAGS, *extra, "-o", str(out)])


@pytest.fixture
def tiny_profile(tmp_path, capsys) -> Path:
    out = tmp_path / "tiny.profile"
    assert _compile_tiny(tmp_path, out) == 0
    capsys.readouterr()
    return out


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- 1. Profile.save replaces only a wavec profile ------------------------------------------------


def test_compile_takes_workers_within_the_targets_sms(tmp_path, capsys):
    """--workers sets the blocks the tiles are cut for and scheduled on (a fresh user found no way to set it but
    a whole --pipeline); more than the target's SMs, or none, is refused in one line."""
    from wavec.profile import load

    out = tmp_path / "w.profile"
    assert _compile_tiny(tmp_path, out, "--workers", "1") == 0  # the test target has 2 SMs
    assert load(out).meta["workers"] == 1
    for bad in ("0", "3"):
        assert _compile_tiny(tmp_path, tmp_path / f"bad{bad}", "--workers", bad) == 1
        assert "--workers must be a whole number from 1 to --hw" in _error(capsys)
        assert not (tmp_path / f"bad{bad}").exists()


def test_compile_refuses_the_current_directory(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    model = _tiny(tmp_path)
    for target in (".", str(work), ".."):
        assert wavec_main(["compile", str(model), "--sessions", "2", *TINY_FLAGS, "-o", target]) == 1
        assert "current directory" in _error(capsys)
    assert (work / "notes.txt").read_text() == "mine"
    assert wavec_main(["compile", str(model), "--sessions", "2", *TINY_FLAGS, "-o", ""]) == 1
    assert "empty output path" in _error(capsys)
    assert sorted(os.listdir(work)) == ["notes.txt"]


def test_compile_refuses_a_directory_that_is_not_a_profile(tmp_path, capsys):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    assert _compile_tiny(tmp_path, other) == 1
    msg = _error(capsys)
    assert "photos: exists and is not a wavec profile" in msg and "refusing" in msg
    assert (other / "cat.jpg").read_bytes() == b"\xff\xd8"
    # A directory whose profile.json is some other JSON is not ours either.
    (other / "profile.json").write_text(json.dumps({"format": "other/1"}))
    assert _compile_tiny(tmp_path, other) == 1
    assert "not a wavec profile" in _error(capsys)
    assert sorted(os.listdir(other)) == ["cat.jpg", "profile.json"]
    assert _leftovers(tmp_path) == []


def test_compile_replaces_an_existing_profile(tiny_profile, tmp_path, capsys):
    (tiny_profile / "stale.txt").write_text("old")
    assert _compile_tiny(tmp_path, tiny_profile) == 0
    assert not (tiny_profile / "stale.txt").exists()
    assert load(tiny_profile).sessions == 2
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "under-a-file", "proc"])
def test_unwritable_profile_targets_are_one_line(tmp_path, capsys, kind):
    blocker = tmp_path / "model.txt"
    blocker.write_text("keep")
    target = {"file": blocker, "under-a-file": blocker / "sub" / "p", "proc": Path("/proc/wavec-x")}[kind]
    assert _compile_tiny(tmp_path, target) == 1
    msg = _error(capsys)
    assert str(target) in msg
    assert blocker.read_text() == "keep"
    assert _leftovers(tmp_path) == []


def test_profile_save_api_errors(tiny_profile, tmp_path):
    profile = load(tiny_profile)
    with pytest.raises(ProfileError, match="empty output path"):
        profile.save("")
    with pytest.raises(ProfileError, match="cannot write the profile"):
        profile.save("/proc/wavec-x")
    # Parents it makes are removed again when the write fails.
    broken = wavec.Profile({**profile.meta, "unserializable": object()}, profile.payloads, profile.params, profile.weights)
    with pytest.raises(TypeError):
        broken.save(tmp_path / "new" / "deep" / "p")
    assert not (tmp_path / "new").exists()
    assert profile.save(tmp_path / "new" / "deep" / "p") == tmp_path / "new" / "deep" / "p"
    assert load(tmp_path / "new" / "deep" / "p").sessions == 2


# -- 2. wavec run -o ------------------------------------------------------------------------------


def _inputs(tmp_path: Path, name="in.npz", **arrays) -> Path:
    path = tmp_path / name
    if not arrays:
        arrays = {"x": np.ones((3, 2, 8), np.float32)}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def test_run_writes_exactly_the_given_name(tiny_profile, tmp_path, capsys):
    out = tmp_path / "result.data"
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(_inputs(tmp_path)), "-o", str(out)]) == 0
    assert f"wrote {out}:" in capsys.readouterr().out
    assert out.is_file() and not (tmp_path / "result.data.npz").exists()
    with np.load(out) as data:
        assert data["y"].shape == (3, 2, 8) and np.allclose(data["y"], 2.0)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("target, message", [("", "empty output path"), ("/proc/wavec-x.npz", "cannot write"),
                                             ("no-such-dir/out.npz", "does not exist"), (".", "is a directory")])
def test_run_output_errors_are_one_line(tiny_profile, tmp_path, capsys, monkeypatch, target, message):
    monkeypatch.chdir(tmp_path)
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(_inputs(tmp_path)), "-o", target]) == 1
    assert message in _error(capsys)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("extra, message", [(["--backend", "interp"], "run with --backend cuda"),
                                            (["--backend", "cuda", "--timeline", "no-such-dir/t.json"], "does not exist"),
                                            (["--backend", "cuda", "--timeline", "out.npz"], "is the -o file too")])
def test_run_timeline_errors_come_before_the_run(tiny_profile, tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    args = ["run", str(tiny_profile), "--inputs", str(_inputs(tmp_path)), "-o", "out.npz", *extra]
    assert wavec_main(args if "--timeline" in extra else [*args, "--timeline", "t.json"]) == 1
    assert message in _error(capsys)
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "t.json").exists()


def test_run_failure_leaves_the_old_output_untouched(tiny_profile, tmp_path, capsys):
    out = tmp_path / "out.npz"
    np.savez(out, y=np.zeros(3))
    previous = out.read_bytes()
    bad = _inputs(tmp_path, x=np.ones((3, 2, 7), np.float32))
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(bad), "-o", str(out)]) == 1
    assert "shape" in _error(capsys)
    assert out.read_bytes() == previous


# -- 3. model files -------------------------------------------------------------------------------


@pytest.mark.parametrize("content, reason", [
    (b"", "the file is empty"),
    (b"this is not a model, just some text\n" * 3, "not a valid ONNX model"),
    ("truncated", "not a valid ONNX model"),
])
def test_bad_model_files_are_one_line(tmp_path, capsys, content, reason):
    path = tmp_path / "bad.onnx"
    path.write_bytes(silero_vad_path().read_bytes()[:5000] if content == "truncated" else content)
    assert wavec_main(["compile", str(path), "--sessions", "2", "-o", str(tmp_path / "p")]) == 1
    msg = _error(capsys)
    assert f"{path}: not a valid ONNX model" in msg and reason in msg
    assert not (tmp_path / "p").exists()


def test_wave_ir_given_to_compile_points_to_wavec_opt(tmp_path, capsys):
    path = tmp_path / "model.mlir"
    path.write_text("func.func @f() {\n  func.return\n}\n")
    assert wavec_main(["compile", str(path), "--sessions", "2", "-o", str(tmp_path / "p")]) == 1
    msg = _error(capsys)
    assert f"{path}: not a valid ONNX model" in msg and "run wave IR through wavec-opt" in msg
    assert not (tmp_path / "p").exists()


def test_model_path_is_a_directory(tmp_path, capsys):
    assert wavec_main(["compile", str(tmp_path), "--sessions", "2", "-o", str(tmp_path / "p")]) == 1
    assert "is a directory" in _error(capsys)
    with pytest.raises(UnsupportedModelError, match="is a directory"):
        import_onnx(tmp_path)


def test_empty_graphs_are_named(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    no_nodes = tmp_path / "nonodes.onnx"
    onnx.save(_model([], [x], [x]), no_nodes)
    with pytest.raises(UnsupportedModelError, match=r"^nonodes.onnx: the graph has no nodes"):
        wavec.compile(no_nodes, sessions=2)
    no_outputs = tmp_path / "noout.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [x], []), no_outputs)
    with pytest.raises(UnsupportedModelError, match=r"^noout.onnx: the graph has no outputs"):
        wavec.compile(no_outputs, sessions=2)


# -- 4. frontend errors name the node; flags are checked up front --------------------------------


def test_short_frame_on_silero_names_the_stft_conv(tmp_path, capsys):
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", "--bind", "sr=16000", "--frame", "input=100",
            "--state", "state=stateN", "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    msg = _error(capsys)
    assert "node '/model/stft/Conv' (Conv, opset 15)" in msg and "shorter than the dilated kernel" in msg
    assert not (tmp_path / "p").exists()


BAD_CONVS = [  # (W shape, bias length or None, attributes, what the error names): onnxruntime refuses each at load
    ([32, 8, 3], 4, {}, "bias must be [32], got [4]"),
    ([32, 9, 3], None, {}, "channels x 8, w [32, 9, 3], group 1 do not match"),
    ([32, 8, 3], None, {"group": 3}, "channels x 8, w [32, 8, 3], group 3 do not match"),
    ([32, 8, 3], None, {"strides": [0]}, "strides [0] and dilations [1] must be >= 1"),
    ([32, 8, 3], None, {"dilations": [0]}, "strides [1] and dilations [0] must be >= 1"),
    ([32, 8, 3], None, {"pads": [-1, -1]}, "pads [-1, -1] >= 0"),
    ([32, 8, 3], None, {"pads": [1]}, "inconsistent ranks x [1, 8, 16], w [32, 8, 3], strides (1,), pads (1,)"),
    ([32, 8], None, {}, "inconsistent ranks x [1, 8, 16], w [32, 8]"),
]


@pytest.mark.parametrize("w_shape, bias, attrs, expected", BAD_CONVS)
def test_a_malformed_conv_is_refused_by_name(w_shape, bias, attrs, expected):
    """A bias of 4 values for 32 channels compiled and verified, and the kernel read 28 'bias' values out of the
    next weight (a fresh user's trial): every such Conv is now refused at import, naming the node, by the rule
    wave.conv's verifier applies (wave.conv_fault)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [helper.make_tensor("W", TensorProto.FLOAT, w_shape, np.ones(w_shape, np.float32).ravel())]
    ins = ["x", "W"]
    if bias is not None:
        inits.append(helper.make_tensor("B", TensorProto.FLOAT, [bias], np.ones(bias, np.float32)))
        ins.append("B")
    node = helper.make_node("Conv", ins, ["y"], name="conv0", **attrs)
    with pytest.raises(UnsupportedModelError) as err:
        import_onnx(_model([node], [x], [y], inits))
    assert "node 'conv0' (Conv" in str(err.value) and expected in str(err.value)


def test_an_exception_in_a_lowering_names_the_node(tmp_path, monkeypatch):
    from wavec.frontends.onnx import lowering

    def broken(ctx, inputs):
        a, b, c = inputs  # noqa: F841  (the kind of slip the Silero LSTM hit)
        return inputs

    monkeypatch.setitem(lowering.LOWERINGS, "Relu", broken)
    with pytest.raises(UnsupportedModelError) as err:
        import_onnx(_tiny(tmp_path), frames={"x": 8}, states=[("s", "s2")])
    msg = str(err.value)
    assert msg.startswith("tiny.onnx: node 'relu' (Relu, opset 17): cannot lower this node (ValueError:")
    assert "\n" not in msg


BIND, FRAME, STATE = ["--bind", "sr=16000"], ["--frame", "input=576"], ["--state", "state=stateN"]


@pytest.mark.parametrize("flags, message", [
    ([*BIND, "--frame", "input=0", *STATE], "--frame input=0: a frame length must be >= 1"),
    ([*BIND, "--frame", "input=-5", *STATE], "a frame length must be >= 1"),
    ([*BIND, "--frame", "input=abc", *STATE], "is not a whole number"),
    ([*SILERO_FLAGS, "--frame", "inptu=576"], "'inptu' names neither a graph input nor a symbolic dim"),
    (["--bind", "sr=16000.5", *FRAME, *STATE], "--bind sr=16000.5: input 'sr' is int64; give a whole number"),
    (["--bind", "sr=lots", *FRAME, *STATE], "'lots' is not a number"),
    ([*SILERO_FLAGS, "--bind", "sr=8000"], "--bind sr: given twice with different values"),
    ([*SILERO_FLAGS, "--frame", "input=512"], "--frame input: given twice with different values"),
    ([*SILERO_FLAGS, "--bind", "rate=8000"], "--bind rate: 'rate' is not a graph input"),
    ([*BIND, *FRAME, "--bind", "state=1"], "input 'state' has shape [2, batch, 128], not a scalar"),
    ([*BIND, *FRAME, "--state", "state"], "--state 'state': expected IN=OUT"),
    ([*BIND, *FRAME, "--state", "state=nope"], "'nope' is not a graph output"),
])
def test_flag_errors_on_silero(tmp_path, capsys, flags, message):
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", *flags, "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    assert message in _error(capsys)
    assert not (tmp_path / "p").exists()


def test_repeating_a_flag_with_the_same_value_is_fine(tmp_path, capsys):
    assert _compile_tiny(tmp_path, tmp_path / "p", "--frame", "x=8") == 0


# -- 5. hints speak CLI (and Python) ---------------------------------------------------------------


def test_hints_name_the_cli_flags(tmp_path, capsys):
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", "--frame", "input=576", "--state", "state=stateN",
            "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    msg = _error(capsys)
    assert "--bind sr=V" in msg and "bindings={'sr': V}" in msg
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", "--bind", "sr=16000", "--state", "state=stateN",
            "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    msg = _error(capsys)
    assert "--frame input=N" in msg and "frames={'input': N}" in msg


# -- 6. the supported-op list -----------------------------------------------------------------------


def test_unsupported_op_lists_folded_ops_apart(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    with pytest.raises(UnsupportedModelError) as err:
        import_onnx(_model([helper.make_node("Det", ["x"], ["y"], name="det0")], [x], [y]))
    msg = str(err.value)
    runtime, _, folded = msg.partition("Folded when static")
    assert "Supported runtime ops:" in runtime and "Relu" in runtime
    for op in ("Equal", "Greater", "Less", "And", "Or", "Not", "Xor"):
        assert op not in runtime.split("Supported runtime ops:")[1]
        assert op in folded


# -- 7. pipelines -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, message", [
    ("wave-fuse", "does not produce a complete program: missing wave-cohort, wave-to-wpk, wpk-arena, wpk-schedule, wpk-payload"),
    ("wave-cohort{sessions=4},wave-to-wpk{workers=2},wpk-arena,wpk-schedule{workers=2},wpk-payload",
     "wave-cohort{sessions=4} disagrees with --sessions 2"),
    ("wave-cohort{sessions=2", "Malformed pass arguments"),
    ("wave-cohort{sessions=x}", "wave-cohort: option sessions takes one int (e.g. 4), got 'x'"),
    ("wave-cohort{sessions=2},wave-to-wpk{wokers=2}", "wave-to-wpk: no option 'wokers'; its options: workers, min-tile-elems, min-tile-flops"),
    ("no-such-pass", "Unrecognized passes"),
    ("wave-to-wpk{workers=2},wave-cohort{sessions=2}", "run wave-cohort first"),
])
def test_bad_pipelines_are_one_line(tmp_path, capsys, spec, message):
    assert _compile_tiny(tmp_path, tmp_path / "p", "--pipeline", spec) == 1
    assert message in _error(capsys)
    assert not (tmp_path / "p").exists()


def test_a_complete_custom_pipeline_compiles(tmp_path, capsys):
    spec = "wave-cohort{sessions=2},wave-to-wpk{workers=2},wpk-arena,wpk-schedule{workers=2},wpk-payload"
    assert _compile_tiny(tmp_path, tmp_path / "p", "--pipeline", spec) == 0


# -- 8. --hw YAML -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("name: x\nsm_count: [1, 2\n", "not valid YAML"),
    ("- just\n- a list\n", "expected a YAML mapping"),
    ("name: x\nsm_count: 0\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n", "sm_count is 0"),
    ("name: x\nsm_count: two\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n", "sm_count is 'two'"),
    ("name: x\nsm_count: 2\n", "missing hbm_bandwidth_bytes_per_s, peak_flops_per_s"),
    ("name: x\nsm_count: 2\nthreads_per_block: 100\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n",
     "threads_per_block is 100; it must be a multiple of 32 in [32, 1024]"),
    ("name: x\nsm_count: 2\nl2_bytes: 1.5\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n",
     "l2_bytes is 1.5; it must be a whole number of bytes >= 1"),
    ("name: x\nsm_count: 2\nmeasured: {task_us: {conv: 0}}\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n",
     "measured.task_us is {'conv': 0}; it must map opcode names (ewise, matmul, conv, reduce) to positive microseconds"),
    ("name: x\nsm_count: 2\nmeasured: {task_us: {gemm: 1.0}}\nhbm_bandwidth_bytes_per_s: 1.0e+12\npeak_flops_per_s: {fp32: 1.0e+13}\n",
     "measured.task_us is {'gemm': 1.0}"),
])
def test_bad_hw_yaml_is_one_line(tmp_path, capsys, text, message):
    hw = tmp_path / "gpu.yaml"
    hw.write_text(text)
    argv = ["compile", str(_tiny(tmp_path)), "--sessions", "2", "--hw", str(hw), *TINY_FLAGS, "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    assert message in _error(capsys)


def test_hw_threads_per_block_sizes_the_kernel_block(tmp_path):
    """A target's threads_per_block is the persistent block's size: recorded in profile.json and the
    kernel's __launch_bounds__ (the runtime launches with what the built function reports)."""
    out = tmp_path / "p"
    hw = _hw(tmp_path, extra="threads_per_block: 512\n")
    assert wavec_main(["compile", str(_tiny(tmp_path)), "--sessions", "2", "--hw", str(hw), *TINY_FLAGS, "-o", str(out)]) == 0
    assert json.loads((out / "profile.json").read_text())["block_threads"] == 512
    assert "constexpr unsigned kBlockThreads = 512;" in (out / "kernel.cu").read_text()


def test_hw_file_named_relative_to_the_working_directory(tmp_path, monkeypatch):
    """`--hw t32.yaml` (no slash): the pipeline spec quotes the file name, which xDSL's lexer would split at
    the dot ("Unknown token")."""
    hw = _hw(tmp_path)
    monkeypatch.chdir(hw.parent)
    out = tmp_path / "p"
    assert wavec_main(["compile", str(_tiny(tmp_path)), "--sessions", "2", "--hw", hw.name, *TINY_FLAGS, "-o", str(out)]) == 0


# -- 9. run --inputs --------------------------------------------------------------------------------


def _bad_inputs(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "in.npz"
    good = np.ones((3, 2, 8), np.float32)
    if kind == "text":
        path.write_text("x,y\n1,2\n")
    elif kind == "truncated":
        np.savez(path, x=good)
        path.write_bytes(path.read_bytes()[:100])
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, good)
    elif kind == "object":
        np.savez(path, x=np.array([{"a": 1}, None], dtype=object))
    elif kind == "strings":
        np.savez(path, x=np.array(["a", "b"]))
    elif kind == "typo":
        np.savez(path, x=good, resets=np.zeros((3, 2), bool))
    elif kind == "int":
        np.savez(path, x=good.astype(np.int32))
    elif kind == "overflow":
        np.savez(path, x=np.full((3, 2, 8), 1e300))
    elif kind == "damaged-member":
        np.savez(path, x=good)
        raw = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("x.npy")
        start = info.header_offset + 30 + len(info.filename) + 200
        raw[start:start + 20] = b"\x00" * 20
        path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("kind, message", [
    ("text", "not an .npz archive (it does not begin as a zip file)"),
    ("truncated", "not a readable .npz archive"),
    ("npy", "not an .npz archive"),
    ("object", "holds Python objects"),
    ("strings", "has dtype <U1; inputs must be float"),
    ("typo", "unknown input 'resets'; the profile's inputs are ['x'] (and the optional 'reset')"),
    ("int", "has dtype int32; inputs must be float"),
    ("overflow", "overflows float32"),
    ("damaged-member", "cannot be read"),
])
def test_bad_inputs_are_one_line(tiny_profile, tmp_path, capsys, kind, message):
    inputs = _bad_inputs(tmp_path, kind)
    out = tmp_path / "out.npz"
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(inputs), "-o", str(out)]) == 1
    msg = _error(capsys)
    assert message in msg and str(inputs) in msg
    assert not out.exists()


def test_run_does_not_write_over_a_file_that_is_not_an_npz(tiny_profile, tmp_path, capsys):
    inputs = _inputs(tmp_path, x=np.full((2, 2, 8), 1.5, np.float32))
    mine = tmp_path / "model.mlir"
    mine.write_text("builtin.module {}\n")
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(inputs), "-o", str(mine)]) == 1
    assert "exists and is not an .npz archive; remove it or choose another name" in _error(capsys)
    assert mine.read_text() == "builtin.module {}\n"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_inputs_are_accepted(tiny_profile, tmp_path, capsys, dtype):
    inputs = _inputs(tmp_path, x=np.full((2, 2, 8), 1.5, dtype), reset=np.array([[1, 0], [0, 1]], np.int8))
    out = tmp_path / "out.npz"
    assert wavec_main(["run", str(tiny_profile), "--inputs", str(inputs), "-o", str(out)]) == 0
    with np.load(out) as data:
        assert np.allclose(data["y"], 3.0)


# -- 10. damaged profiles -----------------------------------------------------------------------------


def _damage(root: Path, kind: str) -> None:
    meta = json.loads((root / "profile.json").read_text())
    if kind in ("payloads.bin", "params.bin", "weights.bin"):
        (root / kind).unlink()
    elif kind == "bad-report":
        (root / "report.json").write_text("{not json")
    elif kind == "report-list":
        (root / "report.json").write_text("[]")
    elif kind == "not-object":
        (root / "profile.json").write_text("[1, 2]")
    elif kind == "missing-key":
        del meta["worker_tasks"]
    elif kind == "wrong-type":
        meta["sessions"] = "two"
    elif kind == "shape-type":
        meta["inputs"][0]["shape"] = "8"
    elif kind == "weights-size":
        (root / "weights.bin").write_bytes((root / "weights.bin").read_bytes() + b"\0" * 4)
    elif kind == "params-empty":
        (root / "params.bin").write_bytes(b"")
    elif kind == "workers":
        meta["workers"] += 1
    elif kind == "rows":
        meta["worker_tasks"][-1][1] -= 1
    elif kind == "payloads-size":
        (root / "payloads.bin").write_bytes((root / "payloads.bin").read_bytes()[:-3])
    elif kind == "l2-text":
        meta["l2_bytes"] = "abc"
    elif kind == "threads-bool":
        meta["block_threads"] = True
    elif kind == "window-negative":
        meta["param_window"] = -1
    elif kind == "window-short":
        meta["param_window"] = 1
    if kind in ("missing-key", "wrong-type", "shape-type", "workers", "rows", "l2-text", "threads-bool",
                "window-negative", "window-short"):
        (root / "profile.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("kind, message", [
    ("payloads.bin", "payloads.bin: missing"),
    ("params.bin", "params.bin: missing"),
    ("weights.bin", "weights.bin: missing"),
    ("bad-report", "report.json: not valid JSON"),
    ("report-list", "report.json: is a JSON list"),
    ("not-object", "profile.json: is a JSON list, not an object"),
    ("missing-key", "missing key 'worker_tasks'"),
    ("wrong-type", "key 'sessions' is str, expected int"),
    ("shape-type", "inputs[0].shape is '8', expected list"),
    ("weights-size", "weights.bin: has"),
    ("params-empty", "params.bin: is empty"),
    ("workers", "worker_tasks has 2 rows for 3 workers"),
    ("rows", "worker_tasks cover"),
    ("payloads-size", "not a whole number of 128-byte payloads"),
    ("l2-text", "l2_bytes is 'abc', expected a whole number >= 1"),
    ("threads-bool", "block_threads is True, expected a whole number >= 1"),
    ("window-negative", "param_window is -1, expected a whole number >= 0"),
    ("window-short", "param_window is 1, but params.bin and payloads.bin need"),
])
def test_damaged_profiles_are_one_line(tiny_profile, capsys, kind, message):
    _damage(tiny_profile, kind)
    with pytest.raises(ProfileError, match=None) as err:
        load(tiny_profile)
    assert message in str(err.value) and "\n" not in str(err.value)
    for cmd in (["report", str(tiny_profile)], ["verify", str(tiny_profile)]):
        assert wavec_main(cmd) == 1
        assert message in _error(capsys)


def test_validate_meta_requires_keys_and_types(tiny_profile):
    meta = json.loads((tiny_profile / "profile.json").read_text())
    validate_meta(meta, "p")
    for key in ("sessions", "workers", "arena_bytes", "phases", "outputs"):
        broken = dict(meta)
        del broken[key]
        with pytest.raises(ProfileError, match=f"missing key '{key}'"):
            validate_meta(broken, "p")
    with pytest.raises(ProfileError, match=f"this wavec reads '{FORMAT}'"):
        validate_meta({**meta, "format": "wavec-profile/0"}, "p")


# -- 11. report is rebuilt from the payloads ------------------------------------------------------------


def test_report_ignores_a_stale_report_json(tiny_profile, capsys):
    real = json.loads((tiny_profile / "report.json").read_text())
    (tiny_profile / "report.json").write_text(json.dumps({**real, "tasks": 99999, "flops_per_beat": -1}))
    assert wavec_main(["report", str(tiny_profile), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tasks"] == real["tasks"] and shown["flops_per_beat"] == real["flops_per_beat"]


def test_report_top_lists_the_phases_moving_the_most_bytes(tiny_profile, capsys):
    assert wavec_main(["report", str(tiny_profile), "--json"]) == 0
    phases = json.loads(capsys.readouterr().out)["phases"]
    heaviest = max(phases, key=lambda p: p["bytes"])
    assert wavec_main(["report", str(tiny_profile), "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert f"the 1 of {len(phases)} phases moving the most bytes:" in text
    listed = [p["name"] for p in phases if any(line.startswith(p["name"] + " ") for line in text.splitlines())]
    assert listed == [heaviest["name"]]
    assert wavec_main(["report", str(tiny_profile), "--top", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in shown["phases"]] == [heaviest["name"]] and shown["phases_total"] == len(phases)
    assert wavec_main(["report", str(tiny_profile), "--top", "0"]) == 1
    assert "--top 0: list at least 1 phase" in _error(capsys)


def _timeline_for(profile_dir: Path, path: Path) -> dict:
    """A timeline as `wavec run --timeline` writes it, for this profile's phases: 2 beats; phase k of n
    spans k + 1 us, its median body took (k + 1) / 2 us, and it waited 2 (k + 1) us in the last beat."""
    meta = json.loads((profile_dir / "profile.json").read_text())
    phases, workers = meta["phases"], meta["workers"]
    doc = {"beats": [{"beat": 0, "span_us": 10.0, "busy_us": 5.0, "wait_us": 3.0, "wait_share": 0.1, "workers": workers},
                     {"beat": 1, "span_us": 20.0, "busy_us": 5.0, "wait_us": 5.0, "wait_share": 0.3, "workers": workers}],
           "last_beat_phases": [{"phase": p["name"], "tasks": p["tasks"], "start_us": 0.0, "span_us": k + 1.0,
                                 "body_max_us": 1.0, "body_p50_us": (k + 1) / 2, "wait_us": 2.0 * (k + 1)}
                                for k, p in enumerate(phases)]}
    path.write_text(json.dumps(doc))
    return doc


def test_report_shows_the_measured_timeline_beside_the_model(tiny_profile, tmp_path, capsys):
    doc = _timeline_for(tiny_profile, tmp_path / "t.json")
    assert wavec_main(["report", str(tiny_profile), "--timeline", str(tmp_path / "t.json")]) == 0
    text = capsys.readouterr().out
    assert ("measured on the GPU (2 traced beats): beat span p50 15.00 us; workers waited p50 4.00 us a beat, "
            "summed over tasks (20.0% of the workers' time)") in text
    first = doc["last_beat_phases"][0]["phase"]
    row = next(line for line in text.splitlines() if line.startswith(first + " "))
    assert row.split()[-3:] == ["1.0", "0.5", "2.0"]  # its span, median body and wait, after the model's figures
    by_op = {}
    for k, p in enumerate(json.loads((tiny_profile / "profile.json").read_text())["phases"]):
        by_op.setdefault(p["op"], [0.0, 0])
        by_op[p["op"]][0] += k + 1.0
        by_op[p["op"]][1] += 1
    heaviest = max(by_op, key=lambda op: by_op[op][0])
    assert (f"measured by op, its phases' spans summed: {heaviest} {by_op[heaviest][0]:,.1f} us "
            f"({by_op[heaviest][1]} phases)") in text
    assert wavec_main(["report", str(tiny_profile), "--timeline", str(tmp_path / "t.json"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in shown["measured"].items() if k != "by_op"} == {
        "beats": 2, "span_us_p50": 15.0, "wait_us_p50": 4.0, "wait_share_p50": 0.2}
    assert shown["measured"]["by_op"] == {op: {"span_us": v[0], "phases": v[1]} for op, v in by_op.items()}
    assert [p["measured_wait_us"] for p in shown["phases"]] == [2.0 * (k + 1) for k in range(len(shown["phases"]))]
    # A timeline from before median bodies were recorded: a dash in their column.
    for row in doc["last_beat_phases"]:
        del row["body_p50_us"]
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert wavec_main(["report", str(tiny_profile), "--timeline", str(tmp_path / "t.json")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(first + " "))
    assert row.split()[-3:] == ["1.0", "-", "2.0"]


@pytest.mark.parametrize("content, message", [
    (None, "no such timeline file"), ("{not json", "not valid JSON"), ("9" * 5000, "not valid JSON"),
    ("[" * 100000, "not valid JSON"), ('{"beats": []}', "not a timeline written by"),
    ('{"beats": [], "last_beat_phases": []}', "has no traced beats"),
])
def test_report_timeline_file_errors_are_one_line(tiny_profile, tmp_path, capsys, content, message):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    assert wavec_main(["report", str(tiny_profile), "--timeline", str(path)]) == 1
    assert message in _error(capsys)


def _spoil(doc: dict, how: str) -> dict:
    beat, phase = doc["beats"][0], doc["last_beat_phases"][0]
    if how == "nan span":
        beat["span_us"] = float("nan")
    elif how == "text span":
        phase["span_us"] = "12.5"
    elif how == "huge wait":
        phase["wait_us"] = 10 ** 400
    elif how == "share over 1":
        beat["wait_share"] = 7.5
    elif how == "other workers":
        beat["workers"] += 1
    elif how == "other task count":
        phase["tasks"] += 1
    elif how == "a phase twice":
        doc["last_beat_phases"].append(dict(phase))
    elif how == "a phase missing":
        doc["last_beat_phases"].pop()
    return doc


@pytest.mark.parametrize("how, message", [
    ("nan span", "must be a finite number >= 0"), ("text span", "must be a number"),
    ("huge wait", "must be a finite number >= 0"), ("share over 1", "wait_share is over 1"),
    ("other workers", "record the timeline from this profile"), ("other task count", "record the timeline from this profile"),
    ("a phase twice", "is listed twice"), ("a phase missing", "missing ["),
])
def test_report_refuses_a_timeline_of_bad_values_or_another_profile(tiny_profile, tmp_path, capsys, how, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_spoil(_timeline_for(tiny_profile, path), how)))
    assert wavec_main(["report", str(tiny_profile), "--timeline", str(path)]) == 1
    assert message in _error(capsys)


@pytest.mark.parametrize("target, message", [("", "empty path"), (".", "is a directory")])
def test_report_timeline_path_errors(tiny_profile, tmp_path, capsys, monkeypatch, target, message):
    monkeypatch.chdir(tmp_path)
    assert wavec_main(["report", str(tiny_profile), "--timeline", target]) == 1
    assert message in _error(capsys)


# -- 12. wavec-opt ----------------------------------------------------------------------------------------


def _opt_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.startswith("wavec-opt: error: "), err
    return err


@pytest.fixture
def tiny_mlir(tmp_path, capsys) -> Path:
    out = tmp_path / "tiny.mlir"
    assert wavec_main(["import", str(_tiny(tmp_path)), *TINY_FLAGS, "-o", str(out)]) == 0
    capsys.readouterr()
    return out


@pytest.mark.parametrize("argv, message", [
    (["{mlir}", "-p", "no-such-pass"], "Unrecognized passes: ['no-such-pass']"),
    (["{mlir}", "-p", "wave-cohort{sessions=x}"], "wave-cohort: option sessions takes one int (e.g. 4), got 'x'"),
    (["{mlir}", "-p", "wave-cohort{sessions=99999999999999999999}"],
     "wave-cohort: option sessions is 99999999999999999999, beyond a 64-bit integer"),
    (["{mlir}", "-p", "wave-cohort{sessions=2 sessions=3}"], "wave-cohort: option sessions given twice; give it once"),
    (["{mlir}", "-p", "wave-cohort{sessions=2},wave-to-wpk,wpk-arena,wpk-schedule{peak-flops=5e12}"],
     "wpk-schedule: option peak-flops takes one float (e.g. 0.5), got '5e12' (write 5.0e12)"),
    (["{mlir}", "-p", "wave-cohort{sessions=2},wave-to-wpk,wpk-arena,wpk-schedule{task-overhead-us=1}"],
     "wpk-schedule: option task-overhead-us takes one float (e.g. 0.5), got 1 (write 1.0)"),
    (["{mlir}", "-p", "wave-cohort{sessions=2"], "Malformed pass arguments"),
    (["{mlir}", "-p", "wave-to-wpk{workers=2}"], "wave-to-wpk: the module has no wave.cohort attribute"),
    (["{mlir}", "-p", "wave-cohort{sessions=2},wpk-arena"], "wpk-arena: the module has no wpk.phase; run wave-to-wpk first"),
    (["{mlir}", "-p", "wpk-payload"], "wpk-payload: the module has no wpk.phase; run wave-to-wpk, wpk-arena and wpk-schedule"),
    (["{bad}"], "Operation wave.bogus is not registered"),
    (["{missing}"], "no-such.mlir: No such file or directory"),
    (["{onnx}"], "wavec-opt reads wave IR (.mlir), not an ONNX model: write its IR with `wavec import MODEL.onnx"),
    (["{mlir}", "-p", "wave-fuse", "-o", "/proc/wavec-x.mlir"], "cannot write"),
])
def test_wavec_opt_errors_have_no_traceback(tiny_mlir, tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.mlir"
    bad.write_text('builtin.module {\n  "wave.bogus"() : () -> ()\n}\n')
    subs = {"{mlir}": str(tiny_mlir), "{bad}": str(bad), "{missing}": str(tmp_path / "no-such.mlir"),
            "{onnx}": str(_tiny(tmp_path))}
    assert opt_main([subs.get(a, a) for a in argv]) == 1
    err = _opt_error(capsys)
    assert message in err.splitlines()[0]


def test_wavec_opt_reads_back_its_own_ir_dumps(tiny_mlir, tmp_path, capsys):
    """--print-ir-after output starts with a banner that --split-input-file splits on; the empty chunk before
    it is an empty module, as in mlir-opt, so a dump reads back."""
    assert opt_main([str(tiny_mlir), "-p", "wave-cohort{sessions=2},wave-to-wpk", "--print-ir-after", "wave-cohort"]) == 0
    dump = tmp_path / "dump.mlir"
    dump.write_text(capsys.readouterr().err)
    assert dump.read_text().startswith("// -----// IR Dump After wave-cohort")
    assert opt_main([str(dump), "--split-input-file"]) == 0
    chunks = capsys.readouterr().out.split("// -----")
    assert chunks[0].split() == ["builtin.module", "{", "}"] and "wave.cohort = 2" in chunks[1]


def test_wavec_opt_pass_failure_leaves_no_output_file(tiny_mlir, tmp_path, capsys):
    out = tmp_path / "out.mlir"
    assert opt_main([str(tiny_mlir), "-p", "wave-to-wpk{workers=2}", "-o", str(out)]) == 1
    _opt_error(capsys)
    assert not out.exists() and _leftovers(tmp_path) == []
    assert opt_main([str(tiny_mlir), "-p", "wave-fuse,wave-cohort{sessions=2}", "-o", str(out)]) == 0
    assert "wave.cohort = 2" in out.read_text()


def test_wavec_opt_keeps_xdsl_diagnostics_modes(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text('builtin.module {\n  "wave.bogus"() : () -> ()\n}\n')
    assert opt_main([str(bad), "--parsing-diagnostics"]) == 0
    assert "Operation wave.bogus is not registered" in capsys.readouterr().out


def test_wavec_opt_help_lists_list_passes(capsys):
    with pytest.raises(SystemExit) as exit_:
        opt_main(["--help"])
    assert exit_.value.code == 0
    assert "--list-passes" in capsys.readouterr().out
    assert opt_main(["--list-passes"]) == 0
    assert "wave-cohort:" in capsys.readouterr().out


# -- 13. a closed pipe ends quietly ---------------------------------------------------------------------


def test_report_into_a_closed_pipe_is_quiet(tiny_profile):
    code = "import sys; from wavec.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "report", str(tiny_profile), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written (`| head` that already left)
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert err == "" and proc.returncode == 0


def test_wavec_opt_into_a_closed_pipe_is_quiet(tiny_mlir):
    """`wavec-opt ... | head` once head has left: no "Broken pipe" error (a BrokenPipeError is an OSError,
    which wavec-opt otherwise reports), exit status 0, as mlir-opt."""
    code = "import sys; from wavec.opt import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, str(tiny_mlir), "-p", "wave-fuse"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert err == "" and proc.returncode == 0


# -- 14. demo ---------------------------------------------------------------------------------------------


def test_demo_checks_flags_before_compiling(capsys, monkeypatch):
    import wavec.driver

    def no_compile(*a, **k):
        raise AssertionError("compiled before checking the flags")

    monkeypatch.setattr(wavec.driver, "compile", no_compile)
    assert wavec_main(["demo", "--beats", "-1"]) == 1
    assert "--beats must be >= 0" in _error(capsys)
    from wavec.demo import cuda_available

    if not cuda_available()[0]:
        assert wavec_main(["demo", "--backend", "cuda", "--sessions", "2"]) == 1
        assert "--backend cuda:" in _error(capsys)


def test_demo_leaves_no_temporary_folder(tmp_path, capsys, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert wavec_main(["demo", "--sessions", "2", "--beats", "3", "--backend", "interp"]) == 0
    out = capsys.readouterr().out
    assert "serving 3 beats (0.1 s of audio)" in out and "removed at exit" in out
    assert list(tmp_path.iterdir()) == []


# -- 15. advice for a path that is not a profile ----------------------------------------------------------


def test_not_a_profile_advice(tmp_path, capsys):
    model = _tiny(tmp_path)
    assert wavec_main(["report", str(model)]) == 1
    msg = _error(capsys)
    assert "not a wavec profile" in msg and "expected a directory written by `wavec compile ... -o DIR`" in msg
    assert f"-o {model}" not in msg


# -- 16. wavec import ----------------------------------------------------------------------------------------


def test_import_prints_wave_ir_that_wavec_opt_reads(tmp_path, capsys):
    model = _tiny(tmp_path)
    assert wavec_main(["import", str(model), *TINY_FLAGS]) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("// wave IR of tiny.onnx") and "Weights are not included" in first
    assert 'wave.input "x"' in text and 'wave.state "s"' in text
    path = tmp_path / "tiny.mlir"
    path.write_text(text)
    assert opt_main([str(path), "-p", "wave-fuse,wave-cohort{sessions=4}"]) == 0
    assert "wave.cohort = 4" in capsys.readouterr().out


def test_import_errors_are_one_line(tmp_path, capsys):
    model = _tiny(tmp_path)
    assert wavec_main(["import", str(model), "--frame", "x=0"]) == 1
    assert "a frame length must be >= 1" in _error(capsys)
    assert wavec_main(["import", str(model), *TINY_FLAGS, "-o", str(tmp_path)]) == 1
    assert "is a directory" in _error(capsys)


def test_errors_are_wavec_errors():
    assert issubclass(ProfileError, WavecError) and issubclass(UnsupportedModelError, WavecError)


@pytest.mark.parametrize("model, message", [
    ("nosuch:tiny", "no zoo model 'nosuch'; choose one of transformer:tiny"),
    ("gru_stack", "for the zoo model give a preset, e.g. gru_stack:tiny"),
    ("gru_stack:huge", "gru_stack has no preset 'huge'; choose one of tiny, small"),
])
def test_zoo_names_are_clear_errors(tmp_path, capsys, model, message):
    assert wavec_main(["compile", model, "--sessions", "2", "-o", str(tmp_path / "p")]) != 0
    assert message in _error(capsys)


@pytest.mark.parametrize("text, message", [
    (None, "no such pipeline file, nor one wavec ships (default.yaml)"),
    ("passes: [wave-fuse", "not valid YAML"),
    ("description: x\n", "expected a mapping with a non-empty `passes` list"),
])
def test_wavec_opt_pipeline_file_errors_are_one_line(tmp_path, capsys, text, message):
    ir = tmp_path / "in.mlir"
    ir.write_text("builtin.module {}\n")
    pipeline = tmp_path / "p.yaml"
    if text is not None:
        pipeline.write_text(text)
    assert opt_main([str(ir), "-p", str(pipeline)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavec-opt: error:") and message in err[0], err


@pytest.mark.parametrize("name", ["wavec/pipelines/default.yaml", "default.yaml"])
def test_a_shipped_pipeline_is_found_by_name_from_any_directory(tmp_path, monkeypatch, name):
    """The README's `-p wavec/pipelines/default.yaml`, run outside the repository: the package's own file."""
    from wavec.pipeline import default_pipeline_text, pipeline_spec, spec_from_yaml

    monkeypatch.chdir(tmp_path)
    variables = {"sessions": 2, "workers": 4, "hw": "h200"}
    spec = pipeline_spec(name, variables)
    assert spec == spec_from_yaml(default_pipeline_text(), variables)
    assert "wave-cohort{sessions=2}" in spec and "workers=4" in spec


@pytest.mark.parametrize("argv, message", [
    (["-p", "{default}", "--pipeline-var", "bogus=3"], "has no variable ${bogus}"),
    (["-p", "default.yaml", "--pipeline-var", "session=64"], "default.yaml has no variable ${session}"),  # shipped, by name
    (["-p", "{default}", "--pipeline-var", "sessions"], "expected NAME=VALUE"),
    (["-p", "wave-fuse", "--pipeline-var", "sessions=3"], "applies to a YAML pipeline"),
    (["-p", "wave-fuse", "--print-ir-after", "wave-cohort"], "not a pass of this pipeline (wave-fuse)"),
])
def test_wavec_opt_rejects_unused_variables_and_dump_points(tmp_path, capsys, argv, message):
    from wavec.pipeline import default_pipeline_text

    default = tmp_path / "default.yaml"
    default.write_text(default_pipeline_text())
    ir = tmp_path / "in.mlir"
    ir.write_text("builtin.module {}\n")
    assert opt_main([str(ir), *[a.replace("{default}", str(default)) for a in argv]]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavec-opt: error:") and message in err[0], err
