/* The cycle model's per-block accounting in C (codegen/timing/native.py loads it).
 *
 * codegen/timing/engine.py's Emulator counts every translation block the emulator runs in Python
 * hooks: about 80 % of a node's time on the cycle model went to calling them (1.6 M blocks and 0.8 M
 * flash reads for one inference). These are the same two hooks, with the same arithmetic in the same
 * order (every count is identical, doubles included), called by unicorn directly. Python still does
 * what needs Python: it decodes and costs each block address once (capstone, m4cost) and registers it
 * here, and it runs the replaced board functions and the call-back trampolines, which are registered
 * as `special` blocks handed back to it. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BR_NONE = 0, BR_ALWAYS = 1, BR_COND = 2 };
enum { IC_DISABLED = 2 };

/* one region's counts: engine.Counts, field for field */
typedef struct {
    int64_t insns;
    double low, central, high;
    int64_t taken_branches, flash_reads, flash_line_changes, icache_misses;
} cy_counts;

typedef struct {
    uint64_t address, fallthrough;
    uint32_t size, count;
    double low, central, high;
    int32_t region;   /* region index the block switches to, or -1: stay */
    uint8_t branch, first32, special, used;
} cy_block;

typedef int (*cy_stop_fn)(void *uc);
typedef void (*cy_slow_fn)(uint64_t address, uint32_t size);
typedef int32_t (*cy_pre_fn)(uint64_t address, uint32_t size);   /* nonzero: the block is not counted */
typedef void (*cy_tick_fn)(void);

/* the SoC's clock-loop path (nrf52840_soc._Quantum._path): blocks C may record for Python, at most */
#define PATH_MAX_BLOCKS 16

/* blocks between two calls into Python: a Ctrl-C is handled by Python's handler only when Python
   code runs, and whole inferences run without a block handed to Python (~1 ms at this count) */
#define TICK_BLOCKS 16384

typedef struct {
    double central_total, wait_central;
    int64_t insns_total, max_insns;
    int32_t region, in_callback, over_limit, prev_valid;
    uint64_t prev_address, prev_fallthrough;
    int32_t prev_branch;
    /* regions: counts[comm * capacity + region]; touched in first-touch order, as Python's defaultdicts */
    int32_t capacity, n_touched;
    cy_counts *counts;
    uint8_t *touched;
    int32_t *touch_log;
    /* data reads from flash */
    int32_t flash_line_bits;
    int64_t last_flash_line;
    /* instruction cache (memsystem.ICache): per set, lines oldest first. ic_on: 0 no cache in the
       model (fetches free), 1 on, IC_DISABLED present but off (NVMC.ICACHECNF.CACHEEN = 0) */
    int32_t ic_on, ic_line_bits, ic_sets, ic_ways;
    int64_t *ic_lines;
    int32_t *ic_fill;
    int64_t ic_hits, ic_misses;
    /* blocks by address: open addressing, power-of-two size */
    cy_block *table;
    uint64_t table_mask, table_used;
    cy_slow_fn slow;
    cy_stop_fn stop;
    /* the emulated SoC (nrf52840_soc.py): stop before the block that reaches stop_at; while
       python_first is set, Python sees each block first (its polling-loop and clock-loop skips) */
    double stop_at;
    int32_t python_first;
    cy_pre_fn pre;
    cy_tick_fn tick;
    int64_t tick_left;
    /* while Python follows a clock loop's path and nothing else needs it, the next path_room blocks'
       addresses are recorded here instead of a call into Python for each (it takes them at its next call) */
    int32_t path_room, path_len;
    uint64_t path[PATH_MAX_BLOCKS];
} cy_state;

static uint64_t slot_of(const cy_state *st, uint64_t address) {
    return ((address >> 1) * 0x9E3779B97F4A7C15ull >> 20) & st->table_mask;
}

static cy_block *find(cy_state *st, uint64_t address) {
    for (uint64_t i = slot_of(st, address);; i = (i + 1) & st->table_mask) {
        cy_block *b = &st->table[i];
        if (!b->used) return NULL;
        if (b->address == address) return b;
    }
}

static int grow(cy_state *st) {
    uint64_t n = (st->table_mask + 1) * 2;
    cy_block *old = st->table, *t = calloc(n, sizeof *t);
    if (!t) return -1;
    uint64_t old_n = st->table_mask + 1;
    st->table = t;
    st->table_mask = n - 1;
    for (uint64_t i = 0; i < old_n; i++) {
        if (!old[i].used) continue;
        uint64_t j = slot_of(st, old[i].address);
        while (t[j].used) j = (j + 1) & st->table_mask;
        t[j] = old[i];
    }
    free(old);
    return 0;
}

/* register (or replace) the block at `address`; returns 0, or -1 without memory */
int cy_add_block(cy_state *st, uint64_t address, uint32_t size, uint32_t count, double low, double central,
                 double high, int32_t branch, uint64_t fallthrough, int32_t first32, int32_t region,
                 int32_t special) {
    cy_block *b = find(st, address);
    if (!b) {
        if ((st->table_used + 1) * 2 > st->table_mask + 1 && grow(st) != 0) return -1;
        uint64_t i = slot_of(st, address);
        while (st->table[i].used) i = (i + 1) & st->table_mask;
        b = &st->table[i];
        st->table_used++;
    }
    b->address = address;
    b->size = size;
    b->count = count;
    b->low = low;
    b->central = central;
    b->high = high;
    b->branch = (uint8_t)branch;
    b->fallthrough = fallthrough;
    b->first32 = (uint8_t)first32;
    b->region = region;
    b->special = (uint8_t)special;
    b->used = 1;
    return 0;
}

int cy_init_table(cy_state *st, uint64_t size_pow2) {
    st->table = calloc(size_pow2, sizeof *st->table);
    st->table_mask = size_pow2 - 1;
    st->table_used = 0;
    return st->table ? 0 : -1;
}

void cy_free_table(cy_state *st) {
    free(st->table);
    st->table = NULL;
}

/* the counts of (callback work or not, region), touched as Python's defaultdict access would */
cy_counts *cy_counts_of(cy_state *st, int32_t comm, int32_t region) {
    int32_t i = (comm ? st->capacity : 0) + region;
    if (!st->touched[i]) {
        st->touched[i] = 1;
        st->touch_log[st->n_touched++] = i;
    }
    return &st->counts[i];
}

static int64_t ic_fetch(cy_state *st, uint64_t address, uint32_t size) {
    uint64_t first = address >> st->ic_line_bits, last = (address + size - 1) >> st->ic_line_bits;
    int64_t misses = 0;
    if (st->ic_on == IC_DISABLED)   /* the firmware has not set CACHEEN: every line from the flash */
        return (int64_t)(last - first + 1);
    for (uint64_t line = first; line <= last; line++) {
        int32_t set = (int32_t)(line % (uint64_t)st->ic_sets);
        int64_t *s = &st->ic_lines[(int64_t)set * st->ic_ways];
        int32_t n = st->ic_fill[set];
        if (n && s[n - 1] == (int64_t)line) {
            st->ic_hits++;
            continue;
        }
        int32_t at = -1;
        for (int32_t k = 0; k < n; k++)
            if (s[k] == (int64_t)line) { at = k; break; }
        if (at >= 0) {            /* hit: move to the newest end */
            memmove(&s[at], &s[at + 1], (size_t)(n - 1 - at) * sizeof *s);
            s[n - 1] = (int64_t)line;
            st->ic_hits++;
            continue;
        }
        misses++;
        if (n >= st->ic_ways) {   /* evict the oldest */
            memmove(&s[0], &s[1], (size_t)(n - 1) * sizeof *s);
            n--;
        }
        s[n] = (int64_t)line;
        st->ic_fill[set] = n + 1;
    }
    st->ic_misses += misses;
    return misses;
}

/* UC_HOOK_BLOCK: engine.Emulator._on_block */
void cy_on_block(void *uc, uint64_t address, uint32_t size, void *user) {
    cy_state *st = user;
    if (st->central_total >= st->stop_at) {
        st->stop(uc);
        return;
    }
    if (st->python_first) {
        if (st->pre(address, size)) return;
    } else if (st->path_room > 0) {
        st->path[st->path_len++] = address;
        st->path_room--;
    }
    cy_block *b = find(st, address);
    if (!b || b->special || b->size != size) {
        st->slow(address, size);          /* Python: a replaced function, a trampoline or a new block */
        b = find(st, address);
        if (!b || b->special || b->size != size) return;
    }
    if (b->region >= 0) st->region = b->region;
    cy_counts *c = cy_counts_of(st, st->in_callback != 0, st->region);
    if (st->prev_valid && (st->prev_branch == BR_ALWAYS || (st->prev_branch == BR_COND && address != st->prev_fallthrough))) {
        int central = (address % 4 == 0 || !b->first32) ? 1 : 2;
        c->taken_branches += 1;
        c->low += 1;
        c->central += central;
        c->high += 3;
        st->central_total += central;
    }
    c->insns += b->count;
    c->low += b->low;
    c->central += b->central;
    c->high += b->high;
    st->central_total += b->central;
    if (st->ic_on && (!st->prev_valid || st->prev_address != address)) {
        int64_t misses = ic_fetch(st, address, size);
        if (misses) {
            c->icache_misses += misses;
            st->central_total += (double)misses * st->wait_central;
        }
    }
    st->prev_valid = 1;
    st->prev_address = address;
    st->prev_fallthrough = b->fallthrough;
    st->prev_branch = b->branch;
    st->insns_total += b->count;
    if (st->insns_total > st->max_insns) {
        st->over_limit = 1;
        st->stop(uc);
    }
    if (--st->tick_left <= 0) {
        st->tick_left = TICK_BLOCKS;
        st->tick();
    }
}

/* UC_HOOK_MEM_READ over the flash: engine.Emulator._on_flash_read */
void cy_on_flash_read(void *uc, int access, uint64_t address, int size, int64_t value, void *user) {
    (void)uc; (void)access; (void)size; (void)value;
    cy_state *st = user;
    cy_counts *c = cy_counts_of(st, st->in_callback != 0, st->region);
    c->flash_reads += 1;
    int64_t line = (int64_t)(address >> st->flash_line_bits);
    if (line != st->last_flash_line) {
        c->flash_line_changes += 1;
        st->last_flash_line = line;
        st->central_total += st->wait_central;
    }
}
