/* jobs_run: running one job on a runner thread (see jobs.h): reshard the
 * inputs that need it, RunJob on every worker of the mesh in parallel, then
 * mark the outputs READY, or drop them and report the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_int.h"
#include "relay.h"
#include "sm_log.h"

/* RunJob's own deadline when the job has none. */
#define SM_JOBS_NO_DEADLINE_MS 86400000

/* What the dispatch threads of one job share. */
typedef struct {
    sm_cjobs *j;
    sm_job *job;
    sm_svc_run_job_req req;
    int rpc_deadline_ms;
    pthread_mutex_t mu;
    int failed; /* a worker failed: the first one's error is below */
    int failed_worker;
    sm_err e;
    char msg[SM_JOBS_ERR_MAX];
} dispatch;

typedef struct {
    dispatch *d;
    int k; /* peer index */
    pthread_t th;
    int started;
} part;

static int cancelled(sm_cjobs *j, sm_job *job)
{
    pthread_mutex_lock(&j->mu);
    int c = job->cancel;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* Milliseconds left before the job's deadline (INT32_MAX-ish without). */
static int64_t time_left_ms(const sm_job *job)
{
    if (!job->deadline_ms)
        return SM_JOBS_NO_DEADLINE_MS;
    return (job->submit_us + (int64_t)job->deadline_ms * 1000 - sm_cjobs_now_us()) / 1000;
}

static void *part_main(void *arg)
{
    part *pt = arg;
    dispatch *d = pt->d;
    const sm_svc_peer *peer = &d->job->peers[pt->k];
    char err[SM_JOBS_ERR_MAX] = "";
    int64_t bytes = 0;
    sm_err e;
    sm_rpc_channel *ch = sm_cjobs_channel(d->j, peer->address, err, sizeof err);
    e = ch ? sm_svc_worker_run_job(ch, d->rpc_deadline_ms, &d->req, &bytes, err, sizeof err)
           : SM_EUNAVAILABLE;
    if (!e)
        return NULL;
    sm_relay_strip_status(err);
    int first = 0;
    pthread_mutex_lock(&d->mu);
    if (!d->failed) {
        d->failed = first = 1;
        d->failed_worker = pt->k;
        d->e = e;
        if (e == SM_EUNAVAILABLE)
            snprintf(d->msg, sizeof d->msg, "worker %u at %s is unavailable: %s",
                     d->job->wids[pt->k], peer->address, err);
        else if (e == SM_ETIMEOUT)
            snprintf(d->msg, sizeof d->msg, "job %llu exceeded its deadline of %u ms",
                     (unsigned long long)d->job->id, d->job->deadline_ms);
        else
            snprintf(d->msg, sizeof d->msg, "%s", err);
    }
    pthread_mutex_unlock(&d->mu);
    if (first) { /* the others may wait for this one in a collective */
        SM_INFO("job %llu failed on worker %u at %s: %s", (unsigned long long)d->job->id,
                d->job->wids[pt->k], peer->address, err);
        sm_cjobs_cancel_workers(d->j, d->job, pt->k);
    }
    return NULL;
}

/* RunJob on every worker of the mesh at once. */
static sm_err run_everywhere(sm_cjobs *j, sm_job *job, sm_array_id *inputs, char *msg,
                             size_t msglen)
{
    int64_t left = time_left_ms(job);
    if (left <= 0)
        return sm_fail(msg, msglen, SM_ETIMEOUT, "job %llu exceeded its deadline of %u ms",
                       (unsigned long long)job->id, job->deadline_ms);
    dispatch d;
    memset(&d, 0, sizeof d);
    d.j = j;
    d.job = job;
    d.req.job_id.v = job->id;
    d.req.program = job->prog;
    d.req.ninputs = job->nargs;
    d.req.inputs = inputs;
    d.req.noutputs = job->nout;
    d.req.outputs = job->outs;
    d.req.npeers = job->npeers;
    d.req.peers = job->peers;
    d.req.deadline_ms = job->deadline_ms ? (uint32_t)left : 0;
    d.rpc_deadline_ms = (int)left;
    pthread_mutex_init(&d.mu, NULL);
    part *parts = calloc((size_t)(job->npeers ? job->npeers : 1), sizeof *parts);
    if (!parts) {
        pthread_mutex_destroy(&d.mu);
        return sm_fail(msg, msglen, SM_ENOMEM, "out of memory starting job %llu",
                       (unsigned long long)job->id);
    }
    for (int k = 0; k < job->npeers; k++) {
        parts[k].d = &d;
        parts[k].k = k;
        parts[k].started = pthread_create(&parts[k].th, NULL, part_main, &parts[k]) == 0;
    }
    for (int k = 0; k < job->npeers; k++)
        if (!parts[k].started)
            part_main(&parts[k]); /* no thread: run it here (the others may then wait) */
    for (int k = 0; k < job->npeers; k++)
        if (parts[k].started)
            pthread_join(parts[k].th, NULL);
    free(parts);
    pthread_mutex_destroy(&d.mu);
    if (!d.failed)
        return SM_OK;
    snprintf(msg, msglen, "%s", d.msg);
    return d.e;
}

/* Reshards argument k into a temporary array laid out as its in_spec on
 * the job's mesh; *tmp is its id. */
static sm_err reshard_arg(sm_cjobs *j, sm_job *job, int k, sm_array_id *tmp, char *msg,
                          size_t msglen)
{
    const sm_ir_param *pa = &job->prog->params[k];
    sm_svc_reshard_req rr;
    memset(&rr, 0, sizeof rr);
    rr.array.id = job->args[k];
    rr.sharding.mesh = &job->prog->mesh;
    rr.sharding.spec = pa->spec;
    rr.name = NULL;
    int64_t left = time_left_ms(job);
    if (left <= 0)
        return sm_fail(msg, msglen, SM_ETIMEOUT, "job %llu exceeded its deadline of %u ms",
                       (unsigned long long)job->id, job->deadline_ms);
    rr.deadline_ms = job->deadline_ms ? (uint32_t)left : 0;
    sm_array_info info;
    memset(&info, 0, sizeof info);
    char err[SM_JOBS_ERR_MAX - 128] = "";
    sm_err e = sm_handlers_ops()->reshard(j->coord, &rr, &info, err, sizeof err);
    if (e) {
        char spec[128];
        return sm_fail(msg, msglen, e,
                       "argument %d for parameter '%s' could not be laid out as %s on the "
                       "job's mesh: %s",
                       k, pa->name, sm_pspec_format(&pa->spec, spec, sizeof spec), err);
    }
    *tmp = info.id;
    sm_array_info_free(&info);
    return SM_OK;
}

void sm_cjobs_run(sm_cjobs *j, sm_job *job)
{
    char msg[SM_JOBS_ERR_MAX] = "";
    sm_err e = SM_OK;
    sm_array_id *inputs = calloc((size_t)(job->nargs ? job->nargs : 1), sizeof *inputs);
    sm_array_id *temps = calloc((size_t)(job->nargs ? job->nargs : 1), sizeof *temps);
    sm_array_info *infos = calloc((size_t)(job->nout ? job->nout : 1), sizeof *infos);
    int ninfos = 0;
    if (!inputs || !temps || !infos)
        e = sm_fail(msg, sizeof msg, SM_ENOMEM, "out of memory running job %llu",
                    (unsigned long long)job->id);
    for (int k = 0; !e && k < job->nargs; k++) {
        inputs[k] = job->args[k];
        if (job->reshard[k] && !cancelled(j, job) &&
            !(e = reshard_arg(j, job, k, &temps[k], msg, sizeof msg)))
            inputs[k] = temps[k];
    }
    if (!e && !cancelled(j, job))
        e = run_everywhere(j, job, inputs, msg, sizeof msg);
    /* Every worker stored its blocks: the outputs are complete. */
    for (int k = 0; !e && !cancelled(j, job) && k < job->nout; k++) {
        char err[512];
        if ((e = sm_registry_reshard_end(j->coord->reg, job->outs[k], 1, &infos[k], err,
                                         sizeof err)))
            snprintf(msg, sizeof msg, "output %d: %s", k, err);
        else
            ninfos = k + 1;
    }
    int cancel = cancelled(j, job);
    if (e || cancel)
        sm_cjobs_delete_arrays(j, job->outs, job->nout);
    if (temps)
        sm_cjobs_delete_arrays(j, temps, job->nargs);
    pthread_mutex_lock(&j->mu);
    if (cancel) {
        snprintf(msg, sizeof msg, "job %llu was cancelled", (unsigned long long)job->id);
        sm_cjobs_end_locked(j, job, SM_JOB_CANCELLED, msg);
    } else if (e) {
        sm_cjobs_end_locked(j, job, SM_JOB_FAILED, msg);
    } else {
        job->out_infos = infos;
        infos = NULL;
        sm_cjobs_end_locked(j, job, SM_JOB_DONE, NULL);
    }
    pthread_mutex_unlock(&j->mu);
    if (infos)
        sm_array_info_list_free(infos, ninfos);
    free(inputs);
    free(temps);
}
