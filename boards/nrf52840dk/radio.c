/* nRF52840 RADIO as Mixer's radio HAL (mx_radio_hal, firmware/mixer/mixer.h), and the board hooks
 * of somegather over Mixer (firmware/somegather/cisl_mixer_transport.h). Written for cisl from the
 * nRF52840 product specification and the Mixer port facts in boards/nrf52840dk/README.md.
 *
 * Framing: BLE 2M (or 1M) PHY, 4-byte access address, header S0 = 1 byte (unused, 0) and an 8-bit
 * LENGTH, 3-byte CRC (polynomial 0x65B, init 0x555555, address skipped), whitening on, fast
 * ramp-up (40 us), one fixed frequency.
 *
 * Timing: TIMER0 runs free at 16 MHz (32 bit) and carries the slot grid: slot s starts at
 * grid0 + s * slot_ticks. A transmission starts exactly on the grid: TIMER0 COMPARE[0] fires at
 * start - 40 us and PPI channel 0 triggers TASKS_TXEN; the shortcut READY->START begins the packet
 * when the ramp-up ends, END->DISABLE ends it. A reception arms the receiver the same way (PPI
 * channel 1 -> TASKS_RXEN) half an RX window before the slot; PPI channel 2 captures the ADDRESS
 * event into TIMER0 CC[1]. Every valid packet re-anchors the grid on that timestamp (sync), so
 * the grid follows the node that sent it, which is the published transport's drift control in its
 * simplest form. The CPU polls; no interrupts. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cisl_board.h"
#include "cisl_log.h"
#include "cisl_mixer_transport.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"
#include "cisl_transport.h"
#include "mixer.h"
#include "nrf52840_board.h"
#include "nrf52840_regs.h"

#ifndef CISL_RADIO_PHY_MBIT
#define CISL_RADIO_PHY_MBIT 2 /* from plan.json (cisl compile --phy); the slot lengths assume it */
#endif
#ifndef CISL_RADIO_FREQUENCY_MHZ
#define CISL_RADIO_FREQUENCY_MHZ 2450
#endif
#ifndef CISL_RADIO_TXPOWER_DBM
#define CISL_RADIO_TXPOWER_DBM 8
#endif
#ifndef CISL_RADIO_START_GUARD_US
#define CISL_RADIO_START_GUARD_US 2000 /* the initiator's head start before slot 0 of every round */
#endif
#ifndef CISL_RADIO_FIRST_GUARD_MS
#define CISL_RADIO_FIRST_GUARD_MS 300 /* start barrier: the initiator waits this long before its beacons */
#endif
#ifndef CISL_RADIO_SCAN_TIMEOUT_MS
#define CISL_RADIO_SCAN_TIMEOUT_MS 10000 /* a listener's first scan of a round waits this long */
#endif
#ifndef CISL_RADIO_TAKEOVER_MS
#define CISL_RADIO_TAKEOVER_MS 1000 /* the backup initiator's first scan (board.toml [radio] takeover_ms) */
#endif
#ifndef CISL_WATCHDOG_MS
#define CISL_WATCHDOG_MS 0 /* board.toml [watchdog] timeout_ms (board.c starts it) */
#endif
#ifndef CISL_RADIO_RESYNC_LISTEN_MS
#define CISL_RADIO_RESYNC_LISTEN_MS 400 /* a node with dead peers waits this long for the resync beacons */
#endif

#if CISL_RADIO_FREQUENCY_MHZ < 2400 || CISL_RADIO_FREQUENCY_MHZ > 2500
#error "CISL_RADIO_FREQUENCY_MHZ must be 2400..2500 (board.toml [radio] frequency_mhz)"
#endif

#define RADIO(reg) NRF_REG32(NRF_BASE_RADIO, NRF_REG_RADIO_##reg)
#define TIMER0(reg) NRF_REG32(NRF_BASE_TIMER0, NRF_REG_TIMER_##reg)
#define PPI(reg) NRF_REG32(NRF_BASE_PPI, NRF_REG_PPI_##reg)

#define TICKS_PER_US 16u
/* Slot start -> ADDRESS event at the receiver, in TIMER0 ticks (62.5 ns). The sender's TXEN fires
 * RAMP_US before the slot start; its first bit leaves after the TX ramp-up's excess over RAMP_US and
 * the TX chain delay; the receiver's ADDRESS follows preamble + 4-byte access address and its RX
 * chain delay. Nordic's measured nRF52840 values (Zephyr's radio_nrf52840.h, "empirical measurements
 * and sniffer logs"): TXEN -> on air with fast ramp-up 40.0 us (2M) / 40.9 us (1M), TX chain 0.6 us,
 * RX chain 5.0 us (2M) / 9.4 us (1M). So
 *   2M: 0 + 0.6 + (2 + 4) B x 4 us + 5.0 = 29.6 us = 473.6 -> 474 ticks
 *   1M: 0.9 + 0.6 + (1 + 4) B x 8 us + 9.4 = 50.9 us = 814.4 -> 814 ticks.
 * An error e here moves every receiver's grid by e per reception hop (each node re-anchors on every
 * packet), so it is not yet measured on boards: measure it with two DKs (sender: TIMER0 COMPARE ->
 * GPIOTE toggle; receiver: RADIO ADDRESS -> GPIOTE toggle; a logic analyser) and put the value in
 * board.toml [build] defines, e.g. "CISL_RADIO_ADDR_EVENT_TICKS_2M=474". */
#ifndef CISL_RADIO_ADDR_EVENT_TICKS_2M
#define CISL_RADIO_ADDR_EVENT_TICKS_2M 474u
#endif
#ifndef CISL_RADIO_ADDR_EVENT_TICKS_1M
#define CISL_RADIO_ADDR_EVENT_TICKS_1M 814u
#endif
#define RAMP_US 40u  /* TXEN/RXEN -> READY with MODECNF0.RU = Fast */
#define SETUP_US 20u /* from wait_slot's return to the compare being programmed */
#if CISL_RADIO_PHY_MBIT == 2
#define ADDR_EVENT_TICKS CISL_RADIO_ADDR_EVENT_TICKS_2M
#define RADIO_MODE_VALUE NRF_VAL_RADIO_MODE_MODE_BLE_2MBIT
#define RADIO_PLEN_VALUE NRF_VAL_RADIO_PCNF0_PLEN_16BIT
#define US_PER_BYTE 4u
#elif CISL_RADIO_PHY_MBIT == 1
#define ADDR_EVENT_TICKS CISL_RADIO_ADDR_EVENT_TICKS_1M
#define RADIO_MODE_VALUE NRF_VAL_RADIO_MODE_MODE_BLE_1MBIT
#define RADIO_PLEN_VALUE NRF_VAL_RADIO_PCNF0_PLEN_8BIT
#define US_PER_BYTE 8u
#else
#error "CISL_RADIO_PHY_MBIT must be 1 or 2"
#endif
/* longest frame: preamble, address, S0, LENGTH, 255 payload bytes, CRC */
#define MAX_AIR_US (US_PER_BYTE * (2u + 4u + 2u + 255u + 3u))

#define PPI_CH_TX 0u
#define PPI_CH_RX 1u
#define PPI_CH_ADDR 2u
#define ACCESS_PREFIX 0x71u
#define ACCESS_BASE 0x76412900u /* BALEN 3: the three upper bytes */

/* S0, LENGTH, then the Mixer packet; EasyDMA reads and writes it in RAM */
static uint8_t radio_pdu[2u + MX_MAX_PACKET_LEN];

typedef struct {
    uint32_t grid0;      /* TIMER0 ticks at the start of slot 0 */
    uint32_t slot_ticks;
    uint32_t rx_half;    /* half the receive window, ticks */
    uint32_t slot_start; /* start of the current slot */
    int first_scan;
    int backup;          /* this node is the round's backup initiator: its first scan is the takeover wait */
    uint32_t late;       /* slots whose radio start was missed because processing overran */
    uint32_t rx_deadline; /* hal_listen -> hal_receive: when an ADDRESS event can no longer come */
    int tx_armed;         /* hal_transmit -> hal_tx_done: the transmission was armed in time */
} radio_ctx;

static uint32_t now(void)
{
    TIMER0(TASKS_CAPTURE(3u)) = 1u;
    return TIMER0(CC(3u));
}

static int reached(uint32_t t) { return (int32_t)(now() - t) >= 0; }

static void radio_disable(void)
{
    PPI(CHENCLR) = NRF_FV(NRF_FLD_PPI_CHENCLR_CH0, 1u) | NRF_FV(NRF_FLD_PPI_CHENCLR_CH1, 1u) |
                   NRF_FV(NRF_FLD_PPI_CHENCLR_CH2, 1u);
    if (NRF_GET(NRF_FLD_RADIO_STATE_STATE, RADIO(STATE)) != NRF_VAL_RADIO_STATE_STATE_DISABLED) {
        RADIO(TASKS_DISABLE) = 1u;
        while (NRF_GET(NRF_FLD_RADIO_STATE_STATE, RADIO(STATE)) != NRF_VAL_RADIO_STATE_STATE_DISABLED) {
        }
    }
    RADIO(EVENTS_DISABLED) = 0u;
}

void cisl_radio_init(void)
{
    RADIO(POWER) = NRF_FV(NRF_FLD_RADIO_POWER_POWER, 1u);
    radio_disable();
    RADIO(MODE) = NRF_FV(NRF_FLD_RADIO_MODE_MODE, RADIO_MODE_VALUE);
    RADIO(PCNF0) = NRF_FV(NRF_FLD_RADIO_PCNF0_LFLEN, 8u) | NRF_FV(NRF_FLD_RADIO_PCNF0_S0LEN, 1u) |
                   NRF_FV(NRF_FLD_RADIO_PCNF0_S1LEN, 0u) | NRF_FV(NRF_FLD_RADIO_PCNF0_PLEN, RADIO_PLEN_VALUE);
    RADIO(PCNF1) = NRF_FV(NRF_FLD_RADIO_PCNF1_MAXLEN, MX_MAX_PACKET_LEN) | NRF_FV(NRF_FLD_RADIO_PCNF1_STATLEN, 0u) |
                   NRF_FV(NRF_FLD_RADIO_PCNF1_BALEN, 3u) |
                   NRF_FV(NRF_FLD_RADIO_PCNF1_ENDIAN, NRF_VAL_RADIO_PCNF1_ENDIAN_LITTLE) |
                   NRF_FV(NRF_FLD_RADIO_PCNF1_WHITEEN, NRF_VAL_RADIO_PCNF1_WHITEEN_ENABLED);
    RADIO(BASE0) = ACCESS_BASE;
    RADIO(PREFIX0) = NRF_FV(NRF_FLD_RADIO_PREFIX0_AP0, ACCESS_PREFIX);
    RADIO(TXADDRESS) = NRF_FV(NRF_FLD_RADIO_TXADDRESS_TXADDRESS, 0u);
    RADIO(RXADDRESSES) = NRF_FV(NRF_FLD_RADIO_RXADDRESSES_ADDR0, NRF_VAL_RADIO_RXADDRESSES_ADDR0_ENABLED);
    RADIO(CRCCNF) = NRF_FV(NRF_FLD_RADIO_CRCCNF_LEN, NRF_VAL_RADIO_CRCCNF_LEN_THREE) |
                    NRF_FV(NRF_FLD_RADIO_CRCCNF_SKIPADDR, NRF_VAL_RADIO_CRCCNF_SKIPADDR_SKIP);
    RADIO(CRCPOLY) = NRF_FV(NRF_FLD_RADIO_CRCPOLY_CRCPOLY, 0x00065Bu);
    RADIO(CRCINIT) = NRF_FV(NRF_FLD_RADIO_CRCINIT_CRCINIT, 0x555555u);
    RADIO(FREQUENCY) = NRF_FV(NRF_FLD_RADIO_FREQUENCY_FREQUENCY, CISL_RADIO_FREQUENCY_MHZ - 2400) |
                       NRF_FV(NRF_FLD_RADIO_FREQUENCY_MAP, NRF_VAL_RADIO_FREQUENCY_MAP_DEFAULT);
    RADIO(DATAWHITEIV) = NRF_FV(NRF_FLD_RADIO_DATAWHITEIV_DATAWHITEIV, 0x40u | ((CISL_RADIO_FREQUENCY_MHZ - 2400) & 0x3Fu));
    RADIO(TXPOWER) = NRF_FV(NRF_FLD_RADIO_TXPOWER_TXPOWER, (uint32_t)(int32_t)(CISL_RADIO_TXPOWER_DBM));
    RADIO(MODECNF0) = NRF_FV(NRF_FLD_RADIO_MODECNF0_RU, NRF_VAL_RADIO_MODECNF0_RU_FAST) |
                      NRF_FV(NRF_FLD_RADIO_MODECNF0_DTX, NRF_VAL_RADIO_MODECNF0_DTX_CENTER);
    RADIO(PACKETPTR) = (uint32_t)(uintptr_t)radio_pdu;
    RADIO(SHORTS) = NRF_FV(NRF_FLD_RADIO_SHORTS_READY_START, 1u) | NRF_FV(NRF_FLD_RADIO_SHORTS_END_DISABLE, 1u);

    TIMER0(TASKS_STOP) = 1u;
    TIMER0(MODE) = NRF_FV(NRF_FLD_TIMER_MODE_MODE, NRF_VAL_TIMER_MODE_MODE_TIMER);
    TIMER0(BITMODE) = NRF_FV(NRF_FLD_TIMER_BITMODE_BITMODE, NRF_VAL_TIMER_BITMODE_BITMODE_32BIT);
    TIMER0(PRESCALER) = NRF_FV(NRF_FLD_TIMER_PRESCALER_PRESCALER, 0u); /* 16 MHz */
    TIMER0(SHORTS) = 0u;
    TIMER0(TASKS_CLEAR) = 1u;
    TIMER0(TASKS_START) = 1u;

    const uint32_t compare0 = NRF_BASE_TIMER0 + NRF_REG_TIMER_EVENTS_COMPARE(0u);
    PPI(CH_EEP(PPI_CH_TX)) = compare0;
    PPI(CH_TEP(PPI_CH_TX)) = NRF_BASE_RADIO + NRF_REG_RADIO_TASKS_TXEN;
    PPI(CH_EEP(PPI_CH_RX)) = compare0;
    PPI(CH_TEP(PPI_CH_RX)) = NRF_BASE_RADIO + NRF_REG_RADIO_TASKS_RXEN;
    PPI(CH_EEP(PPI_CH_ADDR)) = NRF_BASE_RADIO + NRF_REG_RADIO_EVENTS_ADDRESS;
    PPI(CH_TEP(PPI_CH_ADDR)) = NRF_BASE_TIMER0 + NRF_REG_TIMER_TASKS_CAPTURE(1u);
}

/* Arm `channel` so that TIMER0 reaching `at` triggers its task. Returns 0 if armed in time, -1 if
 * `at` had already passed without the compare firing (nothing was triggered). The channel is
 * enabled before the compare is written: the other order loses a compare that fires between the
 * two writes (the event is set, so the check below would call the slot armed, but PPI was off). The
 * old CC value lies behind the counter, so it cannot fire meanwhile. */
static int arm_at(uint32_t at, uint32_t chenset)
{
    TIMER0(EVENTS_COMPARE(0u)) = 0u;
    PPI(CHENSET) = chenset;
    TIMER0(CC(0u)) = at;
    if (reached(at) && TIMER0(EVENTS_COMPARE(0u)) == 0u) {
        PPI(CHENCLR) = chenset;
        return -1;
    }
    return 0;
}

/* ---- mx_radio_hal --------------------------------------------------------------------------- */

static void hal_wait_slot(void *ctx, uint16_t slot)
{
    radio_ctx *c = (radio_ctx *)ctx;
    c->slot_start = c->grid0 + (uint32_t)slot * c->slot_ticks;
    const uint32_t lead = (RAMP_US + SETUP_US) * TICKS_PER_US + c->rx_half;
    cisl_board_watchdog_reload(); /* every slot, a dead node's rounds to their deadline too */
    while (!reached(c->slot_start - lead)) {
    }
}

static int hal_transmit(void *ctx, const uint8_t *packet, uint16_t len)
{
    radio_ctx *c = (radio_ctx *)ctx;
    if (len > MX_MAX_PACKET_LEN) {
        return -1;
    }
    radio_pdu[0] = 0u;
    radio_pdu[1] = (uint8_t)len;
    memcpy(radio_pdu + 2, packet, len);
    RADIO(EVENTS_DISABLED) = 0u;
    c->tx_armed = 0;
    if (arm_at(c->slot_start - RAMP_US * TICKS_PER_US, NRF_FV(NRF_FLD_PPI_CHENSET_CH0, 1u)) != 0) {
        c->late++; /* too late for this slot: send nothing rather than off the grid */
        return 0;
    }
    c->tx_armed = 1; /* PPI starts it on the grid; mx_start combines the next packet meanwhile */
    return 0;
}

static int hal_tx_done(void *ctx)
{
    radio_ctx *c = (radio_ctx *)ctx;
    if (c->tx_armed) {
        const uint32_t end = c->slot_start + (MAX_AIR_US + 50u) * TICKS_PER_US;
        while (RADIO(EVENTS_DISABLED) == 0u && !reached(end)) {
        }
    }
    radio_disable();
    return 0;
}

/* Arm the receiver for the current slot (RXEN by PPI half a window early), or start a scan, and
 * return: mx_start combines the next packet (mx_prepare) while this one arrives. The events latch,
 * so hal_receive finds the packet even if that work outlasts it. */
static int hal_listen(void *ctx, int scan)
{
    radio_ctx *c = (radio_ctx *)ctx;
    cisl_board_watchdog_reload(); /* a scan waits up to scan_timeout_ms: board.toml [watchdog] allows for it */
    RADIO(EVENTS_ADDRESS) = 0u;
    RADIO(EVENTS_DISABLED) = 0u;
    PPI(CHENSET) = NRF_FV(NRF_FLD_PPI_CHENSET_CH2, 1u);
    if (scan) {
        RADIO(TASKS_RXEN) = 1u;
        const uint32_t first_us = (c->backup ? CISL_RADIO_TAKEOVER_MS : CISL_RADIO_SCAN_TIMEOUT_MS) * 1000u;
        const uint32_t wait_us = c->first_scan ? first_us : c->slot_ticks / TICKS_PER_US;
        c->first_scan = 0;
        c->rx_deadline = now() + wait_us * TICKS_PER_US;
    } else {
        if (arm_at(c->slot_start - c->rx_half - RAMP_US * TICKS_PER_US, NRF_FV(NRF_FLD_PPI_CHENSET_CH1, 1u)) != 0) {
            c->late++;
            RADIO(TASKS_RXEN) = 1u; /* late: listen anyway, the packet may still be ahead */
        }
        c->rx_deadline = c->slot_start + ADDR_EVENT_TICKS + c->rx_half;
    }
    return 0;
}

/* The last ADDRESS event (TIMER0 CC[1], captured by PPI channel 2) came after `deadline`. */
static int late_address(uint32_t deadline) { return (int32_t)(TIMER0(CC(1u)) - deadline) > 0; }

static int hal_receive(void *ctx, uint8_t *buf, uint16_t max, int scan, uint32_t *rx_time)
{
    radio_ctx *c = (radio_ctx *)ctx;
    const uint32_t deadline = c->rx_deadline;
    (void)scan;
    while (RADIO(EVENTS_ADDRESS) == 0u) {
        if (reached(deadline)) {
            radio_disable();
            return 0;
        }
    }
    const uint32_t end = now() + (MAX_AIR_US + 50u) * TICKS_PER_US;
    while (RADIO(EVENTS_DISABLED) == 0u) {
        if (reached(end)) {
            radio_disable();
            return 0;
        }
    }
    radio_disable();
    /* The receiver stays on while mx_prepare runs after hal_listen, so the latched ADDRESS may have
     * come after the window closed (a late or foreign packet): judge it by its hardware timestamp
     * (PPI ADDRESS -> CAPTURE[1], read once the packet has ended, so the capture has happened), not
     * by when the CPU got here, and take nothing, as if the window had closed in time (hal_sync
     * would otherwise re-anchor the grid on it). */
    if (late_address(deadline)) {
        return 0;
    }
    *rx_time = TIMER0(CC(1u));
    if (NRF_GET(NRF_FLD_RADIO_CRCSTATUS_CRCSTATUS, RADIO(CRCSTATUS)) != NRF_VAL_RADIO_CRCSTATUS_CRCSTATUS_CRCOK) {
        return 0;
    }
    const uint16_t len = radio_pdu[1];
    if (len > max) {
        return 0;
    }
    memcpy(buf, radio_pdu + 2, len);
    return (int)len;
}

static void hal_sync(void *ctx, uint16_t slot, uint32_t rx_time)
{
    radio_ctx *c = (radio_ctx *)ctx;
    c->grid0 = rx_time - ADDR_EVENT_TICKS - (uint32_t)slot * c->slot_ticks;
}

static void hal_off(void *ctx)
{
    (void)ctx;
    radio_disable();
}

/* The backup starts the round (the initiator is silent): slot 0 as soon as the radio can make it; the
 * other nodes are already scanning, so no start guard is needed. */
static void hal_initiate(void *ctx)
{
    radio_ctx *c = (radio_ctx *)ctx;
    c->grid0 = now() + (RAMP_US + SETUP_US) * TICKS_PER_US + c->rx_half;
}

static const mx_radio_hal nrf_hal = {hal_wait_slot, hal_transmit, hal_receive, hal_sync, hal_off, hal_listen,
                                     hal_tx_done, hal_initiate};

/* ---- start barrier ------------------------------------------------------------------------- */

/* The nodes are reset one after another (parallel flash-tool processes, tens to hundreds of ms
 * apart). A node still booting when the initiator starts the first round finds the network a round
 * ahead and stays a round behind for good: every exchange lost (found on the register-level model,
 * docs/design/nrf52840-emulation.md). So before the first inference the initiator waits
 * first_guard_ms, then sends BEACONS beacons one BEACON_SLOT apart, each saying how many slots
 * remain; a listener takes the first it decodes and waits the rest. All start inference 0 together,
 * and no inference's time contains the wait. A listener that hears no beacon in scan_timeout_ms
 * (the initiator is dead) starts alone; the rounds' takeover then applies. */
#define BEACONS 4u
#define BEACON_SLOT_US 200u
#define BEACON_CRC_INIT 0xB0A5E1u /* no round's value is used for beacons: they are never a round's packet */
#define BEACON_MAGIC 0xCBu
#define BEACON_LEN 7u /* magic, beacons remaining, sender, inference (4 bytes, little-endian) */
#define REPLY_MAGIC 0xCCu
#define REPLY_LEN 6u     /* magic, sender, the inference the sender is at (4 bytes, little-endian) */
#define REPLY_SLOT_US 200u /* resynchronisation: node j answers the beacons in reply slot j */

/* Send radio_pdu (its LENGTH byte set) at `at`. */
static void send_at(uint32_t at)
{
    RADIO(EVENTS_DISABLED) = 0u;
    if (arm_at(at - RAMP_US * TICKS_PER_US, NRF_FV(NRF_FLD_PPI_CHENSET_CH0, 1u)) == 0) {
        const uint32_t end = at + (MAX_AIR_US + 50u) * TICKS_PER_US;
        while (RADIO(EVENTS_DISABLED) == 0u && !reached(end)) {
        }
    }
    radio_disable();
}

static void put_inference(uint8_t *p, uint32_t inference)
{
    for (uint8_t k = 0; k < 4u; k++) {
        p[k] = (uint8_t)(inference >> (8u * k));
    }
}

static uint32_t get_inference(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void beacon_send(uint32_t at, uint8_t remaining, uint32_t inference)
{
    radio_pdu[0] = 0u;
    radio_pdu[1] = (uint8_t)BEACON_LEN;
    radio_pdu[2] = BEACON_MAGIC;
    radio_pdu[3] = remaining;
    radio_pdu[4] = (uint8_t)cisl_node_id;
    put_inference(radio_pdu + 5, inference);
    send_at(at);
}

/* Answer a burst that ended at `end` in this node's reply slot, saying which inference it is at. */
static void reply_send(uint32_t end, uint32_t inference)
{
    radio_pdu[0] = 0u;
    radio_pdu[1] = (uint8_t)REPLY_LEN;
    radio_pdu[2] = REPLY_MAGIC;
    radio_pdu[3] = (uint8_t)cisl_node_id;
    put_inference(radio_pdu + 4, inference);
    send_at(end + (uint32_t)cisl_node_id * REPLY_SLOT_US * TICKS_PER_US);
}

/* Receive one packet with an intact CRC before `deadline`: 1, or 0 if none came. The ADDRESS time
 * is captured in TIMER0 CC[1]. */
static int receive_until(uint32_t deadline)
{
    for (;;) {
        cisl_board_watchdog_reload(); /* per packet; not in the wait below (a pure polling loop) */
        RADIO(EVENTS_ADDRESS) = 0u;
        RADIO(EVENTS_DISABLED) = 0u;
        PPI(CHENSET) = NRF_FV(NRF_FLD_PPI_CHENSET_CH2, 1u);
        RADIO(TASKS_RXEN) = 1u;
        while (RADIO(EVENTS_DISABLED) == 0u) {
            if (reached(deadline)) {
                radio_disable();
                return 0;
            }
        }
        radio_disable();
        if (NRF_GET(NRF_FLD_RADIO_CRCSTATUS_CRCSTATUS, RADIO(CRCSTATUS)) == NRF_VAL_RADIO_CRCSTATUS_CRCSTATUS_CRCOK) {
            return 1;
        }
    }
}

/* Listen for a beacon until `deadline`: the time its burst ends (from its ADDRESS time), or 0 if
 * none came; its sender and inference in *from and *inference. */
static uint32_t beacon_listen(uint32_t deadline, uint8_t *from, uint32_t *inference)
{
    while (receive_until(deadline)) {
        if (radio_pdu[1] == BEACON_LEN && radio_pdu[2] == BEACON_MAGIC && radio_pdu[3] < BEACONS) {
            const uint32_t sent = TIMER0(CC(1u)) - ADDR_EVENT_TICKS;
            *from = radio_pdu[4];
            *inference = get_inference(radio_pdu + 5);
            return sent + (uint32_t)(radio_pdu[3] + 1u) * BEACON_SLOT_US * TICKS_PER_US;
        }
    }
    return 0u;
}

/* The initiator's beacon burst, starting a little after now; returns when it ends. */
static uint32_t beacon_burst(uint32_t t0, uint32_t inference)
{
    for (uint8_t k = 0; k < BEACONS; k++) {
        beacon_send(t0 + (uint32_t)k * BEACON_SLOT_US * TICKS_PER_US, (uint8_t)(BEACONS - 1u - k), inference);
    }
    return t0 + BEACONS * BEACON_SLOT_US * TICKS_PER_US;
}

/* ---- resynchronisation between inferences --------------------------------------------------- */

/* Nodes that declared each other dead never meet again by themselves: each runs its rounds alone
 * (with two nodes both start every round and nobody listens), and the per-round CRC values keep a
 * node that is a round behind from ever hearing the others (found on the register-level model,
 * docs/design/dead-nodes.md, "Split networks"). So before every inference after the first, while
 * this node counts some peer dead: the planned initiator sends a beacon burst naming the inference
 * and listens for replies (node j in reply slot j), which revive their senders; every other node
 * listens for that burst for up to resync_listen_ms: the burst revives the initiator, aligns the
 * inference's start and is answered, and a node that finds the network at a later inference skips
 * to it (a `resync` line; the inputs in between are not computed). Nodes with no dead peer do
 * nothing, so a network in step pays nothing.
 *
 * A reply names the inference its sender is at. An initiator that was reset starts again at
 * inference 0 while the others go on; they took its bursts for a node briefly behind and waited
 * for their own, which never came, so the network stayed split (found on the register-level model
 * with a reset mid-run, stop 56). Now a node ahead of the burst answers it too, and an initiator that
 * hears it is behind skips forward to the furthest inference named and bursts again: one more burst
 * and everyone is at the same inference. */
static void log_skip(uint32_t to, uint32_t from_inference, uint8_t peer)
{
    cisl_line l;
    cisl_log_begin(&l, "resync");
    cisl_log_u32(&l, "inf", to);
    cisl_log_u32(&l, "skipped", to - from_inference);
    cisl_log_u32(&l, "peer", peer);
    cisl_log_end(&l);
}

/* After a burst: one reply slot per node. */
static uint32_t reply_window(void) { return (uint32_t)cisl_mx_plan.nodes * REPLY_SLOT_US * TICKS_PER_US; }

/* The initiator: a burst naming `inference`, then its reply window. Returns the replies' senders;
 * the furthest inference a reply named, and its sender, in *ahead and *ahead_from. */
static uint32_t burst_and_replies(uint32_t inference, uint32_t *ahead, uint8_t *ahead_from, uint32_t delay_us)
{
    const uint32_t window = reply_window();
    const uint32_t end = beacon_burst(now() + (RAMP_US + SETUP_US + 100u + delay_us) * TICKS_PER_US, inference);
    uint32_t replied = 0u;
    while (receive_until(end + window)) {
        if (radio_pdu[1] == REPLY_LEN && radio_pdu[2] == REPLY_MAGIC && radio_pdu[3] < 32u) {
            replied |= 1u << radio_pdu[3];
            const uint32_t at = get_inference(radio_pdu + 4);
            if (at > *ahead) {
                *ahead = at;
                *ahead_from = radio_pdu[3];
            }
        }
    }
    return replied;
}

/* A listener must hear at least one of the initiator's bursts, which come once per pass of the
 * initiator's run loop (inference, printing, this wait). Split, the two run at unrelated phases, so a
 * window shorter than that pass can fall between two bursts every time: with node 0 reset mid-run,
 * node 1's 400 ms windows and node 0's bursts 454 ms apart stayed out of phase for over 4 s on the
 * model (stop 56); alone, an inference of the 2-node test model and its printing take ~610 ms, and
 * the first window after an outage missed two bursts (stop 57). So the window also covers one and a
 * half of this node's own last pass (the initiator runs the same plan), from the first split
 * inference on. The cost falls on a network whose initiator, the sink, is dead: it has no forecast to
 * delay. A node in step touches no peripheral here (the cycle model runs this function as it is). */
static uint32_t resync_listen(void)
{
    uint32_t pass = cisl_run_pass_us();
    if (pass > 60000000u) { /* a minute: the window, in TIMER0 ticks, stays below reached()'s 2^31 */
        pass = 60000000u;
    }
    pass = pass / 2u * 3u;
#if CISL_WATCHDOG_MS > 100 && CISL_WATCHDOG_MS < 90100 /* longer ones outlast the 90 s window */
    /* a silent window is one wait without a reload: it ends before the watchdog would (the board file
     * keeps timeout_ms >= resync_listen_ms + 100 ms) */
    if (pass > (CISL_WATCHDOG_MS - 100u) * 1000u) {
        pass = (CISL_WATCHDOG_MS - 100u) * 1000u;
    }
#endif
    return (pass > CISL_RADIO_RESYNC_LISTEN_MS * 1000u ? pass : CISL_RADIO_RESYNC_LISTEN_MS * 1000u) * TICKS_PER_US;
}

/* A burst nobody answered is sent again, up to BURST_TRIES times, each a little later than the last
 * (BURST_SHIFT_US): a node of a split network that runs its rounds alone sends in every slot, and its
 * ~340 us packets every 560 us hit all four beacons of one burst (4 nodes, initiator reset: its burst
 * after skipping forward was lost on the model and the network stayed apart one inference more,
 * stop 57). A listener that heard an earlier burst has already started the inference and waits for
 * its first round a little longer. Returns the replies' senders, as burst_and_replies. */
#define BURST_TRIES 4u
#define BURST_SHIFT_US 170u
static uint32_t burst_answered(uint32_t inference, uint32_t *ahead, uint8_t *ahead_from)
{
    uint32_t replied = 0u;
    for (uint32_t k = 0; k < BURST_TRIES && replied == 0u; k++) {
        replied = burst_and_replies(inference, ahead, ahead_from, k * BURST_SHIFT_US);
    }
    return replied;
}

/* The initiator: a burst naming `inference`, then its reply window (burst_answered); if a reply names
 * a later inference (this node was reset, or left behind), it meets the others there with one more.
 * Every node that replied is alive. Returns the inference to run. */
static uint32_t initiator_meet(uint32_t inference)
{
    uint32_t ahead = inference;
    uint8_t ahead_from = 0u;
    uint32_t replied = burst_answered(inference, &ahead, &ahead_from);
    if (ahead > inference) {
        const uint32_t was = inference;
        const uint8_t told = ahead_from;
        inference = ahead;
        replied |= burst_answered(inference, &ahead, &ahead_from);
        log_skip(inference, was, told); /* printing (UART) only after the windows */
    }
    for (uint8_t j = 0; j < cisl_mx_plan.nodes; j++) {
        if ((replied >> j) & 1u) {
            cisl_mixer_peer_heard(inference, j);
        }
    }
    return inference;
}

/* Any other node: listen up to `listen` ticks for a burst of `inference` or later, answering those
 * of earlier ones with where this node is; answer it, wait out the reply window and return the
 * inference it names (`inference` if none came: the initiator is dead, or in step). */
static uint32_t listener_meet(uint32_t inference, uint32_t listen)
{
    const uint32_t deadline = now() + listen;
    uint8_t from = 0u;
    uint32_t net = 0u, end;
    for (;;) {
        end = beacon_listen(deadline, &from, &net);
        if (end == 0u || net >= inference) {
            break;
        }
        reply_send(end, inference);
    }
    if (end == 0u) {
        return inference;
    }
    reply_send(end, net);
    while (!reached(end + reply_window())) {
    }
    /* printing (UART, ~7 ms a line) only now: the others start the inference a few ms ahead, well
     * within the first round's wait for this node */
    if (net > inference) {
        log_skip(net, inference, from);
    }
    cisl_mixer_peer_heard(net, from);
    return net;
}

uint32_t cisl_board_resync(uint32_t inference)
{
    if (cisl_mixer_dead_peers() == 0u) {
        return inference;
    }
    RADIO(CRCINIT) = NRF_FV(NRF_FLD_RADIO_CRCINIT_CRCINIT, BEACON_CRC_INIT);
    if (cisl_mx_plan.initiator == cisl_node_id) {
        return initiator_meet(inference);
    }
    return listener_meet(inference, resync_listen());
}

/* ---- the start barrier, and a node that boots again mid-run ------------------------------------ */

/* The start barrier above also meets a node that boots again mid-run (watchdog, brown-out, a USB
 * hub's glitch) with the others far ahead. A listener takes the first burst it hears, whichever
 * inference it names: at a first start 0; after a reset, one the initiator sends while it counts this
 * node dead, and the node joins the network there. Before, it started inference 0 alone, and its
 * rounds (another inference's CRC values) jammed the others' until they split too (4 nodes, node 3
 * reset: no inference complete in 3.9 s of the model, stop 57). Listeners answer every burst, so an
 * initiator that boots again while the others already listen for it (they count it dead) learns where
 * they are from its first burst. It sends that burst at most BURST_TRIES times (a few ms), not until
 * someone answers: that would meet the others sooner after its own reset, but at a first start a lost
 * answer would hold inference 0 back while the listener, already in it, runs into the backup's
 * takeover. Returns the inference to run first. */
uint32_t cisl_radio_barrier(void)
{
    RADIO(CRCINIT) = NRF_FV(NRF_FLD_RADIO_CRCINIT_CRCINIT, BEACON_CRC_INIT);
    if (cisl_mx_plan.initiator == cisl_node_id) {
        const uint32_t t0 = now() + CISL_RADIO_FIRST_GUARD_MS * 1000u * TICKS_PER_US;
        cisl_board_watchdog_reload();
        while (!reached(t0)) {
        }
        return initiator_meet(0u);
    }
    return listener_meet(0u, CISL_RADIO_SCAN_TIMEOUT_MS * 1000u * TICKS_PER_US);
}

/* ---- somegather over Mixer: board hooks ----------------------------------------------------- */

static uint32_t round_late;

/* 24 bits from (inference, sg, part), the same on every node; never the all-zero value */
static uint32_t round_crc_init(uint32_t inference, uint16_t sg, uint8_t part)
{
    uint32_t x = inference * 0x9E3779B1u ^ ((uint32_t)sg << 8) ^ part;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x &= 0xFFFFFFu;
    return x != 0u ? x : 0x555555u;
}

int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us)
{
    radio_ctx c;
    c.slot_ticks = slot_us * TICKS_PER_US;
    /* receive window: 2 (3 DT + 2 jitter + 5 us), DT = slot / 1000 (boards/nrf52840dk/README.md) */
    c.rx_half = (3u * slot_us / 1000u + 2u * 4u + 5u) * TICKS_PER_US;
    c.first_scan = 1;
    c.backup = s->h.cfg.takeover_slots && s->h.cfg.backup == cisl_node_id;
    c.late = 0;
    c.slot_start = 0;
    c.grid0 = 0;
    if (s->h.cfg.initiator == cisl_node_id) { /* the round's initiator: the planned one unless it died */
        c.grid0 = now() + (CISL_RADIO_START_GUARD_US + RAMP_US + SETUP_US) * TICKS_PER_US + c.rx_half;
    }
    /* Every round has its own CRC initial value, so a packet of another round (a node that fell a
     * round behind or ahead) fails the CRC here instead of being taken: Mixer's packets do not say
     * which round they belong to, and a sender's rows would be decoded into the wrong exchange
     * (found on the register-level model, docs/design/nrf52840-emulation.md). */
    RADIO(CRCINIT) = NRF_FV(NRF_FLD_RADIO_CRCINIT_CRCINIT, round_crc_init(inference, sg, part));
    const int32_t r = mx_start(s, &nrf_hal, &c);
    round_late += c.late;
    return r;
}

void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes)
{
    /* one compact line per exchange: which senders arrived (bit j = node j) and the last slot */
    uint32_t mask = 0u;
    uint16_t last = 0u;
    for (uint8_t j = 0; j < nodes && j < 32u; j++) {
        if (got[j]) {
            mask |= 1u << j;
            last = slot[j] > last ? slot[j] : last;
        }
    }
    cisl_line l;
    cisl_log_begin(&l, "mx");
    cisl_log_u32(&l, "inf", inference);
    cisl_log_u32(&l, "sg", sg);
    cisl_log_hex32(&l, "got", mask);
    cisl_log_u32(&l, "last_slot", last);
    cisl_log_u32(&l, "late", round_late);
    cisl_log_end(&l);
    round_late = 0u;
}

int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx)
{
    (void)dest; /* Mixer floods every message to every node */
    return cisl_mixer_exchange(sg, inference, msg, len, on_rx, ctx);
}

int cisl_transport_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len, cisl_rx_fn on_rx,
                           void *ctx)
{
    return cisl_mixer_control(inference, mode, row, len, on_rx, ctx);
}
