/* handlers: the Coordinator service. See handlers.h. */
#include "handlers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay.h"
#include "sm_log.h"
#include "sm_program.h"
#include "sm_rpc.h"
#include "sm_tenant.h"
#include "sm_time.h"

static sm_err h_list_devices(void *user, sm_worker_info **out, int *n, char *err, size_t errlen)
{
    sm_coord *c = user;
    return sm_registry_workers_list(c->reg, sm_time_mono_ms(), out, n, err, errlen);
}

static sm_err h_create_mesh(void *user, const char *name, const sm_mesh *mesh, int default_order,
                            sm_mesh_info *out, char *err, size_t errlen)
{
    sm_coord *c = user;
    return sm_registry_mesh_create(c->reg, name, mesh, default_order, out, err, errlen);
}

static sm_err h_get_mesh(void *user, sm_mesh_id id, const char *name, sm_mesh_info *out, char *err,
                         size_t errlen)
{
    sm_coord *c = user;
    if (!id.v && !(name && *name))
        return sm_fail(err, errlen, SM_EINVAL, "the request names no mesh (no id, no name)");
    return sm_registry_mesh_get(c->reg, id, name, out, err, errlen);
}

static sm_err h_list_meshes(void *user, sm_mesh_info **out, int *n, char *err, size_t errlen)
{
    sm_coord *c = user;
    return sm_registry_mesh_list(c->reg, out, n, err, errlen);
}

/* To a tenant: the grants of the transfers info's shards admit now,
 * straight with their workers (sm_grant.h): the upload of a pending
 * array's missing shards, the download of the others' present shards and
 * copies. */
static void h_grant(sm_coord *c, sm_array_info *info)
{
    unsigned char holder[32];
    const char *tenant = sm_tenant_current();
    if (!c->grants || !tenant[0] || sm_tenants_holder(c->tenants, tenant, holder))
        return;
    int64_t expiry = sm_grant_now_ms() + SM_GRANT_TTL_MS;
    int pending = info->state == SM_ARRAY_PENDING;
    for (int k = 0; k < info->nshards + info->ncopies; k++) {
        sm_shard_info *s = k < info->nshards ? &info->shards[k] : &info->copies[k - info->nshards];
        if (pending == s->present)
            continue;
        sm_grant_make(&c->grant_key, holder, pending ? SM_GRANT_PUT : SM_GRANT_GET,
                      s->stored_as ? s->stored_as : info->id.v, s->device, expiry, s->grant);
        s->grant_len = SM_GRANT_LEN;
    }
}

static sm_err h_create_array(void *user, const sm_svc_create_array_req *req,
                             sm_svc_create_array_reply *out, char *err, size_t errlen)
{
    sm_coord *c = user;
    sm_err e = sm_registry_array_create(c->reg, req, sm_time_mono_ms(), out, err, errlen);
    if (!e)
        h_grant(c, &out->array);
    return e;
}

static sm_err h_upload(void *user, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                       size_t errlen)
{
    sm_coord *c = user;
    return sm_relay_upload(c->reg, in, out, err, errlen);
}

static sm_err h_commit_shards(void *user, const sm_svc_commit_req *req, sm_svc_upload_reply *out,
                              char *err, size_t errlen)
{
    sm_coord *c = user;
    return sm_relay_commit(c->reg, req, out, c->call_deadline_ms, err, errlen);
}

static sm_err h_download(void *user, const sm_svc_download_req *req, sm_svc_download_out *out,
                         char *err, size_t errlen)
{
    sm_coord *c = user;
    if (req->ndevices > 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "Download relays one device's shard; ask for each device separately");
    return sm_relay_download(c->reg, req, out, c->call_deadline_ms, err, errlen);
}

static sm_err h_describe(void *user, sm_array_ref ref, sm_array_info *out, char *err, size_t errlen)
{
    sm_coord *c = user;
    sm_err e = sm_registry_array_describe(c->reg, ref, out, err, errlen);
    if (!e)
        h_grant(c, out);
    return e;
}

static sm_err h_list_arrays(void *user, sm_array_info **out, int *n, char *err, size_t errlen)
{
    sm_coord *c = user;
    return sm_registry_array_list(c->reg, out, n, err, errlen);
}

static sm_err h_delete(void *user, sm_array_ref ref, char *err, size_t errlen)
{
    sm_coord *c = user;
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_err e = sm_registry_array_delete(c->reg, ref, &f, &nf, err, errlen);
    if (!e)
        sm_relay_free(f, nf, c->call_deadline_ms);
    free(f);
    return e;
}

/* One worker's Assemble, run on its own thread. */
typedef struct {
    const sm_reg_assemble *part;
    int deadline_ms;
    sm_err e;
    char err[512];
    pthread_t th;
    int started;
} h_assemble_job;

static void *h_assemble_run(void *arg)
{
    h_assemble_job *j = arg;
    int64_t bytes = 0;
    j->e = sm_svc_worker_assemble(j->part->t.ch, j->deadline_ms, &j->part->req, &bytes, j->err,
                                  sizeof j->err);
    if (j->e)
        sm_relay_strip_status(j->err);
    return NULL;
}

/* Runs the Assemble of n parts at once, one thread each (part k at
 * first + k * stride bytes, the parts living in larger records); returns
 * their outcomes (caller frees), or NULL when out of memory (nothing ran). */
static h_assemble_job *h_assemble_all(const sm_reg_assemble *first, size_t stride, int n,
                                      int deadline_ms)
{
    h_assemble_job *jobs = calloc((size_t)n + 1, sizeof *jobs);
    for (int k = 0; jobs && k < n; k++) {
        jobs[k].part = (const sm_reg_assemble *)((const char *)first + (size_t)k * stride);
        jobs[k].deadline_ms = deadline_ms;
        jobs[k].started = pthread_create(&jobs[k].th, NULL, h_assemble_run, &jobs[k]) == 0;
        if (!jobs[k].started)
            h_assemble_run(&jobs[k]);
    }
    for (int k = 0; jobs && k < n; k++)
        if (jobs[k].started)
            pthread_join(jobs[k].th, NULL);
    return jobs;
}

/* Frees array id's new shards on every worker of a reshard. */
static void h_free_parts(sm_coord *c, sm_array_id id, const sm_reg_assemble *parts, int np)
{
    sm_reg_free *f = calloc(np ? (size_t)np : 1, sizeof *f);
    for (int k = 0; f && k < np; k++)
        f[k] = (sm_reg_free){id, parts[k].t};
    if (f)
        sm_relay_free(f, np, c->call_deadline_ms);
    else
        SM_ERROR("out of memory: shards of array %llu stay on their workers",
                 (unsigned long long)id.v);
    free(f);
}

/* How long a request's calls to the workers may take: the deadline it
 * gives (ms), else the coordinator's. */
static int h_deadline(const sm_coord *c, uint32_t req_ms)
{
    return req_ms ? (int)req_ms : c->call_deadline_ms;
}

/* Runs the Assembles of a reshard's or a load's new array, then ends it:
 * ready, described in *out; or removed, its shards freed. The first failure
 * is told as "<failed> failed on worker W at ADDR: why" (out of memory:
 * "out of memory starting <what>"). */
static sm_err h_new_array_make(sm_coord *c, sm_array_id id, const sm_reg_assemble *parts, int np,
                               int deadline_ms, const char *what, const char *failed,
                               sm_array_info *out, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    h_assemble_job *jobs = h_assemble_all(parts, sizeof *parts, np, deadline_ms);
    if (!jobs)
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting %s", what);
    for (int k = 0; k < np && !e; k++)
        if (jobs[k].e)
            e = sm_fail(err, errlen, jobs[k].e, "%s failed on worker %u at %s: %s", failed,
                        parts[k].t.worker_id, parts[k].t.address, jobs[k].err);
    free(jobs);
    if (e) {
        char ignore[256];
        h_free_parts(c, id, parts, np);
        sm_registry_reshard_end(c->reg, id, 0, NULL, ignore, sizeof ignore);
    } else if ((e = sm_registry_reshard_end(c->reg, id, 1, out, err, errlen))) {
        h_free_parts(c, id, parts, np); /* deleted or failed meanwhile */
    }
    return e;
}

static sm_err h_reshard(void *user, const sm_svc_reshard_req *req, sm_array_info *out, char *err,
                        size_t errlen)
{
    sm_coord *c = user;
    sm_array_id id;
    sm_reg_assemble *parts = NULL;
    int np = 0;
    sm_err e =
        sm_registry_reshard_begin(c->reg, req, sm_time_mono_ms(), &id, &parts, &np, err, errlen);
    if (e)
        return e;
    e = h_new_array_make(c, id, parts, np, h_deadline(c, req->deadline_ms), "a reshard", "reshard",
                         out, err, errlen);
    sm_registry_assemble_free(parts, np);
    return e;
}

static sm_err h_replicate(void *user, const sm_svc_replicate_req *req, sm_array_info *out,
                          char *err, size_t errlen)
{
    sm_coord *c = user;
    sm_reg_repair *reps = NULL;
    sm_reg_free *frees = NULL;
    int n = 0, nf = 0;
    sm_err e = sm_registry_replicate_begin(c->reg, req, &reps, &n, &frees, &nf, err, errlen);
    if (!e && nf)
        sm_relay_free(frees, nf, c->call_deadline_ms);
    free(frees);
    if (e)
        return e;
    h_assemble_job *jobs =
        h_assemble_all(n ? &reps[0].part : NULL, sizeof *reps, n, h_deadline(c, req->deadline_ms));
    for (int k = 0; k < n; k++) {
        sm_err ek = jobs ? jobs[k].e : SM_ENOMEM;
        const char *why = jobs ? jobs[k].err : "out of memory";
        if (!sm_registry_repair_end(c->reg, &reps[k], sm_time_mono_ms(), ek == SM_OK, why) && !ek) {
            sm_reg_free f = {reps[k].part.req.array_id, reps[k].part.t};
            sm_relay_free(&f, 1, c->call_deadline_ms);
        }
        if (ek && !e) /* the copy stays placed: heartbeats try it again */
            e = sm_fail(err, errlen, ek, "copying blocks to worker %u at %s failed: %s",
                        reps[k].part.t.worker_id, reps[k].part.t.address, why);
    }
    free(jobs);
    sm_registry_repairs_free(reps, n);
    if (!e)
        e = sm_registry_array_describe(c->reg, req->array, out, err, errlen);
    return e;
}

_Static_assert(SM_CKPT_MAX_CHUNKS == SM_SVC_CKPT_CHUNKS, "one chunk limit");

/* ---- checkpoints ------------------------------------------------------------ */

static sm_err h_dir_check(const char *dir, char *err, size_t errlen)
{
    /* the workers write and read the path with their own rights: only the
     * cluster's credential may name one, never a tenant's */
    if (sm_tenant_current()[0])
        return sm_fail(err, errlen, SM_EPERM,
                       "checkpoints write and read directories on the workers' hosts, which "
                       "tenant %s may not name; ask an operator holding the cluster's token",
                       sm_tenant_current());
    if (!dir || dir[0] != '/')
        return sm_fail(err, errlen, SM_EINVAL,
                       "the checkpoint directory '%s' is not an absolute path; the workers "
                       "resolve it, so give it whole (libshmap and shmapctl resolve a relative "
                       "one against the caller's working directory)",
                       dir ? dir : "");
    return SM_OK;
}

/* One worker's WriteCheckpoint, run on its own thread. */
typedef struct {
    sm_reg_save_part *part;
    sm_svc_ckpt_write_req req;
    sm_svc_ckpt_file out[SM_MAX_WORKER_DEVICES];
    int deadline_ms;
    sm_err e;
    char err[512];
    pthread_t th;
    int started;
} h_save_job;

static void *h_save_run(void *arg)
{
    h_save_job *j = arg;
    j->e = sm_svc_worker_write_checkpoint(j->part->t.ch, j->deadline_ms, &j->req, j->out, j->err,
                                          sizeof j->err);
    if (j->e)
        sm_relay_strip_status(j->err);
    return NULL;
}

static sm_err h_save(void *user, const sm_svc_save_req *req, sm_svc_save_reply *out, char *err,
                     size_t errlen)
{
    sm_coord *c = user;
    sm_ckpt_manifest m;
    sm_reg_save_part *parts = NULL;
    h_save_job *jobs = NULL;
    sm_array_id id;
    char label[SM_NAME_MAX + 16], *text = NULL;
    int np = 0;
    int deadline_ms = h_deadline(c, req->deadline_ms);
    sm_err e = h_dir_check(req->dir, err, errlen);
    if (e)
        return e;
    if ((e = sm_registry_save_begin(c->reg, req->array, &id, &m, &parts, &np, label, sizeof label,
                                    err, errlen)))
        return e;
    if (!(jobs = calloc((size_t)np, sizeof *jobs))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting a save");
        goto out;
    }
    for (int k = 0; k < np; k++) {
        jobs[k].part = &parts[k];
        jobs[k].req = (sm_svc_ckpt_write_req){id, req->dir, parts[k].nfiles, parts[k].files, NULL};
        jobs[k].deadline_ms = deadline_ms;
        jobs[k].started = pthread_create(&jobs[k].th, NULL, h_save_run, &jobs[k]) == 0;
        if (!jobs[k].started)
            h_save_run(&jobs[k]);
    }
    for (int k = 0; k < np; k++)
        if (jobs[k].started)
            pthread_join(jobs[k].th, NULL);
    for (int k = 0; k < np && !e; k++)
        if (jobs[k].e)
            e = sm_fail(err, errlen, jobs[k].e, "saving %s failed on worker %u at %s: %s", label,
                        parts[k].t.worker_id, parts[k].t.address, jobs[k].err);
    if (e)
        goto out;
    for (int k = 0; k < np; k++)
        for (int f = 0; f < parts[k].nfiles; f++) {
            sm_ckpt_shard *s = &m.shards[parts[k].shard[f]];
            const sm_svc_ckpt_file *o = &jobs[k].out[f];
            s->bytes = o->bytes;
            s->checksum = o->checksum;
            s->chunk_bytes = o->chunk_bytes;
            s->nchunks = o->nchunks;
            memcpy(s->chunk_sums, o->chunk_sums, sizeof s->chunk_sums);
            out->bytes += s->bytes;
        }
    out->files = m.nshards;
    if (!(text = sm_ckpt_manifest_format(&m))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory writing a manifest");
        goto out;
    }
    /* The manifest last: a directory without one is an unfinished save. */
    sm_svc_ckpt_write_req mreq = {id, req->dir, 0, NULL, text};
    char why[512];
    if ((e = sm_svc_worker_write_checkpoint(parts[0].t.ch, deadline_ms, &mreq, NULL, why,
                                            sizeof why))) {
        sm_relay_strip_status(why);
        e = sm_fail(err, errlen, e, "saving %s: writing its manifest on worker %u at %s failed: %s",
                    label, parts[0].t.worker_id, parts[0].t.address, why);
        goto out;
    }
    SM_INFO("saved %s into %s: %d files, %lld bytes", label, req->dir, out->files,
            (long long)out->bytes);
out:
    free(text);
    free(jobs);
    free(parts);
    sm_ckpt_manifest_free(&m);
    return e;
}

static sm_err h_load(void *user, const sm_svc_load_req *req, sm_array_info *out, char *err,
                     size_t errlen)
{
    sm_coord *c = user;
    sm_reg_target reader;
    sm_ckpt_manifest m;
    sm_svc_ckpt_file *files = NULL;
    sm_reg_assemble *parts = NULL;
    sm_array_id id;
    char *text = NULL, path[SM_ADDR_MAX + 4200], why[512], failed[4200];
    int np = 0;
    int deadline_ms = h_deadline(c, req->deadline_ms);
    sm_err e = h_dir_check(req->dir, err, errlen);
    if (!e)
        e = sm_registry_any_worker(c->reg, &reader, err, errlen);
    if (e)
        return e;
    if ((e = sm_svc_worker_read_manifest(reader.ch, deadline_ms, req->dir, &text, why,
                                         sizeof why))) {
        sm_relay_strip_status(why);
        return sm_fail(err, errlen, e, "%s", why);
    }
    snprintf(path, sizeof path, "%s/manifest.json", req->dir);
    e = sm_ckpt_manifest_parse(text, path, &m, err, errlen);
    free(text);
    if (e)
        return e;
    if (!(files = calloc((size_t)m.nshards, sizeof *files))) {
        sm_ckpt_manifest_free(&m);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a load");
    }
    for (int k = 0; k < m.nshards; k++) {
        files[k] = (sm_svc_ckpt_file){.file = m.shards[k].file,
                                      .shape = sm_index_shape(&m.shards[k].index),
                                      .bytes = m.shards[k].bytes,
                                      .checksum = m.shards[k].checksum,
                                      .chunk_bytes = m.shards[k].chunk_bytes,
                                      .nchunks = m.shards[k].nchunks};
        memcpy(files[k].chunk_sums, m.shards[k].chunk_sums, sizeof files[k].chunk_sums);
    }
    if ((e = sm_registry_load_begin(c->reg, req, &m, files, sm_time_mono_ms(), &id, &parts, &np,
                                    err, errlen)))
        goto done;
    snprintf(failed, sizeof failed, "loading %s", req->dir);
    e = h_new_array_make(c, id, parts, np, deadline_ms, "a load", failed, out, err, errlen);
done:
    sm_registry_assemble_free(parts, np);
    free(files);
    sm_ckpt_manifest_free(&m);
    return e;
}

static sm_err h_register(void *user, const sm_svc_register_req *req, sm_svc_register_reply *out,
                         char *err, size_t errlen)
{
    sm_coord *c = user;
    sm_rpc_channel *ch = NULL;
    sm_reg_free *f = NULL;
    int nf = 0;
    if (!req->address || !*req->address)
        return sm_fail(err, errlen, SM_EINVAL, "a worker must give the address it serves on");
    if (req->program_level < SM_PROGRAM_LEVEL) { /* it would run some programs wrongly */
        const char *v = req->version && *req->version ? req->version : "older";
        SM_WARN("refused worker %s (shmap-worker %s): program level %u, this coordinator's %u",
                req->address, v, req->program_level, SM_PROGRAM_LEVEL);
        return sm_fail(err, errlen, SM_EPRECONDITION,
                       "this worker (shmap-worker %s) runs programs of level %u, but this "
                       "coordinator (shmap-coordinator %s) sends level %u: upgrade the workers "
                       "before the coordinator",
                       v, req->program_level, SM_VERSION, SM_PROGRAM_LEVEL);
    }
    sm_err e = sm_rpc_channel_create_tls(req->address, c->token, c->tls, &ch, err, errlen);
    if (e)
        return e;
    e = sm_registry_worker_add(c->reg, req, ch, sm_time_mono_ms(), out, &f, &nf, err, errlen);
    if (e)
        sm_rpc_channel_free(ch);
    sm_relay_free(f, nf, c->call_deadline_ms);
    free(f);
    return e;
}

/* Repairs of degraded arrays onto one worker, run on a detached thread. */
typedef struct {
    sm_coord *c;
    sm_reg_repair *reps;
    int n;
} h_repair_job;

static void *h_repair_run(void *arg)
{
    h_repair_job *j = arg;
    for (int k = 0; k < j->n; k++) {
        char msg[512] = "";
        int64_t bytes = 0;
        sm_err e = sm_svc_worker_assemble(j->reps[k].part.t.ch, j->c->call_deadline_ms,
                                          &j->reps[k].part.req, &bytes, msg, sizeof msg);
        if (e)
            sm_relay_strip_status(msg);
        if (!sm_registry_repair_end(j->c->reg, &j->reps[k], sm_time_mono_ms(), e == SM_OK, msg) &&
            !e) {
            sm_reg_free f = {j->reps[k].part.req.array_id, j->reps[k].part.t};
            sm_relay_free(&f, 1, j->c->call_deadline_ms); /* the array went meanwhile */
        }
    }
    sm_registry_repairs_free(j->reps, j->n);
    pthread_mutex_lock(&j->c->bg_mu);
    j->c->bg_running--;
    pthread_cond_broadcast(&j->c->bg_cv);
    pthread_mutex_unlock(&j->c->bg_mu);
    free(j);
    return NULL;
}

/* Starts the repairs a worker that beats can take (its degraded arrays'
 * missing shards, copied back from live copies). After registration, so
 * the worker has its identity when the copies arrive. */
static void h_repairs_start(sm_coord *c, uint32_t worker_id)
{
    char err[256];
    h_repair_job *j = calloc(1, sizeof *j);
    pthread_t th;
    if (!j)
        return;
    j->c = c;
    pthread_mutex_lock(&c->bg_mu);
    int go = !c->bg_draining;
    c->bg_running += go;
    pthread_mutex_unlock(&c->bg_mu);
    if (go && sm_registry_repairs_begin(c->reg, worker_id, sm_time_mono_ms(), &j->reps, &j->n, err,
                                        sizeof err))
        SM_WARN("repairs onto worker %u: %s", worker_id, err);
    if (!j->n || pthread_create(&th, NULL, h_repair_run, j)) {
        pthread_mutex_lock(&c->bg_mu);
        c->bg_running -= go;
        pthread_cond_broadcast(&c->bg_cv);
        pthread_mutex_unlock(&c->bg_mu);
        for (int k = 0; k < j->n; k++)
            sm_registry_repair_end(c->reg, &j->reps[k], sm_time_mono_ms(), 0,
                                   "no thread to run it");
        sm_registry_repairs_free(j->reps, j->n);
        free(j);
        return;
    }
    pthread_detach(th);
}

static sm_err h_heartbeat(void *user, const sm_svc_heartbeat_req *req, int *known, char *err,
                          size_t errlen)
{
    sm_coord *c = user;
    *known = sm_registry_worker_heartbeat(c->reg, req, sm_time_mono_ms());
    if (!*known)
        SM_INFO("heartbeat from unknown or lost worker %u: asking it to register again",
                req->worker_id.v);
    else
        h_repairs_start(c, req->worker_id.v);
    return SM_OK;
}

static const sm_svc_coord_ops h_ops = {
    .list_devices = h_list_devices,
    .create_mesh = h_create_mesh,
    .get_mesh = h_get_mesh,
    .list_meshes = h_list_meshes,
    .create_array = h_create_array,
    .upload = h_upload,
    .download = h_download,
    .describe = h_describe,
    .list_arrays = h_list_arrays,
    .delete_array = h_delete,
    .reshard = h_reshard,
    .replicate = h_replicate,
    .register_worker = h_register,
    .heartbeat = h_heartbeat,
    .commit_shards = h_commit_shards,
    .save = h_save,
    .load = h_load,
};

void sm_handlers_init(sm_coord *c, sm_registry *reg, const char *token, int call_deadline_ms)
{
    memset(c, 0, sizeof *c);
    c->reg = reg;
    c->token = token;
    c->call_deadline_ms = call_deadline_ms;
    pthread_mutex_init(&c->bg_mu, NULL);
    pthread_cond_init(&c->bg_cv, NULL);
}

int sm_handlers_drain(sm_coord *c, int timeout_ms)
{
    struct timespec until = sm_time_after_ms(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&c->bg_mu);
    c->bg_draining = 1;
    while (c->bg_running > 0 && pthread_cond_timedwait(&c->bg_cv, &c->bg_mu, &until) == 0)
        ;
    int left = c->bg_running;
    pthread_mutex_unlock(&c->bg_mu);
    return left ? -1 : 0;
}

const sm_svc_coord_ops *sm_handlers_ops(void)
{
    return &h_ops;
}
