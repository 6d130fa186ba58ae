"""The standard long-term-forecasting protocol (Informer/Autoformer/DLinear/PatchTST).

* Splits: the ETT borders (12/4/4 months; x4 for 15-minute data) when the series has exactly the
  ETT length, otherwise 70/10/20 (LTSF `Dataset_Custom`). Validation and test *input* windows may
  reach `lookback` rows back into the previous split; their targets lie inside the split.
* A StandardScaler fitted per channel on the train rows (population std) scales the whole series;
  errors are measured on that scale.
* Windows have stride 1 and are channel independent: every (channel, start) pair is one
  univariate sample. See /work/shared/notes/datasets.md §2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.errors import UserError

_ETT_HOURLY_ROWS = 17420
_ETT_MONTHS = (12, 4, 4)  # train / val / test, months of 30 days
_ETT_ROWS_PER_MONTH = 30 * 24


def split_borders(rows: int, lookback: int) -> list[tuple[int, int]]:
    """[start, end) rows of the train, val and test segments (inputs included)."""
    if rows in (_ETT_HOURLY_ROWS, 4 * _ETT_HOURLY_ROWS):
        per_month = _ETT_ROWS_PER_MONTH * (rows // _ETT_HOURLY_ROWS)
        train_end = _ETT_MONTHS[0] * per_month
        val_end = train_end + _ETT_MONTHS[1] * per_month
        test_end = val_end + _ETT_MONTHS[2] * per_month
    else:
        train_end = int(rows * 0.7)
        test_len = int(rows * 0.2)
        val_end = rows - test_len
        test_end = rows
    return [(0, train_end), (max(0, train_end - lookback), val_end), (max(0, val_end - lookback), test_end)]


@dataclass(frozen=True)
class StandardScaler:
    """Per-channel (x - mean) / std with the population std, like sklearn's StandardScaler."""

    mean: np.ndarray
    std: np.ndarray

    @staticmethod
    def fit(rows: np.ndarray) -> "StandardScaler":
        rows = np.asarray(rows, dtype=np.float64)
        std = rows.std(axis=0)
        std[std == 0] = 1.0  # a constant channel is only centred (sklearn does the same)
        return StandardScaler(rows.mean(axis=0), std)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mean) / self.std).astype(np.float32)

    def inverse(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) * self.std + self.mean).astype(np.float32)


@dataclass(frozen=True)
class Windows:
    """All stride-1 windows of one split, materialised on demand (a batch at a time).

    Sample i is channel ``i // per_channel`` at start ``i % per_channel``: channel-major, so that
    evenly spaced samples cover every channel and the whole time span.
    """

    series: np.ndarray  # [rows, channels] scaled float32, including the lookback history
    lookback: int
    horizon: int

    @property
    def per_channel(self) -> int:
        return max(0, self.series.shape[0] - self.lookback - self.horizon + 1)

    def __len__(self) -> int:
        return self.per_channel * self.series.shape[1]

    def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inputs x [n, lookback] and targets y [n, horizon] (float32) of the given samples."""
        idx = np.asarray(idx, dtype=np.int64)
        channel, start = np.divmod(idx, self.per_channel)
        x = self.series[start[:, None] + np.arange(self.lookback), channel[:, None]]
        y = self.series[start[:, None] + self.lookback + np.arange(self.horizon), channel[:, None]]
        return x, y

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.take(np.arange(len(self)))

    def evenly_spaced(self, count: int) -> np.ndarray:
        """``count`` strictly increasing sample indices spread evenly over the split (all if fewer)."""
        n = len(self)
        if count >= n:
            return np.arange(n)
        return np.arange(count, dtype=np.int64) * n // count


@dataclass(frozen=True)
class Splits:
    train: Windows
    val: Windows
    test: Windows
    scaler: StandardScaler
    borders: list[tuple[int, int]]


def make_splits(series: np.ndarray, lookback: int, horizon: int, source: str) -> Splits:
    """Scale ``series`` [rows, channels] with the train statistics and cut the three splits.

    ``source`` names the data in error messages (a file path or "synthetic data").
    """
    series = np.asarray(series)
    if series.ndim != 2 or series.shape[1] < 1:
        raise ValueError("series must be [rows, channels]")
    rows = series.shape[0]
    borders = split_borders(rows, lookback)
    scaler = StandardScaler.fit(series[borders[0][0]:borders[0][1]])
    scaled = scaler.transform(series)
    parts = [Windows(scaled[a:b], lookback, horizon) for a, b in borders]
    for name, part in zip(("train", "validation", "test"), parts):
        if len(part) == 0:
            raise UserError(f"{source} has too few rows ({rows}) for lookback {lookback} + horizon {horizon}: "
                            f"the {name} split has no window; use more data or a shorter lookback/horizon")
    return Splits(parts[0], parts[1], parts[2], scaler, borders)
