"""Input windows given on the command line (--inputs X.npy): loaded and checked at the boundary."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import UserError


def load_npy(path: Path, fix: str) -> np.ndarray:
    """An existing .npy file as an array; one line with ``fix`` (what to do) if it is empty, cut short,
    pickled or not an array at all."""
    try:
        x = np.load(path, allow_pickle=False)
    except Exception:  # empty (EOFError), cut short or not an array (ValueError), unreadable (OSError)
        raise UserError(f"{path}: not a .npy array (empty or damaged); {fix}") from None
    if not isinstance(x, np.ndarray):  # an .npz archive loads as a mapping of arrays
        x.close()
        raise UserError(f"{path}: an .npz archive of arrays, not one .npy array; save the windows with np.save; {fix}")
    return x


def _real(x: np.ndarray) -> bool:
    """Integer or floating point: complex numbers are numbers too, but their imaginary part would be
    dropped without a word when the windows are quantised."""
    return np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)


def load_input_windows(inputs: Path | None) -> np.ndarray | None:
    """The windows of ``inputs`` (.npy), or None when not given; one-line errors for a bad file."""
    if inputs is None:
        return None
    if not inputs.is_file():
        raise UserError(f"{inputs}: input file not found")
    x = load_npy(inputs, "give float input windows [n, lookback]")
    if not _real(x) or not np.all(np.isfinite(x)):
        raise UserError(f"{inputs}: the input windows must be finite real numbers (found NaN, infinity, complex or non-numbers)")
    if x.ndim != 2 or len(x) == 0:
        raise UserError(f"{inputs}: holds an array of shape {x.shape}; give at least one window, as float [n, lookback]")
    return x


def load_build_inputs(build_dir: Path, required: bool = True, lookback: int | None = None) -> np.ndarray | None:
    """BUILD/inputs.npy, the input windows `cisl compile` wrote: one-line errors for a missing, empty or
    damaged file, or windows of another length than ``lookback`` (None if it is missing and not ``required``)."""
    path = Path(build_dir) / "inputs.npy"
    if not path.is_file():
        if not required:
            return None
        raise UserError(f"{path}: missing; run `cisl compile` again to write the build's input windows")
    x = load_npy(path, "run `cisl compile` again to write the build's input windows")
    if x.ndim != 2 or len(x) == 0 or not _real(x) or not np.all(np.isfinite(x)):
        raise UserError(f"{path}: holds an array of shape {x.shape} and dtype {x.dtype}, not finite input windows; "
                        f"run `cisl compile` again")
    if lookback is not None and x.shape[1] != lookback:
        raise UserError(f"{path}: windows of {x.shape[1]} steps, but the plan's lookback is {lookback}; run "
                        f"`cisl compile` again")
    return x
