"""What is attached: debug probes (pyocd, nrfutil, nrfjprog) and serial ports (pyserial), and which
port belongs to which probe (the probe's CDC UART on the same USB device, matched by serial number)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..toolrun import log_command, run_in_group
from .config import normalize_serial

SEGGER_VID = 0x1366
BY_ID = Path("/dev/serial/by-id")


@dataclass(frozen=True)
class Probe:
    serial: str
    description: str = ""
    source: str = ""  # which tool found it: pyocd, nrfutil, nrfjprog
    ports: tuple[str, ...] = ()  # CDC ports the tool itself associates with the probe (nrfutil)

    @property
    def key(self) -> str:
        return normalize_serial(self.serial)

    def __str__(self) -> str:
        return f"{self.serial} ({self.description})" if self.description else self.serial


@dataclass(frozen=True)
class SerialPort:
    device: str  # /dev/ttyACM0
    by_id: str | None = None  # /dev/serial/by-id/... link to it, when udev made one
    serial_number: str | None = None  # USB iSerial of the device the port belongs to
    vid: int | None = None
    pid: int | None = None
    interface: str | None = None  # e.g. "if00" or the USB interface name
    description: str = ""

    @property
    def path(self) -> str:
        return self.by_id or self.device


@dataclass
class Discovery:
    probes: list[Probe] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # tools missing or failing
    unusable: set[str] = field(default_factory=set)  # tools on PATH that cannot flash (nrfutil without `device`)


class NrfUtilWithoutDevice(RuntimeError):
    """nRF Util is installed, but not its `device` command (`nrfutil install device` was never run): every
    call names a probe that is not found, although the probes are fine."""


def nrfutil_without_device(text: str) -> bool:
    """Whether nRF Util's output says its `device` command is not installed ("Error: nrfutil command
    `device` not found ... Caused by: Subcommand nrfutil-device not found")."""
    t = (text or "").lower()
    return "nrfutil-device not found" in t or "command `device` not found" in t or "command 'device' not found" in t


def nrfutil_device_missing_error(text: str) -> NrfUtilWithoutDevice:
    return NrfUtilWithoutDevice(f"nRF Util is installed without its `device` command ({_last_line(text)}); "
                                "run `nrfutil install device`")


def pyocd_probes() -> list[Probe]:
    """Probes pyocd sees (CMSIS-DAP, J-Link via pylink, ST-Link): ``ConnectHelper.get_all_connected_probes``."""
    from pyocd.core.helpers import ConnectHelper

    out = []
    for p in ConnectHelper.get_all_connected_probes(blocking=False, print_wait_message=False):
        out.append(Probe(str(p.unique_id), str(getattr(p, "description", "") or ""), "pyocd"))
    return out


def nrfutil_probes(timeout: float = 30.0) -> list[Probe]:
    """J-Link probes from ``nrfutil device list --json`` (newline-delimited JSON; the devices are in the
    ``task_end`` record), with the serial ports nrfutil associates with each."""
    log_command(["nrfutil", "device", "list", "--json"])
    # undecodable bytes replaced (here and below): a tool's output need not be UTF-8; a probe list is still one
    p = run_in_group(["nrfutil", "device", "list", "--json"], timeout)
    if p.returncode != 0 and nrfutil_without_device((p.stderr or "") + (p.stdout or "")):
        raise nrfutil_device_missing_error(p.stderr or p.stdout)
    if p.returncode != 0:
        raise RuntimeError(_last_line(p.stderr or p.stdout) or f"exit code {p.returncode}")
    devices = []
    for line in p.stdout.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        data = rec.get("data") if isinstance(rec, dict) else None
        if rec.get("type") == "task_end" and isinstance(data, dict):
            devices = (data.get("data") or {}).get("devices") or devices
    out = []
    for d in devices:
        sn = d.get("serialNumber")
        if not sn:
            continue
        ports = tuple(sorted((sp.get("comName") or sp.get("path")) for sp in d.get("serialPorts") or []
                             if sp.get("comName") or sp.get("path")))
        desc = (d.get("jlink") or {}).get("boardVersion") or (d.get("devkit") or {}).get("boardVersion") or ""
        out.append(Probe(str(sn), str(desc), "nrfutil", ports))
    return out


def nrfjprog_probes(timeout: float = 30.0) -> list[Probe]:
    """J-Link probes from ``nrfjprog --ids`` (one serial number per line)."""
    log_command(["nrfjprog", "--ids"])
    p = run_in_group(["nrfjprog", "--ids"], timeout)
    if p.returncode != 0:
        raise RuntimeError(_last_line(p.stderr or p.stdout) or f"exit code {p.returncode}")
    return [Probe(s.strip(), "J-Link", "nrfjprog") for s in p.stdout.splitlines() if s.strip().isdigit()]


def discover(tools: tuple[str, ...] = ("pyocd", "nrfutil", "nrfjprog")) -> Discovery:
    """Probes found by the given tools, merged by serial number (tools that are missing are noted)."""
    found: dict[str, Probe] = {}
    notes = []
    unusable = set()
    for tool in tools:
        try:
            if tool == "pyocd":
                probes = pyocd_probes()
            elif shutil.which(tool) is None:
                continue
            else:
                probes = nrfutil_probes() if tool == "nrfutil" else nrfjprog_probes()
        except ImportError:
            notes.append("pyocd is not installed: pip install pyocd")
            continue
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            notes.append(f"{tool} could not list probes: {e}")
            if isinstance(e, NrfUtilWithoutDevice):
                unusable.add(tool)
            continue
        except Exception as e:  # a probe driver failing (libusb, permissions) must not end the scan
            notes.append(f"{tool} could not list probes: {type(e).__name__}: {e}")
            continue
        keys = [p.key for p in probes]
        for twice in sorted({k for k in keys if keys.count(k) > 1}):  # merged below: say so, as flash refuses them
            notes.append(f"{tool} lists {keys.count(twice)} probes with serial number {twice}: cisl cannot tell "
                         "their boards apart (flashing them is refused); unplug all but one")
        for p in probes:
            old = found.get(p.key)
            if old is None:
                found[p.key] = p
            elif p.ports and not old.ports:
                found[p.key] = Probe(old.serial, old.description or p.description, old.source, p.ports)
    return Discovery(sorted(found.values(), key=lambda p: p.key), notes, unusable)


def by_id_links(root: Path = BY_ID) -> dict[str, str]:
    """realpath of a tty -> its /dev/serial/by-id/ link (the stable name)."""
    out = {}
    if root.is_dir():
        for link in sorted(root.iterdir()):
            out[os.path.realpath(link)] = str(link)
    return out


def serial_ports() -> list[SerialPort]:
    """The serial ports pyserial lists, with their /dev/serial/by-id/ names."""
    from serial.tools import list_ports

    links = by_id_links()
    out = []
    for p in list_ports.comports():
        if p.vid is None and p.serial_number is None:
            continue  # built-in UARTs (/dev/ttyS*) are no probe's
        out.append(SerialPort(p.device, links.get(os.path.realpath(p.device)), p.serial_number, p.vid, p.pid,
                              _interface(p), p.description or ""))
    return sorted(out, key=lambda s: (s.serial_number or "", s.interface or "", s.device))


def _interface(p) -> str | None:
    loc = getattr(p, "location", None) or ""
    if ":" in loc and "." in loc.rsplit(":", 1)[1]:  # "1-1.2:1.0" -> interface 0
        return f"if{int(loc.rsplit('.', 1)[1]):02d}"
    return getattr(p, "interface", None)


@dataclass
class Match:
    probe: Probe
    port: SerialPort | None
    extra_ports: list[SerialPort] = field(default_factory=list)  # other CDC ports of the same probe
    how: str = ""


def match_ports(probes: list[Probe], ports: list[SerialPort]) -> tuple[list[Match], list[SerialPort]]:
    """Pair every probe with the CDC port(s) of the same USB device: the ports nrfutil names for it, or
    the ports whose USB serial number equals the probe's (J-Link: '000683123456' = 683123456). A probe
    with several ports gets the first interface; the others are listed. Returns (matches, unmatched ports)."""
    by_dev = {os.path.realpath(p.device): p for p in ports}
    used: set[str] = set()
    matches = []
    for probe in probes:
        mine = [by_dev[os.path.realpath(d)] for d in probe.ports if os.path.realpath(d) in by_dev]
        how = "nrfutil lists the port for this probe" if mine else ""
        if not mine:
            mine = [p for p in ports if p.serial_number and normalize_serial(p.serial_number) == probe.key]
            how = "same USB serial number" if mine else ""
        mine = [p for p in mine if p.device not in used]
        mine.sort(key=lambda p: (p.interface or "", p.device))
        for p in mine:
            used.add(p.device)
        matches.append(Match(probe, mine[0] if mine else None, mine[1:], how))
    return matches, [p for p in ports if p.device not in used]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
