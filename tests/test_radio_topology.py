"""Topologies: reproducible by seed, connectivity, hop diameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codegen.radio.channel import Channel
from codegen.radio.physics import ChannelParams
from codegen.radio.topology import (LINK_THRESHOLD, REF_LENGTH, hop_diameter, hop_distances,
                                    is_connected, link_graph, topology)

pytestmark = pytest.mark.unit

CASES = [("full_mesh", 6, {}), ("line", 8, {"jitter": 1.0}), ("grid", 12, {"rows": 3, "jitter": 0.5}),
         ("random_geometric", 16, {}), ("hallway", 10, {}), ("hallway16", None, {})]


@pytest.mark.parametrize("name,n,params", CASES)
def test_reproducible_by_seed(name, n, params):
    a = topology(name, n, seed=3, **params)
    b = topology(name, n, seed=3, **params)
    c = topology(name, n, seed=4, **params)
    assert np.array_equal(a.positions, b.positions) and a.metadata == b.metadata
    assert not np.array_equal(a.positions, c.positions)
    assert a.positions.shape == (a.n, 2) and a.n == (n or 16)


def test_hallway16_matches_the_testbed():
    for seed in range(6):
        t = topology("hallway16", seed=seed)
        assert t.name == "hallway16" and t.n == 16
        x, y = t.positions.T
        assert x.min() >= 0 and x.max() <= 35.0 and y.min() >= 0 and y.max() <= 2.0
        assert x.max() - x.min() > 30.0
        adj = t.adjacency()
        assert is_connected(adj)
        assert 2 <= hop_diameter(adj) < math.inf
        # a channel with its seeded shadowing keeps the testbed's character
        ch = Channel(t, ChannelParams(), seed=seed)
        cadj = link_graph(ch.link_prr(REF_LENGTH), LINK_THRESHOLD)
        assert is_connected(cadj) and hop_diameter(cadj) >= 2


def test_random_geometric_is_connected():
    for seed in range(5):
        t = topology("random_geometric", 16, seed=seed, width=60.0, height=30.0)
        assert is_connected(t.adjacency())
        assert t.metadata["hop_diameter"] == t.hop_diameter()
        assert (t.positions >= 0).all() and (t.positions[:, 0] <= 60).all() and (t.positions[:, 1] <= 30).all()
    with pytest.raises(ValueError, match="no connected placement"):
        topology("random_geometric", 16, seed=0, width=1000.0, height=1000.0, max_tries=5)


def test_simple_shapes():
    assert topology("full_mesh", 10, seed=1).hop_diameter() == 1
    line = topology("line", 6, spacing=20.0)                  # only neighbours hear each other
    assert np.allclose(line.positions[:, 0], np.arange(6) * 20.0)
    assert line.hop_diameter() == 5
    g = topology("grid", 12, rows=3, spacing=10.0)
    assert g.metadata["rows"] == 3 and g.metadata["cols"] == 4
    assert np.allclose(g.positions[5], [10.0, 10.0])          # row-major numbering
    assert topology("grid", 12).metadata["rows"] == 3
    with pytest.raises(ValueError):
        topology("grid", 12, rows=5)
    with pytest.raises(ValueError, match="unknown topology"):
        topology("ring", 5)
    with pytest.raises(ValueError):
        topology("hallway16", 8)


def test_link_quality_decreases_with_distance():
    t = topology("line", 8, spacing=5.0)
    q = t.link_quality()
    assert np.all(np.diff(q[0, 1:]) <= 0)
    assert np.allclose(q, q.T) and np.all(np.diag(q) == 0)


def test_graph_helpers():
    adj = np.zeros((5, 5), bool)
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        adj[a, b] = adj[b, a] = True
    d = hop_distances(adj)
    assert d[0, 3] == 3 and d[3, 0] == 3 and d[0, 4] == -1
    assert not is_connected(adj) and hop_diameter(adj) == math.inf
    adj[3, 4] = adj[4, 3] = True
    assert is_connected(adj) and hop_diameter(adj) == 4
    # an asymmetric link is no edge
    q = np.array([[0, 0.95], [0.5, 0]])
    assert not link_graph(q, 0.9).any()
