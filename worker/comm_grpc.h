/* comm_grpc: the sm_comm of one job on one worker, for groups whose members
 * live on several workers (docs/architecture.md, "A job's path").
 *
 * Members on this worker meet in-process at an sm_rendezvous (common/exec)
 * keyed by (seq, members[0]), where they publish their input pointers; the
 * rendezvous also holds the job's abort state.
 * Blocks of members on other workers arrive as blobs in the job's mailbox
 * (comm_grpc_mailbox.h), pushed by their owners through a transport
 * (Worker.Exchange over gRPC in production, see sm_comm_grpc_net).
 *
 * Algorithms, chosen from the group's layout. Reductions combine in the
 * tree of sm_comm.h; the group's units are its largest subtrees whose
 * members all live on one worker (sm_comm_tree_units).
 * - all_reduce: the local members reduce the partials of this worker's
 *   units (a unit of one member is its input; another's partial goes in
 *   its first member's output), a slice each. Across workers the leaders
 *   then reduce-scatter and all-gather: with workers ordered by their
 *   lowest member rank, worker k gets part k (of nworkers contiguous
 *   parts) of every other worker's unit partials (one blob, units in rank
 *   order, dst_device = its leader's device, received straight into one
 *   buffer), reduces them with its own members' inputs in the tree into
 *   the leader's output and pushes the result to every other worker
 *   (dst_device = -1, received straight into the leader's output), so
 *   each element is reduced once, always in the same order, and every
 *   member gets the same bits on every run and every layout. Each local
 *   member then copies a share of the leader's output into the other
 *   local outputs.
 * - reduce_scatter: the leader reduces the partials of this worker's units
 *   of the other workers' members' chunks, pushes every other worker the
 *   chunks of its members (units in rank order), and each member reduces
 *   its chunk of those with its worker's inputs in the tree.
 * - all_gather / all_to_all / permute: each member pushes what another
 *   worker needs from it (its block; for all_to_all the chunks of that
 *   worker's members in rank order) as one blob with dst_device = -1 (the
 *   permute destination's device for permute), then assembles its output in
 *   rank order from local inputs and received blobs. Received blobs are read
 *   straight from the chunks they arrived in.
 *
 * Groups whose workers all share memory with this one (the same non-zero
 * shm_domain in the config) skip the network: see comm_grpc_shm.c. The
 * reduction order is the same on both paths, so are the bits.
 *
 * Failures: a send that fails, or a peer that stops answering a probe while
 * a member waits for its data, aborts the job with SM_EUNAVAILABLE naming
 * the worker's address; the job's deadline (absolute) bounds every wait
 * (then SM_ETIMEOUT); sm_comm_grpc_fail aborts with any code (a cancelled
 * job: SM_ECANCELLED). After an abort every member returns at once.
 *
 * Ownership: the context owns copies of the layout; it borrows the
 * mailbox, the transport and its user, and the array pool, which must
 * outlive it. Free it with
 * sm_comm_grpc_free once no device thread uses it. Thread-safe: every
 * device thread of the job calls into one context. */
#ifndef SM_WORKER_COMM_GRPC_H
#define SM_WORKER_COMM_GRPC_H

#include <time.h>

#include "comm_grpc_mailbox.h"
#include "sm_array.h"
#include "sm_comm.h"
#include "sm_info.h"
#include "sm_svc_job.h"

/* How blobs leave this worker. A stream carries the chunks of one blob. */
typedef struct {
    /* Opens a stream to the worker at address; the call's deadline is
     * timeout_ms from now. */
    sm_err (*open)(void *user, const char *address, int timeout_ms, void **stream, char *err,
                   size_t errlen);
    /* Sends one chunk. m->data may stay referenced after the return, until
     * m->release(m->release_arg) when m->release is set: the transport
     * calls it exactly once, also when the send fails. */
    sm_err (*send)(void *stream, const sm_svc_coll_msg *m, char *err, size_t errlen);
    /* Half-closes, waits for the ack and frees the stream. */
    sm_err (*finish)(void *stream, char *err, size_t errlen);
    /* Cancels and frees the stream. */
    void (*abort)(void *stream);
    /* SM_OK if the worker at address answers within timeout_ms. */
    sm_err (*probe)(void *user, const char *address, int timeout_ms, char *err, size_t errlen);
} sm_comm_grpc_transport;

/* The gRPC transport (sm_svc_coll_*, sm_svc_negotiate as the probe); its
 * user is an sm_peer * (worker/peer.h) whose channels it uses. */
extern const sm_comm_grpc_transport sm_comm_grpc_net;

typedef struct sm_shm_pool sm_shm_pool;
typedef struct sm_shm_views sm_shm_views;

typedef struct {
    sm_job_id job;
    const sm_mesh *mesh; /* copied */
    int nworkers;
    const sm_svc_peer *workers; /* addresses copied */
    const int *pos_worker;      /* worker index of every mesh position; copied */
    int self;                   /* index of this worker */
    struct timespec deadline;   /* CLOCK_MONOTONIC */
    int probe_ms;               /* probe interval while waiting; <= 0: 1000 */
    sm_mailbox *box;            /* borrowed */
    const sm_comm_grpc_transport *tr;
    void *tr_user;
    /* Shared memory (comm_grpc_shm.c): per worker, its domain (NULL or 0:
     * gRPC only); a group whose workers all share this worker's non-zero
     * domain runs through segments named after shm_key. */
    const uint32_t *shm_domain;
    uint64_t shm_key;
    sm_shm_pool *shm_pool; /* borrowed; NULL: a new file per job (worker/shm.h) */
    /* Where the peers' array memory is mapped (their pools' arenas), kept
     * between jobs; borrowed; NULL: data movements copy every input a peer
     * reads into this worker's segment. */
    sm_shm_views *shm_views;
    /* Where the collectives' scratch comes from, and what the pages of
     * this worker's shared-memory segment are charged to (the worker's
     * memory limit); borrowed; NULL: plain allocation, nothing counted. */
    sm_array_pool *pool;
} sm_comm_grpc_config;

typedef struct sm_comm_grpc sm_comm_grpc;

/* The vtable; pass an sm_comm_grpc * as its ctx. */
extern const sm_comm sm_comm_grpc_ops;

sm_err sm_comm_grpc_create(const sm_comm_grpc_config *cfg, sm_comm_grpc **out, char *err,
                           size_t errlen);
void sm_comm_grpc_free(sm_comm_grpc *c);

/* Aborts the job with code and why (one sentence); the first abort wins.
 * Thread-safe. */
void sm_comm_grpc_fail(sm_comm_grpc *c, sm_err code, const char *why);
/* 0 while not aborted; else the abort's code, with its sentence in why. */
sm_err sm_comm_grpc_status(sm_comm_grpc *c, char *why, size_t len);

/* Sends one blob made of nseg segments (concatenated) over tr: chunks of at
 * most SM_SVC_CHUNK bytes, offsets in order, the last with the checksum of
 * the whole blob. hdr gives job_id, seq, src_device and dst_device. The
 * chunks are sent without a copy: on return the transport no longer
 * references the segments (it waits for the releases, up to 5 s after the
 * stream ended; past that a peer that stopped reading may still be sent
 * bytes of them, which it discards with the cancelled stream). */
typedef struct {
    const void *data;
    int64_t len;
} sm_comm_grpc_seg;
sm_err sm_comm_grpc_send_blob(const sm_comm_grpc_transport *tr, void *tr_user, const char *address,
                              int timeout_ms, const sm_svc_coll_msg *hdr,
                              const sm_comm_grpc_seg *segs, int nseg, char *err, size_t errlen);

#endif
