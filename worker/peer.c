#include "peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segmap.h"
#include "sm_block.h"
#include "sm_checksum.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "sm_shm.h"
#include "sm_svc_job.h"
#include "sm_time.h"
#include "traffic.h"

/* A proof's deadline; a failed proof is tried again after SM_PEER_SHM_RETRY_MS
 * (a success is kept for the peer address's life here). */
#define SM_PEER_SHM_PROBE_MS 2000
#define SM_PEER_SHM_RETRY_MS 60000
/* The most bytes of a piece one GetShard writes into a staging file: a
 * larger piece comes in parts, so a file holds at most this much. */
#define SM_PEER_SHM_PART ((int64_t)16 << 20)

struct sm_peer {
    sm_rpc_chans *chans;
    int deadline_ms;
    /* Shared memory (sm_peer_shm_enable): the staging files, the pool the
     * pages they hold during a pull are charged to; stage NULL: streams. */
    sm_shm_pool *stage;
    sm_array_pool *charge;
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

/* The deadline of one call: the peer cache's, or what is left before
 * until_ms (CLOCK_MONOTONIC ms; 0: no limit) when that is sooner, at least
 * 1 ms. */
static int peer_call_ms(const sm_peer *p, int64_t until_ms)
{
    if (until_ms <= 0)
        return p->deadline_ms;
    int64_t left = until_ms - sm_time_mono_ms();
    return left < 1 ? 1 : left < p->deadline_ms ? (int)left : p->deadline_ms;
}

sm_err sm_peer_shm_enable(sm_peer *p, sm_array_pool *charge, char *err, size_t errlen)
{
    sm_err e = p->stage ? SM_OK : sm_shm_pool_create(&p->stage, err, errlen);
    if (!e)
        p->charge = charge;
    return e;
}

void sm_peer_free(sm_peer *p)
{
    if (!p)
        return;
    sm_rpc_chans_free(p->chans);
    sm_shm_pool_free(p->stage);
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

/* ---- shared memory ------------------------------------------------------------ */

/* Whether the peer at address (channel ch) shares this worker's memory:
 * proven once, a failure tried again after a while (kept with the
 * channel). 0 without shared memory here. */
static int peer_shm_same(sm_peer *p, const char *address, sm_rpc_channel *ch)
{
    return p->stage &&
           sm_svc_shm_same(p->chans, address, ch, SM_PEER_SHM_PROBE_MS, SM_PEER_SHM_RETRY_MS);
}

/* A staging file of this worker taken for one pull: its pool name, which
 * the peer maps, and the bytes of its pages charged to the memory limit. */
typedef struct {
    sm_shm_seg seg;
    char name[SM_SHM_NAME_MAX];
    size_t charged;
} peer_stage;

/* Takes a staging file of at least len bytes, its pages charged and
 * allocated. SM_ERESOURCE (with a sentence) when the memory limit, /dev/shm
 * or the pool has no room: the caller then takes the stream. */
static sm_err peer_stage_take(sm_peer *p, size_t len, peer_stage *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->seg.fd = -1;
    if (sm_array_pool_charge(p->charge, len, err, errlen))
        return SM_ERESOURCE;
    sm_err e = sm_shm_pool_take(p->stage, len, &st->seg, err, errlen);
    if (!e && (e = sm_shm_seg_reserve(&st->seg, 0, len, err, errlen)))
        sm_shm_pool_give(p->stage, &st->seg);
    if (e) {
        sm_array_pool_uncharge(p->charge, len);
        return SM_ERESOURCE;
    }
    st->charged = len;
    sm_shm_pool_file_name(p->stage, &st->seg, st->name);
    return SM_OK;
}

static void peer_stage_give(sm_peer *p, peer_stage *st)
{
    if (!st->seg.base)
        return;
    sm_shm_pool_give(p->stage, &st->seg); /* kept, with its pages, for the next pull */
    sm_array_pool_uncharge(p->charge, st->charged);
}

/* Pulls the box sub of the peer's shard into dst at dst_off through the
 * staging file st: GetShard with a ShmRef naming it (the peer writes the
 * box there, dense, and answers with one chunk: meta, last, checksum),
 * then the copy into dst, checked against that checksum. */
static sm_err peer_pull_part(sm_peer *p, sm_rpc_channel *ch, sm_array_id array, int32_t device,
                             const sm_index *sub, sm_dtype t, const peer_stage *st, void *dst,
                             const sm_shape *dst_shape, const int64_t *dst_off, int64_t until_ms,
                             char *err, size_t errlen)
{
    sm_svc_download_stream *ds = NULL;
    sm_svc_download_req req = {.array = {.id = array}, .device = device, .has_box = 1, .box = *sub};
    sm_shape bs = sm_index_shape(sub);
    int64_t want = 0;
    int got = 0, end = 0;
    uint64_t sent_sum = 0, sum = 0;
    char b1[96], b2[96];
    sm_err e = sm_shape_nbytes(&bs, t, &want, err, errlen);
    if (e)
        return e;
    snprintf(req.shm.name, sizeof req.shm.name, "%s", st->name);
    req.shm.global = bs;
    req.shm.box = sm_index_full(&bs);
    if ((e = sm_svc_download_open(ch, 1, &req, peer_call_ms(p, until_ms), &ds, err, errlen)))
        return e;
    while (!e) {
        sm_svc_chunk c;
        memset(&c, 0, sizeof c);
        if ((e = sm_svc_download_recv(ds, &c, &end, err, errlen)) || end)
            break;
        if (!got && c.has_meta && c.dtype != t)
            e = sm_fail(err, errlen, SM_EINVAL, "the source shard is %s, not %s",
                        sm_dtype_name(c.dtype), sm_dtype_name(t));
        else if (got || !c.has_meta || !c.last || c.len || !sm_shape_equal(&c.shape, &bs) ||
                 c.total_bytes != want)
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "it answered %s %s (%lld bytes, %zu inline) for a %s %s box written "
                        "into shared memory",
                        sm_dtype_name(c.dtype), sm_shape_format(&c.shape, b1, sizeof b1),
                        (long long)c.total_bytes, c.len, sm_dtype_name(t),
                        sm_shape_format(&bs, b2, sizeof b2));
        got = 1;
        sent_sum = c.checksum;
    }
    sm_svc_download_free(ds);
    if (!e && !got)
        e = sm_fail(err, errlen, SM_EDATALOSS, "the stream ended without its one chunk");
    if (!e)
        e = sm_segmap_unpack(st->seg.base, &bs, sm_dtype_size(t), dst, dst_shape, dst_off, st->name,
                             &sum, err, errlen);
    if (!e && sum != sent_sum)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checksum mismatch in shared memory (read %016llx, the sender says %016llx)",
                    (unsigned long long)sum, (unsigned long long)sent_sum);
    return e;
}

/* Pulls box through a staging file, in parts of at most SM_PEER_SHM_PART
 * bytes (whole rows of the outermost dimension k whose inner block fits,
 * as get_send_box in handlers.c packs chunks). When shared memory could
 * not be used, *stream is set (the stream then writes the whole box
 * again): 1 for no room (for the staging here, or for one more mapping
 * at the peer), for this piece; 2 for a peer that refuses the ShmRef (run
 * with --transport grpc since the proof) or cannot find the file (not on
 * this host after all), for every piece from it. */
static sm_err peer_pull_shm(sm_peer *p, sm_rpc_channel *ch, sm_array_id array, int32_t device,
                            const sm_index *box, sm_dtype t, void *dst, const sm_shape *dst_shape,
                            const int64_t *dst_off, int64_t until_ms, int *stream, char *err,
                            size_t errlen)
{
    int rank = box->rank;
    int64_t ext[SM_MAX_RANK], idx[SM_MAX_RANK] = {0}, inner = (int64_t)sm_dtype_size(t);
    for (int d = 0; d < rank; d++)
        ext[d] = box->r[d].stop - box->r[d].start;
    int k = rank ? sm_block_split(ext, rank, (size_t)inner, SM_PEER_SHM_PART, &inner) : -1;
    int64_t rows = rank ? SM_PEER_SHM_PART / inner : 1;
    if (rows < 1)
        rows = 1;
    if (rank && rows > ext[k])
        rows = ext[k];
    peer_stage st;
    char why[256];
    *stream = 0;
    if (peer_stage_take(p, (size_t)(rows * inner), &st, why, sizeof why)) {
        SM_DEBUG("a reshard piece goes over gRPC: %s", why);
        *stream = 1;
        return SM_OK;
    }
    sm_err e = SM_OK;
    for (;;) {
        sm_index sub = *box;
        int64_t off[SM_MAX_RANK], at[SM_MAX_RANK], extent[SM_MAX_RANK];
        int64_t n = rank ? (ext[k] - idx[k] < rows ? ext[k] - idx[k] : rows) : 1;
        sm_block_part(idx, ext, rank, k, n, at, extent);
        for (int d = 0; d < rank; d++) {
            sub.r[d].start = box->r[d].start + at[d];
            sub.r[d].stop = sub.r[d].start + extent[d];
            off[d] = dst_off[d] + at[d];
        }
        e = peer_pull_part(p, ch, array, device, &sub, t, &st, dst, dst_shape, off, until_ms, err,
                           errlen);
        if (e == SM_ERESOURCE) { /* the peer maps too many segments at once */
            *stream = 1;
            e = SM_OK;
        } else if (e == SM_EPRECONDITION || (e == SM_ENOTFOUND && strstr(err, st.name))) {
            *stream = 2;
            e = SM_OK;
        }
        if (e || *stream || rank == 0 || !sm_block_next(idx, ext, k, n))
            break;
    }
    peer_stage_give(p, &st);
    int64_t bytes = (int64_t)sm_dtype_size(t);
    for (int d = 0; d < rank; d++)
        bytes *= ext[d];
    if (!e && !*stream) /* (a piece the stream took after all counts there, whole) */
        sm_traffic_add(SM_TRAFFIC_SHM_PEER_IN, bytes);
    return e;
}

/* ---- streams -------------------------------------------------------------------- */

/* Pulls box over the GetShard stream, written as it arrives through cur. */
static sm_err peer_pull_stream(sm_peer *p, sm_rpc_channel *ch, sm_array_id array, int32_t device,
                               const sm_index *box, sm_dtype t, int64_t want, sm_peer_cursor *cur,
                               int64_t until_ms, char *err, size_t errlen)
{
    sm_svc_download_stream *st = NULL;
    sm_checksum *ck = NULL;
    sm_shape bs = sm_index_shape(box);
    char b1[96], b2[96];
    sm_err e;
    int64_t total = -1;
    int done = 0;

    if (!(ck = sm_checksum_create()))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    sm_svc_download_req req = {.array = {.id = array}, .device = device, .has_box = 1, .box = *box};
    if ((e = sm_svc_download_open(ch, 1, &req, peer_call_ms(p, until_ms), &st, err, errlen)))
        goto done;
    for (;;) {
        sm_svc_chunk c;
        int end = 0;
        memset(&c, 0, sizeof c);
        if ((e = sm_svc_download_recv(st, &c, &end, err, errlen)))
            goto done;
        sm_traffic_add(SM_TRAFFIC_PEER_IN, (int64_t)c.len);
        if (end)
            break;
        if (done) {
            e = sm_fail(err, errlen, SM_EFORMAT, "it sent data after the last chunk");
            goto done;
        }
        if (c.has_meta) {
            if (total < 0 && c.dtype != t) {
                e = sm_fail(err, errlen, SM_EINVAL, "the source shard is %s, not %s",
                            sm_dtype_name(c.dtype), sm_dtype_name(t));
                goto done;
            }
            if (total >= 0 || !sm_shape_equal(&c.shape, &bs) || c.dtype != t ||
                c.total_bytes != want) {
                e = sm_fail(err, errlen, SM_EDATALOSS,
                            "it answered %s %s (%lld bytes) for a %s %s box",
                            sm_dtype_name(c.dtype), sm_shape_format(&c.shape, b1, sizeof b1),
                            (long long)c.total_bytes, sm_dtype_name(t),
                            sm_shape_format(&bs, b2, sizeof b2));
                goto done;
            }
            total = c.total_bytes;
        }
        if (total < 0 || c.offset != cur->pos || (int64_t)c.len > total - cur->pos) {
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "it sent %zu bytes at offset %lld after %lld of %lld bytes", c.len,
                        (long long)c.offset, (long long)cur->pos, (long long)total);
            goto done;
        }
        sm_checksum_update(ck, c.data, c.len);
        peer_cursor_write(cur, c.data, (int64_t)c.len);
        if (c.last) {
            done = 1;
            uint64_t got = sm_checksum_digest(ck);
            if (cur->pos != total) {
                e = sm_fail(err, errlen, SM_EDATALOSS, "it ended after %lld of %lld bytes",
                            (long long)cur->pos, (long long)total);
                goto done;
            }
            if (got != c.checksum) {
                e = sm_fail(err, errlen, SM_EDATALOSS,
                            "checksum mismatch (received %016llx, sender says %016llx)",
                            (unsigned long long)got, (unsigned long long)c.checksum);
                goto done;
            }
        }
    }
    if (!done)
        e = sm_fail(err, errlen, SM_EDATALOSS, "the stream ended without its last chunk");
done:
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    return e;
}

sm_err sm_peer_fetch(sm_peer *p, const char *address, sm_array_id array, int32_t device,
                     const sm_index *box, sm_dtype t, void *dst, const sm_shape *dst_shape,
                     const int64_t *dst_off, int64_t until_ms, char *err, size_t errlen)
{
    sm_rpc_channel *ch = NULL;
    sm_peer_cursor cur;
    char b1[96], inner[512];
    int stream = 1;
    sm_err e;

    size_t elem = sm_dtype_size(t);
    sm_shape bs = sm_index_shape(box);
    int64_t want = 0;
    if ((e = peer_cursor_init(&cur, dst, dst_shape, dst_off, box, elem, err, errlen)))
        return e;
    if ((e = sm_shape_nbytes(&bs, t, &want, err, errlen)))
        return e;
    if ((e = sm_peer_channel(p, address, &ch, err, errlen)))
        return e;
    if (want > 0 && peer_shm_same(p, address, ch)) {
        e = peer_pull_shm(p, ch, array, device, box, t, dst, dst_shape, dst_off, until_ms, &stream,
                          inner, sizeof inner);
        if (stream == 2)
            sm_svc_shm_refused(p->chans, address); /* refused: its stream from now on */
    }
    if (!e && stream)
        e = peer_pull_stream(p, ch, array, device, box, t, want, &cur, until_ms, inner,
                             sizeof inner);
    if (e)
        return sm_fail(err, errlen, e, "pulling %s of array %llu device %d from %s: %s",
                       sm_index_format(box, b1, sizeof b1), (unsigned long long)array.v,
                       (int)device, address, inner);
    return SM_OK;
}
