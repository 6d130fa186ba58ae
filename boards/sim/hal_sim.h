/* Virtual-testbed board support: the node's link to the medium process. */
#ifndef CISL_HAL_SIM_H
#define CISL_HAL_SIM_H

/* Connect to the medium's UNIX socket and introduce this node. Returns 0 on success. */
int cisl_sim_connect(const char *socket_path);
void cisl_sim_close(void);
/* Load the board time table (a missing file is fine: host time); -1 on a malformed table. */
int cisl_sim_load_board_time(const char *path);

#endif /* CISL_HAL_SIM_H */
