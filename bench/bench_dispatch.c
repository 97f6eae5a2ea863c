/* bench_dispatch: round trip of an empty shard_map job against a plain unary
 * RPC, measured side by side in the same run.
 *
 * Starts a local cluster of 2 workers x 4 devices, uploads x: f32[8] with
 * P('i') over mesh i=8 once, then times `return x` from submit to result
 * ready with sm_job_run (submit and wait in one call), deleting the output
 * between runs (not timed). The anchor is sm_client_devices, a unary RPC the
 * coordinator answers from its registry. The same job submitted with
 * sm_job_submit and then awaited with sm_job_wait (two calls) is timed too,
 * for comparison. The three are interleaved. Prints median and p90 over the
 * timed runs after the warm-up; the target is a median job round trip
 * (sm_job_run) <= 0.5 ms.
 *
 *   bench_dispatch [--runs 200] [--warmup 20] [--coordinator PATH] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define DISPATCH_MAX_RUNS  100000
#define DISPATCH_TARGET_MS 0.5

static const char dispatch_program[] = "mesh i=8\n"
                                       "shard_map empty(x: f32[8] @ P('i')) -> P('i'):\n"
                                       "    return x\n";

int main(int argc, char **argv)
{
    int runs = 200, warmup = 20;
    char bin[PATH_MAX], err[1024];
    const bench_opt opts[] = {BENCH_OPT_RANGE("runs", 'r', &runs, 1, DISPATCH_MAX_RUNS),
                              BENCH_OPT_RANGE("warmup", 'w', &warmup, 0, DISPATCH_MAX_RUNS)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_dispatch [--runs N] [--warmup W] [--coordinator PATH]\n"
        "Round trip of an empty shard_map job (return x, 8 devices on 2 workers x 4)\n"
        "with sm_job_run, and with sm_job_submit + sm_job_wait, vs a plain unary RPC\n"
        "(sm_client_devices), same run. N defaults to 200, W to 20.\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;
    double *rpc = calloc((size_t)runs, sizeof *rpc), *job = calloc((size_t)runs, sizeof *job);
    double *svc = calloc((size_t)runs, sizeof *svc); /* service side: queued + run */
    double *two = calloc((size_t)runs, sizeof *two); /* submit, then wait */
    if (!rpc || !job || !svc || !two)
        return 1;

    bench_cluster cl;
    sm_client *cli = NULL;
    if (bench_cluster_start(&cl, bin, 2, 4, &cli, err, sizeof err)) {
        fprintf(stderr, "bench_dispatch: cluster not ready: %s\n", err);
        bench_cluster_stop(&cl);
        return 1;
    }
    printf("bench_dispatch: 2 workers x 4 devices, %d runs after %d warm-up, times in ms\n", runs,
           warmup);
    int rc = 0, have_jobs = BENCH_HAVE_JOBS;
#if BENCH_HAVE_JOBS
    sm_program *prog = NULL;
    sm_array_info x = {0};
    float xs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    sm_mesh mesh;
    sm_shape shape = {.rank = 1, .dims = {8}};
    sm_sharding_ref sh;
    if (bench_program(dispatch_program, &prog, err, sizeof err) ||
        bench_sharding_1d(&mesh, 8, "P('i')", &sh, err, sizeof err) ||
        sm_client_put(cli, SM_F32, &shape, xs, &sh, NULL, &x, err, sizeof err)) {
        fprintf(stderr, "bench_dispatch: setup: %s\n", err);
        rc = 1;
        have_jobs = 0;
    }
    sm_array_ref arg = {.id = x.id};
#else
    printf("jobs not available in this build (no client/lib/shmap_job.h): RPC anchor only\n");
    (void)dispatch_program;
#endif

    for (int r = -warmup; r < runs && !rc; r++) {
        double t;
        if (bench_rpc_devices(cli, &t, err, sizeof err)) {
            fprintf(stderr, "bench_dispatch: devices RPC: %s\n", err);
            rc = 1;
            break;
        }
        if (r >= 0)
            rpc[r] = t;
#if BENCH_HAVE_JOBS
        if (have_jobs) {
            double v = 0;
            if (bench_job_run_one(cli, prog, &arg, &t, &v, err, sizeof err)) {
                fprintf(stderr, "bench_dispatch: job: %s\n", err);
                rc = 1;
                break;
            }
            if (r >= 0) {
                job[r] = t;
                svc[r] = v;
            }
            sm_job_info info;
            if (bench_job_run(cli, prog, 1, &arg, &t, &info, err, sizeof err)) {
                fprintf(stderr, "bench_dispatch: job (submit, wait): %s\n", err);
                rc = 1;
                break;
            }
            if (r >= 0)
                two[r] = t;
            bench_job_drop_but(cli, &info, x.id); /* an output aliasing x stays */
        }
#endif
    }

    if (!rc) {
        double rm = bench_median(rpc, runs) * 1e3, r90 = bench_percentile(rpc, runs, 90) * 1e3;
        printf("\n%-36s %10s %10s\n", "", "median", "p90");
        printf("%-36s %10.3f %10.3f\n", "anchor: unary RPC (devices)", rm, r90);
        bench_summary("dispatch", "devices RPC round trip, median", rm, "ms", "", 0, "", -1);
        if (have_jobs) {
            double jm = bench_median(job, runs) * 1e3, j90 = bench_percentile(job, runs, 90) * 1e3;
            printf("%-36s %10.3f %10.3f   (%.1fx the RPC; target median <= %.1f ms)\n",
                   "empty job, 8 devices", jm, j90, jm / rm, DISPATCH_TARGET_MS);
            double sm = bench_median(svc, runs) * 1e3;
            printf("%-36s %10.3f   (the job's queued_us + run_us as the service reports them)\n",
                   "  of which queued + run", sm);
            double tm = bench_median(two, runs) * 1e3, t90 = bench_percentile(two, runs, 90) * 1e3;
            printf("%-36s %10.3f %10.3f   (sm_job_submit, then sm_job_wait)\n",
                   "same job in two calls", tm, t90);
            bench_summary("dispatch", "empty job round trip, median", jm, "ms", "devices RPC", rm,
                          "<= 0.5 ms", jm <= DISPATCH_TARGET_MS);
            bench_summary("dispatch", "empty job round trip, p90", j90, "ms", "devices RPC p90",
                          r90, "", -1);
        } else {
            bench_summary("dispatch", "empty job round trip (jobs n/a)", -1, "ms", "devices RPC",
                          rm, "<= 0.5 ms", -1);
        }
    }
#if BENCH_HAVE_JOBS
    if (x.id.v)
        sm_client_delete(cli, arg, err, sizeof err);
    sm_array_info_free(&x);
    sm_program_free(prog);
#endif
    sm_client_close(cli);
    bench_cluster_stop(&cl);
    free(rpc);
    free(job);
    free(svc);
    free(two);
    return rc;
}
