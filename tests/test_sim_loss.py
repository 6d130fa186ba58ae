"""Lost messages: the generated C and the numpy reference implement the same semantics.

The medium drops messages by the three loss modes; the reference runs with exactly the same lost
messages (zero-point fill, LayerNorm over the present columns, missing head partials skipped) and
must agree with the nodes bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.lossmodel import LossRates
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("devices,keep,rates", [
    (3, 1.0, LossRates.uniform(0.2)),
    (8, 0.5, LossRates(link=0.3)),
    (4, 0.5, LossRates(receiver=0.4)),
    (4, 1.0, LossRates(sender=0.4)),
])
def test_nodes_match_reference_under_loss(tmp_path, devices, keep, rates):
    model = make_model_dir(tmp_path / "m", config_for_tokens(42, 64), devices, keep, seed=devices)
    compile_model(model, tmp_path / "b", CompileOptions())
    build(tmp_path / "b")
    x = np.load(tmp_path / "m" / "test_windows.npy")[:4]
    lossy = run_sim(tmp_path / "b", x, loss=rates, loss_seed=11)
    assert lossy.problems == []
    assert lossy.bit_exact, lossy.first_difference
    assert 0 < lossy.delivered < lossy.expected
    clean = run_sim(tmp_path / "b", x)
    assert clean.delivered == clean.expected
    assert not np.array_equal(lossy.forecast, clean.forecast)  # the losses did change the result
