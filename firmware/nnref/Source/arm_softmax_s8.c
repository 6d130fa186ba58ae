/*
 * cisl nnref: arm_softmax_s8 (TFLite int8 softmax: 5 integer bits for the
 * scaled differences, 12 accumulation bits, output scale 1/256, zero point -128).
 */
#include "nnref_support.h"

#define NNREF_ACCUM_BITS 12

/* exp(a) for a <= 0 given in Q5.26; result in Q0.31. The fractional part
 * [-1/4, 0) is handled by a Taylor polynomial around -1/8, every further
 * integer bit of -a by a multiplication with a constant exp(-2^j). */
static int32_t nnref_exp_on_negative(int32_t a)
{
    static const int32_t factors[7] = {
        1672461947, /* exp(-1/4) */
        1302514674, /* exp(-1/2) */
        790015084,  /* exp(-1)   */
        290630308,  /* exp(-2)   */
        39332535,   /* exp(-4)   */
        720401,     /* exp(-8)   */
        242         /* exp(-16)  */
    };
    const int32_t quarter = (int32_t)1 << 24;
    /* r in [-1/4, 0): a reduced modulo 1/4 */
    const int32_t r = (a & (quarter - 1)) - quarter;
    const int32_t rest = nnref_wrap32((int64_t)r - a);
    /* x = r + 1/8 in Q0.31 */
    const int32_t x = nnref_wrap32((int64_t)r * 32 + ((int64_t)1 << 28));
    const int32_t x2 = nnref_srdhm(x, x);
    const int32_t x3 = nnref_srdhm(x2, x);
    const int32_t x4 = nnref_srdhm(x2, x2);
    const int32_t poly = nnref_rdbpot(nnref_wrap32((int64_t)nnref_srdhm(nnref_wrap32((int64_t)nnref_rdbpot(x4, 2) + x3),
                                                                          715827883 /* 1/3 */) +
                                                   x2),
                                      1);
    int32_t y = nnref_wrap32((int64_t)1895147668 /* exp(-1/8) */ +
                             nnref_srdhm(1895147668, nnref_wrap32((int64_t)x + poly)));
    int32_t j;

    for (j = 0; j < 7; j++)
    {
        if ((rest & ((int32_t)1 << (24 + j))) != 0)
        {
            y = nnref_srdhm(y, factors[j]);
        }
    }
    return (a == 0) ? NNREF_Q31_MAX : y;
}

/* 1 / (1 + x) for x in [0, 1) given in Q0.31; result in Q2.29 scaled to
 * Q1.30 by the final doubling. Newton-Raphson from 48/17 - 32/17 * d. */
static int32_t nnref_one_over_one_plus_x(int32_t v)
{
    const int64_t s = (int64_t)v + NNREF_Q31_MAX;
    /* (s +- 1) / 2, C99 division truncating toward zero */
    const int32_t half_den = (int32_t)((s + ((s >= 0) ? 1 : -1)) / 2);
    const int32_t one_in_q29 = (int32_t)1 << 29;
    int32_t z = nnref_wrap32((int64_t)1515870810 + nnref_srdhm(half_den, -1010580540));
    int32_t i;

    for (i = 0; i < 3; i++)
    {
        const int32_t err = nnref_wrap32((int64_t)one_in_q29 - nnref_srdhm(half_den, z));
        z = nnref_wrap32((int64_t)z + nnref_sat_shl(nnref_srdhm(z, err), 2));
    }
    return nnref_sat_shl(z, 1);
}

/* Rounding divide by 2^e for e >= 0. Upstream only defines e <= 31; larger e
 * (a row whose exponent sum reaches 2^28) is evaluated exactly here. */
static int32_t nnref_rdbpot_wide(int32_t x, int32_t e)
{
    if (e <= 31)
    {
        return nnref_rdbpot(x, e);
    }
    /* |x| < 2^31 <= 2^(e-1): the exact rounded quotient is 0, except x =
     * INT32_MIN with e = 32, a midpoint that rounds away from zero. */
    return (x == NNREF_Q31_MIN && e == 32) ? -1 : 0;
}

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
