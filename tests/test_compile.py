"""`cisl compile`: determinism, the float plan vs ONNX Runtime, quantisation quality, memory plans."""

from __future__ import annotations

import hashlib
import sys
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from codegen.compile import CompileOptions, compile_model
from codegen.executor import PlanExecutor
from codegen.fsutil import stamp_output
from codegen.onnx_model import load_model
from codegen.plan.io import load_plan
from codegen.plan.memory import buffers_of, check_plan
from models import config_for_tokens, make_model_dir


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.unit
def test_compiling_twice_gives_byte_identical_trees(tmp_path):
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=3, keep_ratio=0.5)
    compile_model(model, tmp_path / "a", CompileOptions())
    compile_model(model, tmp_path / "b", CompileOptions())
    a, b = tree_digest(tmp_path / "a"), tree_digest(tmp_path / "b")
    assert a == b
    assert "plan.json" in a and "node_02/cisl_node.c" in a


@pytest.mark.unit
def test_the_input_hash_covers_the_input_windows_compiled_into_the_images(tmp_path):
    """inputs.npy goes into the board images and the virtual testbed; two builds whose test windows
    differed printed the same input and plan hashes, so their logs could not be told apart (audit K)."""
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0)
    compile_model(model, tmp_path / "a", CompileOptions())
    x = np.load(tmp_path / "m" / "test_windows.npy")
    np.save(tmp_path / "m" / "test_windows.npy", x[::-1].copy())
    compile_model(model, tmp_path / "b", CompileOptions())
    a, b = load_plan(tmp_path / "a"), load_plan(tmp_path / "b")
    assert not np.array_equal(np.load(tmp_path / "a" / "inputs.npy"), np.load(tmp_path / "b" / "inputs.npy"))
    assert a.meta["input_hash"] != b.meta["input_hash"] and a.sha256 != b.sha256


@pytest.mark.unit
def test_recompiling_into_the_same_folder_replaces_it(tmp_path):
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=4, keep_ratio=1.0)
    compile_model(model, tmp_path / "b", CompileOptions())
    compile_model(model, tmp_path / "b", CompileOptions(devices=2))
    assert sorted(p.name for p in (tmp_path / "b").glob("node_*")) == ["node_00", "node_01"]
    assert "notes" not in compile_model(model, tmp_path / "b", CompileOptions(devices=2))
    # `cisl sim`'s default logs go with the build they ran: a recompile says so rather than drop them silently
    (tmp_path / "b" / "logs").mkdir()
    (tmp_path / "b" / "logs" / "node_00.log").write_text("boot node=0\n")
    stamp_output(tmp_path / "b")  # as `cisl sim` leaves them: cisl's own output
    s = compile_model(model, tmp_path / "b", CompileOptions(devices=2))
    assert not (tmp_path / "b" / "logs").exists()
    assert any("logs" in n and "cisl sim --logs" in n for n in s["notes"]), s


@pytest.mark.unit
@pytest.mark.parametrize("devices,keep", [(1, 1.0), (3, 0.5), (16, 0.1)])
def test_float_plan_equals_onnx_runtime(tmp_path, devices, keep):
    """The plan's schedules (float mode) compute exactly the ONNX model: the split is not re-derived."""
    cfg = config_for_tokens(42, 64)
    model = make_model_dir(tmp_path / "m", cfg, devices, keep)
    compile_model(model, tmp_path / "b", CompileOptions())
    plan = load_plan(tmp_path / "b")
    x = np.load(tmp_path / "m" / "test_windows.npy")
    ref = ort.InferenceSession(str(model)).run(["forecast"], {"window": x})[0]
    got = PlanExecutor([n.tensors for n in plan.nodes], [n.ops for n in plan.nodes], plan.sgs, "float",
                       weights=load_model(model).weights).run(x).output
    assert np.max(np.abs(got - ref)) < 1e-4


@pytest.mark.unit
def test_int8_close_to_float_and_memory_plans_valid(tmp_path):
    cfg = config_for_tokens(42, 128)
    model = make_model_dir(tmp_path / "m", cfg, devices=4, keep_ratio=0.5, calibration=64, tests=64)
    summary = compile_model(model, tmp_path / "b", CompileOptions())
    acc = summary["accuracy"]
    # int8 PTQ of a random (untrained) model: about 28 dB SQNR at the output
    assert acc["relative_rms_float_vs_int8"] < 0.08
    plan = load_plan(tmp_path / "b")
    for node in plan.nodes:
        bufs = buffers_of(node)
        assert check_plan(bufs, node.offsets, node.arena_bytes) == []
        # the planner reuses memory: the arena is far below the sum of all buffers
        assert node.arena_bytes < 0.6 * sum(b.size for b in bufs)


@pytest.mark.unit
def test_compile_does_not_import_torch(tmp_path):
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0)
    code = ("import sys; sys.modules['torch'] = None\n"
            "from codegen.cli import main\n"
            f"sys.argv = ['cisl', 'compile', {str(model)!r}, '-o', {str(tmp_path / 'b')!r}, '-q']\n"
            "main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "b" / "plan.json").is_file()
