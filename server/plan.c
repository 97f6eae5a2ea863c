/* plan: upload targets and reshard pieces. See plan.h. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

static sm_err sm_plan_oom(char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory while planning");
}

void sm_plan_targets_free(sm_svc_upload_target *t, int n)
{
    if (!t)
        return;
    for (int i = 0; i < n; i++)
        free(t[i].devices);
    free(t);
}

/* Appends device to target k of t (*nt targets so far, each with room for
 * n devices); k == *nt first opens a new target of global and local. -1
 * when out of memory (t stays the caller's to free). */
static int sm_plan_target_add(sm_svc_upload_target *t, int *nt, int k, int n,
                              const sm_index *global, const sm_index *local, int32_t device)
{
    if (k == *nt) {
        if (!(t[k].devices = calloc((size_t)n, sizeof *t[k].devices)))
            return -1;
        t[k].global_index = *global;
        t[k].local_slice = *local;
        (*nt)++;
    }
    t[k].devices[t[k].ndevices++] = device;
    return 0;
}

sm_err sm_plan_targets_create(const sm_device_slice *slices, int n, sm_put_kind kind,
                              sm_svc_upload_target **out, int *n_out, char *err, size_t errlen)
{
    sm_svc_upload_target *t = NULL;
    int nt = 0;
    *out = NULL;
    *n_out = 0;
    if (kind != SM_PUT_WHOLE && kind != SM_PUT_SHARDS)
        return sm_fail(err, errlen, SM_EINVAL,
                       "put kind %d has no targets without a process-local plan", (int)kind);
    t = calloc(n > 0 ? (size_t)n : 1, sizeof *t);
    if (!t)
        return sm_plan_oom(err, errlen);
    for (int i = 0; i < n; i++) {
        int k = nt;
        if (kind == SM_PUT_WHOLE)
            for (k = 0; k < nt; k++)
                if (sm_index_equal(&t[k].global_index, &slices[i].index))
                    break;
        if (sm_plan_target_add(t, &nt, k, n, &slices[i].index, &(sm_index){0}, slices[i].device)) {
            sm_plan_targets_free(t, nt);
            return sm_plan_oom(err, errlen);
        }
    }
    *out = t;
    *n_out = nt;
    return SM_OK;
}

sm_err sm_plan_local_targets_create(const sm_local_proc *proc, sm_svc_upload_target **out,
                                    int *n_out, char *err, size_t errlen)
{
    int n = proc->ndevices;
    sm_svc_upload_target *t = calloc(n > 0 ? (size_t)n : 1, sizeof *t);
    int nt = 0;
    *out = NULL;
    *n_out = 0;
    if (!t)
        return sm_plan_oom(err, errlen);
    for (int i = 0; i < n; i++) {
        const sm_local_device *d = &proc->devices[i];
        int k;
        for (k = 0; k < nt; k++)
            if (sm_index_equal(&t[k].local_slice, &d->local_slice))
                break;
        if (sm_plan_target_add(t, &nt, k, n, &d->global_index, &d->local_slice, d->device)) {
            sm_plan_targets_free(t, nt);
            return sm_plan_oom(err, errlen);
        }
    }
    *out = t;
    *n_out = nt;
    return SM_OK;
}

void sm_plan_reshard_free(sm_plan_reshard *p)
{
    if (!p)
        return;
    if (p->shards)
        for (int i = 0; i < p->nshards; i++)
            free(p->shards[i].pieces);
    free(p->shards);
    p->shards = NULL;
    p->nshards = 0;
}

/* Intersection of a and b into *out; 1 if it is non-empty (a scalar box
 * always overlaps). */
static int sm_plan_overlap(const sm_index *a, const sm_index *b, sm_index *out)
{
    out->rank = a->rank;
    for (int d = 0; d < a->rank; d++) {
        int64_t lo = a->r[d].start > b->r[d].start ? a->r[d].start : b->r[d].start;
        int64_t hi = a->r[d].stop < b->r[d].stop ? a->r[d].stop : b->r[d].stop;
        if (lo >= hi)
            return 0;
        out->r[d] = (sm_range){lo, hi};
    }
    return 1;
}

/* The source position to copy box src[first]'s data from, for a new shard
 * on worker w: same worker first, else the lowest replica id alive; -1 if
 * none. */
static int sm_plan_pick_source(const sm_device_slice *src, const sm_plan_owner *own, int nsrc,
                               int first, uint32_t w)
{
    int best_local = -1, best_alive = -1;
    for (int i = first; i < nsrc; i++) {
        if (!sm_index_equal(&src[i].index, &src[first].index) || !own[i].alive)
            continue;
        if (own[i].worker == w &&
            (best_local < 0 || src[i].replica_id < src[best_local].replica_id))
            best_local = i;
        if (best_alive < 0 || src[i].replica_id < src[best_alive].replica_id)
            best_alive = i;
    }
    return best_local >= 0 ? best_local : best_alive;
}

sm_err sm_plan_reshard_create(const sm_device_slice *src, const sm_plan_owner *src_own, int nsrc,
                              const sm_device_slice *dst, const sm_plan_owner *dst_own, int ndst,
                              sm_plan_reshard *out, char *err, size_t errlen)
{
    sm_err rc;
    int *distinct = NULL; /* positions of the first device of each distinct source box */
    int ndistinct = 0;
    char buf[160];

    memset(out, 0, sizeof *out);
    if (nsrc < 1 || ndst < 1 || src[0].index.rank != dst[0].index.rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a reshard needs source and destination maps of the same rank");
    distinct = malloc(sizeof *distinct * (size_t)nsrc);
    out->shards = calloc((size_t)ndst, sizeof *out->shards);
    if (!distinct || !out->shards) {
        rc = sm_plan_oom(err, errlen);
        goto fail;
    }
    out->nshards = ndst;
    for (int i = 0; i < nsrc; i++) {
        int k;
        for (k = 0; k < ndistinct; k++)
            if (sm_index_equal(&src[distinct[k]].index, &src[i].index))
                break;
        if (k == ndistinct)
            distinct[ndistinct++] = i;
    }
    for (int j = 0; j < ndst; j++) {
        sm_plan_shard *s = &out->shards[j];
        s->device = dst[j].device;
        s->worker = dst_own[j].worker;
        s->index = dst[j].index;
        s->shape = sm_index_shape(&dst[j].index);
        s->pieces = calloc((size_t)ndistinct, sizeof *s->pieces);
        if (!s->pieces) {
            rc = sm_plan_oom(err, errlen);
            goto fail;
        }
        for (int k = 0; k < ndistinct; k++) {
            const sm_device_slice *sb = &src[distinct[k]];
            sm_index inter;
            if (!sm_plan_overlap(&sb->index, &dst[j].index, &inter))
                continue;
            int from = sm_plan_pick_source(src, src_own, nsrc, distinct[k], s->worker);
            if (from < 0) {
                rc = sm_fail(err, errlen, SM_EUNAVAILABLE,
                             "no live worker holds source box %s (needed by device %d)",
                             sm_index_format(&sb->index, buf, sizeof buf), (int)s->device);
                goto fail;
            }
            sm_plan_piece *p = &s->pieces[s->npieces++];
            p->src_pos = from;
            p->src_device = src[from].device;
            p->src_worker = src_own[from].worker;
            p->src_box.rank = inter.rank;
            for (int d = 0; d < inter.rank; d++) {
                p->src_box.r[d].start = inter.r[d].start - sb->index.r[d].start;
                p->src_box.r[d].stop = inter.r[d].stop - sb->index.r[d].start;
                p->dst_offset[d] = inter.r[d].start - dst[j].index.r[d].start;
            }
        }
    }
    free(distinct);
    return SM_OK;
fail:
    free(distinct);
    sm_plan_reshard_free(out);
    return rc;
}
