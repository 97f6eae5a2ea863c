/* registry_upload: the registry's side of uploads and downloads: header
 * checks, device reservations, fill marks. See registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

/* Appends device d of worker w to the per-worker list t[0..*n). */
static void sm_reg_target_add(sm_reg_target *t, int *n, const sm_reg_worker *w, int32_t d)
{
    int k;
    for (k = 0; k < *n && t[k].worker_id != w->id; k++)
        ;
    if (k == *n) {
        memset(&t[k], 0, sizeof t[k]);
        t[k].worker_id = w->id;
        t[k].ch = w->ch;
        snprintf(t[k].address, sizeof t[k].address, "%s", w->address);
        (*n)++;
    }
    if (t[k].ndevices < SM_MAX_WORKER_DEVICES)
        t[k].devices[t[k].ndevices++] = d;
}

/* Checks an upload header against a (see sm_registry_upload_begin). */
static sm_err sm_reg_upload_check(sm_registry *r, const sm_reg_array *a,
                                  const sm_svc_upload_header *h, int *pos, char *err, size_t errlen)
{
    char label[SM_NAME_MAX + 16], x[128], y[128];
    int64_t bytes;
    sm_reg_array_label(a, label, sizeof label);
    if (a->state != SM_ARRAY_PENDING)
        return sm_fail(err, errlen, SM_EPRECONDITION, "%s is %s and takes no more uploads%s%s",
                       label, sm_array_state_name(a->state), a->error[0] ? ": " : "", a->error);
    if (h->ndevices < 1 || h->ndevices > a->n)
        return sm_fail(err, errlen, SM_EINVAL, "an upload to %s must list 1 to %d devices, not %d",
                       label, a->n, h->ndevices);
    for (int i = 0; i < h->ndevices; i++) {
        int32_t d = h->devices[i];
        pos[i] = sm_mesh_find_device(&a->sharding.mesh, d);
        if (pos[i] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "device %d holds no shard of %s", (int)d, label);
        for (int k = 0; k < i; k++)
            if (pos[k] == pos[i])
                return sm_fail(err, errlen, SM_EINVAL, "device %d is listed twice", (int)d);
        if (!sm_index_equal(&a->slices[pos[i]].index, &a->slices[pos[0]].index))
            return sm_fail(err, errlen, SM_EINVAL,
                           "devices %d and %d of %s hold different boxes (%s and %s); upload "
                           "them separately",
                           (int)h->devices[0], (int)d, label,
                           sm_index_format(&a->slices[pos[0]].index, x, sizeof x),
                           sm_index_format(&a->slices[pos[i]].index, y, sizeof y));
        if (a->filled[pos[i]])
            return sm_fail(err, errlen, SM_EPRECONDITION, "device %d of %s already has its data",
                           (int)d, label);
        if (a->busy[pos[i]])
            return sm_fail(err, errlen, SM_EPRECONDITION,
                           "device %d of %s is being uploaded by another call", (int)d, label);
        sm_reg_worker *w = sm_reg_worker_by_id(r, a->worker[pos[i]]);
        if (!w || !w->alive)
            return sm_fail(err, errlen, SM_EUNAVAILABLE, "device %d is on a lost worker", (int)d);
    }
    if (!sm_shape_equal(&h->shape, &a->shard_shape))
        return sm_fail(err, errlen, SM_EINVAL, "the shard shape of %s is %s, not %s", label,
                       sm_shape_format(&a->shard_shape, x, sizeof x),
                       sm_shape_format(&h->shape, y, sizeof y));
    if (h->dtype != a->dtype)
        return sm_fail(err, errlen, SM_EINVAL, "%s has dtype %s, the upload says %s", label,
                       sm_dtype_name(a->dtype), sm_dtype_name(h->dtype));
    if (sm_shape_nbytes(&a->shard_shape, a->dtype, &bytes, err, errlen))
        return SM_EOVERFLOW;
    if (h->total_bytes != bytes)
        return sm_fail(err, errlen, SM_EINVAL, "a shard of %s is %lld bytes, the upload says %lld",
                       label, (long long)bytes, (long long)h->total_bytes);
    return SM_OK;
}

sm_err sm_registry_upload_begin(sm_registry *r, const sm_svc_upload_header *h, int64_t now_ms,
                                sm_reg_target **targets, int *ntargets, int64_t *deadline_ms,
                                char *err, size_t errlen)
{
    sm_err rc;
    int *pos = NULL;
    sm_reg_target *t = NULL;
    int nt = 0;
    *targets = NULL;
    *ntargets = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a = sm_reg_array_find(r, (sm_array_ref){h->array_id, NULL}, err, errlen);
    if (!a) {
        rc = SM_ENOTFOUND;
        goto out;
    }
    pos = malloc(sizeof *pos * (size_t)(h->ndevices > 0 ? h->ndevices : 1));
    t = malloc(sizeof *t * (size_t)(h->ndevices > 0 ? h->ndevices : 1));
    if (!pos || !t) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting an upload");
        goto out;
    }
    rc = sm_reg_upload_check(r, a, h, pos, err, errlen);
    if (rc)
        goto out;
    for (int i = 0; i < h->ndevices; i++) {
        a->busy[pos[i]] = 1;
        sm_reg_target_add(t, &nt, sm_reg_worker_by_id(r, a->worker[pos[i]]), h->devices[i]);
    }
    *deadline_ms = a->deadline - now_ms;
    *targets = t;
    *ntargets = nt;
    t = NULL;
out:
    pthread_mutex_unlock(&r->mu);
    free(pos);
    free(t);
    return rc;
}

sm_err sm_registry_commit_begin(sm_registry *r, const sm_svc_commit_req *req, int64_t now_ms,
                                sm_reg_target **targets, int *ntargets, int64_t *deadline_ms,
                                char *err, size_t errlen)
{
    sm_svc_upload_header h;
    memset(&h, 0, sizeof h);
    h.array_id = req->array_id;
    h.ndevices = req->ndevices;
    h.devices = (int32_t *)req->devices;
    h.total_bytes = req->bytes;
    *targets = NULL;
    *ntargets = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a = sm_reg_array_find(r, (sm_array_ref){req->array_id, NULL}, err, errlen);
    if (a) {
        h.shape = a->shard_shape; /* fixed at creation */
        h.dtype = a->dtype;
    }
    pthread_mutex_unlock(&r->mu);
    if (!a)
        return SM_ENOTFOUND;
    return sm_registry_upload_begin(r, &h, now_ms, targets, ntargets, deadline_ms, err, errlen);
}

sm_err sm_registry_upload_end(sm_registry *r, sm_array_id id, const int32_t *devices, int n, int ok,
                              int *ready, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    char label[SM_NAME_MAX + 16];
    *ready = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a;
    if ((rc = sm_reg_array_during(r, id, "the upload", &a, label, sizeof label, err, errlen)))
        goto out;
    for (int i = 0; i < n; i++) {
        int p = sm_mesh_find_device(&a->sharding.mesh, devices[i]);
        if (p >= 0)
            a->busy[p] = 0;
    }
    if (a->state != SM_ARRAY_PENDING) {
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s became %s during the upload%s%s", label,
                     sm_array_state_name(a->state), a->error[0] ? ": " : "", a->error);
        goto out;
    }
    if (!ok)
        goto out;
    for (int i = 0; i < n; i++) {
        int p = sm_mesh_find_device(&a->sharding.mesh, devices[i]);
        if (p >= 0)
            a->filled[p] = 1;
    }
    int all = 1;
    for (int p = 0; p < a->n; p++)
        all &= a->filled[p];
    if (all) {
        a->state = SM_ARRAY_READY;
        sm_reg_save_array(r, a);
        SM_INFO("%s is ready", label);
    }
    *ready = all;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void sm_registry_upload_checksum(sm_registry *r, sm_array_id id, const int32_t *devices, int n,
                                 uint64_t checksum)
{
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a = sm_reg_array_find(r, (sm_array_ref){id, NULL}, NULL, 0);
    for (int i = 0; a && i < n; i++) {
        int p = sm_mesh_find_device(&a->sharding.mesh, devices[i]);
        if (p >= 0)
            a->sums[p] = checksum;
    }
    if (a && a->state == SM_ARRAY_READY)
        sm_reg_save_array(r, a);
    pthread_mutex_unlock(&r->mu);
}

sm_err sm_registry_download_begin(sm_registry *r, sm_array_ref ref, int32_t device, sm_array_id *id,
                                  sm_reg_target *worker, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    char label[SM_NAME_MAX + 16];
    pthread_mutex_lock(&r->mu);
    /* a copy (Replicate) is read by its own id, which names its array */
    uint64_t store = ref.id.v;
    if (SM_REG_IS_COPY_ID(store))
        ref.id.v = SM_REG_COPY_OWNER(store);
    sm_reg_array *a;
    if ((rc = sm_reg_array_get(r, ref, &a, label, sizeof label, err, errlen)))
        goto out;
    if (!SM_REG_IS_COPY_ID(store))
        store = a->id;
    if (a->state == SM_ARRAY_PENDING) {
        int filled = 0;
        for (int p = 0; p < a->n; p++)
            filled += a->filled[p];
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s is pending (%d of %d shards arrived)",
                     label, filled, a->n);
        goto out;
    }
    if (a->state != SM_ARRAY_READY && a->state != SM_ARRAY_DEGRADED) {
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s is %s: %s", label,
                     sm_array_state_name(a->state), a->error);
        goto out;
    }
    int p = sm_reg_slot_find(a, store, device);
    if (p < 0) {
        rc = sm_fail(err, errlen, SM_EINVAL, "device %d holds no shard of %s", (int)device, label);
        goto out;
    }
    sm_reg_worker *w = sm_reg_worker_by_id(r, sm_reg_slot_worker(a, p));
    if (!w || !w->alive || !sm_reg_slot_filled(a, p)) {
        rc = sm_fail(err, errlen, SM_EUNAVAILABLE, "device %d of %s is on a lost worker",
                     (int)device, label);
        goto out;
    }
    id->v = store;
    memset(worker, 0, sizeof *worker);
    worker->worker_id = w->id;
    worker->ch = w->ch;
    snprintf(worker->address, sizeof worker->address, "%s", w->address);
    worker->ndevices = 1;
    worker->devices[0] = device;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}
