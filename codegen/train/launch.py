"""`cisl train` from its options: inputs checked and overrides built without torch, then run_train."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Callable

from ..errors import UserError
from .config import check_dropout_table
from .preflight import check_config


def check_train_inputs(config: Path | None, data: Path | None) -> None:
    """One-line errors for a missing config or data path (before torch is imported)."""
    if config is not None and not config.is_file():
        what = "is a folder, not a config file" if config.is_dir() else "config file not found"
        raise UserError(f"{config}: {what}; give a TOML file or omit it for the defaults")
    if data is not None and not data.exists():
        raise UserError(f"{data}: not found; give an ETT-format .csv, a Monash .tsf file or a folder of ICD "
                        "recordings")


def dropout_overrides(dropout_file: Path) -> dict:
    """The [dropout] section of ``dropout_file`` (e.g. from `cisl radio loss -o`) as config overrides."""
    try:
        with open(dropout_file, "rb") as f:
            section = tomllib.load(f).get("dropout")
    except FileNotFoundError:
        raise UserError(f"{dropout_file}: not found; write it with `cisl radio loss -o FILE`") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{dropout_file}: not valid TOML ({e})") from None
    if not isinstance(section, dict):
        raise UserError(f"{dropout_file}: no [dropout] section; write it with `cisl radio loss -o FILE`")
    check_dropout_table(str(dropout_file), section)
    overrides = {f"dropout.{key}": value for key, value in section.items()}
    if any(key in section for key in LOSS_KEYS):  # the file's rates replace the config's loss setting
        overrides.update({f"dropout.{key}": 0.0 for key in LOSS_KEYS if key not in section})
    return overrides


LOSS_KEYS = ("q", "q_link", "q_recv", "q_send", "q_max")
"""The [dropout] keys that set the loss: q, or q_link/q_recv/q_send, or q_max (clean and rescale say how)."""


def config_loss_keys(config: Path | None, keep: tuple[str, ...] = ()) -> list[str]:
    """The loss keys ``config``'s [dropout] sets to a non-zero value (not those in ``keep``), as `key = value`."""
    if config is None:
        return []
    with open(config, "rb") as f:
        own = tomllib.load(f).get("dropout", {})
    return [f"{key} = {own[key]}" for key in LOSS_KEYS if key not in keep and own.get(key)]


def replaced_loss_keys(config: Path | None, dropout_file: Path) -> str | None:
    """The note for a config whose loss keys the --dropout file's rates replace (None: nothing replaced)."""
    import tomllib

    with open(dropout_file, "rb") as f:
        section = tomllib.load(f)["dropout"]
    if config is None or not any(key in section for key in LOSS_KEYS):
        return None
    dropped = config_loss_keys(config, tuple(section))
    if not dropped:
        return None
    return (f"note: --dropout {dropout_file} sets {', '.join(k for k in LOSS_KEYS if k in section)}; it replaces the "
            f"loss {config} sets ([dropout] {', '.join(dropped)} dropped)")


def train_overrides(epochs: int | None = None, devices: int | None = None, prune: str | None = None,
                    keep: float | None = None, random_keep: float | None = None, seed: int | None = None,
                    dropout_file: Path | None = None, split_file: Path | None = None) -> dict:
    """The command line's overrides of the config, by dotted key."""
    overrides: dict = {}
    if epochs is not None:
        overrides["train.epochs"] = epochs
    if devices is not None:
        overrides["split.devices"] = devices
    if prune is not None:
        overrides["prune.method"] = prune
    if keep is not None:
        overrides["prune.keep"] = keep
    if random_keep is not None:
        overrides["split.random_keep"] = random_keep
    if seed is not None:
        overrides["train.seed"] = seed
    if dropout_file is not None:
        overrides.update(dropout_overrides(dropout_file))
    if split_file is not None:
        overrides["split.file"] = str(split_file)
    return overrides


def train_from_options(config: Path | None, data: Path | None, out_dir: Path, *, resume: bool = False,
                       work_dir: Path | None = None, epochs: int | None = None, devices: int | None = None,
                       prune: str | None = None, keep: float | None = None, random_keep: float | None = None,
                       seed: int | None = None, dropout_file: Path | None = None, split_file: Path | None = None,
                       progress: bool = True, note: Callable[[str], None] = lambda s: None) -> dict:
    """`cisl train`: check the inputs, tell ``note`` when a fresh run overwrites an earlier run's
    checkpoint, apply the overrides and train (torch is imported only here). Returns run_train's summary."""
    check_train_inputs(config, data)
    if split_file is not None:
        from ..planner.split import read_split

        planned = read_split(split_file)  # a bad file is one line before torch is imported
        if devices is not None and devices != len(planned.nodes):
            raise UserError(f"--devices {devices} and --split {split_file} ({len(planned.nodes)} nodes) disagree; "
                            "the split file decides the devices: drop --devices")
    overrides = train_overrides(epochs, devices, prune, keep, random_keep, seed, dropout_file, split_file)
    cfg = check_config(config, data, overrides or None)  # a mistake in the config is one line before torch is imported
    if cfg.prune.method != "none" and cfg.prune.keep >= 1:  # keep 1 sends every column: nothing to prune
        if prune is not None:  # refused as `cisl sweep` refuses a --prune that applies to no unit
            why = ("--keep 1" if keep is not None
                   else f"no --keep and {config or 'the default config'} has [prune] keep = 1")
            raise UserError(f"--prune {prune} prunes nothing at keep 1 (every column is still sent; {why}); add "
                            "--keep below 1 (e.g. --keep 0.5) or drop --prune")
        note(f"note: [prune] method = \"{cfg.prune.method}\" with keep = 1 prunes nothing (every column is still "
             "sent); set [prune] keep below 1 to prune")
    if dropout_file is not None:
        replaced = replaced_loss_keys(config, dropout_file)
        if replaced:
            note(replaced)
    from .api import CHECKPOINT_NAME, check_work_dir, default_work_dir, run_train  # torch is imported only here

    checkpoint = (work_dir or default_work_dir(out_dir)) / CHECKPOINT_NAME
    check_work_dir(checkpoint.parent, resume)  # a file of the user's there is refused, not announced as overwritten
    if not resume and checkpoint.is_file():
        note(f"note: starting from scratch; the checkpoint of an earlier run in {checkpoint.parent} will be "
             "overwritten (pass --resume to continue that run instead)")
    before = _stamp(checkpoint)
    try:
        return run_train(config, data, out_dir, overrides or None, progress=progress, resume=resume, work_dir=work_dir)
    except KeyboardInterrupt:
        # Ctrl-C, SIGTERM: the checkpoint of this run (or the one it resumed) stays; say where and how to go on
        now = _stamp(checkpoint)
        if now is not None and (resume or now != before):
            raise KeyboardInterrupt(f"interrupted; the checkpoint {checkpoint} is kept: continue with the same "
                                    "command and --resume") from None
        raise


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
