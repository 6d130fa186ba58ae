"""The TOML training configuration of `cisl train` (stdlib only, no torch).

Sections [model], [split], [data], [train], [prune], [dropout] and [elastic]; every key has a small default,
so an empty file (or no file) is a valid configuration that trains in seconds. Mistakes are one-line
UserErrors naming the file, the key and what was expected: reading, unknown keys and types go through
codegen/config_schema.py (as board.toml and testbed.toml do); the ranges and rules between keys are here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.errors import UserError
from codegen.modelspec import ModelConfig
from codegen.config_schema import BOOL, INT, NUMBER, STR, STR_LIST, check_value, read_toml, suggest


MAX_SEED = 2 ** 64 - 1  # [train] seed and --seed: what torch.manual_seed takes


@dataclass(frozen=True)
class SplitConfig:
    devices: int = 4
    # Seeded RANDOM masks (untrained, not the paper's pruning) broadcasting this network-wide share of an
    # allgather's columns (1 = allgather), for tests and ablations; the paper's method is [prune] method
    # = "somegather" with keep (setting both is an error).
    random_keep: float = 1.0
    mask_seed: int = 0
    # A split file from `cisl plan` (heads and MLP hidden units per node, uneven where the nodes differ;
    # relative to this config file). When set, the model is trained for exactly that split (devices
    # follows the file) and `cisl compile --split FILE` deploys it; a pruned model needs this, since its
    # somegather masks only hold on the split they were trained on. Empty: the even split of devices.
    file: str = ""


@dataclass(frozen=True)
class DataConfig:
    source: str = "synthetic"  # "synthetic" | "csv" | "tsf" | "icd"
    path: str = ""  # csv/tsf file or ICD folder/recording (relative paths are relative to the config file)
    columns: tuple[str, ...] = ()  # csv/icd columns to use; empty = all numeric columns
    manifest: str = ""  # icd: verify every recording against this filename,size_bytes,sha256 CSV
    synthetic_length: int = 8000
    synthetic_channels: int = 4
    synthetic_seed: int = 0


@dataclass(frozen=True)
class TrainOptions:
    epochs: int = 3
    batch_size: int = 256
    lr: float = 1e-3
    schedule: str = "cosine"  # "cosine" | "constant"
    seed: int = 0
    max_train_windows: int = 0  # 0 = all training windows
    calibration_samples: int = 256
    test_samples: int = 256
    threads: int = 2
    micro_batch: int = 0  # gradient accumulation: process each batch in pieces of this size; 0 = batch_size
    stop_after_epochs: int = 0  # stop (checkpoint kept, no outputs) after this many epochs in one run; 0 = never


PRUNE_METHODS = ("none", "somegather", "normal")
MAX_THREADS = 1024  # torch takes a C int; 10**18 threads was an OverflowError


@dataclass(frozen=True)
class PruneConfig:
    """Stepwise pruning after the [train] epochs (codegen.train.pruning)."""

    method: str = "none"  # "none" | "somegather" (cisl, the paper's §4.2) | "normal" (the Q3 baseline: whole columns)
    keep: float = 1.0  # network-wide share of an allgather's columns still broadcast at the end (exact to a column)
    step: float = 0.1  # fraction of a device's own columns pruned per stage (at least one)
    epochs_per_step: int = 1  # retraining epochs after every stage
    finetune_epochs: int = 0  # epochs after the last stage


@dataclass(frozen=True)
class DropoutConfig:
    """Message dropout (codegen.train.dropout): loss probabilities of the three modes while training."""

    q: float = 0.0  # shorthand: the same probability for link, receiver and sender losses
    q_link: float = 0.0  # one sender->receiver message lost
    q_recv: float = 0.0  # a receiver gets nothing in a round
    q_send: float = 0.0  # nobody gets a sender's message in a round
    # a range instead of one rate: every sample draws its own q uniformly from [0, q_max] (all
    # three modes), so one model serves any loss rate up to q_max (a fixed q tunes it to that q)
    q_max: float = 0.0
    # the share of training windows that lose nothing (the rest lose messages at q or q_max): a
    # model trained only at q = 10 % was 8-28 % worse on a loss-free link than one trained without
    # loss; with half its windows clean it holds at q = 0 and at q (docs/results/split_training.md);
    # the best epoch is chosen on validation under the same mixture. 0: every window lossy.
    clean: float = 0.5
    # scale what arrived from the other devices by expected / delivered columns, in training, the int8
    # reference and the C alike (the `rescale` ops and the head's scaled sum). Off by default: on
    # ETTh2 (D = 8, q = 10 %, half the windows clean) the rescaled model was better on a loss-free
    # link but worse at q = 10 % than the zero-filled one (test / validation MSE 0.3258 / 0.2224 vs
    # 0.3369 / 0.2286 at q = 0; 0.3206 / 0.2283 vs 0.3163 / 0.2168 at q = 10 %; decisions.md §9).
    # true forces it; "auto" rescales exactly the models trained with message dropout.
    rescale: bool | str = False

    def rescaled(self) -> bool:
        """Whether the model rescales what arrived (`rescale`, resolved)."""
        if isinstance(self.rescale, bool):
            return self.rescale
        return self.q_max > 0 or any(r > 0 for r in self.rates())

    def rates(self) -> tuple[float, float, float]:
        """(link, receiver, sender), as codegen.lossmodel.LossRates takes them."""
        return (self.q, self.q, self.q) if self.q > 0 else (self.q_link, self.q_recv, self.q_send)


ELASTIC_SHRINK = ("attention", "hidden")


@dataclass(frozen=True)
class ElasticConfig:
    """Elastic modes after training and pruning (codegen.train.elastic; docs/design/elastic.md)."""

    modes: int = 1  # nested models in one set of weights (1 = one model); mode 0 is the largest
    core_macs: float = 0.3  # the smallest mode (the core) needs at most this share of mode 0's MACs
    # what the smaller modes drop: "attention" (Q/K and V dimensions of every head), "hidden" (MLP
    # hidden units); every (layer, head) and (layer, device) group keeps the same share
    shrink: tuple[str, ...] = ELASTIC_SHRINK
    compress_epochs: int = 1  # fine-tuning after each pruning round (compress)
    grow_epochs: int = 1  # training of each mode's new weights, the smaller modes' frozen (grow)
    clip: float = 1.0  # gradient-norm clip per parameter, on the new weights only (0: none)
    # learning rate of the compress and grow phases as a share of [train] lr: they fine-tune a trained
    # model, and the full rate undoes it (ETTh2, D = 8: 0.1 gives 2-6 % lower validation MSE on every
    # mode than 1.0; docs/design/elastic.md)
    lr_scale: float = 0.1


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainOptions = field(default_factory=TrainOptions)
    prune: PruneConfig = field(default_factory=PruneConfig)
    dropout: DropoutConfig = field(default_factory=DropoutConfig)
    elastic: ElasticConfig = field(default_factory=ElasticConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        out["data"]["columns"] = list(self.data.columns)
        return out


DATA_SOURCES = ("synthetic", "csv", "tsf", "icd")

SECTIONS: dict[str, type] = {"model": ModelConfig, "split": SplitConfig, "data": DataConfig, "train": TrainOptions,
                             "prune": PruneConfig, "dropout": DropoutConfig, "elastic": ElasticConfig}

# the schema kind of a field, from the type of its default
_KINDS = {bool: BOOL, int: INT, float: NUMBER, str: STR, tuple: STR_LIST}
_BOOL_OR_AUTO = ("rescale",)  # fields that take true, false or "auto" whatever their default


def _suggest(name: str, choices: list[str], what: str = "keys") -> str:
    return suggest(name, choices, what, cutoff=0.5)


def _coerce(where: str, key: str, value: Any, default: Any) -> Any:
    """Check the TOML value against the type of the field's default; ints are accepted as floats."""
    typ = type(default)
    if key in _BOOL_OR_AUTO:
        if isinstance(value, bool) or value == "auto":
            return value
        raise UserError(f'{where} {key} must be true, false or "auto", got {value!r}')
    check_value(where, key, value, _KINDS[typ])
    if typ is float:
        return float(value)
    if typ is tuple:
        return tuple(value)
    return value


def _range_problems(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(key, expectation) pairs for values of the right type but out of range."""
    s, d, t, pr, dr, el = cfg.split, cfg.data, cfg.train, cfg.prune, cfg.dropout, cfg.elastic
    checks = [
        ("split.devices", s.devices >= 1, "must be >= 1"),
        ("split.random_keep", 0.0 < s.random_keep <= 1.0, "must be in (0, 1]"),
        ("data.source", d.source in DATA_SOURCES, 'must be "synthetic", "csv", "tsf" or "icd"'),
        ("data.columns", not (d.columns and d.source == "tsf"), "does not apply to tsf (every series is one channel)"),
        ("data.manifest", not d.manifest or d.source == "icd", 'applies only to source = "icd"'),
        ("data.synthetic_length", d.synthetic_length >= 1, "must be >= 1"),
        ("data.synthetic_channels", d.synthetic_channels >= 1, "must be >= 1"),
        ("train.epochs", t.epochs >= 1, "must be >= 1"),
        ("train.batch_size", t.batch_size >= 1, "must be >= 1"),
        ("train.lr", t.lr > 0, "must be > 0"),
        ("train.schedule", t.schedule in ("cosine", "constant"), 'must be "cosine" or "constant"'),
        ("train.max_train_windows", t.max_train_windows >= 0, "must be >= 0 (0 = all windows)"),
        ("train.calibration_samples", t.calibration_samples >= 1, "must be >= 1"),
        ("train.test_samples", t.test_samples >= 1, "must be >= 1"),
        ("train.threads", 1 <= t.threads <= MAX_THREADS, f"must be in [1, {MAX_THREADS}]"),
        ("train.micro_batch", 0 <= t.micro_batch <= t.batch_size, "must be in [1, batch_size] (0 = batch_size)"),
        ("train.stop_after_epochs", t.stop_after_epochs >= 0, "must be >= 0 (0 = never stop early)"),
        # torch.manual_seed takes 64 bits: a larger seed ended in its traceback after the data had loaded
        ("train.seed", 0 <= t.seed <= MAX_SEED, "must be in [0, 2**64 - 1]"),
        ("split.mask_seed", s.mask_seed >= 0, "must be >= 0"),
        ("data.synthetic_seed", d.synthetic_seed >= 0, "must be >= 0"),
        ("prune.method", pr.method in PRUNE_METHODS, 'must be "none", "somegather" or "normal"'),
        ("prune.keep", 0.0 < pr.keep <= 1.0, "must be in (0, 1]"),
        ("prune.step", 0.0 < pr.step <= 1.0, "must be in (0, 1]"),
        ("prune.epochs_per_step", pr.epochs_per_step >= 0, "must be >= 0"),
        ("prune.finetune_epochs", pr.finetune_epochs >= 0, "must be >= 0"),
        ("dropout.rescale", isinstance(dr.rescale, bool) or dr.rescale == "auto", 'must be true, false or "auto"'),
        ("elastic.modes", 1 <= el.modes <= 8, "must be in [1, 8] (1 = one model)"),
        ("elastic.core_macs", 0.0 < el.core_macs < 1.0, "must be in (0, 1)"),
        ("elastic.shrink", bool(el.shrink) and set(el.shrink) <= set(ELASTIC_SHRINK) and len(set(el.shrink)) == len(el.shrink),
         'must list "attention" and/or "hidden", each once'),
        ("elastic.compress_epochs", el.compress_epochs >= 0, "must be >= 0"),
        ("elastic.grow_epochs", el.grow_epochs >= 0, "must be >= 0"),
        ("elastic.clip", el.clip >= 0, "must be >= 0 (0 = no clipping)"),
        ("elastic.lr_scale", 0.0 < el.lr_scale <= 1.0, "must be in (0, 1]"),
    ] + [(f"dropout.{k}", 0.0 <= getattr(dr, k) < 1.0, "must be in [0, 1)")
         for k in ("q", "q_link", "q_recv", "q_send", "q_max", "clean")]
    return [(key, why) for key, ok, why in checks if not ok]


def _flatten_overrides(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Accept {"train": {"epochs": 1}} and {"train.epochs": 1} alike."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        elif isinstance(value, dict):
            out.setdefault(key, {}).update(value)
        else:
            raise UserError(f"overrides: {key!r} must be 'section.key' or a section table")
    return out


RENAMED = {("split", "keep_ratio"): "it drew RANDOM masks and is now [split] random_keep; for the paper's pruning "
                                    "use [prune] method = \"somegather\" and keep (cisl train --prune somegather --keep K)",
           ("prune", "target_keep"): "it is now [prune] keep (the network-wide share, exact to a column)"}
"""Keys of earlier versions: a config that still uses one gets a line saying what to write instead."""


def _apply(where: str, tables: dict[str, Any], base: TrainConfig) -> TrainConfig:
    sections = {}
    for section, table in tables.items():
        if section not in SECTIONS:
            raise UserError(f"{where}: unknown section [{section}]; {_suggest(section, list(SECTIONS), 'sections')}")
        if not isinstance(table, dict):
            raise UserError(f"{where}: '{section}' must be a table [{section}], got {table!r}")
        sections[section] = table
    updated = {}
    for section, cls in SECTIONS.items():
        current = getattr(base, section)
        fields = [f.name for f in dataclasses.fields(cls)]
        changes = {}
        for key, value in sections.get(section, {}).items():
            if (section, key) in RENAMED:
                raise UserError(f"{where}: [{section}] {key} was renamed: {RENAMED[(section, key)]}")
            if key not in fields:
                hint = " (tokens follows from lookback, patch_len, stride and padding)" if key == "tokens" else ""
                raise UserError(f"{where}: unknown key '{key}' in [{section}]{hint}; {_suggest(key, fields)}")
            changes[key] = _coerce(f"{where}: [{section}]", key, value, getattr(cls(), key))
        updated[section] = dataclasses.replace(current, **changes)
    return TrainConfig(**updated)


def _validate(where: str, cfg: TrainConfig) -> None:
    problems = cfg.model.problems()
    if problems:
        raise UserError(f"{where}: [model] {problems[0]}")
    for key, why in _range_problems(cfg):
        section, name = key.split(".")
        raise UserError(f"{where}: [{section}] {name} {why}, got {getattr(getattr(cfg, section), name)!r}")
    if cfg.split.devices > cfg.model.heads and not cfg.split.file:
        raise UserError(f"{where}: [split] devices = {cfg.split.devices} exceeds [model] heads = {cfg.model.heads}; "
                        "every device needs at least one head: use devices <= heads")
    if cfg.split.devices > cfg.model.mlp_hidden and not cfg.split.file:  # a model no `cisl compile` could split
        raise UserError(f"{where}: [split] devices = {cfg.split.devices} exceeds [model] mlp_hidden = "
                        f"{cfg.model.mlp_hidden}; every device needs at least one hidden unit: use "
                        f"devices <= mlp_hidden")
    pr, dr = cfg.prune, cfg.dropout
    if pr.method != "none" and cfg.split.random_keep < 1.0:
        raise UserError(f"{where}: [prune] method = \"{pr.method}\" trains the masks; [split] random_keep = "
                        f"{cfg.split.random_keep} draws random ones: remove random_keep (or set [prune] method = \"none\")")
    if pr.method == "none" and pr.keep < 1.0:
        raise UserError(f"{where}: [prune] keep = {pr.keep} needs a method: set [prune] method = \"somegather\" "
                        "(the paper's pruning; --prune somegather) or \"normal\"")
    if dr.q > 0 and (dr.q_link > 0 or dr.q_recv > 0 or dr.q_send > 0):
        raise UserError(f"{where}: [dropout] q = {dr.q} sets all three loss modes; set either q or q_link, q_recv "
                        "and q_send")
    if cfg.elastic.modes > 1 and pr.method == "normal":
        raise UserError(f"{where}: [elastic] modes need a model whose own columns all stay (somegather pruning or "
                        "none); [prune] method = \"normal\" removes them: use \"somegather\" or modes = 1")
    if cfg.elastic.modes > 1 and dr.rescaled():
        raise UserError(f"{where}: [elastic] modes do not support [dropout] rescale yet (a mode changes what each "
                        "node expects to receive): set rescale = false or modes = 1")
    if dr.q_max > 0 and any(r > 0 for r in dr.rates()):
        raise UserError(f"{where}: [dropout] q_max = {dr.q_max} draws the loss rate per sample; remove q, q_link, "
                        "q_recv and q_send (or q_max)")


def check_dropout_table(where: str, table: dict[str, Any]) -> None:
    """A [dropout] table read from its own file (`cisl train --dropout FILE`): its mistakes are named by
    that file, not by the config it is applied to."""
    _validate(where, _apply(where, {"dropout": table}, TrainConfig()))


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read and validate a training config; ``path=None`` means all defaults.

    A relative [data] path is resolved against the config file's folder.
    """
    cfg = TrainConfig()
    where = "defaults"
    if path is not None:
        path = Path(path)
        where = str(path)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise UserError(f"{path} {what}; pass a TOML training config file (an empty file means defaults)")
        tables = read_toml(path, "a training config")
        cfg = _apply(where, tables, cfg)
        for key in ("path", "manifest"):  # relative to the config file
            value = getattr(cfg.data, key)
            if value and not Path(value).is_absolute():
                cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **{key: str(path.parent / value)}))
        if cfg.split.file and not Path(cfg.split.file).is_absolute():
            cfg = dataclasses.replace(cfg, split=dataclasses.replace(cfg.split, file=str(path.parent / cfg.split.file)))
        _validate(where, cfg)
    if overrides:
        where = f"{where} (with overrides)" if path is not None else "overrides"
        cfg = _apply(where, _flatten_overrides(overrides), cfg)
        _validate(where, cfg)
    return cfg
