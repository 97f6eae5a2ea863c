/* bench_state: what durability costs. The round trip of an empty job and a
 * 16 MiB upload on a cluster of 2 workers x 4 devices with state dirs (the
 * coordinator's SQLite registry, the workers' background disk copies:
 * SHMAP_STATE_DIR, which the local workers follow) against the same
 * cluster without, measured one after the other in the same run. The
 * uploaded arrays are kept until the last upload ends, so their disk copies
 * are written while the next uploads run. Targets: both within 10% of the
 * figures without state dirs.
 *
 *     bench_state [--runs N] [--upload-runs N] [--coordinator PATH]
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define STATE_MAX_RUNS 10000
#define UPLOAD_MIB     16

static const char empty_program[] = "mesh i=8\n"
                                    "shard_map empty(x: f32[8] @ P('i')) -> P('i'):\n"
                                    "    return x\n";

typedef struct {
    double job_ms;    /* empty job round trip, median */
    double upload_mb; /* 16 MiB upload, MB/s, median */
} state_figures;

#if BENCH_HAVE_JOBS
/* Measures one cluster, started with the state dir dir (NULL: none). */
static int measure(const char *bin, const char *dir, int runs, int uploads, state_figures *out,
                   char *err, size_t errlen)
{
    bench_cluster cl;
    sm_client *cli = NULL;
    if (dir)
        setenv("SHMAP_STATE_DIR", dir, 1);
    else
        unsetenv("SHMAP_STATE_DIR");
    int rc = bench_cluster_start(&cl, bin, 2, 4, &cli, err, errlen);
    unsetenv("SHMAP_STATE_DIR");
    sm_program *prog = NULL;
    sm_array_info x = {0};
    double *job = calloc((size_t)runs, sizeof *job), *up = calloc((size_t)uploads, sizeof *up);
    size_t bytes = (size_t)UPLOAD_MIB << 20;
    float *data = malloc(bytes);
    const char *names[] = {"i"};
    int64_t sizes[] = {8};
    sm_mesh mesh;
    sm_sharding_ref sh = {.mesh = &mesh, .default_order = 1};
    float xs[8] = {0};
    sm_shape s8 = {.rank = 1, .dims = {8}},
             big = {.rank = 2, .dims = {(int64_t)(bytes / 16384), 4096}};
    if (!rc && (!job || !up || !data)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (!rc && (bench_program(empty_program, &prog, err, errlen) ||
                sm_mesh_init(&mesh, 1, names, sizes, NULL, 8, err, errlen) ||
                sm_pspec_parse("P('i')", &sh.spec, err, errlen) ||
                sm_client_put(cli, SM_F32, &s8, xs, &sh, NULL, &x, err, errlen)))
        rc = -1;
    for (size_t k = 0; !rc && k < bytes / 4; k++)
        data[k] = (float)(k % 1000003);
    sm_array_ref arg = {.id = x.id};
    for (int r = -runs / 10; !rc && r < runs; r++) { /* a tenth of the runs as warm-up */
        double t;
        sm_job_info info;
        if (bench_job_run(cli, prog, 1, &arg, &t, &info, err, errlen)) {
            rc = -1;
            break;
        }
        bench_job_drop_but(cli, &info, x.id); /* an output aliasing x stays */
        if (r >= 0)
            job[r] = t;
    }
    sm_array_id *kept = calloc((size_t)uploads + 1, sizeof *kept);
    if (!kept)
        rc = -1;
    for (int r = -1; !rc && r < uploads; r++) { /* one untimed */
        sm_array_info a = {0};
        double t0 = bench_now_s();
        if (sm_client_put(cli, SM_F32, &big, data, &sh, NULL, &a, err, errlen)) {
            rc = -1;
            break;
        }
        double t = bench_now_s() - t0;
        kept[r + 1] = a.id;
        sm_array_info_free(&a);
        if (r >= 0)
            up[r] = (double)bytes / t / 1e6;
    }
    for (int r = 0; kept && r <= uploads; r++) {
        sm_array_ref ref = {.id = kept[r]};
        if (ref.id.v)
            sm_client_delete(cli, ref, err, errlen);
    }
    free(kept);
    if (!rc) {
        out->job_ms = bench_median(job, runs) * 1e3;
        out->upload_mb = bench_median(up, uploads);
    }
    if (x.id.v)
        sm_client_delete(cli, arg, err, errlen);
    sm_array_info_free(&x);
    sm_program_free(prog);
    free(job);
    free(up);
    free(data);
    if (cli)
        sm_client_close(cli);
    bench_cluster_stop(&cl);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    int runs = 200, uploads = 9;
    const char *binarg = NULL;
    static const struct option opts[] = {{"runs", required_argument, 0, 'r'},
                                         {"upload-runs", required_argument, 0, 'u'},
                                         {"coordinator", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "r:u:c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'r':
            runs = atoi(optarg);
            break;
        case 'u':
            uploads = atoi(optarg);
            break;
        case 'c':
            binarg = optarg;
            break;
        default:
            printf("usage: bench_state [--runs N] [--upload-runs N] [--coordinator PATH]\n"
                   "The empty-job round trip (N runs, default 200) and the %d MiB upload (default "
                   "9 runs) on 2 workers x 4 devices with state dirs (SHMAP_STATE_DIR) against "
                   "without, same run.\n",
                   UPLOAD_MIB);
            return o == 'h' ? 0 : 2;
        }
    }
    if (runs < 10 || runs > STATE_MAX_RUNS)
        runs = 200;
    if (uploads < 1 || uploads > 100)
        uploads = 9;
#if BENCH_HAVE_JOBS
    char bin[PATH_MAX], err[1024], dir[] = "/tmp/shmap-bench-state-XXXXXX";
    if (bench_coordinator_path(binarg, bin, sizeof bin))
        return 1;
    if (!mkdtemp(dir)) {
        perror("bench_state: mkdtemp");
        return 1;
    }
    state_figures without, with;
    printf("bench_state: 2 workers x 4 devices, %d empty jobs and %d uploads of %d MiB each "
           "(medians), without then with state dirs\n\n",
           runs, uploads, UPLOAD_MIB);
    if (measure(bin, NULL, runs, uploads, &without, err, sizeof err) ||
        measure(bin, dir, runs, uploads, &with, err, sizeof err)) {
        fprintf(stderr, "bench_state: %s\n", err);
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_state: could not remove %s\n", dir);
        return 1;
    }
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_state: could not remove %s\n", dir);
    printf("%-34s %14s %14s %8s\n", "", "without", "with", "ratio");
    printf("%-34s %14.3f %14.3f %8.2f\n", "empty job round trip, ms", without.job_ms, with.job_ms,
           with.job_ms / without.job_ms);
    printf("%-34s %14.0f %14.0f %8.2f\n", "16 MiB upload, MB/s", without.upload_mb, with.upload_mb,
           with.upload_mb / without.upload_mb);
    bench_summary("state", "empty job with --state-dir", with.job_ms, "ms", "without",
                  without.job_ms, "<= 1.1x", with.job_ms <= 1.1 * without.job_ms);
    bench_summary("state", "upload 16 MiB with --state-dir", with.upload_mb, "MB/s", "without",
                  without.upload_mb, ">= 0.9x", with.upload_mb >= 0.9 * without.upload_mb);
    return 0;
#else
    (void)binarg;
    printf("bench_state: jobs not available in this build\n");
    return 0;
#endif
}
