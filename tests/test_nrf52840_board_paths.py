"""Single functions of the built nrf52840dk image (boards/nrf52840dk: radio.c's HAL, startup.c's fault
handler), called on the cycle model's emulator (codegen/timing/engine.py) with the peripherals as
plain memory, so a test sets the registers a case needs — cases that a network run reaches only by
chance. Register addresses come from pyocd's nrf52840.svd (codegen/timing/nrf52840_soc.load_regs),
not from the board's header. Audit U, findings 3 and 6.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from models import config_for_tokens, make_model_dir

from codegen.boards import load_board
from codegen.build import build
from codegen.compile import CompileOptions, compile_model

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None
pytestmark = [pytest.mark.arm, pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc not installed")]

CTX = 0x20030000              # a radio_ctx of the test's own, far above the image's RAM
BUF = 0x20031000
RX_TIME = 0x20032000
RX_DEADLINE_OFFSET = 28       # radio_ctx.rx_deadline: after grid0, slot_ticks, rx_half, slot_start, first_scan, backup, late


@pytest.fixture(scope="module")
def elf(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("paths")
    model = make_model_dir(root / "m", config_for_tokens(8, 64), devices=2, keep_ratio=1.0, seed=1)
    compile_model(model, root / "build", CompileOptions(board="nrf52840dk"))
    build(root / "build")
    return root / "build" / "node_00" / "firmware.elf"


@pytest.fixture(scope="module")
def regs():
    from codegen.timing.nrf52840_soc import load_regs

    return load_regs()


def emulator(elf: Path, max_insns: int = 200_000):
    from codegen.timing.engine import Emulator, Image
    from codegen.timing.memsystem import MemoryModel

    emu = Emulator(Image.load(elf), MemoryModel.for_board(load_board("nrf52840dk")), max_insns=max_insns)
    emu.uc.mem_map(0x40000000, 0x20000)   # APB peripherals 0x40000000..0x4001FFFF (RADIO, TIMER0, PPI, ...)
    return emu


def put(emu, address: int, value: int) -> None:
    emu.write(address, (value & 0xFFFFFFFF).to_bytes(4, "little"))


def get(emu, address: int) -> int:
    return int.from_bytes(emu.read(address, 4), "little")


def receive(elf: Path, regs, address_at: int, deadline: int = 1_000_000) -> tuple[int, int]:
    """hal_receive after a packet's ADDRESS (TIMER0 CC[1], captured by PPI) at `address_at` and its
    END, CRC good, 5 bytes: (its return value, *rx_time)."""
    emu = emulator(elf)
    put(emu, CTX + RX_DEADLINE_OFFSET, deadline)
    put(emu, regs("RADIO", "EVENTS_ADDRESS"), 1)
    put(emu, regs("RADIO", "EVENTS_DISABLED"), 1)
    put(emu, regs("RADIO", "CRCSTATUS"), 1)           # CRCOk
    put(emu, regs("TIMER0", "CC", 1), address_at)
    put(emu, regs("TIMER0", "CC", 3), deadline + 5000)   # now(): the CPU got there long after the window
    pdu = emu.image.symbols["radio_pdu"]
    emu.write(pdu, bytes([0, 5, 1, 2, 3, 4, 5]))
    put(emu, RX_TIME, 0xDEADBEEF)
    put(emu, emu.image.initial_sp, RX_TIME)           # the fifth argument, on the stack
    n = emu.call("hal_receive", [CTX, BUF, 255, 0])
    got = n - (1 << 32) if n >> 31 else n
    return got, get(emu, RX_TIME)


def test_a_packet_whose_address_came_in_the_window_is_taken(elf, regs):
    n, t = receive(elf, regs, address_at=1_000_000 - 16)
    assert (n, t) == (5, 1_000_000 - 16)


def test_a_packet_whose_address_came_after_the_window_is_not_taken(elf, regs):
    """The receiver stays on while mx_prepare runs; an ADDRESS latched after the deadline (a late or
    foreign packet) must not be received nor re-anchor the grid (audit U, finding 3)."""
    n, t = receive(elf, regs, address_at=1_000_000 + 16)
    assert n == 0 and t == 0xDEADBEEF
    # across TIMER0's wrap too: the comparison is the signed 32-bit difference
    n, _ = receive(elf, regs, address_at=5, deadline=0xFFFFFFF0)
    assert n == 0
    n, _ = receive(elf, regs, address_at=0xFFFFFFE0, deadline=5)
    assert n == 5


def test_the_fault_handler_disarms_the_radio_before_it_stops(elf, regs):
    """A fault with a transmission armed (PPI channel 0: TIMER0 COMPARE[0] -> RADIO TXEN) would key
    the transmitter again at every TIMER0 wrap (268 s); the handler turns the radio's PPI channels off,
    disables the radio and stops TIMER0 (audit U, finding 6)."""
    from unicorn import UC_HOOK_MEM_WRITE

    from codegen.timing.engine import EmulationError

    emu = emulator(elf, max_insns=20_000)
    writes: list[tuple[int, int]] = []
    emu.uc.hook_add(UC_HOOK_MEM_WRITE, lambda uc, access, a, size, v, _: writes.append((a, v & 0xFFFFFFFF)),
                    begin=0x40000000, end=0x4001FFFF)
    with pytest.raises(EmulationError, match="does not terminate"):
        emu.call("cisl_fault")   # it spins for good once the radio is off
    assert (regs("PPI", "CHENCLR"), 0b111) in writes
    assert (regs("RADIO", "TASKS_DISABLE"), 1) in writes
    assert (regs("TIMER0", "TASKS_STOP"), 1) in writes
