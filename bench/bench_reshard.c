/* bench_reshard: reshards between the workers of one host through shared
 * memory against the same reshards over the GetShard streams, measured side
 * by side in the same run.
 *
 * Starts two local clusters of 2 workers x 4 devices: one with the default
 * transport (the workers pull the pieces they need from each other through
 * staging files in shared memory) and one whose workers run --transport grpc
 * (SHMAP_TRANSPORT=grpc: the same pieces over the GetShard streams, the
 * anchor). For each size, uploads an f32 array with P('i', None) over mesh
 * i=8 to both, then times, alternating between the clusters, the reshard to
 * P(None, 'i') (each device keeps half of its new column block and pulls the
 * other half from the other worker: half the array moves between workers)
 * and to P() (each worker pulls the other worker's half of the whole array
 * once, and its 4 devices share the bytes: the array moves once), deleting
 * each result (not timed). Prints medians in
 * MB/s of the array's bytes per reshard, the bytes moved between workers per
 * second, and the shm/gRPC ratio.
 *
 *   bench_reshard [--sizes 64,256] [--runs 5] [--warmup 1] [--coordinator PATH]
 *
 * Sizes are in MiB. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define RESHARD_MAX_RUNS 50

/* The clusters: [0] through shared memory, [1] over gRPC. */
static const char *const reshard_label[2] = {"shm", "grpc"};

/* One timed reshard of src to spec over mesh on cli: seconds, or < 0 with a
 * sentence in err. The new array is deleted (not timed). */
static double reshard_seconds(sm_client *cli, sm_array_id src, const sm_mesh *mesh,
                              const char *spec, char *err, size_t errlen)
{
    sm_sharding_ref sh = {.mesh = mesh, .default_order = 1};
    sm_array_info info;
    if (sm_pspec_parse(spec, &sh.spec, err, errlen))
        return -1;
    double t0 = bench_now_s();
    if (sm_client_reshard(cli, (sm_array_ref){.id = src}, &sh, NULL, &info, err, errlen))
        return -1;
    double t = bench_now_s() - t0;
    sm_client_delete(cli, (sm_array_ref){.id = info.id}, err, errlen);
    sm_array_info_free(&info);
    return t;
}

int main(int argc, char **argv)
{
    const char *sizes_arg = "64,256";
    int runs = 5, warmup = 1;
    char bin[PATH_MAX], err[1024];
    const bench_opt opts[] = {BENCH_OPT_STR("sizes", 's', &sizes_arg),
                              BENCH_OPT_RANGE("runs", 'r', &runs, 1, RESHARD_MAX_RUNS),
                              BENCH_OPT_RANGE("warmup", 'w', &warmup, 0, 10)};
    int parsed = bench_options_cluster(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_reshard [--sizes MiB,MiB,...] [--runs N] [--warmup N] [--coordinator "
        "PATH]\n"
        "Reshards between 2 workers of one host through shared memory vs over gRPC\n"
        "(--transport grpc workers), same run.\n",
        bin, sizeof bin);
    if (parsed >= 0)
        return parsed;

    bench_cluster cl[2] = {{0}, {0}};
    sm_client *cli[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        if (k == 1)
            setenv("SHMAP_TRANSPORT", "grpc", 1); /* the workers inherit it */
        rc = bench_cluster_start(&cl[k], bin, 2, 4, &cli[k], err, sizeof err) != 0;
        unsetenv("SHMAP_TRANSPORT");
        if (rc)
            fprintf(stderr, "bench_reshard: %s cluster: %s\n", reshard_label[k], err);
    }
    sm_mesh mesh;
    sm_sharding_ref rows;
    bench_sharding_1d(&mesh, 8, "P('i', None)", &rows, err, sizeof err);
    static const struct {
        const char *spec, *name;
        double moved; /* bytes between workers per array byte */
    } to[] = {{"P(None, 'i')", "rows to columns", 0.5}, {"P()", "rows to replicated", 1}};

    if (!rc)
        printf("bench_reshard: f32 arrays from P('i', None) over mesh i=8, 2 workers x 4 "
               "devices, %d runs each after %d untimed, medians (MB = 10^6 bytes of the "
               "array per second; moved: between workers)\n\n%-20s %6s  %10s  %10s  %12s  "
               "%12s  %8s\n",
               runs, warmup, "reshard", "MiB", "shm MB/s", "grpc MB/s", "shm moved", "grpc moved",
               "shm/grpc");
    char *sz = strdup(sizes_arg);
    for (char *tok = sz && !rc ? strtok(sz, ",") : NULL; tok && !rc; tok = strtok(NULL, ",")) {
        long mib = atol(tok);
        if (mib <= 0)
            continue;
        size_t bytes = (size_t)mib << 20;
        sm_shape shape = {.rank = 2, .dims = {(int64_t)(bytes / 4 / 4096), 4096}};
        float *data = malloc(bytes);
        sm_array_id src[2] = {{0}, {0}};
        for (size_t i = 0; data && i < bytes / 4; i++)
            data[i] = (float)(i % 1000003);
        for (int k = 0; k < 2 && !rc; k++) {
            sm_array_info info;
            if (!data ||
                sm_client_put(cli[k], SM_F32, &shape, data, &rows, NULL, &info, err, sizeof err)) {
                fprintf(stderr, "bench_reshard: put %ld MiB: %s\n", mib,
                        data ? err : "out of memory");
                rc = 1;
                break;
            }
            src[k] = info.id;
            sm_array_info_free(&info);
        }
        free(data);
        for (size_t p = 0; p < sizeof to / sizeof to[0] && !rc; p++) {
            double mbs[2][RESHARD_MAX_RUNS + 10];
            for (int run = -warmup; run < runs && !rc; run++)
                for (int k = 0; k < 2 && !rc; k++) {
                    double t = reshard_seconds(cli[k], src[k], &mesh, to[p].spec, err, sizeof err);
                    if (t <= 0) {
                        fprintf(stderr, "bench_reshard: %s reshard to %s: %s\n", reshard_label[k],
                                to[p].spec, err);
                        rc = 1;
                    } else if (run >= 0) {
                        mbs[k][run] = (double)bytes / t / 1e6;
                    }
                }
            if (rc)
                break;
            double m[2] = {bench_median(mbs[0], runs), bench_median(mbs[1], runs)};
            printf("%-20s %6ld  %10.0f  %10.0f  %12.0f  %12.0f  %8.2f\n", to[p].name, mib, m[0],
                   m[1], m[0] * to[p].moved, m[1] * to[p].moved, m[1] > 0 ? m[0] / m[1] : 0);
            fflush(stdout);
            char figure[96];
            snprintf(figure, sizeof figure, "reshard %s %ld MiB, shm", to[p].name, mib);
            bench_summary("reshard", figure, m[0], "MB/s", "the same over gRPC", m[1], "", -1);
        }
        for (int k = 0; k < 2; k++)
            if (src[k].v)
                sm_client_delete(cli[k], (sm_array_ref){.id = src[k]}, err, sizeof err);
    }
    free(sz);
    for (int k = 0; k < 2; k++) {
        if (cli[k])
            sm_client_close(cli[k]);
        bench_cluster_stop(&cl[k]);
    }
    return rc;
}
