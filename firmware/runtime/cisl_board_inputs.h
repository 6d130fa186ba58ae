/* Input windows compiled into a board image (boards without a host link, e.g. nrf52840dk):
 * `cisl build` quantises build/inputs.npy with the plan's input parameters and generates
 * cisl_board_inputs.c; the board serves window i mod cisl_board_input_count to inference i. */
#ifndef CISL_BOARD_INPUTS_H
#define CISL_BOARD_INPUTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const int8_t cisl_board_inputs[];       /* cisl_board_input_count windows, back to back */
extern const uint32_t cisl_board_input_count;
extern const uint32_t cisl_board_input_len;    /* int8 values per window (the model's look-back) */

#ifdef __cplusplus
}
#endif

#endif /* CISL_BOARD_INPUTS_H */
