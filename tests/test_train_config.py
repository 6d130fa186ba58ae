"""The TOML training config: defaults, one-line errors with suggestions."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.errors import UserError
from codegen.modelspec import ModelConfig
from codegen.train.config import TrainConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(text)
    return path


def error(path: Path | None, overrides: dict | None = None) -> str:
    with pytest.raises(UserError) as err:
        load_config(path, overrides)
    msg = str(err.value)
    assert "\n" not in msg
    if path is not None:
        assert str(path) in msg
    return msg


@pytest.mark.unit
def test_empty_file_and_no_file_are_the_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert cfg == load_config(None) == TrainConfig()
    assert cfg.model == ModelConfig() and cfg.split.devices == 4 and cfg.data.source == "synthetic"
    assert cfg.train.epochs == 3 and cfg.train.schedule == "cosine" and cfg.model.revin


@pytest.mark.unit
def test_values_are_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
[model]
lookback = 336
d_model = 128
heads = 16
ln_eps = 1e-6
[split]
devices = 16
random_keep = 0.5
[data]
source = "csv"
path = "data/ETTh2.csv"
columns = ["OT"]
[train]
lr = 1      # ints are fine for floats
schedule = "constant"
"""))
    assert cfg.model.lookback == 336 and cfg.model.ln_eps == 1e-6 and cfg.split.random_keep == 0.5
    assert cfg.data.columns == ("OT",) and cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert Path(cfg.data.path) == tmp_path / "data" / "ETTh2.csv"  # relative to the config file
    assert cfg.to_dict()["data"]["columns"] == ["OT"]


@pytest.mark.unit
def test_typo_key_suggests_the_closest(tmp_path: Path) -> None:
    msg = error(write(tmp_path, "[model]\nlookbak = 96\n"))
    assert "lookbak" in msg and "did you mean 'lookback'?" in msg
    msg = error(write(tmp_path, "[trian]\nepochs = 1\n"))
    assert "[trian]" in msg and "did you mean 'train'?" in msg
    msg = error(write(tmp_path, "[train]\nbatchsize = 8\n"))
    assert "did you mean 'batch_size'?" in msg


@pytest.mark.unit
@pytest.mark.parametrize("text, words", [
    ('[train]\nepochs = "3"\n', ["epochs", "an integer"]),
    ("[model]\nrevin = 1\n", ["revin", "true or false"]),
    ("[model]\nlookback = 9.5\n", ["lookback", "an integer"]),
    ('[data]\ncolumns = "OT"\n', ["columns", "a list of strings"]),
    ("[split]\nrandom_keep = 0\n", ["random_keep", "(0, 1]"]),
    ('[train]\nschedule = "linear"\n', ["schedule", "cosine"]),
    ("[model]\nd_model = 30\n", ["d_model", "multiple of heads"]),
    ('[data]\nsource = "parquet"\n', ["source", "synthetic"]),
])
def test_wrong_type_or_range(tmp_path: Path, text: str, words: list[str]) -> None:
    msg = error(write(tmp_path, text))
    assert all(w in msg for w in words), msg


@pytest.mark.unit
def test_more_devices_than_heads(tmp_path: Path) -> None:
    msg = error(write(tmp_path, "[model]\nheads = 4\nd_model = 16\n[split]\ndevices = 5\n"))
    assert "devices" in msg and "heads" in msg


@pytest.mark.unit
def test_more_devices_than_hidden_units(tmp_path: Path) -> None:
    # trained to the end, then no `cisl compile` could split it (a device with no hidden unit)
    msg = error(write(tmp_path, "[model]\nmlp_hidden = 3\n[split]\ndevices = 4\n"))
    assert "devices = 4 exceeds [model] mlp_hidden = 3" in msg, msg


@pytest.mark.unit
def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    msg = error(write(tmp_path, "[model]\nlookback = 96\nstride = = 8\n"))
    assert "line 3" in msg


@pytest.mark.unit
def test_missing_config_file(tmp_path: Path) -> None:
    assert "does not exist" in error(tmp_path / "nope.toml")


@pytest.mark.unit
def test_overrides(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[train]\nepochs = 5\n"), {"train.epochs": 1, "split": {"devices": 2}})
    assert cfg.train.epochs == 1 and cfg.split.devices == 2
    assert "did you mean 'epochs'?" in error(None, {"train.epoch": 1})
