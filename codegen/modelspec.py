"""The model's hyper-parameters and the names and shapes of its weights.

This is the contract between training (torch), the ONNX file and the compiler (numpy only); see
docs/design/decisions.md §2 and §4.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    lookback: int = 96
    patch_len: int = 16
    stride: int = 8
    padding: str = "end"  # "end" (PatchTST replication pad by `stride`) or "none"
    d_model: int = 64
    heads: int = 16
    layers: int = 2
    mlp_hidden: int = 64
    horizon: int = 24
    revin: bool = True
    ln_eps: float = 1e-5

    @property
    def tokens(self) -> int:
        n = (self.lookback - self.patch_len) // self.stride + 1
        return n + 1 if self.padding == "end" else n

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    def problems(self) -> list[str]:
        """Human-readable reasons why this configuration is invalid (empty if valid)."""
        out = []
        for name in ("lookback", "patch_len", "stride", "d_model", "heads", "layers", "mlp_hidden", "horizon"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be >= 1")
        if out:
            return out
        if self.padding not in ("end", "none"):
            out.append("padding must be \"end\" or \"none\"")
        if self.patch_len > self.lookback:
            out.append("patch_len must not exceed lookback")
        if self.d_model % self.heads:
            out.append(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if not (self.ln_eps > 0 and self.ln_eps < float("inf")):
            out.append("ln_eps must be a finite number > 0")
        return out

    def to_json(self) -> dict:
        d = asdict(self)
        d["tokens"] = self.tokens
        return d

    @staticmethod
    def from_json(d: dict) -> "ModelConfig":
        """The config a JSON document (plan, split, profile) names; TypeError naming the key for a value
        of the wrong type (callers make it one line; ranges are ``problems()``)."""
        if not isinstance(d, dict):
            raise TypeError(f"model must be an object, got {d!r}")
        fields = {k: d[k] for k in ModelConfig.__dataclass_fields__ if k in d}
        for k, v in fields.items():
            want = type(getattr(ModelConfig, k))
            ok = (isinstance(v, want) if want in (bool, str) else not isinstance(v, bool)
                  and isinstance(v, (int, float) if want is float else int))
            if not ok:
                raise TypeError(f"model {k} must be {want.__name__}, got {v!r}")
        return ModelConfig(**fields)


def patch_index(cfg: ModelConfig) -> np.ndarray:
    """Index table [N, P] into the window: idx[n, p] = min(n*S + p, L - 1)."""
    n = np.arange(cfg.tokens)[:, None] * cfg.stride + np.arange(cfg.patch_len)[None, :]
    return np.minimum(n, cfg.lookback - 1).astype(np.int64)


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes of every float weight, in a fixed order."""
    F, Fh, N = cfg.d_model, cfg.mlp_hidden, cfg.tokens
    shapes: dict[str, tuple[int, ...]] = {
        "embed.weight": (F, cfg.patch_len),
        "embed.bias": (F,),
        "pos": (N, F),
    }
    for l in range(cfg.layers):
        p = f"layers.{l}."
        shapes.update({
            p + "ln1.weight": (F,), p + "ln1.bias": (F,),
            p + "wq.weight": (F, F), p + "wq.bias": (F,),
            p + "wk.weight": (F, F), p + "wk.bias": (F,),
            p + "wv.weight": (F, F), p + "wv.bias": (F,),
            p + "wo.weight": (F, F), p + "wo.bias": (F,),
            p + "ln2.weight": (F,), p + "ln2.bias": (F,),
            p + "w1.weight": (Fh, F), p + "w1.bias": (Fh,),
            p + "w2.weight": (F, Fh), p + "w2.bias": (F,),
        })
    shapes["head.weight"] = (cfg.horizon, N * F)
    shapes["head.bias"] = (cfg.horizon,)
    return shapes
