/*
 * cisl nnref: arm_fully_connected_s8 (per-tensor requantisation).
 */
#include "nnref_support.h"

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
                                           int8_t *output_data)
{
    /* filter_dims->n is the accumulation depth and output_dims->c the number
     * of output channels (CMSIS-NN's FC convention). */
    const int32_t depth = filter_dims->n;
    const int32_t channels = output_dims->c;
    int32_t b;

    (void)ctx;
    (void)bias_dims;
    for (b = 0; b < input_dims->n; b++)
    {
        nnref_vec_mat_mult_s8(input_data + (size_t)b * (size_t)depth,
                              filter_data,
                              bias_data,
                              output_data + (size_t)b * (size_t)channels,
                              fc_params->input_offset,
                              fc_params->filter_offset,
                              fc_params->output_offset,
                              &quant_params->multiplier,
                              &quant_params->shift,
                              0,
                              depth,
                              channels,
                              fc_params->activation.min,
                              fc_params->activation.max);
    }
    return ARM_CMSIS_NN_SUCCESS;
}
