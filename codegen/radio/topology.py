"""Node placements (metres) for the virtual testbed, reproducible by seed, and link-graph helpers.

A topology is geometry only; the radio's physics (path loss, PRR) lives in physics.py, its seeded
shadowing in channel.py. The link graph here uses the *median* channel (no shadowing): an edge s→r
where the single-transmitter PRR of a ``REF_LENGTH``-byte packet is at least ``LINK_THRESHOLD``. A
Channel's own graph, with its seeded shadowing, comes from ``link_graph(channel.link_prr(L) ...)``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .physics import ChannelParams, link_prr_matrix, mean_rx_power_dbm

REF_LENGTH = 162         # CATS' shipped Mixer packet: P = 150, G = 25 → L = 162 B
LINK_THRESHOLD = 0.9     # PRR for a link to count as an edge of the connectivity graph

HALLWAY_LENGTH_M = 35.0  # paper §5.1: 16 nRF52840 along a 35 m hallway, diameter ≥ 2 hops
HALLWAY_WIDTH_M = 2.0


@dataclass(frozen=True)
class Topology:
    name: str
    positions: np.ndarray                      # [n, 2] metres
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.positions)

    def distances(self) -> np.ndarray:
        p = self.positions
        return np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))

    def link_quality(self, params: ChannelParams = ChannelParams(), length: int = REF_LENGTH) -> np.ndarray:
        """Median single-transmitter PRR [sender, receiver] (no shadowing, no bursts)."""
        return link_quality(self, params, length)

    def adjacency(self, params: ChannelParams = ChannelParams(), length: int = REF_LENGTH,
                  threshold: float = LINK_THRESHOLD) -> np.ndarray:
        return link_graph(self.link_quality(params, length), threshold)

    def hop_diameter(self, params: ChannelParams = ChannelParams(), length: int = REF_LENGTH,
                     threshold: float = LINK_THRESHOLD) -> float:
        return hop_diameter(self.adjacency(params, length, threshold))


# -- graph helpers ------------------------------------------------------------------------------------

def link_quality(topo: Topology | np.ndarray, params: ChannelParams = ChannelParams(),
                 length: int = REF_LENGTH) -> np.ndarray:
    """Median single-transmitter PRR matrix [sender, receiver] of a topology (or position array)."""
    positions = getattr(topo, "positions", topo)
    return link_prr_matrix(mean_rx_power_dbm(positions, params), length, params)


def link_graph(quality: np.ndarray, threshold: float = LINK_THRESHOLD) -> np.ndarray:
    """Undirected adjacency: an edge where the PRR is ≥ threshold in *both* directions."""
    q = np.asarray(quality)
    adj = (q >= threshold) & (q.T >= threshold)
    np.fill_diagonal(adj, False)
    return adj


def hop_distances(adjacency: np.ndarray) -> np.ndarray:
    """All-pairs hop counts by BFS; −1 where unreachable."""
    adj = np.asarray(adjacency, dtype=bool)
    n = len(adj)
    nbrs = [np.flatnonzero(adj[i]).tolist() for i in range(n)]
    dist = np.full((n, n), -1, dtype=int)
    for src in range(n):
        dist[src, src] = 0
        q = deque([src])
        while q:
            v = q.popleft()
            for w in nbrs[v]:
                if dist[src, w] < 0:
                    dist[src, w] = dist[src, v] + 1
                    q.append(w)
    return dist


def is_connected(adjacency: np.ndarray) -> bool:
    return bool((hop_distances(adjacency) >= 0).all())


def hop_diameter(adjacency: np.ndarray) -> float:
    """Largest hop count between two nodes; ``math.inf`` if the graph is disconnected."""
    d = hop_distances(adjacency)
    return math.inf if (d < 0).any() else int(d.max())


# -- placements ---------------------------------------------------------------------------------------

def full_mesh(n: int, seed: int = 0, side: float = 3.0) -> Topology:
    """n nodes uniformly in a side×side square (default 3 m): every link is near-perfect."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0.0, side, (n, 2))
    return Topology("full_mesh", pos, {"side_m": side, "seed": seed})


def line(n: int, seed: int = 0, spacing: float = 5.0, jitter: float = 0.0) -> Topology:
    """n nodes on the x axis, ``spacing`` metres apart, optionally jittered ±jitter along the axis."""
    rng = np.random.default_rng(seed)
    x = np.arange(n) * spacing + rng.uniform(-jitter, jitter, n)
    return Topology("line", np.c_[x, np.zeros(n)], {"spacing_m": spacing, "jitter_m": jitter, "seed": seed})


def grid(rows: int, cols: int, seed: int = 0, spacing: float = 5.0, jitter: float = 0.0) -> Topology:
    """rows×cols nodes, row-major numbering, ``spacing`` metres apart, optional uniform ±jitter."""
    rng = np.random.default_rng(seed)
    yy, xx = np.divmod(np.arange(rows * cols), cols)
    pos = np.c_[xx, yy].astype(float) * spacing + rng.uniform(-jitter, jitter, (rows * cols, 2))
    return Topology("grid", pos, {"rows": rows, "cols": cols, "spacing_m": spacing, "jitter_m": jitter,
                                  "seed": seed})


def random_geometric(n: int, seed: int = 0, width: float = 40.0, height: float = 20.0,
                     params: ChannelParams = ChannelParams(), length: int = REF_LENGTH,
                     threshold: float = LINK_THRESHOLD, max_tries: int = 1000) -> Topology:
    """n nodes uniform in a width×height area, resampled (same seed stream) until the median link
    graph at ``threshold`` is connected."""
    rng = np.random.default_rng(seed)
    for attempt in range(max_tries):
        pos = np.c_[rng.uniform(0.0, width, n), rng.uniform(0.0, height, n)]
        adj = link_graph(link_quality(pos, params, length), threshold)
        if is_connected(adj):
            return Topology("random_geometric", pos,
                            {"width_m": width, "height_m": height, "seed": seed, "attempts": attempt + 1,
                             "threshold": threshold, "length": length, "hop_diameter": hop_diameter(adj)})
    raise ValueError(f"no connected placement of {n} nodes in {width}×{height} m after {max_tries} tries; "
                     f"shrink the area or lower the threshold")


def hallway(n: int = 16, seed: int = 0, length: float = HALLWAY_LENGTH_M, width: float = HALLWAY_WIDTH_M,
            jitter: float | None = None, params: ChannelParams = ChannelParams(),
            ref_length: int = REF_LENGTH, threshold: float = LINK_THRESHOLD,
            min_diameter: int = 2, max_tries: int = 1000) -> Topology:
    """n nodes along a length×width hallway: evenly spaced along x with ±jitter (default a quarter
    of the spacing), uniform across y. Resampled until the median link graph is connected with a hop
    diameter ≥ ``min_diameter`` (the paper's testbed: ≥ 2 hops)."""
    if n < 2:
        raise ValueError("a hallway needs at least two nodes")
    spacing = length / (n - 1)
    jitter = spacing / 4 if jitter is None else jitter
    rng = np.random.default_rng(seed)
    for attempt in range(max_tries):
        x = np.clip(np.arange(n) * spacing + rng.uniform(-jitter, jitter, n), 0.0, length)
        y = rng.uniform(0.0, width, n)
        pos = np.c_[x, y]
        adj = link_graph(link_quality(pos, params, ref_length), threshold)
        diam = hop_diameter(adj)
        if diam != math.inf and diam >= min_diameter:
            return Topology("hallway" if n != 16 else "hallway16", pos,
                            {"length_m": length, "width_m": width, "spacing_m": spacing, "jitter_m": jitter,
                             "seed": seed, "attempts": attempt + 1, "threshold": threshold,
                             "length": ref_length, "hop_diameter": diam})
    raise ValueError(f"no hallway placement of {n} nodes over {length} m with a connected graph of "
                     f"diameter ≥ {min_diameter} after {max_tries} tries (check the radio parameters)")


def hallway16(seed: int = 0, **params) -> Topology:
    """The paper's testbed: 16 nodes along a 35 m, 2 m wide hallway; diameter ≥ 2 hops (asserted)."""
    topo = hallway(16, seed, **params)
    assert topo.metadata["hop_diameter"] >= 2, topo.metadata
    return topo


TOPOLOGIES = ("full_mesh", "line", "grid", "random_geometric", "hallway", "hallway16")


def default_topology(n: int) -> str:
    """The virtual testbed's default for n nodes: the paper's 35 m hallway (≥ 2 hops) from 4 nodes
    on (``hallway16`` for 16), a small mesh below that (a 35 m hallway cannot be spanned by 2 or 3)."""
    if n == 16:
        return "hallway16"
    return "hallway" if n >= 4 else "full_mesh"


def topology(name: str, n: int | None = None, seed: int = 0, **params) -> Topology:
    """Factory: ``topology("line", 8, seed, spacing=4.0)``, ``topology("grid", 12, rows=3)``,
    ``topology("hallway16", seed=3)``. For ``grid``, give ``rows`` and/or ``cols`` (else near-square)."""
    if name == "hallway16":
        if n not in (None, 16):
            raise ValueError(f"hallway16 has 16 nodes, not {n}")
        return hallway16(seed, **params)
    if n is None or n < 1:
        raise ValueError(f"topology {name!r} needs a node count n ≥ 1")
    if name == "full_mesh":
        return full_mesh(n, seed, **params)
    if name == "line":
        return line(n, seed, **params)
    if name == "grid":
        rows, cols = params.pop("rows", None), params.pop("cols", None)
        if rows is None and cols is None:
            rows = int(math.floor(math.sqrt(n)))
            while n % rows:
                rows -= 1
        rows = rows if rows is not None else n // cols
        cols = cols if cols is not None else n // rows
        if rows * cols != n:
            raise ValueError(f"grid {rows}×{cols} does not hold {n} nodes")
        return grid(rows, cols, seed, **params)
    if name == "random_geometric":
        return random_geometric(n, seed, **params)
    if name == "hallway":
        return hallway(n, seed, **params)
    raise ValueError(f"unknown topology {name!r}; known: {', '.join(TOPOLOGIES)}")
