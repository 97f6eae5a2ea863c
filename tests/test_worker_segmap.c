/* Check suite for worker/segmap: boxes gathered out of and scattered into
 * a real /dev/shm segment (row, strided column and rank-3 boxes, at an
 * offset) bit-exact with the checksums of the bytes moved; mappings kept
 * per name, dropped when the file is replaced (a new file under the same
 * name is read, not the old one) or unlinked (by the sweeper, with no
 * transfer); a missing segment NOT_FOUND
 * naming it, one too short or truncated DATA_LOSS; a box of the wrong
 * shape INVALID_ARGUMENT. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segmap.h"
#include "sm_checksum.h"
#include "sm_shm.h"
#include "suite_main.h"

/* A fresh segment of len bytes, filled with v[i] = i * 3 + salt (bytes). */
static sm_shm_seg seg_new(const char *name, size_t len, int salt)
{
    sm_shm_seg s;
    char err[256];
    sm_shm_unlink(name);
    ck_assert_int_eq(sm_shm_seg_create(name, len, &s, err, sizeof err), SM_OK);
    for (size_t i = 0; i < len; i++)
        ((unsigned char *)s.base)[i] = (unsigned char)(i * 3 + (size_t)salt);
    return s;
}

static sm_svc_shm_ref ref_of(const char *name, int64_t off, sm_shape global, sm_index box)
{
    sm_svc_shm_ref r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", name);
    r.offset = off;
    r.global = global;
    r.box = box;
    return r;
}

static sm_index box2(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    return (sm_index){.rank = 2, .r = {{a0, a1}, {b0, b1}}};
}

/* Gathers box of the f32 array global at offset off of s into a shard,
 * compares it with sm_block_copy of the same box and its checksum, then
 * scatters it back into a zeroed copy of the segment's array and compares
 * the box there. */
static void round_box(sm_segmap *m, sm_shm_seg *s, int64_t off, sm_shape global, sm_index box)
{
    char err[256];
    sm_shape bs = sm_index_shape(&box);
    sm_store_shard *sh = NULL;
    ck_assert_int_eq(sm_store_shard_create(NULL, SM_F32, &bs, &sh, err, sizeof err), SM_OK);
    sm_svc_shm_ref r = ref_of(s->name, off, global, box);
    uint64_t sum = 0;
    ck_assert_msg(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err) == SM_OK, "%s", err);
    void *want = malloc((size_t)sh->nbytes + 1);
    int64_t zero[SM_MAX_RANK] = {0}, start[SM_MAX_RANK];
    for (int d = 0; d < box.rank; d++)
        start[d] = box.r[d].start;
    ck_assert_int_eq(sm_block_copy(want, &bs, zero, (char *)s->base + off, &global, start, bs.dims,
                                   4, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(memcmp(want, sh->data, (size_t)sh->nbytes), 0);
    ck_assert_uint_eq(sum, sm_checksum_oneshot(want, (size_t)sh->nbytes));
    /* back: the box of a cleared array, nothing else touched */
    int64_t abytes = 4;
    for (int d = 0; d < global.rank; d++)
        abytes *= global.dims[d];
    memset((char *)s->base + off, 0, (size_t)abytes);
    sm_index whole = sm_index_full(&bs);
    sh->has_checksum = 1;
    sh->checksum = sum;
    uint64_t sum2 = 0;
    ck_assert_msg(sm_segmap_scatter(m, &r, sh, &whole, &sum2, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_uint_eq(sum2, sum);
    memset(want, 0, (size_t)sh->nbytes);
    ck_assert_int_eq(sm_block_copy(want, &bs, zero, (char *)s->base + off, &global, start, bs.dims,
                                   4, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(memcmp(want, sh->data, (size_t)sh->nbytes), 0);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < abytes; i++)
        nonzero += ((unsigned char *)s->base)[off + i] != 0;
    int64_t inbox = 0;
    for (int64_t i = 0; i < sh->nbytes; i++)
        inbox += ((unsigned char *)sh->data)[i] != 0;
    ck_assert_int_eq(nonzero, inbox); /* only the box was written */
    free(want);
    sm_store_shard_release(sh);
}

START_TEST(segmap_boxes)
{
    static const char *name = "/shmap-c0-5e9a01";
    sm_segmap *m = NULL;
    char err[256];
    ck_assert_int_eq(sm_segmap_create(&m, err, sizeof err), SM_OK);
    sm_shm_seg s = seg_new(name, (1 << 22) + 4096, 1);
    sm_shape g = {.rank = 2, .dims = {512, 2048}};     /* 4 MiB: several pieces */
    round_box(m, &s, 0, g, box2(0, 512, 0, 2048));     /* whole */
    round_box(m, &s, 0, g, box2(128, 256, 0, 2048));   /* rows */
    round_box(m, &s, 4096, g, box2(0, 512, 512, 768)); /* strided columns, at an offset */
    round_box(m, &s, 64, g, box2(3, 400, 5, 1999));    /* both */
    sm_shape g3 = {.rank = 3, .dims = {6, 5, 8}};
    sm_index b3 = {.rank = 3, .r = {{2, 4}, {0, 5}, {4, 8}}};
    round_box(m, &s, 8, g3, b3);
    int n;
    size_t bytes;
    sm_segmap_stats(m, &n, &bytes);
    ck_assert_int_eq(n, 1); /* one mapping for every transfer */
    ck_assert_uint_eq(bytes, s.len);
    /* a shard whose shape is not the box's */
    sm_shape bs = {.rank = 2, .dims = {4, 4}};
    sm_store_shard *sh = NULL;
    uint64_t sum;
    ck_assert_int_eq(sm_store_shard_create(NULL, SM_F32, &bs, &sh, err, sizeof err), SM_OK);
    sm_svc_shm_ref r = ref_of(name, 0, g, box2(0, 4, 0, 5));
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_EINVAL);
    sm_store_shard_release(sh);
    sm_shm_unlink(name);
    sm_shm_seg_close(&s);
    sm_segmap_free(m);
}
END_TEST

START_TEST(segmap_files)
{
    static const char *name = "/shmap-c0-5e9a02";
    sm_segmap *m = NULL;
    char err[256];
    ck_assert_int_eq(sm_segmap_create(&m, err, sizeof err), SM_OK);
    sm_shape g = {.rank = 2, .dims = {4, 4}};
    sm_shape bs = g;
    sm_store_shard *sh = NULL;
    uint64_t sum = 0;
    ck_assert_int_eq(sm_store_shard_create(NULL, SM_F32, &bs, &sh, err, sizeof err), SM_OK);
    sm_svc_shm_ref r = ref_of(name, 0, g, box2(0, 4, 0, 4));

    /* missing: NOT_FOUND naming it */
    sm_shm_unlink(name);
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, name));

    /* replaced under the same name: the new file's bytes */
    sm_shm_seg a = seg_new(name, 64, 1);
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_OK);
    ck_assert_int_eq(((unsigned char *)sh->data)[0], 1);
    sm_shm_seg_close(&a);
    sm_shm_seg b = seg_new(name, 64, 7); /* unlinks a, makes another file */
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_OK);
    ck_assert_int_eq(((unsigned char *)sh->data)[0], 7);

    /* truncated under the mapping kept: DATA_LOSS both ways, the mapping
     * stays until its file goes */
    int n;
    size_t bytes;
    ck_assert_int_eq(ftruncate(b.fd, 32), 0);
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_EDATALOSS);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    sm_index whole = sm_index_full(&bs);
    ck_assert_int_eq(sm_segmap_scatter(m, &r, sh, &whole, &sum, err, sizeof err), SM_EDATALOSS);
    sm_segmap_stats(m, &n, &bytes);
    ck_assert_int_eq(n, 1);
    /* too short for the array at its offset: DATA_LOSS */
    ck_assert_int_eq(ftruncate(b.fd, 64), 0);
    r.offset = 8;
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_EDATALOSS);
    r.offset = 0;
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_OK);

    /* unlinked: its mapping goes within SM_SEGMAP_SWEEP_MS, with no
     * transfer to notice */
    sm_segmap_stats(m, &n, &bytes);
    ck_assert_int_eq(n, 1);
    sm_shm_unlink(name);
    sm_shm_seg_close(&b);
    for (int k = 0; k < 40 && n; k++) {
        usleep(100 * 1000);
        sm_segmap_stats(m, &n, &bytes);
    }
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(sm_segmap_gather(m, &r, SM_F32, sh, &sum, err, sizeof err), SM_ENOTFOUND);
    sm_store_shard_release(sh);
    sm_segmap_free(m);
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(suite_create("worker_segmap"), "segmap", 60, NULL, {segmap_boxes},
                                 {segmap_files}));
}
