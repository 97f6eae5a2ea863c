/* sm_array_cache: the memory behind large array data (sm_array_data_alloc).
 *
 * Blocks of SM_CACHE_MIN bytes and more get their own mapping, its length
 * the block's size rounded up to one of eight classes per power of two (at
 * most 1/8 more than asked for). Freed, such a mapping is kept for a
 * later block of the same class while the process keeps at most max_bytes
 * of them, each for at most idle_ms; anything else goes back to the system
 * at once. A fresh mapping costs a page fault (and the kernel zeroing the
 * page) per 4 KiB on first write, more than moving the bytes on this kind
 * of machine; a kept one costs nothing. Smaller blocks come from malloc.
 *
 * The length of a mapping follows from the size asked for, so freeing
 * needs that size again (sm_array_data_free) and no table of blocks.
 *
 * Every block in use counts against an optional limit
 * (sm_array_mem_limit_set), kept blocks too: past it an allocation first
 * gives kept blocks back, then fails. The count is kept with atomics; the
 * lock is taken only to give kept blocks back. */
#define _GNU_SOURCE
#include "sm_array.h"
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

static struct {
    pthread_mutex_t mu;
    size_t max_bytes, held;
    int64_t idle_ms;
    ent *head, *tail;
    int64_t hits, misses;
    size_t limit, live; /* the memory limit (0: none); array data allocated */
    size_t other;       /* of live: sm_array_mem_charge's */
} cache = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 10000, NULL, NULL, 0, 0, 0, 0, 0};

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

static void unlink_ent(ent *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        cache.head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        cache.tail = e->prev;
    __atomic_sub_fetch(&cache.held, e->len, __ATOMIC_RELAXED);
}

/* Takes off the list (cache.mu held) the oldest entries until at most
 * keep bytes are held and none is older than idle_ms; returns them
 * chained by next, to be unmapped outside the lock. */
static ent *evict_locked(size_t keep, int64_t now)
{
    ent *out = NULL;
    while (cache.tail && (cache.held > keep || now - cache.tail->freed_ms >= cache.idle_ms)) {
        ent *e = cache.tail;
        unlink_ent(e);
        e->next = out;
        out = e;
    }
    return out;
}

static void unmap_all(ent *e)
{
    while (e) {
        ent *n = e->next;
        SM_UNPOISON(e->p, e->len);
        munmap(e->p, e->len);
        free(e);
        e = n;
    }
}

void sm_array_cache_set(size_t max_bytes, int idle_ms)
{
    pthread_mutex_lock(&cache.mu);
    cache.max_bytes = max_bytes;
    cache.idle_ms = idle_ms < 0 ? 0 : idle_ms;
    ent *v = evict_locked(max_bytes, sm_time_mono_ms());
    pthread_mutex_unlock(&cache.mu);
    unmap_all(v);
}

void sm_array_mem_limit_set(size_t bytes)
{
    pthread_mutex_lock(&cache.mu);
    __atomic_store_n(&cache.limit, bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&cache.mu);
}

/* Counts n more bytes of array data if the limit allows: counted first,
 * then checked, so that racing callers see each other. Only when kept
 * blocks stand in the way does it take the lock, to give them back. 0:
 * over the limit, nothing counted. */
static int charge(size_t n)
{
    size_t limit = __atomic_load_n(&cache.limit, __ATOMIC_RELAXED);
    size_t live = __atomic_add_fetch(&cache.live, n, __ATOMIC_RELAXED);
    if (!limit || (live <= limit && __atomic_load_n(&cache.held, __ATOMIC_RELAXED) <= limit - live))
        return 1;
    ent *v = NULL;
    int ok = live <= limit;
    if (ok) {
        pthread_mutex_lock(&cache.mu);
        v = evict_locked(limit - live, sm_time_mono_ms());
        pthread_mutex_unlock(&cache.mu);
    }
    unmap_all(v);
    if (!ok)
        __atomic_sub_fetch(&cache.live, n, __ATOMIC_RELAXED);
    return ok;
}

static void uncharge(size_t n)
{
    __atomic_sub_fetch(&cache.live, n, __ATOMIC_RELAXED);
}

void sm_array_cache_trim(void)
{
    pthread_mutex_lock(&cache.mu);
    ent *v = evict_locked(cache.max_bytes, sm_time_mono_ms());
    pthread_mutex_unlock(&cache.mu);
    unmap_all(v);
}

void sm_array_cache_stats(sm_array_cache_info *out)
{
    pthread_mutex_lock(&cache.mu);
    out->max_bytes = cache.max_bytes;
    out->held_bytes = cache.held;
    out->hits = cache.hits;
    out->misses = cache.misses;
    out->limit_bytes = cache.limit;
    out->live_bytes = __atomic_load_n(&cache.live, __ATOMIC_RELAXED);
    out->other_bytes = __atomic_load_n(&cache.other, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&cache.mu);
}

/* A kept mapping of length len, or NULL. */
static void *cache_take(size_t len)
{
    void *p = NULL;
    pthread_mutex_lock(&cache.mu);
    for (ent *e = cache.head; e; e = e->next)
        if (e->len == len) {
            unlink_ent(e);
            p = e->p;
            free(e);
            break;
        }
    if (p) {
        cache.hits++;
        __atomic_add_fetch(&cache.live, len, __ATOMIC_RELAXED); /* kept, then in use */
    } else {
        cache.misses++;
    }
    pthread_mutex_unlock(&cache.mu);
    return p;
}

/* Keeps the mapping p of length len, or unmaps it. */
static void cache_put(void *p, size_t len)
{
    ent *e = malloc(sizeof *e), *v = NULL;
    int64_t now = sm_time_mono_ms();
    SM_POISON(p, len);
    pthread_mutex_lock(&cache.mu);
    __atomic_sub_fetch(&cache.live, len, __ATOMIC_RELAXED);
    if (e && len <= cache.max_bytes) {
        v = evict_locked(cache.max_bytes - len, now);
        *e = (ent){p, len, now, NULL, cache.head};
        if (cache.head)
            cache.head->prev = e;
        else
            cache.tail = e;
        cache.head = e;
        __atomic_add_fetch(&cache.held, len, __ATOMIC_RELAXED);
        p = NULL;
        e = NULL;
    }
    pthread_mutex_unlock(&cache.mu);
    free(e);
    unmap_all(v);
    if (p) {
        SM_UNPOISON(p, len);
        munmap(p, len);
    }
}

static size_t padded_len(size_t n)
{
    size_t padded = (n + SM_ARRAY_ALIGN - 1) & ~(size_t)(SM_ARRAY_ALIGN - 1);
    if (padded < n)
        return 0;
    return padded ? padded : SM_ARRAY_ALIGN;
}

void *sm_array_data_alloc(size_t n, int zero)
{
    size_t padded = padded_len(n);
    if (!padded)
        return NULL;
    if (padded < SM_CACHE_MIN) {
        void *p = NULL;
        if (!charge(padded))
            return NULL;
        if (posix_memalign(&p, SM_ARRAY_ALIGN, padded) != 0) {
            uncharge(padded);
            return NULL;
        }
        if (zero)
            memset(p, 0, padded);
        else /* only the padding past the data */
            memset((char *)p + n, 0, padded - n);
        return p;
    }
    size_t len = class_len(padded);
    if (!len)
        return NULL;
    void *p = cache_take(len);
    if (p) {
        SM_UNPOISON(p, padded);
        if (zero)
            memset(p, 0, padded);
        else
            memset((char *)p + n, 0, padded - n);
        return p;
    }
    if (!charge(len))
        return NULL;
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        uncharge(len);
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

void sm_array_data_free(void *p, size_t n)
{
    if (!p)
        return;
    size_t padded = padded_len(n);
    if (padded < SM_CACHE_MIN) {
        free(p);
        uncharge(padded);
        return;
    }
    cache_put(p, class_len(padded));
}

int sm_array_mem_refused(size_t n, char *why, size_t whylen)
{
    size_t padded = padded_len(n);
    size_t charge = padded < SM_CACHE_MIN ? padded : class_len(padded);
    pthread_mutex_lock(&cache.mu);
    size_t limit = cache.limit, live = __atomic_load_n(&cache.live, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&cache.mu);
    if (!limit || (charge && charge <= limit && live <= limit - charge))
        return 0;
    snprintf(why, whylen,
             "%zu MiB of array data in use and %zu MiB asked for, beyond this process's "
             "limit of %zu MiB",
             live >> 20, (charge + (1 << 20) - 1) >> 20, limit >> 20);
    return 1;
}

int sm_array_mem_charge(size_t n, char *why, size_t whylen)
{
    if (!charge(n)) {
        size_t limit = __atomic_load_n(&cache.limit, __ATOMIC_RELAXED);
        size_t live = __atomic_load_n(&cache.live, __ATOMIC_RELAXED);
        snprintf(why, whylen,
                 "%zu MiB of memory in use and %zu MiB more asked for, beyond this process's "
                 "limit of %zu MiB",
                 live >> 20, (n + (1 << 20) - 1) >> 20, limit >> 20);
        return 1;
    }
    __atomic_add_fetch(&cache.other, n, __ATOMIC_RELAXED);
    return 0;
}

void sm_array_mem_uncharge(size_t n)
{
    __atomic_sub_fetch(&cache.other, n, __ATOMIC_RELAXED);
    uncharge(n);
}
