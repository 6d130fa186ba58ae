"""Unit functions for tests/test_sweep.py (loaded by file path in every worker)."""

from __future__ import annotations

from pathlib import Path


def square(params: dict, ctx) -> dict:
    calls = Path(params["calls"])
    with open(calls, "a") as f:  # every execution leaves a line: a skipped unit leaves none
        f.write(ctx.unit_id + "\n")
    if params.get("fail"):
        raise RuntimeError(f"unit {params['x']} was told to fail")
    out = {"x": params["x"], "square": params["x"] ** 2}
    if params.get("base") is not None:
        out["plus_base"] = out["square"] + ctx.record_of(params["base_unit"])["result"]["square"]
    ctx.work.mkdir(parents=True, exist_ok=True)
    (ctx.work / "artefact.txt").write_text(str(out["square"]))
    return out
