/* handlers: the Coordinator service (sm_svc_coord_ops) over the registry
 * and the relay: one thin function per RPC of docs/service.md, plus the
 * reshard fan-out (one Assemble per worker, in parallel threads).
 *
 * Heartbeats also start the repairs of degraded arrays (registry.h) on
 * background threads, counted in sm_coord so that main() can wait for them
 * (sm_handlers_drain) before it frees the registry.
 *
 * Thread-safety: handlers run on many rpc handler threads at once; the
 * sm_coord they share is read-only after start-up (the registry locks
 * itself) but for the background count, which bg_mu guards. */
#ifndef SM_SERVER_HANDLERS_H
#define SM_SERVER_HANDLERS_H

#include <pthread.h>

#include "registry.h"
#include "sm_rpc.h"

/* What the handlers share; owned by main(), borrowed by the server.
 * Initialise with sm_handlers_init. */
typedef struct {
    sm_registry *reg;      /* borrowed */
    const char *token;     /* token for channels to workers; NULL for none; borrowed */
    int call_deadline_ms;  /* control calls to workers (FreeArray, Assemble) and downloads */
    const sm_rpc_tls *tls; /* channels to workers: NULL plaintext, else mutual TLS; borrowed */
    sm_tenants *tenants;   /* --tokens: quotas; NULL: no tenants; borrowed */
    int grants;            /* 1: grant_key signs tenants' transfer grants (sm_grant.h) */
    sm_grant_key grant_key;
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_cv;
    int bg_running;  /* background repair threads */
    int bg_draining; /* sm_handlers_drain was called: start no more */
} sm_coord;

void sm_handlers_init(sm_coord *c, sm_registry *reg, const char *token, int call_deadline_ms);
/* Starts no more background work and waits up to timeout_ms for what runs
 * to end; 0 when it has (the registry may be freed), -1 otherwise. */
int sm_handlers_drain(sm_coord *c, int timeout_ms);

/* The handler table; pass an sm_coord * as user to sm_svc_coord_serve. */
const sm_svc_coord_ops *sm_handlers_ops(void);

#endif
