/* jobs: the job table, the Coordinator's job handlers and the runner pool
 * (see jobs.h). Running one job is jobs_run.c; the pure checks are
 * jobs_check.c. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs_int.h"
#include "relay.h"
#include "sm_log.h"
#include "sm_lower.h"
#include "sm_rpc.h"
#include "sm_time.h"

/* Control calls to workers (CancelJob, FreeArray). */
#define SM_JOBS_CTL_MS 5000
/* Pending outputs of a job without a deadline fail after this long. */
#define SM_JOBS_OUTPUT_DEADLINE_MS 86400000u

/* ---- workers ------------------------------------------------------------------------ */

sm_rpc_channel *sm_cjobs_channel(sm_cjobs *j, const char *address, char *err, size_t errlen)
{
    sm_rpc_channel *ch = NULL;
    sm_rpc_chans_get(j->chans, address, &ch, err, errlen);
    return ch;
}

void sm_cjobs_cancel_workers(sm_cjobs *j, const sm_job *job, int skip)
{
    char err[512];
    for (int k = 0; k < job->npeers; k++) {
        if (k == skip)
            continue;
        sm_rpc_channel *ch = sm_cjobs_channel(j, job->peers[k].address, err, sizeof err);
        if (!ch ||
            sm_svc_worker_cancel_job(ch, SM_JOBS_CTL_MS, (sm_job_id){job->id}, err, sizeof err))
            SM_DEBUG("job %llu: cancel on %s: %s", (unsigned long long)job->id,
                     job->peers[k].address, err);
    }
}

void sm_cjobs_delete_arrays(sm_cjobs *j, const sm_array_id *ids, int n)
{
    char err[512];
    for (int k = 0; k < n; k++) {
        if (!ids[k].v)
            continue;
        sm_reg_free *f = NULL;
        int nf = 0;
        if (sm_registry_array_delete(j->coord->reg, (sm_array_ref){ids[k], NULL}, &f, &nf, err,
                                     sizeof err) == SM_OK)
            sm_relay_free(f, nf, SM_JOBS_CTL_MS);
        free(f);
    }
}

/* ---- job records --------------------------------------------------------------------- */

static void job_destroy(sm_job *job)
{
    if (!job)
        return;
    sm_program_free(job->prog);
    free(job->args);
    free(job->reshard);
    free(job->outs);
    free(job->peers);
    free(job->wids);
    if (job->out_infos)
        sm_array_info_list_free(job->out_infos, job->nout);
    free(job);
}

/* ---- the table ------------------------------------------------------------------------- */

static int job_has_id(const void *item, const void *key)
{
    return ((const sm_job *)item)->id == *(const uint64_t *)key;
}

/* The job with this id in the table, or NULL (mu held). */
static sm_job *table_find(const sm_cjobs *j, uint64_t id)
{
    return sm_htab_find(&j->table, sm_htab_hash_u64(id), job_has_id, &id);
}

/* Drops one reference to job (mu held); frees a dropped job's last one. */
static void job_put_locked(sm_job *job)
{
    if (--job->refs == 0 && job->dropped)
        job_destroy(job);
}

static void job_put(sm_cjobs *j, sm_job *job)
{
    pthread_mutex_lock(&j->mu);
    job_put_locked(job);
    pthread_mutex_unlock(&j->mu);
}

/* Drops the records of ended jobs past the retention, oldest end first
 * (mu held). */
static void table_sweep_locked(sm_cjobs *j, int64_t now)
{
    sm_job *job;
    while ((job = j->ended_head) && (j->nended > j->keep_max || now - job->end_us >= j->keep_us)) {
        j->ended_head = job->enext;
        if (!j->ended_head)
            j->ended_tail = NULL;
        j->nended--;
        job->enext = NULL;
        /* the table gives its slots back after a burst of jobs */
        sm_htab_del(&j->table, sm_htab_hash_u64(job->id), job);
        job->dropped = 1;
        if (!job->refs)
            job_destroy(job);
    }
}

static const double sm_cjobs_buckets[SM_CJOBS_NBUCKETS] = {0.001, 0.005, 0.025, 0.1,
                                                           0.5,   2.5,   10,    60};

void sm_cjobs_stats_get(sm_cjobs *j, sm_cjobs_stats *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->buckets_s, sm_cjobs_buckets, sizeof out->buckets_s);
    pthread_mutex_lock(&j->mu);
    out->queued = j->nqueued;
    out->running = j->running;
    out->submitted = j->last_id;
    memcpy(out->ended, j->ended_total, sizeof out->ended);
    memcpy(out->run_hist, j->run_hist, sizeof out->run_hist);
    out->run_sum_s = j->run_sum_s;
    pthread_mutex_unlock(&j->mu);
}

/* sm_cjobs_end_locked; save: record the end in the registry too. */
static void end_locked(sm_cjobs *j, sm_job *job, sm_job_state state, const char *msg, int save)
{
    if (job->state == SM_JOB_QUEUED)
        j->nqueued--;
    job->state = state;
    snprintf(job->error, sizeof job->error, "%s", msg ? msg : "");
    job->end_us = sm_time_mono_us();
    if (!job->start_us)
        job->start_us = job->end_us;
    if (save)
        sm_registry_job_save(j->coord->reg, job->id, (int)state, job->error, job->tenant);
    job->saved = 1;
    if ((int)state >= 0 && state <= SM_JOB_CANCELLED)
        j->ended_total[state]++;
    double run_s = (double)(job->end_us - job->start_us) * 1e-6;
    int b = 0;
    while (b < SM_CJOBS_NBUCKETS && run_s > sm_cjobs_buckets[b])
        b++;
    j->run_hist[b]++;
    j->run_sum_s += run_s;
    sm_cjobs_keep_locked(j, job);
    pthread_cond_broadcast(&j->changed);
    /* Per job: DEBUG for a job that went well, so a stream of small jobs
     * does not pay a log line each (failures stay at INFO). */
    if (state == SM_JOB_DONE)
        SM_DEBUG("job %llu %s", (unsigned long long)job->id, sm_job_state_name(state));
    else
        SM_INFO("job %llu %s%s%s", (unsigned long long)job->id, sm_job_state_name(state),
                job->error[0] ? ": " : "", job->error);
    table_sweep_locked(j, job->end_us);
}

void sm_cjobs_end_locked(sm_cjobs *j, sm_job *job, sm_job_state state, const char *msg)
{
    end_locked(j, job, state, msg, 1);
}

void sm_cjobs_end_saved_locked(sm_cjobs *j, sm_job *job, sm_job_state state)
{
    end_locked(j, job, state, NULL, 0);
}

/* The job with this id in *out, with a reference the caller drops with
 * job_put (mu held). SM_ENOTFOUND for an id never handed out, and for a
 * job whose record was dropped, saying so. */
static sm_err job_get_locked(sm_cjobs *j, sm_job_id id, sm_job **out, char *err, size_t errlen)
{
    table_sweep_locked(j, sm_time_mono_us());
    *out = table_find(j, id.v);
    if (*out && !sm_tenant_sees((*out)->tenant)) { /* another tenant's: not there */
        *out = NULL;
        return sm_fail(err, errlen, SM_ENOTFOUND, "job %llu does not exist",
                       (unsigned long long)id.v);
    }
    if (*out && !(*out)->saved) { /* named before it ended: it must survive a restart now */
        sm_registry_job_save(j->coord->reg, (*out)->id, SM_JOB_QUEUED, "", (*out)->tenant);
        (*out)->saved = 1;
    }
    if (*out) {
        (*out)->refs++;
        return SM_OK;
    }
    if (id.v < 1 || id.v > j->last_id)
        return sm_fail(err, errlen, SM_ENOTFOUND, "job %llu does not exist",
                       (unsigned long long)id.v);
    int64_t ms = j->keep_us / 1000;
    return sm_fail(err, errlen, SM_ENOTFOUND,
                   "job %llu ended and its record was dropped: the coordinator keeps an ended "
                   "job's record for %lld %s, and only the newest %d",
                   (unsigned long long)id.v, (long long)(ms % 1000 ? ms : ms / 1000),
                   ms % 1000 ? "ms" : "s", j->keep_max);
}

/* A deep copy of an array info (shards malloc'd). */
static sm_err info_copy(const sm_array_info *in, sm_array_info *out)
{
    *out = *in;
    out->shards = NULL;
    out->copies = NULL;
    out->ncopies = 0; /* a job's outputs have no copies */
    if (in->nshards > 0) {
        out->shards = malloc((size_t)in->nshards * sizeof *out->shards);
        if (!out->shards) {
            out->nshards = 0;
            return SM_ENOMEM;
        }
        memcpy(out->shards, in->shards, (size_t)in->nshards * sizeof *out->shards);
    }
    return SM_OK;
}

/* Fills out from job (mu NOT held: takes it; describes outputs after). */
static sm_err job_describe(sm_cjobs *j, sm_job *job, sm_job_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&j->mu);
    int64_t now = sm_time_mono_us();
    out->id.v = job->id;
    out->state = job->state;
    snprintf(out->error, sizeof out->error, "%s", job->error);
    out->queued_us = (job->start_us ? job->start_us : now) - job->submit_us;
    out->run_us = job->start_us ? (job->end_us ? job->end_us : now) - job->start_us : 0;
    int done = job->state == SM_JOB_DONE && job->out_infos;
    sm_array_info *saved = NULL;
    int n = job->nout;
    if (done && (saved = calloc((size_t)(n > 0 ? n : 1), sizeof *saved)))
        for (int k = 0; k < n; k++)
            info_copy(&job->out_infos[k], &saved[k]);
    pthread_mutex_unlock(&j->mu);
    if (!done)
        return SM_OK;
    if (!saved)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory describing job %llu",
                       (unsigned long long)job->id);
    /* The current state of each output; the one recorded at the end if it
     * was deleted since. */
    for (int k = 0; k < n; k++) {
        sm_array_info now_info;
        char tmp[256];
        if (sm_registry_array_describe(j->coord->reg, (sm_array_ref){job->outs[k], NULL}, &now_info,
                                       tmp, sizeof tmp) == SM_OK) {
            sm_array_info_free(&saved[k]);
            saved[k] = now_info;
        } else {
            snprintf(saved[k].error, sizeof saved[k].error, "%s", tmp);
        }
    }
    out->outputs = saved;
    out->noutputs = n;
    return SM_OK;
}

/* ---- submit -------------------------------------------------------------------------- */

/* Checks req against the registry and fills job (everything but the id);
 * creates the output arrays. On failure nothing is left in the registry. */
static sm_err job_prepare(sm_cjobs *j, const sm_svc_submit_req *req, sm_job *job, char *err,
                          size_t errlen)
{
    sm_registry *reg = j->coord->reg;
    sm_program *p = job->prog;
    sm_worker_info *workers = NULL;
    int nw = 0;
    char tmp[SM_JOBS_ERR_MAX];
    sm_err e;
    if (j->max_ops > 0 && p->nops > j->max_ops)
        return sm_fail(err, errlen, SM_ERESOURCE,
                       "program '%s' has %d ops, more than the %d this coordinator takes "
                       "(--max-program-ops)",
                       p->name ? p->name : "", p->nops, j->max_ops);
    if ((e = sm_program_verify(p, req->check_vma, err, errlen)))
        return e;
    if (p->kind == SM_PROG_JIT) { /* workers run the shard_map program it lowers to */
        sm_program *l = NULL;
        if ((e = sm_lower(p, NULL, &l, err, errlen)))
            return e;
        sm_program_free(p);
        job->prog = p = l;
    }
    if (req->nargs != p->nparams)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the job has %d arguments but program '%s' takes %d parameters", req->nargs,
                       p->name, p->nparams);
    if ((e = sm_cjobs_check_out_names(p, req->nout_names, req->out_names, err, errlen)))
        return e;
    for (int k = 0; k < req->nout_names; k++) {
        const char *s = req->out_names[k];
        sm_array_info a;
        if (s && *s &&
            sm_registry_array_describe(reg, (sm_array_ref){{0}, s}, &a, tmp, sizeof tmp) == SM_OK) {
            sm_array_info_free(&a);
            return sm_fail(err, errlen, SM_EEXIST,
                           "output %d cannot be named '%s': an array of that name already exists",
                           k, s);
        }
    }
    /* The mesh: the program's devices, or the default order. */
    if ((e = sm_registry_workers_list(reg, sm_time_mono_ms(), &workers, &nw, err, errlen)))
        return e;
    if (!p->has_devices && (e = sm_cjobs_default_devices(&p->mesh, workers, nw, err, errlen)))
        goto out;
    p->has_devices = 1;
    if ((e = sm_cjobs_peers(&p->mesh, workers, nw, &job->peers, &job->wids, &job->npeers, err,
                            errlen)))
        goto out;
    /* The arguments. */
    job->nargs = p->nparams;
    job->args = calloc((size_t)(p->nparams ? p->nparams : 1), sizeof *job->args);
    job->reshard = calloc((size_t)(p->nparams ? p->nparams : 1), 1);
    job->nout = p->nreturns;
    job->outs = calloc((size_t)(p->nreturns ? p->nreturns : 1), sizeof *job->outs);
    if (!job->args || !job->reshard || !job->outs) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory submitting a job");
        goto out;
    }
    for (int k = 0; k < p->nparams; k++) {
        sm_array_info a;
        if ((e = sm_registry_array_describe(reg, req->args[k], &a, tmp, sizeof tmp))) {
            e = sm_fail(err, errlen, e, "argument %d for parameter '%s': %s", k, p->params[k].name,
                        tmp);
            goto out;
        }
        e = sm_cjobs_check_arg(p, k, &a, err, errlen);
        job->args[k] = a.id;
        job->reshard[k] = !sm_cjobs_sharding_same(&a.sharding, &p->mesh, &p->params[k].spec);
        if (!e && job->reshard[k] && a.sharding.spec.nunreduced) {
            char have[300], want[300];
            e = sm_fail(err, errlen, SM_EINVAL,
                        "argument %d for parameter '%s' is unreduced (%s) and cannot be resharded "
                        "to the parameter's %s: take it with the same mesh and sharding",
                        k, p->params[k].name, sm_pspec_format(&a.sharding.spec, have, sizeof have),
                        sm_pspec_format(&p->params[k].spec, want, sizeof want));
        }
        sm_array_info_free(&a);
        if (e)
            goto out;
    }
    /* The outputs, pending until the job is done, on the program's mesh
     * with its axis types (a jit's lowered program keeps them). */
    for (int k = 0; k < p->nreturns; k++) {
        sm_svc_create_array_req cr;
        sm_svc_create_array_reply rep;
        memset(&cr, 0, sizeof cr);
        memset(&rep, 0, sizeof rep);
        cr.name = k < req->nout_names && req->out_names[k] ? req->out_names[k] : "";
        cr.dtype = p->values[p->returns[k]].dtype;
        cr.has_shape = 1;
        cr.shape = p->out_global[k];
        cr.sharding.mesh = &p->mesh;
        cr.sharding.spec = p->out_specs[k];
        cr.kind = SM_PUT_SHARDS;
        cr.job_output = 1;
        cr.deadline_ms = req->deadline_ms && req->deadline_ms < SM_JOBS_OUTPUT_DEADLINE_MS
                             ? req->deadline_ms + 60000
                             : SM_JOBS_OUTPUT_DEADLINE_MS;
        if ((e = sm_registry_array_create(reg, &cr, sm_time_mono_ms(), &rep, tmp, sizeof tmp))) {
            e = sm_fail(err, errlen, e, "output %d: %s", k, tmp);
            sm_cjobs_delete_arrays(j, job->outs, k);
            memset(job->outs, 0, (size_t)k * sizeof *job->outs);
            goto out;
        }
        job->outs[k] = rep.array.id;
        sm_svc_create_array_reply_free(&rep);
    }
    job->deadline_ms = req->deadline_ms;
out:
    free(workers);
    return e;
}

/* 1 if job may run on the thread that submits it: nothing to reshard and a
 * light program, so that its run is about one RunJob round trip. (Such a
 * submit answers when the job ended even after its wait_ms: only a worker
 * that stops answering without closing its connection makes that long.) */
static int job_light(const sm_job *job)
{
    for (int k = 0; k < job->nargs; k++)
        if (job->reshard[k])
            return 0;
    return sm_program_light(job->prog, SM_JOBS_LIGHT_BYTES);
}

/* Checks req, creates the job's outputs and queues it (takes req->program);
 * *out is the job, with a reference the caller drops with job_put. With here not NULL, a light job
 * (job_light) when no job waits and fewer than nthreads run is not queued
 * but marked RUNNING, and *here set: the caller runs it (sm_cjobs_run) and
 * then calls job_run_done. */
static sm_err job_enqueue(sm_cjobs *j, sm_svc_submit_req *req, sm_job **out, int *here, char *err,
                          size_t errlen)
{
    sm_job *job = calloc(1, sizeof *job);
    *out = NULL;
    if (!job) {
        sm_program_free(req->program);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory submitting a job");
    }
    job->prog = req->program; /* ours from here on */
    job->submit_us = sm_time_mono_us();
    job->state = SM_JOB_QUEUED;
    if (here)
        *here = 0;
    sm_err e = job_prepare(j, req, job, err, errlen);
    int light = !e && here && job_light(job);
    if (e) {
        job_destroy(job);
        return e;
    }
    snprintf(job->tenant, sizeof job->tenant, "%s", sm_tenant_current());
    sm_tenant_quota q = sm_tenants_quota(j->coord->tenants, job->tenant);
    pthread_mutex_lock(&j->mu);
    int queue = !(light && !j->qhead && j->running < j->nthreads), mine = 0;
    for (const sm_job *o = j->qhead; q.max_jobs > 0 && o; o = o->qnext)
        mine += !strcmp(o->tenant, job->tenant);
    if (j->stopping)
        e = sm_fail(err, errlen, SM_EUNAVAILABLE, "the coordinator is shutting down");
    else if (queue && q.max_jobs > 0 && mine >= q.max_jobs)
        e = sm_fail(err, errlen, SM_ERESOURCE,
                    "tenant %s already has %d jobs waiting to start, its quota (max-jobs in "
                    "--tokens); wait for some to end or cancel some, then submit again",
                    job->tenant, mine);
    else if (queue && j->nqueued >= j->queue_max)
        e = sm_fail(err, errlen, SM_ERESOURCE,
                    "%d jobs already wait to start, the most this coordinator queues "
                    "(--job-queue-max); wait for some to end or cancel some, then submit again",
                    j->nqueued);
    else if (sm_htab_reserve(&j->table, j->table.n + 1))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory submitting a job");
    if (!e) {
        job->id = ++j->last_id;
        snprintf(job->request_id, sizeof job->request_id, "%s", sm_log_request_id());
        sm_htab_put(&j->table, sm_htab_hash_u64(job->id), job);
        /* A job run inside its submit call (queue == 0) is recorded when it
         * ends: no caller knows its id before (one that names it first
         * has it recorded then, job_get_locked), so its round trip pays for
         * one transaction instead of two. Its id must be kept without a
         * record, though. */
        if (queue || !sm_registry_job_id_kept(j->coord->reg, job->id)) {
            sm_registry_job_save(j->coord->reg, job->id, SM_JOB_QUEUED, "", job->tenant);
            job->saved = 1;
        }
        job->refs = 1; /* the caller's */
        *out = job;
    }
    if (!e && !queue) {
        *here = 1;
        j->running++;
        job->state = SM_JOB_RUNNING;
        job->start_us = sm_time_mono_us();
        pthread_cond_broadcast(&j->changed);
        SM_DEBUG("job %llu runs: program '%s' on %d workers", (unsigned long long)job->id,
                 job->prog->name, job->npeers);
    } else if (!e) {
        job->refs++; /* the run queue's, handed to the runner that takes it */
        j->nqueued++;
        if (j->qtail)
            j->qtail->qnext = job;
        else
            j->qhead = job;
        j->qtail = job;
        pthread_cond_signal(&j->work);
        SM_DEBUG("job %llu queued: program '%s' on %d workers", (unsigned long long)job->id,
                 job->prog->name, job->npeers);
    }
    pthread_mutex_unlock(&j->mu);
    if (e) {
        sm_cjobs_delete_arrays(j, job->outs, job->nout);
        job_destroy(job);
    }
    return e;
}

/* A job run by the caller of job_enqueue ended: its slot is free. */
static void job_run_done(sm_cjobs *j)
{
    pthread_mutex_lock(&j->mu);
    j->running--;
    if (j->qhead)
        pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->mu);
}

static sm_err j_submit(void *user, sm_svc_submit_req *req, sm_job_id *out, char *err, size_t errlen)
{
    sm_job *job;
    sm_err e = job_enqueue(user, req, &job, NULL, err, errlen);
    out->v = e ? 0 : job->id;
    if (!e)
        job_put(user, job);
    return e;
}

/* ---- wait / get / cancel ----------------------------------------------------------------- */

static int ended(const sm_job *job)
{
    return job->state == SM_JOB_DONE || job->state == SM_JOB_FAILED ||
           job->state == SM_JOB_CANCELLED;
}

/* Waits (mu held) until job ended, the manager stops or wait_ms passed. */
void sm_cjobs_keep_locked(sm_cjobs *j, sm_job *job)
{
    if (j->ended_tail)
        j->ended_tail->enext = job;
    else
        j->ended_head = job;
    j->ended_tail = job;
    j->nended++;
}

static void wait_end_locked(sm_cjobs *j, sm_job *job, uint32_t wait_ms)
{
    if (!ended(job))
        sm_rpc_may_block(); /* the wait can be long */
    struct timespec until = sm_time_after_ms(CLOCK_MONOTONIC, wait_ms);
    while (!ended(job) && !j->stopping)
        if (pthread_cond_timedwait(&j->changed, &j->mu, &until) == ETIMEDOUT)
            break;
}

static sm_err j_wait(void *user, sm_job_id id, uint32_t wait_ms, sm_job_info *out, char *err,
                     size_t errlen)
{
    sm_cjobs *j = user;
    sm_job *job;
    pthread_mutex_lock(&j->mu);
    sm_err e = job_get_locked(j, id, &job, err, errlen);
    if (!e && wait_ms)
        wait_end_locked(j, job, wait_ms > SM_JOBS_MAX_WAIT_MS ? SM_JOBS_MAX_WAIT_MS : wait_ms);
    pthread_mutex_unlock(&j->mu);
    if (e)
        return e;
    e = job_describe(j, job, out, err, errlen);
    job_put(j, job);
    return e;
}

static sm_err j_submit_wait(void *user, sm_svc_submit_req *req, sm_job_info *out, char *err,
                            size_t errlen)
{
    sm_cjobs *j = user;
    sm_job *job;
    int here = 0;
    memset(out, 0, sizeof *out);
    sm_err e = job_enqueue(j, req, &job, &here, err, errlen);
    if (e)
        return e;
    if (here) { /* no hand-off to a runner thread and back */
        sm_cjobs_run(j, job);
        job_run_done(j);
    } else {
        uint32_t wait_ms = req->wait_ms > SM_JOBS_MAX_WAIT_MS ? SM_JOBS_MAX_WAIT_MS : req->wait_ms;
        pthread_mutex_lock(&j->mu);
        wait_end_locked(j, job, wait_ms);
        pthread_mutex_unlock(&j->mu);
    }
    char tmp[256];
    if (job_describe(j, job, out, tmp, sizeof tmp) != SM_OK) {
        /* The job exists: the caller must learn its id, and asks again. */
        SM_WARN("job %llu: %s", (unsigned long long)job->id, tmp);
        memset(out, 0, sizeof *out);
        out->id.v = job->id;
        out->state = SM_JOB_RUNNING;
    }
    job_put(j, job);
    return SM_OK;
}

static sm_err j_get(void *user, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    return j_wait(user, id, 0, out, err, errlen);
}

static sm_err j_cancel(void *user, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    sm_cjobs *j = user;
    int drop = 0, running = 0;
    char msg[128];
    sm_job *job;
    pthread_mutex_lock(&j->mu);
    sm_err e = job_get_locked(j, id, &job, err, errlen);
    if (e) {
        pthread_mutex_unlock(&j->mu);
        return e;
    }
    if (job->state == SM_JOB_QUEUED) {
        snprintf(msg, sizeof msg, "job %llu was cancelled before it started",
                 (unsigned long long)job->id);
        sm_cjobs_end_locked(j, job, SM_JOB_CANCELLED, msg);
        drop = 1; /* the runner skips it when it comes up */
    } else if (job->state == SM_JOB_RUNNING && !job->cancel) {
        job->cancel = 1;
        running = 1;
    }
    pthread_mutex_unlock(&j->mu);
    if (drop)
        sm_cjobs_delete_arrays(j, job->outs, job->nout);
    if (running) {
        SM_INFO("job %llu: cancelling on %d workers", (unsigned long long)job->id, job->npeers);
        sm_cjobs_cancel_workers(j, job, -1);
        pthread_mutex_lock(&j->mu);
        wait_end_locked(j, job, SM_JOBS_CTL_MS);
        pthread_mutex_unlock(&j->mu);
    }
    e = job_describe(j, job, out, err, errlen);
    job_put(j, job);
    return e;
}

static const sm_svc_coord_job_ops job_ops = {
    .submit = j_submit,
    .submit_wait = j_submit_wait,
    .wait = j_wait,
    .get = j_get,
    .cancel = j_cancel,
};

const sm_svc_coord_job_ops *sm_cjobs_ops(void)
{
    return &job_ops;
}

/* ---- runner pool ----------------------------------------------------------------------- */

/* Waits for work (mu held); while ended records are kept, wakes when the
 * oldest one's time is up and drops it, so that an idle coordinator gives
 * their memory back too. */
static void runner_wait_locked(sm_cjobs *j)
{
    if (!j->ended_head) {
        pthread_cond_wait(&j->work, &j->mu);
        return;
    }
    int64_t left_us = j->ended_head->end_us + j->keep_us - sm_time_mono_us();
    if (left_us > 0) {
        int64_t ms = left_us / 1000 + 1;
        struct timespec until =
            sm_time_after_ms(CLOCK_MONOTONIC, ms > 3600000 ? 3600000u : (uint32_t)ms);
        if (pthread_cond_timedwait(&j->work, &j->mu, &until) != ETIMEDOUT)
            return;
    }
    table_sweep_locked(j, sm_time_mono_us());
}

static void *runner_main(void *arg)
{
    sm_cjobs *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stopping && (!j->qhead || j->running >= j->nthreads))
            runner_wait_locked(j);
        if (j->stopping)
            break;
        sm_job *job = j->qhead;
        j->qhead = job->qnext;
        if (!j->qhead)
            j->qtail = NULL;
        job->qnext = NULL;
        if (job->state != SM_JOB_QUEUED) { /* cancelled while queued */
            job_put_locked(job);
            continue;
        }
        job->state = SM_JOB_RUNNING;
        job->start_us = sm_time_mono_us();
        j->nqueued--;
        j->running++;
        pthread_cond_broadcast(&j->changed);
        pthread_mutex_unlock(&j->mu);
        sm_log_set_request_id(job->request_id);
        sm_tenant_set(job->tenant); /* its outputs are its tenant's */
        sm_cjobs_run(j, job);
        sm_tenant_set(NULL);
        sm_log_set_request_id(NULL);
        pthread_mutex_lock(&j->mu);
        j->running--;
        job_put_locked(job); /* the queue's, taken over */
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

sm_cjobs_config sm_cjobs_config_default(int nthreads)
{
    return (sm_cjobs_config){nthreads, (int64_t)SM_JOBS_KEEP_S * 1000, SM_JOBS_KEEP_MAX,
                             SM_JOBS_QUEUE_MAX, SM_JOBS_MAX_OPS};
}

sm_err sm_cjobs_create(sm_coord *coord, const sm_cjobs_config *cfg, sm_cjobs **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    int nthreads = cfg->nthreads;
    if (nthreads < 1 || nthreads > 16)
        return sm_fail(err, errlen, SM_EINVAL, "a job manager has 1 to 16 runner threads, not %d",
                       nthreads);
    if (cfg->keep_ms < 0 || cfg->keep_ms > INT64_MAX / 1000 || cfg->keep_max < 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "ended jobs are kept for 0 ms or more and 0 records or more, not %lld ms "
                       "and %d records",
                       (long long)cfg->keep_ms, cfg->keep_max);
    if (cfg->queue_max < 1)
        return sm_fail(err, errlen, SM_EINVAL,
                       "at least 1 job must be allowed to wait to start, not %d", cfg->queue_max);
    sm_cjobs *j = calloc(1, sizeof *j);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    sm_rpc_chans *chans = sm_rpc_chans_create(coord->token, coord->tls, 0, 0);
    if (!j || !th || !chans) {
        free(j);
        free(th);
        sm_rpc_chans_free(chans);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating the job manager");
    }
    j->coord = coord;
    j->chans = chans;
    j->threads = th;
    j->keep_us = cfg->keep_ms * 1000;
    j->keep_max = cfg->keep_max;
    j->queue_max = cfg->queue_max;
    j->max_ops = cfg->max_ops;
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->chmu, NULL);
    sm_time_cond_init(&j->changed);
    sm_time_cond_init(&j->work);
    sm_err e = sm_cjobs_restore(j, err, errlen);
    if (e) {
        sm_cjobs_free(j);
        return e;
    }
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&th[i], NULL, runner_main, j) != 0) {
            sm_cjobs_free(j);
            return sm_fail(err, errlen, SM_ERESOURCE, "cannot start job runner thread %d", i);
        }
        j->nthreads++;
    }
    *out = j;
    return SM_OK;
}

void sm_cjobs_stop(sm_cjobs *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    if (j->stopping) {
        pthread_mutex_unlock(&j->mu);
        return;
    }
    j->stopping = 1;
    /* Queued jobs end here and running ones are told to cancel, each held
     * (a queued one by the queue's reference) until its outputs are
     * deleted or its workers told. */
    sm_job **held = calloc(j->table.n + 1, sizeof *held);
    int nheld = 0, nqueued;
    for (sm_job *job = j->qhead, *next; job; job = next) {
        next = job->qnext;
        job->qnext = NULL;
        if (job->state == SM_JOB_QUEUED) {
            sm_cjobs_end_locked(j, job, SM_JOB_CANCELLED, "the coordinator shut down");
            if (held) {
                held[nheld++] = job;
                continue;
            }
        }
        job_put_locked(job);
    }
    j->qhead = j->qtail = NULL;
    nqueued = nheld;
    for (size_t i = 0; i < j->table.cap; i++) { /* nothing leaves the table here */
        sm_job *job = j->table.slots[i].item;
        if (job && job->state == SM_JOB_RUNNING && !job->cancel) {
            job->cancel = 1;
            if (held) {
                job->refs++;
                held[nheld++] = job;
            }
        }
    }
    pthread_cond_broadcast(&j->work);
    pthread_cond_broadcast(&j->changed);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < nheld; i++) {
        if (i < nqueued)
            sm_cjobs_delete_arrays(j, held[i]->outs, held[i]->nout);
        else
            sm_cjobs_cancel_workers(j, held[i], -1);
    }
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < nheld; i++)
        job_put_locked(held[i]);
    pthread_mutex_unlock(&j->mu);
    free(held);
}

void sm_cjobs_free(sm_cjobs *j)
{
    if (!j)
        return;
    sm_cjobs_stop(j);
    for (int i = 0; i < j->nthreads; i++)
        pthread_join(j->threads[i], NULL);
    for (size_t i = 0; i < j->table.cap; i++)
        job_destroy(j->table.slots[i].item); /* every holder is gone: no dropped job is left */
    sm_rpc_chans_free(j->chans);
    free(j->pairs);
    sm_htab_free(&j->table);
    free(j->threads);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->chmu);
    pthread_cond_destroy(&j->changed);
    pthread_cond_destroy(&j->work);
    free(j);
}
