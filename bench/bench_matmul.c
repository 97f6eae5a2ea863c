/* bench_matmul: an N x N f32 product (N = 4096) as a shard_map job against
 * single-process OpenBLAS, measured side by side in the same run.
 *
 * Anchor: cblas_sgemm on 2 threads with the best OpenBLAS core type
 * (sm_kern_coretype_setup re-executes this program with OPENBLAS_CORETYPE
 * set, and the cluster's workers inherit it).
 *
 * shmap: a local cluster of 2 workers x 2 devices; a and b are uploaded once
 * (resident), then per mesh one job, timed from submit to result ready
 * (sm_job_submit + sm_job_wait):
 *   mesh i=4:      a P('i', None), b P(None, None) -> dot(a, b)     P('i', None)
 *                  (row-sharded, no collective)
 *   mesh i=2 j=2:  a P('i', 'j'),  b P('j', None)  -> psum(dot(a, b), 'j')
 *                  P('i', None)
 * Runs are interleaved (anchor, mesh (4,), mesh (2,2), repeat) so drift hits
 * all three alike; the first result of each mesh is fetched and compared
 * with the anchor's (not timed). Prints median GFLOP/s (2 N^3 / t), the
 * ratio to the anchor (the target is >= 0.8), and the median of the job's
 * queued_us + run_us as the service reports them ("service ms").
 *
 *   bench_matmul [--n 4096] [--runs 5] [--coordinator PATH] */
#define _GNU_SOURCE
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sm_kern.h"

#define BENCH_MAX_RUNS 50

typedef struct {
    const char *label; /* "(4,)" */
    const char *mesh;  /* "i=4" */
    const char *aspec, *bspec, *body;
    int naxes;
    const char *names[2];
    int64_t sizes[2];
} mm_variant;

static const mm_variant mm_variants[] = {
    {"(4,)", "i=4", "P('i', None)", "P(None, None)", "return dot(a, b)", 1, {"i"}, {4}},
    {"(2,2)",
     "i=2 j=2",
     "P('i', 'j')",
     "P('j', None)",
     "return psum(dot(a, b), 'j')",
     2,
     {"i", "j"},
     {2, 2}},
};
#define MM_NVARIANTS ((int)(sizeof mm_variants / sizeof mm_variants[0]))

static double mm_anchor_seconds(int n, const float *a, const float *b, float *c)
{
    double t0 = bench_now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return bench_now_s() - t0;
}

#if BENCH_HAVE_JOBS
typedef struct {
    sm_program *prog;
    sm_array_info a, b;
    double secs[BENCH_MAX_RUNS];
    double svc[BENCH_MAX_RUNS]; /* service side: queued_us + run_us */
    int ok;
} mm_state;

/* Uploads a and b with the variant's shardings and builds its program. */
static int mm_prepare(sm_client *cli, const mm_variant *v, int n, const float *a, const float *b,
                      mm_state *st, char *err, size_t errlen)
{
    char text[1024];
    snprintf(text, sizeof text,
             "mesh %s\n"
             "shard_map matmul(a: f32[%d,%d] @ %s, b: f32[%d,%d] @ %s) -> P('i', None):\n"
             "    %s\n",
             v->mesh, n, n, v->aspec, n, n, v->bspec, v->body);
    if (bench_program(text, &st->prog, err, errlen))
        return -1;
    sm_mesh mesh;
    if (sm_mesh_init(&mesh, v->naxes, v->names, v->sizes, NULL, 4, err, errlen))
        return -1;
    sm_shape shape = {.rank = 2, .dims = {n, n}};
    sm_sharding_ref sh = {.mesh = &mesh, .default_order = 1};
    if (sm_pspec_parse(v->aspec, &sh.spec, err, errlen) ||
        sm_client_put(cli, SM_F32, &shape, a, &sh, NULL, &st->a, err, errlen))
        return -1;
    if (sm_pspec_parse(v->bspec, &sh.spec, err, errlen) ||
        sm_client_put(cli, SM_F32, &shape, b, &sh, NULL, &st->b, err, errlen))
        return -1;
    st->ok = 1;
    return 0;
}

/* One timed job; if check, fetches the result and compares it with c. */
static int mm_run(sm_client *cli, mm_state *st, int n, const float *c, int check, double *secs,
                  double *svc, char *err, size_t errlen)
{
    sm_array_ref args[2] = {{.id = st->a.id}, {.id = st->b.id}};
    sm_job_info info;
    if (bench_job_run(cli, st->prog, 2, args, secs, &info, err, errlen))
        return -1;
    int rc = 0;
    *svc = (double)(info.queued_us + info.run_us) * 1e-6;
    if (check) {
        sm_array *out = NULL;
        sm_array_ref ref = {.id = info.outputs[0].id};
        if (info.noutputs != 1 || sm_client_get(cli, ref, &out, err, errlen)) {
            if (info.noutputs != 1)
                snprintf(err, errlen, "the job returned %d outputs, not 1", info.noutputs);
            rc = -1;
        } else {
            const float *r = out->data;
            double maxc = 0, maxd = 0;
            for (size_t k = 0; k < (size_t)n * (size_t)n; k++) {
                maxc = fmax(maxc, fabs(c[k]));
                maxd = fmax(maxd, fabs((double)r[k] - c[k]));
            }
            if (!(maxd <= 1e-3 * maxc)) {
                snprintf(err, errlen, "result differs from sgemm: max |diff| %.3g, max |c| %.3g",
                         maxd, maxc);
                rc = -1;
            }
            sm_array_free(out);
        }
    }
    bench_job_drop(cli, &info);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    sm_kern_coretype_setup(argc, argv);
    int n, runs;
    char bin[PATH_MAX];
    int parsed = bench_product_options(
        argc, argv, "bench_matmul",
        "usage: bench_matmul [--n N] [--runs R] [--coordinator PATH]\n"
        "N x N f32 matmul as a shard_map job on 2 workers x 2 devices, meshes (4,)\n"
        "and (2,2), vs single-process OpenBLAS sgemm on 2 threads, same run.\n"
        "N defaults to 4096 (a multiple of 4), R to 5.\n",
        BENCH_MAX_RUNS, &n, &runs, bin, sizeof bin);
    if (parsed >= 0)
        return parsed;

    size_t elems = (size_t)n * (size_t)n, bytes = elems * sizeof(float);
    float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes),
          *c = aligned_alloc(64, bytes);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_matmul: out of memory\n");
        return 1;
    }
    bench_fill_ab(a, b, elems);
    double flop = 2.0 * (double)n * (double)n * (double)n;

    openblas_set_num_threads(2);
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("bench_matmul: %dx%d f32, %d runs, medians; OpenBLAS core %s (best for this CPU %s, "
           "OPENBLAS_CORETYPE=%s), anchor sgemm on 2 threads\n",
           n, n, runs, openblas_get_corename(),
           sm_kern_best_coretype() ? sm_kern_best_coretype() : "unknown", env ? env : "(unset)");

    int rc = 0;
    double anchor[BENCH_MAX_RUNS];
    mm_anchor_seconds(n, a, b, c); /* warm-up; c is the reference result */

#if BENCH_HAVE_JOBS
    char err[1024];
    bench_cluster cl;
    sm_client *cli = NULL;
    mm_state st[MM_NVARIANTS];
    memset(st, 0, sizeof st);
    int jobs = 0;
    if (bench_cluster_start(&cl, bin, 2, 2, &cli, err, sizeof err)) {
        fprintf(stderr, "bench_matmul: cluster not ready: %s\n", err);
        rc = 1;
    } else {
        jobs = 1;
        for (int v = 0; v < MM_NVARIANTS; v++) {
            double w;
            if (mm_prepare(cli, &mm_variants[v], n, a, b, &st[v], err, sizeof err) ||
                mm_run(cli, &st[v], n, c, 1, &w, &w, err, sizeof err)) {
                fprintf(stderr, "bench_matmul: mesh %s: %s\n", mm_variants[v].label, err);
                st[v].ok = 0;
                rc = 1;
            }
        }
    }
#else
    printf("jobs not available in this build (no client/lib/shmap_job.h): anchor only\n");
    (void)mm_variants;
#endif

    for (int r = 0; r < runs; r++) {
        anchor[r] = mm_anchor_seconds(n, a, b, c);
#if BENCH_HAVE_JOBS
        for (int v = 0; v < MM_NVARIANTS && jobs; v++) {
            if (!st[v].ok)
                continue;
            if (mm_run(cli, &st[v], n, c, 0, &st[v].secs[r], &st[v].svc[r], err, sizeof err)) {
                fprintf(stderr, "bench_matmul: mesh %s: %s\n", mm_variants[v].label, err);
                st[v].ok = 0;
                rc = 1;
            }
        }
#endif
    }

    double ag = flop / bench_median(anchor, runs) / 1e9;
    printf("\n%-28s %10s %8s %12s %12s\n", "", "GFLOP/s", "ratio", "median ms", "service ms");
    printf("%-28s %10.1f %8s %12.1f\n", "anchor: sgemm, 2 threads", ag, "1.00", flop / ag / 1e6);
    bench_summary("matmul", "sgemm anchor, 2 threads", ag, "GFLOP/s", "", 0, "", -1);
#if BENCH_HAVE_JOBS
    for (int v = 0; v < MM_NVARIANTS && jobs; v++) {
        char label[64];
        snprintf(label, sizeof label, "shmap job, mesh %s", mm_variants[v].label);
        if (!st[v].ok) {
            printf("%-28s %10s\n", label, "failed");
            bench_summary("matmul", label, -1, "GFLOP/s", "sgemm 2 threads", ag, ">= 0.8x", 0);
            continue;
        }
        double t = bench_median(st[v].secs, runs), g = flop / t / 1e9;
        printf("%-28s %10.1f %8.2f %12.1f %12.1f\n", label, g, g / ag, t * 1e3,
               bench_median(st[v].svc, runs) * 1e3);
        bench_summary("matmul", label, g, "GFLOP/s", "sgemm 2 threads", ag, ">= 0.8x",
                      g / ag >= 0.8);
    }
    if (jobs) {
        for (int v = 0; v < MM_NVARIANTS; v++) {
            bench_array_drop(cli, &st[v].a);
            bench_array_drop(cli, &st[v].b);
            sm_program_free(st[v].prog);
        }
    }
    if (cli)
        sm_client_close(cli);
    bench_cluster_stop(&cl);
#else
    bench_summary("matmul", "shmap job", -1, "GFLOP/s", "sgemm 2 threads", ag, ">= 0.8x (jobs n/a)",
                  -1);
#endif
    free(a);
    free(b);
    free(c);
    return rc;
}
