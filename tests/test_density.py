"""bench/density.py's harness on the CPU interpreter: the search, the held rule and the chart (the GPU
numbers come from the device; this checks the logic that turns runs into a density)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench_loader import load_bench


def _density_module():
    return load_bench("density")


@pytest.fixture(scope="module")
def gru_profiles(tmp_path_factory):
    from wavec import zoo
    from wavec.driver import compile_graph
    from wavec.frontends.builder.lower import lower_model

    root = tmp_path_factory.mktemp("density")
    dirs = []
    for n in (4, 1, 2):  # out of order: the harness sorts by cohort size
        compile_graph(lower_model(zoo.get("gru_stack:tiny")), sessions=n, workers=4).save(root / f"gru-{n}")
        dirs.append(root / f"gru-{n}")
    return dirs


def test_a_generous_beat_holds_every_cohort(gru_profiles, tmp_path):
    density = _density_module()
    out, png = tmp_path / "d.json", tmp_path / "d.png"
    args = [*map(str, gru_profiles), "--backend", "interp", "--beat-ms", "300", "--beats", "3", "--runs", "2",
            "--json", str(out), "--png", str(png)]
    assert density.main(args) == 0
    result = json.loads(out.read_text())
    assert [r["sessions"] for r in result["rows"]] == [1, 2, 4]
    assert all(r["held"] and r["late_beats"] == 0 and r["beats"] == 6 for r in result["rows"])
    assert all(r["identical_runs"] for r in result["rows"])  # the interpreter is deterministic
    assert result["density"] == {"wavec": 4}
    assert result["backend"] == "interp" and result["model"] == "gru_stack_tiny"
    for row, directory in zip(result["rows"], sorted(gru_profiles, key=lambda d: int(d.name.split("-")[1]))):
        report = json.loads((directory / "report.json").read_text())
        assert row["floor_us"] == round(report["floor_us"]["beat"], 2) > 0  # the report's physical floor
        assert row["p99_over_floor"] == round(row["p99_us"] / row["floor_us"], 1)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_beat_shorter_than_any_run_holds_none_and_stops_at_the_first(gru_profiles, tmp_path):
    density = _density_module()
    out = tmp_path / "d.json"
    args = [*map(str, gru_profiles), "--backend", "interp", "--beat-ms", "0.001", "--beats", "3", "--runs", "3",
            "--json", str(out)]
    assert density.main(args) == 0
    result = json.loads(out.read_text())
    assert [(r["sessions"], r["held"]) for r in result["rows"]] == [(1, False)]  # larger cohorts not tried
    assert result["rows"][0]["late_beats"] > 0
    assert result["density"] == {"wavec": 0}


def test_densities_take_the_largest_held_cohort():
    density = _density_module()
    rows = [{"system": "a", "sessions": 1, "held": True}, {"system": "a", "sessions": 8, "held": True},
            {"system": "a", "sessions": 64, "held": False}, {"system": "b", "sessions": 1, "held": False}]
    assert density.densities(rows) == {"a": 8, "b": 0}


@pytest.mark.parametrize("extra, message", [
    (["--beat-ms", "nan"], "--beat-ms must be a finite number > 0"),
    (["--json", "/no-such-folder/d.json"], "--json /no-such-folder/d.json: not a file in an existing folder"),
    (["--png", "."], "--png .: not a file in an existing folder"),
])
def test_bad_arguments_stop_before_the_run(gru_profiles, extra, message):
    density = _density_module()
    with pytest.raises(SystemExit, match=message.replace(".", r"\.")):
        density.main([*map(str, gru_profiles), "--backend", "interp", *extra])


def test_one_model_at_distinct_sizes(gru_profiles):
    density = _density_module()
    with pytest.raises(SystemExit, match="give one model at distinct cohort sizes"):
        density.main([str(gru_profiles[0]), str(gru_profiles[0]), "--backend", "interp"])


def test_runs_that_differ_in_one_bit_are_not_identical():
    density = _density_module()
    run = lambda y: type("R", (), {"outputs": {"y": y}})  # noqa: E731
    y = np.array([[1.0, np.nan], [2.0, 3.0]], np.float32)
    assert density.identical_runs([run(y), run(y.copy())])
    other = y.copy()
    other[1, 1] = np.nextafter(np.float32(3.0), np.float32(4.0))
    assert not density.identical_runs([run(y), run(y.copy()), run(other)])
