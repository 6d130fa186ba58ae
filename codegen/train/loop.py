"""The training loop: Adam, MSE on the scaled data, cosine schedule, best-validation weights."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from codegen.data.protocol import Windows
from codegen.data.revin import EPS
from codegen.train.config import TrainOptions
from codegen.train.model import SplitPatchTST

EVAL_BATCH = 1024


def revin_torch(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The torch twin of codegen.data.revin.revin_normalize (statistics carry no gradient)."""
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + EPS)
    return (x - mean) / std, mean, std


def predict(model: SplitPatchTST, x: Tensor, revin: bool) -> Tensor:
    """Forecast on the scaled-data scale: RevIN around the model when it is on (PatchTST)."""
    if not revin:
        return model(x)
    xn, mean, std = revin_torch(x)
    return model(xn) * std + mean


@torch.no_grad()
def evaluate(model: SplitPatchTST, windows: Windows, revin: bool, idx: np.ndarray | None = None) -> float:
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


@dataclass
class FitResult:
    best_state: dict[str, Tensor]
    best_epoch: int  # 1-based
    history: list[dict[str, float]] = field(default_factory=list)


def fit(model: SplitPatchTST, train: Windows, train_idx: np.ndarray, val: Windows, opts: TrainOptions,
        revin: bool, progress: bool = True) -> FitResult:
    """Train in place; returns the weights of the epoch with the lowest validation MSE."""
    rng = np.random.default_rng(opts.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    steps_per_epoch = math.ceil(len(train_idx) / opts.batch_size)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=opts.epochs * steps_per_epoch)
                 if opts.schedule == "cosine" else None)
    best = FitResult(best_state={}, best_epoch=0)
    best_val = math.inf
    with tqdm(total=opts.epochs * steps_per_epoch, desc="train", unit="batch", disable=not progress,
              leave=False) as bar:
        for epoch in range(1, opts.epochs + 1):
            model.train()
            order = rng.permutation(train_idx)
            loss_sum = 0.0
            for lo in range(0, len(order), opts.batch_size):
                x, y = train.take(order[lo:lo + opts.batch_size])
                loss = torch.mean((predict(model, torch.from_numpy(x), revin) - torch.from_numpy(y)) ** 2)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                loss_sum += float(loss.detach()) * len(x)
                bar.update(1)
            val_mse = evaluate(model, val, revin)
            best.history.append({"epoch": epoch, "train_loss": loss_sum / len(order), "val_mse": val_mse})
            bar.set_postfix(epoch=epoch, val_mse=f"{val_mse:.4f}")
            if val_mse < best_val or not best.best_state:  # the first epoch counts even if val is NaN
                best_val = val_mse
                best.best_epoch = epoch
                best.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return best
