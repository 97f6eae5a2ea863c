/* sm_exec_ops: handlers of the local (non-collective) ops: elementwise,
 * creation, products, reductions and shape ops. Operands are converted to
 * the dtype the verifier computed before the kernel runs. */
#include <stdlib.h>
#include <string.h>

#include "sm_array_share.h"
#include "sm_copy.h"
#include "sm_exec_impl.h"
#include "sm_ir_infer.h" /* sm_ir_promote: JAX's promotion with weak types */

int64_t sm_exec_numel(const sm_array *a)
{
    int64_t n = 1;
    for (int d = 0; d < a->shape.rank; d++)
        n *= a->shape.dims[d];
    return n;
}

sm_err sm_exec_as(const sm_array *a, sm_dtype t, const void **data, void **tmp, char *err,
                  size_t errlen)
{
    *tmp = NULL;
    if (a->dtype == t) {
        *data = a->data;
        return SM_OK;
    }
    int64_t n = sm_exec_numel(a);
    void *buf = malloc((size_t)n * sm_dtype_size(t) + 1);
    if (!buf)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory converting an operand");
    sm_err e = sm_kern_astype(a->dtype, a->data, t, buf, n, err, errlen);
    if (e) {
        free(buf);
        return e;
    }
    *data = buf;
    *tmp = buf;
    return SM_OK;
}

int64_t sm_exec_scalar_int(const sm_array *a)
{
    switch (a->dtype) {
    case SM_I32:
        return *(const int32_t *)a->data;
    case SM_I64:
        return *(const int64_t *)a->data;
    case SM_U8:
    case SM_BOOL:
        return *(const uint8_t *)a->data;
    case SM_F32:
        return (int64_t) * (const float *)a->data;
    case SM_F64:
        return (int64_t) * (const double *)a->data;
    default:
        return 0;
    }
}

static const sm_ir_value *sm_exec_val(const sm_exec_ctx *x, const sm_ir_op *op, int i)
{
    return &x->p->values[op->operands[i]];
}

/* Operand i of op in dtype t, as sm_exec_as, except that a weakly typed
 * float literal (a Python float: const(0.1), stored as a double) is made
 * from its double in t, not from the float32 it is materialized as: a
 * literal meeting a float64 array keeps its float64 value, as JAX's does
 * with x64 (x * 0.1 rounded 0.1 to float32 before). */
static sm_err sm_exec_operand_as(const sm_exec_ctx *x, const sm_ir_op *op, int i, const sm_array *a,
                                 sm_dtype t, const void **data, void **tmp, char *err,
                                 size_t errlen)
{
    const sm_ir_value *v = sm_exec_val(x, op, i);
    if (a->dtype != t && v->weak && v->def >= 0 && v->def < x->p->nops && sm_exec_numel(a) == 1 &&
        t == SM_F64) {
        const sm_ir_op *c = &x->p->ops[v->def];
        if (c->kind == SM_OP_CONST && c->attrs.value_is_float && !c->attrs.has_dtype) {
            void *buf = malloc(sizeof(double));
            if (!buf)
                return sm_fail(err, errlen, SM_ENOMEM, "out of memory converting a literal");
            sm_err e = sm_kern_astype(SM_F64, &c->attrs.f, t, buf, 1, err, errlen);
            if (e) {
                free(buf);
                return e;
            }
            *data = buf;
            *tmp = buf;
            return SM_OK;
        }
    }
    return sm_exec_as(a, t, data, tmp, err, errlen);
}

/* ---- elementwise ---- */

/* The dtype an elementwise kernel computes t in: float16 and bfloat16 in
 * float32 (each result rounded back once, as XLA's CPU backend does; for
 * + - * / and sqrt that is the correctly rounded half result), any other
 * itself. */
static sm_dtype sm_exec_compute_dtype(sm_dtype t)
{
    return t == SM_F16 || t == SM_BF16 ? SM_F32 : t;
}

/* Where a kernel of dtype c writes out: out's data, or (c not out's dtype)
 * a new zeroed buffer of out's elements (as out is for the kernels that
 * add into it), given back to out by sm_exec_store. */
static sm_err sm_exec_dest(sm_array *out, sm_dtype c, void **dst, char *err, size_t errlen)
{
    *dst = out->data;
    if (c == out->dtype)
        return SM_OK;
    if (!(*dst = calloc((size_t)sm_exec_numel(out) + 1, sm_dtype_size(c))))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a %s result",
                       sm_dtype_long_name(c));
    return SM_OK;
}

static sm_err sm_exec_store(sm_array *out, sm_dtype c, void *dst, sm_err e, char *err,
                            size_t errlen)
{
    if (dst != out->data) {
        if (!e)
            e = sm_kern_astype(c, dst, out->dtype, out->data, sm_exec_numel(out), err, errlen);
        free(dst);
    }
    return e;
}

sm_err sm_exec_binary(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                      char *err, size_t errlen)
{
    sm_kern_binary_op k = (sm_kern_binary_op)sm_exec_kern_of(op->kind);
    sm_dtype t = out->dtype;
    if (sm_kern_binary_is_compare(k)) {
        const sm_ir_value *a = sm_exec_val(x, op, 0), *b = sm_exec_val(x, op, 1);
        int weak;
        t = sm_ir_promote(a->dtype, a->weak, b->dtype, b->weak, &weak);
    }
    sm_dtype c = sm_exec_compute_dtype(t);
    const void *da, *db;
    void *ta = NULL, *tb = NULL, *dst = NULL;
    sm_err e = sm_exec_operand_as(x, op, 0, in[0], c, &da, &ta, err, errlen);
    if (!e)
        e = sm_exec_operand_as(x, op, 1, in[1], c, &db, &tb, err, errlen);
    sm_dtype r = sm_kern_binary_is_compare(k) ? out->dtype : c; /* what the kernel writes */
    if (!e && !(e = sm_exec_dest(out, r, &dst, err, errlen))) {
        e = sm_kern_binary(k, c, da, &in[0]->shape, db, &in[1]->shape, dst, err, errlen);
        e = sm_exec_store(out, r, dst, e, err, errlen);
    }
    free(ta);
    free(tb);
    return e;
}

sm_err sm_exec_unary(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                     char *err, size_t errlen)
{
    sm_kern_unary_op k = (sm_kern_unary_op)sm_exec_kern_of(op->kind);
    sm_dtype c = sm_exec_compute_dtype(out->dtype);
    const void *d;
    void *t, *dst = NULL;
    sm_err e = sm_exec_as(in[0], c, &d, &t, err, errlen);
    if (!e && !(e = sm_exec_dest(out, c, &dst, err, errlen))) {
        e = sm_kern_unary(k, c, &out->shape, d, dst, err, errlen);
        e = sm_exec_store(out, c, dst, e, err, errlen);
    }
    free(t);
    return e;
}

sm_err sm_exec_where(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                     char *err, size_t errlen)
{
    const void *dc, *da, *db;
    void *tc = NULL, *ta = NULL, *tb = NULL;
    sm_err e = sm_exec_as(in[0], SM_BOOL, &dc, &tc, err, errlen);
    if (!e)
        e = sm_exec_operand_as(x, op, 1, in[1], out->dtype, &da, &ta, err, errlen);
    if (!e)
        e = sm_exec_operand_as(x, op, 2, in[2], out->dtype, &db, &tb, err, errlen);
    if (!e)
        e = sm_kern_where(out->dtype, dc, &in[0]->shape, da, &in[1]->shape, db, &in[2]->shape,
                          out->data, NULL, err, errlen);
    free(tc);
    free(ta);
    free(tb);
    return e;
}

/* astype, and pvary (a copy: the value does not change). */
sm_err sm_exec_astype(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                      char *err, size_t errlen)
{
    /* to its own dtype (and pvary, pcast): the operand's bytes, shared */
    if (in[0]->dtype == out->dtype && out->nbytes && sm_array_alias(out, in[0], 0))
        return SM_OK;
    return sm_kern_astype(in[0]->dtype, in[0]->data, out->dtype, out->data, sm_exec_numel(out), err,
                          errlen);
}

/* bitcast_convert_type: the operand's bytes as they are (shared when they
 * can be), their dtype another of the same width. */
sm_err sm_exec_bitcast(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                       char *err, size_t errlen)
{
    if (out->nbytes && !sm_array_alias(out, in[0], 0))
        memcpy(out->data, in[0]->data, (size_t)out->nbytes);
    return SM_OK;
}

/* ---- creation ---- */

sm_err sm_exec_fill(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    const sm_ir_attrs *a = &op->attrs;
    double f = 0;
    int64_t i = 0;
    int is_float = 0;
    if (op->kind == SM_OP_ONES) {
        i = 1;
    } else if (op->kind == SM_OP_FULL || op->kind == SM_OP_CONST) {
        is_float = a->value_is_float;
        f = a->f;
        i = a->i;
    }
    unsigned char one[16];
    sm_err e = is_float ? sm_kern_astype(SM_F64, &f, out->dtype, one, 1, err, errlen)
                        : sm_kern_astype(SM_I64, &i, out->dtype, one, 1, err, errlen);
    if (e)
        return e;
    return sm_kern_fill(out->dtype, out->data, sm_exec_numel(out), one, err, errlen);
}

sm_err sm_exec_arange(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                      char *err, size_t errlen)
{
    const sm_ir_ints *v = &op->attrs.ints;
    int64_t start = v->n == 1 ? 0 : v->v[0], step = v->n == 3 ? v->v[2] : 1;
    int64_t n = sm_exec_numel(out);
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!buf)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for arange");
    for (int64_t k = 0; k < n; k++)
        buf[k] = start + k * step;
    sm_err e = sm_kern_astype(SM_I64, buf, out->dtype, out->data, n, err, errlen);
    free(buf);
    return e;
}

/* ---- products ---- */

/* One-operand einsum (transpose, diagonal, sums) by a loop over the
 * operand's elements, accumulating in f64 or i64. */
static sm_err sm_exec_einsum1(const char *spec, const sm_array *a, sm_array *out, char *err,
                              size_t errlen)
{
    int pos[128];
    int64_t idx[SM_MAX_RANK] = {0}, ostr[SM_MAX_RANK], istr[SM_MAX_RANK];
    char in_l[SM_MAX_RANK + 1] = {0}, out_l[SM_MAX_RANK + 1] = {0};
    int ni = 0, no = 0;
    const char *q = spec;
    for (; *q && *q != '-'; q++)
        if (*q != ' ' && ni < SM_MAX_RANK)
            in_l[ni++] = *q;
    if (*q == '-') {
        for (q += 2; *q; q++)
            if (*q != ' ' && no < SM_MAX_RANK)
                out_l[no++] = *q;
    } else {
        for (int c = 'A'; c <= 'z'; c++) {
            int cnt = 0;
            for (int d = 0; d < ni; d++)
                cnt += in_l[d] == c;
            if (cnt == 1 && no < SM_MAX_RANK)
                out_l[no++] = (char)c;
        }
    }
    int integer = !sm_dtype_is_float(out->dtype);
    int64_t n = sm_exec_numel(out), total = sm_exec_numel(a);
    void *acc = calloc((size_t)n + 1, 8);
    const void *da;
    void *ta = NULL;
    sm_err e = acc ? sm_exec_as(a, integer ? SM_I64 : SM_F64, &da, &ta, err, errlen)
                   : sm_fail(err, errlen, SM_ENOMEM, "out of memory for einsum");
    if (e)
        goto done;
    sm_shape_strides(&out->shape, ostr, err, errlen);
    sm_shape_strides(&a->shape, istr, err, errlen);
    for (int c = 0; c < 128; c++)
        pos[c] = -1;
    for (int d = 0; d < ni; d++)
        if (pos[(unsigned char)in_l[d] & 127] < 0)
            pos[(unsigned char)in_l[d] & 127] = d;
    for (int64_t f = 0; f < total; f++) {
        int64_t rest = f, o = 0, ok = 1;
        for (int d = 0; d < ni; d++) {
            idx[d] = rest / istr[d];
            rest %= istr[d];
        }
        for (int d = 0; d < ni && ok; d++)
            ok = idx[d] == idx[pos[(unsigned char)in_l[d] & 127]];
        if (!ok)
            continue;
        for (int d = 0; d < no; d++)
            o += idx[pos[(unsigned char)out_l[d] & 127]] * ostr[d];
        if (integer)
            ((int64_t *)acc)[o] += ((const int64_t *)da)[f];
        else
            ((double *)acc)[o] += ((const double *)da)[f];
    }
    e = sm_kern_astype(integer ? SM_I64 : SM_F64, acc, out->dtype, out->data, n, err, errlen);
done:
    free(acc);
    free(ta);
    return e;
}

sm_err sm_exec_product(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                       char *err, size_t errlen)
{
    /* half floats in float32; bool and uint8 in int32, whose sums give
     * theirs (uint8 modulo 256; bool: any product true, as XLA's dot of
     * predicates), made once */
    sm_dtype t =
        out->dtype == SM_BOOL || out->dtype == SM_U8 ? SM_I32 : sm_exec_compute_dtype(out->dtype);
    if (op->kind == SM_OP_EINSUM && op->noperands == 1)
        return sm_exec_einsum1(op->attrs.spec ? op->attrs.spec : "", in[0], out, err, errlen);
    const void *da, *db;
    void *ta = NULL, *tb = NULL, *dst = NULL;
    sm_err e = sm_exec_as(in[0], t, &da, &ta, err, errlen);
    if (!e)
        e = sm_exec_as(in[1], t, &db, &tb, err, errlen);
    if (!e)
        e = sm_exec_dest(out, t, &dst, err, errlen);
    if (e)
        goto done;
    const sm_shape *as = &in[0]->shape, *bs = &in[1]->shape;
    if (op->kind == SM_OP_DOT && (as->rank == 0 || bs->rank == 0))
        e = sm_kern_binary(SM_KERN_MULTIPLY, t, da, as, db, bs, dst, err, errlen);
    else if (op->kind == SM_OP_DOT)
        e = sm_kern_dot(t, da, as, db, bs, dst, err, errlen);
    else if (op->kind == SM_OP_MATMUL)
        e = sm_kern_matmul(t, da, as, 0, db, bs, 0, dst, err, errlen);
    else
        e = sm_kern_einsum(op->attrs.spec ? op->attrs.spec : "", t, da, as, db, bs, dst, err,
                           errlen);
    e = sm_exec_store(out, t, dst, e, err, errlen);
done:
    free(ta);
    free(tb);
    return e;
}

/* ---- reductions ---- */

sm_err sm_exec_reduce(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                      char *err, size_t errlen)
{
    sm_kern_reduce_op k = (sm_kern_reduce_op)sm_exec_kern_of(op->kind);
    int axes[SM_IR_MAX_INTS];
    int naxes = -1;
    if (op->attrs.has_ints) {
        naxes = op->attrs.ints.n;
        for (int i = 0; i < naxes; i++)
            axes[i] = (int)op->attrs.ints.v[i];
    }
    /* half floats in float32, as jnp's reductions upcast them */
    sm_dtype t =
        sm_exec_compute_dtype(k == SM_KERN_MAX || k == SM_KERN_MIN ? in[0]->dtype : out->dtype);
    const void *d;
    void *tmp, *dst = NULL;
    sm_err e = sm_exec_as(in[0], t, &d, &tmp, err, errlen);
    if (!e && !(e = sm_exec_dest(out, t, &dst, err, errlen))) {
        e = sm_kern_reduce(k, t, d, &in[0]->shape, naxes < 0 ? NULL : axes, naxes,
                           op->attrs.keepdims, dst, err, errlen);
        e = sm_exec_store(out, t, dst, e, err, errlen);
    }
    free(tmp);
    return e;
}

/* argmax, argmin: int32 indices along the op's axis (None: flattened). */
sm_err sm_exec_argminmax(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                         char *err, size_t errlen)
{
    sm_dtype t = sm_exec_compute_dtype(in[0]->dtype); /* float32 keeps a half's order */
    const void *d;
    void *tmp;
    sm_err e = sm_exec_as(in[0], t, &d, &tmp, err, errlen);
    if (!e)
        e = sm_kern_argminmax(sm_exec_kern_of(op->kind) == SM_KERN_MAX, t, d, &in[0]->shape,
                              sm_ir_op_axis(op, in[0]->shape.rank), out->data, err, errlen);
    free(tmp);
    return e;
}

/* cumsum, cumprod, cummax, cummin, in the result's dtype (dtype=, or int32
 * for a bool operand); the half floats in float32, each running result
 * rounded once (numpy's float32 scan, rounded). */
sm_err sm_exec_cumulative(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                          char *err, size_t errlen)
{
    sm_dtype t = sm_exec_compute_dtype(out->dtype);
    int64_t n = sm_exec_numel(in[0]);
    const void *d;
    void *tmp, *wide = NULL, *dst = NULL;
    sm_err e = sm_exec_as(in[0], out->dtype, &d, &tmp, err, errlen); /* dtype= rounds first */
    if (!e && t != out->dtype) {
        if (!(wide = malloc((size_t)n * sm_dtype_size(t) + 1)))
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory converting an operand");
        else if (!(e = sm_kern_astype(out->dtype, d, t, wide, n, err, errlen)))
            d = wide;
    }
    if (!e && !(e = sm_exec_dest(out, t, &dst, err, errlen))) {
        e = sm_kern_cumulative((sm_kern_reduce_op)sm_exec_kern_of(op->kind), t, d, &in[0]->shape,
                               sm_ir_op_axis(op, in[0]->shape.rank), dst, err, errlen);
        e = sm_exec_store(out, t, dst, e, err, errlen);
    }
    free(tmp);
    free(wide);
    return e;
}

/* sort, argsort: along the op's axis (the last by default); the half
 * floats as float32, which orders them alike and gives them back exactly. */
sm_err sm_exec_sort(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    int arg = op->kind == SM_OP_ARGSORT;
    sm_dtype t = sm_exec_compute_dtype(in[0]->dtype);
    const void *d;
    void *tmp, *dst = NULL;
    sm_err e = sm_exec_as(in[0], t, &d, &tmp, err, errlen);
    if (!e && (arg || !(e = sm_exec_dest(out, t, &dst, err, errlen)))) {
        e = sm_kern_sort(t, d, &in[0]->shape, sm_ir_op_axis(op, in[0]->shape.rank), dst,
                         arg ? out->data : NULL, err, errlen);
        if (!arg)
            e = sm_exec_store(out, t, dst, e, err, errlen);
    }
    free(tmp);
    return e;
}

/* take, take_along_axis: the indices as int64, the mode from the op. */
sm_err sm_exec_take(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    static const sm_kern_gather_mode modes[] = {SM_KERN_GATHER_FILL, SM_KERN_GATHER_CLIP,
                                                SM_KERN_GATHER_WRAP};
    int m = sm_ir_gather_mode(op);
    const void *ix;
    void *tmp;
    sm_err e = sm_exec_as(in[1], SM_I64, &ix, &tmp, err, errlen);
    if (e)
        return e;
    const sm_array *a = in[0];
    int axis = sm_ir_op_axis(op, a->shape.rank);
    sm_shape flat = {.rank = 1, .dims = {sm_exec_numel(a)}};
    if (op->kind == SM_OP_TAKE)
        e = sm_kern_take(a->dtype, a->data, axis < 0 ? &flat : &a->shape, axis < 0 ? 0 : axis, ix,
                         &in[1]->shape, modes[m < 0 ? 0 : m], out->data, err, errlen);
    else
        e = sm_kern_take_along_axis(a->dtype, a->data, &a->shape, axis < 0 ? 0 : axis, ix,
                                    &in[1]->shape, modes[m < 0 ? 0 : m], out->data, err, errlen);
    free(tmp);
    return e;
}

/* segment_sum: the ids as int64; the half floats summed in float32, each
 * sum rounded once. */
sm_err sm_exec_segment_sum(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                           char *err, size_t errlen)
{
    sm_dtype t = sm_exec_compute_dtype(in[0]->dtype);
    const void *ids, *d = NULL;
    void *tmp, *tmpd = NULL, *dst = NULL;
    sm_err e = sm_exec_as(in[1], SM_I64, &ids, &tmp, err, errlen);
    if (!e)
        e = sm_exec_as(in[0], t, &d, &tmpd, err, errlen);
    if (!e && !(e = sm_exec_dest(out, t, &dst, err, errlen))) {
        int64_t nlead = sm_exec_numel(in[1]), inner = 1;
        for (int k = in[1]->shape.rank; k < in[0]->shape.rank; k++)
            inner *= in[0]->shape.dims[k];
        e = sm_kern_segment_sum(t, d, nlead, inner, ids, op->attrs.axis, dst, err, errlen);
        e = sm_exec_store(out, t, dst, e, err, errlen);
    }
    free(tmp);
    free(tmpd);
    return e;
}

/* scatter, scatter_add, _mul, _min, _max: the operand's block copied, then
 * its rows updated in index order (the first dimension is whole). The half
 * floats are combined in float32 (scatter moves them as they are): an
 * element updated several times is rounded once, at the end. */
sm_err sm_exec_scatter(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                       char *err, size_t errlen)
{
    _Static_assert(
        SM_OP_SCATTER_ADD == SM_OP_SCATTER + 1 && SM_OP_SCATTER_MUL == SM_OP_SCATTER + 2 &&
            SM_OP_SCATTER_MIN == SM_OP_SCATTER + 3 && SM_OP_SCATTER_MAX == SM_OP_SCATTER + 4,
        "the scatter rows follow one another in the op table");
    static const sm_kern_binary_op ops[] = {SM_KERN_ADD, SM_KERN_ADD, SM_KERN_MULTIPLY,
                                            SM_KERN_MINIMUM, SM_KERN_MAXIMUM};
    const sm_array *a = in[0];
    int k = (int)(op->kind - SM_OP_SCATTER);
    sm_dtype t = k == 0 ? a->dtype : sm_exec_compute_dtype(a->dtype);
    const void *ids, *da = NULL, *du = NULL;
    void *tmp, *ta = NULL, *tu = NULL, *dst = NULL;
    sm_err e = sm_exec_as(in[1], SM_I64, &ids, &tmp, err, errlen);
    if (!e)
        e = sm_exec_as(a, t, &da, &ta, err, errlen);
    if (!e)
        e = sm_exec_as(in[2], t, &du, &tu, err, errlen);
    if (!e && !(e = sm_exec_dest(out, t, &dst, err, errlen))) {
        int64_t inner = 1;
        for (int d = 1; d < a->shape.rank; d++)
            inner *= a->shape.dims[d];
        memcpy(dst, da, (size_t)sm_exec_numel(a) * sm_dtype_size(t));
        e = sm_kern_scatter(k == 0, ops[k], t, dst, a->shape.rank ? a->shape.dims[0] : 0, inner,
                            ids, sm_exec_numel(in[1]), du, err, errlen);
        e = sm_exec_store(out, t, dst, e, err, errlen);
    }
    free(tmp);
    free(ta);
    free(tu);
    return e;
}

/* ---- shape ---- */

/* reshape, expand_dims, squeeze: the same elements in a new shape. */
sm_err sm_exec_reshape(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                       char *err, size_t errlen)
{
    /* the same bytes: shared with the operand when it has a block */
    if (out->nbytes && !sm_array_alias(out, in[0], 0))
        sm_copy(out->data, in[0]->data, (size_t)out->nbytes);
    return SM_OK;
}

sm_err sm_exec_transpose(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                         char *err, size_t errlen)
{
    int perm[SM_MAX_RANK], r = in[0]->shape.rank;
    for (int d = 0; d < r; d++) {
        int64_t a = op->attrs.has_ints ? op->attrs.ints.v[d] : r - 1 - d;
        perm[d] = (int)(a < 0 ? a + r : a);
    }
    /* dimensions longer than 1 kept in order: the same bytes, shared */
    int last = -1, same = 1;
    for (int d = 0; d < r && same; d++)
        if (in[0]->shape.dims[perm[d]] > 1) {
            same = perm[d] > last;
            last = perm[d];
        }
    if (same && out->nbytes && sm_array_alias(out, in[0], 0))
        return SM_OK;
    return sm_kern_transpose(in[0]->dtype, in[0]->data, &in[0]->shape, perm, out->data, err,
                             errlen);
}

sm_err sm_exec_broadcast_to(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                            char *err, size_t errlen)
{
    if (out->nbytes == in[0]->nbytes && out->nbytes && sm_array_alias(out, in[0], 0))
        return SM_OK; /* to as many elements: only size-1 dimensions added */
    return sm_kern_broadcast_to(in[0]->dtype, in[0]->data, &in[0]->shape, &out->shape, out->data,
                                err, errlen);
}

/* The byte offset in x of a slice of it [start, limit) with unit
 * strides that is one contiguous run of x's bytes (the dimensions after
 * some dimension whole, those before it of extent 1), or -1. */
static int64_t sm_exec_slice_run(const sm_array *x, const int64_t *start, const int64_t *limit,
                                 const int64_t *strides)
{
    const sm_shape *xs = &x->shape;
    int j = xs->rank - 1;
    for (int d = 0; d < xs->rank; d++)
        if (start[d] < 0 || limit[d] < start[d] || limit[d] > xs->dims[d] ||
            (strides && strides[d] != 1))
            return -1;
    while (j >= 0 && start[j] == 0 && limit[j] == xs->dims[j])
        j--;
    int64_t at = 0;
    for (int d = 0; d < xs->rank; d++) {
        if (d < j && limit[d] - start[d] != 1)
            return -1;
        at = at * xs->dims[d] + start[d];
    }
    return at * (int64_t)sm_dtype_size(x->dtype);
}

sm_err sm_exec_slice(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                     char *err, size_t errlen)
{
    const int64_t *strides = op->attrs.has_ints3 ? op->attrs.ints3.v : NULL;
    int64_t at = sm_exec_slice_run(in[0], op->attrs.ints.v, op->attrs.ints2.v, strides);
    /* one contiguous run (a block of rows): shared with the operand where
     * it lies on a 64-byte boundary */
    if (out->nbytes && at >= 0 && sm_array_alias(out, in[0], at))
        return SM_OK;
    return sm_kern_slice(in[0]->dtype, in[0]->data, &in[0]->shape, op->attrs.ints.v,
                         op->attrs.ints2.v, op->attrs.has_ints3 ? op->attrs.ints3.v : NULL,
                         out->data, err, errlen);
}

/* dynamic_slice (one start operand per dimension) and dynamic_slice_in_dim
 * (one start along attrs.axis). */
sm_err sm_exec_dynamic_slice(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                             char *err, size_t errlen)
{
    const sm_shape *xs = &in[0]->shape;
    int64_t start[SM_MAX_RANK] = {0};
    if (op->kind == SM_OP_DYNAMIC_SLICE) {
        for (int d = 0; d < xs->rank; d++)
            start[d] = sm_exec_scalar_int(in[1 + d]);
    } else {
        int64_t a = op->attrs.axis < 0 ? op->attrs.axis + xs->rank : op->attrs.axis;
        start[a] = sm_exec_scalar_int(in[1]);
    }
    /* clamped into the operand as the kernel does; one contiguous run of
     * it (whole rows) is shared */
    int64_t limit[SM_MAX_RANK];
    for (int d = 0; d < xs->rank; d++) {
        int64_t hi = xs->dims[d] - out->shape.dims[d];
        start[d] = start[d] < 0 ? 0 : start[d] > hi ? hi : start[d];
        limit[d] = start[d] + out->shape.dims[d];
    }
    int64_t at = sm_exec_slice_run(in[0], start, limit, NULL);
    if (out->nbytes && at >= 0 && sm_array_alias(out, in[0], at))
        return SM_OK;
    return sm_kern_dynamic_slice(in[0]->dtype, in[0]->data, xs, start, out->shape.dims, out->data,
                                 err, errlen);
}

sm_err sm_exec_dynamic_update_slice(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in,
                                    sm_array *out, char *err, size_t errlen)
{
    int64_t start[SM_MAX_RANK] = {0};
    for (int d = 0; d < in[0]->shape.rank; d++)
        start[d] = sm_exec_scalar_int(in[2 + d]);
    const void *du;
    void *tu;
    sm_err e = sm_exec_as(in[1], out->dtype, &du, &tu, err, errlen);
    if (!e)
        e = sm_kern_dynamic_update_slice(out->dtype, in[0]->data, &in[0]->shape, du, &in[1]->shape,
                                         start, out->data, err, errlen);
    free(tu);
    return e;
}

sm_err sm_exec_concatenate(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                           char *err, size_t errlen)
{
    int n = op->noperands;
    const void *d[SM_OP_MAXARGS];
    void *t[SM_OP_MAXARGS] = {0};
    sm_shape s[SM_OP_MAXARGS];
    sm_err e = SM_OK;
    for (int i = 0; i < n && !e; i++) {
        s[i] = in[i]->shape;
        e = sm_exec_as(in[i], out->dtype, &d[i], &t[i], err, errlen);
    }
    int64_t a = op->attrs.axis < 0 ? op->attrs.axis + out->shape.rank : op->attrs.axis;
    if (!e)
        e = sm_kern_concatenate(out->dtype, n, d, s, (int)a, out->data, err, errlen);
    for (int i = 0; i < n; i++)
        free(t[i]);
    return e;
}

sm_err sm_exec_pad(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                   char *err, size_t errlen)
{
    int64_t lo[SM_MAX_RANK], hi[SM_MAX_RANK];
    for (int d = 0; d < in[0]->shape.rank; d++) {
        lo[d] = op->attrs.ints.v[2 * d];
        hi[d] = op->attrs.ints.v[2 * d + 1];
    }
    return sm_kern_pad(in[0]->dtype, in[0]->data, &in[0]->shape, lo, hi, out->data, err, errlen);
}

sm_err sm_exec_tile(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    return sm_kern_tile(in[0]->dtype, in[0]->data, &in[0]->shape, op->attrs.ints.v,
                        op->attrs.ints.n, out->data, err, errlen);
}

/* np.roll: one axis at a time (several shifts and axes roll in turn). */
sm_err sm_exec_rev(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                   char *err, size_t errlen)
{
    int rev[SM_MAX_RANK] = {0};
    for (int k = 0; k < op->attrs.ints.n; k++) {
        int a;
        if (sm_ir_norm_axis(op->attrs.ints.v[k], in[0]->shape.rank, &a) == 0)
            rev[a] = 1;
    }
    return sm_kern_rev(in[0]->dtype, in[0]->data, &in[0]->shape, rev, out->data, err, errlen);
}

sm_err sm_exec_roll(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    const sm_ir_ints *sh = &op->attrs.ints, *ax = &op->attrs.ints2;
    const sm_shape *s = &in[0]->shape;
    if (!op->attrs.has_ints2)
        return sm_kern_roll(in[0]->dtype, in[0]->data, s, sh->v[0], SM_KERN_AXIS_NONE, out->data,
                            err, errlen);
    if (ax->n == 0)
        return sm_exec_reshape(x, op, in, out, err, errlen);
    void *tmp = NULL;
    sm_err e = SM_OK;
    if (ax->n > 1 && (e = sm_array_scratch(x->pool, (size_t)out->nbytes, "the buffer of roll", &tmp,
                                           err, errlen)))
        return e;
    const void *src = in[0]->data;
    /* Alternate between out and tmp so the last roll lands in out. */
    for (int i = 0; i < ax->n && !e; i++) {
        void *dst = ((ax->n - 1 - i) % 2 == 0) ? out->data : tmp;
        int a = (int)(ax->v[i] < 0 ? ax->v[i] + s->rank : ax->v[i]);
        e = sm_kern_roll(in[0]->dtype, src, s, sh->n == 1 ? sh->v[0] : sh->v[i], a, dst, err,
                         errlen);
        src = dst;
    }
    if (tmp)
        sm_array_data_free(x->pool, tmp, (size_t)out->nbytes);
    return e;
}
