/*
 * cisl nnref: arm_softmax_s8 (TFLite int8 softmax: 5 integer bits for the
 * scaled differences, 12 accumulation bits, output scale 1/256, zero point -128).
 */
#include "nnref_support.h"

#define NNREF_ACCUM_BITS 12

/* exp of the scaled difference d * 2^shift * mult (a wrapping int32 product). */
static int32_t nnref_softmax_exp(int32_t diff, int32_t shift, int32_t mult)
{
    const int32_t scaled = nnref_wrap32((int64_t)diff * ((int64_t)1 << shift));
    return nnref_exp_on_negative(nnref_srdhm(scaled, mult));
}

void arm_softmax_s8(const int8_t *input,
                    const int32_t num_rows,
                    const int32_t row_size,
                    const int32_t mult,
                    const int32_t shift,
                    const int32_t diff_min,
                    int8_t *output)
{
    int32_t row;

    for (row = 0; row < num_rows; row++)
    {
        const int8_t *in = input + (size_t)row * (size_t)row_size;
        int8_t *out = output + (size_t)row * (size_t)row_size;
        int32_t max = in[0];
        uint32_t sum = 0u;
        int32_t headroom;
        int32_t scale;
        int32_t exponent;
        int32_t col;

        for (col = 1; col < row_size; col++)
        {
            max = (in[col] > max) ? in[col] : max;
        }

        /* Sum of exp(d) in Q12.19; wraps like upstream's int32 sum (only
         * possible for rows of 4096 or more elements). */
        for (col = 0; col < row_size; col++)
        {
            const int32_t diff = (int32_t)in[col] - max;
            if (diff >= diff_min)
            {
                sum += (uint32_t)nnref_rdbpot(nnref_softmax_exp(diff, shift, mult), NNREF_ACCUM_BITS);
            }
        }

        /* Normalise the sum to [1, 2) and take 1/sum via 1/(1+x). */
        {
            const int32_t ssum = nnref_wrap32((int64_t)sum);
            const uint32_t normalised = (ssum > 0) ? ((uint32_t)ssum << nnref_clz32((uint32_t)ssum)) : 0u;
            headroom = nnref_clz32((uint32_t)ssum);
            scale = nnref_one_over_one_plus_x(nnref_wrap32((int64_t)normalised - ((int64_t)1 << 31)));
        }
        exponent = NNREF_ACCUM_BITS - headroom + 23;

        for (col = 0; col < row_size; col++)
        {
            const int32_t diff = (int32_t)in[col] - max;
            if (diff >= diff_min)
            {
                const int32_t e = nnref_softmax_exp(diff, shift, mult);
                const int32_t res = nnref_rdbpot_wide(nnref_srdhm(scale, e), exponent) - 128;
                out[col] = nnref_clamp_s8(res, -128, 127);
            }
            else
            {
                out[col] = -128;
            }
        }
    }
}
