"""Rescaling what arrived (issue 16) on the virtual testbed: the C equals the int8 reference bit for
bit under message loss, and the `rescale` ops really change what a lossy round computes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.executor import PlanExecutor
from codegen.lossmodel import LossRates, sample_rounds
from codegen.plan.io import load_plan
from codegen.vtestbed.run import run_sim
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def rescaled(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rescale")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=4, keep_ratio=0.5, seed=3, rescale=True)
    compile_model(model, root / "b", CompileOptions())
    build(root / "b")
    return root


def test_plan_rescales_every_received_point(rescaled) -> None:
    plan = load_plan(rescaled / "b")
    assert plan.meta["rescale"] is True
    layers = plan.cfg.layers
    for node in plan.nodes:
        ops = [op for op in node.ops if op.kind == "rescale"]
        assert len(ops) == 4 * layers  # x and y after their LayerNorm, h and z after their somegather
        for op in ops:
            assert op.outs == op.ins[:1] and op.attrs["own_hi"] - op.attrs["own_lo"] > 0


@pytest.mark.parametrize("q", [0.0, 0.3])
def test_c_is_bit_exact_with_the_reference_under_loss(rescaled, q: float) -> None:
    x = np.load(rescaled / "m" / "test_windows.npy")[:6]
    r = run_sim(rescaled / "b", x, timeout=60, loss=LossRates.uniform(q) if q else None, loss_seed=4)
    assert r.problems == [] and r.bit_exact, r.first_difference


def test_rescale_changes_lossy_rounds_only(rescaled) -> None:
    plan = load_plan(rescaled / "b")
    x = np.load(rescaled / "m" / "test_windows.npy")[:8].astype(np.float64)
    plain = copy.deepcopy(plan.nodes)
    for node in plain:  # the same plan with every rescale op scaling nothing (all its columns "own")
        for op in node.ops:
            if op.kind == "rescale":
                op.attrs["own_lo"], op.attrs["own_hi"] = 0, node.tensors[op.ins[0]].shape[-1]

    def run(nodes, lost=None):
        return PlanExecutor([n.tensors for n in nodes], [n.ops for n in nodes], plan.sgs, "int8",
                            constants=[n.constants for n in nodes]).run(plan.quantize_input(x), lost=lost).output

    lost = sample_rounds(np.random.default_rng(1), len(plan.sgs), len(x), plan.devices, LossRates.uniform(0.3))
    assert np.array_equal(run(plan.nodes), run(plain))
    assert not np.array_equal(run(plan.nodes, lost), run(plain, lost))
