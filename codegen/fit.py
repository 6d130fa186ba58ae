"""`cisl fit`: the largest model whose every node image fits a board, for D nodes (the paper's Fig. 5).

Models are PatchTST-style encoders with H heads, F_h = F (the paper's experiments), horizon 24 and
tokens N from look-back 8N + 8 (patch 16, stride 8). Size is the dense-equivalent parameter count:
every weight and bias of the unsplit model, whatever the keep ratio (a pruned somegather removes
communication and the weights that would consume it, not model capacity).

Search, over F (multiples of H), N (a grid 16..511) and T (1..12):
  1. pre-filter: the planner's estimate (codegen/footprint.py) from plan *structures* without
     weights, at T = 1 and 2 and extrapolated linearly in T (constants, ops and tables grow per
     layer; the arena and Mixer's state do not); for every (N, T) the largest F that fits by
     bisection;
  2. confirm, in descending parameter order: the exact estimate of the full structure, then a real
     `cisl compile` of a random-weight model (codegen/randmodel.py) and `cisl build` of every node
     for the board; the first candidate whose every node links is the answer (if the estimate
     stays within budget a step of H wider, that is tried first, so the result is not
     pessimistic).
"""

from __future__ import annotations

import math
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import interrupts
from .boards import Board, load_board
from .errors import CheckFailed, UserError
from .footprint import NodeFacts, count_ops, estimate, max_message, table_bytes
from .ops import kind_of
from .modelspec import ModelConfig, weight_shapes
from .partition import Split, full_masks, random_masks
from .plan.mixer_schedule import RoundPolicy, schedule_exchange

N_GRID = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 511)
T_GRID = tuple(range(1, 13))
F_MAX = 8192
HORIZON = 24


def model_config(tokens: int, width: int, layers: int, heads: int, horizon: int = HORIZON) -> ModelConfig:
    return ModelConfig(lookback=(tokens - 1) * 8 + 16, patch_len=16, stride=8, padding="none", d_model=width,
                       heads=heads, layers=layers, mlp_hidden=width, horizon=horizon)


def dense_params(cfg: ModelConfig) -> int:
    return int(sum(math.prod(s) for s in weight_shapes(cfg).values()))


def kernel_limits_ok(cfg: ModelConfig, devices: int) -> bool:
    """What `cisl compile` refuses (codegen/compile.py _check_kernel_limits)."""
    widest = -(-cfg.d_model // devices)
    return cfg.tokens <= 511 and cfg.d_model <= 32767 and cfg.tokens * widest <= 65535 and devices <= cfg.heads


@lru_cache(maxsize=4096)
def _exchange(msg_bytes: tuple[int, ...], policy: RoundPolicy) -> tuple:
    return tuple(r.to_json() for r in schedule_exchange(0, list(msg_bytes), policy))


def structure_facts(cfg: ModelConfig, devices: int, keep: float, seed: int = 0,
                    policy: RoundPolicy | None = None) -> tuple[list[NodeFacts], dict[str, int]]:
    """Per-node estimate inputs from the plan structure (no weights, no quantisation), and the
    Mixer maxima; what `cisl compile` would put in plan.json, up to the constants' values."""
    from .plan.mixer_layout import maxima_of_rounds
    from .plan.io import NodeData
    from .plan.memory import buffers_of, plan_arena
    from .plan.structure import build_structure

    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    masks = full_masks(split, cfg.layers) if keep >= 1.0 else random_masks(split, cfg.layers, keep, seed)
    st = build_structure(cfg, split, masks, keep, rescale=True)  # as cisl train makes models
    policy = policy or RoundPolicy(linger=max(4, devices))  # callers pass the board's (plan_policy)
    exchanges = [[dict(r) for r in _exchange(tuple(sg.msg_bytes), policy)] for sg in st.sgs]
    rounds = [r for ex in exchanges for r in ex]
    maxima = maxima_of_rounds(devices, rounds)
    mm = max_message(exchanges)
    out = []
    for node in st.nodes:
        _, arena = plan_arena(buffers_of(NodeData(node.device, node.tensors, {}, 0, node.ops, {})))
        out.append(NodeFacts(_const_bytes(node.ops, node.tensors, cfg), count_ops(node.ops),
                             table_bytes(exchanges, node.ops), arena, mm, cfg.lookback))
    return out, maxima


def plan_board(board: Board) -> str:
    """The board whose plans the nodes run (a sim or QEMU board builds another board's plans)."""
    return (board.facts["board"].get("builds_plans_for") or [board.name])[0]


def plan_policy(board: Board, devices: int) -> RoundPolicy:
    """The round policy `cisl compile` schedules with for this board (CPU limit, start guard)."""
    from .compile import round_policy

    return round_policy(plan_board(board), devices)


def stored_weights(ops, cfg: ModelConfig) -> int:
    """Weights and biases a node stores (its slices of the model; LayerNorm parameters of the
    columns it gathers are counted on every node that holds them)."""
    return sum(kind_of(op).stored_weights(op, cfg) for op in ops)


def _const_bytes(ops, tensors, cfg: ModelConfig) -> int:
    """Bytes of the constants the quantiser makes for these ops (each rounded up to 4)."""
    return sum(kind_of(op).const_bytes(op, tensors, cfg) for op in ops)


def _extrapolate(f1: NodeFacts, f2: NodeFacts, layers: int) -> NodeFacts:
    """Facts at `layers` from those at 1 and 2 layers: per-layer parts grow linearly."""
    k = layers - 1
    ops = {key: f1.ops.get(key, 0) + k * (f2.ops.get(key, 0) - f1.ops.get(key, 0)) for key in set(f1.ops) | set(f2.ops)}
    return NodeFacts(f1.const_bytes + k * (f2.const_bytes - f1.const_bytes), ops, f1.tables + k * (f2.tables - f1.tables),
                     max(f1.arena, f2.arena) if layers > 1 else f1.arena, f1.max_message, f1.lookback,
                     f1.input_windows)


@dataclass
class Candidate:
    tokens: int
    width: int
    layers: int
    params: int
    flash: int = 0  # largest node, estimated (or linked, once confirmed)
    ram: int = 0
    confirmed: bool = False
    stored: int = 0  # weights the nodes store, summed over nodes (pruned cross-node weights are not stored)
    links: bool | None = None  # a real build of every node: linked (True), overflowed (False), not built (None)

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if not k.startswith("_")}

    @property
    def limit(self) -> str:
        return "flash" if self.flash / self._fb >= self.ram / self._rb else "RAM"

    _fb: int = field(default=1, repr=False)
    _rb: int = field(default=1, repr=False)


@dataclass
class FitResult:
    board: str
    devices: int
    heads: int
    keep: float
    frontier: list[Candidate]  # per N: the largest model the estimate admits, or the build confirmed
    best: Candidate | None
    tried: list[str] = field(default_factory=list)  # confirmation log
    refused: list[str] = field(default_factory=list)  # sizes `cisl compile` would refuse, and why


class _Estimator:
    def __init__(self, board: Board, devices: int, heads: int, keep: float, kernels: str, seed: int):
        self.board, self.devices, self.heads, self.keep, self.kernels, self.seed = board, devices, heads, keep, kernels, seed
        self.policy = plan_policy(board, devices)
        self.cache: dict[tuple[int, int], tuple[list[NodeFacts], list[NodeFacts], dict] | None] = {}
        self.refused: dict[tuple[int, int], str] = {}  # (N, F) -> why `cisl compile` would refuse it

    def facts12(self, tokens: int, width: int):
        """Facts at 1 and 2 layers, or None (and the reason in ``refused``) when the Mixer schedule
        cannot carry an exchange (`cisl compile` refuses it; with messages split across rounds only
        an exchange needing more than 255 rounds is)."""
        key = (tokens, width)
        if key not in self.cache:
            try:
                f1, m = structure_facts(model_config(tokens, width, 1, self.heads), self.devices, self.keep, self.seed,
                                        self.policy)
                f2, _ = structure_facts(model_config(tokens, width, 2, self.heads), self.devices, self.keep, self.seed,
                                        self.policy)
                self.cache[key] = (f1, f2, m)
            except ValueError as e:
                self.cache[key] = None
                self.refused[key] = str(e)
        return self.cache[key]

    def worst(self, tokens: int, width: int, layers: int) -> tuple[int, int]:
        f1, f2, maxima = self.facts12(tokens, width)
        worst_flash = worst_ram = 0
        for a, b in zip(f1, f2):
            e = estimate(_extrapolate(a, b, layers), self.board, self.kernels, maxima)
            worst_flash, worst_ram = max(worst_flash, e.flash), max(worst_ram, e.ram)
        return worst_flash, worst_ram

    def fits(self, tokens: int, width: int, layers: int, slack: float = 0.0) -> bool:
        if not kernel_limits_ok(model_config(tokens, width, layers, self.heads), self.devices):
            return False
        if self.facts12(tokens, width) is None:
            return False
        fl, ram = self.worst(tokens, width, layers)
        return fl <= self.board.flash_bytes * (1 + slack) and ram <= self.board.ram_bytes * (1 + slack)


def stored_total(cfg: ModelConfig, devices: int, keep: float, seed: int = 0) -> int:
    from .plan.structure import build_structure

    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    masks = full_masks(split, cfg.layers) if keep >= 1.0 else random_masks(split, cfg.layers, keep, seed)
    return sum(stored_weights(n.ops, cfg) for n in build_structure(cfg, split, masks, keep).nodes)


def exact_worst(board: Board, cfg: ModelConfig, devices: int, keep: float, kernels: str, seed: int) -> tuple[int, int]:
    facts, maxima = structure_facts(cfg, devices, keep, seed, plan_policy(board, devices))
    es = [estimate(f, board, kernels, maxima) for f in facts]
    return max(e.flash for e in es), max(e.ram for e in es)


def _search_tokens(board: Board, devices: int, heads: int, keep: float, kernels: str, seed: int, tokens: int,
                   t_grid, widths: list[int]) -> tuple[list[Candidate], dict[tuple[int, int], str], int]:
    """Step 1 for one token count: (candidates, sizes refused and why, structures estimated)."""
    est = _Estimator(board, devices, heads, keep, kernels, seed)
    out = []
    for layers in t_grid:
        lo, hi = 0, len(widths) - 1  # bisection for the last width that fits
        if not est.fits(tokens, widths[0], layers):
            continue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if est.fits(tokens, widths[mid], layers):
                lo = mid
            else:
                hi = mid - 1
        w = widths[lo]
        fl, ram = est.worst(tokens, w, layers)
        c = Candidate(tokens, w, layers, dense_params(model_config(tokens, w, layers, heads)), fl, ram)
        c._fb, c._rb = board.flash_bytes, board.ram_bytes
        out.append(c)
    return out, est.refused, len(est.cache)


def _search_tokens_star(args: tuple) -> tuple[list[Candidate], dict[tuple[int, int], str], int]:
    return _search_tokens(*args)


def search(board: Board, devices: int, heads: int = 16, keep: float = 1.0, kernels: str = "nnref", seed: int = 0,
           n_grid=N_GRID, t_grid=T_GRID, f_max: int = F_MAX,
           progress: Callable[[str], None] = lambda s: None, refused: list[str] | None = None,
           jobs: int | None = None) -> list[Candidate]:
    """Step 1: for every (N, T) the largest F the extrapolated estimate admits; all candidates.
    Sizes the Mixer schedule cannot carry are appended to ``refused`` (one line per (N, F)). The
    token counts are searched in ``jobs`` processes (default: CPUs; each is independent)."""
    widths = list(range(heads * max(1, math.ceil(devices / heads)), f_max + 1, heads))
    if not widths:
        raise UserError(f"--heads {heads} with {devices} node(s): no model width up to {f_max} is a multiple of the "
                        f"heads that gives every node one; use fewer heads")
    args = [(board, devices, heads, keep, kernels, seed, tokens, tuple(t_grid), widths) for tokens in n_grid]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(args)))
    out: list[Candidate] = []
    why: dict[tuple[int, int], str] = {}
    estimated = 0

    def take(tokens: int, result: tuple[list[Candidate], dict[tuple[int, int], str], int]) -> None:
        nonlocal estimated
        out.extend(result[0])
        why.update(result[1])
        estimated += result[2]
        progress(f"fit: N={tokens} done ({estimated} structures estimated)")

    if jobs == 1:
        for a in args:
            take(a[6], _search_tokens(*a))
    else:
        with ProcessPoolExecutor(jobs, initializer=interrupts.worker_defaults) as pool:
            for a, result in zip(args, pool.map(_search_tokens_star, args)):  # in grid order
                take(a[6], result)
    if refused is not None:
        refused.extend(f"N={n} F={w}: {reason}" for (n, w), reason in sorted(why.items()))
    return out


def confirm(board: Board, c: Candidate, devices: int, heads: int, keep: float, seed: int, work: Path,
            jobs: int | None = None) -> tuple[bool, str, tuple[int, int]]:
    """Compile a random-weight model of this size for `devices` nodes and build every node."""
    from .build import build
    from .compile import CompileOptions, compile_model
    from .randmodel import make_model_dir

    cfg = model_config(c.tokens, c.width, c.layers, heads)
    tag = f"N{c.tokens}-F{c.width}-T{c.layers}"
    d = work / tag
    model = make_model_dir(d / "model", cfg, devices, keep, seed=seed, calibration=4, tests=4, rescale=True)
    try:
        compile_model(model, d / "build", CompileOptions(devices=devices, board=plan_board(board), max_calibration=4))
    except UserError as e:  # said, not skipped silently: the next candidate is tried
        return False, f"{tag}: `cisl compile` refuses it: {e}", (0, 0)
    try:
        s = build(d / "build", board.name, jobs)
    except CheckFailed as e:
        return False, f"{tag}: {e}", (0, 0)
    flash = max(n.get("flash", 0) for n in s["nodes"])
    ram = max(n.get("ram", 0) for n in s["nodes"])
    return True, f"{tag}: every node links (largest flash {flash} B, RAM {ram} B)", (flash, ram)


def fit(board_name: str, devices: int, heads: int = 16, keep: float = 1.0, seed: int = 0, confirm_build: bool = True,
        n_grid=N_GRID, t_grid=T_GRID, f_max: int = F_MAX, jobs: int | None = None, work: Path | None = None,
        progress: Callable[[str], None] = lambda s: None) -> FitResult:
    from .kernel_library import kernel_library

    board = load_board(board_name)
    n_grid, t_grid = tuple(dict.fromkeys(n_grid)), tuple(dict.fromkeys(t_grid))  # `--tokens 16 --tokens 16`: once
    if not board.build.get("size_check"):
        raise UserError(f"board {board.name} has no memory budget to fit against (use nrf52840dk or nrf52833dk)")
    if devices < 1 or devices > heads:
        raise UserError(f"--devices {devices}: must be 1..{heads} (each node needs at least one of the {heads} heads)")
    kernels = kernel_library().kind
    refused: list[str] = []
    cands = search(board, devices, heads, keep, kernels, seed, n_grid, t_grid, f_max, progress, refused, jobs)
    frontier = []
    for tokens in n_grid:
        mine = [c for c in cands if c.tokens == tokens]
        if mine:
            frontier.append(max(mine, key=lambda c: c.params))
    res = FitResult(board.name, devices, heads, keep, frontier, None, refused=refused)
    order = sorted(cands, key=lambda c: -c.params)
    if not order:
        return res
    if not confirm_build:
        res.best = order[0]
        return res
    tmp_ctx = tempfile.TemporaryDirectory(prefix="cisl-fit-") if work is None else None
    base = Path(tmp_ctx.name) if tmp_ctx else Path(work)
    built: dict[tuple[int, int, int], Candidate] = {}
    try:
        for c in order[:8]:
            if res.best is not None and c.params <= res.best.params:
                break  # a narrower fallback of an earlier candidate linked and this one is not larger
            # the exact estimate of the full structure, nudged up while it still fits
            cfg_w = c.width
            while True:
                up = cfg_w + heads
                if up > f_max or not kernel_limits_ok(model_config(c.tokens, up, c.layers, heads), devices):
                    break
                fl, ram = exact_worst(board, model_config(c.tokens, up, c.layers, heads), devices, keep, kernels, seed)
                if fl > board.flash_bytes or ram > board.ram_bytes:
                    break
                cfg_w = up
            for w in (cfg_w, cfg_w - heads, cfg_w - 2 * heads):
                if w < heads:
                    break
                cand = Candidate(c.tokens, w, c.layers, dense_params(model_config(c.tokens, w, c.layers, heads)))
                if res.best is not None and cand.params <= res.best.params:
                    break
                cand._fb, cand._rb = board.flash_bytes, board.ram_bytes
                progress(f"fit: confirming N={cand.tokens} F={cand.width} T={cand.layers} "
                         f"({cand.params / 1e6:.2f} M parameters) with a real build of {devices} node(s)")
                ok, msg, (fl, ram) = confirm(board, cand, devices, heads, keep, seed, base, jobs)
                res.tried.append(msg)
                built[(cand.tokens, cand.width, cand.layers)] = cand
                cand.links = ok
                if ok:
                    cand.flash, cand.ram, cand.confirmed = fl, ram, True
                    cand.stored = stored_total(model_config(cand.tokens, cand.width, cand.layers, heads), devices,
                                               keep, seed)
                    # not yet the answer when it is a fallback: the next candidate may be larger
                    # (N=16 F=96 T=12 missed one node by 344 B; its F=80 fallback, 0.50 M, was taken
                    # over N=256 F=64, 0.71 M)
                    res.best = cand
                    break
    finally:
        if tmp_ctx:
            tmp_ctx.cleanup()
    res.frontier = [_as_built(row, built) for row in res.frontier]
    return res


def _as_built(row: Candidate, built: dict[tuple[int, int, int], Candidate]) -> Candidate:
    """A frontier row after the confirming builds: the largest model of its N and T that linked, when the
    estimate's did not (N=32 F=1552 overflowed by 684 B, F=1536 linked); else the row, marked as built."""
    same = [c for (n, _, t), c in built.items() if n == row.tokens and t == row.layers]
    if (row.tokens, row.width, row.layers) in built:
        row = built[(row.tokens, row.width, row.layers)]
    if row.links is False:
        linked = [c for c in same if c.links]
        if linked:
            return max(linked, key=lambda c: c.params)
    return row


def format_result(r: FitResult, board: Board) -> str:
    lines = [f"{r.board}: {r.devices} node(s), {r.heads} heads, keep ratio {r.keep}, F_h = F; largest model per "
             f"token count (estimate; flash budget {board.flash_bytes} B, RAM {board.ram_bytes} B)",
             f"{'N':>4} {'T':>3} {'F':>5} {'params':>12} {'node flash':>11} {'node RAM':>9}  limit"]
    for c in r.frontier:
        built = {True: " (linked)", False: " (does not link: see confirm)", None: ""}[c.links]
        lines.append(f"{c.tokens:>4} {c.layers:>3} {c.width:>5} {c.params:>12,} {c.flash:>11} {c.ram:>9}  "
                     f"{c.limit}{built}")
    for t in r.refused[:5]:
        lines.append(f"not a candidate: {t}")
    if len(r.refused) > 5:
        lines.append(f"not a candidate: ... and {len(r.refused) - 5} more sizes the Mixer schedule cannot carry")
    for t in r.tried:
        lines.append(f"confirm: {t}")
    if r.best:
        b = r.best
        how = "every node compiled and linked" if b.confirmed else "estimate only"
        lines.append(f"largest: N={b.tokens} F={b.width} T={b.layers}: {b.params:,} parameters "
                     f"({b.params / 1e6:.2f} M; {how}; largest node flash {b.flash} B, RAM {b.ram} B)")
        if b.stored:
            lines.append(f"weights stored on the {r.devices} node(s): {b.stored:,} ({b.stored / 1e6:.2f} M; pruned "
                         f"cross-node weights are not stored, LayerNorm parameters count once per node)")
    else:
        lines.append("no model of the grid fits")
    return "\n".join(lines)
