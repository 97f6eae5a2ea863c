/* client_transfer: box streaming, chunked uploads and downloads over sm_svc
 * streams, a small task runner and progress accounting for libshmap. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "sm_checksum.h"

/* ---- progress ------------------------------------------------------------ */

void client_progress_init(client_progress *p, const sm_client *c, int64_t total)
{
    p->c = c;
    p->done = 0;
    p->total = total;
    pthread_mutex_init(&p->mu, NULL);
    if (c->progress)
        c->progress(c->progress_user, 0, total);
}

void client_progress_add(client_progress *p, int64_t n)
{
    if (!p || !p->c->progress)
        return;
    pthread_mutex_lock(&p->mu);
    p->done += n;
    p->c->progress(p->c->progress_user, p->done, p->total);
    pthread_mutex_unlock(&p->mu);
}

void client_progress_destroy(client_progress *p)
{
    pthread_mutex_destroy(&p->mu);
}

int client_stream_deadline(const sm_client *c, int64_t bytes)
{
    int64_t ms = (int64_t)c->timeout_ms + bytes / 20000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ---- boxes ----------------------------------------------------------------- */

sm_err client_box_init(client_box *b, const sm_shape *shape, const sm_index *box, sm_dtype t,
                       char *err, size_t errlen)
{
    sm_err e;
    int64_t numel = 1;

    memset(b, 0, sizeof *b);
    if (box->rank != shape->rank)
        return sm_fail(err, errlen, SM_EINVAL, "a box of rank %d does not fit an array of rank %d",
                       box->rank, shape->rank);
    b->rank = shape->rank;
    b->elem = sm_dtype_size(t);
    if ((e = sm_shape_strides(shape, b->stride, err, errlen)))
        return e;
    for (int d = 0; d < b->rank; d++) {
        const sm_range *r = &box->r[d];
        if (r->start < 0 || r->stop < r->start || r->stop > shape->dims[d]) {
            char sb[128];
            return sm_fail(
                err, errlen, SM_EINVAL, "box [%lld, %lld) of dimension %d lies outside shape %s",
                (long long)r->start, (long long)r->stop, d, sm_shape_format(shape, sb, sizeof sb));
        }
        b->off[d] = r->start;
        b->ext[d] = r->stop - r->start;
        numel *= b->ext[d];
    }
    b->nbytes = numel * (int64_t)b->elem;
    /* The last dimension that is not taken whole starts the contiguous run. */
    b->cdim = 0;
    for (int d = b->rank - 1; d >= 0; d--)
        if (b->ext[d] != shape->dims[d]) {
            b->cdim = d;
            break;
        }
    b->run = 1;
    for (int d = b->cdim; d < b->rank; d++)
        b->run *= b->ext[d];
    if (b->run == 0)
        b->run = 1;
    return SM_OK;
}

/* Byte address in the buffer of box byte pos, and how many bytes from there
 * are contiguous in both the box stream and the buffer. */
static int64_t box_locate(const client_box *b, int64_t pos, int64_t *avail)
{
    int64_t e = pos / (int64_t)b->elem, bi = pos % (int64_t)b->elem;
    int64_t q = e / b->run, w = e % b->run, base = 0;

    for (int d = b->cdim - 1; d >= 0; d--) {
        base += (b->off[d] + q % b->ext[d]) * b->stride[d];
        q /= b->ext[d];
    }
    for (int d = b->cdim; d < b->rank; d++)
        base += b->off[d] * b->stride[d];
    *avail = (b->run - w) * (int64_t)b->elem - bi;
    return (base + w) * (int64_t)b->elem + bi;
}

void client_box_gather(const client_box *b, const void *buf, int64_t pos, void *out, size_t len)
{
    char *o = out;
    while (len > 0) {
        int64_t avail, at = box_locate(b, pos, &avail);
        size_t n = (size_t)avail < len ? (size_t)avail : len;
        memcpy(o, (const char *)buf + at, n);
        o += n;
        pos += (int64_t)n;
        len -= n;
    }
}

void client_box_scatter(const client_box *b, void *buf, int64_t pos, const void *in, size_t len)
{
    const char *s = in;
    while (len > 0) {
        int64_t avail, at = box_locate(b, pos, &avail);
        size_t n = (size_t)avail < len ? (size_t)avail : len;
        memcpy((char *)buf + at, s, n);
        s += n;
        pos += (int64_t)n;
        len -= n;
    }
}

/* ---- uploads ----------------------------------------------------------------- */

sm_err client_upload_box(sm_client *c, sm_array_id id, int ndevices, const int32_t *devices,
                         sm_dtype t, const void *src, const sm_shape *src_shape,
                         const sm_index *box, client_progress *prog, int *ready, char *err,
                         size_t errlen)
{
    client_box b;
    sm_svc_upload_stream *st = NULL;
    sm_checksum *ck = NULL;
    char *stage = NULL;
    sm_svc_upload_msg msg;
    sm_svc_upload_reply reply;
    sm_err e;

    if ((e = client_box_init(&b, src_shape, box, t, err, errlen)))
        return e;
    ck = sm_checksum_create();
    stage = malloc(b.nbytes < SM_SVC_CHUNK ? (size_t)b.nbytes + 1 : SM_SVC_CHUNK);
    if (!ck || !stage) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a %d-byte upload buffer",
                    SM_SVC_CHUNK);
        goto fail;
    }
    if ((e = sm_svc_upload_open(c->ch, 0, client_stream_deadline(c, b.nbytes), &st, err, errlen)))
        goto fail;

    memset(&msg, 0, sizeof msg);
    msg.has_header = 1;
    msg.header.array_id = id;
    msg.header.ndevices = ndevices;
    msg.header.devices = (int32_t *)devices;
    msg.header.shape = sm_index_shape(box);
    msg.header.dtype = t;
    msg.header.total_bytes = b.nbytes;
    if ((e = sm_svc_upload_send(st, &msg, err, errlen)))
        goto fail;

    for (int64_t pos = 0; pos < b.nbytes || (pos == 0 && b.nbytes == 0);) {
        size_t n = b.nbytes - pos < SM_SVC_CHUNK ? (size_t)(b.nbytes - pos) : SM_SVC_CHUNK;
        client_box_gather(&b, src, pos, stage, n);
        sm_checksum_update(ck, stage, n);
        memset(&msg, 0, sizeof msg);
        msg.offset = pos;
        msg.data = stage;
        msg.len = n;
        msg.last = pos + (int64_t)n == b.nbytes;
        if (msg.last)
            msg.checksum = sm_checksum_digest(ck);
        if ((e = sm_svc_upload_send(st, &msg, err, errlen)))
            goto fail;
        client_progress_add(prog, (int64_t)n);
        pos += (int64_t)n;
        if (msg.last)
            break;
    }

    memset(&reply, 0, sizeof reply);
    e = sm_svc_upload_finish(st, &reply, err, errlen);
    st = NULL;
    if (e)
        goto fail;
    if (reply.bytes != b.nbytes || reply.checksum != sm_checksum_digest(ck)) {
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "the service acknowledged %lld bytes with checksum %016llx for an upload of "
                    "%lld bytes with checksum %016llx",
                    (long long)reply.bytes, (unsigned long long)reply.checksum, (long long)b.nbytes,
                    (unsigned long long)sm_checksum_digest(ck));
        goto fail;
    }
    if (ready)
        *ready = reply.array_ready;
    sm_checksum_free(ck);
    free(stage);
    return SM_OK;

fail:
    if (st)
        sm_svc_upload_abort(st);
    sm_checksum_free(ck);
    free(stage);
    return e;
}

/* ---- downloads --------------------------------------------------------------- */

sm_err client_download_box(sm_client *c, sm_array_id id, int32_t device, sm_dtype t, void *dst,
                           const sm_shape *dst_shape, const sm_index *box, client_progress *prog,
                           char *err, size_t errlen)
{
    client_box b;
    sm_svc_download_stream *st = NULL;
    sm_checksum *ck = NULL;
    sm_svc_download_req req;
    sm_svc_chunk ch;
    sm_shape want = sm_index_shape(box);
    int64_t got = 0;
    int meta = 0, last = 0, end = 0;
    char s1[128], s2[128];
    sm_err e;

    if ((e = client_box_init(&b, dst_shape, box, t, err, errlen)))
        return e;
    if (!(ck = sm_checksum_create()))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a checksum state");
    memset(&req, 0, sizeof req);
    req.array.id = id;
    req.device = device;
    if ((e = sm_svc_download_open(c->ch, 0, &req, client_stream_deadline(c, b.nbytes), &st, err,
                                  errlen)))
        goto fail;
    for (;;) {
        memset(&ch, 0, sizeof ch);
        if ((e = sm_svc_download_recv(st, &ch, &end, err, errlen)))
            goto fail;
        if (end)
            break;
        if (ch.has_meta) {
            if (ch.dtype != t || !sm_shape_equal(&ch.shape, &want) || ch.total_bytes != b.nbytes) {
                e = sm_fail(err, errlen, SM_EDATALOSS,
                            "device %d sent a %s%s shard of %lld bytes where a %s%s shard of %lld "
                            "bytes was expected",
                            (int)device, sm_dtype_name(ch.dtype),
                            sm_shape_format(&ch.shape, s1, sizeof s1), (long long)ch.total_bytes,
                            sm_dtype_name(t), sm_shape_format(&want, s2, sizeof s2),
                            (long long)b.nbytes);
                goto fail;
            }
            meta = 1;
        }
        if (!meta || last) {
            e = sm_fail(err, errlen, SM_EDATALOSS, "the download of device %d's shard sent data %s",
                        (int)device, meta ? "after its last chunk" : "before its shape");
            goto fail;
        }
        if (ch.len > 0) {
            if (ch.offset != got || (int64_t)ch.len > b.nbytes - got) {
                e = sm_fail(err, errlen, SM_EDATALOSS,
                            "the download of device %d's shard sent %zu bytes at offset %lld "
                            "after %lld of %lld bytes",
                            (int)device, ch.len, (long long)ch.offset, (long long)got,
                            (long long)b.nbytes);
                goto fail;
            }
            client_box_scatter(&b, dst, got, ch.data, ch.len);
            sm_checksum_update(ck, ch.data, ch.len);
            got += (int64_t)ch.len;
            client_progress_add(prog, (int64_t)ch.len);
        }
        if (ch.last) {
            last = 1;
            if (got != b.nbytes || ch.checksum != sm_checksum_digest(ck)) {
                e = sm_fail(err, errlen, SM_EDATALOSS,
                            "the download of device %d's shard ended with %lld of %lld bytes "
                            "and checksum %016llx where %016llx was computed",
                            (int)device, (long long)got, (long long)b.nbytes,
                            (unsigned long long)ch.checksum,
                            (unsigned long long)sm_checksum_digest(ck));
                goto fail;
            }
        }
    }
    if (!last) {
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "the download of device %d's shard ended after %lld of %lld bytes without "
                    "its checksum",
                    (int)device, (long long)got, (long long)b.nbytes);
        goto fail;
    }
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    return SM_OK;

fail:
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    return e;
}

/* ---- tasks ------------------------------------------------------------------ */

typedef struct {
    pthread_mutex_t mu;
    int next, n;
    client_task_fn fn;
    void *user;
    sm_err e;
    char err[512];
} task_pool;

static void *task_loop(void *arg)
{
    task_pool *p = arg;
    char err[512];

    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->e ? p->n : p->next++;
        pthread_mutex_unlock(&p->mu);
        if (i >= p->n)
            return NULL;
        err[0] = 0;
        sm_err e = p->fn(p->user, i, err, sizeof err);
        if (e) {
            pthread_mutex_lock(&p->mu);
            if (!p->e) {
                p->e = e;
                snprintf(p->err, sizeof p->err, "%s", err);
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
}

sm_err client_run_tasks(int n, int width, client_task_fn fn, void *user, char *err, size_t errlen)
{
    task_pool p = {.next = 0, .n = n, .fn = fn, .user = user, .e = SM_OK};
    pthread_t th[8];
    int nth = 0;

    pthread_mutex_init(&p.mu, NULL);
    if (width > 8)
        width = 8;
    for (int k = 1; k < width && k < n; k++)
        if (pthread_create(&th[nth], NULL, task_loop, &p) == 0)
            nth++;
    task_loop(&p);
    for (int k = 0; k < nth; k++)
        pthread_join(th[k], NULL);
    pthread_mutex_destroy(&p.mu);
    if (p.e)
        return sm_fail(err, errlen, p.e, "%s", p.err);
    return SM_OK;
}

void client_discard(sm_client *c, sm_array_id id)
{
    char err[256];
    sm_array_ref ref = {.id = id, .name = NULL};
    (void)sm_svc_coord_delete(c->ch, c->timeout_ms, ref, err, sizeof err);
}
