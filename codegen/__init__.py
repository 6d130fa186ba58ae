"""cisl: split a time-series transformer across ultra-low-power wireless nodes."""

__version__ = "0.1.0"
