/* sm_svc_job: the shard_map job part of shmap.v1 (SubmitJob, WaitJob,
 * GetJob, CancelJob on the coordinator; RunJob, CancelJob, Exchange on the
 * workers) in plain C types, with the same conventions as sm_svc.h
 * (borrowed requests, replies owned by the receiver, one-sentence errors,
 * deadlines in ms on every client call, handlers on rpc handler threads).
 *
 * Programs cross this API as sm_program (common/ir). The conversion to and
 * from the protobuf Program lives in common/rpc: it replays the program
 * through the IR builder, so a decoded program is fully type-checked (but
 * the replication check is the receiver's to run with sm_program_verify). */
#ifndef SM_SVC_JOB_H
#define SM_SVC_JOB_H

#include "sm_ir.h"
#include "sm_svc.h"

/* ---- coordinator ---------------------------------------------------------- */

typedef struct {
    /* Client side: borrowed. Server side: owned by the handler, which frees
     * it with sm_program_free (or keeps it and frees it later). */
    sm_program *program;
    int nargs;
    sm_array_ref *args; /* one per parameter */
    int nout_names;
    const char **out_names; /* "" or NULL entries: unnamed */
    int check_vma;          /* 1 by default */
    uint32_t deadline_ms;   /* 0: none */
    uint32_t wait_ms;       /* sm_svc_job_submit_wait: how long to wait for the end */
} sm_svc_submit_req;

typedef struct {
    /* Returns at once with the new job's id; the job runs asynchronously. */
    sm_err (*submit)(void *user, sm_svc_submit_req *req, sm_job_id *out, char *err, size_t errlen);
    /* SubmitJob with wait_ms: submits as submit does (the same errors, and
     * nothing created on one), then waits up to req->wait_ms for the job to
     * end and describes it as wait does (out->id always set). NULL: such a
     * request is served by submit and answered without a JobInfo. */
    sm_err (*submit_wait)(void *user, sm_svc_submit_req *req, sm_job_info *out, char *err,
                          size_t errlen);
    /* Waits up to wait_ms for the job to end, then describes it. */
    sm_err (*wait)(void *user, sm_job_id id, uint32_t wait_ms, sm_job_info *out, char *err,
                   size_t errlen);
    sm_err (*get)(void *user, sm_job_id id, sm_job_info *out, char *err, size_t errlen);
    /* Cancels a queued or running job (no-op for an ended one); describes it. */
    sm_err (*cancel)(void *user, sm_job_id id, sm_job_info *out, char *err, size_t errlen);
} sm_svc_coord_job_ops;

/* Registers SubmitJob, WaitJob, GetJob and CancelJob on s (before start). */
sm_err sm_svc_coord_jobs_serve(sm_rpc_server *s, const sm_svc_coord_job_ops *ops, void *user,
                               char *err, size_t errlen);

sm_err sm_svc_job_submit(sm_rpc_channel *ch, int deadline_ms, const sm_svc_submit_req *req,
                         sm_job_id *out, char *err, size_t errlen);
/* Submit and wait in one call: SubmitJob with req->wait_ms (> 0; the
 * call's own deadline is wait_ms plus deadline_ms). *out describes the job
 * as WaitJob would (owned by the caller, sm_job_info_free): ended, or
 * QUEUED / RUNNING when it had not ended after wait_ms. A coordinator that
 * does not wait answers at once: then only out->id is set, with state
 * QUEUED, and the caller goes on with sm_svc_job_wait. */
sm_err sm_svc_job_submit_wait(sm_rpc_channel *ch, int deadline_ms, const sm_svc_submit_req *req,
                              sm_job_info *out, char *err, size_t errlen);
/* The call's own deadline is wait_ms plus deadline_ms. */
sm_err sm_svc_job_wait(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, uint32_t wait_ms,
                       sm_job_info *out, char *err, size_t errlen);
sm_err sm_svc_job_get(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, sm_job_info *out,
                      char *err, size_t errlen);
sm_err sm_svc_job_cancel(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, sm_job_info *out,
                         char *err, size_t errlen);

/* ---- worker --------------------------------------------------------------- */

typedef struct {
    char address[SM_ADDR_MAX];
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    /* Workers of a job with the same non-zero domain proved they share
     * memory (sm_svc_shm_domains); 0: gRPC only. */
    uint32_t shm_domain;
} sm_svc_peer;

typedef struct {
    sm_job_id job_id;
    sm_program *program; /* as in sm_svc_submit_req; mesh inline with devices */
    int ninputs;
    sm_array_id *inputs; /* one per parameter, laid out as the in_specs need */
    int noutputs;
    sm_array_id *outputs; /* ids to store the outputs under */
    int npeers;
    sm_svc_peer *peers; /* every worker of the mesh, this one included */
    uint32_t deadline_ms;
    uint64_t shm_key; /* random per job: names its shared-memory segments */
} sm_svc_run_job_req;

/* ShmProbe (see shmap.proto): create, read or drop a probe segment. */
typedef struct {
    int create;
    char read[SM_SVC_SHM_NAME_MAX];
    char drop[SM_SVC_SHM_NAME_MAX];
} sm_svc_shm_probe_req;

typedef struct {
    char name[SM_SVC_SHM_NAME_MAX];
    uint64_t cookie;
    uint32_t protocol; /* SM_SHM_PROTOCOL of the worker; 0 from an older one */
} sm_svc_shm_probe_reply;

/* One block of a collective pushed worker to worker (Worker.Exchange). */
typedef struct {
    sm_job_id job_id;
    uint32_t seq;
    int32_t src_device;
    int32_t dst_device; /* -1: every device of the receiver that needs it */
    int64_t offset;
    const void *data; /* borrowed (send) / valid until the next recv */
    size_t len;
    int64_t total_bytes;
    int last;
    uint64_t checksum;
    /* send: if release is set, data is sent without a copy and must stay
     * valid and unchanged until release(release_arg) runs: exactly once, on
     * any thread, possibly after the send returned (also when it failed).
     * NULL: data is copied. Ignored by receives. */
    void (*release)(void *arg);
    void *release_arg;
} sm_svc_coll_msg;

typedef struct sm_svc_coll_in sm_svc_coll_in;
/* Server side: next message; SM_OK with *end = 1 at the end of the stream. */
sm_err sm_svc_coll_recv(sm_svc_coll_in *in, sm_svc_coll_msg *msg, int *end, char *err,
                        size_t errlen);
/* Server side, receiving without a copy: where each message's data goes. */
typedef struct {
    /* Called once per message with its other fields (msg->data NULL,
     * msg->len the data's length); SM_OK with *dst at msg->len writable
     * bytes (may stay NULL when len is 0), or an error with a sentence in
     * err, which refuses the message. */
    sm_err (*place)(void *user, const sm_svc_coll_msg *msg, void **dst, char *err, size_t errlen);
    /* Called after each piece of the data was written, in order, with the
     * piece as written; may be NULL. */
    void (*copied)(void *user, const void *p, size_t n);
    void *user; /* not NULL when copied is set */
} sm_svc_coll_sink;
/* sm_svc_coll_recv with the data copied straight from the network buffers
 * to where sink->place says (msg->data stays NULL). A place error is
 * returned as is. */
sm_err sm_svc_coll_recv_into(sm_svc_coll_in *in, const sm_svc_coll_sink *sink, sm_svc_coll_msg *msg,
                             int *end, char *err, size_t errlen);

typedef struct {
    /* Runs the job on every local device of the mesh; returns when all are
     * done (or one failed: then nothing is stored). */
    sm_err (*run_job)(void *user, sm_svc_run_job_req *req, int64_t *output_bytes, char *err,
                      size_t errlen);
    sm_err (*cancel_job)(void *user, sm_job_id id, char *err, size_t errlen);
    /* Receives a stream of collective blocks from a peer. */
    sm_err (*exchange)(void *user, sm_svc_coll_in *in, int64_t *bytes, char *err, size_t errlen);
    /* ShmProbe; NULL: UNIMPLEMENTED (then no pair with this worker shares
     * memory). */
    sm_err (*shm_probe)(void *user, const sm_svc_shm_probe_req *req, sm_svc_shm_probe_reply *out,
                        char *err, size_t errlen);
} sm_svc_worker_job_ops;

sm_err sm_svc_worker_jobs_serve(sm_rpc_server *s, const sm_svc_worker_job_ops *ops, void *user,
                                char *err, size_t errlen);

sm_err sm_svc_worker_run_job(sm_rpc_channel *ch, int deadline_ms, const sm_svc_run_job_req *req,
                             int64_t *output_bytes, char *err, size_t errlen);
/* Called by sm_svc_worker_run_job_all as worker i's RunJob ends: e and err
 * as sm_svc_worker_run_job returns them, output_bytes 0 on failure. */
typedef void (*sm_svc_run_job_done)(void *user, int i, sm_err e, int64_t output_bytes,
                                    const char *err);
/* Asked about worker i's pending RunJob about every 100 ms: non-zero ends
 * that call at once with SM_EUNAVAILABLE and the sentence in why. */
typedef int (*sm_svc_run_job_watch)(void *user, int i, char *why, size_t whylen);
/* RunJob with the same req on chs[0..n) at once from the calling thread
 * (encoded once; sm_rpc_unary_all): done runs here for each worker as its
 * call ends and may block; watch (may be NULL) can end a pending call
 * whose worker is known to be gone. SM_OK once all ended, or an error
 * before any started (done not called). */
sm_err sm_svc_worker_run_job_all(sm_rpc_channel *const *chs, int n, int deadline_ms,
                                 const sm_svc_run_job_req *req, sm_svc_run_job_done done,
                                 sm_svc_run_job_watch watch, void *user, char *err, size_t errlen);
sm_err sm_svc_worker_cancel_job(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, char *err,
                                size_t errlen);

sm_err sm_svc_worker_shm_probe(sm_rpc_channel *ch, int deadline_ms, const sm_svc_shm_probe_req *req,
                               sm_svc_shm_probe_reply *out, char *err, size_t errlen);
/* Proof that worker a and worker b share memory: a creates a segment
 * holding a random cookie, b maps it and answers with the cookie it finds,
 * a drops it. 1 when b's cookie is a's and both speak the same protocol
 * (sm_svc_shm_probe_agree), 0 otherwise (any refusal or failure: then
 * gRPC is used between them). */
int sm_svc_shm_prove(sm_rpc_channel *a, sm_rpc_channel *b, int deadline_ms);
/* 1 if made (a's create) and seen (b's read of it) prove a shared memory
 * both workers can use together: the same non-zero cookie and the same
 * protocol. Pure. */
int sm_svc_shm_probe_agree(const sm_svc_shm_probe_reply *made, const sm_svc_shm_probe_reply *seen);
/* Proof that the worker at ch shares this process's memory: this process
 * creates a probe segment holding a random cookie, the worker maps it and
 * answers with the cookie it finds (ShmProbe{read}), the segment is
 * dropped. 1 when the cookies match, 0 otherwise (another host, another
 * /dev/shm, a worker run with --transport grpc, any failure). */
int sm_svc_shm_prove_here(sm_rpc_channel *ch, int deadline_ms);
/* Whether the worker at addr (its channel ch from the cache chans)
 * shares this process's memory: proven once (sm_svc_shm_prove_here) and
 * kept with the channel. A failed proof, or a refusal recorded with
 * sm_svc_shm_refused, stands for retry_ms (0: for good); then the next
 * call proves again. 1 or 0. */
int sm_svc_shm_same(sm_rpc_chans *chans, const char *addr, sm_rpc_channel *ch, int deadline_ms,
                    int64_t retry_ms);
/* The worker at addr refused a transfer through shared memory: not proven
 * from now on (until retry_ms). */
void sm_svc_shm_refused(sm_rpc_chans *chans, const char *addr);
/* The shared-memory domains of n workers: domain[i] is 0 for a worker
 * that shares memory with no other, else the same non-zero value for every
 * worker of its group (each proven with the group's first worker by
 * prove(user, i, j): 1 when workers i and j share memory, as
 * sm_svc_shm_prove answers). */
void sm_svc_shm_domains(int n, int (*prove)(void *user, int i, int j), void *user,
                        uint32_t *domain);

typedef struct sm_svc_coll_stream sm_svc_coll_stream;
sm_err sm_svc_coll_open(sm_rpc_channel *ch, int deadline_ms, sm_svc_coll_stream **out, char *err,
                        size_t errlen);
sm_err sm_svc_coll_send(sm_svc_coll_stream *st, const sm_svc_coll_msg *msg, char *err,
                        size_t errlen);
/* Half-closes, waits for the ack, frees the stream. bytes may be NULL. */
sm_err sm_svc_coll_finish(sm_svc_coll_stream *st, int64_t *bytes, char *err, size_t errlen);
void sm_svc_coll_abort(sm_svc_coll_stream *st);

/* Program <-> bytes of the protobuf Program message, for tests and tools
 * that store programs (e.g. a job's program in a log). *out is malloc'd. */
sm_err sm_svc_program_encode(const sm_program *p, uint8_t **out, size_t *len, char *err,
                             size_t errlen);
sm_err sm_svc_program_decode(const uint8_t *buf, size_t len, sm_program **out, char *err,
                             size_t errlen);

#endif
