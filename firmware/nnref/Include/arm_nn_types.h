/*
 * cisl nnref: the CMSIS-NN types that cisl-generated code uses.
 *
 * Written for cisl (Apache-2.0). Names, member order and member types follow
 * the public CMSIS-NN API so that generated code compiles unchanged against
 * this directory or against an upstream CMSIS-NN Include directory.
 */
#ifndef ARM_NN_TYPES_H
#define ARM_NN_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* Return codes of the kernels. */
typedef enum
{
    ARM_CMSIS_NN_SUCCESS = 0,
    ARM_CMSIS_NN_ARG_ERROR = -1,
    ARM_CMSIS_NN_NO_IMPL_ERROR = -2,
    ARM_CMSIS_NN_FAILURE = -3
} arm_cmsis_nn_status;

/* Scratch memory handed to a kernel; nnref never needs it (buf may be NULL). */
typedef struct
{
    void *buf;
    int32_t size;
} cmsis_nn_context;

/* Tensor dimensions; what each field means depends on the kernel. */
typedef struct
{
    int32_t n;
    int32_t h;
    int32_t w;
    int32_t c;
} cmsis_nn_dims;

/* Output clamp range. */
typedef struct
{
    int32_t min;
    int32_t max;
} cmsis_nn_activation;

/* Per-channel requantisation: one multiplier and shift per output channel. */
typedef struct
{
    int32_t *multiplier;
    int32_t *shift;
} cmsis_nn_per_channel_quant_params;

/* Per-tensor requantisation. */
typedef struct
{
    int32_t multiplier;
    int32_t shift;
} cmsis_nn_per_tensor_quant_params;

/* Fully connected: input_offset = -input zero point, filter_offset = -filter
 * zero point, output_offset = +output zero point. */
typedef struct
{
    int32_t input_offset;
    int32_t filter_offset;
    int32_t output_offset;
    cmsis_nn_activation activation;
} cmsis_nn_fc_params;

/* Batch matmul; adj_x and adj_y are ignored (the RHS is always given transposed). */
typedef struct
{
    const bool adj_x;
    const bool adj_y;
    cmsis_nn_fc_params fc_params;
} cmsis_nn_bmm_params;

/* Transpose: output axis i takes input axis permutations[i]. */
typedef struct
{
    const int32_t num_dims;
    const uint32_t *permutations;
} cmsis_nn_transpose_params;

#endif /* ARM_NN_TYPES_H */
