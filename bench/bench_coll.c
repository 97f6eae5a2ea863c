/* bench_coll: shmap's collectives across worker processes, through the
 * worker's job path (Worker.RunJob, collectives over Worker.Exchange).
 *
 * Starts a fake coordinator in this process (RegisterWorker, Heartbeat) and
 * two shmap-worker processes with two devices each, on loopback. For each
 * op and size S (bytes per device, the larger of its input and output, as
 * nccl-tests and bench_mpi_coll count it), f32 data, mesh x=4 over the four
 * devices (two per worker, so every collective crosses the workers):
 *   psum          S in and out                       busbw factor 2(n-1)/n
 *   all_gather    S/n in, S out (tiled)              (n-1)/n
 *   psum_scatter  S in, S/n out (tiled)              (n-1)/n
 *   all_to_all    S in and out (tiled)               (n-1)/n
 *   ppermute      ring 0->1->2->3->0, S              1
 * Each op runs on both transports between the workers: "grpc" (Worker.Exchange
 * over loopback) and "shm" (shared memory, once Worker.ShmProbe proved the
 * workers share it; RunJob gives them one shared-memory domain). The
 * physical anchor is an all-reduce of S bytes between 2 threads of this
 * process over buffers they share, built here: each thread adds its half of
 * the two inputs a block at a time (in cache) and writes the sums into both
 * outputs, busbw = S / t (2 ranks); psum through shared memory is measured
 * against it (target at 64 MiB: >= 0.5). all_gather, all_to_all and
 * ppermute through shared memory are also set against their copy floor
 * ("output copy", bc_floor): the time 2 threads of this process take to
 * write the 4 S bytes their outputs hold, which no transport that
 * materializes every device's output beats on this machine (shmap's
 * all_gather and ppermute do not: the devices of a worker share bytes,
 * so they may pass it; all_to_all writes every byte).
 * Each job applies the collective R times (all_gather and psum_scatter
 * chained with a slice / tile back to the input shape); the time of one
 * collective is (t(R = 1 + K) - t(R = 1)) / K with medians over --runs
 * jobs, so RunJob, input lookup and output storing cancel out (K = 4 from
 * 16 MiB, 16 below: there the job's own time and its jitter, a few tenths
 * of a millisecond, would otherwise weigh as much as the K collectives;
 * and below 16 MiB, three times --runs jobs, at most 50, as cheap there). algbw =
 * S / t, busbw = algbw * factor. "cpu ms/op" is the workers' CPU time
 * (user + system, both workers) per collective, taken the same way: on a
 * machine shared with other work it moves much less than the wall time. Prints a table and SUMMARY
 * lines for bench/run.sh (the figure names start "<op> <MiB>" so run.sh pairs them with the Open
 * MPI rows).
 *
 *   bench_coll [--sizes 1,16,64] [--runs 5] [--ops psum,...] [--transport grpc,shm]
 *              [--worker PATH]
 *
 * The worker binary defaults to ../worker/shmap-worker next to this
 * program (the build tree). */
#define _GNU_SOURCE
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/fake_coord.h"
#include "bench_util.h"
#include "sm_checksum.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "sm_svc_job.h"

#define BC_WORKERS 2
#define BC_DPW     2
#define BC_N       (BC_WORKERS * BC_DPW)
#define BC_COLS    1024
#define BC_K       4 /* extra collectives per job from 16 MiB, 4 times as many below */
#define BC_CALL_MS 300000
#define BC_MAX_RUN 50

typedef enum { BC_PSUM, BC_ALL_GATHER, BC_PSUM_SCATTER, BC_ALL_TO_ALL, BC_PPERMUTE } bc_op;
static const char *const bc_names[] = {"psum", "all_gather", "psum_scatter", "all_to_all",
                                       "ppermute"};
static const double bc_factor[] = {2.0 * (BC_N - 1) / BC_N, (double)(BC_N - 1) / BC_N,
                                   (double)(BC_N - 1) / BC_N, (double)(BC_N - 1) / BC_N, 1.0};
#define BC_NOPS 5

typedef struct {
    fake_coord coord; /* worker w registers as c->coord.addr[w] */
    sm_rpc_channel *ch[BC_WORKERS];
    pid_t pid[BC_WORKERS];
    uint64_t next_id;
    int shm; /* the workers proved they share memory */
} bc_cluster;

typedef enum { BC_GRPC, BC_SHM } bc_transport;
static const char *const bc_transport_names[] = {"grpc", "shm"};

/* Starts the fake coordinator and the workers, one at a time so worker w
 * owns devices 2w, 2w+1. Returns 0 or -1 with a sentence in err. */
static int bc_start(bc_cluster *c, const char *bin, char *err, size_t errlen)
{
    if (fake_coord_start(&c->coord, BC_WORKERS, BC_DPW, 1000, "bench-coordinator", err, errlen))
        return -1;
    const char *coord = c->coord.target;
    for (int w = 0; w < BC_WORKERS; w++) {
        pid_t pid = fork();
        if (pid < 0)
            return snprintf(err, errlen, "fork failed"), -1;
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execl(bin, bin, "--listen", "127.0.0.1:0", "--coordinator", coord, "--devices", "2",
                  "--transport", "auto", "--log-level", "warn", (char *)NULL);
            _exit(127);
        }
        c->pid[w] = pid;
        if (fake_coord_wait(&c->coord, w + 1) <= w)
            return snprintf(err, errlen, "worker %s did not register within 15 s", bin), -1;
        if (sm_rpc_channel_create(c->coord.addr[w], NULL, &c->ch[w], err, errlen))
            return -1;
        if (fake_coord_wait_devices(&c->coord, c->ch[w], 5000) != BC_DPW)
            return snprintf(err, errlen, "worker %d did not take its devices", w), -1;
    }
    c->shm = sm_svc_shm_prove(c->ch[0], c->ch[1], 5000);
    return 0;
}

static void bc_stop(bc_cluster *c)
{
    for (int w = 0; w < BC_WORKERS; w++) {
        sm_rpc_channel_free(c->ch[w]);
        if (c->pid[w] > 0) {
            kill(c->pid[w], SIGTERM);
            waitpid(c->pid[w], NULL, 0);
        }
    }
    fake_coord_stop(&c->coord);
}

/* Uploads nbytes of data as the shard of (array, dev). */
static sm_err bc_upload(bc_cluster *c, uint64_t array, int32_t dev, const sm_shape *s,
                        const void *data, int64_t nbytes, char *err, size_t errlen)
{
    sm_svc_upload_stream *st = NULL;
    sm_err e = sm_svc_upload_open(c->ch[dev / BC_DPW], 1, BC_CALL_MS, &st, err, errlen);
    if (e)
        return e;
    sm_svc_upload_msg m = {.has_header = 1};
    m.header = (sm_svc_upload_header){.array_id = {array},
                                      .ndevices = 1,
                                      .devices = &dev,
                                      .shape = *s,
                                      .dtype = SM_F32,
                                      .total_bytes = nbytes};
    uint64_t sum = sm_checksum_oneshot(data, (size_t)nbytes);
    e = sm_svc_upload_send(st, &m, err, errlen);
    for (int64_t off = 0; !e && off < nbytes;) {
        int64_t n = nbytes - off < SM_SVC_CHUNK ? nbytes - off : SM_SVC_CHUNK;
        m = (sm_svc_upload_msg){.offset = off,
                                .data = (const char *)data + off,
                                .len = (size_t)n,
                                .last = off + n == nbytes,
                                .checksum = sum};
        e = sm_svc_upload_send(st, &m, err, errlen);
        off += n;
    }
    char ferr[512];
    sm_err f = sm_svc_upload_finish(st, NULL, ferr, sizeof ferr);
    if (!e && f)
        snprintf(err, errlen, "%s", ferr);
    return e ? e : f;
}

/* The program applying op R times to a block of `rows` rows. */
static void bc_text(bc_op op, int64_t rows, int R, char *out, size_t len)
{
    int64_t grows = rows * BC_N;
    const char *body = "";
    char b[512];
    switch (op) {
    case BC_PSUM:
        body = "        y = psum(y, 'x')\n";
        break;
    case BC_ALL_GATHER:
        snprintf(b, sizeof b,
                 "        g = all_gather(y, 'x', tiled=True)\n"
                 "        y = slice(g, (0, 0), (%lld, %d))\n",
                 (long long)rows, BC_COLS);
        body = b;
        break;
    case BC_PSUM_SCATTER:
        snprintf(b, sizeof b,
                 "        s = psum_scatter(y, 'x', tiled=True)\n"
                 "        y = tile(s, (%d, 1))\n",
                 BC_N);
        body = b;
        break;
    case BC_ALL_TO_ALL:
        body = "        y = all_to_all(y, 'x', 0, 0, tiled=True)\n";
        break;
    case BC_PPERMUTE:
        body = "        y = ppermute(y, 'x', perm=[(0, 1), (1, 2), (2, 3), (3, 0)])\n";
        break;
    }
    snprintf(out, len,
             "mesh x=%d devices=[0, 1, 2, 3]\n"
             "shard_map f(v: f32[%lld,%d] @ P('x')) -> P('x'):\n"
             "    y = v\n"
             "    for k in range(%d):\n"
             "%s"
             "    return y\n",
             BC_N, (long long)grows, BC_COLS, R, body);
}

typedef struct {
    bc_cluster *c;
    int w;
    const sm_svc_run_job_req *req;
    sm_err e;
    char err[1024];
} bc_run;

static void *bc_run_main(void *arg)
{
    bc_run *r = arg;
    int64_t bytes;
    r->e = sm_svc_worker_run_job(r->c->ch[r->w], BC_CALL_MS, r->req, &bytes, r->err, sizeof r->err);
    return NULL;
}

/* CPU seconds (user + system) the workers have used so far; 0 if unknown. */
static double bc_workers_cpu(const bc_cluster *c)
{
    double s = 0;
    for (int w = 0; w < BC_WORKERS; w++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)c->pid[w]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* the fields after the command name */
        unsigned long long ut = 0, st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            s += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    return s;
}

/* Runs one job (RunJob on both workers at once) and frees its output;
 * *seconds is the wall time until both answered, *cpu the workers' CPU
 * seconds meanwhile. */
static int bc_job(bc_cluster *c, bc_transport tr, bc_op op, int64_t rows, int R, uint64_t input,
                  double *seconds, double *cpu, char *err, size_t errlen)
{
    char text[2048];
    sm_program *p = NULL;
    bc_text(op, rows, R, text, sizeof text);
    if (sm_program_parse(text, bc_names[op], &p, err, errlen) ||
        sm_program_verify(p, 0, err, errlen)) {
        sm_program_free(p);
        return -1;
    }
    sm_svc_peer peers[BC_WORKERS];
    for (int w = 0; w < BC_WORKERS; w++) {
        memset(&peers[w], 0, sizeof peers[w]);
        snprintf(peers[w].address, SM_ADDR_MAX, "%s", c->coord.addr[w]);
        peers[w].ndevices = BC_DPW;
        for (int k = 0; k < BC_DPW; k++)
            peers[w].devices[k] = w * BC_DPW + k;
        peers[w].shm_domain = tr == BC_SHM ? 1 : 0;
    }
    sm_array_id in = {input}, out = {c->next_id++};
    sm_svc_run_job_req req = {.job_id = {c->next_id++},
                              .program = p,
                              .ninputs = 1,
                              .inputs = &in,
                              .noutputs = 1,
                              .outputs = &out,
                              .npeers = BC_WORKERS,
                              .peers = peers,
                              .deadline_ms = BC_CALL_MS,
                              .shm_key = ((uint64_t)getpid() << 40) ^ c->next_id};
    bc_run r[BC_WORKERS];
    pthread_t th[BC_WORKERS];
    double c0 = bc_workers_cpu(c), t0 = bench_now_s();
    for (int w = 0; w < BC_WORKERS; w++) {
        r[w] = (bc_run){.c = c, .w = w, .req = &req};
        pthread_create(&th[w], NULL, bc_run_main, &r[w]);
    }
    for (int w = 0; w < BC_WORKERS; w++)
        pthread_join(th[w], NULL);
    *seconds = bench_now_s() - t0;
    *cpu = bc_workers_cpu(c) - c0;
    sm_program_free(p);
    int rc = 0;
    for (int w = 0; w < BC_WORKERS; w++) {
        char ferr[256];
        if (r[w].e && !rc) {
            int n = snprintf(err, errlen, "%s on worker %d: %.200s", bc_names[op], w, r[w].err);
            (void)n; /* truncating a long message is fine */
            rc = -1;
        }
        sm_svc_worker_free_array(c->ch[w], BC_CALL_MS, out, 0, NULL, ferr, sizeof ferr);
    }
    return rc;
}

/* ---- the physical anchor: an all-reduce between 2 threads of this process ---- */

#define BC_ANCHOR_BLOCK (16 << 10) /* floats per pass: 64 KiB of each operand, in cache */

typedef struct {
    const float *in[2];
    float *out[2];
    int64_t n;
    int iters;
    pthread_barrier_t *bar;
    double *t;   /* per iteration, thread 0 */
    double *cpu; /* per iteration, this thread's CPU seconds */
} bc_anchor_arg;

static double bc_thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *bc_anchor_main(void *arg)
{
    bc_anchor_arg *a = arg;
    int me = a->t ? 0 : 1;
    int64_t lo = a->n * me / 2, hi = a->n * (me + 1) / 2;
    for (int it = 0; it < a->iters; it++) {
        pthread_barrier_wait(a->bar);
        double t0 = bench_now_s(), c0 = bc_thread_cpu_s();
        for (int64_t b = lo; b < hi; b += BC_ANCHOR_BLOCK) {
            int64_t m = hi - b < BC_ANCHOR_BLOCK ? hi - b : BC_ANCHOR_BLOCK;
            float *d = a->out[me] + b;
            const float *x = a->in[0] + b, *y = a->in[1] + b;
            for (int64_t i = 0; i < m; i++)
                d[i] = x[i] + y[i];
            memcpy(a->out[1 - me] + b, d, (size_t)m * sizeof *d);
        }
        a->cpu[it] = bc_thread_cpu_s() - c0;
        pthread_barrier_wait(a->bar);
        if (a->t)
            a->t[it] = bench_now_s() - t0;
    }
    return NULL;
}

/* The anchor's bus bandwidth in GB/s for S = bytes (busbw = algbw with 2
 * ranks): the median of runs iterations after 2 untimed ones; *cpu_ms its
 * median CPU time per all-reduce (both threads). */
static double bc_anchor(int64_t bytes, int runs, double *cpu_ms)
{
    int64_t n = bytes / 4;
    float *buf[4];
    double t[BC_MAX_RUN * 4 + 2], c0[BC_MAX_RUN * 4 + 2], c1[BC_MAX_RUN * 4 + 2];
    int iters = 2 + runs * 4;
    for (int k = 0; k < 4; k++) {
        buf[k] = malloc((size_t)bytes);
        if (!buf[k])
            return 0;
        for (int64_t i = 0; i < n; i++)
            buf[k][i] = (float)(i % 1000) * 0.001f;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    bc_anchor_arg a0 = {{buf[0], buf[1]}, {buf[2], buf[3]}, n, iters, &bar, t, c0}, a1 = a0;
    a1.t = NULL;
    a1.cpu = c1;
    pthread_t th;
    pthread_create(&th, NULL, bc_anchor_main, &a1);
    bc_anchor_main(&a0);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&bar);
    for (int k = 0; k < 4; k++)
        free(buf[k]);
    double m = bench_median(t + 2, iters - 2);
    for (int k = 0; k < iters; k++)
        c0[k] += c1[k];
    *cpu_ms = bench_median(c0 + 2, iters - 2) * 1e3;
    return m > 0 ? (double)bytes / m / 1e9 : 0;
}

/* ---- the copy floor of the data movements ------------------------------------- */

/* all_gather, all_to_all and ppermute write S bytes into every device's
 * output: 4 S on this mesh, whatever the transport. The floor is 2
 * threads of this process (the machine's 2 cores) each copying 2 S from
 * buffers it holds into outputs it reuses (no page faults), with the
 * better of memcpy and non-temporal stores: no implementation that
 * materializes every device's output moves them faster on this machine.
 * (all_gather's measured op also slices its output, S/4 more per device,
 * which the floor leaves out.) */
typedef struct {
    char *src[2], *dst[2];
    int64_t bytes;
    int iters, stream;
    pthread_barrier_t *bar;
    double *t; /* per iteration, thread 0 */
} bc_floor_arg;

static void *bc_floor_main(void *arg)
{
    bc_floor_arg *a = arg;
    for (int it = 0; it < a->iters; it++) {
        pthread_barrier_wait(a->bar);
        double t0 = bench_now_s();
        for (int k = 0; k < 2; k++) {
            if (a->stream)
                sm_copy_stream(a->dst[k], a->src[k], (size_t)a->bytes);
            else
                memcpy(a->dst[k], a->src[k], (size_t)a->bytes);
        }
        pthread_barrier_wait(a->bar);
        if (a->t)
            a->t[it] = bench_now_s() - t0;
    }
    return NULL;
}

/* The floor's time in seconds for S = bytes per device: the better of
 * memcpy and non-temporal stores, each the median of runs * 4 iterations
 * after 2 untimed ones; 0 if out of memory. */
static double bc_floor(int64_t bytes, int runs)
{
    char *buf[8];
    double t[BC_MAX_RUN * 4 + 2], best = 0;
    int iters = 2 + runs * 4, ok = 1;
    for (int k = 0; k < 8; k++) {
        buf[k] = malloc((size_t)bytes);
        ok = ok && buf[k];
        if (buf[k])
            memset(buf[k], k + 1, (size_t)bytes);
    }
    for (int stream = 0; stream < 2 && ok; stream++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 2);
        bc_floor_arg a0 = {{buf[0], buf[1]}, {buf[4], buf[5]}, bytes, iters, stream, &bar, t};
        bc_floor_arg a1 = {{buf[2], buf[3]}, {buf[6], buf[7]}, bytes, iters, stream, &bar, NULL};
        pthread_t th;
        pthread_create(&th, NULL, bc_floor_main, &a1);
        bc_floor_main(&a0);
        pthread_join(th, NULL);
        pthread_barrier_destroy(&bar);
        double m = bench_median(t + 2, iters - 2);
        if (m > 0 && (best == 0 || m < best))
            best = m;
    }
    for (int k = 0; k < 8; k++)
        free(buf[k]);
    return best;
}

/* K, the extra collectives of a job, for S = mib MiB per device. */
static int bc_k(long mib)
{
    return mib >= 16 ? BC_K : 4 * BC_K;
}

/* The jobs of each kind timed for S = mib MiB per device (runs asked). */
static int bc_runs(long mib, int runs)
{
    return mib >= 16 ? runs : 3 * runs < BC_MAX_RUN ? 3 * runs : BC_MAX_RUN;
}

/* Parses a comma-separated list of op names into a bit set; 0 if bad. */
static unsigned bc_parse_ops(const char *s)
{
    unsigned set = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        int op = 0;
        while (op < BC_NOPS && (strlen(bc_names[op]) != n || strncmp(bc_names[op], s, n)))
            op++;
        if (op == BC_NOPS)
            return 0;
        set |= 1u << op;
        s += n + (s[n] == ',');
    }
    return set;
}

static int bc_parse_sizes(const char *s, long *sizes, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1024)
            return -1;
        sizes[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    long sizes[16] = {1, 16, 64};
    int nsizes = 3, runs = 5;
    unsigned ops = (1u << BC_NOPS) - 1, trs = 3;
    char bin[PATH_MAX] = "", err[1024];
    const char *sizes_arg = NULL, *ops_arg = NULL, *worker_arg = NULL, *tr_arg = NULL;
    const bench_opt opts[] = {
        BENCH_OPT_STR("sizes", 's', &sizes_arg), BENCH_OPT_INT("runs", 'r', &runs),
        BENCH_OPT_STR("ops", 'o', &ops_arg), BENCH_OPT_STR("worker", 'w', &worker_arg),
        BENCH_OPT_STR("transport", 't', &tr_arg)};
    char usage[1024];
    snprintf(usage, sizeof usage,
             "usage: bench_coll [--sizes 1,16,64] [--runs 5] [--ops psum,...] [--transport "
             "grpc,shm]\n"
             "                  [--worker PATH]\n"
             "Collectives across 2 shmap-worker processes x 2 devices (RunJob, then Exchange\n"
             "over gRPC or shared memory); sizes in MiB per device, runs in 1..%d, ops among\n"
             "psum, all_gather, psum_scatter, all_to_all and ppermute (default: all),\n"
             "transports grpc and shm (default: both).\n",
             BC_MAX_RUN);
    int parsed = bench_options(argc, argv, opts, BENCH_NOPTS(opts), usage);
    if (parsed >= 0)
        return parsed;
    if (tr_arg)
        trs = (strstr(tr_arg, "grpc") ? 1u : 0u) | (strstr(tr_arg, "shm") ? 2u : 0u);
    if ((sizes_arg && (nsizes = bc_parse_sizes(sizes_arg, sizes, 16)) <= 0) || runs < 1 ||
        runs > BC_MAX_RUN || (ops_arg && !(ops = bc_parse_ops(ops_arg))) || !trs) {
        printf("%s", usage);
        return 2;
    }
    if (worker_arg)
        snprintf(bin, sizeof bin, "%s", worker_arg);
    if (!*bin) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return fprintf(stderr, "bench_coll: cannot find myself\n"), 1;
        self[n] = 0;
        snprintf(bin, sizeof bin, "%s/../worker/shmap-worker", dirname(self));
    }
    signal(SIGPIPE, SIG_IGN);
    sm_rpc_malloc_tune();
    sm_rpc_init();
    bc_cluster c = {.next_id = 1};
    int rc = 1;
    if (bc_start(&c, bin, err, sizeof err)) {
        fprintf(stderr, "bench_coll: %s\n", err);
        goto done;
    }
    if ((trs & 2) && !c.shm) {
        fprintf(stderr, "bench_coll: the workers could not prove they share memory\n");
        goto done;
    }
    printf("collectives over mesh x=%d: %d worker processes x %d devices, f32, K=%d extra "
           "collectives per job (%d below 16 MiB), median of %d jobs (%d below 16 MiB)\n",
           BC_N, BC_WORKERS, BC_DPW, BC_K, bc_k(1), runs, bc_runs(1, runs));
    printf("%-13s %-5s %8s %11s %11s %11s %11s %11s\n", "op", "via", "MiB/dev", "job R=1 ms",
           "t/op ms", "algbw GB/s", "busbw GB/s", "cpu ms/op");
    for (int si = 0; si < nsizes; si++) {
        int64_t bytes = (int64_t)sizes[si] << 20;
        int64_t rows = bytes / (BC_COLS * 4);
        rows -= rows % (BC_N * BC_N);
        bytes = rows * BC_COLS * 4; /* S as measured */
        float *data = malloc((size_t)rows * BC_COLS * 4);
        if (!data || rows < BC_N * BC_N) {
            fprintf(stderr, "bench_coll: size %ld MiB is too small or too large\n", sizes[si]);
            free(data);
            goto done;
        }
        uint64_t x = 88172645463325252ull;
        for (int64_t k = 0; k < rows * BC_COLS; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data[k] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
        }
        /* one full block array and one quarter block array (all_gather) */
        uint64_t full = c.next_id++, quarter = c.next_id++;
        for (int32_t dev = 0; dev < BC_N; dev++) {
            sm_shape fs = {2, {rows, BC_COLS}}, qs = {2, {rows / BC_N, BC_COLS}};
            if (bc_upload(&c, full, dev, &fs, data, rows * BC_COLS * 4, err, sizeof err) ||
                bc_upload(&c, quarter, dev, &qs, data, rows / BC_N * BC_COLS * 4, err,
                          sizeof err)) {
                fprintf(stderr, "bench_coll: upload: %s\n", err);
                free(data);
                goto done;
            }
        }
        free(data);
        double anchor = 0;
        int K = bc_k(sizes[si]), nr = bc_runs(sizes[si], runs);
        if (ops & (1u << BC_PSUM)) {
            double acpu = 0;
            anchor = bc_anchor(bytes, runs, &acpu);
            printf("%-13s %-5s %8ld %11s %11.3f %11.3f %11.3f %11.1f\n", "all-reduce", "2 thr",
                   sizes[si], "", (double)bytes / anchor / 1e6, anchor, anchor, acpu);
            printf("SUMMARY|coll|all-reduce %ld MiB, in-process 2 threads (anchor)|%.4g|GB/s "
                   "busbw|||||n/a\n",
                   sizes[si], anchor);
        }
        double floor_t = 0;
        if (ops & ((1u << BC_ALL_GATHER) | (1u << BC_ALL_TO_ALL) | (1u << BC_PPERMUTE))) {
            floor_t = bc_floor(bytes, runs);
            printf("%-13s %-5s %8ld %11s %11.3f %11.3f %11s %11s\n", "output copy", "2 thr",
                   sizes[si], "", floor_t * 1e3, floor_t > 0 ? (double)bytes / floor_t / 1e9 : 0,
                   "", "");
        }
        for (int op = 0; op < BC_NOPS; op++) {
            for (int tr = BC_GRPC; tr <= BC_SHM; tr++) {
                double t1[BC_MAX_RUN], t2[BC_MAX_RUN], c1[BC_MAX_RUN], c2[BC_MAX_RUN];
                int64_t r = op == BC_ALL_GATHER ? rows / BC_N : rows;
                uint64_t in = op == BC_ALL_GATHER ? quarter : full;
                int bad = 0;
                if (!(ops & (1u << op)) || !(trs & (1u << tr)))
                    continue;
                for (int k = 0; k < nr && !bad; k++)
                    bad = bc_job(&c, tr, op, r, 1, in, &t1[k], &c1[k], err, sizeof err) ||
                          bc_job(&c, tr, op, r, 1 + K, in, &t2[k], &c2[k], err, sizeof err);
                if (bad) {
                    fprintf(stderr, "bench_coll: %s\n", err);
                    goto done;
                }
                double m1 = bench_median(t1, nr), m2 = bench_median(t2, nr);
                double t = (m2 - m1) / K;
                double cpu = (bench_median(c2, nr) - bench_median(c1, nr)) / K;
                double algbw = t > 0 ? (double)bytes / t / 1e9 : 0;
                double busbw = algbw * bc_factor[op];
                printf("%-13s %-5s %8ld %11.2f %11.3f %11.3f %11.3f %11.1f\n", bc_names[op],
                       bc_transport_names[tr], sizes[si], m1 * 1e3, t * 1e3, algbw, busbw,
                       cpu * 1e3);
                char fig[128];
                snprintf(fig, sizeof fig, "%s %ld MiB, shmap %s%d workers x %d devices",
                         bc_names[op], sizes[si], tr == BC_SHM ? "shm " : "", BC_WORKERS, BC_DPW);
                if (op == BC_PSUM && anchor > 0) { /* against the in-process anchor */
                    double ratio = busbw / anchor;
                    int target = tr == BC_SHM && sizes[si] == 64;
                    printf("SUMMARY|coll|%s (vs anchor)|%.4g|GB/s busbw|in-process 2 thr|%.4g|%.2f|"
                           "%s|%s\n",
                           fig, busbw, anchor, ratio, target ? ">= 0.5x" : "",
                           target ? (ratio >= 0.5 ? "met" : "not met") : "n/a");
                }
                if ((op == BC_ALL_GATHER || op == BC_ALL_TO_ALL || op == BC_PPERMUTE) &&
                    tr == BC_SHM && floor_t > 0) { /* against the copy floor */
                    double fbus = (double)bytes / floor_t / 1e9 * bc_factor[op];
                    printf("SUMMARY|coll|%s (vs copy floor)|%.4g|GB/s busbw|output copy, 2 "
                           "thr|%.4g|%.2f||n/a\n",
                           fig, busbw, fbus, busbw / fbus);
                }
                /* paired with Open MPI by run.sh, which sets the targets */
                printf("SUMMARY|coll|%s|%.4g|GB/s busbw|||||n/a\n", fig, busbw);
                fflush(stdout);
            }
        }
        for (int w = 0; w < BC_WORKERS; w++) {
            sm_svc_worker_free_array(c.ch[w], BC_CALL_MS, (sm_array_id){full}, 0, NULL, err,
                                     sizeof err);
            sm_svc_worker_free_array(c.ch[w], BC_CALL_MS, (sm_array_id){quarter}, 0, NULL, err,
                                     sizeof err);
        }
    }
    rc = 0;
done:
    bc_stop(&c);
    sm_rpc_shutdown();
    return rc;
}
