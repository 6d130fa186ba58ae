"""somegather over Mixer: how every communication round of a plan maps onto Mixer rounds.

Each somegather point (and the head reduction) is one *exchange*: sender j has a message of m_j
bytes (its broadcast columns, all tokens, row-major). An exchange becomes one or more Mixer rounds.
In a round of generation size G and payload P, row 0 is the initiator's header (inference, exchange,
part; it lets a node detect a stale round) and every sender's message takes ⌈m_j / P⌉ consecutive
rows (fragments; the last one zero-padded). A message counts as delivered only if all its fragments
decode — a partial message would be a partial column, which training never sees — so a missing
fragment zero-fills the whole message, exactly like a lost message. Rows of the generation that no
sender needs are written as weak zeros by the initiator so nobody waits for them.

Unlike the published Mixer, every round is configured at run time, so each exchange gets its own
(G, P): P is chosen to minimise the estimated time of the exchange under the round-length policy,
and an exchange whose rows exceed the largest generation is split into several rounds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..radio.airtime import MAX_PHY_PAYLOAD, air_time_us, slot_us_for_length

MAX_GENERATION = 256  # rows per Mixer round (firmware/mixer MX_MAX_G)
MAX_PAYLOAD = 240  # bytes per row; PHY payload L = 4 + 2·⌈G/8⌉ + P ≤ 255
HEADER_ROW = 0
INITIATOR = 0
RAMP_US = 40  # boards/nrf52840dk/radio.c: TXEN/RXEN to READY (fast ramp-up)


@dataclass(frozen=True)
class RoundPolicy:
    """How long a Mixer round lasts.

    * ``fixed``: the published Mixer's hard deadline, R = 3G + 200 slots, always waited out.
    * ``done``: a node ends its round once it has full rank and knows every node has (full-rank
      maps), after ``linger`` more slots; ``3G + 200`` stays as the cap. For choosing P the round is
      estimated at ``a·G + b`` slots (``b`` ≈ a few slots per hop of the network diameter); the
      radio benchmark (bench/mixer_rounds.py) measures these numbers per topology.
    """

    kind: str = "done"
    linger: int = 4
    a: float = 1.5
    b: float = 8.0
    phy: str = "2M"
    margin_us: int = 50
    # The board CPU's worst per-packet work in µs, base + per_row·G + per_row_byte·G·P + per_byte·P
    # [+ per_row_row·G²] (board.toml [mixer] per_packet_cycles, fitted by bench/mixer_budget_grid.py
    # over every (G, P) the planner may choose); None: no limit (sim).
    # A slot must hold the packet's air time, the radio's ramp-up and this work, so the planner
    # lengthens slots that would be late and, where that costs less, splits the exchange into
    # rounds of smaller generations (less elimination work per packet).
    per_packet_us: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "done"):
            raise ValueError("round policy must be 'fixed' or 'done'")

    def deadline(self, generation: int) -> int:
        return 3 * generation + 200

    def processing_us(self, generation: int, payload: int) -> float:
        if self.per_packet_us is None:
            return 0.0
        base, per_row, per_row_byte, per_byte, *rest = self.per_packet_us
        per_row_row = rest[0] if rest else 0.0
        return (base + per_row * generation + per_row_byte * generation * payload + per_byte * payload
                + per_row_row * generation * generation)

    def slot_us(self, length: int, generation: int, payload: int) -> int:
        """The radio's slot length for a packet of ``length`` bytes, lengthened (if needed) so the
        per-packet work fits between the packet's end and the next slot's ramp-up."""
        slot = slot_us_for_length(length, self.phy, self.margin_us)
        if self.per_packet_us is None:
            return slot
        need = air_time_us(length, self.phy) + RAMP_US + self.processing_us(generation, payload)
        return max(slot, math.ceil(need))

    def estimated_slots(self, generation: int) -> int:
        if self.kind == "fixed":
            return self.deadline(generation)
        return min(self.deadline(generation), math.ceil(self.a * generation + self.b) + self.linger)


@dataclass
class Fragments:
    node: int
    first_row: int
    rows: int
    nbytes: int


@dataclass
class MixerRound:
    exchange: int  # the plan's round number (sg)
    part: int  # index of this Mixer round within the exchange
    parts: int
    generation: int
    payload: int
    deadline_slots: int
    slot_us: int
    estimated_slots: int
    senders: list[Fragments] = field(default_factory=list)
    weak_rows: list[int] = field(default_factory=list)

    @property
    def estimated_us(self) -> int:
        return self.estimated_slots * self.slot_us

    def to_json(self) -> dict:
        d = asdict(self)
        d["estimated_us"] = self.estimated_us
        return d


def _rows(nbytes: int, payload: int) -> int:
    return math.ceil(nbytes / payload) if nbytes > 0 else 0


def packet_length(nodes: int, generation: int, payload: int) -> int:
    """Mixer packet bytes (firmware/mixer MX_PACKET_LEN): header 4, coding vector ⌈G/8⌉, payload,
    info vector ⌈max(G, n)/8⌉ (it also carries node sets such as full-rank maps)."""
    return 4 + math.ceil(generation / 8) + payload + math.ceil(max(generation, nodes) / 8)


def _max_payload(nodes: int, generation: int) -> int:
    return min(MAX_PAYLOAD, MAX_PHY_PAYLOAD - packet_length(nodes, generation, 0))


def _pack(msg_bytes: list[int], payload: int, max_generation: int) -> list[list[int]] | None:
    """Senders grouped into rounds (in node order) so every round fits max_generation rows."""
    groups: list[list[int]] = [[]]
    used = 1  # the header row
    for j, m in enumerate(msg_bytes):
        r = _rows(m, payload)
        if r == 0:
            continue
        if 1 + r > max_generation:
            return None  # one message alone does not fit: P too small
        if used + r > max_generation:
            groups.append([])
            used = 1
        groups[-1].append(j)
        used += r
    return [g for g in groups if g] or []


def schedule_exchange(exchange: int, msg_bytes: list[int], policy: RoundPolicy = RoundPolicy(),
                      max_generation: int = MAX_GENERATION) -> list[MixerRound]:
    """Mixer rounds for one exchange; [] when nobody sends anything (e.g. D = 1). With a CPU limit
    (``policy.per_packet_us``) smaller generations are tried too and the fastest schedule wins."""
    if not any(msg_bytes):
        return []
    if policy.per_packet_us is None:
        return _schedule_exchange(exchange, msg_bytes, policy, max_generation)
    best = (0, _schedule_exchange(exchange, msg_bytes, policy, max_generation))  # raises if nothing fits
    best = (sum(r.estimated_us for r in best[1]), best[1])
    cap = max_generation // 2
    while cap >= 8:
        try:
            rounds = _schedule_exchange(exchange, msg_bytes, policy, cap)
        except ValueError:
            break  # a message no longer fits one round; smaller generations will not fit it either
        total = sum(r.estimated_us for r in rounds)
        if total < best[0]:
            best = (total, rounds)
        cap //= 2
    return best[1]


def _schedule_exchange(exchange: int, msg_bytes: list[int], policy: RoundPolicy,
                       max_generation: int) -> list[MixerRound]:
    best: tuple[int, list[MixerRound]] | None = None
    for payload in range(8, MAX_PAYLOAD + 1):
        groups = _pack(msg_bytes, payload, max_generation)
        if groups is None:
            continue
        rounds = []
        for part, group in enumerate(groups):
            senders, row = [], 1
            for j in group:
                r = _rows(msg_bytes[j], payload)
                senders.append(Fragments(j, row, r, msg_bytes[j]))
                row += r
            generation = row
            if payload > _max_payload(len(msg_bytes), generation):
                break
            length = packet_length(len(msg_bytes), generation, payload)
            rounds.append(MixerRound(exchange, part, len(groups), generation, payload, policy.deadline(generation),
                                     policy.slot_us(length, generation, payload),
                                     policy.estimated_slots(generation), senders, []))
        else:
            total = sum(r.estimated_us for r in rounds)
            if best is None or total < best[0]:
                best = (total, rounds)
    if best is None:
        cap = max(((max_generation - 1) * min(p, _max_payload(len(msg_bytes), max_generation))
                   for p in range(8, MAX_PAYLOAD + 1)), default=0)
        big = max(range(len(msg_bytes)), key=lambda j: msg_bytes[j])
        raise ValueError(f"exchange {exchange}: node {big}'s message of {msg_bytes[big]} B is larger than one Mixer "
                         f"round of {max_generation} rows carries (about {cap} B; a message is not split across "
                         f"rounds)")
    return best[1]


def schedule_plan(msg_bytes_per_exchange: list[list[int]], policy: RoundPolicy = RoundPolicy(),
                  max_generation: int = MAX_GENERATION) -> list[list[MixerRound]]:
    return [schedule_exchange(sg, m, policy, max_generation) for sg, m in enumerate(msg_bytes_per_exchange)]
