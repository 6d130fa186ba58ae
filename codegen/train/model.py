"""The split PatchTST in torch, computing exactly the D-way split model of decisions.md §2-§3.

Memory matters (training uses D = 16 and big batches), so no [B, D, N, F] tensor is built for the
shared masks. A device k holds the columns G[k] (the gather matrix, [D, F]) at each somegather
point. Device-local LayerNorm statistics come from two matmuls with G, and a consumer output o,
computed by its owner k(o), sees only the columns G[k(o)]:

    LN consumer:  y_o = rstd_k(o) ((x∘γ) W'_o^T − μ_k(o) (W'γ)_o) + (W'β)_o + b_o,  W' = W ∘ G[k(o), :]
    h/z points:   y_o = x W'_o^T + b_o

Message dropout (a later issue) will hand per-sample gather matrices [B, D, F] to `forward`;
that path is implemented here (a loop over devices) and equals the shared path when the
per-sample matrices are all the same.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from codegen.modelspec import ModelConfig, patch_index, weight_shapes
from codegen.partition import POINTS, Masks, Split, gather_matrix

Gathers = list[dict[str, Tensor]]
"""gathers[layer][point]: [D, width] (shared by the batch) or [B, D, width] (per sample), 0/1 float."""


def _stats(x: Tensor, g: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Per-device LN statistics over the held columns: centred x, mean and rstd [B, N, D].

    x is first shifted by its full-row mean: LayerNorm is shift invariant and the shift keeps
    E[x²] − μ² from cancelling catastrophically when the residual stream has a large offset.
    """
    xc = x - x.mean(dim=-1, keepdim=True).detach()
    if g.dim() == 2:
        n = g.sum(dim=1)
        mu = xc @ g.t() / n
        ex2 = (xc * xc) @ g.t() / n
    else:
        n = g.sum(dim=2).unsqueeze(1)  # [B, 1, D]
        mu = torch.einsum("bnf,bdf->bnd", xc, g) / n
        ex2 = torch.einsum("bnf,bdf->bnd", xc * xc, g) / n
    rstd = torch.rsqrt((ex2 - mu * mu).clamp_min(0.0) + eps)
    return xc, mu, rstd


def _per_device(owner: Tensor, devices: int, fn) -> Tensor:
    """Concatenate fn(k, rows_k) [B, N, |rows_k|] over devices back into global output order."""
    rows = [torch.nonzero(owner == k).squeeze(1) for k in range(devices)]
    out = torch.cat([fn(k, r) for k, r in enumerate(rows)], dim=-1)
    order = torch.cat(rows)
    if torch.equal(order, torch.arange(len(order), device=order.device)):
        return out
    return out[..., torch.argsort(order)]


def local_ln_linear(x: Tensor, g: Tensor, gamma: Tensor, beta: Tensor, weight: Tensor, bias: Tensor,
                    owner: Tensor, eps: float) -> Tensor:
    """Device-local LayerNorm over the held columns, then each output's owner's slice of the weight."""
    xc, mu, rstd = _stats(x, g, eps)
    if g.dim() == 2:
        wm = weight * g[owner]                     # W' = W ∘ G[k(o), :]
        wg = wm * gamma                            # (x∘γ) W'^T = x (W'∘γ)^T
        t = xc @ wg.t()
        # Per-device statistics reach the outputs through one-hot matmuls [D, O]: their backward is a
        # matmul too (the scatter-add behind rstd[..., owner] is slow), and the mean term keeps no
        # [B, N, O] tensor for backward.
        onehot = Fn.one_hot(owner, g.shape[0]).t().to(x.dtype)
        return (rstd @ onehot) * t - (rstd * mu) @ (onehot * wg.sum(dim=1)) + (wm @ beta + bias)

    def device(k: int, rows: Tensor) -> Tensor:
        gk = g[:, k, :]                            # [B, F]
        w = weight[rows]
        wg = w * gamma
        t = (xc * gk.unsqueeze(1)) @ wg.t()        # [B, N, O_k]
        wg_sum = (gk @ wg.t()).unsqueeze(1)        # (W'γ)_o per sample
        wb = (gk @ (w * beta).t()).unsqueeze(1)    # (W'β)_o per sample
        return rstd[..., k:k + 1] * (t - mu[..., k:k + 1] * wg_sum) + wb + bias[rows]

    return _per_device(owner, g.shape[1], device)


def masked_linear(x: Tensor, g: Tensor, weight: Tensor, bias: Tensor, owner: Tensor) -> Tensor:
    """x W'^T + b where output o sees only the columns its owner holds (h- and z-points)."""
    if g.dim() == 2:
        return x @ (weight * g[owner]).t() + bias

    def device(k: int, rows: Tensor) -> Tensor:
        return (x * g[:, k, :].unsqueeze(1)) @ weight[rows].t() + bias[rows]

    return _per_device(owner, g.shape[1], device)


class SplitLayer(nn.Module):
    """One pre-norm layer; parameter names follow `weight_shapes` (ln1, wq, ..., w2)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        F, Fh = cfg.d_model, cfg.mlp_hidden
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(F, eps=cfg.ln_eps)  # only its parameters are used: the norm is device-local
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(F, F) for _ in range(4))
        self.ln2 = nn.LayerNorm(F, eps=cfg.ln_eps)
        self.w1 = nn.Linear(F, Fh)
        self.w2 = nn.Linear(Fh, F)

    def forward(self, x: Tensor, g: dict[str, Tensor], owner_model: Tensor, owner_hidden: Tensor) -> Tensor:
        cfg = self.cfg
        B, N, F = x.shape
        # Q, K and V share the x-point gather and LN statistics: one matmul for all three.
        w_qkv = torch.cat([self.wq.weight, self.wk.weight, self.wv.weight])
        b_qkv = torch.cat([self.wq.bias, self.wk.bias, self.wv.bias])
        qkv = local_ln_linear(x, g["x"], self.ln1.weight, self.ln1.bias, w_qkv, b_qkv,
                              owner_model.repeat(3), cfg.ln_eps)
        q, k, v = (t.view(B, N, cfg.heads, cfg.d_head).transpose(1, 2) for t in qkv.split(F, dim=-1))
        h = Fn.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, F)
        y = x + masked_linear(h, g["h"], self.wo.weight, self.wo.bias, owner_model)
        z = torch.relu(local_ln_linear(y, g["y"], self.ln2.weight, self.ln2.bias, self.w1.weight, self.w1.bias,
                                       owner_hidden, cfg.ln_eps))
        return y + masked_linear(z, g["z"], self.w2.weight, self.w2.bias, owner_model)


class SplitPatchTST(nn.Module):
    """forward(window [B, L], normalised) -> forecast [B, horizon] of the split model."""

    def __init__(self, cfg: ModelConfig, split: Split, masks: Masks) -> None:
        super().__init__()
        problems = cfg.problems()
        if problems:
            raise ValueError("invalid ModelConfig: " + "; ".join(problems))
        if (split.heads, split.d_model, split.mlp_hidden) != (cfg.heads, cfg.d_model, cfg.mlp_hidden):
            raise ValueError("split does not match the model config")
        self.cfg, self.split = cfg, split
        self.embed = nn.Linear(cfg.patch_len, cfg.d_model)
        self.pos = nn.Parameter(torch.empty(cfg.tokens, cfg.d_model).uniform_(-0.02, 0.02))  # PatchTST learned pe
        self.layers = nn.ModuleList(SplitLayer(cfg) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.tokens * cfg.d_model, cfg.horizon)
        self.register_buffer("patch_idx", torch.from_numpy(patch_index(cfg)), persistent=False)
        self.register_buffer("owner_model", torch.from_numpy(split.owner_of("x")), persistent=False)
        self.register_buffer("owner_hidden", torch.from_numpy(split.owner_of("z")), persistent=False)
        self.set_masks(masks)

    def set_masks(self, masks: Masks) -> None:
        """Install somegather masks as gather matrices (non-persistent buffers `gather_<point>`)."""
        for l, layer in enumerate(self.layers):
            for p in POINTS:
                g = torch.from_numpy(gather_matrix(self.split, masks, l, p).astype(np.float32))
                layer.register_buffer(f"gather_{p}", g, persistent=False)

    def gathers(self) -> Gathers:
        """The installed gather matrices; message dropout derives per-sample ones from these."""
        return [{p: getattr(layer, f"gather_{p}") for p in POINTS} for layer in self.layers]

    def forward(self, window: Tensor, gathers: Gathers | None = None) -> Tensor:
        gathers = self.gathers() if gathers is None else gathers
        x = self.embed(window[:, self.patch_idx]) + self.pos  # [B, N, F]
        for layer, g in zip(self.layers, gathers):
            x = layer(x, g, self.owner_model, self.owner_hidden)
        return self.head(x.flatten(1))

    def load_numpy(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights named as in `weight_shapes` (e.g. from a model.onnx)."""
        self.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in weights.items()})


def state_to_numpy(model: SplitPatchTST) -> dict[str, np.ndarray]:
    """float32 copies of the weights, keyed and ordered as `weight_shapes(cfg)`."""
    state = model.state_dict()
    shapes = weight_shapes(model.cfg)
    if set(state) != set(shapes):
        raise AssertionError(f"state_dict keys differ from weight_shapes: {sorted(set(state) ^ set(shapes))}")
    return {name: state[name].detach().cpu().numpy().astype(np.float32).copy() for name in shapes}
