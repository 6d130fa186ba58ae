/*
 * cisl nnref: arm_elementwise_add_s8 (TFLite int8 add).
 */
#include "nnref_support.h"

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
                                           const int32_t block_size)
{
    /* Both inputs are brought to a common scale with 2^left_shift of headroom,
     * added, and the sum is requantised once. All int32 operations wrap. */
    const int64_t scale_up = (int64_t)1 << left_shift;
    int32_t i;

    for (i = 0; i < block_size; i++)
    {
        const int32_t a = nnref_wrap32(((int64_t)input_1_vect[i] + input_1_offset) * scale_up);
        const int32_t b = nnref_wrap32(((int64_t)input_2_vect[i] + input_2_offset) * scale_up);
        const int32_t sum = nnref_wrap32((int64_t)nnref_requantize(a, input_1_mult, input_1_shift) +
                                         nnref_requantize(b, input_2_mult, input_2_shift));
        const int32_t out = nnref_wrap32((int64_t)nnref_requantize(sum, out_mult, out_shift) + out_offset);
        output[i] = nnref_clamp_s8(out, out_activation_min, out_activation_max);
    }
    return ARM_CMSIS_NN_SUCCESS;
}
