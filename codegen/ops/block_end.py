"""block_end: closes a block; the node prints its `block` line (compute and communication time)."""

from __future__ import annotations

from . import register
from .base import OpKind
from .block_begin import BlockAttrs


@register
class BlockEnd(OpKind):
    name = "block_end"
    Attrs = BlockAttrs
    block_marker = "end"

    def c_context(self, e, op):
        return {"layer": op.attrs["layer"], "block": op.attrs["block"]}
