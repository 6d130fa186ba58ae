/* nRF52840 start-up: vector table, reset handler, fault handler. Written for cisl.
 *
 * Reset order: the access port protection first (below), then the instruction cache, then the FPU
 * (the code is built with -mfloat-abi=hard, so the compiler and the C library may use VFP registers
 * anywhere), copy .data from flash, zero .bss, call main().
 *
 * Instruction cache: NVMC.ICACHECNF resets to 0 (CACHEEN Disabled; nrf52840.svd resetValue
 * 0x00000000), so without this write every instruction fetch waits for the flash. board.toml
 * [timing] icache and every cycle budget fitted to the cycle model ([mixer] per_packet_cycles,
 * slot_cycles) assume the cache on; Zephyr enables it at boot on every nRF52 (CONFIG_NRF_ENABLE_ICACHE,
 * default y). The emulated part (codegen/timing/nrf52840_soc.py) prices fetches as cache misses
 * until the firmware sets CACHEEN.
 *
 * Access port protection (docs/design/approtect.md; nRF52840 PS v1.8 "Access port protection",
 * IN-141): on build codes Fxx and later (revision 3, FICR.INFO.VARIANT "AAF0", ...) the debug port
 * is open only while UICR.APPROTECT = HwDisabled (0x5A) AND the firmware has written
 * APPROTECT.DISABLE = SwDisable (0x5A) since the last reset. board.toml [security] debug_port
 * gives CISL_DEBUG_PORT_OPEN: 1 ("open") does both, 0 ("protected") neither, so a rev-3 part
 * relocks at every reset (older parts: UICR.APPROTECT = Enabled (0x00) protects them). */
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

#ifndef CISL_DEBUG_PORT_OPEN
#error "CISL_DEBUG_PORT_OPEN must be 0 or 1 (board.toml [security] debug_port; codegen/build.py passes it)"
#endif

#if CISL_DEBUG_PORT_OPEN
/* The first build code with the new protection: nRF52840 'F' (revision 3), nRF52833 'B'
 * (revision 2); board.toml [security] approtect_from_build. */
#ifndef CISL_APPROTECT_FROM_BUILD
#define CISL_APPROTECT_FROM_BUILD 'F'
#endif

/* The build-code letter, bits 15..8 of FICR.INFO.VARIANT ('F' in "AAF0"): that build code and
 * later have the hardware-and-software access port protection; APPROTECT.DISABLE does not exist
 * before. */
static int cisl_new_approtect(void)
{
    uint32_t build = (NRF_REG32(NRF_BASE_FICR, NRF_REG_FICR_INFO_VARIANT) >> 8) & 0xFFu;
    return build >= (uint32_t)CISL_APPROTECT_FROM_BUILD && build <= (uint32_t)'Z';
}

static void cisl_nvmc_wait(void)
{
    while (NRF_GET(NRF_FLD_NVMC_READY_READY, NRF_REG32(NRF_BASE_NVMC, NRF_REG_NVMC_READY)) !=
           NRF_VAL_NVMC_READY_READY_READY) {
    }
}

/* Keep the debug port open across resets: SwDisable now; and if UICR.APPROTECT is erased (as
 * after pyocd's or an ERASEALL recover), program HwDisabled into that one word (no page erase,
 * the node label in CUSTOMER[0] stays) and reset so the hardware branch reads it. */
static void cisl_open_debug_port(void)
{
    if (!cisl_new_approtect()) {
        return; /* older parts: UICR.APPROTECT alone decides (erased = open) */
    }
    NRF_REG32(NRF_BASE_APPROTECT, NRF_REG_APPROTECT_DISABLE) =
        NRF_FV(NRF_FLD_APPROTECT_DISABLE_DISABLE, NRF_VAL_APPROTECT_DISABLE_DISABLE_SWDISABLE);
    uint32_t pall = NRF_GET(NRF_FLD_UICR_APPROTECT_PALL, NRF_REG32(NRF_BASE_UICR, NRF_REG_UICR_APPROTECT));
    if (pall == NRF_VAL_UICR_APPROTECT_PALL_DISABLED) {
        NRF_REG32(NRF_BASE_NVMC, NRF_REG_NVMC_CONFIG) = NRF_FV(NRF_FLD_NVMC_CONFIG_WEN, NRF_VAL_NVMC_CONFIG_WEN_WEN);
        cisl_nvmc_wait();
        NRF_REG32(NRF_BASE_UICR, NRF_REG_UICR_APPROTECT) =
            NRF_FV(NRF_FLD_UICR_APPROTECT_PALL, NRF_VAL_UICR_APPROTECT_PALL_HWDISABLED) | 0xFFFFFF00u;
        cisl_nvmc_wait();
        NRF_REG32(NRF_BASE_NVMC, NRF_REG_NVMC_CONFIG) = NRF_FV(NRF_FLD_NVMC_CONFIG_WEN, NRF_VAL_NVMC_CONFIG_WEN_REN);
        cisl_nvmc_wait();
        __asm__ volatile("dsb" ::: "memory");
        CM4_REG(CM4_SCB_AIRCR) = (0x05FAu << 16) | (1u << 2); /* SYSRESETREQ */
        __asm__ volatile("dsb" ::: "memory");
        for (;;) {
        }
    }
}
#endif

__attribute__((noreturn)) void cisl_reset(void)
{
#if CISL_DEBUG_PORT_OPEN
    cisl_open_debug_port();
#endif
    NRF_REG32(NRF_BASE_NVMC, NRF_REG_NVMC_ICACHECNF) =
        NRF_FV(NRF_FLD_NVMC_ICACHECNF_CACHEEN, NRF_VAL_NVMC_ICACHECNF_CACHEEN_ENABLED);
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

/* Any fault or unexpected exception: disarm the radio, then stop here (a debugger shows where; the
 * UART stays quiet, the missing `end` line tells the host that the node did not finish) until the
 * watchdog, which nothing here reloads, resets the part (board.toml [watchdog]; board.c). 
 *
 * A fault can strike while radio.c has a transmission armed (PPI channel 0: TIMER0 COMPARE[0] ->
 * RADIO TXEN, enabled across mx_prepare). TIMER0 keeps counting, so without this its compare would
 * match again every 2^32 / 16 MHz = 268 s and key the transmitter with the stale packet on the
 * network's channel and access address, for as long as the node is left. So: every PPI channel
 * radio.c uses off, the radio disabled, TIMER0 stopped; plain stores only (no polling: the handler
 * must not wait on a peripheral). */
__attribute__((noreturn)) void cisl_fault(void)
{
    NRF_REG32(NRF_BASE_PPI, NRF_REG_PPI_CHENCLR) = NRF_FV(NRF_FLD_PPI_CHENCLR_CH0, 1u) |
                                                   NRF_FV(NRF_FLD_PPI_CHENCLR_CH1, 1u) |
                                                   NRF_FV(NRF_FLD_PPI_CHENCLR_CH2, 1u);
    NRF_REG32(NRF_BASE_RADIO, NRF_REG_RADIO_TASKS_DISABLE) = 1u;
    NRF_REG32(NRF_BASE_TIMER0, NRF_REG_TIMER_TASKS_STOP) = 1u;
    __asm__ volatile("dsb" ::: "memory");
    for (;;) {
    }
}
