"""C libraries cisl runs on the host through ctypes, built with gcc once per source content.

They are kept in ~/.cache/cisl/lib under a name that carries a digest of their sources, so a changed
source is a new library and an old one is never loaded for it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from collections.abc import Sequence

from .errors import UserError
from .toolrun import log_command


def shared_library(name: str, sources: Sequence[Path], depends: Sequence[Path] = (), flags: Sequence[str] = (),
                   purpose: str = "") -> Path:
    """The shared object built from ``sources`` (``depends``: headers whose content it also depends on)."""
    h = hashlib.sha256()
    for p in [*sources, *depends]:
        h.update(p.read_bytes())
    h.update("\0".join(flags).encode())
    cache = Path.home() / ".cache" / "cisl" / "lib"
    so = cache / f"lib{name}-{h.hexdigest()[:16]}.so"
    if not so.is_file():
        if shutil.which("gcc") is None:
            raise UserError(f"gcc not found; it is needed {purpose or 'here'} (apt-get install gcc)")
        cache.mkdir(parents=True, exist_ok=True)
        # a name of this process's own: parallel workers (joblib, pytest-xdist) may build at once
        tmp = so.with_name(f"{so.stem}.{os.getpid()}.tmp.so")
        cmd = ["gcc", "-std=c99", "-O2", "-fPIC", "-shared", *flags, *map(str, sources), "-o", str(tmp)]
        log_command(cmd)
        subprocess.run(cmd, check=True, capture_output=True)
        tmp.replace(so)
    return so
