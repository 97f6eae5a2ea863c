/* client_transfer: box streaming, chunked uploads and downloads over sm_svc
 * streams (straight to and from the workers, with the coordinator's relay
 * as the fallback), a small task runner and progress accounting for
 * libshmap. */
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

/* ---- grants ------------------------------------------------------------- */

const unsigned char *client_grants(const sm_client *c, int n, const sm_shard_info *const *s,
                                   unsigned char *out)
{
    if (!c->grants)
        return NULL;
    for (int k = 0; k < n; k++) {
        if (s[k]->grant_len != SM_GRANT_LEN)
            return NULL;
        memcpy(out + (size_t)k * SM_GRANT_LEN, s[k]->grant, SM_GRANT_LEN);
    }
    return out;
}

int client_grant_refused(const sm_client *c, sm_err e)
{
    return c->grants && (e == SM_EPERM || e == SM_EAUTH);
}

/* ---- held-back commits --------------------------------------------------- */

sm_err client_commits_init(client_commits *cm, int cap, char *err, size_t errlen)
{
    cm->n = 0;
    cm->cap = cap > 0 ? cap : 0;
    if (!(cm->t = calloc((size_t)cm->cap + 1, sizeof *cm->t)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    pthread_mutex_init(&cm->mu, NULL);
    return SM_OK;
}

void client_commits_destroy(client_commits *cm)
{
    pthread_mutex_destroy(&cm->mu);
    free(cm->t);
}

static sm_err client_commits_add(client_commits *cm, const sm_svc_commit_target *t, char *err,
                                 size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&cm->mu);
    if (cm->n < cm->cap)
        cm->t[cm->n++] = *t;
    else
        e = sm_fail(err, errlen, SM_EINTERNAL, "more commits than the %d upload targets", cm->cap);
    pthread_mutex_unlock(&cm->mu);
    return e;
}

sm_err client_commits_send(sm_client *c, sm_array_id id, client_commits *cm, int *ready, char *err,
                           size_t errlen)
{
    sm_svc_commit_req q = {.array_id = id};
    sm_svc_upload_reply reply = {0};
    sm_err e;
    if (ready)
        *ready = 0;
    if (cm->n == 0)
        return SM_OK;
    if (cm->n == 1) { /* the single-target form */
        q.ndevices = cm->t[0].ndevices;
        q.devices = cm->t[0].devices;
        q.checksum = cm->t[0].checksum;
        q.bytes = cm->t[0].bytes;
    } else {
        q.ntargets = cm->n;
        q.targets = cm->t;
    }
    e = sm_svc_coord_commit_shards(c->ch, c->timeout_ms, &q, &reply, err, errlen);
    if (!e && ready)
        *ready = reply.array_ready;
    return e;
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
    if ((e = sm_index_check(box, shape, "array", err, errlen)))
        return e;
    b->rank = shape->rank;
    b->elem = sm_dtype_size(t);
    if ((e = sm_shape_strides(shape, b->stride, err, errlen)))
        return e;
    for (int d = 0; d < b->rank; d++) {
        b->off[d] = box->r[d].start;
        b->ext[d] = box->r[d].stop - box->r[d].start;
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
    if (b->nbytes == 0) { /* a box of no elements (a dimension of size 0) */
        *avail = 0;
        return 0;
    }
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

/* The streams of one upload: one to the coordinator (relay), or one per
 * worker holding some of the target's devices (direct). */
typedef struct {
    sm_rpc_channel *ch;
    const char *addr; /* NULL: the coordinator */
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    const sm_shard_info *shards[SM_MAX_WORKER_DEVICES]; /* of devices, for their grants */
    sm_svc_upload_stream *st;
    sm_svc_shm_ref shm; /* name set: the worker copies the box out of this segment */
} up_stream;

static void up_abort(up_stream *u, int n)
{
    for (int k = 0; k < n; k++)
        if (u[k].st) {
            sm_svc_upload_abort(u[k].st);
            u[k].st = NULL;
        }
}

/* Groups devices by the worker holding them (info's shards). Returns the
 * number of streams, or 0 if some worker must be reached through the relay. */
static int up_group(sm_client *c, const sm_array_info *info, int ndevices, const int32_t *devices,
                    up_stream *u)
{
    int n = 0;
    for (int i = 0; i < ndevices; i++) {
        const char *addr = NULL;
        const sm_shard_info *sh = NULL;
        for (int s = 0; s < info->nshards && !addr; s++)
            if (info->shards[s].device == devices[i]) {
                sh = &info->shards[s];
                addr = sh->worker_address;
            }
        if (!addr || !*addr || (c->grants && sh->grant_len != SM_GRANT_LEN))
            return 0;
        int k = 0;
        while (k < n && strcmp(u[k].addr, addr) != 0)
            k++;
        if (k == n) {
            sm_rpc_channel *ch = client_worker_channel(c, addr);
            if (!ch)
                return 0;
            memset(&u[n], 0, sizeof u[n]);
            u[n].ch = ch;
            u[n].addr = addr;
            n++;
        }
        if (u[k].ndevices == SM_MAX_WORKER_DEVICES)
            return 0;
        u[k].shards[u[k].ndevices] = sh;
        u[k].devices[u[k].ndevices++] = devices[i];
    }
    return n;
}

/* Sends the data of box b of src to the streams u[0..n), in chunks, the last
 * with the checksum, which ck (reset) accumulates. */
static sm_err up_chunks(up_stream *u, int n, const client_box *b, const void *src, char *stage,
                        sm_checksum *ck, client_progress *prog, char *err, size_t errlen)
{
    sm_svc_upload_msg msg;
    sm_err e = SM_OK;
    for (int64_t pos = 0; !e && (pos < b->nbytes || pos == 0);) {
        size_t len = b->nbytes - pos < SM_SVC_CHUNK ? (size_t)(b->nbytes - pos) : SM_SVC_CHUNK;
        int64_t avail, at = box_locate(b, pos, &avail);
        const char *data = (const char *)src + at; /* contiguous in src: sent from there */
        if (len == 0 || avail < (int64_t)len) {
            client_box_gather(b, src, pos, stage, len);
            data = stage;
        }
        sm_checksum_update(ck, data, len);
        memset(&msg, 0, sizeof msg);
        msg.offset = pos;
        msg.data = data;
        msg.len = len;
        msg.last = pos + (int64_t)len == b->nbytes;
        /* the caller's buffer outlives the streams; the staging one is reused */
        msg.stable = data != stage;
        if (msg.last)
            msg.checksum = sm_checksum_digest(ck);
        for (int k = 0; k < n && !e; k++)
            if (!u[k].shm.name[0]) /* the others copied it out of shared memory */
                e = sm_svc_upload_send(u[k].st, &msg, err, errlen);
        if (e)
            break;
        client_progress_add(prog, (int64_t)len);
        pos += (int64_t)len;
        if (msg.last)
            break;
    }
    return e;
}

/* Sends the box through streams u[0..n) (direct: each its own devices in the
 * header, and their grants for a tenant; a stream with a ShmRef gets its
 * header alone, as its last message) and checks every reply. *fallback
 * = 1 when a direct stream failed UNAVAILABLE before any data went out
 * (nothing was sent), 2 when a worker refused the grants (it kept
 * nothing): use the relay; 3 when a worker refused a ShmRef
 * (FAILED_PRECONDITION, nothing kept): send again without. */
static sm_err up_send(sm_client *c, up_stream *u, int n, int direct, const sm_svc_upload_msg *hdr,
                      const client_box *b, const void *src, char *stage, client_progress *prog,
                      uint64_t *sum, int *fallback, char *err, size_t errlen)
{
    sm_checksum *ck = sm_checksum_create();
    sm_svc_upload_msg msg;
    unsigned char *grants =
        c->grants && direct ? malloc(SM_MAX_WORKER_DEVICES * SM_GRANT_LEN) : NULL;
    sm_err e = SM_OK;

    *fallback = 0;
    if (!ck || (c->grants && direct && !grants)) {
        sm_checksum_free(ck);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a checksum state");
    }
    int nshm = 0;
    for (int k = 0; k < n && !e; k++) {
        e = sm_svc_upload_open(u[k].ch, direct, client_stream_deadline(c, b->nbytes), &u[k].st, err,
                               errlen);
        if (!e) {
            msg = *hdr;
            if (direct) {
                msg.header.ndevices = u[k].ndevices;
                msg.header.devices = u[k].devices;
                msg.header.grants = client_grants(c, u[k].ndevices, u[k].shards, grants);
                msg.header.shm = u[k].shm;
                msg.last = u[k].shm.name[0] != 0;
                nshm += msg.last;
            }
            e = sm_svc_upload_send(u[k].st, &msg, err, errlen);
        }
        if (e && direct && e == SM_EUNAVAILABLE) {
            client_worker_unreachable(c, u[k].addr);
            *fallback = 1;
        }
    }
    if (!e && nshm < n)
        e = up_chunks(u, n, b, src, stage, ck, prog, err, errlen);
    else if (!e)
        client_progress_add(prog, b->nbytes);
    *sum = sm_checksum_digest(ck);
    sm_checksum_free(ck);
    for (int k = 0; k < n && !e; k++) {
        sm_svc_upload_reply reply = {0};
        e = sm_svc_upload_finish(u[k].st, &reply, err, errlen);
        u[k].st = NULL;
        if (e == SM_EPRECONDITION && u[k].shm.name[0]) {
            client_shm_refused(c, u[k].addr);
            *fallback = 3;
        }
        if (e)
            break;
        /* every stream copied out of shared memory: the workers' checksum
         * is the upload's (they read the bytes where the caller left them) */
        if (nshm == n && k == 0)
            *sum = reply.checksum;
        if (reply.bytes != b->nbytes || reply.checksum != *sum)
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "%s%s acknowledged %lld bytes with checksum %016llx for an upload of "
                        "%lld bytes with checksum %016llx",
                        direct ? "the worker at " : "the service", direct ? u[k].addr : "",
                        (long long)reply.bytes, (unsigned long long)reply.checksum,
                        (long long)b->nbytes, (unsigned long long)*sum);
    }
    up_abort(u, n);
    free(grants);
    if (e && direct && !*fallback && client_grant_refused(c, e))
        *fallback = 2;
    return e;
}

/* The ShmRefs of the streams u[0..n) for the box of src (none where the
 * buffer is not in shared memory or a worker does not share this host's). */
static void up_shm_refs(sm_client *c, up_stream *u, int n, const void *src,
                        const sm_shape *src_shape, sm_dtype t, const sm_index *box)
{
    for (int k = 0; k < n; k++)
        client_shm_ref(c, u[k].addr, u[k].ch, src, src_shape, t, box, &u[k].shm);
}

sm_err client_upload_box(sm_client *c, const sm_array_info *info, sm_array_id id, int ndevices,
                         const int32_t *devices, sm_dtype t, const void *src,
                         const sm_shape *src_shape, const sm_index *box, client_progress *prog,
                         client_commits *later, char *err, size_t errlen)
{
    client_box b;
    up_stream *u = NULL;
    char *stage = NULL;
    sm_svc_upload_msg hdr;
    uint64_t sum = 0;
    int n = 0, fallback = 0;
    sm_err e;

    if ((e = client_box_init(&b, src_shape, box, t, err, errlen)))
        return e;
    if (ndevices < 1)
        return sm_fail(err, errlen, SM_EINVAL, "an upload target lists no devices");
    stage = malloc(b.nbytes < SM_SVC_CHUNK ? (size_t)b.nbytes + 1 : SM_SVC_CHUNK);
    u = calloc((size_t)ndevices, sizeof *u);
    if (!u || !stage) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a %d-byte upload buffer",
                    SM_SVC_CHUNK);
        goto done;
    }
    memset(&hdr, 0, sizeof hdr);
    hdr.has_header = 1;
    hdr.header.array_id = id;
    hdr.header.ndevices = ndevices;
    hdr.header.devices = (int32_t *)devices;
    hdr.header.shape = sm_index_shape(box);
    hdr.header.dtype = t;
    hdr.header.total_bytes = b.nbytes;

    if (info && !c->relay_only && (n = up_group(c, info, ndevices, devices, u)) > 0) {
        up_shm_refs(c, u, n, src, src_shape, t, box);
        e = up_send(c, u, n, 1, &hdr, &b, src, stage, prog, &sum, &fallback, err, errlen);
        if (fallback == 3) { /* a worker takes no ShmRef: the streams */
            for (int k = 0; k < n; k++)
                memset(&u[k].shm, 0, sizeof u[k].shm);
            e = up_send(c, u, n, 1, &hdr, &b, src, stage, prog, &sum, &fallback, err, errlen);
        }
        if (!e) {
            sm_svc_commit_target t = {ndevices, devices, sum, b.nbytes};
            client_commits one = {.n = 1, .cap = 1, .t = &t};
            e = later ? client_commits_add(later, &t, err, errlen)
                      : client_commits_send(c, id, &one, NULL, err, errlen);
            goto done;
        }
        if (!fallback)
            goto done;
    }
    /* Through the coordinator. */
    memset(u, 0, sizeof *u);
    u[0].ch = c->ch;
    e = up_send(c, u, 1, 0, &hdr, &b, src, stage, prog, &sum, &fallback, err, errlen);
done:
    free(u);
    free(stage);
    return e;
}

/* Sends targets tg[0..n), all held by the worker of stream u (its devices
 * set for each in turn), in that one stream, and checks each
 * acknowledgement. A target with a ShmRef (shm[k].name set; shm may be
 * NULL) is its header alone: the worker copies it out of shared memory.
 * *fallback = 1 when the stream failed UNAVAILABLE before any data went
 * out, 2 when the worker refused the grants, 3 when it refused a ShmRef.
 * sums[k]: target k's checksum. */
static sm_err up_send_batch(sm_client *c, const sm_array_info *info, up_stream *u,
                            sm_svc_upload_msg *hdr, const client_up_target *tg, const client_box *b,
                            int n, const void *src, const sm_svc_shm_ref *shm, char *stage,
                            client_progress *prog, uint64_t *sums, int *fallback, char *err,
                            size_t errlen)
{
    sm_checksum *ck = sm_checksum_create();
    sm_svc_upload_reply reply = {0};
    unsigned char *grants = c->grants ? malloc(SM_MAX_WORKER_DEVICES * SM_GRANT_LEN) : NULL;
    int64_t total = 0;
    sm_err e = SM_OK;

    *fallback = 0;
    if (!ck || (c->grants && !grants)) {
        sm_checksum_free(ck);
        free(grants);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a checksum state");
    }
    for (int k = 0; k < n; k++)
        total += b[k].nbytes;
    e = sm_svc_upload_open(u->ch, 1, client_stream_deadline(c, total), &u->st, err, errlen);
    *fallback = e == SM_EUNAVAILABLE;
    for (int k = 0; k < n && !e; k++) {
        sm_checksum_reset(ck);
        hdr->header.ndevices = tg[k].ndevices;
        hdr->header.devices = (int32_t *)tg[k].devices;
        hdr->header.grants = NULL;
        if (c->grants) {
            up_stream g;
            if (up_group(c, info, tg[k].ndevices, tg[k].devices, &g) != 1 ||
                !(hdr->header.grants = client_grants(c, g.ndevices, g.shards, grants))) {
                e = sm_fail(err, errlen, SM_EPERM, "target %d of %d has no grant", k + 1, n);
                break;
            }
        }
        hdr->header.shape = sm_index_shape(tg[k].box);
        hdr->header.total_bytes = b[k].nbytes;
        memset(&hdr->header.shm, 0, sizeof hdr->header.shm);
        if (shm && shm[k].name[0])
            hdr->header.shm = shm[k];
        hdr->last = hdr->header.shm.name[0] != 0;
        if ((e = sm_svc_upload_send(u->st, hdr, err, errlen))) {
            *fallback = k == 0 && e == SM_EUNAVAILABLE;
            break;
        }
        if (hdr->last)
            client_progress_add(prog, b[k].nbytes);
        else
            e = up_chunks(u, 1, &b[k], src, stage, ck, prog, err, errlen);
        sums[k] = sm_checksum_digest(ck);
    }
    if (!e) {
        e = sm_svc_upload_finish(u->st, &reply, err, errlen);
        u->st = NULL;
        if (e == SM_EPRECONDITION && shm) {
            client_shm_refused(c, u->addr);
            *fallback = 3;
        }
    }
    for (int k = 0; k < n && !e; k++) {
        int64_t got = k < reply.ntargets ? reply.target_bytes[k] : -1;
        uint64_t sum = k < reply.ntargets ? reply.target_checksum[k] : 0;
        if (shm && shm[k].name[0]) /* copied by the worker: its checksum */
            sums[k] = sum;
        if (got != b[k].nbytes || sum != sums[k])
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "the worker at %s acknowledged %lld bytes with checksum %016llx for "
                        "target %d of %d of its upload, of %lld bytes with checksum %016llx",
                        u->addr, (long long)got, (unsigned long long)sum, k + 1, n,
                        (long long)b[k].nbytes, (unsigned long long)sums[k]);
    }
    sm_checksum_free(ck);
    free(grants);
    up_abort(u, 1);
    if (e && !*fallback && client_grant_refused(c, e))
        *fallback = 2;
    return e;
}

sm_err client_upload_boxes(sm_client *c, const sm_array_info *info, sm_array_id id, int n,
                           const client_up_target *tg, sm_dtype t, const void *src,
                           const sm_shape *src_shape, client_progress *prog, client_commits *later,
                           char *err, size_t errlen)
{
    client_box *b = NULL;
    uint64_t *sums = NULL;
    sm_svc_shm_ref *shm = NULL;
    char *stage = NULL;
    up_stream u;
    sm_svc_upload_msg hdr;
    int fallback = 0;
    sm_err e = SM_OK;

    if (n == 1 || c->relay_only || !info ||
        up_group(c, info, tg[0].ndevices, tg[0].devices, &u) != 1)
        goto one_by_one;
    b = calloc((size_t)n + 1, sizeof *b);
    sums = calloc((size_t)n + 1, sizeof *sums);
    shm = calloc((size_t)n + 1, sizeof *shm);
    stage = malloc(SM_SVC_CHUNK);
    if (!b || !sums || !shm || !stage) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a %d-byte upload buffer",
                    SM_SVC_CHUNK);
        goto done;
    }
    for (int k = 0; k < n && !e; k++)
        if (!(e = client_box_init(&b[k], src_shape, tg[k].box, t, err, errlen)) &&
            tg[k].ndevices < 1)
            e = sm_fail(err, errlen, SM_EINVAL, "an upload target lists no devices");
    if (e)
        goto done;
    memset(&hdr, 0, sizeof hdr);
    hdr.has_header = 1;
    hdr.header.array_id = id;
    hdr.header.dtype = t;
    int nshm = 0;
    for (int k = 0; k < n; k++)
        nshm += client_shm_ref(c, u.addr, u.ch, src, src_shape, t, tg[k].box, &shm[k]);
    e = up_send_batch(c, info, &u, &hdr, tg, b, n, src, nshm ? shm : NULL, stage, prog, sums,
                      &fallback, err, errlen);
    if (fallback == 3) /* the worker takes no ShmRef: the streams */
        e = up_send_batch(c, info, &u, &hdr, tg, b, n, src, NULL, stage, prog, sums, &fallback, err,
                          errlen);
    for (int k = 0; k < n && !e; k++) {
        sm_svc_commit_target ct = {tg[k].ndevices, tg[k].devices, sums[k], b[k].nbytes};
        client_commits one = {.n = 1, .cap = 1, .t = &ct};
        e = later ? client_commits_add(later, &ct, err, errlen)
                  : client_commits_send(c, id, &one, NULL, err, errlen);
    }
    if (!fallback)
        goto done;
    if (fallback == 1)
        client_worker_unreachable(c, u.addr);
    e = SM_OK;
one_by_one:
    for (int k = 0; k < n && !e; k++)
        e = client_upload_box(c, info, id, tg[k].ndevices, tg[k].devices, t, src, src_shape,
                              tg[k].box, prog, later, err, errlen);
done:
    free(b);
    free(sums);
    free(shm);
    free(stage);
    return e;
}

/* ---- downloads --------------------------------------------------------------- */

/* One download stream's state: what its chunks are checked against and
 * where their data goes. */
typedef struct {
    int32_t device;
    sm_dtype t;
    sm_shape want;
    void *dst;
    const client_box *b;
    int64_t got;
    int meta, last;
    sm_checksum *ck;
    char *stage; /* for chunks that are not contiguous in dst; lazily */
    int staged;  /* the current chunk went to stage */
    int shm;     /* the worker writes the box into dst itself (ShmRef) */
} down_state;

/* Checks one chunk against the stream so far and places its data: straight
 * in dst where the chunk is contiguous there, else in the staging buffer
 * (scattered by down_account). */
static sm_err down_place(void *user, const sm_svc_chunk *ch, void **dst, char *err, size_t errlen)
{
    down_state *d = user;
    const client_box *b = d->b;
    char s1[128], s2[128];
    d->staged = 0;
    if (ch->has_meta) {
        if (ch->dtype != d->t || !sm_shape_equal(&ch->shape, &d->want) ||
            ch->total_bytes != b->nbytes)
            return sm_fail(err, errlen, SM_EDATALOSS,
                           "device %d sent a %s%s shard of %lld bytes where a %s%s shard of %lld "
                           "bytes was expected",
                           (int)d->device, sm_dtype_name(ch->dtype),
                           sm_shape_format(&ch->shape, s1, sizeof s1), (long long)ch->total_bytes,
                           sm_dtype_name(d->t), sm_shape_format(&d->want, s2, sizeof s2),
                           (long long)b->nbytes);
        d->meta = 1;
    }
    if (!d->meta || d->last)
        return sm_fail(err, errlen, SM_EDATALOSS, "the download of device %d's shard sent data %s",
                       (int)d->device, d->meta ? "after its last chunk" : "before its shape");
    if (ch->len == 0)
        return SM_OK;
    if (ch->offset != d->got || (int64_t)ch->len > b->nbytes - d->got)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "the download of device %d's shard sent %zu bytes at offset %lld "
                       "after %lld of %lld bytes",
                       (int)d->device, ch->len, (long long)ch->offset, (long long)d->got,
                       (long long)b->nbytes);
    int64_t avail, at = box_locate(b, d->got, &avail);
    if (avail >= (int64_t)ch->len) {
        *dst = (char *)d->dst + at;
        return SM_OK;
    }
    if (!d->stage && !(d->stage = malloc(SM_SVC_CHUNK)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a %d-byte download buffer",
                       SM_SVC_CHUNK);
    if (ch->len > SM_SVC_CHUNK) {
        /* larger than any chunk shmap sends: take it through a buffer of its own */
        char *big = realloc(d->stage, ch->len);
        if (!big)
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a %zu-byte download buffer",
                           ch->len);
        d->stage = big;
    }
    d->staged = 1;
    *dst = d->stage;
    return SM_OK;
}

static void down_copied(void *user, const void *p, size_t n)
{
    down_state *d = user;
    sm_checksum_update(d->ck, p, n);
}

/* After a chunk was placed: scatters staged data, counts the bytes, and
 * checks the total and the checksum on the last chunk. */
static sm_err down_account(down_state *d, const sm_svc_chunk *ch, client_progress *prog, char *err,
                           size_t errlen)
{
    if (ch->len > 0) {
        if (d->staged)
            client_box_scatter(d->b, d->dst, d->got, d->stage, ch->len);
        d->got += (int64_t)ch->len;
        client_progress_add(prog, (int64_t)ch->len);
    }
    if (ch->last && d->shm && d->got == 0) {
        /* written into the caller's shared memory by the worker, which
         * checked it against the shard's checksum as it went */
        d->last = 1;
        d->got = d->b->nbytes;
        client_progress_add(prog, d->got);
        return SM_OK;
    }
    if (ch->last) {
        d->last = 1;
        if (d->got != d->b->nbytes || ch->checksum != sm_checksum_digest(d->ck))
            return sm_fail(err, errlen, SM_EDATALOSS,
                           "the download of device %d's shard ended with %lld of %lld bytes "
                           "and checksum %016llx where %016llx was computed",
                           (int)d->device, (long long)d->got, (long long)d->b->nbytes,
                           (unsigned long long)ch->checksum,
                           (unsigned long long)sm_checksum_digest(d->ck));
    }
    return SM_OK;
}

/* The shards of one batched download, received in turn. */
typedef struct {
    down_state *d;
    int n, cur;
} down_multi;

static sm_err multi_place(void *user, const sm_svc_chunk *ch, void **dst, char *err, size_t errlen)
{
    down_multi *m = user;
    if (m->d[m->cur].last && m->cur + 1 < m->n)
        m->cur++;
    return down_place(&m->d[m->cur], ch, dst, err, errlen);
}

static void multi_copied(void *user, const void *p, size_t n)
{
    down_multi *m = user;
    down_copied(&m->d[m->cur], p, n);
}

/* The shards of devices[0..n) from one download stream, each into its box
 * b[k] of dst: a worker's GetShard (direct, with grants for a tenant; n > 1
 * asks for several devices at once; shm, n 1: the worker writes the shard
 * into the caller's shared memory itself) or the coordinator's Download (n
 * 1). *fallback = 1 when a direct stream failed UNAVAILABLE before any data
 * arrived, 2 when the worker refused the grants, 3 when it refused the
 * ShmRef. */
static sm_err download_stream(sm_client *c, sm_rpc_channel *ch, int direct, sm_array_id id, int n,
                              const int32_t *devices, const sm_index *boxes,
                              const unsigned char *grants, const sm_svc_shm_ref *shm,
                              const client_box *b, sm_dtype t, void *dst, client_progress *prog,
                              int *fallback, char *err, size_t errlen)
{
    sm_svc_download_stream *st = NULL;
    sm_svc_download_req req;
    sm_svc_chunk ch_;
    down_multi m = {.d = calloc((size_t)n, sizeof *m.d), .n = n};
    sm_svc_chunk_sink sink = {multi_place, multi_copied, &m};
    int64_t total = 0;
    int end = 0;
    sm_err e = SM_OK;

    *fallback = 0;
    if (!m.d)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++) {
        m.d[k] = (down_state){.device = devices[k],
                              .t = t,
                              .want = sm_index_shape(&boxes[k]),
                              .dst = dst,
                              .b = &b[k],
                              .shm = shm != NULL};
        total += b[k].nbytes;
        if (!(m.d[k].ck = sm_checksum_create()))
            e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a checksum state");
    }
    if (e)
        goto done;
    memset(&req, 0, sizeof req);
    req.array.id = id;
    req.device = devices[0];
    if (n > 1) {
        req.ndevices = n;
        req.devices = devices;
    }
    req.grants = direct ? grants : NULL;
    if (shm)
        req.shm = *shm;
    if ((e = sm_svc_download_open(ch, direct, &req, client_stream_deadline(c, total), &st, err,
                                  errlen))) {
        *fallback = !direct ? 0 : e == SM_EUNAVAILABLE ? 1 : client_grant_refused(c, e) ? 2 : 0;
        goto done;
    }
    for (;;) {
        memset(&ch_, 0, sizeof ch_);
        if ((e = sm_svc_download_recv_into(st, &sink, &ch_, &end, err, errlen))) {
            *fallback = !direct || m.d[0].meta         ? 0
                        : e == SM_EUNAVAILABLE         ? 1
                        : client_grant_refused(c, e)   ? 2
                        : shm && e == SM_EPRECONDITION ? 3
                                                       : 0;
            goto done;
        }
        if (end)
            break;
        if ((e = down_account(&m.d[m.cur], &ch_, prog, err, errlen)))
            goto done;
    }
    for (int k = 0; k < n && !e; k++)
        if (!m.d[k].last)
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "the download of device %d's shard ended after %lld of %lld bytes "
                        "without its checksum",
                        (int)devices[k], (long long)m.d[k].got, (long long)b[k].nbytes);
done:
    sm_svc_download_free(st);
    for (int k = 0; k < n; k++) {
        sm_checksum_free(m.d[k].ck);
        free(m.d[k].stage);
    }
    free(m.d);
    return e;
}

sm_err client_download_box(sm_client *c, const char *worker_address, sm_array_id id, int32_t device,
                           const unsigned char *grants, sm_dtype t, void *dst,
                           const sm_shape *dst_shape, const sm_index *box, client_progress *prog,
                           char *err, size_t errlen)
{
    client_box b;
    sm_rpc_channel *wch = NULL;
    int fallback = 0;
    sm_err e;

    if ((e = client_box_init(&b, dst_shape, box, t, err, errlen)))
        return e;
    if (!c->relay_only && (!c->grants || grants) && worker_address && *worker_address &&
        (wch = client_worker_channel(c, worker_address))) {
        sm_svc_shm_ref shm;
        int viashm = client_shm_ref(c, worker_address, wch, dst, dst_shape, t, box, &shm);
        e = download_stream(c, wch, 1, id, 1, &device, box, grants, viashm ? &shm : NULL, &b, t,
                            dst, prog, &fallback, err, errlen);
        if (fallback == 3) { /* the worker takes no ShmRef: its stream */
            client_shm_refused(c, worker_address);
            e = download_stream(c, wch, 1, id, 1, &device, box, grants, NULL, &b, t, dst, prog,
                                &fallback, err, errlen);
        }
        if (!fallback)
            return e;
        if (fallback == 1)
            client_worker_unreachable(c, worker_address);
    }
    return download_stream(c, c->ch, 0, id, 1, &device, box, NULL, NULL, &b, t, dst, prog,
                           &fallback, err, errlen);
}

sm_err client_download_boxes(sm_client *c, const char *worker_address, sm_array_id id, int n,
                             const int32_t *devices, const sm_index *boxes,
                             const unsigned char *grants, sm_dtype t, void *dst,
                             const sm_shape *dst_shape, client_progress *prog, char *err,
                             size_t errlen)
{
    client_box *b = NULL;
    sm_rpc_channel *wch = NULL;
    int fallback = 0;
    sm_err e = SM_OK;

    if (n == 1) /* the single-shard form */
        return client_download_box(c, worker_address, id, devices[0], grants, t, dst, dst_shape,
                                   &boxes[0], prog, err, errlen);
    if (!(b = calloc((size_t)n + 1, sizeof *b)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    for (int k = 0; k < n && !e; k++)
        e = client_box_init(&b[k], dst_shape, &boxes[k], t, err, errlen);
    sm_svc_shm_ref shm;
    if (!e && !c->relay_only && !c->grants && worker_address && *worker_address &&
        (wch = client_worker_channel(c, worker_address)) &&
        client_shm_ref(c, worker_address, wch, dst, dst_shape, t, &boxes[0], &shm)) {
        /* into shared memory: one request per shard, each written by the
         * worker where it goes, no bytes streamed */
        for (int k = 0; k < n && !e; k++)
            e = client_download_box(c, worker_address, id, devices[k], NULL, t, dst, dst_shape,
                                    &boxes[k], prog, err, errlen);
        goto done;
    }
    if (!e && !c->relay_only && (!c->grants || grants) && worker_address && *worker_address &&
        (wch = client_worker_channel(c, worker_address))) {
        e = download_stream(c, wch, 1, id, n, devices, boxes, grants, NULL, b, t, dst, prog,
                            &fallback, err, errlen);
        if (!fallback)
            goto done;
        if (fallback == 1)
            client_worker_unreachable(c, worker_address);
        e = SM_OK;
    }
    /* Through the coordinator, one shard at a time. */
    for (int k = 0; k < n && !e; k++)
        e = download_stream(c, c->ch, 0, id, 1, &devices[k], &boxes[k], NULL, NULL, &b[k], t, dst,
                            prog, &fallback, err, errlen);
done:
    free(b);
    return e;
}

int client_group_by(const uint32_t *key, int n, int max, int *order, int *first)
{
    char *used = calloc((size_t)n + 1, 1);
    int m = 0, ng = 0;
    if (!used)
        return -1;
    for (int i = 0; i < n; i++) {
        if (used[i])
            continue;
        for (int q = i, cnt = 0; q < n; q++) {
            if (used[q] || key[q] != key[i])
                continue;
            if (cnt++ % max == 0)
                first[ng++] = m;
            used[q] = 1;
            order[m++] = q;
        }
    }
    first[ng] = m;
    free(used);
    return ng;
}

void client_discard(sm_client *c, sm_array_id id)
{
    char err[256];
    sm_array_ref ref = {.id = id, .name = NULL};
    (void)sm_svc_coord_delete(c->ch, c->timeout_ms, ref, err, sizeof err);
}
