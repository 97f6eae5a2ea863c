/* bench_util: see bench_util.h. */
#define _GNU_SOURCE
#include "bench_util.h"
#include "sm_time.h"
#include "sm_rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double bench_now_s(void)
{
    return (double)sm_time_mono_ns() * 1e-9;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    if (n < 1)
        return 0;
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_percentile(double *v, int n, double p)
{
    if (n < 1)
        return 0;
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

int bench_coordinator_path(const char *arg, char *out, size_t len)
{
    if (arg) {
        snprintf(out, len, "%s", arg);
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    snprintf(out, len, "%s/../server/shmap-coordinator", dirname(self));
    return 0;
}

int bench_children(pid_t pid, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f)
        return 0;
    while (n < max && fscanf(f, "%d", &out[n]) == 1)
        n++;
    fclose(f);
    return n;
}

static int bench_wait_workers(sm_client *cli, int want, char *err, size_t errlen)
{
    for (int i = 0; i < 300; i++) {
        sm_worker_info *w = NULL;
        int n = 0, alive = 0;
        if (sm_client_devices(cli, &w, &n, err, errlen) == SM_OK) {
            for (int k = 0; k < n; k++)
                alive += w[k].alive;
            free(w);
            if (alive >= want)
                return 0;
        }
        usleep(50 * 1000);
    }
    snprintf(err, errlen, "fewer than %d workers came up within 15 s", want);
    return -1;
}

/* Copies the last lines of the cluster's log to stderr. */
static void bench_cluster_log_tail(const bench_cluster *c)
{
    char path[PATH_MAX + 16], line[512], ring[20][512];
    int n = 0;
    snprintf(path, sizeof path, "%s/cluster.log", c->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        snprintf(ring[n++ % 20], sizeof ring[0], "%s", line);
    fclose(f);
    for (int k = n > 20 ? n - 20 : 0; k < n; k++)
        fprintf(stderr, "  | %s", ring[k % 20]);
}

int bench_cluster_start(bench_cluster *c, const char *bin, int workers, int devices_per_worker,
                        sm_client **cli, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->workers = workers;
    *cli = NULL;
    snprintf(c->dir, sizeof c->dir, "/tmp/shmap-bench-XXXXXX");
    if (!mkdtemp(c->dir)) {
        snprintf(err, errlen, "cannot create a directory under /tmp: %s", strerror(errno));
        c->dir[0] = 0;
        return -1;
    }
    char portfile[PATH_MAX + 16], nw[16], nd[16];
    snprintf(portfile, sizeof portfile, "%s/port", c->dir);
    snprintf(nw, sizeof nw, "%d", workers);
    snprintf(nd, sizeof nd, "%d", devices_per_worker);
    fflush(NULL);
    c->pid = fork();
    if (c->pid < 0) {
        snprintf(err, errlen, "fork failed: %s", strerror(errno));
        c->pid = 0;
        return -1;
    }
    if (c->pid == 0) {
        /* A bench killed (Ctrl-C, a timeout) takes its cluster with it: the
         * coordinator gets SIGTERM and stops its local workers. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* The cluster's log goes to a file, shown when the start fails. */
        char logfile[PATH_MAX + 16];
        snprintf(logfile, sizeof logfile, "%s/cluster.log", c->dir);
        int fd = open(logfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--listen", "127.0.0.1:0", "--port-file", portfile, "--local-workers", nw,
              "--devices-per-worker", nd, (char *)NULL);
        fprintf(stderr, "bench: cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 300 && port <= 0; i++) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port <= 0) {
            if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
                c->pid = 0;
                snprintf(err, errlen, "%s exited before listening", bin);
                bench_cluster_log_tail(c);
                return -1;
            }
            usleep(50 * 1000);
        }
    }
    if (port <= 0) {
        snprintf(err, errlen, "%s wrote no port file within 15 s", bin);
        bench_cluster_log_tail(c);
        return -1;
    }
    snprintf(c->target, sizeof c->target, "127.0.0.1:%d", port);
    sm_client_opts o = {.stage_mb = SM_CLIENT_STAGE_MB_DEFAULT};
    sm_rpc_malloc_tune(); /* as shmapctl's main does */
    if (sm_client_opts_from_env(&o, err, errlen) != SM_OK ||
        sm_client_connect(c->target, &o, cli, err, errlen) != SM_OK)
        return -1;
    if (bench_wait_workers(*cli, workers, err, errlen)) {
        bench_cluster_log_tail(c);
        sm_client_close(*cli);
        *cli = NULL;
        return -1;
    }
    return 0;
}

void bench_cluster_stop(bench_cluster *c)
{
    if (c->pid > 0) {
        pid_t kids[64];
        int nk = bench_children(c->pid, kids, 64);
        kill(c->pid, SIGTERM);
        int stopped = 0;
        for (int i = 0; i < 100 && !stopped; i++) {
            if (waitpid(c->pid, NULL, WNOHANG) == c->pid)
                stopped = 1;
            else
                usleep(50 * 1000);
        }
        if (!stopped) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
        }
        /* The workers are the coordinator's children; it stops them, but a
         * worker that outlives it (reparented) is stopped here. */
        for (int k = 0; k < nk; k++) {
            for (int i = 0; i < 40 && kill(kids[k], 0) == 0; i++)
                usleep(50 * 1000);
            if (kill(kids[k], 0) == 0)
                kill(kids[k], SIGTERM);
        }
        c->pid = 0;
    }
    if (c->dir[0]) {
        char portfile[PATH_MAX + 16];
        snprintf(portfile, sizeof portfile, "%s/port", c->dir);
        unlink(portfile);
        snprintf(portfile, sizeof portfile, "%s/cluster.log", c->dir);
        if (getenv("BENCH_KEEP_LOG"))
            fprintf(stderr, "bench: cluster log kept in %s\n", portfile);
        else
            unlink(portfile);
        rmdir(c->dir);
        c->dir[0] = 0;
    }
}

void bench_summary(const char *bench, const char *figure, double value, const char *unit,
                   const char *anchor_name, double anchor, const char *target, int met)
{
    char ratio[32] = "", anc[32] = "", val[32] = "-";
    if (value >= 0)
        snprintf(val, sizeof val, "%.4g", value);
    if (anchor > 0 && value >= 0)
        snprintf(ratio, sizeof ratio, "%.2f", value / anchor);
    if (anchor > 0)
        snprintf(anc, sizeof anc, "%.4g", anchor);
    printf("SUMMARY|%s|%s|%s|%s|%s|%s|%s|%s|%s\n", bench, figure, val, unit,
           anchor_name ? anchor_name : "", anc, ratio, target ? target : "",
           met < 0 ? "n/a"
           : met   ? "met"
                   : "not met");
    fflush(stdout);
}

int bench_product_options(int argc, char **argv, const char *bench, const char *usage, int max_runs,
                          int *n, int *runs, char *bin, size_t binlen)
{
    *n = 4096;
    *runs = 5;
    const bench_opt opts[] = {BENCH_OPT_INT("n", 'n', n),
                              BENCH_OPT_RANGE("runs", 'r', runs, 1, max_runs)};
    int parsed = bench_options_cluster(argc, argv, opts, BENCH_NOPTS(opts), usage, bin, binlen);
    if (parsed >= 0)
        return parsed;
    if (*n >= 4 && *n % 4 == 0 && *n <= 16384)
        return -1;
    fprintf(stderr, "%s: --n must be a multiple of 4 in 4..16384\n", bench);
    return 2;
}

void bench_fill_ab(float *a, float *b, size_t n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < n; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[k] = (float)((double)(s >> 40) / (double)(1 << 24) * 2.0 - 1.0);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b[k] = (float)((double)(s >> 40) / (double)(1 << 24) * 2.0 - 1.0);
    }
}

sm_err bench_program(const char *text, sm_program **out, char *err, size_t errlen)
{
    sm_err e = sm_program_parse(text, "<bench>", out, err, errlen);
    if (e)
        return e;
    e = sm_program_verify(*out, 1, err, errlen);
    if (e) {
        sm_program_free(*out);
        *out = NULL;
    }
    return e;
}

#if BENCH_HAVE_JOBS
int bench_job_run_one(sm_client *cli, const sm_program *prog, const sm_array_ref *arg, double *secs,
                      double *svc, char *err, size_t errlen)
{
    sm_job_info info;
    double t0 = bench_now_s();
    sm_err e = sm_job_run(cli, prog, 1, arg, NULL, 1, 600000, 600000, &info, err, errlen);
    *secs = bench_now_s() - t0;
    if (e)
        return -1;
    if (info.state != SM_JOB_DONE) {
        snprintf(err, errlen, "job %llu ended %s: %.512s", (unsigned long long)info.id.v,
                 sm_job_state_name(info.state), info.error);
        sm_job_info_free(&info);
        return -1;
    }
    if (svc)
        *svc = (double)(info.queued_us + info.run_us) * 1e-6;
    bench_job_drop_but(cli, &info, arg->id); /* an output aliasing arg stays */
    return 0;
}

sm_err bench_job_run(sm_client *cli, const sm_program *p, int nargs, const sm_array_ref *args,
                     double *seconds, sm_job_info *info, char *err, size_t errlen)
{
    sm_job_id id = {0};
    memset(info, 0, sizeof *info);
    double t0 = bench_now_s();
    sm_err e = sm_job_submit(cli, p, nargs, args, NULL, 1, 600000, &id, err, errlen);
    if (e)
        return e;
    for (;;) {
        e = sm_job_wait(cli, id, 600000, info, err, errlen);
        if (e)
            return e;
        if (info->state != SM_JOB_QUEUED && info->state != SM_JOB_RUNNING)
            break;
        sm_job_info_free(info);
        if (bench_now_s() - t0 > 900) {
            snprintf(err, errlen, "job %llu did not end within 900 s", (unsigned long long)id.v);
            return SM_ETIMEOUT;
        }
    }
    *seconds = bench_now_s() - t0;
    if (info->state != SM_JOB_DONE) {
        snprintf(err, errlen, "job %llu ended %s: %s", (unsigned long long)id.v,
                 sm_job_state_name(info->state), info->error);
        e = SM_EINTERNAL;
        sm_job_info_free(info);
    }
    return e;
}

void bench_job_drop_but(sm_client *cli, sm_job_info *info, sm_array_id keep)
{
    char err[256];
    for (int k = 0; k < info->noutputs; k++) {
        sm_array_ref ref = {.id = info->outputs[k].id};
        if (ref.id.v != keep.v)
            sm_client_delete(cli, ref, err, sizeof err);
    }
    sm_job_info_free(info);
}

void bench_job_drop(sm_client *cli, sm_job_info *info)
{
    bench_job_drop_but(cli, info, (sm_array_id){0});
}
#endif

int bench_sharding_1d(sm_mesh *mesh, int n, const char *spec, sm_sharding_ref *sh, char *err,
                      size_t errlen)
{
    const char *names[] = {"i"};
    int64_t sizes[] = {n};
    *sh = (sm_sharding_ref){.mesh = mesh, .default_order = 1};
    if (sm_mesh_init(mesh, 1, names, sizes, NULL, n, err, errlen) ||
        sm_pspec_parse(spec, &sh->spec, err, errlen))
        return -1;
    return 0;
}

void bench_array_drop(sm_client *cli, sm_array_info *info)
{
    char err[256];
    if (info->id.v)
        sm_client_delete(cli, (sm_array_ref){.id = info->id}, err, sizeof err);
    sm_array_info_free(info);
}

int bench_rpc_devices(sm_client *cli, double *secs, char *err, size_t errlen)
{
    sm_worker_info *w = NULL;
    int n = 0;
    double t0 = bench_now_s();
    if (sm_client_devices(cli, &w, &n, err, errlen))
        return -1;
    *secs = bench_now_s() - t0;
    free(w);
    return 0;
}

int bench_options(int argc, char **argv, const bench_opt *opts, int n, const char *usage)
{
    struct option lo[BENCH_MAX_OPTS + 2];
    char shorts[2 * BENCH_MAX_OPTS + 2];
    size_t k = 0;
    if (n > BENCH_MAX_OPTS)
        return 2;
    for (int i = 0; i < n; i++) {
        lo[i] = (struct option){opts[i].name, required_argument, NULL, opts[i].letter};
        shorts[k++] = opts[i].letter;
        shorts[k++] = ':';
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    shorts[k++] = 'h';
    shorts[k] = '\0';
    int defaults[BENCH_MAX_OPTS];
    for (int i = 0; i < n; i++)
        defaults[i] = opts[i].ival ? *opts[i].ival : 0;
    for (int o; (o = getopt_long(argc, argv, shorts, lo, NULL)) != -1;) {
        int i = 0;
        while (i < n && opts[i].letter != o)
            i++;
        if (i == n) {
            printf("%s", usage);
            return o == 'h' ? 0 : 2;
        }
        if (opts[i].ival)
            *opts[i].ival = atoi(optarg);
        else
            *opts[i].sval = optarg;
    }
    for (int i = 0; i < n; i++)
        if (opts[i].ival && opts[i].lo <= opts[i].hi &&
            (*opts[i].ival < opts[i].lo || *opts[i].ival > opts[i].hi))
            *opts[i].ival = defaults[i];
    return -1;
}

int bench_options_cluster(int argc, char **argv, const bench_opt *opts, int n, const char *usage,
                          char *bin, size_t binlen)
{
    bench_opt all[BENCH_MAX_OPTS];
    const char *arg = NULL;
    if (n >= BENCH_MAX_OPTS)
        return 2;
    memcpy(all, opts, sizeof *opts * (size_t)n);
    all[n] = (bench_opt)BENCH_OPT_STR("coordinator", 'c', &arg);
    int parsed = bench_options(argc, argv, all, n + 1, usage);
    if (parsed >= 0)
        return parsed;
    return bench_coordinator_path(arg, bin, binlen) ? 1 : -1;
}
