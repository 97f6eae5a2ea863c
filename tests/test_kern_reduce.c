/* Check suite for common/kern, part 2: reductions (sum mean max min over
 * axis sets, keepdims, empty and rank-0 cases) against a naive reference on
 * random data for every dtype, bitwise determinism, exact identities and
 * error paths; and the collective helpers accumulate and scale. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_kern.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const sm_dtype all_types[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL};
#define NTYPES 6

static int is_float(sm_dtype t)
{
    return t == SM_F32 || t == SM_F64;
}

static size_t esize(sm_dtype t)
{
    return t == SM_F32 || t == SM_I32 ? 4 : t == SM_F64 || t == SM_I64 ? 8 : 1;
}

/* A value of any dtype: floats in f, integers (and bool) in i. */
typedef struct {
    double f;
    int64_t i;
} val;

static val get(sm_dtype t, const void *p, int64_t k)
{
    val v = {0, 0};
    switch (t) {
    case SM_F32:
        v.f = ((const float *)p)[k];
        break;
    case SM_F64:
        v.f = ((const double *)p)[k];
        break;
    case SM_I32:
        v.i = ((const int32_t *)p)[k];
        break;
    case SM_I64:
        v.i = ((const int64_t *)p)[k];
        break;
    default:
        v.i = ((const uint8_t *)p)[k];
        break;
    }
    return v;
}

/* Stores v, wrapping integers to the dtype's width. */
static void put(sm_dtype t, void *p, int64_t k, val v)
{
    switch (t) {
    case SM_F32:
        ((float *)p)[k] = (float)v.f;
        break;
    case SM_F64:
        ((double *)p)[k] = v.f;
        break;
    case SM_I32:
        ((int32_t *)p)[k] = (int32_t)(uint32_t)(uint64_t)v.i;
        break;
    case SM_I64:
        ((int64_t *)p)[k] = v.i;
        break;
    case SM_BOOL:
        ((uint8_t *)p)[k] = v.i != 0;
        break;
    default:
        ((uint8_t *)p)[k] = (uint8_t)(uint64_t)v.i;
        break;
    }
}

/* v rounded (or wrapped) to dtype t, through a heap buffer. */
static val rt(sm_dtype t, val v)
{
    void *p = malloc(8);
    put(t, p, 0, v);
    val r = get(t, p, 0);
    free(p);
    return r;
}

/* Random data: integers in [lo, hi], floats in [lo, hi] with fractions. */
static void *rand_buf(sm_dtype t, int64_t n, int lo, int hi)
{
    void *p = malloc(n > 0 ? (size_t)n * esize(t) : 1);
    for (int64_t k = 0; k < n; k++) {
        val v;
        v.i = lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
        v.f = lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0;
        if (t == SM_BOOL)
            v.i &= 1;
        put(t, p, k, v);
    }
    return p;
}

static sm_shape shp(int rank, ...)
{
    sm_shape s = {.rank = rank};
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        s.dims[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static int64_t numel(const sm_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

static void unravel(int64_t k, const sm_shape *s, int64_t *idx)
{
    for (int d = s->rank - 1; d >= 0; d--) {
        idx[d] = s->dims[d] ? k % s->dims[d] : 0;
        k = s->dims[d] ? k / s->dims[d] : 0;
    }
}

/* Equal values (NaN == NaN), floats within rel. */
static int same(sm_dtype t, val a, val b, double rel)
{
    if (!is_float(t))
        return a.i == b.i;
    if (isnan(a.f) || isnan(b.f))
        return isnan(a.f) && isnan(b.f);
    if (a.f == b.f)
        return 1;
    return fabs(a.f - b.f) <= rel * fmax(1.0, fabs(b.f));
}

static int64_t wrap(sm_dtype t, uint64_t u)
{
    return t == SM_I32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
}

/* dst op src for one element, the accumulate reference. */
static val ref_combine(sm_kern_reduce_op op, sm_dtype t, val a, val b)
{
    val r = a;
    if (op == SM_KERN_SUM) {
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
    double fs = 0;
    uint64_t is = 0;
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
    if (op == SM_KERN_SUM)
        return t != SM_BOOL;
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
                    void *x = rand_buf(t, n, -50, 50);
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
            char err[256];
            sm_err e = sm_kern_accumulate(t, d, s, n, ops[oi], err, sizeof err);
            if (t == SM_BOOL && ops[oi] == SM_KERN_SUM) {
                ck_assert_int_eq(e, SM_EUNSUPPORTED);
            } else {
                ck_assert_int_eq(e, SM_OK);
                for (int64_t k = 0; k < n; k++) {
                    val want = rt(t, ref_combine(ops[oi], t, get(t, d0, k), get(t, s, k)));
                    ck_assert(same(t, get(t, d, k), want, 0));
                }
            }
            free(d);
            free(s);
            free(d0);
        }
    float f[] = {1, 2, 3};
    ck_assert_int_eq(sm_kern_scale(SM_F32, f, 3, 0.5, NULL, 0), SM_OK);
    ck_assert(f[0] == 0.5f && f[2] == 1.5f);
    double g[] = {4};
    ck_assert_int_eq(sm_kern_scale(SM_F64, g, 1, 0.25, NULL, 0), SM_OK);
    ck_assert(g[0] == 1.0);
    int32_t i[] = {4};
    ck_assert_int_eq(sm_kern_scale(SM_I32, i, 1, 0.25, NULL, 0), SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_accumulate(SM_F32, f, f + 1, 1, SM_KERN_MEAN, NULL, 0),
                     SM_EUNSUPPORTED);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kern_reduce");
    TCase *tc = tcase_create("reduce");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reduce_all);
    tcase_add_test(tc, test_reduce_exact_and_errors);
    tcase_add_test(tc, test_reduce_deterministic);
    tcase_add_test(tc, test_accumulate_scale);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
