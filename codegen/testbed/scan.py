"""`cisl testbed scan`: draft a testbed file from the attached probes and serial ports.

Probes come from pyocd's discovery and, when installed, ``nrfutil device list --json`` and
``nrfjprog --ids``; ports from ``serial.tools.list_ports``. A probe and a port are paired only when
they are the same USB device (nrfutil says so, or the USB serial numbers agree). Nothing is guessed
silently: a probe without a port becomes a commented-out [[node]] and every port that belongs to no
probe is listed in a comment, for the user to assign.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass

from . import probes as P
from .config import DEFAULT_STATE, render_testbed


@dataclass
class ScanResult:
    text: str
    matched: int
    unmatched_probes: int
    unmatched_ports: int
    notes: list[str]


def _runner_for(probe: P.Probe, forced: str | None, unusable: set[str] = frozenset()) -> str:
    if forced:
        return forced
    jlink = probe.source in ("nrfutil", "nrfjprog") or "j-link" in probe.description.lower() or probe.serial.isdigit()
    if jlink:
        # nRF Util without its `device` command cannot flash (discover() notes it, with `nrfutil install device`)
        if shutil.which("nrfutil") and "nrfutil" not in unusable:
            return "nrfutil"
        if shutil.which("nrfjprog") and "nrfjprog" not in unusable:
            return "nrfjprog"
    return "pyocd"


def scan(board: str = "nrf52840dk", runner: str | None = None, baud: int = 115200,
         state: str = DEFAULT_STATE) -> ScanResult:
    disc = P.discover()
    try:
        ports = P.serial_ports()
    except ImportError:
        ports = []
        disc.notes.append("pyserial is not installed: pip install pyserial")
    matches, spare = P.match_ports(disc.probes, ports)
    nodes = []
    next_id = 0
    for m in matches:
        entry = {"board": board, "runner": _runner_for(m.probe, runner, disc.unusable), "probe": m.probe.serial, "baud": baud}
        comments = [f"probe {m.probe} found by {m.probe.source}"]
        if m.port is not None:
            entry = {"id": next_id, **entry, "port": m.port.path}
            next_id += 1
            comments[0] += f"; port {m.port.device}: {m.how}"
            if m.port.by_id is None:
                comments.append(f"no /dev/serial/by-id/ link for {m.port.device}: its number may change between boots")
            for extra in m.extra_ports:
                comments.append(f"the probe has another port, {extra.path} ({extra.interface or 'interface ?'}); "
                                "use it instead if the node's UART is there")
        else:
            entry = {"id": None, **entry}
            entry["_commented"] = True
            comments.append("no serial port of this probe was found: give its port (and an id) and uncomment")
        entry["_comments"] = comments
        nodes.append(entry)
    for e in nodes:
        if e.get("_commented"):
            e["id"] = next_id
            next_id += 1
    header = [f"testbed file drafted by `cisl testbed scan` on {time.strftime('%Y-%m-%d %H:%M')}",
              "node ids follow the probes' serial numbers, not where the boards stand: renumber them to your",
              "layout (node 0 is the sink) and add position = [x, y] in metres if you know it."]
    if not disc.probes:
        header.append("no debug probe was found: connect the boards (and check USB permissions / udev rules)")
    trailer = []
    if spare:
        trailer.append("serial ports that belong to no probe found (assign them by hand if they are a node's UART):")
        for p in spare:
            trailer.append(f"  {p.path}  usb serial {p.serial_number or '?'}  {p.description}")
    for n in disc.notes:
        trailer.append(f"note: {n}")
    if not any(not e.get("_commented") for e in nodes):
        trailer += ["", "a node looks like this (one [[node]] per board; see docs/usage.md):", "[[node]]", "id = 0",
                    f'board = "{board}"', f'runner = "{runner or "nrfutil"}"', 'probe = "683123456"',
                    'port = "/dev/serial/by-id/usb-SEGGER_J-Link_000683123456-if00"', f"baud = {baud}"]
    text = render_testbed(nodes, header, {"name": "lab", **({"state": state} if state != DEFAULT_STATE else {})},
                          None, trailer)
    matched = sum(1 for m in matches if m.port is not None)
    return ScanResult(text, matched, len(matches) - matched, len(spare), disc.notes)
