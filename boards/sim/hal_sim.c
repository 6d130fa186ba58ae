/* Virtual-testbed board: time from the host clock, serial output on stdout, inputs and messages
 * through the medium process over a UNIX stream socket.
 *
 * Two transports, chosen by the medium when the node says hello:
 *   - message mode: a communication round is one barrier at which the medium hands every node the
 *     messages addressed to it (lossless, or with the three loss modes drawn by the medium);
 *   - radio mode: the node runs the real Mixer protocol (firmware/mixer) through somegather over
 *     Mixer, one frame per slot, and the medium plays the radio channel slot by slot. Time spent in
 *     radio rounds is replaced by the virtual air time the medium reports, so the latencies the
 *     node logs are those of the simulated radio.
 *
 * Frames (little-endian): u8 type, u8 src, u8 dest, u8 flags, u16 sg, u16 reserved, u32 inference,
 * u32 len, then len payload bytes. The protocol is described in codegen/vtestbed/frames.py. */
#include "hal_sim.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cisl_board.h"
#include "cisl_mixer_transport.h"
#include "cisl_modes.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"
#include "cisl_transport.h"

enum {
    FRAME_HELLO = 1,
    FRAME_INPUT_REQ = 2,
    FRAME_INPUT = 3,
    FRAME_END = 4,
    FRAME_TX = 5,
    FRAME_RX = 6,
    FRAME_RX_END = 7,
    FRAME_BYE = 8,
    FRAME_CONFIG = 9,      /* medium -> node after HELLO: u8 mode */
    FRAME_TX_COPY = 10,    /* radio mode: the node's message of an exchange, for the transcript */
    FRAME_ROUND_BEGIN = 11, /* radio mode: u16 deadline, u16 packet length, u32 slot_us; flags = part */
    FRAME_ACTION = 12,     /* radio mode, per slot: flags = MX_ACT_*, payload = packet when TX */
    FRAME_SLOT_RESULT = 13, /* medium -> node: the packet received in this slot (len 0: nothing) */
    FRAME_FINISHED = 14,   /* radio mode: the node's round is over */
    FRAME_ROUND_END = 15,  /* medium -> node: the round is over for all; u32 virtual microseconds */
    FRAME_DELIVERY = 16    /* radio mode: per sender, 1 if its message of the exchange arrived */
};

enum { MODE_MESSAGE = 0, MODE_RADIO = 1 };

#define HEADER_BYTES 16u
#define PROTOCOL_VERSION 2u /* codegen/vtestbed/frames.py PROTOCOL_VERSION */
#define MAX_PAYLOAD (1u << 20)

typedef struct {
    uint8_t type, src, dest, flags;
    uint16_t sg;
    uint32_t inference;
    uint32_t len;
} frame_header;

static int medium_fd = -1;
static uint8_t payload[MAX_PAYLOAD]; /* receive buffer; the host has memory to spare */
static int medium_mode = MODE_MESSAGE;
static int64_t virtual_offset_us; /* radio mode: virtual air time minus host time spent in rounds */

/* Board time (docs/serial-contract.md, `clock=model`): with a board_time.txt next to the image,
 * written by `cisl build` from the cycle model of the same plan's ARM image, the node keeps a
 * virtual nRF52840 clock: every finished op advances it by that op's cycles, every radio round by
 * the board's start guard and its simulated air time, every exchange by the receive work the
 * model counted. The lines it prints then carry board time, not host time. */
#define BT_MAX_OPS 4096u
#define BT_MAX_SG 1024u
#define BT_MAX_MODES 16u /* elastic modes in one image; each counts its own op cycles */
static int board_time = 0;
static uint64_t bt_cycles;          /* the virtual cycle counter */
static uint64_t bt_clock_hz = 64000000u;
static uint32_t bt_guard_us;        /* the board's start guard before slot 0 of every round */
static uint32_t bt_op[BT_MAX_MODES][BT_MAX_OPS];
static uint32_t bt_rx[BT_MAX_SG]; /* by the image's exchange number (each mode has its own) */
static uint32_t bt_runtime[BT_MAX_MODES];
static uint32_t radio_tx_us, radio_rx_us; /* radio mode: the medium's count of this node's radio-on time */
static int radio_counted = 0;

int cisl_sim_load_board_time(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0; /* no table: host time */
    }
    char key[32];
    unsigned long a, b, mode = 0;
    int version = 0;
    if (fscanf(f, "cisl-board-time %d", &version) != 1 || version != 1) {
        fprintf(stderr, "cisl sim node %u: %s is not a board time table (version 1)\n", (unsigned)cisl_node_id, path);
        fclose(f);
        return -1;
    }
    while (fscanf(f, "%31s", key) == 1) {
        int ok = 1;
        if (strcmp(key, "clock_hz") == 0) {
            ok = fscanf(f, "%lu", &a) == 1 && a > 0;
            bt_clock_hz = ok ? a : bt_clock_hz;
        } else if (strcmp(key, "guard_us") == 0) {
            ok = fscanf(f, "%lu", &a) == 1;
            bt_guard_us = (uint32_t)a;
        } else if (strcmp(key, "mode") == 0) { /* the op and runtime lines that follow are this mode's */
            ok = fscanf(f, "%lu", &mode) == 1 && mode < BT_MAX_MODES;
        } else if (strcmp(key, "runtime") == 0) {
            ok = fscanf(f, "%lu", &a) == 1;
            bt_runtime[mode] = (uint32_t)a;
        } else if (strcmp(key, "op") == 0) {
            ok = fscanf(f, "%lu %lu", &a, &b) == 2 && a < BT_MAX_OPS;
            if (ok) {
                bt_op[mode][a] = (uint32_t)b;
            }
        } else if (strcmp(key, "rx") == 0) {
            ok = fscanf(f, "%lu %lu", &a, &b) == 2 && a < BT_MAX_SG;
            if (ok) {
                bt_rx[a] = (uint32_t)b;
            }
        } else {
            char rest[128];
            ok = fgets(rest, sizeof rest, f) != NULL; /* other keys (plan, image): for the host tools */
        }
        if (!ok) {
            fprintf(stderr, "cisl sim node %u: %s: bad entry '%s'\n", (unsigned)cisl_node_id, path, key);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    board_time = 1;
    return 0;
}

static void bt_advance_us(uint64_t us)
{
    bt_cycles += us * bt_clock_hz / 1000000u;
}

/* The mode the node runs (an image with every elastic mode): its ops' cycles. */
static unsigned bt_mode(void)
{
    unsigned m = cisl_node_mode();
    return m < BT_MAX_MODES ? m : 0u;
}

void cisl_board_op_end(uint32_t index)
{
    if (board_time && index < BT_MAX_OPS) {
        bt_cycles += bt_op[bt_mode()][index];
    }
}

const char *cisl_board_clock(void) { return board_time ? "model" : "host"; }

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    put_u16(p, (uint16_t)v);
    put_u16(p + 2, (uint16_t)(v >> 16));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int write_all(const uint8_t *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(medium_fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(uint8_t *p, size_t n)
{
    while (n > 0) {
        const ssize_t r = read(medium_fd, p, n);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_frame_flags(uint8_t type, uint8_t dest, uint8_t flags, uint16_t sg, uint32_t inference,
                            const uint8_t *data, uint32_t len)
{
    uint8_t h[HEADER_BYTES];
    h[0] = type;
    h[1] = cisl_node_id;
    h[2] = dest;
    h[3] = flags;
    put_u16(h + 4, sg);
    put_u16(h + 6, 0);
    put_u32(h + 8, inference);
    put_u32(h + 12, len);
    if (write_all(h, sizeof h) != 0) {
        return -1;
    }
    return len > 0 ? write_all(data, len) : 0;
}

static int send_frame(uint8_t type, uint8_t dest, uint16_t sg, uint32_t inference, const uint8_t *data, uint32_t len)
{
    return send_frame_flags(type, dest, 0, sg, inference, data, len);
}

static int recv_frame(frame_header *f)
{
    uint8_t h[HEADER_BYTES];
    if (read_all(h, sizeof h) != 0) {
        return -1;
    }
    f->type = h[0];
    f->src = h[1];
    f->dest = h[2];
    f->flags = h[3];
    f->sg = (uint16_t)(h[4] | (h[5] << 8));
    f->inference = get_u32(h + 8);
    f->len = get_u32(h + 12);
    if (f->len > MAX_PAYLOAD) {
        return -1;
    }
    return f->len > 0 ? read_all(payload, f->len) : 0;
}

/* Without its medium a virtual node can do nothing useful: say why and stop with a failure code,
 * so the run is reported as broken rather than as a short one. */
static void medium_lost(const char *what)
{
    fprintf(stderr, "cisl sim node %u: lost the medium while %s\n", (unsigned)cisl_node_id, what);
    exit(3);
}

int cisl_sim_connect(const char *socket_path)
{
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(socket_path) >= sizeof addr.sun_path) {
        fprintf(stderr, "cisl sim node %u: socket path too long: %s\n", (unsigned)cisl_node_id, socket_path);
        return -1;
    }
    strcpy(addr.sun_path, socket_path);
    medium_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (medium_fd < 0 || connect(medium_fd, (const struct sockaddr *)&addr, sizeof addr) != 0) {
        fprintf(stderr, "cisl sim node %u: cannot connect to the medium at %s: %s\n", (unsigned)cisl_node_id,
                socket_path, strerror(errno));
        return -1;
    }
    frame_header f;
    const uint8_t version = PROTOCOL_VERSION;
    if (send_frame(FRAME_HELLO, 0, 0, 0, &version, 1) != 0 || recv_frame(&f) != 0 || f.type != FRAME_CONFIG ||
        f.len < 1) {
        fprintf(stderr, "cisl sim node %u: the medium did not answer the hello\n", (unsigned)cisl_node_id);
        return -1;
    }
    medium_mode = payload[0] == MODE_RADIO ? MODE_RADIO : MODE_MESSAGE;
    return 0;
}

void cisl_sim_close(void)
{
    if (medium_fd >= 0) {
        (void)send_frame(FRAME_BYE, 0, 0, 0, NULL, 0);
        close(medium_fd);
        medium_fd = -1;
    }
}

const char *cisl_board_name(void) { return "sim"; }

static int64_t host_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + (int64_t)ts.tv_nsec / 1000;
}

uint32_t cisl_board_time_us(void)
{
    if (board_time) {
        return (uint32_t)(bt_cycles * 1000000u / bt_clock_hz);
    }
    return (uint32_t)(host_us() + virtual_offset_us);
}

uint32_t cisl_board_cycles(void) { return board_time ? (uint32_t)bt_cycles : 0u; }

void cisl_board_write(const char *text, uint32_t n)
{
    /* unbuffered: a line is one write, so lines of a crashing node are not lost */
    size_t off = 0;
    while (off < n) {
        const ssize_t w = write(STDOUT_FILENO, text + off, n - off);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return;
        }
        off += (size_t)w;
    }
}

/* The host's side of the serial line: the node's stdin (the virtual testbed's supervisor writes what
 * a host writes to the node's pseudo-terminal; `cisl sim` gives the nodes an empty stdin). */
static int stdin_closed;

static uint32_t inputs_taken; /* inferences started: the next one's number while the host is polled */

/* Lines the host announced for the coming inference and not yet received. A virtual node runs an
 * inference in milliseconds, faster than a host reacts to its cue (the line before), so where `cisl
 * logs` will write a command (CISL_SIM_HOST_LINES="INF,INF,...": one entry per line) the node waits
 * for it, up to HOST_WAIT_MS; a board takes whatever has arrived. */
#define HOST_WAIT_MS 10000
static uint32_t host_lines_for = UINT32_MAX, host_lines_due;

static uint32_t host_lines_due_now(void)
{
    if (host_lines_for != inputs_taken) {
        host_lines_for = inputs_taken;
        host_lines_due = 0u;
        const char *p = getenv("CISL_SIM_HOST_LINES");
        while (p != NULL && *p != '\0') {
            char *end = NULL;
            const unsigned long inf = strtoul(p, &end, 10);
            if (end == p) {
                break; /* the host writes the list; a malformed one waits for nothing */
            }
            host_lines_due += inf == inputs_taken;
            p = *end == ',' ? end + 1 : end;
        }
    }
    return host_lines_due;
}

uint32_t cisl_board_read(char *buf, uint32_t max)
{
    if (stdin_closed || max == 0u) {
        return 0u;
    }
    const uint32_t due = host_lines_due_now();
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, due > 0u ? HOST_WAIT_MS : 0) <= 0 || (p.revents & (POLLIN | POLLHUP)) == 0) {
        host_lines_due = 0u; /* none came in time: go on, as a board would */
        return 0u;
    }
    const ssize_t n = read(STDIN_FILENO, buf, max);
    if (n <= 0) {
        stdin_closed = n == 0 || errno != EINTR; /* EOF or a broken stdin: no host from now on */
        return 0u;
    }
    for (ssize_t i = 0; i < n && host_lines_due > 0u; i++) {
        host_lines_due -= buf[i] == '\n';
    }
    return (uint32_t)n;
}

/* Mode requests this node's host makes (the virtual testbed's stand-in for a `mode` command on
 * the serial line): CISL_SIM_MODE_REQUESTS="INF:MODE,INF:MODE,..." asks for MODE just before
 * inference INF. */
static void host_mode_requests(uint32_t inference)
{
    const char *p = getenv("CISL_SIM_MODE_REQUESTS");
    while (p != NULL && *p != '\0') {
        char *end = NULL;
        const unsigned long inf = strtoul(p, &end, 10);
        if (end == p || *end != ':') {
            return; /* the host writes the list; a malformed one asks for nothing */
        }
        p = end + 1;
        const unsigned long mode = strtoul(p, &end, 10);
        if (end == p) {
            return;
        }
        p = *end == ',' ? end + 1 : end;
        if (inf == inference && cisl_modes_request(inference, (uint8_t)(mode > 255u ? 255u : mode),
                                                   cisl_node_modes()) != 0) {
            fprintf(stderr, "cisl sim node %u: mode %lu requested, but the image holds %u mode(s)\n",
                    (unsigned)cisl_node_id, mode, (unsigned)cisl_node_modes());
        }
    }
}

/* Limits this node's host sets for the on-node selector: CISL_SIM_MODE_LIMITS="INF:DEADLINE_US:
 * ENERGY_NJ:MSE_U,..." (a field "-": no limit) from inference INF on. */
static unsigned long limit_field(const char **p)
{
    char *end = NULL;
    if (**p == '-') {
        (*p)++;
        return CISL_NO_LIMIT;
    }
    const unsigned long v = strtoul(*p, &end, 10);
    *p = end;
    return v > CISL_NO_LIMIT ? CISL_NO_LIMIT : v;
}

static void host_mode_limits(uint32_t inference)
{
    const char *p = getenv("CISL_SIM_MODE_LIMITS");
    while (p != NULL && *p != '\0') {
        unsigned long f[4];
        for (int i = 0; i < 4; i++) {
            f[i] = limit_field(&p);
            if (i < 3 && *p++ != ':') {
                return; /* the host writes the list; a malformed one sets nothing */
            }
        }
        if (*p == ',') {
            p++;
        }
        if (f[0] == inference) {
            cisl_modes_set_limits((uint32_t)f[1], (uint32_t)f[2], (uint32_t)f[3]);
        }
    }
}

int cisl_board_next_input(int8_t *dst, uint32_t len)
{
    frame_header f;
    if (send_frame(FRAME_INPUT_REQ, 0, 0, 0, NULL, 0) != 0 || recv_frame(&f) != 0) {
        medium_lost("waiting for an input");
        return 0;
    }
    if (f.type == FRAME_END) {
        return 0;
    }
    if (f.type != FRAME_INPUT || f.len != len) {
        fprintf(stderr, "cisl sim node %u: expected an input of %u bytes, got frame %u of %u bytes\n",
                (unsigned)cisl_node_id, (unsigned)len, (unsigned)f.type, (unsigned)f.len);
        return 0;
    }
    memcpy(dst, payload, len);
    if (board_time) {
        bt_cycles += bt_runtime[bt_mode()]; /* the input loop, reports and checksums between two inferences */
    }
    host_mode_limits(inputs_taken);
    host_mode_requests(inputs_taken++);
    return 1;
}

static int message_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx)
{
    if (send_frame(FRAME_TX, dest, sg, inference, msg, len) != 0) {
        medium_lost("sending");
        return -1;
    }
    for (;;) {
        frame_header f;
        if (recv_frame(&f) != 0) {
            medium_lost("receiving");
            return -1;
        }
        if (f.type == FRAME_RX_END) {
            if (board_time && sg < BT_MAX_SG) {
                bt_cycles += bt_rx[sg];
            }
            return 0;
        }
        if (f.type == FRAME_RX && f.sg == sg && f.inference == inference && on_rx != NULL) {
            on_rx(ctx, f.src, payload, f.len);
        }
    }
}

int cisl_transport_round(uint16_t sg, uint32_t inference, const uint8_t *msg, uint32_t len, uint8_t dest,
                         cisl_rx_fn on_rx, void *ctx)
{
    if (medium_mode == MODE_MESSAGE) {
        return message_round(sg, inference, msg, len, dest, on_rx, ctx);
    }
    if (send_frame(FRAME_TX_COPY, dest, sg, inference, msg, len) != 0) {
        medium_lost("sending");
    }
    return cisl_mixer_exchange(sg, inference, msg, len, on_rx, ctx);
}

int cisl_transport_control(uint32_t inference, uint8_t mode, const uint8_t *row, uint32_t len, cisl_rx_fn on_rx,
                           void *ctx)
{
    if (medium_mode == MODE_MESSAGE) {
        return CISL_NO_CONTROL; /* the ideal medium has no control round: every node keeps its mode */
    }
    return cisl_mixer_control(inference, mode, row, len, on_rx, ctx);
}

/* ---- radio mode: the Mixer round slot by slot against the medium -------------------------- */

/* ROUND_END carries the round's air time, then (u32 each) this node's radio TX-on and RX-on time. */
static void count_radio(const frame_header *f)
{
    if (f->len >= 12u) {
        radio_tx_us += get_u32(payload + 4);
        radio_rx_us += get_u32(payload + 8);
        radio_counted = 1;
    }
}

int cisl_board_radio_on_us(uint32_t *tx_us, uint32_t *rx_us)
{
    *tx_us = radio_tx_us;
    *rx_us = radio_rx_us;
    return radio_counted || medium_mode != MODE_MESSAGE;
}

/* ---- Mixer's radio HAL over the medium ----------------------------------------------------
 *
 * The virtual node runs the very round loop an nRF52840 runs (mx_start, firmware/mixer/mixer.c)
 * through this mx_radio_hal: every transmit or receive is one slot of the medium (an ACTION
 * frame, answered by SLOT_RESULT; the pair is split across transmit / tx_done and listen / receive
 * so that mx_start overlaps mx_prepare with it), and `off` tells the medium the node is done and waits for the
 * round's end (air time, radio-on time). Slot timing is the medium's, so wait_slot and sync have
 * nothing to do. */

typedef struct {
    uint16_t sg;
    uint32_t inference;
    int ended;       /* the medium ended the round (its deadline) before the node finished */
    int64_t t0;      /* host time at the round's start */
} sim_radio;

static void round_end(sim_radio *r, const frame_header *f)
{
    /* the node's clock shows the simulated air time, not the host time the round took */
    virtual_offset_us += (int64_t)get_u32(payload) - (host_us() - r->t0);
    bt_advance_us((uint64_t)get_u32(payload) + bt_guard_us); /* a board's round: its start guard, then the air */
    count_radio(f);
    r->ended = 1;
}

static void sim_wait_slot(void *ctx, uint16_t slot)
{
    (void)ctx;
    (void)slot;
}

/* A slot is an ACTION frame to the medium (slot_begin: from transmit or listen) and its answer
 * (slot_answer: from tx_done or receive); mx_start runs mx_prepare in between, while the medium
 * plays the slot, as the nRF52840 does while the packet is on the air. */
static int slot_begin(sim_radio *r, uint8_t act, const uint8_t *packet, uint16_t len)
{
    if (r->ended) {
        return -1;
    }
    if (send_frame_flags(FRAME_ACTION, 0, act, r->sg, r->inference, packet, len) != 0) {
        medium_lost("in a radio slot");
    }
    return 0;
}

static int slot_answer(sim_radio *r, frame_header *f)
{
    if (recv_frame(f) != 0) {
        medium_lost("in a radio slot");
    }
    if (f->type == FRAME_ROUND_END) {
        round_end(r, f);
        return -1; /* mx_start stops; the round is over for everybody */
    }
    return 0;
}

static int sim_transmit(void *ctx, const uint8_t *packet, uint16_t len)
{
    return slot_begin((sim_radio *)ctx, (uint8_t)MX_ACT_TX, packet, len);
}

static int sim_tx_done(void *ctx)
{
    frame_header f;
    return slot_answer((sim_radio *)ctx, &f);
}

static int sim_listen(void *ctx, int scan)
{
    (void)scan;
    return slot_begin((sim_radio *)ctx, (uint8_t)MX_ACT_RX, NULL, 0);
}

static int sim_receive(void *ctx, uint8_t *buf, uint16_t max, int scan, uint32_t *rx_time)
{
    (void)scan;
    frame_header f;
    *rx_time = 0u;
    if (slot_answer((sim_radio *)ctx, &f) != 0) {
        return -1;
    }
    if (f.type != FRAME_SLOT_RESULT || f.len == 0u) {
        return 0;
    }
    const uint16_t n = f.len < max ? (uint16_t)f.len : max;
    memcpy(buf, payload, n);
    return (int)n;
}

static void sim_sync(void *ctx, uint16_t slot, uint32_t rx_time)
{
    (void)ctx;
    (void)slot;
    (void)rx_time;
}

static void sim_off(void *ctx)
{
    sim_radio *r = (sim_radio *)ctx;
    if (send_frame(FRAME_FINISHED, 0, r->sg, r->inference, NULL, 0) != 0) {
        medium_lost("ending a radio round");
    }
    for (;;) {
        frame_header f;
        if (recv_frame(&f) != 0) {
            medium_lost("waiting for the end of a radio round");
        }
        if (f.type == FRAME_ROUND_END) {
            round_end(r, &f);
            return;
        }
    }
}

static const mx_radio_hal sim_hal = {sim_wait_slot, sim_transmit, sim_receive, sim_sync, sim_off, sim_listen,
                                     sim_tx_done, NULL /* the medium's slots are the grid */};

int32_t cisl_board_mixer_round(mx_state *s, uint16_t sg, uint8_t part, uint32_t inference, uint32_t slot_us)
{
    sim_radio r = {sg, inference, 0, host_us()};
    const mx_config *cfg = &s->h.cfg;
    uint8_t begin[8];
    put_u16(begin, cfg->round_length);
    put_u16(begin + 2, mx_packet_len(cfg));
    put_u32(begin + 4, slot_us);
    if (send_frame_flags(FRAME_ROUND_BEGIN, 0, part, sg, inference, begin, sizeof begin) != 0) {
        medium_lost("starting a radio round");
    }
    const int32_t last = mx_start(s, &sim_hal, &r);
    if (last == MX_E_HAL && r.ended) {
        return 0; /* the medium's deadline ended the round: what arrived is in the state */
    }
    return last;
}

void cisl_board_mixer_delivery(uint16_t sg, uint32_t inference, const uint8_t *got, const uint16_t *slot,
                               uint8_t nodes)
{
    /* per sender: 1 byte delivered, then per sender the u16 slot of its last fragment */
    uint8_t report[3u * MX_MAX_NODES];
    if (nodes > MX_MAX_NODES) {
        nodes = MX_MAX_NODES; /* never: the plan has at most MX_MAX_NODES; says so to gcc -O3's bounds check */
    }
    for (uint8_t j = 0; j < nodes; j++) {
        report[j] = got[j];
        put_u16(report + nodes + 2u * j, slot[j]);
    }
    if (board_time && sg < BT_MAX_SG) {
        bt_cycles += bt_rx[sg]; /* the receive work after the exchange's rounds */
    }
    if (send_frame(FRAME_DELIVERY, 0, sg, inference, report, 3u * nodes) != 0) {
        medium_lost("reporting deliveries");
    }
}
