"""Which int8 kernel library a node is built with: upstream CMSIS-NN or the bundled nnref.

Upstream CMSIS-NN when CMSIS_NN_ROOT points at a checkout (checked), otherwise firmware/nnref.
`cisl build` compiles it into every image; `cisl compile` and `cisl fit` price the footprint of the
library that the build would use (board.toml [footprint] is calibrated per library).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .resources import resource_dir


@dataclass
class KernelLib:
    kind: str  # "nnref" or "cmsis-nn"
    root: Path  # absolute
    include: Path
    sources: list[Path]
    given: str = ""  # CMSIS_NN_ROOT as set (build.json kernels_root)
    commit: str | None = None  # the CMSIS-NN checkout's HEAD ("unknown" if not a git checkout)


def kernel_library() -> KernelLib:
    """Upstream CMSIS-NN if CMSIS_NN_ROOT is set (checked), else the project's nnref."""
    root = os.environ.get("CMSIS_NN_ROOT")
    if root:
        r = Path(root).absolute()
        inc = r / "Include"
        if not (inc / "arm_nnfunctions.h").is_file():
            raise UserError(f"CMSIS_NN_ROOT={root}: no Include/arm_nnfunctions.h there; point it at a CMSIS-NN "
                            f"checkout or unset it to use the bundled nnref")
        srcs = sorted(p for p in (r / "Source").rglob("*.c")
                      if not p.name.endswith(("_f16.c", "_f32.c", "_flt.c")))
        return KernelLib("cmsis-nn", r, inc, srcs, root, cmsis_nn_commit(r))
    fw = resource_dir("firmware").absolute()
    return KernelLib("nnref", fw / "nnref", fw / "nnref" / "Include", sorted((fw / "nnref" / "Source").glob("*.c")),
                     str(fw / "nnref"))


def cmsis_nn_commit(root: Path) -> str:
    """The commit a CMSIS-NN checkout is at (git rev-parse HEAD), "unknown" if it is not a git checkout."""
    try:
        p = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "HEAD"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    out = p.stdout.strip()
    return out if p.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", out) else "unknown"
