"""Message loss model: the three loss modes of the paper (§4.4), sampled per communication round.

For one round (a somegather point of one layer, or the head reduction) and one sample, a message
from sender s to receiver r is lost if any of three independent events happens:

* (a) link:     that single sender→receiver message is lost            (probability q_link, per pair)
* (b) receiver: the receiver gets nothing in this round                (probability q_recv, per receiver)
* (c) sender:   nobody gets the sender's message in this round          (probability q_send, per sender)

Training (message dropout), the numpy executors and the simulated medium all draw from this one
definition; a lost message means its columns contribute nothing (docs/design/decisions.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LossRates:
    link: float = 0.0
    receiver: float = 0.0
    sender: float = 0.0

    def __post_init__(self) -> None:
        for name in ("link", "receiver", "sender"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"loss probability {name}={v} must be in [0, 1)")

    @staticmethod
    def uniform(q: float) -> "LossRates":
        """The paper's sweep: the same probability q for all three modes."""
        return LossRates(q, q, q)

    @property
    def any(self) -> bool:
        return self.link > 0 or self.receiver > 0 or self.sender > 0

    @property
    def effective_link_loss(self) -> float:
        """Probability that a given sender→receiver message is lost: 1 − (1−a)(1−b)(1−c)."""
        return 1.0 - (1.0 - self.link) * (1.0 - self.receiver) * (1.0 - self.sender)


def sample_lost(rng: np.random.Generator, batch: int, devices: int, rates: LossRates) -> np.ndarray:
    """Boolean [batch, receiver, sender]: True where the message of this round is lost.

    The diagonal (a device's own columns) is never lost.
    """
    link = rng.random((batch, devices, devices)) < rates.link
    recv = rng.random((batch, devices, 1)) < rates.receiver
    send = rng.random((batch, 1, devices)) < rates.sender
    lost = link | recv | send
    lost[:, np.arange(devices), np.arange(devices)] = False
    return lost


def sample_rounds(rng: np.random.Generator, rounds: int, batch: int, devices: int,
                  rates: LossRates) -> dict[int, np.ndarray]:
    """Independent loss patterns for rounds 0..rounds-1 (keyed by round number, as plan.json's sg)."""
    return {r: sample_lost(rng, batch, devices, rates) for r in range(rounds)}
