/* registry_reshard: the registry's side of a reshard: the new array, its
 * plan (plan.h) turned into one Assemble request per worker, and the
 * outcome. See registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

void sm_registry_assemble_free(sm_reg_assemble *parts, int n)
{
    if (!parts)
        return;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < parts[i].req.nshards; k++)
            free(parts[i].req.shards[k].pieces);
        free(parts[i].req.shards);
        free(parts[i].addrs);
    }
    free(parts);
}

sm_err sm_reg_array_target(sm_registry *r, const char *name, const sm_sharding_ref *ref,
                           const char *what, sm_sharding *s, sm_reg_mesh **rm, char *err,
                           size_t errlen)
{
    sm_err rc;
    if (*name && (rc = sm_reg_array_name_check(r, name, err, errlen)))
        return rc;
    if (*name && sm_reg_array_find(r, (sm_array_ref){{0}, name}, NULL, 0))
        return sm_fail(err, errlen, SM_EEXIST, "an array named '%s' already exists", name);
    if ((rc = sm_reg_sharding_resolve(r, ref, s, rm, err, errlen)))
        return rc;
    return sm_pspec_check_reduced(&s->spec, what, err, errlen);
}

sm_err sm_reg_assemble_build(sm_registry *r, const sm_reg_assemble_src *src, sm_dtype dtype,
                             uint64_t new_id, const sm_plan_reshard *plan, sm_reg_assemble **out,
                             int *nout, char *err, size_t errlen)
{
    sm_reg_assemble *parts = calloc((size_t)plan->nshards, sizeof *parts);
    int np = 0;
    if (!parts)
        goto oom;
    for (int j = 0; j < plan->nshards; j++) {
        const sm_plan_shard *ps = &plan->shards[j];
        int k;
        for (k = 0; k < np && parts[k].t.worker_id != ps->worker; k++)
            ;
        if (k == np) {
            sm_reg_assemble *pa = &parts[np++];
            sm_reg_target_set(&pa->t, sm_reg_worker_by_id(r, ps->worker));
            pa->req.array_id.v = new_id;
            pa->req.dtype = dtype;
            pa->req.shards = calloc((size_t)plan->nshards, sizeof *pa->req.shards);
            if (!pa->req.shards)
                goto oom;
            if (src->array) { /* an address per piece */
                int total = 0;
                for (int q = 0; q < plan->nshards; q++)
                    if (plan->shards[q].worker == ps->worker)
                        total += plan->shards[q].npieces;
                if (!(pa->addrs = calloc(total ? (size_t)total : 1, sizeof *pa->addrs)))
                    goto oom;
            } else {
                pa->req.ckpt_dir = src->dir;
                pa->req.nfiles = src->nfiles;
                pa->req.files = src->files;
            }
        }
        sm_reg_assemble *pa = &parts[k];
        pa->t.devices[pa->t.ndevices++] = ps->device;
        int used = 0;
        for (int s = 0; s < pa->req.nshards; s++)
            used += pa->req.shards[s].npieces;
        sm_svc_assemble_shard *sh = &pa->req.shards[pa->req.nshards++];
        sh->device = ps->device;
        sh->shape = ps->shape;
        sh->pieces = calloc(ps->npieces ? (size_t)ps->npieces : 1, sizeof *sh->pieces);
        if (!sh->pieces)
            goto oom;
        for (int q = 0; q < ps->npieces; q++) {
            const sm_plan_piece *pp = &ps->pieces[q];
            sm_svc_piece *sp = &sh->pieces[sh->npieces++];
            if (src->array) {
                char *addr = pa->addrs[used + q];
                if (pp->src_worker != ps->worker)
                    snprintf(addr, SM_ADDR_MAX, "%s",
                             sm_reg_worker_by_id(r, pp->src_worker)->address);
                sp->src_address = addr;
                sp->src_array.v = sm_reg_slot_store_id(src->array, pp->src_pos);
                sp->src_device = pp->src_device;
            } else {
                sp->src_address = "";
                sp->src_file = pp->src_device + 1;
            }
            sp->src_box = pp->src_box;
            memcpy(sp->dst_offset, pp->dst_offset, sizeof sp->dst_offset);
        }
    }
    *out = parts;
    *nout = np;
    return SM_OK;
oom:
    sm_registry_assemble_free(parts, np);
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a %s",
                   src->array ? "reshard" : "load");
}

sm_err sm_reg_assemble_plan(sm_registry *r, const sm_reg_assemble_src *src,
                            const sm_device_slice *slices, const sm_plan_owner *own, int n,
                            sm_reg_array *a, const uint32_t *worker, sm_reg_assemble **parts,
                            int *nparts, char *err, size_t errlen)
{
    sm_plan_reshard plan = {0};
    sm_plan_owner *dst_own = malloc(sizeof *dst_own * (size_t)(a->n ? a->n : 1));
    if (!dst_own)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a %s",
                       src->array ? "reshard" : "load");
    for (int p = 0; p < a->n; p++)
        dst_own[p] = (sm_plan_owner){worker[p], 1};
    sm_err rc =
        sm_plan_reshard_create(slices, own, n, a->slices, dst_own, a->n, &plan, err, errlen);
    if (!rc)
        rc = sm_reg_assemble_build(r, src, a->dtype, r->next_array, &plan, parts, nparts, err,
                                   errlen);
    if (!rc && (rc = sm_reg_array_insert(r, a, err, errlen))) {
        sm_registry_assemble_free(*parts, *nparts);
        *parts = NULL;
        *nparts = 0;
    }
    sm_plan_reshard_free(&plan);
    free(dst_own);
    return rc;
}

sm_err sm_registry_reshard_begin(sm_registry *r, const sm_svc_reshard_req *req, int64_t now_ms,
                                 sm_array_id *new_id, sm_reg_assemble **parts, int *nparts,
                                 char *err, size_t errlen)
{
    sm_err rc;
    sm_sharding s;
    sm_reg_mesh *rm;
    sm_reg_array *a = NULL;
    uint32_t *worker = NULL;
    sm_plan_owner *src_own = NULL;
    sm_device_slice *src_slices = NULL;
    const char *name = req->name ? req->name : "";
    char label[SM_NAME_MAX + 16];
    *parts = NULL;
    *nparts = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *src;
    if ((rc = sm_reg_array_get(r, req->array, &src, label, sizeof label, err, errlen)))
        goto out;
    if (src->state != SM_ARRAY_READY && src->state != SM_ARRAY_DEGRADED) {
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s is %s and cannot be resharded", label,
                     sm_array_state_name(src->state));
        goto out;
    }
    if ((rc = sm_reg_array_target(r, name, &req->sharding, "a reshard's target", &s, &rm, err,
                                  errlen)))
        goto out;
    if (src->sharding.spec.nunreduced) { /* moving blocks would not sum them */
        char sp[300];
        rc = sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                     "%s is unreduced (%s): resharding it sums its blocks, which a Reshard call "
                     "does not do; run reshard(x, P(...)) in a jit program (libshmap's "
                     "sm_client_reshard, shmapctl reshard and the Python package do)",
                     label, sm_pspec_format(&src->sharding.spec, sp, sizeof sp));
        goto out;
    }
    int nsrc = sm_reg_nslots(src);
    worker = malloc(sizeof *worker * (size_t)s.mesh.ndevices);
    src_own = malloc(sizeof *src_own * (size_t)nsrc);
    src_slices = malloc(sizeof *src_slices * (size_t)nsrc);
    if (!worker || !src_own || !src_slices) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a reshard");
        goto out;
    }
    rc = sm_reg_mesh_workers(r, &s.mesh, worker, err, errlen);
    if (rc)
        goto out;
    rc = sm_reg_array_new(r, name, src->dtype, &s, rm, &src->shape, worker, now_ms,
                          req->deadline_ms, &a, err, errlen);
    if (rc)
        goto out;
    /* every slot holding a block is a source: the mesh's shards, then the
     * copies (last among equals: their replica ids come after the mesh's) */
    for (int p = 0; p < nsrc; p++) {
        src_slices[p] = src->slices[sm_reg_slot_block(src, p)];
        if (p >= src->n) {
            src_slices[p].device = sm_reg_slot_device(src, p);
            src_slices[p].replica_id = SM_MAX_DEVICES + p;
        }
        src_own[p] = (sm_plan_owner){sm_reg_slot_worker(src, p), sm_reg_slot_present(r, src, p)};
    }
    sm_reg_assemble_src from = {.array = src};
    if ((rc = sm_reg_assemble_plan(r, &from, src_slices, src_own, nsrc, a, worker, parts, nparts,
                                   err, errlen)))
        goto out;
    new_id->v = a->id;
    SM_INFO("reshard of %s into array %llu over %d workers", label, (unsigned long long)a->id,
            *nparts);
    a = NULL;
out:
    pthread_mutex_unlock(&r->mu);
    sm_reg_array_destroy(a);
    free(worker);
    free(src_own);
    free(src_slices);
    return rc;
}

/* sm_registry_reshard_end under r->mu. */
static sm_err reshard_end_locked(sm_registry *r, sm_array_id id, int ok, sm_array_info *info,
                                 char *err, size_t errlen)
{
    char label[SM_NAME_MAX + 16];
    sm_reg_array *a;
    sm_err rc = sm_reg_array_during(r, id, "the reshard", &a, label, sizeof label, err, errlen);
    if (rc)
        goto out;
    if (a->state != SM_ARRAY_PENDING) {
        rc = sm_fail(err, errlen, SM_EPRECONDITION, "%s became %s during the reshard%s%s", label,
                     sm_array_state_name(a->state), a->error[0] ? ": " : "", a->error);
        ok = 0;
    }
    if (!ok) {
        sm_reg_array_unlink(r, a);
        sm_reg_array_destroy(a);
        goto out;
    }
    memset(a->filled, 1, (size_t)a->n);
    a->state = SM_ARRAY_READY;
    sm_reg_save_array(r, a);
    rc = sm_reg_array_info(r, a, info, err, errlen);
    SM_INFO("%s is ready (reshard)", label);
out:
    return rc;
}

sm_err sm_registry_reshard_end(sm_registry *r, sm_array_id id, int ok, sm_array_info *info,
                               char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    sm_err rc = reshard_end_locked(r, id, ok, info, err, errlen);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_job_done(sm_registry *r, uint64_t job, int state, const char *tenant,
                            const sm_array_id *outs, int nout, sm_array_info *infos, int *ndone,
                            char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    char why[512];
    *ndone = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_tx_begin(r);
    for (int k = 0; !rc && k < nout; k++) {
        if ((rc = reshard_end_locked(r, outs[k], 1, &infos[k], why, sizeof why)))
            snprintf(err, errlen, "output %d: %s", k, why);
        else
            *ndone = k + 1;
    }
    if (!rc)
        sm_reg_job_save_locked(r, job, state, "", tenant);
    sm_reg_tx_end(r);
    pthread_mutex_unlock(&r->mu);
    return rc;
}
