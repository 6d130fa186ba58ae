"""Training elastic modes (Elastoformer's compress and grow) into one set of weights.

* **Compress** (Elastoformer §4.1): M − 1 rounds of structured L1-norm pruning. Round r prunes, in
  every (layer, head) and (layer, device) group, the live units of the lowest mean absolute weight
  (producer row plus consumer column) down to mode r's count, then fine-tunes what is left. Every
  kind keeps the same share u^(r/(M−1)) of its units, u chosen so that the core needs at most
  ``core_macs`` of the full model's MACs (the paper's p = 1 − (1 − CR)^(1/N) per round, with
  CR = 1 − FLOP_min / FLOP_B: the share removed).
* **Grow** (§4.2): from the core, one mode at a time, the units pruned in the matching round come
  back with the values they had when pruned; only their weights train (gradient masking: every
  other weight, shared with the smaller modes, is frozen), and only their gradients are clipped.

The modes themselves (counts, rank order, MACs) are codegen.elastic's.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from codegen.elastic import KINDS, SHRINK, UNIT_WEIGHTS, Modes, groups, mode_macs, plan_modes
from codegen.partition import Masks


def unit_tensors(modes: Modes, mode: int, split) -> list[dict[str, torch.Tensor]]:
    """`SplitPatchTST.set_units` masks of ``mode`` (0/1 float)."""
    return [{k: torch.from_numpy(v.astype(np.float32)) for k, v in entry.items()} for entry in modes.alive(mode, split)]


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
        model.set_units(unit_tensors(Modes(_order(alive, pruned), [modes.counts[r]]), 0, split))
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
        model.set_units(unit_tensors(modes, m, model.split) if m > 0 else None)
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
