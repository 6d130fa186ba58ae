"""Static memory planning: every activation buffer of a node gets an offset in one arena.

In: buffers with a size, an alignment and a lifetime (the first and last op that touch them);
``buffers_of`` reads them off a node's tensors and ops.
Out: an offset per buffer and the arena size. Greedy by size, like TFLite Micro's
GreedyMemoryPlanner: place the largest buffer first, then each next one at the lowest offset,
aligned for it, where it overlaps no already-placed buffer that is live at the same time. A pure
function of its input; ``check_plan`` verifies a plan independently (overlaps of simultaneously
live buffers, alignment, bounds) and ``format_plan`` dumps it (node_NN/memory.txt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .io import NodeData

ALIGN = 4  # bytes; enough for int32 buffers and word loads on Cortex-M4


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int  # bytes
    first: int  # first op index that writes or reads it
    last: int  # last op index that reads or writes it
    align: int = ALIGN  # its offset must be a multiple of this (a power of two)

    def live_with(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def buffers_of(node: NodeData) -> list[Buffer]:
    """Live ranges (op indices) of every activation tensor of a node."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(node.ops):
        for name in op.ins + op.outs:
            first.setdefault(name, i)
            last[name] = i
    # the input is written by the board before op 0
    first["input"] = 0
    return [Buffer(name, t.nbytes, first[name], last[name]) for name, t in node.tensors.items()]


def plan_arena(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
    """Return ({buffer name: offset}, arena size in bytes)."""
    order = sorted(buffers, key=lambda b: (-b.size, b.first, b.name))
    # (offset, end, first, last) per placed buffer, Buffer.live_with inlined: `cisl plan` plans hundreds
    # of arenas, and this scan is quadratic in the buffers
    placed: list[tuple[int, int, int, int]] = []
    offsets: dict[str, int] = {}
    for b in order:
        first, last = b.first, b.last
        busy = sorted([(lo, hi) for lo, hi, f, la in placed if f <= last and first <= la])
        off = 0
        for lo, hi in busy:
            if off + b.size <= lo:
                break
            off = max(off, align(hi, b.align))
        offsets[b.name] = off
        placed.append((off, off + b.size, first, last))
    size = max((align(offsets[b.name] + b.size) for b in buffers), default=0)
    return offsets, size


def check_plan(buffers: list[Buffer], offsets: dict[str, int], arena: int) -> list[str]:
    """Problems with a plan: overlaps of simultaneously live buffers, misalignment, overflow."""
    problems = []
    for i, a in enumerate(buffers):
        oa = offsets[a.name]
        if oa % a.align:
            problems.append(f"{a.name} at {oa} is not {a.align}-byte aligned")
        if oa + a.size > arena:
            problems.append(f"{a.name} ends at {oa + a.size}, past the arena ({arena} B)")
        for b in buffers[i + 1:]:
            ob = offsets[b.name]
            if a.live_with(b) and oa < ob + b.size and ob < oa + a.size:
                problems.append(f"{a.name} [{oa}, {oa + a.size}) overlaps {b.name} [{ob}, {ob + b.size}) while both are live")
    return problems


def format_plan(buffers: list[Buffer], offsets: dict[str, int], arena: int) -> str:
    """A human-readable dump: one line per buffer, ordered by offset."""
    lines = [f"arena {arena} bytes, {len(buffers)} buffers"]
    for b in sorted(buffers, key=lambda b: (offsets[b.name], b.first)):
        lines.append(f"  {offsets[b.name]:>7}  {b.size:>7} B  ops {b.first:>4}..{b.last:<4}  {b.name}")
    return "\n".join(lines)
