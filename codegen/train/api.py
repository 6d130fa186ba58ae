"""`cisl train` as a function: config -> data -> split model -> training -> model.onnx + arrays.

Outputs (written atomically into ``out_dir``):
  model.onnx          the split model with cisl metadata (codegen.onnx_model.build_onnx)
  calibration.npy     float32 [n_cal, L]: windows from the TRAIN split as the model sees them
  test_windows.npy    float32 [n_test, L]: test inputs as the model sees them (after RevIN if on)
  test_targets.npy    float32 [n_test, horizon]: their targets, normalised the same way
  train.json          summary + resolved config + per-epoch history (+ pruning stages and final masks)

[prune] method = "normal" (the Q3 baseline) is exported like any model, with cisl.masks.prune_own:
a column nobody broadcasts is dead for its owner too (LayerNorms and consumers leave it out), so it
compiles, runs in int8 and on the testbed like a somegather-pruned model.

While training, a checkpoint is saved after every epoch into the run's work folder (by default the
hidden sibling ``.<out name>.cisl-train/`` of ``out_dir``); ``resume=True`` continues from it and
gives the same bytes as an uninterrupted run. The pruning saves its state after every stage there
too (``prune.pt``). Both are deleted once the outputs are written. Only checkpoints cisl wrote are
ever overwritten or deleted: a work folder holding a file of those names that is not one is refused
(check_work_dir), and one run at a time uses a work folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from codegen.optional import require

torch = require("torch", feature="cisl train", extra="train")  # one line naming the extra when torch is missing

from codegen.data.dataset import load_data
from codegen.data.protocol import SegmentWindows, Splits, Windows, make_splits
from codegen.data.revin import revin_normalize
from codegen.data.synthetic import synthetic_series
from codegen.elastic import Modes, permute
from codegen.errors import UserError
from codegen.fsutil import atomic_output_dir, check_creatable, check_output_dir, discard_output, missing_parents, \
    output_lock, use_lock
from codegen.lossmodel import LossRates
from codegen.modelspec import ModelConfig
from codegen.onnx_model import build_onnx
from codegen.partition import Masks, Split, realised_keep
from codegen.train.config import RENAMED, TrainConfig
from codegen.train.preflight import check_elastic_modes, check_model_fits_memory, check_synthetic_fits_memory, \
    effective_threads, make_masks, model_warnings, resolve_config
from codegen.train.dropout import LossRange, evaluate_with_loss
from codegen.train.elastic import make_elastic, unit_tensors
from codegen.train.loop import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, NotResumable, checkpoint_meta, evaluate, \
    fit, is_cisl_checkpoint, load_checkpoint, save_checkpoint
from codegen.train.model import SplitPatchTST, state_to_numpy
from codegen.train.pruning import column_counts, communication, drop_pruned_weights, run_pruning

OUTPUT_FILES = ("model.onnx", "calibration.npy", "test_windows.npy", "test_targets.npy", "test_scale.npy",
                "train.json")


# --------------------------------------------------------------------------------------------
# Pieces (also used by tests)
# --------------------------------------------------------------------------------------------

def make_untrained(cfg: ModelConfig, split: Split, masks: Masks, seed: int) -> dict[str, np.ndarray]:
    """Freshly initialised weights (training's init), with random LayerNorm gamma/beta and biases.

    Training starts from gamma = 1, beta = 0; randomising them (and the biases) makes tests exercise
    every parameter. Uses a private RNG state: the caller's torch seed is untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SplitPatchTST(cfg, split, masks)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".ln" in name and name.endswith(".weight"):
                    p.uniform_(0.5, 1.5)
                elif name.endswith(".bias"):
                    p.normal_(0.0, 0.2)
    return state_to_numpy(model)


def build_data(cfg: TrainConfig) -> tuple[Splits, dict[str, Any]]:
    """The scaled train/val/test windows and a provenance description of the data."""
    d, m = cfg.data, cfg.model
    if d.source != "synthetic":  # csv, tsf, icd: codegen.data.dataset picks the loader
        return load_data(d.source, d.path, d.columns, m.lookback, m.horizon, d.manifest or None)
    check_synthetic_fits_memory(d.synthetic_length, d.synthetic_channels)
    series, names = synthetic_series(d.synthetic_length, d.synthetic_channels, d.synthetic_seed)
    desc = {"source": "synthetic", "length": d.synthetic_length, "channels": d.synthetic_channels,
            "seed": d.synthetic_seed}
    return make_splits(series, m.lookback, m.horizon, f"synthetic data (length {d.synthetic_length})"), desc


def model_inputs(windows: Windows | SegmentWindows, idx: np.ndarray,
                 revin: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows and targets exactly as the model sees them: RevIN-normalised by the window's statistics.

    Also returns each window's RevIN scale (its std; 1 without RevIN): an error in normalised units
    times this scale is the error on the data's scale, where train.json reports MSE.
    """
    x, y = windows.take(idx)
    scale = np.ones(len(x), dtype=np.float32)
    if revin:
        x, mean, std = revin_normalize(x)
        y = ((y - mean) / std).astype(np.float32)
        scale = std.reshape(-1).astype(np.float32)
    return (np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(y, dtype=np.float32),
            np.ascontiguousarray(scale))


@contextmanager
def _torch_settings(threads: int) -> Iterator[None]:
    """``threads`` (effective_threads) and deterministic kernels for the run; the caller's settings
    come back after."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


MODEL_KIND = "model"


def model_entry(name: str) -> bool:
    """What `cisl train` writes into its output folder."""
    return name in OUTPUT_FILES


def legacy_model(target: Path) -> bool:
    """A model folder of a cisl version before the owner file: its train.json is `cisl train`'s report."""
    try:
        return "summary" in json.loads((Path(target) / "train.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def check_model_output(out_dir: Path) -> None:
    """Before the training, not after it: ``out_dir`` must be new, empty, or a model folder cisl wrote
    (never a folder holding the user's files, which the new model would replace)."""
    check_output_dir(out_dir, MODEL_KIND, model_entry, legacy_model)


def write_atomically(out_dir: Path, files: dict[str, bytes]) -> None:
    """The model folder, whole or not at all: written next to ``out_dir``, then renamed over it (a
    folder cisl may replace, see check_model_output)."""
    with atomic_output_dir(Path(out_dir), MODEL_KIND, model_entry, legacy_model) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)


# --------------------------------------------------------------------------------------------
# run_train
# --------------------------------------------------------------------------------------------

CHECKPOINT_NAME = "checkpoint.pt"


def default_work_dir(out_dir: Path) -> Path:
    """Where a run keeps its checkpoint: the hidden sibling ``.<name>.cisl-train`` of the output folder."""
    out = Path(out_dir).absolute()
    return out.parent / f".{out.name}.cisl-train"


def training_split(cfg: TrainConfig) -> tuple[Split, dict[str, Any] | None]:
    """The split to train for: [split] file's (and what to record of it), else the even split."""
    m, s = cfg.model, cfg.split
    if not s.file:
        return Split.even(s.devices, m.heads, m.d_model, m.mlp_hidden), None
    from ..planner.split import read_split

    planned = read_split(s.file)
    if planned.model != m:
        raise UserError(f"{s.file}: a split planned for another model ({planned.model.to_json()}); plan this "
                        f"config with `cisl plan CONFIG.toml --testbed T --deadline MS -o {s.file}`")
    keep = cfg.prune.keep if cfg.prune.method != "none" else s.random_keep
    if abs(planned.keep_ratio - keep) > 1e-9:
        raise UserError(f"{s.file}: planned for keep {planned.keep_ratio:g} (its message sizes and memory), but "
                        f"this run keeps {keep:g}; train with --keep {planned.keep_ratio:g} or plan again for keep "
                        f"{keep:g}")
    record = {"file": Path(s.file).name, "nodes": planned.nodes, "boards": planned.boards,
              "heads_per_device": planned.heads, "hidden_per_device": planned.hidden}
    return planned.split, json.loads(json.dumps(record))


PRUNE_CHECKPOINT_NAME = "prune.pt"


def check_work_dir(work: Path, resume: bool = False) -> None:
    """Before the run: a run overwrites and deletes checkpoint.pt and prune.pt in ``work``, so they must
    be absent or cisl's own checkpoints — never a file of the user's that has the name (--work may be
    any folder). With ``resume``, such a file is more likely a checkpoint of the run being resumed that
    was damaged (a disk error, a copy cut short): the message says what to do in either case."""
    for name in (CHECKPOINT_NAME, PRUNE_CHECKPOINT_NAME):
        path = Path(work) / name
        if os.path.lexists(path) and not is_cisl_checkpoint(path):
            if resume:
                again = ("delete it and run with --resume again (the dense epochs resume from "
                         f"{CHECKPOINT_NAME}; the pruning starts over)" if name == PRUNE_CHECKPOINT_NAME else
                         "delete it and run without --resume (the run starts over)")
                raise NotResumable(f"{path}: cannot be read as a cisl checkpoint, so cisl will not resume from it or "
                                   f"overwrite it: if it is a damaged checkpoint of this run, {again}; if it is a file "
                                   f"of yours, move it away or choose another folder with --work")
            raise UserError(f"{path}: exists and is not a cisl checkpoint, so cisl will not overwrite it; move it "
                            f"away or choose another folder with --work")


def _stages(history: list[dict[str, Any]]) -> int:
    return sum(1 for h in history if h["stage"] != "finetune")


class _Budget:
    """[train] stop_after_epochs across the phases of one call: the dense fit stops itself; pruning
    stops at the first stage boundary after the budget is spent."""

    def __init__(self, limit: int, used: int) -> None:
        self.limit, self.used = limit, used
        self.prune_stages = 0  # stages finished so far (saved ones included): what a stopped run reports

    def spent(self) -> bool:
        return self.limit > 0 and self.used >= self.limit


def _prune(cfg: TrainConfig, model: SplitPatchTST, data: Splits, train_idx: np.ndarray, progress: bool,
           path: Path, meta: dict[str, Any], resume: bool, budget: _Budget) -> list[dict[str, Any]] | None:
    """[prune] after the dense epochs. Every retraining phase is a fit of its own (fresh Adam and
    cosine schedule over the phase, own data order) that keeps its best-validation weights. After
    every stage the model, its masks, the history and torch's RNG are saved to ``path``; a resumed
    run continues after the last saved stage and ends as an uninterrupted run. Returns None when
    [train] stop_after_epochs ended the run (``path`` kept)."""
    p = cfg.prune
    if p.method == "none":
        return []
    done, history = 0, []
    if resume and path.is_file():
        # the dense epochs are safe in the other checkpoint: without this file the pruning starts over
        state = load_checkpoint(path, fix=f"delete it and run with --resume again (the dense epochs resume from "
                                          f"{CHECKPOINT_NAME}; the pruning starts over)")
        _check_resumable(path, checkpoint_meta(state), meta)
        model.set_masks(state["masks"], prune_own=p.method == "normal")
        model.load_state_dict(state["model"])
        torch.set_rng_state(state["torch_rng"])
        done, history = int(state["done"]), list(state["history"])
    budget.prune_stages = _stages(history)
    retrain = _retrainer(cfg, model, data, train_idx, progress, first=sum(1 for h in history if "epochs" in h),
                         budget=budget)

    def after(steps: int, hist: list[dict[str, Any]]) -> None:
        save_checkpoint(path, {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "meta": json.dumps(meta),
                               "done": steps, "masks": model.masks, "model": model.state_dict(),
                               "history": hist, "torch_rng": torch.get_rng_state()})
        budget.prune_stages = _stages(hist)

    return run_pruning(model, p.method, p.keep, p.step, p.epochs_per_step, p.finetune_epochs, retrain,
                       done=done, history=history, after=after, stop=budget.spent)


def _retrainer(cfg: TrainConfig, model: SplitPatchTST, data: Splits, train_idx: np.ndarray, progress: bool,
               first: int = 0, lr_scale: float = 1.0, budget: _Budget | None = None
               ) -> Callable[[str, int], dict[str, Any]]:
    """retrain(tag, epochs): one fit of its own per phase (fresh Adam and cosine schedule at
    lr_scale · train.lr, own data order: seed train.seed · 1000 + the phase's number) that keeps its
    best-validation weights."""
    t, phases = cfg.train, [first]

    def retrain(tag: str, epochs: int) -> dict[str, Any]:
        phases[0] += 1
        opts = dataclasses.replace(t, epochs=epochs, seed=t.seed * 1000 + phases[0], stop_after_epochs=0,
                                   lr=t.lr * lr_scale)
        res = fit(model, data.train, train_idx, data.val, opts, cfg.model.revin, progress)
        model.load_state_dict(res.best_state)
        if budget is not None:
            budget.used += epochs
        return {"epochs": epochs, "best_epoch": res.best_epoch, "val_mse": res.best_val, "history": res.history}

    return retrain


def _elastic(cfg: TrainConfig, model: SplitPatchTST, data: Splits, train_idx: np.ndarray, progress: bool
             ) -> tuple[Modes | None, dict[str, Any] | None]:
    """[elastic] after pruning: compress and grow into nested modes; every mode scored on validation
    and test. The phases' seeds follow the pruning's (a run without pruning has none of those)."""
    el = cfg.elastic
    if el.modes <= 1:
        return None, None
    retrain = _retrainer(cfg, model, data, train_idx, progress, first=500, lr_scale=el.lr_scale)
    # the model as trained, before the modes (what mode 0 is compared with)
    before = {"val_mse": evaluate(model, data.val, cfg.model.revin), "test_mse": evaluate(model, data.test, cfg.model.revin)}
    try:
        modes, record = make_elastic(model, model.masks, el.modes, el.core_macs, el.shrink, retrain,
                                     el.compress_epochs, el.grow_epochs, el.clip)
    except ValueError as e:
        raise UserError(f"[elastic] {e}") from None
    scores: dict[str, list[float]] = {"val_mse": [], "test_mse": []}
    for m in range(modes.count):
        model.set_units(unit_tensors(modes, m, model.split) if m else None)
        scores["val_mse"].append(evaluate(model, data.val, cfg.model.revin))
        scores["test_mse"].append(evaluate(model, data.test, cfg.model.revin))
    model.set_units(None)
    return modes, {**record, **scores, "before": before}


def _resume_meta(cfg: TrainConfig, data_desc: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the checkpoint: the config (minus run control) and the data."""
    config = cfg.to_dict()
    for key in ("path", "manifest"):  # where the data lies may change; its content (data_desc) may not
        config["data"].pop(key, None)
    config["train"].pop("stop_after_epochs", None)
    config["split"].pop("file", None)  # where the split file lies may change; its content (meta["split"]) may not
    return json.loads(json.dumps({"config": config, "data": data_desc}))  # as the checkpoint stores it


def _first_difference(saved: Any, now: Any, key: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(saved, dict) and isinstance(now, dict):
        for k in list(now) + [k for k in saved if k not in now]:
            diff = _first_difference(saved.get(k, "(absent)"), now.get(k, "(absent)"), f"{key}.{k}" if key else k)
            if diff:
                return diff
        return None
    return None if saved == now else (key, saved, now)


# keys an earlier cisl recorded in its checkpoints -> the key that took their place, and whether any value
# means the same there (else only the default, 1.0: no masks, no pruning) (config.RENAMED)
_RESUME_RENAMED = {("split", "keep_ratio"): (("split", "random_keep"), True),
                   ("prune", "target_keep"): (("prune", "keep"), False)}


def _renamed_keys(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's config with the keys earlier cisl versions wrote under their current names (audit V
    F4: an 8-day-old checkpoint's [split] keep_ratio = 1.0 was refused as "now (absent)", and neither
    keep_ratio nor random_keep in the config could resume it)."""
    config = {sec: dict(vals) if isinstance(vals, dict) else vals for sec, vals in config.items()}
    for (sec, key), ((new_sec, new_key), same) in _RESUME_RENAMED.items():
        if not isinstance(config.get(sec), dict) or key not in config[sec]:
            continue
        value = config[sec].pop(key)
        if not same and value != 1.0:
            raise NotResumable(f"{path}: cannot resume: the interrupted run (an earlier cisl) used [{sec}] {key} = "
                               f"{json.dumps(value)}, which this cisl no longer has ([{new_sec}] {new_key} means "
                               f"something else: {RENAMED[(sec, key)]}); run without --resume")
        config.setdefault(new_sec, {}).setdefault(new_key, value)
    return config


def _check_resumable(path: Path, saved: dict[str, Any], now: dict[str, Any]) -> None:
    # a key or a section added to the config after the checkpoint was written counts as its default
    defaults = _resume_meta(TrainConfig(), {})["config"]
    config = {sec: {**defaults.get(sec, {}), **vals}
              for sec, vals in {**{sec: {} for sec in defaults}, **_renamed_keys(path, saved.get("config", {}))}.items()}
    # a checkpoint from before the thread count was recorded ran at [train] threads, uncapped or not: unknown
    saved = {**saved, "config": config, "threads": saved.get("threads", now.get("threads"))}
    diff = _first_difference(saved, now)
    if diff is None:
        return
    key, was, is_now = diff
    part, _, rest = key.partition(".")
    if part == "config":
        section, _, name = rest.partition(".")
        what = f"[{section}] {name}"
    elif part == "threads":  # the config's threads are the same, CISL_THREADS is not
        raise NotResumable(f"{path}: cannot resume: the interrupted run trained on {was} threads, this one would on "
                        f"{is_now} ([train] threads capped by CISL_THREADS), and the weights depend on the count; "
                        f"set CISL_THREADS={was} (or unset it if that gives {was}) to resume")
    else:
        what = f"the data ({rest})"
    raise NotResumable(f"{path}: cannot resume: {what} was {json.dumps(was)} in the interrupted run, now "
                    f"{json.dumps(is_now)}; resume with the same configuration and data, or run without --resume")


def run_train(config_path: Path | None, data_path: Path | None, out_dir: Path, overrides: dict | None = None,
              progress: bool = True, resume: bool = False, work_dir: Path | None = None) -> dict:
    """Train the split model and write the outputs into ``out_dir``; returns the summary.

    ``config_path`` None means the defaults; ``data_path`` (if given) replaces the [data] source with
    that file or folder (loader by extension: .csv, .tsf, folder = ICD); ``overrides`` is
    {"section.key": value} or {"section": {key: value}}. A checkpoint is saved after every epoch in
    ``work_dir`` (default `default_work_dir`); ``resume`` continues from it. If [train]
    stop_after_epochs ends the run early, nothing is written to ``out_dir`` and the summary is
    {"stopped": True, "epochs_done", "epochs", "checkpoint", "seconds"} (and "prune_stages_done" when it
    stopped while pruning). A second training into the same folder is refused at its start, not
    hours later when the first one writes.
    """
    work = Path(work_dir) if work_dir is not None else default_work_dir(out_dir)
    # two runs writing one work folder (other outputs, same --work) would overwrite each other's checkpoints
    busy = f"{work}: another cisl train keeps its checkpoints there; wait for it to finish or choose another --work"
    made = missing_parents(work / CHECKPOINT_NAME)  # the work folder and the folders above it this run makes
    trained = [False]
    with output_lock(Path(out_dir)), use_lock(work, busy):
        try:
            return _run_train(config_path, data_path, out_dir, overrides, progress, resume, work_dir, trained)
        except UserError as e:
            # the run failed on its input (e.g. it diverged, [elastic] after pruning): its checkpoints hold a
            # configuration that must change, and --resume refuses a changed one, so they go, and with them the
            # folders made for them (a --work folder the user made stays). An interrupted or stopped run, or
            # one that crashed, keeps them: the same command with --resume continues.
            if trained[0] and not isinstance(e, NotResumable):  # a refused resume keeps what it refused
                for name in (CHECKPOINT_NAME, PRUNE_CHECKPOINT_NAME):
                    (work / name).unlink(missing_ok=True)  # cisl's own (check_work_dir at the start)
                if work_dir is None:  # the default folder is cisl's (made by an earlier run, say)
                    with contextlib.suppress(OSError):
                        work.rmdir()
                discard_output(work / CHECKPOINT_NAME, made)
            raise


def _run_train(config_path: Path | None, data_path: Path | None, out_dir: Path, overrides: dict | None,
               progress: bool, resume: bool, work_dir: Path | None, trained: list[bool]) -> dict:
    """run_train under the folder's lock."""
    started = time.perf_counter()
    cfg = resolve_config(config_path, data_path, overrides)
    out_dir = Path(out_dir)
    check_model_output(out_dir)  # before the training, not after it
    if work_dir is not None:
        check_creatable(Path(work_dir) / CHECKPOINT_NAME, "--work")
    work = Path(work_dir) if work_dir is not None else default_work_dir(out_dir)
    check_work_dir(work, resume)  # before the training, and before an old prune.pt is removed below
    made_work = not work.exists()  # cisl removes the folder at the end only if it made it (or it is the default)
    split, planned = training_split(cfg)
    cfg = dataclasses.replace(cfg, split=dataclasses.replace(cfg.split, devices=split.devices))  # the file decides
    m, s, t = cfg.model, cfg.split, cfg.train
    check_model_fits_memory(m)
    masks = make_masks(split, m.layers, s.random_keep, s.mask_seed)
    check_elastic_modes(cfg, split, masks, str(config_path) if config_path else "")  # before the data and the epochs
    data, data_desc = build_data(cfg)
    ckpt_path = work / CHECKPOINT_NAME
    meta = _resume_meta(cfg, data_desc)
    threads = effective_threads(t.threads)
    meta["threads"] = threads  # what the bytes depend on: [train] threads as CISL_THREADS left it
    if planned is not None:  # a resumed run trains for the same split, whatever the file says by then
        meta["split"] = planned
    state = None
    if not resume:  # a run that starts over: an older run's pruning state is not this run's
        (work / PRUNE_CHECKPOINT_NAME).unlink(missing_ok=True)
    if resume:
        state = load_checkpoint(ckpt_path)
        _check_resumable(ckpt_path, checkpoint_meta(state), meta)

    trained[0] = True  # from here on a checkpoint is this configuration's (run_train: what a failure leaves)
    with _torch_settings(threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(t.seed)
        model = SplitPatchTST(cfg=m, split=split, masks=masks, rescale=cfg.dropout.rescaled())
        rates = LossRates(*cfg.dropout.rates())
        # message dropout: losses drawn in every training step (at a rate per sample with q_max)
        model.set_message_dropout(LossRange(cfg.dropout.q_max) if cfg.dropout.q_max > 0 else rates,
                                  clean=cfg.dropout.clean)
        n_train = len(data.train)
        train_idx = np.arange(n_train)
        if 0 < t.max_train_windows < n_train:  # a random subset, fixed by the seed
            train_idx = np.sort(np.random.default_rng([t.seed, 1]).choice(n_train, t.max_train_windows,
                                                                          replace=False))
        result = fit(model, data.train, train_idx, data.val, t, m.revin, progress, checkpoint=ckpt_path, meta=meta,
                     resume=state)
        if result.stopped:
            return {"stopped": True, "epochs_done": result.epochs_done, "epochs": t.epochs,
                    "checkpoint": str(ckpt_path), "seconds": round(time.perf_counter() - started, 3)}
        model.load_state_dict(result.best_state)
        budget = _Budget(t.stop_after_epochs, result.epochs_done - (result.resumed_from or 0))
        prune_history = _prune(cfg, model, data, train_idx, progress, work / PRUNE_CHECKPOINT_NAME, meta, resume, budget)
        if prune_history is None:
            return {"stopped": True, "epochs_done": result.epochs_done, "epochs": t.epochs,
                    "prune_stages_done": budget.prune_stages,
                    "checkpoint": str(ckpt_path), "seconds": round(time.perf_counter() - started, 3)}
        modes, elastic = _elastic(cfg, model, data, train_idx, progress)
        masks = model.masks
        # the best epoch's validation MSE is this model's, computed the same way, unless pruning or
        # elastic training changed the model since or the epochs were validated under message loss
        same_val = not prune_history and modes is None and (model.loss_rates is None or split.devices == 1)
        metrics = {
            "train_mse": evaluate(model, data.train, m.revin, train_idx),
            "val_mse": result.best_val if same_val else evaluate(model, data.val, m.revin),
            "test_mse": evaluate(model, data.test, m.revin),
        }
        if rates.any:  # the same model under the training loss rates (seeded: reproducible)
            metrics["test_mse_lossy"] = evaluate_with_loss(model, data.test, m.revin, rates, seed=t.seed)
        elif cfg.dropout.q_max > 0:  # the worst rate of the range
            metrics["test_mse_lossy"] = evaluate_with_loss(model, data.test, m.revin,
                                                           LossRates.uniform(cfg.dropout.q_max), seed=t.seed)
        weights = drop_pruned_weights(state_to_numpy(model), split, masks, cfg.prune.method)
        params = sum(p.numel() for p in model.parameters())
        if modes is not None:  # every mode the first units of every group: a mode is a loop bound
            weights, masks, modes = permute(weights, masks, modes, split)
            elastic["counts"] = modes.counts

    config_record = cfg.to_dict()
    config_record["data"]["path"] = Path(cfg.data.path).name if cfg.data.path else ""  # no machine paths
    config_record["data"]["manifest"] = Path(cfg.data.manifest).name if cfg.data.manifest else ""
    config_record["split"]["file"] = Path(cfg.split.file).name if cfg.split.file else ""
    config_record["train"].pop("stop_after_epochs", None)  # run control: a resumed run records the same model
    pr = cfg.prune
    keep_ratio = pr.keep if pr.method != "none" else s.random_keep
    pruning = {"method": pr.method, "masks": "trained" if pr.method != "none" else ("random" if keep_ratio < 1 else "full"),
               "keep": keep_ratio, "realised_keep": realised_keep(split, masks), "step": pr.step, "epochs_per_step": pr.epochs_per_step,
               "finetune_epochs": pr.finetune_epochs,
               "stages": sum(1 for h in prune_history if h["stage"] != "finetune"),
               "epochs": sum(h.get("epochs", 0) for h in prune_history)}
    dropout = {"q_link": rates.link, "q_recv": rates.receiver, "q_send": rates.sender,
               "effective_link_loss": rates.effective_link_loss}
    if cfg.dropout.q_max > 0:
        dropout = {"q_max": cfg.dropout.q_max,
                   "effective_link_loss_max": LossRates.uniform(cfg.dropout.q_max).effective_link_loss}
    if cfg.dropout.q_max > 0 or rates.any:
        dropout["clean"] = cfg.dropout.clean  # the share of loss-free training windows
    comm = communication(split, masks, m.tokens, m.horizon)
    training_extra = {"split": meta["split"]} if "split" in meta else {}
    training = {**training_extra, "data": data_desc, "epochs": t.epochs, "best_epoch": result.best_epoch, "seed": t.seed,
                **metrics, "history": result.history, "config": config_record, "prune": pruning,
                "prune_history": prune_history, "dropout": dropout, "communication": comm}
    if elastic is not None:
        training["elastic"] = {k: v for k, v in elastic.items() if k != "counts"}
    calib, _, _ = model_inputs(data.train, data.train.evenly_spaced(t.calibration_samples), m.revin)
    test_x, test_y, test_scale = model_inputs(data.test, data.test.evenly_spaced(t.test_samples), m.revin)
    companions = {"calibration.npy": _npy_bytes(calib), "test_windows.npy": _npy_bytes(test_x),
                  "test_targets.npy": _npy_bytes(test_y), "test_scale.npy": _npy_bytes(test_scale)}
    # the model names its own windows: eval and compile refuse another training's beside it
    training["companions"] = {name: hashlib.sha256(b).hexdigest() for name, b in companions.items()}
    onnx_bytes = build_onnx(m, weights, split, masks, keep_ratio, training, rescale=cfg.dropout.rescaled(),
                            prune_own=model.prune_own, elastic=elastic).SerializeToString()
    summary = {**metrics, "epochs": t.epochs, "best_epoch": result.best_epoch,
               "seconds": round(time.perf_counter() - started, 3), "params": params,
               "windows": {"train": int(len(train_idx)), "val": len(data.val), "test": len(data.test)},
               "data": data_desc, "resumed_from_epoch": result.resumed_from, "prune": pruning,
               "communication": comm, "dropout": dropout, "onnx": True, "threads": threads,
               "split": {"protocol": data.protocol, "rows": [list(b) for b in data.borders]},
               **({"elastic": {k: elastic[k] for k in ("modes", "macs_share", "val_mse", "test_mse")}}
                  if elastic is not None else {})}
    warnings = model_warnings(m)
    if warnings:
        summary["warnings"] = warnings
    report = {"summary": summary, "config": config_record, "history": result.history, "prune_history": prune_history,
              "masks": {"keep_ratio": keep_ratio, "prune_own": model.prune_own, "columns": column_counts(masks),
                        "broadcast": masks}}
    write_atomically(out_dir, {
        "model.onnx": onnx_bytes,
        **companions,
        "train.json": (json.dumps(report, indent=2) + "\n").encode(),
    })
    ckpt_path.unlink(missing_ok=True)  # the outputs are complete: nothing left to resume (both files are cisl's)
    (work / PRUNE_CHECKPOINT_NAME).unlink(missing_ok=True)
    if made_work or work_dir is None:  # never a --work folder the user made, even an empty one
        try:
            work.rmdir()
        except OSError:
            pass  # not empty (the user's --work folder holds other files) or already gone
    return summary
