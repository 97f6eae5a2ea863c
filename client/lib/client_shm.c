/* client_shm: arrays in shared memory (sm_client_alloc), the staging
 * segments that arrays in ordinary memory pass through, and the proof
 * that a worker shares this host's memory, for uploads and downloads that
 * the worker copies straight between such an array and its shard (a
 * ShmRef instead of streamed bytes; docs/service.md "Transfers through
 * shared memory"). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "client_internal.h"
#include "sm_shm.h"
#include "sm_svc_job.h"

/* One buffer of sm_client_alloc: a segment (name set) or, where /dev/shm
 * had no room, ordinary memory (name ""); or a staging segment of the
 * client's cache (stage). */
typedef struct {
    sm_shm_seg seg; /* seg.base: the buffer */
    int shared;
    int stage;     /* 1: a staging segment (client_stage_take), not the caller's */
    int busy;      /* a staging segment lent to a transfer */
    uint64_t used; /* s->clock when last lent: the least recently used goes first */
} client_buf;

struct client_shm {
    pthread_mutex_t mu;
    client_buf *bufs;
    int nbufs, capbufs;
    size_t stage_max;   /* bytes the staging segments may hold together; 0: none */
    size_t stage_bytes; /* bytes they hold (and those being made) */
    uint64_t clock;
};

sm_err client_shm_create(sm_client *c, size_t stage_max, char *err, size_t errlen)
{
    if (!(c->shm = calloc(1, sizeof *c->shm)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a client");
    pthread_mutex_init(&c->shm->mu, NULL);
    c->shm->stage_max = stage_max;
    return SM_OK;
}

/* Unlinks and unmaps (or frees) one buffer taken off the list. */
static void client_buf_drop(client_buf *b)
{
    if (b->shared) {
        sm_shm_unlink(b->seg.name);
        sm_shm_seg_close(&b->seg);
    } else {
        free(b->seg.base);
    }
}

void client_shm_close(sm_client *c)
{
    client_shm *s = c->shm;
    if (!s)
        return;
    for (int i = 0; i < s->nbufs; i++)
        client_buf_drop(&s->bufs[i]);
    free(s->bufs);
    pthread_mutex_destroy(&s->mu);
    free(s);
    c->shm = NULL;
}

/* A new segment of nbytes with its pages allocated and mapped, or SM_ERESOURCE
 * where /dev/shm has no room. */
static sm_err client_seg_new(size_t nbytes, sm_shm_seg *seg, char *err, size_t errlen)
{
    char name[SM_SHM_NAME_MAX];
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint64_t)(uintptr_t)seg ^ (uint64_t)getpid() << 32;
    snprintf(name, sizeof name, "/shmap-c%07x-%016llx", (unsigned)getpid() & 0xfffffff,
             (unsigned long long)r);
    sm_err e = sm_shm_seg_create(name, nbytes, seg, err, errlen);
    if (e)
        return e;
    /* the pages now, so that no transfer pays for them; fallocate first, so
     * a full /dev/shm is an error here and not a SIGBUS later */
    if ((e = sm_shm_seg_reserve(seg, 0, nbytes, err, errlen))) {
        sm_shm_unlink(name);
        sm_shm_seg_close(seg);
        return e;
    }
    if (madvise(seg->base, nbytes, MADV_POPULATE_WRITE)) {
        long pg = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < nbytes; off += (size_t)pg)
            ((volatile char *)seg->base)[off] = 0;
    }
    return SM_OK;
}

/* Appends b to s's buffers (s->mu held); 0 when out of memory. */
static int client_buf_add(client_shm *s, const client_buf *b)
{
    if (s->nbufs == s->capbufs) {
        int cap = s->capbufs ? 2 * s->capbufs : 8;
        client_buf *nb = realloc(s->bufs, sizeof *nb * (size_t)cap);
        if (!nb)
            return 0;
        s->bufs = nb;
        s->capbufs = cap;
    }
    s->bufs[s->nbufs++] = *b;
    return 1;
}

sm_err sm_client_alloc(sm_client *c, size_t nbytes, void **out, char *err, size_t errlen)
{
    client_shm *s = c->shm;
    client_buf b;
    *out = NULL;
    memset(&b, 0, sizeof b);
    if (nbytes == 0)
        nbytes = 1;
    if (client_seg_new(nbytes, &b.seg, err, errlen) == SM_OK) {
        b.shared = 1;
    } else {
        /* no room in /dev/shm: ordinary memory, moved by the streams */
        if (posix_memalign(&b.seg.base, 64, nbytes))
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes", nbytes);
        memset(b.seg.base, 0, nbytes); /* zero-filled, as a new segment is */
        b.seg.len = nbytes;
        b.seg.fd = -1;
    }
    pthread_mutex_lock(&s->mu);
    int added = client_buf_add(s, &b);
    pthread_mutex_unlock(&s->mu);
    if (!added) {
        client_buf_drop(&b);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    }
    *out = b.seg.base;
    return SM_OK;
}

void sm_client_free(sm_client *c, void *p)
{
    client_shm *s = c ? c->shm : NULL;
    client_buf b;
    int found = 0;
    if (!s || !p)
        return;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nbufs && !found; i++)
        if (s->bufs[i].seg.base == p && !s->bufs[i].stage) {
            b = s->bufs[i];
            s->bufs[i] = s->bufs[--s->nbufs];
            found = 1;
        }
    pthread_mutex_unlock(&s->mu);
    if (found)
        client_buf_drop(&b);
}

/* Whether the worker at addr (channel ch) shares this host's memory: asked
 * once per address (a probe segment with a cookie the worker must read
 * back through ShmProbe), then remembered. */
static int client_shm_same_host(sm_client *c, const char *addr, sm_rpc_channel *ch)
{
    return sm_svc_shm_same(c->workers, addr, ch, c->timeout_ms, 0);
}

void client_shm_refused(sm_client *c, const char *addr)
{
    if (addr)
        sm_svc_shm_refused(c->workers, addr);
}

/* 1 with ref->name and ref->offset set when the nbytes at p lie wholly in
 * one of s's segments. */
static int client_shm_find(client_shm *s, const void *p, int64_t nbytes, sm_svc_shm_ref *ref)
{
    const char *q = p;
    int found = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nbufs && !found; i++) {
        const client_buf *b = &s->bufs[i];
        const char *base = b->seg.base;
        if (b->shared && q >= base && q <= base + b->seg.len &&
            (size_t)nbytes <= b->seg.len - (size_t)(q - base)) {
            snprintf(ref->name, sizeof ref->name, "%s", b->seg.name);
            ref->offset = q - base;
            found = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

int client_shm_ref(sm_client *c, const char *addr, sm_rpc_channel *ch, const void *buf,
                   const sm_shape *shape, sm_dtype t, const sm_index *box, sm_svc_shm_ref *ref)
{
    client_shm *s = c->shm;
    int64_t nbytes = 0;
    char ignore[128];
    memset(ref, 0, sizeof *ref);
    if (!s || c->no_shm || c->relay_only || c->grants || !addr || !*addr || !ch ||
        sm_shape_nbytes(shape, t, &nbytes, ignore, sizeof ignore))
        return 0;
    if (!client_shm_find(s, buf, nbytes, ref) || !client_shm_same_host(c, addr, ch)) {
        ref->name[0] = 0;
        return 0;
    }
    ref->global = *shape;
    ref->box = *box;
    return 1;
}

/* 1 if every worker that holds a shard or a copy of info (with
 * present_only, a present one) can be reached directly and shares this
 * host's memory. */
static int client_stage_hosts(sm_client *c, const sm_array_info *info, int present_only)
{
    int n = info->nshards + info->ncopies;
    for (int i = 0; i < n; i++) {
        const sm_shard_info *a =
            i < info->nshards ? &info->shards[i] : &info->copies[i - info->nshards];
        int seen = 0;
        if (present_only && !a->present)
            continue;
        for (int k = 0; k < i && !seen; k++) {
            const sm_shard_info *o =
                k < info->nshards ? &info->shards[k] : &info->copies[k - info->nshards];
            seen = (!present_only || o->present) && !strcmp(o->worker_address, a->worker_address);
        }
        if (seen)
            continue;
        sm_rpc_channel *ch = client_worker_channel(c, a->worker_address);
        if (!ch || !client_shm_same_host(c, a->worker_address, ch))
            return 0;
    }
    return n > 0;
}

void *client_stage_take(sm_client *c, const sm_array_info *info, int present_only, const void *user,
                        int64_t nbytes)
{
    client_shm *s = c->shm;
    sm_svc_shm_ref ref;
    char err[256];
    if (!s || !s->stage_max || c->no_shm || c->relay_only || c->grants ||
        nbytes < CLIENT_STAGE_MIN || (uint64_t)nbytes > s->stage_max)
        return NULL;
    memset(&ref, 0, sizeof ref);
    if (client_shm_find(s, user, nbytes, &ref) || !client_stage_hosts(c, info, present_only))
        return NULL; /* in shared memory already, or a worker elsewhere */
    size_t len = ((size_t)nbytes + CLIENT_STAGE_ROUND - 1) & ~(size_t)(CLIENT_STAGE_ROUND - 1);
    if (len > s->stage_max)
        len = (size_t)nbytes;
    for (;;) {
        client_buf victim;
        int best = -1, lru = -1;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->nbufs; i++) {
            const client_buf *b = &s->bufs[i];
            if (!b->stage || b->busy)
                continue;
            if (b->seg.len >= (size_t)nbytes && (best < 0 || b->seg.len < s->bufs[best].seg.len))
                best = i;
            if (lru < 0 || b->used < s->bufs[lru].used)
                lru = i;
        }
        if (best >= 0) { /* an idle segment big enough: its pages are there */
            s->bufs[best].busy = 1;
            s->bufs[best].used = ++s->clock;
            void *p = s->bufs[best].seg.base;
            pthread_mutex_unlock(&s->mu);
            return p;
        }
        if (s->stage_bytes + len <= s->stage_max) {
            s->stage_bytes += len; /* made below, outside the lock */
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (lru < 0) { /* the others are lent: this transfer streams */
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        victim = s->bufs[lru]; /* room: the least recently used idle one goes */
        s->bufs[lru] = s->bufs[--s->nbufs];
        s->stage_bytes -= victim.seg.len;
        pthread_mutex_unlock(&s->mu);
        client_buf_drop(&victim);
    }
    client_buf b;
    memset(&b, 0, sizeof b);
    int added = 0;
    sm_err e = client_seg_new(len, &b.seg, err, sizeof err);
    pthread_mutex_lock(&s->mu);
    if (!e) {
        b.shared = b.stage = b.busy = 1;
        b.used = ++s->clock;
        added = client_buf_add(s, &b);
    }
    if (!added)
        s->stage_bytes -= len;
    pthread_mutex_unlock(&s->mu);
    if (!e && !added)
        client_buf_drop(&b);
    return added ? b.seg.base : NULL;
}

void client_stage_give(sm_client *c, void *p)
{
    client_shm *s = c->shm;
    if (!s || !p)
        return;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nbufs; i++)
        if (s->bufs[i].stage && s->bufs[i].seg.base == p)
            s->bufs[i].busy = 0;
    pthread_mutex_unlock(&s->mu);
}
