"""`cisl fit`: the search of codegen/fit.py with its defaults, printed table and JSON file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import CheckFailed
from .fsutil import check_output_file, json_with, write_output_file

_OURS = json_with("frontier", "devices")


@dataclass
class FitRun:
    result: object  # codegen.fit.FitResult
    text: str  # the table format_result prints

    def save(self, path: Path) -> None:
        """Write the frontier, the best model and the confirming build as JSON."""
        r = self.result
        doc = {"board": r.board, "devices": r.devices, "heads": r.heads, "keep": r.keep,
               "frontier": [c.to_json() for c in r.frontier],
               "best": r.best.to_json() if r.best else None, "confirm": r.tried,
               "refused": r.refused}
        write_output_file(path, json.dumps(doc, indent=1) + "\n", _OURS)

    def check(self) -> None:
        """CheckFailed when no model of the grid fits."""
        if self.result.best is None:
            raise CheckFailed(f"no model of the grid fits {self.result.board} with {self.result.devices} node(s)")


def run_fit(board: str, devices: int, heads: int = 16, keep_ratio: float = 1.0, seed: int = 0, build: bool = True,
            tokens: tuple[int, ...] = (), layers: tuple[int, ...] = (), json_out: Path | None = None,
            jobs: int | None = None, progress: Callable[[str], None] | None = None) -> FitRun:
    """Search (default grids when ``tokens``/``layers`` are empty) and format the result; refuses
    before the search to overwrite a ``json_out`` that `cisl fit` did not write."""
    from .boards import load_board
    from .fit import N_GRID, T_GRID, fit, format_result

    check_output_file(json_out, _OURS, "--json")
    r = fit(board, devices, heads, keep_ratio, seed, build, tuple(tokens) or N_GRID, tuple(layers) or T_GRID,
            jobs=jobs, progress=progress or (lambda s: None))
    return FitRun(r, format_result(r, load_board(board)))
