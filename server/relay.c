/* relay: upload and download relays, FreeArray. See relay.h. */
#include "relay.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"
#include "sm_time.h"

void sm_relay_strip_status(char *err)
{
    size_t k = 0;
    while (isupper((unsigned char)err[k]) || err[k] == '_')
        k++;
    if (k > 0 && err[k] == ':' && err[k + 1] == ' ')
        memmove(err, err + k + 2, strlen(err + k + 2) + 1);
}

void sm_relay_free(const sm_reg_free *frees, int n, int deadline_ms)
{
    char err[512];
    for (int i = 0; i < n; i++) {
        const sm_reg_free *f = &frees[i];
        if (!f->t.ch)
            continue;
        sm_err e = sm_svc_worker_free_array(f->t.ch, deadline_ms, f->array, f->t.ndevices,
                                            f->t.devices, err, sizeof err);
        if (e)
            SM_WARN("freeing array %llu on worker %u at %s failed: %s",
                    (unsigned long long)f->array.v, f->t.worker_id, f->t.address, err);
    }
}

/* Rewrites a worker's error as "worker N at ADDR: sentence". */
static void sm_relay_worker_err(const sm_reg_target *t, char *err, size_t errlen)
{
    char tmp[512];
    sm_relay_strip_status(err);
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "worker %u at %s: %s", t->worker_id, t->address, tmp);
}

/* Frees array id's devices listed in t[0..n) on their workers. */
static void sm_relay_drop(sm_array_id id, const sm_reg_target *t, int n)
{
    sm_reg_free *f = malloc(sizeof *f * (size_t)(n > 0 ? n : 1));
    for (int k = 0; f && k < n; k++)
        f[k] = (sm_reg_free){id, t[k]};
    if (f)
        sm_relay_free(f, n, 10000);
    free(f);
}

/* The worker-side streams of one upload. */
typedef struct {
    sm_reg_target *t;
    int nt;
    sm_svc_upload_stream **st;
} sm_relay_up;

static void sm_relay_up_abort(sm_relay_up *u)
{
    for (int k = 0; k < u->nt; k++)
        if (u->st[k]) {
            sm_svc_upload_abort(u->st[k]);
            u->st[k] = NULL;
        }
}

/* Sends msg to every worker stream; the first message carries each
 * worker's own devices in its header. */
static sm_err sm_relay_up_send(sm_relay_up *u, const sm_svc_upload_msg *msg, char *err,
                               size_t errlen)
{
    for (int k = 0; k < u->nt; k++) {
        sm_svc_upload_msg m = *msg;
        if (m.has_header) {
            m.header.ndevices = u->t[k].ndevices;
            m.header.devices = u->t[k].devices;
        }
        sm_err e = sm_svc_upload_send(u->st[k], &m, err, errlen);
        if (e) {
            sm_relay_worker_err(&u->t[k], err, errlen);
            return e;
        }
    }
    return SM_OK;
}

/* Checks a data message's position: offsets increase without gaps and stay
 * within the total. */
static sm_err sm_relay_check_chunk(const sm_svc_upload_msg *m, int64_t got, int64_t total,
                                   char *err, size_t errlen)
{
    if (m->offset != got)
        return sm_fail(err, errlen, SM_EINVAL,
                       "upload chunk at offset %lld is out of order: %lld bytes came before it",
                       (long long)m->offset, (long long)got);
    if ((int64_t)m->len > total - got)
        return sm_fail(err, errlen, SM_EINVAL,
                       "upload chunk at offset %lld of %zu bytes passes the end (%lld bytes)",
                       (long long)m->offset, m->len, (long long)total);
    return SM_OK;
}

/* Streams the rest of the upload after the header message first. */
static sm_err sm_relay_up_pump(sm_relay_up *u, sm_svc_upload_in *in, sm_svc_upload_msg *first,
                               int64_t total, uint64_t *checksum, char *err, size_t errlen)
{
    sm_svc_upload_msg m = *first;
    int64_t got = 0;
    int end = 0;
    sm_err e;
    for (;;) {
        e = sm_relay_check_chunk(&m, got, total, err, errlen);
        if (e)
            return e;
        got += (int64_t)m.len;
        e = sm_relay_up_send(u, &m, err, errlen);
        if (e)
            return e;
        if (m.last)
            break;
        e = sm_svc_upload_recv(in, &m, &end, err, errlen);
        if (e)
            return e;
        if (end)
            return sm_fail(err, errlen, SM_EINVAL,
                           "the upload ended after %lld of %lld bytes without a last message",
                           (long long)got, (long long)total);
        if (m.has_header)
            return sm_fail(err, errlen, SM_EINVAL,
                           "upload message at offset %lld carries a second header",
                           (long long)m.offset);
    }
    if (got != total)
        return sm_fail(err, errlen, SM_EINVAL, "the upload sent %lld of %lld bytes", (long long)got,
                       (long long)total);
    *checksum = m.checksum;
    e = sm_svc_upload_recv(in, &m, &end, err, errlen);
    if (e)
        return e;
    if (!end)
        return sm_fail(err, errlen, SM_EINVAL, "the upload continued after its last message");
    return SM_OK;
}

sm_err sm_relay_upload(sm_registry *r, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                       size_t errlen)
{
    sm_svc_upload_msg first;
    sm_relay_up u = {0};
    int32_t *devs = NULL;
    int ndevs = 0, end = 0, began = 0, ready = 0;
    int64_t left = 0;
    uint64_t checksum = 0;
    sm_err e = sm_svc_upload_recv(in, &first, &end, err, errlen);
    if (e)
        return e;
    if (end || !first.has_header)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the first upload message must carry the header (array, devices, shape)");
    sm_svc_upload_header h = first.header;
    if (h.ndevices > 0) {
        devs = malloc(sizeof *devs * (size_t)h.ndevices);
        if (!devs)
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting an upload");
        memcpy(devs, h.devices, sizeof *devs * (size_t)h.ndevices);
        ndevs = h.ndevices;
    }
    h.devices = devs;
    e = sm_registry_upload_begin(r, &h, sm_time_mono_ms(), &u.t, &u.nt, &left, err, errlen);
    if (e)
        goto fail;
    began = 1;
    u.st = calloc((size_t)u.nt, sizeof *u.st);
    if (!u.st) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting an upload");
        goto fail;
    }
    for (int k = 0; k < u.nt; k++) {
        int ms = left < 1000 ? 1000 : left > INT32_MAX ? INT32_MAX : (int)left;
        e = sm_svc_upload_open(u.t[k].ch, 1, ms, &u.st[k], err, errlen);
        if (e) {
            sm_relay_worker_err(&u.t[k], err, errlen);
            goto fail;
        }
    }
    e = sm_relay_up_pump(&u, in, &first, h.total_bytes, &checksum, err, errlen);
    if (e)
        goto fail;
    for (int k = 0; k < u.nt; k++) {
        sm_svc_upload_reply wr = {0};
        e = sm_svc_upload_finish(u.st[k], &wr, err, errlen);
        u.st[k] = NULL;
        if (e) {
            sm_relay_worker_err(&u.t[k], err, errlen);
            sm_relay_drop(h.array_id, u.t, k); /* workers that stored it */
            goto fail;
        }
    }
    began = 0;
    e = sm_registry_upload_end(r, h.array_id, devs, ndevs, 1, &ready, err, errlen);
    if (e) {
        sm_relay_drop(h.array_id, u.t, u.nt); /* the array went away or failed meanwhile */
        goto fail;
    }
    sm_registry_upload_checksum(r, h.array_id, devs, ndevs, checksum);
    out->bytes = h.total_bytes;
    out->checksum = checksum;
    out->array_ready = ready;
    SM_DEBUG("upload of %lld bytes to array %llu (%d devices) done", (long long)h.total_bytes,
             (unsigned long long)h.array_id.v, ndevs);
fail:
    sm_relay_up_abort(&u);
    if (began) {
        char ignore[256];
        int r2;
        sm_registry_upload_end(r, h.array_id, devs, ndevs, 0, &r2, ignore, sizeof ignore);
    }
    free(u.st);
    free(u.t);
    free(devs);
    return e;
}

/* What a commit expects of each device of one worker (parallel to its
 * sm_reg_target's devices). */
typedef struct {
    int64_t bytes[SM_MAX_WORKER_DEVICES];
    uint64_t checksum[SM_MAX_WORKER_DEVICES];
} sm_relay_want;

/* Checks what worker t holds (st, from ShardInfo) against w. */
static sm_err sm_relay_check(const sm_reg_target *t, const sm_relay_want *w,
                             const sm_svc_shard_state *st, sm_array_id id, char *err, size_t errlen)
{
    for (int k = 0; k < t->ndevices; k++) {
        if (!st[k].present)
            return sm_fail(err, errlen, SM_EPRECONDITION,
                           "worker %u at %s holds no shard of array %llu on device %d; send it "
                           "with PutShard before committing it",
                           t->worker_id, t->address, (unsigned long long)id.v, (int)t->devices[k]);
        if (st[k].bytes != w->bytes[k] || st[k].checksum != w->checksum[k])
            return sm_fail(err, errlen, SM_EDATALOSS,
                           "device %d of array %llu on worker %u holds %lld bytes with checksum "
                           "%016llx, not the %lld bytes with checksum %016llx being committed",
                           (int)t->devices[k], (unsigned long long)id.v, t->worker_id,
                           (long long)st[k].bytes, (unsigned long long)st[k].checksum,
                           (long long)w->bytes[k], (unsigned long long)w->checksum[k]);
    }
    return SM_OK;
}

/* Checks what workers t[0..n) hold against want[0..n), asking them all at
 * once (one ShardInfo each; see sm_relay_commit). */
static sm_err sm_relay_verify(const sm_reg_target *t, const sm_relay_want *want, int n,
                              sm_array_id id, int deadline_ms, char *err, size_t errlen)
{
    sm_svc_shard_state(*st)[SM_MAX_WORKER_DEVICES] = calloc((size_t)n + 1, sizeof *st);
    sm_rpc_channel **chs = calloc((size_t)n + 1, sizeof *chs);
    sm_svc_shard_query *q = calloc((size_t)n + 1, sizeof *q);
    sm_err e = SM_OK;
    if (!st || !chs || !q) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory checking %d workers' shards", n);
        goto done;
    }
    for (int k = 0; k < n; k++) {
        chs[k] = t[k].ch;
        q[k] =
            (sm_svc_shard_query){.ndevices = t[k].ndevices, .devices = t[k].devices, .out = st[k]};
    }
    sm_svc_worker_shard_info_all(chs, n, deadline_ms, id, q);
    for (int k = 0; k < n && !e; k++) {
        if ((e = q[k].e)) {
            snprintf(err, errlen, "%s", q[k].err);
            sm_relay_worker_err(&t[k], err, errlen);
        } else {
            e = sm_relay_check(&t[k], &want[k], q[k].out, id, err, errlen);
        }
    }
done:
    free(st);
    free(chs);
    free(q);
    return e;
}

/* Adds the per-worker device lists t[0..n) of target g to the per-worker
 * lists wt/want[0..*nw). */
static sm_err sm_relay_merge(sm_reg_target *wt, sm_relay_want *want, int *nw,
                             const sm_reg_target *t, int n, const sm_svc_commit_target *g,
                             char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < *nw && wt[k].worker_id != t[i].worker_id)
            k++;
        if (k == *nw) {
            wt[k] = t[i];
            wt[k].ndevices = 0;
            (*nw)++;
        }
        for (int j = 0; j < t[i].ndevices; j++) {
            int m = wt[k].ndevices;
            if (m == SM_MAX_WORKER_DEVICES)
                return sm_fail(err, errlen, SM_EINVAL,
                               "a commit names more than %d devices of worker %u",
                               SM_MAX_WORKER_DEVICES, t[i].worker_id);
            wt[k].devices[m] = t[i].devices[j];
            want[k].bytes[m] = g->bytes;
            want[k].checksum[m] = g->checksum;
            wt[k].ndevices = m + 1;
        }
    }
    return SM_OK;
}

/* Refuses a device named by two targets of one commit. */
static sm_err sm_relay_commit_dups(const sm_svc_commit_target *g, int n, char *err, size_t errlen)
{
    for (int a = 0; a < n; a++)
        for (int i = 0; i < g[a].ndevices; i++)
            for (int b = 0; b < a; b++)
                for (int j = 0; j < g[b].ndevices; j++)
                    if (g[a].devices[i] == g[b].devices[j])
                        return sm_fail(err, errlen, SM_EINVAL,
                                       "device %d is named by two targets of the commit",
                                       (int)g[a].devices[i]);
    return SM_OK;
}

sm_err sm_relay_commit(sm_registry *r, const sm_svc_commit_req *req, sm_svc_upload_reply *out,
                       int deadline_ms, char *err, size_t errlen)
{
    sm_svc_commit_target one = {req->ndevices, req->devices, req->checksum, req->bytes};
    const sm_svc_commit_target *g = req->ntargets > 0 ? req->targets : &one;
    int ng = req->ntargets > 0 ? req->ntargets : 1, ndev = 0, nbegun = 0, nw = 0, ready = 0;
    int64_t left = 0, bytes = 0;
    char ignore[256];
    sm_err e;

    if ((e = sm_relay_commit_dups(g, ng, err, errlen)))
        return e;
    for (int k = 0; k < ng; k++)
        ndev += g[k].ndevices;
    int32_t *devs = malloc(sizeof *devs * ((size_t)ndev + 1));
    sm_reg_target *wt = calloc((size_t)ndev + 1, sizeof *wt);
    sm_relay_want *want = calloc((size_t)ndev + 1, sizeof *want);
    if (!devs || !wt || !want) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory committing shards");
        goto done;
    }
    /* Reserve every target's devices (each target's checks as for one). */
    for (int k = 0; k < ng && !e; k++) {
        sm_svc_commit_req q = {
            req->array_id, g[k].ndevices, g[k].devices, g[k].checksum, g[k].bytes, 0, NULL};
        sm_reg_target *t = NULL;
        int nt = 0;
        if ((e = sm_registry_commit_begin(r, &q, sm_time_mono_ms(), &t, &nt, &left, err, errlen)))
            break;
        memcpy(devs + nbegun, g[k].devices, sizeof *devs * (size_t)g[k].ndevices);
        nbegun += g[k].ndevices;
        bytes += g[k].bytes;
        e = sm_relay_merge(wt, want, &nw, t, nt, &g[k], err, errlen);
        free(t);
    }
    if (e) {
        sm_registry_upload_end(r, req->array_id, devs, nbegun, 0, &ready, ignore, sizeof ignore);
        goto done;
    }
    /* One ShardInfo per worker, all at once. */
    e = sm_relay_verify(wt, want, nw, req->array_id, deadline_ms, err, errlen);
    if (e) {
        sm_registry_upload_end(r, req->array_id, devs, nbegun, 0, &ready, ignore, sizeof ignore);
        sm_relay_drop(req->array_id, wt, nw); /* bad or partial: send again */
        goto done;
    }
    /* All filled at once, or none. */
    e = sm_registry_upload_end(r, req->array_id, devs, nbegun, 1, &ready, err, errlen);
    if (e) {
        sm_relay_drop(req->array_id, wt, nw); /* the array went away or failed meanwhile */
        goto done;
    }
    for (int k = 0; k < ng; k++)
        sm_registry_upload_checksum(r, req->array_id, g[k].devices, g[k].ndevices, g[k].checksum);
    out->bytes = bytes;
    out->checksum = g[ng - 1].checksum;
    out->array_ready = ready;
    SM_DEBUG("commit of %lld bytes to array %llu (%d devices, %d targets) done", (long long)bytes,
             (unsigned long long)req->array_id.v, ndev, ng);
done:
    free(devs);
    free(wt);
    free(want);
    return e;
}

sm_err sm_relay_download(sm_registry *r, const sm_svc_download_req *req, sm_svc_download_out *out,
                         int deadline_ms, char *err, size_t errlen)
{
    sm_array_id id;
    sm_reg_target w;
    sm_svc_download_stream *st = NULL;
    sm_svc_chunk c;
    int end = 0;
    sm_err e = sm_registry_download_begin(r, req->array, req->device, &id, &w, err, errlen);
    if (e)
        return e;
    sm_svc_download_req wreq = *req;
    wreq.array.id = id;
    wreq.array.name = NULL;
    e = sm_svc_download_open(w.ch, 1, &wreq, deadline_ms, &st, err, errlen);
    while (!e) {
        e = sm_svc_download_recv(st, &c, &end, err, errlen);
        if (e || end)
            break;
        if (sm_svc_download_cancelled(out)) {
            e = sm_fail(err, errlen, SM_ECANCELLED, "the client went away");
            break;
        }
        e = sm_svc_download_send(out, &c, err, errlen);
    }
    if (e)
        sm_relay_strip_status(err);
    sm_svc_download_free(st);
    return e;
}
