/* sm_array_pool: the memory behind large array data (sm_array_data_alloc).
 *
 * Blocks of SM_CACHE_MIN bytes and more get their own mapping, its length
 * the block's size rounded up to one of eight classes per power of two (at
 * most 1/8 more than asked for). Freed, such a mapping is kept for a
 * later block of the same class while its pool keeps at most max_bytes
 * of them, each for at most idle_ms; anything else goes back to the system
 * at once. A fresh mapping costs a page fault (and the kernel zeroing the
 * page) per 4 KiB on first write, more than moving the bytes on this kind
 * of machine; a kept one costs nothing. Smaller blocks come from malloc.
 * Without a pool (NULL) blocks are allocated the same way and nothing is
 * kept or counted.
 *
 * The length of a mapping follows from the size asked for, so freeing
 * needs that size again (sm_array_data_free) and no table of blocks.
 *
 * Every block in use counts against the pool's optional limit
 * (sm_array_pool_limit_set), kept blocks too: past it an allocation first
 * gives kept blocks back, then fails. The count is kept with atomics; the
 * lock is taken only to keep or give back blocks.
 *
 * Lifetime: the pool counts one reference for its owner and one per block
 * in use; sm_array_pool_free drops the owner's (and every kept block),
 * and whichever drops the last frees the pool, so arrays may outlive it. */
#define _GNU_SOURCE
#include "sm_array.h"
#include "sm_array_arena.h"
#include "sm_shm.h"
#include "sm_time.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SM_POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define SM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SM_POISON(p, n)   ((void)(p), (void)(n))
#define SM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define SM_ARRAY_ALIGN 64
/* Blocks from this size up get their own mapping. */
#define SM_CACHE_MIN ((size_t)1 << 20)
/* Fresh mappings from this size up are prefaulted in one call. */
#define SM_ARRAY_PREFAULT ((size_t)8 << 20)

typedef struct ent {
    void *p;
    size_t len;
    int64_t freed_ms;
    struct ent *prev, *next; /* newest first */
} ent;

struct sm_array_pool {
    pthread_mutex_t mu;
    size_t max_bytes, held;
    int64_t idle_ms;
    ent *head, *tail;
    int64_t hits, misses;
    size_t limit, live;  /* the memory limit (0: none); array data allocated */
    size_t other;        /* of live: sm_array_pool_charge's */
    int64_t refs;        /* the owner's (until sm_array_pool_free) + one per block in use */
    sm_shm_arena *arena; /* where mapped blocks come from first (NULL: anonymous memory) */
};

sm_err sm_array_pool_create(sm_array_pool **out, char *err, size_t errlen)
{
    sm_array_pool *pool = calloc(1, sizeof *pool);
    *out = NULL;
    if (!pool)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an array pool");
    pthread_mutex_init(&pool->mu, NULL);
    pool->idle_ms = 10000;
    pool->refs = 1;
    *out = pool;
    return SM_OK;
}

/* Drops one reference; the last frees the pool (nothing is kept then:
 * the owner's went first, with every kept block). */
static void pool_unref(sm_array_pool *pool)
{
    if (__atomic_sub_fetch(&pool->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        sm_shm_arena_free(pool->arena);
        pthread_mutex_destroy(&pool->mu);
        free(pool);
    }
}

/* The mapping length of a block of n >= SM_CACHE_MIN bytes: n rounded up
 * to a multiple of an eighth of its power of two (a page multiple). 0 on
 * overflow. */
static size_t class_len(size_t n)
{
    int top = 63 - __builtin_clzll((unsigned long long)n);
    size_t step = (size_t)1 << (top - 3);
    if (n > SIZE_MAX - step)
        return 0;
    return (n + step - 1) & ~(step - 1);
}

static void unlink_ent(sm_array_pool *pool, ent *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        pool->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        pool->tail = e->prev;
    __atomic_sub_fetch(&pool->held, e->len, __ATOMIC_RELAXED);
}

/* Takes off the list (pool->mu held) the oldest entries until at most
 * keep bytes are held and none is older than idle_ms; returns them
 * chained by next, to be unmapped outside the lock. */
static ent *evict_locked(sm_array_pool *pool, size_t keep, int64_t now)
{
    ent *out = NULL;
    while (pool->tail && (pool->held > keep || now - pool->tail->freed_ms >= pool->idle_ms)) {
        ent *e = pool->tail;
        unlink_ent(pool, e);
        e->next = out;
        out = e;
    }
    return out;
}

/* Gives the mapped block p of length len back to the system. */
static void unmap_block(sm_array_pool *pool, void *p, size_t len)
{
    uint64_t off;
    SM_UNPOISON(p, len);
    if (pool && sm_shm_arena_holds(pool->arena, p, len, &off))
        sm_shm_arena_release(pool->arena, p, len);
    else
        munmap(p, len);
}

static void unmap_all(sm_array_pool *pool, ent *e)
{
    while (e) {
        ent *n = e->next;
        unmap_block(pool, e->p, e->len);
        free(e);
        e = n;
    }
}

void sm_array_pool_free(sm_array_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->max_bytes = 0; /* blocks freed from now on are not kept */
    ent *v = evict_locked(pool, 0, sm_time_mono_ms());
    pthread_mutex_unlock(&pool->mu);
    sm_shm_arena_unlink(pool->arena); /* no name left behind; blocks in use stay valid */
    unmap_all(pool, v);
    pool_unref(pool);
}

void sm_array_pool_arena_set(sm_array_pool *pool, sm_shm_arena *arena)
{
    pool->arena = arena;
}

sm_shm_arena *sm_array_pool_arena(const sm_array_pool *pool)
{
    return pool ? pool->arena : NULL;
}

void sm_array_pool_cache_set(sm_array_pool *pool, size_t max_bytes, int idle_ms)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->max_bytes = max_bytes;
    pool->idle_ms = idle_ms < 0 ? 0 : idle_ms;
    ent *v = evict_locked(pool, max_bytes, sm_time_mono_ms());
    pthread_mutex_unlock(&pool->mu);
    unmap_all(pool, v);
}

void sm_array_pool_limit_set(sm_array_pool *pool, size_t bytes)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    __atomic_store_n(&pool->limit, bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool->mu);
}

/* Counts n more bytes of array data if the limit allows: counted first,
 * then checked, so that racing callers see each other. Only when kept
 * blocks stand in the way does it take the lock, to give them back. 0:
 * over the limit, nothing counted. A NULL pool counts nothing. */
static int charge(sm_array_pool *pool, size_t n)
{
    if (!pool)
        return 1;
    size_t limit = __atomic_load_n(&pool->limit, __ATOMIC_RELAXED);
    size_t live = __atomic_add_fetch(&pool->live, n, __ATOMIC_RELAXED);
    if (!limit || (live <= limit && __atomic_load_n(&pool->held, __ATOMIC_RELAXED) <= limit - live))
        return 1;
    ent *v = NULL;
    int ok = live <= limit;
    if (ok) {
        pthread_mutex_lock(&pool->mu);
        v = evict_locked(pool, limit - live, sm_time_mono_ms());
        pthread_mutex_unlock(&pool->mu);
    }
    unmap_all(pool, v);
    if (!ok)
        __atomic_sub_fetch(&pool->live, n, __ATOMIC_RELAXED);
    return ok;
}

static void uncharge(sm_array_pool *pool, size_t n)
{
    if (pool)
        __atomic_sub_fetch(&pool->live, n, __ATOMIC_RELAXED);
}

void sm_array_pool_trim(sm_array_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    ent *v = evict_locked(pool, pool->max_bytes, sm_time_mono_ms());
    pthread_mutex_unlock(&pool->mu);
    unmap_all(pool, v);
}

void sm_array_pool_stats(sm_array_pool *pool, sm_array_pool_info *out)
{
    memset(out, 0, sizeof *out);
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    out->max_bytes = pool->max_bytes;
    out->held_bytes = pool->held;
    out->hits = pool->hits;
    out->misses = pool->misses;
    out->limit_bytes = pool->limit;
    out->live_bytes = __atomic_load_n(&pool->live, __ATOMIC_RELAXED);
    out->other_bytes = __atomic_load_n(&pool->other, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool->mu);
}

/* A kept mapping of length len, or NULL. */
static void *cache_take(sm_array_pool *pool, size_t len)
{
    void *p = NULL;
    pthread_mutex_lock(&pool->mu);
    for (ent *e = pool->head; e; e = e->next)
        if (e->len == len) {
            unlink_ent(pool, e);
            p = e->p;
            free(e);
            break;
        }
    if (p) {
        pool->hits++;
        __atomic_add_fetch(&pool->live, len, __ATOMIC_RELAXED); /* kept, then in use */
    } else {
        pool->misses++;
    }
    pthread_mutex_unlock(&pool->mu);
    return p;
}

/* Keeps the mapping p of length len, or unmaps it. */
static void cache_put(sm_array_pool *pool, void *p, size_t len)
{
    ent *e = NULL, *v = NULL;
    if (pool) {
        int64_t now = sm_time_mono_ms();
        e = malloc(sizeof *e);
        SM_POISON(p, len);
        pthread_mutex_lock(&pool->mu);
        __atomic_sub_fetch(&pool->live, len, __ATOMIC_RELAXED);
        if (e && len <= pool->max_bytes) {
            v = evict_locked(pool, pool->max_bytes - len, now);
            *e = (ent){p, len, now, NULL, pool->head};
            if (pool->head)
                pool->head->prev = e;
            else
                pool->tail = e;
            pool->head = e;
            __atomic_add_fetch(&pool->held, len, __ATOMIC_RELAXED);
            p = NULL;
            e = NULL;
        }
        pthread_mutex_unlock(&pool->mu);
    }
    free(e);
    unmap_all(pool, v);
    if (p)
        unmap_block(pool, p, len);
}

static size_t padded_len(size_t n)
{
    size_t padded = (n + SM_ARRAY_ALIGN - 1) & ~(size_t)(SM_ARRAY_ALIGN - 1);
    if (padded < n)
        return 0;
    return padded ? padded : SM_ARRAY_ALIGN;
}

/* A block of padded >= SM_CACHE_MIN bytes (n asked for): kept or fresh. */
static void *alloc_mapped(sm_array_pool *pool, size_t n, size_t padded, int zero)
{
    size_t len = class_len(padded);
    if (!len)
        return NULL;
    void *p = pool ? cache_take(pool, len) : NULL;
    if (p) {
        SM_UNPOISON(p, padded);
        if (zero)
            memset(p, 0, padded);
        else
            memset((char *)p + n, 0, padded - n);
        return p;
    }
    if (!charge(pool, len))
        return NULL;
    p = pool && pool->arena ? sm_shm_arena_take(pool->arena, len) : NULL;
    if (!p) /* no arena, or no room in it: private memory */
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        uncharge(pool, len);
        return NULL;
    }
#ifdef MADV_POPULATE_WRITE
    /* Every byte is written soon: mapping the pages in one call costs less
     * than a fault per 4 KiB page on first write (advice only; older kernels
     * refuse it). */
    if (padded >= SM_ARRAY_PREFAULT)
        (void)madvise(p, padded, MADV_POPULATE_WRITE);
#endif
    /* a fresh mapping reads as zeros */
    SM_POISON((char *)p + padded, len - padded);
    return p;
}

void *sm_array_data_alloc(sm_array_pool *pool, size_t n, int zero)
{
    size_t padded = padded_len(n);
    void *p = NULL;
    if (!padded)
        return NULL;
    if (padded >= SM_CACHE_MIN) {
        p = alloc_mapped(pool, n, padded, zero);
    } else if (charge(pool, padded)) {
        if (posix_memalign(&p, SM_ARRAY_ALIGN, padded) != 0) {
            uncharge(pool, padded);
            return NULL;
        }
        if (zero)
            memset(p, 0, padded);
        else /* only the padding past the data */
            memset((char *)p + n, 0, padded - n);
    }
    if (p && pool)
        __atomic_add_fetch(&pool->refs, 1, __ATOMIC_RELAXED);
    return p;
}

void sm_array_data_free(sm_array_pool *pool, void *p, size_t n)
{
    if (!p)
        return;
    size_t padded = padded_len(n);
    if (padded < SM_CACHE_MIN) {
        free(p);
        uncharge(pool, padded);
    } else {
        cache_put(pool, p, class_len(padded));
    }
    if (pool)
        pool_unref(pool);
}

int sm_array_pool_refused(sm_array_pool *pool, size_t n, char *why, size_t whylen)
{
    if (!pool)
        return 0;
    size_t padded = padded_len(n);
    size_t charge = padded < SM_CACHE_MIN ? padded : class_len(padded);
    pthread_mutex_lock(&pool->mu);
    size_t limit = pool->limit, live = __atomic_load_n(&pool->live, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool->mu);
    if (!limit || (charge && charge <= limit && live <= limit - charge))
        return 0;
    snprintf(why, whylen,
             "%zu MiB of array data in use and %zu MiB asked for, beyond this process's "
             "limit of %zu MiB",
             live >> 20, (charge + (1 << 20) - 1) >> 20, limit >> 20);
    return 1;
}

int sm_array_pool_charge(sm_array_pool *pool, size_t n, char *why, size_t whylen)
{
    if (!pool)
        return 0;
    if (!charge(pool, n)) {
        size_t limit = __atomic_load_n(&pool->limit, __ATOMIC_RELAXED);
        size_t live = __atomic_load_n(&pool->live, __ATOMIC_RELAXED);
        snprintf(why, whylen,
                 "%zu MiB of memory in use and %zu MiB more asked for, beyond this process's "
                 "limit of %zu MiB",
                 live >> 20, (n + (1 << 20) - 1) >> 20, limit >> 20);
        return 1;
    }
    __atomic_add_fetch(&pool->other, n, __ATOMIC_RELAXED);
    return 0;
}

void sm_array_pool_uncharge(sm_array_pool *pool, size_t n)
{
    if (!pool)
        return;
    __atomic_sub_fetch(&pool->other, n, __ATOMIC_RELAXED);
    uncharge(pool, n);
}
