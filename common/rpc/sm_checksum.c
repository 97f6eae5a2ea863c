/* sm_checksum: a thin wrapper over libxxhash's XXH3 64-bit streaming state. */
#include <stdlib.h>
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
/* The same hash through libxxhash's run-time dispatch to the widest vector
 * unit of the CPU (AVX2, AVX-512) instead of the SSE2 baseline. */
#include <xxh_x86dispatch.h>
#endif

#include "sm_checksum.h"

struct sm_checksum {
    XXH3_state_t *st;
};

sm_checksum *sm_checksum_create(void)
{
    sm_checksum *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    c->st = XXH3_createState();
    if (!c->st) {
        free(c);
        return NULL;
    }
    XXH3_64bits_reset(c->st);
    return c;
}

void sm_checksum_free(sm_checksum *c)
{
    if (!c)
        return;
    XXH3_freeState(c->st);
    free(c);
}

void sm_checksum_reset(sm_checksum *c)
{
    XXH3_64bits_reset(c->st);
}

void sm_checksum_update(sm_checksum *c, const void *data, size_t n)
{
    if (n)
        XXH3_64bits_update(c->st, data, n);
}

uint64_t sm_checksum_digest(const sm_checksum *c)
{
    return XXH3_64bits_digest(c->st);
}

uint64_t sm_checksum_oneshot(const void *data, size_t n)
{
    return XXH3_64bits(n ? data : "", n);
}
