"""End to end: a tiny `run_train` writes every output, reproducibly and atomically."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

pytest.importorskip("torch")

from codegen.errors import UserError  # noqa: E402
from codegen.onnx_model import load_model  # noqa: E402
from codegen.train.api import OUTPUT_FILES, run_train, write_atomically  # noqa: E402
from models import TINY_MODEL, exported_mse  # noqa: E402

TINY = TINY_MODEL + """[split]
devices = 3
random_keep = 0.5
mask_seed = 2
[data]
synthetic_length = 700
synthetic_channels = 2
[train]
epochs = 1
batch_size = 64
max_train_windows = 300
calibration_samples = 20
test_samples = 10
"""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict, dict]:
    root = tmp_path_factory.mktemp("runs")
    cfg = root / "tiny.toml"
    cfg.write_text(TINY)
    a = run_train(cfg, None, root / "a", progress=False)
    b = run_train(cfg, None, root / "b" / "nested", progress=False)
    return root / "a", root / "b" / "nested", a, b


@pytest.mark.train
def test_writes_every_output(two_runs: tuple[Path, Path, dict, dict]) -> None:
    out, _, summary, _ = two_runs
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, ".cisl-output"])
    for key in ("train_mse", "val_mse", "test_mse"):
        assert isinstance(summary[key], float) and np.isfinite(summary[key])
    assert summary["epochs"] == 1 and summary["params"] > 0 and summary["windows"]["train"] == 300

    model = load_model(out / "model.onnx")
    assert model.devices == 3 and model.keep_ratio == 0.5 and model.config.lookback == 32
    assert model.training["epochs"] == 1 and model.training["data"]["source"] == "synthetic"

    calib = np.load(out / "calibration.npy")
    tx, ty = np.load(out / "test_windows.npy"), np.load(out / "test_targets.npy")
    assert calib.shape == (20, 32) and tx.shape == (10, 32) and ty.shape == (10, 8)
    assert calib.dtype == tx.dtype == ty.dtype == np.float32
    np.testing.assert_allclose(tx.mean(axis=1), 0, atol=1e-5)  # RevIN-normalised, as the model sees them

    report = json.loads((out / "train.json").read_text())
    assert report["summary"]["test_mse"] == summary["test_mse"] and report["config"]["split"]["devices"] == 3

    forecast = ort.InferenceSession(str(out / "model.onnx")).run(None, {"window": tx})[0]
    assert forecast.shape == ty.shape and np.isfinite(forecast).all()


@pytest.mark.train
def test_the_reported_errors_are_the_exported_models(two_runs: tuple[Path, Path, dict, dict]) -> None:
    """train.json's MSEs are those of the model in model.onnx over the whole splits (the validation
    MSE is the best epoch's, not evaluated again)."""
    out, _, summary, _ = two_runs
    for split in ("val", "test"):
        assert summary[f"{split}_mse"] == pytest.approx(exported_mse(out, out.parent / "tiny.toml", split), rel=1e-5)
    history = json.loads((out / "train.json").read_text())["history"]
    assert summary["val_mse"] == min(h["val_mse"] for h in history)


@pytest.mark.train
def test_same_seed_gives_identical_files(two_runs: tuple[Path, Path, dict, dict]) -> None:
    a, b, sa, sb = two_runs
    for name in OUTPUT_FILES:
        if name != "train.json":  # train.json records the wall time
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert {k: v for k, v in sa.items() if k != "seconds"} == {k: v for k, v in sb.items() if k != "seconds"}


@pytest.mark.train
def test_bad_input_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError, match="no such file"):
        run_train(None, tmp_path / "missing.csv", out, progress=False)
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.train
def test_csv_source_needs_a_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="needs a path"):
        run_train(None, None, tmp_path / "out", overrides={"data.source": "csv"}, progress=False)


@pytest.mark.train
def test_an_output_that_cannot_be_made_is_refused_before_training(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):  # raised before any epoch
        run_train(None, None, tmp_path / "afile" / "out", overrides={"train.epochs": 50}, progress=False)
    with pytest.raises(UserError, match="--work"):
        run_train(None, None, tmp_path / "out", overrides={"train.epochs": 50}, progress=False,
                  work_dir=tmp_path / "afile" / "w")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.train
@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_thread_cap_is_refused_by_name(tmp_path: Path, monkeypatch, value: str) -> None:
    monkeypatch.setenv("CISL_THREADS", value)
    with pytest.raises(UserError, match="CISL_THREADS"):
        run_train(None, None, tmp_path / "out", overrides={"train.epochs": 1}, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.unit
def test_write_atomically_keeps_old_files_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_atomically(out, {"model.onnx": b"old"})

    with pytest.raises(TypeError):  # the second file cannot be written
        write_atomically(out, {"model.onnx": b"new", "train.json": None})  # type: ignore[dict-item]
    assert (out / "model.onnx").read_bytes() == b"old" and not (out / "train.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folder left behind


@pytest.mark.train
def test_training_into_a_log_file_says_each_epoch_in_a_line(tmp_path: Path) -> None:
    """Into a pipe or a file (a SLURM log) there is no terminal for a progress bar: `cisl train`
    prints a line per epoch instead of the bar's carriage-return updates."""
    from clirun import cisl, ok

    (tmp_path / "tiny.toml").write_text(TINY.replace("epochs = 1", "epochs = 2"))
    p = ok(cisl("train", "tiny.toml", "-o", "m", cwd=tmp_path))
    epochs = [ln for ln in p.stderr.splitlines() if ln.startswith("train: epoch ")]
    assert [ln.split(":")[1] for ln in epochs] == [" epoch 1/2", " epoch 2/2"], p.stderr
    assert all("val MSE" in ln for ln in epochs) and "\r" not in p.stderr  # -q prints none: test_plan_cli
