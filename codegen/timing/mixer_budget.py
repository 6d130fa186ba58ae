"""The Mixer's processing budget on the nRF52840: cycles of the per-packet work against the gap.

Between two packets the board's CPU runs exactly this (boards/nrf52840dk/radio.c, ``mx_start`` in
firmware/mixer/mixer.c):

1. after the packet of slot s ends: ``hal_receive``'s copy out of the PDU, ``mx_receive`` (packet
   checks, GF(2) elimination of the coding vector, the payload XORs of an innovative row),
   ``hal_sync``, ``mx_slot_end`` — the *RX work*;
2. ``mx_slot`` for slot s + 1 (TX decision, building the coded packet: XOR of about half the rows
   held) — the *TX preparation*; then ``wait_slot(s + 1)`` busy-waits until ``RAMP + SETUP +
   rx_half`` before the next slot's start, and ``hal_transmit`` copies the packet into the PDU and
   programs the compare that starts the radio (``arm_at``): at ``start − RAMP`` for TX,
   ``start − rx_half − RAMP`` for RX. A compare time already past makes the slot *late* (``late`` in
   the ``mx`` line; a late TX slot sends nothing).

So a slot is on time iff ``air + rx_work + tx_prep`` is at most ``T − RAMP`` (next slot TX) or
``T − RAMP − rx_half`` (next slot RX), T the slot length: the **gap** ``T − air − RAMP`` holds the
whole per-packet work. (Until this measurement ``mx_slot`` ran *after* ``wait_slot``, which left it
only ``SETUP + rx_half`` ≈ 35 µs — the *TX window* still reported — and made 7 of the 16 (G, P) of
the Fig. 6 builds late; firmware/mixer/mixer.c ``mx_start`` now prepares in the gap.)

This module measures both on the cycle model (:mod:`codegen.timing.engine`): the project's
``mixer.c`` (built with the board's flags, as ``cisl build`` builds it) and a small harness
(firmware/mixer/bench/mx_bench.c) are linked into an nRF52840 image; one node of an n-node round
runs in the emulator, the other n − 1 on the host (the same C, :mod:`codegen.radio.mixer_network`'s
library), over a full mesh where each receiver captures one of the slot's transmitters. Every
harness call is one region, so each slot's RX work and TX preparation are counted separately
(low / central / high cycles, the memory model's flash wait states and instruction cache included).
The radio driver's own register accesses (a few dozen cycles) are not counted.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import re
import shutil
import subprocess
from ctypes import POINTER, c_int8, c_int16, c_uint8, c_void_p
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..boards import load_board
from ..build import SPEED_SOURCES
from ..errors import UserError
from ..plan.mixer_layout import row_words
from ..plan.mixer_schedule import INITIATOR, RoundPolicy, packet_length
from ..radio import mixer_network
from ..radio.airtime import air_time_us, slot_us_for_length
from ..resources import resource_dir
from ..toolrun import log_command
from .engine import Image
from .memsystem import MemoryModel
from .native import new_emulator

BOARD = "nrf52840dk"
HARNESS = "mixer/bench/mx_bench.c"
MIXER = "mixer/mixer.c"
ENTRY_POINTS = ["bench_setup", "bench_slot", "bench_receive", "bench_slot_end", "bench_verify", "bench_synced",
                "bench_next_slot", "bench_rank", "bench_byte", "bench_features", "bench_prepare"]
WEAK = 0xFE
ACT_OFF, ACT_RX, ACT_TX = 0, 1, 2


def _driver_constants(board_path: Path) -> dict[str, int]:
    """RAMP_US, SETUP_US and the ADDRESS event's offset per PHY (ADDR_TICKS_2M / _1M, 16 MHz ticks) from
    the board's radio driver (so a change there changes the budget)."""
    src = (board_path / "radio.c").read_text()
    out = {}
    for name, define in (("RAMP_US", "RAMP_US"), ("SETUP_US", "SETUP_US"),
                         ("ADDR_TICKS_2M", "CISL_RADIO_ADDR_EVENT_TICKS_2M"),
                         ("ADDR_TICKS_1M", "CISL_RADIO_ADDR_EVENT_TICKS_1M")):
        m = re.search(rf"#define {define} (\d+)u", src)
        if m is None:
            raise RuntimeError(f"{board_path / 'radio.c'}: no #define {define}")
        out[name] = int(m.group(1))
    return out


def rx_half_us(slot_us: int) -> int:
    """Half the receive window, µs (radio.c cisl_board_mixer_round: 3·DT + 2·4 µs + 5 µs, DT = slot/1000)."""
    return 3 * slot_us // 1000 + 2 * 4 + 5


# ---- the image ---------------------------------------------------------------------------------


def default_maxima(generation: int, payload: int, nodes: int) -> dict[str, int]:
    """Mixer's compile-time maxima of a build whose largest round is (G, P) (codegen.plan.mixer_layout.mixer_maxima)."""
    return {"MX_MAX_NODES": nodes, "MX_MAX_G": generation, "MX_MAX_P": payload,
            "MX_POOL_WORDS": generation * row_words(generation, payload)}


def build_image(maxima: dict[str, int]) -> Path:
    """Compile mixer.c + the harness for the nRF52840 with the board's flags; cached by content."""
    board = load_board(BOARD)
    b = board.build
    cc = b["cc"]
    if shutil.which(cc) is None:
        raise UserError(f"compiler '{cc}' not found; the Mixer budget needs it (apt-get install gcc-arm-none-eabi "
                        f"libnewlib-arm-none-eabi)")
    fw = resource_dir("firmware")
    cpu = list(b.get("cpu_flags", []))
    mx_defs = [f"-D{k}={v}u" for k, v in sorted(maxima.items())]
    # exactly as codegen.build: mixer.c is a speed source (kernel_cflags), other own code gets cflags
    mixer_flags = cpu + list(b.get("kernel_cflags", b["cflags"]) if MIXER in SPEED_SOURCES else b["cflags"]) + mx_defs
    harness_flags = cpu + list(b["cflags"]) + mx_defs
    includes = [f"-I{fw / 'mixer'}"]
    ldflags = [a.replace("{board}", str(board.path)) for a in b.get("ldflags", [])]
    ldflags.append(f"-Wl,--defsym=__cisl_stack_size={int(b.get('stack_bytes', 8192))}")
    ldflags += [f"-Wl,--undefined={s}" for s in ENTRY_POINTS]
    srcs = [(fw / MIXER, mixer_flags), (fw / HARNESS, harness_flags)]
    h = hashlib.sha256()
    log_command([cc, "--version"])
    for part in [subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.encode(),
                 (fw / "mixer" / "mixer.h").read_bytes(), (board.path / "nrf52840.ld").read_bytes(),
                 "\0".join(ldflags).encode()] + [p.read_bytes() + "\0".join(f).encode() for p, f in srcs]:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    cache = Path.home() / ".cache" / "cisl" / "mixer_budget"
    elf = cache / f"mx_bench-{h.hexdigest()[:16]}.elf"
    if elf.is_file():
        return elf
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"tmp-{elf.stem}"
    tmp.mkdir(exist_ok=True)
    objs = []
    for src, flags in srcs:
        obj = tmp / (src.stem + ".o")
        cmd = [cc, *flags, *includes, "-c", str(src), "-o", str(obj)]
        log_command(cmd)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{p.stdout}{p.stderr}")
        objs.append(str(obj))
    out = tmp / "mx_bench.elf"
    cmd = [cc, *cpu, *objs, *ldflags, "-o", str(out)]
    log_command(cmd)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"linking the Mixer budget image failed:\n{p.stdout}{p.stderr}")
    out.replace(elf)
    shutil.rmtree(tmp, ignore_errors=True)
    return elf


# ---- one round -----------------------------------------------------------------------------------


@dataclass
class SlotWork:
    slot: int
    act: int            # the node's action in this slot (ACT_RX / ACT_TX)
    rx_status: int      # mx_receive's result (127: nothing received)
    rank: int           # the node's rank after the slot
    prep: tuple[float, float, float]   # mx_slot (+ copy to the PDU), cycles low/central/high
    after: tuple[float, float, float]  # RX work after the packet (copy, mx_receive, mx_slot_end)
    ahead: tuple[float, float, float] = (0.0, 0.0, 0.0)  # mx_prepare of the next slot, run during this one


@dataclass
class RoundTrace:
    generation: int
    payload: int
    nodes: int
    node: int
    slots: list[SlotWork]
    verify_missing: int
    verify_wrong: int
    features: int = 0   # MX_FEAT_* of the round


def run_round(elf: Path, generation: int, payload: int, nodes: int, owners: list[int] | None = None,
              node: int = 1, seed: int = 1, termination: int = mixer_network.TERM_DONE, linger: int | None = None,
              deadline: int | None = None, loss: float = 0.0, features: int | None = None) -> RoundTrace:
    """One Mixer round of n nodes; node ``node`` runs on the emulated M4 with every slot measured.

    ``owners[row]`` is the writer of each row (a node id, or -1 for a weak zero); default: row 0 the
    initiator's header, the others in contiguous blocks over the nodes (as the planner's fragments).
    ``features`` (``MX_FEAT_*``, the same for every node) defaults to what deployed rounds run:
    mixer.h's ``MX_FEAT_DEFAULT``, read from the image (``bench_features``), not a copy of it."""
    if owners is None:
        owners = [INITIATOR] + [min(nodes - 1, (r * nodes) // max(generation - 1, 1)) for r in range(generation - 1)]
    if len(owners) != generation:
        raise ValueError("owners must name the writer of every row")
    if not 0 <= node < nodes:
        raise ValueError(f"node {node} out of range for {nodes} nodes")
    board = load_board(BOARD)
    memory = MemoryModel.for_board(board)
    em = new_emulator(Image.load(elf), memory)
    sym = em.image.symbols
    deadline = deadline or 3 * generation + 200
    linger = max(4, nodes) if linger is None else linger
    if features is None:
        em._switch("query")
        features = em.call("bench_features", [])
    cfg = mixer_network.MixerConfig(nodes, INITIATOR, generation, payload, deadline, features, termination, linger,
                                seed & 0xFFFFFFFF)
    for j, share in enumerate(mixer_network.slot_shares(nodes, [max(o, 0) for o in owners],
                                                         {i for i, o in enumerate(owners) if o < 0})):
        cfg.slot_shares[j] = share  # as the somegather transport sets them
    em.write(sym["bench_cfg"], bytes(cfg))
    em.write(sym["bench_owner"], bytes(WEAK if o < 0 else o for o in owners))

    def call(name: str, args: list[int], key) -> tuple[int, tuple[float, float, float]]:
        em._switch(key)
        r = em.call(name, args)
        r = r - (1 << 32) if r & 0x8000_0000 else r
        return r, em.counts[key].cycles(memory)

    r, _ = call("bench_setup", [node, mixer_network.ARM_INITIATOR if node == INITIATOR else mixer_network.ARM_LISTENER],
                "setup")
    if r != 0:
        raise RuntimeError(f"bench_setup failed: mixer status {r}")

    # the other nodes on the host
    lib = mixer_network.library()
    plen = lib.mx_packet_len(ctypes.byref(cfg))
    if plen == 0 or plen != packet_length(nodes, generation, payload):
        raise ValueError(f"invalid Mixer configuration n={nodes} G={generation} P={payload}")
    size = lib.mx_state_size()
    host = [j for j in range(nodes) if j != node]
    bufs = [ctypes.create_string_buffer(size) for _ in host]
    ptrs = (c_void_p * len(host))(*[ctypes.addressof(b) for b in bufs])
    for k, j in enumerate(host):
        if lib.mx_init(ptrs[k], ctypes.byref(cfg), j) != 0:
            raise RuntimeError("mx_init failed")
    for row, o in enumerate(owners):
        if o < 0:
            if INITIATOR != node:
                lib.mx_write(ptrs[host.index(INITIATOR)], row, None, 0)
        elif o != node:
            data = bytes((row * 131 + k * 7 + (row ^ k) + 1) & 0xFF for k in range(payload))  # bench_byte
            lib.mx_write(ptrs[host.index(o)], row, data, payload)
    for k, j in enumerate(host):
        lib.mx_arm(ptrs[k], mixer_network.ARM_INITIATOR if j == INITIATOR else mixer_network.ARM_LISTENER)
    host_pk = np.zeros((len(host), plen), dtype=np.uint8)
    all_pk = np.zeros((nodes, plen), dtype=np.uint8)
    actions = np.zeros(len(host), dtype=np.int8)
    frm = np.full(len(host), -1, dtype=np.int16)
    rx_status = np.zeros(len(host), dtype=np.int8)
    rng = np.random.default_rng(seed)

    trace: list[SlotWork] = []
    me_done = False
    for slot in range(deadline):
        host_done = all(lib.mx_finished(ptrs[k]) for k in range(len(host)))
        if me_done and host_done:
            break
        lib.mx_slot_batch(ptrs, len(host), slot, actions.ctypes.data_as(POINTER(c_int8)),
                          host_pk.ctypes.data_as(POINTER(c_uint8)), plen)
        act = ACT_OFF
        prep = (0.0, 0.0, 0.0)
        ahead = (0.0, 0.0, 0.0)
        if not me_done:
            act, prep = call("bench_slot", [], ("prep", slot))
            if act < 0:
                raise RuntimeError(f"slot {slot}: mx_slot failed with {act}")
            if act == ACT_OFF:
                me_done = True
            else:
                # mx_start (with the board's listen / tx_done) combines the next packet while this
                # slot's packet is on the air (mx_prepare does nothing before synchronisation)
                r, ahead = call("bench_prepare", [], ("ahead", slot))
                if r != 0:
                    raise RuntimeError(f"slot {slot}: mx_prepare failed with {r}")
        tx = [host[k] for k in np.flatnonzero(actions == ACT_TX)]
        for k, j in enumerate(host):
            all_pk[j] = host_pk[k]
        if act == ACT_TX:
            n = int.from_bytes(em.read(sym["bench_tx_len"], 2), "little")
            if n != plen:
                raise RuntimeError(f"slot {slot}: the emulated node sent {n} B, expected {plen}")
            all_pk[node] = np.frombuffer(em.read(sym["bench_pdu"] + 2, plen), dtype=np.uint8)
            tx.append(node)

        def sender_for(r: int) -> int:
            cands = [t for t in tx if t != r]
            if not cands or (loss and rng.random() < loss):
                return -1
            return int(cands[rng.integers(len(cands))])

        frm.fill(-1)
        for k, j in enumerate(host):
            if actions[k] == ACT_RX:
                frm[k] = sender_for(j)
        lib.mx_deliver_batch(ptrs, len(host), slot, all_pk.ctypes.data_as(POINTER(c_uint8)), plen,
                             frm.ctypes.data_as(POINTER(c_int16)), rx_status.ctypes.data_as(POINTER(c_int8)))
        if act in (ACT_RX, ACT_TX):
            s = sender_for(node) if act == ACT_RX else -1
            if s >= 0:
                em.write(sym["bench_pdu"], bytes([0, plen]) + all_pk[s].tobytes())
                st, after = call("bench_receive", [plen], ("after", slot))
            else:
                st, after = call("bench_slot_end", [], ("after", slot))
                st = 127
            rank, _ = call("bench_rank", [], "query")
            trace.append(SlotWork(slot, act, st, rank, prep, after, ahead))
    v, _ = call("bench_verify", [], "verify")
    return RoundTrace(generation, payload, nodes, node, trace, v >> 16, v & 0xFFFF, features)


# ---- the budget ----------------------------------------------------------------------------------


@dataclass
class Budget:
    generation: int
    payload: int
    nodes: int
    phy: str
    slot_us: int
    air_us: int
    gap_us: int              # slot − air − ramp-up: all per-packet work, next slot TX
    tx_window_us: int        # SETUP + rx_half: mx_slot's time between wait_slot and a TX compare
    rx_window_us: int        # SETUP: mx_slot's time before an RX compare
    worst: tuple[float, float, float]      # per gap: RX work of slot s + TX preparation of slot s+1, cycles
    mean: tuple[float, float, float]
    worst_prep: tuple[float, float, float]  # TX preparation alone (mx_slot of a TX slot), cycles
    worst_rx: tuple[float, float, float]    # RX work alone (copy, mx_receive, mx_slot_end), cycles
    worst_us: float          # central
    worst_us_high: float
    worst_prep_us: float     # central
    margin_us: float         # gap_us − worst_us (central)
    prep_margin_us: float    # tx_window_us − worst_prep_us (central)
    late_slots: int          # slots the driver would miss (central cycles)
    late_slots_high: int     # ... at the high bound
    late_tx: int             # of late_slots: TX slots (the driver sends nothing)
    late_rx: int             # of late_slots: RX slots (the receiver starts late, listens anyway)
    slots: int               # slots the node was on in the measured rounds
    rounds: int
    decoded_ok: bool         # every round: all rows decoded and equal to what was written
    fits: bool               # no late slot (central)
    clock_hz: int = 64_000_000
    margin_slot_us: int = 50
    features: int = 0        # MX_FEAT_* the rounds ran
    needed_slot_us: tuple[int, int, int] = (0, 0, 0)  # shortest slot without a late slot, per cycle bound
    worst_ahead: tuple[float, float, float] = (0.0, 0.0, 0.0)  # mx_prepare, overlapped with the air time, cycles
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _late(trace: RoundTrace, k: int, slot_us: int, air_us: int, rx_half: int, c: dict[str, int],
          clock: float) -> tuple[bool, float]:
    """Is slot trace.slots[k+1] late, with cycle bound k of the (low, central, high) triple?"""
    a, b = trace.slots[k], trace.slots[k + 1]
    rx_work = a.after[c["bound"]] / clock * 1e6
    prep = b.prep[c["bound"]] / clock * 1e6
    ahead = a.ahead[c["bound"]] / clock * 1e6
    ready = air_us if a.act == ACT_TX or a.rx_status != 127 else min(air_us, c["ADDR"] + rx_half)
    # mx_prepare of slot s + 1 starts once the radio is armed for slot s (wait_slot returned RAMP +
    # SETUP + rx_half before the slot; arming takes at most SETUP) and overlaps the air time; the RX
    # work starts when both the packet and it are over; then mx_slot of slot s + 1, then the wait
    started = -(c["RAMP_US"] + rx_half)
    t = max(ready, started + ahead) + rx_work + prep
    limit = slot_us - c["RAMP_US"] - (rx_half if b.act == ACT_RX else 0)
    return t > limit, t


def measure_rounds(generation: int, payload: int, nodes: int = 16, rounds: int = 2, node: int = 1,
                   owners: list[int] | None = None, maxima: dict[str, int] | None = None, seed: int = 1,
                   features: int | None = None) -> list[RoundTrace]:
    """``rounds`` rounds (seeds ``seed``, ``seed + 1``, ...) of (G, P) with node ``node`` on the cycle model.

    The cycles do not depend on the PHY or the slot length: :func:`evaluate` puts one set of traces
    against any slot."""
    elf = build_image(maxima or default_maxima(generation, payload, nodes))
    return [run_round(elf, generation, payload, nodes, owners, node, seed + i, linger=max(4, nodes), features=features)
            for i in range(rounds)]


def _timeline(phy: str) -> tuple[dict[str, int], int]:
    board = load_board(BOARD)
    consts = _driver_constants(board.path)
    # slot start -> ADDRESS, whole µs rounded up: an RX slot without a packet ends earlier
    consts["ADDR"] = -(-consts[f"ADDR_TICKS_{phy}"] // 16)
    return consts, int(board.facts["board"]["clock_hz"])


def needed_slot_us(traces: list[RoundTrace], phy: str, bound: int = 2) -> int:
    """The shortest slot (µs) in which no slot of the measured rounds is late at cycle bound ``bound``
    (0 low, 1 central, 2 high): the radio driver's timeline (:func:`_late`) with the half RX window
    of that slot length. This is what a planner's slot has to be at least."""
    consts, clock = _timeline(phy)
    c = {**consts, "bound": bound}
    tr0 = traces[0]
    air = air_time_us(packet_length(tr0.nodes, tr0.generation, tr0.payload), phy)
    slot = air + consts["RAMP_US"]
    # late(T) iff T < need(T), and need(T) grows with T only through the half RX window (0.3 % of T):
    # iterating from below reaches the least T with T >= need(T)
    for _ in range(100):
        half = rx_half_us(slot)
        need = slot
        for tr in traces:
            for k in range(len(tr.slots) - 1):
                _, t = _late(tr, k, slot, air, half, c, clock)
                rx = half if tr.slots[k + 1].act == ACT_RX else 0
                need = max(need, math.ceil(t + consts["RAMP_US"] + rx - 1e-9))
        if need == slot:
            return slot
        slot = need
    raise RuntimeError("needed_slot_us did not converge")


def evaluate(traces: list[RoundTrace], phy: str = "2M", slot_us: int | None = None,
             margin_us: int | None = None) -> Budget:
    """The measured rounds' per-packet work against the gap of a slot on ``phy``; ``slot_us``
    defaults to the plain slot for the packet (airtime.slot_us_for_length with RoundPolicy's margin,
    i.e. before the planner lengthens it for the processing)."""
    if not traces:
        raise ValueError("no measured rounds")
    tr0 = traces[0]
    generation, payload, nodes = tr0.generation, tr0.payload, tr0.nodes
    consts, clock = _timeline(phy)
    margin = RoundPolicy(phy=phy).margin_us if margin_us is None else margin_us
    length = packet_length(nodes, generation, payload)
    slot = slot_us or slot_us_for_length(length, phy, margin)
    air = air_time_us(length, phy)
    half = rx_half_us(slot)
    gaps, preps, rxs = [], [], []
    late = [0, 0, 0]
    late_kind = [0, 0]
    for tr in traces:
        for k in range(len(tr.slots) - 1):
            a, b = tr.slots[k], tr.slots[k + 1]
            gaps.append(tuple(x + y for x, y in zip(a.after, b.prep)))
            rxs.append(a.after)
            if b.act == ACT_TX:
                preps.append(b.prep)
            for bound in range(3):
                if _late(tr, k, slot, air, half, {**consts, "bound": bound}, clock)[0]:
                    late[bound] += 1
                    if bound == 1:
                        late_kind[0 if b.act == ACT_TX else 1] += 1
    if not gaps:
        raise RuntimeError("the measured node was on for fewer than two slots")
    arr = np.array(gaps)
    worst = tuple(float(x) for x in arr.max(axis=0))
    mean = tuple(float(x) for x in arr.mean(axis=0))
    wprep = tuple(float(x) for x in np.array(preps).max(axis=0)) if preps else (0.0, 0.0, 0.0)
    wrx = tuple(float(x) for x in np.array(rxs).max(axis=0))
    us = 1e6 / clock
    gap = slot - air - consts["RAMP_US"]
    txw = consts["SETUP_US"] + half
    ok = all(t.verify_missing == 0 and t.verify_wrong == 0 for t in traces)
    return Budget(generation, payload, nodes, phy, slot, air, gap, txw, consts["SETUP_US"], worst, mean, wprep, wrx,
                  worst[1] * us, worst[2] * us, wprep[1] * us, gap - worst[1] * us, txw - wprep[1] * us,
                  late[1], late[2], late_kind[0], late_kind[1], len(gaps) + len(traces), len(traces), ok, late[1] == 0,
                  clock, margin, features=tr0.features,
                  needed_slot_us=tuple(needed_slot_us(traces, phy, bound) for bound in range(3)),
                  worst_ahead=tuple(float(x) for x in np.array([s.ahead for t in traces for s in t.slots]).max(axis=0)))


def packet_budget(generation: int, payload: int, phy: str = "2M", nodes: int = 16, rounds: int = 2,
                  node: int = 1, owners: list[int] | None = None, maxima: dict[str, int] | None = None,
                  slot_us: int | None = None, margin_us: int | None = None, seed: int = 1,
                  features: int | None = None) -> Budget:
    """Cycles of the Mixer's per-packet work for (G, P) on the nRF52840 against the gap between packets.

    ``rounds`` rounds (seeds ``seed``, ``seed + 1``, ...) are run with node ``node`` on the cycle model;
    the worst and mean are over every gap of every round. ``slot_us`` defaults to the plain slot for
    the packet (the firmware's packet length, RoundPolicy's margin, no lengthening). ``features``
    defaults to the deployed ``MX_FEAT_DEFAULT``."""
    traces = measure_rounds(generation, payload, nodes, rounds, node, owners, maxima, seed, features)
    return evaluate(traces, phy, slot_us, margin_us)


# ---- the (G, P) grid the planner chooses from ---------------------------------------------------

GRID_G = (2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
GRID_P = (8, 16, 32, 64, 96, 128, 160, 192, 219, 240)
# 16 nodes: the Fig. 6 builds' largest network; packets are longest there for G < 16 (the info
# vector carries node sets, ⌈max(G, n)/8⌉ B), and a node hears 15 senders' random combinations,
# which makes its receptions the most expensive (with 2 nodes half the rows arrive systematically).
GRID_NODES = 16
# The rounds sampled per point. The worst gap is an innovative reception at high rank followed by
# a TX at full rank (an XOR of about half the rows held, a binomial count): the 16-node rounds give
# the expensive receptions under both round policies the compiler emits (done = MX_TERM_DONE, fixed
# = MX_TERM_DEADLINE, which keeps transmitting at full rank until 3G + 200 slots); a 2-node fixed
# round makes the measured node send every other slot at full rank (about 1.5G + 100 TX samples),
# which samples the packet build's tail.
GRID_ROUNDS = ((GRID_NODES, mixer_network.TERM_DONE), (GRID_NODES, mixer_network.TERM_DEADLINE),
               (2, mixer_network.TERM_DEADLINE))


def grid_payloads(generation: int, nodes: int = GRID_NODES) -> list[int]:
    """GRID_P clipped to what the planner may pick for G (P ≤ min(240, 255 − packet overhead)),
    plus that largest P itself."""
    from ..plan.mixer_schedule import _max_payload

    top = _max_payload(nodes, generation)
    return sorted({p for p in GRID_P if p <= top} | {top})


def grid_points(nodes: int = GRID_NODES) -> list[tuple[int, int]]:
    return [(g, p) for g in GRID_G for p in grid_payloads(g, nodes)]


def measure_point(generation: int, payload: int, seed: int = 1,
                  rounds: tuple[tuple[int, int], ...] = GRID_ROUNDS) -> list[RoundTrace]:
    """The GRID_ROUNDS rounds of (G, P), one image sized for GRID_NODES (the first trace is the
    16-node round, whose packet length :func:`evaluate` uses)."""
    elf = build_image(default_maxima(generation, payload, max(n for n, _ in rounds)))
    return [run_round(elf, generation, payload, n, node=1, seed=seed + i, termination=term, linger=max(4, n))
            for i, (n, term) in enumerate(rounds)]


def work_bounds(traces: list[RoundTrace]) -> dict:
    """Per-packet work of the measured rounds, cycles (low, central, high):

    * ``gap``: the worst gap as it occurred (RX work after slot s + TX preparation of slot s + 1);
    * ``rx`` / ``prep``: the worst RX work and the worst TX preparation anywhere, and ``decoupled`` =
      their sum, the gap if the most expensive reception were followed by the most expensive packet
      build (what a long deployment eventually meets);
    * ``prep_min``: the cheapest TX preparation (one row or a small combination, serialised into
      the packet), a proxy for what remains of a packet build whose row combination was computed
      ahead of time (docs/design/mixer.md, "Processing budget");
    * ``prep_full``: mean and standard deviation of the TX preparation at full rank (high bound);
      ``tail`` = worst RX + mean + z·sd with z = min(4.75, √G): its normal 1e-6 quantile;
    * ``ahead``: the worst mx_prepare (the next packet's combination, run while this slot's packet is
      on the air); ``ahead_full`` its mean and sd at full rank, the binomial part whose tail the
      samples may miss (the count of rows is Binomial(G, 1/2)); ``slot_work`` = the larger of its
      worst and its 1e-6 quantile (mean + z·sd), + worst RX + worst TX preparation: what one slot's
      CPU must hold (high bound)."""
    rx = np.array([s.after for t in traces for s in t.slots])
    prep = np.array([s.prep for t in traces for s in t.slots if s.act == ACT_TX])
    full = np.array([s.prep[2] for t in traces for s in t.slots if s.act == ACT_TX and s.rank == t.generation])
    gaps = np.array([tuple(x + y for x, y in zip(a.after, b.prep)) for t in traces
                     for a, b in zip(t.slots, t.slots[1:])])
    w_rx = rx.max(axis=0) if len(rx) else np.zeros(3)
    w_prep = prep.max(axis=0) if len(prep) else np.zeros(3)
    mu, sd = (float(full.mean()), float(full.std())) if len(full) > 1 else (float(w_prep[2]), 0.0)
    ahead = np.array([s.ahead for t in traces for s in t.slots])
    w_ahead = ahead.max(axis=0) if len(ahead) else np.zeros(3)
    a_full = np.array([s.ahead[2] for t in traces for s in t.slots if s.rank == t.generation])
    a_mu, a_sd = (float(a_full.mean()), float(a_full.std())) if len(a_full) > 1 else (float(w_ahead[2]), 0.0)
    a_tail = max(float(w_ahead[2]), a_mu + min(4.75, math.sqrt(traces[0].generation)) * a_sd)
    return {"gap": [float(x) for x in gaps.max(axis=0)], "rx": [float(x) for x in w_rx],
            "prep": [float(x) for x in w_prep],
            "prep_min": [float(x) for x in (prep.min(axis=0) if len(prep) else np.zeros(3))],
            "decoupled": [float(x + y) for x, y in zip(w_rx, w_prep)],
            "prep_full": {"n": int(len(full)), "mean": mu, "sd": sd},
            "tail": float(w_rx[2] + mu + min(4.75, math.sqrt(traces[0].generation)) * sd),
            "ahead": [float(x) for x in w_ahead], "ahead_full": {"n": int(len(a_full)), "mean": a_mu, "sd": a_sd},
            "slot_work": float(a_tail + w_rx[2] + w_prep[2]),
            "gaps": int(len(gaps)), "tx": int(len(prep))}


PHYS = ("2M", "1M")


def required_us(row: dict, phy: str) -> float:
    """The slot (µs) a grid row (bench/mixer_budget_grid.py, docs/results/mixer_budget_grid.json)
    needs on ``phy`` at the high bound: the largest of the shortest slot without a late slot in its
    measured rounds, air + ramp-up + the gap's decoupled worst (worst reception + worst packet finish)
    or its 1e-6 tail, and ramp-up + the whole slot's work (:func:`work_bounds`)."""
    x = row[phy]
    ramp = _driver_constants(load_board(BOARD).path)["RAMP_US"]
    return max(x["needed_slot_us"][2], x["air_us"] + ramp + max(x["decoupled_us_high"], x["tail_us"]),
               ramp + x["slot_work_us"])


def required_cycles(row: dict) -> float:
    """The gap work (cycles) a slot rule ``air + ramp-up + work`` must cover for a grid row: worst
    reception + worst packet finish, or the finish's tail (what board.toml's per_packet_cycles bounds)."""
    return max(row["work"]["decoupled"][2], row["work"]["tail"])


def required_slot_cycles(row: dict) -> float:
    """The whole slot's CPU work (cycles) for a grid row (what board.toml's slot_cycles bounds)."""
    return row["work"]["slot_work"]


def plan_budgets(build_dir: Path, phy: str | None = None, rounds: int = 2) -> list[dict]:
    """packet_budget for every distinct Mixer round (G, P) of a compiled plan, with the build's maxima."""
    from ..plan.mixer_layout import mixer_maxima
    from ..plan.io import load_plan

    plan = load_plan(build_dir)
    mx = plan.meta["mixer"]
    plan_phy = mx["policy"]["phy"]
    phy = phy or plan_phy
    maxima = mixer_maxima(plan)
    out, seen = [], {}
    for sg, ex in enumerate(mx["exchanges"]):
        for r in ex:
            key = (int(r["generation"]), int(r["payload"]), int(r["slot_us"]))
            if key not in seen:
                owners = [-1] * key[0]
                owners[0] = INITIATOR
                for f in r["senders"]:
                    for row in range(f["first_row"], f["first_row"] + f["rows"]):
                        owners[row] = f["node"]
                for w in r.get("weak_rows", []):
                    owners[w] = -1
                seen[key] = packet_budget(key[0], key[1], phy, plan.devices, rounds,
                                          node=1 if plan.devices > 1 else 0, owners=owners, maxima=maxima,
                                          slot_us=key[2] if phy == plan_phy else None,
                                          margin_us=int(mx["policy"].get("margin_us", RoundPolicy().margin_us)))
            out.append({"exchange": sg, "part": r["part"], "budget": seen[key]})
    return out


__all__ = ["Budget", "PHYS", "required_cycles", "required_slot_cycles", "required_us", "GRID_G", "GRID_NODES", "GRID_P", "GRID_ROUNDS", "RoundTrace", "SlotWork", "build_image",
           "evaluate", "grid_payloads", "grid_points", "measure_point", "measure_rounds", "needed_slot_us",
           "packet_budget", "plan_budgets", "run_round", "rx_half_us", "work_bounds"]

