"""Medium-side log of a run: per slot, who transmitted and who decoded whose packet.

Which node decoded which *message* (rank, rows) is the Mixer core's business; the medium only knows
packets. A :class:`Trace` is a few flat numpy arrays that benchmarks can save, concatenate and
aggregate:

* ``round[S]``  int32   round number of each slot (−1 before the first ``begin_round``)
* ``slot[S]``   int32   slot number within its round
* ``length[S]`` int16   longest PHY payload on air in the slot (0: nobody transmitted)
* ``state[S, n]`` int8  per node: ≥ 0 the sender whose packet it decoded, or one of
  ``HEARD_NOTHING`` (−1, listened, decoded nothing), ``IDLE`` (−2, radio off), ``TX`` (−3,
  transmitted), ``DEAD`` (−4, failed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEARD_NOTHING = -1
IDLE = -2
TX = -3
DEAD = -4

FORMAT = "cisl-radio-trace"
FORMAT_VERSION = 1


@dataclass
class Trace:
    n: int
    round: np.ndarray
    slot: np.ndarray
    length: np.ndarray
    state: np.ndarray

    def __post_init__(self) -> None:
        s = len(self.round)
        if not (len(self.slot) == len(self.length) == s and self.state.shape == (s, self.n)):
            raise ValueError("trace arrays disagree in length")

    def __len__(self) -> int:
        return len(self.round)

    # -- derived views -------------------------------------------------------------------------------
    @property
    def transmitted(self) -> np.ndarray:
        """bool [S, n]: the node transmitted in the slot."""
        return self.state == TX

    @property
    def listened(self) -> np.ndarray:
        """bool [S, n]: the node had its receiver on (and was alive and not transmitting)."""
        return (self.state >= 0) | (self.state == HEARD_NOTHING)

    @property
    def received(self) -> np.ndarray:
        """bool [S, n]: the node decoded a packet."""
        return self.state >= 0

    def link_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(attempts, successes), int64 [sender, receiver]: slots where s transmitted while r listened,
        and slots where r decoded s's packet. successes / attempts is the empirical in-protocol PRR
        (it includes collisions, unlike ``Channel.link_prr``)."""
        tx = self.transmitted.astype(np.int64)
        attempts = tx.T @ self.listened.astype(np.int64)
        successes = np.zeros((self.n, self.n), dtype=np.int64)
        s_idx, r_idx = np.nonzero(self.received)
        np.add.at(successes, (self.state[s_idx, r_idx].astype(np.int64), r_idx), 1)
        return attempts, successes

    def per_round(self) -> dict[str, np.ndarray]:
        """Per round (sorted round numbers): slots, transmissions, receptions, and empty listens
        (listened, nothing decoded: silence or collision)."""
        rounds, inv = np.unique(self.round, return_inverse=True)
        k = len(rounds)
        return {
            "round": rounds,
            "slots": np.bincount(inv, minlength=k),
            "transmissions": np.bincount(inv, weights=self.transmitted.sum(1), minlength=k).astype(np.int64),
            "receptions": np.bincount(inv, weights=self.received.sum(1), minlength=k).astype(np.int64),
            "empty_listens": np.bincount(inv, weights=(self.state == HEARD_NOTHING).sum(1),
                                         minlength=k).astype(np.int64),
        }

    def concurrent_transmitters(self) -> np.ndarray:
        """int [S]: transmitters per slot."""
        return self.transmitted.sum(1)

    # -- I/O -----------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, format=np.array(FORMAT), version=np.array(FORMAT_VERSION),
                            n=np.array(self.n), round=self.round, slot=self.slot, length=self.length,
                            state=self.state)

    @staticmethod
    def load(path: str | Path) -> "Trace":
        with np.load(path) as z:
            if str(z["format"]) != FORMAT or int(z["version"]) != FORMAT_VERSION:
                raise ValueError(f"{path}: not a {FORMAT} v{FORMAT_VERSION} file")
            return Trace(int(z["n"]), z["round"], z["slot"], z["length"], z["state"])

    @staticmethod
    def concat(traces: Sequence["Trace"]) -> "Trace":
        if not traces:
            raise ValueError("nothing to concatenate")
        n = traces[0].n
        if any(t.n != n for t in traces):
            raise ValueError("traces of different node counts")
        return Trace(n, *(np.concatenate([getattr(t, f) for t in traces])
                          for f in ("round", "slot", "length", "state")))


class TraceRecorder:
    """Appends one row per slot into growing arrays; ``Channel(..., trace=True)`` owns one."""

    def __init__(self, n: int, capacity: int = 4096):
        if not 1 <= n <= 127:
            raise ValueError(f"trace state is int8: 1 ≤ n ≤ 127, not {n}")
        self.n = n
        self._k = 0
        self._alloc(capacity)

    def _alloc(self, cap: int) -> None:
        old = getattr(self, "_state", None)
        new_round = np.empty(cap, np.int32)
        new_slot = np.empty(cap, np.int32)
        new_len = np.empty(cap, np.int16)
        new_state = np.empty((cap, self.n), np.int8)
        if old is not None:
            k = self._k
            new_round[:k], new_slot[:k], new_len[:k], new_state[:k] = (
                self._round[:k], self._slot[:k], self._len[:k], self._state[:k])
        self._round, self._slot, self._len, self._state = new_round, new_slot, new_len, new_state

    def record(self, round_: int, slot: int, transmitters: Iterable[int], listeners: Iterable[int],
               dead: Iterable[int], received: dict[int, int], length: int) -> None:
        k = self._k
        if k == len(self._round):
            self._alloc(2 * k)
        row = [IDLE] * self.n
        for r in listeners:
            row[r] = HEARD_NOTHING
        for r, s in received.items():
            row[r] = s
        for s in transmitters:
            row[s] = TX
        for d in dead:
            row[d] = DEAD
        self._state[k] = row
        self._round[k] = round_
        self._slot[k] = slot
        self._len[k] = length
        self._k = k + 1

    def __len__(self) -> int:
        return self._k

    def to_trace(self) -> Trace:
        k = self._k
        return Trace(self.n, self._round[:k].copy(), self._slot[:k].copy(), self._len[:k].copy(),
                     self._state[:k].copy())

    def clear(self) -> None:
        self._k = 0
