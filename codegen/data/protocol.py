"""The standard long-term-forecasting protocol (Informer/Autoformer/DLinear/PatchTST).

* Splits: the ETT borders (12/4/4 months; x4 for 15-minute data) when the series has exactly the
  ETT length, otherwise 70/10/20 (LTSF `Dataset_Custom`). Validation and test *input* windows may
  reach `lookback` rows back into the previous split; their targets lie inside the split.
* A StandardScaler fitted per channel on the train rows (population std) scales the whole series;
  errors are measured on that scale.
* Windows have stride 1 and are channel independent: every (channel, start) pair is one
  univariate sample. See /work/shared/notes/datasets.md §2.
* Data made of several independent series (ICD recordings, the series of a Monash .tsf file) is a
  list of segments: `SegmentWindows` cuts windows inside each segment, never across two, and
  `make_segment_splits` fits the scaler on the pooled train segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codegen.errors import UserError

_ETT_HOURLY_ROWS = 17420
_ETT_MONTHS = (12, 4, 4)  # train / val / test, months of 30 days
_ETT_ROWS_PER_MONTH = 30 * 24


def split_protocol(rows: int) -> str:
    """Which split split_borders cuts a series of ``rows`` rows by: chosen by the row count alone, so
    it is recorded (an ETT file one row short gets the 70/10/20 split)."""
    return "ETT 12/4/4 months" if rows in (_ETT_HOURLY_ROWS, 4 * _ETT_HOURLY_ROWS) else "70/10/20 by time"


def split_borders(rows: int, lookback: int) -> list[tuple[int, int]]:
    """[start, end) rows of the train, val and test segments (inputs included)."""
    if rows in (_ETT_HOURLY_ROWS, 4 * _ETT_HOURLY_ROWS):
        per_month = _ETT_ROWS_PER_MONTH * (rows // _ETT_HOURLY_ROWS)
        train_end = _ETT_MONTHS[0] * per_month
        val_end = train_end + _ETT_MONTHS[1] * per_month
        test_end = val_end + _ETT_MONTHS[2] * per_month
        return [(0, train_end), (max(0, train_end - lookback), val_end), (max(0, val_end - lookback), test_end)]
    return ratio_borders(rows, lookback)


def ratio_borders(rows: int, lookback: int) -> list[tuple[int, int]]:
    """The 70/10/20 split by time (LTSF `Dataset_Custom`), whatever the length: [start, end) rows."""
    train_end = int(rows * 0.7)
    val_end = rows - int(rows * 0.2)
    return [(0, train_end), (max(0, train_end - lookback), val_end), (max(0, val_end - lookback), rows)]


def evenly_spaced(n: int, count: int) -> np.ndarray:
    """``count`` strictly increasing indices spread evenly over range(n) (all of them if fewer): the
    one rule for `cisl train`'s saved test and calibration windows and `cisl eval --max-windows`."""
    if count >= n:
        return np.arange(n)
    return np.arange(count, dtype=np.int64) * n // count


@dataclass(frozen=True)
class StandardScaler:
    """Per-channel (x - mean) / std with the population std, like sklearn's StandardScaler."""

    mean: np.ndarray
    std: np.ndarray

    @staticmethod
    def fit(rows: np.ndarray) -> "StandardScaler":
        rows = np.asarray(rows, dtype=np.float64)
        mean, var = rows.mean(axis=0), rows.var(axis=0)
        # A constant channel is only centred. Like sklearn (_is_constant_feature), "constant" allows for
        # the rounding of the mean: a channel whose train rows all hold 1379.99975585 has var ~1e-22.
        eps = np.finfo(np.float64).eps
        constant = var <= len(rows) * eps * var + (len(rows) * mean * eps) ** 2
        std = np.sqrt(var)
        std[constant] = 1.0
        return StandardScaler(mean, std)

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
        return evenly_spaced(len(self), count)


class SegmentWindows:
    """Stride-1 windows of several independent series (segments), never crossing from one to the next.

    Every segment is [rows, channels] (scaled float32; segments may differ in length but not in
    channels). Sample order is segment-major, then channel, then start, so one segment gives the
    same samples in the same order as `Windows`. Segments too short for one window give none.
    """

    def __init__(self, segments: list[np.ndarray] | tuple[np.ndarray, ...], lookback: int, horizon: int):
        self.segments = tuple(np.asarray(s, dtype=np.float32) for s in segments)
        if any(s.ndim != 2 for s in self.segments):
            raise ValueError("segments must be [rows, channels]")
        self.lookback, self.horizon = lookback, horizon
        columns = [s[:, c] for s in self.segments for c in range(s.shape[1])]  # one univariate series each
        self._channel = np.array([c for s in self.segments for c in range(s.shape[1])], dtype=np.int64)
        lengths = np.array([len(c) for c in columns], dtype=np.int64)
        self._flat = np.concatenate(columns) if columns else np.zeros(0, np.float32)
        self._col_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        counts = np.maximum(0, lengths - lookback - horizon + 1)
        self._first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # first sample of each column

    def __len__(self) -> int:
        return int(self._first[-1])

    def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inputs x [n, lookback] and targets y [n, horizon] (float32) of the given samples."""
        idx = np.asarray(idx, dtype=np.int64)
        col = np.searchsorted(self._first, idx, side="right") - 1
        base = self._col_start[col] + idx - self._first[col]
        x = self._flat[base[:, None] + np.arange(self.lookback)]
        y = self._flat[base[:, None] + self.lookback + np.arange(self.horizon)]
        return x, y

    def channel_of(self, idx: np.ndarray) -> np.ndarray:
        """The channel (column of the segments) of each given sample, e.g. to undo the scaler."""
        idx = np.asarray(idx, dtype=np.int64)
        return self._channel[np.searchsorted(self._first, idx, side="right") - 1]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.take(np.arange(len(self)))

    def evenly_spaced(self, count: int) -> np.ndarray:
        """``count`` strictly increasing sample indices spread evenly over the split (all if fewer)."""
        return evenly_spaced(len(self), count)


@dataclass(frozen=True)
class Splits:
    train: Windows | SegmentWindows
    val: Windows | SegmentWindows
    test: Windows | SegmentWindows
    scaler: StandardScaler
    borders: list[tuple[int, int]]  # row borders of a single series (make_splits); empty for segments
    protocol: str = ""  # how the splits were cut (split_protocol): said in train.json and by cisl train
    warnings: tuple[str, ...] = ()  # what makes the scores doubtful (cisl train prints them; train.json keeps them)


def constant_channel_warnings(train: np.ndarray, later: np.ndarray, names: Sequence[str] | None = None) -> tuple[str, ...]:
    """A channel constant over the training rows is only centred (StandardScaler); if it varies in the
    validation or test rows the model never saw it move, and its errors there are on an unscaled
    axis (the ICD sample's pSpintor::VAX_speed: val MSE 222). Say so, one line per channel."""
    train, later = np.asarray(train, dtype=np.float64), np.asarray(later, dtype=np.float64)
    out = []
    if not len(train) or not len(later):
        return ()
    for c in range(train.shape[1]):
        t = train[:, c]
        if t.max() != t.min():
            continue
        lo, hi = float(np.nanmin(later[:, c])), float(np.nanmax(later[:, c]))
        if lo == hi == float(t[0]):
            continue
        name = f"'{names[c]}'" if names is not None and c < len(names) else f"channel {c}"
        later_is = f"is {lo:g}" if lo == hi else f"ranges {lo:g}..{hi:g}"
        out.append(f"{name} is constant ({float(t[0]):g}) over the training rows but {later_is} in the "
                   f"validation/test rows: the model never saw it change and it is only centred, not scaled, so its "
                   f"errors can dominate the MSE; drop it from [data] columns or use data where it varies in training")
    return tuple(out)


def make_splits(series: np.ndarray, lookback: int, horizon: int, source: str,
                names: Sequence[str] | None = None) -> Splits:
    """Scale ``series`` [rows, channels] with the train statistics and cut the three splits.

    ``source`` names the data in error messages (a file path or "synthetic data"); ``names`` the
    channels in warnings.
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
    warnings = constant_channel_warnings(series[borders[0][0]:borders[0][1]], series[borders[0][1]:], names)
    return Splits(parts[0], parts[1], parts[2], scaler, borders, split_protocol(rows), warnings)


def time_split_segments(series: list[np.ndarray], lookback: int) -> tuple[list[np.ndarray], ...]:
    """Split every series by time 70/10/20 (`ratio_borders`): three lists of segments.

    As in `make_splits`, validation and test segments start ``lookback`` rows early so that their
    first windows' targets are the split's first rows.
    """
    parts: tuple[list[np.ndarray], ...] = ([], [], [])
    for s in series:
        for part, (a, b) in zip(parts, ratio_borders(len(s), lookback)):
            part.append(s[a:b])
    return parts


def make_segment_splits(train: list[np.ndarray], val: list[np.ndarray], test: list[np.ndarray], lookback: int,
                        horizon: int, source: str, protocol: str = "70/10/20 by time, per series",
                        names: Sequence[str] | None = None) -> Splits:
    """Scale every segment [rows, channels] with the statistics of the pooled train rows; window each split.

    ``source`` names the data in error messages; ``protocol`` says how the segments were cut.
    """
    if not train:
        raise UserError(f"{source} has no training data; use more data")
    scaler = StandardScaler.fit(np.concatenate([np.asarray(s, dtype=np.float64) for s in train], axis=0))
    parts = [SegmentWindows([scaler.transform(s) for s in segs], lookback, horizon) for segs in (train, val, test)]
    for name, part in zip(("train", "validation", "test"), parts):
        if len(part) == 0:
            raise UserError(f"{source}: the {name} split has no window of lookback {lookback} + horizon {horizon} "
                            "rows; use more or longer series, or a shorter lookback/horizon")
    pooled = np.concatenate([np.asarray(s, dtype=np.float64) for s in train], axis=0)
    later = [np.asarray(s, dtype=np.float64) for s in (*val, *test) if len(s)]
    warnings = constant_channel_warnings(pooled, np.concatenate(later, axis=0), names) if later else ()
    return Splits(parts[0], parts[1], parts[2], scaler, [], protocol, warnings)
