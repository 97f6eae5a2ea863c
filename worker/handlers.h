/* handlers: the shmap.v1.Worker service (PutShard, GetShard, FreeArray,
 * Assemble, Stats, ShardInfo, and the checkpoint methods of ckpt.h) over a
 * shard store, as an sm_svc_worker_ops vtable.
 *
 * Serve with sm_svc_worker_serve(server, &sm_handlers_ops, &ctx, ...): the
 * context is borrowed for the server's lifetime and its members must outlive
 * it. Handlers run on many server threads at once; they share only the
 * store and the peer cache, both thread-safe.
 *
 * Guarantees: an upload or assemble stores its shards whole or not at all;
 * a bad request gets an error sentence and changes nothing. */
#ifndef SM_WORKER_HANDLERS_H
#define SM_WORKER_HANDLERS_H

#include "peer.h"
#include "segmap.h"
#include "store.h"
#include "sm_svc.h"

typedef struct {
    sm_store *store;          /* borrowed */
    sm_peer *peers;           /* borrowed */
    const char *self_address; /* borrowed; pieces from this address are local */
    int assemble_threads;     /* devices assembled at once (<= 1: one at a time) */
    /* Mappings of clients' segments for transfers with a ShmRef; borrowed.
     * NULL (--transport grpc): a ShmRef is refused (FAILED_PRECONDITION). */
    sm_segmap *segs;
} sm_handlers;

/* The vtable; user is an sm_handlers *. */
extern const sm_svc_worker_ops sm_handlers_ops;

#endif
