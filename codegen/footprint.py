"""The planner's estimate of a node image's flash and RAM, from plan.json alone (no compiler).

    flash = constants (weights, biases, requantisation tables; const, in flash)
          + code: a fixed part (kernels, runtime, Mixer, board, C library) and a part per op of the
            schedule (its call and its parameter structs), both calibrated per board and kernel
            library ([footprint] in board.toml; bench/calibrate_footprint.py measures them)
          + tables: somegather descriptors (column runs) and the Mixer schedule
          + compiled-in input windows (boards without a host link)
    RAM   = the static arena (codegen/plan/memory.py)
          + Mixer's state for the plan's maxima (firmware/mixer/mixer.h MX_STATE_BYTES with the
            build's pool) and the message reassembly buffer
          + the stack (board.toml [build] stack_bytes) and the board's fixed statics

`cisl build` writes it next to what the linked ELF says (node_NN/size.json); `cisl compile` warns
when a node is estimated not to fit, and `cisl fit` uses it to pre-filter model sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .boards import Board
from .errors import UserError
from .ops import kind_of
from .plan.io import NodeData, Plan
from .plan.memory import align
from .plan.mixer_layout import cv_words, mixer_maxima, row_words

MX_HEADER_BYTES = 224  # sizeof(mx_header), firmware/mixer/mixer.h (the build checks the formula)

# sizes of the generated Mixer tables' elements (arm-none-eabi, 32-bit): see templates/mixer.c.j2;
# the somegather descriptors are their op's (codegen/ops/somegather.py)
MX_FRAG_BYTES = 16  # cisl_mx_frag
MX_ROUND_BYTES = 20  # cisl_mx_round
MX_EXCHANGE_BYTES = 8  # cisl_mx_exchange
INPUT_WINDOWS = 4  # windows `cisl compile` saves in inputs.npy (compile.SIM_INPUTS)


@dataclass
class Footprint:
    flash_parts: dict[str, int] = field(default_factory=dict)
    ram_parts: dict[str, int] = field(default_factory=dict)

    @property
    def flash(self) -> int:
        return sum(self.flash_parts.values())

    @property
    def ram(self) -> int:
        return sum(self.ram_parts.values())


def mx_state_bytes(nodes: int, g: int, p: int, pool_words: int | None = None) -> int:
    """sizeof(mx_state) for -DMX_MAX_NODES=nodes -DMX_MAX_G=g -DMX_MAX_P=p [-DMX_POOL_WORDS]."""
    pool = g * row_words(g, p) if pool_words is None else pool_words
    return (MX_HEADER_BYTES + 4 * (7 * cv_words(g) + nodes * cv_words(g)) + 2 * ((nodes + 1) & ~1)
            + 2 * ((g + 1) & ~1) + ((g + nodes + 3) & ~3) + ((g + 3) & ~3) + 4 * 2 * row_words(g, p) + 4 * pool)


def table_bytes(exchanges: list, ops: list) -> int:
    """Generated descriptor tables: somegather column runs and the Mixer schedule, each distinct
    table once (as codegen/emit/cnode.py stores them)."""
    n = sum(kind_of(op).table_bytes(op) for op in ops)
    shared = {key: size for op in ops for key, size in kind_of(op).shared_tables(op)}
    n += sum(shared.values())
    senders, rounds = set(), set()
    for ex in exchanges:
        n += MX_EXCHANGE_BYTES
        keys = []
        for r in ex:
            key = tuple((f["node"], f["first_row"], f["rows"], f["nbytes"], f["offset"]) for f in r["senders"])
            if key not in senders:
                senders.add(key)
                n += MX_FRAG_BYTES * len(r["senders"])
            keys.append((r["generation"], r["payload"], r["deadline_slots"], r["slot_us"], r["takeover_slots"], key))
        if ex and tuple(keys) not in rounds:
            rounds.add(tuple(keys))
            n += MX_ROUND_BYTES * len(ex)
    return n


def max_message(exchanges: list) -> int:
    return max([f["nbytes"] for ex in exchanges for r in ex for f in r["senders"]] + [1])


def count_ops(ops: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op.kind] = counts.get(op.kind, 0) + 1
    return counts


def op_counts(node: NodeData) -> dict[str, int]:
    return count_ops(node.ops)


@dataclass
class NodeFacts:
    """What the estimate needs of one node (from a plan, or from a plan structure without weights)."""

    const_bytes: int  # every constant array rounded up to 4 bytes
    ops: dict[str, int]  # op kind -> count
    tables: int  # table_bytes
    arena: int
    max_message: int
    lookback: int
    input_windows: int = INPUT_WINDOWS


def node_facts(plan: Plan, node: NodeData) -> NodeFacts:
    ex = plan.meta["mixer"]["exchanges"]
    image = plan.meta["mixer"].get("image")  # every elastic mode in one image: the largest message of any mode
    return NodeFacts(sum(align(c.nbytes) for c in node.constants.values()), count_ops(node.ops),
                     table_bytes(ex, node.ops), node.arena_bytes,
                     int(image["max_message"]) if image else max_message(ex), plan.cfg.lookback,
                     int(plan.meta.get("input_windows", INPUT_WINDOWS)))


def estimate(facts: NodeFacts, board: Board, kernels: str, maxima: dict[str, int]) -> Footprint:
    fp = board.facts.get("footprint", {})
    lib = fp.get(kernels, fp.get("nnref", {}))
    per_op = fp.get("ops", {})
    f = Footprint()
    f.flash_parts["constants"] = facts.const_bytes
    f.flash_parts["code_fixed"] = int(lib.get("flash_fixed", 0))
    missing = sorted(k for k in facts.ops if k not in per_op)
    if per_op and missing:  # boards without a memory budget (sim) size no code
        raise UserError(f"board {board.name}: board.toml [footprint.ops] has no code size for op kind "
                        f"{', '.join(missing)}; measure it with `python bench/calibrate_footprint.py --board "
                        f"{board.name}` and add it")
    f.flash_parts["code_ops"] = int(sum(int(per_op.get(k, 0)) * c for k, c in facts.ops.items()))
    f.flash_parts["tables"] = facts.tables
    if board.build.get("inputs"):
        windows = int(board.facts.get("inputs", {}).get("max_windows", 16))
        f.flash_parts["inputs"] = align(min(windows, facts.input_windows) * facts.lookback)
    f.ram_parts["arena"] = align(max(facts.arena, 4))
    if fp.get("mixer", True):
        f.ram_parts["mixer"] = mx_state_bytes(maxima["MX_MAX_NODES"], maxima["MX_MAX_G"], maxima["MX_MAX_P"],
                                              maxima["MX_POOL_WORDS"])
    f.ram_parts["reassembly"] = align(facts.max_message)
    f.ram_parts["stack"] = int(board.build.get("stack_bytes", 0))
    f.ram_parts["fixed"] = int(lib.get("ram_fixed", 0))
    return f


def estimate_node(plan: Plan, node: NodeData, board: Board, kernels: str = "nnref",
                  maxima: dict[str, int] | None = None) -> Footprint:
    if maxima is None:
        maxima = mixer_maxima(plan)
    return estimate(node_facts(plan, node), board, kernels, maxima)


def estimate_plan(plan: Plan, board: Board, kernels: str = "nnref") -> dict[int, Footprint]:
    maxima = mixer_maxima(plan)
    return {n.device: estimate_node(plan, n, board, kernels, maxima) for n in plan.nodes}


def fits(f: Footprint, board: Board) -> bool:
    return f.flash <= board.flash_bytes and f.ram <= board.ram_bytes


def headroom(f: Footprint, board: Board) -> float:
    """The tighter of the two budgets' free fraction (negative: over budget)."""
    return min(1 - f.flash / board.flash_bytes, 1 - f.ram / board.ram_bytes) if board.flash_bytes else math.inf
