/* Products: a strided batched gemm engine (OpenBLAS for f32/f64, loops for
 * i32/i64), and matmul / dot on top of it. Einsum (sm_kern_einsum.c) uses
 * the same engine. */
#include <cblas.h>
#include <limits.h>
#include <stdio.h>

#include "sm_kern_impl.h"

/* How a rows x cols matrix with element strides (sr, sc) is passed to a
 * row-major BLAS call: NoTrans with ld = sr, or Trans with ld = sc. Size-1
 * dims leave their stride free. Returns 0 when neither fits. */
static int gemm_desc(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int *trans, int64_t *ld)
{
    int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
    if (cols <= 1 || sc == 1) {
        *trans = 0;
        *ld = rows > 1 ? sr : mc;
        return *ld >= mc;
    }
    if (rows <= 1 || sr == 1) {
        *trans = 1;
        *ld = cols > 1 ? sc : mr;
        return *ld >= mr;
    }
    return 0;
}

/* The BLAS call for one batch: C (m x n) = A (m x k) B (k x n), or, when C
 * is stored column-major, C^T = B^T A^T. */
typedef struct {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int swap;
} gemm_plan;

static int gemm_plan_make(const smk_gemm *g, gemm_plan *p)
{
    int tc;
    int64_t ldc;
    p->K = g->k;
    if (gemm_desc(g->m, g->n, g->scm, g->scn, &tc, &ldc) && !tc) {
        p->swap = 0;
        p->M = g->m;
        p->N = g->n;
        p->ldc = ldc;
        return gemm_desc(g->m, g->k, g->sam, g->sak, &p->ta, &p->lda) &&
               gemm_desc(g->k, g->n, g->sbk, g->sbn, &p->tb, &p->ldb);
    }
    if (gemm_desc(g->n, g->m, g->scn, g->scm, &tc, &ldc) && !tc) {
        p->swap = 1;
        p->M = g->n;
        p->N = g->m;
        p->ldc = ldc;
        return gemm_desc(g->n, g->k, g->sbn, g->sbk, &p->ta, &p->lda) &&
               gemm_desc(g->k, g->m, g->sak, g->sam, &p->tb, &p->ldb);
    }
    return 0;
}

int smk_gemm_bad_layout(sm_dtype t, const smk_gemm *g)
{
    if ((t != SM_F32 && t != SM_F64) || g->m == 0 || g->n == 0 || g->k == 0)
        return 0; /* integer loops take any strides; empty products run no gemm */
    for (int d = 0; d < g->nb; d++)
        if (g->bdims[d] == 0)
            return 0;
    int tr, bad = 0;
    int64_t ld;
    int cn = gemm_desc(g->m, g->n, g->scm, g->scn, &tr, &ld) && !tr;
    int ct = gemm_desc(g->n, g->m, g->scn, g->scm, &tr, &ld) && !tr;
    if (!cn && !ct)
        return 4;
    /* A and B must fit in the orientation C picks (a swap transposes both,
     * which gemm_desc accepts symmetrically). */
    if (!gemm_desc(g->m, g->k, g->sam, g->sak, &tr, &ld))
        bad |= 1;
    if (!gemm_desc(g->k, g->n, g->sbk, g->sbn, &tr, &ld))
        bad |= 2;
    return bad;
}

/* Merges innermost batch dims into m when B is broadcast along them and A
 * and C step by whole m-blocks (a batch of matrices times one matrix). */
static void gemm_fold_batch(smk_gemm *g)
{
    while (g->nb > 0) {
        int d = g->nb - 1;
        if (g->bst[1][d] != 0 || g->bst[0][d] != g->m * g->sam || g->bst[2][d] != g->m * g->scm ||
            (g->k > 1 && g->sak != 1) || (g->n > 1 && g->scn != 1))
            return;
        g->m *= g->bdims[d];
        g->nb--;
    }
}

/* Integer gemm, wrapping. With unit n-strides in B and C it runs i-l-j so
 * the inner loop is a contiguous (vectorizable) axpy; otherwise dot
 * products over any strides. */
#define SMK_IGEMM_DEF(name, T, U)                                                                  \
    static inline void name##_axpy(T *restrict c, const T *restrict b, U a, int64_t n)             \
    {                                                                                              \
        SMK_FOR(j, n, { c[j] = (T)((U)c[j] + a * (U)b[j]); });                                     \
    }                                                                                              \
    static void name(const smk_gemm *g, const T *A, const T *B, T *C)                              \
    {                                                                                              \
        if (g->sbn == 1 && g->scn == 1) {                                                          \
            for (int64_t i = 0; i < g->m; i++) {                                                   \
                T *c = C + i * g->scm;                                                             \
                memset(c, 0, (size_t)g->n * sizeof(T));                                            \
                for (int64_t l = 0; l < g->k; l++)                                                 \
                    name##_axpy(c, B + l * g->sbk, (U)A[i * g->sam + l * g->sak], g->n);           \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < g->m; i++)                                                         \
            for (int64_t j = 0; j < g->n; j++) {                                                   \
                U s = 0;                                                                           \
                for (int64_t l = 0; l < g->k; l++)                                                 \
                    s += (U)A[i * g->sam + l * g->sak] * (U)B[l * g->sbk + j * g->sbn];            \
                C[i * g->scm + j * g->scn] = (T)s;                                                 \
            }                                                                                      \
    }
SMK_IGEMM_DEF(igemm_i32, int32_t, uint32_t)
SMK_IGEMM_DEF(igemm_i64, int64_t, uint64_t)

static void gemm_one(sm_dtype t, const smk_gemm *g, const gemm_plan *p, const void *a,
                     const void *b, void *c)
{
    if (t == SM_I32) {
        igemm_i32(g, a, b, c);
        return;
    }
    if (t == SM_I64) {
        igemm_i64(g, a, b, c);
        return;
    }
    const void *x = p->swap ? b : a, *y = p->swap ? a : b;
    enum CBLAS_TRANSPOSE ta = p->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = p->tb ? CblasTrans : CblasNoTrans;
    if (t == SM_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)p->M, (blasint)p->N, (blasint)p->K, 1.0f, x,
                    (blasint)p->lda, y, (blasint)p->ldb, 0.0f, c, (blasint)p->ldc);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, (blasint)p->M, (blasint)p->N, (blasint)p->K, 1.0, x,
                    (blasint)p->lda, y, (blasint)p->ldb, 0.0, c, (blasint)p->ldc);
}

/* Zeroes C (m x n, strided) for k == 0. */
static void gemm_zero(size_t esz, const smk_gemm *g, void *c)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            memset((char *)c + (i * g->scm + j * g->scn) * (int64_t)esz, 0, esz);
}

sm_err smk_gemm_run(sm_dtype t, smk_gemm *g, const void *a, const void *b, void *c, char *err,
                    size_t errlen)
{
    if (t != SM_F32 && t != SM_F64 && t != SM_I32 && t != SM_I64)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "products do not support dtype %s",
                       sm_dtype_name(t));
    size_t esz = smk_elem(t);
    if (g->m == 0 || g->n == 0)
        return SM_OK;
    for (int d = 0; d < g->nb; d++)
        if (g->bdims[d] == 0)
            return SM_OK;
    gemm_fold_batch(g);
    gemm_plan p = {0};
    if ((t == SM_F32 || t == SM_F64) && g->k > 0) {
        if (!gemm_plan_make(g, &p))
            return sm_fail(err, errlen, SM_EINTERNAL, "gemm layout not expressible");
        if (p.M > INT_MAX || p.N > INT_MAX || p.K > INT_MAX || p.lda > INT_MAX || p.ldb > INT_MAX ||
            p.ldc > INT_MAX)
            return sm_fail(err, errlen, SM_EUNSUPPORTED,
                           "gemm of %lld x %lld x %lld exceeds the BLAS int range", (long long)g->m,
                           (long long)g->n, (long long)g->k);
    }
    smk_loop l = {.rank = g->nb + 1, .nops = 3};
    for (int d = 0; d < g->nb; d++) {
        l.dims[d] = g->bdims[d];
        for (int o = 0; o < 3; o++)
            l.st[o][d] = g->bst[o][d];
    }
    l.dims[g->nb] = 1;
    smk_cursor cur;
    int64_t nb = smk_cursor_init(&l, &cur);
    int64_t e = (int64_t)esz;
    for (int64_t i = 0; i < nb; i++) {
        const char *ap = (const char *)a + cur.off[0] * e;
        const char *bp = (const char *)b + cur.off[1] * e;
        char *cp = (char *)c + cur.off[2] * e;
        if (g->k == 0)
            gemm_zero(esz, g, cp);
        else
            gemm_one(t, g, &p, ap, bp, cp);
        smk_cursor_next(&l, &cur);
    }
    return SM_OK;
}

/* ---- matmul --------------------------------------------------------------------------------- */

typedef struct {
    sm_shape batch;
    int64_t m, n, k;
    sm_shape out;
} matmul_dims;

static sm_err matmul_dims_make(const sm_shape *as, int ta, const sm_shape *bs, int tb,
                               matmul_dims *md, char *err, size_t errlen)
{
    char s1[128], s2[128];
    if (as->rank < 1 || bs->rank < 1)
        return sm_fail(err, errlen, SM_EINVAL, "matmul needs operands of rank >= 1, got %s and %s",
                       smk_fmt(as, s1, sizeof s1), smk_fmt(bs, s2, sizeof s2));
    int ra = as->rank, rb = bs->rank;
    int64_t ka, kb;
    if (ra == 1) {
        md->m = 1;
        ka = as->dims[0];
    } else {
        md->m = ta ? as->dims[ra - 1] : as->dims[ra - 2];
        ka = ta ? as->dims[ra - 2] : as->dims[ra - 1];
    }
    if (rb == 1) {
        md->n = 1;
        kb = bs->dims[0];
    } else {
        kb = tb ? bs->dims[rb - 1] : bs->dims[rb - 2];
        md->n = tb ? bs->dims[rb - 2] : bs->dims[rb - 1];
    }
    if (ka != kb)
        return sm_fail(err, errlen, SM_EINVAL,
                       "matmul contraction dims differ: %s%s has %lld, %s%s has %lld",
                       smk_fmt(as, s1, sizeof s1), ta ? " (transposed)" : "", (long long)ka,
                       smk_fmt(bs, s2, sizeof s2), tb ? " (transposed)" : "", (long long)kb);
    md->k = ka;
    sm_shape ba = {.rank = ra > 2 ? ra - 2 : 0}, bb = {.rank = rb > 2 ? rb - 2 : 0};
    memcpy(ba.dims, as->dims, sizeof(int64_t) * (size_t)ba.rank);
    memcpy(bb.dims, bs->dims, sizeof(int64_t) * (size_t)bb.rank);
    if (sm_kern_broadcast_shape(&ba, &bb, &md->batch, NULL, 0))
        return sm_fail(err, errlen, SM_EINVAL, "matmul batch dims of %s and %s do not broadcast",
                       smk_fmt(as, s1, sizeof s1), smk_fmt(bs, s2, sizeof s2));
    md->out = md->batch;
    if (ra > 1)
        md->out.dims[md->out.rank++] = md->m;
    if (rb > 1)
        md->out.dims[md->out.rank++] = md->n;
    return SM_OK;
}

sm_err sm_kern_matmul_shape(const sm_shape *as, int trans_a, const sm_shape *bs, int trans_b,
                            sm_shape *out, char *err, size_t errlen)
{
    matmul_dims md;
    sm_err e = matmul_dims_make(as, trans_a, bs, trans_b, &md, err, errlen);
    if (!e)
        *out = md.out;
    return e;
}

/* Batch strides (elements) of an operand whose batch dims are dims[0..r)
 * of s, right-aligned to the broadcast batch of rank nb; mat = m*k. */
static void batch_strides(const sm_shape *s, int r, int nb, int64_t mat, int64_t *st)
{
    sm_shape b = {.rank = r};
    memcpy(b.dims, s->dims, sizeof(int64_t) * (size_t)r);
    smk_strides(&b, nb, st);
    for (int d = 0; d < nb; d++)
        st[d] *= mat;
}

sm_err sm_kern_matmul(sm_dtype t, const void *a, const sm_shape *as, int trans_a, const void *b,
                      const sm_shape *bs, int trans_b, void *out, char *err, size_t errlen)
{
    matmul_dims md;
    sm_err e = matmul_dims_make(as, trans_a, bs, trans_b, &md, err, errlen);
    if (e)
        return e;
    int ta = as->rank > 1 && trans_a, tb = bs->rank > 1 && trans_b;
    smk_gemm g = {.nb = md.batch.rank, .m = md.m, .n = md.n, .k = md.k};
    memcpy(g.bdims, md.batch.dims, sizeof(int64_t) * (size_t)g.nb);
    g.sam = ta ? 1 : md.k;
    g.sak = ta ? md.m : 1;
    g.sbk = tb ? 1 : md.n;
    g.sbn = tb ? md.k : 1;
    g.scm = md.n;
    g.scn = 1;
    batch_strides(as, as->rank > 2 ? as->rank - 2 : 0, g.nb, md.m * md.k, g.bst[0]);
    batch_strides(bs, bs->rank > 2 ? bs->rank - 2 : 0, g.nb, md.k * md.n, g.bst[1]);
    smk_strides(&md.batch, g.nb, g.bst[2]);
    for (int d = 0; d < g.nb; d++)
        g.bst[2][d] *= md.m * md.n;
    return smk_gemm_run(t, &g, a, b, out, err, errlen);
}

/* ---- dot ------------------------------------------------------------------------------------ */

sm_err sm_kern_dot_shape(const sm_shape *as, const sm_shape *bs, sm_shape *out, char *err,
                         size_t errlen)
{
    char s1[128], s2[128];
    if (as->rank == 0 || bs->rank == 0)
        return sm_kern_broadcast_shape(as, bs, out, err, errlen);
    int64_t ka = as->dims[as->rank - 1];
    int64_t kb = bs->rank == 1 ? bs->dims[0] : bs->dims[bs->rank - 2];
    if (ka != kb)
        return sm_fail(
            err, errlen, SM_EINVAL, "dot contraction dims differ: %s has %lld, %s has %lld",
            smk_fmt(as, s1, sizeof s1), (long long)ka, smk_fmt(bs, s2, sizeof s2), (long long)kb);
    if (as->rank - 1 + (bs->rank > 1 ? bs->rank - 1 : 0) > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "dot of %s and %s exceeds rank %d",
                       smk_fmt(as, s1, sizeof s1), smk_fmt(bs, s2, sizeof s2), SM_MAX_RANK);
    sm_shape o = {0};
    for (int i = 0; i < as->rank - 1; i++)
        o.dims[o.rank++] = as->dims[i];
    for (int i = 0; i < bs->rank - 2; i++)
        o.dims[o.rank++] = bs->dims[i];
    if (bs->rank > 1)
        o.dims[o.rank++] = bs->dims[bs->rank - 1];
    *out = o;
    return SM_OK;
}

sm_err sm_kern_dot(sm_dtype t, const void *a, const sm_shape *as, const void *b, const sm_shape *bs,
                   void *out, char *err, size_t errlen)
{
    sm_shape os;
    sm_err e = sm_kern_dot_shape(as, bs, &os, err, errlen);
    if (e)
        return e;
    if (as->rank == 0 || bs->rank == 0) {
        if (t != SM_F32 && t != SM_F64 && t != SM_I32 && t != SM_I64)
            return sm_fail(err, errlen, SM_EUNSUPPORTED, "products do not support dtype %s",
                           sm_dtype_name(t));
        return sm_kern_binary(SM_KERN_MULTIPLY, t, a, as, b, bs, out, err, errlen);
    }
    int64_t m = 1, k = as->dims[as->rank - 1], n = 1, nbat = 1;
    for (int i = 0; i < as->rank - 1; i++)
        m *= as->dims[i];
    if (bs->rank > 1) {
        n = bs->dims[bs->rank - 1];
        for (int i = 0; i < bs->rank - 2; i++)
            nbat *= bs->dims[i];
    }
    /* out[m, bb, n]: one gemm per batch of b, C strided by nbat * n. */
    smk_gemm g = {.nb = 1, .m = m, .n = n, .k = k};
    g.bdims[0] = nbat;
    g.bst[0][0] = 0;
    g.bst[1][0] = k * n;
    g.bst[2][0] = n;
    g.sam = k;
    g.sak = 1;
    g.sbk = n;
    g.sbn = 1;
    g.scm = nbat * n;
    g.scn = 1;
    return smk_gemm_run(t, &g, a, b, out, err, errlen);
}
