/*
 * cisl nnref: the subset of the CMSIS-NN public API that cisl-generated code
 * calls, implemented portably in ../Source (see docs/design/kernels.md).
 *
 * Written for cisl (Apache-2.0). Function names and parameter types follow the
 * public CMSIS-NN API, so generated code compiles unchanged against this
 * directory or against an upstream CMSIS-NN Include directory. The integer
 * arithmetic is that of upstream's portable C path with double rounding.
 */
#ifndef ARM_NNFUNCTIONS_H
#define ARM_NNFUNCTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "arm_nn_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Fully connected, per-tensor requantisation.
 *   input  [input_dims->n][K]      K = filter_dims->n (accumulation depth)
 *   filter [N][K] row-major         N = output_dims->c (output channels)
 *   bias   [N] or NULL              bias_dims is not read
 *   output [input_dims->n][N]
 * ctx is not read (no scratch needed); returns ARM_CMSIS_NN_SUCCESS.
 */
arm_cmsis_nn_status arm_fully_connected_s8(const cmsis_nn_context *ctx,
                                           const cmsis_nn_fc_params *fc_params,
                                           const cmsis_nn_per_tensor_quant_params *quant_params,
                                           const cmsis_nn_dims *input_dims,
                                           const int8_t *input_data,
                                           const cmsis_nn_dims *filter_dims,
                                           const int8_t *filter_data,
                                           const cmsis_nn_dims *bias_dims,
                                           const int32_t *bias_data,
                                           const cmsis_nn_dims *output_dims,
                                           int8_t *output_data);

/* Fully connected with one multiplier/shift per output channel; otherwise as above. */
arm_cmsis_nn_status arm_fully_connected_per_channel_s8(const cmsis_nn_context *ctx,
                                                       const cmsis_nn_fc_params *fc_params,
                                                       const cmsis_nn_per_channel_quant_params *quant_params,
                                                       const cmsis_nn_dims *input_dims,
                                                       const int8_t *input_data,
                                                       const cmsis_nn_dims *filter_dims,
                                                       const int8_t *filter_data,
                                                       const cmsis_nn_dims *bias_dims,
                                                       const int32_t *bias_data,
                                                       const cmsis_nn_dims *output_dims,
                                                       int8_t *output_data);

/* Scratch bytes the FC and batch-matmul kernels need: always 0 for nnref. */
int32_t arm_fully_connected_s8_get_buffer_size(const cmsis_nn_dims *filter_dims);

/*
 * Batch matmul without bias: output[b][h] = lhs[b][h] * rhs[b][h]^T.
 *   lhs    {n, h, M, K}    (input_lhs_dims: n, h, w = M, c = K)
 *   rhs    {n, h, N, K}    already transposed, rows of length K
 *   output {n, h, M, N}    output_dims->n and ->h give the batch loop
 * A batch dimension of size 1 on one side is broadcast. fc_params.input_offset
 * is the LHS offset, fc_params.filter_offset the RHS offset; adj_x/adj_y are
 * ignored. ctx is not read.
 */
arm_cmsis_nn_status arm_batch_matmul_s8(const cmsis_nn_context *ctx,
                                        const cmsis_nn_bmm_params *bmm_params,
                                        const cmsis_nn_per_tensor_quant_params *quant_params,
                                        const cmsis_nn_dims *input_lhs_dims,
                                        const int8_t *input_lhs,
                                        const cmsis_nn_dims *input_rhs_dims,
                                        const int8_t *input_rhs,
                                        const cmsis_nn_dims *output_dims,
                                        int8_t *output);

/*
 * Softmax over rows of row_size int8 values; output scale 1/256, zero point -128.
 * mult/shift scale the row differences (shift is a left shift in [0, 31]);
 * differences below diff_min give -128. Exact against upstream while every
 * row's exponent sum stays below 2^28, which row_size <= 511 guarantees.
 */
void arm_softmax_s8(const int8_t *input,
                    const int32_t num_rows,
                    const int32_t row_size,
                    const int32_t mult,
                    const int32_t shift,
                    const int32_t diff_min,
                    int8_t *output);

/*
 * Element-wise add of two int8 vectors of block_size elements (no broadcast):
 * each input is offset, shifted left by left_shift (use 20), requantised,
 * the two are added, requantised to the output and clamped.
 */
arm_cmsis_nn_status arm_elementwise_add_s8(const int8_t *input_1_vect,
                                           const int8_t *input_2_vect,
                                           const int32_t input_1_offset,
                                           const int32_t input_1_mult,
                                           const int32_t input_1_shift,
                                           const int32_t input_2_offset,
                                           const int32_t input_2_mult,
                                           const int32_t input_2_shift,
                                           const int32_t left_shift,
                                           int8_t *output,
                                           const int32_t out_offset,
                                           const int32_t out_mult,
                                           const int32_t out_shift,
                                           const int32_t out_activation_min,
                                           const int32_t out_activation_max,
                                           const int32_t block_size);

/*
 * Transpose. num_dims selects the dims used: 1 -> copy n bytes; 2 -> the
 * {n, h} matrix becomes {h, n} (permutations not read); 3 -> {n, h, w};
 * 4 -> {n, h, w, c}. Output axis i takes input axis permutations[i].
 * Returns ARM_CMSIS_NN_ARG_ERROR if a permutation entry is out of range.
 */
arm_cmsis_nn_status arm_transpose_s8(const int8_t *input_data,
                                     int8_t *const output_data,
                                     const cmsis_nn_dims *const input_dims,
                                     const cmsis_nn_dims *const output_dims,
                                     const cmsis_nn_transpose_params *const transpose_params);

#ifdef __cplusplus
}
#endif

#endif /* ARM_NNFUNCTIONS_H */
