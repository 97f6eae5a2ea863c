/* sm_exec_coll: handlers of the collectives (the table of docs/semantics.md, shard_map). The
 * comm moves contiguous rank-ordered chunks; the keywords (axis, tiled,
 * scatter_dimension, split_axis, concat_axis) become transposes before or
 * after the exchange that make the chunks contiguous. One entry point,
 * sm_exec_coll, makes the op's group and sequence number for all of them. */
#include <stdlib.h>
#include <string.h>

#include "sm_exec_impl.h"
#include "sm_ir_infer.h"

/* The op's group and the next sequence number. */
static sm_err sm_exec_group(sm_exec_ctx *x, const sm_ir_op *op, sm_comm_group *g, uint64_t *seq,
                            char *err, size_t errlen)
{
    sm_err e = sm_comm_group_make(&x->p->mesh, x->pos, op->attrs.naxes, op->attrs.axes, x->members,
                                  g, err, errlen);
    if (e)
        return e;
    if (sm_ir_has_groups(op)) { /* axis_index_groups: the caller's group only */
        const sm_ir_attrs *a = &op->attrs;
        int per = (int)(a->ints.n / a->ints2.v[0]), all[SM_IR_MAX_INTS];
        if (per < 1 || a->ints.n != g->size || a->ints.n > SM_IR_MAX_INTS)
            return sm_fail(err, errlen, SM_EINVAL, "axis_index_groups do not match the group");
        memcpy(all, x->members, sizeof(int) * (size_t)g->size);
        for (int k = 0; k < a->ints.n; k++) {
            if (a->ints.v[k] != g->rank)
                continue;
            int first = k - k % per;
            for (int j = 0; j < per; j++)
                x->members[j] = all[a->ints.v[first + j]];
            g->rank = k % per;
            g->size = per;
            break;
        }
    }
    if (seq) {
        if (!x->comm)
            return sm_fail(err, errlen, SM_EINVAL, "the run has no comm for collectives");
        *seq = x->seq++;
    }
    return SM_OK;
}

/* out (shape os, rank+1 axes when expanded) = transpose of src (shape ss)
 * by perm, or a plain copy when perm is the identity. */
static sm_err sm_exec_permute_axes(sm_dtype t, const void *src, const sm_shape *ss, const int *perm,
                                   void *out, char *err, size_t errlen)
{
    int ident = 1;
    for (int d = 0; d < ss->rank; d++)
        ident &= perm[d] == d;
    if (ident) {
        int64_t n = 1;
        for (int d = 0; d < ss->rank; d++)
            n *= ss->dims[d];
        if (n)
            memcpy(out, src, (size_t)n * sm_dtype_size(t));
        return SM_OK;
    }
    return sm_kern_transpose(t, src, ss, perm, out, err, errlen);
}

static int sm_exec_norm(int64_t a, int rank)
{
    return (int)(a < 0 ? a + rank : a);
}

/* perm moving axis d of s to the front, others in order; returns its shape. */
static sm_shape sm_exec_front_perm(const sm_shape *s, int d, int *perm)
{
    sm_shape ts = {.rank = s->rank};
    perm[0] = d;
    for (int i = 0, k = 1; i < s->rank; i++)
        if (i != d)
            perm[k++] = i;
    for (int i = 0; i < s->rank; i++)
        ts.dims[i] = s->dims[perm[i]];
    return ts;
}

/* The buffers of an exchange of rank-ordered chunks. */
typedef struct {
    sm_array_pool *pool;
    void *front, *recv;
    size_t nfront, nrecv;
} sm_exec_staged;

/* Stages the operand of op for an exchange of rank-ordered chunks: st->front
 * gets in with dimension d moved to the front (by perm, shape *ts), and
 * st->recv rbytes for the result. The caller calls sm_exec_unstage, also on
 * failure. */
static sm_err sm_exec_stage(sm_array_pool *pool, const sm_ir_op *op, const sm_array *in, int d,
                            int64_t rbytes, int *perm, sm_shape *ts, sm_exec_staged *st, char *err,
                            size_t errlen)
{
    char what[64];
    sm_err e;
    memset(st, 0, sizeof *st);
    st->pool = pool;
    *ts = sm_exec_front_perm(&in->shape, d, perm);
    snprintf(what, sizeof what, "the buffers of %s", sm_op_name(op->kind));
    if ((e = sm_array_scratch(pool, (size_t)in->nbytes, what, &st->front, err, errlen)))
        return e;
    st->nfront = (size_t)in->nbytes;
    if ((e = sm_array_scratch(pool, (size_t)rbytes, what, &st->recv, err, errlen)))
        return e;
    st->nrecv = (size_t)rbytes;
    return sm_exec_permute_axes(in->dtype, in->data, &in->shape, perm, st->front, err, errlen);
}

static void sm_exec_unstage(sm_exec_staged *st)
{
    if (st->front)
        sm_array_data_free(st->pool, st->front, st->nfront);
    if (st->recv)
        sm_array_data_free(st->pool, st->recv, st->nrecv);
}

static sm_err sm_exec_preduce(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                              uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                              size_t errlen)
{
    sm_err e = SM_OK;
    sm_kern_reduce_op k = op->kind == SM_OP_PMAX   ? SM_KERN_MAX
                          : op->kind == SM_OP_PMIN ? SM_KERN_MIN
                                                   : SM_KERN_SUM;
    int64_t n = sm_exec_numel(out);
    sm_dtype t = in[0]->dtype;
    const void *src = in[0]->data;
    void *conv = NULL;
    if (t == SM_BOOL) { /* as JAX: bools are reduced as int32 */
        if ((e = sm_exec_as(in[0], SM_I32, &src, &conv, err, errlen)))
            return e;
        t = SM_I32;
    }
    void *tmp = NULL, *dst = out->data;
    size_t ntmp = (size_t)n * sm_dtype_size(t);
    if (t != out->dtype) { /* pmean of integers: sum in the input dtype, then f32 */
        if ((e = sm_array_scratch(x->pool, ntmp, "the sum of pmean", &tmp, err, errlen))) {
            free(conv);
            return e;
        }
        dst = tmp;
    }
    /* results written as they are (no conversion, no division after) may
     * be one output that members of a process share */
    const sm_comm_arrays arr = {in[0], out};
    int share = !conv && !tmp && op->kind != SM_OP_PMEAN;
    e = x->comm->all_reduce(x->cctx, g, seq, t, k, src, dst, n, share ? &arr : NULL, err, errlen);
    if (!e && tmp)
        e = sm_kern_astype(t, tmp, out->dtype, out->data, n, err, errlen);
    if (tmp)
        sm_array_data_free(x->pool, tmp, ntmp);
    free(conv);
    if (e || op->kind != SM_OP_PMEAN)
        return e;
    /* psum / n, as JAX divides (not a multiply by 1/n) */
    if ((e = sm_kern_divide_by(out->dtype, out->data, n, (double)g->size, err, errlen)) ==
        SM_EUNSUPPORTED)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "pmean of %s is not supported",
                       sm_dtype_name(out->dtype));
    return e;
}

static sm_err sm_exec_all_gather(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                                 uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                                 size_t errlen)
{
    sm_err e = SM_OK;
    const sm_shape *xs = &in[0]->shape;
    int a = sm_exec_norm(op->attrs.axis, xs->rank + (op->attrs.tiled ? 0 : 1));
    if (a == 0) { /* rank-order blocks are already the result */
        const sm_comm_arrays arr = {in[0], out};
        return x->comm->all_gather(x->cctx, g, seq, in[0]->data, out->data, in[0]->nbytes, &arr,
                                   err, errlen);
    }
    /* gathered: [n, x...]; the result moves n to just before x's dim a
     * (tiled: then merged with it, which is the same memory) */
    sm_shape gs = {.rank = xs->rank + 1, .dims = {g->size}};
    for (int d = 0; d < xs->rank; d++)
        gs.dims[d + 1] = xs->dims[d];
    if (gs.rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "all_gather of a rank-%d operand", xs->rank);
    /* the gathered blocks, which the devices of a process may share (one
     * written per worker), each then moving them into its own output */
    sm_array *tmp;
    if ((e = sm_array_create_in(x->pool, out->dtype, &gs, 0, &tmp, err, errlen)))
        return e;
    const sm_comm_arrays arr = {in[0], tmp};
    e = x->comm->all_gather(x->cctx, g, seq, in[0]->data, tmp->data, in[0]->nbytes, &arr, err,
                            errlen);
    int perm[SM_MAX_RANK];
    for (int d = 0, k = 0; d < gs.rank; d++)
        perm[d] = d == a ? 0 : 1 + k++;
    if (!e)
        e = sm_exec_permute_axes(out->dtype, tmp->data, &gs, perm, out->data, err, errlen);
    sm_array_free(tmp);
    return e;
}

static sm_err sm_exec_psum_scatter(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                                   uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                                   size_t errlen)
{
    sm_err e = SM_OK;
    const sm_shape *xs = &in[0]->shape;
    int d = sm_exec_norm(op->attrs.axis, xs->rank);
    int64_t chunk = sm_exec_numel(out);
    if (d == 0)
        return x->comm->reduce_scatter(x->cctx, g, seq, out->dtype, SM_KERN_SUM, in[0]->data,
                                       out->data, chunk, err, errlen);
    /* move the scatter dimension to the front so chunk r is contiguous */
    int perm[SM_MAX_RANK];
    sm_shape ts;
    sm_exec_staged st = {0};
    if ((e = sm_exec_stage(x->pool, op, in[0], d, chunk * (int64_t)sm_dtype_size(out->dtype), perm,
                           &ts, &st, err, errlen)))
        goto done;
    void *t = st.front, *r = st.recv;
    void *dst = op->attrs.tiled ? r : out->data; /* untiled: [others...] is the result */
    if ((e = x->comm->reduce_scatter(x->cctx, g, seq, out->dtype, SM_KERN_SUM, t, dst, chunk, err,
                                     errlen)))
        goto done;
    if (op->attrs.tiled) { /* [x_d/n, others...] back to dimension d */
        sm_shape rs = ts;
        rs.dims[0] = ts.dims[0] / g->size;
        int back[SM_MAX_RANK];
        for (int i = 0; i < xs->rank; i++)
            back[i] = i < d ? i + 1 : i == d ? 0 : i;
        e = sm_kern_transpose(out->dtype, r, &rs, back, out->data, err, errlen);
    }
done:
    sm_exec_unstage(&st);
    return e;
}

static sm_err sm_exec_all_to_all(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                                 uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                                 size_t errlen)
{
    sm_err e = SM_OK;
    const sm_shape *xs = &in[0]->shape;
    int rank = xs->rank, sa = sm_exec_norm(op->attrs.axis, rank);
    int ca = sm_exec_norm(op->attrs.axis2, rank), n = g->size;
    sm_dtype t = out->dtype;
    int perm[SM_MAX_RANK];
    sm_shape ts;
    sm_exec_staged st = {0};
    if (sa == 0 && ca == 0) /* the chunks are rows of in, the received ones rows of out */
        return x->comm->all_to_all(x->cctx, g, seq, in[0]->data, out->data, in[0]->nbytes / n, err,
                                   errlen);
    /* [x_sa, others...]: chunk j (x_sa/n rows) goes to rank j */
    if ((e = sm_exec_stage(x->pool, op, in[0], sa, in[0]->nbytes, perm, &ts, &st, err, errlen)))
        goto done;
    void *send = st.front, *recv = st.recv;
    if ((e = x->comm->all_to_all(x->cctx, g, seq, send, recv, in[0]->nbytes / n, err, errlen)))
        goto done;
    /* recv: [n (source), x_sa/n, others...] */
    sm_shape rs = {.rank = rank + 1, .dims = {n, xs->dims[sa] / n}};
    for (int i = 1; i < rank; i++)
        rs.dims[i + 1] = ts.dims[i];
    int rp[SM_MAX_RANK + 1];
    if (op->attrs.tiled) {
        /* result dim d: c_sa at sa; (source, dim) merged at ca */
        if (rs.rank > SM_MAX_RANK) {
            e = sm_fail(err, errlen, SM_EUNSUPPORTED, "all_to_all of a rank-%d operand", rank);
            goto done;
        }
        int k = 0, other = 2;
        for (int d = 0; d < rank; d++) {
            if (d == ca)
                rp[k++] = 0;
            rp[k++] = d == sa ? 1 : other++;
        }
        e = sm_exec_permute_axes(t, recv, &rs, rp, out->data, err, errlen);
    } else {
        /* drop the size-1 split axis: [n, others...]; source axis at ca */
        sm_shape us = ts;
        us.dims[0] = n;
        for (int d = 0, other = 1; d < rank; d++)
            rp[d] = d == ca ? 0 : other++;
        e = sm_exec_permute_axes(t, recv, &us, rp, out->data, err, errlen);
    }
done:
    sm_exec_unstage(&st);
    return e;
}

static sm_err sm_exec_ppermute(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                               uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                               size_t errlen)
{
    const sm_comm_arrays arr = {in[0], out};
    return x->comm->permute(x->cctx, g, seq, op->attrs.perm, op->attrs.nperm, in[0]->data,
                            out->data, in[0]->nbytes, &arr, err, errlen);
}

/* axis_index: the device's rank in the group; axis_size: the group size. */
static sm_err sm_exec_axis_scalar(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                                  uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                                  size_t errlen)
{
    int32_t v = op->kind == SM_OP_AXIS_INDEX ? g->rank : g->size;
    return sm_kern_astype(SM_I32, &v, out->dtype, out->data, 1, err, errlen);
}

/* A collective's handler: an sm_exec_fn given the op's group g and, for an
 * exchange, its sequence number. */
typedef sm_err (*sm_exec_coll_fn)(sm_exec_ctx *x, const sm_ir_op *op, const sm_comm_group *g,
                                  uint64_t seq, sm_array *const *in, sm_array *out, char *err,
                                  size_t errlen);

sm_err sm_exec_coll(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    sm_exec_coll_fn fn;
    switch (op->kind) {
    case SM_OP_PSUM:
    case SM_OP_PMEAN:
    case SM_OP_PMAX:
    case SM_OP_PMIN:
        fn = sm_exec_preduce;
        break;
    case SM_OP_ALL_GATHER:
        fn = sm_exec_all_gather;
        break;
    case SM_OP_PSUM_SCATTER:
        fn = sm_exec_psum_scatter;
        break;
    case SM_OP_PPERMUTE:
        fn = sm_exec_ppermute;
        break;
    case SM_OP_ALL_TO_ALL:
        fn = sm_exec_all_to_all;
        break;
    case SM_OP_AXIS_INDEX:
    case SM_OP_AXIS_SIZE: /* no exchange: no sequence number */
        fn = sm_exec_axis_scalar;
        break;
    default:
        return sm_fail(err, errlen, SM_EINVAL, "%s is not a collective", sm_op_name(op->kind));
    }
    sm_comm_group g;
    uint64_t seq = 0;
    int exchange = fn != sm_exec_axis_scalar;
    sm_err e = sm_exec_group(x, op, &g, exchange ? &seq : NULL, err, errlen);
    return e ? e : fn(x, op, &g, seq, in, out, err, errlen);
}
