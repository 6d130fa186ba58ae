"""File-system helpers: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import secrets
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from . import interrupts
from .errors import UserError


OWNER_FILE = ".cisl-output"  # "cisl <kind>": this folder is a cisl output of that kind
_HELD: set[str] = set()  # output locks this process holds
_READING: dict[str, int] = {}  # key -> descriptor of the shared lock this process holds on a folder it reads
_READ_BY_OTHERS = "another cisl run is reading it (sim, flash, qemu or estimate); wait for it to finish"
# the temporary and previous outputs cisl names next to an output (temp_sibling, replace_dir): exactly this
# form, so a folder of the user's called `.out.tmp-mine` or `.res.old-v1` is never taken for one
_TOKEN_HEX = 12  # hex digits of the random part
_CISL_HIDDEN = re.compile(rf"^\.[^/]+\.(tmp|old)-[0-9a-f]{{{_TOKEN_HEX}}}$")


def _leftover_name(target: Path, kind: str) -> str:
    return f".{target.name}.{kind}-{secrets.token_hex(_TOKEN_HEX // 2)}"


def output_target(target: Path) -> Path:
    """Where an output folder given as ``target`` is written: `-o .` (or `..`) as the folder's own path,
    since a rename cannot replace "."; a symlink as the folder it points to (made if missing), which is
    replaced while the link stays, as the lock already treats it (the link was replaced by a new folder,
    and the folder it named kept the old, stale output)."""
    target = Path(target)
    if target.name in ("", ".", ".."):
        target = Path(os.path.abspath(target))
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    return target


def output_owner(target: Path) -> str | None:
    """The kind OWNER_FILE names ("cisl <kind>"), or None when ``target`` has none."""
    try:
        line = (target / OWNER_FILE).read_text(encoding="ascii", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return line[5:].strip() if line.startswith("cisl ") else None


def check_creatable(target: Path, option: str = "-o") -> None:
    """Fail early (before hours of work) if ``target`` cannot be created: the nearest existing folder
    above it must be a folder cisl may write in."""
    target = Path(target)
    above = target.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise UserError(f"{target}: {above} is a file, not a folder; choose another output with {option}")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UserError(f"{target}: cannot write in {above} (permission denied); choose another output with {option}")


USER_LINE = "user "  # OWNER_FILE's lines after the first: entries that were the user's when cisl wrote in the folder


def _recorded_user_entries(folder: Path) -> list[str]:
    """The entries OWNER_FILE records as the user's (stamp_output), relative to ``folder``."""
    try:
        lines = (folder / OWNER_FILE).read_text(encoding="utf-8", errors="surrogateescape").splitlines()[1:]
    except OSError:
        return []
    out = []
    for ln in lines:
        if ln.startswith(USER_LINE):
            with contextlib.suppress(ValueError):
                rel = json.loads(ln[len(USER_LINE):])  # JSON: a name may hold a newline
                if isinstance(rel, str):
                    out.append(rel)
    return out


def _stamp(folder: Path) -> int | None:
    """The modification time (ns) of output ``folder``'s OWNER_FILE, None without one."""
    try:
        return os.lstat(Path(folder) / OWNER_FILE).st_mtime_ns
    except OSError:
        return None


MAKE_PRODUCTS = "# make products: "  # a Makefile cisl writes names what `make` makes beside it (build.py)


def _make_product(path: Path, folder: Path, stamp: int, makefiles: dict[Path, list[str] | None]) -> bool:
    """Whether ``path`` is what a Makefile cisl wrote into output ``folder`` (still as cisl wrote it: not
    changed after ``stamp``) makes: the nearest Makefile above it names it on its MAKE_PRODUCTS line (a
    name ending in "/" covers the folder, as its `make clean` does). Such files are made from cisl's
    sources by cisl's rules (`make -C build/node_00`); replacing the folder replaces them with the
    sources, as a `make clean` would."""
    for d in path.parents:
        if d not in makefiles:
            makefiles[d] = None
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if os.lstat(d / "Makefile").st_mtime_ns <= stamp:
                    with open(d / "Makefile", encoding="utf-8") as f:
                        for ln in f:
                            if ln.startswith(MAKE_PRODUCTS):
                                makefiles[d] = ln[len(MAKE_PRODUCTS):].split()
                                break
        products = makefiles[d]
        if products is not None:
            rel = path.relative_to(d).as_posix()
            return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in products)
        if d == folder:
            return False
    return False


def _entries_after_stamp(folder: Path, top: Path) -> Iterator[str]:
    """Entries under ``folder`` (a cisl output) written or changed after cisl last finished writing it
    (its OWNER_FILE's modification time, see stamp_output), or recorded as the user's when cisl wrote
    into it since, relative to ``top``: the user's, whatever their names — except what cisl's own
    Makefiles there make (_make_product). A nested cisl output (a folder with its own OWNER_FILE) is
    judged by its own stamp."""
    stamp = _stamp(folder)
    if stamp is None:
        return  # no stamp (a folder of a cisl version before it): the names alone decide
    makefiles: dict[Path, list[str] | None] = {}
    for rel in _recorded_user_entries(folder):
        if os.path.lexists(folder / rel) and not _make_product(folder / rel, folder, stamp, makefiles):
            yield str((folder / rel).relative_to(top))
    for path, newer in _walk_entries(folder):
        if newer is None:
            yield from _entries_after_stamp(path, top)
        elif newer > stamp and not _make_product(path, folder, stamp, makefiles):
            yield str(path.relative_to(top))


def _walk_entries(folder: Path) -> Iterator[tuple[Path, int | None]]:
    """(path, modification time in ns) of every file and link under ``folder`` except its OWNER_FILE
    and killed runs' leftovers; (path, None) for a nested cisl output, which is not entered."""
    for dirpath, dirnames, filenames in os.walk(folder):
        d = Path(dirpath)
        for name in list(dirnames):
            sub = d / name
            if d == folder and _CISL_HIDDEN.match(name):  # a run's temporary output (in progress, or a killed run's)
                dirnames.remove(name)
            elif sub.is_symlink():
                dirnames.remove(name)
                filenames.append(name)
            elif (sub / OWNER_FILE).is_file():
                dirnames.remove(name)
                yield sub, None
        for name in filenames:
            if d == folder and (name == OWNER_FILE or _CISL_HIDDEN.match(name)):
                continue
            with contextlib.suppress(OSError):  # gone meanwhile
                yield d / name, os.lstat(d / name).st_mtime_ns


def _unstamped(folder: Path) -> bool:
    """Whether cisl output ``folder`` comes from a cisl version of 1-4 December 2026 (0c2c19c..186d2c8):
    those wrote OWNER_FILE first and never stamped it (stamp_output), so every entry in it is newer than
    it and none can be told from the user's. (A copy made without keeping modification times can look
    the same; it is refused either way.)"""
    stamp = _stamp(folder)
    if stamp is None or _recorded_user_entries(folder):
        return False
    seen = False
    for _, t in _walk_entries(folder):
        if t is not None:
            if t <= stamp:
                return False
            seen = True
    return seen


def users_entries(folder: Path) -> dict[str, int]:
    """The entries of cisl output ``folder`` (not of outputs nested in it) that are the user's now:
    written or changed after its stamp, relative to it -> their modification time. Taken before cisl
    writes into the folder in place, so that stamp_output keeps them the user's."""
    folder = Path(folder)
    stamp = _stamp(folder)
    if stamp is None or _unstamped(folder):
        return {}
    makefiles: dict[Path, list[str] | None] = {}
    return {str(p.relative_to(folder)): t for p, t in _walk_entries(folder)
            if t is not None and t > stamp and not _make_product(p, folder, stamp, makefiles)}


def stamp_output(folder: Path, users: dict[str, int] | None = None, since: int | None = None) -> None:
    """Record that cisl has finished writing ``folder``: its OWNER_FILE's modification time becomes that of
    the newest entry in it, so whatever is added or changed later is recognised as the user's
    (check_output_dir then refuses to replace the folder). The entries that were the user's before this
    run wrote in place (``users``, from users_entries) and that it did not rewrite are recorded in
    OWNER_FILE as the user's: the new stamp is later than they are, and a run that wrote into the folder
    (`cisl build`) must not adopt a file the user put there. A folder without OWNER_FILE is left alone, and
    so is one that a run given ``users`` did not write into: neither its stamp (``since``, when the run
    took the folder's lock) moved nor anything but the user's entries is newer than it."""
    folder = Path(folder)
    owner = folder / OWNER_FILE
    try:
        newest = os.lstat(owner).st_mtime_ns
    except OSError:
        return
    if users is not None:  # a run that wrote in place (not a fresh output's first stamp)
        # it wrote if the stamp moved since it began (note_written advances it as files are written), or
        # if anything but the user's entries is newer than the stamp it began with (``since``)
        start = newest if since is None else since
        wrote = newest != start or any(t is not None and t > start and users.get(str(p.relative_to(folder))) != t
                                       for p, t in _walk_entries(folder))
        if not wrote or _unstamped(folder):
            return  # a refused run changes nothing; an unstamped folder stays one (check_output_dir)
    kept = []
    for rel, t in (users or {}).items():
        with contextlib.suppress(OSError):
            if os.lstat(folder / rel).st_mtime_ns == t:  # still the user's content (cisl did not replace it)
                kept.append(rel)
    if kept:
        known = _recorded_user_entries(folder)
        add = [rel for rel in kept if rel not in known]
        if add:
            with contextlib.suppress(OSError):
                with open(owner, "a", encoding="utf-8", errors="surrogateescape") as f:
                    f.write("".join(f"{USER_LINE}{json.dumps(rel)}\n" for rel in add))
    for _, t in _walk_entries(folder):
        if t is not None and t > newest:
            newest = t
    with contextlib.suppress(OSError):
        os.utime(owner, ns=(newest, newest))


def note_written(*paths: Path) -> None:
    """cisl has just written ``paths`` inside a cisl output (e.g. a table into a build folder): advance
    the stamp of the nearest enclosing one, so the files count as cisl's (and the user's files there
    stay the user's: stamp_output). Files written together (by parallel workers) are noted together:
    noted one by one, each would find the others newer than the stamp and record them as the user's."""
    by_folder: dict[Path, list[Path]] = {}
    for path in (Path(p).absolute() for p in paths):
        if not os.path.lexists(path):
            continue
        for folder in list(path.parents)[:4]:  # node_NN/x in a build folder is two levels down
            if os.path.lexists(folder / OWNER_FILE):
                by_folder.setdefault(folder, []).append(path)
                break
    for folder, written in by_folder.items():
        owner = folder / OWNER_FILE
        try:
            stamp = os.lstat(owner).st_mtime_ns
            newest = max(os.lstat(p).st_mtime_ns for p in written)
        except OSError:
            continue
        if stamp >= newest:
            continue
        if _CISL_HIDDEN.match(folder.name) or (str(folder.resolve()) in _HELD and not _unstamped(folder)):
            # a run's temporary output (all of it this run's), or a folder this run holds: its lock took the
            # user's entries when it began (output_lock), and this run's other files are no user's
            with contextlib.suppress(OSError):
                os.utime(owner, ns=(newest, newest))
        else:  # files written into an output in place, outside its lock: the rest stays whose it was
            users = users_entries(folder)
            for p in written:
                users.pop(str(p.relative_to(folder)), None)  # the files just written are cisl's
            stamp_output(folder, users)


def _shown(name: str) -> str:
    """A file name for a one-line message: quoted and escaped when it holds a newline or another control
    character (or bytes that are not UTF-8)."""
    return name if name.isprintable() else json.dumps(name)


def check_output_dir(target: Path, kind: str, entries: Callable[[str], bool],
                     legacy: Callable[[Path], bool] | None = None, option: str = "-o") -> None:
    """Fail early (before any work) if ``target`` may not be replaced by a cisl output of ``kind``.

    An existing folder is replaced only if it is empty, or cisl made it for the same kind (its
    OWNER_FILE says so, or — folders of cisl versions before the owner file — ``legacy(target)``
    recognises it) *and* every entry in it is one cisl writes there (``entries(name)``) *and* nothing in
    it, at any depth, was written or changed after cisl last wrote it (stamp_output): a file the user
    put next to cisl's, or edited, is never deleted. (A copy made without keeping modification times,
    `cp -r`, looks changed: it is refused too, which is safe.)"""
    target = output_target(target)
    with contextlib.suppress(OSError):  # (a shell whose folder was removed: nothing to protect)
        here = Path.cwd().resolve()
        if target.resolve() == here or target.resolve() in here.parents:
            raise UserError(f"{target}: is the current folder or holds it; cisl replaces an output folder whole, "
                            f"which would leave this shell in the removed one: run cisl from the folder above it, or "
                            f"choose another output with {option}")
    if not target.exists():
        check_creatable(target, option)
        return
    if not target.is_dir():
        raise UserError(f"{target}: exists and is not a directory; choose another output with {option}")
    try:
        names = sorted(p.name for p in target.iterdir())
    except OSError as e:
        raise UserError(f"{target}: cannot read it ({e.strerror}); choose another output with {option}") from None
    if not names:
        return
    owner = output_owner(target)
    if owner is None and not (legacy is not None and legacy(target)):
        raise UserError(f"{target}: exists and was not written by cisl; choose an empty or new output folder with {option}")
    if owner is not None and owner != kind:
        raise UserError(f"{target}: is a cisl {owner} folder, not a {kind} folder; choose another output with {option}")
    foreign = [n for n in names if n != OWNER_FILE and not _CISL_HIDDEN.match(n) and not entries(n)]
    if foreign:
        raise UserError(f"{target}: holds {_shown(foreign[0])}, which cisl did not write there; move it away or choose "
                        f"another output with {option}")
    if _unstamped(target):
        raise UserError(f"{target}: was written by a cisl version of 1-4 December 2026, which kept no record of "
                        f"which files in it are its own (all are newer than its {OWNER_FILE}), so cisl cannot tell "
                        f"them from yours; if nothing of yours is in it, remove it (rm -r {shlex.quote(str(target))}), "
                        f"or choose another output with {option}")
    changed = next(_entries_after_stamp(target, target), None)
    if changed is not None:
        raise UserError(f"{target}: holds {_shown(changed)}, which was written or changed after cisl wrote this folder; "
                        f"move it away or choose another output with {option}")


def _lock_path(key: str) -> Path:
    import hashlib

    # in the machine's temporary folder, not next to the user's files; CISL_LOCK_DIR moves it (users whose
    # temporary folders differ but who share a lab's boards point it at one folder)
    where = Path(os.environ.get("CISL_LOCK_DIR") or Path(tempfile.gettempdir()) / "cisl-locks")
    return where / f"{hashlib.sha1(key.encode()).hexdigest()[:20]}.lock"


@contextlib.contextmanager
def use_lock(target: Path | str, busy: str) -> Iterator[None]:
    """Hold the lock of ``target`` for a run that uses it (not an output: nothing is stamped or
    cleaned), or refuse in one line with ``busy`` while another run holds it. ``target``: a path (one
    lock however it is spelt), or a string naming a thing that is not a file, e.g. "probe:683123456"."""
    key = "use:" + (str(Path(target).resolve()) if isinstance(target, Path) else target)
    if key in _HELD:
        yield
        return
    lock = _lock_path(key)
    fd = _acquire(lock, target, busy)
    _HELD.add(key)
    try:
        yield
    finally:
        _HELD.discard(key)
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


@contextlib.contextmanager
def output_lock(target: Path) -> Iterator[None]:
    """Hold the lock of output ``target`` (a file in the temporary folder's cisl-locks/) or refuse in
    one line: two cisl runs never write one folder at once. Under the lock, the leftovers of runs that were killed
    before they could clean up (``.<name>.tmp-*``, ``.<name>.old-*``) are removed."""
    target = output_target(target)
    key = str(target.resolve())  # one lock per folder, however it is spelt (../x, a link to it)
    lock = _lock_path(key)
    if key in _HELD:  # this process holds it already (a command that locks early, then writes atomically)
        yield
        return
    if key in _READING:  # this process reads it and now writes it too (`cisl modes` rebuilds the images)
        with _upgraded(_READING[key], target):
            _HELD.add(key)
            users: dict[str, int] = {}
            since = _stamp(target)
            try:
                _recover_leftovers(target)
                users = users_entries(target)
                yield
            finally:
                _HELD.discard(key)
                stamp_output(target, users, since)
        return
    fd = _acquire(lock, target)
    try:
        _recover_leftovers(target)
        users = users_entries(target)  # before the run writes: what is the user's now stays the user's
        since = _stamp(target)
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
            stamp_output(target, users, since)  # what this run wrote there is cisl's (also after a failure)
    finally:
        # Removed while still held, so lock files do not pile up; a run that opened this file meanwhile
        # sees at its inode check that it is gone and takes a fresh one (_acquire).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _flock_shared(fd: int) -> None:
    """A shared lock without waiting; BlockingIOError while a writer holds the file. A reader that is
    leaving holds it exclusively for an instant (to remove the file), so a refusal is retried briefly."""
    import fcntl
    import time

    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.02)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)


@contextlib.contextmanager
def reading(target: Path) -> Iterator[None]:
    """Hold ``target`` (a build folder) for a run that reads it: any number of readers at once, but
    no `cisl compile` or `cisl build` of it meanwhile — a compile swaps the whole folder away, and a
    run reading it would mix two builds or write its results into the folder that was removed. A
    writer holding it refuses this run in one line."""
    import fcntl

    target = Path(target)
    key = str(target.resolve())
    if key in _HELD or key in _READING:
        yield
        return
    lock = _lock_path(key)
    fd = _acquire(lock, target, shared=True)
    _READING[key] = fd
    try:
        yield
    finally:
        del _READING[key]
        try:  # the last reader removes the file, as a writer does (it must hold it alone to do so)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(OSError):
                os.unlink(lock)
        except BlockingIOError:
            pass
        os.close(fd)


def reads_build(fn: Callable) -> Callable:
    """Decorate a function whose first argument is a build folder: it runs under :func:`reading`."""
    import functools

    @functools.wraps(fn)
    def wrapper(build_dir, *args, **kwargs):
        with reading(Path(build_dir)):
            return fn(build_dir, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _upgraded(fd: int, target: Path) -> Iterator[None]:
    """This process's shared lock on ``target`` made exclusive for a write, then shared again."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # (a refused conversion may drop the shared lock; the refusal ends the run anyway)
        raise UserError(f"{target}: {_READ_BY_OTHERS}, then run this again") from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)


def _writer_busy(fd: int, target: Path) -> str:
    """Why an exclusive lock was refused: a run writing ``target``, or runs only reading it (they hold
    it shared, so a shared lock still succeeds — the probe is dropped with the descriptor)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return f"{target}: another cisl run is writing it; wait for it to finish or choose another output"
    return f"{target}: {_READ_BY_OTHERS} or choose another output"


def _acquire(lock: Path, target: Path, busy: str | None = None, shared: bool = False) -> int:
    """Open and lock ``lock`` without waiting (``shared``: a reader's lock, which readers share and a
    writer's excludes); the descriptor, or a one-line refusal. The file can be unlinked by the run
    that held it between our open and our flock: then our lock guards nothing, so the open is
    retried until the locked file is the one at the path."""
    import fcntl

    for _ in range(100):
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise UserError(f"{lock}: cannot create the lock for {target} ({e.strerror}); "
                            f"check {lock.parent}") from None
        try:
            if shared:
                _flock_shared(fd)
            else:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            why = busy or (f"{target}: another cisl run is writing it (compile, build or modes); wait for it to "
                           f"finish, then run this again" if shared else _writer_busy(fd, target))
            os.close(fd)
            raise UserError(why) from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise UserError(f"{lock}: the lock for {target} keeps being replaced; check what else writes {lock.parent}")


def _leftovers(target: Path, kind: str) -> list[Path]:
    """The ``.<name>.<kind>-<token>`` siblings of ``target`` a cisl run made: cisl's name form, and a file
    (an atomic file write's) or a folder that is empty or carries OWNER_FILE (an output's)."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.{kind}-[0-9a-f]{{{_TOKEN_HEX}}}")
    found = []
    for p in target.parent.glob(f".{glob.escape(target.name)}.{kind}-*"):
        if not pattern.fullmatch(p.name):
            continue
        if p.is_dir() and not p.is_symlink() and not ((p / OWNER_FILE).is_file() or not any(p.iterdir())):
            continue
        found.append(p)
    return found


def _recover_leftovers(target: Path) -> None:
    """Under the lock: what runs killed before they could clean up left next to ``target`` (only what
    :func:`_leftovers` recognises as cisl's). A run killed between the two renames of a swap without an
    atomic exchange left no ``target`` but the previous output as ``.<name>.old-<token>``: it comes
    back; every other leftover is removed."""
    olds = sorted(_leftovers(target, "old"), key=lambda p: p.lstat().st_mtime)
    if olds and not os.path.lexists(target):
        olds.pop().rename(target)
    for left in _leftovers(target, "tmp") + olds:
        _remove(left)


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system or the
    file system cannot."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the complete folder ``tmp`` in ``target``'s place, so that ``target`` is at every moment
    either the old or the new folder: one atomic exchange where the system has it, else two renames
    that a signal cannot cut apart (and that the next run's lock undoes after a kill -9 between them)."""
    tmp, target = Path(tmp), Path(target)
    interrupts.check()  # stopped by the user before the swap: the old output stays
    with interrupts.deferred():
        if not os.path.lexists(target):
            tmp.rename(target)
            return
        if _exchange(tmp, target):
            old = tmp
        else:
            old = target.parent / _leftover_name(target, "old")
            target.rename(old)
            tmp.rename(target)
    _remove(old)


class RunOutput:
    """The record of a run that may fail (`cisl sim --logs`), as :func:`atomic_run_dir` yields it: write
    into ``path``; set ``failed`` before the block ends when the run failed. A failed run then goes to
    ``TARGET.failed`` when ``target`` holds an earlier output (that stays as it was), else to ``target``
    (as `cisl logs` does); ``dest`` says where it went and ``kept`` names the earlier output it left."""

    def __init__(self, path: Path, target: Path) -> None:
        self.path, self.target = path, target
        self.failed = False
        self.dest: Path | None = None
        self.kept: Path | None = None


def failed_sibling(target: Path) -> Path:
    """Where a failed run's record goes when ``target`` holds an earlier, good one: ``TARGET.failed``."""
    target = Path(target)
    return target.with_name(target.name + ".failed")


@contextlib.contextmanager
def atomic_run_dir(target: Path, kind: str, entries: Callable[[str], bool],
                   legacy: Callable[[Path], bool] | None = None, option: str = "-o") -> Iterator[RunOutput]:
    """:func:`atomic_output_dir` for the record of a run that may fail (see :class:`RunOutput`): a failed
    run never replaces earlier logs. ``TARGET.failed`` is checked before the run (a folder of yours
    there is refused before any work, not after it) and replaced under the same rules."""
    target = output_target(target)
    check_output_dir(target, kind, entries, legacy, option)
    failed = failed_sibling(target)
    if os.path.lexists(failed):
        check_output_dir(failed, kind, entries, legacy, f"{option} (a failed run goes to {failed})")
    with output_lock(target):
        yield from _atomic_output_dir(target, kind, entries, legacy, option, run=True)


@contextlib.contextmanager
def atomic_output_dir(target: Path, kind: str, entries: Callable[[str], bool],
                      legacy: Callable[[Path], bool] | None = None, option: str = "-o") -> Iterator[Path]:
    """Yield a fresh temporary directory next to ``target``; on success it replaces ``target``.

    On any error the temporary directory is removed and ``target`` is left as it was, so users
    never see a half-written output. An existing ``target`` is only replaced under the rules of
    :func:`check_output_dir`, so a mistyped ``-o`` cannot wipe other data. The new folder carries
    OWNER_FILE. Missing folders above ``target`` are created (as ``mkdir -p`` would), and removed
    again if the run fails. ``option``: how the user named ``target``, for the error lines."""
    target = output_target(target)
    check_output_dir(target, kind, entries, legacy, option)
    with output_lock(target):
        yield from _atomic_output_dir(target, kind, entries, legacy, option)


def temp_sibling(target: Path) -> Path:
    """The name of a temporary sibling of ``target``, chosen *before* it is created: a signal that
    strikes while it is being created (SIGTERM raises in cisl's main thread at any bytecode, even
    inside tempfile.mkdtemp) cannot leave a file or folder whose name the cleanup does not know."""
    return target.parent / _leftover_name(target, "tmp")


def _atomic_output_dir(target: Path, kind: str, entries: Callable[[str], bool],
                       legacy: Callable[[Path], bool] | None, option: str, run: bool = False) -> Iterator:
    check_output_dir(target, kind, entries, legacy, option)  # again, under the lock
    tmp = temp_sibling(target)  # under the lock no such name exists (the lock removed killed runs' leftovers)
    made = missing_parents(target)
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()  # the umask's mode, as any folder the user makes
        except OSError as e:
            raise UserError(f"{target}: cannot create it ({e.strerror}); choose another output with {option}") from None
        (tmp / OWNER_FILE).write_text(f"cisl {kind}\n", encoding="ascii")
        out = RunOutput(tmp, target) if run else None
        yield out if run else tmp
        dest = target
        if out is not None and out.failed and target.is_dir() and any(target.iterdir()):
            dest = failed_sibling(target)  # the earlier logs stay where they are
            if os.path.lexists(dest):  # checked before the run; again, in case it changed meanwhile
                check_output_dir(dest, kind, entries, legacy, f"{option} (a failed run goes to {dest})")
            out.kept = target
        stamp_output(tmp)
        replace_dir(tmp, dest)
        if out is not None:
            out.dest = dest
    except BaseException:
        discard_output(tmp, made)
        raise


def discard_output(tmp: Path, made: list[Path]) -> None:
    """Remove an unfinished output ``tmp`` and the folders ``made`` above it for it (innermost first, each
    only if still empty: nothing else was put there meanwhile)."""
    shutil.rmtree(tmp, ignore_errors=True)
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


def missing_parents(target: Path) -> list[Path]:
    """The folders above ``target`` that do not exist yet, innermost first."""
    missing = []
    above = target.parent
    while not above.exists() and above != above.parent:
        missing.append(above)
        above = above.parent
    return missing


def sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomic(path: Path, text: str, note: bool = True) -> None:
    """Write a file whole or not at all (a temporary file next to it, then a rename). ``note`` False:
    the caller notes it (note_written) together with the other files written at the same time."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name for the output")
    tmp = temp_sibling(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
        except OSError as e:
            raise UserError(f"{path}: cannot write there ({e.strerror}); choose another output") from None
        with os.fdopen(fd, "w") as f:
            f.write(text)
        interrupts.check()  # stopped by the user: the old file stays
        os.replace(tmp, path)
        if note:
            note_written(path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output_file(path: Path, text: str, ours: Callable[[str], bool]) -> None:
    """Write a single-file output atomically; an existing file is replaced only if ``ours(its text)``
    says cisl wrote it (e.g. a JSON document with cisl's keys): never a user's file of that name."""
    check_output_file(path, ours)
    write_text_atomic(path, text)


def check_output_file(path: Path | None, ours: Callable[[str], bool], option: str = "-o") -> None:
    """Before any work: refuse an output file that exists and is not cisl's of this kind (see
    write_output_file), or that cannot be written where it is asked for (a read-only folder: the
    work would be lost at the end)."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name for the output")
    check_creatable(path, option)
    if path.exists():
        try:
            old = path.read_text(errors="replace")
        except OSError as e:
            raise UserError(f"{path}: cannot read it ({e.strerror}); choose another output file") from None
        if not ours(old):
            other = _cisl_format(old)
            if other:
                raise UserError(f"{path}: holds a {other} file, another kind of cisl output; choose another output "
                                f"file with {option}")
            raise UserError(f"{path}: exists and was not written by cisl; choose another output file or move it")


def _cisl_format(text: str) -> str | None:
    """The `format` a cisl JSON document names (cisl-profile, cisl-split, ...), else None."""
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    return fmt if isinstance(fmt, str) and fmt.startswith("cisl-") else None


def json_format(fmt: str) -> Callable[[str], bool]:
    """``ours`` for write_output_file: a JSON object whose `format` is ``fmt`` (a profile file is not a
    split file, though both carry boards and nodes)."""
    import json

    def check(text: str) -> bool:
        try:
            doc = json.loads(text)
        except ValueError:
            return False
        return isinstance(doc, dict) and doc.get("format") == fmt

    return check


def json_with(*keys: str) -> Callable[[str], bool]:
    """``ours`` for write_output_file: a JSON object holding all these keys."""
    import json

    def check(text: str) -> bool:
        try:
            doc = json.loads(text)
        except ValueError:
            return False
        return isinstance(doc, dict) and all(k in doc for k in keys)

    return check


def write_new_file(out: Path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``out`` (parents made); refuses an existing ``out`` unless ``force``."""
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out}: is a folder; give a file name for the output")
    if out.exists() and not force:
        raise UserError(f"{out}: exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
