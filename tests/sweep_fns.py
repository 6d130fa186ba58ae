"""Unit functions for tests/test_sweep.py (loaded by file path in every worker)."""

from __future__ import annotations

from pathlib import Path


def square(params: dict, ctx) -> dict:
    calls = Path(params["calls"])
    with open(calls, "a") as f:  # every execution leaves a line: a skipped unit leaves none
        f.write(ctx.unit_id + "\n")
    if params.get("fail"):
        raise RuntimeError(f"unit {params['x']} was told to fail{params.get('why', '')}")
    out = {"x": params["x"], "square": params["x"] ** 2}
    if params.get("base") is not None:
        out["plus_base"] = out["square"] + ctx.record_of(params["base_unit"])["result"]["square"]
    ctx.work.mkdir(parents=True, exist_ok=True)
    (ctx.work / "artefact.txt").write_text(str(out["square"]))
    return out


def slow_count(params: dict, ctx) -> dict:
    """Counts to params["to"], a second per step, saving the count after every step in its work
    folder and resuming from it: a unit that a time limit stops and submitit requeues."""
    import os
    import time

    ctx.work.mkdir(parents=True, exist_ok=True)
    state, starts = ctx.work / "count", ctx.work / "starts"
    count = int(state.read_text()) if state.is_file() else 0
    with open(starts, "a") as f:
        f.write(f"{os.getpid()}\n")
    while count < params["to"]:
        time.sleep(1.0)
        count += 1
        tmp = state.with_suffix(".tmp")
        tmp.write_text(str(count))
        tmp.replace(state)
    return {"count": count, "starts": len(starts.read_text().split())}


def edit_input(params: dict, ctx) -> dict:
    """Edits a file whose content enters the unit's id while the unit runs (as a user editing the data or
    the code during a long sweep would)."""
    with open(params["edit"], "a") as f:
        f.write("edited while the unit ran\n")
    return {"edited": params["edit"]}


def needs_remade(params: dict, ctx) -> dict:
    """Makes the unit it needs again, as the bench studies do, and asks for its record and folder."""
    from codegen.sweep import Unit

    need = Unit(f"{Path(__file__).resolve()}:edit_input", params["need"], data=(params["need"]["edit"],),
                label="edits")
    return {"need": ctx.record_of(need)["result"], "folder": ctx.work_of(need).name}
