/* Check suite for the coordinator's job manager (server/jobs*.c): the pure
 * checks (output names, arguments against parameters, sharding comparison,
 * default device order, the workers of a mesh) and the submit path over a
 * registry with NULL channels: every rejection happens before anything
 * runs and leaves no array behind; an accepted job whose workers cannot be
 * reached fails with UNAVAILABLE naming the worker, and its outputs are
 * deleted. The retention of ended jobs' records: past the count or the
 * time, GetJob / WaitJob / CancelJob say the record was dropped, while
 * queued and running jobs (on workers that listen but never answer) stay. */
#include <arpa/inet.h>
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jobs.h"
#include "jobs_int.h" /* the job table's size */
#include "registry.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "server_testutil.h"
#include "sm_time.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define MM_TEXT                                                                                    \
    "mesh i=4 j=2\n"                                                                               \
    "shard_map matmul_basic(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) -> "          \
    "(P('i', None), P('i', 'j')):\n"                                                               \
    "    z = dot(a, b)\n"                                                                          \
    "    return psum(z, 'j'), z\n"

static sm_program *parse(const char *text)
{
    char err[512];
    sm_program *p = NULL;
    ck_assert_msg(sm_program_parse(text, "t.shmap", &p, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_program_verify(p, 1, err, sizeof err) == SM_OK, "%s", err);
    return p;
}

/* ---- pure checks --------------------------------------------------------------------- */

typedef struct {
    int n;
    const char *names[3];
    sm_err want;
    const char *msg;
} names_case;

static const names_case names_cases[] = {
    {0, {NULL}, SM_OK, NULL},
    {2, {"c", "d"}, SM_OK, NULL},
    {2, {"", NULL}, SM_OK, NULL},
    {3, {"a", "b", "c"}, SM_EINVAL, "names 3 outputs but program 'matmul_basic' returns 2"},
    {2, {"c", "c"}, SM_EINVAL, "outputs 0 and 1 are both named 'c'"},
    {1, {"123"}, SM_EINVAL, "all digits"},
    {2, {"ok", "a\tb"}, SM_EINVAL, "output 1's name has a control character (0x09 at byte 1)"},
    {1, {"w\xc3"}, SM_EINVAL, "output 0's name is not valid UTF-8 (byte 0xc3 at 1)"},
};

START_TEST(test_out_names)
{
    const names_case *c = &names_cases[_i];
    sm_program *p = parse(MM_TEXT);
    char err[256] = "";
    ck_assert_int_eq(sm_cjobs_check_out_names(p, c->n, c->names, err, sizeof err), c->want);
    if (c->msg)
        ck_assert_msg(strstr(err, c->msg), "'%s' lacks '%s'", err, c->msg);
    sm_program_free(p);
}
END_TEST

START_TEST(test_check_arg)
{
    sm_program *p = parse(MM_TEXT);
    sm_array_info a;
    memset(&a, 0, sizeof a);
    a.id.v = 7;
    snprintf(a.name, sizeof a.name, "x");
    a.dtype = SM_F32;
    a.shape = (sm_shape){2, {8, 16}};
    a.state = SM_ARRAY_READY;
    char err[512] = "";
    ck_assert_int_eq(sm_cjobs_check_arg(p, 0, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_check_arg(p, 1, &a, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "parameter 'b'"));
    ck_assert_ptr_nonnull(strstr(err, "f32[16,32]"));
    a.dtype = SM_I32;
    ck_assert_int_eq(sm_cjobs_check_arg(p, 0, &a, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "i32[8,16]"));
    a.dtype = SM_F32;
    a.state = SM_ARRAY_PENDING;
    ck_assert_int_eq(sm_cjobs_check_arg(p, 0, &a, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "pending, not ready"));
    sm_program_free(p);
}
END_TEST

START_TEST(test_sharding_same)
{
    char err[256];
    sm_sharding s;
    sm_mesh m;
    sm_pspec want;
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    s.mesh = m;
    ck_assert_int_eq(sm_pspec_parse("P('i', None)", &s.spec, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i')", &want, err, sizeof err), SM_OK);
    ck_assert(sm_cjobs_sharding_same(&s, &m, &want)); /* trailing None */
    ck_assert_int_eq(sm_pspec_parse("P(('i',))", &want, err, sizeof err), SM_OK);
    ck_assert(sm_cjobs_sharding_same(&s, &m, &want)); /* a 1-tuple */
    ck_assert_int_eq(sm_pspec_parse("P('j')", &want, err, sizeof err), SM_OK);
    ck_assert(!sm_cjobs_sharding_same(&s, &m, &want));
    ck_assert_int_eq(sm_pspec_parse("P('i')", &want, err, sizeof err), SM_OK);
    s.mesh.devices[0] = 7, s.mesh.devices[7] = 0;
    ck_assert(!sm_cjobs_sharding_same(&s, &m, &want)); /* another device order */
    ck_assert_int_eq(sm_mesh_parse("i=2,j=4", NULL, 0, &s.mesh, err, sizeof err), SM_OK);
    ck_assert(!sm_cjobs_sharding_same(&s, &m, &want));
}
END_TEST

static void workers(sm_worker_info *w, int n, int ndev)
{
    memset(w, 0, (size_t)n * sizeof *w);
    for (int k = 0; k < n; k++) {
        w[k].id.v = (uint32_t)k + 1;
        snprintf(w[k].address, SM_ADDR_MAX, "127.0.0.1:%d", 9000 + k);
        w[k].process_index = n - 1 - k; /* registered in reverse process order */
        w[k].alive = 1;
        w[k].ndevices = ndev;
        for (int d = 0; d < ndev; d++)
            w[k].devices[d] = k * ndev + d;
    }
}

START_TEST(test_default_devices_and_peers)
{
    sm_worker_info w[3];
    workers(w, 3, 4);
    sm_mesh m;
    char err[512] = "";
    ck_assert_int_eq(sm_mesh_parse("i=2,j=4", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_default_devices(&m, w, 3, err, sizeof err), SM_OK);
    /* process 0 is worker 3 (devices 8..11), process 1 worker 2 (4..7) */
    ck_assert_int_eq(m.devices[0], 8);
    ck_assert_int_eq(m.devices[3], 11);
    ck_assert_int_eq(m.devices[4], 4);
    sm_svc_peer *peers;
    uint32_t *ids;
    int np;
    ck_assert_int_eq(sm_cjobs_peers(&m, w, 3, &peers, &ids, &np, err, sizeof err), SM_OK);
    ck_assert_int_eq(np, 2);
    ck_assert_uint_eq(ids[0], 3);
    ck_assert_str_eq(peers[0].address, "127.0.0.1:9002");
    ck_assert_int_eq(peers[0].ndevices, 4);
    ck_assert_int_eq(peers[1].devices[0], 4);
    free(peers);
    free(ids);
    /* not whole workers: the first devices, as jax.make_mesh takes them */
    ck_assert_int_eq(sm_mesh_parse("i=3", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_default_devices(&m, w, 3, err, sizeof err), SM_OK);
    ck_assert_int_eq(m.devices[0], 8);
    ck_assert_int_eq(m.devices[2], 10);
    ck_assert_int_eq(sm_mesh_parse("i=3,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_default_devices(&m, w, 3, err, sizeof err), SM_OK);
    ck_assert_int_eq(m.devices[3], 11); /* the minor axis stays inside a worker */
    ck_assert_int_eq(m.devices[4], 4);
    ck_assert_int_eq(m.devices[5], 5);
    ck_assert_int_eq(sm_mesh_parse("i=13", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_default_devices(&m, w, 3, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "have only 12 devices"));
    /* a device on a lost worker; a device nobody has */
    int32_t devs[2] = {1, 4};
    ck_assert_int_eq(sm_mesh_parse("i=2", devs, 2, &m, err, sizeof err), SM_OK);
    w[0].alive = 0;
    ck_assert_int_eq(sm_cjobs_peers(&m, w, 3, &peers, &ids, &np, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err, "device 1 of the job's mesh is on worker 1 at "
                                      "127.0.0.1:9000, which is lost"));
    devs[0] = 99;
    ck_assert_int_eq(sm_mesh_parse("i=2", devs, 2, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_cjobs_peers(&m, w, 3, &peers, &ids, &np, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 99"));
}
END_TEST

/* ---- submit over a registry -------------------------------------------------------------- */

static struct {
    sm_registry *reg;
    sm_coord coord;
    sm_cjobs *jobs;
    const char *state_dir; /* a registry database there when not NULL */
} fx;

/* A registry with two 4-device workers at ports[0..1] on loopback, and a
 * job manager configured by cfg. */
static void fx_open(const int *ports, const sm_cjobs_config *cfg)
{
    char err[256];
    fx.reg = st_registry_at(2, 4, ports, sm_time_mono_ms(), fx.state_dir);
    fx.coord = (sm_coord){fx.reg, NULL, 2000};
    ck_assert_msg(sm_cjobs_create(&fx.coord, cfg, &fx.jobs, err, sizeof err) == SM_OK, "%s", err);
}

static void setup_bare(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    sm_rpc_init();
    memset(&fx, 0, sizeof fx);
}

static void setup(void)
{
    static const int nobody[2] = {1, 2}; /* nothing listens there */
    setup_bare();
    sm_cjobs_config cfg = sm_cjobs_config_default(2);
    fx_open(nobody, &cfg);
}

static void teardown(void)
{
    sm_cjobs_free(fx.jobs);
    sm_registry_free(fx.reg);
    sm_rpc_shutdown();
}

/* A READY array of dtype/shape/spec on the default mesh i=4 j=2. */
static sm_array_id ready_array(const char *name, sm_dtype t, sm_shape shape, const char *spec)
{
    char err[512];
    sm_mesh m;
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    sm_svc_create_array_req req;
    memset(&req, 0, sizeof req);
    req.name = name;
    req.dtype = t;
    req.has_shape = 1;
    req.shape = shape;
    req.sharding.mesh = &m;
    req.sharding.default_order = 1;
    ck_assert_int_eq(sm_pspec_parse(spec, &req.sharding.spec, err, sizeof err), SM_OK);
    req.kind = SM_PUT_SHARDS;
    sm_svc_create_array_reply rep;
    ck_assert_msg(
        sm_registry_array_create(fx.reg, &req, sm_time_mono_ms(), &rep, err, sizeof err) == SM_OK,
        "%s", err);
    sm_array_id id = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    sm_array_info info;
    ck_assert_int_eq(sm_registry_reshard_end(fx.reg, id, 1, &info, err, sizeof err), SM_OK);
    sm_array_info_free(&info);
    return id;
}

static int narrays(void)
{
    sm_array_info *l;
    int n;
    char err[256];
    ck_assert_int_eq(sm_registry_array_list(fx.reg, &l, &n, err, sizeof err), SM_OK);
    sm_array_info_list_free(l, n);
    return n;
}

typedef struct {
    const char *name;
    const char *text;
    int check_vma;
    const char *args[2]; /* array names */
    const char *outs[2];
    sm_err want;
    const char *msg;
} submit_case;

static const submit_case submit_cases[] = {
    {"vma violation",
     "mesh i=4 j=2\n"
     "shard_map f(a: f32[8,16] @ P('i','j')) -> P('i', None):\n"
     "    return a\n",
     1,
     {"A"},
     {NULL},
     SM_EINVAL,
     "t.shmap:3:5:"},
    {"accepted", MM_TEXT, 0, {"A", "B"}, {"x", "y"}, SM_OK, ""},
    {"unknown argument",
     MM_TEXT,
     1,
     {"A", "nope"},
     {NULL},
     SM_ENOTFOUND,
     "argument 1 for parameter 'b'"},
    {"wrong shape", MM_TEXT, 1, {"A", "A"}, {NULL}, SM_EINVAL, "parameter 'b'"},
    {"name taken", MM_TEXT, 1, {"A", "B"}, {"A"}, SM_EEXIST, "output 0 cannot be named 'A'"},
    {"names twice", MM_TEXT, 1, {"A", "B"}, {"c", "c"}, SM_EINVAL, "both named 'c'"},
    {"mesh too big",
     "mesh i=16\n"
     "shard_map f(a: f32[16] @ P('i')) -> P('i'):\n"
     "    return a\n",
     1,
     {"A"},
     {NULL},
     SM_EINVAL,
     "have only"},
};

START_TEST(test_submit_rejected)
{
    const submit_case *c = &submit_cases[_i];
    ready_array("A", SM_F32, (sm_shape){2, {8, 16}}, "P('i','j')");
    ready_array("B", SM_F32, (sm_shape){2, {16, 32}}, "P('j')");
    int before = narrays();
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_msg(sm_program_parse(c->text, "t.shmap", &p, err, sizeof err) == SM_OK, "%s", err);
    sm_array_ref args[2] = {{{0}, c->args[0]}, {{0}, c->args[1]}};
    const char *outs[2] = {c->outs[0], c->outs[1]};
    sm_svc_submit_req req = {p,    p->nparams,   args, c->outs[0] ? 1 + (c->outs[1] != NULL) : 0,
                             outs, c->check_vma, 0};
    sm_job_id id = {0};
    sm_err e = sm_cjobs_ops()->submit(fx.jobs, &req, &id, err, sizeof err);
    ck_assert_msg(e == c->want, "%s: %d %s", c->name, e, err);
    ck_assert_msg(strstr(err, c->msg), "%s: '%s' lacks '%s'", c->name, err, c->msg);
    if (e == SM_OK) { /* accepted: the job fails (no worker listens) and drops its outputs */
        sm_job_info info;
        ck_assert_int_eq(sm_cjobs_ops()->cancel(fx.jobs, id, &info, err, sizeof err), SM_OK);
        for (int k = 0; k < 40 && info.state < SM_JOB_DONE; k++) {
            sm_job_info_free(&info);
            ck_assert_int_eq(sm_cjobs_ops()->wait(fx.jobs, id, 500, &info, err, sizeof err), SM_OK);
        }
        ck_assert_int_ge(info.state, SM_JOB_FAILED);
        sm_job_info_free(&info);
    }
    ck_assert_int_eq(narrays(), before);
}
END_TEST

START_TEST(test_submit_unreachable)
{
    ready_array("A", SM_F32, (sm_shape){2, {8, 16}}, "P('i','j')");
    ready_array("B", SM_F32, (sm_shape){2, {16, 32}}, "P('j', None)");
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse(MM_TEXT, "t.shmap", &p, err, sizeof err), SM_OK);
    sm_array_ref args[2] = {{{0}, "A"}, {{0}, "B"}};
    const char *outs[1] = {"C"};
    sm_svc_submit_req req = {p, 2, args, 1, outs, 1, 0};
    sm_job_id id = {0};
    ck_assert_msg(sm_cjobs_ops()->submit(fx.jobs, &req, &id, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_uint_eq(id.v, 1);
    ck_assert_int_eq(narrays(), 4); /* the two outputs, pending */
    sm_job_info info;
    for (int k = 0; k < 40; k++) {
        ck_assert_int_eq(sm_cjobs_ops()->wait(fx.jobs, id, 500, &info, err, sizeof err), SM_OK);
        if (info.state == SM_JOB_FAILED)
            break;
        sm_job_info_free(&info);
    }
    ck_assert_int_eq(info.state, SM_JOB_FAILED);
    ck_assert_msg(strstr(info.error, "worker 1 at 127.0.0.1:1 is unavailable") ||
                      strstr(info.error, "worker 2 at 127.0.0.1:2 is unavailable"),
                  "%s", info.error);
    ck_assert_int_eq(info.noutputs, 0);
    sm_job_info_free(&info);
    ck_assert_int_eq(narrays(), 2); /* outputs dropped, inputs untouched */
    /* get / cancel of an ended job; unknown jobs */
    ck_assert_int_eq(sm_cjobs_ops()->cancel(fx.jobs, id, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_FAILED);
    sm_job_info_free(&info);
    ck_assert_int_eq(sm_cjobs_ops()->get(fx.jobs, (sm_job_id){9}, &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "job 9 does not exist"));
}
END_TEST

/* ---- retention of ended jobs ------------------------------------------------------- */

/* Submits MM_TEXT over the arrays A and B (made by the caller). */
static sm_job_id submit_mm(void)
{
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse(MM_TEXT, "t.shmap", &p, err, sizeof err), SM_OK);
    sm_array_ref args[2] = {{{0}, "A"}, {{0}, "B"}};
    sm_svc_submit_req req = {p, 2, args, 0, NULL, 1, 0, 0};
    sm_job_id id = {0};
    ck_assert_msg(sm_cjobs_ops()->submit(fx.jobs, &req, &id, err, sizeof err) == SM_OK, "%s", err);
    return id;
}

/* Submits MM_TEXT over A and B with a SubmitJob that waits for the end:
 * the job gets id and fails (no worker answers). *info is the caller's to
 * free. */
static void submit_wait_mm(uint64_t id, sm_job_info *info)
{
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse(MM_TEXT, "t.shmap", &p, err, sizeof err), SM_OK);
    sm_array_ref args[2] = {{{0}, "A"}, {{0}, "B"}};
    sm_svc_submit_req req = {p, 2, args, 0, NULL, 1, 0, 5000};
    ck_assert_msg(sm_cjobs_ops()->submit_wait(fx.jobs, &req, info, err, sizeof err) == SM_OK, "%s",
                  err);
    ck_assert_uint_eq(info->id.v, id);
    ck_assert_msg(info->state == SM_JOB_FAILED, "job %llu: %d", (unsigned long long)id,
                  info->state);
}

/* Slots of the job table (it grows with a burst of jobs and shrinks back
 * as their records go). */
static size_t table_cap(void)
{
    pthread_mutex_lock(&fx.jobs->mu);
    size_t cap = fx.jobs->table.cap;
    pthread_mutex_unlock(&fx.jobs->mu);
    return cap;
}

static void mm_arrays(void)
{
    ready_array("A", SM_F32, (sm_shape){2, {8, 16}}, "P('i','j')");
    ready_array("B", SM_F32, (sm_shape){2, {16, 32}}, "P('j', None)");
}

/* The state of job id (SM_OK), or -1 with its NOT_FOUND sentence in err. */
static int job_state(uint64_t id, char *err, size_t errlen)
{
    sm_job_info info;
    sm_err e = sm_cjobs_ops()->get(fx.jobs, (sm_job_id){id}, &info, err, errlen);
    if (e) {
        ck_assert_int_eq(e, SM_ENOTFOUND);
        return -1;
    }
    ck_assert_uint_eq(info.id.v, id);
    int st = info.state;
    sm_job_info_free(&info);
    return st;
}

/* Job id is gone with the dropped-record sentence from get, wait and
 * cancel alike; *what (e.g. "kept for 600 s") is in it. */
static void assert_dropped(uint64_t id, const char *what)
{
    char err[512] = "", want[64];
    sm_job_info info;
    snprintf(want, sizeof want, "job %llu ended and its record was dropped",
             (unsigned long long)id);
    ck_assert_msg(job_state(id, err, sizeof err) == -1, "job %llu is still kept",
                  (unsigned long long)id);
    ck_assert_msg(strstr(err, want) && strstr(err, what), "'%s'", err);
    err[0] = 0;
    ck_assert_int_eq(sm_cjobs_ops()->wait(fx.jobs, (sm_job_id){id}, 100, &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_msg(strstr(err, want), "'%s'", err);
    err[0] = 0;
    ck_assert_int_eq(sm_cjobs_ops()->cancel(fx.jobs, (sm_job_id){id}, &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_msg(strstr(err, want), "'%s'", err);
}

/* A loopback socket that listens but never accepts: a call to it waits
 * until the socket is closed. */
static int silent_listener(int *port)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 64), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* More ended jobs than keep_max: the oldest ends go first; a running job
 * and a queued one stay however many end after them. */
/* Waits (at most 10 s) until job id has ended. */
static void wait_ended(uint64_t id)
{
    char err[512];
    sm_job_info info;
    for (int k = 0; k < 100 && job_state(id, err, sizeof err) < SM_JOB_DONE; k++) {
        ck_assert_int_eq(
            sm_cjobs_ops()->wait(fx.jobs, (sm_job_id){id}, 100, &info, err, sizeof err), SM_OK);
        sm_job_info_free(&info);
    }
}

/* Submits matmul jobs, asserting they get the ids first..last in turn. */
static void submit_mm_ids(uint64_t first, uint64_t last)
{
    for (uint64_t id = first; id <= last; id++)
        ck_assert_uint_eq(submit_mm().v, id);
}

/* A job manager with one runner (the rest of cfg as given) over two
 * workers that never answer (fds: their listening sockets), the arrays A
 * and B, and job 1 running on the runner, hung until fds close. */
static void one_hung_runner(sm_cjobs_config cfg, int fds[2])
{
    int ports[2];
    char err[512];
    for (int k = 0; k < 2; k++)
        fds[k] = silent_listener(&ports[k]);
    cfg.nthreads = 1;
    fx_open(ports, &cfg);
    mm_arrays();
    ck_assert_uint_eq(submit_mm().v, 1);
    for (int k = 0; k < 200 && job_state(1, err, sizeof err) != SM_JOB_RUNNING; k++)
        usleep(10000);
    ck_assert_int_eq(job_state(1, err, sizeof err), SM_JOB_RUNNING);
}

START_TEST(test_keep_max)
{
    int fds[2];
    sm_cjobs_config cfg = sm_cjobs_config_default(1);
    cfg.keep_max = 3;
    one_hung_runner(cfg, fds);
    char err[512];
    sm_job_info info;
    /* A burst of queued jobs behind it (the table grows), all cancelled
     * (and it shrinks back). */
    submit_mm_ids(2, 200);
    ck_assert_uint_ge(table_cap(), 2 * 200);
    for (uint64_t id = 3; id <= 200; id++) {
        ck_assert_int_eq(sm_cjobs_ops()->cancel(fx.jobs, (sm_job_id){id}, &info, err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(info.state, SM_JOB_CANCELLED);
        sm_job_info_free(&info);
    }
    ck_assert_int_eq(narrays(), 2 + 2 * 2); /* jobs 1 and 2's pending outputs */
    ck_assert_uint_le(table_cap(), 64);     /* 5 jobs left: 1, 2, 198..200 */
    ck_assert_int_eq(job_state(1, err, sizeof err), SM_JOB_RUNNING);
    ck_assert_int_eq(job_state(2, err, sizeof err), SM_JOB_QUEUED);
    assert_dropped(3, "and only the newest 3");
    for (uint64_t id = 4; id <= 197; id++)
        ck_assert_int_eq(job_state(id, err, sizeof err), -1);
    for (uint64_t id = 198; id <= 200; id++)
        ck_assert_int_eq(job_state(id, err, sizeof err), SM_JOB_CANCELLED);
    ck_assert_int_eq(job_state(201, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "job 201 does not exist"), "'%s'", err);
    ck_assert_int_eq(job_state(0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "job 0 does not exist"), "'%s'", err);
    /* The workers go away: job 1 fails, job 2 runs and fails; their ends
     * push out 198 and 199. */
    for (int k = 0; k < 2; k++)
        close(fds[k]);
    wait_ended(2);
    ck_assert_int_eq(job_state(1, err, sizeof err), SM_JOB_FAILED);
    ck_assert_int_eq(job_state(2, err, sizeof err), SM_JOB_FAILED);
    ck_assert_int_eq(job_state(200, err, sizeof err), SM_JOB_CANCELLED);
    assert_dropped(198, "newest 3");
    assert_dropped(199, "newest 3");
    ck_assert_int_eq(narrays(), 2);
}
END_TEST

/* fx_open over two workers where nothing listens, then the arrays A and
 * B. */
static void fx_open_idle(const sm_cjobs_config *cfg)
{
    static const int nobody[2] = {1, 2};
    fx_open(nobody, cfg);
    mm_arrays();
}

/* Many jobs through a small table: only the newest keep_max answer, and a
 * SubmitJob that waits gets its job's end even with nothing kept. */
START_TEST(test_keep_many)
{
    sm_cjobs_config cfg = sm_cjobs_config_default(2);
    cfg.keep_max = 40;
    fx_open_idle(&cfg);
    char err[512];
    for (uint64_t id = 1; id <= 300; id++) {
        sm_job_info info;
        submit_wait_mm(id, &info);
        sm_job_info_free(&info);
    }
    for (uint64_t id = 1; id <= 300; id++) {
        if (id <= 260)
            ck_assert_int_eq(job_state(id, err, sizeof err), -1);
        else
            ck_assert_int_eq(job_state(id, err, sizeof err), SM_JOB_FAILED);
    }
    assert_dropped(1, "and only the newest 40");
    assert_dropped(260, "for 600 s");
    ck_assert_int_eq(job_state(301, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "job 301 does not exist"), "'%s'", err);
    ck_assert_int_eq(narrays(), 2);
}
END_TEST

/* A record older than keep_ms goes; with keep_max 0 a SubmitJob that
 * waits still describes the job it ran. */
START_TEST(test_keep_time)
{
    sm_cjobs_config cfg = sm_cjobs_config_default(2);
    cfg.keep_ms = 300;
    fx_open_idle(&cfg);
    char err[512];
    sm_job_info info;
    sm_job_id id = submit_mm();
    ck_assert_int_eq(sm_cjobs_ops()->wait(fx.jobs, id, 5000, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_FAILED);
    sm_job_info_free(&info);
    ck_assert_int_eq(job_state(id.v, err, sizeof err), SM_JOB_FAILED);
    /* with no call coming in, the record goes on time all the same */
    int kept = 1;
    for (int k = 0; k < 100 && kept; k++) {
        usleep(10000);
        pthread_mutex_lock(&fx.jobs->mu);
        kept = fx.jobs->nended;
        pthread_mutex_unlock(&fx.jobs->mu);
        ck_assert_msg(!kept || k < 50, "the record is still kept %d ms after the end",
                      10 * (k + 1));
    }
    ck_assert_int_eq(kept, 0);
    assert_dropped(id.v, "for 300 ms");
    sm_cjobs_free(fx.jobs);
    cfg.keep_max = 0;
    ck_assert_int_eq(sm_cjobs_create(&fx.coord, &cfg, &fx.jobs, err, sizeof err), SM_OK);
    submit_wait_mm(1, &info);
    ck_assert_ptr_nonnull(strstr(info.error, "is unavailable"));
    sm_job_info_free(&info);
    assert_dropped(1, "and only the newest 0");
    ck_assert_int_eq(narrays(), 2);
}
END_TEST

/* At most queue_max jobs wait to start: one more is refused
 * RESOURCE_EXHAUSTED and leaves no array behind; a cancelled or started
 * job frees its place. */
START_TEST(test_queue_max)
{
    int fds[2];
    sm_cjobs_config cfg = sm_cjobs_config_default(1);
    cfg.queue_max = 3;
    one_hung_runner(cfg, fds);
    char err[1024];
    sm_job_info info;
    submit_mm_ids(2, 4);
    int before = narrays();
    ck_assert_int_eq(before, 2 + 4 * 2);
    /* the fourth waiting job, by both submit calls */
    for (int wait = 0; wait < 2; wait++) {
        sm_program *p = NULL;
        ck_assert_int_eq(sm_program_parse(MM_TEXT, "t.shmap", &p, err, sizeof err), SM_OK);
        sm_array_ref args[2] = {{{0}, "A"}, {{0}, "B"}};
        const char *outs[1] = {"out"};
        sm_svc_submit_req req = {p, 2, args, 1, outs, 1, 0, wait ? 1000 : 0};
        sm_job_id id = {0};
        err[0] = 0;
        sm_err e = wait ? sm_cjobs_ops()->submit_wait(fx.jobs, &req, &info, err, sizeof err)
                        : sm_cjobs_ops()->submit(fx.jobs, &req, &id, err, sizeof err);
        ck_assert_msg(e == SM_ERESOURCE, "%d %s", e, err);
        ck_assert_msg(strstr(err, "3 jobs already wait to start") && strstr(err, "--job-queue-max"),
                      "'%s'", err);
        ck_assert_int_eq(narrays(), before); /* its outputs were dropped, "out" is free */
    }
    ck_assert_int_eq(job_state(5, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "job 5 does not exist"), "'%s'", err);
    /* a cancelled job frees its place */
    ck_assert_int_eq(sm_cjobs_ops()->cancel(fx.jobs, (sm_job_id){3}, &info, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_CANCELLED);
    sm_job_info_free(&info);
    ck_assert_uint_eq(submit_mm().v, 5);
    ck_assert_int_eq(job_state(5, err, sizeof err), SM_JOB_QUEUED);
    /* the workers go away: every job ends, and the queue takes jobs again */
    for (int k = 0; k < 2; k++)
        close(fds[k]);
    for (uint64_t id = 1; id <= 5; id++) {
        wait_ended(id);
        ck_assert_int_ge(job_state(id, err, sizeof err), SM_JOB_DONE);
    }
    ck_assert_int_eq(narrays(), 2);
    submit_mm_ids(6, 8);
}
END_TEST

START_TEST(test_keep_bad_config)
{
    char err[256] = "";
    sm_cjobs_config cfg = sm_cjobs_config_default(2);
    cfg.keep_max = -1;
    ck_assert_int_eq(sm_cjobs_create(&fx.coord, &cfg, &fx.jobs, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "-1 records"));
    ck_assert_ptr_null(fx.jobs);
    cfg = sm_cjobs_config_default(2);
    cfg.queue_max = 0;
    ck_assert_int_eq(sm_cjobs_create(&fx.coord, &cfg, &fx.jobs, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not 0"));
    ck_assert_ptr_null(fx.jobs);
}
END_TEST

/* The state of job id in the registry's database (-1: no record). */
static int job_record(uint64_t id)
{
    char err[256];
    uint64_t last;
    sm_reg_job *recs;
    int n, state = -1;
    ck_assert_msg(sm_registry_jobs_restore(fx.reg, &last, &recs, &n, err, sizeof err) == SM_OK,
                  "%s", err);
    for (int k = 0; k < n; k++)
        if (recs[k].id == id)
            state = recs[k].state;
    free(recs);
    return state;
}

static void *submit_wait_light(void *arg)
{
    sm_job_info *info = arg;
    char err[512];
    sm_program *p = parse("mesh i=4 j=2\n"
                          "shard_map twice(a: f32[8,16] @ P('i','j')) -> P('i','j'):\n"
                          "    return a + a\n");
    sm_array_ref args[1] = {{{0}, "A"}};
    sm_svc_submit_req req = {p, 1, args, 0, NULL, 1, 0, 60000};
    ck_assert_msg(sm_cjobs_ops()->submit_wait(fx.jobs, &req, info, err, sizeof err) == SM_OK, "%s",
                  err);
    return NULL;
}

/* A job run inside its submit call (light, nothing to reshard: no caller
 * knows its id before it ends) gets its record in the database when it
 * ends, in the transaction that makes its outputs ready; a call that names
 * it first has it recorded at once, so that it survives a restart as
 * every job some caller has seen. A submitted job is recorded before its
 * id is returned. */
START_TEST(test_light_job_record)
{
    char dir[] = "/tmp/sm_jobs_state.XXXXXX", err[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    fx.state_dir = dir;
    int fds[2], ports[2];
    for (int k = 0; k < 2; k++)
        fds[k] = silent_listener(&ports[k]);
    sm_cjobs_config cfg = sm_cjobs_config_default(2);
    fx_open(ports, &cfg);
    mm_arrays();
    ck_assert_uint_eq(submit_mm().v, 1); /* runs on a runner thread, never answered */
    ck_assert_int_eq(job_record(1), SM_JOB_QUEUED);
    /* taken by a runner: with a job still waiting, the light one would queue */
    for (int k = 0; k < 500 && job_state(1, err, sizeof err) != SM_JOB_RUNNING; k++)
        usleep(10000);
    ck_assert_int_eq(job_state(1, err, sizeof err), SM_JOB_RUNNING);
    pthread_t t;
    sm_job_info light;
    memset(&light, 0, sizeof light);
    ck_assert_int_eq(pthread_create(&t, NULL, submit_wait_light, &light), 0);
    sm_cjobs_stats st;
    for (int k = 0; k < 500; k++) {
        sm_cjobs_stats_get(fx.jobs, &st);
        if (st.running == 2 && st.submitted == 2)
            break;
        usleep(10000);
    }
    ck_assert_int_eq(st.running, 2);
    ck_assert_int_eq(job_record(2), -1); /* running, and nobody knows it yet */
    ck_assert_int_eq(job_state(2, err, sizeof err), SM_JOB_RUNNING);
    ck_assert_int_eq(job_record(2), SM_JOB_QUEUED); /* named: recorded */
    for (int k = 0; k < 2; k++)
        close(fds[k]); /* the workers go away: both jobs end */
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(light.id.v, 2);
    ck_assert_int_eq(light.state, SM_JOB_FAILED);
    wait_ended(1);
    ck_assert_int_eq(job_record(1), SM_JOB_FAILED);
    ck_assert_int_eq(job_record(2), SM_JOB_FAILED);
    sm_job_info_free(&light);
    sm_cjobs_free(fx.jobs);
    sm_registry_free(fx.reg);
    fx.jobs = NULL;
    fx.reg = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    fx.state_dir = NULL;
}
END_TEST

static Suite *jobs_suite(void)
{
    Suite *s =
        SUITE_CASE(suite_create("server_jobs"), "checks", 0, NULL, {test_out_names, N(names_cases)},
                   {test_check_arg}, {test_sharding_same}, {test_default_devices_and_peers});
    SUITE_CASE(s, "submit", 60, SUITE_CHECKED(setup, teardown),
               {test_submit_rejected, N(submit_cases)}, {test_submit_unreachable});
    return SUITE_CASE(s, "retention", 60, SUITE_CHECKED(setup_bare, teardown), {test_keep_max},
                      {test_keep_many}, {test_keep_time}, {test_queue_max}, {test_keep_bad_config},
                      {test_light_job_record});
}

int main(void)
{
    return suite_main(jobs_suite());
}
