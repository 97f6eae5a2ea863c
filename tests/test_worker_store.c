/* Check suite for worker/store: shards (created, copied, adopted from an
 * array), put/get/free, bytes accounting, replace-on-complete, identity
 * epochs and a 4-thread concurrency smoke. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sm_array_share.h"
#include "store.h"
#include "suite_main.h"

static const int32_t devs[4] = {4, 5, 6, 7};

static sm_store *store_new(void)
{
    sm_store *st = NULL;
    char err[256];
    ck_assert_int_eq(sm_store_create(NULL, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_store_set_identity(st, 1, 4, devs, err, sizeof err), SM_OK);
    return st;
}

static sm_store_shard *shard_new(sm_dtype t, int64_t d0, int64_t d1, unsigned char fill)
{
    sm_store_shard *sh = NULL;
    sm_shape s = {.rank = 2, .dims = {d0, d1}};
    char err[256];
    ck_assert_int_eq(sm_store_shard_create(NULL, t, &s, &sh, err, sizeof err), SM_OK);
    memset(sh->data, fill, (size_t)sh->nbytes);
    return sh;
}

static sm_err put1(sm_store *st, uint64_t array, int32_t dev, sm_store_shard *sh)
{
    char err[256];
    return sm_store_put(st, sm_store_epoch(st), (sm_array_id){array}, 1, &dev, &sh, err,
                        sizeof err);
}

START_TEST(test_shard_create)
{
    static const struct {
        sm_dtype t;
        int rank;
        int64_t d0, d1;
        sm_err want;
        int64_t nbytes;
    } cases[] = {
        {SM_F32, 2, 3, 5, SM_OK, 60},
        {SM_F64, 1, 7, 0, SM_OK, 56},
        {SM_U8, 0, 0, 0, SM_OK, 1},
        {SM_I64, 2, 0, 9, SM_OK, 0},
        {SM_F32, 2, -1, 2, SM_EINVAL, 0},
        {(sm_dtype)99, 1, 4, 0, SM_EINVAL, 0},
        {SM_F64, 2, INT64_MAX / 2, 4, SM_EOVERFLOW, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        sm_shape s = {.rank = cases[k].rank, .dims = {cases[k].d0, cases[k].d1}};
        sm_store_shard *sh = NULL;
        char err[256] = "";
        sm_err e = sm_store_shard_create(NULL, cases[k].t, &s, &sh, err, sizeof err);
        ck_assert_msg(e == cases[k].want, "case %zu: got %s (%s)", k, sm_err_name(e), err);
        if (e)
            continue;
        ck_assert_int_eq(sh->nbytes, cases[k].nbytes);
        ck_assert_ptr_nonnull(sh->data);
        ck_assert_uint_eq((uintptr_t)sh->data % SM_STORE_ALIGN, 0);
        sm_store_shard *c = NULL;
        ck_assert_int_eq(sm_store_shard_copy(sh, &c, err, sizeof err), SM_OK);
        ck_assert_int_eq(c->nbytes, sh->nbytes);
        ck_assert(sm_shape_equal(&c->shape, &sh->shape));
        sm_store_shard_release(sh);
        sm_store_shard_release(c);
    }
}
END_TEST

/* A job's result becomes a shard without a copy: the shard holds the
 * array's own buffer (an empty array gets a buffer of its own), the array
 * is consumed, and the bytes are intact. */
START_TEST(test_shard_adopt)
{
    static const struct {
        sm_dtype t;
        int rank;
        int64_t d0, d1;
    } cases[] = {{SM_F32, 2, 64, 33}, {SM_U8, 1, 5, 0}, {SM_F64, 0, 0, 0}, {SM_I32, 2, 0, 7}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        sm_shape s = {.rank = cases[k].rank, .dims = {cases[k].d0, cases[k].d1}};
        sm_array *a = NULL;
        sm_store_shard *sh = NULL;
        char err[256] = "";
        ck_assert_int_eq(sm_array_create(cases[k].t, &s, &a, err, sizeof err), SM_OK);
        if (a->nbytes)
            memset(a->data, 0x3c, (size_t)a->nbytes);
        void *data = a->data;
        int64_t nbytes = a->nbytes;
        ck_assert_msg(sm_store_shard_adopt(&a, &sh, err, sizeof err) == SM_OK, "case %zu: %s", k,
                      err);
        ck_assert_ptr_null(a);
        ck_assert_int_eq(sh->dtype, cases[k].t);
        ck_assert(sm_shape_equal(&sh->shape, &s));
        ck_assert_int_eq(sh->nbytes, nbytes);
        ck_assert_ptr_nonnull(sh->data);
        ck_assert_uint_eq((uintptr_t)sh->data % SM_STORE_ALIGN, 0);
        ck_assert_int_eq(sh->has_checksum, 0);
        if (nbytes) {
            ck_assert_ptr_eq(sh->data, data);
            for (int64_t i = 0; i < nbytes; i++)
                ck_assert_uint_eq(((unsigned char *)sh->data)[i], 0x3c);
        }
        sm_store_shard_release(sh);
    }
}
END_TEST

/* A result sharing its bytes with other arrays (sm_array_alias) is adopted
 * with its share of the block, which outlives the other holders; a slice
 * holding a quarter of a larger value's block is stored as a copy of its
 * own (the store keeps at most twice a shard's bytes). A shard's view may
 * be aliased and the alias outlive the shard. */
START_TEST(test_shard_adopt_shared)
{
    sm_shape s = {.rank = 2, .dims = {64, 16}}, q = {.rank = 2, .dims = {16, 16}};
    sm_array *a, *b, *c;
    sm_store_shard *sh, *sq;
    char err[256];
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &a, err, sizeof err), SM_OK);
    for (int k = 0; k < 64 * 16; k++)
        ((float *)a->data)[k] = (float)k;
    ck_assert_int_eq(sm_array_create_uninit(SM_F32, &s, &b, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_array_create_uninit(SM_F32, &q, &c, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_array_alias(b, a, 0), 1);
    ck_assert_int_eq(sm_array_alias(c, a, 16 * 16 * 4), 1); /* rows 16..32 */
    ck_assert_int_eq(sm_array_alias(c, a, 4), 0);           /* not on a 64-byte boundary */
    ck_assert_int_eq(sm_array_alias(c, a, 60 * 16 * 4), 0); /* past the end */
    ck_assert_uint_eq(sm_array_held(c), 64 * 16 * 4);
    const void *bytes = a->data;
    sm_array_free(a);
    ck_assert_int_eq(sm_store_shard_adopt(&b, &sh, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(sh->data, bytes); /* shared: no copy */
    ck_assert_int_eq(sm_store_shard_adopt(&c, &sq, err, sizeof err), SM_OK);
    ck_assert_ptr_ne(sq->data, (const char *)bytes + 1024); /* a quarter: a copy */
    for (int k = 0; k < 16 * 16; k++)
        ck_assert(((float *)sq->data)[k] == (float)(256 + k));
    /* a view of the shard, as a job's input, aliased past the shard */
    sm_array view = {
        .dtype = SM_F32, .shape = s, .nbytes = sh->nbytes, .data = sh->data, .block = sh->block};
    sm_array *r;
    ck_assert_int_eq(sm_array_create_uninit(SM_F32, &s, &r, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_array_alias(r, &view, 0), 1);
    sm_store_shard_release(sh);
    sm_store_shard_release(sq);
    for (int k = 0; k < 64 * 16; k++)
        ck_assert(((float *)r->data)[k] == (float)k);
    sm_array_free(r);
}
END_TEST

START_TEST(test_unregistered)
{
    sm_store *st = NULL;
    char err[256];
    ck_assert_int_eq(sm_store_create(NULL, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_store_worker_id(st), -1);
    ck_assert_int_eq(sm_store_check_device(st, 0, err, sizeof err), SM_EUNAVAILABLE);
    sm_store_shard *sh = shard_new(SM_F32, 2, 2, 0);
    ck_assert_int_eq(put1(st, 1, 0, sh), SM_EUNAVAILABLE);
    sm_store_shard_release(sh);
    ck_assert_int_eq(sm_store_stats(st, NULL, NULL, NULL), 0);
    sm_store_free(st);
}
END_TEST

START_TEST(test_put_get_free)
{
    sm_store *st = store_new();
    char err[256];
    sm_store_shard *got = NULL;
    sm_store_shard *a = shard_new(SM_F32, 4, 8, 1);
    ck_assert_int_eq(put1(st, 17, 4, a), SM_OK);
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){17}, 4, &got, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(got, a);
    sm_store_shard_release(got);

    /* errors, with their sentences */
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){17}, 5, &got, err, sizeof err), SM_ENOTFOUND);
    ck_assert_str_eq(err, "worker 1 holds no shard of array 17 on device 5");
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){18}, 4, &got, err, sizeof err), SM_ENOTFOUND);
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){17}, 9, &got, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 9"));

    /* put on several devices at once; a bad device or a duplicate stores nothing */
    sm_store_shard *b[3] = {shard_new(SM_U8, 1, 10, 2), shard_new(SM_U8, 1, 10, 2),
                            shard_new(SM_U8, 1, 10, 2)};
    int32_t bad[3] = {5, 6, 42};
    int32_t dup[3] = {5, 6, 5};
    int32_t ok[3] = {5, 6, 7};
    uint64_t ep = sm_store_epoch(st);
    ck_assert_int_eq(sm_store_put(st, ep, (sm_array_id){20}, 3, bad, b, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 42"));
    ck_assert_int_eq(sm_store_put(st, ep, (sm_array_id){20}, 3, dup, b, err, sizeof err),
                     SM_EINVAL);
    int64_t shards = -1;
    sm_store_stats(st, NULL, NULL, &shards);
    ck_assert_int_eq(shards, 1);
    ck_assert_int_eq(sm_store_put(st, ep, (sm_array_id){20}, 3, ok, b, err, sizeof err), SM_OK);
    sm_store_stats(st, NULL, NULL, &shards);
    ck_assert_int_eq(shards, 4);

    /* free listed devices, all devices, unknown arrays, non-local devices */
    int freed = -1;
    int32_t six = 6, nine = 9;
    ck_assert_int_eq(sm_store_free_array(st, (sm_array_id){20}, 1, &six, &freed, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(freed, 1);
    ck_assert_int_eq(sm_store_free_array(st, (sm_array_id){20}, 1, &nine, &freed, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(sm_store_free_array(st, (sm_array_id){20}, 0, NULL, &freed, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(freed, 2);
    ck_assert_int_eq(sm_store_free_array(st, (sm_array_id){99}, 0, NULL, &freed, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(freed, 0);
    sm_store_stats(st, NULL, NULL, &shards);
    ck_assert_int_eq(shards, 1);
    sm_store_free(st);
}
END_TEST

START_TEST(test_bytes_and_replace)
{
    sm_store *st = store_new();
    char err[256];
    int32_t d[SM_MAX_WORKER_DEVICES];
    int64_t bytes[SM_MAX_WORKER_DEVICES];
    ck_assert_int_eq(put1(st, 1, 4, shard_new(SM_F32, 10, 10, 1)), SM_OK);
    ck_assert_int_eq(put1(st, 2, 4, shard_new(SM_F64, 10, 10, 1)), SM_OK);
    ck_assert_int_eq(put1(st, 1, 7, shard_new(SM_U8, 3, 3, 1)), SM_OK);
    ck_assert_int_eq(sm_store_stats(st, d, bytes, NULL), 4);
    ck_assert_int_eq(d[0], 4);
    ck_assert_int_eq(d[3], 7);
    ck_assert_int_eq(bytes[0], 400 + 800);
    ck_assert_int_eq(bytes[1], 0);
    ck_assert_int_eq(bytes[3], 9);

    /* a reader keeps the old bytes while a complete replacement goes in */
    sm_store_shard *old = NULL, *now = NULL;
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){1}, 4, &old, err, sizeof err), SM_OK);
    ck_assert_int_eq(put1(st, 1, 4, shard_new(SM_F32, 2, 2, 9)), SM_OK);
    ck_assert_int_eq(((unsigned char *)old->data)[399], 1);
    ck_assert_int_eq(sm_store_get(st, (sm_array_id){1}, 4, &now, err, sizeof err), SM_OK);
    ck_assert_int_eq(now->nbytes, 16);
    ck_assert_int_eq(((unsigned char *)now->data)[0], 9);
    sm_store_shard_release(old);
    sm_store_shard_release(now);
    sm_store_stats(st, NULL, bytes, NULL);
    ck_assert_int_eq(bytes[0], 16 + 800);

    /* a put started before a new identity is refused; the new identity frees all */
    uint64_t ep = sm_store_epoch(st);
    ck_assert_int_eq(sm_store_set_identity(st, 2, 4, devs, err, sizeof err), SM_OK);
    ck_assert_int_gt(sm_store_epoch(st), ep);
    int64_t shards = -1;
    sm_store_stats(st, NULL, bytes, &shards);
    ck_assert_int_eq(shards, 0);
    ck_assert_int_eq(bytes[0], 0);
    sm_store_shard *late = shard_new(SM_F32, 1, 1, 0);
    int32_t four = 4;
    ck_assert_int_eq(sm_store_put(st, ep, (sm_array_id){3}, 1, &four, &late, err, sizeof err),
                     SM_EUNAVAILABLE);
    sm_store_shard_release(late);
    ck_assert_int_eq(sm_store_worker_id(st), 2);
    sm_store_free(st);
}
END_TEST

START_TEST(test_many_arrays)
{
    sm_store *st = store_new();
    char err[256];
    for (uint64_t a = 1; a <= 3000; a++)
        ck_assert_int_eq(put1(st, a, devs[a % 4], shard_new(SM_U8, 1, (int64_t)a % 7, 0)), SM_OK);
    int64_t shards = 0, bytes[SM_MAX_WORKER_DEVICES], total = 0, want = 0;
    sm_store_stats(st, NULL, bytes, &shards);
    ck_assert_int_eq(shards, 3000);
    for (int k = 0; k < 4; k++)
        total += bytes[k];
    for (uint64_t a = 1; a <= 3000; a++) {
        sm_store_shard *sh = NULL;
        ck_assert_int_eq(sm_store_get(st, (sm_array_id){a}, devs[a % 4], &sh, err, sizeof err),
                         SM_OK);
        want += sh->nbytes;
        sm_store_shard_release(sh);
    }
    ck_assert_int_eq(total, want);
    sm_store_free(st);
}
END_TEST

typedef struct {
    sm_store *st;
    int id;
    int errors;
} smoke_arg;

static void *smoke_thread(void *p)
{
    smoke_arg *a = p;
    char err[256];
    for (int i = 0; i < 2000; i++) {
        uint64_t array = (uint64_t)(i % 8) + 1; /* shared with the other threads */
        int32_t dev = devs[(a->id + i) % 4];
        unsigned char fill = (unsigned char)(array * 16 + (uint64_t)dev);
        sm_store_shard *sh = NULL;
        sm_shape s = {.rank = 1, .dims = {64 + (int64_t)array}};
        if (sm_store_shard_create(NULL, SM_U8, &s, &sh, err, sizeof err)) {
            a->errors++;
            continue;
        }
        memset(sh->data, fill, (size_t)sh->nbytes);
        if (sm_store_put(a->st, sm_store_epoch(a->st), (sm_array_id){array}, 1, &dev, &sh, err,
                         sizeof err)) {
            sm_store_shard_release(sh);
            a->errors++;
        }
        sm_store_shard *got = NULL;
        if (sm_store_get(a->st, (sm_array_id){array}, dev, &got, err, sizeof err) == SM_OK) {
            /* whatever version we see is complete and consistent */
            const unsigned char *b = got->data;
            for (int64_t k = 0; k < got->nbytes; k++)
                if (b[k] != fill)
                    a->errors++;
            sm_store_shard_release(got);
        }
        if (i % 7 == 0)
            sm_store_free_array(a->st, (sm_array_id){array}, i % 2 ? 1 : 0, &dev, NULL, err,
                                sizeof err);
    }
    return NULL;
}

START_TEST(test_concurrency_smoke)
{
    sm_store *st = store_new();
    pthread_t t[4];
    smoke_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (smoke_arg){.st = st, .id = k};
        ck_assert_int_eq(pthread_create(&t[k], NULL, smoke_thread, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        ck_assert_int_eq(args[k].errors, 0);
    }
    /* the accounting matches what is left */
    char err[256];
    int64_t bytes[SM_MAX_WORKER_DEVICES], shards = 0, count = 0;
    sm_store_stats(st, NULL, bytes, &shards);
    for (int d = 0; d < 4; d++) {
        int64_t sum = 0;
        for (uint64_t a = 1; a <= 8; a++) {
            sm_store_shard *sh = NULL;
            if (sm_store_get(st, (sm_array_id){a}, devs[d], &sh, err, sizeof err) == SM_OK) {
                sum += sh->nbytes;
                count++;
                sm_store_shard_release(sh);
            }
        }
        ck_assert_int_eq(bytes[d], sum);
    }
    ck_assert_int_eq(shards, count);
    sm_store_free(st);
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(suite_create("worker_store"), "store", 60, NULL,
                                 {test_shard_create}, {test_shard_adopt}, {test_shard_adopt_shared},
                                 {test_unregistered}, {test_put_get_free}, {test_bytes_and_replace},
                                 {test_many_arrays}, {test_concurrency_smoke}));
}
