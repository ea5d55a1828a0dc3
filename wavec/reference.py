"""The golden reference: onnxruntime (CPU) runs the ORIGINAL model beat by beat over a whole cohort.

Per-session layout, as in the runtime and wavec/profile.py: arrays are ``[beats, sessions, *shape]`` where
``shape`` is one session's tensor with the cohort axis dropped. The model itself sees each tensor in its own
batched layout, with the sessions along that tensor's cohort axis (Silero: ``input`` [batch, 576] axis 0,
``state`` [2, batch, 128] axis 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wavec.errors import WavecError

_ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


def _dtype(model: Path, arg) -> np.dtype:
    try:
        return np.dtype(_ORT_DTYPES[arg.type])
    except KeyError:
        raise WavecError(f"{model}: input or output '{arg.name}' has type {arg.type}, which the reference does "
                         f"not handle; use a model with float/int tensors") from None


def onnx_stateful_reference(model_path, frames: dict[str, np.ndarray], reset: np.ndarray,
                            states: list[tuple[str, str]], bindings: dict[str, object] | None = None,
                            cohort_axes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Runs ``model_path`` with onnxruntime's CPU provider, one call per beat for the whole cohort.

    - ``frames``: {input name: [beats, sessions, *frame]}, the per-beat inputs (cast to the model's dtype);
    - ``reset``: bool [beats, sessions]; where True, that session's slice of every state is zeroed before
      that beat (beat 0 starts from zeros for everyone);
    - ``states``: [(state input, paired state output)]: each beat's output feeds the next beat's input;
      the per-session state shape is the model input's shape without its cohort axis (must be static);
    - ``bindings``: {input name: value} held fixed every beat, passed in the model's declared dtype and
      rank (Silero: ``{"sr": 16000}`` becomes an int64 scalar);
    - ``cohort_axes``: {tensor name: axis of the sessions in the model's batched layout}; 0 by default, and a
      state output defaults to its paired input's axis.

    Returns {output name: [beats, sessions, *shape]} for every model output (state outputs included: the
    state after each beat), with the cohort axis moved to position 1 and dropped from the per-session shape.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise WavecError("the onnxruntime reference needs onnxruntime: pip install 'wavec[ref]'") from None
    model = Path(model_path)
    if not model.is_file():
        raise WavecError(f"{model}: no such model file")
    bindings = dict(bindings or {})
    axes = dict(cohort_axes or {})
    for s_in, s_out in states:
        axes.setdefault(s_out, axes.get(s_in, 0))

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    state_in = {s_in: s_out for s_in, s_out in states}

    for name in list(frames) + list(bindings) + list(state_in):
        if name not in inputs:
            raise WavecError(f"{model}: has no input '{name}' (inputs: {', '.join(inputs)})")
    for s_out in state_in.values():
        if s_out not in outputs:
            raise WavecError(f"{model}: has no output '{s_out}' to carry into the next beat (outputs: "
                             f"{', '.join(outputs)})")
    missing = [n for n in inputs if n not in frames and n not in bindings and n not in state_in]
    if missing:
        raise WavecError(f"{model}: inputs {missing} are neither frames, bindings nor states; pass them in one")
    dup = (set(frames) & set(bindings)) | (set(frames) & set(state_in)) | (set(bindings) & set(state_in))
    if dup:
        raise WavecError(f"{model}: inputs {sorted(dup)} are given twice (frames, bindings, states overlap)")

    reset = np.asarray(reset, dtype=bool)
    if reset.ndim != 2:
        raise WavecError(f"reset must be bool [beats, sessions], got shape {reset.shape}")
    beats, sessions = reset.shape
    feeds_frames = {}
    for name, arr in frames.items():
        arr = np.asarray(arr)
        if arr.shape[:2] != (beats, sessions):
            raise WavecError(f"frames['{name}'] has shape {arr.shape}; its first two axes must be [beats, "
                             f"sessions] = {(beats, sessions)} like reset")
        feeds_frames[name] = arr.astype(_dtype(model, inputs[name]), copy=False)

    fixed = {}
    for name, value in bindings.items():
        v = np.asarray(value, dtype=_dtype(model, inputs[name]))
        rank = len(inputs[name].shape) if inputs[name].shape is not None else v.ndim
        if v.ndim != rank:
            if v.size != 1 or rank > 0 and any(not isinstance(d, int) or d != 1 for d in inputs[name].shape):
                raise WavecError(f"{model}: binding '{name}' has shape {v.shape}, the input's is "
                                 f"{inputs[name].shape}")
            v = v.reshape((1,) * rank)
        fixed[name] = v

    carried = {}
    for s_in in state_in:
        shape = list(inputs[s_in].shape)
        ax = axes.get(s_in, 0)
        if not 0 <= ax < len(shape):
            raise WavecError(f"{model}: cohort axis {ax} of state '{s_in}' is outside its rank {len(shape)}")
        per = [d for i, d in enumerate(shape) if i != ax]
        if not all(isinstance(d, int) and d > 0 for d in per):
            raise WavecError(f"{model}: state '{s_in}' has shape {shape}; besides the cohort axis {ax} its dims "
                             f"must be static to start from zeros; fix them in the model (e.g. onnx "
                             f"update_inputs_outputs_dims) or set cohort_axes['{s_in}'] right")
        full = per[:ax] + [sessions] + per[ax:]
        carried[s_in] = np.zeros(full, _dtype(model, inputs[s_in]))

    results: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    for b in range(beats):
        feed = dict(fixed)
        for name, arr in feeds_frames.items():
            feed[name] = np.ascontiguousarray(np.moveaxis(arr[b], 0, axes.get(name, 0)))
        for s_in, st in carried.items():
            if reset[b].any():
                np.moveaxis(st, axes.get(s_in, 0), 0)[reset[b]] = 0
            feed[s_in] = st
        outs = dict(zip(outputs, sess.run(outputs, feed)))
        for o, v in outs.items():
            ax = axes.get(o, 0)
            if v.ndim <= ax or v.shape[ax] != sessions:
                raise WavecError(f"{model}: output '{o}' has shape {v.shape}, no cohort axis {ax} of size "
                                 f"{sessions}; set cohort_axes['{o}']")
            results[o].append(np.moveaxis(v, ax, 0))
        for s_in, s_out in state_in.items():
            nxt = outs[s_out]
            if nxt.shape != carried[s_in].shape:
                raise WavecError(f"{model}: state output '{s_out}' has shape {nxt.shape}, its input '{s_in}' "
                                 f"{carried[s_in].shape}; they must match to carry")
            carried[s_in] = np.array(nxt, copy=True)
    return {o: np.stack(v) if v else np.zeros((0, sessions)) for o, v in results.items()}
