"""The D-way split of the model: who owns which heads and columns, and somegather masks.

Pure numpy/stdlib; shared by training, the ONNX builder and `cisl compile` so that nobody
re-derives the split differently (docs/design/decisions.md §3).
"""

from __future__ import annotations

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


def kept_count(width: int, keep_ratio: float) -> int:
    """Columns a device broadcasts out of ``width`` own columns at keep ratio ``keep_ratio``."""
    if width == 0:
        return 0
    return min(width, max(1, math.ceil(keep_ratio * width - 1e-9)))


@dataclass(frozen=True)
class Split:
    """Ownership of heads and columns for D devices."""

    devices: int
    heads: int
    d_model: int
    mlp_hidden: int
    heads_per_device: tuple[int, ...]

    @staticmethod
    def even(devices: int, heads: int, d_model: int, mlp_hidden: int) -> "Split":
        if devices < 1:
            raise ValueError("devices must be >= 1")
        if devices > heads:
            raise ValueError(f"{devices} devices but only {heads} heads: each device needs a head")
        return Split(devices, heads, d_model, mlp_hidden, tuple(even_split(heads, devices)))

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    def head_range(self, k: int) -> tuple[int, int]:
        return ranges(list(self.heads_per_device))[k]

    def model_cols(self, k: int) -> tuple[int, int]:
        """Columns of X, Y, head outputs (and W_O/W_2 outputs) owned by device k."""
        lo, hi = self.head_range(k)
        return lo * self.d_head, hi * self.d_head

    def hidden_cols(self, k: int) -> tuple[int, int]:
        """Columns of the MLP hidden activation (W_1 outputs) owned by device k."""
        return ranges(even_split(self.mlp_hidden, self.devices))[k]

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


Masks = list[list[dict[str, list[int]]]]
"""masks[layer][device][point] = ascending global columns that device broadcasts at that point."""


def full_masks(split: Split, layers: int) -> Masks:
    """Every device broadcasts every own column (allgather, keep ratio 1)."""
    return [
        [{p: list(range(*split.own_cols(k, p))) for p in POINTS} for k in range(split.devices)]
        for _ in range(layers)
    ]


def random_masks(split: Split, layers: int, keep_ratio: float, seed: int) -> Masks:
    """Seeded random masks keeping ``kept_count`` columns per device and point."""
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError("keep_ratio must be in (0, 1]")
    rng = np.random.default_rng(seed)
    masks: Masks = []
    for _ in range(layers):
        layer = []
        for k in range(split.devices):
            entry = {}
            for p in POINTS:
                lo, hi = split.own_cols(k, p)
                t = kept_count(hi - lo, keep_ratio)
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


def gathered_cols(split: Split, masks: Masks, layer: int, point: str, k: int) -> list[int]:
    """Ascending global columns device k holds after the somegather at (layer, point)."""
    lo, hi = split.own_cols(k, point)
    cols = set(range(lo, hi))
    for j in range(split.devices):
        if j != k:
            cols.update(masks[layer][j][point])
    return sorted(cols)


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
