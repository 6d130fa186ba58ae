/* QEMU mps2-an386 board internals (Cortex-M4 core registers from the ARMv7-M architecture). */
#ifndef CISL_QEMU_M4_H
#define CISL_QEMU_M4_H

#include <stdint.h>

#define CM4_SCB_CPACR 0xE000ED88u /* coprocessor access: CP10/CP11 full access = bits 20..23 */
#define CM4_SYST_CSR 0xE000E010u  /* SysTick control: ENABLE bit 0, TICKINT bit 1, CLKSOURCE bit 2 */
#define CM4_SYST_RVR 0xE000E014u  /* reload value (24 bit) */
#define CM4_SYST_CVR 0xE000E018u  /* current value, counts down */
#define CM4_REG(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

#define CISL_STACK_PAINT 0x5AC4C15Au

/* SysTick runs on the 25 MHz SYSCLK of mps2-an386; with QEMU's -icount shift=0 one instruction
 * takes 1 ns of virtual time, so one tick is 40 instructions. */
#define QEMU_SYSCLK_HZ 25000000u
#define QEMU_INSNS_PER_TICK 40u

void cisl_qemu_systick_start(void); /* systick.c: start SysTick wrapping every 2^24 ticks */
uint64_t cisl_qemu_ticks(void);      /* ticks since cisl_qemu_systick_start() */

#endif /* CISL_QEMU_M4_H */
