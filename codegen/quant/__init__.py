"""Integer quantisation arithmetic and bit-exact numpy mirrors of the int8 kernels.

``arith``: fixed-point building blocks and parameter derivation (TFLite/CMSIS-NN
double rounding). ``kernels``: vectorised mirrors of the C kernels the generated
code calls (CMSIS-NN subset and cisl kernels), see docs/design/kernels.md.
"""

from __future__ import annotations

from .arith import (
    add_params,
    fc_params,
    layernorm_params,
    quantize_multiplier,
    quantize_multiplier_array,
    rdbpot,
    requantize,
    sat_shl,
    softmax_params,
    srdhm,
    wrap32,
)
from .kernels import (
    batch_matmul_s8,
    crc32,
    elementwise_add_s8,
    fc_s8_s32,
    fully_connected_s8,
    layernorm_s8,
    reduce_requant_s32_s8,
    softmax_s8,
)

__all__ = [
    "add_params",
    "batch_matmul_s8",
    "crc32",
    "elementwise_add_s8",
    "fc_params",
    "fc_s8_s32",
    "fully_connected_s8",
    "layernorm_params",
    "layernorm_s8",
    "quantize_multiplier",
    "quantize_multiplier_array",
    "rdbpot",
    "reduce_requant_s32_s8",
    "requantize",
    "sat_shl",
    "softmax_params",
    "softmax_s8",
    "srdhm",
    "wrap32",
]
