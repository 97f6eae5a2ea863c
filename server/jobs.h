/* jobs: the coordinator's job manager — Coordinator.SubmitJob, WaitJob,
 * GetJob and CancelJob (sm_svc_coord_job_ops) over the registry.
 *
 * Submit checks everything before anything runs, on the caller's thread:
 * the program (sm_program_verify, with the replication check unless turned
 * off), the output names, the job's mesh (the program's; its devices, or
 * the default order when it names none, must be on alive workers) and every
 * argument (READY, dtype and global shape equal to its parameter's). It then
 * creates the output arrays (PENDING, sharded (mesh, out_spec), named as
 * asked) and queues the job; a small pool of threads runs queued jobs (a
 * light job whose submit waits for it runs on the submitting thread
 * instead, when a runner slot is free: at most nthreads jobs run at once):
 * inputs whose sharding is not (mesh, in_spec) are resharded into
 * temporary arrays, then Worker.RunJob goes to every worker of the mesh at
 * once (one thread each). All OK: the outputs turn READY and the job DONE.
 * Any failure: the job FAILED with the first failing worker's sentence, the
 * other workers told to cancel, the outputs deleted everywhere. Temporary
 * arrays are always deleted; inputs are never touched. Cancel and a job's
 * deadline end it the same way (CANCELLED, or FAILED with "deadline").
 *
 * The job table holds queued and running jobs, and the record of an ended
 * job (state, error, output descriptions) for keep_ms after it ended, at
 * most the keep_max most recent ones: older records are dropped, oldest end
 * first (on time, by an idle runner thread, also when no call comes in),
 * and GetJob / WaitJob / CancelJob of such an id answer NOT_FOUND saying
 * the record was dropped (an id never handed out "does not exist"). Ids
 * are never reused. A call that already holds a job (a WaitJob blocked on
 * it) still describes it after its record was dropped.
 *
 * Thread-safety: every function is safe from any thread. */
#ifndef SM_SERVER_JOBS_H
#define SM_SERVER_JOBS_H

#include "handlers.h"
#include "sm_ir.h"
#include "sm_svc_job.h"

typedef struct sm_cjobs sm_cjobs;

/* Default retention of ended jobs' records: seconds after the end, and
 * count. */
#define SM_JOBS_KEEP_S   600
#define SM_JOBS_KEEP_MAX 10000
/* Default bound on jobs waiting in the run queue. */
#define SM_JOBS_QUEUE_MAX 1000
/* Default bound on a submitted program's ops (loops unrolled). */
#define SM_JOBS_MAX_OPS 100000

typedef struct {
    int nthreads;    /* runner threads, 1..16 */
    int64_t keep_ms; /* an ended job's record is kept this long (>= 0) */
    int keep_max;    /* and only the newest keep_max ended records (>= 0) */
    int queue_max;   /* at most this many jobs wait to start (>= 1); one
                      * more is refused RESOURCE_EXHAUSTED */
    int max_ops;     /* a program with more ops (as submitted) is refused; 0: none */
} sm_cjobs_config;

/* The defaults: nthreads runner threads, SM_JOBS_KEEP_S, SM_JOBS_KEEP_MAX,
 * SM_JOBS_QUEUE_MAX. */
sm_cjobs_config sm_cjobs_config_default(int nthreads);

/* Starts a job manager configured by cfg (copied) over coord (borrowed; it
 * must outlive the manager). SM_EINVAL for a value out of range. *out is
 * freed with sm_cjobs_free. */
sm_err sm_cjobs_create(sm_coord *coord, const sm_cjobs_config *cfg, sm_cjobs **out, char *err,
                       size_t errlen);
/* Stops taking jobs, cancels running ones and wakes every waiter, so that
 * handlers blocked in WaitJob return at once. Call before stopping the rpc
 * server. NULL ok. */
void sm_cjobs_stop(sm_cjobs *j);
/* Stops (if not yet), joins the runner threads and frees everything. Call
 * after the rpc server stopped and before the registry is freed. NULL ok. */
void sm_cjobs_free(sm_cjobs *j);

/* What the metrics endpoint reports of the jobs (server/metrics.c). */
#define SM_CJOBS_NBUCKETS 8
typedef struct {
    int queued, running;
    uint64_t submitted;                       /* ids handed out */
    uint64_t ended[SM_JOB_CANCELLED + 1];     /* by sm_job_state */
    double buckets_s[SM_CJOBS_NBUCKETS];      /* upper bounds of the run-time buckets */
    uint64_t run_hist[SM_CJOBS_NBUCKETS + 1]; /* jobs per bucket (not cumulative), then +Inf */
    double run_sum_s;                         /* total run time of ended jobs */
} sm_cjobs_stats;
/* A consistent snapshot of the counters. Thread-safe. */
void sm_cjobs_stats_get(sm_cjobs *j, sm_cjobs_stats *out);

/* The handler table; pass an sm_cjobs * as user to sm_svc_coord_jobs_serve. */
const sm_svc_coord_job_ops *sm_cjobs_ops(void);

/* Longest WaitJob the server blocks for; a longer wait_ms returns the job
 * still running after this long (the client asks again). */
#define SM_JOBS_MAX_WAIT_MS 10000
/* Values per device up to which a job without collectives or products that
 * needs no reshard runs on the thread of the SubmitJob that waits for it
 * (no hand-off to a runner thread and back), when a runner slot is free. */
#define SM_JOBS_LIGHT_BYTES (64 * 1024)

/* ---- pure checks (unit-tested) ----------------------------------------------- */

/* Output names: at most p->nreturns; NULL or "" entries are unnamed; the
 * rest at most SM_NAME_MAX-1 bytes, not all digits, and distinct. */
sm_err sm_cjobs_check_out_names(const sm_program *p, int n, const char *const *names, char *err,
                                size_t errlen);
/* Argument k (described by a) against parameter k: READY, same dtype and
 * global shape. SM_EINVAL naming the parameter. */
sm_err sm_cjobs_check_arg(const sm_program *p, int k, const sm_array_info *a, char *err,
                          size_t errlen);
/* 1 if sharding s lays an array out as spec on mesh m (same axes, sizes and
 * devices; specs equal up to trailing unsharded dimensions). */
int sm_cjobs_sharding_same(const sm_sharding *s, const sm_mesh *m, const sm_pspec *spec);
/* Sets m->devices to the service's default order over the alive workers of
 * w[0..n) (process-index order: whole workers first, then the first devices
 * of the next worker, sm_mesh_default_devices). SM_EINVAL when the alive
 * workers have fewer devices than the mesh. */
sm_err sm_cjobs_default_devices(sm_mesh *m, const sm_worker_info *w, int n, char *err,
                                size_t errlen);
/* The workers holding the devices of m, each with its mesh devices in its
 * own order: *peers (malloc'd, one per worker, in process-index order) and
 * wids (worker ids, malloc'd). A device of a lost worker is SM_EUNAVAILABLE
 * naming both; a device no worker has is SM_EINVAL. */
sm_err sm_cjobs_peers(const sm_mesh *m, const sm_worker_info *w, int n, sm_svc_peer **peers,
                      uint32_t **wids, int *npeers, char *err, size_t errlen);

#endif
