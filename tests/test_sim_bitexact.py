"""The generated C on the virtual testbed equals the numpy int8 reference bit for bit.

For every D in {1, 2, 3, 4, 8, 16}, keep ratio in {1.0, 0.5, 0.1}, N in {8, 42} tokens and
F in {64, 128} (H = 16, T = 2): compile, build with gcc -Werror, run every node as its own process
with the medium between them, and compare every node's somegather payloads and the forecast with
the reference. Also checks that each node sends exactly what its somegather masks say.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.partition import kept_count
from codegen.plan.io import load_plan
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim

MATRIX = list(itertools.product([1, 2, 3, 4, 8, 16], [1.0, 0.5, 0.1], [8, 42], [64, 128]))


@pytest.mark.parametrize("devices,keep,tokens,width", MATRIX,
                         ids=[f"D{d}-keep{k}-N{n}-F{f}" for d, k, n, f in MATRIX])
def test_generated_c_matches_reference(tmp_path, devices, keep, tokens, width):
    cfg = config_for_tokens(tokens, width)
    model = make_model_dir(tmp_path / "model", cfg, devices, keep, seed=devices * 100 + tokens + width)
    compile_model(model, tmp_path / "build", CompileOptions())
    build(tmp_path / "build")
    x = np.load(tmp_path / "model" / "test_windows.npy")[:2]
    r = run_sim(tmp_path / "build", x, timeout=60)
    assert r.problems == []
    assert r.bit_exact, r.first_difference
    np.testing.assert_array_equal(r.forecast, r.reference)

    # bytes on air per node and inference follow the keep ratio
    plan = load_plan(tmp_path / "build")
    sent: dict[int, int] = {}
    for rec in r.records:
        if rec.event == "sg" and rec.fields["point"] != "head":
            sent[rec.node] = sent.get(rec.node, 0) + int(rec.fields["tx"])
    d_head = cfg.d_model // cfg.heads
    for k in range(devices):
        if devices == 1:
            expected = 0
        else:
            heads = plan.meta["partition"]["heads_per_device"][k]
            lo, hi = plan.meta["partition"]["hidden_cols"][k]
            per_layer = 3 * kept_count(heads * d_head, keep) + kept_count(hi - lo, keep)
            expected = cfg.layers * cfg.tokens * per_layer
        assert sent.get(k, 0) == expected * len(x), f"node {k}"
    assert math.isclose(sum(sent.values()) / len(x),
                        sum(s.msg_bytes[k] for s in plan.sgs if s.point != "head" for k in range(devices)))
