"""One entry point for every data format: pick the loader, load, split, scale, window.

* ``.csv`` file -> ETT-format CSV (`csvdata`; ETT borders or 70/10/20 by time);
* ``.tsf`` file -> Monash forecasting archive (`tsf`; every series univariate, 70/10/20 per series);
* a folder -> ICD recordings (`icd`; split by recording). One ICD recording (a ``.csv`` file) is
  read as ICD only when the source is given as ``"icd"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codegen.data.csvdata import load_csv
from codegen.data.icd import icd_splits
from codegen.data.protocol import Splits, make_splits
from codegen.data.tsf import tsf_splits
from codegen.errors import UserError
from codegen.modelspec import ModelConfig

FILE_SOURCES = ("csv", "tsf", "icd")


def source_for_path(path: str | Path, current: str | None = None) -> str:
    """The data source a path stands for: "csv", "tsf" or "icd" (a folder of recordings).

    A ``.csv`` file stays "icd" when ``current`` is "icd" (one recording of an ICD config).
    """
    path = Path(path)
    if path.is_dir():
        return "icd"
    suffix = path.suffix.lower()
    if suffix == ".tsf":
        return "tsf"
    if suffix == ".csv":
        return "icd" if current == "icd" else "csv"
    if not path.exists():
        raise UserError(f"{path}: no such file or folder; pass an ETT-format .csv, a Monash .tsf file or a folder "
                        "of ICD recordings")
    raise UserError(f"{path}: cannot tell the data format from the name; pass an ETT-format .csv, a Monash .tsf "
                    "file or a folder of ICD recordings")


def load_data(source: str, path: str | Path, columns: Sequence[str] | None, lookback: int, horizon: int,
              manifest: str | Path | None = None) -> tuple[Splits, dict[str, Any]]:
    """Splits of a data file/folder and a provenance description (file name, sha256, split...)."""
    path = Path(path)
    if source == "csv":
        skipped: list[str] = []
        series, names = load_csv(path, columns, skipped)
        desc = {"source": "csv", "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "columns": names}
        if skipped:  # a channel read as text would change what the scores are over: named, never silent
            desc["warnings"] = [f"column(s) {', '.join(skipped)} skipped as text, not channels; the model forecasts "
                                f"{len(names)} channel(s) ({', '.join(names)})"]
        return _with_warnings(make_splits(series, lookback, horizon, str(path), names), desc)
    if source == "tsf":
        if columns:
            raise UserError(f"{path}: columns do not apply to a .tsf file (every series is one channel); "
                            "leave [data] columns empty")
        return _with_warnings(*tsf_splits(path, lookback, horizon))
    if source == "icd":
        return _with_warnings(*icd_splits(path, columns, lookback, horizon, manifest or None))
    raise UserError(f"unknown data source {source!r}; use one of {', '.join(FILE_SOURCES)}")


def _with_warnings(splits: Splits, desc: dict[str, Any]) -> tuple[Splits, dict[str, Any]]:
    """The description carries the splits' warnings (and the loader's own), for train.json and `cisl train`."""
    warnings = list(desc.get("warnings", [])) + list(splits.warnings)
    if warnings:
        desc["warnings"] = warnings
    return splits, desc


def load_dataset(path: str | Path, config: ModelConfig, columns: Sequence[str] | None = None,
                 source: str | None = None) -> Splits:
    """The splits `cisl train --data PATH` would train on, for a model of this configuration."""
    return load_data(source or source_for_path(path), path, columns, config.lookback, config.horizon)[0]
