"""Boards: boards/<name>/board.toml holds the facts (core, memory, build settings, serial)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError
from .resources import resource_dir


@dataclass(frozen=True)
class Board:
    name: str
    path: Path  # the board's folder (startup code, HAL, linker script)
    facts: dict[str, Any]

    @property
    def ram_bytes(self) -> int:
        return int(self.facts["board"]["ram_bytes"])

    @property
    def flash_bytes(self) -> int:
        return int(self.facts["board"]["flash_bytes"])

    @property
    def build(self) -> dict[str, Any]:
        return self.facts["build"]


def available_boards() -> list[str]:
    root = resource_dir("boards")
    return sorted(p.name for p in root.iterdir() if (p / "board.toml").is_file())


def load_board(name: str) -> Board:
    """Load a board by name; unknown names give a one-line UserError listing the known boards."""
    known = available_boards()
    if name not in known:
        raise UserError(f"unknown board '{name}'; available boards: {', '.join(known)}")
    folder = resource_dir("boards") / name
    with open(folder / "board.toml", "rb") as f:
        facts = tomllib.load(f)
    return Board(name, folder, facts)
