"""The training loop: Adam, MSE on the scaled data, cosine schedule, best-validation weights, checkpoints."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from codegen.data.protocol import SegmentWindows, Windows
from codegen.errors import UserError
from codegen.fsutil import temp_sibling
from codegen.train.config import TrainOptions
from codegen.train.model import SplitPatchTST
from codegen.train.revin import revin_torch

EVAL_BATCH = 1024


def predict(model: SplitPatchTST, x: Tensor, revin: bool) -> Tensor:
    """Forecast on the scaled-data scale: RevIN around the model when it is on (PatchTST)."""
    if not revin:
        return model(x)
    xn, mean, std = revin_torch(x)
    return model(xn) * std + mean


@torch.no_grad()
def evaluate(model: SplitPatchTST, windows: Windows | SegmentWindows, revin: bool,
             idx: np.ndarray | None = None) -> float:
    """Mean squared error over samples x horizon (the LTSF metric)."""
    idx = np.arange(len(windows)) if idx is None else idx
    model.eval()
    total, count = 0.0, 0
    for lo in range(0, len(idx), EVAL_BATCH):
        x, y = windows.take(idx[lo:lo + EVAL_BATCH])
        err = predict(model, torch.from_numpy(x), revin) - torch.from_numpy(y)
        total += float((err.double() ** 2).sum())
        count += err.numel()
    return total / max(count, 1)


def validate(model: SplitPatchTST, windows: Windows | SegmentWindows, revin: bool, seed: int) -> float:
    """The validation MSE that picks the best epoch: under the model's training loss (message
    dropout at its rates, or a rate per window from its range; the same patterns every epoch, drawn
    from ``seed``; with a share ``clean`` of loss-free windows, that mixture: clean · loss-free MSE +
    (1 − clean) · lossy MSE), because the model will deploy on such links; without dropout, loss-free."""
    from codegen.train.dropout import evaluate_with_loss

    if model.loss_rates is None or model.split.devices == 1:
        return evaluate(model, windows, revin)
    lossy = evaluate_with_loss(model, windows, revin, model.loss_rates, seed=seed + 7919)
    clean = model.loss_clean
    return clean * evaluate(model, windows, revin) + (1.0 - clean) * lossy if clean > 0 else lossy


@dataclass
class FitResult:
    best_state: dict[str, Tensor]
    best_epoch: int  # 1-based
    history: list[dict[str, float]] = field(default_factory=list)
    best_val: float = math.inf
    epochs_done: int = 0  # epochs trained so far, counting those before a resume
    stopped: bool = False  # True if [train] stop_after_epochs ended the run before the last epoch
    resumed_from: int = 0  # the checkpoint's epoch when resumed, else 0


# --------------------------------------------------------------------------------------------
# Checkpoints: everything `fit` needs to continue exactly where it stopped
# --------------------------------------------------------------------------------------------

CHECKPOINT_FORMAT = "cisl-train-checkpoint"
CHECKPOINT_VERSION = 1


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save into a temp file next to ``path``, then rename: a crash never leaves half a checkpoint.
    ``path`` is new or cisl's own (the run checked it at its start, see is_cisl_checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)  # a random name: never a file of the user's that happens to be called so
    try:
        torch.save(state, tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def is_cisl_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a checkpoint cisl wrote (any version), so a run may overwrite or delete it; a
    file of the user's that only has the name is never touched. mmap: a large file is not read whole."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - whatever it is, it is not cisl's checkpoint
        return False
    return isinstance(state, dict) and state.get("format") == CHECKPOINT_FORMAT


class NotResumable(UserError):
    """--resume refused: the checkpoint is unreadable or another configuration's. It stays: the user
    decides (the same config resumes it; a damaged one is deleted by hand)."""


def load_checkpoint(path: Path, fix: str = "delete it and run without --resume") -> dict[str, Any]:
    """A checkpoint written by `fit`; anything else is NotResumable naming the file and ``fix``."""
    if not path.is_file():
        raise NotResumable(f"{path}: no checkpoint to resume from (a run saves one after each epoch); "
                           "run without --resume to start from scratch")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user-facing problem
        raise NotResumable(f"{path}: not a readable checkpoint ({type(e).__name__}); {fix}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT \
            or state.get("version") != CHECKPOINT_VERSION:
        raise NotResumable(f"{path}: not a cisl checkpoint of version {CHECKPOINT_VERSION}; {fix}")
    return state


def checkpoint_meta(state: dict[str, Any]) -> dict[str, Any]:
    """The ``meta`` the run stored with the checkpoint (what a resumed run must match)."""
    return json.loads(state["meta"])


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def train_step(model: SplitPatchTST, optimizer: torch.optim.Optimizer, x: np.ndarray, y: np.ndarray,
               micro_batch: int, revin: bool) -> float:
    """One optimiser step on the batch (x, y); returns the batch's mean loss.

    The batch is processed in pieces of ``micro_batch`` samples; each piece's mean loss is weighted
    by its share of the batch, so the summed gradients are the full-batch gradient up to rounding.
    """
    optimizer.zero_grad(set_to_none=True)
    n = len(x)
    total = 0.0
    for lo in range(0, n, micro_batch):
        xb, yb = x[lo:lo + micro_batch], y[lo:lo + micro_batch]
        loss = torch.mean((predict(model, torch.from_numpy(xb), revin) - torch.from_numpy(yb)) ** 2)
        if len(xb) != n:
            loss = loss * (len(xb) / n)
        value = float(loss.detach())
        if not math.isfinite(value):
            # --resume continues only with the lr the run started with: the advice is a fresh run
            lr = optimizer.param_groups[0]["lr"]
            raise UserError(f"training diverged: the loss became {value} at lr {lr:.3g}; lower [train] lr (or check "
                            f"the data and the model's settings) and train again without --resume (a run resumes "
                            f"only with the lr it started with)")
        loss.backward()
        total += value
    optimizer.step()
    return total


def fit(model: SplitPatchTST, train: Windows | SegmentWindows, train_idx: np.ndarray,
        val: Windows | SegmentWindows, opts: TrainOptions, revin: bool, progress: bool = True,
        checkpoint: Path | None = None, meta: dict[str, Any] | None = None,
        resume: dict[str, Any] | None = None) -> FitResult:
    """Train in place; returns the weights of the epoch with the lowest validation MSE.

    With ``checkpoint``, the whole training state (model, optimiser, LR schedule, epoch, best
    weights, history, the torch and numpy RNG states) and ``meta`` are saved there after every
    epoch. ``resume`` is such a checkpoint (`load_checkpoint`): training continues after its epoch
    and ends exactly as an uninterrupted run would. ``opts.stop_after_epochs`` > 0 ends this call
    after that many epochs (``stopped`` is then True unless the last epoch was reached).
    """
    rng = np.random.default_rng(opts.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    steps_per_epoch = math.ceil(len(train_idx) / opts.batch_size)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=opts.epochs * steps_per_epoch)
                 if opts.schedule == "cosine" else None)
    micro_batch = opts.micro_batch or opts.batch_size
    best = FitResult(best_state={}, best_epoch=0)
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(resume["scheduler"])
        rng.bit_generator.state = resume["numpy_rng"]
        torch.set_rng_state(resume["torch_rng"])
        best = FitResult(best_state=resume["best_state"], best_epoch=resume["best_epoch"],
                         history=list(resume["history"]), best_val=resume["best_val"],
                         epochs_done=resume["epoch"], resumed_from=resume["epoch"])
    first = best.epochs_done + 1
    # A bar on a terminal; into a file or a pipe (a SLURM log, `| tee`), a line per epoch instead of
    # the bar's carriage-return updates, ten a second for the whole run.
    bar_on = progress and sys.stderr.isatty()
    with tqdm(total=opts.epochs * steps_per_epoch, initial=best.epochs_done * steps_per_epoch, desc="train",
              unit="batch", disable=not bar_on, leave=False) as bar:
        for epoch in range(first, opts.epochs + 1):
            started = time.perf_counter()
            model.train()
            order = rng.permutation(train_idx)
            loss_sum = 0.0
            for lo in range(0, len(order), opts.batch_size):
                x, y = train.take(order[lo:lo + opts.batch_size])
                loss = train_step(model, optimizer, x, y, micro_batch, revin)
                if scheduler is not None:
                    scheduler.step()
                loss_sum += loss * len(x)
                bar.update(1)
            val_mse = validate(model, val, revin, opts.seed)
            best.history.append({"epoch": epoch, "train_loss": loss_sum / len(order), "val_mse": val_mse})
            bar.set_postfix(epoch=epoch, val_mse=f"{val_mse:.4f}")
            if val_mse < best.best_val or not best.best_state:  # the first epoch counts even if val is NaN
                best.best_val = val_mse
                best.best_epoch = epoch
                best.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if progress and not bar_on:
                # under message dropout the epoch's val MSE is validate()'s mix, not the loss-free summary's
                lossy = model.loss_rates is not None and model.split.devices > 1
                print(f"train: epoch {epoch}/{opts.epochs}: train loss {loss_sum / len(order):.4f}, val MSE "
                      f"{'under message dropout ' if lossy else ''}{val_mse:.4f}"
                      f"{' (best)' if best.best_epoch == epoch else ''}, {time.perf_counter() - started:.1f} s",
                      file=sys.stderr, flush=True)
            best.epochs_done = epoch
            if checkpoint is not None:
                save_checkpoint(checkpoint, {
                    "format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "meta": json.dumps(meta or {}),
                    "epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler is not None else None,
                    "best_state": best.best_state, "best_epoch": best.best_epoch, "best_val": best.best_val,
                    "history": best.history, "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                })
            if opts.stop_after_epochs and epoch - first + 1 >= opts.stop_after_epochs and epoch < opts.epochs:
                best.stopped = True
                break
    return best
