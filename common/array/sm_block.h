/* sm_block: walking a box in parts of whole rows within a size, for the
 * transfers that move a box in pieces (GetShard's chunks, shared-memory
 * copies, reshard pulls). Internal to shmap: not an installed header. */
#ifndef SM_BLOCK_H
#define SM_BLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Walking a box of extents ext (rank >= 1 dims, elements of elem bytes) in
 * parts of at most cap bytes, each part some whole rows of one dimension k
 * (every dimension after k whole, every one before k a single index): the
 * dimension k to split, the outermost whose inner block (the dimensions
 * after it) fits cap, and that block's bytes in *inner (elem when not even
 * one element of the last dimension's rows fits: then k = rank - 1). A box
 * that fits cap whole gives k = 0 and its rows of dimension 0. */
int sm_block_split(const int64_t *ext, int rank, size_t elem, int64_t cap, int64_t *inner);
/* The next part of such a walk: idx (rank entries, zero at the start) holds
 * the part's first index in dimensions 0..k; moves it on by the part's n
 * rows of dimension k. Returns 1 while parts remain, 0 past the last one. */
int sm_block_next(int64_t *idx, const int64_t *ext, int k, int64_t n);
/* The part of such a walk at idx, n rows of dimension k: at[d], its start
 * in the box (idx[d] for d <= k, 0 after), and extent[d], its size (1
 * before k, n at k, ext[d] after). */
void sm_block_part(const int64_t *idx, const int64_t *ext, int rank, int k, int64_t n, int64_t *at,
                   int64_t *extent);

#endif
