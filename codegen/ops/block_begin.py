"""block_begin: opens a block of the schedule (embed, attn, mlp, head); the block timer starts."""

from __future__ import annotations

from dataclasses import dataclass

from . import register
from .base import OpKind


@dataclass(frozen=True)
class BlockAttrs:
    block: str
    layer: int


@register
class BlockBegin(OpKind):
    name = "block_begin"
    Attrs = BlockAttrs
    block_marker = "begin"

    def c_context(self, e, op):
        return {"layer": op.attrs["layer"], "block": op.attrs["block"]}
