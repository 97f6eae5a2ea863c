/* job: RunJob, CancelJob and Exchange on a worker (see header). */
#include "job.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_grpc.h"
#include "sm_shm.h"
#include "sm_exec.h"
#include "sm_htab.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "sm_time.h"
#include "sm_tpool.h"

typedef enum { SM_WJOB_PENDING, SM_WJOB_RUNNING, SM_WJOB_ENDED } sm_wjob_state;

/* One job known to this worker: pending (blobs arrived first), running, or
 * ended (a tombstone that drops late blobs and refuses a rerun). */
typedef struct sm_job {
    struct sm_job *next; /* all jobs, newest first */
    uint64_t id;
    sm_wjob_state state;
    int cancelled;
    int refs;           /* runner and exchange handlers using box */
    sm_mailbox *box;    /* NULL once ended and unused */
    sm_comm_grpc *comm; /* while running */
    time_t since;       /* CLOCK_MONOTONIC seconds of the last state change */
} sm_job;

struct sm_jobs {
    pthread_mutex_t mu;
    sm_store *store;
    sm_peer *peers;
    char self[SM_ADDR_MAX];
    int probe_ms;
    int shm;
    sm_job *jobs;
    sm_htab index; /* the jobs by sm_htab_hash_u64(id): a lookup walks no list */
    int njobs;
    int stopping;
    time_t swept;               /* when sm_jobs_sweep_locked last ran */
    sm_tpool *pool;             /* device threads, kept between jobs */
    sm_shm_pool *shm_pool;      /* shared-memory files, kept between jobs */
    sm_shm_views *shm_views;    /* the peers' array memory, mapped between jobs */
    sm_mailbox_budget *pending; /* SM_JOBS_PENDING_TOTAL for the jobs not started */
};

sm_err sm_jobs_create(const sm_jobs_config *cfg, sm_jobs **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_jobs *j = calloc(1, sizeof *j);
    if (!j)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for the job table");
    sm_err e = sm_tpool_create(SM_JOBS_IDLE_THREADS, &j->pool, err, errlen);
    if (!e && (e = sm_shm_pool_create(&j->shm_pool, err, errlen)))
        sm_tpool_free(j->pool);
    if (!e && (e = sm_shm_views_create(&j->shm_views, err, errlen))) {
        sm_tpool_free(j->pool);
        sm_shm_pool_free(j->shm_pool);
    }
    if (!e && (e = sm_mailbox_budget_create(SM_JOBS_PENDING_TOTAL, &j->pending, err, errlen))) {
        sm_tpool_free(j->pool);
        sm_shm_pool_free(j->shm_pool);
        sm_shm_views_free(j->shm_views);
    }
    if (e) {
        free(j);
        return e;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->store = cfg->store;
    j->peers = cfg->peers;
    snprintf(j->self, sizeof j->self, "%s", cfg->self_address ? cfg->self_address : "");
    j->probe_ms = cfg->probe_ms;
    j->shm = cfg->shm;
    *out = j;
    return SM_OK;
}

static void sm_job_free(sm_job *job)
{
    sm_mailbox_free(job->box);
    free(job);
}

void sm_jobs_free(sm_jobs *j)
{
    if (!j)
        return;
    for (sm_job *job = j->jobs, *n; job; job = n) {
        n = job->next;
        sm_comm_grpc_free(job->comm); /* only if a runner never returned */
        sm_job_free(job);
    }
    sm_htab_free(&j->index);
    sm_tpool_free(j->pool);
    sm_shm_pool_free(j->shm_pool);
    sm_shm_views_free(j->shm_views);
    sm_mailbox_budget_free(j->pending);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Drops entries not running, unused and older than SM_JOBS_LINGER_S, at
 * most once a second (ages count in seconds). With full set (the table is
 * full) it also drops every unused entry of a job that ended without a
 * cancel: such an entry only drops late blobs and refuses a rerun the
 * coordinator never sends, and a table full of them must not refuse new
 * jobs. */
static void sm_jobs_sweep_locked(sm_jobs *j, int full)
{
    time_t now = (time_t)(sm_time_mono_ms() / 1000);
    if (!full && now == j->swept)
        return;
    j->swept = now;
    for (sm_job **pp = &j->jobs; *pp;) {
        sm_job *job = *pp;
        int spare = full && job->state == SM_WJOB_ENDED && !job->cancelled;
        if (job->state != SM_WJOB_RUNNING && job->refs == 0 &&
            (spare || now - job->since > SM_JOBS_LINGER_S)) {
            *pp = job->next;
            sm_htab_del(&j->index, sm_htab_hash_u64(job->id), job);
            sm_job_free(job);
            j->njobs--;
        } else {
            pp = &job->next;
        }
    }
}

static int sm_job_has_id(const void *item, const void *key)
{
    return ((const sm_job *)item)->id == *(const uint64_t *)key;
}

static sm_job *sm_jobs_find_locked(sm_jobs *j, uint64_t id)
{
    return sm_htab_find(&j->index, sm_htab_hash_u64(id), sm_job_has_id, &id);
}

/* A new pending entry (with a mailbox unless tombstone), or NULL. */
static sm_job *sm_jobs_add_locked(sm_jobs *j, uint64_t id, int tombstone)
{
    char err[128];
    if (j->njobs >= SM_JOBS_MAX)
        sm_jobs_sweep_locked(j, 1);
    if (j->njobs >= SM_JOBS_MAX || sm_htab_reserve(&j->index, j->index.n + 1))
        return NULL;
    sm_job *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    if (!tombstone &&
        sm_mailbox_create(j->pending, SM_JOBS_PENDING_BYTES, &job->box, err, sizeof err)) {
        free(job);
        return NULL;
    }
    job->id = id;
    job->state = tombstone ? SM_WJOB_ENDED : SM_WJOB_PENDING;
    job->since = (time_t)(sm_time_mono_ms() / 1000);
    job->next = j->jobs;
    j->jobs = job;
    sm_htab_put(&j->index, sm_htab_hash_u64(id), job);
    j->njobs++;
    return job;
}

/* The entry of job id, added (see sm_jobs_add_locked) if there is none;
 * NULL with SM_ERESOURCE in err ("cannot <what> job N: ...") when there is
 * no room for one. */
static sm_job *sm_jobs_get_locked(sm_jobs *j, uint64_t id, int tombstone, const char *what,
                                  char *err, size_t errlen)
{
    sm_jobs_sweep_locked(j, 0);
    sm_job *job = sm_jobs_find_locked(j, id);
    if (!job && !(job = sm_jobs_add_locked(j, id, tombstone)))
        sm_fail(err, errlen, SM_ERESOURCE, "cannot %s job %llu: out of memory or %d jobs known",
                what, (unsigned long long)id, SM_JOBS_MAX);
    return job;
}

/* Drops a reference; an ended job frees its mailbox with the last one. */
static void sm_jobs_unref_locked(sm_job *job)
{
    if (--job->refs == 0 && job->state == SM_WJOB_ENDED) {
        sm_mailbox_free(job->box);
        job->box = NULL;
    }
}

/* ---- Exchange ---------------------------------------------------------------- */

/* The job a blob names, with a reference for its stream (NULL and SM_OK:
 * the job is over here, drop the blob). */
static sm_err sm_jobs_hold(sm_jobs *j, sm_job_id id, sm_job **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&j->mu);
    sm_job *job = sm_jobs_get_locked(j, id.v, 0, "keep blocks of", err, errlen);
    if (!job) {
        pthread_mutex_unlock(&j->mu);
        return SM_ERESOURCE;
    }
    if (job->state != SM_WJOB_ENDED && !job->cancelled) {
        job->refs++;
        *out = job;
    }
    pthread_mutex_unlock(&j->mu);
    return SM_OK;
}

static void sm_jobs_unhold(sm_jobs *j, sm_job *job)
{
    pthread_mutex_lock(&j->mu);
    sm_jobs_unref_locked(job);
    pthread_mutex_unlock(&j->mu);
}

/* An Exchange stream: the blob being received and the job it belongs to. */
typedef struct {
    sm_jobs *j;
    sm_mailbox_rx rx;
    sm_job *job; /* held while its blob comes in; NULL: none, or one to drop */
} sm_jobs_xin;

/* A blob's chunks go straight to where its job's comm offered (if it did),
 * else into pieces of their own. */
static sm_err sm_jobs_x_place(void *user, const sm_svc_coll_msg *m, void **dst, char *err,
                              size_t errlen)
{
    sm_jobs_xin *x = user;
    if (!x->rx.cur) {
        if (x->job)
            sm_jobs_unhold(x->j, x->job);
        sm_err e = sm_jobs_hold(x->j, m->job_id, &x->job, err, errlen);
        if (e)
            return e;
        x->rx.box = x->job ? x->job->box : NULL;
    }
    return sm_mailbox_rx_place(&x->rx, m, dst, err, errlen);
}

static void sm_jobs_x_copied(void *user, const void *p, size_t n)
{
    sm_jobs_xin *x = user;
    sm_mailbox_rx_copied(&x->rx, p, n);
}

/* Hands a complete blob to its job's mailbox (drops it if the job is over
 * here) and lets the job go. */
static sm_err sm_jobs_deliver(sm_jobs_xin *x, sm_mailbox_blob *b, char *err, size_t errlen)
{
    sm_job *job = x->job;
    x->job = NULL;
    if (!job) {
        sm_mailbox_discard(NULL, b); /* late: the job is over here */
        return SM_OK;
    }
    pthread_mutex_lock(&x->j->mu);
    int over = job->state == SM_WJOB_ENDED || job->cancelled;
    pthread_mutex_unlock(&x->j->mu);
    sm_err e = SM_OK;
    if (over)
        sm_mailbox_discard(job->box, b);
    else
        e = sm_mailbox_put(job->box, b, err, errlen);
    sm_jobs_unhold(x->j, job);
    return e;
}

static sm_err sm_jobs_exchange(void *user, sm_svc_coll_in *in, int64_t *bytes, char *err,
                               size_t errlen)
{
    sm_jobs_xin x = {.j = user};
    const sm_svc_coll_sink sink = {sm_jobs_x_place, sm_jobs_x_copied, &x};
    sm_err e;
    for (;;) {
        sm_svc_coll_msg m;
        sm_mailbox_blob *b;
        sm_job_id id;
        int end = 0, done = 0;
        if ((e = sm_svc_coll_recv_into(in, &sink, &m, &end, err, errlen)) || end)
            break;
        if ((e = sm_mailbox_rx_done(&x.rx, &m, &id, &b, &done, err, errlen)))
            break;
        *bytes += (int64_t)m.len;
        if (done && (e = sm_jobs_deliver(&x, b, err, errlen)))
            break;
    }
    sm_mailbox_rx_end(&x.rx); /* before the job goes: it may write into the job's memory */
    if (x.job)
        sm_jobs_unhold(x.j, x.job);
    return e;
}

/* ---- CancelJob ---------------------------------------------------------------- */

static sm_err sm_jobs_cancel(void *user, sm_job_id id, char *err, size_t errlen)
{
    sm_jobs *j = user;
    char why[96];
    snprintf(why, sizeof why, "job %llu was cancelled", (unsigned long long)id.v);
    pthread_mutex_lock(&j->mu);
    sm_job *job = sm_jobs_get_locked(j, id.v, 1, "record the cancel of", err, errlen);
    if (!job) {
        pthread_mutex_unlock(&j->mu);
        return SM_ERESOURCE;
    }
    job->cancelled = 1; /* a job that has not started yet fails when it does */
    if (job->comm)
        sm_comm_grpc_fail(job->comm, SM_ECANCELLED, why);
    pthread_mutex_unlock(&j->mu);
    SM_DEBUG("%s", why);
    return SM_OK;
}

void sm_jobs_stop(sm_jobs *j)
{
    if (!j)
        return;
    char why[SM_ADDR_MAX + 64];
    snprintf(why, sizeof why, "worker %s is shutting down", j->self);
    pthread_mutex_lock(&j->mu);
    j->stopping = 1;
    for (sm_job *job = j->jobs; job; job = job->next)
        if (job->comm)
            sm_comm_grpc_fail(job->comm, SM_EUNAVAILABLE, why);
    pthread_mutex_unlock(&j->mu);
}

/* ---- RunJob ------------------------------------------------------------------- */

/* One local device of a running job. */
typedef struct {
    const sm_exec_plan *plan;
    sm_comm_grpc *comm;
    sm_array_pool *arrays; /* the store's: values and outputs count against its limit */
    int pos;
    int32_t dev;
    sm_store_shard **shards; /* nparams references */
    sm_array *views;         /* nparams views of the shards */
    sm_array **in;           /* nparams pointers to views */
    sm_array **out;          /* nreturns results */
    sm_err e;
    char err[1024];
} sm_job_dev;

static void sm_job_dev_main(void *arg)
{
    sm_job_dev *d = arg;
    d->e = sm_exec_run_plan(d->plan, d->pos, &sm_comm_grpc_ops, d->comm, d->arrays, d->in, d->out,
                            d->err, sizeof d->err);
}

/* Maps every mesh position to its worker; finds this worker's positions. */
static sm_err sm_jobs_layout(sm_jobs *j, const sm_svc_run_job_req *req, int *pos_worker, int *self,
                             int *local, int *nlocal, char *err, size_t errlen)
{
    const sm_mesh *m = &req->program->mesh;
    unsigned long long id = (unsigned long long)req->job_id.v;
    *self = -1;
    *nlocal = 0;
    if (sm_store_worker_id(j->store) < 0)
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "job %llu: worker %s is not registered with the coordinator yet", id,
                       j->self);
    for (int pos = 0; pos < m->ndevices; pos++) {
        int32_t dev = m->devices[pos];
        pos_worker[pos] = -1;
        for (int w = 0; w < req->npeers && pos_worker[pos] < 0; w++)
            for (int k = 0; k < req->peers[w].ndevices; k++)
                if (req->peers[w].devices[k] == dev)
                    pos_worker[pos] = w;
        if (pos_worker[pos] < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "job %llu: mesh device %d is on none of the job's %d workers", id,
                           (int)dev, req->npeers);
        char msg[256];
        if (sm_store_check_device(j->store, dev, msg, sizeof msg) == SM_OK) {
            if (*self >= 0 && pos_worker[pos] != *self)
                return sm_fail(err, errlen, SM_EINVAL,
                               "job %llu: the devices of worker %s are listed under two workers "
                               "(%s and %s)",
                               id, j->self, req->peers[*self].address,
                               req->peers[pos_worker[pos]].address);
            *self = pos_worker[pos];
            local[(*nlocal)++] = pos;
        }
    }
    if (*self < 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "job %llu: none of the mesh's %d devices is on worker %s", id, m->ndevices,
                       j->self);
    for (int pos = 0; pos < m->ndevices; pos++)
        if (pos_worker[pos] == *self &&
            sm_store_check_device(j->store, m->devices[pos], NULL, 0) != SM_OK)
            return sm_fail(err, errlen, SM_EINVAL,
                           "job %llu: device %d is listed under worker %s but is not one of its "
                           "devices",
                           id, (int)m->devices[pos], req->peers[*self].address);
    return SM_OK;
}

/* Takes a reference to every input shard of every local device and checks
 * it against the parameter's block type. */
static sm_err sm_jobs_inputs(sm_jobs *j, const sm_svc_run_job_req *req, sm_job_dev *devs,
                             int nlocal, char *err, size_t errlen)
{
    const sm_program *p = req->program;
    for (int l = 0; l < nlocal; l++) {
        sm_job_dev *d = &devs[l];
        for (int k = 0; k < p->nparams; k++) {
            const sm_ir_param *pa = &p->params[k];
            const sm_ir_value *v = &p->values[pa->value];
            char msg[256];
            sm_err e =
                sm_store_get(j->store, req->inputs[k], d->dev, &d->shards[k], msg, sizeof msg);
            if (e)
                return sm_fail(err, errlen, e,
                               "job %llu: parameter '%s' (array %llu) has no shard on device %d "
                               "of worker %s: %s",
                               (unsigned long long)req->job_id.v, pa->name,
                               (unsigned long long)req->inputs[k].v, (int)d->dev, j->self, msg);
            const sm_store_shard *sh = d->shards[k];
            if (sh->dtype != v->dtype || !sm_shape_equal(&sh->shape, &v->shape)) {
                char want[64], got[64];
                sm_shape_format(&v->shape, want, sizeof want);
                sm_shape_format(&sh->shape, got, sizeof got);
                return sm_fail(err, errlen, SM_EINVAL,
                               "job %llu: parameter '%s' needs a %s%s block on device %d, but "
                               "array %llu holds %s%s there",
                               (unsigned long long)req->job_id.v, pa->name, sm_dtype_name(v->dtype),
                               want, (int)d->dev, (unsigned long long)req->inputs[k].v,
                               sm_dtype_name(sh->dtype), got);
            }
            d->views[k] = (sm_array){.dtype = sh->dtype,
                                     .shape = sh->shape,
                                     .nbytes = sh->nbytes,
                                     .data = sh->data,
                                     .block = sh->block}; /* values may share it */
            d->in[k] = &d->views[k];
        }
    }
    return SM_OK;
}

/* Stores every output of every local device, each array in one step; on a
 * failure the arrays already stored are freed again. */
static sm_err sm_jobs_store(sm_jobs *j, const sm_svc_run_job_req *req, uint64_t epoch,
                            sm_job_dev *devs, int nlocal, int64_t *bytes, char *err, size_t errlen)
{
    const sm_program *p = req->program;
    int32_t ids[SM_MAX_WORKER_DEVICES];
    sm_store_shard *sh[SM_MAX_WORKER_DEVICES];
    sm_err e = SM_OK;
    int r = 0;
    for (int l = 0; l < nlocal; l++)
        ids[l] = devs[l].dev;
    for (; r < p->nreturns && !e; r++) {
        int made = 0;
        int64_t nb = 0;
        for (; made < nlocal && !e; made++) { /* the results' buffers become the shards */
            if ((e = sm_store_shard_adopt(&devs[made].out[r], &sh[made], err, errlen)))
                break;
            nb += sh[made]->nbytes;
        }
        if (!e)
            e = sm_store_put(j->store, epoch, req->outputs[r], nlocal, ids, sh, err, errlen);
        if (e) {
            for (int l = 0; l < made; l++)
                sm_store_shard_release(sh[l]);
            break;
        }
        *bytes += nb;
    }
    if (e)
        for (int q = 0; q < r; q++)
            sm_store_free_array(j->store, req->outputs[q], nlocal, ids, NULL, NULL, 0);
    return e;
}

/* Tells the other workers of a failed job to cancel it (best effort; self
 * is this worker's index in req->peers, or -1 when unknown). */
static void sm_jobs_cancel_peers(sm_jobs *j, const sm_svc_run_job_req *req, int self)
{
    for (int w = 0; w < req->npeers; w++) {
        sm_rpc_channel *ch;
        char msg[256];
        if (w == self || !strcmp(req->peers[w].address, j->self) ||
            sm_peer_channel(j->peers, req->peers[w].address, &ch, msg, sizeof msg))
            continue;
        if (sm_svc_worker_cancel_job(ch, 2000, req->job_id, msg, sizeof msg))
            SM_DEBUG("job %llu: cancel on %s: %s", (unsigned long long)req->job_id.v,
                     req->peers[w].address, msg);
    }
}

/* Registers the job as running; fails if it ran or was cancelled here. */
static sm_err sm_jobs_begin(sm_jobs *j, sm_job_id id, sm_job **out, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&j->mu);
    sm_job *job = NULL;
    if (j->stopping)
        e = sm_fail(err, errlen, SM_EUNAVAILABLE, "worker %s is shutting down", j->self);
    else if (!(job = sm_jobs_get_locked(j, id.v, 0, "run", err, errlen)))
        e = SM_ERESOURCE;
    else if (job->cancelled)
        e = sm_fail(err, errlen, SM_ECANCELLED, "job %llu was cancelled", (unsigned long long)id.v);
    else if (job->state != SM_WJOB_PENDING)
        e = sm_fail(err, errlen, SM_EEXIST, "job %llu already %s on this worker",
                    (unsigned long long)id.v, job->state == SM_WJOB_RUNNING ? "runs" : "ran");
    if (!e) {
        job->state = SM_WJOB_RUNNING;
        job->refs++;
        sm_mailbox_set_max(job->box, 0);
        *out = job;
    }
    pthread_mutex_unlock(&j->mu);
    return e;
}

/* Marks the job ended and frees its comm; returns 1 if it was cancelled
 * (by request, or by a failing peer that told the others). */
static int sm_jobs_end(sm_jobs *j, sm_job *job)
{
    pthread_mutex_lock(&j->mu);
    int cancelled = job->cancelled;
    sm_comm_grpc *comm = job->comm;
    job->comm = NULL;
    job->state = SM_WJOB_ENDED;
    job->since = (time_t)(sm_time_mono_ms() / 1000);
    sm_jobs_unref_locked(job);
    pthread_mutex_unlock(&j->mu);
    sm_comm_grpc_free(comm);
    return cancelled;
}

static sm_err sm_jobs_run(void *user, sm_svc_run_job_req *req, int64_t *output_bytes, char *err,
                          size_t errlen)
{
    sm_jobs *j = user;
    sm_program *p = req->program;
    const sm_mesh *m = p ? &p->mesh : NULL;
    unsigned long long id = (unsigned long long)req->job_id.v;
    int *pos_worker = calloc(SM_MAX_DEVICES, sizeof *pos_worker);
    int *local = calloc(SM_MAX_DEVICES, sizeof *local);
    sm_job_dev *devs = NULL;
    sm_exec_plan *plan = NULL;
    sm_job *job = NULL;
    int self = -1, nlocal = 0, started = 0, tell_peers = 0;
    uint64_t epoch = sm_store_epoch(j->store);
    sm_err e;
    *output_bytes = 0;
    if (!p) {
        e = sm_fail(err, errlen, SM_EINVAL, "job %llu comes without a program", id);
        goto done;
    }
    SM_DEBUG("job %llu: program '%s' on a mesh of %d devices", id, p->name ? p->name : "",
             m->ndevices);
    if (!pos_worker || !local) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for job %llu", id);
        goto done;
    }
    tell_peers = 1; /* from here a failure releases the peers waiting for this worker */
    if ((e = sm_program_verify(p, 0, err, errlen)) ||
        (e = sm_jobs_layout(j, req, pos_worker, &self, local, &nlocal, err, errlen)))
        goto done;
    if ((e = sm_jobs_begin(j, req->job_id, &job, err, errlen))) {
        /* a job that runs, ran or was cancelled here is not this call's to cancel */
        tell_peers = e != SM_EEXIST && e != SM_ECANCELLED;
        goto done;
    }
    devs = calloc((size_t)nlocal, sizeof *devs);
    if (!devs) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for job %llu", id);
        goto done;
    }
    for (int l = 0; l < nlocal; l++) {
        sm_job_dev *d = &devs[l];
        d->pos = local[l];
        d->dev = m->devices[local[l]];
        d->shards = calloc((size_t)p->nparams + 1, sizeof *d->shards);
        d->views = calloc((size_t)p->nparams + 1, sizeof *d->views);
        d->in = calloc((size_t)p->nparams + 1, sizeof *d->in);
        d->out = calloc((size_t)p->nreturns + 1, sizeof *d->out);
        if (!d->shards || !d->views || !d->in || !d->out) {
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for job %llu", id);
            goto done;
        }
    }
    if ((e = sm_jobs_inputs(j, req, devs, nlocal, err, errlen)) ||
        (e = sm_exec_plan_create(p, &plan, err, errlen)))
        goto done;
    uint32_t ms = req->deadline_ms ? req->deadline_ms : SM_JOBS_DEFAULT_DEADLINE_MS;
    uint32_t *domain = calloc((size_t)req->npeers + 1, sizeof *domain);
    if (!domain) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for job %llu", id);
        goto done;
    }
    int apart = 0; /* other workers of the job this one shares no memory with */
    for (int w = 0; w < req->npeers; w++) {
        domain[w] = req->peers[w].shm_domain;
        apart += w != self && (!domain[w] || domain[w] != req->peers[self].shm_domain);
    }
    if (j->shm == 2 && apart)
        SM_WARN("job %llu: --transport shm, but %d of its other workers share no memory with this "
                "one (another host, or not proven): their collectives go over gRPC",
                id, apart);
    sm_comm_grpc_config cc = {.job = req->job_id,
                              .mesh = m,
                              .nworkers = req->npeers,
                              .workers = req->peers,
                              .pos_worker = pos_worker,
                              .self = self,
                              .probe_ms = j->probe_ms,
                              .box = job->box,
                              .tr = &sm_comm_grpc_net,
                              .tr_user = j->peers,
                              .shm_domain = domain,
                              .shm_key = req->shm_key,
                              .shm_pool = j->shm_pool,
                              .shm_views = j->shm_views,
                              .pool = sm_store_pool(j->store)};
    cc.deadline = sm_time_after_ms(CLOCK_MONOTONIC, ms);
    sm_comm_grpc *comm;
    e = sm_comm_grpc_create(&cc, &comm, err, errlen);
    free(domain);
    if (e)
        goto done;
    pthread_mutex_lock(&j->mu);
    job->comm = comm;
    if (job->cancelled) {
        char why[96];
        snprintf(why, sizeof why, "job %llu was cancelled", id);
        sm_comm_grpc_fail(comm, SM_ECANCELLED, why);
    }
    pthread_mutex_unlock(&j->mu);
    /* A light job (sm_program_light: no collectives, no products, at most
     * SM_JOBS_INLINE_BYTES of values per device) runs its devices here one
     * by one, which costs less than waking device threads; otherwise every local device but the
     * last runs on a pool thread and the last on this one, all at once, as collectives between them
     * need. */
    sm_tpool_group g;
    sm_tpool_group_init(&g);
    for (int l = 0; l < nlocal; l++) {
        devs[l].plan = plan;
        devs[l].comm = comm;
        devs[l].arrays = sm_store_pool(j->store);
    }
    int light = sm_program_light(p, SM_JOBS_INLINE_BYTES);
    int here = light ? 0 : nlocal - 1;
    if (!light) /* devices wait for each other and for peers */
        sm_rpc_may_block();
    for (; started < here; started++)
        if (sm_tpool_start(j->pool, &g, sm_job_dev_main, &devs[started])) {
            sm_comm_grpc_fail(comm, SM_ERESOURCE, "cannot start a device thread");
            break;
        }
    if (started == here)
        for (; started < nlocal; started++)
            sm_job_dev_main(&devs[started]);
    sm_tpool_group_wait(&g);
    /* the first error that is not only a consequence of another */
    int first = -1;
    for (int l = 0; l < started; l++)
        if (devs[l].e &&
            (first < 0 || (devs[first].e == SM_ECANCELLED && devs[l].e != SM_ECANCELLED)))
            first = l;
    char why[600];
    sm_err ce = sm_comm_grpc_status(comm, why, sizeof why);
    if (first >= 0)
        e = sm_fail(err, errlen, devs[first].e, "%s", devs[first].err);
    else if (ce || started < nlocal)
        e = sm_fail(err, errlen, ce ? ce : SM_ERESOURCE, "%s",
                    ce ? why : "cannot start a device thread");
    if (!e)
        e = sm_jobs_store(j, req, epoch, devs, nlocal, output_bytes, err, errlen);
    if (!e)
        tell_peers = 0;
done:
    if (job && sm_jobs_end(j, job))
        tell_peers = 0; /* whoever cancelled it told the others */
    if (e && tell_peers)
        sm_jobs_cancel_peers(j, req, self);
    for (int l = 0; devs && l < nlocal; l++) {
        for (int k = 0; devs[l].shards && k < p->nparams; k++)
            sm_store_shard_release(devs[l].shards[k]);
        for (int r = 0; devs[l].out && r < p->nreturns; r++)
            sm_array_free(devs[l].out[r]);
        free(devs[l].shards);
        free(devs[l].views);
        free(devs[l].in);
        free(devs[l].out);
    }
    free(devs);
    sm_exec_plan_free(plan);
    free(pos_worker);
    free(local);
    sm_program_free(p);
    req->program = NULL;
    if (e && req->shm_key) { /* a peer that died in a collective may have left its segment,
                              * and its array memory mapped here */
        sm_shm_sweep(SM_SHM_SWEEP_AGE_S);
        sm_shm_views_prune(j->shm_views);
    }
    if (e)
        SM_DEBUG("job %llu failed: %s", id, err);
    else
        SM_DEBUG("job %llu done", id);
    return e;
}

/* ---- ShmProbe ----------------------------------------------------------------- */

static sm_err sm_jobs_shm_probe(void *user, const sm_svc_shm_probe_req *req,
                                sm_svc_shm_probe_reply *out, char *err, size_t errlen)
{
    sm_jobs *j = user;
    out->protocol = SM_SHM_PROTOCOL;
    if (!j->shm)
        return sm_fail(err, errlen, SM_EPRECONDITION,
                       "worker %s uses --transport grpc: it shares no memory with its peers",
                       j->self);
    if (req->drop[0])
        return sm_shm_probe_drop(req->drop, err, errlen);
    if (req->read[0])
        return sm_shm_probe_read(req->read, &out->cookie, err, errlen);
    if (!req->create)
        return sm_fail(err, errlen, SM_EINVAL, "ShmProbe names no action (create, read or drop)");
    return sm_shm_probe_create(out->name, &out->cookie, err, errlen);
}

const sm_svc_worker_job_ops sm_jobs_ops = {
    .run_job = sm_jobs_run,
    .cancel_job = sm_jobs_cancel,
    .exchange = sm_jobs_exchange,
    .shm_probe = sm_jobs_shm_probe,
};
