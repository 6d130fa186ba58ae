/* Choosing an elastic mode under constraints; see cisl_mode_select.h. */
#include "cisl_mode_select.h"

#include <stddef.h>

int cisl_mode_select(const cisl_mode_profile *table, uint8_t modes, uint32_t deadline_us, uint32_t energy_nj,
                     uint32_t max_mse_u)
{
    int best = -1;
    for (uint8_t m = 0; table != NULL && m < modes; m++) {
        const cisl_mode_profile *p = &table[m];
        if (p->latency_us > deadline_us || p->energy_nj > energy_nj || p->mse_u > max_mse_u) {
            continue;
        }
        if (best < 0 || p->mse_u < table[best].mse_u ||
            (p->mse_u == table[best].mse_u && p->energy_nj < table[best].energy_nj)) {
            best = (int)m;
        }
    }
    return best;
}
