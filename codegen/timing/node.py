"""Cycles of one node's whole schedule: its real ARM image on the cycle model, checked bit-exact.

The node's image (``node_NN/firmware.elf`` of an nrf52840dk or qemu-m4 build) runs from
``cisl_run`` (the runtime's loop over the node library, as every board's main() calls it) on
:class:`codegen.timing.engine.Emulator`. The board layer is replaced at its interface: ``cisl_board_next_input`` hands in the quantised input windows, ``cisl_transport_round``
records what the node sends and hands it, through the node's own receive callback, exactly the
messages the numpy int8 reference says it receives (as `cisl qemu` does), ``cisl_board_cycles`` /
``cisl_board_time_us`` read the model's running cycle count, ``cisl_board_read`` has no host input and ``cisl_board_write`` collects the
serial lines. Every message the node sends and the sink's forecast are compared with the
reference byte for byte: a cycle count is only reported for a run that computed the right thing.

Cycles are attributed to the schedule's ops (plan.json op indices) through the DWARF line table of
``cisl_node.c``: the generated schedule marks every op with a ``/* [i] ... */`` comment, and a
block of code whose source line falls in op i's lines (and everything it calls) counts for op i.
Work inside the receive callback is communication (the firmware's block timer takes it out too).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from elftools.elf.elffile import ELFFile

from ..boards import load_board
from ..errors import CheckFailed, UserError
from ..executor import RunResult
from ..plan.io import Plan
from ..transcript import node_exchanges
from ..serial_contract import outputs_by_inference, parse_text
from .engine import SCRATCH, SCRATCH_SIZE, Counts, Emulator, Image
from .memsystem import MemoryModel
from .native import new_emulator

OP_MARK = re.compile(r"^\s*/\* \[(\d+)\] ")
RUNTIME = "runtime"  # code outside the schedule's ops: the input loop, boot and infer reports


@dataclass
class NodeCycles:
    """One node's cycles per op (compute) and per op of the communication callbacks."""

    device: int
    inferences: int
    ops: dict[object, Counts]        # op index (or RUNTIME) -> counts over all inferences
    comm_ops: dict[object, Counts]   # work inside the transport's callbacks
    memory: MemoryModel
    lines: list[str] = field(default_factory=list)  # the serial lines the image printed
    messages_checked: int = 0
    insns: int = 0

    def op_cycles(self, op: object) -> tuple[float, float, float]:
        """Cycles of one op per inference (low, central, high)."""
        c = self.ops.get(op)
        if c is None:
            return 0.0, 0.0, 0.0
        return tuple(v / self.inferences for v in c.cycles(self.memory))  # type: ignore[return-value]


def op_line_ranges(source: str) -> list[tuple[int, int]]:
    """(first line, op index) of every op's code in a generated cisl_node.c (1-based lines)."""
    out = []
    for n, line in enumerate(source.splitlines(), start=1):
        m = OP_MARK.match(line)
        if m:
            out.append((n, int(m.group(1))))
    return out


def schedule_lookup(elf_path: Path, source_path: Path):
    """A function address -> op index (or None) from the DWARF line table of cisl_node.c."""
    marks = op_line_ranges(source_path.read_text())
    if not marks:
        raise UserError(f"{source_path}: no op markers; regenerate it with `cisl compile`")
    mark_lines = [m[0] for m in marks]
    infer_end = _function_end_line(source_path.read_text(), mark_lines[-1])
    rows: list[tuple[int, int | None]] = []
    spans: list[tuple[int, int]] = []  # address ranges of cisl_node.c's code (line-program sequences)
    with open(elf_path, "rb") as f:
        elf = ELFFile(f)
        if not elf.has_dwarf_info():
            raise UserError(f"{elf_path}: no debug information; the cycle model needs the build's -g")
        dwarf = elf.get_dwarf_info()
        for cu in dwarf.iter_CUs():
            name = cu.get_top_DIE().attributes.get("DW_AT_name")
            if name is None or not name.value.decode(errors="replace").endswith("cisl_node.c"):
                continue
            lp = dwarf.line_program_for_CU(cu)
            files = lp["file_entry"]
            seq_start = None
            for entry in lp.get_entries():
                st = entry.state
                if st is None:
                    continue
                if st.end_sequence:
                    if seq_start is not None:
                        spans.append((seq_start, st.address))
                    seq_start = None
                    continue
                if seq_start is None:
                    seq_start = st.address
                fname = files[st.file - 1].name.decode(errors="replace") if 0 < st.file <= len(files) else ""
                if not fname.endswith("cisl_node.c"):
                    rows.append((st.address, None))
                    continue
                line = st.line
                if line < mark_lines[0] or line > infer_end:
                    rows.append((st.address, RUNTIME))
                else:
                    k = bisect.bisect_right(mark_lines, line) - 1
                    rows.append((st.address, marks[k][1]))
    if not rows:
        raise UserError(f"{elf_path}: no line table for cisl_node.c; rebuild with `cisl build`")
    rows.sort(key=lambda r: r[0])
    addrs = [r[0] for r in rows]

    def lookup(address: int):
        if not any(lo <= address < hi for lo, hi in spans):
            return None  # another file's code (a kernel): it counts for the op that called it
        i = bisect.bisect_right(addrs, address) - 1
        if i < 0:
            return None
        # several rows may share an address: the last one wins (the statement that starts there)
        return rows[i][1]

    return lookup


def _function_end_line(source: str, last_mark: int) -> int:
    """The line of `return CISL_OK;` that ends cisl_infer after the last op marker."""
    lines = source.splitlines()
    for n in range(last_mark, len(lines)):
        if lines[n].strip() == "return CISL_OK;":
            return n + 1
    return len(lines)


def run_node(build_dir: Path, plan: Plan, device: int, xq: np.ndarray, ref: RunResult, image_path: Path,
             memory: MemoryModel | None = None, mode: int | None = None) -> NodeCycles:
    """Run node ``device``'s image over all windows of ``xq``; raise CheckFailed unless bit-exact.
    ``mode``: an image holding every elastic mode runs that mode (``plan`` and ``ref`` are its): the
    control round announces it, and the mode's exchanges are numbered after the smaller modes'."""
    board = load_board(plan.node_board(device))  # a virtual board's images stand in for a real one
    memory = memory or MemoryModel.for_board(board)
    clock = float(board.facts["board"]["clock_hz"])
    image = Image.load(image_path)
    em = new_emulator(image, memory)
    em.set_region_lookup(schedule_lookup(image_path, Path(build_dir) / f"node_{device:02d}" / "cisl_node.c"))
    exchanges = node_exchanges(plan, device)
    base = (mode or 0) * len(plan.sgs)  # the image's number of the mode's exchange 0
    out_text = bytearray()
    state = {"inf": 0, "xch": 0, "checked": 0, "error": None}
    n = len(xq)

    def next_input(e: Emulator) -> int:
        dst, length = e.arg(0), e.arg(1)
        i = state["inf"]
        if i >= n:
            return 0
        if length != xq.shape[1]:
            state["error"] = f"node {device} asks for {length} input values, the plan has {xq.shape[1]}"
            return 0
        e.write(dst, xq[i].astype(np.int8).tobytes())
        state["xch"] = 0
        state["inf"] = i + 1
        return 1

    def transport_round(e: Emulator):
        # arguments: sg, inference, msg, len, dest (broadcast: unused here), on_rx, ctx
        sg, inference, msg, length, on_rx, ctx = (e.arg(0) & 0xFFFF, e.arg(1), e.arg(2), e.arg(3), e.arg(5),
                                                  e.arg(6))
        sg -= base
        i = state["inf"] - 1
        k = state["xch"]
        state["xch"] = k + 1
        if state["error"] is None:
            if k >= len(exchanges) or inference != i or sg != exchanges[k][0]:
                want = exchanges[k][0] if k < len(exchanges) else None
                state["error"] = f"node {device} ran exchange {sg} of inference {inference}, expected {want} of {i}"
            else:
                sent = e.read(msg, length) if length else b""
                want = ref.payloads.get((sg, device))
                want_bytes = want[i].tobytes() if want is not None else b""
                if sent != want_bytes:
                    state["error"] = (f"inference {i}, node {device}, exchange {sg}: the message differs from the "
                                      f"numpy int8 reference")
                else:
                    state["checked"] += 1
        calls = []
        if on_rx and k < len(exchanges):
            off = 0
            for j in exchanges[k][1]:
                ok = ref.delivered.get((sg, device, j))
                if ok is not None and not bool(ok[i]):
                    continue
                data = ref.payloads[(sg, j)][i].tobytes()
                if off + len(data) > SCRATCH_SIZE:
                    raise UserError(f"node {device}: exchange {sg} receives more than {SCRATCH_SIZE} B")
                e.write(SCRATCH + off, data)
                calls.append((on_rx & ~1, [ctx, j, SCRATCH + off, len(data)]))
                off += (len(data) + 3) & ~3
        e.call_back(calls, 0)
        return None

    def radio_not_counted(e: Emulator) -> int:
        # as the nrf52840dk HAL (the runtime's weak default): no radio-on count, the sg keys left out
        e.write(e.arg(0), bytes(4))
        e.write(e.arg(1), bytes(4))
        return 0

    def board_write(e: Emulator) -> int:
        out_text.extend(e.read(e.arg(0), e.arg(1)))
        return 0

    em.replace("cisl_board_next_input", next_input)
    em.replace("cisl_transport_round", transport_round)
    em.replace("cisl_board_write", board_write)
    if "cisl_transport_control" in image.symbols:  # the control round announces the mode (default 0)
        em.replace("cisl_transport_control", lambda e: mode or 0)
    em.replace("cisl_board_cycles", lambda e: int(e.central_total) & 0xFFFF_FFFF)
    em.replace("cisl_board_time_us", lambda e: int(e.central_total * 1e6 / clock) & 0xFFFF_FFFF)
    # hooks of the virtual testbed's boards (qemu-m4's board time): no work on an nRF52840 node
    if "cisl_board_read" in image.symbols:  # the host's serial commands: none arrive in the model
        em.replace("cisl_board_read", lambda e: 0)
    if "cisl_board_start" in image.symbols:  # the start barrier waits for other nodes: none here
        em.replace("cisl_board_start", lambda e: 0)
    if "cisl_board_op_end" in image.symbols:
        em.replace("cisl_board_op_end", lambda e: 0)
    if "cisl_board_radio_on_us" in image.symbols:
        em.replace("cisl_board_radio_on_us", radio_not_counted)
    if "cisl_board_watchdog_reload" in image.symbols:  # WDT.RR[0]: no peripherals in the model
        em.replace("cisl_board_watchdog_reload", lambda e: 0)
    if "cisl_board_reset_reason" in image.symbols:  # POWER.RESETREAS: no peripherals in the model, say power-on
        em.replace("cisl_board_reset_reason", lambda e: e.write(e.arg(0), bytes(4)) or 1)
    em.region = RUNTIME
    em._switch(RUNTIME)
    rc = em.call("cisl_run")
    text = out_text.decode("ascii", errors="replace")
    records = parse_text(text)
    if state["error"]:
        raise CheckFailed(f"cycle model: {state['error']}")
    if rc != 0:
        err = next((r.fields for r in records if r.event == "error"), {})
        raise CheckFailed(f"cycle model: node {device} stopped with code {rc} {err}")
    if device == plan.sink:
        outs = outputs_by_inference(records)
        for i in range(n):
            want = np.asarray(ref.output[i]).astype(np.int8).tobytes()
            if outs.get(i) != want:
                raise CheckFailed(f"cycle model: node {device}'s forecast of inference {i} differs from the reference")
    return NodeCycles(device, n, dict(em.counts), dict(em.comm_counts), memory, text.splitlines(),
                      state["checked"], em.insns_total)
