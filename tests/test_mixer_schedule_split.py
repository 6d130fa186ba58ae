"""One message split across several Mixer rounds (codegen/plan/mixer_schedule.py, issue 15 item 4b).

A message larger than one round is carried in pieces over consecutive rounds of its exchange; the
schedule's pieces cover every message exactly once, in order, every round stays within the largest
generation and the PHY packet limit, and at most one split message is in flight at a time (what the
firmware's single reassembly buffer relies on).
"""

from __future__ import annotations

import pytest

from codegen.compile import _per_packet_us, round_policy
from codegen.plan.mixer_schedule import (MAX_GENERATION, MAX_ROUNDS, Fragments, MixerRound, RoundPolicy,
                                         check_pieces, max_generation_for, packet_length, schedule_exchange)
from codegen.radio.airtime import MAX_PHY_PAYLOAD

pytestmark = pytest.mark.unit


def _covered(rounds: list[MixerRound], msg: list[int]) -> None:
    """Every message's bytes are covered exactly once, in order, by pieces in consecutive rounds."""
    for j, m in enumerate(msg):
        pieces = [(r.part, f) for r in rounds for f in r.senders if f.node == j]
        if m == 0:
            assert pieces == []
            continue
        at = 0
        for (part, f), nxt in zip(pieces, pieces[1:] + [None]):
            assert f.offset == at and f.nbytes == m
            at += f.piece_bytes(rounds[part].payload)
            if nxt is not None:
                assert nxt[0] == part + 1  # the next piece is in the next round
        assert at == m


def _valid(rounds: list[MixerRound], msg: list[int], max_generation: int = MAX_GENERATION) -> None:
    n = len(msg)
    check_pieces(rounds, n)
    _covered(rounds, msg)
    assert len(rounds) <= MAX_ROUNDS
    for part, r in enumerate(rounds):
        assert (r.part, r.parts) == (part, len(rounds))
        assert 2 <= r.generation <= max_generation
        assert packet_length(n, r.generation, r.payload) <= MAX_PHY_PAYLOAD
        assert sum(f.rows for f in r.senders) == r.generation - 1  # the header and the pieces, nothing unused


@pytest.mark.parametrize("msg", [[49152, 49152], [65536] * 4, [100_000, 0, 3, 70_000], [47_686], [20_000] * 2,
                                 [5000] * 16, [0, 0, 96]])
@pytest.mark.parametrize("cpu", [False, True])
def test_pieces_cover_every_message_once_within_the_round_limits(msg, cpu):
    policy = RoundPolicy(linger=max(4, len(msg)), per_packet_us=_per_packet_us("nrf52840dk") if cpu else None)
    rounds = schedule_exchange(3, msg, policy)
    _valid(rounds, msg)
    assert all(r.exchange == 3 for r in rounds)


def test_a_message_larger_than_the_largest_round_is_split():
    # 255 rows of at most 187 B (G = 256: 4 + 32 + P + 32 <= 255) carry 47 685 B: one more byte needs a second round
    cap = (MAX_GENERATION - 1) * (MAX_PHY_PAYLOAD - packet_length(2, MAX_GENERATION, 0))
    assert cap == 47_685
    for m in (cap + 1, 49_152, 3 * cap):
        rounds = schedule_exchange(0, [m, m], RoundPolicy())
        _valid(rounds, [m, m])
        split = [j for j in (0, 1) if sum(f.node == j for r in rounds for f in r.senders) > 1]
        assert split, m  # at least one message is carried in pieces
        assert any(f.offset > 0 for r in rounds for f in r.senders)


def test_small_generations_split_messages_over_many_rounds():
    msg = [700, 0, 1300]  # max generation 2: one row per round
    rounds = schedule_exchange(0, msg, RoundPolicy(), max_generation=2)
    _valid(rounds, msg, 2)
    assert all(r.generation == 2 and len(r.senders) == 1 for r in rounds)
    assert len(rounds) == -(-700 // rounds[0].payload) + -(-1300 // rounds[0].payload)


def test_the_split_is_chosen_for_speed_and_never_slower_than_the_unsplit_schedule():
    """At P = 187 a 40 KB message still fits one round of G = 215; rounds of the larger payloads the
    packet allows at smaller generations carry it faster, in pieces."""
    policy = RoundPolicy(linger=4)
    msg = [40_000, 40_000]
    rounds = schedule_exchange(0, msg, policy)
    _valid(rounds, msg)
    one_each = []
    for j in (0, 1):  # the best schedule that keeps every message whole: one round per message, P = 187
        g = 1 + -(-40_000 // 187)
        length = packet_length(2, g, 187)
        one_each.append(policy.estimated_slots(g) * policy.slot_us(length, g, 187))
    assert sum(r.estimated_us for r in rounds) <= sum(one_each)


def test_the_start_guard_counts_against_more_rounds():
    msg = [20_000, 20_000]
    free = schedule_exchange(0, msg, RoundPolicy(linger=4))
    guarded = schedule_exchange(0, msg, RoundPolicy(linger=4, round_guard_us=200_000))
    _valid(free, msg)
    _valid(guarded, msg)
    assert len(guarded) < len(free)
    assert round_policy("nrf52840dk", 4).round_guard_us == 2000 and round_policy("sim", 4).round_guard_us == 0


def test_too_many_rounds_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=f"more than {MAX_ROUNDS} Mixer rounds"):
        schedule_exchange(0, [255 * 240 + 1], RoundPolicy(), max_generation=2)


def test_the_largest_generation_at_a_payload_fits_the_packet():
    for n in (2, 16, 32):
        for p in (8, 100, 187, 188, 219, 240):
            g = max_generation_for(n, p)
            assert packet_length(n, g, p) <= MAX_PHY_PAYLOAD
            assert g == MAX_GENERATION or packet_length(n, g + 1, p) > MAX_PHY_PAYLOAD


def _round(part: int, payload: int, frags: list[Fragments]) -> MixerRound:
    g = 1 + sum(f.rows for f in frags)
    return MixerRound(0, part, 2, g, payload, 3 * g + 200, 1000, g, frags)


def test_check_pieces_refuses_what_the_firmware_cannot_reassemble():
    ok = [_round(0, 100, [Fragments(0, 1, 2, 250, 0)]), _round(1, 100, [Fragments(0, 1, 1, 250, 200)])]
    check_pieces(ok, 2)
    gap = [_round(0, 100, [Fragments(0, 1, 1, 250, 0)]), _round(1, 100, [Fragments(0, 1, 1, 250, 200)])]
    with pytest.raises(ValueError, match="out of order"):
        check_pieces(gap, 2)
    interleaved = [_round(0, 100, [Fragments(0, 1, 2, 250, 0), Fragments(1, 3, 1, 50, 0)]),
                   _round(1, 100, [Fragments(0, 1, 1, 250, 200)])]
    with pytest.raises(ValueError, match="before node 0's is complete"):
        check_pieces(interleaved, 2)
    unfinished = [_round(0, 100, [Fragments(0, 1, 2, 250, 0)])]
    with pytest.raises(ValueError, match="incomplete"):
        check_pieces(unfinished, 2)


def test_a_repeated_schedule_is_the_same_and_each_caller_owns_its_copy():
    """The planner asks for the same messages' schedule for many candidate splits; the search runs once,
    but every caller gets rounds numbered for its own exchange that it may change without changing
    anyone else's, and a policy built with lists is scheduled alike."""
    msg = [900, 0, 4000, 700]
    policy = RoundPolicy(linger=4, per_packet_us=(30.0, 0.2, 0.002, 0.02))
    first = schedule_exchange(3, msg, policy)
    second = schedule_exchange(7, msg, policy)
    assert [r.exchange for r in first] == [3] * len(first) and [r.exchange for r in second] == [7] * len(second)
    assert [r.to_json() | {"exchange": 0} for r in first] == [r.to_json() | {"exchange": 0} for r in second]
    first[0].senders[0].rows = 99
    first[0].weak_rows.append(1)
    third = schedule_exchange(3, msg, policy)
    assert third[0].senders[0].rows != 99 and third[0].weak_rows == []
    listed = RoundPolicy(linger=4, per_packet_us=[30.0, 0.2, 0.002, 0.02])  # type: ignore[arg-type]
    assert schedule_exchange(3, msg, listed) == third
    with pytest.raises(ValueError, match="^exchange 9: "):
        schedule_exchange(9, [10**7] * 4, RoundPolicy())


def test_the_rounds_priced_are_the_rounds_packed():
    """The search prices every payload at once from the rounds' generations alone (_payload_costs) and
    packs the fragments only for the winner (_pack): both must agree on every input, or the schedule
    chosen would not be the one priced."""
    import random

    from codegen.plan.mixer_schedule import (PAYLOADS, _cost, _generation_caps, _pack, _payload_costs, _round,
                                             _RoundPrices)

    from codegen.compile import round_policy

    rng = random.Random(7)
    # the board's policies: slots lengthened where the CPU's work does not fit the radio's slot
    policies = [RoundPolicy(), RoundPolicy(kind="fixed"), RoundPolicy(linger=16, per_packet_us=(30.0, 0.2, 0.002, 0.02),
                                                                      round_guard_us=300),
                RoundPolicy(per_packet_us=(400.0, 1.0, 0.01, 0.5, 0.001)),  # a slow CPU: the gap sets the slot
                round_policy("nrf52840dk", 16), round_policy("nrf52840dk", 8, kind="fixed", phy="1M")]
    for _ in range(400):
        msg = tuple(rng.choice([0, rng.randint(1, 300), rng.randint(1, 5000), rng.randint(1, 60000)])
                    for _ in range(rng.randint(1, 16)))
        if not any(msg):
            continue
        policy, max_generation = rng.choice(policies), rng.choice([MAX_GENERATION, rng.randint(2, MAX_GENERATION)])
        costs, valid = _payload_costs(msg, policy, max_generation, _RoundPrices(len(msg), policy))
        caps = _generation_caps(len(msg), max_generation)
        for i in rng.sample(range(len(PAYLOADS)), 12) + [0, len(PAYLOADS) - 1]:
            payload, cap = int(PAYLOADS[i]), int(caps[i])
            packed = _pack(msg, payload, cap) if cap >= 2 else None
            assert valid[i] == (packed is not None), (msg, payload, cap)
            if packed is not None:
                rounds = [_round(0, 0, g[-1].first_row + g[-1].rows, payload, len(msg), policy, g) for g in packed]
                assert costs[i] == _cost(rounds, policy), (msg, payload, cap, policy)
