/* Check suite for common/kern, part 4: shape ops (reshape, transpose, slice,
 * broadcast_to, pad, concatenate, tile, roll, dynamic_slice,
 * dynamic_update_slice) against naive index-tuple references for every
 * element size, numpy/XLA-exact values for roll and clamping, error paths;
 * and the OpenBLAS setup helpers. */
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define KT_RNG_SEED 0x2545F4914F6CDD1Dull
#include "kern_testutil.h"
#include "sm_kern.h"
#include "suite_main.h"

/* One dtype per element size the kernels move. */
static const sm_dtype size_types[] = {SM_U8, SM_BOOL, SM_I32, SM_F32, SM_I64, SM_F64, SM_F16};
#define NSIZES 7

static void *rand_bytes(int64_t n, size_t e)
{
    size_t len = n > 0 ? (size_t)n * e : 1;
    uint8_t *p = malloc(len);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(rnd() >> 56);
    if (e == 1) /* keep bools 0/1-agnostic: the kernels copy bytes anyway */
        for (size_t i = 0; i < len; i++)
            p[i] &= 1;
    return p;
}

static void *alloc_out(const sm_shape *s, size_t e)
{
    int64_t n = numel(s);
    void *p = malloc(n > 0 ? (size_t)n * e : 1);
    memset(p, 0xAB, n > 0 ? (size_t)n * e : 1);
    return p;
}

/* Element k of out equals element j of x (j < 0: zero). */
static void ck_elem(const void *out, int64_t k, const void *x, int64_t j, size_t e,
                    const char *what)
{
    static const uint8_t zero[8];
    const void *want = j < 0 ? (const void *)zero : (const char *)x + j * (int64_t)e;
    ck_assert_msg(!memcmp((const char *)out + k * (int64_t)e, want, e), "%s: element %lld", what,
                  (long long)k);
}

/* ---- reshape, transpose --------------------------------------------------------------------- */

START_TEST(test_transpose_table)
{
    struct {
        sm_shape s;
        int perm[SM_MAX_RANK];
    } cases[] = {
        {shp(3, 2, 3, 4), {0, 1, 2}},
        {shp(3, 2, 3, 4), {0, 2, 1}},
        {shp(3, 2, 3, 4), {1, 0, 2}},
        {shp(3, 2, 3, 4), {1, 2, 0}},
        {shp(3, 2, 3, 4), {2, 0, 1}},
        {shp(3, 2, 3, 4), {2, 1, 0}},
        {shp(4, 3, 1, 4, 2), {3, 0, 2, 1}},
        {shp(2, 0, 3), {1, 0}},
        {shp(0), {0}},
        {shp(2, 33, 65), {1, 0}},
        {shp(1, 7), {0}},
    };
    for (int ci = 0; ci < 11; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            sm_shape xs = cases[ci].s, os = {.rank = xs.rank};
            for (int i = 0; i < xs.rank; i++)
                os.dims[i] = xs.dims[cases[ci].perm[i]];
            void *x = rand_bytes(numel(&xs), e), *o = alloc_out(&os, e);
            ck_assert_int_eq(sm_kern_transpose(size_types[ti], x, &xs, cases[ci].perm, o, NULL, 0),
                             SM_OK);
            int64_t oi[SM_MAX_RANK], xi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                for (int i = 0; i < xs.rank; i++)
                    xi[cases[ci].perm[i]] = oi[i];
                ck_elem(o, k, x, ravel(xi, &xs), e, "transpose");
            }
            free(x);
            free(o);
        }
    char err[256];
    sm_shape s = shp(2, 2, 3);
    int bad[] = {0, 0};
    float x[6], o[6];
    ck_assert_int_eq(sm_kern_transpose(SM_F32, x, &s, bad, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,3]"));
    int ok[] = {1, 0};
    ck_assert_int_eq(sm_kern_transpose((sm_dtype)-1, x, &s, ok, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    /* reshape is a copy with a count check */
    sm_shape r = shp(3, 3, 1, 2), bad_r = shp(1, 5);
    float y[6] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(sm_kern_reshape(SM_F32, y, &s, &r, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, y, sizeof y));
    ck_assert_int_eq(sm_kern_reshape(SM_F32, y, &s, &bad_r, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[5]"));
}
END_TEST

/* ---- slice, broadcast_to, pad --------------------------------------------------------------- */

START_TEST(test_slice_table)
{
    struct {
        sm_shape s;
        int64_t start[3], limit[3], step[3];
        int strided;
    } cases[] = {
        {shp(3, 5, 6, 7), {1, 0, 2}, {4, 6, 7}, {1, 2, 3}, 1},
        {shp(3, 5, 6, 7), {1, 0, 2}, {4, 6, 7}, {1, 1, 1}, 0},
        {shp(3, 5, 6, 7), {0, 3, 0}, {5, 3, 7}, {1, 1, 1}, 0},
        {shp(2, 4, 40), {1, 3}, {3, 39}, {2, 5}, 1},
        {shp(1, 9), {8}, {9}, {4}, 1},
        {shp(0), {0}, {0}, {0}, 0},
    };
    for (int ci = 0; ci < 6; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            sm_shape xs = cases[ci].s, os = {.rank = xs.rank};
            const int64_t *st = cases[ci].step;
            for (int d = 0; d < xs.rank; d++)
                os.dims[d] = (cases[ci].limit[d] - cases[ci].start[d] + st[d] - 1) / st[d];
            void *x = rand_bytes(numel(&xs), e), *o = alloc_out(&os, e);
            ck_assert_int_eq(sm_kern_slice(size_types[ti], x, &xs, cases[ci].start, cases[ci].limit,
                                           cases[ci].strided ? st : NULL, o, NULL, 0),
                             SM_OK);
            int64_t oi[SM_MAX_RANK], xi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                for (int d = 0; d < xs.rank; d++)
                    xi[d] = cases[ci].start[d] + oi[d] * st[d];
                ck_elem(o, k, x, ravel(xi, &xs), e, "slice");
            }
            free(x);
            free(o);
        }
    char err[256];
    sm_shape s = shp(2, 4, 5);
    int64_t a[] = {0, 0}, b[] = {4, 6}, c[] = {3, 1}, d[] = {1, 1};
    float x[20], o[20];
    ck_assert_int_eq(sm_kern_slice(SM_F32, x, &s, a, b, NULL, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[4,5]"));
    ck_assert_int_eq(sm_kern_slice(SM_F32, x, &s, c, d, NULL, o, err, sizeof err), SM_EINVAL);
    int64_t zero[] = {0, 0};
    ck_assert_int_eq(sm_kern_slice(SM_F32, x, &s, a, d, zero, o, err, sizeof err), SM_EINVAL);
}
END_TEST

START_TEST(test_broadcast_pad)
{
    struct {
        sm_shape x, o;
    } bc[] = {
        {shp(2, 3, 1), shp(3, 2, 3, 4)},     {shp(0), shp(2, 2, 2)},
        {shp(1, 4), shp(2, 3, 4)},           {shp(1, 1), shp(1, 0)},
        {shp(3, 1, 3, 1), shp(3, 5, 3, 17)},
    };
    for (int ci = 0; ci < 5; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            sm_shape xs = bc[ci].x, os = bc[ci].o;
            void *x = rand_bytes(numel(&xs), e), *o = alloc_out(&os, e);
            ck_assert_int_eq(sm_kern_broadcast_to(size_types[ti], x, &xs, &os, o, NULL, 0), SM_OK);
            int64_t oi[SM_MAX_RANK], xi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                for (int d = 0; d < xs.rank; d++)
                    xi[d] = xs.dims[d] == 1 ? 0 : oi[d + os.rank - xs.rank];
                ck_elem(o, k, x, ravel(xi, &xs), e, "broadcast_to");
            }
            free(x);
            free(o);
        }
    struct {
        sm_shape x;
        int64_t lo[3], hi[3];
    } pc[] = {
        {shp(2, 2, 3), {1, 0}, {2, 3}},
        {shp(0), {0}, {0}},
        {shp(2, 0, 2), {1, 1}, {0, 0}},
        {shp(3, 2, 1, 20), {0, 2, 1}, {1, 0, 5}},
    };
    for (int ci = 0; ci < 4; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            sm_shape xs = pc[ci].x, os = {.rank = xs.rank};
            for (int d = 0; d < xs.rank; d++)
                os.dims[d] = xs.dims[d] + pc[ci].lo[d] + pc[ci].hi[d];
            void *x = rand_bytes(numel(&xs), e), *o = alloc_out(&os, e);
            ck_assert_int_eq(sm_kern_pad(size_types[ti], x, &xs, pc[ci].lo, pc[ci].hi, o, NULL, 0),
                             SM_OK);
            int64_t oi[SM_MAX_RANK], xi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                int in = 1;
                for (int d = 0; d < xs.rank; d++) {
                    xi[d] = oi[d] - pc[ci].lo[d];
                    in = in && xi[d] >= 0 && xi[d] < xs.dims[d];
                }
                ck_elem(o, k, x, in ? ravel(xi, &xs) : -1, e, "pad");
            }
            free(x);
            free(o);
        }
    char err[256];
    sm_shape a = shp(1, 3), b = shp(1, 4), c = shp(2, 2, 3);
    float x[24], o[24];
    ck_assert_int_eq(sm_kern_broadcast_to(SM_F32, x, &a, &b, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[3]"));
    ck_assert_ptr_nonnull(strstr(err, "[4]"));
    ck_assert_int_eq(sm_kern_broadcast_to(SM_F32, x, &c, &a, o, err, sizeof err), SM_EINVAL);
    int64_t lo[] = {-1}, hi[] = {0};
    ck_assert_int_eq(sm_kern_pad(SM_F32, x, &a, lo, hi, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[3]"));
}
END_TEST

/* ---- concatenate, tile ---------------------------------------------------------------------- */

START_TEST(test_concatenate_tile)
{
    struct {
        int n, axis;
        sm_shape s[3];
    } cc[] = {
        {2, 0, {shp(2, 2, 3), shp(2, 4, 3)}},
        {3, 1, {shp(2, 2, 3), shp(2, 2, 1), shp(2, 2, 2)}},
        {3, -1, {shp(3, 2, 2, 3), shp(3, 2, 2, 0), shp(3, 2, 2, 5)}},
        {1, 0, {shp(1, 5)}},
        {2, 0, {shp(1, 0), shp(1, 3)}},
    };
    for (int ci = 0; ci < 5; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            int n = cc[ci].n, ax = cc[ci].axis < 0 ? cc[ci].axis + cc[ci].s[0].rank : cc[ci].axis;
            const void *xs[3];
            sm_shape os = cc[ci].s[0];
            for (int i = 0; i < n; i++) {
                xs[i] = rand_bytes(numel(&cc[ci].s[i]), e);
                if (i)
                    os.dims[ax] += cc[ci].s[i].dims[ax];
            }
            void *o = alloc_out(&os, e);
            ck_assert_int_eq(
                sm_kern_concatenate(size_types[ti], n, xs, cc[ci].s, cc[ci].axis, o, NULL, 0),
                SM_OK);
            int64_t oi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                int i = 0;
                while (oi[ax] >= cc[ci].s[i].dims[ax])
                    oi[ax] -= cc[ci].s[i++].dims[ax];
                ck_elem(o, k, xs[i], ravel(oi, &cc[ci].s[i]), e, "concatenate");
            }
            for (int i = 0; i < n; i++)
                free((void *)xs[i]);
            free(o);
        }
    struct {
        sm_shape x;
        int nreps;
        int64_t reps[4];
    } tc[] = {
        {shp(2, 2, 3), 2, {2, 2}}, {shp(1, 3), 3, {2, 1, 2}}, {shp(2, 2, 3), 1, {3}},
        {shp(2, 2, 3), 2, {0, 2}}, {shp(0), 2, {2, 3}},       {shp(3, 2, 1, 17), 3, {2, 3, 1}},
    };
    for (int ci = 0; ci < 6; ci++)
        for (int ti = 0; ti < NSIZES; ti++) {
            size_t e = esize(size_types[ti]);
            sm_shape xs = tc[ci].x, os;
            ck_assert_int_eq(sm_kern_tile_shape(&xs, tc[ci].reps, tc[ci].nreps, &os, NULL, 0),
                             SM_OK);
            void *x = rand_bytes(numel(&xs), e), *o = alloc_out(&os, e);
            ck_assert_int_eq(
                sm_kern_tile(size_types[ti], x, &xs, tc[ci].reps, tc[ci].nreps, o, NULL, 0), SM_OK);
            int64_t oi[SM_MAX_RANK], xi[SM_MAX_RANK];
            for (int64_t k = 0; k < numel(&os); k++) {
                unravel(k, &os, oi);
                for (int d = 0; d < xs.rank; d++)
                    xi[d] = oi[d + os.rank - xs.rank] % xs.dims[d];
                ck_elem(o, k, x, ravel(xi, &xs), e, "tile");
            }
            free(x);
            free(o);
        }
    sm_shape a = shp(2, 2, 3), b = shp(2, 3, 3), os;
    sm_shape pair[] = {a, b};
    float x[24], o[48];
    const void *xs[] = {x, x};
    char err[256];
    ck_assert_int_eq(sm_kern_concatenate(SM_F32, 2, xs, pair, 1, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,3]"));
    ck_assert_ptr_nonnull(strstr(err, "[3,3]"));
    ck_assert_int_eq(sm_kern_concatenate(SM_F32, 2, xs, pair, 2, o, err, sizeof err), SM_EINVAL);
    int64_t reps[] = {2, 2};
    ck_assert_int_eq(sm_kern_tile_shape(&a, reps, 2, &os, NULL, 0), SM_OK);
    ck_assert(os.rank == 2 && os.dims[0] == 4 && os.dims[1] == 6);
    int64_t neg[] = {-1};
    ck_assert_int_eq(sm_kern_tile(SM_F32, x, &a, neg, 1, o, err, sizeof err), SM_EINVAL);
}
END_TEST

/* ---- roll, dynamic slices ------------------------------------------------------------------- */

/* np.flip of [[0,1,2],[3,4,5]] along each axis, both, none; and of a
 * [2,2,3] array along its middle one. */
START_TEST(test_rev_values)
{
    int32_t x[12], o[12];
    for (int i = 0; i < 12; i++)
        x[i] = i;
    sm_shape m = shp(2, 2, 3);
    static const struct {
        int rev[2];
        int32_t want[6];
    } rc[] = {{{1, 0}, {3, 4, 5, 0, 1, 2}},
              {{0, 1}, {2, 1, 0, 5, 4, 3}},
              {{1, 1}, {5, 4, 3, 2, 1, 0}},
              {{0, 0}, {0, 1, 2, 3, 4, 5}}};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(sm_kern_rev(SM_I32, x, &m, rc[i].rev, o, NULL, 0), SM_OK);
        ck_assert_msg(!memcmp(o, rc[i].want, sizeof rc[i].want), "rev case %d", i);
    }
    sm_shape c = shp(3, 2, 2, 3);
    int mid[3] = {0, 1, 0};
    int32_t want[] = {3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8};
    ck_assert_int_eq(sm_kern_rev(SM_I32, x, &c, mid, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, want, sizeof want));
    sm_shape z = shp(2, 0, 3);
    ck_assert_int_eq(sm_kern_rev(SM_I32, x, &z, mid, o, NULL, 0), SM_OK);
}
END_TEST

START_TEST(test_roll_values)
{
    int32_t x[10], o[10];
    for (int i = 0; i < 10; i++)
        x[i] = i;
    sm_shape s = shp(1, 10);
    struct {
        int64_t shift;
        int32_t first3[3];
    } rc[] = {{2, {8, 9, 0}},  {-3, {3, 4, 5}},  {0, {0, 1, 2}},
              {12, {8, 9, 0}}, {-13, {3, 4, 5}}, {10, {0, 1, 2}}};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(sm_kern_roll(SM_I32, x, &s, rc[i].shift, 0, o, NULL, 0), SM_OK);
        ck_assert_msg(o[0] == rc[i].first3[0] && o[1] == rc[i].first3[1] && o[2] == rc[i].first3[2],
                      "roll %lld", (long long)rc[i].shift);
        for (int k = 0; k < 10; k++) /* out[(k + shift) mod n] = x[k] */
            ck_assert_int_eq(o[(((k + rc[i].shift) % 10) + 10) % 10], x[k]);
    }
    /* np.roll([[0,1,2],[3,4,5]], 1, axis=1) and the flattened roll */
    sm_shape m = shp(2, 2, 3);
    int32_t want1[] = {2, 0, 1, 5, 3, 4}, wantf[] = {5, 0, 1, 2, 3, 4},
            want0[] = {3, 4, 5, 0, 1, 2};
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &m, 1, 1, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, want1, sizeof want1));
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &m, -2, -1, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, want1, sizeof want1));
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &m, 1, SM_KERN_AXIS_NONE, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, wantf, sizeof wantf));
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &m, -1, 0, o, NULL, 0), SM_OK);
    ck_assert(!memcmp(o, want0, sizeof want0));
    sm_shape z = shp(2, 0, 3);
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &z, 5, 0, o, NULL, 0), SM_OK);
    char err[256];
    ck_assert_int_eq(sm_kern_roll(SM_I32, x, &m, 1, 2, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,3]"));
}
END_TEST

START_TEST(test_dynamic_slices)
{
    int32_t x[20], o[20];
    for (int i = 0; i < 20; i++)
        x[i] = i;
    sm_shape v = shp(1, 10);
    /* starts are clamped so the slice fits (XLA) */
    struct {
        int64_t start, size;
        int32_t first;
    } dc[] = {{8, 4, 6}, {-3, 2, 0}, {3, 3, 3}, {100, 10, 0}, {9, 0, 0}};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(
            sm_kern_dynamic_slice(SM_I32, x, &v, &dc[i].start, &dc[i].size, o, NULL, 0), SM_OK);
        for (int k = 0; k < dc[i].size; k++)
            ck_assert_int_eq(o[k], dc[i].first + k);
    }
    sm_shape m = shp(2, 4, 5);
    int64_t st[] = {3, -1}, sz[] = {2, 3};
    ck_assert_int_eq(sm_kern_dynamic_slice(SM_I32, x, &m, st, sz, o, NULL, 0), SM_OK);
    int32_t want[] = {10, 11, 12, 15, 16, 17};
    ck_assert(!memcmp(o, want, sizeof want));
    char err[256];
    int64_t big[] = {5, 1};
    ck_assert_int_eq(sm_kern_dynamic_slice(SM_I32, x, &m, st, big, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[4,5]"));
    /* dynamic_update_slice, out of place and in place */
    int32_t z[5] = {0}, u[] = {1, 2}, w[5];
    sm_shape s5 = shp(1, 5), s2 = shp(1, 2);
    int64_t s4 = 4;
    ck_assert_int_eq(sm_kern_dynamic_update_slice(SM_I32, z, &s5, u, &s2, &s4, w, NULL, 0), SM_OK);
    int32_t want5[] = {0, 0, 0, 1, 2};
    ck_assert(!memcmp(w, want5, sizeof want5));
    ck_assert(z[3] == 0);
    int64_t sneg = -7;
    ck_assert_int_eq(sm_kern_dynamic_update_slice(SM_I32, z, &s5, u, &s2, &sneg, z, NULL, 0),
                     SM_OK);
    ck_assert(z[0] == 1 && z[1] == 2 && z[2] == 0);
    int32_t grid[20] = {0}, up[] = {7, 8, 9, 10};
    sm_shape g = shp(2, 4, 5), us = shp(2, 2, 2);
    int64_t gs[] = {1, 4};
    ck_assert_int_eq(sm_kern_dynamic_update_slice(SM_I32, grid, &g, up, &us, gs, grid, NULL, 0),
                     SM_OK);
    ck_assert(grid[5 + 3] == 7 && grid[5 + 4] == 8 && grid[10 + 3] == 9 && grid[10 + 4] == 10);
    sm_shape bad = shp(1, 2);
    ck_assert_int_eq(
        sm_kern_dynamic_update_slice(SM_I32, grid, &g, up, &bad, gs, grid, err, sizeof err),
        SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[4,5]"));
    sm_shape toolong = shp(2, 5, 1);
    ck_assert_int_eq(
        sm_kern_dynamic_update_slice(SM_I32, grid, &g, up, &toolong, gs, grid, err, sizeof err),
        SM_EINVAL);
}
END_TEST

/* ---- empty arrays have NULL data (sm_array) ------------------------------------------------- */

/* take and take_along_axis against index arithmetic on random data and
 * indices (negative and out of range too), in the three modes. */
START_TEST(test_gathers)
{
    sm_kern_gather_mode modes[] = {SM_KERN_GATHER_FILL, SM_KERN_GATHER_CLIP, SM_KERN_GATHER_WRAP};
    sm_shape xs = shp(3, 3, 5, 4), is = shp(2, 2, 3);
    int64_t nx = numel(&xs), idx[24];
    int32_t *x = malloc((size_t)nx * 4);
    for (int64_t k = 0; k < nx; k++)
        x[k] = (int32_t)(k * 7 + 1);
    for (int m = 0; m < 3; m++)
        for (int axis = 0; axis < 3; axis++) {
            int64_t n = xs.dims[axis];
            for (int k = 0; k < 6; k++)
                idx[k] = (int64_t)(rnd() % (uint64_t)(3 * n)) - n - 2; /* [-n-2, 2n-3] */
            sm_shape os = {0};
            for (int d = 0; d < axis; d++)
                os.dims[os.rank++] = xs.dims[d];
            for (int d = 0; d < is.rank; d++)
                os.dims[os.rank++] = is.dims[d];
            for (int d = axis + 1; d < 3; d++)
                os.dims[os.rank++] = xs.dims[d];
            int64_t no = numel(&os);
            int32_t *o = malloc((size_t)no * 4);
            ck_assert_int_eq(sm_kern_take(SM_I32, x, &xs, axis, idx, &is, modes[m], o, NULL, 0),
                             SM_OK);
            int64_t oi[SM_MAX_RANK];
            for (int64_t q = 0; q < no; q++) {
                unravel(q, &os, oi);
                int64_t j = oi[axis] * 3 + oi[axis + 1], i = idx[j], src[3];
                int64_t pos = m == 2 ? ((i % n) + n) % n : i < 0 ? i + n : i;
                if (m == 1)
                    pos = pos < 0 ? 0 : pos >= n ? n - 1 : pos;
                for (int d = 0; d < 3; d++) /* the indices' 2 dims stand at axis */
                    src[d] = d == axis ? pos : d < axis ? oi[d] : oi[d + 1];
                int32_t want = pos < 0 || pos >= n
                                   ? INT32_MIN
                                   : x[(src[0] * xs.dims[1] + src[1]) * xs.dims[2] + src[2]];
                ck_assert_msg(o[q] == want, "take mode %d axis %d [%lld]: %d, want %d", m, axis,
                              (long long)q, o[q], want);
            }
            free(o);
            /* take_along_axis: indices of x's rank, broadcast on one dimension */
            sm_shape ts = xs;
            ts.dims[axis] = 2;
            ts.dims[(axis + 1) % 3] = 1;
            int64_t nt = numel(&ts), ti[64];
            for (int64_t k = 0; k < nt; k++)
                ti[k] = (int64_t)(rnd() % (uint64_t)(3 * n)) - n - 2;
            sm_shape as = ts;
            as.dims[(axis + 1) % 3] = xs.dims[(axis + 1) % 3];
            int64_t na = numel(&as);
            int32_t *oa = malloc((size_t)na * 4);
            ck_assert_int_eq(
                sm_kern_take_along_axis(SM_I32, x, &xs, axis, ti, &ts, modes[m], oa, NULL, 0),
                SM_OK);
            for (int64_t q = 0; q < na; q++) {
                unravel(q, &as, oi);
                int64_t tq[3];
                for (int d = 0; d < 3; d++)
                    tq[d] = ts.dims[d] == 1 ? 0 : oi[d];
                int64_t i = ti[(tq[0] * ts.dims[1] + tq[1]) * ts.dims[2] + tq[2]];
                int64_t pos = m == 2 ? ((i % n) + n) % n : i < 0 ? i + n : i;
                if (m == 1)
                    pos = pos < 0 ? 0 : pos >= n ? n - 1 : pos;
                int64_t src[3] = {oi[0], oi[1], oi[2]};
                src[axis] = pos;
                int32_t want = pos < 0 || pos >= n
                                   ? INT32_MIN
                                   : x[(src[0] * xs.dims[1] + src[1]) * xs.dims[2] + src[2]];
                ck_assert_msg(oa[q] == want, "take_along_axis mode %d axis %d [%lld]: %d, want %d",
                              m, axis, (long long)q, oa[q], want);
            }
            free(oa);
        }
    /* fill values by dtype */
    float f[2] = {1, 2}, fo[1];
    int64_t bad = 5;
    sm_shape s2 = shp(1, 2), s1 = shp(1, 1);
    ck_assert_int_eq(sm_kern_take(SM_F32, f, &s2, 0, &bad, &s1, SM_KERN_GATHER_FILL, fo, NULL, 0),
                     SM_OK);
    ck_assert(isnan(fo[0]));
    uint8_t b[2] = {0, 0}, bo[1];
    ck_assert_int_eq(sm_kern_take(SM_BOOL, b, &s2, 0, &bad, &s1, SM_KERN_GATHER_FILL, bo, NULL, 0),
                     SM_OK);
    ck_assert_int_eq(bo[0], 1);
    char err[256];
    sm_shape bad_is = shp(2, 1, 1);
    ck_assert_int_eq(sm_kern_take_along_axis(SM_F32, f, &s2, 0, &bad, &bad_is, SM_KERN_GATHER_FILL,
                                             fo, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "same rank"));
    free(x);
}
END_TEST

/* The scatters against values worked by hand (numpy's x[idx] = u for set,
 * np.add.at / np.multiply.at / np.minimum.at / np.maximum.at for the
 * others): rows of 2, a negative index from the end, repeated indices in
 * order (the last set wins), out of range dropped; every dtype of set,
 * NaN through min and max, and a dtype an op refuses. */
START_TEST(test_scatters)
{
    static const int64_t ids[] = {1, -1, 1, 7, -5, 0};
    /* operand 3 rows x 2, updates 6 rows x 2 */
    static const float x[6] = {1, 2, 3, 4, 5, 6},
                       u[12] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
    static const struct {
        int set;
        sm_kern_binary_op op;
        float want[6];
    } cases[] = {
        {1, SM_KERN_ADD, {110, 120, 50, 60, 30, 40}},
        {0, SM_KERN_ADD, {111, 122, 63, 84, 35, 46}},
        {0, SM_KERN_MULTIPLY, {110, 240, 3 * 10 * 50, 4 * 20 * 60, 5 * 30, 6 * 40}},
        {0, SM_KERN_MINIMUM, {1, 2, 3, 4, 5, 6}},
        {0, SM_KERN_MAXIMUM, {110, 120, 50, 60, 30, 40}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float o[6];
        memcpy(o, x, sizeof o);
        char err[256] = "";
        ck_assert_msg(sm_kern_scatter(cases[c].set, cases[c].op, SM_F32, o, 3, 2, ids, 6, u, err,
                                      sizeof err) == SM_OK,
                      "%s", err);
        for (int k = 0; k < 6; k++)
            ck_assert_msg(o[k] == cases[c].want[k], "case %zu [%d]: %g, want %g", c, k, o[k],
                          cases[c].want[k]);
    }
    /* set moves any dtype; ints wrap in add */
    int16_t h[4] = {1, 2, 3, 4}, hu[2] = {-7, 9};
    int64_t hid[2] = {3, 0};
    ck_assert_int_eq(sm_kern_scatter(1, SM_KERN_ADD, SM_BF16, h, 4, 1, hid, 2, hu, NULL, 0), SM_OK);
    ck_assert(h[0] == 9 && h[1] == 2 && h[2] == 3 && h[3] == -7);
    int32_t w[1] = {INT32_MAX}, wu[1] = {1};
    int64_t z[1] = {0};
    ck_assert_int_eq(sm_kern_scatter(0, SM_KERN_ADD, SM_I32, w, 1, 1, z, 1, wu, NULL, 0), SM_OK);
    ck_assert_int_eq(w[0], INT32_MIN);
    double d[2] = {1, NAN}, du[2] = {NAN, 5};
    int64_t dz[2] = {0, 1};
    ck_assert_int_eq(sm_kern_scatter(0, SM_KERN_MAXIMUM, SM_F64, d, 2, 1, dz, 2, du, NULL, 0),
                     SM_OK);
    ck_assert(isnan(d[0]) && isnan(d[1]));
    /* no rows, or no indices: nothing happens */
    ck_assert_int_eq(sm_kern_scatter(0, SM_KERN_ADD, SM_F64, d, 0, 1, dz, 2, du, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_scatter(1, SM_KERN_ADD, SM_F64, d, 2, 1, dz, 0, du, NULL, 0), SM_OK);
    unsigned char b[1] = {200}, bu[1] = {2};
    char err[256] = "";
    /* uint8 wraps modulo 256, as JAX's; bool has no subtraction */
    ck_assert_int_eq(
        sm_kern_scatter(0, SM_KERN_MULTIPLY, SM_U8, b, 1, 1, z, 1, bu, err, sizeof err), SM_OK);
    ck_assert_int_eq(b[0], 144);
    ck_assert_int_eq(
        sm_kern_scatter(0, SM_KERN_SUBTRACT, SM_BOOL, b, 1, 1, z, 1, bu, err, sizeof err),
        SM_EUNSUPPORTED);
    ck_assert_int_eq(sm_kern_scatter(0, SM_KERN_ADD, SM_F32, b, -1, 1, z, 1, bu, err, sizeof err),
                     SM_EINVAL);
}
END_TEST

START_TEST(test_empty_null_buffers)
{
    sm_shape e = shp(2, 0, 3), e2 = shp(2, 3, 0), z = shp(1, 3), k0a = shp(2, 4, 0),
             k0b = shp(2, 0, 3), eo;
    int perm[] = {1, 0}, ax = 0;
    int64_t st[] = {0, 0}, lim[] = {0, 3}, lo[] = {0, 0}, hi[] = {0, 0}, reps[] = {2, 2};
    float out[12];
    ck_assert_int_eq(sm_kern_transpose(SM_F32, NULL, &e, perm, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_slice(SM_F32, NULL, &e, st, lim, NULL, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_pad(SM_F32, NULL, &e, lo, hi, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_tile(SM_F32, NULL, &e, reps, 2, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_roll(SM_F32, NULL, &e, 1, 1, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_reshape(SM_F32, NULL, &e, &e2, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_broadcast_to(SM_F32, NULL, &z, &e, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_unary(SM_KERN_EXP, SM_F32, &e, NULL, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_binary(SM_KERN_ADD, SM_F32, NULL, &e, out, &z, NULL, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_astype(SM_F32, NULL, SM_I32, NULL, 0, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_kern_reduce(SM_KERN_SUM, SM_F32, NULL, &e, &ax, 1, 0, out, NULL, 0), SM_OK);
    ck_assert(out[0] == 0 && out[2] == 0);
    const void *parts[] = {NULL, out};
    sm_shape ps[] = {e, shp(2, 1, 3)};
    ck_assert_int_eq(sm_kern_concatenate(SM_F32, 2, parts, ps, 0, out + 6, NULL, 0), SM_OK);
    /* k = 0: the product is all zeros */
    ck_assert_int_eq(sm_kern_matmul(SM_F32, NULL, &k0a, 0, NULL, &k0b, 0, out, NULL, 0), SM_OK);
    for (int i = 0; i < 12; i++)
        ck_assert(out[i] == 0.0f);
    ck_assert_int_eq(sm_kern_einsum_shape("ij,jk->ik", &k0a, &k0b, &eo, NULL, 0), SM_OK);
    double dout[12];
    ck_assert_int_eq(sm_kern_einsum("ij,jk->ik", SM_F64, NULL, &k0a, NULL, &k0b, dout, NULL, 0),
                     SM_OK);
    ck_assert(dout[0] == 0 && dout[11] == 0);
    ck_assert_int_eq(sm_kern_einsum("ij,jk->ki", SM_I32, NULL, &k0a, NULL, &k0b, out, NULL, 0),
                     SM_OK);
    char err[256] = "";
    ck_assert_msg(sm_kern_matmul(SM_F32, NULL, &e, 0, NULL, &z, 0, NULL, err, sizeof err) == SM_OK,
                  "%s", err);
}
END_TEST

/* ---- OpenBLAS setup ------------------------------------------------------------------------- */

START_TEST(test_coretype)
{
    const char *best = sm_kern_best_coretype();
    ck_assert(best == NULL || !strcmp(best, "Cooperlake") || !strcmp(best, "SkylakeX") ||
              !strcmp(best, "Haswell"));
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        ck_assert(best && strcmp(best, "Haswell") != 0);
    ck_assert_ptr_nonnull(sm_kern_corename());
    /* never re-executes when the variable is set or the marker is present
     * (this runs in Check's forked child, so the environment is private) */
    char *argv[] = {"test_kern_shape", NULL};
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    ck_assert_int_eq(sm_kern_coretype_setup(1, argv), 0);
    unsetenv("OPENBLAS_CORETYPE");
    setenv("SM_KERN_REEXEC", "1", 1);
    ck_assert_int_eq(sm_kern_coretype_setup(1, argv), 0);
    ck_assert_ptr_null(getenv("OPENBLAS_CORETYPE"));
    sm_kern_set_threads(1);
    ck_assert_int_eq(openblas_get_num_threads(), 1);
}
END_TEST

/* Runs this binary as a worker would start: setup first, then report. */
static int coretype_probe(int argc, char **argv)
{
    sm_kern_coretype_setup(argc, argv);
    const char *env = getenv("OPENBLAS_CORETYPE"), *mark = getenv("SM_KERN_REEXEC");
    printf("core=%s env=%s marker=%s\n", sm_kern_corename(), env ? env : "-", mark ? mark : "-");
    return 0;
}

START_TEST(test_coretype_reexec)
{
    char self[4096], cmd[4200], line[256] = "";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(n > 0);
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE -u SM_KERN_REEXEC '%s' --coretype-probe",
             self);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    char core[64], env[64], mark[64];
    ck_assert_int_eq(sscanf(line, "core=%63s env=%63s marker=%63s", core, env, mark), 3);
    const char *best = sm_kern_best_coretype();
    printf("info: coretype probe: %s", line);
    if (!strcmp(mark, "1")) { /* re-executed once with the best core type */
        ck_assert_ptr_nonnull(best);
        ck_assert_str_eq(env, best);
        ck_assert_int_eq(strcasecmp(core, best), 0);
    } else { /* nothing to gain: already AVX-512, already the best, or unknown CPU */
        ck_assert_str_eq(env, "-");
        ck_assert(!best || !strcasecmp(core, best) || !strcasecmp(core, "SkylakeX") ||
                  !strcasecmp(core, "Cooperlake") || !strcasecmp(core, "SapphireRapids"));
    }
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--coretype-probe"))
        return coretype_probe(argc, argv);
    return kt_run(SUITE_CASE(suite_create("kern_shape"), "shape", 60, NULL, {test_transpose_table},
                             {test_slice_table}, {test_broadcast_pad}, {test_concatenate_tile},
                             {test_roll_values}, {test_rev_values}, {test_dynamic_slices},
                             {test_gathers}, {test_scatters}, {test_empty_null_buffers},
                             {test_coretype}, {test_coretype_reexec}));
}
