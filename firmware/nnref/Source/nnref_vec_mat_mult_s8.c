/*
 * cisl nnref: shared int8 matrix-vector kernel of FC and batch matmul.
 */
#include "nnref_support.h"

void nnref_vec_mat_mult_s8(const int8_t *lhs,
                           const int8_t *rhs,
                           const int32_t *bias,
                           int8_t *dst,
                           int32_t lhs_offset,
                           int32_t rhs_offset,
                           int32_t dst_offset,
                           const int32_t *mult,
                           const int32_t *shift,
                           int per_channel,
                           int32_t rhs_cols,
                           int32_t rhs_rows,
                           int32_t act_min,
                           int32_t act_max)
{
    int32_t row;
    for (row = 0; row < rhs_rows; row++)
    {
        const int8_t *w = rhs + (size_t)row * (size_t)rhs_cols;
        const int32_t ch = per_channel ? row : 0;
        /* Accumulate modulo 2^32 like upstream's int32 accumulator; unsigned
         * arithmetic makes the wrap-around well defined. */
        uint32_t acc = (bias != NULL) ? (uint32_t)bias[row] : 0u;
        int32_t k;
        int32_t out;
        for (k = 0; k < rhs_cols; k++)
        {
            const int32_t a = (int32_t)lhs[k] + lhs_offset;
            const int32_t b = (int32_t)w[k] + rhs_offset;
            acc += (uint32_t)a * (uint32_t)b;
        }
        out = nnref_requantize(nnref_wrap32((int64_t)acc), mult[ch], shift[ch]);
        out = nnref_wrap32((int64_t)out + dst_offset);
        dst[row] = nnref_clamp_s8(out, act_min, act_max);
    }
}
