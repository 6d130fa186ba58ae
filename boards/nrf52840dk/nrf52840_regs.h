/* nRF52840 registers used by cisl's nRF52840-DK board support, written for cisl from the facts of
 * the nRF52840 product specification (addresses, offsets, bit positions). Only what the board
 * touches is here.
 *
 * Naming (checked by tests/test_board_nrf52840.py against the SVD file that the pyocd package
 * ships, see codegen/svd.py):
 *   NRF_BASE_<instance>                  peripheral base address
 *   NRF_REG_<layout>_<register>[(n)]     register offset (arrays take the element index)
 *   NRF_FLD_<layout>_<register>_<field>  NRF_FIELD(bit position, width)
 *   NRF_VAL_<layout>_<register>_<field>_<name>  an enumerated field value
 * Cortex-M4 core registers (ARMv7-M architecture, not in the SVD) use the CM4_ prefix. */
#ifndef CISL_NRF52840_REGS_H
#define CISL_NRF52840_REGS_H

#include <stdint.h>

#define NRF_FIELD(pos, width) (((uint32_t)(width) << 8) | (uint32_t)(pos))
#define NRF_FIELD_POS(f) ((f) & 0xFFu)
#define NRF_FIELD_WIDTH(f) ((f) >> 8)
#define NRF_FIELD_MASK(f) ((NRF_FIELD_WIDTH(f) >= 32u ? 0xFFFFFFFFu : ((1u << NRF_FIELD_WIDTH(f)) - 1u)) << NRF_FIELD_POS(f))
/* value v placed in field f */
#define NRF_FV(f, v) ((((uint32_t)(v)) << NRF_FIELD_POS(f)) & NRF_FIELD_MASK(f))
/* field f of register value r */
#define NRF_GET(f, r) ((((uint32_t)(r)) & NRF_FIELD_MASK(f)) >> NRF_FIELD_POS(f))

#define NRF_REG32(base, off) (*(volatile uint32_t *)((uintptr_t)(base) + (uintptr_t)(off)))

/* ---- peripheral instances ---------------------------------------------------------------- */
#define NRF_BASE_APPROTECT 0x40000000u /* shares 0x40000000 with CLOCK and POWER (rev-3 parts) */
#define NRF_BASE_FICR 0x10000000u
#define NRF_BASE_UICR 0x10001000u
#define NRF_BASE_CLOCK 0x40000000u
#define NRF_BASE_POWER 0x40000000u /* shares 0x40000000 with CLOCK */
#define NRF_BASE_RADIO 0x40001000u
#define NRF_BASE_UARTE0 0x40002000u
#define NRF_BASE_TIMER0 0x40008000u
#define NRF_BASE_TIMER1 0x40009000u
#define NRF_BASE_PPI 0x4001F000u
#define NRF_BASE_P0 0x50000000u

/* ---- POWER: why the part last reset (the boot line's `reset`) ---------------------------------- */
#define NRF_REG_POWER_RESETREAS 0x400u
#define NRF_FLD_POWER_RESETREAS_RESETPIN NRF_FIELD(0, 1)

/* ---- CLOCK: high-frequency crystal oscillator --------------------------------------------- */
#define NRF_REG_CLOCK_TASKS_HFCLKSTART 0x000u
#define NRF_REG_CLOCK_EVENTS_HFCLKSTARTED 0x100u
#define NRF_REG_CLOCK_HFCLKSTAT 0x40Cu
#define NRF_FLD_CLOCK_HFCLKSTAT_SRC NRF_FIELD(0, 1)
#define NRF_FLD_CLOCK_HFCLKSTAT_STATE NRF_FIELD(16, 1)
#define NRF_VAL_CLOCK_HFCLKSTAT_SRC_XTAL 1u
#define NRF_VAL_CLOCK_HFCLKSTAT_STATE_RUNNING 1u

/* ---- UICR / FICR --------------------------------------------------------------------------- */
#define NRF_REG_UICR_CUSTOMER(n) (0x080u + 4u * (n))
#define NRF_FLD_UICR_CUSTOMER_CUSTOMER NRF_FIELD(0, 32)
#define NRF_REG_FICR_DEVICEID(n) (0x060u + 4u * (n))
#define NRF_REG_FICR_INFO_VARIANT 0x104u /* ASCII build code, e.g. 0x41414630 "AAF0" */
#define NRF_FLD_FICR_INFO_VARIANT_VARIANT NRF_FIELD(0, 32)

/* ---- access port protection (docs/design/approtect.md) -------------------------------------- */
#define NRF_REG_UICR_APPROTECT 0x208u
#define NRF_FLD_UICR_APPROTECT_PALL NRF_FIELD(0, 8)
#define NRF_VAL_UICR_APPROTECT_PALL_ENABLED 0x00u
#define NRF_VAL_UICR_APPROTECT_PALL_HWDISABLED 0x5Au /* build codes Fxx and later */
#define NRF_VAL_UICR_APPROTECT_PALL_DISABLED 0xFFu   /* erased; protects rev-3 parts */
#define NRF_REG_APPROTECT_DISABLE 0x558u
#define NRF_FLD_APPROTECT_DISABLE_DISABLE NRF_FIELD(0, 8)
#define NRF_VAL_APPROTECT_DISABLE_DISABLE_SWDISABLE 0x5Au

/* ---- NVMC (writing one UICR word; the instruction cache) -------------------------------- */
#define NRF_BASE_NVMC 0x4001E000u
#define NRF_REG_NVMC_READY 0x400u
#define NRF_REG_NVMC_CONFIG 0x504u
#define NRF_FLD_NVMC_READY_READY NRF_FIELD(0, 1)
#define NRF_VAL_NVMC_READY_READY_READY 1u
#define NRF_FLD_NVMC_CONFIG_WEN NRF_FIELD(0, 2)
#define NRF_VAL_NVMC_CONFIG_WEN_REN 0u
#define NRF_VAL_NVMC_CONFIG_WEN_WEN 1u
/* Instruction cache: ICACHECNF resets to 0 = CACHEEN Disabled (SVD resetValue 0x00000000) */
#define NRF_REG_NVMC_ICACHECNF 0x540u
#define NRF_FLD_NVMC_ICACHECNF_CACHEEN NRF_FIELD(0, 1)
#define NRF_VAL_NVMC_ICACHECNF_CACHEEN_DISABLED 0u
#define NRF_VAL_NVMC_ICACHECNF_CACHEEN_ENABLED 1u

/* ---- GPIO port 0 --------------------------------------------------------------------------- */
#define NRF_REG_GPIO_OUTSET 0x508u
#define NRF_REG_GPIO_PIN_CNF(n) (0x700u + 4u * (n))
#define NRF_FLD_GPIO_PIN_CNF_DIR NRF_FIELD(0, 1)
#define NRF_FLD_GPIO_PIN_CNF_INPUT NRF_FIELD(1, 1)
#define NRF_FLD_GPIO_PIN_CNF_PULL NRF_FIELD(2, 2)
#define NRF_VAL_GPIO_PIN_CNF_DIR_OUTPUT 1u
#define NRF_VAL_GPIO_PIN_CNF_DIR_INPUT 0u
#define NRF_VAL_GPIO_PIN_CNF_INPUT_CONNECT 0u
#define NRF_VAL_GPIO_PIN_CNF_INPUT_DISCONNECT 1u
#define NRF_VAL_GPIO_PIN_CNF_PULL_PULLUP 3u

/* ---- UARTE0 (EasyDMA UART) ------------------------------------------------------------------- */
#define NRF_REG_UARTE_TASKS_STARTRX 0x000u
#define NRF_REG_UARTE_TASKS_STOPRX 0x004u
#define NRF_REG_UARTE_TASKS_STARTTX 0x008u
#define NRF_REG_UARTE_TASKS_STOPTX 0x00Cu
#define NRF_REG_UARTE_TASKS_FLUSHRX 0x02Cu
#define NRF_REG_UARTE_EVENTS_RXDRDY 0x108u
#define NRF_REG_UARTE_EVENTS_ENDRX 0x110u
#define NRF_REG_UARTE_EVENTS_ENDTX 0x120u
#define NRF_REG_UARTE_EVENTS_RXTO 0x144u
#define NRF_REG_UARTE_EVENTS_TXSTOPPED 0x158u
#define NRF_REG_UARTE_ENABLE 0x500u
#define NRF_REG_UARTE_PSEL_TXD 0x50Cu
#define NRF_REG_UARTE_PSEL_RXD 0x514u
#define NRF_REG_UARTE_BAUDRATE 0x524u
#define NRF_REG_UARTE_RXD_PTR 0x534u
#define NRF_REG_UARTE_RXD_MAXCNT 0x538u
#define NRF_REG_UARTE_RXD_AMOUNT 0x53Cu
#define NRF_REG_UARTE_TXD_PTR 0x544u
#define NRF_REG_UARTE_TXD_MAXCNT 0x548u
#define NRF_REG_UARTE_CONFIG 0x56Cu
#define NRF_FLD_UARTE_ENABLE_ENABLE NRF_FIELD(0, 4)
#define NRF_VAL_UARTE_ENABLE_ENABLE_ENABLED 8u
#define NRF_FLD_UARTE_PSEL_TXD_PIN NRF_FIELD(0, 5)
#define NRF_FLD_UARTE_PSEL_TXD_PORT NRF_FIELD(5, 1)
#define NRF_FLD_UARTE_PSEL_TXD_CONNECT NRF_FIELD(31, 1)
#define NRF_VAL_UARTE_PSEL_TXD_CONNECT_CONNECTED 0u
#define NRF_FLD_UARTE_PSEL_RXD_PIN NRF_FIELD(0, 5)
#define NRF_FLD_UARTE_PSEL_RXD_PORT NRF_FIELD(5, 1)
#define NRF_FLD_UARTE_PSEL_RXD_CONNECT NRF_FIELD(31, 1)
#define NRF_VAL_UARTE_PSEL_RXD_CONNECT_CONNECTED 0u
#define NRF_VAL_UARTE_PSEL_RXD_CONNECT_DISCONNECTED 1u
#define NRF_FLD_UARTE_BAUDRATE_BAUDRATE NRF_FIELD(0, 32)
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD9600 0x00275000u
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD115200 0x01D60000u
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD230400 0x03B00000u
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD460800 0x07400000u
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD921600 0x0F000000u
#define NRF_VAL_UARTE_BAUDRATE_BAUDRATE_BAUD1M 0x10000000u
#define NRF_FLD_UARTE_RXD_MAXCNT_MAXCNT NRF_FIELD(0, 16)
#define NRF_FLD_UARTE_RXD_AMOUNT_AMOUNT NRF_FIELD(0, 16)
#define NRF_FLD_UARTE_TXD_MAXCNT_MAXCNT NRF_FIELD(0, 16)
#define NRF_FLD_UARTE_CONFIG_HWFC NRF_FIELD(0, 1)
#define NRF_FLD_UARTE_CONFIG_PARITY NRF_FIELD(1, 3)

/* ---- TIMER0..4 (same layout) ------------------------------------------------------------------ */
#define NRF_REG_TIMER_TASKS_START 0x000u
#define NRF_REG_TIMER_TASKS_STOP 0x004u
#define NRF_REG_TIMER_TASKS_CLEAR 0x00Cu
#define NRF_REG_TIMER_TASKS_CAPTURE(n) (0x040u + 4u * (n))
#define NRF_REG_TIMER_EVENTS_COMPARE(n) (0x140u + 4u * (n))
#define NRF_REG_TIMER_SHORTS 0x200u
#define NRF_REG_TIMER_MODE 0x504u
#define NRF_REG_TIMER_BITMODE 0x508u
#define NRF_REG_TIMER_PRESCALER 0x510u
#define NRF_REG_TIMER_CC(n) (0x540u + 4u * (n))
#define NRF_FLD_TIMER_MODE_MODE NRF_FIELD(0, 2)
#define NRF_VAL_TIMER_MODE_MODE_TIMER 0u
#define NRF_FLD_TIMER_BITMODE_BITMODE NRF_FIELD(0, 2)
#define NRF_VAL_TIMER_BITMODE_BITMODE_32BIT 3u
#define NRF_FLD_TIMER_PRESCALER_PRESCALER NRF_FIELD(0, 4)

/* ---- PPI (programmable channels 0..19) ------------------------------------------------------- */
#define NRF_REG_PPI_CHENSET 0x504u
#define NRF_REG_PPI_CHENCLR 0x508u
#define NRF_REG_PPI_CH_EEP(n) (0x510u + 8u * (n))
#define NRF_REG_PPI_CH_TEP(n) (0x514u + 8u * (n))
#define NRF_FLD_PPI_CHENSET_CH0 NRF_FIELD(0, 1)
#define NRF_FLD_PPI_CHENSET_CH1 NRF_FIELD(1, 1)
#define NRF_FLD_PPI_CHENSET_CH2 NRF_FIELD(2, 1)
#define NRF_FLD_PPI_CHENCLR_CH0 NRF_FIELD(0, 1)
#define NRF_FLD_PPI_CHENCLR_CH1 NRF_FIELD(1, 1)
#define NRF_FLD_PPI_CHENCLR_CH2 NRF_FIELD(2, 1)

/* ---- RADIO -------------------------------------------------------------------------------------- */
#define NRF_REG_RADIO_TASKS_TXEN 0x000u
#define NRF_REG_RADIO_TASKS_RXEN 0x004u
#define NRF_REG_RADIO_TASKS_DISABLE 0x010u
#define NRF_REG_RADIO_EVENTS_READY 0x100u
#define NRF_REG_RADIO_EVENTS_ADDRESS 0x104u
#define NRF_REG_RADIO_EVENTS_END 0x10Cu
#define NRF_REG_RADIO_EVENTS_DISABLED 0x110u
#define NRF_REG_RADIO_SHORTS 0x200u
#define NRF_REG_RADIO_CRCSTATUS 0x400u
#define NRF_REG_RADIO_PACKETPTR 0x504u
#define NRF_REG_RADIO_FREQUENCY 0x508u
#define NRF_REG_RADIO_TXPOWER 0x50Cu
#define NRF_REG_RADIO_MODE 0x510u
#define NRF_REG_RADIO_PCNF0 0x514u
#define NRF_REG_RADIO_PCNF1 0x518u
#define NRF_REG_RADIO_BASE0 0x51Cu
#define NRF_REG_RADIO_PREFIX0 0x524u
#define NRF_REG_RADIO_TXADDRESS 0x52Cu
#define NRF_REG_RADIO_RXADDRESSES 0x530u
#define NRF_REG_RADIO_CRCCNF 0x534u
#define NRF_REG_RADIO_CRCPOLY 0x538u
#define NRF_REG_RADIO_CRCINIT 0x53Cu
#define NRF_REG_RADIO_STATE 0x550u
#define NRF_REG_RADIO_DATAWHITEIV 0x554u
#define NRF_REG_RADIO_MODECNF0 0x650u
#define NRF_REG_RADIO_POWER 0xFFCu

#define NRF_FLD_RADIO_SHORTS_READY_START NRF_FIELD(0, 1)
#define NRF_FLD_RADIO_SHORTS_END_DISABLE NRF_FIELD(1, 1)
#define NRF_FLD_RADIO_CRCSTATUS_CRCSTATUS NRF_FIELD(0, 1)
#define NRF_VAL_RADIO_CRCSTATUS_CRCSTATUS_CRCOK 1u
#define NRF_FLD_RADIO_FREQUENCY_FREQUENCY NRF_FIELD(0, 7)
#define NRF_FLD_RADIO_FREQUENCY_MAP NRF_FIELD(8, 1)
#define NRF_VAL_RADIO_FREQUENCY_MAP_DEFAULT 0u
#define NRF_FLD_RADIO_TXPOWER_TXPOWER NRF_FIELD(0, 8)
#define NRF_FLD_RADIO_MODE_MODE NRF_FIELD(0, 4)
#define NRF_VAL_RADIO_MODE_MODE_BLE_1MBIT 3u
#define NRF_VAL_RADIO_MODE_MODE_BLE_2MBIT 4u
#define NRF_FLD_RADIO_PCNF0_LFLEN NRF_FIELD(0, 4)
#define NRF_FLD_RADIO_PCNF0_S0LEN NRF_FIELD(8, 1)
#define NRF_FLD_RADIO_PCNF0_S1LEN NRF_FIELD(16, 4)
#define NRF_FLD_RADIO_PCNF0_PLEN NRF_FIELD(24, 2)
#define NRF_VAL_RADIO_PCNF0_PLEN_8BIT 0u
#define NRF_VAL_RADIO_PCNF0_PLEN_16BIT 1u
#define NRF_FLD_RADIO_PCNF1_MAXLEN NRF_FIELD(0, 8)
#define NRF_FLD_RADIO_PCNF1_STATLEN NRF_FIELD(8, 8)
#define NRF_FLD_RADIO_PCNF1_BALEN NRF_FIELD(16, 3)
#define NRF_FLD_RADIO_PCNF1_ENDIAN NRF_FIELD(24, 1)
#define NRF_VAL_RADIO_PCNF1_ENDIAN_LITTLE 0u
#define NRF_FLD_RADIO_PCNF1_WHITEEN NRF_FIELD(25, 1)
#define NRF_VAL_RADIO_PCNF1_WHITEEN_ENABLED 1u
#define NRF_FLD_RADIO_PREFIX0_AP0 NRF_FIELD(0, 8)
#define NRF_FLD_RADIO_TXADDRESS_TXADDRESS NRF_FIELD(0, 3)
#define NRF_FLD_RADIO_RXADDRESSES_ADDR0 NRF_FIELD(0, 1)
#define NRF_VAL_RADIO_RXADDRESSES_ADDR0_ENABLED 1u
#define NRF_FLD_RADIO_CRCCNF_LEN NRF_FIELD(0, 2)
#define NRF_VAL_RADIO_CRCCNF_LEN_THREE 3u
#define NRF_FLD_RADIO_CRCCNF_SKIPADDR NRF_FIELD(8, 2)
#define NRF_VAL_RADIO_CRCCNF_SKIPADDR_SKIP 1u
#define NRF_FLD_RADIO_CRCPOLY_CRCPOLY NRF_FIELD(0, 24)
#define NRF_FLD_RADIO_CRCINIT_CRCINIT NRF_FIELD(0, 24)
#define NRF_FLD_RADIO_STATE_STATE NRF_FIELD(0, 4)
#define NRF_VAL_RADIO_STATE_STATE_DISABLED 0u
#define NRF_FLD_RADIO_DATAWHITEIV_DATAWHITEIV NRF_FIELD(0, 7)
#define NRF_FLD_RADIO_MODECNF0_RU NRF_FIELD(0, 1)
#define NRF_VAL_RADIO_MODECNF0_RU_FAST 1u
#define NRF_FLD_RADIO_MODECNF0_DTX NRF_FIELD(8, 2)
#define NRF_VAL_RADIO_MODECNF0_DTX_CENTER 2u
#define NRF_FLD_RADIO_POWER_POWER NRF_FIELD(0, 1)

/* ---- Cortex-M4 core (ARMv7-M architecture reference) ------------------------------------------- */
#define CM4_SCB_CPACR 0xE000ED88u   /* coprocessor access: CP10/CP11 full access = bits 20..23 */
#define CM4_SCB_AIRCR 0xE000ED0Cu   /* VECTKEY 0x05FA in bits 16..31, SYSRESETREQ = bit 2 */
#define CM4_DEMCR 0xE000EDFCu       /* debug exception and monitor control: TRCENA = bit 24 */
#define CM4_DWT_CTRL 0xE0001000u    /* CYCCNTENA = bit 0 */
#define CM4_DWT_CYCCNT 0xE0001004u
#define CM4_REG(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

#endif /* CISL_NRF52840_REGS_H */
