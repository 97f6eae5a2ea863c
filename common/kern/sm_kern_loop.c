/* Shared helpers of common/kern: strided walks, strides, formatting. */
#include <stdio.h>

#include "sm_array.h"
#include "sm_copy.h"
#include "sm_kern_impl.h"

void smk_loop_collapse(smk_loop *l)
{
    int r = 0;
    for (int d = 0; d < l->rank; d++) {
        if (l->dims[d] == 1)
            continue;
        if (r > 0) {
            int merge = 1;
            for (int k = 0; k < l->nops; k++)
                if (l->st[k][r - 1] != l->st[k][d] * l->dims[d])
                    merge = 0;
            if (merge) {
                l->dims[r - 1] *= l->dims[d];
                for (int k = 0; k < l->nops; k++)
                    l->st[k][r - 1] = l->st[k][d];
                continue;
            }
        }
        l->dims[r] = l->dims[d];
        for (int k = 0; k < l->nops; k++)
            l->st[k][r] = l->st[k][d];
        r++;
    }
    if (r == 0) {
        l->dims[0] = 1;
        for (int k = 0; k < l->nops; k++)
            l->st[k][0] = 0;
        r = 1;
    }
    l->rank = r;
}

int64_t smk_cursor_init(const smk_loop *l, smk_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->outer = 1;
    for (int d = 0; d < l->rank - 1; d++)
        c->outer *= l->dims[d];
    c->inner = l->dims[l->rank - 1];
    if (c->inner == 0)
        c->outer = 0;
    return c->outer;
}

void smk_strides(const sm_shape *s, int rank, int64_t *st)
{
    int64_t acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int j = i - (rank - s->rank);
        if (j < 0) {
            st[i] = 0;
            continue;
        }
        st[i] = s->dims[j] == 1 ? 0 : acc;
        acc *= s->dims[j];
    }
}

int64_t smk_numel(const sm_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

size_t smk_elem(sm_dtype t)
{
    switch (t) {
    case SM_F32:
    case SM_I32:
        return 4;
    case SM_F64:
    case SM_I64:
        return 8;
    case SM_U8:
    case SM_BOOL:
        return 1;
    case SM_F16:
    case SM_BF16:
        return 2;
    default:
        return 0;
    }
}

const char *smk_fmt(const sm_shape *s, char *buf, size_t len)
{
    return sm_shape_format(s, buf, len);
}

int smk_axis(int axis, int rank)
{
    if (axis < -rank || axis >= rank)
        return -1;
    return axis < 0 ? axis + rank : axis;
}

/* Typed strided run copies, so the contiguous case is a memcpy and the
 * strided one a plain typed loop. */
#define SMK_COPY_RUN(T)                                                                            \
    do {                                                                                           \
        T *restrict o = (T *)dst;                                                                  \
        const T *restrict s = (const T *)src;                                                      \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i * so] = s[i * ss];                                                                 \
    } while (0)

static void smk_copy_run(char *dst, const char *src, int64_t n, int64_t so, int64_t ss, size_t elem)
{
    if (so == 1 && ss == 1) {
        sm_copy(dst, src, (size_t)n * elem);
        return;
    }
    if (ss == 0 && so == 1) {
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * elem, src, elem);
        return;
    }
    switch (elem) {
    case 1:
        SMK_COPY_RUN(uint8_t);
        break;
    case 2:
        SMK_COPY_RUN(uint16_t);
        break;
    case 4:
        SMK_COPY_RUN(uint32_t);
        break;
    default:
        SMK_COPY_RUN(uint64_t);
        break;
    }
}

/* Copies an nd x nl tile pair: dst[i * dd + j] = src[i + j * sl], in 32 x 32
 * blocks so both sides stay in cache (the transpose case). */
#define SMK_TILE(T)                                                                                \
    do {                                                                                           \
        T *o = (T *)dst;                                                                           \
        const T *s = (const T *)src;                                                               \
        for (int64_t i0 = 0; i0 < nd; i0 += 32)                                                    \
            for (int64_t j0 = 0; j0 < nl; j0 += 32) {                                              \
                int64_t i1 = i0 + 32 < nd ? i0 + 32 : nd, j1 = j0 + 32 < nl ? j0 + 32 : nl;        \
                for (int64_t i = i0; i < i1; i++)                                                  \
                    for (int64_t j = j0; j < j1; j++)                                              \
                        o[i * dd + j] = s[i + j * sl];                                             \
            }                                                                                      \
    } while (0)

static void smk_copy_tile(char *dst, const char *src, int64_t nd, int64_t nl, int64_t dd,
                          int64_t sl, size_t elem)
{
    switch (elem) {
    case 1:
        SMK_TILE(uint8_t);
        break;
    case 2:
        SMK_TILE(uint16_t);
        break;
    case 4:
        SMK_TILE(uint32_t);
        break;
    default:
        SMK_TILE(uint64_t);
        break;
    }
}

void smk_copy_loop(smk_loop *l, char *dst, const char *src, size_t elem)
{
    smk_loop_collapse(l);
    smk_cursor c;
    int last = l->rank - 1;
    /* A transpose: dst contiguous along the last dim, src along another dim
     * d. Walk the other dims and copy (d, last) tiles. */
    int d = -1;
    if (l->st[0][last] == 1 && l->st[1][last] > 1 && l->dims[last] >= 8)
        for (int k = 0; k < last; k++)
            if (l->st[1][k] == 1 && l->dims[k] >= 8)
                d = k;
    if (d >= 0) {
        smk_loop o = {.rank = 0, .nops = 2};
        for (int k = 0; k < last; k++)
            if (k != d) {
                o.dims[o.rank] = l->dims[k];
                o.st[0][o.rank] = l->st[0][k];
                o.st[1][o.rank++] = l->st[1][k];
            }
        o.dims[o.rank] = 1;
        o.st[0][o.rank] = o.st[1][o.rank] = 0;
        o.rank++;
        int64_t n = smk_cursor_init(&o, &c);
        for (int64_t r = 0; r < n; r++) {
            smk_copy_tile(dst + c.off[0] * (int64_t)elem, src + c.off[1] * (int64_t)elem,
                          l->dims[d], l->dims[last], l->st[0][d], l->st[1][last], elem);
            smk_cursor_next(&o, &c);
        }
        return;
    }
    int64_t runs = smk_cursor_init(l, &c);
    for (int64_t r = 0; r < runs; r++) {
        smk_copy_run(dst + c.off[0] * (int64_t)elem, src + c.off[1] * (int64_t)elem, c.inner,
                     l->st[0][last], l->st[1][last], elem);
        smk_cursor_next(l, &c);
    }
}
