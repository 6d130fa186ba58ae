"""A built-in multivariate series, so that training and tests need no data files.

It imitates sensor data of the ETT kind (hourly sampling): several latent sources, each a mixture
of daily (24) and weekly (168) cycles plus a few other periods with random amplitudes and phases,
a slow trend, regime changes (level shifts and amplitude changes) and AR(1) noise. Channels are
random mixtures of the sources, so they are correlated, plus their own AR(1) noise. Fully
determined by the seed.
"""

from __future__ import annotations

import numpy as np

_BASE_PERIODS = (24.0, 168.0)  # daily and weekly cycles of hourly data
_EXTRA_PERIODS = (6.0, 8.0, 12.0, 48.0, 84.0, 336.0)


def _ar1(rng: np.random.Generator, length: int, count: int, phi: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """[length, count] AR(1) processes x_t = phi x_{t-1} + sigma e_t, started in their stationary law."""
    eps = rng.standard_normal((length, count)) * sigma
    out = np.empty((length, count))
    out[0] = eps[0] / np.sqrt(1.0 - phi**2)
    for t in range(1, length):  # a vector step per time step: fast enough for 1e5 steps
        out[t] = phi * out[t - 1] + eps[t]
    return out


def _source(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    """One latent source without noise: seasonal mixture x regime amplitude + regime level + trend."""
    length = len(t)
    periods = list(_BASE_PERIODS) + list(rng.choice(_EXTRA_PERIODS, size=rng.integers(1, 3), replace=False))
    seasonal = np.zeros(length)
    for period in periods:
        for harmonic in (1, 2):  # a second harmonic makes the cycles non-sinusoidal
            amp = rng.gamma(2.0, 0.5) / harmonic
            seasonal += amp * np.sin(2 * np.pi * harmonic * t / period + rng.uniform(0, 2 * np.pi))

    # Regime changes: a few random change points; each regime has its own level and amplitude.
    n_changes = rng.poisson(max(1.0, length / 2500))
    cuts = np.sort(rng.integers(1, max(2, length), size=n_changes))
    regime = np.searchsorted(cuts, np.arange(length), side="right")
    level = rng.normal(0.0, 1.0, size=n_changes + 1)
    scale = rng.uniform(0.6, 1.4, size=n_changes + 1)

    # Slow trend: a linear drift plus a very-low-frequency wave.
    slope = rng.normal(0.0, 1.0) / max(length, 1)
    wave_period = length * rng.uniform(0.5, 2.0) + 1.0
    trend = slope * t + 0.5 * np.sin(2 * np.pi * t / wave_period + rng.uniform(0, 2 * np.pi))

    return seasonal * scale[regime] + level[regime] + trend


def synthetic_series(length: int = 8000, channels: int = 4, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """A float32 array [length, channels] and the channel names ``ch0``, ``ch1``, ..."""
    if length < 1 or channels < 1:
        raise ValueError("length and channels must be >= 1")
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    n_src = channels + 2
    sources = np.stack([_source(rng, t) for _ in range(n_src)], axis=1)
    sources += _ar1(rng, length, n_src, phi=rng.uniform(0.5, 0.95, n_src), sigma=rng.uniform(0.1, 0.3, n_src))

    # Correlated channels: random mixture of the sources, dominated by one source per channel.
    mix = rng.normal(0.0, 0.5, size=(n_src, channels)) / np.sqrt(n_src)
    mix[np.arange(channels), np.arange(channels)] += 1.0
    data = sources @ mix
    data += _ar1(rng, length, channels, phi=rng.uniform(0.3, 0.9, channels), sigma=rng.uniform(0.05, 0.2, channels))
    data = data * rng.uniform(0.5, 5.0, channels) + rng.normal(0.0, 10.0, channels)  # physical units and offsets
    return data.astype(np.float32), [f"ch{c}" for c in range(channels)]
