"""With CMSIS_NN_ROOT set, nodes build against upstream CMSIS-NN and stay bit-exact with the reference."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = [pytest.mark.upstream, pytest.mark.sim,
              pytest.mark.skipif(not os.environ.get("CMSIS_NN_ROOT"), reason="CMSIS_NN_ROOT not set")]


@pytest.mark.parametrize("devices,keep,tokens,width", [(1, 1.0, 42, 128), (3, 0.5, 42, 64), (16, 0.1, 8, 128)])
def test_upstream_cmsis_nn_nodes_match_reference(tmp_path, devices, keep, tokens, width):
    model = make_model_dir(tmp_path / "m", config_for_tokens(tokens, width), devices, keep, seed=7)
    compile_model(model, tmp_path / "b", CompileOptions())
    summary = build(tmp_path / "b")
    assert summary["kernels"] == "cmsis-nn"
    assert json.loads((tmp_path / "b" / "build.json").read_text())["kernels_root"] == os.environ["CMSIS_NN_ROOT"]
    r = run_sim(tmp_path / "b", np.load(tmp_path / "m" / "test_windows.npy")[:3])
    assert r.ok, r.first_difference or r.problems
