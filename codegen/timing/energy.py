"""Energy of a node per inference, from the board's datasheet currents (board.toml ``[power]``).

    E = V · (I_cpu · t_cpu + I_cpu,radio · t_comm + I_tx · t_tx + I_rx · t_rx + I_idle · t_idle)

* t_cpu = cycles / clock: the node's computation (the cycle model's low/central/high);
* t_tx, t_rx: radio TX-on and RX-on time (codegen/timing/comm.py);
* t_comm: the time the node spends in Mixer rounds (default: t_tx + t_rx). ``cpu_during_radio``
  says what the CPU does meanwhile. ``running`` (default) is what cisl's nRF52840 firmware does:
  boards/nrf52840dk/radio.c polls the radio and busy-waits for the slot grid, so the CPU runs for
  the whole round, radio on or off (I_cpu,radio = I_cpu). ``sleeping`` models a firmware that
  sleeps (WFE) between radio events: nothing beyond the radio currents while the radio is on (the
  datasheet's radio scenarios are measured with the CPU asleep) and idle current while it is off
  (an underestimate: the crystal keeps running between slots);
* t_idle = period − t_cpu − t_comm, never negative, at the System ON idle current.

Currents are the datasheet's typical figures, which include the chip's base current (regulator,
clocks) of that scenario; the CPU and radio terms are added, which overstates a little what the
datasheet's compounded scenarios (CPU and radio at once) show. Every input may be a number or a
(low, central, high) triple; energy bounds take all low inputs with all low currents and all high
with all high (E is monotone in each), so ``low ≤ central ≤ high``. See docs/design/timing.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from ..boards import Board, shared_board
from ..errors import UserError

REGULATORS = ("ldo", "dcdc")
PHYS = ("1M", "2M")
CPU_DURING_RADIO = ("running", "sleeping")


@dataclass(frozen=True)
class Bounds:
    """A quantity with its bounds: low ≤ central ≤ high."""

    low: float
    central: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.central <= self.high:
            raise ValueError(f"bounds out of order: {self.low} <= {self.central} <= {self.high}")

    @classmethod
    def of(cls, v: "BoundsLike") -> "Bounds":
        if isinstance(v, Bounds):
            return v
        if isinstance(v, dict):
            return cls(float(v["low"]), float(v["central"]), float(v["high"]))
        if isinstance(v, (tuple, list)):
            if len(v) != 3:
                raise ValueError(f"expected (low, central, high), got {v!r}")
            return cls(float(v[0]), float(v[1]), float(v[2]))
        x = float(v)
        return cls(x, x, x)

    def map(self, f) -> "Bounds":
        return Bounds(f(self.low), f(self.central), f(self.high))

    def __add__(self, other: "BoundsLike") -> "Bounds":
        o = Bounds.of(other)
        return Bounds(self.low + o.low, self.central + o.central, self.high + o.high)

    def to_json(self) -> dict:
        return {"low": self.low, "central": self.central, "high": self.high}


BoundsLike = Union[Bounds, float, int, Sequence[float], dict]


@dataclass(frozen=True)
class PowerFacts:
    """One board's current figures (board.toml [power]) for one regulator mode."""

    board: str
    voltage_v: float
    regulator: str                 # ldo | dcdc
    cpu_active_ma: Bounds
    radio_tx_ma: dict[int, Bounds]  # output power (dBm) -> current
    radio_rx_ma: dict[str, Bounds]  # PHY (1M, 2M) -> current
    idle_ua: Bounds
    tx_power_dbm: int               # what the board's firmware configures (board.toml [radio] txpower_dbm)
    sources: dict[str, str] = field(default_factory=dict)

    def tx_ma(self, dbm: int | None = None) -> Bounds:
        dbm = self.tx_power_dbm if dbm is None else int(dbm)
        if dbm not in self.radio_tx_ma:
            raise UserError(f"board {self.board}: no radio TX current for {dbm} dBm in [power.{self.regulator}] "
                            f"(have {', '.join(f'{p} dBm' for p in sorted(self.radio_tx_ma))}); add "
                            f"radio_tx_{dbm}dbm_ma to boards/{self.board}/board.toml")
        return self.radio_tx_ma[dbm]

    def rx_ma(self, phy: str = "2M") -> Bounds:
        if phy not in self.radio_rx_ma:
            raise UserError(f"board {self.board}: no radio RX current for BLE {phy} in [power.{self.regulator}]; add "
                            f"radio_rx_{phy.lower()}_ma to boards/{self.board}/board.toml")
        return self.radio_rx_ma[phy]


def _figure(board: str, table: dict, key: str, where: str) -> tuple[Bounds, str]:
    if key not in table:
        raise UserError(f"boards/{board}/board.toml: [{where}] has no {key}; add "
                        f"{key} = {{ central = ..., low = ..., high = ..., source = \"...\" }}")
    v = table[key]
    try:
        b = Bounds.of(v)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"boards/{board}/board.toml: [{where}] {key} must be a number or "
                        f"{{ central, low, high, source }} with low <= central <= high") from None
    return b, str(v.get("source", "")) if isinstance(v, dict) else ""


def load_power(board: str | Board, regulator: str | None = None) -> PowerFacts:
    """The [power] facts of a board (name or loaded Board); ``regulator`` overrides the board's mode."""
    b = shared_board(board) if isinstance(board, str) else board
    power: dict[str, Any] | None = b.facts.get("power")
    if not power:
        raise UserError(f"board '{b.name}' has no [power] section: add its datasheet current figures to "
                        f"boards/{b.name}/board.toml (see boards/nrf52840dk/board.toml for the keys)")
    reg = regulator or power.get("regulator", "ldo")
    if reg not in REGULATORS:
        raise UserError(f"boards/{b.name}/board.toml: [power] regulator {reg!r} must be one of {', '.join(REGULATORS)}")
    table = power.get(reg)
    if not isinstance(table, dict):
        raise UserError(f"boards/{b.name}/board.toml: no [power.{reg}] table with the {reg} current figures")
    if "voltage_v" not in power:
        raise UserError(f"boards/{b.name}/board.toml: [power] has no voltage_v (the supply of the datasheet scenarios)")
    sources: dict[str, str] = {}
    cpu, sources["cpu_active_ma"] = _figure(b.name, table, "cpu_active_ma", f"power.{reg}")
    idle, sources["idle_ua"] = _figure(b.name, power, "idle_ua", "power")
    tx, rx = {}, {}
    for key in table:
        if key.startswith("radio_tx_") and key.endswith("dbm_ma"):
            dbm = int(key[len("radio_tx_"):-len("dbm_ma")].replace("m", "-").replace("p", ""))
            tx[dbm], sources[key] = _figure(b.name, table, key, f"power.{reg}")
        elif key.startswith("radio_rx_") and key.endswith("_ma"):
            phy = key[len("radio_rx_"):-len("_ma")].upper()
            rx[phy], sources[key] = _figure(b.name, table, key, f"power.{reg}")
    dbm = int(b.facts.get("radio", {}).get("txpower_dbm", max(tx, default=0)))
    return PowerFacts(b.name, float(power["voltage_v"]), reg, cpu, tx, rx, idle, dbm, sources)


@dataclass(frozen=True)
class Pricing:
    """What a build's nodes are priced with: per node, the [power] facts of its board (a virtual node:
    the board it stands in for; a mixed testbed's differ), and the BLE PHY of the plan's rounds."""

    boards: dict[int, str]
    power: dict[int, PowerFacts]
    phy: str


def plan_pricing(plan) -> Pricing:
    """How `cisl estimate` and `cisl report` price the nodes of ``plan`` (one rule for both)."""
    boards = {d: plan.node_board(d) for d in range(plan.devices)}
    facts = {name: load_power(name) for name in sorted(set(boards.values()))}
    return Pricing(boards, {d: facts[name] for d, name in boards.items()}, plan.phy)


@dataclass(frozen=True)
class Energy:
    """A node's energy per inference (µJ) by consumer, and the times it was computed from (µs)."""

    total_uj: Bounds
    cpu_uj: Bounds       # computation
    comm_cpu_uj: Bounds  # the CPU during Mixer rounds (cpu_during_radio)
    tx_uj: Bounds
    rx_uj: Bounds
    idle_uj: Bounds
    t_cpu_us: Bounds
    t_comm_us: Bounds
    t_idle_us: Bounds    # bounds follow the energy: low energy has the most idle time
    period_us: float

    @property
    def radio_uj(self) -> Bounds:
        return self.tx_uj + self.rx_uj

    def to_json(self) -> dict:
        d = {k: (v.to_json() if isinstance(v, Bounds) else v) for k, v in self.__dict__.items()}
        d["radio_uj"] = self.radio_uj.to_json()
        return d


def _uj(volt: float, ma: float, us: float) -> float:
    return volt * ma * us * 1e-3   # V · mA · µs = nJ


def node_energy(power: PowerFacts, cycles: BoundsLike, clock_hz: float, tx_on_us: BoundsLike, rx_on_us: BoundsLike,
                period_us: float, *, comm_us: BoundsLike | None = None, tx_power_dbm: int | None = None,
                phy: str = "2M", cpu_during_radio: str = "running") -> Energy:
    """Energy (µJ, low/central/high) of one node over one inference period.

    ``cycles``: compute cycles per inference; ``tx_on_us``/``rx_on_us``: radio-on times per inference;
    ``comm_us``: time in Mixer rounds (default tx + rx on); ``period_us``: the inference period;
    ``tx_power_dbm``: default the board's configured power; ``phy``: the plan's BLE PHY.
    """
    if clock_hz <= 0:
        raise ValueError(f"clock_hz must be positive, not {clock_hz}")
    if cpu_during_radio not in CPU_DURING_RADIO:
        raise ValueError(f"cpu_during_radio must be one of {CPU_DURING_RADIO}, not {cpu_during_radio!r}")
    if phy not in PHYS:
        raise ValueError(f"phy must be one of {PHYS}, not {phy!r}")
    cyc, tx, rx = Bounds.of(cycles), Bounds.of(tx_on_us), Bounds.of(rx_on_us)
    comm = tx + rx if comm_us is None else Bounds.of(comm_us)
    i_tx, i_rx, i_cpu, i_idle = power.tx_ma(tx_power_dbm), power.rx_ma(phy), power.cpu_active_ma, power.idle_ua
    v = power.voltage_v
    t_cpu = cyc.map(lambda c: c / clock_hz * 1e6)
    vals: dict[str, list[float]] = {k: [] for k in ("total", "cpu", "comm_cpu", "tx", "rx", "idle", "t_idle")}
    for bound in ("low", "central", "high"):
        tc, tco = getattr(t_cpu, bound), getattr(comm, bound)
        ttx, trx = getattr(tx, bound), getattr(rx, bound)
        t_idle = max(0.0, float(period_us) - tc - tco)
        e_cpu = _uj(v, getattr(i_cpu, bound), tc)
        if cpu_during_radio == "running":
            e_comm_cpu = _uj(v, getattr(i_cpu, bound), tco)
        else:   # asleep: idle current while the radio is off within the rounds
            e_comm_cpu = v * getattr(i_idle, bound) * max(0.0, tco - ttx - trx) * 1e-6
        e_tx = _uj(v, getattr(i_tx, bound), ttx)
        e_rx = _uj(v, getattr(i_rx, bound), trx)
        e_idle = v * getattr(i_idle, bound) * t_idle * 1e-6   # V · µA · µs = pJ
        for k, x in (("cpu", e_cpu), ("comm_cpu", e_comm_cpu), ("tx", e_tx), ("rx", e_rx), ("idle", e_idle),
                     ("t_idle", t_idle)):
            vals[k].append(x)
        vals["total"].append(e_cpu + e_comm_cpu + e_tx + e_rx + e_idle)
    b = {k: Bounds(*sorted(x)) if k != "t_idle" else Bounds(min(x), x[1], max(x)) for k, x in vals.items()}
    return Energy(b["total"], b["cpu"], b["comm_cpu"], b["tx"], b["rx"], b["idle"], t_cpu, comm, b["t_idle"],
                  float(period_us))


@dataclass(frozen=True)
class RadioUse:
    """A node's radio per inference, summed over the Mixer rounds (means over the simulated inferences)."""

    node: int
    tx_on_us: Bounds
    rx_on_us: Bounds   # low: undecoded busy slots as empty windows; central = high: as full packets
    comm_us: Bounds    # all rounds' start guards and air time (the node takes part in every round; its CPU polls)


def radio_use(rounds: Sequence, node: int) -> RadioUse:
    """Sum comm.py's RoundTime list for one node: the inputs node_energy takes."""
    tx = sum(r.nodes[node].tx_on_us.mean for r in rounds)
    rx = sum(r.nodes[node].rx_on_us.mean for r in rounds)
    rx_low = sum(r.nodes[node].rx_on_us_low.mean for r in rounds)
    guard = sum(r.guard_us for r in rounds)  # the node waits in the round while the initiator's guard runs
    air = [sum(r.air_us.min for r in rounds) + guard, sum(r.air_us.mean for r in rounds) + guard,
           sum(r.air_us.max for r in rounds) + guard]
    return RadioUse(node, Bounds.of(tx), Bounds(rx_low, rx, rx), Bounds(*air))


__all__ = ["Bounds", "CPU_DURING_RADIO", "Energy", "PowerFacts", "Pricing", "RadioUse", "load_power", "node_energy",
           "plan_pricing", "radio_use"]
