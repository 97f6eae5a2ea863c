/* bench_scale: how the cost of a job grows with the number of local
 * workers. For each count W (default 1, 2, 4 and 8) a local cluster of W
 * workers x D devices (default 4) is started, and measured side by side in
 * the same run:
 *   - dispatch: the round trip of an empty job (`return x`) over every
 *     device, against a plain unary RPC (sm_client_devices), interleaved;
 *   - psum of S MiB per device (default 16) over every device: a job
 *     applying it R = 1 and R = 3 times, (t3 - t1) / 2 the time of one
 *     psum (so submit, lookup and storing cancel out), busbw = S x
 *     2(n-1)/n / t as nccl-tests count it (n devices).
 * The workers pick their transport as the cluster does by default (shared
 * memory between workers of this host where proven). Prints a table and
 * SUMMARY lines for bench/run.sh (no targets: the table shows how cost
 * grows with workers and devices).
 *
 *   bench_scale [--workers 1,2,4,8] [--devices-per-worker 4] [--mib 16]
 *               [--runs 3] [--dispatch-runs 100] [--coordinator PATH] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define SCALE_MAX_WORKERS 8
#define SCALE_COLS        4096

typedef struct {
    int workers, devices;
    double rpc_ms, job_ms, psum_ms, busbw;
} scale_row;

#if BENCH_HAVE_JOBS
/* Runs p over x once; *secs from submit to result ready; drops its outputs
 * but x. */
static int scale_job(sm_client *cli, const sm_program *p, sm_array_id x, double *secs, char *err,
                     size_t errlen)
{
    sm_job_info info;
    sm_array_ref arg = {.id = x};
    if (bench_job_run(cli, p, 1, &arg, secs, &info, err, errlen))
        return -1;
    bench_job_drop_but(cli, &info, x);
    return 0;
}

/* Times runs pairs after warm untimed ones, alternating: pa over x (NULL:
 * a plain RPC, bench_rpc_devices) into ta[r], then pb over x into tb[r]. */
static int scale_pairs(sm_client *cli, const sm_program *pa, const sm_program *pb, sm_array_id x,
                       int warm, int runs, double *ta, double *tb, char *err, size_t errlen)
{
    for (int r = -warm; r < runs; r++) {
        double a, b;
        if ((pa ? scale_job(cli, pa, x, &a, err, errlen)
                : bench_rpc_devices(cli, &a, err, errlen)) ||
            scale_job(cli, pb, x, &b, err, errlen))
            return -1;
        if (r >= 0) {
            ta[r] = a;
            tb[r] = b;
        }
    }
    return 0;
}

/* The psum program over n devices on blocks of rows x SCALE_COLS, applied
 * R times. */
static void scale_psum_text(int n, int64_t rows, int R, char *out, size_t len)
{
    snprintf(out, len,
             "mesh i=%d\n"
             "shard_map f(v: f32[%lld,%d] @ P('i')) -> P('i'):\n"
             "    y = v\n"
             "    for k in range(%d):\n"
             "        y = psum(y, 'i')\n"
             "    return y\n",
             n, (long long)rows * n, SCALE_COLS, R);
}

/* Uploads an f32 array of the given shape sharded P('i') over mesh i=n,
 * every element 1 (so R psums stay finite). */
static int scale_put(sm_client *cli, int n, const sm_shape *s, sm_array_info *out, char *err,
                     size_t errlen)
{
    sm_mesh mesh;
    sm_sharding_ref sh;
    int64_t count = 1;
    for (int d = 0; d < s->rank; d++)
        count *= s->dims[d];
    float *data = malloc((size_t)count * sizeof *data);
    if (!data) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int64_t k = 0; k < count; k++)
        data[k] = 1.0f;
    int rc = bench_sharding_1d(&mesh, n, "P('i')", &sh, err, errlen) ||
                     sm_client_put(cli, SM_F32, s, data, &sh, NULL, out, err, errlen)
                 ? -1
                 : 0;
    free(data);
    return rc;
}

/* Measures one cluster of w workers x d devices into *row. */
static int scale_measure(const char *bin, int w, int d, int mib, int runs, int druns,
                         scale_row *row, char *err, size_t errlen)
{
    int n = w * d, rc = 0;
    int64_t rows = ((int64_t)mib << 20) / (SCALE_COLS * 4);
    bench_cluster cl;
    sm_client *cli = NULL;
    sm_program *empty = NULL, *p1 = NULL, *p3 = NULL;
    sm_array_info x = {0}, v = {0};
    double *rpc = calloc((size_t)druns, sizeof *rpc), *job = calloc((size_t)druns, sizeof *job);
    double *t1 = calloc((size_t)runs, sizeof *t1), *t3 = calloc((size_t)runs, sizeof *t3);
    char text[1024];
    memset(row, 0, sizeof *row);
    row->workers = w;
    row->devices = n;
    if (!rpc || !job || !t1 || !t3) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (!rc && bench_cluster_start(&cl, bin, w, d, &cli, err, errlen))
        rc = -1;
    snprintf(text, sizeof text,
             "mesh i=%d\n"
             "shard_map empty(x: f32[%d] @ P('i')) -> P('i'):\n"
             "    return x\n",
             n, n);
    sm_shape small = {.rank = 1, .dims = {n}}, big = {.rank = 2, .dims = {rows * n, SCALE_COLS}};
    if (!rc &&
        (bench_program(text, &empty, err, errlen) || scale_put(cli, n, &small, &x, err, errlen)))
        rc = -1;
    if (!rc) /* a tenth as warm-up */
        rc = scale_pairs(cli, NULL, empty, x.id, druns / 10, druns, rpc, job, err, errlen);
    if (!rc) {
        scale_psum_text(n, rows, 1, text, sizeof text);
        rc = bench_program(text, &p1, err, errlen) ? -1 : 0;
    }
    if (!rc) {
        scale_psum_text(n, rows, 3, text, sizeof text);
        rc = bench_program(text, &p3, err, errlen) ? -1 : 0;
    }
    if (!rc)
        rc = scale_put(cli, n, &big, &v, err, errlen);
    if (!rc) /* one warm-up pair */
        rc = scale_pairs(cli, p1, p3, v.id, 1, runs, t1, t3, err, errlen);
    if (!rc) {
        row->rpc_ms = bench_median(rpc, druns) * 1e3;
        row->job_ms = bench_median(job, druns) * 1e3;
        double one = (bench_median(t3, runs) - bench_median(t1, runs)) / 2;
        row->psum_ms = one * 1e3;
        row->busbw = one > 0 ? (double)((int64_t)mib << 20) * 2.0 * (n - 1) / n / one / 1e9 : 0;
    }
    bench_array_drop(cli, &x);
    bench_array_drop(cli, &v);
    sm_program_free(empty);
    sm_program_free(p1);
    sm_program_free(p3);
    if (cli)
        sm_client_close(cli);
    bench_cluster_stop(&cl);
    free(rpc);
    free(job);
    free(t1);
    free(t3);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    int workers[SCALE_MAX_WORKERS] = {1, 2, 4, 8}, nw = 4, d = 4, mib = 16, runs = 3, druns = 100;
    const char *wlist = NULL;
    char bin[PATH_MAX];
    const bench_opt opts[] = {BENCH_OPT_STR("workers", 'w', &wlist),
                              BENCH_OPT_INT("devices-per-worker", 'd', &d),
                              BENCH_OPT_INT("mib", 'm', &mib), BENCH_OPT_INT("runs", 'r', &runs),
                              BENCH_OPT_INT("dispatch-runs", 'D', &druns)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_scale [--workers 1,2,4,8] [--devices-per-worker 4] [--mib 16]\n"
        "                   [--runs 3] [--dispatch-runs 100] [--coordinator PATH]\n"
        "How an empty job's round trip (vs a plain RPC) and a psum of MIB per device\n"
        "grow with the number of local workers (each with the given devices).\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;
    if (wlist) {
        nw = 0;
        for (char *end; *wlist && nw < SCALE_MAX_WORKERS; wlist = *end ? end + 1 : end) {
            long v = strtol(wlist, &end, 10);
            if (end == wlist || v < 1 || v > 64 || (*end && *end != ',')) {
                fprintf(stderr, "bench_scale: --workers takes counts 1..64, like 1,2,4,8\n");
                return 2;
            }
            workers[nw++] = (int)v;
        }
    }
    if (d < 1 || d > 64 || mib < 1 || mib > 1024 || runs < 1 || runs > 100 || druns < 10 ||
        druns > 100000 || nw == 0) {
        fprintf(stderr, "bench_scale: a count out of range (see --help)\n");
        return 2;
    }
#if BENCH_HAVE_JOBS
    char err[1024];
    printf("bench_scale: %d devices per worker, psum of %d MiB per device, medians of %d psum "
           "runs and %d dispatch runs\n\n",
           d, mib, runs, druns);
    printf("%8s %8s %10s %10s %12s %12s %12s\n", "workers", "devices", "rpc ms", "job ms",
           "job-rpc ms", "psum ms", "busbw GB/s");
    scale_row rows[SCALE_MAX_WORKERS];
    for (int k = 0; k < nw; k++) {
        if (scale_measure(bin, workers[k], d, mib, runs, druns, &rows[k], err, sizeof err)) {
            fprintf(stderr, "bench_scale: %d workers: %s\n", workers[k], err);
            return 1;
        }
        const scale_row *r = &rows[k];
        printf("%8d %8d %10.3f %10.3f %12.3f %12.1f %12.2f\n", r->workers, r->devices, r->rpc_ms,
               r->job_ms, r->job_ms - r->rpc_ms, r->psum_ms, r->busbw);
        fflush(stdout);
    }
    printf("\n");
    for (int k = 0; k < nw; k++) {
        char fig[96];
        const scale_row *r = &rows[k];
        snprintf(fig, sizeof fig, "dispatch, %d workers x %d devices", r->workers, d);
        bench_summary("scale", fig, r->job_ms, "ms", "RPC", r->rpc_ms, "", -1);
        snprintf(fig, sizeof fig, "psum %d MiB, %d workers x %d devices", mib, r->workers, d);
        bench_summary("scale", fig, r->busbw, "GB/s busbw", "1 worker", rows[0].busbw, "", -1);
    }
    return 0;
#else
    (void)workers;
    printf("bench_scale: jobs not available in this build\n");
    return 0;
#endif
}
