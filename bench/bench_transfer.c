/* bench_transfer: upload and download throughput of shmap against plain
 * loopback TCP, measured side by side in the same run.
 *
 * Starts a local cluster (shmap-coordinator --local-workers 2
 * --devices-per-worker 4 on a free loopback port), then for each size puts
 * an f32 array with P('i', None) over the 8 devices (mesh i=8) and gets it
 * back, timing each; between shmap runs it sends the same number of bytes
 * through one plain TCP connection on 127.0.0.1 (1 MiB writes). The
 * download fetches into one buffer reused from run to run
 * (sm_client_get_into), as the TCP reader reuses its buffer; the last column
 * times sm_client_get_described, which maps a new array for every fetch
 * (one page fault per 4 KiB). Prints medians, the shmap/TCP ratios, and the
 * peak RSS (VmHWM) of the coordinator and of each worker after those runs.
 *
 * Then the same-host rows ("shm"): for each of --shm-sizes the array lies
 * in a buffer of sm_client_alloc, uploaded from it and downloaded into
 * another (the workers copy it between those buffers and the shards
 * through shared memory, no bytes streamed), against the TCP anchor timed
 * in the same loop.
 *
 *   bench_transfer [--sizes 16,256,1024] [--shm-sizes 256,1024] [--runs 5]
 *                  [--warmup 1] [--coordinator PATH]
 *
 * Sizes are in MiB. Each size starts with --warmup untimed runs of every
 * step (the first transfer to a worker opens its connection, the first
 * write to fresh memory faults it in, on both sides and for TCP alike). The coordinator binary
 * defaults to
 * ../server/shmap-coordinator relative to this program (the build tree). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"

/* ---- plain loopback TCP: one connection, 1 MiB writes ------------------- */

typedef struct {
    int fd;
    size_t bytes;
} tcp_job;

static void *tcp_reader(void *arg)
{
    tcp_job *j = arg;
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap);
    while (buf && got < j->bytes) {
        ssize_t r = read(j->fd, buf, cap);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    free(buf);
    j->bytes = got;
    return NULL;
}

/* Seconds to move `bytes` through one TCP connection on 127.0.0.1; < 0 on
 * failure. */
static double tcp_seconds(size_t bytes)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), cs = -1, as = -1;
    double t = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    char *buf = NULL;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        goto done;
    cs = socket(AF_INET, SOCK_STREAM, 0);
    if (cs < 0 || connect(cs, (struct sockaddr *)&a, sizeof a))
        goto done;
    as = accept(ls, NULL, NULL);
    if (as < 0)
        goto done;
    size_t chunk = 1 << 20;
    buf = malloc(chunk);
    if (!buf)
        goto done;
    memset(buf, 7, chunk);
    tcp_job j = {.fd = as, .bytes = bytes};
    pthread_t th;
    double t0 = bench_now_s();
    pthread_create(&th, NULL, tcp_reader, &j);
    size_t sent = 0;
    while (sent < bytes) {
        size_t n = bytes - sent < chunk ? bytes - sent : chunk;
        ssize_t w = write(cs, buf, n);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    shutdown(cs, SHUT_WR);
    pthread_join(th, NULL);
    if (j.bytes == bytes)
        t = bench_now_s() - t0;
done:
    free(buf);
    if (as >= 0)
        close(as);
    if (cs >= 0)
        close(cs);
    if (ls >= 0)
        close(ls);
    return t;
}

/* ---- the cluster's memory ------------------------------------------------- */

/* Peak RSS in MiB of pid (VmHWM), or -1. */
static double peak_rss_mib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atof(line + 6);
    fclose(f);
    return kb < 0 ? -1 : kb / 1024.0;
}

/* One size of the list: *bytes and the f32 shape [bytes / 16 KiB, 4096];
 * 0 for a token that is no size. */
static int size_of(const char *tok, size_t *bytes, sm_shape *shape)
{
    long mib = atol(tok);
    if (mib <= 0)
        return 0;
    *bytes = (size_t)mib << 20;
    *shape = (sm_shape){.rank = 2, .dims = {(int64_t)(*bytes / 4 / 4096), 4096}};
    return 1;
}

/* The same-host rows (after the peak RSS line): upload from and download into sm_client_alloc
 * buffers, runs medians, each against TCP in the same loop. 0, or 1 on a
 * failure. */
static int shm_rows(sm_client *cli, const sm_sharding_ref *sh, const char *sizes_arg, int runs,
                    int warmup)
{
    char err[1024];
    int rc = 0;
    char *sz = strdup(sizes_arg);
    printf("\nsame host, arrays in sm_client_alloc buffers (shared memory):\n");
    printf("%3s %5s %3s  %12s  %12s  %12s  %10s  %10s\n", "", "size", "", "upload MB/s",
           "download MB/s", "tcp MB/s", "up/tcp", "down/tcp");
    for (char *tok = sz ? strtok(sz, ",") : NULL; tok && !rc; tok = strtok(NULL, ",")) {
        size_t bytes;
        sm_shape shape;
        if (!size_of(tok, &bytes, &shape))
            continue;
        long mib = (long)(bytes >> 20);
        float *data = NULL, *dst = NULL;
        if (sm_client_alloc(cli, bytes, (void **)&data, err, sizeof err) ||
            sm_client_alloc(cli, bytes, (void **)&dst, err, sizeof err)) {
            fprintf(stderr, "bench_transfer: %s\n", err);
            rc = 1;
            break;
        }
        for (size_t k = 0; k < bytes / 4; k++)
            data[k] = (float)(k % 1000003);
        double up[51], down[51], tcp[51];
        for (int run = -warmup; run < runs && !rc; run++) {
            int r = run < 0 ? 50 : run;
            sm_array_info info = {0};
            double t0 = bench_now_s();
            if (sm_client_put(cli, SM_F32, &shape, data, sh, NULL, &info, err, sizeof err)) {
                fprintf(stderr, "bench_transfer: shm put failed: %s\n", err);
                rc = 1;
                break;
            }
            up[r] = (double)bytes / (bench_now_s() - t0) / 1e6;
            t0 = bench_now_s();
            if (sm_client_get_into(cli, &info, dst, bytes, err, sizeof err)) {
                fprintf(stderr, "bench_transfer: shm get failed: %s\n", err);
                rc = 1;
            }
            down[r] = (double)bytes / (bench_now_s() - t0) / 1e6;
            if (!rc && memcmp(dst, data, bytes)) {
                fprintf(stderr, "bench_transfer: data came back different (shm)\n");
                rc = 1;
            }
            memset(dst, 0, bytes); /* the next run cannot pass on this one's bytes */
            sm_array_ref ref = {.id = info.id};
            sm_client_delete(cli, ref, err, sizeof err);
            sm_array_info_free(&info);
            double ts = tcp_seconds(bytes);
            tcp[r] = ts > 0 ? (double)bytes / ts / 1e6 : 0;
        }
        sm_client_free(cli, data);
        sm_client_free(cli, dst);
        if (rc)
            break;
        double mu = bench_median(up, runs), md = bench_median(down, runs),
               mt = bench_median(tcp, runs);
        printf("shm %5ld MiB  %12.0f  %12.0f  %12.0f  %10.2f  %10.2f\n", mib, mu, md, mt,
               mt > 0 ? mu / mt : 0, mt > 0 ? md / mt : 0);
        fflush(stdout);
    }
    free(sz);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sizes_arg = "16,256,1024", *shm_sizes = "256,1024";
    int runs = 5, warmup = 1;
    char bin[PATH_MAX];
    const bench_opt opts[] = {
        BENCH_OPT_STR("sizes", 's', &sizes_arg), BENCH_OPT_STR("shm-sizes", 'm', &shm_sizes),
        BENCH_OPT_RANGE("runs", 'r', &runs, 1, 50), BENCH_OPT_RANGE("warmup", 'w', &warmup, 0, 10)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_transfer [--sizes MiB,MiB,...] [--shm-sizes MiB,...] [--runs N] "
        "[--warmup N] [--coordinator PATH]\n"
        "Upload/download throughput of shmap vs plain loopback TCP, same run.\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;

    bench_cluster cl = {0};
    char err[1024];
    sm_client *cli = NULL;
    if (bench_cluster_start(&cl, bin, 2, 4, &cli, err, sizeof err)) {
        fprintf(stderr, "bench_transfer: %s\n", err);
        return 1;
    }

    sm_mesh mesh;
    sm_sharding_ref sh;
    bench_sharding_1d(&mesh, 8, "P('i', None)", &sh, err, sizeof err);

    printf("bench_transfer: f32 arrays, P('i', None) over 2 workers x 4 devices, %d runs "
           "each after %d untimed, medians (MB = 10^6 bytes)\n\n",
           runs, warmup);
    printf("%8s  %12s  %12s  %12s  %10s  %10s  %14s\n", "size", "upload MB/s", "download MB/s",
           "tcp MB/s", "up/tcp", "down/tcp", "get-new MB/s");
    int rc = 0;
    char *sz = strdup(sizes_arg);
    for (char *tok = strtok(sz, ","); tok; tok = strtok(NULL, ",")) {
        size_t bytes;
        sm_shape shape;
        if (!size_of(tok, &bytes, &shape))
            continue;
        long mib = (long)(bytes >> 20);
        float *data = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
        if (dst)
            memset(dst, 0, bytes); /* mapped once, before the runs */
        if (!data || !dst) {
            free(data);
            free(dst);
            rc = 1;
            break;
        }
        for (size_t k = 0; k < bytes / 4; k++)
            data[k] = (float)(k % 1000003);
        /* slot 50 takes the untimed warm-up runs */
        double up[51], down[51], tcp[51], fresh[51];
        for (int run = -warmup; run < runs; run++) {
            int r = run < 0 ? 50 : run;
            sm_array_info info = {0};
            double t0 = bench_now_s();
            if (sm_client_put(cli, SM_F32, &shape, data, &sh, NULL, &info, err, sizeof err)) {
                fprintf(stderr, "bench_transfer: put failed: %s\n", err);
                rc = 1;
                break;
            }
            up[r] = (double)bytes / (bench_now_s() - t0) / 1e6;
            sm_array *back = NULL;
            sm_array_ref ref = {.id = info.id};
            /* the put's description at hand, as a caller holding the array has */
            t0 = bench_now_s();
            if (sm_client_get_into(cli, &info, dst, bytes, err, sizeof err)) {
                fprintf(stderr, "bench_transfer: get failed: %s\n", err);
                rc = 1;
                sm_array_info_free(&info);
                break;
            }
            down[r] = (double)bytes / (bench_now_s() - t0) / 1e6;
            if (memcmp(dst, data, bytes)) {
                fprintf(stderr, "bench_transfer: data came back different\n");
                rc = 1;
            }
            memset(dst, 0, bytes); /* the next run cannot pass on this one's bytes */
            t0 = bench_now_s();
            if (sm_client_get_described(cli, &info, &back, err, sizeof err)) {
                fprintf(stderr, "bench_transfer: get failed: %s\n", err);
                rc = 1;
                sm_array_info_free(&info);
                break;
            }
            fresh[r] = (double)bytes / (bench_now_s() - t0) / 1e6;
            if (memcmp(back->data, data, bytes)) {
                fprintf(stderr, "bench_transfer: data came back different\n");
                rc = 1;
            }
            sm_array_free(back);
            sm_client_delete(cli, ref, err, sizeof err);
            sm_array_info_free(&info);
            double ts = tcp_seconds(bytes);
            tcp[r] = ts > 0 ? (double)bytes / ts / 1e6 : 0;
        }
        free(data);
        free(dst);
        if (rc)
            break;
        double mu = bench_median(up, runs), md = bench_median(down, runs),
               mt = bench_median(tcp, runs);
        printf("%5ld MiB  %12.0f  %12.0f  %12.0f  %10.2f  %10.2f  %14.0f\n", mib, mu, md, mt,
               mt > 0 ? mu / mt : 0, mt > 0 ? md / mt : 0, bench_median(fresh, runs));
        fflush(stdout);
    }
    free(sz);

    /* before the same-host rows: a worker's RSS counts the pages of the
     * clients' segments it maps too */
    pid_t kids[16];
    int nk = bench_children(cl.pid, kids, 16);
    printf("\npeak RSS: coordinator %.0f MiB", peak_rss_mib(cl.pid));
    for (int k = 0; k < nk; k++)
        printf(", worker %d %.0f MiB", k, peak_rss_mib(kids[k]));
    printf("\n");
    if (!rc && *shm_sizes)
        rc = shm_rows(cli, &sh, shm_sizes, runs, warmup);
    sm_client_close(cli);
    bench_cluster_stop(&cl);
    return rc;
}
