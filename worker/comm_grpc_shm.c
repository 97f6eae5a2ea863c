/* comm_grpc_shm: the collectives of a job whose group's workers all share
 * memory with this one (the same non-zero shm_domain, proven by
 * Worker.ShmProbe before the job was dispatched).
 *
 * Segments: every worker of the domain makes one segment for the job at its
 * first collective through it, "/shmap-<key>-<worker index>", sparse: a
 * header (magic, the job's key, abort flag and sentence, one futex word per
 * slot) and one slot of SM_SHM_SPAN bytes per mesh position of that worker.
 * With a pool (sm_comm_grpc_config.shm_pool) the segment is a file the
 * worker keeps between jobs, pages and mapping included, under the job's
 * name for the job (a hard link): its header starts over, and a peer that
 * finds another job's key in it knows the owner moved on. A group uses, on
 * each of its workers, the slot of its lowest member there; groups of one
 * collective are disjoint, so no two running groups share a slot. Peers open a segment the first
 * time they need it and the last of them unlinks its name; a worker
 * unlinks its own name when the job ends, and every name of the domain
 * when the job failed, so a worker that dies leaves no name behind once
 * its peers have noticed (a worker done with a job that went well leaves
 * its peers' names alone: their other groups may still have to open
 * them).
 *
 * A collective, on each worker: the local members meet (sm_rendezvous),
 * write what the others need into their slot (phase 1: for all_reduce and
 * reduce_scatter its units' partials of the other workers' parts, for
 * the data movements their inputs, but for those in the worker's arena,
 * sm_shm.h, whose offsets they write into the header's descriptor table
 * instead: peers read those where they lie), then read their peers' slots where
 * they lie (all_reduce: each worker reduces its own part, from the
 * other workers' partials and its own inputs in cache, into its slot and
 * its outputs, phase 2; then copies the others' parts), and wait until every worker is done reading
 * before leaving (phase 3). Pages of a worker's own slot are allocated
 * before they are written (fallocate: a full /dev/shm is an error, not a
 * fault), and every slot is checked against truncation before a phase. A phase ends with
 * the local members' barrier, the leader writing (seq << 2 | phase) to the
 * slot's word and waking its waiters; a waiter polls the peer's word a
 * while (sm_spin: up to --spin-us, 100 by default, while the group's
 * members are few for the host's CPUs), then sleeps on it (futex) in short
 * slices, checking the job's abort, the peer's abort flag,
 * the job's deadline and, every probe interval, that the peer still answers
 * (else SM_EUNAVAILABLE naming it, as on the gRPC path).
 *
 * Reductions combine in the tree of sm_comm.h, as on the gRPC path
 * (comm_grpc.h): each worker writes the partials of its units, and the
 * rest of the tree is combined from them and the local inputs; the
 * kernels are the same, so are the bits. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "comm_grpc_int.h"
#include "sm_array.h"
#include "sm_array_arena.h"
#include "sm_array_share.h"
#include "sm_copy.h"
#include "sm_shm.h"
#include "sm_log.h"
#include "sm_time.h"
#include "traffic.h"

#define SM_SHM_MAGIC    UINT64_C(0x3276626f6a706d73) /* "smpjobv2": the header names the arena */
#define SM_SHM_HDR      ((size_t)128 << 10)
#define SM_SHM_WORDS    4096
#define SM_SHM_DESC     ((size_t)72 << 10) /* after the words of SM_MAX_DEVICES slots */
#define SM_SHM_NODESC   UINT64_MAX
#define SM_SHM_SPAN     ((size_t)2 << 30)
#define SM_SHM_SLICE_MS 20
#define SM_SHM_BLOCK    (64 << 10) /* bytes of each operand per pass of a reduction */

typedef struct {
    uint64_t magic;
    uint64_t key; /* the job's: a file kept for another job is not this one's */
    uint32_t nslots;
    uint32_t mapped;  /* peers that opened the segment */
    uint32_t aborted; /* the owner's job aborted; why holds its sentence */
    char why[512];
    char arena[SM_SHM_NAME_MAX]; /* the owner's array memory (sm_shm_arena), or "" */
    uint64_t arena_span;
} sm_cg_shm_hdr;

struct sm_cg_shm {
    pthread_mutex_t mu;
    uint64_t key;
    int ndomain;         /* workers of this worker's domain, itself included */
    int nhere;           /* mesh positions on those workers */
    sm_shm_seg *seg;     /* per worker; base NULL until opened */
    int *nslots;         /* per worker: its mesh positions */
    size_t *held;        /* per slot of this worker's segment: bytes allocated (fallocate) */
    size_t *mapped;      /* per mesh position's slot: bytes whose page tables are filled */
    pthread_mutex_t amu; /* the abort state and own, apart from mu: an abort never waits
                          * for a segment being opened */
    int aborted;         /* the job aborted (before this worker's segment was made too) */
    char why[512];
    sm_cg_shm_hdr *own; /* this worker's segment's header, once made */
    /* Falling back to gRPC (under mu): no_seg, this worker could not make
     * its segment (its marker says so to its peers); peer_off, per worker,
     * its marker was seen; charged, bytes of this worker's slots counted
     * against the memory limit (sm_array_pool_charge); warned, the log line
     * was written. */
    int no_seg, warned, mark_fd; /* mark_fd: the marker, held open (-1: none) */
    unsigned char *peer_off;
    size_t charged;
    const char **view; /* per worker: its arena mapped here (sm_shm_views), once needed */
};

static void sm_cg_shm_name(const sm_cg_shm *m, int w, char *name)
{
    snprintf(name, SM_SHM_NAME_MAX, "/shmap-%016llx-%d", (unsigned long long)m->key, w);
}

/* The marker of worker w that could not make its segment for the job. */
static void sm_cg_shm_mark_name(const sm_cg_shm *m, int w, char *name)
{
    snprintf(name, SM_SHM_NAME_MAX, "/shmap-%016llx-%d-0ff", (unsigned long long)m->key, w);
}

static size_t sm_cg_shm_len(const sm_cg_shm *m, int w)
{
    return SM_SHM_HDR + (size_t)m->nslots[w] * SM_SHM_SPAN;
}

static uint32_t *sm_cg_shm_word(const sm_shm_seg *s, int slot)
{
    return (uint32_t *)((char *)s->base + SM_SHM_WORDS + (size_t)slot * 64);
}

static char *sm_cg_shm_slot(const sm_shm_seg *s, int slot)
{
    return (char *)s->base + SM_SHM_HDR + (size_t)slot * SM_SHM_SPAN;
}

/* The input descriptor of the mesh position of index pos on the
 * segment's worker: where its input of the collective under way lies in
 * the worker's arena (SM_SHM_NODESC: elsewhere; the others read its copy
 * in the slot, or its unit's partial). */
static uint64_t *sm_cg_shm_desc(const sm_shm_seg *s, int pos)
{
    return (uint64_t *)((char *)s->base + SM_SHM_DESC) + pos;
}

/* This worker's arena, where its peers read inputs in place; NULL when it
 * has none or keeps no views (then its peers read its slot). */
static const sm_shm_arena *sm_cg_shm_arena(const sm_comm_grpc *c)
{
    return c->shm_views ? sm_array_pool_arena(c->pool) : NULL;
}

sm_err sm_cg_shm_create(sm_comm_grpc *c, uint64_t key, char *err, size_t errlen)
{
    uint32_t dom = c->domain[c->self];
    int ndomain = 0;
    for (int w = 0; w < c->nworkers; w++)
        ndomain += dom && c->domain[w] == dom;
    if (ndomain < 2)
        return SM_OK;
    sm_cg_shm *m = calloc(1, sizeof *m);
    if (m) {
        m->seg = calloc((size_t)c->nworkers, sizeof *m->seg);
        m->nslots = calloc((size_t)c->nworkers, sizeof *m->nslots);
        m->held = calloc((size_t)c->mesh.ndevices, sizeof *m->held);
        m->mapped = calloc((size_t)c->mesh.ndevices, sizeof *m->mapped);
        m->peer_off = calloc((size_t)c->nworkers, sizeof *m->peer_off);
        m->view = calloc((size_t)c->nworkers, sizeof *m->view);
    }
    if (!m || !m->seg || !m->nslots || !m->held || !m->mapped || !m->peer_off || !m->view) {
        if (m) {
            free(m->view);
            free(m->peer_off);
            free(m->seg);
            free(m->nslots);
            free(m->held);
            free(m->mapped);
        }
        free(m);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a job's shared memory");
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->amu, NULL);
    m->key = key;
    m->ndomain = ndomain;
    m->mark_fd = -1;
    for (int w = 0; w < c->nworkers; w++)
        m->seg[w].fd = -1;
    for (int pos = 0; pos < c->mesh.ndevices; pos++) {
        m->nslots[c->pos_worker[pos]]++;
        m->nhere += c->domain[c->pos_worker[pos]] == dom;
    }
    c->shm = m; /* this worker's segment is made by its first collective through it */
    return SM_OK;
}

/* Makes this worker's segment (m->mu held). */
static sm_err sm_cg_shm_make(sm_comm_grpc *c, char *err, size_t errlen)
{
    sm_cg_shm *m = c->shm;
    char name[SM_SHM_NAME_MAX];
    sm_cg_shm_name(m, c->self, name);
    size_t len = sm_cg_shm_len(m, c->self);
    sm_shm_seg *s = &m->seg[c->self];
    sm_err e = c->shm_pool ? sm_shm_pool_take(c->shm_pool, len, s, err, errlen)
                           : sm_shm_seg_create(name, len, s, err, errlen);
    if (e)
        return e;
    /* the header's pages allocated before they are written: a /dev/shm
     * without room for them is SM_ERESOURCE (the marker, then gRPC), not
     * a fault under m->mu */
    if ((e = sm_shm_seg_reserve(s, 0, SM_SHM_HDR, err, errlen))) {
        if (c->shm_pool) {
            sm_shm_pool_give(c->shm_pool, s);
        } else {
            sm_shm_seg_close(s);
            sm_shm_unlink(name);
        }
        return e; /* s->base NULL again: no segment */
    }
    sm_cg_shm_hdr *h = s->base;
    if (c->shm_pool) /* a file of an earlier job: its header starts over, unnamed yet */
        memset(h, 0, SM_SHM_HDR);
    h->key = m->key;
    h->nslots = (uint32_t)m->nslots[c->self];
    const sm_shm_arena *a = sm_cg_shm_arena(c);
    if (a) { /* peers read inputs there, where they lie */
        snprintf(h->arena, sizeof h->arena, "%s", sm_shm_arena_name(a));
        h->arena_span = sm_shm_arena_span(a);
    }
    pthread_mutex_lock(&m->amu);
    m->own = h;
    if (m->aborted) { /* before it existed: its peers learn it here */
        snprintf(h->why, sizeof h->why, "%s", m->why);
        h->aborted = 1;
    }
    pthread_mutex_unlock(&m->amu);
    __atomic_store_n(&h->magic, SM_SHM_MAGIC, __ATOMIC_RELEASE);
    if (c->shm_pool && (e = sm_shm_pool_name(c->shm_pool, s, name, err, errlen))) {
        pthread_mutex_lock(&m->amu);
        m->own = NULL;
        pthread_mutex_unlock(&m->amu);
        sm_shm_pool_give(c->shm_pool, s);
    }
    return e;
}

void sm_cg_shm_free(sm_comm_grpc *c)
{
    sm_cg_shm *m = c->shm;
    if (!m)
        return;
    char name[SM_SHM_NAME_MAX];
    pthread_mutex_lock(&m->amu);
    m->own = NULL;
    pthread_mutex_unlock(&m->amu);
    for (int w = 0; w < c->nworkers; w++) {
        if (w == c->self && c->shm_pool && m->seg[w].base)
            sm_shm_pool_give(c->shm_pool, &m->seg[w]); /* kept, with its pages, for a next job */
        sm_shm_seg_close(&m->seg[w]);
        /* its own names; a peer's only when the job failed (the peer may
         * be dead): a peer whose group is still under way may have others
         * yet to open its segment */
        if (c->domain[w] == c->domain[c->self] && (w == c->self || m->aborted)) {
            sm_cg_shm_name(m, w, name);
            sm_shm_unlink(name);
            sm_cg_shm_mark_name(m, w, name);
            sm_shm_unlink(name);
        }
    }
    for (int w = 0; w < c->nworkers; w++)
        if (m->view[w])
            sm_shm_view_put(c->shm_views, m->view[w]);
    sm_array_pool_uncharge(c->pool, m->charged);
    if (m->mark_fd >= 0)
        close(m->mark_fd);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->amu);
    free(m->seg);
    free(m->nslots);
    free(m->held);
    free(m->mapped);
    free(m->peer_off);
    free(m->view);
    free(m);
    c->shm = NULL;
}

void sm_cg_shm_abort(sm_comm_grpc *c, const char *why)
{
    sm_cg_shm *m = c->shm;
    if (!m)
        return;
    pthread_mutex_lock(&m->amu);
    sm_cg_shm_hdr *h = m->own;
    m->aborted = 1;
    snprintf(m->why, sizeof m->why, "%s", why);
    if (h) {
        const sm_shm_seg s = {.base = h};
        snprintf(h->why, sizeof h->why, "%s", why);
        __atomic_store_n(&h->aborted, 1, __ATOMIC_RELEASE);
        for (int k = 0; k < m->nslots[c->self]; k++)
            sm_shm_futex_wake(sm_cg_shm_word(&s, k));
    }
    pthread_mutex_unlock(&m->amu);
}

int sm_cg_shm_use(const sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                  sm_cg_kind kind, int64_t nbytes)
{
    (void)c;
    if (!L->shm || nbytes <= 0)
        return 0;
    uint64_t need = (uint64_t)nbytes;
    int units = 0; /* the most units of one worker: its partials share its slot */
    for (int k = 0; k < L->nw; k++)
        units = L->nuw[k] > units ? L->nuw[k] : units;
    if (kind == SM_CG_AR)
        need = (uint64_t)(units + 1) * (((uint64_t)nbytes + 63) & ~(uint64_t)63);
    else if (kind == SM_CG_RS)
        need = (uint64_t)units * (uint64_t)nbytes;
    else if (kind == SM_CG_A2A || kind == SM_CG_PERM)
        need = (uint64_t)g->size * (uint64_t)nbytes;
    return need <= SM_SHM_SPAN;
}

/* A resource this worker's shared memory needs is missing (why): the
 * collective under way falls back to gRPC (sm_cg_shm_phase). Logs it once
 * per job; returns SM_ERESOURCE, the code of a fallback. */
static sm_err sm_cg_shm_short(sm_comm_grpc *c, uint64_t seq, const char *why, char *err,
                              size_t errlen)
{
    sm_cg_shm *m = c->shm;
    pthread_mutex_lock(&m->mu);
    int first = !m->warned;
    m->warned = 1;
    pthread_mutex_unlock(&m->mu);
    if (first)
        SM_WARN("job %llu: collective #%llu and the others that find no room in shared memory go "
                "over gRPC instead: %s",
                (unsigned long long)c->job.v, (unsigned long long)seq, why);
    return sm_fail(err, errlen, SM_ERESOURCE, "collective #%llu falls back to gRPC: %s",
                   (unsigned long long)seq, why);
}

/* Waits (bounded by the job's checks) until the peer answers probes again
 * or fails; SM_OK to go on waiting. */
static sm_err sm_cg_shm_checks(sm_comm_grpc *c, int w, const sm_cg_shm_hdr *h, uint64_t seq,
                               int64_t *next_probe, char *err, size_t errlen)
{
    char msg[400];
    sm_err e = sm_rendezvous_check(c->rv, err, errlen);
    if (e)
        return e;
    if (h && __atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE)) {
        memcpy(msg, h->why, sizeof msg - 1); /* the peer's sentence, cut to fit */
        msg[sizeof msg - 1] = 0;
        return sm_cg_failf(c, SM_ECANCELLED, err, errlen, "collective cancelled on worker %s: %s",
                           c->addr[w], msg);
    }
    if (sm_cg_ms_left(c) == 0)
        return sm_cg_failf(c, SM_ETIMEOUT, err, errlen,
                           "collective #%llu of job %llu timed out waiting for worker %s in "
                           "shared memory",
                           (unsigned long long)seq, (unsigned long long)c->job.v, c->addr[w]);
    int64_t now = sm_time_mono_ms();
    if (now >= *next_probe) {
        if (c->tr->probe(c->tr_user, c->addr[w], c->probe_ms, msg, sizeof msg) != SM_OK)
            return sm_cg_failf(c, SM_EUNAVAILABLE, err, errlen,
                               "worker %s is unavailable: it stopped answering while collective "
                               "#%llu of job %llu waited for it in shared memory: %s",
                               c->addr[w], (unsigned long long)seq, (unsigned long long)c->job.v,
                               msg);
        *next_probe = sm_time_mono_ms() + c->probe_ms;
    }
    return SM_OK;
}

/* Worker w's segment, made (this worker's) or opened (and its name
 * unlinked by the last peer to open it) on first use; waits for its owner
 * to make it. */
static sm_err sm_cg_shm_seg(sm_comm_grpc *c, int w, uint64_t seq, const sm_shm_seg **out, char *err,
                            size_t errlen)
{
    sm_cg_shm *m = c->shm;
    int64_t next_probe = sm_time_mono_ms() + c->probe_ms;
    char name[SM_SHM_NAME_MAX];
    sm_cg_shm_name(m, w, name);
    for (;;) {
        pthread_mutex_lock(&m->mu);
        sm_shm_seg *s = &m->seg[w];
        sm_err e = SM_OK;
        if (!s->base && w == c->self && m->no_seg)
            e = SM_ERESOURCE;
        else if (!s->base && w == c->self && (e = sm_cg_shm_make(c, err, errlen)) != SM_OK) {
            char why[400], mark[SM_SHM_NAME_MAX];
            snprintf(why, sizeof why, "%s", err);
            sm_cg_shm_mark_name(m, c->self, mark);
            if ((e = sm_shm_mark(mark, &m->mark_fd, err, errlen)) == SM_OK) {
                m->no_seg = 1; /* its peers see the marker instead of waiting for the segment */
                e = SM_ERESOURCE;
            }
            pthread_mutex_unlock(&m->mu);
            return e == SM_ERESOURCE ? sm_cg_shm_short(c, seq, why, err, errlen)
                                     : sm_cg_failf(c, e, err, errlen, "%s (after: %s)", err, why);
        }
        if (e == SM_ERESOURCE) {
            pthread_mutex_unlock(&m->mu);
            return sm_fail(err, errlen, SM_ERESOURCE, "this worker has no shared-memory segment");
        }
        int have = s->base != NULL;
        pthread_mutex_unlock(&m->mu);
        if (have) {
            *out = s;
            return SM_OK;
        }
        if (!e) { /* a peer's: opened and checked without the lock (a fault here is guarded) */
            sm_shm_seg t;
            e = sm_shm_seg_open(name, sm_cg_shm_len(m, w), &t, err, errlen);
            const sm_cg_shm_hdr *h = e ? NULL : t.base;
            if (h && (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SM_SHM_MAGIC ||
                      __atomic_load_n(&h->key, __ATOMIC_ACQUIRE) != m->key)) {
                sm_shm_seg_close(&t); /* not ready yet, or an earlier job's */
                e = SM_ENOTFOUND;
            } else if (h) {
                pthread_mutex_lock(&m->mu);
                int first = !s->base;
                if (first)
                    *s = t;
                pthread_mutex_unlock(&m->mu);
                if (!first) /* another device of this worker opened it meanwhile */
                    sm_shm_seg_close(&t);
                else if (__atomic_add_fetch(&((sm_cg_shm_hdr *)s->base)->mapped, 1,
                                            __ATOMIC_ACQ_REL) == (uint32_t)m->ndomain - 1)
                    sm_shm_unlink(name); /* every peer has it mapped */
                *out = s;
                return SM_OK;
            }
        }
        if (e == SM_ENOMEM || e == SM_EIO) { /* no room to map it, or no file descriptor */
            char why[400];
            snprintf(why, sizeof why, "%s", err);
            return sm_cg_shm_short(c, seq, why, err, errlen);
        }
        if (e != SM_ENOTFOUND || w == c->self)
            return sm_cg_failf(c, e, err, errlen, "%s", err);
        char mark[SM_SHM_NAME_MAX];
        sm_cg_shm_mark_name(m, w, mark);
        if (__atomic_load_n(&m->peer_off[w], __ATOMIC_RELAXED) || sm_shm_marked(mark)) {
            __atomic_store_n(&m->peer_off[w], 1, __ATOMIC_RELAXED);
            return sm_fail(err, errlen, SM_ERESOURCE,
                           "worker %s has no shared-memory segment for job %llu", c->addr[w],
                           (unsigned long long)c->job.v);
        }
        if ((e = sm_cg_shm_checks(c, w, NULL, seq, &next_probe, err, errlen)))
            return e;
        usleep(500);
    }
}

static uint32_t sm_cg_shm_tag(uint64_t seq, int phase)
{
    return (uint32_t)(seq << 2 | (uint64_t)phase);
}

/* The slot group g uses on the worker of order k. */
static int sm_cg_shm_slot_of(const sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                             int k)
{
    return c->pos_local[g->members[L->first[k]]];
}

static void sm_cg_shm_post(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                           uint64_t seq, int phase)
{
    const sm_shm_seg *s = &c->shm->seg[c->self];
    uint32_t *word = sm_cg_shm_word(s, sm_cg_shm_slot_of(c, g, L, sm_cg_self_order(c, L)));
    __atomic_store_n(word, sm_cg_shm_tag(seq, phase), __ATOMIC_RELEASE);
    sm_shm_futex_wake(word);
}

/* Waits until every other worker of the group has posted phase of seq. */
static sm_err sm_cg_shm_wait(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                             uint64_t seq, int phase, char *err, size_t errlen)
{
    uint32_t tag = sm_cg_shm_tag(seq, phase);
    sm_spin sp = sm_spin_start(sm_spin_us(g->size)); /* one poll for all the peers */
    for (int k = 0; k < L->nw; k++) {
        int w = L->order[k];
        if (w == c->self)
            continue;
        const sm_shm_seg *s;
        sm_err e = sm_cg_shm_seg(c, w, seq, &s, err, errlen);
        if (e)
            return e;
        uint32_t *word = sm_cg_shm_word(s, sm_cg_shm_slot_of(c, g, L, k));
        int64_t next_probe = sm_time_mono_ms() + c->probe_ms;
        const sm_cg_shm_hdr *h = s->base;
        for (int spinning = 1;;) {
            uint32_t v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
            int moved = __atomic_load_n(&h->key, __ATOMIC_ACQUIRE) != c->shm->key;
            /* A worker whose file holds another job's key has ended this
             * job. The last phase sees that when all went well: it passed
             * its own wait, so every worker was done reading. Phase 1 sees
             * it when that worker fell back to gRPC (it posted its bad
             * word, needed nothing more from this one, a ppermute's
             * sender, say, and went on to its next job before this one
             * read the word): this one falls back too (no failure; its
             * gRPC exchange fails on its own if that worker's job did).
             * Phase 2 still needed this worker's post. */
            if (moved && phase == 3)
                break;
            if (moved && phase == 1)
                return sm_fail(err, errlen, SM_ERESOURCE,
                               "worker %s went on to another job after falling back to gRPC",
                               c->addr[w]);
            if (moved)
                return sm_cg_failf(c, SM_ECANCELLED, err, errlen,
                                   "collective cancelled: worker %s left job %llu for another one",
                                   c->addr[w], (unsigned long long)c->job.v);
            if ((int32_t)(v - tag) >= 0)
                break;
            if (spinning && (spinning = sm_spin_more(&sp)))
                continue;
            if ((e = sm_cg_shm_checks(c, w, s->base, seq, &next_probe, err, errlen)))
                return e;
            sm_shm_futex_wait(word, v, SM_SHM_SLICE_MS);
        }
    }
    return SM_OK;
}

/* Phase 1's post, with the word after the phase word saying whether this
 * worker has what the collective needs in shared memory (bad: it falls
 * back to gRPC). */
static void sm_cg_shm_post1(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                            uint64_t seq, int bad)
{
    const sm_shm_seg *s = &c->shm->seg[c->self];
    uint32_t *word = sm_cg_shm_word(s, sm_cg_shm_slot_of(c, g, L, sm_cg_self_order(c, L)));
    __atomic_store_n(word + 1, (uint32_t)(seq << 1) | (uint32_t)(bad != 0), __ATOMIC_RELAXED);
    sm_cg_shm_post(c, g, L, seq, 1);
}

/* After phase 1's wait: 1 if a worker of the group falls back (its word
 * says so, or it has moved on past seq, which it does only after falling
 * back). */
static int sm_cg_shm_peers_bad(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                               uint64_t seq)
{
    sm_cg_shm *m = c->shm;
    for (int k = 0; k < L->nw; k++) {
        int w = L->order[k];
        if (w == c->self)
            continue;
        pthread_mutex_lock(&m->mu);
        const sm_shm_seg *s = &m->seg[w];
        pthread_mutex_unlock(&m->mu);
        uint32_t v =
            __atomic_load_n(sm_cg_shm_word(s, sm_cg_shm_slot_of(c, g, L, k)) + 1, __ATOMIC_RELAXED);
        if ((v >> 1) != ((uint32_t)(seq << 1) >> 1) || (v & 1))
            return 1;
    }
    return 0;
}

/* Ends a phase: the local barrier, the leader's post, the wait for the
 * other workers. failed: this member failed (its error already in err);
 * SM_ERESOURCE from sm_cg_shm_short (before phase 1's post only) is no
 * failure but a fallback. Phase 1 decides, alike on every worker of the
 * group, whether the collective goes on in shared memory: a worker that
 * lacks room posts phase 1 with its bad word set (or has no segment, and
 * its marker says so), and every worker that sees it, and every member of
 * those workers (their barrier ORs what they saw), falls back: *fell is
 * set and SM_ERESOURCE returned, then and at every later phase. */
static sm_err sm_cg_shm_phase(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                              sm_rendezvous_slot *s, uint64_t seq, int phase, sm_err failed,
                              int *fell, char *err, size_t errlen)
{
    if (*fell)
        return SM_ERESOURCE;
    int fb = phase == 1 && failed == SM_ERESOURCE && !sm_rendezvous_status(c->rv, NULL, 0);
    if (failed && !fb)
        sm_cg_failf(c, failed, err, errlen, "%s", err);
    if (sm_rendezvous_sync(c->rv, s, failed != SM_OK)) {
        sm_err e = sm_rendezvous_check(c->rv, err, errlen);
        if (e || phase != 1)
            return failed ? failed
                   : e    ? e
                          : sm_fail(err, errlen, SM_ECANCELLED,
                                    "collective #%llu failed on another device",
                                    (unsigned long long)seq);
        pthread_mutex_lock(&c->shm->mu);
        int own = c->shm->seg[c->self].base != NULL;
        pthread_mutex_unlock(&c->shm->mu);
        if (L->li == 0 && own) /* else its marker tells the peers */
            sm_cg_shm_post1(c, g, L, seq, 1);
        *fell = 1;
        return sm_fail(err, errlen, SM_ERESOURCE, "collective #%llu falls back to gRPC",
                       (unsigned long long)seq);
    }
    if (phase != 1) {
        if (L->li == 0)
            sm_cg_shm_post(c, g, L, seq, phase);
        return sm_cg_shm_wait(c, g, L, seq, phase, err, errlen);
    }
    int bad = 0;
    sm_err e = SM_OK;
    for (int k = 0; k < L->nw && L->li == 0 && !e; k++) { /* the leader maps the peers' first */
        const sm_shm_seg *sg;
        if (L->order[k] != c->self)
            e = sm_cg_shm_seg(c, L->order[k], seq, &sg, err, errlen);
    }
    if (e == SM_ERESOURCE && !sm_rendezvous_status(c->rv, NULL, 0)) {
        bad = 1;
        e = SM_OK;
    }
    if (!e && L->li == 0)
        sm_cg_shm_post1(c, g, L, seq, bad);
    if (!e && !bad)
        e = sm_cg_shm_wait(c, g, L, seq, phase, err, errlen);
    if (e == SM_ERESOURCE && !sm_rendezvous_status(c->rv, NULL, 0)) {
        bad = 1;
        e = SM_OK;
    }
    if (!e && !bad)
        bad = sm_cg_shm_peers_bad(c, g, L, seq);
    if (sm_rendezvous_sync(c->rv, s, e != SM_OK || bad)) {
        sm_err ea = sm_rendezvous_check(c->rv, err, errlen);
        if (ea || e)
            return e ? e : ea;
        *fell = 1;
        return sm_fail(err, errlen, SM_ERESOURCE, "collective #%llu falls back to gRPC",
                       (unsigned long long)seq);
    }
    return e;
}

/* The start of worker order k's slot for g (this worker's too: another
 * process of the same user could truncate it), checked against truncation
 * up to used bytes. A truncation between this check and the access still
 * faults: the check catches one that happened before the phase. */
static sm_err sm_cg_shm_region(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                               int k, uint64_t seq, size_t used, const char **out, char *err,
                               size_t errlen)
{
    const sm_shm_seg *s;
    sm_err e = sm_cg_shm_seg(c, L->order[k], seq, &s, err, errlen);
    if (e)
        return e;
    int slot = sm_cg_shm_slot_of(c, g, L, k);
    size_t at = SM_SHM_HDR + (size_t)slot * SM_SHM_SPAN;
    if ((e = sm_shm_seg_check(s, at + used, err, errlen)))
        return sm_cg_failf(c, e, err, errlen, "%s", err);
    if (L->order[k] == c->self) { /* the pages it writes, counted against the memory limit and
                                   * allocated now: a full /dev/shm falls back to gRPC here
                                   * instead of faulting on the first write */
        sm_cg_shm *m = c->shm;
        char why[400] = "";
        pthread_mutex_lock(&m->mu);
        if (used > m->held[slot]) {
            size_t more = used - m->held[slot];
            if (sm_array_pool_charge(c->pool, more, why, sizeof why)) {
                e = SM_ERESOURCE;
            } else if ((e = sm_shm_seg_reserve(s, at + m->held[slot], more, why, sizeof why))) {
                sm_array_pool_uncharge(c->pool, more);
            } else {
                m->held[slot] = used;
                m->charged += more;
            }
        }
        pthread_mutex_unlock(&m->mu);
        if (e)
            return sm_cg_shm_short(c, seq, why, err, errlen);
    }
    /* the page tables of the slot filled in one call, not a fault per page
     * (a hint: without it the pages come as they are touched) */
    sm_cg_shm *m = c->shm;
    int pos = g->members[L->first[k]];
    pthread_mutex_lock(&m->mu);
    if (used > m->mapped[pos]) {
        size_t from = m->mapped[pos] & ~(size_t)4095, to = (used + 4095) & ~(size_t)4095;
        (void)madvise(sm_cg_shm_slot(s, slot) + from, to - from,
                      L->order[k] == c->self ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
        m->mapped[pos] = to;
    }
    pthread_mutex_unlock(&m->mu);
    *out = sm_cg_shm_slot(s, slot);
    return SM_OK;
}

/* Elements [lo, hi) of the group's reduction (the tree of sm_comm.h):
 * the other workers' units from their slots (R[u], at element 0), this
 * worker's members from their inputs, a block at a time into dst (which
 * receives element lo at its start) and from there, while in cache, into
 * the nouts outputs outs. */
static sm_err sm_cg_shm_reduce_into(const sm_cg_layout *L, const sm_rendezvous_slot *s,
                                    const char *const *R, const char *const *D, sm_dtype t,
                                    sm_kern_reduce_op op, int64_t lo, int64_t hi, char *dst,
                                    void *const *outs, int nouts, const char **rem,
                                    sm_comm_leaf *leaves, char *err, size_t errlen)
{
    int64_t el = (int64_t)sm_dtype_size(t), blk = SM_SHM_BLOCK / el;
    sm_err e = SM_OK;
    for (int64_t b = lo; b < hi && !e; b += blk) {
        int64_t m = hi - b < blk ? hi - b : blk;
        for (int u = 0; u < L->nu; u++)
            rem[u] = R[u] ? R[u] + b * el : NULL;
        int nl = sm_cg_leaves(L, (const void *const *)s->in, b * el, rem, D, leaves);
        char *d = dst + (b - lo) * el;
        e = sm_comm_tree_reduce(t, op, 0, L->unit[L->nu - 1].hi, leaves, nl, m, d, err, errlen);
        for (int l = 0; l < nouts && !e; l++)
            sm_copy_stream((char *)outs[l] + b * el, d, (size_t)(m * el));
    }
    return e;
}

/* A collective's arguments and scratch, for its body run under
 * sm_shm_guarded: a segment truncated under the body cuts it short (no
 * lock held, nothing of its own to free) and fails the job DATA_LOSS. */
typedef struct {
    sm_comm_grpc *c;
    const sm_comm_group *g;
    const sm_cg_layout *L;
    sm_rendezvous_slot *s;
    uint64_t seq;
    sm_cg_kind kind;
    sm_dtype t;
    sm_kern_reduce_op op;
    int from;                 /* permute: the caller's source rank, or -1 */
    const int64_t (*perm)[2]; /* permute: its (source, destination) pairs */
    int npairs;
    const void *in; /* the caller's */
    void *out;
    const sm_comm_arrays *arr; /* the arrays of in and out (data movements), or NULL */
    int64_t n;                 /* elements (reductions) or bytes (moves) */
    const char **P;            /* per worker order: its slot */
    const char **R, **rem;     /* per unit: its partial (another worker's), scratch */
    const char **D;            /* per rank: its input where it lies (another worker's), or NULL */
    sm_comm_leaf *leaves;      /* per rank: scratch of sm_cg_shm_reduce_into */
    int fallback;              /* the collective falls back to gRPC (sm_cg_shm_phase) */
    int stream;                /* a data movement's copies stream (sm_copy_streams) */
    char *err;
    size_t errlen;
} sm_cg_shm_call;

/* Joins, runs body guarded, leaves; frees the scratch. A collective that
 * falls back to gRPC leaves nobody: it returns SM_ERESOURCE with the
 * joined slot in *fell. */
static sm_err sm_cg_shm_run(sm_cg_shm_call *x, sm_err (*body)(void *), int64_t arg, void *dst,
                            sm_rendezvous_slot **fell)
{
    *fell = NULL;
    sm_comm_grpc *c = x->c;
    int nw = x->L->nw;
    x->P = malloc((size_t)nw * sizeof *x->P);
    x->R = calloc((size_t)x->L->nu, sizeof *x->R);
    x->rem = malloc((size_t)x->L->nu * sizeof *x->rem);
    x->leaves = malloc((size_t)x->g->size * sizeof *x->leaves);
    x->D = calloc((size_t)x->g->size, sizeof *x->D);
    sm_err e;
    if (!x->P || !x->R || !x->rem || !x->leaves || !x->D)
        e = sm_cg_failf(c, SM_ENOMEM, x->err, x->errlen, "out of memory for collective #%llu",
                        (unsigned long long)x->seq);
    else
        e = sm_cg_join(c, x->g, x->L, x->seq, x->kind, arg, x->in, dst, x->arr, &x->s, x->err,
                       x->errlen);
    if (!e) {
        int faulted;
        e = sm_shm_guarded(body, x, &faulted);
        if (faulted)
            e = sm_cg_failf(c, SM_EDATALOSS, x->err, x->errlen,
                            "collective #%llu of job %llu: a shared-memory segment was truncated "
                            "under it",
                            (unsigned long long)x->seq, (unsigned long long)c->job.v);
        if (e == SM_ERESOURCE && x->fallback && !faulted)
            *fell = x->s; /* joined: the gRPC path goes on with the same members */
        else
            sm_rendezvous_leave(c->rv, x->s);
    }
    free(x->P);
    free(x->R);
    free(x->rem);
    free(x->leaves);
    free(x->D);
    return e;
}

/* sm_cg_shm_phase and sm_cg_shm_region for the call x. */
static sm_err sm_cg_shm_xphase(sm_cg_shm_call *x, int phase, sm_err failed)
{
    return sm_cg_shm_phase(x->c, x->g, x->L, x->s, x->seq, phase, failed, &x->fallback, x->err,
                           x->errlen);
}

static sm_err sm_cg_shm_xregion(sm_cg_shm_call *x, int k, size_t used, const char **out)
{
    return sm_cg_shm_region(x->c, x->g, x->L, k, x->seq, used, out, x->err, x->errlen);
}

/* Worker w's arena mapped here (its segment's header names it), for a
 * block of need bytes at off in it. */
static sm_err sm_cg_shm_view(sm_cg_shm_call *x, int w, uint64_t off, size_t need, const char **out)
{
    sm_comm_grpc *c = x->c;
    sm_cg_shm *m = c->shm;
    pthread_mutex_lock(&m->mu);
    const sm_cg_shm_hdr *h = m->seg[w].base;
    const char *base = m->view[w];
    pthread_mutex_unlock(&m->mu);
    char name[SM_SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", h->arena);
    size_t span = (size_t)h->arena_span;
    sm_err e = SM_OK;
    if (!base && c->shm_views &&
        !(e = sm_shm_view_get(c->shm_views, name, span, &base, x->err, x->errlen))) {
        pthread_mutex_lock(&m->mu);
        if (m->view[w]) { /* another device of this worker mapped it meanwhile */
            sm_shm_view_put(c->shm_views, base);
            base = m->view[w];
        } else {
            m->view[w] = base;
        }
        pthread_mutex_unlock(&m->mu);
    }
    if (!e && !base)
        e = sm_fail(x->err, x->errlen, SM_EDATALOSS, "no view of shared memory here");
    if (!e && (off > span || need > span - off))
        e = sm_fail(x->err, x->errlen, SM_EDATALOSS,
                    "bytes [%llu, +%zu) lie beyond the %zu bytes of its array memory %s",
                    (unsigned long long)off, need, span, name);
    if (e)
        return sm_cg_failf(c, e, x->err, x->errlen,
                           "collective #%llu of job %llu: cannot read the input of worker %s: %s",
                           (unsigned long long)x->seq, (unsigned long long)c->job.v, c->addr[w],
                           x->err);
    *out = base + off;
    return SM_OK;
}

/* How many local inputs (inb bytes each) do not lie in this worker's
 * arena: the other workers read those from its slot (data movements) or
 * from its units' partials (reductions). */
static int sm_cg_shm_local_copied(const sm_cg_shm_call *x, int64_t inb)
{
    const sm_shm_arena *a = sm_cg_shm_arena(x->c);
    uint64_t off;
    int copied = 0;
    for (int l = 0; l < x->L->nlocal; l++)
        copied += !sm_shm_arena_holds(a, x->s->in[l], (size_t)inb, &off);
    return copied;
}

/* Writes where the caller's input (inb bytes) lies into its descriptor in
 * this worker's segment (made by then), for the other workers to read it
 * there: its offset in the arena, or SM_SHM_NODESC. Before phase 1. */
static void sm_cg_shm_publish(const sm_cg_shm_call *x, int64_t inb)
{
    sm_comm_grpc *c = x->c;
    const sm_shm_arena *a = sm_cg_shm_arena(c);
    uint64_t off,
        *d = sm_cg_shm_desc(&c->shm->seg[c->self], c->pos_local[x->g->members[x->g->rank]]);
    *d = sm_shm_arena_holds(a, x->in, (size_t)inb, &off) ? off : SM_SHM_NODESC;
}

/* After phase 1: x->D[q], for every member q of another worker whose input
 * (inb bytes) lies in its worker's arena (its descriptor says where), that
 * input mapped here; NULL for the others. With units (reductions), NULL
 * too for every member of a unit one of whose members has none: that
 * unit's partial serves instead (its worker wrote the partials of all its
 * units unless every input of its was in the arena). */
static sm_err sm_cg_shm_direct(sm_cg_shm_call *x, int64_t inb, int units)
{
    sm_comm_grpc *c = x->c;
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    sm_err e = SM_OK;
    for (int q = 0; q < g->size && !e; q++) {
        const sm_shm_seg *sq;
        x->D[q] = NULL;
        if (L->lidx[q] >= 0 || !c->shm_views ||
            (e = sm_cg_shm_seg(c, L->worker[q], x->seq, &sq, x->err, x->errlen)))
            continue;
        uint64_t at =
            __atomic_load_n(sm_cg_shm_desc(sq, c->pos_local[g->members[q]]), __ATOMIC_RELAXED);
        if (at != SM_SHM_NODESC)
            e = sm_cg_shm_view(x, L->worker[q], at, (size_t)inb, &x->D[q]);
    }
    for (int u = 0; units && u < L->nu && !e; u++) {
        const sm_comm_span U = L->unit[u];
        int all = 1;
        for (int q = U.lo; q < U.hi; q++)
            all &= x->D[q] != NULL;
        for (int q = U.lo; q < U.hi && !all; q++)
            x->D[q] = NULL;
    }
    return e;
}

/* The remote reads of a reduction's tree (bytes each) counted: one per
 * unit of another worker read as its partial, one per member read where
 * its input lies. */
static void sm_cg_shm_count_reads(const sm_cg_shm_call *x, int64_t bytes)
{
    const sm_cg_layout *L = x->L;
    int64_t reads = 0, direct = 0;
    for (int u = 0; u < L->nu; u++) {
        const sm_comm_span U = L->unit[u];
        if (L->lidx[U.lo] >= 0)
            continue;
        if (x->D[U.lo])
            direct += U.hi - U.lo;
        else
            reads++;
    }
    sm_traffic_add(SM_TRAFFIC_SHM_IN, (reads + direct) * bytes);
    sm_traffic_add(SM_TRAFFIC_SHM_DIRECT_IN, direct * bytes);
}

/* Ends phase 1 of a reduction (failed: this member's outcome so far), then
 * maps every worker's slot (worker order k holds L->nuw[k] + extra units
 * of unit bytes: its units' partials first) into x->P, and points x->R[u]
 * at unit u's partial where another worker (order ks is this one) wrote
 * it. */
static sm_err sm_cg_shm_partials(sm_cg_shm_call *x, int ks, size_t unit, int extra, sm_err failed)
{
    const sm_cg_layout *L = x->L;
    sm_err e = sm_cg_shm_xphase(x, 1, failed);
    for (int k = 0; k < L->nw && !e; k++)
        e = sm_cg_shm_xregion(x, k, (size_t)(L->nuw[k] + extra) * unit, &x->P[k]);
    for (int u = 0; u < L->nu && !e; u++)
        x->R[u] = L->uorder[u] == ks ? NULL : x->P[L->uorder[u]] + (size_t)L->uidx[u] * unit;
    return e;
}

/* all_reduce: phase 1, each worker writes the partials of its units
 * (sm_comm_tree_units) of the other workers' parts into its slot, one
 * after the other; phase 2, each worker reduces its own part (split among
 * its members) from the other workers' partials and its members' inputs
 * in the tree of sm_comm.h, into its result (after its partials) and its
 * local outputs; phase 3, its members copy the other workers' parts of the
 * result into the local outputs. */
static sm_err sm_cg_shm_ar_body(void *arg)
{
    sm_cg_shm_call *x = arg;
    const sm_cg_layout *L = x->L;
    sm_rendezvous_slot *s = x->s;
    sm_dtype t = x->t;
    int64_t n = x->n, el = (int64_t)sm_dtype_size(t);
    size_t sa = ((size_t)(n * el) + 63) & ~(size_t)63; /* a partial, or the result */
    int nw = L->nw, ks = sm_cg_self_order(x->c, L);
    int64_t a = n * ks / nw, b = n * (ks + 1) / nw, m = b - a; /* this worker's part */
    char *mine = NULL;
    int copied = sm_cg_shm_local_copied(x, n * el);
    /* the outputs written: every local member's, or, when they all gave
     * their arrays, the first one's, which the others then share */
    void *one = n > 0 && sm_comm_one_output(s->arr, L->nlocal) ? s->arr[0]->out->data : NULL;
    void *const *outs = one ? &one : (void *const *)s->out;
    int nouts = one ? 1 : L->nlocal;
    sm_err e = sm_cg_shm_xregion(x, ks, (size_t)(L->nuw[ks] + 1) * sa, (const char **)&mine);
    if (!e)
        sm_cg_shm_publish(x, n * el);
    /* phase 1: the partials of the other parts, a slice of each per local
     * member (none when every local input lies in the arena: the others
     * read the inputs there) */
    int64_t r = n - m, lo = r * L->li / L->nlocal, hi = r * (L->li + 1) / L->nlocal;
    for (int u = 0; u < L->nu && !e && copied; u++) {
        if (L->uorder[u] != ks)
            continue;
        char *p = mine + (size_t)L->uidx[u] * sa;
        const void *const *ins = (const void *const *)s->in;
        int64_t x0 = lo < a ? lo : a, x1 = hi < a ? hi : a;
        e = sm_cg_unit_reduce(L, ins, u, t, x->op, x0, x1, p + x0 * el, x->err, x->errlen);
        x0 = (lo > a ? lo : a) + m, x1 = hi + m;
        if (!e && hi > a)
            e = sm_cg_unit_reduce(L, ins, u, t, x->op, x0, x1, p + x0 * el, x->err, x->errlen);
    }
    e = sm_cg_shm_partials(x, ks, sa, 1, e);
    if (!e)
        e = sm_cg_shm_direct(x, n * el, 1);
    if (!e) { /* phase 2: this worker's part, a slice per local member */
        int64_t x0 = a + m * L->li / L->nlocal, x1 = a + m * (L->li + 1) / L->nlocal;
        char *res = mine + (size_t)L->nuw[ks] * sa;
        e = sm_cg_shm_reduce_into(L, s, x->R, x->D, t, x->op, x0, x1, res + x0 * el, outs, nouts,
                                  x->rem, x->leaves, x->err, x->errlen);
        sm_cg_shm_count_reads(x, (x1 - x0) * el);
    }
    e = sm_cg_shm_xphase(x, 2, e);
    if (!e) { /* phase 3: the other parts into every local output, a share per member */
        int64_t total = (int64_t)nouts * r;
        int64_t x0 = total * L->li / L->nlocal, x1 = total * (L->li + 1) / L->nlocal;
        for (int64_t i = x0; i < x1;) {
            int l = (int)(i / r);
            int64_t xe = i - (int64_t)l * r; /* element of the rest, in output l */
            int64_t end = xe < a ? a : r, len = (end - xe < x1 - i ? end - xe : x1 - i);
            int64_t at = xe < a ? xe : xe + m; /* element of the output */
            int k = 0;
            while (k + 1 < nw && n * (k + 1) / nw <= at)
                k++;
            int64_t kend = n * (k + 1) / nw - at; /* stay within worker k's part */
            len = len < kend ? len : kend;
            const char *res = x->P[k] + (size_t)L->nuw[k] * sa;
            sm_copy_stream((char *)outs[l] + at * el, res + at * el, (size_t)(len * el));
            sm_traffic_add(SM_TRAFFIC_SHM_IN, len * el);
            i += len;
        }
    }
    if (!e && one) /* the first member's output, written in full once phase 3 is passed */
        sm_comm_share_output(s->arr, L->li);
    return sm_cg_shm_xphase(x, 3, e);
}

/* reduce_scatter: phase 1, each worker writes the partials of its units
 * of the other workers' members' chunks into its slot (chunk q of unit
 * index j at element (j * size + q) * n), a slice per local member; then
 * each member reduces its chunk from the other workers' partials and its
 * worker's inputs in the tree of sm_comm.h. */
static sm_err sm_cg_shm_rs_body(void *arg)
{
    sm_cg_shm_call *x = arg;
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    sm_dtype t = x->t;
    int64_t n = x->n, el = (int64_t)sm_dtype_size(t), total = (int64_t)g->size * n;
    int ks = sm_cg_self_order(x->c, L);
    char *mine = NULL;
    int copied = sm_cg_shm_local_copied(x, total * el);
    sm_err e = sm_cg_shm_xregion(x, ks, (size_t)(L->nuw[ks] * total * el), (const char **)&mine);
    if (!e)
        sm_cg_shm_publish(x, total * el);
    int64_t rest = (int64_t)(g->size - L->nlocal) * n;
    int64_t lo = rest * L->li / L->nlocal, hi = rest * (L->li + 1) / L->nlocal;
    for (int u = 0; u < L->nu && !e && copied; u++) {
        if (L->uorder[u] != ks)
            continue;
        char *p = mine + L->uidx[u] * total * el;
        int64_t i = 0;
        for (int q = 0; q < g->size && !e && i < hi; q++) {
            if (L->lidx[q] >= 0)
                continue;
            int64_t a = lo > i ? lo - i : 0, b = hi - i < n ? hi - i : n; /* of chunk q */
            e = sm_cg_unit_reduce(L, (const void *const *)x->s->in, u, t, x->op, q * n + a,
                                  q * n + b, p + (q * n + a) * el, x->err, x->errlen);
            i += n;
        }
    }
    e = sm_cg_shm_partials(x, ks, (size_t)(total * el), 0, e);
    if (!e)
        e = sm_cg_shm_direct(x, total * el, 1);
    if (!e) /* the caller's chunk */
        e = sm_cg_shm_reduce_into(L, x->s, x->R, x->D, t, x->op, (int64_t)g->rank * n,
                                  (int64_t)(g->rank + 1) * n, x->out, NULL, 0, x->rem, x->leaves,
                                  x->err, x->errlen);
    if (!e)
        sm_cg_shm_count_reads(x, n * el);
    return sm_cg_shm_xphase(x, 3, e);
}

static sm_err sm_cg_shm_move_body(void *arg);

/* Any collective through the group's segments (kind: the body; t and op
 * for reductions, from, perm and npairs for a permute): one call record. */
static sm_err sm_cg_shm_collective(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                                   uint64_t seq, sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op,
                                   int from, const int64_t (*perm)[2], int npairs, const void *in,
                                   void *out, int64_t n, const sm_comm_arrays *arr,
                                   sm_rendezvous_slot **fell, char *err, size_t errlen)
{
    sm_cg_shm_call x = {.c = c,
                        .g = g,
                        .L = L,
                        .seq = seq,
                        .kind = kind,
                        .t = t,
                        .op = op,
                        .from = from,
                        .perm = perm,
                        .npairs = npairs,
                        .in = in,
                        .out = out,
                        .arr = arr,
                        .n = n,
                        .err = err,
                        .errlen = errlen};
    if (kind == SM_CG_AR)
        return sm_cg_shm_run(&x, sm_cg_shm_ar_body, n, out, fell);
    /* a data movement's copies: as the outputs of every device of this
     * host (the other groups of the collective run at the same time) fit
     * in cache or not */
    x.stream = sm_copy_streams((size_t)(kind == SM_CG_PERM ? n : (int64_t)g->size * n) *
                               (size_t)c->shm->nhere);
    return sm_cg_shm_run(&x, kind == SM_CG_RS ? sm_cg_shm_rs_body : sm_cg_shm_move_body, n, NULL,
                         fell);
}

sm_err sm_cg_shm_reduce(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                        uint64_t seq, sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op,
                        const void *in, void *out, int64_t n, const sm_comm_arrays *arr,
                        sm_rendezvous_slot **fell, char *err, size_t errlen)
{
    return sm_cg_shm_collective(c, g, L, seq, kind, t, op, -1, NULL, 0, in, out, n, arr, fell, err,
                                errlen);
}

/* 1 if the input of group rank m (on this worker) goes to a member on
 * another worker in permute x. */
static int sm_cg_shm_sends_away(const sm_cg_shm_call *x, int m)
{
    for (int k = 0; k < x->npairs; k++)
        if (x->perm[k][0] == m)
            return x->L->lidx[x->perm[k][1]] < 0;
    return 0;
}

/* Phase 1 of a data movement: into this worker's slot (mine) goes what the
 * other workers read of its members' inputs (inb bytes of slot each):
 * all_gather, every input; all_to_all, each input's chunks for the other
 * workers' members; permute, the inputs whose destination is on another
 * worker. The local members copy it together, each an equal share of the
 * bytes (pass 0 counts them, pass 1 copies the caller's share), so a
 * permute whose one member sends away keeps the others busy too. */
static void sm_cg_shm_move_put(const sm_cg_shm_call *x, char *mine, int64_t inb)
{
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    const sm_shm_arena *a = sm_cg_shm_arena(x->c);
    int64_t cb = x->n, total = 0;
    uint64_t off;
    for (int pass = 0; pass < 2; pass++) {
        int64_t lo = total * L->li / L->nlocal, hi = total * (L->li + 1) / L->nlocal, at = 0;
        for (int m = 0; m < g->size; m++) {
            if (L->lidx[m] < 0 || (x->kind == SM_CG_PERM && !sm_cg_shm_sends_away(x, m)) ||
                sm_shm_arena_holds(a, x->s->in[L->lidx[m]], (size_t)inb, &off))
                continue; /* not read by other workers, or read where it lies */
            const char *in = x->s->in[L->lidx[m]];
            char *slot = mine + L->gidx[m] * inb;
            for (int q = 0; q < (x->kind == SM_CG_A2A ? g->size : 1); q++) {
                if (x->kind == SM_CG_A2A && L->lidx[q] >= 0)
                    continue; /* a chunk for a member of this worker: read from the input */
                int64_t off = x->kind == SM_CG_A2A ? q * cb : 0;
                int64_t a = lo > at ? lo - at : 0, b = hi - at < cb ? hi - at : cb;
                if (pass == 1 && a < b)
                    sm_copy_as(slot + off + a, in + off + a, (size_t)(b - a), x->stream);
                at += cb;
            }
        }
        total = at;
    }
}

/* Where the input of member q of another worker (inb bytes) is read:
 * where it lies in that worker's arena, else its copy in that worker's
 * slot; counted as read from shared memory (bytes of it). */
static sm_err sm_cg_shm_src(sm_cg_shm_call *x, int q, int64_t inb, int64_t bytes, const char **src)
{
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    sm_err e = SM_OK;
    if (x->D[q]) { /* its input, where it lies */
        *src = x->D[q];
        sm_traffic_add(SM_TRAFFIC_SHM_DIRECT_IN, bytes);
    } else {
        int k = 0, nk = 0; /* worker order of q, and its members in the group */
        while (L->order[k] != L->worker[q])
            k++;
        for (int y = 0; y < g->size; y++)
            nk += L->worker[y] == L->worker[q];
        if ((e = sm_cg_shm_xregion(x, k, (size_t)(nk * inb), src)))
            return e;
        *src += L->gidx[q] * inb;
    }
    sm_traffic_add(SM_TRAFFIC_SHM_IN, bytes);
    return e;
}

/* The source rank of destination rank m in permute x, or -1. */
static int sm_cg_shm_source(const sm_cg_shm_call *x, int m)
{
    for (int k = 0; k < x->npairs; k++)
        if (x->perm[k][1] == m)
            return (int)x->perm[k][0];
    return -1;
}

/* 1 if every local member of x gave its arrays (sm_comm.h). */
static int sm_cg_shm_all_arrays(const sm_cg_shm_call *x)
{
    for (int l = 0; l < x->L->nlocal; l++)
        if (!x->s->arr[l])
            return 0;
    return x->L->nlocal > 1;
}

/* A permute's receiving on this worker when every local member gave its
 * arrays: a member whose source is on this worker shares its input
 * (sm_array_alias); the bytes of sources on other workers are copied by
 * all local members together, each an equal share of them, so that a
 * worker whose one member receives from away keeps the others busy too
 * (the outputs are written in full once phase 3's barrier is passed). */
static sm_err sm_cg_shm_permute_in(sm_cg_shm_call *x, int64_t inb)
{
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    int64_t cb = x->n, total = 0;
    sm_err e = SM_OK;
    for (int m = 0; m < g->size; m++) {
        int q = L->lidx[m] >= 0 ? sm_cg_shm_source(x, m) : -1;
        total += q >= 0 && L->lidx[q] < 0 ? cb : 0;
    }
    int64_t lo = total * L->li / L->nlocal, hi = total * (L->li + 1) / L->nlocal, at = 0;
    for (int m = 0; m < g->size && !e; m++) {
        int q = L->lidx[m] >= 0 ? sm_cg_shm_source(x, m) : -1;
        if (q < 0 || L->lidx[q] >= 0)
            continue;
        int64_t a = lo > at ? lo - at : 0, b = hi - at < cb ? hi - at : cb;
        const char *src;
        if (a < b && !(e = sm_cg_shm_src(x, q, inb, b - a, &src)))
            sm_copy_as((char *)x->s->arr[L->lidx[m]]->out->data + a, src + a, (size_t)(b - a),
                       x->stream);
        at += cb;
    }
    if (e || x->from < 0 || L->lidx[x->from] < 0)
        return e;
    if (!sm_array_alias(x->arr->out, x->s->arr[L->lidx[x->from]]->in, 0))
        sm_copy_as(x->out, x->s->in[L->lidx[x->from]], (size_t)cb, x->stream);
    return SM_OK;
}

static sm_err sm_cg_shm_move_body(void *arg)
{
    sm_cg_shm_call *x = arg;
    sm_comm_grpc *c = x->c;
    const sm_comm_group *g = x->g;
    const sm_cg_layout *L = x->L;
    sm_cg_kind kind = x->kind;
    int64_t cb = x->n;
    int64_t inb = kind == SM_CG_A2A ? (int64_t)g->size * cb : cb; /* per member */
    int ks = sm_cg_self_order(c, L);
    int copied = sm_cg_shm_local_copied(x, inb); /* the others read those from the slot */
    char *mine = NULL;
    sm_err e =
        sm_cg_shm_xregion(x, ks, copied ? (size_t)(L->nlocal * inb) : 0, (const char **)&mine);
    if (!e) { /* where the others find the caller's input: in the arena, or the slot */
        sm_cg_shm_publish(x, inb);
        sm_cg_shm_move_put(x, mine, inb);
    }
    e = sm_cg_shm_xphase(x, 1, e);
    if (!e)
        e = sm_cg_shm_direct(x, inb, 0);
    int arrays = !e && cb > 0 && sm_cg_shm_all_arrays(x);
    if (arrays && kind == SM_CG_PERM) {
        e = sm_cg_shm_permute_in(x, inb);
        goto zeros;
    }
    /* An all_gather whose local members all gave their arrays writes one
     * output here, the first member's, each member an equal share of its
     * bytes [lo, hi), and the others share it (written in full once phase
     * 3's barrier is passed, before any member returns). */
    int one = arrays && kind == SM_CG_AG && sm_comm_one_output(x->s->arr, L->nlocal);
    int64_t total = (int64_t)g->size * cb, lo = 0, hi = total;
    char *out = x->out;
    if (one) {
        lo = total * L->li / L->nlocal;
        hi = total * (L->li + 1) / L->nlocal;
        out = x->s->arr[0]->out->data;
        x->stream = sm_copy_streams((size_t)total * (size_t)c->shm->ndomain);
    }
    for (int q = 0; q < g->size && !e; q++) {
        if (kind == SM_CG_PERM && q != x->from)
            continue;
        int64_t at = kind == SM_CG_PERM ? 0 : q * cb;
        int64_t a = lo > at ? lo - at : 0, b = hi - at < cb ? hi - at : cb;
        if (a >= b)
            continue; /* another member's share */
        const char *src = NULL;
        if (L->lidx[q] >= 0)
            src = x->s->in[L->lidx[q]];
        else if ((e = sm_cg_shm_src(x, q, inb, b - a, &src)))
            break;
        if (kind == SM_CG_A2A)
            src += (int64_t)g->rank * cb;
        sm_copy_as(out + at + a, src + a, (size_t)(b - a), x->stream);
    }
    if (!e && one)
        sm_comm_share_output(x->s->arr, L->li);
zeros:
    if (!e && kind == SM_CG_PERM && x->from < 0)
        memset(x->out, 0, (size_t)cb);
    return sm_cg_shm_xphase(x, 3, e);
}

sm_err sm_cg_shm_move(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L, uint64_t seq,
                      sm_cg_kind kind, int from, const int64_t (*perm)[2], int npairs,
                      const void *in, void *out, int64_t cb, const sm_comm_arrays *arr,
                      sm_rendezvous_slot **fell, char *err, size_t errlen)
{
    return sm_cg_shm_collective(c, g, L, seq, kind, SM_F32, SM_KERN_SUM, from, perm, npairs, in,
                                out, cb, arr, fell, err, errlen);
}
