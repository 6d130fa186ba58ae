"""Elastic modes: one set of weights, several nested models (Elastoformer's compress and grow).

A *mode* keeps, in every layer, a prefix of each head's Q/K dimensions and V dimensions
("attention") and of each device's MLP hidden units ("hidden"), in a fixed rank order; mode 0 is
the largest (every unit), mode M − 1 the core. Mode m + 1's units are a subset of mode m's, and so
are the weights it uses, so one stored model serves every mode (docs/design/elastic.md).

* **Compress** (Elastoformer §4.1): M − 1 rounds of structured L1-norm pruning. Round r prunes, in
  every (layer, head) and (layer, device) group, the live units of the lowest mean absolute weight
  (producer row plus consumer column) down to mode r's count, then fine-tunes what is left. Every
  kind keeps the same share u^(r/(M−1)) of its units, u chosen so that the core needs at most
  ``core_macs`` of the full model's MACs (the paper's p = 1 − (1 − CR)^(1/N) per round, with
  CR = 1 − FLOP_min / FLOP_B: the share removed).
* **Grow** (§4.2): from the core, one mode at a time, the units pruned in the matching round come
  back with the values they had when pruned; only their weights train (gradient masking: every
  other weight, shared with the smaller modes, is frozen), and only their gradients are clipped.

Units, as `SplitPatchTST.set_units` takes them: "qk" a column of W_Q and W_K (one Q/K dimension of
one head), "v" a row of W_V (a head-output column, consumed by W_O), "z" a row of W_1 (a hidden
unit, consumed by W_2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from codegen.modelspec import ModelConfig
from codegen.partition import Masks, Split, gathered_cols

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

    def masks(self, mode: int, split: Split) -> list[dict[str, torch.Tensor]]:
        """`SplitPatchTST.set_units` masks of ``mode``."""
        out = []
        for l in range(len(self.order["qk"])):
            entry = {}
            for kind in KINDS:
                m = torch.zeros(split.mlp_hidden if kind == "z" else split.d_model)
                m[self.units(mode, kind, l)] = 1.0
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
# Compress: structured L1-norm pruning, round by round
# --------------------------------------------------------------------------------------------

def unit_scores(state: dict[str, torch.Tensor], layer: int, kind: str) -> np.ndarray:
    """Saliency of every unit of ``kind`` in ``layer``: the mean absolute weight of its producer
    row(s) plus that of its consumer column (Elastoformer's L1 norm of rows, for both sides)."""
    p = f"layers.{layer}."
    score = None
    for name, axis in UNIT_WEIGHTS[kind]:
        if name.endswith(".bias"):
            continue
        w = state[p + name].detach().abs().double()
        s = (w.mean(dim=1) if axis == 0 else w.mean(dim=0)).numpy()
        score = s if score is None else score + s
    return score


def compress(model, modes: Modes, retrain: Callable[[str, int], dict], epochs: int,
             ) -> tuple[Modes, list[dict[str, torch.Tensor]], list[dict]]:
    """Prune ``model`` (in place) down to the core, one mode per round, fine-tuning ``epochs``
    after each; returns the modes with their rank order, the state at every round's pruning
    (snapshots[r]: the weights of the units pruned in round r as they were then) and the history."""
    split, layers = model.split, model.cfg.layers
    alive = {kind: [[list(g) for g in groups(split, kind)] for _ in range(layers)] for kind in KINDS}
    pruned: dict[str, list[list[list[int]]]] = {k: [[[] for _ in groups(split, k)] for _ in range(layers)]
                                                for k in KINDS}
    snapshots = [{}]
    history = []
    for r in range(1, modes.count):
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        snapshots.append(state)
        for kind in KINDS:
            for l in range(layers):
                score = unit_scores(state, l, kind)
                for g, units in enumerate(alive[kind][l]):
                    ranked = sorted(units, key=lambda c: (-score[c], c))
                    keep = modes.counts[r][kind][l][g]
                    # the last pruned come back first: prepend this round's losers to the tail
                    pruned[kind][l][g] = ranked[keep:] + pruned[kind][l][g]
                    alive[kind][l][g] = ranked[:keep]
        model.set_units(Modes(_order(alive, pruned), [modes.counts[r]]).masks(0, split))
        history.append({"stage": f"compress {r}", **(retrain(f"elastic compress {r}", epochs) if epochs else {})})
    state = model.state_dict()
    final = {}
    for kind in KINDS:  # the core's own units ranked by their scores after the last fine-tuning
        final[kind] = []
        for l in range(layers):
            score = unit_scores(state, l, kind)
            final[kind].append([sorted(units, key=lambda c: (-score[c], c)) for units in alive[kind][l]])
    return Modes(_order(final, pruned), modes.counts), snapshots, history


def _order(alive: dict, pruned: dict) -> dict[str, list[list[list[int]]]]:
    return {k: [[alive[k][l][g] + pruned[k][l][g] for g in range(len(alive[k][l]))] for l in range(len(alive[k]))]
            for k in KINDS}


# --------------------------------------------------------------------------------------------
# Grow: the pruned units back, one mode at a time, the inherited weights frozen
# --------------------------------------------------------------------------------------------

def unit_masks(model, modes: Modes, new_mode: int) -> dict[str, torch.Tensor]:
    """Per parameter name, a 0/1 mask of the entries that belong to the units ``new_mode`` has and
    ``new_mode + 1`` has not (the weights growing into ``new_mode``); parameters without any are left out."""
    out: dict[str, torch.Tensor] = {}
    params = dict(model.named_parameters())
    for l in range(model.cfg.layers):
        for kind in KINDS:
            new = sorted(set(modes.units(new_mode, kind, l)) - set(modes.units(new_mode + 1, kind, l)))
            if not new:
                continue
            for name, axis in UNIT_WEIGHTS[kind]:
                full = f"layers.{l}.{name}"
                m = out.setdefault(full, torch.zeros_like(params[full]))
                if axis == 0:
                    m[new] = 1.0
                else:
                    m[:, new] = 1.0
    return out


def grow(model, modes: Modes, snapshots: list[dict[str, torch.Tensor]], retrain: Callable[[str, int], dict],
         epochs: int, clip: float) -> list[dict]:
    """From the core to mode 0: restore each round's pruned units (their values at pruning) and
    train only them (``epochs`` per mode; gradients of the frozen weights are zero, those of the
    new ones clipped to norm ``clip`` per parameter, 0 = no clipping)."""
    history = []
    params = dict(model.named_parameters())
    for m in range(modes.count - 2, -1, -1):
        grads = unit_masks(model, modes, m)
        with torch.no_grad():
            for name, mask in grads.items():  # the values these units had when round m + 1 pruned them
                p = params[name]
                p.copy_(torch.where(mask.bool(), snapshots[m + 1][name], p))
        model.set_units(modes.masks(m, model.split) if m > 0 else None)
        hooks, frozen = [], []
        for name, p in params.items():
            if name not in grads:
                if p.requires_grad:
                    p.requires_grad_(False)
                    frozen.append(p)
                continue
            hooks.append(p.register_hook(_masked_clipped(grads[name], clip)))
        try:
            history.append({"stage": f"grow {m}", **(retrain(f"elastic grow {m}", epochs) if epochs else {})})
        finally:
            for h in hooks:
                h.remove()
            for p in frozen:
                p.requires_grad_(True)
    model.set_units(None)
    return history


def _masked_clipped(mask: torch.Tensor, clip: float) -> Callable[[torch.Tensor], torch.Tensor]:
    def hook(g: torch.Tensor) -> torch.Tensor:
        g = g * mask
        if clip > 0:
            norm = float(g.norm())
            if norm > clip:
                g = g * (clip / norm)
        return g
    return hook


def make_elastic(model, masks: Masks, count: int, core_macs: float, shrink: tuple[str, ...],
                 retrain: Callable[[str, int], dict], compress_epochs: int, grow_epochs: int,
                 clip: float) -> tuple[Modes, dict[str, Any]]:
    """Compress and grow ``model`` (in place) into ``count`` nested modes; returns the modes and a
    record (the core's unit share, MACs per mode, the phases' history)."""
    kinds = tuple(k for s in shrink for k in SHRINK[s])
    cfg, split = model.cfg, model.split
    planned, share = plan_modes(cfg, split, masks, count, core_macs, kinds)
    modes, snapshots, history = compress(model, planned, retrain, compress_epochs)
    history += grow(model, modes, snapshots, retrain, grow_epochs, clip)
    macs = [mode_macs(cfg, split, masks, modes, m) for m in range(count)]
    return modes, {"modes": count, "shrink": list(shrink), "core_share": share, "core_macs_target": core_macs,
                   "macs": macs, "macs_share": [x / macs[0] for x in macs], "history": history}
