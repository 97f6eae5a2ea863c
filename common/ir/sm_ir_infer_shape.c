/* sm_ir_infer_shape: type rules of the shape ops (reshape, transpose,
 * expand_dims, squeeze, broadcast_to, slices, concatenate, pad, tile, roll). */
#include "sm_ir_infer.h"

#include <stdio.h>
#include <string.h>

static sm_err sm_ir_shape_fail(const sm_ir_op *op, const sm_ir_value *x, char *err, size_t errlen,
                               const char *fmt, long long a, long long b)
{
    char t[240], what[300];
    snprintf(what, sizeof what, fmt, a, b);
    return sm_fail(err, errlen, SM_EINVAL, "%s: operand %s: %s", sm_op_name(op->kind),
                   sm_ir_type_str(x, t, sizeof t), what);
}

static void sm_ir_keep(sm_ir_value *out, const sm_ir_value *x, const sm_shape *s)
{
    sm_ir_set(out, x->dtype, s);
    out->weak = x->weak;
}

sm_err sm_ir_infer_reshape(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_ints *v = &op->attrs.ints;
    const sm_shape *x = &in[0]->shape;
    if (v->n > SM_MAX_RANK)
        return sm_ir_shape_fail(op, in[0], err, errlen, "expected at most %lld dimensions%.0lld",
                                SM_MAX_RANK, 0);
    int64_t total = 1, known = 1;
    int infer = -1;
    for (int d = 0; d < x->rank; d++)
        total *= x->dims[d]; /* fits: sm_ir_infer_op bounds every block's size */
    sm_shape s = {.rank = v->n};
    for (int d = 0; d < v->n; d++) {
        if (v->v[d] == -1 && infer < 0) {
            infer = d;
            continue;
        }
        if (v->v[d] < 0)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "dimension %lld of the new shape is %lld", d, v->v[d]);
        s.dims[d] = v->v[d];
        if (__builtin_mul_overflow(known, v->v[d], &known))
            return sm_ir_shape_fail(op, in[0], err, errlen, "new shape is too large%.0lld%.0lld", 0,
                                    0);
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "cannot infer the -1 dimension: %lld elements are not a "
                                    "multiple of %lld",
                                    total, known);
        s.dims[infer] = total / known;
        known = total;
    }
    if (known != total) {
        char ns[200], t[240];
        return sm_fail(err, errlen, SM_EINVAL,
                       "reshape: operand %s: cannot reshape %lld elements into shape %s",
                       sm_ir_type_str(in[0], t, sizeof t), (long long)total,
                       sm_ir_shape_str(&s, ns, sizeof ns));
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_transpose(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                             sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    const sm_ir_ints *v = &op->attrs.ints;
    sm_shape s = {.rank = x->rank};
    if (!op->attrs.has_ints) {
        for (int d = 0; d < x->rank; d++)
            s.dims[d] = x->dims[x->rank - 1 - d];
        sm_ir_keep(out, in[0], &s);
        return SM_OK;
    }
    if (v->n != x->rank)
        return sm_ir_shape_fail(op, in[0], err, errlen,
                                "expected axes to list all %lld dimensions, got %lld", x->rank,
                                v->n);
    int seen[SM_MAX_RANK] = {0};
    for (int d = 0; d < v->n; d++) {
        int a;
        if (sm_ir_norm_axis(v->v[d], x->rank, &a) || seen[a])
            return sm_ir_shape_fail(
                op, in[0], err, errlen,
                "axes must be a permutation of the dimensions (axis %lld%.0lld)", v->v[d], 0);
        seen[a] = 1;
        s.dims[d] = x->dims[a];
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_expand_dims(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out, char *err,
                               size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int rank = x->rank + op->attrs.ints.n;
    if (rank > SM_MAX_RANK)
        return sm_ir_shape_fail(op, in[0], err, errlen, "result rank %lld is above %lld", rank,
                                SM_MAX_RANK);
    int ins[SM_MAX_RANK];
    sm_err e = sm_ir_axes_list(op, &op->attrs.ints, 1, rank, ins, err, errlen);
    if (e)
        return e;
    sm_shape s = {.rank = rank};
    for (int d = 0, k = 0; d < rank; d++)
        s.dims[d] = ins[d] ? 1 : x->dims[k++];
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_squeeze(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int red[SM_MAX_RANK];
    sm_shape s = {0};
    if (!op->attrs.has_ints) {
        for (int d = 0; d < x->rank; d++)
            if (x->dims[d] != 1)
                s.dims[s.rank++] = x->dims[d];
        sm_ir_keep(out, in[0], &s);
        return SM_OK;
    }
    sm_err e = sm_ir_axes_list(op, &op->attrs.ints, 1, x->rank, red, err, errlen);
    if (e)
        return e;
    for (int d = 0; d < x->rank; d++) {
        if (red[d] && x->dims[d] != 1)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "cannot squeeze dimension %lld of size %lld (expected 1)", d,
                                    x->dims[d]);
        if (!red[d])
            s.dims[s.rank++] = x->dims[d];
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

static sm_err sm_ir_shape_of(const sm_ir_op *op, const sm_ir_value *x, const sm_ir_ints *v,
                             sm_shape *s, char *err, size_t errlen)
{
    if (v->n > SM_MAX_RANK)
        return sm_ir_shape_fail(op, x, err, errlen, "shape has %lld dimensions, at most %lld", v->n,
                                SM_MAX_RANK);
    s->rank = v->n;
    for (int d = 0; d < v->n; d++) {
        if (v->v[d] < 0)
            return sm_ir_shape_fail(op, x, err, errlen, "dimension %lld is negative (%lld)", d,
                                    v->v[d]);
        s->dims[d] = v->v[d];
    }
    return SM_OK;
}

sm_err sm_ir_infer_broadcast_to(const sm_program *p, const sm_ir_op *op,
                                const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    sm_shape s, b;
    sm_err e = sm_ir_shape_of(op, in[0], &op->attrs.ints, &s, err, errlen);
    if (e)
        return e;
    if (x->rank > s.rank || sm_ir_broadcast(x, &s, &b) || !sm_shape_equal(&b, &s)) {
        char t[240], ns[200];
        return sm_fail(err, errlen, SM_EINVAL,
                       "broadcast_to: operand %s cannot be broadcast to shape %s",
                       sm_ir_type_str(in[0], t, sizeof t), sm_ir_shape_str(&s, ns, sizeof ns));
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_slice(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    const sm_ir_ints *lo = &op->attrs.ints, *hi = &op->attrs.ints2, *st = &op->attrs.ints3;
    if (lo->n != x->rank || hi->n != x->rank)
        return sm_ir_shape_fail(op, in[0], err, errlen,
                                "expected start_indices and limit_indices of length %lld, got "
                                "%lld",
                                x->rank, lo->n != x->rank ? lo->n : hi->n);
    if (op->attrs.has_ints3 && st->n != x->rank)
        return sm_ir_shape_fail(op, in[0], err, errlen, "expected strides of length %lld, got %lld",
                                x->rank, st->n);
    sm_shape s = {.rank = x->rank};
    for (int d = 0; d < x->rank; d++) {
        int64_t step = op->attrs.has_ints3 ? st->v[d] : 1;
        if (step < 1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "slice: strides must be positive, got %lld for dimension %d",
                           (long long)step, d);
        if (lo->v[d] < 0 || lo->v[d] > hi->v[d] || hi->v[d] > x->dims[d]) {
            char t[240];
            return sm_fail(err, errlen, SM_EINVAL,
                           "slice: operand %s: dimension %d range [%lld, %lld) is not within "
                           "[0, %lld]",
                           sm_ir_type_str(in[0], t, sizeof t), d, (long long)lo->v[d],
                           (long long)hi->v[d], (long long)x->dims[d]);
        }
        s.dims[d] = (hi->v[d] - lo->v[d] + step - 1) / step;
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

/* Checks that operands first..n-1 are integer scalars (dynamic indices). */
static sm_err sm_ir_index_operands(const sm_ir_op *op, const sm_ir_value *const *in, int first,
                                   int want, char *err, size_t errlen)
{
    if (op->noperands - first != want)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: expected %d start indices (one per dimension), got %d",
                       sm_op_name(op->kind), want, op->noperands - first);
    for (int i = first; i < op->noperands; i++) {
        if (in[i]->shape.rank != 0 || !sm_dtype_is_int(in[i]->dtype)) {
            char t[240];
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: start index %d is %s, expected an integer scalar",
                           sm_op_name(op->kind), i - first, sm_ir_type_str(in[i], t, sizeof t));
        }
    }
    return SM_OK;
}

sm_err sm_ir_infer_dynamic_slice(const sm_program *p, const sm_ir_op *op,
                                 const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                 size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    sm_err e = sm_ir_index_operands(op, in, 1, x->rank, err, errlen);
    if (e)
        return e;
    sm_shape s;
    if ((e = sm_ir_shape_of(op, in[0], &op->attrs.ints, &s, err, errlen)))
        return e;
    if (s.rank != x->rank)
        return sm_ir_shape_fail(op, in[0], err, errlen, "expected %lld slice_sizes, got %lld",
                                x->rank, s.rank);
    for (int d = 0; d < x->rank; d++)
        if (s.dims[d] > x->dims[d])
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "slice size %lld exceeds dimension size %lld", s.dims[d],
                                    x->dims[d]);
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_dynamic_slice_in_dim(const sm_program *p, const sm_ir_op *op,
                                        const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                        size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    sm_err e = sm_ir_index_operands(op, in, 1, 1, err, errlen);
    if (e)
        return e;
    int a;
    if (sm_ir_norm_axis(op->attrs.axis, x->rank, &a))
        return sm_ir_shape_fail(op, in[0], err, errlen, "axis %lld is out of range%.0lld",
                                op->attrs.axis, 0);
    int64_t size = op->attrs.ints.n > 0 ? op->attrs.ints.v[0] : -1;
    if (size < 0 || size > x->dims[a])
        return sm_ir_shape_fail(op, in[0], err, errlen, "slice_size %lld is not within [0, %lld]",
                                size, x->dims[a]);
    sm_shape s = *x;
    s.dims[a] = size;
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_dynamic_update_slice(const sm_program *p, const sm_ir_op *op,
                                        const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                        size_t errlen)
{
    const sm_shape *x = &in[0]->shape, *u = &in[1]->shape;
    char tx[240], tu[240];
    if (u->rank != x->rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "dynamic_update_slice: operand %s and update %s: expected the same rank",
                       sm_ir_type_str(in[0], tx, sizeof tx), sm_ir_type_str(in[1], tu, sizeof tu));
    for (int d = 0; d < x->rank; d++)
        if (u->dims[d] > x->dims[d])
            return sm_fail(err, errlen, SM_EINVAL,
                           "dynamic_update_slice: operand %s and update %s: expected the update "
                           "to fit (dimension %d)",
                           sm_ir_type_str(in[0], tx, sizeof tx),
                           sm_ir_type_str(in[1], tu, sizeof tu), d);
    if (in[1]->dtype != in[0]->dtype && !in[1]->weak)
        return sm_fail(err, errlen, SM_EINVAL,
                       "dynamic_update_slice: operand %s and update %s: expected the same dtype",
                       sm_ir_type_str(in[0], tx, sizeof tx), sm_ir_type_str(in[1], tu, sizeof tu));
    sm_err e = sm_ir_index_operands(op, in, 2, x->rank, err, errlen);
    if (e)
        return e;
    sm_ir_keep(out, in[0], x);
    return SM_OK;
}

sm_err sm_ir_infer_concatenate(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out, char *err,
                               size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int a;
    if (x->rank == 0)
        return sm_ir_shape_fail(op, in[0], err, errlen,
                                "zero-dimensional arrays cannot be concatenated%.0lld%.0lld", 0, 0);
    if (sm_ir_norm_axis(op->attrs.axis, x->rank, &a))
        return sm_ir_shape_fail(op, in[0], err, errlen, "axis %lld is out of range%.0lld",
                                op->attrs.axis, 0);
    sm_shape s = *x;
    sm_dtype t = in[0]->dtype;
    int weak = in[0]->weak;
    for (int k = 1; k < op->noperands; k++) {
        const sm_shape *y = &in[k]->shape;
        int ok = y->rank == x->rank;
        for (int d = 0; ok && d < x->rank; d++)
            ok = d == a || y->dims[d] == x->dims[d];
        if (!ok) {
            char t0[240], tk[240];
            return sm_fail(err, errlen, SM_EINVAL,
                           "concatenate: operands %s and %s: expected equal shapes except along "
                           "axis %d",
                           sm_ir_type_str(in[0], t0, sizeof t0),
                           sm_ir_type_str(in[k], tk, sizeof tk), a);
        }
        s.dims[a] += y->dims[a];
        t = sm_ir_promote(t, weak, in[k]->dtype, in[k]->weak, &weak);
    }
    sm_ir_set(out, t, &s);
    out->weak = weak;
    return SM_OK;
}

sm_err sm_ir_infer_pad(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                       sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    const sm_ir_ints *v = &op->attrs.ints;
    if (v->n != 2 * x->rank)
        return sm_ir_shape_fail(op, in[0], err, errlen,
                                "expected pad_width with %lld (before, after) pairs, got %lld "
                                "numbers",
                                x->rank, v->n);
    sm_shape s = *x;
    for (int d = 0; d < x->rank; d++) {
        if (v->v[2 * d] < 0 || v->v[2 * d + 1] < 0)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "pad widths of dimension %lld must be non-negative%.0lld", d,
                                    0);
        s.dims[d] += v->v[2 * d] + v->v[2 * d + 1];
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_tile(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    const sm_ir_ints *v = &op->attrs.ints;
    int rank = v->n > x->rank ? v->n : x->rank;
    if (rank > SM_MAX_RANK)
        return sm_ir_shape_fail(op, in[0], err, errlen, "result rank %lld is above %lld", rank,
                                SM_MAX_RANK);
    sm_shape s = {.rank = rank};
    for (int d = 0; d < rank; d++) {
        int dx = d - (rank - x->rank), dv = d - (rank - v->n);
        int64_t r = dv >= 0 ? v->v[dv] : 1;
        if (r < 0)
            return sm_ir_shape_fail(op, in[0], err, errlen, "reps entry %lld is negative (%lld)",
                                    dv, r);
        if (__builtin_mul_overflow(dx >= 0 ? x->dims[dx] : 1, r, &s.dims[d]))
            return sm_ir_shape_fail(op, in[0], err, errlen, "result is too large%.0lld%.0lld", 0,
                                    0);
    }
    sm_ir_keep(out, in[0], &s);
    return SM_OK;
}

sm_err sm_ir_infer_rev(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                       sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int seen[SM_MAX_RANK] = {0};
    for (int k = 0; k < op->attrs.ints.n; k++) {
        int a;
        if (sm_ir_norm_axis(op->attrs.ints.v[k], x->rank, &a))
            return sm_ir_shape_fail(op, in[0], err, errlen, "dimension %lld is out of range%.0lld",
                                    op->attrs.ints.v[k], 0);
        if (seen[a]++)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "dimensions name dimension %lld twice%.0lld", (long long)a, 0);
    }
    sm_ir_keep(out, in[0], x);
    return SM_OK;
}

sm_err sm_ir_infer_roll(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    const sm_ir_ints *sh = &op->attrs.ints, *ax = &op->attrs.ints2;
    if (op->attrs.has_ints2) {
        if (sh->n != ax->n && sh->n != 1)
            return sm_ir_shape_fail(op, in[0], err, errlen,
                                    "shift has %lld entries but axis has %lld", sh->n, ax->n);
        for (int i = 0; i < ax->n; i++) {
            int a;
            if (sm_ir_norm_axis(ax->v[i], x->rank, &a))
                return sm_ir_shape_fail(op, in[0], err, errlen, "axis %lld is out of range%.0lld",
                                        ax->v[i], 0);
        }
    } else if (sh->n != 1) {
        return sm_ir_shape_fail(op, in[0], err, errlen,
                                "without axis, shift must be one integer (got %lld)%.0lld", sh->n,
                                0);
    }
    sm_ir_keep(out, in[0], x);
    return SM_OK;
}
