/* sm_exec_local: split global inputs, run every device as a thread,
 * assemble global outputs (see header). */
#include "sm_exec_local.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_comm_local.h"
#include "sm_sharding.h"

typedef struct {
    const sm_exec_plan *plan;
    const sm_program *p;
    sm_comm_local *comm;
    int pos;
    sm_array **in;  /* nparams blocks (borrowed from the job's block table) */
    sm_array **out; /* nreturns blocks (owned) */
    sm_err e;
    char err[1024];
} sm_exec_dev;

static void *sm_exec_dev_main(void *arg)
{
    sm_exec_dev *d = arg;
    d->e = sm_exec_run_plan(d->plan, d->pos, &sm_comm_local_ops, d->comm, NULL, d->in, d->out,
                            d->err, sizeof d->err);
    return NULL;
}

/* Slices every device's block of global array g under spec; devices with
 * the same slice share one block. blocks[pos] are set; owners[pos] is 1
 * where blocks[pos] is the first (owning) reference. */
static sm_err sm_exec_split(const sm_program *p, const sm_ir_param *pa, const sm_array *g,
                            sm_device_slice *sl, sm_array **blocks, unsigned char *owners,
                            char *err, size_t errlen)
{
    sm_sharding sh = {.mesh = p->mesh, .spec = pa->spec};
    sm_err e = sm_sharding_indices(&sh, &pa->global, sl, err, errlen);
    if (e)
        return e;
    size_t el = sm_dtype_size(g->dtype);
    for (int pos = 0; pos < p->mesh.ndevices; pos++) {
        for (int q = 0; q < pos && !blocks[pos]; q++)
            if (owners[q] && sm_index_equal(&sl[q].index, &sl[pos].index))
                blocks[pos] = blocks[q];
        if (blocks[pos])
            continue;
        sm_shape bs = sm_index_shape(&sl[pos].index);
        int64_t off[SM_MAX_RANK], zero[SM_MAX_RANK] = {0};
        for (int d = 0; d < bs.rank; d++)
            off[d] = sl[pos].index.r[d].start;
        if ((e = sm_array_create(g->dtype, &bs, &blocks[pos], err, errlen)))
            return e;
        owners[pos] = 1;
        if ((e = sm_block_copy(blocks[pos]->data, &bs, zero, g->data, &g->shape, off, bs.dims, el,
                               err, errlen)))
            return e;
    }
    return SM_OK;
}

/* Assembles output r from the devices' blocks. */
static sm_err sm_exec_assemble(const sm_program *p, int r, sm_exec_dev *devs, sm_device_slice *sl,
                               sm_array **out, char *err, size_t errlen)
{
    const sm_ir_value *v = &p->values[p->returns[r]];
    sm_sharding sh = {.mesh = p->mesh, .spec = p->out_specs[r]};
    const sm_shape *gs = &p->out_global[r];
    sm_err e = sm_sharding_indices(&sh, gs, sl, err, errlen);
    if (e)
        return e;
    uint32_t named = 0;
    for (int d = 0; d < sh.spec.nentries; d++)
        for (int k = 0; k < sh.spec.e[d].naxes; k++)
            named |= 1u << sm_mesh_axis(&p->mesh, sh.spec.e[d].axes[k]);
    if ((e = sm_array_create(v->dtype, gs, out, err, errlen)))
        return e;
    int64_t zero[SM_MAX_RANK] = {0};
    for (int pos = 0; pos < p->mesh.ndevices; pos++) {
        int take = 1;
        for (int a = 0; a < p->mesh.naxes; a++)
            if (!(named & (1u << a)) && sl[pos].coords[a] != 0)
                take = 0; /* untiled: the block of coordinate 0 along a */
        if (!take)
            continue;
        const sm_array *b = devs[pos].out[r];
        int64_t off[SM_MAX_RANK];
        for (int d = 0; d < gs->rank; d++)
            off[d] = sl[pos].index.r[d].start;
        if ((e = sm_block_copy((*out)->data, gs, off, b->data, &b->shape, zero, b->shape.dims,
                               sm_dtype_size(v->dtype), err, errlen)))
            return e;
    }
    return SM_OK;
}

static sm_err sm_exec_local_check(const sm_program *p, sm_array *const *inputs, char *err,
                                  size_t errlen)
{
    for (int i = 0; i < p->nparams; i++) {
        const sm_ir_param *pa = &p->params[i];
        const sm_array *a = inputs[i];
        char want[64], got[64];
        if (!a)
            return sm_fail(err, errlen, SM_EINVAL, "argument '%s' is missing", pa->name);
        if (a->dtype != pa->dtype || !sm_shape_equal(&a->shape, &pa->global))
            return sm_fail(err, errlen, SM_EINVAL, "argument '%s' is %s%s, expected %s%s", pa->name,
                           sm_dtype_name(a->dtype), sm_shape_format(&a->shape, got, sizeof got),
                           sm_dtype_name(pa->dtype),
                           sm_shape_format(&pa->global, want, sizeof want));
        if (pa->spec.nunreduced)
            return sm_fail(
                err, errlen, SM_EUNIMPLEMENTED,
                "argument '%s' is unreduced: a local run takes whole arrays, and an "
                "unreduced array is the sum of per-device blocks (run it on the service)",
                pa->name);
    }
    for (int k = 0; k < p->nreturns; k++)
        if (p->out_specs[k].nunreduced)
            return sm_fail(
                err, errlen, SM_EUNIMPLEMENTED,
                "output %d is unreduced: a local run returns whole arrays (reshard it to "
                "a spec without unreduced axes, or run it on the service)",
                k);
    return SM_OK;
}

sm_err sm_exec_local_run(const sm_program *p, sm_array *const *inputs, sm_array **outputs,
                         const sm_exec_local_opts *opts, char *err, size_t errlen)
{
    int nd = p->mesh.ndevices, np = p->nparams, nr = p->nreturns;
    sm_exec_plan *plan = NULL;
    sm_comm_local *comm = NULL;
    sm_exec_dev *devs = calloc((size_t)nd, sizeof *devs);
    sm_array **blocks = calloc((size_t)nd * (size_t)(np + 1), sizeof *blocks);
    sm_array **outs = calloc((size_t)nd * (size_t)(nr + 1), sizeof *outs);
    unsigned char *owners = calloc((size_t)nd * (size_t)(np + 1), 1);
    sm_device_slice *sl = calloc((size_t)nd, sizeof *sl);
    pthread_t *th = calloc((size_t)nd, sizeof *th);
    int started = 0;
    sm_err e = SM_OK;
    for (int r = 0; r < nr; r++)
        outputs[r] = NULL;
    if (!devs || !blocks || !outs || !owners || !sl || !th) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for a local run of %d devices", nd);
        goto done;
    }
    if ((e = sm_exec_local_check(p, inputs, err, errlen)) ||
        (e = sm_exec_plan_create(p, &plan, err, errlen)) ||
        (e = sm_comm_local_create(opts ? opts->timeout_s : 0, &comm, err, errlen)))
        goto done;
    /* blocks[i * nd + pos]: parameter i on device pos */
    for (int i = 0; i < np; i++)
        if ((e = sm_exec_split(p, &p->params[i], inputs[i], sl, blocks + (size_t)i * nd,
                               owners + (size_t)i * nd, err, errlen)))
            goto done;
    sm_kern_set_threads(1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)4 << 20); /* kernels and OpenBLAS */
    for (int pos = 0; pos < nd; pos++) {
        sm_exec_dev *d = &devs[pos];
        d->plan = plan;
        d->p = p;
        d->comm = comm;
        d->pos = pos;
        d->out = outs + (size_t)pos * nr;
        d->in = malloc(sizeof(sm_array *) * (size_t)(np + 1));
        if (!d->in) {
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for device %d", pos);
            break;
        }
        for (int i = 0; i < np; i++)
            d->in[i] = blocks[(size_t)i * nd + pos];
        if (pthread_create(&th[pos], &attr, sm_exec_dev_main, d)) {
            e = sm_fail(err, errlen, SM_ERESOURCE, "cannot start the thread of device %d", pos);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    if (e)
        sm_comm_local_ops.abort(comm, err);
    for (int pos = 0; pos < started; pos++)
        pthread_join(th[pos], NULL);
    if (e)
        goto done;
    /* The root cause: the first error that is not a cancellation. */
    const sm_exec_dev *bad = NULL;
    for (int pos = 0; pos < nd; pos++)
        if (devs[pos].e && (!bad || (bad->e == SM_ECANCELLED && devs[pos].e != SM_ECANCELLED)))
            bad = &devs[pos];
    if (bad) {
        e = sm_fail(err, errlen, bad->e, "%s", bad->err);
        goto done;
    }
    for (int r = 0; r < nr && !e; r++)
        e = sm_exec_assemble(p, r, devs, sl, &outputs[r], err, errlen);
    if (e)
        for (int r = 0; r < nr; r++) {
            sm_array_free(outputs[r]);
            outputs[r] = NULL;
        }
done:
    if (devs)
        for (int pos = 0; pos < nd; pos++)
            free(devs[pos].in);
    if (blocks && owners)
        for (size_t k = 0; k < (size_t)nd * (size_t)np; k++)
            if (owners[k])
                sm_array_free(blocks[k]);
    if (outs)
        for (size_t k = 0; k < (size_t)nd * (size_t)nr; k++)
            sm_array_free(outs[k]);
    free(devs);
    free(blocks);
    free(outs);
    free(owners);
    free(sl);
    free(th);
    sm_comm_local_free(comm);
    sm_exec_plan_free(plan);
    return e;
}
