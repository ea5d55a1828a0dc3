"""The guides quote real files; each quoted block must still be that file's exact content."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```\w+ file=(\S+)\n(.*?)```\n", re.S)
GUIDES = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_quoted_files_are_current(guide):
    blocks = BLOCK.findall(guide.read_text())
    assert blocks, f"{guide.name} quotes no file"
    for path, text in blocks:
        assert (ROOT / path).read_text() == text, f"{guide.name}: the block for {path} is stale; regenerate it"


def test_registration_line_matches_the_registry():
    guide = (ROOT / "docs" / "writing-a-pass.md").read_text()
    line = '"wave-expand-pow": ("wavec.passes.wave_expand_pow", "WaveExpandPow"),'
    assert line in guide and line in (ROOT / "wavec" / "registry.py").read_text()
