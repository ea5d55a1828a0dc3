"""What the GPU machine runs imports there: a checkout that is not pip-installed, with numpy, onnx, torch and
cuda-bindings but no xDSL and no TVM (the device's README). Each case runs in a fresh interpreter with the
editable install's finder removed and xdsl / tvm refused, after `scripts/gpu_check._import_wavec`, as the
device scripts start. A case that fails here is a device call lost (2026-11-30: bench/bodies.py could not
import the builder there)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DEVICE_PRELUDE = f"""
import importlib.abc, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
class NotOnTheDevice(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("xdsl", "tvm"):
            raise ImportError(f"{{name}}: not on the GPU machine")
sys.meta_path.insert(0, NotOnTheDevice())
sys.path[:0] = [{str(ROOT / 'scripts')!r}, {str(ROOT / 'bench')!r}]
from gpu_check import _import_wavec
_import_wavec()
"""

CASES = {
    "runtime": "import wavec.targets.cuda.runtime, wavec.targets.cuda.timeline; from wavec.profile import load",
    "cli run": "from wavec.cli import main",
    "serve": "import wavec.serve",
    "bodies bench": "import bodies; bodies.body_model('lstm_cell')",
    "density on the zoo": "import density; assert density.zoo_spec('duplex_1b') == 'duplex:1b'",
    "silero check": "import silero_gpu",
    "conv and gemm benches": "import conv, gemm",
    "built-in programs": "from gpu_check import builtin_jobs\n"
                         "jobs = builtin_jobs([5])\n"
                         "assert [label for label, _ in jobs] == ['builtin:5', 'builtin-prologue:5', 'builtin-tiled:5', "
                         "'builtin-tiled-nk:5'] and builtin_jobs([]) == []\n"
                         "assert all(make().sessions == 5 for _, make in jobs)",
    "prebuild_cubins": "import prebuild_cubins",
}


@pytest.mark.parametrize("case", CASES)
def test_device_side_imports_without_xdsl_or_an_install(case):
    proc = subprocess.run([sys.executable, "-c", DEVICE_PRELUDE + textwrap.dedent(CASES[case])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
