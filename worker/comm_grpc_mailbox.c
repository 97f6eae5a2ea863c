/* comm_grpc_mailbox: collective blobs pushed by peers (see header). */
#include "comm_grpc_mailbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_time.h"
#include "traffic.h"

/* A destination offered for a blob not yet received (sm_mailbox_expect). */
typedef struct sm_mailbox_dest {
    struct sm_mailbox_dest *next;
    uint32_t seq;
    int32_t src_device, dst_device;
    void *buf; /* borrowed */
    int64_t len;
    const sm_mailbox_rx *claimed; /* the stream receiving into buf, or NULL */
    int busy;                     /* a chunk is being written into buf */
} sm_mailbox_dest;

struct sm_mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sm_mailbox_blob *blobs;
    sm_mailbox_dest *dests;
    int64_t bytes, max_bytes;
    int64_t reserved;          /* bytes of blobs being received into this mailbox */
    int pending;               /* created capped, not yet uncapped: counts in the
                                  budget (bytes + reserved) */
    sm_mailbox_budget *budget; /* borrowed; NULL: none */
    int aborted;
    sm_err code;
    char why[512];
};

/* The bytes every capped mailbox of a job table may hold together. Lock
 * order: a mailbox's mu, then its budget's. */
struct sm_mailbox_budget {
    pthread_mutex_t mu;
    int64_t used, max;
};

sm_err sm_mailbox_budget_create(int64_t max_bytes, sm_mailbox_budget **out, char *err,
                                size_t errlen)
{
    *out = NULL;
    sm_mailbox_budget *b = calloc(1, sizeof *b);
    if (!b)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a collective budget");
    pthread_mutex_init(&b->mu, NULL);
    b->max = max_bytes;
    *out = b;
    return SM_OK;
}

void sm_mailbox_budget_free(sm_mailbox_budget *b)
{
    if (b) {
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
}

int64_t sm_mailbox_budget_used(sm_mailbox_budget *b)
{
    pthread_mutex_lock(&b->mu);
    int64_t n = b->used;
    pthread_mutex_unlock(&b->mu);
    return n;
}

/* Counts n more bytes in budget b (NULL: none, always room); 0 (nothing
 * counted) if they do not fit, with the budget's figures in *used / *max. */
static int pending_charge(sm_mailbox_budget *b, int64_t n, int64_t *used, int64_t *max)
{
    if (!b)
        return 1;
    pthread_mutex_lock(&b->mu);
    *used = b->used;
    *max = b->max;
    int ok = !b->max || b->used + n <= b->max;
    if (ok)
        b->used += n;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static void pending_uncharge(sm_mailbox_budget *b, int64_t n)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->used -= n;
    pthread_mutex_unlock(&b->mu);
}

sm_err sm_mailbox_create(sm_mailbox_budget *budget, int64_t max_bytes, sm_mailbox **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    sm_mailbox *b = calloc(1, sizeof *b);
    if (!b)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a collective mailbox");
    pthread_mutex_init(&b->mu, NULL);
    sm_time_cond_init(&b->cv);
    b->max_bytes = max_bytes;
    b->pending = max_bytes > 0;
    b->budget = budget;
    *out = b;
    return SM_OK;
}

void sm_mailbox_blob_free(sm_mailbox_blob *b)
{
    if (b) {
        for (int k = 0; k < b->npieces && !b->direct; k++)
            free(b->pieces[k].data);
        free(b->pieces);
        free(b);
    }
}

/* Appends a piece (takes data); SM_ENOMEM frees data. */
static sm_err sm_mailbox_blob_add(sm_mailbox_blob *b, void *data, int64_t len)
{
    if (b->npieces == b->cap) {
        int cap = b->cap ? 2 * b->cap : 8;
        sm_mailbox_piece *p = realloc(b->pieces, (size_t)cap * sizeof *p);
        if (!p) {
            free(data);
            return SM_ENOMEM;
        }
        b->pieces = p;
        b->cap = cap;
    }
    b->pieces[b->npieces++] = (sm_mailbox_piece){data, len};
    return SM_OK;
}

void sm_mailbox_blob_copy(const sm_mailbox_blob *b, int64_t off, void *dst, int64_t len)
{
    char *d = dst;
    for (int k = 0; k < b->npieces && len > 0; k++) {
        const sm_mailbox_piece *p = &b->pieces[k];
        if (off >= p->len) {
            off -= p->len;
            continue;
        }
        int64_t n = p->len - off < len ? p->len - off : len;
        if ((const char *)p->data + off != d) /* else received in place */
            memcpy(d, (const char *)p->data + off, (size_t)n);
        d += n;
        len -= n;
        off = 0;
    }
}

int sm_mailbox_blob_aligned(const sm_mailbox_blob *b, int64_t align)
{
    for (int k = 0; k + 1 < b->npieces; k++)
        if (b->pieces[k].len % align)
            return 0;
    return 1;
}

void sm_mailbox_free(sm_mailbox *box)
{
    if (!box)
        return;
    if (box->pending)
        pending_uncharge(box->budget, box->bytes + box->reserved);
    for (sm_mailbox_blob *b = box->blobs, *n; b; b = n) {
        n = b->next;
        sm_mailbox_blob_free(b);
    }
    for (sm_mailbox_dest *d = box->dests, *n; d; d = n) {
        n = d->next;
        free(d);
    }
    pthread_cond_destroy(&box->cv);
    pthread_mutex_destroy(&box->mu);
    free(box);
}

/* Gives back b's reservation in box (box->mu held). */
static void unreserve_locked(sm_mailbox *box, sm_mailbox_blob *b)
{
    if (b->reserved_in != box)
        return;
    box->reserved -= b->len;
    if (box->pending)
        pending_uncharge(box->budget, b->len);
    b->reserved_in = NULL;
}

sm_err sm_mailbox_put(sm_mailbox *box, sm_mailbox_blob *b, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&box->mu);
    if (box->aborted)
        goto drop;
    for (sm_mailbox_blob *o = box->blobs; o; o = o->next) {
        if (o->seq == b->seq && o->src_device == b->src_device && o->dst_device == b->dst_device) {
            e = sm_fail(err, errlen, SM_EEXIST,
                        "collective #%u already has a block from device %d for device %d on this "
                        "worker",
                        b->seq, b->src_device, b->dst_device);
            goto drop;
        }
    }
    if (b->reserved_in == box) { /* checked and counted at its first chunk */
        box->reserved -= b->len;
        b->reserved_in = NULL;
    } else if (box->max_bytes > 0 && box->bytes + b->len > box->max_bytes) {
        e = sm_fail(err, errlen, SM_ERESOURCE,
                    "collective #%u: a block of %lld bytes from device %d exceeds the %lld bytes "
                    "this worker buffers for a job that has not started",
                    b->seq, (long long)b->len, b->src_device, (long long)box->max_bytes);
        goto drop;
    }
    b->readers = -1;
    b->next = box->blobs;
    box->blobs = b;
    box->bytes += b->len;
    pthread_cond_broadcast(&box->cv);
    pthread_mutex_unlock(&box->mu);
    return SM_OK;
drop:
    unreserve_locked(box, b);
    pthread_mutex_unlock(&box->mu);
    sm_mailbox_blob_free(b);
    return e;
}

void sm_mailbox_discard(sm_mailbox *box, sm_mailbox_blob *b)
{
    if (!b)
        return;
    if (box) {
        pthread_mutex_lock(&box->mu);
        unreserve_locked(box, b);
        pthread_mutex_unlock(&box->mu);
    }
    sm_mailbox_blob_free(b);
}

/* Checks a blob about to be received into box (rx->box) against its cap
 * and the shared budget while box is capped, and reserves its bytes. */
static sm_err sm_mailbox_reserve(sm_mailbox *box, sm_mailbox_blob *b, char *err, size_t errlen)
{
    if (!box || !b->len)
        return SM_OK;
    sm_err e = SM_OK;
    int64_t used, max;
    pthread_mutex_lock(&box->mu);
    if (!box->pending) {
        /* running: no cap */
    } else if (box->bytes + box->reserved + b->len > box->max_bytes) {
        e = sm_fail(err, errlen, SM_ERESOURCE,
                    "collective #%u: a block of %lld bytes from device %d exceeds the %lld bytes "
                    "this worker buffers for a job that has not started (%lld in use)",
                    b->seq, (long long)b->len, b->src_device, (long long)box->max_bytes,
                    (long long)(box->bytes + box->reserved));
    } else if (!pending_charge(box->budget, b->len, &used, &max)) {
        e = sm_fail(err, errlen, SM_ERESOURCE,
                    "collective #%u: a block of %lld bytes from device %d does not fit in the "
                    "%lld bytes this worker buffers for all jobs that have not started (%lld in "
                    "use)",
                    b->seq, (long long)b->len, b->src_device, (long long)max, (long long)used);
    } else {
        box->reserved += b->len;
        b->reserved_in = box;
    }
    pthread_mutex_unlock(&box->mu);
    return e;
}

sm_err sm_mailbox_take(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device,
                       int readers, const struct timespec *deadline, sm_mailbox_blob **out,
                       char *err, size_t errlen)
{
    sm_err e = SM_OK;
    *out = NULL;
    pthread_mutex_lock(&box->mu);
    for (;;) {
        if (box->aborted) {
            e = sm_fail(err, errlen, box->code, "%s", box->why);
            break;
        }
        sm_mailbox_blob *b = box->blobs;
        while (b && !(b->seq == seq && b->src_device == src_device && b->dst_device == dst_device))
            b = b->next;
        if (b) {
            if (b->readers < 0)
                b->readers = readers;
            *out = b;
            break;
        }
        if (pthread_cond_timedwait(&box->cv, &box->mu, deadline) == ETIMEDOUT) {
            e = SM_ETIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&box->mu);
    return e;
}

void sm_mailbox_release(sm_mailbox *box, sm_mailbox_blob *b)
{
    pthread_mutex_lock(&box->mu);
    if (--b->readers > 0) {
        pthread_mutex_unlock(&box->mu);
        return;
    }
    for (sm_mailbox_blob **pp = &box->blobs; *pp; pp = &(*pp)->next) {
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    }
    box->bytes -= b->len;
    if (box->pending)
        pending_uncharge(box->budget, b->len);
    pthread_mutex_unlock(&box->mu);
    sm_mailbox_blob_free(b);
}

void sm_mailbox_abort(sm_mailbox *box, sm_err code, const char *why)
{
    pthread_mutex_lock(&box->mu);
    if (!box->aborted) {
        box->aborted = 1;
        box->code = code;
        snprintf(box->why, sizeof box->why, "%s", why);
        pthread_cond_broadcast(&box->cv);
    }
    pthread_mutex_unlock(&box->mu);
}

void sm_mailbox_set_max(sm_mailbox *box, int64_t max_bytes)
{
    pthread_mutex_lock(&box->mu);
    box->max_bytes = max_bytes;
    if (max_bytes == 0 && box->pending) { /* the job started: out of the budget */
        pending_uncharge(box->budget, box->bytes + box->reserved);
        box->pending = 0;
    }
    pthread_mutex_unlock(&box->mu);
}

int64_t sm_mailbox_bytes(sm_mailbox *box)
{
    pthread_mutex_lock(&box->mu);
    int64_t n = box->bytes;
    pthread_mutex_unlock(&box->mu);
    return n;
}

/* ---- destinations ---------------------------------------------------------- */

static sm_mailbox_dest *sm_mailbox_dest_find(sm_mailbox *box, uint32_t seq, int32_t src_device,
                                             int32_t dst_device, sm_mailbox_dest ***at)
{
    for (sm_mailbox_dest **pp = &box->dests; *pp; pp = &(*pp)->next) {
        sm_mailbox_dest *d = *pp;
        if (d->seq == seq && d->src_device == src_device && d->dst_device == dst_device) {
            if (at)
                *at = pp;
            return d;
        }
    }
    return NULL;
}

sm_err sm_mailbox_expect(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device,
                         void *buf, int64_t len)
{
    sm_mailbox_dest *d = calloc(1, sizeof *d);
    if (!d)
        return SM_ENOMEM;
    *d = (sm_mailbox_dest){
        .seq = seq, .src_device = src_device, .dst_device = dst_device, .buf = buf, .len = len};
    pthread_mutex_lock(&box->mu);
    if (sm_mailbox_dest_find(box, seq, src_device, dst_device, NULL)) {
        pthread_mutex_unlock(&box->mu);
        free(d);
        return SM_EEXIST;
    }
    d->next = box->dests;
    box->dests = d;
    pthread_mutex_unlock(&box->mu);
    return SM_OK;
}

void sm_mailbox_unexpect(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device)
{
    sm_mailbox_dest **at;
    pthread_mutex_lock(&box->mu);
    sm_mailbox_dest *d = sm_mailbox_dest_find(box, seq, src_device, dst_device, &at);
    while (d && d->busy) {
        pthread_cond_wait(&box->cv, &box->mu);
        d = sm_mailbox_dest_find(box, seq, src_device, dst_device, &at);
    }
    if (d)
        *at = d->next;
    pthread_mutex_unlock(&box->mu);
    free(d);
}

/* Claims the destination offered for rx's new blob b if it fits, making b
 * direct (one piece over the destination). */
static sm_err sm_mailbox_claim(sm_mailbox_rx *rx, sm_mailbox_blob *b)
{
    if (!rx->box || !b->len)
        return SM_OK;
    sm_mailbox *box = rx->box;
    pthread_mutex_lock(&box->mu);
    sm_mailbox_dest *d = sm_mailbox_dest_find(box, b->seq, b->src_device, b->dst_device, NULL);
    if (d && !d->claimed && d->len == b->len) {
        d->claimed = rx;
        b->direct = 1;
    }
    pthread_mutex_unlock(&box->mu);
    if (!b->direct)
        return SM_OK;
    if (!(b->pieces = malloc(sizeof *b->pieces)))
        return SM_ENOMEM; /* the claim stays: the stream fails, its blob with it */
    b->pieces[0] = (sm_mailbox_piece){d->buf, b->len};
    b->npieces = b->cap = 1;
    return SM_OK;
}

/* Marks the destination of rx's direct blob busy for one chunk; 0 once it
 * was withdrawn. */
static int sm_mailbox_dest_hold(sm_mailbox_rx *rx, int busy)
{
    const sm_mailbox_blob *b = rx->cur;
    sm_mailbox *box = rx->box;
    pthread_mutex_lock(&box->mu);
    sm_mailbox_dest *d = sm_mailbox_dest_find(box, b->seq, b->src_device, b->dst_device, NULL);
    int ok = d && d->claimed == rx;
    if (ok)
        d->busy = busy;
    if (ok && !busy)
        pthread_cond_broadcast(&box->cv);
    pthread_mutex_unlock(&box->mu);
    return ok;
}

/* ---- reassembly ----------------------------------------------------------- */

/* The checks of a message's header and where its data goes (*dst); takes
 * owned (a malloc'd copy of the data) as the piece when not NULL (freed
 * on error). */
static sm_err sm_mailbox_rx_put(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, void *owned,
                                void **dst, char *err, size_t errlen)
{
    *dst = NULL;
    if (!rx->sum && !(rx->sum = sm_checksum_create()))
        goto nomem;
    if (!rx->cur) {
        if (m->offset != 0) {
            free(owned);
            return sm_fail(err, errlen, SM_EINVAL,
                           "collective #%u from device %d starts at offset %lld, not 0", m->seq,
                           m->src_device, (long long)m->offset);
        }
        if (m->total_bytes < 0 || m->total_bytes > SM_MAILBOX_MAX_BLOB) {
            free(owned);
            return sm_fail(err, errlen, SM_EINVAL,
                           "collective #%u from device %d announces %lld bytes (at most %lld)",
                           m->seq, m->src_device, (long long)m->total_bytes,
                           (long long)SM_MAILBOX_MAX_BLOB);
        }
        sm_mailbox_blob *b = calloc(1, sizeof *b);
        if (!b) {
            free(owned);
            return sm_fail(err, errlen, SM_ERESOURCE,
                           "no memory for a %lld-byte block of collective #%u",
                           (long long)m->total_bytes, m->seq);
        }
        b->seq = m->seq;
        b->src_device = m->src_device;
        b->dst_device = m->dst_device;
        b->len = m->total_bytes;
        sm_err re = sm_mailbox_reserve(rx->box, b, err, errlen);
        if (re) {
            free(owned);
            sm_mailbox_blob_free(b);
            return re;
        }
        rx->cur = b;
        rx->job = m->job_id;
        rx->got = 0;
        sm_checksum_reset(rx->sum);
        if (!owned && sm_mailbox_claim(rx, b))
            goto nomem;
    }
    sm_mailbox_blob *b = rx->cur;
    if (m->job_id.v != rx->job.v || m->seq != b->seq || m->src_device != b->src_device ||
        m->dst_device != b->dst_device || m->total_bytes != b->len || m->offset != rx->got) {
        free(owned);
        return sm_fail(err, errlen, SM_EINVAL,
                       "collective message out of order: job %llu #%u from device %d at offset "
                       "%lld, expected job %llu #%u from device %d at offset %lld",
                       (unsigned long long)m->job_id.v, m->seq, m->src_device, (long long)m->offset,
                       (unsigned long long)rx->job.v, b->seq, b->src_device, (long long)rx->got);
    }
    if ((int64_t)m->len > b->len - rx->got) {
        free(owned);
        return sm_fail(err, errlen, SM_EINVAL,
                       "collective #%u from device %d: %lld bytes at offset %lld overrun its %lld "
                       "bytes",
                       b->seq, b->src_device, (long long)m->len, (long long)rx->got,
                       (long long)b->len);
    }
    if (m->len && b->npieces >= SM_MAILBOX_MAX_PIECES + b->len / SM_MAILBOX_PIECE_BYTES) {
        free(owned);
        return sm_fail(err, errlen, SM_EINVAL,
                       "collective #%u from device %d: %lld bytes in more than %lld chunks", b->seq,
                       b->src_device, (long long)b->len,
                       (long long)(SM_MAILBOX_MAX_PIECES + b->len / SM_MAILBOX_PIECE_BYTES));
    }
    if (!m->len)
        return SM_OK;
    if (b->direct) {
        if (!sm_mailbox_dest_hold(rx, 1))
            return sm_fail(err, errlen, SM_ECANCELLED,
                           "collective #%u from device %d is no longer awaited on this worker",
                           b->seq, b->src_device);
        rx->busy = 1;
        *dst = (char *)b->pieces[0].data + rx->got;
        return SM_OK;
    }
    void *piece = owned ? owned : malloc(m->len);
    if (!piece || sm_mailbox_blob_add(b, piece, (int64_t)m->len)) /* frees piece on error */
        goto nomem;
    *dst = piece;
    return SM_OK;
nomem:
    free(owned);
    return sm_fail(err, errlen, SM_ERESOURCE, "no memory for a %lld-byte block of collective #%u",
                   (long long)m->total_bytes, m->seq);
}

sm_err sm_mailbox_rx_place(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, void **dst, char *err,
                           size_t errlen)
{
    return sm_mailbox_rx_put(rx, m, NULL, dst, err, errlen);
}

void sm_mailbox_rx_copied(sm_mailbox_rx *rx, const void *p, size_t n)
{
    sm_checksum_update(rx->sum, p, n);
}

sm_err sm_mailbox_rx_done(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, sm_job_id *job,
                          sm_mailbox_blob **out, int *done, char *err, size_t errlen)
{
    *done = 0;
    *out = NULL;
    sm_mailbox_blob *b = rx->cur;
    if (rx->busy) {
        rx->busy = 0;
        sm_mailbox_dest_hold(rx, 0);
    }
    rx->got += (int64_t)m->len;
    sm_traffic_add(SM_TRAFFIC_COLL_IN, (int64_t)m->len);
    if (!m->last)
        return SM_OK;
    if (rx->got != b->len)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "collective #%u from device %d ended after %lld of %lld bytes", b->seq,
                       b->src_device, (long long)rx->got, (long long)b->len);
    if (sm_checksum_digest(rx->sum) != m->checksum)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "collective #%u from device %d: checksum mismatch over %lld bytes", b->seq,
                       b->src_device, (long long)b->len);
    *job = rx->job;
    *out = b;
    *done = 1;
    rx->cur = NULL;
    return SM_OK;
}

sm_err sm_mailbox_rx_feed(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, void *owned, sm_job_id *job,
                          sm_mailbox_blob **out, int *done, char *err, size_t errlen)
{
    void *dst;
    *done = 0;
    *out = NULL;
    sm_err e = sm_mailbox_rx_put(rx, m, owned, &dst, err, errlen);
    if (e)
        return e;
    if (m->len && dst != m->data)
        memcpy(dst, m->data, m->len);
    if (m->len)
        sm_mailbox_rx_copied(rx, dst, m->len);
    return sm_mailbox_rx_done(rx, m, job, out, done, err, errlen);
}

void sm_mailbox_rx_end(sm_mailbox_rx *rx)
{
    if (rx->busy) {
        rx->busy = 0;
        sm_mailbox_dest_hold(rx, 0);
    }
    sm_mailbox_discard(rx->cur ? rx->cur->reserved_in : NULL, rx->cur);
    rx->cur = NULL;
    sm_checksum_free(rx->sum);
    rx->sum = NULL;
}
