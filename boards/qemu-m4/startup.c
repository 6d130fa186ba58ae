/* QEMU mps2-an386 start-up: vector table, reset handler, SysTick and fault handlers. Written for
 * cisl. QEMU boots M-profile cores from the vector table at address 0 (it ignores the ELF entry).
 *
 * Reset order, as on the nRF52840: enable the FPU first, copy .data, zero .bss; then paint the
 * unused stack (the board reports the stack high-water mark at the end) and call main(). */
#include <stdint.h>

#include "qemu_m4.h"
#include "semihost.h"

extern uint32_t __cisl_stack_top[], __cisl_stack_bottom[];
extern uint32_t __cisl_data_load[], __cisl_data_start[], __cisl_data_end[];
extern uint32_t __cisl_bss_start[], __cisl_bss_end[];

int main(void);
void cisl_reset(void);
void cisl_fault(void);
void cisl_systick(void);

typedef void (*cisl_vector)(void);

__attribute__((used, section(".vectors"))) const cisl_vector cisl_vectors[16] = {
    (cisl_vector)(uintptr_t)__cisl_stack_top,
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
    cisl_fault,   /* PendSV */
    cisl_systick, /* SysTick: counts timer wraps */
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
    uint32_t *sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *p = __cisl_stack_bottom; p < sp - 16;) {
        *p++ = CISL_STACK_PAINT;
    }
    cisl_sh_exit(main());
}

__attribute__((noreturn)) void cisl_fault(void)
{
    static const char msg[] = "CISL fault: the emulated core took an unexpected exception\n";
    const int32_t tt = cisl_sh_open(":tt", SH_OPEN_W);
    (void)cisl_sh_write(tt, msg, sizeof msg - 1u);
    cisl_sh_exit(70);
}
