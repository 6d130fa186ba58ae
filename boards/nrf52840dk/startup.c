/* nRF52840 start-up: vector table, reset handler, fault handler. Written for cisl.
 *
 * Reset order: enable the FPU first (the code is built with -mfloat-abi=hard, so the compiler and
 * the C library may use VFP registers anywhere), copy .data from flash, zero .bss, call main(). */
#include <stdint.h>

#include "nrf52840_regs.h"

extern uint32_t __cisl_stack_top[];
extern uint32_t __cisl_data_load[], __cisl_data_start[], __cisl_data_end[];
extern uint32_t __cisl_bss_start[], __cisl_bss_end[];

int main(void);
void cisl_reset(void);
void cisl_fault(void);

#define NRF52840_IRQS 48u

typedef void (*cisl_vector)(void);

#define F8 cisl_fault, cisl_fault, cisl_fault, cisl_fault, cisl_fault, cisl_fault, cisl_fault, cisl_fault

/* 16 system exceptions, then the nRF52840's 48 peripheral interrupts (none is enabled). */
__attribute__((used, section(".vectors"))) const cisl_vector cisl_vectors[16u + NRF52840_IRQS] = {
    (cisl_vector)(uintptr_t)__cisl_stack_top, /* initial stack pointer */
    cisl_reset,
    cisl_fault, /* NMI */
    cisl_fault, /* HardFault */
    cisl_fault, /* MemManage */
    cisl_fault, /* BusFault */
    cisl_fault, /* UsageFault */
    0, 0, 0, 0,
    cisl_fault, /* SVCall */
    cisl_fault, /* DebugMonitor */
    0,
    cisl_fault, /* PendSV */
    cisl_fault, /* SysTick */
    /* IRQ 0..47 */
    F8, F8, F8, F8, F8, F8,
};

__attribute__((noreturn)) void cisl_reset(void)
{
    CM4_REG(CM4_SCB_CPACR) |= 0xFu << 20; /* CP10, CP11: full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    for (uint32_t *src = __cisl_data_load, *dst = __cisl_data_start; dst < __cisl_data_end;) {
        *dst++ = *src++;
    }
    for (uint32_t *p = __cisl_bss_start; p < __cisl_bss_end;) {
        *p++ = 0u;
    }
    (void)main();
    for (;;) {
        __asm__ volatile("wfe");
    }
}

/* Any fault or unexpected exception: stop here (a debugger shows where; the UART stays quiet,
 * the missing `end` line tells the host that the node did not finish). */
__attribute__((noreturn)) void cisl_fault(void)
{
    for (;;) {
    }
}
