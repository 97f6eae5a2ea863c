/* handlers: the Coordinator service (sm_svc_coord_ops) over the registry
 * and the relay: one thin function per RPC of docs/service.md, plus the
 * reshard fan-out (one Assemble per worker, in parallel threads).
 *
 * Thread-safety: handlers run on many rpc handler threads at once; the
 * sm_coord they share is read-only after start-up (the registry locks
 * itself). */
#ifndef SM_SERVER_HANDLERS_H
#define SM_SERVER_HANDLERS_H

#include "registry.h"
#include "sm_rpc.h"

/* What the handlers share; owned by main(), borrowed by the server. */
typedef struct {
    sm_registry *reg;      /* borrowed */
    const char *token;     /* token for channels to workers; NULL for none; borrowed */
    int call_deadline_ms;  /* control calls to workers (FreeArray, Assemble) and downloads */
    const sm_rpc_tls *tls; /* channels to workers: NULL plaintext, else mutual TLS; borrowed */
} sm_coord;

/* The handler table; pass an sm_coord * as user to sm_svc_coord_serve. */
const sm_svc_coord_ops *sm_handlers_ops(void);

#endif
