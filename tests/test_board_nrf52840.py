"""The nRF52840 board's own register definitions agree with the SVD file pyocd ships.

Every peripheral base address, register offset (and array stride), field position/width and
enumerated value in boards/nrf52840dk/nrf52840_regs.h is checked against nrf52840.svd from the
installed pyocd package (read in place; nothing of it is in the repository). The board's C code may
touch peripherals only through those definitions.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from codegen.svd import SUPPLEMENT, check_header, parse_svd, pyocd_svd_text, supplement

pytestmark = pytest.mark.unit

BOARD = Path(__file__).resolve().parents[1] / "boards" / "nrf52840dk"
HEADER = BOARD / "nrf52840_regs.h"


@pytest.fixture(scope="module")
def svd():
    svd = parse_svd(pyocd_svd_text("nrf52840"))
    assert supplement(svd) == []
    return svd


def test_the_supplement_adds_only_what_the_svd_lacks():
    """The rev-3 access port protection facts (docs/design/approtect.md) are not in pyocd's 2018 SVD; the
    supplement adds them and nothing the SVD already states differently (UICR.APPROTECT's offset and
    PALL field come from the SVD and must agree)."""
    raw = parse_svd(pyocd_svd_text("nrf52840"))
    assert "APPROTECT" not in raw and "HWDISABLED" not in raw["UICR"].registers["APPROTECT"].fields["PALL"].values
    assert raw["UICR"].registers["APPROTECT"].offset == 0x208
    assert (raw["UICR"].registers["APPROTECT"].fields["PALL"].pos, raw["UICR"].registers["APPROTECT"].fields["PALL"].width) == (0, 8)
    assert raw["UICR"].registers["APPROTECT"].fields["PALL"].values == {"ENABLED": 0x00, "DISABLED": 0xFF}
    assert raw["FICR"].registers["INFO_VARIANT"].offset == 0x104
    assert raw["CLOCK"].base == raw["POWER"].base == SUPPLEMENT["APPROTECT"][0] == 0x40000000
    wrong = {"UICR": (0x10001000, {"APPROTECT": (0x20C, {"PALL": (0, 4, {"ENABLED": 0x01})})})}
    problems = supplement(parse_svd(pyocd_svd_text("nrf52840")), wrong)
    assert len(problems) == 3 and all("SVD says" in p for p in problems)


def test_the_approtect_definitions_are_checked(svd):
    r = check_header(HEADER.read_text(), svd)
    for m in ("NRF_BASE_APPROTECT", "NRF_REG_APPROTECT_DISABLE", "NRF_VAL_APPROTECT_DISABLE_DISABLE_SWDISABLE",
              "NRF_REG_UICR_APPROTECT", "NRF_VAL_UICR_APPROTECT_PALL_HWDISABLED", "NRF_VAL_UICR_APPROTECT_PALL_DISABLED",
              "NRF_REG_FICR_INFO_VARIANT", "NRF_REG_NVMC_CONFIG", "NRF_VAL_NVMC_CONFIG_WEN_WEN"):
        assert m in r.checked, m
    bad = HEADER.read_text().replace("#define NRF_REG_APPROTECT_DISABLE 0x558u", "#define NRF_REG_APPROTECT_DISABLE 0x550u")
    bad = bad.replace("NRF_VAL_UICR_APPROTECT_PALL_HWDISABLED 0x5Au", "NRF_VAL_UICR_APPROTECT_PALL_HWDISABLED 0xA5u")
    assert len(check_header(bad, svd).problems) == 2


def test_every_definition_matches_the_svd(svd):
    r = check_header(HEADER.read_text(), svd)
    assert r.problems == []
    kinds = {m.split("_")[1] for m in r.checked}
    assert kinds == {"BASE", "REG", "FLD", "VAL"}
    assert len(r.checked) > 140


def test_every_register_the_board_uses_is_defined_and_checked(svd):
    """The C sources name registers only through NRF_REG_/NRF_FLD_/NRF_VAL_/NRF_BASE_ macros that
    the header defines (and the first test checks), and contain no raw peripheral addresses."""
    defined = set(check_header(HEADER.read_text(), svd).checked)
    for src in ("board.c", "radio.c", "startup.c"):
        text = (BOARD / src).read_text()
        used = {m for m in re.findall(r"\bNRF_(?:BASE|REG|FLD|VAL)_\w+", text) if not m.endswith("_")}
        # the accessor macros paste the register name: RADIO(MODE) -> NRF_REG_RADIO_MODE
        for periph, layout in (("RADIO", "RADIO"), ("TIMER0", "TIMER"), ("TIMER1", "TIMER"), ("UARTE", "UARTE"),
                               ("CLOCK", "CLOCK"), ("PPI", "PPI"), ("GPIO", "GPIO")):
            used |= {f"NRF_REG_{layout}_{reg}" for reg in re.findall(rf"\b{periph}\((\w+)", text) if reg != "reg"}
        assert used or src == "startup.c", src
        assert used <= defined, (src, sorted(used - defined))
        assert not re.search(r"0x[45]00[0-9A-Fa-f]{5}", text), f"{src}: raw peripheral address"


def test_a_wrong_definition_is_caught(svd):
    bad = HEADER.read_text().replace("#define NRF_REG_RADIO_PCNF0 0x514u", "#define NRF_REG_RADIO_PCNF0 0x518u")
    bad = bad.replace("NRF_FLD_RADIO_PCNF1_BALEN NRF_FIELD(16, 3)", "NRF_FLD_RADIO_PCNF1_BALEN NRF_FIELD(16, 2)")
    bad = bad.replace("#define NRF_REG_TIMER_CC(n) (0x540u + 4u * (n))", "#define NRF_REG_TIMER_CC(n) (0x540u + 8u * (n))")
    problems = check_header(bad, svd).problems
    assert len(problems) == 3
    assert any("PCNF0" in p for p in problems) and any("BALEN" in p for p in problems)
    assert any("TIMER_CC" in p for p in problems)


def test_board_facts_match_the_linker_script():
    facts = tomllib.loads((BOARD / "board.toml").read_text())
    ld = (BOARD / "nrf52840.ld").read_text()
    assert "ORIGIN = 0x00000000, LENGTH = 1024K" in ld and facts["board"]["flash_bytes"] == 1024 * 1024
    assert "ORIGIN = 0x20000000, LENGTH = 256K" in ld and facts["board"]["ram_bytes"] == 256 * 1024
    assert facts["uart"]["tx_pin"] == 6 and facts["uart"]["baud"] == 115200
    assert facts["build"]["cc"] == "arm-none-eabi-gcc"
    assert {"-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-mthumb"} <= set(facts["build"]["cpu_flags"])


def test_the_qemu_board_shares_flags_and_budgets():
    nrf = tomllib.loads((BOARD / "board.toml").read_text())
    qemu = tomllib.loads((BOARD.parent / "qemu-m4" / "board.toml").read_text())
    for key in ("cpu_flags", "cflags", "kernel_cflags", "upstream_cflags", "stack_bytes"):
        assert qemu["build"][key] == nrf["build"][key], key
    assert qemu["board"]["flash_bytes"] == nrf["board"]["flash_bytes"]
    assert qemu["board"]["ram_bytes"] == nrf["board"]["ram_bytes"]
    assert "nrf52840dk" in qemu["board"]["builds_plans_for"]
