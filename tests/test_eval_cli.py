"""`cisl eval`: MSE under sampled message loss, one rate or a sweep, float or int8, at the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.unit


def cisl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("m"), config_for_tokens(8, 64), devices=4, keep_ratio=0.5, tests=48)


def run_json(model: Path, tmp_path: Path, name: str, *args: str) -> tuple[str, dict]:
    out = tmp_path / f"{name}.json"
    p = cisl("eval", str(model), "--json", str(out), *args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    return p.stdout, json.loads(out.read_text())


def test_one_rate_reports_every_seed_and_the_mean(model: Path, tmp_path: Path) -> None:
    out, rec = run_json(model, tmp_path, "one", "--loss", "0.1", "--seeds", "2")
    assert "seed 0: MSE" in out and "seed 1: MSE" in out and "effective per-link loss 27.1 %" in out
    assert rec["mode"] == "float" and rec["windows"] == 48 and len(rec["mse"]) == 2
    assert rec["mse"][0] != rec["mse"][1]  # the seeds draw different losses
    assert rec["mean"] == pytest.approx(sum(rec["mse"]) / 2)


@pytest.mark.parametrize("mode", [[], ["--int8"]])
def test_a_sweep_equals_the_single_runs(model: Path, tmp_path: Path, mode: list[str]) -> None:
    out, rec = run_json(model, tmp_path, "sweep", "--sweep", "0.3,0,0.1", "--seeds", "2", *mode)
    rows = rec["sweep"]
    assert [r["loss"]["link"] for r in rows] == [0.0, 0.1, 0.3]  # sorted
    assert len([ln for ln in out.splitlines() if ln.strip().endswith("%") and "vs" not in ln]) == 3
    assert "vs q = 0" in out
    assert rows[0]["std"] == 0.0 and rows[2]["mean"] != rows[0]["mean"]  # losing 66 % of the messages shows
    for r in rows[:2]:  # each row is the run `--loss q` gives on its own
        _, single = run_json(model, tmp_path, "single", "--loss", str(r["loss"]["link"]), "--seeds", "2", *mode)
        assert single["mse"] == r["mse"] and single["mode"] == r["mode"] == ("int8" if mode else "float")


def test_a_json_output_that_cannot_be_written_is_refused_before_the_work(model: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    p = cisl("eval", str(model), "--json", "afile/e.json", "--loss", "0.1", cwd=tmp_path)
    assert p.returncode == 2 and "choose another output with --json" in p.stderr, p.stderr
    assert "MSE" not in p.stdout  # it evaluated first, then could not write the result


@pytest.mark.parametrize("args,needle", [
    (["--sweep", "0,abc"], "expected comma-separated probabilities"),
    (["--sweep", "0,1.5"], "must be in [0, 1)"),
    (["--sweep", "0,0.1", "--loss", "0.1"], "--sweep sets the loss rates itself"),
    (["--split", "val"], "--split val needs --data"),  # scored the test windows silently
    (["--loss", "0", "--loss-link", "0.3"], "give either --loss or --loss-link"),  # scored loss-free
])
def test_bad_sweeps_are_one_line_errors(model: Path, tmp_path: Path, args: list[str], needle: str) -> None:
    p = cisl("eval", str(model), *args, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


@pytest.mark.train
def test_max_windows_over_the_data_scores_the_windows_train_saved(tmp_path: Path) -> None:
    """`cisl eval --data D --max-windows K`, K = the run's test_samples, scores the very windows `cisl
    train` saved: the same MSE as `cisl eval` over the saved ones (the two used to space them apart
    differently)."""
    pytest.importorskip("torch")
    from codegen.train.api import run_train
    from models import tiny_train_config

    t = np.arange(900)
    series = np.stack([np.sin(t / 7.0) + 0.01 * t, np.cos(t / 11.0) * (1 + t / 900)], axis=1)
    csv = tmp_path / "series.csv"
    csv.write_text("date,a,b\n" + "".join(f"2020-01-01 {i // 60:02d}:{i % 60:02d}:00,{a:.6f},{b:.6f}\n"
                                          for i, (a, b) in enumerate(series)))
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(tiny_train_config(train="epochs = 1\nbatch_size = 64\nmax_train_windows = 64\n"
                                           "calibration_samples = 8\ntest_samples = 12\nthreads = 1"))
    run_train(cfg, csv, tmp_path / "m", progress=False)
    saved = run_json(tmp_path / "m" / "model.onnx", tmp_path, "saved")[1]
    picked = run_json(tmp_path / "m" / "model.onnx", tmp_path, "picked", "--data", str(csv), "--max-windows", "12")[1]
    assert saved["windows"] == picked["windows"] == 12
    assert picked["mse"] == pytest.approx(saved["mse"], rel=1e-5)


def _model_trained_on(out: Path, training: dict, devices: int = 2) -> Path:
    """A random-weight model whose metadata says how it was trained (what `cisl eval` reads of it), with
    saved test windows."""
    from codegen.onnx_model import build_onnx, save_onnx
    from codegen.partition import Split, full_masks
    from models import random_weights, windows

    cfg = config_for_tokens(8, 16)
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    out.mkdir(parents=True)
    save_onnx(build_onnx(cfg, random_weights(cfg, 0), split, full_masks(split, cfg.layers), 1.0, training),
              out / "model.onnx")
    tx, ty = windows(cfg, 8, 1)
    np.save(out / "test_windows.npy", tx)
    np.save(out / "test_targets.npy", ty)
    return out / "model.onnx"


def test_eval_data_follows_trains_column_rule_and_repeats_the_data_warnings(tmp_path: Path) -> None:
    """--data passed the training's csv columns to any data: a .tsf was refused with advice to edit a
    config an eval user does not have (audit P F12); the warnings `cisl train` printed about the data
    (a channel constant in training) were not repeated (F15)."""
    warned = {"warnings": ["'x' is constant (1) over the training rows but ranges 0..2 later"]}
    model = _model_trained_on(tmp_path / "ot", {"config": {"data": {"source": "csv", "columns": ["OT"]}},
                                                "data": warned})
    n = 6 * config_for_tokens(8, 16).lookback
    (tmp_path / "d.tsf").write_text("@relation r\n@data\n" + ",".join(f"{np.sin(i / 5):.4f}" for i in range(n)) + "\n")
    p = cisl("eval", str(model), "--data", "d.tsf", "--seeds", "1", cwd=tmp_path)
    assert p.returncode == 0 and "MSE" in p.stdout, p.stderr
    rows = [f"{i},{np.cos(i / 3) if i > 0.8 * n else 1.0:.4f},{np.sin(i / 5):.4f}" for i in range(n)]
    (tmp_path / "d.csv").write_text("date,c,OT\n" + "\n".join(rows) + "\n")
    p = cisl("eval", str(model), "--data", "d.csv", "--seeds", "1", cwd=tmp_path)  # same kind: OT only
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    p = cisl("eval", str(model), "--seeds", "1", cwd=tmp_path)  # the saved windows: the training's warnings
    assert p.returncode == 0 and "warning: " in p.stderr and "training data: 'x' is constant" in p.stderr, p.stderr
    every = _model_trained_on(tmp_path / "all", {"config": {"data": {"source": "csv", "columns": []}}})
    p = cisl("eval", str(every), "--data", "d.csv", "--seeds", "1", cwd=tmp_path)
    assert p.returncode == 0 and "warning: d.csv: 'c' is constant" in p.stderr, p.stderr


def test_loss_on_a_one_node_model_is_noted(tmp_path: Path) -> None:
    """--loss on a model split for one node printed a lossy-looking MSE, the same for every seed (F5)."""
    model = make_model_dir(tmp_path / "m1", config_for_tokens(8, 16), devices=1, keep_ratio=1.0, tests=8)
    p = cisl("eval", str(model), "--loss", "0.1", "--seeds", "2", cwd=tmp_path)
    assert p.returncode == 0 and "note: one node sends no messages" in p.stderr, p.stderr


def test_a_model_beside_another_trainings_files_is_refused(tmp_path: Path) -> None:
    """A model copied into another training's folder was scored on that training's test windows (and
    compiled with its calibration set) without a word. The model records the hashes of the files its
    training wrote beside it; eval and compile refuse others in one line, and an explicit
    --calibration or --data is the user's choice."""
    pytest.importorskip("torch")
    from codegen.train.api import run_train
    from models import tiny_train_config

    for run, length in ((1, 400), (2, 500)):  # other data: other windows (the same data gives the same files)
        cfg = tmp_path / f"s{run}.toml"
        cfg.write_text(tiny_train_config(data=f"synthetic_length = {length}\nsynthetic_channels = 2"))
        run_train(cfg, None, tmp_path / f"m{run}", progress=False)
    stray = tmp_path / "m2" / "from_m1.onnx"
    stray.write_bytes((tmp_path / "m1" / "model.onnx").read_bytes())
    assert cisl("eval", "m1/model.onnx", cwd=tmp_path).returncode == 0
    for args, name in ((["eval", str(stray)], "test_windows.npy"),
                       (["compile", str(stray), "-o", "b"], "calibration.npy"),
                       (["compile", str(stray), "-o", "b", "--calibration", "m1/calibration.npy"], "test_windows.npy")):
        p = cisl(*args, cwd=tmp_path)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert f"m2/{name}: not the file `cisl train` wrote with this model" in p.stderr, (args, p.stderr)
        assert not (tmp_path / "b").exists()
