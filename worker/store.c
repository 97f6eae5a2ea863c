#include "store.h"

#include "sm_array.h"
#include "sm_array_share.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sm_store_entry {
    uint64_t array;
    int32_t device;
    int slot;              /* index of device in st->devices */
    sm_store_shard *shard; /* NULL while spilled */
    sm_store_shard meta;   /* spilled: the shard's dtype, shape, bytes and checksum (no data) */
    uint64_t used;         /* st->tick at the last put or get: the LRU order */
    struct sm_store_entry *next;
} sm_store_entry;

struct sm_store {
    pthread_mutex_t mu;
    uint64_t epoch;
    int64_t worker_id;
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    int64_t bytes[SM_MAX_WORKER_DEVICES];
    int64_t count;
    size_t nbuckets; /* power of two */
    sm_store_entry **buckets;
    sm_array_pool *pool;          /* borrowed: where shards' memory comes from */
    const sm_store_observer *obs; /* NULL: none */
    void *obs_user;
    const sm_store_spiller *sp; /* NULL: none */
    void *sp_user;
    uint64_t tick;
    int64_t nspilled;
    pthread_mutex_t load_mu; /* one read-back at a time */
};

/* ---- shards ------------------------------------------------------------ */

_Static_assert(SM_STORE_ALIGN == 64, "shard data comes from sm_array_data_alloc (64-byte aligned)");

sm_err sm_store_shard_create(sm_array_pool *pool, sm_dtype t, const sm_shape *s,
                             sm_store_shard **out, char *err, size_t errlen)
{
    int64_t nbytes = 0;
    sm_err e;
    if (sm_dtype_size(t) == 0)
        return sm_fail(err, errlen, SM_EINVAL, "dtype %d is not a valid dtype", (int)t);
    if (s->rank < 0 || s->rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "rank %d is outside 0..%d", s->rank, SM_MAX_RANK);
    for (int d = 0; d < s->rank; d++)
        if (s->dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "dimension %d of the shape is negative (%lld)",
                           d, (long long)s->dims[d]);
    if ((e = sm_shape_nbytes(s, t, &nbytes, err, errlen)))
        return e;
    if ((uint64_t)nbytes > (uint64_t)SIZE_MAX - SM_STORE_ALIGN)
        return sm_fail(err, errlen, SM_EOVERFLOW, "a shard of %lld bytes does not fit in memory",
                       (long long)nbytes);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && nbytes / page >= pages)
        return sm_fail(err, errlen, SM_ERESOURCE,
                       "a shard of %lld bytes is larger than this host's memory (%lld bytes)",
                       (long long)nbytes, (long long)pages * page);
    sm_store_shard *sh = calloc(1, sizeof *sh);
    if (!sh)
        return sm_fail(err, errlen, SM_ERESOURCE, "out of memory for a shard header");
    /* contents uninitialised, as documented; huge pages for large shards */
    if (!(sh->data = sm_array_data_alloc(pool, (size_t)nbytes, 0))) {
        char why[160];
        free(sh);
        if (sm_array_pool_refused(pool, (size_t)nbytes, why, sizeof why))
            return sm_fail(err, errlen, SM_ERESOURCE,
                           "cannot allocate %lld bytes for a shard: %s (--memory-limit-mb)",
                           (long long)nbytes, why);
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot allocate %lld bytes for a shard",
                       (long long)nbytes);
    }
    if (!(sh->block = sm_array_block_new(pool, sh->data, (size_t)nbytes))) {
        sm_array_data_free(pool, sh->data, (size_t)nbytes);
        free(sh);
        return sm_fail(err, errlen, SM_ERESOURCE, "out of memory for a shard header");
    }
    sh->dtype = t;
    sh->shape = *s;
    sh->nbytes = nbytes;
    sh->refs = 1;
    sh->pool = pool;
    *out = sh;
    return SM_OK;
}

void sm_store_shard_copy_into(const sm_store_shard *src, sm_store_shard *dst)
{
    if (src->nbytes)
        memcpy(dst->data, src->data, (size_t)src->nbytes);
    dst->has_checksum = src->has_checksum;
    dst->checksum = src->checksum;
}

sm_err sm_store_shard_copy(const sm_store_shard *src, sm_store_shard **out, char *err,
                           size_t errlen)
{
    sm_err e = sm_store_shard_create(src->pool, src->dtype, &src->shape, out, err, errlen);
    if (!e)
        sm_store_shard_copy_into(src, *out);
    return e;
}

sm_err sm_store_shard_share(sm_store_shard *src, sm_store_shard **out, char *err, size_t errlen)
{
    sm_store_shard *sh = malloc(sizeof *sh);
    if (!sh)
        return sm_fail(err, errlen, SM_ERESOURCE, "out of memory for a shard header");
    *sh = *src;
    sh->refs = 1;
    sh->block = sm_array_block_get(src->block);
    *out = sh;
    return SM_OK;
}

sm_err sm_store_shard_adopt(sm_array **a, sm_store_shard **out, char *err, size_t errlen)
{
    sm_array *x = *a;
    /* a result that would keep alive more than twice its bytes (a slice
     * sharing a larger value's block) is stored as a copy of its own */
    if (!x->data || (uintptr_t)x->data % SM_STORE_ALIGN ||
        sm_array_held(x) / 2 > (size_t)x->nbytes) {
        sm_err e = sm_store_shard_create(x->pool, x->dtype, &x->shape, out, err, errlen);
        if (e)
            return e;
        if (x->nbytes)
            memcpy((*out)->data, x->data, (size_t)x->nbytes);
    } else {
        sm_store_shard *sh = calloc(1, sizeof *sh);
        if (!sh)
            return sm_fail(err, errlen, SM_ERESOURCE, "out of memory for a shard header");
        sh->dtype = x->dtype;
        sh->shape = x->shape;
        sh->nbytes = x->nbytes;
        sh->pool = x->pool;
        sh->refs = 1;
        if (!x->block && !(x->block = sm_array_block_new(x->pool, x->data, (size_t)x->nbytes))) {
            free(sh);
            return sm_fail(err, errlen, SM_ERESOURCE, "out of memory for a shard header");
        }
        sh->block = sm_array_take(x, &sh->data);
        *out = sh;
    }
    sm_array_free(x);
    *a = NULL;
    return SM_OK;
}

sm_store_shard *sm_store_shard_ref(sm_store_shard *sh)
{
    __atomic_add_fetch(&sh->refs, 1, __ATOMIC_RELAXED);
    return sh;
}

void sm_store_shard_release(sm_store_shard *sh)
{
    if (!sh)
        return;
    if (__atomic_sub_fetch(&sh->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        sm_array_block_put(sh->block);
        free(sh);
    }
}

/* ---- table ------------------------------------------------------------- */

static size_t store_hash(uint64_t array, int32_t device, size_t nbuckets)
{
    uint64_t h =
        array * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uint32_t)device * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    return (size_t)h & (nbuckets - 1);
}

static sm_store_entry **store_find(sm_store *st, uint64_t array, int32_t device)
{
    sm_store_entry **p = &st->buckets[store_hash(array, device, st->nbuckets)];
    while (*p && !((*p)->array == array && (*p)->device == device))
        p = &(*p)->next;
    return p;
}

static int store_slot(const sm_store *st, int32_t device)
{
    for (int k = 0; k < st->ndevices; k++)
        if (st->devices[k] == device)
            return k;
    return -1;
}

/* Grows the table when it is fuller than one entry per bucket; best effort. */
static void store_grow(sm_store *st)
{
    if ((size_t)st->count < st->nbuckets)
        return;
    size_t nb = st->nbuckets * 2;
    sm_store_entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < st->nbuckets; i++) {
        sm_store_entry *e = st->buckets[i];
        while (e) {
            sm_store_entry *next = e->next;
            size_t h = store_hash(e->array, e->device, nb);
            e->next = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = nb;
}

static void store_drop(sm_store *st, sm_store_entry **p)
{
    sm_store_entry *e = *p;
    *p = e->next;
    if (st->obs)
        st->obs->drop(st->obs_user, e->array, e->device);
    st->bytes[e->slot] -= e->shard ? e->shard->nbytes : e->meta.nbytes;
    st->nspilled -= !e->shard;
    st->count--;
    sm_store_shard_release(e->shard);
    free(e);
}

static void store_clear_locked(sm_store *st)
{
    for (size_t i = 0; i < st->nbuckets; i++)
        while (st->buckets[i])
            store_drop(st, &st->buckets[i]);
}

static sm_err store_check_locked(const sm_store *st, int32_t device, char *err, size_t errlen)
{
    if (st->ndevices == 0)
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "this worker has not registered with the coordinator yet, so it owns no "
                       "device (asked for device %d)",
                       (int)device);
    if (store_slot(st, device) < 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "device %d is not on worker %lld (it owns devices %d..%d)", (int)device,
                       (long long)st->worker_id, (int)st->devices[0],
                       (int)st->devices[st->ndevices - 1]);
    return SM_OK;
}

/* ---- the store --------------------------------------------------------- */

sm_err sm_store_create(sm_array_pool *pool, sm_store **out, char *err, size_t errlen)
{
    sm_store *st = calloc(1, sizeof *st);
    if (!st)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating the shard store");
    st->pool = pool;
    st->nbuckets = 64;
    st->buckets = calloc(st->nbuckets, sizeof *st->buckets);
    if (!st->buckets) {
        free(st);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating the shard store");
    }
    st->worker_id = -1;
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->load_mu, NULL);
    *out = st;
    return SM_OK;
}

sm_array_pool *sm_store_pool(sm_store *st)
{
    return st->pool;
}

void sm_store_free(sm_store *st)
{
    if (!st)
        return;
    store_clear_locked(st);
    free(st->buckets);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->load_mu);
    free(st);
}

sm_err sm_store_set_identity(sm_store *st, uint32_t worker_id, int ndevices, const int32_t *devices,
                             char *err, size_t errlen)
{
    return sm_store_renew_identity(st, worker_id, ndevices, devices, 0, err, errlen);
}

sm_err sm_store_renew_identity(sm_store *st, uint32_t worker_id, int ndevices,
                               const int32_t *devices, int keep, char *err, size_t errlen)
{
    if (ndevices < 0 || ndevices > SM_MAX_WORKER_DEVICES)
        return sm_fail(err, errlen, SM_EINVAL, "a worker holds 0..%d devices, not %d",
                       SM_MAX_WORKER_DEVICES, ndevices);
    for (int i = 0; i < ndevices; i++)
        for (int j = 0; j < i; j++)
            if (devices[i] == devices[j])
                return sm_fail(err, errlen, SM_EINVAL, "device %d is listed twice",
                               (int)devices[i]);
    pthread_mutex_lock(&st->mu);
    int same = keep && ndevices > 0 && st->worker_id == (int64_t)worker_id &&
               st->ndevices == ndevices &&
               !memcmp(st->devices, devices, sizeof *devices * (size_t)ndevices);
    st->epoch++;
    if (same) {
        pthread_mutex_unlock(&st->mu);
        return SM_OK;
    }
    store_clear_locked(st);
    st->worker_id = ndevices ? (int64_t)worker_id : -1;
    st->ndevices = ndevices;
    for (int i = 0; i < ndevices; i++) {
        st->devices[i] = devices[i];
        st->bytes[i] = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return SM_OK;
}

uint64_t sm_store_epoch(sm_store *st)
{
    pthread_mutex_lock(&st->mu);
    uint64_t e = st->epoch;
    pthread_mutex_unlock(&st->mu);
    return e;
}

int64_t sm_store_worker_id(sm_store *st)
{
    pthread_mutex_lock(&st->mu);
    int64_t w = st->worker_id;
    pthread_mutex_unlock(&st->mu);
    return w;
}

sm_err sm_store_check_device(sm_store *st, int32_t device, char *err, size_t errlen)
{
    pthread_mutex_lock(&st->mu);
    sm_err e = store_check_locked(st, device, err, errlen);
    pthread_mutex_unlock(&st->mu);
    return e;
}

sm_err sm_store_put(sm_store *st, uint64_t epoch, sm_array_id array, int n, const int32_t *devices,
                    sm_store_shard *const *shards, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    sm_store_entry **fresh = calloc(n > 0 ? (size_t)n : 1, sizeof *fresh);
    if (!fresh)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory storing array %llu",
                       (unsigned long long)array.v);
    for (int k = 0; k < n; k++)
        if (!(fresh[k] = calloc(1, sizeof **fresh))) {
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory storing array %llu",
                        (unsigned long long)array.v);
            goto fail;
        }
    pthread_mutex_lock(&st->mu);
    if (epoch != st->epoch) {
        e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                    "the worker registered again while array %llu was being stored; send it again",
                    (unsigned long long)array.v);
        goto unlock;
    }
    for (int k = 0; k < n; k++) {
        if ((e = store_check_locked(st, devices[k], err, errlen)))
            goto unlock;
        for (int j = 0; j < k; j++)
            if (devices[j] == devices[k]) {
                e = sm_fail(err, errlen, SM_EINVAL, "device %d is listed twice", (int)devices[k]);
                goto unlock;
            }
    }
    for (int k = 0; k < n; k++) {
        sm_store_entry **p = store_find(st, array.v, devices[k]);
        if (*p)
            store_drop(st, p);
        sm_store_entry *en = fresh[k];
        fresh[k] = NULL;
        en->array = array.v;
        en->device = devices[k];
        en->slot = store_slot(st, devices[k]);
        en->shard = shards[k];
        en->used = ++st->tick;
        en->next = *p;
        *p = en;
        st->bytes[en->slot] += shards[k]->nbytes;
        st->count++;
        if (st->obs)
            st->obs->put(st->obs_user, en->array, en->device, en->shard);
    }
    store_grow(st);
unlock:
    pthread_mutex_unlock(&st->mu);
fail:
    for (int k = 0; k < n; k++)
        free(fresh[k]);
    free(fresh);
    return e;
}

/* Under st->mu: a reference to the shard of (array, device) in *out, or
 * *out NULL with *spilled = 1 (and its metadata in *meta) when it is on
 * disk only; SM_ENOTFOUND when there is none. */
static sm_err store_get_locked(sm_store *st, uint64_t array, int32_t device, sm_store_shard **out,
                               int *spilled, sm_store_shard *meta, char *err, size_t errlen)
{
    sm_err e = store_check_locked(st, device, err, errlen);
    *out = NULL;
    *spilled = 0;
    if (e)
        return e;
    sm_store_entry *en = *store_find(st, array, device);
    if (!en)
        return sm_fail(err, errlen, SM_ENOTFOUND,
                       "worker %lld holds no shard of array %llu on device %d",
                       (long long)st->worker_id, (unsigned long long)array, (int)device);
    en->used = ++st->tick;
    if (en->shard)
        *out = sm_store_shard_ref(en->shard);
    else {
        *spilled = 1;
        *meta = en->meta;
    }
    return SM_OK;
}

/* Reads a spilled shard back (one read-back at a time) and puts it in its
 * entry again, unless another thread did meanwhile or it was dropped. */
static sm_err store_load(sm_store *st, sm_array_id array, int32_t device, sm_store_shard **out,
                         char *err, size_t errlen)
{
    sm_store_shard meta, *sh = NULL;
    int spilled;
    pthread_mutex_lock(&st->load_mu);
    pthread_mutex_lock(&st->mu);
    sm_err e = store_get_locked(st, array.v, device, out, &spilled, &meta, err, errlen);
    pthread_mutex_unlock(&st->mu);
    if (e || !spilled)
        goto out;
    if ((e = sm_store_shard_alloc(st, meta.dtype, &meta.shape, &sh, err, errlen)))
        goto out;
    if ((e = st->sp->load(st->sp_user, array.v, device, sh, err, errlen)))
        goto out;
    sh->has_checksum = meta.has_checksum;
    sh->checksum = meta.checksum;
    pthread_mutex_lock(&st->mu);
    sm_store_entry *en = *store_find(st, array.v, device);
    if (en && !en->shard) {
        en->shard = sh;
        st->nspilled--;
        sh = NULL;
    }
    e = store_get_locked(st, array.v, device, out, &spilled, &meta, err, errlen);
    pthread_mutex_unlock(&st->mu);
out:
    sm_store_shard_release(sh);
    pthread_mutex_unlock(&st->load_mu);
    return e;
}

sm_err sm_store_get(sm_store *st, sm_array_id array, int32_t device, sm_store_shard **out,
                    char *err, size_t errlen)
{
    sm_store_shard meta;
    int spilled;
    pthread_mutex_lock(&st->mu);
    sm_err e = store_get_locked(st, array.v, device, out, &spilled, &meta, err, errlen);
    int can_load = st->sp != NULL;
    pthread_mutex_unlock(&st->mu);
    if (!e && spilled && !can_load)
        e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                    "the shard of array %llu on device %d was spilled to disk, which this worker "
                    "no longer reads",
                    (unsigned long long)array.v, (int)device);
    else if (!e && spilled)
        e = store_load(st, array, device, out, err, errlen);
    return e;
}

sm_err sm_store_free_array(sm_store *st, sm_array_id array, int n, const int32_t *devices,
                           int *freed, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    int count = 0;
    pthread_mutex_lock(&st->mu);
    for (int k = 0; k < n; k++)
        if ((e = store_check_locked(st, devices[k], err, errlen)))
            goto unlock;
    int m = n ? n : st->ndevices;
    for (int k = 0; k < m; k++) {
        sm_store_entry **p = store_find(st, array.v, n ? devices[k] : st->devices[k]);
        if (*p) {
            store_drop(st, p);
            count++;
        }
    }
unlock:
    pthread_mutex_unlock(&st->mu);
    if (freed)
        *freed = count;
    return e;
}

int sm_store_stats(sm_store *st, int32_t *devices, int64_t *bytes, int64_t *shards)
{
    pthread_mutex_lock(&st->mu);
    int n = st->ndevices;
    for (int k = 0; k < n; k++) {
        if (devices)
            devices[k] = st->devices[k];
        if (bytes)
            bytes[k] = st->bytes[k];
    }
    if (shards)
        *shards = st->count;
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* ---- spilling ------------------------------------------------------------ */

void sm_store_spill_to(sm_store *st, const sm_store_spiller *sp, void *user)
{
    pthread_mutex_lock(&st->mu);
    st->sp = sp;
    st->sp_user = user;
    pthread_mutex_unlock(&st->mu);
}

/* Candidates for spilling, grouped by the block their bytes lie in:
 * shards of one block (devices holding the same bytes) free memory only
 * when all of them go, and only if nothing else holds the block. */
typedef struct {
    sm_store_entry *en;
    const sm_array_block *block;
    uint64_t used;  /* the entry's last use; in a group's row, the group's latest */
    int first, end; /* a group's row: its entries are v[first..end) */
} store_spill_cand;

static int store_block_cmp(const void *a, const void *b)
{
    const store_spill_cand *x = a, *y = b;
    return x->block < y->block ? -1 : x->block > y->block;
}

static int store_lru_cmp(const void *a, const void *b)
{
    const store_spill_cand *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

int64_t sm_store_reclaim(sm_store *st, int64_t want)
{
    int64_t freed = 0;
    pthread_mutex_lock(&st->mu);
    const sm_store_spiller *sp = st->sp;
    void *user = st->sp_user;
    pthread_mutex_unlock(&st->mu);
    if (!sp)
        return 0;
    sp->flush(user); /* the copies queued so far hold references: write them */
    pthread_mutex_lock(&st->mu);
    store_spill_cand *v = st->count ? malloc(sizeof *v * (size_t)st->count) : NULL;
    int n = 0, ng = 0;
    for (size_t i = 0; v && i < st->nbuckets; i++)
        for (sm_store_entry *en = st->buckets[i]; en && n < st->count; en = en->next)
            /* only the store holds it (nobody reads its data now), and its
             * disk copy is complete */
            if (en->shard && en->shard->nbytes > 0 &&
                __atomic_load_n(&en->shard->refs, __ATOMIC_ACQUIRE) == 1 &&
                sp->saved(user, en->array, en->device))
                v[n++] = (store_spill_cand){en, en->shard->block, en->used, 0, 0};
    /* a row per group of entries sharing a block, where they are all of
     * the block's holders: spilling the group frees the block */
    if (n)
        qsort(v, (size_t)n, sizeof *v, store_block_cmp);
    store_spill_cand *g = n ? malloc(sizeof *g * (size_t)n) : NULL;
    for (int a = 0, b; g && a < n; a = b) {
        uint64_t used = v[a].used;
        for (b = a + 1; v[a].block && b < n && v[b].block == v[a].block; b++)
            used = v[b].used > used ? v[b].used : used;
        if (v[a].block && sm_array_block_refs(v[a].block) != b - a)
            continue; /* a job's value or a reader holds the bytes too */
        g[ng++] = (store_spill_cand){NULL, v[a].block, used, a, b};
    }
    if (ng)
        qsort(g, (size_t)ng, sizeof *g, store_lru_cmp);
    for (int k = 0; k < ng && freed < want; k++) {
        const store_spill_cand *grp = &g[k];
        freed +=
            grp->block ? (int64_t)sm_array_block_len(grp->block) : v[grp->first].en->shard->nbytes;
        for (int b = grp->first; b < grp->end; b++) {
            sm_store_entry *en = v[b].en;
            en->meta = *en->shard;
            en->meta.data = NULL;
            en->meta.refs = 0;
            en->meta.block = NULL;
            sm_store_shard_release(en->shard);
            en->shard = NULL;
            st->nspilled++;
        }
    }
    pthread_mutex_unlock(&st->mu);
    free(g);
    free(v);
    return freed;
}

sm_err sm_store_shard_alloc(sm_store *st, sm_dtype t, const sm_shape *s, sm_store_shard **out,
                            char *err, size_t errlen)
{
    sm_err e = sm_store_shard_create(st->pool, t, s, out, err, errlen);
    int64_t nbytes = 0;
    if (e != SM_ERESOURCE || sm_shape_nbytes(s, t, &nbytes, NULL, 0))
        return e;
    /* refused by the memory limit (or the allocator): make room and try once more */
    if (sm_store_reclaim(st, nbytes) <= 0)
        return e;
    return sm_store_shard_create(st->pool, t, s, out, err, errlen);
}

int sm_store_spilled(sm_store *st, sm_svc_held_shard **out, int max)
{
    int n = 0;
    *out = NULL;
    pthread_mutex_lock(&st->mu);
    int64_t want = st->nspilled < max ? st->nspilled : max;
    if (want > 0 && (*out = calloc((size_t)want, sizeof **out)))
        for (size_t i = 0; i < st->nbuckets; i++)
            for (const sm_store_entry *en = st->buckets[i]; en && n < want; en = en->next)
                if (!en->shard)
                    (*out)[n++] = (sm_svc_held_shard){
                        en->array, en->device, en->meta.has_checksum ? en->meta.checksum : 0};
    pthread_mutex_unlock(&st->mu);
    return n;
}

sm_err sm_store_held(sm_store *st, sm_svc_held_shard **out, int *n, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&st->mu);
    if (st->count > 0 && !(*out = calloc((size_t)st->count, sizeof **out))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory listing %lld shards",
                    (long long)st->count);
        goto out;
    }
    for (size_t i = 0; i < st->nbuckets; i++)
        for (const sm_store_entry *en = st->buckets[i]; en && *n < st->count; en = en->next) {
            const sm_store_shard *m = en->shard ? en->shard : &en->meta;
            (*out)[(*n)++] =
                (sm_svc_held_shard){en->array, en->device, m->has_checksum ? m->checksum : 0};
        }
out:
    pthread_mutex_unlock(&st->mu);
    return e;
}

void sm_store_observe(sm_store *st, const sm_store_observer *obs, void *user)
{
    pthread_mutex_lock(&st->mu);
    st->obs = obs;
    st->obs_user = user;
    pthread_mutex_unlock(&st->mu);
}
