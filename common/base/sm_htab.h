/* sm_htab: an index of items the caller owns, found by a 64-bit hash of a
 * key each item holds. Open addressing with linear probing, at most half
 * full; a removal shifts the following slots back, so there are no
 * tombstones and a lookup never walks more than its run, and halves the
 * slots once at most an eighth of them are used (never below SM_HTAB_MIN),
 * so a burst of items does not keep its memory. The table keeps
 * only item pointers and their hashes: the caller's match function tells
 * apart keys whose hashes are equal.
 *
 *   sm_htab t = {0};
 *   if (sm_htab_reserve(&t, t.n + 1))   // out of memory: nothing changed
 *       ...;
 *   sm_htab_put(&t, sm_htab_hash_u64(x->id), x);   // cannot fail now
 *   x = sm_htab_find(&t, sm_htab_hash_u64(id), match_id, &id);
 *   sm_htab_del(&t, sm_htab_hash_u64(x->id), x);
 *   sm_htab_free(&t);
 *
 * Borrows the items (never frees them); owns its slots, freed by
 * sm_htab_free. Not thread-safe: the owner serialises every call. */
#ifndef SM_HTAB_H
#define SM_HTAB_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"

/* The fewest slots of a table that holds items: the first reserve's size
 * and the floor a removal shrinks to. */
#define SM_HTAB_MIN 16

typedef struct {
    uint64_t hash;
    void *item; /* NULL: empty slot */
} sm_htab_slot;

typedef struct {
    sm_htab_slot *slots; /* [cap], cap 0 or a power of two */
    size_t cap, n;       /* n items held */
} sm_htab;

/* Tells whether item holds key (1) or not (0). */
typedef int (*sm_htab_match)(const void *item, const void *key);

/* Makes room for n items in all, so that the next n - t->n puts cannot
 * fail (a removal in between may give the room back: reserve after it).
 * SM_ENOMEM leaves the table as it was. Never shrinks. */
sm_err sm_htab_reserve(sm_htab *t, size_t n);
/* Adds item (not NULL) under hash. The caller reserved room for it
 * (sm_htab_reserve) and does not add the same item twice. */
void sm_htab_put(sm_htab *t, uint64_t hash, void *item);
/* The item under hash that match says holds key, or NULL. When several
 * do, any one of them. */
void *sm_htab_find(const sm_htab *t, uint64_t hash, sm_htab_match match, const void *key);
/* Removes item (compared by pointer), held under hash. Returns 1 if it was
 * there, else 0 (nothing changed). Then halves the slots while more than
 * SM_HTAB_MIN and at most an eighth used; out of memory, the slots stay as
 * they were (the removal is done either way). Moves items between slots:
 * a walk over t->slots does not remove as it goes. */
int sm_htab_del(sm_htab *t, uint64_t hash, const void *item);
/* Frees the slots (not the items) and empties t. */
void sm_htab_free(sm_htab *t);

/* Well-mixed hashes of an integer and of a NUL-terminated string. */
uint64_t sm_htab_hash_u64(uint64_t v);
uint64_t sm_htab_hash_str(const char *s);

#endif
