"""`cisl build`: compile every node of a compiled plan into a firmware image, in parallel.

The kernel library is upstream CMSIS-NN when CMSIS_NN_ROOT points at a checkout, otherwise
firmware/nnref. Kernel and runtime objects are compiled once per build folder and linked into every
node; only the generated files are compiled per node. Our own code builds with warnings as errors.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .boards import load_board
from .errors import CheckFailed, UserError
from .plan.io import load_plan
from .resources import resource_dir

RUNTIME_SOURCES = ["runtime/cisl_kernels.c", "runtime/cisl_log.c", "runtime/cisl_runtime.c",
                   "somegather/cisl_somegather.c", "somegather/cisl_mixer_transport.c", "mixer/mixer.c"]
NODE_SOURCES = ["cisl_node.c", "cisl_weights.c", "cisl_mixer.c"]


@dataclass
class CompileJob:
    source: Path
    obj: Path
    flags: list[str]
    log: Path
    cacheable: bool = False  # shared sources (kernels, runtime, board) are cached across builds


def cache_dir() -> Path | None:
    """Where compiled shared objects are kept between builds (CISL_CACHE_DIR, default ~/.cache/cisl;
    set CISL_CACHE_DIR to an empty string to disable)."""
    env = os.environ.get("CISL_CACHE_DIR")
    if env == "":
        return None
    return Path(env) if env else Path.home() / ".cache" / "cisl" / "objects"


def _cache_key(cc_id: str, job: CompileJob, headers: bytes) -> str:
    h = hashlib.sha256()
    for part in (cc_id.encode(), "\0".join(job.flags).encode(), job.source.read_bytes(), headers):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _headers_digest(dirs: list[Path]) -> bytes:
    """Content of every header the shared sources could include: any change invalidates the cache."""
    h = hashlib.sha256()
    for d in dirs:
        for p in sorted(d.glob("*.h")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.digest()


@dataclass
class KernelLib:
    kind: str  # "nnref" or "cmsis-nn"
    root: Path
    include: Path
    sources: list[Path]


def kernel_library() -> KernelLib:
    """Upstream CMSIS-NN if CMSIS_NN_ROOT is set (checked), else the project's nnref."""
    root = os.environ.get("CMSIS_NN_ROOT")
    if root:
        r = Path(root)
        inc = r / "Include"
        if not (inc / "arm_nnfunctions.h").is_file():
            raise UserError(f"CMSIS_NN_ROOT={root}: no Include/arm_nnfunctions.h there; point it at a CMSIS-NN "
                            f"checkout or unset it to use the bundled nnref")
        srcs = sorted(p for p in (r / "Source").rglob("*.c")
                      if not p.name.endswith(("_f16.c", "_f32.c", "_flt.c")))
        return KernelLib("cmsis-nn", r, inc, srcs)
    fw = resource_dir("firmware")
    return KernelLib("nnref", fw / "nnref", fw / "nnref" / "Include", sorted((fw / "nnref" / "Source").glob("*.c")))


def _run(cmd: list[str], log: Path) -> tuple[bool, str]:
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = "$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(text)
    return p.returncode == 0, p.stdout + p.stderr


def build(build_dir: Path, board_name: str | None = None, jobs: int | None = None,
          say: Callable[[str], None] = lambda s: None) -> dict:
    """Build every node in ``build_dir``; returns the summary also written to build.json."""
    build_dir = Path(build_dir)
    plan = load_plan(build_dir)
    board = load_board(board_name or plan.meta["board"])
    if board.name != plan.meta["board"]:
        raise UserError(f"{build_dir}: compiled for board '{plan.meta['board']}', not '{board.name}'; "
                        f"recompile with `cisl compile --board {board.name}`")
    cc = board.build["cc"]
    if shutil.which(cc) is None:
        raise UserError(f"compiler '{cc}' for board {board.name} not found; install it "
                        f"(Debian/Ubuntu: sudo apt-get install --no-install-recommends gcc)")
    lib = kernel_library()
    fw = resource_dir("firmware")
    includes = [f"-I{lib.include}", f"-I{fw / 'runtime'}", f"-I{fw / 'somegather'}", f"-I{fw / 'mixer'}",
                f"-I{board.path}"]
    cflags = list(board.build["cflags"])
    obj_dir = build_dir / "_obj"
    if obj_dir.exists():
        shutil.rmtree(obj_dir)
    for node in plan.nodes:
        (build_dir / f"node_{node.device:02d}" / "build.log").unlink(missing_ok=True)
    common_log = obj_dir / "build.log"

    jobs_list: list[CompileJob] = []
    kernel_flags = (list(board.build.get("upstream_cflags", cflags)) if lib.kind == "cmsis-nn" else cflags)
    for src in lib.sources:
        jobs_list.append(CompileJob(src, obj_dir / "kernels" / (src.stem + ".o"), kernel_flags + [f"-I{lib.include}"],
                                    common_log, cacheable=True))
    for rel in RUNTIME_SOURCES:
        src = fw / rel
        jobs_list.append(CompileJob(src, obj_dir / "runtime" / (src.stem + ".o"), cflags + includes, common_log,
                                    cacheable=True))
    for rel in board.build["sources"]:
        src = board.path / rel
        jobs_list.append(CompileJob(src, obj_dir / "board" / (src.stem + ".o"), cflags + includes, common_log,
                                    cacheable=True))
    for node in plan.nodes:
        nd = build_dir / f"node_{node.device:02d}"
        missing = [rel for rel in NODE_SOURCES if not (nd / rel).is_file()]
        if missing:
            raise UserError(f"{nd / missing[0]}: missing; {build_dir} was compiled by another cisl version or "
                            f"edited, run `cisl compile` again")
    node_objs: dict[int, list[Path]] = {}
    for node in plan.nodes:
        nd = build_dir / f"node_{node.device:02d}"
        node_objs[node.device] = []
        for rel in NODE_SOURCES:
            obj = obj_dir / f"node_{node.device:02d}" / (Path(rel).stem + ".o")
            jobs_list.append(CompileJob(nd / rel, obj, cflags + includes + [f"-I{nd}"], nd / "build.log"))
            node_objs[node.device].append(obj)

    say(f"build: {len(plan.nodes)} nodes for {board.name} with {lib.kind} ({len(jobs_list)} compile jobs)")
    workers = jobs or os.cpu_count() or 2

    cache = cache_dir()
    cc_id = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout if cache else ""
    headers = _headers_digest([lib.include, lib.include.parent / "Include" / "Internal", fw / "runtime",
                               fw / "somegather", fw / "mixer", board.path, fw / "nnref" / "Source",
                               lib.root / "Source"]) if cache else b""

    def compile_one(j: CompileJob) -> tuple[CompileJob, bool, str]:
        j.obj.parent.mkdir(parents=True, exist_ok=True)
        cached = cache / f"{_cache_key(cc_id, j, headers)}.o" if (cache and j.cacheable) else None
        if cached is not None and cached.is_file():
            shutil.copyfile(cached, j.obj)
            return j, True, ""
        ok, out = _run([cc, *j.flags, "-c", str(j.source), "-o", str(j.obj)], j.log)
        if ok and cached is not None:
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(f".tmp{os.getpid()}")
                shutil.copyfile(j.obj, tmp)
                tmp.replace(cached)  # atomic: concurrent builds never see half an object
            except OSError:
                pass  # a read-only or full cache only costs speed
        return j, ok, out

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(compile_one, jobs_list))
    failed = [(j, out) for j, ok, out in results if not ok]
    if failed:
        j, out = failed[0]
        first = next((ln for ln in out.splitlines() if "error" in ln), out.strip().splitlines()[0] if out.strip() else "")
        raise CheckFailed(f"compiling {j.source} failed: {first.strip()} (full log: {j.log})")

    shared = [j.obj for j in jobs_list if j.obj.parent.name in ("kernels", "runtime", "board")]

    def link(device: int) -> tuple[int, bool, str, Path]:
        nd = build_dir / f"node_{device:02d}"
        out = nd / board.build["output"]
        ok, text = _run([cc, *cflags, *[str(o) for o in node_objs[device]], *[str(o) for o in shared],
                         *board.build.get("ldflags", []), "-o", str(out)], nd / "build.log")
        return device, ok, text, out

    with ThreadPoolExecutor(workers) as pool:
        links = list(pool.map(link, [n.device for n in plan.nodes]))
    for device, ok, text, _ in links:
        if not ok:
            raise CheckFailed(f"linking node {device} failed: {text.strip().splitlines()[-1] if text.strip() else ''} "
                              f"(full log: {build_dir / f'node_{device:02d}' / 'build.log'})")
    summary = {"board": board.name, "compiler": cc, "kernels": lib.kind, "kernels_root": str(lib.root),
               "nodes": [{"node": d, "image": str(p.relative_to(build_dir)), "bytes": p.stat().st_size}
                         for d, _, _, p in links]}
    (build_dir / "build.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
