/* SysTick as a 64-bit tick counter on QEMU mps2-an386: the 24-bit timer wraps into an interrupt
 * that counts wraps. Under -icount shift=0 one tick is QEMU_INSNS_PER_TICK instructions. Shared
 * by the board and bench/qemu/fc_harness.c so both count instructions the same way. */
#include <stdint.h>

#include "qemu_m4.h"

static volatile uint32_t systick_wraps;

void cisl_systick(void); /* the SysTick vector (startup.c) */
void cisl_systick(void) { systick_wraps++; }

void cisl_qemu_systick_start(void)
{
    CM4_REG(CM4_SYST_RVR) = 0xFFFFFFu;
    CM4_REG(CM4_SYST_CVR) = 0u;
    CM4_REG(CM4_SYST_CSR) = 7u; /* processor clock, interrupt on wrap, enabled */
}

uint64_t cisl_qemu_ticks(void)
{
    uint32_t w;
    uint32_t v;
    do {
        w = systick_wraps;
        v = CM4_REG(CM4_SYST_CVR);
    } while (w != systick_wraps);
    return ((uint64_t)w << 24) + (0xFFFFFFu - v);
}
