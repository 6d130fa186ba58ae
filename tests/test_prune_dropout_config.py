"""[prune] and [dropout] in the training config: values, defaults and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.errors import UserError
from codegen.lossmodel import LossRates
from codegen.train.config import DropoutConfig, PruneConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(text)
    return path


def error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_config(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@pytest.mark.unit
def test_defaults_prune_nothing_and_drop_nothing() -> None:
    cfg = load_config(None)
    assert cfg.prune == PruneConfig() and cfg.prune.method == "none" and cfg.prune.step == 0.1
    assert cfg.dropout == DropoutConfig() and not LossRates(*cfg.dropout.rates()).any
    assert set(cfg.to_dict()) >= {"prune", "dropout"}


@pytest.mark.unit
def test_values_are_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
[prune]
method = "somegather"
keep = 0.1
step = 0.2
epochs_per_step = 2
finetune_epochs = 5
[dropout]
q_link = 0.05
q_send = 0.01
"""))
    assert cfg.prune == PruneConfig("somegather", 0.1, 0.2, 2, 5)
    assert cfg.dropout.rates() == (0.05, 0.0, 0.01)
    assert load_config(write(tmp_path, "[dropout]\nq = 0.1\n")).dropout.rates() == (0.1, 0.1, 0.1)
    assert load_config(None, {"prune.method": "normal", "prune.keep": 0.5}).prune.method == "normal"
    cfg = load_config(write(tmp_path, "[dropout]\nq_max = 0.2\n"))
    assert cfg.dropout.q_max == 0.2 and cfg.dropout.rates() == (0.0, 0.0, 0.0)


@pytest.mark.unit
@pytest.mark.parametrize("text,needle", [
    ("[prune]\nmethod = \"random\"\n", 'method must be "none", "somegather" or "normal"'),
    ("[prune]\nmethod = \"normal\"\nkeep = 0\n", "keep must be in (0, 1]"),
    ("[prune]\nmethod = \"normal\"\nstep = 1.5\n", "step must be in (0, 1]"),
    ("[prune]\nepochs_per_step = -1\n", "epochs_per_step must be >= 0"),
    ("[prune]\nfinetune_epochs = -2\n", "finetune_epochs must be >= 0"),
    ("[prune]\nkeeep = 0.5\n", "did you mean 'keep'?"),
    ("[prune]\nkeep = 0.5\n", "needs a method"),
    ("[prune]\ntarget_keep = 0.5\n", "[prune] target_keep was renamed: it is now [prune] keep"),
    ("[split]\nkeep_ratio = 0.5\n", "[split] keep_ratio was renamed: it drew RANDOM masks and is now [split] random_keep"),
    ("[split]\nrandom_keep = 0.5\n[prune]\nmethod = \"somegather\"\nkeep = 0.5\n",
     "draws random ones: remove random_keep"),
    ("[dropout]\nq = 1.0\n", "q must be in [0, 1)"),
    ("[dropout]\nq_recv = -0.1\n", "q_recv must be in [0, 1)"),
    ("[dropout]\nq = 0.1\nq_link = 0.1\n", "set either q or q_link"),
    ("[dropout]\nq_lnk = 0.1\n", "did you mean 'q_link'?"),
    ("[dropout]\nq_max = 1.2\n", "q_max must be in [0, 1)"),
    ("[dropout]\nq = 0.1\nq_max = 0.2\n", "q_max = 0.2 draws the loss rate per sample"),
    ("[dropout]\nq = \"high\"\n", "q must be a number"),
    ("[droput]\nq = 0.1\n", "did you mean 'dropout'?"),
])
def test_mistakes_are_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    assert needle in error(tmp_path, text)


@pytest.mark.unit
def test_half_the_dropout_windows_are_clean_by_default(tmp_path: Path) -> None:
    """[dropout] clean: the share of loss-free training windows (docs/design/decisions.md §9), 0.5
    unless set; out of [0, 1) is one line."""
    assert DropoutConfig().clean == 0.5
    assert load_config(write(tmp_path, "[dropout]\nq = 0.1\nclean = 0\n")).dropout.clean == 0.0
    msg = error(tmp_path, "[dropout]\nq = 0.1\nclean = 1.0\n")
    assert "[dropout] clean" in msg and "[0, 1)" in msg


@pytest.mark.unit
def test_rescale_is_off_unless_asked_for(tmp_path: Path) -> None:
    """[dropout] rescale is off by default, with or without message dropout (decisions.md §9: the
    rescaled ETTh2 model was less robust at q = 10 %); "auto" rescales exactly the models trained
    with message dropout; true / false force it; anything else is one line."""
    assert DropoutConfig().rescale is False and not DropoutConfig(q=0.1).rescaled()
    assert not DropoutConfig(q_max=0.2).rescaled()
    auto = {"rescale": "auto"}
    assert DropoutConfig(q=0.1, **auto).rescaled() and DropoutConfig(q_max=0.2, **auto).rescaled()
    assert DropoutConfig(q_send=0.05, **auto).rescaled() and not DropoutConfig(**auto).rescaled()
    assert load_config(write(tmp_path, "[dropout]\nq = 0.1\nrescale = false\n")).dropout.rescaled() is False
    assert load_config(write(tmp_path, "[dropout]\nrescale = true\n")).dropout.rescaled() is True
    assert load_config(write(tmp_path, '[dropout]\nq = 0.1\nrescale = "auto"\n')).dropout.rescaled() is True
    msg = error(tmp_path, '[dropout]\nrescale = "sometimes"\n')
    assert "[dropout] rescale" in msg and '"auto"' in msg


@pytest.mark.train
@pytest.mark.parametrize("own,file,note,rates", [
    ("q = 0.1", "q_link = 0\nq_recv = 0.12\nq_send = 0.025", "([dropout] q = 0.1 dropped)", (0.0, 0.12, 0.025)),
    ("q_max = 0.3\nclean = 0.25", "q_link = 0.05\nq_recv = 0.1\nq_send = 0", "([dropout] q_max = 0.3 dropped)",
     (0.05, 0.1, 0.0)),
    ("q = 0.1", "clean = 0.25", None, (0.1, 0.1, 0.1)),  # no rate in the file: the config's loss stays
], ids=["q", "q_max", "clean only"])
def test_a_dropout_file_replaces_the_loss_the_config_sets(tmp_path: Path, own: str, file: str, note: str | None,
                                                           rates: tuple[float, float, float]) -> None:
    """usage.md: --dropout FILE overrides the [dropout] keys FILE sets. A config with q or q_max and the
    file `cisl radio loss -o` writes (q_link, q_recv, q_send) was refused as setting both."""
    import json
    import subprocess
    import sys

    from models import tiny_train_config

    (tmp_path / "c.toml").write_text(tiny_train_config(2, dropout=own))
    (tmp_path / "d.toml").write_text(f"# message loss measured by `cisl radio loss`\n[dropout]\n{file}\n")
    p = subprocess.run([sys.executable, "-m", "codegen.cli", "train", "c.toml", "--dropout", "d.toml", "-o", "m"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    notes = [line for line in p.stderr.splitlines() if line.startswith("note: --dropout")]
    if note is None:
        assert not notes, p.stderr
    else:
        assert len(notes) == 1 and note in notes[0] and "c.toml" in notes[0], p.stderr
    drop = json.loads((tmp_path / "m" / "train.json").read_text())["summary"]["dropout"]
    assert (drop["q_link"], drop["q_recv"], drop["q_send"]) == pytest.approx(rates) and "q_max" not in drop
    assert drop["clean"] == (0.25 if "clean" in own + file else 0.5)  # the config's clean stays unless FILE sets it
