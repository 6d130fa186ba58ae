/* Virtual-testbed node: connect to the medium, then run the generated node. */
#include <stdio.h>

#include "cisl_node_api.h"
#include "hal_sim.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MEDIUM_SOCKET\n", argv[0]);
        return 2;
    }
    if (cisl_sim_connect(argv[1]) != 0) {
        return 2;
    }
    const int rc = cisl_node_main();
    cisl_sim_close();
    return rc;
}
