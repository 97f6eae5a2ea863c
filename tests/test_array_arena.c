/* Check suite for array memory in shared memory: an sm_shm_arena (blocks of
 * one /dev/shm file), views of it from elsewhere (sm_shm_views), and an
 * array pool whose large blocks come from an arena. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sm_array.h"
#include "sm_array_arena.h"
#include "sm_shm.h"
#include "suite_main.h"

#define MIB ((size_t)1 << 20)

/* 1 if the arena's file has a name in /dev/shm. */
static int named(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return stat(path, &st) == 0;
}

/* Bytes of p[0, n) that are not zero. */
static size_t nonzero(const char *p, size_t n)
{
    size_t bad = 0;
    for (size_t k = 0; k < n; k++)
        bad += p[k] != 0;
    return bad;
}

/* Blocks are ranges of the span: zero-filled, where sm_shm_arena_holds
 * says; a released range is reused first fit, merged with its
 * neighbours; past the span there is no block. */
START_TEST(test_arena_blocks)
{
    char err[256], name[SM_SHM_NAME_MAX];
    sm_shm_arena *a = NULL;
    ck_assert_msg(sm_shm_arena_create(16 * MIB, &a, err, sizeof err) == SM_OK, "%s", err);
    snprintf(name, sizeof name, "%s", sm_shm_arena_name(a));
    ck_assert(sm_shm_name_valid(name));
    ck_assert(named(name));
    ck_assert_uint_eq(sm_shm_arena_span(a), 16 * MIB);
    char *b[4];
    uint64_t off;
    for (int i = 0; i < 4; i++) {
        b[i] = sm_shm_arena_take(a, 4 * MIB);
        ck_assert_ptr_nonnull(b[i]);
        ck_assert(sm_shm_arena_holds(a, b[i], 4 * MIB, &off));
        ck_assert_uint_eq(off, (uint64_t)i * 4 * MIB);
        for (size_t k = 0; k < 4 * MIB; k += 4096)
            ck_assert_int_eq(b[i][k], 0);
        memset(b[i], 0x40 + i, 4 * MIB);
    }
    ck_assert_uint_eq(sm_shm_arena_used(a), 16 * MIB);
    ck_assert_uint_eq(sm_shm_arena_used(NULL), 0);
    ck_assert_ptr_null(sm_shm_arena_take(a, 4096)); /* the span is full */
    /* a reserve larger than /dev/shm: no block leaves it free */
    sm_shm_arena_release(a, b[3], 4 * MIB);
    sm_shm_arena_reserve_set(a, SIZE_MAX / 2);
    ck_assert_ptr_null(sm_shm_arena_take(a, 4 * MIB));
    sm_shm_arena_reserve_set(a, 0);
    b[3] = sm_shm_arena_take(a, 4 * MIB);
    ck_assert_ptr_nonnull(b[3]);
    memset(b[3], 0x43, 4 * MIB);
    ck_assert(!sm_shm_arena_holds(a, b[3], 4 * MIB + 1, &off)); /* runs past its end */
    int local;
    ck_assert(!sm_shm_arena_holds(a, &local, sizeof local, &off));
    ck_assert(!sm_shm_arena_holds(NULL, b[0], 1, &off));
    /* two neighbours released make one range: an 8 MiB block fits there */
    sm_shm_arena_release(a, b[1], 4 * MIB);
    sm_shm_arena_release(a, b[2], 4 * MIB);
    char *c = sm_shm_arena_take(a, 8 * MIB);
    ck_assert_ptr_eq(c, b[1]);
    for (size_t k = 0; k < 8 * MIB; k += 4096) /* the pages were given back: zeros again */
        ck_assert_int_eq(c[k], 0);
    ck_assert_int_eq(b[0][4 * MIB - 1], 0x40);
    ck_assert_int_eq(b[3][0], 0x43);
    /* the last range released goes back under the top: the span is whole again */
    sm_shm_arena_release(a, b[3], 4 * MIB);
    sm_shm_arena_release(a, c, 8 * MIB);
    sm_shm_arena_release(a, b[0], 4 * MIB);
    ck_assert_uint_eq(sm_shm_arena_used(a), 0);
    char *all = sm_shm_arena_take(a, 16 * MIB);
    ck_assert_ptr_eq(all, b[0]);
    sm_shm_arena_release(a, all, 16 * MIB);
    sm_shm_arena_free(a);
    ck_assert(!named(name));
}
END_TEST

/* A new arena of 8 MiB (its name into name) and views to map it with. */
static sm_shm_arena *arena_viewed(sm_shm_views **v, char *name)
{
    char err[256];
    sm_shm_arena *a = NULL;
    ck_assert_msg(sm_shm_arena_create(8 * MIB, &a, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_shm_views_create(v, err, sizeof err), SM_OK);
    snprintf(name, SM_SHM_NAME_MAX, "%s", sm_shm_arena_name(a));
    return a;
}

/* Another mapping of the arena (a view, as a peer process maps it) reads
 * the blocks where they lie; views are shared while named the same, and a
 * view of an arena that is gone is dropped once unused. */
START_TEST(test_arena_views)
{
    char err[256], name[SM_SHM_NAME_MAX];
    sm_shm_views *v = NULL;
    sm_shm_arena *a = arena_viewed(&v, name);
    char *b = sm_shm_arena_take(a, 2 * MIB), *d = sm_shm_arena_take(a, 2 * MIB);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(d);
    for (size_t k = 0; k < 2 * MIB; k++)
        d[k] = (char)(k * 7 + 1);
    uint64_t off;
    ck_assert(sm_shm_arena_holds(a, d, 2 * MIB, &off));
    const char *base = NULL, *again = NULL;
    ck_assert_msg(sm_shm_view_get(v, name, 8 * MIB, &base, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_ptr_ne(base, (const char *)b); /* a mapping of its own */
    ck_assert(!memcmp(base + off, d, 2 * MIB));
    d[5] = 99; /* one file: later writes show */
    ck_assert_int_eq(base[off + 5], 99);
    ck_assert_int_eq(sm_shm_view_get(v, name, 8 * MIB, &again, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(again, base);
    sm_shm_view_put(v, again);
    /* names that are not an arena's */
    ck_assert_int_eq(sm_shm_view_get(v, "/etc/passwd", 8 * MIB, &again, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(sm_shm_view_get(v, "/shmap-0123-fff", 8 * MIB, &again, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_int_eq(sm_shm_view_get(v, name, 16 * MIB, &again, err, sizeof err), SM_EDATALOSS);
    /* the arena's name goes (its process ended): in use, the view stays;
     * unused, pruning drops it */
    sm_shm_arena_unlink(a);
    sm_shm_views_prune(v);
    ck_assert_int_eq(base[off + 5], 99);
    sm_shm_view_put(v, base);
    sm_shm_views_prune(v);
    ck_assert_int_eq(sm_shm_view_get(v, name, 8 * MIB, &again, err, sizeof err), SM_ENOTFOUND);
    sm_shm_views_free(v);
    sm_shm_arena_release(a, b, 2 * MIB);
    sm_shm_arena_release(a, d, 2 * MIB);
    sm_shm_arena_free(a);
}
END_TEST

typedef struct {
    const char *p;
    size_t n;
    uint64_t sum;
} read_arg;

static sm_err read_all(void *arg)
{
    read_arg *r = arg;
    for (size_t k = 0; k < r->n; k += 4096)
        r->sum += (unsigned char)r->p[k];
    return SM_OK;
}

/* An arena truncated under a view (another process of the same user):
 * a read of the lost pages inside sm_shm_guarded, as collectives read,
 * ends SM_EDATALOSS instead of faulting. */
START_TEST(test_arena_view_truncated)
{
    char err[256], name[SM_SHM_NAME_MAX];
    sm_shm_views *v = NULL;
    sm_shm_arena *a = arena_viewed(&v, name);
    char *b = sm_shm_arena_take(a, 4 * MIB);
    ck_assert_ptr_nonnull(b);
    memset(b, 1, 4 * MIB);
    const char *base = NULL;
    ck_assert_int_eq(sm_shm_view_get(v, name, 8 * MIB, &base, err, sizeof err), SM_OK);
    read_arg r = {base, 4 * MIB, 0};
    int faulted = 0;
    ck_assert_int_eq(sm_shm_guarded(read_all, &r, &faulted), SM_OK);
    ck_assert_int_eq(faulted, 0);
    ck_assert_uint_eq(r.sum, 4 * MIB / 4096);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    ck_assert_int_eq(truncate(path, 0), 0);
    r.sum = 0;
    ck_assert_int_eq(sm_shm_guarded(read_all, &r, &faulted), SM_EDATALOSS);
    ck_assert_int_eq(faulted, 1);
    sm_shm_view_put(v, base);
    sm_shm_views_free(v);
    sm_shm_arena_free(a); /* its block went with the truncation */
}
END_TEST

/* A pool with an arena: blocks of 1 MiB and more come from it, smaller
 * ones and those it has no room for from private memory; kept blocks stay
 * in it; the pool's owner giving it up unlinks the arena's name, and a
 * block still in use stays valid. */
START_TEST(test_pool_arena)
{
    char err[256], name[SM_SHM_NAME_MAX];
    sm_array_pool *pool = NULL;
    sm_shm_arena *a = NULL;
    ck_assert_int_eq(sm_array_pool_create(&pool, err, sizeof err), SM_OK);
    ck_assert_ptr_null(sm_array_pool_arena(pool));
    ck_assert_msg(sm_shm_arena_create(8 * MIB, &a, err, sizeof err) == SM_OK, "%s", err);
    sm_array_pool_arena_set(pool, a);
    ck_assert_ptr_eq(sm_array_pool_arena(pool), a);
    snprintf(name, sizeof name, "%s", sm_shm_arena_name(a));
    sm_array_pool_cache_set(pool, 64 * MIB, 60000);
    uint64_t off;
    char *big = sm_array_data_alloc(pool, 3 * MIB, 1);
    ck_assert_ptr_nonnull(big);
    ck_assert(sm_shm_arena_holds(a, big, 3 * MIB, &off));
    for (size_t k = 0; k < 3 * MIB; k += 4096)
        ck_assert_int_eq(big[k], 0);
    memset(big, 1, 3 * MIB);
    char *small = sm_array_data_alloc(pool, 4096, 1);
    ck_assert(!sm_shm_arena_holds(a, small, 4096, &off));
    /* the arena holds 8 MiB: a 6 MiB block no longer fits, private memory */
    char *out = sm_array_data_alloc(pool, 6 * MIB, 1);
    ck_assert_ptr_nonnull(out);
    ck_assert(!sm_shm_arena_holds(a, out, 6 * MIB, &off));
    memset(out, 2, 6 * MIB);
    sm_array_data_free(pool, out, 6 * MIB);
    /* freed and kept, then given again, zeroed, from the same place */
    sm_array_data_free(pool, big, 3 * MIB);
    char *again = sm_array_data_alloc(pool, 3 * MIB, 1);
    ck_assert_ptr_eq(again, big);
    ck_assert_uint_eq(nonzero(again, 3 * MIB), 0);
    memset(again, 3, 3 * MIB);
    ck_assert(named(name));
    sm_array_pool_free(pool);
    ck_assert(!named(name));
    ck_assert_int_eq(again[3 * MIB - 1], 3);
    sm_array_data_free(pool, again, 3 * MIB);
    sm_array_data_free(pool, small, 4096); /* the last block: the pool and its arena go */
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(suite_create("array_arena"), "arena", 30, NULL,
                                 {test_arena_blocks}, {test_arena_views},
                                 {test_arena_view_truncated}, {test_pool_arena}));
}
