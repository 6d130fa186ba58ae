/*
 * cisl kernels; arithmetic specified in docs/design/kernels.md and mirrored by
 * codegen/quant/kernels.py. Free of undefined behaviour: 64-bit products,
 * explicit int32 wrap-around and flooring shifts through helpers.
 */
#include "cisl_kernels.h"

#include <string.h>

#define CISL_Q31_MAX ((int32_t)0x7FFFFFFF)
#define CISL_Q31_MIN ((int32_t)(-CISL_Q31_MAX - 1))

/* ---- fixed-point helpers (cisl's own; nnref may not be linked) ---------- */

/* Two's complement reduction of a 64-bit value to int32. */
static int32_t cisl_wrap32(int64_t v)
{
    const uint32_t u = (uint32_t)(uint64_t)v;
    return (u <= 0x7FFFFFFFu) ? (int32_t)u : -(int32_t)(~u) - 1;
}

/* Flooring right shift of a signed 64-bit value, 0 <= s <= 63. */
static int64_t cisl_asr64(int64_t v, int32_t s)
{
    return (v >= 0) ? (v >> s) : ~((~v) >> s);
}

/* floor((a*b + 2^30) / 2^31), wrapped to int32 (CMSIS-NN's non-saturating
 * doubling high multiply used by requantisation). */
static int32_t cisl_srdhm(int32_t a, int32_t b)
{
    return cisl_wrap32(cisl_asr64((int64_t)a * b + ((int64_t)1 << 30), 31));
}

/* Rounding divide by 2^e, midpoints away from zero, e in [0, 31]. */
static int32_t cisl_rdbpot(int32_t x, int32_t e)
{
    const int32_t mask = (int32_t)(((uint32_t)1 << e) - 1u);
    const int32_t rem = x & mask;
    const int32_t q = (int32_t)cisl_asr64(x, e);
    const int32_t threshold = (mask >> 1) + ((x < 0) ? 1 : 0);
    return (rem > threshold) ? q + 1 : q;
}

/* CMSIS-NN arm_nn_requantize, double rounding: scale mult * 2^(shift - 31). */
static int32_t cisl_requantize(int32_t v, int32_t mult, int32_t shift)
{
    const int32_t left = (shift > 0) ? shift : 0;
    const int32_t right = (shift > 0) ? 0 : -shift;
    const int32_t t = cisl_wrap32((int64_t)v * ((int64_t)1 << left));
    return cisl_rdbpot(cisl_srdhm(t, mult), right);
}

static int8_t cisl_clamp_s8(int64_t v)
{
    return (int8_t)((v < -128) ? -128 : ((v > 127) ? 127 : v));
}

/* Number of significant bits of v (0 for 0). */
static int32_t cisl_bitlen32(uint32_t v)
{
    int32_t n = 0;
    while (v != 0u)
    {
        v >>= 1;
        n++;
    }
    return n;
}

uint32_t cisl_isqrt_u64(uint64_t v)
{
    /* Digit-by-digit (base 4) square root: exact, no division, no floats. */
    uint64_t rem = v;
    uint64_t root = 0u;
    uint64_t bit = (uint64_t)1 << 62;

    while (bit > rem)
    {
        bit >>= 2;
    }
    while (bit != 0u)
    {
        if (rem >= root + bit)
        {
            rem -= root + bit;
            root = (root >> 1) + bit;
        }
        else
        {
            root >>= 1;
        }
        bit >>= 2;
    }
    return (uint32_t)root;
}

/* ---- LayerNorm ---------------------------------------------------------- */

/* One LayerNorm output from d = n * (x - zp_in) - sum (kernels.md), in the narrowest types the
 * values allow (32x32->64 multiplies): |t| <= sqrt(n) * 2^12 * (1 + 2^-8) < 2^21 by Samuelson's
 * bound on |x - mean|, so t and (t * gamma + beta * 2^12 + 2^27) >> 28 (< 2^25) fit int32. */
static inline int8_t cisl_ln_value(int32_t d, int32_t inv, int64_t round, int32_t shift, int32_t gamma_q,
                                   int32_t beta_q, int32_t zp_out)
{
    const int32_t t = (int32_t)cisl_asr64((int64_t)d * inv + round, shift); /* normalised * 2^12 */
    const int64_t acc = (int64_t)t * gamma_q + (int64_t)beta_q * 4096;
    const int32_t y = zp_out + (int32_t)cisl_asr64(acc + ((int64_t)1 << 27), 28);
    return (int8_t)((y < -128) ? -128 : ((y > 127) ? 127 : y));
}

void cisl_rescale_s8(int8_t *x, uint16_t rows, uint16_t cols, const uint8_t *valid, uint16_t own_lo, uint16_t own_hi,
                     int32_t zp)
{
    const int32_t expected = (int32_t)cols - ((int32_t)own_hi - (int32_t)own_lo);
    int32_t got = 0;
    uint16_t r;
    uint16_t c;

    for (c = 0; c < cols; c++)
        if ((c < own_lo || c >= own_hi) && valid[c])
            got++;
    if (got == 0 || got >= expected)
        return;
    for (r = 0; r < rows; r++)
    {
        int8_t *xr = x + (size_t)r * cols;
        for (c = 0; c < cols; c++)
        {
            int32_t num;
            int32_t q;
            int32_t y;
            if ((c >= own_lo && c < own_hi) || !valid[c])
                continue;
            num = ((int32_t)xr[c] - zp) * expected; /* |num| <= 255 * 32767: fits int32 */
            q = (num >= 0 ? num + got / 2 : num - got / 2) / got; /* C division truncates: half away from 0 */
            y = zp + q;
            xr[c] = (int8_t)((y < -128) ? -128 : ((y > 127) ? 127 : y));
        }
    }
}

void cisl_layernorm_s8(const int8_t *x,
                       int8_t *y,
                       uint16_t rows,
                       uint16_t cols,
                       const uint8_t *valid,
                       int32_t zp_in,
                       int32_t zp_out,
                       int32_t eps_q,
                       const int32_t *gamma_q,
                       const int32_t *beta_q)
{
    uint16_t r;
    uint16_t c;

    for (r = 0; r < rows; r++)
    {
        const int8_t *xr = x + (size_t)r * cols;
        int8_t *yr = y + (size_t)r * cols;
        int32_t n = 0;
        int32_t sum = 0;
        int64_t sumsq = 0;
        int64_t var_n;
        uint32_t sd;
        int32_t shift;
        int32_t inv;
        int64_t round;

        for (c = 0; c < cols; c++)
        {
            if (valid == NULL || valid[c] != 0u)
            {
                const int32_t v = (int32_t)xr[c] - zp_in;
                n++;
                sum += v;
                sumsq += (int64_t)v * v;
            }
        }
        if (n == 0)
        {
            memset(yr, (int)(uint8_t)zp_out, cols);
            continue;
        }

        /* n^2 * (variance + eps) in input units; n*sumsq - sum^2 >= 0. */
        var_n = (int64_t)n * sumsq - (int64_t)sum * sum +
            cisl_asr64((int64_t)n * n * eps_q + ((int64_t)1 << 15), 16);
        /* sd ~ n * std * 2^8; its reciprocal is kept with 20 + 9 bits. */
        sd = cisl_isqrt_u64((uint64_t)var_n << 16);
        if (sd == 0u)
        {
            sd = 1u;
        }
        shift = cisl_bitlen32(sd) + 9;
        /* sd >= 2^(shift - 10), so inv <= 2^30. */
        inv = (int32_t)((((uint64_t)1) << (20 + shift)) / sd);
        round = (int64_t)1 << (shift - 1);

        if (valid == NULL)
        {
            for (c = 0; c < cols; c++)
            {
                yr[c] = cisl_ln_value(n * ((int32_t)xr[c] - zp_in) - sum, inv, round, shift, gamma_q[c], beta_q[c],
                                      zp_out);
            }
        }
        else
        {
            for (c = 0; c < cols; c++)
            {
                yr[c] = (valid[c] != 0u) ? cisl_ln_value(n * ((int32_t)xr[c] - zp_in) - sum, inv, round, shift,
                                                         gamma_q[c], beta_q[c], zp_out)
                                         : (int8_t)zp_out;
            }
        }
    }
}

/* ---- head partial sums -------------------------------------------------- */

void cisl_fc_s8_s32(const int8_t *x, const int8_t *w, int32_t in_offset, uint16_t k, uint16_t n_out, int32_t *out)
{
    uint16_t o;
    uint16_t i;

    for (o = 0; o < n_out; o++)
    {
        const int8_t *wr = w + (size_t)o * k;
        uint32_t acc = 0u; /* modulo 2^32, i.e. wrap32 */
        for (i = 0; i < k; i++)
        {
            acc += (uint32_t)((int32_t)x[i] + in_offset) * (uint32_t)(int32_t)wr[i];
        }
        out[o] = cisl_wrap32((int64_t)acc);
    }
}

/* ---- elastic modes: a prefix of every weight row --------------------------- */

void cisl_fc_strided_s8(const int8_t *x,
                        uint16_t rows,
                        uint16_t k,
                        const int8_t *w,
                        uint16_t w_stride,
                        uint16_t n,
                        const int32_t *bias,
                        const int32_t *mult,
                        const int32_t *shift,
                        int32_t in_offset,
                        int32_t out_offset,
                        int32_t act_min,
                        int32_t act_max,
                        int8_t *y)
{
    uint16_t r;
    uint16_t o;
    uint16_t i;

    for (r = 0; r < rows; r++)
    {
        const int8_t *xr = x + (size_t)r * k;
        for (o = 0; o < n; o++)
        {
            const int8_t *wr = w + (size_t)o * w_stride;
            uint32_t acc = bias != NULL ? (uint32_t)bias[o] : 0u; /* modulo 2^32, as the SMLAD sums wrap */
            for (i = 0; i < k; i++)
            {
                acc += (uint32_t)((int32_t)xr[i] + in_offset) * (uint32_t)(int32_t)wr[i];
            }
            /* the output offset is added in wrapping int32, as CMSIS-NN does */
            int32_t v = cisl_wrap32((int64_t)cisl_requantize(cisl_wrap32((int64_t)acc), mult[o], shift[o]) + out_offset);
            v = v < act_min ? act_min : v;
            y[(size_t)r * n + o] = (int8_t)(v > act_max ? act_max : v);
        }
    }
}

void cisl_reduce_requant_s32_s8(const int32_t *const *parts,
                                const uint8_t *delivered,
                                uint16_t nparts,
                                const int32_t *bias,
                                const int32_t *mult,
                                const int32_t *shift,
                                int32_t out_zp,
                                uint16_t n,
                                int8_t *y)
{
    uint16_t o;
    uint16_t p;

    for (o = 0; o < n; o++)
    {
        uint32_t acc = (bias != NULL) ? (uint32_t)bias[o] : 0u;
        for (p = 0; p < nparts; p++)
        {
            if (parts[p] != NULL && (delivered == NULL || delivered[p] != 0u))
            {
                acc += (uint32_t)parts[p][o];
            }
        }
        y[o] = cisl_clamp_s8((int64_t)cisl_requantize(cisl_wrap32((int64_t)acc), mult[o], shift[o]) + out_zp);
    }
}

/* ---- data movement ------------------------------------------------------ */

void cisl_gather_s8(int8_t *dst, const int8_t *src, const uint16_t *idx, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++)
    {
        dst[i] = src[idx[i]];
    }
}

void cisl_pack_cols_s8(int8_t *dst,
                       uint16_t dst_cols,
                       const int8_t *src,
                       uint16_t src_cols,
                       uint16_t rows,
                       const cisl_col_run *runs,
                       uint16_t nruns)
{
    uint16_t r;
    uint16_t j;

    for (r = 0; r < rows; r++)
    {
        int8_t *dr = dst + (size_t)r * dst_cols;
        const int8_t *sr = src + (size_t)r * src_cols;
        for (j = 0; j < nruns; j++)
        {
            memcpy(dr + runs[j].dst_col, sr + runs[j].src_col, runs[j].count);
        }
    }
}

void cisl_fill_cols_s8(int8_t *dst, uint16_t dst_cols, uint16_t rows, uint16_t col, uint16_t count, int8_t value)
{
    uint16_t r;
    for (r = 0; r < rows; r++)
    {
        memset(dst + (size_t)r * dst_cols + col, (int)(uint8_t)value, count);
    }
}

/* ---- CRC-32 --------------------------------------------------------------- */

uint32_t cisl_crc32_update(uint32_t crc, const void *data, size_t n)
{
    /* Reflected polynomial 0xEDB88320, one nibble at a time: a 64-byte table
     * instead of 1 KiB, about 4x faster than bit by bit. */
    static const uint32_t nibble[16] = {
        0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u, 0x4DB26158u, 0x5005713Cu,
        0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu, 0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu};
    const uint8_t *p = (const uint8_t *)data;
    size_t i;

    crc = ~crc;
    for (i = 0; i < n; i++)
    {
        crc ^= p[i];
        crc = (crc >> 4) ^ nibble[crc & 0x0Fu];
        crc = (crc >> 4) ^ nibble[crc & 0x0Fu];
    }
    return ~crc;
}

uint32_t cisl_crc32(const void *data, size_t n)
{
    return cisl_crc32_update(0u, data, n);
}
