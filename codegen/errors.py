"""User-facing errors: one clear line, exit code 2, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input (file, option, config). Printed as one line; exit code 2.

    The message should say what is wrong, where (file, field) and how to fix it.
    """

    exit_code = 2


class CheckFailed(Exception):
    """A verification the user asked for did not pass (e.g. not bit-exact). Exit code 1."""

    exit_code = 1
