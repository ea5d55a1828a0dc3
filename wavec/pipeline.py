"""Pipelines as data: a YAML file lists passes with their options (wavec/pipelines/default.yaml is the
default), and becomes the `wavec-opt -p` spec string xDSL parses.

    passes:
      - wave-fuse
      - wave-cohort: {sessions: "${sessions}"}

"${name}" in an option value is a variable: the caller's value, else the file's `defaults`.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import yaml

from wavec.errors import WavecError

_VARIABLE = re.compile(r"\$\{(\w+)\}")


def is_pipeline_file(source: str) -> bool:
    return source.endswith((".yaml", ".yml"))


def default_pipeline_text() -> str:
    return (resources.files("wavec") / "pipelines" / "default.yaml").read_text()


def _option_value(value, variables: dict, where: str) -> str:
    if isinstance(value, str) and (m := _VARIABLE.fullmatch(value)):
        if m.group(1) not in variables:
            raise WavecError(f"{where}: variable ${{{m.group(1)}}} has no value; set it (--pipeline-var {m.group(1)}=...)")
        value = variables[m.group(1)]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return option_text(value)


def option_text(value) -> str:
    """A pass option's value as a spec writes it: quoted unless it is a plain word or number (a file name such
    as ``t32.yaml`` is quoted: xDSL's pipeline lexer splits it at the dot)."""
    if isinstance(value, str) and not re.fullmatch(r"\w+|[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value):
        return quoted(value)
    return str(value)


def quoted(text: str) -> str:
    """``text`` as a quoted string of a spec: xDSL's lexer reads backslash escapes inside quotes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pass_spec(entry, variables: dict, where: str) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and len(entry) == 1:
        (name, options), = entry.items()
        if options is None:
            return str(name)
        if not isinstance(options, dict):
            raise WavecError(f"{where}: options of {name!r} must be a mapping, got {options!r}")
        inner = " ".join(f"{k}={_option_value(v, variables, where)}" for k, v in options.items())
        return f"{name}{{{inner}}}"
    raise WavecError(f"{where}: each pass is a name or {{name: {{option: value}}}}, got {entry!r}")


def spec_from_yaml(text: str, variables: dict | None = None, where: str = "pipeline") -> str:
    """The xDSL pipeline spec of a YAML pipeline. Raises WavecError for malformed YAML or entries."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise WavecError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from e
    if not isinstance(data, dict) or not isinstance(data.get("passes"), list) or not data["passes"]:
        raise WavecError(f"{where}: expected a mapping with a non-empty `passes` list")
    values = {**(data.get("defaults") or {}), **(variables or {})}
    return ",".join(_pass_spec(entry, values, where) for entry in data["passes"])


def pipeline_text(source: str) -> tuple[str, str]:
    """The text of YAML pipeline ``source`` and where it came from: a path, else the name of one wavec ships
    (wavec/pipelines/, e.g. ``default.yaml``, so the README's commands work from any directory). Raises
    WavecError when it is neither."""
    path = Path(source)
    if path.is_file():
        return path.read_text(), str(path)
    shipped = resources.files("wavec") / "pipelines" / path.name
    if shipped.is_file():
        return shipped.read_text(), f"wavec/pipelines/{path.name}"
    names = ", ".join(sorted(p.name for p in (resources.files("wavec") / "pipelines").iterdir() if is_pipeline_file(p.name)))
    raise WavecError(f"--pipeline {source}: no such pipeline file, nor one wavec ships ({names})")


def pipeline_spec(source: str, variables: dict | None = None) -> str:
    """`source` is a spec string (returned as is) or a YAML pipeline file (pipeline_text). Raises WavecError
    when it is neither, or when a spec string holds a ``${name}`` variable, which only a YAML pipeline fills in."""
    if not is_pipeline_file(source):
        if m := _VARIABLE.search(source):
            raise WavecError(f"--pipeline {source!r}: ${{{m.group(1)}}} is a variable of YAML pipelines; in a spec "
                             f"string write its value (e.g. wave-cohort{{sessions=64}}), or pass a .yaml file")
        return source
    text, where = pipeline_text(source)
    return spec_from_yaml(text, variables, where=where)
