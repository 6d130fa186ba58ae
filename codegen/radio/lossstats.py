"""Message loss of somegather over Mixer on a topology, split into the three training loss modes.

Runs many exchanges through the in-process Mixer network (codegen/radio/mixer_network.py) with the
plan's fragmentation (codegen/plan/mixer_schedule.py) and records, per exchange, which receiver got
which sender's complete message. The losses are then attributed to the three modes of message
dropout (codegen/lossmodel.py):

* receiver: the receiver got none of the messages of the exchange;
* sender: no receiver got the sender's message;
* link: every other lost (receiver, sender) pair, as a fraction of the pairs not already lost by
  one of the first two.

These are the per-mode probabilities `[dropout]` takes, so training sees the loss pattern of the
network it will run on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..lossmodel import LossRates
from ..plan.mixer_schedule import RoundPolicy, schedule_exchange, takeover_slots
from .channel import Channel
from .mixer_network import TERM_DEADLINE, TERM_DONE, MixerNetwork
from .physics import ChannelParams, GilbertElliott
from .topology import topology


@dataclass
class LossStats:
    topology: str
    nodes: int
    exchanges: int
    message_bytes: int
    policy: str
    q_link: float
    q_recv: float
    q_send: float
    effective_link_loss: float  # measured fraction of lost (receiver, sender) messages
    model_link_loss: float  # what the three rates give: 1 - (1-a)(1-b)(1-c)
    slots_mean: float
    slots_p999: float
    deadline: int
    complete_fraction: float  # exchanges in which every node got every message

    @property
    def rates(self) -> LossRates:
        return LossRates(self.q_link, self.q_recv, self.q_send)

    def to_json(self) -> dict:
        return asdict(self)

    def toml(self) -> str:
        return ("# message loss measured by `cisl radio loss` on "
                f"{self.topology} ({self.nodes} nodes, {self.exchanges} exchanges of {self.message_bytes} B per node)\n"
                f"# effective per-link loss {100 * self.effective_link_loss:.3f} %\n"
                f"[dropout]\nq_link = {_rate(self.q_link)}\nq_recv = {_rate(self.q_recv)}\n"
                f"q_send = {_rate(self.q_send)}\n")


def _rate(q: float) -> str:
    """A rate for [dropout], short, but never rounded up to 1 (which `cisl train` refuses) when below it."""
    text = f"{q:.6g}"
    return repr(q) if float(text) >= 1.0 > q else text


def linger_slots(nodes: int) -> int:
    """The slots a node keeps sending after it decoded the round (Mixer's linger), as `measure` runs it; a
    round's deadline must be longer."""
    return max(4, nodes)


def split_modes(got: np.ndarray) -> tuple[float, float, float, float]:
    """got: bool [exchange, receiver, sender] (diagonal ignored) -> (q_link, q_recv, q_send, loss)."""
    E, n, _ = got.shape
    off = ~np.eye(n, dtype=bool)[None]
    lost = ~got & off
    recv_all = (lost | ~off).all(axis=2)  # [E, receiver]: got nothing from anyone
    # [E, sender]: no receiver that heard anyone got it. A receiver that got nothing at all is explained by
    # recv_all already; counting a sender whom only such receivers missed (the one node up while the
    # others are down) as a send loss too would train for more loss than was measured
    heard = ~recv_all[:, :, None] & off  # [E, receiver, sender]: a receiver that heard someone, not s itself
    send_all = heard.any(axis=1) & ~(got & heard).any(axis=1)
    q_recv = float(recv_all.mean())
    q_send = float(send_all.mean())
    explained = recv_all[:, :, None] | send_all[:, None, :]
    rest = off & ~explained
    q_link = float((lost & rest).sum() / max(rest.sum(), 1))
    return q_link, q_recv, q_send, float(lost.sum() / (E * n * (n - 1)))


def measure(topology_name: str, nodes: int | None, message_bytes: int, exchanges: int = 200, seed: int = 0,
            policy: str = "done", params: ChannelParams = ChannelParams(), deadline: int | None = None,
            fail_prob: float = 0.0, progress=None) -> LossStats:
    """Run ``exchanges`` somegather exchanges (every node sends ``message_bytes``) and attribute losses.

    ``deadline`` overrides the rounds' hard deadline (slots): a tight deadline trades loss for latency.
    ``fail_prob``: every node is down for a whole exchange with this probability (crash, reboot).
    """
    topo = topology(topology_name, nodes, seed)
    n = topo.n
    rounds = schedule_exchange(0, [message_bytes] * n, RoundPolicy(kind=policy, linger=linger_slots(n)))
    channel = Channel(topo, params, seed=seed)
    nets = [MixerNetwork(channel, r.generation, r.payload, deadline or r.deadline_slots,
                         TERM_DONE if policy == "done" else TERM_DEADLINE, linger=linger_slots(n)) for r in rounds]
    got = np.zeros((exchanges, n, n), dtype=bool)
    slots, complete = [], 0
    it = range(exchanges)
    fail_rng = np.random.default_rng([seed, 7])
    for e in (progress(it) if progress else it):
        ok_all = True
        if fail_prob > 0:
            for k in np.flatnonzero(fail_rng.random(n) < fail_prob):
                channel.fail(int(k), start=channel.round_index + 1, duration=len(rounds), unit="round")
        for part, (r, net) in enumerate(zip(rounds, nets)):
            owners = [0] * r.generation
            for f in r.senders:
                owners[f.first_row:f.first_row + f.rows] = [f.node] * f.rows
            # a down initiator's round is started by its backup, as the firmware's transport arms it
            res = net.run_round(owners, seed=(seed << 20) ^ (e << 4) ^ part,
                                takeover=takeover_slots(n, deadline) if deadline else r.takeover_slots)
            slots.append(res.slots)
            # rows with data only: a weak zero stands for a sender known dead or silent, whose message
            # is lost (zero-filled) although the row counts as decoded for the round's rank
            header = res.data[:, 0]
            for f in r.senders:
                whole = res.data[:, f.first_row:f.first_row + f.rows].all(axis=1) & header
                # a message split over rounds arrives only if every piece does
                got[e, :, f.node] = whole if f.offset == 0 else got[e, :, f.node] & whole
            ok_all &= res.complete
        complete += ok_all
    q_link, q_recv, q_send, loss = split_modes(got)
    model = LossRates(min(q_link, 0.999), min(q_recv, 0.999), min(q_send, 0.999)).effective_link_loss
    return LossStats(topology_name, n, exchanges, message_bytes, policy, q_link, q_recv, q_send, loss, model,
                     float(np.mean(slots)), float(np.quantile(slots, 0.999)), deadline or rounds[0].deadline_slots,
                     complete / exchanges)


_DROPOUT_HEADER = "# message loss measured by `cisl radio loss`"


def measure_loss(topology_name: str, nodes: int | None, message_bytes: int, exchanges: int = 200, seed: int = 0,
                 policy: str = "done", deadline: int | None = None, exponent: float | None = None,
                 shadowing: float | None = None, burst: tuple[float, float, float] | None = None,
                 fail_prob: float = 0.0, out: Path | None = None, progress=None) -> LossStats:
    """`cisl radio loss`: :func:`measure` with the channel's knobs (path-loss ``exponent``,
    ``shadowing`` sigma in dB, Gilbert-Elliott ``burst`` = (p_gb, p_bg, loss_bad)); refuses before
    measuring to overwrite an ``out`` that it did not write."""
    from ..errors import UserError
    from ..fsutil import check_output_file
    from .topology import TOPOLOGIES

    check_output_file(out, lambda old: old.startswith(_DROPOUT_HEADER))
    if topology_name not in TOPOLOGIES:
        raise UserError(f"--topology {topology_name}: unknown; choose one of {', '.join(TOPOLOGIES)}")
    if topology_name != "hallway16" and nodes is None:
        raise UserError(f"--topology {topology_name} needs --nodes")
    params = ChannelParams()
    if exponent is not None:
        params = params.replace(pl_exponent=exponent)
    if shadowing is not None:
        params = params.replace(shadowing_sigma_db=shadowing)
    if burst is not None:
        params = params.replace(burst=GilbertElliott(burst[0], burst[1], 0.0, burst[2]))
    try:
        n = topology(topology_name, nodes, seed).n
        if deadline is not None and deadline > MAX_DEADLINE:
            raise UserError(f"--deadline {deadline}: Mixer's rounds last at most {MAX_DEADLINE} slots; use "
                            f"--deadline {MAX_DEADLINE} or less")
        if deadline is not None and deadline <= linger_slots(n):
            raise UserError(f"--deadline {deadline}: a round of {n} nodes needs at least {linger_slots(n) + 1} slots "
                            f"(a node lingers {linger_slots(n)} slots after decoding); use --deadline "
                            f"{linger_slots(n) + 1} or more, and enough for the nodes to decode (without --deadline "
                            f"the rounds get {_default_deadline(n, message_bytes, policy)} slots)")
        try:
            schedule_exchange(0, [message_bytes] * n, RoundPolicy(kind=policy, linger=linger_slots(n)))
        except ValueError as e:  # the schedule's own words name an "exchange 0" the user never gave
            why = str(e).split(": ", 1)[-1]
            raise UserError(f"--message-bytes {message_bytes}: {n} nodes' messages ({why}); give fewer bytes per "
                            f"node") from None
        stats = measure(topology_name, nodes, message_bytes, exchanges, seed, policy, params, deadline, fail_prob,
                        progress=progress)
    except ValueError as e:
        raise UserError(str(e)) from None
    if max(stats.q_link, stats.q_recv, stats.q_send) >= 1.0:  # a [dropout] section cisl train refuses
        default = _default_deadline(n, message_bytes, policy)
        if deadline is not None and deadline < default:
            fix = (f"--deadline {deadline} ends every round before any node decodes it: raise it (without "
                   f"--deadline the rounds get {default} slots)")
        else:
            given = [f"--{k}" for k, v in (("fail-prob", fail_prob), ("burst", burst), ("exponent", exponent),
                                           ("shadowing", shadowing)) if v]
            fix = (f"the links deliver nothing with these settings: relax {', '.join(given)}" if given else
                   "the links deliver nothing on this topology: choose another topology or fewer nodes")
        raise UserError(f"{topology_name} ({n} nodes): every message of every exchange was lost (q_recv = q_send = 1), "
                        f"and cisl train cannot train for a network that delivers nothing; {fix}")
    return stats


MAX_DEADLINE = 0xFFFE  # Mixer's round length is below MX_NO_SLOT (0xFFFF)


def _default_deadline(n: int, message_bytes: int, policy: str) -> int:
    rounds = schedule_exchange(0, [message_bytes] * n, RoundPolicy(kind=policy, linger=linger_slots(n)))
    return rounds[0].deadline_slots


def save_dropout(stats: LossStats, out: Path) -> None:
    """Write the [dropout] section for `cisl train --dropout` (only over a file this wrote)."""
    from ..fsutil import write_output_file

    write_output_file(out, stats.toml(), lambda old: old.startswith(_DROPOUT_HEADER))
