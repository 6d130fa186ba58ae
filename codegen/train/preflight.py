"""What `cisl train` checks before torch is imported: the config with its overrides, the data path,
and whether the model and the built-in series fit this machine's memory.

A mistake in any of them is one line within a fraction of a second, instead of after the seconds
torch takes to import (`codegen.train.launch` runs these first; `run_train` runs them too).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from codegen.data.dataset import source_for_path
from codegen.errors import UserError
from codegen.modelspec import ModelConfig
from codegen.train.config import DataConfig, TrainConfig, load_config

# weights, their gradients and Adam's two moments, float32 each; activations come on top
TRAIN_BYTES_PER_PARAM = 16


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not every platform tells
        return None


def check_synthetic_fits_memory(length: int, channels: int) -> None:
    """Before numpy allocates it: the built-in series (float64 sources and channels, a few copies) of
    [data] synthetic_length x synthetic_channels must fit this machine's memory."""
    physical = _physical_memory()
    need = length * (channels + 2) * 8 * 4
    if physical is not None and need > physical:
        raise UserError(f"[data] synthetic_length = {length}, synthetic_channels = {channels}: the synthetic series "
                        f"needs about {need / 2**30:.1f} GiB, this machine has {physical / 2**30:.1f} GiB; choose a "
                        f"shorter series or fewer channels")


def check_model_fits_memory(m: ModelConfig) -> None:
    """Before torch allocates it: a model whose weights and optimiser state alone exceed this machine's
    memory would be killed by the OS (or raise MemoryError) minutes into the run."""
    from codegen.modelspec import weight_shapes

    # counted on one layer and multiplied: listing the shapes of layers = 10**12 would never end
    shapes = weight_shapes(dataclasses.replace(m, layers=1))
    per_layer = sum(int(np.prod(s, dtype=object)) for k, s in shapes.items() if k.startswith("layers."))
    params = sum(int(np.prod(s, dtype=object)) for k, s in shapes.items() if not k.startswith("layers.")) \
        + m.layers * per_layer
    physical = _physical_memory()
    if physical is None:
        return
    need = params * TRAIN_BYTES_PER_PARAM
    if need > physical:
        raise UserError(f"[model] d_model = {m.d_model}, mlp_hidden = {m.mlp_hidden}, layers = {m.layers}: "
                        f"{params:,} parameters need at least {need / 2**30:.1f} GiB to train, this machine has "
                        f"{physical / 2**30:.1f} GiB; choose a smaller model (a node holds about 1 MB)")


def effective_threads(threads: int) -> int:
    """[train] threads, capped by CISL_THREADS: several trainings side by side (parallel tests, a sweep
    by hand) each at [train] threads would oversubscribe the cores and all run slower. The count
    changes the float sums, so the trained bytes depend on it: it is recorded and checked on resume."""
    cap = os.environ.get("CISL_THREADS", "").strip()
    if cap:
        if not cap.isdigit() or int(cap) < 1:
            raise UserError(f"CISL_THREADS={cap}: expected a whole number >= 1 (or unset it)")
        threads = min(threads, int(cap))
    return threads


def resolve_config(config_path: Path | None, data_path: Path | None, overrides: dict | None) -> TrainConfig:
    """The config file with the overrides applied and --data, which names the source by its path."""
    cfg = load_config(config_path, overrides)
    if data_path is not None:  # the loader follows the path: .csv, .tsf or a folder of ICD recordings
        source = source_for_path(data_path, cfg.data.source)
        base = cfg.data if source == cfg.data.source else DataConfig()  # columns/manifest belong to the config's source
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(base, source=source, path=str(data_path)))
    if cfg.data.source != "synthetic" and not cfg.data.path:
        raise UserError(f'{config_path or "config"}: [data] source = "{cfg.data.source}" needs a path; set [data] '
                        "path or pass --data")
    return cfg


def make_masks(split, layers: int, keep_ratio: float, mask_seed: int):
    """Full masks at keep ratio 1 (a dense model), seeded random masks otherwise."""
    from codegen.partition import full_masks, random_masks

    if keep_ratio >= 1.0:
        return full_masks(split, layers)
    return random_masks(split, layers, keep_ratio, mask_seed)


def check_elastic_modes(cfg: TrainConfig, split=None, masks=None, where: str = "") -> None:
    """[elastic] modes that cannot be made from this model (a core over core_macs, two equal modes) are one
    line before any training, not after all the dense epochs: the modes depend only on the model, the
    split and the masks. With [prune] the masks come out of the pruning, so that case is checked after it."""
    el = cfg.elastic
    if el.modes <= 1 or cfg.prune.method != "none":
        return
    from codegen.elastic import SHRINK, plan_modes
    from codegen.partition import Split

    m, s = cfg.model, cfg.split
    if split is None:
        if s.file:
            from codegen.planner.split import read_split

            split = read_split(s.file).split
        else:
            split = Split.even(s.devices, m.heads, m.d_model, m.mlp_hidden)
    if masks is None:
        masks = make_masks(split, m.layers, s.random_keep, s.mask_seed)
    try:
        plan_modes(m, split, masks, el.modes, el.core_macs, tuple(k for x in el.shrink for k in SHRINK[x]))
    except ValueError as e:
        raise UserError(f"{where + ': ' if where else ''}[elastic] {e}") from None


def model_warnings(m: ModelConfig) -> list[str]:
    """What makes a model's settings doubtful without being wrong (`cisl train` prints them; train.json's
    summary keeps them): padding = "none" with a stride that does not divide lookback - patch_len leaves
    the newest steps out of every patch (PatchTST's unfold does too), so they only shift RevIN's statistics."""
    ignored = (m.lookback - m.patch_len) % m.stride if m.padding == "none" else 0
    if not ignored:
        return []
    fits = m.lookback - ignored
    return [f'[model] padding = "none" with lookback {m.lookback}, patch_len {m.patch_len}, stride {m.stride}: '
            f"the newest {ignored} step(s) of every window reach no patch (the model never sees them); set "
            f'padding = "end", or a lookback such as {fits} or {fits + m.stride} ((lookback - patch_len) % stride = 0)']


def check_config(config_path: Path | None, data_path: Path | None, overrides: dict | None) -> TrainConfig:
    """:func:`resolve_config`, the memory checks of the model and of the built-in series, and the
    [elastic] modes."""
    cfg = resolve_config(config_path, data_path, overrides)
    check_model_fits_memory(cfg.model)
    check_elastic_modes(cfg, where=str(config_path) if config_path else "")
    if cfg.data.source == "synthetic":
        check_synthetic_fits_memory(cfg.data.synthetic_length, cfg.data.synthetic_channels)
    return cfg
