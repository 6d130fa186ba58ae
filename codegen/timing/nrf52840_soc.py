"""Shipped nrf52840dk images on emulated nRF52840s, several of them over one radio.

The virtual testbed runs the Mixer code the boards run, through a host HAL; the board code below it
(boards/nrf52840dk: the RADIO/TIMER/PPI radio HAL, the HFXO start, the UARTE logger, the start-up
code) only ever ran on hardware. This module runs each node's whole ``firmware.elf`` from its reset
vector on the cycle model's emulator (:mod:`codegen.timing.engine`: unicorn, cycles from the
Cortex-M4 TRM) and models, at register level, the peripherals that code touches: CLOCK (HFXO),
TIMER0/TIMER1, PPI, RADIO, UARTE0 TX, the WDT (a timeout resets the part), the DWT cycle counter,
NVMC.ICACHECNF (the instruction cache is off until the image enables it), FICR/UICR/GPIO as memory. The
register layout is read from the nrf52840.svd that pyocd ships (not from the board's own header,
which it checks); the behaviour is the product specification's (v1.8: the RADIO state diagram, fast
ramp-up 40 µs, EasyDMA from RAM only, TIMER compare on equality, PPI event -> task). Whatever the
board code does that the hardware would not do as intended is a :class:`SocFault` naming it: a
radio task in the wrong state, EasyDMA pointed at flash, the radio started without the HFXO, an
access to an address the part does not decode.

Time is each node's CPU cycle count at 64 MHz (the cycle model's central estimate, so polling loops
take the time they would); the nodes advance together in quanta shorter than the radio's ramp-up,
so every packet is on the medium before any receiver's clock reaches its first bit. Packets reach
a receiver that is in RX when their preamble starts (and whose address, frequency, PHY and CRC
setup match the sender's); two packets that overlap at a receiver are a collision (CRC error) — the
strict model, no capture; an optional ``loss`` drops a packet at a receiver with that probability.
A node's crystal may be off (``drift_ppm``): its cycles, TIMERs and radio bit times all run at that
error, and the medium keeps true time, so each slot grid drifts against the others as on real parts.
"""

from __future__ import annotations

import copy
import ctypes
import heapq
import random
import struct
from dataclasses import dataclass, field
from functools import partial
from operator import sub
from pathlib import Path
from typing import Callable

from elftools.elf.elffile import ELFFile
from capstone.arm_const import ARM_CC_AL as _CS_AL, ARM_CC_INVALID as _CS_INVALID, ARM_OP_IMM
from unicorn import UC_HOOK_MEM_WRITE, UcError, arm_const

from .. import interrupts
from .engine import Emulator, Image
from .m4cost import BR_COND
from .memsystem import MemoryModel
from .native import PATH_MAX_BLOCKS, PRE_HOOK, NativeEmulator, StateField, hooks_in_c

CPU_HZ = 64_000_000
CYC_PER_US = CPU_HZ // 1_000_000
QUANTUM = 16 * CYC_PER_US   # < the radio's 40 µs ramp-up: every packet is known before it starts
HFXO_START = 256 * CYC_PER_US   # PS: tHFXOST typical with the DK's 32 MHz crystal
LFCLK_TICK = CPU_HZ / 32768         # the WDT's clock (LFRC, taken as exact)
WDT_RESET_TICKS = 2                 # PS WDT: the reset follows TIMEOUT by two 32.768 kHz cycles
WFE = 0xBF20                        # Thumb encoding of WFE
# Radio timings, per PHY (MODE value: 2M, 1M), in CPU cycles. Fast ramp-up and the chain delays are
# Nordic's measured nRF52840 values as Zephyr's controller carries them (radio_nrf52840.h, "empirical
# measurements and sniffer logs"): TXEN -> TXIDLE -> TX (the transmission starts, READY -> START)
# 40.0 µs (2M) / 40.9 µs (1M), then the TX chain delay 0.6 µs to the first bit on the air; RXEN -> RX
# 40.3 µs; ADDRESS at the receiver 5.0 µs (2M) / 9.4 µs (1M) after the address's last bit.
# MODECNF0.RU Default: 140 µs (PS), either direction.
RAMP_DEFAULT = 140 * CYC_PER_US
TX_CHAIN = round(0.6 * CYC_PER_US)
RAMP_TX_FAST = {"2M": round(40.0 * CYC_PER_US), "1M": round(40.9 * CYC_PER_US)}   # TXEN -> READY/START
RAMP_RX_FAST = round(40.3 * CYC_PER_US)
RX_CHAIN = {"2M": round(5.0 * CYC_PER_US), "1M": round(9.4 * CYC_PER_US)}
TX_DISABLE = 4 * CYC_PER_US    # PS tTXDISABLE (BLE 2M); RX disables at once
PAGE = 0x1000
CRC_INIT = 8                   # index of CRCINIT in Radio._setup


class SocFault(RuntimeError):
    """The image did something the part would not do as the board code intends."""


@dataclass
class Regs:
    """Absolute register addresses, from the SVD."""
    svd: dict

    def __call__(self, periph: str, reg: str, n: int = 0) -> int:
        p = self.svd[periph]
        r = p.registers[reg]
        if n >= r.dim:
            raise IndexError(f"{periph}.{reg}[{n}]")
        return p.base + r.offset + n * r.increment

    def value(self, periph: str, reg: str, fld: str, name: str) -> int:
        return self.svd[periph].registers[reg].fields[fld].values[name]


def load_regs() -> Regs:
    from ..svd import parse_svd, pyocd_svd_text, supplement

    svd = parse_svd(pyocd_svd_text("nrf52840"))
    supplement(svd)
    return Regs(svd)


@dataclass
class Packet:
    sender: int
    t0: int              # first preamble bit on air (cycles)
    t_addr: int          # end of the access address
    t_end: int           # last CRC bit
    frame: bytes         # S0, LENGTH, payload as the sender's EasyDMA read them
    setup: tuple         # what a receiver must share to decode it (address, frequency, PHY, CRC, whitening)
    cut: int | None = None   # disabled on air at this time


@dataclass
class Medium:
    """Every packet sent, for the receivers to find; optional i.i.d. loss per (packet, receiver), and
    outages: windows of emulated time (µs from reset) in which every packet is lost (interference, a
    blocked line of sight)."""
    loss: float = 0.0
    seed: int = 0
    outages: tuple[tuple[float, float], ...] = ()
    packets: list[Packet] = field(default_factory=list)
    trace: list | None = None   # (µs, node, what, detail) of every transmission and reception, if a list

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def prune(self, before: int) -> None:
        self.packets = [p for p in self.packets if p.t_end >= before]


# what a pollable one-block loop may not contain: memory writes, exclusive or system access, sleep, traps
_SIDE_EFFECT_CLASSES = frozenset({"store", "stm", "fpu_mem", "system", "load_pc"})
_SIDE_EFFECT_MNEMONICS = frozenset({"svc", "bkpt", "udf", "wfi", "wfe", "sev", "ldrex", "ldrexb", "ldrexh", "ldrexd",
                                    "clrex", "cpsid", "cpsie", "msr", "blx", "bl"})
_LOOP_REGS = [getattr(arm_const, f"UC_ARM_REG_R{i}") for i in range(13)] + [
    arm_const.UC_ARM_REG_SP, arm_const.UC_ARM_REG_LR, arm_const.UC_ARM_REG_XPSR]


class _Registers:
    """``regs`` read and written at once. The skip logic compares the loop registers at every pass
    (~10^5 reads per emulated second) and puts them back at a clock-loop rewind, and unicorn's public
    reg_read_batch / reg_write_batch build their ctypes arguments anew on every call: 30 % of a whole
    run. Where the binding allows, the arguments are built once, the registers' values are one array
    (read back by one unpack), and the library's batch calls are called on them (10x faster); else
    the public calls."""

    def __init__(self, uc, regs: list[int]):
        self.uc, self.regs = uc, regs
        try:
            kind = {uc._select_reg_class(r) for r in regs}
            if len(kind) != 1:
                raise TypeError("registers of several sizes")
            ctype = kind.pop()
            self.values = (ctype * len(regs))()
            self.layout = struct.Struct(f"@{len(regs)}{ctype._type_}")
            if self.layout.size != ctypes.sizeof(self.values):
                raise TypeError("no struct layout for these registers")
            self.ids = (ctypes.c_int * len(regs))(*regs)
            self.ptrs = (ctypes.c_void_p * len(regs))(*(ctypes.addressof(self.values) + i * ctypes.sizeof(ctype)
                                                        for i in range(len(regs))))
            self.count = ctypes.c_int(len(regs))
            self._read, self._write = uc._do_reg_read_batch, uc._do_reg_write_batch
        except (AttributeError, TypeError):  # another binding
            self._read = self._write = None
        if self._read is not None and self.read() != tuple(uc.reg_read_batch(regs)):  # pragma: no cover
            self._read = self._write = None   # a changed binding

    def read(self) -> tuple:
        if self._read is None or self._read(self.ids, self.ptrs, self.count) != 0:  # an error: the public call raises it
            return tuple(self.uc.reg_read_batch(self.regs))
        return self.layout.unpack_from(self.values)

    def write(self, values: tuple) -> None:
        if self._write is not None:
            self.values[:] = values
            if self._write(self.ids, self.ptrs, self.count) == 0:
                return
        self.uc.reg_write_batch(list(zip(self.regs, values)))   # raises the error, if any


_CLOCK_PATH_MAX = PATH_MAX_BLOCKS   # blocks from one capture to the next, at most, for a clock loop (as C records)
_CLOCK_FORBIDDEN = frozenset({"stm", "system", "load_pc"})
_CLOCK_FORBIDDEN_MNEMONICS = frozenset({"svc", "bkpt", "udf", "wfi", "wfe", "sev", "ldrex", "ldrexb", "ldrexh",
                                        "ldrexd", "strex", "strexb", "strexh", "strexd", "strd", "clrex", "cpsid",
                                        "cpsie", "msr", "push", "pop"})
_CS_REG = {**{f"r{i}": i for i in range(13)}, "sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14}
_COUNT_FIELDS = ("insns", "low", "central", "high", "taken_branches", "flash_reads", "flash_line_changes",
                 "icache_misses")


class _Quantum:
    """What the emulated SoC adds to the engine's emulator: it stops when its cycle count reaches
    ``stop_at``. The block hook runs before a block, so a stopped block is neither run nor counted:
    it runs, and is counted, when the next quantum resumes.

    Polling loops are fast-forwarded: a one-block loop (it branches back to itself) that stores
    nothing and reads peripheral registers returns to the same CPU state each time while those
    registers hold their values, and they change only at a scheduled peripheral event or reception
    (:meth:`Node.next_change`). Once two passes in a row, with no event run during them, leave the
    registers, the values read and the cycle and count increments alike, the passes up to the last
    one whose reads all come before that moment are counted without being run: every count advances by whole passes, so the cycles, the
    clock the node reads and the moment the loop sees the change are those of running them. Waiting
    for a UART line (~7 ms at 115200 baud) was ~90,000 passes, more than half of all blocks run.
    Loops that wait for a time (TIMER capture, CC read) are skipped too: see "clock loops" below.

    Two emulators carry it: :class:`_QuantumEmulator` on the engine's Python hooks and
    :class:`_NativeQuantumEmulator` on its C hooks, which hand a block to :meth:`_before_block` only
    after a peripheral was read or a capture task written (:meth:`python_next_block`); the other
    blocks of a clock loop's path they record for it (:meth:`_NativeQuantumEmulator._hand_over`)."""

    stop_at = 0
    node: "Node"
    fast_forward = True

    def _quantum_init(self) -> None:
        self._pure: dict[int, bool] = {}   # block address -> a one-block loop without side effects
        self._spin: tuple | None = None    # the last pass: (address, registers, reads, counters, increments)
        self.skipped_passes = 0
        # clock loops: the blocks since the last TIMER capture, the last pass, a jump being checked
        self._path: list[int] | None = None
        self._clock_last: tuple | None = None
        self._clock_jump: tuple | None = None
        self._clock_paths: dict[tuple, frozenset | None] = {}   # path -> registers a pass writes before reading
        self.clock_rewinds = 0
        self._loop_registers = _Registers(self.uc, _LOOP_REGS)
        self._loop_regs = self._loop_registers.read
        self._live: dict[frozenset, list[int]] = {}   # registers a pass writes first -> the others' indices
        self._path_stores: dict[tuple, tuple] = {}     # path -> (its blocks, their stores): _stores_along

    def python_next_block(self) -> None:
        """A peripheral was read or a capture task written: the next block goes through
        :meth:`_before_block` (the Python hooks see every block anyway)."""

    def _before_block(self, uc, address: int) -> None:
        node, path = self.node, self._path   # locals: called for ~10^6 blocks a run
        if path is not None:
            if node.captured:
                node.captured = False
                self._clock_boundary(uc, address)
            elif len(path) < _CLOCK_PATH_MAX:
                path.append(address)
            else:
                self._path = None
        elif node.captured and self.fast_forward:
            node.captured = False
            self._start_path(address)
        reads = node.reads
        if reads and self.fast_forward:
            prev = self._prev
            if prev is not None and prev.address == address:
                self._spin_pass(uc, prev, reads)
            node.reads = []

    def _is_pure_loop(self, blk) -> bool:
        pure = self._pure.get(blk.address)
        if pure is None:
            last = blk.insns[-1]
            pure = (blk.branch == BR_COND and blk.fallthrough == blk.address + blk.size
                    and all(i.cls not in _SIDE_EFFECT_CLASSES and i.mnemonic not in _SIDE_EFFECT_MNEMONICS
                            for i in blk.insns)
                    and self._branch_target(last) == blk.address)
            self._pure[blk.address] = pure
        return pure

    def _branch_target(self, insn) -> int | None:
        ins = next(self.decoder.cs.disasm(self.read(insn.address, insn.size), insn.address), None)
        imm = [o.imm for o in ins.operands if o.type == ARM_OP_IMM] if ins is not None else []
        return imm[-1] if imm else None

    def _counters(self) -> tuple:
        """Everything a pass adds to: cycles, instructions, the region's counts, and the events run (a
        pass with an event run inside is not idle: the registers it read may have changed after)."""
        c = self._current_counts()
        return (self.central_total, self.insns_total, c.insns, c.low, c.central, c.high, c.taken_branches,
                c.flash_reads, c.flash_line_changes, c.icache_misses, self.node.events_run)

    def _set_counters(self, values: tuple) -> None:
        c = self._current_counts()
        self.central_total, self.insns_total = values[0], values[1]
        for name, v in zip(_COUNT_FIELDS, values[2:-1]):
            setattr(c, name, v)

    def _spin_pass(self, uc, blk, reads: list) -> None:
        """At the start of a pass of the one-block loop ``blk``; ``reads`` are the last pass's."""
        if not self._is_pure_loop(blk) or self.node.any_volatile(reads):
            self._spin = None
            return
        regs = self._loop_regs()
        now = self._counters()
        last, reads = self._spin, tuple(reads)
        step = None
        if last is not None and last[0] == blk.address and last[1] == regs and last[2] == reads:
            step = tuple(map(sub, now, last[3]))
            if step[1] != blk.count:  # not the pass right after the last one
                step = None
        self._spin = (blk.address, regs, reads, now, step)
        if step is None or last[4] != step or step[0] <= 0 or step[-1] != 0:  # an event ran: state may differ
            return
        # pass j from now reads at now + (j + 1)·k; it may be skipped while that is before the change
        k, start = step[0], now[0]
        horizon = min(self.stop_at, self.node.next_change())
        m = int((horizon - start) // k)
        while m > 0 and start + m * k >= horizon:
            m -= 1
        if m < 1:
            return
        self._set_counters(_advanced(now, m, step))
        self.skipped_passes += m
        self._spin = None   # the counters moved: the next pass starts a new comparison

    # -- clock loops -------------------------------------------------------------------------
    # A loop that waits for a time (`while (!reached(deadline))`: capture a TIMER, read CC, compare)
    # reads a new value each pass, so it never returns to the same state; it is skipped differently.
    # A pass runs from a capture to the next (the block after the capturing one starts it). Two
    # passes alike — the same blocks, the same values read except the captured CC, the same registers
    # except those the pass writes before it reads them, every store a TIMER capture, the same
    # increments — and the passes up to the next event are counted without being run, except the
    # last, which runs: if it ends like the others (the loop goes on), the jump stands; if not (the
    # time was reached within the jump), everything is put back as it was and half the jump is tried.
    # This assumes what deadline loops do: once a pass leaves the loop, every later one would too.

    def _start_path(self, address: int) -> None:
        self._path = [address]
        self.node.pass_reads, self.node.pass_writes = [], []

    def _written_first(self, path: tuple) -> frozenset | None:
        """Registers (indices into _LOOP_REGS) every pass along ``path`` writes before reading, or None if
        the path is not a pure clock loop (a store that is not counted as an MMIO write is found later)."""
        if path in self._clock_paths:
            return self._clock_paths[path]
        read, written, result = set(), set(), None
        pure = all(self._region_map.get(a) is None for a in path) and not self.in_callback
        for a in (path if pure else ()):
            blk = self.blocks.get(a)
            if blk is None or any(i.cls in _CLOCK_FORBIDDEN or i.mnemonic in _CLOCK_FORBIDDEN_MNEMONICS
                                  or i.cls.startswith("fpu") for i in blk.insns):
                pure = False
                break
            for ins in self.decoder.cs.disasm(self.read(blk.address, blk.size), blk.address):
                regs_read, regs_written = ins.regs_access()
                for r in regs_read:
                    k = _CS_REG.get(ins.reg_name(r))
                    if k is not None and k not in written:
                        read.add(k)
                if ins.cc in (_CS_AL, _CS_INVALID):  # a conditional write may not happen
                    for r in regs_written:
                        k = _CS_REG.get(ins.reg_name(r))
                        if k is not None and k not in read:
                            written.add(k)
        last = self.blocks.get(path[-1]) if pure else None
        if last is not None and last.branch != BR_COND:  # the capturing block's successor is fixed
            result = frozenset(written)
        self._clock_paths[path] = result
        return result

    def _stores_along(self, path: tuple) -> int:
        """How many stores a pass along ``path`` runs (each must be a TIMER capture): counted once per
        path and its blocks."""
        blocks = tuple([self.blocks[a] for a in path])
        known = self._path_stores.get(path)
        if known is None or known[0] != blocks:
            known = self._path_stores[path] = (blocks, sum(1 for b in blocks for i in b.insns if i.cls == "store"))
        return known[1]

    def _clock_boundary(self, uc, address: int) -> None:
        """At the block after a capture: compare the pass that ended, check or make a jump."""
        node = self.node
        path, reads, writes = tuple(self._path), node.pass_reads, node.pass_writes
        self._start_path(address)
        if not self.fast_forward:
            return
        regs = self._loop_regs()
        now = self._counters()
        dead = self._written_first(path)
        stores = self._stores_along(path) if dead is not None else -1
        clock = {node.capture_cc[a] for a, _ in writes if a in node.capture_cc}
        ok = (dead is not None and stores == len(writes) and len(clock) == len(writes) and path[0] == address
              and not node.any_volatile(reads))
        if not ok:
            if self._clock_jump is not None:  # cannot happen: the checked pass depends on nothing that changed
                node.fail(f"the model's clock-loop skip lost its way at 0x{address:08x} (a cisl bug; run with "
                          "fast_forward=False)")
            self._clock_last = None
            return
        live = self._live.get(dead)
        if live is None:
            live = self._live[dead] = [i for i in range(len(regs)) if i not in dead]
        kept = tuple([regs[i] for i in live])
        sig = (path, tuple(writes), tuple([(a, v) for a, v in reads if a not in clock]), kept)
        jump, last = self._clock_jump, self._clock_last
        if jump is not None:
            self._clock_jump = None
            snap, m, want = jump
            if (sig, tuple(map(sub, now, self._clock_mark))) == want:
                self.skipped_passes += m   # the pass after the jump went on: so did the ones skipped
                self._clock_last = (sig, now, want[1])
                self._clock_try(now, want, regs)
                return
            # it left the loop: back to before the jump, and half of it
            regs0, counters0, cc0 = snap
            self.clock_rewinds += 1
            self._loop_registers.write(regs0)
            self._set_counters(counters0)
            for (timer, n), v in cc0:
                timer.cc[n] = v
            self._start_path(address)
            node.reads = []
            self._clock_last = None
            if m // 2 >= 1:
                self._clock_jump_by(m // 2, snap, want)
            return
        step = tuple(map(sub, now, last[1])) if last is not None else None
        self._clock_last = (sig, now, step)
        if last is None or last[0] != sig or last[2] != step or step[0] <= 0 or step[-1] != 0:
            return
        self._clock_try(now, (sig, step), regs)

    def _clock_try(self, now: tuple, want: tuple, regs: tuple) -> None:
        """Jump as far as the horizon allows from ``now`` (the counters) and ``regs`` (the registers) at a
        boundary; ``want``: the signature and step the checked pass after the jump must show."""
        k = want[1][0]
        horizon = min(self.stop_at, self.node.next_change())
        m = int((horizon - now[0]) // k) - 1   # the pass that runs after the jump reads before the horizon too
        while m > 0 and now[0] + (m + 1) * k >= horizon:
            m -= 1
        if m < 1:
            return
        cc = tuple(((t, n), t.cc[n]) for t, n in (self.node.capture_tasks[a] for a, _ in want[0][1]))
        self._clock_jump_by(m, (regs, now, cc), want)

    def _clock_jump_by(self, m: int, snap: tuple, want: tuple) -> None:
        counters0, step = snap[1], want[1]
        self._set_counters(_advanced(counters0, m, step))
        self._clock_mark = self._counters()   # the checked pass must add exactly one step from here
        self._clock_jump = (snap, m, want)


def _advanced(counters: tuple, m: int, step: tuple) -> tuple:
    """The counters after ``m`` more passes of ``step`` each."""
    return tuple([v + m * d for v, d in zip(counters, step)])


class _QuantumEmulator(_Quantum, Emulator):
    """The SoC on the engine's Python hooks."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._quantum_init()

    def _on_block(self, uc, address: int, size: int, user) -> None:
        if self.central_total >= self.stop_at:
            uc.emu_stop()
            return
        self._before_block(uc, address)
        super()._on_block(uc, address, size, user)


class _NativeQuantumEmulator(_Quantum, NativeEmulator):
    """The SoC on the engine's C hooks (native.py): the same counts, the serial bytes included."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._quantum_init()
        self._pre_fn = PRE_HOOK(self._pre)   # kept: the C side holds only its address
        self._st.pre = ctypes.cast(self._pre_fn, ctypes.c_void_p).value
        self._st.python_first = 1
        self._st.stop_at = 0   # as _Quantum.stop_at: nothing runs before run_until sets it
        self._recorded = self._st.path   # the C hook's path blocks (the struct's own memory)

    stop_at = StateField("stop_at")  # type: ignore[assignment]

    def python_next_block(self) -> None:
        self._st.python_first = 1

    def _counters(self) -> tuple:
        return self.count_values() + (self.node.events_run,)

    def _set_counters(self, values: tuple) -> None:
        self.set_count_values(values)

    def _pre(self, address: int, size: int) -> int:
        try:
            self._take_recorded_path()
            self._before_block(self.uc, address)
            self._hand_over()
            return 0
        except BaseException as e:  # noqa: BLE001 - raised again once emu_start returns
            self.stop_for(e)
            return 1

    def _take_recorded_path(self) -> None:
        """The path blocks the C hook recorded since the last call (see :meth:`_hand_over`), onto _path."""
        st = self._st
        if st.path_len:
            self._path.extend(self._recorded[:st.path_len])
            st.path_len = 0

    def _hand_over(self) -> None:
        """Which of the next blocks :meth:`_before_block` must see: those after a peripheral read or a
        capture write (python_next_block) and a clock-loop path's block past its longest. The path's
        other blocks it would only append to _path: the C hook records those instead (~40 % fewer
        calls into Python), and :meth:`_pre` takes them first."""
        path, node, st = self._path, self.node, self._st
        st.path_room = 0 if path is None else _CLOCK_PATH_MAX - len(path)
        st.python_first = 1 if ((path is not None and st.path_room <= 0)
                                or (self.fast_forward and (node.captured or node.reads))) else 0


def _soc_emulator(image: Image, memory: MemoryModel) -> _Quantum:
    """The C hooks where new_emulator would use them, else the Python ones (CISL_CYCLE_HOOKS=python)."""
    cls = _NativeQuantumEmulator if hooks_in_c() else _QuantumEmulator
    return cls(image, memory, max_insns=1 << 62)


class Node:
    """One nRF52840: the image on the emulator and its peripherals, advanced in quanta."""

    def __init__(self, index: int, elf: Path, memory: MemoryModel, regs: Regs, medium: Medium,
                 variant: int = 0x41414630, uicr_approtect: int = 0xFFFFFF5A, ppm: float = 0.0):
        self.index, self.regs, self.medium = index, regs, medium
        self.ppm = float(ppm)                      # this part's crystal error (HFXO: CPU, TIMERs, RADIO)
        self.rate = 1.0 + self.ppm * 1e-6          # its cycles per cycle of the medium's (true) time
        self.emu = _soc_emulator(Image.load(elf), memory)
        self.emu.node = self
        self.reads: list[tuple[int, int]] = []   # (address, value) of the peripheral reads since the last block
        self.pass_reads: list[tuple[int, int]] = []   # ... and writes, since the last TIMER capture (clock loops)
        self.pass_writes: list[tuple[int, int]] = []
        self.captured = False                      # the last block wrote a TIMER capture task
        self.events_run = 0                        # peripheral events and receptions run so far
        self.volatile = {0xE0001004}               # registers whose value moves with time alone: DWT.CYCCNT
        self._load_data_images(elf)
        self.done = False
        self.fault: str | None = None
        self.watchdog_reset: int | None = None   # local cycle at which the WDT resets the part
        self.asleep = False                        # the CPU reached a WFE (nothing wakes it)
        self.serial = bytearray()
        self.changed = False
        self._events: list = []
        self._seq = 0
        self._tasks: dict[int, Callable[[int], None]] = {}
        uc = self.emu.uc
        # memory the board code reads or writes plainly
        for base in (0x10000000, 0x10001000, 0x50000000, 0xE000E000):
            uc.mem_map(base, PAGE)
        self.emu.write(0x10001000, b"\xff" * PAGE)          # UICR erased ...
        self.emu.write(regs("UICR", "APPROTECT"), uicr_approtect.to_bytes(4, "little"))  # ... but the port open
        self.emu.write(regs("FICR", "INFO_VARIANT"), variant.to_bytes(4, "little"))
        uc.hook_add(UC_HOOK_MEM_WRITE, self._on_scs_write, begin=0xE000ED0C, end=0xE000ED0F)
        self.clock = Clock(self)
        self.timers = [Timer(self, "TIMER0"), Timer(self, "TIMER1")]
        self.ppi = Ppi(self)
        self.radio = Radio(self)
        self.uarte = Uarte(self)
        self.dwt = Dwt(self)
        self.nvmc = Nvmc(self)
        self.wdt = Watchdog(self)
        self.capture_tasks = {t.r("TASKS_CAPTURE", n): (t, n) for t in self.timers for n in range(6)}
        self.capture_cc = {t.r("TASKS_CAPTURE", n): t.r("CC", n) for t in self.timers for n in range(6)}
        self.nvmc_ready = regs("NVMC", "READY")
        self._owner: dict[int, Device | None] = {}   # MMIO address -> its device (_device)
        self._pc = _Registers(uc, [arm_const.UC_ARM_REG_PC])   # read after every quantum
        pages: dict[int, list] = {}
        for dev in (self.clock, *self.timers, self.ppi, self.radio, self.uarte, self.dwt, self.nvmc, self.wdt):
            pages.setdefault(dev.base & ~(PAGE - 1), []).append(dev)
        for base, devs in pages.items():
            self.emu.map_mmio(base, PAGE, partial(self._mmio_read, devs), partial(self._mmio_write, devs))
        # reset: the vector table's stack pointer and reset handler
        vec = self.emu.read(0, 8)
        self.emu.set_reg("sp", int.from_bytes(vec[:4], "little"))
        self.pc = int.from_bytes(vec[4:], "little") | 1

    def _load_data_images(self, elf: Path) -> None:
        """Put .data's initial values at their load address in flash, where the reset handler copies
        them from (the engine loads segments at their run address only)."""
        lo, hi = self.emu.memory.flash_range
        with open(elf, "rb") as f:
            for seg in ELFFile(f).iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_paddr"] != seg["p_vaddr"] and lo <= seg["p_paddr"] < hi:
                    self.emu.write(seg["p_paddr"], seg.data())

    # -- time and events ----------------------------------------------------------------------

    def now(self) -> int:
        return int(self.emu.central_total)

    # The node's time is its own cycles; the medium's is true time. They differ by the crystal's error.
    def to_local(self, t: int) -> int:
        return t if not self.ppm else round(t * self.rate)

    def to_global(self, t: int) -> int:
        return t if not self.ppm else round(t / self.rate)

    def at(self, t: int, fn: Callable[[int], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, fn))

    def advance(self, now: int) -> None:
        """Run every peripheral event due by ``now`` in time order (receptions included)."""
        while True:
            t_ev = self._events[0][0] if self._events else None
            t_rx = self.radio.next_lock(now)
            if t_rx is not None and (t_ev is None or t_rx <= t_ev):
                self.radio.lock(t_rx)
                self.events_run += 1
                continue
            if t_ev is None or t_ev > now:
                return
            t, _, fn = heapq.heappop(self._events)
            fn(t)
            self.events_run += 1

    def next_change(self) -> float:
        """The earliest moment a peripheral register may change: the next scheduled event or reception.
        Packets are on the medium a ramp-up before their first bit, so within a quantum none is unknown."""
        t_ev = self._events[0][0] if self._events else float("inf")
        t_rx = self.radio.earliest_lock()
        return t_ev if t_rx is None else min(t_ev, t_rx)

    def task(self, address: int, t: int) -> None:
        fn = self._tasks.get(address)
        if fn is None:
            raise SocFault(f"node {self.index}: PPI triggers 0x{address:08x}, not a task this model knows")
        fn(t)

    def event(self, address: int, t: int) -> None:
        """Peripheral event at ``address`` happened at ``t``: PPI channels listening to it fire."""
        self.ppi.fire(address, t)

    def hang(self) -> None:
        """The CPU takes a fault now (as a HardFault would): on to the image's fault handler, which
        spins until the watchdog, if started, resets the part."""
        self.pc = self.emu.image.symbols["cisl_fault"] | 1

    def fail(self, msg: str) -> None:
        if self.fault is None:
            self.fault = f"node {self.index}: {msg}"
        self.emu.uc.emu_stop()

    # -- memory-mapped registers -------------------------------------------------------------

    def any_volatile(self, reads: list) -> bool:
        """Whether any of the (address, value) ``reads`` is of a register that moves with time alone."""
        for a, _ in reads:
            if a in self.volatile:
                return True
        return False

    def _device(self, address: int, devs: list) -> Device | None:
        """The device of ``devs`` (a page's) that decodes ``address``: looked up once per address."""
        try:
            return self._owner[address]
        except KeyError:
            d = self._owner[address] = next((d for d in devs if d.owns(address)), None)
            return d

    def _mmio_read(self, devs: list, address: int) -> int:
        value = 0
        try:
            self.advance(self.now())
            if address == self.nvmc_ready:
                return 1
            d = self._device(address, devs)
            if d is not None:
                value = d.read(address) & 0xFFFFFFFF
        except SocFault as e:
            self.fail(str(e))
            value = 0
        self.reads.append((address, value))
        self.emu.python_next_block()
        if self.emu._path is not None:
            self.pass_reads.append((address, value))
        return value

    def _mmio_write(self, devs: list, address: int, value: int) -> None:
        try:
            t = self.now()
            self.advance(t)
            if self.emu._path is not None:
                self.pass_writes.append((address, value))
            if address in self.capture_tasks:
                self.captured = True
                self.emu.python_next_block()
            d = self._device(address, devs)
            if d is not None:
                d.write(address, value & 0xFFFFFFFF, t)
        except SocFault as e:
            self.fail(str(e))

    def _on_scs_write(self, uc, access, address, size, value, user) -> None:
        if address == 0xE000ED0C and (value >> 16) == 0x05FA and value & 4:
            self.fail("requested a system reset (AIRCR.SYSRESETREQ)")

    # -- running ---------------------------------------------------------------------------------

    def run_until(self, t: int) -> None:
        if self.done:
            return
        self.emu.stop_at = t
        try:
            if self.asleep:   # nothing wakes it: its clock runs on, its peripherals' events with it
                self.emu.central_total = max(self.emu.central_total, t)
            else:
                # Ctrl-C inside a hook stops the quantum and is raised here, not printed and lost
                with interrupts.deferred(self.emu.uc.emu_stop):
                    self.emu.resume(self.pc, 0xFFFFFFFE)
        except UcError as e:
            pc, sp = self.emu.reg("pc"), self.emu.reg("sp")
            # unicorn does not execute WFE (it stops just past it): the CPU goes to sleep there (cisl's images
            # enable no interrupt and no SEVONPEND, so no event wakes it: the idle loop after `end`)
            self.asleep = int.from_bytes(self.emu.read((pc & ~1) - 2, 2), "little") == WFE
            if not self.asleep:
                ram_lo = self.emu.memory.ram_range[0]
                # the linker scripts put the stack at the bottom of RAM: an overflow leaves RAM and lands here
                what = f"stack overflow (sp=0x{sp:08x}, below RAM at 0x{ram_lo:08x})" if sp < ram_lo else str(e)
                self.fault = self.fault or (f"node {self.index}: {what} at pc=0x{pc:08x} "
                                            f"({self.emu.image.function_at(pc) or '?'})")
        self.pc = self._pc.read()[0] | 1
        try:
            self.advance(max(self.now(), t))
        except SocFault as e:
            self.fault = self.fault or str(e)
        if self.fault:
            self.done = True


class Device:
    base: int
    size: int = PAGE

    def owns(self, address: int) -> bool:
        return self.base <= address < self.base + self.size


class Plain(Device):
    """Registers that hold what was written; subclasses add tasks and events."""

    def __init__(self, node: Node, periph: str):
        self.node, self.periph = node, periph
        self.base = node.regs.svd[periph].base
        self.mem: dict[int, int] = {}
        self.tasks: dict[int, Callable[[int], None]] = {}

    def r(self, reg: str, n: int = 0) -> int:
        return self.node.regs(self.periph, reg, n)

    def read(self, address: int) -> int:
        return self.mem.get(address, 0)

    def write(self, address: int, value: int, t: int) -> None:
        if address in self.tasks:  # writing 1 to a task register triggers it
            if value:
                self.tasks[address](t)
            return
        self.mem[address] = value

    def task_map(self, tasks: dict[int, Callable[[int], None]]) -> None:
        self.tasks = tasks
        self.node._tasks.update(tasks)


class Clock(Plain):
    def __init__(self, node: Node):
        super().__init__(node, "CLOCK")
        self.size = 0x1000
        self.running = False
        self.task_map({self.r("TASKS_HFCLKSTART"): self.start})
        # POWER shares the page: RESETREAS reads 0 after a power-on reset (what power_on models) and
        # its bits clear when written 1
        self.resetreas = node.regs("POWER", "RESETREAS")

    def write(self, address: int, value: int, t: int) -> None:
        if address == self.resetreas:
            self.mem[address] = self.mem.get(address, 0) & ~value
            return
        super().write(address, value, t)

    def start(self, t: int) -> None:
        def started(t2: int) -> None:
            self.running = True
            self.mem[self.r("EVENTS_HFCLKSTARTED")] = 1
            self.mem[self.r("HFCLKSTAT")] = 1 | (1 << 16)
            self.node.event(self.r("EVENTS_HFCLKSTARTED"), t2)
        self.node.at(t + HFXO_START, started)


class Timer(Plain):
    """TIMER in timer mode, 16 MHz / 2^PRESCALER, compares on equality, CC by capture."""

    def __init__(self, node: Node, name: str):
        super().__init__(node, name)
        self.running = False
        self.t_start, self.count0 = 0, 0
        self.cc = [0] * 6
        self.gen = [0] * 6
        self.compare_ev = [self.r("EVENTS_COMPARE", n) for n in range(6)]
        self.cc_index = {self.r("CC", n): n for n in range(6)}  # read on every poll of the slot clock
        self.prescaler = self.r("PRESCALER")
        tasks = {self.r("TASKS_START"): self.start, self.r("TASKS_STOP"): self.stop,
                 self.r("TASKS_CLEAR"): self.clear}
        for n in range(6):
            tasks[self.r("TASKS_CAPTURE", n)] = (lambda k: lambda t: self.capture(k, t))(n)
        self.task_map(tasks)

    def div(self) -> int:
        return 4 << (self.mem.get(self.prescaler, 4) & 0xF)  # 64 MHz CPU cycles per tick

    def count(self, t: int) -> int:
        if not self.running:
            return self.count0
        return (self.count0 + (t - self.t_start) // self.div()) & 0xFFFFFFFF

    def start(self, t: int) -> None:
        if not self.running:
            self.t_start, self.running = t, True
            self._schedule_all(t)

    def stop(self, t: int) -> None:
        self.count0, self.running = self.count(t), False
        self.gen = [g + 1 for g in self.gen]

    def clear(self, t: int) -> None:
        self.count0, self.t_start = 0, t
        self._schedule_all(t)

    def capture(self, n: int, t: int) -> None:
        self.cc[n] = self.count(t)

    def _schedule_all(self, t: int) -> None:
        for n in range(6):
            self._schedule(n, t)

    def _schedule(self, n: int, t: int) -> None:
        self.gen[n] += 1
        if not self.running:
            return
        div = self.div()
        k_now = (t - self.t_start) // div
        delta = (self.cc[n] - self.count(t)) & 0xFFFFFFFF
        if delta == 0:
            delta = 1 << 32
        when = self.t_start + (k_now + delta) * div
        gen = self.gen[n]

        def fire(t2: int) -> None:
            if self.gen[n] == gen:
                self.mem[self.compare_ev[n]] = 1
                self.node.event(self.compare_ev[n], t2)
                self._schedule(n, t2)   # the next match, one wrap later
        self.node.at(when, fire)

    def read(self, address: int) -> int:
        n = self.cc_index.get(address)
        return self.cc[n] if n is not None else super().read(address)

    def write(self, address: int, value: int, t: int) -> None:
        n = self.cc_index.get(address)
        if n is not None:
            self.cc[n] = value
            self._schedule(n, t)
            return
        if address == self.prescaler and self.running:
            raise SocFault(f"{self.periph}.PRESCALER written while the timer runs (PS: stop it first)")
        super().write(address, value, t)


class Ppi(Plain):
    def __init__(self, node: Node):
        super().__init__(node, "PPI")
        self.chen = 0

    def read(self, address: int) -> int:
        if address in (self.r("CHEN"), self.r("CHENSET"), self.r("CHENCLR")):
            return self.chen
        return super().read(address)

    def write(self, address: int, value: int, t: int) -> None:
        if address == self.r("CHEN"):
            self.chen = value
        elif address == self.r("CHENSET"):
            self.chen |= value
        elif address == self.r("CHENCLR"):
            self.chen &= ~value
        else:
            super().write(address, value, t)

    def fire(self, event: int, t: int) -> None:
        for ch in range(20):
            if self.chen >> ch & 1 and self.mem.get(self.r("CH_EEP", ch)) == event:
                tep = self.mem.get(self.r("CH_TEP", ch), 0)
                if tep:
                    self.node.task(tep, t)


class Radio(Plain):
    """The RADIO state machine of the PS for BLE 1M/2M: TXEN/RXEN -> ramp-up -> READY (-> START by
    shortcut) -> TX/RX -> END (-> DISABLE by shortcut) -> DISABLED; EasyDMA at PACKETPTR."""

    STATES = {"DISABLED": 0, "RXRU": 1, "RXIDLE": 2, "RX": 3, "RXDISABLE": 4, "TXRU": 9, "TXIDLE": 10,
              "TX": 11, "TXDISABLE": 12}

    def __init__(self, node: Node):
        super().__init__(node, "RADIO")
        self.state = "DISABLED"
        self.epoch = 0
        self.rx_since: int | None = None
        self.locked = False
        self.tx: Packet | None = None
        self._candidate: Packet | None = None   # the packet next_lock found, for lock
        self.crc_ok = 0
        self.ev = {e: self.r(f"EVENTS_{e}") for e in ("READY", "ADDRESS", "PAYLOAD", "END", "DISABLED")}
        self._mode_reg = self.r("MODE")
        # read or written at every poll of the radio: looked up in the SVD once
        self._state_reg, self._crcstatus_reg, self._packetptr_reg = self.r("STATE"), self.r("CRCSTATUS"), self.r("PACKETPTR")
        self._phys: dict[int, tuple[int, int]] = {}   # MODE register value -> _phy
        self.task_map({self.r("TASKS_TXEN"): lambda t: self.enable(t, "TX"),
                       self.r("TASKS_RXEN"): lambda t: self.enable(t, "RX"),
                       self.r("TASKS_START"): self.start,
                       self.r("TASKS_DISABLE"): self.disable})

    # configuration
    def _reg(self, name: str) -> int:
        return self.mem.get(self.r(name), 0)

    def _field(self, reg: str, fld: str) -> int:
        f = self.node.regs.svd["RADIO"].registers[reg].fields[fld]
        return self._reg(reg) >> f.pos & ((1 << f.width) - 1)

    def _phy(self) -> tuple[int, int]:
        """(cycles per byte, preamble bytes) of MODE. Asked at every register access while the radio
        receives: remembered per value of the MODE register."""
        raw = self.mem.get(self._mode_reg, 0)
        phy = self._phys.get(raw)
        if phy is None:
            phy = self._phys[raw] = self._decode_phy()
        return phy

    def _decode_phy(self) -> tuple[int, int]:
        mode = self._field("MODE", "MODE")
        if mode == self.node.regs.value("RADIO", "MODE", "MODE", "BLE_2MBIT"):
            return 4 * CYC_PER_US, 2
        if mode == self.node.regs.value("RADIO", "MODE", "MODE", "BLE_1MBIT"):
            return 8 * CYC_PER_US, 1
        raise SocFault(f"RADIO.MODE {mode}: this model knows BLE 1M and 2M only")

    def _setup(self, tx: bool) -> tuple:
        """What sender and receiver must share: address, frequency, PHY, framing, CRC, whitening
        (index CRC_INIT is the CRC's initial value), then the sender's logical address."""
        log_addr = self._field("TXADDRESS", "TXADDRESS") if tx else None
        return (self._reg("BASE0"), self._reg("PREFIX0") & 0xFF, self._reg("FREQUENCY"), self._reg("MODE"),
                self._reg("PCNF0"), self._reg("PCNF1") & ~0xFF, self._reg("CRCCNF"), self._reg("CRCPOLY"),
                self._reg("CRCINIT"), self._reg("DATAWHITEIV"), log_addr)

    def _ram(self, address: int, n: int, what: str) -> None:
        lo, hi = self.node.emu.memory.ram_range
        if not (lo <= address and address + n <= hi):
            raise SocFault(f"{what} at 0x{address:08x}: EasyDMA reaches RAM only (PS: EasyDMA)")

    # tasks
    def enable(self, t: int, kind: str) -> None:
        if self.state != "DISABLED":
            raise SocFault(f"RADIO TASKS_{kind}EN in state {self.state} (PS: only from DISABLED)")
        if not self.node.clock.running:
            raise SocFault(f"RADIO TASKS_{kind}EN before the HFXO runs (the RADIO needs HFCLK from the crystal)")
        if self._field("POWER", "POWER") != 1 and self.r("POWER") in self.mem:
            raise SocFault("RADIO enabled while POWER = 0")
        self.state = f"{kind}RU"
        self.epoch += 1
        e = self.epoch
        ramp = self._ramp(kind)
        self.node.at(t + ramp, lambda t2: e == self.epoch and self.ready(t2))
        if kind == "TX" and self._field("SHORTS", "READY_START"):
            # on the medium from now, a ramp-up before its first bit, so that every receiver knows
            # of it before its clock gets there; the frame is read again at START
            self.tx = self._packet(t + ramp)[0]
            self.node.medium.packets.append(self.tx)

    def _phy_name(self) -> str:
        return "2M" if self._phy()[1] == 2 else "1M"

    def _ramp(self, kind: str) -> int:
        """TXEN/RXEN -> READY: MODECNF0.RU Fast per PHY (Nordic's measured values), or Default."""
        if not self._field("MODECNF0", "RU"):
            return RAMP_DEFAULT
        return RAMP_TX_FAST[self._phy_name()] if kind == "TX" else RAMP_RX_FAST

    def _rx_chain(self) -> int:
        return RX_CHAIN[self._phy_name()]

    def ready(self, t: int) -> None:
        self.state = "TXIDLE" if self.state == "TXRU" else "RXIDLE"
        self.mem[self.ev["READY"]] = 1
        self.node.event(self.ev["READY"], t)
        if self._field("SHORTS", "READY_START"):
            self.start(t)

    def start(self, t: int) -> None:
        if self.state == "TXIDLE":
            self._transmit(t)
        elif self.state == "RXIDLE":
            self.state, self.rx_since, self.locked = "RX", t, False
        else:
            raise SocFault(f"RADIO TASKS_START in state {self.state}")

    def _transmit(self, t: int) -> None:
        p, t_addr, t_end = self._packet(t)
        if self.tx is not None and self.tx.t0 == p.t0:   # announced at TXEN: now with the frame as sent
            self.tx.frame, self.tx.t_addr, self.tx.t_end, self.tx.setup = p.frame, p.t_addr, p.t_end, p.setup
        else:
            self.tx = p
            self.node.medium.packets.append(p)
        self.state = "TX"
        if self.node.medium.trace is not None:
            self.node.medium.trace.append((p.t0 / CYC_PER_US, self.node.index, "tx", p.frame[2:6].hex()))
        e = self.epoch
        self.node.at(t_addr, lambda t2: e == self.epoch and self._address(t2))
        self.node.at(t_end, lambda t2: e == self.epoch and self._end(t2))

    def _packet(self, t: int) -> tuple[Packet, int, int]:
        """The frame at PACKETPTR sent from (node time) ``t``: the packet in the medium's time, and the
        node times of its ADDRESS and END."""
        ptr = self._reg("PACKETPTR")
        s0 = self._field("PCNF0", "S0LEN")
        lflen = self._field("PCNF0", "LFLEN")
        if lflen != 8 or self._field("PCNF0", "S1LEN"):
            raise SocFault("RADIO PCNF0: this model knows an 8-bit LENGTH and no S1")
        self._ram(ptr, s0 + 1, "RADIO.PACKETPTR")
        head = self.node.emu.read(ptr, s0 + 1)
        length = head[-1]
        maxlen = self._field("PCNF1", "MAXLEN")
        if length > maxlen:
            raise SocFault(f"RADIO sends LENGTH {length} > PCNF1.MAXLEN {maxlen}")
        self._ram(ptr, s0 + 1 + length, "RADIO.PACKETPTR")
        frame = self.node.emu.read(ptr, s0 + 1 + length)
        per_byte, pre = self._phy()
        alen = self._field("PCNF1", "BALEN") + 1
        crc = self._field("CRCCNF", "LEN")
        t = t + TX_CHAIN   # START -> the first bit on the air
        t_addr = t + (pre + alen) * per_byte
        t_end = t_addr + (len(frame) + crc) * per_byte
        g = self.node.to_global
        return Packet(self.node.index, g(t), g(t_addr), g(t_end), frame, self._setup(True)), t_addr, t_end

    def disable(self, t: int) -> None:
        if self.state == "DISABLED":
            return
        if self.tx is not None and self.state in ("TXRU", "TXIDLE", "TX"):
            self.tx.cut = self.node.to_global(t)   # cut on air, or never sent
        was_tx = self.state.startswith("TX")
        self.state = "TXDISABLE" if was_tx else "RXDISABLE"
        self.epoch += 1
        self.rx_since, self.tx = None, None
        e = self.epoch

        def disabled(t2: int) -> None:
            if e == self.epoch:
                self.state = "DISABLED"
                self.mem[self.ev["DISABLED"]] = 1
                self.node.event(self.ev["DISABLED"], t2)
        self.node.at(t + (TX_DISABLE if was_tx else 0), disabled)

    # reception
    def next_lock(self, now: int) -> int | None:
        """When this receiver's ADDRESS event comes (<= now), if a packet it can hear started while it listened."""
        if self.state != "RX" or self.locked or self.rx_since is None:
            return None
        best = None
        loc = self.node.to_local
        chain = self._rx_chain()
        for p in self.node.medium.packets:
            if p.sender != self.node.index and loc(p.t0) >= self.rx_since and loc(p.t_addr) + chain <= now:
                if best is None or p.t0 < best.t0:
                    best = p
        if best is None:
            return None
        self._candidate = best
        return loc(best.t_addr) + chain

    def earliest_lock(self) -> int | None:
        """When the next ADDRESS event of a packet already on the medium could come, whenever that is."""
        if self.state != "RX" or self.locked or self.rx_since is None:
            return None
        loc = self.node.to_local
        chain = self._rx_chain()
        times = [loc(p.t_addr) + chain for p in self.node.medium.packets
                 if p.sender != self.node.index and loc(p.t0) >= self.rx_since]
        return min(times) if times else None

    def lock(self, t: int) -> None:
        p = self._candidate
        self.locked = True
        rx_setup = self._setup(False)
        air = [i for i in range(len(rx_setup) - 1) if i != CRC_INIT]
        hears = (all(p.setup[i] == rx_setup[i] for i in air)
                 and self._field("RXADDRESSES", f"ADDR{p.setup[-1]}") == 1
                 and (p.cut is None or p.cut > p.t_addr)
                 and self.node.medium.rng.random() >= self.node.medium.loss
                 and not any(a * CYC_PER_US <= p.t0 < b * CYC_PER_US for a, b in self.node.medium.outages))
        if not hears:  # nothing it can decode: keeps listening for the next packet
            self.locked = False
            self.rx_since = self.node.to_local(p.t0) + 1
            return
        self.mem[self.ev["ADDRESS"]] = 1
        self.node.event(self.ev["ADDRESS"], t)
        e = self.epoch

        def end(t2: int) -> None:
            if e != self.epoch:
                return
            # decided now: every packet that starts before this one ends is on the medium by then
            collided = any(q is not p and q.sender != self.node.index and q.t0 < p.t_end and p.t0 < q.t_end
                           and (q.cut is None or q.cut > q.t0) for q in self.node.medium.packets)
            # another CRC initial value: the packet is received, and fails its CRC
            ok = not collided and (p.cut is None or p.cut >= p.t_end) and p.setup[CRC_INIT] == rx_setup[CRC_INIT]
            ptr = self._reg("PACKETPTR")
            maxlen = self._field("PCNF1", "MAXLEN")
            s0 = self._field("PCNF0", "S0LEN")
            frame = p.frame if p.frame[s0] <= maxlen else p.frame[:s0] + bytes([maxlen]) + p.frame[s0 + 1:s0 + 1 + maxlen]
            self._ram(ptr, len(frame), "RADIO.PACKETPTR")
            self.node.emu.write(ptr, frame)
            self.crc_ok = int(ok and p.frame[s0] <= maxlen)
            if self.node.medium.trace is not None:
                what = "rx" if self.crc_ok else "rx-crc"
                self.node.medium.trace.append((self.node.to_global(t2) / CYC_PER_US, self.node.index, what,
                                               f"from {p.sender} {p.frame[2:6].hex()}"))
            self._end(t2)
        self.node.at(self.node.to_local(p.t_end) + self._rx_chain(), end)

    def _address(self, t: int) -> None:
        self.mem[self.ev["ADDRESS"]] = 1
        self.node.event(self.ev["ADDRESS"], t)

    def _end(self, t: int) -> None:
        self.mem[self.ev["END"]] = 1
        self.node.event(self.ev["END"], t)
        self.state = "TXIDLE" if self.state == "TX" else "RXIDLE"
        self.tx = None
        if self._field("SHORTS", "END_DISABLE"):
            self.disable(t)

    def read(self, address: int) -> int:
        if address == self._state_reg:
            return self.STATES[self.state]
        if address == self._crcstatus_reg:
            return self.crc_ok
        return super().read(address)

    def write(self, address: int, value: int, t: int) -> None:
        if address == self._packetptr_reg and self.state in ("TX", "RX"):
            raise SocFault("RADIO.PACKETPTR written during a packet")
        super().write(address, value, t)


class Uarte(Plain):
    """UARTE0 transmit by EasyDMA: ENDTX when the last byte's stop bit is out at BAUDRATE."""

    def __init__(self, node: Node):
        super().__init__(node, "UARTE0")
        self.busy_until = 0
        self.task_map({self.r("TASKS_STARTTX"): self.start_tx, self.r("TASKS_STOPRX"): self.stop_rx,
                       self.r("TASKS_FLUSHRX"): self.flush_rx, self.r("TASKS_STARTRX"): lambda t: None})

    def start_tx(self, t: int) -> None:
        if self.mem.get(self.r("ENABLE"), 0) != 8:
            raise SocFault("UARTE0 TASKS_STARTTX while the UARTE is not enabled")
        ptr, n = self.mem.get(self.r("TXD_PTR"), 0), self.mem.get(self.r("TXD_MAXCNT"), 0) & 0xFFFF
        lo, hi = self.node.emu.memory.ram_range
        if not (lo <= ptr and ptr + n <= hi):
            raise SocFault(f"UARTE0 TXD.PTR 0x{ptr:08x}: EasyDMA reaches RAM only")
        if t < self.busy_until:
            raise SocFault("UARTE0 TASKS_STARTTX while a transfer is running")
        data = self.node.emu.read(ptr, n)
        baud = self.mem.get(self.r("BAUDRATE"), 0) * 16_000_000 / 2 ** 32
        if baud <= 0:
            raise SocFault("UARTE0 BAUDRATE not set")
        done = t + int(n * 10 * CPU_HZ / baud)
        self.busy_until = done

        def end(t2: int) -> None:
            self.node.serial += data
            self.node.changed = True
            self.mem[self.r("TXD_AMOUNT")] = n
            self.mem[self.r("EVENTS_ENDTX")] = 1
            self.node.event(self.r("EVENTS_ENDTX"), t2)
        self.node.at(done, end)

    def stop_rx(self, t: int) -> None:
        self.mem[self.r("EVENTS_RXTO")] = 1

    def flush_rx(self, t: int) -> None:
        self.mem[self.r("RXD_AMOUNT")] = 0
        self.mem[self.r("EVENTS_ENDRX")] = 1


class Nvmc(Plain):
    """NVMC: READY always (a UICR word write is instant here), CONFIG held, and ICACHECNF.CACHEEN,
    which switches the node's instruction cache: reset value Disabled (nrf52840.svd resetValue 0),
    so until the start-up code enables it every instruction fetch is priced as a flash access (the
    budgets in board.toml assume the cache on)."""

    def __init__(self, node: Node):
        super().__init__(node, "NVMC")
        self.icachecnf = self.r("ICACHECNF")
        self.cacheen = 1 << node.regs.svd["NVMC"].registers["ICACHECNF"].fields["CACHEEN"].pos
        node.emu.set_icache_enabled(False)

    def write(self, address: int, value: int, t: int) -> None:
        super().write(address, value, t)
        if address == self.icachecnf:
            self.node.emu.set_icache_enabled(bool(value & self.cacheen))

    @property
    def cache_enabled(self) -> bool:
        return bool(self.mem.get(self.icachecnf, 0) & self.cacheen)


class Watchdog(Plain):
    """WDT: once started it counts 32.768 kHz ticks down from CRV; writing 0x6E524635 to every enabled
    RR[n] reloads it. At zero the part resets (RESETREAS.DOG) two ticks later. CRV, RREN and CONFIG are
    locked while it runs. With CONFIG.SLEEP = Pause it does not count while the CPU sleeps (it reached a
    WFE, and cisl's images sleep for good there): it then looks again one period later."""

    RELOAD = 0x6E524635

    def __init__(self, node: Node):
        super().__init__(node, "WDT")
        self.running = False
        self.requested = 0
        self.expires: int | None = None
        self.mem.update({self.r("CRV"): 0xFFFFFFFF, self.r("RREN"): 1, self.r("CONFIG"): 1})   # reset values
        self.rr = [self.r("RR", n) for n in range(8)]
        self.locked = {self.r("CRV"), self.r("RREN"), self.r("CONFIG")}
        self.task_map({self.r("TASKS_START"): self.start})

    def read(self, address: int) -> int:
        if address == self.r("RUNSTATUS"):
            return int(self.running)
        if address == self.r("REQSTATUS"):
            return self.mem[self.r("RREN")] & ~self.requested & 0xFF if self.running else 0
        return 0 if address in self.rr else super().read(address)

    def write(self, address: int, value: int, t: int) -> None:
        if address in self.rr:
            n, rren = self.rr.index(address), self.mem[self.r("RREN")]
            if self.running and value == self.RELOAD and (rren >> n) & 1:
                self.requested |= 1 << n
                if self.requested & rren == rren:
                    self.requested = 0
                    self._arm(t)
            return
        if self.running and address in self.locked:
            return
        super().write(address, value, t)

    def start(self, t: int) -> None:
        if not self.running:
            self.running = True
            self._arm(t)

    def _arm(self, t: int) -> None:
        self.expires = t + round((self.mem[self.r("CRV")] + 1) * LFCLK_TICK)
        self.node.at(self.expires, self._expire)

    def _expire(self, t: int) -> None:
        if t != self.expires:
            return  # reloaded since
        if self.mem[self.r("CONFIG")] & 1 == 0 and self.node.asleep:
            self._arm(t)
            return
        self.mem[self.r("EVENTS_TIMEOUT")] = 1
        self.node.watchdog_reset = t + round(WDT_RESET_TICKS * LFCLK_TICK)
        self.node.done = True
        self.node.emu.uc.emu_stop()


class Dwt(Device):
    """DWT.CYCCNT: the CPU cycles since it was written."""

    def __init__(self, node: Node):
        self.node, self.base, self.size = node, 0xE0001000, PAGE
        self.zero, self.ctrl = 0, 0

    def read(self, address: int) -> int:
        if address == 0xE0001004:
            return self.node.now() - self.zero if self.ctrl & 1 else 0
        return self.ctrl if address == 0xE0001000 else 0

    def write(self, address: int, value: int, t: int) -> None:
        if address == 0xE0001004:
            self.zero = t - value
        elif address == 0xE0001000:
            self.ctrl = value


@dataclass
class NetworkRun:
    serial: dict[int, str]     # node -> what its UART sent
    faults: list[str]
    emulated_us: float
    insns: dict[int, int] = field(default_factory=dict)           # node -> instructions counted
    skipped_passes: dict[int, int] = field(default_factory=dict)  # node -> polling-loop passes not run
    clock_rewinds: dict[int, int] = field(default_factory=dict)   # node -> clock-loop jumps taken back
    icache_on: dict[int, bool] = field(default_factory=dict)      # node -> NVMC.ICACHECNF.CACHEEN at the end
    icache_misses: dict[int, int] = field(default_factory=dict)   # node -> fetches priced as flash accesses


def run_network(images: list[Path], memory: MemoryModel, *, until: Callable[[dict[int, str]], bool],
                limit_s: float = 2.0, loss: float = 0.0, seed: int = 0,
                boot_offsets_us: list[int] | None = None, trace: list | None = None,
                outages: list[tuple[float, float]] = (), fast_forward: bool = True,
                drift_ppm: list[float] | None = None, resets: list[tuple[int, float]] = (),
                hangs: list[tuple[int, float]] = ()) -> NetworkRun:
    """Run the images (node i = images[i]) together from reset until ``until(serial text per node)``
    holds, a node faults, or ``limit_s`` of emulated time passes. ``outages``: (start, end) µs
    windows in which the medium loses every packet. ``fast_forward=False`` runs every pass of the
    polling loops (for checking that skipping them changes nothing). ``drift_ppm``: each node's
    crystal error; a node with +50 runs 50 cycles more per million of true time than nominal, its
    TIMERs and its radio's bit times with it (offsets, limits and outages are in true time).
    ``resets``: (node, µs) — that node resets at that true time (reset pin, watchdog, a power cycle):
    it starts again from its reset vector, RAM and peripherals as at power-on, a packet it was sending
    cut off; its serial output goes on on the same port, as a host would read it; POWER.RESETREAS
    reads 0. ``hangs``: (node, µs) — that node's CPU takes a fault at that true time (as a HardFault
    would) and stays in the image's fault handler; its watchdog, if the image started it, resets it
    (RESETREAS.DOG, the same start again as ``resets``)."""
    regs = load_regs()
    medium = Medium(loss=loss, seed=seed, trace=trace, outages=tuple((float(a), float(b)) for a, b in outages))
    # each part has its own flash read buffer and cache: sharing one model let a node's fetches evict the other's
    ppm = list(drift_ppm) if drift_ppm is not None else [0.0] * len(images)
    if len(ppm) != len(images):
        raise ValueError(f"drift_ppm has {len(ppm)} values for {len(images)} nodes")
    def power_on(i: int, at: int) -> Node:
        n = Node(i, images[i], copy.deepcopy(memory), regs, medium, ppm=ppm[i])
        n.emu.fast_forward = fast_forward
        n.emu.central_total = n.to_local(at)   # a node reset later starts executing later
        return n

    def reset(i: int, at: int, resetreas: int = 0) -> None:
        old = nodes[i]
        if old.radio.tx is not None and old.radio.tx.cut is None:
            old.radio.tx.cut = at
        nodes[i] = power_on(i, at)
        nodes[i].clock.mem[nodes[i].clock.resetreas] = resetreas
        nodes[i].serial = old.serial
        nodes[i].changed = True

    offsets = [o * CYC_PER_US for o in (boot_offsets_us or [0] * len(images))]
    nodes = [power_on(i, o) for i, o in enumerate(offsets)]
    pending = sorted((int(us * CYC_PER_US), i) for i, us in resets)
    hanging = sorted((int(us * CYC_PER_US), i) for i, us in hangs)
    dog = regs.value("POWER", "RESETREAS", "DOG", "DETECTED") << regs.svd["POWER"].registers["RESETREAS"].fields["DOG"].pos
    t = 0
    limit = int(limit_s * CPU_HZ)
    while t < limit:
        t += QUANTUM
        while pending and pending[0][0] <= t:
            at, i = pending.pop(0)
            reset(i, at)
        while hanging and hanging[0][0] <= t:
            nodes[hanging.pop(0)[1]].hang()
        for i, n in enumerate(nodes):
            n.run_until(n.to_local(t))
            if n.watchdog_reset is not None:
                reset(i, n.to_global(n.watchdog_reset), dog)
        medium.prune(t - 4000 * CYC_PER_US)
        faults = [n.fault for n in nodes if n.fault]
        if faults or any(n.changed for n in nodes):
            for n in nodes:
                n.changed = False
            serial = {n.index: n.serial.decode("ascii", "replace") for n in nodes}
            if faults or until(serial):
                return _result(nodes, serial, faults, t)
    serial = {n.index: n.serial.decode("ascii", "replace") for n in nodes}
    return _result(nodes, serial, [f"not finished after {limit_s} s of emulated time"], t)


def _result(nodes: list[Node], serial: dict[int, str], faults: list[str], t: int) -> NetworkRun:
    return NetworkRun(serial, faults, t / CYC_PER_US, {n.index: n.emu.insns_total for n in nodes},
                      {n.index: n.emu.skipped_passes for n in nodes}, {n.index: n.emu.clock_rewinds for n in nodes},
                      {n.index: n.nvmc.cache_enabled for n in nodes},
                      {n.index: n.emu.total().icache_misses for n in nodes})


__all__ = ["Node", "NetworkRun", "SocFault", "run_network", "load_regs"]
