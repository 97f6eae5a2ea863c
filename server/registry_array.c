/* registry_array: arrays — creation for every put kind, uploads, downloads,
 * describe, list, delete. See registry.h. */
#include "registry_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

static sm_err sm_reg_oom(char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory in the registry");
}

sm_reg_array *sm_reg_array_alloc(int n)
{
    sm_reg_array *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->n = n;
    a->slices = calloc((size_t)n, sizeof *a->slices);
    a->worker = calloc((size_t)n, sizeof *a->worker);
    a->filled = calloc((size_t)n, 1);
    a->busy = calloc((size_t)n, 1);
    a->sums = calloc((size_t)n, sizeof *a->sums);
    a->spilled = calloc((size_t)n, 1);
    if (!a->slices || !a->worker || !a->filled || !a->busy || !a->sums || !a->spilled) {
        sm_reg_array_destroy(a);
        return NULL;
    }
    return a;
}

void sm_reg_array_destroy(sm_reg_array *a)
{
    if (!a)
        return;
    free(a->slices);
    free(a->worker);
    free(a->filled);
    free(a->busy);
    free(a->sums);
    free(a->spilled);
    free(a->copies);
    free(a->proc_index);
    free(a->proc_started);
    free(a);
}

static int sm_reg_array_has_id(const void *item, const void *key)
{
    return ((const sm_reg_array *)item)->id == *(const uint64_t *)key;
}

/* Names are per tenant: the caller's tenant's array of that name. */
static int sm_reg_array_has_name(const void *item, const void *key)
{
    const sm_reg_array *a = item;
    return !strcmp(a->name, (const char *)key) && !strcmp(a->tenant, sm_tenant_current());
}

sm_err sm_reg_array_insert(sm_registry *r, sm_reg_array *a, char *err, size_t errlen)
{
    assert(!a->name[0] || !sm_reg_array_find(r, (sm_array_ref){{0}, a->name}, NULL, 0));
    if (sm_htab_reserve(&r->array_ids, r->array_ids.n + 1) ||
        (a->name[0] && sm_htab_reserve(&r->array_names, r->array_names.n + 1)))
        return sm_reg_oom(err, errlen);
    a->id = r->next_array++;
    a->prev = r->last_array;
    a->next = NULL;
    if (r->last_array)
        r->last_array->next = a;
    else
        r->arrays = a;
    r->last_array = a;
    r->narrays++;
    sm_htab_put(&r->array_ids, sm_htab_hash_u64(a->id), a);
    if (a->name[0])
        sm_htab_put(&r->array_names, sm_htab_hash_str(a->name), a);
    if (a->unsaved)
        sm_reg_save_ids(r);
    else
        sm_reg_save_array(r, a);
    return SM_OK;
}

void sm_reg_array_unlink(sm_registry *r, sm_reg_array *a)
{
    if (!sm_htab_del(&r->array_ids, sm_htab_hash_u64(a->id), a))
        return; /* not listed */
    if (a->name[0])
        sm_htab_del(&r->array_names, sm_htab_hash_str(a->name), a);
    if (a->prev)
        a->prev->next = a->next;
    else
        r->arrays = a->next;
    if (a->next)
        a->next->prev = a->prev;
    else
        r->last_array = a->prev;
    a->prev = a->next = NULL;
    r->narrays--;
    sm_reg_save_array_gone(r, a->id);
}

const char *sm_reg_array_label(const sm_reg_array *a, char *buf, size_t len)
{
    if (a->name[0])
        snprintf(buf, len, "array '%s'", a->name);
    else
        snprintf(buf, len, "array %llu", (unsigned long long)a->id);
    return buf;
}

sm_reg_array *sm_reg_array_find(sm_registry *r, sm_array_ref ref, char *err, size_t errlen)
{
    sm_reg_array *a = NULL;
    if (ref.id.v)
        a = sm_htab_find(&r->array_ids, sm_htab_hash_u64(ref.id.v), sm_reg_array_has_id, &ref.id.v);
    else if (ref.name && *ref.name)
        a = sm_htab_find(&r->array_names, sm_htab_hash_str(ref.name), sm_reg_array_has_name,
                         ref.name);
    if (a && sm_tenant_sees(a->tenant)) /* another tenant's is not there at all */
        return a;
    if (ref.id.v)
        sm_fail(err, errlen, SM_ENOTFOUND, "array %llu does not exist",
                (unsigned long long)ref.id.v);
    else if (ref.name && *ref.name)
        sm_fail(err, errlen, SM_ENOTFOUND, "array '%s' does not exist", ref.name);
    else
        sm_fail(err, errlen, SM_EINVAL, "the request names no array (no id, no name)");
    return NULL;
}

void sm_reg_array_frees(sm_registry *r, const sm_reg_array *a, int filled_only, sm_reg_free **frees,
                        int *nfrees)
{
    /* the mesh's shards, one free per worker, then each copy under its own
     * id (even unfilled: one may be arriving) */
    for (int i = 0; i < r->nworkers + a->ncopies; i++) {
        int copy = i - r->nworkers;
        sm_reg_worker *w =
            copy < 0 ? r->workers[i] : sm_reg_worker_by_id(r, a->copies[copy].worker);
        sm_reg_free f = {.array = {copy < 0 ? a->id : sm_reg_slot_store_id(a, a->n + copy)}};
        if (!w || !w->alive)
            continue;
        for (int p = 0; copy < 0 && p < a->n; p++)
            if (a->worker[p] == w->id && (!filled_only || a->filled[p] || a->busy[p]) &&
                f.t.ndevices < SM_MAX_WORKER_DEVICES)
                f.t.devices[f.t.ndevices++] = a->slices[p].device;
        if (copy >= 0)
            f.t.devices[f.t.ndevices++] = a->copies[copy].device;
        if (!f.t.ndevices)
            continue;
        sm_reg_target_set(&f.t, w);
        sm_reg_free *nf = realloc(*frees, sizeof *nf * (size_t)(*nfrees + 1));
        if (!nf) {
            SM_ERROR("out of memory: shards of array %llu stay on worker %u",
                     (unsigned long long)a->id, w->id);
            continue;
        }
        *frees = nf;
        nf[(*nfrees)++] = f;
    }
}

void sm_reg_array_set_error(sm_reg_array *a, const char *msg)
{
    size_t n = strlen(msg);
    if (n >= sizeof a->error)
        n = sizeof a->error - 1;
    memcpy(a->error, msg, n);
    a->error[n] = 0;
}

void sm_reg_array_fail(sm_registry *r, sm_reg_array *a, const char *msg, sm_reg_free **frees,
                       int *nfrees)
{
    /* Every device, not only the filled ones: a direct upload (PutShard
     * straight to a worker) may have stored a shard that was never
     * committed. */
    sm_reg_array_frees(r, a, 0, frees, nfrees);
    a->state = SM_ARRAY_FAILED;
    sm_reg_array_set_error(a, msg);
    memset(a->filled, 0, (size_t)a->n);
    sm_reg_save_array(r, a);
}

sm_err sm_reg_array_info(sm_registry *r, const sm_reg_array *a, sm_array_info *info, char *err,
                         size_t errlen)
{
    memset(info, 0, sizeof *info);
    info->shards = calloc((size_t)a->n, sizeof *info->shards);
    if (!info->shards)
        return sm_reg_oom(err, errlen);
    info->nshards = a->n;
    info->id.v = a->id;
    snprintf(info->name, sizeof info->name, "%s", a->name);
    info->dtype = a->dtype;
    info->shape = a->shape;
    info->shard_shape = a->shard_shape;
    info->mesh_id.v = a->mesh_id;
    snprintf(info->mesh_name, sizeof info->mesh_name, "%s", a->mesh_name);
    info->sharding = a->sharding;
    sm_sharding_type_str(&a->sharding, a->dtype, &a->shape, info->type, sizeof info->type);
    info->state = a->state;
    snprintf(info->error, sizeof info->error, "%s", a->error);
    if (sm_shape_nbytes(&a->shape, a->dtype, &info->bytes, NULL, 0))
        info->bytes = -1;
    for (int p = 0; p < a->n; p++) {
        sm_shard_info *s = &info->shards[p];
        sm_reg_worker *w = sm_reg_worker_by_id(r, a->worker[p]);
        s->device = a->slices[p].device;
        s->worker_id.v = a->worker[p];
        if (w)
            snprintf(s->worker_address, sizeof s->worker_address, "%s", w->address);
        memcpy(s->coords, a->slices[p].coords, sizeof s->coords);
        s->index = a->slices[p].index;
        s->replica_id = a->slices[p].replica_id;
        s->present = a->filled[p] && w && w->alive;
        s->spilled = s->present && a->spilled[p];
    }
    if (a->ncopies && !(info->copies = calloc((size_t)a->ncopies, sizeof *info->copies))) {
        sm_array_info_free(info);
        return sm_reg_oom(err, errlen);
    }
    info->ncopies = a->ncopies;
    for (int k = 0; k < a->ncopies; k++) {
        const sm_reg_copy *cp = &a->copies[k];
        sm_shard_info *s = &info->copies[k];
        sm_reg_worker *w = sm_reg_worker_by_id(r, cp->worker);
        s->device = cp->device;
        s->worker_id.v = cp->worker;
        if (w)
            snprintf(s->worker_address, sizeof s->worker_address, "%s", w->address);
        memcpy(s->coords, a->slices[cp->of].coords, sizeof s->coords);
        s->index = a->slices[cp->of].index;
        s->replica_id = -1;
        s->present = cp->filled && w && w->alive;
        s->stored_as = SM_REG_COPY_ID(a->id, cp->of);
    }
    return SM_OK;
}

/* ---- creation ------------------------------------------------------------- */

/* Bytes of one full copy of a (0 if it does not compute). */
static int64_t sm_reg_array_bytes(const sm_reg_array *a)
{
    int64_t b = 0;
    return sm_shape_nbytes(&a->shape, a->dtype, &b, NULL, 0) ? 0 : b;
}

/* A new pending array record for sharding s (validated against shape). */
sm_err sm_reg_array_new(sm_registry *r, const char *name, sm_dtype dtype, const sm_sharding *s,
                        const sm_reg_mesh *rm, const sm_shape *shape, const uint32_t *worker,
                        int64_t now_ms, uint32_t deadline_ms, sm_reg_array **out, char *err,
                        size_t errlen)
{
    sm_reg_array *a = sm_reg_array_alloc(s->mesh.ndevices);
    sm_err rc;
    *out = NULL;
    if (!a)
        return sm_reg_oom(err, errlen);
    rc = sm_sharding_init(&a->sharding, &s->mesh, &s->spec, shape, err, errlen);
    if (!rc)
        rc = sm_sharding_shard_shape(&a->sharding, shape, &a->shard_shape, err, errlen);
    if (!rc)
        rc = sm_sharding_indices(&a->sharding, shape, a->slices, err, errlen);
    int64_t bytes = 0;
    if (!rc && (rc = sm_shape_nbytes(shape, dtype, &bytes, err, errlen)) == SM_OK &&
        r->max_array_bytes > 0 && bytes > r->max_array_bytes)
        rc = sm_fail(err, errlen, SM_ERESOURCE,
                     "an array of %lld bytes (%s%s) is larger than the %lld MiB this coordinator "
                     "takes (--max-array-mb)",
                     (long long)bytes, sm_dtype_name(dtype),
                     sm_shape_format(shape, (char[200]){0}, 200),
                     (long long)(r->max_array_bytes >> 20));
    const char *tenant = sm_tenant_current();
    sm_tenant_quota q = sm_tenants_quota(r->tenants, tenant);
    if (!rc && q.max_bytes > 0) {
        int64_t held = 0;
        for (const sm_reg_array *o = r->arrays; o; o = o->next)
            if (!strcmp(o->tenant, tenant) && o->state != SM_ARRAY_FAILED)
                held += sm_reg_array_bytes(o);
        if (held + bytes > q.max_bytes)
            rc = sm_fail(err, errlen, SM_ERESOURCE,
                         "tenant %s holds %lld bytes of arrays; %lld more would pass its quota "
                         "of %lld (max-bytes in --tokens): delete some first",
                         tenant, (long long)held, (long long)bytes, (long long)q.max_bytes);
    }
    if (rc) {
        sm_reg_array_destroy(a);
        return rc;
    }
    snprintf(a->tenant, sizeof a->tenant, "%s", tenant);
    snprintf(a->name, sizeof a->name, "%s", name ? name : "");
    a->dtype = dtype;
    a->shape = *shape;
    a->mesh_id = rm->id;
    snprintf(a->mesh_name, sizeof a->mesh_name, "%s", rm->name);
    a->state = SM_ARRAY_PENDING;
    memcpy(a->worker, worker, sizeof *worker * (size_t)a->n);
    a->deadline_ms = deadline_ms ? deadline_ms : r->default_deadline_ms;
    a->deadline = now_ms + a->deadline_ms;
    *out = a;
    return SM_OK;
}

/* PUT_LOCAL: the process map of the mesh (workers owning its devices, in
 * process-index order) into pm / its buffers; *self the map index of
 * process, -1 if it holds no device of the mesh. */
static sm_err sm_reg_local_procs(sm_registry *r, const sm_mesh *m, int process, int *proc_index,
                                 int *proc_ndev, int32_t *proc_devices, sm_proc_map *pm, int *self,
                                 char *err, size_t errlen)
{
    sm_reg_worker *ws[SM_MAX_DEVICES];
    int nw = 0, off = 0;
    for (int p = 0; p < m->ndevices; p++) {
        sm_reg_worker *w = sm_reg_worker_of_device(r, m->devices[p]);
        int k;
        for (k = 0; k < nw && ws[k] != w; k++)
            ;
        if (k == nw)
            ws[nw++] = w;
    }
    for (int i = 1; i < nw; i++)
        for (int k = i; k > 0 && ws[k - 1]->process_index > ws[k]->process_index; k--) {
            sm_reg_worker *t = ws[k];
            ws[k] = ws[k - 1];
            ws[k - 1] = t;
        }
    *self = -1;
    for (int i = 0; i < nw; i++) {
        proc_index[i] = ws[i]->process_index;
        proc_ndev[i] = 0;
        if (ws[i]->process_index == process)
            *self = i;
        for (int p = 0; p < m->ndevices; p++)
            if (sm_reg_worker_of_device(r, m->devices[p]) == ws[i])
                proc_devices[off + proc_ndev[i]++] = m->devices[p];
        off += proc_ndev[i];
    }
    *pm = (sm_proc_map){nw, proc_ndev, proc_devices};
    if (*self < 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "process %d owns no device of the mesh (its processes are those of the "
                       "%d workers holding its devices)",
                       process, nw);
    return SM_OK;
}

/* Checks a later PUT_LOCAL call against the array it attaches to. */
static sm_err sm_reg_local_match(const sm_reg_array *a, const sm_svc_create_array_req *req,
                                 const sm_sharding *s, char *err, size_t errlen)
{
    char x[160], y[160];
    if (!a->local || a->state != SM_ARRAY_PENDING)
        return sm_fail(err, errlen, SM_EEXIST,
                       "array '%s' already exists and is not a pending process-local upload",
                       a->name);
    if (req->dtype != a->dtype)
        return sm_fail(err, errlen, SM_EINVAL, "array '%s' has dtype %s, this part has %s", a->name,
                       sm_dtype_name(a->dtype), sm_dtype_name(req->dtype));
    if (!sm_pspec_equal(&s->spec, &a->sharding.spec) ||
        s->mesh.ndevices != a->sharding.mesh.ndevices ||
        memcmp(s->mesh.devices, a->sharding.mesh.devices,
               sizeof s->mesh.devices[0] * (size_t)s->mesh.ndevices))
        return sm_fail(err, errlen, SM_EINVAL,
                       "array '%s' is sharded %s over another mesh or order; this part says %s",
                       a->name, sm_pspec_format(&a->sharding.spec, x, sizeof x),
                       sm_pspec_format(&s->spec, y, sizeof y));
    if (!sm_shape_equal(&req->local_shape, &a->local_shape))
        return sm_fail(err, errlen, SM_EINVAL,
                       "array '%s' takes local data of shape %s from every process, this part "
                       "has %s",
                       a->name, sm_shape_format(&a->local_shape, x, sizeof x),
                       sm_shape_format(&req->local_shape, y, sizeof y));
    if (req->has_shape && !sm_shape_equal(&req->shape, &a->shape))
        return sm_fail(err, errlen, SM_EINVAL, "array '%s' has global shape %s, this part says %s",
                       a->name, sm_shape_format(&a->shape, x, sizeof x),
                       sm_shape_format(&req->shape, y, sizeof y));
    return SM_OK;
}

static sm_err sm_reg_create_local(sm_registry *r, const sm_svc_create_array_req *req,
                                  const sm_sharding *s, const sm_reg_mesh *rm,
                                  const uint32_t *worker, int64_t now_ms, sm_reg_array **out,
                                  sm_svc_create_array_reply *reply, char *err, size_t errlen)
{
    int *pidx = NULL, *pndev = NULL, self;
    int32_t *pdevs = NULL;
    sm_local_plan *plan = NULL;
    sm_reg_array *a = NULL, *existing = NULL;
    sm_proc_map pm;
    sm_err rc;
    *out = NULL;
    pidx = malloc(sizeof *pidx * SM_MAX_DEVICES);
    pndev = malloc(sizeof *pndev * SM_MAX_DEVICES);
    pdevs = malloc(sizeof *pdevs * SM_MAX_DEVICES);
    if (!pidx || !pndev || !pdevs) {
        rc = sm_reg_oom(err, errlen);
        goto fail;
    }
    rc = sm_reg_local_procs(r, &s->mesh, req->process, pidx, pndev, pdevs, &pm, &self, err, errlen);
    if (rc)
        goto fail;
    if (req->name && *req->name)
        existing = sm_reg_array_find(r, (sm_array_ref){{0}, req->name}, NULL, 0);
    else if (pm.nprocs > 1) {
        rc = sm_fail(err, errlen, SM_EINVAL,
                     "a process-local upload over %d processes needs an array name so the "
                     "parts can meet",
                     pm.nprocs);
        goto fail;
    }
    if (existing) {
        rc = sm_reg_local_match(existing, req, s, err, errlen);
        if (rc)
            goto fail;
    }
    rc = sm_local_plan_create(s, &pm, &req->local_shape,
                              existing         ? &existing->shape
                              : req->has_shape ? &req->shape
                                               : NULL,
                              &plan, err, errlen);
    if (rc)
        goto fail;
    rc = sm_plan_local_targets_create(&plan->procs[self], &reply->targets, &reply->ntargets, err,
                                      errlen);
    if (rc)
        goto fail;
    if (!existing) {
        rc = sm_reg_array_new(r, req->name, req->dtype, s, rm, &plan->global_shape, worker, now_ms,
                              req->deadline_ms, &a, err, errlen);
        if (rc)
            goto fail;
        a->local = 1;
        a->local_shape = req->local_shape;
        a->nprocs = pm.nprocs;
        a->proc_index = pidx;
        pidx = NULL;
        a->proc_started = calloc((size_t)pm.nprocs, 1);
        if (!a->proc_started) {
            rc = sm_reg_oom(err, errlen);
            goto fail;
        }
        rc = sm_reg_array_insert(r, a, err, errlen);
        if (rc)
            goto fail;
        existing = a;
        a = NULL;
    }
    existing->proc_started[self] = 1;
    *out = existing;
    rc = SM_OK;
fail:
    if (rc) {
        sm_plan_targets_free(reply->targets, reply->ntargets);
        reply->targets = NULL;
        reply->ntargets = 0;
    }
    sm_reg_array_destroy(a);
    sm_local_plan_free(plan);
    free(pidx);
    free(pndev);
    free(pdevs);
    return rc;
}

sm_err sm_registry_array_create(sm_registry *r, const sm_svc_create_array_req *req, int64_t now_ms,
                                sm_svc_create_array_reply *out, char *err, size_t errlen)
{
    sm_err rc;
    sm_sharding s;
    sm_reg_mesh *rm = NULL;
    sm_reg_array *a = NULL;
    uint32_t *worker = NULL;
    const char *name = req->name ? req->name : "";
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->mu);
    if ((int)req->dtype < 0 || req->dtype >= SM_DTYPE_COUNT) {
        rc = sm_fail(err, errlen, SM_EINVAL, "dtype %d is not a known dtype", (int)req->dtype);
        goto out;
    }
    if (*name && (rc = sm_reg_array_name_check(r, name, err, errlen)))
        goto out;
    rc = sm_reg_sharding_resolve(r, &req->sharding, &s, &rm, err, errlen);
    if (!rc && !req->job_output)
        rc = sm_pspec_check_reduced(&s.spec, "an uploaded array", err, errlen);
    if (rc)
        goto out;
    worker = malloc(sizeof *worker * (size_t)s.mesh.ndevices);
    if (!worker) {
        rc = sm_reg_oom(err, errlen);
        goto out;
    }
    rc = sm_reg_mesh_workers(r, &s.mesh, worker, err, errlen);
    if (rc)
        goto out;
    if (req->kind == SM_PUT_LOCAL) {
        sm_reg_array *la;
        rc = sm_reg_create_local(r, req, &s, rm, worker, now_ms, &la, out, err, errlen);
        if (rc)
            goto out;
        rc = sm_reg_array_info(r, la, &out->array, err, errlen);
        goto out; /* attached or created: done */
    }
    if (req->kind != SM_PUT_WHOLE && req->kind != SM_PUT_SHARDS) {
        rc = sm_fail(err, errlen, SM_EINVAL, "put kind %d is not whole, shards or local",
                     (int)req->kind);
        goto out;
    }
    if (!req->has_shape) {
        rc = sm_fail(err, errlen, SM_EINVAL, "a %s upload needs the global shape",
                     req->kind == SM_PUT_WHOLE ? "whole-array" : "per-shard");
        goto out;
    }
    if (*name) {
        sm_array_ref ref = {{0}, name};
        if (sm_reg_array_find(r, ref, NULL, 0)) {
            rc = sm_fail(err, errlen, SM_EEXIST, "an array named '%s' already exists", name);
            goto out;
        }
    }
    rc = sm_reg_array_new(r, name, req->dtype, &s, rm, &req->shape, worker, now_ms,
                          req->deadline_ms, &a, err, errlen);
    if (rc)
        goto out;
    /* A job's output is recorded once it is ready: a restart fails the job,
     * and its pending outputs need no record (their ids are kept apart). */
    a->unsaved = req->job_output;
    rc = sm_plan_targets_create(a->slices, a->n, req->kind, &out->targets, &out->ntargets, err,
                                errlen);
    if (!rc)
        rc = sm_reg_array_insert(r, a, err, errlen);
    if (!rc)
        rc = sm_reg_array_info(r, a, &out->array, err, errlen);
    if (rc) {
        sm_reg_array_unlink(r, a);
        sm_reg_array_destroy(a);
        goto out;
    }
    SM_INFO("array %llu%s%s%s created: %s, %d targets, deadline %u ms", (unsigned long long)a->id,
            *name ? " '" : "", name, *name ? "'" : "", out->array.type, out->ntargets,
            a->deadline_ms);
out:
    if (rc) {
        sm_plan_targets_free(out->targets, out->ntargets);
        sm_array_info_free(&out->array);
        memset(out, 0, sizeof *out);
    }
    pthread_mutex_unlock(&r->mu);
    free(worker);
    return rc;
}

sm_err sm_reg_array_get(sm_registry *r, sm_array_ref ref, sm_reg_array **out, char *label,
                        size_t labellen, char *err, size_t errlen)
{
    if (!(*out = sm_reg_array_find(r, ref, err, errlen)))
        return ref.id.v || (ref.name && *ref.name) ? SM_ENOTFOUND : SM_EINVAL;
    if (label)
        sm_reg_array_label(*out, label, labellen);
    return SM_OK;
}

sm_err sm_reg_array_during(sm_registry *r, sm_array_id id, const char *what, sm_reg_array **out,
                           char *label, size_t labellen, char *err, size_t errlen)
{
    if (!(*out = sm_reg_array_find(r, (sm_array_ref){id, NULL}, NULL, 0)))
        return sm_fail(err, errlen, SM_EPRECONDITION, "array %llu was deleted during %s",
                       (unsigned long long)id.v, what);
    sm_reg_array_label(*out, label, labellen);
    return SM_OK;
}

/* ---- describe, list, delete ------------------------------------------------ */

sm_err sm_registry_array_describe(sm_registry *r, sm_array_ref ref, sm_array_info *out, char *err,
                                  size_t errlen)
{
    sm_reg_array *a;
    pthread_mutex_lock(&r->mu);
    sm_err rc = sm_reg_array_get(r, ref, &a, NULL, 0, err, errlen);
    if (!rc)
        rc = sm_reg_array_info(r, a, out, err, errlen);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_array_list(sm_registry *r, sm_array_info **out, int *n, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    pthread_mutex_lock(&r->mu);
    *n = 0;
    *out = calloc(r->narrays ? (size_t)r->narrays : 1, sizeof **out);
    if (!*out)
        rc = sm_reg_oom(err, errlen);
    for (const sm_reg_array *a = r->arrays; !rc && a; a = a->next) {
        if (!sm_tenant_sees(a->tenant))
            continue;
        rc = sm_reg_array_info(r, a, &(*out)[*n], err, errlen);
        if (!rc)
            (*n)++;
    }
    if (rc && *out) {
        sm_array_info_list_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_array_delete(sm_registry *r, sm_array_ref ref, sm_reg_free **frees, int *nfrees,
                                char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    char label[SM_NAME_MAX + 16];
    *frees = NULL;
    *nfrees = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a;
    if (!(rc = sm_reg_array_get(r, ref, &a, NULL, 0, err, errlen))) {
        sm_reg_array_frees(r, a, 0, frees, nfrees);
        sm_reg_array_unlink(r, a);
        SM_INFO("%s deleted", sm_reg_array_label(a, label, sizeof label));
        sm_reg_array_destroy(a);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}
