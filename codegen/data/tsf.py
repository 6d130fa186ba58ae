"""Monash forecasting archive `.tsf` files (Godahewa et al., NeurIPS 2021 datasets track).

Format: header lines, then ``@data``, then one series per line::

    # comment
    @relation name
    @attribute series_name string
    @attribute start_timestamp date
    @frequency hourly
    @horizon 48
    @missing true
    @equallength false
    @data
    T1:1979-01-01 00-00-00:25092.2,24271.5,?,...

A series line is its attribute values (in ``@attribute`` order) separated by ``:``, then the
comma-separated values, ``?`` for a missing one. Dates are ``YYYY-MM-DD HH-MM-SS`` (dashes,
because ``:`` separates fields).

For training (`tsf_splits`) every series is one univariate, channel-independent series:

* missing values are filled forward within the series, then backward (for leading gaps);
* a series shorter than lookback + horizon is skipped (and counted); if all are, that is an error;
* each series is split by time 70/10/20 (validation/test inputs reach ``lookback`` rows back, as in
  the LTSF protocol). The Monash archive itself evaluates on the last ``@horizon`` points of each
  series; we use the LTSF protocol so that all data sets are windowed, scaled and scored alike;
* one StandardScaler (population std) is fitted on the pooled train parts of all series.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from codegen.data.protocol import Splits, make_segment_splits, ratio_borders, time_split_segments
from codegen.errors import UserError

ATTRIBUTE_TYPES = ("string", "numeric", "date")
DATE_FORMAT = "%Y-%m-%d %H-%M-%S"
_BOOL = {"true": True, "false": False}
_LINE_FORMAT = "attr1:attr2:...:v1,v2,... with one attribute field per @attribute"


@dataclass
class TsfFile:
    """A parsed .tsf file. ``series[i]`` is float64 with NaN where the file has ``?``."""

    path: Path
    relation: str = ""
    attributes: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    frequency: str | None = None
    horizon: int | None = None
    missing: bool | None = None
    equal_length: bool | None = None
    series: list[np.ndarray] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)  # attribute values of each series
    lines: list[int] = field(default_factory=list)  # the line number of each series


def _fail(path: Path, line: int, what: str, fix: str) -> UserError:
    return UserError(f"{path}:{line}: {what}; {fix}")


def _header(tsf: TsfFile, line_no: int, line: str) -> None:
    path = tsf.path
    key, _, rest = line.partition(" ")
    key, rest = key.lower(), rest.strip()
    if key == "@attribute":
        parts = rest.split()
        if len(parts) != 2:
            raise _fail(path, line_no, f"'{line}' is not '@attribute NAME TYPE'",
                        f"write one name and one type ({', '.join(ATTRIBUTE_TYPES)})")
        name, typ = parts
        if typ.lower() not in ATTRIBUTE_TYPES:
            raise _fail(path, line_no, f"unknown attribute type '{typ}' of attribute '{name}'",
                        f"use one of {', '.join(ATTRIBUTE_TYPES)}")
        tsf.attributes.append((name, typ.lower()))
    elif key == "@relation":
        tsf.relation = rest
    elif key == "@frequency":
        tsf.frequency = rest
    elif key == "@horizon":
        try:
            tsf.horizon = int(rest)
        except ValueError:
            raise _fail(path, line_no, f"@horizon '{rest}' is not an integer", "write e.g. '@horizon 48'") from None
    elif key in ("@missing", "@equallength"):
        if rest.lower() not in _BOOL:
            raise _fail(path, line_no, f"{key} '{rest}' is neither true nor false", f"write '{key} true' or 'false'")
        setattr(tsf, "missing" if key == "@missing" else "equal_length", _BOOL[rest.lower()])
    else:
        raise _fail(path, line_no, f"unknown header line '{line}'",
                    "use @relation, @attribute, @frequency, @horizon, @missing, @equallength or @data")


def _attribute_value(tsf: TsfFile, line_no: int, name: str, typ: str, text: str) -> Any:
    if typ == "numeric":
        try:
            return float(text)
        except ValueError:
            raise _fail(tsf.path, line_no, f"attribute '{name}' = '{text}' is not a number",
                        "fix the value or declare the attribute as string") from None
    if typ == "date":
        try:
            return datetime.strptime(text.strip(), DATE_FORMAT)
        except ValueError:
            raise _fail(tsf.path, line_no, f"attribute '{name}' = '{text}' is not a date like 1979-01-01 00-00-00",
                        "write dates as YYYY-MM-DD HH-MM-SS") from None
    return text


def _series_values(tsf: TsfFile, line_no: int, text: str) -> np.ndarray:
    if not text.strip():
        raise _fail(tsf.path, line_no, "the series has no values", "add its comma-separated values after the last ':'")
    fields = [f.strip() for f in text.split(",")]
    missing = np.array([f == "?" for f in fields])
    try:
        values = np.array(["nan" if m else f for f, m in zip(fields, missing)], dtype=np.float64)
    except ValueError:
        values = None
    if values is not None:
        with np.errstate(over="ignore"):  # the model is float32: 1e39 is finite here and inf there
            bad = np.flatnonzero(~np.isfinite(values.astype(np.float32)) & ~missing)
        if not bad.size:
            return values
        first = int(bad[0])
    else:
        first = next(i for i, f in enumerate(fields) if f != "?" and not _is_float(f))
    what = "is empty" if not fields[first] else f"'{fields[first]}' is not a finite number within float32's range"
    raise _fail(tsf.path, line_no, f"value {first + 1} of the series {what}",
                "write numbers, and ? for a missing value")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_tsf(path: str | Path) -> TsfFile:
    """Parse a .tsf file; malformed input raises a one-line UserError with the line number."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise UserError(f"{path} {what}; pass a Monash .tsf file")
    tsf = TsfFile(path)
    in_data = False
    with path.open(encoding="utf-8-sig", errors="replace") as f:  # Monash files are cp1252 at worst
        for line_no, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if line.lower() == "@data":
                    in_data = True
                elif line.startswith("@"):
                    _header(tsf, line_no, line)
                else:
                    raise _fail(path, line_no, "series data before the @data line",
                                "add a line '@data' after the header lines")
                continue
            if line.startswith("@"):
                raise _fail(path, line_no, f"header line '{line.split()[0]}' after @data",
                            "move header lines above @data")
            fields = line.split(":")
            want = len(tsf.attributes) + 1
            if len(fields) != want:
                names = ", ".join(n for n, _ in tsf.attributes) or "none"
                raise _fail(path, line_no, f"{len(fields) - 1} attribute field(s) before the values, expected "
                            f"{len(tsf.attributes)} (attributes: {names})", f"write {_LINE_FORMAT}")
            tsf.values.append({name: _attribute_value(tsf, line_no, name, typ, text)
                               for (name, typ), text in zip(tsf.attributes, fields[:-1])})
            tsf.series.append(_series_values(tsf, line_no, fields[-1]))
            tsf.lines.append(line_no)
    if not in_data:
        raise UserError(f"{path}: no @data line; a .tsf file needs its header, then '@data', then one series per line")
    if not tsf.series:
        raise UserError(f"{path}: no series after @data; add one series per line ({_LINE_FORMAT})")
    return tsf


def fill_missing(x: np.ndarray) -> np.ndarray:
    """Forward fill NaNs, then backward fill the leading ones (an all-NaN series stays NaN)."""
    x = np.asarray(x, dtype=np.float64)
    ok = ~np.isnan(x)
    if ok.all() or not ok.any():
        return x.copy()
    last = np.maximum.accumulate(np.where(ok, np.arange(len(x)), -1))  # index of the last valid value so far
    out = x[np.maximum(last, 0)]
    out[last < 0] = x[np.flatnonzero(ok)[0]]
    return out


def tsf_splits(path: str | Path, lookback: int, horizon: int) -> tuple[Splits, dict[str, Any]]:
    """Train/val/test windows of every series of a .tsf file, and a description of the data."""
    path = Path(path)
    tsf = read_tsf(path)
    need = lookback + horizon
    usable, short, empty, filled = [], 0, 0, 0
    for s in tsf.series:
        gaps = int(np.isnan(s).sum())
        if gaps == len(s):
            empty += 1
            continue
        if len(s) < need:
            short += 1
            continue
        filled += gaps
        usable.append(fill_missing(s)[:, None])
    if not usable and not short:  # every series is all '?': no length would help
        raise UserError(f"{path}: every series is all missing ('?'; {empty} series): there is no value to train on; "
                        "pass a file with values")
    if not usable:
        real = [s for s in tsf.series if not np.isnan(s).all()]  # the all-missing ones are not a length to shorten to
        shortest, longest = min(len(s) for s in real), max(len(s) for s in real)
        raise UserError(f"{path}: no series is long enough for lookback {lookback} + horizon {horizon} = {need} "
                        f"values (lengths {shortest}..{longest}{f', {empty} all missing' if empty else ''}); "
                        "use a shorter lookback/horizon")
    splits = make_segment_splits(*time_split_segments(usable, lookback), lookback, horizon, str(path))
    lengths = [len(s) for s in usable]
    warnings = imputed_split_warnings([np.isnan(s) for s in tsf.series if len(s) >= need and not np.isnan(s).all()],
                                      lookback)
    desc = {
        "source": "tsf", "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "relation": tsf.relation, "frequency": tsf.frequency, "tsf_horizon": tsf.horizon,
        "series": len(tsf.series), "series_used": len(usable),
        "skipped_short": short, "skipped_all_missing": empty,
        "length_min": min(lengths), "length_max": max(lengths),
        "missing_values_filled": filled,
        "missing_policy": "forward fill within each series, then backward fill leading gaps",
        "split": "per series by time 70/10/20; val/test inputs reach lookback rows back",
        "scaler": "one StandardScaler on the pooled train parts of all series",
        **({"warnings": list(warnings)} if warnings else {}),
    }
    return splits, desc


IMPUTED_WARN = 0.25  # a split whose values are this much filled-in is scored mostly on made-up values


def imputed_split_warnings(missing: list[np.ndarray], lookback: int) -> tuple[str, ...]:
    """One line per split (training, validation, test) whose own rows are at least ``IMPUTED_WARN`` filled in
    (a long ``?`` gap near a series' end can make the whole validation split forward-filled: the
    best epoch is then chosen on a flat line)."""
    out = []
    for name, i in (("training", 0), ("validation", 1), ("test", 2)):
        filled = total = 0
        for m in missing:
            a, b = ratio_borders(len(m), lookback)[i]
            a = a if i == 0 else min(b, a + lookback)  # val/test segments reach lookback rows back: not theirs
            filled += int(m[a:b].sum())
            total += b - a
        if total and filled / total >= IMPUTED_WARN:
            what = ("the model largely learns flat filled-in runs" if i == 0 else
                    "its MSE is largely scored on filled-in values" + (" (and picks the best epoch)" if i == 1 else ""))
            out.append(f"{100 * filled / total:.0f} % of the {name} split's values were missing ('?') and are "
                       f"forward-filled, so {what}; fill the gaps or cut the series")
    return tuple(out)
