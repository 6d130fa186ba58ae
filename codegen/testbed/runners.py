"""Flash runners: one small class per tool, with its capabilities (like Zephyr's RunnerCaps).

A runner programs, verifies and resets one node, always choosing the board by the serial number of
its debug probe. Tool failures become a ``FlashError`` whose message says the next step (install
the tool, which probes are attached, ``--recover`` for a protected device). Runners for virtual
boards (``sim``; a QEMU runner fits the same interface) set ``probe=False`` and ``batch_reset=True``:
their nodes start together, on one reset of the whole testbed.

External programs run through ``Runner._call`` (each in its own process group, so a tool that hangs
or is interrupted is stopped with every helper process it started) and pyocd through its Python API,
so tests can replace both and check the exact command lines and API calls. ``Runner.cancel`` (Ctrl-C,
SIGTERM) stops the tools running and starts no more.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from ..errors import UserError
from ..toolrun import log_command
from .config import NodeEntry, Testbed
from .probes import Probe

Say = Callable[[NodeEntry, str], None]

INSTALL_HINTS = {
    "nrfutil": "install nRF Util from Nordic (https://www.nordicsemi.com/Products/Development-tools/nRF-Util), "
               "then `nrfutil install device`",
    "nrfjprog": "install the nRF Command Line Tools (legacy; or use runner = \"nrfutil\")",
    "pyocd": "pip install pyocd",
}


class MissingProgram(UserError):
    def __init__(self, program: str, runner: str):
        super().__init__(f"runner {runner}: `{program}` not found on PATH; {INSTALL_HINTS.get(program, 'install it')}")
        self.program = program


class FlashError(Exception):
    """One node's flash (or reset) failed; the message is one line with the next step."""

    def __init__(self, message: str, kind: str = "failed"):
        super().__init__(message)
        self.kind = kind  # failed, probe, protected, verify, timeout, tool, interrupted


def interrupted_error(step: str) -> FlashError:
    return FlashError(f"{step}: interrupted (Ctrl-C or SIGTERM); the board may hold part of an image: flash it "
                      "again", "interrupted")


@dataclass(frozen=True)
class RunnerCaps:
    flash: bool = True
    verify: bool = True  # reads the image back after programming
    reset: bool = True
    recover: bool = False  # can unlock a protected (APPROTECT) device by erasing it
    probe: bool = True  # boards are chosen by the serial number of a debug probe
    batch_reset: bool = False  # all nodes start on one reset of the whole testbed (virtual testbeds)
    boards: frozenset[str] | None = None  # the boards it runs; None: any physical board
    image: str = "hex"  # what it programs: "hex" or "elf"


class Runner:
    name: ClassVar[str] = ""
    programs: ClassVar[tuple[str, ...]] = ()

    KILL_AFTER_S = 2.0  # after cancel(): SIGTERM first (a tool may release its probe), then SIGKILL

    def __init__(self, testbed: Testbed, say: Say | None = None, timeout: float = 180.0):
        self.testbed = testbed
        self.say: Say = say or (lambda node, msg: None)
        self.timeout = timeout
        self.cancelled = threading.Event()
        self._procs: set[subprocess.Popen] = set()  # the tools running now (one per node at most)
        # node -> the inferences before which the host writes it a line (`cisl logs` host commands); boards
        # take what has arrived, virtual nodes, faster than any host, wait for it (SimRunner.reset)
        self.host_lines: dict[int, list[int]] = {}
        self._procs_lock = threading.Lock()

    def cancel(self) -> None:
        """Ctrl-C/SIGTERM: stop every tool this runner started (their process groups: a terminal's Ctrl-C
        no longer reaches them) and start no more. Without it cisl waited for each tool's --timeout."""
        with self._procs_lock:
            self.cancelled.set()
            procs = list(self._procs)
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        if procs:
            t = threading.Timer(self.KILL_AFTER_S, self._kill_remaining)
            t.daemon = True
            t.start()

    def _kill_remaining(self) -> None:
        with self._procs_lock:  # only groups still registered: a finished one's number may be reused
            for p in self._procs:
                _signal_group(p, signal.SIGKILL)

    @classmethod
    def capabilities(cls) -> RunnerCaps:
        return RunnerCaps()

    def require(self, program: str) -> str:
        """The program's path, or MissingProgram with an install hint."""
        path = shutil.which(program)
        if path is None:
            raise MissingProgram(program, self.name)
        return path

    def check_tools(self) -> None:
        for p in self.programs:
            self.require(p)

    def list_probes(self) -> list[Probe]:
        return []

    def prepare(self, nodes: list[NodeEntry], build) -> None:
        """Once before flashing (the virtual testbed starts its supervisor here)."""

    def flash(self, node: NodeEntry, image: Path, serial: str | None, verify: bool, recover: bool) -> None:
        raise NotImplementedError

    def reset_one(self, node: NodeEntry, serial: str | None) -> None:
        raise NotImplementedError

    def reset(self, nodes: list[NodeEntry], serials: dict[int, str | None]) -> dict[int, FlashError | None]:
        """Reset the nodes (in parallel); per node None or the error."""
        def one(n: NodeEntry) -> FlashError | None:
            if self.cancelled.is_set():
                return interrupted_error("reset")
            try:
                self.reset_one(n, serials.get(n.id))
                return None
            except FlashError as e:
                return e
            except Exception as e:  # anything else is still this node's reset failing, not the others'
                return FlashError(f"reset failed ({type(e).__name__}: {_short(str(e))})")

        if not nodes:
            return {}
        pool = ThreadPoolExecutor(max_workers=min(16, len(nodes)))
        try:
            return dict(zip([n.id for n in nodes], pool.map(one, nodes)))
        except KeyboardInterrupt:
            self.cancel()  # before the pool is joined: its threads wait for the tools
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def run_status(self) -> dict | None:
        """Virtual testbeds: whether the run the last reset started has ended ({"finished": bool,
        "problems": [...]}); None for boards (nothing to ask)."""
        return None

    # -- helpers for command-line tools
    def _call(self, cmd: list[str]) -> subprocess.CompletedProcess:
        """Run cmd in its own process group, output as text. On --timeout the whole group is killed (a tool
        such as nrfutil runs its work in a child process, which kept the probe busy after its launcher
        was killed) and subprocess.TimeoutExpired raised."""
        with self._procs_lock:
            if self.cancelled.is_set():
                raise _Cancelled
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            self._procs.add(p)
        with p:
            try:
                out, err = p.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
                raise
            finally:
                with self._procs_lock:
                    self._procs.discard(p)
        if self.cancelled.is_set():
            raise _Cancelled
        # errors="replace": a tool's output is not always UTF-8 (J-Link DLL messages, a device name in
        # Latin-1); undecodable bytes must not turn a flash that worked into a UnicodeDecodeError
        return subprocess.CompletedProcess(cmd, p.returncode, out.decode(errors="replace"),
                                           err.decode(errors="replace"))

    def _run(self, node: NodeEntry, step: str, cmd: list[str]) -> subprocess.CompletedProcess:
        self.say(node, step)
        log_command(cmd)
        try:
            p = self._call(cmd)
        except _Cancelled:
            raise interrupted_error(step) from None
        except FileNotFoundError:
            raise FlashError(f"`{cmd[0]}` not found; {INSTALL_HINTS.get(cmd[0], 'install it')}", "tool") from None
        except OSError as e:  # e.g. not executable: this node's failure, not the end of the whole flash
            raise FlashError(f"{step}: cannot run `{cmd[0]}` ({e.strerror or e}); check that it is the tool's "
                             "executable", "tool") from None
        except subprocess.TimeoutExpired:
            raise FlashError(f"{step}: `{cmd[0]}` did not finish within {self.timeout:.0f} s (is the probe "
                             "responding? replug it, or raise --timeout)", "timeout") from None
        if p.returncode != 0:
            raise self.translate(node, step, cmd, p)
        return p

    def translate(self, node: NodeEntry, step: str, cmd: list[str], p: subprocess.CompletedProcess) -> FlashError:
        if p.returncode < 0:  # it crashed, or something killed it: not the device's answer
            try:
                sig = signal.Signals(-p.returncode).name
            except ValueError:
                sig = str(-p.returncode)
            return FlashError(f"{step} failed: `{cmd[0]}` was killed by signal {sig} ({_tail(p)}); run `cisl flash` "
                              "again, and check the tool on its own if it recurs", "tool")
        return FlashError(f"{step} failed: `{cmd[0]}` exit code {p.returncode}: {_tail(p)}")


TAIL_CHARS = 300  # of a tool's last output line in an error: a tool that floods (MBs on one line) stays one line


class _Cancelled(Exception):
    """The runner was cancelled (Ctrl-C) before or while its tool ran."""


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # the group outlives its leader while a helper of the tool runs
    except (ProcessLookupError, PermissionError):
        pass


def _tail(p: subprocess.CompletedProcess) -> str:
    """The line of a failed tool's output that says what went wrong: the last line that says error, its error
    stream's before stdout's (a warning or a log line after it on stderr is no reason); else its error
    stream's last line (nrfjprog and nRF Util print progress on stdout and the error on stderr: "Parsing
    image file." is no reason), else stdout's last line."""
    err = [ln.strip() for ln in (p.stderr or "").splitlines() if ln.strip()]
    out = [ln.strip() for ln in (p.stdout or "").splitlines() if ln.strip()]
    said = [[ln for ln in lines if "error" in ln.lower()] for lines in (err, out)]
    lines = said[0] or said[1] or err or out
    if not lines:
        return "no output"
    return _short(lines[-1], "; `cisl -v` shows the command to run by hand")


def _short(text: str, hint: str = "") -> str:
    """One line of at most TAIL_CHARS (and the length it had) for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= TAIL_CHARS else f"{text[:TAIL_CHARS]}... ({len(text)} characters{hint})"


AFTER_RECOVER = " after recover"  # the program step's name when --recover ran before it


def _protected(serial: str | None, step: str = "program") -> FlashError:
    if step == "recover" or step.endswith(AFTER_RECOVER):  # "run again with --recover" would repeat what failed
        return FlashError(f"the device of probe {serial} is still protected (APPROTECT) after the recover that "
                          "--recover ran, so running it again will not help: a tool older than the part may not "
                          "unlock it (update nRF Util / the nRF Command Line Tools / pyocd), or recover it by hand "
                          "with the commands in docs/design/approtect.md", "protected")
    if step == "reset":  # programmed (after a recover), then it locked again on its reset
        return FlashError(f"reset: the device of probe {serial} is protected (APPROTECT) again; an nRF52840 of "
                          "build code Fxx relocks at every reset unless its image opens the port (board.toml "
                          "[security] debug_port = \"open\", docs/design/approtect.md): build with it and run "
                          "`cisl flash` with --recover", "protected")
    return FlashError(f"the device of probe {serial} is protected (APPROTECT): its flash cannot be read or "
                      "written; run `cisl flash` again with --recover (erases the whole chip, then programs it)",
                      "protected")


class NrfUtilRunner(Runner):
    """``nrfutil device`` (nRF Util): program + verify, reset, recover, all with --serial-number."""

    name = "nrfutil"
    programs = ("nrfutil",)

    @classmethod
    def capabilities(cls) -> RunnerCaps:
        return RunnerCaps(recover=True)

    def list_probes(self) -> list[Probe]:
        from .probes import NrfUtilWithoutDevice, nrfutil_probes

        try:
            return nrfutil_probes(self.timeout)
        except NrfUtilWithoutDevice as e:  # not a probe's fault: one line before any node runs (exit code 2)
            raise UserError(f"runner nrfutil: {e}") from None

    def flash(self, node, image, serial, verify, recover):
        if recover:
            self._run(node, "recover", ["nrfutil", "device", "recover", "--serial-number", serial])
        options = "chip_erase_mode=ERASE_RANGES_TOUCHED_BY_FIRMWARE,verify=" + ("VERIFY_READ" if verify
                                                                                 else "VERIFY_NONE")
        self._run(node, "program" + (" + verify" if verify else "") + (AFTER_RECOVER if recover else ""),
                  ["nrfutil", "device", "program", "--firmware", str(image), "--serial-number", serial,
                   "--options", options])

    def reset_one(self, node, serial):
        self._run(node, "reset", ["nrfutil", "device", "reset", "--serial-number", serial])

    def translate(self, node, step, cmd, p):
        from .probes import nrfutil_device_missing_error, nrfutil_without_device

        text = ((p.stderr or "") + (p.stdout or "")).lower()
        if nrfutil_without_device(text):  # its "Subcommand nrfutil-device not found" is no missing probe
            return FlashError(f"{step}: {nrfutil_device_missing_error(p.stderr or p.stdout)}", "tool")
        if "protect" in text:
            return _protected(serial_of(cmd), step)
        if "verif" in text and step.startswith("program"):
            return FlashError(f"verify failed on probe {serial_of(cmd)}: {_tail(p)}; run again, or with --recover "
                              "if the flash holds protected data", "verify")
        if "not found" in text or "no devices" in text or "no device" in text:
            return FlashError(f"nrfutil did not find probe {serial_of(cmd)}: {_tail(p)}", "probe")
        return super().translate(node, step, cmd, p)


class NrfJprogRunner(Runner):
    """``nrfjprog`` (legacy nRF Command Line Tools): --program --sectorerase --verify, --reset, --recover."""

    name = "nrfjprog"
    programs = ("nrfjprog",)
    EXIT_PROTECTED = 16  # NotAvailableBecauseProtection
    EXIT_VERIFY = 55

    @classmethod
    def capabilities(cls) -> RunnerCaps:
        return RunnerCaps(recover=True)

    @staticmethod
    def family(node: NodeEntry) -> str:
        return node.target[:5].upper() if node.target.lower().startswith("nrf") else "NRF52"

    def list_probes(self) -> list[Probe]:
        from .probes import nrfjprog_probes

        return nrfjprog_probes(self.timeout)

    def flash(self, node, image, serial, verify, recover):
        f = ["-f", self.family(node)]
        if recover:
            self._run(node, "recover", ["nrfjprog", *f, "--recover", "-s", serial])
        self._run(node, "program" + (" + verify" if verify else "") + (AFTER_RECOVER if recover else ""),
                  ["nrfjprog", *f, "--program", str(image), "--sectorerase", *(["--verify"] if verify else []),
                   "-s", serial])

    def reset_one(self, node, serial):
        self._run(node, "reset", ["nrfjprog", "-f", self.family(node), "--reset", "-s", serial])

    def translate(self, node, step, cmd, p):
        if p.returncode == self.EXIT_PROTECTED:
            return _protected(serial_of(cmd), step)
        if p.returncode == self.EXIT_VERIFY:
            return FlashError(f"verify failed on probe {serial_of(cmd)} (nrfjprog exit code 55); run again, or "
                              "with --recover", "verify")
        text = ((p.stderr or "") + (p.stdout or "")).lower()
        if "serial number" in text and ("not" in text or "no " in text):
            return FlashError(f"nrfjprog did not find probe {serial_of(cmd)}: {_tail(p)}", "probe")
        return super().translate(node, step, cmd, p)


def serial_of(cmd: list[str]) -> str:
    for flag in ("--serial-number", "-s", "--snr"):
        if flag in cmd:
            return cmd[cmd.index(flag) + 1]
    return "?"


class PyOCDRunner(Runner):
    """pyocd through its Python API: ``ConnectHelper.session_with_chosen_probe(unique_id=...)``,
    ``FileProgrammer``, a read-back verify of every loaded segment, and ``target.reset()``."""

    name = "pyocd"

    @classmethod
    def capabilities(cls) -> RunnerCaps:
        return RunnerCaps(recover=True, image="elf")

    def check_tools(self) -> None:
        try:
            import pyocd  # noqa: F401
        except ImportError:
            raise MissingProgram("pyocd", self.name) from None

    def list_probes(self) -> list[Probe]:
        from .probes import pyocd_probes

        return pyocd_probes()

    def _session(self, node: NodeEntry, serial: str, recover: bool = False):
        from pyocd.core.helpers import ConnectHelper

        session = ConnectHelper.session_with_chosen_probe(
            blocking=False, unique_id=serial,
            options={"target_override": node.target, "auto_unlock": recover, "hide_programming_progress": True})
        if session is None:
            raise FlashError(f"pyocd found no probe {serial} (or several whose ids contain it)", "probe")
        return session

    POLL_S = 0.1  # how often a wait for pyocd looks at Ctrl-C

    def _bounded(self, where: list[str], work: Callable[[], None]) -> None:
        """Run ``work`` (pyocd calls; ``where[0]`` names its current step) in a thread of its own and wait
        for it at most --timeout, and only until Ctrl-C. pyocd's calls cannot be stopped: a probe that no
        longer answers (a wedged USB link) blocked `cisl flash` for good. A call left behind runs on in
        its daemon thread until cisl exits; the node is reported failed and may hold part of an image."""
        if self.cancelled.is_set():
            raise interrupted_error(where[0])
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                work()
                outcome.append(None)
            except BaseException as e:  # handed to the waiting thread, which raises it
                outcome.append(e)

        t = threading.Thread(target=run, name="pyocd", daemon=True)
        t.start()
        deadline = time.monotonic() + self.timeout
        while t.is_alive():
            if self.cancelled.is_set():
                raise interrupted_error(where[0])
            left = deadline - time.monotonic()
            if left <= 0:
                raise FlashError(f"{where[0]}: pyocd did not finish within {self.timeout:.0f} s (is the probe "
                                 "responding? replug it, or raise --timeout)", "timeout")
            t.join(min(self.POLL_S, left))
        if outcome and outcome[0] is not None:
            raise outcome[0]

    def flash(self, node, image, serial, verify, recover):
        where = ["connect"]
        self._bounded(where, lambda: self._flash(node, image, serial, verify, recover, where))

    def _flash(self, node, image, serial, verify, recover, where: list[str]) -> None:
        from pyocd.flash.file_programmer import FileProgrammer

        self.say(node, "connect")
        step = "connect"
        locked = _LockWarnings()
        try:
            with locked, self._session(node, serial, recover) as session:
                target = session.target
                if not recover and (locked.seen() or (getattr(target, "is_locked", None) is not None
                                                      and target.is_locked())):
                    raise _protected(serial)
                step = where[0] = "program"
                self.say(node, "program")
                shown = [0]

                def progress(fraction: float) -> None:
                    pct = int(100 * fraction)
                    if pct >= shown[0] + 25 or (pct == 100 and shown[0] < 100):
                        shown[0] = pct
                        self.say(node, f"program {pct} %")

                FileProgrammer(session, progress=progress, chip_erase="chip" if recover else "sector").program(
                    str(image))
                if verify:
                    step = where[0] = "verify"
                    self.say(node, "verify")
                    for addr, data in image_segments(image):
                        got = bytes(target.read_memory_block8(addr, len(data)))
                        if got != data:
                            bad = next(i for i in range(len(data)) if got[i] != data[i])
                            raise FlashError(f"verify failed at 0x{addr + bad:08x} (read 0x{got[bad]:02x}, wrote "
                                             f"0x{data[bad]:02x}); run again, or with --recover", "verify")
        except FlashError:
            raise
        except Exception as e:  # pyocd raises many kinds (ProbeError, TransferFaultError, TargetError, ...)
            msg = _short(str(e)) or type(e).__name__  # pyocd's text may be long, or hold line breaks
            if (not recover and locked.seen()) or any(w in str(e).lower() for w in ("lock", "approtect", "protect")):
                raise _protected(serial, step + (AFTER_RECOVER if recover else "")) from None
            raise FlashError(f"{step} failed (pyocd {type(e).__name__}: {msg})") from None

    def reset_one(self, node, serial):
        self._bounded(["reset"], lambda: self._reset_one(node, serial))

    def _reset_one(self, node, serial) -> None:
        self.say(node, "reset")
        locked = _LockWarnings()
        try:
            with locked, self._session(node, serial) as session:
                if locked.seen():
                    raise _protected(serial, "reset")
                session.target.reset()
        except FlashError:
            raise
        except Exception as e:
            if locked.seen():
                raise _protected(serial, "reset") from None
            raise FlashError(f"reset failed (pyocd {type(e).__name__}: {_short(str(e))})") from None


class _LockWarnings(logging.Handler):
    """While active, notes pyocd's warning that an nRF52 is locked and will not be unlocked. pyocd
    (0.46, target_nRF52.check_flash_security) only logs it and carries on; the session then fails
    later with an unrelated message ("No cores were discovered!"), so the warning is the sign that
    the device is protected. Only records of the thread that entered count (nodes flash in parallel)."""

    LOGGER = "pyocd"

    def __init__(self):
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread and "APPROTECT enabled: not automatically unlocking" in record.getMessage():
            self.count += 1

    def seen(self) -> bool:
        return self.count > 0

    def __enter__(self):
        self.thread = threading.get_ident()
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger(self.LOGGER).removeHandler(self)
        return False


def image_segments(path: Path) -> list[tuple[int, bytes]]:
    """(address, bytes) of every loaded part of an ELF (PT_LOAD segments with file data, at their
    physical address) or Intel HEX image: what ends up in flash."""
    path = Path(path)
    if path.suffix == ".hex":
        from intelhex import IntelHex

        ih = IntelHex(str(path))
        return [(lo, ih.tobinstr(start=lo, end=hi - 1)) for lo, hi in ih.segments()]
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        return [(seg["p_paddr"], seg.data()) for seg in elf.iter_segments()
                if seg["p_type"] == "PT_LOAD" and seg["p_filesz"] > 0]


def elf_to_hex(elf: Path, out: Path) -> Path:
    """Intel HEX of an ELF's loaded segments (what nrfutil/nrfjprog program)."""
    from intelhex import IntelHex

    ih = IntelHex()
    for addr, data in image_segments(elf):
        ih.puts(addr, data)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    ih.write_hex_file(str(tmp))
    tmp.replace(out)
    return out


class SimRunner(Runner):
    """The virtual testbed: "flashing" copies a node image into the testbed's state folder (verified by
    SHA-256); a reset (re)starts every node process together, with the medium, under the supervisor."""

    name = "sim"

    @classmethod
    def capabilities(cls) -> RunnerCaps:
        return RunnerCaps(probe=False, batch_reset=True, boards=frozenset({"sim", "qemu-m4"}), image="elf")

    def prepare(self, nodes, build) -> None:
        from ..vtestbed import bed

        bed.prepare(self.testbed, nodes, build)

    def flash(self, node, image, serial, verify, recover):
        from ..vtestbed import bed

        from ..timing.boardtime import TABLE, check_table, place_table

        check_table(Path(image).parent / TABLE, Path(image))  # refused before the copy: the node keeps its old image
        self.say(node, "copy image")
        dest = bed.image_path(self.testbed, node.id)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(image, tmp)
        tmp.chmod(0o755)
        tmp.replace(dest)
        # the cycle model's board time travels with the image (or a stale table there goes)
        place_table(image, dest)
        if verify:
            self.say(node, "verify")
            if _sha256(dest) != _sha256(image):
                raise FlashError(f"verify failed: {dest} differs from {image}", "verify")

    def reset(self, nodes, serials):
        from ..vtestbed import bed

        try:
            bed.request(self.testbed, {"cmd": "reset", "host_lines": {str(k): v for k, v in self.host_lines.items() if v}})
        except UserError as e:
            err = FlashError(f"reset failed: {e}")
            return {n.id: err for n in nodes}
        return {n.id: None for n in nodes}

    def reset_one(self, node, serial):
        raise FlashError("sim nodes reset together; reset the testbed", "failed")

    def run_status(self) -> dict | None:
        from ..vtestbed import bed

        try:
            st = bed.request(self.testbed, {"cmd": "status"}, timeout=5.0)
        except UserError:  # it answered the reset, so it was running: it died during the run
            return {"finished": True, "problems": ["the virtual testbed's supervisor died during the run (its nodes "
                                                   "and medium are gone); start it again with `cisl flash`"]}
        return {"finished": st.get("state") in ("finished", "failed", "halted", "idle"),
                "problems": st.get("problems", [])}


def _sha256(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


RUNNERS: dict[str, type[Runner]] = {r.name: r for r in (PyOCDRunner, NrfUtilRunner, NrfJprogRunner, SimRunner)}
