"""Message dropout: the loss sampler, and torch's lost-column semantics against the numpy executor."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codegen.executor import PlanExecutor  # noqa: E402
from codegen.lossmodel import LossRates  # noqa: E402
from codegen.lossmodel import sample_lost as sample_lost_numpy  # noqa: E402
from codegen.lossmodel import sample_rounds as sample_rounds_numpy  # noqa: E402
from codegen.modelspec import ModelConfig  # noqa: E402
from codegen.partition import Split, full_masks, random_masks  # noqa: E402
from codegen.plan.structure import SINK, build_structure  # noqa: E402
from codegen.train.api import make_untrained  # noqa: E402
from codegen.train.dropout import (LossRange, head_round, keep_matrix, lost_from_numpy, round_of,  # noqa: E402
                                   rounds_of, sample_lost, sample_rounds)
from codegen.train.model import SplitPatchTST, receiver_matmul  # noqa: E402

@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and immune to other processes on the cores."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


CFG = ModelConfig(lookback=40, patch_len=8, stride=4, d_model=24, heads=6, layers=2, mlp_hidden=20, horizon=7)


def split_model(cfg: ModelConfig, devices: int, keep: float, seed: int = 0):
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    masks = full_masks(split, cfg.layers) if keep == 1.0 else random_masks(split, cfg.layers, keep, seed)
    w = make_untrained(cfg, split, masks, seed)
    net = SplitPatchTST(cfg, split, masks).eval()
    net.load_numpy(w)
    return net, w, split, masks


def windows(n: int, lookback: int = CFG.lookback, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, lookback)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# The sampler
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_round_numbering_is_plan_sg() -> None:
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    st = build_structure(CFG, split, full_masks(split, CFG.layers), 1.0)
    assert rounds_of(CFG.layers) == len(st.sgs)
    for sg in st.sgs:
        assert sg.sg == (head_round(CFG.layers) if sg.point == "head" else round_of(sg.layer, sg.point))


@pytest.mark.unit
@pytest.mark.parametrize("rates", [LossRates(0.3, 0, 0), LossRates(0, 0.3, 0), LossRates(0, 0, 0.3),
                                   LossRates(0.1, 0.1, 0.1), LossRates(0.05, 0.2, 0.1)])
def test_sampler_marginals_match_the_loss_model(rates: LossRates) -> None:
    """Same distribution as codegen.lossmodel: per-mode structure, effective rate, diagonal never lost."""
    B, D = 4000, 6
    gen = torch.Generator().manual_seed(0)
    lost = sample_lost(B, D, rates, gen).numpy()
    ref = sample_lost_numpy(np.random.default_rng(0), B, D, rates)
    assert lost.shape == ref.shape == (B, D, D) and lost.dtype == bool
    eye = np.eye(D, dtype=bool)
    assert not lost[:, eye].any()
    off = lost[:, ~eye]
    q = rates.effective_link_loss
    tol = 4 * np.sqrt(q * (1 - q) / off.size) + 1e-9
    assert abs(off.mean() - q) < tol and abs(ref[:, ~eye].mean() - q) < 4 * tol
    # P(a receiver gets nothing in the round) and P(nobody gets a sender's message): the mode structure
    recv_all = lost[:, ~eye].reshape(B, D, D - 1).all(axis=2).mean()
    recv_ref = ref[:, ~eye].reshape(B, D, D - 1).all(axis=2).mean()
    send_all = np.stack([np.delete(lost[:, :, j], j, axis=1).all(axis=1) for j in range(D)], 1).mean()
    send_ref = np.stack([np.delete(ref[:, :, j], j, axis=1).all(axis=1) for j in range(D)], 1).mean()
    assert abs(recv_all - recv_ref) < 0.02 and abs(send_all - send_ref) < 0.02
    if rates.receiver > 0 and rates.link == rates.sender == 0:
        assert abs(recv_all - rates.receiver) < 0.02 and abs(off.mean() - recv_all) < 1e-12  # all or nothing
    if rates.sender > 0 and rates.link == rates.receiver == 0:
        assert abs(send_all - rates.sender) < 0.02 and abs(off.mean() - send_all) < 1e-12


@pytest.mark.unit
def test_sample_rounds_covers_every_round_independently() -> None:
    lost = sample_rounds(CFG.layers, 64, 4, LossRates.uniform(0.2), torch.Generator().manual_seed(1))
    assert sorted(lost) == list(range(rounds_of(CFG.layers)))
    assert all(v.shape == (64, 4, 4) and v.dtype == torch.bool for v in lost.values())
    assert not torch.equal(lost[0], lost[1])
    assert not any(sample_lost(8, 4, LossRates()).flatten())  # zero rates: nothing lost


@pytest.mark.unit
def test_loss_range_draws_one_rate_per_sample_held_in_every_round() -> None:
    """q_b ~ U(0, q_max) per sample: per-sample loss fractions spread over the range, the same
    sample loses alike in every round, and the overall rate is the average over the range."""
    B, D, q_max = 3000, 8, 0.3
    lost = sample_rounds(CFG.layers, B, D, LossRange(q_max), torch.Generator().manual_seed(2))
    eye = np.eye(D, dtype=bool)
    stack = np.stack([v.numpy() for v in lost.values()])  # [rounds, B, D, D]
    assert not stack[:, :, eye].any()
    per_sample = stack[:, :, ~eye].mean(axis=(0, 2))  # effective link loss of each sample
    # E over q ~ U(0, q_max) of 1 - (1 - q)^3
    expect = 1 - (1 - (1 - q_max) ** 4) / (4 * q_max)
    assert abs(per_sample.mean() - expect) < 0.01
    assert per_sample.min() < 0.03 and per_sample.max() > 0.55  # from almost nothing to about 1 - 0.7^3
    # a sample's rate holds across rounds: its first and second halves of rounds agree
    half = stack.shape[0] // 2
    a, b = stack[:half, :, ~eye].mean(axis=(0, 2)), stack[half:, :, ~eye].mean(axis=(0, 2))
    assert np.corrcoef(a, b)[0, 1] > 0.8
    with pytest.raises(ValueError, match="q_max"):
        LossRange(1.0)
    assert not LossRange(0.0).any


@pytest.mark.unit
def test_clean_windows_lose_nothing_in_any_round_and_validation_weighs_the_mixture() -> None:
    """[dropout] clean: a share of the samples loses nothing in every round, the others lose at the
    rates; the best epoch is chosen on clean · loss-free MSE + (1 − clean) · lossy MSE."""
    from codegen.train.dropout import evaluate_with_loss
    from codegen.train.loop import evaluate, validate

    B, D = 4000, 4
    lost = sample_rounds(CFG.layers, B, D, LossRates.uniform(0.3), torch.Generator().manual_seed(4), clean=0.5)
    stack = np.stack([v.numpy() for v in lost.values()])  # [rounds, B, D, D]
    lossless = ~stack.any(axis=(0, 2, 3))
    assert abs(lossless.mean() - 0.5) < 0.03  # the clean half (a lossy sample losing nothing is rare)
    eye = np.eye(D, dtype=bool)
    lossy_rate = stack[:, ~lossless][:, :, ~eye].mean()
    assert abs(lossy_rate - LossRates.uniform(0.3).effective_link_loss) < 0.01  # the rest: the rates
    from codegen.data.protocol import Windows

    model = split_model(CFG, 4, 1.0)[0]
    model.set_message_dropout(LossRates.uniform(0.2), clean=0.25)
    series = np.random.default_rng(3).standard_normal((CFG.lookback + CFG.horizon + 12, 2)).astype(np.float32)
    x = Windows(series, CFG.lookback, CFG.horizon)
    want = 0.25 * evaluate(model, x, CFG.revin) + 0.75 * evaluate_with_loss(model, x, CFG.revin, model.loss_rates,
                                                                           seed=7 + 7919)
    assert want != pytest.approx(evaluate(model, x, CFG.revin), rel=1e-3)  # the loss matters here
    assert validate(model, x, CFG.revin, seed=7) == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="clean"):
        model.set_message_dropout(LossRates.uniform(0.2), clean=1.0)
    model.set_message_dropout(None, clean=0.5)
    assert model.loss_clean == 0.0  # no dropout: nothing to mix


# --------------------------------------------------------------------------------------------
# Per-sample gathers
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("tokens,outputs,devices", [(5, 6, 3), (2, 12, 2), (1, 8, 4), (6, 9, 3)])
def test_receiver_matmul_value_and_gradients(tokens: int, outputs: int, devices: int) -> None:
    """Both strategies (per-sample weights, per-receiver masks) against einsum, gradients by gradcheck."""
    gen = torch.Generator().manual_seed(tokens * 10 + outputs)
    B, F = 3, 7
    x = torch.randn(B, tokens, F, dtype=torch.double, generator=gen, requires_grad=True)
    w = torch.randn(outputs, F, dtype=torch.double, generator=gen, requires_grad=True)
    g = (torch.rand(B, devices, F, generator=gen) > 0.4).double()
    owner = torch.randint(0, devices, (outputs,), generator=gen)
    ref = torch.einsum("bnf,bof,of->bno", x, g[:, owner], w)
    assert torch.allclose(receiver_matmul(x, g, w, owner), ref, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: receiver_matmul(a, g, b, owner), (x, w))
    sorted_owner = torch.sort(owner).values  # the one-run-per-device fast path
    ref = torch.einsum("bnf,bof,of->bno", x, g[:, sorted_owner], w)
    assert torch.allclose(receiver_matmul(x, g, w, sorted_owner), ref, atol=1e-12)


@pytest.mark.unit
def test_no_loss_equals_the_shared_path_with_gradients() -> None:
    """An all-False pattern takes the shared path; all-ones per-sample gathers give the same gradients."""
    net, _, _, _ = split_model(CFG, 3, 0.5)
    x = torch.from_numpy(windows(6))
    none = {r: torch.zeros(6, 3, 3, dtype=torch.bool) for r in range(rounds_of(CFG.layers))}
    with torch.no_grad():
        assert torch.equal(net(x, lost=none), net(x))
    per_sample = [{p: g.expand(len(x), *g.shape) for p, g in layer.items()} for layer in net.gathers()]
    grads = []
    for gathers in (None, per_sample):
        net.zero_grad()
        net(x, gathers).pow(2).mean().backward()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4), name


# --------------------------------------------------------------------------------------------
# Lost-column semantics: torch == the plan executor (float) under the same losses
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("devices,keep", [(2, 0.5), (3, 0.5), (4, 0.25), (6, 1.0)])
def test_explicit_losses_equal_the_float_plan_executor(devices: int, keep: float) -> None:
    net, w, split, masks = split_model(CFG, devices, keep, seed=devices)
    st = build_structure(CFG, split, masks, keep)
    ex = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float", weights=w)
    x = windows(24)
    lost = sample_rounds_numpy(np.random.default_rng(devices), len(st.sgs), len(x), devices,
                               LossRates(0.2, 0.1, 0.1))
    head = head_round(CFG.layers)
    lost[head][:4] = False
    lost[head][0, SINK, 1] = True  # a lost head partial for sample 0 only
    ref = ex.run(x, lost=lost).output
    clean = ex.run(x).output
    with torch.no_grad():
        got = net(torch.from_numpy(x), lost=lost_from_numpy(lost)).numpy()
        assert np.array_equal(net(torch.from_numpy(x), lost=lost).numpy(), got)  # the executor's dict as is
    assert np.max(np.abs(got - ref)) < 1e-4
    assert np.max(np.abs(ref - clean)) > 1e-2  # the losses matter
    # only the head round lossy: sample 0 misses exactly device 1's partial sum, the others nothing
    head_only = {head: lost[head][:4]}
    with torch.no_grad():
        got = net(torch.from_numpy(x[:4]), lost=lost_from_numpy(head_only)).numpy()
        full = net(torch.from_numpy(x[:4])).numpy()
        xt = net.embed(torch.from_numpy(x[:1])[:, net.patch_idx]) + net.pos
        for layer, g in zip(net.layers, net.gathers()):
            xt = layer(xt, g, net.owner_model, net.owner_hidden)
        lo, hi = split.model_cols(1)
        hw = net.head.weight.view(CFG.horizon, CFG.tokens, CFG.d_model)[:, :, lo:hi]
        partial1 = torch.einsum("nf,hnf->h", xt[0, :, lo:hi], hw).numpy()
    assert np.max(np.abs(got - ex.run(x[:4], lost=head_only).output)) < 1e-4
    np.testing.assert_allclose(full[0] - got[0], partial1, atol=1e-4)
    np.testing.assert_allclose(full[1:], got[1:], atol=1e-6)


@pytest.mark.unit
@pytest.mark.parametrize("rates", [LossRates.uniform(0.2), LossRange(0.5)], ids=["fixed", "range"])
def test_training_mode_draws_losses_eval_is_deterministic(rates) -> None:
    net, _, _, _ = split_model(CFG, 3, 0.5)
    x = torch.from_numpy(windows(8))
    with torch.no_grad():
        clean = net(x)
        net.set_message_dropout(rates)
        assert torch.equal(net(x), clean)  # eval: no dropout
        net.train()
        a, b = net(x), net(x)
        assert not torch.allclose(a, b) and not torch.allclose(a, clean)
        torch.manual_seed(3)
        c = net(x)
        torch.manual_seed(3)
        assert torch.equal(net(x), c)  # drawn from torch's (seeded) generator
        net.set_message_dropout(LossRates())  # zero rates: off
        assert torch.allclose(net(x), clean, atol=1e-6)


@pytest.mark.unit
def test_one_device_ignores_losses() -> None:
    net, _, _, _ = split_model(CFG, 1, 1.0)
    x = torch.from_numpy(windows(4))
    lost = {r: torch.ones(4, 1, 1, dtype=torch.bool) for r in range(rounds_of(CFG.layers))}
    with torch.no_grad():
        assert torch.equal(net(x, lost=lost), net(x))


@pytest.mark.unit
def test_bad_lost_patterns_are_rejected() -> None:
    net, _, _, _ = split_model(CFG, 3, 0.5)
    x = torch.from_numpy(windows(4))
    with pytest.raises(ValueError, match="round 99"):
        net(x, lost={99: torch.zeros(4, 3, 3, dtype=torch.bool)})
    with pytest.raises(ValueError, match="shape"):
        net(x, lost={0: torch.zeros(4, 2, 2, dtype=torch.bool)})
    with pytest.raises(ValueError, match="either"):
        net(x, net.gathers(), lost={})


@pytest.mark.unit
def test_keep_matrix_never_drops_own_columns() -> None:
    k = keep_matrix(torch.ones(2, 3, 3, dtype=torch.bool))
    assert torch.equal(k, torch.eye(3).expand(2, 3, 3))


@pytest.mark.unit
def test_evaluate_with_loss_draws_the_patterns_cisl_eval_draws() -> None:
    """Same seed and batch: the same loss patterns and the same MSE as `cisl eval`'s float path."""
    from codegen.evaluate import EvalSet, _mse
    from codegen.train.dropout import evaluate_with_loss

    net, w, split, masks = split_model(CFG, 3, 0.5, seed=1)
    st = build_structure(CFG, split, masks, 0.5)
    ex = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float", weights=w)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((100, CFG.lookback)) * 3 + 1).astype(np.float32)
    y = (rng.standard_normal((100, CFG.horizon)) * 3 + 1).astype(np.float32)

    class Raw:
        def __len__(self) -> int:
            return len(x)

        def take(self, idx):
            return x[idx], y[idx]

    rates = LossRates(0.1, 0.05, 0.1)
    ref = _mse(ex, EvalSet.from_raw(x, y, True), None, (rates, 7), 32, None)
    assert evaluate_with_loss(net, Raw(), True, rates, seed=7, batch=32) == pytest.approx(ref, rel=1e-5)
    clean = _mse(ex, EvalSet.from_raw(x, y, True), None, None, 32, None)
    assert evaluate_with_loss(net, Raw(), True, LossRates(), seed=7) == pytest.approx(clean, rel=1e-5)
    assert abs(ref - clean) > 1e-3 * clean


# --------------------------------------------------------------------------------------------
# Rescaling what arrived (issue 16): torch == the float plan executor, and what it changes
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("devices,keep", [(2, 0.5), (3, 0.5), (4, 0.25), (6, 1.0)])
def test_rescaled_losses_equal_the_float_plan_executor(devices: int, keep: float) -> None:
    net, w, split, masks = split_model(CFG, devices, keep, seed=devices)
    net.rescale = True
    st = build_structure(CFG, split, masks, keep, rescale=True)
    assert sum(op.kind == "rescale" for n in st.nodes for op in n.ops) == 4 * CFG.layers * devices
    ex = PlanExecutor([n.tensors for n in st.nodes], [n.ops for n in st.nodes], st.sgs, "float", weights=w)
    plain = build_structure(CFG, split, masks, keep)
    ex0 = PlanExecutor([n.tensors for n in plain.nodes], [n.ops for n in plain.nodes], plain.sgs, "float", weights=w)
    x = windows(24)
    lost = sample_rounds_numpy(np.random.default_rng(devices), len(st.sgs), len(x), devices, LossRates(0.2, 0.1, 0.1))
    ref = ex.run(x, lost=lost).output
    with torch.no_grad():
        got = net(torch.from_numpy(x), lost=lost_from_numpy(lost)).numpy()
    assert np.max(np.abs(got - ref)) < 1e-4
    change = np.max(np.abs(ref - ex0.run(x, lost=lost).output))
    # with two devices a receiver has one sender: all or nothing arrives, and nothing is scaled
    assert change > 1e-2 if devices > 2 else change == 0.0
    # and nothing without loss (float: the head adds the own partial last, a rounding apart)
    assert np.max(np.abs(ex.run(x).output - ex0.run(x).output)) < 1e-5


@pytest.mark.unit
def test_rescale_kernel_rounds_half_away_from_zero_and_saturates() -> None:
    from codegen.ops.rescale import rescale_float
    from codegen.quant.kernels import rescale_s8

    # 6 columns: own [2, 4); the others expect 4 received, 3 arrived (column 5 lost): factor 4/3
    x = np.array([[[3, -3, 9, 9, 100, 7]]], dtype=np.int8)
    valid = np.array([[True, True, True, True, True, False]])
    y = rescale_s8(x, valid, 2, 4, zero_point=0)
    # 3 * 4 / 3 = 4; -3 -> -4; own untouched; 100 * 4 / 3 = 133.3 -> 127; the lost column untouched
    assert y.tolist() == [[[4, -4, 9, 9, 127, 7]]]
    assert rescale_s8(x, valid, 2, 4, zero_point=-3)[0, 0, :2].tolist() == [5, -3]  # around the zero point
    # x - zp = 6, 6 * 4 / 3 = 8 -> 5; x - zp = 0 stays
    everything = np.ones((1, 6), dtype=bool)
    assert np.array_equal(rescale_s8(x, everything, 2, 4, 0), x)  # all arrived: unchanged
    nothing = np.array([[False, False, True, True, False, False]])
    assert np.array_equal(rescale_s8(x, nothing, 2, 4, 0), x)  # nothing arrived: nothing to scale
    np.testing.assert_allclose(rescale_float(x.astype(np.float32), valid, 2, 4)[0, 0], [4, -4, 9, 9, 400 / 3, 7])
    # ties: 3 arrived of 4 expected with x = 3k/4 + 1/2 is never exact; 2 of 4: x * 2, exact
    half = np.array([[True, False, True, True, True, False]])
    assert rescale_s8(np.array([[[5, 0, 0, 0, -5, 0]]], np.int8), half, 2, 4, 0).tolist() == [[[10, 0, 0, 0, -10, 0]]]


@pytest.mark.unit
def test_rescaled_head_reduction_scales_the_partials_that_arrived() -> None:
    """The sink's sum: own + round(S · E / R) in int8 (half away from zero, wrapping), own + S
    when nothing or everything arrived; torch scales the same way (above, against the executor)."""
    from types import SimpleNamespace

    from codegen.ops import REGISTRY
    from codegen.plan.structure import Op

    kind = REGISTRY["reduce_recv"]
    op = Op("reduce_recv", ["own"], ["out"], {"sg": 5, "name": "head", "senders": [1, 2, 3], "weights": [4, 4, 8]})
    own = np.array([[10, -10], [10, -10], [10, -10], [2**31 - 1, 0]], dtype=np.int32)
    msgs = {1: np.array([[3, -3]] * 4), 2: np.array([[5, -5]] * 4), 3: np.array([[1, -1]] * 4)}
    arrived = {1: [True, False, True, True], 2: [True, False, False, True], 3: [True, False, False, False]}
    v = {"own": own}
    kind.receive(SimpleNamespace(mode="int8"), 0, op, v, msgs, lambda j: np.array(arrived[j]), 4)
    # all: own + 9; none: own; only sender 1 (R = 4 of E = 16): own + round(3·16/4) = own + 12;
    # senders 1, 2 (R = 8): 8 · 16 / 8 = 16, and the last row wraps like the C
    assert v["out"].tolist() == [[19, -19], [10, -10], [22, -22], [-(2**31) + 15, -16]]
    v = {"own": own.astype(np.float64)}
    kind.receive(SimpleNamespace(mode="float"), 0, op, v, msgs, lambda j: np.array(arrived[j]), 4)
    assert v["out"][2].tolist() == [22.0, -22.0]
