/* Check suite for common/kern, part 2: reductions (sum mean max min prod
 * any all over axis sets, keepdims, empty and rank-0 cases), argmax/argmin
 * and the running reductions (cumsum ...) against a naive reference on
 * random data for every dtype, bitwise determinism, exact identities and
 * error paths; and the collective helpers accumulate, combine and scale. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_testutil.h"
#include "sm_kern.h"
#include "suite_main.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* dst op src for one element, the accumulate reference. */
static val ref_combine(sm_kern_reduce_op op, sm_dtype t, val a, val b)
{
    val r = a;
    if (op == SM_KERN_SUM && t == SM_BOOL) { /* or, as jnp's + of bools */
        r.i = a.i || b.i;
    } else if (op == SM_KERN_SUM) {
        r.f = a.f + b.f;
        r.i = wrap(t, (uint64_t)a.i + (uint64_t)b.i);
    } else if (is_float(t)) {
        int take_a = op == SM_KERN_MAX ? (a.f >= b.f || isnan(a.f)) : (a.f <= b.f || isnan(a.f));
        r.f = take_a ? a.f : b.f;
    } else {
        r.i = op == SM_KERN_MAX ? (a.i > b.i ? a.i : b.i) : (a.i < b.i ? a.i : b.i);
    }
    return r;
}

/* ---- reductions ----------------------------------------------------------------------------- */

typedef struct {
    sm_shape s;
    int naxes;
    int axes[4];
} red_case;

static red_case red_cases(int k)
{
    red_case c[] = {
        {shp(3, 2, 3, 4), 0, {0}},       {shp(3, 2, 3, 4), 1, {0}},
        {shp(3, 2, 3, 4), 1, {1}},       {shp(3, 2, 3, 4), 1, {-1}},
        {shp(3, 2, 3, 4), 2, {0, 2}},    {shp(3, 2, 3, 4), -1, {0}},
        {shp(3, 5, 0, 3), 1, {1}},       {shp(3, 5, 0, 3), 1, {2}},
        {shp(2, 0, 4), 1, {1}},          {shp(0), -1, {0}},
        {shp(2, 3, 40), 1, {1}},         {shp(2, 40, 3), 1, {0}},
        {shp(4, 2, 3, 4, 5), 2, {1, 3}}, {shp(4, 2, 3, 4, 5), 2, {0, 2}},
        {shp(3, 1, 37, 1), 1, {1}},      {shp(1, 100), 1, {0}},
        {shp(3, 3, 1, 17), 2, {2, 1}},
    };
    return c[k];
}
#define NRED 17

static val ref_reduce(sm_kern_reduce_op op, sm_dtype t, const void *x, const sm_shape *xs,
                      const int *red, const int64_t *oidx, int keepdims, int64_t *count)
{
    /* walk every input index, keep those matching oidx on kept dims */
    int64_t n = numel(xs), idx[SM_MAX_RANK];
    double fs = 0, fp = 1;
    uint64_t is = 0, ip = 1;
    int any = 0, all = 1;
    val best = {op == SM_KERN_MAX ? -INFINITY : INFINITY, 0};
    int first = 1;
    *count = 0;
    for (int64_t k = 0; k < n; k++) {
        unravel(k, xs, idx);
        int match = 1, o = 0;
        for (int d = 0; d < xs->rank; d++) {
            if (!red[d]) {
                if (idx[d] != oidx[o])
                    match = 0;
                o++;
            } else if (keepdims) {
                o++;
            }
        }
        if (!match)
            continue;
        val v = get(t, x, k);
        (*count)++;
        fs += v.f;
        is += (uint64_t)v.i;
        fp *= v.f;
        ip *= (uint64_t)v.i;
        any |= v.i != 0;
        all &= v.i != 0;
        if (is_float(t)) {
            if (isnan(v.f) || isnan(best.f))
                best.f = NAN;
            else if (op == SM_KERN_MAX ? v.f > best.f : v.f < best.f)
                best.f = v.f;
        } else if (first || (op == SM_KERN_MAX ? v.i > best.i : v.i < best.i)) {
            best.i = v.i;
        }
        first = 0;
    }
    val r = {0, 0};
    if (op == SM_KERN_SUM) {
        r.f = fs;
        r.i = wrap(t, is);
    } else if (op == SM_KERN_MEAN) {
        r.f = fs / (double)*count;
    } else if (op == SM_KERN_PROD) {
        r.f = fp;
        r.i = wrap(t, ip);
    } else if (op == SM_KERN_ANY || op == SM_KERN_ALL) {
        r.i = op == SM_KERN_ANY ? any : all;
    } else if (first && !is_float(t)) { /* empty: the identity */
        int mx = op == SM_KERN_MAX;
        r.i = t == SM_I32   ? (mx ? INT32_MIN : INT32_MAX)
              : t == SM_I64 ? (mx ? INT64_MIN : INT64_MAX)
              : t == SM_U8  ? (mx ? 0 : 255)
                            : (mx ? 0 : 1);
    } else {
        r = best;
    }
    return r;
}

static int reduce_ok(sm_kern_reduce_op op, sm_dtype t)
{
    if (op == SM_KERN_MEAN)
        return is_float(t);
    if (op == SM_KERN_SUM || op == SM_KERN_PROD)
        return t != SM_BOOL;
    if (op == SM_KERN_ANY || op == SM_KERN_ALL)
        return t == SM_BOOL;
    return 1;
}

START_TEST(test_reduce_all)
{
    for (int op = 0; op < SM_KERN_REDUCE_COUNT; op++)
        for (int ti = 0; ti < NTYPES; ti++)
            for (int ci = 0; ci < NRED; ci++)
                for (int keep = 0; keep < 2; keep++) {
                    sm_dtype t = all_types[ti];
                    red_case rc = red_cases(ci);
                    sm_shape os;
                    char err[256] = "";
                    ck_assert_int_eq(sm_kern_reduce_shape(&rc.s, rc.naxes < 0 ? NULL : rc.axes,
                                                          rc.naxes, keep, &os, err, sizeof err),
                                     SM_OK);
                    int64_t n = numel(&rc.s), no = numel(&os);
                    int lim = op == SM_KERN_PROD && is_float(t) ? 2 : 50;
                    void *x = rand_buf(t, n, -lim, lim);
                    void *o = malloc(no ? (size_t)no * esize(t) : 1);
                    sm_err e = sm_kern_reduce(op, t, x, &rc.s, rc.naxes < 0 ? NULL : rc.axes,
                                              rc.naxes, keep, o, err, sizeof err);
                    if (!reduce_ok(op, t)) {
                        ck_assert_int_eq(e, SM_EUNSUPPORTED);
                        free(x);
                        free(o);
                        continue;
                    }
                    ck_assert_msg(e == SM_OK, "%s", err);
                    int red[SM_MAX_RANK];
                    for (int d = 0; d < rc.s.rank; d++)
                        red[d] = rc.naxes < 0;
                    for (int i = 0; i < rc.naxes; i++)
                        red[rc.axes[i] < 0 ? rc.axes[i] + rc.s.rank : rc.axes[i]] = 1;
                    int64_t oidx[SM_MAX_RANK], cnt;
                    for (int64_t k = 0; k < no; k++) {
                        unravel(k, &os, oidx);
                        val want = rt(t, ref_reduce(op, t, x, &rc.s, red, oidx, keep, &cnt));
                        double rel = t == SM_F32 ? 1e-6 : 1e-12;
                        ck_assert_msg(same(t, get(t, o, k), want, rel),
                                      "%s %s case %d keep %d [%lld]: %g vs %g",
                                      sm_kern_reduce_name(op), sm_dtype_name(t), ci, keep,
                                      (long long)k, get(t, o, k).f, want.f);
                    }
                    free(x);
                    free(o);
                }
}
END_TEST

START_TEST(test_reduce_exact_and_errors)
{
    /* empty reductions give the identity; mean of nothing is NaN */
    sm_shape s = shp(2, 3, 0);
    int ax = 1;
    float o[3];
    int32_t oi[3];
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_MAX, SM_F32, NULL, &s, &ax, 1, 0, o, NULL, 0), SM_OK);
    ck_assert(isinf(o[0]) && o[0] < 0);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_MIN, SM_I32, NULL, &s, &ax, 1, 0, oi, NULL, 0), SM_OK);
    ck_assert_int_eq(oi[2], INT32_MAX);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_MEAN, SM_F32, NULL, &s, &ax, 1, 0, o, NULL, 0), SM_OK);
    ck_assert(isnan(o[1]));
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_SUM, SM_F32, NULL, &s, &ax, 1, 0, o, NULL, 0), SM_OK);
    ck_assert(o[0] == 0.0f);
    /* NaN propagates through max */
    float v[] = {1.0f, NAN, 3.0f, 2.0f};
    sm_shape s4 = shp(1, 4);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_MAX, SM_F32, v, &s4, NULL, -1, 0, o, NULL, 0), SM_OK);
    ck_assert(isnan(o[0]));
    /* integer sums wrap */
    int32_t big[] = {INT32_MAX, 1};
    sm_shape s2 = shp(1, 2);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_SUM, SM_I32, big, &s2, NULL, -1, 0, oi, NULL, 0),
                     SM_OK);
    ck_assert_int_eq(oi[0], INT32_MIN);
    /* shapes */
    sm_shape x = shp(3, 2, 3, 4), os;
    int axes[] = {0, -1};
    ck_assert_int_eq(sm_kern_reduce_shape(&x, axes, 2, 1, &os, NULL, 0), SM_OK);
    ck_assert(os.rank == 3 && os.dims[0] == 1 && os.dims[1] == 3 && os.dims[2] == 1);
    ck_assert_int_eq(sm_kern_reduce_shape(&x, axes, 2, 0, &os, NULL, 0), SM_OK);
    ck_assert(os.rank == 1 && os.dims[0] == 3);
    char err[256];
    int bad[] = {1, -2};
    ck_assert_int_eq(sm_kern_reduce_shape(&x, bad, 2, 0, &os, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "repeated"));
    int oob = 3;
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_SUM, SM_F32, v, &x, &oob, 1, 0, o, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,3,4]"));
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_MEAN, SM_I32, v, &x, NULL, -1, 0, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_SUM, SM_BF16, v, &x, NULL, -1, 0, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "bf16"));
}
END_TEST

START_TEST(test_reduce_deterministic)
{
    sm_shape s = shp(2, 257, 1031);
    int64_t n = numel(&s);
    float *x = rand_buf(SM_F32, n, -1000, 1000);
    int cases[][2] = {{0, 1}, {1, 1}, {1, 0}, {0, -1}};
    for (int c = 0; c < 4; c++) {
        int ax = cases[c][0], na = cases[c][1];
        sm_shape os;
        ck_assert_int_eq(sm_kern_reduce_shape(&s, na < 0 ? NULL : &ax, na, 0, &os, NULL, 0), SM_OK);
        int64_t no = numel(&os);
        float *o1 = malloc((size_t)no * 4), *o2 = malloc((size_t)no * 4);
        ck_assert_int_eq(
            sm_kern_reduce(SM_KERN_SUM, SM_F32, x, &s, na < 0 ? NULL : &ax, na, 0, o1, NULL, 0),
            SM_OK);
        ck_assert_int_eq(
            sm_kern_reduce(SM_KERN_SUM, SM_F32, x, &s, na < 0 ? NULL : &ax, na, 0, o2, NULL, 0),
            SM_OK);
        ck_assert_int_eq(memcmp(o1, o2, (size_t)no * 4), 0);
        free(o1);
        free(o2);
    }
    free(x);
}
END_TEST

/* ---- argmax, argmin, running reductions ----------------------------------------------------- */

typedef struct {
    sm_shape s;
    int axis; /* -1: flattened */
} axis_case;

static axis_case axis_cases(int k)
{
    axis_case c[] = {
        {shp(1, 7), 0},       {shp(1, 7), -1},      {shp(2, 5, 9), 0},    {shp(2, 5, 9), 1},
        {shp(2, 5, 9), -1},   {shp(3, 3, 4, 5), 1}, {shp(3, 3, 4, 5), 2}, {shp(3, 1, 40, 3), 1},
        {shp(3, 2, 0, 3), 0}, {shp(0), -1},         {shp(2, 1, 1), 1},
    };
    return c[k];
}
#define NAXC 11

/* x's element at output index oidx (the axis left out) and position k
 * along the axis. */
static int64_t axis_flat(const sm_shape *xs, int axis, const int64_t *oidx, int64_t k)
{
    if (axis < 0)
        return k;
    int64_t idx[SM_MAX_RANK];
    for (int d = 0, o = 0; d < xs->rank; d++)
        idx[d] = d == axis ? k : oidx[o++];
    int64_t f = 0;
    for (int d = 0; d < xs->rank; d++)
        f = f * xs->dims[d] + idx[d];
    return f;
}

/* xs less its dimension axis (axis -1: no dimension left). */
static sm_shape without_axis(const sm_shape *xs, int axis)
{
    sm_shape os = {0};
    for (int d = 0; axis >= 0 && d < xs->rank; d++)
        if (d != axis)
            os.dims[os.rank++] = xs->dims[d];
    return os;
}

START_TEST(test_argminmax_all)
{
    for (int mx = 0; mx < 2; mx++)
        for (int ti = 0; ti < NTYPES; ti++)
            for (int ci = 0; ci < NAXC; ci++) {
                sm_dtype t = all_types[ti];
                axis_case c = axis_cases(ci);
                int64_t n = numel(&c.s), len = c.axis < 0 ? n : c.s.dims[c.axis];
                int64_t no = len ? n / len : 0;
                if (c.axis < 0)
                    no = 1;
                /* few distinct values, so that ties are common; some NaNs */
                void *x = rand_buf(t, n, -3, 3);
                if (is_float(t))
                    for (int64_t k = 0; k < n; k++)
                        if (rnd() % 23 == 0)
                            put(t, x, k, (val){NAN, 0});
                int32_t *o = malloc((size_t)(no ? no : 1) * 4);
                char err[256] = "";
                sm_err e = sm_kern_argminmax(mx, t, x, &c.s, c.axis, o, err, sizeof err);
                if (len == 0) {
                    ck_assert_int_eq(e, SM_EINVAL);
                    ck_assert_ptr_nonnull(strstr(err, "empty sequence"));
                    free(x);
                    free(o);
                    continue;
                }
                ck_assert_msg(e == SM_OK, "%s", err);
                sm_shape os = without_axis(&c.s, c.axis);
                int64_t oidx[SM_MAX_RANK];
                for (int64_t q = 0; q < no; q++) {
                    unravel(q, &os, oidx);
                    int64_t best = 0;
                    for (int64_t k = 1; k < len; k++) { /* the first extreme, NaN first */
                        val v = get(t, x, axis_flat(&c.s, c.axis, oidx, k));
                        val b = get(t, x, axis_flat(&c.s, c.axis, oidx, best));
                        int better = is_float(t) ? (isnan(v.f) && !isnan(b.f)) ||
                                                       (!isnan(b.f) && (mx ? v.f > b.f : v.f < b.f))
                                                 : (mx ? v.i > b.i : v.i < b.i);
                        if (better)
                            best = k;
                    }
                    ck_assert_msg(o[q] == best, "arg%s %s case %d [%lld]: %d, want %lld",
                                  mx ? "max" : "min", sm_dtype_name(t), ci, (long long)q, o[q],
                                  (long long)best);
                }
                free(x);
                free(o);
            }
    char err[256];
    sm_shape s = shp(2, 2, 3);
    float v[6] = {0};
    int32_t o[3];
    ck_assert_int_eq(sm_kern_argminmax(1, SM_F32, v, &s, 2, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_int_eq(sm_kern_argminmax(1, SM_BF16, v, &s, 0, o, err, sizeof err), SM_EUNSUPPORTED);
}
END_TEST

START_TEST(test_cumulative_all)
{
    sm_kern_reduce_op ops[] = {SM_KERN_SUM, SM_KERN_PROD, SM_KERN_MAX, SM_KERN_MIN};
    for (int oi = 0; oi < 4; oi++)
        for (int ti = 0; ti < NTYPES; ti++)
            for (int ci = 0; ci < NAXC; ci++) {
                sm_kern_reduce_op op = ops[oi];
                sm_dtype t = all_types[ti];
                axis_case c = axis_cases(ci);
                int64_t n = numel(&c.s), len = c.axis < 0 ? n : c.s.dims[c.axis];
                int64_t no = len ? n / len : 0;
                void *x =
                    rand_buf(t, n, op == SM_KERN_PROD ? -2 : -50, op == SM_KERN_PROD ? 2 : 50);
                if (is_float(t) && op != SM_KERN_PROD)
                    for (int64_t k = 0; k < n; k++)
                        if (rnd() % 29 == 0)
                            put(t, x, k, (val){NAN, 0});
                void *o = malloc(n ? (size_t)n * esize(t) : 1);
                char err[256] = "";
                sm_err e = sm_kern_cumulative(op, t, x, &c.s, c.axis, o, err, sizeof err);
                if (t == SM_BOOL && (op == SM_KERN_SUM || op == SM_KERN_PROD)) {
                    ck_assert_int_eq(e, SM_EUNSUPPORTED);
                    free(x);
                    free(o);
                    continue;
                }
                ck_assert_msg(e == SM_OK, "%s", err);
                sm_shape os = without_axis(&c.s, c.axis);
                int64_t oidx[SM_MAX_RANK];
                for (int64_t q = 0; q < no; q++) {
                    unravel(q, &os, oidx);
                    val acc = {0, 0};
                    for (int64_t k = 0; k < len; k++) { /* in order, in the dtype */
                        int64_t f = axis_flat(&c.s, c.axis, oidx, k);
                        val v = get(t, x, f);
                        if (k == 0) {
                            acc = v;
                        } else if (op == SM_KERN_SUM) {
                            acc.f += v.f;
                            acc.i = wrap(t, (uint64_t)acc.i + (uint64_t)v.i);
                        } else if (op == SM_KERN_PROD) {
                            acc.f *= v.f;
                            acc.i = wrap(t, (uint64_t)acc.i * (uint64_t)v.i);
                        } else {
                            acc = ref_combine(op, t, acc, v);
                        }
                        acc = rt(t, acc);
                        ck_assert_msg(same(t, get(t, o, f), acc, 0),
                                      "cum%s %s case %d [%lld, %lld]: %g/%lld vs %g/%lld",
                                      sm_kern_reduce_name(op), sm_dtype_name(t), ci, (long long)q,
                                      (long long)k, get(t, o, f).f, (long long)get(t, o, f).i,
                                      acc.f, (long long)acc.i);
                    }
                }
                free(x);
                free(o);
            }
}
END_TEST

/* sort and argsort against a stable insertion sort (NaN last) of each
 * row, on data with many ties and some NaNs. */
START_TEST(test_sort_all)
{
    for (int ti = 0; ti < NTYPES; ti++)
        for (int ci = 0; ci < NAXC; ci++) {
            sm_dtype t = all_types[ti];
            axis_case c = axis_cases(ci);
            if (c.axis < 0)
                continue;
            int64_t n = numel(&c.s), len = c.s.dims[c.axis];
            void *x = rand_buf(t, n, -3, 3);
            if (is_float(t))
                for (int64_t k = 0; k < n; k++)
                    if (rnd() % 7 == 0)
                        put(t, x, k, (val){NAN, 0});
            void *o = malloc(n ? (size_t)n * esize(t) : 1);
            int32_t *ix = malloc(n ? (size_t)n * 4 : 1);
            char err[256] = "";
            ck_assert_msg(sm_kern_sort(t, x, &c.s, c.axis, o, ix, err, sizeof err) == SM_OK, "%s",
                          err);
            sm_shape os = without_axis(&c.s, c.axis);
            int64_t no = len ? n / len : 0, oidx[SM_MAX_RANK], want[64];
            for (int64_t q = 0; q < no; q++) {
                unravel(q, &os, oidx);
                for (int64_t k = 0; k < len; k++) { /* insertion: stable */
                    int64_t j = k;
                    val v = get(t, x, axis_flat(&c.s, c.axis, oidx, k));
                    while (j > 0) {
                        val w = get(t, x, axis_flat(&c.s, c.axis, oidx, want[j - 1]));
                        int before =
                            is_float(t) ? (!isnan(v.f) && (isnan(w.f) || v.f < w.f)) : v.i < w.i;
                        if (!before)
                            break;
                        want[j] = want[j - 1];
                        j--;
                    }
                    want[j] = k;
                }
                for (int64_t k = 0; k < len; k++) {
                    int64_t f = axis_flat(&c.s, c.axis, oidx, k);
                    ck_assert_msg(ix[f] == want[k], "argsort %s case %d [%lld,%lld]: %d, want %lld",
                                  sm_dtype_name(t), ci, (long long)q, (long long)k, ix[f],
                                  (long long)want[k]);
                    val got = get(t, o, f), w = get(t, x, axis_flat(&c.s, c.axis, oidx, want[k]));
                    ck_assert_msg(same(t, got, w, 0), "sort %s case %d", sm_dtype_name(t), ci);
                }
            }
            free(x);
            free(o);
            free(ix);
        }
    char err[256];
    sm_shape s = shp(1, 3);
    float v[3] = {0};
    ck_assert_int_eq(sm_kern_sort(SM_BF16, v, &s, 0, v, NULL, err, sizeof err), SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_sort(SM_F32, v, &s, 1, v, NULL, err, sizeof err), SM_EINVAL);
}
END_TEST

/* ---- collective helpers --------------------------------------------------------------------- */

START_TEST(test_accumulate_scale)
{
    sm_kern_reduce_op ops[] = {SM_KERN_SUM, SM_KERN_MAX, SM_KERN_MIN};
    for (int oi = 0; oi < 3; oi++)
        for (int ti = 0; ti < NTYPES; ti++) {
            sm_dtype t = all_types[ti];
            int64_t n = 53;
            void *d = rand_buf(t, n, -100, 100), *s = rand_buf(t, n, -100, 100);
            void *d0 = malloc((size_t)n * esize(t));
            memcpy(d0, d, (size_t)n * esize(t));
            void *c = rand_buf(t, n, -100, 100); /* combine's destination, overwritten */
            char err[256];
            sm_err e = sm_kern_accumulate(t, d, s, n, ops[oi], err, sizeof err);
            sm_err ec = sm_kern_combine(t, c, d0, s, n, ops[oi], err, sizeof err);
            ck_assert_int_eq(e, SM_OK);
            ck_assert_int_eq(ec, SM_OK);
            for (int64_t k = 0; k < n; k++) {
                val want = rt(t, ref_combine(ops[oi], t, get(t, d0, k), get(t, s, k)));
                ck_assert(same(t, get(t, d, k), want, 0));
                ck_assert(same(t, get(t, c, k), want, 0));
            }
            free(d);
            free(s);
            free(d0);
            free(c);
        }
    float f[] = {1, 2, 3};
    ck_assert_int_eq(sm_kern_scale(SM_F32, f, 3, 0.5, NULL, 0), SM_OK);
    ck_assert(f[0] == 0.5f && f[2] == 1.5f);
    double g[] = {4};
    ck_assert_int_eq(sm_kern_scale(SM_F64, g, 1, 0.25, NULL, 0), SM_OK);
    ck_assert(g[0] == 1.0);
    /* half floats: in float32, each result rounded once (2049 is not a float16: 2048 + 1
     * rounds to 2048, to even; 0.1 + 0.2 rounds to the float16 nearest 0.3) */
    uint16_t hd[3], hs[3], hc[3];
    float fd[3] = {2048, 0.1f, -1}, fs[3] = {1, 0.2f, 4}, back[3];
    ck_assert_int_eq(sm_kern_astype(SM_F32, fd, SM_F16, hd, 3, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_astype(SM_F32, fs, SM_F16, hs, 3, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_combine(SM_F16, hc, hd, hs, 3, SM_KERN_MAX, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_accumulate(SM_F16, hd, hs, 3, SM_KERN_SUM, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_astype(SM_F16, hd, SM_F32, back, 3, NULL, 0), SM_OK);
    ck_assert(back[0] == 2048 && fabsf(back[1] - 0.3f) < 2e-4f && back[2] == 3);
    ck_assert_int_eq(sm_kern_astype(SM_F16, hc, SM_F32, back, 3, NULL, 0), SM_OK);
    ck_assert(back[0] == 2048 && back[2] == 4);
    ck_assert_int_eq(sm_kern_scale(SM_BF16, hd, 3, 0.5, NULL, 0), SM_OK);
    int32_t i[] = {4};
    ck_assert_int_eq(sm_kern_scale(SM_I32, i, 1, 0.25, NULL, 0), SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_accumulate(SM_F32, f, f + 1, 1, SM_KERN_MEAN, NULL, 0),
                     SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_combine(SM_F32, f + 2, f, f + 1, 1, SM_KERN_MEAN, NULL, 0),
                     SM_EUNSUPPORTED);
}
END_TEST

/* segment_sum against a row-by-row reference: every dtype it takes, ids
 * out of [0, nseg) dropped, no rows at all, and the dtypes it refuses. */
START_TEST(test_segment_sum)
{
    static const sm_dtype ts[] = {SM_F32, SM_F64, SM_I32, SM_I64};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
        for (int64_t nlead = 0; nlead <= 13; nlead += 13)
            for (int64_t inner = 1; inner <= 5; inner += 4) {
                sm_dtype t = ts[ti];
                const int64_t nseg = 4;
                void *x = rand_buf(t, nlead * inner, -20, 20);
                int64_t ids[13];
                for (int64_t i = 0; i < nlead; i++)
                    ids[i] = (int64_t)(rnd() % 7) - 2; /* -2 .. 4: some dropped */
                void *o = malloc((size_t)(nseg * inner) * esize(t));
                char err[256] = "";
                ck_assert_msg(
                    sm_kern_segment_sum(t, x, nlead, inner, ids, nseg, o, err, sizeof err) == SM_OK,
                    "%s", err);
                for (int64_t s = 0; s < nseg; s++)
                    for (int64_t q = 0; q < inner; q++) {
                        val want = {0, 0};
                        for (int64_t i = 0; i < nlead; i++)
                            if (ids[i] == s) {
                                val v = get(t, x, i * inner + q);
                                want.f += v.f;
                                want.i += v.i;
                            }
                        ck_assert_msg(same(t, get(t, o, s * inner + q), rt(t, want), 1e-6),
                                      "%s segment %lld [%lld]", sm_dtype_name(t), (long long)s,
                                      (long long)q);
                    }
                free(x);
                free(o);
            }
    char err[256] = "";
    int64_t ids[1] = {0};
    unsigned char b[1] = {1}, o[1];
    ck_assert_int_eq(sm_kern_segment_sum(SM_U8, b, 1, 1, ids, 1, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "u8"));
}
END_TEST

int main(void)
{
    return kt_run(SUITE_CASE(suite_create("kern_reduce"), "reduce", 60, NULL, {test_reduce_all},
                             {test_reduce_exact_and_errors}, {test_reduce_deterministic},
                             {test_argminmax_all}, {test_cumulative_all}, {test_sort_all},
                             {test_accumulate_scale}, {test_segment_sum}));
}
