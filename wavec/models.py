"""Real model files, fetched once and cached.

Silero VAD (MIT, https://github.com/snakers4/silero-vad) ships its exported models inside the PyPI wheel
``silero-vad==6.2.3``. The wheel depends on torch, which wavec does not need to read an ONNX file, so the wheel
is fetched with ``python -m pip download --no-deps silero-vad==6.2.3`` and the wanted members are extracted
with :mod:`zipfile`. Files are cached in ``$WAVEC_CACHE`` (a directory) or ``~/.cache/wavec``, written
atomically (temporary sibling, then ``os.replace``) and checked against a pinned sha256 every time they are
returned; a file that does not match is fetched again.

The pinned digests equal the ones in the wheel's own ``RECORD`` (urlsafe base64 there, hex here).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from wavec.errors import WavecError

SILERO_WHEEL = "silero-vad==6.2.3"

# member of the wheel -> (cache file name, sha256 hex)
_SILERO_MEMBERS = {
    "silero_vad/data/silero_vad_16k_op15.onnx": (
        "silero_vad_16k_op15.onnx",
        "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
    ),
    "silero_vad/data/silero_vad.jit": (
        "silero_vad.jit",
        "e1122837f4154c511485fe0b9c64455f7b929c96fbb8d79fbdb336383ebd3720",
    ),
}


def cache_dir() -> Path:
    """``$WAVEC_CACHE`` if set, else ``~/.cache/wavec``."""
    env = os.environ.get("WAVEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "wavec"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", SILERO_WHEEL,
           "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise WavecError(f"cannot fetch {SILERO_WHEEL}: running {' '.join(cmd)} failed ({e}); check pip and the "
                         f"network, or place the files in {cache_dir()} yourself") from None
    wheels = sorted(dest.glob("silero_vad-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WavecError(f"cannot fetch {SILERO_WHEEL}: `{' '.join(cmd)}` exited {proc.returncode} ({tail[0]}); "
                         f"check the network or the pip index (PIP_INDEX_URL), or extract "
                         f"{', '.join(_SILERO_MEMBERS)} from that wheel into {cache_dir()} yourself")
    return wheels[0]


def _silero_file(member: str) -> Path:
    name, digest = _SILERO_MEMBERS[member]
    target = cache_dir() / name
    if target.is_file() and _sha256(target) == digest:
        return target
    with tempfile.TemporaryDirectory(prefix="wavec-silero-") as tmp:
        wheel = _download_wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            # one download serves every pinned member; write the others too when they are missing or stale
            for m, (mname, mdigest) in _SILERO_MEMBERS.items():
                if m not in names:
                    if m == member:
                        raise WavecError(f"{wheel.name} has no member {m}; the pinned wheel {SILERO_WHEEL} "
                                         f"should: check that the pip index serves the genuine wheel")
                    continue
                data = z.read(m)
                got = hashlib.sha256(data).hexdigest()
                if got != mdigest:
                    if m == member:
                        raise WavecError(f"{m} in {wheel.name} has sha256 {got}, expected {mdigest}; the pip "
                                         f"index served a different file: use the official PyPI index")
                    continue
                mtarget = cache_dir() / mname
                if m == member or not (mtarget.is_file() and _sha256(mtarget) == mdigest):
                    _atomic_write(mtarget, data)
    if _sha256(target) != digest:  # pragma: no cover - a concurrent writer replaced it with bad bytes
        raise WavecError(f"{target} does not match sha256 {digest} after fetching; delete it and retry")
    return target


def silero_vad_path() -> Path:
    """Path of Silero VAD's 16 kHz ONNX model (opset 15): inputs ``input`` [batch, 576] float32,
    ``state`` [2, batch, 128] float32, ``sr`` int64 scalar; outputs ``output`` [batch, 1], ``stateN``."""
    return _silero_file("silero_vad/data/silero_vad_16k_op15.onnx")


def silero_vad_jit_path() -> Path:
    """Path of Silero VAD's TorchScript model from the same wheel (for the PyTorch baselines)."""
    return _silero_file("silero_vad/data/silero_vad.jit")
