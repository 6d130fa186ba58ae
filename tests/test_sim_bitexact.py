"""The generated C on the virtual testbed equals the numpy int8 reference bit for bit.

For every D in {1, 2, 3, 4, 8, 16} and keep ratio in {1.0, 0.5, 0.1}, with N in {8, 42} tokens and
F in {64, 128} (H = 16, T = 2) chosen so that every pair of values of any two factors occurs (18
cases; CISL_TEST_FULL=1 runs all 72 combinations): compile, build with gcc -Werror, run every node
as its own process with the medium between them, and compare every node's somegather payloads and
the forecast with the reference. Also checks that each node sends exactly what its somegather masks
say.
"""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.onnx_model import load_model
from codegen.plan.io import load_plan
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim

DEVICES, KEEPS, TOKENS_WIDTHS = [1, 2, 3, 4, 8, 16], [1.0, 0.5, 0.1], [(8, 64), (42, 128), (8, 128), (42, 64)]
# every (D, keep) once, (N, F) cycling so that each D meets both N and both F (three consecutive
# entries of the cycle hold both of each) and each keep meets all four (N, F) pairs (six D's)
PAIRWISE = [(d, k, *TOKENS_WIDTHS[(i + j) % 4]) for i, d in enumerate(DEVICES) for j, k in enumerate(KEEPS)]
FULL = list(itertools.product(DEVICES, KEEPS, [8, 42], [64, 128]))
MATRIX = FULL if os.environ.get("CISL_TEST_FULL") == "1" else PAIRWISE


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
    masks = load_model(model).masks
    for k in range(devices):
        expected = 0 if devices == 1 else cfg.tokens * sum(len(layer[k][p]) for layer in masks for p in layer[k])
        assert sent.get(k, 0) == expected * len(x), f"node {k}"
    # the network-wide share is the requested keep as exactly as whole columns allow
    if devices > 1:
        share = sum(sent.values()) / len(x) / (cfg.tokens * cfg.layers * (3 * cfg.d_model + cfg.mlp_hidden))
        assert abs(share - keep) <= 0.5 / (cfg.layers * (3 * cfg.d_model + cfg.mlp_hidden))
        assert plan.meta["realised_keep"] == pytest.approx(share)
    assert math.isclose(sum(sent.values()) / len(x),
                        sum(s.msg_bytes[k] for s in plan.sgs if s.point != "head" for k in range(devices)))
