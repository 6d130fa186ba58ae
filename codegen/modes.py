"""`cisl modes`: every elastic mode of an every-mode build profiled, and the mode to run under limits.

Per mode: MACs and validation / test MSE from training (plan.json ``elastic.profile``), latency and
the network's energy per inference from the timing model (the real images on the cycle model,
each mode's Mixer rounds on the radio simulation; ``codegen.timing.estimate``), and the image's
flash and RAM per node (one image serves every mode). :func:`select_mode` is the rule the node's
``cisl_mode_select`` (firmware/runtime/cisl_mode_select.c) applies to the same integers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UserError
from .fsutil import json_with, write_output_file
from .plan.io import load_plan

if TYPE_CHECKING:
    from .radio.topology import Topology

NO_LIMIT = 0xFFFFFFFF  # CISL_NO_LIMIT
TABLE = "modes.json"


@dataclass(frozen=True)
class ModeProfile:
    mode: int
    macs: int
    val_mse: float
    test_mse: float
    latency_us: int  # central estimate of one inference (bulk-synchronous)
    energy_nj: int   # every node's energy of one inference, central
    latency_range_us: tuple[int, int]
    energy_range_nj: tuple[int, int]

    @property
    def mse_u(self) -> int:
        return to_micro(self.val_mse)


def to_micro(x: float) -> int:
    """x · 1e6 rounded half up, as an unsigned 32-bit value: how limits and MSEs reach the node."""
    return min(NO_LIMIT - 1, max(0, int(x * 1e6 + 0.5)))


def select_mode(table: list[tuple[int, int, int]], deadline_us: int = NO_LIMIT, energy_nj: int = NO_LIMIT,
                max_mse_u: int = NO_LIMIT) -> int:
    """Of the modes (latency_us, energy_nj, mse_u) within every limit, the lowest MSE (ties: the
    lower energy, then the lower mode); -1 if none. The twin of cisl_mode_select."""
    best = -1
    for m, (lat, en, mse) in enumerate(table):
        if lat > deadline_us or en > energy_nj or mse > max_mse_u:
            continue
        if best < 0 or mse < table[best][2] or (mse == table[best][2] and en < table[best][1]):
            best = m
    return best


def profile_modes(build_dir: Path, topology: str | Topology | None = None, inferences: int = 1, radio_inferences: int = 4,
                  seed: int = 0, jobs: int | None = None, progress=None) -> list[ModeProfile]:
    """Every mode of ``build_dir`` (an every-mode build, built for an ARM board or sim) on the timing model;
    ``topology`` as `cisl estimate` takes it (a name, None, or a testbed's Topology)."""
    from .timing.estimate import estimate

    plan = load_plan(build_dir)
    el = plan.meta.get("elastic") or {}
    if el.get("image") != "every mode":
        raise UserError(f"{build_dir}: not a build with every elastic mode; compile an elastic model "
                        f"(`[elastic]` in its training config) without --mode")
    out = []
    for row in el["profile"]:
        m = int(row["mode"])
        est = estimate(build_dir, topology, None, inferences, radio_inferences, seed, jobs, mode=m)
        lat = est.latency_ms
        energy = [sum(getattr(e.total_uj, f) for e in est.energy.values()) for f in ("low", "central", "high")]
        out.append(ModeProfile(m, int(row["macs"]), float(row["val_mse"]), float(row["test_mse"]),
                               int(round(lat[1] * 1e3)), int(round(energy[1] * 1e3)),
                               (int(round(lat[0] * 1e3)), int(round(lat[2] * 1e3))),
                               (int(round(energy[0] * 1e3)), int(round(energy[2] * 1e3)))))
        if progress is not None:
            progress(1)
    return out


def write_table(build_dir: Path, profiles: list[ModeProfile], topology: str | None) -> Path:
    """BUILD/modes.json: the profile table (replaced only over one cisl wrote)."""
    plan = load_plan(build_dir)
    path = Path(build_dir) / TABLE
    doc = {"plan": plan.sha256[:16], "topology": topology, "modes": [asdict(p) for p in profiles]}
    write_output_file(path, json.dumps(doc, indent=1) + "\n", json_with("plan", "modes"))
    return path


def put_table_in_images(build_dir: Path, profiles: list[ModeProfile], say=lambda s: None) -> None:
    """Every node's cisl_mode_table.h gets the table, and the images are built again (as `cisl
    build` does: the plan's board, and for a virtual board the ARM images with board time)."""
    from .emit.cnode import emit_mode_table, environment
    from .timing.boardtime import build_with_board_time

    plan = load_plan(build_dir)
    rows = [{"latency_us": p.latency_us, "energy_nj": p.energy_nj, "mse_u": p.mse_u} for p in profiles]
    env = environment()
    for k, node in enumerate(plan.nodes):
        emit_mode_table(plan, k, Path(build_dir) / f"node_{node.device:02d}", env, rows)
    build_with_board_time(build_dir, None, None, say, None, True, False)


def images_without_table(build_dir: Path, plan) -> dict[int, int]:
    """Nodes whose image source has fewer rows in its mode table (node_NN/cisl_mode_table.h) than the
    build has modes -> the rows it has: `cisl modes` not run on this build, or stopped before it put
    the table into every image. Their selector has nothing to choose from and ignores limits."""
    import re

    from .emit.cnode import MODE_TABLE

    el = plan.meta.get("elastic") or {}
    if el.get("image") != "every mode":
        return {}
    out = {}
    for node in plan.nodes:
        try:
            text = (Path(build_dir) / f"node_{node.device:02d}" / MODE_TABLE).read_text()
        except OSError:
            text = ""
        m = re.search(r"#define CISL_MODE_TABLE_LEN (\d+)u", text)
        rows = int(m.group(1)) if m else 0
        if rows < int(el["modes"]):
            out[node.device] = rows
    return out


def no_table_problem(build_dir: Path, plan) -> str | None:
    """Why --mode-limits cannot work on ``build_dir``'s images (None: every image holds the table)."""
    missing = images_without_table(build_dir, plan)
    if not missing:
        return None
    k, rows = next(iter(missing.items()))
    return (f"--mode-limits: the node images of {build_dir} hold no mode table for the on-node selector "
            f"(node_{k:02d}/cisl_mode_table.h: {rows} of {plan.meta['elastic']['modes']} modes profiled), so they "
            f"would ignore the limits; run `cisl modes {build_dir}` (it profiles the modes and builds the images "
            f"again with the table)")


def read_table(build_dir: Path, topology: str | None = None) -> list[ModeProfile] | None:
    """The table `cisl modes` wrote for this very plan (and, given ``topology``, profiled on that radio
    topology), or None (missing, of another plan or of another topology)."""
    path = Path(build_dir) / TABLE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        if doc.get("plan") != load_plan(build_dir).sha256[:16]:
            return None  # a stale table: the build was recompiled since
        if topology is not None and doc.get("topology") != topology:
            return None  # profiled on another radio: the Mixer rounds, so latency and energy, differ
        return [ModeProfile(**{**r, "latency_range_us": tuple(r["latency_range_us"]),
                               "energy_range_nj": tuple(r["energy_range_nj"])}) for r in doc["modes"]]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path}: not a table `cisl modes` wrote; delete it or run `cisl modes --profile`") from None


def limits_conflict(build_dir: Path, limits: list[tuple[int, int, int, int, int]]) -> str | None:
    """A note when two nodes' `--mode-limits` pick different modes at once (None: they agree, or only
    one node has limits): each node asks for its own pick before every inference it lacks it, one
    request is served per inference, so the network switches back and forth between them."""
    table = read_table(build_dir)
    if not table or len({node for _, node, *_ in limits}) < 2:
        return None
    rows = [(p.latency_us, p.energy_nj, p.mse_u) for p in table]
    for at in sorted({inf for inf, *_ in limits}):
        active: dict[int, tuple] = {}
        for inf, node, *lim in sorted(limits):
            if inf <= at:
                active[node] = tuple(lim)
        picks = {node: select_mode(rows, *lim) for node, lim in active.items()}
        picks = {node: m for node, m in picks.items() if m >= 0}  # no mode within the limits: the node stays
        if len(set(picks.values())) > 1:
            items = sorted(picks.items())
            a, ma = items[0]
            b, mb = next((n, m) for n, m in items[1:] if m != ma)
            return (f"from inference {at}, node {a}'s limits pick mode {ma} and node {b}'s mode {mb}: each node asks "
                    f"for its own pick whenever the network runs the other, so the modes alternate (one switch per "
                    f"inference); give limits to one node (the sink's take effect at once)")
    return None


def format_table(profiles: list[ModeProfile], chosen: int | None = None) -> str:
    lines = [f"{'mode':>4} {'MACs':>12} {'val MSE':>9} {'test MSE':>9} {'latency ms':>24} {'energy uJ':>26}"]
    for p in profiles:
        mark = "  <- chosen" if chosen == p.mode else ""
        lat = f"{p.latency_us / 1e3:.2f} [{p.latency_range_us[0] / 1e3:.2f}..{p.latency_range_us[1] / 1e3:.2f}]"
        en = f"{p.energy_nj / 1e3:.1f} [{p.energy_range_nj[0] / 1e3:.1f}..{p.energy_range_nj[1] / 1e3:.1f}]"
        lines.append(f"{p.mode:>4} {p.macs:>12,} {p.val_mse:>9.4f} {p.test_mse:>9.4f} {lat:>24} {en:>26}{mark}")
    return "\n".join(lines)


def switch_cycles(build_dir: Path) -> list[float]:
    """Node 0's cycles (cycle model, central) to settle each inference's mode when the control round
    announces mode m after an inference in mode 0: ``cisl_modes_agree`` with the round itself
    replaced (its air time is communication), so entry m minus entry 0 is what a switch to m adds —
    the `mode` line and a pointer to the mode's row of numbers; nothing is copied."""
    from .boards import load_board
    from .timing.compute import board_for_estimate, image_of
    from .timing.engine import SCRATCH, Image
    from .timing.memsystem import MemoryModel
    from .timing.native import new_emulator

    plan = load_plan(build_dir)
    _, model = board_for_estimate(plan, 0)
    em = new_emulator(Image.load(image_of(build_dir, 0, plan)), MemoryModel.for_board(load_board(model.name)))
    announced = {"mode": 0}
    em.replace("cisl_board_write", lambda e: 0)
    # the log's printing clock (cisl_log_spent) reads the board's time: the model's, not the board's timer
    em.replace("cisl_board_cycles", lambda e: int(e.central_total) & 0xFFFF_FFFF)
    em.replace("cisl_board_time_us", lambda e: 0)
    em.replace("cisl_transport_control", lambda e: announced["mode"])
    modes = int(plan.meta["elastic"]["modes"])
    out = []
    for m in range(modes):
        em.write(SCRATCH, bytes([0]))
        em.call("cisl_modes_reset")
        announced["mode"] = 0
        em.call("cisl_modes_agree", [0, SCRATCH, modes])  # inference 0 ran mode 0
        announced["mode"] = m
        before = em.central_total
        if em.call("cisl_modes_agree", [1, SCRATCH, modes]) != 0 or em.read(SCRATCH, 1)[0] != m:
            raise UserError(f"{build_dir}: node 0's image did not settle on mode {m}; rebuild it with `cisl build`")
        out.append(em.central_total - before)
    return out
