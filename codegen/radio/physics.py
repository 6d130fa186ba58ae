"""Radio parameters and the physics of one link (pure functions), shared by the channel and topologies.

``ChannelParams`` (and a link's optional ``GilbertElliott`` burst process) hold the numbers;
path loss, BER and PRR turn them into the received power and the packet reception ratio of a link.
channel.py plays these physics slot by slot with seeded shadowing, capture and failures; topology.py
judges connectivity on the median channel. docs/design/radio.md gives every number and its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

FRAME_OVERHEAD_BYTES = 9   # access address 4 + S0/LENGTH 2 + CRC 3: the bits besides the payload
                           # that must be right (the preamble only trains the demodulator)


@dataclass(frozen=True)
class GilbertElliott:
    """Two-state burst process per directed link; a state change can happen every slot."""

    p_good_to_bad: float = 0.01
    p_bad_to_good: float = 0.2
    loss_good: float = 0.0
    loss_bad: float = 1.0

    def __post_init__(self) -> None:
        for name in ("p_good_to_bad", "p_bad_to_good", "loss_good", "loss_bad"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"GilbertElliott.{name}={v} must be in [0, 1]")
        if self.p_good_to_bad + self.p_bad_to_good == 0.0:
            raise ValueError("GilbertElliott with both transition probabilities 0 has no stationary state")

    @property
    def stationary_bad(self) -> float:
        """Long-run fraction of slots in the bad state: p_gb / (p_gb + p_bg)."""
        return self.p_good_to_bad / (self.p_good_to_bad + self.p_bad_to_good)

    @property
    def mean_loss(self) -> float:
        """Long-run extra loss of a link: π_good·loss_good + π_bad·loss_bad."""
        pb = self.stationary_bad
        return (1.0 - pb) * self.loss_good + pb * self.loss_bad

    @property
    def mean_burst_slots(self) -> float:
        """Mean sojourn in the bad state, in slots: 1 / p_bg."""
        return math.inf if self.p_bad_to_good == 0 else 1.0 / self.p_bad_to_good


@dataclass(frozen=True)
class ChannelParams:
    """Radio parameters; defaults model the nRF52840 on BLE 2M in an indoor hallway (radio.md §2)."""

    tx_power_dbm: float = 8.0          # MX_TX_PWR_DBM in the Mixer tutorial and CATS (+8 dBm, the max)
    pl_d0_db: float = 40.0             # path loss at d0 = 1 m: free space at 2.44 GHz is 40.2 dB
    pl_exponent: float = 4.0           # calibrated: ≥ 2 hops over the 35 m testbed hallway (radio.md)
    d0_m: float = 1.0
    shadowing_sigma_db: float = 4.0    # static log-normal shadowing per link, symmetric
    noise_floor_dbm: float = -100.0    # BLE 2M: −174 dBm/Hz + 63 dB (2 MHz) + ≈ 11 dB NF+implementation
    snr_ref_db: float = 8.0            # SNR for BER = ber_ref: sensitivity −92 dBm (2M) − noise floor
    ber_ref: float = 1e-3              # the datasheet sensitivity criterion (0.1 % BER)
    capture_db: float = 4.0            # min SINR of the strongest of ≥ 2 concurrent transmitters
    burst: GilbertElliott | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.ber_ref < 0.5:
            raise ValueError(f"ber_ref={self.ber_ref} must be in (0, 0.5)")
        if self.shadowing_sigma_db < 0 or self.d0_m <= 0 or self.pl_exponent <= 0:
            raise ValueError("shadowing_sigma_db ≥ 0, d0_m > 0 and pl_exponent > 0 are required")

    @staticmethod
    def for_phy(phy: str = "2M", **overrides) -> "ChannelParams":
        """Defaults for BLE 1M (noise floor −103 dBm: half the bandwidth; sensitivity −95 dBm) or 2M."""
        if phy == "2M":
            return ChannelParams(**overrides)
        if phy == "1M":
            return ChannelParams(**{"noise_floor_dbm": -103.0, **overrides})
        raise ValueError(f"phy must be '1M' or '2M', not {phy!r}")

    def replace(self, **changes) -> "ChannelParams":
        return replace(self, **changes)

    @property
    def gamma0(self) -> float:
        """Linear SNR scale of the BER curve: BER = ½·exp(−γ/γ0), BER(snr_ref) = ber_ref."""
        return 10.0 ** (self.snr_ref_db / 10.0) / math.log(0.5 / self.ber_ref)

    @property
    def interference_weight(self) -> float:
        """Noise-equivalent weight of co-channel interference in the BER: 10^((capture − snr_ref)/10)."""
        return 10.0 ** ((self.capture_db - self.snr_ref_db) / 10.0)


# ---------------------------------------------------------------------------------------------------
# physics (pure functions, used by channel.py and by topology.py for link graphs)

def distances(positions: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean distances (m) of an [n, 2] (or [n, 3]) position array."""
    p = np.asarray(positions, dtype=float)
    return np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))


def path_loss_db(d, params: ChannelParams = ChannelParams()):
    """Log-distance path loss (dB) at distance d (m), clamped to PL0 below d0."""
    d = np.maximum(np.asarray(d, dtype=float), params.d0_m)
    return params.pl_d0_db + 10.0 * params.pl_exponent * np.log10(d / params.d0_m)


def packet_bits(length) -> np.ndarray:
    """Bits that must arrive intact for a PHY payload of ``length`` bytes."""
    return 8 * (np.asarray(length) + FRAME_OVERHEAD_BYTES)


def ber(sinr_lin, params: ChannelParams = ChannelParams()):
    """Bit error rate at linear SINR γ: ½·exp(−γ/γ0)."""
    return 0.5 * np.exp(-np.asarray(sinr_lin, dtype=float) / params.gamma0)


def prr(sinr_db, length, params: ChannelParams = ChannelParams()):
    """Packet reception ratio of a ``length``-byte PHY payload at SINR (dB): (1 − BER)^bits."""
    b = ber(np.power(10.0, np.asarray(sinr_db, dtype=float) / 10.0), params)
    return np.exp(packet_bits(length) * np.log1p(-b))


def mean_rx_power_dbm(positions: np.ndarray, params: ChannelParams = ChannelParams()) -> np.ndarray:
    """Received power [sender, receiver] (dBm) without shadowing; diagonal −inf."""
    p = params.tx_power_dbm - path_loss_db(distances(positions), params)
    np.fill_diagonal(p, -np.inf)
    return p


def link_prr_matrix(rx_power_dbm: np.ndarray, length: int,
                    params: ChannelParams = ChannelParams()) -> np.ndarray:
    """Single-transmitter PRR [sender, receiver] from a received-power matrix (no bursts)."""
    q = prr(rx_power_dbm - params.noise_floor_dbm, length, params)
    np.fill_diagonal(q, 0.0)
    return q
