"""testbed.toml: which node is which board, probe and serial port (schema-checked, one-line errors).

Schema (every table and key other than those marked required is optional)::

    [testbed]
    name = "lab"                    # a label
    state = ".cisl-testbed"         # folder for flash records and the virtual testbed (relative to this file)

    [defaults]                      # any of board, runner, baud, target: applies to every [[node]]
    board = "nrf52840dk"

    [sim]                           # runner "sim" only: the virtual testbed's medium
    topology = "hallway"            # where the nodes are (default: their positions), laid out for every
                                    # node of the file; "positions": the [[node]] positions below (every
                                    # node needs one). The rule: codegen/testbed/layout.py
    seed = 0
    timeout = 120                   # seconds the medium waits for progress
    inferences = 100                # inference i takes the build's input window i mod count (default:
                                    # each window once), e.g. a long run to switch elastic modes in

    [[node]]
    id = 0                          # required, unique, 0..255: the node of the build it runs
    board = "nrf52840dk"            # required (here or in [defaults]); must be the build's board
    runner = "nrfutil"              # required (here or in [defaults]): pyocd, nrfutil, nrfjprog, sim
    probe = "683123456"             # the debug probe's serial number (a string); required unless sim
    port = "/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00"   # required
    baud = 115200
    target = "nrf52840"             # pyocd target type (default: the board's, board.toml [probe] pyocd_target);
                                    # nrfjprog's family comes from it (NRF52)
    position = [0.0, 1.5]           # metres, [x, y] or [x, y, z]
    models = "nrf52833dk"           # runner sim only: the board this virtual node stands in for (its flash,
                                    # RAM, cycles and power; default nrf52840dk), so a virtual testbed can mix boards
    energy_source = "harvest"       # what powers the node: "battery" (default), "harvest" or "mains"
    energy_uj = 150.0               # the node's energy budget per inference, µJ (`cisl plan` keeps every node
                                    # within it; default: no limit)

Every mistake is one line naming the file, the node, the key and the fix (a UserError, exit code 2);
reading the file, unknown keys and plain types go through codegen/config_schema.py, as board.toml and the
training config do.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..config_schema import INT, STR, check_choice, check_keys, check_value, read_toml, suggest

RUNNER_NAMES = ("pyocd", "nrfutil", "nrfjprog", "sim")
DEFAULT_BAUD = 115200
MAX_SEED = 2**32 - 1  # [sim] seed: the radio channel's numpy generator takes 0 and up; 32 bits is plenty
MAX_SIM_INFERENCES = 100_000  # [sim] inferences: STATE/inputs.npy holds one window per inference (lookback bytes)
MAX_POSITION_M = 1e6  # metres: BLE reaches ~100 m; a larger value is a mistake (and overflows the path loss)
MAX_BAUD = 1_000_000  # UARTE BAUDRATE tops out at Baud1M on the nRF52840 and nRF52833 (product specifications)
DEFAULT_TARGET = "nrf52840"
DEFAULT_STATE = ".cisl-testbed"

TOP_KEYS = ("testbed", "defaults", "sim", "node")
TESTBED_KEYS = ("name", "state")
SIM_KEYS = ("topology", "seed", "timeout", "inferences")
VIRTUAL_BOARDS = ("sim", "qemu-m4")  # boards the virtual testbed runs (runner "sim")
NODE_KEYS = ("id", "board", "runner", "probe", "port", "baud", "target", "position", "models", "energy_source",
             "energy_uj")
DEFAULT_KEYS = ("board", "runner", "baud", "target", "models", "energy_source", "energy_uj")
ENERGY_SOURCES = ("battery", "harvest", "mains")
DEFAULT_MODELS = "nrf52840dk"


@dataclass(frozen=True)
class NodeEntry:
    id: int
    board: str
    runner: str
    port: str  # as written in the file
    port_path: str  # absolute for relative paths (resolved against the testbed file's folder)
    probe: str | None = None
    baud: int = DEFAULT_BAUD
    target: str = DEFAULT_TARGET
    position: tuple[float, ...] | None = None
    models: str | None = None  # runner sim: the board the virtual node stands in for
    energy_source: str = "battery"
    energy_uj: float | None = None  # energy budget per inference; None: no limit

    @property
    def label(self) -> str:
        return f"node {self.id:02d}"

    @property
    def hardware(self) -> str:
        """The board the node is, or as a virtual node stands in for (budgets, cycles, power)."""
        if self.runner == "sim":
            return self.models or DEFAULT_MODELS
        return self.board


@dataclass
class SimSettings:
    topology: str | None = None
    seed: int = 0
    timeout: float = 120.0
    inferences: int | None = None  # None: each of the build's input windows once


@dataclass
class Testbed:
    path: Path
    nodes: list[NodeEntry]
    name: str = ""
    state_dir: Path = Path(DEFAULT_STATE)
    sim: SimSettings = field(default_factory=SimSettings)
    notes: list[str] = field(default_factory=list)  # advice that is not an error (e.g. unstable port names)

    def node(self, node_id: int) -> NodeEntry:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    @property
    def ids(self) -> list[int]:
        return [n.id for n in self.nodes]


def _board_target(board: str) -> str:
    """The pyocd target of the board's part (board.toml [probe] pyocd_target): an nrf52833dk node
    opened as an nrf52840 gets the wrong flash size and memory map."""
    from ..boards import load_board

    if board in VIRTUAL_BOARDS:
        return DEFAULT_TARGET
    return str(load_board(board).facts.get("probe", {}).get("pyocd_target", DEFAULT_TARGET))


def load_testbed(path: Path | str) -> Testbed:
    """Read and check a testbed file; every mistake is a one-line UserError."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give the testbed file (TOML) itself")
    if not path.is_file():
        raise UserError(f"{path}: testbed file not found; draft one with `cisl testbed scan -o {path}` "
                        f"(boards) or `cisl testbed sim --nodes N -o {path}` (virtual testbed)")
    return parse_testbed(read_toml(path, "a testbed file"), path)


def parse_testbed(doc: dict[str, Any], path: Path) -> Testbed:
    f = str(path)
    check_keys(f, doc, TOP_KEYS)
    tb = doc.get("testbed", {})
    if not isinstance(tb, dict):
        raise UserError(f"{f}: 'testbed' must be a table: [testbed]")
    check_keys(f"{f}: [testbed]", tb, TESTBED_KEYS)
    name = tb.get("name", "")
    check_value(f"{f}: [testbed]", "name", name, STR)
    state = tb.get("state", DEFAULT_STATE)
    if not isinstance(state, str) or not state:
        raise UserError(f"{f}: [testbed] state must be a folder path (a string), e.g. state = \"{DEFAULT_STATE}\"")
    base = path.resolve().parent
    state_dir = Path(state) if Path(state).is_absolute() else base / state

    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise UserError(f"{f}: 'defaults' must be a table: [defaults]")
    for key in defaults:
        if key not in DEFAULT_KEYS:
            hint = ("it is different for every node: set it in each [[node]]" if key in NODE_KEYS
                    else suggest(key, DEFAULT_KEYS))
            raise UserError(f"{f}: [defaults]: key '{key}' not allowed here; {hint}")

    sim = _parse_sim(f, doc.get("sim", {}))

    nodes_raw = doc.get("node")
    if nodes_raw is None or nodes_raw == []:
        raise UserError(f"{f}: no nodes; add one [[node]] table per board (id, board, runner, probe, port)")
    if not isinstance(nodes_raw, list) or not all(isinstance(n, dict) for n in nodes_raw):
        raise UserError(f"{f}: 'node' must be an array of tables: write each node as [[node]]")
    nodes: list[NodeEntry] = []
    seen_id: dict[int, int] = {}
    seen_port: dict[str, int] = {}
    seen_probe: dict[str, int] = {}
    notes: list[str] = []
    for k, raw in enumerate(nodes_raw, 1):
        entry = _parse_node(f, k, {**defaults, **raw}, base, explicit=raw)
        if entry.id in seen_id:
            raise UserError(f"{f}: node id {entry.id} appears twice ([[node]] #{seen_id[entry.id]} and #{k}); "
                            "give every node its own id")
        seen_id[entry.id] = k
        port_key = _port_key(entry)
        if port_key in seen_port:
            raise UserError(f"{f}: node {entry.id}: port {entry.port} is also node {seen_port[port_key]}'s; "
                            "every node needs its own serial port")
        seen_port[port_key] = entry.id
        if entry.probe is not None:
            key = normalize_serial(entry.probe)
            if key in seen_probe:
                raise UserError(f"{f}: node {entry.id}: probe {entry.probe} is also node {seen_probe[key]}'s; "
                                "every node needs its own debug probe")
            seen_probe[key] = entry.id
        if entry.runner != "sim" and "/dev/serial/by-id/" not in entry.port and entry.port.startswith("/dev/tty"):
            notes.append(f"node {entry.id}: port {entry.port} may change name between boots or replugs; "
                         "prefer its /dev/serial/by-id/ path (see `cisl testbed scan`)")
        nodes.append(entry)
    nodes.sort(key=lambda n: n.id)
    out = Testbed(path, nodes, name, state_dir, sim, notes)
    from .layout import Layout, check_layout

    check_layout(Layout.of_testbed(out))  # [sim] topology against the nodes: here, before any command's work
    return out


def _port_key(entry: "NodeEntry") -> str:
    """A port as the system resolves it: `al/../x.tty` is `x.tty`, `/dev//ttyACM0` is `/dev/ttyACM0`, and a
    board's /dev/serial/by-id/ link is the tty it names (a virtual node's port is the testbed's own link)."""
    path = os.path.normpath(entry.port_path)
    if entry.runner != "sim" and os.path.exists(path):
        path = os.path.realpath(path)
    return path


def _parse_sim(f: str, sim: Any) -> SimSettings:
    if not isinstance(sim, dict):
        raise UserError(f"{f}: 'sim' must be a table: [sim]")
    check_keys(f"{f}: [sim]", sim, SIM_KEYS)
    out = SimSettings()
    if "topology" in sim:
        from ..radio.topology import TOPOLOGIES

        check_choice(f"{f}: [sim]", "topology", sim["topology"], TOPOLOGIES + ("positions",))
        out.topology = sim["topology"]
    if "seed" in sim:
        check_value(f"{f}: [sim]", "seed", sim["seed"], INT)
        if not 0 <= sim["seed"] <= MAX_SEED:  # the channel's numpy generator takes no negative seed
            raise UserError(f"{f}: [sim] seed must be a whole number from 0 to {MAX_SEED}, not {sim['seed']}")
        out.seed = sim["seed"]
    if "timeout" in sim:
        t = sim["timeout"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t <= 0:
            raise UserError(f"{f}: [sim] timeout must be a positive number of seconds, e.g. timeout = 120")
        out.timeout = float(t)
    if "inferences" in sim:
        n = sim["inferences"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SIM_INFERENCES:
            raise UserError(f"{f}: [sim] inferences must be a whole number of inferences from 1 to "
                            f"{MAX_SIM_INFERENCES} (the virtual testbed holds every inference's input window); "
                            f"record a longer soak as several `cisl logs` runs")
        out.inferences = n
    return out


def _check_target(where: str, board: str, target: str) -> None:
    """A node's target must be its board's part (board.toml [board] mcu; pyocd's name for it, or a variant
    of it such as nrf52840_xxaa): pyocd would open another chip's memory map, and nrfjprog's -f family
    fell back to NRF52 without a word."""
    from ..boards import load_board

    facts = load_board(board).facts
    part = str(facts.get("board", {}).get("mcu", "")).lower()
    own = _board_target(board)
    if part and not (target.lower() == own.lower() or target.lower().startswith(part)):
        raise UserError(f"{where}: target {target!r} is not the part of board {board} (an {part}); set "
                        f"target = \"{own}\" or leave target out (it defaults to the board's part)")


def _parse_node(f: str, k: int, raw: dict[str, Any], base: Path, explicit: dict[str, Any]) -> NodeEntry:
    nid = explicit.get("id")
    if nid is None:
        raise UserError(f"{f}: [[node]] #{k}: no 'id'; give the node of the build it runs, e.g. id = {k - 1}")
    if not isinstance(nid, int) or isinstance(nid, bool) or not 0 <= nid <= 255:
        raise UserError(f"{f}: [[node]] #{k}: id must be an integer 0..255, not {nid!r}")
    where = f"{f}: node {nid}"
    check_keys(where, raw, NODE_KEYS)

    runner = raw.get("runner")
    if runner is None:
        raise UserError(f"{where}: no 'runner'; set runner = \"nrfutil\" (or pyocd, nrfjprog, sim) in the node "
                        "or in [defaults]")
    check_choice(f"{where}:", "runner", runner, RUNNER_NAMES)
    board = raw.get("board")
    if board is None:
        raise UserError(f"{where}: no 'board'; set e.g. board = \"{'sim' if runner == 'sim' else 'nrf52840dk'}\" "
                        "in the node or in [defaults]")
    if not isinstance(board, str) or not board:
        raise UserError(f"{where}: board must be a board name (a string)")
    from ..boards import available_boards

    check_choice(f"{where}:", "board", board, available_boards())  # a typo here would surface only at flash time
    if runner == "sim" and board not in VIRTUAL_BOARDS:
        raise UserError(f"{where}: runner 'sim' runs board 'sim' or 'qemu-m4' builds, not '{board}'; set "
                        "board = \"sim\" or choose the runner of the node's debug probe")
    if runner != "sim" and board in VIRTUAL_BOARDS:
        raise UserError(f"{where}: board '{board}' runs on the virtual testbed; use runner = \"sim\" for it")

    port = raw.get("port")
    if port is None:
        hint = (f".cisl-testbed/node_{nid:02d}.tty" if runner == "sim"
                else "/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00")
        raise UserError(f"{where}: no 'port'; give the node's serial port, e.g. port = \"{hint}\"")
    if not isinstance(port, str) or not port:
        raise UserError(f"{where}: port must be a path (a string)")
    port_path = port if Path(port).is_absolute() else str(base / port)
    if os.path.isdir(port_path):  # `/dev`, a by-id folder: passed here, then failed at open as "Is a directory"
        raise UserError(f"{where}: port {port} is a folder, not a serial port; give the node's device, e.g. "
                        f"port = \"/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00\" (`cisl testbed scan` "
                        "lists them)")

    probe = raw.get("probe")
    if probe is not None:
        if isinstance(probe, int) and not isinstance(probe, bool):
            raise UserError(f"{where}: probe must be a string (leading zeros matter): probe = \"{probe}\"")
        if not isinstance(probe, str) or not probe.strip():
            raise UserError(f"{where}: probe must be the debug probe's serial number as a string")
        probe = probe.strip()
    if runner == "sim" and probe is not None:
        raise UserError(f"{where}: runner 'sim' has no debug probe; remove 'probe'")

    baud = raw.get("baud", DEFAULT_BAUD)
    if not isinstance(baud, int) or isinstance(baud, bool) or not 0 < baud <= MAX_BAUD:
        raise UserError(f"{where}: baud must be a whole number of bits per second from 1 to {MAX_BAUD} "
                        f"(the UARTE's fastest rate), e.g. baud = {DEFAULT_BAUD}")
    target = raw.get("target", _board_target(board))
    if not isinstance(target, str) or not target:
        raise UserError(f"{where}: target must be a pyocd target name, e.g. target = \"{DEFAULT_TARGET}\"")
    if board not in VIRTUAL_BOARDS:
        _check_target(where if "target" in explicit else f"{f}: [defaults]", board, target)
    position = raw.get("position")
    if position is not None:
        if (not isinstance(position, list) or len(position) not in (2, 3)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_POSITION_M
                           for v in position)):
            raise UserError(f"{where}: position must be [x, y] or [x, y, z] in metres (numbers within "
                            f"±{MAX_POSITION_M:g}), e.g. position = [0.0, 2.5]")
        position = tuple(float(v) for v in position)
    models = raw.get("models")
    if models is not None:
        if runner != "sim":
            raise UserError(f"{where}: 'models' is for virtual nodes (runner sim); a board node is its board "
                            f"('{board}'): remove 'models'")
        if not isinstance(models, str) or not models:
            raise UserError(f"{where}: models must be a board name, e.g. models = \"nrf52833dk\"")
        from ..boards import available_boards

        real = [b for b in available_boards() if b not in VIRTUAL_BOARDS]
        check_choice(f"{where}:", "models", models, real)
    source = raw.get("energy_source", "battery")
    check_choice(f"{where}:", "energy_source", source, ENERGY_SOURCES)
    energy = raw.get("energy_uj")
    if energy is not None:
        if not isinstance(energy, (int, float)) or isinstance(energy, bool) or not 0 < energy < math.inf:
            at = where if "energy_uj" in explicit else f"{f}: [defaults]"  # where the user wrote it
            raise UserError(f"{at}: energy_uj must be a positive, finite number (µJ per inference), e.g. "
                            f"energy_uj = 150.0")
        energy = float(energy)
    return NodeEntry(nid, board, runner, port, port_path, probe, baud, target, position, models, source, energy)


def normalize_serial(s: str) -> str:
    """Compare probe serial numbers the way tools print them: J-Link's USB serial '000683123456' is
    nrfjprog's 683123456; hexadecimal CMSIS-DAP ids compare case-insensitively."""
    s = s.strip()
    if s.isdigit():
        return s.lstrip("0") or "0"
    return s.upper()


def render_testbed(nodes: list[dict[str, Any]], header: list[str] | None = None, testbed: dict | None = None,
                   sim: dict | None = None, trailer: list[str] | None = None) -> str:
    """TOML text of a testbed file (comments, [testbed], [sim], one [[node]] per dict)."""
    out = [f"# {h}" if h else "#" for h in (header or [])]
    if header:
        out.append("")
    if testbed:
        out.append("[testbed]")
        out += [f"{k} = {_toml_value(v)}" for k, v in testbed.items()]
        out.append("")
    if sim:
        out.append("[sim]")
        out += [f"{k} = {_toml_value(v)}" for k, v in sim.items()]
        out.append("")
    for n in nodes:
        for c in n.get("_comments", []):
            out.append(f"# {c}")
        prefix = "# " if n.get("_commented") else ""
        out.append(f"{prefix}[[node]]")
        for k in NODE_KEYS:
            if k in n and n[k] is not None:
                out.append(f"{prefix}{k} = {_toml_value(n[k])}")
        out.append("")
    for t in trailer or []:
        out.append(f"# {t}" if t else "#")
    return "\n".join(out).rstrip() + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def with_runner(testbed: Testbed, runner: str | None) -> Testbed:
    """``testbed`` with every node flashed by ``runner`` (`cisl flash -r`), or unchanged for None.

    Only between the boards' runners (pyocd, nrfutil, nrfjprog): a virtual node stays on runner sim.
    """
    import dataclasses

    if runner is None:
        return testbed
    if runner not in RUNNER_NAMES or runner == "sim":
        raise UserError(f"--runner {runner}: choose one of {', '.join(r for r in RUNNER_NAMES if r != 'sim')}")
    virtual = [n for n in testbed.nodes if n.runner == "sim"]
    if virtual:
        raise UserError(f"--runner {runner}: node {virtual[0].id} of {testbed.path} is on the virtual testbed "
                        "(runner sim); drop --runner")
    return dataclasses.replace(testbed, nodes=[dataclasses.replace(n, runner=runner) for n in testbed.nodes])


def node_boards(testbed: Testbed, devices: int | None = None) -> list[str]:
    """Per node id 0..D-1 the board it is (or, virtual, stands in for): what `cisl compile
    --testbed` plans every node against. The testbed must hold exactly those ids."""
    ids = testbed.ids
    d = len(ids) if devices is None else devices
    if ids[:d] != list(range(d)) or (devices is None and ids != list(range(d))):
        missing = sorted(set(range(d)) - set(ids))
        what = f"has no node {missing[0]}" if missing else f"numbers its nodes {ids[0]}..{ids[-1]}"
        raise UserError(f"{testbed.path}: {what}; a build's nodes are 0..{d - 1}, so the testbed needs one "
                        f"[[node]] with each of those ids")
    return [testbed.node(k).hardware for k in range(d)]


def parse_board_list(text: str, option: str = "--models") -> list[str]:
    """``nrf52840dk*8,nrf52833dk*8`` (or one name per node, comma-separated) -> one board per node."""
    from ..boards import available_boards

    real = [b for b in available_boards() if b not in VIRTUAL_BOARDS]
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        name, _, count = part.partition("*")
        check_choice(option, "board", name.strip(), real)
        if count and not (count.strip().isdigit() and int(count) > 0):
            raise UserError(f"{option} {part}: the count after '*' must be a positive integer, e.g. {name}*8")
        out += [name.strip()] * (int(count) if count else 1)
    return out


STATE_KIND = "testbed-state"
_STATE_ENTRY = re.compile(r"^(flashed\.json|run\.json|inputs\.npy|supervisor[-.a-z]*|node_\d\d(\.stderr|\.tty)?|run|images|"
                          r"testbed-file|\.cisl-output|.*\.tmp)$")
# which testbed file a state folder belongs to: two files sharing one (both with the default state
# next to them) would mix flash records, images and the virtual testbed's ports
CLAIM_FILE = "testbed-file"


def state_of(path: Path) -> Path | None:
    """The state folder a testbed file names (resolved), None if it cannot be read or is no testbed file."""
    try:
        doc = read_toml(Path(path), "a testbed file")
        if not isinstance(doc.get("node"), list):
            return None
        state = (doc.get("testbed") or {}).get("state", DEFAULT_STATE)
        base = Path(path).resolve().parent
        return (Path(state) if Path(state).is_absolute() else base / state).resolve()
    except (UserError, OSError, TypeError, AttributeError):
        return None


def state_owner(state: Path) -> Path | None:
    """The other testbed file the state folder belongs to: the one that last claimed it, if it still
    exists and still names this folder (a file moved away or edited since gives the folder up)."""
    try:
        owner = Path((Path(state) / CLAIM_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    if not owner.is_file() or state_of(owner) != Path(state).resolve():
        return None
    return owner


def own_state(path: Path) -> str:
    """The state folder named after a testbed file, for a file that cannot use the default."""
    return f"{DEFAULT_STATE}-{Path(path).stem}"


def free_state(out: Path) -> str:
    """The state folder a new testbed file ``out`` should name: the default, unless another testbed file
    next to it names (or last used) that one; then one named after ``out``."""
    me = Path(out).resolve()
    default = (me.parent / DEFAULT_STATE).resolve()
    owner = state_owner(default)
    others = [f for f in me.parent.glob("*.toml") if f.resolve() != me and state_of(f) == default]
    if (owner is None or owner == me) and not others:
        return DEFAULT_STATE
    return own_state(me)


@contextlib.contextmanager
def testbed_in_use(testbed: "Testbed") -> Iterator[None]:
    """The locks `cisl flash` and `cisl logs` hold over a testbed: a second run would reset its nodes in
    the middle of the first one's and read the same ports. One for the testbed (its state folder), and
    one per board's probe and serial port, so that two testbed files naming the same boards (a lab's
    16-node file and a 4-node file for a quick check) cannot drive them at once either."""
    import os

    from ..fsutil import use_lock

    with contextlib.ExitStack() as held:
        held.enter_context(use_lock(testbed.state_dir, f"{testbed.path}: another `cisl flash` or `cisl logs` is "
                                                       f"using this testbed (state {testbed.state_dir}); wait for it "
                                                       "to end"))
        held.enter_context(_unclaimed_on_failure(testbed))
        for n in testbed.nodes:
            if n.runner == "sim":  # its pty lives in the state folder, locked above
                continue
            busy = (f"{testbed.path}: node {n.id}: another `cisl flash` or `cisl logs` is using its %s (perhaps "
                    "through another testbed file that names the same board); wait for it to end")
            if n.probe is not None:
                held.enter_context(use_lock(f"probe:{normalize_serial(n.probe)}", busy % f"probe {n.probe}"))
            held.enter_context(use_lock(f"port:{os.path.realpath(n.port_path)}", busy % f"port {n.port}"))
        yield


@contextlib.contextmanager
def _unclaimed_on_failure(testbed: "Testbed") -> Iterator[None]:
    """A run refused or stopped before it wrote anything into a state folder it made (a port clash, a
    board mismatch) leaves no folder behind: only the claim, which would tie that folder to this
    testbed file for nothing."""
    from ..fsutil import OWNER_FILE, missing_parents

    state = Path(testbed.state_dir)
    made = [] if state.exists() else [state, *missing_parents(state)]
    try:
        yield
    except BaseException:
        if made and state.is_dir() and {p.name for p in state.iterdir()} <= {OWNER_FILE, CLAIM_FILE}:
            for name in (OWNER_FILE, CLAIM_FILE):
                (state / name).unlink(missing_ok=True)
            for folder in made:  # innermost first, each only if still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise


def check_state_claim(testbed: "Testbed") -> None:
    """Refuse a testbed file whose state folder belongs to another testbed file, in one line."""
    owner = state_owner(testbed.state_dir)
    if owner is not None and owner != Path(testbed.path).resolve():
        raise UserError(f"{testbed.path}: its state folder {testbed.state_dir} belongs to the testbed file {owner} "
                        f"(flash records, images, the virtual testbed); give it a folder of its own: [testbed] state "
                        f"= \"{own_state(testbed.path)}\"")


def claim_state_dir(testbed: "Testbed") -> Path:
    """Make sure the testbed's state folder is cisl's before writing into it (flash records, images,
    the virtual testbed's files, all under fixed names): new, empty, or one cisl made. A folder
    holding other files, e.g. `state = "."` next to the user's work, is refused in one line."""
    from ..fsutil import OWNER_FILE, output_owner

    state = Path(testbed.state_dir)
    if state.exists():
        if not state.is_dir():
            raise UserError(f"{state}: the testbed's state folder is a file; set [testbed] state in {testbed.path} "
                            f"to a folder (default {DEFAULT_STATE})")
        names = sorted(p.name for p in state.iterdir())
        if names and not (output_owner(state) == STATE_KIND or _legacy_state(state)):
            raise UserError(f"{state}: the testbed's state folder holds {names[0]} and was not made by cisl; set "
                            f"[testbed] state in {testbed.path} to a folder of its own (default {DEFAULT_STATE})")
        foreign = [n for n in names if not _STATE_ENTRY.match(n)]
        if foreign:
            raise UserError(f"{state}: the testbed's state folder holds {foreign[0]}, which cisl did not write; "
                            f"set [testbed] state in {testbed.path} to a folder of its own (default {DEFAULT_STATE})")
    check_state_claim(testbed)
    state.mkdir(parents=True, exist_ok=True)
    owner = state / OWNER_FILE
    if not owner.is_file():
        owner.write_text(f"cisl {STATE_KIND}\n")
    (state / CLAIM_FILE).write_text(f"{Path(testbed.path).resolve()}\n")
    return state


def _legacy_state(state: Path) -> bool:
    """A state folder of a cisl version before the owner file: its flash record or supervisor config."""
    import json

    for name, key in (("flashed.json", "plan_sha256"), ("supervisor-config.json", "nonce")):
        try:
            if key in json.loads((state / name).read_text()):
                return True
        except (OSError, ValueError, TypeError):
            continue
    return False
