/* sm_comm: collective groups over a mesh and the reduction order (the
 * vtable lives in sm_comm.h). */
#include "sm_comm.h"

#include "sm_array_share.h"

#include <stdlib.h>
#include <string.h>

const char *const sm_comm_kind_names[SM_COMM_NKINDS] = {
#define SM_COMM_KIND_NAME(kind, name) [kind] = name,
    SM_COMM_KINDS(SM_COMM_KIND_NAME)
#undef SM_COMM_KIND_NAME
};

sm_err sm_comm_group_make(const sm_mesh *m, int pos, int naxes,
                          const char (*axes)[SM_AXIS_NAME_MAX], int *members, sm_comm_group *g,
                          char *err, size_t errlen)
{
    int ax[SM_MAX_AXES];
    uint32_t seen = 0;
    if (naxes < 1 || naxes > m->naxes)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a collective needs between 1 and %d mesh axis names, got %d", m->naxes,
                       naxes);
    if (pos < 0 || pos >= m->ndevices)
        return sm_fail(err, errlen, SM_EINVAL, "mesh position %d is outside the mesh of %d devices",
                       pos, m->ndevices);
    int size = 1;
    for (int k = 0; k < naxes; k++) {
        ax[k] = sm_mesh_axis(m, axes[k]);
        if (ax[k] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "unknown mesh axis '%s'", axes[k]);
        if (seen & (1u << ax[k]))
            return sm_fail(err, errlen, SM_EINVAL, "mesh axis '%s' is named twice", axes[k]);
        seen |= 1u << ax[k];
        size *= (int)m->sizes[ax[k]];
    }
    int64_t c[SM_MAX_AXES];
    sm_mesh_coords(m, pos, c);
    int rank = 0;
    for (int k = 0; k < naxes; k++)
        rank = rank * (int)m->sizes[ax[k]] + (int)c[ax[k]];
    for (int r = 0; r < size; r++) {
        int rest = r;
        for (int k = naxes - 1; k >= 0; k--) {
            c[ax[k]] = rest % m->sizes[ax[k]];
            rest /= (int)m->sizes[ax[k]];
        }
        int p = 0;
        for (int a = 0; a < m->naxes; a++)
            p = p * (int)m->sizes[a] + (int)c[a];
        members[r] = p;
    }
    g->size = size;
    g->rank = rank;
    g->members = members;
    return SM_OK;
}

/* ---- the reduction order ------------------------------------------------------------------- */

/* Bytes of each operand per pass of sm_comm_tree_reduce: the block of
 * every operand and the scratch of the pending right children stay in
 * cache. */
#define SM_COMM_TREE_BLOCK (32 << 10)

static int sm_comm_tree_mid(int lo, int hi)
{
    int p = 1;
    while (2 * p < hi - lo)
        p *= 2;
    return lo + p;
}

int sm_comm_tree_units(int lo, int hi, const int *owner, sm_comm_span *spans)
{
    int r = lo + 1;
    while (r < hi && owner[r] == owner[lo])
        r++;
    if (r == hi) {
        spans[0] = (sm_comm_span){lo, hi};
        return 1;
    }
    int mid = sm_comm_tree_mid(lo, hi);
    int k = sm_comm_tree_units(lo, mid, owner, spans);
    return k + sm_comm_tree_units(mid, hi, owner, spans + k);
}

typedef struct {
    sm_dtype t;
    sm_kern_reduce_op op;
    const sm_comm_leaf *leaves;
    int nleaves, next; /* the leaf that comes next in rank order */
    int64_t at, m, el; /* the block: elements [at, at + m) */
    char *tmp;         /* per depth, a block */
    char *err;
    size_t errlen;
} sm_comm_tree_pass;

/* The value of node [lo, hi) for the block: a leaf's data, or dst, which
 * receives it; right children go to the scratch of depth d. */
static sm_err sm_comm_tree_eval(sm_comm_tree_pass *x, int lo, int hi, int d, char *dst,
                                const char **res)
{
    if (x->next < x->nleaves && x->leaves[x->next].lo == lo && x->leaves[x->next].hi == hi) {
        *res = (const char *)x->leaves[x->next++].data + x->at * x->el;
        return SM_OK;
    }
    if (hi - lo < 2 || x->next >= x->nleaves || x->leaves[x->next].lo < lo ||
        x->leaves[x->next].hi > hi)
        return sm_fail(x->err, x->errlen, SM_EINVAL,
                       "the values of a reduction do not split ranks [%d, %d) as its tree does", lo,
                       hi);
    int mid = sm_comm_tree_mid(lo, hi);
    const char *a, *b;
    char *right = x->tmp + (size_t)d * SM_COMM_TREE_BLOCK;
    sm_err e = sm_comm_tree_eval(x, lo, mid, d, dst, &a);
    if (!e)
        e = sm_comm_tree_eval(x, mid, hi, d + 1, right, &b);
    if (e)
        return e;
    if (a == dst)
        e = sm_kern_accumulate(x->t, dst, b, x->m, x->op, x->err, x->errlen);
    else
        e = sm_kern_combine(x->t, dst, a, b, x->m, x->op, x->err, x->errlen);
    *res = dst;
    return e;
}

sm_err sm_comm_tree_reduce(sm_dtype t, sm_kern_reduce_op op, int lo, int hi,
                           const sm_comm_leaf *leaves, int nleaves, int64_t n, void *dst, char *err,
                           size_t errlen)
{
    int64_t el = (int64_t)sm_dtype_size(t);
    if (n <= 0)
        return SM_OK;
    if (nleaves == 1 && leaves[0].lo == lo && leaves[0].hi == hi) {
        memcpy(dst, leaves[0].data, (size_t)(n * el));
        return SM_OK;
    }
    int depth = 0;
    while ((1 << depth) < hi - lo)
        depth++;
    sm_comm_tree_pass x = {.t = t,
                           .op = op,
                           .leaves = leaves,
                           .nleaves = nleaves,
                           .el = el,
                           .tmp = malloc((size_t)depth * SM_COMM_TREE_BLOCK),
                           .err = err,
                           .errlen = errlen};
    if (!x.tmp)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a reduction's scratch");
    int64_t blk = SM_COMM_TREE_BLOCK / el;
    sm_err e = SM_OK;
    for (int64_t b = 0; b < n && !e; b += blk) {
        const char *res = NULL;
        x.next = 0;
        x.at = b;
        x.m = n - b < blk ? n - b : blk;
        char *d = (char *)dst + b * el;
        e = sm_comm_tree_eval(&x, lo, hi, 0, d, &res);
        if (!e && x.next != nleaves)
            e = sm_fail(err, errlen, SM_EINVAL,
                        "a reduction over ranks [%d, %d) was given %d values past its tree", lo, hi,
                        nleaves - x.next);
        if (!e && res != d)
            memcpy(d, res, (size_t)(x.m * el));
    }
    free(x.tmp);
    return e;
}

void sm_comm_share_output(const sm_comm_arrays *const *arrs, int index)
{
    if (index > 0)
        sm_array_alias(arrs[index]->out, arrs[0]->out, 0);
}

int sm_comm_one_output(const sm_comm_arrays *const *arrs, int n)
{
    if (n < 2 || !arrs[0] || !arrs[0]->out->block)
        return 0;
    for (int i = 1; i < n; i++)
        if (!arrs[i] || arrs[i]->out->nbytes != arrs[0]->out->nbytes)
            return 0;
    return 1;
}
