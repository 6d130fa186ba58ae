"""Stepwise pruning: ranking, schedule, somegather vs normal masks, dropped weights, ONNX export."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

torch = pytest.importorskip("torch")

from codegen.modelspec import ModelConfig, weight_shapes  # noqa: E402
from codegen.onnx_model import build_onnx  # noqa: E402
from codegen.partition import POINTS, Split, full_masks, gathered_cols, keep_counts, keep_share  # noqa: E402
from codegen.train.api import make_untrained  # noqa: E402
from codegen.train.model import SplitPatchTST, live_columns, state_to_numpy  # noqa: E402
from codegen.train.pruning import (CONSUMERS, communication, consumer_row_owner, drop_pruned_weights,  # noqa: E402
                                   normal_scores, prune_normal, prune_somegather, run_pruning, schedule,
                                   somegather_scores, stage_counts)

CFG = ModelConfig(lookback=40, patch_len=8, stride=4, d_model=24, heads=6, layers=2, mlp_hidden=20, horizon=7)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and immune to other processes on the cores."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def weights_for(cfg: ModelConfig, split: Split, seed: int) -> dict[str, np.ndarray]:
    return make_untrained(cfg, split, full_masks(split, cfg.layers), seed)


def prune_all(method: str, cfg: ModelConfig, split: Split, target: float, step: float, seed: int = 0):
    """Run every stage on fresh random weights (as if retrained in between); returns the final masks."""
    masks = full_masks(split, cfg.layers)
    for s, counts in enumerate(stage_counts(split, cfg.layers, target, step, method)):
        w = drop_pruned_weights(weights_for(cfg, split, seed + s), split, masks, method)
        masks = (prune_somegather if method == "somegather" else prune_normal)(w, split, masks, counts)
    return masks


def windows(n: int, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, CFG.lookback)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------

TINY = ModelConfig(lookback=16, patch_len=8, stride=8, d_model=4, heads=2, layers=1, mlp_hidden=4, horizon=2)
M = np.array([[100, -2, 3, 4], [5, 6, -7, 8], [9, 10, 11, -12], [13, 14, 15, 16]], dtype=np.float32)


def tiny_weights() -> dict[str, np.ndarray]:
    w = {k: np.zeros(s, np.float32) for k, s in weight_shapes(TINY).items()}
    w["layers.0.wq.weight"] = M.copy()
    w["layers.0.wk.weight"] = np.ones((4, 4), np.float32)
    w["layers.0.wv.weight"] = np.full((4, 4), -0.5, np.float32)
    w["layers.0.wo.weight"] = M.copy()
    w["layers.0.w1.weight"] = M.T.copy()
    w["layers.0.w2.weight"] = 2 * M
    w["head.weight"] = np.ones((2, TINY.tokens * 4), np.float32)
    return w


@pytest.mark.unit
def test_somegather_ranking_hand_computed() -> None:
    """D = 2, columns {0, 1} on device 0 and {2, 3} on device 1; only rows of the other device count."""
    split = Split.even(2, 2, 4, 4)
    w = tiny_weights()
    # W_O: col 0 -> rows 2, 3: 9 + 13; col 1: 10 + 14; col 2 -> rows 0, 1: 3 + 7; col 3: 4 + 8
    np.testing.assert_array_equal(somegather_scores(w, split, 0, "h"), [22, 24, 10, 12])
    # x: W_Q as W_O, plus W_K (2 rows x 1) and W_V (2 rows x 0.5)
    np.testing.assert_array_equal(somegather_scores(w, split, 0, "x"), [25, 27, 13, 15])
    # y: W_1 = M^T [hidden, model]: col c -> rows of the other device = M[c, other]
    np.testing.assert_array_equal(somegather_scores(w, split, 0, "y"), [7, 15, 19, 27])
    np.testing.assert_array_equal(somegather_scores(w, split, 0, "z"), [44, 48, 20, 24])
    # normal pruning counts every row: col 0 of W_O = 100 + 5 + 9 + 13
    sc = normal_scores(w, split, 1)
    np.testing.assert_array_equal(sc["h"][0], [127, 32, 36, 40])
    np.testing.assert_array_equal(sc["z"][0], [254, 64, 72, 80])
    head = TINY.tokens * 2  # |head| column sums: horizon x tokens ones
    qkv1 = np.abs(M).sum(0) + 4 + 2 + np.abs(M.T).sum(0)
    np.testing.assert_array_equal(sc["r"], qkv1 + head)
    # keeping one column per device: somegather keeps 1 and 3 at h, normal keeps 0 (big local weight) and 3
    one = [[{p: 1 for p in POINTS}] * 2]
    sg = prune_somegather(w, split, full_masks(split, 1), one)
    nm = prune_normal(w, split, full_masks(split, 1), one)
    assert sg[0][0]["h"] == [1] and sg[0][1]["h"] == [3]
    assert nm[0][0]["h"] == [0] and nm[0][1]["h"] == [3]


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("width,target,step,expected", [
    (16, 2, 0.1, [14, 12, 10, 8, 6, 4, 2]),
    (8, 4, 0.1, [7, 6, 5, 4]),  # round(0.8) = 1 per stage
    (3, 2, 0.1, [2]),  # round(0.3) = 0 -> at least one
    (10, 3, 0.3, [7, 4, 3]),  # never below the target
    (5, 5, 0.1, []),
    (1, 0, 0.5, [0]),  # a cell may end with nothing to send
    (16, 8, 1.0, [8]),
])
def test_schedule(width: int, target: int, step: float, expected: list[int]) -> None:
    assert schedule(width, target, step) == expected


@pytest.mark.unit
@pytest.mark.parametrize("devices,target,step", [(3, 0.3, 0.25), (4, 0.1, 0.1), (6, 0.5, 0.2), (1, 0.2, 0.1)])
def test_stage_counts_reach_the_target_and_never_undershoot(devices: int, target: float, step: float) -> None:
    cfg = ModelConfig(lookback=40, patch_len=8, stride=4, d_model=24, heads=6, layers=2, mlp_hidden=22)
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    stages = stage_counts(split, cfg.layers, target, step)
    final = keep_counts(split, cfg.layers, target)
    for l in range(cfg.layers):
        for k in range(devices):
            for p in POINTS:
                lo, hi = split.own_cols(k, p)
                w, t = hi - lo, final[l][k][p]
                seq = [w] + [s[l][k][p] for s in stages]
                assert seq[-1] == t and min(seq) == t
                per_stage = max(1, int(np.floor(step * w + 0.5)))
                for a, b in zip(seq, seq[1:]):
                    assert b <= a and (a == t or 1 <= a - b <= per_stage)
    assert len(stages) == max(len(schedule(hi - lo, final[l][k][p], step)) for l in range(cfg.layers)
                              for k in range(devices) for p in POINTS for lo, hi in [split.own_cols(k, p)])


@pytest.mark.unit
@pytest.mark.parametrize("method", ["somegather", "normal"])
def test_stepwise_pruning_keeps_own_columns_and_prunes_the_lowest(method: str) -> None:
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = full_masks(split, CFG.layers)
    for s, counts in enumerate(stage_counts(split, CFG.layers, 0.25, 0.2, method)):
        w = drop_pruned_weights(weights_for(CFG, split, s), split, masks, method)
        new = (prune_somegather if method == "somegather" else prune_normal)(w, split, masks, counts)
        scores = normal_scores(w, split, CFG.layers)
        for l in range(CFG.layers):
            for k in range(3):
                for p in POINTS:
                    before, after = set(masks[l][k][p]), set(new[l][k][p])
                    assert after <= before and len(after) == counts[l][k][p]
                    lo, hi = split.own_cols(k, p)
                    assert set(range(lo, hi)) <= set(gathered_cols(split, new, l, p, k))  # own stay local
                    sc = (somegather_scores(w, split, l, p) if method == "somegather"
                          else scores["r"] if p in ("x", "y") else scores[p][l])
                    if after and before - after:
                        assert max(sc[c] for c in before - after) <= min(sc[c] for c in after)
        masks = new
    final = keep_counts(split, CFG.layers, 0.25, tied_residual=method == "normal")
    assert [[{p: len(e[p]) for p in POINTS} for e in layer] for layer in masks] == final
    if method == "normal":  # one residual column set for the whole network
        assert all(masks[l][k]["x"] == masks[0][k]["x"] == masks[l][k]["y"] for l in range(CFG.layers)
                   for k in range(3))


@pytest.mark.unit
@pytest.mark.parametrize("keep", [0.5, 0.2])
def test_both_methods_send_the_same_number_of_columns(keep: float) -> None:
    split = Split.even(4, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    sg = communication(split, prune_all("somegather", CFG, split, keep, 0.3), CFG.tokens, CFG.horizon)
    nm = communication(split, prune_all("normal", CFG, split, keep, 0.3), CFG.tokens, CFG.horizon)
    assert sg["broadcast_columns"] == nm["broadcast_columns"]
    dense = communication(split, full_masks(split, CFG.layers), CFG.tokens, CFG.horizon)
    assert dense["broadcast_columns"] == dense["allgather_columns"] == CFG.layers * (3 * 24 + 20)
    # exact to a column: round(keep · an allgather's columns), not rounded up per device
    assert sg["broadcast_columns"] == round(keep * dense["broadcast_columns"])
    assert sg["values_per_inference"] == sg["broadcast_columns"] * CFG.tokens


# --------------------------------------------------------------------------------------------
# Dropped weights
# --------------------------------------------------------------------------------------------

def model_with(masks, weights, split, prune_own=False) -> SplitPatchTST:
    net = SplitPatchTST(CFG, split, masks, prune_own=prune_own).eval()
    net.load_numpy(weights)
    return net


@pytest.mark.unit
def test_dropped_cross_weights_are_exactly_the_unbroadcast_ones() -> None:
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = prune_all("somegather", CFG, split, 0.3, 0.25)
    w = weights_for(CFG, split, 7)
    d = drop_pruned_weights(w, split, masks)
    for l in range(CFG.layers):
        for p in POINTS:
            bc = np.zeros(split.width(p), bool)
            for entry in masks[l]:
                bc[entry[p]] = True
            cross = consumer_row_owner(split, p)[:, None] != split.owner_of(p)[None, :]
            for name in CONSUMERS[p]:
                key = f"layers.{l}.{name}.weight"
                dropped = cross & ~bc[None, :]
                assert dropped.any() and np.all(d[key][dropped] == 0)
                np.testing.assert_array_equal(d[key][~dropped], w[key][~dropped])
    untouched = [k for k in w if not any(f".{n}.weight" in k for n in ("wq", "wk", "wv", "wo", "w1", "w2"))]
    assert all(np.array_equal(w[k], d[k]) for k in untouched)
    x = torch.from_numpy(windows(8))
    with torch.no_grad():
        assert torch.allclose(model_with(masks, w, split)(x), model_with(masks, d, split)(x), atol=1e-6)


@pytest.mark.unit
def test_pruned_onnx_has_zero_cross_weights_and_matches_torch() -> None:
    split = Split.even(4, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = prune_all("somegather", CFG, split, 0.4, 0.3)
    w = drop_pruned_weights(weights_for(CFG, split, 3), split, masks)
    proto = build_onnx(CFG, w, split, masks, 0.4, {"test": True})
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for name in weight_shapes(CFG):
        np.testing.assert_array_equal(inits[name], w[name])
    assert np.sum(inits["layers.0.wq.weight"] == 0) > 0.3 * inits["layers.0.wq.weight"].size
    x = windows(16)
    ref = ort.InferenceSession(proto.SerializeToString()).run(["forecast"], {"window": x})[0]
    with torch.no_grad():
        got = model_with(masks, w, split)(torch.from_numpy(x)).numpy()
    assert np.max(np.abs(got - ref)) < 1e-4
    onnx.checker.check_model(proto)


# --------------------------------------------------------------------------------------------
# Normal pruning: dead columns are dead
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_normal_pruned_columns_are_dead() -> None:
    """Changing anything attached to a pruned column, or its value in the residual stream, changes nothing."""
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = prune_all("normal", CFG, split, 0.5, 0.5)
    live = live_columns(split, masks)
    dr = ~live["r"]
    assert dr.any() and all((~h).any() for h in live["h"]) and all((~z).any() for z in live["z"])
    w = weights_for(CFG, split, 11)
    net = model_with(masks, w, split, prune_own=True)
    x = torch.from_numpy(windows(8))
    with torch.no_grad():
        ref = net(x)
    assert torch.allclose(model_with(masks, drop_pruned_weights(w, split, masks, "normal"), split, True)(x), ref,
                          atol=1e-6)

    rng = np.random.default_rng(0)
    noisy = {k: v.copy() for k, v in w.items()}

    def scramble(key: str, index) -> None:
        a = noisy[key]
        a[index] = rng.standard_normal(a[index].shape) * 10

    scramble("embed.weight", dr)
    scramble("embed.bias", dr)
    scramble("pos", (slice(None), dr))
    noisy["head.weight"].reshape(CFG.horizon, CFG.tokens, CFG.d_model)[:, :, dr] = 7.0
    for l in range(CFG.layers):
        p = f"layers.{l}."
        dh, dz = ~live["h"][l], ~live["z"][l]
        for ln in ("ln1", "ln2"):
            scramble(p + ln + ".weight", dr)
            scramble(p + ln + ".bias", dr)
        for n in ("wq", "wk", "wv", "w1"):
            scramble(p + n + ".weight", (slice(None), dr))
        for n in ("wo", "w2"):
            scramble(p + n + ".weight", dr)
            scramble(p + n + ".bias", dr)
        scramble(p + "wv.weight", dh)
        scramble(p + "wv.bias", dh)
        scramble(p + "wo.weight", (slice(None), dh))
        scramble(p + "w1.weight", dz)
        scramble(p + "w1.bias", dz)
        scramble(p + "w2.weight", (slice(None), dz))
    changed = model_with(masks, noisy, split, prune_own=True)
    with torch.no_grad():
        assert torch.allclose(changed(x), ref, atol=1e-5)

    # values injected into the dead residual columns at every layer's input do not reach the output
    noise = torch.zeros(CFG.d_model)
    noise[torch.from_numpy(dr)] = 5.0
    hooks = [layer.register_forward_pre_hook(lambda m, args: (args[0] + noise,) + args[1:]) for layer in net.layers]
    with torch.no_grad():
        assert torch.allclose(net(x), ref, atol=1e-5)
        for h in hooks:
            h.remove()
        live_noise = torch.zeros(CFG.d_model)
        live_noise[int(np.flatnonzero(live["r"])[0])] = 5.0
        net.layers[0].register_forward_pre_hook(lambda m, args: (args[0] + live_noise,) + args[1:])
        assert (net(x) - ref).abs().max() > 1e-3  # a live column does matter


@pytest.mark.unit
def test_normal_masks_must_share_the_residual_set() -> None:
    split = Split.even(2, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = full_masks(split, CFG.layers)
    masks[1][0]["y"] = masks[1][0]["y"][:-1]
    SplitPatchTST(CFG, split, masks)  # fine for somegather
    with pytest.raises(ValueError, match="same residual columns"):
        SplitPatchTST(CFG, split, masks, prune_own=True)


# --------------------------------------------------------------------------------------------
# The stepwise loop (training replaced by a callback)
# --------------------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("method", ["somegather", "normal"])
def test_run_pruning_stages_and_final_masks(method: str) -> None:
    split = Split.even(3, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    net = model_with(full_masks(split, CFG.layers), weights_for(CFG, split, 1), split)
    calls = []

    def train(tag: str, epochs: int) -> dict:
        calls.append((tag, epochs, [list(m) for m in net.masks[0][0].values()]))
        return {"val_mse": float(len(calls))}

    history = run_pruning(net, method, 0.3, 0.25, epochs_per_step=2, finetune_epochs=1, train=train)
    n = len(stage_counts(split, CFG.layers, 0.3, 0.25, method))
    assert n >= 3 and len(history) == n + 1 and history[-1]["stage"] == "finetune"
    assert [c[:2] for c in calls] == [(f"prune {s}/{n}", 2) for s in range(1, n + 1)] + [("finetune", 1)]
    assert [h["val_mse"] for h in history] == [float(i) for i in range(1, n + 2)]
    assert net.prune_own == (method == "normal")
    final = [[{p: len(e[p]) for p in POINTS} for e in layer] for layer in net.masks]
    assert final == keep_counts(split, CFG.layers, 0.3, tied_residual=method == "normal")
    assert keep_share(split, final) == pytest.approx(0.3, abs=0.5 / (CFG.layers * (3 * 24 + 20)))
    state = state_to_numpy(net)
    dropped = drop_pruned_weights(state, split, net.masks, method)
    assert all(np.array_equal(state[k], dropped[k]) for k in state)  # the model holds the dropped weights


@pytest.mark.unit
@pytest.mark.parametrize("devices,layers,keep", [(16, 6, 0.1), (8, 6, 0.1), (3, 2, 0.37), (5, 3, 0.77), (4, 1, 1.0),
                                                 (16, 2, 0.01)])
def test_keep_counts_are_exact_and_spread(devices: int, layers: int, keep: float) -> None:
    """The network-wide share is round(keep · allgather) columns (issue 16: 'keep 0.1' used to mean
    0.125 at 8 columns per device), spread over devices and rounds to within a column or two."""
    split = Split.even(devices, 16, 128, 128)
    counts = keep_counts(split, layers, keep)
    dense = layers * (3 * 128 + 128)
    assert sum(sum(e.values()) for layer in counts for e in layer) == round(keep * dense)
    assert keep_share(split, counts) == pytest.approx(keep, abs=0.5 / dense)
    for l in range(layers):
        for k in range(devices):
            for p in POINTS:
                lo, hi = split.own_cols(k, p)
                assert 0 <= counts[l][k][p] <= hi - lo
    # equal devices get equal shares up to the remainder, and so do the rounds
    per_device = [sum(sum(layer[k].values()) for layer in counts) for k in range(devices)]
    for k in range(devices):
        own = layers * sum(hi - lo for p in POINTS for lo, hi in [split.own_cols(k, p)])
        assert abs(per_device[k] - keep * own) <= 2
    per_round = [sum(layer[k][p] for k in range(devices)) for layer in counts for p in ("x", "h", "y")]
    assert max(per_round) - min(per_round) <= 1
    tied = keep_counts(split, layers, keep, tied_residual=True)
    assert all(tied[l][k]["x"] == tied[l][k]["y"] == tied[0][k]["x"] >= 1 for l in range(layers) for k in range(devices))
