/* registry_ckpt: the registry's side of checkpoints: which worker writes
 * which distinct shard of a saved array, and the new array of a load with
 * its plan (which stored file pieces each device reads). See registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

sm_err sm_registry_save_begin(sm_registry *r, sm_array_ref ref, sm_array_id *id,
                              sm_ckpt_manifest *m, sm_reg_save_part **parts, int *nparts,
                              char *label, size_t labellen, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    sm_reg_save_part *pa = NULL;
    int np = 0;
    memset(m, 0, sizeof *m);
    *parts = NULL;
    *nparts = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a;
    if ((rc = sm_reg_array_get(r, ref, &a, label, labellen, err, errlen)))
        goto out;
    if (a->state != SM_ARRAY_READY) {
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s is %s and cannot be saved", label,
                     sm_array_state_name(a->state));
        goto out;
    }
    if (a->dtype == SM_BF16) {
        rc = sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                     "%s is bf16, which numpy (and so a checkpoint's .npy files) cannot hold; "
                     "cast it to f32 first",
                     label);
        goto out;
    }
    id->v = a->id;
    m->dtype = a->dtype;
    m->shape = a->shape;
    m->sharding = a->sharding;
    int *first = calloc((size_t)a->n, sizeof *first); /* entry -> its first position */
    m->shards = calloc((size_t)a->n, sizeof *m->shards);
    int nw = 0; /* distinct workers: one part each (a part is ~30 KB) */
    for (int p = 0; p < a->n; p++) {
        int q;
        for (q = 0; q < p && a->worker[q] != a->worker[p]; q++)
            ;
        nw += q == p;
    }
    pa = calloc((size_t)nw, sizeof *pa);
    if (!first || !m->shards || !pa) {
        free(first);
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a save");
        goto out;
    }
    for (int p = 0; p < a->n && !rc; p++) {
        int k;
        for (k = 0; k < m->nshards && !sm_index_equal(&m->shards[k].index, &a->slices[p].index);
             k++)
            ;
        sm_ckpt_shard *s = &m->shards[k];
        if (k == m->nshards) {
            m->nshards++;
            first[k] = p;
            s->index = a->slices[p].index;
            sm_ckpt_file_name(k, s->file, sizeof s->file);
            if (!(s->devices = calloc((size_t)a->n, sizeof *s->devices)))
                rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a save");
        }
        if (s->devices)
            s->devices[s->ndevices++] = a->slices[p].device;
    }
    for (int k = 0; k < m->nshards && !rc; k++) {
        int p = first[k], q;
        sm_reg_worker *w = sm_reg_worker_by_id(r, a->worker[p]);
        for (q = 0; q < np && pa[q].t.worker_id != w->id; q++)
            ;
        if (q == np)
            sm_reg_target_set(&pa[np++].t, w);
        sm_reg_save_part *part = &pa[q];
        part->shard[part->nfiles] = k;
        part->files[part->nfiles++] =
            (sm_svc_ckpt_file){.file = m->shards[k].file, .device = a->slices[p].device};
    }
    free(first);
out:
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        sm_ckpt_manifest_free(m);
        free(pa);
        return rc;
    }
    *parts = pa;
    *nparts = np;
    return SM_OK;
}

sm_err sm_registry_any_worker(sm_registry *r, sm_reg_target *out, char *err, size_t errlen)
{
    sm_err rc = sm_fail(err, errlen, SM_EUNAVAILABLE, "no worker is alive to read a checkpoint");
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nworkers; i++)
        if (r->workers[i]->alive) {
            memset(out, 0, sizeof *out);
            sm_reg_target_set(out, r->workers[i]);
            rc = SM_OK;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_load_begin(sm_registry *r, const sm_svc_load_req *req, const sm_ckpt_manifest *m,
                              sm_svc_ckpt_file *files, int64_t now_ms, sm_array_id *new_id,
                              sm_reg_assemble **parts, int *nparts, char *err, size_t errlen)
{
    sm_err rc;
    sm_sharding s;
    sm_reg_mesh *rm;
    sm_reg_array *a = NULL;
    uint32_t *worker = NULL;
    sm_device_slice *src = NULL;
    sm_plan_owner *src_own = NULL;
    const char *name = req->name ? req->name : "";
    *parts = NULL;
    *nparts = 0;
    pthread_mutex_lock(&r->mu);
    if ((rc = sm_reg_array_target(r, name, &req->sharding, "a load's sharding", &s, &rm, err,
                                  errlen)))
        goto out;
    worker = malloc(sizeof *worker * (size_t)s.mesh.ndevices);
    src = calloc((size_t)m->nshards, sizeof *src);
    src_own = malloc(sizeof *src_own * (size_t)m->nshards);
    if (!worker || !src || !src_own) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a load");
        goto out;
    }
    if ((rc = sm_reg_mesh_workers(r, &s.mesh, worker, err, errlen)))
        goto out;
    if ((rc = sm_reg_array_new(r, name, m->dtype, &s, rm, &m->shape, worker, now_ms,
                               req->deadline_ms, &a, err, errlen)))
        goto out;
    for (int k = 0; k < m->nshards; k++) {
        src[k].device = k;
        src[k].pos = k;
        src[k].index = m->shards[k].index;
        src_own[k] = (sm_plan_owner){0, 1}; /* every worker reads the files */
    }
    sm_reg_assemble_src from = {NULL, req->dir, m->nshards, files};
    if ((rc = sm_reg_assemble_plan(r, &from, src, src_own, m->nshards, a, worker, parts, nparts,
                                   err, errlen)))
        goto out;
    new_id->v = a->id;
    SM_INFO("load of %s into array %llu over %d workers", req->dir, (unsigned long long)a->id,
            *nparts);
    a = NULL;
out:
    pthread_mutex_unlock(&r->mu);
    sm_reg_array_destroy(a);
    free(worker);
    free(src);
    free(src_own);
    return rc;
}
