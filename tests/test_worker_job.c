/* Check suite for shard_map jobs on workers (worker/job.c, worker/comm_grpc*.c):
 * two workers with two devices each, programs whose collectives span both
 * workers (mesh i=2 j=2, devices=[0, 2, 1, 3]: 'j' crosses the workers,
 * 'i' stays inside one), inputs uploaded with PutShard, RunJob sent to both
 * workers at once, outputs fetched with GetShard and compared bit for bit
 * with the in-process runner (sm_exec_local_run) on the global inputs.
 * Values are small integers so every reduction order gives the same bits;
 * a separate case checks that random floats give the same bits run after
 * run and on every member of a group.
 *
 * Two fixtures run the same tests:
 * - "inproc": both workers are rpc servers in this process (sm_handlers +
 *   sm_jobs over their own stores), so Exchange streams cross real sockets;
 * - "proc": two real shmap-worker processes ($SHMAP_WORKER) registered with
 *   a fake coordinator served here (skipped when the binary does not serve
 *   RunJob yet).
 * Last in each: a worker that dies while the other waits for its data; the
 * survivor must fail with SM_EUNAVAILABLE naming it, well within the
 * deadline.
 *
 * Both fixtures run again with shared memory ("inproc_shm", "proc_shm":
 * RunJob gives both workers shm_domain 1, the proc workers run with
 * --transport shm): the same tests, plus the probe, the same bits as gRPC
 * on random floats, collective bytes counted as read from shared memory
 * and none sent over gRPC, and no segment of this process's jobs left in
 * /dev/shm, after a worker was killed too. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm_grpc.h"
#include "comm_grpc_mailbox.h"
#include "fake_coord.h"
#include "handlers.h"
#include "harness_svc.h"
#include "job.h"
#include "peer.h"
#include "sm_checksum.h"
#include "sm_exec_local.h"
#include "sm_rpc.h"
#include "sm_sharding.h"
#include "sm_svc.h"
#include "sm_svc_job.h"
#include "sm_shm.h"
#include "sm_time.h"
#include "store.h"
#include "traffic.h"
#include "suite_main.h"

#define NW      2 /* workers */
#define DPW     2 /* devices per worker */
#define CALL_MS 30000

/* ---- the cluster under test -------------------------------------------------- */

typedef struct {
    char addr[NW][SM_ADDR_MAX];
    sm_rpc_channel *ch[NW];
    /* inproc */
    sm_rpc_server *srv[NW];
    sm_store *store[NW];
    sm_peer *peer[NW];
    sm_handlers h[NW];
    sm_jobs *jobs[NW];
    /* proc */
    pid_t pid[NW];
    fake_coord coord;
    int skip; /* the worker binary serves no RunJob */
} cluster;

static cluster cl;
static uint64_t next_id = 1000;
/* RunJob requests put both workers in shared-memory domain 1; the workers
 * answer ShmProbe. */
static int shm_mode;

/* The key naming job's segments: this process's pid in the top 24 bits,
 * so shm_left() finds what this suite's jobs left behind. */
static uint64_t shm_key_of(uint64_t job)
{
    return ((uint64_t)getpid() << 40) | (job & ((1ull << 40) - 1));
}

/* Segments in /dev/shm of this process's jobs (of job, if non-zero; any
 * shmap segment, pool files of the workers included, if job is -1). */
static int shm_left(uint64_t job)
{
    char pre[64];
    if (job == (uint64_t)-1)
        snprintf(pre, sizeof pre, "shmap-");
    else if (job)
        snprintf(pre, sizeof pre, "shmap-%016llx-", (unsigned long long)shm_key_of(job));
    else
        snprintf(pre, sizeof pre, "shmap-%06llx", (unsigned long long)(shm_key_of(0) >> 40));
    return harness_shm_left(pre, NULL, "test_worker_job");
}

static double now_s(void)
{
    return (double)sm_time_mono_us() / 1e6;
}

static void inproc_setup(void)
{
    char err[512];
    memset(cl.srv, 0, sizeof cl.srv);
    sm_rpc_init();
    cl.skip = 0;
    for (int w = 0; w < NW; w++) {
        int32_t devs[DPW];
        for (int k = 0; k < DPW; k++)
            devs[k] = w * DPW + k;
        sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
        ck_assert_msg(sm_rpc_server_create(&o, &cl.srv[w], err, sizeof err) == SM_OK, "%s", err);
        snprintf(cl.addr[w], SM_ADDR_MAX, "127.0.0.1:%d", sm_rpc_server_port(cl.srv[w]));
        ck_assert(sm_store_create(NULL, &cl.store[w], err, sizeof err) == SM_OK);
        ck_assert(sm_store_set_identity(cl.store[w], (uint32_t)w, DPW, devs, err, sizeof err) ==
                  SM_OK);
        ck_assert(sm_peer_create(NULL, NULL, CALL_MS, &cl.peer[w], err, sizeof err) == SM_OK);
        cl.h[w] = (sm_handlers){.store = cl.store[w],
                                .peers = cl.peer[w],
                                .self_address = cl.addr[w],
                                .assemble_threads = 2};
        sm_jobs_config jc = {.store = cl.store[w],
                             .peers = cl.peer[w],
                             .self_address = cl.addr[w],
                             .probe_ms = 200,
                             .shm = shm_mode || w == 0}; /* worker 1 refuses probes in gRPC mode */
        ck_assert(sm_jobs_create(&jc, &cl.jobs[w], err, sizeof err) == SM_OK);
        ck_assert_msg(sm_svc_worker_serve(cl.srv[w], &sm_handlers_ops, &cl.h[w], "test-worker", err,
                                          sizeof err) == SM_OK,
                      "%s", err);
        ck_assert_msg(
            sm_svc_worker_jobs_serve(cl.srv[w], &sm_jobs_ops, cl.jobs[w], err, sizeof err) == SM_OK,
            "%s", err);
        ck_assert_msg(sm_rpc_server_start(cl.srv[w], err, sizeof err) == SM_OK, "%s", err);
        ck_assert(sm_rpc_channel_create(cl.addr[w], NULL, &cl.ch[w], err, sizeof err) == SM_OK);
    }
}

static void inproc_teardown(void)
{
    for (int w = 0; w < NW; w++) {
        sm_rpc_channel_free(cl.ch[w]);
        cl.ch[w] = NULL;
        sm_jobs_stop(cl.jobs[w]);
        sm_rpc_server_stop(cl.srv[w]);
        sm_jobs_free(cl.jobs[w]);
        sm_peer_free(cl.peer[w]);
        sm_rpc_server_free(cl.srv[w]);
        sm_store_free(cl.store[w]);
    }
    sm_rpc_shutdown();
}

/* ---- real worker processes under a fake coordinator ----------------------------- */

static void proc_setup(void)
{
    char err[512];
    sm_rpc_init();
    memset(cl.pid, 0, sizeof cl.pid);
    cl.skip = 0;
    ck_assert_msg(fake_coord_start(&cl.coord, FAKE_COORD_MAX, DPW, 500, "fake", err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    for (int w = 0; w < NW; w++) {
        cl.pid[w] = harness_worker_spawn(
            cl.coord.target, 2,
            (const char *const[]){"--transport", shm_mode ? "shm" : "grpc", NULL});
        /* register one at a time so worker w gets devices 2w, 2w+1 */
        ck_assert_msg(fake_coord_wait(&cl.coord, w + 1) > w,
                      "worker %d did not register within 15 s", w);
        snprintf(cl.addr[w], SM_ADDR_MAX, "%s", cl.coord.addr[w]);
        ck_assert(sm_rpc_channel_create(cl.addr[w], NULL, &cl.ch[w], err, sizeof err) == SM_OK);
        ck_assert_int_eq(fake_coord_wait_devices(&cl.coord, cl.ch[w], CALL_MS), DPW);
    }
    /* a worker built without the job service answers UNIMPLEMENTED */
    if (sm_svc_worker_cancel_job(cl.ch[0], CALL_MS, (sm_job_id){1}, err, sizeof err) ==
        SM_EUNIMPLEMENTED) {
        fprintf(stderr, "test_worker_job: %s serves no RunJob yet; skipping the proc case\n",
                harness_worker_bin());
        cl.skip = 1;
    }
}

static void proc_teardown(void)
{
    for (int w = 0; w < NW; w++) {
        sm_rpc_channel_free(cl.ch[w]);
        cl.ch[w] = NULL;
        if (cl.pid[w] > 0) {
            int status = harness_stop_pid(cl.pid[w], 5000);
            ck_assert_msg(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "worker %d did not exit cleanly on SIGTERM (status %#x)", w,
                          (unsigned)status);
        }
        cl.pid[w] = 0;
    }
    fake_coord_stop(&cl.coord);
    sm_rpc_shutdown();
}

/* ---- client helpers ------------------------------------------------------------- */

static sm_program *prog(const char *text)
{
    sm_program *p = NULL;
    char err[512];
    ck_assert_msg(sm_program_parse(text, "test", &p, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_program_verify(p, 0, err, sizeof err) == SM_OK, "%s", err);
    return p;
}

/* A global input: small integers (exact in any summation order), or random
 * floats in [-1, 1) when random is set. */
static sm_array *global_input(sm_dtype t, const sm_shape *s, int seed, int random)
{
    sm_array *a;
    char err[256];
    ck_assert(sm_array_create(t, s, &a, err, sizeof err) == SM_OK);
    int64_t n = a->nbytes / (int64_t)sm_dtype_size(t);
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v = random ? (double)(x >> 11) / (double)(1ull << 53) * 2 - 1
                          : (double)((k * 7 + seed) % 17 - 8);
        if (t == SM_F32)
            ((float *)a->data)[k] = (float)v;
        else if (t == SM_F64)
            ((double *)a->data)[k] = v;
        else if (t == SM_I32)
            ((int32_t *)a->data)[k] = (int32_t)v;
        else
            ck_abort_msg("unsupported test dtype");
    }
    return a;
}

static int worker_of(int32_t dev)
{
    return dev / DPW;
}

/* PutShard of device dev's shard (data, nbytes, dtype t, shape s) of
 * array to the worker at ch, in chunks of SM_SVC_CHUNK. */
static sm_err upload(sm_rpc_channel *ch, uint64_t array, int32_t dev, sm_dtype t, const sm_shape *s,
                     const void *data, int64_t nbytes, char *err, size_t errlen)
{
    harness_upload_req u = {.to_worker = 1,
                            .array = {array},
                            .devices = &dev,
                            .ndevices = 1,
                            .dtype = t,
                            .shape = *s,
                            .data = data,
                            .nbytes = nbytes,
                            .chunk = SM_SVC_CHUNK,
                            .deadline_ms = CALL_MS};
    return harness_upload(ch, &u, NULL, err, errlen);
}

/* The block of device pos of global array g under spec (new array). */
static sm_array *block_of(const sm_program *p, const sm_pspec *spec, const sm_array *g, int pos)
{
    sm_sharding sh = {.mesh = p->mesh, .spec = *spec};
    sm_device_slice sl[SM_MAX_DEVICES];
    char err[256];
    ck_assert_msg(sm_sharding_indices(&sh, &g->shape, sl, err, sizeof err) == SM_OK, "%s", err);
    sm_shape bs = sm_index_shape(&sl[pos].index);
    int64_t off[SM_MAX_RANK], zero[SM_MAX_RANK] = {0};
    for (int d = 0; d < bs.rank; d++)
        off[d] = sl[pos].index.r[d].start;
    sm_array *b;
    ck_assert(sm_array_create(g->dtype, &bs, &b, err, sizeof err) == SM_OK);
    ck_assert(sm_block_copy(b->data, &bs, zero, g->data, &g->shape, off, bs.dims,
                            sm_dtype_size(g->dtype), err, sizeof err) == SM_OK);
    return b;
}

/* Uploads the block of param k of every device on a worker in mask (bit w:
 * worker w) under array id. */
static void put_param(const sm_program *p, int k, const sm_array *g, uint64_t id, unsigned mask)
{
    char err[512];
    for (int pos = 0; pos < p->mesh.ndevices; pos++) {
        int32_t dev = p->mesh.devices[pos];
        if (!(mask & (1u << worker_of(dev))))
            continue;
        sm_array *b = block_of(p, &p->params[k].spec, g, pos);
        sm_err e = upload(cl.ch[worker_of(dev)], id, dev, b->dtype, &b->shape, b->data, b->nbytes,
                          err, sizeof err);
        ck_assert_msg(e == SM_OK, "upload of array %llu to device %d: %s", (unsigned long long)id,
                      (int)dev, err);
        sm_array_free(b);
    }
}

static sm_array *fetch(uint64_t id, int32_t dev)
{
    char err[512];
    sm_svc_download_req req = {.array = {.id = {id}}, .device = dev};
    sm_svc_download_stream *st = NULL;
    sm_array *a = NULL;
    sm_err e = sm_svc_download_open(cl.ch[worker_of(dev)], 1, &req, CALL_MS, &st, err, sizeof err);
    while (!e) {
        sm_svc_chunk c;
        int end = 0;
        if ((e = sm_svc_download_recv(st, &c, &end, err, sizeof err)) || end)
            break;
        if (c.has_meta)
            ck_assert(sm_array_create(c.dtype, &c.shape, &a, err, sizeof err) == SM_OK);
        ck_assert(a && c.offset + (int64_t)c.len <= a->nbytes);
        if (c.len)
            memcpy((char *)a->data + c.offset, c.data, c.len);
    }
    sm_svc_download_free(st);
    ck_assert_msg(e == SM_OK, "GetShard of array %llu on device %d: %s", (unsigned long long)id,
                  (int)dev, err);
    return a;
}

typedef struct {
    int w;
    const sm_svc_run_job_req *req;
    sm_err e;
    int64_t bytes;
    char err[1024];
    double took;
} run_res;

static void *run_main(void *arg)
{
    run_res *r = arg;
    double t0 = now_s();
    r->e =
        sm_svc_worker_run_job(cl.ch[r->w], CALL_MS * 2, r->req, &r->bytes, r->err, sizeof r->err);
    r->took = now_s() - t0;
    return NULL;
}

static void job_req(sm_svc_run_job_req *req, sm_svc_peer *peers, sm_program *p, uint64_t job,
                    sm_array_id *in, sm_array_id *out, uint32_t deadline_ms)
{
    for (int w = 0; w < NW; w++) {
        memset(&peers[w], 0, sizeof peers[w]);
        snprintf(peers[w].address, SM_ADDR_MAX, "%.*s", SM_ADDR_MAX - 1, cl.addr[w]);
        peers[w].ndevices = DPW;
        for (int k = 0; k < DPW; k++)
            peers[w].devices[k] = w * DPW + k;
        peers[w].shm_domain = shm_mode ? 1 : 0;
    }
    *req = (sm_svc_run_job_req){.job_id = {job},
                                .program = p,
                                .ninputs = p->nparams,
                                .inputs = in,
                                .noutputs = p->nreturns,
                                .outputs = out,
                                .npeers = NW,
                                .peers = peers,
                                .deadline_ms = deadline_ms,
                                .shm_key = shm_mode ? shm_key_of(job) : 0};
}

/* Sends RunJob to the workers in mask at once; fills res[w]. */
static void run_on(const sm_svc_run_job_req *req, unsigned mask, run_res *res)
{
    pthread_t th[NW];
    for (int w = 0; w < NW; w++) {
        res[w] = (run_res){.w = w, .req = req};
        if (mask & (1u << w))
            ck_assert(pthread_create(&th[w], NULL, run_main, &res[w]) == 0);
    }
    for (int w = 0; w < NW; w++)
        if (mask & (1u << w))
            pthread_join(th[w], NULL);
}

/* Runs text on both workers over the given global inputs and checks every
 * device's output block against sm_exec_local_run; returns the output
 * array ids (base + r). */
static uint64_t run_and_check(const char *text, sm_array *const *g)
{
    char err[1024];
    sm_program *p = prog(text);
    sm_array_id in[8], out[8];
    uint64_t job = next_id++, base;
    for (int k = 0; k < p->nparams; k++) {
        in[k].v = next_id++;
        put_param(p, k, g[k], in[k].v, ~0u);
    }
    base = next_id;
    for (int r = 0; r < p->nreturns; r++)
        out[r].v = next_id++;
    sm_svc_run_job_req req;
    sm_svc_peer peers[NW];
    run_res res[NW];
    job_req(&req, peers, p, job, in, out, 30000);
    run_on(&req, (1u << NW) - 1, res);
    for (int w = 0; w < NW; w++)
        ck_assert_msg(res[w].e == SM_OK, "RunJob on worker %d: %s (%s)", w, res[w].err,
                      sm_err_name(res[w].e));
    sm_array *ref[8] = {0};
    ck_assert_msg(sm_exec_local_run(p, g, ref, NULL, err, sizeof err) == SM_OK, "%s", err);
    int64_t total = 0;
    for (int r = 0; r < p->nreturns; r++) {
        for (int pos = 0; pos < p->mesh.ndevices; pos++) {
            int32_t dev = p->mesh.devices[pos];
            sm_array *got = fetch(out[r].v, dev);
            sm_array *want = block_of(p, &p->out_specs[r], ref[r], pos);
            ck_assert_int_eq(got->dtype, want->dtype);
            ck_assert_msg(sm_shape_equal(&got->shape, &want->shape),
                          "output %d on device %d has the wrong shape", r, (int)dev);
            ck_assert_msg(!memcmp(got->data, want->data, (size_t)want->nbytes),
                          "output %d on device %d differs from the reference", r, (int)dev);
            total += got->nbytes;
            sm_array_free(got);
            sm_array_free(want);
        }
        sm_array_free(ref[r]);
    }
    ck_assert_int_eq(res[0].bytes + res[1].bytes, total);
    sm_program_free(p);
    return base;
}

#define MESH "mesh i=2 j=2 devices=[0, 2, 1, 3]\n"
#define PSUM_J                                                                                     \
    MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i', None):\n"                               \
         "    return psum(x, 'j')\n"

/* One job over global inputs made by global_input (small integers, seed
 * each), uploaded to the workers in a mask. */
typedef struct {
    sm_array *g;
    sm_program *p;
    sm_array_id in, out;
    uint64_t job;
    sm_svc_run_job_req req;
    sm_svc_peer peers[NW];
    run_res res[NW];
} one_job;

/* Parses text (one f32 input of shape s, seed 3), uploads the blocks of the
 * devices on the workers in mask and builds the RunJob request. */
static void one_job_init(one_job *j, const char *text, sm_shape s, unsigned mask,
                         uint32_t deadline_ms)
{
    j->g = global_input(SM_F32, &s, 3, 0);
    j->p = prog(text);
    j->in.v = next_id++;
    j->out.v = next_id++;
    put_param(j->p, 0, j->g, j->in.v, mask);
    j->job = next_id++;
    job_req(&j->req, j->peers, j->p, j->job, &j->in, &j->out, deadline_ms);
}

static void one_job_free(one_job *j)
{
    sm_array_free(j->g);
    sm_program_free(j->p);
}

/* Sends RunJob to worker 0 alone, in a thread the caller joins. */
static void run_start_w0(one_job *j, pthread_t *th)
{
    j->res[0] = (run_res){.w = 0, .req = &j->req};
    ck_assert(pthread_create(th, NULL, run_main, &j->res[0]) == 0);
}

/* Joined after worker 1 went away during j: worker 0's run failed
 * UNAVAILABLE naming worker 1, soon, and left nothing in /dev/shm. Frees
 * j. */
static void lost_peer_check(one_job *j)
{
    const run_res *r = &j->res[0];
    ck_assert_msg(r->e == SM_EUNAVAILABLE, "%s: %s", sm_err_name(r->e), r->err);
    ck_assert_msg(strstr(r->err, cl.addr[1]), "'%s' does not name %s", r->err, cl.addr[1]);
    ck_assert_msg(r->took < 10, "took %.1f s", r->took);
    ck_assert_int_eq(shm_left(j->job), 0);
    one_job_free(j);
}

/* ---- tests ----------------------------------------------------------------------- */

/* Programs run on both workers and checked against the in-process runner:
 * one row a program, its inputs made by global_input (small integers). */
typedef struct {
    sm_dtype t;
    sm_shape s;
    int seed;
} job_input;

static const struct {
    const char *text;
    job_input in[2]; /* p->nparams of them */
} job_cases[] = {
    /* psum, pmax, pmin, pmean */
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i', None):\n"
          "    return psum(x, 'j')\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P(None, None):\n"
          "    return psum(x, ('i', 'j'))\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: i32[8,12] @ P('i','j')) -> (P(None, None), P('i', None)):\n"
          "    return pmax(x, ('j', 'i')), pmin(x, 'j')\n",
     {{SM_I32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: f64[8,12] @ P('i','j')) -> P(None, 'j'):\n"
          "    return pmean(x, 'i')\n",
     {{SM_F64, {2, {8, 12}}, 3}}},
    /* all_gather */
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return all_gather(x, 'j')\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return all_gather(x, 'j', axis=1, tiled=True)\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: i32[8,12] @ P(('i','j'))) -> P(('i','j')):\n"
          "    return all_gather(x, ('j', 'i'), axis=0, tiled=True)\n",
     {{SM_I32, {2, {8, 12}}, 3}}},
    /* psum_scatter */
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return psum_scatter(x, 'j', scatter_dimension=1, tiled=True)\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: f32[8,4] @ P('i', None)) -> P(('i', 'j')):\n"
          "    return psum_scatter(x, ('i', 'j'), scatter_dimension=0, tiled=True)\n",
     {{SM_F32, {2, {8, 4}}, 3}}},
    /* ppermute, then a partial permutation: rank 0 of each j pair gets zeros */
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return ppermute(x, ('i', 'j'), perm=[(0, 1), (1, 2), (2, 3), (3, 0)])\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return ppermute(x, 'j', perm=[(0, 1)])\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    /* all_to_all */
    {MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
          "    return all_to_all(x, 'j', 1, 0, tiled=True)\n",
     {{SM_F32, {2, {8, 12}}, 3}}},
    {MESH "shard_map f(x: i32[8,16] @ P('i','j')) -> P('i','j'):\n"
          "    return all_to_all(x, ('i', 'j'), 1, 0, tiled=True)\n",
     {{SM_I32, {2, {8, 16}}, 3}}},
    {MESH "shard_map f(x: f32[16,8] @ P('i','j')) -> P('i','j'):\n"
          "    return all_to_all(x, ('i', 'j'), 0, 0, tiled=True)\n",
     {{SM_F32, {2, {16, 8}}, 3}}},
    {MESH "shard_map f(x: f32[4,8] @ P('i','j')) -> P('i','j'):\n"
          "    return all_to_all(x, 'j', 0, 0)\n",
     {{SM_F32, {2, {4, 8}}, 3}}},
    /* matmul_basic */
    {MESH "shard_map matmul_basic(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ "
          "P('j', None)) -> P('i', None):\n"
          "    z = dot(a, b)\n"
          "    return psum(z, 'j')\n",
     {{SM_F32, {2, {8, 16}}, 1}, {SM_F32, {2, {16, 32}}, 2}}},
    /* other device orders: worker 1 holding rank 0, and a worker holding
     * ranks that are not contiguous (0 and 3 of a 4-device axis) */
    {"mesh i=2 j=2 devices=[2, 0, 3, 1]\n"
     "shard_map f(x: f32[8,16] @ P('i','j')) -> (P(None, None), P('i', 'j')):\n"
     "    return psum(x, ('i', 'j')), all_to_all(x, ('j', 'i'), 1, 0, tiled=True)\n",
     {{SM_F32, {2, {8, 16}}, 3}}},
    {"mesh k=4 devices=[0, 2, 3, 1]\n"
     "shard_map f(x: f32[16,8] @ P('k')) -> (P('k'), P('k'), P('k'), P(None)):\n"
     "    a = psum_scatter(x, 'k', scatter_dimension=0, tiled=True)\n"
     "    b = all_to_all(x, 'k', 0, 1, tiled=True)\n"
     "    c = ppermute(x, 'k', perm=[(0, 3), (3, 1), (1, 2), (2, 0)])\n"
     "    return a, b, c, psum(x, 'k')\n",
     {{SM_F32, {2, {16, 8}}, 3}}},
    /* blocks whose element count does not split evenly over the workers
     * (15 elements: parts of 7 and 8), in every reduction and dtype */
    {MESH "shard_map f(x: f32[6,10] @ P('i','j')) -> (P('i', None), P('i', None)):\n"
          "    return psum(x, 'j'), pmax(x, 'j')\n",
     {{SM_F32, {2, {6, 10}}, 3}}},
    {MESH "shard_map f(x: i32[6,10] @ P('i','j')) -> (P('i', None), P(None, None)):\n"
          "    return pmin(x, 'j'), pmean(x, ('j', 'i'))\n",
     {{SM_I32, {2, {6, 10}}, 3}}},
    {MESH "shard_map f(x: f64[6,10] @ P('i','j')) -> P(None, None):\n"
          "    return psum(x, ('j', 'i'))\n",
     {{SM_F64, {2, {6, 10}}, 3}}},
    /* blocks of 8 MiB: every blob crosses in several chunks */
    {MESH "shard_map f(x: f32[2048,4096] @ P('i','j')) -> (P('i', None), P('i', 'j')):\n"
          "    return psum(x, 'j'), ppermute(x, 'j', perm=[(0, 1), (1, 0)])\n",
     {{SM_F32, {2, {2048, 4096}}, 3}}},
    /* 8 MiB blocks of an odd element count: the parts split a chunk */
    {MESH "shard_map f(x: f32[2046,4094] @ P('i','j')) -> P(None, None):\n"
          "    return psum(x, ('j', 'i'))\n",
     {{SM_F32, {2, {2046, 4094}}, 3}}},
};

#define NJOB_CASES ((int)(sizeof job_cases / sizeof job_cases[0]))

START_TEST(test_job_case)
{
    if (cl.skip)
        return;
    const job_input *in = job_cases[_i].in;
    int nin = in[1].s.rank ? 2 : 1;
    sm_array *g[2] = {0};
    for (int k = 0; k < nin; k++)
        g[k] = global_input(in[k].t, &in[k].s, in[k].seed, 0);
    run_and_check(job_cases[_i].text, g);
    for (int k = 0; k < nin; k++)
        sm_array_free(g[k]);
}
END_TEST

/* Random floats: the same bits on every run and on every group member. */
START_TEST(test_deterministic)
{
    if (cl.skip)
        return;
    sm_shape s = {2, {64, 96}};
    sm_array *g = global_input(SM_F32, &s, 9, 1);
    const char *text = MESH "shard_map f(x: f32[64,96] @ P('i','j')) -> P(None, None):\n"
                            "    y = x * 1.37 + 0.1\n"
                            "    return psum(y, ('i', 'j'))\n";
    sm_program *p = prog(text);
    sm_array_id in = {next_id++};
    put_param(p, 0, g, in.v, ~0u);
    sm_array *first = NULL;
    for (int run = 0; run < 3; run++) {
        sm_array_id out = {next_id++};
        sm_svc_run_job_req req;
        sm_svc_peer peers[NW];
        run_res res[NW];
        job_req(&req, peers, p, next_id++, &in, &out, 30000);
        run_on(&req, 3, res);
        for (int w = 0; w < NW; w++)
            ck_assert_msg(res[w].e == SM_OK, "%s", res[w].err);
        for (int32_t dev = 0; dev < NW * DPW; dev++) {
            sm_array *a = fetch(out.v, dev);
            if (!first)
                first = a;
            else {
                ck_assert_msg(!memcmp(a->data, first->data, (size_t)a->nbytes),
                              "run %d, device %d: different bits", run, (int)dev);
                sm_array_free(a);
            }
        }
    }
    sm_array_free(first);
    sm_array_free(g);
    sm_program_free(p);
}
END_TEST

/* An input missing on one worker: it names the array and device; the other
 * worker is told to cancel and does not wait for its deadline. */
START_TEST(test_missing_input)
{
    if (cl.skip)
        return;
    one_job j;
    one_job_init(&j, PSUM_J, (sm_shape){2, {8, 12}}, 2 /* only worker 1's blocks */, 20000);
    run_res *res = j.res;
    run_on(&j.req, 3, res);
    ck_assert_msg(res[0].e == SM_ENOTFOUND, "%s: %s", sm_err_name(res[0].e), res[0].err);
    char want[64];
    snprintf(want, sizeof want, "array %llu", (unsigned long long)j.in.v);
    ck_assert_msg(strstr(res[0].err, want) && strstr(res[0].err, "device 0"), "%s", res[0].err);
    ck_assert_msg(res[1].e == SM_ECANCELLED, "%s: %s", sm_err_name(res[1].e), res[1].err);
    ck_assert_msg(res[1].took < 10, "worker 1 took %.1f s", res[1].took);
    /* nothing stored on either worker */
    char err[512];
    sm_svc_download_req dr = {.array = {.id = j.out}, .device = 2};
    sm_svc_download_stream *st;
    sm_err e = sm_svc_download_open(cl.ch[1], 1, &dr, CALL_MS, &st, err, sizeof err);
    if (!e) {
        sm_svc_chunk c;
        int end;
        e = sm_svc_download_recv(st, &c, &end, err, sizeof err);
        sm_svc_download_free(st);
    }
    ck_assert_int_eq(e, SM_ENOTFOUND);
    /* the same job id does not run again */
    run_on(&j.req, 2, res);
    ck_assert_msg(res[1].e == SM_ECANCELLED || res[1].e == SM_EEXIST, "%s", res[1].err);
    one_job_free(&j);
}
END_TEST

/* CancelJob releases a job blocked in a collective. */
START_TEST(test_cancel)
{
    if (cl.skip)
        return;
    one_job j;
    one_job_init(&j, PSUM_J, (sm_shape){2, {8, 12}}, 3, 30000);
    run_res *res = j.res;
    pthread_t th;
    run_start_w0(&j, &th);
    harness_sleep_ms(500);
    char err[512];
    ck_assert(sm_svc_worker_cancel_job(cl.ch[0], CALL_MS, (sm_job_id){j.job}, err, sizeof err) ==
              SM_OK);
    pthread_join(th, NULL);
    ck_assert_msg(res[0].e == SM_ECANCELLED, "%s: %s", sm_err_name(res[0].e), res[0].err);
    char want[64];
    snprintf(want, sizeof want, "job %llu was cancelled", (unsigned long long)j.job);
    ck_assert_msg(strstr(res[0].err, want), "%s", res[0].err);
    ck_assert_msg(res[0].took < 5, "took %.1f s", res[0].took);
    one_job_free(&j);
}
END_TEST

/* Malformed Exchange streams get their error; the worker keeps serving. */
START_TEST(test_exchange_bad_input)
{
    if (cl.skip)
        return;
    static const char data[8] = "abcdefgh";
    uint64_t sum = sm_checksum_oneshot(data, 8);
    struct {
        int64_t offset, total;
        uint64_t sum;
        int32_t dst;
        sm_err want;
    } rows[] = {
        {0, 8, 1, -1, SM_EDATALOSS},  /* checksum */
        {4, 8, 0, -1, SM_EINVAL},     /* does not start at 0 */
        {0, 4, 0, -1, SM_EINVAL},     /* more bytes than announced */
        {0, 16, 0, -1, SM_EDATALOSS}, /* ends short */
        {0, 8, 0, -2, SM_EINVAL},     /* bad dst_device */
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        char err[512] = "";
        sm_svc_coll_stream *st;
        ck_assert(sm_svc_coll_open(cl.ch[0], CALL_MS, &st, err, sizeof err) == SM_OK);
        sm_svc_coll_msg m = {.job_id = {next_id++},
                             .seq = 0,
                             .src_device = 2,
                             .dst_device = rows[k].dst,
                             .offset = rows[k].offset,
                             .data = data,
                             .len = 8,
                             .total_bytes = rows[k].total,
                             .last = 1,
                             .checksum = sum ^ rows[k].sum};
        sm_err e = sm_svc_coll_send(st, &m, err, sizeof err);
        if (!e)
            e = sm_svc_coll_finish(st, NULL, err, sizeof err);
        else
            sm_svc_coll_abort(st);
        ck_assert_msg(e == rows[k].want, "row %zu: %s: %s", k, sm_err_name(e), err);
    }
    sm_svc_worker_stats stats;
    char err[512];
    ck_assert(sm_svc_worker_stats_get(cl.ch[0], CALL_MS, &stats, err, sizeof err) == SM_OK);
}
END_TEST

/* Worker 1 dies while worker 0 waits for its data (kept last: it kills). */
START_TEST(test_dead_peer)
{
    if (cl.skip)
        return;
    one_job j;
    one_job_init(&j,
                 MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i', None):\n"
                      "    y = psum(x, 'i')\n"
                      "    return psum(y, 'j')\n",
                 (sm_shape){2, {8, 12}}, 3, 30000);
    pthread_t th;
    run_start_w0(&j, &th);
    harness_sleep_ms(700);
    if (cl.pid[1] > 0) {
        kill(cl.pid[1], SIGKILL);
        waitpid(cl.pid[1], NULL, 0);
        cl.pid[1] = 0;
    } else {
        sm_rpc_server_stop(cl.srv[1]);
    }
    pthread_join(th, NULL);
    lost_peer_check(&j);
}
END_TEST

/* Worker 0 waits for data from a live peer that never sends it (a server
 * that only answers Negotiate, holding devices 4 and 5); stopping worker 0
 * (SIGTERM, or sm_jobs_stop in process) ends the job at once and, for the
 * process, exits 0. */
START_TEST(test_shutdown_during_job)
{
    if (cl.skip)
        return;
    char err[512];
    sm_rpc_server *fake;
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
    ck_assert(sm_rpc_server_create(&o, &fake, err, sizeof err) == SM_OK);
    ck_assert(sm_svc_worker_serve(fake, NULL, NULL, "fake-peer", err, sizeof err) == SM_OK);
    ck_assert(sm_rpc_server_start(fake, err, sizeof err) == SM_OK);
    one_job j; /* worker 0's blocks: devices 0 and 1 */
    one_job_init(&j,
                 "mesh i=2 j=2 devices=[0, 4, 1, 5]\n"
                 "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
                 "    return ppermute(x, 'j', perm=[(1, 0)])\n",
                 (sm_shape){2, {8, 12}}, 1, 60000);
    snprintf(j.peers[1].address, SM_ADDR_MAX, "127.0.0.1:%d", sm_rpc_server_port(fake));
    j.peers[1].devices[0] = 4;
    j.peers[1].devices[1] = 5;
    run_res *res = j.res;
    pthread_t th;
    run_start_w0(&j, &th);
    harness_sleep_ms(1500); /* past a few probes of the live fake peer */
    double t0 = now_s();
    int proc = cl.pid[0] > 0;
    if (proc) {
        kill(cl.pid[0], SIGTERM);
        int status = 0, done = 0;
        for (int t = 0; t < 250 && !done; t++) {
            done = waitpid(cl.pid[0], &status, WNOHANG) == cl.pid[0];
            if (!done)
                harness_sleep_ms(20);
        }
        ck_assert_msg(done, "worker 0 did not exit within 5 s of SIGTERM during a job");
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x",
                      (unsigned)status);
        cl.pid[0] = 0;
    } else {
        sm_jobs_stop(cl.jobs[0]);
    }
    pthread_join(th, NULL);
    ck_assert_msg(res->e != SM_OK, "the job succeeded");
    ck_assert_msg(now_s() - t0 < 5, "RunJob returned %.1f s after the stop", now_s() - t0);
    if (!proc)
        ck_assert_msg(strstr(res->err, "shutting down"), "%s", res->err);
    sm_rpc_server_free(fake);
    one_job_free(&j);
}
END_TEST

/* ---- shared memory ---------------------------------------------------------------- */

/* The probe proves the two workers share memory only when both answer it;
 * bad names are refused; no probe segment is left either way. */
START_TEST(test_shm_probe)
{
    if (cl.skip)
        return;
    char err[512];
    ck_assert_int_eq(sm_svc_shm_prove(cl.ch[0], cl.ch[1], CALL_MS), shm_mode);
    ck_assert_int_eq(sm_svc_shm_prove(cl.ch[1], cl.ch[0], CALL_MS), shm_mode);
    ck_assert_int_eq(sm_svc_shm_prove(cl.ch[0], cl.ch[0], CALL_MS), shm_mode || cl.pid[0] <= 0);
    /* a cookie that is not in the segment does not prove anything: the
     * reader answers with what it finds */
    sm_svc_shm_probe_req rq = {.create = 1};
    sm_svc_shm_probe_reply made, seen;
    sm_err e = sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &rq, &made, err, sizeof err);
    if (!shm_mode && cl.pid[0] > 0) { /* a worker run with --transport grpc refuses */
        ck_assert_msg(e == SM_EPRECONDITION && strstr(err, "--transport grpc"), "%s: %s",
                      sm_err_name(e), err);
        return;
    }
    ck_assert_msg(e == SM_OK, "%s", err);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", made.name);
    ck_assert_msg(access(path, F_OK) == 0, "%s was not created", path);
    sm_svc_shm_probe_req rd = {0};
    snprintf(rd.read, sizeof rd.read, "%s", made.name);
    e = sm_svc_worker_shm_probe(cl.ch[1], CALL_MS, &rd, &seen, err, sizeof err);
    if (shm_mode) {
        ck_assert_msg(e == SM_OK, "%s", err);
        ck_assert(seen.cookie == made.cookie && made.cookie != 0);
        ck_assert_uint_eq(made.protocol, SM_SHM_PROTOCOL); /* both speak this build's layout */
        ck_assert_uint_eq(seen.protocol, SM_SHM_PROTOCOL);
        ck_assert_msg(access(path, F_OK) != 0, "the reader left %s", path);
    } else {
        ck_assert_msg(e == SM_EPRECONDITION && strstr(err, "--transport grpc"), "%s: %s",
                      sm_err_name(e), err);
    }
    sm_svc_shm_probe_req dr = {0};
    snprintf(dr.drop, sizeof dr.drop, "%s", made.name);
    ck_assert(sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &dr, &seen, err, sizeof err) == SM_OK);
    ck_assert_msg(access(path, F_OK) != 0, "the drop left %s", path);
    /* a segment that is gone, names outside the probe segments, no action */
    ck_assert(sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &rd, &seen, err, sizeof err) ==
              SM_ENOTFOUND);
    static const char *const bad[] = {"/etc/passwd", "/shmap-probe-../x", "/shmap-0123",
                                      "shmap-probe-00", "/shmap-probe-"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sm_svc_shm_probe_req b = {0};
        snprintf(b.read, sizeof b.read, "%s", bad[k]);
        e = sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &b, &seen, err, sizeof err);
        ck_assert_msg(e == SM_EINVAL, "read %s: %s: %s", bad[k], sm_err_name(e), err);
        memset(&b, 0, sizeof b);
        snprintf(b.drop, sizeof b.drop, "%s", bad[k]);
        e = sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &b, &seen, err, sizeof err);
        ck_assert_msg(e == SM_EINVAL, "drop %s: %s: %s", bad[k], sm_err_name(e), err);
    }
    sm_svc_shm_probe_req none = {0};
    ck_assert(sm_svc_worker_shm_probe(cl.ch[0], CALL_MS, &none, &seen, err, sizeof err) ==
              SM_EINVAL);
}
END_TEST

/* Random floats through every reduction and data movement, once over gRPC
 * and once through shared memory: the same bits on every device. In
 * process, the bytes are counted on the path taken. */
START_TEST(test_shm_same_bits)
{
    if (cl.skip)
        return;
    static const struct {
        const char *text;
        sm_shape s;
    } rows[] = {
        {MESH "shard_map f(x: f32[64,96] @ P('i','j')) -> (P('i', None), P(None, None)):\n"
              "    y = x * 1.37 + 0.1\n"
              "    return psum(y, 'j'), psum(y, ('i', 'j'))\n",
         {2, {64, 96}}},
        {MESH
         "shard_map f(x: f32[6,12] @ P('i','j')) -> (P('i', None), P('i', None), P('i','j')):\n"
         "    return pmax(x, 'j'), pmean(x, 'j'), psum_scatter(x, 'j', scatter_dimension=1, "
         "tiled=True)\n",
         {2, {6, 12}}},
        {"mesh i=2 j=2 devices=[2, 0, 3, 1]\n"
         "shard_map f(x: f32[8,16] @ P('i','j')) -> (P(None, None), P('i', 'j'), P('i', 'j'), "
         "P('i','j')):\n"
         "    return psum(x, ('i', 'j')), all_to_all(x, ('j', 'i'), 1, 0, tiled=True), "
         "all_gather(x, 'j', axis=1, tiled=True), ppermute(x, ('i', 'j'), perm=[(0, 3), (3, 1), "
         "(1, 2), (2, 0)])\n",
         {2, {8, 16}}},
        {"mesh k=4 devices=[0, 2, 3, 1]\n"
         "shard_map f(x: f32[16,8] @ P('k')) -> (P('k'), P(None)):\n"
         "    return psum_scatter(x, 'k', scatter_dimension=0, tiled=True), psum(x, 'k')\n",
         {2, {16, 8}}},
    };
    char err[512];
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        sm_array *g = global_input(SM_F32, &rows[r].s, 11 + (int)r, 1);
        sm_program *p = prog(rows[r].text);
        sm_array_id in = {next_id++}, out[2][4];
        put_param(p, 0, g, in.v, ~0u);
        uint64_t t0[SM_TRAFFIC_COUNT], t1[SM_TRAFFIC_COUNT];
        int mode = shm_mode;
        for (int m = 0; m < 2; m++) {
            shm_mode = m;
            for (int k = 0; k < p->nreturns; k++)
                out[m][k].v = next_id++;
            sm_svc_run_job_req req;
            sm_svc_peer peers[NW];
            run_res res[NW];
            job_req(&req, peers, p, next_id++, &in, out[m], 30000);
            sm_traffic_get(t0);
            run_on(&req, 3, res);
            sm_traffic_get(t1);
            for (int w = 0; w < NW; w++)
                ck_assert_msg(res[w].e == SM_OK, "row %zu, %s: %s", r, m ? "shm" : "grpc",
                              res[w].err);
            if (cl.pid[0] <= 0) { /* in process: the counters are this process's */
                ck_assert_msg((t1[SM_TRAFFIC_SHM_IN] > t0[SM_TRAFFIC_SHM_IN]) == m,
                              "row %zu, %s: %llu bytes read from shared memory", r,
                              m ? "shm" : "grpc",
                              (unsigned long long)(t1[SM_TRAFFIC_SHM_IN] - t0[SM_TRAFFIC_SHM_IN]));
                ck_assert_msg(
                    (t1[SM_TRAFFIC_COLL_OUT] > t0[SM_TRAFFIC_COLL_OUT]) == !m,
                    "row %zu, %s: %llu bytes sent over gRPC", r, m ? "shm" : "grpc",
                    (unsigned long long)(t1[SM_TRAFFIC_COLL_OUT] - t0[SM_TRAFFIC_COLL_OUT]));
            }
        }
        shm_mode = mode;
        for (int k = 0; k < p->nreturns; k++)
            for (int32_t dev = 0; dev < NW * DPW; dev++) {
                sm_array *a = fetch(out[0][k].v, dev), *b = fetch(out[1][k].v, dev);
                ck_assert_int_eq(a->nbytes, b->nbytes);
                ck_assert_msg(!memcmp(a->data, b->data, (size_t)a->nbytes),
                              "row %zu, output %d, device %d: gRPC and shared memory differ", r, k,
                              (int)dev);
                sm_array_free(a);
                sm_array_free(b);
            }
        ck_assert_int_eq(shm_left(0), 0);
        sm_program_free(p);
        sm_array_free(g);
        (void)err;
    }
}
END_TEST

/* Three jobs at once on both workers, each with its collectives through
 * its own segments (the pool hands out a file per running job, and the
 * next jobs reuse them): every result checked against the in-process
 * runner. */
START_TEST(test_shm_concurrent_jobs)
{
    if (cl.skip || !shm_mode)
        return;
    enum { NJ = 3 };
    const char *text =
        MESH "shard_map f(x: f32[64,96] @ P('i','j')) -> (P('i', None), P('i','j')):\n"
             "    y = psum(x, 'j')\n"
             "    return y, all_to_all(x, 'j', 1, 0, tiled=True)\n";
    for (int round = 0; round < 2; round++) {
        sm_array *g[NJ];
        sm_program *p[NJ];
        sm_array_id in[NJ], out[NJ][2];
        sm_svc_run_job_req req[NJ];
        sm_svc_peer peers[NJ][NW];
        run_res res[NJ][NW];
        pthread_t th[NJ][NW];
        for (int k = 0; k < NJ; k++) {
            g[k] = global_input(SM_F32, &(sm_shape){2, {64, 96}}, 20 + k, 0);
            p[k] = prog(text);
            in[k].v = next_id++;
            out[k][0].v = next_id++;
            out[k][1].v = next_id++;
            put_param(p[k], 0, g[k], in[k].v, ~0u);
            job_req(&req[k], peers[k], p[k], next_id++, &in[k], out[k], 30000);
        }
        for (int k = 0; k < NJ; k++)
            for (int w = 0; w < NW; w++) {
                res[k][w] = (run_res){.w = w, .req = &req[k]};
                ck_assert(pthread_create(&th[k][w], NULL, run_main, &res[k][w]) == 0);
            }
        for (int k = 0; k < NJ; k++)
            for (int w = 0; w < NW; w++)
                pthread_join(th[k][w], NULL);
        char err[512];
        for (int k = 0; k < NJ; k++) {
            for (int w = 0; w < NW; w++)
                ck_assert_msg(res[k][w].e == SM_OK, "job %d on worker %d: %s", k, w, res[k][w].err);
            sm_array *ref[2] = {0};
            ck_assert_msg(sm_exec_local_run(p[k], &g[k], ref, NULL, err, sizeof err) == SM_OK, "%s",
                          err);
            for (int r = 0; r < 2; r++) {
                for (int pos = 0; pos < NW * DPW; pos++) {
                    sm_array *got = fetch(out[k][r].v, p[k]->mesh.devices[pos]);
                    sm_array *want = block_of(p[k], &p[k]->out_specs[r], ref[r], pos);
                    ck_assert_msg(!memcmp(got->data, want->data, (size_t)want->nbytes),
                                  "round %d, job %d, output %d, position %d differs", round, k, r,
                                  pos);
                    sm_array_free(got);
                    sm_array_free(want);
                }
                sm_array_free(ref[r]);
            }
            sm_program_free(p[k]);
            sm_array_free(g[k]);
        }
    }
    ck_assert_int_eq(shm_left(0), 0);
}
END_TEST

/* Worker 1 waits in a collective; its segment is truncated under it (to
 * 64 KiB: its header stays) before worker 0 maps it: the first worker to
 * touch the segment fails DATA_LOSS naming it instead of going past its
 * end, the other is cancelled, and no segment of the job is left. */
START_TEST(test_shm_truncated)
{
    if (cl.skip || !shm_mode)
        return;
    one_job j;
    one_job_init(&j, PSUM_J, (sm_shape){2, {8, 12}}, 3, 30000);
    run_res *res = j.res;
    res[1] = (run_res){.w = 1, .req = &j.req};
    pthread_t th1, th0;
    ck_assert(pthread_create(&th1, NULL, run_main, &res[1]) == 0);
    char seg[128];
    snprintf(seg, sizeof seg, "/dev/shm/shmap-%016llx-1", (unsigned long long)shm_key_of(j.job));
    for (int t = 0; t < 200 && access(seg, F_OK) != 0; t++)
        harness_sleep_ms(10);
    ck_assert_msg(truncate(seg, 64 << 10) == 0, "cannot truncate %s", seg);
    run_start_w0(&j, &th0);
    pthread_join(th0, NULL);
    pthread_join(th1, NULL);
    /* whichever touches the segment first fails DATA_LOSS naming it, the
     * other is cancelled; neither faults */
    int lost = 0;
    for (int w = 0; w < NW; w++) {
        ck_assert_msg(res[w].e == SM_EDATALOSS || res[w].e == SM_ECANCELLED, "worker %d: %s: %s", w,
                      sm_err_name(res[w].e), res[w].err);
        if (res[w].e == SM_EDATALOSS) {
            ck_assert_msg(strstr(res[w].err, seg + 8), "%s does not name %s", res[w].err, seg + 8);
            lost++;
        }
        ck_assert_msg(res[w].took < 10, "worker %d took %.1f s", w, res[w].took);
    }
    ck_assert_int_ge(lost, 1);
    ck_assert_int_eq(shm_left(j.job), 0);
    one_job_free(&j);
}
END_TEST

static sm_err read_far(void *arg)
{
    const volatile char *p = arg;
    return p[512 << 10] == 7 ? SM_EEXIST : SM_OK; /* past the end once truncated */
}

/* A guarded access to a segment truncated under it is cut short with
 * DATA_LOSS (the collectives' bodies run so), not a SIGBUS that ends the
 * process; the same access before the truncation runs as usual. */
START_TEST(test_shm_guarded)
{
    char err[256], name[SM_SHM_NAME_MAX];
    snprintf(name, sizeof name, "/shmap-%016llx-79", (unsigned long long)shm_key_of(0));
    sm_shm_seg own;
    ck_assert_msg(sm_shm_seg_create(name, 1 << 20, &own, err, sizeof err) == SM_OK, "%s", err);
    ((char *)own.base)[512 << 10] = 7;
    int faulted = -1;
    ck_assert_int_eq(sm_shm_guarded(read_far, own.base, &faulted), SM_EEXIST);
    ck_assert_int_eq(faulted, 0);
    ck_assert_int_eq(ftruncate(own.fd, 4096), 0);
    for (int k = 0; k < 2; k++) { /* and again: the handler stays */
        ck_assert_int_eq(sm_shm_guarded(read_far, own.base, &faulted), SM_EDATALOSS);
        ck_assert_int_eq(faulted, 1);
    }
    sm_shm_seg_close(&own);
    sm_shm_unlink(name);
}
END_TEST

/* Segments (shm.h): a reader sees a truncation, a segment not sized yet
 * reads as absent, names outside shmap's are refused, and the sweep
 * removes what no process holds. */
START_TEST(test_shm_segments)
{
    char err[256], name[SM_SHM_NAME_MAX];
    snprintf(name, sizeof name, "/shmap-%016llx-77", (unsigned long long)shm_key_of(0));
    sm_shm_seg own, peer;
    size_t len = 1 << 20;
    ck_assert_msg(sm_shm_seg_create(name, len, &own, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_shm_seg_create(name, len, &peer, err, sizeof err), SM_EEXIST);
    ck_assert_msg(sm_shm_seg_open(name, len, &peer, err, sizeof err) == SM_OK, "%s", err);
    ((char *)own.base)[len - 1] = 42; /* one memory */
    ck_assert_int_eq(((char *)peer.base)[len - 1], 42);
    ck_assert_int_eq(sm_shm_seg_check(&peer, len, err, sizeof err), SM_OK);
    sm_shm_seg bigger;
    ck_assert_int_eq(sm_shm_seg_open(name, 2 * len, &bigger, err, sizeof err), SM_EDATALOSS);
    ck_assert_int_eq(ftruncate(own.fd, 4096), 0); /* under the reader */
    ck_assert_int_eq(sm_shm_seg_check(&peer, len, err, sizeof err), SM_EDATALOSS);
    ck_assert_msg(strstr(err, "truncated") && strstr(err, name), "%s", err);
    ck_assert_int_eq(sm_shm_seg_check(&peer, 4096, err, sizeof err), SM_OK);
    sm_shm_seg_close(&peer);
    sm_shm_seg_close(&own);
    sm_shm_unlink(name);
    ck_assert_int_eq(sm_shm_seg_open(name, len, &peer, err, sizeof err), SM_ENOTFOUND);
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600); /* created, not sized yet */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(sm_shm_seg_open(name, len, &peer, err, sizeof err), SM_ENOTFOUND);
    close(fd);
    sm_shm_unlink(name);
    static const char *const bad[] = {"/dev/shm/x", "/shmap-../../etc", "/shmap-", "/other-00",
                                      "/shmap-ABC"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(sm_shm_seg_create(bad[k], len, &own, err, sizeof err), SM_EINVAL);
        ck_assert_int_eq(sm_shm_seg_open(bad[k], len, &own, err, sizeof err), SM_EINVAL);
    }
    /* pages are reserved before they are written: more than /dev/shm holds
     * is an error (tmpfs refuses a request larger than the whole mount at
     * once, without allocating) */
    struct statvfs vs;
    ck_assert_int_eq(statvfs("/dev/shm", &vs), 0);
    size_t whole = (size_t)vs.f_blocks * vs.f_frsize;
    ck_assert(sm_shm_seg_create(name, whole + (4 << 20), &own, err, sizeof err) == SM_OK);
    ck_assert_int_eq(sm_shm_seg_reserve(&own, 0, 1 << 20, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_shm_seg_reserve(&own, 0, whole + (2 << 20), err, sizeof err), SM_ERESOURCE);
    ck_assert_msg(strstr(err, "no room in /dev/shm"), "%s", err);
    sm_shm_seg_close(&own);
    sm_shm_unlink(name);
    /* the sweep removes a segment nobody holds, not one a process maps */
    char gone[SM_SHM_NAME_MAX];
    snprintf(gone, sizeof gone, "/shmap-%016llx-78", (unsigned long long)shm_key_of(0));
    ck_assert(sm_shm_seg_create(name, len, &own, err, sizeof err) == SM_OK);
    fd = shm_open(gone, O_CREAT | O_RDWR, 0600); /* as a killed process leaves it */
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_ge(sm_shm_sweep(0), 1);
    ck_assert_int_eq(shm_left(0), 1);
    ck_assert_int_eq(sm_shm_seg_open(name, len, &peer, err, sizeof err), SM_OK);
    sm_shm_seg_close(&peer);
    sm_shm_seg_close(&own);
    ck_assert_int_ge(sm_shm_sweep(0), 1);
    ck_assert_int_eq(shm_left(0), 0);
}
END_TEST

/* Worker 1 waits in a collective (its segment made, worker 0 not started)
 * and is killed (-9): its segment's name is left, as after any crash.
 * Worker 0 then runs the job: it fails UNAVAILABLE naming worker 1 within
 * seconds, and no segment of the job is left. Kills worker 1: kept last. */
START_TEST(test_shm_killed_in_collective)
{
    if (cl.skip || cl.pid[1] <= 0)
        return;
    one_job j;
    one_job_init(&j, PSUM_J, (sm_shape){2, {8, 12}}, 3, 30000);
    run_res *res = j.res;
    res[1] = (run_res){.w = 1, .req = &j.req};
    pthread_t th;
    ck_assert(pthread_create(&th, NULL, run_main, &res[1]) == 0);
    char seg[128];
    snprintf(seg, sizeof seg, "/dev/shm/shmap-%016llx-1", (unsigned long long)shm_key_of(j.job));
    for (int t = 0; t < 200 && access(seg, F_OK) != 0; t++)
        harness_sleep_ms(10);
    ck_assert_msg(access(seg, F_OK) == 0, "worker 1 made no segment %s", seg);
    harness_sleep_ms(300); /* its devices wait for worker 0 */
    kill(cl.pid[1], SIGKILL);
    waitpid(cl.pid[1], NULL, 0);
    cl.pid[1] = 0;
    pthread_join(th, NULL);
    ck_assert_msg(res[1].e == SM_EUNAVAILABLE, "%s: %s", sm_err_name(res[1].e), res[1].err);
    ck_assert_msg(access(seg, F_OK) == 0, "%s went with its worker", seg);
    run_start_w0(&j, &th);
    pthread_join(th, NULL);
    lost_peer_check(&j);
}
END_TEST

/* ---- the mailbox's reassembly checks, table-driven -------------------------------- */

START_TEST(test_mailbox_rx)
{
    static const char data[10] = "0123456789";
    uint64_t sum = sm_checksum_oneshot(data, 10);
    struct {
        int64_t off2, total;
        uint64_t sum;
        int32_t src2;
        sm_err want;
    } rows[] = {
        {5, 10, 0, 7, SM_OK},        /* good */
        {6, 10, 0, 7, SM_EINVAL},    /* gap */
        {5, 10, 1, 7, SM_EDATALOSS}, /* bad checksum */
        {5, 10, 0, 8, SM_EINVAL},    /* device changes mid-blob */
        {5, 9, 0, 7, SM_EINVAL},     /* overrun */
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        sm_mailbox_rx rx = {0};
        sm_mailbox_blob *b = NULL;
        sm_job_id job;
        int done = 0;
        char err[256];
        sm_svc_coll_msg m = {.job_id = {5},
                             .seq = 2,
                             .src_device = 7,
                             .dst_device = -1,
                             .data = data,
                             .len = 5,
                             .total_bytes = rows[k].total};
        sm_err e = sm_mailbox_rx_feed(&rx, &m, NULL, &job, &b, &done, err, sizeof err);
        if (!e) {
            char *own = malloc(5); /* the second chunk is handed over, not copied */
            memcpy(own, data + 5, 5);
            m = (sm_svc_coll_msg){.job_id = {5},
                                  .seq = 2,
                                  .src_device = rows[k].src2,
                                  .dst_device = -1,
                                  .offset = rows[k].off2,
                                  .data = own,
                                  .len = 5,
                                  .total_bytes = rows[k].total,
                                  .last = 1,
                                  .checksum = sum ^ rows[k].sum};
            e = sm_mailbox_rx_feed(&rx, &m, own, &job, &b, &done, err, sizeof err);
        }
        ck_assert_msg(e == rows[k].want, "row %zu: %s (%s)", k, sm_err_name(e), err);
        if (!e) {
            char got10[10];
            ck_assert(done && b && b->len == 10 && b->npieces == 2);
            sm_mailbox_blob_copy(b, 0, got10, 10);
            ck_assert(!memcmp(got10, data, 10));
            sm_mailbox_blob_copy(b, 3, got10, 4); /* across the two pieces */
            ck_assert(!memcmp(got10, data + 3, 4));
            ck_assert(sm_mailbox_blob_aligned(b, 5) && !sm_mailbox_blob_aligned(b, 2));
            sm_mailbox *box;
            struct timespec dl;
            clock_gettime(CLOCK_MONOTONIC, &dl);
            ck_assert(sm_mailbox_create(NULL, 0, &box, err, sizeof err) == SM_OK);
            ck_assert(sm_mailbox_put(box, b, err, sizeof err) == SM_OK);
            sm_mailbox_blob *got;
            ck_assert_int_eq(sm_mailbox_take(box, 2, 7, 3, 1, &dl, &got, err, sizeof err),
                             SM_ETIMEOUT); /* another destination */
            ck_assert(sm_mailbox_take(box, 2, 7, -1, 1, &dl, &got, err, sizeof err) == SM_OK);
            ck_assert_int_eq(sm_mailbox_bytes(box), 10);
            sm_mailbox_release(box, got);
            ck_assert_int_eq(sm_mailbox_bytes(box), 0);
            ck_assert_int_eq(sm_mailbox_take(box, 2, 7, -1, 1, &dl, &got, err, sizeof err),
                             SM_ETIMEOUT);
            sm_mailbox_abort(box, SM_ECANCELLED, "job 5 was cancelled");
            ck_assert_int_eq(sm_mailbox_take(box, 2, 7, -1, 1, &dl, &got, err, sizeof err),
                             SM_ECANCELLED);
            sm_mailbox_free(box);
        }
        sm_mailbox_rx_end(&rx);
    }
}
END_TEST

/* A blob sent in one-byte chunks is refused once it has more pieces than
 * its size allows, before its end. */
START_TEST(test_mailbox_rx_tiny_chunks)
{
    enum { TOTAL = 4096 };
    static char data[TOTAL];
    sm_mailbox_rx rx = {0};
    sm_mailbox_blob *b = NULL;
    sm_job_id job;
    int done = 0;
    char err[256] = "";
    sm_err e = SM_OK;
    int64_t k = 0;
    for (; k < TOTAL && !e; k++) {
        sm_svc_coll_msg m = {.job_id = {5},
                             .seq = 3,
                             .src_device = 1,
                             .dst_device = -1,
                             .offset = k,
                             .data = data + k,
                             .len = 1,
                             .total_bytes = TOTAL};
        e = sm_mailbox_rx_feed(&rx, &m, NULL, &job, &b, &done, err, sizeof err);
    }
    ck_assert_msg(e == SM_EINVAL && strstr(err, "chunks"), "%s: %s", sm_err_name(e), err);
    ck_assert_int_eq(k, SM_MAILBOX_MAX_PIECES + TOTAL / SM_MAILBOX_PIECE_BYTES + 1);
    ck_assert(!done && !b);
    sm_mailbox_rx_end(&rx);
}
END_TEST

/* Feeds a blob of len bytes (seq) to rx, into box, in chunks of chunk
 * bytes, stopping after `upto` chunks (all when < 0); returns the first
 * error, and the completed blob in *out. */
static sm_err feed_blob(sm_mailbox_rx *rx, sm_mailbox *box, uint32_t seq, int64_t len,
                        int64_t chunk, int upto, sm_mailbox_blob **out, char *err, size_t errlen)
{
    static char data[4096];
    uint64_t sum = sm_checksum_oneshot(data, (size_t)len);
    sm_job_id job;
    int done = 0;
    *out = NULL;
    rx->box = box;
    for (int64_t off = 0, k = 0; off < len && (upto < 0 || k < upto); off += chunk, k++) {
        int64_t n = len - off < chunk ? len - off : chunk;
        sm_svc_coll_msg m = {.job_id = {9},
                             .seq = seq,
                             .src_device = 1,
                             .dst_device = -1,
                             .offset = off,
                             .data = data + off,
                             .len = (size_t)n,
                             .total_bytes = len,
                             .last = off + n == len,
                             .checksum = sum};
        sm_err e = sm_mailbox_rx_feed(rx, &m, NULL, &job, out, &done, err, errlen);
        if (e)
            return e;
    }
    return SM_OK;
}

/* Capped mailboxes (jobs not started yet): a blob past a mailbox's cap or
 * the budget they share is refused at its first chunk; a stream that stops
 * part-way, a discarded blob and an uncapped mailbox give their bytes back. */
START_TEST(test_mailbox_pending_budget)
{
    char err[512];
    sm_mailbox *a, *b;
    sm_mailbox_blob *blob;
    sm_mailbox_budget *budget;
    ck_assert(sm_mailbox_budget_create(1500, &budget, err, sizeof err) == SM_OK);
    ck_assert(sm_mailbox_create(budget, 1000, &a, err, sizeof err) == SM_OK);
    ck_assert(sm_mailbox_create(budget, 1000, &b, err, sizeof err) == SM_OK);
    sm_mailbox_rx rx = {0};

    /* past a's cap: refused at the first chunk */
    sm_err e = feed_blob(&rx, a, 1, 1200, 100, 1, &blob, err, sizeof err);
    ck_assert_msg(e == SM_ERESOURCE && strstr(err, "exceeds the 1000 bytes"), "%s", err);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 0);
    sm_mailbox_rx_end(&rx);
    /* 800 bytes into a: counted from the first chunk, held once put */
    ck_assert(feed_blob(&rx, a, 2, 800, 400, 1, &blob, err, sizeof err) == SM_OK);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    ck_assert(feed_blob(&rx, a, 2, 800, 800, -1, &blob, err, sizeof err) == SM_EINVAL);
    sm_mailbox_rx_end(&rx); /* the stream broke off: given back */
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 0);
    ck_assert(feed_blob(&rx, a, 2, 800, 400, -1, &blob, err, sizeof err) == SM_OK && blob);
    ck_assert(sm_mailbox_put(a, blob, err, sizeof err) == SM_OK);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    ck_assert_int_eq(sm_mailbox_bytes(a), 800);
    /* 800 more into b: within b's cap, past the shared budget, at once */
    e = feed_blob(&rx, b, 3, 800, 400, 1, &blob, err, sizeof err);
    ck_assert_msg(e == SM_ERESOURCE && strstr(err, "all jobs that have not started"), "%s", err);
    sm_mailbox_rx_end(&rx);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    /* a complete blob discarded (its job ended) gives its bytes back */
    ck_assert(feed_blob(&rx, b, 4, 500, 500, -1, &blob, err, sizeof err) == SM_OK && blob);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 1300);
    sm_mailbox_discard(b, blob);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    /* a starts: out of the budget, so b's 800 fit */
    sm_mailbox_set_max(a, 0);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 0);
    ck_assert(feed_blob(&rx, b, 3, 800, 400, -1, &blob, err, sizeof err) == SM_OK && blob);
    ck_assert(sm_mailbox_put(b, blob, err, sizeof err) == SM_OK);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    /* a, uncapped, takes anything */
    ck_assert(feed_blob(&rx, a, 5, 3000, 1000, -1, &blob, err, sizeof err) == SM_OK && blob);
    ck_assert(sm_mailbox_put(a, blob, err, sizeof err) == SM_OK);
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 800);
    sm_mailbox_free(b); /* a pending job dropped */
    ck_assert_int_eq(sm_mailbox_budget_used(budget), 0);
    sm_mailbox_free(a);
    sm_mailbox_rx_end(&rx);
    sm_mailbox_budget_free(budget);
}
END_TEST

/* A blob whose destination was offered is written straight into it, in
 * chunks; an offer of another size is ignored; a withdrawn offer stops the
 * stream part-way, with nothing written after; a bad checksum still fails. */
START_TEST(test_mailbox_rx_direct)
{
    static const char data[12] = "abcdefghijkl";
    uint64_t sum = sm_checksum_oneshot(data, 12);
    struct {
        int64_t offer;   /* bytes offered (0: none) */
        int withdraw;    /* withdraw after the first chunk */
        uint64_t badsum; /* xor-ed into the checksum */
        sm_err want;
        int direct;
    } rows[] = {
        {12, 0, 0, SM_OK, 1}, /* received in place */
        {0, 0, 0, SM_OK, 0},  /* no offer: pieces */
        {11, 0, 0, SM_OK, 0}, /* an offer of another size: pieces */
        {12, 1, 0, SM_ECANCELLED, 1}, {12, 0, 1, SM_EDATALOSS, 1},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        char buf[13], err[256] = "";
        memset(buf, '.', sizeof buf);
        sm_mailbox *box;
        ck_assert(sm_mailbox_create(NULL, 0, &box, err, sizeof err) == SM_OK);
        if (rows[k].offer)
            ck_assert(sm_mailbox_expect(box, 4, 1, -1, buf, rows[k].offer) == SM_OK);
        ck_assert(sm_mailbox_expect(box, 4, 1, -1, buf, 12) == (rows[k].offer ? SM_EEXIST : SM_OK));
        if (!rows[k].offer)
            sm_mailbox_unexpect(box, 4, 1, -1);
        sm_mailbox_rx rx = {.box = box};
        sm_mailbox_blob *b = NULL;
        sm_job_id job;
        int done = 0;
        sm_err e = SM_OK;
        for (int64_t off = 0; off < 12 && !e; off += 4) {
            if (off == 4 && rows[k].withdraw)
                sm_mailbox_unexpect(box, 4, 1, -1);
            sm_svc_coll_msg m = {.job_id = {9},
                                 .seq = 4,
                                 .src_device = 1,
                                 .dst_device = -1,
                                 .offset = off,
                                 .data = data + off,
                                 .len = 4,
                                 .total_bytes = 12,
                                 .last = off == 8,
                                 .checksum = off == 8 ? sum ^ rows[k].badsum : 0};
            e = sm_mailbox_rx_feed(&rx, &m, NULL, &job, &b, &done, err, sizeof err);
        }
        ck_assert_msg(e == rows[k].want, "row %zu: %s (%s)", k, sm_err_name(e), err);
        ck_assert(!memcmp(
            buf, rows[k].direct ? (rows[k].withdraw ? "abcd........" : data) : "............", 12));
        ck_assert_int_eq(buf[12], '.');
        if (!e) {
            char got[12];
            ck_assert(done && b->len == 12 && b->direct == rows[k].direct);
            ck_assert(!rows[k].direct || (b->npieces == 1 && b->pieces[0].data == buf));
            ck_assert(sm_mailbox_put(box, b, err, sizeof err) == SM_OK);
            struct timespec dl;
            clock_gettime(CLOCK_MONOTONIC, &dl);
            ck_assert(sm_mailbox_take(box, 4, 1, -1, 1, &dl, &b, err, sizeof err) == SM_OK);
            sm_mailbox_blob_copy(b, 0, rows[k].direct ? buf : got, 12); /* in place: no copy */
            ck_assert(!memcmp(rows[k].direct ? buf : got, data, 12));
            sm_mailbox_release(box, b);
        }
        sm_mailbox_rx_end(&rx);
        sm_mailbox_unexpect(box, 4, 1, -1);
        sm_mailbox_free(box);
    }
}
END_TEST

/* A transport that lets go of the chunks sent without a copy only 50 ms
 * after the stream ended, from another thread (as gRPC may); its send
 * fails at chunk fail_at (-1: never). */
typedef struct {
    sm_svc_coll_msg held[8];
    int nheld, fail_at, released;
    pthread_mutex_t mu;
} late_tr;

static sm_err late_open(void *user, const char *address, int timeout_ms, void **stream, char *err,
                        size_t errlen)
{
    *stream = user;
    return SM_OK;
}

static sm_err late_send(void *stream, const sm_svc_coll_msg *m, char *err, size_t errlen)
{
    late_tr *t = stream;
    ck_assert(m->release && t->nheld < 8);
    t->held[t->nheld++] = *m; /* released later, also when failing */
    if (t->nheld - 1 == t->fail_at)
        return sm_fail(err, errlen, SM_EUNAVAILABLE, "connection reset");
    return SM_OK;
}

static void *late_release(void *arg)
{
    late_tr *t = arg;
    usleep(50000);
    pthread_mutex_lock(&t->mu);
    for (int k = 0; k < t->nheld; k++)
        t->held[k].release(t->held[k].release_arg);
    t->released = 1;
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static sm_err late_finish(void *stream, char *err, size_t errlen)
{
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_release, stream), 0);
    pthread_detach(th);
    return SM_OK;
}

static void late_abort(void *stream)
{
    late_finish(stream, NULL, 0);
}

/* sm_comm_grpc_send_blob returns only once the transport let go of every
 * chunk, whether the stream succeeded or failed. */
START_TEST(test_send_blob_waits_release)
{
    static const sm_comm_grpc_transport tr = {
        .open = late_open, .send = late_send, .finish = late_finish, .abort = late_abort};
    static char block[3 * SM_SVC_CHUNK / 2];
    const sm_comm_grpc_seg seg = {block, sizeof block};
    const int fail_at[] = {-1, 0, 1};
    for (size_t k = 0; k < sizeof fail_at / sizeof fail_at[0]; k++) {
        late_tr t = {.fail_at = fail_at[k]};
        pthread_mutex_init(&t.mu, NULL);
        sm_svc_coll_msg hdr = {.job_id = {1}, .seq = 1, .src_device = 0, .dst_device = -1};
        char err[256] = "";
        sm_err e = sm_comm_grpc_send_blob(&tr, &t, "w", 1000, &hdr, &seg, 1, err, sizeof err);
        ck_assert_int_eq(e, fail_at[k] < 0 ? SM_OK : SM_EUNAVAILABLE);
        ck_assert_int_eq(t.nheld, fail_at[k] < 0 ? 2 : fail_at[k] + 1);
        pthread_mutex_lock(&t.mu);
        ck_assert_msg(t.released, "row %zu: returned before the release", k);
        pthread_mutex_unlock(&t.mu);
        pthread_mutex_destroy(&t.mu);
    }
}
END_TEST

/* ---- comm_grpc across three workers in this process, without gRPC ------------------ */

#define FN_WORKERS 3

typedef struct {
    sm_mailbox *box[FN_WORKERS];
    char addr[FN_WORKERS][16];
} fake_net;

typedef struct {
    sm_mailbox *box;
    sm_mailbox_rx rx;
    int nmsg;
    sm_svc_coll_msg *held; /* sent without a copy: released at the stream's end */
    int nheld;
} fake_stream;

static sm_err fn_open(void *user, const char *address, int timeout_ms, void **stream, char *err,
                      size_t errlen)
{
    fake_net *n = user;
    for (int w = 0; w < FN_WORKERS; w++) {
        if (!strcmp(n->addr[w], address)) {
            fake_stream *st = calloc(1, sizeof *st);
            st->box = n->box[w];
            *stream = st;
            return SM_OK;
        }
    }
    return sm_fail(err, errlen, SM_EUNAVAILABLE, "no worker at %s", address);
}

/* Feeds bytes [off, off + len) of m as one message (the last part keeps
 * m's last flag and checksum), copied as the Exchange handler copies them
 * from the network: into an offered destination or a piece of its own. */
static sm_err fn_feed(fake_stream *st, const sm_svc_coll_msg *m, size_t off, size_t len, int last,
                      char *err, size_t errlen)
{
    sm_mailbox_blob *b;
    sm_job_id job;
    int done;
    sm_svc_coll_msg mm = *m;
    mm.data = len ? (const char *)m->data + off : NULL;
    mm.len = len;
    mm.offset = m->offset + (int64_t)off;
    mm.last = last && m->last;
    mm.checksum = mm.last ? m->checksum : 0;
    st->rx.box = st->box; /* blobs may go straight to offered destinations */
    sm_err e = sm_mailbox_rx_feed(&st->rx, &mm, NULL, &job, &b, &done, err, errlen);
    if (!e && done)
        e = sm_mailbox_put(st->box, b, err, errlen);
    return e;
}

/* Splits every message in two at a multiple of 8 bytes that changes from
 * message to message, so that blobs of one collective arrive in pieces of
 * different layouts. */
static sm_err fn_send(void *stream, const sm_svc_coll_msg *m, char *err, size_t errlen)
{
    fake_stream *st = stream;
    ck_assert_int_le(m->len, SM_SVC_CHUNK);
    size_t cut = 8 * (size_t)(1 + st->nmsg++ % 5);
    if (m->release) {
        st->held = realloc(st->held, (size_t)(st->nheld + 1) * sizeof *st->held);
        st->held[st->nheld++] = *m;
    }
    if (m->len <= cut)
        return fn_feed(st, m, 0, m->len, 1, err, errlen);
    sm_err e = fn_feed(st, m, 0, cut, 0, err, errlen);
    return e ? e : fn_feed(st, m, cut, m->len - cut, 1, err, errlen);
}

static sm_err fn_finish(void *stream, char *err, size_t errlen)
{
    fake_stream *st = stream;
    sm_err e = st->rx.cur ? sm_fail(err, errlen, SM_EDATALOSS, "stream ended mid-blob") : SM_OK;
    sm_mailbox_rx_end(&st->rx);
    for (int k = 0; k < st->nheld; k++)
        st->held[k].release(st->held[k].release_arg);
    free(st->held);
    free(st);
    return e;
}

static void fn_abort(void *stream)
{
    fn_finish(stream, NULL, 0);
}

static sm_err fn_probe(void *user, const char *address, int timeout_ms, char *err, size_t errlen)
{
    return SM_OK;
}

static const sm_comm_grpc_transport fn_tr = {
    .open = fn_open, .send = fn_send, .finish = fn_finish, .abort = fn_abort, .probe = fn_probe};

typedef struct {
    const sm_exec_plan *plan;
    sm_comm_grpc *comm;
    int pos;
    sm_array *in;
    sm_array *out[8];
    sm_err e;
    char err[512];
} fn_dev;

static void *fn_dev_main(void *arg)
{
    fn_dev *d = arg;
    d->e = sm_exec_run_plan(d->plan, d->pos, &sm_comm_grpc_ops, d->comm, NULL, &d->in, d->out,
                            d->err, sizeof d->err);
    return NULL;
}

/* Runs the three-worker program of test_comm_three_workers on input g
 * with the comms of three in-process workers (shm: all in shared-memory
 * domain 1, segments named after key); out[pos][r] gets every output. */
static void three_workers_run(const sm_program *p, const sm_array *g, int shm, uint64_t key,
                              sm_array *out[6][8])
{
    char err[512];
    fake_net net;
    sm_svc_peer peers[FN_WORKERS];
    int pos_worker[6];
    uint32_t domain[FN_WORKERS];
    sm_comm_grpc *comm[FN_WORKERS];
    for (int w = 0; w < FN_WORKERS; w++) {
        snprintf(net.addr[w], sizeof net.addr[w], "w%d", w);
        ck_assert(sm_mailbox_create(NULL, 0, &net.box[w], err, sizeof err) == SM_OK);
        memset(&peers[w], 0, sizeof peers[w]);
        snprintf(peers[w].address, SM_ADDR_MAX, "%s", net.addr[w]);
        peers[w].ndevices = 2;
        peers[w].devices[0] = 2 * w;
        peers[w].devices[1] = 2 * w + 1;
        domain[w] = shm ? 1 : 0;
    }
    for (int pos = 0; pos < 6; pos++)
        pos_worker[pos] = p->mesh.devices[pos] / 2;
    for (int w = 0; w < FN_WORKERS; w++) {
        sm_comm_grpc_config cc = {.job = {77},
                                  .mesh = &p->mesh,
                                  .nworkers = FN_WORKERS,
                                  .workers = peers,
                                  .pos_worker = pos_worker,
                                  .self = w,
                                  .box = net.box[w],
                                  .tr = &fn_tr,
                                  .tr_user = &net,
                                  .shm_domain = domain,
                                  .shm_key = key};
        clock_gettime(CLOCK_MONOTONIC, &cc.deadline);
        cc.deadline.tv_sec += 20;
        ck_assert(sm_comm_grpc_create(&cc, &comm[w], err, sizeof err) == SM_OK);
    }
    sm_exec_plan *plan;
    ck_assert(sm_exec_plan_create(p, &plan, err, sizeof err) == SM_OK);
    fn_dev devs[6];
    pthread_t th[6];
    uint64_t t0[SM_TRAFFIC_COUNT], t1[SM_TRAFFIC_COUNT];
    sm_traffic_get(t0);
    for (int pos = 0; pos < 6; pos++) {
        devs[pos] = (fn_dev){.plan = plan, .comm = comm[pos_worker[pos]], .pos = pos};
        devs[pos].in = block_of(p, &p->params[0].spec, g, pos);
        ck_assert(pthread_create(&th[pos], NULL, fn_dev_main, &devs[pos]) == 0);
    }
    for (int pos = 0; pos < 6; pos++)
        pthread_join(th[pos], NULL);
    sm_traffic_get(t1);
    ck_assert_msg((t1[SM_TRAFFIC_SHM_IN] > t0[SM_TRAFFIC_SHM_IN]) == shm,
                  "%llu bytes read from shared memory",
                  (unsigned long long)(t1[SM_TRAFFIC_SHM_IN] - t0[SM_TRAFFIC_SHM_IN]));
    for (int pos = 0; pos < 6; pos++) {
        ck_assert_msg(devs[pos].e == SM_OK, "position %d: %s", pos, devs[pos].err);
        for (int r = 0; r < p->nreturns; r++)
            out[pos][r] = devs[pos].out[r];
        sm_array_free(devs[pos].in);
    }
    for (int w = 0; w < FN_WORKERS; w++) {
        ck_assert_int_eq(sm_mailbox_bytes(net.box[w]), 0); /* every blob consumed */
        sm_comm_grpc_free(comm[w]);
        sm_mailbox_free(net.box[w]);
    }
    sm_exec_plan_free(plan);
}

/* Six devices on three workers holding ranks {0,3}, {1,4}, {2,5}: every
 * collective combines three partials and sends non-contiguous chunks.
 * Small integers, checked against the in-process runner, over gRPC and
 * through shared memory; then random floats, the same bits on both. */
START_TEST(test_comm_three_workers)
{
    char err[512];
    sm_program *p = prog("mesh x=6 devices=[0, 2, 4, 1, 3, 5]\n"
                         "shard_map f(v: f32[12,12] @ P('x')) -> "
                         "(P(None), P('x'), P('x'), P('x'), P('x'), P(None)):\n"
                         "    a = psum(v, 'x')\n"
                         "    b = all_gather(v, 'x', tiled=True)\n"
                         "    c = psum_scatter(v, 'x', scatter_dimension=1, tiled=True)\n"
                         "    d = all_to_all(v, 'x', 1, 0, tiled=True)\n"
                         "    e = ppermute(v, 'x', perm=[(0, 5), (5, 1), (1, 4), (4, 2), (2, 3), "
                         "(3, 0)])\n"
                         "    return a, b, c, d, e, pmax(v, 'x')\n");
    for (int random = 0; random < 2; random++) {
        sm_array *g = global_input(SM_F32, &(sm_shape){2, {12, 12}}, 5, random);
        sm_array *out[2][6][8];
        for (int shm = 0; shm < 2; shm++)
            three_workers_run(p, g, shm, shm_key_of(900 + (uint64_t)random), out[shm]);
        sm_array *ref[8] = {0};
        ck_assert_msg(sm_exec_local_run(p, &g, ref, NULL, err, sizeof err) == SM_OK, "%s", err);
        for (int pos = 0; pos < 6; pos++)
            for (int r = 0; r < p->nreturns; r++) {
                sm_array *want = block_of(p, &p->out_specs[r], ref[r], pos);
                for (int shm = 0; shm < 2; shm++) {
                    const sm_array *got = out[shm][pos][r];
                    ck_assert(sm_shape_equal(&got->shape, &want->shape));
                    if (!random) /* exact in any order */
                        ck_assert_msg(!memcmp(got->data, want->data, (size_t)want->nbytes),
                                      "output %d at position %d differs (%s)", r, pos,
                                      shm ? "shm" : "grpc");
                }
                ck_assert_msg(
                    !memcmp(out[0][pos][r]->data, out[1][pos][r]->data, (size_t)want->nbytes),
                    "output %d at position %d: gRPC and shared memory differ", r, pos);
                sm_array_free(want);
                sm_array_free(out[0][pos][r]);
                sm_array_free(out[1][pos][r]);
            }
        for (int r = 0; r < p->nreturns; r++)
            sm_array_free(ref[r]);
        sm_array_free(g);
    }
    ck_assert_int_eq(shm_left(0), 0);
    sm_program_free(p);
}
END_TEST

/* More jobs than the table keeps (SM_JOBS_MAX): the entries of ended jobs
 * make room for new ones, every job runs, and a job id just used is still
 * refused. */
START_TEST(test_many_jobs)
{
    if (cl.skip)
        return;
    sm_shape s = {2, {8, 12}};
    sm_array *g = global_input(SM_F32, &s, 5, 0);
    sm_program *p = prog(MESH "shard_map f(x: f32[8,12] @ P('i','j')) -> P('i','j'):\n"
                              "    return x * 2.0 + 1.0\n");
    sm_array_id in = {next_id++}, out = {0};
    put_param(p, 0, g, in.v, ~0u);
    sm_svc_run_job_req req;
    sm_svc_peer peers[NW];
    run_res res[NW];
    uint64_t job = 0;
    char err[512];
    for (int n = 0; n < SM_JOBS_MAX + 1000; n++) {
        out.v = next_id++;
        job = next_id++;
        job_req(&req, peers, p, job, &in, &out, 30000);
        run_on(&req, (1u << NW) - 1, res);
        for (int w = 0; w < NW; w++)
            ck_assert_msg(res[w].e == SM_OK, "job %d on worker %d: %s", n, w, res[w].err);
        if (n + 1 < SM_JOBS_MAX + 1000) /* the last output stays, to check */
            for (int w = 0; w < NW; w++) {
                int32_t devs[DPW];
                for (int k = 0; k < DPW; k++)
                    devs[k] = w * DPW + k;
                ck_assert_msg(sm_svc_worker_free_array(cl.ch[w], CALL_MS, out, DPW, devs, err,
                                                       sizeof err) == SM_OK,
                              "%s", err);
            }
    }
    for (int32_t dev = 0; dev < NW * DPW; dev++) {
        sm_array *a = fetch(out.v, dev);
        ck_assert_int_eq(a->nbytes, 6 * 4 * 4);
        sm_array_free(a);
    }
    run_on(&req, 1, res); /* the last job again */
    ck_assert_msg(res[0].e == SM_EEXIST, "%s: %s", sm_err_name(res[0].e), res[0].err);
    sm_program_free(p);
    sm_array_free(g);
}
END_TEST

/* Adds to s the test case name of the job tests with fixture fx: first
 * (with many) test_many_jobs, which must run before the shutdown test ends
 * the workers; with killed_in_shm, a peer killed inside a shared memory
 * collective instead of a dead peer. */
/* An Assemble whose shards on one worker are made of the same pieces (a
 * replicated layout's devices) fills one and the others share its bytes;
 * shards of other pieces have bytes of their own. An upload's target
 * naming two devices stores one copy they share. In-process, so the
 * store's shards can be looked at. */
START_TEST(test_replicas_share_bytes)
{
    char err[512];
    sm_shape h = {.rank = 2, .dims = {4, 6}};
    float a[24], b[24];
    for (int k = 0; k < 24; k++) {
        a[k] = (float)k;
        b[k] = (float)(100 + k);
    }
    ck_assert_msg(upload(cl.ch[0], 950, 0, SM_F32, &h, a, sizeof a, err, sizeof err) == SM_OK, "%s",
                  err);
    ck_assert_msg(upload(cl.ch[1], 951, 2, SM_F32, &h, b, sizeof b, err, sizeof err) == SM_OK, "%s",
                  err);
    const sm_index top = {2, {{0, 4}, {0, 6}}};
    sm_svc_piece same[2] = {
        {.src_array = {950}, .src_device = 0, .src_box = top, .dst_offset = {0, 0}},
        {.src_address = cl.addr[1],
         .src_array = {951},
         .src_device = 2,
         .src_box = top,
         .dst_offset = {4, 0}}};
    sm_svc_piece other[2] = {same[1], same[0]};
    other[0].dst_offset[0] = 0;
    other[1].dst_offset[0] = 4;
    for (int swap = 0; swap < 2; swap++) {
        sm_svc_assemble_shard sh[2] = {
            {.device = 0, .shape = {2, {8, 6}}, .npieces = 2, .pieces = same},
            {.device = 1, .shape = {2, {8, 6}}, .npieces = 2, .pieces = swap ? other : same}};
        sm_svc_assemble_req req = {
            .array_id = {960 + (uint64_t)swap}, .dtype = SM_F32, .nshards = 2, .shards = sh};
        int64_t bytes = 0;
        ck_assert_msg(sm_svc_worker_assemble(cl.ch[0], CALL_MS, &req, &bytes, err, sizeof err) ==
                          SM_OK,
                      "%s", err);
        ck_assert_int_eq(bytes, 2 * 8 * 6 * 4);
        sm_store_shard *s0, *s1;
        ck_assert(sm_store_get(cl.store[0], req.array_id, 0, &s0, err, sizeof err) == SM_OK);
        ck_assert(sm_store_get(cl.store[0], req.array_id, 1, &s1, err, sizeof err) == SM_OK);
        ck_assert_int_eq(s0->block == s1->block, !swap);
        ck_assert_int_eq(s0->data == s1->data, !swap);
        for (int k = 0; k < 48; k++) {
            float top0 = k < 24 ? a[k] : b[k - 24], top1 = k < 24 ? b[k] : a[k - 24];
            ck_assert(((float *)s0->data)[k] == top0);
            ck_assert(((float *)s1->data)[k] == (swap ? top1 : top0));
        }
        sm_store_shard_release(s0);
        sm_store_shard_release(s1);
    }
    /* an upload to devices 0 and 1 at once */
    int32_t both[2] = {0, 1};
    harness_upload_req u = {.to_worker = 1,
                            .array = {962},
                            .devices = both,
                            .ndevices = 2,
                            .dtype = SM_F32,
                            .shape = h,
                            .data = b,
                            .nbytes = sizeof b,
                            .chunk = SM_SVC_CHUNK,
                            .deadline_ms = CALL_MS};
    ck_assert_msg(harness_upload(cl.ch[0], &u, NULL, err, sizeof err) == SM_OK, "%s", err);
    sm_store_shard *u0, *u1;
    ck_assert(sm_store_get(cl.store[0], (sm_array_id){962}, 0, &u0, err, sizeof err) == SM_OK);
    ck_assert(sm_store_get(cl.store[0], (sm_array_id){962}, 1, &u1, err, sizeof err) == SM_OK);
    ck_assert_ptr_eq(u0->data, u1->data);
    ck_assert(u1->has_checksum && u1->checksum == u0->checksum);
    ck_assert(!memcmp(u1->data, b, sizeof b));
    sm_store_shard_release(u0);
    sm_store_shard_release(u1);
    /* freed one device at a time: the shared bytes stay with the other */
    ck_assert(sm_store_free_array(cl.store[0], (sm_array_id){960}, 1, (int32_t[]){0}, NULL, err,
                                  sizeof err) == SM_OK);
    sm_store_shard *s1;
    ck_assert(sm_store_get(cl.store[0], (sm_array_id){960}, 1, &s1, err, sizeof err) == SM_OK);
    for (int k = 0; k < 24; k++)
        ck_assert(((float *)s1->data)[k] == a[k] && ((float *)s1->data)[24 + k] == b[k]);
    sm_store_shard_release(s1);
}
END_TEST

static void add_job_case(Suite *s, const char *name, const suite_fixture *fx, int many,
                         int killed_in_shm)
{
    const suite_test rows[] = {
        {test_many_jobs},
        {test_job_case, NJOB_CASES},
        {test_deterministic},
        {test_shm_probe},
        {test_shm_same_bits},
        {test_shm_concurrent_jobs},
        {test_shm_truncated},
        {test_missing_input},
        {test_cancel},
        {test_exchange_bad_input},
        {killed_in_shm ? test_shm_killed_in_collective : test_dead_peer},
        {test_shutdown_during_job},
    };
    suite_add_case(s, name, 240, fx, rows + !many, sizeof rows / sizeof rows[0] - !many);
}

static void inproc_shm_setup(void)
{
    shm_mode = 1;
    inproc_setup();
}

static void proc_shm_setup(void)
{
    shm_mode = 1;
    proc_setup();
}

/* Teardowns: nothing of this process's jobs is left in /dev/shm. */
static void shm_teardown_check(void)
{
    shm_mode = 0;
    if (shm_left((uint64_t)-1)) {
        fprintf(stderr, "test_worker_job: segments left in /dev/shm\n");
        exit(1);
    }
}

static void inproc_shm_teardown(void)
{
    inproc_teardown();
    shm_teardown_check();
}

static void proc_shm_teardown(void)
{
    proc_teardown();
    shm_teardown_check();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = SUITE_CASE(suite_create("worker_job"), "comm", 60, NULL, {test_mailbox_rx},
                          {test_mailbox_rx_tiny_chunks}, {test_mailbox_pending_budget},
                          {test_mailbox_rx_direct}, {test_send_blob_waits_release},
                          {test_comm_three_workers}, {test_shm_segments}, {test_shm_guarded});
    add_job_case(s, "inproc", SUITE_UNCHECKED(inproc_setup, inproc_teardown), 1, 0);
    SUITE_CASE(s, "inproc_assemble", 60, SUITE_UNCHECKED(inproc_setup, inproc_teardown),
               {test_replicas_share_bytes});
    add_job_case(s, "proc", SUITE_UNCHECKED(proc_setup, proc_teardown), 0, 0);
    add_job_case(s, "inproc_shm", SUITE_UNCHECKED(inproc_shm_setup, inproc_shm_teardown), 0, 0);
    add_job_case(s, "proc_shm", SUITE_UNCHECKED(proc_shm_setup, proc_shm_teardown), 0, 1);
    return harness_run_suite(s);
}
