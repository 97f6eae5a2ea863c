/* sm_ir_infer: type rules of elementwise ops, creation, products and
 * reductions. */
#include "sm_ir_infer.h"
#include "sm_ir_lex.h"

#include <string.h>

/* ---- elementwise ---- */

static sm_err sm_ir_bcast2(const sm_ir_op *op, const sm_ir_value *a, const sm_ir_value *b,
                           sm_shape *s, char *err, size_t errlen)
{
    if (sm_ir_broadcast(&a->shape, &b->shape, s) == 0)
        return SM_OK;
    char ta[240], tb[240];
    return sm_fail(
        err, errlen, SM_EINVAL, "%s: operands %s and %s: expected shapes that broadcast together",
        sm_op_name(op->kind), sm_ir_type_str(a, ta, sizeof ta), sm_ir_type_str(b, tb, sizeof tb));
}

/* out's dtype and weak flag: those of a and b promoted. */
static void sm_ir_promote_into(const sm_ir_value *a, const sm_ir_value *b, sm_ir_value *out)
{
    int weak;
    out->dtype = sm_ir_promote(a->dtype, a->weak, b->dtype, b->weak, &weak);
    out->weak = weak;
}

static sm_err sm_ir_binary_types(const sm_ir_op *op, const sm_ir_value *const *in, sm_ir_value *out,
                                 char *err, size_t errlen)
{
    sm_shape s;
    sm_err e = sm_ir_bcast2(op, in[0], in[1], &s, err, errlen);
    if (e)
        return e;
    sm_ir_set(out, in[0]->dtype, &s);
    sm_ir_promote_into(in[0], in[1], out);
    return SM_OK;
}

/* A Python int literal meeting an integer array takes the array's dtype,
 * as JAX's: one outside that dtype's range is JAX's OverflowError sentence
 * (it would wrap). */
static sm_err sm_ir_literals_fit(const sm_program *p, const sm_ir_value *const *in, int n,
                                 sm_dtype t, char *err, size_t errlen)
{
    int64_t lo, hi;
    if (t == SM_I32)
        lo = INT32_MIN, hi = INT32_MAX;
    else if (t == SM_U8)
        lo = 0, hi = 255;
    else
        return SM_OK;
    for (int k = 0; k < n; k++) {
        const sm_ir_value *v = in[k];
        if (!v->weak || v->def < 0 || v->def >= p->nops)
            continue;
        const sm_ir_op *c = &p->ops[v->def];
        if (c->kind != SM_OP_CONST || c->attrs.has_dtype || c->attrs.value_is_float)
            continue;
        if (c->attrs.i < lo || c->attrs.i > hi)
            return sm_fail(err, errlen, SM_EINVAL, "Python int %lld too large to convert to %s",
                           (long long)c->attrs.i, sm_dtype_long_name(t));
    }
    return SM_OK;
}

/* JAX's sentence for lax's sub, neg and sign of bool (jnp.add and
 * jnp.multiply take bools: or, and; abs, floor, ceil, round give them back). */
static sm_err sm_ir_no_bool(const sm_ir_op *op, sm_dtype t, char *err, size_t errlen)
{
    const char *lax = op->kind == SM_OP_SUBTRACT   ? "sub"
                      : op->kind == SM_OP_NEGATIVE ? "neg"
                      : op->kind == SM_OP_SIGN     ? "sign"
                                                   : NULL;
    if (t != SM_BOOL || !lax)
        return SM_OK;
    return sm_fail(err, errlen, SM_EINVAL,
                   "%s does not accept dtype bool. Accepted dtypes are subtypes of number.", lax);
}

sm_err sm_ir_infer_binary(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    sm_err e = sm_ir_binary_types(op, in, out, err, errlen);
    if (!e)
        e = sm_ir_literals_fit(p, in, 2, out->dtype, err, errlen);
    if (!e && out->dtype == SM_BOOL &&
        (op->kind == SM_OP_MOD || op->kind == SM_OP_FLOOR_DIVIDE || op->kind == SM_OP_POWER))
        out->dtype = SM_I32; /* jnp's numeric promotion: bools as int32 */
    return e ? e : sm_ir_no_bool(op, out->dtype, err, errlen);
}

/* divide and arctan2: as any binary op, float32 for integers (true
 * division, as jnp's: an int literal is converted to a float, not to the
 * array's dtype). */
sm_err sm_ir_infer_binary_float(const sm_program *p, const sm_ir_op *op,
                                const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                size_t errlen)
{
    sm_err e = sm_ir_binary_types(op, in, out, err, errlen);
    if (!e && !sm_dtype_is_float(out->dtype))
        out->dtype = SM_F32;
    return e;
}

sm_err sm_ir_infer_compare(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    sm_err e = sm_ir_infer_binary(p, op, in, out, err, errlen);
    if (!e) {
        out->dtype = SM_BOOL;
        out->weak = 0;
    }
    return e;
}

/* bitwise_and, _or, _xor (two operands) and bitwise_not (one): integers
 * and bool, the promoted dtype out; JAX's sentence for any other. */
sm_err sm_ir_infer_bitwise(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    sm_err e = op->noperands == 2 ? sm_ir_infer_binary(p, op, in, out, err, errlen)
                                  : sm_ir_infer_unary(p, op, in, out, err, errlen);
    if (e)
        return e;
    if (!sm_dtype_is_int(out->dtype) && out->dtype != SM_U8 && out->dtype != SM_BOOL)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s does not accept dtype %s. Accepted dtypes are subtypes of integer, "
                       "bool.",
                       sm_op_name(op->kind), sm_dtype_long_name(out->dtype));
    return SM_OK;
}

/* logical_and, _or, _xor (two operands, broadcast) and logical_not (one):
 * any dtype, each element taken as != 0 (NaN true), bool out. */
sm_err sm_ir_infer_logical(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    sm_err e = op->noperands == 2 ? sm_ir_infer_binary(p, op, in, out, err, errlen)
                                  : sm_ir_infer_unary(p, op, in, out, err, errlen);
    if (!e) {
        out->dtype = SM_BOOL;
        out->weak = 0;
    }
    return e;
}

sm_err sm_ir_infer_unary(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    sm_ir_set(out, in[0]->dtype, &in[0]->shape);
    out->weak = in[0]->weak;
    return sm_ir_no_bool(op, out->dtype, err, errlen);
}

sm_err sm_ir_infer_unary_float(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out, char *err,
                               size_t errlen)
{
    sm_ir_set(out, sm_dtype_is_float(in[0]->dtype) ? in[0]->dtype : SM_F32, &in[0]->shape);
    out->weak = in[0]->weak;
    return SM_OK;
}

sm_err sm_ir_infer_where(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    sm_shape s1, s;
    sm_err e = sm_ir_bcast2(op, in[1], in[2], &s1, err, errlen);
    if (e)
        return e;
    if (sm_ir_broadcast(&in[0]->shape, &s1, &s)) {
        char tc[240], sh[200];
        return sm_fail(err, errlen, SM_EINVAL,
                       "where: condition %s does not broadcast with the branches' shape %s",
                       sm_ir_type_str(in[0], tc, sizeof tc), sm_ir_shape_str(&s1, sh, sizeof sh));
    }
    sm_ir_set(out, in[1]->dtype, &s);
    sm_ir_promote_into(in[1], in[2], out);
    return sm_ir_literals_fit(p, in + 1, 2, out->dtype, err, errlen);
}

sm_err sm_ir_infer_astype(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    if (!op->attrs.has_dtype)
        return sm_fail(err, errlen, SM_EINVAL, "astype: expected a dtype");
    sm_ir_set(out, op->attrs.dtype, &in[0]->shape);
    return SM_OK;
}

/* lax.bitcast_convert_type: the operand's bytes read as new_dtype, of the
 * same width (JAX's other widths add or drop a minor dimension: refused). */
sm_err sm_ir_infer_bitcast(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    if (!op->attrs.has_dtype)
        return sm_fail(err, errlen, SM_EINVAL, "bitcast_convert_type: expected a dtype");
    sm_dtype from = in[0]->dtype, to = op->attrs.dtype;
    if (from == SM_BOOL || to == SM_BOOL || sm_dtype_size(from) != sm_dtype_size(to))
        return sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                       "bitcast_convert_type from %s to %s is not supported: only between "
                       "dtypes of one width (not bool)",
                       sm_dtype_name(from), sm_dtype_name(to));
    sm_ir_set(out, to, &in[0]->shape);
    return SM_OK;
}

/* ---- creation ---- */

static sm_err sm_ir_shape_attr(const sm_ir_op *op, const sm_ir_ints *v, sm_shape *s, char *err,
                               size_t errlen)
{
    if (v->n > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "%s: shape has %d dimensions, at most %d allowed",
                       sm_op_name(op->kind), v->n, SM_MAX_RANK);
    s->rank = v->n;
    for (int d = 0; d < v->n; d++) {
        if (v->v[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "%s: shape dimension %d is negative (%lld)",
                           sm_op_name(op->kind), d, (long long)v->v[d]);
        s->dims[d] = v->v[d];
    }
    return SM_OK;
}

sm_err sm_ir_infer_fill(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    sm_shape s;
    sm_err e = sm_ir_shape_attr(op, &op->attrs.ints, &s, err, errlen);
    if (e)
        return e;
    sm_dtype t = SM_F32;
    if (op->attrs.has_dtype)
        t = op->attrs.dtype;
    else if (op->kind == SM_OP_FULL && !op->attrs.value_is_float)
        t = SM_I32;
    sm_ir_set(out, t, &s);
    return SM_OK;
}

sm_err sm_ir_infer_arange(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_ints *v = &op->attrs.ints;
    if (v->n < 1 || v->n > 3)
        return sm_fail(err, errlen, SM_EINVAL, "arange: expected stop, or start, stop[, step]");
    int64_t start = v->n == 1 ? 0 : v->v[0], stop = v->n == 1 ? v->v[0] : v->v[1];
    int64_t step = v->n == 3 ? v->v[2] : 1;
    if (step == 0)
        return sm_fail(err, errlen, SM_EINVAL, "arange: step must not be zero");
    int64_t n = step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
    sm_shape s = {.rank = 1, .dims = {n < 0 ? 0 : n}};
    sm_ir_set(out, op->attrs.has_dtype ? op->attrs.dtype : SM_I32, &s);
    return SM_OK;
}

sm_err sm_ir_infer_const(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, char *err, size_t errlen)
{
    sm_shape s = {0};
    if (op->attrs.has_dtype) {
        sm_ir_set(out, op->attrs.dtype, &s);
    } else { /* a Python scalar: weakly typed; an int beyond int32 is an int64 (with
              * int32 it would wrap: x & 4294967295 on an i64 x must keep its bits) */
        int64_t v = op->attrs.i;
        sm_dtype t = op->attrs.value_is_float             ? SM_F32
                     : (v >= INT32_MIN && v <= INT32_MAX) ? SM_I32
                                                          : SM_I64;
        sm_ir_set(out, t, &s);
        out->weak = 1;
    }
    return SM_OK;
}

/* ---- products ---- */

static sm_err sm_ir_contract_fail(const sm_ir_op *op, const sm_ir_value *a, const sm_ir_value *b,
                                  const char *what, char *err, size_t errlen)
{
    char ta[240], tb[240];
    return sm_fail(err, errlen, SM_EINVAL, "%s: operands %s and %s: expected %s",
                   sm_op_name(op->kind), sm_ir_type_str(a, ta, sizeof ta),
                   sm_ir_type_str(b, tb, sizeof tb), what);
}

sm_err sm_ir_infer_dot(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                       sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *a = &in[0]->shape, *b = &in[1]->shape;
    sm_shape s = {0};
    if (a->rank == 0 || b->rank == 0)
        return sm_ir_infer_binary(p, op, in, out, err, errlen);
    int kb = b->rank == 1 ? 0 : b->rank - 2; /* contracted dimension of b */
    if (a->dims[a->rank - 1] != b->dims[kb])
        return sm_ir_contract_fail(op, in[0], in[1],
                                   "the last dimension of the first to equal the "
                                   "contracted dimension of the second",
                                   err, errlen);
    if (a->rank - 1 + b->rank - 1 > SM_MAX_RANK)
        return sm_ir_contract_fail(op, in[0], in[1], "a result of rank at most 8", err, errlen);
    for (int d = 0; d < a->rank - 1; d++)
        s.dims[s.rank++] = a->dims[d];
    for (int d = 0; d < b->rank; d++)
        if (d != kb)
            s.dims[s.rank++] = b->dims[d];
    sm_ir_set(out, SM_F32, &s);
    sm_ir_promote_into(in[0], in[1], out);
    return SM_OK;
}

sm_err sm_ir_infer_matmul(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    sm_shape a = in[0]->shape, b = in[1]->shape, s;
    if (a.rank == 0 || b.rank == 0)
        return sm_ir_contract_fail(op, in[0], in[1], "operands of rank at least 1", err, errlen);
    int va = a.rank == 1, vb = b.rank == 1;
    if (va) { /* a vector is a row on the left, a column on the right */
        a.rank = 2;
        a.dims[1] = a.dims[0];
        a.dims[0] = 1;
    }
    if (vb) {
        b.rank = 2;
        b.dims[1] = 1;
    }
    if (a.dims[a.rank - 1] != b.dims[b.rank - 2])
        return sm_ir_contract_fail(op, in[0], in[1],
                                   "the last dimension of the first to equal the "
                                   "second-to-last dimension of the second",
                                   err, errlen);
    sm_shape ba = {.rank = a.rank - 2}, bb = {.rank = b.rank - 2};
    memcpy(ba.dims, a.dims, sizeof(int64_t) * (size_t)ba.rank);
    memcpy(bb.dims, b.dims, sizeof(int64_t) * (size_t)bb.rank);
    if (sm_ir_broadcast(&ba, &bb, &s))
        return sm_ir_contract_fail(op, in[0], in[1], "batch dimensions that broadcast", err,
                                   errlen);
    if (!va)
        s.dims[s.rank++] = a.dims[a.rank - 2];
    if (!vb)
        s.dims[s.rank++] = b.dims[b.rank - 1];
    sm_ir_set(out, SM_F32, &s);
    sm_ir_promote_into(in[0], in[1], out);
    return SM_OK;
}

sm_err sm_ir_infer_einsum(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    const char *spec = op->attrs.spec ? op->attrs.spec : "";
    int64_t size[128];
    int count[128] = {0};
    for (int c = 0; c < 128; c++)
        size[c] = -1;
    const char *q = spec;
    for (int k = 0; k < op->noperands; k++) {
        const sm_shape *s = &in[k]->shape;
        int d = 0;
        for (; *q && *q != ',' && *q != '-'; q++) {
            if (*q == ' ')
                continue;
            char ch[16];
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s': unexpected character %s (only "
                               "letters, ',' and '->' are supported)",
                               spec, sm_ir_char_text(q, ch));
            if (d >= s->rank) {
                char t[240];
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s' name more dimensions than operand %d "
                               "%s has",
                               spec, k, sm_ir_type_str(in[k], t, sizeof t));
            }
            int c = (unsigned char)*q;
            if (size[c] >= 0 && size[c] != s->dims[d])
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s': index '%c' has size %lld and %lld", spec,
                               *q, (long long)size[c], (long long)s->dims[d]);
            size[c] = s->dims[d++];
            count[c]++;
        }
        if (d != s->rank) {
            char t[240];
            return sm_fail(err, errlen, SM_EINVAL,
                           "einsum: subscripts '%s' name %d dimensions for operand %d %s", spec, d,
                           k, sm_ir_type_str(in[k], t, sizeof t));
        }
        if (k + 1 < op->noperands) {
            if (*q != ',')
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s' describe fewer operands than the %d given",
                               spec, op->noperands);
            q++;
        }
    }
    sm_shape s = {0};
    if (*q == ',')
        return sm_fail(err, errlen, SM_EINVAL,
                       "einsum: subscripts '%s' describe more operands than the %d given", spec,
                       op->noperands);
    if (*q == '-') {
        if (q[1] != '>')
            return sm_fail(err, errlen, SM_EINVAL, "einsum: subscripts '%s': expected '->'", spec);
        for (q += 2; *q; q++) {
            if (*q == ' ')
                continue;
            int c = (unsigned char)*q;
            if (c >= 128 || size[c] < 0)
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s': output index '%c' is not an input index",
                               spec, *q);
            if (s.rank >= SM_MAX_RANK)
                return sm_fail(err, errlen, SM_EINVAL, "einsum: output rank above %d", SM_MAX_RANK);
            s.dims[s.rank++] = size[c];
        }
    } else { /* implicit output: indices seen once, in alphabetical order */
        for (int c = 'A'; c <= 'z'; c++)
            if (count[c] == 1 && s.rank < SM_MAX_RANK)
                s.dims[s.rank++] = size[c];
    }
    sm_ir_set(out, in[0]->dtype, &s);
    out->weak = in[0]->weak;
    if (op->noperands == 2)
        sm_ir_promote_into(in[0], in[1], out);
    return SM_OK;
}

/* ---- reductions ---- */

/* Marks the dimensions listed in v (or all when !has) in red[]. */
sm_err sm_ir_axes_list(const sm_ir_op *op, const sm_ir_ints *v, int has, int rank, int *red,
                       char *err, size_t errlen)
{
    for (int d = 0; d < rank; d++)
        red[d] = !has;
    for (int i = 0; has && i < v->n; i++) {
        int d;
        if (sm_ir_norm_axis(v->v[i], rank, &d))
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: axis %lld is out of range for an operand of rank %d",
                           sm_op_name(op->kind), (long long)v->v[i], rank);
        if (red[d])
            return sm_fail(err, errlen, SM_EINVAL, "%s: axis %lld is repeated",
                           sm_op_name(op->kind), (long long)v->v[i]);
        red[d] = 1;
    }
    return SM_OK;
}

/* x less its dimensions with red[d] set (kept as 1 with keepdims). */
static sm_shape sm_ir_reduced_shape(const sm_shape *x, const int *red, int keepdims)
{
    sm_shape s = {0};
    for (int d = 0; d < x->rank; d++) {
        if (!red[d])
            s.dims[s.rank++] = x->dims[d];
        else if (keepdims)
            s.dims[s.rank++] = 1;
    }
    return s;
}

sm_err sm_ir_infer_reduce(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int red[SM_MAX_RANK];
    sm_err e = sm_ir_axes_list(op, &op->attrs.ints, op->attrs.has_ints, x->rank, red, err, errlen);
    if (e)
        return e;
    sm_shape s = sm_ir_reduced_shape(x, red, op->attrs.keepdims);
    sm_dtype t = in[0]->dtype;
    int weak = in[0]->weak;
    if (op->kind == SM_OP_ANY || op->kind == SM_OP_ALL) {
        t = SM_BOOL, weak = 0;
    } else if (op->attrs.has_dtype) { /* dtype=: the operand is converted to it first */
        t = op->attrs.dtype, weak = 0;
        if (op->kind == SM_OP_MEAN && !sm_dtype_is_float(t))
            return sm_fail(err, errlen, SM_EINVAL, "mean: dtype=%s is not a float dtype",
                           sm_dtype_long_name(t));
    } else if (op->kind == SM_OP_MEAN && !sm_dtype_is_float(t)) {
        t = SM_F32;
    } else if ((op->kind == SM_OP_SUM || op->kind == SM_OP_PROD) && t == SM_BOOL) {
        t = SM_I32;
    } else if ((op->kind == SM_OP_SUM || op->kind == SM_OP_PROD) && t == SM_U8) {
        t = SM_I64; /* jnp's is uint32, which shmap lacks: the sum, not its byte */
    }
    sm_ir_set(out, t, &s);
    out->weak = weak;
    return SM_OK;
}

int sm_ir_op_axis(const sm_ir_op *op, int rank)
{
    int d;
    if (!op->attrs.has_ints) /* jnp.sort's default is the last axis */
        return op->kind == SM_OP_SORT || op->kind == SM_OP_ARGSORT ? rank - 1 : -1;
    if (op->attrs.ints.n != 1 || sm_ir_norm_axis(op->attrs.ints.v[0], rank, &d))
        return -1;
    return d;
}

/* The one axis of argmax, argmin and the cumulative ops, checked: an int
 * or None (-1: over the flattened operand). */
static sm_err sm_ir_one_axis(const sm_ir_op *op, const sm_shape *x, int *axis, char *err,
                             size_t errlen)
{
    *axis = -1;
    if (!op->attrs.has_ints)
        return SM_OK;
    if (op->attrs.ints.n != 1)
        return sm_fail(err, errlen, SM_EINVAL, "%s: axis must be an integer or None, got %d axes",
                       sm_op_name(op->kind), op->attrs.ints.n);
    if (sm_ir_norm_axis(op->attrs.ints.v[0], x->rank, axis))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: axis %lld is out of range for an operand of rank %d",
                       sm_op_name(op->kind), (long long)op->attrs.ints.v[0], x->rank);
    return SM_OK;
}

/* argmax, argmin: int32 indices, the axis dropped (kept as 1 with
 * keepdims; axis=None: over the flattened operand). */
sm_err sm_ir_infer_argminmax(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                             sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int axis;
    sm_err e = sm_ir_one_axis(op, x, &axis, err, errlen);
    if (e)
        return e;
    int red[SM_MAX_RANK], empty = 0;
    for (int d = 0; d < x->rank; d++) {
        red[d] = axis < 0 || d == axis;
        empty |= red[d] && x->dims[d] == 0;
    }
    if (empty)
        return sm_fail(err, errlen, SM_EINVAL, "attempt to get %s of an empty sequence",
                       sm_op_name(op->kind));
    sm_shape s = sm_ir_reduced_shape(x, red, op->attrs.keepdims);
    sm_ir_set(out, SM_I32, &s);
    return SM_OK;
}

/* sort (the operand's type) and argsort (int32 positions) along one axis,
 * the last by default; any dtype (the half floats sorted as float32, which
 * keeps their order). */
sm_err sm_ir_infer_sort(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int axis;
    sm_err e = sm_ir_one_axis(op, &x->shape, &axis, err, errlen);
    if (e)
        return e;
    if (x->shape.rank == 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: axis -1 is out of bounds for an array of rank 0", sm_op_name(op->kind));
    sm_ir_set(out, op->kind == SM_OP_ARGSORT ? SM_I32 : x->dtype, &x->shape);
    out->weak = op->kind == SM_OP_ARGSORT ? 0 : x->weak;
    return SM_OK;
}

/* cumsum, cumprod (bool counted as int32; dtype= converts first), cummax,
 * cummin (numbers only, as lax's; the half floats too, run in float32):
 * the operand's shape (axis=None: its elements flattened). */
sm_err sm_ir_infer_cumulative(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                              sm_ir_value *out, char *err, size_t errlen)
{
    const sm_shape *x = &in[0]->shape;
    int axis;
    sm_err e = sm_ir_one_axis(op, x, &axis, err, errlen);
    if (e)
        return e;
    sm_dtype t = op->attrs.has_dtype ? op->attrs.dtype : in[0]->dtype;
    int minmax = op->kind == SM_OP_CUMMAX || op->kind == SM_OP_CUMMIN;
    if (t == SM_BOOL && !minmax)
        t = SM_I32;
    else if (t == SM_U8 && !minmax && !op->attrs.has_dtype)
        t = SM_I64; /* jnp's is uint32, which shmap lacks (sm_ir_infer_reduce) */
    if (t == SM_BOOL)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s does not accept dtype %s. Accepted dtypes are subtypes of number.",
                       sm_op_name(op->kind), sm_dtype_long_name(t));
    sm_shape s = *x;
    if (axis < 0) {
        s.rank = 1;
        if ((e = sm_shape_numel(x, &s.dims[0], err, errlen)))
            return e;
    }
    sm_ir_set(out, t, &s);
    out->weak = op->attrs.has_dtype ? 0 : in[0]->weak;
    return SM_OK;
}

/* ---- gathers ---- */

int sm_ir_gather_mode(const sm_ir_op *op)
{
    const char *m = op->attrs.spec;
    if (!m || strcmp(m, "fill") == 0)
        return 0;
    if (strcmp(m, "clip") == 0 || strcmp(m, "promise_in_bounds") == 0)
        return 1;
    return strcmp(m, "wrap") == 0 ? 2 : -1;
}

/* segment_sum(data, segment_ids, num_segments): data a float (the half
 * floats summed in float32) or i32 i64 array, segment_ids an integer
 * array of data's leading dimensions; the result has num_segments rows of
 * data's other dimensions. */
sm_err sm_ir_infer_segment_sum(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out, char *err,
                               size_t errlen)
{
    const sm_ir_value *x = in[0], *ids = in[1];
    char tx[240], ti[240];
    if (!sm_dtype_is_int(ids->dtype) && ids->dtype != SM_U8)
        return sm_fail(err, errlen, SM_EINVAL,
                       "segment_sum: segment_ids must be an integer array, got %s",
                       sm_ir_type_str(ids, ti, sizeof ti));
    if (!sm_dtype_is_float(x->dtype) && x->dtype != SM_I32 && x->dtype != SM_I64)
        return sm_fail(err, errlen, SM_EINVAL,
                       "segment_sum: data must be f16, bf16, f32, f64, i32 or i64, got %s",
                       sm_ir_type_str(x, tx, sizeof tx));
    int k = ids->shape.rank, ok = k >= 1 && k <= x->shape.rank;
    for (int d = 0; ok && d < k; d++)
        ok = ids->shape.dims[d] == x->shape.dims[d];
    if (!ok)
        return sm_fail(err, errlen, SM_EINVAL,
                       "segment_sum: segment_ids %s must have the shape of data's leading "
                       "dimensions (data is %s)",
                       sm_ir_type_str(ids, ti, sizeof ti), sm_ir_type_str(x, tx, sizeof tx));
    if (op->attrs.axis < 0)
        return sm_fail(err, errlen, SM_EINVAL, "segment_sum: num_segments must be >= 0, got %lld",
                       (long long)op->attrs.axis);
    sm_shape s = {.rank = 1 + x->shape.rank - k, .dims = {op->attrs.axis}};
    for (int d = k; d < x->shape.rank; d++)
        s.dims[1 + d - k] = x->shape.dims[d];
    sm_ir_set(out, x->dtype, &s);
    return SM_OK;
}

/* scatter, scatter_add, _mul, _min, _max (x.at[indices].op(updates)):
 * integer indices of any shape naming rows of the operand's first
 * dimension; updates of the operand's dtype and of the indices' shape
 * followed by the operand's other dimensions. The result is the operand's
 * type. scatter moves any dtype; scatter_add and scatter_mul take the
 * floats (f16 and bf16 in float32) and i32 i64, scatter_min and
 * scatter_max also u8 and bool (as the binary ops). */
sm_err sm_ir_infer_scatter(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0], *ix = in[1], *u = in[2];
    const char *name = sm_op_name(op->kind);
    char tx[240], ti[240], tu[240];
    if (!sm_dtype_is_int(ix->dtype) && ix->dtype != SM_U8)
        return sm_fail(err, errlen, SM_EINVAL, "%s: indices must be an integer array, got %s", name,
                       sm_ir_type_str(ix, ti, sizeof ti));
    if (x->shape.rank < 1)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: the operand must have a dimension to index, got %s", name,
                       sm_ir_type_str(x, tx, sizeof tx));
    int arith = op->kind == SM_OP_SCATTER_ADD || op->kind == SM_OP_SCATTER_MUL;
    int ext = op->kind == SM_OP_SCATTER_MIN || op->kind == SM_OP_SCATTER_MAX;
    if ((arith || ext) &&
        !(sm_dtype_is_float(x->dtype) || x->dtype == SM_I32 || x->dtype == SM_I64 ||
          (ext && (x->dtype == SM_U8 || x->dtype == SM_BOOL))))
        return sm_fail(err, errlen, SM_EINVAL, "%s does not take %s operands, got %s", name,
                       sm_dtype_name(x->dtype), sm_ir_type_str(x, tx, sizeof tx));
    int q = ix->shape.rank, ok = u->shape.rank == q + x->shape.rank - 1 && u->dtype == x->dtype;
    for (int d = 0; ok && d < q; d++)
        ok = u->shape.dims[d] == ix->shape.dims[d];
    for (int d = 1; ok && d < x->shape.rank; d++)
        ok = u->shape.dims[q + d - 1] == x->shape.dims[d];
    if (!ok)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: updates %s must have the operand's dtype and the indices' shape "
                       "followed by the operand's dimensions after the first (operand %s, "
                       "indices %s)",
                       name, sm_ir_type_str(u, tu, sizeof tu), sm_ir_type_str(x, tx, sizeof tx),
                       sm_ir_type_str(ix, ti, sizeof ti));
    sm_ir_set(out, x->dtype, &x->shape);
    return SM_OK;
}

/* take (jnp.take: a's shape with dimension axis replaced by the indices';
 * axis=None takes from the flattened a) and take_along_axis (the indices
 * have a's rank; the result's dimension axis is theirs, the others a's and
 * theirs broadcast). Integer indices; mode fill (default), clip
 * (promise_in_bounds) or wrap. */
sm_err sm_ir_infer_take(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_value *a = in[0], *ix = in[1];
    const char *name = sm_op_name(op->kind);
    char ta[240], ti[240];
    if (!sm_dtype_is_int(ix->dtype) && ix->dtype != SM_U8)
        return sm_fail(err, errlen, SM_EINVAL, "%s: indices must be an integer array, got %s", name,
                       sm_ir_type_str(ix, ti, sizeof ti));
    if (sm_ir_gather_mode(op) < 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: mode must be 'fill', 'clip', 'wrap' or 'promise_in_bounds', got '%s'",
                       name, op->attrs.spec);
    int axis;
    sm_err e = sm_ir_one_axis(op, &a->shape, &axis, err, errlen);
    if (e)
        return e;
    sm_shape s = {0};
    if (op->kind == SM_OP_TAKE) {
        if (axis < 0) { /* from the flattened a: the indices' shape */
            s = ix->shape;
        } else {
            if (a->shape.rank - 1 + ix->shape.rank > SM_MAX_RANK)
                return sm_fail(err, errlen, SM_EINVAL,
                               "take: the result would have more than %d "
                               "dimensions",
                               SM_MAX_RANK);
            for (int d = 0; d < axis; d++)
                s.dims[s.rank++] = a->shape.dims[d];
            for (int d = 0; d < ix->shape.rank; d++)
                s.dims[s.rank++] = ix->shape.dims[d];
            for (int d = axis + 1; d < a->shape.rank; d++)
                s.dims[s.rank++] = a->shape.dims[d];
        }
    } else {
        if (axis < 0 && a->shape.rank == 1)
            axis = 0;
        if (axis < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "take_along_axis: axis=None needs a 1-d array here; got %s",
                           sm_ir_type_str(a, ta, sizeof ta));
        if (ix->shape.rank != a->shape.rank)
            return sm_fail(err, errlen, SM_EINVAL,
                           "take_along_axis: indices and arr must have the same number of "
                           "dimensions; %d vs. %d",
                           ix->shape.rank, a->shape.rank);
        s = ix->shape;
        for (int d = 0; d < a->shape.rank; d++) {
            int64_t n = a->shape.dims[d], m = ix->shape.dims[d];
            if (d == axis)
                continue;
            if (n != m && n != 1 && m != 1)
                return sm_fail(err, errlen, SM_EINVAL,
                               "take_along_axis: indices %s do not broadcast with arr %s "
                               "(dimension %d)",
                               sm_ir_type_str(ix, ti, sizeof ti), sm_ir_type_str(a, ta, sizeof ta),
                               d);
            s.dims[d] = n == 1 ? m : n;
        }
    }
    sm_ir_set(out, a->dtype, &s);
    out->weak = a->weak;
    return SM_OK;
}
