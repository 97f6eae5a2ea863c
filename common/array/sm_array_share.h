/* sm_array_share: arrays that share the bytes of one counted block
 * instead of copying them (internal to shmap; not installed with
 * sm_array.h). The executor makes a reshape, a contiguous slice, a
 * permute's output from a source in the same process and an all_gather's
 * outputs in one process share bytes; a worker's stored shards hold
 * blocks too, so a job's values may share its inputs' bytes. */
#ifndef SM_ARRAY_SHARE_H
#define SM_ARRAY_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "sm_array.h"

/* Makes dst's data the nbytes of src's from byte offset (a multiple of
 * 64, offset + dst->nbytes <= src->nbytes) instead of its own, which goes
 * back to its pool: dst shares src's block from then on, without a copy.
 * Returns 1; 0, changing nothing, when src has no block (a view) or the
 * offset does not fit: the caller copies then. Neither array's bytes may
 * be written after this. Thread-safe: any number of arrays may alias src
 * at once, from any thread, while src lives. */
int sm_array_alias(sm_array *dst, const sm_array *src, int64_t offset);
/* Takes a's data out of a, with the reference to its block that a held:
 * *data gets the bytes (a->data), the result the block (NULL for an array
 * without one: then the caller owns a->data as sm_array_data_alloc gave it,
 * from a->pool); a's data is NULL afterwards. Give a block back with
 * sm_array_block_put. */
sm_array_block *sm_array_take(sm_array *a, void **data);
/* The bytes of memory a's data keeps in use: the length of its block,
 * which may hold much more than a (a slice of a larger array aliased), or
 * a->nbytes without one. */
size_t sm_array_held(const sm_array *a);
/* A block of n bytes at p (from sm_array_data_alloc(pool, n, ...)) with
 * one reference, the caller's, who gives up p to it; NULL, p untouched,
 * when out of memory. For owners of array memory outside sm_array (a
 * worker's stored shards) whose views arrays may alias. */
sm_array_block *sm_array_block_new(sm_array_pool *pool, void *p, size_t n);
/* Takes one more reference to b (not NULL), for a new holder of its
 * bytes; returns b. */
sm_array_block *sm_array_block_get(sm_array_block *b);
/* Gives back one reference to b; its memory goes back to its pool with the
 * last. NULL ok. */
void sm_array_block_put(sm_array_block *b);
/* The holders of b now (arrays and store shards): a snapshot, exact only
 * while the caller keeps others from taking or giving up references. */
int sm_array_block_refs(const sm_array_block *b);
/* The bytes b keeps in use (what its pool counts). */
size_t sm_array_block_len(const sm_array_block *b);

#endif
