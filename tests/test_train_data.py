"""`cisl train --data PATH` picks the loader from the path: .csv, .tsf, or a folder of ICD recordings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from codegen.errors import UserError  # noqa: E402
from codegen.onnx_model import load_model  # noqa: E402
from codegen.train.api import run_train  # noqa: E402
from codegen.train.preflight import resolve_config  # noqa: E402

pytestmark = pytest.mark.train

TINY = """
[model]
lookback = 24
patch_len = 8
stride = 4
d_model = 8
heads = 2
layers = 1
mlp_hidden = 8
horizon = 6
[split]
devices = 2
[train]
epochs = 1
batch_size = 32
max_train_windows = 64
calibration_samples = 4
test_samples = 4
threads = 1
"""


def wave(n: int, phase: float = 0.0) -> np.ndarray:
    return np.sin(np.arange(n) / 4 + phase) * 3 + 10


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    (root / "tiny.toml").write_text(TINY)
    (root / "ett.csv").write_text("date,a,b\n" + "".join(f"{i},{u:.4f},{v:.4f}\n" for i, (u, v) in
                                                         enumerate(zip(wave(300), wave(300, 1)))))
    (root / "m.tsf").write_text("@relation r\n@attribute name string\n@missing true\n@data\n"
                                + "".join(f"S{k}:{','.join(f'{v:.3f}' for v in wave(200 + 40 * k, k))}\n"
                                          for k in range(3)).replace(",10.000,", ",?,"))
    icd = root / "icd"
    icd.mkdir()
    for r, name in enumerate(["01-04T184148_000_mode1.csv", "01-04T184424_001_mode1.csv",
                              "01-04T184835_002_mode1.csv", "02-01T000000_003_mode2.csv"]):
        (icd / name).write_text("timestamp,x,y\n" + "".join(
            f"{0.004 * (i + 1):.3f},{u:.4f},{v:.4f}\n" for i, (u, v) in enumerate(zip(wave(120, r), wave(120, -r)))))
    return root


@pytest.mark.parametrize("data, source", [("ett.csv", "csv"), ("m.tsf", "tsf"), ("icd", "icd"),
                                          ("icd/01-04T184424_001_mode1.csv", "csv")])
def test_data_path_picks_the_loader(files: Path, tmp_path: Path, data: str, source: str) -> None:
    s = run_train(files / "tiny.toml", files / data, tmp_path / "out", progress=False)
    assert s["data"]["source"] == source and np.isfinite(s["test_mse"])
    assert load_model(tmp_path / "out" / "model.onnx").training["data"]["source"] == source
    if source == "icd":
        assert s["data"]["recordings"] == 4 and s["data"]["recordings_by_split"]["test"] == \
            ["02-01T000000_003_mode2.csv"]


def test_icd_config_keeps_a_single_recording_as_icd(files: Path) -> None:
    cfg = files / "icd.toml"
    cfg.write_text(TINY + '[data]\nsource = "icd"\npath = "icd"\ncolumns = ["y"]\n')
    c = resolve_config(cfg, files / "icd" / "01-04T184148_000_mode1.csv", None)
    assert c.data.source == "icd" and c.data.columns == ("y",)  # same source: the config's columns stay
    c = resolve_config(cfg, files / "m.tsf", None)
    assert c.data.source == "tsf" and c.data.columns == ()  # another source: its keys go back to defaults


def test_unknown_data_format(files: Path, tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    with pytest.raises(UserError, match="cannot tell the data format"):
        run_train(files / "tiny.toml", tmp_path / "x.parquet", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_trains_on_an_icd_folder(files: Path, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "train", str(files / "tiny.toml"), "--data",
                        str(files / "icd"), "-o", "out", "-q"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "out" / "train.json").read_text())
    assert report["summary"]["data"]["source"] == "icd" and report["config"]["data"]["source"] == "icd"
    assert "trained " in p.stdout and " parameters on icd in " in p.stdout  # the summary names the data
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # the work folder is gone


def test_cli_says_when_it_trained_on_the_built_in_synthetic_data(files: Path, tmp_path: Path) -> None:
    """Without [data] and --data, cisl train uses synthetic series: easy to miss, so the summary says so."""
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "train", str(files / "tiny.toml"), "-o", "out", "-q"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "parameters on built-in synthetic data (4 channels x 8000 steps; [data] or --data for yours)" in p.stdout
    assert "splits: 70/10/20 by time (" in p.stdout  # the protocol follows from the row count: said, not silent


def test_a_column_skipped_as_text_is_named_and_a_mostly_placeholder_channel_refused(tmp_path: Path) -> None:
    """A channel logged as '-' for its first 70 % (numbers after) was dropped as a text column without a
    word, and the MSE was over the other channels (audit P F4)."""
    import clirun
    from models import tiny_train_config

    n = 400
    rows = [f"2020-01-{1 + i // 24:02d} {i % 24:02d}:00:00,{np.sin(i / 5):.4f},{np.cos(i / 7):.4f},site{i % 3},"
            + ("-" if i < 0.7 * n else f"{i / n:.4f}") for i in range(n)]
    (tmp_path / "d.csv").write_text("date,a,b,site,c\n" + "\n".join(rows) + "\n")
    (tmp_path / "c.toml").write_text(tiny_train_config(2))
    p = clirun.cisl("train", "c.toml", "--data", "d.csv", "-o", "m", "-q", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "column 'c' holds numbers but data row 1 has '-' (280 of its 400 cells are not numbers)" in p.stderr
    assert not (tmp_path / "m").exists()
    (tmp_path / "d.csv").write_text("date,a,b,site\n" + "\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    p = clirun.cisl("train", "c.toml", "--data", "d.csv", "-o", "m", "-q", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "warning: d.csv: column(s) 'site' skipped as text, not channels; the model forecasts 2 channel(s) (a, b)" \
        in p.stderr, p.stderr
    data = json.loads((tmp_path / "m" / "train.json").read_text())["summary"]["data"]
    assert data["columns"] == ["a", "b"] and "'site' skipped as text" in data["warnings"][0]


def test_ignored_newest_steps_and_loss_on_one_node_are_said(tmp_path: Path) -> None:
    """padding = "none" with (lookback - patch_len) % stride != 0 left the newest steps out of every patch
    without a word (audit P F3); message dropout on one device changed nothing, yet printed "test MSE under
    message loss" as if it had (F5)."""
    import clirun
    from models import tiny_train_config

    cfg = tiny_train_config(1, dropout="q = 0.1").replace("lookback = 32", 'lookback = 34\npadding = "none"')
    (tmp_path / "c.toml").write_text(cfg)
    p = clirun.cisl("train", "c.toml", "-o", "m", "-q", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert ('warning: c.toml: [model] padding = "none" with lookback 34, patch_len 8, stride 4: the newest 2 step(s) '
            'of every window reach no patch') in p.stderr and 'set padding = "end", or a lookback such as 32' in p.stderr
    assert "note: one node sends no messages, so message dropout changed nothing" in p.stderr, p.stderr
    summary = json.loads((tmp_path / "m" / "train.json").read_text())["summary"]
    assert "newest 2 step(s)" in summary["warnings"][0]
