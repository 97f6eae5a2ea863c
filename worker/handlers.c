#include "handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assemble.h"
#include "ckpt.h"
#include "sm_block.h"
#include "sm_checksum.h"
#include "sm_log.h"
#include "traffic.h"

/* ---- PutShard ---------------------------------------------------------- */

/* Checks an upload header and allocates the shard it announces. */
static sm_err put_check_header(sm_handlers *h, const sm_svc_upload_header *hd, sm_store_shard **out,
                               char *err, size_t errlen)
{
    char b[96];
    int64_t nbytes = 0;
    sm_err e;
    if (hd->array_id.v == 0)
        return sm_fail(err, errlen, SM_EINVAL, "the PutShard header has no array id (0)");
    if (hd->ndevices < 1 || hd->ndevices > SM_MAX_WORKER_DEVICES)
        return sm_fail(err, errlen, SM_EINVAL, "the PutShard header lists %d devices, not 1..%d",
                       hd->ndevices, SM_MAX_WORKER_DEVICES);
    for (int k = 0; k < hd->ndevices; k++) {
        if ((e = sm_store_check_device(h->store, hd->devices[k], err, errlen)))
            return e;
        for (int j = 0; j < k; j++)
            if (hd->devices[j] == hd->devices[k])
                return sm_fail(err, errlen, SM_EINVAL, "the PutShard header lists device %d twice",
                               (int)hd->devices[k]);
    }
    if (sm_dtype_size(hd->dtype) == 0)
        return sm_fail(err, errlen, SM_EINVAL, "the PutShard header has no valid dtype (%d)",
                       (int)hd->dtype);
    if (hd->shape.rank < 0 || hd->shape.rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "the PutShard header has rank %d, not 0..%d",
                       hd->shape.rank, SM_MAX_RANK);
    for (int d = 0; d < hd->shape.rank; d++)
        if (hd->shape.dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "the PutShard shape %s has a negative dimension",
                           sm_shape_format(&hd->shape, b, sizeof b));
    if ((e = sm_shape_nbytes(&hd->shape, hd->dtype, &nbytes, err, errlen)))
        return e == SM_EOVERFLOW ? SM_EINVAL : e;
    if (hd->total_bytes != nbytes)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the PutShard header announces %lld bytes but a shard of shape %s and "
                       "dtype %s has %lld",
                       (long long)hd->total_bytes, sm_shape_format(&hd->shape, b, sizeof b),
                       sm_dtype_name(hd->dtype), (long long)nbytes);
    return sm_store_shard_alloc(h->store, hd->dtype, &hd->shape, out, err, errlen);
}

/* One target of a PutShard stream: its header's devices and its shard. */
typedef struct {
    sm_store_shard *shards[SM_MAX_WORKER_DEVICES];
    int32_t devices[SM_MAX_WORKER_DEVICES];
    int ndev;
    int64_t got;
    uint64_t sum; /* the verified checksum, once last */
    int shm;      /* its bytes came out of the client's segment (ShmRef) */
} put_target;

/* One PutShard stream: the state its messages are checked against. Its
 * targets (one, or several of one array in turn) are stored together at
 * its end. */
typedef struct {
    sm_handlers *h;
    uint64_t epoch;
    put_target *t; /* nt of them; the last is the current one */
    int nt, first, last;
    int64_t got;
    sm_array_id array;
    sm_checksum *ck;
} put_stream;

/* Starts the target whose header m carries (the first, or the next after
 * a last message). */
static sm_err put_begin(put_stream *ps, const sm_svc_upload_msg *m, char *err, size_t errlen)
{
    const sm_svc_upload_header *hd = &m->header;
    sm_err e;
    if (!ps->first && hd->array_id.v != ps->array.v)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a PutShard stream carries targets of one array (%llu), not also of %llu",
                       (unsigned long long)ps->array.v, (unsigned long long)hd->array_id.v);
    if (ps->nt == SM_SVC_MAX_BATCH)
        return sm_fail(err, errlen, SM_EINVAL, "a PutShard stream carries at most %d targets",
                       SM_SVC_MAX_BATCH);
    for (int k = 0; k < hd->ndevices && k < SM_MAX_WORKER_DEVICES; k++)
        for (int i = 0; i < ps->nt; i++)
            for (int j = 0; j < ps->t[i].ndev; j++)
                if (ps->t[i].devices[j] == hd->devices[k])
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "device %d is in two targets of the PutShard stream",
                                   (int)hd->devices[k]);
    put_target *t = realloc(ps->t, sizeof *t * (size_t)(ps->nt + 1));
    if (!t)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a PutShard target");
    ps->t = t;
    t = &ps->t[ps->nt++];
    memset(t, 0, sizeof *t);
    if (ps->first) /* the identity the headers are checked against (or a newer
                    * one, then the final put fails) is the one stored under */
        ps->epoch = sm_store_epoch(ps->h->store);
    if ((e = put_check_header(ps->h, hd, &t->shards[0], err, errlen)))
        return e;
    ps->first = 0;
    ps->last = 0;
    ps->got = 0;
    sm_checksum_reset(ps->ck);
    ps->array = hd->array_id;
    t->ndev = hd->ndevices;
    memcpy(t->devices, hd->devices, (size_t)t->ndev * sizeof *t->devices);
    if (!hd->shm.name[0])
        return SM_OK;
    /* The bytes lie in the client's segment: the header is the target's
     * last message, and the copy out of the segment is the upload. */
    if (!ps->h->segs)
        return sm_fail(err, errlen, SM_EPRECONDITION,
                       "this worker runs with --transport grpc: it takes no ShmRef");
    if (!m->last || m->len)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a PutShard header with a ShmRef is its target's last message, without "
                       "data");
    if ((e = sm_segmap_gather(ps->h->segs, &hd->shm, hd->dtype, t->shards[0], &t->sum, err,
                              errlen)))
        return e;
    t->shm = 1;
    ps->got = t->shards[0]->nbytes;
    return SM_OK;
}

/* Checks one message against the stream so far (a header on the first one
 * and after each last one, the order and bounds of its data) and places its
 * data in the current target's shard at its offset. */
static sm_err put_place(void *user, const sm_svc_upload_msg *m, void **dst, char *err,
                        size_t errlen)
{
    put_stream *ps = user;
    sm_err e;
    if (ps->first || (ps->last && m->has_header)) {
        if (!m->has_header)
            return sm_fail(err, errlen, SM_EINVAL, "the first PutShard message has no header");
        if ((e = put_begin(ps, m, err, errlen)))
            return e;
    } else if (m->has_header) {
        return sm_fail(err, errlen, SM_EINVAL,
                       "PutShard message at offset %lld carries a second header",
                       (long long)m->offset);
    }
    if (ps->last)
        return sm_fail(err, errlen, SM_EINVAL,
                       "PutShard message at offset %lld came after the last one",
                       (long long)m->offset);
    const sm_store_shard *sh = ps->t[ps->nt - 1].shards[0];
    if (ps->t[ps->nt - 1].shm) /* copied already; no data follows */
        return SM_OK;
    if (m->offset != ps->got)
        return sm_fail(err, errlen, SM_EINVAL,
                       "chunk at offset %lld %s: %lld bytes had arrived, so the next chunk must "
                       "start at offset %lld",
                       (long long)m->offset,
                       m->offset < ps->got ? "overlaps data already received" : "leaves a gap",
                       (long long)ps->got, (long long)ps->got);
    if ((int64_t)m->len > sh->nbytes - ps->got)
        return sm_fail(err, errlen, SM_EINVAL,
                       "chunk at offset %lld of %zu bytes runs past the end of the %lld-byte shard",
                       (long long)m->offset, m->len, (long long)sh->nbytes);
    *dst = (char *)sh->data + ps->got;
    return SM_OK;
}

/* Checksums data as it lands in the shard. */
static void put_copied(void *user, const void *p, size_t n)
{
    put_stream *ps = user;
    sm_checksum_update(ps->ck, p, n);
}

/* After a message was placed: counts its bytes and checks the total and
 * the checksum on the last one of a target. */
static sm_err put_account(put_stream *ps, const sm_svc_upload_msg *m, char *err, size_t errlen)
{
    put_target *t = &ps->t[ps->nt - 1];
    ps->got += (int64_t)m->len;
    sm_traffic_add(SM_TRAFFIC_PUT_IN, (int64_t)m->len);
    t->got = ps->got;
    if (!m->last)
        return SM_OK;
    ps->last = 1;
    uint64_t sum = t->shm ? t->sum : sm_checksum_digest(ps->ck);
    if (ps->got != t->shards[0]->nbytes)
        return sm_fail(
            err, errlen, SM_EINVAL, "the upload of array %llu ended after %lld of %lld bytes",
            (unsigned long long)ps->array.v, (long long)ps->got, (long long)t->shards[0]->nbytes);
    if (!t->shm && sum != m->checksum)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "checksum mismatch on array %llu: the worker received %016llx, the "
                       "sender says %016llx",
                       (unsigned long long)ps->array.v, (unsigned long long)sum,
                       (unsigned long long)m->checksum);
    t->shards[0]->has_checksum = 1;
    t->shards[0]->checksum = sum;
    t->sum = sum;
    return SM_OK;
}

/* Stores every target of ps at once (all or none). */
static sm_err put_store(put_stream *ps, sm_svc_upload_reply *out, char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; i < ps->nt; i++)
        n += ps->t[i].ndev;
    int32_t *devs = malloc(sizeof *devs * (size_t)n);
    sm_store_shard **sh = malloc(sizeof *sh * (size_t)n);
    sm_err e = SM_OK;
    if (!devs || !sh) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory storing %d shards", n);
        goto done;
    }
    n = 0;
    for (int i = 0; i < ps->nt && !e; i++) {
        put_target *t = &ps->t[i];
        for (int k = 1; k < t->ndev && !e; k++) /* the target's devices share its bytes */
            e = sm_store_shard_share(t->shards[0], &t->shards[k], err, errlen);
        for (int k = 0; k < t->ndev; k++) {
            devs[n] = t->devices[k];
            sh[n++] = t->shards[k];
        }
    }
    if (!e && !(e = sm_store_put(ps->h->store, ps->epoch, ps->array, n, devs, sh, err, errlen))) {
        out->bytes = 0;
        for (int i = 0; i < ps->nt; i++) {
            memset(ps->t[i].shards, 0, sizeof ps->t[i].shards); /* the store's now */
            out->bytes += ps->t[i].got;
            out->target_bytes[i] = ps->t[i].got;
            out->target_checksum[i] = ps->t[i].sum;
        }
        out->ntargets = ps->nt;
        out->checksum = ps->t[ps->nt - 1].sum;
        out->array_ready = 0;
    }
done:
    free(devs);
    free(sh);
    return e;
}

static sm_err h_put_shard(void *user, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                          size_t errlen)
{
    put_stream ps = {.h = user, .first = 1};
    sm_svc_upload_sink sink = {put_place, put_copied, &ps};
    int end = 0;
    sm_svc_upload_msg m;
    sm_err e;

    if (!(ps.ck = sm_checksum_create())) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
        goto out;
    }
    for (;;) {
        memset(&m, 0, sizeof m);
        if ((e = sm_svc_upload_recv_into(in, &sink, &m, &end, err, errlen)))
            goto out;
        if (end)
            break;
        if ((e = put_account(&ps, &m, err, errlen)))
            goto out;
    }
    if (ps.first) {
        e = sm_fail(err, errlen, SM_EINVAL, "the PutShard stream ended before its header");
        goto out;
    }
    if (!ps.last) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "the upload of array %llu ended after %lld of %lld bytes without a last "
                    "message",
                    (unsigned long long)ps.array.v, (long long)ps.got,
                    (long long)ps.t[ps.nt - 1].shards[0]->nbytes);
        goto out;
    }
    if ((e = put_store(&ps, out, err, errlen)))
        goto out;
    SM_DEBUG("stored array %llu (%lld bytes, %d target(s)) from device %d",
             (unsigned long long)ps.array.v, (long long)out->bytes, ps.nt, (int)ps.t[0].devices[0]);
out:
    if (e == SM_ECANCELLED)
        SM_DEBUG("upload of array %llu cancelled after %lld bytes; discarded",
                 (unsigned long long)ps.array.v, (long long)ps.got);
    for (int i = 0; i < ps.nt; i++)
        for (int k = 0; k < SM_MAX_WORKER_DEVICES; k++)
            sm_store_shard_release(ps.t[i].shards[k]);
    free(ps.t);
    sm_checksum_free(ps.ck);
    return e;
}

/* ---- GetShard ---------------------------------------------------------- */

typedef struct {
    sm_svc_download_out *out;
    sm_checksum *ck;
    sm_shape shape;
    sm_dtype dtype;
    int64_t total;
    int64_t sent;
    int known;    /* the checksum of all the bytes sent is known: sum */
    uint64_t sum; /* (the shard's, recorded when it was verified on upload) */
} get_stream;

static void get_release(void *arg)
{
    sm_store_shard_release(arg);
}

/* Sends len bytes at data as the next chunk (first: with meta; the one that
 * reaches total: last, with the checksum). If owner is not NULL, data lies
 * in owner's buffer and is sent without a copy, under a reference to owner
 * that the network layer drops once done with it. */
static sm_err get_send(get_stream *gs, const void *data, size_t len, sm_store_shard *owner,
                       char *err, size_t errlen)
{
    sm_svc_chunk c;
    memset(&c, 0, sizeof c);
    c.has_meta = gs->sent == 0;
    c.shape = gs->shape;
    c.dtype = gs->dtype;
    c.total_bytes = gs->total;
    c.offset = gs->sent;
    c.data = data;
    c.len = len;
    if (!gs->known)
        sm_checksum_update(gs->ck, data, len);
    gs->sent += (int64_t)len;
    c.last = gs->sent == gs->total;
    if (c.last)
        c.checksum = gs->known ? gs->sum : sm_checksum_digest(gs->ck);
    if (owner && len) {
        c.release = get_release;
        c.release_arg = sm_store_shard_ref(owner);
    }
    sm_err e = sm_svc_download_send(gs->out, &c, err, errlen);
    if (!e)
        sm_traffic_add(SM_TRAFFIC_GET_OUT, (int64_t)len);
    return e;
}

/* Streams a sub-box of sh: blocks of whole rows along a split dimension k
 * are packed with sm_block_copy into a staging buffer of at most one chunk,
 * which is sent whenever the next block no longer fits. */
static sm_err get_send_box(get_stream *gs, const sm_store_shard *sh, const sm_index *box, char *err,
                           size_t errlen)
{
    size_t elem = sm_dtype_size(sh->dtype);
    int rank = box->rank;
    int64_t ext[SM_MAX_RANK], idx[SM_MAX_RANK] = {0}, zero[SM_MAX_RANK] = {0};
    int64_t cap = gs->total < SM_SVC_CHUNK ? gs->total : SM_SVC_CHUNK;
    for (int d = 0; d < rank; d++)
        ext[d] = box->r[d].stop - box->r[d].start;
    /* k: the outermost dimension whose inner block (dims after k) fits a chunk. */
    int64_t inner;
    int k = sm_block_split(ext, rank, elem, cap, &inner);
    char *stage = malloc((size_t)cap);
    if (!stage)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a %lld-byte staging buffer",
                       (long long)cap);
    sm_err e = SM_OK;
    int64_t fill = 0;
    for (;;) {
        int64_t c = (cap - fill) / inner;
        if (c > ext[k] - idx[k])
            c = ext[k] - idx[k];
        if (c == 0) {
            if ((e = get_send(gs, stage, (size_t)fill, NULL, err, errlen)))
                goto done;
            fill = 0;
            continue;
        }
        int64_t src_off[SM_MAX_RANK], extent[SM_MAX_RANK];
        sm_shape dst_shape = {.rank = rank};
        sm_block_part(idx, ext, rank, k, c, src_off, extent);
        for (int d = 0; d < rank; d++) {
            src_off[d] += box->r[d].start;
            dst_shape.dims[d] = extent[d];
        }
        if ((e = sm_block_copy(stage + fill, &dst_shape, zero, sh->data, &sh->shape, src_off,
                               extent, elem, err, errlen)))
            goto done;
        fill += c * inner;
        if (!sm_block_next(idx, ext, k, c))
            break;
    }
    if (fill)
        e = get_send(gs, stage, (size_t)fill, NULL, err, errlen);
done:
    free(stage);
    return e;
}

/* Writes box of shard sh straight into the client's segment (shm), then
 * sends the one chunk that says so: meta, last, no data, the checksum of
 * the bytes written. */
static sm_err get_shm(sm_handlers *h, get_stream *gs, const sm_store_shard *sh, const sm_index *box,
                      const sm_svc_shm_ref *shm, char *err, size_t errlen)
{
    sm_svc_chunk c;
    sm_err e;
    if (!h->segs)
        return sm_fail(err, errlen, SM_EPRECONDITION,
                       "this worker runs with --transport grpc: it takes no ShmRef");
    memset(&c, 0, sizeof c);
    if ((e = sm_segmap_scatter(h->segs, shm, sh, box, &c.checksum, err, errlen)))
        return e;
    c.has_meta = 1;
    c.shape = gs->shape;
    c.dtype = gs->dtype;
    c.total_bytes = gs->total;
    c.last = 1;
    return sm_svc_download_send(gs->out, &c, err, errlen);
}

/* Streams device's shard of array id (or the sub-box req_box of it, if not
 * NULL) to out, or writes it into the client's segment shm (NULL: none). */
static sm_err get_one(sm_handlers *h, sm_array_id id, int32_t device, const sm_index *req_box,
                      const sm_svc_shm_ref *shm, sm_svc_download_out *out, char *err, size_t errlen)
{
    sm_store_shard *sh = NULL;
    get_stream gs = {.out = out};
    sm_err e;
    if ((e = sm_store_get(h->store, id, device, &sh, err, errlen)))
        return e;
    sm_index box = sm_index_full(&sh->shape);
    if (req_box) {
        if ((e = sm_index_check(req_box, &sh->shape, "shard", err, errlen)))
            goto done;
        box = *req_box;
    }
    gs.shape = sm_index_shape(&box);
    gs.dtype = sh->dtype;
    if ((e = sm_shape_nbytes(&gs.shape, sh->dtype, &gs.total, err, errlen)))
        goto done;
    if (!(gs.ck = sm_checksum_create())) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
        goto done;
    }
    if (shm) {
        e = get_shm(h, &gs, sh, &box, shm, err, errlen);
    } else if (gs.total == 0) {
        e = get_send(&gs, NULL, 0, NULL, err, errlen);
    } else if (sm_shape_equal(&gs.shape, &sh->shape)) {
        /* the whole shard: its recorded checksum, checked by the client
         * against the bytes it received, covers the shard's time here too */
        gs.known = sh->has_checksum;
        gs.sum = sh->checksum;
        while (!e && gs.sent < gs.total) {
            int64_t n = gs.total - gs.sent < SM_SVC_CHUNK ? gs.total - gs.sent : SM_SVC_CHUNK;
            e = get_send(&gs, (const char *)sh->data + gs.sent, (size_t)n, sh, err, errlen);
        }
    } else {
        e = get_send_box(&gs, sh, &box, err, errlen);
    }
done:
    sm_checksum_free(gs.ck);
    sm_store_shard_release(sh);
    return e;
}

static sm_err h_get_shard(void *user, const sm_svc_download_req *req, sm_svc_download_out *out,
                          char *err, size_t errlen)
{
    sm_handlers *h = user;
    sm_err e = SM_OK;
    if (req->array.id.v == 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "GetShard on a worker needs an array id (workers do not know names)");
    if (req->ndevices == 0)
        return get_one(h, req->array.id, req->device, req->has_box ? &req->box : NULL,
                       req->shm.name[0] ? &req->shm : NULL, out, err, errlen);
    /* Several whole shards, one after the other: every device is checked
     * before anything is sent. */
    for (int k = 0; k < req->ndevices && !e; k++) {
        for (int m = 0; m < k; m++)
            if (req->devices[m] == req->devices[k])
                return sm_fail(err, errlen, SM_EINVAL, "device %d is asked for twice",
                               (int)req->devices[k]);
        sm_store_shard *sh = NULL;
        if (!(e = sm_store_get(h->store, req->array.id, req->devices[k], &sh, err, errlen)))
            sm_store_shard_release(sh);
    }
    for (int k = 0; k < req->ndevices && !e; k++)
        e = get_one(h, req->array.id, req->devices[k], NULL, NULL, out, err, errlen);
    return e;
}

/* ---- FreeArray, Stats ---------------------------------------------------- */

static sm_err h_free_array(void *user, sm_array_id id, int ndevices, const int32_t *devices,
                           char *err, size_t errlen)
{
    sm_handlers *h = user;
    int freed = 0;
    sm_err e = sm_store_free_array(h->store, id, ndevices, devices, &freed, err, errlen);
    if (!e)
        SM_DEBUG("freed %d shard(s) of array %llu", freed, (unsigned long long)id.v);
    return e;
}

static sm_err h_stats(void *user, sm_svc_worker_stats *out, char *err, size_t errlen)
{
    sm_handlers *h = user;
    uint64_t t[SM_TRAFFIC_COUNT];
    out->ndevices = sm_store_stats(h->store, out->devices, out->device_bytes, &out->shards);
    sm_traffic_get(t);
    out->shm_transfer_bytes = (int64_t)(t[SM_TRAFFIC_SHM_PUT_IN] + t[SM_TRAFFIC_SHM_GET_OUT]);
    out->peer_shm_bytes = (int64_t)t[SM_TRAFFIC_SHM_PEER_IN];
    out->peer_grpc_bytes = (int64_t)t[SM_TRAFFIC_PEER_IN];
    out->collective_in_place_bytes = (int64_t)t[SM_TRAFFIC_SHM_DIRECT_IN];
    return SM_OK;
}

static sm_err h_assemble(void *user, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                         size_t errlen)
{
    return sm_assemble_run(user, req, bytes, err, errlen);
}

static sm_err h_write_checkpoint(void *user, const sm_svc_ckpt_write_req *req,
                                 sm_svc_ckpt_file *out, char *err, size_t errlen)
{
    return sm_ckpt_write(user, req, out, err, errlen);
}

static sm_err h_read_manifest(void *user, const char *dir, char **text, char *err, size_t errlen)
{
    (void)user;
    return sm_ckpt_manifest_read(dir, text, err, errlen);
}

/* ---- ShardInfo --------------------------------------------------------- */

/* What this worker holds of an array on each device asked about: the
 * coordinator's check before it commits a direct upload. A device the
 * worker does not own is an error; a shard it does not hold is absent. */
static sm_err h_shard_info(void *user, sm_array_id id, int ndevices, const int32_t *devices,
                           sm_svc_shard_state *out, char *err, size_t errlen)
{
    sm_handlers *h = user;
    for (int k = 0; k < ndevices; k++) {
        sm_store_shard *sh = NULL;
        char ignore[256];
        sm_err e = sm_store_check_device(h->store, devices[k], err, errlen);
        if (e)
            return e;
        out[k].device = devices[k];
        if (sm_store_get(h->store, id, devices[k], &sh, ignore, sizeof ignore))
            continue;
        out[k].present = 1;
        out[k].bytes = sh->nbytes;
        if (sh->has_checksum) {
            out[k].checksum = sh->checksum;
        } else {
            sm_checksum *ck = sm_checksum_create();
            if (!ck) {
                sm_store_shard_release(sh);
                return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
            }
            sm_checksum_update(ck, sh->data, (size_t)sh->nbytes);
            out[k].checksum = sm_checksum_digest(ck);
            sm_checksum_free(ck);
        }
        sm_store_shard_release(sh);
    }
    return SM_OK;
}

const sm_svc_worker_ops sm_handlers_ops = {
    .put_shard = h_put_shard,
    .get_shard = h_get_shard,
    .free_array = h_free_array,
    .assemble = h_assemble,
    .stats = h_stats,
    .shard_info = h_shard_info,
    .write_checkpoint = h_write_checkpoint,
    .read_manifest = h_read_manifest,
};
