/* jobs_run: running one job on a runner thread (see jobs.h): reshard the
 * inputs that need it, RunJob on every worker of the mesh in parallel, then
 * mark the outputs READY, or drop them and report the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "jobs_int.h"
#include "relay.h"
#include "sm_log.h"
#include "sm_time.h"

/* RunJob's own deadline when the job has none. */
#define SM_JOBS_NO_DEADLINE_MS 86400000

/* What the RunJob calls of one job share (all on the runner thread). */
typedef struct {
    sm_cjobs *j;
    sm_job *job;
    sm_rpc_channel **chs; /* [npeers]; NULL where no channel could be made */
    char (*cherr)[256];   /* [npeers] why not */
    int failed;           /* a worker failed: the first one's error is below */
    sm_err e;
    char msg[SM_JOBS_ERR_MAX];
} dispatch;

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
    return (job->submit_us + (int64_t)job->deadline_ms * 1000 - sm_time_mono_us()) / 1000;
}

/* Worker k's RunJob ended; the first failure cancels the job on the
 * others, which may wait for this one in a collective. The job's error is
 * the first failure's, unless that was only a cancellation (a worker whose
 * collective learned through shared memory that a peer failed can answer
 * before the peer that failed): then the first failure that says why
 * replaces it. */
static void part_done(void *user, int k, sm_err e, int64_t output_bytes, const char *why)
{
    dispatch *d = user;
    const sm_svc_peer *peer = &d->job->peers[k];
    char err[SM_JOBS_ERR_MAX - 192]; /* room for the text around it */
    (void)output_bytes;
    if (!e || (d->failed && !(d->e == SM_ECANCELLED && e != SM_ECANCELLED)))
        return;
    int first = !d->failed;
    snprintf(err, sizeof err, "%s", d->chs[k] ? why : d->cherr[k]);
    sm_relay_strip_status(err);
    d->failed = 1;
    d->e = e;
    if (e == SM_EUNAVAILABLE)
        snprintf(d->msg, sizeof d->msg, "worker %u at %s is unavailable: %s", d->job->wids[k],
                 peer->address, err);
    else if (e == SM_ETIMEOUT)
        snprintf(d->msg, sizeof d->msg, "job %llu exceeded its deadline of %u ms",
                 (unsigned long long)d->job->id, d->job->deadline_ms);
    else
        snprintf(d->msg, sizeof d->msg, "%s", err);
    SM_INFO("job %llu failed on worker %u at %s: %s", (unsigned long long)d->job->id,
            d->job->wids[k], peer->address, err);
    if (first)
        sm_cjobs_cancel_workers(d->j, d->job, k);
}

/* Worker k's RunJob is still pending: end it if the registry marked the
 * worker lost (it stopped heartbeating: frozen, or cut off without its
 * connection closing), so the job fails now instead of at its deadline. */
static int part_watch(void *user, int k, char *why, size_t whylen)
{
    dispatch *d = user;
    if (sm_registry_worker_alive(d->j->coord->reg, d->job->wids[k]))
        return 0;
    snprintf(why, whylen, "it was marked lost (no heartbeat) while running job %llu",
             (unsigned long long)d->job->id);
    return 1;
}

/* ---- shared memory between workers ---------------------------------------- */

/* A failed proof (a worker refusing, or not answering) is tried again
 * after this long; a success is kept while both workers keep their ids
 * and addresses. */
#define SM_CJOBS_SHM_RETRY_US (60 * 1000000LL)
#define SM_CJOBS_SHM_PROBE_MS 2000

typedef struct {
    sm_cjobs *j;
    const sm_job *job;
    sm_rpc_channel **chs;
} shm_prove_ctx;

static int shm_prove(void *user, int a, int b)
{
    shm_prove_ctx *x = user;
    sm_cjobs *j = x->j;
    const sm_svc_peer *pa = &x->job->peers[a], *pb = &x->job->peers[b];
    uint32_t wa = x->job->wids[a], wb = x->job->wids[b];
    int64_t now = sm_time_mono_us();
    pthread_mutex_lock(&j->chmu);
    for (int i = 0; i < j->npairs; i++) {
        const sm_cjobs_pair *p = &j->pairs[i];
        if (p->a == wa && p->b == wb && !strcmp(p->addr_a, pa->address) &&
            !strcmp(p->addr_b, pb->address) && (p->shm || now - p->at_us < SM_CJOBS_SHM_RETRY_US)) {
            int shm = p->shm;
            pthread_mutex_unlock(&j->chmu);
            return shm;
        }
    }
    pthread_mutex_unlock(&j->chmu);
    int shm =
        x->chs[a] && x->chs[b] && sm_svc_shm_prove(x->chs[a], x->chs[b], SM_CJOBS_SHM_PROBE_MS);
    SM_DEBUG("workers %s and %s %s memory", pa->address, pb->address,
             shm ? "share" : "do not share");
    pthread_mutex_lock(&j->chmu);
    int i = 0;
    while (i < j->npairs && !(j->pairs[i].a == wa && j->pairs[i].b == wb))
        i++;
    if (i == j->npairs && j->npairs == j->cappairs) {
        int nc = j->cappairs ? 2 * j->cappairs : 8;
        sm_cjobs_pair *v = realloc(j->pairs, (size_t)nc * sizeof *v);
        if (v) {
            j->pairs = v;
            j->cappairs = nc;
        }
    }
    if (i < j->cappairs) {
        sm_cjobs_pair *p = &j->pairs[i];
        p->a = wa;
        p->b = wb;
        snprintf(p->addr_a, sizeof p->addr_a, "%s", pa->address);
        snprintf(p->addr_b, sizeof p->addr_b, "%s", pb->address);
        p->shm = shm;
        p->at_us = now;
        if (i == j->npairs)
            j->npairs++;
    }
    pthread_mutex_unlock(&j->chmu);
    return shm;
}

/* The shared-memory domains of the job's workers (each pair proven once,
 * then remembered) and a random key naming the job's segments. */
static void shm_plan(sm_cjobs *j, sm_job *job, sm_rpc_channel **chs, sm_svc_run_job_req *req)
{
    uint32_t *dom = calloc((size_t)job->npeers + 1, sizeof *dom);
    if (!dom)
        return; /* gRPC only */
    shm_prove_ctx x = {j, job, chs};
    sm_svc_shm_domains(job->npeers, shm_prove, &x, dom);
    for (int k = 0; k < job->npeers; k++) {
        job->peers[k].shm_domain = dom[k];
        for (int q = 0; q < k; q++) /* for the listing: every pair of a domain */
            if (dom[k] && dom[q] == dom[k])
                sm_registry_worker_shm_peer(j->coord->reg, job->wids[q], job->wids[k]);
    }
    free(dom);
    while (!req->shm_key)
        if (getrandom(&req->shm_key, sizeof req->shm_key, 0) != (ssize_t)sizeof req->shm_key)
            req->shm_key = (uint64_t)sm_time_mono_us() ^ (job->id << 32);
}

/* RunJob on every worker of the mesh at once, all from this thread. */
static sm_err run_everywhere(sm_cjobs *j, sm_job *job, sm_array_id *inputs, char *msg,
                             size_t msglen)
{
    int64_t left = time_left_ms(job);
    if (left <= 0)
        return sm_fail(msg, msglen, SM_ETIMEOUT, "job %llu exceeded its deadline of %u ms",
                       (unsigned long long)job->id, job->deadline_ms);
    sm_svc_run_job_req req;
    memset(&req, 0, sizeof req);
    req.job_id.v = job->id;
    req.program = job->prog;
    req.ninputs = job->nargs;
    req.inputs = inputs;
    req.noutputs = job->nout;
    req.outputs = job->outs;
    req.npeers = job->npeers;
    req.peers = job->peers;
    req.deadline_ms = job->deadline_ms ? (uint32_t)left : 0;
    dispatch d;
    memset(&d, 0, sizeof d);
    d.j = j;
    d.job = job;
    size_t n = (size_t)(job->npeers ? job->npeers : 1);
    d.chs = calloc(n, sizeof *d.chs);
    d.cherr = calloc(n, sizeof *d.cherr);
    sm_err e = SM_OK;
    if (!d.chs || !d.cherr) {
        e = sm_fail(msg, msglen, SM_ENOMEM, "out of memory starting job %llu",
                    (unsigned long long)job->id);
        goto out;
    }
    for (int k = 0; k < job->npeers; k++)
        d.chs[k] = sm_cjobs_channel(j, job->peers[k].address, d.cherr[k], sizeof d.cherr[k]);
    shm_plan(j, job, d.chs, &req);
    if ((e = sm_svc_worker_run_job_all(d.chs, job->npeers, (int)left, &req, part_done, part_watch,
                                       &d, msg, msglen)))
        goto out;
    if (d.failed) {
        snprintf(msg, msglen, "%s", d.msg);
        e = d.e;
    }
out:
    free(d.chs);
    free(d.cherr);
    return e;
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
    rr.sharding.mesh = &job->prog->mesh; /* with its axis types, as the outputs */
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
    if (temps)
        sm_cjobs_delete_arrays(j, temps, job->nargs);
    /* Every worker stored its blocks: the outputs are complete. They and
     * the job's end are recorded in one transaction, under mu so that a
     * cancel cannot come between them. */
    int done = 0;
    if (!e) {
        pthread_mutex_lock(&j->mu);
        if (!job->cancel) {
            e = sm_registry_job_done(j->coord->reg, job->id, (int)SM_JOB_DONE, job->tenant,
                                     job->outs, job->nout, infos, &ninfos, msg, sizeof msg);
            if (!e) {
                job->out_infos = infos;
                infos = NULL;
                sm_cjobs_end_saved_locked(j, job, SM_JOB_DONE);
                done = 1;
            }
        }
        pthread_mutex_unlock(&j->mu);
    }
    int cancel = !done && cancelled(j, job);
    if (!done && (e || cancel))
        sm_cjobs_delete_arrays(j, job->outs, job->nout);
    if (!done) {
        pthread_mutex_lock(&j->mu);
        if (cancel) {
            snprintf(msg, sizeof msg, "job %llu was cancelled", (unsigned long long)job->id);
            sm_cjobs_end_locked(j, job, SM_JOB_CANCELLED, msg);
        } else {
            sm_cjobs_end_locked(j, job, SM_JOB_FAILED, msg);
        }
        pthread_mutex_unlock(&j->mu);
    }
    /* Only the runner reads the program; an ended job keeps what describing
     * it needs, so the job table grows by a small record per job. */
    sm_program_free(job->prog);
    job->prog = NULL;
    if (infos)
        sm_array_info_list_free(infos, ninfos);
    free(inputs);
    free(temps);
}
