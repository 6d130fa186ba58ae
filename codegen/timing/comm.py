"""Communication time from the radio: every Mixer round of a plan, slot by slot, on a topology.

For a loaded plan (``codegen.plan.io.load_plan``) this runs every Mixer round of every exchange
(somegather point or head reduction, in the order the nodes execute them) through the project's
slot-level Mixer simulation (``codegen.radio.mixer_network``: the firmware's C protocol over
``codegen.radio.channel.Channel``) with the plan's generation size, payload, owners, linger and
hard deadline, and reports per round:

* slots until every node was done, the slot length the firmware uses (plan.json ``slot_us``,
  margin included) and the round's air time ``air_us = slots · slot_us`` — what the virtual
  testbed's medium reports as a round's time and what sim nodes log in their ``sg`` lines;
* per node: TX slots, receiver-on slots, TX-on and RX-on microseconds, delivered/expected messages.
  A message split over several rounds of its exchange (codegen/plan/mixer_schedule.py) counts in
  the round of its last piece, as delivered only if every piece decoded — where and how the
  firmware hands it on — so per-exchange sums count every message once.

Round policy: ``done`` (firmware/mixer MX_TERM_DONE: a node ends once it has full rank and knows
that every node has, after lingering; cisl's default) or ``fixed`` (MX_TERM_DEADLINE: every node runs
the published Mixer's hard deadline, R = 3G + 200 slots, so ``air_us = (3G + 200) · slot_us``).
By default the plan's own policy is used, i.e. what its firmware runs.

**Same numbers as the virtual testbed.** ``cisl sim`` (radio medium, codegen/vtestbed/medium.py) builds
``topology(name, n, seed)`` and one ``Channel(topology, seed=seed)`` for the whole run, and the
nodes play inference after inference, exchange after exchange, Mixer round after round, each node
seeding round (inference i, exchange sg, part p) with ``0x9E3779B9·(i + 1) ^ (sg << 8) ^ p``
(firmware/somegather/cisl_mixer_transport.c). This module does exactly the same: the same topology
and channel from ``seed``, the same order of rounds on one channel, the same Mixer seeds, the same
configuration (features, initiator, linger, deadline). The channel draws its random numbers only
from the (transmitters, listeners) of each slot, and the Mixer's decisions depend only on its seed
and on coding vectors, never on payload bytes, so inference i of ``comm_schedule(plan, t, seed=s,
inferences=k)`` is **identical** (slot for slot, round for round) to inference i of ``cisl sim
--topology t --radio-seed s`` on a ``sim`` build of the same plan — not merely statistically equal
(tests/test_timing_comm.py checks it against a real sim run). The caveats: the sim must run the
inferences from 0 in order on a fresh medium, with the same dead radios (``dead``) and default
``ChannelParams`` (what the medium uses); a board build of the same plan runs the same rounds, so
comm.py predicts its slot counts for a radio environment modelled by the topology.

**Radio-on time per slot** (boards/nrf52840dk/radio.c, the firmware's nRF52840 HAL; RAMP 40 µs fast
ramp-up, RX half window h = 3·slot/1000 + 2·4 + 5 µs, ADDRESS event 29.6 µs (2M) / 50.9 µs (1M) after
the slot start, packet air time t_air of the round's packet, codegen.radio.airtime.air_time_us):

* TX slot: RAMP + t_air (TXEN 40 µs before the slot, END → DISABLE);
* RX slot with a packet decoded: RAMP + h + t_air (RXEN at slot − h − 40 µs, listen until END);
* RX slot with a transmission on air that was not decoded: the receiver usually matched the
  address and listened to the end of the corrupted frame (for the long Mixer packets almost all bit
  errors fall after the address), so the central value charges it like a received packet; the low
  bound (``rx_on_us_low``) charges it as an empty window;
* RX slot with nothing on air: the empty window RAMP + 2h + ADDRESS offset;
* scanning before synchronisation (a listener before its first packet): the receiver never turns
  off: one RAMP, then a whole slot per scan slot, and the synchronising packet's slot until its end.

Not included in the radio-on time: the initiator's start guard before slot 0 (``RoundTime.guard_us``:
the plan's ``round_guard_us``, board.toml ``[radio] start_guard_us`` of the boards the nodes are or
stand in for; counted in the round's time and the CPU's polling, energy.radio_use) and the time a
listener listens while it waits for the slowest node to reach the round — both depend on compute
time, which the caller knows (add them to RX-on if you model them). Ramp-up is charged at full TX/RX
current, a small overestimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import UserError
from ..plan.io import Plan
from ..radio.channel import Channel
from ..radio.physics import ChannelParams
from ..radio.mixer_network import NO_SLOT, TERM_DEADLINE, TERM_DONE, MixerNetwork
from ..radio.peers import PeerView
from ..radio.airtime import air_time_us
from ..radio.topology import TOPOLOGIES, Topology, default_topology, topology as make_topology

POLICIES = ("done", "fixed")
RAMP_US = 40            # boards/nrf52840dk/radio.c RAMP_US: TXEN/RXEN -> READY, MODECNF0.RU = Fast
JITTER_US = 4           # radio.c receive window: 2 (3 DT + 2 jitter + 5 us)
# radio.c CISL_RADIO_ADDR_EVENT_TICKS_2M / _1M (474 / 814 ticks of 16 MHz: 29.6 / 50.9 µs): slot start ->
# ADDRESS at a receiver, rounded up to whole µs (mixer_budget reads the ticks from radio.c)
ADDR_EVENT_US = {"2M": 30, "1M": 51}
SEED_MUL = 0x9E3779B9   # firmware/somegather/cisl_mixer_transport.c, per-round Mixer seed


def mixer_seed(inference: int, sg: int, part: int) -> int:
    """The Mixer seed every node uses for round (inference, sg, part), as the firmware derives it."""
    return ((SEED_MUL * (inference + 1)) ^ (sg << 8) ^ part) & 0xFFFFFFFF


def rx_half_window_us(slot_us: int) -> int:
    """Half the receive window the firmware opens around a slot start (radio.c rx_half)."""
    return 3 * slot_us // 1000 + 2 * JITTER_US + 5


def tx_slot_on_us(packet_len: int, phy: str = "2M") -> int:
    """Radio-on time of one TX slot: ramp-up plus the packet's air time."""
    return RAMP_US + air_time_us(packet_len, phy)


def rx_slot_on_us(slot_us: int, packet_len: int, phy: str = "2M", packet: bool = True) -> int:
    """Radio-on time of one synchronised RX slot: until the end of a packet, or the empty window."""
    h = rx_half_window_us(slot_us)
    if packet:
        return RAMP_US + h + air_time_us(packet_len, phy)
    return RAMP_US + 2 * h + ADDR_EVENT_US[phy]


def node_radio_on_us(tx_slots: int, rx_slots: int, initiator: bool, sync: int | None, packets: int, busy: int,
                     slot_us: int, packet_len: int, phy: str = "2M", scan_before: int = 0) -> tuple[int, int, int, int]:
    """One node's radio in one round: (scan slots, TX-on µs, RX-on µs central, RX-on µs low).

    ``rx_slots`` counts every slot with the receiver on (scanning included); ``sync`` is the slot of
    the packet that synchronised the node (None: never, or the initiator, which needs none);
    ``packets``/``busy``: synchronised RX slots with a packet decoded / with a transmission on air
    but nothing decoded; ``scan_before``: an initiator that scanned that many slots before it
    started the round (the backup taking over). The costs are the module docstring's; the sim medium uses this same
    function for the `sg` lines' ``tx_on_us``/``rx_on_us``, so the two cannot drift apart."""
    air = air_time_us(packet_len, phy)
    rx_pkt = rx_slot_on_us(slot_us, packet_len, phy, packet=True)
    rx_empty = rx_slot_on_us(slot_us, packet_len, phy, packet=False)
    if initiator:
        scan, lead = scan_before, (RAMP_US + scan_before * slot_us if scan_before else 0)
    elif sync is None:   # never synchronised: scanned all its RX slots
        scan, lead = rx_slots, (RAMP_US + rx_slots * slot_us if rx_slots else 0)
    else:
        scan, lead = sync, RAMP_US + sync * slot_us + air
    synced_rx = rx_slots - scan - (0 if initiator or sync is None else 1)
    idle = synced_rx - packets - busy
    rx_central = lead + (packets + busy) * rx_pkt + idle * rx_empty
    rx_low = lead + packets * rx_pkt + (busy + idle) * rx_empty
    return scan, tx_slots * tx_slot_on_us(packet_len, phy), rx_central, rx_low


@dataclass(frozen=True)
class Stat:
    """Mean, minimum and maximum of a quantity over the simulated inferences."""

    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat":
        v = list(values)
        if v and all(type(x) is int for x in v):
            # counts over a few inferences (most calls): the sum is exact, so these are numpy's figures
            # at a tenth of the cost (`cisl plan` makes ~20k of them)
            return cls(sum(v) / len(v), float(min(v)), float(max(v)))
        a = np.asarray(v, dtype=float)
        return cls(float(a.mean()), float(a.min()), float(a.max()))

    def to_json(self) -> dict:
        return {"mean": self.mean, "min": self.min, "max": self.max}


@dataclass
class NodeSample:
    """One node in one round of one inference (raw integers)."""

    tx_slots: int
    rx_slots: int        # slots with the receiver on (scanning included)
    scan_slots: int      # of which before synchronisation
    rx_packets: int      # synchronised RX slots in which the channel delivered a packet
    rx_busy: int         # synchronised RX slots with a transmission on air but nothing decoded
    tx_on_us: int
    rx_on_us: int
    rx_on_us_low: int
    done_slot: int       # last slot of the node's round (-1: never synchronised)
    delivered: int
    expected: int
    missing: tuple[int, ...] = ()   # the senders whose expected message did not arrive


@dataclass
class RoundSample:
    inference: int
    slots: int
    nodes: list[NodeSample]


@dataclass
class NodeRadio:
    """A node's radio in one Mixer round, over the inferences (see the module docstring for costs)."""

    node: int
    tx_slots: Stat
    rx_slots: Stat
    scan_slots: Stat
    rx_packets: Stat
    rx_busy: Stat
    tx_on_us: Stat
    rx_on_us: Stat
    rx_on_us_low: Stat
    done_slot: Stat
    delivered: Stat
    expected: int

    def to_json(self) -> dict:
        return {k: (v.to_json() if isinstance(v, Stat) else v) for k, v in self.__dict__.items()}


@dataclass
class RoundTime:
    """One Mixer round of an exchange: its configuration and what the simulation measured."""

    sg: int              # the plan's exchange index (plan.json somegather[].sg, serial `sg` lines)
    part: int
    parts: int
    name: str            # e.g. l0.x, head
    layer: int           # -1 for the head
    point: str           # x, h, y, z, head
    generation: int
    payload: int
    packet_len: int      # Mixer packet bytes (firmware MX_PACKET_LEN)
    phy: str
    slot_us: int         # the firmware's slot length (margin included)
    deadline_slots: int  # 3G + 200
    policy: str          # done | fixed
    topology: str
    seed: int
    inferences: int
    slots: Stat          # slots until every node was done (fixed: the deadline)
    air_us: Stat         # slots · slot_us: the round's length on air
    packet_air_us: int   # one packet on air
    guard_us: int        # the initiator's head start before slot 0 on the board (not in air_us)
    complete: float      # fraction of inferences in which every expected message arrived
    nodes: list[NodeRadio] = field(default_factory=list)
    samples: list[RoundSample] = field(default_factory=list)

    @property
    def fixed_us(self) -> int:
        """The published fixed round length (3G + 200)·slot_us, for comparison."""
        return self.deadline_slots * self.slot_us

    def to_json(self, samples: bool = False) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("nodes", "samples")}
        d = {k: (v.to_json() if isinstance(v, Stat) else v) for k, v in d.items()}
        d["fixed_us"] = self.fixed_us
        d["nodes"] = [n.to_json() for n in self.nodes]
        if samples:
            d["samples"] = [asdict(s) for s in self.samples]
        return d


@dataclass
class NodeExchange:
    node: int
    tx_on_us: Stat
    rx_on_us: Stat
    rx_on_us_low: Stat
    delivered: Stat
    expected: int

    def to_json(self) -> dict:
        return {k: (v.to_json() if isinstance(v, Stat) else v) for k, v in self.__dict__.items()}


@dataclass
class ExchangeTime:
    """One exchange (all its Mixer rounds summed per inference), keyed like plan.json's ``sg``."""

    sg: int
    name: str
    layer: int
    point: str
    rounds: int
    air_us: Stat
    guard_us: int        # per exchange: one start guard per round
    nodes: list[NodeExchange]

    def to_json(self) -> dict:
        return {"sg": self.sg, "name": self.name, "layer": self.layer, "point": self.point, "rounds": self.rounds,
                "air_us": self.air_us.to_json(), "guard_us": self.guard_us,
                "nodes": [n.to_json() for n in self.nodes]}


class _RecordingChannel(Channel):
    """A Channel that also notes, per slot, who listened, whether anything was on air and who decoded.

    It draws exactly the same random numbers as a plain Channel (it only observes ``slot``)."""

    log: list[tuple[int, bool, list[int], dict[int, int]]]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log = []
        self.round_slot = 0

    def note_slot(self, slot: int) -> None:
        # the round's slot number: the channel only sees slots with a transmitter and a listener,
        # while synchronisation (mx_stats slot_synced) counts every slot of the round
        self.round_slot = slot

    def slot(self, transmitters: Mapping, listeners: Iterable[int]) -> dict[int, int]:
        listeners = list(listeners)
        t = self.round_slot
        if self._failures:
            dead = self.dead_nodes()
            on_air = any(s not in dead for s in transmitters)
        else:  # the usual case: every transmitter is on air
            on_air = bool(transmitters)
        got = super().slot(transmitters, listeners)
        self.log.append((t, on_air, listeners, got))
        return got


def control_exchange(plan: Plan) -> int | None:
    """The key of an every-mode image's control round among the plan's exchanges (one past the last;
    the image numbers it after every mode's exchanges), or None."""
    return len(plan.sgs) if (plan.meta.get("mixer") or {}).get("control") else None


def exchange_order(plan: Plan) -> list[int]:
    """The exchanges (sg) in the order the nodes run them: node 0's schedule, else plan order."""
    order: list[int] = []
    if plan.nodes:
        for op in plan.nodes[0].ops:
            sg = op.attrs.get("sg")
            if isinstance(sg, int) and sg not in order:
                order.append(sg)
    rest = [s.sg for s in plan.sgs if s.sg not in order]
    return order + rest


def round_guard_us(plan: Plan) -> int:
    """The start guard before slot 0 of every round: the plan's (compile prices a virtual board's
    rounds as the boards its nodes stand in for), else — a plan of an older cisl — its board's."""
    from ..boards import load_board

    policy = (plan.meta.get("mixer") or {}).get("policy") or {}
    if "round_guard_us" in policy or "per_packet_us" in policy:  # compiled with the board models: 0 if absent
        return int(policy.get("round_guard_us", 0))
    try:
        board = load_board(str(plan.meta.get("board", "")))
    except UserError:
        return 0
    return int(board.facts.get("radio", {}).get("start_guard_us", 0))


def resolve_topology(plan: Plan, name: str | None) -> str:
    """The topology name to use: ``cisl sim``'s default for the plan's node count when None."""
    name = name or default_topology(plan.devices)
    if name not in TOPOLOGIES:
        raise UserError(f"topology {name!r}: unknown; choose one of {', '.join(TOPOLOGIES)}")
    if name == "hallway16" and plan.devices != 16:
        raise UserError(f"topology hallway16 has 16 nodes but the plan has {plan.devices}; choose a topology "
                        f"for {plan.devices} nodes (hallway, line, grid, full_mesh, random_geometric)")
    return name


def comm_schedule(plan: Plan, topology: "str | Topology | None" = None, policy: str | None = None, inferences: int = 1,
                  seed: int = 0, dead: Sequence[int] = (), params: ChannelParams | None = None,
                  fail: Sequence[tuple[int, int, int]] = (), relays: int = 0) -> list[RoundTime]:
    """Simulate every Mixer round of the plan for ``inferences`` inferences; one RoundTime per round.

    ``topology``: a codegen/radio/topology.py name (default: what ``cisl sim`` picks for the plan's
    node count), built for exactly the plan's D nodes as the sim medium does, or a Topology of D
    nodes (a testbed's positions). ``policy``: ``done``,
    ``fixed`` or None for the plan's own. ``seed`` seeds topology and channel (``cisl sim
    --radio-seed``); inference i uses the firmware's Mixer seeds for inference i and continues the
    channel of inference i − 1, exactly as a sim run. ``dead``: nodes whose radio is dead
    (``--radio-dead``); ``fail``: (node, first round, rounds), a radio dead for some Mixer rounds only,
    counted from 0 over the run as here (``run_sim(radio_fail=...)``). ``relays``: that many more
    nodes, the Topology's last ones, take part in every round without a message of their own
    (they write no rows and expect none; their radio use is reported as nodes D.. of each round).
    Rounds are returned in execution order (by sg, then part). A plan for one node has no rounds: [].
    """
    if inferences < 1:
        raise UserError(f"inferences must be at least 1, not {inferences}")
    mixer = plan.meta.get("mixer")
    if mixer is None:
        raise UserError("plan.json has no 'mixer' section; recompile with `cisl compile`")
    kind = policy or mixer["policy"]["kind"]
    if kind not in POLICIES:
        raise UserError(f"round policy {kind!r}: choose 'done' or 'fixed'")
    n = plan.devices
    control = control_exchange(plan)  # an every-mode image starts each inference with a control round
    order = ([control] if control is not None else []) + [sg for sg in exchange_order(plan) if mixer["exchanges"][sg]]
    if n < 2 or not order:
        return []
    if relays and not isinstance(topology, Topology):
        raise UserError("relays need a Topology that places them")
    if isinstance(topology, Topology):  # a testbed's own positions (the planner: a subset of its nodes)
        if topology.n != n + relays:
            raise UserError(f"the topology has {topology.n} nodes, the plan {n}" + (f" and {relays} relays" if relays else ""))
        name, topo = topology.name, topology
    else:
        name = resolve_topology(plan, topology)
        topo = make_topology(name, None if name == "hallway16" else n, seed)
    channel = _RecordingChannel(topo, params or ChannelParams(), seed=seed)
    for k in dead:
        if not 0 <= int(k) < n:
            raise UserError(f"dead node {k} is not one of the plan's nodes 0..{n - 1}")
        channel.fail(int(k))
    for k, first, rounds in fail:
        if not 0 <= int(k) < n or int(first) < 0 or int(rounds) < 1:
            raise UserError(f"radio failure ({k}, {first}, {rounds}): node 0..{n - 1}, first round >= 0, rounds >= 1")
        channel.fail(int(k), start=int(first), duration=int(rounds), unit="round")
    phy = mixer["policy"]["phy"]
    linger = int(mixer["policy"]["linger"])
    initiator = int(mixer["initiator"])
    sink = plan.sink
    guard = round_guard_us(plan)
    sgs = {s.sg: s for s in plan.sgs}

    def rounds_of(sg: int) -> list[dict]:
        return [mixer["control"]] if sg == control else mixer["exchanges"][sg]

    if control is not None:
        from ..plan.structure import SomegatherPoint

        sgs[control] = SomegatherPoint(control, "control", -1, "control", None, [[] for _ in range(n)], [0] * n)
    nets: dict[tuple, MixerNetwork] = {}
    samples: dict[tuple[int, int], list[RoundSample]] = {}
    n_all = n + relays
    views = [PeerView(k, n_all, initiator) for k in range(n_all)]  # each node's dead-node detection, as the firmware's
    for inf in range(inferences):
        for sg in order:
            pieces: dict[tuple[int, int], bool] = {}  # (receiver, sender) -> a split message's pieces so far
            for r in rounds_of(sg):
                key = (r["generation"], r["payload"], r["deadline_slots"], kind)
                net = nets.get(key)
                if net is None:
                    net = nets[key] = MixerNetwork(channel, r["generation"], r["payload"], r["deadline_slots"],
                                                   TERM_DONE if kind == "done" else TERM_DEADLINE, linger, initiator)
                inits = [v.initiator() for v in views]
                backups = [v.backup() for v in views]
                absent = [v.absent() for v in views]
                # row 0 (the header) is the initiator's: the one most nodes agree on
                owners = [max(set(inits), key=inits.count)] * r["generation"]
                for f in r["senders"]:
                    owners[f["first_row"]:f["first_row"] + f["rows"]] = [f["node"]] * f["rows"]
                shares = [0] * net.n  # as cisl_mixer_transport.c sets them: from the plan's senders alone
                for f in r["senders"]:
                    shares[f["node"]] += f["rows"]
                channel.log = []
                res = net.run_round(owners, seed=mixer_seed(inf, sg, r["part"]), weak_rows=set(r["weak_rows"]),
                                    absent=absent, initiators=inits, shares=shares,
                                    takeover=int(r.get("takeover_slots", 0)), backups=backups)
                for k, v in enumerate(views):
                    due = 1 << inits[k]
                    alive = int(res.alive[k])  # heard, or its rows seen coded (cisl_mixer_transport.c)
                    for f in r["senders"]:
                        if not v.dead >> f["node"] & 1:
                            due |= 1 << f["node"]
                    if res.data[k, 0] and not res.taken_over[k]:  # the initiator's header: it started the round
                        alive |= 1 << inits[k]
                    v.after_round(inf, due & ~(1 << k), alive, bool(res.synced[k]), inits[k])
                samples.setdefault((sg, r["part"]), []).append(
                    _sample(inf, net, res, channel.log, r, phy, inits, sgs[sg].point == "head", sink, pieces,
                            backups, n))
    out = []
    for sg in order:
        s = sgs[sg]
        for r in rounds_of(sg):
            ss = samples[(sg, r["part"])]
            plen = int(nets[(r["generation"], r["payload"], r["deadline_slots"], kind)].plen)
            nodes = [NodeRadio(k, *(Stat.of(getattr(x.nodes[k], f) for x in ss) for f in
                                    ("tx_slots", "rx_slots", "scan_slots", "rx_packets", "rx_busy", "tx_on_us",
                                     "rx_on_us", "rx_on_us_low", "done_slot", "delivered")),
                               ss[0].nodes[k].expected) for k in range(n_all)]
            complete = float(np.mean([all(x.delivered == x.expected for x in smp.nodes) for smp in ss]))
            out.append(RoundTime(sg, r["part"], r["parts"], s.name, s.layer, s.point, r["generation"], r["payload"],
                                 plen, phy, r["slot_us"], r["deadline_slots"], kind, name, seed, inferences,
                                 Stat.of(x.slots for x in ss), Stat.of(x.slots * r["slot_us"] for x in ss),
                                 air_time_us(plen, phy), guard, complete, nodes, ss))
    return out


def _sample(inf: int, net: MixerNetwork, res, log, r: dict, phy: str, inits: list[int], head: bool,
            sink: int, pieces: dict[tuple[int, int], bool], backups: list[int], computing: int) -> RoundSample:
    """One round's sample; ``pieces`` carries, from round to round of the exchange, whether each
    receiver has every piece so far of a message split over rounds. Nodes ``computing``.. relay:
    they expect no message."""
    n, slot_us = net.n, int(r["slot_us"])
    plen = int(net.plen)
    packets = [0] * n
    busy = [0] * n
    stats = [net.lib.mx_stats(net.ptrs[i]).contents for i in range(n)]
    # a backup that took over is the round's initiator from channel slot `takeover` on; its grid
    # (and that of every node that synchronised to it) starts there
    takeover = int(r.get("takeover_slots", 0))
    # as lists: indexing numpy per node and sender was a third of this function's time
    taken, data = res.taken_over.tolist(), res.data.tolist()
    taker = [taken[i] and i != inits[i] and i == backups[i] and c.slot_synced == 0
             for i, c in enumerate(stats)]
    sync = [None if (c.slot_synced == NO_SLOT or i == inits[i] or taker[i]) else
            int(c.slot_synced) + (takeover if taken[i] else 0) for i, c in enumerate(stats)]
    for t, on_air, listeners, got in log:
        for k in listeners:
            if k == inits[k] or (taker[k] and t >= takeover) or (sync[k] is not None and t > sync[k]):
                if k in got:
                    packets[k] += 1
                elif on_air:
                    busy[k] += 1
    nodes = []
    for k, c in enumerate(stats):
        tx = int(c.tx)
        rx = int(c.radio_on_slots) - tx
        scan, tx_us, rx_central, rx_low = node_radio_on_us(tx, rx, k == inits[k] or taker[k], sync[k], packets[k],
                                                           busy[k], slot_us, plen, phy,
                                                           takeover if taker[k] else 0)
        delivered = expected = 0
        missing = []
        for f in r["senders"]:
            j = f["node"]
            if j == k or (head and k != sink) or k >= computing:
                continue
            rows = data[k][f["first_row"]:f["first_row"] + f["rows"]]  # a dead sender's weak rows are lost
            # row 0 is the header; a round its backup started loses the initiator's message
            # (cisl_mixer_transport.c run_round)
            got = bool(data[k][0] and all(rows) and not (taken[k] and j == inits[k]))
            if f["offset"] > 0:  # a later piece: the message has arrived only if every piece has
                got = pieces.pop((k, j)) and got
            if f["offset"] + f["rows"] * int(r["payload"]) < f["nbytes"]:
                pieces[(k, j)] = got  # more pieces follow in the next rounds
                continue
            expected += 1
            delivered += got
            if not got:
                missing.append(int(j))
        done = -1 if c.slot_done == NO_SLOT else int(c.slot_done)
        nodes.append(NodeSample(tx, rx, scan, packets[k], busy[k], tx_us, rx_central, rx_low, done,
                                delivered, expected, tuple(missing)))
    return RoundSample(inf, int(res.slots), nodes)


def exchange_times(rounds: Sequence[RoundTime]) -> dict[int, ExchangeTime]:
    """Per exchange (plan.json ``sg``): its rounds summed per inference, then mean/min/max."""
    by_sg: dict[int, list[RoundTime]] = {}
    for r in rounds:
        by_sg.setdefault(r.sg, []).append(r)
    out = {}
    for sg, rs in by_sg.items():
        m = len(rs[0].samples)
        air = [sum(r.samples[i].slots * r.slot_us for r in rs) for i in range(m)]
        n = len(rs[0].nodes)
        nodes = []
        for k in range(n):
            def per_inf(f: str) -> Stat:
                return Stat.of(sum(getattr(r.samples[i].nodes[k], f) for r in rs) for i in range(m))
            nodes.append(NodeExchange(k, per_inf("tx_on_us"), per_inf("rx_on_us"), per_inf("rx_on_us_low"),
                                      per_inf("delivered"), sum(r.nodes[k].expected for r in rs)))
        r0 = rs[0]
        out[sg] = ExchangeTime(sg, r0.name, r0.layer, r0.point, len(rs), Stat.of(air), r0.guard_us * len(rs), nodes)
    return out


def total_air_us(rounds: Sequence[RoundTime]) -> Stat:
    """Air time of all rounds of one inference (mean/min/max over the inferences)."""
    if not rounds:
        return Stat(0.0, 0.0, 0.0)
    m = len(rounds[0].samples)
    return Stat.of(sum(r.samples[i].slots * r.slot_us for r in rounds) for i in range(m))


__all__ = ["POLICIES", "ExchangeTime", "NodeExchange", "NodeRadio", "NodeSample", "RoundSample", "RoundTime", "Stat",
           "comm_schedule", "exchange_order", "exchange_times", "mixer_seed", "resolve_topology", "rx_half_window_us",
           "node_radio_on_us", "rx_slot_on_us", "total_air_us", "tx_slot_on_us"]

