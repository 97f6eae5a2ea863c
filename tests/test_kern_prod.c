/* Check suite for common/kern, part 3: products. matmul (every transpose
 * combination, batch broadcasting, vectors, empty dims), dot and two-operand
 * einsum against naive loops over index tuples, for f32 f64 i32 i64; which
 * einsum specs run without operand copies; error paths. Prints the sgemm
 * GFLOP/s at 1024 as an informational line. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KT_RNG_SEED 0x9E3779B97F4A7C15ull
#include "kern_testutil.h"
#include "sm_kern.h"
#include "sm_kern_impl.h"
#include "suite_main.h"

static const sm_dtype prod_types[] = {SM_F32, SM_F64, SM_I32, SM_I64};

static double getd(sm_dtype t, const void *p, int64_t k)
{
    switch (t) {
    case SM_F32:
        return ((const float *)p)[k];
    case SM_F64:
        return ((const double *)p)[k];
    case SM_I32:
        return ((const int32_t *)p)[k];
    default:
        return (double)((const int64_t *)p)[k];
    }
}

static int64_t geti(sm_dtype t, const void *p, int64_t k)
{
    return t == SM_I32 ? ((const int32_t *)p)[k] : ((const int64_t *)p)[k];
}

/* Random data: floats in [-1, 1], integers in [-5, 5]. */
static void *rand_small(sm_dtype t, int64_t n)
{
    void *p = malloc(n > 0 ? (size_t)n * esize(t) : 1);
    for (int64_t k = 0; k < n; k++) {
        double f = 2.0 * (double)(rnd() >> 11) / 9007199254740992.0 - 1.0;
        int64_t i = (int64_t)(rnd() % 11) - 5;
        switch (t) {
        case SM_F32:
            ((float *)p)[k] = (float)f;
            break;
        case SM_F64:
            ((double *)p)[k] = f;
            break;
        case SM_I32:
            ((int32_t *)p)[k] = (int32_t)i;
            break;
        default:
            ((int64_t *)p)[k] = i;
            break;
        }
    }
    return p;
}

/* Compares out (dtype t) with reference sums (floats) or wrapped integer
 * sums; k is the contraction length for the float tolerance. */
static void check_out(sm_dtype t, const void *out, const double *rf, const uint64_t *ri, int64_t n,
                      int64_t k, const char *what)
{
    double tol = (t == SM_F32 ? 1e-5 : 1e-13) * (double)(k + 1);
    for (int64_t i = 0; i < n; i++) {
        if (is_float(t)) {
            double g = getd(t, out, i);
            ck_assert_msg(fabs(g - rf[i]) <= tol, "%s %s [%lld]: %g vs %g", what, sm_dtype_name(t),
                          (long long)i, g, rf[i]);
        } else {
            int64_t want = t == SM_I32 ? (int32_t)(uint32_t)ri[i] : (int64_t)ri[i];
            ck_assert_msg(geti(t, out, i) == want, "%s %s [%lld]", what, sm_dtype_name(t),
                          (long long)i);
        }
    }
}

/* The buffers of one product of dtype t: random small operands a and b,
 * the output o of no elements, and its reference, rf for floats or ri for
 * integers (zeroed). */
typedef struct {
    void *a, *b, *o;
    double *rf;
    uint64_t *ri;
    int64_t no;
} prod_bufs;

static prod_bufs bufs_make(sm_dtype t, const sm_shape *as, const sm_shape *bs, const sm_shape *os)
{
    prod_bufs p;
    p.a = rand_small(t, numel(as));
    p.b = rand_small(t, numel(bs));
    p.no = numel(os);
    p.o = malloc(p.no ? (size_t)p.no * esize(t) : 1);
    p.rf = calloc((size_t)p.no + 1, sizeof *p.rf);
    p.ri = calloc((size_t)p.no + 1, sizeof *p.ri);
    return p;
}

/* check_out of p's output against its reference (sums of k products),
 * then frees p's buffers. */
static void bufs_check_free(sm_dtype t, prod_bufs *p, int64_t k, const char *what)
{
    check_out(t, p->o, p->rf, p->ri, p->no, k, what);
    free(p->a);
    free(p->b);
    free(p->o);
    free(p->rf);
    free(p->ri);
}

/* ---- matmul --------------------------------------------------------------------------------- */

typedef struct {
    sm_shape a;
    int ta;
    sm_shape b;
    int tb;
} mm_case;

static mm_case mm_cases(int i)
{
    mm_case c[] = {
        {shp(2, 4, 5), 0, shp(2, 5, 3), 0},
        {shp(2, 5, 4), 1, shp(2, 5, 3), 0},
        {shp(2, 4, 5), 0, shp(2, 3, 5), 1},
        {shp(2, 5, 4), 1, shp(2, 3, 5), 1},
        {shp(3, 2, 4, 5), 0, shp(2, 5, 3), 0},
        {shp(3, 2, 5, 4), 1, shp(2, 5, 3), 0},
        {shp(3, 2, 4, 5), 0, shp(3, 2, 5, 3), 0},
        {shp(3, 2, 4, 5), 0, shp(3, 2, 3, 5), 1},
        {shp(4, 2, 1, 4, 5), 0, shp(3, 3, 5, 6), 0},
        {shp(4, 2, 1, 5, 4), 1, shp(3, 3, 6, 5), 1},
        {shp(1, 5), 0, shp(2, 5, 3), 0},
        {shp(2, 4, 5), 0, shp(1, 5), 0},
        {shp(1, 5), 1, shp(1, 5), 1},
        {shp(3, 3, 4, 5), 0, shp(1, 5), 0},
        {shp(1, 5), 0, shp(3, 2, 5, 3), 0},
        {shp(2, 0, 5), 0, shp(2, 5, 3), 0},
        {shp(2, 4, 0), 0, shp(2, 0, 3), 0},
        {shp(3, 0, 4, 5), 0, shp(2, 5, 3), 0},
        {shp(2, 1, 1), 0, shp(2, 1, 1), 1},
        {shp(2, 33, 17), 0, shp(2, 17, 29), 0},
        {shp(3, 2, 1, 5), 0, shp(2, 5, 3), 0},
    };
    return c[i];
}
#define NMM 21

/* Logical A[i][l] of case c at out batch index bidx (rank nb). */
static int64_t mm_index(const sm_shape *s, int tr, const int64_t *bidx, int nb, int64_t r,
                        int64_t col, int is_a)
{
    if (s->rank == 1)
        return is_a ? col : r;
    int64_t k = 0;
    int sb = s->rank - 2;
    for (int d = 0; d < sb; d++) {
        int64_t i = s->dims[d] == 1 ? 0 : bidx[d + nb - sb];
        k = k * s->dims[d] + i;
    }
    int64_t rows = s->dims[sb], cols = s->dims[sb + 1];
    (void)rows;
    return tr ? k * rows * cols + col * cols + r : k * rows * cols + r * cols + col;
}

START_TEST(test_matmul_table)
{
    for (int ti = 0; ti < 4; ti++) {
        sm_dtype t = prod_types[ti];
        mm_case c = mm_cases(_i);
        sm_shape os;
        char err[256] = "";
        ck_assert_msg(sm_kern_matmul_shape(&c.a, c.ta, &c.b, c.tb, &os, err, sizeof err) == SM_OK,
                      "%s", err);
        prod_bufs pb = bufs_make(t, &c.a, &c.b, &os);
        void *a = pb.a, *b = pb.b;
        double *rf = pb.rf;
        uint64_t *ri = pb.ri;
        ck_assert_msg(sm_kern_matmul(t, a, &c.a, c.ta, b, &c.b, c.tb, pb.o, err, sizeof err) ==
                          SM_OK,
                      "case %d: %s", _i, err);
        /* reference */
        int ra = c.a.rank, rb = c.b.rank;
        int64_t K = ra == 1 ? c.a.dims[0] : c.ta ? c.a.dims[ra - 2] : c.a.dims[ra - 1];
        int nb = os.rank - (ra > 1) - (rb > 1);
        int64_t idx[SM_MAX_RANK];
        for (int64_t q = 0; q < pb.no; q++) {
            unravel(q, &os, idx);
            int64_t i = ra > 1 ? idx[nb] : 0, j = rb > 1 ? idx[os.rank - 1] : 0;
            for (int64_t l = 0; l < K; l++) {
                int64_t ia = mm_index(&c.a, c.ta, idx, nb, i, l, 1);
                int64_t ib = mm_index(&c.b, c.tb, idx, nb, l, j, 0);
                if (is_float(t))
                    rf[q] += getd(t, a, ia) * getd(t, b, ib);
                else
                    ri[q] += (uint64_t)geti(t, a, ia) * (uint64_t)geti(t, b, ib);
            }
        }
        char what[32];
        snprintf(what, sizeof what, "matmul case %d", _i);
        bufs_check_free(t, &pb, K, what);
    }
}
END_TEST

START_TEST(test_matmul_shapes_and_errors)
{
    sm_shape a = shp(3, 2, 4, 5), b = shp(2, 5, 3), os;
    ck_assert_int_eq(sm_kern_matmul_shape(&a, 0, &b, 0, &os, NULL, 0), SM_OK);
    ck_assert(os.rank == 3 && os.dims[0] == 2 && os.dims[1] == 4 && os.dims[2] == 3);
    sm_shape v = shp(1, 5);
    ck_assert_int_eq(sm_kern_matmul_shape(&v, 0, &v, 0, &os, NULL, 0), SM_OK);
    ck_assert_int_eq(os.rank, 0);
    char err[256];
    float x[64] = {0}, o[64];
    sm_shape bad = shp(2, 4, 3);
    ck_assert_int_eq(sm_kern_matmul(SM_F32, x, &a, 0, x, &bad, 0, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,4,5]"));
    ck_assert_ptr_nonnull(strstr(err, "[4,3]"));
    sm_shape ba = shp(3, 2, 4, 5), bb = shp(3, 3, 5, 4);
    ck_assert_int_eq(sm_kern_matmul(SM_F32, x, &ba, 0, x, &bb, 0, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "broadcast"));
    sm_shape sc = shp(0);
    ck_assert_int_eq(sm_kern_matmul(SM_F32, x, &sc, 0, x, &b, 0, o, err, sizeof err), SM_EINVAL);
    ck_assert_int_eq(sm_kern_matmul(SM_F16, x, &a, 0, x, &b, 0, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "f16"));
    ck_assert_int_eq(sm_kern_matmul(SM_BOOL, x, &a, 0, x, &b, 0, o, err, sizeof err),
                     SM_EUNSUPPORTED);
}
END_TEST

/* ---- einsum and dot ------------------------------------------------------------------------- */

static int64_t letter_size(char c, const char *over)
{
    for (const char *p = over; p && *p; p += 4)
        if (p[0] == c)
            return p[2] - '0';
    return 2 + (c * 7) % 5;
}

static sm_shape term_shape(const char *term, const char *over)
{
    sm_shape s = {.rank = (int)strlen(term)};
    for (int i = 0; i < s.rank; i++)
        s.dims[i] = letter_size(term[i], over);
    return s;
}

/* out[o] = sum over all letters of a[...] * b[...]. */
static void ref_einsum(sm_dtype t, const char *ta, const void *a, const char *tb, const void *b,
                       const char *to, const char *over, double *rf, uint64_t *ri)
{
    char letters[32] = "";
    int nl = 0;
    for (const char *p = ta; *p; p++)
        letters[nl++] = *p;
    for (const char *p = tb; *p; p++)
        if (!memchr(letters, *p, (size_t)nl))
            letters[nl++] = *p;
    sm_shape all = {.rank = nl};
    for (int i = 0; i < nl; i++)
        all.dims[i] = letter_size(letters[i], over);
    sm_shape as = term_shape(ta, over), bs = term_shape(tb, over), os = term_shape(to, over);
    int64_t idx[32], ia[SM_MAX_RANK], ib[SM_MAX_RANK], io[SM_MAX_RANK];
    int64_t n = numel(&all);
    for (int64_t q = 0; q < n; q++) {
        unravel(q, &all, idx);
        for (int i = 0; ta[i]; i++)
            ia[i] = idx[strchr(letters, ta[i]) - letters];
        for (int i = 0; tb[i]; i++)
            ib[i] = idx[strchr(letters, tb[i]) - letters];
        for (int i = 0; to[i]; i++)
            io[i] = idx[strchr(letters, to[i]) - letters];
        int64_t o = ravel(io, &os), pa = ravel(ia, &as), pb = ravel(ib, &bs);
        if (is_float(t))
            rf[o] += getd(t, a, pa) * getd(t, b, pb);
        else
            ri[o] += (uint64_t)geti(t, a, pa) * (uint64_t)geti(t, b, pb);
    }
}

typedef struct {
    const char *spec, *ta, *tb, *to;
    const char *over; /* "x=N," size overrides, or NULL */
    int copies;       /* operands sm_kern_einsum should copy (1 A, 2 B, 4 C) */
} ein_case;

static const ein_case ein_cases[] = {
    {"ij,jk->ik", "ij", "jk", "ik", NULL, 0},
    {"bij,bjk->bik", "bij", "bjk", "bik", NULL, 0},
    {"ij,kj->ik", "ij", "kj", "ik", NULL, 0},
    {"ji,jk->ik", "ji", "jk", "ik", NULL, 0},
    {"ji,kj->ik", "ji", "kj", "ik", NULL, 0},
    {"ij,j->i", "ij", "j", "i", NULL, 0},
    {"j,jk->k", "j", "jk", "k", NULL, 0},
    {"i,i->", "i", "i", "", NULL, 0},
    {"i,j->ij", "i", "j", "ij", NULL, 0},
    {"ij,jk->ki", "ij", "jk", "ki", NULL, 0},
    {"ij,jk", "ij", "jk", "ik", NULL, 0},
    {"ba,cb", "ba", "cb", "ac", NULL, 0},
    {"bij,bkj->bik", "bij", "bkj", "bik", NULL, 0},
    {"ibj,bjk->bik", "ibj", "bjk", "bik", NULL, 0},
    {"bij,jk->bik", "bij", "jk", "bik", NULL, 0},
    {"ij,ij->i", "ij", "ij", "i", NULL, 0},
    {"ij,ij->ij", "ij", "ij", "ij", NULL, 0},
    {"abc,cd->abd", "abc", "cd", "abd", NULL, 0},
    {"abc,bcd->ad", "abc", "bcd", "ad", NULL, 0},
    {"ab,cd->acbd", "ab", "cd", "acbd", NULL, 4},
    {"ijk,jl->ilk", "ijk", "jl", "ilk", NULL, 5},
    {"acb,cd->abd", "acb", "cd", "abd", NULL, 1},
    {"ij,jk->k", "ij", "jk", "k", NULL, 0},
    {"ij,kl->ik", "ij", "kl", "ik", NULL, 0},
    {"ij,jk->ik", "ij", "jk", "ik", "j=0,", 0},
    {"ij,jk->ik", "ij", "jk", "ik", "i=0,", 0},
    {"ij,jk->ik", "ij", "jk", "ik", "i=1,k=1,", 0},
    {"bij,bjk->bik", "bij", "bjk", "bik", "i=1,", 0},
    {"ij , jk -> ik", "ij", "jk", "ik", NULL, 0},
};
#define NEIN (int)(sizeof ein_cases / sizeof *ein_cases)

START_TEST(test_einsum_table)
{
    const ein_case *c = &ein_cases[_i];
    sm_shape as = term_shape(c->ta, c->over), bs = term_shape(c->tb, c->over);
    sm_shape want = term_shape(c->to, c->over), os;
    char err[256] = "";
    ck_assert_msg(sm_kern_einsum_shape(c->spec, &as, &bs, &os, err, sizeof err) == SM_OK, "%s: %s",
                  c->spec, err);
    ck_assert_msg(sm_shape_equal(&os, &want), "%s: output shape", c->spec);
    ck_assert_int_eq(smk_einsum_copies(c->spec, SM_F32, &as, &bs), c->copies);
    for (int ti = 0; ti < 4; ti++) {
        sm_dtype t = prod_types[ti];
        prod_bufs pb = bufs_make(t, &as, &bs, &os);
        ck_assert_msg(sm_kern_einsum(c->spec, t, pb.a, &as, pb.b, &bs, pb.o, err, sizeof err) ==
                          SM_OK,
                      "%s: %s", c->spec, err);
        ref_einsum(t, c->ta, pb.a, c->tb, pb.b, c->to, c->over, pb.rf, pb.ri);
        bufs_check_free(t, &pb, 50, c->spec);
    }
}
END_TEST

typedef struct {
    const char *ta, *tb, *to; /* operand and output letters (jnp.dot's layout) */
} dot_case;

START_TEST(test_dot_table)
{
    /* the contracted letter is c; shapes follow letter_size() */
    dot_case cases[] = {
        {"c", "c", ""},         {"ac", "c", "a"},   {"c", "cd", "d"},     {"ac", "cd", "ad"},
        {"eac", "bcd", "eabd"}, {"eac", "c", "ea"}, {"c", "ebcd", "ebd"}, {"ac", "ebcd", "aebd"},
    };
    for (int ci = 0; ci < 8; ci++)
        for (int ti = 0; ti < 4; ti++) {
            sm_dtype t = prod_types[ti];
            const dot_case *dc = &cases[ci];
            struct {
                sm_shape a, b;
            } sh = {term_shape(dc->ta, NULL), term_shape(dc->tb, NULL)}, *c = &sh;
            const char *ta = dc->ta, *tb = dc->tb, *to = dc->to;
            sm_shape os;
            ck_assert_int_eq(sm_kern_dot_shape(&c->a, &c->b, &os, NULL, 0), SM_OK);
            sm_shape want = term_shape(to, NULL);
            ck_assert_msg(sm_shape_equal(&os, &want), "dot case %d shape", ci);
            prod_bufs pb = bufs_make(t, &c->a, &c->b, &os);
            char err[256] = "";
            ck_assert_msg(sm_kern_dot(t, pb.a, &c->a, pb.b, &c->b, pb.o, err, sizeof err) == SM_OK,
                          "%s", err);
            ref_einsum(t, ta, pb.a, tb, pb.b, to, NULL, pb.rf, pb.ri);
            bufs_check_free(t, &pb, 5, "dot");
        }
    /* rank 0 multiplies */
    sm_shape s0 = shp(0), s2 = shp(2, 2, 2), os;
    double x = 3, y[] = {1, 2, 3, 4}, o[4];
    ck_assert_int_eq(sm_kern_dot_shape(&s0, &s2, &os, NULL, 0), SM_OK);
    ck_assert_int_eq(os.rank, 2);
    ck_assert_int_eq(sm_kern_dot(SM_F64, &x, &s0, y, &s2, o, NULL, 0), SM_OK);
    ck_assert(o[0] == 3 && o[3] == 12);
    char err[256];
    sm_shape a = shp(2, 2, 3), b = shp(2, 2, 3);
    ck_assert_int_eq(sm_kern_dot(SM_F64, y, &a, y, &b, o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[2,3]"));
}
END_TEST

START_TEST(test_einsum_errors)
{
    struct {
        const char *spec;
        sm_shape a, b;
        sm_err code;
        const char *words;
    } cases[] = {
        {"ij,jk->il", shp(2, 2, 3), shp(2, 3, 4), SM_EINVAL, "'l'"},
        {"ii,ij->j", shp(2, 2, 2), shp(2, 2, 3), SM_EUNSUPPORTED, "repeated"},
        {"ij,jk->ik", shp(2, 2, 3), shp(2, 4, 4), SM_EINVAL, "[4,4]"},
        {"ij,jk->ik", shp(1, 2), shp(2, 2, 4), SM_EINVAL, "[2]"},
        {"ij->ij", shp(2, 2, 3), shp(2, 2, 3), SM_EINVAL, "two operands"},
        {"ij,jk,kl->il", shp(2, 2, 3), shp(2, 3, 4), SM_EINVAL, "two operands"},
        {"...i,ij->j", shp(2, 2, 3), shp(2, 3, 4), SM_EUNSUPPORTED, "ellipsis"},
        {"i1,jk->ik", shp(2, 2, 3), shp(2, 3, 4), SM_EINVAL, "'1'"},
        {"ij,jk-ik", shp(2, 2, 3), shp(2, 3, 4), SM_EINVAL, "->"},
    };
    float x[64] = {0}, o[64];
    for (int i = 0; i < 9; i++) {
        char err[256] = "";
        sm_err e = sm_kern_einsum(cases[i].spec, SM_F32, x, &cases[i].a, x, &cases[i].b, o, err,
                                  sizeof err);
        ck_assert_msg(e == cases[i].code, "%s: %s (%s)", cases[i].spec, sm_err_name(e), err);
        ck_assert_msg(strstr(err, cases[i].words), "%s: %s", cases[i].spec, err);
    }
    sm_shape a = shp(2, 2, 3), b = shp(2, 3, 4);
    char err[256];
    ck_assert_int_eq(sm_kern_einsum("ij,jk->ik", SM_U8, x, &a, x, &b, o, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "u8"));
}
END_TEST

/* Not asserted: the machine's speed drifts; see shared notes. */
START_TEST(test_sgemm_gflops)
{
    int64_t n = 1024;
    sm_shape s = shp(2, (int)n, (int)n);
    float *a = rand_small(SM_F32, n * n), *b = rand_small(SM_F32, n * n);
    float *c = malloc((size_t)(n * n) * sizeof *c);
    ck_assert_int_eq(sm_kern_matmul(SM_F32, a, &s, 0, b, &s, 0, c, NULL, 0), SM_OK);
    struct timespec t0, t1;
    int reps = 5;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < reps; r++)
        sm_kern_matmul(SM_F32, a, &s, 0, b, &s, 0, c, NULL, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("info: sgemm 1024x1024x1024: %.1f GFLOP/s (OpenBLAS core %s, best %s)\n",
           2.0 * (double)(n * n * n) * reps / sec / 1e9, sm_kern_corename(),
           sm_kern_best_coretype() ? sm_kern_best_coretype() : "none");
    fflush(stdout);
    free(a);
    free(b);
    free(c);
}
END_TEST

int main(void)
{
    return kt_run(SUITE_CASE(suite_create("kern_prod"), "prod", 60, NULL, {test_matmul_table, NMM},
                             {test_matmul_shapes_and_errors}, {test_einsum_table, NEIN},
                             {test_dot_table}, {test_einsum_errors}, {test_sgemm_gflops}));
}
