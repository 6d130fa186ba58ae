"""Cortex-M4(F) instruction timing: every Thumb-2 instruction classified and costed in cycles.

Source: ARM Cortex-M4 Technical Reference Manual (r0p1), Table 3-1 "Cortex-M4 instruction set
summary", and its FPU chapter (FPv4-SP instruction timing), on a system with zero wait states.
The part's memory system (flash wait states, instruction cache) is added on top by
:mod:`codegen.timing.memsystem`, from the addresses the image really touches.

Every cost is a (low, central, high) triple, because the TRM gives ranges where the timing
depends on data or on the pipeline:

* ``P``, the pipeline refill after a taken branch, is 1..3 ("depending on the alignment and width
  of the target instruction, and whether the processor manages to speculate the address early").
  It is not part of a block's static cost: the engine adds it when it sees where execution went
  (taken or not), with P = 1 for a word-aligned or 16-bit target and 2 otherwise as the central
  value (:func:`refill_cycles`).
* Loads: LDR is 2 cycles, but "neighbouring load and store single instructions can pipeline their
  address and data phases", so N consecutive independent loads take N + 1 (each load after the
  first costs 1). A load whose address register is written by the load right before it cannot
  pipeline and costs 2, and nothing pipelines after a store (a load after STR costs 2). STR is 1
  (its data phase overlaps the next instruction; 2 at the high bound, for a store followed by a
  dependent access or a full write buffer).
* TBB/TBH: 2 + P. VLDM/VSTM/VPUSH/VPOP: 1 + N 32-bit transfers (a D register counts twice).
* SDIV/UDIV: 2..12 (early termination on the operands' magnitudes); central 7.
* IT: 1, "can be folded onto a preceding 16-bit Thumb instruction" (0 at the low bound).
* VDIV/VSQRT 14, VMLA/VMLS/VFMA 3, other FPU data processing 1, VLDR/VSTR 2, VLDM/VSTM/VPUSH/VPOP
  1 + N, VMOV core<->FPU 1 (a pair 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from capstone import CS_ARCH_ARM, CS_MODE_MCLASS, CS_MODE_THUMB, Cs
from capstone import arm as cs_arm

# branch kinds at the end of a block
BR_NONE, BR_ALWAYS, BR_COND = 0, 1, 2

_LOAD_SINGLE = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrex", "ldrexb", "ldrexh", "ldrt", "ldrbt", "ldrht",
                "ldrsbt", "ldrsht"}
_STORE_SINGLE = {"str", "strb", "strh", "strex", "strexb", "strexh", "strt", "strbt", "strht"}
_DIV = {"sdiv", "udiv"}
_FP_3 = {"vmla", "vmls", "vnmla", "vnmls", "vfma", "vfms", "vfnma", "vfnms"}
_FP_14 = {"vdiv", "vsqrt"}
_BARRIER = {"dsb", "dmb", "isb"}
_COND_CODES = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le")


@dataclass(frozen=True)
class Insn:
    """One decoded instruction and its static cost."""

    address: int
    size: int
    mnemonic: str   # base mnemonic: condition code, .w/.n and width suffixes stripped
    cls: str        # timing class (alu, mul, div, load, store, ldm, stm, branch, fpu, ...)
    low: int
    central: float
    high: int


@dataclass(frozen=True)
class Block:
    """A straight run of instructions as the emulator executes it, with its static cost.

    ``low/central/high`` exclude the refill of a taken branch at its end (the engine adds
    :func:`refill_cycles` when it sees the branch taken). ``branch`` says how the block ends:
    ``BR_ALWAYS`` (B, BL, BX, POP {pc}, LDR pc, TBB: the refill is always paid), ``BR_COND``
    (B<c>, CBZ/CBNZ: paid only if taken) or ``BR_NONE``."""

    address: int
    size: int
    insns: tuple[Insn, ...]
    low: int
    central: float
    high: int
    branch: int
    fallthrough: int

    @property
    def count(self) -> int:
        return len(self.insns)


_DECODER: Decoder | None = None


@functools.lru_cache(maxsize=1 << 16)
def _decoded(code: bytes, address: int) -> Block:
    """A block is immutable and a function of its bytes and address alone: decoded once per process
    (each emulated node, and each power-on of one, met the same few thousand blocks again: ~0.2 ms each)."""
    global _DECODER
    if _DECODER is None:
        _DECODER = Decoder()
    return _DECODER._decode(code, address)


def _base(mnemonic: str) -> str:
    m = mnemonic.lower().split(".")[0]
    return m


def _strip_cond(m: str, cond: int) -> str:
    """Drop a condition suffix (capstone keeps e.g. 'addeq', 'bne', 'it' variants like 'itte')."""
    if cond not in (cs_arm.ARM_CC_AL, cs_arm.ARM_CC_INVALID) and len(m) > 2 and m[-2:] in _COND_CODES:
        return m[:-2]
    return m


class Decoder:
    """Capstone for ARMv7E-M Thumb-2 with the M4's timing classes."""

    def __init__(self) -> None:
        self.cs = Cs(CS_ARCH_ARM, CS_MODE_THUMB | CS_MODE_MCLASS)
        self.cs.detail = True

    def block(self, code: bytes, address: int) -> Block:
        """Decode and cost the block of ``code`` at ``address`` (the emulator's translation block)."""
        return _decoded(bytes(code), address)

    def _decode(self, code: bytes, address: int) -> Block:
        insns: list[Insn] = []
        prev_load_dst: int | None = None
        prev_mem = False  # the previous instruction was a single load (a load after it can pipeline)
        end = address
        last = None
        for ins in self.cs.disasm(code, address):
            cost, cls, is_mem, load_dst = self._cost(ins, prev_mem, prev_load_dst)
            insns.append(Insn(ins.address, ins.size, _base(ins.mnemonic), cls, *cost))
            prev_mem, prev_load_dst = is_mem, load_dst
            end = ins.address + ins.size
            last = ins
        if last is None:
            raise ValueError(f"no instruction decodes at 0x{address:08x}")
        branch = self._branch_kind(last)
        low = sum(i.low for i in insns)
        central = sum(i.central for i in insns)
        high = sum(i.high for i in insns)
        return Block(address, end - address, tuple(insns), low, central, high, branch, end)

    # -- classification ---------------------------------------------------------------------

    @staticmethod
    def _writes_pc(ins) -> bool:
        regs_written = ins.regs_access()[1]
        return cs_arm.ARM_REG_PC in regs_written

    def _branch_kind(self, ins) -> int:
        m = _strip_cond(_base(ins.mnemonic), ins.cc)
        conditional = ins.cc not in (cs_arm.ARM_CC_AL, cs_arm.ARM_CC_INVALID)
        if m in ("cbz", "cbnz"):
            return BR_COND
        if m in ("b", "bl", "bx", "blx", "tbb", "tbh") or self._writes_pc(ins):
            return BR_COND if conditional else BR_ALWAYS
        return BR_NONE

    def _cost(self, ins, prev_mem: bool, prev_load_dst: int | None):
        """((low, central, high), class, is_single_load_store, load destination register)."""
        m = _strip_cond(_base(ins.mnemonic), ins.cc)
        ops = ins.operands
        if m.startswith("it") and len(m) <= 5 and all(c in "te" for c in m[2:]):
            return (0, 1, 1), "it", False, None
        if m in _LOAD_SINGLE or m in ("ldrd", "ldrexd"):
            base_reg = next((o.mem.base for o in ops if o.type == cs_arm.ARM_OP_MEM), None)
            dst = ops[0].reg if ops and ops[0].type == cs_arm.ARM_OP_REG else None
            if dst == cs_arm.ARM_REG_PC:  # LDR pc: a blocking load plus a refill (added at the branch)
                return (2, 2, 2), "load_pc", False, None
            dependent = prev_load_dst is not None and base_reg == prev_load_dst
            if m in ("ldrd", "ldrexd"):
                first = 3 if (not prev_mem or dependent) else 2
                return (2, first, 3), "load", True, None
            cost = 2 if (not prev_mem or dependent) else 1
            # PC-relative literal loads can contend with instruction fetch: one more at the high bound
            high = 3 if base_reg == cs_arm.ARM_REG_PC else 2
            return (1 if prev_mem else 2, cost, high), "load", True, dst
        if m in _STORE_SINGLE or m in ("strd", "strexd"):
            n = 2 if m in ("strd", "strexd") else 1
            # TRM: a store pipelines after a load, but nothing pipelines after a store
            return (n, n, n + 1), "store", False, None
        if m in ("ldm", "ldmia", "ldmdb", "ldmea", "ldmfd", "pop"):
            n = sum(1 for o in ops if o.type == cs_arm.ARM_OP_REG) - (0 if m == "pop" else 1)
            n = max(n, 1)
            return (1 + n, 1 + n, 1 + n), "ldm", False, None
        if m in ("stm", "stmia", "stmdb", "stmea", "stmfd", "push"):
            n = sum(1 for o in ops if o.type == cs_arm.ARM_OP_REG) - (0 if m == "push" else 1)
            n = max(n, 1)
            return (1 + n, 1 + n, 1 + n), "stm", False, None
        if m in _DIV:
            return (2, 7, 12), "div", False, None
        if m in ("tbb", "tbh"):
            return (2, 2, 2), "branch", False, None  # TRM: 2 + P; the refill is added at the branch
        if m in ("b", "bl", "bx", "blx", "cbz", "cbnz"):
            return (1, 1, 1), "branch", False, None
        if m in _BARRIER:
            return (1, 2, 4), "barrier", False, None
        if m.startswith("v"):
            return self._fpu(m, ops)
        if m in ("mul", "mla", "mls", "smull", "umull", "smlal", "umlal") or m.startswith("smla") or \
                m.startswith("smul") or m.startswith("smls") or m.startswith("smmu") or m.startswith("smml") or \
                m in ("umaal", "smuad", "smuadx", "smusd", "smusdx"):
            return (1, 1, 1), "mul", False, None
        if m.startswith("sxta") or m.startswith("uxta") or m.startswith("sxt") or m.startswith("uxt"):
            return (1, 1, 1), "extend", False, None
        if m.startswith("q") or m.startswith("uq") or m.startswith("sat") or m in ("ssat", "usat", "ssat16",
                                                                                     "usat16"):
            return (1, 1, 1), "saturate", False, None
        if m in ("mrs", "msr", "cpsid", "cpsie"):
            return (1, 1, 2), "system", False, None
        return (1, 1, 1), "alu", False, None

    @staticmethod
    def _fpu(m: str, ops):
        if m in _FP_14:
            return (14, 14, 14), "fpu_div", False, None
        if m in _FP_3:
            return (3, 3, 3), "fpu_mac", False, None
        if m in ("vldr", "vstr"):
            return (2, 2, 2), "fpu_mem", False, None
        if m in ("vldm", "vldmia", "vldmdb", "vstm", "vstmia", "vstmdb", "vpush", "vpop"):
            regs = [o.reg for o in ops if o.type == cs_arm.ARM_OP_REG][(0 if m in ("vpush", "vpop") else 1):]
            # 1 + N 32-bit transfers: a D register is two of them
            words = sum(2 if cs_arm.ARM_REG_D0 <= r <= cs_arm.ARM_REG_D31 else 1 for r in regs)
            return (1 + max(words, 1),) * 3, "fpu_mem", False, None
        if m == "vmov" and sum(1 for o in ops if o.type == cs_arm.ARM_OP_REG) >= 3:
            return (2, 2, 2), "fpu", False, None
        return (1, 1, 1), "fpu", False, None


def refill_cycles(target: int, target_is_32bit: bool) -> tuple[int, int, int]:
    """Cycles of a taken branch's pipeline refill P (TRM: 1..3), central by the target's alignment."""
    central = 1 if (target % 4 == 0 or not target_is_32bit) else 2
    return 1, central, 3
