#include "peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rpc.h"
#include "traffic.h"

struct sm_peer {
    sm_rpc_chans *chans;
    int deadline_ms;
};

sm_err sm_peer_create(const char *token, const sm_rpc_tls *tls, int deadline_ms, sm_peer **out,
                      char *err, size_t errlen)
{
    sm_peer *p = calloc(1, sizeof *p);
    if (!p || !(p->chans = sm_rpc_chans_create(token, tls, 0, 0))) {
        free(p);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating the peer cache");
    }
    p->deadline_ms = deadline_ms > 0 ? deadline_ms : 60000;
    *out = p;
    return SM_OK;
}

void sm_peer_free(sm_peer *p)
{
    if (!p)
        return;
    sm_rpc_chans_free(p->chans);
    free(p);
}

sm_err sm_peer_channel(sm_peer *p, const char *address, sm_rpc_channel **out, char *err,
                       size_t errlen)
{
    return sm_rpc_chans_get(p->chans, address, out, err, errlen);
}

/* Writes a row-major byte stream of a box into its place in a larger
 * row-major buffer: the stream's rows (the box's last dimension) are
 * contiguous in the destination, consecutive rows are not. */
typedef struct {
    char *dst;
    int rank;
    int64_t dst_stride[SM_MAX_RANK]; /* bytes */
    int64_t ext[SM_MAX_RANK];
    int64_t off[SM_MAX_RANK];
    int64_t row_bytes;
    int64_t pos; /* bytes written so far */
} sm_peer_cursor;

static void peer_cursor_write(sm_peer_cursor *c, const char *src, int64_t len)
{
    while (len > 0) {
        int64_t row = c->row_bytes ? c->pos / c->row_bytes : 0;
        int64_t in_row = c->row_bytes ? c->pos % c->row_bytes : 0;
        int64_t n = c->row_bytes - in_row < len ? c->row_bytes - in_row : len;
        int64_t at = 0;
        for (int d = c->rank - 1; d >= 0; d--) {
            int64_t idx = d == c->rank - 1 ? 0 : row % c->ext[d];
            if (d < c->rank - 1)
                row /= c->ext[d];
            at += (c->off[d] + idx) * c->dst_stride[d];
        }
        memcpy(c->dst + at + in_row, src, (size_t)n);
        src += n;
        len -= n;
        c->pos += n;
    }
}

static sm_err peer_cursor_init(sm_peer_cursor *c, void *dst, const sm_shape *dst_shape,
                               const int64_t *dst_off, const sm_index *box, size_t elem, char *err,
                               size_t errlen)
{
    char b1[160], b2[96];
    memset(c, 0, sizeof *c);
    c->dst = dst;
    c->rank = box->rank;
    if (box->rank != dst_shape->rank)
        return sm_fail(err, errlen, SM_EINVAL, "box %s has rank %d but the destination %s has %d",
                       sm_index_format(box, b1, sizeof b1), box->rank,
                       sm_shape_format(dst_shape, b2, sizeof b2), dst_shape->rank);
    int64_t stride = (int64_t)elem;
    for (int d = box->rank - 1; d >= 0; d--) {
        c->ext[d] = box->r[d].stop - box->r[d].start;
        c->off[d] = dst_off[d];
        if (c->ext[d] < 0 || dst_off[d] < 0 || dst_off[d] > dst_shape->dims[d] ||
            c->ext[d] > dst_shape->dims[d] - dst_off[d])
            return sm_fail(err, errlen, SM_EINVAL,
                           "box %s placed at offset %lld of dimension %d does not fit the "
                           "destination %s",
                           sm_index_format(box, b1, sizeof b1), (long long)dst_off[d], d,
                           sm_shape_format(dst_shape, b2, sizeof b2));
        c->dst_stride[d] = stride;
        stride *= dst_shape->dims[d] ? dst_shape->dims[d] : 1;
    }
    c->row_bytes = box->rank ? c->ext[box->rank - 1] * (int64_t)elem : (int64_t)elem;
    return SM_OK;
}

sm_err sm_peer_fetch(sm_peer *p, const char *address, sm_array_id array, int32_t device,
                     const sm_index *box, sm_dtype t, void *dst, const sm_shape *dst_shape,
                     const int64_t *dst_off, char *err, size_t errlen)
{
    sm_rpc_channel *ch = NULL;
    sm_svc_download_stream *st = NULL;
    sm_checksum *ck = NULL;
    sm_peer_cursor cur;
    char b1[96], b2[96], inner[512];
    sm_err e;
    int64_t total = -1;
    int done = 0;

    size_t elem = sm_dtype_size(t);
    sm_shape bs = sm_index_shape(box);
    int64_t want = 0;
    if ((e = peer_cursor_init(&cur, dst, dst_shape, dst_off, box, elem, err, errlen)))
        return e;
    if ((e = sm_shape_nbytes(&bs, t, &want, err, errlen)))
        return e;
    if ((e = sm_peer_channel(p, address, &ch, err, errlen)))
        return e;
    if (!(ck = sm_checksum_create()))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    sm_svc_download_req req = {.array = {.id = array}, .device = device, .has_box = 1, .box = *box};
    if ((e = sm_svc_download_open(ch, 1, &req, p->deadline_ms, &st, inner, sizeof inner)))
        goto fail_peer;
    for (;;) {
        sm_svc_chunk c;
        int end = 0;
        memset(&c, 0, sizeof c);
        if ((e = sm_svc_download_recv(st, &c, &end, inner, sizeof inner)))
            goto fail_peer;
        sm_traffic_add(SM_TRAFFIC_PEER_IN, (int64_t)c.len);
        if (end)
            break;
        if (done) {
            e = SM_EFORMAT;
            snprintf(inner, sizeof inner, "it sent data after the last chunk");
            goto fail_peer;
        }
        if (c.has_meta) {
            if (total < 0 && c.dtype != t) {
                e = SM_EINVAL;
                snprintf(inner, sizeof inner, "the source shard is %s, not %s",
                         sm_dtype_name(c.dtype), sm_dtype_name(t));
                goto fail_peer;
            }
            if (total >= 0 || !sm_shape_equal(&c.shape, &bs) || c.dtype != t ||
                c.total_bytes != want) {
                e = SM_EDATALOSS;
                snprintf(inner, sizeof inner, "it answered %s %s (%lld bytes) for a %s %s box",
                         sm_dtype_name(c.dtype), sm_shape_format(&c.shape, b1, sizeof b1),
                         (long long)c.total_bytes, sm_dtype_name(t),
                         sm_shape_format(&bs, b2, sizeof b2));
                goto fail_peer;
            }
            total = c.total_bytes;
        }
        if (total < 0 || c.offset != cur.pos || (int64_t)c.len > total - cur.pos) {
            e = SM_EDATALOSS;
            snprintf(inner, sizeof inner,
                     "it sent %zu bytes at offset %lld after %lld of %lld bytes", c.len,
                     (long long)c.offset, (long long)cur.pos, (long long)total);
            goto fail_peer;
        }
        sm_checksum_update(ck, c.data, c.len);
        peer_cursor_write(&cur, c.data, (int64_t)c.len);
        if (c.last) {
            done = 1;
            uint64_t got = sm_checksum_digest(ck);
            if (cur.pos != total) {
                e = SM_EDATALOSS;
                snprintf(inner, sizeof inner, "it ended after %lld of %lld bytes",
                         (long long)cur.pos, (long long)total);
                goto fail_peer;
            }
            if (got != c.checksum) {
                e = SM_EDATALOSS;
                snprintf(inner, sizeof inner,
                         "checksum mismatch (received %016llx, sender says %016llx)",
                         (unsigned long long)got, (unsigned long long)c.checksum);
                goto fail_peer;
            }
        }
    }
    if (!done) {
        e = SM_EDATALOSS;
        snprintf(inner, sizeof inner, "the stream ended without its last chunk");
        goto fail_peer;
    }
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    return SM_OK;
fail_peer:
    sm_fail(err, errlen, e, "pulling %s of array %llu device %d from %s: %s",
            sm_index_format(box, b1, sizeof b1), (unsigned long long)array.v, (int)device, address,
            inner);
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    return e;
}
