"""File-system helpers: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UserError


def check_output_dir(target: Path, marker: str) -> None:
    """Fail early (before any work) if ``target`` may not be replaced by a cisl output."""
    target = Path(target)
    if target.exists():
        if not target.is_dir():
            raise UserError(f"{target}: exists and is not a directory; choose another output with -o")
        if any(target.iterdir()) and not (target / marker).exists():
            raise UserError(f"{target}: exists and was not written by cisl (no {marker}); "
                            f"choose an empty or new output folder with -o")


@contextlib.contextmanager
def atomic_output_dir(target: Path, marker: str) -> Iterator[Path]:
    """Yield a fresh temporary directory next to ``target``; on success it replaces ``target``.

    On any error the temporary directory is removed and ``target`` is left as it was, so users
    never see a half-written output. An existing ``target`` is only replaced if it is empty or was
    written by cisl before (it contains ``marker``), so a mistyped ``-o`` cannot wipe other data.
    """
    target = Path(target)
    check_output_dir(target, marker)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the output should not be
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        target.rename(old)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all (a temporary file next to it, then a rename)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name for the output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as e:
        raise UserError(f"{path}: cannot write there ({e.strerror}); choose another output") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
