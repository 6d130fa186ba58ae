/*
 * cisl nnref: arm_transpose_s8 for 1 to 4 dimensions.
 */
#include <string.h>

#include "nnref_support.h"

/* Generic 4-d walk over the input; out_stride[i] is the output stride of
 * input axis i. */
static void nnref_transpose_walk(const int8_t *input,
                                 int8_t *output,
                                 const int32_t extent[4],
                                 const int32_t out_stride[4])
{
    int32_t i0, i1, i2, i3;
    size_t from = 0;

    for (i0 = 0; i0 < extent[0]; i0++)
    {
        for (i1 = 0; i1 < extent[1]; i1++)
        {
            for (i2 = 0; i2 < extent[2]; i2++)
            {
                const size_t base = (size_t)i0 * (size_t)out_stride[0] + (size_t)i1 * (size_t)out_stride[1] +
                    (size_t)i2 * (size_t)out_stride[2];
                for (i3 = 0; i3 < extent[3]; i3++)
                {
                    output[base + (size_t)i3 * (size_t)out_stride[3]] = input[from++];
                }
            }
        }
    }
}

arm_cmsis_nn_status arm_transpose_s8(const int8_t *input_data,
                                     int8_t *const output_data,
                                     const cmsis_nn_dims *const input_dims,
                                     const cmsis_nn_dims *const output_dims,
                                     const cmsis_nn_transpose_params *const transpose_params)
{
    const uint32_t *perm = transpose_params->permutations;
    int32_t extent[4];
    int32_t out_stride[4] = {0, 0, 0, 0};

    if (transpose_params->num_dims == 1)
    {
        memcpy(output_data, input_data, (size_t)input_dims->n);
        return ARM_CMSIS_NN_SUCCESS;
    }
    if (transpose_params->num_dims == 2)
    {
        /* Always the matrix transpose of {n, h}; permutations are not read. */
        extent[0] = 1;
        extent[1] = 1;
        extent[2] = input_dims->n;
        extent[3] = input_dims->h;
        out_stride[2] = 1;
        out_stride[3] = input_dims->n;
    }
    else if (transpose_params->num_dims == 3)
    {
        if (perm[0] > 2u || perm[1] > 2u || perm[2] > 2u)
        {
            return ARM_CMSIS_NN_ARG_ERROR;
        }
        extent[0] = 1;
        extent[1] = input_dims->n;
        extent[2] = input_dims->h;
        extent[3] = input_dims->w;
        /* Output axis j takes input axis perm[j]; the output is {n, h, w}. */
        out_stride[perm[0] + 1u] = output_dims->h * output_dims->w;
        out_stride[perm[1] + 1u] = output_dims->w;
        out_stride[perm[2] + 1u] = 1;
    }
    else
    {
        /* Every other num_dims is treated as 4 (as upstream does). */
        if (perm[0] > 3u || perm[1] > 3u || perm[2] > 3u || perm[3] > 3u)
        {
            return ARM_CMSIS_NN_ARG_ERROR;
        }
        extent[0] = input_dims->n;
        extent[1] = input_dims->h;
        extent[2] = input_dims->w;
        extent[3] = input_dims->c;
        out_stride[perm[0]] = output_dims->h * output_dims->w * output_dims->c;
        out_stride[perm[1]] = output_dims->w * output_dims->c;
        out_stride[perm[2]] = output_dims->c;
        out_stride[perm[3]] = 1;
    }
    nnref_transpose_walk(input_data, output_data, extent, out_stride);
    return ARM_CMSIS_NN_SUCCESS;
}
