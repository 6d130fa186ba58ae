"""Elastic modes: one set of weights, several nested models (docs/design/elastic.md).

A *mode* keeps, in every layer, a prefix of each head's Q/K dimensions and V dimensions
("attention") and of each device's MLP hidden units ("hidden"), in a fixed rank order; mode 0 is
the largest (every unit), mode M − 1 the core. Mode m + 1's units are a subset of mode m's, and so
are the weights it uses, so one stored model serves every mode. Training makes them
(codegen.train.elastic); this module is what export and compile share (numpy only).

Units: "qk" a row of W_Q and W_K (one Q/K dimension of one head), "v" a row of W_V (a head-output
column, consumed by W_O), "z" a row of W_1 (a hidden unit, consumed by W_2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from codegen.modelspec import ModelConfig
from codegen.partition import POINTS, Masks, Split, gathered_cols

SHRINK = {"attention": ("qk", "v"), "hidden": ("z",)}
"""What a mode may shrink ([elastic] shrink) and the unit kinds it covers."""

KINDS = ("qk", "v", "z")

# the weights of one unit: (parameter, axis) — the unit is that row (axis 0) or column (axis 1)
UNIT_WEIGHTS = {"qk": (("wq.weight", 0), ("wq.bias", 0), ("wk.weight", 0), ("wk.bias", 0)),
                "v": (("wv.weight", 0), ("wv.bias", 0), ("wo.weight", 1)),
                "z": (("w1.weight", 0), ("w1.bias", 0), ("w2.weight", 1))}


def groups(split: Split, kind: str) -> list[list[int]]:
    """The units of one layer, in groups that shrink alike: every head's dimensions (qk, v), every
    device's hidden units (z). Ascending global indices."""
    if kind == "z":
        return [list(range(*split.hidden_cols(k))) for k in range(split.devices)]
    d = split.d_head
    return [list(range(h * d, (h + 1) * d)) for h in range(split.heads)]


@dataclass(frozen=True)
class Modes:
    """Nested modes of a split model.

    ``order[kind][layer][group]``: the group's units in rank order (what a mode keeps first);
    ``counts[mode][kind][layer][group]``: how many of them mode ``mode`` keeps. Mode 0 keeps every
    unit; counts never grow with the mode index."""

    order: dict[str, list[list[list[int]]]]
    counts: list[dict[str, list[list[int]]]]

    @property
    def count(self) -> int:
        return len(self.counts)

    def units(self, mode: int, kind: str, layer: int) -> list[int]:
        """Ascending global units of ``kind`` that ``mode`` keeps in ``layer``."""
        out: list[int] = []
        for g, order in enumerate(self.order[kind][layer]):
            out += order[:self.counts[mode][kind][layer][g]]
        return sorted(out)

    def alive(self, mode: int, split: Split) -> list[dict[str, np.ndarray]]:
        """Per layer, bool masks [width] of the units ``mode`` keeps, by kind."""
        out = []
        for l in range(len(self.order["qk"])):
            entry = {}
            for kind in KINDS:
                m = np.zeros(split.mlp_hidden if kind == "z" else split.d_model, dtype=bool)
                m[self.units(mode, kind, l)] = True
                entry[kind] = m
            out.append(entry)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "counts": self.counts}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> "Modes":
        return Modes(order={k: [[list(map(int, g)) for g in layer] for layer in raw["order"][k]] for k in KINDS},
                     counts=[{k: [list(map(int, layer)) for layer in m[k]] for k in KINDS} for m in raw["counts"]])


def full_order(split: Split, layers: int) -> dict[str, list[list[list[int]]]]:
    return {kind: [groups(split, kind) for _ in range(layers)] for kind in KINDS}


def counts_at(split: Split, layers: int, share: float, kinds: tuple[str, ...]) -> dict[str, list[list[int]]]:
    """Per kind, layer and group: round(share · group size), at least 1; kinds not in ``kinds`` keep all."""
    out = {}
    for kind in KINDS:
        sizes = [len(g) for g in groups(split, kind)]
        keep = [max(1, int(np.floor(share * n + 0.5))) if kind in kinds else n for n in sizes]
        out[kind] = [list(keep) for _ in range(layers)]
    return out


# --------------------------------------------------------------------------------------------
# MACs of a mode (network-wide, one inference): what the compiled nodes multiply-accumulate
# --------------------------------------------------------------------------------------------

def mode_macs(cfg: ModelConfig, split: Split, masks: Masks, modes: Modes, mode: int) -> int:
    """MACs of every node together for one inference in ``mode`` (embedding, layers, head)."""
    N, F = cfg.tokens, cfg.d_model
    total = N * cfg.patch_len * F + N * F * cfg.horizon
    for l in range(cfg.layers):
        alive = {kind: set(modes.units(mode, kind, l)) for kind in KINDS}
        for k in range(split.devices):
            lo, hi = split.model_cols(k)
            own = hi - lo
            qk = sum(lo <= c < hi for c in alive["qk"])
            v = sum(lo <= c < hi for c in alive["v"])
            zlo, zhi = split.hidden_cols(k)
            z = sum(zlo <= c < zhi for c in alive["z"])
            gx = len(gathered_cols(split, masks, l, "x", k))
            gy = len(gathered_cols(split, masks, l, "y", k))
            gh = sum(c in alive["v"] for c in gathered_cols(split, masks, l, "h", k))
            gz = sum(c in alive["z"] for c in gathered_cols(split, masks, l, "z", k))
            total += N * gx * (2 * qk + v) + N * N * (qk + v) + N * gh * own + N * gy * z + N * gz * own
    return total


def plan_modes(cfg: ModelConfig, split: Split, masks: Masks, count: int, core_macs: float,
               kinds: tuple[str, ...]) -> tuple[Modes, float]:
    """The modes' unit counts (order still the natural one) and the core's unit share u: the
    largest u on a fine grid whose core needs at most ``core_macs`` of mode 0's MACs; mode m keeps
    u^(m / (count − 1)) of every shrinking group. Raises ValueError if even one unit per group is
    too many."""
    order = full_order(split, cfg.layers)
    full = Modes(order, [counts_at(split, cfg.layers, 1.0, kinds)])
    base = mode_macs(cfg, split, masks, full, 0)

    def core(u: float) -> Modes:
        return Modes(order, [counts_at(split, cfg.layers, 1.0, kinds), counts_at(split, cfg.layers, u, kinds)])

    def fits(step: int) -> bool:
        return mode_macs(cfg, split, masks, core(step / 1000), 1) <= core_macs * base

    if not fits(0):
        least = mode_macs(cfg, split, masks, core(0.0), 1) / base
        raise ValueError(f"the smallest possible mode (one unit per group) needs {least:.1%} of the MACs, more "
                         f"than core_macs = {core_macs}; shrink more kinds or raise core_macs")
    lo, hi = 0, 1000  # MACs grow with u: the largest step of 1/1000 that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    u = max(lo, 1) / 1000
    counts = [counts_at(split, cfg.layers, u ** (m / (count - 1)), kinds) for m in range(count)]
    for m in range(1, count):  # nested, and strictly smaller somewhere (else two modes are one)
        if counts[m] == counts[m - 1]:
            raise ValueError(f"modes {m - 1} and {m} would be the same model (groups too small for {count} "
                             "modes): use fewer modes or a smaller core_macs")
    return Modes(order, counts), u




# --------------------------------------------------------------------------------------------
# Export: every mode a prefix of every group
# --------------------------------------------------------------------------------------------

def natural(modes: Modes, split: Split) -> Modes:
    """The same counts with every group in its natural order (what `permute` leaves)."""
    return Modes(full_order(split, len(modes.order["qk"])), modes.counts)


def permute(weights: dict[str, np.ndarray], masks: Masks, modes: Modes, split: Split
            ) -> tuple[dict[str, np.ndarray], Masks, Modes]:
    """The same model with every group's units in rank order, so that each mode keeps the first
    units of every group: Q/K rows (jointly: q·k is unchanged), V rows with W_O's columns and the
    h-point masks, W_1 rows with W_2's columns and the z-point masks. The function is unchanged."""
    w = {k: np.array(v, copy=True) for k, v in weights.items()}
    out_masks = [[{p: list(e[p]) for p in POINTS} for e in layer] for layer in masks]
    for l in range(len(masks)):
        pre = f"layers.{l}."
        for kind, point in (("qk", None), ("v", "h"), ("z", "z")):
            perm = np.arange(split.mlp_hidden if kind == "z" else split.d_model)
            for natural_units, ranked in zip(groups(split, kind), modes.order[kind][l]):
                perm[natural_units] = ranked  # new position natural_units[j] holds old unit ranked[j]
            for name, axis in UNIT_WEIGHTS[kind]:
                a = w[pre + name]
                w[pre + name] = a[perm] if axis == 0 else a[:, perm]
            if point is not None:
                where = np.empty_like(perm)
                where[perm] = np.arange(len(perm))  # old unit -> its new position
                for entry in out_masks[l]:
                    entry[point] = sorted(int(where[c]) for c in entry[point])
    return w, out_masks, natural(modes, split)


def check_counts(raw: Any, split: Split, layers: int) -> str | None:
    """What is wrong with a model's elastic counts (None: nothing): at least two modes, one count
    per layer and group of every kind, each in [1, group size], never growing with the mode."""
    if not isinstance(raw, list) or len(raw) < 2:
        return "needs a list of at least two modes"
    for m, mode in enumerate(raw):
        if not isinstance(mode, dict) or set(mode) != set(KINDS):
            return f"mode {m} must give counts for {', '.join(KINDS)}"
        for kind in KINDS:
            sizes = [len(g) for g in groups(split, kind)]
            layer_counts = mode[kind]
            if not isinstance(layer_counts, list) or len(layer_counts) != layers:
                return f"mode {m} {kind}: one list per layer ({layers})"
            for l, counts in enumerate(layer_counts):
                if (not isinstance(counts, list) or len(counts) != len(sizes)
                        or any(not isinstance(c, int) or not 1 <= c <= n for c, n in zip(counts, sizes))):
                    return f"mode {m} {kind} layer {l}: {len(sizes)} counts, each in [1, group size]"
                if m == 0 and counts != sizes:
                    return f"mode 0 must keep every unit ({kind} layer {l})"
                if m > 0 and any(c > p for c, p in zip(counts, raw[m - 1][kind][l])):
                    return f"mode {m} {kind} layer {l} keeps more units than mode {m - 1}: modes must nest"
    return None
