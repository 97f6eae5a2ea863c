/* bench_util: what the shmap benchmarks share: a monotonic clock, medians
 * and percentiles, a local cluster started from the build tree (the
 * coordinator with --local-workers), shard_map jobs timed from submit to
 * result ready, and the SUMMARY lines bench/run.sh collects into its table.
 *
 * Everything here is for one thread (a benchmark's main). A bench_cluster
 * owns the coordinator process and its temporary directory until
 * bench_cluster_stop. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "shmap.h"
#include "sm_ir.h"

/* The job API (client/lib/shmap_job.h) is being written alongside; without
 * it the job parts of the benchmarks print "jobs not available in this
 * build" and the anchors still run. */
#if defined(__has_include)
#if __has_include("shmap_job.h")
#include "shmap_job.h"
#define BENCH_HAVE_JOBS 1
#endif
#endif
#ifndef BENCH_HAVE_JOBS
#define BENCH_HAVE_JOBS 0
#endif

#define BENCH_MIB (1024.0 * 1024.0)

double bench_now_s(void);
/* Median of v[0..n) (sorts v); 0 when n < 1. */
double bench_median(double *v, int n);
/* Nearest-rank percentile p (0..100) of v[0..n) (sorts v); 0 when n < 1. */
double bench_percentile(double *v, int n, double p);

/* Writes the coordinator binary to use into out: arg when not NULL, else
 * ../server/shmap-coordinator next to this program (the build tree).
 * Returns 0, or -1 if /proc/self/exe cannot be read. */
int bench_coordinator_path(const char *arg, char *out, size_t len);

typedef struct {
    pid_t pid; /* the coordinator; 0 when not running */
    char dir[PATH_MAX];
    char target[64]; /* "127.0.0.1:PORT" */
    int workers;
} bench_cluster;

/* The children of pid (a coordinator's local workers), at most max, into
 * out; how many (0 if /proc does not say). */
int bench_children(pid_t pid, pid_t *out, int max);

/* Starts `bin --listen 127.0.0.1:0 --local-workers W --devices-per-worker D`
 * with a port file in a fresh /tmp directory, and connects a client once
 * all W workers report alive (up to ~15 s). On success *cli is owned by the
 * caller (sm_client_close before bench_cluster_stop). Returns 0 or -1 with
 * a sentence in err. */
int bench_cluster_start(bench_cluster *c, const char *bin, int workers, int devices_per_worker,
                        sm_client **cli, char *err, size_t errlen);
/* Stops the coordinator (SIGTERM, then its workers if they outlive it) and
 * removes the directory. Safe on a cluster that did not start. */
void bench_cluster_stop(bench_cluster *c);

/* One option of a bench program: --name VALUE or -letter VALUE, into an
 * int (atoi) or a string (the argument itself). An int row made with
 * BENCH_OPT_RANGE keeps the value it held before parsing (its default) when
 * the one given lies outside lo..hi. */
typedef struct {
    const char *name;
    char letter;
    int *ival;
    const char **sval;
    int lo, hi; /* lo > hi: any value */
} bench_opt;
#define BENCH_OPT_INT(name, letter, p)                                                             \
    {                                                                                              \
        name, letter, p, NULL, 1, 0                                                                \
    }
#define BENCH_OPT_RANGE(name, letter, p, lo, hi)                                                   \
    {                                                                                              \
        name, letter, p, NULL, lo, hi                                                              \
    }
#define BENCH_OPT_STR(name, letter, p)                                                             \
    {                                                                                              \
        name, letter, NULL, p, 1, 0                                                                \
    }
#define BENCH_NOPTS(opts) ((int)(sizeof(opts) / sizeof(opts)[0]))
#define BENCH_MAX_OPTS    16
/* Parses argv by the n opts and -h/--help. Returns -1 to go on, or what
 * main should return: 0 after --help, 2 after an unknown option or a
 * missing value (usage printed to stdout in both cases). */
int bench_options(int argc, char **argv, const bench_opt *opts, int n, const char *usage);
/* bench_options for a bench that starts its own cluster: the opts and
 * --coordinator PATH (-c), and the coordinator to run written into bin
 * (bench_coordinator_path). Returns -1 to go on, or what main should
 * return: as bench_options, or 1 when the build tree's coordinator cannot
 * be found. */
int bench_options_cluster(int argc, char **argv, const bench_opt *opts, int n, const char *usage,
                          char *bin, size_t binlen);

/* Sets up mesh i=n over devices 0..n-1 and *sh, spec over that mesh (sh
 * borrows mesh, which must outlive it). 0, or -1 with a sentence in err. */
int bench_sharding_1d(sm_mesh *mesh, int n, const char *spec, sm_sharding_ref *sh, char *err,
                      size_t errlen);
/* Deletes the array *info names on cli when it has one (an id of 0: never
 * uploaded) and frees *info; a failed delete is ignored. */
void bench_array_drop(sm_client *cli, sm_array_info *info);

/* Times one plain unary RPC (sm_client_devices, answered from the
 * coordinator's registry): the anchor of job round trips. 0 or -1. */
int bench_rpc_devices(sm_client *cli, double *secs, char *err, size_t errlen);

/* Prints one line for bench/run.sh's summary table:
 *   SUMMARY|bench|figure|value|unit|anchor name|anchor value|ratio|target|met
 * value < 0 means no figure ("-"); ratio is value/anchor (empty when either
 * is missing); met is "met", "not met" or "n/a" (met < 0: no target). */
void bench_summary(const char *bench, const char *figure, double value, const char *unit,
                   const char *anchor_name, double anchor, const char *target, int met);

#if BENCH_HAVE_JOBS
/* Submits p over args (one per parameter) and waits for it to end; *seconds
 * is the time from submit to result ready. On SM_OK the job is DONE and
 * *info (owned by the caller, sm_job_info_free) lists its outputs. */
sm_err bench_job_run(sm_client *cli, const sm_program *p, int nargs, const sm_array_ref *args,
                     double *seconds, sm_job_info *info, char *err, size_t errlen);
/* One job with sm_job_run (submit and wait in one call) over arg: *secs
 * from submit to result ready, *svc (may be NULL) the service's queued_us +
 * run_us. Deletes the outputs but arg's array (a job returning its
 * argument). -1 with err unless the job is DONE. */
int bench_job_run_one(sm_client *cli, const sm_program *prog, const sm_array_ref *arg, double *secs,
                      double *svc, char *err, size_t errlen);
/* Deletes a finished job's output arrays and frees *info. */
void bench_job_drop(sm_client *cli, sm_job_info *info);
/* The same, but an output that is the array keep (a job returning its
 * argument) stays. */
void bench_job_drop_but(sm_client *cli, sm_job_info *info, sm_array_id keep);
#endif

/* bench_options_cluster for an N x N product bench: --n N (a multiple of
 * 4 in 4..16384, default 4096; another is an error naming bench) and
 * --runs R (1..max_runs, default 5) into *n and *runs. */
int bench_product_options(int argc, char **argv, const char *bench, const char *usage, int max_runs,
                          int *n, int *runs, char *bin, size_t binlen);
/* Fills a and b (n floats each) with fixed pseudo-random values in
 * [-1, 1), the same every run. */
void bench_fill_ab(float *a, float *b, size_t n);

/* Parses text (a .shmap program) and verifies it with check_vma; *out owned
 * by the caller (sm_program_free). */
sm_err bench_program(const char *text, sm_program **out, char *err, size_t errlen);

#endif
