"""The virtual testbed behind `cisl flash`/`cisl logs`: start, ask and stop the supervisor.

State folder (``[testbed] state``, default ``.cisl-testbed`` next to the testbed file)::

    supervisor.json         pid, control socket, config hash of the running supervisor
    supervisor.log          what it did (runs started, ended)
    supervisor-config.json  the ports it serves (node -> port path)
    run.json                what a reset starts: node count, topology, seed, medium timeout (or, for
                            qemu-m4 builds, the QEMU command line and no medium)
    inputs.npy              the int8 input windows the medium hands out
    node_NN/firmware.elf    the "flashed" images
    node_NN/transcript.bin  qemu-m4: what the node receives, recorded by the int8 reference; the
                            node writes what it sends to node_NN/sent.bin
    node_NN.stderr          each node process's standard error (last run)
    run/                    the medium's transcript, losses and radio statistics (last run)
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..inputs import load_build_inputs
from ..toolrun import log_command
from ..testbed.config import NodeEntry, Testbed, check_state_claim, claim_state_dir, load_testbed
from ..testbed.layout import POSITIONS  # run.json's name for a layout by positions
from .supervisor import read_line

MODULE = "codegen.vtestbed.supervisor"


def image_path(testbed: Testbed, node_id: int) -> Path:
    return testbed.state_dir / f"node_{node_id:02d}" / "firmware.elf"


def sim_ports(testbed: Testbed) -> dict[int, str]:
    return {n.id: n.port_path for n in testbed.nodes if n.runner == "sim"}


def _socket_path(state: Path) -> str:
    p = str(state / "supervisor.sock")
    if len(p) < 100:
        return p
    return f"/tmp/cisl-tb-{hashlib.sha1(p.encode()).hexdigest()[:12]}.sock"  # AF_UNIX paths are short


def _config_hash(ports: dict[int, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(ports.items())).encode()).hexdigest()[:16]


def read_info(state: Path) -> dict | None:
    try:
        return json.loads((state / "supervisor.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return MODULE in cmdline  # not some other process that got the pid later


def _ask(sock_path: str, req: dict, timeout: float) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(json.dumps(req).encode() + b"\n")
        return json.loads(read_line(s))


def running(testbed: Testbed) -> dict | None:
    """The running supervisor's info, or None (stale files of a dead one are not "running")."""
    info = read_info(testbed.state_dir)
    if not info or not _alive(int(info.get("pid", -1))):
        return None
    try:
        _ask(info["socket"], {"cmd": "ping"}, 5.0)
    except (OSError, ValueError):
        return None
    return info


def request(testbed: Testbed, req: dict, timeout: float = 60.0) -> dict:
    check_state_claim(testbed)  # another testbed file's supervisor runs other nodes and builds
    info = running(testbed)
    if info is None:
        raise UserError(f"the virtual testbed of {testbed.path} is not running; start it with "
                        f"`cisl flash BUILD --testbed {testbed.path}`")
    try:
        resp = _ask(info["socket"], req, timeout)
    except (OSError, ValueError) as e:
        raise UserError(f"the virtual testbed's supervisor did not answer ({e}); see "
                        f"{testbed.state_dir / 'supervisor.log'}") from None
    if not resp.get("ok"):
        raise UserError(f"virtual testbed: {resp.get('error', 'request failed')}")
    return resp


def ensure_supervisor(testbed: Testbed) -> dict:
    """Start the supervisor for this testbed unless one with the same ports is running."""
    state = testbed.state_dir
    ports = sim_ports(testbed)
    chash = _config_hash(ports)
    info = running(testbed)
    if info is not None:
        if info.get("config_hash") == chash:
            return info
        stop(testbed)  # the testbed file changed (nodes, ports): start over
    claim_state_dir(testbed)
    replace = _own_port_links(testbed, ports)
    nonce = uuid.uuid4().hex
    cfg = {"ports": {str(k): v for k, v in ports.items()}, "socket": _socket_path(state), "nonce": nonce,
           "config_hash": chash, "replace": replace}
    (state / "supervisor-config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (state / "supervisor.error").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", MODULE, "--state", str(state), "--config", str(state / "supervisor-config.json"),
           "--daemon"]
    log_command(cmd)
    with open(state / "supervisor.log", "a") as log:
        p = subprocess.run(cmd,
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30)
    if p.returncode != 0:
        raise UserError(f"the virtual testbed's supervisor did not start; see {state / 'supervisor.log'}")
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        info = read_info(state)
        if info and info.get("nonce") == nonce:
            return info
        err = state / "supervisor.error"
        if err.is_file():
            raise UserError(f"the virtual testbed's supervisor failed: {err.read_text().strip()}")
        time.sleep(0.02)
    raise UserError(f"the virtual testbed's supervisor did not come up within 15 s; see {state / 'supervisor.log'}")


def _own_port_links(testbed: Testbed, ports: dict[int, str]) -> dict[str, str]:
    """The symlinks at the port paths that this testbed's own supervisor made (one that was killed left
    them: its supervisor.json names each link and the pseudo-terminal it points at), which the new
    supervisor replaces: link -> its target. Any other file at a port path is refused in one line: a
    symlink there is another testbed's port (a copied testbed file with the same ports) or yours,
    and the virtual testbed would take it over and `cisl testbed stop` delete it."""
    old = read_info(testbed.state_dir) or {}  # no supervisor of this testbed runs now: a dead one's record
    made = {os.path.abspath(str(v)): (old.get("ptys") or {}).get(str(k)) for k, v in (old.get("ports") or {}).items()}
    replace = {}
    for k, port in ports.items():
        if not os.path.lexists(port):
            continue
        if not os.path.islink(port):
            raise UserError(f"{testbed.path}: node {k}: port {port} exists and is not a symlink; the virtual "
                            "testbed puts the node's pseudo-terminal there: choose another path")
        target = os.readlink(port)
        mine = made.get(os.path.abspath(port), False)
        if mine == target or (mine is None and "ptys" not in old and target.startswith("/dev/pts/")
                              and not os.path.exists(target)):  # (an older cisl's record names no pseudo-terminal)
            replace[port] = target
            continue
        own = testbed.state_dir / f"node_{k:02d}.tty"
        fix = (f"give node {k} a port of its own (e.g. \"{own}\")" if os.path.abspath(own) != os.path.abspath(port)
               else "move that link away (it is not this testbed's), or give the node another port")
        raise UserError(f"{testbed.path}: node {k}: port {port} is a symlink (to {target}) that this virtual testbed "
                        f"did not make: another testbed file's port or a link of yours, which it would take over; "
                        f"{fix}")
    return replace


def stop(testbed: Testbed, timeout: float = 10.0) -> int | None:
    """End the supervisor (its nodes and medium with it); returns its pid, None if none was running."""
    check_state_claim(testbed)
    info = read_info(testbed.state_dir)
    if not info:
        return None
    pid = int(info.get("pid", -1))
    if not _alive(pid):
        (testbed.state_dir / "supervisor.json").unlink(missing_ok=True)
        return None
    try:
        _ask(info["socket"], {"cmd": "stop"}, timeout)
    except (OSError, ValueError):
        os.kill(pid, 15)  # not answering: SIGTERM ends it just as cleanly
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _alive(pid):
        os.kill(pid, 9)
    return pid


def prepare(testbed: Testbed, nodes: list[NodeEntry], build) -> None:
    """Before "flashing" sim nodes: check the run is possible, write the inputs and run.json, make
    sure the supervisor is up and halt what it runs. Images of nodes outside the build are erased, so
    a reset starts exactly the build's nodes."""
    plan = build.plan
    n = plan.devices
    qemu = plan.meta["board"] == "qemu-m4"
    where = plan.testbed_nodes
    run = _qemu_run(testbed, build) if qemu else _radio_run(testbed, build)
    x = load_build_inputs(build.dir, lookback=plan.cfg.lookback)
    info = ensure_supervisor(testbed)
    request(testbed, {"cmd": "halt"})
    state = testbed.state_dir
    xq = plan.quantize_input(np.asarray(x, dtype=np.float64)).astype(np.int8)
    if testbed.sim.inferences is not None:  # [sim] inferences: window i mod count, as the boards cycle theirs
        xq = xq[np.arange(testbed.sim.inferences) % len(xq)]
    np.save(state / "inputs.npy", xq)
    keep = {nd.id for nd in nodes}
    for k in sim_ports(testbed):
        if k not in keep:
            image_path(testbed, k).unlink(missing_ok=True)
    if qemu:
        _write_transcripts(testbed, build, xq, run)
    (state / "run.json").write_text(json.dumps({"nodes": n, "testbed_nodes": where, **run,
                                                "supervisor": info["pid"]}) + "\n")


def run_topology(run: dict):
    """The radio topology of a run.json: a named one, or a Topology of the testbed's positions."""
    if run.get("topology") == POSITIONS:
        from ..radio.topology import Topology

        return Topology(POSITIONS, np.asarray(run["positions"], dtype=float))
    return run.get("topology")


def _radio_run(testbed: Testbed, build) -> dict:
    """Board sim: node processes talk through the medium over a simulated radio topology."""
    return {**radio_layout(testbed, build.plan), "timeout": testbed.sim.timeout, "phy": build.plan.phy}


def radio_layout(testbed: Testbed, plan) -> dict:
    """Where the radio puts a plan's nodes on this testbed (plan node k on testbed node
    ``plan.testbed_nodes[k]``): codegen/testbed/layout.py `place`, the rule `cisl plan` priced the
    split by. `run_topology` turns it into what the radio takes."""
    from ..testbed.layout import Layout, place

    return place(Layout.of_testbed(testbed), plan.testbed_nodes)


BOTH_LAYOUTS = "--testbed and --topology both say where the nodes are: give one of them"


def plan_layout(testbed_file: Path, plan) -> dict:
    """`radio_layout` of a testbed file given on the command line (`cisl sim`/`estimate`/`modes
    --testbed`): one line, exit 2, when the file lacks a node the plan runs on."""
    tb = load_testbed(testbed_file)
    absent = [(k, t) for k, t in enumerate(plan.testbed_nodes) if t not in tb.ids]
    if absent:
        k, t = absent[0]
        raise UserError(f"{testbed_file}: has no node {t}, which the build's plan node {k} runs on; give the testbed "
                        f"file the build was compiled or planned for")
    return radio_layout(tb, plan)


def _qemu_run(testbed: Testbed, build) -> dict:
    """Board qemu-m4: every node on its own QEMU mps2-an386, its peers replaced by the transcript
    the int8 reference records (codegen/transcript.py); its UART (semihosting) is the port."""
    import shutil

    from ..boards import load_board
    from ..qemu import QEMU_APT, qemu_command

    facts = load_board("qemu-m4").facts
    system = facts.get("qemu", {}).get("system", "qemu-system-arm")
    if shutil.which(system) is None:
        raise UserError(f"{system} not found; the virtual testbed runs qemu-m4 nodes on it (Debian/Ubuntu: "
                        f"{QEMU_APT})")
    from ..timing.boardtime import BIN_TABLE

    cmd = qemu_command(Path("{image}"), "transcript.bin", "sent.bin", facts, board_time=BIN_TABLE)
    radio = _radio_run(testbed, build) if build.plan.devices > 1 else {"topology": None, "seed": testbed.sim.seed}
    return {"medium": False, "node_command": cmd, "node_cwd": str(testbed.state_dir / "node_{node:02d}"),
            "topology": radio["topology"], "seed": radio["seed"],
            **({"positions": radio["positions"]} if "positions" in radio else {})}


def _write_transcripts(testbed: Testbed, build, xq: np.ndarray, run: dict) -> None:
    """Per qemu-m4 node: its transcript and, when the build has board time, its binary table.

    With board time the nodes stand for nRF52840s on the testbed's radio topology: the slot-level
    Mixer simulation of the same rounds (codegen/timing/comm.py, as the sim medium plays them)
    gives every exchange's air time and each node's radio-on time, and the messages it loses are
    lost in the transcript too. Without board time (built with --no-board-time) nothing is lost and
    the nodes count QEMU instructions."""
    from ..qemu import image_path as build_image
    from ..transcript import reference, transcript
    from ..timing import boardtime as bt

    plan = build.plan
    tables = {}
    for k in range(plan.devices):
        table = build.dir / f"node_{k:02d}" / bt.TABLE
        if bt.check_table(table, build_image(build.dir, plan, k), plan):
            tables[k] = bt.read_table(table)
    lost, radio = None, {}
    if tables and plan.devices > 1:
        from ..timing.comm import comm_schedule

        rounds = comm_schedule(plan, run_topology(run), None, len(xq), int(run["seed"]))
        lost = bt.lost_messages(plan, rounds, len(xq)) or None
        radio = {k: bt.exchange_radio(rounds, k, len(xq)) for k in tables}
    ref = reference(plan, xq, lost)
    for k, t in enumerate(plan.testbed_nodes):
        d = testbed.state_dir / f"node_{t:02d}"  # beside the image of testbed node t, the node's working folder
        d.mkdir(parents=True, exist_ok=True)
        (d / "sent.bin").unlink(missing_ok=True)
        (d / "transcript.bin").write_bytes(transcript(plan, k, xq, ref))
        if k in tables:
            (d / bt.BIN_TABLE).write_bytes(bt.node_table_bin(plan, tables[k], radio.get(k, {}), len(xq)))
        else:
            (d / bt.BIN_TABLE).unlink(missing_ok=True)


def sim_testbed_text(nodes: int, topology_name: str | None = None, seed: int = 0,
                     state: str = ".cisl-testbed", board: str = "sim", models: list[str] | None = None,
                     inferences: int | None = None) -> str:
    """A testbed file for the virtual testbed: runner "sim", ports at stable paths in the state folder
    (symlinks to the pseudo-terminals the supervisor creates), positions of the radio topology."""
    from ..radio.topology import default_topology, topology
    from ..testbed.config import render_testbed

    name = topology_name or default_topology(nodes)
    try:
        topo = topology(name, None if name == "hallway16" else nodes, seed)
    except ValueError as e:
        raise UserError(f"--topology {name}: {e}") from None
    if topo.n != nodes:
        raise UserError(f"--topology {name} has {topo.n} nodes, not {nodes}")
    if models is not None and len(models) != nodes:
        raise UserError(f"--models names {len(models)} boards for {nodes} nodes; give one per node "
                        f"(e.g. nrf52840dk*{nodes // 2},nrf52833dk*{nodes - nodes // 2})")
    rows = [{"id": k, "board": board, "runner": "sim", "port": f"{state}/node_{k:02d}.tty",
             "position": [round(float(v), 2) for v in topo.positions[k]],
             **({"models": models[k]} if models else {})} for k in range(nodes)]
    header = [f"virtual testbed of {nodes} nodes, written by `cisl testbed sim`",
              f"flash a board-'{board}' build with `cisl flash BUILD --testbed THIS_FILE`; each port is a symlink to the",
              "node's pseudo-terminal while the testbed runs (`cisl testbed stop` ends it).",
              f"positions (metres) are those of the radio topology {name}, seed {seed}."]
    # where the nodes are for `cisl plan`, the medium and `--testbed` estimates (codegen/testbed/layout.py)
    header += (["[sim] topology places the nodes, so editing the positions changes nothing; remove it to",
                "place them by their positions (your lab's layout)."] if topology_name else
               ["They place the nodes for `cisl plan`, the virtual testbed and `cisl estimate/sim --testbed`:",
                "edit them to model your lab's layout."])
    sim = {"seed": seed, "timeout": 120, **({"inferences": inferences} if inferences else {})}
    if topology_name:
        sim = {"topology": topology_name, **sim}
    return render_testbed(rows, header, {"name": f"sim{nodes}", "state": state}, sim)


def write_sim_testbed(out: Path, nodes: int, topology_name: str | None = None, seed: int = 0,
                      state: str = ".cisl-testbed", board: str = "sim", force: bool = False,
                      models: list[str] | None = None, inferences: int | None = None) -> None:
    """`cisl testbed sim`: write :func:`sim_testbed_text` to ``out`` (an existing file only with ``force``)."""
    from ..fsutil import write_new_file
    from ..radio.topology import TOPOLOGIES

    if topology_name is not None and topology_name not in TOPOLOGIES:
        raise UserError(f"--topology {topology_name}: unknown; choose one of {', '.join(TOPOLOGIES)}")
    write_new_file(out, sim_testbed_text(nodes, topology_name, seed, state, board, models, inferences), force)
