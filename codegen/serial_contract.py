"""The serial log contract: ``CISL <node> <event> key=value ...`` one event per line.

Real boards and virtual-testbed nodes print the same lines (firmware/runtime/cisl_log.c);
this module parses them, tolerating garbage, partial lines and other text around them.
See docs/serial-contract.md for the events and their keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

LINE_RE = re.compile(r"CISL (?P<node>\d{1,3}) (?P<event>[a-z_]+)(?P<kv>(?: [a-z_]+=[0-9A-Za-z_.\-]+)*)\s*$")
KV_RE = re.compile(r" ([a-z_]+)=([0-9A-Za-z_.\-]+)")

EVENTS = {
    "boot": ("fw", "plan", "board", "node", "nodes"),
    "block": ("inf", "layer", "block", "us", "comm_us"),
    "sg": ("inf", "layer", "point", "us", "tx", "rx", "delivered", "expected"),
    "infer": ("inf", "us", "crc"),
    "output": ("inf", "crc", "n", "off", "q"),
    "error": ("inf", "where", "code"),
    "peer": ("inf", "peer", "state", "rounds", "role"),
    "mode": ("inf", "state", "mode"),
    "host": ("inf", "cmd", "state"),
    "end": ("inferences",),
    "resync": ("inf", "skipped", "peer"),
}
"""Required keys of every event (lines may carry more keys, e.g. ``cycles``; boot's optional keys are
``clock``, ``cmsis_nn``, ``image`` and ``reset``, docs/serial-contract.md)."""

INT_KEYS = {"node", "nodes", "inf", "layer", "us", "comm_us", "cycles", "tx", "rx", "delivered", "expected",
            "ignored", "n", "off", "code", "inferences", "tx_on_us", "rx_on_us", "peer", "rounds", "mode",
            "peer_mode", "skipped"}
MODE_STATES = ("request", "switch", "unheard", "mixed")  # the `mode` event's states (cisl_modes.c)
HOST_STATES = ("ok", "refused", "unknown", "toolong", "damaged")  # the `host` event's states (cisl_host.c)


@dataclass
class Record:
    node: int
    event: str
    fields: dict[str, object] = field(default_factory=dict)
    host_time: float | None = None  # seconds, when the host read the line

    def to_json(self) -> dict:
        # the line's own node and event: a key of the same name (boot's node=) never replaces them
        d = {"node": self.node, "event": self.event,
             **{k: v for k, v in self.fields.items() if k not in ("node", "event")}}
        if self.host_time is not None:
            d["host_time"] = self.host_time
        return d


def parse_line(line: str, host_time: float | None = None) -> Record | None:
    """Parse one line; None if it holds no valid event. Garbage before ``CISL`` is skipped."""
    start = line.rfind("CISL ")
    if start < 0:
        return None
    m = LINE_RE.match(line, start)
    if not m:
        return None
    event = m.group("event")
    fields: dict[str, object] = {}
    for key, value in KV_RE.findall(m.group("kv")):
        if key in INT_KEYS:
            try:
                fields[key] = int(value)
            except ValueError:
                return None
        else:
            fields[key] = value
    required = EVENTS.get(event)
    if required is not None and any(k not in fields for k in required):
        return None
    return Record(int(m.group("node")), event, fields, host_time)


def parse_text(text: str) -> list[Record]:
    return [r for r in (parse_line(ln) for ln in text.splitlines()) if r is not None]


def outputs_by_inference(records: list[Record]) -> dict[int, bytes]:
    """Reassemble the sink's ``output`` lines into the int8 forecast bytes of each inference."""
    chunks: dict[int, dict[int, bytes]] = {}
    sizes: dict[int, int] = {}
    for r in records:
        if r.event != "output":
            continue
        inf = int(r.fields["inf"])
        chunks.setdefault(inf, {})[int(r.fields["off"])] = bytes.fromhex(str(r.fields["q"]))
        sizes[inf] = int(r.fields["n"])
    out = {}
    for inf, parts in chunks.items():
        data = b"".join(parts[o] for o in sorted(parts))
        if len(data) == sizes[inf]:
            out[inf] = data
    return out


def peer_summary(records: list[Record], dead_radios: Iterable[int] = ()) -> list[str]:
    """One line per node that other nodes declared dead (or alive again): who, when, by how many.
    A dead sink means the network's forecasts stop reaching the host (docs/design/dead-nodes.md).

    ``dead_radios``: nodes whose radio is known to be dead (`cisl sim --radio-dead`). Their lines say
    they heard no one: with two nodes the logs alone are symmetric (each declares the other dead) and
    cannot tell which radio failed, so without this both would be reported dead."""
    dead_radios = set(dead_radios)
    views: dict[tuple[int, str], dict[int, tuple[int, str]]] = {}
    for r in records:
        if r.event == "peer":
            views.setdefault((int(r.fields["peer"]), str(r.fields["state"])), {})[r.node] = (
                int(r.fields["inf"]), str(r.fields["role"]))
    nodes = {r.node for r in records}
    # a node that declared every other node dead hears no one: its radio (or place) is the fault, and
    # its declarations say nothing about the others
    declared: dict[int, set[int]] = {}
    for (peer, state), by in views.items():
        for k in by if state == "dead" else ():
            declared.setdefault(k, set()).add(peer)
    deaf = {k for k, peers in declared.items() if (len(nodes) > 2 or k in dead_radios) and peers >= nodes - {k}}
    out = []
    for (peer, state), by in sorted(views.items()):
        first = min(inf for inf, _ in by.values())
        role = next(iter(by.values()))[1]
        if state == "dead" and set(by) <= deaf:
            continue  # said once below, per deaf node
        what = {"sink": "the sink ", "initiator": "the initiator "}.get(role, "")
        others = len(nodes - {peer})
        who = "" if len(by) == others else f", node{'s' if len(by) > 1 else ''} {', '.join(map(str, sorted(by)))}"
        line = f"{what}node {peer} declared {state} by {len(by)} of {others} other nodes{who} (from inference {first})"
        if state == "dead" and role == "sink":
            line += ": the other nodes go on, but no forecast reaches the host from them"
        elif state == "dead" and role == "initiator":
            line += ": the next live node starts the Mixer rounds"
        out.append(line)
    for k in sorted(deaf):
        first = min(inf for (peer, state), by in views.items() if state == "dead" for n, (inf, _) in by.items()
                    if n == k)
        why = (f"its radio is the dead one (--radio-dead {k})" if k in dead_radios else
               "it hears no one, so its own radio or place is the fault")
        out.append(f"node {k} declared every other node dead (from inference {first}): {why}")
    return out


U32_MAX = 2**32 - 1
NON_NEGATIVE = ("inf", "us", "comm_us", "cycles", "tx", "rx", "delivered", "expected", "ignored", "n", "off",
                "inferences", "nodes", "node", "tx_on_us", "rx_on_us", "peer", "rounds", "mode", "peer_mode", "skipped")


# The boot line's optional `reset` (nRF boards: POWER.RESETREAS in hex), named when a node boots again mid-run.
RESET_BITS = {
    0: "the reset pin",
    1: "the watchdog: the node hung or faulted for board.toml [watchdog] timeout_ms",
    2: "a software or debugger reset",
    3: "a CPU lock-up, e.g. a stack overflow or a fault inside the fault handler",
    16: "a wake-up from System OFF",
    17: "a wake-up by LPCOMP",
    18: "the debug interface",
    19: "a wake-up by the NFC field",
    20: "a wake-up by VBUS",
}
HOST_RESETS = (1 << 0) | (1 << 2) | (1 << 18)   # what a debugger's or the testbed's own reset leaves


def reset_cause(value: str) -> tuple[int, str] | None:
    """A boot line's ``reset`` (hex) as (bits, what they mean), or None when it is not one this cisl reads."""
    try:
        bits = int(value, 16)
    except ValueError:
        return None
    if bits == 0:
        return 0, "power-on or brown-out: check the node's supply"
    if bits & ~sum(1 << k for k in RESET_BITS):
        return None
    return bits, "; ".join(RESET_BITS[k] for k in sorted(RESET_BITS) if bits >> k & 1)


class SequenceChecker:
    """The contract's sequence rules for one node's lines within one run (docs/serial-contract.md):
    one `boot`; inferences numbered 0, 1, 2, ... in order, each `infer` once, except that a
    `resync inf=I skipped=K` line (a node left behind rejoining the network) moves on to inference I,
    K after the one in progress; `block`, `sg` and
    `output` lines belong to the inference in progress, each offset once, all with the crc of the `infer`
    line that ends the inference; `end inferences=N` counts the `infer` lines and is the node's last
    contract line; a `peer` line names another node of the run (below the boot line's `nodes`), and the
    boot line's `node` is the line's node;
    counts and times are non-negative 32-bit values, `delivered` ≤ `expected`. A capture that starts
    mid-run (no boot line) takes the first inference it sees as the start; its `end inferences=N`
    also counts the inferences computed before that one, so N lies between the `infer` lines seen
    and those plus the first inference's number (equal to them when the first inference seen is 0).

    ``check`` returns the first violation as text (None while the node keeps to the rules)."""

    def __init__(self) -> None:
        self.boots = 0
        self.next_inf: int | None = None
        self.first_inf: int | None = None  # the first inference of a capture that started mid-run
        self.infers = 0
        self.nodes: int | None = None  # the boot line's node count
        self.ended = False
        self.out_offs: set[int] = set()  # `output` lines of the inference in progress: their offsets
        self.out_crc: str | None = None  # ... and the crc they name

    def check(self, rec: Record) -> str | None:
        f = rec.fields
        if self.ended and rec.event in EVENTS:
            return f"{rec.event} line after its end line (the end line is a node's last)"
        for k in NON_NEGATIVE:
            v = f.get(k)
            if isinstance(v, int) and not 0 <= v <= U32_MAX:
                return f"{rec.event} {k}={v} is out of range"
        if rec.event in ("peer", "resync") and isinstance(f.get("peer"), int):
            peer = int(f["peer"])
            if rec.event == "peer" and peer == rec.node:
                return f"peer line names the node itself (peer={peer})"
            if self.nodes is not None and peer >= self.nodes:
                return f"{rec.event} line's peer={peer} is no node of the run (nodes={self.nodes}: 0 to {self.nodes - 1})"
        if rec.event == "block" and not -1 <= int(f["layer"]) <= 1024:
            return f"block layer={f['layer']} is out of range"
        if rec.event == "sg" and int(f["delivered"]) > int(f["expected"]):
            return f"sg delivered={f['delivered']} exceeds expected={f['expected']}"
        if rec.event == "boot":
            self.boots += 1
            if self.boots > 1:
                reset = str(f.get("reset", ""))
                cause = reset_cause(reset)
                # a cause no host reset gives (cisl resets by debugger or pin) is a reset mid-run for certain
                if cause and not cause[0] & HOST_RESETS:
                    return f"it booted again mid-run: reset={reset} ({cause[1]})"
                return ("it booted again (a second boot line: the node reset mid-run, or, right after a reset, its "
                        "port delivered buffered lines of its previous run, boot line first, before the new run's)"
                        + (f"; its boot line says reset={reset} ({cause[1]})" if cause else ""))
            if self.next_inf is not None:
                return (f"it booted after lines of inference {self.next_inf - 1 if self.infers else self.next_inf} "
                        "(a reset mid-run, or lines of a run before it recorded as this one)")
            if isinstance(f.get("node"), int) and f["node"] != rec.node:
                return f"boot node={f['node']} on a line of node {rec.node}"
            if isinstance(f.get("nodes"), int):
                self.nodes = int(f["nodes"])  # (a node outside it: the nodes' boot lines disagree, said across nodes)
            self.next_inf, self.infers = 0, 0
            return None
        inf = f.get("inf")
        if rec.event == "peer" and f["state"] not in ("dead", "alive"):
            return f"peer state={f['state']} is neither dead nor alive"
        if rec.event == "mode" and f["state"] not in MODE_STATES:
            return f"mode state={f['state']} is none of {', '.join(MODE_STATES)}"
        if rec.event == "mode" and f["state"] == "mixed" and not isinstance(f.get("peer_mode"), int):
            return "mode state=mixed without peer_mode"
        if rec.event == "host" and f["state"] not in HOST_STATES:
            return f"host state={f['state']} is none of {', '.join(HOST_STATES)}"
        if rec.event == "resync" and isinstance(inf, int) and self.next_inf is not None:
            if int(f["skipped"]) < 1 or inf != self.next_inf + int(f["skipped"]):
                return (f"resync to inference {inf} skipping {f['skipped']} does not follow inference "
                        f"{self.next_inf} in progress")
            self.next_inf = inf
            return None
        if rec.event in ("block", "sg", "output", "infer", "peer", "mode", "host") and isinstance(inf, int):
            if self.next_inf is None:
                self.next_inf = self.first_inf = inf  # the capture started mid-run
            if inf != self.next_inf:
                what = "repeated" if inf < self.next_inf else "skipped to"
                return f"{rec.event} line of inference {inf} {what} (inference {self.next_inf} was in progress)"
            if rec.event == "output":
                off, crc = int(f["off"]), str(f["crc"]).lower()
                if off in self.out_offs:
                    return f"output line of inference {inf} repeats off={off}"
                if self.out_crc is not None and crc != self.out_crc:
                    return f"output lines of inference {inf} name two crcs ({self.out_crc}, {crc})"
                self.out_offs.add(off)
                self.out_crc = crc
            if rec.event == "infer":
                if self.out_crc is not None and str(f["crc"]).lower() != self.out_crc:
                    return (f"infer crc={f['crc']} of inference {inf} is not its output lines' crc={self.out_crc} "
                            "(the sink's result is its forecast)")
                self.out_offs, self.out_crc = set(), None
                self.next_inf += 1
                self.infers += 1
        if rec.event == "end":
            self.ended = True
            n = int(f["inferences"])
            # without the boot line, the inferences before the first one seen were computed unseen: at
            # most as many as that inference's number
            unseen = 0 if self.boots else (self.first_inf if self.first_inf is not None else n)
            if not self.infers <= n <= self.infers + unseen:
                more = (f" from inference {self.first_inf} on (at most {self.infers + unseen} inferences ran)"
                        if not self.boots and self.first_inf and n > self.infers else "")
                return f"end inferences={n} but it reported {self.infers} inferences{more}"
        return None


# --- complete inferences -------------------------------------------------------------------------------
# A node prints the same lines in every inference it computes: one `block` line per block of its schedule,
# one `sg` line per exchange (somegather, partial sums sent or reduced), and on the sink the `output` lines
# of the forecast, then `infer`. An inference is complete when the capture saw it start (its first line
# follows the node's `boot`, the previous inference's `infer` or a `resync` to it), saw every one of those
# lines and its `infer` line, and the capture noticed nothing lost inside it (a line that did not parse,
# the port dropped and reopened). Host tools leave the others out of every mean (docs/serial-contract.md,
# "Complete inferences").

LOOKS_LIKE_CONTRACT = re.compile(r"CISL \d{1,3} [a-z_]")  # a contract line's start (garbled lines: see above)

PARTIAL = "partial"  # the capture started inside it (no boot, infer or resync line before its first line)
MIXED = "mixed modes"  # the nodes computed it in different elastic modes (mixed_mode_inferences)
UNFINISHED = "unfinished"  # no infer line: the capture (or the node) stopped inside it
DAMAGED = "damaged"  # lines of it were lost or garbled


def line_key(event: str, fields: dict) -> tuple | None:
    """What a line of an inference is, for its completeness: ("block", layer, block), ("sg", layer,
    point), ("output", off); None for the lines whose number varies (peer, mode, host, op, ...)."""
    try:
        if event == "block":
            return ("block", int(fields["layer"]), str(fields["block"]))
        if event == "sg":
            return ("sg", int(fields["layer"]), str(fields["point"]))
        if event == "output":
            return ("output", int(fields["off"]))
    except (KeyError, TypeError, ValueError):
        return None
    return None


def plan_lines(plan: dict, node: int) -> frozenset | None:
    """The `block` and `sg` lines plan node ``node`` prints per inference, from plan.json (its ops'
    `block_begin` and its exchanges: `somegather`, `send`, `reduce_recv`, each one `sg` line); None when
    the plan does not say (no such node, an elastic plan whose modes differ, an unreadable plan)."""
    try:
        if plan.get("elastic"):
            return None
        sgs = {int(s["sg"]): s for s in plan["somegather"]}
        ops = next(n["ops"] for n in plan["nodes"] if int(n["device"]) == node)
        keys = set()
        for op in ops:
            if op.get("op") == "block_begin":
                keys.add(("block", int(op["layer"]), str(op["block"])))
            elif "sg" in op and op.get("op") in ("somegather", "send", "reduce_recv"):
                s = sgs[int(op["sg"])]
                keys.add(("sg", int(s["layer"]), str(s["point"])))
        return frozenset(keys)
    except (KeyError, TypeError, ValueError, AttributeError, StopIteration):
        return None


def _what(key: tuple) -> str:
    if key[0] == "block":
        return f"block {key[2]}" + (f" layer {key[1]}" if key[1] >= 0 else "")
    if key[0] == "sg":
        return f"sg {key[2]}" + (f" layer {key[1]}" if key[1] >= 0 else "")
    return f"output off={key[1]}"


def incomplete_inferences(records: Iterable, expected: frozenset | None = None,
                          marks: dict[int, str] | None = None) -> dict[int, str]:
    """One node's inferences that are not complete (see above), in the node's order of lines: inference
    -> why, the why starting with PARTIAL, UNFINISHED or DAMAGED. ``records``: :class:`Record` objects or
    the dicts `cisl logs` writes. ``expected``: the `block`/`sg` lines of the node's plan
    (:func:`plan_lines`), None if unknown; either way the lines every inference must hold are also
    learnt from the node's own inferences (the set most of them hold, per elastic mode; on a tie the
    larger): a plan whose lines none of the node's inferences holds is not what its firmware prints,
    and only the node's own inferences count. ``marks``: what the capture noticed (inference -> why)."""
    seen: dict[int, set] = {}
    order: list[int] = []
    started: dict[int, bool] = {}
    finished: set[int] = set()
    out_bytes: dict[int, list[int]] = {}  # inference -> [bytes of its output lines, n they name]
    mode_of: dict[int, int] = {}
    boundary, mode, switches = False, 0, {}
    for r in records:
        event = r.event if isinstance(r, Record) else r.get("event")
        f = r.fields if isinstance(r, Record) else r
        if event == "boot":
            boundary = True
            continue
        if event == "mode" and f.get("state") == "switch":
            switches[int(f["inf"])] = int(f["mode"])
        if event not in ("block", "sg", "output", "infer", "peer", "mode", "host", "resync", "op"):
            continue
        try:
            inf = int(f["inf"])
        except (KeyError, TypeError, ValueError):
            continue
        if event == "resync":
            boundary = True
            continue
        if inf not in started:
            started[inf] = boundary
            order.append(inf)
            seen[inf] = set()
            boundary = False
        key = line_key(event, f)
        if key is not None:
            seen[inf].add(key)
        if event == "output":
            acc = out_bytes.setdefault(inf, [0, 0])
            acc[0] += len(str(f.get("q", ""))) // 2
            acc[1] = int(f.get("n", 0) or 0)
        if event == "infer":
            finished.add(inf)
            boundary = True
    for inf in order:  # the mode each inference ran in (mode 0 until the first switch)
        mode = switches.get(inf, mode)
        mode_of[inf] = mode
    whole = [i for i in order if started[i] and i in finished and not (marks or {}).get(i)]
    want: dict[int, frozenset] = {}
    for m in set(mode_of.values()):
        sets = [frozenset(seen[i]) for i in whole if mode_of[i] == m]
        if not sets:
            continue
        counts: dict[frozenset, int] = {}
        for s in sets:
            counts[s] = counts.get(s, 0) + 1
        own = max(counts, key=lambda s: (counts[s], len(s)))
        plan_ok = expected is not None and m == 0 and not switches and any(s >= expected for s in sets)
        want[m] = own | expected if plan_ok else own
    bad: dict[int, str] = {}
    for inf in order:
        why = (marks or {}).get(inf)
        if why:
            bad[inf] = f"{DAMAGED}: {why}"
            continue
        if not started[inf]:
            bad[inf] = f"{PARTIAL}: the capture started inside it (no boot or infer line before its first line)"
            continue
        if inf not in finished:
            bad[inf] = f"{UNFINISHED}: no infer line (the capture or the node stopped inside it)"
            continue
        lost = sorted(want.get(mode_of[inf], frozenset()) - seen[inf], key=str)
        got, n = out_bytes.get(inf, (0, 0))
        if lost:
            bad[inf] = f"{DAMAGED}: lines lost ({', '.join(_what(k) for k in lost)})"
        elif got != n:
            bad[inf] = f"{DAMAGED}: output lines lost ({got} of the forecast's {n} values)"
    for inf, why in (marks or {}).items():  # a mark on an inference of which no line came
        bad.setdefault(inf, f"{DAMAGED}: {why}")
    return bad


# --- mixed-mode inferences -----------------------------------------------------------------------------
# Every node of an elastic image starts in mode 0 and runs a new mode from the inference its
# `mode state=switch` line names, which the control round announces to every node at once
# (docs/design/elastic.md, "Switching network-wide"). A node that decoded no control header runs its mode
# unconfirmed (`state=unheard`); its peers see it in the next control round (`state=mixed`, about the
# inference before). One rule for the virtual testbed's supervisor, `cisl logs` and `cisl report`: an
# inference the nodes computed in different modes is never a good one.


def _rec(r) -> tuple[int | None, str | None, dict]:
    if isinstance(r, Record):
        return r.node, r.event, r.fields
    node = r.get("node")
    return (node if isinstance(node, int) else None), r.get("event"), r


def node_modes(records: Iterable, nodes: Iterable[int] | None = None,
               inferences: int | None = None) -> dict[int, dict[int, int]]:
    """node -> inference -> the mode the node ran it in, from its `switch` lines (mode 0 until the first).
    ``inferences``: every node ran inferences 0 .. inferences-1 (the virtual testbed's supervisor, which
    knows); otherwise the inferences a node printed a line of, and only from its `boot` line on (a capture
    that started mid-run, `cisl logs --no-reset`, does not know a node's mode before its first switch).
    ``nodes``: the nodes of the run (default: those with records)."""
    switches: dict[int, dict[int, int]] = {}
    seen: dict[int, set[int]] = {}
    booted: set[int] = set()
    for r in records:
        node, event, f = _rec(r)
        if node is None:
            continue
        seen.setdefault(node, set())
        if event == "boot":
            booted.add(node)
            continue
        try:
            inf = int(f["inf"])
        except (KeyError, TypeError, ValueError):
            continue
        if event == "mode" and f.get("state") == "switch":
            try:
                switches.setdefault(node, {})[inf] = int(f["mode"])
            except (KeyError, TypeError, ValueError):
                continue
        if event in ("block", "sg", "output", "infer", "peer", "mode", "host", "op"):
            seen[node].add(inf)
    out: dict[int, dict[int, int]] = {}
    for k in (list(nodes) if nodes is not None else sorted(seen)):
        infs = range(inferences) if inferences is not None else sorted(seen.get(k, ()))
        known = inferences is not None or k in booted
        mine, mode = {}, 0
        for i in infs:
            if i in switches.get(k, {}):
                mode, known = switches[k][i], True
            if known:
                mine[i] = mode
        out[k] = mine
    return out


def mixed_mode_inferences(records: Iterable, nodes: Iterable[int] | None = None,
                          inferences: int | None = None) -> dict[int, str]:
    """The inferences the network computed in more than one elastic mode: inference -> why, the why
    starting with MIXED. From every node's `mode` lines (``records``: :class:`Record` objects or the dicts
    `cisl logs` writes, of all nodes; ``nodes``, ``inferences``: as :func:`node_modes`):

    * the nodes' `switch` lines disagree: in that inference nodes ran different modes;
    * a node's `mode state=mixed` line in inference I: a peer ran another mode in inference I - 1;
    * a node's `mode state=unheard` line when no other node's mode in that inference is known (only that
      node recorded): its mode there is unconfirmed, so not reported as good either.
    """
    records = list(records)
    modes = node_modes(records, nodes, inferences)
    why: dict[int, list[str]] = {}
    for i in sorted({i for m in modes.values() for i in m}):
        ran = {k: m[i] for k, m in sorted(modes.items()) if i in m}
        if len(set(ran.values())) > 1:
            why.setdefault(i, []).append(", ".join(f"node {k} mode {m}" for k, m in ran.items()))
    for r in records:
        node, event, f = _rec(r)
        if event != "mode" or node is None:
            continue
        try:
            inf, state = int(f["inf"]), f.get("state")
            if state == "mixed" and inf > 0:
                why.setdefault(inf - 1, []).append(
                    f"node {node} reports that node {f.get('peer')} ran mode {f.get('peer_mode')} in it while it "
                    f"ran {f.get('mode')}")
            elif state == "unheard" and not any(inf in m for k, m in modes.items() if k != node):
                why.setdefault(inf, []).append(
                    f"node {node} heard no control round and ran mode {f.get('mode')} unconfirmed (no other "
                    "node's lines of it to compare)")
        except (KeyError, TypeError, ValueError):
            continue
    return {i: f"{MIXED}: " + "; ".join(ws) for i, ws in sorted(why.items())}
