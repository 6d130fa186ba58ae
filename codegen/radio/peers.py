"""Dead-node detection across Mixer rounds: the host mirror of firmware/somegather/cisl_mixer_transport.c.

Each node keeps, per peer, how many consecutive rounds the peer's rows were due without a sign of
life (an intact packet from it, or one of its rows decoded). After ``DEAD_AFTER_ROUNDS`` such rounds
the peer is declared dead: its rows are written as weak zeros, the round's ``absent`` mask names
it (the done policy stops waiting for it, its owned slots are free), and if it was the initiator
the next live node starts the rounds. Inside a round, the next live node after the initiator (its
backup) starts the round itself when it hears nothing of it (the takeover). A sign of life revives it. docs/design/dead-nodes.md has the
contract; cisl estimate and the qemu-m4 board time use this class so they simulate exactly what
the firmware does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEAD_AFTER_ROUNDS = 2  # CISL_DEAD_AFTER_ROUNDS


@dataclass
class PeerEvent:
    inference: int
    peer: int
    state: str  # "dead" or "alive"
    rounds: int


@dataclass
class PeerView:
    """What node ``me`` of ``n`` knows about the others' liveness."""

    me: int
    n: int
    planned_initiator: int = 0
    dead_after: int = DEAD_AFTER_ROUNDS
    miss: list[int] = field(default_factory=list)
    dead: int = 0
    events: list[PeerEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.miss = [0] * self.n

    def initiator(self) -> int:
        """The node that starts the next round in this node's view."""
        for k in range(self.n):
            j = (self.planned_initiator + k) % self.n
            if not self.dead >> j & 1:
                return j
        return self.me

    def absent(self) -> int:
        """The nodes the next round does not wait for (mx_config.absent): the dead ones, unless that
        is every other node — then none, so that this node listens for them (cisl_mixer_transport.c
        round_absent)."""
        others = ((1 << self.n) - 1) & ~(1 << self.me)
        return 0 if self.dead & others == others else self.dead

    def backup(self) -> int:
        """The node that starts the round if the initiator does not (the next live node after it;
        the initiator itself when nobody else is alive: no backup)."""
        init = self.initiator()
        for k in range(1, self.n):
            j = (init + k) % self.n
            if not self.dead >> j & 1:
                return j
        return init

    def after_round(self, inference: int, due: int, alive: int, synced: bool, initiator: int) -> None:
        """``due``: nodes whose rows were in the round (live senders and the initiator); ``alive``:
        nodes this node has a sign of life from."""
        if not synced:
            due = 1 << initiator
        for j in range(self.n):
            b = 1 << j
            if j == self.me:
                continue
            if alive & b:
                self.miss[j] = 0
                if self.dead & b:
                    self.dead &= ~b
                    self.events.append(PeerEvent(inference, j, "alive", 0))
            elif due & b and not self.dead & b:
                self.miss[j] += 1
                if self.miss[j] >= self.dead_after:
                    self.dead |= b
                    self.events.append(PeerEvent(inference, j, "dead", self.miss[j]))


__all__ = ["DEAD_AFTER_ROUNDS", "PeerEvent", "PeerView"]
