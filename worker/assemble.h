/* assemble: Worker.Assemble, building new shards from pieces of existing
 * ones (resharding). Local pieces are copied from this worker's store,
 * remote ones pulled from peers with GetShard sub-boxes, written straight
 * into the new shard's buffer.
 *
 * Threads: thread-safe; up to h->assemble_threads devices of one request are
 * filled at once. */
#ifndef SM_WORKER_ASSEMBLE_H
#define SM_WORKER_ASSEMBLE_H

#include "handlers.h"

/* Allocates every listed device's new shard (zeroed), fills it from its
 * pieces and, when all are complete, stores them under req->array_id in one
 * step (replacing existing shards of that array on those devices). Any
 * failure stores nothing and names the piece (device, source worker, array,
 * device). *bytes receives the bytes stored. req borrowed. */
sm_err sm_assemble_run(sm_handlers *h, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                       size_t errlen);

#endif
