"""Message dropout (paper §4.4): train with the message losses the radio will cause.

Every training step draws, for every communication round (the four somegathers x, h, y, z of
each layer and the head reduction to the sink) and every sample, a loss pattern
``lost[b, receiver, sender]`` from the three loss modes of `codegen.lossmodel` (link, receiver,
sender; OR-ed; a device never loses its own columns). Here the patterns are drawn with torch for
speed; the distribution is the one `codegen.lossmodel.sample_lost` defines.

Round numbering is plan.json's ``sg``: layer l's points x, h, y, z are rounds 4l..4l+3 and the
head reduction is round 4T (`codegen.plan.structure`). A lost message removes the sender's
broadcast columns from the receiver's gather matrix for that round (LayerNorm statistics skip
them, consumers see 0), and a lost head partial adds nothing to the sink's forecast — exactly
what the numpy executors and the C do (docs/design/decisions.md §3).

The model samples by itself in training mode once `SplitPatchTST.set_message_dropout` gave it
rates; evaluation is deterministic unless patterns are passed explicitly
(``model(window, lost={sg: bool [B, D, D]})``), which `evaluate_with_loss` does with the same
numpy sampler (and so the same patterns for a seed) as ``cisl eval``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from codegen.lossmodel import LossRates
from codegen.lossmodel import sample_rounds as sample_rounds_numpy
from codegen.partition import POINTS
from codegen.train.revin import revin_torch


@dataclass(frozen=True)
class LossRange:
    """Message dropout over a range of loss rates: each sample draws q ~ U(0, q_max) once per step
    and loses messages at q in all three modes in every round. A model trained at one rate expects
    that rate (it is worse with fewer losses, docs/results/split_training.md); this one sees them all."""

    q_max: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.q_max < 1.0:
            raise ValueError(f"q_max={self.q_max} must be in [0, 1)")

    @property
    def any(self) -> bool:
        return self.q_max > 0


LostRounds = dict[int, Tensor]
"""{sg: bool [batch, receiver, sender]}: True where that round's message is lost."""


def round_of(layer: int, point: str) -> int:
    """The round (plan.json ``sg``) of the somegather at ``point`` of ``layer``."""
    return len(POINTS) * layer + POINTS.index(point)


def head_round(layers: int) -> int:
    """The round of the head reduction (the last one)."""
    return len(POINTS) * layers


def rounds_of(layers: int) -> int:
    """Number of communication rounds of one inference: 4 per layer plus the head reduction."""
    return len(POINTS) * layers + 1


def sample_lost(batch: int, devices: int, rates: LossRates | LossRange, generator: torch.Generator | None = None,
                rounds: int | None = None) -> Tensor:
    """Bool [batch, devices, devices] (or [rounds, batch, devices, devices]): True = lost.

    The distribution of `codegen.lossmodel.sample_lost` (link | receiver | sender, diagonal
    never lost), drawn with torch (the generator, or torch's global one). With a `LossRange`,
    sample b's rate q_b is drawn first and holds in every round.
    """
    lead = (batch,) if rounds is None else (rounds, batch)
    lost = torch.zeros(*lead, devices, devices, dtype=torch.bool)
    if isinstance(rates, LossRange):
        q = (torch.rand(batch, generator=generator) * rates.q_max).view(batch, 1, 1)
        modes = [(q, (devices, devices)), (q, (devices, 1)), (q, (1, devices))]
    else:  # a mode at rate 0 draws nothing (keeps the random stream of the other modes)
        modes = [(p, shape) for p, shape in ((rates.link, (devices, devices)), (rates.receiver, (devices, 1)),
                                            (rates.sender, (1, devices))) if p > 0]
    for p, shape in modes:
        lost |= torch.rand(*lead, *shape, generator=generator) < p
    eye = torch.eye(devices, dtype=torch.bool)
    return lost & ~eye


def sample_rounds(layers: int, batch: int, devices: int, rates: LossRates | LossRange,
                  generator: torch.Generator | None = None, clean: float = 0.0) -> LostRounds:
    """Independent patterns for every round of a model with ``layers`` layers, keyed by sg.

    ``clean``: the probability that a sample loses nothing in any round — the training mixes the
    loss-free link in, so that a model trained at q also holds at q = 0 ([dropout] clean)."""
    lost = sample_lost(batch, devices, rates, generator, rounds=rounds_of(layers))
    if clean > 0:
        lost &= ~(torch.rand(batch, generator=generator) < clean).view(1, batch, 1, 1)
    return {r: lost[r] for r in range(lost.shape[0])}


def lost_from_numpy(lost: dict[int, np.ndarray]) -> LostRounds:
    """The executor's ``lost`` dict ({sg: bool ndarray [B, D, D]}) as torch tensors."""
    return {int(sg): torch.from_numpy(np.asarray(v, dtype=bool)) for sg, v in lost.items()}


def keep_matrix(lost: Tensor) -> Tensor:
    """float [B, D, D]: 1 where the message arrives; the diagonal is always 1 (own columns)."""
    D = lost.shape[-1]
    return (~(lost.bool() & ~torch.eye(D, dtype=torch.bool, device=lost.device))).float()


def check_lost(lost: LostRounds, layers: int, batch: int, devices: int) -> None:
    """Raise ValueError if ``lost`` has an unknown round or a wrongly shaped pattern."""
    n = rounds_of(layers)
    for sg, v in lost.items():
        if not 0 <= int(sg) < n:
            raise ValueError(f"lost has round {sg}; the model has rounds 0..{n - 1} (4 per layer + head)")
        if tuple(v.shape) != (batch, devices, devices):
            raise ValueError(f"lost[{sg}] has shape {tuple(v.shape)}, expected {(batch, devices, devices)}")


def sample_rounds_range(rng: np.random.Generator, rounds: int, batch: int, devices: int,
                        q_max: float) -> dict[int, np.ndarray]:
    """numpy patterns of a `LossRange`: window b draws q_b ~ U(0, q_max), then every round loses
    messages at q_b in all three modes (link | receiver | sender; the diagonal never)."""
    q = rng.uniform(0.0, q_max, batch)[:, None, None]
    eye = np.eye(devices, dtype=bool)
    out = {}
    for r in range(rounds):
        lost = ((rng.random((batch, devices, devices)) < q) | (rng.random((batch, devices, 1)) < q)
                | (rng.random((batch, 1, devices)) < q))
        out[r] = lost & ~eye
    return out


@torch.no_grad()
def evaluate_with_loss(model, windows, revin: bool, rates: LossRates | LossRange, seed: int,
                       idx: np.ndarray | None = None, batch: int = 1024) -> float:
    """MSE (samples x horizon, the data's scaled units as `loop.evaluate`) under sampled message loss.

    Patterns come from ``codegen.lossmodel.sample_rounds`` with ``numpy.random.default_rng(seed)``,
    one call per batch of ``batch`` windows, as ``cisl eval`` draws them for the float plan (a
    `LossRange`: `sample_rounds_range`).
    """
    idx = np.arange(len(windows)) if idx is None else idx
    rng = np.random.default_rng(seed)
    was_training = model.training
    model.eval()
    D = model.split.devices
    total, count = 0.0, 0
    try:
        for lo in range(0, len(idx), batch):
            x, y = windows.take(idx[lo:lo + batch])
            xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            lost = None
            if isinstance(rates, LossRange) and rates.any and D > 1:
                lost = lost_from_numpy(sample_rounds_range(rng, rounds_of(model.cfg.layers), len(x), D, rates.q_max))
            elif rates.any and D > 1:
                lost = lost_from_numpy(sample_rounds_numpy(rng, rounds_of(model.cfg.layers), len(x), D, rates))
            if revin:
                xn, mean, std = revin_torch(xt)
                pred = model(xn, lost=lost) * std + mean
            else:
                pred = model(xt, lost=lost)
            err = pred - torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))
            total += float((err.double() ** 2).sum())
            count += err.numel()
    finally:
        model.train(was_training)
    return total / max(count, 1)
