/* jobs_restore: the job table's records of earlier coordinator runs, from
 * the registry's state dir (see jobs_int.h). Kept apart from jobs.c so that
 * the job manager proper needs only its three calls to
 * sm_registry_job_save / sm_cjobs_restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_int.h"
#include "sm_log.h"
#include "sm_time.h"

sm_err sm_cjobs_restore(sm_cjobs *j, char *err, size_t errlen)
{
    sm_reg_job *recs = NULL;
    int n = 0, failed = 0;
    uint64_t last = 0;
    sm_err e = sm_registry_jobs_restore(j->coord->reg, &last, &recs, &n, err, errlen);
    if (e)
        return e;
    pthread_mutex_lock(&j->mu);
    if (last > j->last_id)
        j->last_id = last;
    int64_t now = sm_time_mono_us();
    for (int k = 0; k < n && !e; k++) {
        sm_job *job = calloc(1, sizeof *job);
        if (!job || sm_htab_reserve(&j->table, j->table.n + 1)) {
            free(job);
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory restoring jobs' records");
            break;
        }
        job->id = recs[k].id;
        job->state = (sm_job_state)recs[k].state;
        snprintf(job->error, sizeof job->error, "%s", recs[k].error);
        snprintf(job->tenant, sizeof job->tenant, "%s", recs[k].tenant);
        if (job->state == SM_JOB_QUEUED || job->state == SM_JOB_RUNNING) {
            snprintf(job->error, sizeof job->error,
                     "job %llu failed: the coordinator restarted while it was %s",
                     (unsigned long long)job->id,
                     job->state == SM_JOB_QUEUED ? "waiting to start" : "running");
            job->state = SM_JOB_FAILED;
            sm_registry_job_save(j->coord->reg, job->id, (int)job->state, job->error, job->tenant);
            failed++;
        }
        job->submit_us = job->start_us = job->end_us = now;
        sm_htab_put(&j->table, sm_htab_hash_u64(job->id), job);
        sm_cjobs_keep_locked(j, job);
    }
    pthread_mutex_unlock(&j->mu);
    if (n)
        SM_INFO("%d jobs' records restored (%d failed by the restart); next job id %llu", n, failed,
                (unsigned long long)(j->last_id + 1));
    free(recs);
    return e;
}
