/*
 * cisl nnref: arm_batch_matmul_s8 (RHS given transposed, no bias).
 */
#include "nnref_support.h"

arm_cmsis_nn_status arm_batch_matmul_s8(const cmsis_nn_context *ctx,
                                        const cmsis_nn_bmm_params *bmm_params,
                                        const cmsis_nn_per_tensor_quant_params *quant_params,
                                        const cmsis_nn_dims *input_lhs_dims,
                                        const int8_t *input_lhs,
                                        const cmsis_nn_dims *input_rhs_dims,
                                        const int8_t *input_rhs,
                                        const cmsis_nn_dims *output_dims,
                                        int8_t *output)
{
    const cmsis_nn_fc_params *fc = &bmm_params->fc_params;
    const int32_t lhs_rows = input_lhs_dims->w;
    const int32_t rhs_rows = input_rhs_dims->w;
    const int32_t depth = input_rhs_dims->c;
    const size_t lhs_matrix = (size_t)lhs_rows * (size_t)depth;
    const size_t rhs_matrix = (size_t)rhs_rows * (size_t)depth;
    /* A side whose batch dimension is smaller than the other's is broadcast,
     * i.e. it always uses index 0 along that dimension (upstream behaviour). */
    const int lhs_walks_n = input_lhs_dims->n >= input_rhs_dims->n;
    const int rhs_walks_n = input_rhs_dims->n >= input_lhs_dims->n;
    const int lhs_walks_h = input_lhs_dims->h >= input_rhs_dims->h;
    const int rhs_walks_h = input_rhs_dims->h >= input_lhs_dims->h;
    int32_t b;
    int32_t h;
    int32_t m;

    (void)ctx;
    for (b = 0; b < output_dims->n; b++)
    {
        for (h = 0; h < output_dims->h; h++)
        {
            const size_t lhs_index = (size_t)(lhs_walks_n ? b : 0) * (size_t)input_lhs_dims->h +
                (size_t)(lhs_walks_h ? h : 0);
            const size_t rhs_index = (size_t)(rhs_walks_n ? b : 0) * (size_t)input_rhs_dims->h +
                (size_t)(rhs_walks_h ? h : 0);
            const int8_t *lhs = input_lhs + lhs_index * lhs_matrix;
            const int8_t *rhs = input_rhs + rhs_index * rhs_matrix;
            int8_t *out = output + ((size_t)b * (size_t)output_dims->h + (size_t)h) * (size_t)lhs_rows *
                    (size_t)rhs_rows;

            for (m = 0; m < lhs_rows; m++)
            {
                nnref_vec_mat_mult_s8(lhs + (size_t)m * (size_t)depth,
                                      rhs,
                                      NULL,
                                      out + (size_t)m * (size_t)rhs_rows,
                                      fc->input_offset,
                                      fc->filter_offset,
                                      fc->output_offset,
                                      &quant_params->multiplier,
                                      &quant_params->shift,
                                      0,
                                      depth,
                                      rhs_rows,
                                      fc->activation.min,
                                      fc->activation.max);
            }
        }
    }
    return ARM_CMSIS_NN_SUCCESS;
}
