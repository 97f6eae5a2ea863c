/* Check suite for common/kern, part 1: elementwise ops with broadcasting,
 * where, astype, fill/iota, against naive references written here (element
 * loops over index tuples) on random data, plus numpy-exact values and error
 * paths. Reductions and collective helpers are in test_kern_reduce.c,
 * products in test_kern_prod.c, shape ops and OpenBLAS setup in
 * test_kern_shape.c. */
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

/* Flat index into s of the out index idx (rank r), numpy broadcasting. */
static int64_t bflat(const int64_t *idx, int r, const sm_shape *s)
{
    int64_t k = 0;
    for (int d = 0; d < s->rank; d++) {
        int64_t i = s->dims[d] == 1 ? 0 : idx[d + r - s->rank];
        k = k * s->dims[d] + i;
    }
    return k;
}

/* ---- elementwise references ----------------------------------------------------------------- */

static double ref_negative(double v)
{
    return -v;
}

static double ref_sign(double v)
{
    return v > 0 ? 1 : v < 0 ? -1 : v;
}

static double ref_rsqrt(double v)
{
    return 1 / sqrt(v);
}

static double ref_logistic(double v)
{
    return 1 / (1 + exp(-v));
}

/* The float reference of each unary op, in the order of SM_KERN_UNARY_LIST:
 * libm's function where it has one. */
static double (*const ref_unary_float[])(
    double) = {ref_negative, fabs,  ref_sign, floor,       ceil,      nearbyint,    exp,   log,
               sin,          cos,   tanh,     sqrt,        ref_rsqrt, ref_logistic, log1p, expm1,
               tan,          erf,   asin,     acos,        atan,      sinh,         cosh,  asinh,
               acosh,        atanh, cbrt,     ref_negative /* bitwise_not: no float form */};
_Static_assert(sizeof ref_unary_float / sizeof *ref_unary_float == SM_KERN_UNARY_COUNT,
               "one reference per unary op");

static val ref_unary(sm_kern_unary_op op, sm_dtype t, val x)
{
    val r = {0, 0};
    if (is_float(t)) {
        r.f = ref_unary_float[op](x.f);
        return r;
    }
    int64_t v = x.i;
    switch (op) {
    case SM_KERN_NEGATIVE:
        r.i = wrap(t, 0 - (uint64_t)v);
        break;
    case SM_KERN_ABS:
        r.i = v < 0 ? wrap(t, 0 - (uint64_t)v) : v;
        break;
    case SM_KERN_SIGN:
        r.i = v > 0 ? 1 : v < 0 ? -1 : 0;
        break;
    case SM_KERN_BITWISE_NOT:
        r.i = t == SM_BOOL ? !v : wrap(t, ~(uint64_t)v);
        break;
    default:
        r.i = v;
        break;
    }
    return r;
}

static int unary_ok(sm_kern_unary_op op, sm_dtype t)
{
    if (op == SM_KERN_BITWISE_NOT)
        return !is_float(t);
    if (is_float(t))
        return 1;
    if (t == SM_BOOL) /* abs, floor, ceil and round give a bool back (jnp's) */
        return op == SM_KERN_ABS || op == SM_KERN_FLOOR || op == SM_KERN_CEIL ||
               op == SM_KERN_ROUND;
    if (t != SM_I32 && t != SM_I64 && t != SM_U8) /* uint8 too: it wraps as JAX's */
        return 0;
    return op <= SM_KERN_ROUND;
}

static int binary_ok(sm_kern_binary_op op, sm_dtype t)
{
    if (op == SM_KERN_ARCTAN2)
        return is_float(t);
    if (op >= SM_KERN_BITWISE_AND)
        return !is_float(t);
    if (op >= SM_KERN_MAXIMUM)
        return 1;
    return t != SM_BOOL || op == SM_KERN_ADD || op == SM_KERN_MULTIPLY; /* bool: or, and */
}

static val ref_binary(sm_kern_binary_op op, sm_dtype t, val x, val y)
{
    val r = {0, 0};
    int f = is_float(t);
    double a = x.f, b = y.f;
    int64_t p = x.i, q = y.i;
    switch (op) {
    case SM_KERN_ADD:
        r.f = a + b;
        r.i = wrap(t, (uint64_t)p + (uint64_t)q);
        break;
    case SM_KERN_SUBTRACT:
        r.f = a - b;
        r.i = wrap(t, (uint64_t)p - (uint64_t)q);
        break;
    case SM_KERN_MULTIPLY:
        r.f = a * b;
        r.i = wrap(t, (uint64_t)p * (uint64_t)q);
        break;
    case SM_KERN_DIVIDE:
        r.f = a / b;
        r.i = q == 0 ? 0 : q == -1 ? wrap(t, 0 - (uint64_t)p) : p / q;
        break;
    case SM_KERN_MOD:
        r.f = a - b * floor(a / b);
        if (f) { /* exact form: fmod adjusted */
            double m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0)))
                m += b;
            if (m == 0)
                m = copysign(0.0, b);
            r.f = m;
        }
        if (q == 0 || q == -1) {
            r.i = 0;
        } else {
            int64_t m = p % q;
            r.i = (m != 0 && ((m < 0) != (q < 0))) ? m + q : m;
        }
        break;
    case SM_KERN_FLOOR_DIVIDE: /* the quotient's floor, computed the other way round */
        r.f = floor(a / b);
        if (q == 0) {
            r.i = 0;
        } else if (q == -1) {
            r.i = wrap(t, 0 - (uint64_t)p);
        } else {
            int64_t m = p % q; /* p = q * r.i + the divisor-signed remainder */
            if (m != 0 && ((m < 0) != (q < 0)))
                m += q;
            r.i = (p - m) / q;
        }
        break;
    case SM_KERN_POWER:
        r.f = pow(a, b);
        if (q < 0) {
            r.i = p == 1 ? 1 : p == -1 ? ((q & 1) ? -1 : 1) : 0;
        } else {
            uint64_t acc = 1;
            for (int64_t k = 0; k < q; k++)
                acc *= (uint64_t)p;
            r.i = wrap(t, acc);
        }
        break;
    case SM_KERN_ARCTAN2:
        r.f = atan2(a, b);
        break;
    case SM_KERN_MAXIMUM:
        r.f = (a >= b || isnan(a)) ? a : b;
        r.i = p > q ? p : q;
        break;
    case SM_KERN_MINIMUM:
        r.f = (a <= b || isnan(a)) ? a : b;
        r.i = p < q ? p : q;
        break;
    case SM_KERN_EQUAL:
        r.i = f ? a == b : p == q;
        break;
    case SM_KERN_NOT_EQUAL:
        r.i = f ? a != b : p != q;
        break;
    case SM_KERN_LESS:
        r.i = f ? a < b : p < q;
        break;
    case SM_KERN_LESS_EQUAL:
        r.i = f ? a <= b : p <= q;
        break;
    case SM_KERN_GREATER:
        r.i = f ? a > b : p > q;
        break;
    case SM_KERN_GREATER_EQUAL:
        r.i = f ? a >= b : p >= q;
        break;
    case SM_KERN_BITWISE_AND:
        r.i = p & q;
        break;
    case SM_KERN_BITWISE_OR:
        r.i = p | q;
        break;
    default:
        r.i = p ^ q;
        break;
    }
    return r;
}

/* ---- unary ---------------------------------------------------------------------------------- */

static const sm_shape *unary_shapes(int k)
{
    static sm_shape s[4];
    s[0] = shp(0);
    s[1] = shp(2, 3, 7);
    s[2] = shp(1, 37);
    s[3] = shp(2, 0, 4);
    return &s[k];
}

START_TEST(test_unary_all)
{
    for (int op = 0; op < SM_KERN_UNARY_COUNT; op++)
        for (int ti = 0; ti < NTYPES; ti++)
            for (int si = 0; si < 4; si++) {
                sm_dtype t = all_types[ti];
                const sm_shape *s = unary_shapes(si);
                int64_t n = numel(s);
                int positive = op == SM_KERN_LOG || op == SM_KERN_SQRT || op == SM_KERN_RSQRT ||
                               op == SM_KERN_LOG1P || op == SM_KERN_ARCCOSH;
                int unit = op == SM_KERN_ARCSIN || op == SM_KERN_ARCCOS || op == SM_KERN_ARCTANH;
                void *x = rand_buf(t, n, unit ? -1 : positive ? 1 : -20, unit ? 1 : 20);
                void *o = malloc(n ? (size_t)n * esize(t) : 1);
                char err[256] = "";
                sm_err rc = sm_kern_unary(op, t, s, x, o, err, sizeof err);
                if (!unary_ok(op, t)) {
                    ck_assert_msg(rc == SM_EUNSUPPORTED, "%s %s", sm_kern_unary_name(op),
                                  sm_dtype_name(t));
                    ck_assert_ptr_nonnull(strstr(err, sm_dtype_name(t)));
                } else {
                    ck_assert_int_eq(rc, SM_OK);
                    double rel = t == SM_F32 ? 1e-6 : 1e-15;
                    for (int64_t k = 0; k < n; k++) {
                        val want = rt(t, ref_unary(op, t, get(t, x, k)));
                        ck_assert_msg(same(t, get(t, o, k), want, rel), "%s %s [%lld]",
                                      sm_kern_unary_name(op), sm_dtype_name(t), (long long)k);
                    }
                }
                free(x);
                free(o);
            }
}
END_TEST

START_TEST(test_unary_exact_values)
{
    /* round half to even like numpy; sign keeps -0 and NaN */
    float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 0.49999997f, 3.7f};
    float want[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 0.0f, 4.0f};
    float o[8];
    sm_shape s = shp(1, 8);
    ck_assert_int_eq(sm_kern_unary(SM_KERN_ROUND, SM_F32, &s, x, o, NULL, 0), SM_OK);
    for (int i = 0; i < 8; i++) {
        ck_assert_float_eq(o[i], want[i]);
        ck_assert_int_eq(signbit(o[i]) != 0, signbit(want[i]) != 0);
    }
    double y[] = {-0.0, NAN, -3.0, 2.0};
    double oy[4];
    s = shp(1, 4);
    ck_assert_int_eq(sm_kern_unary(SM_KERN_SIGN, SM_F64, &s, y, oy, NULL, 0), SM_OK);
    ck_assert(oy[0] == 0 && signbit(oy[0]));
    ck_assert(isnan(oy[1]));
    ck_assert(oy[2] == -1 && oy[3] == 1);
    int32_t iv[] = {INT32_MIN, -5, 0, 7};
    int32_t io[4];
    ck_assert_int_eq(sm_kern_unary(SM_KERN_ABS, SM_I32, &s, iv, io, NULL, 0), SM_OK);
    ck_assert(io[0] == INT32_MIN && io[1] == 5 && io[2] == 0 && io[3] == 7);
    float lg[] = {-100.0f, 0.0f, 100.0f, 1.0f};
    float lo[4];
    ck_assert_int_eq(sm_kern_unary(SM_KERN_LOGISTIC, SM_F32, &s, lg, lo, NULL, 0), SM_OK);
    ck_assert(lo[0] >= 0 && lo[0] < 1e-30f && lo[1] == 0.5f && lo[2] == 1.0f);
    ck_assert_float_eq_tol(lo[3], 0.7310586f, 1e-6f);
}
END_TEST

/* ---- binary --------------------------------------------------------------------------------- */

typedef struct {
    sm_shape a, b;
} shape_pair;

static shape_pair bin_pair(int k)
{
    shape_pair p[] = {
        {shp(2, 3, 1), shp(2, 1, 4)},
        {shp(3, 2, 3, 4), shp(1, 4)},
        {shp(0), shp(1, 5)},
        {shp(1, 5), shp(0)},
        {shp(0), shp(0)},
        {shp(3, 2, 0, 3), shp(1, 3)},
        {shp(2, 4, 5), shp(2, 4, 5)},
        {shp(3, 2, 1, 3), shp(3, 2, 4, 1)},
        {shp(2, 7, 33), shp(1, 33)},
        {shp(2, 1, 40), shp(2, 40, 1)},
        {shp(3, 4, 1, 19), shp(2, 5, 19)},
        {shp(1, 50), shp(1, 1)},
    };
    return p[k];
}
#define NPAIRS 12

START_TEST(test_binary_all)
{
    for (int op = 0; op < SM_KERN_BINARY_COUNT; op++)
        for (int ti = 0; ti < NTYPES; ti++)
            for (int pi = 0; pi < NPAIRS; pi++) {
                sm_dtype t = all_types[ti];
                shape_pair sp = bin_pair(pi);
                sm_shape os;
                ck_assert_int_eq(sm_kern_broadcast_shape(&sp.a, &sp.b, &os, NULL, 0), SM_OK);
                int64_t na = numel(&sp.a), nb = numel(&sp.b), no = numel(&os);
                int divlike =
                    op == SM_KERN_DIVIDE || op == SM_KERN_MOD || op == SM_KERN_FLOOR_DIVIDE;
                void *a = rand_buf(t, na, -20, 20);
                void *b = rand_buf(t, nb,
                                   op == SM_KERN_POWER ? -2
                                   : divlike           ? 1
                                                       : -20,
                                   op == SM_KERN_POWER ? 6 : 20);
                if (divlike) /* negative divisors too, never zero */
                    for (int64_t k = 0; k < nb; k++)
                        if (rnd() & 1) {
                            val v = get(t, b, k);
                            v.f = -v.f;
                            v.i = -v.i;
                            put(t, b, k, v);
                        }
                sm_dtype ot = sm_kern_binary_is_compare(op) ? SM_BOOL : t;
                void *o = malloc(no ? (size_t)no * esize(ot) : 1);
                char err[256] = "";
                sm_err rc = sm_kern_binary(op, t, a, &sp.a, b, &sp.b, o, err, sizeof err);
                if (!binary_ok(op, t)) {
                    ck_assert_int_eq(rc, SM_EUNSUPPORTED);
                } else {
                    ck_assert_msg(rc == SM_OK, "%s: %s", sm_kern_binary_name(op), err);
                    double rel =
                        (op == SM_KERN_POWER || op == SM_KERN_ARCTAN2) && t == SM_F32 ? 1e-6 : 0;
                    int64_t idx[SM_MAX_RANK];
                    for (int64_t k = 0; k < no; k++) {
                        unravel(k, &os, idx);
                        val x = get(t, a, bflat(idx, os.rank, &sp.a));
                        val y = get(t, b, bflat(idx, os.rank, &sp.b));
                        val want = rt(ot, ref_binary(op, t, x, y));
                        ck_assert_msg(same(ot, get(ot, o, k), want, rel),
                                      "%s %s pair %d [%lld]: got %g/%lld want %g/%lld",
                                      sm_kern_binary_name(op), sm_dtype_name(t), pi, (long long)k,
                                      get(ot, o, k).f, (long long)get(ot, o, k).i, want.f,
                                      (long long)want.i);
                    }
                }
                free(a);
                free(b);
                free(o);
            }
}
END_TEST

START_TEST(test_binary_exact_values)
{
    sm_shape s4 = shp(1, 4), s1 = shp(1, 1);
    /* numpy mod: the result has the divisor's sign */
    int32_t a[] = {7, -7, 7, -7}, b[] = {3, 3, -3, -3}, o[4];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MOD, SM_I32, a, &s4, b, &s4, o, NULL, 0), SM_OK);
    ck_assert(o[0] == 1 && o[1] == 2 && o[2] == -2 && o[3] == -1);
    /* integer divide truncates (lax.div) */
    int32_t d2[] = {2, 2, -2, -2};
    ck_assert_int_eq(sm_kern_binary(SM_KERN_DIVIDE, SM_I32, a, &s4, d2, &s4, o, NULL, 0), SM_OK);
    ck_assert(o[0] == 3 && o[1] == -3 && o[2] == -3 && o[3] == 3);
    /* x / 0, x % 0 -> 0; INT_MIN / -1 wraps; INT_MIN % -1 is 0 */
    int64_t p[] = {5, INT64_MIN, INT64_MIN, -9}, q[] = {0, -1, -1, 0}, r[4];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_DIVIDE, SM_I64, p, &s4, q, &s4, r, NULL, 0), SM_OK);
    ck_assert(r[0] == 0 && r[1] == INT64_MIN && r[3] == 0);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MOD, SM_I64, p, &s4, q, &s4, r, NULL, 0), SM_OK);
    ck_assert(r[0] == 0 && r[1] == 0 && r[3] == 0);
    double fa[] = {7.5, -7.5, 7.5, -7.5}, fb[] = {2, 2, -2, -2}, fo[4];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MOD, SM_F64, fa, &s4, fb, &s4, fo, NULL, 0), SM_OK);
    ck_assert(fo[0] == 1.5 && fo[1] == 0.5 && fo[2] == -0.5 && fo[3] == -1.5);
    double za[] = {-4.0, 4.0, 0.0, 1.0}, zb[] = {2.0, -2.0, -3.0, 0.0};
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MOD, SM_F64, za, &s4, zb, &s4, fo, NULL, 0), SM_OK);
    ck_assert(fo[0] == 0 && !signbit(fo[0]) && fo[1] == 0 && signbit(fo[1]));
    ck_assert(fo[2] == 0 && signbit(fo[2]) && isnan(fo[3]));
    /* floor_divide: numpy's floor of the quotient; x // 0 -> 0 and INT_MIN //
     * -1 wraps for integers; floats as JAX (1.0 // 0.1 is 9, x // 0 is x / 0) */
    ck_assert_int_eq(sm_kern_binary(SM_KERN_FLOOR_DIVIDE, SM_I32, a, &s4, b, &s4, o, NULL, 0),
                     SM_OK);
    ck_assert(o[0] == 2 && o[1] == -3 && o[2] == -3 && o[3] == 2);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_FLOOR_DIVIDE, SM_I64, p, &s4, q, &s4, r, NULL, 0),
                     SM_OK);
    ck_assert(r[0] == 0 && r[1] == INT64_MIN && r[3] == 0);
    double ga[] = {1.0, -7.5, 7.5, -1.0}, gb[] = {0.1, 2, -2, 0.0};
    ck_assert_int_eq(sm_kern_binary(SM_KERN_FLOOR_DIVIDE, SM_F64, ga, &s4, gb, &s4, fo, NULL, 0),
                     SM_OK);
    ck_assert(fo[0] == 9.0 && fo[1] == -4.0 && fo[2] == -4.0 && isinf(fo[3]) && fo[3] < 0);
    double ha[] = {0.0, -0.5, 0.0, 3.0}, hb[] = {0.0, 2.0, 5.0, 0.0};
    ck_assert_int_eq(sm_kern_binary(SM_KERN_FLOOR_DIVIDE, SM_F64, ha, &s4, hb, &s4, fo, NULL, 0),
                     SM_OK);
    ck_assert(isnan(fo[0]) && fo[1] == -1.0 && fo[2] == 0.0 && isinf(fo[3]) && fo[3] > 0);
    /* maximum/minimum propagate NaN from either side */
    float na[] = {NAN, 1.0f, 2.0f, -1.0f}, nb[] = {1.0f, NAN, 1.0f, 3.0f}, no[4];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MAXIMUM, SM_F32, na, &s4, nb, &s4, no, NULL, 0), SM_OK);
    ck_assert(isnan(no[0]) && isnan(no[1]) && no[2] == 2.0f && no[3] == 3.0f);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_MINIMUM, SM_F32, na, &s4, nb, &s4, no, NULL, 0), SM_OK);
    ck_assert(isnan(no[0]) && isnan(no[1]) && no[2] == 1.0f && no[3] == -1.0f);
    /* integer power, negative exponents */
    int32_t pb[] = {2, -1, 3, -2}, pe[] = {10, -3, 0, -1}, po[4];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_POWER, SM_I32, pb, &s4, pe, &s4, po, NULL, 0), SM_OK);
    ck_assert(po[0] == 1024 && po[1] == -1 && po[2] == 1 && po[3] == 0);
    /* comparisons give bool; NaN compares unequal */
    float c1[] = {1.0f}, c2[] = {NAN};
    uint8_t bo[1];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_NOT_EQUAL, SM_F32, c2, &s1, c2, &s1, bo, NULL, 0),
                     SM_OK);
    ck_assert_int_eq(bo[0], 1);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_LESS, SM_F32, c1, &s1, c2, &s1, bo, NULL, 0), SM_OK);
    ck_assert_int_eq(bo[0], 0);
}
END_TEST

START_TEST(test_binary_errors)
{
    sm_shape a = shp(2, 3, 4), b = shp(1, 5);
    float x[12] = {0}, y[5] = {0}, o[20];
    char err[256];
    ck_assert_int_eq(sm_kern_binary(SM_KERN_ADD, SM_F32, x, &a, y, &b, o, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[3,4]"));
    ck_assert_ptr_nonnull(strstr(err, "[5]"));
    sm_shape c = shp(1, 4);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_ADD, SM_F16, x, &a, y, &c, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "f16"));
    ck_assert_int_eq(sm_kern_binary(SM_KERN_SUBTRACT, SM_BOOL, x, &a, y, &c, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "subtract"));
    ck_assert_int_eq(sm_kern_unary(SM_KERN_EXP, SM_I32, &a, x, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "exp"));
    ck_assert_int_eq(sm_kern_binary((sm_kern_binary_op)99, SM_F32, x, &a, y, &c, o, NULL, 0),
                     SM_EINVAL);
    ck_assert_str_eq(sm_kern_binary_name(SM_KERN_GREATER_EQUAL), "greater_equal");
    ck_assert_str_eq(sm_kern_unary_name(SM_KERN_LOGISTIC), "logistic");
    ck_assert_str_eq(sm_kern_unary_name((sm_kern_unary_op)-1), "?");
}
END_TEST

/* ---- where ---------------------------------------------------------------------------------- */

START_TEST(test_where_broadcast)
{
    sm_shape tri[][3] = {
        {shp(2, 3, 1), shp(2, 1, 4), shp(0)}, {shp(1, 20), shp(1, 20), shp(1, 20)},
        {shp(0), shp(2, 2, 3), shp(1, 3)},    {shp(3, 2, 1, 5), shp(2, 3, 1), shp(1, 1)},
        {shp(2, 0, 3), shp(1, 3), shp(0)},
    };
    for (int ci = 0; ci < 5; ci++)
        for (int ti = 0; ti < NTYPES; ti++) {
            sm_dtype t = all_types[ti];
            sm_shape *s = tri[ci], os, ab;
            ck_assert_int_eq(sm_kern_broadcast_shape(&s[1], &s[2], &ab, NULL, 0), SM_OK);
            ck_assert_int_eq(sm_kern_broadcast_shape(&s[0], &ab, &os, NULL, 0), SM_OK);
            void *c = rand_buf(SM_BOOL, numel(&s[0]), 0, 1);
            void *a = rand_buf(t, numel(&s[1]), -9, 9), *b = rand_buf(t, numel(&s[2]), -9, 9);
            int64_t no = numel(&os);
            void *o = malloc(no ? (size_t)no * esize(t) : 1);
            sm_shape got;
            ck_assert_int_eq(sm_kern_where(t, c, &s[0], a, &s[1], b, &s[2], o, &got, NULL, 0),
                             SM_OK);
            ck_assert(got.rank == os.rank);
            int64_t idx[SM_MAX_RANK];
            for (int64_t k = 0; k < no; k++) {
                unravel(k, &os, idx);
                int cv = ((uint8_t *)c)[bflat(idx, os.rank, &s[0])];
                val want = cv ? get(t, a, bflat(idx, os.rank, &s[1]))
                              : get(t, b, bflat(idx, os.rank, &s[2]));
                ck_assert(same(t, get(t, o, k), want, 0));
            }
            free(a);
            free(b);
            free(c);
            free(o);
        }
    sm_shape bad1 = shp(1, 3), bad2 = shp(1, 4);
    char err[256];
    uint8_t c[4] = {0};
    float x[4] = {0}, o[4];
    ck_assert_int_eq(sm_kern_where(SM_F32, c, &bad1, x, &bad2, x, &bad2, o, NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[3]"));
    ck_assert_int_eq(sm_kern_where((sm_dtype)SM_DTYPE_COUNT, c, &bad1, x, &bad1, x, &bad1, o, NULL,
                                   err, sizeof err),
                     SM_EUNSUPPORTED);
    /* 16-bit floats are moved by size */
    uint16_t ha[3] = {0x3C00, 0x4000, 0x4200}, hb[1] = {0xBC00}, ho[3];
    uint8_t hc[3] = {1, 0, 1};
    ck_assert_int_eq(
        sm_kern_where(SM_BF16, hc, &bad1, ha, &bad1, hb, &(sm_shape){0}, ho, NULL, NULL, 0), SM_OK);
    ck_assert(ho[0] == 0x3C00 && ho[1] == 0xBC00 && ho[2] == 0x4200);
}
END_TEST

/* ---- astype --------------------------------------------------------------------------------- */

/* Reference conversion through val. */
static val ref_cvt(sm_dtype from, sm_dtype to, val v)
{
    val r = {0, 0};
    int ff = is_float(from), tf = is_float(to);
    if (to == SM_BOOL) {
        r.i = ff ? v.f != 0 : v.i != 0;
    } else if (tf) {
        r.f = ff ? v.f : (double)v.i;
    } else if (ff) {
        double lo = to == SM_I32 ? -2147483648.0 : to == SM_I64 ? -9223372036854775808.0 : 0;
        double hi = to == SM_I32 ? 2147483647.0 : to == SM_I64 ? 9223372036854775807.0 : 255;
        r.i = isnan(v.f) ? 0 : v.f <= lo ? (int64_t)lo : v.f >= hi ? (int64_t)hi : (int64_t)v.f;
        if (to == SM_I64 && v.f >= 9223372036854775807.0)
            r.i = INT64_MAX;
    } else {
        r.i = v.i; /* put() wraps */
    }
    return r;
}

START_TEST(test_astype_all_pairs)
{
    for (int fi = 0; fi < NTYPES; fi++)
        for (int ti = 0; ti < NTYPES; ti++) {
            sm_dtype from = all_types[fi], to = all_types[ti];
            int64_t n = 45;
            void *x = rand_buf(from, n, -300, 300);
            void *o = malloc((size_t)n * esize(to));
            ck_assert_int_eq(sm_kern_astype(from, x, to, o, n, NULL, 0), SM_OK);
            for (int64_t k = 0; k < n; k++) {
                val want = rt(to, ref_cvt(from, to, get(from, x, k)));
                ck_assert_msg(same(to, get(to, o, k), want, 0), "%s->%s [%lld]",
                              sm_dtype_name(from), sm_dtype_name(to), (long long)k);
            }
            free(x);
            free(o);
        }
}
END_TEST

START_TEST(test_astype_exact_values)
{
    float f[] = {1.9f, -1.9f, NAN, 3e9f, -3e9f, -0.5f};
    int32_t i[6];
    ck_assert_int_eq(sm_kern_astype(SM_F32, f, SM_I32, i, 6, NULL, 0), SM_OK);
    ck_assert(i[0] == 1 && i[1] == -1 && i[2] == 0 && i[3] == INT32_MAX && i[4] == INT32_MIN &&
              i[5] == 0);
    double d[] = {-1.0, 300.0, 2.7, 1e300};
    uint8_t u[4];
    ck_assert_int_eq(sm_kern_astype(SM_F64, d, SM_U8, u, 4, NULL, 0), SM_OK);
    ck_assert(u[0] == 0 && u[1] == 255 && u[2] == 2 && u[3] == 255);
    int64_t l[4];
    ck_assert_int_eq(sm_kern_astype(SM_F64, d, SM_I64, l, 4, NULL, 0), SM_OK);
    ck_assert(l[0] == -1 && l[1] == 300 && l[2] == 2 && l[3] == INT64_MAX);
    int32_t w[] = {257, -1};
    ck_assert_int_eq(sm_kern_astype(SM_I32, w, SM_U8, u, 2, NULL, 0), SM_OK);
    ck_assert(u[0] == 1 && u[1] == 255);
    float z[] = {0.0f, -0.0f, 0.5f, NAN};
    ck_assert_int_eq(sm_kern_astype(SM_F32, z, SM_BOOL, u, 4, NULL, 0), SM_OK);
    ck_assert(u[0] == 0 && u[1] == 0 && u[2] == 1 && u[3] == 1);
    int64_t big[] = {(1ll << 32) + 5, -1};
    ck_assert_int_eq(sm_kern_astype(SM_I64, big, SM_I32, i, 2, NULL, 0), SM_OK);
    ck_assert(i[0] == 5 && i[1] == -1);
    /* the half floats, through float32 rounded to nearest even: 1 + 2^-11 is a tie (to 1),
     * 1 + 3 * 2^-11 rounds up, 65520 overflows to inf, 2^-24 is the smallest subnormal */
    float hv[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-24f, -2.5f, NAN};
    uint16_t h[6], bf[6];
    ck_assert_int_eq(sm_kern_astype(SM_F32, hv, SM_F16, h, 6, NULL, 0), SM_OK);
    ck_assert(h[0] == 0x3c00 && h[1] == 0x3c02 && h[2] == 0x7c00 && h[3] == 0x0001 &&
              h[4] == 0xc100 && (h[5] & 0x7c00) == 0x7c00 && (h[5] & 0x3ff));
    float back[6];
    ck_assert_int_eq(sm_kern_astype(SM_F16, h, SM_F32, back, 6, NULL, 0), SM_OK);
    ck_assert(back[0] == 1.0f && back[1] == 1.0f + 2 * 0x1p-10f && isinf(back[2]) &&
              back[3] == 0x1p-24f && back[4] == -2.5f && isnan(back[5]));
    ck_assert_int_eq(sm_kern_astype(SM_F32, hv, SM_BF16, bf, 6, NULL, 0), SM_OK);
    ck_assert(bf[0] == 0x3f80 && bf[4] == 0xc020 && (bf[5] & 0x7f80) == 0x7f80 && (bf[5] & 0x7f));
    int32_t iv[2];
    ck_assert_int_eq(sm_kern_astype(SM_F16, h, SM_I32, iv, 2, NULL, 0), SM_OK);
    ck_assert(iv[0] == 1 && iv[1] == 1);
    char err[256];
    ck_assert_int_eq(sm_kern_astype(SM_F16, z, (sm_dtype)99, f, 1, err, sizeof err),
                     SM_EUNSUPPORTED);
}
END_TEST

/* ---- creation ------------------------------------------------------------------------------- */

START_TEST(test_fill_iota)
{
    for (int ti = 0; ti < NTYPES; ti++) {
        sm_dtype t = all_types[ti];
        val v = {-3.25, 3};
        void *one = malloc(8), *buf = malloc(8 * 37);
        put(t, one, 0, v);
        ck_assert_int_eq(sm_kern_fill(t, buf, 37, one, NULL, 0), SM_OK);
        for (int k = 0; k < 37; k++)
            ck_assert(same(t, get(t, buf, k), get(t, one, 0), 0));
        free(one);
        free(buf);
    }
    uint16_t h = 0x3C00, hb[5];
    ck_assert_int_eq(sm_kern_fill(SM_F16, hb, 5, &h, NULL, 0), SM_OK);
    ck_assert(hb[0] == 0x3C00 && hb[4] == 0x3C00);
    sm_shape s = shp(3, 2, 3, 4);
    for (int axis = -3; axis < 3; axis++) {
        int32_t o[24];
        ck_assert_int_eq(sm_kern_iota(SM_I32, &s, axis, o, NULL, 0), SM_OK);
        int64_t idx[3];
        for (int k = 0; k < 24; k++) {
            unravel(k, &s, idx);
            ck_assert_int_eq(o[k], idx[axis < 0 ? axis + 3 : axis]);
        }
    }
    sm_shape a = shp(1, 5);
    double od[5];
    ck_assert_int_eq(sm_kern_iota(SM_F64, &a, 0, od, NULL, 0), SM_OK);
    ck_assert(od[0] == 0 && od[4] == 4);
    char err[256];
    ck_assert_int_eq(sm_kern_iota(SM_F64, &a, 1, od, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[5]"));
    ck_assert_int_eq(sm_kern_iota(SM_BOOL, &a, 0, od, NULL, 0), SM_EUNSUPPORTED);
}
END_TEST

int main(void)
{
    return kt_run(SUITE_CASE(
        suite_create("kern"), "kern", 60, NULL, {test_unary_all}, {test_unary_exact_values},
        {test_binary_all}, {test_binary_exact_values}, {test_binary_errors}, {test_where_broadcast},
        {test_astype_all_pairs}, {test_astype_exact_values}, {test_fill_iota}));
}
