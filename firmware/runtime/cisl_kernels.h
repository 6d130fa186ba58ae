/*
 * cisl kernels: the int8 operations CMSIS-NN lacks (LayerNorm, head partial
 * sums and their reduction) plus small data-movement helpers.
 *
 * The integer arithmetic is specified in docs/design/kernels.md and mirrored
 * bit for bit by codegen/quant/kernels.py. C99, no allocation, no libm; these
 * kernels do not depend on CMSIS-NN or nnref.
 */
#ifndef CISL_KERNELS_H
#define CISL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One run of consecutive columns for cisl_pack_cols_s8. */
typedef struct
{
    uint16_t src_col; /* first source column */
    uint16_t dst_col; /* first destination column */
    uint16_t count;   /* number of columns */
} cisl_col_run;

/*
 * LayerNorm over the present columns of each row of x[rows][cols] into
 * y[rows][cols] (y may equal x; no other overlap). valid[cols] marks present
 * columns with nonzero bytes (NULL = all present); absent columns are left out
 * of the statistics and output zp_out, and a row with no present column is all
 * zp_out. eps_q >= 0, gamma_q[cols] and beta_q[cols] come from the compiler
 * (kernels.md). cols <= 32767 keeps every intermediate in 64 bits.
 */
void cisl_layernorm_s8(const int8_t *x,
                       int8_t *y,
                       uint16_t rows,
                       uint16_t cols,
                       const uint8_t *valid,
                       int32_t zp_in,
                       int32_t zp_out,
                       int32_t eps_q,
                       const int32_t *gamma_q,
                       const int32_t *beta_q);

/*
 * Scale what arrived from the other nodes by expected / delivered (issue 16), in place on
 * x[rows][cols]: the columns outside [own_lo, own_hi) that valid[] marks present (nonzero bytes)
 * become clamp(zp + round((x - zp) * E / R)), rounding half away from zero, where E = cols -
 * (own_hi - own_lo) columns are expected from the others and R arrived. Own columns, absent
 * columns, and rounds where nothing or everything arrived are left as they are.
 */
void cisl_rescale_s8(int8_t *x, uint16_t rows, uint16_t cols, const uint8_t *valid, uint16_t own_lo, uint16_t own_hi,
                     int32_t zp);

/*
 * out[o] = wrap32(sum_i (x[i] + in_offset) * w[o][i]) for o < n_out, i < k;
 * w is row-major [n_out][k]. No bias, no requantisation (head partial sums).
 */
void cisl_fc_s8_s32(const int8_t *x,
                    const int8_t *w,
                    int32_t in_offset,
                    uint16_t k,
                    uint16_t n_out,
                    int32_t *out);

/*
 * A fully connected layer whose weight rows are longer than its input: an elastic mode uses the
 * first k entries of every row of a larger mode's weights (row stride w_stride >= k).
 * y[r][o] = clamp(requantize(wrap32(bias[o] + sum_{i<k} (x[r][i] + in_offset) * w[o * w_stride + i]),
 *                            mult[o], shift[o]) + out_offset, act_min, act_max)
 * for r < rows, o < n: arm_fully_connected_per_channel_s8 on w[:, :k], bit for bit. bias may be NULL.
 */
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
                        int8_t *y);

/*
 * Sink reduction of nparts partial sums parts[p][n]:
 * acc[o] = wrap32(bias[o] + sum of the delivered parts[p][o]), then
 * y[o] = clamp(requantize(acc[o], mult[o], shift[o]) + out_zp, -128, 127)
 * with CMSIS-NN double-rounding requantisation (shift in [-31, 30]).
 * A part p is skipped when parts[p] is NULL or delivered[p] is 0; delivered
 * and bias may be NULL (all delivered, zero bias).
 */
void cisl_reduce_requant_s32_s8(const int32_t *const *parts,
                                const uint8_t *delivered,
                                uint16_t nparts,
                                const int32_t *bias,
                                const int32_t *mult,
                                const int32_t *shift,
                                int32_t out_zp,
                                uint16_t n,
                                int8_t *y);

/* dst[i] = src[idx[i]] for i < n (dst and src must not overlap). */
void cisl_gather_s8(int8_t *dst, const int8_t *src, const uint16_t *idx, uint32_t n);

/*
 * For every row r < rows and every run: copy run.count bytes from
 * src[r * src_cols + run.src_col] to dst[r * dst_cols + run.dst_col].
 * dst and src must not overlap.
 */
void cisl_pack_cols_s8(int8_t *dst,
                       uint16_t dst_cols,
                       const int8_t *src,
                       uint16_t src_cols,
                       uint16_t rows,
                       const cisl_col_run *runs,
                       uint16_t nruns);

/* dst[r * dst_cols + col + j] = value for r < rows, j < count. */
void cisl_fill_cols_s8(int8_t *dst, uint16_t dst_cols, uint16_t rows, uint16_t col, uint16_t count, int8_t value);

/* CRC-32 (IEEE 802.3, the zlib polynomial) of n bytes: equals zlib.crc32(data). */
uint32_t cisl_crc32(const void *data, size_t n);

/* Continue a CRC-32: cisl_crc32_update(cisl_crc32(a, na), b, nb) == cisl_crc32(a ++ b). */
uint32_t cisl_crc32_update(uint32_t crc, const void *data, size_t n);

/* floor(sqrt(v)), exact for every 64-bit v. */
uint32_t cisl_isqrt_u64(uint64_t v);

#ifdef __cplusplus
}
#endif

#endif /* CISL_KERNELS_H */
