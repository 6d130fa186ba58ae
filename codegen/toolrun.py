"""Every external command cisl runs, as a line the user can rerun: `cisl -v` shows them.

Call :func:`log_command` next to each ``subprocess`` call (compiler, linker, objcopy, QEMU, flash
tools, the virtual testbed's processes). At INFO level it logs ``$ (cd DIR && CMD)`` with
``shlex.join``: DIR is the folder the command runs in (the current one unless it is given), so the
part after ``$ `` can be pasted into a shell as it is, from any folder. Nothing is printed unless :func:`enable` (the ``-v`` option) turned it on; child
processes of cisl (the virtual testbed's supervisor) turn it on from the environment with
:func:`enable_from_env`.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence

LOGGER = "codegen.toolrun"
ENV = "CISL_VERBOSE"

log = logging.getLogger(LOGGER)


def command_line(cmd: Sequence[str | os.PathLike], cwd: str | os.PathLike | None = None) -> str:
    """The shell line that reruns ``cmd`` in ``cwd``."""
    line = shlex.join(str(a) for a in cmd)
    return f"(cd {shlex.quote(str(cwd))} && {line})" if cwd is not None else line


def log_command(cmd: Sequence[str | os.PathLike], cwd: str | os.PathLike | None = None) -> None:
    """Log ``cmd`` (about to run in ``cwd``, default: the current folder) at INFO."""
    if log.isEnabledFor(logging.INFO):
        log.info("$ %s", command_line(cmd, os.getcwd() if cwd is None else cwd))


def run_in_group(cmd: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` (output as text, undecodable bytes replaced) in its own process group, and kill the
    whole group on a timeout or Ctrl-C: a tool such as nrfutil does its work in a child process, which
    ``subprocess.run``'s timeout leaves running (holding the J-Link). Raises subprocess.TimeoutExpired."""
    p = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    with p:
        try:
            out, err = p.communicate(timeout=timeout)
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
            raise
    return subprocess.CompletedProcess(list(cmd), p.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))


class _StderrHandler(logging.Handler):
    """Writes to whatever sys.stderr is when a record comes (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            stream = sys.stderr
            stream.write(msg + "\n")
            stream.flush()
        except Exception:  # a closed stream must not end the command
            self.handleError(record)


def enable(verbose: bool = True) -> None:
    """Turn INFO logging of cisl (package ``codegen``) on stderr on, once; child processes inherit it."""
    if not verbose:
        return
    root = logging.getLogger("codegen")
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(h)
    root.setLevel(logging.INFO)
    os.environ[ENV] = "1"


def enable_from_env() -> None:
    """In a process cisl started: verbose if the cisl that started it was (``CISL_VERBOSE=1``)."""
    if os.environ.get(ENV) == "1":
        enable()


__all__ = ["command_line", "log_command", "enable", "enable_from_env"]
