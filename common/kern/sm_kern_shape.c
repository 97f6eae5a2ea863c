/* Shape kernels: reshape, transpose, slice, broadcast_to, pad, concatenate,
 * tile, roll, dynamic_slice, dynamic_update_slice, and the gathers take and
 * take_along_axis, and the scatters (set moves rows; the others update them
 * with the binary kernels). The rest move elements by size
 * (any dtype with a size); each builds one strided walk (smk_loop: op 0 the
 * destination, op 1 the source) and hands it to smk_copy_loop, which copies
 * contiguous runs with memcpy and strided ones with typed loops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm_kern_impl.h"

static sm_err shape_elem(sm_dtype t, const char *op, size_t *e, char *err, size_t errlen)
{
    *e = smk_elem(t);
    if (!*e)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "%s does not support dtype %s", op,
                       sm_dtype_name(t));
    return SM_OK;
}

/* Plain row-major strides (no broadcast zeroing). */
static void dense_strides(const sm_shape *s, int64_t *st)
{
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= s->dims[i];
    }
}

/* Copies a box of `ext` (rank r) from src at soff, stepping sstep (NULL = 1),
 * to dst at doff. */
static void copy_box(size_t e, void *dst, const sm_shape *ds, const int64_t *doff, const void *src,
                     const sm_shape *ss, const int64_t *soff, const int64_t *sstep,
                     const int64_t *ext, int r)
{
    int64_t dst_st[SM_MAX_RANK], src_st[SM_MAX_RANK], db = 0, sb = 0;
    dense_strides(ds, dst_st);
    dense_strides(ss, src_st);
    smk_loop l = {.rank = r, .nops = 2};
    for (int d = 0; d < r; d++) {
        l.dims[d] = ext[d];
        l.st[0][d] = dst_st[d];
        l.st[1][d] = src_st[d] * (sstep ? sstep[d] : 1);
        db += (doff ? doff[d] : 0) * dst_st[d];
        sb += (soff ? soff[d] : 0) * src_st[d];
    }
    smk_copy_loop(&l, (char *)dst + db * (int64_t)e, (const char *)src + sb * (int64_t)e, e);
}

sm_err sm_kern_reshape(sm_dtype t, const void *x, const sm_shape *xs, const sm_shape *os, void *out,
                       char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "reshape", &e, err, errlen);
    if (r)
        return r;
    int64_t n = smk_numel(xs);
    if (n != smk_numel(os)) {
        char b1[128], b2[128];
        return sm_fail(err, errlen, SM_EINVAL, "cannot reshape %s into %s",
                       smk_fmt(xs, b1, sizeof b1), smk_fmt(os, b2, sizeof b2));
    }
    if (n > 0 && out != x)
        memmove(out, x, (size_t)n * e);
    return SM_OK;
}

sm_err sm_kern_transpose(sm_dtype t, const void *x, const sm_shape *xs, const int *perm, void *out,
                         char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "transpose", &e, err, errlen);
    if (r)
        return r;
    int seen[SM_MAX_RANK] = {0};
    char b[128];
    for (int i = 0; i < xs->rank; i++) {
        if (perm[i] < 0 || perm[i] >= xs->rank || seen[perm[i]]++)
            return sm_fail(err, errlen, SM_EINVAL,
                           "transpose axes are not a permutation of the %d dims of %s", xs->rank,
                           smk_fmt(xs, b, sizeof b));
    }
    int64_t xst[SM_MAX_RANK];
    dense_strides(xs, xst);
    smk_loop l = {.rank = xs->rank, .nops = 2};
    sm_shape os = {.rank = xs->rank};
    for (int i = 0; i < xs->rank; i++)
        os.dims[i] = xs->dims[perm[i]];
    dense_strides(&os, l.st[0]);
    for (int i = 0; i < xs->rank; i++) {
        l.dims[i] = os.dims[i];
        l.st[1][i] = xst[perm[i]];
    }
    smk_copy_loop(&l, out, x, e);
    return SM_OK;
}

sm_err sm_kern_slice(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *start,
                     const int64_t *limit, const int64_t *strides, void *out, char *err,
                     size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "slice", &e, err, errlen);
    if (r)
        return r;
    int64_t ext[SM_MAX_RANK];
    char b[128];
    for (int d = 0; d < xs->rank; d++) {
        int64_t st = strides ? strides[d] : 1;
        if (start[d] < 0 || start[d] > limit[d] || limit[d] > xs->dims[d] || st < 1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "slice %lld:%lld:%lld of dim %d is out of range for shape %s",
                           (long long)start[d], (long long)limit[d], (long long)st, d,
                           smk_fmt(xs, b, sizeof b));
        ext[d] = (limit[d] - start[d] + st - 1) / st;
    }
    sm_shape os = {.rank = xs->rank};
    memcpy(os.dims, ext, sizeof(int64_t) * (size_t)xs->rank);
    copy_box(e, out, &os, NULL, x, xs, start, strides, ext, xs->rank);
    return SM_OK;
}

sm_err sm_kern_broadcast_to(sm_dtype t, const void *x, const sm_shape *xs, const sm_shape *os,
                            void *out, char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "broadcast_to", &e, err, errlen);
    if (r)
        return r;
    int ok = xs->rank <= os->rank;
    for (int i = 0; ok && i < xs->rank; i++) {
        int64_t d = xs->dims[i], o = os->dims[i + os->rank - xs->rank];
        ok = d == o || d == 1;
    }
    if (!ok) {
        char b1[128], b2[128];
        return sm_fail(err, errlen, SM_EINVAL, "cannot broadcast %s to %s",
                       smk_fmt(xs, b1, sizeof b1), smk_fmt(os, b2, sizeof b2));
    }
    smk_loop l = {.rank = os->rank, .nops = 2};
    memcpy(l.dims, os->dims, sizeof(int64_t) * (size_t)os->rank);
    dense_strides(os, l.st[0]);
    smk_strides(xs, os->rank, l.st[1]);
    smk_copy_loop(&l, out, x, e);
    return SM_OK;
}

sm_err sm_kern_pad(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *low,
                   const int64_t *high, void *out, char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "pad", &e, err, errlen);
    if (r)
        return r;
    sm_shape os = {.rank = xs->rank};
    for (int d = 0; d < xs->rank; d++) {
        if (low[d] < 0 || high[d] < 0) {
            char b[128];
            return sm_fail(err, errlen, SM_EINVAL,
                           "pad widths (%lld, %lld) of dim %d of %s must be >= 0",
                           (long long)low[d], (long long)high[d], d, smk_fmt(xs, b, sizeof b));
        }
        os.dims[d] = xs->dims[d] + low[d] + high[d];
    }
    int64_t n = smk_numel(&os);
    if (n > 0)
        memset(out, 0, (size_t)n * e);
    copy_box(e, out, &os, low, x, xs, NULL, NULL, xs->dims, xs->rank);
    return SM_OK;
}

sm_err sm_kern_concatenate(sm_dtype t, int n, const void *const *x, const sm_shape *xs, int axis,
                           void *out, char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "concatenate", &e, err, errlen);
    if (r)
        return r;
    if (n < 1)
        return sm_fail(err, errlen, SM_EINVAL, "concatenate needs at least one array");
    int ax = smk_axis(axis, xs[0].rank);
    char b1[128], b2[128];
    if (ax < 0)
        return sm_fail(err, errlen, SM_EINVAL, "concatenate axis %d is out of range for %s", axis,
                       smk_fmt(&xs[0], b1, sizeof b1));
    sm_shape os = xs[0];
    for (int i = 1; i < n; i++) {
        int ok = xs[i].rank == xs[0].rank;
        for (int d = 0; ok && d < xs[0].rank; d++)
            ok = d == ax || xs[i].dims[d] == xs[0].dims[d];
        if (!ok)
            return sm_fail(err, errlen, SM_EINVAL, "cannot concatenate %s and %s along axis %d",
                           smk_fmt(&xs[0], b1, sizeof b1), smk_fmt(&xs[i], b2, sizeof b2), ax);
        os.dims[ax] += xs[i].dims[ax];
    }
    int64_t off[SM_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        copy_box(e, out, &os, off, x[i], &xs[i], NULL, NULL, xs[i].dims, xs[i].rank);
        off[ax] += xs[i].dims[ax];
    }
    return SM_OK;
}

sm_err sm_kern_tile_shape(const sm_shape *xs, const int64_t *reps, int nreps, sm_shape *out,
                          char *err, size_t errlen)
{
    int R = xs->rank > nreps ? xs->rank : nreps;
    char b[128];
    if (nreps < 0 || R > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "tile of %s by %d reps exceeds rank %d",
                       smk_fmt(xs, b, sizeof b), nreps, SM_MAX_RANK);
    sm_shape o = {.rank = R};
    for (int i = 0; i < R; i++) {
        int ix = i - (R - xs->rank), ir = i - (R - nreps);
        int64_t d = ix >= 0 ? xs->dims[ix] : 1, rp = ir >= 0 ? reps[ir] : 1;
        if (rp < 0)
            return sm_fail(err, errlen, SM_EINVAL, "tile of %s: reps %lld is negative",
                           smk_fmt(xs, b, sizeof b), (long long)rp);
        o.dims[i] = d * rp;
    }
    *out = o;
    return SM_OK;
}

sm_err sm_kern_tile(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *reps, int nreps,
                    void *out, char *err, size_t errlen)
{
    size_t e;
    sm_shape os;
    sm_err r = shape_elem(t, "tile", &e, err, errlen);
    if (!r)
        r = sm_kern_tile_shape(xs, reps, nreps, &os, err, errlen);
    if (r)
        return r;
    int R = os.rank;
    sm_shape xr = {.rank = R};
    for (int i = 0; i < R; i++) {
        int ix = i - (R - xs->rank);
        xr.dims[i] = ix >= 0 ? xs->dims[ix] : 1;
    }
    int64_t ost[SM_MAX_RANK], xst[SM_MAX_RANK];
    dense_strides(&os, ost);
    dense_strides(&xr, xst);
    /* view out as (rep_0, d_0, rep_1, d_1, ...) and x as (1, d_0, 1, d_1, ...) */
    smk_loop l = {.rank = 2 * R, .nops = 2};
    for (int i = 0; i < R; i++) {
        int64_t rp = xr.dims[i] ? os.dims[i] / xr.dims[i] : 0;
        l.dims[2 * i] = rp;
        l.st[0][2 * i] = xr.dims[i] * ost[i];
        l.st[1][2 * i] = 0;
        l.dims[2 * i + 1] = xr.dims[i];
        l.st[0][2 * i + 1] = ost[i];
        l.st[1][2 * i + 1] = xst[i];
    }
    smk_copy_loop(&l, out, x, e);
    return SM_OK;
}

sm_err sm_kern_rev(sm_dtype t, const void *x, const sm_shape *xs, const int *rev, void *out,
                   char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "rev", &e, err, errlen);
    if (r)
        return r;
    /* a box copy whose source walks each reversed dimension from its end */
    int64_t start[SM_MAX_RANK], step[SM_MAX_RANK];
    for (int d = 0; d < xs->rank; d++) {
        start[d] = rev[d] && xs->dims[d] > 0 ? xs->dims[d] - 1 : 0;
        step[d] = rev[d] ? -1 : 1;
    }
    copy_box(e, out, xs, NULL, x, xs, start, step, xs->dims, xs->rank);
    return SM_OK;
}

sm_err sm_kern_roll(sm_dtype t, const void *x, const sm_shape *xs, int64_t shift, int axis,
                    void *out, char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "roll", &e, err, errlen);
    if (r)
        return r;
    int64_t outer = 1, n, inner = 1;
    if (axis == SM_KERN_AXIS_NONE) {
        n = smk_numel(xs);
    } else {
        int ax = smk_axis(axis, xs->rank);
        if (ax < 0) {
            char b[128];
            return sm_fail(err, errlen, SM_EINVAL, "roll axis %d is out of range for %s", axis,
                           smk_fmt(xs, b, sizeof b));
        }
        for (int i = 0; i < ax; i++)
            outer *= xs->dims[i];
        n = xs->dims[ax];
        for (int i = ax + 1; i < xs->rank; i++)
            inner *= xs->dims[i];
    }
    if (n == 0 || outer == 0 || inner == 0)
        return SM_OK;
    int64_t s = shift % n;
    if (s < 0)
        s += n;
    size_t blk = (size_t)inner * e;
    for (int64_t o = 0; o < outer; o++) {
        const char *src = (const char *)x + (size_t)(o * n) * blk;
        char *dst = (char *)out + (size_t)(o * n) * blk;
        memcpy(dst + (size_t)s * blk, src, (size_t)(n - s) * blk);
        memcpy(dst, src + (size_t)(n - s) * blk, (size_t)s * blk);
    }
    return SM_OK;
}

/* Clamps starts so a box of `ext` fits in xs (XLA); SM_EINVAL if it can't. */
static sm_err clamp_starts(const char *op, const sm_shape *xs, const int64_t *start,
                           const int64_t *ext, int64_t *cl, char *err, size_t errlen)
{
    for (int d = 0; d < xs->rank; d++) {
        if (ext[d] < 0 || ext[d] > xs->dims[d]) {
            char b[128];
            return sm_fail(err, errlen, SM_EINVAL, "%s size %lld of dim %d exceeds shape %s", op,
                           (long long)ext[d], d, smk_fmt(xs, b, sizeof b));
        }
        int64_t hi = xs->dims[d] - ext[d];
        cl[d] = start[d] < 0 ? 0 : start[d] > hi ? hi : start[d];
    }
    return SM_OK;
}

sm_err sm_kern_dynamic_slice(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *start,
                             const int64_t *sizes, void *out, char *err, size_t errlen)
{
    size_t e;
    int64_t cl[SM_MAX_RANK];
    sm_err r = shape_elem(t, "dynamic_slice", &e, err, errlen);
    if (!r)
        r = clamp_starts("dynamic_slice", xs, start, sizes, cl, err, errlen);
    if (r)
        return r;
    sm_shape os = {.rank = xs->rank};
    memcpy(os.dims, sizes, sizeof(int64_t) * (size_t)xs->rank);
    copy_box(e, out, &os, NULL, x, xs, cl, NULL, sizes, xs->rank);
    return SM_OK;
}

sm_err sm_kern_dynamic_update_slice(sm_dtype t, const void *x, const sm_shape *xs, const void *upd,
                                    const sm_shape *us, const int64_t *start, void *out, char *err,
                                    size_t errlen)
{
    size_t e;
    int64_t cl[SM_MAX_RANK];
    sm_err r = shape_elem(t, "dynamic_update_slice", &e, err, errlen);
    if (r)
        return r;
    if (us->rank != xs->rank) {
        char b1[128], b2[128];
        return sm_fail(err, errlen, SM_EINVAL,
                       "dynamic_update_slice update %s does not match the rank of %s",
                       smk_fmt(us, b1, sizeof b1), smk_fmt(xs, b2, sizeof b2));
    }
    if ((r = clamp_starts("dynamic_update_slice", xs, start, us->dims, cl, err, errlen)))
        return r;
    int64_t n = smk_numel(xs);
    if (out != x && n > 0)
        memcpy(out, x, (size_t)n * e);
    copy_box(e, out, xs, cl, upd, us, NULL, NULL, us->dims, us->rank);
    return SM_OK;
}

/* ---- gathers -------------------------------------------------------------------------------- */

/* The fill value of dtype t (NaN, the integer minimum, 255, true) in *v. */
static void gather_fill_value(sm_dtype t, unsigned char *v)
{
    union {
        float f;
        double d;
        int32_t i;
        int64_t l;
        uint16_t h;
        uint8_t b;
    } u = {0};
    switch (t) {
    case SM_F32:
        u.f = NAN;
        break;
    case SM_F64:
        u.d = NAN;
        break;
    case SM_I32:
        u.i = INT32_MIN;
        break;
    case SM_I64:
        u.l = INT64_MIN;
        break;
    case SM_F16:
        u.h = 0x7e00;
        break;
    case SM_BF16:
        u.h = 0x7fc0;
        break;
    case SM_U8:
        u.b = 255;
        break;
    default:
        u.b = 1;
        break;
    }
    memcpy(v, &u, smk_elem(t));
}

/* The source position of index i along an axis of n, or -1 for the fill. */
static int64_t gather_pos(int64_t i, int64_t n, sm_kern_gather_mode mode)
{
    if (n <= 0)
        return -1;
    if (mode == SM_KERN_GATHER_WRAP)
        return ((i % n) + n) % n;
    if (i < 0)
        i += n;
    if (mode == SM_KERN_GATHER_CLIP)
        return i < 0 ? 0 : i >= n ? n - 1 : i;
    return i < 0 || i >= n ? -1 : i;
}

sm_err sm_kern_take(sm_dtype t, const void *x, const sm_shape *xs, int axis, const int64_t *idx,
                    const sm_shape *is, sm_kern_gather_mode mode, void *out, char *err,
                    size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "take", &e, err, errlen);
    if (r)
        return r;
    if (axis < 0 || axis >= xs->rank || xs->rank - 1 + is->rank > SM_MAX_RANK) {
        char b[128];
        return sm_fail(err, errlen, SM_EINVAL, "take: axis %d does not fit %s with %d-d indices",
                       axis, smk_fmt(xs, b, sizeof b), is->rank);
    }
    int64_t outer = 1, inner = 1, n = xs->dims[axis], ni = smk_numel(is);
    for (int d = 0; d < axis; d++)
        outer *= xs->dims[d];
    for (int d = axis + 1; d < xs->rank; d++)
        inner *= xs->dims[d];
    unsigned char fill[8];
    gather_fill_value(t, fill);
    size_t row = (size_t)inner * e;
    char *o = out;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < ni; j++, o += row) {
            int64_t k = gather_pos(idx[j], n, mode);
            if (k >= 0) {
                memcpy(o, (const char *)x + ((size_t)(a * n + k) * row), row);
            } else {
                for (int64_t q = 0; q < inner; q++)
                    memcpy(o + (size_t)q * e, fill, e);
            }
        }
    return SM_OK;
}

sm_err sm_kern_take_along_axis(sm_dtype t, const void *x, const sm_shape *xs, int axis,
                               const int64_t *idx, const sm_shape *is, sm_kern_gather_mode mode,
                               void *out, char *err, size_t errlen)
{
    size_t e;
    sm_err r = shape_elem(t, "take_along_axis", &e, err, errlen);
    if (r)
        return r;
    char b1[128], b2[128];
    if (is->rank != xs->rank || axis < 0 || axis >= xs->rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "take_along_axis: indices %s and array %s must have the same rank (axis %d)",
                       smk_fmt(is, b1, sizeof b1), smk_fmt(xs, b2, sizeof b2), axis);
    sm_shape os = *is;
    for (int d = 0; d < xs->rank; d++) {
        if (d == axis)
            continue;
        if (xs->dims[d] != is->dims[d] && xs->dims[d] != 1 && is->dims[d] != 1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "take_along_axis: indices %s do not broadcast with array %s "
                           "(dimension %d)",
                           smk_fmt(is, b1, sizeof b1), smk_fmt(xs, b2, sizeof b2), d);
        os.dims[d] = xs->dims[d] == 1 ? is->dims[d] : xs->dims[d];
    }
    int64_t xst[SM_MAX_RANK], ist[SM_MAX_RANK], pos[SM_MAX_RANK] = {0};
    dense_strides(xs, xst);
    dense_strides(is, ist);
    unsigned char fill[8];
    gather_fill_value(t, fill);
    int64_t no = smk_numel(&os), n = xs->dims[axis];
    char *o = out;
    for (int64_t q = 0; q < no; q++, o += e) {
        int64_t xo = 0, io = 0;
        for (int d = 0; d < xs->rank; d++) {
            io += (is->dims[d] == 1 ? 0 : pos[d]) * ist[d];
            if (d != axis)
                xo += (xs->dims[d] == 1 ? 0 : pos[d]) * xst[d];
        }
        int64_t k = gather_pos(idx[io], n, mode);
        if (k >= 0)
            memcpy(o, (const char *)x + (size_t)(xo + k * xst[axis]) * e, e);
        else
            memcpy(o, fill, e);
        for (int d = xs->rank - 1; d >= 0; d--) { /* next output position */
            if (++pos[d] < os.dims[d])
                break;
            pos[d] = 0;
        }
    }
    return SM_OK;
}

sm_err sm_kern_scatter(int set, sm_kern_binary_op op, sm_dtype t, void *out, int64_t nrows,
                       int64_t inner, const int64_t *ids, int64_t nids, const void *upd, char *err,
                       size_t errlen)
{
    if (nrows < 0 || inner < 0 || nids < 0)
        return sm_fail(err, errlen, SM_EINVAL, "scatter: negative sizes");
    size_t es = sm_dtype_size(t), row = (size_t)inner * es;
    sm_shape rs = {.rank = 1, .dims = {inner}};
    void *tmp = NULL;
    if (!set && row && !(tmp = malloc(row)))
        return sm_fail(err, errlen, SM_ENOMEM, "scatter: out of memory for a row of %lld bytes",
                       (long long)row);
    sm_err e = SM_OK;
    for (int64_t i = 0; i < nids && !e; i++) {
        int64_t r = ids[i] < 0 ? ids[i] + nrows : ids[i];
        if (r < 0 || r >= nrows)
            continue;
        char *dst = (char *)out + (size_t)r * row;
        const char *src = (const char *)upd + (size_t)i * row;
        if (set) {
            memcpy(dst, src, row);
        } else if (!(e = sm_kern_binary(op, t, dst, &rs, src, &rs, tmp, err, errlen))) {
            memcpy(dst, tmp, row);
        }
    }
    free(tmp);
    return e;
}
