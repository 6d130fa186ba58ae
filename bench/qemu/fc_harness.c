/* Bare CMSIS-NN fully-connected calls on the emulated Cortex-M4, one per shape of a node schedule,
 * timed like the node firmware (SysTick under QEMU -icount shift=0: instructions, steps of 40).
 * Built by bench/qemu_instructions.py with the boards/qemu-m4 start-up code; the shapes come from
 * the generated fc_shapes.h: FC_SHAPES = { {rows, k, n}, ... }. Prints one line per shape:
 * "FC rows k n per_tensor_insns per_channel_insns". */
#include <stddef.h>
#include <stdint.h>

#include "arm_nnfunctions.h"
#include "fc_shapes.h"
#include "qemu_m4.h"
#include "semihost.h"

static uint64_t insns(void) { return cisl_qemu_ticks() * QEMU_INSNS_PER_TICK; }

static int8_t input[FC_MAX_IN];
static int8_t weights[FC_MAX_W];
static int32_t bias[FC_MAX_N];
static int32_t mult[FC_MAX_N];
static int32_t shift[FC_MAX_N];
static int8_t output[FC_MAX_OUT];
static const int32_t shapes[][3] = FC_SHAPES;

static int32_t console;

static void put(const char *s)
{
    uint32_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    (void)cisl_sh_write(console, s, n);
}

static void put_u(uint64_t v)
{
    char b[24];
    int i = 23;
    b[i] = '\0';
    do {
        b[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v != 0u);
    put(b + i);
}

int main(void)
{
    cisl_qemu_systick_start();
    console = cisl_sh_open(":tt", SH_OPEN_W);
    uint32_t x = 12345u;
    for (size_t i = 0; i < sizeof input; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        input[i] = (int8_t)x;
    }
    for (size_t i = 0; i < sizeof weights; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        weights[i] = (int8_t)(x % 255u) - 127;
    }
    for (size_t i = 0; i < FC_MAX_N; i++) {
        bias[i] = (int32_t)(i * 37u) - 1000;
        mult[i] = 1518500250 + (int32_t)i;
        shift[i] = -9;
    }
    const cmsis_nn_context ctx = {NULL, 0};
    const cmsis_nn_fc_params fc = {3, 0, -5, {-128, 127}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const cmsis_nn_dims in_dims = {shapes[s][0], 1, 1, shapes[s][1]};
        const cmsis_nn_dims filter_dims = {shapes[s][1], 1, 1, shapes[s][2]};
        const cmsis_nn_dims bias_dims = {1, 1, 1, shapes[s][2]};
        const cmsis_nn_dims out_dims = {shapes[s][0], 1, 1, shapes[s][2]};
        const cmsis_nn_per_tensor_quant_params pt = {1518500250, -9};
        const cmsis_nn_per_channel_quant_params pc = {mult, shift};
        const uint64_t t0 = insns();
        (void)arm_fully_connected_s8(&ctx, &fc, &pt, &in_dims, input, &filter_dims, weights, &bias_dims, bias, &out_dims,
                                     output);
        const uint64_t t1 = insns();
        (void)arm_fully_connected_per_channel_s8(&ctx, &fc, &pc, &in_dims, input, &filter_dims, weights, &bias_dims,
                                                 bias, &out_dims, output);
        const uint64_t t2 = insns();
        put("FC ");
        put_u((uint64_t)shapes[s][0]);
        put(" ");
        put_u((uint64_t)shapes[s][1]);
        put(" ");
        put_u((uint64_t)shapes[s][2]);
        put(" ");
        put_u(t1 - t0);
        put(" ");
        put_u(t2 - t1);
        put("\n");
    }
    return 0;
}
