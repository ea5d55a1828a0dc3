"""Hardware targets: YAML files naming a GPU's SM count, memory and peak rates, with their sources.

`load_hw("h200")` reads targets/hw/h200.yaml from the package; a path to a YAML file works too.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from wavec.errors import WavecError

REQUIRED = ("name", "sm_count", "hbm_bandwidth_bytes_per_s", "peak_flops_per_s")


def known_targets() -> list[str]:
    folder = resources.files("wavec.targets") / "hw"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_hw(name_or_path: str) -> dict:
    """The target's facts as a dict. Raises WavecError for an unknown name or a file missing a key."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise WavecError(f"--hw {name_or_path}: no such file")
        text = path.read_text()
    else:
        candidate = resources.files("wavec.targets") / "hw" / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise WavecError(f"--hw {name_or_path}: unknown target; known: {', '.join(known_targets())}, or give a .yaml path")
        text = candidate.read_text()
    hw = yaml.safe_load(text)
    missing = [k for k in REQUIRED if k not in (hw or {})]
    if missing:
        raise WavecError(f"--hw {name_or_path}: missing {', '.join(missing)}")
    return hw
