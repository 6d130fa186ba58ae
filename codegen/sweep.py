"""Sweeps: many units of work with content-addressed records, run on joblib or on SLURM (submitit).

A *unit* is one call of a function with JSON parameters: ``Unit("codegen.sweep_units:train",
{"config": ..., "overrides": {...}})``. Its id is the sha256 of the function, the parameters, the
code version (cisl's version and the content of every ``codegen`` source file, plus the file that
defines the function; or only the parts ``Unit.code`` names, as training units do) and the sha256 of
every data file it names — so a changed config, code or data set gives a new id and is run again, and a finished id is never run twice. Each unit writes
``RECORDS/<id>.json`` atomically when it finishes (nothing for a unit that fails); artefacts go to
``WORK/<id>/``. A unit may name units it needs (e.g. pruning needs the dense model): the sweep runs
them in waves, a unit only after every unit it needs has its record.

The same records come out whichever backend runs them:

* ``joblib``  — processes on this machine (``jobs`` at a time);
* ``local``   — submitit's local executor (one subprocess per unit, the way a cluster runs them);
* ``slurm``   — a SLURM job array per wave through submitit (``slurm`` options: partition, time, …).

Apart from the result, a record holds only what defines the unit; how it ran (seconds, backend,
host) is kept beside it in ``run`` so that records from different backends compare equal without it.

A unit that was stopped (a SLURM time limit, a closed session) leaves its work folder behind
(`unit_state`: "started"); units that checkpoint there — `cisl sweep`'s training units (cisl train's
epoch and pruning-stage checkpoints), the split-training study's trajectories — continue from it
when the sweep runs again, and end with the record an uninterrupted run writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

from codegen import __version__
from codegen.errors import UserError
from codegen.fsutil import OWNER_FILE, check_creatable, output_owner, write_text_atomic
from codegen.optional import require

BACKENDS = ("joblib", "local", "slurm")
RECORD_FORMAT = "cisl-sweep-record"


@dataclass(frozen=True)
class Unit:
    """One unit of work: ``fn`` is ``module:function`` or ``/path/to/file.py:function``; the function
    is called as ``fn(params, ctx)`` with a `Context` and returns a JSON-serialisable result."""

    fn: str
    params: dict = field(default_factory=dict)
    data: tuple[str, ...] = ()  # files (or folders) whose content enters the id
    needs: tuple["Unit", ...] = ()
    label: str = ""  # a readable name for progress lines (not part of the id)
    # the parts of codegen (files or folders, relative to the package) whose content is the code
    # version; empty: the whole package and the file defining ``fn``. A long study names what its
    # result depends on (then the defining file is not hashed: its parameters carry the protocol),
    # so that a change elsewhere (the C emitter, the radio, the study's report) does not invalidate
    # hours of training
    code: tuple[str, ...] = ()
    # the key as the sweep computed it when it started (`pinned`): the code or data edited while a unit
    # runs must not move its record to another id, where the sweep would not find it (pin last:
    # dataclasses.replace would carry the key over to a changed unit)
    pinned_key: dict | None = field(default=None, compare=False, repr=False)

    def key(self) -> dict:
        """What the id is the hash of. Where the files lie is not part of it (a study continued on a
        cluster, or in another clone, finds its records): a function defined in a file is named by
        the file's name (its content is in the code version), and a parameter that is the path of a
        data file by that file's name (its content is in ``data``)."""
        if self.pinned_key is not None:
            return self.pinned_key
        target, _, name = self.fn.rpartition(":")
        fn = f"{Path(target).name}:{name}" if target.endswith(".py") else self.fn
        return {"fn": fn, "params": _without_paths(self.params, {p: Path(p).name for p in self.data}),
                "code": code_version(self.fn, self.code), "data": {Path(p).name: data_hash(p) for p in self.data},
                "needs": sorted(unit_id(u) for u in self.needs)}


@dataclass(frozen=True)
class Context:
    """What a unit gets besides its parameters."""

    unit_id: str
    work: Path  # WORK/<id>/, created on demand: the unit's artefacts (models, checkpoints)
    records: Path
    work_root: Path
    needs: tuple[Unit, ...] = ()  # the running unit's needs, with the ids the sweep pinned

    def _as_pinned(self, unit: Unit) -> Unit:
        """``unit`` as the sweep pinned it, when it is one of the needs: a unit function that makes its
        need again (the bench studies do) must find the record and folder the sweep made, even if a file
        that enters the id was edited since the sweep started."""
        return next((n for n in self.needs if n == unit), unit)

    def record_of(self, unit: Unit) -> dict:
        """The record of a unit this one needs (it exists: the sweep ran that unit first)."""
        return load_record(self.records, self._as_pinned(unit))

    def work_of(self, unit: Unit) -> Path:
        return self.work_root / unit_id(self._as_pinned(unit))


# --------------------------------------------------------------------------------------------
# ids
# --------------------------------------------------------------------------------------------

def _without_paths(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _without_paths(v, names) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_paths(v, names) for v in value]
    return f"<file {names[value]}>" if isinstance(value, str) and value in names else value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _fn_file(fn: str) -> Path | None:
    target = fn.rsplit(":", 1)[0]
    if target.endswith(".py"):
        return Path(target)
    spec = importlib.util.find_spec(target)
    return Path(spec.origin) if spec and spec.origin else None


@lru_cache(maxsize=None)
def _package_hash(parts: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(__version__.encode())
    root = Path(__file__).resolve().parent
    files = set()
    for part in parts or (".",):
        p = root / part
        if not p.exists():
            raise UserError(f"sweep unit code part {part!r} is not in the codegen package ({root})")
        files |= set(p.rglob("*.py")) if p.is_dir() else {p}
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=None)
def code_version(fn: str = "", parts: tuple[str, ...] = ()) -> str:
    """cisl's version, the codegen source files (all, or ``parts``), and (without ``parts``) the file
    defining ``fn`` if it lies outside codegen."""
    h = hashlib.sha256(_package_hash(tuple(parts)).encode())
    path = _fn_file(fn) if fn and not parts else None
    if path is not None and path.is_file() and Path(__file__).resolve().parent not in path.resolve().parents:
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


@lru_cache(maxsize=None)
def _hash_file(path: str, size: int, mtime: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_hash(path: str | Path) -> str:
    """sha256 of a file, or of a folder's files (names and contents, sorted)."""
    p = Path(path)
    if p.is_file():
        st = p.stat()
        return _hash_file(str(p.resolve()), st.st_size, st.st_mtime_ns)
    if p.is_dir():
        # a sweep computes every unit's id several times: one walk and one stat per file, each file's
        # content read once per process (_hash_file's cache), not a Path.resolve() per file and call
        root = str(p.resolve())
        files = []
        for folder, _, names in os.walk(root):
            for name in names:
                full = os.path.join(folder, name)
                try:
                    st = os.stat(full)
                except OSError:  # a dangling link, as Path.is_file() skipped it
                    continue
                if S_ISREG(st.st_mode):
                    files.append((tuple(os.path.relpath(full, root).split(os.sep)), full, st))
        h = hashlib.sha256()
        for rel, full, st in sorted(files, key=lambda f: f[0]):  # the order of the relative paths' parts
            h.update("/".join(rel).encode())
            h.update(_hash_file(full, st.st_size, st.st_mtime_ns).encode())
        return h.hexdigest()
    raise UserError(f"{p}: data file not found; a sweep unit names it as its input")


def key_id(key: dict) -> str:
    """The id of a unit with this key (a record keeps its key: its file name can be checked)."""
    return hashlib.sha256(_canonical(key).encode()).hexdigest()[:16]


def unit_id(unit: Unit) -> str:
    return key_id(unit.key())


def pinned(unit: Unit) -> Unit:
    """The unit (and the units it needs) with its key computed now, once: what the sweep and its workers
    use from then on, whatever changes on disk while it runs."""
    if unit.pinned_key is not None:
        return unit
    unit = dataclasses.replace(unit, needs=tuple(pinned(n) for n in unit.needs))
    return dataclasses.replace(unit, pinned_key=unit.key())


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------

def record_path(records: Path, unit: Unit) -> Path:
    return Path(records) / f"{unit_id(unit)}.json"


def load_record(records: Path, unit: Unit) -> dict:
    path = record_path(records, unit)
    if not path.is_file():
        raise UserError(f"{path}: no record for unit {unit.label or unit.fn}; run the sweep that makes it")
    return read_record(path)


def read_record(path: Path) -> dict:
    """A unit's record; one line if it is damaged (records are written whole, so someone changed it)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        doc = e
    if not isinstance(doc, dict) or "result" not in doc:
        raise UserError(f"{path}: a damaged sweep record (not a unit's result); delete it and run the sweep again to "
                        f"redo that unit")
    # a record is named by the id of the unit it keeps: one under another name is not that unit's result
    try:
        named = doc.get("id") == Path(path).stem == key_id(doc["unit"])
    except (KeyError, TypeError, ValueError):
        named = False
    if not named:
        raise UserError(f"{path}: a damaged sweep record (its id and unit are not those of its file name); delete it "
                        f"and run the sweep again to redo that unit")
    return doc


def is_done(records: Path, unit: Unit) -> bool:
    try:
        read_record(record_path(records, unit))
        return True
    except UserError:  # missing or damaged: still to do (running it says what is wrong)
        return False


def unit_state(records: Path, work: Path, unit: Unit) -> str:
    """"done" (its record exists), "damaged" (a record file that is not a unit's result: the sweep
    refuses to run until it is deleted), "started" (no record, but its work folder holds files: a run
    that was stopped; units that checkpoint continue from there) or "todo"."""
    if is_done(records, unit):
        return "done"
    if record_path(records, unit).exists():
        return "damaged"
    folder = Path(work) / unit_id(unit)
    return "started" if folder.is_dir() and any(folder.iterdir()) else "todo"


def resolve(fn: str) -> Callable[[dict, Context], Any]:
    """The function named ``module:function`` or ``/path/file.py:function``."""
    target, _, name = fn.rpartition(":")
    if not target or not name:
        raise UserError(f"sweep unit function {fn!r} must be 'module:function' or 'path/file.py:function'")
    if target.endswith(".py"):
        path = Path(target)
        mod_name = f"cisl_sweep_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}_{path.stem}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"{path}: cannot load the sweep unit's module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            sys.path.insert(0, str(path.parent))  # its sibling modules, as when run as a script
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise UserError(f"sweep unit function {fn!r}: {target} has no {name}") from None


def cpu_model() -> str:
    """The worker's CPU, kept in ``run``: float results (torch picks its kernels by instruction set)
    can differ in the last digits between machines, and a rerun that does not match should say why."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    torch = sys.modules.get("torch")  # only when the unit used it: no import for other sweeps
    if torch is not None and hasattr(torch.backends, "cpu"):
        name += f" (torch {torch.backends.cpu.get_cpu_capability()})"
    return name


def run_unit(unit: Unit, records: Path, work: Path, backend: str = "inline") -> dict:
    """Run one unit unless its record exists; returns the record. Called in the worker process."""
    records, work = Path(records), Path(work)
    path = record_path(records, unit)
    if path.is_file():
        return read_record(path)
    uid = unit_id(unit)
    ctx = Context(uid, work / uid, records, work, unit.needs)
    t0 = time.time()
    result = resolve(unit.fn)(unit.params, ctx)
    record = {"format": RECORD_FORMAT, "id": uid, "label": unit.label, "unit": unit.key(), "result": result,
              "run": {"seconds": round(time.time() - t0, 3), "backend": backend, "host": platform.node(),
                      "cpu": cpu_model(), "pid": os.getpid()}}
    records.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    return record


# --------------------------------------------------------------------------------------------
# the sweep folder of `cisl sweep -o OUT`: OUT/records/ and OUT/work/
# --------------------------------------------------------------------------------------------

SWEEP_KIND = "sweep"  # its OWNER_FILE says "cisl sweep"


def _legacy_sweep_folder(out: Path) -> bool:
    """A sweep folder of a cisl version before the owner file: records/ and work/ holding only (and
    some of) what units write there: records/<id>.json, work/<id>/, work/submitit/."""
    try:
        names = {p.name for p in out.iterdir()}
        records = [p.name for p in (out / "records").iterdir()] if (out / "records").is_dir() else []
        work = [p.name for p in (out / "work").iterdir()] if (out / "work").is_dir() else []
    except OSError:
        return False
    return bool(records or work) and names <= {"records", "work"} \
        and all(re.fullmatch(r"\.?[0-9a-f]{16}\.json(\.tmp-[0-9a-f]+)?", n) for n in records) \
        and all(re.fullmatch(r"[0-9a-f]{16}|submitit", n) for n in work)


def check_sweep_folder(out: Path) -> None:
    """Before any unit runs: ``out`` must be new, empty or a sweep folder cisl made (it is resumed). A
    sweep folder is not replaced as a whole (it is resumable), so it is not written atomically; but
    records/ and work/ are never written into a folder of the user's or another kind of cisl output."""
    out = Path(out)
    check_creatable(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"{out}: is a file, not a sweep folder; choose another sweep folder with -o")
    try:
        empty = not any(out.iterdir())
    except OSError as e:
        raise UserError(f"{out}: cannot read it ({e.strerror}); choose another sweep folder with -o") from None
    owner = output_owner(out)
    if owner is not None and owner != SWEEP_KIND:
        raise UserError(f"{out}: is a cisl {owner} folder, not a sweep folder; choose another sweep folder with -o")
    if owner is None and not empty and not _legacy_sweep_folder(out):
        raise UserError(f"{out}: exists and was not made by cisl sweep; choose a new or empty sweep folder with -o")
    for folder in (out / "records", out / "work"):
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder}: is a file, not a sweep folder; choose another sweep folder with -o")


def claim_sweep_folder(out: Path) -> None:
    """Mark ``out`` (checked by check_sweep_folder) as cisl's sweep folder before any unit writes in it,
    so that the next run resumes it and other commands do not write into it."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{out}: cannot create it ({e.strerror}); choose another sweep folder with -o") from None
    if output_owner(out) is None:
        write_text_atomic(out / OWNER_FILE, f"cisl {SWEEP_KIND}\n")


def other_units(out: Path, units: Iterable[Unit]) -> tuple[int, int]:
    """Records and stopped units' work folders in sweep folder ``out`` that none of ``units`` (nor what
    they need) is: another grid's, or a unit whose id changed with the config, the data or cisl's code.
    They stay where they are, but records/ counts them too (audit V F6: after an upgrade a re-run
    retrained every point beside the old records, without a word)."""
    ids: set[str] = set()
    stack = list(units)
    while stack:
        u = stack.pop()
        uid = unit_id(u)
        if uid not in ids:
            ids.add(uid)
            stack.extend(u.needs)
    out = Path(out)
    try:
        records = {p.stem for p in (out / "records").glob("*.json") if re.fullmatch(r"[0-9a-f]{16}", p.stem)}
        work = {p.name for p in (out / "work").iterdir() if p.is_dir() and re.fullmatch(r"[0-9a-f]{16}", p.name)} \
            if (out / "work").is_dir() else set()
    except OSError:
        return 0, 0
    return len(records - ids), len(work - ids - records)


def same_record(a: dict, b: dict) -> bool:
    """Records equal in everything but how they ran (``run``)."""
    return {k: v for k, v in a.items() if k != "run"} == {k: v for k, v in b.items() if k != "run"}


# --------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------

def waves(units: Iterable[Unit]) -> list[list[Unit]]:
    """Every unit and the units it needs (each once), grouped so that a wave needs only earlier waves."""
    depth: dict[str, int] = {}
    by_id: dict[str, Unit] = {}

    def visit(u: Unit, stack: tuple[str, ...]) -> int:
        uid = unit_id(u)
        if uid in stack:
            raise UserError(f"sweep unit {u.label or u.fn} needs itself (a cycle of needs)")
        if uid not in depth:
            depth[uid] = 1 + max((visit(n, stack + (uid,)) for n in u.needs), default=-1)
            by_id[uid] = u
        return depth[uid]

    order = []
    for u in units:
        visit(u, ())
        order.append(unit_id(u))
    levels: list[list[Unit]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    seen = set()
    for uid in list(depth):  # insertion order: needs first, then the order given
        if uid not in seen:
            seen.add(uid)
            levels[depth[uid]].append(by_id[uid])
    return levels


def _submitit_executor(backend: str, logs: Path, jobs: int, slurm: dict | None):
    submitit = require("submitit", f"the {backend} sweep backend", "sweep")
    opts = dict(slurm or {})
    if backend == "slurm":
        import shutil

        missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if missing:  # submitit raises a RuntimeError of its own, which ended the command in a traceback
            raise UserError(f"--backend slurm: {' and '.join(missing)} not found, so this is no SLURM login node; "
                            "run the sweep there, or here with --backend joblib (or local)")
        ex = submitit.AutoExecutor(folder=str(logs), cluster="slurm")
        params = {"slurm_array_parallelism": jobs}
        for key, value in opts.items():
            params[key if key.startswith(("slurm_", "timeout_min", "cpus_per_task", "mem_gb", "gpus_per_node",
                                          "nodes", "tasks_per_node", "name")) else f"slurm_{key}"] = value
        ex.update_parameters(**params)
    else:  # the local executor itself: AutoExecutor does not pass it the signal delay
        ex = submitit.LocalExecutor(folder=str(logs))
        ex.update_parameters(timeout_min=int(opts.get("timeout_min", 24 * 60)),
                             **({"signal_delay_s": int(opts["signal_delay_s"])} if "signal_delay_s" in opts else {}))
    return ex


def run_sweep(units: Iterable[Unit], records: Path, work: Path, backend: str = "joblib", jobs: int = 1,
              slurm: dict | None = None, say: Callable[[str], None] = print) -> list[dict]:
    """Run every unit not yet recorded (and what it needs), wave by wave; returns the units' records.

    A failed unit writes no record; the sweep runs what it can and then raises a UserError naming the
    failed units (run it again to retry them: finished units are skipped).
    """
    if backend not in BACKENDS:
        raise UserError(f"sweep backend {backend!r}: use one of {', '.join(BACKENDS)}")
    units = [pinned(u) for u in units]  # the ids as of now: a unit's record is where the sweep looks for it
    records, work = Path(records), Path(work)
    for u in units:  # before any unit runs, not after the others trained (a damaged record never heals)
        if record_path(records, u).exists():
            read_record(record_path(records, u))
    failed: dict[str, str] = {}
    for level in waves(units):
        blocked = [u for u in level if any(unit_id(n) in failed or not is_done(records, n) for n in u.needs)]
        for u in blocked:
            failed[unit_id(u)] = "a unit it needs failed"
        todo = [u for u in level if u not in blocked and not is_done(records, u)]
        if not todo:
            continue
        say(f"sweep: {len(todo)} unit(s) to run on {backend}" + (f", {jobs} at a time" if jobs > 1 else ""))
        for u, error in zip(todo, _run_level(todo, records, work, backend, jobs, slurm)):
            name = u.label or unit_id(u)
            if error is None and is_done(records, u):
                say(f"sweep: done {name} -> {record_path(records, u)}")
            else:
                failed[unit_id(u)] = error or "no record written"
                say(f"sweep: FAILED {name}: {failed[unit_id(u)]}")
    if failed:
        # every distinct reason whole: its end is often the how-to-fix part (a cut line sent users in a loop)
        raise UserError(f"sweep: {len(failed)} unit(s) failed ({'; '.join(sorted(set(failed.values())))}); "
                        "run the sweep again to retry them (finished units are skipped)")
    return [load_record(records, u) for u in units]


def _guarded(unit: Unit, records: str, work: str, backend: str) -> str | None:
    """run_unit in a worker; the error as one line instead of a lost traceback."""
    try:
        run_unit(unit, Path(records), Path(work), backend)
        return None
    except Exception as e:  # noqa: BLE001 -- reported per unit; the sweep goes on
        return f"{type(e).__name__}: {e}".splitlines()[0]  # whole: the end of a line says how to fix it


class _Requeueable:
    """What submitit runs for a unit. When the unit reaches its time limit (SLURM's --time, or the
    local executor's timeout), submitit calls ``checkpoint`` and requeues the same call (up to its
    max_num_timeout, 3 by default); the unit then continues from what it saved in its work folder —
    cisl train's epoch and pruning-stage checkpoints — instead of failing."""

    def __call__(self, unit: Unit, records: str, work: str, backend: str) -> str | None:
        return _guarded(unit, records, work, backend)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)

    __submitit_checkpoint__ = checkpoint  # the name newer submitit releases call


@contextlib.contextmanager
def _stderr_into(path: Path, active: bool = True):
    """While submitit starts its local controllers (one process per job, in our process group, so a
    Ctrl-C reaches them too), their stderr is ``path``, not the terminal: a Ctrl-C printed each one's
    KeyboardInterrupt traceback after "interrupted". The jobs' own output goes to submitit's logs."""
    if not active:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _run_level(todo: list[Unit], records: Path, work: Path, backend: str, jobs: int,
               slurm: dict | None) -> list[str | None]:
    if backend == "joblib":
        joblib = require("joblib", "the joblib sweep backend", "sweep")
        Parallel, delayed = joblib.Parallel, joblib.delayed

        if jobs == 1:
            return [_guarded(u, str(records), str(work), backend) for u in todo]
        # a Ctrl-C leaves the workers' semaphores to multiprocessing's resource tracker (a process that
        # reads this environment when it starts), which would add a two-line warning after "interrupted"
        quiet = "ignore:resource_tracker:UserWarning"
        if quiet not in os.environ.get("PYTHONWARNINGS", ""):
            os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), quiet]))
        return Parallel(n_jobs=jobs)(delayed(_guarded)(u, str(records), str(work), backend) for u in todo)
    ex = _submitit_executor(backend, work / "submitit", jobs, slurm)
    # SLURM limits the array's parallelism itself; the local executor starts every job at once
    chunk = len(todo) if backend == "slurm" else jobs
    out = []
    for lo in range(0, len(todo), chunk):
        part = todo[lo:lo + chunk]
        n = len(part)
        with _stderr_into(work / "submitit" / "controllers.err", backend == "local"):
            jobs_ = ex.map_array(_Requeueable(), part, [str(records)] * n, [str(work)] * n, [backend] * n)
        for job in jobs_:
            try:
                out.append(job.result())
            except Exception as e:  # noqa: BLE001 -- a job that died (killed, out of time)
                why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                out.append(f"job {job.job_id} ended without a result: {why}")
    return out
