/*
 * cisl nnref: fixed-point helpers shared by the kernels (internal).
 *
 * The arithmetic is the portable-C-path integer arithmetic of CMSIS-NN with
 * double rounding, as specified in docs/design/kernels.md and the shared
 * CMSIS-NN notes (sections 4.1-4.4). Everything here is free of undefined
 * behaviour: products are formed in 64 bits, int32 wrap-around is explicit
 * (nnref_wrap32) and signed right shifts go through nnref_asr64 (floor).
 */
#ifndef NNREF_SUPPORT_H
#define NNREF_SUPPORT_H

#include <stdint.h>

#include "arm_nnfunctions.h"

#define NNREF_Q31_MAX ((int32_t)0x7FFFFFFF)
#define NNREF_Q31_MIN ((int32_t)(-NNREF_Q31_MAX - 1))

/* Two's complement reduction of a 64-bit value to int32 (what an int32 add or
 * multiply does on every target we build for), without relying on
 * implementation-defined conversions. */
static inline int32_t nnref_wrap32(int64_t v)
{
    const uint32_t u = (uint32_t)(uint64_t)v;
    return (u <= 0x7FFFFFFFu) ? (int32_t)u : -(int32_t)(~u) - 1;
}

/* Arithmetic (flooring) right shift of a signed 64-bit value, 0 <= s <= 63. */
static inline int64_t nnref_asr64(int64_t v, int32_t s)
{
    return (v >= 0) ? (v >> s) : ~((~v) >> s);
}

/* Saturating rounding doubling high multiply: floor((a*b + 2^30) / 2^31),
 * with a = b = INT32_MIN giving INT32_MAX. */
static inline int32_t nnref_srdhm(int32_t a, int32_t b)
{
    if (a == NNREF_Q31_MIN && b == NNREF_Q31_MIN)
    {
        return NNREF_Q31_MAX;
    }
    return (int32_t)nnref_asr64((int64_t)a * b + ((int64_t)1 << 30), 31);
}

/* The non-saturating variant used by requantisation: the single overflowing
 * case (INT32_MIN * INT32_MIN) wraps, as upstream's int32 cast does. */
static inline int32_t nnref_srdhm_nosat(int32_t a, int32_t b)
{
    return nnref_wrap32(nnref_asr64((int64_t)a * b + ((int64_t)1 << 30), 31));
}

/* Rounding divide by 2^e (midpoints away from zero), e in [0, 31]. */
static inline int32_t nnref_rdbpot(int32_t x, int32_t e)
{
    const int32_t mask = (int32_t)(((uint32_t)1 << e) - 1u);
    const int32_t rem = x & mask;
    const int32_t q = (int32_t)nnref_asr64(x, e);
    const int32_t threshold = (mask >> 1) + ((x < 0) ? 1 : 0);
    return (rem > threshold) ? q + 1 : q;
}

/* Saturating multiply by 2^e, e in [0, 30]. */
static inline int32_t nnref_sat_shl(int32_t v, int32_t e)
{
    const int32_t limit = (int32_t)(((uint32_t)1 << (31 - e)) - 1u);
    if (v > limit)
    {
        return NNREF_Q31_MAX;
    }
    if (v < -limit)
    {
        return NNREF_Q31_MIN;
    }
    return (int32_t)((int64_t)v * ((int64_t)1 << e));
}

/* arm_nn_requantize with double rounding: the real scale is mult * 2^(shift-31),
 * shift in [-31, 30]. The left shift is a wrapping int32 multiply. */
static inline int32_t nnref_requantize(int32_t v, int32_t mult, int32_t shift)
{
    const int32_t left = (shift > 0) ? shift : 0;
    const int32_t right = (shift > 0) ? 0 : -shift;
    const int32_t t = nnref_wrap32((int64_t)v * ((int64_t)1 << left));
    return nnref_rdbpot(nnref_srdhm_nosat(t, mult), right);
}

/* Clamp an int32 (after an int32-wrapping add of the offset) to [lo, hi]. */
static inline int8_t nnref_clamp_s8(int32_t v, int32_t lo, int32_t hi)
{
    v = (v < lo) ? lo : v;
    v = (v > hi) ? hi : v;
    return (int8_t)v;
}

/* Leading zeros of a 32-bit pattern; 32 for zero. */
static inline int32_t nnref_clz32(uint32_t v)
{
    int32_t n = 0;
    if (v == 0u)
    {
        return 32;
    }
    while ((v & 0x80000000u) == 0u)
    {
        v <<= 1;
        n++;
    }
    return n;
}

/* ---- softmax helpers (TFLite fixed point: 5 integer bits for exp inputs) ---- */

/* exp(a) for a <= 0 given in Q5.26; result in Q0.31. The fractional part
 * [-1/4, 0) is handled by a Taylor polynomial around -1/8, every further
 * integer bit of -a by a multiplication with a constant exp(-2^j). */
static inline int32_t nnref_exp_on_negative(int32_t a)
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

/* 1 / (1 + x) for x in [0, 1) given in Q0.31; result in Q0.31 (1 saturates).
 * Newton-Raphson in Q2.29 for 1/d, d = (1 + x)/2, from 48/17 - 32/17 * d. */
static inline int32_t nnref_one_over_one_plus_x(int32_t v)
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
static inline int32_t nnref_rdbpot_wide(int32_t x, int32_t e)
{
    if (e <= 31)
    {
        return nnref_rdbpot(x, e);
    }
    /* |x| < 2^31 <= 2^(e-1): the exact rounded quotient is 0, except x =
     * INT32_MIN with e = 32, a midpoint that rounds away from zero. */
    return (x == NNREF_Q31_MIN && e == 32) ? -1 : 0;
}

/*
 * Shared row kernel of FC and batch matmul: for each of the rhs_rows output
 * channels n, acc = bias[n] + sum_k (lhs[k] + lhs_offset) * (rhs[n][k] + rhs_offset)
 * in wrapping int32, requantised with mult[n]/shift[n] (or mult[0]/shift[0] when
 * per_channel is 0), plus dst_offset, clamped. bias may be NULL.
 */
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
                           int32_t act_max);

#endif /* NNREF_SUPPORT_H */
