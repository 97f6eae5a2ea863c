/* Reductions (sum mean max min prod any all over a set of axes), argmax and
 * argmin, the running reductions (cumsum cumprod cummax cummin), sort and
 * argsort, and the collective helpers accumulate and scale.
 *
 * The input's dims are collapsed into alternating kept/reduced groups. When
 * the last group is reduced, each output element combines contiguous runs,
 * each summed over 16 lanes and folded by a fixed tree; when the last group
 * is kept, whole rows are accumulated elementwise into an accumulator row.
 * Either way the order is fixed by the shape alone, so results are bitwise
 * reproducible. f32 sums and products accumulate in f64; integer sums
 * wrap. argmax and the running reductions walk the axis in index order. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm_kern_impl.h"

static const char *const reduce_names[] = {
#define SMK_NAME(e, name) name,
    SM_KERN_REDUCE_LIST(SMK_NAME)
#undef SMK_NAME
};
_Static_assert(sizeof reduce_names / sizeof *reduce_names == SM_KERN_REDUCE_COUNT, "names");

const char *sm_kern_reduce_name(sm_kern_reduce_op op)
{
    return (unsigned)op < SM_KERN_REDUCE_COUNT ? reduce_names[op] : "?";
}

/* A reduction kit for one (op, dtype): accumulator element size and four
 * typed loops over accumulators of type A. */
typedef struct {
    size_t asz;
    void (*init)(void *acc, int64_t n);
    void (*row)(void *acc1, const void *x, int64_t n); /* *acc1 op= reduce(x[0..n)) */
    void (*col)(void *acc, const void *x, int64_t n);  /* acc[i] op= x[i] */
    void (*fin)(void *out, const void *acc, int64_t n, double count, int mean);
} smk_red_kit;

#define SMK_ADD(a, v)  ((a) + (v))
#define SMK_FMAX(a, v) (((a) >= (v) || (a) != (a)) ? (a) : (v))
#define SMK_FMIN(a, v) (((a) <= (v) || (a) != (a)) ? (a) : (v))
#define SMK_IMAX(a, v) ((a) > (v) ? (a) : (v))
#define SMK_IMIN(a, v) ((a) < (v) ? (a) : (v))
#define SMK_MUL(a, v)  ((a) * (v))

#define SMK_RED_KIT(name, T, A, IDENT, COMB)                                                       \
    static void red_init_##name(void *acc_, int64_t n)                                             \
    {                                                                                              \
        A *acc = acc_;                                                                             \
        SMK_FOR(i, n, { acc[i] = (IDENT); });                                                      \
    }                                                                                              \
    static void red_row_##name(void *acc1, const void *x_, int64_t n)                              \
    {                                                                                              \
        const T *x = x_;                                                                           \
        A l[16];                                                                                   \
        for (int k = 0; k < 16; k++)                                                               \
            l[k] = (IDENT);                                                                        \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16)                                                               \
            for (int k = 0; k < 16; k++) {                                                         \
                A a = l[k], v = (A)x[i + k];                                                       \
                l[k] = COMB(a, v);                                                                 \
            }                                                                                      \
        for (int k = 0; i + k < n; k++) {                                                          \
            A a = l[k], v = (A)x[i + k];                                                           \
            l[k] = COMB(a, v);                                                                     \
        }                                                                                          \
        for (int w = 8; w >= 1; w >>= 1)                                                           \
            for (int k = 0; k < w; k++) {                                                          \
                A a = l[k], v = l[k + w];                                                          \
                l[k] = COMB(a, v);                                                                 \
            }                                                                                      \
        A a = *(A *)acc1, v = l[0];                                                                \
        *(A *)acc1 = COMB(a, v);                                                                   \
    }                                                                                              \
    static inline void red_col_##name##_r(A *restrict acc, const T *restrict x, int64_t n)         \
    {                                                                                              \
        SMK_FOR(i, n, {                                                                            \
            A a = acc[i], v = (A)x[i];                                                             \
            acc[i] = COMB(a, v);                                                                   \
        });                                                                                        \
    }                                                                                              \
    static void red_col_##name(void *acc, const void *x, int64_t n)                                \
    {                                                                                              \
        red_col_##name##_r(acc, x, n);                                                             \
    }                                                                                              \
    static inline void red_fin_##name##_r(T *restrict out, const A *restrict acc, int64_t n,       \
                                          double count, int mean)                                  \
    {                                                                                              \
        if (mean)                                                                                  \
            for (int64_t i = 0; i < n; i++)                                                        \
                out[i] = (T)((double)acc[i] / count);                                              \
        else                                                                                       \
            SMK_FOR(i, n, { out[i] = (T)acc[i]; });                                                \
    }                                                                                              \
    static void red_fin_##name(void *out, const void *acc, int64_t n, double count, int mean)      \
    {                                                                                              \
        red_fin_##name##_r(out, acc, n, count, mean);                                              \
    }                                                                                              \
    static const smk_red_kit red_kit_##name = {sizeof(A), red_init_##name, red_row_##name,         \
                                               red_col_##name, red_fin_##name};

SMK_RED_KIT(sum_f32, float, double, 0.0, SMK_ADD)
SMK_RED_KIT(sum_f64, double, double, 0.0, SMK_ADD)
SMK_RED_KIT(sum_i32, int32_t, uint32_t, 0, SMK_ADD)
SMK_RED_KIT(sum_i64, int64_t, uint64_t, 0, SMK_ADD)
SMK_RED_KIT(sum_u8, uint8_t, uint8_t, 0, SMK_ADD)
SMK_RED_KIT(max_f32, float, float, -INFINITY, SMK_FMAX)
SMK_RED_KIT(max_f64, double, double, -INFINITY, SMK_FMAX)
SMK_RED_KIT(max_i32, int32_t, int32_t, INT32_MIN, SMK_IMAX)
SMK_RED_KIT(max_i64, int64_t, int64_t, INT64_MIN, SMK_IMAX)
SMK_RED_KIT(max_u8, uint8_t, uint8_t, 0, SMK_IMAX)
SMK_RED_KIT(min_f32, float, float, INFINITY, SMK_FMIN)
SMK_RED_KIT(min_f64, double, double, INFINITY, SMK_FMIN)
SMK_RED_KIT(min_i32, int32_t, int32_t, INT32_MAX, SMK_IMIN)
SMK_RED_KIT(min_i64, int64_t, int64_t, INT64_MAX, SMK_IMIN)
SMK_RED_KIT(min_u8, uint8_t, uint8_t, 255, SMK_IMIN)
SMK_RED_KIT(min_bool, uint8_t, uint8_t, 1, SMK_IMIN)
SMK_RED_KIT(prod_f32, float, double, 1.0, SMK_MUL)
SMK_RED_KIT(prod_f64, double, double, 1.0, SMK_MUL)
SMK_RED_KIT(prod_i32, int32_t, uint32_t, 1, SMK_MUL)
SMK_RED_KIT(prod_i64, int64_t, uint64_t, 1, SMK_MUL)
SMK_RED_KIT(prod_u8, uint8_t, uint8_t, 1, SMK_MUL)

static const smk_red_kit *const red_kits[SM_KERN_REDUCE_COUNT][SM_DTYPE_COUNT] = {
    [SM_KERN_SUM] = {[SM_F32] = &red_kit_sum_f32,
                     [SM_F64] = &red_kit_sum_f64,
                     [SM_I32] = &red_kit_sum_i32,
                     [SM_I64] = &red_kit_sum_i64,
                     [SM_U8] = &red_kit_sum_u8},
    [SM_KERN_MEAN] = {[SM_F32] = &red_kit_sum_f32, [SM_F64] = &red_kit_sum_f64},
    [SM_KERN_MAX] = {[SM_F32] = &red_kit_max_f32,
                     [SM_F64] = &red_kit_max_f64,
                     [SM_I32] = &red_kit_max_i32,
                     [SM_I64] = &red_kit_max_i64,
                     [SM_U8] = &red_kit_max_u8,
                     [SM_BOOL] = &red_kit_max_u8},
    [SM_KERN_MIN] = {[SM_F32] = &red_kit_min_f32,
                     [SM_F64] = &red_kit_min_f64,
                     [SM_I32] = &red_kit_min_i32,
                     [SM_I64] = &red_kit_min_i64,
                     [SM_U8] = &red_kit_min_u8,
                     [SM_BOOL] = &red_kit_min_bool},
    [SM_KERN_PROD] = {[SM_F32] = &red_kit_prod_f32,
                      [SM_F64] = &red_kit_prod_f64,
                      [SM_I32] = &red_kit_prod_i32,
                      [SM_I64] = &red_kit_prod_i64,
                      [SM_U8] = &red_kit_prod_u8},
    [SM_KERN_ANY] = {[SM_BOOL] = &red_kit_max_u8},
    [SM_KERN_ALL] = {[SM_BOOL] = &red_kit_min_bool},
};

/* One accumulator of any kit, suitably aligned. */
typedef union {
    double d;
    uint64_t u;
} smk_acc1;

/* Marks the reduced dims of xs in red[]; SM_EINVAL for a bad or repeated axis. */
static sm_err red_axes(const sm_shape *xs, const int *axes, int naxes, int *red, char *err,
                       size_t errlen)
{
    char b[128];
    for (int d = 0; d < xs->rank; d++)
        red[d] = naxes < 0;
    for (int i = 0; i < naxes; i++) {
        int ax = smk_axis(axes[i], xs->rank);
        if (ax < 0)
            return sm_fail(err, errlen, SM_EINVAL, "reduction axis %d is out of range for shape %s",
                           axes[i], smk_fmt(xs, b, sizeof b));
        if (red[ax])
            return sm_fail(err, errlen, SM_EINVAL, "reduction axis %d is repeated for shape %s",
                           axes[i], smk_fmt(xs, b, sizeof b));
        red[ax] = 1;
    }
    return SM_OK;
}

sm_err sm_kern_reduce_shape(const sm_shape *xs, const int *axes, int naxes, int keepdims,
                            sm_shape *out, char *err, size_t errlen)
{
    int red[SM_MAX_RANK];
    sm_err e = red_axes(xs, axes, naxes, red, err, errlen);
    if (e)
        return e;
    sm_shape o = {0};
    for (int d = 0; d < xs->rank; d++) {
        if (!red[d])
            o.dims[o.rank++] = xs->dims[d];
        else if (keepdims)
            o.dims[o.rank++] = 1;
    }
    *out = o;
    return SM_OK;
}

/* Fills loop l (one operand) with the given groups plus a trailing unit dim,
 * so a cursor walks every combination of them. */
static void red_loop(smk_loop *l, const int64_t *gd, const int64_t *gs, const int *gk, int from,
                     int to, int kind)
{
    l->nops = 1;
    l->rank = 0;
    for (int g = from; g < to; g++)
        if (gk[g] == kind) {
            l->dims[l->rank] = gd[g];
            l->st[0][l->rank++] = gs[g];
        }
    l->dims[l->rank] = 1;
    l->st[0][l->rank++] = 0;
}

sm_err sm_kern_reduce(sm_kern_reduce_op op, sm_dtype t, const void *x, const sm_shape *xs,
                      const int *axes, int naxes, int keepdims, void *out, char *err, size_t errlen)
{
    if ((unsigned)op >= SM_KERN_REDUCE_COUNT)
        return sm_fail(err, errlen, SM_EINVAL, "unknown reduction %d", (int)op);
    if ((unsigned)t >= SM_DTYPE_COUNT || !red_kits[op][t])
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "%s does not support dtype %s",
                       reduce_names[op], sm_dtype_name(t));
    int red[SM_MAX_RANK];
    sm_err e = red_axes(xs, axes, naxes, red, err, errlen);
    if (e)
        return e;
    const smk_red_kit *kit = red_kits[op][t];
    size_t esz = smk_elem(t);
    int mean = op == SM_KERN_MEAN;
    int64_t count = 1, onum = 1;
    for (int d = 0; d < xs->rank; d++) {
        if (red[d])
            count *= xs->dims[d];
        else
            onum *= xs->dims[d];
    }
    if (onum == 0)
        return SM_OK;
    if (count == 0) { /* empty reduction: the identity (NaN for mean) */
        smk_acc1 acc;
        for (int64_t i = 0; i < onum; i++) {
            kit->init(&acc, 1);
            kit->fin((char *)out + i * (int64_t)esz, &acc, 1, 0.0, mean);
        }
        return SM_OK;
    }
    /* Collapse into alternating groups (kind 1 = reduced). */
    int64_t gd[SM_MAX_RANK], gs[SM_MAX_RANK];
    int gk[SM_MAX_RANK], G = 0;
    for (int d = 0; d < xs->rank; d++) {
        if (xs->dims[d] == 1)
            continue;
        if (G > 0 && gk[G - 1] == red[d]) {
            gd[G - 1] *= xs->dims[d];
        } else {
            gk[G] = red[d];
            gd[G++] = xs->dims[d];
        }
    }
    if (G == 0) {
        gk[0] = 0;
        gd[0] = 1;
        G = 1;
    }
    gs[G - 1] = 1;
    for (int g = G - 2; g >= 0; g--)
        gs[g] = gs[g + 1] * gd[g + 1];

    int64_t L = gd[G - 1];
    smk_loop lk, lr;
    smk_cursor ck, cr;
    const char *xb = x;
    char *ob = out;
    double dcount = (double)count;
    if (gk[G - 1]) { /* last group reduced: one accumulator per output element */
        red_loop(&lk, gd, gs, gk, 0, G, 0);
        red_loop(&lr, gd, gs, gk, 0, G - 1, 1);
        smk_acc1 acc;
        int64_t nk = smk_cursor_init(&lk, &ck);
        for (int64_t o = 0; o < nk; o++) {
            kit->init(&acc, 1);
            int64_t nr = smk_cursor_init(&lr, &cr);
            for (int64_t r = 0; r < nr; r++) {
                kit->row(&acc, xb + (ck.off[0] + cr.off[0]) * (int64_t)esz, L);
                smk_cursor_next(&lr, &cr);
            }
            kit->fin(ob + o * (int64_t)esz, &acc, 1, dcount, mean);
            smk_cursor_next(&lk, &ck);
        }
        return SM_OK;
    }
    /* last group kept: an accumulator row of L */
    void *acc = malloc((size_t)L * kit->asz);
    if (!acc)
        return sm_fail(err, errlen, SM_ENOMEM, "no memory for a reduction row of %lld",
                       (long long)L);
    red_loop(&lk, gd, gs, gk, 0, G - 1, 0);
    red_loop(&lr, gd, gs, gk, 0, G, 1);
    int64_t nk = smk_cursor_init(&lk, &ck);
    for (int64_t o = 0; o < nk; o++) {
        kit->init(acc, L);
        int64_t nr = smk_cursor_init(&lr, &cr);
        for (int64_t r = 0; r < nr; r++) {
            kit->col(acc, xb + (ck.off[0] + cr.off[0]) * (int64_t)esz, L);
            smk_cursor_next(&lr, &cr);
        }
        kit->fin(ob + o * L * (int64_t)esz, acc, L, dcount, mean);
        smk_cursor_next(&lk, &ck);
    }
    free(acc);
    return SM_OK;
}

/* ---- index and running reductions ----------------------------------------------------------- */

/* x seen as [outer, n, inner] around axis (-1: [1, numel, 1]). */
static void split_axis(const sm_shape *xs, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = 1;
    *n = 1;
    *inner = 1;
    for (int d = 0; d < xs->rank; d++) {
        if (axis < 0 || d == axis)
            *n *= xs->dims[d];
        else
            *(d < axis ? outer : inner) *= xs->dims[d];
    }
}

/* One [outer, n, inner] argmax/argmin per dtype: best[] holds the current
 * extreme of each of the inner columns while the rows go by, so x is read
 * once, in order. */
#define SMK_ARG_DEF(name, T, ISNAN)                                                                \
    static void name(const void *x_, int64_t outer, int64_t n, int64_t inner, int is_max,          \
                     int32_t *o, void *best_)                                                      \
    {                                                                                              \
        const T *x = x_;                                                                           \
        T *best = best_;                                                                           \
        for (int64_t a = 0; a < outer; a++) {                                                      \
            const T *xa = x + a * n * inner;                                                       \
            int32_t *oa = o + a * inner;                                                           \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                best[i] = xa[i];                                                                   \
                oa[i] = 0;                                                                         \
            }                                                                                      \
            for (int64_t k = 1; k < n; k++) {                                                      \
                const T *r = xa + k * inner;                                                       \
                for (int64_t i = 0; i < inner; i++) {                                              \
                    T v = r[i], b = best[i];                                                       \
                    if ((is_max ? v > b : v < b) || (ISNAN(v) && !ISNAN(b))) {                     \
                        best[i] = v;                                                               \
                        oa[i] = (int32_t)k;                                                        \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
#define SMK_NOTNUM(v) ((v) != (v))
#define SMK_NEVER(v)  0
SMK_ARG_DEF(arg_f32, float, SMK_NOTNUM)
SMK_ARG_DEF(arg_f64, double, SMK_NOTNUM)
SMK_ARG_DEF(arg_i32, int32_t, SMK_NEVER)
SMK_ARG_DEF(arg_i64, int64_t, SMK_NEVER)
SMK_ARG_DEF(arg_u8, uint8_t, SMK_NEVER)

typedef void (*smk_arg_fn)(const void *x, int64_t outer, int64_t n, int64_t inner, int is_max,
                           int32_t *o, void *best);
static const smk_arg_fn arg_fns[SM_DTYPE_COUNT] = {
    [SM_F32] = arg_f32, [SM_F64] = arg_f64, [SM_I32] = arg_i32,
    [SM_I64] = arg_i64, [SM_U8] = arg_u8,   [SM_BOOL] = arg_u8,
};

sm_err sm_kern_argminmax(int is_max, sm_dtype t, const void *x, const sm_shape *xs, int axis,
                         void *out, char *err, size_t errlen)
{
    const char *name = is_max ? "argmax" : "argmin";
    if ((unsigned)t >= SM_DTYPE_COUNT || !arg_fns[t])
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "%s does not support dtype %s", name,
                       sm_dtype_name(t));
    char b[128];
    if (axis >= xs->rank)
        return sm_fail(err, errlen, SM_EINVAL, "%s: axis %d is out of range for shape %s", name,
                       axis, smk_fmt(xs, b, sizeof b));
    int64_t outer, n, inner;
    split_axis(xs, axis, &outer, &n, &inner);
    if (n == 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s: attempt to get %s of an empty sequence", name,
                       name);
    if (outer == 0 || inner == 0)
        return SM_OK;
    void *best = malloc((size_t)inner * smk_elem(t));
    if (!best)
        return sm_fail(err, errlen, SM_ENOMEM, "no memory for a %s row of %lld", name,
                       (long long)inner);
    arg_fns[t](x, outer, n, inner, is_max, out, best);
    free(best);
    return SM_OK;
}

/* One [outer, n, inner] running reduction per (op, dtype): row k of the
 * output combines row k - 1 of the output with row k of x. */
#define SMK_CUM_DEF(name, T, A, COMB)                                                              \
    static void name(const void *x_, void *o_, int64_t outer, int64_t n, int64_t inner)            \
    {                                                                                              \
        const T *x = x_;                                                                           \
        T *o = o_;                                                                                 \
        for (int64_t a = 0; a < outer; a++) {                                                      \
            const T *xa = x + a * n * inner;                                                       \
            T *oa = o + a * n * inner;                                                             \
            memcpy(oa, xa, (size_t)inner * sizeof(T));                                             \
            for (int64_t k = 1; k < n; k++)                                                        \
                for (int64_t i = 0; i < inner; i++) {                                              \
                    A p = (A)oa[(k - 1) * inner + i], v = (A)xa[k * inner + i];                    \
                    oa[k * inner + i] = (T)COMB(p, v);                                             \
                }                                                                                  \
        }                                                                                          \
    }
SMK_CUM_DEF(cum_sum_f32, float, float, SMK_ADD)
SMK_CUM_DEF(cum_sum_f64, double, double, SMK_ADD)
SMK_CUM_DEF(cum_sum_i32, int32_t, uint32_t, SMK_ADD)
SMK_CUM_DEF(cum_sum_i64, int64_t, uint64_t, SMK_ADD)
SMK_CUM_DEF(cum_sum_u8, uint8_t, uint8_t, SMK_ADD)
SMK_CUM_DEF(cum_prod_f32, float, float, SMK_MUL)
SMK_CUM_DEF(cum_prod_f64, double, double, SMK_MUL)
SMK_CUM_DEF(cum_prod_i32, int32_t, uint32_t, SMK_MUL)
SMK_CUM_DEF(cum_prod_i64, int64_t, uint64_t, SMK_MUL)
SMK_CUM_DEF(cum_prod_u8, uint8_t, uint8_t, SMK_MUL)
SMK_CUM_DEF(cum_max_f32, float, float, SMK_FMAX)
SMK_CUM_DEF(cum_max_f64, double, double, SMK_FMAX)
SMK_CUM_DEF(cum_max_i32, int32_t, int32_t, SMK_IMAX)
SMK_CUM_DEF(cum_max_i64, int64_t, int64_t, SMK_IMAX)
SMK_CUM_DEF(cum_max_u8, uint8_t, uint8_t, SMK_IMAX)
SMK_CUM_DEF(cum_min_f32, float, float, SMK_FMIN)
SMK_CUM_DEF(cum_min_f64, double, double, SMK_FMIN)
SMK_CUM_DEF(cum_min_i32, int32_t, int32_t, SMK_IMIN)
SMK_CUM_DEF(cum_min_i64, int64_t, int64_t, SMK_IMIN)
SMK_CUM_DEF(cum_min_u8, uint8_t, uint8_t, SMK_IMIN)

typedef void (*smk_cum_fn)(const void *x, void *o, int64_t outer, int64_t n, int64_t inner);
#define SMK_CUM_ROW(op)                                                                            \
    {                                                                                              \
        [SM_F32] = cum_##op##_f32, [SM_F64] = cum_##op##_f64, [SM_I32] = cum_##op##_i32,           \
        [SM_I64] = cum_##op##_i64, [SM_U8] = cum_##op##_u8                                         \
    }
static const smk_cum_fn cum_fns[SM_KERN_REDUCE_COUNT][SM_DTYPE_COUNT] = {
    [SM_KERN_SUM] = SMK_CUM_ROW(sum),
    [SM_KERN_PROD] = SMK_CUM_ROW(prod),
    [SM_KERN_MAX] = {[SM_F32] = cum_max_f32,
                     [SM_F64] = cum_max_f64,
                     [SM_I32] = cum_max_i32,
                     [SM_I64] = cum_max_i64,
                     [SM_U8] = cum_max_u8,
                     [SM_BOOL] = cum_max_u8},
    [SM_KERN_MIN] = {[SM_F32] = cum_min_f32,
                     [SM_F64] = cum_min_f64,
                     [SM_I32] = cum_min_i32,
                     [SM_I64] = cum_min_i64,
                     [SM_U8] = cum_min_u8,
                     [SM_BOOL] = cum_min_u8},
};

sm_err sm_kern_cumulative(sm_kern_reduce_op op, sm_dtype t, const void *x, const sm_shape *xs,
                          int axis, void *out, char *err, size_t errlen)
{
    if ((unsigned)op >= SM_KERN_REDUCE_COUNT || (unsigned)t >= SM_DTYPE_COUNT || !cum_fns[op][t])
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "cumulative %s does not support dtype %s",
                       sm_kern_reduce_name(op), sm_dtype_name(t));
    char b[128];
    if (axis >= xs->rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "cumulative %s: axis %d is out of range for shape %s",
                       sm_kern_reduce_name(op), axis, smk_fmt(xs, b, sizeof b));
    int64_t outer, n, inner;
    split_axis(xs, axis, &outer, &n, &inner);
    if (outer && n && inner)
        cum_fns[op][t](x, out, outer, n, inner);
    return SM_OK;
}

/* ---- sorting -------------------------------------------------------------------------------- */

typedef struct {
    const void *row; /* one row's elements, contiguous */
    sm_dtype t;
} smk_sort_ctx;

/* Ascending, NaN last, ties by position (a stable order from qsort_r). */
#define SMK_SORT_CMP(T, ISNAN)                                                                     \
    {                                                                                              \
        T x = ((const T *)c->row)[i], y = ((const T *)c->row)[j];                                  \
        int nx = ISNAN(x), ny = ISNAN(y);                                                          \
        if (nx != ny)                                                                              \
            return nx - ny;                                                                        \
        if (!nx && x != y)                                                                         \
            return x < y ? -1 : 1;                                                                 \
        break;                                                                                     \
    }

static int sort_cmp(const void *a, const void *b, void *ctx)
{
    const smk_sort_ctx *c = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    switch (c->t) {
    case SM_F32:
        SMK_SORT_CMP(float, SMK_NOTNUM)
    case SM_F64:
        SMK_SORT_CMP(double, SMK_NOTNUM)
    case SM_I32:
        SMK_SORT_CMP(int32_t, SMK_NEVER)
    case SM_I64:
        SMK_SORT_CMP(int64_t, SMK_NEVER)
    default:
        SMK_SORT_CMP(uint8_t, SMK_NEVER)
    }
    return i < j ? -1 : i > j;
}

sm_err sm_kern_sort(sm_dtype t, const void *x, const sm_shape *xs, int axis, void *out,
                    int32_t *idx, char *err, size_t errlen)
{
    if ((unsigned)t >= SM_DTYPE_COUNT || !arg_fns[t])
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "sort does not support dtype %s",
                       sm_dtype_name(t));
    char b[128];
    if (axis < 0 || axis >= xs->rank)
        return sm_fail(err, errlen, SM_EINVAL, "sort: axis %d is out of range for shape %s", axis,
                       smk_fmt(xs, b, sizeof b));
    int64_t outer, n, inner;
    split_axis(xs, axis, &outer, &n, &inner);
    if (n > INT32_MAX)
        return sm_fail(err, errlen, SM_EINVAL, "sort: %lld elements along the axis, at most %d",
                       (long long)n, INT32_MAX);
    if (!outer || !n || !inner)
        return SM_OK;
    size_t e = smk_elem(t);
    char *row = malloc((size_t)n * e);
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    if (!row || !perm) {
        free(row);
        free(perm);
        return sm_fail(err, errlen, SM_ENOMEM, "no memory to sort rows of %lld", (long long)n);
    }
    smk_sort_ctx c = {row, t};
    for (int64_t a = 0; a < outer; a++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = a * n * inner + i; /* element k of this row: base + k * inner */
            for (int64_t k = 0; k < n; k++) {
                memcpy(row + (size_t)k * e, (const char *)x + (size_t)(base + k * inner) * e, e);
                perm[k] = (int32_t)k;
            }
            qsort_r(perm, (size_t)n, sizeof *perm, sort_cmp, &c);
            for (int64_t k = 0; k < n; k++) {
                if (out)
                    memcpy((char *)out + (size_t)(base + k * inner) * e, row + (size_t)perm[k] * e,
                           e);
                if (idx)
                    idx[base + k * inner] = perm[k];
            }
        }
    free(row);
    free(perm);
    return SM_OK;
}

/* ---- collective helpers --------------------------------------------------------------------- */

/* Two typed loops per (dtype, op), restrict parameters: accumulate
 * (d op= s) and combine (d = a op b, one pass instead of a copy and an
 * accumulate). */
#define SMK_ACC_DEF(name, T, A, COMB)                                                              \
    static inline void name##_r(T *restrict d, const T *restrict s, int64_t n)                     \
    {                                                                                              \
        SMK_FOR(i, n, {                                                                            \
            A a = (A)d[i], v = (A)s[i];                                                            \
            d[i] = (T)COMB(a, v);                                                                  \
        });                                                                                        \
    }                                                                                              \
    static void name(void *d, const void *s, int64_t n)                                            \
    {                                                                                              \
        name##_r(d, s, n);                                                                         \
    }                                                                                              \
    static inline void name##_cr(T *restrict d, const T *restrict x, const T *restrict y,          \
                                 int64_t n)                                                        \
    {                                                                                              \
        SMK_FOR(i, n, {                                                                            \
            A a = (A)x[i], v = (A)y[i];                                                            \
            d[i] = (T)COMB(a, v);                                                                  \
        });                                                                                        \
    }                                                                                              \
    static void name##_c(void *d, const void *x, const void *y, int64_t n)                         \
    {                                                                                              \
        name##_cr(d, x, y, n);                                                                     \
    }
SMK_ACC_DEF(acc_sum_f32, float, float, SMK_ADD)
SMK_ACC_DEF(acc_sum_f64, double, double, SMK_ADD)
SMK_ACC_DEF(acc_sum_i32, int32_t, uint32_t, SMK_ADD)
SMK_ACC_DEF(acc_sum_i64, int64_t, uint64_t, SMK_ADD)
SMK_ACC_DEF(acc_sum_u8, uint8_t, uint8_t, SMK_ADD)
SMK_ACC_DEF(acc_max_f32, float, float, SMK_FMAX)
SMK_ACC_DEF(acc_max_f64, double, double, SMK_FMAX)
SMK_ACC_DEF(acc_max_i32, int32_t, int32_t, SMK_IMAX)
SMK_ACC_DEF(acc_max_i64, int64_t, int64_t, SMK_IMAX)
SMK_ACC_DEF(acc_max_u8, uint8_t, uint8_t, SMK_IMAX)
SMK_ACC_DEF(acc_min_f32, float, float, SMK_FMIN)
SMK_ACC_DEF(acc_min_f64, double, double, SMK_FMIN)
SMK_ACC_DEF(acc_min_i32, int32_t, int32_t, SMK_IMIN)
SMK_ACC_DEF(acc_min_i64, int64_t, int64_t, SMK_IMIN)
SMK_ACC_DEF(acc_min_u8, uint8_t, uint8_t, SMK_IMIN)

typedef struct {
    void (*acc)(void *d, const void *s, int64_t n);
    void (*comb)(void *d, const void *x, const void *y, int64_t n);
} smk_acc_kit;
#define SMK_ACC_KIT(f) ((smk_acc_kit){f, f##_c})

/* Bool max/min are u8 max/min, and so is bool sum: or (jnp's + of bools,
 * XLA's add of predicates; a psum_scatter of bools). */
static smk_acc_kit acc_kit(sm_kern_reduce_op op, sm_dtype t)
{
#define SMK_ACC_ROW(OP)                                                                            \
    switch (t) {                                                                                   \
    case SM_F32:                                                                                   \
        return SMK_ACC_KIT(acc_##OP##_f32);                                                        \
    case SM_F64:                                                                                   \
        return SMK_ACC_KIT(acc_##OP##_f64);                                                        \
    case SM_I32:                                                                                   \
        return SMK_ACC_KIT(acc_##OP##_i32);                                                        \
    case SM_I64:                                                                                   \
        return SMK_ACC_KIT(acc_##OP##_i64);                                                        \
    case SM_U8:                                                                                    \
        return SMK_ACC_KIT(acc_##OP##_u8);                                                         \
    case SM_BOOL:                                                                                  \
        return op == SM_KERN_SUM ? SMK_ACC_KIT(acc_max_u8) : SMK_ACC_KIT(acc_##OP##_u8);           \
    default:                                                                                       \
        return (smk_acc_kit){0};                                                                   \
    }
    switch (op) {
    case SM_KERN_SUM:
        SMK_ACC_ROW(sum)
    case SM_KERN_MAX:
        SMK_ACC_ROW(max)
    case SM_KERN_MIN:
        SMK_ACC_ROW(min)
    default:
        return (smk_acc_kit){0};
    }
#undef SMK_ACC_ROW
}

static sm_err acc_unsupported(sm_kern_reduce_op op, sm_dtype t, char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_EUNSUPPORTED, "accumulate %s does not support dtype %s",
                   sm_kern_reduce_name(op), sm_dtype_name(t));
}

/* accumulate (b NULL: dst op= a) or combine (dst = a op b) of half
 * floats: a block at a time in float32, each result rounded once. */
static sm_err acc_half(sm_dtype t, void *dst, const void *a, const void *b, int64_t n,
                       sm_kern_reduce_op op, char *err, size_t errlen)
{
    smk_acc_kit kit = acc_kit(op, SM_F32);
    if (!kit.acc)
        return acc_unsupported(op, t, err, errlen);
    float x[512], y[512];
    sm_err e = SM_OK;
    for (int64_t at = 0; at < n && !e; at += 512) {
        int64_t m = n - at < 512 ? n - at : 512;
        const uint16_t *pa = (const uint16_t *)a + at, *pb = b ? (const uint16_t *)b + at : NULL;
        uint16_t *pd = (uint16_t *)dst + at;
        e = sm_kern_astype(t, pb ? pa : pd, SM_F32, x, m, err, errlen);
        if (!e)
            e = sm_kern_astype(t, pb ? pb : pa, SM_F32, y, m, err, errlen);
        if (!e) {
            kit.acc(x, y, m);
            e = sm_kern_astype(SM_F32, x, t, pd, m, err, errlen);
        }
    }
    return e;
}

sm_err sm_kern_accumulate(sm_dtype t, void *dst, const void *src, int64_t n, sm_kern_reduce_op op,
                          char *err, size_t errlen)
{
    if (t == SM_F16 || t == SM_BF16)
        return acc_half(t, dst, src, NULL, n, op, err, errlen);
    smk_acc_kit kit = acc_kit(op, t);
    if (!kit.acc)
        return acc_unsupported(op, t, err, errlen);
    kit.acc(dst, src, n);
    return SM_OK;
}

sm_err sm_kern_combine(sm_dtype t, void *dst, const void *a, const void *b, int64_t n,
                       sm_kern_reduce_op op, char *err, size_t errlen)
{
    if (t == SM_F16 || t == SM_BF16)
        return acc_half(t, dst, a, b, n, op, err, errlen);
    smk_acc_kit kit = acc_kit(op, t);
    if (!kit.comb)
        return acc_unsupported(op, t, err, errlen);
    kit.comb(dst, a, b, n);
    return SM_OK;
}

/* x[i] *= factor, or x[i] /= factor (divide), for i < n in place: float32
 * and float64, the half floats in float32, each result rounded once. */
static sm_err smk_scale(sm_dtype t, void *x, int64_t n, double factor, int divide, char *err,
                        size_t errlen)
{
    if (t == SM_F32) {
        float *p = x;
        float f = (float)factor;
        if (divide)
            SMK_FOR(i, n, { p[i] = p[i] / f; });
        else
            SMK_FOR(i, n, { p[i] *= f; });
    } else if (t == SM_F64) {
        double *p = x;
        if (divide)
            SMK_FOR(i, n, { p[i] = p[i] / factor; });
        else
            SMK_FOR(i, n, { p[i] *= factor; });
    } else if (t == SM_F16 || t == SM_BF16) {
        float buf[512];
        sm_err e = SM_OK;
        for (int64_t at = 0; at < n && !e; at += 512) {
            int64_t m = n - at < 512 ? n - at : 512;
            uint16_t *p = (uint16_t *)x + at;
            if (!(e = sm_kern_astype(t, p, SM_F32, buf, m, err, errlen)) &&
                !(e = smk_scale(SM_F32, buf, m, factor, divide, err, errlen)))
                e = sm_kern_astype(SM_F32, buf, t, p, m, err, errlen);
        }
        return e;
    } else {
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "%s does not support dtype %s",
                       divide ? "division by a scalar" : "scale", sm_dtype_name(t));
    }
    return SM_OK;
}

sm_err sm_kern_scale(sm_dtype t, void *x, int64_t n, double factor, char *err, size_t errlen)
{
    return smk_scale(t, x, n, factor, 0, err, errlen);
}

sm_err sm_kern_divide_by(sm_dtype t, void *x, int64_t n, double d, char *err, size_t errlen)
{
    return smk_scale(t, x, n, d, 1, err, errlen);
}

#define SMK_SEGSUM(T, U, ADD)                                                                      \
    do {                                                                                           \
        const T *xs = x;                                                                           \
        T *o = out;                                                                                \
        memset(o, 0, (size_t)(nseg * inner) * sizeof(T));                                          \
        for (int64_t i = 0; i < nlead; i++) {                                                      \
            if (ids[i] < 0 || ids[i] >= nseg)                                                      \
                continue;                                                                          \
            T *dst = o + ids[i] * inner;                                                           \
            const T *src = xs + i * inner;                                                         \
            for (int64_t q = 0; q < inner; q++)                                                    \
                dst[q] = ADD(dst[q], src[q], U);                                                   \
        }                                                                                          \
    } while (0)
#define SMK_ADD_F(a, b, U) ((a) + (b))
#define SMK_ADD_I(a, b, U) ((__typeof__(a))((U)(a) + (U)(b)))

sm_err sm_kern_segment_sum(sm_dtype t, const void *x, int64_t nlead, int64_t inner,
                           const int64_t *ids, int64_t nseg, void *out, char *err, size_t errlen)
{
    if (nlead < 0 || inner < 0 || nseg < 0)
        return sm_fail(err, errlen, SM_EINVAL, "segment_sum: negative sizes");
    switch (t) {
    case SM_F32:
        SMK_SEGSUM(float, float, SMK_ADD_F);
        break;
    case SM_F64:
        SMK_SEGSUM(double, double, SMK_ADD_F);
        break;
    case SM_I32:
        SMK_SEGSUM(int32_t, uint32_t, SMK_ADD_I);
        break;
    case SM_I64:
        SMK_SEGSUM(int64_t, uint64_t, SMK_ADD_I);
        break;
    default:
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "segment_sum does not support dtype %s",
                       sm_dtype_name(t));
    }
    return SM_OK;
}
