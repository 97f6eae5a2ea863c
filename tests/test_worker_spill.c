/* Check suite for spilling (worker/store + worker/disk): under the memory
 * limit, the least recently used shards whose disk copy is complete give
 * their memory back and are read back, checksum verified, on use; a shard
 * someone reads is never spilled; a damaged copy is DATA_LOSS; without a
 * state dir the limit refuses as before; copies go into spare files made
 * ahead of need. Real files in a temporary dir. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "sm_array.h"
#include "store.h"
#include "suite_main.h"

#define MIB (1 << 20)

static const int32_t devs[2] = {0, 1};

typedef struct {
    char dir[64];
    sm_array_pool *pool; /* the store's: its limit is the one the tests set */
    sm_store *st;
    sm_disk *disk;
} spill_env;

static void env_open(spill_env *e, int with_disk)
{
    char err[256];
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "/tmp/shmap-spill-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    ck_assert_int_eq(sm_array_pool_create(&e->pool, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_store_create(e->pool, &e->st, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_store_set_identity(e->st, 1, 2, devs, err, sizeof err), SM_OK);
    if (with_disk) {
        ck_assert_int_eq(sm_disk_open(e->dir, &e->disk, err, sizeof err), SM_OK);
        sm_store_observe(e->st, sm_disk_observer(), e->disk);
        sm_store_spill_to(e->st, sm_disk_spiller(), e->disk);
    }
}

static void env_close(spill_env *e)
{
    char cmd[128];
    sm_store_spill_to(e->st, NULL, NULL);
    sm_store_observe(e->st, NULL, NULL);
    sm_disk_free(e->disk);
    sm_store_free(e->st);
    sm_array_pool_free(e->pool);
    snprintf(cmd, sizeof cmd, "rm -rf %s", e->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A 1 MiB f32 shard whose floats are seed + i, allocated through the
 * store (so it may spill others); SM_OK or the allocation's error. */
static sm_err shard_mib(sm_store *st, float seed, sm_store_shard **out)
{
    char err[256];
    sm_shape s = {.rank = 1, .dims = {MIB / 4}};
    sm_err e = sm_store_shard_alloc(st, SM_F32, &s, out, err, sizeof err);
    for (int64_t i = 0; !e && i < MIB / 4; i++)
        ((float *)(*out)->data)[i] = seed + (float)i;
    return e;
}

static void put(sm_store *st, uint64_t array, float seed)
{
    char err[256];
    sm_store_shard *sh = NULL;
    int32_t dev = 0;
    ck_assert_int_eq(shard_mib(st, seed, &sh), SM_OK);
    ck_assert_int_eq(
        sm_store_put(st, sm_store_epoch(st), (sm_array_id){array}, 1, &dev, &sh, err, sizeof err),
        SM_OK);
}

static void check(sm_store *st, uint64_t array, float seed)
{
    char err[256];
    sm_store_shard *sh = NULL;
    ck_assert_msg(sm_store_get(st, (sm_array_id){array}, 0, &sh, err, sizeof err) == SM_OK, "%s",
                  err);
    ck_assert_int_eq(sh->nbytes, MIB);
    for (int64_t i = 0; i < MIB / 4; i += 4097)
        ck_assert_float_eq(((float *)sh->data)[i], seed + (float)i);
    sm_store_shard_release(sh);
}

/* The arrays whose shards are spilled now, as a bit set over ids 1..31. */
static unsigned spilled_set(sm_store *st)
{
    sm_svc_held_shard *sp = NULL;
    unsigned set = 0;
    int n = sm_store_spilled(st, &sp, 64);
    for (int k = 0; k < n; k++)
        set |= 1u << sp[k].array;
    free(sp);
    return set;
}

/* env_open, a memory limit of 2.5 MiB and arrays 1 and 2 put (values 1
 * and 2): a third 1 MiB shard does not fit. */
static void env_open_full(spill_env *e, int with_disk)
{
    env_open(e, with_disk);
    sm_array_pool_limit_set(e->pool, (size_t)2 * MIB + MIB / 2);
    put(e->st, 1, 1);
    put(e->st, 2, 2);
}

START_TEST(test_spill_lru_and_read_back)
{
    spill_env e;
    env_open(&e, 1);
    sm_array_pool_limit_set(e.pool, (size_t)3 * MIB + MIB / 2);
    put(e.st, 1, 100);
    put(e.st, 2, 200);
    put(e.st, 3, 300);
    check(e.st, 1, 100); /* 1 is used again: 2 is now the least recently used */
    ck_assert_uint_eq(spilled_set(e.st), 0);
    put(e.st, 4, 400); /* over the limit: 2 goes to disk */
    ck_assert_uint_eq(spilled_set(e.st), 1u << 2);
    int64_t bytes[2];
    sm_store_stats(e.st, NULL, bytes, NULL);
    ck_assert_int_eq(bytes[0], 4 * MIB); /* held, in memory or not */
    /* read back (3 goes out to make room), bit-exact */
    check(e.st, 2, 200);
    ck_assert_uint_eq(spilled_set(e.st), 1u << 3);
    check(e.st, 3, 300);
    check(e.st, 4, 400);
    check(e.st, 1, 100);
    /* a shard held by a reader is not spilled; with nothing to spill the
     * limit refuses as before */
    sm_store_shard *held[4], *extra = NULL;
    char err[256];
    for (int k = 0; k < 4; k++)
        if (sm_store_get(e.st, (sm_array_id){(uint64_t)k + 1}, 0, &held[k], err, sizeof err)) {
            /* spilled: reading it back needs room another reader holds */
            held[k] = NULL;
        }
    ck_assert_int_eq(shard_mib(e.st, 0, &extra), SM_ERESOURCE);
    for (int k = 0; k < 4; k++)
        sm_store_shard_release(held[k]);
    /* dropped shards take their files with them */
    int freed = 0;
    ck_assert_int_eq(sm_store_free_array(e.st, (sm_array_id){2}, 0, NULL, &freed, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(freed, 1);
    sm_disk_flush(e.disk);
    char path[128];
    snprintf(path, sizeof path, "%s/shards/2-0.npy", e.dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    env_close(&e);
}
END_TEST

/* Array 1 on devices 0 and 1 holding one block of 1 MiB (a replicated
 * layout's shards share their bytes), then array 2; the limit is 2.5 MiB.
 * Making room spills both shards of array 1 together (one alone frees
 * nothing), or, while a reader holds one of them, array 2 instead. */
static void put_shared(sm_store *st, uint64_t array, float seed)
{
    char err[256];
    sm_store_shard *sh[2] = {NULL, NULL};
    ck_assert_int_eq(shard_mib(st, seed, &sh[0]), SM_OK);
    ck_assert_int_eq(sm_store_shard_share(sh[0], &sh[1], err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_store_put(st, sm_store_epoch(st), (sm_array_id){array}, 2, devs, sh, err, sizeof err),
        SM_OK);
}

static void check_on(sm_store *st, uint64_t array, int32_t device, float seed)
{
    char err[256];
    sm_store_shard *sh = NULL;
    ck_assert_msg(sm_store_get(st, (sm_array_id){array}, device, &sh, err, sizeof err) == SM_OK,
                  "%s", err);
    for (int64_t i = 0; i < MIB / 4; i += 4097)
        ck_assert_float_eq(((float *)sh->data)[i], seed + (float)i);
    sm_store_shard_release(sh);
}

START_TEST(test_spill_shared_block)
{
    for (int held = 0; held < 2; held++) {
        spill_env e;
        char err[256];
        env_open(&e, 1);
        sm_array_pool_limit_set(e.pool, (size_t)2 * MIB + MIB / 2);
        put_shared(e.st, 1, 10);
        put(e.st, 2, 20);
        sm_store_shard *reader = NULL;
        if (held)
            ck_assert_int_eq(sm_store_get(e.st, (sm_array_id){1}, 1, &reader, err, sizeof err),
                             SM_OK);
        sm_store_shard *sh = NULL;
        ck_assert_int_eq(shard_mib(e.st, 30, &sh), SM_OK);
        sm_store_shard_release(sh);
        sm_svc_held_shard *sp = NULL;
        int n = sm_store_spilled(e.st, &sp, 8);
        if (!held) { /* both devices of array 1, not array 2 */
            ck_assert_int_eq(n, 2);
            ck_assert_int_eq(sp[0].array + sp[1].array, 2);
        } else { /* 1's bytes are read: they cannot go */
            ck_assert_int_eq(n, 1);
            ck_assert_int_eq(sp[0].array, 2);
        }
        free(sp);
        sm_store_shard_release(reader);
        check_on(e.st, 1, 0, 10);
        check_on(e.st, 1, 1, 10);
        check(e.st, 2, 20);
        env_close(&e);
    }
}
END_TEST

START_TEST(test_damaged_copy_is_data_loss)
{
    spill_env e;
    env_open_full(&e, 1);
    put(e.st, 3, 3); /* 1 spilled */
    ck_assert_uint_eq(spilled_set(e.st), 1u << 1);
    char path[128];
    snprintf(path, sizeof path, "%s/shards/1-0.npy", e.dir);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 4096, SEEK_SET), 0);
    ck_assert_int_eq(fputc(0x7f, f), 0x7f);
    fclose(f);
    sm_store_shard *sh = NULL;
    char err[512];
    ck_assert_int_eq(sm_store_get(e.st, (sm_array_id){1}, 0, &sh, err, sizeof err), SM_EDATALOSS);
    ck_assert_msg(strstr(err, "1-0.npy is damaged"), "%s", err);
    check(e.st, 3, 3);
    env_close(&e);
}
END_TEST

START_TEST(test_no_state_dir_refuses)
{
    spill_env e;
    env_open_full(&e, 0);
    sm_store_shard *sh = NULL;
    ck_assert_int_eq(shard_mib(e.st, 3, &sh), SM_ERESOURCE);
    ck_assert_uint_eq(spilled_set(e.st), 0);
    check(e.st, 1, 1);
    env_close(&e);
}
END_TEST

/* A shard dropped before its copy is written takes its queued copy with
 * it, while the writer waits for that copy to come due (the queue's head):
 * the writer must not touch it afterwards (a use after free found under
 * ASan when a job's inputs were deleted right after the job). */
START_TEST(test_drop_before_copy)
{
    spill_env e;
    env_open(&e, 1);
    char err[256];
    for (int k = 0; k < 4; k++) {
        /* two copies queued (the second wakes nobody), the writer waiting for
         * the first; then the first shard goes */
        put(e.st, 100 + (uint64_t)k, (float)k);
        put(e.st, 200 + (uint64_t)k, (float)k);
        usleep(5000);
        int freed = 0;
        ck_assert_int_eq(sm_store_free_array(e.st, (sm_array_id){100 + (uint64_t)k}, 0, NULL,
                                             &freed, err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(freed, 1);
        usleep(80000); /* past the first's due time: the writer wakes */
    }
    put(e.st, 7, 7);
    usleep(120000); /* past every due time */
    sm_disk_flush(e.disk);
    char path[128];
    snprintf(path, sizeof path, "%s/shards/7-0.sum", e.dir);
    ck_assert_int_eq(access(path, F_OK), 0); /* the kept one is written */
    snprintf(path, sizeof path, "%s/shards/100-0.npy", e.dir);
    ck_assert_int_ne(access(path, F_OK), 0); /* the dropped ones never are */
    check(e.st, 7, 7);
    env_close(&e);
}
END_TEST

/* The inode numbers of the files in dir/sub, into ino (at most cap); how
 * many. Sizes must all be 0. */
static int spare_inodes(const char *dir, unsigned long *ino, int cap)
{
    char path[128];
    snprintf(path, sizeof path, "%s/spare", dir);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        if (de->d_name[0] == '.')
            continue;
        char file[400];
        struct stat st;
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(st.st_size, 0);
        ino[n++] = (unsigned long)st.st_ino;
    }
    closedir(d);
    return n;
}

static int has_inode(const unsigned long *ino, int n, const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    for (int k = 0; k < n; k++)
        if (ino[k] == (unsigned long)st.st_ino)
            return 1;
    return 0;
}

/* An idle writer makes spare files ahead of need; copies are written into
 * them (no new file), dropped copies go back to spare/ emptied, and a
 * restart adopts them and removes what is not a spare. */
START_TEST(test_spare_files)
{
    spill_env e;
    env_open(&e, 1);
    char err[256], path[128];
    unsigned long ino[256];
    int n = 0;
    for (int t = 0; t < 300 && n < 128; t++) { /* 16 per idle look, every 50 ms */
        usleep(20000);
        n = spare_inodes(e.dir, ino, 256);
    }
    ck_assert_int_eq(n, 128);
    put(e.st, 1, 1);
    put(e.st, 2, 2);
    usleep(120000);
    sm_disk_flush(e.disk);
    for (uint64_t a = 1; a <= 2; a++)
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/shards/%d-0.%s", e.dir, (int)a, k ? "sum" : "npy");
            ck_assert_msg(has_inode(ino, n, path), "%s is a new file, not a spare", path);
        }
    snprintf(path, sizeof path, "%s/shards/1-0.npy", e.dir);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_size, 4096 + MIB); /* 4 KiB header, then the data */
    check(e.st, 1, 1);
    int freed = 0;
    ck_assert_int_eq(sm_store_free_array(e.st, (sm_array_id){1}, 0, NULL, &freed, err, sizeof err),
                     SM_OK);
    sm_disk_flush(e.disk);
    unsigned long before = (unsigned long)st.st_ino;
    ck_assert_int_ne(access(path, F_OK), 0);
    n = spare_inodes(e.dir, ino, 256);
    int back = 0;
    for (int k = 0; k < n; k++)
        back |= ino[k] == before;
    ck_assert_msg(back, "the dropped copy's file is not kept as a spare");
    /* a restart: the spares stay, a stray file goes, array 2 comes back */
    snprintf(path, sizeof path, "%s/spare/junk", e.dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    sm_store_observe(e.st, NULL, NULL);
    sm_store_spill_to(e.st, NULL, NULL);
    sm_disk_free(e.disk);
    sm_store_free(e.st);
    ck_assert_int_eq(sm_store_create(e.pool, &e.st, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_store_set_identity(e.st, 1, 2, devs, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_disk_open(e.dir, &e.disk, err, sizeof err), SM_OK);
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(spare_inodes(e.dir, ino, 256), n);
    sm_array_pool_info pi;
    sm_array_pool_stats(e.pool, &pi);
    size_t live = pi.live_bytes;
    ck_assert_int_eq(sm_disk_restore(e.disk, e.st), 1);
    sm_array_pool_stats(e.pool, &pi); /* the restored shard is the store's pool's */
    ck_assert_uint_ge(pi.live_bytes, live + MIB);
    check(e.st, 2, 2);
    env_close(&e);
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(suite_create("worker_spill"), "spill", 60, NULL,
                                 {test_spill_lru_and_read_back}, {test_spill_shared_block},
                                 {test_damaged_copy_is_data_loss}, {test_no_state_dir_refuses},
                                 {test_drop_before_copy}, {test_spare_files}));
}
