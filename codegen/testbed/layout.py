"""Where a testbed's nodes are for the radio: one rule for `cisl plan` (the rounds it prices), `cisl
estimate --testbed`, `cisl sim --testbed` and the virtual testbed's medium, so that a split runs on
the layout it was planned on (docs/usage.md, "The testbed file").

For the testbed nodes a build uses (plan node k on testbed node ``where[k]``):

* ``[sim] topology = NAME``: that topology laid out for all of the file's nodes (in id order, with
  the file's seed); each node sits at its testbed node's place in it;
* ``[sim] topology = "positions"``: the nodes' ``position``s (every node needs one);
* no ``[sim] topology``: the nodes' positions when every node used has one, else `cisl sim`'s default
  topology for that many nodes (a testbed file without positions says nothing about where they are).

Whether the build came from `cisl plan` does not matter: the same nodes are at the same places.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError

POSITIONS = "positions"  # [sim] topology: the testbed file's [[node]] positions


@dataclass(frozen=True)
class Layout:
    """What a testbed file says about where its nodes are."""

    source: str                                   # the testbed file, for messages
    topology: str | None                          # [sim] topology
    seed: int                                     # [sim] seed
    positions: dict[int, tuple[float, ...] | None]  # every node of the file by id, in id order

    @classmethod
    def of_testbed(cls, tb) -> "Layout":
        return cls(str(tb.path), tb.sim.topology, int(tb.sim.seed), {n.id: n.position for n in tb.nodes})

    @classmethod
    def of_profile(cls, profile) -> "Layout":
        """A profile's copy of its testbed file's layout (`cisl plan` replaces it with the file's own)."""
        return cls(str(profile.meta.get("testbed") or "the profile's testbed"), profile.topology, int(profile.seed),
                   {n.id: n.position for n in sorted(profile.nodes, key=lambda n: n.id)})


def _named(layout: Layout):
    """The named [sim] topology laid out for every node of the file (one line if it cannot be)."""
    from ..radio.topology import topology

    n = len(layout.positions)
    try:
        topo = topology(layout.topology, None if layout.topology == "hallway16" else n, layout.seed)
    except ValueError as e:
        raise UserError(f"{layout.source}: [sim] topology {layout.topology}: {e}") from None
    if topo.n != n:
        raise UserError(f"{layout.source}: [sim] topology {layout.topology} has {topo.n} nodes but the testbed has "
                        f"{n}; choose a topology for {n} nodes, \"{POSITIONS}\", or remove [sim] topology")
    return topo


def check_layout(layout: Layout) -> None:
    """Refuse, in one line, a layout no build could run on (before any work: `cisl testbed check`)."""
    if layout.topology == POSITIONS:
        missing = [k for k, p in layout.positions.items() if p is None]
        if missing:
            raise UserError(f"{layout.source}: [sim] topology = \"{POSITIONS}\" places the nodes by their position, "
                            f"but node {missing[0]} has none; give every [[node]] position = [x, y]")
    elif layout.topology is not None:
        _named(layout)


def place(layout: Layout, where: list[int]) -> dict:
    """The radio layout of the testbed nodes ``where`` (in plan order), by the module's rule:
    ``{"topology": name, "seed": s}`` (a named topology for exactly these nodes) or ``{"topology":
    "positions", "positions": [[x, y], ...], "seed": s}``."""
    from ..radio.topology import default_topology

    absent = [t for t in where if t not in layout.positions]
    if absent:
        raise UserError(f"{layout.source}: has no node {absent[0]}; give the testbed file the build was compiled or "
                        f"planned for")
    check_layout(layout)
    seed = layout.seed
    if layout.topology not in (None, POSITIONS):
        ids = list(layout.positions)
        if list(where) == ids:  # every node of the file, in order: the topology itself
            return {"topology": layout.topology, "seed": seed}
        topo = _named(layout)
        return {"topology": POSITIONS, "positions": [[float(v) for v in topo.positions[ids.index(t)][:2]]
                                                     for t in where], "seed": seed}
    pos = [layout.positions[t] for t in where]
    if all(p is not None for p in pos):
        return {"topology": POSITIONS, "positions": [[float(v) for v in p[:2]] for p in pos], "seed": seed}
    return {"topology": default_topology(len(where)), "seed": seed}


def as_topology(placed: dict, n: int):
    """A Topology of what :func:`place` returned, for ``n`` nodes (the radio simulation's input)."""
    import numpy as np

    from ..radio.topology import Topology, topology

    if placed["topology"] == POSITIONS:
        return Topology(POSITIONS, np.asarray(placed["positions"], dtype=float))
    name = placed["topology"]
    return topology(name, None if name == "hallway16" else n, placed["seed"])
