"""Ctrl-C, SIGTERM and SIGHUP, delivered where cisl can act on them.

Python raises KeyboardInterrupt wherever the main thread happens to be when the signal comes. Inside
a callback from C (the cycle model's unicorn hooks) or a weakref / garbage-collector callback it only
prints "Exception ignored ..." and carries on, so a command could finish, replace its output and
exit 0 after the user pressed Ctrl-C. So the CLI also *records* every signal: an output is never
committed once one came (:func:`check`, called by fsutil before every swap into place), the command
then ends "interrupted" with exit code 130, and the few steps that must not be cut apart (the renames
that swap an output folder, an emulator run) take their signal when they are done (:func:`deferred`).

Without :func:`install` (cisl used as a library, the tests) Python's own handlers stay: nothing changes.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable

_pending: list[int] = []  # signals received since install(), even those Python swallowed
_deferred = 0  # depth of deferred() blocks
_on_signal: list[Callable[[], None]] = []  # what a deferred block does at once when a signal comes
_hook_installed = False


_finishing = False  # the command's outcome is decided: a signal now is recorded, not raised


def _handler(signum: int, frame) -> None:
    _pending.append(signum)
    if _finishing:
        return
    if _deferred:
        for stop in list(_on_signal):
            stop()
        return
    raise KeyboardInterrupt


def _quiet_about_interrupts(previous: Callable) -> Callable:
    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            return  # recorded by _handler: reported once, as "interrupted", not as a traceback
        previous(unraisable)
    return hook


def install() -> None:
    """The CLI's entry point: SIGINT, SIGTERM and SIGHUP are recorded and raised as KeyboardInterrupt
    (SIGHUP: the terminal closed or the ssh session dropped; Python's default would end cisl at once,
    leaving flash tools running in their own sessions and temporary folders behind)."""
    global _hook_installed, _finishing
    _pending.clear()
    _finishing = False
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (cisl run from a thread keeps Python's)
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _handler)
    if not _hook_installed:
        sys.unraisablehook = _quiet_about_interrupts(sys.unraisablehook)
        _hook_installed = True


def finishing() -> None:
    """The command is reporting how it ended (an error line, "interrupted") and exits next: a signal that
    comes now must not raise inside that report, which printed a traceback instead of the line."""
    global _finishing
    _finishing = True


def interrupted() -> bool:
    """Whether a signal came since install(), even one Python swallowed in a callback."""
    return bool(_pending)


def check() -> None:
    """Raise KeyboardInterrupt if a signal came: nothing is committed after the user stopped cisl."""
    if _pending:
        raise KeyboardInterrupt


class deferred:
    """Run the block whole: a signal that comes inside is recorded (and ``on_signal`` called at once,
    e.g. to stop an emulator at its next instruction) and raised as KeyboardInterrupt when it ends.
    (A class, not a generator: the emulated SoC enters one per node and quantum, ~10^5 a second.)"""

    def __init__(self, on_signal: Callable[[], None] | None = None):
        self.on_signal = on_signal

    def __enter__(self) -> None:
        global _deferred
        _deferred += 1
        if self.on_signal is not None:
            _on_signal.append(self.on_signal)

    def __exit__(self, exc_type, exc, tb) -> bool:
        global _deferred
        _deferred -= 1
        if self.on_signal is not None:
            _on_signal.remove(self.on_signal)
        if exc_type is None and not _deferred:
            check()
        return False


def worker_defaults() -> None:
    """The initializer of cisl's worker processes: Ctrl-C and SIGTERM end a worker at once and silently
    (its parent says "interrupted"). Forked workers would inherit the CLI's handler and print a
    traceback from wherever the signal found them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
