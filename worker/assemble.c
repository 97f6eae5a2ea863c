#include "assemble.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "sm_time.h"
#include "sm_tpool.h"

typedef struct {
    sm_handlers *h;
    const sm_svc_assemble_req *req;
    sm_store_shard **shards;
    const int *same;  /* per shard: an earlier shard with the same bytes, or -1 */
    int64_t until_ms; /* the pulls' deadline (CLOCK_MONOTONIC ms; 0: none) */
} assemble_job;

static int piece_is_local(const sm_handlers *h, const sm_svc_piece *p)
{
    return !p->src_address || !*p->src_address ||
           (h->self_address && !strcmp(p->src_address, h->self_address));
}

/* Checks a piece's placement in the new shard (the source side is checked
 * where the source is: here for local pieces, by the peer for remote ones). */
static sm_err piece_check(const sm_svc_piece *p, const sm_shape *dst, char *err, size_t errlen)
{
    char b1[160], b2[96];
    if (p->src_box.rank != dst->rank)
        return sm_fail(err, errlen, SM_EINVAL, "its box %s has rank %d but the new shard %s has %d",
                       sm_index_format(&p->src_box, b1, sizeof b1), p->src_box.rank,
                       sm_shape_format(dst, b2, sizeof b2), dst->rank);
    for (int d = 0; d < dst->rank; d++) {
        int64_t ext = p->src_box.r[d].stop - p->src_box.r[d].start;
        if (p->src_box.r[d].start < 0 || ext < 0 || p->dst_offset[d] < 0 ||
            p->dst_offset[d] > dst->dims[d] || ext > dst->dims[d] - p->dst_offset[d])
            return sm_fail(err, errlen, SM_EINVAL,
                           "its box %s at offset %lld of dimension %d does not fit the new "
                           "shard %s",
                           sm_index_format(&p->src_box, b1, sizeof b1), (long long)p->dst_offset[d],
                           d, sm_shape_format(dst, b2, sizeof b2));
    }
    return SM_OK;
}

static sm_err piece_copy_local(sm_handlers *h, const sm_svc_piece *p, sm_dtype t,
                               sm_store_shard *dst, char *err, size_t errlen)
{
    sm_store_shard *src = NULL;
    int64_t src_off[SM_MAX_RANK], extent[SM_MAX_RANK];
    sm_err e = sm_store_get(h->store, p->src_array, p->src_device, &src, err, errlen);
    if (e)
        return e;
    if (src->dtype != t) {
        e = sm_fail(err, errlen, SM_EINVAL, "the source shard is %s, the new array %s",
                    sm_dtype_name(src->dtype), sm_dtype_name(t));
        goto done;
    }
    if ((e = sm_index_check(&p->src_box, &src->shape, "shard", err, errlen)))
        goto done;
    for (int d = 0; d < p->src_box.rank; d++) {
        src_off[d] = p->src_box.r[d].start;
        extent[d] = p->src_box.r[d].stop - p->src_box.r[d].start;
    }
    e = sm_block_copy(dst->data, &dst->shape, p->dst_offset, src->data, &src->shape, src_off,
                      extent, sm_dtype_size(t), err, errlen);
done:
    sm_store_shard_release(src);
    return e;
}

/* 1 if the request has a piece to pull from a peer or read from a file. */
static int assemble_waits(const sm_handlers *h, const sm_svc_assemble_req *req)
{
    for (int i = 0; i < req->nshards; i++)
        for (int k = 0; k < req->shards[i].npieces; k++) {
            const sm_svc_piece *p = &req->shards[i].pieces[k];
            if (p->src_file > 0 || !piece_is_local(h, p))
                return 1;
        }
    return 0;
}

/* Fills shard i from its pieces (an sm_tpool_index_fn). */
static sm_err assemble_one(void *user, int i, char *err, size_t errlen)
{
    assemble_job *job = user;
    const sm_svc_assemble_shard *s = &job->req->shards[i];
    sm_store_shard *dst = job->shards[i];
    char inner[768];
    if (job->same[i] >= 0) /* shares the bytes of an earlier shard, once it is filled */
        return SM_OK;
    for (int k = 0; k < s->npieces; k++) {
        const sm_svc_piece *p = &s->pieces[k];
        if (p->src_file > 0) /* read by sm_ckpt_load_pieces */
            continue;
        int local = piece_is_local(job->h, p);
        sm_err e = piece_check(p, &s->shape, inner, sizeof inner);
        if (!e && local)
            e = piece_copy_local(job->h, p, job->req->dtype, dst, inner, sizeof inner);
        else if (!e)
            e = sm_peer_fetch(job->h->peers, p->src_address, p->src_array, p->src_device,
                              &p->src_box, job->req->dtype, dst->data, &dst->shape, p->dst_offset,
                              job->until_ms, inner, sizeof inner);
        if (e && local)
            return sm_fail(err, errlen, e,
                           "assembling device %d of array %llu, piece %d (array %llu device %d "
                           "on this worker): %s",
                           (int)s->device, (unsigned long long)job->req->array_id.v, k,
                           (unsigned long long)p->src_array.v, (int)p->src_device, inner);
        if (e) /* the peer's sentence names the source worker, array and device */
            return sm_fail(err, errlen, e, "assembling device %d of array %llu, piece %d: %s",
                           (int)s->device, (unsigned long long)job->req->array_id.v, k, inner);
    }
    return SM_OK;
}

/* 1 if the pieces of s (each checked with piece_check) fill its shard
 * exactly: pairwise disjoint, their elements adding up to the shard's. A
 * reshard's always do (the plan covers every element once); then the new
 * shard needs no zeroing first, since every byte of it is written. */
static int assemble_covered(const sm_svc_assemble_shard *s)
{
    int64_t want = 1, got = 0;
    for (int d = 0; d < s->shape.rank; d++)
        want *= s->shape.dims[d];
    for (int k = 0; k < s->npieces; k++) {
        const sm_svc_piece *a = &s->pieces[k];
        int64_t n = 1;
        for (int d = 0; d < s->shape.rank; d++)
            n *= a->src_box.r[d].stop - a->src_box.r[d].start;
        got += n;
        for (int j = 0; j < k; j++) {
            const sm_svc_piece *b = &s->pieces[j];
            int apart = 0;
            for (int d = 0; d < s->shape.rank && !apart; d++) {
                int64_t a0 = a->dst_offset[d],
                        a1 = a0 + a->src_box.r[d].stop - a->src_box.r[d].start;
                int64_t b0 = b->dst_offset[d],
                        b1 = b0 + b->src_box.r[d].stop - b->src_box.r[d].start;
                apart = a1 <= b0 || b1 <= a0;
            }
            if (!apart && s->shape.rank > 0)
                return 0;
        }
    }
    return s->shape.rank > 0 ? got == want : s->npieces == 1;
}

/* 1 if pieces a and b take the same bytes to the same place, neither from
 * a checkpoint file. */
static int piece_same(const sm_svc_piece *a, const sm_svc_piece *b, int rank)
{
    const char *x = a->src_address ? a->src_address : "", *y = b->src_address ? b->src_address : "";
    if (a->src_file || b->src_file || a->src_array.v != b->src_array.v ||
        a->src_device != b->src_device || strcmp(x, y) || a->src_box.rank != b->src_box.rank)
        return 0;
    for (int d = 0; d < a->src_box.rank; d++)
        if (a->src_box.r[d].start != b->src_box.r[d].start ||
            a->src_box.r[d].stop != b->src_box.r[d].stop)
            return 0;
    for (int d = 0; d < rank; d++)
        if (a->dst_offset[d] != b->dst_offset[d])
            return 0;
    return 1;
}

/* The first shard before i of the same shape made of the same pieces (a
 * replicated layout's devices on this worker): its bytes will be i's,
 * which then shares them instead of a copy of its own; -1 if none. */
static int assemble_same_as(const sm_svc_assemble_req *req, int i)
{
    const sm_svc_assemble_shard *s = &req->shards[i];
    for (int j = 0; j < i && s->npieces > 0; j++) {
        const sm_svc_assemble_shard *t = &req->shards[j];
        int same = t->npieces == s->npieces && sm_shape_equal(&t->shape, &s->shape);
        for (int k = 0; same && k < s->npieces; k++)
            same = piece_same(&s->pieces[k], &t->pieces[k], s->shape.rank);
        if (same)
            return j;
    }
    return -1;
}

/* Validates the request and allocates every new shard (zeroed where its
 * pieces leave any of it unwritten), but those that will share an earlier
 * one's bytes (same[i] >= 0). */
static sm_err assemble_prepare(sm_handlers *h, const sm_svc_assemble_req *req,
                               sm_store_shard **shards, int32_t *devices, int *same, char *err,
                               size_t errlen)
{
    sm_err e;
    char inner[512];
    if (req->array_id.v == 0)
        return sm_fail(err, errlen, SM_EINVAL, "Assemble needs the id of the new array, not 0");
    if (sm_dtype_size(req->dtype) == 0)
        return sm_fail(err, errlen, SM_EINVAL, "Assemble of array %llu has no valid dtype (%d)",
                       (unsigned long long)req->array_id.v, (int)req->dtype);
    if (req->nshards < 0 || req->nshards > SM_MAX_WORKER_DEVICES)
        return sm_fail(err, errlen, SM_EINVAL, "Assemble lists %d shards, not 0..%d", req->nshards,
                       SM_MAX_WORKER_DEVICES);
    for (int i = 0; i < req->nshards; i++) {
        const sm_svc_assemble_shard *s = &req->shards[i];
        devices[i] = s->device;
        if ((e = sm_store_check_device(h->store, s->device, err, errlen)))
            return e;
        for (int j = 0; j < i; j++)
            if (devices[j] == s->device)
                return sm_fail(err, errlen, SM_EINVAL, "Assemble lists device %d twice",
                               (int)s->device);
        for (int k = 0; k < s->npieces; k++)
            if ((e = piece_check(&s->pieces[k], &s->shape, inner, sizeof inner)))
                return sm_fail(err, errlen, e, "piece %d of device %d of array %llu: %s", k,
                               (int)s->device, (unsigned long long)req->array_id.v, inner);
        if ((same[i] = assemble_same_as(req, i)) >= 0)
            continue;
        if ((e = sm_store_shard_alloc(h->store, req->dtype, &s->shape, &shards[i], inner,
                                      sizeof inner)))
            return sm_fail(err, errlen, e, "the new shard of device %d: %s", (int)s->device, inner);
        if (!sm_ckpt_shard_is_landing(req, i) && /* a landing is read over whole */
            !assemble_covered(s))
            memset(shards[i]->data, 0, (size_t)shards[i]->nbytes);
    }
    return SM_OK;
}

sm_err sm_assemble_run(sm_handlers *h, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                       size_t errlen)
{
    uint64_t epoch = sm_store_epoch(h->store);
    int n = req->nshards > 0 ? req->nshards : 0;
    sm_store_shard **shards = calloc(n ? (size_t)n : 1, sizeof *shards);
    int32_t *devices = calloc(n ? (size_t)n : 1, sizeof *devices);
    int *same = calloc(n ? (size_t)n : 1, sizeof *same);
    assemble_job job = {.h = h, .req = req, .same = same};
    sm_err e;
    /* The pulls from peers end an eighth of the caller's time (at most 5 s)
     * before the caller's deadline: a peer that does not answer fails the
     * Assemble with a sentence naming it, in time for the caller to read. */
    int64_t left = sm_rpc_handler_left_ms();
    if (left >= 0)
        job.until_ms = sm_time_mono_ms() + left - (left / 8 < 5000 ? left / 8 : 5000);
    /* Pulls wait on peers, and the peers' pulls from this worker wait on
     * calls queued here: as sm_rpc.h asks, the completion queue goes to
     * another thread now rather than after the server notices. */
    if (assemble_waits(h, req))
        sm_rpc_may_block();

    if (!shards || !devices || !same) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory assembling array %llu",
                    (unsigned long long)req->array_id.v);
        goto fail;
    }
    if ((e = assemble_prepare(h, req, shards, devices, same, err, errlen)))
        goto fail;
    job.shards = shards;
    if (req->nfiles > 0 &&
        (e = sm_ckpt_load_pieces(sm_store_pool(h->store), req, shards, err, errlen)))
        goto fail;
    if ((e = sm_tpool_run(NULL, n, h->assemble_threads < 16 ? h->assemble_threads : 16,
                          assemble_one, &job, err, errlen)))
        goto fail;
    for (int i = 0; i < n; i++)
        if (same[i] >= 0 && (e = sm_store_shard_share(shards[same[i]], &shards[i], err, errlen)))
            goto fail;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += shards[i]->nbytes;
    if ((e = sm_store_put(h->store, epoch, req->array_id, n, devices, shards, err, errlen)))
        goto fail;
    SM_DEBUG("assembled array %llu on %d device(s), %lld bytes",
             (unsigned long long)req->array_id.v, n, (long long)total);
    *bytes = total;
    free(shards);
    free(devices);
    free(same);
    return SM_OK;
fail:
    for (int i = 0; shards && i < n; i++)
        sm_store_shard_release(shards[i]);
    free(shards);
    free(devices);
    free(same);
    return e;
}
