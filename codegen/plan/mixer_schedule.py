"""somegather over Mixer: how every communication round of a plan maps onto Mixer rounds.

Each somegather point (and the head reduction) is one *exchange*: sender j has a message of m_j
bytes (its broadcast columns, all tokens, row-major). An exchange becomes one or more Mixer rounds.
In a round of generation size G and payload P, row 0 is the initiator's header (inference, exchange,
part; it lets a node detect a stale round) and every sender's message takes ⌈m_j / P⌉ consecutive
rows (fragments; the last one zero-padded). Senders are packed into rounds in node order. A message
that does not fit into one round is split into *pieces* over consecutive rounds of the exchange:
the first piece fills what is left of the current round, then come whole rounds, and the last piece
shares its round with the senders that follow. A piece is a run of consecutive fragments and
records its byte offset into the message (plan.json ``senders[].offset``); ``nbytes`` is always the
whole message. So at most one split message is in flight at any time, and a receiver puts it
together in one buffer of the largest message's size (firmware/somegather/cisl_mixer_transport.c).

A message counts as delivered only if all its fragments decode, in every round it spans — a partial
message would be a partial column, which training never sees — so a missing fragment zero-fills
the whole message, exactly like a lost message. Fragments are packed densely, so a planned round
has no unused row and ``weak_rows`` stays empty; weak zeros are written at run time for the rows
of a sender the node has declared dead (docs/design/dead-nodes.md, docs/design/mixer.md §1).

Unlike the published Mixer, every round is configured at run time, so each exchange gets its own
(G, P): P is chosen to minimise the estimated time of the exchange under the round-length policy,
with rounds as large as the PHY packet limit allows at that P (``max_generation`` rows at most);
rows beyond one such round go to further rounds, splitting a message where needed.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..radio.airtime import MAX_PHY_PAYLOAD, air_time_us, slot_us_for_length

MAX_GENERATION = 256  # rows per Mixer round (firmware/mixer MX_MAX_G)
MAX_ROUNDS = 255  # Mixer rounds per exchange: the header's part and cisl_mx_exchange.nrounds are a u8
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
    # The CPU's work in a whole slot, same form (board.toml [mixer] slot_cycles): mx_start combines the
    # next packet (mx_prepare) while this slot's packet is on the air, so the gap after the packet
    # holds only the reception and the packet's last touches (per_packet_us), but the combination,
    # the reception and those touches together must fit one slot.
    slot_work_us: tuple[float, ...] | None = None
    # Time a round costs outside its slots (the initiator's start guard before slot 0, board.toml
    # [radio] start_guard_us; 0 on boards without a radio): not part of a round's estimated_us, but
    # counted when schedules with different numbers of rounds are compared.
    round_guard_us: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "done"):
            raise ValueError("round policy must be 'fixed' or 'done'")

    def deadline(self, generation: int) -> int:
        return 3 * generation + 200

    @staticmethod
    def _work(model: tuple[float, ...] | None, generation: int, payload: int) -> float:
        if model is None:
            return 0.0
        base, per_row, per_row_byte, per_byte, *rest = model
        per_row_row = rest[0] if rest else 0.0
        return (base + per_row * generation + per_row_byte * generation * payload + per_byte * payload
                + per_row_row * generation * generation)

    def processing_us(self, generation: int, payload: int) -> float:
        """The CPU's work in the gap between two packets (µs)."""
        return self._work(self.per_packet_us, generation, payload)

    def slot_work(self, generation: int, payload: int) -> float:
        """The CPU's work in a whole slot, overlapped with the air time (µs)."""
        return self._work(self.slot_work_us, generation, payload)

    def slot_us(self, length: int, generation: int, payload: int) -> int:
        """The radio's slot length for a packet of ``length`` bytes, lengthened (if needed) so the
        per-packet work fits between the packet's end and the next slot's ramp-up, and the whole
        slot's work (the next packet's combination, overlapped with the air time, included) fits the
        slot."""
        slot = slot_us_for_length(length, self.phy, self.margin_us)
        if self.per_packet_us is None:
            return slot
        need = max(air_time_us(length, self.phy) + RAMP_US + self.processing_us(generation, payload),
                   RAMP_US + self.slot_work(generation, payload))
        return max(slot, math.ceil(need))

    def slot_us_at(self, lengths: np.ndarray, generation: int, payloads: np.ndarray) -> np.ndarray:
        """:meth:`slot_us` at every (length, payload) pair for one generation, at once (the same
        float operations in the same order, so the same integers)."""
        size = 1 << int(lengths.max()).bit_length()  # lengths the PHY cannot carry are priced (and refused) too
        slot_table, air_table = _length_tables(self.phy, self.margin_us, size)
        slot = slot_table[lengths]
        if self.per_packet_us is None:
            return slot
        payloads, air = payloads.astype(np.float64), air_table[lengths].astype(np.float64)
        need = np.maximum(air + RAMP_US + self._work(self.per_packet_us, generation, payloads),
                          RAMP_US + self._work(self.slot_work_us, generation, payloads))
        return np.maximum(slot, np.ceil(need).astype(np.int64))

    def estimated_slots(self, generation: int) -> int:
        if self.kind == "fixed":
            return self.deadline(generation)
        return min(self.deadline(generation), math.ceil(self.a * generation + self.b) + self.linger)


@functools.lru_cache(maxsize=16)
def _length_tables(phy: str, margin_us: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """slot_us_for_length and air_time_us at every packet length below ``size``."""
    lengths = range(size)
    return (np.array([slot_us_for_length(n, phy, margin_us) for n in lengths], dtype=np.int64),
            np.array([air_time_us(n, phy) for n in lengths], dtype=np.int64))


@dataclass
class Fragments:
    """One sender's rows in one round: its whole message, or one piece of a split message."""

    node: int
    first_row: int
    rows: int
    nbytes: int  # the whole message's length (what the receiver's reassembly buffer holds)
    offset: int = 0  # the piece's first byte in the message; 0 for a whole message

    def piece_bytes(self, payload: int) -> int:
        """Message bytes carried by these rows (the message's last fragment is zero-padded)."""
        return min(self.nbytes - self.offset, self.rows * payload)


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
    takeover_slots: int = 0  # scan slots after which the backup starts the round (takeover_slots())

    @property
    def estimated_us(self) -> int:
        return self.estimated_slots * self.slot_us

    def to_json(self) -> dict:
        d = asdict(self)
        d["estimated_us"] = self.estimated_us
        return d


def takeover_slots(nodes: int, deadline: int) -> int:
    """Scan slots after which the backup initiator starts a round it has heard nothing of
    (firmware/mixer mx_config.takeover_slots; docs/design/dead-nodes.md). The initiator sends in
    slot 0 and its neighbours relay from slot 1 on, so a live round reaches the backup (the next
    node) within a few slots even on lossy links; 2n + 8 leaves room for a long chain of losses,
    and costs a round whose initiator died no more than that. On a board the backup's first scan
    lasts ``[radio] takeover_ms`` (the compute skew); in the lockstep sim every node starts the
    round in the same slot."""
    return min(deadline - 1, 2 * nodes + 8)


def _rows(nbytes: int, payload: int) -> int:
    return math.ceil(nbytes / payload) if nbytes > 0 else 0


def packet_length(nodes: int, generation: int, payload: int) -> int:
    """Mixer packet bytes (firmware/mixer MX_PACKET_LEN): header 4, coding vector ⌈G/8⌉, payload,
    info vector ⌈max(G, n)/8⌉ (it also carries node sets such as full-rank maps)."""
    return 4 + math.ceil(generation / 8) + payload + math.ceil(max(generation, nodes) / 8)


def _max_payload(nodes: int, generation: int) -> int:
    return min(MAX_PAYLOAD, MAX_PHY_PAYLOAD - packet_length(nodes, generation, 0))


@functools.lru_cache(maxsize=4096)
def max_generation_for(nodes: int, payload: int, max_generation: int = MAX_GENERATION) -> int:
    """The largest generation (≤ max_generation) whose packets of ``payload`` bytes fit the PHY; < 2
    (no room for a row besides the header) when none does."""
    g = max_generation
    while g >= 2 and packet_length(nodes, g, payload) > MAX_PHY_PAYLOAD:
        g -= 1
    return g


def _pack(msg_bytes: list[int], payload: int, generation: int) -> list[list[Fragments]] | None:
    """The senders' fragments grouped into rounds of at most ``generation`` rows (row 0 the header),
    in node order; a message that does not fit into one round is split over consecutive rounds.
    None if that takes more than MAX_ROUNDS rounds."""
    data_rows = generation - 1
    rounds: list[list[Fragments]] = [[]]
    used = 1  # the header row
    for j, m in enumerate(msg_bytes):
        r = _rows(m, payload)
        if r == 0:
            continue
        if r <= data_rows:  # a whole message, in this round or the next
            if used + r > generation:
                rounds.append([])
                used = 1
            rounds[-1].append(Fragments(j, used, r, m, 0))
            used += r
        else:  # pieces: what is left of this round, whole rounds, then the rest
            done = 0
            while done < r:
                if used == generation:
                    rounds.append([])
                    used = 1
                take = min(generation - used, r - done)
                rounds[-1].append(Fragments(j, used, take, m, done * payload))
                used += take
                done += take
        if len(rounds) > MAX_ROUNDS:
            return None
    return [g for g in rounds if g]


PAYLOADS = np.arange(8, MAX_PAYLOAD + 1)  # the payloads the search tries


@functools.lru_cache(maxsize=64)
def _generation_caps(nodes: int, max_generation: int) -> np.ndarray:
    """max_generation_for at every payload of PAYLOADS."""
    return np.array([max_generation_for(nodes, int(p), max_generation) for p in PAYLOADS], dtype=np.int64)


class _RoundPrices:
    """The estimated time (µs) of one round of generation g at every payload of PAYLOADS, for one node
    count and policy: a row per generation, computed when first asked for."""

    def __init__(self, nodes: int, policy: RoundPolicy) -> None:
        self.nodes, self.policy = nodes, policy
        self.table = np.zeros((MAX_GENERATION + 1, len(PAYLOADS)), dtype=np.int64)
        self.known = np.zeros(MAX_GENERATION + 1, dtype=bool)
        self.columns = np.arange(len(PAYLOADS))

    def at(self, generation: np.ndarray) -> np.ndarray:
        """The price of a round of ``generation[i]`` rows at payload PAYLOADS[i]."""
        for g in np.unique(generation[~self.known[generation]]):
            g = int(g)
            lengths = packet_length(self.nodes, g, 0) + PAYLOADS  # the packet's bytes at each payload
            self.table[g] = self.policy.estimated_slots(g) * self.policy.slot_us_at(lengths, g, PAYLOADS)
            self.known[g] = True
        return self.table[generation, self.columns]


@functools.lru_cache(maxsize=32)
def _cached_prices(nodes: int, policy: RoundPolicy) -> _RoundPrices:
    return _RoundPrices(nodes, policy)


def _payload_costs(msg_bytes: tuple[int, ...], policy: RoundPolicy, max_generation: int,
                   prices: _RoundPrices) -> tuple[np.ndarray, np.ndarray]:
    """(cost, valid) at every payload of PAYLOADS: the _cost of the rounds :func:`_pack` makes at that
    payload and its largest generation, priced from the rounds' generations alone (no fragments), for
    all payloads at once; valid is False where _pack gives None or no row fits the packet."""
    caps = _generation_caps(len(msg_bytes), max_generation)
    valid = caps >= 2
    cap = np.maximum(caps, 2)
    at_cap = prices.at(cap)  # a full round
    used = np.ones(len(PAYLOADS), dtype=np.int64)  # rows of the open round (the header row)
    total = np.zeros(len(PAYLOADS), dtype=np.int64)
    closed = np.zeros(len(PAYLOADS), dtype=np.int64)
    for m in msg_bytes:
        if m <= 0:
            continue
        r = -(-m // PAYLOADS)
        whole = r <= cap - 1
        # a whole message goes into the open round, or into a new one if it does not fit
        new = whole & (used + r > cap)
        if new.any():
            total += np.where(new, prices.at(used), 0)
            closed += new
            used = np.where(new, 1, used)
        used = np.where(whole, used + r, used)
        split = ~whole
        if split.any():
            # pieces: a full open round closes first; the first piece fills the open round, which
            # closes; k more rounds take the rest, all but the last full
            full = split & (used == cap)
            total += np.where(full, at_cap, 0)
            closed += full
            used = np.where(full, 1, used)
            rest = r - (cap - used)
            k = -(-rest // (cap - 1))
            total += np.where(split, k * at_cap, 0)  # the filled round and k − 1 full ones
            closed += np.where(split, k, 0)
            used = np.where(split, 1 + rest - (k - 1) * (cap - 1), used)
    last = used > 1
    total += np.where(last, prices.at(used), 0) + policy.round_guard_us * (closed + last)
    return total, valid & (closed + 1 <= MAX_ROUNDS)


def check_pieces(rounds: list[MixerRound], nodes: int) -> None:
    """The invariants the firmware's reassembly relies on (ValueError if one is broken): within a
    round every row is used once and the rows fit the generation and the PHY; over the exchange
    every message's pieces cover it exactly once, in order, in consecutive rounds, and a message
    starts only once the previous split one is complete (one reassembly buffer suffices)."""
    if len(rounds) > MAX_ROUNDS:
        raise ValueError(f"{len(rounds)} rounds: more than {MAX_ROUNDS}")
    next_at: dict[int, int] = {}
    complete: set[int] = set()
    open_node: int | None = None
    for r in rounds:
        if not 2 <= r.generation <= MAX_GENERATION or not 1 <= r.payload <= MAX_PAYLOAD:
            raise ValueError(f"round {r.part}: G = {r.generation}, P = {r.payload} out of range")
        if packet_length(nodes, r.generation, r.payload) > MAX_PHY_PAYLOAD:
            raise ValueError(f"round {r.part}: packet longer than {MAX_PHY_PAYLOAD} B")
        row = 1
        for f in r.senders:
            if f.first_row != row or f.rows < 1 or f.first_row + f.rows > r.generation:
                raise ValueError(f"round {r.part}: node {f.node}'s rows {f.first_row}+{f.rows} do not follow on")
            row += f.rows
            if f.node in complete or next_at.get(f.node, 0) != f.offset or f.offset % r.payload:
                raise ValueError(f"round {r.part}: node {f.node}'s piece at byte {f.offset} is out of order")
            if f.offset == 0 and open_node is not None:
                raise ValueError(f"round {r.part}: node {f.node}'s message starts before node {open_node}'s is complete")
            if f.offset > 0 and open_node != f.node:
                raise ValueError(f"round {r.part}: node {f.node}'s piece continues no open message")
            end = f.offset + f.piece_bytes(r.payload)
            if _rows(f.piece_bytes(r.payload), r.payload) != f.rows or end > f.nbytes:
                raise ValueError(f"round {r.part}: node {f.node}'s piece has {f.rows} rows for its bytes")
            next_at[f.node] = end
            if end == f.nbytes:
                complete.add(f.node)
                open_node = None
            else:
                open_node = f.node
        if row != r.generation:
            raise ValueError(f"round {r.part}: {row} rows used of G = {r.generation}")
    if open_node is not None:
        raise ValueError(f"node {open_node}'s message is incomplete at the end of the exchange")


def _cost(rounds: list[MixerRound], policy: RoundPolicy) -> int:
    """What the planner minimises: the rounds' estimated air time plus their start guards."""
    return sum(r.estimated_us for r in rounds) + policy.round_guard_us * len(rounds)


def schedule_exchange(exchange: int, msg_bytes: list[int], policy: RoundPolicy = RoundPolicy(),
                      max_generation: int = MAX_GENERATION) -> list[MixerRound]:
    """Mixer rounds for one exchange; [] when nobody sends anything (e.g. D = 1). With a CPU limit
    (``policy.per_packet_us``) smaller generations are tried too and the fastest schedule wins."""
    if not any(msg_bytes):
        return []
    # The planner prices the same messages for many candidate splits: the search (every P, several
    # generation caps) runs once per distinct input, and each caller gets its own copy to keep.
    try:
        hash(policy)  # a policy built with lists (not the compiler's tuples) is searched, not cached
        search = _best_schedule
    except TypeError:
        search = _best_schedule.__wrapped__
    try:
        rounds = copy.deepcopy(search(tuple(msg_bytes), policy, max_generation))
    except ValueError as e:
        raise ValueError(f"exchange {exchange}: {e}") from None
    for r in rounds:
        r.exchange = exchange
    return rounds


@functools.lru_cache(maxsize=1024)
def _best_schedule(msg_bytes: tuple[int, ...], policy: RoundPolicy, max_generation: int) -> list[MixerRound]:
    if policy.per_packet_us is None:
        return _schedule_exchange(msg_bytes, policy, max_generation)
    first = _schedule_exchange(msg_bytes, policy, max_generation)  # raises if nothing fits
    best = (_cost(first, policy), first)
    cap = max_generation // 2
    while cap >= 8:
        try:
            rounds = _schedule_exchange(msg_bytes, policy, cap)
        except ValueError:
            break  # more than MAX_ROUNDS rounds; smaller generations need even more
        total = _cost(rounds, policy)
        if total < best[0]:
            best = (total, rounds)
        cap //= 2
    return best[1]


def _schedule_exchange(msg_bytes: tuple[int, ...], policy: RoundPolicy, max_generation: int) -> list[MixerRound]:
    """The fastest schedule at generations ≤ max_generation; its rounds' ``exchange`` is 0."""
    n = len(msg_bytes)
    try:
        prices = _cached_prices(n, policy)
    except TypeError:  # an unhashable policy (lists): priced for this search alone
        prices = _RoundPrices(n, policy)
    costs, valid = _payload_costs(msg_bytes, policy, max_generation, prices)
    if not valid.any():
        rows = sum(_rows(m, min(MAX_PAYLOAD, _max_payload(n, max_generation))) for m in msg_bytes)
        raise ValueError(f"{sum(msg_bytes)} B of messages need more than {MAX_ROUNDS} Mixer "
                         f"rounds of at most {max_generation} rows (about {rows} rows)")
    best = int(np.argmin(np.where(valid, costs, np.iinfo(np.int64).max)))  # the smallest payload of a tie
    payload, cap = int(PAYLOADS[best]), int(_generation_caps(n, max_generation)[best])
    groups = _pack(msg_bytes, payload, cap)
    assert groups is not None
    rounds = [_round(part, len(groups), senders[-1].first_row + senders[-1].rows, payload, n, policy, senders)
              for part, senders in enumerate(groups)]
    check_pieces(rounds, n)
    return rounds


def _round(part: int, parts: int, generation: int, payload: int, nodes: int, policy: RoundPolicy,
           senders: list[Fragments]) -> MixerRound:
    """One round of an exchange (numbered 0: schedule_exchange numbers it)."""
    deadline = policy.deadline(generation)
    return MixerRound(0, part, parts, generation, payload, deadline,
                      policy.slot_us(packet_length(nodes, generation, payload), generation, payload),
                      policy.estimated_slots(generation), senders, [], takeover_slots(nodes, deadline))


def schedule_plan(msg_bytes_per_exchange: list[list[int]], policy: RoundPolicy = RoundPolicy(),
                  max_generation: int = MAX_GENERATION) -> list[list[MixerRound]]:
    return [schedule_exchange(sg, m, policy, max_generation) for sg, m in enumerate(msg_bytes_per_exchange)]
