"""nRF52840 access port protection (docs/design/approtect.md): the built nrf52840dk image, run from its
reset handler on the cycle model's emulator (codegen/timing/engine.py) with the FICR, UICR, NVMC and
APPROTECT registers as plain memory and every write outside RAM recorded.

With board.toml ``[security] debug_port = "open"`` (the shipped default) a build code Fxx part gets
APPROTECT.DISABLE = SwDisable before anything else, and an erased UICR.APPROTECT is programmed to
HwDisabled (one word, through the NVMC) followed by a system reset; older parts and
``debug_port = "protected"`` images write none of these registers.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from models import config_for_tokens, make_model_dir

from codegen import build as build_mod
from codegen.boards import load_board
from codegen.build import build
from codegen.compile import CompileOptions, compile_model

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
pytestmark = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]

BOARD_DIR = Path(__file__).resolve().parents[1] / "boards" / "nrf52840dk"
DISABLE = 0x40000558          # APPROTECT.DISABLE
UICR_APPROTECT = 0x10001208
NVMC_CONFIG = 0x4001E504
AIRCR = 0xE000ED0C
CPACR = 0xE000ED88
ICACHECNF = 0x4001E540        # NVMC.ICACHECNF; CACHEEN (bit 0) resets to Disabled
REV3 = 0x41414630             # FICR.INFO.VARIANT "AAF0" (build code F0, revision 3)
REV2 = 0x41414530             # "AAE0"
REV1 = 0x41414430             # "AAD0"


def _build(root: Path, debug_port: str | None) -> Path:
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0, seed=1)
    compile_model(model, root / "build", CompileOptions(board="nrf52840dk"))
    with pytest.MonkeyPatch.context() as mp:
        if debug_port is not None:  # the shipped board with its [security] table edited
            real = load_board("nrf52840dk")
            facts = dict(real.facts, security={"debug_port": debug_port})
            mp.setattr(build_mod, "load_board", lambda name: dataclasses.replace(real, facts=facts))
        build(root / "build")
    return root / "build"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return {"open": _build(tmp_path_factory.mktemp("ap_open"), None),
            "protected": _build(tmp_path_factory.mktemp("ap_prot"), "protected")}


def boot(elf: Path, variant: int, uicr_approtect: int) -> tuple[list[tuple[int, int]], bool]:
    """Run cisl_reset until main (or a system reset); (writes outside RAM in order, main reached)."""
    from unicorn import UC_HOOK_MEM_WRITE

    from codegen.timing.engine import Emulator, Image
    from codegen.timing.memsystem import MemoryModel

    emu = Emulator(Image.load(elf), MemoryModel.for_board(load_board("nrf52840dk")), max_insns=2_000_000)
    for base, size in ((0x10000000, 0x2000), (0x40000000, 0x1000), (0x4001E000, 0x1000), (0xE000E000, 0x1000)):
        emu.uc.mem_map(base, size)
    emu.write(0x10000104, variant.to_bytes(4, "little"))
    emu.write(0x10001000, b"\xff" * 0x1000)
    emu.write(UICR_APPROTECT, uicr_approtect.to_bytes(4, "little"))
    emu.write(0x4001E400, (1).to_bytes(4, "little"))  # NVMC.READY = Ready
    writes: list[tuple[int, int]] = []
    reached = []

    def on_write(uc, access, address, size, value, _):
        if not 0x20000000 <= address < 0x20040000:
            writes.append((address, value & 0xFFFFFFFF))
        if address == AIRCR:
            uc.emu_stop()

    def main(e):
        reached.append(True)
        e.uc.emu_stop()

    emu.uc.hook_add(UC_HOOK_MEM_WRITE, on_write)
    emu.replace("main", main)
    emu.call("cisl_reset")
    return writes, bool(reached)


def test_the_build_passes_the_board_option(images):
    import json

    for kind, flag in (("open", "-DCISL_DEBUG_PORT_OPEN=1"), ("protected", "-DCISL_DEBUG_PORT_OPEN=0")):
        cmds = json.loads((images[kind] / "node_00" / "compile_commands.json").read_text())
        [startup] = [c for c in cmds if c["file"].endswith("startup.c")]
        assert flag in startup["arguments"], kind


def test_open_rev3_disables_the_protection_first(images):
    writes, reached = boot(images["open"] / "node_00" / "firmware.elf", REV3, 0xFFFFFF5A)
    assert reached
    assert writes[0] == (DISABLE, 0x5A)  # before the FPU is enabled: the very first store
    assert writes[1:3] == [(ICACHECNF, 1), (CPACR, 0x00F00000)]
    assert not any(a in (UICR_APPROTECT, NVMC_CONFIG, AIRCR) for a, _ in writes)


def test_open_rev3_with_erased_uicr_programs_hwdisabled_and_resets(images):
    writes, reached = boot(images["open"] / "node_01" / "firmware.elf", REV3, 0xFFFFFFFF)
    assert not reached
    assert writes == [(DISABLE, 0x5A), (NVMC_CONFIG, 1), (UICR_APPROTECT, 0xFFFFFF5A), (NVMC_CONFIG, 0),
                      (AIRCR, 0x05FA0004)]


@pytest.mark.parametrize("variant", [REV2, REV1, 0xFFFFFFFF])
def test_open_on_older_parts_writes_no_protection_register(images, variant):
    writes, reached = boot(images["open"] / "node_00" / "firmware.elf", variant, 0xFFFFFFFF)
    assert reached
    assert not any(a in (DISABLE, UICR_APPROTECT, NVMC_CONFIG, AIRCR) for a, _ in writes)
    assert writes[:2] == [(ICACHECNF, 1), (CPACR, 0x00F00000)]


@pytest.mark.parametrize("uicr", [0xFFFFFFFF, 0xFFFFFF5A])
def test_protected_never_opens_the_port(images, uicr):
    writes, reached = boot(images["protected"] / "node_00" / "firmware.elf", REV3, uicr)
    assert reached
    assert not any(a in (DISABLE, UICR_APPROTECT, NVMC_CONFIG, AIRCR) for a, _ in writes)
    assert writes[:2] == [(ICACHECNF, 1), (CPACR, 0x00F00000)]


@pytest.mark.parametrize("kind", ["open", "protected"])
def test_every_build_enables_the_instruction_cache_before_main(images, kind):
    """ICACHECNF resets to CACHEEN = Disabled; the cycle budgets assume it on (audit U, finding 1)."""
    writes, reached = boot(images[kind] / "node_00" / "firmware.elf", REV3, 0xFFFFFF5A)
    assert reached and (ICACHECNF, 1) in writes


def test_startup_without_the_option_does_not_compile(tmp_path):
    cmd = ["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-std=c99", "-Wall", "-Wextra", "-Werror",
           "-fsyntax-only", f"-I{BOARD_DIR}", str(BOARD_DIR / "startup.c")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode != 0 and "CISL_DEBUG_PORT_OPEN must be 0 or 1" in p.stderr
    for v in ("0", "1"):
        assert subprocess.run(cmd + [f"-DCISL_DEBUG_PORT_OPEN={v}"], capture_output=True).returncode == 0
