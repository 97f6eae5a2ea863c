/* Check suite for shmap-coordinator as a process: each test starts the real
 * binary (SHMAP_COORDINATOR_BIN, else ../server/shmap-coordinator from the
 * working directory) with two embedded workers of four devices on loopback
 * free ports, in a process group of its own, and talks to it only through
 * sm_svc client calls: uploads and bit-exact downloads, describe, pending
 * and failed arrays, reshard, delete freeing worker memory, a worker killed
 * with SIGKILL, and SIGTERM shutting everything down. Teardown kills the
 * whole process group whatever happened. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sm_checksum.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "suite_main.h"

#define CALL_MS 10000

/* The coordinator under test (one per test; each test runs in its own
 * forked process, so these are that process's only copies). */
typedef struct {
    pid_t pid;
    char dir[64];
    int port;
    int guard_fd; /* write end of the guardian's pipe */
    sm_rpc_channel *ch;
} coord_proc;

static coord_proc cp;

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

/* Alive workers the coordinator reports. */
static int alive_workers(void)
{
    sm_worker_info *w = NULL;
    int n = 0, alive = 0;
    char err[512];
    if (sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &n, err, sizeof err))
        return -1;
    for (int i = 0; i < n; i++)
        alive += w[i].alive;
    free(w);
    return alive;
}

/* Kills the coordinator's whole process group (it and its workers). Also
 * registered with atexit, so a failed assertion (which exits the forked
 * test process) still cleans up. */
static void coord_kill(void)
{
    if (cp.pid > 0) {
        kill(-cp.pid, SIGKILL);
        waitpid(cp.pid, NULL, 0);
        cp.pid = 0;
    }
}

static void coord_start(void)
{
    const char *bin = getenv("SHMAP_COORDINATOR_BIN");
    char portfile[128], listen[] = "127.0.0.1:0";
    if (!bin || !*bin)
        bin = "../server/shmap-coordinator";
    ck_assert_msg(access(bin, X_OK) == 0, "no coordinator binary at %s", bin);
    snprintf(cp.dir, sizeof cp.dir, "/tmp/sm_server_proc.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cp.dir));
    snprintf(portfile, sizeof portfile, "%s/port", cp.dir);
    const char *worker = getenv("SHMAP_WORKER");
    char *argv[16] = {(char *)bin, "--listen",        listen, "--port-file",
                      portfile,    "--local-workers", "2",    "--devices-per-worker",
                      "4",         "--log-level",     "warn"};
    if (worker && *worker) {
        argv[11] = "--worker-binary";
        argv[12] = (char *)worker;
    }
    /* fork + exec rather than posix_spawn: the coordinator gets its own
     * process group (its workers join it) and dies with this test. */
    pid_t parent = getpid();
    cp.pid = fork();
    ck_assert_int_ge(cp.pid, 0);
    if (cp.pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        execv(bin, argv);
        _exit(127);
    }
    setpgid(cp.pid, cp.pid);
    atexit(coord_kill);
    /* A failed assertion ends this process without teardown or atexit: a
     * guardian waits for the end of a pipe only this process writes and
     * then kills the coordinator's group and removes its directory. */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t guard = fork();
    ck_assert_int_ge(guard, 0);
    if (guard == 0) {
        char c;
        ssize_t got;
        close(fds[1]);
        while ((got = read(fds[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (got == 1) /* teardown ran and cleaned up */
            _exit(0);
        kill(-cp.pid, SIGKILL);
        unlink(portfile);
        rmdir(cp.dir);
        _exit(0);
    }
    close(fds[0]);
    cp.guard_fd = fds[1];

    int64_t until = now_ms() + 20000;
    while (now_ms() < until) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            int ok = fscanf(f, "%d", &cp.port) == 1;
            fclose(f);
            if (ok)
                break;
        }
        ck_assert_msg(waitpid(cp.pid, NULL, WNOHANG) == 0, "the coordinator exited at start");
        sleep_ms(20);
    }
    ck_assert_msg(cp.port > 0, "no port file after 20 s");
    char target[64], err[512];
    snprintf(target, sizeof target, "127.0.0.1:%d", cp.port);
    sm_rpc_init();
    ck_assert_int_eq(sm_rpc_channel_create(target, NULL, &cp.ch, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_wait_ready(cp.ch, 10000, err, sizeof err), SM_OK);
    until = now_ms() + 20000;
    while (alive_workers() < 2 && now_ms() < until)
        sleep_ms(50);
    ck_assert_int_eq(alive_workers(), 2);
}

static void coord_setup(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    memset(&cp, 0, sizeof cp);
    coord_start();
}

static void coord_teardown(void)
{
    char path[128];
    if (cp.ch)
        sm_rpc_channel_free(cp.ch);
    coord_kill();
    snprintf(path, sizeof path, "%s/port", cp.dir);
    unlink(path);
    rmdir(cp.dir);
    if (cp.guard_fd > 0) {
        ssize_t w = write(cp.guard_fd, "x", 1); /* the guardian may go */
        (void)w;
        close(cp.guard_fd);
    }
}

/* ---- helpers ------------------------------------------------------------ */

/* Global value of a (rows, cols) f32 test array at (i, j). */
static float val(int64_t i, int64_t j, float salt)
{
    return (float)(i * 1000 + j) + salt;
}

/* The data of box of a (.., cols) array, row-major; malloc'd. */
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

/* Uploads data to devices in chunks of chunk bytes. */
static sm_err upload(sm_array_id id, const int32_t *devs, int ndev, sm_shape shape,
                     const void *data, size_t nbytes, size_t chunk, int *ready, char *err,
                     size_t errlen)
{
    sm_svc_upload_stream *st;
    sm_err e = sm_svc_upload_open(cp.ch, 0, CALL_MS, &st, err, errlen);
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
        e = sm_svc_upload_send(st, &m, err, errlen);
        if (e) {
            sm_svc_upload_abort(st);
            return e;
        }
    } while (off < nbytes);
    sm_svc_upload_reply rep = {0};
    e = sm_svc_upload_finish(st, &rep, err, errlen);
    if (!e) {
        ck_assert_int_eq(rep.bytes, (int64_t)nbytes);
        if (ready)
            *ready = rep.array_ready;
    }
    return e;
}

/* Downloads one device's shard into a malloc'd buffer. */
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
    sm_err e = sm_svc_download_open(cp.ch, 0, &req, CALL_MS, &st, err, errlen);
    if (e)
        return e;
    while (!(e = sm_svc_download_recv(st, &c, &end, err, errlen)) && !end) {
        if (c.has_meta) {
            total = c.total_bytes;
            buf = malloc((size_t)total + 1);
        }
        ck_assert_ptr_nonnull(buf);
        ck_assert_int_le(c.offset + (int64_t)c.len, total);
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

static sm_mesh_info make_mesh(const char *name, const char *axes)
{
    sm_mesh m;
    sm_mesh_info mi;
    char err[512];
    ck_assert_int_eq(sm_mesh_parse(axes, NULL, 0, &m, err, sizeof err), SM_OK);
    m.ndevices = 0;
    ck_assert_msg(sm_svc_coord_create_mesh(cp.ch, CALL_MS, name, &m, 1, &mi, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    return mi;
}

static sm_err create(const char *name, const char *mesh, const char *spec, sm_shape shape,
                     sm_put_kind kind, uint32_t deadline, sm_svc_create_array_reply *rep, char *err,
                     size_t errlen)
{
    sm_svc_create_array_req req = {0};
    req.name = name;
    req.dtype = SM_F32;
    req.has_shape = 1;
    req.shape = shape;
    req.sharding.mesh_name = mesh;
    ck_assert_int_eq(sm_pspec_parse(spec, &req.sharding.spec, err, errlen), SM_OK);
    req.kind = kind;
    req.deadline_ms = deadline;
    return sm_svc_coord_create_array(cp.ch, CALL_MS, &req, rep, err, errlen);
}

/* Creates name over mesh with PUT_WHOLE and uploads every target. */
static sm_array_id put_whole_on(const char *mesh, const char *name, const char *spec,
                                sm_shape shape, float salt)
{
    sm_svc_create_array_reply rep;
    char err[512];
    ck_assert_msg(create(name, mesh, spec, shape, SM_PUT_WHOLE, 0, &rep, err, sizeof err) == SM_OK,
                  "%s", err);
    int ready = 0;
    for (int t = 0; t < rep.ntargets; t++) {
        size_t nb;
        float *d = box_data(&rep.targets[t].global_index, salt, &nb);
        ck_assert_int_eq(ready, 0);
        sm_err e = upload(rep.array.id, rep.targets[t].devices, rep.targets[t].ndevices,
                          rep.array.shard_shape, d, nb, 1000, &ready, err, sizeof err);
        ck_assert_msg(e == SM_OK, "upload of target %d: %s", t, err);
        free(d);
    }
    ck_assert_int_eq(ready, 1);
    sm_array_id id = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    return id;
}

static sm_array_id put_whole(const char *name, const char *spec, sm_shape shape, float salt)
{
    return put_whole_on("m", name, spec, shape, salt);
}

/* Downloads every shard of ref and compares with the expected values. */
static void check_values(sm_array_ref ref, float salt)
{
    sm_array_info info;
    char err[512];
    ck_assert_msg(sm_svc_coord_describe(cp.ch, CALL_MS, ref, &info, err, sizeof err) == SM_OK, "%s",
                  err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    for (int s = 0; s < info.nshards; s++) {
        void *got;
        size_t nb, want_nb;
        ck_assert_msg(download(ref, info.shards[s].device, &got, &nb, err, sizeof err) == SM_OK,
                      "device %d: %s", info.shards[s].device, err);
        float *want = box_data(&info.shards[s].index, salt, &want_nb);
        ck_assert_int_eq(nb, want_nb);
        ck_assert_msg(memcmp(got, want, nb) == 0, "device %d: data differs", info.shards[s].device);
        free(got);
        free(want);
    }
    sm_array_info_free(&info);
}

static sm_array_state state_of(sm_array_ref ref, char *error, size_t len)
{
    sm_array_info info;
    char err[512];
    ck_assert_msg(sm_svc_coord_describe(cp.ch, CALL_MS, ref, &info, err, sizeof err) == SM_OK, "%s",
                  err);
    sm_array_state s = info.state;
    if (error)
        snprintf(error, len, "%s", info.error);
    sm_array_info_free(&info);
    return s;
}

/* Polls until ref reaches state, at most ms. */
static int wait_state(sm_array_ref ref, sm_array_state want, int ms)
{
    int64_t until = now_ms() + ms;
    while (state_of(ref, NULL, 0) != want && now_ms() < until)
        sleep_ms(20);
    return state_of(ref, NULL, 0) == want;
}

static int64_t total_device_bytes(void)
{
    sm_worker_info *w = NULL;
    int n = 0;
    int64_t total = 0;
    char err[512];
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &n, err, sizeof err), SM_OK);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < w[i].ndevices; k++)
            total += w[i].device_bytes[k];
    free(w);
    return total;
}

/* Child processes of pid (the local workers). */
static int children_of(pid_t pid, pid_t *out, int max)
{
    int n = 0;
    char cmd[96];
    snprintf(cmd, sizeof cmd, "pgrep -P %d", (int)pid);
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    int v;
    while (n < max && fscanf(p, "%d", &v) == 1)
        out[n++] = v;
    pclose(p);
    return n;
}

static const sm_shape g16x32 = {2, {16, 32}};

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_roundtrip_and_describe)
{
    char err[512];
    sm_mesh_info mi = make_mesh("m", "i=2,j=4");
    /* default order: the worker with process index 0 first (it need not
     * have registered first, so it may hold devices 4..7) */
    sm_worker_info *w;
    int nw;
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &nw, err, sizeof err), SM_OK);
    ck_assert_int_eq(nw, 2);
    const sm_worker_info *p0 = w[0].process_index == 0 ? &w[0] : &w[1];
    const sm_worker_info *p1 = p0 == &w[0] ? &w[1] : &w[0];
    ck_assert_int_eq(p1->process_index, 1);
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(mi.mesh.devices[k], k < 4 ? p0->devices[k] : p1->devices[k - 4]);
    sm_array_id id = put_whole("a", "P('i','j')", g16x32, 0.5f);
    sm_array_ref ref = {id, NULL};
    check_values(ref, 0.5f);
    check_values((sm_array_ref){{0}, "a"}, 0.5f);

    sm_array_info info;
    ck_assert_int_eq(sm_svc_coord_describe(cp.ch, CALL_MS, ref, &info, err, sizeof err), SM_OK);
    ck_assert_str_eq(info.name, "a");
    ck_assert_str_eq(info.type, "f32[16@i,32@j]");
    ck_assert_str_eq(info.mesh_name, "m");
    ck_assert_int_eq(info.shard_shape.dims[0], 8);
    ck_assert_int_eq(info.shard_shape.dims[1], 8);
    ck_assert_int_eq(info.bytes, 16 * 32 * 4);
    ck_assert_int_eq(info.nshards, 8);
    for (int s = 0; s < 8; s++) {
        ck_assert_int_eq(info.shards[s].present, 1);
        ck_assert_int_eq(info.shards[s].worker_id.v, s < 4 ? p0->id.v : p1->id.v);
        ck_assert_ptr_nonnull(strstr(info.shards[s].worker_address, "127.0.0.1:"));
    }
    ck_assert_int_eq(info.shards[5].coords[0], 1);
    ck_assert_int_eq(info.shards[5].coords[1], 1);
    ck_assert_int_eq(info.shards[5].index.r[1].start, 8);
    sm_array_info_free(&info);
    free(w);

    /* replicated: one target for all 8 devices, each a full copy */
    sm_array_id rid = put_whole("r", "P()", g16x32, 2.0f);
    check_values((sm_array_ref){rid, NULL}, 2.0f);

    /* a pending array cannot be read; bad uploads are refused and change nothing */
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("p", "m", "P('i', None)", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err), SM_OK);
    void *got;
    size_t nb;
    ck_assert_int_eq(download((sm_array_ref){rep.array.id, NULL}, 0, &got, &nb, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_msg(strstr(err, "array 'p' is pending (0 of 8 shards arrived)"), "%s", err);
    float junk[64] = {0};
    sm_shape wrong = {2, {4, 4}};
    ck_assert_int_eq(upload(rep.array.id, rep.targets[0].devices, rep.targets[0].ndevices, wrong,
                            junk, sizeof junk, 1000, NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_msg(strstr(err, "shard shape"), "%s", err);
    int32_t nodev = 42;
    ck_assert_int_eq(upload(rep.array.id, &nodev, 1, rep.array.shard_shape, junk, sizeof junk, 1000,
                            NULL, err, sizeof err),
                     SM_EINVAL);
    sm_svc_create_array_reply_free(&rep);
    ck_assert_int_eq(create("a", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EEXIST);
    ck_assert_int_eq(create("12", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(create("q", "m", "P('k')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    sm_svc_create_array_reply_free(&rep);
    check_values(ref, 0.5f);

    sm_array_info *list;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_arrays(cp.ch, CALL_MS, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 3);
    sm_array_info_list_free(list, n);
}
END_TEST

START_TEST(test_deadline_fails)
{
    char err[512], error[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("late", "m", "P('i', None)", g16x32, SM_PUT_SHARDS, 400, &rep, err, sizeof err),
        SM_OK);
    ck_assert_int_eq(rep.ntargets, 8);
    size_t nb;
    float *d = box_data(&rep.targets[0].global_index, 0, &nb);
    ck_assert_int_eq(upload(rep.array.id, rep.targets[0].devices, 1, rep.array.shard_shape, d, nb,
                            4096, NULL, err, sizeof err),
                     SM_OK);
    free(d);
    sm_array_ref ref = {rep.array.id, NULL};
    ck_assert(wait_state(ref, SM_ARRAY_FAILED, 5000));
    state_of(ref, error, sizeof error);
    /* the uploaded device is the first of process 0: 0 or 4 */
    const char *want = rep.targets[0].devices[0] == 0 ? "devices 1,2,3,4,5,6,7 never received "
                                                        "data before the 400 ms"
                                                      : "devices 0,1,2,3,5,6,7 never received "
                                                        "data before the 400 ms";
    ck_assert_msg(strstr(error, want), "%s", error);
    void *got;
    ck_assert_int_eq(download(ref, 0, &got, &nb, err, sizeof err), SM_EPRECONDITION);
    ck_assert_ptr_nonnull(strstr(err, "failed"));
    sm_svc_create_array_reply_free(&rep);
}
END_TEST

START_TEST(test_reshard_values)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("src", "P('i','j')", g16x32, 7.0f);
    const char *specs[] = {"P(None, 'j')", "P('j', 'i')", "P()", "P(('i','j'), None)"};
    for (int k = 0; k < 4; k++) {
        sm_svc_reshard_req rq = {0};
        char name[16];
        snprintf(name, sizeof name, "dst%d", k);
        rq.array.id = id;
        rq.sharding.mesh_name = "m";
        ck_assert_int_eq(sm_pspec_parse(specs[k], &rq.sharding.spec, err, sizeof err), SM_OK);
        rq.name = name;
        sm_array_info info;
        ck_assert_msg(sm_svc_coord_reshard(cp.ch, CALL_MS, &rq, &info, err, sizeof err) == SM_OK,
                      "%s: %s", specs[k], err);
        ck_assert_int_eq(info.state, SM_ARRAY_READY);
        check_values((sm_array_ref){info.id, NULL}, 7.0f);
        sm_array_info_free(&info);
    }
    check_values((sm_array_ref){id, NULL}, 7.0f); /* the source is untouched */
    /* a spec that does not divide the shape is refused */
    sm_svc_reshard_req rq = {0};
    rq.array.id = id;
    rq.sharding.mesh_name = "m";
    sm_mesh_info odd = make_mesh("odd", "x=8");
    (void)odd;
    rq.sharding.mesh_name = "odd";
    ck_assert_int_eq(sm_pspec_parse("P(None, None, 'x')", &rq.sharding.spec, err, sizeof err),
                     SM_OK);
    sm_array_info info;
    ck_assert_int_eq(sm_svc_coord_reshard(cp.ch, CALL_MS, &rq, &info, err, sizeof err), SM_EINVAL);
}
END_TEST

START_TEST(test_delete_frees_worker_memory)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("big", "P('i', None)", (sm_shape){2, {256, 512}}, 1.0f);
    int64_t until = now_ms() + 5000;
    while (total_device_bytes() < 4 * 256 * 512 * 4 && now_ms() < until)
        sleep_ms(50);
    /* P('i', None) over i=2,j=4: each row block on 4 devices: 4 full copies */
    ck_assert_int_eq(total_device_bytes(), 4 * 256 * 512 * 4);
    ck_assert_int_eq(sm_svc_coord_delete(cp.ch, CALL_MS, (sm_array_ref){id, NULL}, err, sizeof err),
                     SM_OK);
    until = now_ms() + 5000;
    while (total_device_bytes() != 0 && now_ms() < until)
        sleep_ms(50);
    ck_assert_int_eq(total_device_bytes(), 0);
    ck_assert_int_eq(sm_svc_coord_delete(cp.ch, CALL_MS, (sm_array_ref){id, NULL}, err, sizeof err),
                     SM_ENOTFOUND);
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(cp.ch, CALL_MS, (sm_array_ref){{0}, "big"}, &info, err, sizeof err),
        SM_ENOTFOUND);
}
END_TEST

START_TEST(test_worker_killed)
{
    char err[512], error[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("k", "P('i','j')", g16x32, 3.0f);
    pid_t kids[8];
    ck_assert_int_eq(children_of(cp.pid, kids, 8), 2);
    /* which child is process 1 does not matter: either loses half the devices */
    ck_assert_int_eq(kill(kids[1], SIGKILL), 0);
    int64_t until = now_ms() + 2000;
    while (alive_workers() != 1 && now_ms() < until)
        sleep_ms(20);
    ck_assert_int_eq(alive_workers(), 1);
    sm_array_ref ref = {id, NULL};
    ck_assert(wait_state(ref, SM_ARRAY_LOST, 2000));
    state_of(ref, error, sizeof error);
    ck_assert_msg(strstr(error, "devices 0,1,2,3 are gone") || strstr(error, "devices 4,5,6,7 are "
                                                                             "gone"),
                  "%s", error);
    void *got;
    size_t nb;
    ck_assert_int_eq(download(ref, 0, &got, &nb, err, sizeof err), SM_EPRECONDITION);
    /* still serving: a mesh over the survivor works end to end */
    make_mesh("m4", "x=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("after", "m4", "P('x')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err), SM_OK);
    sm_svc_create_array_reply_free(&rep);
    ck_assert_int_eq(
        create("after2", "m", "P('i')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
        SM_EUNAVAILABLE);
}
END_TEST

START_TEST(test_put_local_two_processes)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_req req = {0};
    req.name = "loc";
    req.dtype = SM_F32;
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse("P('i', None)", &req.sharding.spec, err, sizeof err), SM_OK);
    req.kind = SM_PUT_LOCAL;
    req.local_shape = (sm_shape){2, {8, 32}};
    sm_array_id id = {0};
    int ready = 0;
    for (int p = 0; p < 2; p++) {
        sm_svc_create_array_reply rep;
        req.process = p;
        ck_assert_msg(sm_svc_coord_create_array(cp.ch, CALL_MS, &req, &rep, err, sizeof err) ==
                          SM_OK,
                      "process %d: %s", p, err);
        ck_assert_int_eq(rep.array.shape.dims[0], 16); /* inferred */
        ck_assert(p == 0 || rep.array.id.v == id.v);
        id = rep.array.id;
        /* process p's four devices share one row block: one target */
        ck_assert_int_eq(rep.ntargets, 1);
        ck_assert_int_eq(rep.targets[0].ndevices, 4);
        ck_assert_int_eq(rep.targets[0].global_index.r[0].start, 8 * p);
        ck_assert_int_eq(rep.targets[0].local_slice.r[0].start, 0);
        size_t nb;
        float *d = box_data(&rep.targets[0].global_index, 4.0f, &nb);
        ck_assert_int_eq(ready, 0);
        ck_assert_msg(upload(id, rep.targets[0].devices, 4, rep.array.shard_shape, d, nb, 300,
                             &ready, err, sizeof err) == SM_OK,
                      "%s", err);
        free(d);
        sm_svc_create_array_reply_free(&rep);
        if (p == 0) {
            /* a part that disagrees is refused and changes nothing */
            req.process = 1;
            req.local_shape = (sm_shape){2, {8, 16}};
            ck_assert_int_eq(sm_svc_coord_create_array(cp.ch, CALL_MS, &req, &rep, err, sizeof err),
                             SM_EINVAL);
            ck_assert_msg(strstr(err, "[8,32]"), "%s", err);
            req.local_shape = (sm_shape){2, {8, 32}};
        }
    }
    ck_assert_int_eq(ready, 1);
    check_values((sm_array_ref){id, NULL}, 4.0f);
}
END_TEST

/* Sends the header message with the first n bytes of data, then msgs. */
static sm_err raw_upload(const sm_svc_create_array_reply *rep, const float *d, size_t nb,
                         int abort_after_first, int bad_offset, uint64_t checksum, char *err,
                         size_t errlen)
{
    sm_svc_upload_stream *st;
    sm_err e = sm_svc_upload_open(cp.ch, 0, CALL_MS, &st, err, errlen);
    if (e)
        return e;
    sm_svc_upload_msg m = {0};
    m.has_header = 1;
    m.header = (sm_svc_upload_header){rep->array.id,
                                      rep->targets[0].ndevices,
                                      rep->targets[0].devices,
                                      rep->array.shard_shape,
                                      SM_F32,
                                      (int64_t)nb};
    m.data = d;
    m.len = nb / 2;
    if ((e = sm_svc_upload_send(st, &m, err, errlen))) {
        sm_svc_upload_abort(st);
        return e;
    }
    if (abort_after_first) {
        sm_svc_upload_abort(st);
        return SM_ECANCELLED;
    }
    sm_svc_upload_msg m2 = {0};
    m2.offset = (int64_t)(nb / 2) + (bad_offset ? 4 : 0);
    m2.data = (const char *)d + nb / 2;
    m2.len = nb - nb / 2;
    m2.last = 1;
    m2.checksum = checksum;
    if ((e = sm_svc_upload_send(st, &m2, err, errlen))) {
        sm_svc_upload_abort(st);
        return e;
    }
    return sm_svc_upload_finish(st, NULL, err, errlen);
}

START_TEST(test_bad_streams_leave_array_pending)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(create("s", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_OK);
    size_t nb;
    float *d = box_data(&rep.targets[0].global_index, 9.0f, &nb);
    uint64_t sum = sm_checksum_oneshot(d, nb);
    /* a chunk out of order */
    ck_assert_int_eq(raw_upload(&rep, d, nb, 0, 1, sum, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "out of order"), "%s", err);
    /* a wrong checksum: the workers refuse the shard */
    ck_assert_int_eq(raw_upload(&rep, d, nb, 0, 0, sum ^ 1, err, sizeof err), SM_EDATALOSS);
    /* a client that goes away mid-upload */
    ck_assert_int_eq(raw_upload(&rep, d, nb, 1, 0, sum, err, sizeof err), SM_ECANCELLED);
    char error[512];
    ck_assert_int_eq(state_of((sm_array_ref){rep.array.id, NULL}, error, sizeof error),
                     SM_ARRAY_PENDING);
    /* the target may be sent again (once the coordinator saw the cancel) */
    sm_err e;
    int64_t until = now_ms() + 3000;
    while ((e = raw_upload(&rep, d, nb, 0, 0, sum, err, sizeof err)) == SM_EPRECONDITION &&
           now_ms() < until)
        sleep_ms(20);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_int_eq(state_of((sm_array_ref){rep.array.id, NULL}, error, sizeof error),
                     SM_ARRAY_READY);
    check_values((sm_array_ref){rep.array.id, NULL}, 9.0f);
    free(d);
    sm_svc_create_array_reply_free(&rep);
}
END_TEST

START_TEST(test_silent_worker_lost_then_back)
{
    char err[512], error[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("z", "P('i','j')", g16x32, 5.0f);
    pid_t kids[8];
    ck_assert_int_eq(children_of(cp.pid, kids, 8), 2);
    /* a stopped worker sends no heartbeats: lost after --lost-after-ms (3 s) */
    ck_assert_int_eq(kill(kids[0], SIGSTOP), 0);
    int64_t until = now_ms() + 8000;
    while (alive_workers() != 1 && now_ms() < until)
        sleep_ms(50);
    ck_assert_int_eq(alive_workers(), 1);
    ck_assert(wait_state((sm_array_ref){id, NULL}, SM_ARRAY_LOST, 1000));
    state_of((sm_array_ref){id, NULL}, error, sizeof error);
    ck_assert_msg(strstr(error, "no heartbeat for"), "%s", error);
    /* resumed, it hears known = false and registers again asking for its
     * old identity (same worker id, devices and process index), offering
     * back the shards it kept: the array is ready again, unchanged */
    ck_assert_int_eq(kill(kids[0], SIGCONT), 0);
    until = now_ms() + 8000;
    while (alive_workers() != 2 && now_ms() < until)
        sleep_ms(50);
    ck_assert_int_eq(alive_workers(), 2);
    sm_worker_info *w;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(w[0].alive && w[1].alive, 1);
    ck_assert_int_eq(w[0].devices[0] + w[1].devices[0], 4);
    free(w);
    ck_assert(wait_state((sm_array_ref){id, NULL}, SM_ARRAY_READY, 5000));
    check_values((sm_array_ref){id, NULL}, 5.0f);
    sm_array_id id2 = put_whole_on("m", "z2", "P('i','j')", g16x32, 6.0f);
    check_values((sm_array_ref){id2, NULL}, 6.0f);
}
END_TEST

START_TEST(test_sigterm_exits_clean)
{
    pid_t kids[8];
    int n = children_of(cp.pid, kids, 8);
    ck_assert_int_eq(n, 2);
    sm_rpc_channel_free(cp.ch);
    cp.ch = NULL;
    ck_assert_int_eq(kill(cp.pid, SIGTERM), 0);
    int st = 0;
    pid_t got = 0;
    int64_t until = now_ms() + 15000;
    while ((got = waitpid(cp.pid, &st, WNOHANG)) == 0 && now_ms() < until)
        sleep_ms(20);
    ck_assert_int_eq(got, cp.pid);
    cp.pid = 0;
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    for (int k = 0; k < n; k++)
        ck_assert_msg(kill(kids[k], 0) != 0 && errno == ESRCH, "worker %d still exists",
                      (int)kids[k]);
}
END_TEST

static Suite *server_proc_suite(void)
{
    Suite *s = suite_create("server_proc");
    TCase *tc = tcase_create("coordinator");
    tcase_add_checked_fixture(tc, coord_setup, coord_teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_roundtrip_and_describe);
    tcase_add_test(tc, test_deadline_fails);
    tcase_add_test(tc, test_reshard_values);
    tcase_add_test(tc, test_delete_frees_worker_memory);
    tcase_add_test(tc, test_worker_killed);
    tcase_add_test(tc, test_put_local_two_processes);
    tcase_add_test(tc, test_bad_streams_leave_array_pending);
    tcase_add_test(tc, test_silent_worker_lost_then_back);
    tcase_add_test(tc, test_sigterm_exits_clean);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return suite_main(server_proc_suite());
}
