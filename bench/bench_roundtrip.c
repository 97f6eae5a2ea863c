/* bench_roundtrip: the C library's anchor for bench/bench_python.py — one
 * device_put (sm_client_put) and one fetch into a reused buffer
 * (sm_client_get_into) of an N MiB f32 array sharded P('i') over mesh
 * (D,), against a running cluster; prints the seconds of each round trip,
 * one per line, so the Python benchmark can alternate it with its own runs.
 *
 *   bench_roundtrip --target HOST:PORT [--mib 256] [--devices 8] [--runs 1] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sm_rpc.h"

int main(int argc, char **argv)
{
    const char *target = NULL;
    int mib = 256, ndev = 8, runs = 1;
    const bench_opt opts[] = {BENCH_OPT_STR("target", 't', &target),
                              BENCH_OPT_INT("mib", 'm', &mib), BENCH_OPT_INT("devices", 'd', &ndev),
                              BENCH_OPT_INT("runs", 'r', &runs)};
    int parsed = bench_options(
        argc, argv, opts, BENCH_NOPTS(opts),
        "usage: bench_roundtrip --target HOST:PORT [--mib N] [--devices D] [--runs R]\n"
        "Seconds of R round trips (put + get into a reused buffer) of an N MiB f32\n"
        "array sharded P('i') over mesh (D,), one per line.\n");
    if (parsed >= 0)
        return parsed;
    if (!target || mib < 1 || ndev < 1 || runs < 1) {
        fprintf(stderr, "bench_roundtrip: --target is required; sizes must be positive\n");
        return 2;
    }
    size_t n = (size_t)mib << 18; /* f32 elements */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y)
        return 1;
    for (size_t k = 0; k < n; k++)
        x[k] = (float)(k % 1000);
    memset(y, 0, n * sizeof *y);
    char err[1024];
    sm_client *c = NULL;
    sm_client_opts co = {.stage_mb = SM_CLIENT_STAGE_MB_DEFAULT};
    sm_rpc_malloc_tune();
    if (sm_client_opts_from_env(&co, err, sizeof err) ||
        sm_client_connect(target, &co, &c, err, sizeof err)) {
        fprintf(stderr, "bench_roundtrip: %s\n", err);
        return 1;
    }
    sm_mesh mesh;
    sm_shape shape = {.rank = 1, .dims = {(int64_t)n}};
    sm_sharding_ref sh;
    if (bench_sharding_1d(&mesh, ndev, "P('i')", &sh, err, sizeof err)) {
        fprintf(stderr, "bench_roundtrip: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (int r = 0; r < runs && !rc; r++) {
        sm_array_info info;
        double t0 = bench_now_s();
        if (sm_client_put(c, SM_F32, &shape, x, &sh, NULL, &info, err, sizeof err) ||
            sm_client_get_into(c, &info, y, n * sizeof *y, err, sizeof err)) {
            fprintf(stderr, "bench_roundtrip: %s\n", err);
            rc = 1;
            break;
        }
        printf("%.6f\n", bench_now_s() - t0);
        fflush(stdout);
        sm_client_delete(c, (sm_array_ref){.id = info.id}, err, sizeof err);
        sm_array_info_free(&info);
        if (memcmp(x, y, n * sizeof *y)) {
            fprintf(stderr, "bench_roundtrip: the fetched array differs\n");
            rc = 1;
        }
    }
    sm_client_close(c);
    free(x);
    free(y);
    return rc;
}
