"""The nRF52833 DK board runs the nRF52840 DK's board code with its own memory map and figures.

That is sound only if every register the shared code touches is where the nRF52833's SVD (the one
pyocd ships) says it is: the shared header is checked against nrf52833.svd here, as
tests/test_board_nrf52840.py checks it against nrf52840.svd. The images must carry the board's
name, its access port protection threshold and link into 512 KB / 128 KB.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from codegen.boards import load_board
from codegen.svd import check_header, parse_svd, pyocd_svd_text, supplement

BOARDS = Path(__file__).resolve().parents[1] / "boards"
BOARD = BOARDS / "nrf52833dk"
SHARED = BOARDS / "nrf52840dk"
HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None


@pytest.mark.unit
def test_the_shared_register_header_matches_the_nrf52833_svd():
    svd = parse_svd(pyocd_svd_text("nrf52833"))
    assert supplement(svd) == []  # the rev-2 APPROTECT facts are supplemented as for the nRF52840
    r = check_header((SHARED / "nrf52840_regs.h").read_text(), svd)
    assert r.problems == []
    assert len(r.checked) > 140 and {m.split("_")[1] for m in r.checked} == {"BASE", "REG", "FLD", "VAL"}
    # a wrong offset is caught against this SVD too (the check is not vacuous)
    bad = (SHARED / "nrf52840_regs.h").read_text().replace("#define NRF_REG_APPROTECT_DISABLE 0x558u",
                                                           "#define NRF_REG_APPROTECT_DISABLE 0x550u")
    assert len(check_header(bad, svd).problems) == 1


@pytest.mark.unit
def test_board_facts_match_its_linker_script_and_the_shared_sections():
    facts = tomllib.loads((BOARD / "board.toml").read_text())
    ld = (BOARD / "nrf52833.ld").read_text()
    assert "ORIGIN = 0x00000000, LENGTH = 512K" in ld and facts["board"]["flash_bytes"] == 512 * 1024
    assert "ORIGIN = 0x20000000, LENGTH = 128K" in ld and facts["board"]["ram_bytes"] == 128 * 1024
    # apart from the header comment and MEMORY, the script is the nRF52840's (same sections, symbols)
    def sections(text: str) -> str:
        return text[text.index("ENTRY("):]
    assert sections(ld) == sections((SHARED / "nrf52840.ld").read_text())
    assert facts["probe"]["pyocd_target"] == "nrf52833"
    assert facts["security"]["approtect_from_build"] == "B"
    nrf = tomllib.loads((SHARED / "board.toml").read_text())
    for key in ("cpu_flags", "cflags", "kernel_cflags", "upstream_cflags", "stack_bytes", "sources"):
        assert facts["build"][key] == nrf["build"][key], key
    # same CPU and code: the Mixer work and footprint facts are the nRF52840's
    assert facts["mixer"] == nrf["mixer"] and facts["footprint"] == nrf["footprint"]


@pytest.mark.unit
def test_board_loads_with_its_support_folder_and_power_figures():
    b = load_board("nrf52833dk")
    assert b.support == SHARED.resolve() and b.path.name == "nrf52833dk"
    assert (b.flash_bytes, b.ram_bytes) == (524288, 131072) and b.part == "nRF52833" and b.models is None
    from codegen.timing.energy import load_power

    p = load_power("nrf52833dk")
    q = load_power("nrf52840dk")
    assert p.regulator == q.regulator == "ldo"
    assert p.rx_ma("1M").central != q.rx_ma("1M").central  # its own figures, not a copy


@pytest.mark.arm
@pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")
def test_an_image_names_its_board_and_opens_the_debug_port_from_build_code_b(tmp_path):
    from codegen.build import build
    from codegen.compile import CompileOptions, compile_model
    from models import config_for_tokens, make_model_dir

    model = make_model_dir(tmp_path / "model", config_for_tokens(24, 32), 2, 1.0, seed=1)
    compile_model(model, tmp_path / "b", CompileOptions(board="nrf52833dk"))
    s = build(tmp_path / "b")
    assert s["board"] == "nrf52833dk" and all(n["flash"] < 512 * 1024 and n["ram"] < 128 * 1024 for n in s["nodes"])
    elf = tmp_path / "b" / "node_00" / "firmware.elf"
    assert b"nrf52833dk\0" in elf.read_bytes()
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True).stdout
    reset = dis[dis.index("<cisl_reset>:"):]
    reset = reset[:reset.index("\n\n")]
    # the build-code letter of FICR.INFO.VARIANT is compared against 'B' (0x42), not the nRF52840's 'F'
    assert re.search(r"subs\s+r\d+, #66", reset), reset
    # the standalone Makefile finds the shared sources through their own variable and links the same bytes
    mk = (tmp_path / "b" / "node_00" / "Makefile").read_text()
    assert "CISL_BOARD_SUPPORT ?=" in mk and "$(CISL_BOARD_SUPPORT)/board.c" in mk
    before = elf.read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDLIBS")}
    subprocess.run(["make", "-s", "-C", str(elf.parent)], check=True, capture_output=True, env=env)  # (yours add)
    assert elf.read_bytes() == before


@pytest.mark.unit
@pytest.mark.parametrize("board", ["nrf52840dk", "nrf52833dk"])
def test_the_approtect_threshold_is_pyocds(board):
    """pyocd's own table of the first build code with the hardened protection (read from the
    installed package) agrees with board.toml [security] approtect_from_build."""
    from pyocd.target.family.target_nRF52 import HARDENED_APPROTECT_REVISIONS

    b = load_board(board)
    partno = int(b.facts["board"]["mcu"].removeprefix("nrf"), 16)
    assert HARDENED_APPROTECT_REVISIONS[partno][0] == b.facts["security"]["approtect_from_build"]
