"""Slot-level radio channel for the virtual testbed: who decodes whose packet in one Mixer slot.

Physics per slot (docs/design/radio.md gives every number and where it comes from):

* received power  P_rx[s, r] = P_tx − PL(d) − X[s, r]   (dBm), PL(d) = PL0 + 10·n·log10(max(d, d0)/d0),
  X a static, symmetric, seeded log-normal shadowing term per link;
* bit errors     BER(γ) = ½·exp(−γ/γ0), γ0 chosen so that BER = ber_ref at γ = snr_ref_db (the
  datasheet sensitivity over the noise floor); a packet of L bytes exposes 8·(L + 9) bits (access
  address, header, payload, CRC), so PRR = (1 − BER)^(8·(L+9)): longer packets fail more;
* capture        with several concurrent transmitters a receiver locks onto the strongest one s and
  decodes it only if P_s / (N + Σ_{j≠s} P_j) ≥ capture_db; the others then act as noise weighted by
  w = 10^((capture_db − snr_ref_db)/10) (co-channel GFSK hurts less than Gaussian noise: at SIR =
  capture_db alone the BER is ber_ref, as at SNR = snr_ref_db); with one transmitter it is plain PRR;
* bursts         an optional Gilbert–Elliott chain per directed link drops an otherwise decoded
  packet with probability loss_good / loss_bad in its good / bad state;
* failures       dead nodes neither transmit nor receive; half duplex: a transmitter receives nothing.

The parameters and the pure physics (path loss, BER, PRR) live in physics.py, shared with
topology.py; this module is the stateful medium that plays them slot by slot.

The randomness comes from one seed: shadowing and the initial burst states are drawn once from their
own streams, and every slot draws the same number of uniforms for the same (transmitters, listeners),
so a run is deterministic given the seed and the call sequence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .physics import FRAME_OVERHEAD_BYTES, ChannelParams, link_prr_matrix, mean_rx_power_dbm

if TYPE_CHECKING:
    from .topology import Topology
    from .trace import TraceRecorder


@dataclass
class _Failure:
    node: int
    unit: str          # "slot" or "round"
    start: int
    end: float         # exclusive; inf = permanent


class Channel:
    """The medium of one topology, played slot by slot.

    ``slot(transmitters, listeners)`` returns {receiver: sender} for the packets decoded in this slot.
    Slots are numbered globally from 0; ``begin_round()`` starts a new round (slot-in-round 0) so that
    failures can be scheduled in rounds and traces carry round numbers.
    """

    def __init__(self, topology: "Topology | np.ndarray", params: ChannelParams = ChannelParams(),
                 seed: int = 0, trace: "TraceRecorder | bool | None" = None):
        positions = getattr(topology, "positions", topology)
        self.positions = np.asarray(positions, dtype=float)
        self.n = len(self.positions)
        if self.n < 1:
            raise ValueError("a channel needs at least one node")
        self.params = params
        self.seed = seed
        s_shadow, s_slot, s_burst = np.random.SeedSequence(seed).spawn(3)

        rx = mean_rx_power_dbm(self.positions, params)
        if params.shadowing_sigma_db > 0:
            x = np.random.default_rng(s_shadow).normal(0.0, params.shadowing_sigma_db, (self.n, self.n))
            x = np.triu(x, 1)
            rx = rx - (x + x.T)
        self.rx_power_dbm = rx                      # [sender, receiver] in dBm, diagonal −inf
        self._p_mw = np.power(10.0, rx / 10.0)      # linear mW, diagonal 0
        self._noise_mw = 10.0 ** (params.noise_floor_dbm / 10.0)
        self._unit_noise = 1.0 / params.gamma0                  # noise in units of N·γ0
        self._a = self._p_mw / (self._noise_mw * params.gamma0)  # powers in units of N·γ0
        self._prr_cache: dict[int, np.ndarray] = {}
        self._capture = 10.0 ** (params.capture_db / 10.0)
        self._w = params.interference_weight
        self._rng = np.random.default_rng(s_slot)

        self._burst = params.burst
        if self._burst is not None:
            self._burst_rng = np.random.default_rng(s_burst)
            # flat [sender·n + receiver] state and slot of its last draw; initial state stationary
            self._bad = (self._burst_rng.random(self.n * self.n) < self._burst.stationary_bad).tolist()
            self._seen = [0] * (self.n * self.n)
            self._loss_good = self._burst.loss_good
            self._loss_bad = self._burst.loss_bad
            self._lam = 1.0 - self._burst.p_good_to_bad - self._burst.p_bad_to_good
            self._pi_bad = self._burst.stationary_bad

        self._failures: list[_Failure] = []
        self.slot_index = 0          # global index of the next slot
        self.round_index = -1        # -1 until the first begin_round()
        self.slot_in_round = 0
        if trace is True:
            from .trace import TraceRecorder
            trace = TraceRecorder(self.n)
        self.trace: TraceRecorder | None = None if trace is None or trace is False else trace

    # -- failures ----------------------------------------------------------------------------------
    def fail(self, node: int, start: int | None = None, duration: int | None = None,
             unit: str = "slot") -> None:
        """Mark ``node`` dead from ``start`` (default: now) for ``duration`` slots or rounds (None: for good).

        ``unit="slot"`` counts global slots (``slot_index``), ``unit="round"`` rounds (``round_index``).
        """
        if not 0 <= node < self.n:
            raise ValueError(f"node {node} not in 0..{self.n - 1}")
        if unit not in ("slot", "round"):
            raise ValueError(f"unit must be 'slot' or 'round', not {unit!r}")
        if duration is not None and duration < 1:
            raise ValueError(f"duration must be ≥ 1 or None, not {duration}")
        now = self.slot_index if unit == "slot" else max(self.round_index, 0)
        start = now if start is None else start
        end = math.inf if duration is None else start + duration
        self._failures.append(_Failure(node, unit, start, end))

    def revive(self, node: int) -> None:
        """Cancel every failure of ``node``."""
        self._failures = [f for f in self._failures if f.node != node]

    def dead_nodes(self, slot: int | None = None, round_: int | None = None) -> set[int]:
        """Nodes dead at a global slot and round (default: the next slot, the current round)."""
        t = self.slot_index if slot is None else slot
        r = self.round_index if round_ is None else round_
        return {f.node for f in self._failures
                if f.start <= (t if f.unit == "slot" else r) < f.end}

    def is_alive(self, node: int) -> bool:
        return node not in self.dead_nodes()

    # -- rounds ------------------------------------------------------------------------------------
    def begin_round(self, round_index: int | None = None) -> int:
        """Start a round (default: the next number); slots are counted from 0 within it."""
        self.round_index = self.round_index + 1 if round_index is None else round_index
        self.slot_in_round = 0
        return self.round_index

    # -- the slot ----------------------------------------------------------------------------------
    def slot(self, transmitters: Mapping[int, bytes | bytearray | memoryview | int],
             listeners: Iterable[int]) -> dict[int, int]:
        """Play one slot: {receiver: sender} for every packet decoded in it.

        ``transmitters`` maps a sender to its packet (or just its PHY payload length in bytes);
        ``listeners`` are the nodes with their receiver on. Dead nodes and transmitters (half duplex)
        receive nothing; dead transmitters put nothing on the air.
        """
        t = self.slot_index
        dead = self.dead_nodes() if self._failures else ()
        tx = sorted(s for s in transmitters if s not in dead)
        txset = set(tx)
        rx = sorted(r for r in set(listeners) if r not in txset and r not in dead)
        if tx and (tx[0] < 0 or tx[-1] >= self.n):
            raise ValueError(f"transmitters {tx} not all in 0..{self.n - 1}")
        if rx and (rx[0] < 0 or rx[-1] >= self.n):
            raise ValueError(f"listeners {rx} not all in 0..{self.n - 1}")
        lengths = [int(v) if isinstance(v, (int, np.integer)) else len(v)
                   for v in (transmitters[s] for s in tx)]
        result = self._decode(t, tx, rx, lengths) if tx and rx else {}
        if self.trace is not None:
            self.trace.record(self.round_index, self.slot_in_round, tx, rx, dead, result,
                              max(lengths, default=0))
        self.slot_index = t + 1
        self.slot_in_round += 1
        return result

    def _decode(self, t: int, tx: list[int], rx: list[int], lengths: list[int]) -> dict[int, int]:
        # powers are kept in units of N·γ0 (noise times the BER scale), so x = SINR/γ0 directly
        u = self._rng.random(len(rx))
        if len(tx) == 1:   # no interference: the per-length PRR matrix is cached
            q = self._prr_cache.get(lengths[0])
            if q is None:
                q = self._prr_cache[lengths[0]] = self.link_prr(lengths[0])
            x = q[tx[0]].take(rx)
            win = None
        else:
            a = self._a.take(tx, 0).take(rx, 1)              # [T, R]
            win = a.argmax(0)
            ps = a.max(0)
            interf = a.sum(0)
            interf -= ps
            # capture: the strongest must reach capture_db over noise + the sum of the others
            u[ps < self._capture * (self._unit_noise + interf)] = 2.0    # never decoded
            interf *= self._w
            interf += self._unit_noise
            x = ps / interf
            if lengths.count(lengths[0]) == len(lengths):
                bits = 8 * (lengths[0] + FRAME_OVERHEAD_BYTES)
            else:   # senders of different lengths: a receiver's bits are those of its strongest sender
                bits = 8 * (np.asarray(lengths).take(win) + FRAME_OVERHEAD_BYTES)
            # PRR = (1 − BER)^bits with BER = ½·exp(−x)
            np.negative(x, out=x)
            np.exp(x, out=x)
            x *= -0.5
            np.log1p(x, out=x)
            x *= bits
            np.exp(x, out=x)
        idx = (u < x).nonzero()[0].tolist()
        if not idx:
            return {}
        senders = [tx[0]] * len(idx) if win is None else [tx[j] for j in win.take(idx).tolist()]
        receivers = [rx[i] for i in idx]
        if self._burst is not None:
            keep = self._burst_keep(t, senders, receivers)
            return {r: s for r, s, k in zip(receivers, senders, keep) if k}
        return dict(zip(receivers, senders))

    def _burst_keep(self, t: int, senders: list[int], receivers: list[int]) -> list[bool]:
        """Advance the Gilbert–Elliott chains of the given links to slot t and draw their extra loss.

        A chain is only drawn when its link carries a packet: the k-step transition
        P(bad | k slots later) = π_bad + (state − π_bad)·(1 − p_gb − p_bg)^k is exact, so the lazy
        draw has the same law as stepping every link every slot, at a fraction of the cost.
        """
        n, pi, lam = self.n, self._pi_bad, self._lam
        bad, seen = self._bad, self._seen
        m = len(senders)
        u = self._burst_rng.random(2 * m).tolist()
        keep = []
        for i, (s, r) in enumerate(zip(senders, receivers)):   # m ≤ n: plain Python beats numpy here
            link = s * n + r
            k = t - seen[link]
            b = u[i] < pi + ((1.0 if bad[link] else 0.0) - pi) * lam ** k if k else bad[link]
            bad[link] = b
            seen[link] = t
            keep.append(u[m + i] >= (self._loss_bad if b else self._loss_good))
        return keep

    # -- analysis ----------------------------------------------------------------------------------
    def link_prr(self, length: int, include_burst: bool = False) -> np.ndarray:
        """Single-transmitter PRR [sender, receiver] of a ``length``-byte packet (shadowing included).

        With ``include_burst`` the long-run Gilbert–Elliott loss is folded in.
        """
        q = link_prr_matrix(self.rx_power_dbm, length, self.params)
        if include_burst and self._burst is not None:
            q = q * (1.0 - self._burst.mean_loss)
        return q

    def snr_db(self) -> np.ndarray:
        """Single-transmitter SNR [sender, receiver] in dB (diagonal −inf)."""
        return self.rx_power_dbm - self.params.noise_floor_dbm
