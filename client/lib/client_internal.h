/* client_internal: what the files of libshmap share and nothing outside the
 * library sees: the client handle, row-major box streaming (gather a box of
 * a host buffer into a contiguous byte stream and scatter one back), the
 * transfer helpers built on sm_svc streams, and progress accounting.
 *
 * Threads: a client handle is shared by any number of caller threads; its
 * mutable state is the progress counter and the shared-memory records
 * (client_shm), each guarded by its mutex. */
#ifndef CLIENT_INTERNAL_H
#define CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "shmap.h"
#include "sm_svc.h"
#include "sm_rpc.h"

typedef struct client_shm client_shm;

struct sm_client {
    sm_rpc_channel *ch; /* owned */
    int timeout_ms;     /* deadline of each unary call */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    int relay_only;        /* every transfer through the coordinator */
    int grants;            /* a tenant: direct transfers need the shards' grants */
    char *token;           /* owned copy of opts->token, or NULL */
    sm_rpc_tls *tls;       /* owned; NULL: plaintext */
    sm_rpc_chans *workers; /* owned: channels for direct transfers */
    sm_array_pool *arrays; /* owned: the data of the arrays it returns (opts->cache_mb) */
    int no_shm;            /* opts->no_shm: never through shared memory */
    client_shm *shm;       /* owned: sm_client_alloc's buffers, proven hosts */
};

/* ---- shared memory (client_shm.c) ------------------------------------------
 * Buffers of sm_client_alloc, the staging segments of arrays in ordinary
 * memory, and which workers share this host's memory. */
/* stage_max: bytes the staging segments may hold together (0: none). */
sm_err client_shm_create(sm_client *c, size_t stage_max, char *err, size_t errlen);
/* Unlinks and unmaps every buffer still allocated, staging ones too. */
void client_shm_close(sm_client *c);
/* A transfer smaller than this streams: at 1 MiB (8 shards of 128 KiB)
 * staging measured no better than the streams, at 4 MiB better both ways
 * (bench_transfer --sizes 1,4, SHMAP_CLIENT_STAGE_MB=0 against the
 * default). Staging segments are made in
 * multiples of CLIENT_STAGE_ROUND, so arrays of about one size share one. */
#define CLIENT_STAGE_MIN   (4 << 20)
#define CLIENT_STAGE_ROUND (1 << 20)
/* A staging buffer of nbytes (at least), in a segment of c's cache with
 * its pages mapped, lent for one transfer of the array user (in ordinary
 * memory) with the workers holding info's shards and copies (with
 * present_only, the present ones): the caller copies the array in (an
 * upload) or out (a download), and the workers copy through the segment
 * (client_shm_ref finds it). An idle segment big enough is reused, else
 * one is made, dropping the least recently used idle ones to keep the
 * cache within its bound. NULL (stream as before) when c stages nothing
 * (stage_max 0, no_shm, relay_only, a tenant's), nbytes is under
 * CLIENT_STAGE_MIN or over the bound, user lies in shared memory already,
 * a worker does not share this host's memory, or the bound is taken by
 * segments lent to other transfers. Thread-safe; every buffer taken is
 * given back with client_stage_give. */
void *client_stage_take(sm_client *c, const sm_array_info *info, int present_only, const void *user,
                        int64_t nbytes);
/* Gives a buffer of client_stage_take back to the cache (NULL ignored). */
void client_stage_give(sm_client *c, void *p);
/* 1 with *ref filled when the array buf (shape, dtype t) lies wholly in one
 * of c's shared-memory buffers and the worker at addr (channel ch) shares
 * this host's memory (proved once per address with ShmProbe): the worker
 * can copy the box `box` of it itself. 0 (ref->name "") otherwise, or
 * when c takes no shared memory (no_shm, relay_only, a tenant's). */
int client_shm_ref(sm_client *c, const char *addr, sm_rpc_channel *ch, const void *buf,
                   const sm_shape *shape, sm_dtype t, const sm_index *box, sm_svc_shm_ref *ref);
/* The worker at addr refused a ShmRef (FAILED_PRECONDITION: it runs with
 * --transport grpc): its transfers take the streams from now on. */
void client_shm_refused(sm_client *c, const char *addr);

/* The cached channel to the worker at addr (created on first use; the first
 * use waits up to CLIENT_READY_MS for it to connect), or NULL when transfers
 * to it must go through the coordinator's relay: relay_only, no address,
 * TLS without a client certificate (worker ports require one, unless the
 * client is a tenant's with grants), or the
 * worker was unreachable within the last CLIENT_RETRY_S seconds. */
#define CLIENT_READY_MS 1000
#define CLIENT_RETRY_S  30
sm_rpc_channel *client_worker_channel(sm_client *c, const char *addr);
/* Records that the worker at addr could not be reached (UNAVAILABLE). */
void client_worker_unreachable(sm_client *c, const char *addr);

/* For a tenant's client (c->grants): copies the grants of the n shards
 * s[k] (borrowed) back to back into out (n * SM_GRANT_LEN bytes) and
 * returns out; NULL when a shard carries none (the transfer then goes
 * through the coordinator's relay), and for a client that needs none. */
const unsigned char *client_grants(const sm_client *c, int n, const sm_shard_info *const *s,
                                   unsigned char *out);
/* 1 if e, from a direct transfer of a tenant's client, is a worker
 * refusing its grants (expired, say): the relay may still do it. */
int client_grant_refused(const sm_client *c, sm_err e);

/* Progress of one transfer of `total` bytes, shared by the threads that move
 * its pieces. */
typedef struct {
    const sm_client *c;
    pthread_mutex_t mu;
    int64_t done, total;
} client_progress;

/* Commits of direct uploads held back to be sent together, shared by the
 * threads that upload the targets. devices are borrowed and must outlive
 * client_commits_send. */
typedef struct {
    pthread_mutex_t mu;
    int n, cap;
    sm_svc_commit_target *t;
} client_commits;

sm_err client_commits_init(client_commits *cm, int cap, char *err, size_t errlen);
void client_commits_destroy(client_commits *cm);

void client_progress_init(client_progress *p, const sm_client *c, int64_t total);
void client_progress_add(client_progress *p, int64_t n);
void client_progress_destroy(client_progress *p);

/* Deadline for a stream moving `bytes`: the unary deadline plus time for the
 * bytes at a conservative 20 MB/s. */
int client_stream_deadline(const sm_client *c, int64_t bytes);

/* A box of a row-major buffer of shape `shape` (elements of elem bytes),
 * viewed as the byte stream of the box in its own row-major order. The box
 * must lie inside shape (checked by client_box_init). */
typedef struct {
    int rank;
    size_t elem;
    int64_t off[SM_MAX_RANK];    /* box start in the buffer */
    int64_t ext[SM_MAX_RANK];    /* box extent */
    int64_t stride[SM_MAX_RANK]; /* buffer element strides */
    int cdim;                    /* dims >= cdim form one contiguous run */
    int64_t run;                 /* elements per contiguous run */
    int64_t nbytes;              /* bytes of the box */
} client_box;

sm_err client_box_init(client_box *b, const sm_shape *shape, const sm_index *box, sm_dtype t,
                       char *err, size_t errlen);
/* Copies box bytes [pos, pos+len) out of buf into out (gather) or from in into
 * buf (scatter). pos + len <= b->nbytes. */
void client_box_gather(const client_box *b, const void *buf, int64_t pos, void *out, size_t len);
void client_box_scatter(const client_box *b, void *buf, int64_t pos, const void *in, size_t len);

/* Uploads the box `box` of src (row-major, shape src_shape, dtype t) to the
 * devices of one upload target of array `id`, in chunks of at most
 * SM_SVC_CHUNK bytes (a chunk not contiguous in src is gathered into a
 * staging buffer first). *ready is set to 1 when
 * the server says this upload completed the array (ready may be NULL).
 *
 * With info (the array's description, for its shards' worker addresses)
 * the box goes straight to the workers holding the devices (one PutShard
 * stream per worker, the same chunks to each) and is then committed with
 * CommitShards, or added to later (if not NULL) to be committed with the
 * array's other targets; a worker that cannot be reached sends the target
 * through the coordinator's relay (Upload) instead, as does info == NULL. */
sm_err client_upload_box(sm_client *c, const sm_array_info *info, sm_array_id id, int ndevices,
                         const int32_t *devices, sm_dtype t, const void *src,
                         const sm_shape *src_shape, const sm_index *box, client_progress *prog,
                         client_commits *later, char *err, size_t errlen);

/* One target of client_upload_boxes. */
typedef struct {
    int ndevices;
    const int32_t *devices; /* borrowed */
    const sm_index *box;    /* of src */
} client_up_target;

/* client_upload_box for targets tg[0..n), all of whose devices one worker
 * holds: one PutShard stream carries them all (or each goes its own way,
 * as with client_upload_box, when that worker cannot be reached). */
sm_err client_upload_boxes(sm_client *c, const sm_array_info *info, sm_array_id id, int n,
                           const client_up_target *tg, sm_dtype t, const void *src,
                           const sm_shape *src_shape, client_progress *prog, client_commits *later,
                           char *err, size_t errlen);

/* Sends the commits gathered in cm for array id in one CommitShards (none:
 * nothing is sent). *ready (ready may be NULL) is set to 1 when the service
 * says the commit completed the array. */
sm_err client_commits_send(sm_client *c, sm_array_id id, client_commits *cm, int *ready, char *err,
                           size_t errlen);

/* Downloads device `device`'s shard of array `id` (expected dtype t and
 * shape of `box`) and scatters it into the box `box` of dst (row-major, shape
 * dst_shape). Sizes, offsets and the checksum are verified (SM_EDATALOSS on a
 * mismatch). With worker_address (may be NULL or "") the shard comes
 * straight from that worker (GetShard), else, or if it cannot be reached
 * or refuses the grants, through the coordinator (Download). grants: the
 * client_grants of the device(s), NULL for none (a tenant's client then
 * takes the relay). */
sm_err client_download_box(sm_client *c, const char *worker_address, sm_array_id id, int32_t device,
                           const unsigned char *grants, sm_dtype t, void *dst,
                           const sm_shape *dst_shape, const sm_index *box, client_progress *prog,
                           char *err, size_t errlen);

/* client_download_box for the n devices of one worker (boxes[k] for
 * devices[k]), in one GetShard stream where there are several. */
sm_err client_download_boxes(sm_client *c, const char *worker_address, sm_array_id id, int n,
                             const int32_t *devices, const sm_index *boxes,
                             const unsigned char *grants, sm_dtype t, void *dst,
                             const sm_shape *dst_shape, client_progress *prog, char *err,
                             size_t errlen);

/* Groups 0..n-1 by key[]: fills order[0..n) with them, those of equal key
 * together (in their order, keys in order of first appearance), and
 * first[0..ngroups] with where each group starts (groups of at most max
 * items; first[ngroups] = n). Returns ngroups, or -1 when out of memory. */
int client_group_by(const uint32_t *key, int n, int max, int *order, int *first);

/* Best-effort delete of an array that a failed upload left pending. */
void client_discard(sm_client *c, sm_array_id id);

#endif
