/* sm_comm_local: the in-process implementation of sm_comm, for devices that
 * run as threads of one process (the local runner, and devices of one
 * worker).
 *
 * Each collective is a rendezvous (sm_rendezvous.h) keyed by (sequence number, rank-0 mesh
 * position): members publish their input pointers and wait at a first
 * barrier; then each reads its peers' inputs directly: a data-moving member
 * fills its own output, an all-reduce member reduces its share of the
 * elements (in the tree of sm_comm.h) into every member's output, and a reduce-scatter
 * member reduces only its own chunk; a second barrier keeps every buffer
 * alive until all members are done with it. Any op sequence in which every
 * device issues the same collectives in the same order completes. A member
 * blocked at the first barrier returns SM_ECANCELLED once the job is aborted
 * (sm_comm.abort) and SM_ETIMEOUT when its peers have not all arrived within
 * the timeout (which also aborts the job, releasing the others with
 * SM_ETIMEOUT).
 *
 * Ownership: sm_comm_local_create returns a context owned by the caller,
 * freed by sm_comm_local_free once no thread uses it. All ops are
 * thread-safe; one context serves one job. */
#ifndef SM_COMM_LOCAL_H
#define SM_COMM_LOCAL_H

#include "sm_comm.h"

#define SM_COMM_LOCAL_TIMEOUT_S 60.0

typedef struct sm_comm_local sm_comm_local;

/* The vtable; pass a sm_comm_local * as its ctx. */
extern const sm_comm sm_comm_local_ops;

/* A context for one job. timeout_s <= 0 means SM_COMM_LOCAL_TIMEOUT_S: the
 * longest a member waits for its peers at one collective. */
sm_err sm_comm_local_create(double timeout_s, sm_comm_local **out, char *err, size_t errlen);
void sm_comm_local_free(sm_comm_local *c);

#endif
