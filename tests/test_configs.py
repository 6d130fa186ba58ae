"""Every experiment config in configs/ is valid (loaded and checked, not trained)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.train.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.unit
@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_config_validates(path: Path) -> None:
    cfg = load_config(path)
    if cfg.data.path:  # relative data paths are resolved against configs/
        assert Path(cfg.data.path).is_absolute()
    assert path.name in (CONFIGS / "README.md").read_text()


@pytest.mark.unit
def test_the_paper_configs_exist() -> None:
    etth2 = load_config(CONFIGS / "paper-etth2.toml")
    m, t = etth2.model, etth2.train
    assert (m.layers, m.d_model, m.heads, m.mlp_hidden, m.lookback, m.horizon) == (6, 128, 16, 128, 336, 96)
    assert (t.batch_size, t.lr, t.schedule, t.epochs) == (2048, 1e-3, "cosine", 50)
    assert 1 <= t.micro_batch < t.batch_size and etth2.split.devices == 8
    assert Path(etth2.data.path).name == "ETTh2.csv" and etth2.data.source == "csv"
    assert load_config(CONFIGS / "paper-icd.toml").data.source == "icd"
