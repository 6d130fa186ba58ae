"""End to end: `run_train` with [prune] and [dropout], then `cisl compile` of the pruned model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

from codegen.compile import CompileOptions, compile_model  # noqa: E402
from codegen.onnx_model import load_model  # noqa: E402
from codegen.partition import POINTS, keep_counts  # noqa: E402
from codegen.train.api import run_train  # noqa: E402
from codegen.train.model import SplitPatchTST  # noqa: E402
from codegen.train.pruning import CONSUMERS, consumer_row_owner  # noqa: E402
from models import TINY_MODEL, exported_mse  # noqa: E402

TINY = TINY_MODEL + """[split]
devices = 3
[data]
synthetic_length = 600
synthetic_channels = 2
[train]
epochs = 1
batch_size = 64
max_train_windows = 192
calibration_samples = 16
test_samples = 8
threads = 1
[prune]
method = "{method}"
keep = 0.5
step = 0.25
epochs_per_step = 1
finetune_epochs = 1
[dropout]
q = 0.1
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("prune")
    out = {}
    for method in ("somegather", "normal"):
        cfg = root / f"{method}.toml"
        text = TINY.replace("{method}", method)
        if method == "normal":  # the other kind of message dropout: a loss rate per sample up to q_max
            text = text.replace("q = 0.1", "q_max = 0.2")
        cfg.write_text(text)
        out[method] = (root / method, run_train(cfg, None, root / method, progress=False))
    return out


@pytest.mark.train
def test_somegather_run_exports_pruned_masks_and_compiles(runs, tmp_path: Path) -> None:
    out, summary = runs["somegather"]
    model = load_model(out / "model.onnx")
    split = model.split
    assert model.keep_ratio == 0.5 and model.devices == 3
    exact = keep_counts(split, model.config.layers, 0.5)
    for l in range(model.config.layers):
        for k in range(3):
            for p in POINTS:
                lo, hi = split.own_cols(k, p)
                assert len(model.masks[l][k][p]) == exact[l][k][p] < hi - lo
    # pruned cross-device weights are zero in the dense initializers, and the graph equals torch
    for p in POINTS:
        bc = np.zeros(split.width(p), bool)
        for entry in model.masks[0]:
            bc[entry[p]] = True
        dropped = (consumer_row_owner(split, p)[:, None] != split.owner_of(p)[None, :]) & ~bc[None, :]
        for name in CONSUMERS[p]:
            assert np.all(model.weights[f"layers.0.{name}.weight"][dropped] == 0)
    x = np.load(out / "test_windows.npy")
    ref = ort.InferenceSession(str(out / "model.onnx")).run(["forecast"], {"window": x})[0]
    net = SplitPatchTST(model.config, split, model.masks).eval()
    net.load_numpy(model.weights)
    with torch.no_grad():
        assert np.max(np.abs(net(torch.from_numpy(x)).numpy() - ref)) < 1e-4

    # the summary: method, stages, communication, dropout
    assert summary["prune"]["method"] == "somegather" and summary["prune"]["stages"] == 2
    assert summary["prune"]["epochs"] == 3 and np.isfinite(summary["test_mse_lossy"])
    assert summary["dropout"] == {"q_link": 0.1, "q_recv": 0.1, "q_send": 0.1,
                                  "effective_link_loss": pytest.approx(1 - 0.9 ** 3), "clean": 0.5}
    comm = summary["communication"]
    assert comm["broadcast_columns"] == sum(len(e[p]) for e in model.masks[0] for p in POINTS)
    assert comm["allgather_columns"] == 3 * 16 + 12 and comm["ratio_to_allgather"] < 0.6
    report = json.loads((out / "train.json").read_text())
    stages = report["prune_history"]
    assert [h["stage"] for h in stages] == [1, 2, "finetune"] and all("val_mse" in h for h in stages)
    # the pruned model's errors, loss-free (not those of the dense model or of the lossy validation)
    for method, (out_m, summary_m) in runs.items():
        for split in ("val", "test"):
            assert summary_m[f"{split}_mse"] == pytest.approx(exported_mse(out_m, out_m.parent / f"{method}.toml", split),
                                                              rel=1e-4), (method, split)
    assert report["masks"]["broadcast"] == model.masks and report["masks"]["columns"][0][0]["x"] == 4
    assert model.training["prune"]["method"] == "somegather" and model.training["dropout"]["q_link"] == 0.1

    summary_c = compile_model(out / "model.onnx", tmp_path / "build", CompileOptions())
    assert (tmp_path / "build" / "plan.json").is_file() and summary_c["accuracy"]["relative_rms_float_vs_int8"] < 0.2


@pytest.mark.train
@pytest.mark.sim
def test_pruned_dropout_model_runs_bit_exact_on_the_testbed_and_sends_what_it_keeps(runs, tmp_path: Path) -> None:
    from codegen.build import build
    from codegen.vtestbed.run import run_sim

    out, _ = runs["somegather"]
    compile_model(out / "model.onnx", tmp_path / "build", CompileOptions())
    build(tmp_path / "build")
    r = run_sim(tmp_path / "build", np.load(out / "test_windows.npy")[:3])
    assert r.ok, r.first_difference or r.problems
    model = load_model(out / "model.onnx")
    tokens = model.config.tokens
    for k in range(3):
        sent = sum(int(rec.fields["tx"]) for rec in r.records
                   if rec.node == k and rec.event == "sg" and rec.fields["point"] != "head") // r.inferences
        kept = sum(len(layer[k][p]) for layer in model.masks for p in POINTS)
        own = model.config.layers * sum(hi - lo for p in POINTS for lo, hi in [model.split.own_cols(k, p)])
        assert sent == tokens * kept  # every kept column, every token, once per round
        exact = keep_counts(model.split, model.config.layers, 0.5)
        assert kept == sum(layer[k][p] for layer in exact for p in POINTS)
        assert kept < own


@pytest.mark.train
def test_normal_run_matches_communication_and_is_exported(runs) -> None:
    out, summary = runs["normal"]
    _, sg = runs["somegather"]
    assert summary["onnx"] is True
    assert summary["communication"]["broadcast_columns"] == sg["communication"]["broadcast_columns"]
    report = json.loads((out / "train.json").read_text())
    masks = report["masks"]
    assert masks["prune_own"] is True and masks["keep_ratio"] == 0.5
    assert all(e["x"] == e["y"] for e in masks["broadcast"][0])  # one residual column set
    assert np.isfinite(summary["test_mse"]) and summary["prune"]["method"] == "normal"
    assert summary["dropout"]["q_max"] == 0.2 and np.isfinite(summary["test_mse_lossy"])
    model = load_model(out / "model.onnx")
    assert model.prune_own and model.masks == masks["broadcast"]
    # the ONNX graph computes what torch computes: LayerNorms leave each device's dead own columns out
    net = SplitPatchTST(model.config, model.split, model.masks, prune_own=True).eval()
    net.load_numpy(model.weights)
    x = np.load(out / "test_windows.npy")
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"window": x})[0]
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    assert np.max(np.abs(got - want)) < 1e-4


@pytest.mark.train
@pytest.mark.sim
def test_normal_pruned_model_compiles_and_runs_bit_exact_on_the_testbed(runs, tmp_path: Path) -> None:
    """Fig. 7's baseline deployed (issue 16): compile, int8 and the virtual testbed, bit-exact, the
    nodes sending only the columns that are still alive."""
    from codegen.build import build
    from codegen.lossmodel import LossRates
    from codegen.plan.io import load_plan
    from codegen.vtestbed.run import run_sim

    out, summary = runs["normal"]
    s = compile_model(out / "model.onnx", tmp_path / "build", CompileOptions())
    assert s["accuracy"]["relative_rms_float_vs_int8"] < 0.2
    plan = load_plan(tmp_path / "build")
    assert plan.meta["prune_own"] is True
    build(tmp_path / "build")
    x = np.load(out / "test_windows.npy")[:3]
    for loss in (None, LossRates.uniform(0.3)):
        r = run_sim(tmp_path / "build", x, loss=loss, loss_seed=2)
        assert r.ok, r.first_difference or r.problems
    sent = sum(int(rec.fields["tx"]) for rec in run_sim(tmp_path / "build", x).records
               if rec.event == "sg" and rec.fields["point"] != "head")
    assert sent == summary["communication"]["broadcast_columns"] * plan.cfg.tokens * len(x)


@pytest.mark.train
def test_resume_mid_training_gives_the_same_pruned_model(tmp_path: Path) -> None:
    """Dropout draws from torch's generator, which the checkpoint restores; pruning restarts from the
    dense checkpoint. An interrupted and resumed run therefore writes the same model."""
    cfg = tmp_path / "t.toml"
    cfg.write_text(TINY.replace("{method}", "somegather").replace("epochs = 1\n", "epochs = 2\n", 1))
    run_train(cfg, None, tmp_path / "a", progress=False)
    stopped = run_train(cfg, None, tmp_path / "b", overrides={"train.stop_after_epochs": 1}, progress=False)
    assert stopped["stopped"] and not (tmp_path / "b").exists()
    run_train(cfg, None, tmp_path / "b", progress=False, resume=True)
    for name in ("model.onnx", "test_windows.npy", "calibration.npy"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.train
@pytest.mark.parametrize("method,dropout", [("somegather", "q_max = 0.2"), ("normal", "q_link = 0.1")])
def test_cli_says_what_pruning_kept_and_the_lossy_mse(tmp_path: Path, method: str, dropout: str) -> None:
    import subprocess
    import sys

    (tmp_path / "c.toml").write_text(TINY.replace("{method}", method).replace("q = 0.1", dropout))
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "train", "c.toml", "-o", "m", "-q"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "m" / "train.json").read_text())["summary"]
    lines = p.stdout.splitlines()
    assert lines[0].endswith("model.onnx")
    comm = summary["communication"]
    pr = summary["prune"]
    assert pr["keep"] == 0.5 and pr["realised_keep"] == comm["ratio_to_allgather"] == 0.5
    assert (f"{method} pruning: keep 0.5 requested, realised 0.5000 -- the nodes send {comm['broadcast_columns']} of "
            f"an allgather's {comm['allgather_columns']} columns") in lines[1]
    rate = "up to q = 0.2" if method == "somegather" else "message loss 0.1/0/0 (link/receiver/sender)"
    assert rate in lines[2] and lines[2].endswith(f"{summary['test_mse_lossy']:.4f}")


@pytest.mark.train
@pytest.mark.parametrize("method", ["somegather", "normal"])
def test_a_run_stopped_while_pruning_resumes_to_the_same_bytes(runs, tmp_path: Path, method: str) -> None:
    """The pruning saves its state after every stage: a run stopped there ([train] stop_after_epochs,
    or killed) continues with --resume after its last stage, not from the dense model, and writes the
    bytes of an uninterrupted run."""
    from codegen.train.api import OUTPUT_FILES, PRUNE_CHECKPOINT_NAME, default_work_dir

    text = TINY.replace("{method}", method)
    if method == "normal":
        text = text.replace("q = 0.1", "q_max = 0.2")
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    out = tmp_path / "model"
    s = run_train(cfg, None, out, {"train.stop_after_epochs": 2}, progress=False)  # the dense epoch + stage 1
    assert s["stopped"] and s["prune_stages_done"] == 1 and not out.exists()
    assert (default_work_dir(out) / PRUNE_CHECKPOINT_NAME).is_file()
    s = run_train(cfg, None, out, {"train.stop_after_epochs": 1}, progress=False, resume=True)  # stage 2 only
    assert s["stopped"] and s["prune_stages_done"] == 2
    s = run_train(cfg, None, out, progress=False, resume=True)  # the fine-tuning, then the outputs
    assert not s.get("stopped") and s["prune"]["stages"] == 2
    for name in OUTPUT_FILES:
        if name != "train.json":  # it records the wall time
            assert (out / name).read_bytes() == (runs[method][0] / name).read_bytes(), name
    assert not default_work_dir(out).exists()


@pytest.mark.train
def test_a_damaged_pruning_checkpoint_is_refused_and_the_dense_one_kept(runs, tmp_path: Path) -> None:
    """A prune.pt cisl cannot resume from (cut short, an older cisl's) is refused in one line with exit 2, and
    both checkpoints stay: the dense epochs may be hours of work. Following the advice (delete
    prune.pt, --resume again) resumes after the dense epochs and writes the uninterrupted run's bytes."""
    import subprocess
    import sys

    from codegen.train.api import CHECKPOINT_NAME, OUTPUT_FILES, PRUNE_CHECKPOINT_NAME

    text = TINY.replace("{method}", "somegather")
    (tmp_path / "c.toml").write_text(text)
    # the dense epoch and the first pruning stage
    (tmp_path / "stop.toml").write_text(text.replace("threads = 1\n", "threads = 1\nstop_after_epochs = 2\n"))
    work = tmp_path / "work"

    def train(config: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "codegen.cli", "train", config, "-o", "model", "-q",
                               "--work", str(work), *args], cwd=tmp_path, capture_output=True, text=True)

    p = train("stop.toml")
    assert p.returncode == 2 and (work / PRUNE_CHECKPOINT_NAME).is_file(), p.stderr
    dense = (work / CHECKPOINT_NAME).read_bytes()
    saved = (work / PRUNE_CHECKPOINT_NAME).read_bytes()
    (work / PRUNE_CHECKPOINT_NAME).write_bytes(saved[:100])  # cut short: no checkpoint cisl can read
    p = train("c.toml", "--resume")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "if it is a damaged checkpoint of this run, delete it and run with --resume again" in p.stderr, p.stderr
    assert (work / CHECKPOINT_NAME).read_bytes() == dense and (work / PRUNE_CHECKPOINT_NAME).is_file()
    (work / PRUNE_CHECKPOINT_NAME).write_bytes(saved)
    old = torch.load(work / PRUNE_CHECKPOINT_NAME, weights_only=True)
    torch.save({**old, "version": old["version"] - 1}, work / PRUNE_CHECKPOINT_NAME)
    p = train("c.toml", "--resume")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"{PRUNE_CHECKPOINT_NAME}: not a cisl checkpoint of version" in p.stderr and "--resume again" in p.stderr
    assert (work / CHECKPOINT_NAME).read_bytes() == dense and (work / PRUNE_CHECKPOINT_NAME).is_file()
    (work / PRUNE_CHECKPOINT_NAME).unlink()
    p = train("c.toml", "--resume")
    assert p.returncode == 0, p.stderr
    for name in OUTPUT_FILES:
        if name != "train.json":  # it records the wall time
            assert (tmp_path / "model" / name).read_bytes() == (runs["somegather"][0] / name).read_bytes(), name
