"""Run an ARM image's code on an emulated Cortex-M4 and count its cycles (unicorn + capstone).

The image is the node's real ELF, as `cisl build` linked it for nrf52840dk or qemu-m4: its
segments are loaded at their run addresses (.data already initialised, .bss zeroed) and one of
its functions is called with a fresh stack. Execution is unicorn's (QEMU's ARM front end, M
profile); the cycles are cisl's: every translation block the emulator runs is decoded once with
capstone and costed from the Cortex-M4 TRM (:mod:`codegen.timing.m4cost`); taken branches add
their refill; the memory model (:mod:`codegen.timing.memsystem`) adds flash wait states for data
reads from flash and for instruction-cache misses.

The board's interface functions (``cisl_board_*``, ``cisl_transport_round``) are not executed:
the caller replaces them by Python (*high-level emulation*), exactly at the boundary where a real
board's peripherals start. Code running inside a replaced function's callbacks (e.g. the
somegather receive callback called from ``cisl_transport_round``) is counted separately as
*communication* work, the way the firmware's own block timer takes communication out.

Cycle counts are attributed to *regions* the caller names: :attr:`Emulator.region` can be set
from a hook, and :meth:`Emulator.set_region_map` attributes code addresses to regions (the
generated schedule's ops, found from the DWARF line table).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from unicorn import UC_ARCH_ARM, UC_HOOK_BLOCK, UC_HOOK_MEM_READ, UC_MODE_MCLASS, UC_MODE_THUMB, Uc, UcError
from unicorn import arm_const as A

from .. import interrupts
from ..elfsize import STT_FUNC, STT_OBJECT
from ..elfsize import symbols as elf_symbols
from ..errors import UserError
from .m4cost import BR_ALWAYS, BR_COND, Block, Decoder
from .memsystem import MemoryModel

# a small region for the return address of emulated calls (never inside an image)
TRAMPOLINE = 0x3FFF_F000
TRAMPOLINE_SIZE = 0x1000
EXIT = TRAMPOLINE            # a call's final return lands here
CALLBACK_RETURN = TRAMPOLINE + 0x10
# zero-wait memory outside the part's map where replaced functions put data for the image (e.g.
# the messages a transport hands to the receive callback)
SCRATCH = 0x3FF0_0000
SCRATCH_SIZE = 0x000C_0000


class EmulationError(RuntimeError):
    """The image did something the model cannot follow (unmapped access, fault, runaway)."""


@dataclass
class Counts:
    """Cycles of one region: static instruction cost plus the dynamic penalties, low/central/high."""

    insns: int = 0
    low: float = 0.0
    central: float = 0.0
    high: float = 0.0
    taken_branches: int = 0
    flash_reads: int = 0          # data reads from flash (weights, constants, literal pools)
    flash_line_changes: int = 0   # of those, reads outside the line the previous flash read touched
    icache_misses: int = 0

    def add(self, other: "Counts") -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def cycles(self, memory: MemoryModel) -> tuple[float, float, float]:
        """(low, central, high) cycles including the memory system's penalties."""
        lo, ce, hi = memory.penalties(self.flash_reads, self.flash_line_changes, self.icache_misses)
        return self.low + lo, self.central + ce, self.high + hi

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Image:
    path: Path
    symbols: dict[str, int]          # function/object name -> address (thumb bit cleared)
    sizes: dict[str, int]
    segments: list[tuple[int, bytes, int]]  # (vaddr, file bytes, memsz)
    initial_sp: int

    @staticmethod
    def load(path: Path) -> "Image":
        try:
            return Image._load(Path(path))
        except (ELFError, ValueError, EOFError) as e:  # an empty, cut-short or foreign file
            raise UserError(f"{path}: not a usable ARM image ({e}); run `cisl build` again") from None

    @staticmethod
    def _load(path: Path) -> "Image":
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf["e_machine"] != "EM_ARM":
                raise ValueError(f"{path}: not an ARM image (machine {elf['e_machine']})")
            segs = []
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_memsz"] > 0:
                    segs.append((seg["p_vaddr"], seg.data(), seg["p_memsz"]))
            symbols, sizes = {}, {}
            if elf.get_section_by_name(".symtab") is None:
                raise ValueError(f"{path}: no symbol table (was the image stripped?)")
            for name, value, size, kind in elf_symbols(elf, kinds=(STT_FUNC, STT_OBJECT)):
                # bit 0 of a function's address is the Thumb bit; an object's is its address
                symbols[name] = value & ~1 if kind == STT_FUNC else value
                sizes[name] = size
        vectors = next((data for va, data, _ in segs if va == 0 and len(data) >= 8), None)
        sp = int.from_bytes(vectors[:4], "little") if vectors else 0x2004_0000
        return Image(path, symbols, sizes, segs, sp)

    def function_at(self, address: int) -> str | None:
        for name, a in self.symbols.items():
            if a <= address < a + max(self.sizes.get(name, 0), 1):
                return name
        return None


@dataclass
class _Hle:
    fn: Callable[["Emulator"], int | None]


class Emulator:
    """One image on an emulated Cortex-M4 with cycle accounting.

    ``memory`` maps the part: which addresses are flash (wait states, instruction cache) and RAM.
    """

    def __init__(self, image: Image, memory: MemoryModel, max_insns: int = 2_000_000_000):
        self.image = image
        self.memory = memory
        self.decoder = Decoder()
        self.uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_M4)
        self._map()
        self.blocks: dict[int, Block] = {}
        self._region_map: dict[int, object] = {}
        self._region_lookup: Callable[[int], object] = lambda address: None
        self._hle: dict[int, _Hle] = {}
        self._callback_stack: list[Callable[[], None]] = []
        self.max_insns = max_insns
        self.fault: str | None = None
        self._wait_central = memory.flash_wait[1]
        self._init_accounting()
        self._attach_hooks()

    def _init_accounting(self) -> None:
        """The counters the hooks add to (native.NativeEmulator keeps them in C)."""
        self.counts: dict[object, Counts] = defaultdict(Counts)
        self.comm_counts: dict[object, Counts] = defaultdict(Counts)
        self.region: object = None
        self._prev: Block | None = None
        self._cur: Counts = self.counts[None]
        self.in_callback = 0
        self.insns_total = 0
        self.central_total = 0.0   # running central cycles (compute + callbacks), for cycle-counter reads

    def _attach_hooks(self) -> None:
        self.uc.hook_add(UC_HOOK_BLOCK, self._on_block)
        lo, hi = self.memory.flash_range
        self.uc.hook_add(UC_HOOK_MEM_READ, self._on_flash_read, begin=lo, end=hi - 1)

    # -- memory -----------------------------------------------------------------------------

    def _map(self) -> None:
        flash_lo, flash_hi = self.memory.flash_range
        ram_lo, ram_hi = self.memory.ram_range
        self.uc.mem_map(flash_lo, flash_hi - flash_lo)
        self.uc.mem_map(ram_lo, ram_hi - ram_lo)
        self.uc.mem_map(TRAMPOLINE, TRAMPOLINE_SIZE)
        self.uc.mem_map(SCRATCH, SCRATCH_SIZE)
        # the trampoline holds `b .` instructions; they are never executed (hooks catch them first)
        self.uc.mem_write(TRAMPOLINE, b"\xfe\xe7" * (TRAMPOLINE_SIZE // 2))
        for vaddr, data, memsz in self.image.segments:
            inside = (flash_lo <= vaddr and vaddr + memsz <= flash_hi) or (ram_lo <= vaddr and vaddr + memsz <= ram_hi)
            if not inside:
                raise ValueError(f"{self.image.path}: segment at 0x{vaddr:08x} ({memsz} B) lies outside the "
                                 f"{self.memory.name} flash and RAM")
            self.uc.mem_write(vaddr, data + bytes(memsz - len(data)))
        self._enable_fpu()

    def _enable_fpu(self) -> None:
        # CPACR: CP10/CP11 full access, as the board's reset handler does; FPCCR lazy stacking off
        try:
            self.uc.reg_write(A.UC_ARM_REG_CPACR, 0xF << 20)  # type: ignore[attr-defined]
        except (AttributeError, UcError):
            pass

    def read(self, address: int, n: int) -> bytes:
        return bytes(self.uc.mem_read(address, n))

    def write(self, address: int, data: bytes) -> None:
        self.uc.mem_write(address, bytes(data))

    def map_mmio(self, base: int, size: int, read: Callable[[int], int], write: Callable[[int, int], None]) -> None:
        """Registers from ``base`` (``size`` bytes, no memory behind them): a load's value is
        ``read(address)``, a store is ``write(address, value)``."""
        self.uc.mmio_map(base, size, lambda uc, offset, n, user: read(base + offset), None,
                         lambda uc, offset, n, value, user: write(base + offset, value), None)

    def reg(self, name: str) -> int:
        return self.uc.reg_read(getattr(A, f"UC_ARM_REG_{name.upper()}"))

    def set_reg(self, name: str, value: int) -> None:
        self.uc.reg_write(getattr(A, f"UC_ARM_REG_{name.upper()}"), value & 0xFFFF_FFFF)

    # -- high-level emulation ---------------------------------------------------------------

    def replace(self, symbol: str, fn: Callable[["Emulator"], int | None]) -> None:
        """Run ``fn(emulator)`` instead of the image's function ``symbol``; its return value goes
        to r0 and execution continues at the caller. ``fn`` may instead start a callback chain
        with :meth:`call_back` (then it returns None and the chain returns for it)."""
        if symbol not in self.image.symbols:
            raise ValueError(f"{self.image.path}: no function {symbol}")
        self._hle[self.image.symbols[symbol]] = _Hle(fn)

    def arg(self, i: int) -> int:
        if i < 4:
            return self.reg(f"r{i}")
        sp = self.reg("sp")
        return int.from_bytes(self.read(sp + 4 * (i - 4), 4), "little")

    def call_back(self, calls: list[tuple[int, list[int]]], result: int) -> None:
        """From inside a replaced function: call the image's functions ``calls`` = [(address,
        args), ...] one after another (counted as communication work), then return ``result`` to the
        replaced function's caller."""
        lr = self.reg("lr")
        pending = list(calls)

        def next_call() -> None:
            if not pending:
                self.in_callback -= 1
                self._callback_stack.pop()
                self.set_reg("r0", result)
                self.set_reg("pc", lr)
                return
            addr, args = pending.pop(0)
            for i, a in enumerate(args[:4]):
                self.set_reg(f"r{i}", a)
            self.set_reg("lr", CALLBACK_RETURN | 1)
            self.set_reg("pc", addr | 1)

        self.in_callback += 1
        self._callback_stack.append(next_call)
        next_call()

    # -- attribution ------------------------------------------------------------------------

    def set_region_lookup(self, lookup: Callable[[int], object]) -> None:
        """``lookup(address)`` names the region a block starting at ``address`` switches to (e.g. the
        schedule op whose source line it is), or None to stay in the current region. Asked once per
        block address."""
        self._region_lookup = lookup

    def _switch(self, region: object) -> None:
        self.region = region
        self._cur = (self.comm_counts if self.in_callback else self.counts)[region]

    # -- hooks ------------------------------------------------------------------------------

    def _on_block(self, uc, address: int, size: int, _user) -> None:
        hle = self._hle.get(address)
        if hle is not None:
            self._prev = None
            result = hle.fn(self)
            if result is not None:
                self.set_reg("r0", result)
                self.set_reg("pc", self.reg("lr"))
            return
        if address == CALLBACK_RETURN:
            self._prev = None
            self._callback_stack[-1]()
            self._switch(self.region)
            return
        if address == EXIT:
            uc.emu_stop()
            return
        blk = self.blocks.get(address)
        if blk is None or blk.size != size:
            blk = self.decoder.block(bytes(uc.mem_read(address, size)), address)
            self.blocks[address] = blk
            self._region_map[address] = self._region_lookup(address)
        region = self._region_map[address]
        if region is not None and region != self.region:
            self._switch(region)
        c = self._cur if not self.in_callback else self.comm_counts[self.region]  # _current_counts, inlined
        prev = self._prev
        if prev is not None and (prev.branch == BR_ALWAYS or (prev.branch == BR_COND and address != prev.fallthrough)):
            first32 = blk.insns[0].size == 4
            central = 1 if (address % 4 == 0 or not first32) else 2
            c.taken_branches += 1
            c.low += 1
            c.central += central
            c.high += 3
            self.central_total += central
        c.insns += blk.count
        c.low += blk.low
        c.central += blk.central
        c.high += blk.high
        self.central_total += blk.central
        if self.memory.icache is not None and (prev is None or prev.address != address):
            misses = self.memory.icache.fetch(address, size)
            if misses:
                c.icache_misses += misses
                self.central_total += misses * self._wait_central
        self._prev = blk
        self.insns_total += blk.count
        if self.insns_total > self.max_insns:
            self.fault = f"more than {self.max_insns} instructions; the code does not terminate"
            uc.emu_stop()

    def _on_flash_read(self, uc, access, address: int, size: int, value, _user) -> None:
        c = self._cur if not self.in_callback else self.comm_counts[self.region]
        c.flash_reads += 1
        line = address >> self.memory.flash_line_bits
        if line != self.memory.last_flash_line:
            c.flash_line_changes += 1
            self.memory.last_flash_line = line
            self.central_total += self._wait_central

    # -- running ----------------------------------------------------------------------------

    def call(self, symbol: str, args: list[int] | None = None) -> int:
        """Call the image's function ``symbol`` with up to four arguments; returns r0."""
        if symbol not in self.image.symbols:
            raise ValueError(f"{self.image.path}: no function {symbol}")
        for i, a in enumerate((args or [])[:4]):
            self.set_reg(f"r{i}", a)
        self.set_reg("sp", self.image.initial_sp)
        self.set_reg("lr", EXIT | 1)
        start = self.image.symbols[symbol] | 1
        try:
            # a Ctrl-C raised inside a hook (a callback from C) would only be printed and ignored:
            # it stops the emulation instead and is raised once emu_start has returned
            with interrupts.deferred(self.uc.emu_stop):
                self._run(start)
        except UcError as e:
            pc = self.reg("pc")
            where = self.image.function_at(pc) or "?"
            raise EmulationError(f"{self.image.path.name}: {e} at pc=0x{pc:08x} ({where})") from None
        if self.fault:
            raise EmulationError(f"{self.image.path.name}: {self.fault}")
        return self.reg("r0")

    def _run(self, start: int) -> None:
        self.resume(start, EXIT)

    def set_icache_enabled(self, on: bool) -> None:
        """The part's instruction cache switched on or off (NVMC.ICACHECNF.CACHEEN, written by the
        image on the emulated SoC); off, every instruction fetch is priced as a cache miss."""
        if self.memory.icache is not None:
            self.memory.icache.enabled = bool(on)

    def resume(self, begin: int, until: int) -> None:
        """Run from ``begin`` (the emulated SoC resumes a node where its last quantum stopped)."""
        self.uc.emu_start(begin, until)

    def _current_counts(self) -> Counts:
        """The counts the hooks add to now."""
        return self._cur if not self.in_callback else self.comm_counts[self.region]

    def total(self) -> Counts:
        t = Counts()
        for c in self.counts.values():
            t.add(c)
        return t


__all__ = ["Counts", "Emulator", "EmulationError", "Image"]
