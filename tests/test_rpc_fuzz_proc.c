/* Robustness suite for the real processes: one shmap-coordinator
 * ($SHMAP_COORDINATOR_BIN) with two local workers of four devices, fed bad
 * input over real sockets:
 *  - every unary method of both services (paths from proto/shmap.proto):
 *    N random byte strings (0..512 bytes) and N mutations of valid requests
 *    (fields replaced by reflection: 9+ dims, negative sizes, 2^62, 10 KB
 *    names, counts past the limits; bit flips, truncation, inserted bytes,
 *    huge and overlong varints, field numbers out of range, wrong wire
 *    types, lying lengths), also from 4 clients at once;
 *  - upload streams (Upload, PutShard) broken in 25 designed ways plus
 *    random, raw and mutated sequences; downloads of bad boxes, devices and
 *    arrays; Exchange messages for jobs nobody runs; streams abandoned
 *    midway; an array deleted while it is read and resharded;
 *  - unknown methods (UNIMPLEMENTED, fast) and oversized messages
 *    (RESOURCE_EXHAUSTED, sent over raw gRPC since sm_rpc refuses them).
 * Every call must end with a status (never a transport failure, never an OK
 * reply that does not parse) within 5 s; after every batch every process is
 * alive and answers Health, both workers are alive in ListDevices, an array
 * uploaded at the start still downloads bit-exact, a pending array that saw
 * only garbage is still pending (and at the end takes a correct upload), and
 * every job the fuzzing submitted ends. Sanitizer reports in the processes'
 * log fail the suite.
 *
 * Runs with CK_NOFORK (gRPC is not fork-safe): the cluster is started once
 * with posix_spawn in a process group of its own and killed at exit or on a
 * fatal signal. The fixed seed is printed; SM_FUZZ_SEED overrides it,
 * SM_FUZZ_N the number of cases per method and kind (default 500),
 * SM_FUZZ_VERBOSE prints every stream's status. A failing case is printed
 * in hex with the coordinator's log. */
#define _GNU_SOURCE /* nftw */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sm_checksum.h"
#include "sm_ir.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_svc.h"
#include "sm_svc_job.h"

extern char **environ;

#define CALL_MS   10000 /* deadline of every fuzz call */
#define PROMPT_MS 5000  /* every answer must come within this */
#define MAX_RAW   512
#define C_PATH(m) "/shmap.v1.Coordinator/" m
#define W_PATH(m) "/shmap.v1.Worker/" m

/* ---- the cluster (one per suite) ------------------------------------------- */

typedef struct {
    pid_t pid; /* the coordinator, leader of its process group */
    char dir[64];
    char target[64]; /* the coordinator's "127.0.0.1:PORT" */
    sm_rpc_channel *coord;
    sm_rpc_channel *wch[2];
    char waddr[2][SM_ADDR_MAX];
    uint32_t wid[2];
    int32_t wdev[2][4];
    pid_t wpid[2];
    sm_array_id keep;    /* READY, checked bit-exact after every batch */
    sm_array_id pending; /* PENDING, receives only garbage until the last test */
    uint64_t seed;
    int n; /* cases per method and kind */
} cluster;

static cluster cl;
static int32_t mesh_devs[8]; /* mesh m's devices, in mesh order */

static void build_templates(void);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void print_log(void)
{
    char path[128], line[512];
    snprintf(path, sizeof path, "%s/coord.log", cl.dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- coordinator log (last lines) ----\n");
    long keep = 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    keep = size > 8192 ? size - 8192 : 0;
    fseek(f, keep, SEEK_SET);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

static void cluster_kill(void)
{
    if (cl.pid > 0) {
        kill(-cl.pid, SIGKILL);
        waitpid(cl.pid, NULL, 0);
        cl.pid = 0;
    }
}

/* A crash or a kill of this process takes the cluster with it. */
static void on_fatal(int sig)
{
    if (cl.pid > 0)
        kill(-cl.pid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Children of pid from /proc (the local workers). */
static int children_of(pid_t pid, pid_t *out, int max)
{
    char cmd[96];
    int n = 0, v;
    snprintf(cmd, sizeof cmd, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(cmd, "r");
    if (!f)
        return 0;
    while (n < max && fscanf(f, "%d", &v) == 1)
        out[n++] = v;
    fclose(f);
    return n;
}

/* 1 if pid exists and is not a zombie. */
static int proc_alive(pid_t pid)
{
    char path[64], buf[256];
    if (kill(pid, 0) != 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int health(sm_rpc_channel *ch)
{
    Grpc__Health__V1__HealthCheckRequest rq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    char err[256];
    sm_err e = sm_rpc_unary(ch, "/grpc.health.v1.Health/Check", &rq.base,
                            &grpc__health__v1__health_check_response__descriptor, &rep, 3000, err,
                            sizeof err);
    int ok = e == SM_OK && ((Grpc__Health__V1__HealthCheckResponse *)rep)->status ==
                               GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    sm_rpc_msg_free(rep);
    return ok;
}

/* ---- test data -------------------------------------------------------------- */

/* Global value of the kept f32[16,32] array at (i, j). */
static float val(int64_t i, int64_t j, float salt)
{
    return (float)(i * 1000 + j) + salt;
}

static float *box_data(const sm_index *box, float salt, size_t *nbytes)
{
    int64_t r = box->r[0].stop - box->r[0].start, c = box->r[1].stop - box->r[1].start;
    float *d = malloc(sizeof *d * (size_t)(r * c) + 1);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            d[i * c + j] = val(box->r[0].start + i, box->r[1].start + j, salt);
    *nbytes = sizeof *d * (size_t)(r * c);
    return d;
}

static sm_err upload(sm_array_id id, const int32_t *devs, int ndev, sm_shape shape,
                     const void *data, size_t nbytes, size_t chunk, char *err, size_t errlen)
{
    sm_svc_upload_stream *st;
    sm_err e = sm_svc_upload_open(cl.coord, 0, CALL_MS, &st, err, errlen);
    if (e)
        return e;
    size_t off = 0;
    do {
        size_t n = nbytes - off < chunk ? nbytes - off : chunk;
        sm_svc_upload_msg m = {0};
        if (off == 0) {
            m.has_header = 1;
            m.header =
                (sm_svc_upload_header){id, ndev, (int32_t *)devs, shape, SM_F32, (int64_t)nbytes};
        }
        m.offset = (int64_t)off;
        m.data = (const char *)data + off;
        m.len = n;
        off += n;
        m.last = off == nbytes;
        if (m.last)
            m.checksum = sm_checksum_oneshot(data, nbytes);
        if ((e = sm_svc_upload_send(st, &m, err, errlen))) {
            sm_svc_upload_abort(st);
            return e;
        }
    } while (off < nbytes);
    return sm_svc_upload_finish(st, NULL, err, errlen);
}

static sm_err download(sm_array_ref ref, int32_t device, void **out, size_t *nbytes, char *err,
                       size_t errlen)
{
    sm_svc_download_req req = {ref, device, 0, {0}};
    sm_svc_download_stream *st;
    sm_svc_chunk c;
    int end = 0;
    char *buf = NULL;
    int64_t total = -1;
    *out = NULL;
    sm_err e = sm_svc_download_open(cl.coord, 0, &req, CALL_MS, &st, err, errlen);
    if (e)
        return e;
    while (!(e = sm_svc_download_recv(st, &c, &end, err, errlen)) && !end) {
        if (c.has_meta && !buf) {
            total = c.total_bytes;
            buf = malloc((size_t)total + 1);
        }
        if (!buf || c.offset < 0 || c.offset + (int64_t)c.len > total) {
            e = sm_fail(err, errlen, SM_EFORMAT, "bad chunk");
            break;
        }
        memcpy(buf + c.offset, c.data, c.len);
    }
    sm_svc_download_free(st);
    if (e) {
        free(buf);
        return e;
    }
    *out = buf;
    *nbytes = (size_t)total;
    return SM_OK;
}

static sm_err create(const char *name, const char *spec, sm_svc_create_array_reply *rep, char *err,
                     size_t errlen)
{
    sm_svc_create_array_req req = {0};
    req.name = name;
    req.dtype = SM_F32;
    req.has_shape = 1;
    req.shape = (sm_shape){2, {16, 32}};
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse(spec, &req.sharding.spec, err, errlen), SM_OK);
    req.kind = SM_PUT_WHOLE;
    req.deadline_ms = 600000;
    return sm_svc_coord_create_array(cl.coord, CALL_MS, &req, rep, err, errlen);
}

static sm_array_state state_of(sm_array_id id)
{
    sm_array_info info;
    char err[512];
    sm_err e =
        sm_svc_coord_describe(cl.coord, CALL_MS, (sm_array_ref){id, NULL}, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "describe %llu: %s", (unsigned long long)id.v, err);
    sm_array_state s = info.state;
    sm_array_info_free(&info);
    return s;
}

/* Every shard of id holds the values of salt. */
static void check_values(sm_array_id id, float salt)
{
    sm_array_info info;
    char err[512];
    ck_assert_msg(sm_svc_coord_describe(cl.coord, CALL_MS, (sm_array_ref){id, NULL}, &info, err,
                                        sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    for (int s = 0; s < info.nshards; s++) {
        void *got;
        size_t nb, want_nb;
        ck_assert_msg(download((sm_array_ref){id, NULL}, info.shards[s].device, &got, &nb, err,
                               sizeof err) == SM_OK,
                      "device %d: %s", info.shards[s].device, err);
        float *want = box_data(&info.shards[s].index, salt, &want_nb);
        ck_assert_int_eq(nb, want_nb);
        ck_assert_msg(memcmp(got, want, nb) == 0, "device %d: data differs", info.shards[s].device);
        free(got);
        free(want);
    }
    sm_array_info_free(&info);
}

/* The invariants after every batch: every process alive and serving, both
 * workers alive in the registry, the kept array bit-exact, the garbage
 * target still pending and no array named fz_pending listed as ready. */
static void check_cluster(const char *batch)
{
    char err[512];
    int64_t t0 = now_ms();
    if (!proc_alive(cl.pid) || waitpid(cl.pid, NULL, WNOHANG) != 0) {
        print_log();
        ck_abort_msg("after %s: the coordinator is gone", batch);
    }
    for (int w = 0; w < 2; w++) {
        if (!proc_alive(cl.wpid[w])) {
            print_log();
            ck_abort_msg("after %s: worker pid %d is gone", batch, (int)cl.wpid[w]);
        }
        ck_assert_msg(health(cl.wch[w]), "after %s: worker %s does not answer Health", batch,
                      cl.waddr[w]);
    }
    ck_assert_msg(health(cl.coord), "after %s: the coordinator does not answer Health", batch);
    sm_worker_info *wi = NULL;
    int nw = 0, alive = 0;
    ck_assert_msg(sm_svc_coord_list_devices(cl.coord, CALL_MS, &wi, &nw, err, sizeof err) == SM_OK,
                  "after %s: ListDevices: %s", batch, err);
    for (int i = 0; i < nw; i++)
        alive += (wi[i].id.v == cl.wid[0] || wi[i].id.v == cl.wid[1]) && wi[i].alive;
    free(wi);
    ck_assert_msg(alive == 2, "after %s: %d of the 2 workers alive", batch, alive);
    check_values(cl.keep, 0.5f);
    ck_assert_int_eq(state_of(cl.pending), SM_ARRAY_PENDING);
    sm_array_info *list;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_arrays(cl.coord, CALL_MS, &list, &n, err, sizeof err),
                     SM_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(
            !(strncmp(list[i].name, "fz_pending", 10) == 0 && list[i].state == SM_ARRAY_READY),
            "after %s: garbage array '%s' is ready", batch, list[i].name);
    sm_array_info_list_free(list, n);
    fprintf(stderr, "fuzz: %-28s ok (invariants checked in %lld ms)\n", batch,
            (long long)(now_ms() - t0));
}

static void cluster_start(void)
{
    const char *bin = getenv("SHMAP_COORDINATOR_BIN");
    const char *worker = getenv("SHMAP_WORKER");
    const char *s = getenv("SM_FUZZ_SEED");
    const char *sn = getenv("SM_FUZZ_N");
    char portfile[128], logfile[128], err[512];
    memset(&cl, 0, sizeof cl);
    cl.seed = s && *s ? strtoull(s, NULL, 0) : 20261122;
    cl.n = sn && *sn ? atoi(sn) : 500;
    fprintf(stderr, "fuzz: seed %llu (SM_FUZZ_SEED), %d cases per kind (SM_FUZZ_N)\n",
            (unsigned long long)cl.seed, cl.n);
    if (!bin || !*bin)
        bin = "../server/shmap-coordinator";
    ck_assert_msg(access(bin, X_OK) == 0, "no coordinator binary at %s", bin);
    snprintf(cl.dir, sizeof cl.dir, "/tmp/sm_fuzz_proc.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cl.dir));
    snprintf(portfile, sizeof portfile, "%s/port", cl.dir);
    snprintf(logfile, sizeof logfile, "%s/coord.log", cl.dir);
    char *argv[16] = {(char *)bin, "--listen",        "127.0.0.1:0", "--port-file",
                      portfile,    "--local-workers", "2",           "--devices-per-worker",
                      "4",         "--log-level",     "error"};
    if (worker && *worker) {
        argv[11] = "--worker-binary";
        argv[12] = (char *)worker;
    }
    posix_spawnattr_t at;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, logfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = posix_spawn(&cl.pid, bin, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    ck_assert_msg(rc == 0, "posix_spawn %s: %s", bin, strerror(rc));
    atexit(cluster_kill);
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], on_fatal);

    int port = 0;
    int64_t until = now_ms() + 30000;
    while (now_ms() < until && port <= 0) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (waitpid(cl.pid, NULL, WNOHANG) != 0) {
            print_log();
            ck_abort_msg("the coordinator exited at start");
        }
        sleep_ms(20);
    }
    ck_assert_msg(port > 0, "no port file after 30 s");
    snprintf(cl.target, sizeof cl.target, "127.0.0.1:%d", port);
    sm_rpc_init();
    ck_assert_int_eq(sm_rpc_channel_create(cl.target, NULL, &cl.coord, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_wait_ready(cl.coord, 10000, err, sizeof err), SM_OK);

    sm_worker_info *wi = NULL;
    int nw = 0;
    until = now_ms() + 30000;
    for (;;) {
        int alive = 0;
        free(wi);
        wi = NULL;
        if (sm_svc_coord_list_devices(cl.coord, CALL_MS, &wi, &nw, err, sizeof err) == SM_OK)
            for (int i = 0; i < nw; i++)
                alive += wi[i].alive;
        if (alive == 2 && nw == 2)
            break;
        ck_assert_msg(now_ms() < until, "workers not alive after 30 s");
        sleep_ms(50);
    }
    for (int w = 0; w < 2; w++) {
        int k = wi[0].process_index == w ? 0 : 1;
        cl.wid[w] = wi[k].id.v;
        snprintf(cl.waddr[w], sizeof cl.waddr[w], "%s", wi[k].address);
        ck_assert_int_eq(wi[k].ndevices, 4);
        memcpy(cl.wdev[w], wi[k].devices, sizeof cl.wdev[w]);
        ck_assert_int_eq(sm_rpc_channel_create(cl.waddr[w], NULL, &cl.wch[w], err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(sm_rpc_channel_wait_ready(cl.wch[w], 10000, err, sizeof err), SM_OK);
    }
    free(wi);
    ck_assert_int_eq(children_of(cl.pid, cl.wpid, 2), 2);

    sm_mesh m;
    sm_mesh_info mi;
    ck_assert_int_eq(sm_mesh_parse("i=2,j=4", NULL, 0, &m, err, sizeof err), SM_OK);
    m.ndevices = 0;
    ck_assert_msg(sm_svc_coord_create_mesh(cl.coord, CALL_MS, "m", &m, 1, &mi, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    ck_assert_int_eq(mi.mesh.ndevices, 8);
    memcpy(mesh_devs, mi.mesh.devices, sizeof mesh_devs);
    /* the kept array, uploaded with correct messages */
    sm_svc_create_array_reply rep;
    ck_assert_msg(create("fz_keep", "P('i','j')", &rep, err, sizeof err) == SM_OK, "%s", err);
    for (int t = 0; t < rep.ntargets; t++) {
        size_t nb;
        float *d = box_data(&rep.targets[t].global_index, 0.5f, &nb);
        ck_assert_msg(upload(rep.array.id, rep.targets[t].devices, rep.targets[t].ndevices,
                             rep.array.shard_shape, d, nb, 100, err, sizeof err) == SM_OK,
                      "%s", err);
        free(d);
    }
    cl.keep = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    /* the garbage target: replicated, one target of all 8 devices */
    ck_assert_msg(create("fz_pending", "P()", &rep, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(rep.ntargets, 1);
    cl.pending = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    build_templates();
    check_cluster("start");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void cluster_stop(void)
{
    for (int w = 0; w < 2; w++)
        if (cl.wch[w])
            sm_rpc_channel_free(cl.wch[w]);
    if (cl.coord)
        sm_rpc_channel_free(cl.coord);
    cl.coord = cl.wch[0] = cl.wch[1] = NULL;
    cluster_kill();
    char path[128];
    snprintf(path, sizeof path, "%s/port", cl.dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/coord.log", cl.dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/ck", cl.dir);
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* the checkpoints written */
    rmdir(cl.dir);
}

/* ---- random data --------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rnd(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t below(rng *r, uint64_t n)
{
    return n ? rnd(r) % n : 0;
}

static int64_t pick_i64(rng *r)
{
    static const int64_t v[] = {0,
                                1,
                                -1,
                                2,
                                3,
                                4,
                                7,
                                8,
                                9,
                                16,
                                255,
                                256,
                                4096,
                                65536,
                                INT32_MAX,
                                INT32_MIN,
                                (int64_t)1 << 31,
                                (int64_t)1 << 32,
                                (int64_t)1 << 53,
                                (int64_t)1 << 62,
                                -((int64_t)1 << 62),
                                INT64_MAX,
                                INT64_MIN};
    if (below(r, 8) == 0)
        return (int64_t)rnd(r);
    return v[below(r, sizeof v / sizeof v[0])];
}

static char *pick_str(rng *r)
{
    static const char *const v[] = {
        "",           "m",      "i",    "j",           "x",        "fz_keep",
        "fz_pending", "P('i')", "psum", "127.0.0.1:1", "%s%n%s%n", "\xff\xfe\x80",
        "a b c",      "0"};
    uint64_t k = below(r, 8);
    if (k == 0) { /* a name of 10 KB */
        size_t n = 10240 + below(r, 64);
        char *s = malloc(n + 1);
        memset(s, 'n', n);
        s[n] = 0;
        return s;
    }
    if (k == 1) {
        size_t n = 1 + below(r, 40);
        char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)(1 + below(r, 255));
        s[n] = 0;
        return s;
    }
    return strdup(v[below(r, sizeof v / sizeof v[0])]);
}

/* A count for a repeated field: often 0..3, sometimes 8..129 (e.g. dims). */
static size_t pick_count(rng *r, int depth)
{
    static const size_t v[] = {0, 1, 2, 3, 4, 8, 9, 10, 17, 33, 65, 129};
    size_t n = below(r, 2) ? below(r, 4) : v[below(r, sizeof v / sizeof v[0])];
    if (depth == 0 && below(r, 16) == 0) /* past SM_MAX_WORKER_DEVICES */
        n = 257 + below(r, 64);
    return depth > 1 && n > 9 ? 9 : n;
}

/* ---- messages built by reflection ------------------------------------------------ */

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    default:
        return 4;
    }
}

static ProtobufCMessage *gen_msg(rng *r, const ProtobufCMessageDescriptor *d, int depth);

/* Writes one random value of f's type at slot (which holds nothing owned). */
static void gen_value(rng *r, const ProtobufCFieldDescriptor *f, void *slot, int depth)
{
    int64_t v = pick_i64(r);
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        memcpy(slot, &v, 8);
        break;
    case PROTOBUF_C_TYPE_DOUBLE: {
        double x = below(r, 2) ? (double)v : -0.5;
        memcpy(slot, &x, 8);
        break;
    }
    case PROTOBUF_C_TYPE_FLOAT: {
        float x = (float)v;
        memcpy(slot, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        protobuf_c_boolean b = (protobuf_c_boolean)below(r, 2);
        memcpy(slot, &b, sizeof b);
        break;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        static const int32_t e[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, INT32_MAX, INT32_MIN};
        int32_t x = e[below(r, sizeof e / sizeof e[0])];
        memcpy(slot, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        char *s = pick_str(r);
        memcpy(slot, &s, sizeof s);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData b;
        b.len = below(r, 4) ? below(r, 64) : 4096 + below(r, 4096);
        b.data = malloc(b.len + 1);
        for (size_t i = 0; i < b.len; i++)
            b.data[i] = (uint8_t)rnd(r);
        memcpy(slot, &b, sizeof b);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage *m =
            gen_msg(r, (const ProtobufCMessageDescriptor *)f->descriptor, depth + 1);
        memcpy(slot, &m, sizeof m);
        break;
    }
    default: {
        int32_t x = (int32_t)v;
        memcpy(slot, &x, 4);
        break;
    }
    }
}

/* Frees what field f of m owns and resets it to its default. */
static void field_clear(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    char *base = (char *)m;
    size_t n = 1;
    char *arr = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        n = *(size_t *)(base + f->quantifier_offset);
        arr = *(char **)(base + f->offset);
    }
    for (size_t i = 0; arr && i < n; i++) {
        char *slot = arr + i * elem_size(f->type);
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            char *s = *(char **)slot;
            if (s && s != (const char *)f->default_value)
                free(s);
            *(char **)slot = (char *)f->default_value;
        } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
            ProtobufCBinaryData *b = (ProtobufCBinaryData *)slot;
            const ProtobufCBinaryData *dv = f->default_value;
            if (b->data && (!dv || b->data != dv->data))
                free(b->data);
            b->data = NULL;
            b->len = 0;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            sm_rpc_msg_free(*(ProtobufCMessage **)slot);
            *(ProtobufCMessage **)slot = NULL;
        } else {
            memset(slot, 0, elem_size(f->type));
        }
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        free(arr);
        *(char **)(base + f->offset) = NULL;
        *(size_t *)(base + f->quantifier_offset) = 0;
    } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset) {
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 0;
    }
}

/* Sets field f of m (cleared) to a random value or list. */
static void field_gen(rng *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, int depth)
{
    char *base = (char *)m;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth > 3)
        return;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t n = pick_count(r, depth + (f->type == PROTOBUF_C_TYPE_MESSAGE));
        size_t es = elem_size(f->type);
        char *arr = n ? calloc(n, es) : NULL;
        for (size_t i = 0; i < n; i++)
            gen_value(r, f, arr + i * es, depth);
        *(char **)(base + f->offset) = arr;
        *(size_t *)(base + f->quantifier_offset) = n;
        return;
    }
    gen_value(r, f, base + f->offset, depth);
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
}

/* A random message of type d (malloc'd; free with sm_rpc_msg_free). */
static ProtobufCMessage *gen_msg(rng *r, const ProtobufCMessageDescriptor *d, int depth)
{
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    d->message_init(m);
    for (unsigned i = 0; i < d->n_fields; i++)
        if (below(r, 3) != 0)
            field_gen(r, m, &d->fields[i], depth);
    return m;
}

/* Replaces one field somewhere in m (descending into set sub-messages) with a
 * random value. */
static void mutate_msg(rng *r, ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    if (!d->n_fields)
        return;
    const ProtobufCFieldDescriptor *f = &d->fields[below(r, d->n_fields)];
    char *base = (char *)m;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && below(r, 3) != 0) {
        ProtobufCMessage *sub = NULL;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)(base + f->quantifier_offset);
            if (n)
                sub = (*(ProtobufCMessage ***)(base + f->offset))[below(r, n)];
        } else {
            sub = *(ProtobufCMessage **)(base + f->offset);
        }
        if (sub) {
            mutate_msg(r, sub, depth + 1);
            return;
        }
    }
    field_clear(m, f);
    field_gen(r, m, f, depth);
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *n)
{
    *n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*n + 1);
    protobuf_c_message_pack(m, b);
    return b;
}

/* A message that packs to exactly bytes b: no fields, one unknown field of
 * tag 0 whose wire type byte is b[0] and whose data is the rest. */
typedef struct {
    Shmap__V1__Empty m;
    ProtobufCMessageUnknownField uf;
} raw_msg;

static const ProtobufCMessage *raw_of(raw_msg *r, const uint8_t *b, size_t n)
{
    Shmap__V1__Empty init = SHMAP__V1__EMPTY__INIT;
    r->m = init;
    if (n) {
        r->uf.tag = 0;
        r->uf.wire_type = (ProtobufCWireType)b[0];
        r->uf.len = n - 1;
        r->uf.data = (uint8_t *)b + 1;
        r->m.base.n_unknown_fields = 1;
        r->m.base.unknown_fields = &r->uf;
    }
    return &r->m.base;
}

/* ---- byte-level mutations ------------------------------------------------------ */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} buf;

static void buf_reserve(buf *x, size_t more)
{
    if (x->n + more + 1 > x->cap) {
        x->cap = (x->n + more + 1) * 2;
        x->b = realloc(x->b, x->cap);
    }
}

static void buf_insert(buf *x, size_t at, const uint8_t *p, size_t n)
{
    buf_reserve(x, n);
    memmove(x->b + at + n, x->b + at, x->n - at);
    memcpy(x->b + at, p, n);
    x->n += n;
}

static size_t varint(uint64_t v, uint8_t *out)
{
    size_t i = 0;
    while (v >= 0x80) {
        out[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[i++] = (uint8_t)v;
    return i;
}

/* Reads a varint at p (at most end); returns its length or 0. */
static size_t read_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80))
            return i + 1;
    }
    return 0;
}

/* Top-level fields of an encoded message: start of key, of payload (after a
 * length prefix for wire type 2) and end. */
typedef struct {
    size_t key, len_at, payload, end;
    int wt;
} span;

static int spans_of(const buf *x, span *out, int max)
{
    const uint8_t *p = x->b, *end = x->b + x->n;
    int n = 0;
    while (p < end && n < max) {
        uint64_t key, len = 0;
        size_t kl = read_varint(p, end, &key);
        if (!kl)
            break;
        span s = {(size_t)(p - x->b), 0, 0, 0, (int)(key & 7)};
        const uint8_t *q = p + kl;
        s.len_at = (size_t)(q - x->b);
        switch (s.wt) {
        case 0: {
            size_t l = read_varint(q, end, &len);
            if (!l)
                return n;
            q += l;
            break;
        }
        case 1:
            q += 8;
            break;
        case 2: {
            size_t l = read_varint(q, end, &len);
            if (!l || len > (uint64_t)(end - q - l))
                return n;
            s.payload = (size_t)(q + l - x->b);
            q += l + len;
            break;
        }
        case 5:
            q += 4;
            break;
        default:
            return n;
        }
        if (q > end)
            return n;
        if (s.wt != 2)
            s.payload = s.len_at;
        s.end = (size_t)(q - x->b);
        out[n++] = s;
        p = q;
    }
    return n;
}

/* One byte-level mutation of x. */
static void mutate_bytes(rng *r, buf *x)
{
    span sp[256];
    int ns = spans_of(x, sp, 256);
    uint8_t tmp[32];
    size_t k;
    switch (below(r, 9)) {
    case 0: /* bit flips */
        for (int i = 0, m = 1 + (int)below(r, 8); x->n && i < m; i++)
            x->b[below(r, x->n)] ^= (uint8_t)(1u << below(r, 8));
        break;
    case 1: /* truncation */
        x->n = below(r, x->n + 1);
        break;
    case 2: /* inserted random bytes */
        k = 1 + below(r, 16);
        for (size_t i = 0; i < k; i++)
            tmp[i] = (uint8_t)rnd(r);
        buf_insert(x, below(r, x->n + 1), tmp, k);
        break;
    case 3: { /* a huge (or overlong, invalid) varint in a field 1..20 */
        size_t n = varint((1 + below(r, 20)) << 3, tmp);
        if (below(r, 2)) {
            n += varint(UINT64_MAX, tmp + n);
        } else {
            memset(tmp + n, 0xff, 11);
            n += 11;
            tmp[n++] = 0x01;
        }
        buf_insert(x, ns ? sp[below(r, (uint64_t)ns)].key : 0, tmp, n);
        break;
    }
    case 4: { /* field numbers out of range: 0, 2^29 - 1, 2^29, 2^32 + 1 */
        static const uint64_t nums[] = {0, (1u << 29) - 1, 1u << 29, (1ull << 32) + 1, 19000};
        size_t n = varint((nums[below(r, 5)] << 3) | below(r, 6), tmp);
        n += varint(below(r, 2) ? 1 : (1ull << 62), tmp + n);
        buf_insert(x, below(r, x->n + 1), tmp, n);
        break;
    }
    case 5: /* a wrong wire type on a field */
        if (ns) {
            span s = sp[below(r, (uint64_t)ns)];
            x->b[s.key] = (uint8_t)((x->b[s.key] & ~7u) | below(r, 8));
        }
        break;
    case 6: /* a length prefix that lies: 2^62, 2^31 - 1, +1, 0 */
        for (int i = 0; i < ns; i++) {
            span s = sp[(i + (int)below(r, (uint64_t)ns)) % ns];
            if (s.wt != 2)
                continue;
            static const uint64_t lens[] = {1ull << 62, INT32_MAX, 0, UINT64_MAX};
            uint64_t nl = below(r, 5) == 0 ? (s.end - s.payload) + 1 : lens[below(r, 4)];
            size_t n = varint(nl, tmp);
            memmove(x->b + s.len_at, x->b + s.payload, x->n - s.payload);
            x->n -= s.payload - s.len_at;
            buf_insert(x, s.len_at, tmp, n);
            break;
        }
        break;
    case 7: /* a field repeated */
        if (ns) {
            span s = sp[below(r, (uint64_t)ns)];
            size_t n = s.end - s.key;
            uint8_t *copy = malloc(n + 1);
            memcpy(copy, x->b + s.key, n);
            buf_insert(x, below(r, 2) ? x->n : s.key, copy, n);
            free(copy);
        }
        break;
    default: /* a group start or end, or a reserved wire type */
        tmp[0] = (uint8_t)((1 + below(r, 15)) << 3 | (3 + below(r, 5)));
        buf_insert(x, below(r, x->n + 1), tmp, 1);
        break;
    }
}

static void hexdump(const char *what, const uint8_t *b, size_t n)
{
    fprintf(stderr, "fuzz case %s (%zu bytes):", what, n);
    for (size_t i = 0; i < n && i < 1024; i++)
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", b[i]);
    fprintf(stderr, "\n");
}

/* ---- the methods under test ---------------------------------------------------- */

/* What a fuzz case may not do, because it would be a legitimate request that
 * deletes or overwrites the arrays the invariants watch. */
/* G_CKPT: a checkpoint write (Save, WriteCheckpoint) is sent only when its
 * directory is relative (refused) or inside the suite's ckpt dir. */
typedef enum { G_NONE, G_DELETE, G_FREE, G_ASSEMBLE, G_RUNJOB, G_SAVE, G_WRITE_CKPT } guard;

typedef struct {
    const char *path;
    int worker; /* 0: the coordinator, 1: worker 0 */
    const ProtobufCMessageDescriptor *req, *rep;
    guard g;
    uint8_t *tmpl[4]; /* valid encoded requests (built at start) */
    size_t ntmpl[4];
    int nt;
    int codes[17], skipped;
} method;

#define ROW(w, name, rq, rp, g)                                                                    \
    {                                                                                              \
        (w) ? W_PATH(name) : C_PATH(name), w, &shmap__v1__##rq##__descriptor,                      \
            &shmap__v1__##rp##__descriptor, g, {NULL}, {0}, 0, {0}, 0                              \
    }

static method methods[] = {
    ROW(0, "Negotiate", negotiate_request, negotiate_reply, G_NONE),
    ROW(0, "ListDevices", empty, list_devices_reply, G_NONE),
    ROW(0, "CreateMesh", create_mesh_request, mesh, G_NONE),
    ROW(0, "GetMesh", mesh, mesh, G_NONE),
    ROW(0, "ListMeshes", empty, list_meshes_reply, G_NONE),
    ROW(0, "CreateArray", create_array_request, create_array_reply, G_NONE),
    ROW(0, "Describe", array_ref, array_info, G_NONE),
    ROW(0, "ListArrays", empty, list_arrays_reply, G_NONE),
    ROW(0, "Delete", array_ref, empty, G_DELETE),
    ROW(0, "Reshard", reshard_request, array_info, G_NONE),
    ROW(0, "RegisterWorker", register_worker_request, register_worker_reply, G_NONE),
    ROW(0, "Heartbeat", heartbeat_request, heartbeat_reply, G_NONE),
    ROW(0, "CommitShards", commit_shards_request, upload_reply, G_NONE),
    ROW(0, "SubmitJob", submit_job_request, submit_job_reply, G_NONE),
    ROW(0, "WaitJob", job_ref, job_info, G_NONE),
    ROW(0, "GetJob", job_ref, job_info, G_NONE),
    ROW(0, "CancelJob", job_ref, job_info, G_NONE),
    ROW(0, "Save", save_request, save_reply, G_SAVE),
    ROW(0, "Load", load_request, array_info, G_NONE),
    ROW(1, "Negotiate", negotiate_request, negotiate_reply, G_NONE),
    ROW(1, "FreeArray", free_array_request, empty, G_FREE),
    ROW(1, "Assemble", assemble_request, assemble_reply, G_ASSEMBLE),
    ROW(1, "Stats", empty, worker_stats_reply, G_NONE),
    ROW(1, "RunJob", run_job_request, run_job_reply, G_RUNJOB),
    ROW(1, "CancelJob", job_ref, empty, G_NONE),
    ROW(1, "WriteCheckpoint", write_checkpoint_request, write_checkpoint_reply, G_WRITE_CKPT),
    ROW(1, "ReadManifest", read_manifest_request, read_manifest_reply, G_NONE),
};
#define NMETHODS ((int)(sizeof methods / sizeof methods[0]))

static int is_kept(uint64_t id, const char *name)
{
    return (id && (id == cl.keep.v || id == cl.pending.v)) ||
           (!id && name && (!strcmp(name, "fz_keep") || !strcmp(name, "fz_pending")));
}

/* The directory checkpoints may be written to: cl.dir/ck. */
static void ckpt_root(char *buf, size_t len)
{
    snprintf(buf, len, "%s/ck/", cl.dir);
}

/* 1 if a checkpoint write into dir would land outside the suite's ckpt dir
 * (only absolute dirs are written; relative ones are refused). */
static int ckpt_outside(const char *dir)
{
    char root[128];
    ckpt_root(root, sizeof root);
    return dir && dir[0] == '/' && (strncmp(dir, root, strlen(root)) || strstr(dir, ".."));
}

/* 1 if b parses as m's request and would legitimately delete or overwrite
 * the watched arrays, or write files outside the suite's own dir. */
static int touches_kept(const method *m, const uint8_t *b, size_t n)
{
    if (m->g == G_NONE)
        return 0;
    ProtobufCMessage *p = protobuf_c_message_unpack(m->req, NULL, n, b);
    int hit = 0;
    if (!p)
        return 0;
    if (m->g == G_DELETE) {
        Shmap__V1__ArrayRef *r = (Shmap__V1__ArrayRef *)p;
        hit = is_kept(r->id, r->name) || is_kept(0, r->name);
    } else if (m->g == G_FREE) {
        hit = is_kept(((Shmap__V1__FreeArrayRequest *)p)->array_id, NULL);
    } else if (m->g == G_ASSEMBLE) {
        Shmap__V1__AssembleRequest *r = (Shmap__V1__AssembleRequest *)p;
        hit = is_kept(r->array_id, NULL);
        /* Known, not fixed (see the report): the worker zero-fills a new
         * shard of any size below the host's memory before copying its
         * pieces (partial cover is allowed), e.g. 16 GiB for [65536,65536]
         * with one 8x8 piece. Such requests are not sent, so the suite
         * cannot exhaust a shared host; larger ones are (refused). */
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < r->n_shards; i++) {
            const Shmap__V1__AssembleShard *a = r->shards[i];
            double bytes = 8;
            for (size_t d = 0; a && a->shape && d < a->shape->n_dims; d++)
                bytes *= a->shape->dims[d] < 0 ? 0 : (double)a->shape->dims[d];
            hit |= bytes > (double)(256 << 20) && bytes <= 2 * phys;
        }
    } else if (m->g == G_SAVE) {
        hit = ckpt_outside(((Shmap__V1__SaveRequest *)p)->dir);
    } else if (m->g == G_WRITE_CKPT) {
        hit = ckpt_outside(((Shmap__V1__WriteCheckpointRequest *)p)->dir);
    } else if (m->g == G_RUNJOB) {
        Shmap__V1__RunJobRequest *r = (Shmap__V1__RunJobRequest *)p;
        for (size_t i = 0; i < r->n_output_arrays; i++)
            hit |= is_kept(r->output_arrays[i], NULL);
    }
    sm_rpc_msg_free(p);
    return hit;
}

static sm_rpc_channel *chan(int worker)
{
    return worker ? cl.wch[0] : cl.coord;
}

static pid_t pid_of(int worker)
{
    return worker ? cl.wpid[0] : cl.pid;
}

/* 1 if a failed call's text is gRPC's own (the connection failed) rather
 * than a status the server chose. */
static int transport_failure(sm_err e, const char *err)
{
    static const char *const marks[] = {"Socket closed",
                                        "Connection reset",
                                        "failed to connect",
                                        "Broken pipe",
                                        "Stream removed",
                                        "RST_STREAM",
                                        "GOAWAY",
                                        "Transport closed",
                                        "Connection refused",
                                        "Endpoint read failed"};
    if (e != SM_EUNAVAILABLE && e != SM_EINTERNAL)
        return 0;
    const char *d = strstr(err, ": ");
    d = d ? d + 2 : err;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (strncmp(d, marks[i], strlen(marks[i])) == 0)
            return 1;
    return 0;
}

/* Records the outcome of one call and fails the test on a hang, a
 * transport failure, an unparsable OK reply or a dead process. */
static void judge(const char *path, int worker, sm_err e, const char *err, int64_t ms,
                  const char *kind, const uint8_t *b, size_t n, int *codes)
{
    int status = sm_rpc_status_from_err(e);
    if (codes && status >= 0 && status < 17)
        codes[status]++;
    const char *why = NULL;
    if (ms >= PROMPT_MS) /* DEADLINE_EXCEEDED before then is the server's answer */
        why = "no answer within 5 s";
    else if (e == SM_EFORMAT)
        why = "an OK reply that does not parse";
    else if (transport_failure(e, err))
        why = "a transport failure";
    else if ((e == SM_EUNAVAILABLE || e == SM_EINTERNAL) && !proc_alive(pid_of(worker)))
        why = "the process died";
    if (!why)
        return;
    if (b)
        hexdump(kind, b, n);
    print_log();
    ck_abort_msg("%s (%s): %s after %lld ms: %s", path, kind, why, (long long)ms, err);
}

/* Sends b as m's request; judges the answer. */
static void fuzz_unary(method *m, const uint8_t *b, size_t n, const char *kind)
{
    if (touches_kept(m, b, n)) {
        m->skipped++;
        return;
    }
    raw_msg rm;
    ProtobufCMessage *rep = NULL;
    char err[1024] = "";
    int64_t t0 = now_ms();
    sm_err e = sm_rpc_unary(chan(m->worker), m->path, raw_of(&rm, b, n), m->rep, &rep, CALL_MS, err,
                            sizeof err);
    sm_rpc_msg_free(rep);
    judge(m->path, m->worker, e, err, now_ms() - t0, kind, b, n, m->codes);
}

static void set_template(method *m, const ProtobufCMessage *req)
{
    ck_assert_int_lt(m->nt, 4);
    m->tmpl[m->nt] = pack(req, &m->ntmpl[m->nt]);
    m->nt++;
}

static method *method_of(int worker, const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "%s%s", worker ? W_PATH("") : C_PATH(""), name);
    for (int i = 0; i < NMETHODS; i++)
        if (!strcmp(methods[i].path, path))
            return &methods[i];
    ck_abort_msg("no method %s", path);
    return NULL;
}

/* The Program message of text (malloc'd; sm_rpc_msg_free). */
static Shmap__V1__Program *program_of(const char *text)
{
    sm_program *p = NULL;
    uint8_t *b = NULL;
    size_t n = 0;
    char err[512];
    ck_assert_msg(sm_program_parse(text, "fz.shmap", &p, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_svc_program_encode(p, &b, &n, err, sizeof err) == SM_OK, "%s", err);
    sm_program_free(p);
    Shmap__V1__Program *m = (Shmap__V1__Program *)protobuf_c_message_unpack(
        &shmap__v1__program__descriptor, NULL, n, b);
    free(b);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* Valid requests of every method, from which mutations start. */
static void build_templates(void)
{
    char *ij[] = {"i", "j"}, *i_[] = {"i"}, *j_[] = {"j"};
    int64_t sizes[] = {2, 4}, dims[] = {16, 32}, d8[] = {8, 8}, zero2[] = {0, 0};
    Shmap__V1__Empty empty = SHMAP__V1__EMPTY__INIT;
    for (int i = 0; i < NMETHODS; i++)
        if (methods[i].req == &shmap__v1__empty__descriptor)
            set_template(&methods[i], &empty.base);

    Shmap__V1__NegotiateRequest neg = SHMAP__V1__NEGOTIATE_REQUEST__INIT;
    neg.min_version = 1;
    neg.max_version = 1;
    neg.client = "fuzz";
    set_template(method_of(0, "Negotiate"), &neg.base);
    set_template(method_of(1, "Negotiate"), &neg.base);

    Shmap__V1__Mesh mesh = SHMAP__V1__MESH__INIT;
    mesh.name = "fzm";
    mesh.n_axis_names = 2;
    mesh.axis_names = ij;
    mesh.n_axis_sizes = 2;
    mesh.axis_sizes = sizes;
    Shmap__V1__CreateMeshRequest cm = SHMAP__V1__CREATE_MESH_REQUEST__INIT;
    cm.mesh = &mesh;
    set_template(method_of(0, "CreateMesh"), &cm.base);
    Shmap__V1__Mesh mref = SHMAP__V1__MESH__INIT;
    mref.name = "m";
    set_template(method_of(0, "GetMesh"), &mref.base);

    Shmap__V1__Shape shape = SHMAP__V1__SHAPE__INIT;
    shape.n_dims = 2;
    shape.dims = dims;
    Shmap__V1__SpecEntry e0 = SHMAP__V1__SPEC_ENTRY__INIT, e1 = SHMAP__V1__SPEC_ENTRY__INIT;
    e0.n_axes = 1;
    e0.axes = i_;
    e1.n_axes = 1;
    e1.axes = j_;
    Shmap__V1__SpecEntry *entries[] = {&e0, &e1};
    Shmap__V1__PartitionSpec spec = SHMAP__V1__PARTITION_SPEC__INIT;
    spec.n_entries = 2;
    spec.entries = entries;
    Shmap__V1__Sharding sh = SHMAP__V1__SHARDING__INIT;
    sh.mesh = &mref;
    sh.spec = &spec;
    Shmap__V1__CreateArrayRequest ca = SHMAP__V1__CREATE_ARRAY_REQUEST__INIT;
    ca.name = "fz_c";
    ca.dtype = SHMAP__V1__DTYPE__F32;
    ca.shape = &shape;
    ca.sharding = &sh;
    ca.deadline_ms = 1000;
    set_template(method_of(0, "CreateArray"), &ca.base);
    int64_t local[] = {8, 32};
    Shmap__V1__Shape lshape = SHMAP__V1__SHAPE__INIT;
    lshape.n_dims = 2;
    lshape.dims = local;
    ca.name = "fz_local";
    ca.shape = NULL;
    ca.kind = SHMAP__V1__PUT_KIND__PUT_LOCAL;
    ca.local_shape = &lshape;
    set_template(method_of(0, "CreateArray"), &ca.base);
    ca.name = "";
    ca.shape = &shape;
    ca.kind = SHMAP__V1__PUT_KIND__PUT_SHARDS;
    ca.local_shape = NULL;
    set_template(method_of(0, "CreateArray"), &ca.base);

    Shmap__V1__ArrayRef keep = SHMAP__V1__ARRAY_REF__INIT;
    keep.id = cl.keep.v;
    set_template(method_of(0, "Describe"), &keep.base);
    Shmap__V1__ArrayRef none = SHMAP__V1__ARRAY_REF__INIT;
    none.id = 4242424;
    set_template(method_of(0, "Delete"), &none.base);

    Shmap__V1__ReshardRequest rs = SHMAP__V1__RESHARD_REQUEST__INIT;
    rs.array = &keep;
    rs.sharding = &sh;
    spec.n_entries = 1; /* P('i') */
    rs.deadline_ms = 2000;
    set_template(method_of(0, "Reshard"), &rs.base);
    Shmap__V1__Mesh inl = SHMAP__V1__MESH__INIT;
    int32_t rev[8];
    for (int k = 0; k < 8; k++)
        rev[k] = mesh_devs[7 - k];
    inl.n_axis_names = 2;
    inl.axis_names = ij;
    inl.n_axis_sizes = 2;
    inl.axis_sizes = sizes;
    inl.n_devices = 8;
    inl.devices = rev;
    Shmap__V1__Sharding sh2 = SHMAP__V1__SHARDING__INIT;
    sh2.mesh = &inl;
    sh2.spec = &spec;
    rs.sharding = &sh2;
    set_template(method_of(0, "Reshard"), &rs.base);
    spec.n_entries = 2;

    /* checkpoints: the kept array saved into the suite's dir and loaded */
    char ck_save[160], ck_write[160];
    ckpt_root(ck_save, sizeof ck_save);
    ckpt_root(ck_write, sizeof ck_write);
    strcat(ck_save, "saved");
    strcat(ck_write, "written");
    Shmap__V1__SaveRequest sv = SHMAP__V1__SAVE_REQUEST__INIT;
    sv.array = &keep;
    sv.dir = ck_save;
    set_template(method_of(0, "Save"), &sv.base);
    Shmap__V1__LoadRequest ld = SHMAP__V1__LOAD_REQUEST__INIT;
    ld.dir = ck_save;
    ld.sharding = &sh; /* mesh m, P('i') */
    spec.n_entries = 1;
    set_template(method_of(0, "Load"), &ld.base);
    spec.n_entries = 2;
    Shmap__V1__ReadManifestRequest rm = SHMAP__V1__READ_MANIFEST_REQUEST__INIT;
    rm.dir = ck_save;
    set_template(method_of(1, "ReadManifest"), &rm.base);
    Shmap__V1__CheckpointFile cf = SHMAP__V1__CHECKPOINT_FILE__INIT;
    cf.file = "a.npy";
    cf.device = cl.wdev[0][0];
    Shmap__V1__CheckpointFile *cfs[] = {&cf};
    Shmap__V1__WriteCheckpointRequest wc = SHMAP__V1__WRITE_CHECKPOINT_REQUEST__INIT;
    wc.array_id = cl.keep.v;
    wc.dir = ck_write;
    wc.n_files = 1;
    wc.files = cfs;
    set_template(method_of(1, "WriteCheckpoint"), &wc.base);

    Shmap__V1__RegisterWorkerRequest rw = SHMAP__V1__REGISTER_WORKER_REQUEST__INIT;
    rw.address = "127.0.0.1:1";
    rw.ndevices = 4;
    rw.process_index = -1;
    rw.host = "fuzz";
    set_template(method_of(0, "RegisterWorker"), &rw.base);
    int64_t bytes4[4] = {0};
    Shmap__V1__HeartbeatRequest hb = SHMAP__V1__HEARTBEAT_REQUEST__INIT;
    hb.worker_id = 999999;
    hb.n_device_bytes = 4;
    hb.device_bytes = bytes4;
    set_template(method_of(0, "Heartbeat"), &hb.base);
    /* CommitShards: one target, and several (of an array that is not there) */
    int32_t cdev[2] = {0, 1}, cdev2[2] = {2, 3};
    Shmap__V1__CommitShardsRequest cs = SHMAP__V1__COMMIT_SHARDS_REQUEST__INIT;
    cs.array_id = 424242;
    cs.n_devices = 2;
    cs.devices = cdev;
    cs.checksum = 7;
    cs.bytes = 64;
    set_template(method_of(0, "CommitShards"), &cs.base);
    Shmap__V1__CommitTarget ct[2] = {SHMAP__V1__COMMIT_TARGET__INIT,
                                     SHMAP__V1__COMMIT_TARGET__INIT};
    Shmap__V1__CommitTarget *ctp[2] = {&ct[0], &ct[1]};
    ct[0].n_devices = ct[1].n_devices = 2;
    ct[0].devices = cdev;
    ct[1].devices = cdev2;
    ct[0].bytes = ct[1].bytes = 64;
    ct[1].checksum = 9;
    cs.n_devices = 0;
    cs.devices = NULL;
    cs.checksum = 0;
    cs.bytes = 0;
    cs.n_targets = 2;
    cs.targets = ctp;
    set_template(method_of(0, "CommitShards"), &cs.base);

    Shmap__V1__Program *prog =
        program_of("mesh i=2 j=4\n"
                   "shard_map fz(a: f32[16,32] @ P('i','j')) -> P('i', None):\n"
                   "    return psum(a, 'j')\n");
    Shmap__V1__ArrayRef *args[] = {&keep};
    Shmap__V1__SubmitJobRequest sj = SHMAP__V1__SUBMIT_JOB_REQUEST__INIT;
    sj.program = prog;
    sj.n_args = 1;
    sj.args = args;
    sj.deadline_ms = 3000;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);
    /* every collective and many shape ops (from tests/test_rpc_job.c) */
    prog = program_of(
        "mesh i=2 j=4\n"
        "shard_map colls(x: f32[16,32] @ P('i', 'j')) -> (P('i', 'j'), P('i', 'j'), P('i', 'j'), "
        "P('i', 'j'), P(None, 'j'), P('j'), P('i', 'j'), P(), P(), P('i', 'j')):\n"
        "    a = all_gather(x, 'i', axis=1, tiled=True)\n"
        "    b = psum_scatter(x, 'j', scatter_dimension=1, tiled=True)\n"
        "    c = ppermute(x, ('i', 'j'), perm=[(0, 1), (1, 2), (2, 3), (3, 0), (5, 4)])\n"
        "    d = all_to_all(x, 'j', 1, 0, tiled=True)\n"
        "    e = pmean(x, 'i')\n"
        "    f = pmin(sum(x, axis=1, keepdims=True), 'i')\n"
        "    g = all_gather(x, 'j', axis=0, tiled=False)\n"
        "    h = pmax(axis_index(('i', 'j')), 'j') + axis_size('i')\n"
        "    k = full((2, 3), 1.5, dtype=f64) + astype(const(7, i32), f64)\n"
        "    m = einsum('ij,kj->ik', x, x) + mean(x)\n"
        "    return a, b, c, d, e, f, g, h, k, m\n");
    sj.program = prog;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);
    prog = program_of("mesh i=2 j=4\n"
                      "shard_map shapes(x: f32[16,32] @ P('i', 'j')) -> (P('i', 'j'), P('i', 'j'), "
                      "P('i', 'j'), P('i', 'j'), P('i', 'j')):\n"
                      "    a = reshape(transpose(x, (1, 0)), (4, 16))\n"
                      "    b = pad(x, ((1, 1), (0, 2)))\n"
                      "    c = roll(tile(x, (1, 2)), 3, 1)\n"
                      "    d = concatenate((x, x), axis=1)\n"
                      "    e = where(x > 0, x, -x) + arange(8, dtype=f32)\n"
                      "    return a, b, c, d, e[:, 1:3]\n");
    sj.program = prog;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);
    /* a light job submitted with a wait: it runs on the handler's thread */
    prog = program_of("mesh i=2 j=4\n"
                      "shard_map light(a: f32[16,32] @ P('i','j')) -> P('i', 'j'):\n"
                      "    return a * 2 + 1\n");
    sj.program = prog;
    sj.wait_ms = 200;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);

    Shmap__V1__JobRef jr = SHMAP__V1__JOB_REF__INIT;
    jr.job_id = 4242;
    jr.wait_ms = 50;
    set_template(method_of(0, "WaitJob"), &jr.base);
    jr.wait_ms = 0;
    set_template(method_of(0, "GetJob"), &jr.base);
    set_template(method_of(0, "CancelJob"), &jr.base);
    set_template(method_of(1, "CancelJob"), &jr.base);

    Shmap__V1__FreeArrayRequest fr = SHMAP__V1__FREE_ARRAY_REQUEST__INIT;
    fr.array_id = 4242424;
    fr.n_devices = 1;
    fr.devices = &cl.wdev[0][0];
    set_template(method_of(1, "FreeArray"), &fr.base);

    Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
    box.n_start = 2;
    box.start = zero2;
    box.n_stop = 2;
    box.stop = d8;
    Shmap__V1__AssemblePiece pc = SHMAP__V1__ASSEMBLE_PIECE__INIT;
    pc.src_array = cl.keep.v;
    pc.src_device = cl.wdev[0][0];
    pc.src_box = &box;
    pc.n_dst_offset = 2;
    pc.dst_offset = zero2;
    Shmap__V1__AssemblePiece *pcs[] = {&pc};
    Shmap__V1__Shape s8 = SHMAP__V1__SHAPE__INIT;
    s8.n_dims = 2;
    s8.dims = d8;
    Shmap__V1__AssembleShard as = SHMAP__V1__ASSEMBLE_SHARD__INIT;
    as.device = cl.wdev[0][0];
    as.shape = &s8;
    as.n_pieces = 1;
    as.pieces = pcs;
    Shmap__V1__AssembleShard *ass[] = {&as};
    Shmap__V1__AssembleRequest ar = SHMAP__V1__ASSEMBLE_REQUEST__INIT;
    ar.array_id = 4242425;
    ar.dtype = SHMAP__V1__DTYPE__F32;
    ar.n_shards = 1;
    ar.shards = ass;
    set_template(method_of(1, "Assemble"), &ar.base);
    pc.src_address = cl.waddr[1]; /* pulled from the peer */
    pc.src_device = cl.wdev[1][0];
    ar.array_id = 4242427;
    set_template(method_of(1, "Assemble"), &ar.base);

    prog = program_of("mesh i=2 j=4\n"
                      "shard_map fz(a: f32[16,32] @ P('i','j')) -> P('i','j'):\n"
                      "    return a\n");
    int32_t *old_devs = prog->mesh->devices;
    size_t old_n = prog->mesh->n_devices;
    prog->mesh->devices = mesh_devs;
    prog->mesh->n_devices = 8;
    uint64_t in[] = {cl.keep.v}, out[] = {4242426};
    Shmap__V1__PeerDevices p0 = SHMAP__V1__PEER_DEVICES__INIT, p1 = SHMAP__V1__PEER_DEVICES__INIT;
    p0.address = cl.waddr[0];
    p0.n_devices = 4;
    p0.devices = cl.wdev[0];
    p1.address = cl.waddr[1];
    p1.n_devices = 4;
    p1.devices = cl.wdev[1];
    Shmap__V1__PeerDevices *peers[] = {&p0, &p1};
    Shmap__V1__RunJobRequest rj = SHMAP__V1__RUN_JOB_REQUEST__INIT;
    rj.job_id = 4242;
    rj.program = prog;
    rj.n_input_arrays = 1;
    rj.input_arrays = in;
    rj.n_output_arrays = 1;
    rj.output_arrays = out;
    rj.n_peers = 2;
    rj.peers = peers;
    rj.deadline_ms = 2000;
    set_template(method_of(1, "RunJob"), &rj.base);
    prog->mesh->devices = old_devs;
    prog->mesh->n_devices = old_n;
    sm_rpc_msg_free(&prog->base);
}

/* N random byte strings (0..512 bytes) to every method of one service. */
static void fuzz_random(int worker)
{
    rng r = {cl.seed ^ (worker ? 0x5157u : 0xC00Du)};
    uint8_t b[MAX_RAW];
    for (int i = 0; i < NMETHODS; i++) {
        if (methods[i].worker != worker)
            continue;
        for (int k = 0; k < cl.n; k++) {
            size_t n = below(&r, 4) == 0 ? below(&r, 8) : below(&r, MAX_RAW + 1);
            for (size_t j = 0; j < n; j++)
                b[j] = (uint8_t)rnd(&r);
            fuzz_unary(&methods[i], b, n, "random bytes");
        }
    }
}

/* N mutations of every method's valid request: field values replaced by
 * reflection (9+ dims, negative sizes, 2^62, 10 KB names, ...), then zero to
 * three byte-level mutations (bit flips, truncation, huge varints, field
 * numbers out of range, wrong wire types, lying lengths). */
/* A mutation of one of m's valid requests into *x (malloc'd): field values
 * replaced by reflection (9+ dims, negative sizes, 2^62, 10 KB names, ...)
 * and/or byte-level mutations (bit flips, truncation, huge varints, field
 * numbers out of range, wrong wire types, lying lengths). Returns the kind.
 * Thread-safe (r is the caller's). */
static const char *make_mutant(rng *r, const method *m, buf *x)
{
    int t = (int)below(r, (uint64_t)m->nt);
    /* mostly field-level (deeper into the handlers), some bytes */
    uint64_t mix = below(r, 5);
    int nsem = mix < 3 ? 1 + (int)below(r, 2) : mix == 3 ? 0 : 1;
    int nbyte = mix < 3 ? 0 : 1 + (int)below(r, 3);
    ProtobufCMessage *p =
        nsem ? protobuf_c_message_unpack(m->req, NULL, m->ntmpl[t], m->tmpl[t]) : NULL;
    memset(x, 0, sizeof *x);
    if (p) {
        for (int s = 0; s < nsem; s++)
            mutate_msg(r, p, 0);
        x->b = pack(p, &x->n);
        sm_rpc_msg_free(p);
    } else {
        x->b = malloc(m->ntmpl[t] + 1);
        memcpy(x->b, m->tmpl[t], m->ntmpl[t]);
        x->n = m->ntmpl[t];
    }
    x->cap = x->n + 1;
    for (int s = 0; s < nbyte; s++)
        mutate_bytes(r, x);
    return nbyte ? "mutated bytes" : "mutated fields";
}

/* The valid requests of every method of one service, then N mutations. */
static void fuzz_mutated(int worker)
{
    rng r = {cl.seed ^ (worker ? 0xB17Eu : 0xFACEu)};
    for (int i = 0; i < NMETHODS; i++) {
        method *m = &methods[i];
        if (m->worker != worker)
            continue;
        /* the valid requests themselves are answered (may be refused) */
        for (int t = 0; t < m->nt; t++)
            fuzz_unary(m, m->tmpl[t], m->ntmpl[t], "valid template");
        for (int k = 0; k < cl.n; k++) {
            buf x;
            const char *kind = make_mutant(&r, m, &x);
            if (x.n <= SM_RPC_MAX_MSG)
                fuzz_unary(m, x.b, x.n, kind);
            free(x.b);
        }
    }
}

/* ---- many clients at once --------------------------------------------------- */

typedef struct {
    pthread_t th;
    uint64_t seed;
    int n;
    char fail[1024]; /* the first failure, "" for none */
} conc_arg;

/* One of several concurrent clients: mutated requests to every method,
 * interleaved with downloads of the kept array, which must keep working. */
static void *conc_main(void *p)
{
    conc_arg *a = p;
    rng r = {a->seed};
    for (int k = 0; k < a->n && !a->fail[0]; k++) {
        char err[1024] = "";
        int64_t t0 = now_ms();
        if (below(&r, 6) == 0) {
            sm_svc_download_req req = {{cl.keep, NULL}, mesh_devs[below(&r, 8)], 0, {0}};
            sm_svc_download_stream *st = NULL;
            sm_svc_chunk c;
            int end = 0;
            int64_t got = 0, total = -1;
            sm_err e = sm_svc_download_open(cl.coord, 0, &req, CALL_MS, &st, err, sizeof err);
            while (!e && !(e = sm_svc_download_recv(st, &c, &end, err, sizeof err)) && !end) {
                if (c.has_meta)
                    total = c.total_bytes;
                got += (int64_t)c.len;
            }
            sm_svc_download_free(st);
            if (e || got != total || got != 8 * 8 * 4)
                snprintf(
                    a->fail, sizeof a->fail,
                    "download of the kept array during the fuzzing: %lld of %lld bytes: %.400s",
                    (long long)got, (long long)total, err);
            continue;
        }
        method *m = &methods[below(&r, NMETHODS)];
        buf x;
        const char *kind = make_mutant(&r, m, &x);
        if (x.n <= SM_RPC_MAX_MSG && !touches_kept(m, x.b, x.n)) {
            raw_msg rm;
            ProtobufCMessage *rep = NULL;
            sm_err e = sm_rpc_unary(chan(m->worker), m->path, raw_of(&rm, x.b, x.n), m->rep, &rep,
                                    CALL_MS, err, sizeof err);
            sm_rpc_msg_free(rep);
            int64_t ms = now_ms() - t0;
            if (ms >= PROMPT_MS || e == SM_EFORMAT || transport_failure(e, err))
                snprintf(a->fail, sizeof a->fail, "%s (%s, concurrent): %lld ms: %.400s", m->path,
                         kind, (long long)ms, err);
        }
        free(x.b);
    }
    return NULL;
}

/* Mutated requests from 4 clients at once. */
static void fuzz_concurrent(void)
{
    enum { NTH = 4 };
    conc_arg a[NTH];
    for (int t = 0; t < NTH; t++) {
        memset(&a[t], 0, sizeof a[t]);
        a[t].seed = cl.seed ^ (0xC0C0u + (uint64_t)t);
        a[t].n = cl.n * 2;
        ck_assert_int_eq(pthread_create(&a[t].th, NULL, conc_main, &a[t]), 0);
    }
    for (int t = 0; t < NTH; t++)
        pthread_join(a[t].th, NULL);
    for (int t = 0; t < NTH; t++)
        if (a[t].fail[0]) {
            print_log();
            ck_abort_msg("client %d: %s", t, a[t].fail);
        }
}

static void print_codes(int worker)
{
    for (int i = 0; i < NMETHODS; i++) {
        const method *m = &methods[i];
        if (m->worker != worker)
            continue;
        char line[512];
        int len = snprintf(line, sizeof line, "fuzz: %-36s", m->path);
        for (int c = 0; c < 17; c++)
            if (m->codes[c])
                len += snprintf(line + len, sizeof line - (size_t)len, " %s=%d",
                                sm_rpc_status_name(c), m->codes[c]);
        if (m->skipped)
            snprintf(line + len, sizeof line - (size_t)len, " (skipped %d)", m->skipped);
        fprintf(stderr, "%s\n", line);
    }
}

/* ---- streams -------------------------------------------------------------------- */

/* A sequence of encoded messages for one client stream. */
typedef struct {
    buf m[128];
    int n;
} seq;

static void seq_add(seq *s, const ProtobufCMessage *m)
{
    ck_assert_int_lt(s->n, 128);
    buf *x = &s->m[s->n++];
    x->b = pack(m, &x->n);
    x->cap = x->n + 1;
}

static void seq_add_raw(seq *s, const uint8_t *b, size_t n)
{
    ck_assert_int_lt(s->n, 128);
    buf *x = &s->m[s->n++];
    x->b = malloc(n + 1);
    memcpy(x->b, b, n);
    x->n = n;
    x->cap = n + 1;
}

static void seq_free(seq *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->m[i].b);
    s->n = 0;
}

/* Sends s on a client stream to path and finishes it (or, with abort_after
 * >= 0, abandons it after that many messages). Returns the status; judges
 * promptness and transport failures. */
static sm_err run_cstream(sm_rpc_channel *ch, int worker, const char *path, const seq *s,
                          const ProtobufCMessageDescriptor *rep_desc, int abort_after,
                          const char *kind, char *err, size_t errlen)
{
    sm_rpc_stream *st = NULL;
    ProtobufCMessage *rep = NULL;
    raw_msg rm;
    int64_t t0 = now_ms();
    sm_err e = sm_rpc_cstream_open(ch, path, CALL_MS, &st, err, errlen);
    for (int i = 0; !e && i < s->n; i++) {
        if (abort_after >= 0 && i == abort_after)
            break;
        e = sm_rpc_cstream_send(st, raw_of(&rm, s->m[i].b, s->m[i].n), err, errlen);
    }
    if (abort_after >= 0) {
        sm_rpc_stream_free(st);
        return SM_ECANCELLED;
    }
    if (st) /* finish reports the server's status, also after a failed send */
        e = sm_rpc_cstream_finish(st, rep_desc, &rep, err, errlen);
    sm_rpc_msg_free(rep);
    judge(path, worker, e, err, now_ms() - t0, kind, s->n ? s->m[0].b : NULL, s->n ? s->m[0].n : 0,
          NULL);
    return e;
}

typedef enum {
    UP_NO_HEADER,
    UP_HEADER_TWICE,
    UP_OFF_BACKWARDS,
    UP_OFF_OVERLAP,
    UP_OFF_PAST_END,
    UP_OFF_NEGATIVE,
    UP_TOTAL_HUGE,
    UP_TOTAL_NEGATIVE,
    UP_DATA_AFTER_LAST,
    UP_AFTER_FULL_LAST,
    UP_BAD_CHECKSUM,
    UP_TINY_BAD_SUM,
    UP_TINY_SHORT,
    UP_MORE_THAN_TOTAL,
    UP_NO_LAST,
    UP_EMPTY,
    UP_SHAPE_9D,
    UP_SHAPE_HUGE,
    UP_SHAPE_NEGATIVE,
    UP_BAD_DTYPE,
    UP_NO_DEVICES,
    UP_DUP_DEVICES,
    UP_UNKNOWN_DEVICE,
    UP_MANY_DEVICES,
    UP_WRONG_SHAPE,
    UP_BATCH_BAD_SECOND,
    UP_BATCH_MID_SUM,
    UP_BATCH_SAME_DEVICE,
    UP_BATCH_OTHER_ARRAY,
    UP_BATCH_NO_LAST,
    UP_NCASES
} up_case;

static const char *const up_names[] = {"no header",
                                       "header twice",
                                       "offset backwards",
                                       "offsets overlap",
                                       "offset past end",
                                       "negative offset",
                                       "total_bytes 2^62",
                                       "negative total_bytes",
                                       "data after last",
                                       "data after a full last",
                                       "wrong checksum",
                                       "100 tiny, bad sum",
                                       "100 tiny, short",
                                       "more than total",
                                       "no last message",
                                       "empty stream",
                                       "9-dim shard shape",
                                       "2^62 dims",
                                       "negative dims",
                                       "bad dtype",
                                       "no devices",
                                       "duplicate devices",
                                       "unknown device",
                                       "300 devices",
                                       "wrong shard shape",
                                       "targets: a bad second",
                                       "targets: bad middle sum",
                                       "targets: a device twice",
                                       "targets: two arrays",
                                       "targets: no last"};

/* The messages of upload case c of data (2048 bytes, [16,32] f32) for
 * array id to devs. */
static void upload_case(seq *s, up_case c, uint64_t id, const int32_t *devs, int ndevs,
                        const uint8_t *data, size_t nb)
{
    int64_t dims[64];
    int32_t many[300];
    for (int i = 0; i < 64; i++)
        dims[i] = 1;
    dims[0] = 16;
    dims[1] = 32;
    Shmap__V1__Shape shape = SHMAP__V1__SHAPE__INIT;
    shape.n_dims = 2;
    shape.dims = dims;
    Shmap__V1__UploadHeader h = SHMAP__V1__UPLOAD_HEADER__INIT;
    h.array_id = id;
    h.n_devices = (size_t)ndevs;
    h.devices = (int32_t *)devs;
    h.shape = &shape;
    h.dtype = SHMAP__V1__DTYPE__F32;
    h.total_bytes = (int64_t)nb;
    uint64_t sum = sm_checksum_oneshot(data, nb);
    Shmap__V1__UploadMsg m = SHMAP__V1__UPLOAD_MSG__INIT;
    size_t half = nb / 2;
#define MSG(HDR, OFF, FROM, LEN, LST, CK)                                                          \
    do {                                                                                           \
        m.header = (HDR);                                                                          \
        m.offset = (OFF);                                                                          \
        m.data.data = (uint8_t *)data + (FROM);                                                    \
        m.data.len = (LEN);                                                                        \
        m.last = (LST);                                                                            \
        m.checksum = (CK);                                                                         \
        seq_add(s, &m.base);                                                                       \
    } while (0)
    switch (c) {
    case UP_NO_HEADER:
        MSG(NULL, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_HEADER_TWICE:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(&h, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_BACKWARDS:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_OVERLAP:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half / 2, half / 2, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_PAST_END:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)nb * 4, half, nb - half, 1, sum);
        return;
    case UP_OFF_NEGATIVE:
        MSG(&h, -(int64_t)half, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_TOTAL_HUGE:
        h.total_bytes = (int64_t)1 << 62;
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_TOTAL_NEGATIVE:
        h.total_bytes = -2048;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    case UP_DATA_AFTER_LAST:
        MSG(&h, 0, 0, half, 1, sm_checksum_oneshot(data, half));
        MSG(NULL, (int64_t)half, half, nb - half, 0, 0);
        return;
    case UP_AFTER_FULL_LAST: /* complete and correct, then one more */
        MSG(&h, 0, 0, nb, 1, sum);
        MSG(NULL, (int64_t)nb, 0, 4, 0, 0);
        return;
    case UP_BAD_CHECKSUM:
        MSG(&h, 0, 0, nb, 1, sum ^ 0x100);
        return;
    case UP_TINY_BAD_SUM:
    case UP_TINY_SHORT: {
        size_t step = c == UP_TINY_SHORT ? 20 : nb / 100 + 1, off = 0;
        MSG(&h, 0, 0, 0, 0, 0);
        for (int i = 0; i < 100 && off < nb; i++) {
            size_t n = off + step > nb ? nb - off : step;
            int last = i == 99 || off + n == nb;
            MSG(NULL, (int64_t)off, off, n, last, c == UP_TINY_SHORT ? sum : sum + 1);
            off += n;
        }
        return;
    }
    case UP_MORE_THAN_TOTAL:
        MSG(&h, 0, 0, nb, 0, 0);
        MSG(NULL, (int64_t)nb, 0, nb, 1, sum);
        return;
    case UP_NO_LAST:
        MSG(&h, 0, 0, nb, 0, 0);
        return;
    case UP_EMPTY:
        return;
    case UP_SHAPE_9D:
        shape.n_dims = 9 + (size_t)(id % 50);
        break;
    case UP_SHAPE_HUGE:
        dims[0] = (int64_t)1 << 62;
        dims[1] = (int64_t)1 << 62;
        break;
    case UP_SHAPE_NEGATIVE:
        dims[0] = -16;
        dims[1] = -32;
        break;
    case UP_BAD_DTYPE:
        h.dtype = (Shmap__V1__DType)(id % 2 ? 0 : 100);
        break;
    case UP_NO_DEVICES:
        h.n_devices = 0;
        break;
    case UP_DUP_DEVICES: {
        int32_t d[2] = {devs[0], devs[0]};
        h.devices = d;
        h.n_devices = 2;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    }
    case UP_UNKNOWN_DEVICE: {
        int32_t d[2] = {devs[0], 999};
        h.devices = d;
        h.n_devices = 2;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    }
    case UP_MANY_DEVICES:
        for (int i = 0; i < 300; i++)
            many[i] = devs[i % ndevs];
        h.devices = many;
        h.n_devices = 300;
        break;
    case UP_WRONG_SHAPE: /* neither the array's nor that of total_bytes */
        dims[0] = 16;
        dims[1] = 16;
        break;
    case UP_BATCH_BAD_SECOND:
    case UP_BATCH_MID_SUM:
    case UP_BATCH_SAME_DEVICE:
    case UP_BATCH_OTHER_ARRAY:
    case UP_BATCH_NO_LAST: { /* three one-device targets in one stream */
        int32_t d[3] = {devs[0], devs[1 % ndevs], devs[2 % ndevs]};
        Shmap__V1__UploadHeader hk[3];
        for (int k = 0; k < 3; k++) {
            hk[k] = h;
            hk[k].n_devices = 1;
            hk[k].devices = &d[k];
        }
        if (c == UP_BATCH_BAD_SECOND)
            hk[1].total_bytes = (int64_t)nb - 4;
        if (c == UP_BATCH_SAME_DEVICE)
            hk[2].devices = &d[0];
        if (c == UP_BATCH_OTHER_ARRAY)
            hk[1].array_id = id + 1;
        for (int k = 0; k < 3; k++) {
            if (c == UP_BATCH_NO_LAST && k == 2) {
                MSG(&hk[k], 0, 0, half, 0, 0);
                break;
            }
            MSG(&hk[k], 0, 0, nb, 1, c == UP_BATCH_MID_SUM && k == 1 ? sum ^ 1 : sum);
        }
        return;
    }
    default:
        break;
    }
    MSG(&h, 0, 0, nb, 1, sum);
#undef MSG
}

static uint8_t *full_data(float salt, size_t *nb)
{
    sm_index all = {0};
    all.rank = 2;
    all.r[0].stop = 16;
    all.r[1].stop = 32;
    return (uint8_t *)box_data(&all, salt, nb);
}

/* Every designed bad upload to the coordinator (the pending array) and to a
 * worker (a fresh array id) is refused; then random, raw and mutated
 * sequences get a status. */
static void fuzz_uploads(void)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[1024];
    rng r = {cl.seed ^ 0x0B10Au};
    for (int c = 0; c < UP_NCASES; c++) {
        for (int w = 0; w < 2; w++) {
            seq s = {0};
            uint64_t id = w ? 5000000 + (uint64_t)c : cl.pending.v;
            const int32_t *devs = w ? cl.wdev[1] : mesh_devs;
            upload_case(&s, (up_case)c, id, devs, w ? 4 : 8, data, nb);
            char kind[96];
            snprintf(kind, sizeof kind, "upload: %s", up_names[c]);
            sm_err e =
                run_cstream(w ? cl.wch[1] : cl.coord, w, w ? W_PATH("PutShard") : C_PATH("Upload"),
                            &s, &shmap__v1__upload_reply__descriptor, -1, kind, err, sizeof err);
            if (getenv("SM_FUZZ_VERBOSE"))
                fprintf(stderr, "fuzz: %-34s %-12s %s\n", kind, w ? "worker" : "coordinator", err);
            ck_assert_msg(e != SM_OK, "%s to %s was accepted", kind,
                          w ? "a worker" : "the coordinator");
            if (w) { /* and nothing of it was kept */
                sm_svc_shard_state st[4];
                ck_assert_int_eq(sm_svc_worker_shard_info(cl.wch[1], CALL_MS, (sm_array_id){id}, 4,
                                                          cl.wdev[1], st, err, sizeof err),
                                 SM_OK);
                for (int k = 0; k < 4; k++)
                    ck_assert_msg(!st[k].present, "%s left a shard on device %d", kind,
                                  (int)cl.wdev[1][k]);
            }
            seq_free(&s);
        }
    }
    /* the kept array (READY) refuses any upload */
    seq s = {0};
    upload_case(&s, UP_BAD_CHECKSUM, cl.keep.v, mesh_devs, 8, data, nb);
    ck_assert_int_ne(run_cstream(cl.coord, 0, C_PATH("Upload"), &s,
                                 &shmap__v1__upload_reply__descriptor, -1,
                                 "upload to a ready array", err, sizeof err),
                     SM_OK);
    seq_free(&s);
    for (int k = 0; k < cl.n; k++) {
        for (int w = 0; w < 2; w++) {
            int how = (int)below(&r, 3);
            const char *kind = how == 0   ? "upload: random messages"
                               : how == 1 ? "upload: raw bytes"
                                          : "upload: mutated valid";
            if (how == 0) {
                for (int i = 0, n = 1 + (int)below(&r, 6); i < n; i++) {
                    ProtobufCMessage *m = gen_msg(&r, &shmap__v1__upload_msg__descriptor, 0);
                    Shmap__V1__UploadMsg *u = (Shmap__V1__UploadMsg *)m;
                    if (w && u->header && is_kept(u->header->array_id, NULL))
                        u->header->array_id = 6000000;
                    seq_add(&s, m);
                    sm_rpc_msg_free(m);
                }
            } else if (how == 1) {
                uint8_t b[MAX_RAW];
                for (int i = 0, n = 1 + (int)below(&r, 4); i < n; i++) {
                    size_t len = below(&r, MAX_RAW + 1);
                    for (size_t j = 0; j < len; j++)
                        b[j] = (uint8_t)rnd(&r);
                    seq_add_raw(&s, b, len);
                }
            } else {
                /* to the pending array only cases with a wrong checksum,
                 * which no mutation repairs: it must stay pending */
                up_case c = w              ? (up_case)below(&r, UP_NCASES)
                            : below(&r, 2) ? UP_TINY_BAD_SUM
                                           : UP_BAD_CHECKSUM;
                upload_case(&s, c, w ? 6000001 + (uint64_t)k : cl.pending.v,
                            w ? cl.wdev[1] : mesh_devs, w ? 4 : 8, data, nb);
                for (int i = 0, n = 1 + (int)below(&r, 3); s.n && i < n; i++)
                    mutate_bytes(&r, &s.m[below(&r, (uint64_t)s.n)]);
            }
            run_cstream(w ? cl.wch[1] : cl.coord, w, w ? W_PATH("PutShard") : C_PATH("Upload"), &s,
                        &shmap__v1__upload_reply__descriptor, -1, kind, err, sizeof err);
            seq_free(&s);
        }
    }
    free(data);
}

/* Downloads req from the coordinator (worker 0) or a worker (1); returns the
 * status after reading the whole stream and checking its byte count. */
static sm_err run_download(int worker, const ProtobufCMessage *req, const uint8_t *raw, size_t nraw,
                           const char *kind, char *err, size_t errlen)
{
    sm_rpc_stream *st = NULL;
    raw_msg rm;
    const char *path = worker ? W_PATH("GetShard") : C_PATH("Download");
    int64_t t0 = now_ms(), total = -1, got = 0;
    const ProtobufCMessage *m = req ? req : raw_of(&rm, raw, nraw);
    sm_err e =
        sm_rpc_sstream_open(worker ? cl.wch[0] : cl.coord, path, m, CALL_MS, &st, err, errlen);
    while (!e) {
        ProtobufCMessage *c = NULL;
        e = sm_rpc_sstream_recv(st, &shmap__v1__data_chunk__descriptor, &c, err, errlen);
        if (e || !c)
            break;
        Shmap__V1__DataChunk *dc = (Shmap__V1__DataChunk *)c;
        if (total < 0)
            total = dc->total_bytes;
        else if (dc->shape && got == total) /* the next shard of a several-device stream */
            total += dc->total_bytes;
        got += (int64_t)dc->data.len;
        sm_rpc_msg_free(c);
        if (got > ((int64_t)64 << 20) || now_ms() - t0 > PROMPT_MS) {
            sm_rpc_stream_free(st);
            ck_abort_msg("%s (%s): %lld bytes, still streaming", path, kind, (long long)got);
        }
    }
    sm_rpc_stream_free(st);
    judge(path, worker, e, err, now_ms() - t0, kind, raw, nraw, NULL);
    if (!e)
        ck_assert_msg(got == total, "%s (%s): %lld bytes of a stream of total_bytes %lld", path,
                      kind, (long long)got, (long long)total);
    return e;
}

static void fuzz_downloads(void)
{
    char err[1024];
    rng r = {cl.seed ^ 0xD0u};
    /* boxes in shard coordinates of an [8,8] shard */
    static const struct {
        const char *name;
        int n_start, n_stop;
        int64_t start[10], stop[10];
    } boxes[] = {
        {"start > stop", 2, 2, {4, 4}, {2, 8}},
        {"negative start", 2, 2, {-1, 0}, {8, 8}},
        {"stop past shard", 2, 2, {0, 0}, {9, 8}},
        {"rank 1", 1, 1, {0}, {8}},
        {"rank 3", 3, 3, {0, 0, 0}, {8, 8, 1}},
        {"rank 9", 9, 9, {0}, {8, 8, 1, 1, 1, 1, 1, 1, 1}},
        {"2^62 stop", 2, 2, {0, 0}, {(int64_t)1 << 62, (int64_t)1 << 62}},
        {"INT64_MIN start", 2, 2, {INT64_MIN, INT64_MIN}, {8, 8}},
        {"INT64_MAX both", 2, 2, {INT64_MAX, INT64_MAX}, {INT64_MAX, INT64_MAX}},
        {"start without stop", 2, 0, {0, 0}, {0}},
        {"stop without start", 0, 2, {0}, {8, 8}},
        {"ragged", 2, 1, {0, 0}, {8}},
    };
    for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
            box.n_start = (size_t)boxes[b].n_start;
            box.start = (int64_t *)boxes[b].start;
            box.n_stop = (size_t)boxes[b].n_stop;
            box.stop = (int64_t *)boxes[b].stop;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = cl.wdev[0][0];
            rq.box = &box;
            char kind[96];
            snprintf(kind, sizeof kind, "download: %s", boxes[b].name);
            ck_assert_msg(run_download(w, &rq.base, NULL, 0, kind, err, sizeof err) != SM_OK,
                          "%s from %s was served", kind, w ? "a worker" : "the coordinator");
        }
    }
    /* bad devices and refs */
    static const int32_t devs[] = {-1, 8, 999, INT32_MAX, INT32_MIN};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++)
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = devs[d];
            ck_assert_int_ne(
                run_download(w, &rq.base, NULL, 0, "download: bad device", err, sizeof err), SM_OK);
            rq.array = NULL;
            rq.device = cl.wdev[0][0];
            ck_assert_int_ne(
                run_download(w, &rq.base, NULL, 0, "download: no array", err, sizeof err), SM_OK);
        }
    /* several devices in one stream: served by a worker only, each device
     * once, no box, device the first of them */
    {
        Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
        ref.id = cl.keep.v;
        int32_t many[4] = {cl.wdev[0][2], cl.wdev[0][0], cl.wdev[0][3], cl.wdev[0][1]};
        Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
        rq.array = &ref;
        rq.device = many[0];
        rq.n_devices = 4;
        rq.devices = many;
        ck_assert_int_eq(run_download(1, &rq.base, NULL, 0, "download: 4 devices", err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(run_download(0, &rq.base, NULL, 0, "download: 4 devices from the relay",
                                      err, sizeof err),
                         SM_EINVAL);
        rq.device = many[1];
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: device not devices[0]", err, sizeof err),
            SM_EINVAL);
        rq.device = many[0];
        many[2] = many[0];
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: a device twice", err, sizeof err),
            SM_EINVAL);
        many[2] = cl.wdev[1][0]; /* another worker's: refused as when asked alone */
        Shmap__V1__DownloadRequest one = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
        one.array = &ref;
        one.device = many[2];
        sm_err alone = run_download(1, &one.base, NULL, 0, "download: not held", err, sizeof err);
        ck_assert_int_ne(alone, SM_OK);
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: a device not held", err, sizeof err),
            alone);
        many[2] = cl.wdev[0][3];
        Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
        int64_t start[2] = {0, 0}, stop[2] = {1, 1};
        box.n_start = box.n_stop = 2;
        box.start = start;
        box.stop = stop;
        rq.box = &box;
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: devices and a box", err, sizeof err),
            SM_EINVAL);
    }
    /* the pending array cannot be read */
    Shmap__V1__ArrayRef pref = SHMAP__V1__ARRAY_REF__INIT;
    pref.id = cl.pending.v;
    Shmap__V1__DownloadRequest prq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
    prq.array = &pref;
    ck_assert_int_eq(run_download(0, &prq.base, NULL, 0, "download: pending", err, sizeof err),
                     SM_EPRECONDITION);
    for (int k = 0; k < cl.n; k++) {
        for (int w = 0; w < 2; w++) {
            if (below(&r, 2)) {
                ProtobufCMessage *m = gen_msg(&r, &shmap__v1__download_request__descriptor, 0);
                Shmap__V1__DownloadRequest *d = (Shmap__V1__DownloadRequest *)m;
                if (below(&r, 2) && d->array) { /* often the real array */
                    d->array->id = cl.keep.v;
                    d->device = below(&r, 2) ? cl.wdev[0][below(&r, 4)] : d->device;
                }
                size_t n;
                uint8_t *b = pack(m, &n);
                sm_rpc_msg_free(m);
                run_download(w, NULL, b, n, "download: random request", err, sizeof err);
                free(b);
            } else {
                uint8_t b[MAX_RAW];
                size_t n = below(&r, 64);
                for (size_t j = 0; j < n; j++)
                    b[j] = (uint8_t)rnd(&r);
                run_download(w, NULL, b, n, "download: raw bytes", err, sizeof err);
            }
        }
    }
}

/* Collective messages for jobs no worker runs: random, mutated and raw. */
static void fuzz_exchange(void)
{
    char err[1024];
    rng r = {cl.seed ^ 0xE8u};
    uint8_t data[64];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;
    for (int k = 0; k < cl.n; k++) {
        seq s = {0};
        int how = (int)below(&r, 3);
        for (int i = 0, n = 1 + (int)below(&r, 6); i < n; i++) {
            if (how == 0) {
                ProtobufCMessage *m = gen_msg(&r, &shmap__v1__coll_msg__descriptor, 0);
                seq_add(&s, m);
                sm_rpc_msg_free(m);
            } else if (how == 1) {
                Shmap__V1__CollMsg c = SHMAP__V1__COLL_MSG__INIT;
                c.job_id = 777777 + (uint64_t)k;
                c.seq = (uint32_t)i;
                c.src_device = cl.wdev[1][0];
                c.dst_device = cl.wdev[0][0];
                c.data.data = data;
                c.data.len = sizeof data;
                c.total_bytes = sizeof data;
                c.last = 1;
                c.checksum = sm_checksum_oneshot(data, sizeof data);
                seq_add(&s, &c.base);
                if (below(&r, 2)) /* else valid, for a job nobody runs */
                    mutate_bytes(&r, &s.m[s.n - 1]);
            } else {
                uint8_t b[MAX_RAW];
                size_t len = below(&r, MAX_RAW + 1);
                for (size_t j = 0; j < len; j++)
                    b[j] = (uint8_t)rnd(&r);
                seq_add_raw(&s, b, len);
            }
        }
        sm_err e =
            run_cstream(cl.wch[0], 1, W_PATH("Exchange"), &s, &shmap__v1__coll_ack__descriptor, -1,
                        how == 0   ? "exchange: random"
                        : how == 1 ? "exchange: mutated"
                                   : "exchange: raw",
                        err, sizeof err);
        if (getenv("SM_FUZZ_VERBOSE"))
            fprintf(stderr, "fuzz: exchange %d: %s\n", how, e ? err : "OK");
        seq_free(&s);
    }
}

/* Streams abandoned midway (sm_rpc_stream_free before finish): uploads to
 * the coordinator and a worker, exchanges, downloads after one chunk. */
static void fuzz_aborts(void)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[1024];
    int rounds = cl.n / 4 + 1;
    for (int k = 0; k < rounds; k++) {
        seq s = {0};
        upload_case(&s, UP_TINY_SHORT, cl.pending.v, mesh_devs, 8, data, nb);
        run_cstream(cl.coord, 0, C_PATH("Upload"), &s, &shmap__v1__upload_reply__descriptor,
                    1 + k % 10, "abort upload", err, sizeof err);
        seq_free(&s);
        upload_case(&s, UP_TINY_SHORT, 7000000 + (uint64_t)k, cl.wdev[1], 4, data, nb);
        run_cstream(cl.wch[1], 1, W_PATH("PutShard"), &s, &shmap__v1__upload_reply__descriptor,
                    k % 10, "abort putshard", err, sizeof err);
        seq_free(&s);
        Shmap__V1__CollMsg c = SHMAP__V1__COLL_MSG__INIT;
        c.job_id = 888888;
        c.data.data = data;
        c.data.len = 64;
        c.total_bytes = 128;
        seq_add(&s, &c.base);
        run_cstream(cl.wch[0], 1, W_PATH("Exchange"), &s, &shmap__v1__coll_ack__descriptor, 1,
                    "abort exchange", err, sizeof err);
        seq_free(&s);
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = cl.wdev[0][k % 4];
            sm_rpc_stream *st = NULL;
            ProtobufCMessage *m = NULL;
            if (sm_rpc_sstream_open(w ? cl.wch[0] : cl.coord,
                                    w ? W_PATH("GetShard") : C_PATH("Download"), &rq.base, CALL_MS,
                                    &st, err, sizeof err) == SM_OK &&
                k % 2 == 0)
                sm_rpc_sstream_recv(st, &shmap__v1__data_chunk__descriptor, &m, err, sizeof err);
            sm_rpc_msg_free(m);
            sm_rpc_stream_free(st);
        }
    }
    free(data);
}

/* ---- raw gRPC, for what sm_rpc refuses to send -------------------------------- */

/* Sends n bytes (b, or a repeated pattern) to path on target over a channel
 * without a send limit; returns the gRPC status and fills details. */
static int raw_grpc_call(const char *target, const char *path, const uint8_t *pat, size_t npat,
                         size_t n, char *details, size_t dlen)
{
    grpc_arg arg;
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    arg.value.integer = -1;
    grpc_channel_args ca = {1, &arg};
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_copied_string(path);
    gpr_timespec dl =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(CALL_MS, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, dl, NULL);
    grpc_slice_unref(method);
    grpc_slice payload = grpc_slice_malloc(n);
    uint8_t *p = GRPC_SLICE_START_PTR(payload);
    for (size_t i = 0; i < n; i++)
        p[i] = pat[i % npat];
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);
    grpc_metadata_array init_md, trail;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice det = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &det;
    int tag;
    ck_assert_int_eq(grpc_call_start_batch(call, ops, 6, &tag, NULL), GRPC_CALL_OK);
    grpc_event ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
    char *d = grpc_slice_to_c_string(det);
    snprintf(details, dlen, "%s", d);
    gpr_free(d);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(bb);
    grpc_slice_unref(det);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    return (int)status;
}

/* ---- tests -------------------------------------------------------------------- */

START_TEST(test_raw_message_packs_exactly)
{
    rng r = {cl.seed};
    for (int k = 0; k < 200; k++) {
        uint8_t b[64];
        size_t n = below(&r, sizeof b + 1);
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)rnd(&r);
        raw_msg rm;
        size_t got;
        uint8_t *p = pack(raw_of(&rm, b, n), &got);
        ck_assert_uint_eq(got, n);
        ck_assert(memcmp(p, b, n) == 0);
        free(p);
    }
}
END_TEST

START_TEST(test_coordinator_random_bytes)
{
    fuzz_random(0);
    check_cluster("coordinator random bytes");
}
END_TEST

/* Every job the fuzzing submitted ends (DONE, FAILED or CANCELLED) within
 * 15 s: a bad program may fail, never run forever. */
static void check_jobs_end(void)
{
    int64_t until = now_ms() + 15000;
    int counts[6] = {0};
    for (uint64_t id = 1; id <= 4096; id++) {
        Shmap__V1__JobRef jr = SHMAP__V1__JOB_REF__INIT;
        jr.job_id = id;
        ProtobufCMessage *rep = NULL;
        char err[512];
        int state = 0;
        do {
            sm_rpc_msg_free(rep);
            rep = NULL;
            int64_t left = until - now_ms();
            jr.wait_ms = left > 1000 ? 1000 : left > 0 ? (uint32_t)left : 0;
            sm_err e =
                sm_rpc_unary(cl.coord, C_PATH("WaitJob"), &jr.base,
                             &shmap__v1__job_info__descriptor, &rep, CALL_MS, err, sizeof err);
            if (e == SM_ENOTFOUND)
                break;
            ck_assert_msg(e == SM_OK, "WaitJob %llu: %s", (unsigned long long)id, err);
            state = ((Shmap__V1__JobInfo *)rep)->state;
        } while ((state == SHMAP__V1__JOB_STATE__JOB_QUEUED ||
                  state == SHMAP__V1__JOB_STATE__JOB_RUNNING) &&
                 now_ms() < until);
        sm_rpc_msg_free(rep);
        if (!state)
            break; /* ids are dense: the first unknown one ends the list */
        counts[state >= 0 && state < 6 ? state : 0]++;
        ck_assert_msg(state != SHMAP__V1__JOB_STATE__JOB_QUEUED &&
                          state != SHMAP__V1__JOB_STATE__JOB_RUNNING,
                      "job %llu still %s after 15 s", (unsigned long long)id,
                      state == SHMAP__V1__JOB_STATE__JOB_QUEUED ? "queued" : "running");
    }
    fprintf(stderr, "fuzz: jobs submitted by the fuzzing: %d done, %d failed, %d cancelled\n",
            counts[SHMAP__V1__JOB_STATE__JOB_DONE], counts[SHMAP__V1__JOB_STATE__JOB_FAILED],
            counts[SHMAP__V1__JOB_STATE__JOB_CANCELLED]);
}

START_TEST(test_coordinator_mutated)
{
    fuzz_mutated(0);
    print_codes(0);
    check_jobs_end();
    check_cluster("coordinator mutations");
}
END_TEST

START_TEST(test_worker_random_bytes)
{
    fuzz_random(1);
    check_cluster("worker random bytes");
}
END_TEST

START_TEST(test_worker_mutated)
{
    fuzz_mutated(1);
    print_codes(1);
    check_cluster("worker mutations");
}
END_TEST

/* ---- races: an array deleted while it is read and resharded ------------------- */

typedef struct {
    sm_array_id id;
    int what; /* 0: download every shard, 1: delete, 2: reshard */
    int delay_us;
    char fail[1024];
} race_arg;

static void *race_main(void *p)
{
    race_arg *a = p;
    char err[1024] = "";
    int64_t t0 = now_ms();
    sm_err e = SM_OK;
    if (a->delay_us)
        usleep((useconds_t)a->delay_us);
    if (a->what == 0) {
        for (int d = 0; d < 8 && e != SM_ENOTFOUND; d++) {
            sm_svc_download_req req = {{a->id, NULL}, mesh_devs[d], 0, {0}};
            sm_svc_download_stream *st = NULL;
            sm_svc_chunk c;
            int end = 0;
            e = sm_svc_download_open(cl.coord, 0, &req, CALL_MS, &st, err, sizeof err);
            while (!e && !(e = sm_svc_download_recv(st, &c, &end, err, sizeof err)) && !end)
                ;
            sm_svc_download_free(st);
        }
    } else if (a->what == 1) {
        e = sm_svc_coord_delete(cl.coord, CALL_MS, (sm_array_ref){a->id, NULL}, err, sizeof err);
    } else {
        sm_svc_reshard_req rq = {0};
        sm_array_info info;
        rq.array.id = a->id;
        rq.sharding.mesh_name = "m";
        e = sm_pspec_parse("P(None, 'j')", &rq.sharding.spec, err, sizeof err);
        if (!e && !(e = sm_svc_coord_reshard(cl.coord, CALL_MS, &rq, &info, err, sizeof err))) {
            sm_svc_coord_delete(cl.coord, CALL_MS, (sm_array_ref){info.id, NULL}, err, sizeof err);
            sm_array_info_free(&info);
        }
    }
    int64_t ms = now_ms() - t0;
    if (ms >= PROMPT_MS || transport_failure(e, err) || e == SM_EFORMAT)
        snprintf(a->fail, sizeof a->fail, "race %d: %lld ms: %.400s", a->what, (long long)ms, err);
    return NULL;
}

/* An array made by resharding the kept one is downloaded, resharded and
 * deleted at once, many times. */
static void fuzz_races(void)
{
    char err[1024];
    rng r = {cl.seed ^ 0x4ACEu};
    for (int k = 0; k < cl.n / 10 + 2; k++) {
        sm_svc_reshard_req rq = {0};
        sm_array_info info;
        rq.array.id = cl.keep;
        rq.sharding.mesh_name = "m";
        ck_assert_int_eq(sm_pspec_parse("P('j', 'i')", &rq.sharding.spec, err, sizeof err), SM_OK);
        ck_assert_msg(sm_svc_coord_reshard(cl.coord, CALL_MS, &rq, &info, err, sizeof err) == SM_OK,
                      "%s", err);
        race_arg a[3];
        pthread_t th[3];
        for (int t = 0; t < 3; t++) {
            memset(&a[t], 0, sizeof a[t]);
            a[t].id = info.id;
            a[t].what = t;
            a[t].delay_us = (int)below(&r, 3000);
            ck_assert_int_eq(pthread_create(&th[t], NULL, race_main, &a[t]), 0);
        }
        for (int t = 0; t < 3; t++)
            pthread_join(th[t], NULL);
        sm_array_info_free(&info);
        for (int t = 0; t < 3; t++)
            if (a[t].fail[0]) {
                print_log();
                ck_abort_msg("%s", a[t].fail);
            }
    }
}

START_TEST(test_races)
{
    fuzz_races();
    check_cluster("delete while read/resharded");
}
END_TEST

START_TEST(test_concurrent_clients)
{
    fuzz_concurrent();
    check_cluster("concurrent clients");
}
END_TEST

START_TEST(test_upload_streams)
{
    fuzz_uploads();
    check_cluster("upload streams");
}
END_TEST

START_TEST(test_download_boxes)
{
    fuzz_downloads();
    check_cluster("download boxes");
}
END_TEST

START_TEST(test_exchange_unknown_jobs)
{
    fuzz_exchange();
    check_cluster("exchange");
}
END_TEST

START_TEST(test_aborted_streams)
{
    fuzz_aborts();
    check_cluster("aborted streams");
}
END_TEST

START_TEST(test_unknown_method)
{
    static const char *const paths[] = {"/shmap.v1.Coordinator/Nope",
                                        "/shmap.v1.Worker/Nope",
                                        "/nope.Svc/X",
                                        "/shmap.v1.Coordinator/",
                                        "/shmap.v1.Worker/Upload",
                                        "/shmap.v1.Coordinator/PutShard",
                                        "/x"};
    char err[1024];
    Shmap__V1__Empty empty = SHMAP__V1__EMPTY__INIT;
    for (int w = 0; w < 3; w++) {
        sm_rpc_channel *ch = w ? cl.wch[w - 1] : cl.coord;
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            ProtobufCMessage *rep = NULL;
            int64_t t0 = now_ms();
            sm_err e = sm_rpc_unary(ch, paths[i], &empty.base, &shmap__v1__empty__descriptor, &rep,
                                    CALL_MS, err, sizeof err);
            int64_t ms = now_ms() - t0;
            sm_rpc_msg_free(rep);
            ck_assert_msg(e == SM_EUNIMPLEMENTED, "%s on %s: %s", paths[i],
                          w ? cl.waddr[w - 1] : "the coordinator", err);
            ck_assert_msg(ms < 1000, "%s took %lld ms", paths[i], (long long)ms);
        }
        /* and as a stream */
        seq s = {0};
        seq_add(&s, &empty.base);
        ck_assert_int_eq(run_cstream(ch, w > 0, "/shmap.v1.Nope/Stream", &s,
                                     &shmap__v1__empty__descriptor, -1, "unknown stream", err,
                                     sizeof err),
                         SM_EUNIMPLEMENTED);
        seq_free(&s);
    }
    check_cluster("unknown methods");
}
END_TEST

START_TEST(test_oversized_message)
{
    char det[512], err[512];
    const uint8_t zero = 0x0a; /* field 1, length-delimited: whatever; it is too big */
    struct {
        const char *target, *path;
    } to[] = {{cl.target, C_PATH("CreateArray")},
              {cl.target, C_PATH("Upload")},
              {cl.waddr[0], W_PATH("Assemble")},
              {cl.waddr[1], W_PATH("PutShard")}};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        int64_t t0 = now_ms();
        int st = raw_grpc_call(to[i].target, to[i].path, &zero, 1, SM_RPC_MAX_MSG + (1 << 20), det,
                               sizeof det);
        ck_assert_msg(st == GRPC_STATUS_RESOURCE_EXHAUSTED, "%s: %s: %s", to[i].path,
                      sm_rpc_status_name(st), det);
        ck_assert_int_lt(now_ms() - t0, PROMPT_MS);
    }
    /* sm_rpc itself refuses to send one */
    Shmap__V1__CreateArrayRequest ca = SHMAP__V1__CREATE_ARRAY_REQUEST__INIT;
    char *big = malloc(SM_RPC_MAX_MSG + 2);
    memset(big, 'n', SM_RPC_MAX_MSG + 1);
    big[SM_RPC_MAX_MSG + 1] = 0;
    ca.name = big;
    ProtobufCMessage *rep = NULL;
    ck_assert_int_eq(sm_rpc_unary(cl.coord, C_PATH("CreateArray"), &ca.base,
                                  &shmap__v1__create_array_reply__descriptor, &rep, CALL_MS, err,
                                  sizeof err),
                     SM_ERESOURCE);
    free(big);
    /* 1 MiB of empty sub-messages (each allocated when parsed): refused */
    static const uint8_t shards[] = {0x1a, 0x00}, args[] = {0x12, 0x00};
    int st = raw_grpc_call(cl.waddr[0], W_PATH("Assemble"), shards, 2, 1 << 20, det, sizeof det);
    ck_assert_msg(st != GRPC_STATUS_OK && st != GRPC_STATUS_UNAVAILABLE &&
                      st != GRPC_STATUS_DEADLINE_EXCEEDED,
                  "Assemble of 512k shards: %s: %s", sm_rpc_status_name(st), det);
    st = raw_grpc_call(cl.target, C_PATH("SubmitJob"), args, 2, 1 << 20, det, sizeof det);
    ck_assert_msg(st != GRPC_STATUS_OK && st != GRPC_STATUS_UNAVAILABLE &&
                      st != GRPC_STATUS_DEADLINE_EXCEEDED,
                  "SubmitJob of 512k args: %s: %s", sm_rpc_status_name(st), det);
    check_cluster("oversized messages");
}
END_TEST

/* What the fuzzing found that is fixed or bounded: a new shard larger than
 * the host's memory (4 TiB) is refused at once, not allocated. */
START_TEST(test_regressions)
{
    char err[1024];
    int64_t big[] = {(int64_t)1 << 20, (int64_t)1 << 20}, zero2[] = {0, 0}, d8[] = {8, 8};
    Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
    box.n_start = 2;
    box.start = zero2;
    box.n_stop = 2;
    box.stop = d8;
    Shmap__V1__AssemblePiece pc = SHMAP__V1__ASSEMBLE_PIECE__INIT;
    pc.src_array = cl.keep.v;
    pc.src_device = cl.wdev[0][0];
    pc.src_box = &box;
    pc.n_dst_offset = 2;
    pc.dst_offset = zero2;
    Shmap__V1__AssemblePiece *pcs[] = {&pc};
    Shmap__V1__Shape shape = SHMAP__V1__SHAPE__INIT;
    shape.n_dims = 2;
    shape.dims = big;
    Shmap__V1__AssembleShard as = SHMAP__V1__ASSEMBLE_SHARD__INIT;
    as.device = cl.wdev[0][0];
    as.shape = &shape;
    as.n_pieces = 1;
    as.pieces = pcs;
    Shmap__V1__AssembleShard *ass[] = {&as};
    Shmap__V1__AssembleRequest ar = SHMAP__V1__ASSEMBLE_REQUEST__INIT;
    ar.array_id = 4096;
    ar.dtype = SHMAP__V1__DTYPE__F32;
    ar.n_shards = 1;
    ar.shards = ass;
    ProtobufCMessage *rep = NULL;
    int64_t t0 = now_ms();
    sm_err e = sm_rpc_unary(cl.wch[0], W_PATH("Assemble"), &ar.base,
                            &shmap__v1__assemble_reply__descriptor, &rep, CALL_MS, err, sizeof err);
    sm_rpc_msg_free(rep);
    ck_assert_msg(e == SM_ERESOURCE, "%s", err);
    ck_assert_int_lt(now_ms() - t0, 1000);
    check_cluster("regressions");
}
END_TEST

/* Last: the pending array that saw only garbage still takes a correct
 * upload (once the coordinator has seen every aborted stream end) and then
 * holds exactly that data. */
START_TEST(test_pending_still_usable)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[512];
    sm_err e;
    sm_shape shape = {2, {16, 32}};
    int64_t until = now_ms() + 5000;
    while ((e = upload(cl.pending, mesh_devs, 8, shape, data, nb, 300, err, sizeof err)) ==
               SM_EPRECONDITION &&
           now_ms() < until)
        sleep_ms(50);
    ck_assert_msg(e == SM_OK, "%s", err);
    free(data);
    ck_assert_int_eq(state_of(cl.pending), SM_ARRAY_READY);
    check_values(cl.pending, 0.25f);
    check_values(cl.keep, 0.5f);
}
END_TEST

/* Sanitizer builds: the processes' reports (their stderr is the log) fail
 * the suite even when the process survived. */
START_TEST(test_no_sanitizer_reports)
{
    char path[128], line[1024];
    snprintf(path, sizeof path, "%s/coord.log", cl.dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int bad = 0;
    while (fgets(line, sizeof line, f))
        bad |= strstr(line, "ERROR: AddressSanitizer") || strstr(line, "runtime error:") ||
               strstr(line, "ERROR: LeakSanitizer");
    fclose(f);
    if (bad)
        print_log();
    ck_assert_msg(!bad, "a process reported a sanitizer error (log above)");
}
END_TEST

static Suite *fuzz_suite(void)
{
    Suite *s = suite_create("rpc_fuzz_proc");
    TCase *tc = tcase_create("fuzz");
    tcase_add_unchecked_fixture(tc, cluster_start, cluster_stop);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_raw_message_packs_exactly);
    tcase_add_test(tc, test_unknown_method);
    tcase_add_test(tc, test_coordinator_random_bytes);
    tcase_add_test(tc, test_worker_random_bytes);
    tcase_add_test(tc, test_coordinator_mutated);
    tcase_add_test(tc, test_worker_mutated);
    tcase_add_test(tc, test_concurrent_clients);
    tcase_add_test(tc, test_races);
    tcase_add_test(tc, test_upload_streams);
    tcase_add_test(tc, test_download_boxes);
    tcase_add_test(tc, test_exchange_unknown_jobs);
    tcase_add_test(tc, test_aborted_streams);
    tcase_add_test(tc, test_oversized_message);
    tcase_add_test(tc, test_regressions);
    tcase_add_test(tc, test_pending_still_usable);
    tcase_add_test(tc, test_no_sanitizer_reports);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fuzz_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int i = 0; i < NMETHODS; i++)
        for (int t = 0; t < methods[i].nt; t++)
            free(methods[i].tmpl[t]);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
