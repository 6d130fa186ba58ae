/* The replay driver both fuzz harnesses share (built without libFuzzer, -DMX_FUZZ_LIBFUZZER unset):
 * run LLVMFuzzerTestOneInput on every file named on the command line, so a corpus or a crashing
 * input is replayed by plain gcc with sanitizers (tests/test_mixer_fuzz.py). Included once, at the
 * end of a harness. */
#ifndef MX_FUZZ_REPLAY_H
#define MX_FUZZ_REPLAY_H

#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    static uint8_t buf[1u << 16];
    int i, n = 0;
    for (i = 1; i < argc; ++i) {
        FILE *f = fopen(argv[i], "rb");
        size_t len;
        if (!f) {
            fprintf(stderr, "cannot open %s\n", argv[i]);
            return 2;
        }
        len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        ++n;
    }
    printf("replayed %d inputs\n", n);
    return 0;
}

#endif
