"""Pipelines as data: the default pipeline is a YAML file in the package; `wavec compile --pipeline` and
`wavec-opt -p` take a YAML file; --print-ir-after(-all) shows the IR between passes as mlir-opt does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wavec.cli import main as wavec_main
from wavec.driver import default_pipeline
from wavec.errors import WavecError
from wavec.models import silero_vad_path
from wavec.pipeline import pipeline_spec, spec_from_yaml

SILERO = ["--bind", "sr=16000", "--frame", "input=576", "--state", "state=stateN"]


def test_default_pipeline_comes_from_the_packaged_file():
    assert default_pipeline(64, 132) == (
        "wave-expand-pow,wave-fuse,wave-cohort{sessions=64},wave-stack-matmuls{min-sessions=65},"
        "wave-hoist{max-sessions=64},wave-to-wpk{workers=132},"
        "wpk-arena{max-dedicated-bytes=4194304},"
        "wpk-schedule{workers=132 hw=h200 insertion-max-sessions=64},wpk-payload,wpk-verify"
    )
    assert 'wpk-schedule{workers=8 hw="targets/my gpu.yaml" ' in default_pipeline(1, 8, "targets/my gpu.yaml")


def test_yaml_options_and_variables():
    text = """
defaults: {workers: 8}
passes:
  - wave-fuse: {max-inputs: 2}
  - wave-cohort: {sessions: "${sessions}"}
  - wave-to-wpk: {workers: "${workers}", min-tile-flops: 1024}
"""
    assert spec_from_yaml(text, {"sessions": 3}) == (
        "wave-fuse{max-inputs=2},wave-cohort{sessions=3},wave-to-wpk{workers=8 min-tile-flops=1024}"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("passes: [", "not valid YAML"),
        ("passes: []", "non-empty `passes` list"),
        ("passes: [{wave-cohort: {sessions: '${n}'}}]", "variable ${n} has no value"),
        ("passes: [[1, 2]]", "each pass is a name"),
    ],
)
def test_bad_pipeline_files(text, message):
    with pytest.raises(WavecError, match=message.replace("$", r"\$").replace("{", r"\{").replace("[", r"\[")):
        spec_from_yaml(text)


def test_compile_with_a_yaml_pipeline_and_ir_dumps(tmp_path, capsys):
    pipeline = tmp_path / "narrow.yaml"
    pipeline.write_text(
        "passes:\n  - wave-fuse: {max-inputs: 1}\n  - wave-cohort: {sessions: '${sessions}'}\n"
        "  - wave-to-wpk: {workers: '${workers}'}\n  - wpk-arena\n  - wpk-schedule: {workers: '${workers}'}\n"
        "  - wpk-payload\n"
    )
    out = tmp_path / "p"
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", *SILERO, "--pipeline", str(pipeline),
            "--print-ir-after", "wave-cohort", "-o", str(out)]
    assert wavec_main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("// -----// IR Dump After") == 1
    assert "// -----// IR Dump After wave-cohort //----- //" in err and "tensor<2x1x576xf32>" in err
    assert "sqrt(add(pow" not in err  # max-inputs=1 kept the two-input add apart


def test_print_ir_after_unknown_pass_is_an_error(tmp_path, capsys):
    argv = ["compile", str(silero_vad_path()), "--sessions", "2", *SILERO, "--print-ir-after", "wave-nope",
            "-o", str(tmp_path / "p")]
    assert wavec_main(argv) == 1
    assert "--print-ir-after wave-nope: not in the pipeline" in capsys.readouterr().err


def test_wavec_opt_reads_the_default_pipeline_file(tmp_path):
    from importlib import resources

    src = tmp_path / "g.mlir"
    src.write_text(
        'func.func @g() {\n  %x = wave.input "x" : tensor<4xf32>\n'
        '  %y = wave.ewise "relu(%0)"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n'
        '  wave.output "y", %y : tensor<4xf32>\n  func.return\n}\n'
    )
    default = str(resources.files("wavec") / "pipelines" / "default.yaml")
    run = subprocess.run(
        [sys.executable, "-m", "wavec.opt", str(src), "-p", default, "--pipeline-var", "sessions=3",
         "--pipeline-var", "workers=2", "--print-ir-after-all"],
        capture_output=True, text=True, check=True,
    )
    assert run.stderr.count("// -----// IR Dump After") == 10
    assert "wave.cohort = 3" in run.stdout and "payload = array<i32:" in run.stdout


def test_spec_strings_pass_through():
    assert pipeline_spec("wave-fuse,wave-cohort{sessions=2}") == "wave-fuse,wave-cohort{sessions=2}"


def test_a_variable_in_a_spec_string_is_refused_by_name():
    """Only a YAML pipeline fills in ``${name}``; a spec string holding one is refused in one line instead of
    reaching xDSL's lexer ("Unknown token")."""
    with pytest.raises(WavecError, match=r"\$\{sessions\} is a variable of YAML pipelines"):
        pipeline_spec("wave-cohort{sessions=${sessions}},wave-to-wpk")


def test_a_custom_pipeline_schedules_for_the_compile_target():
    """--hw fills in wpk-schedule's target where a --pipeline names none, and a different one is refused."""
    from wavec.driver import check_pipeline_agrees, with_schedule_target
    from wavec.errors import WavecError

    assert with_schedule_target("wpk-arena,wpk-schedule,wpk-payload", "h100") == "wpk-arena,wpk-schedule{hw=h100},wpk-payload"
    assert with_schedule_target("wpk-schedule{workers=2}", "my gpu.yaml") == 'wpk-schedule{hw="my gpu.yaml" workers=2}'
    with pytest.raises(WavecError, match=r"wpk-schedule\{hw=h200\} disagrees with --hw h100"):
        check_pipeline_agrees(with_schedule_target("wpk-schedule{hw=h200}", "h100"), 1, "h100", 132)
    with pytest.raises(WavecError, match=r"wpk-schedule\{workers=200\} is more workers than --hw h200's 132 SMs"):
        check_pipeline_agrees("wpk-schedule{workers=200}", 1, "h200", 132)
    check_pipeline_agrees("wpk-schedule{workers=8}", 1, "h200", 132)  # fewer workers than SMs is fine


def test_a_custom_pipeline_tiles_for_the_workers_it_schedules_on():
    """A fresh user's trial compiled wave-to-wpk{workers=7} with wpk-schedule{workers=9} without a word: tiles cut
    for one count and scheduled on another. Different counts are refused, the parsed values compared (a default
    of 132, a signed +7), not the spec's text."""
    from wavec.driver import check_pipeline_agrees
    from wavec.errors import WavecError

    for spec, (cut, run) in (("wave-to-wpk{workers=7 min-tile-elems=4},wpk-schedule{hw=h200 workers=9}", (7, 9)),
                             ("wave-to-wpk{workers=7},wpk-schedule", (7, 132)),
                             ("wave-to-wpk{workers=+7},wpk-schedule{workers=9}", (7, 9))):
        with pytest.raises(WavecError, match=rf"wave-to-wpk\{{workers={cut}\}} cuts tiles for other workers than "
                                             rf"wpk-schedule\{{workers={run}\}}"):
            check_pipeline_agrees(spec, 1, "h200", 132)
    check_pipeline_agrees("wave-to-wpk{workers=9},wpk-schedule{workers=9}", 1, "h200", 132)
    check_pipeline_agrees("wave-to-wpk,wpk-schedule", 1, "h200", 132)
