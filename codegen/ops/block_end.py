"""block_end: closes a block; the node prints its `block` line (compute and communication time)."""

from __future__ import annotations

from . import register
from .block_begin import BlockBegin


@register
class BlockEnd(BlockBegin):
    name = "block_end"
    block_marker = "end"
