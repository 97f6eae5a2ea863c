/* bench_ckpt: checkpoints against the disk. A MiB-sized f32 array (1 GiB by
 * default) on 2 workers x 4 devices with P('x', 'y') over mesh (4, 2) is
 * saved to a directory (each worker writes its 4 shard files, fsyncing
 * each) and loaded back onto the same sharding, against a dd-style
 * sequential write of the same bytes to one file in the same directory
 * (8 MiB writes, then fsync: the same sync policy as a save) and a
 * sequential read of that file (8 MiB reads), all in the same run.
 *
 * The page cache is kept out of every read: before each load and each
 * anchor read, the files about to be read are dropped from it with
 * posix_fadvise(POSIX_FADV_DONTNEED) after they were fsynced, so both read
 * the disk. A load also checks every file's xxHash3-64 and places 1 GiB in
 * new shard buffers, which the anchor (reusing one 8 MiB buffer) does not.
 * Also reported, without a target: a load onto another sharding (8,) with
 * P('i'), whose devices read pieces of several files.
 *
 * Targets: save and load >= 0.7x of the anchor's write and read bandwidth.
 *
 *     bench_ckpt [--mib N] [--runs N] [--dir DIR] [--coordinator PATH]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define CKPT_BLOCK (8 << 20)

/* Drops every regular file of dir (or the one file path) from the page
 * cache; they are on disk already (fsynced). */
static void drop_cache(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
        return;
    }
    struct dirent *de;
    char p[PATH_MAX + 256];
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            if (snprintf(p, sizeof p, "%s/%s", path, de->d_name) < (int)sizeof p)
                drop_cache(p); /* a path too long to name is left in the cache */
        }
    closedir(d);
}

/* dd if=/dev/zero-like: bytes of buf (CKPT_BLOCK) written again and again
 * to path, then fsync. Seconds, or -1. */
static double anchor_write(const char *path, const void *buf, size_t bytes)
{
    double t0 = bench_now_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < CKPT_BLOCK ? bytes - off : CKPT_BLOCK;
        ssize_t w = write(fd, (const char *)buf, n);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (fsync(fd) || close(fd))
        return -1;
    return bench_now_s() - t0;
}

/* dd of=/dev/null-like: path read sequentially into buf. Seconds, or -1. */
static double anchor_read(const char *path, void *buf, size_t bytes)
{
    double t0 = bench_now_s();
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf, CKPT_BLOCK);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got == bytes ? bench_now_s() - t0 : -1;
}

static int rm_rf(const char *path)
{
    char cmd[PATH_MAX + 32];
    if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", path) >= (int)sizeof cmd)
        return -1;
    return system(cmd);
}

int main(int argc, char **argv)
{
    int mib = 1024, runs = 3;
    const char *dirarg = NULL;
    char bin[PATH_MAX], err[PATH_MAX + 256], base[PATH_MAX], ck[PATH_MAX + 32], ddf[PATH_MAX + 32];
    const bench_opt opts[] = {BENCH_OPT_RANGE("mib", 'm', &mib, 8, 65536),
                              BENCH_OPT_RANGE("runs", 'r', &runs, 1, 50),
                              BENCH_OPT_STR("dir", 'd', &dirarg)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_ckpt [--mib N] [--runs N] [--dir DIR] [--coordinator PATH]\n"
        "Save and load of an N MiB array (default 1024) on 2 workers x 4 devices "
        "against a dd-style sequential write (fsynced) and read (page cache "
        "dropped) of the same bytes in DIR (default a new directory under /tmp), "
        "medians of N runs (default 3).\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;
    snprintf(base, sizeof base, "%s/shmap-bench-ckpt-XXXXXX", dirarg ? dirarg : "/tmp");
    if (!mkdtemp(base)) {
        perror("bench_ckpt: mkdtemp");
        return 1;
    }
    snprintf(ddf, sizeof ddf, "%s/dd.bin", base);
    size_t bytes = (size_t)mib << 20;
    int64_t rows = (int64_t)(bytes / 4 / 4096);
    sm_shape shape = {.rank = 2, .dims = {rows, 4096}};
    bench_cluster cl;
    sm_client *cli = NULL;
    float *data = malloc(bytes);
    char *block = malloc(CKPT_BLOCK);
    double *sv = calloc((size_t)runs, sizeof *sv), *ld = calloc((size_t)runs, sizeof *ld);
    double *lo = calloc((size_t)runs, sizeof *lo), *aw = calloc((size_t)runs, sizeof *aw);
    double *ar = calloc((size_t)runs, sizeof *ar);
    int rc = !data || !block || !sv || !ld || !lo || !aw || !ar;
    if (rc)
        snprintf(err, sizeof err, "out of memory");
    for (size_t k = 0; !rc && k < bytes / 4; k++)
        data[k] = (float)(k % 1000003);
    for (size_t k = 0; !rc && k < CKPT_BLOCK; k++)
        block[k] = (char)(k * 131);
    if (!rc)
        rc = bench_cluster_start(&cl, bin, 2, 4, &cli, err, sizeof err);
    else
        memset(&cl, 0, sizeof cl);
    sm_mesh m42, m8;
    sm_sharding_ref sh42 = {.mesh = &m42, .default_order = 1},
                    sh8 = {.mesh = &m8, .default_order = 1};
    const char *n42[] = {"x", "y"}, *n8[] = {"i"};
    int64_t s42[] = {4, 2}, s8[] = {8};
    sm_array_info x = {0};
    if (!rc && (sm_mesh_init(&m42, 2, n42, s42, NULL, 8, err, sizeof err) ||
                sm_mesh_init(&m8, 1, n8, s8, NULL, 8, err, sizeof err) ||
                sm_pspec_parse("P('x', 'y')", &sh42.spec, err, sizeof err) ||
                sm_pspec_parse("P('i')", &sh8.spec, err, sizeof err) ||
                sm_client_put(cli, SM_F32, &shape, data, &sh42, NULL, &x, err, sizeof err)))
        rc = -1;
    printf("bench_ckpt: %d MiB f32 array on 2 workers x 4 devices, P('x', 'y') over (4, 2), "
           "checkpoints in %s; %d runs (medians)\n\n",
           mib, base, runs);
    for (int r = 0; !rc && r < runs; r++) {
        snprintf(ck, sizeof ck, "%s/ck%d", base, r);
        /* the anchor first, then the save, each writing to an empty place */
        if ((aw[r] = anchor_write(ddf, block, bytes)) < 0) {
            snprintf(err, sizeof err, "cannot write %s", ddf);
            rc = -1;
            break;
        }
        double t0 = bench_now_s();
        if (sm_client_save(cli, (sm_array_ref){.id = x.id}, ck, NULL, NULL, err, sizeof err)) {
            rc = -1;
            break;
        }
        sv[r] = bench_now_s() - t0;
        drop_cache(ddf);
        if ((ar[r] = anchor_read(ddf, block, bytes)) < 0) {
            snprintf(err, sizeof err, "cannot read %s", ddf);
            rc = -1;
            break;
        }
        const sm_sharding_ref *to[2] = {&sh42, &sh8};
        double *fig[2] = {ld, lo};
        for (int k = 0; k < 2 && !rc; k++) {
            sm_array_info y = {0};
            drop_cache(ck);
            t0 = bench_now_s();
            if (sm_client_load(cli, ck, to[k], NULL, &y, err, sizeof err)) {
                rc = -1;
                break;
            }
            fig[k][r] = bench_now_s() - t0;
            if (r == 0 && k == 1) { /* once: the loaded array is the saved one */
                void *back = malloc(bytes);
                if (!back || sm_client_get_into(cli, &y, back, bytes, err, sizeof err) ||
                    memcmp(back, data, bytes)) {
                    if (back)
                        snprintf(err, sizeof err, "the loaded array differs from the saved one");
                    rc = -1;
                }
                free(back);
            }
            sm_client_delete(cli, (sm_array_ref){.id = y.id}, err, sizeof err);
            sm_array_info_free(&y);
        }
        rm_rf(ck);
        printf("run %d: save %.3f s, dd write %.3f s, load %.3f s, dd read %.3f s, load onto "
               "(8,) %.3f s\n",
               r + 1, sv[r], aw[r], ld[r], ar[r], lo[r]);
    }
    if (x.id.v)
        sm_client_delete(cli, (sm_array_ref){.id = x.id}, err, sizeof err);
    sm_array_info_free(&x);
    if (cli)
        sm_client_close(cli);
    bench_cluster_stop(&cl);
    rm_rf(base);
    free(data);
    free(block);
    if (rc) {
        fprintf(stderr, "bench_ckpt: %s\n", err);
        return 1;
    }
    double mb = (double)bytes / 1e6;
    double save_mb = mb / bench_median(sv, runs), load_mb = mb / bench_median(ld, runs);
    double other_mb = mb / bench_median(lo, runs);
    double w_mb = mb / bench_median(aw, runs), r_mb = mb / bench_median(ar, runs);
    printf("\n%-40s %10s %10s %8s\n", "", "MB/s", "dd MB/s", "ratio");
    printf("%-40s %10.0f %10.0f %8.2f\n", "save (fsynced)", save_mb, w_mb, save_mb / w_mb);
    printf("%-40s %10.0f %10.0f %8.2f\n", "load, same sharding (cold cache)", load_mb, r_mb,
           load_mb / r_mb);
    printf("%-40s %10.0f %10.0f %8.2f\n", "load onto (8,) P('i') (cold cache)", other_mb, r_mb,
           other_mb / r_mb);
    char fig[96];
    snprintf(fig, sizeof fig, "save %d MiB, 2 workers (fsync)", mib);
    bench_summary("ckpt", fig, save_mb, "MB/s", "dd write+fsync", w_mb, ">= 0.7x",
                  save_mb >= 0.7 * w_mb);
    snprintf(fig, sizeof fig, "load %d MiB, same sharding (cold)", mib);
    bench_summary("ckpt", fig, load_mb, "MB/s", "dd read (cold)", r_mb, ">= 0.7x",
                  load_mb >= 0.7 * r_mb);
    snprintf(fig, sizeof fig, "load %d MiB onto (8,) P('i') (cold)", mib);
    bench_summary("ckpt", fig, other_mb, "MB/s", "dd read (cold)", r_mb, NULL, -1);
    return 0;
}
