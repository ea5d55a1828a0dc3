"""Every name the repository's Python reads is defined where it is read (pyflakes' undefined-name checks).

Bench and script code runs only on the GPU machine, where a NameError costs device time: bench/silero_peers.py
once read ``distinct_beats`` from another function's local import and failed there. This test finds such a
name on any machine, without running the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ["wavec", "dialects", "passes", "targets", "frontends", "bench", "scripts", "tests"]
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(reporter.Reporter):
    def __init__(self):
        super().__init__(None, None)
        self.found: list[str] = []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_name_read_is_defined(folder):
    collect = _Collect()
    api.checkRecursive([str(ROOT / folder)], collect)
    assert not collect.found, "\n".join(collect.found)
