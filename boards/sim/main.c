/* Virtual-testbed node: connect to the medium, then run the generated node. */
#include <stdio.h>
#include <string.h>

#include "cisl_node_api.h"
#include "cisl_runtime.h"
#include "hal_sim.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MEDIUM_SOCKET\n", argv[0]);
        return 2;
    }
    /* board time: board_time.txt next to the image (written by `cisl build`), if there is one */
    char table[4096];
    const char *slash = strrchr(argv[0], '/');
    const size_t dir = slash ? (size_t)(slash - argv[0] + 1) : 0u;
    if (dir + sizeof "board_time.txt" > sizeof table) {
        fprintf(stderr, "%s: path too long\n", argv[0]);
        return 2;
    }
    memcpy(table, argv[0], dir);
    memcpy(table + dir, "board_time.txt", sizeof "board_time.txt");
    if (cisl_sim_load_board_time(table) != 0) {
        return 2;
    }
    if (cisl_sim_connect(argv[1]) != 0) {
        return 2;
    }
    const int rc = cisl_run();
    cisl_sim_close();
    return rc;
}
