/* sm_local: planning of process-local uploads, JAX's
 * make_array_from_process_local_data (jax/_src/array.py) and its helpers
 * local_to_global_shape / get_process_index_and_count /
 * num_addressable_indices (jax/_src/sharding_impls.py). See sm_sharding.h. */
#include "sm_sharding.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Working state: which process owns each mesh position, and each
 * position's shard number along every dimension. */
typedef struct {
    int n;                       /* mesh devices */
    int *proc_of;                /* [n] */
    int64_t *shard;              /* [n * SM_MAX_RANK] */
    int64_t factor[SM_MAX_RANK]; /* shards along each dimension */
    unsigned char *seen;         /* scratch: [nprocs * SM_MAX_DEVICES] shard bitmap */
} sm_local_work;

static void sm_local_work_free(sm_local_work *w)
{
    free(w->proc_of);
    free(w->shard);
    free(w->seen);
}

/* Checks the process map against the mesh and fills w->proc_of. */
static sm_err sm_local_map_procs(const sm_sharding *s, const sm_proc_map *pm, sm_local_work *w,
                                 char *err, size_t errlen)
{
    for (int i = 0; i < w->n; i++)
        w->proc_of[i] = -1;
    int off = 0;
    for (int p = 0; p < pm->nprocs; p++) {
        if (pm->proc_ndev[p] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "process %d has a negative device count %d", p,
                           pm->proc_ndev[p]);
        for (int k = 0; k < pm->proc_ndev[p]; k++) {
            int32_t dev = pm->proc_devices[off + k];
            int pos = sm_mesh_find_device(&s->mesh, dev);
            if (pos < 0)
                return sm_fail(err, errlen, SM_EINVAL, "device %d of process %d is not in the mesh",
                               (int)dev, p);
            if (w->proc_of[pos] >= 0)
                return sm_fail(err, errlen, SM_EINVAL,
                               "device %d belongs to both process %d and process %d", (int)dev,
                               w->proc_of[pos], p);
            w->proc_of[pos] = p;
        }
        off += pm->proc_ndev[p];
    }
    for (int i = 0; i < w->n; i++)
        if (w->proc_of[i] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "device %d of the mesh belongs to no process",
                           (int)s->mesh.devices[i]);
    return SM_OK;
}

/* Marks, per process, the shards it addresses along dim (w->seen) and
 * returns in counts[p] how many distinct ones. */
static void sm_local_mark(const sm_local_work *w, int nprocs, int dim, int *counts)
{
    memset(w->seen, 0, (size_t)nprocs * SM_MAX_DEVICES);
    for (int p = 0; p < nprocs; p++)
        counts[p] = 0;
    for (int i = 0; i < w->n; i++) {
        int p = w->proc_of[i];
        unsigned char *bit = &w->seen[(size_t)p * SM_MAX_DEVICES + w->shard[i * SM_MAX_RANK + dim]];
        if (!*bit) {
            *bit = 1;
            counts[p]++;
        }
    }
}

/* get_process_index_and_count: the number of distinct shard sets the
 * processes hold along dim, or 0 when the sharding is non-uniform there
 * (processes hold different numbers of shards, or sets that overlap
 * without being equal). Processes without devices do not count. */
static int sm_local_count(const sm_local_work *w, int nprocs, int dim, int *counts)
{
    sm_local_mark(w, nprocs, dim, counts);
    int per = -1, nunique = 0, total = 0;
    int64_t f = w->factor[dim];
    for (int p = 0; p < nprocs; p++) {
        if (counts[p] == 0)
            continue;
        if (per >= 0 && counts[p] != per)
            return 0;
        per = counts[p];
        int dup = 0;
        for (int q = 0; q < p && !dup; q++)
            if (counts[q] && memcmp(&w->seen[(size_t)q * SM_MAX_DEVICES],
                                    &w->seen[(size_t)p * SM_MAX_DEVICES], (size_t)f) == 0)
                dup = 1;
        if (!dup) {
            nunique++;
            total += counts[p];
        }
    }
    /* The unique sets partition the dimension iff their sizes add up to
     * the number of shards (every shard is held by some process). */
    return total == f ? nunique : 0;
}

static sm_err sm_local_oom(char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning a process-local upload");
}

void sm_local_plan_free(sm_local_plan *p)
{
    if (!p)
        return;
    if (p->procs)
        for (int i = 0; i < p->nprocs; i++)
            free(p->procs[i].devices);
    free(p->procs);
    free(p);
}

/* The global shape when global_shape is not given (JAX's
 * local_to_global_shape), failing on non-uniform dimensions. */
static sm_err sm_local_infer(const sm_local_work *w, const sm_proc_map *pm, const sm_shape *local,
                             sm_shape *global, int *counts, char *err, size_t errlen)
{
    char bad[SM_MAX_RANK * 4 + 16] = "";
    size_t nbad = 0;
    int nnon = 0;
    *global = *local;
    for (int d = 0; d < local->rank; d++) {
        int k = pm->nprocs == 1 ? 1 : sm_local_count(w, pm->nprocs, d, counts);
        if (k == 0) {
            nbad += (size_t)snprintf(bad + nbad, sizeof bad - nbad, "%s%d", nnon ? ", " : "", d);
            nnon++;
            continue;
        }
        if (local->dims[d] > INT64_MAX / k)
            return sm_fail(err, errlen, SM_EOVERFLOW,
                           "the global size of dimension %d (%lld x %d shards) overflows", d,
                           (long long)local->dims[d], k);
        global->dims[d] = local->dims[d] * k;
    }
    if (nnon)
        return sm_fail(err, errlen, SM_EINVAL,
                       "cannot infer the global shape: the sharding is non-uniform along "
                       "dimension%s %s (the processes hold different numbers of shards there, "
                       "or overlapping but different shard sets); pass global_shape explicitly",
                       nnon > 1 ? "s" : "", bad);
    return SM_OK;
}

/* JAX's check of an explicit global shape: every dimension of the local
 * data equals the global size or what the process's devices address. */
static sm_err sm_local_check_dims(const sm_local_work *w, const sm_proc_map *pm,
                                  const sm_shape *local, const sm_shape *global, int *counts,
                                  char *err, size_t errlen)
{
    char ls[128], gs[128];
    for (int d = 0; d < local->rank; d++) {
        if (local->dims[d] == global->dims[d])
            continue;
        int64_t shard = global->dims[d] / w->factor[d];
        sm_local_mark(w, pm->nprocs, d, counts);
        for (int p = 0; p < pm->nprocs; p++) {
            if (counts[p] == 0 || shard * counts[p] == local->dims[d])
                continue;
            return sm_fail(err, errlen, SM_EINVAL,
                           "local data of shape %s does not fit global shape %s: in dimension "
                           "%d the local size is %lld, but it must be the global size %lld or "
                           "the %lld elements process %d addresses (%d shard%s of %lld)",
                           sm_shape_format(local, ls, sizeof ls),
                           sm_shape_format(global, gs, sizeof gs), d, (long long)local->dims[d],
                           (long long)global->dims[d], (long long)(shard * counts[p]), p, counts[p],
                           counts[p] == 1 ? "" : "s", (long long)shard);
        }
    }
    return SM_OK;
}

sm_err sm_local_plan_create(const sm_sharding *s, const sm_proc_map *procs,
                            const sm_shape *local_shape, const sm_shape *global_shape,
                            sm_local_plan **out, char *err, size_t errlen)
{
    sm_local_work w = {0};
    sm_local_plan *plan = NULL;
    sm_device_slice *ix = NULL;
    int *counts = NULL;
    sm_shape global;
    char ls[128], gs[128];
    sm_err rc;

    *out = NULL;
    if (procs->nprocs < 1 || procs->nprocs > SM_MAX_DEVICES)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a process-local upload needs 1 to %d processes, got %d", SM_MAX_DEVICES,
                       procs->nprocs);
    rc = sm_pspec_check_mesh(&s->spec, &s->mesh, err, errlen);
    if (rc)
        return rc;
    if (global_shape && global_shape->rank != local_shape->rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "global shape %s and local shape %s have different ranks",
                       sm_shape_format(global_shape, gs, sizeof gs),
                       sm_shape_format(local_shape, ls, sizeof ls));
    if (local_shape->rank < 0 || local_shape->rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "the local data has rank %d; ranks go from 0 to %d",
                       local_shape->rank, SM_MAX_RANK);
    for (int d = 0; d < local_shape->rank; d++)
        if (local_shape->dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "dimension %d of the local data has negative size %lld", d,
                           (long long)local_shape->dims[d]);
    /* The spec must fit the rank; sizes are checked on the global shape. */
    rc = sm_pspec_check(&s->spec, &s->mesh, &(sm_shape){local_shape->rank}, "the local data", err,
                        errlen);
    if (rc)
        return rc;

    w.n = s->mesh.ndevices;
    w.proc_of = malloc(sizeof *w.proc_of * (size_t)w.n);
    w.shard = malloc(sizeof *w.shard * (size_t)w.n * SM_MAX_RANK);
    w.seen = malloc((size_t)procs->nprocs * SM_MAX_DEVICES);
    counts = malloc(sizeof *counts * (size_t)procs->nprocs);
    ix = malloc(sizeof *ix * (size_t)w.n);
    if (!w.proc_of || !w.shard || !w.seen || !counts || !ix) {
        rc = sm_local_oom(err, errlen);
        goto fail;
    }
    rc = sm_local_map_procs(s, procs, &w, err, errlen);
    if (rc)
        goto fail;
    for (int i = 0; i < w.n; i++) {
        int64_t coords[SM_MAX_AXES];
        sm_mesh_coords(&s->mesh, i, coords);
        for (int d = 0; d < local_shape->rank; d++) {
            int64_t r = 0;
            if (d < s->spec.nentries)
                for (int k = 0; k < s->spec.e[d].naxes; k++) {
                    int a = sm_mesh_axis(&s->mesh, s->spec.e[d].axes[k]);
                    r = r * s->mesh.sizes[a] + coords[a];
                }
            w.shard[i * SM_MAX_RANK + d] = r;
        }
    }
    for (int d = 0; d < local_shape->rank; d++)
        w.factor[d] = sm_pspec_dim_factor(&s->spec, &s->mesh, d);

    if (procs->nprocs == 1) {
        if (global_shape && !sm_shape_equal(global_shape, local_shape)) {
            rc = sm_fail(err, errlen, SM_EINVAL,
                         "with one process, global_shape must be absent or equal the local "
                         "shape %s, got %s",
                         sm_shape_format(local_shape, ls, sizeof ls),
                         sm_shape_format(global_shape, gs, sizeof gs));
            goto fail;
        }
        global = *local_shape;
    } else if (global_shape) {
        global = *global_shape;
    } else {
        rc = sm_local_infer(&w, procs, local_shape, &global, counts, err, errlen);
        if (rc)
            goto fail;
    }
    rc = sm_pspec_check(&s->spec, &s->mesh, &global, "the global array", err, errlen);
    if (rc)
        goto fail;
    rc = sm_local_check_dims(&w, procs, local_shape, &global, counts, err, errlen);
    if (rc)
        goto fail;
    rc = sm_sharding_indices(s, &global, ix, err, errlen);
    if (rc)
        goto fail;

    plan = calloc(1, sizeof *plan);
    if (!plan) {
        rc = sm_local_oom(err, errlen);
        goto fail;
    }
    plan->global_shape = global;
    plan->nprocs = procs->nprocs;
    plan->procs = calloc((size_t)procs->nprocs, sizeof *plan->procs);
    if (!plan->procs) {
        rc = sm_local_oom(err, errlen);
        goto fail;
    }
    for (int p = 0; p < procs->nprocs; p++) {
        sm_local_proc *lp = &plan->procs[p];
        lp->process = p;
        lp->local_shape = *local_shape;
        for (int i = 0; i < w.n; i++)
            lp->ndevices += w.proc_of[i] == p;
        lp->devices = calloc(lp->ndevices ? (size_t)lp->ndevices : 1, sizeof *lp->devices);
        if (!lp->devices) {
            rc = sm_local_oom(err, errlen);
            goto fail;
        }
        int slot = 0;
        for (int i = 0; i < w.n; i++) {
            if (w.proc_of[i] != p)
                continue;
            sm_local_device *ld = &lp->devices[slot++];
            ld->device = ix[i].device;
            ld->pos = i;
            ld->global_index = ix[i].index;
            ld->local_slice = ix[i].index; /* dimensions held whole */
        }
    }
    /* Along a dimension not held whole, a device's local slice is the
     * position of its shard among its process's distinct shards (in
     * increasing order), times the shard size (JAX's local_slice). */
    for (int d = 0; d < global.rank; d++) {
        if (local_shape->dims[d] == global.dims[d])
            continue;
        int64_t shard = global.dims[d] / w.factor[d];
        sm_local_mark(&w, procs->nprocs, d, counts);
        for (int p = 0; p < procs->nprocs; p++) {
            const unsigned char *seen = &w.seen[(size_t)p * SM_MAX_DEVICES];
            int rank_of[SM_MAX_DEVICES];
            int fill = 0;
            for (int64_t r = 0; r < w.factor[d]; r++)
                rank_of[r] = seen[r] ? fill++ : -1;
            for (int k = 0; k < plan->procs[p].ndevices; k++) {
                sm_local_device *ld = &plan->procs[p].devices[k];
                int64_t start = rank_of[w.shard[ld->pos * SM_MAX_RANK + d]] * shard;
                ld->local_slice.r[d] = (sm_range){start, start + shard};
            }
        }
    }
    *out = plan;
    plan = NULL;
    rc = SM_OK;
fail:
    sm_local_plan_free(plan);
    free(ix);
    free(counts);
    sm_local_work_free(&w);
    return rc;
}
