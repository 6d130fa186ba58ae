/* ARM semihosting over bkpt 0xab; operation numbers from the semihosting specification. */
#include "semihost.h"

#include <stddef.h>

#define SYS_OPEN 0x01u
#define SYS_CLOSE 0x02u
#define SYS_WRITE 0x05u
#define SYS_READ 0x06u
#define SYS_SEEK 0x0Au
#define SYS_GET_CMDLINE 0x15u
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

static int32_t semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return (int32_t)r0;
}

static uint32_t length(const char *s)
{
    uint32_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    return n;
}

int32_t cisl_sh_open(const char *path, uint32_t mode)
{
    const uint32_t block[3] = {(uint32_t)(uintptr_t)path, mode, length(path)};
    return semihost(SYS_OPEN, block);
}

int32_t cisl_sh_write(int32_t handle, const void *data, uint32_t n)
{
    const uint32_t block[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)data, n};
    return semihost(SYS_WRITE, block);
}

int32_t cisl_sh_read(int32_t handle, void *data, uint32_t n)
{
    const uint32_t block[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)data, n};
    return semihost(SYS_READ, block);
}

int32_t cisl_sh_seek(int32_t handle, uint32_t position)
{
    const uint32_t block[2] = {(uint32_t)handle, position};
    return semihost(SYS_SEEK, block);
}

int32_t cisl_sh_close(int32_t handle)
{
    const uint32_t block[1] = {(uint32_t)handle};
    return semihost(SYS_CLOSE, block);
}

int32_t cisl_sh_cmdline(char *buf, uint32_t size)
{
    uint32_t block[2] = {(uint32_t)(uintptr_t)buf, size};
    return semihost(SYS_GET_CMDLINE, block);
}

void cisl_sh_exit(int32_t code)
{
    const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    (void)semihost(SYS_EXIT_EXTENDED, block);
    for (;;) {
    }
}
