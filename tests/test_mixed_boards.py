"""A testbed that mixes boards: every node planned against its own board's budgets, built for its own
board from one plan, and on the virtual testbed modelled as the board it stands in for.

What users rely on: `cisl compile --testbed T` reads each [[node]]'s board (virtual nodes: `models`);
compile.json and plan.json say which node is which; a node that does not fit *its* board is
named; `cisl build` links every node with its own board's memory map (one build.json); the
virtual testbed runs the mixed plan bit-exact with each node's board time from its own board's
cycle model; mistakes in the testbed file are one line and exit code 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clirun import cisl, ok
from codegen.compile import CompileOptions, compile_model
from codegen.errors import UserError
from codegen.testbed.config import load_testbed, node_boards, parse_board_list
from models import config_for_tokens, make_model_dir

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None


def _testbed(path: Path, boards: list[str], virtual: bool = True) -> Path:
    rows = []
    for k, b in enumerate(boards):
        if virtual:
            rows.append(f'[[node]]\nid = {k}\nboard = "sim"\nrunner = "sim"\nport = "n{k}.tty"\nmodels = "{b}"\n')
        else:
            rows.append(f'[[node]]\nid = {k}\nboard = "{b}"\nrunner = "pyocd"\nprobe = "P{k}"\nport = "/dev/ttyACM{k}"\n')
    path.write_text("\n".join(rows))
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed")
    # few tokens: the mixed testbed test runs every node on its board's cycle model
    return tmp, make_model_dir(tmp / "model", config_for_tokens(8, 64), 4, 1.0, seed=3)


@pytest.mark.unit
def test_board_lists_and_testbed_node_boards(tmp_path):
    assert parse_board_list("nrf52840dk*2,nrf52833dk") == ["nrf52840dk", "nrf52840dk", "nrf52833dk"]
    for bad in ("nrf52840dk*0", "nrf5283dk", "sim*2"):
        with pytest.raises(UserError):
            parse_board_list(bad)
    tb = load_testbed(_testbed(tmp_path / "tb.toml", ["nrf52840dk", "nrf52833dk", "nrf52833dk"]))
    assert node_boards(tb) == ["nrf52840dk", "nrf52833dk", "nrf52833dk"]
    assert node_boards(tb, 2) == ["nrf52840dk", "nrf52833dk"]  # a plan for fewer nodes uses the first ids
    with pytest.raises(UserError, match="no node 3"):
        node_boards(tb, 4)


@pytest.mark.unit
def test_compile_plans_every_node_against_its_own_board(small, tmp_path):
    """A model whose nodes fit an nRF52840 but not an nRF52833: only the nRF52833 node is named."""
    tmp, _ = small
    big = make_model_dir(tmp_path / "big", config_for_tokens(16, 320), 2, 1.0, seed=5)
    tb = _testbed(tmp_path / "tb.toml", ["nrf52840dk", "nrf52833dk"])
    s = compile_model(big, tmp_path / "b", CompileOptions(board="sim", testbed=tb))
    assert [n["board"] for n in s["nodes"]] == ["nrf52840dk", "nrf52833dk"]
    assert s["nodes"][0]["estimated_flash"] < 1 << 20 < 2 * s["nodes"][1]["estimated_flash"]
    assert s["warnings"] == [w for w in s["warnings"] if "node 1" in w and "nrf52833dk" in w] and s["warnings"]
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert plan["board"] == "sim" and plan["node_boards"] == ["nrf52840dk", "nrf52833dk"]
    # the same model on an all-nRF52840 testbed fits: the boards, not the model, decide
    tb2 = _testbed(tmp_path / "tb2.toml", ["nrf52840dk", "nrf52840dk"])
    assert "warnings" not in compile_model(big, tmp_path / "b2", CompileOptions(board="sim", testbed=tb2))


@pytest.mark.faults
def test_testbed_mistakes_are_one_line(small, tmp_path):
    tmp, model = small
    cases = {
        "models of a board node": ('[[node]]\nid = 0\nboard = "nrf52840dk"\nrunner = "pyocd"\nprobe = "1"\n'
                                   'port = "/dev/ttyACM0"\nmodels = "nrf52833dk"\n', "'models' is for virtual nodes"),
        "unknown models": ('[[node]]\nid = 0\nboard = "sim"\nrunner = "sim"\nport = "a"\nmodels = "nrf52832dk"\n',
                           "models 'nrf52832dk' is unknown"),
        "a gap in the ids": ("".join(f'[[node]]\nid = {k}\nboard = "sim"\nrunner = "sim"\nport = "p{k}"\n'
                                     for k in (0, 1, 2, 4)), "has no node 3"),
        "energy budget": ('[[node]]\nid = 0\nboard = "sim"\nrunner = "sim"\nport = "a"\nenergy_uj = -1\n',
                          "energy_uj must be a positive, finite number"),
    }
    for name, (text, msg) in cases.items():
        f = tmp_path / f"{name.replace(' ', '_')}.toml"
        f.write_text(text)
        p = cisl("compile", str(model), "-o", str(tmp_path / "out"), "--testbed", str(f), "-q",
                 cwd=tmp_path)
        assert p.returncode == 2, (name, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, (name, p.stderr)
        assert not (tmp_path / "out").exists(), name
    tb = _testbed(tmp_path / "hw.toml", ["nrf52840dk"] * 4, virtual=False)
    p = cisl("compile", str(model), "-o", str(tmp_path / "out"), "--testbed", str(tb), "-b",
             "nrf52833dk", "-q", cwd=tmp_path)
    assert p.returncode == 2 and "is none of the testbed's boards" in p.stderr and len(p.stderr.splitlines()) == 1


@pytest.mark.arm
@pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")
def test_build_links_every_node_for_its_own_board(small, tmp_path):
    tmp, model = small
    tb = _testbed(tmp_path / "hw.toml", ["nrf52840dk", "nrf52833dk", "nrf52840dk", "nrf52833dk"], virtual=False)
    out = tmp_path / "b"
    p = ok(cisl("compile", str(model), "-o", str(out), "--testbed", str(tb), "-q", cwd=tmp_path))
    assert "nodes of nrf52833dk, nrf52840dk" in p.stdout
    ok(cisl("build", str(out), "-q", cwd=tmp_path))
    s = json.loads((out / "build.json").read_text())
    assert s["boards"] == {"nrf52833dk": [1, 3], "nrf52840dk": [0, 2]}
    assert [n["image"] for n in s["nodes"]] == [f"node_{k:02d}/firmware.elf" for k in range(4)]
    for k, (flash, ram) in enumerate([(1 << 20, 256 << 10), (512 << 10, 128 << 10)] * 2):
        size = json.loads((out / f"node_{k:02d}" / "size.json").read_text())
        assert (size["flash_budget"], size["ram_budget"]) == (flash, ram), (k, size)
        name = b"nrf52833dk\0" if k % 2 else b"nrf52840dk\0"
        assert name in (out / f"node_{k:02d}" / "firmware.elf").read_bytes()
    # one node alone for the wrong board is refused with the fix
    p = cisl("build", str(out), "-b", "nrf52840dk", "--node", "1", cwd=tmp_path)
    assert p.returncode == 2 and "node 1 is a nrf52833dk in this plan" in p.stderr
    # the estimate names both boards' images (it said "nrf52840dk images", the plan's board)
    p = ok(cisl("estimate", str(out), cwd=tmp_path, timeout=600))
    assert "(4 nodes, nrf52833dk+nrf52840dk images, modelled as nrf52833dk+nrf52840dk" in p.stdout, p.stdout


@pytest.mark.sim
@pytest.mark.arm
@pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")
def test_a_mixed_virtual_testbed_runs_bit_exact_with_each_boards_time(small, tmp_path):
    tmp, model = small
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "4", "--models", "nrf52840dk*2,nrf52833dk*2", "-o", str(tb), cwd=tmp_path))
    out = tmp_path / "b"
    ok(cisl("compile", str(model), "-o", str(out), "--testbed", str(tb), "-q", cwd=tmp_path))
    p = ok(cisl("build", str(out), cwd=tmp_path, timeout=600))
    assert "nRF52833, nRF52840 cycle model (bit-exact)" in p.stdout + p.stderr
    p = ok(cisl("sim", str(out), cwd=tmp_path, timeout=600))
    assert "bit-exact with the int8 reference: yes" in p.stdout
    ok(cisl("estimate", str(out), "-o", str(tmp_path / "est.json"), cwd=tmp_path, timeout=600))
    est = json.loads((tmp_path / "est.json").read_text())
    assert [n["model_board"] for n in est["nodes"]] == ["nrf52840dk", "nrf52840dk", "nrf52833dk", "nrf52833dk"]


@pytest.mark.faults
def test_a_build_for_other_boards_is_not_flashed_onto_a_mixed_testbed(small, tmp_path):
    tmp, model = small
    tb = tmp_path / "tb.toml"
    ok(cisl("testbed", "sim", "--nodes", "4", "--models", "nrf52840dk*2,nrf52833dk*2", "-o", str(tb), cwd=tmp_path))
    out = tmp_path / "b"
    ok(cisl("compile", str(model), "-o", str(out), "-q", cwd=tmp_path))  # planned for four nRF52840s
    ok(cisl("build", str(out), "--no-board-time", "-q", cwd=tmp_path, timeout=600))
    p = cisl("flash", str(out), "--testbed", str(tb), cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "virtual node 2 stands in for nrf52833dk" in p.stderr and f"--testbed {tb}" in p.stderr


@pytest.mark.faults
@pytest.mark.arm
@pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")
def test_a_virtual_node_too_large_for_the_board_it_stands_in_for_fails_the_build_in_one_line(tmp_path):
    """Its qemu-m4 image was size-checked against QEMU's memory only, then the board-time step ended in
    the cycle model's ValueError traceback (a segment outside the nRF52833's flash)."""
    big = make_model_dir(tmp_path / "big", config_for_tokens(16, 320), 2, 1.0, seed=5)
    tb = _testbed(tmp_path / "tb.toml", ["nrf52840dk", "nrf52833dk"])
    ok(cisl("compile", str(big), "-o", "b", "--testbed", str(tb), "-q", cwd=tmp_path))
    p = cisl("build", "b", "-q", cwd=tmp_path, timeout=600)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(lines) == 1, p.stderr
    assert lines[0].startswith("FAILED: node 1 does not fit nrf52833dk, the board it stands in for: FLASH overflows"), p.stderr
    # the failed build leaves no summary that `cisl sim` or `cisl flash` would take as a good build (they ran
    # the node that cannot exist, in host time, and said nothing)
    assert not (tmp_path / "b" / "build.json").exists()
    p = cisl("sim", "b", "-n", "1", cwd=tmp_path, timeout=600)
    assert p.returncode == 2 and "build.json: missing (the last `cisl build` failed" in p.stderr, p.stderr
    # --no-board-time does not skip the check: measured on the plan's ARM images where they are current...
    p = cisl("build", "b", "-q", "--no-board-time", cwd=tmp_path, timeout=600)
    assert p.returncode == 1 and "FAILED: node 1 does not fit nrf52833dk, the board it stands in for: FLASH " \
        "overflows" in p.stderr and not (tmp_path / "b" / "build.json").exists(), p.stderr
    # ... else (none built: a fresh compile) by the planner's estimate, which `cisl compile` warned with
    ok(cisl("compile", str(big), "-o", "c", "--testbed", str(tb), "-q", cwd=tmp_path))
    p = cisl("build", "c", "-q", "--no-board-time", cwd=tmp_path, timeout=600)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("FAILED: node 1 does not fit nrf52833dk, the board it stands in for: flash estimated "
                               "at "), lines
    assert not (tmp_path / "c" / "build.json").exists()
