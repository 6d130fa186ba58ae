"""Forecast error of a model: float or int8, with or without sampled message loss.

The int8 path is exactly what the nodes compute (the reference executor is bit-exact with the
generated C, also under loss); the float path is the same split model in float (equal to ONNX
Runtime and torch within 1e-4). Windows are RevIN-normalised on the host as in deployment, and
errors are measured after undoing RevIN, i.e. on the dataset's StandardScaler scale where the
literature reports ETT MSE.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .data.revin import revin_normalize
from .executor import PlanExecutor
from .lossmodel import LossRates, sample_rounds
from .onnx_model import CislModel
from .plan.io import Plan


@dataclass
class Accuracy:
    windows: int
    mse_float: float
    mse_int8: float

    @property
    def relative_increase(self) -> float:
        return (self.mse_int8 - self.mse_float) / self.mse_float


@dataclass
class EvalSet:
    """Normalised windows and targets, and each window's RevIN scale (errors x scale = data errors)."""

    x: np.ndarray  # [n, L] float32, normalised
    y: np.ndarray  # [n, horizon] float32, normalised like x
    scale: np.ndarray  # [n] float32
    warnings: tuple[str, ...] = ()  # what makes scores on this data doubtful (as `cisl train` warns)

    @staticmethod
    def from_raw(x: np.ndarray, y: np.ndarray, revin: bool = True) -> "EvalSet":
        if not revin:
            return EvalSet(x.astype(np.float32), y.astype(np.float32), np.ones(len(x), np.float32))
        xn, mean, std = revin_normalize(x)
        return EvalSet(xn, ((y - mean) / std).astype(np.float32), std.reshape(-1).astype(np.float32))


def forecast_mse(plan: Plan, weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, revin: bool = True,
                 batch: int = 1024, progress=None) -> Accuracy:
    """MSE of the float plan and of the int8 reference on raw windows x [n, L] with targets y [n, horizon]."""
    data = EvalSet.from_raw(x, y, revin)
    flt = _executor(plan, "float", weights)
    q8 = _executor(plan, "int8")
    return Accuracy(len(x), _mse(flt, data, None, None, batch, progress), _mse(q8, data, plan, None, batch, progress))


def _executor(plan: Plan, mode: str, weights: dict[str, np.ndarray] | None = None) -> PlanExecutor:
    return PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, mode,
                        weights=weights, constants=[n.constants for n in plan.nodes] if mode == "int8" else None)


def _mse(ex: PlanExecutor, data: EvalSet, plan: Plan | None, loss: tuple[LossRates, int] | None, batch: int,
         progress) -> float:
    """Squared error on the data's scale, averaged; ``plan`` given = int8 (quantise in, de-quantise out)."""
    rng = np.random.default_rng(loss[1]) if loss else None
    se = 0.0
    starts = range(0, len(data.x), batch)
    for i in (progress(starts) if progress else starts):
        xb, yb, sb = data.x[i:i + batch], data.y[i:i + batch], data.scale[i:i + batch]
        lost = sample_rounds(rng, len(ex.sgs), len(xb), ex.devices, loss[0]) if loss else None
        if plan is not None:
            pred = plan.dequantize_output(ex.run(plan.quantize_input(xb), lost=lost).output)
        else:
            pred = ex.run(xb.astype(np.float32), lost=lost).output
        se += float(np.sum(((pred - yb) * sb[:, None]) ** 2))
    return se / data.y.size


@dataclass
class LossEval:
    mode: str  # "float" or "int8"
    rates: LossRates
    seeds: list[int]
    mse: list[float]  # per seed

    @property
    def mean(self) -> float:
        return float(np.mean(self.mse))

    @property
    def std(self) -> float:
        return float(np.std(self.mse))


def evaluate_sweep(model: CislModel, data: EvalSet, int8: bool, rates: list[LossRates], seeds: Iterable[int],
                   devices: int | None = None, calibration: Path | None = None, batch: int = 1024,
                   progress: Callable | None = None) -> list[LossEval]:
    """Test MSE of ``model`` at each of ``rates`` (sampled message loss), once per seed.

    Float: the split model in float. int8: the model compiled once (in a temporary folder, with
    the calibration set) and run through the bit-exact int8 reference. Losses are drawn per round
    and window from the paper's three modes; seeds make every run reproducible.
    """
    from .compile import CompileOptions, choose_split, compile_model
    from .plan.io import load_plan
    from .plan.structure import build_structure

    seeds = list(seeds)
    plan = None
    if int8:
        with tempfile.TemporaryDirectory(prefix="cisl-eval-") as tmp:
            compile_model(model.path, Path(tmp) / "build", CompileOptions(devices=devices, calibration=calibration))
            plan = load_plan(Path(tmp) / "build")
        ex = _executor(plan, "int8")
    else:  # the float split model needs no quantisation: run the plan's structure directly
        split, masks = choose_split(model, devices)
        st = build_structure(model.config, split, masks, model.keep_ratio, rescale=model.rescale,
                             prune_own=model.prune_own)
        ex = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float",
                          weights=model.weights)
    out = []
    for r in rates:
        mses = []
        for seed in seeds:
            mses.append(_mse(ex, data, plan, (r, seed) if r.any else None, batch, progress))
            if not r.any:  # without loss every seed gives the same number
                mses = mses * len(seeds)
                break
        out.append(LossEval("int8" if int8 else "float", r, seeds, mses))
    return out


def load_eval_set(model: CislModel, model_path: Path, data: Path | None = None, which: str = "test",
                  max_windows: int | None = None) -> EvalSet:
    """The windows `cisl eval` scores: split ``which`` of ``data`` (loaded as in training), or the test
    windows `cisl train` saved next to the model; at most ``max_windows`` of them, evenly spaced by the
    rule `cisl train` picks its test windows with (so ``--max-windows`` = the run's ``test_samples``
    scores the saved windows' samples)."""
    from .data.protocol import evenly_spaced
    from .errors import UserError

    trained = model.training.get("config", {}).get("data", {})
    if data is not None:
        from .data.dataset import load_data, source_for_path

        # as `cisl train --data`: the training's columns apply only to data of the same kind (a .csv after a .csv)
        source = source_for_path(data, trained.get("source"))
        columns = (trained.get("columns") or None) if source == trained.get("source") else None
        splits, desc = load_data(source, data, columns, model.config.lookback, model.config.horizon)
        windows = splits.test if which == "test" else splits.val
        x, y = windows.take(windows.evenly_spaced(max_windows or len(windows)))
        es = EvalSet.from_raw(x, y, model.config.revin)
        es.warnings = tuple(desc.get("warnings", ()))
    else:
        from .compile import load_test_set

        here = Path(model_path).parent
        for name in ("test_windows.npy", "test_targets.npy"):
            if not (here / name).is_file():
                raise UserError(f"{here / name}: not found; pass --data with the data set to score")
        x, y, scale = load_test_set(here, model, " (or score it on a data set with --data)")
        es = EvalSet(x, y, scale if scale is not None else np.ones(len(x), np.float32))
        if max_windows is not None:  # a subset of the saved windows, spaced by the same rule
            pick = evenly_spaced(len(es.x), max_windows)
            es = EvalSet(es.x[pick], es.y[pick], es.scale[pick])
        es.warnings = tuple(model.training.get("data", {}).get("warnings", ()))  # the windows are of that data
    return es


@dataclass
class EvalRun:
    """What `cisl eval` scored: one rate (``sweep`` None) or one result per rate of the sweep."""

    windows: int
    rates: LossRates
    sweep: list[float] | None
    results: list[LossEval]
    warnings: tuple[str, ...] = ()  # the data's, as `cisl train` printed them
    devices: int = 0  # the nodes the model was split for

    def records(self) -> list[dict]:
        return [{"mode": r.mode, "windows": self.windows, "loss": vars(r.rates),
                 "effective_link_loss": r.rates.effective_link_loss, "seeds": r.seeds, "mse": r.mse, "mean": r.mean,
                 "std": r.std} for r in self.results]

    def save(self, path: Path) -> None:
        """Write the result as JSON (one record, or {"sweep": [...]}); only over a file `cisl eval` wrote."""
        import json

        from .fsutil import write_output_file

        records = self.records()
        write_output_file(path, json.dumps(records[0] if self.sweep is None else {"sweep": records}, indent=1) + "\n",
                          eval_json_ours)


def run_eval(model_path: Path, data: Path | None = None, which: str = "test", int8: bool = False,
             devices: int | None = None, calibration: Path | None = None, rates: LossRates | None = None,
             sweep: list[float] | None = None, seeds: int = 3, max_windows: int | None = None,
             progress: Callable | None = None) -> EvalRun:
    """`cisl eval`: test MSE of the model at ``model_path`` under ``rates`` (seeds 0..seeds-1), or at
    each loss probability of ``sweep`` applied to all three modes."""
    from .errors import UserError
    from .onnx_model import load_model

    rates = rates or LossRates()
    if sweep is not None and rates.any:
        raise UserError("--sweep sets the loss rates itself; drop --loss/--loss-link/--loss-receiver/--loss-sender")
    m = load_model(model_path)
    es = load_eval_set(m, model_path, data, which, max_windows)
    all_rates = [LossRates.uniform(q) for q in sweep] if sweep is not None else [rates]
    results = evaluate_sweep(m, es, int8, all_rates, range(seeds), devices, calibration, progress=progress)
    return EvalRun(len(es.x), rates, sweep, results, es.warnings, devices or m.devices)


def eval_json_ours(old: str) -> bool:
    """An existing --json file `cisl eval` wrote (it may be replaced)."""
    return old.lstrip().startswith("{") and ('"sweep"' in old or '"mse' in old)
