"""The D-way split of the model: who owns which heads and columns, and somegather masks.

Pure numpy/stdlib; shared by training, the ONNX builder and `cisl compile` so that nobody
re-derives the split differently (docs/design/decisions.md §3).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

POINTS = ("x", "h", "y", "z")
"""The four somegather points of a layer: layer input, head outputs, block output, hidden."""


def even_split(total: int, parts: int) -> list[int]:
    """Split ``total`` items into ``parts`` contiguous groups as evenly as possible (larger first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def ranges(sizes: list[int]) -> list[tuple[int, int]]:
    """Half-open [lo, hi) ranges of consecutive groups of the given sizes."""
    out, lo = [], 0
    for s in sizes:
        out.append((lo, lo + s))
        lo += s
    return out


def distribute(widths: dict, target: int, groups: dict, minimum: int = 0, extra: dict | None = None) -> dict:
    """Whole-column counts per cell, summing to ``target`` (clamped to what the cells allow).

    ``widths[cell]`` is a cell's own columns, ``groups[cell]`` the tuple of groups it belongs to
    (e.g. its device and its Mixer round). Every cell first gets floor(κ·w) with κ = target / Σ w
    (at least ``minimum``, never more than w); the remaining columns go one at a time to the cell
    with the largest unrounded remainder κ·w − count, ties to the cell whose groups have received
    the fewest extra columns so far, so the remainder is spread across devices and rounds instead
    of piling up on the first ones. ``extra`` carries those group counts across calls.
    """
    cells = [c for c in widths if widths[c] > 0]
    out = {c: 0 for c in widths}
    if not cells:
        return out
    total = sum(widths[c] for c in cells)
    target = min(total, max(minimum * len(cells), target))
    ratio = target / total
    for c in cells:
        out[c] = min(widths[c], max(minimum, math.floor(ratio * widths[c] + 1e-9)))
    extra = {} if extra is None else extra
    left = target - sum(out.values())

    def key(i: int, c) -> tuple:
        # the remainder decides; then the groups' extra columns so far, then the cell order
        return (out[c] - ratio * widths[c], sum(extra.get(g, 0) for g in groups[c]), i)

    heap = [key(i, c) for i, c in enumerate(cells)]
    heapq.heapify(heap)
    while left > 0 and heap:
        # lazy keys: a popped key may be stale (its groups got columns since); keys only grow
        i = heapq.heappop(heap)[2]
        c = cells[i]
        if out[c] >= widths[c]:
            continue
        fresh = key(i, c)
        if heap and fresh > heap[0]:
            heapq.heappush(heap, fresh)
            continue
        out[c] += 1
        for g in groups[c]:
            extra[g] = extra.get(g, 0) + 1
        left -= 1
        heapq.heappush(heap, key(i, c))
    return out


def keep_counts(split: "Split", layers: int, keep: float, tied_residual: bool = False) -> list[list[dict[str, int]]]:
    """counts[layer][device][point]: columns each device broadcasts so that the network-wide share
    of an allgather's columns is ``keep`` as closely as whole columns allow.

    The target is round(keep · layers · (3F + F_h)) columns (what `pruning.communication` counts),
    spread by `distribute` first over the devices (by their own columns), then over each device's
    (layer, point) cells, ties going to the Mixer rounds that have had the fewest extra columns. A device may broadcast nothing at a
    point (its columns then stay local; the C and Mixer handle empty messages).
    ``tied_residual`` (normal pruning: one residual column set for the whole network): a device's
    x and y counts are equal and the same in every layer, at least one column (its LayerNorm needs
    one); their share is fixed first from F alone, then h and z take the rest of the target.
    """
    if not 0.0 < keep <= 1.0:
        raise ValueError("keep must be in (0, 1]")
    D, L = split.devices, layers
    counts = [[{p: 0 for p in POINTS} for _ in range(D)] for _ in range(L)]
    target = math.floor(keep * L * (3 * split.d_model + split.mlp_hidden) + 0.5)
    points = POINTS
    if tied_residual:
        widths = {k: split.model_cols(k)[1] - split.model_cols(k)[0] for k in range(D)}
        res = distribute(widths, math.floor(keep * split.d_model + 0.5), {k: (k,) for k in range(D)}, minimum=1)
        for l in range(L):
            for k in range(D):
                counts[l][k]["x"] = counts[l][k]["y"] = res[k]
        target -= 2 * L * sum(res.values())
        points = ("h", "z")
    def width(k: int, p: str) -> int:
        lo, hi = split.own_cols(k, p)
        return hi - lo

    per_device = distribute({k: L * sum(width(k, p) for p in points) for k in range(D)}, target,
                            {k: () for k in range(D)})
    rounds: dict = {}
    for k in range(D):
        cells = {(l, p): width(k, p) for l in range(L) for p in points}
        groups = {(l, p): (("round", l, p), ("layer", l)) for l, p in cells}
        for (l, p), c in distribute(cells, per_device[k], groups, extra=rounds).items():
            counts[l][k][p] = c
    return counts


def keep_share(split: "Split", counts: list[list[dict[str, int]]]) -> float:
    """The network-wide keep ratio that ``counts`` realise: broadcast columns / an allgather's."""
    dense = len(counts) * (3 * split.d_model + split.mlp_hidden)
    return sum(sum(entry.values()) for layer in counts for entry in layer) / dense if dense else 1.0


def realised_keep(split: "Split", masks: "Masks") -> float:
    """The network-wide keep ratio that ``masks`` realise (1.0 for one device: nothing is sent)."""
    if split.devices == 1:
        return 1.0
    return keep_share(split, [[{p: len(entry[p]) for p in POINTS} for entry in layer] for layer in masks])


@dataclass(frozen=True)
class Split:
    """Ownership of heads, columns and MLP hidden units for D devices.

    ``heads_per_device`` may be uneven (the planner's splits); ``hidden_per_device`` too. Left
    empty, the hidden units are spread evenly (every split before `cisl plan`, and every model.onnx
    without cisl.hidden_per_device); they are then filled in, so equal splits compare equal.
    """

    devices: int
    heads: int
    d_model: int
    mlp_hidden: int
    heads_per_device: tuple[int, ...]
    hidden_per_device: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.hidden_per_device:
            object.__setattr__(self, "hidden_per_device", tuple(even_split(self.mlp_hidden, self.devices)))

    @staticmethod
    def even(devices: int, heads: int, d_model: int, mlp_hidden: int) -> "Split":
        if devices < 1:
            raise ValueError("devices must be >= 1")
        if devices > heads:
            raise ValueError(f"{devices} devices but only {heads} heads: each device needs a head")
        return Split(devices, heads, d_model, mlp_hidden, tuple(even_split(heads, devices)))

    @staticmethod
    def uneven(heads_per_device, hidden_per_device, d_model: int) -> "Split":
        """The split with these heads and hidden units per device (check them with `uneven_problem`)."""
        heads, hidden = tuple(int(h) for h in heads_per_device), tuple(int(h) for h in hidden_per_device)
        return Split(len(heads), sum(heads), d_model, sum(hidden), heads, hidden)

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def is_even(self) -> bool:
        """The split `Split.even` makes for this many devices (what every model before `cisl plan` has)."""
        return (self.heads_per_device == tuple(even_split(self.heads, self.devices))
                and self.hidden_per_device == tuple(even_split(self.mlp_hidden, self.devices)))

    def head_range(self, k: int) -> tuple[int, int]:
        return ranges(list(self.heads_per_device))[k]

    def model_cols(self, k: int) -> tuple[int, int]:
        """Columns of X, Y, head outputs (and W_O/W_2 outputs) owned by device k."""
        lo, hi = self.head_range(k)
        return lo * self.d_head, hi * self.d_head

    def hidden_cols(self, k: int) -> tuple[int, int]:
        """Columns of the MLP hidden activation (W_1 outputs) owned by device k."""
        return ranges(list(self.hidden_per_device))[k]

    def own_cols(self, k: int, point: str) -> tuple[int, int]:
        return self.hidden_cols(k) if point == "z" else self.model_cols(k)

    def width(self, point: str) -> int:
        return self.mlp_hidden if point == "z" else self.d_model

    def owner_of(self, point: str) -> np.ndarray:
        """Owner device of every global column at ``point``."""
        owner = np.empty(self.width(point), dtype=np.int64)
        for k in range(self.devices):
            lo, hi = self.own_cols(k, point)
            owner[lo:hi] = k
        return owner


def uneven_problem(heads: list[int], hidden: list[int], model_heads: int, model_hidden: int) -> str | None:
    """What is wrong with per-device heads and hidden units for a model (None: nothing): every
    device computes (>= 1 head and >= 1 hidden unit), and the counts add up to the model's."""
    if len(heads) != len(hidden) or not heads:
        return f"a split needs as many hidden counts as head counts ({len(heads)} vs {len(hidden)}), at least one"
    if sum(heads) != model_heads or sum(hidden) != model_hidden:
        return (f"the split holds {sum(heads)} heads and {sum(hidden)} hidden units; the model has {model_heads} "
                f"and {model_hidden}")
    bad = [k for k in range(len(heads)) if heads[k] < 1 or hidden[k] < 1]
    if bad:
        return (f"node {bad[0]} of the split has {heads[bad[0]]} heads and {hidden[bad[0]]} hidden units; every "
                f"node of a plan computes (at least one of each); leave a node out of the split instead")
    return None


Masks = list[list[dict[str, list[int]]]]
"""masks[layer][device][point] = ascending global columns that device broadcasts at that point."""


def full_masks(split: Split, layers: int) -> Masks:
    """Every device broadcasts every own column (allgather, keep ratio 1)."""
    return [
        [{p: list(range(*split.own_cols(k, p))) for p in POINTS} for k in range(split.devices)]
        for _ in range(layers)
    ]


def random_masks(split: Split, layers: int, keep_ratio: float, seed: int) -> Masks:
    """Seeded random masks (not the paper's pruning: columns drawn at random, untrained) broadcasting
    `keep_counts` columns per layer, device and point, so the network-wide share is ``keep_ratio``."""
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError("keep_ratio must be in (0, 1]")
    rng = np.random.default_rng(seed)
    counts = keep_counts(split, layers, keep_ratio)
    masks: Masks = []
    for l in range(layers):
        layer = []
        for k in range(split.devices):
            entry = {}
            for p in POINTS:
                lo, hi = split.own_cols(k, p)
                t = counts[l][k][p]
                cols = rng.choice(np.arange(lo, hi), size=t, replace=False) if t < hi - lo else np.arange(lo, hi)
                entry[p] = sorted(int(c) for c in cols)
            layer.append(entry)
        masks.append(layer)
    return masks


def masks_are_full(split: Split, masks: Masks) -> bool:
    return all(
        masks[l][k][p] == list(range(*split.own_cols(k, p)))
        for l in range(len(masks))
        for k in range(split.devices)
        for p in POINTS
    )


def gathered_cols(split: Split, masks: Masks, layer: int, point: str, k: int, prune_own: bool = False) -> list[int]:
    """Ascending global columns device k holds after the somegather at (layer, point).

    ``prune_own`` (normal pruning): a column its owner does not broadcast is dead for the owner too,
    so of its own columns a device holds only the broadcast ones."""
    lo, hi = split.own_cols(k, point)
    cols = set(masks[layer][k][point]) if prune_own else set(range(lo, hi))
    for j in range(split.devices):
        if j != k:
            cols.update(masks[layer][j][point])
    return sorted(cols)


def residual_problem(masks: Masks) -> str | None:
    """Normal pruning keeps one residual column set per device: its x and y masks are the same in
    every layer. None if they are, else what differs."""
    for l, layer in enumerate(masks):
        for k, entry in enumerate(layer):
            for p in ("x", "y"):
                if sorted(entry[p]) != sorted(masks[0][k]["x"]):
                    return (f"device {k} keeps other residual columns at layer {l} point '{p}' than at layer 0 "
                            "point 'x'; normal pruning removes a residual column everywhere")
    return None


def gather_matrix(split: Split, masks: Masks, layer: int, point: str) -> np.ndarray:
    """Boolean [D, width]: G[k, f] is True if device k holds column f after the somegather."""
    g = np.zeros((split.devices, split.width(point)), dtype=bool)
    for k in range(split.devices):
        g[k, gathered_cols(split, masks, layer, point, k)] = True
    return g


def validate_masks(split: Split, masks: Masks, layers: int) -> str | None:
    """Return a description of the first problem with ``masks``, or None if they are valid."""
    if len(masks) != layers:
        return f"masks cover {len(masks)} layers, the model has {layers}"
    for l, layer in enumerate(masks):
        if len(layer) != split.devices:
            return f"layer {l} has masks for {len(layer)} devices, expected {split.devices}"
        for k, entry in enumerate(layer):
            for p in POINTS:
                if p not in entry:
                    return f"layer {l} device {k} has no mask for point '{p}'"
                cols = entry[p]
                lo, hi = split.own_cols(k, p)
                if list(cols) != sorted(set(cols)) or any(not lo <= c < hi for c in cols):
                    return (f"layer {l} device {k} point '{p}': columns must be ascending, unique "
                            f"and within the device's own columns [{lo}, {hi})")
    return None
