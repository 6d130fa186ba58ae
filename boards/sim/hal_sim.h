/* Virtual-testbed board support: the node's link to the medium process. */
#ifndef CISL_HAL_SIM_H
#define CISL_HAL_SIM_H

/* Connect to the medium's UNIX socket and introduce this node. Returns 0 on success. */
int cisl_sim_connect(const char *socket_path);
void cisl_sim_close(void);

#endif /* CISL_HAL_SIM_H */
