"""Input windows given on the command line (--inputs X.npy): loaded and checked at the boundary."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import UserError


def load_input_windows(inputs: Path | None) -> np.ndarray | None:
    """The windows of ``inputs`` (.npy), or None when not given; one-line errors for a bad file."""
    if inputs is None:
        return None
    if not inputs.is_file():
        raise UserError(f"{inputs}: input file not found")
    try:
        x = np.load(inputs, allow_pickle=False)
    except Exception:
        raise UserError(f"{inputs}: not a .npy array of input windows") from None
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x)):
        raise UserError(f"{inputs}: the input windows must be finite numbers (found NaN, infinity or non-numbers)")
    return x
