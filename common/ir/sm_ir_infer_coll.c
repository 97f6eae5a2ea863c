/* sm_ir_infer_coll: type rules of the collectives (the table of docs/semantics.md, shard_map).
 * n is the product of the sizes of the named axes. */
#include "sm_ir_infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "'i'" or "('i', 'j')" for messages. */
static const char *sm_ir_axes_text(const sm_ir_attrs *a, char *buf, size_t len)
{
    size_t o = 0;
    if (a->naxes != 1)
        o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "(");
    for (int i = 0; i < a->naxes; i++)
        o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s'%s'", i ? ", " : "", a->axes[i]);
    if (a->naxes != 1)
        snprintf(buf + o, len > o ? len - o : 0, ")");
    return buf;
}

/* Resolves the axes (*n devices); for messages, formats x's type into t
 * and the axes into ax[SM_IR_AX_LEN] (each when not NULL). */
#define SM_IR_AX_LEN 200
static sm_err sm_ir_coll_begin(const sm_program *p, const sm_ir_op *op, const sm_ir_value *x,
                               int64_t *n, char *t, size_t tlen, char *ax, char *err, size_t errlen)
{
    uint32_t mask;
    if (x)
        sm_ir_type_str(x, t, tlen);
    if (ax)
        sm_ir_axes_text(&op->attrs, ax, SM_IR_AX_LEN);
    sm_err e = sm_ir_axes_resolve(p, op, &mask, n, err, errlen);
    if (e || !sm_ir_has_groups(op))
        return e;
    /* axis_index_groups: equal-size groups that cover the ranks exactly once;
     * the collective acts within each group */
    const sm_ir_attrs *a = &op->attrs;
    int64_t ng = a->ints2.v[0];
    const char *name = sm_op_name(op->kind);
    if (ng < 1 || a->ints.n % ng || a->ints.n != *n)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: axis_index_groups must cover the %lld ranks of the axes exactly once "
                       "in groups of equal size, got %d indices in %lld groups",
                       name, (long long)*n, a->ints.n, (long long)ng);
    uint32_t seen = 0;
    for (int k = 0; k < a->ints.n; k++) {
        int64_t r = a->ints.v[k];
        if (r < 0 || r >= *n || (seen & (1u << r)))
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: axis_index_groups must name each of the ranks 0..%lld once, got "
                           "%lld %s",
                           name, (long long)*n - 1, (long long)r,
                           r < 0 || r >= *n ? "(out of range)" : "twice");
        seen |= 1u << r;
    }
    *n /= ng;
    return SM_OK;
}

int sm_ir_has_groups(const sm_ir_op *op)
{
    sm_op_kind k = op->kind;
    return (k == SM_OP_PSUM || k == SM_OP_PMEAN || k == SM_OP_PMAX || k == SM_OP_PMIN ||
            k == SM_OP_ALL_GATHER || k == SM_OP_PSUM_SCATTER || k == SM_OP_ALL_TO_ALL) &&
           op->attrs.has_ints2 && op->attrs.ints2.n == 1 && op->attrs.has_ints;
}

int sm_ir_gathers_invarying(const sm_ir_op *op)
{
    const char *to = op->attrs.spec;
    return to &&
           ((op->kind == SM_OP_ALL_GATHER &&
             (!strcmp(to, "invarying") || !strcmp(to, "reduced"))) ||
            (op->kind == SM_OP_PCAST && (!strcmp(to, "unreduced") || !strcmp(to, "reduced"))));
}

/* The result: dtype dt, shape s and x's weak type. */
static sm_err sm_ir_coll_result(sm_ir_value *out, sm_dtype dt, const sm_shape *s,
                                const sm_ir_value *x)
{
    sm_ir_set(out, dt, s);
    out->weak = x->weak;
    return SM_OK;
}

sm_err sm_ir_infer_preduce(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    int64_t n;
    char t[240];
    sm_err e = sm_ir_coll_begin(p, op, in[0], &n, t, sizeof t, NULL, err, errlen);
    if (e)
        return e;
    sm_dtype dt = in[0]->dtype;
    if (op->kind == SM_OP_PMEAN && !sm_dtype_is_float(dt))
        dt = SM_F32;
    if (op->kind == SM_OP_PSUM && dt == SM_BOOL)
        dt = SM_I32; /* JAX sums bools as int32 */
    return sm_ir_coll_result(out, dt, &in[0]->shape, in[0]);
}

sm_err sm_ir_infer_pvary(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    return sm_ir_infer_preduce(p, op, in, out, err, errlen);
}

/* pcast(x, axis_name, to=): JAX's jax.lax.pcast; the data does not change.
 * Which casts exist (from the axes' state: varying, unreduced, invarying)
 * is checked by the unreduced rule, which knows the operand's state. */
sm_err sm_ir_infer_pcast(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    const char *to = op->attrs.spec;
    if (!to || (strcmp(to, "varying") && strcmp(to, "unreduced") && strcmp(to, "reduced")))
        return sm_fail(err, errlen, SM_EINVAL,
                       "Got unexpected `to` value. Allowed `to` values are: {'unreduced', "
                       "'reduced', 'varying'}");
    return sm_ir_infer_preduce(p, op, in, out, err, errlen);
}

sm_err sm_ir_infer_all_gather(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                              sm_ir_value *out, char *err, size_t errlen)
{
    int64_t n;
    char t[240], ax[SM_IR_AX_LEN];
    sm_err e = sm_ir_coll_begin(p, op, in[0], &n, t, sizeof t, ax, err, errlen);
    if (e)
        return e;
    if (op->attrs.spec && strcmp(op->attrs.spec, "varying") &&
        strcmp(op->attrs.spec, "invarying") && strcmp(op->attrs.spec, "reduced"))
        return sm_fail(err, errlen, SM_EINVAL,
                       "Got unexpected `to` value for `jax.lax.all_gather`. Allowed `to` values "
                       "are: {'varying', 'reduced', 'invarying'} (got '%s')",
                       op->attrs.spec);
    const sm_shape *x = &in[0]->shape;
    sm_shape s = *x;
    int64_t a = op->attrs.axis;
    if (op->attrs.tiled) {
        int d;
        if (sm_ir_norm_axis(a, x->rank, &d))
            return sm_fail(err, errlen, SM_EINVAL,
                           "all_gather: operand %s: axis %lld is out of range for a tiled "
                           "gather (rank %d)",
                           t, (long long)a, x->rank);
        s.dims[d] *= n;
    } else {
        if (x->rank + 1 > SM_MAX_RANK)
            return sm_fail(err, errlen, SM_EINVAL, "all_gather: operand %s: result rank above %d",
                           t, SM_MAX_RANK);
        if (a < 0)
            a += x->rank + 1;
        if (a < 0 || a > x->rank)
            return sm_fail(err, errlen, SM_EINVAL,
                           "all_gather: operand %s: axis %lld is out of range [0, %d] for the "
                           "new stacked dimension over %s",
                           t, (long long)op->attrs.axis, x->rank, ax);
        s.rank = x->rank + 1;
        for (int d = 0; d < s.rank; d++)
            s.dims[d] = d < a ? x->dims[d] : d == a ? n : x->dims[d - 1];
    }
    sm_ir_set(out, in[0]->dtype, &s);
    return SM_OK;
}

/* Dimension attr (value v) of operand t (rank dims) normalized into *d;
 * SM_EINVAL naming opname, the operand and the value when out of range. */
static sm_err sm_ir_coll_dim(const char *opname, const char *t, const char *attr, int64_t v,
                             int rank, int *d, char *err, size_t errlen)
{
    if (!sm_ir_norm_axis(v, rank, d))
        return SM_OK;
    return sm_fail(err, errlen, SM_EINVAL, "%s: operand %s: %s %lld is out of range", opname, t,
                   attr, (long long)v);
}

/* Checks that dimension d (attr) of operand t (shape x) splits over the n
 * devices of ax: tiled, its size divisible by n; untiled, its size n (hint
 * ends the untiled message's parenthesis). SM_EINVAL naming all that. */
static sm_err sm_ir_coll_split(const char *opname, const char *t, const char *attr,
                               const sm_shape *x, int d, int64_t n, const char *ax, int tiled,
                               const char *hint, char *err, size_t errlen)
{
    if (tiled && x->dims[d] % n)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: operand %s: %s %d has size %lld, which is not divisible by the %lld "
                       "devices of %s (tiled)",
                       opname, t, attr, d, (long long)x->dims[d], (long long)n, ax);
    if (!tiled && x->dims[d] != n)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: operand %s: %s %d has size %lld but must equal the %lld devices of %s "
                       "(untiled%s)",
                       opname, t, attr, d, (long long)x->dims[d], (long long)n, ax, hint);
    return SM_OK;
}

sm_err sm_ir_infer_psum_scatter(const sm_program *p, const sm_ir_op *op,
                                const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                size_t errlen)
{
    int64_t n;
    char t[240], ax[SM_IR_AX_LEN];
    sm_err e = sm_ir_coll_begin(p, op, in[0], &n, t, sizeof t, ax, err, errlen);
    const sm_shape *x = &in[0]->shape;
    const char *name = "scatter_dimension";
    int d = 0;
    if (e ||
        (e = sm_ir_coll_dim("psum_scatter", t, name, op->attrs.axis, x->rank, &d, err, errlen)) ||
        (e = sm_ir_coll_split("psum_scatter", t, name, x, d, n, ax, op->attrs.tiled,
                              "; pass tiled=True to split it", err, errlen)))
        return e;
    sm_shape s = *x;
    if (op->attrs.tiled) {
        s.dims[d] /= n;
    } else {
        s.rank--;
        for (int k = d; k < s.rank; k++)
            s.dims[k] = x->dims[k + 1];
    }
    return sm_ir_coll_result(out, in[0]->dtype, &s, in[0]);
}

/* ppermute's checks of its axes and perm over the n devices of ax: JAX
 * (raise_on_ppermute_sort_diff, on by default) wants the group's rank
 * order to be the mesh order, so axes of more than one device are named in
 * mesh order; every pair's source and destination is a rank, each source
 * and each destination once. */
static sm_err sm_ir_perm_check(const sm_program *p, const sm_ir_attrs *a, int64_t n, const char *ax,
                               char *err, size_t errlen)
{
    for (int i = 1, last = -1; i <= a->naxes; i++) {
        int m = sm_mesh_axis(&p->mesh, a->axes[i - 1]);
        if (m < 0 || p->mesh.sizes[m] == 1)
            continue;
        if (m < last)
            return sm_fail(err, errlen, SM_EINVAL,
                           "ppermute over %s: Make sure that the axis_name passed to "
                           "jax.lax.ppermute is in the same order as the axis_names declared on "
                           "the mesh",
                           ax);
        last = m;
    }
    if (a->nperm > 0 && !a->perm)
        return sm_fail(err, errlen, SM_EINVAL, "ppermute: perm is missing");
    if (a->nperm > n)
        return sm_fail(err, errlen, SM_EINVAL,
                       "ppermute: perm has %d pairs but %s has only %lld devices", a->nperm, ax,
                       (long long)n);
    unsigned char *seen = calloc((size_t)n * 2, 1);
    if (!seen)
        return sm_fail(err, errlen, SM_ENOMEM, "ppermute: out of memory");
    for (int k = 0; k < a->nperm; k++) {
        for (int j = 0; j < 2; j++) {
            int64_t v = a->perm[k][j];
            const char *what = j ? "destination" : "source";
            if (v < 0 || v >= n) {
                free(seen);
                return sm_fail(err, errlen, SM_EINVAL,
                               "ppermute: perm pair (%lld, %lld) has %s %lld out of range [0, "
                               "%lld) for %s",
                               (long long)a->perm[k][0], (long long)a->perm[k][1], what,
                               (long long)v, (long long)n, ax);
            }
            if (seen[j * n + v]) {
                free(seen);
                return sm_fail(err, errlen, SM_EINVAL,
                               "ppermute: perm has duplicate %s %lld (sources and destinations "
                               "must each be unique)",
                               what, (long long)v);
            }
            seen[j * n + v] = 1;
        }
    }
    free(seen);
    return SM_OK;
}

sm_err sm_ir_infer_ppermute(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                            sm_ir_value *out, char *err, size_t errlen)
{
    int64_t n;
    char t[240], ax[SM_IR_AX_LEN];
    sm_err e = sm_ir_coll_begin(p, op, in[0], &n, t, sizeof t, ax, err, errlen);
    if (e || (e = sm_ir_perm_check(p, &op->attrs, n, ax, err, errlen)))
        return e;
    return sm_ir_coll_result(out, in[0]->dtype, &in[0]->shape, in[0]);
}

sm_err sm_ir_infer_all_to_all(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                              sm_ir_value *out, char *err, size_t errlen)
{
    int64_t n;
    char t[240], ax[SM_IR_AX_LEN];
    sm_err e = sm_ir_coll_begin(p, op, in[0], &n, t, sizeof t, ax, err, errlen);
    const sm_shape *x = &in[0]->shape;
    int sa = 0, ca = 0;
    if (e ||
        (e = sm_ir_coll_dim("all_to_all", t, "split_axis", op->attrs.axis, x->rank, &sa, err,
                            errlen)) ||
        (e = sm_ir_coll_dim("all_to_all", t, "concat_axis", op->attrs.axis2, x->rank, &ca, err,
                            errlen)) ||
        (e = sm_ir_coll_split("all_to_all", t, "split_axis", x, sa, n, ax, op->attrs.tiled, "", err,
                              errlen)))
        return e;
    sm_shape s = *x;
    if (op->attrs.tiled) {
        s.dims[sa] /= n;
        s.dims[ca] *= n;
    } else {
        sm_shape r = {.rank = x->rank - 1};
        for (int d = 0, k = 0; d < x->rank; d++)
            if (d != sa)
                r.dims[k++] = x->dims[d];
        s.rank = x->rank;
        for (int d = 0, k = 0; d < s.rank; d++)
            s.dims[d] = d == ca ? n : r.dims[k++];
    }
    return sm_ir_coll_result(out, in[0]->dtype, &s, in[0]);
}

sm_err sm_ir_infer_axis_scalar(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out, char *err,
                               size_t errlen)
{
    int64_t n;
    char t[8];
    sm_err e = sm_ir_coll_begin(p, op, NULL, &n, t, sizeof t, NULL, err, errlen);
    if (e)
        return e;
    sm_shape s = {0};
    sm_ir_set(out, SM_I32, &s);
    return SM_OK;
}
