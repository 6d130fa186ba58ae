"""Stepwise pruning of the columns devices exchange (paper §4.2, stepwise as Qin et al.).

Two methods, one schedule:

* **somegather** (cisl): at every layer l, point p ∈ {x, h, y, z} and device j, j's broadcast
  columns c are ranked by the sum of the absolute weights that carry them to OTHER devices,
  Σ over the point's consumer matrices (x: W_Q, W_K, W_V; h: W_O; y: W_1; z: W_2) of
  Σ_{rows o owned by a device ≠ j} |W[o, c]|, and the lowest are no longer broadcast. The
  column itself stays: its owner keeps using it locally.
* **normal** (the Q3 baseline: an allgather split narrowed to the same communication): whole
  columns are removed, for their owner as well, ranked by the sum of all their outgoing weights.
  A residual-stream column (x/y points) is removed from the whole network (its producers in
  embed/pos/W_O/W_2 give 0, every LayerNorm and consumer, the head included, skips it); a
  head-output column (h) of layer l by zeroing the V column producing it; a hidden column (z) by
  zeroing the W_1 row producing it. Every remaining column is broadcast, so at keep ratio κ both
  methods send the same number of columns per round.

Schedule: every stage removes a fixed fraction ``step`` of each device's own columns (rounded, at
least one while above the target) and never goes below the cell's share of
``partition.keep_counts(split, layers, target_keep)`` (the network-wide keep ratio as exact as
whole columns allow, spread over layers, devices and points); stages continue until every cell is at
its target. After each stage the model is
retrained (`run_pruning`'s ``train`` callback).

Everything but `run_pruning` is pure numpy on the weight dict of `modelspec.weight_shapes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from codegen.partition import POINTS, Masks, Split, keep_counts

METHODS = ("none", "somegather", "normal")

CONSUMERS: dict[str, tuple[str, ...]] = {"x": ("wq", "wk", "wv"), "h": ("wo",), "y": ("w1",), "z": ("w2",)}
"""The weight matrices ([out, in], as nn.Linear) that consume each somegather point's columns."""

Counts = list[list[dict[str, int]]]
"""counts[layer][device][point]: how many of its own columns a device keeps (broadcasts) there."""


# --------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------

def consumer_row_owner(split: Split, point: str) -> np.ndarray:
    """Owner device of every output row of the point's consumer matrices."""
    return split.owner_of("z") if point == "y" else split.owner_of("x")


def somegather_scores(weights: dict[str, np.ndarray], split: Split, layer: int, point: str) -> np.ndarray:
    """[width]: Σ over the point's consumers of Σ_{o: owner(o) ≠ owner(c)} |W[o, c]| for every column c."""
    cross = consumer_row_owner(split, point)[:, None] != split.owner_of(point)[None, :]
    total = np.zeros(split.width(point), dtype=np.float64)
    for name in CONSUMERS[point]:
        w = np.abs(np.asarray(weights[f"layers.{layer}.{name}.weight"], dtype=np.float64))
        total += (w * cross).sum(axis=0)
    return total


def normal_scores(weights: dict[str, np.ndarray], split: Split, layers: int) -> dict[str, Any]:
    """Sum of |all outgoing weights| per column: {"r": [F], "h": [[F]] per layer, "z": [[F_h]] per layer}.

    The residual stream's columns ("r") feed W_Q, W_K, W_V and W_1 of every layer and the head.
    """
    F = split.d_model
    head = np.abs(np.asarray(weights["head.weight"], dtype=np.float64))
    r = head.reshape(head.shape[0], -1, F).sum(axis=(0, 1))
    h, z = [], []
    for l in range(layers):
        for name in CONSUMERS["x"] + CONSUMERS["y"]:
            r = r + np.abs(np.asarray(weights[f"layers.{l}.{name}.weight"], dtype=np.float64)).sum(axis=0)
        h.append(np.abs(np.asarray(weights[f"layers.{l}.wo.weight"], dtype=np.float64)).sum(axis=0))
        z.append(np.abs(np.asarray(weights[f"layers.{l}.w2.weight"], dtype=np.float64)).sum(axis=0))
    return {"r": r, "h": h, "z": z}


def keep_top(cols: list[int], scores: np.ndarray, count: int) -> list[int]:
    """The ``count`` columns of ``cols`` with the largest scores (ties: the lower index), ascending."""
    if count >= len(cols):
        return sorted(cols)
    ranked = sorted(cols, key=lambda c: (-float(scores[c]), c))
    return sorted(ranked[:count])


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------

def schedule(width: int, target: int, step: float, start: int | None = None) -> list[int]:
    """Columns kept after each stage, from ``start`` (default ``width``) down to ``target`` columns.

    Each stage removes round(step · width) columns, at least one, never going below the target.
    """
    if not 0.0 < step <= 1.0:
        raise ValueError("step must be in (0, 1]")
    per_stage = max(1, math.floor(step * width + 0.5))
    counts, c = [], width if start is None else start
    while c > target:
        c = max(target, c - per_stage)
        counts.append(c)
    return counts


def stage_counts(split: Split, layers: int, target_keep: float, step: float, method: str = "somegather",
                 start: Counts | None = None) -> list[Counts]:
    """stages[s][layer][device][point]: kept columns after stage s+1, from ``start`` (default: all
    columns; e.g. the counts of a larger keep already reached) to `keep_counts` (the network-wide keep
    ratio as exact as whole columns allow); cells at their target stay there. Normal pruning keeps one
    residual column set (x = y, the same in every layer)."""
    final = keep_counts(split, layers, target_keep, tied_residual=method == "normal")
    if start is not None and any(final[l][k][p] > start[l][k][p] for l in range(layers)
                                 for k in range(split.devices) for p in POINTS):
        raise ValueError(f"keep {target_keep} needs more columns than the starting counts have somewhere")
    per = {(l, k, p): schedule(hi - lo, final[l][k][p], step, None if start is None else start[l][k][p])
           for l in range(layers) for k in range(split.devices) for p in POINTS for lo, hi in [split.own_cols(k, p)]}
    n = max((len(v) for v in per.values()), default=0)
    stages = []
    for s in range(n):
        counts = [[{} for _ in range(split.devices)] for _ in range(layers)]
        for (l, k, p), seq in per.items():
            lo, hi = split.own_cols(k, p)
            counts[l][k][p] = seq[min(s, len(seq) - 1)] if seq else (hi - lo if start is None else start[l][k][p])
        stages.append(counts)
    return stages


# --------------------------------------------------------------------------------------------
# One stage
# --------------------------------------------------------------------------------------------

def prune_somegather(weights: dict[str, np.ndarray], split: Split, masks: Masks, counts: Counts) -> Masks:
    """New masks: every device broadcasts its ``counts[l][k][p]`` best-ranked currently broadcast columns."""
    out: Masks = []
    for l, layer in enumerate(masks):
        scores = {p: somegather_scores(weights, split, l, p) for p in POINTS}
        out.append([{p: keep_top(list(entry[p]), scores[p], counts[l][k][p]) for p in POINTS}
                    for k, entry in enumerate(layer)])
    return out


def prune_normal(weights: dict[str, np.ndarray], split: Split, masks: Masks, counts: Counts) -> Masks:
    """New masks for normal pruning: the live (= broadcast) columns after removing the lowest-ranked.

    The residual stream keeps one column set for all layers (taken from layer 0's x mask) and its
    x and y counts must agree.
    """
    layers = len(masks)
    scores = normal_scores(weights, split, layers)
    residual = []
    for k in range(split.devices):
        if any(counts[l][k][p] != counts[0][k]["x"] for l in range(layers) for p in ("x", "y")):
            raise ValueError("normal pruning keeps one residual column set: x and y counts must agree in every layer")
        residual.append(keep_top(list(masks[0][k]["x"]), scores["r"], counts[0][k]["x"]))
    out: Masks = []
    for l in range(layers):
        out.append([{"x": list(residual[k]), "y": list(residual[k]),
                     "h": keep_top(list(masks[l][k]["h"]), scores["h"][l], counts[l][k]["h"]),
                     "z": keep_top(list(masks[l][k]["z"]), scores["z"][l], counts[l][k]["z"])}
                    for k in range(split.devices)])
    return out


def prune_step(method: str, weights: dict[str, np.ndarray], split: Split, masks: Masks, counts: Counts) -> Masks:
    if method == "somegather":
        return prune_somegather(weights, split, masks, counts)
    if method == "normal":
        return prune_normal(weights, split, masks, counts)
    raise ValueError(f"unknown pruning method {method!r}; expected one of {', '.join(METHODS[1:])}")


# --------------------------------------------------------------------------------------------
# Weights without the pruned parts
# --------------------------------------------------------------------------------------------

def broadcast_matrix(split: Split, masks: Masks, layer: int, point: str) -> np.ndarray:
    """bool [width]: the column is broadcast by its owner at (layer, point)."""
    b = np.zeros(split.width(point), dtype=bool)
    for entry in masks[layer]:
        b[entry[point]] = True
    return b


def drop_pruned_weights(weights: dict[str, np.ndarray], split: Split, masks: Masks,
                        method: str = "somegather") -> dict[str, np.ndarray]:
    """A copy of ``weights`` with every weight the pruned model never uses set to 0 (output unchanged).

    Always: cross-device entries W[o, c] of a consumer whose column c is not broadcast (owner(o) ≠
    owner(c)); the compiler extracts only gathered columns, so these cost no flash anyway.
    ``method="normal"``: also every weight of a dead column, producers and consumers.
    """
    w = {k: np.array(v, dtype=np.float32, copy=True) for k, v in weights.items()}
    layers = len(masks)
    for l in range(layers):
        for p in POINTS:
            dropped = ~broadcast_matrix(split, masks, l, p)
            cross = consumer_row_owner(split, p)[:, None] != split.owner_of(p)[None, :]
            for name in CONSUMERS[p]:
                w[f"layers.{l}.{name}.weight"][cross & dropped[None, :]] = 0.0
    if method != "normal":
        return w
    from codegen.train.model import live_columns  # the model's definition of what is live

    live = live_columns(split, masks)
    dead_r = ~live["r"]
    w["embed.weight"][dead_r] = 0.0
    w["embed.bias"][dead_r] = 0.0
    w["pos"][:, dead_r] = 0.0
    horizon = w["head.weight"].shape[0]
    w["head.weight"].reshape(horizon, -1, split.d_model)[:, :, dead_r] = 0.0
    for l in range(layers):
        p = f"layers.{l}."
        dead_h, dead_z = ~live["h"][l], ~live["z"][l]
        for ln in ("ln1", "ln2"):
            w[p + ln + ".weight"][dead_r] = 0.0
            w[p + ln + ".bias"][dead_r] = 0.0
        for name in ("wq", "wk", "wv", "w1"):
            w[p + name + ".weight"][:, dead_r] = 0.0
        for name in ("wo", "w2"):
            w[p + name + ".weight"][dead_r] = 0.0
            w[p + name + ".bias"][dead_r] = 0.0
        w[p + "wv.weight"][dead_h] = 0.0
        w[p + "wv.bias"][dead_h] = 0.0
        w[p + "wo.weight"][:, dead_h] = 0.0
        w[p + "w1.weight"][dead_z] = 0.0
        w[p + "w1.bias"][dead_z] = 0.0
        w[p + "w2.weight"][:, dead_z] = 0.0
    return w


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

def column_counts(masks: Masks) -> list[list[dict[str, int]]]:
    """counts[layer][device][point] of broadcast columns."""
    return [[{p: len(entry[p]) for p in POINTS} for entry in layer] for layer in masks]


def communication(split: Split, masks: Masks, tokens: int, horizon: int) -> dict[str, Any]:
    """Communication volume of one inference: broadcast columns per round (each carries ``tokens``
    values), against an allgather of the same split. D = 1 communicates nothing."""
    D = split.devices
    layers = len(masks)
    if D == 1:
        per_round = [{p: 0 for p in POINTS} for _ in range(layers)]
        dense = 0
    else:
        per_round = [{p: sum(len(entry[p]) for entry in layer) for p in POINTS} for layer in masks]
        dense = layers * (3 * split.d_model + split.mlp_hidden)
    total = sum(sum(r.values()) for r in per_round)
    return {
        "broadcast_columns": total,
        "allgather_columns": dense,
        "ratio_to_allgather": (total / dense) if dense else 1.0,
        "per_point": {p: sum(r[p] for r in per_round) for p in POINTS},
        "per_layer": per_round,
        "values_per_inference": total * tokens,
        "head_partials": (D - 1) * horizon,
    }


# --------------------------------------------------------------------------------------------
# The stepwise loop
# --------------------------------------------------------------------------------------------

def run_pruning(model, method: str, target_keep: float, step: float, epochs_per_step: int, finetune_epochs: int,
                train: Callable[[str, int], dict[str, Any]], done: int = 0, history: list[dict[str, Any]] | None = None,
                after: Callable[[int, list[dict[str, Any]]], None] | None = None,
                stop: Callable[[], bool] | None = None) -> list[dict[str, Any]] | None:
    """Prune ``model`` (a SplitPatchTST, trained dense) stage by stage; returns the per-stage history.

    ``train(tag, epochs)`` retrains the model in place for ``epochs`` epochs and returns a record
    for the history (e.g. best epoch and validation MSE). Before each stage the model's weights are
    replaced by `drop_pruned_weights` of them (output unchanged), so the ranking sees exactly the
    weights the pruned model uses.

    Resuming: ``done`` steps (the stages, then the fine-tuning as one more) are already in
    ``history`` and in the model (weights and masks); ``after(steps done, history)`` runs after every
    step (to save them); ``stop()`` is asked before every step, and True returns None (stopped).
    """
    from codegen.train.model import state_to_numpy

    if method not in METHODS[1:]:
        raise ValueError(f"unknown pruning method {method!r}; expected one of {', '.join(METHODS[1:])}")
    split = model.split
    prune_own = method == "normal"
    history = list(history or [])
    stages = stage_counts(split, len(model.masks), target_keep, step, method)
    for s, counts in enumerate(stages, start=1):
        if s <= done:
            continue
        if stop is not None and stop():
            return None
        weights = drop_pruned_weights(state_to_numpy(model), split, model.masks, method)
        masks = prune_step(method, weights, split, model.masks, counts)
        model.set_masks(masks, prune_own=prune_own)
        model.load_numpy(drop_pruned_weights(weights, split, masks, method))
        record: dict[str, Any] = {"stage": s, "of": len(stages), "kept": [[dict(c) for c in layer] for layer in counts],
                                  "broadcast_columns": sum(sum(c.values()) for layer in counts for c in layer)}
        if epochs_per_step > 0:
            record.update(train(f"prune {s}/{len(stages)}", epochs_per_step))
        history.append(record)
        if after is not None:
            after(s, history)
    if finetune_epochs > 0 and done <= len(stages):
        if stop is not None and stop():
            return None
        history.append({"stage": "finetune", **train("finetune", finetune_epochs)})
        if after is not None:
            after(len(stages) + 1, history)
    return history
