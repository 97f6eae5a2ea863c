/* sm_grant: per-transfer grants, the credential that lets a tenant's client
 * move data straight to and from a worker. Workers take only the cluster's
 * token; the coordinator, which knows a tenant's arrays, hands the tenant
 * for each shard it may move now a grant that a worker checks without
 * calling back:
 *
 *     grant = expiry (8 bytes, big-endian Unix ms)
 *           || HMAC-SHA256(key, "shmap-grant-1" dir array device expiry holder)
 *
 * key is derived from the cluster's token, which the coordinator and every
 * worker share (sm_grant_key_derive); holder is the SHA-256 of the
 * tenant's token, which the client sends with the grant, so a grant is
 * good for one direction (put or get) of one array's shard on one device,
 * for one tenant, until it expires (SM_GRANT_TTL_MS after it was made).
 * Expiry is wall-clock time: the hosts' clocks must agree within seconds.
 * Grants are compared in constant time and never logged. Thread-safe; no
 * state. */
#ifndef SM_GRANT_H
#define SM_GRANT_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"

/* Bytes of a grant. */
#define SM_GRANT_LEN 40
/* How long a grant is good for after the coordinator made it. */
#define SM_GRANT_TTL_MS 60000

typedef enum { SM_GRANT_PUT = 1, SM_GRANT_GET = 2 } sm_grant_dir;

/* The secret grants are signed with. */
typedef struct {
    unsigned char k[32];
} sm_grant_key;

/* The key of a cluster whose token is cluster_token (not empty). */
void sm_grant_key_derive(const char *cluster_token, sm_grant_key *out);
/* The holder of a grant: the SHA-256 of the token (len bytes) it comes with. */
void sm_grant_holder(const void *token, size_t len, unsigned char out[32]);
/* The wall clock in Unix ms, what expiries are measured in. */
int64_t sm_grant_now_ms(void);
/* Writes the grant of dir for array's shard on device, for holder, good
 * until expiry_ms. */
void sm_grant_make(const sm_grant_key *k, const unsigned char holder[32], sm_grant_dir dir,
                   uint64_t array, int32_t device, int64_t expiry_ms,
                   unsigned char out[SM_GRANT_LEN]);
/* SM_OK if grant (len bytes) is k's grant of exactly dir, array, device and
 * holder and has not expired at now_ms; else SM_EPERM with a sentence
 * that names the transfer (never the grant). */
sm_err sm_grant_check(const sm_grant_key *k, const unsigned char holder[32], sm_grant_dir dir,
                      uint64_t array, int32_t device, const void *grant, size_t len, int64_t now_ms,
                      char *err, size_t errlen);

#endif
