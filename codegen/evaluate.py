"""Forecast error of a compiled plan: float plan vs int8 reference, on the data's scale.

The int8 path is exactly what the nodes compute (the reference is bit-exact with the generated C);
the float path is the same split model in float (equal to ONNX Runtime and torch within 1e-4).
Windows are RevIN-normalised on the host as in deployment, and errors are measured after undoing
RevIN, i.e. on the dataset's StandardScaler scale where the literature reports ETT MSE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data.revin import revin_normalize
from .executor import PlanExecutor
from .plan.io import Plan


@dataclass
class Accuracy:
    windows: int
    mse_float: float
    mse_int8: float

    @property
    def relative_increase(self) -> float:
        return (self.mse_int8 - self.mse_float) / self.mse_float


def forecast_mse(plan: Plan, weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, revin: bool = True,
                 batch: int = 1024, progress=None) -> Accuracy:
    """MSE of the float plan and of the int8 reference on raw windows x [n, L] with targets y [n, horizon]."""
    flt = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "float", weights=weights)
    q8 = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "int8",
                      constants=[n.constants for n in plan.nodes])
    se_f = se_q = 0.0
    starts = range(0, len(x), batch)
    for i in (progress(starts) if progress else starts):
        xb, yb = x[i:i + batch], y[i:i + batch]
        if revin:
            xn, mean, std = revin_normalize(xb)
        else:
            xn, mean, std = xb.astype(np.float32), np.zeros((len(xb), 1)), np.ones((len(xb), 1))
        pf = flt.run(xn.astype(np.float32)).output * std + mean
        pq = plan.dequantize_output(q8.run(plan.quantize_input(xn)).output) * std + mean
        se_f += float(np.sum((pf - yb) ** 2))
        se_q += float(np.sum((pq - yb) ** 2))
    n = y.size
    return Accuracy(len(x), se_f / n, se_q / n)
