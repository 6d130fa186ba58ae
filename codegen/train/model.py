"""The split PatchTST in torch, computing exactly the D-way split model of decisions.md §2-§3.

Memory matters (training uses D = 16 and big batches), so no [B, D, N, F] tensor is built. A
device k holds the columns G[k] (the gather matrix, [D, F]) at each somegather point.
Device-local LayerNorm statistics come from two matmuls with G, and a consumer output o,
computed by its owner k(o), sees only the columns G[k(o)]:

    LN consumer:  y_o = rstd_k(o) ((x∘γ) W'_o^T − μ_k(o) (W'γ)_o) + (W'β)_o + b_o,  W' = W ∘ G[k(o), :]
    h/z points:   y_o = x W'_o^T + b_o

Message dropout gives every sample its own gather matrices g [B, D, F] (a lost message clears
the sender's columns in the receiver's row). The same formulas then hold per sample; the products
x ∘ g[b, k] W_k^T are computed by `receiver_matmul`, which keeps only x and g for backward and
never materialises a tensor per device and sample of activations. The head's partial sums of
devices whose message to the sink is lost are left out of the forecast.

Normal pruning (the Q3 baseline, `set_masks(..., prune_own=True)`) reuses the same machinery: a
column nobody broadcasts is dead for its owner too, so it is removed from every gather matrix and
its producer rows are masked (residual columns in embed/pos/W_O/W_2, head-output columns in W_V,
hidden columns in W_1).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as Fn
from torch import Tensor, nn

from codegen.lossmodel import LossRates
from codegen.modelspec import ModelConfig, patch_index, weight_shapes
from codegen.partition import POINTS, Masks, Split, gather_matrix, validate_masks
from codegen.plan.structure import SINK
from codegen.train import dropout as msgdrop

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
        mu = torch.bmm(xc, g.transpose(1, 2)) / n
        ex2 = torch.bmm(xc * xc, g.transpose(1, 2)) / n
    rstd = torch.rsqrt((ex2 - mu * mu).clamp_min(0.0) + eps)
    return xc, mu, rstd


# --------------------------------------------------------------------------------------------
# Per-sample gathers
# --------------------------------------------------------------------------------------------

def _runs_by_owner(owner: Tensor, devices: int) -> list[list[tuple[int, int]]]:
    """Per device, the contiguous runs [lo, hi) of outputs it owns (1 run per device for W_O/W_1/W_2,
    3 for the concatenated Q, K, V): slices, not index tensors, keep the copies cheap."""
    cuts = (torch.nonzero(owner[1:] != owner[:-1]).squeeze(1) + 1).tolist()
    bounds = [0] + cuts + [len(owner)]
    who = owner[torch.tensor(bounds[:-1], dtype=torch.long)].tolist()
    runs: list[list[tuple[int, int]]] = [[] for _ in range(devices)]
    for k, lo, hi in zip(who, bounds[:-1], bounds[1:]):
        runs[k].append((lo, hi))
    return runs


def _rows(t: Tensor, runs: list[tuple[int, int]], dim: int) -> Tensor:
    parts = [t.narrow(dim, lo, hi - lo) for lo, hi in runs]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def _use_sample_weights(x: Tensor, g: Tensor, outputs: int) -> bool:
    """Pick the cheaper of the two equivalent ways.

    Per receiver: D masked copies of x (≈ 0.45 ns per element of D·B·N·F on 2 CPU cores, fwd+bwd).
    Per sample: masked weights B·O·F and batched matmuls (≈ 2 ns per element). Measured at B = 256,
    N = 42, F = 128: O = 128 favours per-sample weights at D = 16 and per-receiver masks at D = 8;
    Q, K, V together (O = 384) favour per-receiver masks.
    """
    return 4 * outputs <= g.shape[1] * x.shape[1]


class _ReceiverMatmul(torch.autograd.Function):
    """out[b, n, o] = Σ_f x[b, n, f] · g[b, owner(o), f] · w[o, f]; g carries no gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, g: Tensor, w: Tensor, owner: Tensor) -> Tensor:  # type: ignore[override]
        B, N, F = x.shape
        D, O = g.shape[1], w.shape[0]
        sample = _use_sample_weights(x, g, O)
        ctx.save_for_backward(x, g, w, owner)
        ctx.sample = sample
        if sample:
            return torch.bmm(x, (w * g[:, owner, :]).transpose(1, 2))
        runs = _runs_by_owner(owner, D)
        ctx.runs = runs
        outs = {}
        for k, rk in enumerate(runs):
            if rk:
                outs[k] = torch.matmul(x * g[:, k, None, :], _rows(w, rk, 0).t())
        if all(len(rk) <= 1 for rk in runs) and owner.is_contiguous() and bool((owner[1:] >= owner[:-1]).all()):
            return torch.cat([outs[k] for k in sorted(outs)], dim=-1)  # sorted owners: one copy
        out = x.new_empty(B, N, O)
        for k, rk in enumerate(runs):
            a = 0
            for lo, hi in rk:
                out[..., lo:hi] = outs[k][..., a:a + hi - lo]
                a += hi - lo
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, g, w, owner = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
        gx = gw = None
        F = x.shape[-1]
        if ctx.sample:
            mask = g[:, owner, :]  # [B, O, F]
            if need_x:
                gx = torch.bmm(grad, w * mask)
            if need_w:
                gw = (torch.bmm(grad.transpose(1, 2), x) * mask).sum(dim=0)
            return gx, None, gw, None
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.empty_like(w) if need_w else None
        for k, rk in enumerate(ctx.runs):
            if not rk:
                continue
            mk = g[:, k, None, :]
            gk = _rows(grad, rk, -1)
            if need_x:
                gx.addcmul_(torch.matmul(gk, _rows(w, rk, 0)), mk)
            if need_w:
                gwk = gk.reshape(-1, gk.shape[-1]).t() @ (x * mk).reshape(-1, F)
                a = 0
                for lo, hi in rk:
                    gw[lo:hi] = gwk[a:a + hi - lo]
                    a += hi - lo
        return gx, None, gw, None


def receiver_matmul(x: Tensor, g: Tensor, w: Tensor, owner: Tensor) -> Tensor:
    """[B, N, O]: output o of sample b sees x[b] through the columns g[b, owner(o)] holds.

    Equal to ``einsum("bnf,bof,of->bno", x, g[:, owner], w)`` without building per-sample
    activation copies for backward (only x, g and w are kept).
    """
    return _ReceiverMatmul.apply(x, g.detach(), w, owner)


def local_ln_linear(x: Tensor, g: Tensor, gamma: Tensor, beta: Tensor, weight: Tensor, bias: Tensor,
                    owner: Tensor, eps: float, gs: Tensor | None = None) -> Tensor:
    """Device-local LayerNorm over the held columns, then each output's owner's slice of the weight.

    ``gs`` (per sample, with message loss and rescaling): the gather matrix with every received
    column's factor E / R, applied to the normalised columns; the statistics use ``g``."""
    xc, mu, rstd = _stats(x, g, eps)
    if gs is not None and g.dim() == 3:
        g = gs
    D = g.shape[-2]
    # Per-device statistics reach the outputs through one-hot matmuls [D, O]: their backward is a
    # matmul too (the scatter-add behind rstd[..., owner] is slow).
    onehot = Fn.one_hot(owner, D).t().to(x.dtype)
    if g.dim() == 2:
        wm = weight * g[owner]                     # W' = W ∘ G[k(o), :]
        wg = wm * gamma                            # (x∘γ) W'^T = x (W'∘γ)^T
        t = xc @ wg.t()
        # The mean term keeps no [B, N, O] tensor for backward.
        return (rstd @ onehot) * t - (rstd * mu) @ (onehot * wg.sum(dim=1)) + (wm @ beta + bias)
    wg = weight * gamma
    t = receiver_matmul(xc, g, wg, owner)
    ones = x.new_ones(x.shape[0], 1, x.shape[-1])
    sums = receiver_matmul(ones, g, torch.cat([wg, weight * beta]), owner.repeat(2)).squeeze(1)  # [B, 2O]
    wg_sum, wb = sums.split(weight.shape[0], dim=-1)  # per sample: (W'γ)_o and (W'β)_o
    return (rstd @ onehot) * t - ((rstd * mu) @ onehot) * wg_sum.unsqueeze(1) + (wb + bias).unsqueeze(1)


def masked_linear(x: Tensor, g: Tensor, weight: Tensor, bias: Tensor, owner: Tensor) -> Tensor:
    """x W'^T + b where output o sees only the columns its owner holds (h- and z-points)."""
    if g.dim() == 2:
        return x @ (weight * g[owner]).t() + bias
    return receiver_matmul(x, g, weight, owner) + bias


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

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

    def forward(self, x: Tensor, g: dict[str, Tensor], owner_model: Tensor, owner_hidden: Tensor,
                alive: dict[str, Tensor] | None = None, gs: dict[str, Tensor] | None = None) -> Tensor:
        """``alive``: 0/1 masks of the live columns — "r" (residual), "h", "z" (normal pruning) and "qk"
        (the Q/K dimensions an elastic mode keeps); a missing or None mask keeps everything.
        ``gs``: the per-sample gathers with the rescaling factors (`SplitPatchTST.rescale`)."""
        gs = g if gs is None else gs
        cfg = self.cfg
        B, N, F = x.shape
        wq, bq, wk, bk, wv, bv = (self.wq.weight, self.wq.bias, self.wk.weight, self.wk.bias, self.wv.weight,
                                  self.wv.bias)
        wo, bo, w1, b1, w2, b2 = (self.wo.weight, self.wo.bias, self.w1.weight, self.w1.bias, self.w2.weight,
                                  self.w2.bias)
        alive = alive or {}
        r, ah, az, aqk = (alive.get(key) for key in ("r", "h", "z", "qk"))
        # a dead column's producer gives 0 (so its consumers see nothing of it)
        if ah is not None:
            wv, bv = wv * ah[:, None], bv * ah
        if r is not None:
            wo, bo, w2, b2 = wo * r[:, None], bo * r, w2 * r[:, None], b2 * r
        if az is not None:
            w1, b1 = w1 * az[:, None], b1 * az
        if aqk is not None:  # a dead Q/K dimension adds nothing to the scores
            wq, bq, wk, bk = wq * aqk[:, None], bq * aqk, wk * aqk[:, None], bk * aqk
        # Q, K and V share the x-point gather and LN statistics: one matmul for all three.
        w_qkv = torch.cat([wq, wk, wv])
        b_qkv = torch.cat([bq, bk, bv])
        qkv = local_ln_linear(x, g["x"], self.ln1.weight, self.ln1.bias, w_qkv, b_qkv,
                              owner_model.repeat(3), cfg.ln_eps, gs["x"])
        q, k, v = (t.view(B, N, cfg.heads, cfg.d_head).transpose(1, 2) for t in qkv.split(F, dim=-1))
        h = Fn.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, F)
        y = x + masked_linear(h, gs["h"], wo, bo, owner_model)
        z = torch.relu(local_ln_linear(y, g["y"], self.ln2.weight, self.ln2.bias, w1, b1, owner_hidden, cfg.ln_eps,
                                       gs["y"]))
        return y + masked_linear(z, gs["z"], w2, b2, owner_model)


class SplitPatchTST(nn.Module):
    """forward(window [B, L], normalised) -> forecast [B, horizon] of the split model.

    ``forward(window, lost={sg: bool [B, D, D]})`` applies the given message losses (rounds
    numbered as plan.json's sg; torch tensors or the numpy arrays `codegen.executor` takes; a
    missing round loses nothing); in training mode, after `set_message_dropout`, losses are drawn
    for every step. ``forward(window, gathers)`` takes explicit (per-sample) gather matrices.
    """

    def __init__(self, cfg: ModelConfig, split: Split, masks: Masks, prune_own: bool = False,
                 rescale: bool = False) -> None:
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
        self.loss_rates: LossRates | msgdrop.LossRange | None = None
        self.loss_clean = 0.0  # share of loss-free training samples (set_message_dropout)
        # what arrived from the other devices is scaled by expected / delivered columns (the plan's
        # `rescale` op): a lost message then does not shrink the consumers' input
        self.rescale = rescale
        self.units: list[dict[str, Tensor]] | None = None  # an elastic mode's units (set_units)
        self.set_masks(masks, prune_own)

    # ------------------------------------------------------------------ masks
    def set_masks(self, masks: Masks, prune_own: bool = False) -> None:
        """Install somegather masks as gather matrices (non-persistent buffers `gather_<point>`).

        ``prune_own`` (normal pruning): a column that is not broadcast is pruned for its owner as
        well. Then the residual stream (x and y points of every layer) must keep the same columns
        everywhere; its dead columns are zero and excluded from every LayerNorm and consumer.
        """
        problem = validate_masks(self.split, masks, self.cfg.layers)
        if problem:
            raise ValueError("invalid masks: " + problem)
        self.masks: Masks = copy.deepcopy(masks)
        self.prune_own = prune_own
        alive = live_columns(self.split, masks) if prune_own else None
        if alive is not None:
            self.register_buffer("alive_r", torch.from_numpy(alive["r"].astype(np.float32)), persistent=False)
        for l, layer in enumerate(self.layers):
            for p in POINTS:
                g = gather_matrix(self.split, masks, l, p)
                if alive is not None:
                    g &= (alive["r"] if p in ("x", "y") else alive[p][l])[None, :]
                layer.register_buffer(f"gather_{p}", torch.from_numpy(g.astype(np.float32)), persistent=False)
            if alive is not None:
                layer.register_buffer("alive_h", torch.from_numpy(alive["h"][l].astype(np.float32)), persistent=False)
                layer.register_buffer("alive_z", torch.from_numpy(alive["z"][l].astype(np.float32)), persistent=False)

    def gathers(self) -> Gathers:
        """The installed gather matrices; message dropout derives per-sample ones from these."""
        return [{p: getattr(layer, f"gather_{p}") for p in POINTS} for layer in self.layers]

    def set_message_dropout(self, rates: LossRates | msgdrop.LossRange | None, clean: float = 0.0) -> None:
        """Draw message losses at these rates (or a rate per sample from this range) in every
        training-mode forward (None/zero: off); each sample is loss-free with probability ``clean``
        (`codegen.train.dropout.sample_rounds`)."""
        self.loss_rates = rates if rates is not None and rates.any else None
        if not 0.0 <= clean < 1.0:
            raise ValueError(f"clean={clean} must be in [0, 1)")
        self.loss_clean = clean if self.loss_rates is not None else 0.0

    # ---------------------------------------------------------------- forward
    def forward(self, window: Tensor, gathers: Gathers | None = None,
                lost: msgdrop.LostRounds | None = None) -> Tensor:
        B, D = window.shape[0], self.split.devices
        if gathers is not None and lost is not None:
            raise ValueError("pass either gathers or lost, not both")
        if gathers is None and lost is None and self.training and self.loss_rates is not None and D > 1:
            lost = msgdrop.sample_rounds(self.cfg.layers, B, D, self.loss_rates, clean=self.loss_clean)
        if lost is not None:  # numpy arrays (the executor's ``lost`` dict) are fine too
            lost = {int(sg): torch.as_tensor(v, dtype=torch.bool) for sg, v in lost.items()}
            msgdrop.check_lost(lost, self.cfg.layers, B, D)
        base = self.gathers() if gathers is None else gathers
        alive_r = getattr(self, "alive_r", None) if self.prune_own else None

        x = self.embed(window[:, self.patch_idx]) + self.pos  # [B, N, F]
        if alive_r is not None:
            x = x * alive_r
        for l, (layer, g) in enumerate(zip(self.layers, base)):
            gs = None
            if lost is not None and D > 1:
                both = {p: self._lost_gather(g[p], lost.get(msgdrop.round_of(l, p)), p) for p in POINTS}
                g, gs = {p: v[0] for p, v in both.items()}, {p: v[1] for p, v in both.items()}
            x = layer(x, g, self.owner_model, self.owner_hidden, self._alive(l, alive_r), gs)
        cols = alive_r  # which columns of X_T reach the forecast
        head_lost = lost.get(msgdrop.head_round(self.cfg.layers)) if lost is not None and D > 1 else None
        if head_lost is not None and bool(head_lost.any()):
            partial_kept = msgdrop.keep_matrix(head_lost)[:, SINK, :].to(x.dtype)  # [B, D]: the sink got j's partial
            if self.rescale:  # the received partials times E / R (the plan's reduce_recv weights)
                partial_kept = partial_kept * self._head_factor(partial_kept)
            cols = partial_kept[:, self.owner_model] * (1.0 if alive_r is None else alive_r)
            x = x * cols.unsqueeze(1)
        elif cols is not None:
            x = x * cols
        return self.head(x.flatten(1))

    # ------------------------------------------------------------- elastic modes
    def set_units(self, units: list[dict[str, Tensor]] | None) -> None:
        """Run as one elastic mode (codegen.train.elastic): ``units[layer]`` = 0/1 float masks "qk"
        [F] (Q/K dimensions), "v" [F] (V dimensions, i.e. head-output columns) and "z" [F_h] (MLP
        hidden units) the mode keeps; None: every unit (the model as trained). They combine with
        normal pruning's live columns."""
        if units is not None and len(units) != self.cfg.layers:
            raise ValueError(f"units for {len(units)} layers, the model has {self.cfg.layers}")
        self.units = units

    def _alive(self, l: int, alive_r: Tensor | None) -> dict[str, Tensor | None] | None:
        """The live-column masks of layer ``l``: normal pruning's and the elastic mode's, combined."""
        layer, units = self.layers[l], self.units
        alive: dict[str, Tensor | None] = ({"r": alive_r, "h": layer.alive_h, "z": layer.alive_z}
                                           if alive_r is not None else {})
        if units is None:
            return alive or None
        u = units[l]
        for key, point in (("h", "v"), ("z", "z")):
            alive[key] = u[point] if alive.get(key) is None else alive[key] * u[point]
        alive["qk"] = u["qk"]
        return alive

    def _head_factor(self, partial_kept: Tensor) -> Tensor:
        """[B, D] factors for the head's partial sums: E / R on the other devices' partials, 1 on
        the sink's own (E: the columns the sink expects partials for, R: those that arrived)."""
        D = partial_kept.shape[1]
        cols = torch.bincount(self.owner_model, minlength=D).to(partial_kept.dtype)  # columns per device
        others = torch.ones(D, dtype=partial_kept.dtype, device=partial_kept.device)
        others[SINK] = 0.0
        weights = cols * others
        expected = weights.sum()
        got = (partial_kept * weights).sum(-1, keepdim=True)  # [B, 1]
        factor = torch.where((got > 0) & (got < expected), expected / got.clamp_min(1.0), torch.ones_like(got))
        return 1.0 + (factor - 1.0) * others

    def _lost_gather(self, g: Tensor, lost: Tensor | None, point: str) -> tuple[Tensor, Tensor]:
        """Per-sample gathers [B, D, width]: a lost message clears the sender's columns for the receiver.

        Returns (held columns, the same with the factor E / R on every received column when
        `rescale` is on: E the columns the receiver expects from the others, R those that arrived)."""
        if lost is None or not bool(lost.any()):
            return g, g
        owner = self.owner_hidden if point == "z" else self.owner_model
        keep = msgdrop.keep_matrix(lost)[:, :, owner]  # [B, receiver, column]: the column's sender got through
        held = g * keep if g.dim() == 3 else g.unsqueeze(0) * keep
        if not self.rescale:
            return held, held
        D = held.shape[1]
        cross = (owner[None, :] != torch.arange(D, device=owner.device)[:, None]).to(held.dtype)  # [D, width]
        base = g if g.dim() == 3 else g.unsqueeze(0)
        expected = (base * cross).sum(-1)  # [B or 1, D]
        got = (held * cross).sum(-1)  # [B, D]
        factor = torch.where((got > 0) & (got < expected), expected / got.clamp_min(1.0), torch.ones_like(got))
        return held, held * (1.0 + (factor.unsqueeze(-1) - 1.0) * cross)

    def load_numpy(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights named as in `weight_shapes` (e.g. from a model.onnx)."""
        self.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in weights.items()})


def live_columns(split: Split, masks: Masks) -> dict:
    """Normal pruning: the live columns, {"r": bool [F], "h": [bool [F]] per layer, "z": [bool [F_h]] per layer}.

    A column is live if its owner broadcasts it. The residual stream's live set must be the same
    at the x and y points of every layer (a pruned residual column is zero everywhere).
    """
    def union(layer: int, point: str) -> np.ndarray:
        out = np.zeros(split.width(point), dtype=bool)
        for entry in masks[layer]:
            out[entry[point]] = True
        return out

    r = union(0, "x")
    for l in range(len(masks)):
        for p in ("x", "y"):
            if not np.array_equal(union(l, p), r):
                raise ValueError(f"normal pruning needs the same residual columns everywhere; layer {l} point "
                                 f"'{p}' differs from layer 0 point 'x'")
    return {"r": r, "h": [union(l, "h") for l in range(len(masks))], "z": [union(l, "z") for l in range(len(masks))]}


def state_to_numpy(model: SplitPatchTST) -> dict[str, np.ndarray]:
    """float32 copies of the weights, keyed and ordered as `weight_shapes(cfg)`."""
    state = model.state_dict()
    shapes = weight_shapes(model.cfg)
    if set(state) != set(shapes):
        raise AssertionError(f"state_dict keys differ from weight_shapes: {sorted(set(state) ^ set(shapes))}")
    return {name: state[name].detach().cpu().numpy().astype(np.float32).copy() for name in shapes}
