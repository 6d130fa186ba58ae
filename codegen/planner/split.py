"""An uneven split (each node its own number of heads and MLP hidden units) and the split file.

`Split` (codegen/partition.py) holds any number of heads and hidden units per device; everything
that derives a plan from a split (training, plan/structure.py, the ONNX graph, compile) asks the
split object for its column ranges, so an uneven split needs nothing else.

The split file (``split.json``, written by `cisl plan`, read by `cisl train --split` and `cisl compile --split`) names the
testbed nodes that take part and what each holds::

    {"format": "cisl-split", "version": 1, "model": {...ModelConfig...}, "keep_ratio": 1.0,
     "nodes": [0, 1, 2, 4, ...],           # testbed node ids, in plan order (plan node k = nodes[k])
     "boards": ["nrf52840dk", ...],         # each node's board
     "heads_per_device": [3, 2, ...], "hidden_per_device": [24, 16, ...],
     "planner": {...objective, deadline, predicted latency and energy, solver...}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..modelspec import ModelConfig
from ..partition import Split, even_split, uneven_problem

FORMAT = "cisl-split"
VERSION = 1


def split_of(heads: list[int], hidden: list[int], cfg: ModelConfig) -> Split:
    """The split of ``cfg`` with these heads and hidden units per node; a bad one is one line."""
    problem = split_problem(heads, hidden, cfg)
    if problem:
        raise UserError(problem)
    return Split.uneven(heads, hidden, cfg.d_model)


def split_problem(heads: list[int], hidden: list[int], cfg: ModelConfig) -> str | None:
    return uneven_problem(heads, hidden, cfg.heads, cfg.mlp_hidden)


def even(cfg: ModelConfig, devices: int) -> Split:
    return split_of(even_split(cfg.heads, devices), even_split(cfg.mlp_hidden, devices), cfg)


@dataclass
class SplitFile:
    model: ModelConfig
    keep_ratio: float
    nodes: list[int]
    boards: list[str]
    heads: list[int]
    hidden: list[int]
    planner: dict[str, Any] = field(default_factory=dict)

    @property
    def split(self) -> Split:
        return split_of(self.heads, self.hidden, self.model)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "model": self.model.to_json(), "keep_ratio": self.keep_ratio,
                "nodes": self.nodes, "boards": self.boards, "heads_per_device": self.heads,
                "hidden_per_device": self.hidden, "planner": self.planner}


def read_document(path: Path, fmt: str, version: int, what: str, maker: str) -> dict:
    """A cisl JSON document of format ``fmt``: one line naming the file and the fix for a missing
    file, bad JSON, another format or another version (``maker``: the command that writes it)."""
    if path.is_dir():
        name = what.removesuffix(" file")
        raise UserError(f"{path}: is a folder; give the {name} file itself (`{maker} -o FILE` writes one)")
    if not path.is_file():
        raise UserError(f"{path}: {what} not found; write one with `{maker} -o {path}`")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a {what} (JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise UserError(f"{path}: not a cisl {what} (format is not '{fmt}'); `{maker.split(' ')[0]} "
                        f"{maker.split(' ')[1]}` writes them")
    if doc.get("version") != version:
        raise UserError(f"{path}: {what} version {doc.get('version')!r}; this cisl reads version {version}: "
                        f"write it again with `{maker}`")
    return doc


def read_split(path: Path | str) -> SplitFile:
    """Read and check a split file; every mistake is one line."""
    path = Path(path)
    doc = read_document(path, FORMAT, VERSION, "split file", "cisl plan MODEL --testbed T --deadline MS")
    def whole(key: str) -> list[int]:  # not int(): 2.5 heads or a node id of Infinity are no split
        v = doc[key]
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise TypeError(f"{key} must be a list of whole numbers >= 0, got {v!r}")
        return v

    try:
        cfg = ModelConfig.from_json(doc["model"])
        keep = doc["keep_ratio"]
        if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 < keep <= 1.0:
            raise ValueError(f"keep_ratio must be a number in (0, 1], got {keep!r}")
        if not isinstance(doc["boards"], list) or not all(isinstance(b, str) for b in doc["boards"]):
            raise TypeError(f"boards must be a list of board names, got {doc['boards']!r}")
        out = SplitFile(cfg, float(keep), whole("nodes"), list(doc["boards"]), whole("heads_per_device"),
                        whole("hidden_per_device"), dict(doc.get("planner", {})))
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: split file is incomplete or malformed ({e}); plan again with `cisl plan`") from None
    if not (len(out.nodes) == len(out.boards) == len(out.heads)) or len(set(out.nodes)) != len(out.nodes):
        raise UserError(f"{path}: nodes, boards and heads_per_device must list the same distinct nodes")
    problem = split_problem(out.heads, out.hidden, cfg)
    if problem:
        raise UserError(f"{path}: {problem}")
    return out


def write_split(path: Path | str, sf: SplitFile) -> None:
    from ..fsutil import check_output_file, json_format, write_output_file

    ours = json_format(FORMAT)
    check_output_file(Path(path), ours)
    write_output_file(Path(path), json.dumps(sf.to_json(), indent=1) + "\n", ours)
