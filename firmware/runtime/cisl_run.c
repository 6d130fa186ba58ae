/* cisl_run: the loop every cisl board's main() calls (cisl_runtime.h). Its own file, so firmware
 * that calls the node library itself (cisl_node_api.h) need not provide cisl_board_next_input. */
#include "cisl_board.h"
#include "cisl_host.h"
#include "cisl_node_api.h"
#include "cisl_runtime.h"

static uint32_t pass_us; /* the loop's last pass: inference, printing and the board's resync */

uint32_t cisl_run_pass_us(void) { return pass_us; }

int cisl_run(void)
{
    uint32_t inference = 0u, computed = 0u;
    int failed = 0;
    (void)cisl_node_init();
    cisl_report_boot(cisl_node.plan_hash, cisl_node.node, cisl_node.nodes);
    /* e.g. wait until every node is up (nrf52840dk: the start barrier, which a node that booted
     * again mid-run leaves at the network's inference) */
    uint32_t next = cisl_board_start();
    uint32_t pass0 = cisl_board_time_us();
    for (;;) {
        /* e.g. nodes that declared each other dead meet again; a node left behind skips to the
         * network's inference (the inputs in between are not computed) */
        if (inference > 0u) {
            const uint32_t t = cisl_board_time_us();
            pass_us = t - pass0;
            pass0 = t;
            next = cisl_board_resync(inference);
        }
        int more = 1;
        for (; inference < next && more; inference++) {
            more = cisl_board_next_input(cisl_node_input_buffer(), cisl_node.input_len);
            cisl_node_skip(1u);
        }
        cisl_host_poll(inference); /* the host's commands (e.g. a mode request) count from this inference */
        int8_t *const input = cisl_node_input_buffer(); /* the current mode's: no copy */
        if (!more || !cisl_board_next_input(input, cisl_node.input_len)) {
            break;
        }
        uint32_t crc = 0u;
        cisl_log_clock log0, log1;
        cisl_log_spent(&log0);
        const uint32_t t0 = cisl_board_time_us();
        if (cisl_node_infer(input, 0, &crc) != CISL_OK) {
            failed = 1;
            break;
        }
        cisl_log_spent(&log1);
        cisl_report_infer(inference, cisl_board_time_us() - t0 - (log1.us - log0.us), crc); /* without printing */
        inference++;
        computed++;
    }
    cisl_report_end(computed); /* the inferences computed: skipped ones have no `infer` line */
    return failed;
}
