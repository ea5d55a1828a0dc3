"""Error types. Every error a user can cause is a `WavecError` whose message names the file, node or op,
what is wrong, and what to do; the CLI prints it on one line and exits 1, never with a traceback."""


class WavecError(Exception):
    """Base of every user-facing wavec error."""


class UnsupportedModelError(WavecError):
    """The model uses an op, attribute, dtype or dynamic shape the frontend cannot lower."""


class ProfileError(WavecError):
    """A saved profile is missing, malformed, or was written by another format version."""


class VerificationError(WavecError):
    """The schedule is not race-free, or a task touches another session slot's state."""


class VerificationTooLarge(WavecError):
    """The profile is larger than the verifier's memory budget allows it to prove (not a violation)."""


class RuntimeBackendError(WavecError):
    """A backend (CUDA, interp) cannot run the profile: no device, bad inputs, a failed build."""


class BuilderError(WavecError):
    """A Python builder program (wavec.frontends.builder) is wrong: a shape or dtype mismatch, a state
    written twice or never. The message starts with the user's ``file:line`` and names the op."""
