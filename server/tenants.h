/* tenants: the coordinator's tenants (--tokens FILE): each a name, a token
 * and optional quotas, read from a file of lines
 *
 *     TENANT TOKEN [max-bytes=N[K|M|G]] [max-jobs=N]   # comment
 *
 * and read again on SIGHUP (a file that does not parse keeps the tenants
 * as they were, logged). Tokens are compared in constant time and never
 * logged. Thread-safe. */
#ifndef SM_SERVER_TENANTS_H
#define SM_SERVER_TENANTS_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"

typedef struct sm_tenants sm_tenants;

/* Reads path; SM_EINVAL with "FILE:LINE: sentence" when a line does not
 * parse, SM_EIO when the file cannot be read. */
sm_err sm_tenants_load(const char *path, sm_tenants **out, char *err, size_t errlen);
/* Reads the file again; on failure the tenants stay as they were. */
sm_err sm_tenants_reload(sm_tenants *t, char *err, size_t errlen);
void sm_tenants_free(sm_tenants *t);
/* How many tenants there are. */
int sm_tenants_count(sm_tenants *t);

/* The sm_rpc_server_opts.authenticate callback (user: the sm_tenants). */
int sm_tenants_authenticate(void *user, const unsigned char *token, size_t len, char *tenant);

/* Writes the holder (sm_grant_holder: the SHA-256 of the token) of
 * tenant's grants into out; 0 on success, -1 for an unknown tenant. */
int sm_tenants_holder(sm_tenants *t, const char *tenant, unsigned char out[32]);

/* A tenant's quotas: bytes held (one full copy of each array that is not
 * failed) and jobs queued; 0: no limit. */
typedef struct {
    int64_t max_bytes;
    int max_jobs;
} sm_tenant_quota;
/* tenant's quotas (zeroes for "" and unknown tenants). */
sm_tenant_quota sm_tenants_quota(sm_tenants *t, const char *tenant);

#endif
