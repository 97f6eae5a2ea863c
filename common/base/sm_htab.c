/* sm_htab: see sm_htab.h. */
#include "sm_htab.h"

#include <assert.h>
#include <stdlib.h>

uint64_t sm_htab_hash_u64(uint64_t v)
{
    /* splitmix64's finaliser: every input bit reaches every output bit */
    v ^= v >> 30;
    v *= 0xbf58476d1ce4e5b9ull;
    v ^= v >> 27;
    v *= 0x94d049bb133111ebull;
    return v ^ v >> 31;
}

uint64_t sm_htab_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then mixed */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return sm_htab_hash_u64(h);
}

/* Puts item in the first free slot of its run; room is known to exist. */
static void sm_htab_place(sm_htab_slot *slots, size_t cap, uint64_t hash, void *item)
{
    size_t i = (size_t)hash & (cap - 1);
    while (slots[i].item)
        i = (i + 1) & (cap - 1);
    slots[i] = (sm_htab_slot){hash, item};
}

/* Moves the items to cap slots (a power of two, more than twice t->n).
 * SM_ENOMEM leaves the table as it was. */
static sm_err sm_htab_rehash(sm_htab *t, size_t cap)
{
    sm_htab_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return SM_ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].item)
            sm_htab_place(slots, cap, t->slots[i].hash, t->slots[i].item);
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return SM_OK;
}

sm_err sm_htab_reserve(sm_htab *t, size_t n)
{
    size_t cap = t->cap ? t->cap : SM_HTAB_MIN;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof *t->slots)
            return SM_ENOMEM;
        cap *= 2;
    }
    return cap == t->cap ? SM_OK : sm_htab_rehash(t, cap);
}

void sm_htab_put(sm_htab *t, uint64_t hash, void *item)
{
    assert(item && t->n < t->cap / 2);
    sm_htab_place(t->slots, t->cap, hash, item);
    t->n++;
}

void *sm_htab_find(const sm_htab *t, uint64_t hash, sm_htab_match match, const void *key)
{
    if (!t->cap)
        return NULL;
    for (size_t i = (size_t)hash & (t->cap - 1); t->slots[i].item; i = (i + 1) & (t->cap - 1))
        if (t->slots[i].hash == hash && match(t->slots[i].item, key))
            return t->slots[i].item;
    return NULL;
}

int sm_htab_del(sm_htab *t, uint64_t hash, const void *item)
{
    size_t mask = t->cap - 1, i;
    if (!t->cap)
        return 0;
    for (i = (size_t)hash & mask; t->slots[i].item != item; i = (i + 1) & mask)
        if (!t->slots[i].item)
            return 0;
    /* Backward shift: a later slot of the run moves into the hole unless
     * its home lies cyclically in (hole, slot], where the hole is not on
     * its probe path. */
    for (size_t j = (i + 1) & mask; t->slots[j].item; j = (j + 1) & mask) {
        size_t home = (size_t)t->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = (sm_htab_slot){0, NULL};
    t->n--;
    /* At most an eighth full: halve (once more while that still holds), so
     * a burst of items does not keep its memory. Out of memory: keep the
     * slots as they are, which still hold everything. */
    size_t cap = t->cap;
    while (cap > SM_HTAB_MIN && 8 * t->n <= cap)
        cap /= 2;
    if (cap < t->cap)
        (void)sm_htab_rehash(t, cap);
    return 1;
}

void sm_htab_free(sm_htab *t)
{
    free(t->slots);
    *t = (sm_htab){0};
}
