/* Helpers shared by the common/kern Check suites (test_kern*.c): a seeded
 * xorshift generator, dtype-generic element access, random buffers, shape
 * construction, index walks (unravel, ravel) and value comparison. Each suite
 * is one single-file program, so everything here is static and marked unused;
 * a suite picks its own seed by defining KT_RNG_SEED before the include. Not
 * thread-safe: the generator state is one static per program. */
#ifndef SM_KERN_TESTUTIL_H
#define SM_KERN_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "sm_kern.h"
#include "suite_main.h"

#ifndef KT_RNG_SEED
#define KT_RNG_SEED 88172645463325252ull
#endif

#define KT_UNUSED __attribute__((unused))

static uint64_t rng = KT_RNG_SEED;

static KT_UNUSED uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static KT_UNUSED const sm_dtype all_types[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL};
#define NTYPES 6

static KT_UNUSED int is_float(sm_dtype t)
{
    return t == SM_F32 || t == SM_F64;
}

static KT_UNUSED size_t esize(sm_dtype t)
{
    return t == SM_F32 || t == SM_I32 ? 4 : t == SM_F64 || t == SM_I64 ? 8 : t == SM_F16 ? 2 : 1;
}

/* A value of any dtype: floats in f, integers (and bool) in i. */
typedef struct {
    double f;
    int64_t i;
} val;

static KT_UNUSED val get(sm_dtype t, const void *p, int64_t k)
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
static KT_UNUSED void put(sm_dtype t, void *p, int64_t k, val v)
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
static KT_UNUSED val rt(sm_dtype t, val v)
{
    void *p = malloc(8);
    put(t, p, 0, v);
    val r = get(t, p, 0);
    free(p);
    return r;
}

/* Random data: integers in [lo, hi], floats in [lo, hi] with fractions.
 * The caller frees the buffer. */
static KT_UNUSED void *rand_buf(sm_dtype t, int64_t n, int lo, int hi)
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

static KT_UNUSED sm_shape shp(int rank, ...)
{
    sm_shape s = {.rank = rank};
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        s.dims[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static KT_UNUSED int64_t numel(const sm_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* Index tuple idx of row-major flat index k in s. */
static KT_UNUSED void unravel(int64_t k, const sm_shape *s, int64_t *idx)
{
    for (int d = s->rank - 1; d >= 0; d--) {
        idx[d] = s->dims[d] ? k % s->dims[d] : 0;
        k = s->dims[d] ? k / s->dims[d] : 0;
    }
}

/* Row-major flat index of the index tuple idx in s. */
static KT_UNUSED int64_t ravel(const int64_t *idx, const sm_shape *s)
{
    int64_t k = 0;
    for (int d = 0; d < s->rank; d++)
        k = k * s->dims[d] + idx[d];
    return k;
}

/* Equal values (NaN == NaN), floats within rel. */
static KT_UNUSED int same(sm_dtype t, val a, val b, double rel)
{
    if (!is_float(t))
        return a.i == b.i;
    if (isnan(a.f) || isnan(b.f))
        return isnan(a.f) && isnan(b.f);
    if (a.f == b.f)
        return 1;
    return fabs(a.f - b.f) <= rel * fmax(1.0, fabs(b.f));
}

/* u wrapped to the integer dtype t (i32 or i64). */
static KT_UNUSED int64_t wrap(sm_dtype t, uint64_t u)
{
    return t == SM_I32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
}

/* Runs every test of s (freeing it); the suite program's exit status. */
static KT_UNUSED int kt_run(Suite *s)
{
    return suite_main(s);
}

#endif
