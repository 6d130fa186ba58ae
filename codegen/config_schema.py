"""The one checker of cisl's TOML files (board.toml, testbed.toml, the training config).

A schema is a :class:`Table` of named fields, each a value :class:`Kind` or a nested Table; a Table
may also take any key (``values=``, e.g. [footprint.ops]). :func:`validate` walks a parsed document
against it, and every mistake is one UserError line naming the file, the table, the key and the fix:

    boards/x/board.toml: [build] unknown key 'cflag'; did you mean 'cflags'?
    boards/x/board.toml: [board] ram_bytes must be an integer, got '256K'

The pieces — :func:`read_toml`, :func:`check_keys` (unknown keys with the closest known one),
:func:`check_value` (a value of the wrong type), :func:`check_choice` (a name not in a list) — are also what the testbed and training configs
use for their own keys and values; the rules only a file's own code knows (ranges, one key
depending on another) stay there.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import UserError


@dataclass(frozen=True)
class Kind:
    """A kind of TOML value: its name in messages ("an integer") and the test a value must pass."""

    name: str
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        return self.test(value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float)


INT = Kind("an integer", _is_int)
NUMBER = Kind("a number", _is_number)
STR = Kind("a string", lambda v: isinstance(v, str))
BOOL = Kind("true or false", lambda v: isinstance(v, bool))
STR_LIST = Kind("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
NUMBER_LIST = Kind("a list of numbers", lambda v: isinstance(v, list) and all(_is_number(x) for x in v))


@dataclass(frozen=True)
class Table:
    """A TOML table: known fields (a Kind, a nested Table or an :class:`Either`), which of them are
    required, and for an open table the kind of every other key (``values``)."""

    fields: dict[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    values: Any = None  # None: only the named fields are allowed
    name: str = "a table"


@dataclass(frozen=True)
class Either:
    """One of several shapes (e.g. a number, or an inline table { central, low, high })."""

    options: tuple[Any, ...]
    name: str


def suggest(name: str, known: list[str] | tuple[str, ...], what: str = "keys", cutoff: float = 0.6) -> str:
    """'did you mean ...?' with the closest known name, else the list of the known ones."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=cutoff)
    return f"did you mean '{close[0]}'?" if close else f"known {what}: {', '.join(known)}"


def check_keys(where: str, table: dict, known: list[str] | tuple[str, ...], cutoff: float = 0.6) -> None:
    """Every key of ``table`` is one of ``known``, else '<where>: unknown key 'k'; did you mean ...'."""
    for key in table:
        if key not in known:
            raise UserError(f"{where}: unknown key '{key}'; {suggest(key, known, cutoff=cutoff)}")


def check_value(where: str, key: str, value: Any, kind: Kind) -> None:
    """``value`` is of ``kind`` (a finite number for NUMBER), else '<where> key must be ..., got ...'."""
    if not kind(value):
        raise UserError(f"{where} {key} must be {kind.name}, got {value!r}")
    if kind is NUMBER and not math.isfinite(float(value)):
        raise UserError(f"{where} {key} must be a finite number, got {value!r}")


def check_choice(where: str, key: str, value: Any, choices: list[str] | tuple[str, ...]) -> None:
    """``value`` is one of ``choices``, else '<where> key 'v' is unknown; did you mean/choose one of ...'."""
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        raise UserError(f"{where} {key} '{value}' is unknown; "
                        + (f"did you mean '{close[0]}'?" if close else f"choose one of {', '.join(choices)}"))


def _fits(value: Any, shape: Any) -> bool:
    if isinstance(shape, Kind):
        return shape(value)
    if isinstance(shape, Table):
        return isinstance(value, dict)
    return any(_fits(value, s) for s in shape.options)


def validate(where: str, doc: dict[str, Any], schema: Table, path: str = "") -> None:
    """Check ``doc`` against ``schema``; the first mistake is a one-line UserError.

    ``where`` names the file; ``path`` is the dotted name of the table being checked ("" at the top).
    """
    here = f"{where}: [{path}]" if path else where
    if schema.values is None:  # a typo first: it is also why a required key seems missing
        check_keys(here, doc, list(schema.fields))
    missing = [k for k in schema.required if k not in doc]
    if missing:
        key = missing[0]
        shape = schema.fields[key]
        what = f"a [{path + '.' if path else ''}{key}] table" if isinstance(shape, Table) else f"{key} ({shape.name})"
        raise UserError(f"{here}: no {key}; add {what}")
    for key, value in doc.items():
        shape = schema.fields.get(key, schema.values)
        sub = f"{path}.{key}" if path else key
        if isinstance(shape, Either):
            chosen = next((s for s in shape.options if _fits(value, s)), None)
            if chosen is None:
                raise UserError(f"{here} {key} must be {shape.name}, got {value!r}")
            shape = chosen
        if isinstance(shape, Table):
            if not isinstance(value, dict):
                raise UserError(f"{here} {key} must be a table ([{sub}] or {key} = {{ ... }}), got {value!r}")
            validate(where, value, shape, sub)
        else:
            check_value(here, key, value, shape)


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Parse a TOML file; not found, not TOML or not text are one line each (``what``: "a board file")."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: not found; {what} is needed here") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({e}); fix the place it names") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file; {what} is TOML text") from None
