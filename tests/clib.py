"""Build C sources into a shared library and load it with ctypes (test helper).

Reusable by any test that runs project C on the host: compile each source to an
object in parallel, link with ``-shared``, and ``ctypes.CDLL`` the result.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parent.parent
FIRMWARE = REPO / "firmware"
NNREF_INCLUDE = FIRMWARE / "nnref" / "Include"
NNREF_SOURCES = sorted((FIRMWARE / "nnref" / "Source").glob("*.c"))
RUNTIME_DIR = FIRMWARE / "runtime"
CISL_KERNEL_SOURCES = [RUNTIME_DIR / "cisl_kernels.c"]

# The project's own C must be clean under these; upstream code is built without -Werror.
STRICT_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic")


class CompileError(RuntimeError):
    """A compiler invocation failed; the message carries the command and its output."""


def have_compiler(cc: str = "gcc") -> bool:
    return shutil.which(cc) is not None


def run_cc(args: Sequence[str | os.PathLike[str]]) -> None:
    """Run a compiler command, raising CompileError with its output on failure."""
    cmd = [str(a) for a in args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def compile_objects(
    sources: Sequence[Path],
    out_dir: Path,
    *,
    include_dirs: Sequence[Path] = (),
    flags: Sequence[str] = STRICT_FLAGS,
    cc: str = "gcc",
    pic: bool = True,
) -> list[Path]:
    """Compile every source to its own object in out_dir (in parallel); returns the objects."""
    out_dir.mkdir(parents=True, exist_ok=True)
    incs = [f"-I{d}" for d in include_dirs]
    extra = ["-fPIC"] if pic else []

    def one(i_src: tuple[int, Path]) -> Path:
        i, src = i_src
        obj = out_dir / f"{i:04d}_{src.stem}.o"  # index: upstream has equal stems in different folders
        run_cc([cc, *flags, *extra, *incs, "-c", src, "-o", obj])
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, enumerate(sources)))


def build_shared_lib(
    sources: Sequence[Path],
    out_dir: Path,
    *,
    name: str = "libtest.so",
    include_dirs: Sequence[Path] = (),
    flags: Sequence[str] = STRICT_FLAGS,
    link_flags: Sequence[str] = (),
    cc: str = "gcc",
) -> Path:
    """Compile and link sources into out_dir/name; returns the library path."""
    objs = compile_objects(sources, out_dir / (name + ".objs"), include_dirs=include_dirs, flags=flags, cc=cc)
    lib = out_dir / name
    run_cc([cc, "-shared", *link_flags, *objs, "-o", lib])
    return lib


def load(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))


def ptr(a: npt.NDArray[np.generic] | None, ctype: type) -> object:
    """A ctypes pointer to a C-contiguous array's data (NULL for None)."""
    if a is None:
        return ctypes.POINTER(ctype)()
    assert a.flags["C_CONTIGUOUS"], "array must be C-contiguous"
    return a.ctypes.data_as(ctypes.POINTER(ctype))
