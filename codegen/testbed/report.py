"""`cisl report LOGS... -o report/`: latency, speedup, memory, delivery and forecast tables and figures.

Input: folders written by `cisl logs` (merged.jsonl, or node_NN.jsonl) or by `cisl sim`
(records.jsonl). Several folders are compared by node count (e.g. runs of 1, 4 and 16 nodes).
The CSV columns are documented in docs/usage.md (`cisl report`).
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import UserError
from ..fsutil import atomic_output_dir

BLOCKS = ("embed", "attn", "mlp", "head")
BLOCK_COLORS = {"embed": "#8c564b", "attn": "#1f77b4", "mlp": "#2ca02c", "head": "#9467bd"}


@dataclass
class Run:
    label: str
    path: Path
    records: list[dict]
    nodes: int = 0
    sink: int = 0
    failed: dict[str, str] | None = None  # `cisl logs` failed the run (summary.json): node -> why; None: it did not
    failed_by: str = "cisl logs"  # the command whose summary.json says the run failed
    failed_problems: list[str] = field(default_factory=list)  # `cisl sim`: its problems, the cause first
    # node -> inference -> why it is not complete (serial_contract.incomplete_inferences, and what `cisl logs`
    # saw: summary.json's `incomplete`); their lines are left out of ``records``, so of every table
    incomplete: dict[int, dict[int, str]] = field(default_factory=dict)
    all_records: list[dict] = field(default_factory=list)  # every record, the incomplete inferences' too
    mode: int | None = None  # the elastic mode of a run's inferences in that mode (split_by_mode); None: all
    whole: Run | None = None  # of such a part: the run it is part of

    def of(self, event: str, node: int | None = None) -> list[dict]:
        return [r for r in self.records if r.get("event") == event and (node is None or r.get("node") == node)]

    @property
    def node_ids(self) -> list[int]:
        return sorted({int(r["node"]) for r in self.records})


@dataclass
class ReportResult:
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latency: list[dict] = field(default_factory=list)
    speedup: list[dict] = field(default_factory=list)
    block_latency: list[dict] = field(default_factory=list)
    energy: list[dict] = field(default_factory=list)
    calibration: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # per run: the incomplete inferences the tables leave out


def _lines(fh, f: Path):
    try:
        yield from fh
    except UnicodeDecodeError:
        raise UserError(f"{f}: not UTF-8 text; was the file cut or edited?") from None


def load_run(path: Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: not a folder; give the output folder of `cisl logs` (or of `cisl sim --logs`)")
    files = [path / "merged.jsonl"] if (path / "merged.jsonl").is_file() else sorted(path.glob("node_*.jsonl"))
    if not files and (path / "records.jsonl").is_file():
        files = [path / "records.jsonl"]
    if not files:
        raise UserError(f"{path}: no merged.jsonl, node_NN.jsonl or records.jsonl; record a run with "
                        f"`cisl logs --testbed FILE -o {path}`")
    records = []
    where: dict[int, str] = {}  # id(record) -> "file:line", for the refusals
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(_lines(fh, f), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    raise UserError(f"{f}:{i}: not a JSON line; was the file cut or edited?") from None
                if isinstance(rec, dict) and "event" in rec and "node" in rec:
                    if not isinstance(rec["node"], int) or isinstance(rec["node"], bool):
                        raise UserError(f"{f}:{i}: node {rec['node']!r} is not a node id; was the file edited?")
                    _check_record(rec, f"{f}:{i}")
                    records.append(rec)
                    where[id(rec)] = f"{f}:{i}"
    if not records:
        raise UserError(f"{path}: the logs hold no records (did the nodes print anything?)")
    runs = {str(r.get("run", "")) for r in records}
    if len(runs) > 1:
        named = sorted(x for x in runs if x)
        raise UserError(f"{path}: the records come from {len(runs)} different runs"
                        f"{' (' + ', '.join(named) + ')' if named else ''}; record one run per folder "
                        f"(`cisl logs -o NEW_FOLDER`)")
    untimed = next((r for r in records if r.get("host_time") is None), None)
    if untimed is not None and any(r.get("host_time") is not None for r in records):
        raise UserError(f"{where[id(untimed)]}: a record without `host_time` (`{untimed['event']}`) among records with "
                        f"it, so its place in the run is unknown; was the file edited? (record the run again)")
    records.sort(key=lambda r: r.get("host_time") or 0.0)
    _check_sequences(path, records, where)
    _check_one_build(path, records)
    _check_nodes_of_the_run(records, where)
    run = Run(path.name or str(path), path, records, failed=_failed_nodes(path))
    if run.failed == {} and _summary_of_sim(path):  # `cisl sim` names no failed node: its problems say why
        run.failed_by, run.failed_problems = "cisl sim", _sim_failure(path)
    boots = [int(r["nodes"]) for r in run.of("boot") if "nodes" in r]
    run.nodes = max(boots) if boots else len(run.node_ids)
    outs = {int(r["node"]) for r in run.of("output")}
    run.sink = min(outs) if outs else 0
    _leave_out_incomplete(run)
    return run


INFERENCE_LINES = ("block", "sg", "output", "infer", "op")  # the lines of an inference the tables average


def _leave_out_incomplete(run: Run) -> None:
    """Find each node's incomplete inferences (docs/serial-contract.md, "Complete inferences": from the
    records themselves, so also in logs of an older cisl, and from summary.json's `incomplete`, where
    `cisl logs` also names lines it saw lost: a line that did not parse, the port reopened) and take their
    lines out of ``run.records``, so every table averages complete inferences only. A run with
    inferences but none complete is refused: there is nothing to report."""
    from ..serial_contract import MIXED, incomplete_inferences, mixed_mode_inferences, plan_lines

    plan = None
    build = build_of(run)
    if build is not None:
        try:
            plan = json.loads((Path(build) / "plan.json").read_bytes())
        except (OSError, ValueError):
            plan = None
    said = _said_incomplete(run.path)
    by_node: dict[int, list[dict]] = defaultdict(list)
    for r in run.records:
        by_node[int(r["node"])].append(r)
    for k, recs in by_node.items():
        expected = plan_lines(plan, k) if isinstance(plan, dict) else None
        bad = incomplete_inferences(recs, expected)
        bad.update(said.get(k, {}))  # what `cisl logs` saw (a line that did not parse...) says the cause
        if bad:
            run.incomplete[k] = bad
    # an elastic image's inferences computed in mixed modes (the virtual testbed's rule; logs of a cisl before
    # `cisl logs` checked it too): left out on every node that ran them
    mixed = mixed_mode_inferences(run.records)
    for k, recs in by_node.items():
        ran = {r["inf"] for r in recs if isinstance(r.get("inf"), int)}
        for inf, why in mixed.items():
            if inf in ran and MIXED not in run.incomplete.get(k, {}).get(inf, ""):
                mine = run.incomplete.setdefault(k, {})
                mine[inf] = f"{mine[inf]}; {why}" if inf in mine else why
    run.all_records = run.records
    infs = {(int(r["node"]), int(r["inf"])) for r in run.records if r.get("event") in INFERENCE_LINES}
    if not run.incomplete:
        return
    run.records = [r for r in run.records if not (r.get("event") in INFERENCE_LINES
                                                  and int(r["inf"]) in run.incomplete.get(int(r["node"]), {}))]
    if infs and not any(r.get("event") == "infer" for r in run.records):
        k, bad = next(iter(sorted(run.incomplete.items())))
        inf, why = min(bad.items())
        raise UserError(f"{run.path}: no inference of the run is complete (first: node {k}'s inference {inf}, {why}), "
                        f"so there is nothing to report; record the run again")


def split_by_mode(run: Run) -> list[Run]:
    """A run whose complete inferences ran in more than one elastic mode (its nodes' `mode state=switch`
    lines), as one part per mode, labelled "LABEL mode M": every table then has rows per mode, never a
    mean over modes (the latency of mode 0 and mode 2 averaged is no mode's). Each part keeps the run's
    lines outside the inferences (boot, peer, mode, end). A run of one mode is returned as it is."""
    from ..serial_contract import node_modes

    if not any(r.get("event") == "mode" and r.get("state") == "switch" for r in run.all_records or run.records):
        return [run]  # one mode throughout (an image without modes; a node without a boot line is no other mode)
    modes = node_modes(run.all_records or run.records)

    def mode_of(r: dict) -> int | None:
        return modes.get(int(r["node"]), {}).get(int(r["inf"])) if isinstance(r.get("inf"), int) else None

    ran = {mode_of(r) for r in run.records if r.get("event") == "infer"}
    if len(ran) < 2:
        return [run]
    parts = []
    for m in sorted(ran, key=lambda x: (x is None, x or 0)):
        keep = [r for r in run.records if r.get("event") not in INFERENCE_LINES or mode_of(r) == m]
        label = f"{run.label} mode {m}" if m is not None else f"{run.label} mode unknown"
        parts.append(replace(run, label=label, records=keep, mode=m, whole=run))
    return parts


def mode_split_note(parts: list[Run]) -> str:
    """What notes.txt says of a run split per mode: its modes, their inferences, the parts' labels."""
    whole = parts[0].whole
    each = "; ".join(f"{'mode ' + str(p.mode) if p.mode is not None else 'a mode not known (no boot line)'}: "
                     f"inference{'s' if len(infs) > 1 else ''} {_ranges(infs)}"
                     for p in parts for infs in [sorted({int(r['inf']) for r in p.of('infer')})])
    return (f"{whole.label}: its complete inferences ran in {len(parts)} elastic modes ({each}): every table has "
            f"its rows per mode, as runs {', '.join(repr(p.label) for p in parts)}, never a mean over modes")


def _ranges(xs: list[int]) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        start = x if start is None else start
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(str(x) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def _said_incomplete(path: Path) -> dict[int, dict[int, str]]:
    """summary.json's `incomplete` per node (`cisl logs`), keyed by the node id the lines carry (a planned
    split's plan node); {} for logs of an older cisl, or of `cisl sim`."""
    summary = _summary(path)
    try:
        prints = {str(t): int(k) for t, k in ((summary.get("flashed") or {}).get("plan_nodes") or {}).items()}
        out: dict[int, dict[int, str]] = {}
        for t, node in (summary.get("nodes") or {}).items():
            for inf, why in ((node or {}).get("incomplete") or {}).items():
                out.setdefault(prints.get(str(t), int(t)), {})[int(inf)] = str(why)
        return out
    except (AttributeError, TypeError, ValueError):  # a hand-edited summary
        return {}


def incomplete_notes(run: Run) -> list[str]:
    """What the tables leave out because inferences are incomplete: how many, on which nodes and why; the
    rounds left out of delivery.csv; the forecasts left out of forecasts.csv."""
    if not run.incomplete:
        return []
    count = sum(len(b) for b in run.incomplete.values())
    each = "; ".join(f"node {k}: " + ", ".join(f"inference {inf} ({why})" for inf, why in sorted(b.items()))
                     for k, b in sorted(run.incomplete.items()))
    notes = [f"{count} incomplete inference{'s' if count > 1 else ''} left out of every table (latency, blocks, "
             f"energy, rounds, forecasts): {each}"]
    infs = sorted({inf for b in run.incomplete.values() for inf in b})
    notes.append(f"delivery.csv leaves out the rounds of inference{'s' if len(infs) > 1 else ''} "
                 f"{', '.join(map(str, infs))}: a node's lines of {'them' if len(infs) > 1 else 'it'} are incomplete")
    sunk = sorted(run.incomplete.get(run.sink, {}))
    if sunk:
        notes.append(f"forecasts.csv leaves out the sink's (node {run.sink}) forecast{'s' if len(sunk) > 1 else ''} "
                     f"of inference{'s' if len(sunk) > 1 else ''} {', '.join(map(str, sunk))}")
    return notes


def left_out_summary(run: Run) -> str | None:
    """One line for the terminal: how many incomplete inferences the tables leave out, of which nodes."""
    if not run.incomplete:
        return None
    count = sum(len(b) for b in run.incomplete.values())
    nodes = sorted(run.incomplete)
    return (f"{run.label}: {count} incomplete inference{'s' if count > 1 else ''} left out of the tables "
            f"(node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}; notes.txt says which and why)")


def _run_id(run: Run) -> str:
    """The run id `cisl logs` and `cisl sim --logs` write into every record (and summary.json); "" if none."""
    ids = {str(r.get("run")) for r in run.records if r.get("run")}
    if len(ids) == 1:
        return ids.pop()
    rid = _summary(run.path).get("run_id")
    return rid if isinstance(rid, str) else ""


def _check_record(rec: dict, where: str) -> None:
    """A record of a known event has the contract's keys, with the types `cisl logs` writes (whole
    numbers for counts and times, text otherwise): a hand-edited record is refused in one line
    instead of failing deep in the tables."""
    from ..serial_contract import EVENTS, INT_KEYS

    event = rec["event"]
    if event not in EVENTS:
        return  # board-specific lines: parsers skip what they do not know
    for key in EVENTS[event]:
        if key not in rec:
            raise UserError(f"{where}: a `{event}` record without `{key}`; was the file edited? (record the run again)")
    for key, value in rec.items():
        if key in INT_KEYS:
            ok = isinstance(value, int) and not isinstance(value, bool) and -(1 << 31) <= value < (1 << 32)
        elif key == "host_time":
            ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                   and math.isfinite(value))
        elif key in ("event", "run"):
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
        if not ok:
            raise UserError(f"{where}: `{key}` = {value!r} in a `{event}` record is not what `cisl logs` writes; "
                            f"was the file edited? (record the run again)")


def _check_sequences(path: Path, records: list[dict], where: dict[int, str] | None = None) -> None:
    """Refuse logs in which a node broke the serial contract's sequence rules (a reset mid-run, a
    repeated inference, negative times, a line after its end, an infer crc its output lines do not
    have...): their means would be wrong. The refusal names the file and line of the record."""
    from ..serial_contract import EVENTS, Record, SequenceChecker

    rules: dict[int, SequenceChecker] = {}
    seen: dict[int, int] = {}
    for d in records:
        node = d.get("node")
        event = d.get("event")
        if not isinstance(node, int) or event not in EVENTS:
            continue
        fields = {k: v for k, v in d.items() if k not in ("node", "event", "host_time", "run")}
        seen[node] = seen.get(node, 0) + 1
        broken = rules.setdefault(node, SequenceChecker()).check(Record(node, str(event), fields))
        if broken:
            at = (where or {}).get(id(d)) or f"{path}: node {node}'s record {seen[node]}"
            raise UserError(f"{at}: node {node}'s `{event}` record breaks the serial contract: {broken}; "
                            f"these logs cannot be reported (record the run again)")


def _check_nodes_of_the_run(records: list[dict], where: dict[int, str]) -> None:
    """Refuse a record of a node outside the run (the boot lines' `nodes`): no node of the build printed it."""
    counts = [int(r["nodes"]) for r in records if r.get("event") == "boot" and isinstance(r.get("nodes"), int)]
    if not counts:
        return  # a capture without boot lines (`cisl logs --no-reset`) does not say how many nodes ran
    for r in records:
        if not 0 <= int(r["node"]) < max(counts):
            raise UserError(f"{where[id(r)]}: a record of node {r['node']} (`{r.get('event')}`), but the run has nodes "
                            f"0..{max(counts) - 1} (its boot lines say nodes={max(counts)}); was the file edited? "
                            f"(record the run again)")


def _check_one_build(path: Path, records: list[dict]) -> None:
    """Refuse logs whose boot lines name more than one plan, or node count: the nodes of one build all
    print its plan and node count (one plan.json for every node, a planned split's too), so such logs
    hold runs of different builds (a stale board, or nodes flashed from two builds), never one run."""
    boots = [r for r in records if r.get("event") == "boot"]
    for key, what, said in (("plan", "plans", "plan "), ("nodes", "node counts", "nodes=")):
        by: dict[str, set[int]] = {}
        for b in boots:
            by.setdefault(str(b[key]), set()).add(int(b["node"]))
        if len(by) > 1:
            which = "; ".join(f"{said}{v} on node{'s' if len(ks) > 1 else ''} {', '.join(map(str, sorted(ks)))}"
                              for v, ks in sorted(by.items()))
            raise UserError(f"{path}: the nodes' boot lines name {len(by)} {what} ({which}): the nodes ran "
                            f"different builds, so these logs are no one run's; flash one build on every node "
                            f"(`cisl flash BUILD --testbed FILE`) and record the run again")


def _summary(path: Path) -> dict:
    """The run's summary.json (`cisl logs`' or `cisl sim`'), {} when there is none or it is unreadable."""
    try:
        summary = json.loads((Path(path) / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _failed_nodes(path: Path) -> dict[str, str] | None:
    """The nodes `cisl logs` failed in this run and why, from its summary.json (None if it did not fail,
    or the folder has no summary of `cisl logs`; {} for a failed `cisl sim` run, which names no node)."""
    summary = _summary(path)
    try:
        nodes = summary.get("nodes") or {}
        failed = {str(k): str(v["failed"]) for k, v in nodes.items() if isinstance(v, dict) and v.get("failed")}
        return failed if failed or summary.get("ok") is False else None
    except (AttributeError, TypeError):  # a hand-edited summary
        return None


def _summary_of_sim(path: Path) -> bool:
    """Whether summary.json is `cisl sim`'s (its verdict keys), not `cisl logs`'."""
    summary = _summary(path)
    return "completed" in summary and "stop_reason" not in summary


def _dead_radios(path: Path) -> list[int]:
    """The nodes whose radio `cisl sim --radio-dead` killed in this run (its summary.json); [] otherwise."""
    dead = _summary(path).get("radio_dead") or []
    try:
        return [int(k) for k in dead if isinstance(k, int) and not isinstance(k, bool)]
    except TypeError:  # not a list: a hand-edited summary
        return []


def _sim_failure(path: Path) -> list[str]:
    """What `cisl sim`'s summary.json says went wrong (its problems, the cause first; the inferences that
    ran of those asked for; the first difference from the reference)."""
    summary = _summary(path)
    try:
        why = [str(p) for p in summary.get("problems") or []][:1]  # the cause; the rest follows from it
        asked, done = summary.get("inferences"), summary.get("completed")
        if isinstance(asked, int) and isinstance(done, int) and done < asked:
            why.append(f"{done} of {asked} inferences ran")
        if summary.get("first_difference") and not why:
            why.append(f"not bit-exact with the int8 reference: {summary['first_difference']}")
        return why
    except (AttributeError, TypeError):
        return []


def failed_run_note(run: Run) -> str | None:
    """A clear note for logs of a run `cisl logs` or `cisl sim` failed (they stay reportable, for inspection)."""
    if run.failed is None:
        return None
    why = "; ".join([f"node {k}: {v}" for k, v in sorted(run.failed.items(), key=lambda kv: kv[0].zfill(3))]
                    + run.failed_problems)
    return (f"{run.label}: `{run.failed_by}` FAILED this run (summary.json ok: false"
            + (f"; {why})" if why else ")")
            + ": its tables hold what the nodes printed up to their failure, not a good run's results; record the "
            "run again for those")


def coverage_notes(run: Run) -> list[str]:
    """What the tables leave out because the logs do: a node the boot lines count but that left no
    record (its file lost, or a board that never printed), or whose log ends inferences before the
    others' (cut short). Its deliveries and times are then missing from the tables, which would
    otherwise look complete."""
    notes = []
    missing = sorted(set(range(run.nodes)) - set(run.node_ids))
    if missing:
        notes.append(f"no records of node{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                     f"(the run had {run.nodes} nodes): the tables hold only the nodes that have records")
    done = {k: sum(1 for r in run.all_records or run.records if r.get("event") == "infer" and r.get("node") == k)
            for k in run.node_ids}
    most = max(done.values(), default=0)
    # a run stopped by time (`cisl logs --duration`) catches some nodes mid-inference: one behind is normal
    timed = _summary(run.path).get("duration") is not None
    short = [k for k, n in sorted(done.items()) if n < most - int(timed)]
    for k in short:
        notes.append(f"node {k}'s records end after {done[k]} of {most} inferences (its log was cut short, or the "
                     f"node stopped): its later inferences are missing from the tables")
    return notes + incomplete_notes(run)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def per_node_latency(run: Run) -> tuple[list[dict], list[dict]]:
    """(latency rows per node, block rows per node and block kind); means per inference."""
    lat, blk = [], []
    for k in run.node_ids:
        infer = {int(r["inf"]): int(r["us"]) for r in run.of("infer", k)}
        blocks = [r for r in run.of("block", k) if int(r["inf"]) in infer] if infer else run.of("block", k)
        infs = sorted(infer) or sorted({int(r["inf"]) for r in blocks})
        if not infs:
            continue
        comp = defaultdict(lambda: defaultdict(int))
        comm = defaultdict(lambda: defaultdict(int))
        for r in blocks:
            comp[int(r["inf"])][r["block"]] += int(r["us"])
            comm[int(r["inf"])][r["block"]] += int(r["comm_us"])
        c = _mean([sum(comp[i].values()) for i in infs])
        m = _mean([sum(comm[i].values()) for i in infs])
        t = _mean([infer[i] for i in infs]) if infer else float("nan")
        lat.append({"run": run.label, "nodes": run.nodes, "node": k, "inferences": len(infs),
                    "infer_us": round(t, 1), "compute_us": round(c, 1), "comm_us": round(m, 1),
                    "other_us": round(t - c - m, 1)})
        kinds = [b for b in BLOCKS if any(b in comp[i] for i in infs)] + sorted(
            {b for i in infs for b in comp[i]} - set(BLOCKS))
        for b in kinds:
            blk.append({"run": run.label, "nodes": run.nodes, "node": k, "block": b, "inferences": len(infs),
                        "compute_us": round(_mean([comp[i][b] for i in infs]), 1),
                        "comm_us": round(_mean([comm[i][b] for i in infs]), 1)})
    return lat, blk


def rounds(run: Run) -> tuple[list[dict], list[dict]]:
    """(every sg line, per round summed over nodes)."""
    rows, agg = [], {}
    order: dict[int, list[tuple]] = defaultdict(list)
    partial = {inf for b in run.incomplete.values() for inf in b}  # a round of them lacks a node's line
    for r in run.of("sg"):
        if int(r["inf"]) in partial:
            continue
        rows.append({"run": run.label, "nodes": run.nodes, "node": r["node"], "inference": r["inf"],
                     "layer": r["layer"], "point": r["point"], "us": r["us"], "tx": r["tx"], "rx": r["rx"],
                     "delivered": r["delivered"], "expected": r["expected"]})
        key = (int(r["inf"]), int(r["layer"]), str(r["point"]))
        if key not in agg:
            agg[key] = [0, 0, 0]
            order[key[0]].append(key)
        agg[key][0] += int(r["delivered"])
        agg[key][1] += int(r["expected"])
        agg[key][2] += 1
    out = []
    for inf in sorted(order):
        for rnd, key in enumerate(order[inf]):
            d, e, n = agg[key]
            out.append({"run": run.label, "nodes": run.nodes, "inference": inf, "round": rnd, "layer": key[1],
                        "point": key[2], "reporting_nodes": n, "delivered": d, "expected": e,
                        "ratio": round(d / e, 4) if e else ""})
    return rows, out


def forecasts(run: Run) -> list[dict]:
    parts: dict[int, dict[int, bytes]] = defaultdict(dict)
    meta: dict[int, tuple[int, str]] = {}
    for r in run.of("output", run.sink):
        try:
            parts[int(r["inf"])][int(r["off"])] = bytes.fromhex(str(r["q"]))
        except ValueError:
            continue
        meta[int(r["inf"])] = (int(r["n"]), str(r["crc"]))
    infer_crc = {int(r["inf"]): str(r["crc"]) for r in run.of("infer", run.sink)}
    out = []
    for inf in sorted(set(meta) | set(infer_crc)):
        n, crc = meta.get(inf, (0, ""))
        data = b"".join(parts[inf][o] for o in sorted(parts[inf])) if inf in parts else b""
        complete = len(data) == n and n > 0
        ok = complete and f"{zlib.crc32(data):08x}" == crc.lower()
        out.append({"run": run.label, "nodes": run.nodes, "inference": inf, "sink": run.sink, "n": n, "crc": crc,
                    "crc_ok": "yes" if ok else ("incomplete" if not complete else "no"),
                    "infer_crc": infer_crc.get(inf, ""), "q": data.hex() if complete else ""})
    return out


def memory(build_dir: Path) -> list[dict]:
    build_dir = Path(build_dir)
    try:
        comp = json.loads((build_dir / "compile.json").read_text())
    except (OSError, ValueError):
        raise UserError(f"--build {build_dir}: no readable compile.json; give a folder written by "
                        "`cisl compile`") from None
    sha = comp.get("plan_sha256") if isinstance(comp, dict) else None
    images = _image_footprints(build_dir, str(sha)[:16] if sha else None)
    try:
        return [{"build": build_dir.name or str(build_dir), "board": comp.get("board", ""), "nodes": comp["devices"],
                 "node": n["node"], "param_bytes": n["param_bytes"], "arena_bytes": n["arena_bytes"],
                 "bytes_sent_per_inference": n["bytes_sent_per_inference"],
                 "image_bytes": images.get(n["node"], ("", ""))[0], "image_ram_bytes": images.get(n["node"], ("", ""))[1]}
                for n in comp["nodes"]]
    except (KeyError, TypeError, AttributeError):
        raise UserError(f"--build {build_dir}: compile.json is not cisl's (damaged?); run `cisl compile` again") from None


def _image_footprints(build_dir: Path, plan: str | None) -> dict[int, tuple[int, int]]:
    """node -> (flash, RAM) bytes of its image as linked (build.json `flash`/`ram`, not the ELF file's
    size, which holds symbols and debug information); a sim build's from its ARM images of the same
    plan (build-qemu-m4.json: what the node stands in for). Only of images built from ``plan`` (the
    compiled plan's hash, when known); none where no ARM image was measured."""
    out: dict[int, tuple[int, int]] = {}
    for name in ("build.json", "build-qemu-m4.json"):
        try:
            doc = json.loads((build_dir / name).read_text())
        except (OSError, ValueError):
            if name == "build.json":
                return out  # no good build: its other summaries vouch for nothing
            continue
        if not isinstance(doc, dict) or (plan is not None and doc.get("plan") != plan):
            if name == "build.json":
                return out
            continue
        plan = doc.get("plan")
        try:
            for n in doc["nodes"]:
                if "flash" in n and "ram" in n and int(n["node"]) not in out:
                    out[int(n["node"])] = (int(n["flash"]), int(n["ram"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def _plan_of(build_dir: Path) -> str | None:
    """The first 16 hex digits of a build's plan hash (what boot lines print), None if unreadable."""
    try:
        return str(json.loads((Path(build_dir) / "compile.json").read_text())["plan_sha256"])[:16]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _plan_ran(run: Run, builds: list[Path]):
    """The plan of the build the run's logs came from (a --build of the plan its boot lines name, or
    the one `build_of` finds), None if none is known or it cannot be read."""
    from ..plan.io import load_plan

    ran = {str(b["plan"]) for b in run.of("boot") if b.get("plan")}
    build = next((b for b in builds if _plan_of(b) in ran), None) or build_of(run)
    if build is None:
        return None
    try:
        plan = load_plan(build)
    except (UserError, OSError, ValueError):
        return None
    return plan if plan.sha256[:16] in ran else None


def build_of(run: Run) -> Path | None:
    """The build a run's logs came from, when it can be told for sure: the build their summary.json
    names (`cisl logs`: the flashed build; `cisl sim`: the build it ran), the folder holding the logs or
    its `build` beside them (`cisl demo`'s layout, whose older summary.json named a temporary folder),
    and only if that build's plan is the one the nodes' boot lines name — a build compiled again since
    the run is not it."""
    ran = {str(b["plan"]) for b in run.of("boot") if b.get("plan")}
    candidates = []
    summary = _summary(run.path)
    try:
        build = (summary.get("flashed") or {}).get("build") or summary.get("build")  # cisl logs / cisl sim
        if build:
            candidates.append(Path(build))
    except (AttributeError, TypeError):
        pass
    candidates += [run.path.parent, run.path.parent / "build"]
    for c in candidates:
        plan = _plan_of(c)
        if plan is not None and plan in ran:
            return c
    return None


def _model_of(run: Run, builds: list[Path]) -> dict | None:
    """The model the run's build was compiled from: {"sha": plan.json source.model_sha256, "dims": its
    `model` dimensions}; None when the build is not known (or records no model hash)."""
    plan = _plan_ran(run, builds)
    if plan is None:
        return None
    sha = (plan.meta.get("source") or {}).get("model_sha256")
    dims = plan.meta.get("model") if isinstance(plan.meta.get("model"), dict) else {}
    return {"sha": str(sha), "dims": dims} if sha else None


def _model_difference(base: dict, mine: dict) -> str:
    """How two models differ, in words: their differing dimensions, else their hashes."""
    diff = [f"{k} {base['dims'][k]} against {mine['dims'].get(k)}" for k in base["dims"]
            if base["dims"].get(k) != mine["dims"].get(k)]
    said = ", ".join(diff) if diff else "the same dimensions, other weights"
    return f"{said}; model {base['sha'][:12]} against {mine['sha'][:12]}"


def check_builds_ran(runs: list[Run], builds: list[Path]) -> None:
    """A --build's memory table belongs in the report only if the logs ran its plan (boot lines name it;
    compile.json records the plan's hash) and, where the boot lines name their image (boards' `image`, the
    ELF's GNU build id), its images: the same plan built again (other flags, kernels, cisl) is other images."""
    ran = {str(b["plan"]) for r in runs for b in r.of("boot") if b.get("plan")}
    for b in builds:
        mine = _plan_of(b)
        if mine is None:
            continue  # memory() says what is wrong with it; a compile.json without the hash cannot be checked
        if ran and mine not in ran:
            raise UserError(f"--build {b}: its plan {mine} ran in none of the logs given (they ran "
                            f"{', '.join(sorted(ran))}); give the build folder the logs were recorded from")
        of_plan = [r for r in runs if mine in {str(x.get("plan")) for x in r.of("boot")}]
        problems = [_images_differ(r, b) for r in of_plan]
        if of_plan and all(problems):
            raise UserError(f"--build {b}: its images are not the ones the logs ran ({problems[0]}): it was built "
                            f"again since the run (the same plan, other flags or kernels); build it again as it was "
                            f"for its memory table, or leave out --build")


def _build_image_ids(build_dir: Path) -> dict[int, str]:
    """node -> the first 16 hex digits of its image's GNU build id (build.json's images; what boards print as
    the boot line's `image`); nodes whose image is gone or has no build id are left out."""
    from ..elfsize import image_id

    try:
        doc = json.loads((Path(build_dir) / "build.json").read_text())
        nodes = {int(n["node"]): Path(build_dir) / str(n["image"]) for n in doc["nodes"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    ids = {k: image_id(p) for k, p in nodes.items()}
    return {k: v for k, v in ids.items() if v}


def _images_differ(run: Run, build_dir: Path) -> str | None:
    """Why the run's images are not the build's (the first node whose boot line names another image than the
    build's image of that node), None when they are, or nothing tells (no `image` in the boot lines)."""
    named = {int(b["node"]): str(b["image"]) for b in run.of("boot") if b.get("image")}
    if not named:
        return None
    built = _build_image_ids(build_dir)
    for k, img in sorted(named.items()):
        if built.get(k) != img:
            have = f"image {built[k]}" if k in built else "no image with a build id"
            return f"node {k}'s boot line names image {img}, the build's node {k} has {have}"
    return None


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


LATENCY_COLS = ["run", "nodes", "node", "inferences", "infer_us", "compute_us", "comm_us", "other_us"]
BLOCK_COLS = ["run", "nodes", "node", "block", "inferences", "compute_us", "comm_us"]
SG_COLS = ["run", "nodes", "node", "inference", "layer", "point", "us", "tx", "rx", "delivered", "expected"]
DELIVERY_COLS = ["run", "nodes", "inference", "round", "layer", "point", "reporting_nodes", "delivered", "expected",
                 "ratio"]
SPEEDUP_COLS = ["run", "nodes", "sink", "infer_us", "compute_us", "comm_us", "speedup", "clock"]
MEMORY_COLS = ["build", "board", "nodes", "node", "param_bytes", "arena_bytes", "bytes_sent_per_inference",
               "image_bytes", "image_ram_bytes"]
FORECAST_COLS = ["run", "nodes", "inference", "sink", "n", "crc", "crc_ok", "infer_crc", "q"]


def make_report(log_dirs: list[Path], out_dir: Path, builds: list[Path] | None = None,
                plots: bool = True, estimates: list[Path] | None = None, calibrate: bool = False) -> ReportResult:
    from . import boardtime_report as BT

    seen: dict[Path, Path] = {}
    for p in log_dirs:  # twice the same run would count it twice in every table
        key = Path(p).resolve()
        if key in seen:
            raise UserError(f"{p}: given twice (also as {seen[key]}); give each logs folder once")
        seen[key] = Path(p)
    runs = [load_run(p) for p in log_dirs]
    copies: dict[str, Path] = {}
    for p, r in zip(log_dirs, runs):  # a copy of a logs folder (`cp -r`) is the same run, not a second one
        rid = _run_id(r)
        if rid and rid in copies:
            raise UserError(f"{p} and {copies[rid]} hold the same run (run id {rid}): one is a copy of the other; "
                            f"give it once")
        copies.setdefault(rid, Path(p))
    named: dict[Path, Path] = {}
    for b in builds or []:  # twice the same build would list every node's memory twice
        key = Path(b).resolve()
        if key in named:
            raise UserError(f"--build {b}: given twice (also as {named[key]}); give each build once")
        named[key] = Path(b)
    ests = [BT.load_estimate(p) for p in estimates or []]
    BT.check_estimates_ran(runs, list(zip(estimates or [], ests)), build_of)
    if calibrate and not ests:
        raise UserError("--calibrate needs the cycle model's prediction: add --estimate EST.json "
                        "(written by `cisl estimate BUILD -o EST.json`)")
    if calibrate:  # only boards' cycle counters calibrate the model; other runs are skipped, with a note
        matched = [r for r in runs if BT.match_estimate(r, ests) is not None]
        if matched and all(BT.calibration_problem(r) for r in matched):
            raise UserError(f"--calibrate: {BT.calibration_problem(matched[0])}")
    with atomic_output_dir(Path(out_dir), "report", _report_entry, _legacy_report) as tmp:
        res = _write_report(runs, ests, tmp, builds, plots, calibrate)
    res.out_dir = Path(out_dir)
    res.files = [Path(out_dir) / f.name for f in res.files]
    return res


def _report_entry(name: str) -> bool:
    return name.endswith(".csv") or name.endswith(".png") or name == "notes.txt"


def _legacy_report(target: Path) -> bool:
    """A report folder of a cisl version before the owner file: its latency.csv."""
    try:
        return (Path(target) / "latency.csv").read_text().startswith("run,nodes,node,")
    except (OSError, UnicodeDecodeError):
        return False


def _write_report(runs: list[Run], ests: list[dict], out_dir: Path, builds: list[Path] | None, plots: bool,
                  calibrate: bool) -> ReportResult:
    from . import boardtime_report as BT

    labels = [r.label for r in runs]
    for r in runs:  # the same folder name twice (a/logs, b/logs): tell them apart by node count and position
        if labels.count(r.label) > 1:
            r.label = f"{r.label}#{runs.index(r)}({r.nodes} nodes)"
    wholes = sorted(runs, key=lambda r: r.nodes)  # the runs as given; `runs`: a run of several modes per mode
    split = [split_by_mode(r) for r in wholes]
    runs = [p for parts in split for p in parts]
    check_builds_ran(runs, builds or [])
    res = ReportResult(out_dir)
    res.notes += [n for n in (failed_run_note(r) for r in wholes) if n]  # first: what the tables are worth
    res.notes += [mode_split_note(parts) for parts in split if len(parts) > 1]
    if not builds:  # the builds the runs came from, where the logs say which and they are still as they ran
        found = {r.label: build_of(r) for r in wholes}
        for r in wholes:  # the same plan built again since the run (other flags, kernels): not the images that ran
            b = found[r.label]
            why = _images_differ(r, b) if b is not None else None
            if why:
                found[r.label] = None
                res.notes.append(f"{r.label}: no memory table from {b}: it holds the plan these logs ran, but was "
                                 f"built again since ({why}); build it again as it ran, or give --build of a build that holds "
                                 f"those images")
        builds = list(dict.fromkeys(b for b in found.values() if b is not None))
        for label, b in found.items():
            if b is not None:
                res.notes.append(f"{label}: memory table from {b}, the build these logs ran (--build to choose)")
    mem = [row for b in builds for row in memory(b)]
    lat, blk, sgs, dlv, fc = [], [], [], [], []
    for r in runs:
        a, b = per_node_latency(r)
        lat += a
        blk += b
        s, d = rounds(r)
        sgs += s
        dlv += d
        fc += forecasts(r)
    speed = []
    central = [r for r in runs if r.nodes == 1]
    clocks = {r.label: BT.clock_of(r) for r in runs}
    for r in runs:
        sink = next((row for row in lat if row["run"] == r.label and row["node"] == r.sink), None)
        if sink is None:
            continue
        speed.append({"run": r.label, "nodes": r.nodes, "sink": r.sink, "clock": clocks[r.label],
                      "infer_us": sink["infer_us"], "compute_us": sink["compute_us"], "comm_us": sink["comm_us"],
                      "speedup": ""})
    if central:
        # over a 1-node run of the same clock (host time over nRF52840 time is no speedup) and of the same
        # model (plan.json source.model_sha256: another architecture's latency is no base)
        models = {r.label: _model_of(r, builds) for r in runs}
        timed = {s["run"]: s for s in speed}
        for s in speed:
            if s["nodes"] == 1 and s["run"] in {c.label for c in central}:
                s["speedup"] = 1.0 if s["infer_us"] else ""  # its own base
                continue
            same_clock = [c for c in central if clocks[c.label] == s["clock"] and c.label in timed]
            if not same_clock:
                have = ", ".join(f"{c.label} counted {BT.clock_words(clocks[c.label])[0]}" for c in central)
                res.notes.append(f"{s['run']}: its nodes counted {BT.clock_words(s['clock'])[0]} (clock={s['clock']}), "
                                 f"but no 1-node run did ({have}): speedup not computed across clocks (add the logs "
                                 f"of a 1-node run on the same clock)")
                continue
            mine = models[s["run"]]
            same = [c for c in same_clock if mine and models[c.label] and models[c.label]["sha"] == mine["sha"]]
            unknown = [c for c in same_clock if not mine or not models[c.label]]
            other = [c for c in same_clock if c not in same and c not in unknown]
            eligible = same or unknown
            for c in other:
                res.notes.append(f"{s['run']}: {c.label} is not its speedup base: it ran another model "
                                 f"({_model_difference(models[c.label], mine)}); speedup is over a 1-node run of the "
                                 f"same model only (add the logs of this model compiled with --devices 1)")
            if not eligible:
                continue
            base = eligible[0]
            if len(eligible) > 1:
                res.notes.append(f"{s['run']}: speedup over {base.label}, the first of the 1-node runs that could be "
                                 f"its base ({', '.join(c.label for c in eligible)}); give one of them to choose")
            if not same:
                missing = [x for x in (s["run"], base.label) if not models[x]]
                res.notes.append(f"{s['run']}: speedup over {base.label} assumes they ran the same model: the build "
                                 f"{' and '.join(missing)} ran was not found to compare (give --build for each run)")
            b = timed[base.label]
            s["speedup"] = round(b["infer_us"] / s["infer_us"], 3) if s["infer_us"] else ""
    else:
        res.notes.append("no 1-node run among the logs: speedup over central execution not computed (add the logs "
                         "of a run compiled with --devices 1)")
    res.latency, res.speedup = lat, speed
    from ..serial_contract import Record, peer_summary

    for r in wholes:  # dead (or revived) nodes the run's nodes reported
        recs = [Record(int(d["node"]), str(d["event"]), {k: v for k, v in d.items() if k not in ("node", "event")})
                for d in r.records if d.get("event") in ("peer", "boot")]
        res.notes += [f"{r.label}: {line}" for line in peer_summary(recs, _dead_radios(r.path))]
        res.notes += [f"{r.label}: {line}" for line in coverage_notes(r)]
        res.left_out += [line for line in [left_out_summary(r)] if line]
    for r in runs:
        est = BT.match_estimate(r, ests)
        if ests and est is None:
            what = "of the plan it ran" if BT.plans_of(r) else f"for {r.nodes} nodes"
            what += f" in mode {r.mode}" if r.mode is not None else ""
            res.notes.append(f"{r.label}: no --estimate {what}: no predicted column")
        elif est is not None and not BT.plans_of(r):
            res.notes.append(f"{r.label}: no boot line names the plan the nodes ran: --estimate matched by node "
                             f"count only (record the run with the nodes' reset for a checked comparison)")
        res.block_latency += BT.block_latency(r, est)
        rows, note = BT.energy(r, est, _plan_ran(r, builds))
        res.energy += rows
        if note:
            res.notes.append(f"{r.label}: {note}")
        clock = BT.clock_of(r)
        if not BT.board_time(clock):
            what, todo = BT.clock_words(clock)
            res.notes.append(f"{r.label}: the nodes counted {what} (clock={clock}), not nRF52840 time: no energy"
                             f"{' and no predicted column' if est is not None else ''}; {todo}")
        if calibrate and est is not None:
            problem = BT.calibration_problem(r)
            if problem:
                res.notes.append(f"{r.label}: not calibrated: {problem}")
            else:
                res.calibration.append({"run": r.label, **BT.calibrate(r, est)})
    res.files += [_write_csv(out_dir / "latency.csv", lat, LATENCY_COLS),
                  _write_csv(out_dir / "blocks.csv", blk, BLOCK_COLS),
                  _write_csv(out_dir / "rounds.csv", sgs, SG_COLS),
                  _write_csv(out_dir / "delivery.csv", dlv, DELIVERY_COLS),
                  _write_csv(out_dir / "speedup.csv", speed, SPEEDUP_COLS),
                  _write_csv(out_dir / "block_latency.csv", res.block_latency, BT.BLOCK_LATENCY_COLS),
                  _write_csv(out_dir / "forecasts.csv", fc, FORECAST_COLS)]
    if res.energy:
        res.files.append(_write_csv(out_dir / "energy.csv", res.energy, BT.ENERGY_COLS))
    if res.calibration:
        res.files.append(_write_csv(out_dir / "calibration.csv", res.calibration,
                                    ["run", "flash_wait", "points", "mean_error_pct", "max_error_pct", "model_range",
                                     "in_range"]))
    if mem:
        res.files.append(_write_csv(out_dir / "memory.csv", mem, MEMORY_COLS))
    else:
        res.notes.append("no memory table: give --build BUILD (the logs do not name a build that still holds the "
                         "plan and images they ran)")
    if plots:
        res.files += _plots(out_dir, runs, blk, lat, [s for s in speed if s["speedup"] != ""], dlv, mem)
    if res.notes:  # they travel with the tables (a failed run, a missing node), not only on the terminal
        (out_dir / "notes.txt").write_text("".join(f"{n}\n" for n in res.notes))
        res.files.append(out_dir / "notes.txt")
    return res


def _plots(out: Path, runs: list[Run], blk: list[dict], lat: list[dict], speed: list[dict], dlv: list[dict],
           mem: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    # Fig. 6 style: per-block compute and communication, stacked; one bar per node count (the sink's
    # per-inference time), or one bar per node when there is a single run
    if len(runs) > 1:
        from .boardtime_report import clock_of

        # runs of different clocks (host time, nRF52840 time) side by side: each bar says its clock
        clocks = {r.label: clock_of(r) for r in runs}
        mixed = len(set(clocks.values())) > 1
        bars = [(f"{r.nodes}" + (f"\n{clocks[r.label]} time" if mixed else ""), r.label, r.sink) for r in runs]
        xlabel = "nodes" + (" (runs on different clocks: not comparable)" if mixed else "")
    else:
        bars = [(f"{k}", runs[0].label, k) for k in runs[0].node_ids]
        xlabel = f"node ({runs[0].label}, {runs[0].nodes} nodes)"
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(bars) + 5), 4))
    bottoms = [0.0] * len(bars)
    kinds = [b for b in BLOCKS if any(row["block"] == b for row in blk)]
    for part, hatch in (("compute_us", None), ("comm_us", "//")):
        for b in kinds:
            vals = []
            for _, label, node in bars:
                row = next((x for x in blk if x["run"] == label and x["node"] == node and x["block"] == b), None)
                vals.append((row[part] if row else 0.0) / 1000.0)
            ax.bar(range(len(bars)), vals, bottom=bottoms, color=BLOCK_COLORS.get(b, "gray"), hatch=hatch,
                   edgecolor="white" if hatch else None,
                   label=f"{b} {'compute' if part == 'compute_us' else 'communication'}")
            bottoms = [x + v for x, v in zip(bottoms, vals)]
    ax.set_xticks(range(len(bars)), [b[0] for b in bars])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms per inference")
    ax.set_title("latency per block: compute vs communication (hatched)")
    ax.legend(fontsize=7, bbox_to_anchor=(1.02, 1.0), loc="upper left")
    fig.tight_layout()
    files.append(out / "latency_blocks.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(runs), figsize=(max(5, 3.5 * len(runs)), 4), squeeze=False)
    for ax, r in zip(axes[0], runs):
        rows = [x for x in lat if x["run"] == r.label]
        xs = range(len(rows))
        comp = [x["compute_us"] / 1000 for x in rows]
        comm = [x["comm_us"] / 1000 for x in rows]
        other = [max(0.0, x["other_us"]) / 1000 if x["other_us"] == x["other_us"] else 0.0 for x in rows]
        ax.bar(xs, comp, label="compute", color="#1f77b4")
        ax.bar(xs, comm, bottom=comp, label="communication", color="#ff7f0e")
        ax.bar(xs, other, bottom=[a + b for a, b in zip(comp, comm)], label="other", color="#c7c7c7")
        ax.set_xticks(list(xs), [str(x["node"]) for x in rows])
        ax.set_title(f"{r.label} ({r.nodes} nodes)", fontsize=9)
        ax.set_xlabel("node")
    axes[0][0].set_ylabel("ms per inference")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    files.append(out / "latency_nodes.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    if speed:
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.plot([s["nodes"] for s in speed], [s["speedup"] or 0 for s in speed], "o-")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xlabel("nodes")
        ax.set_ylabel("speedup over 1 node")
        ax.set_title("speedup over central execution")
        fig.tight_layout()
        files.append(out / "speedup.png")
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)

    if dlv:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for r in runs:
            ys = [d["ratio"] for d in dlv if d["run"] == r.label and d["ratio"] != ""]
            ax.plot(range(len(ys)), ys, ".-", lw=0.8, label=f"{r.label} ({r.nodes} nodes)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("communication round (in order)")
        ax.set_ylabel("delivered / expected")
        ax.set_title("messages delivered per round")
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(out / "delivery.png")
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)

    if mem:
        builds = sorted({m["build"] for m in mem})
        fig, axes = plt.subplots(1, len(builds), figsize=(max(5, 3.5 * len(builds)), 4), squeeze=False)
        for ax, b in zip(axes[0], builds):
            rows = [m for m in mem if m["build"] == b]
            xs = range(len(rows))
            ax.bar(xs, [m["param_bytes"] / 1024 for m in rows], label="parameters (flash)")
            ax.bar(xs, [m["arena_bytes"] / 1024 for m in rows], bottom=[m["param_bytes"] / 1024 for m in rows],
                   label="activation arena (RAM)")
            ax.set_xticks(list(xs), [str(m["node"]) for m in rows])
            ax.set_title(f"{b} ({rows[0]['nodes']} nodes)", fontsize=9)
            ax.set_xlabel("node")
        axes[0][0].set_ylabel("KiB")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        files.append(out / "memory.png")
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return files
