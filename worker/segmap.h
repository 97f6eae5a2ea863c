/* segmap: the worker's mappings of clients' shared-memory segments
 * (sm_client_alloc), for uploads and downloads that name one (ShmRef in
 * shmap.proto) instead of streaming the bytes: the box of the client's
 * array is copied straight between the segment and a shard buffer, once.
 *
 * Mappings are kept between transfers (a client uploads and downloads
 * from the same buffer over and over; mapping 256 MiB again costs ~17 ms
 * of page tables), keyed by name: on reuse the name must still lead to the
 * same file (same inode) and the file must still hold the bytes asked
 * for, else the mapping goes and the name is opened again. A mapping whose
 * file was unlinked goes at the next transfer, or within
 * SM_SEGMAP_SWEEP_MS (a thread of the map looks), so a client's freed
 * buffer does not stay alive here; at most SM_SEGMAP_MAX mappings and
 * SM_SEGMAP_MAX_BYTES bytes are kept (the least recently used go first).
 * A segment truncated under a copy is caught (SIGBUS guard, then
 * SM_EDATALOSS), never read or written past its end.
 *
 * Threads: every function is thread-safe; copies run outside the lock. */
#ifndef SM_WORKER_SEGMAP_H
#define SM_WORKER_SEGMAP_H

#include <stddef.h>
#include <stdint.h>

#include "sm_svc.h"
#include "store.h"

#define SM_SEGMAP_MAX       16
#define SM_SEGMAP_MAX_BYTES ((size_t)64 << 30)
#define SM_SEGMAP_SWEEP_MS  1000

typedef struct sm_segmap sm_segmap;

sm_err sm_segmap_create(sm_segmap **out, char *err, size_t errlen);
/* Stops the sweeper, unmaps everything (no copy may be running). NULL ok. */
void sm_segmap_free(sm_segmap *m);

/* Upload: copies the box ref->box of the client's array (dtype t) out of
 * segment ref->name into dst (a dense shard of the box's shape) and sets
 * *sum to the xxHash3-64 of dst's bytes. SM_ENOTFOUND naming a segment
 * that does not exist, SM_EDATALOSS for one too short for the array (or
 * truncated during the copy), SM_EINVAL for a box whose shape is not
 * dst's. */
sm_err sm_segmap_gather(sm_segmap *m, const sm_svc_shm_ref *ref, sm_dtype t, sm_store_shard *dst,
                        uint64_t *sum, char *err, size_t errlen);

/* Download: copies the sub-box src_box of shard src (whole shard: its full
 * index) into the box ref->box of the client's array in segment ref->name
 * and sets *sum to the xxHash3-64 of the bytes copied, in row-major order
 * of the box. When the whole shard is copied and its checksum is
 * recorded, a mismatch is SM_EDATALOSS (the copy is checked as it goes).
 * Errors as sm_segmap_gather. */
sm_err sm_segmap_scatter(sm_segmap *m, const sm_svc_shm_ref *ref, const sm_store_shard *src,
                         const sm_index *src_box, uint64_t *sum, char *err, size_t errlen);

/* Copies src, a dense row-major block of shape box in this worker's own
 * segment seg_name (a reshard piece a peer wrote there: peer.c), into dst
 * (shape dst_shape) at dst_off, and sets *sum to the xxHash3-64 of src's
 * bytes, hashed piece by piece as they are copied. Runs under the
 * truncation guard: a segment truncated during the copy is SM_EDATALOSS
 * naming it; a box that does not fit dst at dst_off is SM_EINVAL. */
sm_err sm_segmap_unpack(const void *src, const sm_shape *box, size_t elem, void *dst,
                        const sm_shape *dst_shape, const int64_t *dst_off, const char *seg_name,
                        uint64_t *sum, char *err, size_t errlen);

/* Mappings kept now, and their bytes. */
void sm_segmap_stats(sm_segmap *m, int *n, size_t *bytes);

#endif
