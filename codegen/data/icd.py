"""The ICD data set ("One Year Industrial Component Degradation", inIT-OWL): a folder of recordings.

Every recording is one CSV file named ``MM-DDTHHMMSS_NNN_modeK.csv`` (MM the relative month, K the
operating mode) with a ``timestamp`` column and numeric signal columns, 2048 rows at 4 ms. The
recordings are independent 8-second captures, not one continuous series, so:

* recordings are ordered by the time in their names (month, day, time, then NNN);
* with 3 or more recordings the split is **by recording**: the first 70 % train, the next 10 %
  validation, the last 20 % test (each at least one recording); with fewer, every recording is
  split by time 70/10/20 instead (validation/test inputs reach ``lookback`` rows back);
* windows are cut within each recording, never across two;
* a StandardScaler per channel (population std) is fitted on the training rows;
* channels are chosen by name; by default every numeric column except ``timestamp``. Values stay
  float64 until they are scaled: the position channels are counters near 6e8, where float32 would
  round to multiples of 64;
* a recording shorter than lookback + horizon is skipped (and counted); if all are, that is an error.

Given a manifest (``filename,size_bytes,sha256``, e.g. ``manifest_full_dataset.csv``), every
recording used must be listed in it with that size and sha256.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from codegen.data.protocol import Splits, make_segment_splits, time_split_segments
from codegen.errors import UserError

NAME_PATTERN = "MM-DDTHHMMSS_NNN_modeK.csv"
_NAME = re.compile(r"^(\d{2})-(\d{2})T(\d{6})_(\d+)_mode(\d+)\.csv$", re.IGNORECASE)
TIME_COLUMN = "timestamp"


def _order_key(path: Path) -> tuple:
    m = _NAME.match(path.name)
    return (0, *(int(g) for g in m.groups()[:4]), path.name) if m else (1, 0, 0, 0, 0, path.name)


def recording_files(path: str | Path) -> tuple[list[Path], list[str]]:
    """The recordings at ``path`` in time order, and the names of other CSV files there (ignored).

    ``path`` is a folder of recordings or one recording (whatever its name).
    """
    path = Path(path)
    if path.is_file():
        return [path], []
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder; pass a folder of ICD recordings ({NAME_PATTERN})")
    csvs = [p for p in path.iterdir() if p.is_file() and p.suffix.lower() == ".csv"]
    files = sorted((p for p in csvs if _NAME.match(p.name)), key=_order_key)
    other = sorted(p.name for p in csvs if not _NAME.match(p.name))
    if not files:
        found = f"found {', '.join(other[:3])}{' ...' if len(other) > 3 else ''}" if other else "found no CSV file"
        raise UserError(f"{path}: no ICD recordings named {NAME_PATTERN} in this folder ({found}); "
                        "pass the folder holding the recordings, or one recording file")
    return files, other


def read_recording(path: Path, columns: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One recording as float64 [rows, channels] and the channel names (default: all but timestamp)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # a BOM (Excel) is not a name
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            rows = [r for r in reader if r]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{path} is not a readable CSV file ({e}); pass an ICD recording") from None
    if not header or not rows:
        raise UserError(f"{path} has no {'header' if not header else 'data rows'}; pass an ICD recording "
                        "(a timestamp column and numeric signal columns)")
    for i, r in enumerate(rows):
        if len(r) != len(header):
            raise UserError(f"{path}: data row {i + 1} has {len(r)} fields but the header has {len(header)}; "
                            "fix the file")
    if TIME_COLUMN in header:  # windows assume consecutive rows, as in a CSV (codegen/data/csvdata.py)
        from codegen.data.csvdata import check_time_order

        at = header.index(TIME_COLUMN)
        check_time_order(path, TIME_COLUMN, [r[at] for r in rows])
    if columns:
        signals = [h for h in header if h != TIME_COLUMN]  # the time column is never a channel: not offered
        for name in columns:
            if name not in header:
                close = ([h for h in signals if h.lower() == name.lower()]
                         or difflib.get_close_matches(name, signals, n=1))
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise UserError(f"{path} has no column {name!r}; {hint}columns are: {', '.join(signals)}")
        names = list(columns)
    else:
        names = [h for h in header if h.lower() != TIME_COLUMN]
    pick = [header.index(n) for n in names]
    cells = [[r[j] for j in pick] for r in rows]
    try:
        data = np.array(cells, dtype=np.float64)
    except ValueError:
        data = None
    bad_at = None
    if data is None:
        bad_at = next((i, j) for i, r in enumerate(cells) for j, v in enumerate(r) if not _is_number(v))
    else:
        with np.errstate(over="ignore"):  # the model is float32: 1e39 is finite here and inf there
            far = ~np.isfinite(data.astype(np.float32))
        if far.any():
            i, j = np.argwhere(far)[0]
            bad_at = int(i), int(j)
    if bad_at is not None:
        i, j = bad_at
        hint = "" if columns else "; choose numeric columns with [data] columns"
        raise UserError(f"{path}: column {names[j]!r}, data row {i + 1}: {cells[i][j]!r} is not a finite number "
                        f"within float32's range{hint}")
    return data, names


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_manifest(path: str | Path) -> dict[str, tuple[int, str]]:
    """``filename,size_bytes,sha256`` lines -> {filename: (size, sha256)}."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: manifest not found; set [data] manifest to a filename,size_bytes,sha256 CSV "
                        "or leave it empty")
    with path.open(newline="", encoding="utf-8-sig") as f:  # a BOM (Excel) is not a name
        rows = list(csv.reader(f))
    if not rows or [h.strip() for h in rows[0]] != ["filename", "size_bytes", "sha256"]:
        raise UserError(f"{path}: not a manifest (its header must be filename,size_bytes,sha256)")
    out = {}
    for i, r in enumerate(rows[1:], 2):
        if not r:
            continue
        if len(r) != 3 or not r[1].strip().isdigit() or not re.fullmatch(r"[0-9a-fA-F]{64}", r[2].strip()):
            raise UserError(f"{path}:{i}: expected filename,size_bytes,sha256 (64 hex digits), got {','.join(r)!r}")
        out[r[0].strip()] = (int(r[1]), r[2].strip().lower())
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_manifest(files: list[Path], manifest: str | Path, digests: dict[Path, str] | None = None) -> int:
    """Check every file's size and sha256 against the manifest; returns the manifest's entry count."""
    entries = read_manifest(manifest)
    digests = digests if digests is not None else {}
    for p in files:
        if p.name not in entries:
            raise UserError(f"{p}: not listed in the manifest {manifest}; remove the file or use the matching "
                            "manifest")
        size, digest = entries[p.name]
        actual = p.stat().st_size
        if actual != size or (digests.get(p) or _sha256(p)) != digest:
            what = f"size {actual} B, manifest says {size} B" if actual != size else "sha256 differs from the manifest"
            raise UserError(f"{p}: {what} ({manifest}); the file is damaged or another version: get it again")
    return len(entries)


def _split_counts(n: int) -> tuple[int, int, int]:
    """Recordings for train/val/test: 70/10/20 rounded down, at least one each (n >= 3)."""
    n_train, n_test = max(1, int(n * 0.7)), max(1, int(n * 0.2))
    n_val = n - n_train - n_test
    if n_val < 1:
        n_train, n_val = n_train - 1, 1
    return n_train, n_val, n_test


def icd_splits(path: str | Path, columns: Sequence[str] | None, lookback: int, horizon: int,
               manifest: str | Path | None = None) -> tuple[Splits, dict[str, Any]]:
    """Train/val/test windows of ICD recordings at ``path`` (a folder or one file) and a description."""
    path = Path(path)
    files, ignored = recording_files(path)
    digests = {p: _sha256(p) for p in files}
    manifest_entries = verify_manifest(files, manifest, digests) if manifest else None
    first, names = read_recording(files[0], columns)
    recordings = [first] + [read_recording(p, names)[0] for p in files[1:]]
    need = lookback + horizon
    keep = [i for i, r in enumerate(recordings) if len(r) >= need]
    if not keep:
        raise UserError(f"{path}: every recording is shorter than lookback {lookback} + horizon {horizon} = {need} "
                        f"rows (longest {max(len(r) for r in recordings)}); use a shorter lookback/horizon")
    used = [files[i] for i in keep]
    recs = [recordings[i] for i in keep]
    source = str(path)
    if len(recs) >= 3:
        n_train, n_val, _ = _split_counts(len(recs))
        parts = recs[:n_train], recs[n_train:n_train + n_val], recs[n_train + n_val:]
        by = {"train": [p.name for p in used[:n_train]], "val": [p.name for p in used[n_train:n_train + n_val]],
              "test": [p.name for p in used[n_train + n_val:]]}
        split = "by recording in time order: first 70 % train, next 10 % validation, last 20 % test"
    else:
        parts = time_split_segments(recs, lookback)
        by = {"train": [p.name for p in used], "val": [p.name for p in used], "test": [p.name for p in used]}
        split = (f"fewer than 3 recordings ({len(recs)}): each recording split by time 70/10/20, "
                 "val/test inputs reach lookback rows back")
    splits = make_segment_splits(list(parts[0]), list(parts[1]), list(parts[2]), lookback, horizon, source,
                                 "70/10/20 by recording" if len(recs) >= 3 else "70/10/20 by time, per recording",
                                 names)
    content = hashlib.sha256("".join(f"{p.name} {digests[p]}\n" for p in files).encode()).hexdigest()
    desc = {
        "source": "icd", "path": path.name, "recordings": len(files), "recordings_used": len(used),
        "skipped_short": len(files) - len(used), "columns": names, "split": split, "recordings_by_split": by,
        "sha256": content,  # of the names and sha256 of every recording
        "scaler": "StandardScaler per channel on the training rows",
    }
    if ignored:
        desc["ignored_files"] = ignored
    if manifest_entries is not None:
        desc["manifest"] = {"file": Path(manifest).name, "entries": manifest_entries, "verified": len(files)}
    return splits, desc
