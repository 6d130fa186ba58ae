/* What the fuzz harnesses share at their top: the CHECK macro (a failed invariant aborts with
 * file:line, which libFuzzer reports as a crash) and the input reader (bytes past the end read as
 * 0, so every input is a complete script). Included once, before the harness's code. */
#ifndef MX_FUZZ_INPUT_H
#define MX_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                                                    \
    do {                                                                                            \
        if (!(c)) {                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", fz_file_name(__FILE__), __LINE__, #c);     \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

/* The file name without its folders (the messages name the harness, wherever it was built from). */
static inline const char *fz_file_name(const char *path)
{
    const char *p = path, *name = path;
    for (; *p; ++p)
        if (*p == '/' || *p == '\\')
            name = p + 1;
    return name;
}

typedef struct {
    const uint8_t *d;
    size_t n, i;
} reader;

static inline unsigned rd(reader *r) { return r->i < r->n ? r->d[r->i++] : 0u; }
static inline unsigned rd16(reader *r)
{
    unsigned lo = rd(r);
    return lo | (rd(r) << 8);
}

#endif /* MX_FUZZ_INPUT_H */
