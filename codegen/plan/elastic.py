"""Every mode of an elastic model planned side by side, so that one image can hold them all.

Each mode is its own schedule (`build_structure(units=...)`); here they are built with the same
column order (the gathered h and z columns by level, `levels`), calibrated together (one set of
activation parameters for every mode) and quantised with the largest mode's weight scales. Then
every op of every mode is the same op as in mode 0 with smaller sizes, and each of its constants is
a prefix of mode 0's — its rows, and within each row its columns — so the image stores mode 0's
constants once and a mode is a table of sizes (docs/design/elastic.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..elastic import KINDS, Modes
from ..modelspec import ModelConfig
from ..partition import Masks, Split
from .io import Plan, load_plan
from .quantize import calibrate, quantize
from .structure import Structure, build_structure

MODES_DIR = "modes"  # a build holding every mode: modes/mode_M/{plan.json,constants.bin} for every mode M >= 1


def unit_levels(modes: Modes, layers: int) -> list[dict[str, dict[int, int]]]:
    """Per layer and kind, every unit's level: the last (smallest) mode that still keeps it."""
    out = []
    for l in range(layers):
        entry = {}
        for kind in KINDS:
            level: dict[int, int] = {}
            for m in range(modes.count):
                for c in modes.units(m, kind, l):
                    level[c] = m
            entry[kind] = level
        out.append(entry)
    return out


def mode_structures(cfg: ModelConfig, split: Split, masks: Masks, keep_ratio: float, modes: Modes) -> list[Structure]:
    """One schedule per mode, all with the gathered h and z columns in level order."""
    levels = unit_levels(modes, cfg.layers)
    return [build_structure(cfg, split, masks, keep_ratio, units=[{k: modes.units(m, k, l) for k in KINDS}
                                                                 for l in range(cfg.layers)], levels=levels)
            for m in range(modes.count)]


def alignment_problem(structs: list[Structure]) -> str | None:
    """None if every mode runs the same ops on the same tensors as mode 0 (sizes aside)."""
    base = structs[0]
    for m, st in enumerate(structs[1:], start=1):
        for n0, n in zip(base.nodes, st.nodes):
            if len(n.ops) != len(n0.ops):
                return f"node {n0.device}: mode {m} has {len(n.ops)} ops, mode 0 {len(n0.ops)}"
            for i, (a, b) in enumerate(zip(n0.ops, n.ops)):
                if (a.kind, a.ins, a.outs) != (b.kind, b.ins, b.outs):
                    return f"node {n0.device} op {i}: mode 0 runs {a.kind} {a.ins}->{a.outs}, mode {m} {b.kind} {b.ins}->{b.outs}"
    return None


def quantize_modes(structs: list[Structure], weights: dict[str, np.ndarray], windows: np.ndarray
                   ) -> tuple[dict, list[list[dict[str, np.ndarray]]]]:
    """Calibrate on every mode together and quantise each mode with mode 0's weight-row scales;
    returns the shared qparams and the constants per mode and node (the structures' ops get their
    integer attributes)."""
    q = calibrate(list(structs), weights, windows)
    scales: dict[tuple[str, int], float] = {}
    for node in structs[0].nodes:
        for op in node.ops:
            ref = op.attrs.get("weight")
            if op.kind == "fc" and ref is not None:
                w = np.asarray(weights[ref["name"]], dtype=np.float64)[np.ix_(ref["rows"], ref["cols"])]
                amax = np.abs(w).max(axis=1)
                for r, a in zip(ref["rows"], amax):
                    scales[(ref["name"], r)] = a / 127.0 if a > 0 else 1.0

    def row_scale(ref: dict) -> np.ndarray:
        return np.array([scales[(ref["name"], r)] for r in ref["rows"]])

    return q, [quantize(st, weights, q, row_scale=row_scale if m else None) for m, st in enumerate(structs)]


def sharing_problem(structs: list[Structure], consts: list[list[dict[str, np.ndarray]]]) -> str | None:
    """None if every mode's every constant is a prefix of mode 0's (rows; and columns within each
    row), so that an image storing mode 0's constants serves every mode."""
    for m in range(1, len(structs)):
        for n0, n, c0, c in zip(structs[0].nodes, structs[m].nodes, consts[0], consts[m]):
            for i, (a, b) in enumerate(zip(n0.ops, n.ops)):
                for attr, name in b.attrs.items():
                    if not attr.endswith("_c") or not isinstance(name, str) or name not in c:
                        continue
                    big, small = c0[a.attrs[attr]], c[name]
                    if small.ndim != big.ndim or any(s > t for s, t in zip(small.shape, big.shape)):
                        return f"node {n0.device} op {i} ({b.kind}) {attr}: mode {m} {small.shape} vs mode 0 {big.shape}"
                    view = big[tuple(slice(0, s) for s in small.shape)]
                    if not np.array_equal(view, small):
                        return f"node {n0.device} op {i} ({b.kind}) {attr}: mode {m}'s values are not mode 0's"
    return None


def elastic_plans(build_dir: Path, plan: Plan) -> list[Plan] | None:
    """The plan of every mode of an image that holds every elastic mode (mode 0 first); else None."""
    el = plan.meta.get("elastic") or {}
    if el.get("image") != "every mode":
        return None
    return [plan, *(load_plan(Path(build_dir) / MODES_DIR / f"mode_{m}") for m in range(1, int(el["modes"])))]
