"""Time-series data for training and evaluation (numpy only, no torch).

* `synthetic` — a built-in multivariate generator, so that `cisl train` works without files.
* `csvdata` — ETT-format CSV files.
* `protocol` — the standard long-term-forecasting protocol: splits, StandardScaler, windows.
* `revin` — per-window normalisation (RevIN) on the host.
"""

from codegen.data.csvdata import load_csv
from codegen.data.protocol import Splits, StandardScaler, Windows, make_splits, split_borders
from codegen.data.revin import revin_denormalize, revin_normalize
from codegen.data.synthetic import synthetic_series

__all__ = [
    "Splits", "StandardScaler", "Windows", "load_csv", "make_splits", "revin_denormalize", "revin_normalize",
    "split_borders", "synthetic_series",
]
