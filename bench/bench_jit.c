/* bench_jit: the scaling book's global-view matmul — einsum of
 * f32[N@X, N@Y] by f32[N@Y, N] with out_sharding=P('X', 'Y') on mesh
 * (2,2) over 2 workers x 2 devices — as a jit job, against the same
 * product written by hand as a shard_map job (a local dot, then
 * psum_scatter over Y along dimension 1), measured side by side in the same
 * run. The service lowers the jit program to exactly that shard_map
 * program, so the target is parity: the jit job within 5% of the
 * hand-written one (its GFLOP/s at least 0.95 of the hand-written job's).
 *
 * a and b are uploaded once (resident); runs alternate hand, jit, hand ...;
 * each job is timed from submit to result ready (sm_job_submit +
 * sm_job_wait); the first result of each is fetched and compared with the
 * other's.
 *
 *   bench_jit [--n 4096] [--runs 5] [--coordinator PATH] */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sm_kern.h"

#define BENCH_MAX_RUNS 50

int main(int argc, char **argv)
{
    sm_kern_coretype_setup(argc, argv);
    int n, runs;
    char bin[PATH_MAX];
    int parsed = bench_product_options(
        argc, argv, "bench_jit",
        "usage: bench_jit [--n N] [--runs R] [--coordinator PATH]\n"
        "einsum('bd,df->bf', f32[N@X,N@Y], f32[N@Y,N], out_sharding=P('X','Y')) as a\n"
        "jit job on mesh (2,2) over 2 workers x 2 devices, vs the same product written\n"
        "by hand as a shard_map job, same run. N defaults to 4096, R to 5.\n",
        BENCH_MAX_RUNS, &n, &runs, bin, sizeof bin);
    if (parsed >= 0)
        return parsed;
#if BENCH_HAVE_JOBS
    char err[1024];
    size_t elems = (size_t)n * (size_t)n, bytes = elems * sizeof(float);
    float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    if (!a || !b) {
        fprintf(stderr, "bench_jit: out of memory\n");
        return 1;
    }
    bench_fill_ab(a, b, elems);
    char text[2][1024];
    snprintf(text[0], sizeof text[0],
             "mesh X=2 Y=2\n"
             "shard_map matmul(a: f32[%d,%d] @ P('X', 'Y'), b: f32[%d,%d] @ P('Y', None)) -> "
             "P('X', 'Y'):\n"
             "    return psum_scatter(dot(a, b), 'Y', scatter_dimension=1, tiled=True)\n",
             n, n, n, n);
    snprintf(text[1], sizeof text[1],
             "mesh X=2 Y=2\n"
             "jit matmul(a: f32[%d,%d] @ P('X', 'Y'), b: f32[%d,%d] @ P('Y', None)):\n"
             "    return jnp.einsum('bd,df->bf', a, b, out_sharding=P('X', 'Y'))\n",
             n, n, n, n);
    const char *label[2] = {"shard_map job (by hand)", "jit job (lowered)"};
    sm_program *prog[2] = {NULL, NULL};
    double secs[2][BENCH_MAX_RUNS];
    bench_cluster cl;
    sm_client *cli = NULL;
    sm_array_info ai = {0}, bi = {0};
    sm_array *first[2] = {NULL, NULL};
    int rc = 1;
    if (bench_program(text[0], &prog[0], err, sizeof err) ||
        bench_program(text[1], &prog[1], err, sizeof err)) {
        fprintf(stderr, "bench_jit: %s\n", err);
        return 1;
    }
    if (bench_cluster_start(&cl, bin, 2, 2, &cli, err, sizeof err)) {
        fprintf(stderr, "bench_jit: cluster not ready: %s\n", err);
        return 1;
    }
    sm_mesh mesh;
    const char *names[2] = {"X", "Y"};
    int64_t sizes[2] = {2, 2};
    sm_shape shape = {.rank = 2, .dims = {n, n}};
    sm_sharding_ref sh = {.mesh = &mesh, .default_order = 1};
    if (sm_mesh_init(&mesh, 2, names, sizes, NULL, 4, err, sizeof err) ||
        sm_pspec_parse("P('X', 'Y')", &sh.spec, err, sizeof err) ||
        sm_client_put(cli, SM_F32, &shape, a, &sh, NULL, &ai, err, sizeof err) ||
        sm_pspec_parse("P('Y', None)", &sh.spec, err, sizeof err) ||
        sm_client_put(cli, SM_F32, &shape, b, &sh, NULL, &bi, err, sizeof err)) {
        fprintf(stderr, "bench_jit: upload: %s\n", err);
        goto done;
    }
    sm_array_ref args[2] = {{.id = ai.id}, {.id = bi.id}};
    for (int r = -1; r < runs; r++) { /* r = -1: warm-up, results kept */
        for (int v = 0; v < 2; v++) {
            sm_job_info info;
            double t;
            if (bench_job_run(cli, prog[v], 2, args, &t, &info, err, sizeof err)) {
                fprintf(stderr, "bench_jit: %s: %s\n", label[v], err);
                goto done;
            }
            if (r < 0) {
                sm_array_ref ref = {.id = info.outputs[0].id};
                if (sm_client_get(cli, ref, &first[v], err, sizeof err)) {
                    fprintf(stderr, "bench_jit: get: %s\n", err);
                    bench_job_drop(cli, &info);
                    goto done;
                }
            } else {
                secs[v][r] = t;
            }
            bench_job_drop(cli, &info);
        }
    }
    if (first[0]->nbytes != first[1]->nbytes ||
        memcmp(first[0]->data, first[1]->data, (size_t)first[0]->nbytes)) {
        fprintf(stderr, "bench_jit: the jit job's result differs from the shard_map job's\n");
        goto done;
    }
    double flop = 2.0 * (double)n * (double)n * (double)n;
    double th = bench_median(secs[0], runs), tj = bench_median(secs[1], runs);
    printf("bench_jit: %dx%d f32, mesh (2,2) on 2 workers x 2 devices, %d runs, medians\n\n", n, n,
           runs);
    printf("%-28s %10s %12s %8s\n", "", "GFLOP/s", "median ms", "ratio");
    printf("%-28s %10.1f %12.1f %8s\n", label[0], flop / th / 1e9, th * 1e3, "1.00");
    printf("%-28s %10.1f %12.1f %8.3f\n", label[1], flop / tj / 1e9, tj * 1e3, th / tj);
    printf("(the results are bitwise equal)\n");
    bench_summary("jit", "jit einsum, mesh (2,2)", flop / tj / 1e9, "GFLOP/s", "shard_map by hand",
                  flop / th / 1e9, ">= 0.95x", th / tj >= 0.95);
    rc = 0;
done:
    for (int v = 0; v < 2; v++) {
        sm_array_free(first[v]);
        sm_program_free(prog[v]);
    }
    bench_array_drop(cli, &ai);
    bench_array_drop(cli, &bi);
    if (cli)
        sm_client_close(cli);
    bench_cluster_stop(&cl);
    free(a);
    free(b);
    return rc;
#else
    printf("jobs not available in this build: nothing to measure\n");
    return 0;
#endif
}
