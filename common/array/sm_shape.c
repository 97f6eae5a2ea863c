/* sm_shape: shapes, index boxes and strided block copies. */
#include "sm_shape.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_block.h"

/* Long enough for "[" + 8 dims of 20 digits + 7 commas + "]". */
#define SM_SHAPE_TEXT 200

/* Fails with SM_EINVAL unless s is a well-formed shape. */
static sm_err sm_shape_check(const sm_shape *s, char *err, size_t errlen)
{
    if (!s)
        return sm_fail(err, errlen, SM_EINVAL, "shape is NULL");
    if (s->rank < 0 || s->rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "shape rank %d is outside 0..%d", s->rank,
                       SM_MAX_RANK);
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "shape dimension %d is negative (%" PRId64 ")",
                           d, s->dims[d]);
    }
    return SM_OK;
}

sm_err sm_shape_make(sm_shape *out, int rank, const int64_t *dims, char *err, size_t errlen)
{
    if (!out)
        return sm_fail(err, errlen, SM_EINVAL, "output shape is NULL");
    if (rank < 0 || rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "rank %d is outside 0..%d", rank, SM_MAX_RANK);
    if (rank > 0 && !dims)
        return sm_fail(err, errlen, SM_EINVAL, "dims is NULL for a rank-%d shape", rank);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "dimension %d is negative (%" PRId64 ")", d,
                           dims[d]);
    }
    sm_shape s = {.rank = rank};
    for (int d = 0; d < rank; d++)
        s.dims[d] = dims[d];
    *out = s;
    return SM_OK;
}

sm_err sm_shape_numel(const sm_shape *s, int64_t *out, char *err, size_t errlen)
{
    sm_err e = sm_shape_check(s, err, errlen);
    if (e)
        return e;
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++) {
        if (__builtin_mul_overflow(n, s->dims[d], &n)) {
            char buf[SM_SHAPE_TEXT];
            return sm_fail(err, errlen, SM_EOVERFLOW, "shape %s has more than 2^63-1 elements",
                           sm_shape_format(s, buf, sizeof buf));
        }
    }
    *out = n;
    return SM_OK;
}

sm_err sm_shape_nbytes(const sm_shape *s, sm_dtype t, int64_t *out, char *err, size_t errlen)
{
    size_t size = sm_dtype_size(t);
    if (size == 0)
        return sm_fail(err, errlen, SM_EINVAL, "dtype %d is not a valid dtype", (int)t);
    int64_t n;
    sm_err e = sm_shape_numel(s, &n, err, errlen);
    if (e)
        return e;
    if (__builtin_mul_overflow(n, (int64_t)size, &n)) {
        char buf[SM_SHAPE_TEXT];
        return sm_fail(err, errlen, SM_EOVERFLOW, "shape %s of %s has more than 2^63-1 bytes",
                       sm_shape_format(s, buf, sizeof buf), sm_dtype_name(t));
    }
    *out = n;
    return SM_OK;
}

sm_err sm_shape_strides(const sm_shape *s, int64_t *strides, char *err, size_t errlen)
{
    int64_t n;
    sm_err e = sm_shape_numel(s, &n, err, errlen);
    if (e)
        return e;
    int64_t st = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        strides[d] = st;
        st *= s->dims[d] > 0 ? s->dims[d] : 1; /* cannot overflow: numel did not */
    }
    return SM_OK;
}

int sm_shape_equal(const sm_shape *a, const sm_shape *b)
{
    if (a->rank != b->rank || a->rank < 0 || a->rank > SM_MAX_RANK)
        return 0;
    for (int d = 0; d < a->rank; d++) {
        if (a->dims[d] != b->dims[d])
            return 0;
    }
    return 1;
}

char *sm_shape_format(const sm_shape *s, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    size_t n = 0;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < s->rank && d < SM_MAX_RANK && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, d ? ",%" PRId64 : "%" PRId64, s->dims[d]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

static const char *sm_skip_space(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    return p;
}

sm_err sm_shape_parse(const char *text, sm_shape *out, char *err, size_t errlen)
{
    if (!text || !out)
        return sm_fail(err, errlen, SM_EINVAL, "shape text or output is NULL");
    sm_shape s = {0};
    const char *p = sm_skip_space(text);
    char close = 0;
    if (*p == '[')
        close = ']';
    else if (*p == '(')
        close = ')';
    if (close)
        p = sm_skip_space(p + 1);
    while (*p && *p != close) {
        if (*p == '-')
            return sm_fail(err, errlen, SM_EINVAL, "shape '%s' has a negative dimension", text);
        if (!isdigit((unsigned char)*p))
            return sm_fail(err, errlen, SM_EINVAL, "shape '%s' has '%c' where a dimension belongs",
                           text, *p);
        if (s.rank == SM_MAX_RANK)
            return sm_fail(err, errlen, SM_EINVAL, "shape '%s' has more than %d dimensions", text,
                           SM_MAX_RANK);
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno == ERANGE)
            return sm_fail(err, errlen, SM_EOVERFLOW, "shape '%s' has a dimension above 2^63-1",
                           text);
        s.dims[s.rank++] = (int64_t)v;
        p = sm_skip_space(end);
        if (*p == ',') {
            p = sm_skip_space(p + 1);
        } else if (*p && *p != close) {
            return sm_fail(err, errlen, SM_EINVAL, "shape '%s' has '%c' where ',' belongs", text,
                           *p);
        }
    }
    if (close) {
        if (*p != close)
            return sm_fail(err, errlen, SM_EINVAL, "shape '%s' lacks its closing '%c'", text,
                           close);
        p = sm_skip_space(p + 1);
    }
    if (*p)
        return sm_fail(err, errlen, SM_EINVAL, "shape '%s' has text after its end", text);
    *out = s;
    return SM_OK;
}

sm_shape sm_index_shape(const sm_index *ix)
{
    sm_shape s = {.rank = ix->rank};
    for (int d = 0; d < ix->rank && d < SM_MAX_RANK; d++)
        s.dims[d] = ix->r[d].stop - ix->r[d].start;
    return s;
}

int sm_index_equal(const sm_index *a, const sm_index *b)
{
    if (a->rank != b->rank || a->rank < 0 || a->rank > SM_MAX_RANK)
        return 0;
    for (int d = 0; d < a->rank; d++) {
        if (a->r[d].start != b->r[d].start || a->r[d].stop != b->r[d].stop)
            return 0;
    }
    return 1;
}

char *sm_index_format(const sm_index *ix, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ix->rank && d < SM_MAX_RANK && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%" PRId64 ":%" PRId64, d ? ", " : "",
                              ix->r[d].start, ix->r[d].stop);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

sm_index sm_index_full(const sm_shape *s)
{
    sm_index ix = {.rank = s->rank};
    for (int d = 0; d < s->rank && d < SM_MAX_RANK; d++) {
        ix.r[d].start = 0;
        ix.r[d].stop = s->dims[d];
    }
    return ix;
}

sm_err sm_index_check(const sm_index *box, const sm_shape *shape, const char *what, char *err,
                      size_t errlen)
{
    char b1[160], b2[96];
    if (box->rank != shape->rank)
        return sm_fail(err, errlen, SM_EINVAL, "box %s has rank %d but the %s %s has rank %d",
                       sm_index_format(box, b1, sizeof b1), box->rank, what,
                       sm_shape_format(shape, b2, sizeof b2), shape->rank);
    for (int d = 0; d < box->rank; d++)
        if (box->r[d].start < 0 || box->r[d].start > box->r[d].stop ||
            box->r[d].stop > shape->dims[d])
            return sm_fail(err, errlen, SM_EINVAL, "box %s does not fit the %s %s (dimension %d)",
                           sm_index_format(box, b1, sizeof b1), what,
                           sm_shape_format(shape, b2, sizeof b2), d);
    return SM_OK;
}

/* Checks that the box (off, extent) fits in shape s; `which` names s. */
static sm_err sm_box_check(const sm_shape *s, const int64_t *off, const int64_t *extent,
                           const char *which, char *err, size_t errlen)
{
    for (int d = 0; d < s->rank; d++) {
        if (extent[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "block extent %" PRId64 " along dimension %d is negative", extent[d], d);
        if (off[d] < 0 || off[d] > s->dims[d] - extent[d]) {
            char buf[SM_SHAPE_TEXT];
            return sm_fail(err, errlen, SM_EINVAL,
                           "block at offset %" PRId64 " of extent %" PRId64
                           " along dimension %d does not fit in %s shape %s",
                           off[d], extent[d], d, which, sm_shape_format(s, buf, sizeof buf));
        }
    }
    return SM_OK;
}

/* Copies n runs of `size` bytes, stepping ds/ss bytes between runs. A
 * constant `size` lets the compiler turn memcpy into plain loads and stores. */
#define SM_COPY_RUNS(size)                                                                         \
    for (int64_t i = 0; i < n; i++)                                                                \
        memcpy(d + i * ds, s + i * ss, (size));

static void sm_copy_runs(char *d, const char *s, int64_t n, int64_t ds, int64_t ss, size_t run)
{
    switch (run) {
    case 1:
        SM_COPY_RUNS(1);
        break;
    case 2:
        SM_COPY_RUNS(2);
        break;
    case 4:
        SM_COPY_RUNS(4);
        break;
    case 8:
        SM_COPY_RUNS(8);
        break;
    case 16:
        SM_COPY_RUNS(16);
        break;
    default:
        SM_COPY_RUNS(run);
        break;
    }
}

sm_err sm_block_copy(void *dst, const sm_shape *dst_shape, const int64_t *dst_off, const void *src,
                     const sm_shape *src_shape, const int64_t *src_off, const int64_t *extent,
                     size_t elem, char *err, size_t errlen)
{
    sm_err e;
    int64_t nb;
    if (!dst_shape || !src_shape)
        return sm_fail(err, errlen, SM_EINVAL, "block copy shape is NULL");
    if ((e = sm_shape_check(dst_shape, err, errlen)) ||
        (e = sm_shape_check(src_shape, err, errlen)))
        return e;
    if (dst_shape->rank != src_shape->rank) {
        char a[SM_SHAPE_TEXT], b[SM_SHAPE_TEXT];
        return sm_fail(err, errlen, SM_EINVAL,
                       "block copy from shape %s to shape %s mixes ranks %d and %d",
                       sm_shape_format(src_shape, a, sizeof a),
                       sm_shape_format(dst_shape, b, sizeof b), src_shape->rank, dst_shape->rank);
    }
    if (elem == 0 || elem > INT32_MAX)
        return sm_fail(err, errlen, SM_EINVAL, "block copy element size %zu is invalid", elem);
    int rank = dst_shape->rank;
    if (rank > 0 && (!dst_off || !src_off || !extent))
        return sm_fail(err, errlen, SM_EINVAL, "block copy offsets or extent are NULL");
    if ((e = sm_box_check(src_shape, src_off, extent, "source", err, errlen)) ||
        (e = sm_box_check(dst_shape, dst_off, extent, "destination", err, errlen)))
        return e;
    /* Byte strides below are bounded by the byte sizes, checked here. */
    int64_t numel;
    if ((e = sm_shape_numel(src_shape, &numel, err, errlen)) ||
        __builtin_mul_overflow(numel, (int64_t)elem, &nb) ||
        (e = sm_shape_numel(dst_shape, &numel, err, errlen)) ||
        __builtin_mul_overflow(numel, (int64_t)elem, &nb)) {
        if (e)
            return e;
        return sm_fail(err, errlen, SM_EOVERFLOW,
                       "block copy shapes of %zu-byte elements exceed 2^63-1 bytes", elem);
    }
    for (int d = 0; d < rank; d++) {
        if (extent[d] == 0)
            return SM_OK;
    }
    if (!dst || !src)
        return sm_fail(err, errlen, SM_EINVAL, "block copy buffer is NULL");
    if (rank == 0) {
        memcpy(dst, src, elem);
        return SM_OK;
    }

    int64_t ss[SM_MAX_RANK], ds[SM_MAX_RANK];
    ss[rank - 1] = ds[rank - 1] = (int64_t)elem;
    for (int d = rank - 2; d >= 0; d--) {
        ss[d] = ss[d + 1] * src_shape->dims[d + 1];
        ds[d] = ds[d + 1] * dst_shape->dims[d + 1];
    }
    int64_t soff = 0, doff = 0;
    for (int d = 0; d < rank; d++) {
        soff += src_off[d] * ss[d];
        doff += dst_off[d] * ds[d];
    }

    /* Dimensions k..rank-1 form one contiguous run in both buffers when every
     * dimension after k is copied whole in both. */
    int k = rank - 1;
    int64_t run = extent[k] * (int64_t)elem;
    while (k > 0 && extent[k] == src_shape->dims[k] && extent[k] == dst_shape->dims[k]) {
        k--;
        run *= extent[k];
    }
    if (k == 0) {
        memcpy((char *)dst + doff, (const char *)src + soff, (size_t)run);
        return SM_OK;
    }

    /* Dimension k-1 is looped by sm_copy_runs; dimensions 0..k-2 by an odometer. */
    int outer = k - 1;
    int64_t cnt[SM_MAX_RANK] = {0};
    for (;;) {
        sm_copy_runs((char *)dst + doff, (const char *)src + soff, extent[outer], ds[outer],
                     ss[outer], (size_t)run);
        int j = outer - 1;
        for (; j >= 0; j--) {
            soff += ss[j];
            doff += ds[j];
            if (++cnt[j] < extent[j])
                break;
            soff -= extent[j] * ss[j];
            doff -= extent[j] * ds[j];
            cnt[j] = 0;
        }
        if (j < 0)
            break;
    }
    return SM_OK;
}

int sm_block_split(const int64_t *ext, int rank, size_t elem, int64_t cap, int64_t *inner)
{
    int k = rank - 1;
    *inner = (int64_t)elem;
    while (k > 0 && *inner * ext[k] <= cap) {
        *inner *= ext[k];
        k--;
    }
    return k;
}

void sm_block_part(const int64_t *idx, const int64_t *ext, int rank, int k, int64_t n, int64_t *at,
                   int64_t *extent)
{
    for (int d = 0; d < rank; d++) {
        at[d] = d <= k ? idx[d] : 0;
        extent[d] = d < k ? 1 : d == k ? n : ext[d];
    }
}

int sm_block_next(int64_t *idx, const int64_t *ext, int k, int64_t n)
{
    idx[k] += n;
    if (idx[k] < ext[k])
        return 1;
    idx[k] = 0;
    int d = k - 1;
    while (d >= 0 && ++idx[d] == ext[d])
        idx[d--] = 0;
    return d >= 0;
}
