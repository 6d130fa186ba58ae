"""Load an ETT-format CSV: a `date` column (ignored) and numeric channel columns.

Other CSVs name their time column otherwise (`time`, `timestamp`, `datetime`); a numeric one (seconds,
a sample counter) must not become a channel the model forecasts, so every such name is the time column.
An unnamed column (pandas writes its row index so) is no channel either. A file without a header line,
or with two columns of one name, is refused.
"""

from __future__ import annotations

import csv
import difflib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from codegen.errors import UserError

TIME_COLUMNS = ("date", "time", "timestamp", "datetime")  # case-insensitive; never a channel


def _to_float(values: list[str]) -> np.ndarray | None:
    """The column as float64 (empty fields become NaN), or None if some field is not a number."""
    try:
        return np.array([float(v) if v.strip() else np.nan for v in values], dtype=np.float64)
    except ValueError:
        return None


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def check_time_order(path: Path, name: str, values: Sequence[str]) -> None:
    """Rows out of time order (a file sorted by another column, shuffled, two files joined the wrong way)
    train without a word into a model of nothing: the windows assume consecutive rows. Times it cannot
    read as ISO dates or numbers are not checked; equal times (a clock change) are allowed."""
    import warnings

    try:
        with warnings.catch_warnings():  # numpy warns about time zones in the strings; they only shift all
            warnings.simplefilter("ignore")
            stamps = np.array([v.strip() for v in values], dtype="datetime64[s]")
        if np.isnat(stamps).any():
            return
        t = stamps.astype(np.int64)
    except ValueError:
        try:
            t = np.array([float(v) for v in values])
        except ValueError:
            return
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise UserError(f"{path}: the {name!r} column goes back in time at data row {i + 1} ({values[i].strip()!r} "
                        f"after {values[i - 1].strip()!r}; {back.size} such rows); sort the rows by time")


# A column with at least this share of its non-empty cells numbers is a number column with broken cells
# (refused), below it a text column (skipped, and named: `skipped`). Names, ids and labels hardly ever read
# as numbers, while a channel logged as '-' for a stretch has numbers in the rest: 10 % is a stretch of 9 of
# 10 rows. Either way nothing is dropped without a word.
NUMERIC_SHARE = 0.1


def load_csv(path: str | Path, columns: Sequence[str] | None = None,
             skipped: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Read the chosen numeric columns (all numeric columns if ``columns`` is empty); ``skipped`` gets
    the text columns left out of "all numeric columns", each with the share of its cells that are numbers.

    Returns a float64 array [rows, channels] (every value within float32's range: the model is
    float32) and the column names, in the order asked for. float64 until the scaler: a column of 1e8
    plus a wave of amplitude 10 kept 3 distinct values in float32, and its std came out 3 % low.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file; pass an ETT-format CSV (a date column and numeric columns)")
    if path.is_dir():
        raise UserError(f"{path} is a directory; pass a CSV file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: Excel's "CSV UTF-8" starts with a BOM
            reader = csv.reader(f)
            header = next(reader, None)
            rows = [r for r in reader if r]
    except (UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{path} is not a readable CSV file ({e}); pass an ETT-format CSV") from None
    if not header:
        raise UserError(f"{path} is empty; pass an ETT-format CSV with a header line")
    header = [h.strip() for h in header]
    if len(header) == 1 and ";" in header[0]:  # a European-locale export: else "no numeric columns"
        raise UserError(f"{path}: its fields are separated by ';' (header {header[0][:40]!r}); cisl reads "
                        "comma-separated files: export it with ',' between fields and '.' as the decimal point")
    # a file without a header line: its first data row would become the column names, and the
    # model would train on channels named "5.827" minus that row (pandas' integer names, `,0,1,2`,
    # are names: no field of a data row is empty, and a data row has a non-integer somewhere)
    numbers = [h for h in header if _is_number(h)]
    if len(numbers) >= max(1, len(header) - 1) and any(not h.lstrip("+-").isdigit() for h in numbers):
        raise UserError(f"{path}: the first line ({','.join(header[:4])}{',...' if len(header) > 4 else ''}) is "
                        "data, not column names; add a header line (e.g. date,HUFL,...,OT)")
    seen: dict[str, int] = {}
    for k, h in enumerate(header):
        if h in seen and h:
            raise UserError(f"{path}: columns {seen[h] + 1} and {k + 1} are both named {h!r}; rename one")
        seen[h] = k
    for i, r in enumerate(rows):
        if len(r) != len(header):
            raise UserError(f"{path}: data row {i + 1} has {len(r)} fields but the header has {len(header)}; "
                            "fix the file")
    cells = list(zip(*rows)) if rows else [() for _ in header]

    numeric: dict[str, np.ndarray] = {}
    text: dict[str, float] = {}  # skipped text columns: the share of their non-empty cells that are numbers
    for name, values in zip(header, cells):
        if name.lower() in TIME_COLUMNS:
            check_time_order(path, name, values)
            continue
        # an index: pandas' row numbers, unnamed as it writes them, "Unnamed: 0" once read back and written again
        if not name or re.fullmatch(r"Unnamed: \d+", name):
            continue
        col = _to_float(list(values))
        if col is not None:
            numeric[name] = col
            continue
        # a text column (names, ids) is skipped; a number column with a stray word is a broken file,
        # not a column to drop without a word
        parsed = [_is_number(v) for v in values if v.strip()]
        commas = [_is_number(v.replace(",", "")) or _is_number(v.replace(",", ".")) for v in values if v.strip()]
        if commas and not any(parsed) and sum(commas) >= len(commas) / 2:  # dropping it would lose a channel
            i = next(k for k, v in enumerate(values) if "," in v)
            raise UserError(f"{path}: column {name!r} holds numbers written with ',' (data row {i + 1}: {values[i]!r}): "
                            "thousands separators or decimal commas; write plain numbers (1296.5)")
        if parsed and sum(parsed) >= NUMERIC_SHARE * len(parsed) and not (columns and name not in columns):
            i = next(k for k, v in enumerate(values) if v.strip() and not _is_number(v))
            words = len(parsed) - sum(parsed)
            raise UserError(f"{path}: column {name!r} holds numbers but data row {i + 1} has {values[i]!r} "
                            f"({words} of its {len(parsed)} cells are not numbers); fix those cells, or name the "
                            f"channels to use in [data] columns to leave it out")
        text[name] = sum(parsed) / len(parsed) if parsed else 0.0
    if not numeric:
        raise UserError(f"{path} has no numeric columns (header: {', '.join(header)}); "
                        "pass a CSV with a date column and numeric channel columns")

    if not columns and text and skipped is not None:
        skipped.extend(f"{n!r} ({100 * share:.0f} % numbers)" if share else repr(n) for n, share in text.items())
    wanted = list(columns) if columns else list(numeric)
    twice = next((c for i, c in enumerate(wanted) if c in wanted[:i]), None)
    if twice is not None:  # it would be trained on as two channels
        raise UserError(f"{path}: [data] columns names {twice!r} twice; name each column once")
    for name in wanted:
        if name in numeric:
            continue
        if name in header and name.lower() in TIME_COLUMNS:
            raise UserError(f"{path}: column {name!r} is the time column, never a channel; choose among "
                            f"{', '.join(numeric)}")
        if name in header:
            raise UserError(f"{path}: column {name!r} is not numeric; choose among {', '.join(numeric)}")
        close = difflib.get_close_matches(name, list(numeric), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UserError(f"{path} has no column {name!r}; {hint}columns are: {', '.join(numeric)}")
    for name in wanted:
        with np.errstate(over="ignore"):  # the model is float32: 1e39 is finite here and inf there
            bad = np.flatnonzero(~np.isfinite(numeric[name].astype(np.float32)))
        if bad.size:
            raise UserError(f"{path}: column {name!r} has {bad.size} empty, NaN, infinite or out-of-float32-range "
                            f"values (first in data row {bad[0] + 1}); fill or drop them")
    if len(rows) < 2:
        raise UserError(f"{path} has {len(rows)} data rows; a time series needs many more")
    return np.stack([numeric[n] for n in wanted], axis=1), wanted
