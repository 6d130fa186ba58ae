"""Bad input gets one clear line on stderr, exit code 2, no traceback and no partial output."""

from __future__ import annotations

import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from clirun import cisl, without_torch
from models import config_for_tokens, make_model_dir

pytestmark = pytest.mark.unit


def assert_one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope="module")
def good_model(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("m"), config_for_tokens(8, 64), devices=4, keep_ratio=0.5)


def test_missing_model_file(tmp_path):
    p = cisl("compile", "nope.onnx", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "nope.onnx")
    assert not (tmp_path / "build").exists()


def test_file_that_is_not_onnx(tmp_path):
    (tmp_path / "junk.onnx").write_text("this is not a protobuf\n" * 10)
    p = cisl("compile", "junk.onnx", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "junk.onnx")
    assert not (tmp_path / "build").exists()


def test_onnx_without_cisl_metadata(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "plain.onnx")
    p = cisl("compile", "plain.onnx", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "plain.onnx", "cisl")
    assert not (tmp_path / "build").exists()


def test_more_devices_than_heads(tmp_path, good_model):
    p = cisl("compile", str(good_model), "--devices", "17", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "17", "heads")
    assert not (tmp_path / "build").exists()


def test_pruned_model_for_other_device_count(tmp_path, good_model):
    p = cisl("compile", str(good_model), "--devices", "2", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "--devices 4")
    assert not (tmp_path / "build").exists()


def test_unknown_board(tmp_path, good_model):
    p = cisl("compile", str(good_model), "--board", "esp32", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "esp32", "sim")
    assert not (tmp_path / "build").exists()


def test_bad_input_leaves_an_existing_build_untouched(tmp_path, good_model):
    assert cisl("compile", str(good_model), "-o", "build", "-q", cwd=tmp_path).returncode == 0
    before = (tmp_path / "build" / "plan.json").read_bytes()
    p = cisl("compile", str(good_model), "--devices", "99", "-o", "build", cwd=tmp_path)
    assert p.returncode == 2
    assert (tmp_path / "build" / "plan.json").read_bytes() == before
    assert [q.name for q in tmp_path.iterdir() if q.name.startswith(".build")] == []


def test_refuses_to_overwrite_a_foreign_folder(tmp_path, good_model):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.tex").write_text("precious")
    p = cisl("compile", str(good_model), "-o", "docs", cwd=tmp_path)
    assert_one_line_error(p, "docs")
    assert (tmp_path / "docs" / "thesis.tex").read_text() == "precious"


def test_an_output_under_missing_folders_is_made(tmp_path, good_model):
    # as mkdir -p would, the same for every command that writes an output folder (train did, compile did not)
    p = cisl("compile", str(good_model), "-o", "runs/a/build", "-q", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "runs" / "a" / "build" / "plan.json").is_file()


def test_a_run_that_fails_takes_the_folders_made_for_its_output_with_it(tmp_path):
    from codegen.fsutil import atomic_output_dir

    (tmp_path / "other").mkdir()
    out = tmp_path / "other" / "x" / "y" / "build"
    with pytest.raises(RuntimeError), atomic_output_dir(out, "build", lambda name: True) as tmp:
        (tmp / "plan.json").write_text("{}")
        raise RuntimeError("the work failed")
    assert [q.name for q in (tmp_path / "other").iterdir()] == []  # x/y made for it: gone; other/ stays


def test_config_with_a_typo(tmp_path):
    (tmp_path / "cfg.toml").write_text("[model]\nd_modle = 64\n")
    p = cisl("train", "cfg.toml", "-o", "model", cwd=tmp_path)
    assert_one_line_error(p, "cfg.toml", "d_modle", "d_model")
    assert not (tmp_path / "model").exists()


def test_missing_config(tmp_path):
    p = cisl("train", "nothere.toml", cwd=tmp_path)
    assert_one_line_error(p, "nothere.toml")
    (tmp_path / "cfg").mkdir()  # a folder is there, not missing: say what it is
    assert_one_line_error(cisl("train", "cfg", cwd=tmp_path), "cfg: is a folder, not a config file")
    assert_one_line_error(cisl("testbed", "check", "cfg", cwd=tmp_path), "cfg: is a folder; give the testbed file")


def test_build_without_compile(tmp_path):
    p = cisl("build", "build", cwd=tmp_path)
    assert_one_line_error(p, "cisl compile")


def test_sim_without_build(tmp_path, good_model):
    assert cisl("compile", str(good_model), "-o", "b", "-q", cwd=tmp_path).returncode == 0
    p = cisl("sim", "b", cwd=tmp_path)
    assert_one_line_error(p, "cisl build")


def test_every_command_documents_its_options(tmp_path):
    for cmd in ("train", "compile", "build", "sim", "demo"):
        p = cisl(cmd, "--help", cwd=tmp_path)
        assert p.returncode == 0
        assert "Usage:" in p.stdout and "--help" in p.stdout


def test_dropout_file_without_section(tmp_path):
    (tmp_path / "d.toml").write_text("[train]\nepochs = 1\n")
    p = cisl("train", "--dropout", "d.toml", "-o", "model", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "d.toml", "[dropout]")
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("line,words", [("q = 2", ("q must be in [0, 1)", "2.0")),
                                        ("bogus = 1", ("unknown key 'bogus'",))])
def test_a_bad_dropout_file_is_named_not_the_config(tmp_path, line, words):
    # the mistake is in the --dropout file: it used to be reported as "overrides: ..."
    (tmp_path / "d.toml").write_text(f"[dropout]\n{line}\n")
    p = cisl("train", "--dropout", "d.toml", "-o", "model", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "d.toml: [dropout]" if "q =" in line else "d.toml: unknown", *words)
    assert not (tmp_path / "model").exists()


def test_radio_topology_for_another_node_count(tmp_path, good_model):
    assert cisl("compile", str(good_model), "-o", "b", "-q", cwd=tmp_path).returncode == 0
    assert cisl("build", "b", "-q", "--no-board-time", cwd=tmp_path).returncode == 0
    p = cisl("sim", "b", "--topology", "hallway16", cwd=tmp_path)
    assert_one_line_error(p, "hallway16", "4")
    p = cisl("sim", "b", "--topology", "moon", cwd=tmp_path)
    assert_one_line_error(p, "moon", "hallway16")


def test_usage_mistakes_are_one_line_too(tmp_path):
    assert_one_line_error(cisl("compile", "m.onnx", "--devcies", "4", cwd=tmp_path), "--devcies", "cisl compile --help")
    assert_one_line_error(cisl("sim", "--timeout", "soon", cwd=tmp_path), "soon")
    assert_one_line_error(cisl("frobnicate", cwd=tmp_path), "frobnicate")


def test_calibration_beyond_float32_is_one_line(tmp_path, good_model):
    # 1e300 is finite as float64 and inf once cast to float32: it used to reach the quantiser as a NaN
    # scale (ValueError traceback) instead of being refused with the NaN check
    import numpy as np

    cal = np.load(good_model.parent / "calibration.npy").astype(np.float64)
    cal[0, 0] = 1e300
    np.save(tmp_path / "cal.npy", cal)
    p = cisl("compile", str(good_model), "--calibration", "cal.npy", "-o", "build", cwd=tmp_path)
    assert_one_line_error(p, "cal.npy", "out-of-float32-range")
    assert not (tmp_path / "build").exists()


def test_complex_input_windows_are_refused(tmp_path):
    # complex is a numpy number and passed the check; quantising dropped the imaginary part without a word
    import numpy as np

    np.save(tmp_path / "x.npy", (np.ones((2, 72)) + 1j).astype(np.complex64))
    p = cisl("sim", "build", "--inputs", "x.npy", cwd=tmp_path)
    assert_one_line_error(p, "x.npy", "real numbers")


@pytest.mark.parametrize("section,line,words", [
    ("model", "layers = 1000000000000", ("layers = 1000000000000", "GiB")),  # used to hang listing the shapes
    ("data", "synthetic_length = 1000000000000", ("synthetic_length", "GiB")),  # numpy's MemoryError traceback
    ("data", "synthetic_channels = 1000000000000", ("synthetic_channels", "GiB")),  # used to hang
    ("train", "threads = 1000000000000", ("threads must be in [1, 1024]",)),  # torch's OverflowError traceback
])
def test_a_config_too_large_for_this_machine_is_one_line(tmp_path, section, line, words):
    # found before torch is imported: a mistake in the config costs no seconds of imports
    (tmp_path / "cfg.toml").write_text(f"[{section}]\n{line}\n")
    p = cisl("train", "cfg.toml", "-o", "model", cwd=tmp_path, timeout=60, env=without_torch(tmp_path))
    assert_one_line_error(p, *words)
    assert not (tmp_path / "model").exists()


def test_a_damaged_build_summary_is_one_line(tmp_path, good_model):
    # build.json's nodes were read with int(n["node"]): "x" or nodes = 1 were tracebacks
    import json

    assert cisl("compile", str(good_model), "-o", "b", "-q", cwd=tmp_path).returncode == 0
    assert cisl("build", "b", "-q", "--no-board-time", cwd=tmp_path).returncode == 0
    good = json.loads((tmp_path / "b" / "build.json").read_text())
    for nodes in (1, [{"node": "x", "sha256": "0"}]):
        (tmp_path / "b" / "build.json").write_text(json.dumps({**good, "nodes": nodes}))
        p = cisl("sim", "b", cwd=tmp_path)
        assert_one_line_error(p, "build.json", "cisl build b")


def test_a_csv_value_beyond_float32_is_one_line(tmp_path, good_model):
    # 1e39 passed the finite check as float64 and became inf in the float32 series: cisl eval printed
    # "MSE nan" and exited 0, cisl train blamed the learning rate ("training diverged")
    rows = [f"2020-01-01 {i:05d},{(i % 7) / 3:.3f},{(i % 5) / 2:.3f}" for i in range(400)]
    rows[50] = rows[50].rsplit(",", 1)[0] + ",1e39"
    (tmp_path / "d.csv").write_text("date,a,b\n" + "\n".join(rows) + "\n")
    p = cisl("eval", str(good_model), "--data", "d.csv", cwd=tmp_path)
    assert_one_line_error(p, "d.csv", "column 'b'", "out-of-float32-range", "data row 51")


def test_a_full_disk_names_the_file_that_could_not_be_written(tmp_path, good_model):
    """With the disk full (here the file size limit, `ulimit -f`), `cisl build` named the cache object it
    was copying *from*, pointing the user at the wrong disk, and compile named "a file" (audit M)."""
    import json
    import resource
    import shutil
    import sys

    b = tmp_path / "B"
    assert cisl("compile", str(good_model), "-q", "-o", str(b), cwd=tmp_path).returncode == 0
    assert cisl("build", str(b), "-q", "--no-board-time", cwd=tmp_path).returncode == 0  # the objects are cached
    assert json.loads((b / "build.json").read_text())["nodes"]
    shutil.rmtree(b / "_obj")  # the next build copies them from the cache

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))

    p = subprocess.run([sys.executable, "-m", "codegen.cli", "build", str(b), "-q", "--no-board-time"], cwd=tmp_path,
                       capture_output=True, text=True, preexec_fn=small_files, timeout=600)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "free some space" in p.stderr and str(b) in p.stderr and "/.cache/" not in p.stderr, p.stderr


def test_a_seed_beyond_64_bits_is_one_line(tmp_path):
    """torch.manual_seed takes 64 bits: --seed 2**64 (or [train] seed) ended in its traceback, exit 1."""
    big = str(2 ** 64)
    p = cisl("train", "--seed", big, "-o", "model", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "--seed", big, "18446744073709551615")
    (tmp_path / "cfg.toml").write_text(f"[train]\nseed = {big}\n")
    p = cisl("train", "cfg.toml", "-o", "model", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "cfg.toml", "[train] seed must be in [0, 2**64 - 1]", big)
    assert not (tmp_path / "model").exists()


def test_infeasible_elastic_modes_are_one_line_before_any_training(tmp_path):
    """[elastic] core_macs that no mode can meet was found only after every dense epoch (audit P F10):
    it depends on the model and the split alone, so it is refused before torch is imported."""
    from models import tiny_train_config

    (tmp_path / "el.toml").write_text(tiny_train_config(2, elastic="modes = 2\ncore_macs = 0.05"))
    p = cisl("train", "el.toml", "-o", "deep/a/b", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "el.toml: [elastic] the smallest possible mode", "core_macs = 0.05")
    assert not (tmp_path / "deep").exists()


def test_prune_at_keep_1_is_refused_as_sweep_refuses_it(tmp_path):
    """`cisl train --prune somegather` without a keep below 1 printed "keep 1 requested, realised 1.0000"
    and pruned nothing; `cisl sweep` refuses the same (audit P D5)."""
    p = cisl("train", "--prune", "somegather", "-o", "m", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "--prune somegather prunes nothing at keep 1", "no --keep", "add --keep below 1")
    p = cisl("train", "--prune", "normal", "--keep", "1", "-o", "m", cwd=tmp_path, env=without_torch(tmp_path))
    assert_one_line_error(p, "--prune normal prunes nothing at keep 1", "--keep 1)")
    assert not (tmp_path / "m").exists()
    # a config's own [prune] at keep 1 is not refused (a sweep's base config may hold it) but noted, before torch
    (tmp_path / "k1.toml").write_text('[prune]\nmethod = "somegather"\nkeep = 1.0\n')
    p = cisl("train", "k1.toml", "-o", "m", cwd=tmp_path, env=without_torch(tmp_path))
    assert 'note: [prune] method = "somegather" with keep = 1 prunes nothing' in p.stderr, p.stderr
    assert not (tmp_path / "m").exists()
