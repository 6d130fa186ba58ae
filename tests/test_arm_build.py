"""nRF52840 and emulated Cortex-M4 builds: every node of a 16-node model, warning-free, measured,
and whole node schedules on QEMU bit-exact with the int8 reference.

Needs arm-none-eabi-gcc (marker arm) and qemu-system-arm (marker qemu); `./dev.sh test` installs
both, so these skip only where the toolchain cannot be installed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

from clirun import cisl
from codegen.build import build
from codegen.compile import CompileOptions, compile_model
from codegen.elfsize import read_elf_size
from codegen.errors import CheckFailed, UserError
from codegen.plan.io import load_plan
from codegen.plan.mixer_layout import mixer_maxima
from codegen.qemu import run_qemu
from codegen.transcript import parse_sent, reference, transcript
from models import config_for_tokens, make_model_dir

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
arm = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]
qemu = [pytest.mark.qemu, pytest.mark.skipif(not (HAVE_ARM and HAVE_QEMU), reason="arm toolchain or QEMU missing")]


@pytest.fixture(scope="module")
def built16(tmp_path_factory):
    """A 16-node model (N = 42, F = 128, T = 2, keep 0.5) compiled and built for nrf52840dk."""
    if not HAVE_ARM:
        pytest.skip("arm-none-eabi-gcc not installed")
    tmp = tmp_path_factory.mktemp("arm16")
    model = make_model_dir(tmp / "model", config_for_tokens(42, 128), 16, 0.5, seed=5)
    compile_model(model, tmp / "build", CompileOptions(board="nrf52840dk"))
    summary = build(tmp / "build")
    return tmp / "build", summary


@pytest.mark.arm
def test_every_node_builds_without_warnings_and_fits(built16):
    b, summary = built16
    assert summary["board"] == "nrf52840dk" and len(summary["nodes"]) == 16
    logs = [b / "_obj" / "nrf52840dk" / "build.log"] + [b / f"node_{k:02d}" / "build.log" for k in range(16)]
    for log in logs:
        assert "warning" not in log.read_text().lower(), log
    for k in range(16):
        nd = b / f"node_{k:02d}"
        assert (nd / "firmware.elf").is_file() and (nd / "firmware.hex").is_file()
        hexlines = (nd / "firmware.hex").read_text().splitlines()
        assert hexlines[0].startswith(":") and hexlines[-1] == ":00000001FF"
        size = json.loads((nd / "size.json").read_text())
        e = read_elf_size(nd / "firmware.elf")
        assert size["elf"]["flash"] == e.flash and size["elf"]["ram"] == e.ram
        assert e.flash <= 1024 * 1024 and e.ram <= 256 * 1024
        # the linker script's size symbols agree with the section sums
        assert e.symbols["__cisl_flash_used"] == e.flash - e.flash_by_section.get(".ARM.exidx", 0) or \
            e.symbols["__cisl_flash_used"] == e.flash
        assert e.symbols["__cisl_ram_used"] == e.ram


@pytest.mark.arm
def test_planner_estimate_within_two_percent_of_every_elf(built16):
    b, _ = built16
    for k in range(16):
        size = json.loads((b / f"node_{k:02d}" / "size.json").read_text())
        assert abs(size["error"]["flash"]) < 0.02, (k, size["error"])
        assert abs(size["error"]["ram"]) < 0.02, (k, size["error"])


@pytest.mark.arm
def test_mixer_is_sized_to_the_plan(built16):
    b, summary = built16
    plan = load_plan(b)
    m = mixer_maxima(plan)
    rounds = [r for ex in plan.meta["mixer"]["exchanges"] for r in ex]
    assert m["MX_MAX_NODES"] == 16 and m["MX_MAX_G"] == max(r["generation"] for r in rounds) < 256
    log = (b / "_obj" / "nrf52840dk" / "build.log").read_text()
    assert f"-DMX_MAX_G={m['MX_MAX_G']}u" in log and f"-DMX_POOL_WORDS={m['MX_POOL_WORDS']}u" in log
    size = json.loads((b / "node_00" / "size.json").read_text())
    assert size["estimate"]["ram_parts"]["mixer"] < 20000  # the defaults (32, 256, 248) would take 74,212 B


@pytest.mark.arm
def test_a_node_that_does_not_fit_fails_with_one_line(tmp_path):
    if not HAVE_ARM:
        pytest.skip("arm-none-eabi-gcc not installed")
    # one node, N = 384 tokens: two 384 x 384 attention-score buffers alone exceed 256 KB of RAM
    model = make_model_dir(tmp_path / "m", config_for_tokens(384, 32, heads=2, layers=1), 1, 1.0, seed=1,
                           calibration=2, tests=1)
    compile_model(model, tmp_path / "b", CompileOptions(board="nrf52840dk", max_calibration=2))
    with pytest.raises(CheckFailed) as e:
        build(tmp_path / "b")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("node 0 does not fit nrf52840dk: RAM overflows by ")
    over = int(msg.split("overflows by ")[1].split()[0])
    size = json.loads((tmp_path / "b" / "node_00" / "size.json").read_text())
    assert size["overflow"]["RAM"] == over
    assert abs(size["estimate"]["ram"] - 256 * 1024 - over) < 0.02 * size["estimate"]["ram"]
    # the estimate names the failed build, not "not built; run cisl build" (which fails the same way)
    p = cisl("estimate", str(tmp_path / "b"), cwd=tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "the last `cisl build" in lines[0] and "failed" in lines[0] and "FAILED line" in lines[0], lines[0]


@pytest.mark.arm
def test_unknown_plan_board_is_refused(built16, tmp_path):
    b, _ = built16
    with pytest.raises(UserError):
        build(b, "sim")


# ---------------------------------------------------------------------------------------------- QEMU

@pytest.fixture(scope="module")
def qemu_built(built16):
    if not HAVE_QEMU:
        pytest.skip("qemu-system-arm not installed")
    b, _ = built16
    summary = build(b, "qemu-m4", nodes=[0, 7, 15])
    return b, summary


@pytest.mark.qemu
def test_two_nodes_whole_schedules_bit_exact_on_qemu(qemu_built):
    b, summary = qemu_built
    assert summary["board"] == "qemu-m4" and summary["plan_board"] == "nrf52840dk"
    assert (b / "node_07" / "qemu-m4" / "firmware.elf").is_file() and (b / "build-qemu-m4.json").is_file()
    x = np.load(b / "inputs.npy")[:2]
    results = run_qemu(b, [0, 7], x)
    plan = load_plan(b)
    for r in results:
        assert r.exit_code == 0, r.stdout[-2000:]
        assert r.bit_exact, r.first_difference
        # every exchange of both inferences was compared: 4 per layer + the head
        assert r.messages_checked == 2 * (4 * plan.cfg.layers + 1)
        blocks = r.blocks()
        assert [b_["block"] for b_ in blocks[:3]] == ["embed", "attn", "mlp"]
        assert all(int(b_["cycles"]) > 0 for b_ in blocks)
        assert r.stack_used is not None and 0 < r.stack_used < 8192
    # the sink printed the forecast (compared inside run_qemu); the serial contract holds
    assert any(rec.event == "output" for rec in results[0].records)
    assert any(rec.event == "end" and rec.fields["inferences"] == 2 for rec in results[1].records)


@pytest.mark.qemu
def test_qemu_under_message_loss_and_instruction_counts_are_deterministic(qemu_built):
    b, _ = qemu_built
    plan = load_plan(b)
    x = np.load(b / "inputs.npy")[:2]
    rng = np.random.default_rng(3)
    lost = {sg.sg: rng.random((len(x), plan.devices, plan.devices)) < 0.3 for sg in plan.sgs}
    for sg in lost.values():
        for k in range(plan.devices):
            sg[:, k, k] = False
    first = run_qemu(b, [15, 0], x, lost)
    again = run_qemu(b, [15], x, lost)
    for r in first:
        assert r.ok, r.first_difference
    assert [bl["cycles"] for bl in first[0].blocks()] == [bl["cycles"] for bl in again[0].blocks()]


@pytest.mark.qemu
def test_a_wrong_transcript_or_wrong_output_is_named(qemu_built, tmp_path):
    b, _ = qemu_built
    plan = load_plan(b)
    xq = plan.quantize_input(np.load(b / "inputs.npy")[:1].astype(np.float64))
    ref = reference(plan, xq)
    t = transcript(plan, 7, xq, ref)
    assert t.startswith(b"CISLQT01") and struct.unpack_from("<I", t, 8)[0] == 7
    # a reference whose node-7 message differs: the comparison names inference, node and exchange
    bad = reference(plan, xq)
    sg0 = plan.sgs[0].sg
    bad.payloads[(sg0, 7)] = bad.payloads[(sg0, 7)].copy()
    bad.payloads[(sg0, 7)][0, 3] ^= 1
    from codegen.qemu import run_node

    r = run_node(b, plan, 7, xq, bad)
    assert not r.bit_exact and r.first_difference.startswith(f"inference 0, node 7, {plan.sgs[0].name}: byte 3")
    assert parse_sent(b"") == []


@pytest.mark.upstream
@pytest.mark.qemu
def test_upstream_cmsis_nn_dsp_build_is_bit_exact_on_qemu(tmp_path):
    if not (HAVE_ARM and HAVE_QEMU and os.environ.get("CMSIS_NN_ROOT")):
        pytest.skip("needs CMSIS_NN_ROOT, the arm toolchain and QEMU")
    model = make_model_dir(tmp_path / "m", config_for_tokens(8, 64), 4, 1.0, seed=9)
    compile_model(model, tmp_path / "b", CompileOptions(board="qemu-m4"))
    s = build(tmp_path / "b")
    assert s["kernels"] == "cmsis-nn"
    for r in run_qemu(tmp_path / "b", [0, 3]):
        assert r.ok, r.first_difference
