"""Properties of the static memory planner (codegen/plan/memory.py), with hypothesis.

Buffers (size, alignment, lifetime) in, arena offsets out: no two buffers that are live at the same
time overlap, every offset honours its buffer's alignment, the arena holds every buffer, is never
smaller than the largest set of simultaneously live buffers and never larger than all buffers side
by side; the checker finds every planted fault; the plan is a pure function of its input.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.plan.memory import Buffer, align, check_plan, format_plan, plan_arena

pytestmark = pytest.mark.unit


@st.composite
def buffer_sets(draw, max_buffers: int = 40):
    n = draw(st.integers(1, max_buffers))
    out = []
    for i in range(n):
        first = draw(st.integers(0, 60))
        last = first + draw(st.integers(0, 20))
        size = draw(st.integers(1, 5000))
        a = draw(st.sampled_from([1, 2, 4, 8, 16]))
        out.append(Buffer(f"b{i}", size, first, last, a))
    return out


def _peak_live(bufs: list[Buffer]) -> int:
    times = range(min(b.first for b in bufs), max(b.last for b in bufs) + 1)
    return max(sum(b.size for b in bufs if b.first <= t <= b.last) for t in times)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(buffer_sets())
def test_plan_is_valid_and_within_bounds(bufs):
    offsets, arena = plan_arena(bufs)
    assert check_plan(bufs, offsets, arena) == []
    for b in bufs:
        assert offsets[b.name] % b.align == 0
        assert offsets[b.name] + b.size <= arena
    assert arena % 4 == 0
    assert arena >= _peak_live(bufs)
    assert arena <= sum(align(b.size, max(4, b.align)) + b.align for b in bufs)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(buffer_sets(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_input_order(bufs, rnd):
    shuffled = list(bufs)
    rnd.shuffle(shuffled)
    assert plan_arena(shuffled) == plan_arena(bufs)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(buffer_sets(max_buffers=12))
def test_disjoint_lifetimes_share_memory(bufs):
    """Buffers live one after another need only the largest of them."""
    seq = [Buffer(b.name, b.size, 3 * i, 3 * i + 1, b.align) for i, b in enumerate(bufs)]
    _, arena = plan_arena(seq)
    assert arena == align(max(b.size for b in seq))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(buffer_sets(max_buffers=20), st.integers(0, 10**6))
def test_checker_finds_planted_faults(bufs, seed):
    offsets, arena = plan_arena(bufs)
    rnd = random.Random(seed)
    pairs = [(a, b) for i, a in enumerate(bufs) for b in bufs[i + 1:] if a.live_with(b)]
    if pairs:  # move one buffer onto a live neighbour
        a, b = rnd.choice(pairs)
        bad = dict(offsets)
        bad[a.name] = offsets[b.name]
        assert any("overlaps" in p for p in check_plan(bufs, bad, max(arena, bad[a.name] + a.size)))
    odd = [b for b in bufs if b.align > 1]
    if odd:  # misalign one buffer
        b = rnd.choice(odd)
        bad = dict(offsets)
        bad[b.name] += 1
        assert any("aligned" in p for p in check_plan(bufs, bad, arena + 1))
    big = max(bufs, key=lambda b: offsets[b.name] + b.size)
    assert any("past the arena" in p for p in check_plan(bufs, offsets, offsets[big.name] + big.size - 1))


def test_dump_lists_every_buffer_by_offset():
    bufs = [Buffer("x", 100, 0, 3), Buffer("y", 40, 2, 5), Buffer("z", 60, 4, 6, 16)]
    offsets, arena = plan_arena(bufs)
    text = format_plan(bufs, offsets, arena)
    lines = text.splitlines()
    assert lines[0] == f"arena {arena} bytes, 3 buffers"
    assert [ln.split()[-1] for ln in lines[1:]] == sorted(["x", "y", "z"], key=lambda n: (offsets[n], n))
    assert offsets["z"] % 16 == 0
    assert "ops    4..6" in text and " 60 B" in text
