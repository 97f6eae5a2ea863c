/* jobs_int: the job manager's records, shared by jobs.c (table, handlers,
 * runner pool) and jobs_run.c (running one job). Not for use outside the
 * job manager. */
#ifndef SM_SERVER_JOBS_INT_H
#define SM_SERVER_JOBS_INT_H

#include <pthread.h>

#include "jobs.h"
#include "sm_tenant.h"
#include "sm_htab.h"
#include "sm_log.h"

#define SM_JOBS_ERR_MAX 1024

typedef struct sm_job {
    uint64_t id;
    /* Guarded by sm_cjobs.mu: */
    sm_job_state state;
    char error[SM_JOBS_ERR_MAX];
    int cancel;               /* cancel requested while running */
    int64_t start_us, end_us; /* 0 until started / ended */
    sm_array_info *out_infos; /* [nout] when DONE (owned) */
    struct sm_job *qnext;     /* run queue link */
    struct sm_job *enext;     /* ended list link (newer end) */
    int refs;                 /* holders besides the table: the run queue, a runner, handlers */
    int dropped;              /* out of the table; the last holder frees it */
    int saved;                /* its record is in the registry (sm_registry_job_save): a job run
                               * inside its submit call gets one when it ends, or when a call
                               * names it first */
    /* Set at submit, read-only afterwards: */
    sm_program *prog; /* owned; mesh with its devices (has_devices = 1); freed by the
                         runner once the job ended (NULL) */
    int nargs;
    sm_array_id *args;      /* [nargs] resolved input ids */
    unsigned char *reshard; /* [nargs] the input must be resharded first */
    int nout;
    sm_array_id *outs; /* [nout] output arrays (PENDING until DONE) */
    int npeers;
    sm_svc_peer *peers;   /* [npeers] */
    uint32_t *wids;       /* [npeers] worker ids */
    uint32_t deadline_ms; /* 0: none */
    int64_t submit_us;
    char request_id[SM_LOG_RID_LEN]; /* the submit's: its runner's log lines and calls carry it */
    char tenant[SM_TENANT_MAX];      /* the submit's: only it sees the job; its outputs are its */
} sm_job;

/* What ShmProbe proved about two workers (ids and addresses, a before b). */
typedef struct {
    uint32_t a, b;
    char addr_a[SM_ADDR_MAX], addr_b[SM_ADDR_MAX];
    int shm;       /* 1: they share memory */
    int64_t at_us; /* when proven; a failed proof is tried again after a while */
} sm_cjobs_pair;

struct sm_cjobs {
    sm_coord *coord; /* borrowed */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a job's state changed (CLOCK_MONOTONIC) */
    pthread_cond_t work;    /* the queue got a job, or stopping (CLOCK_MONOTONIC) */
    /* The table: queued, running and kept ended jobs by id (items are
     * sm_job *, hashed with sm_htab_hash_u64(id)). */
    sm_htab table;
    uint64_t last_id;                /* ids 1..last_id were handed out */
    sm_job *ended_head, *ended_tail; /* kept ended jobs, oldest end first */
    int nended;
    int64_t keep_us;
    int keep_max;
    sm_job *qhead, *qtail;
    int nqueued;   /* jobs in state QUEUED (the queue also holds cancelled ones) */
    int queue_max; /* the most that may be QUEUED */
    int max_ops;   /* the most ops a submitted program may have; 0: none */
    int stopping;
    int nthreads; /* runner threads, also the bound on jobs running at once */
    int running;  /* jobs running: on runner threads and on handler threads */
    pthread_t *threads;
    sm_rpc_chans *chans;  /* to the workers */
    pthread_mutex_t chmu; /* guards pairs */
    sm_cjobs_pair *pairs;
    int npairs, cappairs;
    /* for the metrics (sm_cjobs_stats_get), under mu */
    uint64_t ended_total[SM_JOB_CANCELLED + 1]; /* jobs ended, by state */
    uint64_t run_hist[SM_CJOBS_NBUCKETS + 1];   /* run times: per bucket, then +Inf */
    double run_sum_s;
};

/* The channel to a worker (created on first use, owned by j). */
sm_rpc_channel *sm_cjobs_channel(sm_cjobs *j, const char *address, char *err, size_t errlen);
/* Sends CancelJob for job to every worker of its mesh but peers[skip]
 * (skip -1: all); errors are logged. */
void sm_cjobs_cancel_workers(sm_cjobs *j, const sm_job *job, int skip);
/* Deletes arrays ids[0..n) (0 ids skipped) from the registry and frees
 * their shards on the workers. */
void sm_cjobs_delete_arrays(sm_cjobs *j, const sm_array_id *ids, int n);
/* Runs a job whose state is RUNNING to its end (DONE, FAILED or
 * CANCELLED), on the calling thread, which holds a reference to it. */
void sm_cjobs_run(sm_cjobs *j, sm_job *job);
/* Ends job with state and msg (under mu: the caller holds it) and adds it
 * to the ended list; records past the retention are dropped, job too
 * (freed unless someone holds a reference to it). */
void sm_cjobs_end_locked(sm_cjobs *j, sm_job *job, sm_job_state state, const char *msg);
/* sm_cjobs_end_locked with no message, for a job whose record the caller
 * saved already (sm_registry_job_done). */
void sm_cjobs_end_saved_locked(sm_cjobs *j, sm_job *job, sm_job_state state);
/* Appends the ended job to the kept ones (the newest last); j->mu held. */
void sm_cjobs_keep_locked(sm_cjobs *j, sm_job *job);

/* Takes back the jobs' records of the coordinator's earlier runs (state
 * dir): ended jobs keep their state and error (not their outputs' details);
 * jobs that were queued or running end FAILED, "the coordinator restarted".
 * New ids continue after the largest handed out. Call before the runners
 * start (jobs_restore.c). */
sm_err sm_cjobs_restore(sm_cjobs *j, char *err, size_t errlen);

#endif
