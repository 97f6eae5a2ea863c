/* sm_checksum: streaming xxHash3-64 used to verify every bulk transfer end to
 * end. The sender hashes the bytes it sends, the receiver the bytes it
 * received, in the same order; the digests must match.
 *
 * A state is owned by one thread at a time (no internal locking). */
#ifndef SM_CHECKSUM_H
#define SM_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct sm_checksum sm_checksum;

/* A new state, reset to the empty input. NULL when out of memory. Free with
 * sm_checksum_free(). */
sm_checksum *sm_checksum_create(void);
void sm_checksum_free(sm_checksum *c);

/* Back to the empty input. */
void sm_checksum_reset(sm_checksum *c);

/* Appends n bytes of data (borrowed; n may be 0, data may then be NULL). */
void sm_checksum_update(sm_checksum *c, const void *data, size_t n);

/* Digest of everything appended since create/reset; the state is unchanged
 * and more data may follow. */
uint64_t sm_checksum_digest(const sm_checksum *c);

/* Digest of one buffer, equal to create + update + digest. */
uint64_t sm_checksum_oneshot(const void *data, size_t n);

#endif
