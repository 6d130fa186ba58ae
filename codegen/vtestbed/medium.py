"""The message-level medium of the virtual testbed: one process that carries messages between nodes.

Every communication round is a barrier: once every node has sent its TX frame for a round, each node
receives every message addressed to it (broadcast, or to it) and an RX_END. By default nothing is
lost; with loss rates, each round draws which sender->receiver messages are lost from the paper's
three loss modes (codegen/lossmodel.py), seeded per (inference, round) so a run is reproducible
whatever the order in which nodes arrive. Every message sent is appended to a transcript and every
round's loss pattern to a loss file, so the runner can compare the nodes with the reference run
under exactly the same losses. A slot-level radio can replace this medium at the same place.

Run as ``python -m codegen.vtestbed.medium --socket S --nodes D --inputs X.npy --transcript T``.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import sys
import time

import numpy as np

from ..lossmodel import LossRates, sample_lost
from . import frames as P


class MediumError(Exception):
    pass


def serve(sock_path: str, nodes: int, inputs: np.ndarray, transcript_path: str, timeout: float,
          rates: LossRates = LossRates(), seed: int = 0, loss_path: str | None = None,
          radio: "RadioMedium | None" = None) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(nodes)
    print("ready", flush=True)
    conns: dict[int, socket.socket] = {}
    srv.settimeout(timeout)
    while len(conns) < nodes:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            raise MediumError(f"only {len(conns)} of {nodes} nodes connected within {timeout:.0f} s "
                              f"(missing: {sorted(set(range(nodes)) - set(conns))})") from None
        c.settimeout(timeout)
        hello = P.read_frame(c)
        if hello is None or hello.type != P.HELLO or not 0 <= hello.src < nodes or hello.src in conns:
            raise MediumError(f"bad hello from a node: {hello}")
        if hello.payload[:1] != bytes([P.PROTOCOL_VERSION]):
            raise MediumError(f"node {hello.src} was built by another cisl version; run `cisl build` again")
        conns[hello.src] = c
        c.sendall(P.pack(P.Frame(P.CONFIG, 0xFE, hello.src, 0, 0,
                                 bytes([P.MODE_RADIO if radio else P.MODE_MESSAGE]))))
    srv.close()

    sel = selectors.DefaultSelector()
    for k, c in conns.items():
        c.setblocking(True)
        sel.register(c, selectors.EVENT_READ, k)
    next_input = {k: 0 for k in conns}
    rounds: dict[tuple[int, int], dict[int, P.Frame]] = {}
    done: set[int] = set()
    last_progress = time.monotonic()
    lossf = open(loss_path, "wb") if loss_path else None
    with open(transcript_path, "wb") as transcript:
        while len(done) < nodes:
            events = sel.select(timeout=1.0)
            if not events:
                if time.monotonic() - last_progress > timeout:
                    waiting = {key: sorted(v) for key, v in rounds.items()}
                    raise MediumError(f"no progress for {timeout:.0f} s; open rounds (inference, sg) -> nodes "
                                      f"that sent: {waiting}")
                continue
            last_progress = time.monotonic()
            for key, _ in events:
                k = key.data
                f = P.read_frame(conns[k])
                if f is None:
                    raise MediumError(f"node {k} disconnected without saying goodbye (crashed?)")
                if f.type == P.INPUT_REQ:
                    i = next_input[k]
                    if i < len(inputs):
                        conns[k].sendall(P.pack(P.Frame(P.INPUT, 0xFE, k, 0, i, inputs[i].tobytes())))
                    else:
                        conns[k].sendall(P.pack(P.Frame(P.END, 0xFE, k, 0, i, b"")))
                    next_input[k] += 1
                elif f.type == P.TX:
                    rnd = rounds.setdefault((f.inference, f.sg), {})
                    if k in rnd:
                        raise MediumError(f"node {k} sent twice in round sg={f.sg} of inference {f.inference}")
                    rnd[k] = f
                    if len(rnd) == nodes:
                        lost = _draw_losses(nodes, rates, seed, f.inference, f.sg)
                        if lossf is not None:
                            lossf.write(P.LOSS_RECORD.pack(f.inference, f.sg, nodes) + lost.astype(np.uint8).tobytes())
                        _deliver(conns, rnd, transcript, lost)
                        del rounds[(f.inference, f.sg)]
                elif f.type == P.TX_COPY and radio is not None:
                    if f.payload:
                        transcript.write(P.TRANSCRIPT_RECORD.pack(f.inference, f.sg, k, f.dest, len(f.payload))
                                         + f.payload)
                elif f.type == P.ROUND_BEGIN and radio is not None:
                    rnd = radio.starting.setdefault((f.inference, f.sg, f.flags), {})
                    rnd[k] = f
                    # the node's next frames are its slot actions: leave them for run_round
                    sel.unregister(conns[k])
                    waiting = {j: key for key, rr in radio.starting.items() for j in rr}
                    if len(waiting) + len(done) == nodes and len(radio.starting) > 1:
                        # every node waits for a round, but not the same one: they run different
                        # schedules (an elastic image's node that missed a mode switch); the radio
                        # medium runs rounds in lockstep, so the run cannot go on
                        raise MediumError("the nodes run different rounds of one inference ("
                                          + ", ".join(f"node {j}: inference {key[0]} exchange {key[1]}"
                                                      for j, key in sorted(waiting.items()))
                                          + "): mixed schedules, e.g. elastic modes after a missed switch")
                    if len(rnd) == nodes:  # everyone is in: run the round slot by slot
                        del radio.starting[(f.inference, f.sg, f.flags)]
                        radio.run_round(conns, rnd)
                        for j, c in conns.items():
                            sel.register(c, selectors.EVENT_READ, j)
                elif f.type == P.DELIVERY and radio is not None:
                    rep = radio.deliveries.setdefault((f.inference, f.sg), {})
                    rep[k] = (np.frombuffer(f.payload[:nodes], dtype=np.uint8).astype(bool),
                              np.frombuffer(f.payload[nodes:3 * nodes], dtype="<u2"))
                    if len(rep) == nodes:
                        del radio.deliveries[(f.inference, f.sg)]
                        got = np.stack([rep[r][0] for r in range(nodes)])  # [receiver, sender]
                        radio.record_delivery(f.inference, f.sg, got, np.stack([rep[r][1] for r in range(nodes)]))
                        lost = ~got
                        lost[np.arange(nodes), np.arange(nodes)] = False
                        if lossf is not None:
                            lossf.write(P.LOSS_RECORD.pack(f.inference, f.sg, nodes) + lost.astype(np.uint8).tobytes())
                elif f.type == P.BYE:
                    done.add(k)
                    sel.unregister(conns[k])
                else:
                    raise MediumError(f"node {k} sent an unexpected frame type {f.type}")
    if lossf is not None:
        lossf.close()
    for c in conns.values():
        c.close()


class RadioMedium:
    """Radio mode: the nodes run Mixer and this plays the channel (codegen/radio) slot by slot.

    A round starts when every node has sent ROUND_BEGIN; then, every slot, each node still in the
    round sends its action (off, listen, or transmit a packet) or says it has finished; the channel
    decides who decodes whose packet and every acting node gets its slot result. When no node is
    left (or the deadline passed) everyone gets ROUND_END with the round's simulated air time.
    """

    def __init__(self, nodes: int, topology_name: str, seed: int, stats_path: str | None,
                 dead: list[int] | None = None, phy: str = "2M", fail: list[tuple[int, int, int]] | None = None,
                 positions: list[list[float]] | None = None):
        from ..radio.channel import Channel
        from ..radio.topology import Topology, topology

        self.nodes = nodes
        self.phy = phy
        topo = (Topology(topology_name, np.asarray(positions, dtype=float)) if positions is not None
                else topology(topology_name, None if topology_name == "hallway16" else nodes, seed))
        self.channel = Channel(topo, seed=seed)
        if self.channel.n != nodes:
            raise MediumError(f"topology {topology_name} has {self.channel.n} nodes but the build has {nodes}; "
                              f"choose a topology for {nodes} nodes (e.g. full_mesh, line, grid)")
        for k in dead or []:  # failed radios: the node runs, but nothing it sends or should hear gets through
            self.channel.fail(k)
        for k, first, rounds in fail or []:  # the same for some Mixer rounds of the run only
            if not 0 <= k < nodes or first < 0 or rounds < 1:
                raise MediumError(f"--radio-fail {k} {first} {rounds}: node 0..{nodes - 1}, first round >= 0, "
                                  f"rounds >= 1")
            self.channel.fail(k, start=first, duration=rounds, unit="round")
        self.deliveries: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self.starting: dict[tuple[int, int, int], dict[int, P.Frame]] = {}
        self.stats = open(stats_path, "w") if stats_path else None

    def run_round(self, conns: dict[int, socket.socket], begin: dict[int, P.Frame]) -> None:
        import json
        import struct

        first = begin[min(begin)]
        deadline, pkt_len, slot_us = struct.unpack("<HHI", first.payload)
        for k, f in begin.items():
            if f.payload != first.payload:
                raise MediumError(f"node {k} starts round sg={f.sg} with another configuration than node "
                                  f"{min(begin)}")
        self.channel.begin_round()
        active = set(range(self.nodes))
        finished_at: dict[int, int] = {}
        radio = [_RadioCount() for _ in range(self.nodes)]
        slot = 0
        while active and slot < deadline:
            acts: dict[int, P.Frame] = {}
            for k in sorted(active):
                f = P.read_frame(conns[k])
                if f is None:
                    raise MediumError(f"node {k} disconnected during a radio round (crashed?)")
                if f.type == P.FINISHED:
                    finished_at[k] = slot
                    active.discard(k)
                elif f.type == P.ACTION:
                    acts[k] = f
                else:
                    raise MediumError(f"node {k} sent frame type {f.type} inside a radio round")
            if not acts:
                break
            tx = {k: f.payload for k, f in acts.items() if f.flags == P.ACT_TX}
            rx = {k for k, f in acts.items() if f.flags == P.ACT_RX}
            got = self.channel.slot(tx, rx) if (tx and rx) else {}
            on_air = any(k not in self.channel.dead_nodes() for k in tx)
            for k in tx:
                radio[k].transmit()
            for k in rx:
                radio[k].listen(slot, k in got, on_air)
            for k in acts:
                data = tx[got[k]] if k in got else b""
                conns[k].sendall(P.pack(P.Frame(P.SLOT_RESULT, got.get(k, 0xFE), k, first.sg, first.inference, data)))
            slot += 1
        for k in sorted(active):  # at the deadline every node still in the round says it has finished
            f = P.read_frame(conns[k])
            if f is None or f.type != P.FINISHED:
                raise MediumError(f"node {k} did not finish its round at the deadline")
            finished_at[k] = slot
        air_us = slot * slot_us
        for k, c in conns.items():
            # the round's air time, then this node's radio TX-on and RX-on time (the sg lines' keys)
            _, tx_on, rx_on, _ = radio[k].on_us(slot_us, pkt_len, self.phy)
            c.sendall(P.pack(P.Frame(P.ROUND_END, 0xFE, k, first.sg, first.inference,
                                     struct.pack("<III", air_us, tx_on, rx_on))))
        if self.stats is not None:
            self.stats.write(json.dumps({"inference": first.inference, "sg": first.sg, "part": first.flags,
                                         "slots": slot, "deadline": deadline, "slot_us": slot_us,
                                         "packet_len": pkt_len, "finished": [finished_at.get(k) for k in
                                                                              range(self.nodes)]}) + "\n")

    def record_delivery(self, inference: int, sg: int, got: np.ndarray, slots: np.ndarray) -> None:
        """Which node decoded which sender's message of an exchange, and in which slot of its round
        (of the round of its last piece, for a message split over rounds)."""
        import json

        if self.stats is not None:
            self.stats.write(json.dumps({"inference": inference, "sg": sg, "delivered": got.astype(int).tolist(),
                                         "decode_slot": [[None if v == 0xFFFF or not got[r, s] else int(v)
                                                          for s, v in enumerate(row)]
                                                         for r, row in enumerate(slots)]}) + "\n")

    def close(self) -> None:
        if self.stats is not None:
            self.stats.close()


class _RadioCount:
    """One node's radio in one round, counted from its slot actions exactly as the cycle model's
    slot-level simulation counts them (codegen/timing/comm.py node_radio_on_us): a node that
    transmits before it has heard anything is the initiator (after scanning, the backup that took the
    round over); any other node scans until the packet that synchronises it."""

    def __init__(self) -> None:
        self.tx = self.rx = self.packets = self.busy = 0
        self.sync: int | None = None
        self.initiator = False
        self.scan_before = 0

    def transmit(self) -> None:
        if self.sync is None and not self.tx:
            self.initiator = True
            self.scan_before = self.rx
        self.tx += 1

    def listen(self, slot: int, decoded: bool, on_air: bool) -> None:
        self.rx += 1
        if self.initiator or (self.sync is not None and slot > self.sync):
            self.packets += decoded
            self.busy += (not decoded) and on_air
        elif decoded and self.sync is None:
            self.sync = slot

    def on_us(self, slot_us: int, packet_len: int, phy: str) -> tuple[int, int, int, int]:
        from ..timing.comm import node_radio_on_us

        return node_radio_on_us(self.tx, self.rx, self.initiator, self.sync, self.packets, self.busy, slot_us,
                                packet_len, phy, self.scan_before)


def _draw_losses(nodes: int, rates: LossRates, seed: int, inference: int, sg: int) -> np.ndarray:
    """[receiver, sender] loss pattern of one round; depends only on (seed, inference, round)."""
    if not rates.any:
        return np.zeros((nodes, nodes), dtype=bool)
    return sample_lost(np.random.default_rng([seed, inference, sg]), 1, nodes, rates)[0]


def _deliver(conns: dict[int, socket.socket], rnd: dict[int, P.Frame], transcript, lost: np.ndarray) -> None:
    for src in sorted(rnd):
        f = rnd[src]
        if f.payload:
            transcript.write(P.TRANSCRIPT_RECORD.pack(f.inference, f.sg, src, f.dest, len(f.payload)) + f.payload)
    for k, c in conns.items():
        out = bytearray()
        any_f = next(iter(rnd.values()))
        for src in sorted(rnd):
            f = rnd[src]
            if src != k and f.payload and f.dest in (P.BROADCAST, k) and not lost[k, src]:
                out += P.pack(P.Frame(P.RX, src, k, f.sg, f.inference, f.payload))
        out += P.pack(P.Frame(P.RX_END, 0xFE, k, any_f.sg, any_f.inference, b""))
        c.sendall(bytes(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--inputs", required=True, help=".npy int8 [n, lookback]")
    ap.add_argument("--transcript", required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--loss", type=float, nargs=3, default=(0.0, 0.0, 0.0), metavar=("LINK", "RECEIVER", "SENDER"),
                    help="per-round loss probabilities of the three modes")
    ap.add_argument("--loss-seed", type=int, default=0)
    ap.add_argument("--loss-file", default=None, help="where to record every round's loss pattern")
    ap.add_argument("--radio", default=None, help="radio mode on this topology (codegen/radio/topology.py)")
    ap.add_argument("--radio-seed", type=int, default=0)
    ap.add_argument("--radio-stats", default=None, help="radio mode: where to write per-round statistics (JSON lines)")
    ap.add_argument("--radio-dead", type=int, nargs="*", default=[], help="radio mode: nodes whose radio is dead")
    ap.add_argument("--radio-fail", type=int, nargs=3, action="append", default=[],
                    metavar=("NODE", "FIRST", "ROUNDS"),
                    help="radio mode: this node's radio is dead for ROUNDS Mixer rounds from round FIRST of the run")
    ap.add_argument("--radio-phy", default="2M", choices=("1M", "2M"),
                    help="radio mode: the plan's BLE PHY (the nodes' radio-on time per slot)")
    ap.add_argument("--radio-positions", default=None,
                    help="radio mode: the nodes' positions, JSON [[x, y], ...] (a testbed's own layout)")
    args = ap.parse_args(argv)
    inputs = np.load(args.inputs).astype(np.int8)
    radio = None
    try:
        if args.radio:
            radio = RadioMedium(args.nodes, args.radio, args.radio_seed, args.radio_stats, args.radio_dead,
                                args.radio_phy, [tuple(f) for f in args.radio_fail],
                                json.loads(args.radio_positions) if args.radio_positions else None)
        serve(args.socket, args.nodes, inputs, args.transcript, args.timeout, LossRates(*args.loss),
              args.loss_seed, args.loss_file, radio)
    except MediumError as e:
        print(f"medium: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        if radio is not None:
            radio.close()
        if os.path.exists(args.socket):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
