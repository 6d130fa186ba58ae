"""Checkpoints, --resume (same bytes as an uninterrupted run) and micro-batch gradient accumulation."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codegen.errors import UserError  # noqa: E402
from codegen.partition import Split  # noqa: E402
from codegen.train.api import CHECKPOINT_NAME, OUTPUT_FILES, build_data, default_work_dir, make_masks, \
    run_train  # noqa: E402
from codegen.train.config import load_config  # noqa: E402
from codegen.train.loop import fit, load_checkpoint, predict, train_step  # noqa: E402
from codegen.train.model import SplitPatchTST  # noqa: E402
from models import TINY_MODEL  # noqa: E402
import clirun  # noqa: E402

pytestmark = pytest.mark.train

TINY = TINY_MODEL + """[split]
devices = 2
random_keep = 0.5
[data]
synthetic_length = 600
synthetic_channels = 2
[train]
epochs = 3
batch_size = 64
max_train_windows = 256
calibration_samples = 8
test_samples = 8
threads = 1
"""

SAME_BYTES = [name for name in OUTPUT_FILES if name != "train.json"]  # train.json records the wall time


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    (root / "tiny.toml").write_text(TINY)
    run_train(root / "tiny.toml", None, root / "model", progress=False)
    return root / "model"


def test_interrupted_and_resumed_run_gives_the_same_bytes(tmp_path: Path, uninterrupted: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "model"
    stop = {"train.stop_after_epochs": 1}
    s = run_train(cfg, None, out, stop, progress=False)
    ckpt = default_work_dir(out) / CHECKPOINT_NAME
    assert s["stopped"] and s["epochs_done"] == 1 and Path(s["checkpoint"]) == ckpt
    assert not out.exists() and ckpt.is_file()  # no outputs until training is complete

    state = load_checkpoint(ckpt)
    assert state["epoch"] == 1 and len(state["history"]) == 1 and state["best_epoch"] == 1
    for key in ("model", "optimizer", "scheduler", "best_state", "numpy_rng", "torch_rng"):
        assert state[key] is not None, key

    s = run_train(cfg, None, out, stop, progress=False, resume=True)  # epoch 2, stops again
    assert s["stopped"] and s["epochs_done"] == 2
    s = run_train(cfg, None, out, progress=False, resume=True)  # epoch 3, writes the outputs
    assert s["resumed_from_epoch"] == 2 and s["epochs"] == 3
    for name in SAME_BYTES:
        assert (out / name).read_bytes() == (uninterrupted / name).read_bytes(), name
    assert not default_work_dir(out).exists()  # the checkpoint goes once the outputs are written


def test_resume_in_a_new_process_through_the_cli(tmp_path: Path, uninterrupted: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "stop.toml").write_text(TINY + "stop_after_epochs = 2\n")  # appended to [train]
    work = tmp_path / "work"

    def cisl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "codegen.cli", "train", *args, "-o", "model", "-q",
                               "--work", str(work)], capture_output=True, text=True, cwd=tmp_path)

    p = cisl("stop.toml")
    # not done: a non-zero exit (2, as cisl sweep ends such a unit), so `cisl train ... && cisl compile` stops
    assert p.returncode == 2 and "stopped after epoch 2 of 3" in p.stderr and "--resume" in p.stderr, p.stderr
    assert "no model written (model unchanged)" in p.stderr and not p.stdout
    assert (work / CHECKPOINT_NAME).is_file() and not (tmp_path / "model").exists()
    p = cisl("tiny.toml", "--resume")
    assert p.returncode == 0, p.stderr
    for name in SAME_BYTES:
        assert (tmp_path / "model" / name).read_bytes() == (uninterrupted / name).read_bytes(), name


def test_resume_refuses_a_changed_config_or_data(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "model"
    run_train(cfg, None, out, {"train.stop_after_epochs": 1}, progress=False)
    with pytest.raises(UserError) as err:
        run_train(cfg, None, out, {"train.lr": 0.002}, progress=False, resume=True)
    msg = str(err.value)
    assert "\n" not in msg and "cannot resume: [train] lr was 0.001" in msg and "now 0.002" in msg, msg
    with pytest.raises(UserError, match=r"\[split\] devices was 2 in the interrupted run, now 4"):
        run_train(cfg, None, out, {"split.devices": 4}, progress=False, resume=True)
    with pytest.raises(UserError, match=r"\[data\] synthetic_seed"):
        run_train(cfg, None, out, {"data.synthetic_seed": 5}, progress=False, resume=True)
    with pytest.raises(UserError, match="no checkpoint to resume from"):
        run_train(cfg, None, tmp_path / "other", progress=False, resume=True)

    # the same config, but CISL_THREADS caps the threads differently now: the weights depend on the count
    two = tmp_path / "two.toml"
    two.write_text(TINY.replace("threads = 1", "threads = 2"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CISL_THREADS", "1")
        run_train(two, None, tmp_path / "m3", {"train.stop_after_epochs": 1}, progress=False)
        mp.delenv("CISL_THREADS")
        with pytest.raises(UserError, match="trained on 1 threads, this one would on 2"):
            run_train(two, None, tmp_path / "m3", progress=False, resume=True)
        mp.setenv("CISL_THREADS", "1")
        assert run_train(two, None, tmp_path / "m3", progress=False, resume=True)["threads"] == 1

    # the same data under another name may resume; other bytes may not
    csv = tmp_path / "a.csv"
    csv.write_text("date,x\n" + "".join(f"{i},{np.sin(i / 5):.5f}\n" for i in range(400)))
    run_train(cfg, csv, tmp_path / "m2", {"train.stop_after_epochs": 1}, progress=False)
    csv.write_text(csv.read_text().replace("0.00000", "0.00001"))
    with pytest.raises(UserError, match=r"cannot resume: the data \(sha256\)"):
        run_train(cfg, csv, tmp_path / "m2", progress=False, resume=True)


def _as_an_earlier_cisl_wrote_it(ckpt: Path, target_keep: float | None = None) -> None:
    """Rewrite a checkpoint's meta as cisl wrote it before [dropout] q_max and [elastic] existed, when
    [split] random_keep was keep_ratio (and, given ``target_keep``, [prune] keep was target_keep)."""
    import json

    state = torch.load(ckpt, weights_only=True)
    meta = json.loads(state["meta"])
    config = meta["config"]
    del config["dropout"]["q_max"], config["elastic"]
    config["split"]["keep_ratio"] = config["split"].pop("random_keep")
    if target_keep is not None:
        del config["prune"]["keep"]
        config["prune"]["target_keep"] = target_keep
    state["meta"] = json.dumps(meta)
    torch.save(state, ckpt)


def test_a_checkpoint_of_an_earlier_cisl_resumes_with_the_defaults_and_renamed_keys(tmp_path: Path) -> None:
    """A run interrupted before an upgrade that added a config key (or section) still resumes, as long as
    the key keeps its default; another value is a change like any other. A key that was renamed is
    compared under its new name (audit V F4: an 8-day-old checkpoint's [split] keep_ratio was refused as
    "now (absent)", whatever the config said); one whose meaning changed is refused in words that say so."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    for name, target_keep in (("same", None), ("changed", None), ("pruned", 0.5), ("unpruned", 1.0)):
        run_train(cfg, None, tmp_path / name, {"train.stop_after_epochs": 1}, progress=False)
        _as_an_earlier_cisl_wrote_it(default_work_dir(tmp_path / name) / CHECKPOINT_NAME, target_keep)
    for name in ("same", "unpruned"):
        assert run_train(cfg, None, tmp_path / name, progress=False, resume=True)["resumed_from_epoch"] == 1
    with pytest.raises(UserError, match=r"\[dropout\] q_max was 0.0 in the interrupted run, now 0.1"):
        run_train(cfg, None, tmp_path / "changed", {"dropout.q_max": 0.1}, progress=False, resume=True)
    with pytest.raises(UserError, match=r"used \[prune\] target_keep = 0.5, which this cisl no longer has"):
        run_train(cfg, None, tmp_path / "pruned", progress=False, resume=True)


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model gains nothing from more; spare the CPU for other tests
    yield
    torch.set_num_threads(old)


def _tiny_model(cfg_text: str, tmp_path: Path):
    (tmp_path / "c.toml").write_text(cfg_text)
    cfg = load_config(tmp_path / "c.toml")
    m, s = cfg.model, cfg.split
    split = Split.even(s.devices, m.heads, m.d_model, m.mlp_hidden)
    masks = make_masks(split, m.layers, s.random_keep, s.mask_seed)
    data, _ = build_data(cfg)

    def fresh() -> SplitPatchTST:
        torch.manual_seed(0)
        return SplitPatchTST(cfg=m, split=split, masks=masks)
    return cfg, data, fresh


def test_micro_batches_sum_to_the_full_batch_gradient(tmp_path: Path, one_thread: None) -> None:
    cfg, data, fresh = _tiny_model(TINY, tmp_path)
    x, y = data.train.take(np.arange(0, 900, 5)[:60])  # a batch of 60, uneven pieces of 16
    params = []
    for micro in (60, 16, 7):
        model = fresh()
        sgd = torch.optim.SGD(model.parameters(), lr=0.05)  # the update is linear in the gradient
        losses = [train_step(model, sgd, x, y, micro, True) for _ in range(3)]
        params.append((losses, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    (full_loss, full), *pieces = params
    for loss, p in pieces:
        np.testing.assert_allclose(loss, full_loss, rtol=1e-6)
        for k in full:
            assert float((p[k] - full[k]).abs().max()) <= 1e-6, k


def test_micro_batch_fit_matches_the_full_batch_fit(tmp_path: Path, one_thread: None) -> None:
    cfg, data, fresh = _tiny_model(TINY, tmp_path)
    x, _ = data.val.take(np.arange(0, len(data.val), 7))
    results = []
    for micro in (0, 16):  # 0 = batch_size
        t = dataclasses.replace(cfg.train, epochs=2, micro_batch=micro)
        model = fresh()
        r = fit(model, data.train, np.arange(192), data.val, t, True, progress=False)
        with torch.no_grad():
            results.append((r.history, predict(model.eval(), torch.from_numpy(x), True)))
    (h_full, f_full), (h_micro, f_micro) = results
    for a, b in zip(h_full, h_micro):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-6)
        assert a["val_mse"] == pytest.approx(b["val_mse"], abs=1e-6)
    # Adam divides by sqrt(v): the key bias, whose gradient is zero up to rounding, may move by
    # ~lr * rounding / eps, but attention is invariant to it; what the model computes agrees
    assert float((f_full - f_micro).abs().max()) <= 1e-5


def test_micro_batch_is_validated(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[train]\nbatch_size = 64\nmicro_batch = 128\n")
    with pytest.raises(UserError, match=r"\[train\] micro_batch must be in \[1, batch_size\]"):
        load_config(tmp_path / "c.toml")
    assert load_config(None, {"train.micro_batch": 64, "train.batch_size": 64}).train.micro_batch == 64


def _one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("names,resume", [(("checkpoint.pt", "prune.pt"), False), (("prune.pt",), False),
                                          (("checkpoint.pt",), True)])
def test_the_users_files_named_like_checkpoints_in_work_are_never_touched(tmp_path: Path, names, resume) -> None:
    """--work may be any folder: a checkpoint.pt or prune.pt there that cisl did not write is refused
    before the run (it used to be removed at the start, or overwritten every epoch and removed at the end)."""
    (tmp_path / "tiny.toml").write_text(TINY)
    work = tmp_path / "w"
    work.mkdir()
    for name in names:
        (work / name).write_text("mine\n")
    p = clirun.cisl("train", "tiny.toml", "--work", "w", "-o", "model", "-q", "--epochs", "1",
                    *(["--resume"] if resume else []), cwd=tmp_path)
    # with --resume it may be this run's checkpoint, damaged: the message says what to do in either case
    _one_line_error(p, f"{names[0]}: cannot be read as a cisl checkpoint" if resume else
                    f"{names[0]}: exists and is not a cisl checkpoint", "if it is a file of yours" if resume else "",
                    "--work")
    assert sorted(q.name for q in work.iterdir()) == sorted(names)
    assert all((work / name).read_text() == "mine\n" for name in names)
    assert not (tmp_path / "model").exists()


def test_a_work_folder_the_user_made_stays_and_one_run_at_a_time_uses_it(tmp_path: Path) -> None:
    from codegen.fsutil import use_lock

    (tmp_path / "tiny.toml").write_text(TINY)
    work = tmp_path / "w"
    work.mkdir()  # empty: the run's checkpoints come and go, the user's folder stays

    def cisl(out: str) -> subprocess.CompletedProcess:
        return clirun.cisl("train", "tiny.toml", "--work", "w", "-o", out, "-q", "--epochs", "1", cwd=tmp_path)

    with use_lock(work, "held by the test"):  # as another `cisl train --work w -o other` would hold it
        _one_line_error(cisl("model"), "w: another cisl train keeps its checkpoints there", "--work")
    assert not (tmp_path / "model").exists()
    p = cisl("model")
    assert p.returncode == 0, p.stderr
    assert work.is_dir() and not any(work.iterdir()) and (tmp_path / "model" / "model.onnx").is_file()


def test_a_run_failing_after_its_epochs_leaves_no_folders_or_dead_checkpoint(tmp_path: Path) -> None:
    """A run that failed on its input after training (here [elastic] after pruning, whose masks decide
    the modes) kept deep/a/.b.cisl-train/checkpoint.pt: a folder made for -o that docs say goes with a
    failure, holding a checkpoint --resume refuses once the config is fixed (audit P F8)."""
    from models import tiny_train_config

    (tmp_path / "el.toml").write_text(tiny_train_config(2, prune='method = "somegather"\nkeep = 0.5\nstep = 0.5',
                                                        elastic="modes = 2\ncore_macs = 0.05"))
    p = clirun.cisl("train", "el.toml", "-o", "deep/a/b", "-q", cwd=tmp_path)
    assert p.returncode == 2 and "[elastic] the smallest possible mode" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "deep").exists(), sorted(str(q) for q in (tmp_path / "deep").rglob("*"))


def test_the_divergence_advice_can_be_followed(tmp_path: Path) -> None:
    """It said "resume from the last checkpoint with a lower lr", which --resume refuses (audit P F11)."""
    (tmp_path / "d.toml").write_text(TINY.replace("threads = 1", 'threads = 1\nlr = 1e30\nschedule = "constant"'))
    p = clirun.cisl("train", "d.toml", "-o", "m", "-q", cwd=tmp_path)
    assert p.returncode == 2 and "training diverged" in p.stderr, p.stderr
    assert "lower [train] lr" in p.stderr and "train again without --resume" in p.stderr and "resume from" not in p.stderr
    assert not (tmp_path / "m").exists() and not default_work_dir(tmp_path / "m").exists()


def test_an_interrupted_run_names_its_checkpoint_and_resume(tmp_path: Path) -> None:
    """Ctrl-C / SIGTERM printed only "interrupted" although the checkpoint was kept and --resume would
    continue (audit P F14)."""
    import signal
    import time

    (tmp_path / "long.toml").write_text(TINY.replace("epochs = 3", "epochs = 500"))
    p = subprocess.Popen([sys.executable, "-m", "codegen.cli", "train", "long.toml", "-o", "m", "-q"], cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ckpt = default_work_dir(tmp_path / "m") / CHECKPOINT_NAME
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and p.poll() is None and not ckpt.is_file():
            time.sleep(0.05)
        assert p.poll() is None, "the training ended early"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 130 and err.strip().splitlines() == [
        f"interrupted; the checkpoint {ckpt} is kept: continue with the same command and --resume"], err
    assert ckpt.is_file() and not (tmp_path / "m").exists()
