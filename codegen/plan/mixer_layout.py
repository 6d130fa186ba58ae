"""Mixer's compile-time layout for a plan: the maxima the firmware is built with, and its row size.

firmware/mixer/mixer.h sizes Mixer's state from four macros (MX_MAX_NODES, MX_MAX_G, MX_MAX_P,
MX_POOL_WORDS); the build sets them from the plan's Mixer schedule (codegen/plan/mixer_schedule.py),
so Mixer's RAM is what the plan needs, and the footprint estimate prices the same numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .io import Plan


def mixer_maxima(plan: Plan) -> dict[str, int]:
    """Mixer's compile-time maxima for this plan: its node count, largest generation and payload,
    and a row pool that holds the largest round (G times the row stride of that round)."""
    return maxima_of_rounds(plan.devices, [r for ex in plan.meta["mixer"]["exchanges"] for r in ex])


def maxima_of_rounds(devices: int, rounds: list[dict]) -> dict[str, int]:
    """The maxima for ``devices`` nodes running these rounds (plan.json's ``mixer.exchanges`` form)."""
    if not rounds:  # one node: no exchange goes over the radio; the smallest legal state
        return {"MX_MAX_NODES": max(devices, 1), "MX_MAX_G": 1, "MX_MAX_P": 8, "MX_POOL_WORDS": 3}
    g = max(int(r["generation"]) for r in rounds)
    p = max(int(r["payload"]) for r in rounds)
    pool = max(int(r["generation"]) * row_words(int(r["generation"]), int(r["payload"])) for r in rounds)
    return {"MX_MAX_NODES": devices, "MX_MAX_G": g, "MX_MAX_P": p, "MX_POOL_WORDS": pool}


def cv_words(g: int) -> int:
    """firmware/mixer/mixer.h MX_CV_WORDS: words of one coding vector of a generation of g rows."""
    return (g + 31) // 32


def row_words(g: int, p: int) -> int:
    """firmware/mixer/mixer.h MX_ROW_WORDS: coding-vector words plus payload words."""
    return cv_words(g) + (p + 3) // 4
