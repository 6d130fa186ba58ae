"""`cisl sweep`: `cisl train` over a grid (seeds × keep ratios × loss rates …) as sweep units.

Each grid point is one `codegen.sweep` unit calling `train_unit`: `run_train` with the config and the
point's overrides, the model written to ``WORK/<id>/model``. The record's result is the training
summary without its wall time (which lives in the record's ``run``) and the epoch a resumed call started
from, so every backend, and a unit stopped and resumed, writes the same record for the same unit.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from codegen.errors import UserError
from codegen.sweep import Context, Unit
from codegen.train.config import load_config
from codegen.train.launch import LOSS_KEYS
from codegen.train.preflight import effective_threads

TRAIN_FN = "codegen.train.sweep:train_unit"
# What a training's result depends on (a unit's code version, codegen.sweep Unit.code): training, data, loss
# model, split and the ONNX export, not the C emitter, the planner or the radio; an edit elsewhere in codegen
# keeps the sweep's records and its stopped units' checkpoints (`cisl sweep`, bench/split_training.py)
TRAINING_CODE = ("train", "data", "elastic.py", "onnx_model.py", "lossmodel.py", "partition.py", "modelspec.py",
                 "plan/structure.py", "planner/split.py", "errors.py", "config_schema.py", "optional.py")
LOSS_OVERRIDES = tuple(f"dropout.{k}" for k in LOSS_KEYS)


def train_unit(params: dict, ctx: Context) -> dict:
    """`cisl train` with its checkpoints in the unit's work folder: a unit stopped by a time limit (or by
    [train] stop_after_epochs, which ends the call without a record) resumes there when the sweep runs
    again, and ends with the model of an uninterrupted run."""
    from codegen.train.api import CHECKPOINT_NAME, run_train

    out, work = ctx.work / "model", ctx.work / "train"
    summary = run_train(params.get("config"), params.get("data"), out, params["overrides"] or None, progress=False,
                        resume=(work / CHECKPOINT_NAME).is_file(), work_dir=work)
    if summary.get("stopped"):
        where = (f"{summary['prune_stages_done']} pruning stage(s)" if "prune_stages_done" in summary
                 else f"epoch {summary['epochs_done']} of {summary['epochs']}")
        raise RuntimeError(f"stopped after {where} ([train] stop_after_epochs); run the sweep again to continue")
    # how this call ran (its wall time, the epoch it resumed from) is no part of the result: a unit resumed
    # after a stop writes the record an uninterrupted one does
    summary = {k: v for k, v in summary.items() if k not in ("seconds", "resumed_from_epoch")}
    return {"model_dir": f"{ctx.unit_id}/model", "summary": summary}  # relative to the sweep's work folder


def input_files(config: Path | None, data: Path | None) -> tuple[str, ...]:
    """Every file or folder a training with these arguments reads: the config, the data (--data, else
    the config's [data] path), an ICD [data] manifest and a [split] file, each once. Their content is
    part of a unit's id, so a changed data set runs the unit again instead of reusing its record."""
    from codegen.train.preflight import resolve_config

    for path, what in ((config, "config"), (data, "data")):
        if path is not None and not Path(path).exists():
            raise UserError(f"{path}: {what} not found")
    cfg = resolve_config(config, data, None)
    files = [str(p) for p in (config, data) if p is not None]
    named = [(cfg.data.path if data is None and cfg.data.source != "synthetic" else "", "[data] path"),
             (cfg.data.manifest, "[data] manifest"), (cfg.split.file, "[split] file")]
    for path, key in named:
        if not path:
            continue
        if not Path(path).exists():
            raise UserError(f"{path}: not found (the {key} of {config}); fix the path in the config"
                            + (" or pass --data" if key == "[data] path" else ""))
        files.append(path)
    return tuple(dict.fromkeys(files))


def grid_units(config: Path | None, data: Path | None, axes: dict[str, list[Any]],
               fixed: dict[str, Any] | None = None) -> list[Unit]:
    """One training unit per point of the grid ``axes`` ({dotted config key: values}), with ``fixed``
    overrides in every unit. The config and every file the training reads (`input_files`) enter each
    unit's id by content, and so do the training code (TRAINING_CODE) and the effective thread count."""
    keys = list(axes)
    files = input_files(config, data)
    base_threads = load_config(config).train.threads  # the overrides are checked later, with their own messages
    units = []
    for values in itertools.product(*(axes[k] for k in keys)):
        overrides = {**(fixed or {}), **dict(zip(keys, values))}
        if "dropout.q" in keys:  # as `cisl train --dropout` with that q: the rate replaces the config's loss setting
            overrides.update({k: 0.0 for k in LOSS_OVERRIDES if k != "dropout.q"})
        label = " ".join(f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                         for k, v in zip(keys, values)) or "train"
        # the bytes depend on the thread count ([train] threads as CISL_THREADS caps it): another count is another
        # unit, not a record reused or a checkpoint that refuses to resume
        threads = effective_threads(overrides.get("train.threads", base_threads))
        units.append(Unit(TRAIN_FN, {"config": str(config) if config else None, "data": str(data) if data else None,
                                     "overrides": overrides, "threads": threads}, data=files, label=label,
                          code=TRAINING_CODE))
    return units


def check_units(units: list[Unit]) -> None:
    """Check every unit's config as `cisl train` does before torch, and read the data once, before any
    unit runs: a mistake in the file, an override or the data is one line, not the same failure once per
    unit after the workers started (and no sweep folder is made for it)."""
    from codegen.data.dataset import load_data
    from codegen.train.preflight import check_config

    sources = {}
    for u in units:
        data = u.params.get("data")
        cfg = check_config(u.params.get("config"), Path(data) if data else None, u.params["overrides"] or None)
        d, m = cfg.data, cfg.model
        if d.source != "synthetic":  # every unit reads the same data: once for its window length
            sources[(d.source, d.path, tuple(d.columns), m.lookback, m.horizon, d.manifest)] = None
    for source, path, columns, lookback, horizon, manifest in sources:
        load_data(source, path, list(columns), lookback, horizon, manifest or None)
