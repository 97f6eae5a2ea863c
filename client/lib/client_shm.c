/* client_shm: arrays in shared memory (sm_client_alloc) and the proof
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
 * had no room, ordinary memory (name ""). */
typedef struct {
    sm_shm_seg seg; /* seg.base: the buffer */
    int shared;
} client_buf;

/* What the ShmProbe proved about a worker address: 1 it shares this
 * host's memory, -1 it does not (or refuses shared memory). */
typedef struct {
    char addr[SM_ADDR_MAX];
    int same;
} client_host;

struct client_shm {
    pthread_mutex_t mu;
    client_buf *bufs;
    int nbufs, capbufs;
    client_host *hosts;
    int nhosts, caphosts;
};

sm_err client_shm_create(sm_client *c, char *err, size_t errlen)
{
    if (!(c->shm = calloc(1, sizeof *c->shm)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a client");
    pthread_mutex_init(&c->shm->mu, NULL);
    return SM_OK;
}

void client_shm_close(sm_client *c)
{
    client_shm *s = c->shm;
    if (!s)
        return;
    for (int i = 0; i < s->nbufs; i++) {
        client_buf *b = &s->bufs[i];
        if (b->shared) {
            sm_shm_unlink(b->seg.name);
            sm_shm_seg_close(&b->seg);
        } else {
            free(b->seg.base);
        }
    }
    free(s->bufs);
    free(s->hosts);
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
        b.seg.len = nbytes;
        b.seg.fd = -1;
    }
    pthread_mutex_lock(&s->mu);
    if (s->nbufs == s->capbufs) {
        int cap = s->capbufs ? 2 * s->capbufs : 8;
        client_buf *nb = realloc(s->bufs, sizeof *nb * (size_t)cap);
        if (!nb) {
            pthread_mutex_unlock(&s->mu);
            if (b.shared) {
                sm_shm_unlink(b.seg.name);
                sm_shm_seg_close(&b.seg);
            } else {
                free(b.seg.base);
            }
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
        }
        s->bufs = nb;
        s->capbufs = cap;
    }
    s->bufs[s->nbufs++] = b;
    pthread_mutex_unlock(&s->mu);
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
        if (s->bufs[i].seg.base == p) {
            b = s->bufs[i];
            s->bufs[i] = s->bufs[--s->nbufs];
            found = 1;
        }
    pthread_mutex_unlock(&s->mu);
    if (!found)
        return;
    if (b.shared) {
        sm_shm_unlink(b.seg.name);
        sm_shm_seg_close(&b.seg);
    } else {
        free(b.seg.base);
    }
}

/* Whether the worker at addr (channel ch) shares this host's memory: asked
 * once per address (a probe segment with a cookie the worker must read
 * back through ShmProbe), then remembered. */
static int client_shm_same_host(sm_client *c, const char *addr, sm_rpc_channel *ch)
{
    client_shm *s = c->shm;
    int same = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nhosts && !same; i++)
        if (!strcmp(s->hosts[i].addr, addr))
            same = s->hosts[i].same;
    pthread_mutex_unlock(&s->mu);
    if (same)
        return same > 0;
    same = sm_svc_shm_prove_here(ch, c->timeout_ms) ? 1 : -1;
    client_shm_refused(c, addr); /* makes the entry; set below */
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nhosts; i++)
        if (!strcmp(s->hosts[i].addr, addr))
            s->hosts[i].same = same;
    pthread_mutex_unlock(&s->mu);
    return same > 0;
}

void client_shm_refused(sm_client *c, const char *addr)
{
    client_shm *s = c->shm;
    if (!s || !addr || strlen(addr) >= SM_ADDR_MAX)
        return;
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->nhosts && strcmp(s->hosts[i].addr, addr))
        i++;
    if (i == s->nhosts && s->nhosts == s->caphosts) {
        int cap = s->caphosts ? 2 * s->caphosts : 8;
        client_host *nh = realloc(s->hosts, sizeof *nh * (size_t)cap);
        if (nh) {
            s->hosts = nh;
            s->caphosts = cap;
        }
    }
    if (i < s->caphosts) {
        if (i == s->nhosts) {
            snprintf(s->hosts[i].addr, sizeof s->hosts[i].addr, "%s", addr);
            s->nhosts++;
        }
        s->hosts[i].same = -1;
    }
    pthread_mutex_unlock(&s->mu);
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
    const char *p = buf;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nbufs && !ref->name[0]; i++) {
        const client_buf *b = &s->bufs[i];
        const char *base = b->seg.base;
        if (b->shared && p >= base && p <= base + b->seg.len &&
            (size_t)nbytes <= b->seg.len - (size_t)(p - base)) {
            snprintf(ref->name, sizeof ref->name, "%s", b->seg.name);
            ref->offset = p - base;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!ref->name[0] || !client_shm_same_host(c, addr, ch)) {
        ref->name[0] = 0;
        return 0;
    }
    ref->global = *shape;
    ref->box = *box;
    return 1;
}
