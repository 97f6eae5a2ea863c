/* bench_state: what durability costs. The round trip of an empty job and a
 * 16 MiB upload on a cluster of 2 workers x 4 devices with state dirs (the
 * coordinator's SQLite registry, the workers' background disk copies:
 * SHMAP_STATE_DIR, which the local workers follow) against the same
 * cluster without, both running in the same run and measured in
 * alternating blocks. The uploaded arrays are kept until the end, so their
 * disk copies are written while the block's next uploads run. The job is
 * timed with sm_job_run, the call bench_dispatch's figure measures, and
 * with sm_job_submit + sm_job_wait (printed; a submitted job's record is
 * written before its id is returned, so it pays one more transaction).
 * Targets: the sm_job_run round trip and the upload within 10% of the
 * figures without state dirs.
 *
 *     bench_state [--runs N] [--upload-runs N] [--coordinator PATH]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
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
    double job_ms;    /* empty job round trip with sm_job_run, median */
    double job2_ms;   /* the same with sm_job_submit + sm_job_wait, median */
    double upload_mb; /* 16 MiB upload, MB/s, median */
} state_figures;

#if BENCH_HAVE_JOBS
/* One of the two clusters: its processes, client, the job's argument and
 * every array uploaded, kept until the end. */
typedef struct {
    bench_cluster cl;
    int started;
    sm_client *cli;
    sm_array_info x;
    sm_array_id *kept;
    int nkept;
    double *job, *job2, *up; /* timings so far: sm_job_run, submit + wait, uploads */
    int njob, nup;
} state_side;

static int side_start(state_side *sd, const char *bin, const char *dir, int runs, int uploads,
                      char *err, size_t errlen)
{
    if (dir)
        setenv("SHMAP_STATE_DIR", dir, 1);
    else
        unsetenv("SHMAP_STATE_DIR");
    int rc = bench_cluster_start(&sd->cl, bin, 2, 4, &sd->cli, err, errlen);
    unsetenv("SHMAP_STATE_DIR");
    if (rc)
        return -1;
    sd->started = 1;
    sd->job = calloc((size_t)runs, sizeof *sd->job);
    sd->job2 = calloc((size_t)runs, sizeof *sd->job2);
    sd->up = calloc((size_t)uploads, sizeof *sd->up);
    sd->kept = calloc((size_t)uploads + 1, sizeof *sd->kept);
    if (!sd->job || !sd->job2 || !sd->up || !sd->kept) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void side_stop(state_side *sd)
{
    char err[256];
    for (int r = 0; r < sd->nkept; r++) {
        sm_array_ref ref = {.id = sd->kept[r]};
        sm_client_delete(sd->cli, ref, err, sizeof err);
    }
    bench_array_drop(sd->cli, &sd->x);
    free(sd->kept);
    free(sd->job);
    free(sd->job2);
    free(sd->up);
    if (sd->cli)
        sm_client_close(sd->cli);
    if (sd->started)
        bench_cluster_stop(&sd->cl);
}

/* jobs empty jobs (timed unless warm) and uploads 16 MiB uploads. */
static int side_block(state_side *sd, const sm_program *prog, const sm_sharding_ref *sh,
                      const float *data, int jobs, int uploads, int warm, char *err, size_t errlen)
{
    size_t bytes = (size_t)UPLOAD_MIB << 20;
    sm_shape big = {.rank = 2, .dims = {(int64_t)(bytes / 16384), 4096}};
    sm_array_ref arg = {.id = sd->x.id};
    for (int r = 0; r < jobs; r++) { /* each form in turn, alike */
        double t, t2;
        sm_job_info info;
        if (bench_job_run_one(sd->cli, prog, &arg, &t, NULL, err, errlen) ||
            bench_job_run(sd->cli, prog, 1, &arg, &t2, &info, err, errlen))
            return -1;
        bench_job_drop_but(sd->cli, &info, sd->x.id); /* an output aliasing x stays */
        if (!warm) {
            sd->job[sd->njob] = t;
            sd->job2[sd->njob++] = t2;
        }
    }
    for (int r = 0; r < uploads; r++) {
        sm_array_info a = {0};
        double t0 = bench_now_s();
        if (sm_client_put(sd->cli, SM_F32, &big, data, sh, NULL, &a, err, errlen))
            return -1;
        double t = bench_now_s() - t0;
        sd->kept[sd->nkept++] = a.id;
        sm_array_info_free(&a);
        if (!warm)
            sd->up[sd->nup++] = (double)bytes / t / 1e6;
    }
    return 0;
}

/* Waits until the workers of the cluster with state dirs (dir) hold a
 * disk copy (a .sum file) of every shard kept: shards of them in all,
 * over 2 workers. 0 when they do, -1 after 60 s (a bench cannot tell a
 * slow disk from a stuck writer sooner). */
static int copies_written(const char *dir, int shards)
{
    for (int64_t t = 0; t < 60000; t += 10) {
        int got = 0;
        for (int k = 0; k < 2; k++) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/worker-%d/shards", dir, k);
            DIR *d = opendir(path);
            struct dirent *de;
            while (d && (de = readdir(d)))
                got += strstr(de->d_name, ".sum") && !strstr(de->d_name, ".tmp");
            if (d)
                closedir(d);
        }
        if (got >= shards)
            return 0;
        usleep(10 * 1000);
    }
    return -1;
}

/* Both clusters run side by side and are measured in alternating blocks
 * (the order swapped every round), so that a change in the machine's load
 * falls on both alike. After a block on the cluster with state dirs, the
 * bench waits until its disk copies are written (however fast the disk)
 * before the next block, so that neither cluster's jobs run beside the
 * other's, or its own, earlier uploads still going to disk; each
 * cluster's uploads share the cores only with their own background
 * work. */
static int measure(const char *bin, const char *dir, int runs, int uploads, state_figures *without,
                   state_figures *with, char *err, size_t errlen)
{
    state_side sd[2]; /* 0: without, 1: with */
    memset(sd, 0, sizeof sd);
    sm_program *prog = NULL;
    size_t bytes = (size_t)UPLOAD_MIB << 20;
    float *data = malloc(bytes);
    sm_mesh mesh;
    sm_sharding_ref sh = {0};
    float xs[8] = {0};
    sm_shape s8 = {.rank = 1, .dims = {8}};
    int rc = data ? 0 : -1;
    if (rc)
        snprintf(err, errlen, "out of memory");
    for (size_t k = 0; !rc && k < bytes / 4; k++)
        data[k] = (float)(k % 1000003);
    if (!rc && (bench_program(empty_program, &prog, err, errlen) ||
                bench_sharding_1d(&mesh, 8, "P('i')", &sh, err, errlen)))
        rc = -1;
    for (int c = 0; c < 2 && !rc; c++)
        if (side_start(&sd[c], bin, c ? dir : NULL, runs, uploads, err, errlen) ||
            sm_client_put(sd[c].cli, SM_F32, &s8, xs, &sh, NULL, &sd[c].x, err, errlen) ||
            side_block(&sd[c], prog, &sh, data, runs / 10, 1, 1, err, errlen)) /* warm-up */
            rc = -1;
    const int rounds = 10; /* blocks per cluster: more, shorter ones average out the load */
    for (int r = 0; r < rounds && !rc; r++) {
        int jobs = runs * (r + 1) / rounds - runs * r / rounds;
        int ups = uploads * (r + 1) / rounds - uploads * r / rounds;
        for (int k = 0; k < 2 && !rc; k++) {
            int c = (r + k) % 2;
            rc = side_block(&sd[c], prog, &sh, data, jobs, ups, 0, err, errlen);
            if (!rc && c == 1 && copies_written(dir, 8 * (sd[c].nkept + 1))) { /* + x */
                snprintf(err, errlen, "the workers' disk copies were not written within 60 s");
                rc = -1;
            }
        }
    }
    if (!rc) {
        without->job_ms = bench_median(sd[0].job, sd[0].njob) * 1e3;
        without->job2_ms = bench_median(sd[0].job2, sd[0].njob) * 1e3;
        with->job2_ms = bench_median(sd[1].job2, sd[1].njob) * 1e3;
        without->upload_mb = bench_median(sd[0].up, sd[0].nup);
        with->job_ms = bench_median(sd[1].job, sd[1].njob) * 1e3;
        with->upload_mb = bench_median(sd[1].up, sd[1].nup);
    }
    side_stop(&sd[0]);
    side_stop(&sd[1]);
    sm_program_free(prog);
    free(data);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    int runs = 1000, uploads = 30;
    char bin[PATH_MAX];
    const bench_opt opts[] = {BENCH_OPT_RANGE("runs", 'r', &runs, 10, STATE_MAX_RUNS),
                              BENCH_OPT_RANGE("upload-runs", 'u', &uploads, 1, 100)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_state [--runs N] [--upload-runs N] [--coordinator PATH]\n"
        "The empty-job round trip (N runs, default 1000, with sm_job_run, the dispatch bench's "
        "figure, and with sm_job_submit + sm_job_wait) and the 16 MiB upload (default "
        "30 runs) on 2 workers x 4 devices with state dirs (SHMAP_STATE_DIR) against "
        "without, same run.\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;
#if BENCH_HAVE_JOBS
    char err[1024], dir[] = "/tmp/shmap-bench-state-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_state: mkdtemp");
        return 1;
    }
    state_figures without = {0}, with = {0};
    printf("bench_state: 2 workers x 4 devices, %d empty jobs and %d uploads of %d MiB each "
           "(medians), with and without state dirs in alternating blocks\n\n",
           runs, uploads, UPLOAD_MIB);
    if (measure(bin, dir, runs, uploads, &without, &with, err, sizeof err)) {
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
    printf("%-34s %14.3f %14.3f %8.2f\n", "empty job (sm_job_run), ms", without.job_ms, with.job_ms,
           with.job_ms / without.job_ms);
    printf("%-34s %14.3f %14.3f %8.2f\n", "the same, submit + wait, ms", without.job2_ms,
           with.job2_ms, with.job2_ms / without.job2_ms);
    printf("%-34s %14.0f %14.0f %8.2f\n", "16 MiB upload, MB/s", without.upload_mb, with.upload_mb,
           with.upload_mb / without.upload_mb);
    bench_summary("state", "empty job with --state-dir", with.job_ms, "ms", "without",
                  without.job_ms, "<= 1.1x", with.job_ms <= 1.1 * without.job_ms);
    bench_summary("state", "upload 16 MiB with --state-dir", with.upload_mb, "MB/s", "without",
                  without.upload_mb, ">= 0.9x", with.upload_mb >= 0.9 * without.upload_mb);
    return 0;
#else
    printf("bench_state: jobs not available in this build\n");
    return 0;
#endif
}
