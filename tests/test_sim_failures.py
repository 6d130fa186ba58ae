"""The virtual testbed reports broken runs clearly instead of hanging or claiming success."""

from __future__ import annotations

import time

import numpy as np
import pytest

from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.vtestbed.run import run_sim
from clirun import vouch_for
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("b")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=4, keep_ratio=0.5)
    compile_model(model, root / "build", CompileOptions())
    build(root / "build")
    return root / "build"


def test_a_crashing_node_is_named_and_the_run_fails_fast(built, tmp_path):
    elf = built / "node_02" / "firmware.elf"
    original = elf.read_bytes()
    summary = None
    try:
        elf.write_text("#!/bin/sh\necho 'CISL 2 boot fw=x plan=y board=sim node=2 nodes=4'\nexit 3\n")
        elf.chmod(0o755)
        summary = vouch_for(built, 2)
        t0 = time.monotonic()
        r = run_sim(built, logs_dir=tmp_path / "logs", timeout=30)
        assert time.monotonic() - t0 < 25
    finally:
        elf.write_bytes(original)
        if summary is not None:
            (built / "build.json").write_bytes(summary)
    assert not r.ok
    assert any("node 2" in p for p in r.problems), r.problems


def test_a_corrupted_weight_is_found_at_its_first_message(built, tmp_path):
    """Flip one weight in node 1's image: the sim names node 1 and layer 0's first tensor it sends."""
    w = built / "node_01" / "cisl_weights.c"
    original = w.read_text()
    try:
        # the first constant of the node's first W_Q slice; change the first value it holds
        head, sep, rest = original.partition("cisl_c_l0_q4_w[")
        body_start = rest.index("{") + 1
        first_value_end = rest.index(",", body_start)
        value = int(rest[body_start:first_value_end])
        w.write_text(head + sep + rest[:body_start] + f"\n    {value + 37 if value < 0 else value - 37}" + rest[first_value_end:])
        build(built)
        r = run_sim(built, np.load(built / "inputs.npy")[:1], logs_dir=tmp_path / "logs")
    finally:
        w.write_text(original)
        build(built)
    assert not r.bit_exact
    assert "node 1" in r.first_difference and "layer 0" in r.first_difference, r.first_difference
