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
    and a row pool that holds the largest round (G times the row stride of that round). An image
    holding every elastic mode runs every mode's rounds: `cisl compile` records the maxima over all of
    them (``mixer.image``), and a smaller mode's round may be the largest (its payload is chosen per
    exchange)."""
    image = plan.meta["mixer"].get("image")
    if image is not None:
        return {k: int(v) for k, v in image["maxima"].items()}
    return maxima_of_rounds(plan.devices, section_rounds(plan.meta["mixer"]))


def section_rounds(mixer: dict) -> list[dict]:
    """Every round of a plan's ``mixer`` section: its exchanges' and the elastic control round."""
    return [r for ex in mixer["exchanges"] for r in ex] + ([mixer["control"]] if "control" in mixer else [])


def image_section(devices: int, sections: list[dict]) -> dict:
    """What one image holding the plans of ``sections`` (every elastic mode) needs of Mixer: the maxima
    over all their rounds and the largest message any of them reassembles."""
    rounds = [r for s in sections for r in section_rounds(s)]
    return {"maxima": maxima_of_rounds(devices, rounds),
            "max_message": max([f["nbytes"] for r in rounds for f in r["senders"]] + [1])}


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
