/* job: the worker's side of shard_map jobs (Worker.RunJob, CancelJob,
 * Exchange) as an sm_svc_worker_job_ops vtable.
 *
 * RunJob finds every input's shard on every local device of the job's mesh
 * (a missing one is SM_ENOTFOUND naming the array, parameter and device),
 * runs the program on one thread per local device (sm_exec_run_plan; the
 * handler's own thread runs the last device, the others come from a pool
 * kept between jobs; a small job without collectives or products runs
 * every device on the handler's thread) with the job's comm_grpc, and,
 * only when every local device succeeded, stores each output block as the
 * shard of the output array on that device. On a failure nothing is
 * stored, the comm is aborted so local devices return, and the other
 * workers of the job are told to cancel it (CancelJob) so none waits for
 * this one until its deadline.
 *
 * Exchange routes incoming collective blobs into the mailbox of their job.
 * A job that has not started yet gets a pending entry that keeps them (at
 * most SM_JOBS_PENDING_BYTES, and SM_JOBS_PENDING_TOTAL for all such jobs
 * together, checked at a blob's first chunk; for SM_JOBS_LINGER_S seconds);
 * blobs for an ended job are dropped. CancelJob aborts a running job ("job 5 was
 * cancelled"); a job cancelled before it starts fails at once when it does.
 *
 * ShmProbe creates, reads or drops a probe segment (shm.h), or refuses
 * when shared memory is off. A job whose request gives this worker a
 * non-zero shm_domain runs the collectives among the workers of that
 * domain through shared memory (comm_grpc_shm.c), whatever this worker's
 * setting: every worker of a job follows the request, so all agree.
 *
 * Serve with sm_svc_worker_jobs_serve(server, &sm_jobs_ops, jobs, ...).
 *
 * Ownership: sm_jobs_create copies cfg's strings and borrows the store and
 * peer cache, which must outlive it; sm_jobs_free frees everything, once
 * the server has stopped (no handler running). Threads: handlers run on
 * many server threads at once; the job table has its own lock. */
#ifndef SM_WORKER_JOB_H
#define SM_WORKER_JOB_H

#include "peer.h"
#include "sm_svc_job.h"
#include "store.h"

/* Bytes kept for a job that has not started yet, and for all of them. */
#define SM_JOBS_PENDING_BYTES ((int64_t)1 << 30)
#define SM_JOBS_PENDING_TOTAL ((int64_t)2 << 30)
/* Seconds an entry of a job that has not started (or has ended) is kept. */
#define SM_JOBS_LINGER_S 60
/* Most jobs known at once (running, pending or recently ended); when full,
 * entries of jobs that ended without a cancel are dropped first. */
#define SM_JOBS_MAX 4096
/* Deadline of a job that names none, in ms. */
#define SM_JOBS_DEFAULT_DEADLINE_MS 60000
/* Values per device up to which a job without collectives or products runs
 * its local devices one after another on the handler's thread. */
#define SM_JOBS_INLINE_BYTES (64 * 1024)
/* Device threads kept idle between jobs. */
#define SM_JOBS_IDLE_THREADS 64

typedef struct {
    /* borrowed; its array pool (sm_store_pool) is where every job's values,
     * outputs and collective scratch come from, and what its shared-memory
     * pages are charged to */
    sm_store *store;
    sm_peer *peers;           /* borrowed: channels to the other workers */
    const char *self_address; /* this worker's advertised address; copied */
    int probe_ms;             /* liveness probe interval while waiting; <= 0: 1000 */
    /* Answer Worker.ShmProbe (--transport auto or shm): then a dispatcher
     * that proves this worker shares memory with another runs their
     * collectives through it. 0: refuse (--transport grpc); 2 (--transport
     * shm): as 1, and a job whose other workers this one shares no memory
     * with is logged as a warning. */
    int shm;
} sm_jobs_config;

typedef struct sm_jobs sm_jobs;

/* The vtable; user is an sm_jobs *. */
extern const sm_svc_worker_job_ops sm_jobs_ops;

sm_err sm_jobs_create(const sm_jobs_config *cfg, sm_jobs **out, char *err, size_t errlen);
/* Refuses new jobs and aborts the running ones (SM_EUNAVAILABLE, "worker
 * ADDR is shutting down"), so their RunJob handlers return promptly: call
 * before stopping the server. NULL ok. */
void sm_jobs_stop(sm_jobs *j);
void sm_jobs_free(sm_jobs *j);

#endif
