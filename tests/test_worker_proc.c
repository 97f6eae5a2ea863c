/* Check suite for the shmap-worker program: real worker processes on
 * loopback ports, registered with a fake coordinator served in this process
 * (RegisterWorker and Heartbeat only, recording calls), driven as a client:
 * PutShard / GetShard round trips, bad uploads with their codes, Stats,
 * FreeArray, Assemble with local and remote pieces, heartbeats, coordinator
 * restart, SIGTERM.
 *
 * The binary comes from $SHMAP_WORKER, else ../worker/shmap-worker (from the
 * build's tests/ directory). Every spawned worker gets PR_SET_PDEATHSIG, so
 * it dies with this process even if an assertion aborts a test; teardown
 * kills them explicitly as well. The suite runs in CK_NOFORK mode so the
 * workers and the fake coordinator are shared by the tests of a case. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_svc.h"
#include "sm_checksum.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "sm_time.h"
#include "suite_main.h"

#define NDEV     4
#define MAX_REGS 32
#define CALL_MS  30000

/* ---- fake coordinator ---------------------------------------------------- */

typedef struct {
    char address[SM_ADDR_MAX];
    int ndevices, process_index;
    uint32_t id;
    int nheld; /* shards offered back */
} reg_rec;

typedef struct {
    pthread_mutex_t mu;
    int nreg;
    reg_rec regs[MAX_REGS];
    int nworkers; /* distinct addresses */
    char addrs[MAX_REGS][SM_ADDR_MAX];
    int heartbeats[MAX_REGS];         /* per worker id */
    int64_t hb_bytes[MAX_REGS][NDEV]; /* last heartbeat's bytes */
    int forget;                       /* worker id + 1 whose next heartbeat gets known = 0 */
    int shift;                        /* added to every device id handed out */
} fake_coord;

static fake_coord fc = {.mu = PTHREAD_MUTEX_INITIALIZER};
static sm_rpc_server *coord_srv;
static char coord_addr[64];

static sm_err fc_register(void *user, const sm_svc_register_req *req, sm_svc_register_reply *out,
                          char *err, size_t errlen)
{
    fake_coord *c = user;
    pthread_mutex_lock(&c->mu);
    if (c->nreg == MAX_REGS || req->ndevices != NDEV) {
        pthread_mutex_unlock(&c->mu);
        return sm_fail(err, errlen, SM_EINVAL, "the fake coordinator takes %d devices", NDEV);
    }
    /* the same address gets the same identity back */
    int w = 0;
    while (w < c->nworkers && strcmp(c->addrs[w], req->address))
        w++;
    if (w == c->nworkers)
        snprintf(c->addrs[c->nworkers++], SM_ADDR_MAX, "%s", req->address);
    reg_rec *r = &c->regs[c->nreg++];
    snprintf(r->address, sizeof r->address, "%s", req->address);
    r->ndevices = req->ndevices;
    r->process_index = req->process_index;
    r->id = (uint32_t)w;
    r->nheld = req->nheld;
    memset(out, 0, sizeof *out);
    out->worker_id.v = (uint32_t)w;
    out->ndevices = NDEV;
    for (int k = 0; k < NDEV; k++)
        out->devices[k] = c->shift + w * NDEV + k;
    out->process_index = req->process_index >= 0 ? req->process_index : w;
    out->heartbeat_ms = 200;
    out->keep_shards = 1; /* the same identity (or other device ids: dropped anyway) */
    pthread_mutex_unlock(&c->mu);
    return SM_OK;
}

static sm_err fc_heartbeat(void *user, const sm_svc_heartbeat_req *req, int *known, char *err,
                           size_t errlen)
{
    fake_coord *c = user;
    pthread_mutex_lock(&c->mu);
    *known = 1;
    if (req->worker_id.v < MAX_REGS) {
        c->heartbeats[req->worker_id.v]++;
        for (int k = 0; k < NDEV && k < req->ndevices; k++)
            c->hb_bytes[req->worker_id.v][k] = req->device_bytes[k];
    }
    if (c->forget && (uint32_t)(c->forget - 1) == req->worker_id.v) {
        c->forget = 0;
        *known = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return SM_OK;
}

static const sm_svc_coord_ops fc_ops = {.register_worker = fc_register, .heartbeat = fc_heartbeat};

static int fc_nreg(void)
{
    pthread_mutex_lock(&fc.mu);
    int n = fc.nreg;
    pthread_mutex_unlock(&fc.mu);
    return n;
}

/* Waits until the coordinator saw n registrations; returns the n-th. */
static reg_rec wait_registered(int n)
{
    for (int t = 0; t < 300 && fc_nreg() < n; t++)
        harness_sleep_ms(50);
    pthread_mutex_lock(&fc.mu);
    ck_assert_msg(fc.nreg >= n, "no worker registered within 15 s (%d of %d)", fc.nreg, n);
    reg_rec r = fc.regs[n - 1];
    pthread_mutex_unlock(&fc.mu);
    return r;
}

/* ---- worker processes ---------------------------------------------------- */

static pid_t pids[8];
static int npids;

/* Starts shmap-worker against the fake coordinator with extra flags
 * (NULL-ended) and remembers it for kill_workers. */
static pid_t spawn_worker(const char *const *extra)
{
    pid_t pid = harness_worker_spawn(coord_addr, 4, extra);
    if (npids < 8)
        pids[npids++] = pid;
    return pid;
}

/* Waits up to ms for pid; returns its wait status or -1 on timeout. */
static int wait_exit(pid_t pid, int ms)
{
    int status = harness_wait_exit(pid, ms);
    for (int k = 0; status != -1 && k < npids; k++)
        if (pids[k] == pid)
            pids[k] = 0;
    return status;
}

static int bad_exits; /* workers that did not exit 0 on SIGTERM */

/* SIGTERM, then SIGKILL after 5 s; an exit other than 0 (a sanitizer
 * report, a crash, a hang) is counted in bad_exits. */
static void kill_workers(void)
{
    for (int k = 0; k < npids; k++) {
        pid_t pid = pids[k];
        if (pid <= 0)
            continue;
        int status = harness_stop_pid(pid, 5000);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "worker %d did not exit cleanly on SIGTERM (status %#x)\n", (int)pid,
                    (unsigned)status);
            bad_exits++;
        }
        pids[k] = 0;
    }
    npids = 0;
}

/* ---- fixture: a coordinator and two workers A (devices 0..3), B (4..7) -- */

static char addr_a[SM_ADDR_MAX], addr_b[SM_ADDR_MAX];
static sm_rpc_channel *ch_a, *ch_b;

static void coord_start(void)
{
    char err[512];
    sm_rpc_init();
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
    ck_assert_msg(sm_rpc_server_create(&o, &coord_srv, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(
        sm_svc_coord_serve(coord_srv, &fc_ops, &fc, "fake-coordinator", err, sizeof err) == SM_OK,
        "%s", err);
    ck_assert_msg(sm_rpc_server_start(coord_srv, err, sizeof err) == SM_OK, "%s", err);
    snprintf(coord_addr, sizeof coord_addr, "127.0.0.1:%d", sm_rpc_server_port(coord_srv));
}

static void setup(void)
{
    char err[512];
    coord_start();
    int n0 = fc_nreg();
    spawn_worker(NULL);
    reg_rec a = wait_registered(n0 + 1);
    snprintf(addr_a, sizeof addr_a, "%s", a.address);
    spawn_worker(NULL);
    reg_rec b = wait_registered(n0 + 2);
    snprintf(addr_b, sizeof addr_b, "%s", b.address);
    ck_assert_msg(sm_rpc_channel_create(addr_a, NULL, &ch_a, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_rpc_channel_create(addr_b, NULL, &ch_b, err, sizeof err) == SM_OK, "%s", err);
}

static void teardown(void)
{
    kill_workers();
    sm_rpc_channel_free(ch_a);
    sm_rpc_channel_free(ch_b);
    ch_a = ch_b = NULL;
    sm_rpc_server_free(coord_srv);
    coord_srv = NULL;
    sm_rpc_shutdown();
}

/* ---- client helpers ------------------------------------------------------ */

/* Uploads data (nbytes) as a shard of (array, devices) to the worker at ch
 * in chunks of chunk bytes, spoiled as mode says. Returns the call's
 * result. */
static sm_err upload(sm_rpc_channel *ch, uint64_t array, const int32_t *devices, int ndev,
                     sm_dtype t, const sm_shape *s, const void *data, int64_t nbytes, size_t chunk,
                     harness_up_mode mode, char *err, size_t errlen)
{
    harness_upload_req u = {.to_worker = 1,
                            .array = {array},
                            .devices = devices,
                            .ndevices = ndev,
                            .dtype = t,
                            .shape = *s,
                            .data = data,
                            .nbytes = nbytes,
                            .chunk = chunk,
                            .mode = mode,
                            .deadline_ms = CALL_MS};
    return harness_upload(ch, &u, NULL, err, errlen);
}

typedef struct {
    void *data;
    int64_t nbytes;
    sm_shape shape;
    sm_dtype dtype;
    int nchunks;
} dl_result;

/* Downloads (array, device[, box]) checking the stream's protocol: meta
 * first, contiguous offsets, chunks <= SM_SVC_CHUNK, checksum at the end. */
static sm_err download(sm_rpc_channel *ch, uint64_t array, int32_t device, const sm_index *box,
                       dl_result *out, char *err, size_t errlen)
{
    sm_svc_download_req req = {.array = {.id = {array}}, .device = device};
    if (box) {
        req.has_box = 1;
        req.box = *box;
    }
    sm_svc_download_stream *st = NULL;
    sm_checksum *ck = sm_checksum_create();
    int last = 0;
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_download_open(ch, 1, &req, CALL_MS, &st, err, errlen);
    while (!e) {
        sm_svc_chunk c;
        int end = 0;
        if ((e = sm_svc_download_recv(st, &c, &end, err, errlen)) || end)
            break;
        if (out->nchunks++ == 0) {
            ck_assert(c.has_meta);
            out->shape = c.shape;
            out->dtype = c.dtype;
            out->nbytes = c.total_bytes;
            out->data = malloc(c.total_bytes ? (size_t)c.total_bytes : 1);
        }
        ck_assert(!last);
        ck_assert_int_le(c.len, SM_SVC_CHUNK);
        ck_assert_int_le(c.offset + (int64_t)c.len, out->nbytes);
        if (c.len)
            memcpy((char *)out->data + c.offset, c.data, c.len);
        sm_checksum_update(ck, c.data, c.len);
        if (c.last) {
            last = 1;
            ck_assert_int_eq(c.offset + (int64_t)c.len, out->nbytes);
            ck_assert_uint_eq(c.checksum, sm_checksum_digest(ck));
        }
    }
    if (!e)
        ck_assert_msg(last, "the download ended without a last chunk");
    sm_svc_download_free(st);
    sm_checksum_free(ck);
    if (e) {
        free(out->data);
        out->data = NULL;
    }
    return e;
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *b = p;
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[k] = (unsigned char)(x >> 24);
    }
}

/* Dense copy of a box of src (shape s, elem bytes) for comparisons. */
static void *box_ref(const void *src, const sm_shape *s, const sm_index *box, size_t elem)
{
    sm_shape bs = sm_index_shape(box);
    int64_t n = 0, off[SM_MAX_RANK], zero[SM_MAX_RANK] = {0};
    char err[256];
    ck_assert_int_eq(sm_shape_nbytes(&bs, SM_U8, &n, err, sizeof err), SM_OK);
    void *dst = malloc((size_t)n * elem + 1);
    for (int d = 0; d < box->rank; d++)
        off[d] = box->r[d].start;
    ck_assert_int_eq(sm_block_copy(dst, &bs, zero, src, s, off, bs.dims, elem, err, sizeof err),
                     SM_OK);
    return dst;
}

static sm_svc_worker_stats stats_of(sm_rpc_channel *ch)
{
    sm_svc_worker_stats s;
    char err[512];
    ck_assert_msg(sm_svc_worker_stats_get(ch, CALL_MS, &s, err, sizeof err) == SM_OK, "%s", err);
    return s;
}

static sm_shape shape2(int64_t a, int64_t b)
{
    return (sm_shape){.rank = 2, .dims = {a, b}};
}

static sm_index box2(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    return (sm_index){.rank = 2, .r = {{a0, a1}, {b0, b1}}};
}

/* A piece of an assembled shard: box of array on device dev of the worker at
 * addr (NULL: the assembling worker), placed at row r, column c. */
static sm_svc_piece piece(const char *addr, uint64_t array, int32_t dev, sm_index box, int64_t r,
                          int64_t c)
{
    return (sm_svc_piece){.src_address = addr,
                          .src_array = {array},
                          .src_device = dev,
                          .src_box = box,
                          .dst_offset = {r, c}};
}

/* Frees array on the worker at ch: on the n devices devs, or on all (n 0). */
static sm_err free_on(sm_rpc_channel *ch, uint64_t array, int n, const int32_t *devs)
{
    char err[512];
    return sm_svc_worker_free_array(ch, CALL_MS, (sm_array_id){array}, n, devs, err, sizeof err);
}

/* Uploads random data as (array, device) of A and returns it (free it). */
static void *put_random(sm_rpc_channel *ch, uint64_t array, int32_t dev, sm_dtype t,
                        const sm_shape *s)
{
    char err[512];
    int64_t n = 0;
    ck_assert_int_eq(sm_shape_nbytes(s, t, &n, err, sizeof err), SM_OK);
    void *data = malloc(n ? (size_t)n : 1);
    fill_random(data, (size_t)n, array * 31 + (uint64_t)dev);
    sm_err e = upload(ch, array, &dev, 1, t, s, data, n, 1 << 20, HARNESS_UP_OK, err, sizeof err);
    ck_assert_msg(e == SM_OK, "upload of array %llu: %s", (unsigned long long)array, err);
    return data;
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_registration)
{
    pthread_mutex_lock(&fc.mu);
    reg_rec a = fc.regs[0];
    pthread_mutex_unlock(&fc.mu);
    ck_assert_int_eq(a.ndevices, NDEV);
    ck_assert_int_eq(a.process_index, -1);
    ck_assert_msg(!strncmp(a.address, "127.0.0.1:", 10), "advertised %s", a.address);
    ck_assert_int_gt(atoi(a.address + 10), 0);
    ck_assert_str_ne(addr_a, addr_b);
    sm_svc_worker_stats s = stats_of(ch_a);
    ck_assert_int_eq(s.ndevices, NDEV);
    for (int k = 0; k < NDEV; k++)
        ck_assert_int_eq(s.devices[k], k);
    s = stats_of(ch_b);
    ck_assert_int_eq(s.devices[0], NDEV);

    /* negotiate and health answer on the worker's port */
    uint32_t version = 0;
    char name[64] = "", err[512];
    ck_assert_msg(sm_svc_negotiate(ch_a, 1, "test", &version, name, sizeof name, CALL_MS, err,
                                   sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(version, 1);
}
END_TEST

START_TEST(test_heartbeat)
{
    int n = 0;
    for (int t = 0; t < 100 && n < 2; t++) {
        harness_sleep_ms(50);
        pthread_mutex_lock(&fc.mu);
        n = fc.heartbeats[0];
        pthread_mutex_unlock(&fc.mu);
    }
    ck_assert_int_ge(n, 2);
    /* bytes show up in heartbeats */
    sm_shape s = shape2(16, 16);
    free(put_random(ch_a, 900, 2, SM_F64, &s));
    int64_t b = 0;
    for (int t = 0; t < 100 && b != 2048; t++) {
        harness_sleep_ms(50);
        pthread_mutex_lock(&fc.mu);
        b = fc.hb_bytes[0][2];
        pthread_mutex_unlock(&fc.mu);
    }
    ck_assert_int_eq(b, 2048);
    ck_assert_int_eq(free_on(ch_a, 900, 0, NULL), SM_OK);
}
END_TEST

START_TEST(test_roundtrip_dtypes)
{
    static const struct {
        sm_dtype t;
        sm_shape s;
    } cases[] = {
        {SM_F32, {2, {3, 5}}}, {SM_F64, {1, {7}}},   {SM_I32, {3, {2, 3, 4}}},
        {SM_I64, {2, {0, 5}}}, {SM_U8, {0, {0}}},    {SM_BOOL, {2, {9, 9}}},
        {SM_F16, {2, {4, 4}}}, {SM_BF16, {1, {33}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t array = 100 + k;
        int32_t dev = (int32_t)(k % NDEV);
        void *data = put_random(ch_a, array, dev, cases[k].t, &cases[k].s);
        dl_result r;
        char err[512];
        ck_assert_msg(download(ch_a, array, dev, NULL, &r, err, sizeof err) == SM_OK, "%s", err);
        ck_assert(sm_shape_equal(&r.shape, &cases[k].s));
        ck_assert_int_eq(r.dtype, cases[k].t);
        ck_assert_int_eq(r.nchunks, 1);
        ck_assert_msg(!memcmp(r.data, data, (size_t)r.nbytes), "case %zu differs", k);
        free(r.data);
        free(data);
        ck_assert_int_eq(free_on(ch_a, array, 1, &dev), SM_OK);
    }
    ck_assert_int_eq(stats_of(ch_a).shards, 0);
}
END_TEST

START_TEST(test_multichunk_and_boxes)
{
    char err[512];
    sm_shape s = shape2(1280, 2048); /* f32: 10 MiB */
    int64_t n = 1280 * 2048 * 4;
    void *data = malloc((size_t)n);
    fill_random(data, (size_t)n, 7);
    int32_t devs[2] = {1, 3};
    ck_assert_msg(upload(ch_a, 300, devs, 2, SM_F32, &s, data, n, 3 << 20, HARNESS_UP_OK, err,
                         sizeof err) == SM_OK,
                  "%s", err);
    for (int k = 0; k < 2; k++) {
        dl_result r;
        ck_assert_msg(download(ch_a, 300, devs[k], NULL, &r, err, sizeof err) == SM_OK, "%s", err);
        ck_assert_int_eq(r.nbytes, n);
        ck_assert_int_eq(r.nchunks, (n + SM_SVC_CHUNK - 1) / SM_SVC_CHUNK);
        ck_assert(!memcmp(r.data, data, (size_t)n));
        free(r.data);
    }
    /* sub-boxes: inside, one row, one column, empty, the whole shard */
    static const sm_index boxes[] = {
        {2, {{100, 1100}, {7, 2000}}}, {2, {{5, 6}, {0, 2048}}},    {2, {{0, 1280}, {9, 10}}},
        {2, {{3, 3}, {0, 5}}},         {2, {{0, 1280}, {0, 2048}}},
    };
    for (size_t k = 0; k < sizeof boxes / sizeof *boxes; k++) {
        dl_result r;
        ck_assert_msg(download(ch_a, 300, 3, &boxes[k], &r, err, sizeof err) == SM_OK, "%s", err);
        sm_shape bs = sm_index_shape(&boxes[k]);
        ck_assert(sm_shape_equal(&r.shape, &bs));
        void *want = box_ref(data, &s, &boxes[k], 4);
        ck_assert_msg(!memcmp(r.data, want, (size_t)r.nbytes), "box %zu differs", k);
        free(want);
        free(r.data);
    }
    /* rows longer than a chunk are split */
    sm_shape wide = shape2(2, 1500000);
    void *w = put_random(ch_a, 301, 0, SM_F32, &wide);
    sm_index wb = box2(0, 2, 1, 1500000);
    dl_result r;
    ck_assert_msg(download(ch_a, 301, 0, &wb, &r, err, sizeof err) == SM_OK, "%s", err);
    void *want = box_ref(w, &wide, &wb, 4);
    ck_assert_int_ge(r.nchunks, 3);
    ck_assert(!memcmp(r.data, want, (size_t)r.nbytes));
    free(want);
    free(r.data);
    free(w);
    free(data);
    ck_assert_int_eq(free_on(ch_a, 300, 0, NULL), SM_OK);
    ck_assert_int_eq(free_on(ch_a, 301, 0, NULL), SM_OK);
}
END_TEST

START_TEST(test_get_errors)
{
    char err[512];
    dl_result r;
    sm_shape s = shape2(4, 4);
    free(put_random(ch_a, 400, 1, SM_I32, &s));
    ck_assert_int_eq(download(ch_a, 12345, 1, NULL, &r, err, sizeof err), SM_ENOTFOUND);
    ck_assert_msg(strstr(err, "worker 0 holds no shard of array 12345 on device 1"), "%s", err);
    ck_assert_int_eq(download(ch_a, 400, 2, NULL, &r, err, sizeof err), SM_ENOTFOUND);
    ck_assert_int_eq(download(ch_a, 400, 77, NULL, &r, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "device 77"), "%s", err);
    static const sm_index bad[] = {
        {2, {{0, 5}, {0, 4}}}, {2, {{2, 1}, {0, 4}}}, {1, {{0, 4}}}, {2, {{-1, 2}, {0, 4}}}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        ck_assert_int_eq(download(ch_a, 400, 1, &bad[k], &r, err, sizeof err), SM_EINVAL);
    ck_assert_int_eq(download(ch_a, 400, 1, NULL, &r, err, sizeof err), SM_OK);
    free(r.data);
    free_on(ch_a, 400, 0, NULL);
}
END_TEST

START_TEST(test_bad_uploads)
{
    static const struct {
        harness_up_mode mode;
        int ndev;
        int32_t devs[2];
        uint64_t array; /* 0: 500 + case */
        int zero_id;
        sm_err want;
        const char *words;
    } cases[] = {
        {HARNESS_UP_NO_HEADER, 1, {0}, 0, 0, SM_EINVAL, "no header"},
        {HARNESS_UP_GAP, 1, {0}, 0, 0, SM_EINVAL, "gap"},
        {HARNESS_UP_OVERLAP, 1, {0}, 0, 0, SM_EINVAL, "overlaps"},
        {HARNESS_UP_PAST_END, 1, {0}, 0, 0, SM_EINVAL, "past the end"},
        {HARNESS_UP_WRONG_TOTAL, 1, {0}, 0, 0, SM_EINVAL, "announces"},
        {HARNESS_UP_BAD_SUM, 1, {0}, 0, 0, SM_EDATALOSS, "checksum"},
        {HARNESS_UP_NO_LAST, 1, {0}, 0, 0, SM_EINVAL, "without a last"},
        {HARNESS_UP_SECOND_HEADER, 1, {0}, 0, 0, SM_EINVAL, "second header"},
        {HARNESS_UP_OK, 1, {42}, 0, 0, SM_EINVAL, "device 42"},
        {HARNESS_UP_OK, 2, {0, 5}, 0, 0, SM_EINVAL, "device 5"},
        {HARNESS_UP_OK, 2, {1, 1}, 0, 0, SM_EINVAL, "twice"},
        {HARNESS_UP_OK, 0, {0}, 0, 0, SM_EINVAL, "devices"},
        {HARNESS_UP_OK, 1, {0}, 0, 1, SM_EINVAL, "array id"},
        {HARNESS_UP_ABORT, 1, {0}, 0, 0, SM_ECANCELLED, NULL},
    };
    sm_shape s = shape2(64, 1024);
    int64_t n = 64 * 1024 * 4;
    void *data = malloc((size_t)n);
    fill_random(data, (size_t)n, 3);
    char err[512];
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t array = cases[k].zero_id ? 0 : 500 + k;
        err[0] = 0;
        sm_err e = upload(ch_a, array, cases[k].devs, cases[k].ndev, SM_F32, &s, data, n, 64 << 10,
                          cases[k].mode, err, sizeof err);
        ck_assert_msg(e == cases[k].want, "case %zu: %s (%s)", k, sm_err_name(e), err);
        if (cases[k].words)
            ck_assert_msg(strstr(err, cases[k].words), "case %zu: '%s' lacks '%s'", k, err,
                          cases[k].words);
        /* nothing of it is visible, and the worker still serves */
        dl_result r;
        sm_err g = download(ch_a, 500 + k, cases[k].devs[0] < NDEV ? cases[k].devs[0] : 0, NULL, &r,
                            err, sizeof err);
        ck_assert_msg(g == SM_ENOTFOUND, "case %zu: get gave %s", k, sm_err_name(g));
        ck_assert_int_eq(stats_of(ch_a).shards, 0);
    }
    /* a shard larger than the host is refused before anything is allocated */
    sm_shape huge = shape2(1 << 24, 1 << 24);
    int32_t d1 = 1;
    ck_assert_int_eq(upload(ch_a, 560, &d1, 1, SM_F64, &huge, data, (int64_t)1 << 51, 64 << 10,
                            HARNESS_UP_HEADER_ONLY, err, sizeof err),
                     SM_ERESOURCE);
    ck_assert_msg(strstr(err, "memory"), "%s", err);
    ck_assert_int_eq(stats_of(ch_a).shards, 0);
    /* an existing shard survives a failed replacement */
    int32_t d0 = 0;
    ck_assert_int_eq(
        upload(ch_a, 550, &d0, 1, SM_F32, &s, data, n, 64 << 10, HARNESS_UP_OK, err, sizeof err),
        SM_OK);
    void *other = malloc((size_t)n);
    fill_random(other, (size_t)n, 4);
    ck_assert_int_eq(upload(ch_a, 550, &d0, 1, SM_F32, &s, other, n, 64 << 10, HARNESS_UP_BAD_SUM,
                            err, sizeof err),
                     SM_EDATALOSS);
    dl_result r;
    ck_assert_int_eq(download(ch_a, 550, 0, NULL, &r, err, sizeof err), SM_OK);
    ck_assert(!memcmp(r.data, data, (size_t)n));
    free(r.data);
    free(other);
    free(data);
    free_on(ch_a, 550, 0, NULL);
}
END_TEST

typedef struct {
    int id;
    int failures;
    char err[512];
} client_arg;

/* One client: uploads, downloads (whole and a box) and frees its own
 * arrays on its own device, several rounds. */
static void *client_thread(void *p)
{
    client_arg *a = p;
    sm_shape s = shape2(256, 1024); /* f32: 1 MiB */
    int64_t n = 256 * 1024 * 4;
    int32_t dev = a->id % NDEV;
    void *data = malloc((size_t)n);
    for (int round = 0; round < 5 && !a->failures; round++) {
        uint64_t array = 1000 + (uint64_t)a->id * 10 + (uint64_t)round;
        fill_random(data, (size_t)n, array);
        dl_result r;
        if (upload(ch_a, array, &dev, 1, SM_F32, &s, data, n, 200000, HARNESS_UP_OK, a->err,
                   sizeof a->err) ||
            download(ch_a, array, dev, NULL, &r, a->err, sizeof a->err)) {
            a->failures++;
            break;
        }
        if (r.nbytes != n || memcmp(r.data, data, (size_t)n))
            a->failures++;
        free(r.data);
        if (sm_svc_worker_free_array(ch_a, CALL_MS, (sm_array_id){array}, 0, NULL, a->err,
                                     sizeof a->err))
            a->failures++;
    }
    free(data);
    return NULL;
}

START_TEST(test_concurrent_clients)
{
    pthread_t t[4];
    client_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (client_arg){.id = k};
        ck_assert_int_eq(pthread_create(&t[k], NULL, client_thread, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(args[k].failures == 0, "client %d: %s", k, args[k].err);
    ck_assert_int_eq(stats_of(ch_a).shards, 0);
}
END_TEST

START_TEST(test_stats_and_free)
{
    char err[512];
    sm_shape s = shape2(8, 8);
    int32_t devs[3] = {0, 1, 2};
    void *d = malloc(8 * 8 * 8);
    fill_random(d, 512, 5);
    ck_assert_int_eq(
        upload(ch_a, 600, devs, 3, SM_F64, &s, d, 512, 100, HARNESS_UP_OK, err, sizeof err), SM_OK);
    free(put_random(ch_a, 601, 2, SM_U8, &s));
    sm_svc_worker_stats st = stats_of(ch_a);
    ck_assert_int_eq(st.shards, 4);
    ck_assert_int_eq(st.device_bytes[0], 512);
    ck_assert_int_eq(st.device_bytes[1], 512);
    ck_assert_int_eq(st.device_bytes[2], 512 + 64);
    ck_assert_int_eq(st.device_bytes[3], 0);
    ck_assert_int_eq(free_on(ch_a, 600, 1, &devs[1]), SM_OK);
    st = stats_of(ch_a);
    ck_assert_int_eq(st.device_bytes[1], 0);
    ck_assert_int_eq(st.shards, 3);
    int32_t far = 9;
    ck_assert_int_eq(free_on(ch_a, 600, 1, &far), SM_EINVAL);
    ck_assert_int_eq(free_on(ch_a, 600, 0, NULL), SM_OK);
    ck_assert_int_eq(free_on(ch_a, 601, 0, NULL), SM_OK);
    ck_assert_int_eq(free_on(ch_a, 99999, 0, NULL), SM_OK);
    st = stats_of(ch_a);
    ck_assert_int_eq(st.shards, 0);
    for (int k = 0; k < NDEV; k++)
        ck_assert_int_eq(st.device_bytes[k], 0);
    free(d);
}
END_TEST

/* The global array g (f32 [8,6]) is uploaded as two row halves: src array
 * 700 on A's devices 0 (rows 0..3) and 1 (rows 4..7), and 701 on B's device
 * 5 (rows 4..7). */
static void *assemble_sources(void)
{
    char err[512];
    sm_shape g = shape2(8, 6), h = shape2(4, 6);
    float *data = malloc(8 * 6 * sizeof *data);
    for (int k = 0; k < 48; k++)
        data[k] = (float)k + 0.5f;
    int32_t d0 = 0, d1 = 1, d5 = 5;
    ck_assert_int_eq(
        upload(ch_a, 700, &d0, 1, SM_F32, &h, data, 96, 40, HARNESS_UP_OK, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        upload(ch_a, 700, &d1, 1, SM_F32, &h, data + 24, 96, 96, HARNESS_UP_OK, err, sizeof err),
        SM_OK);
    ck_assert_int_eq(
        upload(ch_b, 701, &d5, 1, SM_F32, &h, data + 24, 96, 96, HARNESS_UP_OK, err, sizeof err),
        SM_OK);
    (void)g;
    return data;
}

static void check_shard(sm_rpc_channel *ch, uint64_t array, int32_t dev, const float *global,
                        const sm_index *box)
{
    char err[512];
    dl_result r;
    sm_shape g = shape2(8, 6);
    ck_assert_msg(download(ch, array, dev, NULL, &r, err, sizeof err) == SM_OK, "%s", err);
    float *want = box_ref(global, &g, box, 4);
    ck_assert_msg(!memcmp(r.data, want, (size_t)r.nbytes), "array %llu device %d differs",
                  (unsigned long long)array, (int)dev);
    free(want);
    free(r.data);
}

/* Assembles req on A, which must give want (and, when it succeeds, bytes
 * bytes); a failure's error (in err, 512 bytes) holds has (NULL: not
 * checked) and leaves nothing of the array on device dev (-1: not checked). */
static void assemble_on_a(const sm_svc_assemble_req *req, sm_err want, int64_t bytes,
                          const char *has, int32_t dev, char *err)
{
    char derr[512];
    int64_t got = 0;
    dl_result r;
    sm_err e = sm_svc_worker_assemble(ch_a, CALL_MS, req, &got, err, 512);
    ck_assert_msg(e == want, "array %llu: %s, not %s: %s", (unsigned long long)req->array_id.v,
                  sm_err_name(e), sm_err_name(want), err);
    if (want == SM_OK)
        ck_assert_int_eq(got, bytes);
    ck_assert_msg(!has || strstr(err, has), "%s", err);
    if (want != SM_OK && dev >= 0)
        ck_assert_int_eq(download(ch_a, req->array_id.v, dev, NULL, &r, derr, sizeof derr),
                         SM_ENOTFOUND);
}

/* Assembles req on A, which must succeed storing bytes bytes, shard k
 * holding the box want[k] of g. */
static void assemble_check(const sm_svc_assemble_req *req, int64_t bytes, const float *g,
                           const sm_index *want, char *err)
{
    assemble_on_a(req, SM_OK, bytes, NULL, -1, err);
    for (int k = 0; k < req->nshards; k++)
        check_shard(ch_a, req->array_id.v, req->shards[k].device, g, &want[k]);
}

/* Frees arrays first..last on both workers. */
static void free_arrays(uint64_t first, uint64_t last)
{
    for (uint64_t a = first; a <= last; a++) {
        free_on(ch_a, a, 0, NULL);
        free_on(ch_b, a, 0, NULL);
    }
}

START_TEST(test_assemble_local)
{
    char err[512];
    float *g = assemble_sources();
    /* device 2: the whole [8,6]; device 3: columns 2..5 of rows 2..5 */
    sm_svc_piece p2[2] = {piece(NULL, 700, 0, box2(0, 4, 0, 6), 0, 0),
                          piece(addr_a, 700, 1, box2(0, 4, 0, 6), 4, 0)};
    sm_svc_piece p3[2] = {piece(NULL, 700, 0, box2(2, 4, 2, 6), 0, 0),
                          piece(NULL, 700, 1, box2(0, 2, 2, 6), 2, 0)};
    sm_svc_assemble_shard sh[2] = {
        {.device = 2, .shape = shape2(8, 6), .npieces = 2, .pieces = p2},
        {.device = 3, .shape = shape2(4, 4), .npieces = 2, .pieces = p3}};
    sm_svc_assemble_req req = {.array_id = {710}, .dtype = SM_F32, .nshards = 2, .shards = sh};
    /* device 2: all of g; device 3: its middle */
    assemble_check(&req, 8 * 6 * 4 + 4 * 4 * 4, g,
                   (const sm_index[]){box2(0, 8, 0, 6), box2(2, 6, 2, 6)}, err);

    /* failures store nothing and name the piece */
    p3[1].src_array.v = 799;
    req.array_id.v = 711;
    assemble_on_a(&req, SM_ENOTFOUND, 0, "array 799 device 1", 2, err);
    p3[1].src_array.v = 700;
    p3[1].dst_offset[0] = 3; /* does not fit the new shard */
    assemble_on_a(&req, SM_EINVAL, 0, NULL, -1, err);
    p3[1].dst_offset[0] = 2;
    p3[1].src_box = box2(0, 2, 2, 7); /* does not fit the source */
    assemble_on_a(&req, SM_EINVAL, 0, NULL, -1, err);
    p3[1].src_box = box2(0, 2, 2, 6);
    sh[1].device = 6; /* not on A */
    assemble_on_a(&req, SM_EINVAL, 0, NULL, 2, err);
    free_arrays(700, 711);
    free(g);
}
END_TEST

START_TEST(test_assemble_remote)
{
    char err[512];
    float *g = assemble_sources();
    /* A device 0 gets columns 1..4 of all rows: top half local, bottom from B */
    sm_svc_piece p[2] = {piece(NULL, 700, 0, box2(0, 4, 1, 5), 0, 0),
                         piece(addr_b, 701, 5, box2(0, 4, 1, 5), 4, 0)};
    /* A device 3 gets the bottom half, all from B */
    sm_svc_piece q[1] = {piece(addr_b, 701, 5, box2(0, 4, 0, 6), 0, 0)};
    sm_svc_assemble_shard sh[2] = {{.device = 0, .shape = shape2(8, 4), .npieces = 2, .pieces = p},
                                   {.device = 3, .shape = shape2(4, 6), .npieces = 1, .pieces = q}};
    sm_svc_assemble_req req = {.array_id = {720}, .dtype = SM_F32, .nshards = 2, .shards = sh};
    /* device 0: columns 1..4; device 3: the bottom half */
    assemble_check(&req, 8 * 4 * 4 + 4 * 6 * 4, g,
                   (const sm_index[]){box2(0, 8, 1, 5), box2(4, 8, 0, 6)}, err);

    /* B does not hold what is asked: the error names the peer, nothing stored */
    q[0].src_device = 6;
    req.array_id.v = 721;
    assemble_on_a(&req, SM_ENOTFOUND, 0, "array 701 device 6", 0, err);
    ck_assert_msg(strstr(err, addr_b), "%s", err);
    /* an unreachable peer */
    q[0].src_device = 5;
    q[0].src_address = "127.0.0.1:1";
    assemble_on_a(&req, SM_EUNAVAILABLE, 0, NULL, 0, err);
    /* a dtype mismatch is caught by the peer's reply check */
    q[0].src_address = addr_b;
    req.dtype = SM_I32;
    sh[0].npieces = 0;
    assemble_on_a(&req, SM_EINVAL, 0, "f32", -1, err);
    free_arrays(700, 721);
    ck_assert_int_eq(stats_of(ch_a).shards, 0);
    ck_assert_int_eq(stats_of(ch_b).shards, 0);
    free(g);
}
END_TEST

START_TEST(test_assemble_large_remote)
{
    /* a 7 MB piece from B lands at an offset in A's new shard: several
     * chunks, rows split across chunk boundaries; the rest stays zero */
    char err[512];
    sm_shape src = shape2(1000, 3000), dst = shape2(1200, 2000);
    float *data = put_random(ch_b, 730, 4, SM_F32, &src);
    sm_svc_piece p = piece(addr_b, 730, 4, box2(100, 1000, 500, 2500), 150, 0);
    sm_svc_assemble_shard sh = {.device = 1, .shape = dst, .npieces = 1, .pieces = &p};
    sm_svc_assemble_req req = {.array_id = {731}, .dtype = SM_F32, .nshards = 1, .shards = &sh};
    int64_t bytes = 0;
    ck_assert_msg(sm_svc_worker_assemble(ch_a, CALL_MS, &req, &bytes, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(bytes, 1200 * 2000 * 4);
    float *want = calloc(1200 * 2000, sizeof *want);
    int64_t off[2] = {150, 0}, soff[2] = {100, 500}, ext[2] = {900, 2000};
    ck_assert_int_eq(sm_block_copy(want, &dst, off, data, &src, soff, ext, 4, err, sizeof err),
                     SM_OK);
    dl_result r;
    ck_assert_msg(download(ch_a, 731, 1, NULL, &r, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(r.nbytes, bytes);
    ck_assert(!memcmp(r.data, want, (size_t)bytes));
    free(r.data);
    free(want);
    free(data);
    free_on(ch_a, 731, 0, NULL);
    free_on(ch_b, 730, 0, NULL);
    ck_assert_int_eq(stats_of(ch_a).shards, 0);
    ck_assert_int_eq(stats_of(ch_b).shards, 0);
}
END_TEST

/* Pieces that overlap, though their elements add up to the new shard's,
 * leave part of it unwritten: that part is zero, not the bytes of a shard
 * freed before (the new shard's memory is a freed block kept for reuse). */
START_TEST(test_assemble_overlap_zeroed)
{
    char err[512];
    sm_shape big = shape2(512, 1024), half = shape2(256, 1024);
    free(put_random(ch_a, 740, 1, SM_F32, &big));
    sm_svc_worker_free_array(ch_a, CALL_MS, (sm_array_id){740}, 0, NULL, err, sizeof err);
    float *src = put_random(ch_a, 741, 0, SM_F32, &half);
    sm_svc_piece p[2] = {
        {.src_array = {741}, .src_device = 0, .src_box = box2(0, 256, 0, 1024), .dst_offset = {0}},
        {.src_array = {741},
         .src_device = 0,
         .src_box = box2(0, 256, 0, 1024),
         .dst_offset = {128, 0}},
    };
    sm_svc_assemble_shard sh = {.device = 1, .shape = big, .npieces = 2, .pieces = p};
    sm_svc_assemble_req req = {.array_id = {742}, .dtype = SM_F32, .nshards = 1, .shards = &sh};
    assemble_on_a(&req, SM_OK, 512 * 1024 * 4, NULL, -1, err);
    dl_result r;
    ck_assert_msg(download(ch_a, 742, 1, NULL, &r, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(r.nbytes, 512 * 1024 * 4);
    const float *got = r.data;
    ck_assert(!memcmp(got, src, 128 * 1024 * 4));
    ck_assert(!memcmp(got + 128 * 1024, src, 256 * 1024 * 4));
    for (int64_t k = 384 * 1024; k < 512 * 1024; k++)
        ck_assert_msg(got[k] == 0, "element %lld of the unwritten rows is %g", (long long)k,
                      (double)got[k]);
    free(r.data);
    free(src);
    free_arrays(741, 742);
}
END_TEST

START_TEST(test_coordinator_restart)
{
    char err[512];
    sm_shape s = shape2(3, 3);
    free(put_random(ch_a, 800, 1, SM_F32, &s));
    int n0 = fc_nreg();
    pthread_mutex_lock(&fc.mu);
    fc.forget = 1; /* worker 0: A */
    pthread_mutex_unlock(&fc.mu);
    /* registering again, it offers its shard; given the same identity
     * back, it keeps it */
    reg_rec r = wait_registered(n0 + 1);
    ck_assert_str_eq(r.address, addr_a);
    ck_assert_int_eq(r.nheld, 1);
    sm_svc_worker_stats st = stats_of(ch_a);
    ck_assert_int_eq(st.shards, 1);
    ck_assert_int_eq(st.devices[0], 0);
    dl_result d;
    ck_assert_msg(download(ch_a, 800, 1, NULL, &d, err, sizeof err) == SM_OK, "%s", err);
    free(d.data);
    /* given other device ids, it drops every shard */
    pthread_mutex_lock(&fc.mu);
    fc.shift = 100;
    fc.forget = 1;
    pthread_mutex_unlock(&fc.mu);
    r = wait_registered(n0 + 2);
    ck_assert_int_eq(r.nheld, 1);
    int64_t until = sm_time_mono_ms() + 5000;
    while (stats_of(ch_a).devices[0] != 100 && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    st = stats_of(ch_a);
    ck_assert_int_eq(st.devices[0], 100);
    ck_assert_int_eq(st.shards, 0);
    ck_assert_int_eq(download(ch_a, 800, 101, NULL, &d, err, sizeof err), SM_ENOTFOUND);
    pthread_mutex_lock(&fc.mu);
    fc.shift = 0;
    fc.forget = 1;
    pthread_mutex_unlock(&fc.mu);
    wait_registered(n0 + 3);
    until = sm_time_mono_ms() + 5000;
    while (stats_of(ch_a).devices[0] != 0 && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
}
END_TEST

START_TEST(test_sigterm)
{
    int n0 = fc_nreg();
    pid_t pid = spawn_worker((const char *const[]){"--process-index", "7", NULL});
    reg_rec r = wait_registered(n0 + 1);
    ck_assert_int_eq(r.process_index, 7);
    /* keep a download stream open across the signal */
    char err[512];
    sm_rpc_channel *ch = NULL;
    ck_assert_int_eq(sm_rpc_channel_create(r.address, NULL, &ch, err, sizeof err), SM_OK);
    sm_shape s = shape2(1024, 1024);
    int32_t dev = (int32_t)(r.id * NDEV);
    free(put_random(ch, 1, dev, SM_F64, &s));
    sm_svc_download_req req = {.array = {.id = {1}}, .device = dev};
    sm_svc_download_stream *st = NULL;
    ck_assert_int_eq(sm_svc_download_open(ch, 1, &req, CALL_MS, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    int status = wait_exit(pid, 5000);
    ck_assert_msg(status != -1, "the worker did not exit within 5 s of SIGTERM");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %#x", status);
    sm_svc_download_free(st);
    sm_rpc_channel_free(ch);
}
END_TEST

/* An upload sent without copies to a worker that stopped reading (frozen
 * with SIGSTOP): the stream fails at its deadline and is freed within a
 * bounded wait although the connection still references the data; once
 * the worker resumes, the same connection carries a correct upload. */
START_TEST(test_frozen_worker_upload)
{
    int n0 = fc_nreg();
    pid_t pid = spawn_worker(NULL);
    reg_rec r = wait_registered(n0 + 1);
    char err[512];
    sm_rpc_channel *ch = NULL;
    ck_assert_int_eq(sm_rpc_channel_create(r.address, NULL, &ch, err, sizeof err), SM_OK);
    sm_shape s = shape2(4096, 4096);
    int32_t dev = (int32_t)(r.id * NDEV);
    free(put_random(ch, 1, dev, SM_F32, &s)); /* the connection is up */
    size_t nbytes = 4096 * 4096 * 4;
    char *data = malloc(nbytes);
    fill_random(data, nbytes, 3);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    int64_t t0 = sm_time_mono_ms();
    sm_svc_upload_stream *st = NULL;
    ck_assert_int_eq(sm_svc_upload_open(ch, 1, 1500, &st, err, sizeof err), SM_OK);
    sm_svc_upload_msg m = {.has_header = 1};
    m.header = (sm_svc_upload_header){.array_id = {2},
                                      .ndevices = 1,
                                      .devices = &dev,
                                      .shape = s,
                                      .dtype = SM_F32,
                                      .total_bytes = (int64_t)nbytes};
    sm_err e = sm_svc_upload_send(st, &m, err, sizeof err);
    for (size_t off = 0; !e && off < nbytes; off += SM_SVC_CHUNK) {
        sm_svc_upload_msg c = {.offset = (int64_t)off, .data = data + off, .len = SM_SVC_CHUNK};
        c.stable = 1;
        e = sm_svc_upload_send(st, &c, err, sizeof err);
    }
    ck_assert_int_eq(e, SM_ETIMEOUT);
    sm_svc_upload_abort(st);
    double s_taken = (double)(sm_time_mono_ms() - t0) / 1000.0;
    ck_assert_msg(s_taken < 9.0, "the failed upload took %.1f s to return", s_taken);
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    free(put_random(ch, 3, dev, SM_F32, &s)); /* asserts the upload and its read back */
    sm_rpc_channel_free(ch);
    free(data);
}
END_TEST

START_TEST(test_token)
{
    int n0 = fc_nreg();
    pid_t pid = spawn_worker((const char *const[]){"--token", "s3cret", NULL});
    reg_rec r = wait_registered(n0 + 1);
    char err[512];
    sm_rpc_channel *none = NULL, *good = NULL, *bad = NULL;
    ck_assert_int_eq(sm_rpc_channel_create(r.address, NULL, &none, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_create(r.address, "s3cret", &good, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_create(r.address, "wrong", &bad, err, sizeof err), SM_OK);
    sm_svc_worker_stats st;
    ck_assert_int_eq(sm_svc_worker_stats_get(none, CALL_MS, &st, err, sizeof err), SM_EAUTH);
    ck_assert_int_eq(sm_svc_worker_stats_get(bad, CALL_MS, &st, err, sizeof err), SM_EAUTH);
    ck_assert_msg(sm_svc_worker_stats_get(good, CALL_MS, &st, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(st.ndevices, NDEV);
    sm_rpc_channel_free(none);
    sm_rpc_channel_free(good);
    sm_rpc_channel_free(bad);
    kill(pid, SIGTERM);
    ck_assert_int_ne(wait_exit(pid, 5000), -1);
}
END_TEST

START_TEST(test_usage_errors)
{
    static const struct {
        const char *args[4];
        int code;
    } cases[] = {
        {{"--help", NULL}, 0},
        {{"--devices", "2", NULL}, 2}, /* no coordinator */
        {{"--coordinator", "nohost", NULL}, 2},
        {{"--coordinator", "127.0.0.1:1", "--devices", "0"}, 2},
        {{"--coordinator", "127.0.0.1:1", "--bogus", NULL}, 2},
        {{"--coordinator", "127.0.0.1:1", "--log-level", "loud"}, 2},
        {{"--coordinator", "127.0.0.1:1", "--spin-us", "10001"}, 2},
        {{"--coordinator", "127.0.0.1:1", "--spin-us", "-1"}, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *argv[8] = {harness_worker_bin()};
        for (int j = 0; j < 4 && cases[k].args[j]; j++)
            argv[j + 1] = cases[k].args[j];
        pid_t pid = harness_spawn_child(argv, 1);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == cases[k].code,
                      "case %zu: status %#x", k, status);
    }
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    int rc = harness_run_suite(SUITE_CASE(
        suite_create("worker_proc"), "worker", 0, SUITE_UNCHECKED(setup, teardown),
        {test_registration}, {test_heartbeat}, {test_roundtrip_dtypes}, {test_multichunk_and_boxes},
        {test_get_errors}, {test_bad_uploads}, {test_stats_and_free}, {test_concurrent_clients},
        {test_assemble_local}, {test_assemble_remote}, {test_assemble_large_remote},
        {test_assemble_overlap_zeroed}, {test_coordinator_restart}, {test_sigterm},
        {test_frozen_worker_upload}, {test_token}, {test_usage_errors}));
    kill_workers();
    return rc != EXIT_SUCCESS || bad_exits ? EXIT_FAILURE : EXIT_SUCCESS;
}
