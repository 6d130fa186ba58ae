"""Boards: boards/<name>/board.toml holds the facts (core, memory, build settings, serial).

Every board.toml is checked against :data:`BOARD_SCHEMA` when it is loaded (codegen/config_schema.py), so
a typo or a value of the wrong type is one line naming the file, the table and the key, not a
KeyError later inside `cisl build`.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError
from .resources import resource_dir
from .config_schema import BOOL, INT, NUMBER, STR, STR_LIST, Either, Kind, Table, read_toml, validate

# { central, low, high, source } in the unit its key names, or just a number (boards/nrf52840dk/board.toml)
_FIGURE = Either((NUMBER, Table({"central": NUMBER, "low": NUMBER, "high": NUMBER, "source": STR},
                                required=("central", "low", "high"))),
                 "a number or { central = ..., low = ..., high = ..., source = \"...\" }")
_FOOTPRINT_LIB = Table({"flash_fixed": INT, "ram_fixed": INT})

DEBUG_PORTS = ("open", "protected")
DEBUG_PORT = Kind('"open" or "protected"', lambda v: v in DEBUG_PORTS)
BUILD_LETTER = Kind("one capital letter, e.g. \"F\"", lambda v: isinstance(v, str) and len(v) == 1 and "A" <= v <= "Z")

BOARD_SCHEMA = Table({
    "board": Table({
        "name": STR, "description": STR, "core": STR, "mcu": STR, "hfclk": STR,
        "clock_hz": INT,            # CPU clock; 0: host time (sim)
        "timer_hz": INT,
        "flash_bytes": INT, "ram_bytes": INT, "flash_origin": INT, "ram_origin": INT,
        "builds_plans_for": STR_LIST,  # boards whose plans this one builds too (qemu-m4)
    }, required=("clock_hz", "flash_bytes", "ram_bytes")),
    "build": Table({
        "cc": STR, "objcopy": STR, "output": STR,
        "cpu_flags": STR_LIST, "cflags": STR_LIST, "kernel_cflags": STR_LIST, "upstream_cflags": STR_LIST,
        "ldflags": STR_LIST, "sources": STR_LIST, "defines": STR_LIST,
        "hex": BOOL, "inputs": BOOL, "size_check": BOOL,
        "stack_bytes": INT,
        "support": STR,  # folder (relative to this one) whose sources and headers this board builds
    }, required=("cc", "cflags", "sources", "output")),
    "serial": Table({"kind": STR}),
    "uart": Table({"peripheral": STR, "tx_pin": INT, "rx_pin": INT, "baud": INT}),
    "probe": Table({"family": STR, "pyocd_target": STR, "interface": STR}),
    "radio": Table({"phys": STR_LIST, "frequency_mhz": INT, "txpower_dbm": INT, "start_guard_us": INT, "first_guard_ms": INT,
                    "scan_timeout_ms": INT, "takeover_ms": INT, "resync_listen_ms": INT}),
    "mixer": Table({name: Table({"base": NUMBER, "per_row": NUMBER, "per_row_byte": NUMBER,
                                 "per_byte": NUMBER, "per_row_row": NUMBER, "safety": NUMBER},
                                required=("base", "per_row", "per_row_byte", "per_byte"))
                    for name in ("per_packet_cycles", "slot_cycles")}),
    "node_id": Table({"uicr_word": STR}),
    # boards/nrf52840dk: the WDT's timeout, 0 = off (board.c watchdog_start; _check_watchdog)
    "watchdog": Table({"timeout_ms": INT}),
    # boards/nrf52840dk: "open" keeps the rev-3 debug port open across resets (docs/design/approtect.md)
    "security": Table({"debug_port": DEBUG_PORT,
                       # first build-code letter with the revision-3 access port protection ("F" nRF52840)
                       "approtect_from_build": BUILD_LETTER}),
    "inputs": Table({"source": STR, "max_windows": INT, "inferences": INT}),
    "footprint": Table({"mixer": BOOL, "nnref": _FOOTPRINT_LIB, "cmsis-nn": _FOOTPRINT_LIB,
                        "ops": Table(values=INT)}),  # bytes per op kind of the schedule, and 'default'
    "timing": Table({
        "source": STR,
        "models": STR,  # the board whose timing and power facts model this one's images
        "flash_wait": Table({"low": NUMBER, "central": NUMBER, "high": NUMBER}, required=("low", "central", "high")),
        "flash_line_bytes": INT,
        "icache": Table({"enabled": BOOL, "bytes": INT, "ways": INT, "line_bytes": INT}),
    }),
    # [power.ldo] / [power.dcdc]: cpu_active_ma, radio_tx_<dBm>dbm_ma, radio_rx_<phy>_ma (codegen/timing/energy.py)
    "power": Table({"voltage_v": NUMBER, "regulator": STR, "document": STR, "idle_ua": _FIGURE,
                    "ldo": Table(values=_FIGURE), "dcdc": Table(values=_FIGURE)}),
    "qemu": Table({"machine": STR, "cpu": STR, "system": STR, "insns_per_tick": INT}),
}, required=("board", "build"))


@dataclass(frozen=True)
class Board:
    name: str
    path: Path  # the board's folder (startup code, HAL, linker script)
    facts: dict[str, Any]

    @property
    def ram_bytes(self) -> int:
        return int(self.facts["board"]["ram_bytes"])

    @property
    def flash_bytes(self) -> int:
        return int(self.facts["board"]["flash_bytes"])

    @property
    def build(self) -> dict[str, Any]:
        return self.facts["build"]

    @property
    def support(self) -> Path:
        """The folder of the board's C sources and headers: its own, or the one ``[build] support``
        names (boards/nrf52833dk builds boards/nrf52840dk's code with its own memory map)."""
        rel = self.build.get("support")
        return (self.path / rel).resolve() if rel else self.path

    @property
    def models(self) -> str | None:
        """The board whose timing, power and budgets a virtual board's nodes stand in for (sim and
        qemu-m4: nrf52840dk), None for a real board."""
        m = self.facts.get("timing", {}).get("models")
        return str(m) if m else None

    @property
    def part(self) -> str:
        """The MCU as its maker writes it, for messages ("nRF52840"); the board name when board.toml
        names none."""
        mcu = str(self.facts["board"].get("mcu", self.name))
        return "nRF" + mcu[3:] if mcu.startswith("nrf") else mcu


def available_boards() -> list[str]:
    root = resource_dir("boards")
    return sorted(p.name for p in root.iterdir() if (p / "board.toml").is_file())


def read_board(folder: Path, name: str | None = None) -> Board:
    """Read and check ``folder``/board.toml; every mistake is a one-line UserError naming file and key."""
    folder = Path(folder)
    path = folder / "board.toml"
    try:
        st = path.stat()
    except OSError:  # read_toml names the problem
        return Board(name or folder.name, folder, _checked_facts(path))
    # the planner asks for a board hundreds of times per run: parse once per version of the file,
    # and give each caller its own copy of the facts to change
    facts = _cached_facts(str(path), st.st_mtime_ns, st.st_size)
    return Board(name or folder.name, folder, copy.deepcopy(facts))


def _checked_facts(path: Path) -> dict[str, Any]:
    facts = read_toml(path, "a board file (see boards/nrf52840dk/board.toml)")
    validate(str(path), facts, BOARD_SCHEMA)
    _check_radio(path, facts)
    _check_watchdog(path, facts)
    return facts


# RADIO.TXPOWER takes only its enumerated values (two's complement dBm); anything else is an undefined
# code. nRF52840: nrfx's nrf52840.svd (Nordic MDK) lists +8..+2, 0, -4 .. -20 in steps of 4, -40; pyocd's
# also lists Neg30dBm but as 0xFF, not -30's code 0xE2 (Zephyr calls it deprecated), so -30 is refused.
# nRF52833 (pyocd's nrf52833.svd): the same and Neg30dBm = 0xE2.
TXPOWER_DBM = {
    "nrf52840": (8, 7, 6, 5, 4, 3, 2, 0, -4, -8, -12, -16, -20, -40),
    "nrf52833": (8, 7, 6, 5, 4, 3, 2, 0, -4, -8, -12, -16, -20, -30, -40),
}
# boards/nrf52840dk/radio.c turns the waits into TIMER0 ticks (16 MHz, uint32) and compares them with
# reached(), a signed 32-bit difference: a wait must stay below 2^31 ticks = 134 217 727 us.
_MAX_WAIT_US = (1 << 31) // 16 - 1
_RADIO_RANGES = {  # key: (low, high, unit)
    "frequency_mhz": (2400, 2500, "MHz"),   # radio.c's own #error range (FREQUENCY, MAP = Default)
    "start_guard_us": (0, _MAX_WAIT_US, "us"),
    "first_guard_ms": (1, _MAX_WAIT_US // 1000, "ms"),
    "scan_timeout_ms": (1, _MAX_WAIT_US // 1000, "ms"),
    "takeover_ms": (1, _MAX_WAIT_US // 1000, "ms"),
    "resync_listen_ms": (1, _MAX_WAIT_US // 1000, "ms"),
}


def _check_radio(path: Path, facts: dict[str, Any]) -> None:
    """[radio] values the board code writes into registers or TIMER0 waits: one line each, naming
    file, key and what to choose (audit U, finding 8)."""
    radio = facts.get("radio")
    if not radio:
        return
    mcu = str(facts.get("board", {}).get("mcu", ""))
    powers = TXPOWER_DBM.get(mcu)
    dbm = radio.get("txpower_dbm")
    if dbm is not None and powers is not None and dbm not in powers:
        raise UserError(f"{path}: [radio] txpower_dbm = {dbm} is not a TX power the {mcu} has (RADIO.TXPOWER "
                        f"takes only its listed steps); choose one of "
                        f"{', '.join(f'{p:+d}' if p else '0' for p in powers)} dBm")
    for key, (lo, hi, unit) in _RADIO_RANGES.items():
        v = radio.get(key)
        if v is not None and not lo <= v <= hi:
            why = " (radio.c's TIMER0 waits stay below 2^31 ticks at 16 MHz)" if key != "frequency_mhz" else ""
            raise UserError(f"{path}: [radio] {key} = {v} is out of range; use {lo}..{hi} {unit}{why}")


# The radio's waits that reload the watchdog only before they start (boards/nrf52840dk/radio.c): a
# listener's first scan of a round, the backup's, the initiator's start barrier, a resynchronising
# node's window (which the board also ends at timeout - 100 ms when its last inference was long).
WATCHDOG_WAITS = ("scan_timeout_ms", "takeover_ms", "first_guard_ms", "resync_listen_ms")
WATCHDOG_SLACK_MS = 100        # the code around a wait, up to the next reload
WATCHDOG_MAX_MS = 131_000_000  # CRV is 32 bits of 32.768 kHz ticks: 131,072 s


def _check_watchdog(path: Path, facts: dict[str, Any]) -> None:
    """[watchdog] timeout_ms: 0 (off), or longer than every radio wait without a reload plus
    WATCHDOG_SLACK_MS, so a node that waits as designed is never reset."""
    wd = facts.get("watchdog")
    if wd is None:
        return
    ms, radio = wd.get("timeout_ms", 0), facts.get("radio", {})
    if not 0 <= ms <= WATCHDOG_MAX_MS:
        raise UserError(f"{path}: [watchdog] timeout_ms = {ms} is out of range; use 0 (off) or up to "
                        f"{WATCHDOG_MAX_MS} ms (the WDT counts 2^32 ticks of 32.768 kHz)")
    waits = {k: radio[k] for k in WATCHDOG_WAITS if k in radio}
    if ms and waits:
        key = max(waits, key=waits.get)
        if ms < waits[key] + WATCHDOG_SLACK_MS:
            raise UserError(f"{path}: [watchdog] timeout_ms = {ms} is shorter than [radio] {key} + "
                            f"{WATCHDOG_SLACK_MS} ms: a node waits that long without reloading it and would be "
                            f"reset; use at least {waits[key] + WATCHDOG_SLACK_MS}, or 0 to turn it off")


@functools.lru_cache(maxsize=64)
def _cached_facts(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    return _checked_facts(Path(path))


def load_board(name: str) -> Board:
    """Load a board by name; unknown names give a one-line UserError listing the known boards."""
    known = available_boards()
    if name not in known:
        raise UserError(f"unknown board '{name}'; available boards: {', '.join(known)}")
    return read_board(resource_dir("boards") / name, name)


def shared_board(name: str) -> Board:
    """:func:`load_board`'s Board, one object per version of the file for every caller that only
    reads it: the planner prices hundreds of splits, and listing the boards and deep-copying the facts
    for each lookup were a tenth of `cisl plan`. Never change what it returns; take load_board's copy."""
    path = resource_dir("boards") / name / "board.toml"
    try:
        st = path.stat()
    except OSError:  # load_board says what is wrong (an unknown board: the known ones)
        return load_board(name)
    return _shared_board(name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _shared_board(name: str, mtime_ns: int, size: int) -> Board:
    return load_board(name)
