/* Choosing an elastic mode under constraints (docs/design/elastic.md), the same rule as the host's
 * `cisl modes` (codegen/modes.py select_mode): of the modes whose latency, energy and validation
 * MSE are within the limits, the one with the lowest validation MSE (ties: the lower energy, then
 * the lower mode). Integers, so that node and host agree bit for bit. */
#ifndef CISL_MODE_SELECT_H
#define CISL_MODE_SELECT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CISL_NO_LIMIT 0xFFFFFFFFu

typedef struct {
    uint32_t latency_us; /* one inference, the timing model's central estimate */
    uint32_t energy_nj;  /* the network's energy per inference (every node), central */
    uint32_t mse_u;      /* validation MSE x 1e6 (rounded) */
} cisl_mode_profile;

/* The mode to run, or -1 if none meets every limit (CISL_NO_LIMIT: no limit). */
int cisl_mode_select(const cisl_mode_profile *table, uint8_t modes, uint32_t deadline_us, uint32_t energy_nj,
                     uint32_t max_mse_u);

#ifdef __cplusplus
}
#endif

#endif /* CISL_MODE_SELECT_H */
