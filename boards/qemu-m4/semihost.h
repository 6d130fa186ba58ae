/* ARM semihosting calls (bkpt 0xab), as QEMU implements them with -semihosting-config
 * enable=on,target=native: console output, host files, the command line, exit with a code. */
#ifndef CISL_SEMIHOST_H
#define CISL_SEMIHOST_H

#include <stdint.h>

#define SH_OPEN_RB 1u  /* fopen modes */
#define SH_OPEN_W 4u
#define SH_OPEN_WB 5u

/* handle, or -1 */
int32_t cisl_sh_open(const char *path, uint32_t mode);
/* 0 if all n bytes were written */
int32_t cisl_sh_write(int32_t handle, const void *data, uint32_t n);
/* bytes NOT read: 0 if all n were read */
int32_t cisl_sh_read(int32_t handle, void *data, uint32_t n);
/* move to an absolute byte position; 0 on success */
int32_t cisl_sh_seek(int32_t handle, uint32_t position);
int32_t cisl_sh_close(int32_t handle);
/* The command line QEMU was given (-semihosting-config ...,arg=A,arg=B: "A B"); 0 on success. */
int32_t cisl_sh_cmdline(char *buf, uint32_t size);
/* End the emulation with this exit code. */
__attribute__((noreturn)) void cisl_sh_exit(int32_t code);

#endif /* CISL_SEMIHOST_H */
