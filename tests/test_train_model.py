"""The torch split model: D = 1 (and full masks) equal a plain dense pre-norm transformer."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as Fn  # noqa: E402

from codegen.modelspec import ModelConfig, weight_shapes  # noqa: E402
from codegen.partition import Split, full_masks, random_masks  # noqa: E402
from codegen.train.api import make_untrained  # noqa: E402
from codegen.train.model import SplitPatchTST, state_to_numpy  # noqa: E402

CFG = ModelConfig(lookback=40, patch_len=8, stride=4, d_model=24, heads=6, layers=2, mlp_hidden=20, horizon=7)


def dense_reference(cfg: ModelConfig, w: dict[str, np.ndarray], window: torch.Tensor) -> torch.Tensor:
    """An ordinary PatchTST-style pre-norm encoder, written plainly."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    x = window.double()
    if cfg.padding == "end":  # ReplicationPad1d((0, stride))
        x = torch.cat([x, x[:, -1:].repeat(1, cfg.stride)], dim=1)
    patches = x.unfold(1, cfg.patch_len, cfg.stride)  # [B, N, P]
    h = patches @ t["embed.weight"].T + t["embed.bias"] + t["pos"]
    B, N, F = h.shape
    d = F // cfg.heads
    for l in range(cfg.layers):
        p = f"layers.{l}."
        a = Fn.layer_norm(h, (F,), t[p + "ln1.weight"], t[p + "ln1.bias"], cfg.ln_eps)
        q, k, v = ((a @ t[p + n + ".weight"].T + t[p + n + ".bias"]).view(B, N, cfg.heads, d).transpose(1, 2)
                   for n in ("wq", "wk", "wv"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
        h = h + att.transpose(1, 2).reshape(B, N, F) @ t[p + "wo.weight"].T + t[p + "wo.bias"]
        b = Fn.layer_norm(h, (F,), t[p + "ln2.weight"], t[p + "ln2.bias"], cfg.ln_eps)
        z = torch.relu(b @ t[p + "w1.weight"].T + t[p + "w1.bias"])
        h = h + z @ t[p + "w2.weight"].T + t[p + "w2.bias"]
    return h.flatten(1) @ t["head.weight"].T + t["head.bias"]


def windows(n: int = 32, lookback: int = CFG.lookback) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(5).standard_normal((n, lookback)).astype(np.float32))


def split_model(cfg: ModelConfig, devices: int, keep: float, seed: int = 0):
    split = Split.even(devices, cfg.heads, cfg.d_model, cfg.mlp_hidden)
    masks = full_masks(split, cfg.layers) if keep == 1.0 else random_masks(split, cfg.layers, keep, seed)
    w = make_untrained(cfg, split, masks, seed)
    net = SplitPatchTST(cfg, split, masks).eval()
    net.load_numpy(w)
    return net, w


@pytest.mark.unit
@pytest.mark.parametrize("padding", ["end", "none"])
@pytest.mark.parametrize("keep", [1.0, 0.1])
def test_one_device_is_the_dense_model(padding: str, keep: float) -> None:
    """D = 1 has no peers, so the masks cannot matter."""
    cfg = ModelConfig(**{**CFG.__dict__, "padding": padding})
    net, w = split_model(cfg, 1, keep)
    x = windows(lookback=cfg.lookback)
    with torch.no_grad():
        got = net(x).double()
    assert torch.allclose(got, dense_reference(cfg, w, x), atol=1e-5, rtol=0)


@pytest.mark.unit
@pytest.mark.parametrize("devices", [2, 4, 6])
def test_full_masks_are_the_dense_model_for_any_split(devices: int) -> None:
    """With allgather every device holds every column, so device-local LN is the ordinary LN."""
    net, w = split_model(CFG, devices, 1.0)
    x = windows()
    with torch.no_grad():
        got = net(x).double()
    assert torch.allclose(got, dense_reference(CFG, w, x), atol=1e-5, rtol=0)


@pytest.mark.unit
def test_pruned_split_differs_from_dense() -> None:
    net, w = split_model(CFG, 3, 0.3)
    x = windows()
    with torch.no_grad():
        assert (net(x).double() - dense_reference(CFG, w, x)).abs().max() > 1e-3


@pytest.mark.unit
def test_per_sample_gathers_equal_shared_gathers() -> None:
    """The path message dropout will use ([B, D, F] gathers) agrees with the shared-mask path."""
    net, _ = split_model(CFG, 3, 0.5)
    x = windows(8)
    per_sample = [{p: g.expand(len(x), *g.shape) for p, g in layer.items()} for layer in net.gathers()]
    with torch.no_grad():
        assert torch.allclose(net(x, per_sample), net(x), atol=1e-5, rtol=0)


@pytest.mark.unit
def test_per_sample_gathers_drop_messages_per_sample() -> None:
    """Dropping a sender's columns for sample 0 only changes sample 0's forecast."""
    net, _ = split_model(CFG, 3, 1.0)
    x = windows(4)
    gathers = [{p: g.expand(len(x), *g.shape).clone() for p, g in layer.items()} for layer in net.gathers()]
    lo, hi = net.split.model_cols(2)
    gathers[0]["x"][0, 0, lo:hi] = 0.0  # receiver 0 loses sender 2's x columns in sample 0
    with torch.no_grad():
        diff = (net(x, gathers) - net(x)).abs().amax(dim=1)
    assert diff[0] > 1e-3 and torch.all(diff[1:] < 1e-5)  # other samples: only rounding


@pytest.mark.unit
def test_state_dict_is_the_weight_contract() -> None:
    net, w = split_model(CFG, 2, 0.5)
    assert list(net.state_dict()) != [] and set(net.state_dict()) == set(weight_shapes(CFG))
    out = state_to_numpy(net)
    assert list(out) == list(weight_shapes(CFG))
    assert all(out[k].shape == s and out[k].dtype == np.float32 for k, s in weight_shapes(CFG).items())
    assert all(np.array_equal(out[k], w[k]) for k in w)


@pytest.mark.unit
def test_make_untrained_is_seeded_and_nontrivial() -> None:
    split = Split.even(2, CFG.heads, CFG.d_model, CFG.mlp_hidden)
    masks = full_masks(split, CFG.layers)
    a, b, c = (make_untrained(CFG, split, masks, s) for s in (1, 1, 2))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["head.weight"], c["head.weight"])
    assert np.abs(a["layers.0.ln1.weight"] - 1).max() > 0.05 and np.abs(a["layers.0.ln2.bias"]).max() > 0.05


@pytest.mark.unit
def test_gradients_reach_every_parameter() -> None:
    net, _ = split_model(CFG, 3, 0.5)
    net.train()
    net(windows(4)).pow(2).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
